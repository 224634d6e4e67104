"""End-to-end scheduling throughput: Filter plus the per-pod API work around it.

The cost model (``costmodel``) predicts kube-scheduler's Filter. A real cluster
spends far more per pod than Filter: every pod is created, its claims are
created from their templates by the resourceclaim controller (which also
writes the pod's ``status.resourceClaimStatuses``), the scheduler writes each
allocation to the claim status in PreBind, binds the pod and records an Event.
Each of those is an API write: kube-apiserver decodes, validates and stores it
in etcd, and every watcher (scheduler, controller-manager) receives it.

The model: a pod costs

    CPU  = Filter CPU (sum over the nodes filtered) + the scheduler's per-pod cost
           + writes x ``per_write_s``

and the control plane (scheduler, kube-apiserver, etcd, controller-manager
sharing ``cores`` CPUs, as on the measured machine) runs at
``cores / CPU`` pods per second, unless the scheduler's serial cycle (per-pod
cost + the Filter phase on its workers) is slower: binding runs
asynchronously, so only that cycle is serial.

``per_write_s`` is fitted (``fit_per_write``) to two end-to-end runs of a real
kube-scheduler + kube-apiserver + etcd 3.4 on a 2-core machine:
43.5 pods/s on 500 nodes x 64 per-CPU devices and 51.8 pods/s on 100 nodes x
256, one 4-CPU P-core claim per pod.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from topodra.sim.costmodel import CostModel

__all__ = [
    "ApiCosts",
    "DEFAULT_API_COSTS",
    "EndToEnd",
    "MEASURED",
    "Measured",
    "calibrate",
    "end_to_end",
    "fit_per_write",
    "writes_per_pod",
]


@dataclass(frozen=True)
class ApiCosts:
    """CPU seconds of control-plane work per API write, and the CPUs the control plane shares."""

    per_write_s: float = 1.268e-3  # fitted: ``fit_per_write`` on ``MEASURED`` (a test keeps them equal)
    cores: int | None = None  # None: the scheduler host's cores (``CostModel.cores``), shared by all


DEFAULT_API_COSTS = ApiCosts()


@dataclass(frozen=True)
class Measured:
    """An end-to-end run of a real control plane: shape and pods per second."""

    nodes: int
    cpus: int
    pods_per_s: float
    cores: int = 2
    workload: str = "cpus-4"  # one 4-CPU P-core claim per pod
    order: str = "cpu-id"  # devices listed by CPU id, as the recording harness publishes them
    pods: int = 500  # not recorded with the figures: an assumption (see docs/simulator.md)


MEASURED = (Measured(500, 64, 43.5), Measured(100, 256, 51.8))


def writes_per_pod(template_claims: int, bound: bool) -> int:
    """API writes one pod causes: pod create; per template claim a create; the pod's
    resourceClaimStatuses; then, when bound, per claim the PreBind status write plus the
    binding and the scheduler's Event -- or, when not, one PodScheduled=False status write."""
    controller = template_claims + (1 if template_claims else 0)
    if bound:
        return 1 + controller + template_claims + 2
    return 1 + controller + 1


@dataclass(frozen=True)
class EndToEnd:
    """The cluster's predicted end-to-end pod rate and what bounds it."""

    pods_per_s: float
    cpu_s_per_pod: float  # control-plane CPU per pod
    cycle_s_per_pod: float  # the scheduler's serial cycle per pod
    writes_per_pod: float
    bound_by: str  # "cpu" (the shared control plane) or "scheduler" (its serial cycle)


def end_to_end(
    pods: Iterable[tuple[float, float, int, bool]], costs: CostModel, api: ApiCosts = DEFAULT_API_COSTS
) -> EndToEnd:
    """Throughput of a run from each pod's (Filter CPU s, predicted cycle s, template claims, bound)."""
    cpu = cycle = writes = 0.0
    n = 0
    for filter_cpu, predicted, claims, bound in pods:
        w = writes_per_pod(claims, bound)
        cpu += filter_cpu + costs.per_pod_s + w * api.per_write_s
        cycle += predicted
        writes += w
        n += 1
    if n == 0:
        return EndToEnd(0.0, 0.0, 0.0, 0.0, "cpu")
    cores = api.cores or costs.cores
    cpu_wall = cpu / max(1, cores)
    bound_by = "cpu" if cpu_wall >= cycle else "scheduler"
    wall = max(cpu_wall, cycle)
    return EndToEnd(n / wall if wall > 0 else 0.0, cpu / n, cycle / n, writes / n, bound_by)


def fit_per_write(runs: Sequence[tuple[float, float, float, float, int]]) -> float:
    """The per-write CPU cost that best fits measured runs, least squares in log space.

    ``runs``: (measured pods/s, mean CPU per pod outside the API, mean serial cycle per pod,
    API writes per pod, cores). A grid over 0-50 ms in 10 us steps, refined around the best.
    """

    def loss(w: float) -> float:
        return sum((math.log(m) + math.log(max((cpu + writes * w) / cores, cycle))) ** 2 for m, cpu, cycle, writes, cores in runs)

    best = min((k * 1e-5 for k in range(5001)), key=loss)
    lo, hi = max(0.0, best - 1e-5), best + 1e-5
    for _ in range(60):  # golden-section refinement inside one grid step either side
        a = hi - (hi - lo) / 1.618033988749895
        b = lo + (hi - lo) / 1.618033988749895
        if loss(a) <= loss(b):
            hi = b
        else:
            lo = a
    return (lo + hi) / 2


def calibrate(measured: Sequence[Measured] = MEASURED, costs: CostModel | None = None) -> tuple[ApiCosts, list[tuple[Measured, EndToEnd]]]:
    """Fit ``per_write_s`` by simulating each measured shape; returns the costs and the fitted predictions."""
    from dataclasses import replace

    from topodra.sim.costmodel import DEFAULT_COSTS
    from topodra.sim.run import RunConfig, run_simulation

    base = costs or DEFAULT_COSTS
    runs: list[tuple[Measured, float, float, float]] = []
    for m in measured:
        c = replace(base, cores=m.cores)
        config = RunConfig(nodes=m.nodes, machines={str(m.cpus): 1.0}, model="cpu", workload=m.workload, pods=m.pods, order=m.order)
        summary, results = run_simulation(config, costs=c)
        n = max(1, len(results))
        cpu = sum(r.filter_cpu_s for r in results) / n + c.per_pod_s
        cycle = sum(r.predicted_s for r in results) / n
        runs.append((m, cpu, cycle, summary.api_writes_per_pod))
    api = ApiCosts(per_write_s=fit_per_write([(m.pods_per_s, cpu, cycle, w, m.cores) for m, cpu, cycle, w in runs]))
    out = []
    for m, cpu, cycle, w in runs:
        total = cpu + w * api.per_write_s
        wall = max(total / m.cores, cycle)
        out.append((m, EndToEnd(1 / wall, total, cycle, w, "cpu" if total / m.cores >= cycle else "scheduler")))
    return api, out
