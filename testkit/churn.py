"""A randomized churn run against the real agent process: does the node stay consistent?

Claim pods, Guaranteed pods (exclusive CPUs) and shared pods are created and
deleted by a few concurrent workers, and the agent process is restarted now
and then, all through the playground (embedded runtime with containerd's start
window, kubelet over gRPC, the simulator's allocator as the scheduler over the
agent's own ResourceSlices). At the end every container's applied cpuset (the
runtime's task, i.e. its cgroup) must equal the agent's record, and no CPU may
be held twice. Used by ``tests/agent/test_churn.py`` (bounded) and
``python -m benchmarks sync`` (the soak).

Node CPU accounting (``gates``, ``mix="node-cpu"``: shared pods that request more): every few
operations the workers pause and the node's shared CPUs (online, less reserved, claimed and
exclusive CPUs, as the agent holds them) are set against the CPU requests of the shared pods
running on them. With ``DRANodeAllocatableResources`` the scheduler counts claimed CPUs against
the node's cpu and the requests never exceed the shared CPUs; without it they do (``python -m
benchmarks nodecpu``).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import random
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Final

from topodra.agent.drift import CgroupReader
from topodra.cpuset import CPUSet
from topodra.embedded.nrilocks import RuntimeHung
from topodra.embedded.runtime import ContainerChange, EmbeddedRuntime
from topodra.embedded.store import KINDS
from topodra.kube.errors import ApiError
from topodra.nri.types import Container
from topodra.playground.world import Playground
from topodra.quantity import cpu_milli
from topodra.topology.synthetic import synthetic_topology

__all__ = ["ChurnReport", "agent_offers", "in_race", "offered_cpus", "run_churn"]

SLICES = KINDS[("resource.k8s.io", "resourceslices")]


@dataclass
class ChurnReport:
    operations: int = 0
    restarts: int = 0
    pods_started: dict[str, int] = field(default_factory=dict)
    unschedulable: int = 0
    prepare_failures: list[str] = field(default_factory=list)
    #: Prepare refusals of claims the agent's own offer no longer covered at their allocation or
    #: before their Prepare (exclusive grants, a moved shared floor): the publication race
    prepare_failures_in_race: list[str] = field(default_factory=list)
    race_allocations: int = 0
    refused: list[str] = field(default_factory=list)
    exclusive_grants: int = 0
    #: exclusive containers moved while running, and how many of those came from a claim allocated
    #: while the slices still offered their CPUs (the publication race)
    exclusive_moved: int = 0
    exclusive_moved_in_race: int = 0
    moves: list[str] = field(default_factory=list)
    withdraw_ms: list[float] = field(default_factory=list)  # exclusive grant -> slices without its CPUs
    slice_writes: int = 0
    lost_updates: int = 0
    repair_ms: list[float] = field(default_factory=list)  # start end -> task holds the assignment
    unrepaired: int = 0  # starts whose task still ran stale at the end
    #: container -> (its cgroup, the agent's record): the kernel runs it elsewhere than decided
    mismatches: dict[str, tuple[str, str]] = field(default_factory=dict)
    #: containers whose runtime record differs from the agent's (delivery "replies" until the next reply)
    runtime_behind: list[str] = field(default_factory=list)
    delivery: str = ""
    deadlocks: list[str] = field(default_factory=list)  # the runtime's NRI locks hung (never, we hope)
    double_held: list[str] = field(default_factory=list)
    seconds: float = 0.0
    #: node CPU accounting: quiet moments sampled, those whose shared pods requested more CPU than
    #: the node's shared CPUs, by how much at most (milli-CPU) and at that moment
    shared_samples: int = 0
    shared_over: int = 0
    shared_over_max_milli: int = 0
    shared_worst: str = ""
    #: Guaranteed pods the scheduler bound whose container the agent then refused (no CPU left)
    guaranteed_refused: int = 0

    @property
    def ok(self) -> bool:
        return not (self.prepare_failures or self.mismatches or self.double_held or self.deadlocks) and (
            self.exclusive_moved == self.exclusive_moved_in_race
        )

    def lines(self) -> list[str]:
        w = sorted(self.withdraw_ms)
        p50 = w[len(w) // 2] if w else 0.0
        p99 = w[min(len(w) - 1, int(len(w) * 0.99))] if w else 0.0
        return [
            f"operations {self.operations} in {self.seconds:.1f} s, agent restarts {self.restarts}",
            "pods started " + ", ".join(f"{k} {v}" for k, v in sorted(self.pods_started.items())),
            f"unschedulable {self.unschedulable}, refused {len(self.refused)}, "
            f"Prepare failures {len(self.prepare_failures)} (+{len(self.prepare_failures_in_race)} of claims "
            f"allocated from an offer the node had withdrawn; {self.race_allocations} allocations saw exclusive CPUs on offer)",
            f"exclusive grants {self.exclusive_grants}: moved {self.exclusive_moved} "
            f"({self.exclusive_moved_in_race} allocated from slices published before the withdrawal)",
            f"withdrawal window (grant -> slices updated) p50 {p50:.1f} ms, p99 {p99:.1f} ms, max {w[-1] if w else 0:.1f} ms",
            f"slice writes {self.slice_writes} ({self.slice_writes / max(1, self.exclusive_grants):.2f} per exclusive grant)",
            f"updates the runtime stored but did not apply (start window) {self.lost_updates}; "
            f"tasks repaired after their start ended in max {max(self.repair_ms, default=0):.1f} ms "
            f"({len(self.repair_ms)} repairs, {self.unrepaired} never)",
            f"delivery {self.delivery or '?'}; runtime deadlocks {len(self.deadlocks)}",
            f"cgroup cpuset != agent record: {len(self.mismatches)}; runtime record behind: "
            f"{len(self.runtime_behind)}; CPUs held twice: {len(self.double_held)}",
            f"shared pods' requests over the node's shared CPUs in {self.shared_over} of {self.shared_samples} samples, "
            f"at most by {self.shared_over_max_milli}m ({self.shared_worst or '-'}); "
            f"Guaranteed pods bound then refused by the agent {self.guaranteed_refused}",
            *(f"  deadlock: {d}" for d in self.deadlocks[:1]),
            *(f"  Prepare failure: {f}" for f in self.prepare_failures[:5]),
            *(f"  mismatch: {c} applied {a}, agent {b}" for c, (a, b) in list(self.mismatches.items())[:5]),
            *(f"  held twice: {d}" for d in self.double_held[:5]),
        ]


#: Shared pods' CPU requests (milli) by mix: ``node-cpu`` asks enough that claims and exclusive
#: grants leave the shared CPUs short when the scheduler does not count the claims.
_SHARED_REQUESTS: Final = {"default": (100, 250, 500), "node-cpu": (500, 1000, 1500)}


def _pod(name: str, kind: str, rng: random.Random, mix: str = "default") -> dict[str, Any]:
    spec: dict[str, Any] = {"containers": [{"name": "c", "image": "x"}]}
    c = spec["containers"][0]
    if kind == "guaranteed":
        n = str(rng.choice([1, 1, 2]))
        c["resources"] = {"requests": {"cpu": n, "memory": "64Mi"}, "limits": {"cpu": n, "memory": "64Mi"}}
    elif kind == "shared":
        if rng.random() < 0.5 or mix == "node-cpu":
            c["resources"] = {"requests": {"cpu": f"{rng.choice(_SHARED_REQUESTS[mix])}m", "memory": "32Mi"}}
    else:  # claim
        spec["resourceClaims"] = [{"name": "cpus", "resourceClaimTemplateName": f"cpus-{rng.choice([1, 1, 2, 3])}"}]
        c["resources"] = {"claims": [{"name": "cpus"}]}
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "labels": {"churn": kind}}, "spec": spec}


def _templates() -> list[dict[str, Any]]:
    return [
        {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "ResourceClaimTemplate",
            "metadata": {"name": f"cpus-{n}"},
            "spec": {"spec": {"devices": {"requests": [
                {"name": "cpu", "exactly": {"deviceClassName": "native.cpu", "count": n}}
            ]}}},
        }
        for n in (1, 2, 3)
    ]


#: The agent's log times are in milliseconds.
_LOG_TICK = 0.001


def agent_offers(log: Path) -> list[tuple[float, CPUSet]]:
    """(wall time, offer) of every offer the agent computed, from its JSON log (every process's,
    restarts included): the node's own view, before the publish delay coalesces it into writes."""
    out: list[tuple[float, CPUSet]] = []
    with contextlib.suppress(FileNotFoundError), log.open() as lines:
        for line in lines:
            if '"slices offer ' not in line:
                continue
            try:
                entry = json.loads(line)
                stamp = datetime.strptime(entry["ts"], "%Y-%m-%dT%H:%M:%S.%fZ").replace(tzinfo=UTC)
                text = entry["msg"].removeprefix("slices offer ").split(" (", 1)[0]
                out.append((stamp.timestamp(), CPUSet.parse(text) if text.strip("- ") else CPUSet()))
            except (ValueError, KeyError):
                continue  # a line cut by a killed process
    return out


