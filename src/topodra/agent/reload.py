"""Configuration reload: a changed file (or a configuration handed in) is checked as a fresh
start would check it, the policy reconfigured under the lock, the devices rebuilt.

``ConfigReloader.reload`` returns what changed (the moved containers and the devices to publish);
the agent hands those to the router and the device publisher. Fields that take effect only at
a restart keep their old values (and a warning says so).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path

from topodra.agent.config import AgentConfig, ConfigError, load_config
from topodra.agent.config_check import check_on_machine
from topodra.agent.metrics import AgentMetrics
from topodra.agent.observe import EventLog
from topodra.agent.state import NodeState
from topodra.dra.devices import Device, follow_devices
from topodra.policy.api import Changes, PolicyError

__all__ = ["RESTART_ONLY", "ConfigReloader", "Reloaded"]

log = logging.getLogger("topodra.agent.agent")

#: Configuration fields that change only at a restart.
RESTART_ONLY = (
    "nri", "dra", "kube", "kubelet_root", "cdi_dir", "state_dir", "metrics_address", "state_address", "node_name",
)


@dataclass(frozen=True)
class Reloaded:
    """A reload applied: the containers it moved, the devices to publish (the same list object
    when they did not change)."""

    changes: Changes
    devices: list[Device]


class ConfigReloader:
    """Applies a changed configuration to the node's state; ``watch`` polls the file."""

    def __init__(self, state: NodeState, path: Path | None, metrics: AgentMetrics, notes: EventLog) -> None:
        self.state = state
        self.path = path
        self.metrics = metrics
        self.notes = notes
        self._mtime = self.mtime()

    def mtime(self) -> float | None:
        if self.path is None:
            return None
        try:
            return self.path.stat().st_mtime
        except OSError:
            return None

    async def watch(self, stop: asyncio.Event, interval: float, changed: Callable[[], Awaitable[object]]) -> None:
        """Every ``interval`` seconds until ``stop``: call ``changed`` when the file's mtime moved."""
        while not stop.is_set():
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(stop.wait(), interval)
            mtime = self.mtime()
            if mtime is not None and mtime != self._mtime:
                self._mtime = mtime
                await changed()

    async def reload(self, new: AgentConfig | None = None) -> Reloaded | None:
        """Apply the file (or ``new``); None when a fresh start would refuse it (``check_on_machine``,
        the same checks as ``--check``) or the policy refuses it: logged, and nothing changes."""
        state = self.state
        source = str(self.path or "the configuration")
        try:
            if new is None:
                assert self.path is not None
                new = load_config(self.path)
            checked = check_on_machine(new, state.topology, source)
        except ConfigError as err:
            self.metrics.config_reloads.labels("invalid").inc()
            log.error("configuration reload ignored: %s", err)
            self.notes.note("configuration reload ignored (invalid): see the log")
            return None
        old = state.config
        changes: Changes = {}
        if new.policy != old.policy:
            async with state.lock:
                try:
                    changes = state.policy.reconfigure(new.policy)
                except (PolicyError, ValueError) as err:
                    self.metrics.config_reloads.labels("refused").inc()
                    log.error("configuration reload refused by the policy: %s", err)
                    self.notes.note(f"configuration reload refused: {err}")
                    return None
        devices = state.devices
        if new.devices != old.devices or new.policy != old.policy:
            devices = checked.devices
            if (new.devices.model, new.devices.group_by) == (old.devices.model, old.devices.group_by):
                devices = follow_devices(state.devices, devices, state.topology.online)  # offline ones stay listed
        restart_only = {k for k in RESTART_ONLY if getattr(new, k) != getattr(old, k)}
        if restart_only:
            log.warning("configuration fields %s change only at restart", ", ".join(sorted(restart_only)))
            new = new.model_copy(update={k: getattr(old, k) for k in restart_only})
        state.config = new
        self.metrics.config_reloads.labels("applied").inc()
        self.notes.note(f"configuration reloaded: {len(changes)} container(s) moved")
        return Reloaded(changes, devices)
