"""Replaying recorded NRI conversations against our plugin stub.

The runtime side of a transcript is sent byte for byte, at the recorded frame
boundaries, and each runtime frame goes out only once the plugin has sent every
message the real plugin had sent before it. What our plugin sends is parsed
here independently of ``topodra.nri`` (plain ``struct`` and the generated
protobuf classes) and checked against the framing rules.
"""

from __future__ import annotations

import asyncio
import contextlib
import gzip
import json
import struct
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from google.protobuf.message import Message

from topodra.nri.proto import api_pb2, ttrpc_pb2

TRANSCRIPTS = Path(__file__).resolve().parents[1] / "data" / "nri-transcripts"

Key = tuple[int, int, int]  # (mux conn, ttrpc type, stream id)


def _open(path: Path) -> Iterator[dict[str, Any]]:
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt") as fh:
        for line in fh:
            yield json.loads(line)


def transcript_names() -> list[str]:
    return sorted(p.name.split(".")[0] for p in TRANSCRIPTS.glob("*.frames.jsonl*"))


def _path(name: str, kind: str) -> Path:
    plain = TRANSCRIPTS / f"{name}.{kind}.jsonl"
    return plain if plain.exists() else TRANSCRIPTS / f"{name}.{kind}.jsonl.gz"


@dataclass
class RecordedMessage:
    dir: str
    conn: int
    stream_id: int
    type: int
    method: str
    last_frame: int
    header: bytes
    body: bytes | None
    payload_type: str
    reencode_identical: bool

    @property
    def key(self) -> Key:
        return (self.conn, self.type, self.stream_id)


@dataclass
class Transcript:
    name: str
    runtime_frames: list[tuple[int, bytes]]  # (seq, whole frame)
    plugin_messages: list[RecordedMessage]
    runtime_messages: list[RecordedMessage]
    runtime_eof: bool
    plugin_eof: bool

    def required_before(self, seq: int) -> set[Key]:
        return {m.key for m in self.plugin_messages if m.last_frame < seq}


def load(name: str) -> Transcript:
    frames: list[tuple[int, bytes]] = []
    runtime_eof = plugin_eof = False
    for rec in _open(_path(name, "frames")):
        if rec["kind"] == "frame" and rec["dir"] == "runtime->plugin":
            frames.append((rec["seq"], bytes.fromhex(rec["hex"])))
        elif rec["kind"] == "eof":
            if rec["dir"] == "runtime->plugin":
                runtime_eof = True
            else:
                plugin_eof = True
    plugin: list[RecordedMessage] = []
    runtime: list[RecordedMessage] = []
    for rec in _open(_path(name, "messages")):
        if rec.get("kind") != "message":
            continue
        info = rec.get("request") or rec.get("response") or {}
        body = bytes.fromhex(rec["body_hex"]) if rec.get("body_hex") is not None else None
        msg = RecordedMessage(
            dir=rec["dir"],
            conn=rec["mux_conn"],
            stream_id=rec["ttrpc"]["stream_id"],
            type=rec["ttrpc"]["type"],
            method=info.get("method", ""),
            last_frame=max(rec["frames"]),
            header=bytes.fromhex(rec["header_hex"]),
            body=body,
            payload_type=rec.get("payload_type") or "",
            reencode_identical=bool(rec.get("reencode_identical")),
        )
        (plugin if rec["dir"] == "plugin->runtime" else runtime).append(msg)
    return Transcript(name, frames, plugin, runtime, runtime_eof, plugin_eof)


@dataclass
class SentMessage:
    conn: int
    stream_id: int
    type: int
    flags: int
    body: bytes
    order: int

    @property
    def key(self) -> Key:
        return (self.conn, self.type, self.stream_id)


@dataclass
class PluginOutput:
    """Everything the plugin sent, parsed with the rules checked on the way."""

    frames: list[tuple[int, int]] = field(default_factory=list)  # (conn, payload length)
    messages: dict[Key, SentMessage] = field(default_factory=dict)
    order: list[Key] = field(default_factory=list)
    eof: bool = False
    problems: list[str] = field(default_factory=list)
    changed: asyncio.Event = field(default_factory=asyncio.Event)


async def _read_plugin(reader: asyncio.StreamReader, out: PluginOutput) -> None:
    buf = b""
    streams: dict[int, bytes] = {1: b"", 2: b""}
    last_call_id = 0
    while True:
        data = await reader.read(65536)
        if not data:
            out.eof = True
            if buf or any(streams.values()):
                out.problems.append("plugin closed in the middle of a frame or message")
            out.changed.set()
            return
        buf += data
        while len(buf) >= 8:
            conn, length = struct.unpack_from(">II", buf)
            if len(buf) < 8 + length:
                break
            payload, buf = buf[8 : 8 + length], buf[8 + length :]
            out.frames.append((conn, length))
            if length > 4096:
                out.problems.append(f"frame of {length} bytes on conn {conn} (limit 4096)")
            if conn not in (1, 2):
                out.problems.append(f"frame for conn {conn}")
                continue
            streams[conn] += payload
            while len(streams[conn]) >= 10:
                mlen, sid, mtype, flags = struct.unpack_from(">IIBB", streams[conn])
                if len(streams[conn]) < 10 + mlen:
                    break
                body = streams[conn][10 : 10 + mlen]
                streams[conn] = streams[conn][10 + mlen :]
                if flags:
                    out.problems.append(f"flags {flags} on stream {sid}")
                if conn == 2:
                    if mtype != 1:
                        out.problems.append(f"type {mtype} on conn 2 (plugin calls are requests)")
                    if sid % 2 == 0 or sid <= last_call_id:
                        out.problems.append(f"plugin call stream id {sid} after {last_call_id}")
                    last_call_id = sid
                elif mtype != 2:
                    out.problems.append(f"type {mtype} on conn 1 (plugin answers are responses)")
                sent = SentMessage(conn, sid, mtype, flags, body, len(out.order))
                if sent.key in out.messages:
                    out.problems.append(f"message {sent.key} sent twice")
                out.messages[sent.key] = sent
                out.order.append(sent.key)
        out.changed.set()