def in_race(cpus: CPUSet, allocated: float, failed: float, agent_offers: list[tuple[float, CPUSet]]) -> bool:
    """Whether a claim of ``cpus`` allocated at ``allocated`` and refused at ``failed`` met the
    publication race: the agent's offer in force at the allocation (the last one computed before
    it) or any later one up to the failure left out one of its CPUs."""
    window = [o for t, o in agent_offers if t <= allocated + _LOG_TICK][-1:]
    window += [o for t, o in agent_offers if allocated + _LOG_TICK < t <= failed + _LOG_TICK]
    return any(not cpus <= offered for offered in window)


def offered_cpus(pg: Playground) -> CPUSet:
    cpus: set[int] = set()
    for s in pg.store.list(SLICES)["items"]:
        for d in s["spec"].get("devices") or []:
            cpu = (d.get("attributes") or {}).get("cpu", {}).get("int")
            if cpu is not None:
                cpus.add(int(cpu))
    return CPUSet(cpus)


class _Churn:
    def __init__(self, pg: Playground, rng: random.Random, report: ChurnReport, mix: str = "default") -> None:
        self.pg = pg
        self.rng = rng
        self.report = report
        self.mix = mix
        self.live: dict[str, str] = {}  # pod name -> kind
        self.exclusive: dict[str, CPUSet] = {}  # container id -> its exclusive CPUs while it runs
        self.race_allocations: set[str] = set()  # claim pods allocated while slices offered exclusive CPUs
        self.counter = 0
        self.inflight: dict[str, CPUSet] = {}  # claim pods being started -> CPUs allocated to them
        self.allocated_at: dict[str, float] = {}
        #: Prepare failures (line, allocated CPUs, allocated at, failed at), classified at the end
        self.failures: list[tuple[str, CPUSet | None, float | None, float]] = []
        self._schedule = pg.scheduler.schedule
        pg.scheduler.schedule = self.schedule  # type: ignore[method-assign]
        self.offers: list[tuple[float, CPUSet]] = []  # (wall time, offered CPUs) after each slice write
        self.idle = asyncio.Condition()
        self.busy = 0  # operations in flight
        self.pausing = False  # a restart waits for them and holds new ones back
        self.restarted: list[tuple[float, float]] = []  # (wall time begun, ended) of each agent restart

    def on_change(self, change: ContainerChange) -> None:
        if change.source == "adjustment" and change.cpus is not None and self._kind_of(change.container_id) == "guaranteed":
            self.exclusive[change.container_id] = change.cpus  # granted: from now on these must not be offered
            return
        before = self.exclusive.get(change.container_id)
        if before is None or change.cpus is None or change.source in ("stop", "start"):
            return
        if change.cpus != before:
            # In the race: a claim being prepared was allocated these CPUs, from slices that still
            # offered them or before they were granted at all.
            racing = sorted(n for n, cpus in self.inflight.items() if not cpus.isdisjoint(before))
            self.report.moves.append(
                f"{change.container_id}: {before} -> {change.cpus} ({change.source}, restarts {self.report.restarts}, "
                f"claims allocated these CPUs {racing})"
            )
            self.report.exclusive_moved += 1
            if racing:
                self.report.exclusive_moved_in_race += 1
            self.exclusive[change.container_id] = change.cpus

    def _kind_of(self, container_id: str) -> str:
        rt = self.pg.runtime
        assert rt is not None
        try:
            return rt.store.pod(rt.store.container(container_id).pod_sandbox_id).labels.get("churn", "")
        except Exception:
            return ""

    def schedule(self, pod: Mapping[str, Any]) -> list[dict[str, Any]]:
        """The scheduler, noting allocations made while the slices still offer exclusive CPUs."""
        name = pod["metadata"]["name"]
        held = CPUSet()
        for cpus in self.exclusive.values():
            held |= cpus
        if (pod.get("spec") or {}).get("resourceClaims") and not offered_cpus(self.pg).isdisjoint(held):
            self.race_allocations.add(name)
            self.report.race_allocations += 1
        out: list[dict[str, Any]] = self._schedule(pod)
        allocated: set[int] = set()
        for claim in out:
            for r in (((claim.get("status") or {}).get("allocation") or {}).get("devices") or {}).get("results") or []:
                if str(r.get("device", "")).startswith("cpu"):
                    allocated.add(int(r["device"][3:]))
        if allocated:
            self.inflight[name] = CPUSet(allocated)
            self.allocated_at[name] = time.time()
        return out

    def classify_failures(self, agent_offers: list[tuple[float, CPUSet]]) -> None:
        """Sort the Prepare failures: in the race when the agent's own offer (``agent_offers``, as
        the agent computed it, before any publish delay) left out one of the claim's CPUs at any
        moment from the allocation to the failure: the scheduler allocated from slices older than
        the node's state, or the node changed before the claim reached it. A failure whose CPUs the
        agent offered all along is a disagreement between the offer and Prepare: a bug."""
        for line, cpus, since, failed in self.failures:
            if cpus is not None and since is not None and in_race(cpus, since, failed, agent_offers):
                self.report.prepare_failures_in_race.append(line)
            else:
                self.report.prepare_failures.append(f"{line} [{self._timeline(cpus, since, failed, agent_offers)}]")

    def _timeline(
        self, cpus: CPUSet | None, since: float | None, failed: float, agent_offers: list[tuple[float, CPUSet]]
    ) -> str:
        """What the agent offered and the slices published of the claim's CPUs around a failure, and
        the agent restarts (times relative to the failure): the evidence for a report."""
        start = failed - 5 if since is None else min(since, failed) - 1
        marks = [f"allocated {since - failed:+.3f}s" if since is not None else "allocation unknown"]
        events = [(t, "offer", o) for t, o in agent_offers] + [(t, "write", o) for t, o in self.offers]
        for t, what, offered in sorted(events, key=lambda e: e[0]):
            if start <= t <= failed + 2:
                shown = (cpus & offered) if cpus is not None else offered
                marks.append(f"{what} {t - failed:+.3f}s has {shown or '-'}")
        marks += [f"restart {a - failed:+.3f}s..{b - failed:+.3f}s" for a, b in self.restarted if b >= start]
        return "; ".join(marks)

    def _containers_of(self, pod_name: str) -> list[str]:
        rt = self.pg.runtime
        assert rt is not None
        sandboxes = {p.id for p in rt.store.pods() if p.name == pod_name}
        return [c.id for c in rt.store.containers() if c.pod_sandbox_id in sandboxes]

    async def start_pod(self) -> None:
        kind = self.rng.choices(["claim", "guaranteed", "shared"], weights=[3, 3, 4])[0]
        self.counter += 1
        name = f"{kind[0]}-{self.counter}"
        pod = _pod(name, kind, self.rng, self.mix)
        line = (await self.pg.apply([pod]))[-1]
        cpus, since = self.inflight.get(name), self.allocated_at.get(name)
        self.race_allocations.discard(name)
        self.inflight.pop(name, None)
        self.allocated_at.pop(name, None)
        self.live[name] = kind
        if line.endswith("running"):
            self.report.pods_started[kind] = self.report.pods_started.get(kind, 0) + 1
            if kind == "guaranteed":
                await self._grant(name)
        elif "pending" in line:
            self.report.unschedulable += 1
        elif "prepare claim" in line or "NodePrepareResources" in line:
            self.failures.append((line, cpus, since, time.time()))
        else:
            self.report.refused.append(line)
            if kind == "guaranteed" and "no CPU left" in line:
                self.report.guaranteed_refused += 1

    async def _grant(self, name: str) -> None:
        rt = self.pg.runtime
        assert rt is not None
        for cid in self._containers_of(name):
            cpus = self.exclusive.get(cid)
            if cpus is None:
                continue
            self.report.exclusive_grants += 1
            created = rt.store.container(cid).created_at / 1e9
            deadline = time.monotonic() + 5
            while not offered_cpus(self.pg).isdisjoint(cpus) and time.monotonic() < deadline:
                if self.exclusive.get(cid) != cpus:
                    return  # already moved (a claim took them first)
                await asyncio.sleep(0.002)
            # When did the slices stop offering them? The first slice write after the grant that did.
            done = next((t for t, offered in self.offers if t >= created and offered.isdisjoint(cpus)), None)
            if done is None:  # withdrawn by a write before the container was even created (a floor move)
                done = created
            self.report.withdraw_ms.append((done - created) * 1000)

    async def watch_offers(self) -> None:
        watch = self.pg.store.watch(SLICES)
        async for _ in watch:
            self.offers.append((time.time(), offered_cpus(self.pg)))

    async def delete_pod(self) -> None:
        if not self.live:
            return
        name = self.rng.choice(sorted(self.live))
        kind = self.live.pop(name)
        for cid in self._containers_of(name):
            self.exclusive.pop(cid, None)
        await self.pg.delete_pod(name)
        del kind

    async def restart(self) -> None:
        async with self.idle:
            self.pausing = True
            await self.idle.wait_for(lambda: self.busy == 0)
        begun = time.time()
        try:
            await self.pg.restart_agent()
            self.report.restarts += 1
            self.restarted.append((begun, time.time()))
        finally:
            async with self.idle:
                self.pausing = False
                self.idle.notify_all()

    async def sample(self) -> None:
        """With the workers paused: the node's shared CPUs against its shared pods' requests."""
        async with self.idle:
            self.pausing = True
            await self.idle.wait_for(lambda: self.busy == 0)
        try:
            await self.pg.settle(timeout=15)
            shared, requested = await _shared_pool(self.pg)
            report = self.report
            report.shared_samples += 1
            over = requested - 1000 * len(shared)
            if over > 0:
                report.shared_over += 1
                if over > report.shared_over_max_milli:
                    report.shared_over_max_milli = over
                    report.shared_worst = f"{requested}m requested on {len(shared)} shared CPUs"
        finally:
            async with self.idle:
                self.pausing = False
                self.idle.notify_all()

    async def worker(self, ops: int, restart_at: set[int], sample_every: int = 0) -> None:
        for _ in range(ops):
            if self.pg.runtime is not None and self.pg.runtime.deadlocks:
                return  # the runtime hung: nothing it does would return any more
            self.report.operations += 1
            if self.report.operations in restart_at:
                await self.restart()
                continue
            if sample_every and self.report.operations % sample_every == 0:
                await self.sample()
            async with self.idle:
                await self.idle.wait_for(lambda: not self.pausing)
                self.busy += 1
            try:
                if len(self.live) < 4 or (self.rng.random() < 0.55 and len(self.live) < 14):
                    await self.start_pod()
                else:
                    await self.delete_pod()
            except RuntimeHung:
                return  # reported from the runtime's deadlocks
            finally:
                async with self.idle:
                    self.busy -= 1
                    self.idle.notify_all()


