"""The project's one CEL engine: DRA device selectors, compiled once, evaluated per device.

Backed by cel-expr-python (Google's C++ CEL runtime), the fastest engine that
has the features selectors need (measured in ``benchmarks/bench_sim.py``).
The environment mirrors the one kube-scheduler compiles selectors with:

- one variable ``device`` with ``driver``, ``attributes``, ``capacity`` and
  ``allowMultipleAllocations``; attribute and capacity names are split at the
  first ``/`` into domain and id (no ``/``: the driver is the domain);
- ``device.attributes[<unknown domain>]`` is an empty map, an unknown id is
  an error ("no such key");
- ``quantity()``/``isQuantity()`` and the Quantity member functions,
  ``semver()``/``isSemver()`` and the Semver member functions, the Kubernetes
  list library (``isSorted``, ``sum``, ``min``, ``max``, ``indexOf``,
  ``lastIndexOf``), the ``sets`` extension, the string extension (v2),
  ``cel.bind``, optionals, ``includes()``, regular expressions;
- relational operators across int/uint/double (CrossTypeNumericComparisons).

Quantities and semvers travel through the C++ runtime as small protobuf
messages whose only field is their canonical value, so ``==`` compares them
semantically (``quantity("1") == quantity("1000m")``).

Known differences from cel-go, all compile-time conveniences rather than
results: two-variable comprehensions and cel-go's ``ext.Lists`` v3 are not
available, mixed-type list literals are not rejected, and the per-evaluation
cost limit is not enforced (selectors that would exceed it are rare and are
rejected by the apiserver at validation anyway).
"""

from __future__ import annotations

import re
import threading
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from fractions import Fraction
from functools import lru_cache
from typing import Any

from topodra.quantity import Quantity, QuantityError, parse_quantity
from topodra.sim.semver import Semver, SemverError, parse_semver

__all__ = [
    "CelError",
    "CelCompileError",
    "CelRuntimeError",
    "CelDevice",
    "CompiledSelector",
    "compile_selector",
    "result_type",
    "attribute_value",
    "split_qualified_name",
    "INCLUDES_MAX_LIST",
]

#: ``includes()`` refuses lists longer than the per-device value limit.
INCLUDES_MAX_LIST = 48
MAX_EXPRESSION_LENGTH = 10 * 1024
_DEVICE_FIELDS = ("driver", "attributes", "capacity", "allowMultipleAllocations")


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
    """The expression does not compile in the DRA environment."""


class CelRuntimeError(CelError):
    """Evaluating the expression failed (for example a missing attribute id)."""


def split_qualified_name(name: str, driver: str) -> tuple[str, str]:
    """``"dra.cpu/coreID"`` -> ``("dra.cpu", "coreID")``; unqualified names get the driver's domain."""
    sep = name.find("/")
    if sep < 0:
        return driver, name
    return name[:sep], name[sep + 1 :]


# --- the runtime: protobuf types and library functions --------------------------------------


#: ``topodra/sim/cel_types.proto`` serialised: ``topodra.cel.Quantity {string amount = 1}`` and
#: ``topodra.cel.Semver {int64 major = 1; int64 minor = 2; int64 patch = 3; string pre = 4}``
#: (proto3). Written out because building it with ``descriptor_pb2`` costs that module's
#: import on every run's first compile; a test rebuilds it with ``descriptor_pb2`` and compares.
CEL_TYPES_PROTO = (
    b'\n\x1btopodra/sim/cel_types.proto\x12\x0btopodra.cel"\x1a\n\x08Quantity\x12\x0e\n\x06amount\x18\x01 \x01(\t"B'
    b"\n\x06Semver\x12\r\n\x05major\x18\x01 \x01(\x03\x12\r\n\x05minor\x18\x02 \x01(\x03\x12\r\n\x05patch\x18\x03 \x01(\x03"
    b"\x12\x0b\n\x03pre\x18\x04 \x01(\tb\x06proto3"
)


def _message_types() -> tuple[Any, Any, Any]:
    """The descriptor pool with :data:`CEL_TYPES_PROTO`, and the Quantity and Semver classes."""
    from google.protobuf import descriptor_pool, message_factory

    pool = descriptor_pool.DescriptorPool()
    pool.AddSerializedFile(CEL_TYPES_PROTO)
    quantity = message_factory.GetMessageClass(pool.FindMessageTypeByName("topodra.cel.Quantity"))
    semver = message_factory.GetMessageClass(pool.FindMessageTypeByName("topodra.cel.Semver"))
    return pool, quantity, semver


