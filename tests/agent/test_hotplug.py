# mypy: disable-error-code="no-untyped-call"
"""CPU hotplug under a running agent process, and the device health it reports to the kubelet.

The agent (``python -m topodra agent``, its own process) reads its machine from a sysfs tree
(``testkit/sysfs_writer``) that the test changes under it, as the kernel does when CPUs go
offline: the containers on them are moved by unsolicited updates, the slices are republished
without them, the claim holding one is reported, and the DRAResourceHealth streams (v1 and
v1alpha1, over the agent's gRPC socket) turn those devices Unhealthy; brought back, all is
Healthy and offered again.
"""

from __future__ import annotations

import asyncio
import re
import tempfile
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import grpc.aio
import pytest
from testkit.sysfs_writer import TreeStyle, publish_sysfs, with_offline

from topodra.agent.hotplug import MachineWatcher, watch_root
from topodra.agent.http import get
from topodra.cpuset import CPUSet
from topodra.dra.proto import health_v1_pb2, health_v1_pb2_grpc, health_v1alpha1_pb2, health_v1alpha1_pb2_grpc
from topodra.playground.world import Playground
from topodra.topology.synthetic import synthetic_topology

MACHINE = synthetic_topology("1s1d2n1l4c2t")  # 16 CPUs; cores (0,8) (1,9) ...; node 1: 4-7,12-15

TEMPLATE = {
    "apiVersion": "resource.k8s.io/v1",
    "kind": "ResourceClaimTemplate",
    "metadata": {"name": "two-cpus"},
    "spec": {"spec": {"devices": {"requests": [{"name": "cpus", "exactly": {"deviceClassName": "native.cpu", "count": 2}}]}}},
}


def _pod(name: str, resources: dict[str, Any], claim: bool = False) -> dict[str, Any]:
    spec: dict[str, Any] = {"containers": [{"name": "c", "image": "x", "resources": dict(resources)}]}
    if claim:
        spec["resourceClaims"] = [{"name": "cpus", "resourceClaimTemplateName": "two-cpus"}]
        spec["containers"][0]["resources"]["claims"] = [{"name": "cpus"}]
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name}, "spec": spec}


GUARANTEED_2 = {"requests": {"cpu": "2", "memory": "64Mi"}, "limits": {"cpu": "2", "memory": "64Mi"}}
PODS = [_pod("db", GUARANTEED_2), _pod("web", {"requests": {"cpu": "500m"}}), _pod("claimer", GUARANTEED_2, claim=True)]


async def _until(what: str, check: Callable[[], Awaitable[bool]], timeout: float = 30.0) -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while not await check():
        assert loop.time() < deadline, f"timed out waiting for {what}"
        await asyncio.sleep(0.02)


def _offered(pg: Playground) -> set[str]:
    return {d["name"] for s in pg.slices() for d in s["spec"].get("devices", [])}


def _taints(pg: Playground) -> dict[str, list[dict[str, Any]]]:
    return {d["name"]: d.get("taints", []) for s in pg.slices() for d in s["spec"].get("devices", [])}


async def _health(stream: AsyncIterator[Any], want: Callable[[dict[str, tuple[int, str]]], bool]) -> dict[str, tuple[int, str]]:
    """Read the stream until a full list satisfies ``want``."""
    while True:
        msg = await asyncio.wait_for(stream.__anext__(), 30)
        got = {d.device.device_name: (d.health, d.message) for d in msg.devices}
        assert all(d.health_check_timeout_seconds == 30 for d in msg.devices)
        if want(got):
            return got


