"""The policy's boundary types: what goes in (requests) and what comes out (changes).

Every state-changing policy call returns ``Changes``: the new assignment of
every container whose CPUs or memory nodes changed because of the call
(the container the call was about included). The caller (the agent) pushes
them to the runtime at once; the policy keeps no pending updates.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TypeAlias

from topodra.cpuset import CPUSet

__all__ = [
    "Assignment",
    "BadRequestError",
    "Changes",
    "MEMORY_MODES",
    "ContainerRequest",
    "NoFitError",
    "NodeSet",
    "PolicyError",
    "QoSClass",
    "SnapshotError",
]

#: NUMA node ids use the same list format as CPUs ("0-1,3").
NodeSet: TypeAlias = CPUSet
#: The memory nodes a DRA claim's containers get (``Policy.claim(memory=)``): ``local``, the nodes of
#: its CPUs (and memory-only nodes attached to them), or ``all``, every node of their memory kinds.
MEMORY_MODES = ("local", "all")


class PolicyError(Exception):
    """A request the policy refuses; the message says what and why. Nothing changed.

    The subclasses say whose move it is: ``BadRequestError`` (fix the input),
    ``NoFitError`` (valid, but nothing fits now: free something or wait) and
    ``SnapshotError`` (saved state that does not fit this machine or the rules).
    """


class BadRequestError(PolicyError):
    """The input itself is wrong: a malformed request or annotation, an unknown or overlapping
    claim, a configuration that does not fit the machine."""


class NoFitError(PolicyError):
    """A valid request that the CPUs and memory left cannot satisfy right now."""


class SnapshotError(PolicyError):
    """A snapshot that is corrupt, from another machine, or describes a state the rules forbid."""


class QoSClass(enum.StrEnum):
    GUARANTEED = "Guaranteed"
    BURSTABLE = "Burstable"
    BEST_EFFORT = "BestEffort"


@dataclass(frozen=True, slots=True)
class Assignment:
    """Where a container runs: its cpuset and its memory nodes.

    ``cpus`` is never empty (the runtime reads an empty cpuset as "no
    change"). ``mems`` may be empty: then memory placement is left alone.
    """

    cpus: CPUSet
    mems: NodeSet = field(default_factory=CPUSet)

    def __post_init__(self) -> None:
        if not self.cpus:
            raise BadRequestError("refusing an assignment with an empty cpuset")


#: container id -> its new assignment, for every container that changed.
Changes: TypeAlias = dict[str, Assignment]


@dataclass(frozen=True, slots=True)
class ContainerRequest:
    """A container as the policy sees it, taken from the runtime's view.

    ``annotations`` are the pod's annotations (container-scoped keys use the
    ``key/container.<name>`` form). ``claims`` lists the ids of prepared DRA
    claims whose CPUs this container must run on.
    """

    id: str
    name: str
    pod_uid: str
    pod_name: str
    namespace: str
    qos: QoSClass
    cpu_request_milli: int = 0
    cpu_limit_milli: int | None = None  # None: no limit
    memory_request: int = 0
    memory_limit: int | None = None
    annotations: Mapping[str, str] = field(default_factory=dict)
    claims: tuple[str, ...] = ()
