"""``topodra topology``: print this machine's (or a tree's) topology."""

from __future__ import annotations

import enum
import json
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from topodra.cli_errors import print_error
from topodra.topology.machine import TOPOLOGY_HELP

if TYPE_CHECKING:
    from rich.console import Console

    from topodra.topology.hwloc import Check

__all__ = ["register"]


class OutputFormat(enum.StrEnum):
    TREE = "tree"
    JSON = "json"
    YAML = "yaml"


def topology_command(
    topology: Annotated[str | None, typer.Option("--topology", "-t", help=TOPOLOGY_HELP)] = None,
    output: Annotated[
        OutputFormat,
        typer.Option("--format", "-f", help="tree (rich), or json/yaml in the documented schema."),
    ] = OutputFormat.TREE,
    list_fixtures: Annotated[
        bool, typer.Option("--list-fixtures", help="List the fixture names and exit.")
    ] = False,
) -> None:
    """Show CPUs, caches, cores, P-/E-core types, NUMA nodes, memory kinds and distances.

    Reads this machine's sysfs unless --topology names another machine. Examples:

    \b
      topodra topology
      topodra topology --format json
      topodra topology --topology fixture:20em64t-hybrid-1p6c2t+2ca4co1t
      topodra topology --topology 2s1d2n2l8c2t
    """
    from rich.console import Console

    from topodra.topology.errors import TopologyError
    from topodra.topology.fixtures import FixtureError, fixture_dir, fixture_names
    from topodra.topology.machine import load_machine
    from topodra.topology.serialize import topology_to_dict

    console = Console()
    try:
        if list_fixtures:
            names = fixture_names()
            console.print(f"[bold]{len(names)} fixtures in {fixture_dir()}[/bold]")
            for name in names:
                console.print(name, highlight=False)
            return
        t = load_machine(topology)
    except (TopologyError, FixtureError) as e:
        print_error(str(e))
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

        dumper = getattr(yaml, "CSafeDumper", yaml.SafeDumper)  # libyaml when present: much faster
        typer.echo(yaml.dump(data, Dumper=dumper, sort_keys=False), nl=False)


def topology_check_command(
    fixture: Annotated[
        list[str] | None,
        typer.Option("--fixture", help="Only this fixture (repeatable); default: every fixture."),
    ] = None,
    live: Annotated[
        bool,
        typer.Option("--live/--no-live", help="Also compare with Debian's lstopo-no-graphics on each tree."),
    ] = True,
    root: Annotated[
        Path | None,
        typer.Option(
            "--root",
            help="Instead of fixtures, compare the tree at DIR (/ = this machine) with lstopo.",
            file_okay=False,
        ),
    ] = None,
    verbose: Annotated[
        bool, typer.Option("--verbose", "-v", help="Show every check, not only differences.")
    ] = False,
) -> None:
    """Compare topodra's reading with hwloc's, level by level, and print the match rate.

    Checks packages, NUMA nodes (CPUs and memory), L3 and L2 groups, cores,
    PUs, CPU kinds and distances against the recorded hwloc expectations of
    every fixture and, with --live, against lstopo-no-graphics. Deliberate
    differences are listed with their reason; exit code 1 on any other.
    """
    from rich.console import Console

    from topodra.topology import hwloc
    from topodra.topology.errors import TopologyError
    from topodra.topology.fixtures import FixtureError

    console = Console()
    err = Console(stderr=True)
    try:
        runs = _compare_root(root, err) if root is not None else _compare_fixtures(fixture or [], live, err)
    except (TopologyError, FixtureError, hwloc.HwlocParseError, OSError) as e:
        print_error(str(e))
        raise typer.Exit(1) from None
    _print_check_table(console, runs, verbose)
    all_checks = _print_match_rates(console, runs)
    if any(not c.accepted for c in all_checks):
        raise typer.Exit(1)


#: One comparison: the tree (or expectation) name, what it was compared against, the checks.
_Run = tuple[str, str, list["Check"]]


