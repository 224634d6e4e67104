"""Pool gathering for one node, as the structured allocator does it.

Slices relevant for the node are grouped by (driver, pool name); only the
highest generation counts; a pool with fewer slices than
``resourceSliceCount`` is re-checked against all slices (obsolete pools are
dropped, incomplete ones kept as markers); slices are sorted by name and
pools by driver then pool name, with pools whose devices carry binding
conditions last. Duplicate device names or dangling counter references make
a pool invalid.

Slices with shared counters are relevant for every node, whatever their node
selection ("needed to use a pool regardless of their node selector",
pools_incubating.go): a node sees another node's pool through its counter
slices, with no device it could allocate. ``foreign_pools`` works such views
out once; only the invalid and incomplete ones change what a node's
allocation does (an All request fails on them), so only they are kept.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from topodra.quantity import Quantity
from topodra.sim.objects import Device, Node, Slice, node_selector_matches

__all__ = ["Pool", "ambiguous_counts", "foreign_pools", "gather_pools", "node_matches"]


@dataclass(frozen=True, slots=True)
class _ListFacts:
    """What pool checks need from one device list: computed once, shared by every node using it."""

    devices: list[Device]  # held so that the id() key stays valid while cached
    names: frozenset[str]
    duplicates: bool
    counter_refs: tuple[tuple[str, tuple[str, ...]], ...]  # (counter set, counters) in device order
    binding: bool  # some device has binding conditions


_FACTS: dict[int, _ListFacts] = {}
_FACTS_LIMIT = 4096


def _facts(devices: list[Device]) -> _ListFacts:
    """Facts of a device list; nodes of one machine share their lists, so this is a cache hit."""
    hit = _FACTS.get(id(devices))
    if hit is not None and hit.devices is devices:
        return hit
    names = frozenset(d.name for d in devices)
    refs: dict[tuple[str, tuple[str, ...]], None] = {}
    for d in devices:
        for cset, counters in d.consumes_counters:
            refs.setdefault((cset, tuple(n for n, _ in counters)), None)
    facts = _ListFacts(devices, names, len(names) != len(devices), tuple(refs), any(d.binding_conditions for d in devices))
    if len(_FACTS) >= _FACTS_LIMIT:
        _FACTS.clear()
    _FACTS[id(devices)] = facts
    return facts


@dataclass(slots=True)
class Pool:
    """A pool of one driver seen from one node: its slices, counter sets, and whether it is complete."""

    driver: str
    name: str
    slices: list[Slice] = field(default_factory=list)  # device slices targeting the node, by name
    other_slices: list[Slice] = field(default_factory=list)  # same pool, not targeting the node
    counter_sets: dict[str, dict[str, Quantity]] = field(default_factory=dict)
    incomplete: bool = False
    invalid: bool = False
    invalid_reason: str = ""

    @property
    def usable(self) -> bool:
        return not (self.incomplete or self.invalid)

    @property
    def key(self) -> tuple[str, str]:
        return (self.driver, self.name)


def node_matches(node: Node, node_name: str, all_nodes: bool, selector: object) -> bool:
    if node_name:
        return node.name == node_name
    if all_nodes:
        return True
    if isinstance(selector, dict):
        return node_selector_matches(selector, node)
    return False


def _relevant(s: Slice, node: Node) -> bool | None:
    """True/False, or None when the slice has no known node-selection field (skipped)."""
    if s.shared_counters:
        return True
    if s.node_name or s.all_nodes or s.node_selector is not None:
        return node_matches(node, s.node_name, s.all_nodes, s.node_selector)
    if s.per_device_node_selection:
        return any(node_matches(node, d.node_name, d.all_nodes, d.node_selector) for d in s.devices)
    return None


def gather_pools(
    slices_for_node: Iterable[Slice],
    node: Node,
    all_slices_of_pool: Mapping[tuple[str, str], Sequence[Slice]],
    also: Sequence[Pool] = (),
    alternate: frozenset[tuple[str, str]] = frozenset(),
) -> list[Pool]:
    """The node's pools in allocation order; ``all_slices_of_pool`` indexes every slice by pool;
    ``also``: pools the node sees through other nodes' counter slices (``foreign_pools``).

    A pool is complete when it has as many slices as ``resourceSliceCount`` of its first slice,
    and which slice is first is the informer's listing order, which nothing fixes: where the
    slices disagree (``ambiguous_counts``), the first one given is taken, or, for the pools in
    ``alternate``, the first whose count differs from it."""
    grouped: dict[tuple[str, str], list[Slice]] = {}
    for s in slices_for_node:
        if not _relevant(s, node):
            continue
        key = (s.driver, s.pool)
        cur = grouped.get(key)
        if cur is None or s.generation > cur[0].generation:
            grouped[key] = [s]
        elif s.generation == cur[0].generation:
            cur.append(s)
    result: list[Pool] = [p for p in also if p.key not in grouped]
    with_binding: list[Pool] = []
    for key, kept in grouped.items():
        count = kept[0].slice_count
        if key in alternate:
            count = next((s.slice_count for s in kept if s.slice_count != count), count)
        all_for_pool: list[Slice] | None = None
        if len(kept) != count:
            gen = kept[0].generation
            everything = all_slices_of_pool.get(key, ())
            if any(s.generation > gen for s in everything):
                continue  # obsolete
            all_for_pool = [s for s in everything if s.generation == gen]
            if len(all_for_pool) != count:
                result.append(Pool(key[0], key[1], incomplete=True))
                continue
        pool = _build(key, kept, all_for_pool)
        if any(_facts(s.devices).binding for s in pool.slices):
            with_binding.append(pool)
        else:
            result.append(pool)
    result.sort(key=lambda p: (p.driver, p.name))
    with_binding.sort(key=lambda p: (p.driver, p.name))
    return result + with_binding


def ambiguous_counts(all_slices_of_pool: Mapping[tuple[str, str], Sequence[Slice]]) -> frozenset[tuple[str, str]]:
    """The pools whose current slices disagree on ``resourceSliceCount``: whether such a pool is
    complete depends on which slice the scheduler lists first (pools_incubating.go)."""
    out = set()
    for key, slices in all_slices_of_pool.items():
        gen = max((s.generation for s in slices), default=0)
        if len({s.slice_count for s in slices if s.generation == gen}) > 1:
            out.add(key)
    return frozenset(out)


_NOWHERE = Node("", {})  # a node no slice selects: only counter slices are relevant for it


def foreign_pools(counter_slices: Iterable[Slice], all_slices_of_pool: Mapping[tuple[str, str], Sequence[Slice]]) -> list[tuple[str, Pool]]:
    """(owner node, pool) of the node-local pools with counter slices, as any other node sees
    them, kept when invalid or incomplete (a valid one holds nothing another node could use)."""
    owner: dict[tuple[str, str], str] = {}
    local = []
    for s in counter_slices:
        if s.node_name:
            owner.setdefault((s.driver, s.pool), s.node_name)
            local.append(s)
    pools = gather_pools(local, _NOWHERE, all_slices_of_pool)
    return [(owner[p.key], p) for p in pools if not p.usable]


def _build(key: tuple[str, str], kept: list[Slice], all_for_pool: list[Slice] | None) -> Pool:
    kept = sorted(kept, key=lambda s: s.name)
    device_slices = [s for s in kept if not s.shared_counters]
    counter_slices = [s for s in kept if s.shared_counters]
    other: list[Slice] = []
    if all_for_pool is not None and len(kept) < len(all_for_pool):
        names = {s.name for s in kept}
        for s in all_for_pool:
            if s.name in names:
                continue
            (counter_slices if s.shared_counters else other).append(s)
    pool = Pool(key[0], key[1], slices=device_slices, other_slices=other)
    facts = [_facts(s.devices) for s in device_slices]
    if any(f.duplicates for f in facts) or not _disjoint([f.names for f in facts]):
        seen: set[str] = set()
        for s in device_slices:
            for d in s.devices:
                if d.name in seen:
                    return Pool(key[0], key[1], invalid=True, invalid_reason=f"duplicate device name {d.name}")
                seen.add(d.name)
    sets: dict[str, dict[str, Quantity]] = {}
    for s in counter_slices:
        for set_name, set_counters in s.shared_counters.items():
            if set_name in sets:
                return Pool(key[0], key[1], invalid=True, invalid_reason=f"duplicate counter set name {set_name}")
            sets[set_name] = set_counters
    for s in device_slices + other:
        for cset, cnames in _facts(s.devices).counter_refs:
            if cset not in sets:
                return Pool(key[0], key[1], invalid=True, invalid_reason=f"counter set {cset} not found")
            for cname in cnames:
                if cname not in sets[cset]:
                    return Pool(key[0], key[1], invalid=True, invalid_reason=f"counter {cname} not found in counter set {cset}")
    pool.counter_sets = sets
    return pool


def _disjoint(name_sets: Sequence[frozenset[str]]) -> bool:
    if len(name_sets) <= 8:
        return all(a.isdisjoint(b) for i, a in enumerate(name_sets) for b in name_sets[i + 1 :])
    return len(frozenset().union(*name_sets)) == sum(len(n) for n in name_sets)
