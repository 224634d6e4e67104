"""ResourceSlice building: one pool per node, chunking limits, stable names, counts."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from topodra.cpuset import CPUSet
from topodra.dra.devices import DRIVER, Device, build_devices
from topodra.dra.slices import (
    MAX_DEVICES_PER_SLICE,
    MAX_DEVICES_PER_SLICE_ADVANCED,
    build_slices,
    chunk_devices,
    slice_name,
)
from topodra.topology import synthetic_topology

BIG = synthetic_topology("2s1d2n2l8c2t")  # 128 CPUs
HUGE = synthetic_topology("2s1d2n2l16c2t")  # 256 CPUs


def _device(i: int, *, advanced: bool = False) -> Device:
    attrs: dict[str, object] = {"i": i}
    if advanced:
        attrs["l"] = (1, 2)
    return Device(name=f"d{i}", attributes=attrs, cpus=CPUSet([i]))  # type: ignore[arg-type]


def test_slices_for_256_cpus() -> None:
    devices = build_devices(HUGE)
    slices = build_slices("node-a", devices, generation=3, node_uid="uid-1")
    assert len(slices) == 2
    for i, s in enumerate(slices):
        assert s["apiVersion"] == "resource.k8s.io/v1"
        assert s["kind"] == "ResourceSlice"
        assert s["metadata"]["name"] == f"node-a-{DRIVER}-{i}"
        assert s["metadata"]["ownerReferences"] == [
            {"apiVersion": "v1", "kind": "Node", "name": "node-a", "uid": "uid-1", "controller": True}
        ]
        spec = s["spec"]
        assert spec["driver"] == DRIVER
        assert spec["nodeName"] == "node-a"
        assert spec["pool"] == {"name": "node-a", "generation": 3, "resourceSliceCount": 2}
        assert len(spec["devices"]) == MAX_DEVICES_PER_SLICE
    names = [d["name"] for s in slices for d in s["spec"]["devices"]]
    assert names == [d.name for d in devices]


def test_no_owner_without_node_uid() -> None:
    (s,) = build_slices("n", build_devices(synthetic_topology("1s1n1l2c1t")))
    assert "ownerReferences" not in s["metadata"]


def test_empty_pool_still_has_one_slice() -> None:
    (s,) = build_slices("n", [])
    assert s["spec"]["devices"] == []
    assert s["spec"]["pool"]["resourceSliceCount"] == 1


def test_advanced_devices_lower_the_limit() -> None:
    devices = [_device(i, advanced=(i == 3)) for i in range(130)]
    chunks = chunk_devices(devices)
    assert [len(c) for c in chunks] == [64, 66]
    taint = Device(name="t", attributes={}, taints=({"key": "k", "effect": "NoSchedule"},))
    assert taint.uses_advanced_features


def test_bad_input() -> None:
    with pytest.raises(ValueError, match="DNS subdomain"):
        build_slices("Node_A", [])
    with pytest.raises(ValueError, match="generation"):
        build_slices("n", [], generation=0)
    with pytest.raises(ValueError, match="'d1' appears twice"):
        build_slices("n", [_device(1), _device(1)])


def test_long_node_names_are_shortened_stably() -> None:
    node = ".".join(["a" * 60] * 4)  # 243 characters
    name = slice_name(node, 12)
    assert len(name) <= 253
    assert name == slice_name(node, 12)
    assert name != slice_name(node + "b", 12)
    assert name.endswith(f"-{DRIVER}-12")


@given(
    flags=st.lists(st.booleans(), max_size=400),
)
def test_chunking_respects_limits_and_order(flags: list[bool]) -> None:
    devices = [_device(i, advanced=a) for i, a in enumerate(flags)]
    chunks = chunk_devices(devices)
    assert [d for c in chunks for d in c] == devices
    assert len(chunks) >= 1
    for c in chunks:
        limit = MAX_DEVICES_PER_SLICE_ADVANCED if any(d.uses_advanced_features for d in c) else MAX_DEVICES_PER_SLICE
        assert len(c) <= limit
    slices = build_slices("n", devices, generation=7)
    assert {s["spec"]["pool"]["resourceSliceCount"] for s in slices} == {len(slices)}
    assert len({s["metadata"]["name"] for s in slices}) == len(slices)
