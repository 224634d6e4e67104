"""Figures the docs quote come from code that runs here, so a change that moves them fails a test
instead of leaving the docs stale."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from benchmarks import bench_predicted

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def fresh() -> str:
    return bench_predicted.markdown_rows()


def test_the_predicted_figures_in_the_simulator_docs_are_what_the_code_gives(fresh: str) -> None:
    current = bench_predicted.table_in_doc(bench_predicted.DOC.read_text())
    assert current == fresh, "docs/simulator.md is stale: run python -m benchmarks.bench_predicted --write"


def test_a_moved_figure_is_caught_and_rewritten(fresh: str) -> None:
    text = bench_predicted.DOC.read_text()
    stale = re.sub(r"\| ([0-9.]+) ms", lambda m: f"| {float(m.group(1)) * 2:g} ms", fresh, count=1)
    assert stale != fresh
    stale_doc = bench_predicted.with_table(text, stale)
    assert bench_predicted.table_in_doc(stale_doc) == stale
    assert bench_predicted.table_in_doc(bench_predicted.with_table(stale_doc, fresh)) == fresh


def test_a_doc_without_the_block_is_an_error() -> None:
    with pytest.raises(ValueError, match="no <!-- figures:predicted -->"):
        bench_predicted.table_in_doc("# no table here")


def test_every_figures_row_names_the_command_that_produces_it() -> None:
    """Each row of a Figures table ends in a command: a benchmark that exists, or a topodra command."""
    benches = {p.stem.removeprefix("bench_") for p in (ROOT / "benchmarks").glob("bench_*.py")}
    for doc in sorted((ROOT / "docs").glob("*.md")):
        in_figures = False
        for line in doc.read_text().splitlines():
            if line.startswith("## "):
                in_figures = line.strip() == "## Figures"
            if not in_figures or not line.startswith("| ") or line.endswith("| command |"):
                continue
            command = line.rstrip(" |").rsplit("|", 1)[-1]
            named = re.findall(r"python -m benchmarks(?:\.bench_)? ?(\w+)?", command)
            assert named or "topodra " in command or "..." in command, f"{doc.name}: {line[:80]}"
            for name in filter(None, named):
                assert name in benches, f"{doc.name}: no benchmark {name!r}: {line[:80]}"
