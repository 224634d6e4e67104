"""The project's one CEL engine: DRA device selectors, compiled once, evaluated per device.

Backed by cel-expr-python (Google's C++ CEL runtime), the fastest engine that
has the features selectors need (measured in ``benchmarks/bench_sim.py``).
The environment is the one kube-scheduler 1.36 compiles selectors in
(``staging/src/k8s.io/dynamic-resource-allocation/cel/compile.go`` on the base
environment of ``staging/src/k8s.io/apiserver/pkg/cel/environment/base.go`` and
the libraries of ``.../apiserver/pkg/cel/library/``, Kubernetes v1.36.2, stored
expressions):

- ``device`` typed as there: ``driver`` string, ``attributes``
  ``map(string, map(string, any))``, ``capacity``
  ``map(string, map(string, kubernetes.Quantity))``, ``allowMultipleAllocations``
  bool; names are split at the first ``/`` into domain and id (no ``/``: the
  driver is the domain); ``device.attributes[<unknown domain>]`` is an empty
  map, an unknown id is an error ("no such key");
- the result must be bool or ``any``;
- cel.bind, optionals, the string extension v2, the sets extension, the list
  extension, two-variable comprehensions, cross-type numeric comparisons,
  homogeneous aggregate literals;
- the Kubernetes ``quantity`` and ``semver`` types and their functions, the
  Kubernetes list library (``isSorted``, ``sum``, ``min``, ``max``, ``indexOf``,
  ``lastIndexOf``), regular expressions ``find``/``findAll`` (RE2, as Go's
  ``regexp``), the ``ip``, ``cidr``, ``url`` and ``format`` libraries (``celnet``,
  bound in ``celnetlib``), and DRA's ``includes``;
- what cel-go decides before a program runs: regex literals of ``matches`` and
  duration literals (the AST validators), ``find``/``findAll`` patterns (program
  instantiation).

Expressions are type-checked in an environment declared with those exact types
(so what cel-go rejects with "found no matching overload" is a compile error
here too) and run in a twin environment whose variables are dynamic: the C++
runtime refuses plain maps for a variable declared as a message, and the
checked expression carries everything else. Messages are cel-go's: the C++
runtime's are rewritten where its wording differs. The conformance set in
``tests/data/cel-go/`` (recorded from the Go packages themselves) checks both.

Not provided: the cost limits (the estimated cost at compile time, the actual cost
per evaluation); the other differences left are listed in docs/simulator.md
("Limits and known differences") and asserted in tests/sim/test_cel_go.py.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from fractions import Fraction
from functools import lru_cache
from typing import Any, Final

from topodra.quantity import Quantity, QuantityError, parse_quantity
from topodra.sim.celnetlib import NetLibrary
from topodra.sim.semver import Semver, SemverError, parse_semver

__all__ = [
    "CelError",
    "CelCompileError",
    "CelRuntimeError",
    "CelDevice",
    "CompiledSelector",
    "compile_expression",
    "compile_selector",
    "attribute_value",
    "split_qualified_name",
    "INCLUDES_MAX_LIST",
]

#: ``includes()`` refuses lists longer than the per-device value limit.
INCLUDES_MAX_LIST = 48
MAX_EXPRESSION_LENGTH = 10 * 1024


class CelError(Exception):
    """A CEL problem, naming the expression (and the position when known)."""

    def __init__(self, expression: str, message: str, position: int | None = None, line: int = 1) -> None:
        self.expression = expression
        self.message = message
        self.position = position  # column within ``line``, from 1
        self.line = line
        where = f" at column {position}" if position is not None else ""
        super().__init__(f"{message}{where} in CEL expression {expression!r}")


class CelCompileError(CelError):
    """The expression does not compile in the DRA environment. ``issues``: cel-go's issues as
    (line, column, message); ``kind``: how compile.go words it ("compilation failed: ...", a
    result of the wrong type, or a program that cannot be instantiated)."""

    def __init__(
        self, expression: str, message: str, position: int | None = None, line: int = 1, *, issues: tuple[tuple[int, int, str], ...] = (), kind: str = "issues"
    ) -> None:
        super().__init__(expression, message, position, line)
        self.issues = issues or ((line, position or 1, message),)
        self.kind = kind

    def detail(self) -> str:
        """The ``Detail`` of compile.go's ``CompilationResult.Error``, word for word."""
        if self.kind != "issues":
            return self.message
        lines = self.expression.split("\n")
        out = []
        for line, col, msg in self.issues:
            text = lines[line - 1] if 0 < line <= len(lines) else self.expression
            out.append(f"ERROR: <input>:{line}:{col}: {msg}\n | {text}\n | {'.' * (col - 1)}^")
        return "compilation failed: " + "\n".join(out)


class CelRuntimeError(CelError):
    """Evaluating the expression failed; ``message`` is cel-go's error (for example
    "no such key: id")."""


def split_qualified_name(name: str, driver: str) -> tuple[str, str]:
    """``"dra.cpu/coreID"`` -> ``("dra.cpu", "coreID")``; unqualified names get the driver's domain."""
    sep = name.find("/")
    if sep < 0:
        return driver, name
    return name[:sep], name[sep + 1 :]


# --- the runtime: protobuf types and library functions --------------------------------------


#: ``topodra/sim/cel_types.proto`` serialised (proto3, package ``kubernetes`` so that types read
#: as cel-go names them): ``Quantity {string amount = 1}``, ``Semver {int64 major = 1; int64
#: minor = 2; int64 patch = 3; string pre = 4}``, ``DRADevice {string driver = 1; bool
#: allowMultipleAllocations = 2}`` (the type of ``device`` in messages), ``URL {string raw = 1}``,
#: ``NamedFormat {string name = 1}``, and the runtime's stand-ins for optionals of the format
#: library (``celnetlib``): ``OptionalStrings {bool present = 1; repeated string values = 2}``,
#: ``OptionalFormat {bool present = 1; string name = 2}``. Written out because
#: building it with ``descriptor_pb2`` costs that module's import on every run's first compile;
#: a test rebuilds it with ``descriptor_pb2`` and compares.
CEL_TYPES_PROTO = (
    b'\n\x1btopodra/sim/cel_types.proto\x12\nkubernetes"\x1a\n\x08Quantity\x12\x0e\n\x06amount\x18\x01 '
    b'\x01(\t"B\n\x06Semver\x12\r\n\x05major\x18\x01 \x01(\x03\x12\r\n\x05minor\x18\x02 \x01(\x03\x12\r\n'
    b'\x05patch\x18\x03 \x01(\x03\x12\x0b\n\x03pre\x18\x04 \x01(\t"=\n\tDRADevice\x12\x0e\n\x06driver\x18'
    b'\x01 \x01(\t\x12 \n\x18allowMultipleAllocations\x18\x02 \x01(\x08"\x12\n\x03URL\x12\x0b\n\x03raw\x18'
    b'\x01 \x01(\t"\x1b\n\x0bNamedFormat\x12\x0c\n\x04name\x18\x01 \x01(\t"2\n\x0fOptionalStrings\x12\x0f'
    b'\n\x07present\x18\x01 \x01(\x08\x12\x0e\n\x06values\x18\x02 \x03(\t"/\n\x0eOptionalFormat\x12\x0f\n'
    b'\x07present\x18\x01 \x01(\x08\x12\x0c\n\x04name\x18\x02 \x01(\tb\x06proto3'
)

