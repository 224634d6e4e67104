"""``topodra sim``: run the DRA allocation simulator, sweep it, or allocate one set of objects.

No ``from __future__ import annotations`` here: typer reads each option from its annotation,
and string annotations are compiled and evaluated twice per parameter when a command is built
(``inspect.signature(eval_str=True)`` and ``get_type_hints``), a large share of building a command.
"""

import json
import sys
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path
from typing import Annotated, Any, NoReturn

import typer

__all__ = ["register", "register_subcommand"]

sim_app = typer.Typer(
    name="sim",
    help="Cluster-scale DRA allocation simulator: kube-scheduler's allocator over synthetic clusters.",
    no_args_is_help=True,
    rich_markup_mode="rich",
)


def register(app: typer.Typer) -> None:
    app.add_typer(sim_app, name="sim")


def register_subcommand(app: typer.Typer, name: str) -> bool:
    """Add ``sim`` holding only the command ``name`` (False, nothing added, if there is none):
    what ``topodra sim NAME ...`` runs, without typer building the other commands' options."""
    chosen = [c for c in sim_app.registered_commands if c.name == name]
    if not chosen:
        return False
    lean = typer.Typer(name="sim", help=sim_app.info.help, no_args_is_help=True, rich_markup_mode="rich")
    lean.registered_commands = chosen
    app.add_typer(lean, name="sim")
    return True


