"""Policy quality against the kubelet's static policy, and time per operation.

Quality: one churn workload of exclusive containers (random sizes, ~75 %
occupancy, deterministic seed) is replayed on our policy and, as a grant
sequence, on the kubelet's ``takeByTopologyNUMAPacked`` (its Python port, and
the Go code itself when ``TOPODRA_KUBELET_HARNESS`` names the harness; then the
port's grants are counted against the Go code's and the Go answers are the
kubelet's figures; docs/policy.md, "The kubelet peer"). Reported per algorithm: the share of
grants inside one NUMA node / one L3 (of those small enough to fit one), on
full cores (they touch ceil(n / threads) cores), refused requests, and the
fragmentation left behind (free CPUs on split cores; the largest grant one L3
could still take on full cores, averaged over the run).

Speed: a node with 500 containers (shared, exclusive, mixed, claim-pinned) on
a 256-CPU machine (and 2,000 on a 1,024-CPU one); steady-state remove+add,
resize, claim+release and pick are timed one call each, and the adds once
more by kind (an exclusive add against a shared one). Goal: median <= 200 us.
The peer, measured in the same run on the same free CPUs: the kubelet's
``takeByTopologyNUMAPacked``, by its Python port and (with the harness) by the
Go code; add and update are reported as ratios to each.
"""

from __future__ import annotations

import importlib
import random
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

from testkit.kubelet_baseline import kubelet_view, take_by_topology_numa_packed
from testkit.kubelet_harness import Grant, GrantSequence, harness_binary, replay_go, replay_python

from benchmarks.common import Result, percentile
from topodra.cpuset import CPUSet
from topodra.policy import ContainerRequest, GrantKind, Policy, PolicyConfig, PolicyError, QoSClass
from topodra.topology.model import Topology
from topodra.topology.synthetic import synthetic_topology

SIZES = [1, 1, 1, 2, 2, 2, 2, 3, 4, 4, 4, 6, 8, 8, 12, 16]
#: Real trees: a 2-socket Xeon with SNC (80 CPUs, NUMA nodes below the L3) and the largest
#: tree (256 CPUs in 64 NUMA nodes, 193 pools).
FIXTURES = ("memorysidecaches", "256ia64-64n2s2c")


def _machines() -> list[tuple[str, Topology]]:
    """The 2-socket and the largest tree: real fixtures when discovery is available."""
    out: list[tuple[str, Topology]] = []
    try:  # the sysfs reader comes from the topology part
        fixtures: Any = importlib.import_module("topodra.topology.fixtures")
        sysfs: Any = importlib.import_module("topodra.topology.sysfs")
    except ImportError:
        fixtures = sysfs = None
    if fixtures is not None and sysfs is not None:
        for name in FIXTURES:
            try:
                out.append((name, sysfs.read_topology(fixtures.unpacked_fixture(name))))
            except Exception:  # a missing fixture only narrows the benchmark
                continue
    out.append(("synthetic 2s1d2n2l16c2t (256 CPUs)", synthetic_topology("2s1d2n2l16c2t")))
    return out


def _req(cid: str, qos: QoSClass, milli: int, **kw: object) -> ContainerRequest:
    limit = milli if qos is QoSClass.GUARANTEED else kw.pop("limit", None)
    return ContainerRequest(
        id=cid,
        name="ctr",
        pod_uid=f"uid-{cid}",
        pod_name=f"pod-{cid}",
        namespace=str(kw.pop("namespace", "default")),
        qos=qos,
        cpu_request_milli=milli,
        cpu_limit_milli=limit,  # type: ignore[arg-type]
        claims=tuple(kw.pop("claims", ())),  # type: ignore[arg-type]
    )


# --- quality ------------------------------------------------------------------------
@dataclass
class _Tally:
    grants: int = 0
    refused: int = 0
    numa_eligible: int = 0
    numa_local: int = 0
    l3_eligible: int = 0
    l3_local: int = 0
    full_cores: int = 0
    split_share: list[float] = field(default_factory=list)
    l3_headroom: list[int] = field(default_factory=list)
    numa_headroom: list[int] = field(default_factory=list)


