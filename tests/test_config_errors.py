"""The agent's own configuration file works wherever a command takes ``--config``, and every
configuration error everywhere reads ``FILE: key.path: what is wrong (got VALUE)``: a misspelt key
is an ``unknown key`` at any depth, and no raw pydantic text or URL reaches the user."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from topodra.cli import app

ROOT = Path(__file__).resolve().parents[1]
LINE = re.compile(r"error: (?P<file>\S+): (?P<path>[\w.\[\]]+|\(top level\)): (?P<what>.+)")


def _shipped_config(tmp_path: Path) -> Path:
    """The configuration the DaemonSet runs with (deploy/manifests/topodra.yaml's ConfigMap)."""
    docs = list(yaml.safe_load_all((ROOT / "deploy" / "manifests" / "topodra.yaml").read_text()))
    text = next(d["data"]["config.yaml"] for d in docs if d and d.get("kind") == "ConfigMap")
    path = tmp_path / "config.yaml"
    path.write_text(text)
    path.chmod(0o644)
    return path


def _run(*argv: str) -> tuple[int, str]:
    r = CliRunner().invoke(app, list(argv), env={"COLUMNS": "300"})
    assert r.exception is None or isinstance(r.exception, SystemExit), repr(r.exception)
    return r.exit_code, r.output


def test_the_agents_own_file_is_taken_by_policy_and_dra_commands(tmp_path: Path) -> None:
    config = _shipped_config(tmp_path)
    code, out = _run("policy", "pools", "--config", str(config), "--topology", "1s4c2t")
    assert code == 0, out
    assert "reserved" in out
    config.write_text(config.read_text().replace("model: cpu", "model: core"))
    code, out = _run("dra", "devices", "--config", str(config), "--topology", "1s4c2t", "-f", "json")
    assert code == 0, out
    assert '"core3"' in out  # the file's devices.model is used


BAD = """\
nodeNmae: n1
devices:
  modle: x
  model: cpux
policy:
  reservedCPU: "0"
nri:
  sockt: /x
hotplug:
  interval: -1
"""

EXPECTED = [
    ("policy.reservedCPU", "unknown key; did you mean reservedCPUs? (got '0')"),
    ("devices.model", "must be 'cpu', 'core', 'core-or-thread' or 'grouped' (got 'cpux')"),
    ("devices.modle", "unknown key; did you mean model? (got 'x')"),
    ("nri.sockt", "unknown key; did you mean socket? (got '/x')"),
    ("hotplug.interval", "must be greater than 0 (got -1)"),
    ("nodeNmae", "unknown key; did you mean nodeName? (got 'n1')"),
]


@pytest.mark.parametrize(
    "argv",
    [
        ["agent", "--check", "--config", "{f}"],
        ["policy", "pools", "--topology", "1s2c1t", "--config", "{f}"],
        ["dra", "devices", "--topology", "1s2c1t", "--config", "{f}"],
    ],
    ids=["agent", "policy", "dra"],
)
def test_one_wording_for_every_error_at_every_depth(tmp_path: Path, argv: list[str]) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text(BAD)
    bad.chmod(0o644)
    code, out = _run(*[a.format(f=bad) for a in argv])
    assert code != 0
    for raw in ("pydantic", "http", "validation error"):
        assert raw not in out.lower()
    lines = [LINE.fullmatch(line) for line in out.splitlines()]
    assert all(lines), out
    assert [(m["path"], m["what"]) for m in lines if m] == EXPECTED
    assert {m["file"] for m in lines if m} == {str(bad)}


@pytest.mark.parametrize(
    ("argv", "text", "line"),
    [
        (["policy", "pools", "--topology", "1s2c1t"], "reservedCPU: 1\n", "{f}: reservedCPU: unknown key; did you mean reservedCPUs? (got 1)"),
        (["dra", "devices", "--topology", "1s2c1t"], "groupBy: nope\n", "{f}: groupBy: must be 'numa', 'l3', 'socket' or 'machine' (got 'nope')"),
        (["dra", "devices", "--topology", "1s2c1t"], "- model\n", "{f}: (top level): must be a mapping of device model settings (got list)"),
        (["policy", "pools", "--topology", "1s2c1t"], "policy: [1]\n", "{f}: policy: must be a mapping of policy settings (got list)"),
    ],
)
def test_a_section_file_alone_reads_the_same(tmp_path: Path, argv: list[str], text: str, line: str) -> None:
    f = tmp_path / "section.yaml"
    f.write_text(text)
    code, out = _run(*argv, "--config", str(f))
    assert code != 0
    assert out.strip() == "error: " + line.format(f=f)


def test_a_workloads_inline_config_names_the_workload(tmp_path: Path) -> None:
    w = tmp_path / "w.yaml"
    w.write_text("config: {pinCPU: perhaps}\ncontainers: [{name: a, cpu: '1'}]\n")
    code, out = _run("policy", "place", str(w), "--topology", "1s2c1t")
    assert code != 0
    assert out.strip().startswith(f"error: {w}: config.pinCPU: must be a valid boolean"), out
    assert out.strip().endswith("(got 'perhaps')")


def test_a_sections_own_check_names_the_key_and_shows_its_value(tmp_path: Path) -> None:
    """The device model's checks ("sharedFloor must be ..., got -1") read as every other error:
    the key's path, what is wrong, and that key's value rather than the whole section."""
    config = tmp_path / "agent.yaml"
    config.write_text("devices: {model: cpu, sharedFloor: -1}\n")
    code, out = _run("agent", "--check", "--config", str(config))
    assert code == 2
    assert out.strip().splitlines()[-1] == f"error: {config}: devices.sharedFloor: must be a whole number >= 0 (got -1)"
    config.write_text("devices: {taints: {isolated: Bogus}}\n")
    code, out = _run("agent", "--check", "--config", str(config))
    assert code == 2
    assert out.strip().splitlines()[-1] == (
        f"error: {config}: devices.taints.isolated: must be one of NoSchedule, NoExecute, None, Withdraw, Untainted (got 'Bogus')"
    )
