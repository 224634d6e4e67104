"""Sweeps: many runs over nodes x CPUs per node x device model, on every core or a cluster, with outputs.

Cells run in local processes, or as tasks on a Dask distributed cluster when
``SweepConfig.cluster`` names one (``topodra.sim.distributed``); the outputs
are the same either way.

Writes ``results.csv``, ``results.json``, plots as PNG and SVG (``topodra.sim.plots``: predicted
scheduler latency against cluster size, against CPUs per node, and per device model)
and ``report.md`` into an output directory.
"""

from __future__ import annotations

import csv
import json
import multiprocessing
import os
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from topodra.sim.costmodel import DEFAULT_COSTS, CostModel
from topodra.sim.plots import write_plots
from topodra.sim.run import RunConfig, RunSummary, parse_models, run_simulation
from topodra.sim.workload import Workload, load_workload

if TYPE_CHECKING:
    from topodra.sim.distributed import ClusterProgress

__all__ = ["SweepConfig", "sweep_points", "run_sweep", "write_outputs", "parse_models"]


@dataclass(frozen=True)
class SweepConfig:
    nodes: Sequence[int]
    cpus: Sequence[int]
    models: Sequence[str]  # "cpu", "core", "grouped" or "grouped:l3"
    workload: str = "prototype"
    pods: int | None = None  # per run; default min(2 x nodes, 10000)
    fill: float = 0.0
    seed: int = 1
    processes: int = field(default_factory=lambda: os.cpu_count() or 1)
    scoring: str = "kube-scheduler"
    cluster: str | None = None  # a Dask scheduler address (or local[:N]): run the cells there


def sweep_points(cfg: SweepConfig) -> list[RunConfig]:
    points = []
    for model, group in parse_models(cfg.models):
        for cpus in cfg.cpus:
            for n in cfg.nodes:
                points.append(
                    RunConfig(
                        nodes=n,
                        machines={str(cpus): 1.0},
                        model=model,
                        group_by=group,
                        workload=cfg.workload,
                        pods=cfg.pods or min(2 * n, 10_000),
                        fill=cfg.fill,
                        seed=cfg.seed,
                        scoring=cfg.scoring,
                    )
                )
    return points


def _run_point(args: tuple[RunConfig, dict[str, float], Workload]) -> RunSummary:
    config, costs, workload = args
    summary, _ = run_simulation(config, costs=CostModel(**costs), workload=workload)  # type: ignore[arg-type]
    return summary


def _cell(job: tuple[RunConfig, dict[str, float], Workload]) -> str:
    config = job[0]
    return f"{config.model} {next(iter(config.machines))} CPUs x {config.nodes} nodes"


def run_sweep(
    cfg: SweepConfig,
    *,
    costs: CostModel = DEFAULT_COSTS,
    progress: Callable[[RunSummary], None] | None = None,
    tick: Callable[[ClusterProgress], None] | None = None,
) -> list[RunSummary]:
    """Run every point, largest first so the pool stays busy; results in sweep order. The
    workload is read here and sent with every cell, so a cluster's workers need no copy of
    its file. ``tick``: a cluster sweep's state every second or so."""
    points = sweep_points(cfg)
    order = sorted(range(len(points)), key=lambda i: -(points[i].nodes * int(next(iter(points[i].machines)))))
    workload = load_workload(cfg.workload)
    jobs = [(points[i], costs.as_dict(), workload) for i in order]
    results: dict[int, RunSummary] = {}
    procs = max(1, min(cfg.processes, len(points)))
    if cfg.cluster:
        from topodra.sim.distributed import map_on_cluster

        for k, summary in map_on_cluster(cfg.cluster, _run_point, jobs, describe=_cell, tick=tick):
            results[order[k]] = summary
            if progress:
                progress(summary)
    elif procs == 1:
        for i, job in zip(order, jobs, strict=True):
            results[i] = _run_point(job)
            if progress:
                progress(results[i])
    else:
        ctx = multiprocessing.get_context("spawn")
        with ctx.Pool(procs) as pool:
            for i, summary in zip(order, pool.imap(_run_point, jobs), strict=True):
                results[i] = summary
                if progress:
                    progress(summary)
    return [results[i] for i in range(len(points))]


