"""Devices say how much of the node's ``cpu`` they stand for (nodeAllocatableResourceMappings, KEP-5517)."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from topodra.agent.config import parse_config
from topodra.cpuset import CPUSet
from topodra.dra.devices import MODELS, DeviceModelConfig, build_devices, offer_devices
from topodra.dra.slices import MAX_DEVICES_PER_SLICE, build_slices, chunk_devices
from topodra.topology import synthetic_topology

HYBRID = synthetic_topology("1s1n1l4c2t4e")  # 4 P-cores of 2 threads, 4 E-cores of 1


def _mapping(device: dict[str, object]) -> object:
    return device.get("nodeAllocatableResourceMappings")


@pytest.mark.parametrize("model", MODELS)
def test_every_model_maps_each_device_to_the_cpus_prepare_gives_it(model: str) -> None:
    devices = build_devices(HYBRID, DeviceModelConfig(model=model))  # type: ignore[arg-type]
    assert devices
    for d in devices:
        mapping = _mapping(d.to_api())
        if model == "grouped":
            # the claim's consumed ``cpu`` capacity is its share of the node's cpu
            assert mapping == {"cpu": {"capacityKey": "cpu", "allocationMultiplier": "1"}}
            assert "cpu" in d.capacity
        else:
            # one allocation of the device takes all its CPUs: a CPU 1, a core its threads
            assert mapping == {"cpu": {"allocationMultiplier": str(len(d.cpus))}}


def test_core_devices_count_their_threads_and_hybrid_single_thread_cores_one() -> None:
    by_name = {d.name: d for d in build_devices(HYBRID, DeviceModelConfig(model="core-or-thread"))}
    multipliers = {n: d.node_allocatable["cpu"]["allocationMultiplier"] for n, d in by_name.items()}
    smt = [n for n, d in by_name.items() if n.startswith("core") and len(d.cpus) == 2]
    single = [n for n, d in by_name.items() if n.startswith("core") and len(d.cpus) == 1]
    assert smt
    assert single
    assert {multipliers[n] for n in smt} == {"2"}
    assert {multipliers[n] for n in single} == {"1"}
    assert {multipliers[n] for n in by_name if n.startswith("cpu")} == {"1"}


def test_off_builds_devices_without_the_field_and_on_equals_auto() -> None:
    for model in MODELS:
        off = build_devices(HYBRID, DeviceModelConfig(model=model, node_allocatable="off"))
        assert all("nodeAllocatableResourceMappings" not in d.to_api() for d in off)
        auto = build_devices(HYBRID, DeviceModelConfig(model=model))
        on = build_devices(HYBRID, DeviceModelConfig(model=model, node_allocatable="on"))
        assert [d.to_api() for d in on] == [d.to_api() for d in auto]
        assert [d.without_node_allocatable.to_api() for d in auto] == [d.to_api() for d in off]


def test_without_the_mappings_is_one_object_per_device() -> None:
    d = build_devices(HYBRID)[0]
    plain = d.without_node_allocatable
    assert plain is d.without_node_allocatable  # the reconciler sees an unchanged device as such
    assert plain.without_node_allocatable is plain
    assert plain.cpus == d.cpus
    assert plain.name == d.name


def test_grouped_devices_keep_their_mapping_when_the_offer_shrinks_them() -> None:
    config = DeviceModelConfig(model="grouped")
    devices = build_devices(HYBRID, config)
    offered = offer_devices(HYBRID, config, devices, HYBRID.online - CPUSet([0, 1]))
    assert all(d.node_allocatable == {"cpu": {"capacityKey": "cpu", "allocationMultiplier": "1"}} for d in offered)


def test_the_mappings_do_not_lower_the_slice_limit() -> None:
    # The API lowers the limit to 64 only for taints, counters and list attributes.
    big = synthetic_topology("1s1n1l100c2t")
    devices = build_devices(big)
    assert all(d.node_allocatable for d in devices)
    assert [len(c) for c in chunk_devices(devices)] == [MAX_DEVICES_PER_SLICE, len(devices) - MAX_DEVICES_PER_SLICE]
    first = build_slices("node-a", devices)[0]
    assert _mapping(first["spec"]["devices"][0]) == {"cpu": {"allocationMultiplier": "1"}}


def test_the_switch_reads_yaml_booleans_and_refuses_other_words() -> None:
    # ``nodeAllocatable: off`` unquoted is YAML 1.1's false
    assert parse_config({"devices": {"nodeAllocatable": False}}, "f").devices.node_allocatable == "off"
    assert parse_config({"devices": {"nodeAllocatable": True}}, "f").devices.node_allocatable == "on"
    assert parse_config({}, "f").devices.node_allocatable == "auto"
    assert DeviceModelConfig.from_mapping({"nodeAllocatable": False}).node_allocatable == "off"
    with pytest.raises(ValueError, match=r"f: devices.nodeAllocatable: must be 'auto', 'on' or 'off' \(got 'maybe'\)"):
        parse_config({"devices": {"nodeAllocatable": "maybe"}}, "f")
    with pytest.raises(ValueError, match="nodeAllocatable must be one of auto, on, off"):
        DeviceModelConfig(node_allocatable="maybe")  # type: ignore[arg-type]
    with pytest.raises(ValidationError):
        DeviceModelConfig.from_mapping({"nodeAllocatable": 1})