#: The extensions of the base environment (environment/base.go and compile.go), as the C++
#: runtime names them.
_EXTENSIONS_YAML = """extensions:
  - name: bindings
  - name: optional
  - name: strings
    version: 2
  - name: sets
  - name: lists
    version: latest
  - name: cel.lib.ext.comprev2
"""

_DEVICE_VARS = ("device.driver", "device.attributes", "device.capacity", "device.allowMultipleAllocations")


def _message_types() -> tuple[Any, Any, Any]:
    """The descriptor pool with :data:`CEL_TYPES_PROTO` (and ``google.protobuf.Any``), and the
    Quantity and Semver classes."""
    from google.protobuf import any_pb2, descriptor_pool, message_factory

    from topodra.sim.celnetlib import NET_TYPES_PROTO

    pool = descriptor_pool.DescriptorPool()
    pool.AddSerializedFile(any_pb2.DESCRIPTOR.serialized_pb)
    pool.AddSerializedFile(CEL_TYPES_PROTO)
    pool.AddSerializedFile(NET_TYPES_PROTO)
    quantity = message_factory.GetMessageClass(pool.FindMessageTypeByName("kubernetes.Quantity"))
    semver = message_factory.GetMessageClass(pool.FindMessageTypeByName("kubernetes.Semver"))
    return pool, quantity, semver


class _Runtime:
    """The two cel-expr-python environments with the Kubernetes libraries (built once): one
    declared with the exact types to check, one with dynamic variables to run."""

    def __init__(self) -> None:
        from cel_expr_python import cel  # type: ignore[import-untyped]

        pool, self.QuantityMsg, self.SemverMsg = _message_types()
        self.cel = cel
        T = cel.Type
        Q = T("kubernetes.Quantity")
        declared = {
            "device": T("kubernetes.DRADevice"),
            "device.driver": T.STRING,
            "device.attributes": T.Map(T.STRING, T.Map(T.STRING, T("google.protobuf.Any"))),
            "device.capacity": T.Map(T.STRING, T.Map(T.STRING, Q)),
            "device.allowMultipleAllocations": T.BOOL,
        }
        lib = _KubernetesLibrary(self, NetLibrary(cel, pool))
        config = cel.NewEnvConfigFromYaml(_EXTENSIONS_YAML)
        self.checker = cel.NewEnv(pool, config=config, variables=declared, extensions=[cel.CelExtension("kubernetes", lib.declared())])
        # DRAListTypeAttributes: attributes typed dyn (a value may be a scalar or a list)
        self._lists_checker: Any = None
        self._lists_args = (pool, config, {**declared, "device.attributes": T.Map(T.STRING, T.Map(T.STRING, T.DYN))}, lib)
        self.dyn_type = T.DYN
        self.env = cel.NewEnv(
            pool, config=config, variables=dict.fromkeys(declared, T.DYN), extensions=[cel.CelExtension("kubernetes", lib.runtime())]
        )
        self.error_type = T.ERROR
        self.bool_type = T.BOOL

    def checker_for(self, lists: bool) -> Any:
        """The checker of the environment with ``DRAListTypeAttributes`` on or off (built on first use)."""
        if not lists:
            return self.checker
        if self._lists_checker is None:
            pool, config, declared, lib = self._lists_args
            ext = [self.cel.CelExtension("kubernetes", lib.declared())]
            self._lists_checker = self.cel.NewEnv(pool, config=config, variables=declared, extensions=ext)
        return self._lists_checker

    # conversions between Python values and the messages the runtime carries
    def msg_of_quantity(self, q: Quantity) -> Any:
        a = q.amount
        return self.QuantityMsg(amount=f"{a.numerator}/{a.denominator}")

    def q_of(self, msg: Any) -> Quantity:
        return Quantity(Fraction(msg.amount))

    def msg_of_semver(self, v: Semver) -> Any:
        return self.SemverMsg(major=v.major, minor=v.minor, patch=v.patch, pre=".".join(v.pre))

    def s_of(self, msg: Any) -> Semver:
        return Semver(msg.major, msg.minor, msg.patch, tuple(msg.pre.split(".")) if msg.pre else ())

    def to_python(self, value: Any) -> Any:
        """A runtime value as plain Python (Quantity/Semver for the messages)."""
        if isinstance(value, self.cel.Value):
            value = value.value()
        if isinstance(value, self.QuantityMsg):
            return self.q_of(value)
        if isinstance(value, self.SemverMsg):
            return self.s_of(value)
        if isinstance(value, list):
            return [self.to_python(v) for v in value]
        if isinstance(value, dict):
            return {k: self.to_python(v) for k, v in value.items()}
        return value


