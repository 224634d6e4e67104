"""The embedded runtime enforces the real runtime's rules, and our stub lives by them."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from pathlib import Path

import pytest

from topodra.cpuset import CPUSet
from topodra.embedded.runtime import ContainerChange, EmbeddedRuntime
from topodra.nri.errors import RpcError
from topodra.nri.plugin import Plugin
from topodra.nri.proto import api_pb2
from topodra.nri.stub import Stub
from topodra.nri.ttrpc import Code
from topodra.nri.types import (
    Container,
    ContainerAdjustment,
    ContainerUpdate,
    CreateContainerResult,
    Event,
    LinuxResources,
    Pod,
)

from .nri_harness import RawPlugin, run, runtime_with

POD = Pod(id="p1", name="web", uid="u1", namespace="default")


def ctr(cid: str = "c1", cpus: str | None = None, **kw: object) -> Container:
    res = LinuxResources(cpus=CPUSet.parse(cpus) if cpus else None, cpu_shares=1024)
    return Container(id=cid, pod_sandbox_id="p1", name=f"name-{cid}", resources=res, **kw)  # type: ignore[arg-type]


class Pinner(Plugin):
    """Pins each new container to the next free CPU pair and moves the previous one."""

    def __init__(self) -> None:
        self.events: list[str] = []
        self.synced: list[str] = []
        self.next = 0

    async def synchronize(self, pods: Sequence[Pod], containers: Sequence[Container]) -> list[ContainerUpdate]:
        self.synced = [c.id for c in containers]
        return [ContainerUpdate(c.id, cpus=CPUSet({7})) for c in containers]

    async def create_container(self, pod: Pod, container: Container) -> ContainerAdjustment:
        self.events.append(f"create {container.id}")
        cpus = CPUSet({self.next, self.next + 1})
        self.next += 2
        return ContainerAdjustment(cpus=cpus, mems=CPUSet({0}), annotations={"pinned": str(cpus)})

    async def start_container(self, pod: Pod, container: Container) -> None:
        self.events.append(f"start {container.id} {container.cpus}")

    async def stop_container(self, pod: Pod, container: Container) -> list[ContainerUpdate]:
        self.events.append(f"stop {container.id}")
        return [ContainerUpdate("c2", cpus=CPUSet.parse("0-3"))]

    async def remove_container(self, pod: Pod, container: Container) -> None:
        self.events.append(f"remove {container.id}")

    async def run_pod_sandbox(self, pod: Pod) -> None:
        self.events.append(f"run {pod.name}")


def test_lifecycle_adjustments_updates_and_change_notifications(tmp_path: Path) -> None:
    async def main() -> None:
        plugin = Pinner()
        changes: list[ContainerChange] = []
        async with runtime_with(tmp_path, (plugin, "pinner", "10"), on_change=changes.append) as (rt, _):
            queue = rt.store.subscribe()
            assert (await rt.run_pod_sandbox(POD)).ok
            res = (await rt.create_container(ctr("c1", cpus="0-7"))).check()
            assert res.container is not None
            assert res.container.cpus == CPUSet({0, 1})
            assert res.container.annotations["pinned"] == "0-1"
            assert rt.store.container("c1").mems == CPUSet({0})
            (await rt.start_container("c1")).check()
            (await rt.create_container(ctr("c2"))).check()
            res = (await rt.stop_container("c1")).check()
            assert res.updates == (ContainerUpdate("c2", cpus=CPUSet.parse("0-3")),)
            assert rt.store.container("c2").cpus == CPUSet.parse("0-3")
            (await rt.remove_container("c1")).check()
            assert plugin.events == ["run web", "create c1", "start c1 0-1", "create c2", "stop c1", "remove c1"]
            got = [queue.get_nowait() for _ in range(queue.qsize())]
            assert [(c.container_id, str(c.cpus), c.source) for c in got] == [
                ("c1", "0-1", "adjustment"),
                ("c2", "2-3", "adjustment"),
                ("c2", "0-3", "update"),
            ]
            assert got[0].plugin == "10-pinner"
            assert got[0].previous_cpus is None
            assert changes == got

    run(main())


def test_synchronize_sees_existing_containers_and_its_updates_apply(tmp_path: Path) -> None:
    async def main() -> None:
        rt = EmbeddedRuntime(tmp_path / "nri.sock", request_timeout=1)
        await rt.start()
        await rt.run_pod_sandbox(POD)
        await rt.create_container(ctr("c1", cpus="0-3"))
        queue = rt.store.subscribe()
        plugin = Pinner()
        stub = Stub(plugin, socket_path=str(tmp_path / "nri.sock"), name="late", idx="20", env={})
        task = asyncio.get_running_loop().create_task(stub.run())
        await rt.wait_for_plugins(1)
        assert plugin.synced == ["c1"]
        assert rt.store.container("c1").cpus == CPUSet({7})
        change = queue.get_nowait()
        assert (change.source, change.plugin, change.previous_cpus) == ("synchronize", "20-late", CPUSet.parse("0-3"))
        await stub.stop()
        await task
        await rt.stop()

    run(main())


def test_registration_timeout_closes_the_connection(tmp_path: Path) -> None:
    async def main() -> None:
        async with EmbeddedRuntime(tmp_path / "nri.sock", registration_timeout=0.2) as rt:
            raw = await RawPlugin.connect(tmp_path / "nri.sock")
            await asyncio.wait_for(raw.eof.wait(), 2)
            assert "plugin registration timed out" in " ".join(rt.log)
            assert rt.plugins == []
            await raw.close()

    run(main())


@pytest.mark.parametrize(
    ("name", "idx", "message"),
    [
        ("raw", "1", 'invalid plugin index: invalid plugin index "1", must be 2 digits'),
        ("raw", "abc", 'invalid plugin index: invalid plugin index "abc", must be 2 digits'),
        ("raw", "a1", 'invalid plugin index: invalid plugin index "a1" (not [0-9][0-9])'),
        ("bad name", "10", "invalid plugin name: invalid plugin name \"bad name\": contains invalid character ' '"),
        ("", "10", "invalid plugin name: invalid plugin name: name is empty"),
    ],
)
def test_registration_is_validated_and_the_connection_left_open(tmp_path: Path, name: str, idx: str, message: str) -> None:
    async def main() -> None:
        async with EmbeddedRuntime(tmp_path / "nri.sock", registration_timeout=0.3) as rt:
            raw = await RawPlugin.connect(tmp_path / "nri.sock")
            reply = await raw.response(raw.register(name, idx))
            assert reply.status.code == Code.UNKNOWN
            assert reply.status.message.replace("'", '"') == message.replace("'", '"')
            await asyncio.sleep(0.4)  # past the registration timeout: still open, and never configured
            assert not raw.eof.is_set()
            assert raw.requests.empty()
            assert rt.plugins == []
            await raw.close()

    run(main())


@pytest.mark.parametrize(("version", "events", "ok"), [("v0.8.0", 0x7FF, True), ("v0.8.0", 0x800, False),
                                                       ("v0.12.0", 0x3FFF, True), ("v0.12.0", 0x4000, False)])
def test_event_mask_is_checked_against_the_emulated_version(tmp_path: Path, version: str, events: int, ok: bool) -> None:
    async def main() -> None:
        async with EmbeddedRuntime(tmp_path / "nri.sock", nri_version=version, request_timeout=0.5) as rt:
            raw = await RawPlugin.connect(tmp_path / "nri.sock")
            sid = raw.register()
            configure = await raw.request()
            fields = api_pb2.ConfigureRequest.FromString(configure.request.payload)
            assert bool(fields.NRI_version) == (version == "v0.12.0")
            assert fields.request_timeout == 500
            raw.reply(configure.stream_id, api_pb2.ConfigureResponse(events=events))
            await raw.response(sid)
            if ok:
                sync = await raw.request()
                assert sync.request.method == "Synchronize"
                raw.reply(sync.stream_id, api_pb2.SynchronizeResponse())
                assert [p.events for p in await rt.wait_for_plugins(1)] == [frozenset(e for e in Event if e.bit & events)]
            else:
                await asyncio.wait_for(raw.eof.wait(), 2)
                assert f"invalid plugin events: 0x{events:x}" in " ".join(rt.log)
            await raw.close()

    run(main())


def test_stub_subscribes_only_what_an_old_runtime_accepts(tmp_path: Path) -> None:
    class Wants(Plugin):
        async def update_pod_sandbox(self, pod: Pod, overhead: LinuxResources | None, resources: LinuxResources | None) -> None:
            return None

        async def create_container(self, pod: Pod, container: Container) -> None:
            return None

    async def main() -> None:
        async with runtime_with(tmp_path, (Wants(), "wants", "10"), nri_version="v0.8.0") as (rt, stubs):
            assert stubs[0].subscribed_events == {Event.CREATE_CONTAINER}
            assert rt.plugins[0].events == {Event.CREATE_CONTAINER}

    run(main())


class Notified(Plugin):
    def __init__(self) -> None:
        self.seen: list[str] = []

    async def run_pod_sandbox(self, pod: Pod) -> None:
        self.seen.append("run")

    async def post_create_container(self, pod: Pod, container: Container) -> None:
        self.seen.append("post-create")

    async def start_container(self, pod: Pod, container: Container) -> None:
        self.seen.append("start")

    async def remove_container(self, pod: Pod, container: Container) -> None:
        self.seen.append("remove")


@pytest.mark.parametrize(("version", "legacy", "fallback"), [("v0.12.0", True, True), ("v0.12.0", False, False),
                                                             ("v0.8.0", False, False)])
def test_state_change_fallback(tmp_path: Path, version: str, legacy: bool, fallback: bool) -> None:
    async def main() -> None:
        plugin = Notified()
        async with runtime_with(tmp_path, (plugin, "legacy", "10"), nri_version=version,
                                stub_options={"use_state_change": legacy}) as (rt, _):
            await rt.run_pod_sandbox(POD)
            await rt.create_container(ctr())
            await rt.start_container("c1")
            await rt.stop_container("c1")
            await rt.remove_container("c1")
            assert plugin.seen == ["run", "post-create", "start", "remove"]
            assert rt.plugins[0].state_change_fallback is fallback
            warnings = [line for line in rt.log if "deprecated StateChange" in line]
            assert len(warnings) == (4 if fallback else 0)  # once per event type

    run(main())


def test_split_synchronize_over_4_mib(tmp_path: Path) -> None:
    class Counter(Plugin):
        count = 0

        async def synchronize(self, pods: Sequence[Pod], containers: Sequence[Container]) -> None:
            Counter.count = len(containers)

    async def main() -> None:
        rt = EmbeddedRuntime(tmp_path / "nri.sock", request_timeout=5)
        await rt.start()
        filler = {"filler": "x" * 3000}
        for p in range(20):
            await rt.run_pod_sandbox(Pod(id=f"p{p}", name=f"pod{p}"))
            for i in range(100):  # 2000 containers, ~6 MB of state
                await rt.create_container(Container(id=f"c{p}-{i}", pod_sandbox_id=f"p{p}", annotations=filler))
        stub = Stub(Counter(), socket_path=str(tmp_path / "nri.sock"), name="big", idx="10", env={})
        task = asyncio.get_running_loop().create_task(stub.run())
        await rt.wait_for_plugins(1, timeout=10)
        assert Counter.count == 2000
        chunks = [line for line in rt.log if line.startswith("sync chunk")]
        assert len(chunks) == 2, chunks
        assert "more=True" in chunks[0]
        assert "more=False" in chunks[1]
        await stub.stop()
        await task
        await rt.stop()

    run(main(), 60)


def test_split_synchronize_answered_wrongly_drops_the_plugin(tmp_path: Path) -> None:
    async def main() -> None:
        async with EmbeddedRuntime(tmp_path / "nri.sock", request_timeout=5) as rt:
            await rt.run_pod_sandbox(POD)
            for i in range(1200):
                await rt.create_container(ctr(f"c{i}", annotations={"f": "y" * 4000}))
            raw = await RawPlugin.connect(tmp_path / "nri.sock")
            sid = raw.register()
            configure = await raw.request()
            raw.reply(configure.stream_id, api_pb2.ConfigureResponse(events=0x7FF))
            await raw.response(sid)
            sync = await raw.request()
            assert api_pb2.SynchronizeRequest.FromString(sync.request.payload).more
            assert sync.stream_id == 5  # stream 3 went to the refused oversized attempt
            raw.reply(sync.stream_id, api_pb2.SynchronizeResponse())  # more=false: wrong
            await asyncio.wait_for(raw.eof.wait(), 5)
            assert "plugin does not handle split sync requests" in " ".join(rt.log)
            await raw.close()

    run(main(), 60)


def test_unanswered_request_drops_the_plugin_and_the_operation_goes_on(tmp_path: Path) -> None:
    async def main() -> None:
        async with EmbeddedRuntime(tmp_path / "nri.sock", request_timeout=0.3) as rt:
            raw = await RawPlugin.connect(tmp_path / "nri.sock")
            await raw.handshake(events=Event.CREATE_CONTAINER.bit)
            await rt.wait_for_plugins(1)
            await rt.run_pod_sandbox(POD)
            res = await rt.create_container(ctr())  # the raw plugin never answers
            assert res.ok
            assert res.dropped == ("50-raw",)
            assert rt.plugins == []
            gone = await rt.wait_for_plugin_gone("50-raw")
            assert gone.close_reason == "context deadline exceeded"
            assert "failed to handle CreateContainer request: context deadline exceeded" in " ".join(rt.log)
            await raw.close()

    run(main())


def test_handler_errors_fail_the_cri_call_but_keep_the_plugin(tmp_path: Path) -> None:
    class Refuses(Plugin):
        async def create_container(self, pod: Pod, container: Container) -> None:
            raise RuntimeError("no CPUs left")

    async def main() -> None:
        async with runtime_with(tmp_path, (Refuses(), "refuses", "10")) as (rt, _):
            await rt.run_pod_sandbox(POD)
            res = await rt.create_container(ctr())
            assert res.error == "rpc error: code = Unknown desc = no CPUs left"
            with pytest.raises(Exception, match="no CPUs left"):
                res.check()
            assert [p.id for p in rt.plugins] == ["10-refuses"]
            assert rt.store.containers() == []

    run(main())


def test_slow_handler_answers_deadline_exceeded_before_the_runtime_gives_up(tmp_path: Path) -> None:
    class Slow(Plugin):
        cancelled = False

        async def create_container(self, pod: Pod, container: Container) -> None:
            try:
                await asyncio.Event().wait()  # never answers: only the deadline ends it
            except asyncio.CancelledError:
                Slow.cancelled = True
                raise

    async def main() -> None:
        async with runtime_with(tmp_path, (Slow(), "slow", "10"), request_timeout=0.4) as (rt, stubs):
            await rt.run_pod_sandbox(POD)
            res = await rt.create_container(ctr())
            assert res.error is not None
            assert "code = DeadlineExceeded" in res.error
            assert Slow.cancelled
            assert [p.id for p in rt.plugins] == ["10-slow"]  # still connected
            assert stubs[0].synchronized

    run(main())


class Moves(Plugin):
    """On create, also moves c0 (a running container) with an unsolicited update."""

    def __init__(self, stub_ref: list[Stub], *, await_it: bool = False) -> None:
        self.stub_ref = stub_ref
        self.await_it = await_it
        self.future: asyncio.Future[list[ContainerUpdate]] | None = None

    async def create_container(self, pod: Pod, container: Container) -> ContainerAdjustment | None:
        if container.id == "c0":
            return None
        fut = self.stub_ref[0].update_containers([ContainerUpdate("c0", cpus=CPUSet({5}))])
        self.future = fut
        if self.await_it:
            await fut  # impossible: the update can only go out after this reply
        return ContainerAdjustment(cpus=CPUSet({4}))


@pytest.mark.parametrize("lock", [True, False])
def test_unsolicited_update_from_a_handler_goes_out_after_the_reply(tmp_path: Path, lock: bool) -> None:
    async def main() -> None:
        ref: list[Stub] = []
        plugin = Moves(ref)
        async with runtime_with(tmp_path, (plugin, "moves", "10"), containerd_lock=lock) as (rt, stubs):
            ref.append(stubs[0])
            queue = rt.store.subscribe()
            await rt.run_pod_sandbox(POD)
            (await rt.create_container(ctr("c0"))).check()
            (await rt.create_container(ctr("c1"))).check()
            assert plugin.future is not None
            assert await asyncio.wait_for(plugin.future, 2) == []
            changes = [await asyncio.wait_for(queue.get(), 2) for _ in range(2)]
            assert [(c.container_id, str(c.cpus), c.source) for c in changes] == [
                ("c1", "4", "adjustment"),
                ("c0", "5", "unsolicited"),
            ]
            assert rt.store.container("c0").cpus == CPUSet({5})
            assert [p.id for p in rt.plugins] == ["10-moves"]

    run(main())


def test_awaiting_the_update_inside_the_handler_is_a_clear_error(tmp_path: Path) -> None:
    async def main() -> None:
        ref: list[Stub] = []
        async with runtime_with(tmp_path, (Moves(ref, await_it=True), "moves", "10")) as (rt, stubs):
            ref.append(stubs[0])
            await rt.run_pod_sandbox(POD)
            await rt.create_container(ctr("c0"))
            res = await rt.create_container(ctr("c1"))
            assert res.error is not None
            assert "awaited inside an event handler" in res.error
            assert [p.id for p in rt.plugins] == ["10-moves"]

    run(main())


@pytest.mark.parametrize("lock", [True, False])
def test_update_requested_inside_an_event_deadlocks_with_the_containerd_lock(tmp_path: Path, lock: bool) -> None:
    """A plugin that waits for UpdateContainers before answering: what containerd does to it."""

    async def main() -> None:
        async with EmbeddedRuntime(tmp_path / "nri.sock", request_timeout=0.4, containerd_lock=lock) as rt:
            await rt.run_pod_sandbox(POD)
            await rt.create_container(ctr("c0"))
            raw = await RawPlugin.connect(tmp_path / "nri.sock")
            await raw.handshake(events=Event.CREATE_CONTAINER.bit)
            await rt.wait_for_plugins(1)
            queue = rt.store.subscribe()
            create = asyncio.get_running_loop().create_task(rt.create_container(ctr("c1")))
            event = await raw.request()
            update = api_pb2.UpdateContainersRequest()
            update.update.add(container_id="c0").linux.resources.cpu.cpus = "3"
            sid = raw.call("nri.pkg.api.v1alpha1.Runtime", "UpdateContainers", update)
            if lock:
                with pytest.raises(TimeoutError):
                    await raw.response(sid, timeout=0.8)  # never answered: the runtime holds its lock
                res = await create
                assert res.ok
                assert res.dropped == ("50-raw",)
                change = await asyncio.wait_for(queue.get(), 1)  # applied once the lock was free
                assert (change.container_id, change.cpus, change.source) == ("c0", CPUSet({3}), "unsolicited")
                await asyncio.wait_for(raw.eof.wait(), 2)
            else:
                assert (await raw.response(sid)).status.ok
                raw.reply(event.stream_id, api_pb2.CreateContainerResponse())
                assert (await create).dropped == ()
            await raw.close()

    run(main())


@pytest.mark.parametrize(("max_frame", "go_rules", "accepted"), [(4096, True, True), (100_000, True, False),
                                                                  (100_000, False, True)])
def test_frame_size_rule(tmp_path: Path, max_frame: int, go_rules: bool, accepted: bool) -> None:
    async def main() -> None:
        async with EmbeddedRuntime(tmp_path / "nri.sock", request_timeout=1, go_frame_rules=go_rules) as rt:
            raw = await RawPlugin.connect(tmp_path / "nri.sock")
            await raw.handshake(events=Event.CREATE_CONTAINER.bit)
            await rt.wait_for_plugins(1)
            await rt.run_pod_sandbox(POD)
            create = asyncio.get_running_loop().create_task(rt.create_container(ctr()))
            event = await raw.request()
            reply = api_pb2.CreateContainerResponse()
            for i in range(60):
                reply.adjust.annotations[f"filler-{i:04d}"] = "x" * 100
            raw.reply(event.stream_id, reply, max_frame=max_frame)
            res = await create
            assert res.ok
            assert res.container is not None
            assert ("filler-0000" in res.container.annotations) is accepted
            assert (res.dropped == ()) is accepted
            await raw.close()

    run(main())


def test_two_plugins_setting_the_same_field_conflict(tmp_path: Path) -> None:
    class SetsCpus(Plugin):
        def __init__(self, cpus: str) -> None:
            self.cpus = CPUSet.parse(cpus)

        async def create_container(self, pod: Pod, container: Container) -> ContainerAdjustment:
            return ContainerAdjustment(cpus=self.cpus)

    class SetsMems(Plugin):
        async def create_container(self, pod: Pod, container: Container) -> ContainerAdjustment:
            return ContainerAdjustment(mems=CPUSet({1}))

    async def main() -> None:
        async with runtime_with(tmp_path, (SetsCpus("1"), "a", "10"), (SetsCpus("2"), "b", "20")) as (rt, _):
            await rt.run_pod_sandbox(POD)
            res = await rt.create_container(ctr())
            assert res.error == 'plugins "20-b" and "10-a" both tried to set CPUSetCPUs'
        async with runtime_with(tmp_path, (SetsCpus("1"), "a", "10"), (SetsMems(), "m", "20")) as (rt, _):
            await rt.run_pod_sandbox(POD)
            res = (await rt.create_container(ctr())).check()
            assert res.container is not None
            assert (res.container.cpus, res.container.mems) == (CPUSet({1}), CPUSet({1}))

    run(main())


def test_update_of_the_container_being_created_is_refused_by_stub_and_runtime(tmp_path: Path) -> None:
    class SelfUpdate(Plugin):
        async def create_container(self, pod: Pod, container: Container) -> CreateContainerResult:
            return CreateContainerResult(updates=(ContainerUpdate(container.id, cpus=CPUSet({1})),))

    async def main() -> None:
        async with runtime_with(tmp_path, (SelfUpdate(), "self", "10")) as (rt, _):
            await rt.run_pod_sandbox(POD)
            res = await rt.create_container(ctr())
            assert res.error is not None
            assert "during its own creation" in res.error
        async with EmbeddedRuntime(tmp_path / "nri.sock", request_timeout=1) as rt:
            raw = await RawPlugin.connect(tmp_path / "nri.sock")
            await raw.handshake(events=Event.CREATE_CONTAINER.bit)
            await rt.wait_for_plugins(1)
            await rt.run_pod_sandbox(POD)
            create = asyncio.get_running_loop().create_task(rt.create_container(ctr()))
            event = await raw.request()
            reply = api_pb2.CreateContainerResponse()
            reply.update.add(container_id="c1").linux.resources.cpu.cpus = "1"
            raw.reply(event.stream_id, reply)
            assert (await create).error == 'plugin "50-raw" asked update of "c1" during creation'
            await raw.close()

    run(main())


def test_validator_sees_the_merged_adjustment_and_can_reject(tmp_path: Path) -> None:
    class Adjusts(Plugin):
        async def create_container(self, pod: Pod, container: Container) -> ContainerAdjustment:
            return ContainerAdjustment(cpus=CPUSet({3}), annotations={"a": "1"})

    class Validator(Plugin):
        seen: list[tuple[CPUSet | None, dict[str, str]]] = []

        async def validate_container_adjustment(self, pod: Pod, container: Container,
                                                adjustment: ContainerAdjustment | None,
                                                updates: Sequence[ContainerUpdate]) -> str | None:
            assert adjustment is not None
            Validator.seen.append((adjustment.cpus, dict(adjustment.annotations)))
            return "cpu 3 is reserved" if adjustment.cpus == CPUSet({3}) else None

    async def main() -> None:
        async with runtime_with(tmp_path, (Adjusts(), "adj", "10"), (Validator(), "val", "90")) as (rt, _):
            await rt.run_pod_sandbox(POD)
            res = await rt.create_container(ctr())
            assert res.error == 'validator "90-val" rejected container adjustment, reason: cpu 3 is reserved'
            assert Validator.seen == [(CPUSet({3}), {"a": "1"})]

    run(main())


def test_a_failed_unsolicited_update_fails_the_call_after_applying_the_others(tmp_path: Path) -> None:
    """containerd applies every update it can, then answers the whole call with an error
    (ttrpc drops the failed list); a stopped container's update fails."""

    async def main() -> None:
        async with runtime_with(tmp_path, (Plugin(), "p", "10"), fail_updates={"c1"},
                                online_cpus=CPUSet.parse("0-3")) as (rt, stubs):
            await rt.run_pod_sandbox(POD)
            for cid in ("c1", "c2", "c3"):
                await rt.create_container(ctr(cid))
            await rt.start_container("c3")
            await rt.stop_container("c3")
            with pytest.raises(RpcError, match="NRI update of some containers failed"):
                await stubs[0].update_containers([
                    ContainerUpdate("c1", cpus=CPUSet({1})),
                    ContainerUpdate("c2", cpus=CPUSet({9})),  # not online
                    ContainerUpdate("c2", mems=CPUSet({0})),
                    ContainerUpdate("c3", cpus=CPUSet({2})),  # stopped
                    ContainerUpdate("gone", cpus=CPUSet({1}), ignore_failure=True),
                ])
            assert rt.store.container("c2").mems == CPUSet({0})  # applied despite the error
            assert rt.store.container("c3").cpus is None
            # All good: a plain reply.
            assert await stubs[0].update_containers([ContainerUpdate("c2", cpus=CPUSet({3}))]) == []
            assert rt.store.container("c2").cpus == CPUSet({3})

    run(main())