def _ints(text: str, what: str) -> list[int]:
    try:
        values = [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise typer.BadParameter(f"{what}: expected comma-separated integers, got {text!r}") from None
    if not values or any(v < 1 for v in values):
        raise typer.BadParameter(f"{what}: expected positive integers, got {text!r}")
    return values


def _machines(machine: list[str] | None, cpus: int) -> dict[str, float]:
    if not machine:
        return {str(cpus): 1.0}
    out: dict[str, float] = {}
    for m in machine:
        name, _, weight = m.partition("=")
        try:
            out[name] = float(weight) if weight else 1.0
        except ValueError:
            raise typer.BadParameter(f"--topology {m!r}: weight must be a number") from None
    return out


def _output_dir(out: Path) -> Path:
    """``--out``, made ready before any work: an existing file or a directory that cannot be
    made is a one-line error, not a traceback after the run."""
    if out.exists() and not out.is_dir():
        _fail(f"--out {out}: exists and is not a directory")
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        _fail(f"--out {out}: cannot create the directory ({e.strerror or e})")
    return out


def _fail(message: str) -> NoReturn:
    from topodra.cli_errors import fail

    raise fail(message, 2)


def _load(files: list[Path]) -> list[Any]:
    """Every document of FILES (``kind: List`` expanded), in order; bad YAML ends the command (exit 2)."""
    from topodra.yamldocs import YamlFileError, stream_files

    try:
        return list(stream_files(files))
    except YamlFileError as e:
        _fail(str(e))


def _taints(given: list[str] | None) -> dict[str, str]:
    """``--taint REASON=TREATMENT`` options as ``DeviceModelConfig.taints`` (checked by it)."""
    out: dict[str, str] = {}
    for text in given or ():
        reason, eq, treatment = text.partition("=")
        if not eq or not reason or not treatment:
            _fail(f"--taint {text!r}: must be REASON=TREATMENT, e.g. reserved=Withdraw")
        out[reason.strip()] = treatment.strip()
    return out


@sim_app.command("run")
def run_cmd(
    nodes: Annotated[int, typer.Option("--nodes", "-n", min=1, help="Number of nodes.")] = 100,
    cpus: Annotated[int, typer.Option("--cpus", min=1, help="CPUs per node (a hybrid machine with 16-CPU L3 groups).")] = 256,
    machine: Annotated[list[str] | None, typer.Option("--topology", "-t", help="Machine mix instead of --cpus: a CPU count or any machine (a spec such as 2s1d2n2l8c2t, fixture:NAME, a sysfs directory, host), optionally =WEIGHT. Repeatable.")] = None,
    model: Annotated[str, typer.Option("--model", help="Device model: cpu, core, grouped or grouped:l3|numa|socket|machine.")] = "cpu",
    order: Annotated[str, typer.Option("--order", help="Device order: topology-reversed (topodra's default), topology, or cpu-id (the upstream prototype's).")] = "topology-reversed",
    workload: Annotated[str, typer.Option("--workload", "-w", help="Workload YAML file or built-in name (see `topodra sim workloads`).")] = "prototype",
    pods: Annotated[int, typer.Option("--pods", min=0, help="Pods to schedule (0: the workload's spec.pods, else 4 per node).")] = 0,
    fill: Annotated[float, typer.Option("--fill", min=0.0, max=0.99, help="Fraction of every node already allocated by background pods.")] = 0.0,
    fill_patterns: Annotated[int, typer.Option("--fill-patterns", min=1, help="Distinct random fill patterns per machine; every node takes one.")] = 16,
    reserved: Annotated[int, typer.Option("--reserved-cpus", min=0, help="CPUs per node reserved for system daemons: published with the native.cpu/reserved taint (see --taint).")] = 0,
    taint: Annotated[
        list[str] | None,
        typer.Option("--taint", help="REASON=TREATMENT: how devices of offline, unhealthy, isolated or reserved CPUs are published (NoSchedule, NoExecute, None, Withdraw, Untainted). Repeatable."),
    ] = None,
    seed: Annotated[int, typer.Option("--seed", help="Seed for the background fill.")] = 1,
    out: Annotated[Path | None, typer.Option("--out", "-o", help="Directory for summary.json and pods.csv.")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print the summary as JSON.")] = False,
    scheduler_cores: Annotated[int, typer.Option("--scheduler-cores", min=1, help="CPUs of the kube-scheduler host (Filter runs on min(16, this) workers).")] = 16,
    objects: Annotated[
        list[Path] | None,
        typer.Option("--objects", help="Simulate an exported cluster: YAML/JSON with Nodes, ResourceSlices, DeviceClasses and allocated ResourceClaims (repeatable)."),
    ] = None,
    scoring: Annotated[str, typer.Option("--scoring", help="Among feasible nodes: kube-scheduler (the default profile's scores, as 1.36) or first (the first feasible node: packs).")] = "kube-scheduler",
    max_pods: Annotated[int, typer.Option("--max-pods", min=0, help="Allocatable pods of every synthetic node (the kubelet's --max-pods).")] = 110,
    percentage: Annotated[int, typer.Option("--percentage-of-nodes-to-score", min=0, max=100, help="kube-scheduler's percentageOfNodesToScore (0: adaptive).")] = 0,
    keep_going: Annotated[bool, typer.Option("--keep-going", help="Schedule every pod even once no later pod can be scheduled (default: stop there).")] = False,
    gpus: Annotated[bool, typer.Option("--gpus", help="Also publish the gpu.example.com driver's slices: a GPU per PCIe root (machines with PCI data: fixture:NAME, a spec with +pci).")] = False,
    list_attributes: Annotated[bool, typer.Option("--list-attributes", help="DRAListTypeAttributes on (alpha): list-typed pcieRoot on CPUs that serve several roots, seen by the scheduler's CEL (its matchAttribute matches no list in 1.36).")] = False,
) -> None:
    """Schedule a workload on one synthetic cluster and report what kube-scheduler would spend.

    Exit codes: 0 every pod scheduled, 1 some pod could not be scheduled
    (unschedulable, timeout or error), 2 bad input.
    """
    from topodra.sim.cluster import ClusterError
    from topodra.sim.costmodel import DEFAULT_COSTS
    from topodra.sim.run import RunConfig, parse_models
    from topodra.sim.workload import WorkloadError

    try:
        (mod, group), = parse_models([model])
    except ValueError as e:
        _fail(str(e))
    for option, value, allowed in (("--scoring", scoring, ("kube-scheduler", "first")), ("--order", order, ("topology-reversed", "topology", "cpu-id"))):
        if value not in allowed:
            _fail(f"{option} {value!r}: must be {', '.join(allowed[:-1])} or {allowed[-1]}")
    config = RunConfig(
        nodes=nodes,
        machines=_machines(machine, cpus),
        model=mod,
        group_by=group,
        order=order,
        workload=workload,
        pods=pods or None,
        fill=fill,
        fill_patterns=fill_patterns,
        reserved_cpus=reserved,
        taints=_taints(taint),
        seed=seed,
        percentage_of_nodes_to_score=percentage or None,
        objects=tuple(str(p) for p in objects or ()),
        scoring=scoring,
        max_pods=max_pods,
        keep_going=keep_going,
        gpus=gpus,
        list_type_attributes=list_attributes,
    )
    costs = replace(DEFAULT_COSTS, cores=scheduler_cores)
    if out is not None:
        _output_dir(out)
    try:
        summary, results = _simulate(config, costs)
    except (ClusterError, WorkloadError, ValueError) as e:
        _fail(str(e))
    _report_run(summary, results, out, as_json)


def _report_run(summary: Any, results: Any, out: Path | None, as_json: bool) -> None:
    """Write and print a run's summary; exit 1 when some pod could not be scheduled."""
    if out is not None:
        _write_run_files(out, summary, results)
    if as_json:
        typer.echo(json.dumps(summary.as_row(), indent=2))
    else:
        _print_summary(summary.as_row())
    if summary.not_attempted:
        typer.echo(f"stopped early: every kind of pod was unschedulable and nothing is deleted, so the {summary.not_attempted} pods left were not tried (--keep-going tries them)", err=True)
    if summary.failed_unschedulable or summary.failed_timeout or summary.failed_error:
        raise typer.Exit(1)


class PipedProgress:
    """Progress for a run whose stderr is not a terminal (a pipe, a log file, CI): one plain line
    every ``interval`` seconds, so a long run is never silent; a short run prints nothing."""

    def __init__(self, interval: float = 5.0, clock: Any = None, write: Any = None) -> None:
        import time

        self.interval = interval
        self._clock = clock or time.monotonic
        self._write = write or (lambda line: print(line, file=sys.stderr, flush=True))
        self._start = self._last = self._clock()

    def __call__(self, done: int, total: int) -> None:
        self.say(lambda: f"scheduling: {done} of {total} pods")

    def say(self, line: Any) -> None:
        """``line()`` and the time so far, once ``interval`` has passed since the last line."""
        now = self._clock()
        if now - self._last >= self.interval:
            self._last = now
            self._write(f"{line()} ({now - self._start:.0f} s)")


def _simulate(config: Any, costs: Any) -> tuple[Any, list[Any]]:
    """``run_simulation``, with a progress bar when a person watches stderr, else a line every
    few seconds."""
    from topodra.sim.run import run_simulation

    if sys.stderr.isatty():  # a progress bar for a person watching; rich.progress is not imported otherwise
        from rich.console import Console
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

        with Progress(TextColumn("[bold]scheduling"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(), console=Console(stderr=True), transient=True) as bar:
            task = bar.add_task("pods", total=None)
            return run_simulation(config, costs=costs, progress=lambda done, total: bar.update(task, completed=done, total=total))
    return run_simulation(config, costs=costs, progress=PipedProgress())


def _write_run_files(out: Path, summary: Any, results: list[Any]) -> None:
    """summary.json and pods.csv (one row per pod) in ``out``."""
    out.mkdir(parents=True, exist_ok=True)
    (out / "summary.json").write_text(json.dumps(summary.as_row(), indent=2))
    import csv

    with (out / "pods.csv").open("w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["pod", "template", "node", "failure", "nodes_filtered", "calls", "visits", "cel_evals", "predicted_ms", "slowest_node_ms"])
        for r in results:
            w.writerow([r.pod, r.template, r.node or "", r.failure or "", r.nodes_filtered, r.calls, r.visits, r.cel_evals, f"{r.predicted_s * 1e3:.4f}", f"{r.slowest_node_s * 1e3:.4f}"])


def _summary_rows(row: dict[str, Any]) -> list[tuple[str, str]]:
    """The summary as (label, text) rows, the same on a terminal and in a pipe."""
    rows = [
        ("cluster", f"{row['nodes']} nodes x {row['cpus_per_node']:g} CPUs ({row['machines']}), model {row['model']}"),
        ("workload", f"{row['workload']}: {row['pods']} pods"),
        ("outcome", f"{row['scheduled']} scheduled, {row['failed_unschedulable']} unschedulable, {row['failed_timeout']} timeout, {row['failed_error']} error"),
        ("simulator", f"{row['sim_pods_per_s']:.0f} pods/s ({row['sim_seconds']:.2f} s, cluster build {row['build_seconds']:.2f} s)"),
        ("kube-scheduler (predicted)", f"p50 {row['predicted_p50_ms']:.2f} ms, p99 {row['predicted_p99_ms']:.2f} ms, max {row['predicted_max_ms']:.2f} ms per pod ~ {row['predicted_pods_per_s']:.0f} pods/s"),
        ("throughput (predicted)", f"Filter-bound {row['predicted_pods_per_s']:.1f} pods/s; end to end {row['e2e_pods_per_s']:.1f} pods/s ({row['api_writes_per_pod']:g} API writes, {row['e2e_cpu_ms_per_pod']:.1f} ms control-plane CPU per pod, bound by {row['e2e_bound_by']})"),
        ("per-node filter", f"p50 {row['node_filter_p50_ms']:.3f} ms, max {row['node_filter_max_ms']:.3f} ms, {row['timeouts']} node timeouts"),
        ("search work", f"{row['cel_evals']} CEL evaluations, {row['devices_visited']} devices visited, {row['allocate_calls']} allocateOne calls, {row['nodes_filtered_mean']:.0f} nodes filtered per pod"),
        ("API footprint", f"{row['resource_slices']} ResourceSlices, {row['api_bytes'] / 2**20:.1f} MiB, {row['devices_per_node']:g} devices per node"),
    ]
    if row.get("failure_reasons"):
        rows.append(("failures", str(row["failure_reasons"])))
    return rows


def _print_summary(row: dict[str, Any]) -> None:
    """A rich table on a terminal; plain aligned lines otherwise (a pipe, a file, a script),
    which keeps rich, a tenth of a small run's start, out of non-interactive runs."""
    rows = _summary_rows(row)
    if not sys.stdout.isatty():
        width = max(len(k) for k, _ in rows)
        lines = ["topodra sim run", *(f"{k:<{width}}  {v}".rstrip() for k, v in rows)]
        typer.echo("\n".join(lines))
        return
    from rich.console import Console
    from rich.table import Table

    t = Table(title="topodra sim run", show_header=False)
    t.add_column("figure", style="bold")
    t.add_column("value")
    for k, v in rows:
        t.add_row(k, v)
    Console().print(t)


@sim_app.command("sweep")
def sweep_cmd(
    nodes: Annotated[str, typer.Option("--nodes", help="Comma-separated node counts.")] = "100,1000,5000",
    cpus: Annotated[str, typer.Option("--cpus", help="Comma-separated CPUs per node.")] = "64,256,512",
    model: Annotated[str, typer.Option("--model", help="Comma-separated device models (cpu, core, grouped[:group]).")] = "cpu,core,grouped",
    workload: Annotated[str, typer.Option("--workload", "-w", help="Workload YAML file or built-in name.")] = "prototype",
    pods: Annotated[int, typer.Option("--pods", min=0, help="Pods per run (0: 2 per node, at most 10000).")] = 0,
    fill: Annotated[float, typer.Option("--fill", min=0.0, max=0.99, help="Background fill of every node.")] = 0.0,
    processes: Annotated[int, typer.Option("--processes", "-j", min=0, help="Worker processes (0: all cores).")] = 0,
    out: Annotated[Path, typer.Option("--out", "-o", help="Output directory (CSV, JSON, PNG plots, report.md).")] = Path("sim-sweep"),
    scheduler_cores: Annotated[int, typer.Option("--scheduler-cores", min=1, help="CPUs of the kube-scheduler host (Filter runs on min(16, this) workers).")] = 16,
    scoring: Annotated[str, typer.Option("--scoring", help="Among feasible nodes: kube-scheduler (the default profile's scores) or first (pack).")] = "kube-scheduler",
    cluster: Annotated[str | None, typer.Option("--cluster", help="Run the cells on a Dask distributed cluster: its scheduler address (tcp://host:8786), or local[:N] to start one here. Needs topodra[cluster].")] = None,
) -> None:
    """Run the simulator over nodes x CPUs x device models on all cores; write CSV/JSON, plots and a report."""
    import os

    from rich.console import Console

    from topodra.sim.costmodel import DEFAULT_COSTS
    from topodra.sim.sweep import SweepConfig, parse_models, run_sweep, sweep_points, write_outputs
    from topodra.sim.workload import WorkloadError, load_workload

    models = [m.strip() for m in model.split(",") if m.strip()]
    try:
        parse_models(models)
        load_workload(workload)
    except (ValueError, WorkloadError) as e:
        _fail(str(e))
    _output_dir(out)
    cfg = SweepConfig(
        nodes=_ints(nodes, "--nodes"),
        cpus=_ints(cpus, "--cpus"),
        models=models,
        workload=workload,
        pods=pods or None,
        fill=fill,
        processes=processes or os.cpu_count() or 1,
        scoring=scoring,
        cluster=cluster,
    )
    if scoring not in ("kube-scheduler", "first"):
        _fail(f"--scoring {scoring!r}: must be kube-scheduler or first")
    bad = [c for c in cfg.cpus if c % 16]
    if bad:
        _fail(f"--cpus {bad[0]}: must be a multiple of 16 (16-CPU L3 groups)")
    from topodra.sim.distributed import EngineError

    try:
        with _sweep_progress(len(sweep_points(cfg))) as progress:
            summaries = run_sweep(cfg, costs=replace(DEFAULT_COSTS, cores=scheduler_cores), progress=progress.cell, tick=progress.cluster)
    except (WorkloadError, EngineError) as e:
        _fail(str(e))
    files = write_outputs(summaries, out)
    Console().print(f"wrote {', '.join(str(f) for f in files)}")


class _SweepProgress:
    """A sweep's progress: a bar on a terminal (``bar``), else a line every few seconds on stderr."""

    def __init__(self, total: int, bar: Any = None) -> None:
        self.total, self.bar = total, bar
        self.task = bar.add_task("", total=total) if bar is not None else None
        self.piped = PipedProgress() if bar is None else None
        self.done = self.running = self.workers = 0
        self.last = ""

    def cell(self, s: Any) -> None:
        """A cell finished."""
        self.done += 1
        self.last = f"last {s.model} {s.cpus_per_node:g} CPUs x {s.nodes} nodes: p99 {s.predicted_p99_ms:.1f} ms"
        self._show()

    def cluster(self, c: Any) -> None:
        """A cluster's state (``topodra.sim.distributed.ClusterProgress``)."""
        self.running, self.workers = c.running, c.workers
        self._show()

    def _what(self) -> str:
        on = f"{self.running} running on {self.workers} workers" if self.workers else ""
        return "; ".join(x for x in (on, self.last) if x)

    def _show(self) -> None:
        if self.piped is not None:
            self.piped.say(lambda: f"sweep: {self.done} of {self.total} cells" + (f", {self._what()}" if self._what() else ""))
        else:
            self.bar.update(self.task, completed=self.done, description=self._what())


@contextmanager
def _sweep_progress(total: int) -> Iterator[_SweepProgress]:
    if not sys.stderr.isatty():
        yield _SweepProgress(total)
        return
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    with Progress(TextColumn("[bold]sweep"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(), TextColumn("{task.description}"), console=Console(stderr=True)) as bar:
        yield _SweepProgress(total, bar)


@sim_app.command("workloads")
def workloads_cmd() -> None:
    """List the built-in workloads."""
    from rich.console import Console
    from rich.table import Table

    from topodra.sim.workload import builtin_workloads, load_workload

    t = Table(title="built-in workloads")
    t.add_column("name")
    t.add_column("pods (models)")
    for name in builtin_workloads():
        wl = load_workload(name)
        kinds = ", ".join(
            f"{p['metadata']['name']}" + (f" ({p['metadata'].get('labels', {}).get('sim.topodra.io/model')})" if p["metadata"].get("labels") else "")
            for p in wl.pods
        )
        t.add_row(name, kinds)
    Console().print(t)


@sim_app.command("allocate")
def allocate_cmd(
    files: Annotated[list[Path], typer.Argument(help="YAML/JSON files with ResourceSlices, DeviceClasses, ResourceClaims and Nodes (kind: List too).")],
    node: Annotated[str, typer.Option("--node", help="Node to allocate on.")],
) -> None:
    """Allocate the claims in FILES on one node exactly as kube-scheduler would; print status.allocation.

    Exit codes: 0 allocated, 1 no allocation on this node, 2 bad input.
    """
    import yaml

    from topodra.sim.allocator import AllocationError, Allocator
    from topodra.sim.objects import ObjectError

    kinds: dict[str, list[dict[str, Any]]] = {}
    for d in _load(files):
        if isinstance(d.obj, dict):
            kinds.setdefault(str(d.obj.get("kind")), []).append(d.obj)
    claims = kinds.get("ResourceClaim", [])
    if not claims:
        _fail(f"no ResourceClaim in {', '.join(str(f) for f in files)}: nothing to allocate")
    nodes = {str((n.get("metadata") or {}).get("name")): n for n in kinds.get("Node", [])}
    slices = [sl.get("spec") or {} for sl in kinds.get("ResourceSlice", []) if isinstance(sl.get("spec"), dict)]
    named = set(nodes) | {str(sp["nodeName"]) for sp in slices if sp.get("nodeName")}
    any_node = any(sp.get(k) for sp in slices for k in ("allNodes", "nodeSelector", "perDeviceNodeSelection"))
    if node not in named and not any_node:
        _fail(f"--node {node}: no such node (the files name {', '.join(sorted(named)) or 'no node'})")
    try:
        alloc = Allocator(kinds.get("ResourceSlice", []), kinds.get("DeviceClass", []))
        result, stats = alloc.allocate_with_stats(nodes.get(node, node), claims)
    except (AllocationError, ObjectError) as e:
        _fail(str(e))
    if result is None:
        typer.echo(f"no allocation on node {node} (calls={stats.calls}, devices visited={stats.visits})")
        raise typer.Exit(1)
    for claim, a in zip(claims, result, strict=True):
        typer.echo(yaml.safe_dump({"claim": claim["metadata"]["name"], "status": {"allocation": a.to_api()}}, sort_keys=False))


_GATES_HELP = "The cluster's feature gates, e.g. DRANodeAllocatableResources=true (claimed CPUs count against the node's cpu); default: 1.36's."


def _gates(text: str) -> dict[str, bool]:
    from topodra.gates import FeatureGateError, parse_feature_gates

    try:
        return parse_feature_gates(text)
    except FeatureGateError as e:
        _fail(f"--feature-gates: {e}")


@sim_app.command("replay")
def replay_cmd(
    files: Annotated[list[Path], typer.Argument(help="Kubernetes objects in the order they happened (YAML/JSON, kind: List too); a deletion is the document {op: delete, kind: Pod, name: NAME}.")],
    output: Annotated[str, typer.Option("--output", "-o", help="yaml (each step with claims in the ResourceClaim status shape), json, or table.")] = "yaml",
    percentage: Annotated[int, typer.Option("--percentage-of-nodes-to-score", min=0, max=100, help="kube-scheduler's percentageOfNodesToScore (0: adaptive).")] = 0,
    no_eviction: Annotated[bool, typer.Option("--no-taint-eviction", help="kube-controller-manager without its device-taint-eviction-controller: NoExecute taints evict nothing.")] = False,
    feature_gates: Annotated[str, typer.Option("--feature-gates", help=_GATES_HELP)] = "",
) -> None:
    """Replay what happened in a cluster: every pod's node and allocation, or kube-scheduler's reason.

    Objects are replayed as they are read and steps printed as they happen (yaml, json), with
    progress on stderr. Exit codes: 0 every pod scheduled at the end, 1 some pod still pending,
    2 bad input or no Pod to schedule (the steps before it are printed).
    """
    from topodra.sim.replay import ReplayError
    from topodra.sim.replayio import StepWriter, replay_files
    from topodra.yamldocs import YamlFileError

    if output not in ("yaml", "json", "table"):
        _fail(f"--output {output!r}: must be yaml, json or table")
    gates = _gates(feature_gates)
    table: list[Any] = []
    writer = StepWriter(sys.stdout, output) if output != "table" else None
    written = [0]

    def on_steps(steps: Sequence[Any]) -> None:
        written[0] += len(steps)
        (writer.write if writer else table.extend)(steps)

    try:
        with _replay_progress() as progress:
            r, objects = replay_files(
                files,
                on_steps=on_steps,
                progress=progress,
                percentage_of_nodes_to_score=percentage or None,
                gates=gates,
                evictions=not no_eviction,
            )
    except (YamlFileError, ReplayError) as e:
        if writer:
            writer.close()
        _fail(str(e))
    if not objects:
        _fail(f"{', '.join(map(str, files))}: no Kubernetes object in it, nothing to replay")
    if not written[0]:
        if writer:
            writer.close()
        _fail(f"{', '.join(map(str, files))}: {objects} object(s) and no Pod among them, nothing to schedule")
    if writer:
        writer.close()
    else:
        _print_steps(table)
    if r.pending:
        raise typer.Exit(1)


@contextmanager
def _replay_progress() -> Iterator[Any]:
    """A progress bar over the input on a terminal, else a line every few seconds on stderr."""
    if not sys.stderr.isatty():
        piped = PipedProgress()
        yield lambda state: piped.say(state.line)
        return
    from rich.console import Console
    from rich.progress import BarColumn, DownloadColumn, Progress, TextColumn, TimeElapsedColumn

    with Progress(TextColumn("[bold]replay"), BarColumn(), DownloadColumn(), TextColumn("{task.description}"), TimeElapsedColumn(), console=Console(stderr=True), transient=True) as bar:
        task = bar.add_task("", total=None)

        def show(state: Any) -> None:
            bar.update(task, completed=state.read, total=state.total, description=f"{state.objects:,} objects, {state.pods:,} pods placed, {state.pending:,} pending")

        yield show


def _print_steps(steps: list[Any]) -> None:
    from rich.console import Console
    from rich.table import Table
    from rich.text import Text

    t = Table(title="topodra sim replay")
    for col in ("#", "op", "pod", "node", "claims / reason"):
        t.add_column(col, overflow="fold")
    for i, s in enumerate(steps, 1):
        if s.op == "still-pending":
            t.add_row(*(Text(x) for x in (str(i), s.op, ", ".join(s.pending), "", "")))
            continue
        what = s.failure if s.node is None and s.failure else "; ".join(
            f"{c.pod_claim}: {c.state or ','.join(c.devices) or 'unallocated'}" for c in s.claims
        )
        node = s.node or ("" if s.op == "delete" else "pending")
        t.add_row(*(Text(x) for x in (str(i), s.op + (" (tie)" if len(s.top) > 1 else ""), s.pod, node, what or "")))
    Console().print(t)


@sim_app.command("diff")
def diff_cmd(
    files: Annotated[list[Path], typer.Argument(help="The objects to replay, in order (as for `sim replay`).")],
    recorded: Annotated[Path, typer.Option("--recorded", "-r", help="What the cluster did: Pods and ResourceClaims read back from it (kubectl get -o yaml), or a step log with {steps: [...]}.")],
    output: Annotated[str, typer.Option("--output", "-o", help="table or json.")] = "table",
    percentage: Annotated[int, typer.Option("--percentage-of-nodes-to-score", min=0, max=100, help="kube-scheduler's percentageOfNodesToScore (0: adaptive).")] = 0,
    no_eviction: Annotated[bool, typer.Option("--no-taint-eviction", help="kube-controller-manager without its device-taint-eviction-controller: NoExecute taints evict nothing.")] = False,
    feature_gates: Annotated[str, typer.Option("--feature-gates", help=_GATES_HELP)] = "",
) -> None:
    """Replay FILES and compare every pod's node and allocation with a recording from a real cluster.

    Exit codes: 0 every step matches, 1 some mismatch, 2 bad input.
    """
    from topodra.sim.diff import diff_replay, load_recorded
    from topodra.sim.replay import ReplayError
    from topodra.yamldocs import YamlFileError

    if output not in ("table", "json"):
        _fail(f"--output {output!r}: must be table or json")
    gates = _gates(feature_gates)
    docs = _load(files)
    try:
        rec = load_recorded(recorded)
        report = diff_replay(
            [(d.obj, d.source) for d in docs], rec, percentage_of_nodes_to_score=percentage or None, gates=gates,
            evictions=not no_eviction,
        )
    except (YamlFileError, ReplayError) as e:
        _fail(str(e))
    if output == "json":
        typer.echo(json.dumps(report.as_dict(), indent=2))
    else:
        from rich.console import Console
        from rich.table import Table
        from rich.text import Text

        t = Table(title=f"topodra sim diff: {report.matches} match, {report.mismatches} mismatch")
        for col in ("step", "verdict", "recorded", "replayed"):
            t.add_column(col, overflow="fold")
        for row in report.rows:
            style = "green" if row.verdict in ("match", "tie", "random") else "red"
            verdict = row.verdict + (f" ({', '.join(row.differs or row.tied)})" if row.differs or row.tied else "")
            cells = (row.key, verdict, row.recorded, row.replayed if row.verdict != "match" else "=")
            t.add_row(*(Text(x) for x in cells), style=style)
        Console().print(t)
    if report.mismatches:
        raise typer.Exit(1)
