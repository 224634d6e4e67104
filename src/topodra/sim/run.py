"""One simulation run: build a cluster, schedule a workload, summarise what it cost."""

from __future__ import annotations

import gc
import math
import time
from collections import Counter, deque
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

from topodra.dra.devices import MODELS
from topodra.sim.cluster import Cluster, ClusterSpec, build_cluster
from topodra.sim.costmodel import DEFAULT_COSTS, CostModel
from topodra.sim.gpus import GPU_DRIVER
from topodra.sim.guards import Exhaustion, check_memory
from topodra.sim.scheduler import PodResult, Scheduler
from topodra.sim.throughput import DEFAULT_API_COSTS, ApiCosts, end_to_end
from topodra.sim.workload import Workload, load_workload

__all__ = ["RunConfig", "RunSummary", "run_simulation", "percentile", "parse_models"]


@dataclass(frozen=True)
class RunConfig:
    """What one ``topodra sim run`` simulates: cluster, device model, workload and limits."""

    nodes: int = 100
    machines: Mapping[str, float] = field(default_factory=lambda: {"256": 1.0})
    model: str = "cpu"
    group_by: str = "numa"
    order: str = "topology-reversed"  # device order of the published devices
    workload: str = "prototype"
    pods: int | None = None  # default: the workload's spec.pods, else nodes * 4
    fill: float = 0.0
    fill_patterns: int = 16
    reserved_cpus: int = 0
    taints: Mapping[str, str] = field(default_factory=dict)  # device taints per reason (DeviceModelConfig.taints)
    seed: int = 1
    percentage_of_nodes_to_score: int | None = None
    scoring: str = "least-allocated"  # or "first"
    objects: tuple[str, ...] = ()  # YAML/JSON files with the cluster's API objects instead of a synthetic cluster
    keep_going: bool = False  # schedule every pod even once no later pod can be scheduled
    gpus: bool = False  # also the gpu.example.com driver's slices (a GPU per PCIe root; sim/gpus.py)
    list_type_attributes: bool = False  # DRAListTypeAttributes: list-typed pcieRoot published and scheduled


@dataclass
class RunSummary:
    """The figures of one run (flat, so a sweep can write it as a CSV row)."""

    nodes: int
    machines: str
    cpus_per_node: float
    model: str
    workload: str
    pods: int
    scheduled: int
    failed_unschedulable: int
    failed_timeout: int
    failed_error: int
    deleted: int
    sim_seconds: float
    sim_pods_per_s: float
    build_seconds: float
    predicted_p50_ms: float
    predicted_p99_ms: float
    predicted_max_ms: float
    predicted_pods_per_s: float  # Filter-bound: the scheduler's cycle only
    e2e_pods_per_s: float  # end to end: with the API work of every pod (``throughput``)
    e2e_cpu_ms_per_pod: float  # control-plane CPU per pod (Filter + scheduler + API writes)
    e2e_bound_by: str  # "cpu" (the shared control plane) or "scheduler" (its serial cycle)
    api_writes_per_pod: float
    node_filter_p50_ms: float
    node_filter_max_ms: float
    timeouts: int
    nodes_filtered_mean: float
    cel_evals: int
    devices_visited: int
    allocate_calls: int
    devices_per_node: float
    resource_slices: int
    api_bytes: int
    memo_hits: int
    memo_misses: int
    failure_reasons: dict[str, int] = field(default_factory=dict)
    not_attempted: int = 0  # pods left when no later pod could be scheduled (the run stopped early)

    def as_row(self) -> dict[str, Any]:
        row = asdict(self)
        row["failure_reasons"] = "; ".join(f"{k} ({v})" for k, v in self.failure_reasons.items())
        return row


def parse_models(models: Sequence[str]) -> list[tuple[str, str]]:
    """Device models as ``sim run``/``sim sweep`` take them: ``["cpu", "grouped:l3"]`` -> ``[("cpu", "numa"), ("grouped", "l3")]``; bad names raise ValueError."""
    out = []
    for m in models:
        model, _, group = m.partition(":")
        if model not in MODELS:
            raise ValueError(f"--model {m!r}: must be cpu, core, core-or-thread or grouped[:numa|l3|socket|machine]")
        group = group or "numa"
        if group not in ("numa", "l3", "socket", "machine"):
            raise ValueError(f"--model {m!r}: group must be numa, l3, socket or machine")
        out.append((model, group))
    return out


def percentile(values: list[float], p: float) -> float:
    if not values:
        return 0.0
    ordered = sorted(values)
    k = max(0, min(len(ordered) - 1, round(p / 100 * (len(ordered) - 1))))
    return ordered[k]


