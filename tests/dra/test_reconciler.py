"""The ResourceSlice reconciler against the API server double over HTTP."""

from __future__ import annotations

import asyncio
import copy
import dataclasses
import logging
from collections.abc import Awaitable, Callable
from typing import Any

import pytest

from topodra.cpuset import CPUSet
from topodra.dra.devices import DeviceModelConfig, build_devices
from topodra.dra.reconciler import SliceReconciler
from topodra.dra.slices import build_slices
from topodra.embedded.apiserver import ApiServer
from topodra.embedded.store import KINDS, Kind, Store
from topodra.kube.client import NODES, RESOURCE_SLICES, KubeClient
from topodra.topology import synthetic_topology

TOPO = synthetic_topology("2s1d2n2l16c2t")  # 256 CPUs
DEVICES = build_devices(TOPO)


def scenario(body: Callable[[KubeClient, ApiServer], Awaitable[Any]], store: Store | None = None) -> Any:
    async def main() -> Any:
        async with ApiServer(store) as server:
            client = KubeClient.for_url(server.url)
            try:
                return await asyncio.wait_for(body(client, server), 30)
            finally:
                await client.close()

    return asyncio.run(main())


async def ours(client: KubeClient, node: str = "node-a") -> list[dict[str, Any]]:
    items, _ = await client.list(RESOURCE_SLICES, fields={"spec.nodeName": node, "spec.driver": "native.cpu"})
    return sorted(items, key=lambda s: s["metadata"]["name"])


async def eventually(check: Callable[[], Awaitable[bool]], timeout: float = 10) -> None:
    deadline = asyncio.get_running_loop().time() + timeout
    while not await check():
        assert asyncio.get_running_loop().time() < deadline, "condition not reached"
        await asyncio.sleep(0.02)


def test_publishes_chunked_slices_owned_by_the_node() -> None:
    async def body(c: KubeClient, server: ApiServer) -> None:
        node = await c.create(NODES, {"metadata": {"name": "node-a"}})
        rec = SliceReconciler(c, "node-a", DEVICES)
        report = await rec.sync()
        assert report.created == ("node-a-native.cpu-0", "node-a-native.cpu-1")
        assert report.generation == 1
        slices = await ours(c)
        assert [len(s["spec"]["devices"]) for s in slices] == [128, 128]
        for s in slices:
            assert s["spec"]["pool"] == {"name": "node-a", "generation": 1, "resourceSliceCount": 2}
            assert s["metadata"]["ownerReferences"][0]["uid"] == node["metadata"]["uid"]
            assert s["metadata"]["ownerReferences"][0]["controller"] is True
        assert [d["name"] for s in slices for d in s["spec"]["devices"]] == [d.name for d in DEVICES]
        # a second pass changes nothing
        again = await rec.sync()
        assert not again.changed
        assert again.generation == 1

    scenario(body)


def test_wiped_slices_are_recreated_with_a_new_generation() -> None:
    async def body(c: KubeClient, server: ApiServer) -> None:
        await c.create(NODES, {"metadata": {"name": "node-a"}})
        rec = SliceReconciler(c, "node-a", DEVICES, resync_delay=0.01)
        stop = asyncio.Event()
        task = asyncio.create_task(rec.run(stop))
        await asyncio.wait_for(rec.synced.wait(), 10)
        for s in await ours(c):  # the kubelet wipes node-local slices at start-up
            await c.delete(RESOURCE_SLICES, s["metadata"]["name"])

        async def back() -> bool:
            slices = await ours(c)
            return len(slices) == 2 and all(s["spec"]["pool"]["generation"] == 2 for s in slices)

        await eventually(back)
        assert rec.generation == 2
        # partial wipe: only one slice gone
        await c.delete(RESOURCE_SLICES, "node-a-native.cpu-1")

        async def back3() -> bool:
            slices = await ours(c)
            return len(slices) == 2 and all(s["spec"]["pool"]["generation"] == 3 for s in slices)

        await eventually(back3)
        stop.set()
        await asyncio.wait_for(task, 5)

    scenario(body)


