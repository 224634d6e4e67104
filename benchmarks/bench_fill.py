"""Ten times the cluster, every node filled differently: how time and memory grow with nodes.

N nodes x 256 per-CPU devices, 2N pods of the ``p-cores`` workload, every node half full
with one of N random fill patterns (``--fill 0.5 --fill-patterns N``), each size in a fresh
interpreter (its own peak RSS). Two peers measured in the same run: the same filled cluster
with the first-fit shortcut off (``Scheduler.first_fit = False``: the allocator for every
Filter evaluation, as before it), and the same cluster with empty nodes (what filling every
node differently costs). Goals (issue 14 item 6): 50,000 nodes in <= 120 s filled
differently, <= 60 s and <= 4 GiB empty.
Writes ``benchmarks/out/sim_fill.png``.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from benchmarks.bench_sim import _scale_point
from benchmarks.common import Result

GOAL_NODES = 50_000


def run(quick: bool) -> list[Result]:
    sizes = (500, 1_000, 2_000) if quick else (5_000, 10_000, 20_000, 50_000)
    rows: list[tuple[int, dict[str, float], dict[str, float]]] = []
    general: dict[int, dict[str, float]] = {}
    print(
        f"\n{'nodes':>8}{'pods':>9}  {'filled: total s':>16}{'build s':>9}{'sched s':>9}{'RSS MiB':>9}"
        f"  {'no first fit: total s':>22}{'sched s':>9}{'RSS MiB':>9}  {'empty: total s':>15}{'RSS MiB':>9}"
    )
    for n in sizes:
        filled = _scale_point(n, 2 * n, fill=0.5, patterns=n)
        g = general[n] = _scale_point(n, 2 * n, fill=0.5, patterns=n, first_fit=False)
        empty = _scale_point(n, 2 * n)
        rows.append((n, filled, empty))
        print(
            f"{n:>8}{2 * n:>9}  {filled['total']:>16.1f}{filled['build']:>9.1f}{filled['sim']:>9.1f}{filled['rss_mib']:>9.0f}"
            f"  {g['total']:>22.1f}{g['sim']:>9.1f}{g['rss_mib']:>9.0f}  {empty['total']:>15.1f}{empty['rss_mib']:>9.0f}"
        )
    out: list[Result] = []
    for n, f, e in rows:
        g = general[n]
        out.append(
            Result(
                f"fill {n}x256 filled differently: scheduling with first fit vs the allocator for every Filter",
                g["sim"] / f["sim"],
                "x",
                note=f"scheduling {f['sim']:.1f} s vs {g['sim']:.1f} s (total {f['total']:.1f} s vs {g['total']:.1f} s, peak RSS {f['rss_mib']:.0f} vs {g['rss_mib']:.0f} MiB) in the same run",
            )
        )
        at_goal = n == GOAL_NODES
        out.append(
            Result(
                f"fill {n}x256 filled differently, {2 * n} pods: total wall",
                f["total"],
                "s",
                goal="<= 120 s" if at_goal else None,
                met=f["total"] <= 120 if at_goal else None,
                note=f"build {f['build']:.1f} s, scheduling {f['sim']:.1f} s; {f['total'] / e['total']:.1f}x the empty cluster ({e['total']:.1f} s) in the same run",
            )
        )
        out.append(
            Result(
                f"fill {n}x256 filled differently: peak RSS",
                f["rss_mib"],
                "MiB",
                goal="<= 4096 MiB" if at_goal else None,
                met=f["rss_mib"] <= 4096 if at_goal else None,
                note=f"{f['rss_mib'] / e['rss_mib']:.1f}x the empty cluster ({e['rss_mib']:.0f} MiB)",
            )
        )
        out.append(
            Result(
                f"fill {n}x256 empty, {2 * n} pods: total wall (peer)",
                e["total"],
                "s",
                goal="<= 60 s" if at_goal else None,
                met=e["total"] <= 60 if at_goal else None,
                note=f"build {e['build']:.1f} s, scheduling {e['sim']:.1f} s, peak RSS {e['rss_mib']:.0f} MiB",
            )
        )
    (n0, f0, e0), (n1, f1, e1) = rows[0], rows[-1]
    grow = math.log(n1 / n0)
    out.append(Result("fill: filled time grows as nodes^k", math.log(f1["total"] / f0["total"]) / grow, "k", note=f"{n0} -> {n1} nodes, pods = 2 x nodes; build as nodes^{math.log(f1['build'] / f0['build']) / grow:.2f}"))
    out.append(Result("fill: filled peak RSS grows as nodes^k", math.log(f1["rss_mib"] / f0["rss_mib"]) / grow, "k", note=f"empty: nodes^{math.log(e1['rss_mib'] / e0['rss_mib']) / grow:.2f}"))
    _plot(rows)
    return out


def _plot(rows: list[tuple[int, dict[str, float], dict[str, float]]]) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (a, b) = plt.subplots(1, 2, figsize=(10, 4))
    nodes = [n for n, _, _ in rows]
    series: list[tuple[str, str, Any]] = [
        ("filled differently: total", "s-", [f["total"] for _, f, _ in rows]),
        ("filled differently: build", "s:", [f["build"] for _, f, _ in rows]),
        ("empty nodes: total", "o-", [e["total"] for _, _, e in rows]),
    ]
    for label, style, ys in series:
        a.plot(nodes, ys, style, label=label)
    b.plot(nodes, [f["rss_mib"] for _, f, _ in rows], "s-", label="filled differently")
    b.plot(nodes, [e["rss_mib"] for _, _, e in rows], "o-", label="empty nodes")
    for ax, name in ((a, "seconds"), (b, "peak RSS (MiB)")):
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel("nodes (256 per-CPU devices each, 2 pods per node)")
        ax.set_ylabel(name)
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=8)
    fig.tight_layout()
    out = Path(__file__).parent / "out"
    out.mkdir(exist_ok=True)
    fig.savefig(out / "sim_fill.png", dpi=100)
    plt.close(fig)
