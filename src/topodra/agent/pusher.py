"""Pushes container changes made outside NRI events to the runtime at once.

A claim released by the kubelet, a configuration reload or a restart
correction changes running containers while no NRI event is being answered:
nothing would carry those changes to the runtime until some unrelated event
(the upstream prototype's bug). The pusher sends them right away with an
unsolicited UpdateContainers.

It sends *current* state, not the state captured when the change happened: it
keeps a set of dirty container ids, and at send time reads each one's
assignment from the policy under the policy lock. A change made by an NRI
event while an update is in flight bumps the container's version; if the
version moved by the time the runtime answered, the container is pushed again
(containerd applies our update after any event it was delivering, so the
newer event reply could otherwise be overwritten by our older update).
Failed updates are retried with backoff; updates for containers the policy
no longer knows are dropped. containerd answers a batch in which one update
failed (e.g. a container that just stopped) with an error for the whole call,
after applying the others, and does not say which failed: the pusher counts
the failure and retries only the containers that still exist and that
``unapplied`` (the cgroup check) does not confirm as applied.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass, field

from topodra.nri.errors import NRIError, RpcError
from topodra.nri.types import ContainerUpdate, placement_update
from topodra.policy.api import Assignment

__all__ = ["PushStats", "UpdatePusher", "to_update"]

log = logging.getLogger(__name__)


def to_update(container_id: str, a: Assignment) -> ContainerUpdate:
    """The NRI update for an assignment (mems only when the policy pins memory); an
    ``Assignment`` is known good (never an empty cpuset), so it skips the dataclass checks."""
    return placement_update(container_id, a.cpus, a.mems or None)


@dataclass
class PushStats:
    sent: int = 0
    failed: int = 0
    rounds: int = 0
    rejected_calls: int = 0  # UpdateContainers calls the runtime answered with an error
    narrowed: int = 0  # containers of rejected calls not retried: gone, or confirmed applied
    last_error: str = ""
    history: list[tuple[str, str]] = field(default_factory=list)  # (container, cpus) sent, newest last


class UpdatePusher:
    """Batches dirty containers and sends their current assignments."""

    def __init__(
        self,
        *,
        send: Callable[[list[ContainerUpdate]], asyncio.Future[list[ContainerUpdate]]],
        lookup: Callable[[str], Assignment | None],
        lock: asyncio.Lock,
        retry_delays: Iterable[float] = (0.05, 0.2, 1.0, 2.0, 5.0),
        on_sent: Callable[[int, int], None] | None = None,
        on_sending: Callable[[list[str]], None] | None = None,
        unapplied: Callable[[list[ContainerUpdate]], Awaitable[tuple[list[str], list[str]]]] | None = None,
    ) -> None:
        """``on_sending`` sees the ids of each batch as it goes out; ``unapplied`` tells, after a
        rejected call, which of its updates to send again and which are confirmed applied
        (default: send all again, none confirmed)."""
        self._send = send
        self._lookup = lookup
        self._lock = lock
        self._retry = tuple(retry_delays)
        self._on_sent = on_sent
        self._on_sending = on_sending
        self._unapplied = unapplied
        self._dirty: set[str] = set()
        self._attempts: dict[str, int] = {}
        self._versions: dict[str, int] = {}
        self._wake = asyncio.Event()
        self._idle = asyncio.Event()
        self._idle.set()
        self.stats = PushStats()

    # --- called by the agent -------------------------------------------------------------------
    def bump(self, container_ids: Iterable[str]) -> None:
        """Record that these containers' assignments changed (any cause)."""
        for cid in container_ids:
            self._versions[cid] = self._versions.get(cid, 0) + 1

    def push(self, container_ids: Iterable[str]) -> None:
        """Send these containers' current assignments to the runtime as soon as possible."""
        ids = set(container_ids)
        if not ids:
            return
        self._dirty |= ids
        self._idle.clear()
        self._wake.set()

    def forget(self, container_id: str) -> None:
        self._dirty.discard(container_id)
        self._attempts.pop(container_id, None)
        self._versions.pop(container_id, None)

    async def wait_idle(self, timeout: float | None = None) -> None:
        """Until nothing is left to send (tests, shutdown)."""
        await asyncio.wait_for(self._idle.wait(), timeout)

    @property
    def pending(self) -> frozenset[str]:
        return frozenset(self._dirty)

    @property
    def idle(self) -> bool:
        """Nothing queued and nothing on the wire."""
        return self._idle.is_set()

    # --- the task -------------------------------------------------------------------------------
    async def run(self) -> None:
        while True:
            await self._wake.wait()
            self._wake.clear()
            if not self._dirty:
                self._idle.set()
                continue
            await self._round()
            if not self._dirty:
                self._idle.set()

    async def _round(self) -> None:
        async with self._lock:
            batch: list[ContainerUpdate] = []
            versions: dict[str, int] = {}
            for cid in sorted(self._dirty):
                a = self._lookup(cid)
                if a is None:  # gone (removed, or not ours)
                    self.forget(cid)
                    continue
                batch.append(to_update(cid, a))
                versions[cid] = self._versions.get(cid, 0)
            self._dirty.clear()
        if not batch:
            return
        self.stats.rounds += 1
        if self._on_sending is not None:
            self._on_sending([u.container_id for u in batch])
        try:
            failed = await self._send(batch)
        except RpcError as exc:
            # The runtime refused the call: containerd applied the others and does not say which
            # failed. Retry only what still exists and is not confirmed applied.
            self.stats.last_error = str(exc)
            self.stats.rejected_calls += 1
            retry, confirmed = await self._narrow(batch)
            applied = [u for u in batch if u.container_id in confirmed]
            self._record_sent(applied)
            self.stats.failed += len(batch) - len(applied)
            self.stats.narrowed += len(batch) - len(retry)
            if self._on_sent is not None:
                self._on_sent(len(applied), len(batch) - len(applied))
            log.warning(
                "runtime rejected an update of %d container(s) (%s); retrying %s",
                len(batch), self.stats.last_error, ", ".join(retry) or "none",
            )
            await self._retry_later(retry)
            self._push_moved(versions)
            return
        except (NRIError, TimeoutError, OSError) as exc:
            # Not connected, or the connection broke: a reconnect re-synchronizes everything,
            # but keep trying in case the runtime is still there.
            self.stats.last_error = str(exc) or type(exc).__name__
            log.warning("unsolicited update of %d container(s) failed: %s", len(batch), self.stats.last_error)
            await self._retry_later([u.container_id for u in batch])
            return
        failed_ids = {u.container_id for u in failed}
        ok = [u for u in batch if u.container_id not in failed_ids]
        self._record_sent(ok)
        self.stats.failed += len(failed_ids)
        if self._on_sent is not None:
            self._on_sent(len(ok), len(failed_ids))
        if failed_ids:
            log.warning("runtime refused updates of %s", ", ".join(sorted(failed_ids)))
            await self._retry_later(sorted(failed_ids))
        self._push_moved(versions)

    def _record_sent(self, ok: list[ContainerUpdate]) -> None:
        self.stats.sent += len(ok)
        for u in ok:
            self._attempts.pop(u.container_id, None)
            self.stats.history.append((u.container_id, str(u.cpus)))
            log.info("pushed container %s: cpus %s mems %s", u.container_id, u.cpus, u.mems or "-")
        del self.stats.history[:-256]

    def _push_moved(self, versions: dict[str, int]) -> None:
        # A newer change landed while our update was on the wire: send the newest state again.
        moved = [cid for cid, v in versions.items() if self._versions.get(cid, 0) != v]
        if moved:
            self.push(moved)

    async def _narrow(self, batch: list[ContainerUpdate]) -> tuple[list[str], set[str]]:
        """Of a rejected batch: the ids worth sending again (still ours, not confirmed applied),
        and the ids confirmed applied."""
        live = [u for u in batch if self._lookup(u.container_id) is not None]
        everything = sorted(u.container_id for u in live)
        if self._unapplied is None:
            return everything, set()
        try:
            retry, confirmed = await self._unapplied(live)
        except Exception:  # a failed check must not lose the retry
            log.exception("checking which updates were applied failed")
            return everything, set()
        return sorted(set(retry)), set(confirmed)

    async def _retry_later(self, ids: list[str]) -> None:
        due: list[str] = []
        delay = 0.0
        for cid in ids:
            n = self._attempts.get(cid, 0)
            if n >= len(self._retry):
                log.error("giving up pushing container %s after %d attempts", cid, n)
                self._attempts.pop(cid, None)
                continue
            self._attempts[cid] = n + 1
            delay = max(delay, self._retry[n])
            due.append(cid)
        if due:
            await asyncio.sleep(delay)
            self.push(due)
