"""Placement shortcuts give what the rules they stand for give, on random states."""

from __future__ import annotations

import contextlib
from typing import Any
from unittest import mock

from hypothesis import given, settings
from hypothesis import strategies as st

from topodra.cpuset import CPUSet
from topodra.policy import Policy, PolicyConfig, PolicyError, QoSClass
from topodra.policy import supply as supply_module
from topodra.policy.packing import pack
from topodra.policy.placement import _Ask
from topodra.topology.model import CoreType, Topology
from topodra.topology.synthetic import synthetic_topology

from .helpers import GIB, request

D = "resource-policy.nri.io"
MACHINE = synthetic_topology("2s1d2n2l2c2t+hbm")  # 64 GiB DRAM per NUMA node, 16 GiB HBM per socket

containers = st.lists(
    st.tuples(
        st.sampled_from([QoSClass.GUARANTEED, QoSClass.BURSTABLE]),
        st.sampled_from([500, 1000, 2000]),
        st.sampled_from([0, 1, 8, 30, 60]),  # GiB
        st.sampled_from(["", "hbm", "dram,hbm"]),
    ),
    max_size=12,
)


@settings(deadline=None, max_examples=100)
@given(placed=containers, probe=st.sampled_from([1, 8, 20, 40, 70, 130]), kind=st.sampled_from(["", "hbm", "dram,hbm"]))
def test_memory_fit_for_many_pools_is_the_rule_for_each(
    placed: list[tuple[QoSClass, int, int, str]], probe: int, kind: str
) -> None:
    policy = Policy(MACHINE, PolicyConfig())
    for n, (qos, cpu, gib, kinds) in enumerate(placed):
        annotations = {f"memory-type.{D}": kinds} if kinds else None
        with contextlib.suppress(PolicyError):  # what does not fit is left out
            policy.add(request(f"c{n}", qos, cpu, memory=gib * GIB, annotations=annotations))
    req = request("probe", memory=probe * GIB, annotations={f"memory-type.{D}": kind} if kind else None)
    need = policy._classify(req)
    placer = policy._placer
    rule = [placer._mem_fit(i, need) for i in range(len(policy.pools))]
    assert list(placer._mem_fit_table(need)) == rule  # the table _ranked reads (a shortcut when all have room)
    assert placer._mem_fits(need) == rule


CPU_MACHINES = [
    synthetic_topology("2s1d2n2l2c2t+hbm"),
    synthetic_topology("1s1d2n2l3c2t"),  # L3 groups of 6 CPUs: split cores there, whole ones a level up
    synthetic_topology("1s1d1n2l2c2t4e"),  # hybrid: core-kind preferences rank on other candidates
]
exclusive = st.lists(
    st.tuples(st.sampled_from([1000, 1000, 1000, 2000, 3000, 1500]), st.sampled_from(["", "false", "high", "low"])),
    max_size=16,
)


@settings(deadline=None, max_examples=300)
@given(machine=st.sampled_from(CPU_MACHINES), placed=exclusive, probe=st.integers(1, 6),
       prefer=st.sampled_from(["", "high", "low"]), gib=st.sampled_from([0, 8, 60]),
       frac=st.sampled_from([0, 0, 500]), hint=st.none() | st.integers(0, 6), drops=st.lists(st.integers(0, 15)))
