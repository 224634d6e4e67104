"""``topodra nri-logger``: log every NRI event a runtime sends, for debugging on a node."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import typer

if TYPE_CHECKING:
    from rich.console import Console

    from topodra.nri.stub import Stub

__all__ = ["register"]


def register(app: typer.Typer) -> None:
    app.command("nri-logger")(nri_logger)


def nri_logger(
    socket_path: str = typer.Option(
        "/var/run/nri/nri.sock", "--socket", "-s", help="The runtime's NRI socket (ignored when the runtime launched us)."
    ),
    name: str = typer.Option("logger", help="Plugin name to register as ([a-zA-Z0-9_.+-])."),
    idx: str = typer.Option("99", help="Two-digit plugin index; plugins are called in index order."),
    events: str = typer.Option("all", help="Events to log: 'all' or a comma list such as CreateContainer,StopContainer."),
    as_json: bool = typer.Option(False, "--json", help="Print one JSON object per event instead of a table row."),
    log_file: str | None = typer.Option(None, help="Also append JSON lines to this file (launched plugins have no stdout)."),
    add_annotation: str | None = typer.Option(None, help="Add this annotation to every created container."),
    add_env: str | None = typer.Option(None, help="Add this environment variable to every created container."),
    reconnect: bool = typer.Option(True, help="Reconnect with backoff when the runtime restarts."),
    verbose: bool = typer.Option(False, "--verbose", "-v", help="Log protocol details."),
) -> None:
    """Register as an NRI plugin and log every event the runtime delivers.

    Works against containerd (1.7.26+, 2.x) and CRI-O over the external socket,
    or as a runtime-launched plugin (NRI_PLUGIN_SOCKET in the environment).
    Subscribes to every event the runtime's NRI version knows unless --events
    narrows it; the runtime's drop-in config (YAML: events, logFile,
    addAnnotation, addEnv) overrides the options.
    """
    import asyncio
    import contextlib
    import logging

    from rich.console import Console
    from rich.logging import RichHandler

    from topodra.cli_errors import fail
    from topodra.nri.errors import NRIError
    from topodra.nri.logger import EventLogger, LoggerConfigError, parse_events
    from topodra.nri.stub import Stub

    console = Console(stderr=False, highlight=False)
    logging.basicConfig(
        level=logging.DEBUG if verbose else logging.INFO,
        format="%(message)s",
        handlers=[RichHandler(console=Console(stderr=True), show_path=False)],
    )
    try:
        chosen = parse_events(events)
    except LoggerConfigError as exc:
        raise typer.BadParameter(str(exc), param_hint="--events") from None
    plugin = EventLogger(_event_printer(console, as_json), events=chosen, add_annotation=add_annotation, add_env=add_env)
    if log_file:
        try:
            open(log_file, "a", encoding="utf-8").close()  # only whether it can be appended to
        except OSError as exc:
            raise fail(f"--log-file {log_file}: cannot append to it ({exc.strerror or exc})") from None
        plugin.open_log(log_file)
    try:
        stub = Stub(plugin, socket_path=socket_path, name=name, idx=idx, reconnect=reconnect)
    except ValueError as exc:
        raise typer.BadParameter(str(exc)) from None
    try:
        asyncio.run(_run_until_stopped(stub))
    except KeyboardInterrupt:
        pass
    except NRIError as exc:
        raise fail(f"nri-logger: {exc}", 1) from None
    finally:
        with contextlib.suppress(Exception):
            plugin.close()


def _event_printer(console: Console, as_json: bool) -> Callable[[dict[str, Any]], None]:
    """What prints one event record: a JSON object, or a timestamped table row."""
    import json
    from datetime import datetime

    def show(record: dict[str, Any]) -> None:
        if as_json:
            console.print_json(json.dumps(record, sort_keys=True, default=str))
            return
        fields = {k: v for k, v in record.items() if k != "event" and v not in (None, "", {}, [])}
        text = "  ".join(
            f"[dim]{k}=[/dim]{','.join(map(str, v)) if isinstance(v, list) else v}" for k, v in fields.items()
        )
        stamp = datetime.now().strftime("%H:%M:%S.%f")[:-3]
        console.print(f"[dim]{stamp}[/dim] [bold cyan]{record['event']:<28}[/bold cyan] {text}")

    return show


async def _run_until_stopped(stub: Stub) -> None:
    """Run the stub; stop it however the run ends."""
    import asyncio

    task = asyncio.get_running_loop().create_task(stub.run())
    try:
        await task
    finally:
        await stub.stop()
