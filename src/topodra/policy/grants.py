"""A container's grant: what the policy gave it, as plain immutable data."""

from __future__ import annotations

from dataclasses import dataclass

from topodra.policy.api import ContainerRequest
from topodra.policy.classify import GrantKind

__all__ = ["Grant"]


@dataclass(frozen=True, slots=True)
class Grant:
    """Where one container runs and what it is charged for.

    CPU and node sets are bitmasks. ``pool`` is the CPU pool (shared and mixed
    containers follow its shared set); ``mem_pool`` the pool whose memory nodes
    the container uses (an ancestor of ``pool`` when the memory did not fit).
    """

    request: ContainerRequest
    kind: GrantKind
    pool: int
    exclusive: int = 0  # exclusive CPUs (exclusive, mixed)
    isolated: bool = False  # exclusive CPUs are kernel-isolated ones
    milli: int = 0  # shared CPU charged to the pool subtree (shared, mixed; >= 1 for shared)
    mem_pool: int = 0
    mems: int = 0  # NUMA nodes for cpuset.mems
    memory: int = 0  # bytes charged to mem_pool's subtree
    hide_hyperthreads: bool = False
    memory_preserve: bool = False
    degraded: str = ""  # why this grant is not what the request asked for (after sync/reconfigure)
    claims: tuple[str, ...] = ()  # the DRA claims a claimed container runs on

    @property
    def follows_pool(self) -> bool:
        """Shared and mixed containers run on their pool's shared set."""
        return self.kind is GrantKind.SHARED or self.kind is GrantKind.MIXED
