"""``resource.kubernetes.io/pcieRoot`` on native.cpu devices: a string, a list, or nothing."""

from __future__ import annotations

from dataclasses import replace

import pytest
from pydantic import ValidationError

from topodra.cpuset import CPUSet
from topodra.dra.attributes import attribute_to_api
from topodra.dra.devices import (
    MODELS,
    PCIE_ROOT_ATTRIBUTE,
    DeviceModelConfig,
    build_devices,
)
from topodra.dra.slices import build_slices
from topodra.topology import read_topology, synthetic_topology
from topodra.topology.fixtures import unpacked_fixture
from topodra.topology.model import Topology

TWO_SOCKETS = read_topology(unpacked_fixture("32em64t-2n8c+dax+nvme+mic+dimms"))  # 00: 0-7, 80: 8-15
SHARED_ROOTS = read_topology(unpacked_fixture("40intel64-2g2n4c+pcilocality"))  # 00 and 40: all CPUs


def _roots(t: Topology, model: str, lists: bool) -> dict[str, object]:
    cfg = DeviceModelConfig(model=model, list_attributes=lists)  # type: ignore[arg-type]
    return {d.name: d.attributes.get(PCIE_ROOT_ATTRIBUTE) for d in build_devices(t, cfg)}


@pytest.mark.parametrize("lists", [False, True])
def test_a_cpu_local_to_one_root_carries_its_name(lists: bool) -> None:
    got = _roots(TWO_SOCKETS, "cpu", lists)
    assert got == {f"cpu{c}": "pci0000:00" if c < 8 else "pci0000:80" for c in TWO_SOCKETS.online}
    assert _roots(TWO_SOCKETS, "core", lists) == {f"core{c}": "pci0000:00" if c < 8 else "pci0000:80" for c in range(16)}
    assert _roots(TWO_SOCKETS, "grouped", lists) == {"numa0": "pci0000:00", "numa1": "pci0000:80"}


def test_a_cpu_local_to_several_roots_carries_a_list_or_nothing() -> None:
    assert set(_roots(SHARED_ROOTS, "cpu", False).values()) == {None}
    assert set(_roots(SHARED_ROOTS, "cpu", True).values()) == {("pci0000:00", "pci0000:40")}
    assert set(_roots(SHARED_ROOTS, "grouped", True).values()) == {("pci0000:00", "pci0000:40")}
    device = build_devices(SHARED_ROOTS, DeviceModelConfig(list_attributes=True))[0]
    assert device.to_api()["attributes"][PCIE_ROOT_ATTRIBUTE] == {"strings": ["pci0000:00", "pci0000:40"]}
    assert device.uses_advanced_features


def test_list_slices_hold_at_most_64_devices() -> None:
    big = synthetic_topology("1s1d1n1l48c2t")  # 96 CPUs
    two = synthetic_topology("1s1d2n1l48c1t+pci").pci_roots  # two roots, made local to every CPU
    t = replace(big, pci_roots=tuple(replace(r, cpus=big.online) for r in two))
    devices = build_devices(t, DeviceModelConfig(list_attributes=True))
    assert [len(s["spec"]["devices"]) for s in build_slices("n", devices)] == [64, 32]
    plain = build_devices(t, DeviceModelConfig(list_attributes=False))
    assert [len(s["spec"]["devices"]) for s in build_slices("n", plain)] == [96]


@pytest.mark.parametrize("model", MODELS)
@pytest.mark.parametrize("spec", ["2s1d2n1l4c2t+pci", "1s1d1n2l3c2t2e+pci"])
def test_every_device_lies_within_the_roots_it_names(model: str, spec: str) -> None:
    t = synthetic_topology(spec)
    local = {r.name: r.cpus for r in t.pci_roots}
    for lists in (False, True):
        for d in build_devices(t, DeviceModelConfig(model=model, list_attributes=lists)):  # type: ignore[arg-type]
            value = d.attributes.get(PCIE_ROOT_ATTRIBUTE)
            names = [value] if isinstance(value, str) else [str(v) for v in value or ()]  # type: ignore[union-attr]
            assert names, d.name
            for name in names:
                assert d.cpus <= local[name]


def test_no_pci_data_no_attribute() -> None:
    assert set(_roots(synthetic_topology("2s1d2n1l4c2t"), "cpu", True).values()) == {None}


def test_the_setting() -> None:
    assert DeviceModelConfig.from_mapping({"listAttributes": True}).list_attributes is True
    assert DeviceModelConfig().list_attributes is False
    with pytest.raises(ValidationError, match="listAttributes"):
        DeviceModelConfig.from_mapping({"listAttributes": "maybe"})
    with pytest.raises(ValueError, match="listAttributes must be true or false"):
        DeviceModelConfig(list_attributes=1)  # type: ignore[arg-type]


def test_reserved_cpus_do_not_change_the_roots() -> None:
    devices = build_devices(TWO_SOCKETS, DeviceModelConfig(model="grouped"), exclude=CPUSet(range(8)))
    assert [(d.name, attribute_to_api(d.attributes[PCIE_ROOT_ATTRIBUTE])) for d in devices] == [
        ("numa1", {"string": "pci0000:80"})
    ]


def test_a_server_without_the_list_gate_is_named_in_the_publishing_error() -> None:
    """A server without DRAListTypeAttributes drops the lists and then refuses the attribute left
    without a value (tests/data/apiserver-rejected/list-attributes.json); the agent's error says
    what to change."""
    import asyncio

    from topodra.dra.reconciler import SliceReconciler
    from topodra.embedded.apiserver import ApiServer
    from topodra.embedded.store import Store
    from topodra.gates import LIST_TYPE_ATTRIBUTES
    from topodra.kube.client import NODES, KubeClient

    store = Store(gates={LIST_TYPE_ATTRIBUTES: False})  # drops lists as strategy.go does
    devices = build_devices(SHARED_ROOTS, DeviceModelConfig(list_attributes=True))

    async def main() -> str:
        async with ApiServer(store) as server:
            client = KubeClient.for_url(server.url)
            try:
                await client.create(NODES, {"metadata": {"name": "node-a"}})
                rec = SliceReconciler(client, "node-a", devices)
                stop = asyncio.Event()
                task = asyncio.create_task(rec.run(stop))
                await asyncio.wait_for(rec.failed.wait(), 10)
                stop.set()
                await asyncio.wait_for(task, 5)
                return rec.last_error
            finally:
                await client.close()

    error = asyncio.run(asyncio.wait_for(main(), 20))
    assert 'Invalid value: "": exactly one value must be specified' in error
    assert error.endswith("turn the DRAListTypeAttributes gate on or set devices.listAttributes: false")
    # One field error per device (40): told by their count and the first, not 40 times over.
    assert "is invalid: 40 field errors, the first: spec.devices[0].attributes[resource.kubernetes.io/pcieRoot]: " in error
    assert len(error) < 400
