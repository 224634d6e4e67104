"""What kube-scheduler's DRA filter would cost: counted search steps turned into seconds.

The allocator counts the scheduler's own work per node (``SearchStats``:
allocateOne calls, devices visited, allocation checks, CEL evaluations, and
the devices it converts when it gathers pools). A linear model with one cost
per step gives the Filter latency of that node; a pod's filter phase is the
sum over the nodes it filters divided by the scheduler's parallel workers.

The default per-step costs are fitted (``calibrate``) to figures measured
with the real Go allocator on a 2-core machine like ours (``topodra.sim.calibration``,
and the scheduler_perf numbers in the DRA reference):

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

from topodra.sim.allocator import FilterBudget, SearchStats

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
    """Seconds per counted step of the Go allocator, and the scheduler around it.

    The step costs are the fit of ``calibration.fitted_costs()`` (a test keeps them equal).
    """

    per_call_s: float = 1.152e-06
    per_visit_s: float = 3.840e-07
    per_check_s: float = 3.936e-07
    per_cel_eval_s: float = 6.002e-06
    per_node_s: float = 4.342e-05  # one Filter call: allocator set-up, pool gathering
    per_device_s: float = 4.899e-07  # converting one device while gathering pools
    per_pod_s: float = 0.4e-3  # outside Filter for one pod: PreFilter, score, PreBind/Bind API writes (assumed)
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

    def budget(self) -> FilterBudget:
        """The Filter timeout in counted work, for the allocator to stop where kube-scheduler would."""
        return FilterBudget(
            self.timeout_s,
            self.per_node_s,
            self.per_device_s,
            self.per_call_s,
            self.per_visit_s,
            self.per_check_s,
            self.per_cel_eval_s,
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
    base: CostModel = CostModel(),
) -> CostModel:
    """Fit the per-step costs to the published figures, one family of steps at a time.

    1. Search steps: one scale for calls/visits/checks (their ratios kept from
       ``base``) from the L3 group blow-up, fitted in log space; a lower-bound
       point ("over 100 s") only raises the scale if we predict too little.
    2. CEL: the non-matching scan is visits plus two evaluations per device.
    3. Per node and per device (pool gathering converts every device): solved from the
       small claims (256 devices) and scheduler_perf (10 devices, 230 of 500 nodes
       filtered per pod on ``scheduler_perf_workers`` threads), with the per-pod
       overhead outside Filter (API writes of PreBind and Bind) assumed as ``base.per_pod_s``.
    """
    logs = []
    for o in groups:
        raw = base.per_call_s * o.stats.calls + base.per_visit_s * o.stats.visits + base.per_check_s * o.stats.checks
        if raw > 0:
            logs.append((math.log(o.seconds / raw), o.lower_bound))
    exact = [v for v, lb in logs if not lb]
    k = math.exp(sum(exact) / len(exact)) if exact else 1.0
    for v, lb in logs:
        if lb and math.log(k) < v:
            k = math.exp(v)
    call, visit, check = base.per_call_s * k, base.per_visit_s * k, base.per_check_s * k

    def steps(s: SearchStats) -> float:
        return call * s.calls + visit * s.visits + check * s.checks

    cel = max(1e-8, (scan.seconds - steps(scan.stats) - base.per_device_s * scan.stats.devices) / max(1, scan.stats.cel_evals))
    # per node + per device: the small claims (many devices) and scheduler_perf (10 devices)
    small_d = sum(o.stats.devices for o in small_claims) / len(small_claims)
    small_r = sum(o.seconds - steps(o.stats) - cel * o.stats.cel_evals for o in small_claims) / len(small_claims)
    sp = scheduler_perf.stats
    perf_r = (scheduler_perf.seconds - base.per_pod_s) * scheduler_perf_workers / scheduler_perf_filtered_nodes - steps(sp) - cel * sp.cel_evals
    if small_d != sp.devices:
        per_device = max(0.0, (small_r - perf_r) / (small_d - sp.devices))
    else:
        per_device = base.per_device_s
    per_node = max(0.0, perf_r - per_device * sp.devices)
    return CostModel(
        per_call_s=call,
        per_visit_s=visit,
        per_check_s=check,
        per_cel_eval_s=cel,
        per_node_s=per_node,
        per_device_s=per_device,
        per_pod_s=base.per_pod_s,
        workers=base.workers,
        cores=base.cores,
        timeout_s=base.timeout_s,
    )
