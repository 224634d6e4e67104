"""Crash safety: kill the agent at every crash point of Prepare, Unprepare, CreateContainer and
StopContainer, restart it, let the kubelet retry, and check no CPU was lost or given out twice.

The agent runs as a child process (``python -m topodra agent``); ``TOPODRA_CRASH_AT`` makes it
``os._exit`` at the named point, as abruptly as SIGKILL. Everything else (runtime, kubelet, API
server, scheduler) stays up in the test process, like on a real node.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest

from topodra.cpuset import CPUSet
from topodra.dra import cdi
from topodra.dra.checkpoint import load_checkpoint
from topodra.faults import CRASH_EXIT_CODE, ENV, POINTS
from topodra.playground.kubelet import KubeletError
from topodra.playground.world import Playground
from topodra.topology.model import CoreType
from topodra.topology.synthetic import synthetic_topology

SPEC = "1s1d1n1l4c2t4e"  # 4 P-cores x 2 threads + 4 E-cores: 12 CPUs, hybrid

TEMPLATE = {
    "apiVersion": "resource.k8s.io/v1",
    "kind": "ResourceClaimTemplate",
    "metadata": {"name": "two-pcores"},
    "spec": {
        "spec": {
            "devices": {
                "requests": [
                    {
                        "name": "cpus",
                        "exactly": {
                            "deviceClassName": "native.cpu",
                            "count": 2,
                            "selectors": [{"cel": {"expression": 'device.attributes["native.cpu"].coreType == "P-core"'}}],
                        },
                    }
                ]
            }
        }
    },
}


def _pod(name: str, resources: dict[str, Any], claim: bool = False) -> dict[str, Any]:
    spec: dict[str, Any] = {"containers": [{"name": "c", "image": "x", "resources": dict(resources)}]}
    if claim:
        spec["resourceClaims"] = [{"name": "cpus", "resourceClaimTemplateName": "two-pcores"}]
        spec["containers"][0]["resources"]["claims"] = [{"name": "cpus"}]
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name}, "spec": spec}


BACKGROUND = [
    _pod("web", {"requests": {"cpu": "500m"}}),
    _pod("batch", {}),
    _pod("db", {"requests": {"cpu": "2", "memory": "1Gi"}, "limits": {"cpu": "2", "memory": "1Gi"}}),
]
CLAIMER = _pod("claimer", {"requests": {"cpu": "2", "memory": "64Mi"}, "limits": {"cpu": "2", "memory": "64Mi"}}, claim=True)


async def _check(pg: Playground, *, claimer_running: bool) -> None:
    """No CPU lost or doubled: the agent, its checkpoint, the CDI specs and the runtime agree."""
    assert pg.workdir is not None
    assert pg.runtime is not None
    state = await pg.agent_state()
    claims = {uid: CPUSet.parse(c) for uid, c in state["claims"].items()}
    checkpoint = load_checkpoint(pg.workdir / "state" / "dra-checkpoint.json")
    assert {u: c.cpus for u, c in checkpoint.items()} == claims
    assert set(cdi.spec_uids(pg.workdir / "cdi")) == set(claims)
    claimed = CPUSet()
    for c in claims.values():
        assert claimed.isdisjoint(c), "a CPU is in two claims"
        claimed |= c
    assert len(claims) == (1 if claimer_running else 0)
    pods = {p.id: p.name for p in pg.runtime.store.pods()}
    cpus_of: dict[str, CPUSet] = {}
    for ctr in pg.runtime.store.containers():
        assert ctr.resources is not None
        assert ctr.resources.cpus, f"container {ctr.id} has no cpuset"
        cpus = ctr.resources.cpus
        cpus_of[pods[ctr.pod_sandbox_id]] = cpus
        mine = cdi.parse_claim_env(ctr.env)
        if mine:
            want = CPUSet()
            for uid in mine:
                want |= claims[uid]
            assert cpus == want, f"claiming container on {cpus}, claim holds {want}"
        else:
            assert cpus.isdisjoint(claimed), f"{pods[ctr.pod_sandbox_id]} runs on claimed CPUs {cpus & claimed}"
    assert ("claimer" in cpus_of) == claimer_running
    if claimer_running:
        assert cpus_of["claimer"] <= pg.topology.cpus_of_type(CoreType.P_CORE)
        assert len(cpus_of["claimer"]) == 2
    db = cpus_of["db"]
    assert len(db) == 2
    assert db.isdisjoint(claimed)
    for shared in ("web", "batch"):
        # Nothing lost: the shared set is every CPU not exclusive and not claimed.
        assert cpus_of[shared] == pg.topology.online - db - claimed, shared


async def _crash(pg: Playground, point: str) -> None:
    assert pg.process is not None
    code = await asyncio.wait_for(pg.process.wait(), 10)
    assert code == CRASH_EXIT_CODE, f"the agent should have crashed at {point} (exit {code})"


#: The points every default run crashes at; the others run with the slow tests.
QUICK_POINTS = ("create.placed", "unprepare.released")


@pytest.mark.parametrize(
    "point", [p if p in QUICK_POINTS else pytest.param(p, marks=pytest.mark.slow) for p in POINTS]
)
def test_crash_and_restart_loses_and_doubles_nothing(point: str) -> None:
    async def main() -> None:
        topo = synthetic_topology(SPEC)
        async with Playground(topology=topo, agent_process=f"synthetic:{SPEC}") as pg:
            await pg.apply(BACKGROUND)
            await pg.apply([TEMPLATE])
            await _check(pg, claimer_running=False)
            if point.startswith(("prepare.", "create.")):
                await pg.restart_agent(env={ENV: point})
                await pg.apply([CLAIMER])
                await _crash(pg, point)
                await pg.restart_agent()
                if pg.pod_errors.get("default/claimer"):
                    # The kubelet retries the pod: Prepare again against the new agent.
                    assert "running" in await pg.retry_pod("claimer")
                await pg.settle()
                await _check(pg, claimer_running=True)
                # And the recovered agent still releases it properly.
                await pg.delete_pod("claimer")
                await _check(pg, claimer_running=False)
            else:
                await pg.apply([CLAIMER])
                await _check(pg, claimer_running=True)
                await pg.restart_agent(env={ENV: point})
                with pytest.raises(KubeletError):
                    await pg.delete_pod("claimer")
                await _crash(pg, point)
                await pg.restart_agent()
                assert pg.kubelet is not None
                await pg.kubelet.retry_unprepare()
                await pg.settle()
                await _check(pg, claimer_running=False)

    asyncio.run(main())


@pytest.mark.slow
def test_a_damaged_checkpoint_is_repaired_at_start_and_counted() -> None:
    """The newest slot bit-flipped while the agent was down: it starts, loses nothing, counts it."""

    async def main() -> None:
        topo = synthetic_topology(SPEC)
        async with Playground(topology=topo, agent_process=f"synthetic:{SPEC}") as pg:
            assert pg.workdir is not None
            await pg.apply(BACKGROUND)
            await pg.apply([TEMPLATE, CLAIMER])
            await pg.delete_pod("claimer")
            await pg.apply([CLAIMER])  # three generations: the previous one lacks this claim
            await _check(pg, claimer_running=True)
            await pg.kill_agent_process()
            slots = [pg.workdir / "state" / name for name in ("dra-checkpoint.json", "dra-checkpoint.json.1")]
            newest = max((p for p in slots if p.exists()), key=lambda p: json.loads(p.read_bytes())["generation"])
            data = bytearray(newest.read_bytes())
            data[len(data) // 2] ^= 0x01
            newest.write_bytes(bytes(data))
            await pg.restart_agent()
            await _check(pg, claimer_running=True)
            reader, writer = await asyncio.open_connection("127.0.0.1", pg.agent_port)
            writer.write(b"GET /metrics HTTP/1.1\r\nHost: agent\r\nConnection: close\r\n\r\n")
            await writer.drain()
            metrics = (await reader.read()).decode()
            writer.close()
            assert 'topodra_dra_checkpoint_recoveries_total{how="previous-generation"} 1.0' in metrics
            assert newest.with_name(newest.name + ".damaged").exists()
            await pg.delete_pod("claimer")
            await _check(pg, claimer_running=False)

    asyncio.run(main())
