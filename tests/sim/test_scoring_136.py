"""Score arithmetic as kube-scheduler 1.36 computes it, with figures worked by hand from the Go source
(pkg/scheduler/framework/plugins/noderesources/balanced_allocation.go balancedResourceScorer,
least_allocated.go leastRequestedScore, helper/normalize_score.go DefaultNormalizeScore,
tainttoleration, nodeaffinity, imagelocality, dynamicresources computeScore; framework.go
RunScorePlugins for how Skip, NormalizeScore and the weights combine)."""

from __future__ import annotations

from typing import Any

import pytest

from topodra.sim.objects import Node, parse_claim
from topodra.sim.podfit import (
    NodeUsage,
    NodeView,
    PodView,
    bound_pod,
    node_inputs,
    parse_node_view,
    parse_pod,
    pod_inputs,
    unmodelled_filters,
)
from topodra.sim.scoring import (
    ClaimScoreInput,
    NodeInputs,
    PodInputs,
    Unmodelled,
    balanced_allocation,
    default_normalize,
    dynamic_resources_score,
    image_locality,
    least_allocated,
    normalized_image_name,
    score_nodes,
)

from .builders import dclass, device, first_available, slice_, sub
from .test_replay import D, cluster, node, pod, run, template

MiB = 1024 * 1024


def _node(name: str, cpu: str, memory: str, **extra: Any) -> NodeView:
    return parse_node_view(
        {"metadata": {"name": name, **extra.get("meta", {})}, "spec": extra.get("spec", {}),
         "status": {"allocatable": {"cpu": cpu, "memory": memory, "pods": "110"}, **extra.get("status", {})}}
    )


def _pod(name: str, cpu: str | None = None, memory: str | None = None, **spec: Any) -> PodView:
    requests = {k: v for k, v in (("cpu", cpu), ("memory", memory)) if v is not None}
    container: dict[str, Any] = {"name": "c", "image": spec.pop("image", "busybox")}
    if requests:
        container["resources"] = {"requests": requests}
    return parse_pod({"metadata": {"name": name}, "spec": {"containers": [container], **spec}})


def _score(p: PodView, nodes: list[NodeView], usage: dict[str, NodeUsage] | None = None, **kw: Any) -> dict[str, dict[str, int]]:
    usage = usage or {}
    return score_nodes(pod_inputs(p), [node_inputs(n, usage.get(n.name, NodeUsage()), {}) for n in nodes], **kw)


def test_balanced_allocation_scores_the_change_in_balance_centred_on_50() -> None:
    node = _node("n", "4", "8Gi")
    usage = NodeUsage()
    usage.add(_pod("old", "1", "1Gi"))  # 0.25 / 0.125: balance int((1 - 0.0625) * 100) = 93
    p = _pod("new", "1", "4Gi")  # 0.5 / 0.625: balance 93 as well
    # 50 + (50 + 93 - 93) / 2 = 75 (the pre-1.36 formula gave the balance itself, 93)
    scores = _score(p, [node], {"n": usage})
    assert scores["n"]["NodeResourcesBalancedAllocation"] == 75
    # LeastAllocated: cpu (4000 - 2000) * 100 / 4000 = 50, memory (8 - 5) * 100 / 8 = 37; (50 + 37) / 2 = 43
    assert scores["n"]["NodeResourcesFit"] == 43


def test_balanced_allocation_rewards_a_pod_that_evens_the_node_out() -> None:
    node = _node("n", "4", "8Gi")
    usage = NodeUsage()
    usage.add(_pod("old", "2", "0"))  # 0.5 / 0: balance 75
    p = _pod("new", "0", "4Gi")  # 0.5 / 0.5: balance 100
    # 50 + (50 + 100 - 75) / 2 = 50 + 75 / 2 = 87 (integer division)
    assert _score(p, [node], {"n": usage})["n"]["NodeResourcesBalancedAllocation"] == 87


