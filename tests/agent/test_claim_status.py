# mypy: disable-error-code="no-untyped-call"
"""Claim device status written by the real agent process (``python -m topodra agent``).

The API server double enforces the ClusterRole the chart ships (deploy/manifests/topodra.yaml,
which test_deploy proves is the chart rendered) with the 1.36 per-driver check for
``status.devices``, so every call the agent makes is one the chart allows. The test reads the
claim as ``kubectl get resourceclaim -o yaml`` would: per device the CPUs and their NUMA node,
Ready=True; a claimed CPU going offline turns that device Ready=False; entries lost while the
agent was down come back from its checkpoint when it restarts; Unprepare removes them.
"""

from __future__ import annotations

import asyncio
import tempfile
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import grpc.aio
import yaml
from testkit.sysfs_writer import publish_sysfs, with_offline

from topodra.agent.http import get
from topodra.cpuset import CPUSet
from topodra.dra.proto import dra_v1_pb2, dra_v1_pb2_grpc
from topodra.embedded.apiserver import Authorizer
from topodra.embedded.store import KINDS
from topodra.playground.world import NODE_NAME, Playground
from topodra.topology.synthetic import synthetic_topology

ROOT = Path(__file__).resolve().parents[2]
MACHINE = synthetic_topology("1s1d2n1l4c2t")  # 16 CPUs; node 0: 0-3,8-11; node 1: 4-7,12-15
CLAIMS = KINDS[("resource.k8s.io", "resourceclaims")]
TEMPLATE = {
    "apiVersion": "resource.k8s.io/v1",
    "kind": "ResourceClaimTemplate",
    "metadata": {"name": "two-cpus"},
    "spec": {"spec": {"devices": {"requests": [{"name": "cpus", "exactly": {"deviceClassName": "native.cpu", "count": 2}}]}}},
}
CLAIMER = {
    "apiVersion": "v1",
    "kind": "Pod",
    "metadata": {"name": "claimer"},
    "spec": {
        "resourceClaims": [{"name": "cpus", "resourceClaimTemplateName": "two-cpus"}],
        "containers": [
            {
                "name": "c",
                "image": "x",
                "resources": {
                    "requests": {"cpu": "2", "memory": "64Mi"},
                    "limits": {"cpu": "2", "memory": "64Mi"},
                    "claims": [{"name": "cpus"}],
                },
            }
        ],
    },
}


def _chart_rules() -> list[dict[str, Any]]:
    docs = [d for d in yaml.safe_load_all((ROOT / "deploy" / "manifests" / "topodra.yaml").read_text()) if d]
    (role,) = [d for d in docs if d["kind"] == "ClusterRole"]
    rules: list[dict[str, Any]] = role["rules"]
    return rules


async def _until(what: str, check: Callable[[], Awaitable[bool] | bool], timeout: float = 30.0) -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while True:
        got = check()
        if not isinstance(got, bool):
            got = await got
        if got:
            return
        assert loop.time() < deadline, f"timed out waiting for {what}"
        await asyncio.sleep(0.02)


def _claim(pg: Playground, uid: str) -> dict[str, Any]:
    (claim,) = [c for c in pg.store.objects(CLAIMS) if c["metadata"]["uid"] == uid]
    return claim


def _entries(pg: Playground, uid: str) -> dict[str, dict[str, Any]]:
    return {e["device"]: e for e in (_claim(pg, uid).get("status") or {}).get("devices") or []}


def _ready(entry: dict[str, Any]) -> tuple[str, str]:
    (cond,) = entry["conditions"]
    assert cond["type"] == "Ready"
    return cond["status"], cond["reason"]


