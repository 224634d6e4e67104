"""Shared builders and the invariant checker for the policy tests."""

from __future__ import annotations

from collections.abc import Mapping

from topodra.cpuset import CPUSet
from topodra.policy import (
    Assignment,
    Changes,
    ContainerRequest,
    Grant,
    GrantKind,
    Policy,
    PolicyError,
    QoSClass,
)
from topodra.policy.annotations import parse_preferences
from topodra.topology.model import CPUInfo, MemoryKind, NUMANode, Topology

GIB = 1 << 30


def request(
    cid: str,
    qos: QoSClass = QoSClass.GUARANTEED,
    cpu: int = 1000,
    *,
    limit: int | None = -1,
    memory: int = 0,
    namespace: str = "default",
    pod: str | None = None,
    name: str = "ctr",
    annotations: Mapping[str, str] | None = None,
    claims: tuple[str, ...] = (),
) -> ContainerRequest:
    """A container request; Guaranteed gets limit == request unless told otherwise."""
    if limit == -1:
        limit = cpu if qos is QoSClass.GUARANTEED else None
    return ContainerRequest(
        id=cid,
        name=name,
        pod_uid=pod or f"uid-{cid}",
        pod_name=pod or f"pod-{cid}",
        namespace=namespace,
        qos=qos,
        cpu_request_milli=cpu,
        cpu_limit_milli=limit,
        memory_request=memory,
        memory_limit=memory or None,
        annotations=dict(annotations or {}),
        claims=claims,
    )


def guaranteed(cid: str, cpus: float, **kw: object) -> ContainerRequest:
    return request(cid, QoSClass.GUARANTEED, int(cpus * 1000), **kw)  # type: ignore[arg-type]


def besteffort(cid: str, **kw: object) -> ContainerRequest:
    return request(cid, QoSClass.BEST_EFFORT, 0, **kw)  # type: ignore[arg-type]


def burstable(cid: str, cpu: int = 500, **kw: object) -> ContainerRequest:
    return request(cid, QoSClass.BURSTABLE, cpu, **kw)  # type: ignore[arg-type]


def check_invariants(p: Policy, *, reserved_offline: bool = False) -> None:
    """Every rule the policy promises about its state, checked from the outside in.

    ``reserved_offline``: a hotplug took some reserved CPUs offline. Claims keep what they hold
    (``Policy.follow``), so they may then hold every reserved CPU still online; system containers
    run on the root pool's shared CPUs until a reserved CPU returns."""
    assigned = p.assignments()
    claims = p.claims()
    claimed = CPUSet()
    for cpus in claims.values():
        assert cpus, "a claim holds no CPUs"
        assert claimed.isdisjoint(cpus), "two claims share CPUs"
        claimed |= cpus
    if p.reserved_cpus and not reserved_offline:
        assert p.reserved_cpus - claimed, "claims hold every reserved CPU"
    exclusive = CPUSet()
    all_ids = set(assigned)
    for cid in p.grants():
        g = p.grant(cid)
        assert g is not None
        if g.kind is GrantKind.PRESERVE:
            assert cid not in assigned
        else:
            assert cid in all_ids, f"{cid} has a grant but no assignment"
    for cid, a in assigned.items():
        g = p.grant(cid)
        assert g is not None
        assert a.cpus, f"{cid} has an empty cpuset"
        assert a.cpus <= p.topology.online, f"{cid} runs on offline CPUs {a.cpus - p.topology.online}"
        ex = CPUSet.from_mask(g.exclusive)
        if g.kind in (GrantKind.EXCLUSIVE, GrantKind.MIXED):
            assert ex, f"{cid}: {g.kind} without exclusive CPUs"
            assert exclusive.isdisjoint(ex), f"{cid}: exclusive CPUs overlap another grant"
            exclusive |= ex
            assert ex.isdisjoint(claimed), f"{cid}: exclusive CPUs {ex} are claimed"
            assert ex.isdisjoint(p.reserved_cpus)
            assert ex <= p.available_cpus
            if g.isolated:
                assert ex <= p.isolated_cpus
        else:
            assert not ex
        pool = p.pools[g.pool]
        if not p.config.pin_cpu and g.kind is not GrantKind.CLAIMED:
            continue
        cpus = a.cpus
        if g.hide_hyperthreads:
            continue  # thinned sets are checked by their own tests
        if g.kind is GrantKind.CLAIMED:
            union = CPUSet()
            assert g.claims, f"{cid}: claimed container without claims"
            assert set(g.claims) <= set(g.request.claims)
            for c in g.claims:
                union |= claims[c] & p.topology.online  # a claim's offline CPUs wait (Policy.follow)
            assert cpus == union, f"{cid}: claimed container on {cpus}, claims hold {union}"
        elif g.kind is GrantKind.RESERVED:
            want = (p.reserved_cpus - claimed) or p.shared_cpus(p.pools[0].name)
            assert cpus == want, f"{cid}: reserved container on {cpus}, want {want}"
        elif g.kind is GrantKind.EXCLUSIVE:
            assert cpus == ex
        else:
            shared = p.shared_cpus(pool.name)
            assert shared, f"{cid}: pool {pool.name} has an empty shared set"
            assert shared <= CPUSet.from_mask(pool.cpus), "shared set outside its pool"
            assert cpus == (shared | ex), f"{cid}: {cpus} is not pool {pool.name}'s shared set {shared} (+{ex})"
    for cid, a in assigned.items():
        g = p.grant(cid)
        assert g is not None
        if g.kind is GrantKind.CLAIMED or (not p.config.pin_cpu):
            continue
        assert a.cpus.isdisjoint(claimed), f"{cid} runs on claimed CPUs {a.cpus & claimed}"
        own = CPUSet.from_mask(g.exclusive)
        assert (a.cpus - own).isdisjoint(exclusive), f"{cid} runs on another container's exclusive CPUs"
    for cid in p.grants():
        check_mems(p, cid)


