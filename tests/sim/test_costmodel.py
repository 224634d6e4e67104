"""The cost model reproduces the Go allocator timings it was calibrated on."""

from __future__ import annotations

import math

import pytest

from topodra.sim.calibration import DISTINCT_SECONDS, L3_GROUP_SECONDS, fitted_costs, published_observations
from topodra.sim.costmodel import DEFAULT_COSTS


@pytest.fixture(scope="module")
def observations() -> dict[str, object]:
    return published_observations()


def test_defaults_are_the_calibrated_fit() -> None:
    fit = fitted_costs()
    for name in ("per_call_s", "per_visit_s", "per_check_s", "per_cel_eval_s", "per_node_s", "per_device_s"):
        assert math.isclose(getattr(fit, name), getattr(DEFAULT_COSTS, name), rel_tol=0.01), name


def test_search_blow_ups_are_predicted_within_a_factor_of_two(observations: dict[str, object]) -> None:
    """L3 ``matchAttribute`` and ``distinctAttribute`` searches against the Go allocator's measured time."""
    groups = observations["groups"]
    assert isinstance(groups, list)
    assert len(groups) == len(L3_GROUP_SECONDS) + len(DISTINCT_SECONDS)
    for o in groups:
        predicted = DEFAULT_COSTS.node_seconds(o.stats)
        if o.lower_bound:
            assert predicted > o.seconds
            assert predicted > DEFAULT_COSTS.timeout_s
        else:
            assert o.seconds / 2 < predicted < o.seconds * 2, (o.name, predicted)
    for o, size in zip(groups, L3_GROUP_SECONDS, strict=False):
        # the search tries every subset of every group: 2^G - 1 calls per group plus the root
        groups_on_node = o.stats.devices // (size + 1)
        assert o.stats.calls == 1 + groups_on_node * (2**size - 1)


def test_scan_and_scheduler_perf_are_reproduced(observations: dict[str, object]) -> None:
    scan = observations["scan"]
    perf = observations["scheduler_perf"]
    assert math.isclose(DEFAULT_COSTS.node_seconds(scan.stats), scan.seconds, rel_tol=0.05)  # type: ignore[attr-defined]
    per_pod = DEFAULT_COSTS.per_pod_s + DEFAULT_COSTS.node_seconds(perf.stats) * 230 / 6  # type: ignore[attr-defined]
    assert math.isclose(per_pod, 1 / 371.9, rel_tol=0.01)
