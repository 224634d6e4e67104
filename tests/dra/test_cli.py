"""``topodra dra`` commands, in-process."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from topodra.cli import app

runner = CliRunner()


def test_devices_table_and_json() -> None:
    r = runner.invoke(app, ["dra", "devices", "--topology", "1s1n1l2c2t2e", "--reserved", "0"])
    assert r.exit_code == 0, r.output
    assert "6 native.cpu devices" in r.output  # the reserved CPU 0 published tainted
    assert "P-core" in r.output
    assert "E-core" in r.output
    assert "taint native.cpu/reserved:NoSchedule: cpu0\n" in r.output
    r = runner.invoke(app, ["dra", "devices", "--topology", "1s1n1l2c2t2e", "--reserved", "0", "-f", "json"])
    taints = {d["name"]: d.get("taints") for d in json.loads(r.output)}
    assert taints.pop("cpu0") == [{"key": "native.cpu/reserved", "effect": "NoSchedule"}]
    assert not any(taints.values())
    r = runner.invoke(app, ["dra", "devices", "--topology", "1s1n1l2c2t", "-f", "json"])
    assert r.exit_code == 0, r.output
    devices = json.loads(r.output)
    # topology-reversed: the last core first, its two threads together (1s1n1l2c2t: cores {0,2}, {1,3})
    assert [d["name"] for d in devices] == ["cpu1", "cpu3", "cpu0", "cpu2"]
    assert devices[0]["attributes"]["coreType"] == {"string": "standard"}


def test_devices_grouped_from_a_fixture() -> None:
    r = runner.invoke(
        app, ["dra", "devices", "--topology", "fixture:20em64t-hybrid-1p6c2t+2ca4co1t", "--model", "grouped", "-f", "yaml"]
    )
    assert r.exit_code == 0, r.output
    docs = yaml.safe_load(r.output)
    assert [d["name"] for d in docs] == ["numa0-pcore", "numa0-ecore"]
    assert docs[0]["capacity"]["cpu"]["value"] == "12"


def test_devices_with_a_config_file(tmp_path: Path) -> None:
    cfg = tmp_path / "devices.yaml"
    cfg.write_text("model: core\nadd_attributes:\n  rack: r1\ndrop_attributes: [minFreq]\n")
    r = runner.invoke(app, ["dra", "devices", "--topology", "1s1n1l2c2t", "--config", str(cfg), "-f", "json"])
    assert r.exit_code == 0, r.output
    devices = json.loads(r.output)
    assert [d["name"] for d in devices] == ["core1", "core0"]
    assert devices[0]["attributes"]["rack"] == {"string": "r1"}
    assert "minFreq" not in devices[0]["attributes"]


def test_slices_and_deviceclass() -> None:
    r = runner.invoke(app, ["dra", "slices", "--node", "node-a", "--topology", "2s1d2n2l16c2t", "--generation", "3"])
    assert r.exit_code == 0, r.output
    slices = list(yaml.safe_load_all(r.output))
    assert [s["metadata"]["name"] for s in slices] == ["node-a-native.cpu-0", "node-a-native.cpu-1"]
    assert slices[0]["spec"]["pool"] == {"name": "node-a", "generation": 3, "resourceSliceCount": 2}
    r = runner.invoke(app, ["dra", "deviceclass"])
    assert r.exit_code == 0
    assert yaml.safe_load(r.output)["metadata"]["name"] == "native.cpu"


def test_clear_errors(tmp_path: Path) -> None:
    cases = [
        (["dra", "devices", "--topology", "2x"], "invalid machine spec"),
        (["dra", "devices", "--topology", "1s1n1l2c2t", "--reserved", "0-x"], "--reserved"),
        (["dra", "devices", "--topology", "1s1n1l2c2t", "--reserved", "9"], "not online"),
        (["dra", "devices", "--topology", "no-such-machine"], "or a fixture name"),
        (["dra", "slices", "--node", "Bad_Node", "--topology", "1s1n1l2c2t"], "DNS subdomain"),
    ]
    bad = tmp_path / "bad.yaml"
    bad.write_text("add_attributes:\n  bad name: 1\n")
    cases.append((["dra", "devices", "--topology", "1s1n1l2c2t", "--config", str(bad)], "bad name"))
    for args, needle in cases:
        r = runner.invoke(app, args)
        assert r.exit_code == 1, (args, r.output)
        assert needle in r.output, (args, r.output)


def test_reserving_every_cpu_is_refused_as_the_agent_refuses_it() -> None:
    r = runner.invoke(app, ["dra", "devices", "--topology", "1s2c1t", "--reserved", "0-1"])
    assert r.exit_code == 1, r.output
    assert "leaves no CPU of 0-1 for containers" in r.output


def test_a_binary_device_config_is_one_line(tmp_path: Path) -> None:
    config = tmp_path / "garbage.bin"
    config.write_bytes(bytes(range(256)) * 4)
    r = runner.invoke(app, ["dra", "devices", "--topology", "1s2c1t", "--config", str(config)])
    assert r.exit_code == 1, r.output
    assert isinstance(r.exception, SystemExit)
    assert "not a text file" in r.output


@pytest.mark.parametrize("command", ["deviceclass", "slices"])
def test_objects_offer_no_table_format(command: str) -> None:
    r = runner.invoke(app, ["dra", command, "-f", "table"])
    assert r.exit_code == 2, r.output
    assert "'table' is not one of 'yaml', 'json'" in r.output
    assert "apiVersion" not in r.output


def test_slices_of_the_core_or_thread_model_put_the_counters_in_a_slice_of_their_own() -> None:
    r = runner.invoke(app, ["dra", "slices", "--node", "n1", "--topology", "1s1d1n1l4c2t", "--model", "core-or-thread", "-f", "json"])
    assert r.exit_code == 0, r.output
    data = json.loads(r.stdout)
    slices = data if isinstance(data, list) else data.get("items", [data])
    devices = [d["name"] for s in slices for d in s["spec"].get("devices", [])]
    assert sum(n.startswith("core") for n in devices) == 4
    assert sum(n.startswith("cpu") for n in devices) == 8
    counter_slices = [s for s in slices if s["spec"].get("sharedCounters")]
    assert len(counter_slices) == 1
    assert "devices" not in counter_slices[0]["spec"]
