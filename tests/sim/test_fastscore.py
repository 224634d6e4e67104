"""``fastscore`` (the non-DRA plugins over arrays) against ``podfit`` and ``scoring`` node by
node: on random nodes (sizes, taints, labels, images, unschedulable), pods (requests,
tolerations, node selectors, preferred terms, images), pods bound and deleted, scan windows
and DynamicResources scores, both give the same pass mask, the same reasons and the same node
with the same tie count."""

from __future__ import annotations

from typing import Any

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from topodra.sim.fastscore import preorder_ranks
from topodra.sim.nodeplugins import NodePlugins
from topodra.sim.scoring import select_host

TAINTS = [
    {"key": "dedicated", "value": "batch", "effect": "PreferNoSchedule"},
    {"key": "gpu", "effect": "PreferNoSchedule"},
    {"key": "maint", "effect": "NoSchedule"},
    {"key": "evict", "value": "x", "effect": "NoExecute"},
]
TOLERATIONS = [
    {"key": "dedicated", "operator": "Equal", "value": "batch"},
    {"key": "gpu", "operator": "Exists", "effect": "PreferNoSchedule"},
    {"key": "maint", "operator": "Exists"},
    {"operator": "Exists", "effect": "NoExecute"},
]
IMAGES = [("app:v1", 400 * 2**20), ("db:v2", 900 * 2**20), ("tiny:v1", 5 * 2**20)]


@st.composite
def nodes(draw: st.DrawFn) -> list[dict[str, Any]]:
    out = []
    for i in range(draw(st.integers(1, 24))):
        node: dict[str, Any] = {"metadata": {"name": f"n{i}", "labels": {"zone": draw(st.sampled_from("ab")), "disk": draw(st.sampled_from(["ssd", "hdd"]))}}}
        spec: dict[str, Any] = {}
        taints = draw(st.lists(st.sampled_from(TAINTS), max_size=2, unique_by=lambda t: t["key"]))
        if taints:
            spec["taints"] = taints
        if draw(st.integers(0, 9)) == 0:
            spec["unschedulable"] = True
        if spec:
            node["spec"] = spec
        if draw(st.booleans()) or i == 0:
            cpu, memory = draw(st.sampled_from([(2, 4), (4, 16)]) | st.tuples(st.integers(1, 16), st.integers(1, 64)))  # twins often
            status: dict[str, Any] = {"allocatable": {"cpu": str(cpu), "memory": f"{memory}Gi", "pods": str(draw(st.integers(0, 6)))}}
            images = draw(st.lists(st.sampled_from(IMAGES), max_size=3, unique=True))
            if images:
                status["images"] = [{"names": [name], "sizeBytes": size} for name, size in images]
            node["status"] = status
        out.append(node)
    return out


@st.composite
def pod_objs(draw: st.DrawFn) -> dict[str, Any] | None:
    if draw(st.integers(0, 5)) == 0:
        return None
    containers = []
    for k in range(draw(st.integers(1, 2))):
        requests = {}
        if draw(st.booleans()):  # whole CPUs often: a request equal to what a node has left fits
            requests["cpu"] = draw(st.sampled_from(["1", "2", "4", "500m"]) | st.integers(1, 4000).map(lambda m: f"{m}m"))
        if draw(st.booleans()):
            requests["memory"] = draw(st.sampled_from(["1Gi", "4Gi"]) | st.integers(1, 8000).map(lambda m: f"{m}Mi"))
        c: dict[str, Any] = {"name": f"c{k}", "image": draw(st.sampled_from(["app:v1", "db:v2", "other"]))}
        if requests:
            c["resources"] = {"requests": requests}
        containers.append(c)
    spec: dict[str, Any] = {"containers": containers}
    tolerations = draw(st.lists(st.sampled_from(TOLERATIONS), max_size=2))
    if tolerations:
        spec["tolerations"] = tolerations
    if draw(st.integers(0, 3)) == 0:
        spec["nodeSelector"] = {"zone": draw(st.sampled_from("ab"))}
    if draw(st.booleans()):
        terms = [
            {"weight": draw(st.integers(1, 100)), "preference": {"matchExpressions": [{"key": key, "operator": "In", "values": [value]}]}}
            for key, value in draw(st.lists(st.sampled_from([("zone", "a"), ("disk", "ssd"), ("zone", "b")]), min_size=1, max_size=3))
        ]
        spec["affinity"] = {"nodeAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": terms}}
    return {"metadata": {"name": f"p{draw(st.integers(0, 3))}"}, "spec": spec}


