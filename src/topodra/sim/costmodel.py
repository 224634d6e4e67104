"""What kube-scheduler's DRA filter would cost: counted search steps turned into seconds.

The allocator counts the scheduler's own work per node (``SearchStats``:
allocateOne calls, devices visited, allocation checks, CEL evaluations, and
the devices it converts when it gathers pools). A linear model with one cost
per step gives the Filter latency of that node; a pod's filter phase is the
sum over the nodes it filters divided by the scheduler's parallel workers.

The default per-step costs are fitted (``calibrate``) to figures measured
with the real Go allocator on a 2-core machine like ours (issue 6, and the
scheduler_perf numbers in the DRA reference):

- a selector that matches nothing scans ~13 us per device (one class and one
  request selector evaluation per device);
- a 4-CPU claim with a 3-clause selector costs 150-380 us per node with 256
  per-CPU devices (free node .. half-filled node);
- a claim for one CPU more than an L3 group holds, with ``matchAttribute`` on
  the L3 group, on a 240-CPU node: 12-CPU groups 0.1 s, 16: 1.2 s, 20: 10 s,
  24: > 100 s;
- scheduler_perf ``SchedulingWithResourceClaimTemplate`` 5000 pods / 500 nodes
  x 10 devices ran at 371.9 pods/s with GOMAXPROCS 6.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass

from topodra.sim.allocator import SearchStats

__all__ = ["CostModel", "DEFAULT_COSTS", "Observation", "calibrate", "num_feasible_nodes_to_find"]

FILTER_TIMEOUT_S = 10.0
MIN_FEASIBLE_NODES_TO_FIND = 100
MIN_FEASIBLE_NODES_PERCENTAGE_TO_FIND = 5


def num_feasible_nodes_to_find(num_all_nodes: int, percentage_of_nodes_to_score: int | None = None) -> int:
    """kube-scheduler's sampling: how many feasible nodes to find before it stops filtering."""
    if num_all_nodes < MIN_FEASIBLE_NODES_TO_FIND:
        return num_all_nodes
    pct = percentage_of_nodes_to_score or 0
    if pct == 0:
        pct = 50 - num_all_nodes // 125
        if pct < MIN_FEASIBLE_NODES_PERCENTAGE_TO_FIND:
            pct = MIN_FEASIBLE_NODES_PERCENTAGE_TO_FIND
    num = num_all_nodes * pct // 100
    return max(num, MIN_FEASIBLE_NODES_TO_FIND)


@dataclass(frozen=True)
class CostModel:
    """Seconds per counted step of the Go allocator, and the scheduler around it."""

    per_call_s: float = 0.25e-6
    per_visit_s: float = 0.05e-6
    per_check_s: float = 0.3e-6
    per_cel_eval_s: float = 6.4e-6
    per_node_s: float = 5e-6  # one Filter call: allocator set-up, pool gathering
    per_device_s: float = 0.55e-6  # converting one device while gathering pools
    per_pod_s: float = 2.3e-3  # everything outside Filter for one pod (PreFilter, score, bind, API)
    workers: int = 16  # filter parallelism (``parallelism: 16``), capped by cores below
    cores: int = 16  # CPUs of the scheduler host
    timeout_s: float = FILTER_TIMEOUT_S

    def node_seconds(self, s: SearchStats) -> float:
        """Predicted Filter latency on one node."""
        return (
            self.per_node_s
            + self.per_device_s * s.devices
            + self.per_call_s * s.calls
            + self.per_visit_s * s.visits
            + self.per_check_s * s.checks
            + self.per_cel_eval_s * s.cel_evals
        )

    def filter_seconds(self, total_node_seconds: float, slowest_node_s: float) -> float:
        """Wall time of a pod's filter phase: node work spread over the parallel workers."""
        par = max(1, min(self.workers, self.cores))
        return max(total_node_seconds / par, min(slowest_node_s, self.timeout_s))

    def pod_seconds(self, total_node_seconds: float, slowest_node_s: float) -> float:
        return self.per_pod_s + self.filter_seconds(total_node_seconds, slowest_node_s)

    def as_dict(self) -> dict[str, float]:
        return {k: float(v) for k, v in asdict(self).items()}


