"""``topodra agent``: the node agent's command."""

from __future__ import annotations

import asyncio
import signal
from pathlib import Path
from typing import Annotated

import typer

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

    from topodra.agent.config import ConfigError, load_config

    err = Console(stderr=True)
    try:
        cfg = load_config(config)
    except ConfigError as exc:
        err.print(f"[red]error:[/red] {exc}", highlight=False, markup=True)
        raise typer.Exit(2) from None
    if check:
        import yaml

        from topodra.agent.agent import AgentError, load_topology

        try:
            topo = load_topology(cfg)
        except AgentError as exc:
            err.print(f"[red]error:[/red] {exc}", highlight=False)
            raise typer.Exit(2) from None
        typer.echo(yaml.safe_dump(cfg.model_dump(mode="json", by_alias=True), sort_keys=False).rstrip())
        typer.echo(f"# topology: {len(topo.cpus)} online CPUs, {len(topo.nodes)} NUMA node(s), types {', '.join(t.value for t in topo.core_types())}")
        return
    from topodra.agent.logs import setup_logging

    setup_logging(cfg.log_level, cfg.log_format)
    asyncio.run(_run(cfg, config))


async def _run(cfg: object, path: Path) -> None:
    from topodra.agent.agent import Agent, AgentError
    from topodra.agent.config import AgentConfig

    assert isinstance(cfg, AgentConfig)
    try:
        agent = Agent(cfg, config_path=path)
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
