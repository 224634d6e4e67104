"""Devices and slices built from real sysfs trees pass the API server's validation."""

from __future__ import annotations

import pytest

from topodra.dra.devices import DeviceModelConfig, build_devices
from topodra.dra.slices import build_slices
from topodra.embedded.validation import validate_resource_slice
from topodra.topology.fixtures import unpacked_fixture
from topodra.topology.sysfs import read_topology

FIXTURES = [
    "20em64t-hybrid-1p6c2t+2ca4co1t",
    "256ia64-64n2s2c",
    "128ia64-17n4s2c",
    "32em64t-2n8c+dax+nvme+mic+dimms",
    "fakeheterocpunuma",
    "2arm-2c",
]
CONFIGS = [
    DeviceModelConfig(),
    DeviceModelConfig(model="core"),
    DeviceModelConfig(model="grouped", group_by="numa"),
    DeviceModelConfig(model="grouped", group_by="l3"),
    DeviceModelConfig(model="grouped", group_by="socket"),
    DeviceModelConfig(model="grouped", group_by="machine"),
]


@pytest.mark.parametrize("name", FIXTURES)
def test_real_machines_publish_valid_slices(name: str) -> None:
    topo = read_topology(unpacked_fixture(name))
    for config in CONFIGS:
        devices = build_devices(topo, config)
        union: set[int] = set()
        for d in devices:
            assert d.cpus
            assert union.isdisjoint(d.cpus)
            union |= set(d.cpus)
        assert union == set(topo.online)
        for s in build_slices("node-1", devices, node_uid="uid"):
            assert validate_resource_slice(s, None) == [], (name, config)
        if config.model == "cpu":
            for d in devices:
                cpu = topo.cpus[int(d.name[3:])]
                assert d.attributes["core"] == cpu.core
                assert d.attributes["localMemory"] == cpu.node