class _Geometry:
    def __init__(self, topo: Topology, usable: CPUSet) -> None:
        self.topo = topo
        self.usable = usable
        self.node_size = min(len(topo.cpus_of_node(n) & usable) for n in topo.numa_nodes() if topo.cpus_of_node(n) & usable)
        nodes = [topo.cpus_of_node(n) & usable for n in topo.numa_nodes()]
        self.nodes = [m for m in nodes if m]
        l3s = [topo.cpus_of_l3(i) & usable for i in topo.l3_groups()]
        self.l3s = [m for m in l3s if m] or [usable]
        self.l3_size = min(len(m) for m in self.l3s)
        self.threads = topo.threads_per_core
        self.core_masks = {}
        for c in usable:
            self.core_masks[topo.cpus[c].core] = topo.siblings(c) & usable

    def record(self, tally: _Tally, cpus: CPUSet) -> None:
        n = len(cpus)
        tally.grants += 1
        if n <= self.node_size:
            tally.numa_eligible += 1
            tally.numa_local += len(self.topo.nodes_of(cpus)) == 1
        if n <= self.l3_size:
            tally.l3_eligible += 1
            tally.l3_local += any(cpus <= m for m in self.l3s)
        cores = {self.topo.cpus[c].core for c in cpus}
        tally.full_cores += len(cores) == -(-n // self.threads)

    def sample(self, tally: _Tally, free: CPUSet) -> None:
        split = 0
        clean = CPUSet()
        for core in self.core_masks.values():
            f = core & free
            if f and f != core:
                split += len(f)
            elif f == core:
                clean |= core
        tally.split_share.append(split / len(free) if free else 0.0)
        tally.l3_headroom.append(max(len(clean & m) for m in self.l3s))
        tally.numa_headroom.append(max(len(clean & m) for m in self.nodes))


def _churn(topo: Topology, steps: int, seed: int) -> tuple[_Tally, GrantSequence]:
    """Our policy under a churn of exclusive containers; returns its tally and the same
    requests as a kubelet grant sequence (a take per add, a release per remove)."""
    rng = random.Random(seed)
    policy = Policy(topo, PolicyConfig(reserved_cpu_count=2))
    usable = policy.available_cpus - policy.reserved_cpus - policy.isolated_cpus
    geo = _Geometry(topo, usable)
    ours = _Tally()
    ops: list[dict[str, Any]] = []
    ours_held: dict[str, int] = {}
    target = 0.75 * len(usable)
    live: list[str] = []
    for step in range(steps):
        if live and (sum(ours_held.values()) >= target or rng.random() < 0.3):
            cid = live.pop(rng.randrange(len(live)))
            policy.remove(cid)
            ours_held.pop(cid, None)
            ops.append({"release": cid})
        else:
            cid = f"c{step}"
            n = rng.choice(SIZES)
            live.append(cid)
            ops.append({"take": cid, "count": n})
            try:
                got = policy.add(_req(cid, QoSClass.GUARANTEED, n * 1000))[cid].cpus
                ours_held[cid] = n
                geo.record(ours, got)
            except PolicyError:
                ours.refused += 1
        if step % 50 == 49:
            geo.sample(ours, policy.stats().total.free & usable)
            ops.append({"sample": True})
    return ours, GrantSequence(f"{len(topo.cpus)} CPUs", kubelet_view(topo), usable, tuple(ops))


def _kubelet_tally(topo: Topology, seq: GrantSequence, grants: list[Grant]) -> _Tally:
    """The placement figures of the kubelet's answers to a churn's sequence."""
    geo = _Geometry(topo, seq.available)
    tally = _Tally()
    free = seq.available
    held: dict[str, CPUSet] = {}
    answers = iter(grants)
    for op in seq.ops:
        if "sample" in op:
            geo.sample(tally, free)
        elif "release" in op:
            free |= held.pop(op["release"], CPUSet())
        else:
            g = next(answers)
            if g.error:
                tally.refused += 1
                continue
            got = CPUSet(g.cpus)
            free -= got
            held[g.id] = got
            geo.record(tally, got)
    return tally


def _quality(quick: bool) -> list[Result]:
    out: list[Result] = []
    steps = 600 if quick else 3000
    binary = harness_binary()
    for name, topo in _machines():
        ours, seq = _churn(topo, steps, seed=7)
        port = replay_python(seq)
        kube = _kubelet_tally(topo, seq, port)
        if binary is not None:
            go = replay_go(binary, [seq], repeat=1)[0]
            same = sum(a.cpus == b.cpus and bool(a.error) == bool(b.error) for a, b in zip(port, go, strict=True))
            out.append(Result(f"{name}: Python port's grants equal to the kubelet's Go code", same, "grants",
                              f"all {len(go)}", same == len(go)))
            kube = _kubelet_tally(topo, seq, go)

        def pct(a: int, b: int) -> float:
            return 100.0 * a / b if b else 100.0

        for label, get in (
            ("grants inside one NUMA node", lambda t: pct(t.numa_local, t.numa_eligible)),
            ("grants inside one L3", lambda t: pct(t.l3_local, t.l3_eligible)),
            ("grants on full cores", lambda t: pct(t.full_cores, t.grants)),
            ("free CPUs on split cores (fragmentation)", lambda t: 100 * statistics.fmean(t.split_share or [0])),
        ):
            a, b = get(ours), get(kube)
            better = a >= b if "fragmentation" not in label else a <= b
            out.append(Result(f"{name}: {label}", a, "%", f"vs kubelet {b:.1f} %", better, f"kubelet {b:.1f} %"))
        for level, ours_h, kube_h in (
            ("NUMA node", ours.numa_headroom, kube.numa_headroom),
            ("L3", ours.l3_headroom, kube.l3_headroom),
        ):
            a, b = statistics.fmean(ours_h or [0]), statistics.fmean(kube_h or [0])
            out.append(Result(f"{name}: largest full-core grant one {level} can still take (mean)", a, "CPUs",
                              note=f"kubelet {b:.1f}"))
        out.append(Result(f"{name}: refused requests", ours.refused, "requests", f"vs kubelet {kube.refused}",
                          ours.refused <= kube.refused + max(2, kube.refused // 10), f"kubelet {kube.refused}"))
    return out


# --- speed --------------------------------------------------------------------------
def _populate(policy: Policy, rng: random.Random, scale: int = 1) -> list[ContainerRequest]:
    """500 containers per ``scale`` (a 256-CPU machine's worth)."""
    reqs: list[ContainerRequest] = []
    for i in range(10 * scale):
        cpus = policy.pick(2, policy.available_cpus)
        policy.claim(f"claim{i}", cpus)
        reqs.append(_req(f"claimed{i}", QoSClass.GUARANTEED, 2000, claims=(f"claim{i}",)))
    for i in range(70 * scale):
        reqs.append(_req(f"excl{i}", QoSClass.GUARANTEED, rng.choice([1, 1, 2, 2, 2, 4]) * 1000))
    for i in range(20 * scale):
        reqs.append(_mixed(_req(f"mixed{i}", QoSClass.GUARANTEED, 1500)))
    for i in range(150 * scale):
        reqs.append(_req(f"be{i}", QoSClass.BEST_EFFORT, 0))
    for i in range(250 * scale):
        reqs.append(_req(f"bu{i}", QoSClass.BURSTABLE, rng.choice([50, 100, 100, 200]),
                         limit=rng.choice([None, 1000, 4000])))
    for r in reqs:
        policy.add(r)
    return reqs


def _mixed(r: ContainerRequest) -> ContainerRequest:
    return replace(r, annotations={"prefer-shared-cpus.resource-policy.nri.io": "false"})


def _speed_on(name: str, topo: Topology, quick: bool, scale: int = 1) -> list[Result]:
    rng = random.Random(11)
    policy = Policy(topo, PolicyConfig(reserved_cpu_count=2))
    reqs = _populate(policy, rng, scale)
    assert len(policy.grants()) == 500 * scale, len(policy.grants())
    rounds = 150 if quick else 1500
    times: dict[str, list[float]] = {"remove": [], "add": [], "update": [], "claim": [], "release": [], "pick": []}
    cpu: list[float] = []

    def timed(kind: str, fn: Callable[..., object], *args: object) -> object:
        c0 = time.thread_time()
        t0 = time.perf_counter()
        r = fn(*args)
        times[kind].append(time.perf_counter() - t0)
        cpu.append(time.thread_time() - c0)
        return r

    by_id = {r.id: r for r in reqs}
    movable = [r.id for r in reqs if not r.claims]
    kubelet: list[float] = []  # the peer: the Python port of the kubelet's choice, on the same free CPUs
    takes: list[GrantSequence] = []  # the same choices, for the kubelet's own Go code
    view = kubelet_view(topo)
    for i in range(rounds):
        cid = movable[rng.randrange(len(movable))]
        r = by_id[cid]
        timed("remove", policy.remove, cid)
        if r.qos is QoSClass.GUARANTEED and not r.annotations and r.cpu_request_milli % 1000 == 0:
            free = policy.shared_cpus()
            count = r.cpu_request_milli // 1000
            t0 = time.perf_counter()
            take_by_topology_numa_packed(view, free, count)
            kubelet.append(time.perf_counter() - t0)
            takes.append(GrantSequence(f"take{i}", view, free, ({"take": cid, "count": count},)))
        timed("add", policy.add, r)
        if r.qos is QoSClass.GUARANTEED and not r.annotations:
            bigger = _req(cid, QoSClass.GUARANTEED, r.cpu_request_milli + 1000)
            try:
                timed("update", policy.update, bigger)
                timed("update", policy.update, r)
            except PolicyError:
                pass
        if i % 3 == 0:
            try:
                cpus = timed("pick", policy.pick, 2, topo.online)
                assert isinstance(cpus, CPUSet)
                timed("claim", policy.claim, "bench", cpus)
                timed("release", policy.release, "bench")
            except PolicyError:
                pass
    everything = [t for ts in times.values() for t in ts]
    us = 1e6
    out = [
        Result(f"{name}, {500 * scale} containers: median of all operations", statistics.median(everything) * us, "us",
               "<= 200 us", statistics.median(everything) * us <= 200),
        Result(f"{name}: p99 of all operations (wall clock)", percentile(everything, 99) * us, "us",
               note="includes preemption by other processes on a shared machine"),
        Result(f"{name}: p99 of all operations (CPU time)", percentile(cpu, 99) * us, "us"),
    ]
    peer = statistics.median(kubelet) * us
    out.append(Result(f"{name}: Python port of takeByTopologyNUMAPacked, median (peer, same run)", peer, "us",
                      note=f"{len(kubelet)} calls"))
    for kind in ("add", "update"):
        mine = statistics.median(times[kind]) * us
        ratio = mine / peer
        out.append(Result(f"{name}: {kind} median / Python port of takeByTopologyNUMAPacked", ratio, "x",
                          note=f"{mine:.0f} us vs port {peer:.0f} us"))
    out += _against_go(name, takes, times)
    # Issue 15 item 1: an exclusive add against a shared one (same run, same node) and the peer.
    adds = _adds_by_kind(policy, reqs, rng, rounds)
    excl, shared = statistics.median(adds["exclusive"]) * us, statistics.median(adds["shared"]) * us
    out.append(Result(f"{name}: exclusive add median / shared add median", excl / shared, "x",
                      note=f"{excl:.1f} us vs {shared:.1f} us ({len(adds['exclusive'])} calls each); "
                      f"vs kubelet takeByTopology {excl / peer:.3f}x"))
    for kind, ts in times.items():
        if ts:
            out.append(Result(f"{name}: {kind} median", statistics.median(ts) * us, "us", note=f"{len(ts)} calls, "
                              f"p99 {percentile(ts, 99) * us:.0f} us"))
    return out


def _against_go(name: str, takes: list[GrantSequence], times: dict[str, list[float]]) -> list[Result]:
    """Our add and update against the kubelet's own Go ``takeByTopologyNUMAPacked`` on the same
    free CPUs (fastest of 5 calls each), when the harness is built (``TOPODRA_KUBELET_HARNESS``)."""
    binary = harness_binary()
    if binary is None or not takes:
        return []
    go_us = statistics.median(g[0].ns for g in replay_go(binary, takes, repeat=5)) / 1000
    out = [Result(f"{name}: kubelet Go takeByTopologyNUMAPacked median (peer)", go_us, "us",
                  note=f"{len(takes)} calls, each the fastest of 5")]
    for kind in ("add", "update"):
        mine = statistics.median(times[kind]) * 1e6
        out.append(Result(f"{name}: {kind} median / kubelet Go takeByTopologyNUMAPacked", mine / go_us, "x",
                          note=f"{mine:.0f} us vs {go_us:.1f} us"))
    return out


def _adds_by_kind(policy: Policy, reqs: list[ContainerRequest], rng: random.Random, rounds: int) -> dict[str, list[float]]:
    """Remove and add again, timing the add, an exclusive container and a shared one in turn
    (nothing else runs between the remove and the add, so neither finds the caches cold)."""
    kinds: dict[str, list[ContainerRequest]] = {"exclusive": [], "shared": []}
    for r in reqs:
        g = policy.grant(r.id)
        if g is not None and g.kind in (GrantKind.EXCLUSIVE, GrantKind.SHARED):
            kinds[g.kind.value].append(r)
    times: dict[str, list[float]] = {"exclusive": [], "shared": []}
    for _ in range(rounds):
        for kind, pool in kinds.items():
            r = pool[rng.randrange(len(pool))]
            policy.remove(r.id)
            t0 = time.perf_counter()
            policy.add(r)
            times[kind].append(time.perf_counter() - t0)
    return times


def _speed(quick: bool) -> list[Result]:
    out = _speed_on("synthetic 256 CPUs", synthetic_topology("2s1d2n2l16c2t"), quick)
    out += _speed_on("synthetic 1024 CPUs", synthetic_topology("2s1d4n4l16c2t"), quick, scale=4)
    for name, topo in _machines():
        if name == "256ia64-64n2s2c":
            out += _speed_on(f"{name} (193 pools)", topo, quick)
    return out


def _hotplug(quick: bool) -> list[Result]:
    """``Policy.follow`` (8 CPUs offline, then back) on the 500-container node, with the peer
    measured in the same run: ``reconfigure`` with the same configuration (a full rebuild too)."""
    from testkit.sysfs_writer import with_offline

    topo = synthetic_topology("2s1d2n2l16c2t")
    policy = Policy(topo, PolicyConfig(reserved_cpu_count=2))
    _populate(policy, random.Random(11))
    excl = [g.exclusive for g in policy.grants().values() if g.exclusive]
    gone = CPUSet.from_mask(excl[0] | excl[1]) | CPUSet(sorted(topo.online)[-4:])  # exclusive CPUs and free ones
    down = with_offline(topo, gone)
    rounds = 5 if quick else 30
    follow: list[float] = []
    peer: list[float] = []
    for _ in range(rounds):
        for target in (down, topo):
            t0 = time.perf_counter()
            policy.follow(target)
            follow.append(time.perf_counter() - t0)
        t0 = time.perf_counter()
        policy.reconfigure(policy.config)
        peer.append(time.perf_counter() - t0)
    ms = 1e3
    mine, theirs = statistics.median(follow) * ms, statistics.median(peer) * ms
    return [
        Result("synthetic 256 CPUs, 500 containers: follow a hotplug (median)", mine, "ms",
               note=f"{len(gone)} CPUs offline or back; {len(follow)} calls"),
        Result("follow / reconfigure (peer, same run)", mine / theirs, "x", note=f"reconfigure {theirs:.1f} ms"),
    ]


def run(quick: bool) -> list[Result]:
    return _quality(quick) + _speed(quick) + _hotplug(quick)