class _KubernetesLibrary:
    """The Kubernetes CEL libraries DRA selectors see, as extension functions: the declarations
    for the checker (cel-go's overloads) and the implementations for the runtime (one dynamic
    overload per function and arity: the runtime dispatches on argument kinds, and Quantity and
    Semver are both messages to it)."""

    _COMPARABLE = ("INT", "UINT", "DOUBLE", "BOOL", "DURATION", "TIMESTAMP", "STRING", "BYTES")
    _SUMMABLE = ("INT", "UINT", "DOUBLE", "DURATION")

    def __init__(self, rt: _Runtime, net: NetLibrary) -> None:
        self.rt = rt
        self.cel = rt.cel
        self.net = net

    def _fn(self, name: str, *overloads: tuple[str, Any, list[Any], bool, Callable[..., Any]]) -> Any:
        cel = self.cel
        return cel.FunctionDecl(name, [cel.Overload(o, r, p, is_member=m, impl=f) for o, r, p, m, f in overloads])

    def declared(self) -> list[Any]:
        """cel-go's overloads (quantity.go, semverlib.go, lists.go, regex.go, compile.go's includes)."""
        T = self.cel.Type
        Q, S = T("kubernetes.Quantity"), T("kubernetes.Semver")
        A = T.AbstractType("A")
        never = _never
        fn = self._fn
        out = [
            fn("quantity", ("string_to_quantity", Q, [T.STRING], False, never)),
            fn("isQuantity", ("is_quantity_string", T.BOOL, [T.STRING], False, never)),
            fn("sign", ("quantity_sign", T.INT, [Q], False, never)),
            fn("asApproximateFloat", ("quantity_get_float", T.DOUBLE, [Q], True, never)),
            fn("asInteger", ("quantity_get_int", T.INT, [Q], True, never)),
            fn("isInteger", ("quantity_is_integer", T.BOOL, [Q], True, never)),
            fn("add", ("quantity_add", Q, [Q, Q], True, never), ("quantity_add_int", Q, [Q, T.INT], True, never)),
            fn("sub", ("quantity_sub", Q, [Q, Q], True, never), ("quantity_sub_int", Q, [Q, T.INT], True, never)),
            fn("semver", ("string_to_semver", S, [T.STRING], False, never), ("string_bool_to_semver", S, [T.STRING, T.BOOL], False, never)),
            fn("isSemver", ("is_semver_string", T.BOOL, [T.STRING], False, never), ("is_semver_string_bool", T.BOOL, [T.STRING, T.BOOL], False, never)),
            fn("major", ("semver_major", T.INT, [S], True, never)),
            fn("minor", ("semver_minor", T.INT, [S], True, never)),
            fn("patch", ("semver_patch", T.INT, [S], True, never)),
            fn("find", ("string_find_string", T.STRING, [T.STRING, T.STRING], True, never)),
            fn(
                "findAll",
                ("string_find_all_string", T.List(T.STRING), [T.STRING, T.STRING], True, never),
                ("string_find_all_string_int", T.List(T.STRING), [T.STRING, T.STRING, T.INT], True, never),
            ),
            fn("indexOf", ("list_a_index_of_int", T.INT, [T.List(A), A], True, never)),
            fn("lastIndexOf", ("list_a_last_index_of_int", T.INT, [T.List(A), A], True, never)),
            fn("includes", ("dra_includes_dyn_dyn", T.BOOL, [T.DYN, T.DYN], True, never)),
        ]
        for name, ret in (("isGreaterThan", T.BOOL), ("isLessThan", T.BOOL), ("compareTo", T.INT)):
            snake = {"isGreaterThan": "is_greater_than", "isLessThan": "is_less_than", "compareTo": "compare_to"}[name]
            out.append(fn(name, (f"quantity_{snake}", ret, [Q, Q], True, never), (f"semver_{snake}", ret, [S, S], True, never)))
        for name, kinds in (("isSorted", self._COMPARABLE), ("sum", self._SUMMABLE), ("min", self._COMPARABLE), ("max", self._COMPARABLE)):
            overloads = []
            for k in kinds:
                t = getattr(T, k)
                overloads.append((f"list_{k.lower()}_{name}", T.BOOL if name == "isSorted" else t, [T.List(t)], True, never))
            out.append(fn(name, *overloads))
        return out + self.net.declared()

    def runtime(self) -> list[Any]:
        """The implementations, one dynamic overload per function and arity."""
        T = self.cel.Type
        D, L = T.DYN, T.List(T.DYN)
        rt = self.rt
        mq = rt.msg_of_quantity
        fn = self._fn
        return [
            fn("quantity", ("string_to_quantity", D, [T.STRING], False, lambda x: mq(_quantity(x)))),
            fn("isQuantity", ("is_quantity_string", T.BOOL, [T.STRING], False, _is_quantity)),
            fn("sign", ("quantity_sign", T.INT, [D], False, lambda a: _sign(self._q("sign", a).amount))),
            fn("asApproximateFloat", ("quantity_get_float", T.DOUBLE, [D], True, lambda a: float(self._q("asApproximateFloat", a).amount))),
            fn("asInteger", ("quantity_get_int", T.INT, [D], True, lambda a: _as_integer(self._q("asInteger", a)))),
            fn("isInteger", ("quantity_is_integer", T.BOOL, [D], True, lambda a: _is_int64(self._q("isInteger", a)))),
            fn("add", ("k8s_add", D, [D, D], True, lambda a, b: mq(self._q("add", a, b) + self._q_or_int(b, "add", a)))),
            fn("sub", ("k8s_sub", D, [D, D], True, lambda a, b: mq(self._q("sub", a, b) - self._q_or_int(b, "sub", a)))),
            fn(
                "semver",
                ("string_to_semver", D, [T.STRING], False, lambda x: rt.msg_of_semver(_semver(x, False))),
                ("string_bool_to_semver", D, [T.STRING, T.BOOL], False, lambda x, n: rt.msg_of_semver(_semver(x, n))),
            ),
            fn(
                "isSemver",
                ("is_semver_string", T.BOOL, [T.STRING], False, lambda x: _is_semver(x, False)),
                ("is_semver_string_bool", T.BOOL, [T.STRING, T.BOOL], False, _is_semver),
            ),
            fn("major", ("semver_major", T.INT, [D], True, lambda a: self._s("major", a).major)),
            fn("minor", ("semver_minor", T.INT, [D], True, lambda a: self._s("minor", a).minor)),
            fn("patch", ("semver_patch", T.INT, [D], True, lambda a: self._s("patch", a).patch)),
            fn("isGreaterThan", ("k8s_is_greater_than", T.BOOL, [D, D], True, lambda a, b: self._cmp(a, b, "isGreaterThan") > 0)),
            fn("isLessThan", ("k8s_is_less_than", T.BOOL, [D, D], True, lambda a, b: self._cmp(a, b, "isLessThan") < 0)),
            fn("compareTo", ("k8s_compare_to", T.INT, [D, D], True, lambda a, b: self._cmp(a, b, "compareTo"))),
            fn("find", ("string_find_string", T.STRING, [T.STRING, T.STRING], True, _find)),
            fn(
                "findAll",
                ("string_find_all_string", L, [T.STRING, T.STRING], True, lambda s, r: _find_all(s, r, -1)),
                ("string_find_all_string_int", L, [T.STRING, T.STRING, T.INT], True, _find_all),
            ),
            fn("isSorted", ("k8s_is_sorted", T.BOOL, [L], True, self._is_sorted)),
            fn("sum", ("k8s_sum", D, [L], True, self._sum)),
            fn("min", ("k8s_min", D, [L], True, lambda xs: self._extreme(xs, "min"))),
            fn("max", ("k8s_max", D, [L], True, lambda xs: self._extreme(xs, "max"))),
            fn("indexOf", ("list_a_index_of_int", T.INT, [L, D], True, lambda xs, v: _index_of(xs, v, False))),
            fn("lastIndexOf", ("list_a_last_index_of_int", T.INT, [L, D], True, lambda xs, v: _index_of(xs, v, True))),
            fn("includes", ("dra_includes_dyn_dyn", T.BOOL, [D, D], True, _includes)),
            # the two-variable comprehensions' helper, declared by their checker library
            fn("cel.@mapInsert", ("k8s_map_insert", D, [D, D, D], False, _map_insert), ("k8s_map_merge", D, [D, D], False, _map_merge)),
            *self.net.runtime(),
        ]

    def _q(self, name: str, a: Any, *rest: Any) -> Quantity:
        """``a`` as a Quantity, or the dispatcher's error of ``name`` (with ``rest``, its other arguments)."""
        if not isinstance(a, self.rt.QuantityMsg):
            raise no_such_overload(name, a, *rest)
        return self.rt.q_of(a)

    def _s(self, name: str, a: Any) -> Any:
        if not isinstance(a, self.rt.SemverMsg):
            raise no_such_overload(name, a)
        return a

    def _q_or_int(self, b: Any, name: str, a: Any) -> Quantity:
        if isinstance(b, int) and not isinstance(b, bool):
            return Quantity.of(b)
        if not isinstance(b, self.rt.QuantityMsg):
            raise no_such_overload(name, a, b)
        return self.rt.q_of(b)

    def _key(self, v: Any) -> Any:
        rt = self.rt
        if isinstance(v, rt.QuantityMsg):
            return rt.q_of(v).amount
        if isinstance(v, rt.SemverMsg):
            return _SemverKey(rt.s_of(v))
        return v

    def _cmp(self, a: Any, b: Any, name: str = "compareTo") -> int:
        rt = self.rt
        if isinstance(a, rt.QuantityMsg) and isinstance(b, rt.QuantityMsg):
            return rt.q_of(a).cmp(rt.q_of(b))
        if isinstance(a, rt.SemverMsg) and isinstance(b, rt.SemverMsg):
            return rt.s_of(a).compare(rt.s_of(b))
        raise no_such_overload(name, a, b)

    def _is_sorted(self, xs: list[Any]) -> bool:
        keys = [self._key(x) for x in xs]
        return all(not keys[i] > keys[i + 1] for i in range(len(keys) - 1))

    def _sum(self, xs: list[Any]) -> Any:
        return sum(xs[1:], xs[0]) if xs else 0

    def _extreme(self, xs: list[Any], name: str) -> Any:
        if not xs:
            raise ValueError(f"{name} called on empty list")
        best = xs[0]
        for x in xs[1:]:
            if (self._key(x) > self._key(best)) if name == "max" else (self._key(x) < self._key(best)):
                best = x
        return best


