"""The replay's cluster semantics on small hand-made clusters (our own data)."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from topodra.sim.replay import Replay, ReplayError

from .builders import attrs, dclass, device, slice_

D = "dra.example.com"


def node(name: str, cpu: str | None = None, **labels: str) -> dict[str, Any]:
    n: dict[str, Any] = {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name, **labels}}}
    if cpu is not None:
        n["status"] = {"allocatable": {"cpu": cpu, "memory": "8Gi", "pods": "110"}}
    return n


def cluster(*names: str, devices: int = 4) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = [dclass("c", f'device.driver == "{D}"')]
    for n in names:
        out.append(node(n))
        out.append(slice_(f"{n}-0", n, [device(f"d{i}", attrs(half=i // 2)) for i in range(devices)]))
    return out


def spec(count: int = 1, *selectors: str) -> dict[str, Any]:
    exactly: dict[str, Any] = {"deviceClassName": "c", "count": count}
    if selectors:
        exactly["selectors"] = [{"cel": {"expression": s}} for s in selectors]
    return {"devices": {"requests": [{"name": "r", "exactly": exactly}]}}


def template(name: str, count: int = 1, *selectors: str) -> dict[str, Any]:
    return {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaimTemplate", "metadata": {"name": name}, "spec": {"spec": spec(count, *selectors)}}


def claim(name: str, count: int = 1, *selectors: str) -> dict[str, Any]:
    return {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim", "metadata": {"name": name}, "spec": spec(count, *selectors)}


def pod(name: str, *, template: str | None = None, claim: str | None = None, **spec: Any) -> dict[str, Any]:
    ref: dict[str, Any] = {"name": "c0"}
    if template:
        ref["resourceClaimTemplateName"] = template
    if claim:
        ref["resourceClaimName"] = claim
    body: dict[str, Any] = {"containers": [{"name": "c", "image": "x"}], **spec}
    if template or claim:
        body["resourceClaims"] = [ref]
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name}, "spec": body}


def delete(kind: str, name: str) -> dict[str, Any]:
    return {"op": "delete", "kind": kind, "name": name}


def run(*objs: dict[str, Any]) -> Replay:
    r = Replay()
    for i, o in enumerate(objs):
        r.apply(o, f"test:{i}")
    return r


def devices(r: Replay, pod_name: str) -> list[str]:
    return r.final_pods()[pod_name].claims[0].devices


def test_a_shared_claim_is_allocated_once_and_deallocated_with_its_last_user() -> None:
    r = run(*cluster("n1"), claim("shared", 2), template("one"), pod("a", claim="shared"), pod("b", claim="shared"))
    assert devices(r, "a") == devices(r, "b") == ["d0", "d1"]
    assert r.final_pods()["b"].claims[0].reserved_for == ["a", "b"]
    r.apply(pod("x", template="one"))
    assert devices(r, "x") == ["d2"]  # the shared claim's devices count as taken
    (deleted,) = r.apply(delete("Pod", "a"))
    assert (deleted.claims[0].state, deleted.claims[0].reserved_for) == ("still-allocated", ["b"])
    (deleted,) = r.apply(delete("Pod", "b"))
    assert deleted.claims[0].state == "deallocated"
    assert not r.state.is_allocated((D, "n1", "d0"))
    r.apply(pod("y", template="one"))
    assert devices(r, "y") == ["d0"]
    # allocated afresh, to what is free now
    r.apply(pod("c", claim="shared"))
    assert devices(r, "c") == ["d1", "d3"]


def test_pending_pods_are_retried_in_order_when_devices_are_freed() -> None:
    r = run(*cluster("n1", devices=2), template("two", 2), template("one"), pod("a", template="two"), pod("w1", template="one"), pod("w2", template="one"))
    assert r.pending == ["default/w1", "default/w2"]
    assert r.final_pods()["w1"].failure == "0/1 nodes are available: 1 cannot allocate all claims."
    steps = r.apply(delete("Pod", "a"))
    assert [(s.op, s.pod, s.node) for s in steps] == [("delete", "a", None), ("scheduled-later", "w1", "n1"), ("scheduled-later", "w2", "n1")]
    assert steps[0].claims[0].state == "deallocated"
    assert r.pending == []
    # a generated claim goes with its pod
    assert not any(c.startswith("default/a-") for c in r.claims)


def test_a_new_node_schedules_a_pod_that_matched_none() -> None:
    r = run(*cluster("n1"), template("one"), pod("p", template="one", nodeSelector={"zone": "b"}))
    assert r.final_pods()["p"].failure == "0/1 nodes are available: 1 node(s) didn't match Pod's node affinity/selector."
    steps = r.apply(node("n2", zone="b"))
    assert steps == []  # n2 has no devices yet
    steps = r.apply(slice_("n2-0", "n2", [device("d0")]))
    assert [(s.op, s.node) for s in steps] == [("scheduled-later", "n2")]


def test_filter_reasons_are_counted_and_sorted_as_kube_scheduler_writes_them() -> None:
    tainted = node("n3")
    tainted["spec"] = {"taints": [{"key": "gpu", "value": "yes", "effect": "NoSchedule"}]}
    affinity = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [{"matchExpressions": [{"key": "kubernetes.io/hostname", "operator": "NotIn", "values": ["n2"]}]}]}}}
    r = run(*cluster("n1", "n2"), tainted, slice_("n3-0", "n3", [device("d0")]), template("many", 3, "device.attributes[\"dra.example.com\"].half == 0"))
    r.apply(pod("p", template="many", affinity=affinity))
    assert r.final_pods()["p"].failure == (
        "0/3 nodes are available: 1 cannot allocate all claims, 1 node(s) didn't match Pod's node affinity/selector, "
        "1 node(s) had untolerated taint(s)."  # taint_toleration.go Filter in 1.36 names no taint
    )


def test_requests_filter_and_least_allocated_scoring() -> None:
    objs = [dclass("c", "true"), node("small", cpu="1"), node("big", cpu="4"), template("one")]
    objs += [slice_(f"{n}-0", n, [device(f"d{i}") for i in range(4)]) for n in ("small", "big")]
    hungry = [{"name": "c", "image": "x", "resources": {"requests": {"cpu": "2"}}}]
    r = run(*objs, pod("p", template="one", containers=hungry))
    assert r.final_pods()["p"].node == "big"  # small: Insufficient cpu
    assert r.steps[-1].feasible == ["big"]
    r.apply(pod("q", template="one"))
    # both fit: 300 (TaintToleration) + the mean of the CPU and memory least-allocated scores,
    # counting 100m CPU and 200Mi for every pod without requests, the new one included
    step = r.steps[-1]
    assert step.feasible == ["small", "big"]
    assert step.scores == {"small": 300 + (90 + 97) // 2, "big": 300 + (47 + 95) // 2}
    assert step.node == "small"
    r.apply(pod("h", template="one", containers=[{"name": "c", "image": "x", "resources": {"limits": {"cpu": "3"}}}]))
    assert r.final_pods()["h"].failure == "0/2 nodes are available: 2 Insufficient cpu."


def test_a_pod_with_node_name_is_bound_there_and_its_claim_allocated_on_that_node() -> None:
    r = run(*cluster("n1", "n2"), template("one"), pod("p", template="one", nodeName="n2"))
    (step,) = [s for s in r.steps if s.pod == "p"]
    assert (step.op, step.node, step.claims[0].devices) == ("bound", "n2", ["d0"])
    assert step.claims[0].allocation is not None
    assert step.claims[0].allocation["devices"]["results"][0]["pool"] == "n2"


def test_an_allocated_claim_pins_its_pods_to_its_node() -> None:
    r = run(*cluster("n1", "n2"), claim("shared"), pod("a", claim="shared", nodeName="n2"), pod("b", claim="shared", nodeSelector={"kubernetes.io/hostname": "n1"}))
    assert r.final_pods()["b"].failure == (
        "0/2 nodes are available: 1 node(s) didn't match Pod's node affinity/selector, 1 resourceclaim not available on the node."
    )


def test_a_deleted_claim_in_use_waits_for_its_last_user() -> None:
    r = run(*cluster("n1"), claim("shared"), pod("a", claim="shared"))
    r.apply(delete("ResourceClaim", "shared"))
    assert "default/shared" in r.claims
    r.apply(pod("b", claim="shared"))
    assert r.final_pods()["b"].failure == 'resourceclaim "shared" is being deleted'
    r.apply(delete("Pod", "a"))
    assert "default/shared" not in r.claims
    assert not r.state.is_allocated((D, "n1", "d0"))
    assert r.final_pods()["b"].failure == 'resourceclaim.resource.k8s.io "shared" not found'


def test_a_pod_waits_for_its_claim_and_template() -> None:
    r = run(*cluster("n1"), pod("a", claim="later"), pod("b", template="later"))
    assert r.final_pods()["a"].failure == 'resourceclaim.resource.k8s.io "later" not found'
    assert r.final_pods()["b"].failure == 'resourceclaimtemplate.resource.k8s.io "later" not found'
    steps = r.apply(claim("later"))
    assert [(s.op, s.pod) for s in steps] == [("scheduled-later", "a")]
    steps = r.apply(template("later"))
    assert [(s.op, s.pod, s.claims[0].devices) for s in steps] == [("scheduled-later", "b", ["d1"])]


@pytest.mark.parametrize(
    ("doc", "needle"),
    [
        ({"op": "delete", "kind": "Pod", "name": "ghost"}, "delete Pod ghost: no such object"),
        ({"op": "remove", "kind": "Pod", "name": "x"}, "unknown op 'remove'"),
        ({"op": "delete", "kind": "Pod"}, "needs kind"),
        ({"apiVersion": "v1", "kind": "Service", "metadata": {"name": "s"}}, "kind 'Service' is not replayed"),
        ({"apiVersion": "v1", "kind": "Pod", "metadata": {}}, "Pod has no metadata.name"),
        (["not", "an", "object"], "expected a Kubernetes object"),
        (pod("p", containers=[{"name": "c", "resources": {"requests": {"cpu": "lots"}}}]), "spec.containers[0].resources.requests.cpu"),
    ],
)
def test_bad_documents_are_one_line_errors_naming_the_source(doc: Any, needle: str) -> None:
    r = run(*cluster("n1"))
    with pytest.raises(ReplayError) as e:
        r.apply(doc, "f.yaml:7")
    assert needle in str(e.value)
    assert str(e.value).startswith("f.yaml:7")
    assert "\n" not in str(e.value)


def test_a_claim_updated_without_its_allocation_frees_its_devices() -> None:
    allocated = claim("held")
    allocated["status"] = {"allocation": {"devices": {"results": [{"request": "r", "driver": D, "pool": "n1", "device": f"d{i}"} for i in range(4)]}}}
    r = run(*cluster("n1"), allocated, template("one"), pod("p", template="one"))
    assert r.pending == ["default/p"]
    steps = r.apply(claim("held"))  # the same claim, its allocation cleared
    assert [(s.op, s.pod, s.claims[0].devices) for s in steps] == [("scheduled-later", "p", ["d0"])]


@settings(max_examples=25, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(["one", "two", "shared", "del", "node"]), st.integers(0, 9)), min_size=1, max_size=30))
def test_memoised_filter_results_equal_fresh_ones(ops: list[tuple[str, int]]) -> None:
    objs: list[dict[str, Any]] = [*cluster("n1", "n2", "n3", devices=4), template("one"), template("two", 2, 'device.attributes["dra.example.com"].half == 1'), claim("shared", 2)]
    names: list[str] = []
    extra = 0
    for op, k in ops:
        if op == "del" and names:
            objs.append(delete("Pod", names.pop(k % len(names))))
        elif op == "node":
            extra += 1
            objs += [node(f"x{extra}"), slice_(f"x{extra}-0", f"x{extra}", [device(f"d{i}", attrs(half=i)) for i in range(2)])]
        elif op != "del":
            name = f"p{len(objs)}"
            objs.append(pod(name, claim="shared") if op == "shared" else pod(name, template=op))
            names.append(name)
    runs = []
    for memo in (True, False):
        r = Replay(memo=memo)
        for o in objs:
            r.apply(o)
        runs.append([s.as_dict() for s in r.steps])
    assert runs[0] == runs[1]


def test_pods_of_another_scheduler_are_left_pending() -> None:
    r = run(*cluster("n1"), template("one"), pod("p", template="one", schedulerName="other"))
    assert r.final_pods()["p"].failure == "left to scheduler 'other' (only default-scheduler is replayed)"
    assert r.final_pods()["p"].claims[0].allocation is None