def _compare_root(root: Path, err: Console) -> list[_Run]:
    """The tree at ``root`` against lstopo-no-graphics (exit 1 when lstopo is missing)."""
    from topodra.topology import hwloc
    from topodra.topology.sysfs import read_topology

    if not hwloc.lstopo_available():
        print_error(f"{hwloc.LSTOPO} is not installed (Debian package 'hwloc')")
        raise typer.Exit(1)
    t = read_topology(root)
    return [(str(root), "lstopo", hwloc.compare(t, hwloc.run_lstopo(root)))]


def _compare_fixtures(fixture: list[str], live: bool, err: Console) -> list[_Run]:
    """Each fixture (all when ``fixture`` is empty) against its recorded hwloc
    expectations and, with ``live``, against lstopo-no-graphics."""
    from rich.progress import track

    from topodra.topology import hwloc
    from topodra.topology.fixtures import FixtureError, fixture_dir, fixture_names, unpacked_fixture
    from topodra.topology.sysfs import read_topology

    runs: list[_Run] = []
    expected_dir = fixture_dir()
    names = fixture or fixture_names()
    known = set(fixture_names())
    for name in names:
        if name not in known:
            raise FixtureError(f"no fixture {name!r} in {expected_dir}")
    tests = [hwloc.parse_test_file(p) for p in sorted(expected_dir.glob("*.test"))]
    if live and not hwloc.lstopo_available():
        err.print(f"[yellow]note:[/yellow] {hwloc.LSTOPO} not installed; live comparison skipped")
        live = False
    for name in track(names, description="comparing", console=err, transient=True):
        if not err.is_terminal:  # no live bar: one line per fixture instead
            err.print(
                f"comparing {name} ({names.index(name) + 1}/{len(names)})",
                highlight=False,
                markup=False,
            )
        tree = unpacked_fixture(name)
        t = read_topology(tree)
        for e in tests:
            if e.fixture == name:
                runs.append((e.name, e.target, hwloc.check_expectation(e, t, expected_dir, tree)))
        if live:
            runs.append((name, "lstopo", hwloc.check_live(name, t, tree)))
    return runs


def _print_check_table(console: Console, runs: list[_Run], verbose: bool) -> None:
    """One row per comparison: differences (every level with ``verbose``), then the reasons
    of the documented ones."""
    from rich.table import Table

    from topodra.topology import hwloc

    table = Table(title="topodra vs hwloc")
    table.add_column("tree", overflow="fold")
    table.add_column("against", overflow="fold")
    table.add_column("match")
    table.add_column("levels", overflow="fold")
    notes: list[str] = []
    for name, against, checks in runs:
        ok, _, total = hwloc.match_rate(checks)
        cells = []
        for c in checks:
            if c.ok:
                if verbose:
                    cells.append(f"[green]{c.level}[/green]")
            elif c.documented:
                cells.append(f"[yellow]{c.level}*[/yellow]")
                notes.append(f"{name} {c.level}: {c.documented}")
            else:
                cells.append(f"[red]{c.level}: {c.detail}[/red]")
        table.add_row(name, against, f"{ok}/{total}", " ".join(cells) or "all equal")
    console.print(table)
    for note in dict.fromkeys(notes):
        console.print(f"[yellow]*[/yellow] {note}", highlight=False)


def _print_match_rates(console: Console, runs: list[_Run]) -> list[Check]:
    """The match rate of the recorded expectations, of live lstopo and of all; returns all checks."""
    from topodra.topology import hwloc

    all_checks = [c for _, _, checks in runs for c in checks]
    for label, subset in (
        ("recorded expectations", [c for _, a, cs in runs if a != "lstopo" for c in cs]),
        ("live lstopo", [c for _, a, cs in runs if a == "lstopo" for c in cs]),
        ("all", all_checks),
    ):
        ok, documented, total = hwloc.match_rate(subset)
        if total:
            console.print(
                f"[bold]{label}:[/bold] {ok}/{total} checks equal ({100 * ok / total:.1f} %), "
                f"{documented} documented differences, {total - ok - documented} unexplained",
                highlight=False,
            )
    return all_checks


def register(app: typer.Typer) -> None:
    """Add ``topology`` and ``topology-check`` to the topodra command line."""
    app.command("topology")(topology_command)
    app.command("topology-check")(topology_check_command)