def _map_insert(m: dict[Any, Any], key: Any, value: Any) -> dict[Any, Any]:
    if any(_equal(k, key) for k in m):
        raise ValueError(f"insert failed: key {_go_value(key)} already exists")
    return {**m, key: value}


def _map_merge(m: dict[Any, Any], other: dict[Any, Any]) -> dict[Any, Any]:
    out = dict(m)
    for k, v in other.items():
        out = _map_insert(out, k, v)
    return out


def _go_value(v: Any) -> str:
    """A value as Go's %v prints a CEL value."""
    if isinstance(v, bool):
        return "true" if v else "false"
    return str(v)


def _never(*args: Any) -> Any:
    raise AssertionError("declaration-only overload called")


class _SemverKey:
    __slots__ = ("v",)

    def __init__(self, v: Semver) -> None:
        self.v = v

    def __lt__(self, o: _SemverKey) -> bool:
        return self.v.compare(o.v) < 0

    def __gt__(self, o: _SemverKey) -> bool:
        return self.v.compare(o.v) > 0


def _sign(a: Fraction) -> int:
    return (a > 0) - (a < 0)


def _is_int64(q: Quantity) -> bool:
    return q.amount.denominator == 1 and -(2**63) <= q.amount.numerator < 2**63


def _as_integer(q: Quantity) -> int:
    if not _is_int64(q):
        raise ValueError("cannot convert value to integer")
    return q.amount.numerator


def _quantity(x: str) -> Quantity:
    try:
        return parse_quantity(x)
    except QuantityError as e:
        # resource.ParseQuantity's errors name no input
        raise ValueError(str(e).removesuffix(f": {x!r}")) from None


def _is_quantity(x: str) -> bool:
    try:
        parse_quantity(x)
    except QuantityError:
        return False
    return True


def _semver(x: str, normalize: bool) -> Semver:
    try:
        return parse_semver(x, normalize)
    except SemverError as e:
        raise ValueError(str(e)) from None


def _is_semver(x: str, normalize: bool) -> bool:
    try:
        parse_semver(x, normalize)
    except SemverError:
        return False
    return True


def _index_of(xs: list[Any], v: Any, last: bool) -> int:
    rng = range(len(xs) - 1, -1, -1) if last else range(len(xs))
    for i in rng:
        if _equal(xs[i], v):
            return i
    return -1


def _equal(x: Any, y: Any) -> bool:
    """CEL equality of plain values: numbers across int/uint/double, otherwise same type and value."""
    if isinstance(x, bool) or isinstance(y, bool):
        return type(x) is type(y) and x == y
    if isinstance(x, int | float) and isinstance(y, int | float):
        return x == y
    return type(x) is type(y) and bool(x == y)


def _includes(target: Any, arg: Any) -> bool:
    if isinstance(target, list):
        for i, x in enumerate(target):
            if i >= INCLUDES_MAX_LIST:
                raise ValueError(f"'includes' function cannot be applied to lists longer than {INCLUDES_MAX_LIST} values")
            if _equal(x, arg):
                return True
        return False
    return _equal(target, arg)


# --- regular expressions: RE2, as Go's regexp --------------------------------------------------

#: RE2's error codes as Go's regexp/syntax words them (ErrorCode strings).
_RE2_TO_GO = {
    "missing ]": "missing closing ]",
    "missing )": "missing closing )",
    "unexpected )": "unexpected )",
    "invalid perl operator": "invalid or unsupported Perl syntax",
    "bad repetition operator": "invalid nested repetition operator",
    "invalid repetition size": "invalid repeat count",
    "no argument for repetition operator": "missing argument to repetition operator",
    "invalid named capture group": "invalid named capture",
    "trailing \\": "trailing backslash at end of expression",
}


@lru_cache(maxsize=256)
def _regex(pattern: str) -> Any:
    """``regexp.Compile``: the RE2 program, or ``ValueError`` worded as Go's parser words it."""
    import re2  # type: ignore[import-untyped]

    options = re2.Options()
    options.log_errors = False
    try:
        return re2.compile(pattern, options)
    except re2.error as e:
        text = e.args[0].decode() if e.args and isinstance(e.args[0], bytes) else str(e)
        code, _, arg = text.partition(": ")
        raise ValueError(f"error parsing regexp: {_RE2_TO_GO.get(code, code)}: `{arg}`") from None


def _find(s: str, pattern: str) -> str:
    """regex.go ``find``: the leftmost match, or ""."""
    try:
        m = _regex(pattern).search(s)
    except ValueError as e:
        raise ValueError(f"Illegal regex: {e}") from None
    return m.group(0) if m else ""