def run_simulation(
    config: RunConfig,
    *,
    costs: CostModel = DEFAULT_COSTS,
    api: ApiCosts = DEFAULT_API_COSTS,
    workload: Workload | None = None,
    progress: Callable[[int, int], None] | None = None,
) -> tuple[RunSummary, list[PodResult]]:
    """Schedule the workload's pods on a fresh cluster; return the summary and every pod's result."""
    # The cluster is millions of long-lived objects: the cyclic collector would rescan them
    # over and over while they are built, and again during the run. It is off while building
    # and the result is frozen for the run. Kept under the rule for optimizations that cost
    # clarity: an end-to-end figure of >= 10 %, old and new alternated (docs/simulator.md).
    collecting = gc.isenabled()
    gc.disable()
    try:
        t0 = time.perf_counter()
        wl = workload or load_workload(config.workload)
        if not config.gpus and not config.objects and GPU_DRIVER in _classes_asked(wl):
            raise ValueError(f"workload {wl.name} asks for DeviceClass {GPU_DRIVER}: add --gpus (machines with PCI data)")
        if not config.objects:
            check_memory(config.nodes, config.machines, _pod_count(config, wl, config.nodes))
        cluster = _objects_cluster(config) if config.objects else build_cluster(
            ClusterSpec(
                nodes=config.nodes,
                machines=dict(config.machines),
                model=config.model,
                group_by=config.group_by,
                order=config.order,
                reserved_cpus=config.reserved_cpus,
                taints=dict(config.taints),
                fill=config.fill,
                seed=config.seed,
                fill_patterns=config.fill_patterns,
                gpus=config.gpus,
                list_attributes=config.list_type_attributes,
            )
        )
        sched = Scheduler(
            cluster.nodes,
            cluster.slices,
            list(cluster.classes) + list(wl.classes),
            costs=costs,
            percentage_of_nodes_to_score=config.percentage_of_nodes_to_score,
            scoring=config.scoring,
            list_type_attributes=config.list_type_attributes,
        )
        _preallocate(sched, cluster)
        build_s = time.perf_counter() - t0
        gc.freeze()
    finally:
        if collecting:
            gc.enable()
    try:
        return _schedule_all(config, wl, cluster, sched, costs, api, build_s, progress)
    finally:
        gc.unfreeze()


def _schedule_all(
    config: RunConfig,
    wl: Workload,
    cluster: Any,
    sched: Scheduler,
    costs: CostModel,
    api: ApiCosts,
    build_s: float,
    progress: Callable[[int, int], None] | None,
) -> tuple[RunSummary, list[PodResult]]:
    count = _pod_count(config, wl, len(cluster.nodes))
    exhausted = None if config.keep_going else Exhaustion((p["metadata"]["name"] for p in wl.pods_for(config.model)), deletes=bool(wl.churn_every and wl.churn_delete))
    results: list[PodResult] = []
    claims_of: list[int] = []
    bound: deque[str] = deque()
    deleted = 0
    t1 = time.perf_counter()
    for n, pod in enumerate(wl.generate(config.model, count)):
        r = sched.schedule(pod)
        results.append(r)
        claims_of.append(len(pod.claims))
        if r.node is not None:
            bound.append(pod.name)
        elif exhausted is not None and r.failure_kind == "unschedulable" and exhausted.failed(pod.template) and n + 1 < count:
            break  # every later pod is unschedulable too: no need to try them
        if wl.churn_every and (n + 1) % wl.churn_every == 0:
            for _ in range(min(wl.churn_delete, len(bound))):
                if sched.delete(bound.popleft()):
                    deleted += 1
        if progress is not None and (n % 200 == 0 or n + 1 == count):
            progress(n + 1, count)
    sim_s = time.perf_counter() - t1
    predicted = [r.predicted_s * 1e3 for r in results]
    per_node = [r.filter_cpu_s / max(1, r.nodes_filtered) * 1e3 for r in results]
    reasons = Counter(f"{r.failure_kind}: {_short(r.failure)}" for r in results if r.failure)
    kinds = Counter(r.failure_kind for r in results if r.failure_kind)
    machines = "objects" if cluster.from_objects else ",".join(f"{m}:{w:g}" for m, w in config.machines.items())
    mean_pred = math.fsum(predicted) / len(predicted) if predicted else 0.0  # statistics.fmean, without its import
    e2e = end_to_end(((r.filter_cpu_s, r.predicted_s, k, r.node is not None) for r, k in zip(results, claims_of, strict=True)), costs, api)
    n_nodes = len(cluster.nodes)
    summary = RunSummary(
        nodes=n_nodes,
        machines=machines,
        cpus_per_node=cluster.device_count / n_nodes if config.model == "cpu" or cluster.from_objects else _cpus_per_node(cluster),
        model=config.model if config.model != "grouped" else f"grouped/{config.group_by}",
        workload=wl.name,
        pods=len(results),
        scheduled=sum(1 for r in results if r.node),
        failed_unschedulable=kinds.get("unschedulable", 0),
        failed_timeout=kinds.get("timeout", 0),
        failed_error=kinds.get("error", 0) + kinds.get("aborted", 0),
        deleted=deleted,
        sim_seconds=sim_s,
        sim_pods_per_s=len(results) / sim_s if sim_s > 0 else 0.0,
        build_seconds=build_s,
        predicted_p50_ms=percentile(predicted, 50),
        predicted_p99_ms=percentile(predicted, 99),
        predicted_max_ms=max(predicted, default=0.0),
        predicted_pods_per_s=1e3 / mean_pred if mean_pred > 0 else 0.0,
        e2e_pods_per_s=e2e.pods_per_s,
        e2e_cpu_ms_per_pod=e2e.cpu_s_per_pod * 1e3,
        e2e_bound_by=e2e.bound_by,
        api_writes_per_pod=e2e.writes_per_pod,
        node_filter_p50_ms=percentile(per_node, 50),
        node_filter_max_ms=max((r.slowest_node_s * 1e3 for r in results), default=0.0),
        timeouts=sum(r.timeouts for r in results),
        nodes_filtered_mean=math.fsum(r.nodes_filtered for r in results) / len(results) if results else 0.0,
        cel_evals=sum(r.cel_evals for r in results),
        devices_visited=sum(r.visits for r in results),
        allocate_calls=sum(r.calls for r in results),
        devices_per_node=cluster.device_count / n_nodes,
        resource_slices=cluster.slice_count,
        api_bytes=cluster.api_bytes,
        memo_hits=sched.memo_hits,
        memo_misses=sched.memo_misses,
        failure_reasons=dict(reasons.most_common(5)),
        not_attempted=count - len(results),
    )
    return summary, results


