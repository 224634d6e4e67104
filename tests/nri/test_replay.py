"""Every recorded NRI conversation, replayed with our stub as the plugin.

For each transcript a small plugin reproduces the recorded plugin's own choices
(events, adjustments, updates, errors); everything else must match what the
real plugin sent: message kinds, stream ids, status presence and content,
payload content (and bytes, where Go's map order does not interfere), and the
framing rules. Where the recorded plugin misbehaved on purpose (one oversized
frame, UpdateContainers from inside a handler), our stub must do the right
thing instead, and the test says so.
"""

from __future__ import annotations

import asyncio
import re
import socket
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from topodra.cpuset import CPUSet
from topodra.nri.errors import ConnectionClosed, RegistrationError
from topodra.nri.logger import EventLogger
from topodra.nri.plugin import Plugin
from topodra.nri.proto import api_pb2
from topodra.nri.stub import Stub, UpdateFuture
from topodra.nri.types import (
    Container,
    ContainerAdjustment,
    ContainerUpdate,
    CreateContainerResult,
    Event,
    LinuxResources,
    Pod,
)
from topodra.nri.version import RuntimeInfo

from .nri_replay import Key, Normalizer, Transcript, compare, drive, load, transcript_names

FIRST_ELEVEN = [e for e in Event if e.value <= 11]


class TemplateReplica(Plugin):
    """containerd's plugins/template: handles events 1-11, answers nothing but an empty adjustment."""

    def __init__(self) -> None:
        self.seen: list[str] = []
        self.synced: tuple[int, int] | None = None

    async def synchronize(self, pods: Sequence[Pod], containers: Sequence[Container]) -> None:
        self.synced = (len(pods), len(containers))

    async def run_pod_sandbox(self, pod: Pod) -> None:
        self.seen.append(f"RunPodSandbox {pod.name}")

    async def stop_pod_sandbox(self, pod: Pod) -> None:
        self.seen.append(f"StopPodSandbox {pod.name}")

    async def remove_pod_sandbox(self, pod: Pod) -> None:
        self.seen.append(f"RemovePodSandbox {pod.name}")

    async def create_container(self, pod: Pod, container: Container) -> ContainerAdjustment:
        self.seen.append(f"CreateContainer {container.name}")
        return ContainerAdjustment()

    async def post_create_container(self, pod: Pod, container: Container) -> None:
        self.seen.append(f"PostCreateContainer {container.name}")

    async def start_container(self, pod: Pod, container: Container) -> None:
        self.seen.append(f"StartContainer {container.name}")

    async def post_start_container(self, pod: Pod, container: Container) -> None:
        self.seen.append(f"PostStartContainer {container.name}")

    async def update_container(self, pod: Pod, container: Container, resources: LinuxResources | None) -> None:
        self.seen.append(f"UpdateContainer {container.name}")

    async def post_update_container(self, pod: Pod, container: Container) -> None:
        self.seen.append(f"PostUpdateContainer {container.name}")

    async def stop_container(self, pod: Pod, container: Container) -> None:
        self.seen.append(f"StopContainer {container.name}")

    async def remove_container(self, pod: Pod, container: Container) -> None:
        self.seen.append(f"RemoveContainer {container.name}")


class PyPluginReplica(Plugin):
    """The recordings' Python test plugin: cpuset adjustments and updates (see the transcripts' notes)."""

    def __init__(self, *, fail_create: bool = False, fillers: int = 0, unsolicited: bool = False) -> None:
        self.fail_create = fail_create
        self.fillers = fillers
        self.unsolicited = unsolicited
        self.stub: Stub | None = None
        self.first = self.second = ""
        self.update_future: UpdateFuture | None = None
        self.seen: list[str] = []

    async def configure(self, config: str, runtime: RuntimeInfo) -> list[Event]:
        return FIRST_ELEVEN

    async def synchronize(self, pods: Sequence[Pod], containers: Sequence[Container]) -> list[ContainerUpdate]:
        self.first, self.second = containers[0].id, containers[1].id
        return [ContainerUpdate(self.first, cpus=CPUSet.parse("2-3"), mems=CPUSet.parse("0"))]

    async def run_pod_sandbox(self, pod: Pod) -> None:
        self.seen.append("RunPodSandbox")

    async def create_container(self, pod: Pod, container: Container) -> CreateContainerResult:
        if self.fail_create:
            raise RuntimeError("pyplugin refuses CreateContainer")
        if self.unsolicited:
            assert self.stub is not None
            # queued from inside the handler: the stub sends it only after this reply
            self.update_future = self.stub.update_containers(
                [ContainerUpdate(self.first, cpus=CPUSet.parse("2-3"), mems=CPUSet.parse("0"))]
            )
        annotations = {"pyplugin/cpuset": "1"}
        annotations.update({f"pyplugin/filler-{i:04d}": "x" * 100 for i in range(self.fillers)})
        return CreateContainerResult(
            adjust=ContainerAdjustment(cpus=CPUSet({1}), mems=CPUSet({0}), annotations=annotations),
            updates=(ContainerUpdate(self.second, cpus=CPUSet({0})),),
        )

    async def update_container(self, pod: Pod, container: Container, resources: LinuxResources | None) -> list[ContainerUpdate]:
        return [ContainerUpdate(container.id, cpus=CPUSet({1}))]

    async def stop_container(self, pod: Pod, container: Container) -> list[ContainerUpdate]:
        return [ContainerUpdate(self.first, cpus=CPUSet.parse("0-3"))]

    async def state_change_seen(self) -> None:
        return None

    async def remove_container(self, pod: Pod, container: Container) -> None:
        self.seen.append("RemoveContainer")


