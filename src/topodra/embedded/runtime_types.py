"""What the embedded runtime's components share: its records, settings, log and error wording.

``EmbeddedRuntime`` (``embedded/runtime.py``) holds the settings as plain attributes that
tests may change while it runs (``online_cpus``, ``start_gate``...); each component reads
them through ``RuntimeSettings`` when it acts, never a copy taken at construction.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Final, Protocol

from topodra.cpuset import CPUSet
from topodra.nri.errors import NRIError, RpcError
from topodra.nri.ttrpc import code_name
from topodra.nri.types import Container, ContainerAdjustment, ContainerUpdate, Event, Pod
from topodra.nri.version import NRIVersion

__all__ = [
    "V0_7",
    "V0_10",
    "V0_12",
    "V0_12_1",
    "ContainerChange",
    "EventResult",
    "PluginInfo",
    "RuntimeJournal",
    "RuntimeSettings",
    "RuntimeUsageError",
    "rpc_reason",
]

#: every component logs under the runtime's one logger name (benchmarks quieten it by that name)
log = logging.getLogger("topodra.embedded.runtime")

V0_7: Final = NRIVersion(0, 7, 0)
V0_10: Final = NRIVersion(0, 10, 0)
V0_12: Final = NRIVersion(0, 12, 0)
V0_12_1: Final = NRIVersion(0, 12, 1)


class RuntimeUsageError(NRIError):
    """A caller mistake against the embedded runtime (unknown id, bad state)."""


@dataclass(frozen=True, slots=True)
class PluginInfo:
    """A plugin as the runtime sees it."""

    name: str
    idx: str
    events: frozenset[Event]
    launched: bool
    synchronized: bool
    closed: bool
    state_change_fallback: bool
    nri_version: str
    close_reason: str | None = None

    @property
    def id(self) -> str:
        return f"{self.idx}-{self.name}"


@dataclass(frozen=True, slots=True)
class ContainerChange:
    """A container's cpus or mems changed (``source``: adjustment, update, unsolicited, synchronize)."""

    container_id: str
    cpus: CPUSet | None
    mems: CPUSet | None
    previous_cpus: CPUSet | None
    previous_mems: CPUSet | None
    source: str
    plugin: str | None = None


@dataclass(frozen=True, slots=True)
class EventResult:
    """What one runtime operation did; ``error`` is what the CRI call would return."""

    event: str
    pod: Pod | None = None
    container: Container | None = None
    adjustment: ContainerAdjustment | None = None
    updates: tuple[ContainerUpdate, ...] = ()
    failed_updates: tuple[ContainerUpdate, ...] = ()
    error: str | None = None
    plugins: tuple[str, ...] = ()
    dropped: tuple[str, ...] = ()

    @property
    def ok(self) -> bool:
        return self.error is None

    def check(self) -> EventResult:
        """Return self, or raise ``NRIError`` with the error."""
        if self.error is not None:
            raise NRIError(f"{self.event}: {self.error}")
        return self


class RuntimeSettings(Protocol):
    """The runtime's settings as its components read them (``EmbeddedRuntime`` holds them)."""

    socket_path: Path | None
    runtime_name: str
    runtime_version: str
    nri_version: str
    version: NRIVersion
    registration_timeout: float
    request_timeout: float
    plugin_config: dict[str, str]
    plugin_dir: Path | None
    online_cpus: CPUSet | None
    online_mems: CPUSet | None
    fail_updates: set[str]
    go_frame_rules: bool
    on_change: Callable[[ContainerChange], None] | None
    start_delay: float
    start_gate: Callable[[str], Awaitable[None]] | None
    cgroup_root: Path | None


class RuntimeJournal:
    """The runtime's human-readable record of what happened, like a runtime's log."""

    def __init__(self) -> None:
        self.lines: list[str] = []

    def note(self, text: str, level: int = logging.INFO) -> None:
        self.lines.append(text)
        log.log(level, "%s", text)


def rpc_reason(exc: BaseException) -> str:
    """An error as containerd words it in what it returns and logs."""
    if isinstance(exc, RpcError):
        return f"rpc error: code = {code_name(exc.code)} desc = {exc.message}"
    return str(exc)
