"""The machine as a tree of CPU groups: system, package, die, NUMA node, L3, cluster, L2, core.

Built from the topology restricted to the CPUs the policy may use. Groups
with the same CPUs are one node carrying several labels (a one-socket laptop's
root is also its package, NUMA node and L3), so redundant levels collapse by
construction. Nesting follows the CPU sets, not a fixed level order: a NUMA
node holding several dies sits above them. A group that crosses another
(shares some CPUs without one containing the other) cannot be a tree node
and is left out; ``notes`` says so.

Pools are the nodes labelled system, package, die, NUMA node or L3; the
finer levels only guide the packing of exclusive CPUs.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from topodra.cpuset import CPUSet
from topodra.topology.model import Topology

__all__ = ["Group", "GroupTree", "LEVELS", "POOL_LEVELS", "build_group_tree"]

#: Levels from the top; "numa" and "l3cache" use the upstream level names.
LEVELS = ("system", "package", "die", "numa", "l3cache", "cluster", "l2", "core")
POOL_LEVELS = frozenset({"system", "package", "die", "numa", "l3cache"})
_RANK = {name: i for i, name in enumerate(LEVELS)}


@dataclass(slots=True)
class Group:
    """One node of the tree: its CPUs (a bitmask) and the (level, id) labels it stands for."""

    index: int
    mask: int
    labels: list[tuple[str, int]]
    parent: int = -1
    children: list[int] = field(default_factory=list)
    pool: int = -1  # pool index, or -1 when this group is not a pool
    cores: tuple[int, ...] = ()  # core masks inside this group, ascending
    #: every child is a core with every thread usable (``GroupTree.max_threads`` of them) and no
    #: pool: packing here is a matter of masks (``packing._Packer.take_cores``)
    even_cores: bool = False

    @property
    def cpus(self) -> CPUSet:
        return CPUSet.from_mask(self.mask)

    @property
    def level(self) -> str:
        """The highest level this node stands for."""
        return self.labels[0][0]

    def has_level(self, level: str) -> bool:
        return any(lv == level for lv, _ in self.labels)

    def label(self) -> str:
        return "+".join(f"{lv}{i}" if lv != "system" else lv for lv, i in self.labels)


@dataclass(slots=True)
class GroupTree:
    """Groups in depth-first order (index 0 is the root, parents before children)."""

    groups: list[Group]
    notes: list[str]
    core_of: dict[int, int]  # CPU id -> mask of its core's usable CPUs
    max_threads: int
    # Every core by shape, so "which cores are wholly in this set" is a few big-int operations:
    singles: int = 0  # CPUs of one-thread cores
    pairs: tuple[tuple[int, int], ...] = ()  # (offset, low CPUs) of two-thread cores {c, c + offset}
    others: tuple[int, ...] = ()  # cores of three or more threads
    leaf_of: dict[int, int] = field(default_factory=dict)  # CPU id -> the deepest group holding it

    def whole_cores(self, cand: int) -> int:
        """The CPUs of ``cand`` whose core's every usable thread is in ``cand``."""
        out = cand & self.singles
        for off, low in self.pairs:
            both = cand & (cand >> off) & low
            out |= both | (both << off)
        for core in self.others:
            if core & cand == core:
                out |= core
        return out

    def with_siblings(self, mask: int) -> int:
        """``mask`` and every usable thread of the cores it touches: the CPUs whose core's
        wholeness (``whole_cores``) can change when the CPUs of ``mask`` come or go."""
        out = mask
        for off, low in self.pairs:
            hit = (mask | (mask >> off)) & low
            out |= hit | (hit << off)
        for core in self.others:
            if core & mask:
                out |= core
        return out

    @property
    def root(self) -> Group:
        return self.groups[0]

    def deepest_containing(self, mask: int, start: int = 0) -> int:
        """Index of the deepest group under ``start`` whose CPUs include all of ``mask``."""
        groups = self.groups
        if mask and not mask & ~groups[start].mask:
            g = self.leaf_of.get((mask & -mask).bit_length() - 1, -1)
            if g >= 0:
                # The groups holding a CPU are its deepest one's ancestors, nested: the deepest of them
                # holding all of ``mask`` is where a descent from ``start`` stops (start holds it).
                while mask & groups[g].mask != mask:
                    g = groups[g].parent
                return g
        g = start
        while True:
            for c in self.groups[g].children:
                cm = self.groups[c].mask
                if mask & cm == mask:
                    g = c
                    break
            else:
                return g


def _level_keys(topology: Topology, cpu: int) -> list[tuple[str, int]]:
    info = topology.cpus[cpu]
    keys = [("package", info.package), ("die", info.die), ("numa", info.node)]
    if info.l3 is not None:
        keys.append(("l3cache", info.l3))
    keys.append(("cluster", info.cluster))
    if info.l2 is not None:
        keys.append(("l2", info.l2))
    keys.append(("core", info.core))
    return keys