def _find_all(s: str, pattern: str, n: int) -> list[str]:
    """regex.go ``findAll``: Go's ``FindAllString(s, n)`` (successive matches; an empty match
    right after a match is skipped)."""
    try:
        rx = _regex(pattern)
    except ValueError as e:
        raise ValueError(f"Illegal regex: {e}") from None
    out: list[str] = []
    pos, prev_end = 0, -1
    while (n < 0 or len(out) < n) and pos <= len(s):
        m = rx.search(s, pos)
        if m is None:
            break
        start, end = m.span()
        accept = True
        if end == pos:  # an empty match
            if start == prev_end:
                accept = False
            pos += 1
        else:
            pos = end
        prev_end = end
        if accept:
            out.append(s[start:end])
    return out


_RUNTIME: _Runtime | None = None
_RUNTIME_LOCK = threading.Lock()


def _runtime() -> _Runtime:
    global _RUNTIME
    if _RUNTIME is None:
        with _RUNTIME_LOCK:
            if _RUNTIME is None:
                _RUNTIME = _Runtime()
    return _RUNTIME


# --- the device variable ----------------------------------------------------------------------


def attribute_value(name: str, attr: Mapping[str, Any]) -> Any:
    """A ResourceSlice attribute (``{"int": 3}``...) as a plain Python value (Semver for versions)."""
    if not isinstance(attr, Mapping):
        raise ValueError(f"attribute {name}: expected an object, got {type(attr).__name__}")
    for key in ("int", "bool", "string"):
        if key in attr:
            return attr[key]
    if "version" in attr:
        return parse_semver(str(attr["version"]))
    for key in ("ints", "bools", "strings"):
        if key in attr:
            return list(attr[key])
    if "versions" in attr:
        return [parse_semver(str(v)) for v in attr["versions"]]
    raise ValueError(f"attribute {name}: unsupported attribute value {dict(attr)!r}")


class CelDevice:
    """The ``device`` variable of one device, converted once and reused for every selector."""

    __slots__ = ("_activation", "data", "driver")

    def __init__(self, data: dict[str, Any], driver: str) -> None:
        self.data = data
        self.driver = driver
        self._activation: Any = None

    def activation(self) -> Any:
        """The runtime activation, built on first use (several times faster than a dict per call)."""
        if self._activation is None:
            self._activation = _runtime().env.Activation(self.data)
        return self._activation

    @classmethod
    def build(
        cls,
        driver: str,
        attributes: Mapping[str, Any] | None = None,
        capacity: Mapping[str, Quantity] | None = None,
        allow_multiple_allocations: bool = False,
    ) -> CelDevice:
        """``attributes`` maps qualified names to plain values (see ``attribute_value``)."""
        rt = _runtime()
        attrs: dict[str, dict[str, Any]] = {}
        for name, value in (attributes or {}).items():
            domain, ident = split_qualified_name(name, driver)
            attrs.setdefault(domain, {})[ident] = _to_cel(rt, value)
        caps: dict[str, dict[str, Any]] = {}
        for name, q in (capacity or {}).items():
            domain, ident = split_qualified_name(name, driver)
            caps.setdefault(domain, {})[ident] = rt.msg_of_quantity(q)
        data = {
            "device.driver": driver,
            "device.attributes": attrs,
            "device.capacity": caps,
            "device.allowMultipleAllocations": bool(allow_multiple_allocations),
        }
        return cls(data, driver)


def _to_cel(rt: _Runtime, value: Any) -> Any:
    if isinstance(value, Semver):
        return rt.msg_of_semver(value)
    if isinstance(value, Quantity):
        return rt.msg_of_quantity(value)
    if isinstance(value, list):
        return [_to_cel(rt, v) for v in value]
    return value


# --- compiled selectors -----------------------------------------------------------------------

# The C++ runtime's messages: patterns compiled on first use (``re``'s cache), as most runs
# have no error.
_KEY_NOT_FOUND = r'Key not found in map : "((?:[^"\\]|\\.)*)"'
_ISSUE = r"ERROR: <input>:(\d+):(\d+): (.*)"
_RELATIONAL_MIX = r"found no matching overload for '_(?:<|<=|>|>=)_' applied to '\((?:int|uint|double), (?:int|uint|double)\)'"
_NO_OVERLOAD = r"^(found no matching overload for '[^']+' applied to ')\((.*)\)'$"


@dataclass(frozen=True, slots=True)
class CompiledSelector:
    """A compiled selector; ``matches(device)`` evaluates it on one device."""

    expression: str
    _program: Any
    lists: bool = False  # compiled with DRAListTypeAttributes on

    def evaluate(self, device: CelDevice) -> Any:
        """The raw result as Python (bool, int, Quantity...); raises ``CelRuntimeError``."""
        rt = _runtime()
        data = device.data
        added: set[str] = set()
        try:
            result = self._program.eval(device.activation())
        except RuntimeError as e:  # the runtime refused the program (a missing function)
            raise CelRuntimeError(self.expression, _runtime_message(str(e))) from None
        while True:
            if result.type() != rt.error_type:
                return rt.to_python(result.value())
            message = str(result.value())
            m = re.search(_KEY_NOT_FOUND, message)
            # A missing *domain* is an empty map in Kubernetes: add it and try again.
            if m:
                key = m.group(1).encode().decode("unicode_escape")
                if key not in added and (key not in data["device.attributes"] or key not in data["device.capacity"]):
                    added.add(key)
                    data = dict(data)
                    data["device.attributes"] = {key: {}, **data["device.attributes"]}
                    data["device.capacity"] = {key: {}, **data["device.capacity"]}
                    result = self._program.eval(data=data)
                    continue
                raise CelRuntimeError(self.expression, f"no such key: {key}")
            if _clean(message) == _NOT_ITERABLE:
                raise CelRuntimeError(self.expression, _not_iterable(self.expression, data, self.lists))
            raise CelRuntimeError(self.expression, _runtime_message(message))

    def matches(self, device: CelDevice) -> bool:
        """True/False for a selector; a non-bool result is an error, as in Kubernetes."""
        value = self.evaluate(device)
        if not isinstance(value, bool):
            name = _cel_type_name(value)
            raise CelRuntimeError(
                self.expression, f"CEL result of type {name} could not be converted to bool: unsupported type conversion from '{name}' to bool"
            )
        return value


#: The C++ runtime's words for a comprehension over a value that is no list or map.
_NOT_ITERABLE = "No matching overloads found : <iter_range>"
_MACRO_CALL = r"\.\s*(?:all|exists|exists_one|existsOne|map|filter|sortBy|transformList|transformMap|transformMapEntry)\s*\("
#: Go's ``%T`` of the cel-go values a selector meets (``types.String``...; Kubernetes' own
#: Quantity and Semver live in ``k8s.io/apiserver/pkg/cel``).
_GO_TYPES: Final = {bool: "types.Bool", int: "types.Int", float: "types.Double", str: "types.String", Quantity: "cel.Quantity", Semver: "cel.Semver"}


