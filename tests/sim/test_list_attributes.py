"""List-typed attributes (``DRAListTypeAttributes``) in the allocator, gate on and off.

The cases of upstream's ``allocatortesting/allocator_testing.go`` (``list-attributes-*``, Kubernetes
v1.36.2) written again with our builders, plus the quirk kept on purpose (a removal does not widen
``matchAttribute``'s intersection) and a cross-driver claim as the playground makes them.
"""

from __future__ import annotations

from typing import Any

import pytest

from topodra.sim.allocator import AllocationError, Allocator

from .builders import DRIVER, claim, dclass, device, picked, req, slice_

CLS = dclass("cls", f'device.driver == "{DRIVER}"')
NODE = {"metadata": {"name": "node-1"}}


def run(values: list[dict[str, Any]], constraint: str, count: int = 2, *, gate: bool = True, requests: int = 1) -> Any:
    devices = [device(f"d{i}", {"a": v}) for i, v in enumerate(values)]
    reqs = [req("r", "cls", count)] if requests == 1 else [req(f"r{i}", "cls", 1) for i in range(requests)]
    c = claim("c", *reqs, constraints=[{constraint: f"{DRIVER}/a"}])
    got = picked(Allocator([slice_("s", "node-1", devices)], [CLS], list_type_attributes=gate).allocate(NODE, [c]))
    return None if got is None else [d for _, d in got[0]]


def s(v: str) -> dict[str, Any]:
    return {"string": v}


def ss(*v: str) -> dict[str, Any]:
    return {"strings": list(v)}


@pytest.mark.parametrize(
    ("values", "count", "requests", "want"),
    [
        ([s("value1"), s("value1")], 2, 1, ["d0", "d1"]),
        ([ss("value1", "value2", "value3"), ss("value2", "value3", "value4")], 2, 1, ["d0", "d1"]),
        ([ss("value1", "value2"), ss("value2", "value3"), ss("value3", "value1")], 3, 1, None),
        ([ss("value1", "value2"), ss("value3", "value4")], 1, 2, None),
        ([s("value1"), ss("value1", "value2")], 2, 1, ["d0", "d1"]),
        ([s("value1"), ss("value1", "value2"), ss("value2", "value3")], 3, 1, None),
        ([s("value1"), ss("value2", "value3")], 2, 1, None),
        ([{"ints": [0, 1, 2]}, {"ints": [1, 2, 3]}], 2, 1, ["d0", "d1"]),
        ([{"bools": [True, False]}, {"bools": [True]}], 2, 1, ["d0", "d1"]),
        ([{"versions": ["1.0.0", "1.1.0", "2.0.0"]}, {"versions": ["1.1.0", "2.0.0", "2.1.0"]}], 2, 1, ["d0", "d1"]),
        # our own: a string list never meets an int list, nor a scalar of another type
        ([{"ints": [1]}, ss("1")], 2, 1, None),
        ([{"int": 1}, {"ints": [1, 2]}], 2, 1, ["d0", "d1"]),
    ],
)
def test_match_attribute_meets_sets(values: list[dict[str, Any]], count: int, requests: int, want: list[str] | None) -> None:
    assert run(values, "matchAttribute", count, requests=requests) == want


@pytest.mark.parametrize(
    ("values", "want"),
    [
        ([s("value1"), s("value2")], ["d0", "d1"]),
        ([s("value1"), s("value1")], None),
        ([ss("value1", "value2"), ss("value2", "value3"), ss("value3", "value4")], ["d0", "d2"]),
        ([ss("value1", "value2", "value3"), ss("value2", "value4", "value5")], None),
        ([s("value1"), ss("value1", "value2"), ss("value2", "value3")], ["d0", "d2"]),
        ([s("value1"), ss("value1", "value2")], None),
        ([{"ints": [0, 1]}, {"ints": [1, 2]}, {"ints": [2, 3]}], ["d0", "d2"]),
        ([{"bools": [True]}, {"bools": [True, False]}, {"bools": [False]}], ["d0", "d2"]),
        ([{"versions": ["1.0.0", "1.1.0"]}, {"versions": ["1.1.0", "2.0.0"]}, {"versions": ["2.0.0", "2.1.0"]}], ["d0", "d2"]),
    ],
)
def test_distinct_attribute_keeps_sets_disjoint(values: list[dict[str, Any]], want: list[str] | None) -> None:
    assert run(values, "distinctAttribute") == want
    # the same over two requests (upstream remembers one value per request name)
    assert run(values, "distinctAttribute", requests=2) == want


