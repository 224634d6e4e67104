"""``topodra topology``: print this machine's (or a tree's) topology."""

from __future__ import annotations

import enum
import json
from pathlib import Path
from typing import Annotated

import typer

__all__ = ["register"]


class OutputFormat(enum.StrEnum):
    TREE = "tree"
    JSON = "json"
    YAML = "yaml"


def topology_command(
    root: Annotated[
        Path,
        typer.Option(
            "--root",
            help="Filesystem root holding sys/ (a live machine is /; an unpacked tree is its folder).",
            file_okay=False,
        ),
    ] = Path("/"),
    fixture: Annotated[
        str | None,
        typer.Option(
            "--fixture", help="Read a hwloc test tree by name (see --list-fixtures), unpacked to a temp dir."
        ),
    ] = None,
    output: Annotated[
        OutputFormat,
        typer.Option("--format", "-f", help="tree (rich), or json/yaml in the documented schema."),
    ] = OutputFormat.TREE,
    list_fixtures: Annotated[
        bool, typer.Option("--list-fixtures", help="List the fixture names and exit.")
    ] = False,
) -> None:
    """Show CPUs, caches, cores, P-/E-core types, NUMA nodes, memory kinds and distances.

    Reads sysfs below --root (default /). Examples:

      topodra topology
      topodra topology --format json
      topodra topology --fixture 20em64t-hybrid-1p6c2t+2ca4co1t
    """
    from rich.console import Console

    from topodra.topology.errors import TopologyError
    from topodra.topology.fixtures import FixtureError, fixture_dir, fixture_names, unpacked_fixture
    from topodra.topology.serialize import topology_to_dict
    from topodra.topology.sysfs import read_topology

    console = Console()
    err = Console(stderr=True)
    try:
        if list_fixtures:
            names = fixture_names()
            console.print(f"[bold]{len(names)} fixtures in {fixture_dir()}[/bold]")
            for name in names:
                console.print(name, highlight=False)
            return
        if fixture is not None:
            if root != Path("/"):
                err.print("[red]error:[/red] give --root or --fixture, not both")
                raise typer.Exit(2)
            with console.status(f"unpacking {fixture}..."):
                root = unpacked_fixture(fixture)
        t = read_topology(root)
    except (TopologyError, FixtureError) as e:
        err.print(f"[red]error:[/red] {e}", highlight=False)
        raise typer.Exit(1) from None
    if output is OutputFormat.TREE:
        from topodra.topology.render import render_topology

        console.print(render_topology(t))
        return
    data = topology_to_dict(t)
    if output is OutputFormat.JSON:
        typer.echo(json.dumps(data, indent=2))
    else:
        import yaml

        typer.echo(yaml.safe_dump(data, sort_keys=False), nl=False)


def register(app: typer.Typer) -> None:
    """Add ``topology`` to the topodra command line."""
    app.command("topology")(topology_command)
