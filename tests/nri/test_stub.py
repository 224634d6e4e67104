"""The plugin stub against a hand-driven runtime: ordering, versions, bad input, updates."""

from __future__ import annotations

import asyncio
import json
import logging
import os
import random
import signal
import struct
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from topodra.cpuset import CPUSet
from topodra.embedded.runtime import EmbeddedRuntime
from topodra.nri import mux, ttrpc
from topodra.nri.errors import ConnectionClosed, EmptyCPUSetError, RegistrationError
from topodra.nri.plugin import Plugin
from topodra.nri.proto import api_pb2
from topodra.nri.stub import Stub, StubState
from topodra.nri.ttrpc import Code, MessageType
from topodra.nri.types import (
    Container,
    ContainerAdjustment,
    ContainerUpdate,
    Event,
    LinuxResources,
    Pod,
)
from topodra.nri.version import RuntimeInfo

from .nri_harness import RawRuntime, run

ROOT = Path(__file__).resolve().parents[2]


class Gate(Plugin):
    """CreateContainer waits for ``release``; remembers what it was given."""

    def __init__(self) -> None:
        self.release = asyncio.Event()
        self.entered = asyncio.Event()
        self.created: list[Container] = []
        self.runtime: RuntimeInfo | None = None

    async def configure(self, config: str, runtime: RuntimeInfo) -> None:
        self.runtime = runtime

    async def create_container(self, pod: Pod, container: Container) -> ContainerAdjustment:
        self.created.append(container)
        self.entered.set()
        await self.release.wait()
        return ContainerAdjustment(cpus=CPUSet({2}))


def _create_request(cid: str = "c1", cpus: str = "0-3") -> api_pb2.CreateContainerRequest:
    req = api_pb2.CreateContainerRequest()
    req.pod.id = "p1"
    req.container.id = cid
    req.container.pod_sandbox_id = "p1"
    req.container.linux.resources.cpu.cpus = cpus
    return req


async def _connected(tmp: Path, plugin: Plugin, **options: object):  # type: ignore[no-untyped-def]
    """A stub connected to a RawRuntime that accepted its registration and configured it."""
    serve = RawRuntime.serve(tmp / "raw.sock")
    accept = await serve.__aenter__()
    stub = Stub(plugin, socket_path=str(tmp / "raw.sock"), name="t", idx="42", env={}, reconnect=False, **options)  # type: ignore[arg-type]
    task = asyncio.get_running_loop().create_task(stub.run())
    rt = await accept()
    return serve, stub, task, rt


async def _finish(serve, stub, task, rt) -> None:  # type: ignore[no-untyped-def]
    await stub.stop()
    await asyncio.wait_for(task, 5)
    await rt.close()
    await serve.__aexit__(None, None, None)


async def _sync(rt: RawRuntime) -> None:
    reply = await rt.invoke("Synchronize", api_pb2.SynchronizeRequest())
    assert reply.status.ok


def test_configure_and_synchronize_are_served_before_the_registration_reply(tmp_path: Path) -> None:
    async def main() -> None:
        serve, stub, task, rt = await _connected(tmp_path, Gate())
        register = await rt.request()
        assert register.request.method == "RegisterPlugin"
        assert await rt.configure() == Event.CREATE_CONTAINER.bit
        await _sync(rt)
        assert stub.synchronized  # served while its own RegisterPlugin call is still unanswered
        rt.reply(register.stream_id)
        await stub.wait_state(StubState.SYNCHRONIZED, 5)
        await _finish(serve, stub, task, rt)

    run(main())


@pytest.mark.parametrize(
    ("fields", "mask"),
    [
        ({"runtime_name": "containerd", "runtime_version": "v2.0.5", "NRI_version": ""}, 0x7FF),  # inferred v0.8.0
        ({"runtime_name": "containerd", "runtime_version": "2.2.3", "NRI_version": ""}, 0x3FFF),  # inferred v0.11.0
        ({"runtime_name": "cri-o", "runtime_version": "1.34.1", "NRI_version": ""}, 0x3FFF),  # inferred v0.10.0
        ({"runtime_name": "mystery", "runtime_version": "9", "NRI_version": ""}, 0x7FF),  # unknown: stay safe
        ({"runtime_name": "containerd", "runtime_version": "v2.3.4", "NRI_version": "v0.12.0"}, 0x3FFF),
    ],
)
def test_event_mask_follows_the_runtime_version(tmp_path: Path, fields: dict[str, str], mask: int) -> None:
    class All(Plugin):
        async def configure(self, config: str, runtime: RuntimeInfo) -> frozenset[Event]:
            return frozenset(Event)

    async def main() -> None:
        serve, stub, task, rt = await _connected(tmp_path, All())
        await rt.accept_registration()
        assert await rt.configure(**fields) == mask
        await _finish(serve, stub, task, rt)

    run(main())


