"""Session: the sans-IO pairing of mux and ttrpc with ttrpc's stream rules."""

from __future__ import annotations

import struct

import pytest
from hypothesis import given
from hypothesis import strategies as st

from topodra.nri import mux, ttrpc
from topodra.nri.errors import OversizedMessageError, ProtocolError
from topodra.nri.session import (
    CallFailed,
    MessageIgnored,
    RequestReceived,
    RequestRejected,
    ResponseReceived,
    Role,
    Session,
)
from topodra.nri.ttrpc import Code, MessageType, Status


def _pair() -> tuple[Session, Session]:
    return Session(Role.PLUGIN), Session(Role.RUNTIME, go_reader=True)


def test_call_and_answer_both_directions() -> None:
    plugin, runtime = _pair()
    sid = plugin.start_request("nri.pkg.api.v1alpha1.Runtime", "RegisterPlugin", b"\x0a\x01x", timeout_nano=5)
    assert sid == 1
    assert plugin.pending_calls == {1}
    (ev,) = runtime.receive_data(plugin.data_to_send())
    assert isinstance(ev, RequestReceived)
    assert ev.request.method == "RegisterPlugin"
    assert runtime.unanswered_requests == {1}
    runtime.send_response(1)
    (ans,) = plugin.receive_data(runtime.data_to_send())
    assert ans == ResponseReceived(1, Status(), b"")
    assert not plugin.pending_calls

    # runtime -> plugin calls use their own id space on conn 1
    assert runtime.start_request("nri.pkg.api.v1alpha1.Plugin", "Configure") == 1
    assert runtime.start_request("nri.pkg.api.v1alpha1.Plugin", "Synchronize") == 3
    evs = plugin.receive_data(runtime.data_to_send())
    assert [e.stream_id for e in evs] == [1, 3]
    plugin.send_response(3, b"\x10\x01")
    plugin.send_response(1, b"", Status(Code.UNKNOWN, "no"))
    answers = runtime.receive_data(plugin.data_to_send())
    assert answers == [ResponseReceived(3, Status(), b"\x10\x01"), ResponseReceived(1, Status(2, "no"), b"")]
    with pytest.raises(ValueError, match="no unanswered request"):
        plugin.send_response(3)


def _raw_request(sid: int, conn: int = 1, body: bytes | None = None) -> bytes:
    if body is None:
        body = ttrpc.encode_request(ttrpc.Request("s", "m"))
    return mux.encode_frames(conn, ttrpc.encode_message(sid, MessageType.REQUEST, body))


def test_server_rejects_even_and_reused_stream_ids_and_survives() -> None:
    plugin = Session(Role.PLUGIN)
    evs = plugin.receive_data(_raw_request(2) + _raw_request(5) + _raw_request(3) + _raw_request(5) + _raw_request(7))
    kinds = [(type(e).__name__, e.stream_id) for e in evs]
    assert kinds == [
        ("RequestRejected", 2),
        ("RequestReceived", 5),
        ("RequestRejected", 3),
        ("RequestRejected", 5),
        ("RequestReceived", 7),
    ]
    rejected = [e for e in evs if isinstance(e, RequestRejected)]
    assert rejected[0].status == Status(Code.INVALID_ARGUMENT, "StreamID must be odd for client initiated streams")
    assert rejected[1].status.message == "StreamID cannot be re-used and must increment"
    # the error replies are on the wire, on the offending stream ids
    runtime = Session(Role.RUNTIME)
    for sid in (1, 3, 5):  # make the runtime wait for 2?, no: it only accepts answers to its own calls
        runtime._pending.add(sid)
    answers = runtime.receive_data(plugin.data_to_send())
    assert [(type(a).__name__, a.stream_id) for a in answers] == [
        ("MessageIgnored", 2),
        ("ResponseReceived", 3),
        ("ResponseReceived", 5),
    ]


def test_garbage_request_body_gets_invalid_argument() -> None:
    plugin = Session(Role.PLUGIN)
    (ev,) = plugin.receive_data(_raw_request(1, body=b"\xff\xff\xff"))
    assert isinstance(ev, RequestRejected)
    assert ev.status.code == Code.INVALID_ARGUMENT
    assert "unmarshal request error" in ev.status.message
    reply = plugin.data_to_send()
    assert reply[:8] == struct.pack(">II", 1, len(reply) - 8)


