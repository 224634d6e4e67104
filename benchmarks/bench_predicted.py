"""The simulator's predicted kube-scheduler figures that docs/simulator.md quotes, from the runs
that produce them.

Predicted times, CEL evaluations and slice sizes come from the cost model and seeded runs, so
they do not move with the machine's load: the same code gives the same table. The table in
docs/simulator.md sits between ``<!-- figures:predicted -->`` and ``<!-- /figures -->`` and is
this module's ``markdown_rows()``; ``tests/test_docs_figures.py`` fails when the two differ, and
``python -m benchmarks.bench_predicted --write`` rewrites it.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from benchmarks.common import Result
from topodra.sim.run import RunConfig, RunSummary, run_simulation

DOC = Path(__file__).resolve().parents[1] / "docs" / "simulator.md"
BEGIN, END = "<!-- figures:predicted -->", "<!-- /figures -->"
SHAPE = {"nodes": 1000, "machines": {"256": 1.0}}


@dataclass(frozen=True)
class Row:
    """One row: what it shows, the runs (one per column value) and how a run's figure reads."""

    label: str
    runs: tuple[RunConfig, ...]
    figure: Callable[[RunSummary], str]
    command: str


def _cfg(workload: str, model: str, **kw: str) -> RunConfig:
    return RunConfig(workload=workload, model=model, **SHAPE, **kw)  # type: ignore[arg-type]


def _p50(s: RunSummary) -> str:
    return f"{s.predicted_p50_ms:.3g} ms"


def _cel_and_slices(s: RunSummary) -> str:
    return f"{s.predicted_p50_ms:.3g} ms, {s.cel_evals / max(1, s.pods):,.0f} CEL evaluations per pod, {s.api_bytes / 2**20:.3g} MiB of slices"


ROWS: tuple[Row, ...] = (
    Row("`cpus-8`, per-CPU devices", (_cfg("cpus-8", "cpu"),), _cel_and_slices,
        "`topodra sim run --nodes 1000 --cpus 256 --workload cpus-8 --model cpu`"),
    Row("`cpus-8`, per-core devices", (_cfg("cpus-8", "core"),), _cel_and_slices, "`... --model core`"),
    Row("`cpus-8`, grouped devices", (_cfg("cpus-8", "grouped"),), _cel_and_slices, "`... --model grouped`"),
    Row("`cpus-8`, per-CPU devices in CPU-id order", (_cfg("cpus-8", "cpu", order="cpu-id"),), _p50,
        "`... --model cpu --order cpu-id`"),
    Row("`l3-8`, per-CPU / per-core / grouped devices",
        (_cfg("l3-8", "cpu"), _cfg("l3-8", "core"), _cfg("l3-8", "grouped")), _p50,
        "`topodra sim run --nodes 1000 --cpus 256 --workload l3-8 --model cpu` (`core`, `grouped`)"),
    Row("`l3-8`, per-CPU devices in CPU-id order", (_cfg("l3-8", "cpu", order="cpu-id"),), _p50,
        "`... --model cpu --order cpu-id`"),
    Row("`l3-8`, per-core devices packed (`--scoring first`)", (_cfg("l3-8", "core", scoring="first"),), _p50,
        "`... --model core --scoring first`"),
)


def markdown_rows(rows: Sequence[Row] = ROWS) -> str:
    """The table, as docs/simulator.md holds it: figure, predicted p50 per pod, command."""
    lines = ["| 1,000 nodes x 256 CPUs | predicted p50 per pod | command |", "|---|---|---|"]
    for row in rows:
        values = " / ".join(row.figure(run_simulation(cfg)[0]) for cfg in row.runs)
        lines.append(f"| {row.label} | {values} | {row.command} |")
    return "\n".join(lines)


def _block(text: str) -> tuple[int, int]:
    start, end = text.find(BEGIN), text.find(END)
    if start < 0 or end < start:
        raise ValueError(f"{DOC.name}: no {BEGIN} ... {END} block")
    return start + len(BEGIN), end


def table_in_doc(text: str) -> str:
    """The table between the markers of docs/simulator.md; ValueError when the markers are missing."""
    start, end = _block(text)
    return text[start:end].strip()


def with_table(text: str, table: str) -> str:
    """The doc's text with the table between the markers replaced."""
    start, end = _block(text)
    return f"{text[:start]}\n{table}\n{text[end:]}"


def run(quick: bool) -> list[Result]:
    """Report whether the doc's table is current (a benchmark run prints it too)."""
    fresh = markdown_rows(ROWS[:1] if quick else ROWS)
    print(fresh)
    current = table_in_doc(DOC.read_text())
    same = quick or fresh == current
    return [Result("docs_table_current", float(same), "bool", "docs/simulator.md equals this run", same)]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m benchmarks.bench_predicted", description=__doc__.splitlines()[0])
    ap.add_argument("--write", action="store_true", help="rewrite the table in docs/simulator.md")
    args = ap.parse_args(argv)
    fresh = markdown_rows()
    text = DOC.read_text()
    current = table_in_doc(text)
    if args.write:
        DOC.write_text(with_table(text, fresh))
    print(fresh)
    return 0 if args.write or fresh == current else 1


if __name__ == "__main__":
    sys.exit(main())