def memory_kinds(p: Policy, g: Grant) -> frozenset[MemoryKind]:
    """The memory kinds a container gets: annotated, else configured; defaults when unusable."""
    default = frozenset(p.config.default_memory_types)
    try:
        kinds = parse_preferences(g.request.annotations, g.request.name).memory_types or default
    except PolicyError:
        return default
    return kinds if p.pools[0].nodes_of(kinds) else default


def check_mems(p: Policy, cid: str) -> None:
    """docs/policy.md, Memory: mems are the nodes of the container's pool or of an ancestor of it."""
    g = p.grant(cid)
    assert g is not None
    if g.kind is GrantKind.PRESERVE:
        return
    pool = p.pools[g.pool]
    assert g.mem_pool in pool.path, (
        f"{cid}: memory pool {p.pools[g.mem_pool].name} is not {pool.name} or an ancestor of it"
    )
    mem_pool = p.pools[g.mem_pool]
    nodes = mem_pool.nodes_of(memory_kinds(p, g))
    if g.kind is GrantKind.CLAIMED:  # the nodes of the claimed CPUs, when the memory pool has them
        assert g.mems, f"{cid}: no memory nodes"
        assert CPUSet.from_mask(g.mems) <= CPUSet.from_mask(nodes), f"{cid}: mems {g.mems:#x}"
        if any(p.claim_memory(c) == "all" for c in g.claims):  # every node of its kinds
            assert g.mems == p.pools[0].nodes_of(memory_kinds(p, g)), f"{cid}: mems {g.mems:#x} are not all nodes"
    else:
        assert g.mems == nodes, (
            f"{cid}: mems {CPUSet.from_mask(g.mems)} are not the nodes {CPUSet.from_mask(nodes)} "
            f"of its memory pool {mem_pool.name}"
        )
    a = p.assignment(cid)
    assert a is not None
    pinned = p.config.pin_memory and not g.memory_preserve
    assert a.mems == (CPUSet.from_mask(g.mems) if pinned else CPUSet()), f"{cid}: assignment mems {a.mems}"
    if p.config.pin_cpu:
        assert a.cpus <= CPUSet.from_mask(mem_pool.cpus), (
            f"{cid}: runs on CPUs {a.cpus} but its memory is that of pool {mem_pool.name}"
        )


def check_changes(before: dict[str, Assignment], after: dict[str, Assignment], changes: Changes, subject: str | None) -> None:
    """``changes`` is exactly the difference between two states (plus the subject)."""
    for cid, a in after.items():
        if before.get(cid) != a:
            assert cid in changes, f"{cid} changed from {before.get(cid)} to {a} but is not in the changes"
    for cid, a in changes.items():
        assert after.get(cid) == a, f"changes give {cid} {a}, the policy holds {after.get(cid)}"
        assert cid == subject or before.get(cid) != a, f"{cid} is in the changes but did not change"


def make_topology(layout: dict[int, tuple[int, int, int]], *, l3_of_node: bool = True) -> Topology:
    """A hand-built machine: CPU -> (package, NUMA node, core); L3 per NUMA node unless told."""
    cores: dict[int, set[int]] = {}
    for cpu, (_, _, core) in layout.items():
        cores.setdefault(core, set()).add(cpu)
    cpus = {}
    for cpu, (pkg, node, core) in sorted(layout.items()):
        cpus[cpu] = CPUInfo(
            id=cpu,
            package=pkg,
            die=pkg,
            die_id=0,
            cluster=core,
            cluster_id=-1,
            core=core,
            core_id=core,
            siblings=CPUSet(cores[core]),
            node=node,
            l2=core,
            l3=node if l3_of_node else pkg,
        )
    nodes = {}
    for node in sorted({n for _, n, _ in layout.values()}):
        nodes[node] = NUMANode(
            id=node, cpus=CPUSet(c for c, (_, n, _) in layout.items() if n == node), memory_bytes=64 * GIB
        )
    online = CPUSet(layout)
    return Topology(cpus=cpus, nodes=nodes, possible=online, present=online, online_cpus=online, source="test")
