"""The replay with DRANodeAllocatableResources: claimed CPUs count against the node's cpu as
kube-scheduler 1.36 counts them (dynamicresources/nodeallocatabledynamicresources.go, fit.go,
framework/types.go), on topodra's own devices."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest

from topodra.dra.devices import DeviceModelConfig, build_devices, device_class
from topodra.dra.slices import build_slices
from topodra.gates import NODE_ALLOCATABLE
from topodra.sim.diff import diff_replay, load_recorded
from topodra.sim.replay import Replay
from topodra.topology import synthetic_topology

ON = {NODE_ALLOCATABLE: True}


def node(name: str, cpus: int) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name}},
        "status": {"allocatable": {"cpu": str(cpus), "memory": "8Gi", "pods": "110"}},
    }


def cluster(spec: str = "1s1n1l4c1t", model: str = "cpu", nodes: tuple[str, ...] = ("n1",)) -> list[dict[str, Any]]:
    topo = synthetic_topology(spec)
    out: list[dict[str, Any]] = [device_class()]
    for n in nodes:
        out.append(node(n, len(topo.online)))
        out.extend(build_slices(n, build_devices(topo, DeviceModelConfig(model=model))))  # type: ignore[arg-type]
    return out


def template(name: str, count: int = 1, capacity: str | None = None) -> dict[str, Any]:
    exactly: dict[str, Any] = {"deviceClassName": "native.cpu", "count": count}
    if capacity:
        exactly["capacity"] = {"requests": {"cpu": capacity}}
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaimTemplate",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {"spec": {"devices": {"requests": [{"name": "cpus", "exactly": exactly}]}}},
    }


def pod(name: str, *, template: str | None = None, claim: str | None = None, cpu: str | None = None, refer: bool = True) -> dict[str, Any]:
    container: dict[str, Any] = {"name": "app", "image": "x"}
    if cpu:
        container["resources"] = {"requests": {"cpu": cpu, "memory": "100Mi"}, "limits": {"cpu": cpu, "memory": "100Mi"}}
    spec: dict[str, Any] = {"containers": [container]}
    if template or claim:
        ref: dict[str, Any] = {"name": "cpus"}
        ref["resourceClaimTemplateName" if template else "resourceClaimName"] = template or claim
        spec["resourceClaims"] = [ref]
        if refer:
            container.setdefault("resources", {})["claims"] = [{"name": "cpus"}]
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": "default"}, "spec": spec}


def run(objs: list[dict[str, Any]], gates: dict[str, bool] | None = ON) -> Replay:
    r = Replay(gates=gates)
    for i, o in enumerate(objs):
        r.apply(copy.deepcopy(o), f"test:{i}")
    return r


def step(r: Replay, name: str) -> Any:
    return [s for s in r.steps if s.pod == name][-1]


def test_a_claim_writes_the_pods_status_and_counts_in_the_nodes_requests() -> None:
    r = run([*cluster(), template("three", 3), pod("holder", template="three")])
    s = step(r, "holder")
    assert s.node == "n1"
    claim = s.claims[0].claim
    assert s.node_allocatable == [{"resourceClaimName": claim, "containers": ["app"], "resources": {"cpu": "3"}}]
    assert s.as_dict()["nodeAllocatableResourceClaimStatuses"] == s.node_allocatable
    usage = r.usage["n1"]
    assert usage.requested.milli_cpu == 3000
    assert usage.nonzero.milli_cpu == 3100  # the container's default 100m, plus the claim's CPUs
    assert usage.claim_users == {f"default/{claim}": {"default/holder"}}


def test_a_guaranteed_pod_is_refused_up_front_with_the_gate_and_bound_without() -> None:
    objs = [*cluster(), template("three", 3), pod("holder", template="three"), pod("late", cpu="2")]
    on = step(run(objs), "late")
    assert on.node is None
    assert on.failure == "0/1 nodes are available: 1 Insufficient cpu."
    off = run(objs, gates=None)  # 1.36's default: the claim's CPUs are free node cpu
    assert step(off, "late").node == "n1"
    assert step(off, "holder").node_allocatable == []


def test_a_claiming_pod_is_checked_with_its_container_requests() -> None:
    # 4 CPUs: 2 claimed; a pod asking 1 CPU in its container plus a claim of 2 needs 3
    objs = [*cluster(), template("two", 2), pod("first", template="two"), pod("second", template="two", cpu="1")]
    s = step(run(objs), "second")
    assert s.failure == "0/1 nodes are available: 1 Insufficient cpu."
    assert step(run(objs, gates=None), "second").node == "n1"


def test_a_claim_no_container_references_is_refused_by_its_name() -> None:
    r = run([*cluster(), template("one"), pod("loose", template="one", refer=False)])
    s = step(r, "loose")
    claim = s.claims[0].claim
    assert s.failure == (
        f"0/1 nodes are available: 1 claim {claim}: node-allocatable resource claim not referenced by any container within the pod."
    )


def test_a_claim_held_by_one_pod_is_refused_to_another() -> None:
    shared = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": "shared", "namespace": "default"},
        "spec": template("x")["spec"]["spec"],
    }
    r = run([*cluster(), shared, pod("a", claim="shared"), pod("b", claim="shared")])
    assert step(r, "a").node == "n1"
    assert step(r, "b").failure == "0/1 nodes are available: 1 node allocatable resource claim shared is already used by another pod."
    off = run([*cluster(), shared, pod("a", claim="shared"), pod("b", claim="shared")], gates=None)
    assert step(off, "b").node == "n1"


@pytest.mark.parametrize(
    ("spec", "model", "request_", "cpu"),
    [
        ("1s1n1l4c2t", "core", {"count": 2}, "4"),  # two cores of two threads
        ("1s1n1l4c2t", "core-or-thread", {"count": 3}, "5"),  # first fit: core0 (2), then... see below
        ("1s1n1l4c1t", "grouped", {"capacity": "3"}, "3"),  # the consumed cpu capacity
    ],
)
def test_every_model_maps_what_prepare_gives(spec: str, model: str, request_: dict[str, Any], cpu: str) -> None:
    objs = [*cluster(spec, model), template("t", request_.get("count", 1), request_.get("capacity")), pod("p", template="t")]
    s = step(run(objs), "p")
    assert s.node == "n1"
    devices = s.claims[0].devices
    if model == "core-or-thread":
        # the three devices first fit takes, each counted as Prepare gives it: a core all its threads
        cpu = str(sum(2 if d.startswith("core") else 1 for d in devices))
    assert s.node_allocatable[0]["resources"] == {"cpu": cpu}


def test_deleting_the_holder_frees_the_nodes_cpu_and_the_waiting_pod_is_bound() -> None:
    r = run([*cluster(), template("three", 3), pod("holder", template="three"), pod("late", cpu="2")])
    assert r.pending == ["default/late"]
    r.apply({"op": "delete", "kind": "Pod", "name": "holder"})
    assert r.pending == []
    assert step(r, "late").op == "scheduled-later"
    assert r.usage["n1"].requested.milli_cpu == 2000
    assert r.usage["n1"].claim_users == {}


def test_scoring_sees_the_claimed_cpus_on_the_node() -> None:
    # two equal nodes; the claim goes to one, a pod with requests then scores the other higher
    objs = [*cluster(nodes=("n1", "n2")), template("three", 3), pod("holder", template="three"), pod("web", cpu="500m")]
    r = run(objs)
    holder, web = step(r, "holder"), step(r, "web")
    assert web.node != holder.node
    assert web.scores[web.node] > web.scores[holder.node]
    off = step(run(objs, gates=None), "web")
    # without the gate only the holder's container (its default 100m) weighs on its node
    assert off.scores[web.node] - off.scores[holder.node] < web.scores[web.node] - web.scores[holder.node]


def test_a_bound_pods_status_counts_with_the_gate_and_is_dropped_without() -> None:
    bound = pod("old", cpu="1")
    bound["spec"]["nodeName"] = "n1"
    bound["status"] = {"nodeAllocatableResourceClaimStatuses": [{"resourceClaimName": "c", "containers": ["app"], "resources": {"cpu": "2"}}]}
    assert run([*cluster(), bound]).usage["n1"].requested.milli_cpu == 3000
    assert run([*cluster(), bound], gates=None).usage["n1"].requested.milli_cpu == 1000


def _log(tmp_path: Path, statuses: list[dict[str, Any]]) -> Path:
    steps = [
        {
            "op": "create", "kind": "Pod", "name": "holder", "node": "n1",
            "claims": [{"podClaimName": "cpus", "claimName": "holder-cpus-zzzzz", "generated": True, "allocated": True,
                        "results": [{"request": "cpus", "driver": "native.cpu", "pool": "n1", "device": d} for d in ("cpu3", "cpu2", "cpu1")],
                        "nodeSelector": {"nodeSelectorTerms": [{"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["n1"]}]}]},
                        "reservedFor": ["holder"]}],
            "nodeAllocatableResourceClaimStatuses": statuses,
        },
        {"op": "create", "kind": "Pod", "name": "late", "node": "unschedulable", "message": "0/1 nodes are available: 1 Insufficient cpu. still not schedulable"},
    ]
    path = tmp_path / "result.json"
    path.write_text(json.dumps({"steps": steps}))
    return path


def test_diff_compares_the_statuses_by_pod_claim_and_value(tmp_path: Path) -> None:
    objs = [(o, "t") for o in [*cluster(), template("three", 3), pod("holder", template="three"), pod("late", cpu="2")]]
    good = [{"resourceClaimName": "holder-cpus-zzzzz", "containers": ["app"], "resources": {"cpu": "3000m"}}]
    report = diff_replay(objs, load_recorded(_log(tmp_path, good)), gates=ON)
    assert [r.verdict for r in report.rows] == ["match", "match"]
    bad = [{"resourceClaimName": "holder-cpus-zzzzz", "containers": ["app"], "resources": {"cpu": "2"}}]
    report = diff_replay(objs, load_recorded(_log(tmp_path, bad)), gates=ON)
    assert [r.differs for r in report.rows] == [("nodeAllocatableResourceClaimStatuses",), ()]
    off = diff_replay(objs, load_recorded(_log(tmp_path, good)), gates=None)  # the gate not given: late is bound
    assert [r.verdict for r in off.rows] == ["MISMATCH", "MISMATCH"]


def test_the_cli_takes_the_gate_and_refuses_a_bad_one_in_one_line(tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from topodra.cli import app

    objs = [*cluster(), template("three", 3), pod("holder", template="three"), pod("late", cpu="2")]
    path = tmp_path / "objs.yaml"
    path.write_text(json.dumps({"kind": "List", "apiVersion": "v1", "items": objs}))
    runner = CliRunner()
    on = runner.invoke(app, ["sim", "replay", str(path), "-o", "json", "--feature-gates", "DRANodeAllocatableResources=true"])
    assert on.exit_code == 1  # late stays pending
    steps = json.loads(on.stdout)
    assert steps[0]["nodeAllocatableResourceClaimStatuses"][0]["resources"] == {"cpu": "3"}
    assert steps[1]["failure"] == "0/1 nodes are available: 1 Insufficient cpu."
    assert runner.invoke(app, ["sim", "replay", str(path)]).exit_code == 0  # 1.36's default: both bound
    bad = runner.invoke(app, ["sim", "replay", str(path), "--feature-gates", "DRANodeAllocatableResources"])
    assert bad.exit_code == 2
    assert bad.stderr.strip() == "error: --feature-gates: missing bool value for DRANodeAllocatableResources"


def test_a_mapping_without_its_multiplier_counts_one_as_the_api_server_defaults_it() -> None:
    objs = [*cluster(), template("two", 2), pod("p", template="two")]
    for s in objs:
        for d in (s.get("spec") or {}).get("devices") or []:
            d["nodeAllocatableResourceMappings"]["cpu"].pop("allocationMultiplier")
    assert step(run(objs), "p").node_allocatable[0]["resources"] == {"cpu": "2"}


def test_init_containers_count_their_maximum_beside_the_claim() -> None:
    # 4 CPUs: 2 claimed; an init container of 2 CPUs plus a claim of 1 needs 3
    late = pod("late", template="one")
    late["spec"]["initContainers"] = [{"name": "init", "image": "x", "resources": {"requests": {"cpu": "2"}}}]
    s = step(run([*cluster(), template("two", 2), template("one"), pod("first", template="two"), late]), "late")
    assert s.failure == "0/1 nodes are available: 1 Insufficient cpu."


def test_pod_level_requests_must_cover_the_claims_and_stand_for_the_whole_pod() -> None:
    short = pod("short", template="two")
    short["spec"]["resources"] = {"requests": {"cpu": "1"}}
    assert step(run([*cluster(), template("two", 2), short]), "short").failure == (
        "0/1 nodes are available: 1 pod level request for cpu is insufficient to cover the aggregated container "
        "and node-allocatable DRA requests."
    )
    covered = pod("covered", template="two")
    covered["spec"]["resources"] = {"requests": {"cpu": "3"}}
    r = run([*cluster(), template("two", 2), covered])
    assert step(r, "covered").node_allocatable[0]["resources"] == {"cpu": "2"}
    assert r.usage["n1"].requested.milli_cpu == 3000  # the pod level covers the claim: not added again


def test_pod_level_requests_default_from_pod_level_limits_and_the_containers() -> None:
    limited = pod("limited", cpu="1")
    limited["spec"]["resources"] = {"limits": {"cpu": "3", "memory": "1Gi"}}
    r = run([*cluster(), limited])
    # cpu: the containers request it, so their 1 CPU; memory: also theirs (100Mi)
    assert r.usage["n1"].requested.milli_cpu == 1000
    assert r.usage["n1"].requested.memory == 100 * 2**20
    bare = pod("bare")
    bare["spec"]["resources"] = {"limits": {"cpu": "3"}}
    assert run([*cluster(), bare]).usage["n1"].requested.milli_cpu == 3000  # no container asks: the limit


def test_the_post_filter_summaries_are_not_part_of_the_compared_message() -> None:
    from topodra.sim.diff import filter_message

    base = "0/3 nodes are available: 1 Insufficient cpu, 2 node(s) didn't match Pod's node affinity/selector."
    for tail in (
        " no new claims to deallocate, preemption: 0/3 nodes are available: 1 No preemption victims found for incoming pod.",
        " still not schedulable, preemption: 0/3 nodes are available: 3 Preemption is not helpful for scheduling.",
        "",
    ):
        assert filter_message(base + tail) == base


def test_with_pod_level_requests_the_nodes_nonzero_sum_defaults_only_what_no_container_asks() -> None:
    # CalculateResource: memory is set at the pod level; cpu is asked by one container of two, so
    # the other gets no 100m default in the node's sum (the pod's own score would give it one)
    p = pod("p", cpu="1")
    p["spec"]["containers"].append({"name": "side", "image": "x"})
    p["spec"]["resources"] = {"requests": {"memory": "1Gi"}}
    usage = run([*cluster(), p]).usage["n1"]
    assert usage.nonzero.milli_cpu == 1000
    assert usage.nonzero.memory == 2**30