def test_balanced_allocation_can_fall_below_75_when_the_pod_unbalances_the_node() -> None:
    # empty 4 CPU / 8 GiB node: balance 100 before; 3 CPUs and no memory: 0.75 / 0 -> int((1 - 0.375) * 100) = 62
    # 50 + (50 + 62 - 100) / 2 = 50 + 12 / 2 = 56
    assert balanced_allocation([3000, 0], [0, 0], [4000, 8 * 1024 * MiB]) == 56


def test_best_effort_pods_skip_balanced_allocation_and_fit_uses_the_default_requests() -> None:
    # a container without requests counts as 100m CPU and 200 MiB in NodeResourcesFit (non-zero requests)
    node = _node("n", "1", "1000Mi")
    scores = _score(_pod("be"), [node])
    assert "NodeResourcesBalancedAllocation" not in scores["n"]
    # cpu (1000 - 100) * 100 / 1000 = 90, memory (1000 - 200) * 100 / 1000 = 80: (90 + 80) / 2 = 85
    assert scores["n"]["NodeResourcesFit"] == 85


def test_a_node_without_allocatable_scores_0_fit_and_75_balance() -> None:
    # resources with allocatable 0 are left out: LeastAllocated's weight sum is 0 -> 0;
    # BalancedAllocation has no fractions on either side: 50 + (50 + 100 - 100) / 2 = 75
    bare = parse_node_view({"metadata": {"name": "bare"}})
    scores = _score(_pod("p", "1", "1Gi"), [bare])
    assert scores["bare"]["NodeResourcesFit"] == 0
    assert scores["bare"]["NodeResourcesBalancedAllocation"] == 75
    assert least_allocated([100, 0], [0, 0]) == 0


def test_default_normalize_truncates_and_reverses() -> None:
    assert default_normalize([8, 7, 0], reverse=False) == [100, 87, 0]
    assert default_normalize([0, 0], reverse=False) == [0, 0]
    assert default_normalize([0, 0], reverse=True) == [100, 100]
    assert default_normalize([3, 1, 0], reverse=True) == [0, 67, 100]  # 100 - 100 * 1 / 3 = 100 - 33


def test_prefer_no_schedule_taints_are_counted_reversed_and_weighted_3() -> None:
    soft = {"key": "k", "value": "v", "effect": "PreferNoSchedule"}
    nodes = [
        _node("clean", "4", "8Gi"),
        _node("one", "4", "8Gi", spec={"taints": [soft]}),
        _node("two", "4", "8Gi", spec={"taints": [soft, {**soft, "key": "k2"}]}),
    ]
    scores = _score(_pod("p"), nodes)
    # counts 0, 1, 2 -> 100, 100 - 50, 100 - 100 -> times 3
    assert [scores[n]["TaintToleration"] for n in ("clean", "one", "two")] == [300, 150, 0]
    # a toleration with effect NoSchedule does not count for PreferNoSchedule taints; an empty effect does
    tol_other = _pod("q", tolerations=[{"key": "k", "operator": "Exists", "effect": "NoSchedule"}])
    tol_any = _pod("r", tolerations=[{"key": "k", "operator": "Exists"}])
    assert _score(tol_other, nodes)["one"]["TaintToleration"] == 150
    assert [_score(tol_any, nodes)[n]["TaintToleration"] for n in ("clean", "one", "two")] == [300, 300, 0]


def test_preferred_node_affinity_is_normalized_and_weighted_2_and_skipped_without_terms() -> None:
    nodes = [_node("a", "4", "8Gi", meta={"labels": {"zone": "x", "disk": "ssd"}}), _node("b", "4", "8Gi", meta={"labels": {"zone": "y"}})]
    terms = [
        {"weight": 30, "preference": {"matchExpressions": [{"key": "zone", "operator": "In", "values": ["x"]}]}},
        {"weight": 20, "preference": {"matchExpressions": [{"key": "zone", "operator": "In", "values": ["y"]}]}},
        {"weight": 50, "preference": {}},  # an empty term is dropped
    ]
    p = _pod("p", affinity={"nodeAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": terms}})
    scores = _score(p, nodes)
    # raw 30 and 20: 100 and 100 * 20 / 30 = 66, times 2
    assert (scores["a"]["NodeAffinity"], scores["b"]["NodeAffinity"]) == (200, 132)
    assert "NodeAffinity" not in _score(_pod("plain"), nodes)["a"]