def build_group_tree(topology: Topology, allowed: CPUSet) -> GroupTree:
    """The laminar group tree over ``allowed`` (online CPUs the policy may use)."""
    allowed_mask = allowed.mask
    sets: dict[tuple[str, int], int] = {}
    for cpu in allowed:
        for key in _level_keys(topology, cpu):
            sets[key] = sets.get(key, 0) | (1 << cpu)
    nesting = _nest(sets, allowed_mask)
    groups = _renumber(nesting, allowed_mask)
    core_of = _core_of(sets)
    core_masks = sorted(set(core_of.values()), key=lambda m: m & -m)
    max_threads = max((m.bit_count() for m in core_masks), default=1)
    _fill_cores(groups, core_of)
    pool = 0
    for g in groups:
        if any(lv in POOL_LEVELS for lv, _ in g.labels):
            g.pool = pool
            pool += 1
    _mark_even_cores(groups, core_of, max_threads)
    singles, pairs, others = _core_shapes(core_masks)
    leaf_of: dict[int, int] = {}
    for g in groups:  # parents first: a CPU's deepest group comes last
        for c in CPUSet.from_mask(g.mask):
            leaf_of[c] = g.index
    return GroupTree(groups=groups, notes=nesting.notes, core_of=core_of, max_threads=max_threads, singles=singles,
                     pairs=pairs, others=others, leaf_of=leaf_of)


@dataclass
class _Nesting:
    """The group sets as a tree before numbering: node 0 is the system; ``kids`` by node."""

    masks: list[int]
    labels: list[list[tuple[str, int]]]
    kids: list[list[int]]
    notes: list[str]  # the sets left out because they cross another


def _nest(sets: dict[tuple[str, int], int], allowed_mask: int) -> _Nesting:
    """Insert every level's set into the tree, biggest first.

    Every node already placed is at least as big as the newcomer, so it can only
    contain it, equal it, miss it or cross it; a crossing set is left out with a note.
    """
    ordered = sorted(sets.items(), key=lambda kv: (-kv[1].bit_count(), _RANK[kv[0][0]], kv[0][1]))
    masks: list[int] = [allowed_mask]
    labels: list[list[tuple[str, int]]] = [[("system", 0)]]
    kids: list[list[int]] = [[]]
    notes: list[str] = []
    for key, mask in ordered:
        node = 0
        while True:
            if masks[node] == mask:
                labels[node].append(key)
                break
            inner = next((c for c in kids[node] if masks[c] & mask == mask), None)
            if inner is not None:
                node = inner
                continue
            crossing = next((c for c in kids[node] if masks[c] & mask), None)
            if crossing is not None:
                notes.append(
                    f"{key[0]} {key[1]} (CPUs {CPUSet.from_mask(mask)}) crosses "
                    f"{'+'.join(f'{lv} {i}' for lv, i in labels[crossing])} "
                    f"(CPUs {CPUSet.from_mask(masks[crossing])}); it is not used for placement"
                )
                break
            masks.append(mask)
            labels.append([key])
            kids.append([])
            kids[node].append(len(masks) - 1)
            break
    return _Nesting(masks, labels, kids, notes)


def _renumber(nesting: _Nesting, allowed_mask: int) -> list[Group]:
    """The groups numbered depth-first, children ordered by their lowest CPU."""
    masks, labels, kids = nesting.masks, nesting.labels, nesting.kids
    groups: list[Group] = []

    def visit(old: int, parent: int) -> int:
        idx = len(groups)
        group = Group(index=idx, mask=masks[old], labels=sorted(labels[old], key=lambda k: _RANK[k[0]]), parent=parent)
        groups.append(group)
        for child in sorted(kids[old], key=lambda c: (masks[c] & -masks[c])):
            group.children.append(visit(child, idx))
        return idx

    if allowed_mask:
        visit(0, -1)
    else:
        groups.append(Group(index=0, mask=0, labels=[("system", 0)]))
    return groups


def _core_of(sets: dict[tuple[str, int], int]) -> dict[int, int]:
    """CPU -> the mask of its core."""
    core_of: dict[int, int] = {}
    for key, mask in sets.items():
        if key[0] == "core":
            m = mask
            while m:
                low = m & -m
                core_of[low.bit_length() - 1] = mask
                m ^= low
    return core_of


def _fill_cores(groups: list[Group], core_of: dict[int, int]) -> None:
    """Each group's whole cores, by lowest CPU."""
    for g in reversed(groups):  # children before parents
        if g.children:
            nested = [m for child in g.children for m in groups[child].cores]
            g.cores = tuple(sorted(nested, key=lambda m: m & -m))
        else:
            inside = {core_of[c] for c in CPUSet.from_mask(g.mask)}
            g.cores = tuple(sorted((m for m in inside if m & g.mask == m), key=lambda m: m & -m))


def _mark_even_cores(groups: list[Group], core_of: dict[int, int], max_threads: int) -> None:
    """``even_cores``: every child is a whole core of ``max_threads`` threads and no pool."""
    for g in groups:
        below = [groups[c] for c in g.children]
        g.even_cores = bool(below) and all(
            not k.children and k.pool < 0 and k.mask.bit_count() == max_threads
            and core_of.get((k.mask & -k.mask).bit_length() - 1) == k.mask
            for k in below
        )


def _core_shapes(core_masks: list[int]) -> tuple[int, tuple[tuple[int, int], ...], tuple[int, ...]]:
    """The cores by shape: single-thread CPUs (one mask), two-thread cores (lowest CPUs
    per sibling offset) and the rest."""
    singles, others = 0, []
    pairs: dict[int, int] = {}
    for m in core_masks:
        if m.bit_count() == 1:
            singles |= m
        elif m.bit_count() == 2:
            low = m & -m
            off = (m ^ low).bit_length() - low.bit_length()
            pairs[off] = pairs.get(off, 0) | low
        else:
            others.append(m)
    return singles, tuple(sorted(pairs.items())), tuple(others)
