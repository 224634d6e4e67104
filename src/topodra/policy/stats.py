"""Read-only figures about the policy's state, for metrics and the UI."""

from __future__ import annotations

from dataclasses import dataclass, field

from topodra.cpuset import CPUSet
from topodra.policy.api import NodeSet
from topodra.topology.model import CoreType

__all__ = ["CPUUsage", "PoolStats", "PolicyStats"]


@dataclass(frozen=True, slots=True)
class CPUUsage:
    """How a set of CPUs is used right now.

    ``allocated``, ``claimed``, ``reserved`` and ``shared`` are disjoint;
    ``free`` is what a new exclusive grant or DRA claim could still take
    (the shared set plus unallocated isolated CPUs).
    """

    cpus: CPUSet
    allocated: CPUSet  # exclusive grants
    shared: CPUSet  # the shared set: sharable CPUs not allocated or claimed
    claimed: CPUSet  # DRA claims
    reserved: CPUSet
    isolated: CPUSet  # kernel-isolated CPUs, whether allocated or not
    free: CPUSet


@dataclass(frozen=True, slots=True)
class PoolStats:
    name: str
    levels: tuple[str, ...]
    depth: int
    parent: str | None
    usage: CPUUsage
    mems: NodeSet  # memory-bearing NUMA nodes, memory-only ones included
    memory_bytes: int  # default-kind memory of the pool
    memory_requested: int  # bytes requested by containers using this pool's memory (subtree)
    shared_requested_milli: int  # shared CPU requested by containers in this pool's subtree
    shared_capacity_milli: int  # 1000 x shared CPUs (subtree), what the requests are set against
    containers: int  # containers whose CPU pool is this pool


@dataclass(frozen=True, slots=True)
class PolicyStats:
    pools: tuple[PoolStats, ...]
    total: CPUUsage
    kinds: dict[CoreType, CPUUsage] = field(default_factory=dict)
    containers: dict[str, int] = field(default_factory=dict)  # grant kind -> count
    degraded: tuple[str, ...] = ()  # containers placed differently from what they asked

    def pool(self, name: str) -> PoolStats:
        for p in self.pools:
            if p.name == name:
                return p
        raise KeyError(f"no pool named {name!r}")
