"""The ``topodra`` command line: one typer app, each part adds its commands."""

from __future__ import annotations

import typer

from topodra import __version__

app = typer.Typer(
    name="topodra",
    help="Topology-aware CPU and memory placement for Kubernetes, with Dynamic Resource Allocation.",
    no_args_is_help=True,
    rich_markup_mode="rich",
    pretty_exceptions_enable=False,
    add_completion=False,
)


def _version(value: bool) -> None:
    if value:
        typer.echo(f"topodra {__version__}")
        raise typer.Exit()


@app.callback()
def _root(
    version: bool = typer.Option(
        False, "--version", help="Print the version and exit.", callback=_version, is_eager=True
    ),
) -> None:
    """topodra: topology-aware CPU placement for Kubernetes with DRA."""


def _register() -> None:
    # Each part owns a command module with ``register(app)``; import them here so
    # `topodra --help` lists every command. Heavy imports stay inside the commands.
    import importlib

    for module in _COMMAND_MODULES:
        importlib.import_module(module).register(app)


_COMMAND_MODULES: list[str] = [
    "topodra.topology.cli",
    "topodra.policy.commands",
    "topodra.dra.cli",
    "topodra.sim.cli",
    "topodra.agent.cli",
    "topodra.playground.cli",
    "topodra.nri.cli",
]


_register()


def main() -> None:
    app()
