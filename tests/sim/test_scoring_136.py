"""Score arithmetic as kube-scheduler 1.36 computes it, with figures worked by hand from the Go source
(pkg/scheduler/framework/plugins/noderesources/balanced_allocation.go balancedResourceScorer,
least_allocated.go leastRequestedScore, helper/normalize_score.go DefaultNormalizeScore)."""

from __future__ import annotations

from topodra.sim.podfit import (
    NodeUsage,
    NodeView,
    PodView,
    parse_node_view,
    parse_pod,
    score_nodes,
    weighted_dynamic_resources,
)

from .test_replay import cluster, pod, run, template


def _node(name: str, cpu: str, memory: str) -> NodeView:
    return parse_node_view(
        {"metadata": {"name": name}, "status": {"allocatable": {"cpu": cpu, "memory": memory, "pods": "110"}}}
    )


def _pod(name: str, cpu: str, memory: str) -> PodView:
    return parse_pod(
        {
            "metadata": {"name": name},
            "spec": {
                "containers": [{"name": "c", "resources": {"requests": {"cpu": cpu, "memory": memory}}}]
            },
        }
    )


def test_balanced_allocation_scores_the_change_in_balance_centred_on_50() -> None:
    node = _node("n", "4", "8Gi")
    usage = NodeUsage()
    usage.add(_pod("old", "1", "1Gi"))  # 0.25 / 0.125: balance int((1 - 0.0625) * 100) = 93
    pod = _pod("new", "1", "4Gi")  # 0.5 / 0.625: balance 93 as well
    # 50 + (50 + 93 - 93) / 2 = 75 (the pre-1.36 formula gave the balance itself, 93)
    scores = score_nodes(pod, [node], {"n": usage})
    assert scores["n"]["NodeResourcesBalancedAllocation"] == 75
    # LeastAllocated: cpu (4000 - 2000) * 100 / 4000 = 50, memory (8 - 5) * 100 / 8 = 37; (50 + 37) / 2 = 43
    assert scores["n"]["NodeResourcesFit"] == 43


def test_balanced_allocation_rewards_a_pod_that_evens_the_node_out() -> None:
    node = _node("n", "4", "8Gi")
    usage = NodeUsage()
    usage.add(_pod("old", "2", "0"))  # 0.5 / 0: balance 75
    pod = _pod("new", "0", "4Gi")  # 0.5 / 0.5: balance 100
    scores = score_nodes(pod, [node], {"n": usage})
    # 50 + (50 + 100 - 75) / 2 = 50 + 75 / 2 = 87 (integer division)
    assert scores["n"]["NodeResourcesBalancedAllocation"] == 87


def test_dynamic_resources_is_normalized_to_100_and_weighted_2() -> None:
    # firstAvailable index 0 scores 8, index 1 scores 7: normalized 100 and 100 * 7 / 8 = 87, times weight 2
    assert weighted_dynamic_resources({"a": 8, "b": 7}) == {"a": 200, "b": 174}
    assert weighted_dynamic_resources({"a": 0, "b": 0}) == {"a": 0, "b": 0}


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
