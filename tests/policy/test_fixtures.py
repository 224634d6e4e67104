"""Scenarios on real machines: hwloc's sysfs trees read by topology discovery."""

from __future__ import annotations

from functools import cache

import pytest

from topodra.cpuset import CPUSet
from topodra.policy import Policy, PolicyConfig, PolicyError
from topodra.topology import CoreType, Topology, read_topology
from topodra.topology.fixtures import fixture_names, unpacked_fixture

from .helpers import besteffort, burstable, check_invariants, guaranteed

D = "resource-policy.nri.io"


@cache
def machine(name: str) -> Topology:
    return read_topology(unpacked_fixture(name))


def cores(t: Topology, cpus: CPUSet) -> set[int]:
    return {t.cpus[c].core for c in cpus}


# --- Intel hybrid laptop: 6 P-cores x 2 threads, 2 clusters of 4 E-cores ----------------
LAPTOP = "20em64t-hybrid-1p6c2t+2ca4co1t"


def test_laptop_is_one_pool() -> None:
    p = Policy(machine(LAPTOP))
    assert [pool.name for pool in p.pools] == ["root"]
    assert p.pools[0].levels == ("system", "package", "die", "numa", "l3cache")


def test_laptop_cpu_priority() -> None:
    t = machine(LAPTOP)
    p = Policy(t, PolicyConfig(reserved_cpu_count=1))
    assert p.reserved_cpus == CPUSet([0])
    high = p.add(guaranteed("high", 2, annotations={f"prefer-cpu-priority.{D}": "high"}))["high"].cpus
    assert high <= t.cpus_of_type(CoreType.P_CORE)
    assert len(cores(t, high)) == 1
    assert 1 not in high, "the sibling of the reserved CPU is not a whole core"
    low = p.add(guaranteed("low", 4, annotations={f"prefer-cpu-priority.{D}": "low"}))["low"].cpus
    assert low in (CPUSet.parse("12-15"), CPUSet.parse("16-19")), "one E-core cluster (shared L2)"
    odd = p.add(guaranteed("odd", 1))["odd"].cpus
    assert odd == CPUSet([1]), "a single CPU fills the half-used core first"
    check_invariants(p)


def test_laptop_upstream_example_claims_a_p_core() -> None:
    # the nri-plugins DRA example: a pod claims one P-core through native.cpu
    t = machine(LAPTOP)
    p = Policy(t)
    p.add(besteffort("be"))
    cpu = p.pick(1, t.online, prefer=CoreType.P_CORE)
    assert cpu <= t.cpus_of_type(CoreType.P_CORE)
    changes = p.claim("pcores", cpu)
    assert changes["be"].cpus == t.online - cpu
    ch = p.add(guaranteed("ctr0", 1, claims=("pcores",)))
    assert ch["ctr0"].cpus == cpu
    assert ch["ctr0"].mems == CPUSet([0])
    p.remove("ctr0")
    assert p.release("pcores")["be"].cpus == t.online
    check_invariants(p)


# --- multi-socket Intel -----------------------------------------------------------------
def test_four_socket_one_numa_node() -> None:
    t = machine("16em64t-4s2c2t")
    p = Policy(t)
    assert [pool.name for pool in p.pools] == ["root", "package0", "package1", "package2", "package3"]
    a = p.add(guaranteed("a", 4))["a"].cpus
    assert len({t.cpus[c].package for c in a}) == 1
    assert len(cores(t, a)) == 2
    b = p.add(guaranteed("b", 2))["b"].cpus
    assert len(cores(t, b)) == 1
    be = p.add(besteffort("be"))["be"].cpus
    assert len({t.cpus[c].package for c in be}) == 1, "shared containers go to the least loaded socket"
    assert be.isdisjoint(a | b)
    bu = p.add(burstable("bu", 100))["bu"].cpus
    assert bu == p.shared_cpus(p.pool_name(p.grant("bu").pool))  # type: ignore[union-attr]
    check_invariants(p)


def test_dies_and_sub_numa_clusters() -> None:
    t = machine("fakecpuid1f-64intel64-2p4d2n2c2t")
    p = Policy(t)
    levels = {pool.name: pool.levels for pool in p.pools}
    assert levels["die0"] == ("die", "l3cache")
    assert levels["numa0"] == ("numa",)
    a = p.add(guaranteed("a", 4))["a"]
    assert len(t.nodes_of(a.cpus)) == 1
    assert a.mems == CPUSet([t.cpus[a.cpus.first()].node])
    big = p.add(guaranteed("big", 8))["big"]
    dies = {t.cpus[c].die for c in big.cpus}
    assert len(dies) == 1, "a die (one L3) when a NUMA node is too small"
    assert len(big.mems) == 2
    check_invariants(p)


