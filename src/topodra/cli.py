"""The ``topodra`` command line: one typer app, each part adds its commands."""

from __future__ import annotations

import sys

import typer

from topodra import __version__


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


def make_app(command: str | None = None) -> typer.Typer:
    """The command line with every command, or with only ``command`` (then running the agent
    loads no simulator or playground module)."""
    import importlib

    app = typer.Typer(
        name="topodra",
        help="Topology-aware CPU and memory placement for Kubernetes, with Dynamic Resource Allocation.",
        no_args_is_help=True,
        rich_markup_mode=None,  # help text is plain: brackets and braces in examples stay as written
        pretty_exceptions_enable=False,
        add_completion=False,
    )
    app.callback()(_root)
    modules = [_COMMANDS[command]] if command in _COMMANDS else list(dict.fromkeys(_COMMANDS.values()))
    for module in modules:
        importlib.import_module(module).register(app)
    return app


#: Command name -> the module whose ``register(app)`` adds it.
_COMMANDS: dict[str, str] = {
    "topology": "topodra.topology.cli",
    "topology-check": "topodra.topology.cli",
    "policy": "topodra.policy.commands",
    "dra": "topodra.dra.cli",
    "sim": "topodra.sim.cli",
    "agent": "topodra.agent.cli",
    "playground": "topodra.playground.cli",
    "nri-logger": "topodra.nri.cli",
}


def __getattr__(name: str) -> typer.Typer:
    # ``from topodra.cli import app``: the whole command line (tests, documentation tools).
    if name == "app":
        return make_app()
    raise AttributeError(name)


#: Packages of the optional extras (pyproject.toml) -> the extra that brings them.
_EXTRAS: dict[str, str] = {"numpy": "sim", "matplotlib": "sim", "cel_expr_python": "sim"}


def main() -> None:
    named = next((a for a in sys.argv[1:] if not a.startswith("-")), None)
    app = make_app(named)
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
