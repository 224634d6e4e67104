"""The command line starts lean: what ``topodra --help``, ``topodra sim --help`` and a small
``topodra sim run`` import (modules, not timings: start-up times are in ``python -m benchmarks cli``),
and the shortcuts that keep it lean give what the full path gives."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import typer.main
from typer.testing import CliRunner

from topodra.cli import _COMMANDS, listing_app, make_app

SRC = Path(__file__).resolve().parents[1] / "src"

#: Run the real entry point with ARGV, then write the names of every loaded module to a file
#: (from an exit handler: ``main`` ends with ``SystemExit``).
_CHILD = """
import atexit, json, sys
out, argv = sys.argv[1], sys.argv[2:]
sys.argv = ["topodra", *argv]

def dump():
    with open(out, "w") as f:
        json.dump(sorted(sys.modules), f)

atexit.register(dump)
from topodra.cli import main
main()
"""


def _loaded(tmp_path: Path, *argv: str) -> set[str]:
    out = tmp_path / "modules.json"
    env = {**os.environ, "PYTHONPATH": str(SRC), "COLUMNS": "100"}
    subprocess.run([sys.executable, "-c", _CHILD, str(out), *argv], env=env, stdin=subprocess.DEVNULL, capture_output=True, timeout=120, check=True)
    return set(json.loads(out.read_text()))


def _present(loaded: set[str], prefixes: tuple[str, ...]) -> list[str]:
    return sorted(m for m in loaded if any(m == p or m.startswith(p + ".") for p in prefixes))


#: Never needed to list commands or print a group's help.
HEAVY = ("numpy", "yaml", "rich.console", "matplotlib", "cel_expr_python", "google.protobuf")


def test_top_level_help_imports_no_command_module(tmp_path: Path) -> None:
    loaded = _loaded(tmp_path, "--help")
    commands = tuple(dict.fromkeys(m.rpartition(".")[0] for m, _ in _COMMANDS.values()))
    assert _present(loaded, HEAVY + commands) == []


def test_sim_help_imports_no_simulator(tmp_path: Path) -> None:
    loaded = _loaded(tmp_path, "sim", "--help")
    assert "topodra.sim.cli" in loaded
    simulator = ("topodra.sim.run", "topodra.sim.scheduler", "topodra.sim.allocator", "topodra.sim.cluster", "topodra.policy", "topodra.agent")
    assert _present(loaded, HEAVY + simulator) == []


def test_small_sim_run_imports_no_plotting_or_progress(tmp_path: Path) -> None:
    """A real run: only what it uses (no plots, no progress bar when nobody watches)."""
    loaded = _loaded(tmp_path, "sim", "run", "-n", "2", "--cpus", "16", "--pods", "2", "--fill", "0.25", "--json")
    assert "topodra.sim.scheduler" in loaded  # it did run
    assert _present(loaded, ("matplotlib", "rich.progress", "topodra.sim.sweep", "topodra.policy", "topodra.agent")) == []


#: What a small ``sim run`` into a pipe does without (each was on its path once): the rich
#: summary table (plain lines when stdout is not a terminal), the YAML parser (built-in
#: workloads come parsed, from ``workloads/builtin.json``), protobuf's ``descriptor_pb2``
#: (the CEL types load from their serialised descriptor; the CEL runtime itself needs
#: ``message_factory``), and the topology package's sysfs reader and serialiser (its names
#: load on first use).
SMALL_RUN_NEVER = (
    "rich",
    "yaml",
    "google.protobuf.descriptor_pb2",
    "topodra.topology.sysfs",
    "topodra.topology.serialize",
)


def test_small_sim_run_into_a_pipe_stays_off_the_heavy_modules(tmp_path: Path) -> None:
    loaded = _loaded(tmp_path, "sim", "run", "--nodes", "4", "--cpus", "16", "--pods", "8")
    assert {"topodra.sim.scheduler", "cel_expr_python.cel", "google.protobuf.message"} <= loaded  # it ran, CEL included
    assert _present(loaded, SMALL_RUN_NEVER) == []


_THREADS = """
import atexit, os, sys
sys.argv = ["topodra", "sim", "run", "-n", "2", "--cpus", "16", "--pods", "2", "--json"]
atexit.register(lambda: print(os.environ.get("OPENBLAS_NUM_THREADS"), len(os.listdir("/proc/self/task")), file=sys.stderr))
from topodra.cli import main
main()
"""


@pytest.mark.parametrize(("preset", "expected"), [(None, "1 1"), ("2", "2 ")])
def test_sim_starts_no_blas_threads_unless_asked(preset: str | None, expected: str) -> None:
    """``topodra sim`` runs numpy's OpenBLAS on one thread (no spinning workers: the process
    has only its main thread after a run); an explicit OPENBLAS_NUM_THREADS is kept."""
    env = {k: v for k, v in os.environ.items() if k != "OPENBLAS_NUM_THREADS"}
    env.update({"PYTHONPATH": str(SRC)} | ({} if preset is None else {"OPENBLAS_NUM_THREADS": preset}))
    done = subprocess.run([sys.executable, "-c", _THREADS], env=env, stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=120, check=True)
    assert done.stderr.strip().splitlines()[-1].startswith(expected)


#: The real entry point with ARGV; with "handler", an exit handler registered first.
_ENTRY = """
import atexit, sys
mode, argv = sys.argv[1], sys.argv[2:]
sys.argv = ["topodra", *argv]
if mode == "handler":
    atexit.register(lambda: print("handler ran", file=sys.stderr))
