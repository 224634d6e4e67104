"""Run the benchmarks: ``python -m benchmarks [NAME ...] [--quick]``.

Each ``benchmarks/bench_*.py`` module has ``run(quick: bool) -> list[Result]``.
Results are printed as a table and written to ``benchmarks/out/results.json``.
"""

from __future__ import annotations

import argparse
import importlib
import json
import pkgutil
import sys
import time
from pathlib import Path

from rich.console import Console
from rich.table import Table

from benchmarks.common import Result

OUT = Path(__file__).parent / "out"


def main(argv: list[str] | None = None) -> int:
    names = sorted(m.name[len("bench_") :] for m in pkgutil.iter_modules([str(Path(__file__).parent)]) if m.name.startswith("bench_"))
    ap = argparse.ArgumentParser(prog="python -m benchmarks", description="Run topodra's benchmarks.")
    ap.add_argument("names", nargs="*", help=f"benchmarks to run (default: all): {', '.join(names)}")
    ap.add_argument("--quick", action="store_true", help="smaller sizes, for a smoke run")
    args = ap.parse_args(argv)
    chosen = args.names or names
    unknown = [n for n in chosen if n not in names]
    if unknown:
        ap.error(f"unknown benchmark(s): {', '.join(unknown)}; known: {', '.join(names)}")
    console = Console()
    wide = Console(width=max(console.width, 150))  # the results table reads badly when wrapped
    results: list[Result] = []
    for name in chosen:
        console.print(f"[bold]== {name}[/bold]")
        t0 = time.perf_counter()
        mod = importlib.import_module(f"benchmarks.bench_{name}")
        got: list[Result] = mod.run(quick=args.quick)
        for r in got:
            r.bench = name
        results.extend(got)
        console.print(f"   ({time.perf_counter() - t0:.1f} s)")
    table = Table(title="topodra benchmarks")
    for col in ("benchmark", "metric", "value", "unit", "goal", "met"):
        table.add_column(col)
    for r in results:
        met = "" if r.met is None else ("yes" if r.met else "NO")
        table.add_row(r.bench, r.name, f"{r.value:.4g}", r.unit, r.goal or "", met)
    wide.print(table)
    OUT.mkdir(exist_ok=True)
    (OUT / "results.json").write_text(json.dumps([r.as_dict() for r in results], indent=2))
    return 0 if all(r.met is not False for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
