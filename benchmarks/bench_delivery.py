"""Release to widen: how soon a shared container runs on the CPUs a released claim gave back.

The whole agent in process with the embedded runtime and kubelet, cgroup files on. Each cycle
claims a CPU (a pod with a claim template), stops the claim's container, then times
NodeUnprepareResources from the kubelet's call until the shared container's cgroup holds the
widened set. Two runtimes, alternated cycle by cycle: NRI v0.12.2 (delivery ``unsolicited``: an
UpdateContainers the runtime applies) and NRI v0.12.0 (containerd 2.3.x; delivery ``replies``:
the agent writes the cgroup itself). The ratio compares the two in the same run.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from typing import Any

from benchmarks.common import Result, median
from topodra.agent.drift import CgroupReader
from topodra.cpuset import CPUSet
from topodra.embedded.store import KINDS
from topodra.playground.runner import resolve_topology
from topodra.playground.world import Playground

_TEMPLATE: dict[str, Any] = {
    "apiVersion": "resource.k8s.io/v1",
    "kind": "ResourceClaimTemplate",
    "metadata": {"name": "one-cpu"},
    "spec": {"spec": {"devices": {"requests": [{"name": "cpu", "exactly": {"deviceClassName": "native.cpu"}}]}}},
}


def _pod(name: str, *, claim: bool) -> dict[str, Any]:
    res: dict[str, Any] = {"requests": {"cpu": "500m", "memory": "64Mi"}}
    spec: dict[str, Any] = {"containers": [{"name": "c", "image": "x", "resources": res}]}
    if claim:
        res["claims"] = [{"name": "cpu"}]
        spec["resourceClaims"] = [{"name": "cpu", "resourceClaimTemplateName": "one-cpu"}]
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name}, "spec": spec}


class _Node:
    def __init__(self, pg: Playground) -> None:
        self.pg = pg
        assert pg.agent is not None
        self.reader = CgroupReader(pg.agent.node.config.sysfs_root / "sys" / "fs" / "cgroup")

    def _web_cpus(self) -> CPUSet | None:
        rt = self.pg.runtime
        assert rt is not None
        pods = {p.id: p.name for p in rt.store.pods()}
        ctr = next(c for c in rt.store.containers() if pods.get(c.pod_sandbox_id) == "web")
        got = self.reader.read(ctr.id, ctr.cgroups_path)
        return got.cpus if got is not None else None

    async def cycle(self, n: int) -> float:
        """Seconds from NodeUnprepareResources to web's cgroup holding every CPU again."""
        pg = self.pg
        assert pg.runtime is not None
        assert pg.kubelet is not None
        name = f"claim{n}"
        await pg.apply([_pod(name, claim=True)])
        pod = pg.store.get(KINDS[("", "pods")], "default", name)
        run = pg.kubelet.pods[pod["metadata"]["uid"]]
        for cid in run.containers.values():
            await pg.runtime.stop_container(cid)
            await pg.runtime.remove_container(cid)
        online = pg.topology.online
        t0 = time.perf_counter()
        await pg.kubelet.unprepare_claims(pod)
        while self._web_cpus() != online:
            await asyncio.sleep(0.0002)
        took = time.perf_counter() - t0
        with contextlib.suppress(Exception):
            await pg.delete_pod(name)
        return took


async def _measure(cycles: int) -> dict[str, list[float]]:
    topo, _ = resolve_topology(None)
    out: dict[str, list[float]] = {"unsolicited": [], "replies": []}
    async with contextlib.AsyncExitStack() as stack:
        nodes: dict[str, _Node] = {}
        for mode, nri in (("unsolicited", "v0.12.2"), ("replies", "v0.12.0")):
            pg = await stack.enter_async_context(Playground(topology=topo, cgroups=True, nri_version=nri))
            await pg.apply([_TEMPLATE, _pod("web", claim=False)])
            assert pg.agent is not None
            assert pg.agent.state()["delivery"]["mode"] == mode
            nodes[mode] = _Node(pg)
        for n in range(cycles):
            for mode, node in nodes.items():
                out[mode].append(await node.cycle(n))
    return out


def run(quick: bool) -> list[Result]:
    got = asyncio.run(_measure(10 if quick else 40))
    results: list[Result] = []
    for mode, times in got.items():
        ms = sorted(t * 1000 for t in times)
        results.append(Result(f"release_to_widen_{mode}_p50", median(ms), "ms"))
        results.append(Result(f"release_to_widen_{mode}_max", ms[-1], "ms"))
    ratio = median(got["replies"]) / median(got["unsolicited"])
    results.append(Result("release_to_widen_replies_over_unsolicited_p50", ratio, "x", goal="<= 1.5", met=ratio <= 1.5))
    return results
