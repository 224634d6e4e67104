"""The NRI handlers: each event takes the policy lock, runs one policy operation and answers the
changes it made (through the ``ChangeRouter``: the event's own container in the reply's
adjustment, the others as updates in the same reply)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Sequence
from dataclasses import replace

from topodra.agent.claims import ClaimBridge
from topodra.agent.container_request import container_request
from topodra.agent.metrics import AgentMetrics
from topodra.agent.observe import CreateTimes, EventLog
from topodra.agent.router import ChangeRouter
from topodra.agent.start_window import StartWindow
from topodra.agent.state import NodeState
from topodra.cpuset import CPUSet
from topodra.dra.driver import ClaimCheckError, ClaimEnvError
from topodra.faults import crash_point
from topodra.nri.plugin import Plugin
from topodra.nri.types import (
    Container,
    ContainerState,
    ContainerUpdate,
    CreateContainerResult,
    Event,
    LinuxResources,
    PlacementUpdates,
    Pod,
    placement_adjustment,
    placement_update,
)
from topodra.nri.version import RuntimeInfo
from topodra.policy.api import Assignment, ContainerRequest, PolicyError

__all__ = ["EVENTS", "NriHandlers"]

log = logging.getLogger("topodra.agent.agent")

#: Events the agent subscribes to (all exist in every NRI version; the
#: notification ones arrive as StateChange on runtimes before v0.12).
#: PostStartContainer closes the start window: an update that reached a
#: container while it was starting may never have reached its task.
EVENTS = frozenset(
    {
        Event.RUN_POD_SANDBOX,
        Event.STOP_POD_SANDBOX,
        Event.REMOVE_POD_SANDBOX,
        Event.CREATE_CONTAINER,
        Event.POST_START_CONTAINER,
        Event.UPDATE_CONTAINER,
        Event.STOP_CONTAINER,
        Event.REMOVE_CONTAINER,
    }
)


class NriHandlers(Plugin):
    """One policy operation per NRI event, its changes answered through the router."""

    refusals = (ClaimEnvError, ClaimCheckError, PolicyError)  # the reason is logged, no traceback

    def __init__(
        self,
        state: NodeState,
        router: ChangeRouter,
        window: StartWindow,
        claims: ClaimBridge,
        metrics: AgentMetrics,
        notes: EventLog,
        create_times: CreateTimes,
    ) -> None:
        self.state = state
        self.router = router
        self.window = window
        self.claims = claims
        self.metrics = metrics
        self.notes = notes
        self.create_times = create_times
        self.placed = asyncio.Event()  # the first Synchronize is done: exclusive grants are known

    async def configure(self, config: str, runtime: RuntimeInfo) -> frozenset[Event]:
        self.router.runtime_connected(runtime)
        return EVENTS

    async def run_pod_sandbox(self, pod: Pod) -> None:
        self.state.pods[pod.id] = pod

    async def stop_pod_sandbox(self, pod: Pod) -> None:
        self.state.pods[pod.id] = pod

    async def remove_pod_sandbox(self, pod: Pod) -> None:
        self.state.pods.pop(pod.id, None)

    async def _claims_of(self, pod: Pod, container: Container) -> tuple[str, ...]:
        """The container's verified claims. A pod the prepared claims do not list yet is looked up
        first (``ClaimBridge.admit``): another pod of the node sharing a claim gets no Prepare."""
        try:
            return self.claims.container_claims(pod, container)
        except ClaimCheckError:
            if not await self.claims.admit(pod, container):
                raise
        return self.claims.container_claims(pod, container)

    async def _admit_all(self, containers: Sequence[Container]) -> None:
        """Before Synchronize places the live containers: their pods recorded as consumers of the
        claims they share (created while the agent was away, or before a restart)."""
        for c in containers:
            pod = self.state.pods.get(c.pod_sandbox_id)
            if pod is None or c.state not in (ContainerState.CREATED, ContainerState.RUNNING, ContainerState.PAUSED):
                continue
            with contextlib.suppress(*self.refusals):
                await self._claims_of(pod, c)

    def _requests(
        self, containers: Sequence[Container]
    ) -> tuple[list[tuple[ContainerRequest, Assignment | None]], dict[str, Container]]:
        """Synchronize's live containers as (request, the sets the runtime reports), and by id."""
        by_pod = self.state.pods
        entries: list[tuple[ContainerRequest, Assignment | None]] = []
        live: dict[str, Container] = {}
        for c in containers:
            if c.state not in (ContainerState.CREATED, ContainerState.RUNNING, ContainerState.PAUSED):
                continue
            pod = by_pod.get(c.pod_sandbox_id) or Pod(id=c.pod_sandbox_id)
            try:
                claims = self.claims.container_claims(pod, c)
            except (ClaimEnvError, ClaimCheckError) as err:
                # Already running: we cannot refuse it any more; place it as an ordinary container.
                log.error("container %s: %s; placing it without its claim", c.id, err)
                claims = ()
            current = None
            res = c.resources
            if res is not None and res.cpus:
                current = Assignment(res.cpus, res.mems or CPUSet())
            entries.append((container_request(pod, c, claims), current))
            live[c.id] = c
        return entries, live

    async def synchronize(self, pods: Sequence[Pod], containers: Sequence[Container]) -> list[ContainerUpdate]:
        t0 = time.perf_counter()
        state = self.state
        state.pods = {p.id: p for p in pods}
        await self._admit_all(containers)
        entries, live = self._requests(containers)
        async with state.lock:
            state.containers = live
            self.window.synchronized(c.id for c in live.values() if c.state == ContainerState.CREATED)
            try:
                changes = state.policy.sync(entries)
            except PolicyError as err:
                log.error("synchronize: %s", err)
                raise
            self.router.record(changes, full=True)
        self.metrics.nri_event_seconds.labels("Synchronize").observe(time.perf_counter() - t0)
        self.placed.set()
        self.notes.note(f"synchronized {len(live)} container(s), {len(changes)} corrected")
        self.router.check_soon(live)  # Synchronize reports specs; the cgroups may say otherwise
        return self.router.updates(changes)

    async def create_container(self, pod: Pod, container: Container) -> CreateContainerResult:
        t0 = time.perf_counter()
        state = self.state
        state.pods.setdefault(pod.id, pod)
        try:
            claims = await self._claims_of(pod, container)
            req = container_request(pod, container, claims)
            async with state.lock:
                changes = state.policy.add(req)
                state.containers[container.id] = container
                self.window.created(container.id)
                self.router.record(changes)
            crash_point("create.placed")
        except (ClaimEnvError, ClaimCheckError, PolicyError) as err:
            self.metrics.nri_errors.labels("CreateContainer").inc()
            self.notes.note(f"refused container {pod.namespace}/{pod.name}/{container.name}: {err}")
            raise
        cid = container.id
        mine = changes.get(cid)
        updates = PlacementUpdates(self.router.reply(changes, cid))
        self.create_times.add(time.perf_counter() - t0)
        if mine is None:
            return CreateContainerResult(updates=updates)
        if updates:
            self.notes.note(
                "placed %s/%s/%s on CPUs %s (+%d moved)", pod.namespace, pod.name, container.name, mine.cpus, len(updates)
            )
        else:
            self.notes.note("placed %s/%s/%s on CPUs %s", pod.namespace, pod.name, container.name, mine.cpus)
        return CreateContainerResult(adjust=placement_adjustment(mine.cpus, mine.mems or None), updates=updates)

    async def update_container(
        self, pod: Pod, container: Container, resources: LinuxResources | None
    ) -> list[ContainerUpdate]:
        t0 = time.perf_counter()
        state = self.state
        if resources is not None:
            container = replace(container, resources=resources)
        try:
            claims = await self._claims_of(pod, container)
            req = container_request(pod, container, claims)
            async with state.lock:
                if state.policy.assignment(container.id) is None:
                    changes = state.policy.add(req)
                else:
                    changes = state.policy.update(req)
                state.containers[container.id] = container
                self.router.record(changes)
                # Re-apply our values even when unchanged, so a CRI update keeps our pinning.
                mine = state.policy.assignment(container.id)
        except (ClaimEnvError, ClaimCheckError, PolicyError) as err:
            self.metrics.nri_errors.labels("UpdateContainer").inc()
            self.notes.note(f"refused update of {container.id}: {err}")
            raise
        placements = self.router.reply(changes, container.id)
        if mine is not None:
            placements.insert(0, (container.id, mine.cpus, mine.mems or None))
        updates = [placement_update(*p) for p in placements]
        self.metrics.nri_event_seconds.labels("UpdateContainer").observe(time.perf_counter() - t0)
        return updates

    async def post_start_container(self, pod: Pod, container: Container) -> None:
        self.router.started(container.id)

    async def stop_container(self, pod: Pod, container: Container) -> list[ContainerUpdate]:
        t0 = time.perf_counter()
        state = self.state
        async with state.lock:
            state.containers.pop(container.id, None)
            changes = state.policy.remove(container.id)
            self.router.record(changes, subject=container.id)
        crash_point("stop.removed")
        self.router.forget(container.id)
        self.metrics.nri_event_seconds.labels("StopContainer").observe(time.perf_counter() - t0)
        updates = [placement_update(*p) for p in self.router.reply(changes, container.id)]
        if updates:
            self.notes.note("stopped %s: %d container(s) widened", container.id, len(updates))
        return updates

    async def remove_container(self, pod: Pod, container: Container) -> None:
        # Normally StopContainer released it already; if not, push what it frees now.
        state = self.state
        async with state.lock:
            state.containers.pop(container.id, None)
            changes = state.policy.remove(container.id)
            self.router.record(changes, subject=container.id)
        self.router.forget(container.id)
        self.router.push(c for c in changes if c != container.id)