async def _wait_for(out: PluginOutput, keys: set[Key], timeout: float, what: str) -> None:
    async def _until() -> None:
        while not keys <= out.messages.keys():
            if out.eof:
                break
            out.changed.clear()
            await out.changed.wait()

    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(_until(), timeout)
    missing = keys - out.messages.keys()
    if missing:
        raise AssertionError(f"{what}: plugin never sent {sorted(missing)}; sent {out.order}")


async def drive(
    transcript: Transcript,
    reader: asyncio.StreamReader,
    writer: asyncio.StreamWriter,
    *,
    expect_plugin_eof: bool = False,
    timeout: float = 10.0,
) -> PluginOutput:
    """Play the runtime side, then close it (or, with ``expect_plugin_eof``, wait for the plugin to)."""
    out = PluginOutput()
    read_task = asyncio.get_running_loop().create_task(_read_plugin(reader, out))
    try:
        for seq, frame in transcript.runtime_frames:
            await _wait_for(out, transcript.required_before(seq), timeout, f"before runtime frame {seq}")
            writer.write(frame)
            await writer.drain()
        await _wait_for(out, {m.key for m in transcript.plugin_messages}, timeout, "at the end")
        if expect_plugin_eof:
            await asyncio.wait_for(_until_eof(out), timeout)
        writer.close()
        await asyncio.wait_for(read_task, timeout)
    finally:
        read_task.cancel()
    return out


async def _until_eof(out: PluginOutput) -> None:
    while not out.eof:
        out.changed.clear()
        await out.changed.wait()


# ---------------------------------------------------------------- comparison
def payload_class(full_name: str) -> type[Message]:
    return getattr(api_pb2, full_name.rsplit(".", 1)[1])  # type: ignore[no-any-return]


def decode_envelope(type_: int, body: bytes) -> Message:
    msg: Message = ttrpc_pb2.Request() if type_ == 1 else ttrpc_pb2.Response()
    msg.ParseFromString(body)
    return msg


Normalizer = Callable[[Message], None]


def compare(
    recorded: RecordedMessage, sent: SentMessage, normalize: Normalizer | None = None
) -> list[str]:
    """Differences between a recorded plugin message and ours, ignoring the plugin's own choices."""
    problems: list[str] = []
    assert recorded.body is not None, "truncated recorded message"
    want_env, got_env = decode_envelope(recorded.type, recorded.body), decode_envelope(sent.type, sent.body)
    where = f"{recorded.method or '?'} {recorded.key}"
    if recorded.type == 1:
        assert isinstance(want_env, ttrpc_pb2.Request)
        assert isinstance(got_env, ttrpc_pb2.Request)
        if (want_env.service, want_env.method) != (got_env.service, got_env.method):
            problems.append(f"{where}: calls {got_env.service}.{got_env.method}")
        if got_env.timeout_nano <= 0:
            problems.append(f"{where}: no timeout_nano")
        want_payload, got_payload = want_env.payload, got_env.payload
    else:
        assert isinstance(want_env, ttrpc_pb2.Response)
        assert isinstance(got_env, ttrpc_pb2.Response)
        if want_env.HasField("status") != got_env.HasField("status"):
            problems.append(f"{where}: status present {got_env.HasField('status')}, recorded {want_env.HasField('status')}")
        if (want_env.status.code, want_env.status.message) != (got_env.status.code, got_env.status.message):
            problems.append(f"{where}: status {got_env.status.code} {got_env.status.message!r}, recorded "
                            f"{want_env.status.code} {want_env.status.message!r}")
        want_payload, got_payload = want_env.payload, got_env.payload
    if bool(want_payload) != bool(got_payload):  # proto3 bytes: on the wire only when non-empty
        problems.append(f"{where}: payload present {bool(got_payload)}, recorded {bool(want_payload)}")
    if recorded.payload_type and not (recorded.type == 2 and want_env.HasField("status")):
        cls = payload_class(recorded.payload_type)
        want, got = cls(), cls()
        want.ParseFromString(want_payload)
        got.ParseFromString(got_payload)
        if want == got and recorded.type == 2 and recorded.reencode_identical and sent.body != recorded.body:
            problems.append(f"{where}: same content but bytes {sent.body.hex()} != recorded {recorded.body.hex()}")
        if normalize is not None:
            normalize(want)
            normalize(got)
        if want != got:
            problems.append(f"{where}: payload {str(got)[:400]!r} differs from recorded {str(want)[:400]!r}")
    return problems
