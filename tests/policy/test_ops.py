"""Scenario tests of every policy operation on synthetic machines."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest

from topodra.cpuset import CPUSet
from topodra.policy import (
    Assignment,
    BadRequestError,
    Grant,
    GrantKind,
    NoFitError,
    Policy,
    PolicyConfig,
    PolicyError,
    QoSClass,
    SnapshotError,
)
from topodra.topology.model import CoreType, Topology
from topodra.topology.synthetic import synthetic_topology

from .helpers import GIB, besteffort, burstable, check_invariants, guaranteed

D = "resource-policy.nri.io"
SERVER = synthetic_topology("2s1d2n2l8c2t")  # 128 CPUs
SMALL = synthetic_topology("1s1d1n1l2c2t")  # 4 CPUs: cores (0,2) and (1,3)
HYBRID = synthetic_topology("1s1d1n1l4c2t8e")  # P-cores 0-3,12-15; E-cores 4-11
NUMA2 = synthetic_topology("1s1d2n1l4c2t")  # 16 CPUs, two NUMA nodes


def l3_of(topo: Topology, cpus: CPUSet) -> set[int | None]:
    return {topo.cpus[c].l3 for c in cpus}


def cores_of(topo: Topology, cpus: CPUSet) -> set[int]:
    return {topo.cpus[c].core for c in cpus}


def grant_of(p: Policy, cid: str) -> Grant:
    g = p.grant(cid)
    assert g is not None, f"{cid} has no grant"
    return g


def assigned(p: Policy, cid: str) -> Assignment:
    a = p.assignment(cid)
    assert a is not None, f"{cid} has no assignment"
    return a


def snapshot_json(p: Policy) -> str:
    return json.dumps(p.snapshot(), sort_keys=True)


# --- add / remove -------------------------------------------------------------------
def test_add_exclusive_is_packed_and_shared_followers_shrink() -> None:
    p = Policy(SERVER)
    ch = p.add(besteffort("be"))
    be_pool = grant_of(p, "be").pool
    assert p.pools[be_pool].levels == ("l3cache",)
    ch = p.add(guaranteed("g", 4))
    g = ch["g"].cpus
    assert len(g) == 4
    assert len(cores_of(SERVER, g)) == 2
    assert len(l3_of(SERVER, g)) == 1
    # the exclusive grant went into the best-fitting L3: not the one with the shared container
    assert "be" not in ch
    assert next(iter(ch)) == "g"
    check_invariants(p)
    # a second exclusive grant lands next to the first (best fit), not in an empty L3
    g2 = p.add(guaranteed("g2", 2))["g2"].cpus
    assert l3_of(SERVER, g2) == l3_of(SERVER, g)
    check_invariants(p)


def test_shared_containers_shrink_and_widen() -> None:
    p = Policy(SMALL)
    assert p.add(besteffort("be"))["be"].cpus == CPUSet.parse("0-3")
    ch = p.add(guaranteed("g", 2))
    assert ch["g"].cpus in (CPUSet.parse("0,2"), CPUSet.parse("1,3"))
    assert ch["be"].cpus == CPUSet.parse("0-3") - ch["g"].cpus
    ch = p.remove("g")
    assert ch == {"be": Assignment(cpus=CPUSet.parse("0-3"), mems=CPUSet.parse("0"))}
    assert p.remove("g") == {}
    assert p.remove("never-seen") == {}
    check_invariants(p)


def test_never_an_empty_shared_set() -> None:
    p = Policy(SMALL)
    p.add(besteffort("be"))
    before = snapshot_json(p)
    with pytest.raises(PolicyError, match="no pool can supply 4 exclusive CPUs"):
        p.add(guaranteed("g", 4))
    assert snapshot_json(p) == before
    ch = p.add(guaranteed("g", 3))
    assert len(ch["be"].cpus) == 1
    check_invariants(p)
    # and the shared containers' requests are honoured, not just non-emptiness
    q = Policy(SMALL)
    q.add(burstable("b", 1500))
    with pytest.raises(PolicyError):
        q.add(guaranteed("g", 3))
    q.add(guaranteed("g", 2))
    check_invariants(q)


def test_shared_overcommit_keeps_running_on_the_fullest_pool() -> None:
    p = Policy(SMALL)
    for i in range(6):
        ch = p.add(burstable(f"b{i}", 1000))
        assert ch[f"b{i}"].cpus
    check_invariants(p)


def test_exclusive_too_big() -> None:
    p = Policy(SMALL)
    with pytest.raises(NoFitError, match="container big"):
        p.add(guaranteed("big", 5))


def test_errors_say_whose_move_it_is() -> None:
    """Issue 11: a bad request, a request that does not fit now, and a corrupt snapshot are told apart."""
    assert issubclass(BadRequestError, PolicyError)
    assert issubclass(NoFitError, PolicyError)
    assert issubclass(SnapshotError, PolicyError)
    p = Policy(SMALL, PolicyConfig(reserved_cpus=CPUSet([0])))
    with pytest.raises(BadRequestError, match="reserved"):
        p.claim("c", CPUSet([0]))
    with pytest.raises(BadRequestError, match="not a boolean"):
        p.add(guaranteed("a", 1, annotations={f"prefer-shared-cpus.{D}": "perhaps"}))
    with pytest.raises(BadRequestError, match="reservedCPUs"):
        Policy(SMALL, PolicyConfig(reserved_cpus=CPUSet([9])))
    p.add(guaranteed("b", 2))
    with pytest.raises(NoFitError, match="no pool can supply"):
        p.add(guaranteed("c", 2))
    snap = json.loads(json.dumps(p.snapshot()))
    snap["containers"][0]["grant"]["mems"] = "0-7"
    with pytest.raises(SnapshotError, match="mems"):
        Policy.restore(SMALL, snap)
    snap = json.loads(json.dumps(p.snapshot()))
    snap["containers"][0]["request"]["claims"] = [""]  # a request no runtime could have sent
    with pytest.raises(SnapshotError, match="distinct non-empty"):
        Policy.restore(SMALL, snap)


def test_add_twice_is_an_update() -> None:
    p = Policy(SERVER)
    first = p.add(guaranteed("g", 2))
    assert p.add(guaranteed("g", 2)) == first
    ch = p.add(guaranteed("g", 4))
    assert len(ch["g"].cpus) == 4


# --- update -------------------------------------------------------------------------
def test_resize_keeps_cpus() -> None:
    p = Policy(SERVER)
    p.add(besteffort("be"))
    old = p.add(guaranteed("g", 4))["g"].cpus
    grown = p.update(guaranteed("g", 6))["g"].cpus
    assert old < grown
    assert len(grown) == 6
    assert len(l3_of(SERVER, grown)) == 1
    shrunk = p.update(guaranteed("g", 2))["g"].cpus
    assert shrunk < grown
    assert len(cores_of(SERVER, shrunk)) == 1
    same = p.update(guaranteed("g", 2))
    assert same == {"g": p.assignment("g")}
    assert p.update(besteffort("new"))["new"].cpus
    check_invariants(p)


def test_resize_exclusive_to_shared_and_back() -> None:
    p = Policy(SERVER)
    p.add(guaranteed("g", 2))
    ch = p.update(guaranteed("g", 0.5))
    assert grant_of(p, "g").kind is GrantKind.SHARED
    assert len(ch["g"].cpus) > 2
    p.update(guaranteed("g", 3))
    assert grant_of(p, "g").kind is GrantKind.EXCLUSIVE
    check_invariants(p)


def test_failed_update_keeps_the_old_grant() -> None:
    p = Policy(SMALL)
    p.add(besteffort("be"))
    p.add(guaranteed("g", 2))
    before = snapshot_json(p)
    with pytest.raises(PolicyError):
        p.update(guaranteed("g", 4))
    assert snapshot_json(p) == before


# --- reserved, isolated, hybrid, hide-hyperthreads -----------------------------------
def test_reserved_pool() -> None:
    p = Policy(SERVER, PolicyConfig(reserved_cpu_count=2))
    assert len(p.reserved_cpus) == 2
    assert len(cores_of(SERVER, p.reserved_cpus)) == 1
    ch = p.add(burstable("proxy", 100, namespace="kube-system"))
    assert ch["proxy"].cpus == p.reserved_cpus
    assert ch["proxy"].mems == CPUSet.parse("0-3")
    assert p.add(guaranteed("g", 2, namespace="kube-system"))["g"].cpus == p.reserved_cpus
    ann = {f"prefer-reserved-cpus.{D}": "false"}
    own = p.add(guaranteed("own", 2, namespace="kube-system", annotations=ann))["own"].cpus
    assert own.isdisjoint(p.reserved_cpus)
    be = p.add(besteffort("be"))["be"].cpus
    assert be.isdisjoint(p.reserved_cpus)
    check_invariants(p)


def test_reserved_config_errors() -> None:
    with pytest.raises(PolicyError, match="reservedCPUs '200': CPUs 200"):
        Policy(SERVER, PolicyConfig(reserved_cpus=CPUSet([200])))
    with pytest.raises(PolicyError, match="reservedCPUCount 4"):
        Policy(SMALL, PolicyConfig(reserved_cpu_count=4))
    with pytest.raises(PolicyError, match="availableCPUs '0-300'"):
        Policy(SERVER, PolicyConfig(available_cpus=CPUSet.parse("0-300")))
    with pytest.raises(PolicyError, match="leave no CPU"):
        Policy(SMALL, PolicyConfig(available_cpus=CPUSet.parse("0-1"), excluded_cpus=CPUSet.parse("0-3")))


def isolated_server() -> Topology:
    return replace(SERVER, isolated=CPUSet.parse("60-63,124-127"))


def test_isolated_cpus_for_small_exclusive_requests() -> None:
    p = Policy(isolated_server())
    a = p.add(guaranteed("a", 2))["a"].cpus
    assert a <= p.isolated_cpus
    assert len(cores_of(SERVER, a)) == 1
    b = p.add(guaranteed("b", 3))["b"].cpus
    assert b.isdisjoint(p.isolated_cpus)
    ann = {f"prefer-isolated-cpus.{D}": "false"}
    c = p.add(guaranteed("c", 1, annotations=ann))["c"].cpus
    assert c.isdisjoint(p.isolated_cpus)
    be = p.add(besteffort("be"))["be"].cpus
    assert be.isdisjoint(p.isolated_cpus)
    req = {f"require-isolated-cpus.{D}": "true"}
    with pytest.raises(PolicyError, match="require-isolated-cpus"):
        p.add(guaranteed("d", 8, annotations=req))
    p.add(guaranteed("d", 6, annotations=req))
    with pytest.raises(PolicyError, match="require-isolated-cpus"):
        p.add(guaranteed("e", 1, annotations=req))
    # preferring isolated when none is left falls back to ordinary CPUs
    assert p.add(guaranteed("f", 1))["f"].cpus.isdisjoint(p.isolated_cpus)
    check_invariants(p)
    with pytest.raises(PolicyError, match="no isolated CPUs"):
        Policy(SERVER).add(guaranteed("x", 1, annotations=req))


def test_cpu_priority_on_hybrid() -> None:
    p = Policy(HYBRID)
    e_cores = HYBRID.cpus_of_type(CoreType.E_CORE)
    p_cores = HYBRID.cpus_of_type(CoreType.P_CORE)
    low = p.add(guaranteed("low", 2, annotations={f"prefer-cpu-priority.{D}": "low"}))["low"].cpus
    assert low <= e_cores
    high = p.add(guaranteed("high", 2, annotations={f"prefer-cpu-priority.{D}": "high"}))["high"].cpus
    assert high <= p_cores
    assert len(cores_of(HYBRID, high)) == 1
    cfg = Policy(HYBRID, PolicyConfig.model_validate({"defaultCPUPriority": "low"}))
    assert cfg.add(guaranteed("x", 4))["x"].cpus <= e_cores
    # more E-cores than exist: soft preference, falls back to any kind
    big = p.add(guaranteed("big", 7, annotations={f"prefer-cpu-priority.{D}": "low"}))["big"].cpus
    assert len(big) == 7
    check_invariants(p)


def test_hide_hyperthreads() -> None:
    p = Policy(SERVER)
    a = p.add(guaranteed("a", 4, annotations={f"hide-hyperthreads.{D}/container.ctr": "true"}))["a"].cpus
    assert len(a) == 2
    assert len(cores_of(SERVER, a)) == 2
    p.add(besteffort("be", annotations={f"hide-hyperthreads.{D}": "true"}))
    be = p.assignment("be")
    assert be is not None
    assert len(be.cpus) == len(cores_of(SERVER, be.cpus))


def test_preserve() -> None:
    p = Policy(SERVER)
    assert p.add(guaranteed("a", 4, annotations={f"cpu.preserve.{D}": "true"})) == {}
    assert p.assignment("a") is None
    assert grant_of(p, "a").kind is GrantKind.PRESERVE
    m = p.add(guaranteed("m", 2, annotations={f"memory.preserve.{D}": "true"}))["m"]
    assert m.mems == CPUSet()
    assert p.remove("a") == {}


def test_pin_toggles() -> None:
    p = Policy(SERVER, PolicyConfig(pin_cpu=False, pin_memory=False))
    a = p.add(guaranteed("a", 4))["a"]
    assert a.cpus == SERVER.online
    assert a.mems == CPUSet()
    p.claim("c", CPUSet.parse("10-11"))
    assert p.add(guaranteed("x", 2, claims=("c",)))["x"].cpus == CPUSet.parse("10-11")
    assert assigned(p, "a").cpus == SERVER.online - CPUSet.parse("10-11")
    check_invariants(p)


# --- shared placement -------------------------------------------------------------
def test_shared_spread_and_burstable_levels() -> None:
    p = Policy(SERVER)
    pools = [grant_of(p, c).pool for c in ("a", "b") if p.add(besteffort(c))]
    assert pools[0] != pools[1], "least loaded leaf pool first"
    p.add(burstable("unlimited", 200))
    assert p.pools[grant_of(p, "unlimited").pool].levels[0] == "package"
    p.add(burstable("numa", 200, annotations={f"unlimited-burstable.{D}": "numa"}))
    assert p.pools[grant_of(p, "numa").pool].levels == ("numa",)
    p.add(burstable("limited", 200, limit=40000))  # more than a NUMA node (32 CPUs)
    assert p.pools[grant_of(p, "limited").pool].levels[0] == "package"
    check_invariants(p)


def test_colocate_pods() -> None:
    p = Policy(SERVER, PolicyConfig(colocate_pods=True))
    p.add(besteffort("a", pod="web"))
    p.add(besteffort("b", pod="web"))
    assert grant_of(p, "a").pool == grant_of(p, "b").pool
    q = Policy(SERVER)
    q.add(besteffort("a", pod="web"))
    q.add(besteffort("b", pod="web"))
    assert grant_of(q, "a").pool != grant_of(q, "b").pool


# --- memory ---------------------------------------------------------------------
def test_memory_nodes_and_kinds() -> None:
    topo = synthetic_topology("2s1d1n1l4c2t+hbm")  # nodes 0,1 DRAM; 2 HBM (socket 0), 3 HBM (socket 1)
    p = Policy(topo)
    a = p.add(guaranteed("a", 2))["a"]
    assert a.mems in (CPUSet([0]), CPUSet([1]))
    h = p.add(guaranteed("h", 2, annotations={f"memory-type.{D}": "hbm"}))["h"]
    node = topo.cpus[h.cpus.first()].node
    assert h.mems == CPUSet([2 + node])
    both = p.add(guaranteed("both", 2, annotations={f"memory-type.{D}": "dram,hbm"}))["both"]
    node = topo.cpus[both.cpus.first()].node
    assert both.mems == CPUSet([node, 2 + node])
    with pytest.raises(PolicyError, match="memory type PMEM requested"):
        p.add(guaranteed("p", 1, annotations={f"memory-type.{D}": "pmem"}))
    everything = Policy(topo, PolicyConfig.model_validate({"defaultMemoryTypes": ["dram", "hbm"]}))
    assert len(everything.add(besteffort("x"))["x"].mems) == 2


def test_memory_widens_when_it_does_not_fit() -> None:
    p = Policy(NUMA2)
    a = p.add(guaranteed("a", 2, memory=40 * GIB))["a"]
    assert len(a.mems) == 1
    b = p.add(guaranteed("b", 2, memory=40 * GIB))["b"]
    assert len(b.mems) == 1
    assert b.mems != a.mems, "the other node still has room"
    c = p.add(guaranteed("c", 2, memory=40 * GIB))["c"]
    assert c.mems == CPUSet([0, 1]), "no node has 40 GiB left: widen"
    big = p.add(besteffort("huge", memory=100 * GIB))["huge"]
    assert big.mems == CPUSet([0, 1])
    check_invariants(p)


# --- claims -------------------------------------------------------------------------
def test_claim_and_release_move_shared_containers() -> None:
    p = Policy(SMALL)
    p.add(besteffort("be"))
    ch = p.claim("c1", CPUSet.parse("0,2"))
    assert ch == {"be": Assignment(cpus=CPUSet.parse("1,3"), mems=CPUSet([0]))}
    assert p.claim("c1", CPUSet.parse("0,2")) == {}
    with pytest.raises(PolicyError, match="already holds CPUs 0,2"):
        p.claim("c1", CPUSet.parse("1"))
    with pytest.raises(PolicyError, match="already claimed by 'c1'"):
        p.claim("c2", CPUSet.parse("2-3"))
    user = p.add(guaranteed("user", 1, claims=("c1",)))
    assert user["user"].cpus == CPUSet.parse("0,2")
    ch = p.remove("user")
    assert ch == {}
    ch = p.release("c1")
    assert ch["be"].cpus == CPUSet.parse("0-3")
    assert p.release("c1") == {}
    check_invariants(p)


def test_claim_errors() -> None:
    p = Policy(SERVER, PolicyConfig(reserved_cpus=CPUSet.parse("0,64"), available_cpus=CPUSet.parse("0-120")))
    for cpus, msg in [
        ("0,64", "claiming them would leave none of the reserved CPUs 0,64 to them"),
        ("121", "not available"),
        ("", "empty"),
    ]:
        with pytest.raises(PolicyError, match=msg):
            p.claim("c", CPUSet.parse(cpus))
    with pytest.raises(PolicyError, match="not online"):
        p.claim("c", CPUSet([500]))
    with pytest.raises(PolicyError, match="claim 'nope' is not prepared"):
        p.add(guaranteed("x", 1, claims=("nope",)))


def test_claim_of_reserved_cpus_keeps_one_for_system_containers() -> None:
    """A claim may take reserved CPUs (a system daemon tolerating the devices' reserved taint):
    the reserved containers move to the rest; the last reserved CPU is never claimed."""
    p = Policy(SERVER, PolicyConfig(reserved_cpus=CPUSet.parse("0,64")))
    assert p.add(burstable("proxy", 100, namespace="kube-system"))["proxy"].cpus == CPUSet.parse("0,64")
    changes = p.claim("daemon", CPUSet([64]))
    assert changes["proxy"].cpus == CPUSet([0])
    check_invariants(p)
    with pytest.raises(PolicyError, match="would leave none of the reserved CPUs 0,64"):
        p.claim("other", CPUSet([0]))
    assert p.release("daemon")["proxy"].cpus == CPUSet.parse("0,64")
    check_invariants(p)


def test_claim_moves_exclusive_grants_keeping_what_it_can() -> None:
    p = Policy(SERVER)
    g = p.add(guaranteed("g", 4))["g"].cpus
    taken = CPUSet([g.first()])
    ch = p.claim("c", taken)
    moved = ch["g"].cpus
    assert len(moved) == 4
    assert taken.isdisjoint(moved)
    assert len(moved & g) == 3, "the CPUs the claim did not take stay"
    check_invariants(p)


def test_claim_refused_when_an_exclusive_grant_cannot_move() -> None:
    p = Policy(SMALL)
    p.add(besteffort("be"))
    p.add(guaranteed("g", 3))
    before = snapshot_json(p)
    with pytest.raises(PolicyError, match=r"holds .* exclusively and cannot move"):
        p.claim("c", CPUSet([assigned(p, "g").cpus.first()]))
    assert snapshot_json(p) == before


def test_claim_that_empties_a_pool_moves_its_followers_up() -> None:
    p = Policy(SERVER)
    p.add(besteffort("be"))
    pool = p.pools[grant_of(p, "be").pool]
    ch = p.claim("c", CPUSet.from_mask(pool.cpus))
    assert ch["be"].cpus
    assert ch["be"].cpus.isdisjoint(CPUSet.from_mask(pool.cpus))
    assert grant_of(p, "be").pool == pool.parent
    check_invariants(p)


def test_claim_that_empties_a_numa_node_moves_memory_with_the_cpus() -> None:
    """Issue 13: a shared container moved up by a claim took its old node's memory with it."""
    p = Policy(NUMA2)
    p.add(burstable("web", 500, limit=2000))
    p.add(besteffort("batch"))
    p.add(guaranteed("db", 2))
    assert grant_of(p, "batch").pool == p.pools[2].index  # numa1, beside db
    ch = p.claim("c", CPUSet.parse("5-7,13-15"))
    assert ch["batch"] == Assignment(cpus=CPUSet.parse("0-3,8-11"), mems=CPUSet.parse("0-1"))
    assert p.pool_name(grant_of(p, "batch").mem_pool) == "root"
    check_invariants(p)
    q = Policy.restore(NUMA2, json.loads(json.dumps(p.snapshot())))
    assert q.assignments() == p.assignments()


def test_claim_that_empties_the_root_is_refused() -> None:
    p = Policy(SMALL)
    p.add(besteffort("be"))
    with pytest.raises(PolicyError, match="no shared CPU"):
        p.claim("c", CPUSet.parse("0-3"))
    assert p.claims() == {}
    q = Policy(SMALL)
    q.claim("c", CPUSet.parse("0-3"))  # nobody to starve: fine
    with pytest.raises(PolicyError, match="no shared CPUs are left"):
        q.add(besteffort("be"))


def test_release_with_a_running_user_re_places_it() -> None:
    p = Policy(SERVER)
    p.claim("c", CPUSet.parse("8-9"))
    p.add(guaranteed("u", 2, claims=("c",)))
    ch = p.release("c")
    assert len(ch["u"].cpus) == 2
    assert grant_of(p, "u").degraded
    check_invariants(p)


def test_pick() -> None:
    p = Policy(HYBRID)
    p.add(guaranteed("g", 2))
    within = HYBRID.online
    got = p.pick(2, within)
    assert len(got) == 2
    assert len(cores_of(HYBRID, got)) == 1
    assert got.isdisjoint(assigned(p, "g").cpus)
    e = p.pick(3, within, prefer=CoreType.E_CORE)
    assert e <= HYBRID.cpus_of_type(CoreType.E_CORE)
    p.claim("c", e)
    again = p.pick(2, within, prefer=CoreType.E_CORE)
    assert again.isdisjoint(e)
    with pytest.raises(PolicyError, match="pick: 30 CPUs wanted"):
        p.pick(30, within)
    with pytest.raises(PolicyError, match="count must be positive"):
        p.pick(0, within)
    with pytest.raises(PolicyError, match=r"claimed .*, exclusively granted"):
        p.pick(1, e)
    free = CPUSet(list(HYBRID.online - e - assigned(p, "g").cpus)[:2])
    assert p.pick(1, free) <= free


# --- sync, reconfigure, snapshot ---------------------------------------------------
def populated() -> Policy:
    p = Policy(isolated_server(), PolicyConfig(reserved_cpu_count=2))
    p.claim("claim-a", CPUSet.parse("20-23"))
    p.add(guaranteed("claimer", 4, claims=("claim-a",)))
    p.add(guaranteed("g4", 4))
    p.add(guaranteed("g1", 1))
    p.add(guaranteed("mixed", 2.5, annotations={f"prefer-shared-cpus.{D}": "false"}))
    p.add(besteffort("be"))
    p.add(burstable("bu", 700))
    p.add(burstable("sys", 100, namespace="kube-system"))
    p.add(guaranteed("keep", 1, annotations={f"cpu.preserve.{D}": "true"}))
    return p


def test_snapshot_restore_is_exact() -> None:
    p = populated()
    snap = json.loads(json.dumps(p.snapshot()))
    q = Policy.restore(p.topology, snap)
    assert q.snapshot() == p.snapshot()
    assert q.assignments() == p.assignments()
    # and it behaves the same afterwards
    assert q.add(guaranteed("next", 3)) == p.add(guaranteed("next", 3))
    assert q.claim("b", CPUSet.parse("40-41")) == p.claim("b", CPUSet.parse("40-41"))
    assert q.snapshot() == p.snapshot()


def test_restore_rejects_bad_snapshots() -> None:
    p = populated()
    snap = p.snapshot()
    with pytest.raises(PolicyError, match="online CPUs"):
        Policy.restore(SMALL, snap)
    bad = json.loads(json.dumps(snap))
    bad["version"] = 99
    with pytest.raises(PolicyError, match="version 99"):
        Policy.restore(p.topology, bad)
    bad = json.loads(json.dumps(snap))
    g4 = next(c for c in bad["containers"] if c["request"]["id"] == "g4")
    g1 = next(c for c in bad["containers"] if c["request"]["id"] == "g1")
    g1["grant"]["exclusive"] = g4["grant"]["exclusive"]
    with pytest.raises(PolicyError, match=r"not grantable|recorded assignment"):
        Policy.restore(p.topology, bad)
    bad = json.loads(json.dumps(snap))
    bad["containers"][0]["grant"]["pool"] = "nowhere"
    with pytest.raises(PolicyError, match="unknown pool 'nowhere'"):
        Policy.restore(p.topology, bad)
    bad = json.loads(json.dumps(snap))
    bad["containers"][0]["request"]["qos"] = "Platinum"
    with pytest.raises(PolicyError, match="unknown qos"):
        Policy.restore(p.topology, bad)
    bad = json.loads(json.dumps(snap))
    bad["config"]["pinCPU"] = "perhaps"
    with pytest.raises(PolicyError, match=r"snapshot: config\.pinCPU: must be a valid boolean.*\(got .perhaps.\)"):
        Policy.restore(p.topology, bad)
    with pytest.raises(PolicyError, match="expected an object"):
        Policy.restore(p.topology, [])  # type: ignore[arg-type]


def test_sync_after_restart_keeps_everything() -> None:
    p = populated()
    fresh = Policy(p.topology, p.config)
    for claim_id, cpus in p.claims().items():
        fresh.claim(claim_id, cpus)
    running = [(g.request, p.assignment(cid)) for cid, g in p.grants().items()]
    assert fresh.sync(running) == {}
    assert fresh.assignments() == p.assignments()
    check_invariants(fresh)


def test_sync_with_unknown_state_assigns_everything() -> None:
    p = populated()
    fresh = Policy(p.topology, p.config)
    fresh.claim("claim-a", CPUSet.parse("20-23"))
    running = [(g.request, None) for g in p.grants().values()]
    ch = fresh.sync(running)
    assert set(ch) == {cid for cid, g in p.grants().items() if g.kind is not GrantKind.PRESERVE}
    check_invariants(fresh)


def test_sync_degrades_instead_of_failing() -> None:
    p = Policy(SMALL)
    running = [
        (guaranteed("a", 2), Assignment(cpus=CPUSet.parse("0,2"), mems=CPUSet([0]))),
        (guaranteed("b", 2), Assignment(cpus=CPUSet.parse("0,2"))),  # conflicting report
        (guaranteed("c", 2), None),
        (guaranteed("d", 1, claims=("gone",)), Assignment(cpus=CPUSet.parse("1"))),
        (besteffort("e", annotations={f"prefer-shared-cpus.{D}": "sure"}), None),
    ]
    ch = p.sync(running)
    assert "a" not in ch  # kept as it was
    assert set(ch) == {"b", "c", "d", "e"}
    assert p.assignment("a") == running[0][1]
    assert grant_of(p, "d").kind is GrantKind.EXCLUSIVE
    assert assigned(p, "d").cpus == CPUSet([1])
    assert grant_of(p, "b").kind is GrantKind.SHARED
    stats = p.stats()
    assert set(stats.degraded) == {"b", "c", "d", "e"}
    check_invariants(p)
    with pytest.raises(PolicyError, match="listed twice"):
        p.sync([(besteffort("x"), None), (besteffort("x"), None)])


def test_reconfigure_re_places_and_reports() -> None:
    p = populated()
    before = p.assignments()
    ch = p.reconfigure(p.config)
    assert ch == {}
    assert p.assignments() == before
    new = PolicyConfig(reserved_cpus=CPUSet.parse("0-1,64-65"))
    ch = p.reconfigure(new)
    assert ch["sys"].cpus == CPUSet.parse("0-1,64-65")
    for cid, a in p.assignments().items():
        if before.get(cid) != a:
            assert ch[cid] == a
    check_invariants(p)


def test_reconfigure_shrinking_available_cpus_moves_containers() -> None:
    # upstream issue #92: restore failed instead of re-pinning
    p = Policy(SERVER)
    g = p.add(guaranteed("g", 4))["g"].cpus
    cfg = PolicyConfig(excluded_cpus=g)
    ch = p.reconfigure(cfg)
    assert ch["g"].cpus.isdisjoint(g)
    assert len(ch["g"].cpus) == 4
    check_invariants(p)


def test_reconfigure_refused_when_a_claim_would_break() -> None:
    p = populated()
    before = snapshot_json(p)
    with pytest.raises(PolicyError, match="claim 'claim-a'"):
        p.reconfigure(PolicyConfig(reserved_cpus=CPUSet.parse("20")))
    assert snapshot_json(p) == before
    with pytest.raises(PolicyError, match="reservedCPUs"):
        p.reconfigure(PolicyConfig(reserved_cpus=CPUSet.parse("999")))
    assert snapshot_json(p) == before


def test_stats() -> None:
    p = populated()
    s = p.stats()
    root = s.pool("root")
    assert root.usage.reserved == p.reserved_cpus
    assert root.usage.claimed == CPUSet.parse("20-23")
    assert len(root.usage.allocated) == 4 + 1 + 2
    assert root.usage.isolated == CPUSet.parse("60-63,124-127")
    assert root.usage.free == root.usage.shared | (root.usage.isolated - root.usage.allocated)
    assert s.containers == {"claimed": 1, "exclusive": 2, "mixed": 1, "preserve": 1, "reserved": 1, "shared": 2}
    assert s.kinds[CoreType.STANDARD].cpus == SERVER.online
    total = s.total
    parts = [total.allocated, total.shared, total.claimed, total.reserved]
    for i, a in enumerate(parts):
        for b in parts[i + 1 :]:
            assert a.isdisjoint(b)
    with pytest.raises(KeyError):
        s.pool("nope")


def test_deterministic() -> None:
    assert snapshot_json(populated()) == snapshot_json(populated())


def test_qos_enum_checked() -> None:
    with pytest.raises(PolicyError, match="qos"):
        Policy(SMALL).add(replace(besteffort("x"), qos="Gold"))  # type: ignore[arg-type]
    assert QoSClass("Burstable") is QoSClass.BURSTABLE


def test_release_of_one_of_two_claims_keeps_the_other() -> None:
    p = Policy(SERVER)
    p.claim("a", CPUSet.parse("8-9"))
    p.claim("b", CPUSet.parse("40-41"))
    assert p.add(guaranteed("u", 4, claims=("a", "b")))["u"].cpus == CPUSet.parse("8-9,40-41")
    ch = p.release("a")
    assert ch["u"].cpus == CPUSet.parse("40-41")
    assert grant_of(p, "u").claims == ("b",)
    assert grant_of(p, "u").degraded
    check_invariants(p)
    # the released claim id coming back later does not re-pin the container
    p.claim("a", CPUSet.parse("10-11"))
    assert assigned(p, "u").cpus == CPUSet.parse("40-41")


def test_claim_moves_a_degraded_container_with_broken_annotations() -> None:
    p = Policy(SMALL)
    bad = guaranteed("x", 1, annotations={f"hide-hyperthreads.{D}": "perhaps"})
    p.sync([(bad, Assignment(cpus=CPUSet([0]), mems=CPUSet([0])))])
    assert grant_of(p, "x").kind is GrantKind.EXCLUSIVE
    assert "annotations ignored" in grant_of(p, "x").degraded
    ch = p.claim("c", CPUSet([0]))
    assert ch["x"].cpus.isdisjoint(CPUSet([0]))
    check_invariants(p)
