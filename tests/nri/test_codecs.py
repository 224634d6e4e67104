"""The sans-IO codecs: mux framing, ttrpc messages and envelopes, the Go read model."""

from __future__ import annotations

import contextlib
import struct

import pytest
from hypothesis import given
from hypothesis import strategies as st

from topodra.nri import mux, ttrpc
from topodra.nri.errors import OversizedMessageError, ProtocolError
from topodra.nri.goread import GoReadModel
from topodra.nri.mux import Frame, MuxDecoder, MuxError, encode_frames
from topodra.nri.ttrpc import Code, MessageDecoder, MessageType, Request, Status


def _split(data: bytes, cuts: list[int]) -> list[bytes]:
    points = sorted({c % (len(data) + 1) for c in cuts})
    pieces, last = [], 0
    for p in points:
        pieces.append(data[last:p])
        last = p
    pieces.append(data[last:])
    return pieces


# ---------------------------------------------------------------- mux
def test_frame_layout_matches_the_reference_register_example() -> None:
    # reference §3.5: RegisterPlugin{cpuset, 10}, timeout 5 s is 84 bytes on the wire
    body = ttrpc.encode_request(
        Request("nri.pkg.api.v1alpha1.Runtime", "RegisterPlugin", bytes.fromhex("0a06637075736574120231 30".replace(" ", "")), 5_000_000_000)
    )
    wire = encode_frames(2, ttrpc.encode_message(1, MessageType.REQUEST, body))
    assert len(wire) == 84
    assert wire[:8] == bytes.fromhex("000000020000004c")
    assert wire[8:18] == bytes.fromhex("00000042000000010100")
    assert wire.endswith(bytes.fromhex("2080e497d012"))


def test_small_message_is_one_frame_and_large_ones_are_4096_chunks() -> None:
    assert encode_frames(1, b"") == b""
    one = encode_frames(1, b"x" * 4096)
    assert one[:8] == struct.pack(">II", 1, 4096)
    assert len(one) == 4104
    many = encode_frames(2, b"y" * 10000)
    frames = MuxDecoder().feed(many)
    assert [len(f.payload) for f in frames] == [4096, 4096, 1808]
    assert all(f.conn_id == 2 for f in frames)
    with pytest.raises(ValueError, match="conn id 0"):
        encode_frames(0, b"x")


@given(st.lists(st.tuples(st.sampled_from([1, 2]), st.binary(max_size=9000)), max_size=8), st.lists(st.integers(0, 10**6), max_size=12))
def test_mux_round_trip_under_any_slicing(messages: list[tuple[int, bytes]], cuts: list[int]) -> None:
    wire = b"".join(encode_frames(c, d) for c, d in messages)
    dec = MuxDecoder()
    got: list[Frame] = []
    for piece in _split(wire, cuts):
        got.extend(dec.feed(piece))
    dec.eof()
    for f in got:
        assert len(f.payload) <= mux.MAX_SEND_PAYLOAD
    per_conn = {1: b"", 2: b""}
    for f in got:
        per_conn[f.conn_id] += f.payload
    for conn in (1, 2):
        assert per_conn[conn] == b"".join(d for c, d in messages if c == conn)


def test_unknown_conn_ids_are_dropped_and_counted() -> None:
    dec = MuxDecoder()
    wire = struct.pack(">II", 7, 3) + b"abc" + struct.pack(">II", 0, 1) + b"z" + encode_frames(1, b"ok")
    assert dec.feed(wire) == [Frame(1, b"ok")]
    assert (dec.dropped_frames, dec.dropped_bytes) == (2, 4)


def test_oversized_frame_header_fails_before_buffering() -> None:
    dec = MuxDecoder()
    with pytest.raises(MuxError, match="announces 4194315 payload bytes"):
        dec.feed(struct.pack(">II", 1, mux.MAX_RECV_PAYLOAD + 1))
    # exactly the Go cap is fine (the body is simply awaited)
    assert MuxDecoder().feed(struct.pack(">II", 1, mux.MAX_RECV_PAYLOAD)) == []


@pytest.mark.parametrize(
    ("wire", "match"),
    [(b"\x00\x00\x00", "inside a frame header"), (struct.pack(">II", 2, 10) + b"abc", r"conn 2 \(3 of 10")],
)
def test_truncated_stream_is_reported_at_eof(wire: bytes, match: str) -> None:
    dec = MuxDecoder()
    dec.feed(wire)
    with pytest.raises(MuxError, match=match):
        dec.eof()


@given(st.binary(max_size=3000), st.lists(st.integers(0, 4000), max_size=6))
def test_mux_decoder_fuzz_never_crashes(data: bytes, cuts: list[int]) -> None:
    dec = MuxDecoder(max_payload=1 << 16)
    total = 0
    try:
        for piece in _split(data, cuts):
            for f in dec.feed(piece):
                total += 8 + len(f.payload)
        dec.eof()
    except MuxError:
        return
    assert total + dec.dropped_bytes + 8 * dec.dropped_frames == len(data)