def test_snc_two_socket_server() -> None:
    t = machine("memorysidecaches")  # 2 sockets, SNC2: NUMA nodes below the socket's L3
    p = Policy(t, PolicyConfig(reserved_cpu_count=2))
    for i in range(6):
        g = p.add(guaranteed(f"g{i}", 6))[f"g{i}"].cpus
        assert len(t.nodes_of(g)) == 1
        assert len(cores(t, g)) == 3
    check_invariants(p)


# --- AMD: NUMA node = L3, compute units of 2 cores sharing an L2 -------------------------
def test_amd_compute_units() -> None:
    t = machine("64amd64-4s2n4ca2co")
    p = Policy(t)
    two = p.add(guaranteed("two", 2))["two"].cpus
    assert len({t.cpus[c].l2 for c in two}) == 1, "both CPUs share one L2"
    four = p.add(guaranteed("four", 4))["four"].cpus
    assert len({t.cpus[c].l2 for c in four}) == 2
    assert len({t.cpus[c].l3 for c in four}) == 1
    check_invariants(p)


def test_several_l3_per_numa_node() -> None:
    t = machine("64fake-4n2s2ca2c2t")
    p = Policy(t)
    root = p.pools[0]
    assert [p.pools[c].levels for c in root.children] == [("numa",)] * 4
    for i in range(4):
        g = p.add(guaranteed(f"g{i}", 8))[f"g{i}"].cpus
        assert len({t.cpus[c].l3 for c in g}) == 1
    nodes = {t.cpus[c].node for i in range(4) for c in p.assignment(f"g{i}").cpus}  # type: ignore[union-attr]
    assert len(nodes) == 2, "best fit: the second L3 of a NUMA node before a new node"
    check_invariants(p)


# --- memory-only NUMA nodes ---------------------------------------------------------------
def test_memory_only_nodes_attach_to_the_nearest_cpus() -> None:
    t = machine("fakememinitiators-1np2c+1npp+gi")  # CPU nodes 0-3 have no memory of their own
    p = Policy(t)
    node0 = next(pool for pool in p.pools if pool.name == "numa0")
    assert CPUSet.from_mask(node0.nodes_of(frozenset({t.nodes[5].kind}))) == CPUSet([5])
    both = p.add(guaranteed("both", 2, annotations={f"memory-type.{D}": "dram,pmem"}))["both"]
    assert both.mems in (CPUSet([5, 7]), CPUSet([8, 10])), "a pool that has both kinds"
    a = p.add(guaranteed("a", 2))["a"]
    node = t.cpus[a.cpus.first()].node
    expected = {0: 5, 1: 8, 2: 6, 3: 9}[node]
    assert a.mems == CPUSet([expected]), "the nearest memory, never a memoryless node"
    pm = p.add(guaranteed("pm", 2, annotations={f"memory-type.{D}": "pmem"}))["pm"]
    assert pm.mems
    assert pm.mems <= CPUSet([7, 10]), "PMEM only"
    # no CPU pool with both kinds is left: the memory widens to the nodes that have them
    late = p.add(guaranteed("late", 2, annotations={f"memory-type.{D}": "dram,pmem"}))["late"]
    assert {t.nodes[n].kind.value for n in late.mems} == {"DRAM", "PMEM"}
    assert len(late.mems) < 6, "the smallest pool with both kinds, not every node"
    check_invariants(p)


def test_gpu_hbm_is_only_used_when_asked() -> None:
    t = machine("nvidiagpunumanodes")
    p = Policy(t)
    a = p.add(besteffort("a"))["a"]
    assert a.mems <= CPUSet([0, 8])
    h = p.add(guaranteed("h", 2, annotations={f"memory-type.{D}": "hbm"}))["h"]
    assert h.mems <= CPUSet.parse("250-255")
    assert h.mems
    check_invariants(p)


def test_no_hbm_on_a_plain_server() -> None:
    p = Policy(machine("32em64t-2n8c+dax+nvme+mic+dimms"))
    with pytest.raises(PolicyError, match="memory type HBM"):
        p.add(guaranteed("h", 1, annotations={f"memory-type.{D}": "hbm"}))
    a = p.add(guaranteed("a", 4))["a"]
    assert len(a.mems) == 1


# --- every fixture: a policy builds and a mixed workload keeps its promises ---------------
@pytest.mark.parametrize("name", fixture_names())
def test_every_machine_takes_a_workload(name: str) -> None:
    t = machine(name)
    p = Policy(t)
    p.add(besteffort("be"))
    n = len(t.cpus)
    taken = 0
    for i, size in enumerate((1, 2, max(1, n // 8))):
        try:
            p.add(guaranteed(f"g{i}", size))
            taken += size
        except PolicyError as e:
            assert f"g{i}" in str(e)
            assert taken + size > n - 1, "refused although there was room"
    p.add(burstable("bu", 200))
    free = p.stats().total.free
    if len(free) >= 2:
        p.claim("c", CPUSet([free.last()]))
    else:
        with pytest.raises(PolicyError, match="no shared CPU"):
            p.claim("c", free)
    check_invariants(p)
    restored = Policy.restore(t, p.snapshot())
    assert restored.assignments() == p.assignments()