def write_outputs(summaries: Sequence[RunSummary], out: Path, title: str = "topodra DRA allocation sweep") -> list[Path]:
    """CSV, JSON, PNG and SVG plots and a markdown report; returns the files written."""
    out.mkdir(parents=True, exist_ok=True)
    files = []
    rows = [s.as_row() for s in summaries]
    csv_path = out / "results.csv"
    with csv_path.open("w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(rows[0]) if rows else ["nodes"])
        w.writeheader()
        w.writerows(rows)
    files.append(csv_path)
    json_path = out / "results.json"
    json_path.write_text(json.dumps([asdict(s) for s in summaries], indent=2))
    files.append(json_path)
    files.extend(write_plots(summaries, out))
    report = out / "report.md"
    report.write_text(markdown_report(summaries, title))
    files.append(report)
    return files


def markdown_report(summaries: Sequence[RunSummary], title: str) -> str:
    lines = [f"# {title}", ""]
    if not summaries:
        return "\n".join([*lines, "No runs."])
    lines += [
        "Predicted kube-scheduler figures come from the steps its own allocator search takes "
        "(counted exactly by the simulator) and per-step costs calibrated against measurements "
        "of the Go allocator (see docs/simulator.md).",
        "",
        "Throughput: *Filter-bound* is one over the scheduler's mean cycle (Filter + per-pod cost); "
        "*end to end* adds every pod's API writes on a control plane sharing the scheduler host's cores "
        "(see docs/simulator.md, End-to-end throughput).",
        "",
        "| model | CPUs/node | nodes | pods | scheduled | unsched. | timeouts | errors | p50 ms | p99 ms | max node filter ms | CEL evals/pod | slices | API MiB | Filter-bound pods/s | end-to-end pods/s | sim pods/s |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for s in summaries:
        lines.append(
            f"| {s.model} | {s.cpus_per_node:g} | {s.nodes} | {s.pods} | {s.scheduled} | {s.failed_unschedulable} | "
            f"{s.failed_timeout} | {s.failed_error} | {s.predicted_p50_ms:.2f} | {s.predicted_p99_ms:.2f} | "
            f"{s.node_filter_max_ms:.2f} | {s.cel_evals / max(1, s.pods):.0f} | {s.resource_slices} | "
            f"{s.api_bytes / 2**20:.1f} | {s.predicted_pods_per_s:.1f} | {s.e2e_pods_per_s:.1f} | {s.sim_pods_per_s:.0f} |"
        )
    lines += ["", "## Findings", ""]
    worst = max(summaries, key=lambda s: s.predicted_p99_ms)
    lines.append(f"- Slowest point: {worst.model} with {worst.cpus_per_node:g} CPUs per node on {worst.nodes} nodes, p99 {worst.predicted_p99_ms:.1f} ms per pod.")
    timeouts = [s for s in summaries if s.failed_timeout]
    if timeouts:
        lines.append(f"- {len(timeouts)} point(s) had pods failing on the 10 s filter timeout: " + ", ".join(f"{s.model}/{s.cpus_per_node:g}/{s.nodes}" for s in timeouts) + ".")
    else:
        lines.append("- No pod hit the 10 s filter timeout.")
    by_model: dict[str, list[RunSummary]] = {}
    for s in summaries:
        by_model.setdefault(s.model, []).append(s)
    for model, ss in sorted(by_model.items()):
        big = max(ss, key=lambda s: (s.nodes, s.cpus_per_node))
        lines.append(
            f"- {model}: at {big.nodes} nodes x {big.cpus_per_node:g} CPUs, p50 {big.predicted_p50_ms:.2f} ms, "
            f"{big.cel_evals / max(1, big.pods):.0f} CEL evaluations per pod, {big.api_bytes / max(1, big.nodes) / 1024:.0f} KiB of slices per node."
        )
    failures: dict[str, int] = {}
    for s in summaries:
        for k, v in s.failure_reasons.items():
            failures[k] = failures.get(k, 0) + v
    if failures:
        lines += ["", "## Failures", ""]
        lines += [f"- {v} x {k}" for k, v in sorted(failures.items(), key=lambda kv: -kv[1])[:10]]
    lines += ["", "![latency vs nodes](latency_vs_nodes.png)", "", "![latency vs CPUs](latency_vs_cpus.png)", "", "![per model](per_model.png)", ""]
    return "\n".join(lines)


def summaries_from_json(path: Path) -> list[RunSummary]:
    data: list[dict[str, Any]] = json.loads(path.read_text())
    return [RunSummary(**d) for d in data]