def test_claim_device_status_from_the_real_agent_process() -> None:
    async def main() -> None:
        with tempfile.TemporaryDirectory(prefix="cs", dir="/tmp") as tmp:
            link = Path(tmp) / "machine"
            publish_sysfs(MACHINE, link)
            pg = Playground(topology=MACHINE, agent_process=str(link), agent_overrides={"hotplug": {"interval": 0.05}})
            auth = Authorizer(_chart_rules(), {"topodra": NODE_NAME})  # the playground agent's token
            pg.api.authorizer = auth
            async with pg:
                assert pg.runtime is not None
                assert pg.workdir is not None
                await pg.apply([TEMPLATE, CLAIMER])
                ((uid, claimed_text),) = (await pg.agent_state())["claims"].items()
                claimed = CPUSet.parse(claimed_text)
                want = {f"cpu{c}" for c in claimed}

                await _until("the claim's device status", lambda: set(_entries(pg, uid)) == want)
                entries = _entries(pg, uid)
                for name, e in entries.items():
                    cpu = int(name.removeprefix("cpu"))
                    assert (e["driver"], e["pool"]) == ("native.cpu", NODE_NAME)
                    assert e["data"] == {"cpuset": str(cpu), "cpus": 1, "numaNodes": [MACHINE.cpus[cpu].node]}
                    assert _ready(e) == ("True", "Prepared")
                claim = _claim(pg, uid)
                owners = pg.store.field_owners(CLAIMS, claim["metadata"]["namespace"], claim["metadata"]["name"])
                assert set(owners) == {"native.cpu"}  # server-side apply, the driver as field manager
                assert ("resource.k8s.io", "resourceclaims/driver", "associated-node:patch") in pg.api.audit
                assert auth.denied == []

                # a claimed CPU goes offline: its device turns Ready=False, the other stays Ready
                off = CPUSet([claimed.last()])
                gone, kept = f"cpu{off.first()}", f"cpu{claimed.first()}"
                pg.runtime.online_cpus = MACHINE.online - off
                publish_sysfs(with_offline(MACHINE, off), link)
                await _until("the offline device to be reported", lambda: _ready(_entries(pg, uid)[gone])[0] == "False")
                entries = _entries(pg, uid)
                assert _ready(entries[gone]) == ("False", "CPUsOffline")
                assert entries[gone]["data"]["offlineCPUs"] == str(off)
                assert _ready(entries[kept]) == ("True", "Prepared")

                # the entries are lost while the agent is down; the restarted agent writes them back
                await pg.kill_agent_process()
                claim = _claim(pg, uid)
                claim["status"].pop("devices")
                pg.store.update(CLAIMS, claim["metadata"]["namespace"], claim["metadata"]["name"], claim, subresource="status")
                assert _entries(pg, uid) == {}
                await pg.restart_agent()
                await _until("the restarted agent to write the status again", lambda: set(_entries(pg, uid)) == want)
                entries = _entries(pg, uid)
                assert _ready(entries[gone]) == ("False", "CPUsOffline")  # still offline
                assert _ready(entries[kept]) == ("True", "Prepared")

                # back online: Ready again
                pg.runtime.online_cpus = MACHINE.online
                publish_sysfs(MACHINE, link)
                await _until("the device to be Ready again", lambda: _ready(_entries(pg, uid)[gone]) == ("True", "Prepared"))
                assert "offlineCPUs" not in _entries(pg, uid)[gone]["data"]

                status, body = await get(f"127.0.0.1:{pg.agent_port}", "/metrics")
                assert status == 200
                assert 'topodra_dra_claim_status_writes_total{result="ok"}' in body.decode()
                assert 'topodra_dra_claim_status_writes_total{result="failed"}' not in body.decode()

                # Unprepare (the kubelet's call) removes the entries; the claim stays allocated
                claim = _claim(pg, uid)
                meta = claim["metadata"]
                sock = pg.workdir / "kubelet" / "plugins" / "native.cpu" / "dra.sock"
                async with grpc.aio.insecure_channel(f"unix:{sock}") as ch:
                    ref = dra_v1_pb2.Claim(namespace=meta["namespace"], uid=uid, name=meta["name"])
                    reply = await dra_v1_pb2_grpc.DRAPluginStub(ch).NodeUnprepareResources(
                        dra_v1_pb2.NodeUnprepareResourcesRequest(claims=[ref])
                    )
                assert reply.claims[uid].error == ""
                await _until("the entries to be removed", lambda: _entries(pg, uid) == {})
                assert _claim(pg, uid)["status"]["allocation"]
                assert auth.denied == []

    asyncio.run(main())
