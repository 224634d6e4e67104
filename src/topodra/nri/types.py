"""What plugins see of pods and containers, and what they answer: plain frozen dataclasses.

No protobuf here: ``topodra.nri.convert`` maps these to and from the wire
messages. CPU and memory-node lists are ``CPUSet``s; ``None`` means "not set"
(on the wire, an empty string). An adjustment or update that carries an EMPTY
set is refused at construction: the runtime would read it as "no change", which
is never what a placement decision means.
"""

from __future__ import annotations

import enum
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Final, overload

from topodra.cpuset import CPUSet
from topodra.nri.errors import EmptyCPUSetError

__all__ = [
    "ALL_EVENTS",
    "Container",
    "ContainerAdjustment",
    "ContainerState",
    "ContainerUpdate",
    "CreateContainerResult",
    "Event",
    "LinuxResources",
    "Mount",
    "Pod",
    "PlacementUpdates",
    "event_mask",
    "events_in_mask",
    "placement_adjustment",
    "placement_update",
]


class Event(enum.IntEnum):
    """NRI events; the value is the protocol's, the mask bit is ``1 << (value - 1)``."""

    RUN_POD_SANDBOX = 1
    STOP_POD_SANDBOX = 2
    REMOVE_POD_SANDBOX = 3
    CREATE_CONTAINER = 4
    POST_CREATE_CONTAINER = 5
    START_CONTAINER = 6
    POST_START_CONTAINER = 7
    UPDATE_CONTAINER = 8
    POST_UPDATE_CONTAINER = 9
    STOP_CONTAINER = 10
    REMOVE_CONTAINER = 11
    UPDATE_POD_SANDBOX = 12  # NRI v0.10.0
    POST_UPDATE_POD_SANDBOX = 13  # NRI v0.10.0
    VALIDATE_CONTAINER_ADJUSTMENT = 14  # NRI v0.10.0

    @property
    def bit(self) -> int:
        return 1 << (self.value - 1)

    @property
    def rpc(self) -> str:
        """The dedicated rpc name, e.g. ``RunPodSandbox``."""
        return _RPC_NAMES[self]

    @classmethod
    def parse(cls, text: str) -> Event:
        """Accepts ``CreateContainer``, ``create_container`` or ``CREATE_CONTAINER``."""
        key = text.strip().replace("_", "").replace("-", "").lower()
        for event in cls:
            if event.rpc.lower() == key:
                return event
        names = ", ".join(e.rpc for e in cls)
        raise ValueError(f"unknown NRI event {text!r}; known: {names}")


_RPC_NAMES: Final = {e: "".join(p.title() for p in e.name.split("_")) for e in Event}

#: Every event of the newest protocol (mask 0x3fff).
ALL_EVENTS: Final = frozenset(Event)


def event_mask(events: frozenset[Event] | set[Event] | list[Event] | tuple[Event, ...]) -> int:
    mask = 0
    for e in events:
        mask |= e.bit
    return mask


def events_in_mask(mask: int) -> frozenset[Event]:
    return frozenset(e for e in Event if mask & e.bit)


class ContainerState(enum.IntEnum):
    UNKNOWN = 0
    CREATED = 1
    PAUSED = 2
    RUNNING = 3
    STOPPED = 4


@dataclass(frozen=True, slots=True)
class LinuxResources:
    """cgroup resources of a container or pod; every field ``None`` = not set."""

    cpus: CPUSet | None = None
    mems: CPUSet | None = None
    cpu_shares: int | None = None
    cpu_quota: int | None = None
    cpu_period: int | None = None
    cpu_realtime_runtime: int | None = None
    cpu_realtime_period: int | None = None
    memory_limit: int | None = None
    memory_reservation: int | None = None
    memory_swap: int | None = None
    memory_kernel: int | None = None
    memory_kernel_tcp: int | None = None
    memory_swappiness: int | None = None
    memory_disable_oom_killer: bool | None = None
    memory_use_hierarchy: bool | None = None
    #: page size ("2MB", "1GB") -> limit in bytes
    hugepage_limits: Mapping[str, int] = field(default_factory=dict)
    blockio_class: str | None = None
    rdt_class: str | None = None
    unified: Mapping[str, str] = field(default_factory=dict)
    pids_limit: int | None = None


@dataclass(frozen=True, slots=True)
class Mount:
    destination: str
    type: str = ""
    source: str = ""
    options: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class Pod:
    """A pod sandbox as the runtime describes it."""

    id: str
    name: str = ""
    uid: str = ""
    namespace: str = ""
    labels: Mapping[str, str] = field(default_factory=dict)
    annotations: Mapping[str, str] = field(default_factory=dict)
    runtime_handler: str = ""
    cgroup_parent: str = ""
    cgroups_path: str = ""
    #: the pod's total resources (sum of its containers) and its overhead
    resources: LinuxResources | None = None
    overhead: LinuxResources | None = None
    pid: int = 0
    ips: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class Container:
    """A container as the runtime describes it, with its current resources."""

    id: str
    pod_sandbox_id: str
    name: str = ""
    state: ContainerState = ContainerState.UNKNOWN
    labels: Mapping[str, str] = field(default_factory=dict)
    annotations: Mapping[str, str] = field(default_factory=dict)
    args: tuple[str, ...] = ()
    #: "KEY=value" strings, as in the OCI spec
    env: tuple[str, ...] = ()
    mounts: tuple[Mount, ...] = ()
    resources: LinuxResources | None = None
    cgroups_path: str = ""
    cdi_devices: tuple[str, ...] = ()
    pid: int = 0
    created_at: int = 0
    started_at: int = 0
    finished_at: int = 0
    exit_code: int = 0
    status_reason: str = ""
    status_message: str = ""
    oom_score_adj: int | None = None
    image: str = ""

    def getenv(self, key: str) -> str | None:
        """Value of environment variable ``key`` (the last one wins), else None."""
        prefix = key + "="
        found = None
        for item in self.env:
            if item.startswith(prefix):
                found = item[len(prefix) :]
        return found

    @property
    def cpus(self) -> CPUSet | None:
        return self.resources.cpus if self.resources else None

    @property
    def mems(self) -> CPUSet | None:
        return self.resources.mems if self.resources else None