@pytest.mark.parametrize("constraint", ["matchAttribute", "distinctAttribute"])
def test_without_the_gate_a_list_fails_every_selector(constraint: str) -> None:
    with pytest.raises(AllocationError, match="attribute a: unsupported attribute value"):
        run([ss("value1", "value2", "value3"), ss("value2", "value3", "value4")], constraint, gate=False)


def test_without_the_gate_scalars_still_match() -> None:
    assert run([s("x"), s("x")], "matchAttribute", gate=False) == ["d0", "d1"]


def test_a_removal_does_not_widen_the_intersection() -> None:
    # a takes A {x,y}; b takes B {y} (intersection {y}); c finds no D meeting {y}; b gives B back
    # and tries C {x}: upstream still holds {y} and refuses it, so the claim fails although
    # A, C, D share x (allocator_experimental.go: remove only counts down).
    sel = f'device.attributes["{DRIVER}"].role == '
    devices = [
        device("A", {"a": ss("x", "y"), "role": s("a")}),
        device("B", {"a": ss("y"), "role": s("b")}),
        device("C", {"a": ss("x"), "role": s("b")}),
        device("D", {"a": ss("x"), "role": s("c")}),
    ]
    c = claim(
        "c",
        req("a", "cls", 1, sel + '"a"'),
        req("b", "cls", 1, sel + '"b"'),
        req("c", "cls", 1, sel + '"c"'),
        constraints=[{"matchAttribute": f"{DRIVER}/a"}],
    )
    slices = [slice_("s", "node-1", devices)]
    assert Allocator(slices, [CLS], list_type_attributes=True).allocate(NODE, [c]) is None
    without_b = [d for d in devices if d["name"] != "B"]
    got = Allocator([slice_("s", "node-1", without_b)], [CLS], list_type_attributes=True).allocate(NODE, [c])
    assert picked(got) == [[("a", "A"), ("b", "C"), ("c", "D")]]


def test_cross_driver_match_on_a_standard_attribute() -> None:
    root = "resource.kubernetes.io/pcieRoot"
    cpus = slice_(
        "cpus",
        "node-1",
        [
            device("cpu0", {root: ss("pci0000:00", "pci0000:40")}),
            device("cpu1", {root: s("pci0000:80")}),
            device("cpu2", {root: s("pci0000:80")}),
        ],
        driver="native.cpu",
    )
    gpus = slice_("gpus", "node-1", [device("gpu0", {root: s("pci0000:40")}), device("gpu1", {root: s("pci0000:80")})], driver="gpu.example.com")
    classes = [dclass("native.cpu", 'device.driver == "native.cpu"'), dclass("gpu", 'device.driver == "gpu.example.com"')]
    c = claim("c", req("gpu", "gpu", 1), req("cpus", "native.cpu", 1), constraints=[{"matchAttribute": root}])
    got = Allocator([cpus, gpus], classes, list_type_attributes=True).allocate(NODE, [c])
    assert picked(got) == [[("gpu", "gpu0"), ("cpus", "cpu0")]]
    two = claim("c", req("gpu", "gpu", 1), req("cpus", "native.cpu", 2), constraints=[{"matchAttribute": root}])
    got = Allocator([cpus, gpus], classes, list_type_attributes=True).allocate(NODE, [two])
    assert picked(got) == [[("gpu", "gpu1"), ("cpus", "cpu1"), ("cpus", "cpu2")]]
    # the fast paths and the plain search agree with the gate on
    plain = Allocator([cpus, gpus], classes, list_type_attributes=True, plain=True).allocate(NODE, [two])
    assert picked(plain) == picked(got)