def test_a_plugin_without_handlers_subscribes_nothing_which_runtimes_read_as_all(tmp_path: Path) -> None:
    async def main() -> None:
        serve, stub, task, rt = await _connected(tmp_path, Plugin())
        await rt.accept_registration()
        assert await rt.configure() == 0
        await _sync(rt)
        reply = await rt.invoke("RunPodSandbox", api_pb2.RunPodSandboxRequest())
        assert reply.status.ok  # answered by the default handler
        await _finish(serve, stub, task, rt)

    run(main())


def test_bad_requests_get_clear_error_statuses_and_the_connection_survives(tmp_path: Path) -> None:
    async def main() -> None:
        gate = Gate()
        gate.release.set()
        serve, stub, task, rt = await _connected(tmp_path, gate)
        await rt.accept_registration()
        await rt.configure()
        await _sync(rt)
        sid = rt.session.start_request("foo.Bar", "Baz")
        rt.flush()
        unknown_service = await rt.response(sid)
        assert (unknown_service.status.code, unknown_service.status.message) == (Code.UNIMPLEMENTED, "service foo.Bar")
        reply = await rt.invoke("Bogus", api_pb2.Empty())
        assert (reply.status.code, reply.status.message) == (Code.UNIMPLEMENTED, "method Bogus")
        sid = rt.session.start_request("nri.pkg.api.v1alpha1.Plugin", "CreateContainer", b"\xff\xff\xff")
        rt.flush()
        reply = await rt.response(sid)
        assert reply.status.code == Code.INVALID_ARGUMENT
        assert "invalid CreateContainerRequest payload" in reply.status.message
        reply = await rt.invoke("CreateContainer", _create_request(cpus="3-1"))
        assert reply.status.code == Code.INVALID_ARGUMENT
        assert reply.status.message == "container c1: linux.resources.cpu.cpus: invalid CPU list '3-1': range '3-1' runs backwards"
        # an even stream id is refused by the ttrpc layer, then normal service resumes
        body = ttrpc.encode_request(ttrpc.Request("nri.pkg.api.v1alpha1.Plugin", "Shutdown"))
        rt.writer.write(mux.encode_frames(1, ttrpc.encode_message(100, MessageType.REQUEST, body)))
        rt.session._pending.add(100)  # let the hand-driven runtime accept that answer
        reply = await rt.response(100)
        assert reply.status.code == Code.INVALID_ARGUMENT
        rt.session._next_call_id = 101
        reply = await rt.invoke("CreateContainer", _create_request())
        assert reply.status.ok
        assert api_pb2.CreateContainerResponse.FromString(reply.payload).adjust.linux.resources.cpu.cpus == "2"
        # frames for a conn nobody opened are dropped
        rt.writer.write(struct.pack(">II", 9, 4) + b"junk")
        assert (await rt.invoke("Shutdown", api_pb2.Empty())).status.ok
        assert stub.synchronized
        await _finish(serve, stub, task, rt)

    run(main())


def test_oversized_request_is_refused_with_resource_exhausted(tmp_path: Path) -> None:
    async def main() -> None:
        serve, stub, task, rt = await _connected(tmp_path, Plugin())
        await rt.accept_registration()
        await rt.configure()
        header = struct.pack(">IIBB", ttrpc.MAX_MESSAGE_LENGTH + 1, 101, 1, 0)
        rt.writer.write(mux.encode_frames(1, header + b"\0" * (ttrpc.MAX_MESSAGE_LENGTH + 1)))
        rt.session._pending.add(101)
        reply = await rt.response(101, timeout=10)
        assert reply.status.code == Code.RESOURCE_EXHAUSTED
        rt.session._next_call_id = 103
        await _sync(rt)
        assert stub.synchronized
        await _finish(serve, stub, task, rt)

    run(main())


