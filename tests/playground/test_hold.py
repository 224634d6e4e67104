"""``playground --hold`` is interactive: pods written to its API server by another client (kubectl)
are scheduled, started and stopped, and read back with the columns ``kubectl get pods`` shows."""

from __future__ import annotations

import asyncio
import contextlib
import json
import urllib.request
from collections.abc import Callable
from typing import Any

from topodra.embedded.store import KINDS, Watch, WatchEvent
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


async def _follow_until(watch: Watch, follower: PodFollower, check: Callable[[], bool], what: str) -> None:
    """Hand the follower the store's pod events one by one, as its ``run()`` does, until ``check``
    holds after one: each wait ends on the event that made it true, not on a poll."""

    async def follow() -> None:
        while not check():
            await follower.handle(await anext(watch))

    try:
        await asyncio.wait_for(follow(), 10)
    except TimeoutError:
        raise AssertionError(f"timed out waiting until {what}") from None


def _phase(pg: Playground, name: str) -> str:
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
            watch = pg.store.watch(KINDS[("", "pods")])  # the events follower.run() would handle
            client = KubeClient.for_url(pg.api.url)
            try:
                await client.create(RESOURCE_CLAIM_TEMPLATES, _template("three", 3))
                await client.create(PODS, _claiming_pod("first", "three"))
                await _follow_until(watch, follower, lambda: _phase(pg, "first") == "Running", "first runs")
                assert len(pg.cpus_of("first")) == 3
                rows = await asyncio.to_thread(_table_rows, pg.api.url)
                # READY, STATUS; NODE is the -o wide column
                assert rows["first"][1:3] == ["1/1", "Running"]
                assert rows["first"][6] == "playground"

                # a second claim of three CPUs cannot fit beside the first: Pending, with the reason
                await client.create(PODS, _claiming_pod("second", "three"))
                await _follow_until(watch, follower, lambda: "default/second" in pg.pod_errors, "second is refused")
                rows = await asyncio.to_thread(_table_rows, pg.api.url)
                assert rows["second"][1:3] == ["0/1", "Pending"]
                second = await client.get(PODS, "second", "default")
                assert second["status"]["conditions"][0]["reason"] == "Unschedulable"

                # deleting the first stops it, releases its claim, and the pending pod gets its CPUs
                await client.delete(PODS, "first", "default")
                await _follow_until(watch, follower, lambda: _phase(pg, "second") == "Running", "second runs")
                assert not any(r.pod == "default/first" for r in pg.rows())
                claims, _ = await client.list(RESOURCE_CLAIMS, namespace="default")
                assert [c["metadata"]["name"].split("-")[0] for c in claims] == ["second"]
                assert any(line == "pod/first stopped" for line in follower.lines)
            finally:
                watch.close()
                await client.close()

    asyncio.run(main())


def test_run_hands_every_pod_event_to_handle() -> None:
    """``run()`` is the watch the test above drives by hand: each pod event reaches ``handle``."""

    class Recording(PodFollower):
        def __init__(self, pg: Playground) -> None:
            super().__init__(pg)
            self.seen: asyncio.Queue[tuple[str, str]] = asyncio.Queue()

        async def handle(self, event: WatchEvent) -> None:
            await self.seen.put((event.type, str(event.object["metadata"]["name"])))

    async def main() -> None:
        topo, _ = resolve_topology("synthetic:1s1d1n1l4c1t")
        async with Playground(topology=topo) as pg:
            follower = Recording(pg)
            task = asyncio.create_task(follower.run())
            try:
                pods = KINDS[("", "pods")]
                pg.store.create(pods, "default", {"metadata": {"name": "p"}, "spec": {"containers": [{"name": "c"}]}})
                assert await asyncio.wait_for(follower.seen.get(), 10) == ("ADDED", "p")
                pg.store.delete(pods, "default", "p")
                assert await asyncio.wait_for(follower.seen.get(), 10) == ("DELETED", "p")
            finally:
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task

    asyncio.run(main())
