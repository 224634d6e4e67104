"""The ``topodra`` command line: one typer app, each part adds its commands.

Start-up is kept short (``topodra sim run`` on a small cluster in well under a second):
only the module of the command being run is imported (``topodra --help`` imports none:
it lists the commands from :data:`_COMMANDS`), and plain parameters are converted
without pydantic (:func:`_fast_coercion`), whose import and per-parameter schema
building were a third of a small run's start.
"""

from __future__ import annotations

import gc
import os
import re
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any


@contextmanager
def paused_gc() -> Iterator[None]:
    """The cyclic collector off for a block of imports, then as it was, with what the block
    built frozen (``gc.freeze``: left out of later collections). Imports build many
    long-lived objects and almost no garbage, and the collector's passes over them were
    ~10 % of a small ``sim run``; without the freeze the next collection pays them at once."""
    collecting = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        gc.freeze()
        if collecting:
            gc.enable()


# typer's import is a fifth of a small run's; importing this module therefore freezes what
# is loaded so far (harmless for a command line, and the agent freezes its start-up anyway).
with paused_gc():
    import typer

    from topodra import __version__

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
        add_completion=False,
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
_EXTRAS: dict[str, str] = {"numpy": "sim", "matplotlib": "sim", "cel_expr_python": "sim"}

_INT = re.compile(r"-?(0|[1-9][0-9]*)")
_FLOAT = re.compile(r"-?[0-9]+(\.[0-9]+)?")


class _PlainParam:
    """typer's runtime conversion of one parameter, for the plain cases without pydantic.

    Absent values, bools, strings (one or a list), and int/float values written plainly
    (``12``, ``0.5``) within the parameter's min/max convert here to exactly what typer's
    pydantic adapter gives; anything else (an error to report, other spellings, other
    types) goes to typer's own conversion, built on first need, so values and messages
    stay typer's.
    """

    def __init__(self, descriptor: Any, build: Callable[[Any], Any]) -> None:
        self._descriptor = descriptor
        self._build = build
        self._full: Any = None
        info = descriptor.parameter_info
        self._min, self._max = info.min, info.max
        self._kind: Any = descriptor.annotation

    def coerce(self, value: Any, param: Any, ctx: Any) -> Any:
        kind = self._kind
        multi = param.multiple or param.nargs == -1
        if value is None:  # as typer: nothing given and no default
            return () if multi else None
        out: Any = None
        if kind is str or kind is bool:
            if type(value) is kind:
                return value
        elif kind == list[str]:
            if isinstance(value, (list, tuple)) and all(type(v) is str for v in value):
                return list(value)
        elif kind is int:
            if type(value) is int:
                out = value
            elif type(value) is str and _INT.fullmatch(value):
                out = int(value)
        elif kind is float and (type(value) in (int, float) or (type(value) is str and _FLOAT.fullmatch(value))):
            out = float(value)
        if out is not None and (self._min is None or out >= self._min) and (self._max is None or out <= self._max):
            return out
        if self._full is None:
            self._full = self._build(self._descriptor)
        return self._full.coerce(value, param=param, ctx=ctx)


def _fast_coercion() -> None:
    """Convert plain parameters without building pydantic adapters (see :class:`_PlainParam`).
    Leaves typer alone if its internals are not the expected ones."""
    try:
        from typer import core
    except ImportError:  # pragma: no cover - another typer layout
        return
    build = getattr(core, "build_runtime_param", None)
    if build is None or getattr(build, "_topodra_plain", False):
        return

    def build_runtime_param(descriptor: Any) -> Any:
        info = getattr(descriptor, "parameter_info", None)
        plain = (
            info is not None
            and getattr(descriptor, "file_annotation", None) is None
            and getattr(info, "parser", None) is None
            and getattr(info, "click_type", None) is None
            and not getattr(info, "clamp", False)
        )
        return _PlainParam(descriptor, build) if plain else build(descriptor)

    build_runtime_param._topodra_plain = True  # type: ignore[attr-defined]
    setattr(core, "build_runtime_param", build_runtime_param)  # noqa: B010 - typer.core's private name


def _exit_without_teardown(done: SystemExit) -> None:
    """End the process now with DONE's status, skipping the interpreter's tear-down (freeing
    every module, numpy's and the CEL runtime's included: ~35 ms, a sixth of a small ``sim
    run``), when skipping it changes nothing: an integer status, stdout and stderr flushed,
    no exit handler registered and no other thread. Otherwise returns, to exit as usual.
    (Every file a command writes is closed by then: ``with`` blocks and ``write_text``.)"""
    import atexit
    import threading

    code = done.code
    if not (code is None or isinstance(code, int)) or atexit._ncallbacks() or threading.active_count() > 1:
        return
    try:
        sys.stdout.flush()
        sys.stderr.flush()
    except (OSError, ValueError):  # a closed pipe or stream: the usual exit reports it
        return
    os._exit(code or 0)


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
    with paused_gc():
        _fast_coercion()
        app = make_app(named, sub) if named in _COMMANDS else listing_app()
    try:
        app()
    except SystemExit as done:
        if named == "sim":
            _exit_without_teardown(done)
        raise
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