DEFAULT_COSTS = CostModel()


@dataclass(frozen=True)
class Observation:
    """A published timing and the steps our allocator counts for the same shape."""

    name: str
    stats: SearchStats
    seconds: float
    lower_bound: bool = False  # "over 100 s": only a lower bound


def calibrate(
    scan: Observation,
    small_claims: Sequence[Observation],
    groups: Sequence[Observation],
    scheduler_perf: Observation,
    scheduler_perf_filtered_nodes: int,
    scheduler_perf_workers: int = 6,
    base: CostModel = DEFAULT_COSTS,
) -> CostModel:
    """Fit the per-step costs to the published figures, one family of steps at a time.

    1. CEL: the non-matching scan is (visit + 2 evaluations) per device.
    2. Per node and per device: the small claims (same CEL cost) on empty/filled nodes.
    3. Search steps: one scale for calls/visits/checks from the L3 group blow-up,
       fitted in log space (lower-bound points count only if we predict too little).
    4. Per pod: what is left of 1/372 s after the filter phase of scheduler_perf.
    """
    visit = base.per_visit_s
    per_dev = scan.seconds / max(1, scan.stats.devices)
    evals_per_dev = scan.stats.cel_evals / max(1, scan.stats.devices)
    cel = max(1e-7, (per_dev - visit - base.per_device_s) / max(1e-9, evals_per_dev))
    # 2: small claims: seconds = node + dev*D + cel*evals + (small) steps
    xs, ys = [], []
    for o in small_claims:
        steps = base.per_call_s * o.stats.calls + visit * o.stats.visits + base.per_check_s * o.stats.checks
        xs.append(o.stats.devices)
        ys.append(o.seconds - cel * o.stats.cel_evals - steps)
    if len(xs) >= 2 and max(xs) != min(xs):
        n = len(xs)
        mx, my = sum(xs) / n, sum(ys) / n
        slope = sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True)) / sum((x - mx) ** 2 for x in xs)
        per_device = max(0.0, slope)
        per_node = max(0.0, my - per_device * mx)
    else:
        per_device = max(0.0, (sum(ys) / max(1, len(ys))) / max(1, sum(xs) / max(1, len(xs))))
        per_node = base.per_node_s
    # 3: one scale factor k for the search-step costs (ratios kept from the base model)
    logs = []
    for o in groups:
        raw = base.per_call_s * o.stats.calls + base.per_visit_s * o.stats.visits + base.per_check_s * o.stats.checks
        if raw <= 0:
            continue
        logs.append((math.log(o.seconds / raw), o.lower_bound))
    k = 1.0
    if logs:
        exact = [v for v, lb in logs if not lb]
        k = math.exp(sum(exact) / len(exact)) if exact else math.exp(max(v for v, _ in logs))
        for v, lb in logs:
            if lb and math.log(k) < v:
                k = math.exp(v)  # respect "over N s"
    fitted = CostModel(
        per_call_s=base.per_call_s * k,
        per_visit_s=base.per_visit_s * k,
        per_check_s=base.per_check_s * k,
        per_cel_eval_s=cel,
        per_node_s=per_node,
        per_device_s=per_device,
        per_pod_s=base.per_pod_s,
        workers=base.workers,
        cores=base.cores,
        timeout_s=base.timeout_s,
    )
    # 4: per-pod overhead
    node_s = fitted.node_seconds(scheduler_perf.stats)
    filter_s = node_s * scheduler_perf_filtered_nodes / scheduler_perf_workers
    per_pod = max(0.0, scheduler_perf.seconds - filter_s)
    return CostModel(**{**fitted.as_dict(), "per_pod_s": per_pod, "workers": base.workers, "cores": base.cores})  # type: ignore[arg-type]