from topodra.cli import main
main()
"""


def _entry_child(mode: str, *argv: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(SRC), "COLUMNS": "100"}
    return subprocess.run([sys.executable, "-c", _ENTRY, mode, *argv], env=env, stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=120, check=False)


SMALL_RUN = ("sim", "run", "--nodes", "4", "--cpus", "16", "--pods", "8", "--json")


def test_sim_command_in_its_own_process_loses_no_output_or_status() -> None:
    """A ``sim`` command run by the entry point ends with its whole output and its exit
    status; what it prints equals the in-process run's."""
    done = _entry_child("plain", *SMALL_RUN)
    assert (done.returncode, done.stderr) == (0, "")
    row = json.loads(done.stdout)
    same = json.loads(CliRunner().invoke(make_app("sim"), list(SMALL_RUN)).output)
    assert row["scheduled"] == same["scheduled"] == 8
    timings = {"sim_seconds", "sim_pods_per_s", "build_seconds", "node_filter_p50_ms", "node_filter_max_ms"}  # measured
    assert row.keys() == same.keys()
    assert {k: v for k, v in row.items() if k not in timings} == {k: v for k, v in same.items() if k not in timings}
    bad = _entry_child("plain", "sim", "run", "--nodes", "0")
    assert bad.returncode == 2
    assert "Invalid value for '--nodes'" in bad.stderr


@pytest.mark.parametrize("argv", [SMALL_RUN, ("sim", "--help"), ("--help",), ("--version",)])
def test_exit_handlers_run(argv: tuple[str, ...]) -> None:
    """An exit handler registered before the command runs when the command ends."""
    done = _entry_child("handler", *argv)
    assert done.returncode == 0
    assert "handler ran" in done.stderr


def test_plain_summary_has_every_figure_of_the_table() -> None:
    """Out of a terminal the summary is plain lines: one per row of the table, label then value."""
    from topodra.sim.cli import _summary_rows

    app = make_app("sim")
    args = ["sim", "run", "--nodes", "4", "--cpus", "16", "--pods", "8"]
    plain = CliRunner().invoke(app, args)
    as_json = CliRunner().invoke(app, [*args, "--json"])
    assert plain.exit_code == as_json.exit_code == 0
    lines = plain.output.splitlines()
    assert lines[0] == "topodra sim run"
    rows = _summary_rows(json.loads(as_json.output))
    assert [line.split("  ")[0] for line in lines[1:]] == [k for k, _ in rows]
    timing_free = [v for k, v in rows if k not in ("simulator",)]  # the simulator's own speed differs per run
    assert all(any(line.endswith("  " + v) for line in lines) for v in timing_free)
    assert "8 scheduled, 0 unschedulable, 0 timeout, 0 error" in plain.output