_PID = re.compile(r"logger-pid-\d+")


def _mask_pids(msg: Any) -> None:
    """The logger's annotation values carry its pid, which differs per run."""
    if isinstance(msg, api_pb2.CreateContainerResponse):
        for k, v in list(msg.adjust.annotations.items()):
            msg.adjust.annotations[k] = _PID.sub("logger-pid-N", v)
        for kv in msg.adjust.env:
            kv.value = _PID.sub("logger-pid-N", kv.value)


def _clear_version(msg: Any) -> None:
    if isinstance(msg, api_pb2.RegisterPluginRequest):
        msg.NRI_version = ""


def _clear_version_and_index(msg: Any) -> None:
    if isinstance(msg, api_pb2.RegisterPluginRequest):
        msg.NRI_version = ""
        msg.plugin_idx = ""


@dataclass
class Case:
    plugin: Callable[[], Plugin]
    name: str
    idx: str
    stub_options: dict[str, Any] = field(default_factory=dict)
    normalize: Normalizer = _clear_version
    launched: bool = False
    extra: set[Key] = field(default_factory=set)  # messages we send that the recorded plugin did not
    refused: bool = False


def _logger_all() -> Plugin:
    return EventLogger(lambda r: None, add_annotation="logger.nri.io/pid", add_env="LOGGER_PID", log_files=False)


def _logger_both(msg: Any) -> None:
    _clear_version(msg)
    _mask_pids(msg)


CASES: dict[str, Case] = {
    "template-current": Case(TemplateReplica, "template", "10"),
    "template-v080": Case(TemplateReplica, "template", "10"),
    "split-sync": Case(TemplateReplica, "template", "10"),
    "logger-current": Case(_logger_all, "nri-logger", "20", normalize=_logger_both),
    "launched": Case(lambda: EventLogger(lambda r: None, log_files=False), "logger", "10", normalize=_logger_both, launched=True),
    "unsolicited-update": Case(lambda: PyPluginReplica(unsolicited=True), "pyplugin", "30"),
    "unsolicited-update-failed": Case(lambda: PyPluginReplica(unsolicited=True), "pyplugin", "30"),
    "unimplemented-fallback": Case(PyPluginReplica, "pyplugin", "40", stub_options={"use_state_change": True}),
    "errors-createcontainer": Case(lambda: PyPluginReplica(fail_create=True), "pyplugin", "50"),
    "errors-bad-index-1": Case(PyPluginReplica, "pyplugin", "10", normalize=_clear_version_and_index, refused=True),
    "errors-bad-index-abc": Case(PyPluginReplica, "pyplugin", "10", normalize=_clear_version_and_index, refused=True),
    "frame-limit-chunked": Case(lambda: PyPluginReplica(fillers=60), "pyplugin", "60"),
    "frame-limit-oversized": Case(lambda: PyPluginReplica(fillers=60), "pyplugin", "60"),
    # the recorded plugin called UpdateContainers inside CreateContainer; ours answers first
    "unsolicited-deadlock": Case(lambda: PyPluginReplica(unsolicited=True), "pyplugin", "70", extra={(1, 2, 7)}),
    "unsolicited-deadlock-nolock": Case(lambda: PyPluginReplica(unsolicited=True), "pyplugin", "70"),
}


def test_every_transcript_has_a_case() -> None:
    assert sorted(CASES) == transcript_names()


