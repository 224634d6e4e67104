"""``topodra agent``: the node agent's command."""

from __future__ import annotations

import asyncio
import signal
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
        bool, typer.Option("--check", help="Validate the configuration and topology, print them, and exit.")
    ] = False,
) -> None:
    """Run the node agent: NRI plugin, DRA kubelet plugin, ResourceSlices and metrics."""
    from rich.console import Console

    from topodra.agent.agent import AgentError, load_topology
    from topodra.agent.config import ConfigError, load_config
    from topodra.agent.validation import check_on_machine

    err = Console(stderr=True)

    def fail(exc: Exception) -> typer.Exit:
        err.print(f"[red]error:[/red] {exc}", highlight=False, markup=True, soft_wrap=True)
        return typer.Exit(2)

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
        )
        return
    from topodra.agent.logs import setup_logging

    setup_logging(cfg.log_level, cfg.log_format)
    asyncio.run(_run(cfg, config, topo))


async def _run(cfg: AgentConfig, path: Path, topology: Topology) -> None:
    from topodra.agent.agent import Agent, AgentError

    try:
        agent = Agent(cfg, config_path=path, topology=topology)
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
