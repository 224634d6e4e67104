"""The sweep's plots: colours per model, line styles per size, numeric legends, unschedulable cells
marked, log-scaled labelled bars, PNG and SVG."""

from __future__ import annotations

import dataclasses
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from topodra.sim.plots import (
    latency_vs_cpus,
    latency_vs_nodes,
    line_style,
    model_colour,
    per_model_bars,
    write_plots,
)
from topodra.sim.run import RunSummary

_FIELDS = {f.name: f for f in dataclasses.fields(RunSummary)}


def _summary(model: str, nodes: int, cpus: float, p99: float, unschedulable: int = 0, cel: int = 100) -> RunSummary:
    values: dict[str, object] = {}
    for name, f in _FIELDS.items():
        if f.default is not dataclasses.MISSING or f.default_factory is not dataclasses.MISSING:
            continue
        values[name] = "x" if f.type in ("str", str) else 0
    values.update(model=model, nodes=nodes, cpus_per_node=cpus, predicted_p99_ms=p99, failed_unschedulable=unschedulable,
                  pods=10, cel_evals=cel, api_bytes=4096 * nodes, e2e_bound_by="cpu", machines="m", workload="w")
    return RunSummary(**values)  # type: ignore[arg-type]


SWEEP = [_summary(m, n, c, p99=n * c / 1000, unschedulable=(1 if (m, n, c) == ("cpu", 1000, 256) else 0))
         for m in ("cpu", "grouped/numa") for n in (10, 1000, 100) for c in (16, 256, 64)]


def test_legends_sort_by_number_not_as_strings() -> None:
    labels = [s.label for s in latency_vs_nodes(SWEEP)]
    assert labels[:3] == ["cpu, 16 CPUs", "cpu, 64 CPUs", "cpu, 256 CPUs"]
    assert [s.label for s in latency_vs_cpus(SWEEP)][:3] == ["cpu, 10 nodes", "cpu, 100 nodes", "cpu, 1000 nodes"]


def test_one_colour_per_model_and_one_style_per_size() -> None:
    series = latency_vs_nodes(SWEEP)
    assert {s.colour for s in series if s.label.startswith("cpu,")} == {model_colour("cpu")}
    assert model_colour("cpu") != model_colour("grouped/numa")
    assert model_colour("grouped/numa") == model_colour("grouped:l3")
    styles = {s.label.split(", ")[1]: s.style for s in series}
    assert len(set(styles.values())) == 3
    assert line_style(16, [256, 16, 64]) == line_style(16, [16])


def test_points_run_left_to_right_and_unschedulable_cells_are_flagged() -> None:
    cpu256 = next(s for s in latency_vs_nodes(SWEEP) if s.label == "cpu, 256 CPUs")
    assert [p[0] for p in cpu256.points] == [10, 100, 1000]
    assert [p[2] for p in cpu256.points] == [False, False, True]


def test_per_model_bars_name_the_shape_of_every_model() -> None:
    title, metrics = per_model_bars(SWEEP)
    assert "1000 nodes x 256 CPUs" in title
    assert [m for m, _ in metrics[0][1]] == ["cpu", "grouped/numa"]


@pytest.fixture(scope="module")
def written(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[Path]]:
    out = tmp_path_factory.mktemp("plots")
    return out, write_plots(SWEEP, out)


def test_every_plot_is_written_as_png_and_svg(written: tuple[Path, list[Path]]) -> None:
    out, files = written
    stems = {"latency_vs_nodes", "latency_vs_cpus", "per_model"}
    assert {f.name for f in files} == {f"{s}.{e}" for s in stems for e in ("png", "svg")}
    for s in stems:
        assert (out / f"{s}.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
        assert ET.parse(out / f"{s}.svg").getroot().tag.endswith("svg")


def test_bars_carry_their_values_and_the_unschedulable_mark_is_in_the_legend(written: tuple[Path, list[Path]]) -> None:
    out, _ = written
    bars = (out / "per_model.svg").read_text()
    _, metrics = per_model_bars(SWEEP)
    for _, values in metrics:
        for _, v in values:
            assert f"<!-- {v:.3g} -->" in bars  # matplotlib writes each text as a comment beside its paths
    assert "some pods unschedulable" in (out / "latency_vs_nodes.svg").read_text()
