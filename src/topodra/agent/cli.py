"""``topodra agent``: the node agent's command."""

from __future__ import annotations

import asyncio
import signal
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

if TYPE_CHECKING:
    from topodra.agent.config import AgentConfig
    from topodra.topology.model import Topology

__all__ = ["register"]


def agent_command(
    config: Annotated[
        Path, typer.Option("--config", "-c", envvar="TOPODRA_CONFIG", help="The agent's YAML configuration.")
    ] = Path("/etc/topodra/config.yaml"),
    check: Annotated[
        bool, typer.Option("--check", help="Run the checks a start runs (file, fields, topology, policy, devices), print the result, and exit.")
    ] = False,
    state: Annotated[
        bool, typer.Option("--state", help="Print the running agent's /state (from its stateAddress) and exit.")
    ] = False,
) -> None:
    """Run the node agent: NRI plugin, DRA kubelet plugin, ResourceSlices and metrics."""
    from topodra.agent.agent import AgentError, load_topology
    from topodra.agent.config import ConfigError, load_config
    from topodra.agent.config_check import check_on_machine
    from topodra.cli_errors import fail as exit_with

    def fail(exc: Exception) -> typer.Exit:
        return exit_with(str(exc), 2)

    if state:
        raise typer.Exit(_print_state(config, fail))
    # The same checks the agent runs when it starts (and on every reload): what --check
    # accepts, the agent accepts.
    try:
        cfg = load_config(config)
        topo = load_topology(cfg)
        checked = check_on_machine(cfg, topo, str(config))
    except (ConfigError, AgentError) as exc:
        raise fail(exc) from None
    if check:
        import yaml

        typer.echo(yaml.safe_dump(cfg.model_dump(mode="json", by_alias=True), sort_keys=False).rstrip())
        kinds = ", ".join(t.value for t in topo.core_types())
        typer.echo(
            f"# topology: {len(topo.cpus)} online CPUs, {len(topo.nodes)} NUMA node(s), types {kinds}; "
            f"reserved CPUs {checked.policy.reserved_cpus or 'none'}; {len(checked.devices)} DRA device(s)"
            + (f", {tainted} tainted" if (tainted := sum(1 for d in checked.devices if d.taints)) else "")
        )
        return
    from topodra.agent.logs import setup_logging

    setup_logging(cfg.log_level, cfg.log_format)
    asyncio.run(_run(cfg, config, topo))


def _print_state(path: Path, fail: Callable[[Exception], typer.Exit]) -> int:
    """``/state`` of the agent running with this configuration (a local socket by default)."""
    from topodra.agent.config import ConfigError, load_config
    from topodra.agent.http import get

    try:
        cfg = load_config(path)
    except ConfigError as exc:
        raise fail(exc) from None
    if not cfg.state_listen:
        raise fail(ValueError(f"stateAddress is off in {path}: the agent serves no /state"))
    try:
        status, body = asyncio.run(get(cfg.state_listen, "/state"))
    except (OSError, TimeoutError, ValueError) as exc:
        why = exc.strerror if isinstance(exc, OSError) and exc.strerror else (str(exc) or type(exc).__name__)
        raise fail(OSError(f"no agent answers on {cfg.state_listen}: {why}")) from None
    if status != 200:
        raise fail(OSError(f"{cfg.state_listen}/state answered {status}: {body.decode(errors='replace').strip()}"))
    typer.echo(body.decode().rstrip())
    return 0


async def _run(cfg: AgentConfig, path: Path, topology: Topology) -> None:
    from topodra.agent.agent import Agent, AgentError

    try:
        agent = Agent(cfg, config_path=path, topology=topology, watch_machine=True)
    except AgentError as exc:
        raise SystemExit(f"error: {exc}") from None
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, agent.request_stop)
    try:
        await agent.run_forever()
    except AgentError as exc:
        raise SystemExit(f"error: {exc}") from None


def register(app: typer.Typer) -> None:
    app.command("agent")(agent_command)