def _refuse_empty(owner: str, name: str, value: CPUSet | None) -> None:
    if value is not None and not value:
        raise EmptyCPUSetError(
            f"{owner}.{name} is an empty set: the runtime reads an empty {name} as 'no change'; "
            f"use None to leave {name} alone"
        )


@dataclass(frozen=True, slots=True)
class ContainerAdjustment:
    """Changes to a container being created; ``None`` leaves a field alone."""

    cpus: CPUSet | None = None
    mems: CPUSet | None = None
    cpu_shares: int | None = None
    cpu_quota: int | None = None
    cpu_period: int | None = None
    memory_limit: int | None = None
    annotations: Mapping[str, str] = field(default_factory=dict)
    env: Mapping[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        _refuse_empty("ContainerAdjustment", "cpus", self.cpus)
        _refuse_empty("ContainerAdjustment", "mems", self.mems)


@dataclass(frozen=True, slots=True)
class ContainerUpdate:
    """Changes to an existing container's resources; ``None`` leaves a field alone."""

    container_id: str
    cpus: CPUSet | None = None
    mems: CPUSet | None = None
    cpu_shares: int | None = None
    cpu_quota: int | None = None
    cpu_period: int | None = None
    memory_limit: int | None = None
    ignore_failure: bool = False

    def __post_init__(self) -> None:
        if not self.container_id:
            raise ValueError("ContainerUpdate.container_id must not be empty")
        cpus, mems = self.cpus, self.mems
        if (cpus is not None and not cpus) or (mems is not None and not mems):  # name it only when refusing
            _refuse_empty(f"ContainerUpdate({self.container_id})", "cpus", cpus)
            _refuse_empty(f"ContainerUpdate({self.container_id})", "mems", mems)


def placement_update(container_id: str, cpus: CPUSet, mems: CPUSet | None) -> ContainerUpdate:
    """The ContainerUpdate of a placement decision: ``container_id`` on ``cpus`` (and ``mems``
    when pinned), with every check ``ContainerUpdate`` makes."""
    return ContainerUpdate(container_id, cpus, mems)


def placement_adjustment(cpus: CPUSet, mems: CPUSet | None) -> ContainerAdjustment:
    """The ContainerAdjustment of a placement decision: ``cpus`` (and ``mems`` when pinned),
    with every check ``ContainerAdjustment`` makes."""
    return ContainerAdjustment(cpus, mems)


#: (container id, cpus, mems or None) of one placement update.
Placement = tuple[str, CPUSet, "CPUSet | None"]


class PlacementUpdates(Sequence[ContainerUpdate]):
    """Placement updates kept as ``(container id, cpus, mems or None)``: read one by one they are
    ``placement_update``s (same checks), but ``replywire`` writes them to the wire straight from
    these triples. A reply moving a pool's followers built one dataclass per follower only for
    the encoder to read it back. Compares equal to any sequence of the same updates."""

    __slots__ = ("placements",)

    def __init__(self, placements: Sequence[Placement] = ()) -> None:
        self.placements: Final = tuple(placements)

    def __len__(self) -> int:
        return len(self.placements)

    @overload
    def __getitem__(self, index: int) -> ContainerUpdate: ...

    @overload
    def __getitem__(self, index: slice) -> PlacementUpdates: ...

    def __getitem__(self, index: int | slice) -> ContainerUpdate | PlacementUpdates:
        if isinstance(index, slice):
            return PlacementUpdates(self.placements[index])
        return placement_update(*self.placements[index])

    def __iter__(self) -> Iterator[ContainerUpdate]:
        for placement in self.placements:
            yield placement_update(*placement)

    def __eq__(self, other: object) -> bool:
        if isinstance(other, PlacementUpdates):
            return self.placements == other.placements
        if isinstance(other, Sequence) and not isinstance(other, (str, bytes)):
            return tuple(self) == tuple(other)
        return NotImplemented

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"PlacementUpdates({list(self)!r})"

    @property
    def container_ids(self) -> list[str]:
        return [p[0] for p in self.placements]


@dataclass(frozen=True, slots=True)
class CreateContainerResult:
    """A CreateContainer answer: the new container's adjustment plus updates of others
    (a tuple, or the agent's ``PlacementUpdates``)."""

    adjust: ContainerAdjustment | None = None
    updates: Sequence[ContainerUpdate] = ()