class _Runtime:
    """The cel-expr-python environment with the Kubernetes libraries (built once)."""

    def __init__(self) -> None:
        from cel_expr_python import cel  # type: ignore[import-untyped]
        from cel_expr_python.ext import ext_bindings, ext_optional, ext_strings  # type: ignore[import-untyped]

        pool, self.QuantityMsg, self.SemverMsg = _message_types()
        self.cel = cel
        T = cel.Type
        functions = [*self._quantity_functions(), *self._semver_functions(), *self._list_functions()]

        def env(variables: dict[str, Any]) -> Any:
            # The Kubernetes functions go in an extension loaded after the string
            # extension so that list ``indexOf`` joins the string overloads.
            extensions = [ext_bindings.ExtBindings(), ext_optional.ExtOptional(), ext_strings.ExtStrings(2)]
            return cel.NewEnv(pool, variables=variables, extensions=[*extensions, cel.CelExtension("kubernetes", functions)])

        self.env = env({"device": T.DYN})
        # For result types only: the device's fields typed as Kubernetes declares them
        # (staging/src/k8s.io/dynamic-resource-allocation/cel/compile.go, v1.36.2), each
        # reached through a variable of its own (see ``result_type``).
        quantity = T("topodra.cel.Quantity")
        self.typed_env = env(
            {
                "device__self": T.AbstractType("kubernetes.DRADevice"),
                "device__driver": T.STRING,
                "device__attributes": T.Map(T.STRING, T.Map(T.STRING, T.DYN)),
                "device__capacity": T.Map(T.STRING, T.Map(T.STRING, quantity)),
                "device__allowMultipleAllocations": T.BOOL,
            }
        )
        self.bool_type = T.BOOL
        self.error_type = T.ERROR
        self._lock = threading.Lock()

    def _function(self, name: str, *overloads: tuple[str, Any, list[Any], bool, Callable[..., Any]]) -> Any:
        """A CEL function declaration: (overload id, result type, parameter types, member?, impl) each."""
        cel = self.cel
        return cel.FunctionDecl(
            name,
            [cel.Overload(oid, ret, params, is_member=member, impl=impl) for oid, ret, params, member, impl in overloads],
        )

    def _quantity_functions(self) -> list[Any]:
        """The Kubernetes quantity library, and the comparisons it shares with semver."""
        fn, T = self._function, self.cel.Type
        QT = T("topodra.cel.Quantity")
        q_ = self.q_of
        mq = self.msg_of_quantity
        return [
            fn("quantity", ("k8s_quantity", QT, [T.STRING], False, lambda x: mq(parse_quantity(x)))),
            fn("isQuantity", ("k8s_is_quantity", T.BOOL, [T.STRING], False, _is_quantity)),
            fn("sign", ("quantity_sign", T.INT, [QT], True, lambda a: _sign(q_(a).amount))),
            fn("asInteger", ("quantity_as_integer", T.INT, [QT], True, lambda a: _as_integer(q_(a)))),
            fn("isInteger", ("quantity_is_integer", T.BOOL, [QT], True, lambda a: _is_int64(q_(a)))),
            fn("asApproximateFloat", ("quantity_as_float", T.DOUBLE, [QT], True, lambda a: float(q_(a).amount))),
            fn(
                "add",
                ("quantity_add", QT, [QT, QT], True, lambda a, b: mq(q_(a) + q_(b))),
                ("quantity_add_int", QT, [QT, T.INT], True, lambda a, b: mq(q_(a) + Quantity.of(b))),
            ),
            fn(
                "sub",
                ("quantity_sub", QT, [QT, QT], True, lambda a, b: mq(q_(a) - q_(b))),
                ("quantity_sub_int", QT, [QT, T.INT], True, lambda a, b: mq(q_(a) - Quantity.of(b))),
            ),
            # Quantity and Semver are both messages to the runtime, which dispatches on
            # the kind only: one dyn overload each, split by type here.
            fn("isGreaterThan", ("k8s_is_greater_than", T.BOOL, [T.DYN, T.DYN], True, lambda a, b: self._cmp(a, b) > 0)),
            fn("isLessThan", ("k8s_is_less_than", T.BOOL, [T.DYN, T.DYN], True, lambda a, b: self._cmp(a, b) < 0)),
            fn("compareTo", ("k8s_compare_to", T.INT, [T.DYN, T.DYN], True, self._cmp)),
        ]

    def _semver_functions(self) -> list[Any]:
        """The Kubernetes semver library."""
        fn, T = self._function, self.cel.Type
        ST = T("topodra.cel.Semver")
        return [
            fn(
                "semver",
                ("k8s_semver", ST, [T.STRING], False, lambda x: self.msg_of_semver(parse_semver(x))),
                ("k8s_semver_normalize", ST, [T.STRING, T.BOOL], False, lambda x, n: self.msg_of_semver(parse_semver(x, n))),
            ),
            fn(
                "isSemver",
                ("k8s_is_semver", T.BOOL, [T.STRING], False, lambda x: _is_semver(x, False)),
                ("k8s_is_semver_normalize", T.BOOL, [T.STRING, T.BOOL], False, _is_semver),
            ),
            fn("major", ("semver_major", T.INT, [ST], True, lambda a: a.major)),
            fn("minor", ("semver_minor", T.INT, [ST], True, lambda a: a.minor)),
            fn("patch", ("semver_patch", T.INT, [ST], True, lambda a: a.patch)),
        ]

    def _list_functions(self) -> list[Any]:
        """The Kubernetes list and sets libraries, and DRA's ``includes``."""
        fn, T = self._function, self.cel.Type
        L = T.List(T.DYN)
        return [
            fn("isSorted", ("list_is_sorted", T.BOOL, [L], True, self._is_sorted)),
            fn("sum", ("list_sum", T.DYN, [L], True, self._sum)),
            fn("min", ("list_min", T.DYN, [L], True, lambda xs: self._extreme(xs, -1))),
            fn("max", ("list_max", T.DYN, [L], True, lambda xs: self._extreme(xs, 1))),
            fn("indexOf", ("list_index_of", T.INT, [L, T.DYN], True, lambda xs, v: _index_of(xs, v, False))),
            fn("lastIndexOf", ("list_last_index_of", T.INT, [L, T.DYN], True, lambda xs, v: _index_of(xs, v, True))),
            fn("sets.contains", ("sets_contains", T.BOOL, [L, L], False, lambda a, b: all(_in(x, a) for x in b))),
            fn("sets.intersects", ("sets_intersects", T.BOOL, [L, L], False, lambda a, b: any(_in(x, a) for x in b))),
            fn(
                "sets.equivalent",
                ("sets_equivalent", T.BOOL, [L, L], False, lambda a, b: all(_in(x, a) for x in b) and all(_in(x, b) for x in a)),
            ),
            fn("includes", ("dra_includes_dyn_dyn", T.BOOL, [T.DYN, T.DYN], True, _includes)),
        ]

    # conversions between Python values and the messages the runtime carries
    def msg_of_quantity(self, q: Quantity) -> Any:
        a = q.amount
        return self.QuantityMsg(amount=f"{a.numerator}/{a.denominator}")

    def q_of(self, msg: Any) -> Quantity:
        if not hasattr(msg, "amount"):
            raise TypeError(f"expected a Quantity, got {type(msg).__name__}")
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

    def _key(self, v: Any) -> Any:
        if isinstance(v, self.QuantityMsg):
            return self.q_of(v).amount
        if isinstance(v, self.SemverMsg):
            return _SemverKey(self.s_of(v))
        return v

    def _cmp(self, a: Any, b: Any) -> int:
        if isinstance(a, self.QuantityMsg) and isinstance(b, self.QuantityMsg):
            return self.q_of(a).cmp(self.q_of(b))
        if isinstance(a, self.SemverMsg) and isinstance(b, self.SemverMsg):
            return self.s_of(a).compare(self.s_of(b))
        raise TypeError(f"no such overload: compare {_cel_type_name(self.to_python(a))} with {_cel_type_name(self.to_python(b))}")

    def _is_sorted(self, xs: list[Any]) -> bool:
        keys = [self._key(x) for x in xs]
        return all(keys[i] <= keys[i + 1] for i in range(len(keys) - 1))

    def _sum(self, xs: list[Any]) -> Any:
        if xs and isinstance(xs[0], self.QuantityMsg):
            total = Quantity.of(0)
            for x in xs:
                total = total + self.q_of(x)
            return self.msg_of_quantity(total)
        return sum(xs)

    def _extreme(self, xs: list[Any], direction: int) -> Any:
        if not xs:
            raise ValueError("min/max of an empty list")
        best = xs[0]
        for x in xs[1:]:
            if (self._key(x) > self._key(best)) if direction > 0 else (self._key(x) < self._key(best)):
                best = x
        return best


