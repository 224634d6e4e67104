"""The API server double and nodeAllocatableResourceMappings: kept or dropped by the gate as a real
1.36 server does, and bad mappings refused with validateNodeAllocatableResourceMappings' words."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from topodra.dra.devices import DeviceModelConfig, build_devices
from topodra.dra.slices import build_slices
from topodra.embedded.store import KINDS, Store
from topodra.gates import NODE_ALLOCATABLE, feature_gates
from topodra.kube.errors import ApiError
from topodra.topology import synthetic_topology

SLICES = KINDS[("resource.k8s.io", "resourceslices")]
PODS = KINDS[("", "pods")]
TOPO = synthetic_topology("1s1n1l2c2t")
ON = {NODE_ALLOCATABLE: True}
OFF = feature_gates()  # 1.36's defaults: the alpha gate is off


def _slice(model: str = "cpu") -> dict[str, Any]:
    return build_slices("node-a", build_devices(TOPO, DeviceModelConfig(model=model)))[0]  # type: ignore[arg-type]


def _causes(store: Store, obj: dict[str, Any]) -> list[tuple[str, str, str]]:
    with pytest.raises(ApiError) as info:
        store.create(SLICES, None, obj)
    assert info.value.code == 422
    return [(c.field, c.reason, c.message) for c in info.value.causes]


@pytest.mark.parametrize("model", ["cpu", "core", "core-or-thread", "grouped"])
def test_the_agents_mappings_are_kept_with_the_gate_on_and_dropped_without(model: str) -> None:
    sent = _slice(model)
    kept = Store(gates=ON).create(SLICES, None, copy.deepcopy(sent))
    assert [d.get("nodeAllocatableResourceMappings") for d in kept["spec"]["devices"]] == [
        d["nodeAllocatableResourceMappings"] for d in sent["spec"]["devices"]
    ]
    dropped = Store(gates=OFF).create(SLICES, None, copy.deepcopy(sent))
    assert all("nodeAllocatableResourceMappings" not in d for d in dropped["spec"]["devices"])


def test_a_slice_that_uses_the_field_keeps_it_after_the_gate_goes_off() -> None:
    store = Store(gates=ON)
    stored = store.create(SLICES, None, _slice())
    store.gates[NODE_ALLOCATABLE] = False
    updated = store.update(SLICES, None, stored["metadata"]["name"], copy.deepcopy(stored))
    assert all("nodeAllocatableResourceMappings" in d for d in updated["spec"]["devices"])


def test_a_pods_claim_statuses_follow_the_gate_too() -> None:
    status = {"nodeAllocatableResourceClaimStatuses": [{"resourceClaimName": "c", "containers": ["a"], "resources": {"cpu": "2"}}]}
    for gates, kept in ((ON, True), (OFF, False)):
        store = Store(gates=gates)
        pod = store.create(PODS, "default", {"metadata": {"name": "p"}, "spec": {"containers": [{"name": "a"}]}})
        pod["status"] = copy.deepcopy(status)
        after = store.update(PODS, "default", "p", pod, subresource="status")
        assert ("nodeAllocatableResourceClaimStatuses" in after["status"]) is kept


def _bad(mappings: Any, capacity: dict[str, Any] | None = None) -> dict[str, Any]:
    obj = _slice()
    device = obj["spec"]["devices"][0]
    device["nodeAllocatableResourceMappings"] = mappings
    if capacity is not None:
        device["capacity"] = capacity
    return obj


# The words of pkg/apis/resource/validation/validation.go (v1.36.2), field.Invalid / field.NotFound.
CASES = [
    (
        {"example.com/cores": {"allocationMultiplier": "1"}},
        [("spec.devices[0].nodeAllocatableResourceMappings[example.com/cores]", "FieldValueInvalid",
          'Invalid value: "example.com/cores": must be a node allocatable resource name')],
    ),
    (
        {"cpu": {}},
        [("spec.devices[0].nodeAllocatableResourceMappings[cpu]", "FieldValueInvalid",
          'Invalid value: "": at least one of allocationMultiplier or capacityKey must be set')],
    ),
    (
        {"cpu": {"allocationMultiplier": "0"}},
        [("spec.devices[0].nodeAllocatableResourceMappings[cpu].allocationMultiplier", "FieldValueInvalid",
          'Invalid value: "0": must be positive')],
    ),
    (
        {"cpu": {"allocationMultiplier": "-500m"}},
        [("spec.devices[0].nodeAllocatableResourceMappings[cpu].allocationMultiplier", "FieldValueInvalid",
          'Invalid value: "-500m": must be positive')],
    ),
    (
        {"cpu": {"capacityKey": "cpu"}},
        [("spec.devices[0].nodeAllocatableResourceMappings[cpu].capacityKey", "FieldValueNotFound", 'Not found: "cpu"')],
    ),
    (
        {"cpu": {"capacityKey": ""}},
        [("spec.devices[0].nodeAllocatableResourceMappings[cpu].capacityKey", "FieldValueInvalid",
          'Invalid value: "": capacityKey must not be an empty string')],
    ),
]


@pytest.mark.parametrize(("mappings", "causes"), CASES)
def test_bad_mappings_are_refused_in_the_real_servers_words(mappings: Any, causes: list[tuple[str, str, str]]) -> None:
    assert _causes(Store(gates=ON), _bad(mappings)) == causes


def test_a_capacity_key_naming_a_capacity_of_the_device_is_accepted() -> None:
    obj = _bad({"cpu": {"capacityKey": "cores", "allocationMultiplier": "2"}, "memory": {"allocationMultiplier": "1Gi"}},
               capacity={"cores": {"value": "4"}})
    stored = Store(gates=ON).create(SLICES, None, obj)
    assert stored["spec"]["devices"][0]["nodeAllocatableResourceMappings"]["cpu"]["capacityKey"] == "cores"


def test_with_the_gate_off_a_bad_mapping_is_dropped_not_refused() -> None:
    stored = Store(gates=OFF).create(SLICES, None, _bad({"cpu": {}}))
    assert "nodeAllocatableResourceMappings" not in stored["spec"]["devices"][0]


def test_a_bare_store_keeps_every_field_and_the_command_starts_from_136s_defaults() -> None:
    assert Store().gates == {NODE_ALLOCATABLE: True}
    assert OFF == {NODE_ALLOCATABLE: False}