def _receiver(expression: str, end: int) -> str:
    """The operand a member call at ``end`` (its ``.``) is made on: back over names, dots,
    quoted strings and balanced brackets."""
    depth, i, quote = 0, end - 1, ""
    while i >= 0:
        ch = expression[i]
        if quote:
            if ch == quote:
                quote = ""
        elif ch in "\"'":
            quote = ch
        elif ch in ")]}":
            depth += 1
        elif ch in "([{":
            if depth == 0:
                break
            depth -= 1
        elif depth == 0 and not (ch.isalnum() or ch in "_."):
            break
        i -= 1
    return expression[i + 1 : end].strip()


def _not_iterable(expression: str, data: Mapping[str, Any], lists: bool) -> str:
    """cel-go's error for a comprehension over a value that is no list or map (``evalFold``):
    the first macro call whose operand is such a value on this device names its Go type."""
    for m in re.finditer(_MACRO_CALL, expression):
        receiver = _receiver(expression, m.start())
        try:
            value = compile_expression(receiver, lists=lists).evaluate(CelDevice(dict(data), ""))
        except CelError:
            continue
        if not isinstance(value, list | dict):
            return f"got '{_GO_TYPES.get(type(value), 'types.' + type(value).__name__)}', expected iterable type"
    return "no such overload"


def _cel_type_name(value: Any) -> str:
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, int):
        return "int"
    if isinstance(value, float):
        return "double"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        return "list"
    if isinstance(value, dict):
        return "map"
    if isinstance(value, Quantity):
        return "kubernetes.Quantity"
    if isinstance(value, Semver):
        return "kubernetes.Semver"
    return type(value).__name__


_STATUS_PREFIX = r"^[A-Z_]+: "  # compiled on first use


def _clean(message: str) -> str:
    """Drop absl status decorations (``UNKNOWN: ... [UNKNOWN]``) from a runtime message."""
    if message.endswith("]") and " [" in message:
        message = message[: message.rindex(" [")]
    return re.sub(_STATUS_PREFIX, "", message)


#: Functions whose standard overloads take a first argument of these C++ type names: a call
#: with another argument type fails in cel-go's function itself ("no such overload"), others
#: fail in its dispatch ("no such overload: NAME").
_NATIVE_FIRST = {
    "_<_": {"int64", "uint64", "double", "string", "bytes", "bool", "google.protobuf.Timestamp", "google.protobuf.Duration"},
    "_+_": {"int64", "uint64", "double", "string", "bytes", "list", "google.protobuf.Timestamp", "google.protobuf.Duration"},
    "_-_": {"int64", "uint64", "double", "google.protobuf.Timestamp", "google.protobuf.Duration"},
    "_*_": {"int64", "uint64", "double"},
    "_/_": {"int64", "uint64", "double"},
    "_%_": {"int64", "uint64"},
}
for _op in ("_<=_", "_>_", "_>=_"):
    _NATIVE_FIRST[_op] = _NATIVE_FIRST["_<_"]


#: cel-go's standard functions bound per overload (no singleton binding): a call whose dynamic
#: arguments match none fails in the function's dispatcher, which names the argument types.
_DISPATCHED = frozenset({"string", "int", "uint", "double", "bool", "bytes", "duration", "timestamp"})
#: Standard functions whose one binding checks its arguments itself ("no such overload").
_SELF_CHECKED = frozenset({"matches", "contains", "startsWith", "endsWith"})
#: The C++ runtime's names of value types, as cel-go's ``Type().TypeName()`` reads them.
_CPP_TO_GO = {"int64": "int", "uint64": "uint", "google.protobuf.NullValue": "null_type", "null_type": "null_type"}


def _no_overload(text: str) -> str:
    """cel-go's words for a call no overload takes: operators with a trait (``_<_``...) fail in
    the operand's own function ("no such overload") unless the operand lacks the trait
    ("no such overload: NAME"); ``size`` has one binding guarded by the Sizer trait; functions
    bound per overload fail in their dispatcher, which lists the argument types."""
    m = re.match(r"No matching overloads found : \((.*?)\)\.([\w.@]+)\((.*)\)$", text)
    if m:
        name, args = m.group(2), [m.group(1).strip(), *_split_types(m.group(3))]
    else:
        m = re.match(r"No matching overloads found : ([^(]+)\((.*)\)", text)
        if not m:
            return "no such overload"
        name, args = m.group(1).strip(), _split_types(m.group(2))
    if name == "size":
        return "no such overload" if args and args[0] in ("string", "bytes", "list", "map") else "no such overload: size"
    if name in _DISPATCHED:
        return f"no such overload: {name}({', '.join(_CPP_TO_GO.get(a, a) for a in args)})"
    if name in _SELF_CHECKED:
        return "no such overload"
    if args and args[0] in _NATIVE_FIRST.get(name, ()):
        return "no such overload"
    return f"no such overload: {name}"


def _go_type_name(value: Any) -> str:
    """cel-go's ``TypeName`` of a runtime value (a library function's dispatcher names them)."""
    rt = _runtime()
    if isinstance(value, rt.QuantityMsg):
        return "kubernetes.Quantity"
    if isinstance(value, rt.SemverMsg):
        return "kubernetes.Semver"
    name = _cel_type_name(value)
    return "null_type" if value is None else name


def no_such_overload(name: str, *args: Any) -> ValueError:
    """decls.MaybeNoSuchOverload's error for a library function called with ``args``."""
    return ValueError(f"no such overload: {name}({', '.join(_go_type_name(a) for a in args)})")


def _runtime_message(message: str) -> str:
    """A C++ runtime error as cel-go words it."""
    text = _clean(message)
    if text.startswith("No matching overloads found"):
        return _no_overload(text)
    m = re.match(r"^cannot convert (string|int|uint|double|bool|bytes) to (string|int|uint|double|bool|bytes)$", text)
    if m:
        return f"type conversion error from '{m.group(1)}' to '{m.group(2)}'"
    m = re.match(r"^Index error: index=(-?\d+)", text)
    if m:
        return f"index out of bounds: {m.group(1)}"
    if text.startswith("Division by zero") or text == "divide by zero":
        return "division by zero"
    if text.startswith("Modulus by zero") or text == "modulus by zero":
        return "modulus by zero"
    if "overflow" in text and "uint" not in text:
        return "integer overflow"
    m = re.match(r"^[Ii]ndex out of (?:bounds|range)\D*(-?\d+)", text)
    if m:
        return f"index out of bounds: {m.group(1)}"
    return text


_NAMESPACES = frozenset({"sets", "strings", "lists", "optional", "cel", "format", "ip"})


def _member_call(expression: str, line: int, col: int) -> bool:
    """Whether the call whose ``(`` an issue points at is a member call (``x.f(...)``)."""
    lines = expression.split("\n")
    text = lines[line - 1] if 0 < line <= len(lines) else ""
    i = col - 2  # the character before "("
    while i >= 0 and (text[i].isalnum() or text[i] in "_"):
        i -= 1
    if i < 0 or text[i] != ".":
        return False
    j = i - 1
    while j >= 0 and (text[j].isalnum() or text[j] in "_"):
        j -= 1
    return text[j + 1 : i] not in _NAMESPACES  # sets.contains(...) is a global function