@pytest.mark.slow
def test_cpus_going_offline_and_back_under_a_running_agent_process() -> None:
    async def main() -> None:
        with tempfile.TemporaryDirectory(prefix="hp", dir="/tmp") as tmp:
            link = Path(tmp) / "machine"
            publish_sysfs(MACHINE, link)
            pg = Playground(topology=MACHINE, agent_process=str(link), agent_overrides={"hotplug": {"interval": 0.05}})
            async with pg:
                assert pg.runtime is not None
                assert pg.workdir is not None
                await pg.apply([TEMPLATE])
                await pg.apply(PODS)
                state = await pg.agent_state()
                (uid, claimed_text), = state["claims"].items()
                claimed = CPUSet.parse(claimed_text)
                db = pg.cpus_of("db")
                assert pg.cpus_of("claimer") == claimed
                assert len(db) == 2

                sock = pg.workdir / "kubelet" / "plugins" / "native.cpu" / "dra.sock"
                async with grpc.aio.insecure_channel(f"unix:{sock}") as ch:
                    v1 = health_v1_pb2_grpc.DRAResourceHealthStub(ch).NodeWatchResources(
                        health_v1_pb2.NodeWatchResourcesRequest()
                    )
                    v1a = health_v1alpha1_pb2_grpc.DRAResourceHealthStub(ch).NodeWatchResources(
                        health_v1alpha1_pb2.NodeWatchResourcesRequest()
                    )
                    streams = [v1.__aiter__(), v1a.__aiter__()]
                    for s in streams:
                        first = await _health(s, lambda h: True)
                        assert {state for state, _ in first.values()} == {health_v1_pb2.HEALTHY}
                    all_devices = set(first)

                    # CPUs go offline: one of db's exclusive CPUs, one of the claim's, a free one.
                    free = MACHINE.online - db - claimed - CPUSet([0, 8])
                    off = CPUSet([db.first(), claimed.last(), free.last()])
                    pg.runtime.online_cpus = MACHINE.online - off  # the kernel refuses offline CPUs
                    publish_sysfs(with_offline(MACHINE, off), link)

                    async def followed() -> bool:
                        return bool((await pg.agent_state())["offline_cpus"] == str(off))

                    await _until("the agent to see the CPUs offline", followed)
                    await pg.settle()
                    now = {name: pg.cpus_of(name) for name in ("db", "web", "claimer")}
                    for name, cpus in now.items():
                        assert cpus, f"{name} was left without CPUs"
                        assert cpus.isdisjoint(off), f"{name} still on offline CPUs {cpus & off}"
                    assert len(now["db"]) == 2
                    assert now["db"] != db
                    assert pg.last_source[_cid(pg, "db")] == "unsolicited"
                    assert now["claimer"] == claimed - off  # its claim's online part
                    state = await pg.agent_state()
                    assert state["offline_claims"] == {uid: str(claimed & off)}  # reported, not shrunk
                    assert state["claims"] == {uid: str(claimed)}
                    assert {f"cpu{c}" for c in off} == set(state["unhealthy_devices"])
                    status, body = await get(f"127.0.0.1:{pg.agent_port}", "/metrics")
                    assert status == 200
                    metrics = body.decode()
                    assert "topodra_claims_on_offline_cpus 1.0" in metrics
                    assert 'topodra_machine_changes_total{result="applied"} 1.0' in metrics
                    assert "topodra_unhealthy_devices 3.0" in metrics

                    async def tainted() -> bool:
                        taints = _taints(pg)
                        return all([t["key"] for t in taints.get(f"cpu{c}", [])] == ["native.cpu/offline"] for c in off)

                    await _until("the slices to taint the offline CPUs", tainted)
                    for c in off:  # NoExecute: the eviction controller evicts pods of claims that do not tolerate it
                        (t,) = _taints(pg)[f"cpu{c}"]
                        assert t["effect"] == "NoExecute"
                        assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ", t["timeAdded"]), t
                    for s in streams:
                        sick = await _health(s, lambda h: any(v[0] == health_v1_pb2.UNHEALTHY for v in h.values()))
                        assert set(sick) == all_devices  # the complete list, offline devices included
                        bad = {n: m for n, (v, m) in sick.items() if v == health_v1_pb2.UNHEALTHY}
                        assert set(bad) == {f"cpu{c}" for c in off}
                        assert uid in bad[f"cpu{claimed.last()}"]

                    # back online: healthy, offered again, the claimer back on its whole claim
                    pg.runtime.online_cpus = MACHINE.online
                    publish_sysfs(MACHINE, link)

                    async def restored() -> bool:
                        return bool((await pg.agent_state())["offline_cpus"] == "")

                    await _until("the agent to see the CPUs back", restored)
                    await pg.settle()
                    assert pg.cpus_of("claimer") == claimed
                    assert (await pg.agent_state())["offline_claims"] == {}

                    back = {f"cpu{c}" for c in (claimed.last(), free.last())}  # claimed CPUs stay offered

                    async def offered_again() -> bool:
                        return back <= _offered(pg)

                    await _until("the slices to offer the CPUs again", offered_again)
                    assert not any(_taints(pg).get(f"cpu{c}") for c in off)  # untainted again
                    # every CPU is offered but db's exclusive ones and the one-CPU shared floor
                    unoffered = all_devices - _offered(pg) - {f"cpu{c}" for c in pg.cpus_of("db")}
                    assert len(unoffered) == 1
                    for s in streams:
                        await _health(s, lambda h: {v for v, _ in h.values()} == {health_v1_pb2.HEALTHY})
                    v1.cancel()
                    v1a.cancel()

    asyncio.run(main())


