"""Read-only figures about the policy's state, for metrics and the UI."""

from __future__ import annotations

from dataclasses import dataclass, field

from topodra.cpuset import CPUSet
from topodra.policy.api import NodeSet
from topodra.policy.config import PolicyConfig
from topodra.policy.supply import Supply
from topodra.topology.model import CoreType

__all__ = ["CPUUsage", "PoolStats", "PolicyStats", "collect"]


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


def collect(supply: Supply, config: PolicyConfig) -> PolicyStats:
    """The figures of one state of the accounting."""
    part = supply.part
    pools = part.pools
    default_kinds = frozenset(config.default_memory_types)

    def usage(cpus: int) -> CPUUsage:
        shared = supply.shared_in(cpus)
        free_iso = cpus & part.isolated & ~supply.used
        return CPUUsage(
            cpus=CPUSet.from_mask(cpus),
            allocated=CPUSet.from_mask(cpus & supply.excl),
            shared=CPUSet.from_mask(shared),
            claimed=CPUSet.from_mask(cpus & supply.claimed),
            reserved=CPUSet.from_mask(cpus & part.reserved),
            isolated=CPUSet.from_mask(cpus & part.isolated),
            free=CPUSet.from_mask(shared | free_iso),
        )

    out = []
    for p in pools:
        nodes = 0
        for m in p.memory.values():
            nodes |= m
        out.append(
            PoolStats(
                name=p.name,
                levels=p.levels,
                depth=p.depth,
                parent=pools[p.parent].name if p.parent >= 0 else None,
                usage=usage(p.cpus),
                mems=CPUSet.from_mask(nodes),
                memory_bytes=part.memory.size(p.nodes_of(default_kinds)),
                memory_requested=supply.mem[p.index],
                shared_requested_milli=supply.milli[p.index],
                shared_capacity_milli=1000 * supply.shared(p.index).bit_count(),
                containers=supply.members[p.index],
            )
        )
    counts: dict[str, int] = {}
    for g in supply.grants.values():
        counts[g.kind.value] = counts.get(g.kind.value, 0) + 1
    return PolicyStats(
        pools=tuple(out),
        total=usage(part.allowed),
        kinds={kind: usage(mask) for kind, mask in part.kind_masks.items()},
        containers=dict(sorted(counts.items())),
        degraded=tuple(sorted(cid for cid, g in supply.grants.items() if g.degraded)),
    )
