"""Helpers for NRI tests: run coroutines, pair a runtime with stubs, hand-driven peers.

``RawPlugin`` and ``RawRuntime`` speak the protocol through a bare ``Session``
so a test can misbehave on purpose (never register, answer late, send one huge
frame, call UpdateContainers from inside an event) where ``Stub`` would not.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine
from pathlib import Path
from typing import Any, TypeVar

from topodra.embedded.runtime import EmbeddedRuntime
from topodra.nri import mux, ttrpc
from topodra.nri.plugin import Plugin
from topodra.nri.proto import api_pb2
from topodra.nri.session import RequestReceived, ResponseReceived, Role, Session
from topodra.nri.stub import PLUGIN_SERVICE, RUNTIME_SERVICE, Stub
from topodra.nri.ttrpc import Status

T = TypeVar("T")


def run(coro: Coroutine[Any, Any, T], timeout: float = 30.0) -> T:
    """Run one test coroutine with a hard time limit."""
    return asyncio.run(asyncio.wait_for(coro, timeout))


@contextlib.asynccontextmanager
async def runtime_with(
    tmp: Path, *plugins: tuple[Plugin, str, str], stub_options: dict[str, Any] | None = None, **runtime_options: Any
) -> AsyncIterator[tuple[EmbeddedRuntime, list[Stub]]]:
    """A started runtime on ``tmp/nri.sock`` with one synchronized stub per (plugin, name, idx)."""
    options = {"request_timeout": 1.0, "registration_timeout": 1.0, **runtime_options}
    rt = EmbeddedRuntime(tmp / "nri.sock", **options)
    await rt.start()
    stubs: list[Stub] = []
    tasks: list[asyncio.Task[None]] = []
    try:
        for plugin, name, idx in plugins:
            stub = Stub(plugin, socket_path=str(tmp / "nri.sock"), name=name, idx=idx, env={},
                        backoff_initial=0.05, backoff_max=0.2, **(stub_options or {}))
            stubs.append(stub)
            tasks.append(asyncio.get_running_loop().create_task(stub.run()))
            await stub.wait_synchronized(5)
        await rt.wait_for_plugins(len(plugins))
        yield rt, stubs
    finally:
        for stub in stubs:
            await stub.stop()
        for task in tasks:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(task, 5)
        await rt.stop()


class Peer:
    """One side of an NRI socket, driven by hand through a ``Session``."""

    def __init__(self, role: Role, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, **session: Any) -> None:
        self.session = Session(role, **session)
        self.reader = reader
        self.writer = writer
        self.requests: asyncio.Queue[RequestReceived] = asyncio.Queue()
        self.responses: dict[int, asyncio.Future[ResponseReceived]] = {}
        self.eof = asyncio.Event()
        self._task = asyncio.get_running_loop().create_task(self._read())

    async def _read(self) -> None:
        try:
            while data := await self.reader.read(65536):
                for ev in self.session.receive_data(data):
                    if isinstance(ev, RequestReceived):
                        self.requests.put_nowait(ev)
                    elif isinstance(ev, ResponseReceived):
                        self.responses.setdefault(ev.stream_id, asyncio.get_running_loop().create_future()).set_result(ev)
                self.flush()
        finally:
            self.eof.set()

    def flush(self, *, max_frame: int | None = None) -> None:
        data = self.session.data_to_send()
        if data and max_frame is not None:  # re-frame: take the ttrpc bytes back out and cut them differently
            frames = mux.MuxDecoder().feed(data)
            data = b"".join(mux.encode_frames(f.conn_id, f.payload, max_payload=max_frame) for f in _join(frames))
        if data:
            self.writer.write(data)

    def call(self, service: str, method: str, message: Any, timeout_nano: int = 2_000_000_000) -> int:
        sid = self.session.start_request(service, method, message.SerializeToString(), timeout_nano=timeout_nano)
        self.responses.setdefault(sid, asyncio.get_running_loop().create_future())
        self.flush()
        return sid

    async def response(self, sid: int, timeout: float = 5.0) -> ResponseReceived:
        fut = self.responses.setdefault(sid, asyncio.get_running_loop().create_future())
        return await asyncio.wait_for(fut, timeout)

    async def request(self, timeout: float = 5.0) -> RequestReceived:
        return await asyncio.wait_for(self.requests.get(), timeout)

    def reply(self, sid: int, message: Any = None, status: Status | None = None, *, max_frame: int | None = None) -> None:
        self.session.send_response(sid, message.SerializeToString() if message is not None else b"", status)
        self.flush(max_frame=max_frame)

    async def close(self) -> None:
        self.writer.close()
        self._task.cancel()
        with contextlib.suppress(BaseException):
            await self._task


def _join(frames: list[mux.Frame]) -> list[mux.Frame]:
    out: list[mux.Frame] = []
    for f in frames:
        if out and out[-1].conn_id == f.conn_id:
            out[-1] = mux.Frame(f.conn_id, out[-1].payload + f.payload)
        else:
            out.append(f)
    return out


class RawPlugin(Peer):
    """A hand-driven plugin connected to a runtime socket."""

    @classmethod
    async def connect(cls, path: Path | str) -> RawPlugin:
        reader, writer = await asyncio.open_unix_connection(str(path))
        return cls(Role.PLUGIN, reader, writer)

    def register(self, name: str = "raw", idx: str = "50") -> int:
        return self.call(RUNTIME_SERVICE, "RegisterPlugin", api_pb2.RegisterPluginRequest(plugin_name=name, plugin_idx=idx))

    async def handshake(self, events: int = 0x7FF, *, name: str = "raw", idx: str = "50") -> None:
        """Register, answer Configure with ``events`` and Synchronize with nothing."""
        sid = self.register(name, idx)
        configure = await self.request()
        assert configure.request.method == "Configure"
        self.reply(configure.stream_id, api_pb2.ConfigureResponse(events=events))
        assert (await self.response(sid)).status.ok
        while True:
            sync = await self.request()
            assert sync.request.method == "Synchronize"
            more = api_pb2.SynchronizeRequest.FromString(sync.request.payload).more
            self.reply(sync.stream_id, api_pb2.SynchronizeResponse(more=more))
            if not more:
                return


class RawRuntime(Peer):
    """A hand-driven runtime accepting one stub connection."""

    @classmethod
    @contextlib.asynccontextmanager
    async def serve(cls, path: Path) -> AsyncIterator[Callable[[], Awaitable[RawRuntime]]]:
        accepted: asyncio.Queue[RawRuntime] = asyncio.Queue()

        async def on_connect(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            accepted.put_nowait(cls(Role.RUNTIME, reader, writer))

        server = await asyncio.start_unix_server(on_connect, path=str(path))
        try:
            yield lambda: asyncio.wait_for(accepted.get(), 5)
        finally:
            server.close()

    async def accept_registration(self) -> api_pb2.RegisterPluginRequest:
        req = await self.request()
        assert req.request.method == "RegisterPlugin"
        self.reply(req.stream_id)
        return api_pb2.RegisterPluginRequest.FromString(req.request.payload)

    async def configure(self, **fields: Any) -> int:
        fields = {"runtime_name": "raw", "runtime_version": "v0", "NRI_version": "v0.12.2", **fields}
        sid = self.call(PLUGIN_SERVICE, "Configure", api_pb2.ConfigureRequest(**fields))
        reply = await self.response(sid)
        assert reply.status.ok, reply.status
        return api_pb2.ConfigureResponse.FromString(reply.payload).events

    async def invoke(self, method: str, message: Any, timeout_nano: int = 2_000_000_000) -> ResponseReceived:
        return await self.response(self.call(PLUGIN_SERVICE, method, message, timeout_nano))


__all__ = ["Peer", "RawPlugin", "RawRuntime", "run", "runtime_with", "ttrpc"]
