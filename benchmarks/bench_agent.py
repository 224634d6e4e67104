"""The whole agent: NRI CreateContainer latency on a 256-CPU node up to 500 containers, and RSS.

The agent runs as its own process (``python -m topodra agent``) against the
embedded runtime, which times each CreateContainer from the request frame to
the decoded reply (the agent's NRI stub, the policy, the protobuf codec and
the mux/ttrpc round trip over a unix socket). The mix: one Guaranteed
2-CPU container (exclusive) per ten, the rest Burstable or BestEffort on the
shared CPUs, so every exclusive grant answers with updates for hundreds of
shared containers. RSS is read from /proc after the 500th container.
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

from benchmarks.common import Result, median, percentile
from topodra.nri.types import Container, ContainerState, LinuxResources, Pod
from topodra.playground.world import Playground
from topodra.topology import synthetic_topology

MACHINE = "2s1d2n2l16c2t"  # 256 CPUs
GOAL_P99_MS = 2.0


def _resources(i: int) -> tuple[str, LinuxResources]:
    if i % 10 == 0:
        return "", LinuxResources(cpu_shares=2048, cpu_quota=200_000, cpu_period=100_000, memory_limit=256 << 20)
    if i % 3 == 0:
        return "besteffort/", LinuxResources(cpu_shares=2)
    return "burstable/", LinuxResources(cpu_shares=256, memory_limit=128 << 20)


async def _measure(count: int) -> tuple[list[float], int, int]:
    topo = synthetic_topology(MACHINE)
    latencies: list[float] = []
    async with Playground(topology=topo, agent_process=f"synthetic:{MACHINE}") as pg:
        assert pg.runtime is not None
        assert pg.process is not None
        for i in range(count):
            qos_dir, res = _resources(i)
            pod = Pod(id=f"s{i}", name=f"pod{i}", uid=f"uid{i}", namespace="bench", cgroup_parent=f"/kubepods/{qos_dir}poduid{i}")
            assert (await pg.runtime.run_pod_sandbox(pod)).ok
            ctr = Container(
                id=f"c{i}", pod_sandbox_id=pod.id, name="app", state=ContainerState.CREATED, resources=res,
                cgroups_path=f"/kubepods/{qos_dir}poduid{i}/c{i}",
            )
            t0 = time.perf_counter()
            result = await pg.runtime.create_container(ctr)
            latencies.append(time.perf_counter() - t0)
            if not result.ok:
                raise RuntimeError(f"container {i}: {result.error}")
        rss = _rss_kib(pg.process.pid)
        updates = sum(1 for line in pg.runtime.log if "update" in line.lower())
    return latencies, rss, updates


def _rss_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return 0


def run(quick: bool) -> list[Result]:
    count = 150 if quick else 500
    lat, rss, _ = asyncio.run(_measure(count))
    ms = [x * 1000 for x in lat]
    tail = ms[len(ms) // 2 :]  # the second half: the node is already busy
    exclusive = [ms[i] for i in range(0, len(ms), 10)]
    return [
        Result("create_container_median", median(ms), "ms", note=f"{count} containers, 256 CPUs"),
        Result("create_container_p99", percentile(ms, 99), "ms", goal=f"<= {GOAL_P99_MS} ms", met=percentile(ms, 99) <= GOAL_P99_MS),
        Result("create_container_p99_busy_half", percentile(tail, 99), "ms"),
        Result("create_exclusive_median", median(exclusive), "ms", note="answers with updates of every shared container"),
        Result("agent_rss", rss / 1024, "MiB", note=f"after {count} containers"),
    ]
