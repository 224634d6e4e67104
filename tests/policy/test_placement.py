"""Placement shortcuts give what the rules they stand for give, on random states."""

from __future__ import annotations

import contextlib

from hypothesis import given, settings
from hypothesis import strategies as st

from topodra.policy import Policy, PolicyConfig, PolicyError, QoSClass
from topodra.policy.placement import _Ask
from topodra.topology.model import Topology
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
    synthetic_topology("1s1d1n2l2c2t4e"),  # hybrid: core-kind preferences rank on other candidates
]
exclusive = st.lists(
    st.tuples(st.sampled_from([1000, 1000, 2000, 3000, 1500]), st.sampled_from(["", "false", "high", "low"])),
    max_size=10,
)


@settings(deadline=None, max_examples=150)
@given(machine=st.sampled_from(CPU_MACHINES), placed=exclusive, probe=st.integers(1, 5),
       prefer=st.sampled_from(["", "high", "low"]), gib=st.sampled_from([0, 8, 60]))
def test_ranking_on_the_supplys_figures_is_ranking_on_counted_ones(
    machine: Topology, placed: list[tuple[int, str]], probe: int, prefer: str, gib: int
) -> None:
    """The pools are ranked on the candidate and whole-core counts the supply keeps for the shared
    set; counted from the masks instead, the order is the same."""
    policy = Policy(machine, PolicyConfig())
    for n, (cpu, ann) in enumerate(placed):
        annotations = {}
        if ann == "false":
            annotations[f"prefer-shared-cpus.{D}"] = "false"
        elif ann:
            annotations[f"prefer-cpu-priority.{D}"] = ann
        with contextlib.suppress(PolicyError):
            policy.add(request(f"c{n}", QoSClass.GUARANTEED, cpu, memory=n % 3 * GIB, annotations=annotations))
    kind = {f"prefer-cpu-priority.{D}": prefer} if prefer else None
    req = request("probe", QoSClass.GUARANTEED, probe * 1000, memory=gib * GIB, annotations=kind)
    need = policy._classify(req)
    placer, supply = policy._placer, policy._supply
    cand = supply.shared_cpus
    pref = cand
    if need.core_types is not None:
        pref = cand & sum(policy._part.kind_masks.get(t, 0) for t in need.core_types)
    ask = _Ask(need, probe, 0, cand, pref, None, 0, False)
    cap = supply.capacity()
    kept, counted = placer._figures(ask, cap), placer.count_figures(cand)
    assert (list(kept[0]), list(kept[1])) == counted
    assert list(placer._ranked(ask, cap, kept)) == list(placer._ranked(ask, cap, counted))


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
