"""Conformance set for the DRA CEL environment: expressions, a device, and the expected result or error."""

from __future__ import annotations

import contextlib
from fractions import Fraction
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from topodra.quantity import Quantity, QuantityError, parse_quantity
from topodra.sim.cel import (
    CelCompileError,
    CelDevice,
    CelRuntimeError,
    attribute_value,
    compile_expression,
    compile_selector,
    split_qualified_name,
)
from topodra.sim.semver import Semver, SemverError, parse_semver

DRIVER = "dra.cpu"
DEVICE = CelDevice.build(
    DRIVER,
    {
        "coreType": "P-core",
        "numaNode": 1,
        "smt": True,
        "l3": 3,
        "firmware": attribute_value("firmware", {"version": "1.10.0-rc.1"}),
        "resource.kubernetes.io/numaNode": 1,
        "tags": ["a", "b"],
    },
    {"cpu": parse_quantity("8"), "memory": parse_quantity("16Gi")},
    allow_multiple_allocations=False,
)
A = 'device.attributes["dra.cpu"]'
C = 'device.capacity["dra.cpu"]'

# (expression, expected value) -- evaluated on DEVICE
VALUES: list[tuple[str, Any]] = [
    ('device.driver == "dra.cpu"', True),
    (f'{A}.coreType == "P-core"', True),
    (f"{A}.numaNode == 1 && {A}.smt", True),
    (f'cel.bind(c, {A}, c.coreType == "P-core" && c.l3 == 3)', True),
    ('device.attributes["resource.kubernetes.io"].numaNode', 1),
    ('device.attributes["unknown.example.com"] == {}', True),
    ('size(device.attributes["unknown.example.com"])', 0),
    ('"x" in device.attributes["unknown.example.com"]', False),
    (f'has({A}.coreType)', True),
    (f'has({A}.nope)', False),
    (f'"nope" in {A}', False),
    (f"{A}.?nope.orValue(42)", 42),
    (f"{A}.?l3.hasValue()", True),
    ("device.allowMultipleAllocations", False),
    (f'{C}.cpu.compareTo(quantity("8"))', 0),
    (f'{C}.cpu.isGreaterThan(quantity("7500m"))', True),
    (f'{C}.cpu.isLessThan(quantity("9"))', True),
    (f'{C}.memory == quantity("16Gi")', True),
    (f'{C}.memory == quantity("17179869184")', True),
    (f"{C}.cpu.asInteger()", 8),
    (f"{C}.cpu.isInteger()", True),
    ('quantity("1500m").isInteger()', False),
    ('quantity("1500m").asApproximateFloat()', 1.5),
    ('quantity("1").add(quantity("500m")) == quantity("1.5")', True),
    ('quantity("2").sub(1).asInteger()', 1),
    ('sign(quantity("-3"))', -1),  # a global function in quantity.go, not a member
    ('isQuantity("1Ki")', True),
    ('isQuantity("1KB")', False),
    (f'{A}.firmware.isGreaterThan(semver("1.9.0"))', True),
    (f'{A}.firmware.isLessThan(semver("1.10.0"))', True),
    (f"{A}.firmware.minor()", 10),
    ('semver("1.2.3").compareTo(semver("1.2.3"))', 0),
    ('semver("v1.2", true) == semver("1.2.0")', True),
    ('isSemver("1.2")', False),
    ('isSemver("v1.2", true)', True),
    (f'{A}.l3 > 2.5', True),
    (f'{A}.l3 < 3u', False),
    (f'{A}.coreType.startsWith("P") && {A}.coreType.endsWith("core")', True),
    (f'{A}.coreType.lowerAscii()', "p-core"),
    (f'{A}.coreType.split("-")', ["P", "core"]),
    (f'{A}.coreType.matches("^[PE]-core$")', True),
    (f'{A}.tags.includes("a")', True),
    (f'{A}.numaNode.includes(1)', True),
    ("[3, 1, 2].max()", 3),
    ("[1, 2, 3].isSorted()", True),
    ("[1, 2, 2].indexOf(2)", 1),
    ("[1, 2, 2].lastIndexOf(2)", 2),
    ("[1, 2, 3].sum()", 6),
    ("sets.contains([1, 2, 3], [2, 3])", True),
    ("sets.intersects([1], [2])", False),
    ("sets.equivalent([1, 2], [2, 1, 1])", True),
    ('"%s-%d".format(["a", 1])', "a-1"),
]