def test_stale_slices_are_deleted_and_others_left_alone() -> None:
    async def body(c: KubeClient, server: ApiServer) -> None:
        await c.create(NODES, {"metadata": {"name": "node-a"}})
        old = build_slices("node-a", DEVICES[:10], generation=4)[0]
        old["metadata"]["name"] = "node-a-native.cpu-7"  # an old layout's slice
        await c.create(RESOURCE_SLICES, old)
        prototype_pool = build_slices("pool0", DEVICES[:3])[0]  # the prototype's non-node pool name
        prototype_pool["spec"]["nodeName"] = "node-a"
        await c.create(RESOURCE_SLICES, prototype_pool)
        other_driver = build_slices("node-a", DEVICES[:3], driver="gpu.example.com")[0]
        await c.create(RESOURCE_SLICES, other_driver)
        other_node = build_slices("node-b", DEVICES[:3])[0]
        await c.create(RESOURCE_SLICES, other_node)

        rec = SliceReconciler(c, "node-a", DEVICES)
        report = await rec.sync()
        assert set(report.deleted) == {"node-a-native.cpu-7", prototype_pool["metadata"]["name"]}
        assert report.generation == 5  # above the generation seen in the pool
        names = [s["metadata"]["name"] for s in await ours(c)]
        assert names == ["node-a-native.cpu-0", "node-a-native.cpu-1"]
        everything, _ = await c.list(RESOURCE_SLICES)
        assert {s["metadata"]["name"] for s in everything} == {
            "node-a-native.cpu-0",
            "node-a-native.cpu-1",
            other_driver["metadata"]["name"],
            other_node["metadata"]["name"],
        }

    scenario(body)


def test_device_changes_bump_the_generation_and_shrink_the_pool() -> None:
    async def body(c: KubeClient, server: ApiServer) -> None:
        await c.create(NODES, {"metadata": {"name": "node-a"}})
        rec = SliceReconciler(c, "node-a", DEVICES, resync_delay=0.01)
        stop = asyncio.Event()
        task = asyncio.create_task(rec.run(stop))
        await asyncio.wait_for(rec.synced.wait(), 10)
        fewer = build_devices(TOPO, exclude=CPUSet(range(8, 256)))
        rec.set_devices(fewer)

        async def shrunk() -> bool:
            slices = await ours(c)
            return len(slices) == 1 and slices[0]["spec"]["pool"] == {
                "name": "node-a",
                "generation": 2,
                "resourceSliceCount": 1,
            }

        await eventually(shrunk)
        assert sorted(d["name"] for d in (await ours(c))[0]["spec"]["devices"]) == sorted(f"cpu{i}" for i in range(8))
        stop.set()
        await asyncio.wait_for(task, 5)

    scenario(body)


def test_drifted_slices_are_restored() -> None:
    async def body(c: KubeClient, server: ApiServer) -> None:
        await c.create(NODES, {"metadata": {"name": "node-a"}})
        rec = SliceReconciler(c, "node-a", DEVICES, resync_delay=0.01)
        stop = asyncio.Event()
        task = asyncio.create_task(rec.run(stop))
        await asyncio.wait_for(rec.synced.wait(), 10)
        victim, other = await ours(c)
        untouched = other["metadata"]["resourceVersion"]
        edited = copy.deepcopy(victim)
        edited["spec"]["devices"] = edited["spec"]["devices"][:5]
        await c.replace(RESOURCE_SLICES, edited)

        async def restored() -> bool:
            s = (await ours(c))[0]
            return len(s["spec"]["devices"]) == 128

        await eventually(restored)
        # One slice rewritten in place keeps the generation (the upstream helper's rule): the
        # other slice was not written again.
        slices = await ours(c)
        assert [s["spec"]["pool"]["generation"] for s in slices] == [1, 1]
        assert slices[1]["metadata"]["resourceVersion"] == untouched
        stop.set()
        await asyncio.wait_for(task, 5)

    scenario(body)


def test_api_errors_are_retried() -> None:
    async def body(c: KubeClient, server: ApiServer) -> None:
        await c.create(NODES, {"metadata": {"name": "node-a"}})
        server.inject("POST", "resourceslices", 500, times=2)
        rec = SliceReconciler(c, "node-a", DEVICES, resync_delay=0.01)
        rec._max_backoff = 0.05
        stop = asyncio.Event()
        task = asyncio.create_task(rec.run(stop))
        await asyncio.wait_for(rec.failed.wait(), 10)
        await asyncio.wait_for(rec.synced.wait(), 10)
        assert len(await ours(c)) == 2
        assert not rec.failed.is_set()  # the success cleared the failure
        assert rec.last_error == ""
        stop.set()
        await asyncio.wait_for(task, 5)

    scenario(body)