def _sim_commands(app: typer.Typer) -> list[str | None]:
    (group,) = app.registered_groups
    assert group.typer_instance is not None
    return [c.name for c in group.typer_instance.registered_commands]


@pytest.mark.parametrize(
    "argv",
    [
        ["sim", "run", "--help"],
        ["sim", "run", "--bogus"],
        ["sim", "run", "--nodes", "0"],
        ["sim", "workloads"],
        ["sim", "allocate"],
        ["sim", "run", "--model", "bogus"],
    ],
)
def test_group_with_one_subcommand_answers_as_the_full_group(argv: list[str]) -> None:
    """``topodra sim NAME`` builds a ``sim`` group holding only NAME; its help, errors and
    output are the full command line's, word for word."""
    runner = CliRunner()
    lean_app = make_app("sim", argv[1])
    assert _sim_commands(lean_app) == [argv[1]]
    lean = runner.invoke(lean_app, argv, terminal_width=200)
    full = runner.invoke(make_app(), argv, terminal_width=200)
    assert (lean.exit_code, lean.output) == (full.exit_code, full.output)


def test_unknown_subcommand_gets_the_full_group() -> None:
    app = make_app("sim", "bogus")
    assert len(_sim_commands(app)) > 1
    r = CliRunner().invoke(app, ["sim", "bogus"])
    assert r.exit_code == 2
    assert "No such command 'bogus'" in r.output


def test_listing_matches_the_full_command_line() -> None:
    """``topodra --help`` from the listing is word for word the full command line's."""
    runner = CliRunner()
    lean = runner.invoke(listing_app(), ["--help"], terminal_width=200)
    full = runner.invoke(make_app(), ["--help"], terminal_width=200)
    assert lean.exit_code == full.exit_code == 0
    assert lean.output == full.output
    group = typer.main.get_group(make_app())
    assert sorted(group.commands) == sorted(_COMMANDS)
    for name, (_, short) in _COMMANDS.items():
        assert group.commands[name].get_short_help_str(limit=500) == short, name


def test_cel_message_types_match_descriptor_pb2() -> None:
    """The serialised proto the CEL runtime loads is the one ``descriptor_pb2`` builds."""
    from google.protobuf import descriptor_pb2

    from topodra.sim import cel, celnetlib

    fdp = descriptor_pb2.FileDescriptorProto(name="topodra/sim/cel_types.proto", package="kubernetes", syntax="proto3")
    q = fdp.message_type.add(name="Quantity")
    q.field.add(name="amount", number=1, type=descriptor_pb2.FieldDescriptorProto.TYPE_STRING, label=1)
    s = fdp.message_type.add(name="Semver")
    for i, name in enumerate(("major", "minor", "patch"), start=1):
        s.field.add(name=name, number=i, type=descriptor_pb2.FieldDescriptorProto.TYPE_INT64, label=1)
    s.field.add(name="pre", number=4, type=descriptor_pb2.FieldDescriptorProto.TYPE_STRING, label=1)
    d = fdp.message_type.add(name="DRADevice")
    d.field.add(name="driver", number=1, type=descriptor_pb2.FieldDescriptorProto.TYPE_STRING, label=1)
    d.field.add(name="allowMultipleAllocations", number=2, type=descriptor_pb2.FieldDescriptorProto.TYPE_BOOL, label=1)
    string, boolean = descriptor_pb2.FieldDescriptorProto.TYPE_STRING, descriptor_pb2.FieldDescriptorProto.TYPE_BOOL
    fdp.message_type.add(name="URL").field.add(name="raw", number=1, type=string, label=1)
    fdp.message_type.add(name="NamedFormat").field.add(name="name", number=1, type=string, label=1)
    o = fdp.message_type.add(name="OptionalStrings")
    o.field.add(name="present", number=1, type=boolean, label=1)
    o.field.add(name="values", number=2, type=string, label=3)
    o = fdp.message_type.add(name="OptionalFormat")
    o.field.add(name="present", number=1, type=boolean, label=1)
    o.field.add(name="name", number=2, type=string, label=1)
    assert descriptor_pb2.FileDescriptorProto.FromString(cel.CEL_TYPES_PROTO) == fdp
    net = descriptor_pb2.FileDescriptorProto(name="topodra/sim/cel_net.proto", package="net", syntax="proto3")
    for name in ("IP", "CIDR"):
        net.message_type.add(name=name).field.add(name="text", number=1, type=string, label=1)
    assert descriptor_pb2.FileDescriptorProto.FromString(celnetlib.NET_TYPES_PROTO) == net

    _, quantity, semver = cel._message_types()
    assert quantity(amount="3/2").amount == "3/2"
    assert semver(major=1, pre="rc.1").SerializeToString() != b""