# ---------------------------------------------------------------- ttrpc
def test_ttrpc_messages_reassemble_across_frames() -> None:
    msgs = [ttrpc.encode_message(1, 1, b"a" * 5000), ttrpc.encode_message(3, 1, b""), ttrpc.encode_message(5, 2, b"b")]
    stream = b"".join(msgs)
    dec = MessageDecoder()
    out = []
    for piece in _split(stream, [3, 9, 10, 4096, 5009, 5012]):
        out.extend(dec.feed(piece))
    dec.eof()
    assert [(m.stream_id, m.type, len(m.body)) for m in out if isinstance(m, ttrpc.Message)] == [(1, 1, 5000), (3, 1, 0), (5, 2, 1)]


def test_oversized_message_is_skipped_and_reported() -> None:
    dec = MessageDecoder(max_length=100)
    big = struct.pack(">IIBB", 150, 7, 1, 0) + b"q" * 150
    after = ttrpc.encode_message(9, 1, b"next")
    out = []
    for piece in _split(big + after, [20, 60, 160]):
        out.extend(dec.feed(piece))
    assert out[0] == ttrpc.OversizedMessage(7, 1, 150)
    assert out[1] == ttrpc.Message(9, 1, 0, b"next")
    assert dec.buffered == 0


def test_encode_refuses_oversized_bodies() -> None:
    with pytest.raises(OversizedMessageError, match="message length 4194305 exceed maximum message size of 4194304"):
        ttrpc.encode_message(1, 1, b"\0" * (ttrpc.MAX_MESSAGE_LENGTH + 1))


def test_truncated_message_at_eof() -> None:
    dec = MessageDecoder()
    dec.feed(ttrpc.encode_message(3, 1, b"hello")[:-2])
    with pytest.raises(ProtocolError, match="stream 3 \\(3 of 5 body bytes\\)"):
        dec.eof()


def test_success_response_is_a_bare_header_like_go() -> None:
    # transcripts: every successful empty reply is 00000000 <sid> 02 00
    assert ttrpc.encode_message(1, MessageType.RESPONSE, ttrpc.encode_response()) == bytes.fromhex("00000000000000010200")
    # an error reply carries status and no payload
    body = ttrpc.encode_response(b"ignored", Status(Code.UNIMPLEMENTED, "method X"))
    assert body == bytes.fromhex("0a0c080c12086d6574686f642058")
    assert ttrpc.decode_response(body) == (Status(12, "method X"), b"")
    assert ttrpc.decode_response(b"") == (Status(), b"")


def test_request_envelope_round_trip_and_absent_fields() -> None:
    req = Request("svc", "M", b"", 0, (("k", "v"),))
    body = ttrpc.encode_request(req)
    assert ttrpc.decode_request(body) == req
    assert b"\x1a" not in ttrpc.encode_request(Request("s", "m"))  # no payload field when empty


@given(st.binary(max_size=400))
def test_envelope_decoders_fuzz(data: bytes) -> None:
    for decode in (ttrpc.decode_request, ttrpc.decode_response):
        try:
            decode(data)
        except ProtocolError as exc:
            assert "unmarshal" in str(exc)


@given(st.binary(max_size=2000), st.lists(st.integers(0, 3000), max_size=5))
def test_message_decoder_fuzz_never_crashes(data: bytes, cuts: list[int]) -> None:
    dec = MessageDecoder(max_length=512)
    for piece in _split(data, cuts):
        for item in dec.feed(piece):
            assert isinstance(item, ttrpc.Message | ttrpc.OversizedMessage)
    with contextlib.suppress(ProtocolError):
        dec.eof()


def test_code_titles_are_go_names() -> None:
    assert Code.INVALID_ARGUMENT.title == "InvalidArgument"
    assert Code.CANCELLED.title == "Canceled"
    assert str(Status(2, "boom")) == "Unknown: boom"


# ---------------------------------------------------------------- Go read model
def _frames(message_lengths: list[int], frame_sizes: list[int]) -> list[bytes]:
    stream = b"".join(struct.pack(">IIBB", n, 1, 1, 0) + b"x" * n for n in message_lengths)
    out, pos = [], 0
    for size in frame_sizes:
        out.append(stream[pos : pos + size])
        pos += size
    assert pos == len(stream)
    return out


def test_go_reader_accepts_chunked_and_rejects_one_big_frame() -> None:
    # frame-limit-chunked vs frame-limit-oversized: a 7,632-byte message
    model = GoReadModel()
    assert all(model.accept(f) for f in _frames([7622], [4096, 3536]))
    assert not GoReadModel().accept(_frames([7622], [7632])[0])


def test_go_reader_accepts_go_style_4096_then_rest() -> None:
    # split-sync: 4096 + 4,167,640 bytes; the rest is read straight into the body buffer
    model = GoReadModel()
    assert all(model.accept(f) for f in _frames([4171726], [4096, 4167640]))
    # but a rest that runs into the next message does not fit the body buffer
    model = GoReadModel()
    frames = _frames([9000, 5], [4096, 4914 + 15])
    assert model.accept(frames[0])
    assert not model.accept(frames[1])


@given(st.lists(st.integers(0, 20000), min_size=1, max_size=5))
def test_go_reader_accepts_everything_we_send(lengths: list[int]) -> None:
    stream = b"".join(ttrpc.encode_message(2 * i + 1, 1, b"z" * n) for i, n in enumerate(lengths))
    model = GoReadModel()
    for f in MuxDecoder().feed(encode_frames(1, stream)):
        assert model.accept(f.payload)
