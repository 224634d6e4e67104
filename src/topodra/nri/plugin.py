"""The typed plugin API: subclass ``Plugin`` and override the handlers you need.

Handlers are coroutines that receive protobuf-free ``Pod``/``Container`` objects
and return adjustments and updates. The stub subscribes a plugin to exactly the
events whose handlers it overrides (unless ``configure`` names the events
itself), restricted to what the runtime's NRI version accepts.

Handlers never run concurrently and must answer within the runtime's request
timeout (2 s by default): a handler still running shortly before that deadline
is cancelled (it sees ``CancelledError`` and should undo what it started) and
the runtime gets a DEADLINE_EXCEEDED error instead of silently dropping the
plugin. Raise ``RpcError(code, message)`` to answer with a specific status;
any other exception answers UNKNOWN with its message on one line, which makes the CRI
call fail (for CreateContainer: the container is not created; the kubelet shows the message in
the pod's events). Exceptions listed in ``refusals`` are expected answers (the message says
why): logged as one warning line; any other exception is logged with its traceback.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import ClassVar, Final

from topodra.nri.types import (
    Container,
    ContainerAdjustment,
    ContainerUpdate,
    CreateContainerResult,
    Event,
    LinuxResources,
    Pod,
)
from topodra.nri.version import RuntimeInfo

__all__ = ["HANDLER_NAMES", "Plugin", "RuntimeInfo"]

#: The handler method that receives each event.
HANDLER_NAMES: Final = {event: event.name.lower() for event in Event}


class Plugin:
    """Base class of NRI plugins; every handler defaults to doing nothing."""

    #: Exceptions a handler raises to refuse a request: logged as one line, without a traceback.
    refusals: ClassVar[tuple[type[Exception], ...]] = ()

    async def configure(self, config: str, runtime: RuntimeInfo) -> Iterable[Event] | None:
        """Called once per connection with the runtime's config text for this plugin.

        Return the events to subscribe to, or None for "the events whose
        handlers this class overrides". Events the runtime's NRI version does
        not know are dropped (with a warning) rather than failing Configure.
        """
        return None

    async def synchronize(self, pods: Sequence[Pod], containers: Sequence[Container]) -> Sequence[ContainerUpdate] | None:
        """The runtime's existing pods and containers (all chunks joined); answer updates."""
        return None

    # -- pod sandbox events ----------------------------------------------
    async def run_pod_sandbox(self, pod: Pod) -> None:
        return None

    async def stop_pod_sandbox(self, pod: Pod) -> None:
        return None

    async def remove_pod_sandbox(self, pod: Pod) -> None:
        return None

    async def update_pod_sandbox(self, pod: Pod, overhead: LinuxResources | None, resources: LinuxResources | None) -> None:
        """NRI v0.10.0+: the pod's resources are about to change."""
        return None

    async def post_update_pod_sandbox(self, pod: Pod) -> None:
        return None

    # -- container events ------------------------------------------------
    async def create_container(
        self, pod: Pod, container: Container
    ) -> ContainerAdjustment | CreateContainerResult | None:
        """Adjust the container being created; a ``CreateContainerResult`` also updates others.

        Updates must not target the container being created (the runtime fails
        the creation): put its cpus/mems in the adjustment.
        """
        return None

    async def post_create_container(self, pod: Pod, container: Container) -> None:
        return None

    async def start_container(self, pod: Pod, container: Container) -> None:
        return None

    async def post_start_container(self, pod: Pod, container: Container) -> None:
        return None

    async def update_container(
        self, pod: Pod, container: Container, resources: LinuxResources | None
    ) -> Sequence[ContainerUpdate] | None:
        """A CRI update asks for ``resources``; an update of this same container overrides them."""
        return None

    async def post_update_container(self, pod: Pod, container: Container) -> None:
        return None

    async def stop_container(self, pod: Pod, container: Container) -> Sequence[ContainerUpdate] | None:
        """The container stopped; answer updates of others (e.g. give its CPUs back)."""
        return None

    async def remove_container(self, pod: Pod, container: Container) -> None:
        return None

    async def validate_container_adjustment(
        self,
        pod: Pod,
        container: Container,
        adjustment: ContainerAdjustment | None,
        updates: Sequence[ContainerUpdate],
    ) -> str | None:
        """NRI v0.10.0+: the merged result of all plugins; return a reason to reject it."""
        return None

    # -- introspection -----------------------------------------------------
    def overridden_events(self) -> frozenset[Event]:
        """Events whose handler this plugin's class overrides."""
        cls = type(self)
        return frozenset(
            event for event, name in HANDLER_NAMES.items() if getattr(cls, name) is not getattr(Plugin, name)
        )
