"""Exclusive CPU packing, the group tree, and the kubelet takeByTopology baseline."""

from __future__ import annotations

import copy

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from testkit.kubelet_baseline import take_by_topology

from topodra.cpuset import CPUSet
from topodra.policy import PolicyError
from topodra.policy.groups import GroupTree, build_group_tree
from topodra.policy.packing import pack, pack_near
from topodra.topology.model import Topology
from topodra.topology.synthetic import synthetic_topology

from .helpers import make_topology

# --- the kubelet's own test machines -------------------------------------------------
SINGLE_SOCKET_HT = make_topology({c: (0, 0, c % 4) for c in range(8)})
DUAL_SOCKET_HT = make_topology({c: (c % 2, c % 2, c % 6) for c in range(12)})
MULTI_NUMA_HT = make_topology({c: (c % 40 // 20, c % 40 // 10, c % 40) for c in range(80)})


@pytest.mark.parametrize(
    ("topo", "available", "count", "expected"),
    [
        (SINGLE_SOCKET_HT, "0-7", 0, ""),
        (SINGLE_SOCKET_HT, "0-7", 1, "0"),
        (SINGLE_SOCKET_HT, "1,3,5-7", 1, "6"),
        (SINGLE_SOCKET_HT, "0-7", 2, "0,4"),
        (SINGLE_SOCKET_HT, "0-7", 8, "0-7"),
        (SINGLE_SOCKET_HT, "0-3,6", 2, "2,6"),
        (DUAL_SOCKET_HT, "0-11", 6, "0,2,4,6,8,10"),
        (DUAL_SOCKET_HT, "1-5,7-11", 1, "2"),
        (DUAL_SOCKET_HT, "0-11", 8, "0-2,4,6-8,10"),
        (MULTI_NUMA_HT, "0-79", 40, "0-19,40-59"),
        (MULTI_NUMA_HT, "0-79", 20, "0-9,40-49"),
        (MULTI_NUMA_HT, "10-39,50-79", 20, "10-19,50-59"),
        (MULTI_NUMA_HT, "0-79", 60, "0-29,40-69"),
        (MULTI_NUMA_HT, "1-39,41-79", 60, "10-39,50-79"),
        (MULTI_NUMA_HT, "0-79", 64, "0-31,40-71"),
    ],
)
def test_kubelet_baseline_matches_kubelet_cases(topo: Topology, available: str, count: int, expected: str) -> None:
    assert take_by_topology(topo, CPUSet.parse(available), count) == CPUSet.parse(expected)


def test_kubelet_baseline_refuses_too_many() -> None:
    with pytest.raises(PolicyError, match="requested=5, available=4"):
        take_by_topology(SINGLE_SOCKET_HT, CPUSet.parse("0,2,4,6"), 5)


# --- group tree -------------------------------------------------------------------------
def test_group_tree_collapses_redundant_levels() -> None:
    tree = build_group_tree(synthetic_topology("1s1d1n1l4c2t"), CPUSet.parse("0-7"))
    root = tree.root
    assert [lv for lv, _ in root.labels] == ["system", "package", "die", "numa", "l3cache"]
    assert all(tree.groups[c].has_level("core") and not tree.groups[c].children for c in root.children)
    pools = [g for g in tree.groups if g.pool >= 0]
    assert len(pools) == 1


def test_group_tree_nests_by_cpu_sets() -> None:
    topo = synthetic_topology("2s1d2n2l4c2t")
    tree = build_group_tree(topo, topo.online)
    assert tree.root.labels == [("system", 0)]
    levels = [g.level for g in tree.groups if g.pool >= 0]
    assert levels == ["system"] + ["package", "numa", "l3cache", "l3cache", "numa", "l3cache", "l3cache"] * 2
    for g in tree.groups:
        for c in g.children:
            assert tree.groups[c].mask & g.mask == tree.groups[c].mask
        kids = [tree.groups[c].mask for c in g.children]
        if kids:
            union = 0
            for k in kids:
                assert not union & k
                union |= k
            assert union == g.mask


def test_group_tree_leaves_out_crossing_groups() -> None:
    # An "L3" that spans half of two NUMA nodes cannot nest; it is reported and skipped.
    layout = {c: (0, c // 4, c) for c in range(8)}
    topo = make_topology(layout)
    cpus = dict(topo.cpus)
    for c in (2, 3, 4, 5):
        info = cpus[c]
        cpus[c] = type(info)(**{**{f: getattr(info, f) for f in info.__slots__}, "l3": 9})
    from dataclasses import replace

    crossing = replace(topo, cpus=cpus)
    tree = build_group_tree(crossing, crossing.online)
    assert any("l3cache 9" in n and "crosses" in n for n in tree.notes)
    assert all(g.mask != CPUSet.parse("2-5").mask for g in tree.groups)


def test_group_tree_respects_allowed_cpus() -> None:
    topo = synthetic_topology("2s1d1n1l4c2t")
    tree = build_group_tree(topo, CPUSet.parse("0-3,8-11"))
    assert tree.root.mask == CPUSet.parse("0-3,8-11").mask
    # only socket 0 is left, so the root is socket 0
    assert ("package", 0) in tree.root.labels


# --- packing -------------------------------------------------------------------------
TOPO = synthetic_topology("2s1d2n2l8c2t")  # 128 CPUs, 8 L3 groups of 8 cores x 2 threads
TREE = build_group_tree(TOPO, TOPO.online)
L3S = [TOPO.cpus_of_l3(i).mask for i in TOPO.l3_groups()]


def cores_touched(mask: int) -> int:
    return len({TOPO.cpus[c].core for c in CPUSet.from_mask(mask)})


def test_pack_full_cores_in_one_l3() -> None:
    got = pack(TREE, 0, TOPO.online.mask, 4)
    assert got is not None
    assert cores_touched(got) == 2
    assert any(got & m == got for m in L3S)


def test_pack_odd_remainder_prefers_a_half_used_core() -> None:
    cand = TOPO.online.mask & ~(1 << 0)  # CPU 0 taken: core 0 has one free thread (64)
    got = pack(TREE, 0, cand, 1)
    assert got == 1 << 64
    got = pack(TREE, 0, cand, 3)
    assert got is not None
    assert got >> 64 & 1
    assert cores_touched(got) == 2


def test_pack_best_fit_prefers_the_fuller_group() -> None:
    # L3 0 has only 2 free cores left, L3 1 is empty: a 4-CPU grant goes to L3 0.
    l3_0 = L3S[0]
    keep = list(CPUSet.from_mask(l3_0))
    busy = 0
    for c in keep:
        core = TOPO.cpus[c].core
        if core % 8 >= 2:
            busy |= 1 << c
    got = pack(TREE, 0, TOPO.online.mask & ~busy, 4)
    assert got is not None
    assert got & l3_0 == got


def test_pack_spans_fewest_groups() -> None:
    got = pack(TREE, 0, TOPO.online.mask, 24)  # more than one L3 (16), less than a NUMA node (32)
    assert got is not None
    assert got.bit_count() == 24
    nodes = {TOPO.cpus[c].node for c in CPUSet.from_mask(got)}
    l3 = {TOPO.cpus[c].l3 for c in CPUSet.from_mask(got)}
    assert len(nodes) == 1
    assert len(l3) == 2
    assert cores_touched(got) == 12


def test_pack_respects_limits() -> None:
    pools = [g for g in TREE.groups if g.pool >= 0]
    limits = [1 << 30] * len(pools)
    first_l3 = next(g for g in pools if g.has_level("l3cache"))
    limits[first_l3.pool] = 0
    got = pack(TREE, 0, TOPO.online.mask, 4, limits)
    assert got is not None
    assert not got & first_l3.mask


def test_pack_impossible() -> None:
    assert pack(TREE, 0, CPUSet.parse("0-2").mask, 4) is None
    assert pack(TREE, 0, TOPO.online.mask, 0) == 0


def test_pack_near_grows_next_to_the_anchor() -> None:
    anchor = CPUSet.parse("40,104").mask  # one core in L3 5
    got = pack_near(TREE, 0, anchor, TOPO.online.mask & ~anchor, 2)
    assert got is not None
    l3 = next(m for m in L3S if m & anchor)
    assert got & l3 == got


@given(st.integers(min_value=0, max_value=(1 << 128) - 1), st.integers(min_value=1, max_value=40))
def test_pack_properties(cand: int, n: int) -> None:
    got = pack(TREE, 0, cand, n)
    if cand.bit_count() < n:
        assert got is None
        return
    assert got is not None
    assert got & cand == got
    assert got.bit_count() == n
    clean = 0
    for core in TREE.root.cores:
        if core & cand == core:
            clean |= core
    if clean.bit_count() >= n:
        assert cores_touched(got) == (n + 1) // 2, "full cores first"
        if any((clean & m).bit_count() >= n for m in L3S):
            assert any(got & m == got for m in L3S), "inside one L3 when one fits"


# --- whole cores by shape --------------------------------------------------------------
FOUR_THREADS = make_topology({c: (0, c // 8, c // 4) for c in range(16)})  # 4-thread cores
IRREGULAR = make_topology({0: (0, 0, 0), 5: (0, 0, 0), 1: (0, 0, 1), 2: (0, 0, 2), 3: (0, 0, 2), 4: (0, 0, 3)})


@pytest.mark.parametrize(
    "topo",
    [synthetic_topology("1s1d1n1l4c2t8e"), synthetic_topology("2s1d2n2l4c2t"), FOUR_THREADS, IRREGULAR,
     DUAL_SOCKET_HT],
)
@given(data=st.data())
def test_whole_cores_is_the_per_core_rule(topo: Topology, data: st.DataObject) -> None:
    """The bit-shape shortcut picks exactly the cores whose every usable thread is a candidate."""
    usable = CPUSet(data.draw(st.lists(st.sampled_from(list(topo.online)), min_size=1, unique=True)))
    tree = build_group_tree(topo, usable)
    cand = data.draw(st.integers(0, (1 << (max(usable) + 1)) - 1)) & usable.mask
    want = 0
    for core in set(tree.core_of.values()):
        if core & cand == core:
            want |= core
    assert tree.whole_cores(cand) == want


def _descend(tree: GroupTree, mask: int, start: int) -> int:
    """The definition: from ``start``, go down while a child holds all of ``mask``."""
    g = start
    while True:
        for c in tree.groups[g].children:
            if mask & tree.groups[c].mask == mask:
                g = c
                break
        else:
            return g


_TREES = [
    build_group_tree(synthetic_topology("2s1d2n2l2c2t"), synthetic_topology("2s1d2n2l2c2t").online),
    build_group_tree(synthetic_topology("1s2d1n1l3c2t"), CPUSet.parse("0-5,7-11")),
]


@given(tree=st.sampled_from(_TREES), mask=st.integers(0, (1 << 20) - 1), start=st.integers(0, 30))
def test_deepest_containing_is_where_a_descent_stops(tree: GroupTree, mask: int, start: int) -> None:
    start %= len(tree.groups)
    sparse = mask & (mask >> 7) & (mask >> 13)  # few CPUs too, as grants have
    for m in (mask, sparse, mask & tree.groups[start].mask, sparse & tree.groups[start].mask):
        assert tree.deepest_containing(m, start) == _descend(tree, m, start)


# --- packing on masks where every child is a full core ----------------------------------
def _without_core_shortcut(tree: GroupTree) -> GroupTree:
    plain = copy.deepcopy(tree)
    for g in plain.groups:
        g.even_cores = False
    return plain


_PACK_MACHINES = [
    synthetic_topology("1s1d2n2l3c2t"),  # siblings c, c + 12
    make_topology({c: (0, c // 8, c // 2) for c in range(16)}),  # siblings side by side
    FOUR_THREADS,
    synthetic_topology("1s1d1n2l2c2t4e"),  # hybrid: E-cores make a group uneven
]


@settings(max_examples=300)
@given(topo=st.sampled_from(_PACK_MACHINES), data=st.data())
def test_packing_whole_core_groups_on_masks_is_the_plain_descent(topo: Topology, data: st.DataObject) -> None:
    """``take_cores`` (groups whose children are all full cores) packs exactly what the general
    descent packs, on random candidates, sizes, start groups and limits."""
    online = topo.online
    usable = CPUSet(data.draw(st.lists(st.sampled_from(list(online)), min_size=1, unique=True))) \
        if data.draw(st.booleans()) else online
    tree = build_group_tree(topo, usable)
    assert any(g.even_cores for g in tree.groups) or usable != online or topo is _PACK_MACHINES[3]
    plain = _without_core_shortcut(tree)
    cand = data.draw(st.integers(0, (1 << (max(usable) + 1)) - 1)) & usable.mask
    start = data.draw(st.integers(0, len(tree.groups) - 1))
    n = data.draw(st.integers(1, 12))
    pools = max(g.pool for g in tree.groups) + 1
    limits = data.draw(st.none() | st.lists(st.integers(0, 16), min_size=pools, max_size=pools))
    assert pack(tree, start, cand, n, limits) == pack(plain, start, cand, n, limits)
