"""The pool tree: root -> socket -> die -> NUMA node -> L3, with each pool's static supply.

A pool is a node of the group tree labelled system, package, die, NUMA node or
L3 (see ``groups``). Its supply never changes after construction: its CPUs,
which of them are reserved, kernel-isolated or sharable, and its memory by
kind. Memory-only NUMA nodes (HBM, PMEM, CXL) belong to every pool holding
the CPUs of their closest CPU node. What is in use right now lives in the
``Supply`` (supply.py); this module is pure construction.
"""

from __future__ import annotations

from dataclasses import dataclass

from topodra.cpuset import CPUSet
from topodra.policy.groups import POOL_LEVELS, GroupTree
from topodra.topology.model import CoreType, MemoryKind, Topology

__all__ = ["Pool", "MemoryMap", "build_pools"]


@dataclass(frozen=True, slots=True)
class Pool:
    """One pool and its static supply (all CPU and node sets are bitmasks)."""

    index: int
    name: str
    group: int  # index in the group tree
    parent: int  # pool index, -1 for the root
    children: tuple[int, ...]
    depth: int
    levels: tuple[str, ...]  # the pool levels this pool stands for, top first
    path: tuple[int, ...]  # pool indexes from the root to this pool
    cpus: int
    reserved: int
    isolated: int
    sharable: int
    cpu_nodes: int  # NUMA nodes holding this pool's CPUs
    memory: dict[MemoryKind, int]  # memory-bearing nodes by kind, memory-only nodes attached

    def nodes_of(self, kinds: frozenset[MemoryKind]) -> int:
        mask = 0
        for kind in kinds:
            mask |= self.memory.get(kind, 0)
        return mask


@dataclass(frozen=True, slots=True)
class MemoryMap:
    """Node sizes and which nodes can hold memory at all."""

    bytes: dict[int, int]
    kind: dict[int, MemoryKind]
    attached_to: dict[int, int]  # memory-only node -> its closest CPU node

    def size(self, nodes: int) -> int:
        total = 0
        while nodes:
            low = nodes & -nodes
            total += self.bytes.get(low.bit_length() - 1, 0)
            nodes ^= low
        return total


def _pool_name(levels: list[tuple[str, int]], is_root: bool) -> str:
    if is_root:
        return "root"
    level, ident = next((lv, i) for lv, i in levels if lv in POOL_LEVELS)
    return f"{level}{ident}"


def build_pools(
    topology: Topology, tree: GroupTree, reserved: CPUSet, isolated: CPUSet
) -> tuple[list[Pool], MemoryMap]:
    """Pools in depth-first order (parents first) and the machine's memory map."""
    node_of_cpu = {c: info.node for c, info in topology.cpus.items()}
    allowed = tree.root.mask
    any_memory = any(n.memory_bytes > 0 for n in topology.nodes.values())

    def has_memory(node: int) -> bool:
        n = topology.nodes[node]
        return n.memory_bytes > 0 or not any_memory

    # NUMA nodes with usable CPUs, and where each memory-only node attaches.
    cpu_nodes = sorted({node_of_cpu[c] for c in CPUSet.from_mask(allowed)})
    attached: dict[int, int] = {}
    for n in sorted(topology.nodes):
        node = topology.nodes[n]
        if node.cpus & topology.online or not has_memory(n) or not cpu_nodes:
            continue
        attached[n] = min(cpu_nodes, key=lambda c: (topology.distance(n, c), c))
    sizes = {n: (node.memory_bytes if has_memory(n) else 0) for n, node in topology.nodes.items()}
    kinds = {n: node.kind for n, node in topology.nodes.items()}
    memory_map = MemoryMap(bytes=sizes, kind=kinds, attached_to=attached)

    pool_groups = [g for g in tree.groups if g.pool >= 0]
    pools: list[Pool] = []
    parent_pool: dict[int, int] = {}
    for g in pool_groups:
        p = g.parent
        while p >= 0 and tree.groups[p].pool < 0:
            p = tree.groups[p].parent
        parent_pool[g.pool] = tree.groups[p].pool if p >= 0 else -1
    children: dict[int, list[int]] = {g.pool: [] for g in pool_groups}
    for idx, par in parent_pool.items():
        if par >= 0:
            children[par].append(idx)
    for g in pool_groups:
        idx = g.pool
        par = parent_pool[idx]
        path = (*pools[par].path, idx) if par >= 0 else (idx,)
        nodes_mask = 0
        for c in CPUSet.from_mask(g.mask):
            nodes_mask |= 1 << node_of_cpu[c]
        memory: dict[MemoryKind, int] = {}
        for n in CPUSet.from_mask(nodes_mask):
            if has_memory(n):
                memory[kinds[n]] = memory.get(kinds[n], 0) | (1 << n)
        for m, c in attached.items():
            if nodes_mask >> c & 1:
                memory[kinds[m]] = memory.get(kinds[m], 0) | (1 << m)
        pool_reserved = g.mask & reserved.mask
        pool_isolated = g.mask & isolated.mask
        pools.append(
            Pool(
                index=idx,
                name=_pool_name(g.labels, idx == 0),
                group=g.index,
                parent=par,
                children=tuple(children[idx]),
                depth=len(path) - 1,
                levels=tuple(lv for lv, _ in g.labels if lv in POOL_LEVELS),
                path=path,
                cpus=g.mask,
                reserved=pool_reserved,
                isolated=pool_isolated,
                sharable=g.mask & ~pool_reserved & ~pool_isolated,
                cpu_nodes=nodes_mask,
                memory=memory,
            )
        )
    return pools, memory_map


def core_type_masks(topology: Topology, allowed: int) -> dict[CoreType, int]:
    """Usable CPUs by core kind."""
    out: dict[CoreType, int] = {}
    for kind in topology.core_types():
        mask = topology.cpus_of_type(kind).mask & allowed
        if mask:
            out[kind] = mask
    return out