def test_oversized_request_gets_resource_exhausted_and_connection_survives() -> None:
    plugin = Session(Role.PLUGIN)
    big = struct.pack(">IIBB", ttrpc.MAX_MESSAGE_LENGTH + 1, 1, 1, 0) + b"\0" * (ttrpc.MAX_MESSAGE_LENGTH + 1)
    wire = mux.encode_frames(1, big) + _raw_request(3)
    evs = plugin.receive_data(wire)
    assert isinstance(evs[0], RequestRejected)
    assert evs[0].status.code == Code.RESOURCE_EXHAUSTED
    assert "message length 4194305 exceed maximum message size of 4194304" in evs[0].status.message
    assert isinstance(evs[1], RequestReceived)
    assert evs[1].stream_id == 3


def test_oversized_call_uses_up_its_stream_id() -> None:
    runtime = Session(Role.RUNTIME)
    with pytest.raises(OversizedMessageError):
        runtime.start_request("svc", "Synchronize", b"\0" * (ttrpc.MAX_MESSAGE_LENGTH + 1))
    assert runtime.start_request("svc", "Synchronize", b"small") == 3  # split-sync: id 3 never on the wire
    assert runtime.data_to_send()[12:16] == struct.pack(">I", 3)


def test_oversized_reply_becomes_resource_exhausted() -> None:
    plugin, runtime = _pair()
    runtime.start_request("svc", "CreateContainer")
    plugin.receive_data(runtime.data_to_send())
    plugin.send_response(1, b"\0" * (ttrpc.MAX_MESSAGE_LENGTH + 1))
    (ans,) = runtime.receive_data(plugin.data_to_send())
    assert isinstance(ans, ResponseReceived)
    assert ans.status.code == Code.RESOURCE_EXHAUSTED


def test_client_ignores_unknown_streams_and_wrong_types() -> None:
    plugin, runtime = _pair()
    runtime._unanswered.add(9)
    runtime.send_response(9)
    (ev,) = plugin.receive_data(runtime.data_to_send())
    assert ev == MessageIgnored(2, 9, "response for a stream nobody waits for")
    # a request on the conn where we are the client
    (ev,) = plugin.receive_data(_raw_request(1, conn=2))
    assert isinstance(ev, MessageIgnored)
    # a response on the conn where we serve
    (ev,) = plugin.receive_data(mux.encode_frames(1, ttrpc.encode_message(1, MessageType.RESPONSE, b"")))
    assert isinstance(ev, MessageIgnored)


def test_abandoned_call_ignores_late_answer_and_garbage_answers_fail_the_call() -> None:
    plugin, runtime = _pair()
    sid = plugin.start_request("s", "m")
    runtime.receive_data(plugin.data_to_send())
    plugin.abandon_call(sid)
    runtime.send_response(sid)
    assert isinstance(plugin.receive_data(runtime.data_to_send())[0], MessageIgnored)
    sid = plugin.start_request("s", "m")
    bad = mux.encode_frames(2, ttrpc.encode_message(sid, MessageType.RESPONSE, b"\xff"))
    (ev,) = plugin.receive_data(bad)
    assert isinstance(ev, CallFailed)
    assert ev.status.code == Code.INTERNAL


def test_go_reader_rule_drops_a_frame_go_could_not_read() -> None:
    runtime = Session(Role.RUNTIME, go_reader=True)
    message = ttrpc.encode_message(1, MessageType.REQUEST, b"\0" * 7622)
    with pytest.raises(ProtocolError, match="does not fit the 4096-byte read of a Go peer"):
        runtime.receive_data(mux.encode_frames(2, message, max_payload=10_000))
    ok = Session(Role.RUNTIME, go_reader=True)
    ok.receive_data(mux.encode_frames(2, message))


def test_frames_sent_never_exceed_4096() -> None:
    plugin = Session(Role.PLUGIN)
    plugin.start_request("s", "m", b"p" * 20000)
    frames = mux.MuxDecoder().feed(plugin.data_to_send())
    assert max(len(f.payload) for f in frames) == 4096
    assert plugin.frames_sent == len(frames)


@given(st.binary(max_size=2000))
def test_session_fuzz_never_crashes(data: bytes) -> None:
    for role in Role:
        s = Session(role, go_reader=True)
        try:
            evs = s.receive_data(data)
            s.eof()
        except ProtocolError:
            continue
        for ev in evs:
            if isinstance(ev, RequestReceived):
                s.send_response(ev.stream_id)
        s.data_to_send()