async def _shared_pool(pg: Playground) -> tuple[CPUSet, int]:
    """The node's shared CPUs (online, less reserved, claimed and exclusively held, as the agent
    holds them) and the CPU its running shared pods request (milli)."""
    rt = pg.runtime
    assert rt is not None
    state = await pg.agent_state()
    taken = CPUSet.parse(state["reserved"]) if state["reserved"] else CPUSet()
    for cpus in state["claims"].values():
        taken |= CPUSet.parse(cpus)
    kinds = {p.id: p.labels.get("churn", "") for p in rt.store.pods()}
    names = {p.id: p.name for p in rt.store.pods()}
    requested = 0
    for c in rt.store.containers():
        kind, record = kinds.get(c.pod_sandbox_id), state["containers"].get(c.id)
        if record is None or rt.store.applied(c.id) is None:
            continue
        if kind == "guaranteed":
            taken |= CPUSet.parse(record["cpus"])
        elif kind == "shared":
            requested += _cpu_request(pg, names[c.pod_sandbox_id])
    return pg.topology.online - taken, requested


def _cpu_request(pg: Playground, pod: str) -> int:
    """The pod's CPU request in milli-CPU (0 when it has none or is gone)."""
    try:
        obj = pg.store.get(KINDS[("", "pods")], "default", pod)
    except ApiError:
        return 0
    cpu = ((obj["spec"]["containers"][0].get("resources") or {}).get("requests") or {}).get("cpu")
    return cpu_milli(cpu) if cpu is not None else 0


