"""The metrics/health endpoint answers real HTTP and survives bad requests."""

from __future__ import annotations

import asyncio

import pytest

from topodra.agent.http import HttpEndpoint, Route, json_route, parse_address
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
            got = await _request(ep.port, b"GET /state?x=1 HTTP/1.1\r\n\r\n")
            assert b'"ok": true' in got
            assert (await _request(ep.port, b"GET /nope HTTP/1.1\r\n\r\n")).startswith(b"HTTP/1.1 404")
            assert (await _request(ep.port, b"POST /metrics HTTP/1.1\r\n\r\n")).startswith(b"HTTP/1.1 405")
            assert (await _request(ep.port, b"garbage\r\n\r\n")).startswith(b"HTTP/1.1 400")
            assert (await _request(ep.port, b"GET /boom HTTP/1.1\r\n\r\n")).startswith(b"HTTP/1.1 500")
            head = await _request(ep.port, b"HEAD /state HTTP/1.1\r\n\r\n")
            assert head.endswith(b"\r\n\r\n")
            # The endpoint still serves after all that.
            assert (await _request(ep.port, b"GET /state HTTP/1.1\r\n\r\n")).startswith(b"HTTP/1.1 200")
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