class _SemverKey:
    __slots__ = ("v",)

    def __init__(self, v: Semver) -> None:
        self.v = v

    def __lt__(self, o: _SemverKey) -> bool:
        return self.v.compare(o.v) < 0

    def __le__(self, o: _SemverKey) -> bool:
        return self.v.compare(o.v) <= 0

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


def _is_quantity(x: str) -> bool:
    try:
        parse_quantity(x)
    except QuantityError:
        return False
    return True


def _is_semver(x: str, normalize: bool) -> bool:
    try:
        parse_semver(x, normalize)
    except SemverError:
        return False
    return True


def _in(x: Any, xs: list[Any]) -> bool:
    return any((x == y and type(x) is type(y)) or _num_eq(x, y) for y in xs)


def _num_eq(x: Any, y: Any) -> bool:
    return isinstance(x, int | float) and isinstance(y, int | float) and not isinstance(x, bool) and not isinstance(y, bool) and x == y


def _index_of(xs: list[Any], v: Any, last: bool) -> int:
    rng = range(len(xs) - 1, -1, -1) if last else range(len(xs))
    for i in rng:
        if xs[i] == v:
            return i
    return -1


def _includes(target: Any, arg: Any) -> bool:
    if isinstance(target, list):
        if len(target) > INCLUDES_MAX_LIST:
            raise ValueError(f"'includes' function cannot be applied to lists longer than {INCLUDES_MAX_LIST} values")
        return _in(arg, target)
    return bool(target == arg)


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
            "device": {
                "driver": driver,
                "attributes": attrs,
                "capacity": caps,
                "allowMultipleAllocations": bool(allow_multiple_allocations),
            }
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