@pytest.mark.parametrize(
    ("garbage", "reason"),
    [
        (struct.pack(">II", 1, 10_000_000), "announces 10000000 payload bytes"),
        (struct.pack(">II", 1, 20) + b"short", "inside a frame for conn 1"),
        (mux.encode_frames(1, struct.pack(">IIBB", 50, 1, 1, 0) + b"cut"), "inside ttrpc message on stream 1"),
    ],
)
def test_broken_framing_closes_cleanly(tmp_path: Path, garbage: bytes, reason: str) -> None:
    async def main() -> None:
        serve, stub, task, rt = await _connected(tmp_path, Plugin())
        await rt.accept_registration()
        rt.writer.write(garbage)
        if b"short" in garbage or b"cut" in garbage:
            rt.writer.write_eof()
        await asyncio.wait_for(task, 5)  # run() returns: reconnect is off
        assert stub.last_error is not None
        assert reason in stub.last_error
        assert stub.state is StubState.DISCONNECTED
        await rt.close()
        await serve.__aexit__(None, None, None)

    run(main())


def test_garbage_never_crashes_the_stub(tmp_path: Path) -> None:
    rng = random.Random(4)

    async def main() -> None:
        for _ in range(25):
            serve, stub, task, rt = await _connected(tmp_path, Plugin())
            await rt.accept_registration()
            blob = bytearray()
            for _ in range(rng.randint(1, 6)):
                body = bytes(rng.getrandbits(8) for _ in range(rng.randint(0, 60)))
                kind = rng.random()
                if kind < 0.4:  # a plausible frame around random ttrpc bytes
                    msg = struct.pack(">IIBB", len(body), rng.choice([1, 2, 3, 7]), rng.randint(0, 4), rng.randint(0, 3)) + body
                    blob += mux.encode_frames(rng.choice([1, 1, 2, 5]), msg)
                elif kind < 0.7:  # a real request with a random payload
                    req = ttrpc.Request("nri.pkg.api.v1alpha1.Plugin", rng.choice(["CreateContainer", "Synchronize",
                                        "StateChange", "Configure", "UpdateContainer"]), body, 1_000_000_000)
                    blob += mux.encode_frames(1, ttrpc.encode_message(rng.randrange(1, 99, 2), 1, ttrpc.encode_request(req)))
                else:
                    blob += body
            rt.writer.write(bytes(blob))
            await rt.writer.drain()
            rt.writer.write_eof()
            await asyncio.wait_for(task, 5)
            assert stub.state is StubState.DISCONNECTED
            await rt.close()
            await serve.__aexit__(None, None, None)
            (tmp_path / "raw.sock").unlink(missing_ok=True)

    run(main(), 60)


def test_registration_refused_is_fatal_and_unanswered_registration_retries(tmp_path: Path) -> None:
    async def main() -> None:
        serve, stub, task, rt = await _connected(tmp_path, Plugin())
        req = await rt.request()
        rt.reply(req.stream_id, status=ttrpc.Status(Code.UNKNOWN, "invalid plugin index: nope"))
        with pytest.raises(RegistrationError, match="invalid plugin index: nope"):
            await asyncio.wait_for(task, 5)
        await asyncio.wait_for(rt.eof.wait(), 2)  # the stub closed the connection itself
        await rt.close()
        await serve.__aexit__(None, None, None)

        async with RawRuntime.serve(tmp_path / "quiet.sock") as accept:
            stub = Stub(Plugin(), socket_path=str(tmp_path / "quiet.sock"), name="t", idx="42", env={},
                        registration_timeout=0.1, backoff_initial=0.01)
            task = asyncio.get_running_loop().create_task(stub.run())
            first, second = await accept(), await accept()
            assert stub.connections >= 2
            assert stub.last_error == "no RegisterPlugin reply within 0.1 s"
            await stub.stop()
            await asyncio.wait_for(task, 5)
            await first.close()
            await second.close()

    run(main())