def test_image_locality_scales_by_size_and_spread() -> None:
    assert normalized_image_name("busybox") == "busybox:latest"
    assert normalized_image_name("reg:5000/app") == "reg:5000/app:latest"
    assert normalized_image_name("app:1.2") == "app:1.2"
    pod_in = PodInputs(images=("app:1",), containers=1)
    node = NodeInputs(Node("n", {}), images={"app:1": 500 * MiB})
    # on 1 of 2 nodes: int(500 MiB * 0.5) = 250 MiB; 100 * (250 - 23) MiB / (1000 - 23) MiB = 23
    assert image_locality(pod_in, node, {"app:1": 1}, 2) == 23
    # on every node: 100 * (500 - 23) / 977 = 48; below the 23 MiB floor: 0
    assert image_locality(pod_in, node, {"app:1": 2}, 2) == 48
    assert image_locality(PodInputs(images=("other",)), node, {"app:1": 2}, 2) == 0


def test_image_locality_reads_node_status_images() -> None:
    with_image = _node("img", "4", "8Gi", status={"images": [{"names": ["app:1", "reg/app@sha256:1"], "sizeBytes": 500 * MiB}]})
    scores = _score(_pod("p", image="app:1"), [with_image, _node("none", "4", "8Gi")], image_spread={"app:1": 1}, total_nodes=2)
    assert (scores["img"]["ImageLocality"], scores["none"]["ImageLocality"]) == (23, 0)


def test_every_plugin_of_a_pod_without_extras_as_the_recording_shows_them() -> None:
    # v2-mixed-nodes: a pod with a claim and no requests scores TaintToleration, NodeResourcesFit,
    # DynamicResources and ImageLocality; the others skip in PreScore
    scores = _score(_pod("p"), [_node("n", "16", "256Gi")], dra={"n": 0})
    assert sorted(scores["n"]) == ["DynamicResources", "ImageLocality", "NodeResourcesFit", "TaintToleration"]


def _claim(requests: list[dict[str, Any]]) -> Any:
    return parse_claim({"metadata": {"name": "c", "namespace": "ns"}, "spec": {"devices": {"requests": requests}}})


def test_dynamic_resources_counts_every_claim_of_the_pod_allocated_ones_included() -> None:
    first = _claim([{"name": "r", "firstAvailable": [
        {"name": "big", "deviceClassName": "c", "count": 4}, {"name": "small", "deviceClassName": "c", "count": 2}]}])
    exact = _claim([{"name": "e", "exactly": {"deviceClassName": "c"}}])
    # index 1 chosen: 8 - 1 = 7; an exactly request scores nothing; an allocated claim with index 0: 8
    assert dynamic_resources_score([ClaimScoreInput(first, frozenset({"r/small"}))]) == 7
    assert dynamic_resources_score([ClaimScoreInput(exact, frozenset({"e"}))]) == 0
    assert dynamic_resources_score([ClaimScoreInput(first, frozenset({"r/small"})), ClaimScoreInput(first, frozenset({"r/big"}))]) == 15


def test_dynamic_resources_is_normalized_to_100_and_weighted_2() -> None:
    nodes = [_node("a", "4", "8Gi"), _node("b", "4", "8Gi"), _node("c", "4", "8Gi")]
    scores = _score(_pod("p"), nodes, dra={"a": 8, "b": 7})
    # 8 and 7 normalized: 100 and 100 * 7 / 8 = 87; a node without an allocation scores 0; times 2
    assert [scores[n]["DynamicResources"] for n in "abc"] == [200, 174, 0]


def _zoned(name: str, zone: str) -> NodeView:
    return _node(name, "4", "8Gi", meta={"labels": {"kubernetes.io/hostname": name, "zone": zone}})


def _with_pods(nodes: list[NodeView], placed: dict[str, list[PodView]]) -> list[NodeInputs]:
    return [node_inputs(n, NodeUsage(), {}, tuple(bound_pod(p) for p in placed.get(n.name, ()))) for n in nodes]


