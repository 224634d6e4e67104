"""Huge inputs fail fast: the memory estimate refuses what will not fit, and a run stops once
no later pod can be scheduled."""

from __future__ import annotations

import pytest

from topodra.sim.cluster import ClusterError
from topodra.sim.guards import Exhaustion, check_memory, estimate_bytes
from topodra.sim.run import RunConfig, run_simulation


def test_estimate_grows_with_nodes_devices_and_pods() -> None:
    small = estimate_bytes(1000, 256, 2000)
    assert estimate_bytes(2000, 256, 2000) > small
    assert estimate_bytes(1000, 512, 2000) > small
    assert estimate_bytes(1000, 256, 4000) > small


def test_a_hundred_million_nodes_are_refused_in_one_line() -> None:
    with pytest.raises(ClusterError) as e:
        check_memory(100_000_000, ["16"], 1, available=64 << 30)
    text = str(e.value)
    assert "\n" not in text
    assert "100000000 nodes" in text
    assert "GiB" in text
    assert "64.0 GiB available" in text


def test_a_run_that_fits_passes() -> None:
    check_memory(1000, ["256"], 2000, available=8 << 30)


def test_run_simulation_refuses_before_building(monkeypatch: pytest.MonkeyPatch) -> None:
    import topodra.sim.guards as guards

    monkeypatch.setattr(guards, "available_bytes", lambda: 256 << 20)
    with pytest.raises(ClusterError, match="need about"):
        run_simulation(RunConfig(nodes=1_000_000, machines={"16": 1.0}, pods=1))


def test_exhaustion_waits_for_every_kind_and_never_with_deletes() -> None:
    ex = Exhaustion(["a", "b"], deletes=False)
    assert not ex.failed("a")
    assert not ex.failed("a")
    assert ex.failed("b")
    churn = Exhaustion(["a"], deletes=True)
    assert not churn.failed("a")


def test_a_full_cluster_stops_early_and_keep_going_tries_every_pod() -> None:
    config = RunConfig(nodes=2, machines={"16": 1.0}, workload="p-cores", pods=500)
    stopped, results = run_simulation(config)
    assert stopped.not_attempted > 0
    assert stopped.pods == len(results) == 500 - stopped.not_attempted
    assert stopped.scheduled > 0
    assert stopped.failed_unschedulable > 0
    full, all_results = run_simulation(RunConfig(nodes=2, machines={"16": 1.0}, workload="p-cores", pods=500, keep_going=True))
    assert full.not_attempted == 0
    assert full.pods == 500
    assert full.scheduled == stopped.scheduled  # the pods not tried could not have been scheduled
    assert [r.node for r in all_results[: len(results)]] == [r.node for r in results]
    assert all(r.node is None for r in all_results[len(results) :])