# (expression, error class, message fragment)
ERRORS: list[tuple[str, type[Exception], str]] = [
    (f"{A}.nope == 1", CelRuntimeError, "no such key: nope"),
    ('device.attributes["unknown.example.com"].x == 1', CelRuntimeError, "no such key: x"),
    (f"{C}.nope.isInteger()", CelRuntimeError, "no such key: nope"),
    ('quantity("12 apples") == quantity("1")', CelRuntimeError, "quantities must match"),
    ('semver("one") == semver("1.0.0")', CelRuntimeError, "No Major.Minor.Patch elements found"),
    ("1 +", CelCompileError, "Syntax error"),
    ("device.nodeName == 'x'", CelCompileError, "undefined field 'nodeName'"),
    ("undefinedFunction(1)", CelCompileError, "undeclared reference"),
    ('device.driver == 1 + "a"', CelCompileError, "no matching overload"),
    ('quantity("1500m").asInteger() == 1', CelRuntimeError, "cannot convert value to integer"),
    ("[].max() == 1", CelRuntimeError, "empty list"),
    ("1 / 0 == 1", CelRuntimeError, "division by zero"),
    # DRAListTypeAttributes is off in 1.36: an attribute is ``any``, not a list to iterate
    (f'{A}.tags.exists(t, t == "b")', CelCompileError, "expression of type 'any' cannot be the range of a comprehension"),
    ("[1, 2].size()", CelCompileError, "must evaluate to bool or the unknown type, not int"),
    ('quantity("1").sign() == 1', CelCompileError, "sign"),
]


@pytest.mark.parametrize(("expression", "expected"), VALUES)
def test_expression_value(expression: str, expected: Any) -> None:
    got = compile_expression(expression).evaluate(DEVICE)
    assert got == expected
    assert type(got) is type(expected)


@pytest.mark.parametrize(("expression", "error", "fragment"), ERRORS)
def test_expression_error(expression: str, error: type[Exception], fragment: str) -> None:
    with pytest.raises(error) as info:
        compile_selector(expression).matches(DEVICE)
    assert fragment in str(info.value)
    assert expression in str(info.value)


def test_non_bool_result_is_an_error_for_a_selector() -> None:
    with pytest.raises(CelRuntimeError, match="could not be converted to bool"):
        compile_selector(f"{A}.l3").matches(DEVICE)


def test_compile_error_reports_position() -> None:
    with pytest.raises(CelCompileError) as info:
        compile_selector("device.driver == ")
    assert info.value.position == 18


def test_missing_domain_retry_does_not_leak_into_the_device() -> None:
    compile_selector('device.attributes["later.io"].size() == 0').matches(DEVICE)
    assert not compile_selector('"later.io" in device.attributes').matches(DEVICE)


def test_unqualified_names_use_the_driver_domain() -> None:
    assert split_qualified_name("coreType", "dra.cpu") == ("dra.cpu", "coreType")
    assert split_qualified_name("a.io/b/c", "dra.cpu") == ("a.io", "b/c")


def test_expression_length_limit() -> None:
    with pytest.raises(CelCompileError, match="longer than"):
        compile_selector("true && " * 2000 + "true")


def test_attribute_values() -> None:
    assert attribute_value("x", {"int": 3}) == 3
    assert attribute_value("x", {"versions": ["1.0.0"]}) == [Semver(1, 0, 0)]
    with pytest.raises(ValueError, match="unsupported attribute value"):
        attribute_value("x", {"float": 1.5})


# --- Quantity and semver properties ----------------------------------------------------------


@given(st.integers(-(10**15), 10**15), st.sampled_from(["", "m", "k", "M", "G", "Ki", "Mi", "Gi"]))
def test_quantity_round_trip(n: int, suffix: str) -> None:
    q = parse_quantity(f"{n}{suffix}")
    again = parse_quantity(str(q))
    assert again == q


@given(st.text(max_size=12))
def test_quantity_parser_never_crashes(text: str) -> None:
    try:
        q = parse_quantity(text)
    except QuantityError:
        return
    assert isinstance(q.amount, Fraction)


def test_quantity_parsing_and_rounding() -> None:
    assert parse_quantity("1Ki").amount == 1024
    assert parse_quantity("1500m").amount == Fraction(3, 2)
    assert parse_quantity("1e3").amount == 1000
    assert parse_quantity("1500m").value() == 2
    assert str(Quantity.of(2048, "BinarySI")) == "2Ki"
    assert str(Quantity.of(Fraction(3, 2))) == "1500m"
    with pytest.raises(QuantityError):
        parse_quantity("1.2.3")


