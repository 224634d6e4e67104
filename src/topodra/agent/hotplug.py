"""Notice CPUs and NUMA nodes going offline or online, and the isolated set changing.

sysfs raises no inotify events, so the watcher polls the few files the kernel
updates on a hotplug: ``cpu/online``, ``cpu/isolated``, ``node/online``,
``node/has_cpu`` and ``node/has_memory`` (on kernels without ``cpu/online``,
every ``cpuN/online``). Reading them is a handful of small reads per interval;
only a change makes the agent re-read the whole machine (``topology/machine.py``)
and follow it (``Agent.follow_machine``).

``MachineFollower`` follows a re-read machine in two steps the agent runs in turn: ``place``
(the policy re-places every container, under the lock: the moved containers are pushed at once)
and ``devices`` (rebuilt off the loop for the new machine: those of offline CPUs stay listed and
are reported Unhealthy; the devices are then published).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import re
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import TYPE_CHECKING

from topodra.agent.metrics import AgentMetrics
from topodra.agent.observe import EventLog
from topodra.agent.state import NodeState
from topodra.dra.devices import Device, build_devices, follow_devices
from topodra.policy.api import Changes, PolicyError
from topodra.topology.follow import carry_numbers
from topodra.topology.model import Topology

if TYPE_CHECKING:
    from topodra.dra.status import ClaimStatus

__all__ = ["MachineFollower", "MachineWatcher", "watch_root"]

log = logging.getLogger(__name__)

_CPU_DIR = "sys/devices/system/cpu"
_NODE_DIR = "sys/devices/system/node"
_FILES = (
    f"{_CPU_DIR}/online",
    f"{_CPU_DIR}/isolated",
    f"{_NODE_DIR}/online",
    f"{_NODE_DIR}/has_cpu",
    f"{_NODE_DIR}/has_memory",
)
_CPU_NAME = re.compile(r"cpu[0-9]+\Z")


def watch_root(topology: str | None, sysfs_root: Path) -> Path | None:
    """The sysfs root the agent's machine is read from, or None for a machine that cannot
    change (a synthetic machine or a fixture)."""
    text = (topology or "host").strip()
    if text in ("host", "/"):
        return sysfs_root
    if "/" in text or text.startswith("."):
        return Path(text)
    return None


def _read(path: Path) -> str | None:
    try:
        return path.read_text().strip()
    except OSError:
        return None


class MachineWatcher:
    """Polls the hotplug files under ``root`` every ``interval`` seconds; calls ``on_change``
    (which answers whether it applied the change: if not, the next poll tries again)."""

    def __init__(self, root: Path, interval: float, on_change: Callable[[], Awaitable[bool]]) -> None:
        self.root = root
        self.interval = interval
        self._on_change = on_change
        self._seen = self.fingerprint()

    def fingerprint(self) -> tuple[str | None, ...]:
        """The watched files' contents."""
        values = tuple(_read(self.root / rel) for rel in _FILES)
        if values[0] is None:  # an old kernel: only the per-CPU files
            cpu_dir = self.root / _CPU_DIR
            with contextlib.suppress(OSError):
                per_cpu = sorted(p.name for p in cpu_dir.iterdir() if _CPU_NAME.match(p.name))
                values += tuple(f"{n}={_read(cpu_dir / n / 'online')}" for n in per_cpu)
        return values

    async def poll(self) -> bool:
        """One poll: True if the files changed and ``on_change`` applied it."""
        now = self.fingerprint()
        if now == self._seen:
            return False
        if not await self._on_change():
            return False
        self._seen = now
        return True

    async def run(self, stop: asyncio.Event) -> None:
        while not stop.is_set():
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(stop.wait(), self.interval)
            if stop.is_set():
                return
            try:
                await self.poll()
            except Exception:  # never let one bad read end the watch
                log.exception("following the machine failed; trying again in %.1f s", self.interval)


class MachineFollower:
    """Follows a re-read machine. ``claim_status``: set once the DRA side is up (claims on
    offline CPUs turn Ready=False, and back)."""

    def __init__(self, state: NodeState, metrics: AgentMetrics, notes: EventLog) -> None:
        self.state = state
        self.metrics = metrics
        self.notes = notes
        self.claim_status: ClaimStatus | None = None

    async def place(self, topology: Topology) -> tuple[Topology, Changes] | None:
        """The policy follows ``topology`` (CPU numbers carried): (the machine before, the moved
        containers). None when no placement fits it (the old machine is kept, and said so)."""
        state = self.state
        async with state.lock:
            carried = carry_numbers(state.seen_cpus, topology)
            before = state.topology
            try:
                changes = state.policy.follow(carried)
            except (PolicyError, ValueError) as err:
                self.metrics.machine_changes.labels("refused").inc()
                self.notes.note(f"machine changed (online CPUs {carried.online}) but no placement fits it: {err}")
                return None
            state.topology = carried
            state.seen_cpus.update(carried.cpus)
            self.metrics.machine_changes.labels("applied").inc()
        return before, changes

    async def devices(self, before: Topology, moved: int) -> list[Device] | None:
        """The devices for the machine ``place`` followed (``before``: the one it left; ``moved``:
        the containers it moved); None when a newer change got here first (it builds its own)."""
        state = self.state
        carried = state.topology
        try:  # ~0.1 s on a 512-CPU node: off the loop
            fresh = await asyncio.to_thread(build_devices, carried, state.config.devices, reserved=state.policy.reserved_cpus)
        except ValueError as err:  # an attribute hook failing on the new machine: keep what we had
            log.error("devices after the machine change: %s; keeping the previous ones", err)
            fresh = []
        async with state.lock:
            if state.topology is not carried:
                return None
            devices = follow_devices(state.devices, fresh, carried.online)
            if self.claim_status is not None:
                self.claim_status.follow(carried.online, state.node_of())
        gone, back = before.online - carried.online, carried.online - before.online
        self.notes.note(
            f"machine changed: CPUs offline {gone or '-'}, back online {back or '-'}, isolated {carried.isolated or '-'}; "
            f"{moved} container(s) moved"
        )
        for uid, cpus in state.policy.offline_claims().items():
            self.notes.note(f"claim {uid} holds offline CPUs {cpus}: its containers run on the rest until they return")
        return devices
