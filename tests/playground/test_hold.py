"""``playground --hold`` is interactive: pods written to its API server by another client (kubectl)
are scheduled, started and stopped, and read back with the columns ``kubectl get pods`` shows."""

from __future__ import annotations

import asyncio
import contextlib
import json
import urllib.request
from typing import Any

from topodra.kube.client import PODS, RESOURCE_CLAIM_TEMPLATES, RESOURCE_CLAIMS, KubeClient
from topodra.playground.follower import PodFollower
from topodra.playground.runner import resolve_topology
from topodra.playground.world import Playground


def _claiming_pod(name: str, template: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {
            "resourceClaims": [{"name": "cpus", "resourceClaimTemplateName": template}],
            "containers": [{"name": "app", "image": "busybox", "resources": {"claims": [{"name": "cpus"}]}}],
        },
    }


def _template(name: str, count: int) -> dict[str, Any]:
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaimTemplate",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {"spec": {"devices": {"requests": [{"name": "cpus", "exactly": {"deviceClassName": "native.cpu", "count": count}}]}}},
    }


async def _until(check: Any, what: str, timeout: float = 10.0) -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while not check():
        assert loop.time() < deadline, f"timed out waiting until {what}"
        await asyncio.sleep(0.05)


def _phase(pg: Playground, name: str) -> str:
    from topodra.embedded.store import KINDS

    try:
        pod = pg.store.get(KINDS[("", "pods")], "default", name)
    except Exception:
        return ""
    return str((pod.get("status") or {}).get("phase", ""))


def _table_rows(url: str) -> dict[str, list[Any]]:
    req = urllib.request.Request(
        f"{url}/api/v1/namespaces/default/pods", headers={"Accept": "application/json;as=Table;v=v1;g=meta.k8s.io"}
    )
    with urllib.request.urlopen(req, timeout=10) as resp:
        body = json.loads(resp.read())
    return {row["cells"][0]: row["cells"] for row in body["rows"]}


def test_pods_applied_by_another_client_are_scheduled_started_and_stopped() -> None:
    async def main() -> None:
        topo, _ = resolve_topology("synthetic:1s1d1n1l4c1t")  # 4 CPUs
        async with Playground(topology=topo) as pg:
            follower = PodFollower(pg)
            task = asyncio.create_task(follower.run())
            client = KubeClient.for_url(pg.api.url)
            try:
                await client.create(RESOURCE_CLAIM_TEMPLATES, _template("three", 3))
                await client.create(PODS, _claiming_pod("first", "three"))
                await _until(lambda: _phase(pg, "first") == "Running", "first runs")
                assert len(pg.cpus_of("first")) == 3
                rows = await asyncio.to_thread(_table_rows, pg.api.url)
                # READY, STATUS; NODE is the -o wide column
                assert rows["first"][1:3] == ["1/1", "Running"]
                assert rows["first"][6] == "playground"

                # a second claim of three CPUs cannot fit beside the first: Pending, with the reason
                await client.create(PODS, _claiming_pod("second", "three"))
                await _until(lambda: "default/second" in pg.pod_errors, "second is refused")
                rows = await asyncio.to_thread(_table_rows, pg.api.url)
                assert rows["second"][1:3] == ["0/1", "Pending"]
                second = await client.get(PODS, "second", "default")
                assert second["status"]["conditions"][0]["reason"] == "Unschedulable"

                # deleting the first stops it, releases its claim, and the pending pod gets its CPUs
                await client.delete(PODS, "first", "default")
                await _until(lambda: _phase(pg, "second") == "Running", "second runs")
                assert not any(r.pod == "default/first" for r in pg.rows())
                claims, _ = await client.list(RESOURCE_CLAIMS, namespace="default")
                assert [c["metadata"]["name"].split("-")[0] for c in claims] == ["second"]
                assert any(line == "pod/first stopped" for line in follower.lines)
            finally:
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task
                await client.close()

    asyncio.run(main())
