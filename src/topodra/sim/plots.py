"""The sweep's plots: what each one shows is computed here as plain data (``Series``), then drawn.

Rules every plot follows, so that a reader can compare them at a glance:

- one colour per device model, the same in every plot (``model_colour``);
- one line style per node size or cluster size (``line_style``), in numeric order;
- legends sorted by number, not as strings ("16, 64, 256 CPUs", never "16, 256, 64");
- a cell where some pods were unschedulable is drawn with a hollow red-edged marker and the
  legend says so, since its latency is measured over fewer pods;
- bars share a log scale and carry their value, so a small bar beside a large one stays visible;
- every plot is written as PNG and as SVG.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from topodra.sim.run import RunSummary

__all__ = ["Series", "model_colour", "line_style", "latency_vs_nodes", "latency_vs_cpus", "per_model_bars", "write_plots"]

_PALETTE = ("#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b", "#17becf")
_KNOWN_MODELS = ("cpu", "core", "grouped")
_STYLES = ("-", "--", "-.", ":")
UNSCHEDULABLE_EDGE = "#d00000"


@dataclass(frozen=True)
class Series:
    """One line of a plot: its legend text, colour, style and points (x, y, some pods unschedulable)."""

    label: str
    colour: str
    style: str
    points: tuple[tuple[float, float, bool], ...]


def model_colour(model: str) -> str:
    """The colour of a device model; the built-in models keep theirs whatever else a sweep has."""
    base = model.replace(":", "/").split("/")[0]
    if base in _KNOWN_MODELS:
        return _PALETTE[_KNOWN_MODELS.index(base)]
    return _PALETTE[len(_KNOWN_MODELS) + sum(map(ord, model)) % (len(_PALETTE) - len(_KNOWN_MODELS))]


def line_style(value: float, values: Sequence[float]) -> str:
    """The line style of one size among the sizes a plot shows, in numeric order."""
    return _STYLES[sorted(set(values)).index(value) % len(_STYLES)]


def _unschedulable(s: RunSummary) -> bool:
    return s.failed_unschedulable > 0


def _series(summaries: Sequence[RunSummary], x: Callable[[RunSummary], float], size: Callable[[RunSummary], float],
            size_label: Callable[[float], str], y: Callable[[RunSummary], float]) -> list[Series]:
    groups: dict[tuple[str, float], list[RunSummary]] = {}
    for s in summaries:
        groups.setdefault((s.model, size(s)), []).append(s)
    sizes = [k[1] for k in groups]
    out = []
    for model, sz in sorted(groups, key=lambda k: (k[0], k[1])):
        ss = sorted(groups[(model, sz)], key=x)
        points = tuple((x(s), y(s), _unschedulable(s)) for s in ss)
        out.append(Series(f"{model}, {size_label(sz)}", model_colour(model), line_style(sz, sizes), points))
    return out


def latency_vs_nodes(summaries: Sequence[RunSummary]) -> list[Series]:
    """Predicted p99 against cluster size: one line per (model, CPUs per node)."""
    return _series(summaries, lambda s: s.nodes, lambda s: s.cpus_per_node, lambda c: f"{c:g} CPUs", lambda s: s.predicted_p99_ms)


def latency_vs_cpus(summaries: Sequence[RunSummary]) -> list[Series]:
    """Predicted p99 against node size: one line per (model, nodes)."""
    return _series(summaries, lambda s: s.cpus_per_node, lambda s: s.nodes, lambda n: f"{n:g} nodes", lambda s: s.predicted_p99_ms)


def per_model_bars(summaries: Sequence[RunSummary]) -> tuple[str, list[tuple[str, list[tuple[str, float]]]]]:
    """At each model's largest shape: (title, [(metric, [(model, value)])])."""
    biggest: dict[str, RunSummary] = {}
    for s in summaries:
        cur = biggest.get(s.model)
        if cur is None or (s.nodes, s.cpus_per_node) > (cur.nodes, cur.cpus_per_node):
            biggest[s.model] = s
    models = sorted(biggest)
    if not models:
        return "", []
    metrics: list[tuple[str, Callable[[RunSummary], float]]] = [
        ("predicted p99 (ms)", lambda s: s.predicted_p99_ms),
        ("CEL evaluations per pod", lambda s: s.cel_evals / max(1, s.pods)),
        ("ResourceSlice KiB per node", lambda s: s.api_bytes / 1024 / max(1, s.nodes)),
    ]
    shapes = sorted({(biggest[m].nodes, biggest[m].cpus_per_node) for m in models})
    title = "Per device model at " + ", ".join(f"{n} nodes x {c:g} CPUs" for n, c in shapes)
    return title, [(name, [(m, f(biggest[m])) for m in models]) for name, f in metrics]


def _save(fig: Any, out: Path, stem: str) -> list[Path]:
    fig.tight_layout()
    paths = [out / f"{stem}.png", out / f"{stem}.svg"]
    fig.savefig(paths[0], dpi=110)
    fig.savefig(paths[1])
    return paths


def _draw_lines(ax: Any, series: Sequence[Series]) -> None:
    marked = False
    for s in series:
        xs = [p[0] for p in s.points]
        ys = [p[1] for p in s.points]
        ax.plot(xs, ys, color=s.colour, linestyle=s.style, marker="o", label=s.label)
        bad = [(p[0], p[1]) for p in s.points if p[2]]
        if bad:
            marked = True
            ax.plot([b[0] for b in bad], [b[1] for b in bad], linestyle="none", marker="o", markersize=11,
                    markerfacecolor="none", markeredgecolor=UNSCHEDULABLE_EDGE, markeredgewidth=1.5)
    if marked:
        ax.plot([], [], linestyle="none", marker="o", markersize=11, markerfacecolor="none",
                markeredgecolor=UNSCHEDULABLE_EDGE, label="some pods unschedulable")
    ax.set_yscale("log")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=7)


def write_plots(summaries: Sequence[RunSummary], out: Path) -> list[Path]:
    """latency_vs_nodes, latency_vs_cpus and per_model, each as PNG and SVG; returns the files."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    files: list[Path] = []
    for stem, series, xlabel, title, logx in (
        ("latency_vs_nodes", latency_vs_nodes(summaries), "nodes", "Scheduling latency vs cluster size", True),
        ("latency_vs_cpus", latency_vs_cpus(summaries), "CPUs per node", "Scheduling latency vs node size", True),
    ):
        fig, ax = plt.subplots(figsize=(8, 5))
        _draw_lines(ax, series)
        if logx:
            ax.set_xscale("log")
        ax.set_xlabel(xlabel)
        ax.set_ylabel("predicted kube-scheduler p99 per pod (ms)")
        ax.set_title(title)
        files += _save(fig, out, stem)
        plt.close(fig)
    title, metrics = per_model_bars(summaries)
    if metrics:
        fig, axes = plt.subplots(1, len(metrics), figsize=(11, 4))
        for ax, (name, bars) in zip(axes, metrics, strict=True):
            drawn = ax.bar([m for m, _ in bars], [max(v, 1e-3) for _, v in bars], color=[model_colour(m) for m, _ in bars])
            ax.bar_label(drawn, labels=[f"{v:.3g}" for _, v in bars], fontsize=8)
            ax.set_yscale("log")
            ax.set_title(name, fontsize=9)
            ax.tick_params(axis="x", labelsize=8)
        fig.suptitle(title, fontsize=10)
        files += _save(fig, out, "per_model")
        plt.close(fig)
    return files
