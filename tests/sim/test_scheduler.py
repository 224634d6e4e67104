"""The scheduling loop: sampling, scoring, binding, deletion, timeouts, and memo transparency."""

from __future__ import annotations

import itertools
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from topodra.sim.allocator import SearchStats
from topodra.sim.costmodel import CostModel, num_feasible_nodes_to_find
from topodra.sim.scheduler import Pod, Scheduler

from .builders import DRIVER, attrs, claim, dclass, device, first_available, req, slice_, sub

CLS = dclass("cls", f'device.driver == "{DRIVER}"')


def cluster(n: int, per_node: int = 4, kinds: tuple[str, ...] = ("p", "e")) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    nodes = [{"metadata": {"name": f"node-{i}"}} for i in range(n)]
    slices = [
        slice_(f"node-{i}-s", f"node-{i}", [device(f"d{k}", attrs(kind=kinds[k % len(kinds)], numa=k // 2)) for k in range(per_node)])
        for i in range(n)
    ]
    return nodes, slices


_counter = itertools.count()


def pod(*claims: dict[str, Any]) -> Pod:
    n = next(_counter)
    named = tuple({**c, "metadata": {"name": f"{c['metadata']['name']}-{n}", "namespace": "default", "uid": f"u-{n}"}} for c in claims)
    return Pod(f"pod-{n}", named)


@pytest.mark.parametrize(("nodes", "want"), [(50, 50), (100, 100), (500, 230), (1000, 420), (5000, 500), (6000, 300), (250, 120)])
def test_num_feasible_nodes_to_find(nodes: int, want: int) -> None:
    assert num_feasible_nodes_to_find(nodes) == want


def test_sampling_stops_early_and_rotates_the_start() -> None:
    nodes, slices = cluster(200)
    s = Scheduler(nodes, slices, [CLS])
    r1 = s.schedule(pod(claim("c", req("r"))))
    assert r1.nodes_filtered == 100  # numFeasibleNodesToFind(200) = 100, all feasible
    assert r1.node == "node-0"
    r2 = s.schedule(pod(claim("c", req("r"))))
    assert r2.node == "node-100"  # the next scan starts where the last stopped


def test_pods_fill_the_cluster_then_fail_as_unschedulable() -> None:
    nodes, slices = cluster(3, per_node=2)
    s = Scheduler(nodes, slices, [CLS])
    results = [s.schedule(pod(claim("c", req("r")))) for _ in range(7)]
    assert [r.node for r in results[:6]].count(None) == 0
    assert results[6].failure_kind == "unschedulable"
    assert results[6].nodes_filtered == 3
    assert s.allocated_devices() == 6


def test_delete_frees_exactly_what_the_pod_held() -> None:
    nodes, slices = cluster(2, per_node=2)
    s = Scheduler(nodes, slices, [CLS])
    bound = [s.schedule(pod(claim("c", req("r")))) for _ in range(4)]
    before = set(s.state.devices)
    victim = bound[1]
    assert s.delete(victim.pod)
    held = {r.id for a in victim.allocations for r in a.results}
    assert before - set(s.state.devices) == held
    again = s.schedule(pod(claim("c", req("r"))))
    assert {r.id for a in again.allocations for r in a.results} == held
    assert not s.delete("no-such-pod")


def test_first_available_score_prefers_nodes_with_the_first_choice() -> None:
    nodes = [{"metadata": {"name": "e-only"}}, {"metadata": {"name": "has-p"}}]
    slices = [
        slice_("a", "e-only", [device("d0", attrs(kind="e"))]),
        slice_("b", "has-p", [device("d0", attrs(kind="p"))]),
    ]
    sel = f'device.attributes["{DRIVER}"].kind'
    c = claim("c", first_available("cpu", sub("p", "cls", 1, f'{sel} == "p"'), sub("e", "cls", 1, f'{sel} == "e"')))
    r = Scheduler(nodes, slices, [CLS]).schedule(pod(c))
    assert r.node == "has-p"
    assert r.allocations[0].results[0].request == "cpu/p"


def test_predicted_timeout_fails_the_pod() -> None:
    nodes = [{"metadata": {"name": "n0"}}]
    slices = [slice_("s", "n0", [device(f"cpu{i}", attrs(l3=i // 20)) for i in range(40)])]
    c = claim("c", req("r", "cls", 21), constraints=[{"matchAttribute": f"{DRIVER}/l3"}])
    s = Scheduler(nodes, slices, [CLS], costs=CostModel(per_call_s=10e-6))
    r = s.schedule(pod(c))
    assert r.failure_kind == "timeout"
    assert r.failure == 'running "DynamicResources" filter plugin: node n0: timed out trying to allocate devices'
    assert r.timeouts == 1
    # the search stops where kube-scheduler's deadline falls: well inside the 2 x 2^20 subsets
    assert r.calls < 2 * (2**20 - 1)
    assert 9.9 < r.slowest_node_s < 10.1


def test_cel_error_fails_the_pod_with_the_message() -> None:
    nodes, slices = cluster(2)
    r = Scheduler(nodes, slices, [CLS]).schedule(pod(claim("c", req("r", "cls", 1, f'device.attributes["{DRIVER}"].nope == 1'))))
    assert r.failure_kind == "error"
    assert r.failure is not None
    assert "no such key: nope" in r.failure


def test_cost_model_is_linear_in_counted_steps() -> None:
    m = CostModel(per_call_s=1, per_visit_s=2, per_check_s=3, per_cel_eval_s=4, per_node_s=5, per_device_s=6)
    assert m.node_seconds(SearchStats(calls=1, visits=1, checks=1, cel_evals=1, devices=1)) == 21
    assert m.filter_seconds(160, 1) == 10  # 16 workers
    assert m.filter_seconds(1, 30) == m.timeout_s


@settings(max_examples=25)
@given(
    st.lists(st.tuples(st.sampled_from(["one", "two", "pair", "fa", "del"]), st.integers(0, 50)), min_size=1, max_size=25),
    st.sampled_from([0, 1, 2]),
)
def test_memo_is_transparent(ops: list[tuple[str, int]], scan_chunk: int) -> None:
    import topodra.sim.scheduler as scheduler_module

    scheduler_module.SCAN_CHUNK = scan_chunk  # 1, 2: the memoised scan in steps of 1 or 2 nodes
    try:
        _check_memo(ops)
    finally:
        scheduler_module.SCAN_CHUNK = 0


def _check_memo(ops: list[tuple[str, int]]) -> None:
    nodes, slices = cluster(6, per_node=4)
    fast = Scheduler(nodes, slices, [CLS], memo=True)
    slow = Scheduler(nodes, slices, [CLS], memo=False)
    sel = f'device.attributes["{DRIVER}"].kind'
    shapes = {
        "one": claim("c", req("r")),
        "two": claim("c", req("r", "cls", 2, f'{sel} == "p"')),
        "pair": claim("c", req("r", "cls", 2), constraints=[{"matchAttribute": f"{DRIVER}/numa"}]),
        "fa": claim("c", first_available("x", sub("p", "cls", 2, f'{sel} == "p"'), sub("any", "cls", 1))),
    }
    live: list[str] = []
    for kind, k in ops:
        if kind == "del":
            if live:
                name = live.pop(k % len(live))
                assert fast.delete(name) == slow.delete(name)
            continue
        p = pod(shapes[kind])
        a, b = fast.schedule(p), slow.schedule(p)
        assert (a.node, a.failure_kind, a.nodes_filtered, a.calls, a.visits, a.cel_evals) == (
            b.node,
            b.failure_kind,
            b.nodes_filtered,
            b.calls,
            b.visits,
            b.cel_evals,
        )
        assert [x.to_api() for x in a.allocations] == [x.to_api() for x in b.allocations]
        if a.node:
            live.append(p.name)
    assert fast.state.devices == slow.state.devices


@pytest.mark.parametrize("memo", [True, False])
def test_a_timed_out_node_ends_the_attempt(memo: bool) -> None:
    # node-0 is empty (groups of 20 cannot hold 21: the search explodes), node-1 has a
    # device that makes the request possible. The scan starts at node-0 and stops there.
    nodes = [{"metadata": {"name": "node-0"}}, {"metadata": {"name": "node-1"}}]
    slices = [
        slice_("a", "node-0", [device(f"cpu{i}", attrs(l3=i // 20)) for i in range(40)]),
        slice_("b", "node-1", [device(f"cpu{i}", attrs(l3=0)) for i in range(21)]),
    ]
    c = claim("c", req("r", "cls", 21), constraints=[{"matchAttribute": f"{DRIVER}/l3"}])
    r = Scheduler(nodes, slices, [CLS], memo=memo, costs=CostModel(per_call_s=10e-6)).schedule(pod(c))
    assert r.failure_kind == "timeout"
    assert r.nodes_filtered == 1
    assert r.predicted_s >= 10


ALLOCATABLE = {"allocatable": {"cpu": "4", "memory": "32Gi", "pods": "110"}}


@pytest.mark.parametrize(("scoring", "second"), [("kube-scheduler", "node-1"), ("first", "node-0")])
def test_scoring_spreads_or_packs(scoring: str, second: str) -> None:
    nodes, slices = cluster(50)
    nodes = [{**n, "status": ALLOCATABLE} for n in nodes]
    s = Scheduler(nodes, slices, [CLS], scoring=scoring)
    assert s.schedule(pod(claim("c", req("r")))).node == "node-0"
    assert s.schedule(pod(claim("c", req("r")))).node == second  # node-0 scores less with a pod (NodeResourcesFit)


def test_equal_nodes_tie_and_the_heap_takes_the_first() -> None:
    # nodes without allocatable score alike (NodeResourcesFit scores 0 there): every pod ties
    # among all 50, and heap.Init keeps the first found at the root
    nodes, slices = cluster(50)
    s = Scheduler(nodes, slices, [CLS])
    for _ in range(2):
        r = s.schedule(pod(claim("c", req("r"))))
        assert (r.node, r.tied) == ("node-0", 50)


def test_nodes_that_fail_an_earlier_plugin_are_not_filtered_by_dra() -> None:
    nodes, slices = cluster(3)
    small = {"allocatable": {"cpu": "1", "memory": "1Gi", "pods": "110"}}
    nodes = [{**n, "status": small if i < 2 else ALLOCATABLE} for i, n in enumerate(nodes)]
    obj = {"metadata": {"name": "big"}, "spec": {"containers": [{"name": "c", "resources": {"requests": {"cpu": "2"}}}]}}
    s = Scheduler(nodes, slices, [CLS])
    p = pod(claim("c", req("r")))
    r = s.schedule(Pod(p.name, p.claims, obj=obj))
    assert r.node == "node-2"
    alone = Scheduler(nodes[2:], slices[2:], [CLS]).schedule(pod(claim("c", req("r"))))
    assert (r.nodes_filtered, r.feasible_found) == (3, 1)
    assert (r.calls, r.visits, r.cel_evals) == (alone.calls, alone.visits, alone.cel_evals)  # DynamicResources ran on node-2 only
    r = s.schedule(Pod("big-2", pod(claim("c", req("r", "cls", 5))).claims, obj=obj))
    assert r.failure == "0/3 nodes are available: 1 cannot allocate all claims, 2 Insufficient cpu."


def test_unknown_scoring_is_rejected() -> None:
    nodes, slices = cluster(2)
    with pytest.raises(ValueError, match="scoring must be one of"):
        Scheduler(nodes, slices, [CLS], scoring="random")


def test_nodes_are_scanned_in_the_node_trees_order() -> None:
    # zones interleaved, arrival order within a zone (node_tree.go list()); nodes without a zone
    # label form a zone of their own
    zone = "topology.kubernetes.io/zone"
    names = [("a", "z1"), ("b", "z1"), ("c", "z2"), ("d", None), ("e", "z2")]
    nodes = [{"metadata": {"name": n, "labels": {zone: z} if z else {}}} for n, z in names]
    slices = [slice_(f"{n}-s", n, [device("d0", attrs(kind="p", numa=0))]) for n, _ in names]
    s = Scheduler(nodes, slices, [CLS], scoring="first")
    assert [n.name for n in s.nodes] == ["a", "c", "d", "b", "e"]
    assert [s.schedule(pod(claim("c", req("r")))).node for _ in range(5)] == ["a", "c", "d", "b", "e"]


def test_pods_whose_scores_need_other_pods_are_refused_not_guessed() -> None:
    from topodra.sim.scoring import Unmodelled

    nodes, slices = cluster(3)
    s = Scheduler(nodes, slices, [CLS])
    spread = {"metadata": {"name": "spread"}, "spec": {"containers": [{"name": "c"}], "topologySpreadConstraints": [
        {"maxSkew": 1, "topologyKey": "zone", "whenUnsatisfiable": "ScheduleAnyway", "labelSelector": {}}]}}
    p = pod(claim("c", req("r")))
    with pytest.raises(Unmodelled, match="Pod spread: PodTopologySpread"):
        s.schedule(Pod(p.name, p.claims, obj=spread))
