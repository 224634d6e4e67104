"""`topodra topology`: tree, JSON and YAML output, fixtures and clear errors."""

from __future__ import annotations

import json
from pathlib import Path

import yaml
from typer.testing import CliRunner

from topodra.cli import app
from topodra.topology import read_topology
from topodra.topology.fixtures import unpacked_fixture
from topodra.topology.serialize import topology_from_dict

runner = CliRunner()
HYBRID = "20em64t-hybrid-1p6c2t+2ca4co1t"


def test_tree_shows_types_frequencies_and_memory() -> None:
    r = runner.invoke(app, ["topology", "--topology", f"fixture:{HYBRID}"])
    assert r.exit_code == 0, r.output
    assert "hybrid: 12 P-core, 8 E-core (from base-frequency)" in r.output
    assert "E-core · 1.4/3.9 GHz" in r.output
    assert "1.9/5.2 GHz" in r.output  # Turbo Boost Max 3.0 favoured core
    assert "NUMA node 0 · 31.0 GiB DRAM" in r.output


def test_tree_lists_offline_and_memory_only_nodes() -> None:
    r = runner.invoke(app, ["topology", "--topology", "fixture:16em64t-4s2c2t-offlines"])
    assert r.exit_code == 0, r.output
    assert "offline" in r.output
    assert "2,5,13-14" in r.output
    r = runner.invoke(app, ["topology", "--topology", "fixture:nvidiagpunumanodes"])
    assert r.exit_code == 0, r.output
    assert "Memory-only NUMA node 255" in r.output
    assert "HBM" in r.output
    assert "NUMA distances" in r.output


def test_json_round_trips_to_the_same_topology() -> None:
    r = runner.invoke(app, ["topology", "--topology", f"fixture:{HYBRID}", "--format", "json"])
    assert r.exit_code == 0, r.output
    data = json.loads(r.output)
    assert data["schema"] == 2
    assert {c["kind"] for c in data["cpus"]} == {0, 1}
    assert data["cpu_sets"]["online"] == "0-19"
    assert topology_from_dict(data) == read_topology(unpacked_fixture(HYBRID))


def test_yaml_output(tmp_path: Path) -> None:
    root = unpacked_fixture("2arm-2c")
    r = runner.invoke(app, ["topology", "--topology", str(root), "-f", "yaml"])
    assert r.exit_code == 0, r.output
    data = yaml.safe_load(r.output)
    assert data["summary"]["online_cpus"] == 2
    assert topology_from_dict(data) == read_topology(root)


def test_list_fixtures() -> None:
    r = runner.invoke(app, ["topology", "--list-fixtures"])
    assert r.exit_code == 0
    assert HYBRID in r.output.split()


def test_unknown_fixture_is_a_clear_error() -> None:
    r = runner.invoke(app, ["topology", "--topology", "fixture:no-such-machine"])
    assert r.exit_code == 1
    assert "'fixture:no-such-machine'" in r.output
    assert "no such fixture" in r.output
    assert "Traceback" not in r.output


def test_root_without_sysfs_is_a_clear_error(tmp_path: Path) -> None:
    r = runner.invoke(app, ["topology", "--topology", str(tmp_path)])
    assert r.exit_code == 1
    assert "not the root of a sysfs tree" in r.output
    assert "Traceback" not in r.output


def test_synthetic_spec_is_a_machine() -> None:
    r = runner.invoke(app, ["topology", "--topology", "2s1d1n1l2c2t", "-f", "json"])
    assert r.exit_code == 0, r.output
    assert len(json.loads(r.output)["cpus"]) == 8


def test_help_describes_options() -> None:
    r = runner.invoke(app, ["topology", "--help"])
    assert r.exit_code == 0
    for opt in ("--topology", "--format", "--list-fixtures"):
        assert opt in r.output