def test_restarted_reconciler_keeps_an_identical_pool() -> None:
    async def body(c: KubeClient, server: ApiServer) -> None:
        await c.create(NODES, {"metadata": {"name": "node-a"}})
        await SliceReconciler(c, "node-a", DEVICES).sync()
        # the second slice loses its last 56 devices: one slice rewritten, the generation kept
        await SliceReconciler(c, "node-a", DEVICES[:200]).sync()
        await SliceReconciler(c, "node-a", DEVICES[:100]).sync()  # the first slice too: generation 2
        before = await ours(c)
        writes = sum(1 for m, _ in server.requests if m in ("POST", "PUT", "DELETE"))
        report = await SliceReconciler(c, "node-a", DEVICES[:100]).sync()
        assert not report.changed
        assert report.generation == 2
        assert await ours(c) == before
        assert sum(1 for m, _ in server.requests if m in ("POST", "PUT", "DELETE")) == writes

    scenario(body)


def test_missing_node_publishes_without_owner() -> None:
    async def body(c: KubeClient, server: ApiServer) -> None:
        await SliceReconciler(c, "node-z", DEVICES[:4]).sync()
        (s,) = await ours(c, "node-z")
        assert "ownerReferences" not in s["metadata"]

    scenario(body)


def test_fields_dropped_by_the_server_are_reported_without_a_resync_loop() -> None:
    grouped = build_devices(TOPO, DeviceModelConfig(model="grouped"))

    def consumable_capacity_off(kind: Kind, obj: dict[str, Any]) -> None:
        if kind.plural == "resourceslices":
            for d in obj.get("spec", {}).get("devices", []):
                d.pop("allowMultipleAllocations", None)
                for cap in d.get("capacity", {}).values():
                    cap.pop("requestPolicy", None)

    store = Store()
    store.admission.append(consumable_capacity_off)

    async def body(c: KubeClient, server: ApiServer) -> None:
        await c.create(NODES, {"metadata": {"name": "node-a"}})
        rec = SliceReconciler(c, "node-a", grouped, resync_delay=0.01)
        stop = asyncio.Event()
        task = asyncio.create_task(rec.run(stop))
        await asyncio.wait_for(rec.synced.wait(), 10)
        await asyncio.sleep(0.3)
        assert rec.dropped_fields == {"node-a-native.cpu-0"}
        assert rec.syncs == 1  # no re-sync loop on the server's version
        (s,) = await ours(c)
        assert "allowMultipleAllocations" not in s["spec"]["devices"][0]
        await c.delete(RESOURCE_SLICES, s["metadata"]["name"])  # a real wipe is still repaired
        await eventually(lambda: _count(c, 1))
        stop.set()
        await asyncio.wait_for(task, 5)

    scenario(body, store)


async def _count(c: KubeClient, n: int) -> bool:
    return len(await ours(c)) == n


def test_periodic_resync_adds_the_owner_once_the_node_exists() -> None:
    async def body(c: KubeClient, server: ApiServer) -> None:
        rec = SliceReconciler(c, "node-a", DEVICES[:4], resync_delay=0.01, resync_period=0.1)
        stop = asyncio.Event()
        task = asyncio.create_task(rec.run(stop))
        await asyncio.wait_for(rec.synced.wait(), 10)
        assert "ownerReferences" not in (await ours(c))[0]["metadata"]
        node = await c.create(NODES, {"metadata": {"name": "node-a"}})

        async def owned() -> bool:
            refs = (await ours(c))[0]["metadata"].get("ownerReferences") or []
            return [r["uid"] for r in refs] == [node["metadata"]["uid"]]

        await eventually(owned)
        stop.set()
        await asyncio.wait_for(task, 5)

    scenario(body)