@settings(max_examples=150, deadline=None)
@given(nodes(), st.lists(pod_objs(), min_size=1, max_size=4), st.data())
def test_arrays_answer_as_the_plugins_node_by_node(cluster: list[dict[str, Any]], objs: list[dict[str, Any] | None], data: st.DataObject) -> None:
    fast, plain = NodePlugins(cluster, fast=True), NodePlugins(cluster, fast=False)
    n = len(cluster)
    bound: list[tuple[int, int, str]] = []
    for step in range(data.draw(st.integers(1, 12))):
        k = data.draw(st.integers(0, len(objs) - 1))
        kf, kp = fast.kind(objs[k], "pod"), plain.kind(objs[k], "pod")
        start, size = data.draw(st.integers(0, n - 1)), data.draw(st.integers(1, n))
        window = (np.arange(start, start + size) % n).astype(np.int64)
        a, b = fast.passes(kf, window), plain.passes(kp, window)
        assert (a is None) == (b is None)
        if a is not None and b is not None:
            assert (a == b).all()
        assert fast.reasons(kf, window) == plain.reasons(kp, window)
        ok = window if a is None else window[a]
        if ok.size:
            dra = None if data.draw(st.booleans()) else np.asarray(data.draw(st.lists(st.integers(0, 16), min_size=ok.size, max_size=ok.size)), dtype=np.int64)
            choice = fast.choose(kf, ok, dra)
            assert choice == plain.choose(kp, ok, dra)
            node = int(ok[choice.position])
            name = f"pod-{step}"
            fast.bind(node, kf.instance(name, "default"))
            plain.bind(node, kp.instance(name, "default"))
            bound.append((node, k, name))
        if bound and data.draw(st.integers(0, 3)) == 0:
            node, k, name = bound.pop(data.draw(st.integers(0, len(bound) - 1)))
            fast.unbind(node, fast.kind(objs[k], "pod").instance(name, "default"))
            plain.unbind(node, plain.kind(objs[k], "pod").instance(name, "default"))


@settings(max_examples=300, deadline=None)
@given(st.lists(st.integers(0, 4), min_size=1, max_size=80))
def test_the_heap_root_is_the_best_of_lowest_preorder_rank(totals: list[int]) -> None:
    best = max(totals)
    ranks = preorder_ranks(len(totals))
    expected = min((i for i, t in enumerate(totals) if t == best), key=lambda i: ranks[i])
    assert select_host(totals) == expected


def test_the_heap_does_not_take_the_first_best_node_always() -> None:
    # v11's notes: for totals [10, 10, 20, 20] heap.Init moves the fourth entry to the root
    assert select_host([10, 10, 20, 20]) == 3
    assert select_host([5, 10, 10]) == 1
    assert select_host([7, 7, 7]) == 0


def test_a_tie_goes_where_the_heap_puts_it() -> None:
    # four equal nodes, DynamicResources 8 on the last two: totals [x, x, x+200, x+200], and the
    # heap's root is the fourth node (not the first best one)
    cluster = [{"metadata": {"name": f"n{i}"}, "status": {"allocatable": {"cpu": "4", "memory": "16Gi", "pods": "110"}}} for i in range(4)]
    dra = np.asarray([0, 0, 8, 8], dtype=np.int64)
    for fast in (True, False):
        plugins = NodePlugins(cluster, fast=fast)
        choice = plugins.choose(plugins.kind(None, "p"), np.arange(4, dtype=np.int64), dra)
        assert (choice.position, choice.tied) == (3, 2)
