"""How every command reports bad input: each line of the message as ``error: LINE`` on stderr,
printed as written (no markup, never wrapped inside), then a non-zero exit."""

from __future__ import annotations

import typer

__all__ = ["fail", "print_error"]


def print_error(message: str) -> None:
    """``error: LINE`` on stderr for each line of ``message`` ("error:" in red on a terminal)."""
    for line in message.splitlines() or [""]:
        typer.secho("error:", fg="red", err=True, nl=False)
        typer.echo(f" {line}", err=True)


def fail(message: str, code: int = 2) -> typer.Exit:
    """Print ``message`` as errors and return the ``typer.Exit`` to raise (``raise fail(...)``)."""
    print_error(message)
    return typer.Exit(code)
