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
        ({"nri": {"delivery": "push"}}, "nri.delivery"),
        ({"nri": {"unsolicitedUpdates": False}}, "replaced by delivery"),
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
    with pytest.raises(ConfigError, match=r"bad\.yaml: \(top level\): must be a mapping"):
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


# --- one validation path: what --check accepts, start and reload accept --------------------------

MACHINE = "nodeName: n1\ntopology: synthetic:1s4c2t\nmetricsAddress: ''\nstateAddress: ''\nnri: {enabled: false}\ndra: {enabled: false}\n"

REFUSED_ON_THIS_MACHINE = [
    ("policy: {reservedCPUs: '100-200'}\n", "reservedCPUs '100-200'"),
    ("policy: {reservedCPUs: '0-7'}\n", "no CPU left for shared containers"),
    ("policy: {reservedCPUCount: 1000000}\n", "reservedCPUCount 1000000"),
    ("devices: {attributeHook: 'no_such_module_xyz:attrs'}\n", "cannot import 'no_such_module_xyz'"),
    ("devices: {attributeHook: 'os.path:no_such_function'}\n", "has no 'no_such_function'"),
]


@pytest.mark.parametrize(("extra", "needle"), REFUSED_ON_THIS_MACHINE)
def test_check_refuses_what_the_agent_refuses(tmp_path: Path, extra: str, needle: str) -> None:
    from topodra.agent.agent import Agent, AgentError

    cfg = tmp_path / "c.yaml"
    cfg.write_text(MACHINE + extra)
    r = CliRunner().invoke(app, ["agent", "--config", str(cfg), "--check"])
    assert r.exit_code == 2, r.output
    assert needle in r.output
    assert "Traceback" not in r.output
    with pytest.raises(AgentError) as err:
        Agent(load_config(cfg), config_path=cfg)
    assert needle in str(err.value)
    assert str(err.value) in " ".join(r.output.split())  # the very same message


def test_check_reports_what_the_agent_would_run(tmp_path: Path) -> None:
    cfg = tmp_path / "c.yaml"
    cfg.write_text(MACHINE + "policy: {reservedCPUCount: 2}\ndevices: {model: core}\n")
    r = CliRunner().invoke(app, ["agent", "--config", str(cfg), "--check"])
    assert r.exit_code == 0, r.output
    assert "reserved CPUs 0,4" in r.output  # picked topology-packed: one whole core
    assert "4 DRA device(s), 1 tainted" in r.output  # the reserved core published tainted


#: Nine levels of nine aliases: 9**9 values once expanded; validating or printing them would take
#: hours (printing the error for the 8-level version took 40 s before the limit).
_ALIAS_BOMB = b"l0: &l0 [x, x, x, x, x, x, x, x, x]\n" + b"".join(
    b"l%d: &l%d [%s]\n" % (i, i, b", ".join([b"*l%d" % (i - 1)] * 9)) for i in range(1, 9)
) + b"nodeName: *l8\n"

#: Each alias wraps the previous one: shallow as written, 300 levels deep once read.
_ALIAS_CHAIN = b"a0: &a0 [x]\n" + b"".join(b"a%d: &a%d [*a%d]\n" % (i, i, i - 1) for i in range(1, 300)) + b"b: *a299\n"


@pytest.mark.parametrize(
    ("raw", "needle"),
    [
        (b"nodeName: n1\n\xff\xfe: 1\n", r"c\.yaml:2:1: not a text file \(byte 0xff is not UTF-8\)"),
        (b"nodeName: n1\npolicy: {reservedCPUs: '\xc3'}\n", r"c\.yaml:2:\d+: not a text file"),
        (b"nodeName: \x00\n", r"character U\+0000 at offset 10"),
        (b"a: " + b"[" * 5000 + b"]" * 5000 + b"\n", r"c\.yaml:1:\d+: invalid YAML: nested deeper than 64 levels"),
        (_ALIAS_BOMB, r"aliases expand to more than 100000 values"),
        (b"a: &a [*a]\n", r"an alias refers to a value that contains it"),
        (_ALIAS_CHAIN, r"its aliases nest deeper than 64 levels"),
    ],
)
def test_undecodable_files_get_one_line(tmp_path: Path, raw: bytes, needle: str) -> None:
    cfg = tmp_path / "c.yaml"
    cfg.write_bytes(raw)
    with pytest.raises(ConfigError, match=needle):
        load_config(cfg)
    r = CliRunner().invoke(app, ["agent", "--config", str(cfg), "--check"])
    assert r.exit_code == 2
    assert "Traceback" not in r.output
    assert len(r.output.strip().splitlines()) <= 2, r.output


def test_oversized_file_is_refused(tmp_path: Path) -> None:
    from topodra.agent.config import MAX_CONFIG_BYTES

    cfg = tmp_path / "c.yaml"
    cfg.write_text("# " + "x" * MAX_CONFIG_BYTES + "\n")
    with pytest.raises(ConfigError, match="larger than"):
        load_config(cfg)


@pytest.mark.parametrize("mode", [0o664, 0o646, 0o666, 0o777])
def test_a_file_others_can_write_is_refused(tmp_path: Path, mode: int) -> None:
    cfg = tmp_path / "c.yaml"
    cfg.write_text(MACHINE)
    cfg.chmod(mode)
    with pytest.raises(ConfigError, match=r"writable by group or others .*chmod go-w"):
        load_config(cfg)
    cfg.chmod(0o644)
    assert load_config(cfg).node_name == "n1"
    cfg.chmod(0o400)
    assert load_config(cfg).node_name == "n1"


def test_the_mode_is_checked_through_a_symlink(tmp_path: Path) -> None:
    # Kubernetes mounts ConfigMap keys as symlinks into a ..data directory.
    real = tmp_path / "..data" / "config.yaml"
    real.parent.mkdir()
    real.write_text(MACHINE)
    real.chmod(0o666)
    link = tmp_path / "config.yaml"
    link.symlink_to(real)
    with pytest.raises(ConfigError, match="writable by group or others"):
        load_config(link)


@pytest.mark.parametrize("field", ["stateDir", "cdiDir", "kubeletRoot", "sysfsRoot"])
def test_relative_host_paths_are_refused(field: str) -> None:
    with pytest.raises(ConfigError, match=rf"{field}: must be an absolute path, got relative 'var/lib/x'"):
        parse_config({"nodeName": "n", field: "var/lib/x"}, "cfg.yaml")


def test_relative_nri_socket_is_refused() -> None:
    with pytest.raises(ConfigError, match=r"nri\.socket: must be an absolute path"):
        parse_config({"nodeName": "n", "nri": {"socket": "nri.sock"}}, "cfg.yaml")


def test_state_address() -> None:
    # /state is local by default: a unix socket in the state directory.
    assert parse_config({"nodeName": "n", "stateDir": "/srv/td"}).state_listen == "unix:/srv/td/state.sock"
    assert parse_config({"nodeName": "n", "stateAddress": "127.0.0.1:9403"}).state_listen == "127.0.0.1:9403"
    assert parse_config({"nodeName": "n", "stateAddress": ""}).state_listen == ""
    for bad in ("unix:relative.sock", "nowhere", "host:99999"):
        with pytest.raises(ConfigError, match="stateAddress"):
            parse_config({"nodeName": "n", "stateAddress": bad}, "cfg.yaml")