class Counting:
    """The reconciler's client, counting its calls by method."""

    def __init__(self, client: KubeClient) -> None:
        self._client = client
        self.calls: list[str] = []

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self._client, name)
        if name in ("get", "list", "create", "replace", "delete", "create_encoded", "replace_encoded"):
            self.calls.append(name.removesuffix("_encoded"))  # a write is a write, however encoded
        return attr


def test_a_new_device_list_is_republished_without_reading_the_node_or_listing() -> None:
    """The agent withdraws CPUs after every exclusive grant: those re-publications write, and read nothing."""

    async def body(c: KubeClient, server: ApiServer) -> None:
        await c.create(NODES, {"metadata": {"name": "node-a"}})
        counting = Counting(c)
        rec = SliceReconciler(counting, "node-a", DEVICES, resync_delay=0.01)  # type: ignore[arg-type]
        stop = asyncio.Event()
        task = asyncio.create_task(rec.run(stop))
        await asyncio.wait_for(rec.synced.wait(), 10)
        for n in range(1, 4):
            counting.calls.clear()
            rec.set_devices(build_devices(TOPO, exclude=CPUSet(range(n))))

            async def withdrawn(n: int = n) -> bool:
                names = {d["name"] for s in await ours(c) for d in s["spec"]["devices"]}
                return f"cpu{n - 1}" not in names and len(names) == 256 - n

            await eventually(withdrawn)
            # cpu0.. come last in device order: only the last slice changes (the generation is kept); no reads
            assert counting.calls == ["replace"]
        # Someone deletes a slice: the next re-publication cannot replace it and falls back to a full sync.
        first = (await ours(c))[0]["metadata"]["name"]
        await c.delete(RESOURCE_SLICES, first)
        rec.set_devices(DEVICES)

        async def restored() -> bool:
            return sum(len(s["spec"]["devices"]) for s in await ours(c)) == 256

        await eventually(restored)
        stop.set()
        await asyncio.wait_for(task, 5)

    scenario(body)


def test_device_lists_are_written_at_most_once_per_publish_delay() -> None:
    """A burst of set_devices (one per exclusive grant) right after a write gives one write of the
    last list at the end of the delay; a change after a quiet spell is written at once.
    ``wait_written`` returns once the list is out."""

    async def body(c: KubeClient, server: ApiServer) -> None:
        await c.create(NODES, {"metadata": {"name": "node-a"}})
        counting = Counting(c)
        delay = 1.0
        rec = SliceReconciler(counting, "node-a", DEVICES, publish_delay=delay)  # type: ignore[arg-type]
        stop = asyncio.Event()
        task = asyncio.create_task(rec.run(stop))
        await rec.wait_written(10)
        loop = asyncio.get_running_loop()
        counting.calls.clear()
        built: list[int] = []

        def offer(n: int) -> Callable[[], list[Any]]:
            def devices() -> list[Any]:
                built.append(n)
                return build_devices(TOPO, exclude=CPUSet(range(n)))

            return devices

        for n in range(1, 6):
            rec.set_devices(offer(n))
            await asyncio.sleep(0)  # let the reconciler see each list: a burst, all inside the delay
        assert counting.calls == []  # within the delay after the first write: nothing written yet
        await rec.wait_written(10)
        assert counting.calls == ["replace"]  # one write (of the one slice that changed) for five lists
        assert built == [5]  # only the last list was built, once
        names = {d["name"] for s in await ours(c) for d in s["spec"]["devices"]}
        assert len(names) == 256 - 5
        assert not names & {f"cpu{i}" for i in range(5)}
        await asyncio.sleep(delay * 1.05)  # a quiet spell
        t0 = loop.time()
        rec.set_devices(offer(6))
        await rec.wait_written(10)
        assert loop.time() - t0 < delay, "a change after a quiet spell goes out at once"
        assert built == [5, 6]
        stop.set()
        await asyncio.wait_for(task, 5)

    scenario(body)


class Watching(Counting):
    """Counts the watch requests too."""

    def __init__(self, client: KubeClient) -> None:
        super().__init__(client)
        self.watches = 0

    def __getattr__(self, name: str) -> Any:
        if name == "watch_lines":
            self.watches += 1
        return super().__getattr__(name)


