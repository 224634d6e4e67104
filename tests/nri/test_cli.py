"""``topodra nri-logger`` against the embedded runtime, and its errors."""

from __future__ import annotations

import asyncio
import json
import threading
from pathlib import Path

from typer.testing import CliRunner

from topodra.cli import app
from topodra.cpuset import CPUSet
from topodra.embedded.runtime import EmbeddedRuntime
from topodra.nri.logger import EventLogger, parse_events
from topodra.nri.types import Container, Event, LinuxResources, Pod
from topodra.nri.version import RuntimeInfo


def _drive_runtime(path: Path, seen: dict[str, object], ready: threading.Event) -> None:
    async def main() -> None:
        async with EmbeddedRuntime(path, request_timeout=2, registration_timeout=10) as rt:
            ready.set()
            await rt.wait_for_plugins(1, timeout=20)
            await rt.run_pod_sandbox(Pod(id="p1", name="web", namespace="shop"))
            res = await rt.create_container(
                Container(id="c1", pod_sandbox_id="p1", name="app", resources=LinuxResources(cpus=CPUSet.parse("0-3")))
            )
            seen["annotations"] = dict(res.container.annotations) if res.container else None
            await rt.stop_container("c1")

    asyncio.run(main())


def test_nri_logger_logs_events_as_json(tmp_path: Path) -> None:
    path = tmp_path / "nri.sock"
    seen: dict[str, object] = {}
    ready = threading.Event()
    thread = threading.Thread(target=_drive_runtime, args=(path, seen, ready))
    thread.start()
    assert ready.wait(10)
    log_file = tmp_path / "events.jsonl"
    result = CliRunner().invoke(
        app,
        ["nri-logger", "--socket", str(path), "--idx", "10", "--json", "--no-reconnect",
         "--events", "RunPodSandbox,CreateContainer,StopContainer", "--add-annotation", "seen-by",
         "--log-file", str(log_file)],
    )
    thread.join(20)
    assert result.exit_code == 0, result.output
    records = [json.loads(line) for line in log_file.read_text().splitlines()]
    assert [r["event"] for r in records] == ["Configure", "Synchronize", "RunPodSandbox", "CreateContainer", "StopContainer"]
    assert records[3]["cpus"] == "0-3"
    assert records[3]["pod"] == "shop/web"
    assert '"CreateContainer"' in result.output
    annotations = seen["annotations"]
    assert isinstance(annotations, dict)
    assert annotations["seen-by"].startswith("logger-pid-")


def test_nri_logger_rejects_bad_options() -> None:
    runner = CliRunner()
    result = runner.invoke(app, ["nri-logger", "--events", "CreateContainer,Bogus"])
    assert result.exit_code == 2
    assert "unknown NRI event 'Bogus'" in result.output
    result = runner.invoke(app, ["nri-logger", "--idx", "7"])
    assert result.exit_code == 2
    assert "must be 2 digits" in result.output
    help_text = runner.invoke(app, ["nri-logger", "--help"]).output
    assert "--socket" in help_text
    assert "--events" in help_text


def test_nri_logger_reports_a_missing_socket(tmp_path: Path) -> None:
    result = CliRunner().invoke(app, ["nri-logger", "--socket", str(tmp_path / "none.sock"), "--no-reconnect"])
    assert result.exit_code == 1
    assert "cannot connect to" in result.output


def test_logger_config_text() -> None:
    records: list[dict[str, object]] = []
    plugin = EventLogger(records.append, log_files=False)

    async def configure(text: str) -> frozenset[Event]:
        got = await plugin.configure(text, RuntimeInfo())
        assert got is not None
        return frozenset(got)

    assert asyncio.run(configure("events: [RunPodSandbox, stop_container]\naddEnv: X")) == {
        Event.RUN_POD_SANDBOX, Event.STOP_CONTAINER}
    assert plugin.add_env == "X"
    assert parse_events("all") == frozenset(Event)
    for bad, message in [("- a\n- b", "must be a mapping"), ("events: 5", "expected a list"),
                         ("colour: red", "unknown key(s) colour"), ("events: [1]", "is not an event name")]:
        try:
            asyncio.run(configure(bad))
        except ValueError as exc:
            assert message in str(exc)
        else:
            raise AssertionError(f"{bad!r} was accepted")
