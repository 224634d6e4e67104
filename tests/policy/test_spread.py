"""Spreading a grouped device's pick over NUMA nodes (``numaPlacement: spread``) and whole cores."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from topodra.cpuset import CPUSet
from topodra.policy.api import BadRequestError
from topodra.policy.config import PolicyConfig
from topodra.policy.groups import build_group_tree
from topodra.policy.packing import pack_spread, spread_shares
from topodra.policy.policy import Policy
from topodra.topology.synthetic import synthetic_topology


@given(st.lists(st.integers(0, 12), min_size=1, max_size=6), st.integers(1, 40), st.sampled_from([1, 2]))
def test_shares_are_as_even_as_the_room_allows(free: list[int], n: int, unit: int) -> None:
    shares = spread_shares(free, n, unit)
    if shares is None:
        # impossible only when filling every node cannot reach n (in whole steps but the last)
        assert sum(f - f % unit for f in free) < n if unit > 1 else sum(free) < n
        return
    assert sum(shares) == n
    assert all(0 <= s <= f for s, f in zip(shares, free, strict=True))
    for si in shares:
        for j, sj in enumerate(shares):
            if si > sj + unit:  # j gives less: it had no room for another step
                assert free[j] - sj < unit, (free, n, unit, shares)


def test_shares_examples() -> None:
    assert spread_shares([8, 8], 4, 1) == [2, 2]
    assert spread_shares([8, 8], 4, 2) == [2, 2]
    assert spread_shares([8, 8], 6, 2) == [4, 2]  # a tie goes to the node with more room, then the lowest
    assert spread_shares([1, 8], 4, 1) == [1, 3]
    assert spread_shares([8, 8, 8], 2, 1) == [1, 1, 0]
    assert spread_shares([1, 1], 3, 1) is None


def test_pack_spread_packs_each_share_within_its_node() -> None:
    topo = synthetic_topology("1s1d2n1l4c2t")  # node 0: CPUs 0-3, 8-11; node 1: 4-7, 12-15
    tree = build_group_tree(topo, topo.online)
    nodes = [topo.cpus_of_node(n).mask for n in (0, 1)]
    got = CPUSet.from_mask(pack_spread(tree, nodes, topo.online.mask, 4, 2) or 0)
    assert [len(got & topo.cpus_of_node(n)) for n in (0, 1)] == [2, 2]
    assert all(topo.cpus_of_core(topo.cpus[c].core) <= got for c in got)  # a whole core on each
    assert pack_spread(tree, nodes, CPUSet([0, 1]).mask, 3, 1) is None


def test_memory_nodes_survive_snapshot_reconfigure_and_release() -> None:
    topo = synthetic_topology("1s1d2n1l4c2t")
    policy = Policy(topo, PolicyConfig())
    policy.claim("wide", CPUSet([4, 12]), memory="all")
    policy.claim("near", CPUSet([5, 13]))
    assert (policy.claim_memory("wide"), policy.claim_memory("near")) == ("all", "local")
    snap = policy.snapshot()
    assert snap["allMemoryClaims"] == ["wide"]
    restored = Policy.restore(topo, snap)
    assert restored.claim_memory("wide") == "all"
    restored.reconfigure(PolicyConfig(colocate_pods=True))
    assert restored.claim_memory("wide") == "all"
    with pytest.raises(BadRequestError, match="with other memory nodes"):
        restored.claim("wide", CPUSet([4, 12]))
    assert restored.claim("wide", CPUSet([4, 12]), memory="all") == {}  # the same claim again
    restored.release("wide")
    assert restored.claim_memory("wide") == "local"
    assert "allMemoryClaims" not in restored.snapshot()