def test_the_watch_stays_open_across_new_device_lists_and_still_sees_drift() -> None:
    """The events of the reconciler's own writes are not drift (no re-sync, no new watch); a
    change by someone else between two writes is repaired."""

    async def body(c: KubeClient, server: ApiServer) -> None:
        await c.create(NODES, {"metadata": {"name": "node-a"}})
        watching = Watching(c)
        rec = SliceReconciler(watching, "node-a", DEVICES, resync_delay=0.01)  # type: ignore[arg-type]
        stop = asyncio.Event()
        task = asyncio.create_task(rec.run(stop))
        await rec.wait_written(10)

        async def watches(n: int) -> bool:
            return watching.watches == n

        await eventually(lambda: watches(1))
        for n in range(1, 4):
            rec.set_devices(build_devices(TOPO, exclude=CPUSet(range(n))))
            await rec.wait_written(10)

        async def own_events_seen() -> bool:  # the events of those writes come back on the open watch
            return rec.own_events >= 3  # one slice written each time

        await eventually(own_events_seen)
        assert watching.watches == 1
        assert rec.syncs == 4  # the first sync and three writes: no re-sync for our own events
        first = (await ours(c))[0]
        changed = copy.deepcopy(first)
        changed["spec"]["devices"] = changed["spec"]["devices"][:5]
        await c.replace(RESOURCE_SLICES, changed)

        async def restored() -> bool:
            return sum(len(s["spec"]["devices"]) for s in await ours(c)) == 256 - 3

        await eventually(restored)
        await eventually(lambda: watches(2))  # a full sync, and the watch opened again from its list
        stop.set()
        await asyncio.wait_for(task, 5)

    scenario(body)


def test_a_device_changed_under_its_name_is_published_as_it_is_now() -> None:
    """A slice's device dicts are reused while it lists the same device objects: a new object under
    an old name (an attribute changed) is published with its own fields, and changed back again."""
    before = DEVICES[3]
    after = dataclasses.replace(before, attributes={**before.attributes, "isolated": not before.attributes["isolated"]})

    async def published(c: KubeClient) -> dict[str, Any]:
        (device,) = [d for s in await ours(c) for d in s["spec"]["devices"] if d["name"] == before.name]
        return dict(device["attributes"]["isolated"])

    async def body(c: KubeClient, server: ApiServer) -> None:
        await c.create(NODES, {"metadata": {"name": "node-a"}})
        rec = SliceReconciler(c, "node-a", DEVICES, resync_delay=0.01, homes=DEVICES)
        stop = asyncio.Event()
        task = asyncio.create_task(rec.run(stop))
        await rec.wait_written(10)
        assert await published(c) == {"bool": before.attributes["isolated"]}
        for device in (after, before):
            rec.set_devices([device if d is before else d for d in DEVICES])
            await rec.wait_written(10)
            assert await published(c) == {"bool": device.attributes["isolated"]}
        assert rec.generation == 1  # one slice rewritten each time
        stop.set()
        await asyncio.wait_for(task, 5)

    scenario(body)


def _omitempty(kind: Kind, obj: dict[str, Any]) -> None:
    """What the API server does with a ResourceSlice: members holding an empty list or map are
    not stored (the Go types mark them omitempty)."""
    if kind.plural == "resourceslices":
        spec = obj.get("spec", {})
        for key in [k for k, v in spec.items() if v in ([], {})]:
            del spec[key]
        for d in spec.get("devices", []):
            for key in [k for k, v in d.items() if v in ([], {})]:
                del d[key]


