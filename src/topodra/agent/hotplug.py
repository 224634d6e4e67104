"""Notice CPUs and NUMA nodes going offline or online, and the isolated set changing.

sysfs raises no inotify events, so the watcher polls the few files the kernel
updates on a hotplug: ``cpu/online``, ``cpu/isolated``, ``node/online``,
``node/has_cpu`` and ``node/has_memory`` (on kernels without ``cpu/online``,
every ``cpuN/online``). Reading them is a handful of small reads per interval;
only a change makes the agent re-read the whole machine (``topology/machine.py``)
and follow it (``Agent.follow_machine``).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import re
from collections.abc import Awaitable, Callable
from pathlib import Path

__all__ = ["MachineWatcher", "watch_root"]

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
