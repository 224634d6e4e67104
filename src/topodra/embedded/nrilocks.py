"""containerd's two NRI locks, taken in the order each release takes them, with deadlock detection.

containerd v2.0 to v2.3 (``internal/nri/nri.go``) serialises NRI with the mutex of its ``local``
type: every CRI lifecycle call (RunPodSandbox ... RemoveContainer, and a task's exit) takes it
first, then calls the NRI adaptation, whose event methods (``pkg/adaptation/adaptation.go``) take
the ``Adaptation`` mutex while they deliver the event to the plugins. Updates a plugin returns
in an event reply are applied by ``local`` under the lock it already holds.

A plugin's unsolicited ``UpdateContainers`` reaches ``Adaptation.updateContainers``. Up to NRI
v0.12.0 (containerd v2.3.x vendors it) that takes the ``Adaptation`` mutex and then calls
containerd's ``local.updateFromPlugin``, which takes ``local``'s mutex: the opposite order. A CRI
call that has taken ``local``'s mutex and is about to take the adaptation's, and an update that
has taken the adaptation's, wait for each other for good (containerd#13733). Since NRI v0.12.1
(containerd/nri#301) ``updateContainers`` takes no adaptation lock, so the update only waits for
the event being delivered.

``NRILocks`` reproduces both orders. It keeps a wait-for graph of the tasks holding and waiting
for the two locks and raises ``RuntimeHung`` in the task that closes a cycle: the real runtime
would hang there. From then on every lifecycle call fails with the same error, as no CRI call
would return any more. ``between`` is called by a lifecycle call after it took ``local``'s lock
and before it takes the adaptation's (containerd builds the NRI request there), so a test can
open that window deterministically.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field

from topodra.nri.errors import NRIError

__all__ = ["NRILocks", "RuntimeHung"]


class RuntimeHung(NRIError):
    """The runtime's NRI locks deadlocked; the real runtime would never answer again."""


@dataclass(eq=False)
class _Lock:
    name: str
    mutex: asyncio.Lock = field(default_factory=asyncio.Lock)
    owner: asyncio.Task[object] | None = None
    owner_label: str = ""


class NRILocks:
    """The local NRI lock and the adaptation lock of one runtime (see the module docstring).

    ``inverted_updates``: unsolicited updates take the adaptation lock, then the local one
    (NRI < v0.12.1). ``serialize_updates=False`` models a runtime that applies unsolicited
    updates without any lock.
    """

    def __init__(
        self,
        *,
        inverted_updates: bool,
        serialize_updates: bool = True,
        between: Callable[[str], Awaitable[None]] | None = None,
    ) -> None:
        self.local = _Lock("the local NRI lock")
        self.adaptation = _Lock("the NRI adaptation lock")
        self.inverted_updates = inverted_updates
        self.serialize_updates = serialize_updates
        self.between = between
        #: one line per deadlock found (the runtime hangs at the first)
        self.deadlocks: list[str] = []
        self._waiting: dict[asyncio.Task[object], tuple[_Lock, str]] = {}
        self.changed = asyncio.Event()  # set whenever a task starts waiting (tests watch it)

    @property
    def hung(self) -> bool:
        return bool(self.deadlocks)

    def waiting(self, label_prefix: str) -> int:
        """How many tasks whose label starts with ``label_prefix`` wait for a lock now."""
        return sum(1 for _, label in self._waiting.values() if label.startswith(label_prefix))

    @asynccontextmanager
    async def lifecycle(self, label: str) -> AsyncIterator[None]:
        """A CRI call delivering an NRI event: local lock, then the adaptation lock."""
        self._check_alive()
        async with self._hold(self.local, label):
            if self.between is not None:
                await self.between(label)
            async with self._hold(self.adaptation, label):
                yield

    @asynccontextmanager
    async def synchronize(self, label: str) -> AsyncIterator[None]:
        """Synchronizing a new plugin: containerd's syncPlugin holds the local lock only."""
        self._check_alive()
        async with self._hold(self.local, label):
            yield

    @asynccontextmanager
    async def unsolicited(self, label: str) -> AsyncIterator[None]:
        """A plugin's UpdateContainers: adaptation then local lock (NRI < v0.12.1), else local only."""
        self._check_alive()
        if not self.serialize_updates:
            yield
        elif self.inverted_updates:
            async with self._hold(self.adaptation, label), self._hold(self.local, label):
                yield
        else:
            async with self._hold(self.local, label):
                yield

    def _check_alive(self) -> None:
        if self.deadlocks:
            raise RuntimeHung(f"runtime hung: {self.deadlocks[0]}")

    @asynccontextmanager
    async def _hold(self, lock: _Lock, label: str) -> AsyncIterator[None]:
        task = asyncio.current_task()
        assert task is not None
        if lock.mutex.locked():
            cycle = self._cycle(task, lock, label)
            if cycle is not None:
                self.deadlocks.append(cycle)
                raise RuntimeHung(f"runtime hung: {cycle}")
        self._waiting[task] = (lock, label)
        self.changed.set()
        try:
            await lock.mutex.acquire()
        finally:
            del self._waiting[task]
        try:
            self._check_alive()  # a deadlock found while we waited: the real runtime never got here
        except RuntimeHung:
            lock.mutex.release()
            raise
        lock.owner, lock.owner_label = task, label
        try:
            yield
        finally:
            lock.owner, lock.owner_label = None, ""
            lock.mutex.release()

    def _cycle(self, task: asyncio.Task[object], wanted: _Lock, label: str) -> str | None:
        """The deadlock ``task`` would close by waiting for ``wanted``, described; else None."""
        held = next((lk for lk in (self.local, self.adaptation) if lk.owner is task), None)
        steps: list[str] = []
        lock: _Lock | None = wanted
        while lock is not None and lock.owner is not None:
            if lock.owner is task:
                assert held is not None
                chain = ", ".join(steps)
                return (
                    f"{label} holds {held.name} and waits for {wanted.name}; {chain}"
                    " (containerd#13733, fixed in NRI v0.12.1)"
                )
            waits = self._waiting.get(lock.owner)
            if waits is None:
                return None
            steps.append(f"{lock.name} is held by {lock.owner_label}, which waits for {waits[0].name}")
            lock = waits[0]
        return None