def _split_types(text: str) -> list[str]:
    out, depth, cur = [], 0, ""
    for ch in text:
        if ch == "," and depth == 0:
            out.append(cur.strip())
            cur = ""
            continue
        depth += ch == "("
        depth -= ch == ")"
        cur += ch
    if cur.strip():
        out.append(cur.strip())
    return out


def _issue_message(expression: str, line: int, col: int, message: str) -> str:
    """A C++ checker issue as cel-go words it."""
    message = re.sub(r"^(undefined field '[^']*') not found in struct '[^']*'$", r"\1", message)
    if message == "has() argument must be a field selection":
        return "invalid argument to has() macro"
    m = re.match(_NO_OVERLOAD, message)
    if m and _member_call(expression, line, col):
        types = _split_types(m.group(2))
        if types:
            return f"{m.group(1)}{types[0]}.({', '.join(types[1:])})'"
    return message


_UNDECLARED = r"^undeclared reference to '([\w.]+)' \(in container ''\)$"


def _compile_issues(expression: str, text: str, lists: bool = False) -> tuple[tuple[int, int, str], ...]:
    """The C++ checker's issues as cel-go reports them: in source order, without the authz
    calls cel-go does not check once their operand failed, in cel-go's words."""
    raw = [_duplicate_variable(expression, int(m.group(1)), int(m.group(2)), m.group(3)) for m in re.finditer(_ISSUE, text)]
    kept = [i for i in raw if not _on_failed_operand(expression, i, raw)]
    issues = [(line, col, _issue_message(expression, line, col, _library_member_call(expression, line, col, msg, lists))) for line, col, msg in kept]
    return tuple(sorted(issues, key=lambda i: (i[0], i[1])))


def _duplicate_variable(expression: str, line: int, col: int, msg: str) -> tuple[int, int, str]:
    """A two-variable comprehension naming one variable twice: cel-go's parser reports it at
    the second variable ("duplicate variable name"), the C++ one at the first."""
    if not re.match(r"^\w+\(\) second variable must be different from the first variable$", msg):
        return line, col, msg
    lines = expression.split("\n")
    text = lines[line - 1] if 0 < line <= len(lines) else ""
    comma = text.find(",", col - 1)
    if comma < 0:
        return line, col, msg
    second = comma + 1
    while second < len(text) and text[second] == " ":
        second += 1
    name = re.match(r"\w*", text[second:])
    return line, second + 1, f"duplicate variable name: {name.group(0) if name else ''}"


def _call_site(expression: str, line: int, col: int) -> tuple[str, int, int] | None:
    """(the line, the position of the member call's ``.``, where its operand starts) for a call
    whose ``(`` is at ``col``; None for a call that is no member call."""
    lines = expression.split("\n")
    text = lines[line - 1] if 0 < line <= len(lines) else ""
    i = col - 2
    while i >= 0 and (text[i].isalnum() or text[i] in "_"):
        i -= 1
    if i < 0 or text[i] != "." or not _member_call(expression, line, col):
        return None
    return text, i, i - len(_receiver(text, i))


#: Member functions of the base environment's authz library (library/authz.go): declared in
#: cel-go's DRA environment, though nothing there can call them (no ``authorizer`` variable).
_AUTHZ = frozenset({"path", "group", "serviceAccount", "resource", "subresource", "namespace", "name", "check", "errored", "error", "allowed", "reason", "fieldSelector", "labelSelector"})


def _on_failed_operand(expression: str, issue: tuple[int, int, str], issues: list[tuple[int, int, str]]) -> bool:
    """An authz function called on an operand that already failed: cel-go declares it, and
    checks no call on an operand of error type."""
    line, col, msg = issue
    m = re.match(_UNDECLARED, msg)
    if not m or m.group(1) not in _AUTHZ:
        return False
    site = _call_site(expression, line, col)
    if site is None:
        return False
    _, dot, start = site
    return any(other is not issue and other[0] == line and start < other[1] <= dot for other in issues)


def _library_member_call(expression: str, line: int, col: int, msg: str, lists: bool) -> str:
    """A library function called the other way than declared (``quantity("1").sign()``,
    ``includes([1], 1)``): cel-go finds the function, no overload for the call, and names the
    argument types (the operand's first for a member call); the C++ checker finds no function."""
    m = re.match(_UNDECLARED, msg)
    if not m or m.group(1) not in _GLOBAL_ONLY | _MEMBER_ONLY:
        return msg
    lines = expression.split("\n")
    text = lines[line - 1] if 0 < line <= len(lines) else ""
    site = _call_site(expression, line, col)
    if (site is not None) != (m.group(1) in _GLOBAL_ONLY):
        return msg
    close = _closing(text, col - 1)
    parts = _split_args(text[col:close]) if close > col else []
    if site is not None:
        parts = [text[site[2] : site[1]], *parts]
    try:
        checker = _runtime().checker_for(lists)
        types = [_go_type_text(str(checker.compile(part).return_type().name())) for part in parts]
    except RuntimeError:
        return msg
    if site is not None:
        return f"found no matching overload for '{m.group(1)}' applied to '{types[0]}.({', '.join(types[1:])})'"
    return f"found no matching overload for '{m.group(1)}' applied to '({', '.join(types)})'"


#: Library functions cel-go declares as global functions only (a member call finds them), and
#: as member functions only (a global call finds them).
_GLOBAL_ONLY = frozenset({"sign", "quantity", "isQuantity", "semver", "isSemver", "isIP", "cidr", "isCIDR", "url", "isURL"})
_MEMBER_ONLY = frozenset({"includes", "isGreaterThan", "isLessThan", "compareTo", "asInteger", "asApproximateFloat", "isInteger", "major", "minor", "patch", "family", "containsIP", "containsCIDR", "prefixLength", "masked", "getScheme", "getHost", "getHostname", "getPort", "getEscapedPath", "getQuery", "validate"})


def _go_type_text(name: str) -> str:
    """The C++ binding's type name as cel-go prints an operand's type in a checker message
    (``any`` for the attributes' values: cel-go's ``google.protobuf.Any``)."""
    names = {**_CEL_GO_TYPE_NAMES, "ERROR": "any"}
    parts = re.findall(r"[\w.]+|[<>]|,\s*", name)
    return "".join(names.get(p, {"<": "(", ">": ")"}.get(p, p)) for p in parts)


def _closing(text: str, open_at: int) -> int:
    """The position of the ``)`` closing the ``(`` at ``open_at`` (-1: none)."""
    depth, quote = 0, ""
    for i in range(open_at, len(text)):
        ch = text[i]
        if quote:
            quote = "" if ch == quote else quote
        elif ch in "\"'":
            quote = ch
        elif ch in "([{":
            depth += 1
        elif ch in ")]}":
            depth -= 1
            if depth == 0:
                return i
    return -1