def _kernel_cpus(rt: EmbeddedRuntime, container: Container) -> CPUSet | None:
    """What the container's cgroup holds (the kernel's view), or the runtime's record of its task
    when the runtime writes no cgroup files."""
    if rt.cgroup_root is None:
        applied = rt.store.applied(container.id)
        return applied[0] if applied is not None else None
    got = CgroupReader(rt.cgroup_root).read(container.id, container.cgroups_path)
    return got.cpus if got is not None else None


async def _check(pg: Playground, report: ChurnReport) -> None:
    rt = pg.runtime
    assert rt is not None
    await pg.settle(timeout=15)
    state = await pg.agent_state()
    report.delivery = state.get("delivery", {}).get("mode", "")
    report.deadlocks = rt.deadlocks
    record: Mapping[str, Mapping[str, str]] = state["containers"]
    claims = {uid: CPUSet.parse(c) for uid, c in state["claims"].items()}
    for c in rt.store.containers():
        applied = rt.store.applied(c.id)
        if applied is None or c.id not in record:
            continue
        want = record[c.id]["cpus"]
        kernel = _kernel_cpus(rt, c)
        got = str(kernel) if kernel is not None else "(unset)"
        if got != want:
            report.mismatches[c.id] = (got, want)
        if str(applied[0]) != want:  # the runtime's own record, brought in step by the next reply
            report.runtime_behind.append(c.id)
    holders: dict[int, str] = {}
    for uid, cpus in claims.items():
        for cpu in cpus:
            if cpu in holders:
                report.double_held.append(f"CPU {cpu}: claim {uid} and {holders[cpu]}")
            holders[cpu] = f"claim {uid}"
    pods = {p.id: p for p in rt.store.pods()}
    for c in rt.store.containers():
        pod = pods.get(c.pod_sandbox_id)
        applied = rt.store.applied(c.id)
        if pod is None or applied is None or applied[0] is None or pod.labels.get("churn") != "guaranteed":
            continue
        for cpu in applied[0]:
            if cpu in holders:
                report.double_held.append(f"CPU {cpu}: container {c.id} and {holders[cpu]}")
            holders[cpu] = f"container {c.id}"
    report.lost_updates = len(rt.lost_updates)
    report.repair_ms = [d * 1000 for d in rt.repair_delays]
    # A start that missed its update is repaired once the kernel runs the container as recorded.
    report.unrepaired = sum(1 for cid in rt.unrepaired if cid in report.mismatches)