def test_updates_wait_for_unanswered_events_and_report_failures(tmp_path: Path) -> None:
    async def main() -> None:
        gate = Gate()
        serve, stub, task, rt = await _connected(tmp_path, gate, update_timeout=0.3)
        await rt.accept_registration()
        await rt.configure()
        await _sync(rt)
        sid = rt.call("nri.pkg.api.v1alpha1.Plugin", "CreateContainer", _create_request())
        await gate.entered.wait()
        fut = stub.update_containers([ContainerUpdate("other", cpus=CPUSet({5}))])
        with pytest.raises(TimeoutError):
            await rt.request(timeout=0.2)  # held back: CreateContainer is unanswered
        gate.release.set()
        assert (await rt.response(sid)).status.ok
        update = await rt.request()
        assert update.request.method == "UpdateContainers"
        order = rt.session.unanswered_requests
        assert order == {update.stream_id}
        failed = api_pb2.UpdateContainersResponse()
        failed.failed.add(container_id="other").linux.resources.cpu.cpus = "5"
        rt.reply(update.stream_id, failed)
        assert await fut == [ContainerUpdate("other", cpus=CPUSet({5}))]
        # an update the runtime never answers times out locally
        fut2 = stub.update_containers([ContainerUpdate("x", mems=CPUSet({0}))])
        await rt.request()
        with pytest.raises(TimeoutError):
            await fut2
        await _finish(serve, stub, task, rt)
        with pytest.raises(ConnectionClosed, match="not connected"):
            await stub.update_containers([ContainerUpdate("x", cpus=CPUSet({1}))])
        assert await stub.update_containers([]) == []
        with pytest.raises(EmptyCPUSetError):
            ContainerUpdate("x", cpus=CPUSet())

    run(main())


def test_stub_options_are_validated() -> None:
    with pytest.raises(ValueError, match="must be 2 digits"):
        Stub(Plugin(), name="ok", idx="7", env={})
    with pytest.raises(ValueError, match="contains invalid character '/'"):
        Stub(Plugin(), name="a/b", idx="10", env={})
    with pytest.raises(ValueError, match="name and a two-digit index are required"):
        Stub(Plugin(), env={})
    with pytest.raises(ValueError, match="NRI_PLUGIN_SOCKET='x' is not a file descriptor"):
        Stub(Plugin(), env={"NRI_PLUGIN_SOCKET": "x", "NRI_PLUGIN_NAME": "a", "NRI_PLUGIN_IDX": "10"})
    launched = Stub(Plugin(), name="ignored", idx="99",
                    env={"NRI_PLUGIN_SOCKET": "3", "NRI_PLUGIN_NAME": "logger", "NRI_PLUGIN_IDX": "10"})
    assert (launched.name, launched.idx, launched.launched_fd, launched.reconnect) == ("logger", "10", 3, False)


_CHILD = """
import asyncio, json, os, sys
sys.path.insert(0, {src!r})
from topodra.nri.stub import Stub
from topodra.nri.plugin import Plugin
from topodra.nri.types import ContainerAdjustment
from topodra.cpuset import CPUSet
with open({out!r}, "w") as fh:
    json.dump({{"env": dict(os.environ), "argv": sys.argv}}, fh)
class P(Plugin):
    async def create_container(self, pod, container):
        return ContainerAdjustment(cpus=CPUSet({{6}}), annotations={{"launched-by": os.environ.get("NRI_PLUGIN_NAME", "")}})
asyncio.run(Stub(P()).run())
"""


def test_runtime_launched_plugin_gets_a_socketpair_and_three_variables(tmp_path: Path) -> None:
    script = tmp_path / "child.py"
    out = tmp_path / "env.json"
    script.write_text(_CHILD.format(src=str(ROOT / "src"), out=str(out)))

    async def main() -> None:
        async with EmbeddedRuntime(None, request_timeout=5, registration_timeout=20) as rt:
            process = await rt.launch_plugin([sys.executable, str(script)], name="child", idx="15")
            plugins = await rt.wait_for_plugins(1, timeout=20)
            assert [(p.id, p.launched) for p in plugins] == [("15-child", True)]
            await rt.run_pod_sandbox(Pod(id="p1"))
            res = (await rt.create_container(Container(id="c1", pod_sandbox_id="p1"))).check()
            assert res.container is not None
            assert res.container.cpus == CPUSet({6})
            assert res.container.annotations["launched-by"] == "child"
        assert await asyncio.wait_for(process.wait(), 5) == -signal.SIGKILL  # like containerd at shutdown
        seen = json.loads(out.read_text())
        env = {k: v for k, v in seen["env"].items() if k != "LC_CTYPE"}  # python's own locale coercion
        assert sorted(env) == ["NRI_PLUGIN_IDX", "NRI_PLUGIN_NAME", "NRI_PLUGIN_SOCKET"]
        assert (env["NRI_PLUGIN_NAME"], env["NRI_PLUGIN_IDX"]) == ("child", "15")
        assert int(env["NRI_PLUGIN_SOCKET"]) > 2

    run(main(), 60)