def test_ranking_on_the_supplys_figures_is_the_documented_order(
    machine: Topology, placed: list[tuple[int, str]], probe: int, prefer: str, gib: int, frac: int, hint: int | None,
    drops: list[int],
) -> None:
    """The pools are ranked on the candidate and whole-core counts the supply keeps for the shared
    set, deepest pools first: counted from the masks instead, the order is the same, and it is
    the documented order with every key worked out for every pool."""
    policy = Policy(machine, PolicyConfig())
    for n, (cpu, ann) in enumerate(placed):
        annotations = {}
        if ann == "false":
            annotations[f"prefer-shared-cpus.{D}"] = "false"
        elif ann:
            annotations[f"prefer-cpu-priority.{D}"] = ann
        with contextlib.suppress(PolicyError):
            policy.add(request(f"c{n}", QoSClass.GUARANTEED, cpu, memory=n % 3 * GIB, annotations=annotations))
    for n in drops:  # split cores
        policy.remove(f"c{n}")
    kind = {f"prefer-cpu-priority.{D}": prefer} if prefer else None
    req = request("probe", QoSClass.GUARANTEED, probe * 1000, memory=gib * GIB, annotations=kind)
    need = policy._classify(req)
    placer, supply = policy._placer, policy._supply
    cand = supply.shared_cpus
    pref = cand
    if need.core_types is not None:
        pref = cand & sum(policy._part.kind_masks.get(t, 0) for t in need.core_types)
    ask = _Ask(need, probe, frac, cand, pref, hint, 0, False)
    cap = supply.capacity()
    kept, counted = placer._figures(ask, cap), placer.count_figures(cand)
    assert (list(kept[0]), list(kept[1])) == counted
    got = list(placer._ranked(ask, cap, kept))
    assert got == list(placer._ranked(ask, cap, counted))
    assert [i for i, _, _ in got] == _documented_order(policy, ask)


def _documented_order(policy: Policy, a: _Ask) -> list[int]:
    """The pools that can hold ``a``, in the order docs/policy.md gives, each key worked out in
    full for every pool (no shortcut): memory, the hint, the core kind, whole cores, depth, a
    half-used core for an odd remainder, then best fit on whole cores top down, fewer CPUs,
    fewer shared milli-CPU, the index."""
    return [row[-1] for row in _documented_rows(policy, a)]


def _documented_rows(policy: Policy, a: _Ask) -> list[tuple[Any, ...]]:
    """``_documented_order`` with each pool's key."""
    part, supply = policy._part, policy._supply
    cap = supply.capacity()
    threads = part.tree.max_threads
    clean_all = part.tree.whole_cores(a.cand)
    clean_pref = part.tree.whole_cores(a.pref)
    rows = []
    for p in part.pools:
        i = p.index
        cand = a.cand & p.cpus
        if cap.reach[i] < a.n or cand.bit_count() < a.n:
            continue
        if a.frac and cap.free[i] - 1000 * a.n < a.frac:
            continue
        pref = a.pref & p.cpus
        kind_fit = pref.bit_count() >= a.n
        use, clean = (pref, clean_pref & p.cpus) if kind_fit else (cand, clean_all & p.cpus)
        half = (use & ~clean).bit_count()
        rem = a.n % threads
        rows.append((
            policy._placer._mem_fit(i, a.need),
            0 if i == a.hint_pool else 1,
            0 if kind_fit else 1,
            0 if clean.bit_count() + min(half, rem) >= a.n else 1,
            -p.depth,
            0 if half >= rem else 1,
            [(clean_all & part.pools[q].cpus).bit_count() for q in p.path[1:]],
            use.bit_count(),
            supply.milli[i],
            i,
        ))
    return sorted(rows)


LEAD_MACHINES = [
    synthetic_topology("2s1d2n2l2c2t+hbm"),  # HBM: a kind some pools lack
    synthetic_topology("1s1d2n2l3c2t"),
    synthetic_topology("2s1d2n2l4c2t"),
    synthetic_topology("1s1d3n2l2c2t"),  # three NUMA nodes: uneven sizes up the tree
]
operations = st.lists(
    st.tuples(st.integers(0, 5), st.integers(0, 9), st.sampled_from([500, 1000, 2000, 3000])), max_size=30
)


@settings(deadline=None, max_examples=150)
@given(machine=st.sampled_from(LEAD_MACHINES), ops=operations, kind=st.sampled_from(["", "hbm"]),
       trim=st.sampled_from([0, 5, 4096]),
       config=st.sampled_from([{}, {"reservedCPUCount": 2}, {"unlimitedBurstable": "numa"}]))
