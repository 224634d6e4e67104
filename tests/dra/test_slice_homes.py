"""Stable slice homes: withdrawing devices (the agent after every exclusive grant) rewrites only
their home slice, in place at the same generation, and the pool as the scheduler gathers it is
the offered set at rest and never lists a device twice in between."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from topodra.cpuset import CPUSet
from topodra.dra.devices import Device, build_devices, device_class
from topodra.dra.reconciler import SliceReconciler
from topodra.dra.slices import Homes, chunk_devices
from topodra.embedded.apiserver import ApiServer
from topodra.embedded.store import Store, Watch, kind_for
from topodra.kube.client import NODES, RESOURCE_SLICES, KubeClient
from topodra.sim.allocator import AllocationError, Allocator
from topodra.topology import synthetic_topology

TOPO = synthetic_topology("2s1d2n2l16c2t")  # 256 CPUs, 128 cores of 2 threads
FULL = build_devices(TOPO)  # device order: topology-reversed
NAME_OF_CPU = {next(iter(d.cpus)): d.name for d in FULL}
CORES = sorted({TOPO.cpus[c].core for c in TOPO.online})
SLICES = kind_for("resource.k8s.io", "v1", "resourceslices")
NODE = "node-a"


def core_devices(core: int) -> set[str]:
    return {NAME_OF_CPU[c] for c in TOPO.cpus_of_core(core)}


def _device(i: int, *, advanced: bool = False) -> Device:
    attrs: dict[str, object] = {"i": i}
    if advanced:
        attrs["l"] = (1, 2)
    return Device(name=f"d{i}", attributes=attrs, cpus=CPUSet([i]))  # type: ignore[arg-type]


# --- Homes ------------------------------------------------------------------------------------------
def test_nothing_withdrawn_gives_todays_chunks() -> None:
    for devices in (FULL, FULL[:1], [], [_device(i, advanced=i == 70) for i in range(300)]):
        assert Homes(devices).place(devices) == chunk_devices(devices)


def test_a_withdrawn_device_leaves_a_hole_in_its_home_only() -> None:
    homes = Homes(FULL)
    gone = {FULL[5].name, FULL[6].name}
    placed = homes.place([d for d in FULL if d.name not in gone])
    assert placed is not None
    assert [len(c) for c in placed] == [126, 128]  # today's chunking would give [128, 126]
    assert placed[1] == FULL[128:]
    assert all(d.name not in gone for d in placed[0])


def test_every_device_withdrawn_from_a_slice_leaves_it_empty() -> None:
    homes = Homes(FULL)
    assert homes.place(FULL[128:]) == [[], FULL[128:]]
    assert homes.place([]) == [[], []]


def test_an_unordered_list_is_placed_in_home_order() -> None:
    homes = Homes(FULL)
    assert homes.place(list(reversed(FULL))) == chunk_devices(FULL)


@pytest.mark.parametrize(
    "devices",
    [
        [*FULL, _device(999)],  # a device without a home (hotplug)
        [*FULL[:3], FULL[2]],  # listed twice, next to each other
        [FULL[2], *FULL[:3]],  # listed twice, out of order
    ],
)
def test_a_list_that_does_not_fit_is_refused(devices: list[Device]) -> None:
    assert Homes(FULL).place(devices) is None


def test_a_device_turning_advanced_in_a_full_slice_does_not_fit() -> None:
    plain = [_device(i) for i in range(100)]
    homes = Homes(plain)
    assert len(homes) == 1
    assert homes.place([*plain[:99], _device(99, advanced=True)]) is None  # 100 > 64
    assert homes.place([*plain[:63], _device(99, advanced=True)]) is not None  # 64 fit


MIXED = [_device(i, advanced=i % 97 == 5) for i in range(300)]  # slices of 64 and of 128


def _placed_in_steps(homes: Homes, devices: list[Device], step: int) -> tuple[list[list[Device]] | None, int]:
    steps, pauses = homes.placing(devices, step=step), 0
    while True:
        try:
            next(steps)
        except StopIteration as done:
            return done.value, pauses
        pauses += 1


@settings(max_examples=150, deadline=None)
@given(
    st.sampled_from(["full", "mixed"]),
    st.data(),
    st.integers(1, 300),
)
def test_an_ordered_list_is_cut_where_one_device_at_a_time_puts_it(which: str, data: st.DataObject, step: int) -> None:
    """The agent's offer (in home order) is cut into runs without a step per device: the same
    chunks as placing each device in turn (``_place_unordered``), in as many pieces as asked."""
    full = FULL if which == "full" else MIXED
    withdrawn = data.draw(st.sets(st.integers(0, len(full) - 1), max_size=len(full)))
    devices = [d for j, d in enumerate(full) if j not in withdrawn]
    if which == "mixed" and devices and data.draw(st.booleans()):
        i = data.draw(st.integers(0, len(devices) - 1))  # turns advanced: a new object, the same name
        devices[i] = _device(int(devices[i].name[1:]), advanced=True)
    homes = Homes(full)
    expected = homes._place_unordered(devices)
    assert homes.place(devices) == expected
    placed, pauses = _placed_in_steps(homes, devices, step)
    assert placed == expected
    assert pauses == max(0, -(-len(devices) // step) - 1) + (len(devices) > step)
    if expected is not None:  # each chunk is its home's run of the list, in list order
        assert [d for c in expected for d in c] == devices


# --- the reconciler against the API server double, watched ---------------------------------------
class Gathered:
    """The node's pool as the scheduler's informer sees it, event by event."""

    def __init__(self, watch: Watch) -> None:
        self._watch = watch
        self.objects: dict[str, dict[str, Any]] = {}
        self.events = 0

    def drain(self, before: set[str], after: set[str]) -> list[str]:
        """Applies the queued events, checking the pool at each one; returns their types."""
        seen: list[str] = []
        while not self._watch.queue.empty():
            ev = self._watch.queue.get_nowait()
            assert ev is not None
            name = ev.object["metadata"]["name"]
            if ev.type == "DELETED":
                self.objects.pop(name, None)
            else:
                self.objects[name] = ev.object
            seen.append(ev.type)
            self.events += 1
            check_mid_write(list(self.objects.values()), before, after)
        return seen


def pool_of(slices: Sequence[dict[str, Any]]) -> Any:
    pools = Allocator(slices, [device_class()], budget=None).pools_for(_node())
    assert len(pools) <= 1
    return pools[0] if pools else None


def _node() -> Any:
    from topodra.sim.objects import parse_node

    return parse_node(NODE)


def _claim(name: str, exactly: dict[str, Any]) -> dict[str, Any]:
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": name, "namespace": "default", "uid": f"uid-{name}"},
        "spec": {"devices": {"requests": [{"name": "r", "exactly": {"deviceClassName": "native.cpu", **exactly}}]}},
    }


ONE = _claim("one", {"count": 2})
# every device of one L3 cache (32 CPUs: the most one claim may get)
ALL = _claim("all", {"allocationMode": "All", "selectors": [{"cel": {"expression": 'device.attributes["native.cpu"].l3Cache == 7'}}]})
L3 = {d.name for d in FULL if d.attributes["l3Cache"] == 7}


def check_mid_write(slices: list[dict[str, Any]], before: set[str], after: set[str]) -> None:
    """What the scheduler may see while the pool is written: never a device twice; complete only
    as the offer before or after the write; an allocation only from a complete pool."""
    pool = pool_of(slices)
    if pool is None:
        return
    assert not pool.invalid, pool.invalid_reason
    allocator = Allocator(slices, [device_class()], budget=None)
    if pool.incomplete:
        assert allocator.allocate(NODE, [ONE]) is None  # nothing from a pool being updated
        with pytest.raises(AllocationError, match="currently being updated"):
            allocator.allocate(NODE, [ALL])
        return
    names = [d.name for s in pool.slices for d in s.devices]
    assert len(names) == len(set(names))
    assert set(names) in (before, after)
    two = allocator.allocate(NODE, [ONE])
    assert two is not None
    assert {r["device"] for r in two[0].to_api()["devices"]["results"]} <= set(names)
    every = allocator.allocate(NODE, [ALL])
    assert every is not None
    assert {r["device"] for r in every[0].to_api()["devices"]["results"]} == L3 & set(names)


def published(objects: dict[str, dict[str, Any]]) -> list[list[str]]:
    return [[d["name"] for d in objects[n]["spec"]["devices"]] for n in sorted(objects, key=_index)]


def _index(name: str) -> int:
    return int(name.rsplit("-", 1)[1])


async def _scenario(steps: list[tuple[str, int]]) -> None:
    store = Store()
    async with ApiServer(store) as server:
        client = KubeClient.for_url(server.url)
        try:
            await client.create(NODES, {"metadata": {"name": NODE}})
            homes_box: list[list[Device]] = [FULL]
            rec = SliceReconciler(client, NODE, FULL, homes=lambda: homes_box[0])
            gathered = Gathered(store.watch(SLICES))
            await rec.sync()
            offered = {d.name for d in FULL}
            gathered.drain(set(), offered)
            count = len(gathered.objects)
            withdrawn: set[int] = set()
            rotation = 0
            for op, arg in steps:
                before = offered
                generation = rec.generation
                if op == "rehome":  # the full list changed (a reload): a new home for everything
                    homes_box[0] = FULL[arg:] + FULL[:arg]
                    slices_written = count if arg != rotation else 0
                    rotation = arg
                else:
                    withdrawn ^= {arg}
                    homes = Homes(homes_box[0]).names
                    slices_written = sum(1 for chunk in homes if core_devices(arg) & set(chunk))
                gone = set().union(*(core_devices(c) for c in withdrawn))
                devices = [d for d in FULL if d.name not in gone]
                offered = {d.name for d in devices}
                rec.set_devices(devices)
                await rec.sync(fast=True)
                events = gathered.drain(before, offered)
                # at rest: complete, exactly the offer, every device in its home, as many slices
                pool = pool_of(list(gathered.objects.values()))
                assert pool is not None
                assert pool.usable
                assert {d.name for s in pool.slices for d in s.devices} == offered
                assert len(gathered.objects) == count
                placed = Homes(homes_box[0]).place(devices)
                assert placed is not None
                assert published(gathered.objects) == [[d.name for d in c] for c in placed]
                if slices_written == 1:  # one core in or out of one slice: that slice only, in place
                    assert rec.generation == generation
                    assert events == ["MODIFIED"]
                elif slices_written:  # a core across two homes (rotated homes), or new homes
                    assert rec.generation == generation + 1
                    assert events == ["MODIFIED"] * count
                else:  # the same homes again
                    assert (rec.generation, events) == (generation, [])
        finally:
            await client.close()


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.lists(
        st.one_of(
            st.tuples(st.just("toggle"), st.sampled_from(CORES)),
            st.tuples(st.just("rehome"), st.integers(1, len(FULL) - 1)),
        ),
        min_size=1,
        max_size=8,
    )
)
@pytest.mark.slow
def test_withdraw_and_reoffer_keep_the_pool_whole(steps: list[tuple[str, int]]) -> None:
    asyncio.run(asyncio.wait_for(_scenario(steps), 60))


def _writes(homes: Sequence[Device] | None) -> tuple[list[str], int]:
    """The requests one 2-CPU withdrawal (a core in the first slice) makes, and the generation
    after it."""

    async def main() -> tuple[list[str], int]:
        async with ApiServer() as server:
            client = KubeClient.for_url(server.url)
            try:
                await client.create(NODES, {"metadata": {"name": NODE}})
                rec = SliceReconciler(client, NODE, FULL, homes=homes)
                await rec.sync()
                mark = len(server.requests)
                core = TOPO.cpus[next(iter(FULL[10].cpus))].core
                assert core_devices(core) <= {d.name for d in FULL[:128]}
                rec.set_devices([d for d in FULL if d.name not in core_devices(core)])
                await rec.sync(fast=True)
                return [m for m, _ in server.requests[mark:]], rec.generation
            finally:
                await client.close()

    return asyncio.run(main())


def test_a_core_withdrawal_writes_one_slice_without_a_generation_bump() -> None:
    assert _writes(FULL) == (["PUT"], 1)
    # the peer: the list chunked afresh shifts every later device, so every slice is rewritten
    assert _writes(None) == (["PUT", "PUT"], 2)


def test_a_device_without_a_home_rehomes_the_pool() -> None:
    async def main() -> None:
        async with ApiServer() as server:
            client = KubeClient.for_url(server.url)
            try:
                await client.create(NODES, {"metadata": {"name": NODE}})
                rec = SliceReconciler(client, NODE, FULL[:200], homes=FULL[:200])
                await rec.sync()
                rec.set_devices(FULL[:10] + FULL[100:])  # 56 devices the homes do not know
                report = await rec.sync(fast=True)
                assert rec.rehomed == 1
                assert report.generation == 2
                assert len(report.updated) == 2
                objects = {o["metadata"]["name"]: o for o in server.store.objects(SLICES)}
                assert published(objects) == [[d.name for d in c] for c in chunk_devices(FULL[:10] + FULL[100:])]
                # the new homes hold: withdrawing from them writes one slice again
                rec.set_devices(FULL[:8] + FULL[100:])
                report = await rec.sync(fast=True)
                assert (report.generation, len(report.updated), rec.rehomed) == (2, 1, 1)
            finally:
                await client.close()

    asyncio.run(main())


def test_an_emptied_slice_stays_published_and_a_wiped_one_comes_back_in_its_home() -> None:
    async def main() -> None:
        async with ApiServer() as server:
            client = KubeClient.for_url(server.url)
            try:
                await client.create(NODES, {"metadata": {"name": NODE}})
                rec = SliceReconciler(client, NODE, FULL, homes=FULL)
                await rec.sync()
                rec.set_devices(FULL[128:])  # every device of the first slice withdrawn
                report = await rec.sync(fast=True)
                assert (report.generation, report.updated) == (1, (f"{NODE}-native.cpu-0",))
                objects = {o["metadata"]["name"]: o for o in server.store.objects(SLICES)}
                assert published(objects) == [[], [d.name for d in FULL[128:]]]
                assert {o["spec"]["pool"]["resourceSliceCount"] for o in objects.values()} == {2}
                # the kubelet wipes a slice: a full pass creates it again, at the next generation
                await client.delete(RESOURCE_SLICES, f"{NODE}-native.cpu-1")
                report = await rec.sync()
                assert report.created == (f"{NODE}-native.cpu-1",)
                assert report.generation == 2
                objects = {o["metadata"]["name"]: o for o in server.store.objects(SLICES)}
                assert published(objects) == [[], [d.name for d in FULL[128:]]]
                assert {o["spec"]["pool"]["generation"] for o in objects.values()} == {2}
            finally:
                await client.close()

    asyncio.run(main())


def test_the_agent_withdraws_an_exclusive_core_with_one_slice_write() -> None:
    """The agent's offer glue: a Guaranteed 2-CPU container's core leaves its home slice only, the
    pool generation stays, and the slices are the homes of the offered devices. In ``topology``
    order the first cores come first, so the policy's pick lands in the first slice, where
    chunking the offer afresh would shift the second slice too."""
    from topodra.playground.world import Playground

    def slices(pg: Playground) -> dict[str, dict[str, Any]]:
        return {s["metadata"]["name"]: s for s in pg.store.list(SLICES)["items"]}

    async def main() -> None:
        async with Playground(topology=TOPO, agent_overrides={"devices": {"order": "topology"}}) as pg:
            assert pg.agent is not None
            assert pg.runtime is not None
            await pg.agent.publisher.settle()
            before = slices(pg)
            assert len(before) == 2
            pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "db"}, "spec": {"containers": [
                {"name": "c", "image": "x", "resources": {"requests": {"cpu": "2", "memory": "64Mi"}, "limits": {"cpu": "2", "memory": "64Mi"}}}
            ]}}
            await pg.apply([pod])
            await pg.agent.publisher.settle()
            after = slices(pg)
            held = next(c.cpus for c in pg.runtime.store.containers() if pg.runtime.store.pod(c.pod_sandbox_id).name == "db")
            assert held is not None
            assert len(held) == 2
            changed = [n for n in after if after[n]["metadata"]["resourceVersion"] != before[n]["metadata"]["resourceVersion"]]
            assert len(changed) == 1
            assert changed[0].endswith("-0")
            assert {s["spec"]["pool"]["generation"] for s in after.values()} == {before[changed[0]]["spec"]["pool"]["generation"]}
            offered = pg.agent.publisher.offered_devices()
            assert not {NAME_OF_CPU[c] for c in held} & {d.name for d in offered}
            placed = Homes(pg.agent.publisher.home_devices()).place(offered)
            assert placed is not None
            assert published(after) == [[d.name for d in c] for c in placed]

    asyncio.run(main())