# The runtime's error messages: patterns compiled on first use (``re``'s cache), as most runs
# have no error.
_KEY_NOT_FOUND = r'Key not found in map : "((?:[^"\\]|\\.)*)"'
_POSITION = r"<input>:(\d+):(\d+):"
_RELATIONAL_MIX = r"found no matching overload for '_(?:<|<=|>|>=)_' applied to '\((?:int|uint|double), (?:int|uint|double)\)'"
_ERROR_LINE = r"ERROR: <input>:\d+:\d+: (.*)"
_DEVICE_FIELD_REF = re.compile(r"\bdevice\s*\.\s*([A-Za-z_][A-Za-z0-9_]*)")
_STRING_LITERAL = re.compile(r"'''.*?'''|\"\"\".*?\"\"\"|'(?:[^'\\]|\\.)*'|\"(?:[^\"\\]|\\.)*\"", re.S)


@dataclass(frozen=True, slots=True)
class CompiledSelector:
    """A compiled selector; ``matches(device)`` evaluates it on one device."""

    expression: str
    _program: Any

    def evaluate(self, device: CelDevice) -> Any:
        """The raw result as Python (bool, int, Quantity...); raises ``CelRuntimeError``."""
        rt = _runtime()
        data = device.data
        added: set[str] = set()
        result = self._program.eval(device.activation())
        while True:
            if result.type() != rt.error_type:
                return rt.to_python(result.value())
            message = str(result.value())
            m = re.search(_KEY_NOT_FOUND, message)
            # A missing *domain* is an empty map in Kubernetes: add it and try again.
            if m:
                key = m.group(1).encode().decode("unicode_escape")
                dev = data["device"]
                if key not in added and (key not in dev["attributes"] or key not in dev["capacity"]):
                    added.add(key)
                    dev = dict(dev)
                    dev["attributes"] = {key: {}, **dev["attributes"]}
                    dev["capacity"] = {key: {}, **dev["capacity"]}
                    data = {"device": dev}
                    result = self._program.eval(data=data)
                    continue
                raise CelRuntimeError(self.expression, f"no such key: {key}")
            raise CelRuntimeError(self.expression, _clean(message))

    def matches(self, device: CelDevice) -> bool:
        """True/False for a selector; a non-bool result is an error, as in Kubernetes."""
        value = self.evaluate(device)
        if not isinstance(value, bool):
            raise CelRuntimeError(
                self.expression, f"CEL result of type {_cel_type_name(value)} could not be converted to bool"
            )
        return value


