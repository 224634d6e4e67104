"""List-typed attributes (``DRAListTypeAttributes``) in the allocator, as kube-scheduler 1.36 has them.

With the gate on, the scheduler's CEL sees lists (``includes``, ``in``, ``size``...), but its
allocator is still ``internal/incubating`` (``AllocatorFeatures`` in ``dynamicresources.go``
passes no ``ListTypeAttributes``): a list matches nothing in ``matchAttribute`` except as the
first device, and ``distinctAttribute`` refuses a list once it holds a value. With the gate off,
a device with a list attribute fails every selector. The recording ``v13-pcie-root``
(tests/data/sched-recorded) shows the same on a real scheduler.
"""

from __future__ import annotations

from typing import Any

import pytest

from topodra.sim.allocator import AllocationError, Allocator

from .builders import DRIVER, claim, dclass, device, picked, req, slice_

CLS = dclass("cls", f'device.driver == "{DRIVER}"')
NODE = {"metadata": {"name": "node-1"}}


def run(values: list[dict[str, Any]], constraint: str, count: int = 2, *, gate: bool = True, selector: str = "") -> Any:
    devices = [device(f"d{i}", {"a": v}) for i, v in enumerate(values)]
    r = req("r", "cls", count, selector) if selector else req("r", "cls", count)
    c = claim("c", r, constraints=[{constraint: f"{DRIVER}/a"}] if constraint else None)
    got = picked(Allocator([slice_("s", "node-1", devices)], [CLS], list_type_attributes=gate).allocate(NODE, [c]))
    return None if got is None else [d for _, d in got[0]]


def s(v: str) -> dict[str, Any]:
    return {"string": v}


def ss(*v: str) -> dict[str, Any]:
    return {"strings": list(v)}


@pytest.mark.parametrize(
    ("values", "count", "want"),
    [
        ([s("x"), s("x")], 2, ["d0", "d1"]),
        # equal lists, or a list meeting a scalar, still never match (incubating's "type unknown")
        ([ss("x", "y"), ss("x", "y"), s("x"), s("x")], 2, ["d2", "d3"]),
        ([s("x"), ss("x", "y"), s("x")], 2, ["d0", "d2"]),
        # a list is taken as the first device, and then nothing else matches it
        ([ss("x", "y"), ss("x", "y")], 1, ["d0"]),
        ([ss("x", "y"), ss("x", "y")], 2, None),
        ([{"ints": [0, 1]}, {"int": 0}], 2, None),
    ],
)
def test_match_attribute_never_matches_a_list(values: list[dict[str, Any]], count: int, want: list[str] | None) -> None:
    assert run(values, "matchAttribute", count) == want


@pytest.mark.parametrize(
    ("values", "want"),
    [
        ([s("x"), s("y")], ["d0", "d1"]),
        # a list is refused once a value is held, even a disjoint one
        ([s("x"), ss("y", "z"), s("y")], ["d0", "d2"]),
        # as the first device a list is taken; a scalar after it is compared with nothing it knows
        ([ss("x", "y"), s("x")], ["d0", "d1"]),
    ],
)
def test_distinct_attribute_refuses_a_list_once_it_holds_a_value(values: list[dict[str, Any]], want: list[str] | None) -> None:
    assert run(values, "distinctAttribute") == want


def test_selectors_see_lists_with_the_gate() -> None:
    values = [s("pci0000:80"), ss("pci0000:80", "pci0000:a0"), s("pci0000:20")]
    a = f'device.attributes["{DRIVER}"].a'
    assert run(values, "", 1, selector=f'{a}.includes("pci0000:a0")') == ["d1"]
    assert run(values, "", 1, selector=f'{a}.includes("pci0000:20")') == ["d2"]  # a scalar includes itself
    with pytest.raises(AllocationError, match="CEL runtime error"):  # `in` over a string: no overload
        run(values, "", 1, selector=f'"pci0000:a0" in {a}')


@pytest.mark.parametrize("constraint", ["matchAttribute", "distinctAttribute", ""])
def test_without_the_gate_a_list_fails_every_selector(constraint: str) -> None:
    with pytest.raises(AllocationError, match="attribute a: unsupported attribute value"):
        run([ss("value1", "value2"), s("value2")], constraint, gate=False)


def test_without_the_gate_scalars_still_match() -> None:
    assert run([s("x"), s("x")], "matchAttribute", gate=False) == ["d0", "d1"]


def test_cross_driver_match_on_a_standard_attribute() -> None:
    root = "resource.kubernetes.io/pcieRoot"
    cpus = slice_(
        "cpus",
        "node-1",
        [
            device("cpu0", {root: ss("pci0000:00", "pci0000:40")}),
            device("cpu1", {root: s("pci0000:40")}),
            device("cpu2", {root: s("pci0000:80")}),
            device("cpu3", {root: s("pci0000:80")}),
        ],
        driver="native.cpu",
    )
    gpus = slice_("gpus", "node-1", [device("gpu0", {root: s("pci0000:40")}), device("gpu1", {root: s("pci0000:80")})], driver="gpu.example.com")
    classes = [dclass("native.cpu", 'device.driver == "native.cpu"'), dclass("gpu", 'device.driver == "gpu.example.com"')]
    one = claim("c", req("gpu", "gpu", 1), req("cpus", "native.cpu", 1), constraints=[{"matchAttribute": root}])
    # gpu0 with cpu1: cpu0's list, although it names pci0000:40, is no match
    assert picked(Allocator([cpus, gpus], classes, list_type_attributes=True).allocate(NODE, [one])) == [[("gpu", "gpu0"), ("cpus", "cpu1")]]
    two = claim("c", req("gpu", "gpu", 1), req("cpus", "native.cpu", 2), constraints=[{"matchAttribute": root}])
    got = Allocator([cpus, gpus], classes, list_type_attributes=True).allocate(NODE, [two])
    assert picked(got) == [[("gpu", "gpu1"), ("cpus", "cpu2"), ("cpus", "cpu3")]]
    plain = Allocator([cpus, gpus], classes, list_type_attributes=True, plain=True).allocate(NODE, [two])
    assert picked(plain) == picked(got)


def test_the_attribute_type_follows_the_gate() -> None:
    """compile.go types attributes ``any`` without the gate and ``dyn`` with it: a comprehension
    over one compiles only with the gate, and fails at run time on a scalar as cel-go does."""
    from topodra.sim.cel import CelCompileError, CelDevice, CelRuntimeError, compile_selector

    expression = f'device.attributes["{DRIVER}"].a.exists(r, r.startsWith("x"))'
    with pytest.raises(CelCompileError, match="cannot be the range of a comprehension"):
        compile_selector(expression)
    selector = compile_selector(expression, lists=True)
    assert selector.matches(CelDevice.build(DRIVER, {f"{DRIVER}/a": ["y", "x1"]}))
    for value, go in (("x", "types.String"), (3, "types.Int"), (True, "types.Bool")):
        with pytest.raises(CelRuntimeError) as err:
            selector.matches(CelDevice.build(DRIVER, {f"{DRIVER}/a": value}))
        assert err.value.message == f"got '{go}', expected iterable type"
    # a dyn result is a valid selector with the gate only
    assert compile_selector(f'device.attributes["{DRIVER}"].flag', lists=True).matches(CelDevice.build(DRIVER, {f"{DRIVER}/flag": True}))