@given(st.integers(0, 50), st.integers(0, 50), st.integers(0, 50))
def test_semver_order_is_tuple_order(a: int, b: int, c: int) -> None:
    v = parse_semver(f"{a}.{b}.{c}")
    assert v.compare(parse_semver(f"{a}.{b}.{c}-rc.1")) == 1
    assert v.compare(parse_semver(f"{a}.{b}.{c + 1}")) == -1
    assert str(v) == f"{a}.{b}.{c}"


def test_semver_prerelease_precedence() -> None:
    order = ["1.0.0-alpha", "1.0.0-alpha.1", "1.0.0-alpha.beta", "1.0.0-beta", "1.0.0-beta.2", "1.0.0-beta.11", "1.0.0-rc.1", "1.0.0"]
    vs = [parse_semver(x) for x in order]
    assert all(vs[i].compare(vs[i + 1]) == -1 for i in range(len(vs) - 1))
    with pytest.raises(SemverError):
        parse_semver("01.2.3")


# --- decoders never crash on bad input -------------------------------------------------------

_json = st.recursive(
    st.none() | st.booleans() | st.integers(-5, 5) | st.text(max_size=6),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.sampled_from(["name", "spec", "metadata", "devices", "driver", "pool", "requests", "exactly", "count", "attributes", "capacity", "value", "int", "string", "firstAvailable", "deviceClassName", "constraints", "selectors", "cel", "expression"]), inner, max_size=4),
    max_leaves=12,
)


@given(_json)
def test_api_parsers_reject_garbage_with_api_error(obj: Any) -> None:
    from topodra.sim.objects import ObjectError, parse_claim, parse_class, parse_slice

    for parse in (parse_slice, parse_claim, parse_class):
        with contextlib.suppress(ObjectError):
            parse(obj)


@given(st.text(max_size=40))
def test_selector_compiler_never_crashes(expression: str) -> None:
    with contextlib.suppress(CelCompileError, CelRuntimeError):
        compile_selector(expression).evaluate(DEVICE)


_BASE_SLICE = {
    "metadata": {"name": "s"},
    "spec": {
        "driver": "d.io",
        "nodeName": "n",
        "pool": {"name": "n", "generation": 1, "resourceSliceCount": 1},
        "devices": [{"name": "a", "attributes": {"x": {"int": 1}}, "capacity": {"cpu": {"value": "2"}}, "consumesCounters": [{"counterSet": "s", "counters": {"c": {"value": "1"}}}], "taints": [{"key": "k", "effect": "NoSchedule"}]}],
        "sharedCounters": [{"name": "s", "counters": {"c": {"value": "4"}}}],
    },
}
_BASE_CLAIM = {
    "metadata": {"name": "c"},
    "spec": {"devices": {"requests": [{"name": "r", "exactly": {"deviceClassName": "k", "count": 2, "capacity": {"requests": {"cpu": "1"}}, "tolerations": [{"key": "k"}]}}, {"name": "f", "firstAvailable": [{"name": "s", "deviceClassName": "k"}]}], "constraints": [{"matchAttribute": "d.io/x"}]}},
}


def _paths(obj: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    out = [prefix]
    if isinstance(obj, dict):
        for k, v in obj.items():
            out += _paths(v, (*prefix, k))
    elif isinstance(obj, list):
        for i, v in enumerate(obj):
            out += _paths(v, (*prefix, i))
    return out


def _mutate(base: Any, path: tuple[Any, ...], value: Any) -> Any:
    import copy

    obj = copy.deepcopy(base)
    if not path:
        return value
    cur = obj
    for k in path[:-1]:
        cur = cur[k]
    cur[path[-1]] = value
    return obj


@given(st.data(), _json)
def test_parsers_reject_mutated_objects_with_api_error(data: Any, garbage: Any) -> None:
    from topodra.sim.objects import ObjectError, parse_claim, parse_slice

    for base, parse in ((_BASE_SLICE, parse_slice), (_BASE_CLAIM, parse_claim)):
        path = data.draw(st.sampled_from(_paths(base)))
        with contextlib.suppress(ObjectError):
            parse(_mutate(base, path, garbage))