def _cel_type_name(value: Any) -> str:
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


@lru_cache(maxsize=4096)
def compile_selector(expression: str) -> CompiledSelector:
    """Compile a selector in the DRA environment (cached); raises ``CelCompileError``."""
    if not isinstance(expression, str):
        raise CelCompileError(repr(expression), "expression must be a string")
    if len(expression) > MAX_EXPRESSION_LENGTH:
        raise CelCompileError(expression[:64] + "...", f"expression is longer than {MAX_EXPRESSION_LENGTH} bytes")
    bare = _STRING_LITERAL.sub('""', expression)
    for m in _DEVICE_FIELD_REF.finditer(bare):
        if m.group(1) not in _DEVICE_FIELDS:
            raise CelCompileError(
                expression,
                f"undefined field '{m.group(1)}' (device has {', '.join(_DEVICE_FIELDS)})",
                m.start(1) + 1,
            )
    rt = _runtime()
    try:
        program = rt.env.compile(expression)
    except RuntimeError as err:
        text = str(err)
        errors = re.findall(_ERROR_LINE, text)
        if errors and all(re.search(_RELATIONAL_MIX, e) for e in errors):
            # CrossTypeNumericComparisons: int/uint/double relations are allowed; the
            # runtime compares them correctly, only the checker lacks the overloads.
            program = rt.env.compile(expression, disable_check=True)
        else:
            pos = re.search(_POSITION, text)
            first = errors[0] if errors else _clean(text)
            raise CelCompileError(expression, first, int(pos.group(2)) if pos else None, int(pos.group(1)) if pos else 1) from None
    return CompiledSelector(expression, program)


_CEL_GO_NAMES: dict[str, str] = {
    "topodra.cel.Quantity": "kubernetes.Quantity",
    "topodra.cel.Semver": "kubernetes.Semver",
    "NULL": "null_type",
    "DURATION": "google.protobuf.Duration",
    "TIMESTAMP": "google.protobuf.Timestamp",
}
_BARE_DEVICE = re.compile(r"\bdevice\b(?!\s*\.)")
_TYPE_PART = re.compile(r"topodra\.cel\.\w+|[A-Z_]+|[<>,]|\s+|[\w.]+")


def _cel_go_type(name: str) -> str:
    """cel-expr-python's type name (``LIST<INT>``) as cel-go prints it (``list(int)``)."""
    out = []
    for part in _TYPE_PART.findall(name):
        if part in _CEL_GO_NAMES:
            out.append(_CEL_GO_NAMES[part])
        elif part == "<":
            out.append("(")
        elif part == ">":
            out.append(")")
        elif part.strip() and part[:1].isupper() and part.isupper():
            out.append(part.lower().replace("optional", "optional_type"))
        else:
            out.append(part)
    return "".join(out)


def result_type(expression: str) -> str | None:
    """The type a selector that compiles evaluates to, as cel-go names it (``bool``, ``int``,
    ``list(string)``, ``kubernetes.Quantity``...), with ``device.driver``, ``.attributes``,
    ``.capacity`` and ``.allowMultipleAllocations`` typed as in Kubernetes; ``dyn`` when the
    type is known only at run time; None when the expression does not compile."""
    def typed_names(code: str) -> str:
        return _BARE_DEVICE.sub("device__self", _DEVICE_FIELD_REF.sub(lambda f: f"device__{f.group(1)}", code))

    typed: list[str] = []
    last = 0
    for m in _STRING_LITERAL.finditer(expression):
        typed.extend((typed_names(expression[last : m.start()]), m.group(0)))
        last = m.end()
    typed.append(typed_names(expression[last:]))
    try:
        program = _runtime().typed_env.compile("".join(typed))
    except RuntimeError:
        return None
    return _cel_go_type(str(program.return_type()))


def selectors_of(expressions: Iterable[str]) -> list[CompiledSelector]:
    """Compile several expressions (convenience for callers with lists)."""
    return [compile_selector(e) for e in expressions]
