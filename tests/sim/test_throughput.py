"""End-to-end throughput: API writes per pod, the CPU and serial-cycle bounds, and the calibration."""

from __future__ import annotations

import pytest

from topodra.sim.costmodel import CostModel
from topodra.sim.run import RunConfig, run_simulation
from topodra.sim.throughput import (
    DEFAULT_API_COSTS,
    MEASURED,
    ApiCosts,
    calibrate,
    end_to_end,
    fit_per_write,
    writes_per_pod,
)


def test_writes_per_pod_counts_every_api_write_of_the_pod() -> None:
    # pod create + claim create + pod status (controller) + claim status (PreBind) + binding + event
    assert writes_per_pod(1, bound=True) == 6
    assert writes_per_pod(2, bound=True) == 8
    assert writes_per_pod(0, bound=True) == 3
    # an unschedulable pod: created, claims created, then its PodScheduled=False status
    assert writes_per_pod(1, bound=False) == 4


def test_shared_control_plane_is_cpu_bound() -> None:
    costs = CostModel(per_pod_s=0.001, cores=2)
    api = ApiCosts(per_write_s=0.002)
    # 10 ms Filter CPU, 6 ms cycle, one claim: CPU 10 + 1 + 12 = 23 ms on 2 cores -> 11.5 ms per pod
    e = end_to_end([(0.010, 0.006, 1, True)] * 4, costs, api)
    assert e.bound_by == "cpu"
    assert e.cpu_s_per_pod == pytest.approx(0.023)
    assert e.pods_per_s == pytest.approx(1 / 0.0115)


def test_many_cores_leave_the_scheduler_cycle_as_the_bound() -> None:
    costs = CostModel(per_pod_s=0.001, cores=64)
    e = end_to_end([(0.010, 0.006, 1, True)] * 4, costs, ApiCosts(per_write_s=0.002))
    assert e.bound_by == "scheduler"
    assert e.pods_per_s == pytest.approx(1 / 0.006)


def test_fit_recovers_a_known_write_cost() -> None:
    w = 0.0025
    runs = []
    for cpu, writes, cores in ((0.030, 6, 2), (0.012, 8, 4)):
        runs.append((cores / (cpu + writes * w), cpu, 0.001, writes, cores))
    assert fit_per_write(runs) == pytest.approx(w, rel=1e-3)


def test_calibration_reproduces_both_measured_runs_and_the_default() -> None:
    api, fitted = calibrate()
    assert api.per_write_s == pytest.approx(DEFAULT_API_COSTS.per_write_s, rel=0.02)
    assert len(fitted) == len(MEASURED)
    for m, e in fitted:
        assert 1 / 1.5 <= e.pods_per_s / m.pods_per_s <= 1.5, (m, e)


def test_run_reports_filter_bound_and_end_to_end() -> None:
    s, _ = run_simulation(RunConfig(nodes=20, machines={"64": 1.0}, workload="cpus-4", pods=40), costs=CostModel(cores=2))
    assert s.api_writes_per_pod == 6
    assert 0 < s.e2e_pods_per_s < s.predicted_pods_per_s
    assert s.e2e_cpu_ms_per_pod > 6 * DEFAULT_API_COSTS.per_write_s * 1e3
