"""The ``topodra`` command line: one typer app, each part adds its commands.

Start-up is kept short: only the module of the command being run is imported
(``topodra --help`` imports none: it lists the commands from :data:`_COMMANDS`).
"""

from __future__ import annotations

import os
import sys

import typer

from topodra import __version__
from topodra.extras import EXTRA_PACKAGES

_HELP = "Topology-aware CPU and memory placement for Kubernetes, with Dynamic Resource Allocation."


def _version(value: bool) -> None:
    if value:
        typer.echo(f"topodra {__version__}")
        raise typer.Exit()


def _root(
    version: bool = typer.Option(
        False, "--version", help="Print the version and exit.", callback=_version, is_eager=True
    ),
) -> None:
    """topodra: topology-aware CPU placement for Kubernetes with DRA."""


def _new_app() -> typer.Typer:
    app = typer.Typer(
        name="topodra",
        help=_HELP,
        no_args_is_help=True,
        rich_markup_mode=None,  # help text is plain: brackets and braces in examples stay as written
        pretty_exceptions_enable=False,
        add_completion=True,  # --install-completion, --show-completion
    )
    app.callback()(_root)
    return app


def make_app(command: str | None = None, subcommand: str | None = None) -> typer.Typer:
    """The command line with every command, or with only ``command`` (then running the agent
    loads no simulator or playground module). A group whose module has
    ``register_subcommand(app, name)`` holds only ``subcommand`` when that names one of its
    commands: typer builds every option of every command of a group before running one
    (a third of ``sim``'s command-line set-up went to the five commands not run)."""
    import importlib

    app = _new_app()
    if command in _COMMANDS:
        module = importlib.import_module(_COMMANDS[command][0])
        one = getattr(module, "register_subcommand", None)
        if subcommand is None or one is None or not one(app, subcommand):
            module.register(app)
        return app
    for name in dict.fromkeys(m for m, _ in _COMMANDS.values()):
        importlib.import_module(name).register(app)
    return app


def listing_app() -> typer.Typer:
    """The top level only (``topodra``, ``topodra --help``, ``--version``): every command listed
    with its help, none of their modules imported. Never runs a command: ``main`` builds the
    real command when one is named."""
    app = _new_app()
    for name, (_, short) in sorted(_COMMANDS.items(), key=lambda kv: (kv[0] in _GROUPS, _ORDER.index(kv[1][0]))):

        def listed() -> None:
            raise AssertionError("listing_app() lists commands, it does not run them")  # pragma: no cover

        app.command(name, help=short, add_help_option=False)(listed)
    return app


#: Command name -> (the module whose ``register(app)`` adds it, its help as ``topodra --help``
#: lists it). ``tests/test_cli_start.py`` checks these against the commands themselves.
_COMMANDS: dict[str, tuple[str, str]] = {
    "topology": ("topodra.topology.cli", "Show CPUs, caches, cores, P-/E-core types, NUMA nodes, memory kinds and distances."),
    "topology-check": ("topodra.topology.cli", "Compare topodra's reading with hwloc's, level by level, and print the match rate."),
    "policy": ("topodra.policy.commands", "The topology-aware placement policy: pool trees and dry-run placements."),
    "dra": ("topodra.dra.cli", "The native.cpu DRA driver: devices, ResourceSlices, DeviceClass, and an API server double."),
    "sim": ("topodra.sim.cli", "Cluster-scale DRA allocation simulator: kube-scheduler's allocator over synthetic clusters."),
    "agent": ("topodra.agent.cli", "Run the node agent: NRI plugin, DRA kubelet plugin, ResourceSlices and metrics."),
    "playground": ("topodra.playground.cli", "Run topodra's agent on a simulated node with an embedded runtime, kubelet and scheduler."),
    "nri-logger": ("topodra.nri.cli", "Register as an NRI plugin and log every event the runtime delivers."),
}
#: Commands that are groups (typer lists single commands first, then groups, each in registration order).
_GROUPS = frozenset({"policy", "dra", "sim"})
_ORDER = list(dict.fromkeys(m for m, _ in _COMMANDS.values()))


def __getattr__(name: str) -> typer.Typer:
    # ``from topodra.cli import app``: the whole command line (tests, documentation tools).
    if name == "app":
        return make_app()
    raise AttributeError(name)


#: Packages of the optional extras (pyproject.toml) -> the extra that brings them.
_EXTRAS: dict[str, str] = {package: extra for extra, packages in EXTRA_PACKAGES.items() for package in packages}


def main() -> None:
    words = [a for a in sys.argv[1:] if not a.startswith("-")]
    named = words[0] if words else None
    if named == "sim":
        # numpy's OpenBLAS starts a worker thread per core when numpy is imported, and each
        # spins for work for a while: ~0.1 s of CPU on this 2-core machine, a third of a small
        # run's. The simulator's only BLAS call is a (nodes x 5) product, single-threaded
        # below ~1,800 nodes anyway. An explicit setting wins.
        os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
    # the subcommand of a group: the next word, unless an option came between (a value, maybe)
    sub = words[1] if len(words) > 1 and sys.argv[1:].index(words[1]) == sys.argv[1:].index(words[0]) + 1 else None
    app = make_app(named, sub) if named in _COMMANDS else listing_app()
    try:
        app()
    except ModuleNotFoundError as err:
        # The core install is the node agent's; the simulator and the playground need an extra.
        top = (err.name or "").split(".")[0]
        if top not in _EXTRAS:
            raise
        extra = _EXTRAS[top]
        typer.echo(
            f"error: this command needs the optional '{extra}' dependencies ({top} is not installed): "
            f"pip install 'topodra[{extra}]'",
            err=True,
        )
        raise SystemExit(2) from None
