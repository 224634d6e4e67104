"""The accounting object: its incremental figures always equal the ones worked out from scratch."""

from __future__ import annotations

import dataclasses
import inspect

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from topodra.policy import GrantKind, PolicyConfig, QoSClass
from topodra.policy.grants import Grant
from topodra.policy.partition import Partition, bits, build_partition
from topodra.policy.supply import Supply
from topodra.topology.synthetic import synthetic_topology

from .helpers import make_topology, request

PART = build_partition(synthetic_topology("2s1d2n2l2c2t"), PolicyConfig(reserved_cpu_count=1))
#: Cores {0,4} and {1,5} straddle the two NUMA nodes (the tree leaves them out, the cores stay cores)
CROSSED = build_partition(
    make_topology({0: (0, 0, 0), 4: (0, 1, 0), 1: (0, 0, 1), 5: (0, 1, 1), 2: (0, 0, 2), 3: (0, 0, 2),
                   6: (0, 1, 3), 7: (0, 1, 3)}),
    PolicyConfig(),
)


def expected(s: Supply) -> tuple[list[int], list[int], list[int], list[int]]:
    """Shared CPUs, free milli-CPU, reach and shared CPUs on whole cores per pool, straight from
    the definitions."""
    pools = s.part.pools
    counts = [s.shared(p.index).bit_count() for p in pools]
    free = [min(1000 * counts[q] - s.milli[q] for q in p.path) for p in pools]
    reach = [min(counts[q] - (s.milli[q] + 999) // 1000 for q in p.path) for p in pools]
    shared = s.shared_cpus
    cores = set(s.part.tree.core_of.values())
    whole = [sum((core & p.cpus).bit_count() for core in cores if core & shared == core) for p in pools]
    return counts, free, reach, whole


ops = st.lists(
    st.tuples(
        st.sampled_from(["shared", "exclusive", "drop", "claim", "unclaim", "hold", "rollback", "look"]),
        st.integers(0, len(PART.pools) - 1),
        st.integers(1, 3000),
        st.integers(0, 7),
    ),
    max_size=40,
)


@settings(deadline=None, max_examples=150)
@given(part=st.sampled_from([PART, CROSSED]), ops=ops)
def test_capacity_is_always_what_the_definitions_give(part: Partition, ops: list[tuple[str, int, int, int]]) -> None:
    s = Supply(part)
    held = 0
    for what, at, amount, n in ops:
        cid, pool = f"c{n}", at % len(part.pools)
        if what == "shared":
            s.put(cid, Grant(request=request(cid, QoSClass.BURSTABLE, amount), kind=GrantKind.SHARED,
                             pool=pool, milli=amount))
        elif what == "exclusive":
            free = s.shared(pool)
            if free:
                mask = 1 << list(bits(free))[amount % free.bit_count()]
                s.put(cid, Grant(request=request(cid), kind=GrantKind.MIXED, pool=pool, exclusive=mask,
                                 milli=amount % 1000 or 1))
        elif what == "drop":
            s.put(cid, None)
        elif what == "claim":
            free = s.shared_in(part.sharable)
            if free:
                s.set_claim(f"k{n}", free & -free)
        elif what == "unclaim":
            s.set_claim(f"k{n}", None)
        elif what == "hold":
            s.hold(amount)
            held += amount
        elif what == "rollback":
            s.begin()
            s.put(cid, Grant(request=request(cid, QoSClass.BURSTABLE, amount), kind=GrantKind.SHARED,
                             pool=pool, milli=amount))
            s.set_claim("tmp", s.shared_in(part.sharable) & -s.shared_in(part.sharable) or None)
            s.capacity()
            s.rollback()
        cap = s.capacity()
        counts, free_want, reach, whole = expected(s)
        assert cap.counts == counts
        assert cap.free == free_want
        assert cap.reach == reach
        assert cap.whole == whole
    s.hold(-held)
    assert s.milli[0] == sum(g.milli for g in s.grants.values())  # every grant here follows a pool


@settings(deadline=None, max_examples=100)
@given(ops=ops)
def test_sorted_followers_are_always_the_groups_sorted(ops: list[tuple[str, int, int, int]]) -> None:
    s = Supply(PART)
    for what, pool, amount, n in ops:
        cid = f"c{n}"
        if what in ("shared", "rollback"):
            if what == "rollback":
                s.begin()
            s.put(cid, Grant(request=request(cid, QoSClass.BURSTABLE, amount), kind=GrantKind.SHARED,
                             pool=pool, milli=amount, mems=n % 2, memory_preserve=n == 3))
            if what == "rollback":
                s.rollback()
        elif what == "exclusive" and s.shared(pool):
            s.put(cid, Grant(request=request(cid), kind=GrantKind.MIXED, pool=pool, exclusive=s.shared(pool) & -s.shared(pool),
                             milli=1))
        elif what == "drop":
            s.put(cid, None)
        for i, groups in enumerate(s.followers):
            for key, group in groups.items():
                assert s.sorted_followers(i, key) == sorted(group)


TREES = [PART, build_partition(synthetic_topology("2s1d2n2l4c2t"), PolicyConfig(reserved_cpu_count=3))]


@settings(deadline=None, max_examples=200)
@given(tree=st.sampled_from(TREES), mask=st.integers(0, (1 << 40) - 1))
def test_pools_of_is_every_pool_holding_a_cpu_parents_first(tree: Partition, mask: int) -> None:
    got = tree.pools_of(mask)
    assert sorted(got) == [p.index for p in tree.pools if p.cpus & mask]
    for i in got:
        assert tree.pools[i].parent < 0 or got.index(tree.pools[i].parent) < got.index(i)


def test_grant_builds_like_the_dataclass_it_declares() -> None:
    """Grant's hand-written ``__init__`` takes the declared fields, defaults included, and stays frozen."""
    params = list(inspect.signature(Grant.__init__).parameters.values())[1:]
    declared = dataclasses.fields(Grant)
    assert [p.name for p in params] == [f.name for f in declared]
    assert [p.default for p in params] == [
        inspect.Parameter.empty if f.default is dataclasses.MISSING else f.default for f in declared
    ]
    g = Grant(request("a"), GrantKind.EXCLUSIVE, 2, exclusive=6, mems=1, claims=("k",))
    assert (g.pool, g.exclusive, g.mems, g.claims, g.milli, g.degraded) == (2, 6, 1, ("k",), 0, "")
    assert dataclasses.replace(g, milli=5) == Grant(request("a"), GrantKind.EXCLUSIVE, 2, exclusive=6, mems=1,
                                                    milli=5, claims=("k",))
    with pytest.raises(dataclasses.FrozenInstanceError):
        g.pool = 3  # type: ignore[misc]
