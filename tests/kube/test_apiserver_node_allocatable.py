"""The API server double and nodeAllocatableResourceMappings: kept or dropped by the gate as a real
1.36 server does, and bad mappings refused in its words (recorded from a real kube-apiserver 1.36 in
tests/data/apiserver-rejected/node-allocatable.json)."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest

from topodra.dra.devices import DeviceModelConfig, build_devices
from topodra.dra.slices import build_slices
from topodra.embedded.store import KINDS, Store
from topodra.gates import LIST_TYPE_ATTRIBUTES, NODE_ALLOCATABLE, feature_gates, parse_feature_gates
from topodra.kube.errors import ApiError
from topodra.topology import synthetic_topology

SLICES = KINDS[("resource.k8s.io", "resourceslices")]
PODS = KINDS[("", "pods")]
TOPO = synthetic_topology("1s1n1l2c2t")
ON = {NODE_ALLOCATABLE: True}
OFF = feature_gates()  # 1.36's defaults: the alpha gate is off


def _slice(model: str = "cpu") -> dict[str, Any]:
    return build_slices("node-a", build_devices(TOPO, DeviceModelConfig(model=model)))[0]  # type: ignore[arg-type]


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


def test_a_capacity_key_naming_a_capacity_of_the_device_is_accepted() -> None:
    obj = _bad({"cpu": {"capacityKey": "cores", "allocationMultiplier": "2"}, "memory": {"allocationMultiplier": "1Gi"}},
               capacity={"cores": {"value": "4"}})
    stored = Store(gates=ON).create(SLICES, None, obj)
    assert stored["spec"]["devices"][0]["nodeAllocatableResourceMappings"]["cpu"]["capacityKey"] == "cores"


def test_a_mapping_without_a_multiplier_gets_the_servers_default_of_1() -> None:
    obj = _bad({"cpu": {"capacityKey": "cores"}}, capacity={"cores": {"value": "4"}})
    stored = Store(gates=ON).create(SLICES, None, obj)
    assert stored["spec"]["devices"][0]["nodeAllocatableResourceMappings"] == {"cpu": {"capacityKey": "cores", "allocationMultiplier": "1"}}


def test_with_the_gate_off_a_bad_mapping_is_dropped_not_refused() -> None:
    stored = Store(gates=OFF).create(SLICES, None, _bad({"cpu": {"allocationMultiplier": "0"}}))
    assert "nodeAllocatableResourceMappings" not in stored["spec"]["devices"][0]


def test_a_bare_store_keeps_every_field_and_the_command_starts_from_136s_defaults() -> None:
    assert Store().gates == {NODE_ALLOCATABLE: True, LIST_TYPE_ATTRIBUTES: True}
    assert OFF[NODE_ALLOCATABLE] is False


RECORDED = json.loads((Path(__file__).resolve().parents[1] / "data" / "apiserver-rejected" / "node-allocatable.json").read_text())


@pytest.mark.parametrize("case", RECORDED, ids=[c["object"]["metadata"]["name"] for c in RECORDED])
def test_as_a_real_api_server_refuses_or_stores_it(case: dict[str, Any]) -> None:
    store = Store(gates=feature_gates(parse_feature_gates(case["featureGates"])))
    if "stored" in case:
        assert store.create(SLICES, None, copy.deepcopy(case["object"]))["spec"]["devices"] == case["stored"]
        return
    with pytest.raises(ApiError) as info:
        store.create(SLICES, None, copy.deepcopy(case["object"]))
    err, real = info.value, case["status"]
    assert err.code == real["code"]
    assert err.reason == real["reason"]
    assert [(c.field, c.reason, c.message) for c in err.causes] == [
        (c["field"], c["reason"], c["message"]) for c in real["details"]["causes"]
    ]
    assert err.status()["message"] == real["message"]


@pytest.mark.parametrize("case", [c for c in RECORDED if "model" in c], ids=lambda c: str(c["model"]))
def test_each_models_mappings_are_stored_as_sent(case: dict[str, Any]) -> None:
    # the real server stored the slice exactly as sent (its defaults changed nothing); the model
    # still builds those mappings
    sent = [d["nodeAllocatableResourceMappings"] for d in case["object"]["spec"]["devices"]]
    assert sent == [d["nodeAllocatableResourceMappings"] for d in case["stored"]]
    built = build_devices(TOPO, DeviceModelConfig(model=case["model"]))
    assert [d.to_api()["nodeAllocatableResourceMappings"] for d in built] == sent


PROBES = json.loads(
    (Path(__file__).resolve().parents[1] / "data" / "sched-recorded" / "v10-node-allocatable" / "rejected.json").read_text()
)


@pytest.mark.parametrize("probe", PROBES, ids=[p["name"] for p in PROBES])
def test_the_recorded_clusters_probes_are_answered_as_it_answered(probe: dict[str, Any]) -> None:
    # the v10-node-allocatable recording's API probes (DRANodeAllocatableResources on)
    store = Store(gates=ON)
    if probe["accepted"]:
        stored = store.create(SLICES, None, copy.deepcopy(probe["object"]))
        assert stored["spec"]["devices"] == probe["stored"]["spec"]["devices"]
        return
    with pytest.raises(ApiError) as info:
        store.create(SLICES, None, copy.deepcopy(probe["object"]))
    assert (info.value.code, info.value.reason) == (probe["code"], probe["reason"])
    assert info.value.status()["message"] == probe["message"]
