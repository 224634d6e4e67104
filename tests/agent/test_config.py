"""The agent's configuration: defaults, camelCase keys, and errors that name file, field and value."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from topodra.agent.config import ConfigError, load_config, parse_config
from topodra.cli import app
from topodra.cpuset import CPUSet


def test_defaults_and_keys() -> None:
    cfg = parse_config({"nodeName": "n1", "policy": {"reservedCPUs": "0-1"}, "nri": {"pluginIndex": "10"}})
    assert cfg.node_name == "n1"
    assert cfg.policy.reserved_cpus == CPUSet([0, 1])
    assert cfg.nri.plugin_index == "10"
    assert cfg.kubelet_root == Path("/var/lib/kubelet")
    assert cfg.checkpoint_path == Path("/var/lib/topodra/dra-checkpoint.json")


@pytest.mark.parametrize(
    ("data", "fragment"),
    [
        ({"nri": {"pluginIndex": "1"}}, "nri.pluginIndex"),
        ({"nodeName": "Bad_Name"}, "nodeName"),
        ({"metricsAddress": "nowhere"}, "metricsAddress"),
        ({"policy": {"reservedCPUs": "0-"}}, "policy.reservedCPUs"),
        ({"devices": {"model": "socket"}}, "devices.model"),
        ({"unknownKey": 1}, "unknownKey"),
        ({"dra": {"enabled": "perhaps"}}, "dra.enabled"),
    ],
)
def test_errors_name_the_field(data: dict[str, object], fragment: str) -> None:
    with pytest.raises(ConfigError) as err:
        parse_config({"nodeName": "n", **data}, "cfg.yaml")
    assert "cfg.yaml" in str(err.value)
    assert fragment in str(err.value)


def test_file_errors(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="cannot read"):
        load_config(tmp_path / "missing.yaml")
    bad = tmp_path / "bad.yaml"
    bad.write_text("policy:\n  reservedCPUs: [1,\n")
    with pytest.raises(ConfigError, match=r"bad\.yaml:\d+:\d+"):
        load_config(bad)
    bad.write_text("- a list\n")
    with pytest.raises(ConfigError, match="expected a mapping"):
        load_config(bad)


def test_agent_check_command(tmp_path: Path) -> None:
    cfg = tmp_path / "c.yaml"
    cfg.write_text("nodeName: n1\ntopology: synthetic:1s4c2t\npolicy: {reservedCPUs: '0'}\n")
    r = CliRunner().invoke(app, ["agent", "--config", str(cfg), "--check"])
    assert r.exit_code == 0, r.output
    assert "8 online CPUs" in r.output
    cfg.write_text("nodeName: n1\npolicy: {reservedCPUs: 'x'}\n")
    r = CliRunner().invoke(app, ["agent", "--config", str(cfg), "--check"])
    assert r.exit_code == 2
    assert "policy.reservedCPUs" in r.output