def test_handlers_see_typed_objects(tmp_path: Path) -> None:
    class Seen(Plugin):
        got: list[object] = []

        async def update_container(self, pod: Pod, container: Container,
                                   resources: LinuxResources | None) -> Sequence[ContainerUpdate]:
            Seen.got = [pod, container, resources]
            return ()

    async def main() -> None:
        serve, stub, task, rt = await _connected(tmp_path, Seen())
        await rt.accept_registration()
        await rt.configure()
        await _sync(rt)
        req = api_pb2.UpdateContainerRequest()
        req.pod.id, req.pod.name, req.pod.namespace = "p1", "web", "prod"
        req.pod.linux.cgroup_parent = "/kubepods/pod1"
        req.container.id, req.container.pod_sandbox_id, req.container.name = "c1", "p1", "app"
        req.container.env.extend(["A=1", "DRA_CPUSET_x=4-5"])
        req.container.state = api_pb2.CONTAINER_RUNNING
        req.container.linux.resources.cpu.cpus = "0-3"
        req.container.linux.resources.memory.limit.value = 0  # set, even though zero
        req.linux_resources.cpu.shares.value = 2048
        req.linux_resources.cpu.mems = "1"
        assert (await rt.invoke("UpdateContainer", req)).status.ok
        pod, ctr, res = Seen.got
        assert isinstance(pod, Pod)
        assert (pod.namespace, pod.cgroup_parent) == ("prod", "/kubepods/pod1")
        assert isinstance(ctr, Container)
        assert ctr.getenv("DRA_CPUSET_x") == "4-5"
        assert ctr.getenv("MISSING") is None
        assert ctr.cpus == CPUSet.parse("0-3")
        assert ctr.resources is not None
        assert ctr.resources.memory_limit == 0
        assert ctr.state.name == "RUNNING"
        assert res == LinuxResources(mems=CPUSet({1}), cpu_shares=2048)
        await _finish(serve, stub, task, rt)

    run(main())


