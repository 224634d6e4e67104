"""Bad YAML and bad scenarios give a message with the file and line, never a traceback."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from topodra.cli import app
from topodra.cpuset import CPUSet
from topodra.playground.manifests import ManifestError, parse_manifests
from topodra.playground.scenario import ScenarioError, load_scenario
from topodra.topology.synthetic import synthetic_topology


def test_yaml_syntax_error_names_file_line_column(tmp_path: Path) -> None:
    f = tmp_path / "bad.yaml"
    f.write_text("apiVersion: v1\nkind: Pod\nmetadata:\n  name: x\n  labels: {a: b\n")
    with pytest.raises(ScenarioError, match=r"bad\.yaml:\d+:\d+: invalid YAML"):
        load_scenario(f)


def test_document_without_kind_names_its_line() -> None:
    text = "apiVersion: v1\nkind: Pod\nmetadata: {name: a}\n---\n# second\napiVersion: v1\nmetadata: {name: b}\n"
    with pytest.raises(ManifestError, match=r"in\.yaml:6: the object has no kind"):
        parse_manifests(text, "in.yaml")


def test_non_mapping_document() -> None:
    with pytest.raises(ManifestError, match=r"x\.yaml:1: expected a Kubernetes object"):
        parse_manifests("- a\n- b\n", "x.yaml")


def test_scenario_unknown_keys_and_checks(tmp_path: Path) -> None:
    f = tmp_path / "s.yaml"
    f.write_text("steps:\n- title: x\n  aply: []\n")
    with pytest.raises(ScenarioError, match=r"s\.yaml: step 1: unknown key\(s\) aply"):
        load_scenario(f)
    f.write_text("steps:\n- expect:\n    a/b: {cpuz: 1}\n")
    with pytest.raises(ScenarioError, match="unknown check"):
        load_scenario(f)
    f.write_text("steps:\n- expect:\n    a/b: {cpus: '1-'}\n")
    with pytest.raises(ScenarioError, match="invalid CPU list"):
        load_scenario(f)


def test_scenario_isolate_and_isolated_check(tmp_path: Path) -> None:
    f = tmp_path / "s.yaml"
    f.write_text("isolate: -1\nsteps: []\n")
    with pytest.raises(ScenarioError, match="isolate must be a whole number of cores, got -1"):
        load_scenario(f)
    f.write_text("steps:\n- expect:\n    a/b: {isolated: maybe}\n")
    with pytest.raises(ScenarioError, match=r"expect\[a/b\]\.isolated must be true or false, got 'maybe'"):
        load_scenario(f)
    f.write_text("isolate: 2\nsteps: []\n")
    sc = load_scenario(f)
    topo = synthetic_topology("1s1d1n1l4c2t")  # cores (0,4) (1,5) (2,6) (3,7)
    assert sc.machine(topo).isolated == CPUSet.parse("2-3,6-7")  # the last two cores
    assert sc.unmet(synthetic_topology("1s2c2t")) == "more than 2 cores to isolate (it has 2)"


def test_cli_reports_bad_yaml_cleanly(tmp_path: Path) -> None:
    f = tmp_path / "broken.yaml"
    f.write_text("kind: Pod\napiVersion: v1\nmetadata:\n\tname: x\n")
    result = CliRunner().invoke(app, ["playground", str(f)])
    assert result.exit_code == 2
    assert "broken.yaml:4" in result.output
    assert "Traceback" not in result.output


def test_cli_unknown_kind_is_a_clear_error(tmp_path: Path) -> None:
    f = tmp_path / "svc.yaml"
    f.write_text("apiVersion: v1\nkind: Service\nmetadata: {name: s}\n")
    result = CliRunner().invoke(app, ["playground", str(f), "--topology", "synthetic:1s2c1t"])
    assert result.exit_code == 1
    assert "'Service'" in result.output
    assert "not supported by the playground" in result.output