def test_the_lead_kept_between_asks_is_the_documented_first(
    machine: Topology, ops: list[tuple[int, int, int]], kind: str, trim: int, config: dict[str, object]
) -> None:
    """The first pool of an exclusive add, kept between asks and brought up to date from the
    supply's journal (trimmed often or never), is after every operation the first of the
    documented order worked out in full, when that is a deepest pool leading on every criterion
    before depth; otherwise the shortcut says None (and the full ranking runs). Where the
    shortcut packs there, it packs what the full search packs."""
    with mock.patch.object(supply_module, "_JOURNAL_MAX", trim):
        policy = Policy(machine, PolicyConfig.model_validate(config))
        placer, supply = policy._placer, policy._supply
        deepest = max(p.depth for p in policy.pools)
        for op, k, cpu in ops:
            with contextlib.suppress(PolicyError):  # what does not fit is left out
                if op == 0:
                    policy.add(request(f"c{k}", QoSClass.GUARANTEED, cpu))
                elif op == 1:
                    policy.add(request(f"c{k}", QoSClass.BURSTABLE, cpu))
                elif op == 2:
                    policy.remove(f"c{k}")
                elif op == 3:
                    policy.claim(f"k{k % 3}", policy.pick(1 + k % 3, machine.online))
                elif op == 4:
                    policy.release(f"k{k % 3}")
                else:  # a limit keeps it in the deepest pool with room: its slack there shrinks
                    policy.add(request(f"c{k}", QoSClass.BURSTABLE, 2 * cpu, limit=3 * cpu))
            for n in (1, 2, 3, 5):
                req = request("probe", QoSClass.GUARANTEED, n * 1000, annotations={f"memory-type.{D}": kind} if kind else None)
                need = policy._classify(req)
                cand = supply.shared_cpus
                fit = placer._kind_fit(need)
                assert fit is not None
                got = placer._lead_pool(n, need.memory_kinds, fit, supply.capacity())
                rows = _documented_rows(policy, _Ask(need, n, 0, cand, cand, None, 0, False))
                best_fit = min(placer._mem_fit(i, need) for i in range(len(policy.pools)))
                lead = rows[0] if rows else None
                ideal = lead is not None and lead[0] == best_fit and lead[3] == 0 and -lead[4] == deepest
                assert got == (lead[-1] if lead is not None and ideal else None)
                # and the search through it finds what the full search finds
                found = placer._lead(need, n)
                if found is not None:
                    assert found == placer._search(_Ask(need, n, 0, cand, cand, None, 0, False))


def test_the_kept_lead_follows_a_charge_that_moves_no_other_figure() -> None:
    """Two L3 groups tie on every count; the milli-CPU charged decides between them, and the kept
    lead sees a charge that moves no pool's slack (500m -> 1000m is one CPU either way)."""
    policy = Policy(synthetic_topology("1s1d1n2l4c2t"), PolicyConfig())
    placer, supply = policy._placer, policy._supply
    need = policy._classify(request("probe", QoSClass.GUARANTEED, 2000))
    fit = placer._kind_fit(need)
    assert fit is not None

    def lead() -> str:
        got = placer._lead_pool(2, need.memory_kinds, fit, supply.capacity())
        assert got is not None
        return policy.pool_name(got)

    policy.add(request("a", QoSClass.BURSTABLE, 500, limit=1000))  # to the first L3 group (most room, lowest index)
    policy.add(request("b", QoSClass.BURSTABLE, 500, limit=1000))  # the second: now 500m each
    first, second = policy.grant("a"), policy.grant("b")
    assert first is not None
    assert second is not None
    assert first.pool != second.pool
    assert lead() == policy.pool_name(first.pool)  # a tie: the lowest index
    policy.add(request("c", QoSClass.BURSTABLE, 500, limit=1000))  # 1000m in the first: same slack, more charged
    assert policy.grant("c").pool == first.pool  # type: ignore[union-attr]
    assert lead() == policy.pool_name(second.pool)


@settings(deadline=None, max_examples=100)
@given(placed=containers, probe=st.sampled_from([0, 1, 8, 20, 40, 70, 130]), kind=st.sampled_from(["", "hbm", "dram,hbm"]),
       at=st.integers(0, 14))