async def _replay(transcript: Transcript, case: Case, tmp: Path) -> tuple[Plugin, Stub, Any, BaseException | None]:
    plugin = case.plugin()
    served: asyncio.Future[tuple[asyncio.StreamReader, asyncio.StreamWriter]] = asyncio.get_running_loop().create_future()
    server = None
    if case.launched:
        ours, theirs = socket.socketpair()
        env = {"NRI_PLUGIN_SOCKET": str(theirs.fileno()), "NRI_PLUGIN_NAME": case.name, "NRI_PLUGIN_IDX": case.idx}
        stub = Stub(plugin, env=env, **case.stub_options)
        theirs.detach()  # the stub owns that fd now
        served.set_result(await asyncio.open_unix_connection(sock=ours))
    else:
        path = str(tmp / "nri.sock")
        server = await asyncio.start_unix_server(lambda r, w: served.set_result((r, w)), path=path)
        stub = Stub(plugin, socket_path=path, name=case.name, idx=case.idx, reconnect=False, env={}, **case.stub_options)
    if isinstance(plugin, PyPluginReplica):
        plugin.stub = stub
    run = asyncio.get_running_loop().create_task(stub.run())
    try:
        reader, writer = await asyncio.wait_for(served, 5)
        out = await drive(transcript, reader, writer, expect_plugin_eof=case.refused)
        error: BaseException | None = None
        try:
            await asyncio.wait_for(run, 5)
        except (RegistrationError, ConnectionClosed) as exc:
            error = exc
        return plugin, stub, out, error
    finally:
        run.cancel()
        await stub.stop()
        if server is not None:
            server.close()


@pytest.mark.parametrize("name", sorted(CASES))
def test_replay_transcript(name: str, tmp_path: Path) -> None:
    transcript = load(name)
    case = CASES[name]
    plugin, _stub, out, error = asyncio.run(asyncio.wait_for(_replay(transcript, case, tmp_path), 60))

    assert not out.problems, out.problems
    assert out.order[0] == (2, 1, 1), "RegisterPlugin must be the plugin's first message"
    recorded = {m.key: m for m in transcript.plugin_messages}
    unexpected = set(out.messages) - set(recorded) - case.extra
    assert not unexpected, f"messages the recorded plugin never sent: {sorted(unexpected)}"
    problems = [p for key, m in recorded.items() if key in out.messages for p in compare(m, out.messages[key], case.normalize)]
    assert not problems, "\n".join(problems)

    if case.refused:
        assert isinstance(error, RegistrationError)
        assert "invalid plugin index" in str(error)
        assert out.eof, "after a refused registration the plugin must close the connection itself"
    else:
        assert error is None, error
    _scenario_checks(name, plugin, out)


def _scenario_checks(name: str, plugin: Plugin, out: Any) -> None:
    if name in ("template-current", "template-v080"):
        assert isinstance(plugin, TemplateReplica)
        assert plugin.synced == (2, 4)
        # v0.8.0 delivered the notifications as StateChange: they reached the same handlers
        assert plugin.seen == [
            "RunPodSandbox pod-2",
            "CreateContainer ctr-0",
            "PostCreateContainer ctr-0",
            "StartContainer ctr-0",
            "PostStartContainer ctr-0",
            "UpdateContainer ctr-0",
            "PostUpdateContainer ctr-0",
            "StopContainer ctr-0",
            "RemoveContainer ctr-0",
            "StopPodSandbox pod-2",
            "RemovePodSandbox pod-2",
        ]
    if name == "split-sync":
        assert isinstance(plugin, TemplateReplica)
        assert plugin.synced == (150, 15000)
    if name.startswith("unsolicited"):
        assert isinstance(plugin, PyPluginReplica)
        fut = plugin.update_future
        assert fut is not None
        assert fut.done()
        # never before the CreateContainer reply (stream 7 on conn 1)
        assert out.order.index((1, 2, 7)) < out.order.index((2, 1, 3))
        if name == "unsolicited-deadlock":
            assert isinstance(fut.exception(), ConnectionClosed)
        elif name == "unsolicited-update-failed":
            assert fut.result() == [ContainerUpdate("pod0-ctr0", cpus=CPUSet.parse("2-3"), mems=CPUSet({0}))]
        else:
            assert fut.result() == []
    if name == "unimplemented-fallback":
        assert isinstance(plugin, PyPluginReplica)
        assert plugin.seen == ["RunPodSandbox", "RemoveContainer"]  # delivered via StateChange
    if name.startswith("frame-limit"):
        assert max(length for _, length in out.frames) == 4096