async def run_churn(
    operations: int = 200,
    *,
    seed: int = 1,
    workers: int = 3,
    restarts: int = 3,
    topology: str = "synthetic:1s1d1n2l4c2t",
    start_delay: float = 0.003,
    nri_version: str = "v0.12.2",
    delivery: str = "auto",
    gates: Mapping[str, bool] | None = None,
    mix: str = "default",
    sample_every: int = 0,
) -> ChurnReport:
    """Run ``operations`` random operations (about ``restarts`` of them agent restarts) with the
    API server's and scheduler's feature ``gates``; ``sample_every`` operations the node's shared
    CPUs are set against its shared pods' requests."""
    report = ChurnReport()
    rng = random.Random(seed)
    topo = synthetic_topology(topology.removeprefix("synthetic:"))
    churn: _Churn | None = None

    def changed(change: ContainerChange) -> None:
        if churn is not None:
            churn.on_change(change)

    t0 = time.monotonic()
    async with Playground(
        topology=topo,
        agent_process=topology,
        cgroups=True,
        on_change=changed,
        nri_version=nri_version,
        runtime_options={"start_delay": start_delay},
        gates=gates,
        # the offers' history is read back from the log
        agent_overrides={"logFormat": "json", "nri": {"delivery": delivery}},
    ) as pg:
        await pg.apply(_templates())
        churn = _Churn(pg, rng, report, mix)
        watcher = asyncio.ensure_future(churn.watch_offers())
        writes_before = sum(1 for m, p in pg.api.requests if "resourceslices" in p and m in ("POST", "PUT", "PATCH", "DELETE"))
        shares = [operations // workers + (1 if i < operations % workers else 0) for i in range(workers)]
        restart_at = {(k + 1) * operations // (restarts + 1) for k in range(restarts)}
        await asyncio.gather(*(churn.worker(n, restart_at, sample_every) for n in shares))
        report.slice_writes = sum(
            1 for m, p in pg.api.requests if "resourceslices" in p and m in ("POST", "PUT", "PATCH", "DELETE")
        ) - writes_before
        await _check(pg, report)
        await asyncio.sleep(0.2)  # let the last republications land before classifying
        assert pg.workdir is not None
        churn.classify_failures(agent_offers(pg.workdir / "agent.log"))
        watcher.cancel()
    report.seconds = time.monotonic() - t0
    return report
