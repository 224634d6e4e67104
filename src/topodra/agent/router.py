"""Where every placement change goes: the only place that decides how a change reaches the runtime.

- A change made by an NRI event travels in that event's reply (``reply``, ``updates``).
- A change made by anything else (a claim prepared or released, a reload, a machine change, a
  drift repair, a start-window repair) is handed to the ``UpdatePusher`` (``push``), which
  delivers the current assignments the way ``delivery`` says (``agent/delivery.py``, decided at
  every Configure from the runtime's NRI version): an unsolicited UpdateContainers, or
  (``replies``) the cgroup written at once and the update held for the next event reply.
  Without a runtime connection it is held for the next event reply.
- Every policy operation's changes are ``record``-ed: the pusher's versions and the offer follow.

The router also answers the drift checker (``DriftSubject``) and holds a claim's changes that are
decided but not pushed yet (``decided``): their cgroups still hold the old sets.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Iterable
from typing import TYPE_CHECKING, Final

from topodra.agent.delivery import Delivery, DeliveryChoice, ReplyDelivery, choose_delivery
from topodra.agent.drift import DriftChecker
from topodra.agent.metrics import AgentMetrics
from topodra.agent.observe import EventLog
from topodra.agent.publisher import DevicePublisher
from topodra.agent.pusher import UpdatePusher
from topodra.agent.start_window import StartWindow
from topodra.agent.state import NodeState
from topodra.cpuset import CPUSet
from topodra.nri.types import ContainerUpdate, Placement, placement_update
from topodra.nri.version import RuntimeInfo
from topodra.policy.api import Assignment, Changes

if TYPE_CHECKING:
    from topodra.nri.stub import Stub

__all__ = ["UNPUSHED_GRACE", "ChangeRouter"]

log = logging.getLogger("topodra.agent.agent")  # the agent's lines, under its name

#: Seconds a claim's decided-but-unpushed change keeps the drift check off its containers (the
#: checkpoint write between them takes milliseconds).
UNPUSHED_GRACE: Final = 5.0


class ChangeRouter:
    """Replies, pushes or holds each change. ``pusher``, ``drift``, the stub and the ``replies``
    delivery: attached when the agent connects to the runtime (a scratch node for the warm-up has
    none of them)."""

    def __init__(
        self, state: NodeState, window: StartWindow, publisher: DevicePublisher, metrics: AgentMetrics, notes: EventLog
    ) -> None:
        self.state = state
        self.window = window
        self.publisher = publisher
        self.metrics = metrics
        self.notes = notes
        self.pusher: UpdatePusher | None = None
        self.drift: DriftChecker | None = None
        self.stub: Stub | None = None
        self.replies: ReplyDelivery | None = None
        self._deferred: set[str] = set()  # changes held for the next event reply
        #: containers a claim moved whose push waits for the claim's checkpoint: container -> monotonic time decided
        self._unpushed: dict[str, float] = {}
        #: how changes outside events reach containers: decided again at every Configure
        self.delivery: DeliveryChoice = choose_delivery(state.config.nri.delivery, None)
        self._show_delivery()

    def attach(self, stub: Stub, pusher: UpdatePusher, drift: DriftChecker, replies: ReplyDelivery) -> None:
        self.stub, self.pusher, self.drift, self.replies = stub, pusher, drift, replies

    def hold(self, container_ids: Iterable[str]) -> None:
        """Carry these containers' assignments in the next event reply."""
        self._deferred.update(container_ids)

    # --- the delivery of changes outside events ------------------------------------------------------
    def runtime_connected(self, runtime: RuntimeInfo) -> None:
        """Configure: decide how changes outside events reach this runtime, and say so once."""
        self.delivery = choose_delivery(self.state.config.nri.delivery, runtime)
        self._show_delivery()
        line = self.delivery.line()
        warn = self.delivery.mode is Delivery.UNSOLICITED and not runtime.unsolicited_updates_safe
        writer = self.replies.writer if self.replies is not None else None
        if self.delivery.mode is Delivery.REPLIES and writer is not None and not writer.writable:
            line += f"; {writer.root} is not writable, so they wait for the next event reply"
            warn = True
        (log.warning if warn else log.info)("%s", line)

    def _show_delivery(self) -> None:
        for mode in Delivery:
            self.metrics.delivery.labels(mode.value).set(1 if mode is self.delivery.mode else 0)

    def send(self, updates: list[ContainerUpdate]) -> asyncio.Future[list[ContainerUpdate]]:
        """The pusher's transport: the cgroups written (``replies``), or an unsolicited UpdateContainers."""
        if self.delivery.mode is Delivery.REPLIES and self.replies is not None:
            return asyncio.ensure_future(self.replies.send(updates))
        assert self.stub is not None, "attached before the pusher runs"
        fut: asyncio.Future[list[ContainerUpdate]] = self.stub.update_containers(updates)
        return fut

    # --- every policy operation -------------------------------------------------------------------
    def record(self, changes: Changes, *, subject: str | None = None, full: bool = False) -> None:
        """Note a policy operation's changes (``subject``: a container it removed; ``full``: it may
        have changed any grant)."""
        if self.pusher is not None:
            self.pusher.bump(changes)
        self.publisher.touched(changes, subject=subject, full=full)

    # --- changes made by an NRI event: in its reply ---------------------------------------------------
    def reply(self, changes: Changes, exclude: str) -> list[Placement]:
        """The updates an event's reply carries: ``changes`` of the runtime's containers but
        ``exclude`` (the event's own), and the changes held for this reply."""
        placements = self.placements(changes, exclude=exclude)
        deferred = self._deferred
        if not deferred:
            return placements
        deferred.discard(exclude)
        have = {p[0] for p in placements}
        for cid in sorted(deferred - have):
            a = self.state.pushable(cid)
            if a is not None:
                placements.append((cid, a.cpus, a.mems or None))
                self.window.sent([cid])
        deferred.clear()
        return placements

    def placements(self, changes: Changes, *, exclude: str | None = None) -> list[Placement]:
        """The updates ``changes`` make of the runtime's containers, by id, as (id, cpus, mems or
        None). Followers moved together share one ``Assignment``: its sets are read once, and
        the same objects let the reply writer reuse their bytes."""
        containers = self.state.containers
        out: list[Placement] = []
        last: Assignment | None = None
        cpus: CPUSet | None = None
        mems: CPUSet | None = None
        for cid, a in sorted(changes.items()):
            if cid == exclude or cid not in containers:
                continue
            if a is not last:
                last, cpus, mems = a, a.cpus, a.mems or None
            assert cpus is not None
            out.append((cid, cpus, mems))
        if out and self.window:  # event replies reach starting tasks no better
            self.window.sent([p[0] for p in out])
        return out

    def updates(self, changes: Changes) -> list[ContainerUpdate]:
        """Synchronize's reply: every runtime container ``changes`` moved."""
        return [placement_update(*p) for p in self.placements(changes)]

    # --- changes made outside an NRI event ----------------------------------------------------------
    def push(self, container_ids: Iterable[str]) -> None:
        """Deliver these containers' current assignments now, the way ``delivery`` says; without
        an NRI connection, with the next event reply."""
        if self.pusher is not None:
            self.pusher.push(container_ids)
        else:
            self._deferred.update(container_ids)

    def decided(self, changes: Changes) -> Changes:
        """A claim's changes, decided before its checkpoint is written and they are pushed: until
        then their cgroups still hold the old sets, which the drift check must not repair."""
        now = time.monotonic()
        if len(self._unpushed) > 1024:  # left by pushes that never came
            self._unpushed = {c: t for c, t in self._unpushed.items() if now - t < UNPUSHED_GRACE}
        self._unpushed.update(dict.fromkeys(changes, now))
        return changes

    def claim_changed(self, changes: Changes) -> None:
        """A claim's changes, checkpointed: recorded and pushed."""
        for cid in changes:
            self._unpushed.pop(cid, None)
        self.record(changes)
        self.push(changes)

    def started(self, container_id: str) -> None:
        """PostStartContainer: re-send what may have missed the task, then check the cgroup."""
        if self.window.started(container_id):
            self.metrics.start_repushes.inc()
            log.info("container %s got an update while starting: sending its assignment again", container_id)
            self.push([container_id])
        self.check_soon([container_id])

    def check_soon(self, container_ids: Iterable[str]) -> None:
        if self.drift is not None:
            self.drift.check_soon(container_ids)

    def forget(self, container_id: str) -> None:
        """The container stopped or went: nothing of it is sent any more."""
        if self.pusher is not None:
            self.pusher.forget(container_id)
        self.window.forget(container_id)
        self._deferred.discard(container_id)

    # --- the pusher's hooks ---------------------------------------------------------------------------
    def sending(self, container_ids: Iterable[str]) -> None:
        self.window.sent(container_ids)

    def counted(self, sent: int, failed: int) -> None:
        if self.delivery.mode is Delivery.REPLIES:
            self.metrics.cgroup_writes.labels("written").inc(sent)
            self.metrics.cgroup_writes.labels("failed").inc(failed)
        else:
            self.metrics.updates_sent.inc(sent)
            self.metrics.updates_failed.inc(failed)

    # --- the drift checker's questions (``DriftSubject``) ---------------------------------------------
    def assignment(self, container_id: str) -> Assignment | None:
        return self.state.pushable(container_id)

    def cgroup_of(self, container_id: str) -> tuple[str, int] | None:
        c = self.state.containers.get(container_id)
        if c is None or self.window.starting(container_id):
            return None  # not ours, or its task is not running yet
        return c.cgroups_path, c.pid

    def container_ids(self) -> list[str]:
        return list(self.state.containers)

    def awaits_push(self, container_id: str) -> bool:
        """Decided by a claim moments ago and not pushed yet. Bounded, so that a push that
        never comes (a checkpoint write that hangs) leaves the set to the drift check."""
        decided = self._unpushed.get(container_id)
        return decided is not None and time.monotonic() - decided < UNPUSHED_GRACE

    async def settled(self) -> None:
        if self.pusher is not None:
            with contextlib.suppress(TimeoutError):
                await self.pusher.wait_idle(5.0)

    def repair(self, container_ids: list[str]) -> None:
        self.metrics.cpuset_drift.inc(len(container_ids))
        self.notes.note("cpuset drift repaired: " + ", ".join(container_ids))
        self.push(container_ids)