def _spread(key: str) -> dict[str, Any]:
    return {"topologySpreadConstraints": [{"maxSkew": 1, "topologyKey": key, "whenUnsatisfiable": "ScheduleAnyway", "labelSelector": {"matchLabels": {"app": "web"}}}]}


def test_pod_topology_spread_counts_matching_pods_per_zone_and_per_host() -> None:
    nodes = [_zoned("a", "z1"), _zoned("b", "z1"), _zoned("c", "z2")]
    web = parse_pod({"metadata": {"name": "w", "labels": {"app": "web"}}, "spec": {"containers": [{"name": "c"}]}})
    inputs = _with_pods(nodes, {"a": [web, web], "c": [web]})
    # zone: z1 holds 2 matching pods, z2 one; weight ln(2 zones + 2); a, b: round(2 * 1.386) = 3,
    # c: round(1.386) = 1; normalized 100 * (max + min - s) / max: 33, 33, 100; times 2
    zone = score_nodes(pod_inputs(_pod("p", **_spread("zone"))), inputs)
    assert [zone[n]["PodTopologySpread"] for n in "abc"] == [66, 66, 200]
    # hostname: counted per node, weight ln(3 nodes + 2): a round(3.22) = 3, b 0, c round(1.61) = 2
    host = score_nodes(pod_inputs(_pod("p", **_spread("kubernetes.io/hostname"))), inputs)
    assert [host[n]["PodTopologySpread"] for n in "abc"] == [0, 200, 66]
    # a feasible node without the topology key scores 0 (IgnoredNodes); without constraints: skipped
    bare = _node("d", "4", "8Gi")
    scores = score_nodes(pod_inputs(_pod("p", **_spread("zone"))), [*inputs, node_inputs(bare, NodeUsage(), {})])
    assert scores["d"]["PodTopologySpread"] == 0
    assert "PodTopologySpread" not in score_nodes(pod_inputs(_pod("p")), inputs)["a"]


