"""The static side of the policy: which CPUs it may use, how they split, and the pool tree.

Built once per (topology, config) and never changed: reserved, kernel-isolated
and sharable CPUs, the group tree the packing descends, the pools with their
supply, and lookup tables derived from them. What is in use right now is the
``Supply``'s business (``supply.py``).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from topodra.cpuset import CPUSet, iter_bits
from topodra.policy.api import BadRequestError
from topodra.policy.config import PolicyConfig, TopologyLevel
from topodra.policy.groups import LEVELS, GroupTree, build_group_tree
from topodra.policy.packing import pack_near
from topodra.policy.pools import MemoryMap, Pool, build_pools, core_type_masks
from topodra.topology.model import CoreType, MemoryKind, Topology

__all__ = ["Partition", "build_partition", "bits", "fmt"]

_RANK = {name: i for i, name in enumerate(LEVELS)}
_LEVEL_RANK = {TopologyLevel(v): _RANK[v] for v in ("system", "package", "die", "numa", "l3cache")}


bits = iter_bits  # the set bits of a mask, lowest first (topodra.cpuset)


def fmt(mask: int) -> str:
    return CPUSet.from_mask(mask).format() or "none"


@dataclass(frozen=True, slots=True, eq=False)
class Partition:
    """The CPUs the policy manages, split once, and the pool tree over them (masks are ints)."""

    topology: Topology
    tree: GroupTree
    pools: tuple[Pool, ...]
    memory: MemoryMap
    allowed: int  # online CPUs the config lets the policy use
    reserved: int
    isolated: int  # kernel-isolated CPUs the policy may grant (reserved ones excluded)
    sharable: int  # allowed - reserved - isolated
    kind_masks: dict[CoreType, int]
    pool_of_group: tuple[int, ...]  # group index -> the pool holding it (itself or the nearest ancestor)
    by_name: dict[str, int]
    depth: tuple[int, ...]
    parents: tuple[int, ...]
    children: tuple[tuple[int, ...], ...]
    level_dist: dict[TopologyLevel, tuple[int, ...]]  # per level, per pool: how far the pool is from it
    node_of_cpu: dict[int, int]
    pool_of_cpu: tuple[int, ...]  # CPU -> the deepest pool holding it (-1: none)
    _mem_size: dict[tuple[int, frozenset[MemoryKind]], int] = field(default_factory=dict)
    _mem_sizes: dict[frozenset[MemoryKind], tuple[int, ...]] = field(default_factory=dict)
    _missing: dict[frozenset[MemoryKind], tuple[int, ...]] = field(default_factory=dict)
    _min_mem: dict[frozenset[MemoryKind], int] = field(default_factory=dict)
    _lacks: dict[frozenset[MemoryKind], bool] = field(default_factory=dict)
    _orders: dict[TopologyLevel | None, tuple[tuple[int, ...], ...]] = field(default_factory=dict)

    def pool_at(self, mask: int, start_group: int = 0) -> int:
        """The deepest pool holding every CPU of ``mask``."""
        return self.pool_of_group[self.tree.deepest_containing(mask, start_group)]

    def pools_of(self, mask: int) -> list[int]:
        """Every pool holding a CPU of ``mask``, parents before children (closed under ancestors).

        The pools holding a CPU are the path to the deepest one; one path per deepest pool hit
        (its other CPUs are skipped), in index order, which is depth-first with parents first.
        """
        pools, pool_of_cpu = self.pools, self.pool_of_cpu
        mask &= pools[0].cpus
        if not mask:
            return []
        deepest = pools[pool_of_cpu[(mask & -mask).bit_length() - 1]]
        mask &= ~deepest.cpus
        if not mask:
            return list(deepest.path)
        hit = set(deepest.path)
        while mask:
            deepest = pools[pool_of_cpu[(mask & -mask).bit_length() - 1]]
            hit.update(deepest.path)
            mask &= ~deepest.cpus
        return sorted(hit)

    def missing_kinds(self, kinds: frozenset[MemoryKind]) -> tuple[int, ...]:
        """Per pool: how many of the wanted memory kinds this machine has but the pool lacks."""
        got = self._missing.get(kinds)
        if got is None:
            root = self.pools[0].memory
            got = tuple(sum(1 for k in kinds if k in root and k not in p.memory) for p in self.pools)
            self._missing[kinds] = got
        return got

    def lacks_kinds(self, kinds: frozenset[MemoryKind]) -> bool:
        """Some pool lacks one of the wanted memory kinds that the machine has."""
        got = self._lacks.get(kinds)
        if got is None:
            got = self._lacks[kinds] = any(self.missing_kinds(kinds))
        return got

    def shared_order(self, level: TopologyLevel | None) -> tuple[tuple[int, ...], ...]:
        """The pools in the static order of shared placement: by distance from ``level`` (if any),
        then deeper first; pools of equal rank together, by index."""
        got = self._orders.get(level)
        if got is None:
            dist = self.level_dist[level] if level is not None else (0,) * len(self.pools)
            ranks: dict[tuple[int, int], list[int]] = {}
            for p in self.pools:
                ranks.setdefault((dist[p.index], -p.depth), []).append(p.index)
            got = self._orders[level] = tuple(tuple(ranks[k]) for k in sorted(ranks))
        return got

    def mem_size(self, pool: int, kinds: frozenset[MemoryKind]) -> int:
        key = (pool, kinds)
        size = self._mem_size.get(key)
        if size is None:
            size = self._mem_size[key] = self.memory.size(self.pools[pool].nodes_of(kinds))
        return size

    def mem_sizes(self, kinds: frozenset[MemoryKind]) -> tuple[int, ...]:
        """``mem_size`` of every pool, by index (one lookup for a placement that ranks them all)."""
        got = self._mem_sizes.get(kinds)
        if got is None:
            got = self._mem_sizes[kinds] = tuple(self.mem_size(i, kinds) for i in range(len(self.pools)))
        return got

    def min_mem_size(self, kinds: frozenset[MemoryKind]) -> int:
        """The least ``mem_size`` of any pool."""
        got = self._min_mem.get(kinds)
        if got is None:
            got = self._min_mem[kinds] = min(self.mem_sizes(kinds))
        return got

    def nodes_near(self, cpus: int, nodes: int) -> int:
        """The nodes of ``nodes`` that hold one of ``cpus`` or are attached to a node that does."""
        homes = 0
        for c in bits(cpus):
            homes |= 1 << self.node_of_cpu[c]
        attached = self.memory.attached_to
        return sum(1 << n for n in bits(nodes) if homes >> attached.get(n, n) & 1)

    def thin(self, cpus: int) -> int:
        """One hardware thread per core (hide-hyperthreads)."""
        out, seen = 0, 0
        core_of = self.tree.core_of
        for c in bits(cpus):
            core = core_of.get(c, 1 << c)
            if not core & seen:
                out |= 1 << c
                seen |= core
        return out


def _level_distance(pool: Pool, level: TopologyLevel) -> int:
    target = _LEVEL_RANK[level]
    ranks = [_RANK[lv] for lv in pool.levels]
    if target in ranks:
        return 0
    if max(ranks) < target:
        return target - max(ranks)
    return 100 + min(ranks) - target


def _allowed(topo: Topology, cfg: PolicyConfig) -> CPUSet:
    online = topo.online
    allowed = online
    if cfg.available_cpus is not None:
        bad = cfg.available_cpus - online
        if bad:
            raise BadRequestError(
                f"availableCPUs {cfg.available_cpus.format()!r}: CPUs {bad} are not online (online CPUs: {online})"
            )
        allowed = cfg.available_cpus
    if cfg.excluded_cpus is not None:
        allowed = allowed - cfg.excluded_cpus
    if not allowed:
        raise BadRequestError("availableCPUs/excludedCPUs leave no CPU for the policy to use")
    return allowed


def _reserved(cfg: PolicyConfig, tree: GroupTree, allowed: CPUSet, isolated: CPUSet) -> CPUSet:
    if cfg.reserved_cpus is not None:
        bad = cfg.reserved_cpus - allowed
        if bad:
            raise BadRequestError(
                f"reservedCPUs {cfg.reserved_cpus.format()!r}: CPUs {bad} are not available to the "
                f"policy (available: {allowed})"
            )
        return cfg.reserved_cpus
    if not cfg.reserved_cpu_count:
        return CPUSet()
    cand = allowed - isolated
    if cfg.reserved_cpu_count >= len(cand):
        raise BadRequestError(
            f"reservedCPUCount {cfg.reserved_cpu_count}: only {len(cand)} non-isolated CPUs are "
            "available and at least one must stay for containers"
        )
    # Start at the lowest CPU (where the kernel keeps its housekeeping), topology-packed.
    first = cand.first()
    anchor = tree.core_of.get(first, 1 << first) & cand.mask
    picked = pack_near(tree, 0, anchor, cand.mask, cfg.reserved_cpu_count)
    assert picked is not None  # enough candidates were checked above
    return CPUSet.from_mask(picked)


def build_partition(topo: Topology, cfg: PolicyConfig) -> Partition:
    """Split the machine's CPUs as ``cfg`` says; ``BadRequestError`` naming the field if it cannot."""
    allowed = _allowed(topo, cfg)
    kernel_isolated = topo.isolated | CPUSet(c for c, info in topo.cpus.items() if info.isolated)
    tree = build_group_tree(topo, allowed)
    reserved = _reserved(cfg, tree, allowed, kernel_isolated & allowed)
    isolated = (kernel_isolated & allowed) - reserved
    sharable = allowed - reserved - isolated
    if not sharable:
        raise BadRequestError(
            f"no CPU left for shared containers: of the available CPUs {allowed}, {reserved or 'none'} "
            f"are reserved and {isolated or 'none'} isolated"
        )
    pools, memory = build_pools(topo, tree, reserved, isolated)
    pool_of_group = [0] * len(tree.groups)
    for g in tree.groups:
        pool_of_group[g.index] = g.pool if g.pool >= 0 else pool_of_group[g.parent]
    pool_of_cpu = [-1] * (max(topo.cpus, default=0) + 1)
    for c in bits(allowed.mask):
        pool_of_cpu[c] = pool_of_group[tree.deepest_containing(1 << c)]
    return Partition(
        topology=topo,
        tree=tree,
        pools=tuple(pools),
        memory=memory,
        allowed=allowed.mask,
        reserved=reserved.mask,
        isolated=isolated.mask,
        sharable=sharable.mask,
        kind_masks=core_type_masks(topo, allowed.mask),
        pool_of_group=tuple(pool_of_group),
        by_name={p.name: p.index for p in pools},
        depth=tuple(p.depth for p in pools),
        parents=tuple(p.parent for p in pools),
        children=tuple(p.children for p in pools),
        level_dist={lv: tuple(_level_distance(p, lv) for p in pools) for lv in TopologyLevel},
        node_of_cpu={c: info.node for c, info in topo.cpus.items()},
        pool_of_cpu=tuple(pool_of_cpu),
    )
