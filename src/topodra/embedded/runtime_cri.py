"""The embedded runtime's CRI operations: pod sandboxes and containers, with their NRI events.

Each call takes containerd's local NRI lock, then the adaptation's while its event is
delivered (``embedded/nrilocks.py``); field ownership across plugins, updates of the container
being created refused, validators consulted after all adjustments. StartContainer creates the
task from the spec, then spends ``start_delay`` (or awaits ``start_gate``) starting it: an
update arriving in that window reaches the spec only (``embedded/runtime_store.py``).
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import time

from google.protobuf.message import Message

from topodra.embedded.nrilocks import NRILocks
from topodra.embedded.runtime_events import EventDelivery
from topodra.embedded.runtime_plugins import PluginLink
from topodra.embedded.runtime_store import ContainerStore
from topodra.embedded.runtime_types import (
    V0_10,
    EventResult,
    RuntimeJournal,
    RuntimeSettings,
    RuntimeUsageError,
    rpc_reason,
)
from topodra.nri import convert
from topodra.nri.errors import ConversionError, RpcError
from topodra.nri.merge import (
    Owners,
    OwnershipConflict,
    apply_adjustment,
    apply_update,
    merge_adjustment,
    merge_update,
)
from topodra.nri.proto import api_pb2
from topodra.nri.types import (
    Container,
    ContainerAdjustment,
    ContainerState,
    ContainerUpdate,
    Event,
    LinuxResources,
    Pod,
)

__all__ = ["CRIOperations"]


class CRIOperations:
    """What the kubelet asks of a runtime over CRI, as containerd serves it with NRI."""

    def __init__(
        self,
        settings: RuntimeSettings,
        store: ContainerStore,
        events: EventDelivery,
        locks: NRILocks,
        journal: RuntimeJournal,
    ) -> None:
        self._settings = settings
        self._store = store
        self._events = events
        self._locks = locks
        self._journal = journal
        self._pid = 10000

    def _ids(self) -> tuple[str, ...]:
        return self._events.ids()

    # ---------------------------------------------------------------- pod operations
    async def run_pod_sandbox(self, pod: Pod) -> EventResult:
        """Add a pod sandbox (RunPodSandbox)."""
        if pod.id in self._store.pods_by_id:
            raise RuntimeUsageError(f"pod sandbox {pod.id!r} already exists")
        async with self._locks.lifecycle(f"RunPodSandbox {pod.id}"):
            self._store.pods_by_id[pod.id] = pod
            dropped: list[str] = []
            error = await self._events.notify(Event.RUN_POD_SANDBOX, pod, None, dropped)
            return EventResult("RunPodSandbox", pod=pod, error=error, dropped=tuple(dropped), plugins=self._ids())

    async def update_pod_sandbox(
        self, pod_id: str, resources: LinuxResources | None, overhead: LinuxResources | None = None
    ) -> EventResult:
        """UpdatePodSandbox + PostUpdatePodSandbox (NRI v0.10+; older runtimes send nothing)."""
        pod = self._store.pod(pod_id)
        async with self._locks.lifecycle(f"UpdatePodSandbox {pod_id}"):
            pod = dataclasses.replace(pod, resources=resources or pod.resources, overhead=overhead or pod.overhead)
            self._store.pods_by_id[pod_id] = pod
            dropped: list[str] = []
            if self._settings.version < V0_10:
                return EventResult("UpdatePodSandbox", pod=pod)
            for plugin in self._events.subscribed(Event.UPDATE_POD_SANDBOX):
                req = api_pb2.UpdatePodSandboxRequest(pod=convert.pod_to_proto(pod))
                if resources is not None:
                    convert.resources_to_proto(resources, req.linux_resources)
                if overhead is not None:
                    convert.resources_to_proto(overhead, req.overhead_linux_resources)
                try:
                    await self._events.send(plugin, Event.UPDATE_POD_SANDBOX, "UpdatePodSandbox", req,
                                            api_pb2.UpdatePodSandboxResponse, dropped)
                except RpcError as exc:
                    return EventResult("UpdatePodSandbox", pod=pod, error=f"plugin {plugin.id}: {rpc_reason(exc)}")
            error = await self._events.notify(Event.POST_UPDATE_POD_SANDBOX, pod, None, dropped)
            return EventResult("UpdatePodSandbox", pod=pod, error=error, dropped=tuple(dropped), plugins=self._ids())

    async def stop_pod_sandbox(self, pod_id: str) -> EventResult:
        pod = self._store.pod(pod_id)
        async with self._locks.lifecycle(f"StopPodSandbox {pod_id}"):
            dropped: list[str] = []
            error = await self._events.notify(Event.STOP_POD_SANDBOX, pod, None, dropped)
            return EventResult("StopPodSandbox", pod=pod, error=error, dropped=tuple(dropped), plugins=self._ids())

    async def remove_pod_sandbox(self, pod_id: str) -> EventResult:
        pod = self._store.pod(pod_id)
        if any(c.pod_sandbox_id == pod_id for c in self._store.containers_by_id.values()):
            raise RuntimeUsageError(f"pod sandbox {pod_id!r} still has containers")
        async with self._locks.lifecycle(f"RemovePodSandbox {pod_id}"):
            dropped: list[str] = []
            error = await self._events.notify(Event.REMOVE_POD_SANDBOX, pod, None, dropped)
            del self._store.pods_by_id[pod_id]
            return EventResult("RemovePodSandbox", pod=pod, error=error, dropped=tuple(dropped), plugins=self._ids())

    # ---------------------------------------------------------------- container operations
    async def create_container(self, container: Container) -> EventResult:
        """CreateContainer (+ validation) then PostCreateContainer; the error fails the creation."""
        pod = self._store.pod(container.pod_sandbox_id)
        if container.id in self._store.containers_by_id:
            raise RuntimeUsageError(f"container {container.id!r} already exists")
        self._pid += 1
        ctr = dataclasses.replace(container, state=ContainerState.CREATED, created_at=time.time_ns(), pid=self._pid)
        async with self._locks.lifecycle(f"CreateContainer {container.id}"):
            result = await self._create(pod, ctr)
            if result.error is not None or result.container is None:
                return result
            dropped = list(result.dropped)
            error = await self._events.notify(Event.POST_CREATE_CONTAINER, pod, result.container, dropped)
            return dataclasses.replace(result, error=error, dropped=tuple(dropped))

    async def _create(self, pod: Pod, ctr: Container) -> EventResult:
        owners = Owners()
        merged: ContainerAdjustment | None = None
        updates: dict[str, ContainerUpdate] = {}
        dropped: list[str] = []
        called = self._events.active_plugins()
        req = api_pb2.CreateContainerRequest(pod=convert.pod_to_proto(pod), container=convert.container_to_proto(ctr))

        def failed(error: str) -> EventResult:
            return EventResult("CreateContainer", pod=pod, error=error, dropped=tuple(dropped), plugins=self._ids())

        for plugin in self._events.subscribed(Event.CREATE_CONTAINER):
            try:
                reply = await self._events.send(plugin, Event.CREATE_CONTAINER, "CreateContainer", req,
                                                api_pb2.CreateContainerResponse, dropped)
            except RpcError as exc:
                return failed(rpc_reason(exc))
            if reply is None:
                continue
            assert isinstance(reply, api_pb2.CreateContainerResponse)
            try:
                if reply.HasField("adjust"):
                    adj = convert.adjustment_from_proto(reply.adjust, f"adjustment from {plugin.id}")
                    merged = merge_adjustment(merged, adj, ctr.id, plugin.id, owners)
                for pb in reply.update:
                    update = convert.update_from_proto(pb)
                    if update.container_id == ctr.id:
                        return failed(f'plugin "{plugin.id}" asked update of "{ctr.id}" during creation')
                    merge_update(updates, update, plugin.id, owners)
            except (ConversionError, OwnershipConflict) as exc:
                return failed(str(exc))
            if reply.evict:
                self._journal.note(f"plugin {plugin.id} asked for evictions, which NRI never applies", logging.WARNING)
        created = apply_adjustment(ctr, merged) if merged is not None else ctr
        problem = self._store.check_sets(created.cpus, created.mems)
        if problem is not None:
            return failed(f"failed to create container {ctr.id}: {problem}")
        error = await self._validate(pod, ctr, merged, list(updates.values()), owners, called, dropped)
        if error is not None:
            return failed(error)
        cpus_owner = owners.simple.get((ctr.id, "CPUSetCPUs")) or owners.simple.get((ctr.id, "CPUSetMems"))
        self._store.set_container(created, source="adjustment" if cpus_owner else "create", plugin=cpus_owner)
        # containerd only logs these failures
        failures = self._store.apply_updates(updates.values(), source="update", plugin=None)
        return EventResult(
            "CreateContainer",
            pod=pod,
            container=created,
            adjustment=merged,
            updates=tuple(updates.values()),
            failed_updates=tuple(failures),
            dropped=tuple(dropped),
            plugins=self._ids(),
        )

    async def _validate(
        self,
        pod: Pod,
        ctr: Container,
        merged: ContainerAdjustment | None,
        updates: list[ContainerUpdate],
        owners: Owners,
        called: list[PluginLink],
        dropped: list[str],
    ) -> str | None:
        validating = self._settings.version >= V0_10
        validators = self._events.subscribed(Event.VALIDATE_CONTAINER_ADJUSTMENT) if validating else []
        if not validators:
            return None
        req = api_pb2.ValidateContainerAdjustmentRequest(
            pod=convert.pod_to_proto(pod), container=convert.container_to_proto(ctr)
        )
        if merged is not None:
            convert.adjustment_to_proto(merged, req.adjust)
        for update in updates:
            convert.update_to_proto(update, req.update.add())
        owners.to_proto(req.owners)
        for plugin in called:
            req.plugins.add(name=plugin.name, index=plugin.idx)

        async def one(plugin: PluginLink) -> str | None:
            try:
                reply = await self._events.send(plugin, Event.VALIDATE_CONTAINER_ADJUSTMENT,
                                                "ValidateContainerAdjustment", req,
                                                api_pb2.ValidateContainerAdjustmentResponse, dropped)
            except RpcError as exc:
                return f"validator plugin {plugin.id} failed: {rpc_reason(exc)}"
            if reply is None:
                return f"validator plugin {plugin.id} failed: closed"
            assert isinstance(reply, api_pb2.ValidateContainerAdjustmentResponse)
            if reply.reject:
                reason = reply.reason or "unknown rejection reason"
                return f'validator "{plugin.id}" rejected container adjustment, reason: {reason}'
            return None

        results = await asyncio.gather(*(one(p) for p in validators))
        return next((r for r in results if r is not None), None)

    async def start_container(self, container_id: str) -> EventResult:
        """StartContainer: create the task from the spec, StartContainer event, start the task
        (``start_delay``: updates in this window reach the spec only), PostStartContainer."""
        ctr = self._store.container(container_id)
        pod = self._store.pod(ctr.pod_sandbox_id)
        if ctr.state != ContainerState.CREATED:
            raise RuntimeUsageError(f"container {container_id!r} is {ctr.state.name.lower()}, not created")
        dropped: list[str] = []
        self._store.starting.add(container_id)
        try:
            self._store.set_task(ctr)  # NewTask: the cgroup gets the spec as it is now
            # Until the task runs, the container stays CREATED (what Synchronize reports), as in CRI.
            started = dataclasses.replace(ctr, state=ContainerState.RUNNING, started_at=time.time_ns())
            async with self._locks.lifecycle(f"StartContainer {container_id}"):
                error = await self._events.notify(Event.START_CONTAINER, pod, started, dropped)
            if error is None:
                if self._settings.start_gate is not None:
                    await self._settings.start_gate(container_id)
                elif self._settings.start_delay > 0:
                    await asyncio.sleep(self._settings.start_delay)
        finally:
            self._store.starting.discard(container_id)
        current = self._store.containers_by_id.get(container_id)
        if current is None or current.state != ContainerState.CREATED:
            return EventResult("StartContainer", pod=pod, error=f"container {container_id} was stopped while starting")
        # The task runs: from now on updates reach it.
        ctr = dataclasses.replace(current, state=ContainerState.RUNNING, started_at=started.started_at)
        self._store.set_running(ctr)
        if error is None:
            async with self._locks.lifecycle(f"PostStartContainer {container_id}"):
                error = await self._events.notify(Event.POST_START_CONTAINER, pod, ctr, dropped)
        return EventResult("StartContainer", pod=pod, container=ctr, error=error, dropped=tuple(dropped),
                           plugins=self._ids())

    async def update_container(self, container_id: str, resources: LinuxResources) -> EventResult:
        """A CRI UpdateContainerResources: UpdateContainer then PostUpdateContainer.

        A plugin's update of this same container overrides the requested
        resources field by field (that is how a cpuset survives ``crictl update``).
        """
        ctr = self._store.container(container_id)
        pod = self._store.pod(ctr.pod_sandbox_id)
        async with self._locks.lifecycle(f"UpdateContainer {container_id}"):
            dropped: list[str] = []
            req = api_pb2.UpdateContainerRequest(pod=convert.pod_to_proto(pod), container=convert.container_to_proto(ctr))
            convert.resources_to_proto(resources, req.linux_resources)
            updates = await _plugin_updates(self._events, Event.UPDATE_CONTAINER, "UpdateContainer", req,
                                            api_pb2.UpdateContainerResponse, dropped)
            if isinstance(updates, str):
                return EventResult("UpdateContainer", pod=pod, container=ctr, error=updates)
            own = updates.pop(container_id, None)
            requested = dataclasses.replace(ctr, resources=resources)
            target = apply_update(requested, own) if own is not None else requested
            problem = self._store.check_sets(target.cpus, target.mems)
            if problem is not None:
                return EventResult("UpdateContainer", pod=pod, container=ctr, error=problem)
            self._store.set_container(target, source="update", plugin=None)
            failures = self._store.apply_updates(updates.values(), source="update", plugin=None)
            required = [u for u in failures if not u.ignore_failure]
            error = f"failed to update containers {', '.join(u.container_id for u in required)}" if required else None
            if error is None:
                error = await self._events.notify(Event.POST_UPDATE_CONTAINER, pod, target, dropped)
            applied = (*((own,) if own is not None else ()), *updates.values())
            return EventResult("UpdateContainer", pod=pod, container=target, updates=applied,
                               failed_updates=tuple(failures), error=error, dropped=tuple(dropped), plugins=self._ids())

    async def stop_container(self, container_id: str) -> EventResult:
        """StopContainer; the plugins' updates (e.g. CPUs given back to others) are applied."""
        ctr = self._store.container(container_id)
        pod = self._store.pod(ctr.pod_sandbox_id)
        async with self._locks.lifecycle(f"StopContainer {container_id}"):
            ctr = dataclasses.replace(ctr, state=ContainerState.STOPPED, finished_at=time.time_ns())
            self._store.set_container(ctr, source="stop", plugin=None)
            dropped: list[str] = []
            req = api_pb2.StopContainerRequest(pod=convert.pod_to_proto(pod), container=convert.container_to_proto(ctr))
            updates = await _plugin_updates(self._events, Event.STOP_CONTAINER, "StopContainer", req,
                                            api_pb2.StopContainerResponse, dropped)
            if isinstance(updates, str):
                return EventResult("StopContainer", pod=pod, container=ctr, error=updates)
            failures = self._store.apply_updates(updates.values(), source="update", plugin=None)
            required = [u for u in failures if not u.ignore_failure]
            error = f"failed to update containers {', '.join(u.container_id for u in required)}" if required else None
            return EventResult("StopContainer", pod=pod, container=ctr, updates=tuple(updates.values()),
                               failed_updates=tuple(failures), error=error, dropped=tuple(dropped), plugins=self._ids())

    def exit_container(self, container_id: str) -> None:
        """The container's process exits on its own: stopped, task and cgroup gone, no NRI event yet
        (containerd tells plugins later, with StopContainer from its exit handler or the kubelet)."""
        ctr = self._store.container(container_id)
        self._store.containers_by_id[container_id] = dataclasses.replace(ctr, state=ContainerState.STOPPED,
                                                             finished_at=time.time_ns())
        self._store.drop_task(ctr)

    async def remove_container(self, container_id: str) -> EventResult:
        ctr = self._store.container(container_id)
        pod = self._store.pod(ctr.pod_sandbox_id)
        async with self._locks.lifecycle(f"RemoveContainer {container_id}"):
            dropped: list[str] = []
            error = await self._events.notify(Event.REMOVE_CONTAINER, pod, ctr, dropped)
            del self._store.containers_by_id[container_id]
            self._store.drop_task(ctr)
            return EventResult("RemoveContainer", pod=pod, container=ctr, error=error, dropped=tuple(dropped),
                               plugins=self._ids())


async def _plugin_updates(
    events: EventDelivery,
    event: Event,
    rpc: str,
    request: Message,
    reply_type: type[Message],
    dropped: list[str],
) -> dict[str, ContainerUpdate] | str:
    """Deliver ``event`` to every plugin that takes it and merge the updates they return
    (field ownership across plugins, as containerd does); the error text on the first failure."""
    owners = Owners()
    updates: dict[str, ContainerUpdate] = {}
    for plugin in events.subscribed(event):
        try:
            reply = await events.send(plugin, event, rpc, request, reply_type, dropped)
        except RpcError as exc:
            return rpc_reason(exc)
        if reply is None:
            continue
        assert isinstance(reply, api_pb2.UpdateContainerResponse | api_pb2.StopContainerResponse)
        try:
            for pb in reply.update:
                merge_update(updates, convert.update_from_proto(pb), plugin.id, owners)
        except (ConversionError, OwnershipConflict) as exc:
            return str(exc)
    return updates