def test_os_environ_is_the_default(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("NRI_PLUGIN_SOCKET", "7")
    monkeypatch.setenv("NRI_PLUGIN_NAME", "fromenv")
    monkeypatch.setenv("NRI_PLUGIN_IDX", "33")
    stub = Stub(Plugin())
    assert (stub.name, stub.idx, stub.launched_fd) == ("fromenv", "33", 7)
    assert os.environ["NRI_PLUGIN_SOCKET"] == "7"


class _Refusal(Exception):
    """A plugin's own "no" (declared in its ``refusals``)."""


def test_a_refusal_answers_one_line_and_logs_one_line_a_bug_keeps_its_traceback(
    caplog: pytest.LogCaptureFixture,
) -> None:
    class Refuser(Plugin):
        refusals = (_Refusal,)

        async def create_container(self, pod: Pod, container: Container) -> ContainerAdjustment:
            if container.id == "refused":
                raise _Refusal("no CPU left for 2 exclusive CPU(s):\n  3 of 4 CPUs are held by DRA claims\n")
            raise KeyError("a bug")

    async def main() -> None:
        stub = Stub(Refuser(), name="t", idx="42", env={})
        caplog.clear()
        _, status = await stub.handle("CreateContainer", _create_request("refused").SerializeToString())
        assert status is not None
        assert status.code == Code.UNKNOWN
        assert status.message == "no CPU left for 2 exclusive CPU(s): 3 of 4 CPUs are held by DRA claims"
        [refused] = [r for r in caplog.records if r.name == "topodra.nri.stub"]
        assert (refused.levelno, refused.exc_info) == (logging.WARNING, None)
        assert refused.getMessage() == f"CreateContainer refused: {status.message}"
        caplog.clear()
        _, status = await stub.handle("CreateContainer", _create_request("buggy").SerializeToString())
        assert status is not None
        assert status.message == "'a bug'"
        [failed] = [r for r in caplog.records if r.name == "topodra.nri.stub"]
        assert failed.exc_info is not None  # an unexpected exception keeps its traceback

    caplog.set_level(logging.WARNING)
    run(main())


def test_handle_answers_a_call_without_a_socket() -> None:
    class Adjust(Plugin):
        async def create_container(self, pod: Pod, container: Container) -> ContainerAdjustment:
            return ContainerAdjustment(cpus=CPUSet({container.name.count("x")}))

    async def main() -> None:
        stub = Stub(Adjust(), name="t", idx="42", env={})
        payload, status = await stub.handle("CreateContainer", _create_request().SerializeToString())
        assert status is None
        assert api_pb2.CreateContainerResponse.FromString(payload).adjust.linux.resources.cpu.cpus == "0"
        payload, status = await stub.handle("Synchronize", api_pb2.SynchronizeRequest(more=True).SerializeToString())
        assert (payload, status) == (b"\x10\x01", None)
        assert stub.state is StubState.IDLE  # offline calls leave the live state alone
        _, status = await stub.handle("Nope")
        assert status is not None
        assert status.code == Code.UNIMPLEMENTED

    run(main())


class _Sleepy(Plugin):
    """CreateContainer sleeps ``delay`` seconds (or swallows its cancellation, ``stubborn``)."""

    def __init__(self) -> None:
        self.delay = 0.0
        self.stubborn = False
        self.cancelled = 0
        self.started = asyncio.Event()

    async def create_container(self, pod: Pod, container: Container) -> ContainerAdjustment:
        self.started.set()
        try:
            await asyncio.sleep(self.delay)
        except asyncio.CancelledError:
            self.cancelled += 1
            if not self.stubborn:
                raise
        return ContainerAdjustment(cpus=CPUSet({1}))


def test_handler_deadline_cancels_only_the_late_call_and_leaves_the_task_clean() -> None:
    async def main() -> None:
        plugin = _Sleepy()
        stub = Stub(plugin, name="t", idx="42", env={})
        req = _create_request().SerializeToString()
        task = asyncio.current_task()
        assert task is not None
        plugin.delay = 10.0
        _, status = await stub.handle("CreateContainer", req, timeout_nano=60_000_000)  # 60 ms: 55 ms budget
        assert status is not None
        assert status.code == Code.DEADLINE_EXCEEDED, status
        assert plugin.cancelled == 1
        assert task.cancelling() == 0  # our cancellation was taken back: the caller goes on
        # a handler that ignores the cancellation and answers is answered; the task stays clean
        plugin.stubborn = True
        payload, status = await stub.handle("CreateContainer", req, timeout_nano=60_000_000)
        assert status is None
        assert plugin.cancelled == 2
        assert api_pb2.CreateContainerResponse.FromString(payload).adjust.linux.resources.cpu.cpus == "1"
        assert task.cancelling() == 0
        # fast calls after a slow one: none is cancelled by a deadline left over from before
        plugin.delay, plugin.stubborn = 0.0, False
        for _ in range(5):
            _, status = await stub.handle("CreateContainer", req, timeout_nano=60_000_000)
            assert status is None
        assert not stub._watchdog._due  # no deadline left to fire at a later call
        assert plugin.cancelled == 2
        assert task.cancelling() == 0

    run(main())


def test_outside_cancellation_of_a_handler_is_not_a_deadline() -> None:
    async def main() -> None:
        plugin = _Sleepy()
        plugin.delay = 10.0
        stub = Stub(plugin, name="t", idx="42", env={})
        call = asyncio.create_task(stub.handle("CreateContainer", _create_request().SerializeToString()))
        await plugin.started.wait()
        call.cancel()
        with pytest.raises(asyncio.CancelledError):
            await call
        assert plugin.cancelled == 1

    run(main())


def test_back_to_back_calls_share_one_deadline_timer(monkeypatch: pytest.MonkeyPatch) -> None:
    """A timer per call would sit cancelled in the loop's heap for the whole budget (seconds)."""

    async def main() -> None:
        loop = asyncio.get_running_loop()
        armed: list[float] = []
        call_at = loop.call_at

        def counting(when: float, callback: Any, *args: Any, **kw: Any) -> asyncio.TimerHandle:
            armed.append(when)
            return call_at(when, callback, *args, **kw)

        monkeypatch.setattr(loop, "call_at", counting)
        stub = Stub(_Sleepy(), name="t", idx="42", env={})
        req = _create_request().SerializeToString()
        for _ in range(50):
            _, status = await stub.handle("CreateContainer", req, timeout_nano=2_000_000_000)
            assert status is None
        assert len(armed) == 1

    run(main())
