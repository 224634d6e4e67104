"""The shape of the largest clusters (every node half full in its own way, the prototype
workload) scheduled by the fast path and by the plain path (every Filter an allocator call,
every scan the general one, every node filtered and scored by ``podfit`` and ``scoring`` one
by one): the same placements, the same allocations, the same ties and every counted figure
the same, pod by pod, on the same seed."""

from __future__ import annotations

from typing import Any

import pytest

from topodra.sim.run import RunConfig, run_simulation
from topodra.sim.scheduler import Scheduler


def _run(nodes: int, pods: int, plain: bool, monkeypatch: pytest.MonkeyPatch) -> tuple[dict[str, Any], list[tuple[Any, ...]]]:
    with monkeypatch.context() as m:
        for shortcut in ("fast_scan", "first_fit", "fast_bind", "fast_score"):
            m.setattr(Scheduler, shortcut, not plain)
        summary, results = run_simulation(RunConfig(nodes=nodes, machines={"256": 1.0}, workload="prototype", pods=pods, fill=0.5, fill_patterns=nodes, seed=7))
    row = summary.as_row()
    for timing in ("sim_seconds", "sim_pods_per_s", "build_seconds", "memo_hits", "memo_misses"):  # wall clock, and how the answers were found
        row.pop(timing)
    per_pod = [
        (r.pod, r.node, [(a.claim, [(d.request, d.driver, d.pool, d.device) for d in a.results]) for a in r.allocations], r.failure,
         r.nodes_filtered, r.feasible_found, r.calls, r.visits, r.checks, r.cel_evals, r.filter_cpu_s, r.slowest_node_s, r.predicted_s, r.timeouts, r.tied)
        for r in results
    ]
    return row, per_pod


def _check(nodes: int, pods: int, monkeypatch: pytest.MonkeyPatch) -> None:
    fast_row, fast = _run(nodes, pods, False, monkeypatch)
    plain_row, plain = _run(nodes, pods, True, monkeypatch)
    assert fast_row["scheduled"] > 0
    assert fast == plain
    assert fast_row == plain_row


def test_fast_and_plain_paths_agree_on_a_few_hundred_nodes(monkeypatch: pytest.MonkeyPatch) -> None:
    _check(300, 1300, monkeypatch)


@pytest.mark.slow
@pytest.mark.timeout(3600)  # the plain path scores ~800 feasible nodes per pod in Python
def test_fast_and_plain_paths_agree_on_thousands_of_nodes(monkeypatch: pytest.MonkeyPatch) -> None:
    _check(3250, 12000, monkeypatch)