def test_an_empty_device_list_stored_without_devices_is_not_reported_as_dropped(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """No device offered: the server stores the slice without ``devices``. That is the slice as
    sent (an empty list and an absent one are the same): no error, no re-sync, and a slice with
    devices again is written as usual."""
    store = Store()
    store.admission.append(_omitempty)

    async def body(c: KubeClient, server: ApiServer) -> None:
        await c.create(NODES, {"metadata": {"name": "node-a"}})
        rec = SliceReconciler(c, "node-a", [], resync_delay=0.01)
        stop = asyncio.Event()
        task = asyncio.create_task(rec.run(stop))
        await rec.wait_written(10)
        (s,) = await ours(c)
        assert "devices" not in s["spec"]  # stored as the real server stores it
        await asyncio.sleep(0.3)
        assert rec.syncs == 1  # the stored slice is the one wanted: no re-sync
        rec.set_devices(DEVICES[:2])
        await rec.wait_written(10)
        rec.set_devices([])
        await rec.wait_written(10)
        assert not rec.dropped_fields
        stop.set()
        await asyncio.wait_for(task, 5)

    caplog.set_level(logging.WARNING, logger="topodra.dra.reconciler")
    scenario(body, store)
    assert not [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]


def test_a_field_dropped_on_a_later_write_of_the_same_devices_is_reported() -> None:
    """The server stored a slice as sent, then drops a field (a feature gate turned off): the next
    write of the same device objects is still read against what was sent, and the drop reported."""
    dropping = [False]

    def gate(kind: Kind, obj: dict[str, Any]) -> None:
        if dropping[0] and kind.plural == "resourceslices":
            for d in obj.get("spec", {}).get("devices", []):
                d.get("attributes", {}).pop("smtSibling", None)

    store = Store()
    store.admission.append(gate)

    async def body(c: KubeClient, server: ApiServer) -> None:
        await c.create(NODES, {"metadata": {"name": "node-a"}})
        rec = SliceReconciler(c, "node-a", DEVICES, resync_delay=0.01, homes=DEVICES)
        stop = asyncio.Event()
        task = asyncio.create_task(rec.run(stop))
        await rec.wait_written(10)
        rec.set_devices(DEVICES[2:])  # a core withdrawn from slice 0, stored as sent
        await rec.wait_written(10)
        assert not rec.dropped_fields
        dropping[0] = True
        rec.set_devices(DEVICES[4:])  # the next core: slice 0 again, its other devices as accepted before
        await rec.wait_written(10)
        assert rec.dropped_fields == {"node-a-native.cpu-0"}
        stop.set()
        await asyncio.wait_for(task, 5)

    scenario(body, store)


def test_a_device_listed_twice_is_refused_with_homes_or_without() -> None:
    async def body(c: KubeClient, server: ApiServer) -> None:
        for homes in (DEVICES, None):
            rec = SliceReconciler(c, "node-a", [*DEVICES, DEVICES[7]], homes=homes)
            try:
                await rec.sync()
            except ValueError as exc:
                assert DEVICES[7].name in str(exc)
            else:
                raise AssertionError("a device listed twice was published")
        assert await ours(c) == []

    scenario(body)


def test_slices_deleted_while_the_pool_is_rewritten_are_a_re_sync_not_a_failure(caplog: pytest.LogCaptureFixture) -> None:
    """The kubelet wipes a node's slices one by one (a DeleteCollection) when it starts: the
    reconciler re-syncs at the first deletion and then meets the next one while it rewrites the
    pool (a real kube-apiserver answered the update 404). That is drift to follow at once, not an
    API failure to warn about and back off from."""
    store = Store()
    kind = KINDS[("resource.k8s.io", "resourceslices")]
    wiping: list[str] = []

    def wipe_on(k: Kind, obj: dict[str, Any]) -> None:  # the wipe goes on while slice 0 is written
        if k.plural == "resourceslices" and obj["metadata"]["name"] == "node-a-native.cpu-0" and wiping:
            store.delete(kind, None, wiping.pop())

    store.admission.append(wipe_on)

    async def body(c: KubeClient, server: ApiServer) -> None:
        await c.create(NODES, {"metadata": {"name": "node-a"}})
        rec = SliceReconciler(c, "node-a", DEVICES, resync_delay=0.01)
        stop = asyncio.Event()
        task = asyncio.create_task(rec.run(stop))
        await asyncio.wait_for(rec.synced.wait(), 10)
        assert len(await ours(c)) == 2
        wiping.append("node-a-native.cpu-1")
        await c.delete(RESOURCE_SLICES, "node-a-native.cpu-0")

        async def whole_again() -> bool:
            return not wiping and len(await ours(c)) == 2

        await eventually(whole_again)
        stop.set()
        await asyncio.wait_for(task, 5)

    with caplog.at_level(logging.INFO, logger="topodra.dra.reconciler"):
        scenario(body, store)
    assert not [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    assert any("changed while it was written" in r.getMessage() for r in caplog.records)