def test_builtin_workload_index_is_fresh() -> None:
    root = Path(__file__).resolve().parents[1]
    done = subprocess.run([sys.executable, str(root / "scripts" / "genworkloads.py"), "--check"], capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stdout + done.stderr


def test_builtin_workloads_from_the_index_equal_their_yaml() -> None:
    from importlib import resources

    from topodra.sim.workload import builtin_workloads, load_workload, parse_workload

    root = resources.files("topodra.sim") / "workloads"
    for name in builtin_workloads():
        assert load_workload(name) == parse_workload((root / f"{name}.yaml").read_text(), name), name


def test_builtin_workloads_are_read_where_importlib_resources_finds_them(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Beside the module when the package is files; through ``importlib.resources`` otherwise."""
    from importlib import resources

    from topodra.sim import workload

    packaged = Path(str(resources.files("topodra.sim") / "workloads"))
    assert Path(str(workload._builtin_root())) == packaged
    monkeypatch.setattr(workload, "__file__", str(tmp_path / "workload.py"))  # no directory beside it
    root = workload._builtin_root()
    assert Path(str(root)) == packaged
    assert (root / "prototype.yaml").read_text() == (packaged / "prototype.yaml").read_text()
    assert workload.builtin_workloads() == sorted(p.stem for p in packaged.glob("*.yaml"))


def test_a_builtin_edited_since_the_index_is_read_from_its_yaml(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The index is a cache: a built-in whose YAML changed (or no index at all) is parsed."""
    import shutil
    from importlib import resources

    from topodra.sim import workload

    shutil.copytree(Path(str(resources.files("topodra.sim") / "workloads")), tmp_path / "workloads")
    proto = tmp_path / "workloads" / "prototype.yaml"
    assert "    pcore: 2\n" in proto.read_text()
    proto.write_text(proto.read_text().replace("    pcore: 2\n", "    pcore: 3\n"))
    monkeypatch.setattr(workload, "_builtin_root", lambda: tmp_path / "workloads")
    assert workload.load_workload("prototype").mix["pcore"] == 3.0
    assert workload.load_workload("p-cores") == workload.parse_workload((tmp_path / "workloads" / "p-cores.yaml").read_text(), "p-cores")
    (tmp_path / "workloads" / workload.BUILTIN_INDEX).unlink()
    assert workload.load_workload("prototype").mix["pcore"] == 3.0


def test_shell_completion_can_be_shown_and_installed() -> None:
    from typer.testing import CliRunner

    from topodra.cli import app

    r = CliRunner().invoke(app, ["--help"])
    assert "--install-completion" in r.output
    assert "--show-completion" in r.output
    r = CliRunner().invoke(app, ["--show-completion", "bash"], env={"SHELL": "/bin/bash"})
    assert r.exit_code == 0, r.output
    assert "_TOPODRA_COMPLETE" in r.output