def test_update_during_the_start_window_reaches_the_spec_not_the_task(tmp_path: Path) -> None:
    """containerd's StartContainer: the task is created from the spec; an update that arrives before the
    container is running is stored in the spec but never applied to the task."""
    gate = asyncio.Event()
    inside = asyncio.Event()

    async def window(container_id: str) -> None:
        inside.set()
        await gate.wait()

    async def main() -> None:
        async with runtime_with(tmp_path, (Plugin(), "p", "10"), start_gate=window,
                                cgroup_root=tmp_path / "cgroup") as (rt, stubs):
            await rt.run_pod_sandbox(POD)
            await rt.create_container(ctr("c1", cpus="0-1", cgroups_path="/kubepods/pod1/c1"))
            await stubs[0].update_containers([ContainerUpdate("c1", cpus=CPUSet({1, 2}))])  # before start: kept
            assert rt.store.applied("c1") is None
            starting = asyncio.ensure_future(rt.start_container("c1"))
            await inside.wait()
            assert rt.store.applied("c1") == (CPUSet({1, 2}), None)
            await stubs[0].update_containers([ContainerUpdate("c1", cpus=CPUSet({1}))])  # lost
            gate.set()
            (await starting).check()
            assert rt.store.container("c1").cpus == CPUSet({1})
            assert rt.store.applied("c1") == (CPUSet({1, 2}), None)
            assert (tmp_path / "cgroup/kubepods/pod1/c1/cpuset.cpus").read_text() == "1-2\n"
            assert [u.container_id for u in rt.lost_updates] == ["c1"]
            # Once running, updates reach the task again.
            await stubs[0].update_containers([ContainerUpdate("c1", cpus=CPUSet({3}))])
            assert rt.store.applied("c1") == (CPUSet({3}), None)
            assert (tmp_path / "cgroup/kubepods/pod1/c1/cpuset.cpus").read_text() == "3\n"
            await rt.stop_container("c1")
            await rt.remove_container("c1")
            assert not (tmp_path / "cgroup/kubepods/pod1/c1").exists()

    run(main())


