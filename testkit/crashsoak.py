"""Crash safety at random: kill the agent at random moments of random work, restart, check.

Each cycle starts the agent as a child process, either with a crash point armed
(``TOPODRA_CRASH_AT=<point>@<n>``: any of ``topodra.faults.POINTS``, including
``checkpoint.torn``, a checkpoint slot half written) or to be SIGKILLed a few
milliseconds into a random operation. Operations are drawn at random: pods
started (shared, exclusive, claiming CPUs through DRA), pods deleted
(StopContainer, RemoveContainer, Unprepare), configuration reloads, and the
kubelet's retries of what failed. After every restart, before anything else,
the node must agree with itself:

- the agent's claims, the checkpoint and the CDI specs hold the same claims
  with the same CPUs, and no CPU is in two claims;
- every running container has CPUs; a claiming container runs on exactly its
  claims' CPUs; exclusive containers share no CPU with each other or a claim;
  shared containers run on every other CPU (nothing lost);
- every prepared claim is one the kubelet will still use or release (no leak).

``python -m testkit.crashsoak --cycles 1000`` (or ``scripts/crash-soak``)
runs the soak and prints the count; the test suite runs a short one.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import random
import sys
import time
from collections import Counter
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from testkit.agentfork import ForkingPlayground
from topodra.cpuset import CPUSet
from topodra.dra import cdi
from topodra.dra.checkpoint import load_checkpoint
from topodra.faults import ENV, POINTS
from topodra.playground.kubelet import KubeletError
from topodra.playground.world import Playground, PlaygroundError
from topodra.topology.synthetic import synthetic_topology

__all__ = ["SPEC", "TEMPLATES", "CrashSoak", "SoakFailure", "SoakReport", "main", "run_soak", "soak_pod"]

SPEC = "1s1d1n1l4c2t4e"  # 4 P-cores x 2 threads + 4 E-cores: 12 CPUs, hybrid
MAX_OPS = 6  # operations per cycle before an unplanned SIGKILL
MAX_PODS = 6


class SoakFailure(AssertionError):
    """The node disagreed with itself after a restart; the message says how to replay it."""


def _template(name: str, count: int, cel: str | None) -> dict[str, Any]:
    exactly: dict[str, Any] = {"deviceClassName": "native.cpu", "count": count}
    if cel:
        exactly["selectors"] = [{"cel": {"expression": cel}}]
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaimTemplate",
        "metadata": {"name": name},
        "spec": {"spec": {"devices": {"requests": [{"name": "cpus", "exactly": exactly}]}}},
    }


TEMPLATES = [
    _template("two-pcores", 2, 'device.attributes["native.cpu"].coreType == "P-core"'),
    _template("one-cpu", 1, None),
]


def soak_pod(name: str, resources: dict[str, Any], template: str | None = None) -> dict[str, Any]:
    spec: dict[str, Any] = {"containers": [{"name": "c", "image": "x", "resources": dict(resources)}]}
    if template:
        spec["resourceClaims"] = [{"name": "cpus", "resourceClaimTemplateName": template}]
        spec["containers"][0]["resources"]["claims"] = [{"name": "cpus"}]
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name}, "spec": spec}


_GUARANTEED = {"requests": {"cpu": "1", "memory": "64Mi"}, "limits": {"cpu": "1", "memory": "64Mi"}}
_KINDS: dict[str, Callable[[str], dict[str, Any]]] = {
    "s": lambda n: soak_pod(n, {"requests": {"cpu": "250m"}}),
    "b": lambda n: soak_pod(n, {}),
    "g": lambda n: soak_pod(n, _GUARANTEED),
    "c": lambda n: soak_pod(n, dict(_GUARANTEED), "two-pcores"),
    "d": lambda n: soak_pod(n, dict(_GUARANTEED), "one-cpu"),
}


@dataclass
class SoakReport:
    cycles: int = 0
    kills: Counter[str] = field(default_factory=Counter)
    ops: Counter[str] = field(default_factory=Counter)
    seconds: float = 0.0

    def summary(self) -> str:
        points = ", ".join(f"{k} {v}" for k, v in sorted(self.kills.items()))
        ops = ", ".join(f"{k} {v}" for k, v in sorted(self.ops.items()))
        return (
            f"{self.cycles} crash-restart cycles in {self.seconds:.0f} s, nothing lost or held twice\n"
            f"  kills: {points}\n  operations: {ops}"
        )


class CrashSoak:
    """One node (``Playground`` with the agent as a child process) and a seeded random schedule."""

    def __init__(self, pg: Playground, seed: int) -> None:
        self.pg = pg
        self.seed = seed
        self.rng = random.Random(seed)
        self.report = SoakReport()
        self.trail: list[str] = []  # recent operations, for the failure message
        self.serial = 0
        self.flip = False

    # --- one cycle -------------------------------------------------------------------------------
    async def cycle(self) -> None:
        n = self.report.cycles
        armed = ""
        if self.rng.random() < 0.75:
            armed = f"{self.rng.choice(POINTS)}@{self.rng.randint(1, 3)}"
        self._note(f"cycle {n}: start agent" + (f" with {ENV}={armed}" if armed else " (SIGKILL at random)"))
        await self._start({ENV: armed} if armed else {})
        await self.check()
        await self._recover()
        for _ in range(MAX_OPS if armed else self.rng.randint(1, MAX_OPS)):
            if self._dead():
                break
            last = not armed and _ == 0
            await self._op(kill_during=last or (not armed and self.rng.random() < 0.3))
        if not self._dead():
            await self._kill("sigkill (idle)" if not armed else f"sigkill ({armed} not reached)")
        elif armed:
            self.report.kills[armed.partition("@")[0]] += 1
        self.report.cycles += 1

    def _dead(self) -> bool:
        proc = self.pg.process
        return proc is None or proc.returncode is not None

    async def _start(self, env: dict[str, str]) -> None:
        try:
            await self.pg.restart_agent(env=env)
        except PlaygroundError as err:  # it crashed while starting (e.g. repairing a torn slot): again
            self._note(f"crashed while starting: {str(err).splitlines()[0]}")
            self.report.kills["start"] += 1
            await self.pg.restart_agent()
        # A crash point may also fire during the restart's settle: then start once more, unarmed.
        if self._dead():
            self.report.kills["start"] += 1
            await self.pg.restart_agent()

    async def _kill(self, why: str) -> None:
        proc = self.pg.process
        if proc is not None and proc.returncode is None:
            proc.kill()
            await proc.wait()
            self.report.kills[why.split(" ")[0]] += 1
            self._note(why)

    async def _recover(self) -> None:
        """What the kubelet retries after its plugin came back: unprepares first, then pods."""
        kubelet = self.pg.kubelet
        assert kubelet is not None
        if kubelet.unprepare_pending:
            await self._guard("retry-unprepare", kubelet.retry_unprepare())
        for key in sorted(self.pg.pod_errors):
            if self._dead():
                return
            await self._guard("retry-pod", self.pg.retry_pod(key.split("/", 1)[1]))

    async def _op(self, *, kill_during: bool) -> None:
        running = sorted(run.pod_key.split("/", 1)[1] for run in self.pg.kubelet.pods.values()) if self.pg.kubelet else []
        choices = ["start"] * (3 if len(running) + len(self.pg.pod_errors) < MAX_PODS else 0)
        choices += ["delete"] * (2 if running else 0) + ["reload", "retry"]
        what = self.rng.choice(choices)
        if what == "start":
            kind = self.rng.choice(sorted(_KINDS))
            self.serial += 1
            name = f"{kind}-{self.serial}"
            work: Awaitable[Any] = self.pg.apply([_KINDS[kind](name)])
            label = f"start {name}"
        elif what == "delete":
            name = self.rng.choice(running)
            work = self.pg.delete_pod(name)
            label = f"delete {name}"
        elif what == "reload":
            work = self._reload()
            label = "reload"
        else:
            work = self._recover()
            label = "retry"
        self.report.ops[label.split(" ")[0]] += 1
        if kill_during:
            delay = self.rng.uniform(0, 0.03)
            proc = self.pg.process
            assert proc is not None
            loop = asyncio.get_running_loop()
            fired: list[bool] = []

            def kill() -> None:
                if proc.returncode is None:
                    fired.append(True)
                    proc.kill()

            handle = loop.call_later(delay, kill)
            self._note(f"{label}, SIGKILL after {delay * 1e3:.0f} ms")
            try:
                await self._guard(label, work)
            finally:
                handle.cancel()
            if fired:
                await proc.wait()
                self.report.kills["sigkill"] += 1
        else:
            self._note(label)
            await self._guard(label, work)

    async def _guard(self, label: str, work: Awaitable[Any]) -> None:
        """Run an operation; failures because the agent died are expected, others are not."""
        try:
            await work
        except (KubeletError, PlaygroundError, OSError) as err:
            proc = self.pg.process
            if proc is not None and proc.returncode is None:
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(proc.wait(), 10)
            if not self._dead():
                self._note(f"{label}: failed with the agent alive: {err}")
                raise SoakFailure(self._explain(f"{label} failed while the agent was alive: {err}")) from err
            self._note(f"{label}: interrupted ({str(err).splitlines()[0][:120]})")

    async def _reload(self) -> None:
        """Change the policy in the configuration file; the agent picks it up by itself."""
        workdir = self.pg.workdir
        assert workdir is not None
        path = workdir / "agent.yaml"
        cfg = json.loads(path.read_text())
        self.flip = not self.flip
        cfg.setdefault("policy", {})["colocatePods"] = self.flip
        path.write_text(json.dumps(cfg))

    # --- the invariants ---------------------------------------------------------------------------
    async def check(self) -> None:
        pg = self.pg
        assert pg.workdir is not None
        assert pg.runtime is not None
        assert pg.kubelet is not None
        state = await pg.agent_state()
        claims = {uid: CPUSet.parse(c) for uid, c in state["claims"].items()}
        problems: list[str] = []
        checkpoint = {u: c.cpus for u, c in load_checkpoint(pg.workdir / "state" / "dra-checkpoint.json").items()}
        if checkpoint != claims:
            problems.append(f"checkpoint {checkpoint} != agent {claims}")
        specs = {u: cdi.read_spec_cpus(pg.workdir / "cdi", u) for u in cdi.spec_uids(pg.workdir / "cdi")}
        if specs != claims:
            problems.append(f"CDI specs {specs} != agent {claims}")
        claimed = CPUSet()
        for uid, cpus in sorted(claims.items()):
            if cpus & claimed:
                problems.append(f"claim {uid} shares CPUs {cpus & claimed} with another claim")
            claimed |= cpus
        # Every prepared claim is one the kubelet will use or release.
        known: set[str] = set()
        for run in [*pg.kubelet.pods.values(), *pg.kubelet.unprepare_pending]:
            known |= {uid for _, _, uid, _ in run.claims}
        for key in pg.pod_errors:
            known |= self._claim_uids_of(key)
        for uid in sorted(set(claims) - known):
            problems.append(f"claim {uid} is prepared but no pod will use or release it (leak)")
        pods = {p.id: p.name for p in pg.runtime.store.pods()}
        exclusive = CPUSet()
        shared: dict[str, CPUSet] = {}
        for ctr in pg.runtime.store.containers():
            name = pods.get(ctr.pod_sandbox_id, ctr.pod_sandbox_id)
            cpus = ctr.resources.cpus if ctr.resources is not None and ctr.resources.cpus else CPUSet()
            if not cpus:
                problems.append(f"container of {name} has no cpuset")
                continue
            mine = cdi.parse_claim_env(ctr.env)
            if mine:
                want = CPUSet()
                for uid in mine:
                    if uid not in claims:
                        problems.append(f"{name} runs with claim {uid}, which is not prepared")
                    want |= claims.get(uid, CPUSet())
                if cpus != want:
                    problems.append(f"{name} runs on {cpus}, its claims hold {want}")
            elif name.startswith("g-"):
                if cpus & (exclusive | claimed):
                    problems.append(f"{name} runs on {cpus}, overlapping {cpus & (exclusive | claimed)}")
                exclusive |= cpus
            else:
                shared[name] = cpus
        rest = pg.topology.online - exclusive - claimed
        for name, cpus in sorted(shared.items()):
            if cpus != rest:
                problems.append(f"shared {name} runs on {cpus}, expected every free CPU {rest}")
        if problems:
            raise SoakFailure(self._explain("; ".join(problems)))

    def _claim_uids_of(self, pod_key: str) -> set[str]:
        from topodra.embedded.store import KINDS

        ns, name = pod_key.split("/", 1)
        out = set()
        for c in self.pg.store.list(KINDS[("resource.k8s.io", "resourceclaims")], ns)["items"]:
            for r in (c.get("status") or {}).get("reservedFor") or []:
                if r.get("name") == name:
                    out.add(c["metadata"]["uid"])
        return out

    def _note(self, text: str) -> None:
        self.trail.append(text)
        del self.trail[:-40]

    def _explain(self, what: str) -> str:
        trail = "\n  ".join(self.trail)
        return f"seed {self.seed}, cycle {self.report.cycles}: {what}\nrecent operations:\n  {trail}"


async def run_soak(cycles: int, seed: int, *, progress: Callable[[SoakReport], None] | None = None) -> SoakReport:
    """``cycles`` crash-restart cycles on one node; raises SoakFailure at the first disagreement."""
    topo = synthetic_topology(SPEC)
    t0 = time.perf_counter()
    async with ForkingPlayground(topology=topo, agent_process=f"synthetic:{SPEC}") as pg:
        await pg.apply(TEMPLATES)
        soak = CrashSoak(pg, seed)
        for _ in range(cycles):
            await soak.cycle()
            soak.report.seconds = time.perf_counter() - t0
            if progress is not None:
                progress(soak.report)
        await pg.restart_agent()
        await soak.check()
    soak.report.seconds = time.perf_counter() - t0
    return soak.report


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m testkit.crashsoak", description=__doc__.splitlines()[0])
    ap.add_argument("--cycles", type=int, default=1000, help="crash-restart cycles (default 1000)")
    ap.add_argument("--seed", type=int, default=None, help="random seed (default: time based; printed)")
    args = ap.parse_args(argv)
    seed = args.seed if args.seed is not None else int(time.time())
    print(f"crash soak: {args.cycles} cycles, seed {seed}", flush=True)

    def progress(report: SoakReport) -> None:
        if report.cycles % 50 == 0:
            print(f"  {report.cycles} cycles, {report.seconds:.0f} s", flush=True)

    try:
        report = asyncio.run(run_soak(args.cycles, seed, progress=progress))
    except SoakFailure as err:
        print(f"FAILED: {err}", file=sys.stderr)
        return 1
    print(report.summary())
    return 0


if __name__ == "__main__":
    sys.exit(main())
