"""Delivering the embedded runtime's events to its synchronized plugins.

Every request within ``request_timeout``, else the plugin is closed and the operation goes on
without it; notification events as dedicated rpcs (v0.12+) or StateChange (older, or for good
after a plugin answers UNIMPLEMENTED).
"""

from __future__ import annotations

import logging
from typing import Final

from google.protobuf.message import Message

from topodra.embedded.runtime_plugins import Fatal, PluginHost, PluginLink
from topodra.embedded.runtime_types import V0_12, RuntimeJournal, RuntimeSettings, rpc_reason
from topodra.nri import convert
from topodra.nri.errors import RpcError
from topodra.nri.proto import api_pb2
from topodra.nri.ttrpc import Code
from topodra.nri.types import Container, Event, Pod

__all__ = ["EventDelivery"]

#: Notification events and their dedicated rpc (v0.12+); others always have their own rpc.
_NOTIFICATION_RPCS: Final = {
    Event.RUN_POD_SANDBOX: "RunPodSandbox",
    Event.STOP_POD_SANDBOX: "StopPodSandbox",
    Event.REMOVE_POD_SANDBOX: "RemovePodSandbox",
    Event.POST_UPDATE_POD_SANDBOX: "PostUpdatePodSandbox",
    Event.POST_CREATE_CONTAINER: "PostCreateContainer",
    Event.START_CONTAINER: "StartContainer",
    Event.POST_START_CONTAINER: "PostStartContainer",
    Event.POST_UPDATE_CONTAINER: "PostUpdateContainer",
    Event.REMOVE_CONTAINER: "RemoveContainer",
}


class EventDelivery:
    """Sends an event to the host's synchronized plugins that subscribed to it, in index order."""

    def __init__(self, settings: RuntimeSettings, host: PluginHost, journal: RuntimeJournal) -> None:
        self._settings = settings
        self._host = host
        self._journal = journal

    def active_plugins(self) -> list[PluginLink]:
        """The synchronized plugins now, in invocation (index) order (closed ones included until they leave)."""
        return list(self._host.active)

    def ids(self) -> tuple[str, ...]:
        """The ids of the connected, synchronized plugins (what an ``EventResult`` reports)."""
        return tuple(p.id for p in self._host.active if not p.closed)

    def subscribed(self, event: Event) -> list[PluginLink]:
        return [p for p in self._host.active if not p.closed and p.events & event.bit]

    async def send(
        self,
        plugin: PluginLink,
        event: Event,
        method: str,
        request: Message,
        reply_type: type[Message],
        dropped: list[str],
    ) -> Message | None:
        """One plugin call; None when the plugin was closed for it (the event goes on)."""
        try:
            return await plugin.call(method, request, reply_type, self._settings.request_timeout)
        except Fatal as exc:
            self._journal.note(f"closing plugin {plugin.id}, failed to handle {event.rpc} request: {exc}",
                               logging.ERROR)
            await plugin.close(str(exc))
            dropped.append(plugin.id)
            return None

    async def notify(self, event: Event, pod: Pod, container: Container | None, dropped: list[str]) -> str | None:
        """Deliver a notification event; returns the first plugin error (which stops delivery)."""
        for plugin in self.subscribed(event):
            pod_pb = convert.pod_to_proto(pod)
            ctr_pb = convert.container_to_proto(container) if container is not None else None
            use_state_change = plugin.fallback or self._settings.version < V0_12
            if not use_state_change:
                request = getattr(api_pb2, f"{_NOTIFICATION_RPCS[event]}Request")(pod=pod_pb)
                if ctr_pb is not None:
                    request.container.CopyFrom(ctr_pb)
                response_type = getattr(api_pb2, f"{_NOTIFICATION_RPCS[event]}Response")
                try:
                    await self.send(plugin, event, _NOTIFICATION_RPCS[event], request, response_type, dropped)
                    continue
                except RpcError as exc:
                    if exc.code != Code.UNIMPLEMENTED:
                        return f"plugin {plugin.id}: {rpc_reason(exc)}"
                    plugin.fallback = True
            if plugin.fallback and event not in plugin.warned:
                plugin.warned.add(event)
                self._journal.note(
                    f"plugin {plugin.id} uses deprecated StateChange instead of a dedicated {event.rpc} RPC call",
                    logging.WARNING,
                )
            change = api_pb2.StateChangeEvent(event=event.value, pod=pod_pb)  # type: ignore[arg-type]
            if ctr_pb is not None:
                change.container.CopyFrom(ctr_pb)
            try:
                await self.send(plugin, event, "StateChange", change, api_pb2.Empty, dropped)
            except RpcError as exc:
                return f"plugin {plugin.id}: {rpc_reason(exc)}"
        return None