@pytest.mark.slow
def test_an_agent_restarted_while_a_claimed_cpu_is_offline_keeps_the_claim_whole() -> None:
    async def main() -> None:
        with tempfile.TemporaryDirectory(prefix="hp", dir="/tmp") as tmp:
            link = Path(tmp) / "machine"
            publish_sysfs(MACHINE, link)
            pg = Playground(topology=MACHINE, agent_process=str(link), agent_overrides={"hotplug": {"interval": 0.05}})
            async with pg:
                assert pg.runtime is not None
                await pg.apply([TEMPLATE, PODS[2]])
                ((uid, claimed_text),) = (await pg.agent_state())["claims"].items()
                claimed = CPUSet.parse(claimed_text)
                off = CPUSet([claimed.last()])
                pg.runtime.online_cpus = MACHINE.online - off
                publish_sysfs(with_offline(MACHINE, off), link)

                async def reported() -> bool:
                    return bool((await pg.agent_state())["offline_claims"])

                await _until("the claim on the offline CPU to be reported", reported)
                await pg.restart_agent()  # the new agent reads the machine with the CPU offline
                state = await pg.agent_state()
                assert state["claims"] == {uid: str(claimed)}  # restored whole, not refused or shrunk
                assert state["offline_claims"] == {uid: str(off)}
                assert pg.cpus_of("claimer") == claimed - off
                pg.runtime.online_cpus = MACHINE.online
                publish_sysfs(MACHINE, link)

                async def whole() -> bool:
                    await pg.settle()
                    return pg.cpus_of("claimer") == claimed

                await _until("the claimer to get its whole claim back", whole)
                assert (await pg.agent_state())["offline_claims"] == {}

                async def offered() -> bool:  # a device the restarted agent had never seen
                    return f"cpu{off.first()}" in _offered(pg)

                await _until("the returned CPU's device to be offered", offered)

    asyncio.run(main())


def _cid(pg: Playground, pod: str) -> str:
    assert pg.runtime is not None
    pods = {p.id: p.name for p in pg.runtime.store.pods()}
    return next(c.id for c in pg.runtime.store.containers() if pods.get(c.pod_sandbox_id) == pod)


def test_watch_root_follows_where_the_machine_is_read_from(tmp_path: Path) -> None:
    assert watch_root(None, Path("/host")) == Path("/host")
    assert watch_root("host", Path("/host")) == Path("/host")
    assert watch_root(str(tmp_path), Path("/")) == tmp_path
    assert watch_root("synthetic:1s1d1n1l2c2t", Path("/")) is None  # a made-up machine never changes
    assert watch_root("2s1d2n2l8c2t", Path("/")) is None


@pytest.mark.parametrize("online_file", [True, False])
def test_the_watcher_sees_each_change_once_and_retries_what_was_not_applied(tmp_path: Path, online_file: bool) -> None:
    async def main() -> None:
        style = TreeStyle(online_file=online_file)
        link = tmp_path / "m"
        publish_sysfs(MACHINE, link, style)
        calls: list[int] = []
        answer = [True]

        async def changed() -> bool:
            calls.append(1)
            return answer[0]

        w = MachineWatcher(link, 3600, changed)
        assert not await w.poll()
        publish_sysfs(with_offline(MACHINE, CPUSet([3])), link, style)
        answer[0] = False  # e.g. the tree could not be read yet
        assert not await w.poll()
        answer[0] = True
        assert await w.poll()  # tried again
        assert not await w.poll()  # and only once
        assert len(calls) == 2
        publish_sysfs(replace(MACHINE, isolated=CPUSet([5])), link, style)
        assert await w.poll()
        (link / "sys/devices/system/node/has_memory").write_text("1\n")  # node 0's memory went away
        assert await w.poll()

    asyncio.run(main())