def test_memory_pool_is_the_rule_whatever_is_cached(
    placed: list[tuple[QoSClass, int, int, str]], probe: int, kind: str, at: int
) -> None:
    """``memory_for`` answers from its cache where every pool has room for the request: the
    answer is still the rule's (the deepest pool on the path with the wanted kinds and room), and
    the room bound it trusts is below every pool's free memory."""
    policy = Policy(MACHINE, PolicyConfig())
    placer, supply, pools = policy._placer, policy._supply, policy.pools
    for n, (qos, cpu, gib, kinds) in enumerate(placed):
        annotations = {f"memory-type.{D}": kinds} if kinds else None
        with contextlib.suppress(PolicyError):
            policy.add(request(f"c{n}", qos, cpu, memory=gib * GIB, annotations=annotations))
        req = request("probe", memory=probe * GIB, annotations={f"memory-type.{D}": kind} if kind else None)
        need = policy._classify(req)
        kinds_ = need.memory_kinds
        assert all(supply.mem_floor(kinds_) <= supply.mem_free(p.index, kinds_) for p in pools)
        pool = at % len(pools)
        missing = policy._part.missing_kinds(kinds_)
        want = next(
            (
                (p, pools[p].nodes_of(kinds_))
                for p in reversed(pools[pool].path)
                if pools[p].nodes_of(kinds_) and not missing[p]
                and (need.memory <= 0 or supply.mem_free(p, kinds_) >= need.memory)
            ),
            (0, pools[0].nodes_of(kinds_)),
        )
        assert placer.memory_for(req, need, pool) == want


def test_a_shallower_pool_on_whole_cores_comes_before_split_deepest_ones() -> None:
    """Every L3 group has 4 free CPUs, two of them on split cores; each NUMA node has 4 on whole
    cores: 4 CPUs go to a NUMA node, the deepest pools' ranking does not stop the search."""
    policy = Policy(synthetic_topology("1s1d2n2l3c2t"), PolicyConfig())  # siblings c, c + 12
    policy.claim("k", CPUSet([1, 2, 4, 5, 7, 8, 10, 11]))
    req = request("probe", QoSClass.GUARANTEED, 4000)
    need = policy._classify(req)
    supply = policy._supply
    ask = _Ask(need, 4, 0, supply.shared_cpus, supply.shared_cpus, None, 0, False)
    cap = supply.capacity()
    order = [i for i, _, _ in policy._placer._ranked(ask, cap, policy._placer._figures(ask, cap))]
    assert order == _documented_order(policy, ask)
    assert [policy.pools[i].name for i in order[:2]] == ["numa0", "numa1"]
    assert policy.add(req)["probe"].cpus == CPUSet([0, 3, 12, 15])


@settings(deadline=None, max_examples=150)
@given(machine=st.sampled_from(CPU_MACHINES), placed=exclusive, shared=st.lists(st.sampled_from([100, 700, 1500, 3000])),
       probe=st.integers(1, 8), drops=st.lists(st.integers(0, 15)))
def test_packing_within_the_slack_leaves_every_pool_its_shared_requests(
    machine: Topology, placed: list[tuple[int, str]], shared: list[int], probe: int, drops: list[int]
) -> None:
    """``_search`` skips ``exclusive_ok`` for an ask without a shared part: in any pool whose
    reach covers the request, the packing within the slack limits passes it."""
    policy = Policy(machine, PolicyConfig())
    for n, (cpu, _) in enumerate(placed):
        with contextlib.suppress(PolicyError):
            policy.add(request(f"c{n}", QoSClass.GUARANTEED, cpu))
    for n, milli in enumerate(shared):
        with contextlib.suppress(PolicyError):  # no shared CPU left
            policy.add(request(f"s{n}", QoSClass.BURSTABLE, milli))
    for n in drops:
        policy.remove(f"c{n}")
    supply, part = policy._supply, policy._part
    cap = supply.capacity()
    for p in part.pools:
        if cap.reach[p.index] < probe:
            continue
        for cand in (supply.shared_cpus, supply.shared_cpus & part.kind_masks.get(CoreType.E_CORE, 0)):
            mask = pack(part.tree, p.group, cand, probe, cap.slack)
            if mask is not None:
                assert supply.exclusive_ok(mask, p.index, 0)