def _split_args(text: str) -> list[str]:
    """Top-level comma-separated parts of a call's argument text."""
    out, depth, quote, cur = [], 0, "", ""
    for ch in text:
        if quote:
            quote = "" if ch == quote else quote
        elif ch in "\"'":
            quote = ch
        elif ch in "([{":
            depth += 1
        elif ch in ")]}":
            depth -= 1
        elif ch == "," and depth == 0:
            out.append(cur.strip())
            cur = ""
            continue
        cur += ch
    return [*out, cur.strip()] if cur.strip() else out


_CEL_GO_TYPE_NAMES = {
    "BOOL": "bool", "INT": "int", "UINT": "uint", "DOUBLE": "double", "STRING": "string", "BYTES": "bytes",
    "DYN": "dyn", "NULL": "null_type", "LIST": "list", "MAP": "map", "TYPE": "type",
    "DURATION": "google.protobuf.Duration", "TIMESTAMP": "google.protobuf.Timestamp",
    "ERROR": "dyn",  # the binding's name for google.protobuf.Any, the attributes' values
}


def _output_type_name(t: Any) -> str:
    """The C++ binding's type name (``LIST<INT>``) as cel-go prints it (``list(int)``)."""
    parts = re.findall(r"[\w.]+|[<>]|,\s*", str(t.name()))
    return "".join(_CEL_GO_TYPE_NAMES.get(p, {"<": "(", ">": ")"}.get(p, p)) for p in parts)


def compile_expression(expression: str, *, lists: bool = False) -> CompiledSelector:
    """Compile any expression in the DRA environment (cached), whatever its result type;
    raises ``CelCompileError``. ``lists``: the gate ``DRAListTypeAttributes`` is on, so
    attributes are typed ``dyn`` rather than ``any`` (``newCompiler`` in compile.go)."""
    return _compile(expression, lists)[0]


@lru_cache(maxsize=4096)
def _compile(expression: str, lists: bool = False) -> tuple[CompiledSelector, Any]:
    """The compiled expression and its output type (None: checked with the numeric-comparison
    relaxation, a bool)."""
    if not isinstance(expression, str):
        raise CelCompileError(repr(expression), "expression must be a string")
    if len(expression) > MAX_EXPRESSION_LENGTH:
        raise CelCompileError(expression[:64] + "...", f"expression is longer than {MAX_EXPRESSION_LENGTH} bytes", kind="length")
    rt = _runtime()
    checker = rt.checker_for(lists)
    try:
        checked = checker.compile(expression)
    except RuntimeError as err:
        issues = _compile_issues(expression, str(err), lists)
        if issues and all(re.search(_RELATIONAL_MIX, msg) for _, _, msg in issues):
            # CrossTypeNumericComparisons: int/uint/double relations are allowed; the
            # runtime compares them correctly, only the checker lacks the overloads.
            unchecked = checker.compile(expression, disable_check=True)
            _check_literals(expression)
            return CompiledSelector(expression, rt.env.deserialize(unchecked.serialize()), lists), None
        if not issues:
            raise CelCompileError(expression, _clean(str(err))) from None
        line, col, first = issues[0]
        raise CelCompileError(expression, first, col, line, issues=issues) from None
    _check_literals(expression)
    return CompiledSelector(expression, rt.env.deserialize(checked.serialize()), lists), checked.return_type()


#: A member call of ``matches``, ``find`` or ``findAll`` or a ``duration`` call whose (first)
#: argument is a string literal.
_LITERAL_CALL = r"""(?:\.\s*(matches|find|findAll)|\b(duration))\s*\(\s*(r?"(?:[^"\\\n]|\\.)*"|r?'(?:[^'\\\n]|\\.)*')\s*[,)]"""
_DURATION = r"[-+]?(?:0|(?:(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:ns|us|\u00b5s|\u03bcs|ms|s|m|h))+)"


def _check_literals(expression: str) -> None:
    """What cel-go decides about literal arguments before a program runs: the Kubernetes
    environment's AST validators (``cel.ValidateRegexLiterals``, ``ValidateDurationLiterals``:
    "invalid matches argument", "invalid duration argument" at the literal) and the regex
    library's patterns compiled when the program is made (``find``/``findAll``: "program
    instantiation failed: error parsing regexp: ...")."""
    import ast

    strings = _string_spans(expression)
    issues: list[tuple[int, int, str]] = []
    program_error = ""
    for m in re.finditer(_LITERAL_CALL, expression):
        if any(a <= m.start() < b for a, b in strings):
            continue
        try:
            value = ast.literal_eval(m.group(3))
        except (ValueError, SyntaxError):
            continue
        name = m.group(1) or m.group(2)
        bad = False
        if name == "duration":
            bad = re.fullmatch(_DURATION, value) is None
        else:
            try:
                _regex(value)
            except ValueError as e:
                bad = name == "matches"
                program_error = program_error or f"program instantiation failed: {e}"
        if bad:
            at = m.start(3)
            line = expression.count("\n", 0, at) + 1
            col = at - (expression.rfind("\n", 0, at) + 1) + 1
            issues.append((line, col, f"invalid {name} argument"))
    if issues:
        line, col, first = issues[0]
        raise CelCompileError(expression, first, col, line, issues=tuple(issues))
    if program_error:
        raise CelCompileError(expression, program_error, kind="program")


def _string_spans(expression: str) -> list[tuple[int, int]]:
    """Where the string literals of an expression are (start, end)."""
    spans, i, n = [], 0, len(expression)
    while i < n:
        ch = expression[i]
        if ch in "\"'":
            j = i + 1
            while j < n and expression[j] != ch:
                j += 2 if expression[j] == "\\" else 1
            spans.append((i, j + 1))
            i = j + 1
            continue
        i += 1
    return spans


@lru_cache(maxsize=4096)
def compile_selector(expression: str, *, lists: bool = False) -> CompiledSelector:
    """Compile a selector as compile.go does (cached): the result must be bool or ``any``, or
    ``dyn`` with ``lists`` (``DRAListTypeAttributes``); raises ``CelCompileError``."""
    compiled, out = _compile(expression, lists)
    rt = _runtime()
    allowed = (rt.bool_type, rt.error_type, rt.dyn_type) if lists else (rt.bool_type, rt.error_type)
    if out is not None and out not in allowed:  # the C++ binding shows ``any`` as its error type
        raise CelCompileError(expression, f"must evaluate to bool or the unknown type, not {_output_type_name(out)}", kind="type")
    return compiled


def selectors_of(expressions: Iterable[str]) -> list[CompiledSelector]:
    """Compile several expressions (convenience for callers with lists)."""
    return [compile_selector(e) for e in expressions]
