"""The metrics/health endpoint answers real HTTP (parsed by h11) and survives bad, big, slow and
many requests; /state is served only locally unless configured otherwise."""

from __future__ import annotations

import asyncio
import contextlib
import socket
import stat
from collections.abc import Awaitable, Callable
from pathlib import Path

import pytest

from topodra.agent.http import HttpEndpoint, Limits, Route, json_route, parse_address, parse_listen
from topodra.agent.metrics import AgentMetrics


async def _request(port: int, raw: bytes) -> bytes:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(raw)
    await writer.drain()
    data = await reader.read()
    writer.close()
    return data


def _boom() -> tuple[int, str, bytes]:
    raise RuntimeError("kaput")


def test_endpoint_routes_and_errors() -> None:
    metrics = AgentMetrics()
    metrics.claims.set(3)

    async def scenario() -> None:
        ep = HttpEndpoint(
            {
                "/metrics": Route(lambda: (200, "text/plain; version=0.0.4", metrics.render())),
                "/state": json_route(lambda: {"ok": True}),
                "/boom": Route(_boom),
            }
        )
        await ep.start("127.0.0.1:0")
        try:
            got = await _request(ep.port, b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n")
            assert got.startswith(b"HTTP/1.1 200 OK")
            assert b"topodra_claims 3.0" in got
            got = await _request(ep.port, b"GET /state?x=1 HTTP/1.1\r\nHost: x\r\n\r\n")
            assert b'"ok": true' in got
            assert (await _request(ep.port, b"GET /nope HTTP/1.1\r\nHost: x\r\n\r\n")).startswith(b"HTTP/1.1 404")
            assert (await _request(ep.port, b"POST /metrics HTTP/1.1\r\nHost: x\r\n\r\n")).startswith(b"HTTP/1.1 405")
            assert (await _request(ep.port, b"garbage\r\n\r\n")).startswith(b"HTTP/1.1 400")
            assert (await _request(ep.port, b"GET /state HTTP/1.1\r\n\r\n")).startswith(b"HTTP/1.1 400")  # no Host
            assert (await _request(ep.port, b"GET /boom HTTP/1.1\r\nHost: x\r\n\r\n")).startswith(b"HTTP/1.1 500")
            body = b"GET /state HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\n\r\nabc"
            assert (await _request(ep.port, body)).startswith(b"HTTP/1.1 413")
            head = await _request(ep.port, b"HEAD /state HTTP/1.1\r\nHost: x\r\n\r\n")
            assert head.startswith(b"HTTP/1.1 200")
            assert head.endswith(b"\r\n\r\n")
            assert b"Content-Length: 16" in head  # the GET's length, no body
            # HTTP/1.0 needs no Host.
            assert (await _request(ep.port, b"GET /state HTTP/1.0\r\n\r\n")).startswith(b"HTTP/1.1 200")
            # The endpoint still serves after all that.
            assert (await _request(ep.port, b"GET /state HTTP/1.1\r\nHost: x\r\n\r\n")).startswith(b"HTTP/1.1 200")
        finally:
            await ep.stop()

    asyncio.run(scenario())


@pytest.mark.parametrize(
    ("text", "expected"), [(":9402", ("0.0.0.0", 9402)), ("127.0.0.1:80", ("127.0.0.1", 80)), ("[::1]:1", ("::1", 1))]
)
def test_parse_address(text: str, expected: tuple[str, int]) -> None:
    assert parse_address(text) == expected


@pytest.mark.parametrize("text", ["9402", "host:", "host:99999", "host:abc"])
def test_parse_address_rejects(text: str) -> None:
    with pytest.raises(ValueError, match="invalid listen address"):
        parse_address(text)


def _serve(limits: Limits, scenario: Callable[[HttpEndpoint], Awaitable[None]]) -> None:
    async def main() -> None:
        ep = HttpEndpoint({"/healthz": Route(lambda: (200, "text/plain", b"ok\n"))}, limits)
        await ep.start("127.0.0.1:0")
        try:
            await scenario(ep)
        finally:
            await ep.stop()

    asyncio.run(main())


def test_oversized_head_is_refused() -> None:
    async def scenario(ep: HttpEndpoint) -> None:
        big = b"GET /healthz HTTP/1.1\r\nHost: x\r\n" + b"X-Pad: " + b"a" * 4096 + b"\r\n\r\n"
        assert (await _request(ep.port, big)).startswith(b"HTTP/1.1 431")
        many = b"GET /healthz HTTP/1.1\r\nHost: x\r\n" + b"".join(b"X-%d: 1\r\n" % i for i in range(2000)) + b"\r\n"
        assert (await _request(ep.port, many)).startswith(b"HTTP/1.1 431")
        assert (await _request(ep.port, b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")).startswith(b"HTTP/1.1 200")

    _serve(Limits(max_head_bytes=1024), scenario)


def test_slow_clients_time_out_and_others_are_served_meanwhile() -> None:
    async def scenario(ep: HttpEndpoint) -> None:
        # Four clients that send half a request and then nothing (slowloris).
        slow = []
        for _ in range(4):
            reader, writer = await asyncio.open_connection("127.0.0.1", ep.port)
            writer.write(b"GET /healthz HTTP/1.1\r\nHo")
            await writer.drain()
            slow.append((reader, writer))
        # A normal client is answered while they hang.
        assert (await _request(ep.port, b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")).startswith(b"HTTP/1.1 200")
        # Each slow client gets 408 at its deadline and the connection ends.
        for reader, writer in slow:
            got = await asyncio.wait_for(reader.read(), 10)
            assert got.startswith(b"HTTP/1.1 408"), got
            writer.close()
        assert ep.active == 0

    _serve(Limits(request_timeout=0.3), scenario)


def test_connections_beyond_the_limit_are_closed_unanswered() -> None:
    async def scenario(ep: HttpEndpoint) -> None:
        held = []
        for _ in range(2):
            reader, writer = await asyncio.open_connection("127.0.0.1", ep.port)
            writer.write(b"GET /healthz HTTP/1.1\r\n")
            await writer.drain()
            held.append((reader, writer))
        while ep.active < 2:  # both are being served (waiting for the rest of their head)
            await asyncio.sleep(0)
        # Closed unanswered: an empty read, or a reset (the request was left unread).
        with contextlib.suppress(ConnectionResetError):
            assert await _request(ep.port, b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n") == b""
        for _, writer in held:
            writer.close()
        while ep.active:
            await asyncio.sleep(0)
        assert (await _request(ep.port, b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")).startswith(b"HTTP/1.1 200")

    _serve(Limits(max_connections=2, request_timeout=30), scenario)


def test_unix_socket_endpoint(tmp_path: Path) -> None:
    path = tmp_path / "s" / "state.sock"

    async def main() -> None:
        ep = HttpEndpoint({"/state": json_route(lambda: {"ok": True})})
        await ep.start(f"unix:{path}")
        try:
            assert stat.S_IMODE(path.stat().st_mode) == 0o600
            reader, writer = await asyncio.open_unix_connection(str(path))
            writer.write(b"GET /state HTTP/1.1\r\nHost: x\r\n\r\n")
            got = await reader.read()
            writer.close()
            assert got.startswith(b"HTTP/1.1 200")
            assert b'"ok": true' in got
            # A second endpoint on a live socket is refused, not stolen.
            with pytest.raises(OSError, match="in use"):
                await HttpEndpoint({}).start(f"unix:{path}")
        finally:
            await ep.stop()
        assert not path.exists()
        # A stale socket file (its owner died) is replaced.
        with socket.socket(socket.AF_UNIX) as s:
            s.bind(str(path))
        ep = HttpEndpoint({})
        await ep.start(f"unix:{path}")
        await ep.stop()

    asyncio.run(main())


@pytest.mark.parametrize(
    ("address", "local"),
    [("127.0.0.1:1", True), ("[::1]:1", True), ("localhost:1", True), ("unix:/run/x.sock", True),
     (":9402", False), ("0.0.0.0:1", False), ("10.0.0.1:1", False)],
)
def test_local_addresses(address: str, local: bool) -> None:
    assert parse_listen(address).is_local is local


def test_a_client_that_never_reads_its_answer_is_dropped_at_the_deadline() -> None:
    big = b"x" * (32 * 1024 * 1024)  # more than the socket buffers hold

    async def main() -> None:
        ep = HttpEndpoint({"/big": Route(lambda: (200, "text/plain", big))}, Limits(write_timeout=0.3))
        await ep.start("127.0.0.1:0")
        try:
            sock = socket.socket()
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
            sock.connect(("127.0.0.1", ep.port))
            sock.setblocking(False)
            reader, writer = await asyncio.open_connection(sock=sock)
            writer.write(b"GET /big HTTP/1.1\r\nHost: x\r\n\r\n")
            await writer.drain()
            while ep.active == 0:  # accepted
                await asyncio.sleep(0)
            while ep.active:  # ... and dropped, though this client has not read a byte
                await asyncio.sleep(0.01)
            assert (await _request(ep.port, b"GET /nope HTTP/1.1\r\nHost: x\r\n\r\n")).startswith(b"HTTP/1.1 404")
            # The connection was aborted, its unsent answer dropped: reading now ends early.
            got = 0
            with contextlib.suppress(ConnectionResetError):
                while chunk := await reader.read(1 << 20):
                    got += len(chunk)
            assert got < len(big)
            writer.close()
        finally:
            await ep.stop()

    asyncio.run(main())


@pytest.mark.parametrize("sent", [b"", b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\n{\"cut"])
def test_an_answer_cut_short_is_a_connection_error(sent: bytes) -> None:
    """A server killed before or while answering (the crash soak's agent) gives ConnectionError,
    an OSError the polling callers already handle, not h11's protocol error."""
    from topodra.agent.http import get

    async def main() -> None:
        async def answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            await reader.readuntil(b"\r\n\r\n")
            writer.write(sent)
            await writer.drain()
            writer.close()

        server = await asyncio.start_server(answer, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        try:
            with pytest.raises(ConnectionError, match="cut short"):
                await get(f"127.0.0.1:{port}", "/state")
        finally:
            server.close()
            await server.wait_closed()

    asyncio.run(main())