def _classes_asked(wl: Workload) -> set[str]:
    """The DeviceClasses the workload's claims name."""
    out: set[str] = set()
    for spec in [*wl.templates.values(), *wl.claims.values()]:
        for r in (spec.get("devices") or {}).get("requests") or ():
            for sub in [r.get("exactly") or {}, *(r.get("firstAvailable") or ())]:
                if sub.get("deviceClassName"):
                    out.add(str(sub["deviceClassName"]))
    return out


def _pod_count(config: RunConfig, wl: Workload, nodes: int) -> int:
    """Pods the run schedules: ``--pods``, else the workload's count, else four per node."""
    return config.pods or wl.pod_count or nodes * 4


def _preallocate(sched: Scheduler, cluster: Cluster) -> None:
    """Put what the cluster already holds into the scheduler: existing allocations as they
    are, the synthetic fill of whole devices in bulk (by position: no allocation objects)."""
    if cluster.allocations:
        sched.preallocate(cluster.allocations)
    fill = cluster.fill
    if fill is None:
        return
    if fill.model == "grouped":  # shared devices: usage is capacity, not positions
        sched.preallocate(fill.allocations())
        return
    # device index (slice-name order) -> position on the node, once per machine (nodes of a
    # machine share their device lists, so the same map holds for all of them)
    maps: dict[str, np.ndarray[Any, np.dtype[np.int64]]] = {}
    held = []
    for i, m in enumerate(fill.node_machine):
        mapping = maps.get(m)
        if mapping is None:
            name = fill.node_names[i]
            found = [sched.position_of(i, ("native.cpu", name, d)) for d in fill.device_names[m]]
            if any(p is None for p in found):
                raise ValueError(f"node {name}: the fill names a device the scheduler does not list")
            mapping = maps[m] = np.asarray(found, dtype=np.int64)
        held.append((i, mapping[fill.indexes(i)]))
    sched.preallocate_positions(held)


#: What ``--objects`` takes from a cluster dump (its Pods and the rest are not kept).
OBJECT_KINDS = frozenset({"Node", "ResourceSlice", "DeviceClass", "ResourceClaim"})


def _objects_cluster(config: RunConfig) -> Any:
    from topodra.sim.cluster import ClusterError, cluster_from_objects
    from topodra.yamldocs import YamlFileError, stream_files

    try:
        docs = [d.obj for d in stream_files(config.objects) if isinstance(d.obj, dict) and d.obj.get("kind") in OBJECT_KINDS]
    except YamlFileError as e:
        raise ClusterError(str(e)) from None
    return cluster_from_objects(docs, config.model)


def _cpus_per_node(cluster: Any) -> float:
    from topodra.sim.cluster import topology_for

    total = sum(len(topology_for(m).online) - cluster.spec.reserved_cpus for m in cluster.machine_of.values())
    return float(total) / max(1, len(cluster.machine_of))


def _short(text: str | None) -> str:
    if not text:
        return ""
    # node names vary; keep the reason
    if text.startswith("node ") and ": " in text:
        text = text.split(": ", 1)[1]
    text = text.splitlines()[0] if text.strip() else text
    if len(text) <= 160:
        return text
    return text[:160].rsplit(" ", 1)[0] + " …"  # whole words: never cut one in half