def test_inter_pod_affinity_adds_preferred_terms_both_ways() -> None:
    nodes = [_zoned("a", "z1"), _zoned("b", "z1"), _zoned("c", "z2")]
    db = parse_pod({"metadata": {"name": "db", "labels": {"app": "db"}}, "spec": {"containers": [{"name": "c"}]}})
    term = {"topologyKey": "zone", "labelSelector": {"matchLabels": {"app": "db"}}}
    near: dict[str, Any] = {"affinity": {"podAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [{"weight": 10, "podAffinityTerm": term}]}}}
    inputs = _with_pods(nodes, {"a": [db]})
    # db sits in z1: a and b get 10, c 0; normalized over max - min: 100, 100, 0; times 2
    scores = score_nodes(pod_inputs(_pod("p", **near)), inputs)
    assert [scores[n]["InterPodAffinity"] for n in "abc"] == [200, 200, 0]
    # a bound pod's preferred anti-affinity against the new pod counts too (-weight), even when
    # the new pod has no terms of its own; a pod it does not select leaves InterPodAffinity skipped
    avoid = {"weight": 4, "podAffinityTerm": {"topologyKey": "kubernetes.io/hostname", "labelSelector": {"matchLabels": {"app": "web"}}}}
    loner = parse_pod({"metadata": {"name": "l"}, "spec": {"containers": [{"name": "c"}], "affinity": {"podAntiAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [avoid]}}}})
    inputs = _with_pods(nodes, {"b": [loner]})
    web = score_nodes(pod_inputs(parse_pod({"metadata": {"name": "w", "labels": {"app": "web"}}, "spec": {"containers": [{"name": "c"}]}})), inputs)
    assert [web[n]["InterPodAffinity"] for n in "abc"] == [200, 0, 200]
    assert "InterPodAffinity" not in score_nodes(pod_inputs(_pod("p")), inputs)["a"]


def test_filters_of_pod_affinity_and_hard_spreading_are_refused_not_guessed() -> None:
    hard: dict[str, Any] = {"topologySpreadConstraints": [{"maxSkew": 1, "topologyKey": "zone", "whenUnsatisfiable": "DoNotSchedule"}]}
    with pytest.raises(Unmodelled, match="PodTopologySpread"):
        unmodelled_filters(_pod("p", **hard), [])
    term = {"topologyKey": "zone", "labelSelector": {"matchLabels": {"app": "web"}}}
    with pytest.raises(Unmodelled, match="InterPodAffinity"):
        unmodelled_filters(_pod("p", affinity={"podAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [term]}}), [])
    guard = _pod("g", affinity={"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [term]}})
    web = parse_pod({"metadata": {"name": "w", "labels": {"app": "web"}}, "spec": {"containers": [{"name": "c"}]}})
    unmodelled_filters(_pod("p"), [guard])  # the guard's term does not select p
    with pytest.raises(Unmodelled, match="required anti-affinity of pod default/g"):
        unmodelled_filters(web, [guard])
    selected = {"topologyKey": "zone", "namespaceSelector": {"matchLabels": {"team": "x"}}, "labelSelector": {}}
    with pytest.raises(Unmodelled, match="namespaceSelector"):
        pod_inputs(_pod("p", affinity={"podAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [{"weight": 1, "podAffinityTerm": selected}]}}))


def test_a_filter_error_reads_as_the_framework_wraps_it() -> None:
    # framework.go RunFilterPlugins: fmt.Errorf("running %q filter plugin: %w", pl.Name(), err)
    r = run(
        *cluster("n1"),
        template("t", 1, 'device.attributes["dra.example.com"].nosuch == 1'),
        pod("p", template="t"),
    )
    failure = r.final_pods()["p"].failure
    assert failure is not None
    assert failure.startswith('running "DynamicResources" filter plugin: ')


def test_the_replay_adds_the_pods_allocated_claims_to_dynamic_resources() -> None:
    # n1 has 4 node-local devices, n2 two; a network slice (allNodes) serves the shared claim "s",
    # allocated first through its second subrequest (7 points). Pod b needs "s" and a claim from a
    # template whose first subrequest (3 devices) fits n1 only: raw 8 on n1, 7 on n2 (second
    # subrequest). computeScore adds the allocated claim: 15 and 14 -> 100 and 93 (not 100 and 87).
    net = "net.example.com"
    objs = [
        dclass("c", f'device.driver == "{D}"'),
        dclass("n", f'device.driver == "{net}"'),
        node("n1"), slice_("n1-0", "n1", [device(f"d{i}") for i in range(4)]),
        node("n2"), slice_("n2-0", "n2", [device(f"d{i}") for i in range(2)]),
        slice_("net-0", None, [device("g0")], driver=net, pool="net", allNodes=True),
        {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim", "metadata": {"name": "s"},
         "spec": {"devices": {"requests": [first_available("r", sub("two", "n", 2), sub("one", "n", 1))]}}},
        {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaimTemplate", "metadata": {"name": "t"},
         "spec": {"spec": {"devices": {"requests": [first_available("r", sub("three", "c", 3), sub("one", "c", 1))]}}}},
        pod("a", claim="s"),
    ]
    r = run(*objs)
    b = pod("b", template="t")
    b["spec"]["resourceClaims"].append({"name": "c1", "resourceClaimName": "s"})
    step = r.apply(b, "b")[-1]
    assert step.node == "n1"
    assert {n: p["DynamicResources"] for n, p in step.plugin_scores.items()} == {"n1": 200, "n2": 186}


def test_an_invalid_pool_is_a_per_node_unschedulable_reason_not_an_error() -> None:
    # a slice listing one device name twice makes its pool invalid: Allocate wraps
    # ErrFailedAllocationOnNode, so Filter says Unschedulable for that node only
    bad = [dclass("c", f'device.driver == "{D}"'), node("bad"), slice_("bad-0", "bad", [device("d0"), device("d0")])]
    r = run(*bad, template("t", 2), pod("p", template="t"))
    assert r.final_pods()["p"].failure == "0/1 nodes are available: 1 invalid resource pools were encountered."
    r = run(*bad, node("good"), slice_("good-0", "good", [device("d0"), device("d1")]), template("t", 2), pod("p", template="t"))
    assert r.final_pods()["p"].node == "good"