def test_adjustment_outside_online_cpus_fails_creation(tmp_path: Path) -> None:
    class Far(Plugin):
        async def create_container(self, pod: Pod, container: Container) -> ContainerAdjustment:
            return ContainerAdjustment(cpus=CPUSet({64}))

    async def main() -> None:
        async with runtime_with(tmp_path, (Far(), "far", "10"), online_cpus=CPUSet.parse("0-7")) as (rt, _):
            await rt.run_pod_sandbox(POD)
            res = await rt.create_container(ctr())
            assert res.error is not None
            assert "CPUs 64 are not online" in res.error

    run(main())


def test_empty_cpuset_never_reaches_the_runtime(tmp_path: Path) -> None:
    class Empty(Plugin):
        async def create_container(self, pod: Pod, container: Container) -> ContainerAdjustment:
            return ContainerAdjustment(cpus=CPUSet())

    async def main() -> None:
        async with runtime_with(tmp_path, (Empty(), "empty", "10")) as (rt, _):
            await rt.run_pod_sandbox(POD)
            res = await rt.create_container(ctr(cpus="0-3"))
            assert res.error is not None
            assert "empty set" in res.error
            assert rt.store.containers() == []

    run(main())


def test_update_container_keeps_the_plugins_cpuset(tmp_path: Path) -> None:
    class Keeps(Plugin):
        async def update_container(self, pod: Pod, container: Container,
                                   resources: LinuxResources | None) -> list[ContainerUpdate]:
            return [ContainerUpdate(container.id, cpus=CPUSet({1}))]

    async def main() -> None:
        async with runtime_with(tmp_path, (Keeps(), "keeps", "10")) as (rt, _):
            await rt.run_pod_sandbox(POD)
            await rt.create_container(ctr(cpus="0-3"))
            res = (await rt.update_container("c1", LinuxResources(cpus=CPUSet({0}), cpu_shares=2048))).check()
            assert res.container is not None
            assert (res.container.cpus, res.container.resources.cpu_shares if res.container.resources else None) == (
                CPUSet({1}), 2048)

    run(main())


def test_runtime_restart_reconnects_and_resynchronizes(tmp_path: Path) -> None:
    class Syncs(Plugin):
        syncs = 0

        async def synchronize(self, pods: Sequence[Pod], containers: Sequence[Container]) -> None:
            Syncs.syncs += 1

    async def main() -> None:
        path = tmp_path / "nri.sock"
        rt = EmbeddedRuntime(path)
        await rt.start()
        stub = Stub(Syncs(), socket_path=str(path), name="again", idx="10", env={}, backoff_initial=0.05)
        task = asyncio.get_running_loop().create_task(stub.run())
        await rt.wait_for_plugins(1)
        await rt.stop()
        for _ in range(500):  # the stub sees the runtime go (its state may pass through quickly)
            if not stub.synchronized:
                break
            await asyncio.sleep(0.01)
        assert not stub.synchronized
        rt2 = EmbeddedRuntime(path)
        await rt2.start()
        await rt2.wait_for_plugins(1, timeout=5)
        await stub.wait_synchronized(5)
        assert Syncs.syncs == 2
        assert stub.connections == 2
        await stub.stop()
        await task
        await rt2.stop()

    run(main())
