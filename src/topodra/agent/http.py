"""A small asyncio HTTP/1.1 endpoint: /metrics, /healthz, /readyz and /state.

Only GET and HEAD, no keep-alive, bounded request size: enough for Prometheus
scrapes and kubelet probes without another web framework in the agent.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from collections.abc import Callable
from dataclasses import dataclass

__all__ = ["HttpEndpoint", "Route", "parse_address"]

log = logging.getLogger(__name__)

_MAX_HEADER = 16 * 1024


@dataclass(frozen=True)
class Route:
    """A handler returning (status, content type, body)."""

    handler: Callable[[], tuple[int, str, bytes]]


def parse_address(address: str) -> tuple[str, int]:
    """``":9402"``, ``"127.0.0.1:9402"`` or ``"[::1]:9402"`` -> (host, port)."""
    host, sep, port_s = address.rpartition(":")
    if not sep or not port_s.isdigit() or not 0 <= int(port_s) <= 65535:
        raise ValueError(f"invalid listen address {address!r}: expected HOST:PORT or :PORT")
    host = host.strip("[]") or "0.0.0.0"
    return host, int(port_s)


def json_route(fn: Callable[[], object]) -> Route:
    return Route(lambda: (200, "application/json", json.dumps(fn(), indent=2, sort_keys=True).encode()))


class HttpEndpoint:
    def __init__(self, routes: dict[str, Route]) -> None:
        self.routes = routes
        self._server: asyncio.Server | None = None

    @property
    def port(self) -> int:
        if self._server is None or not self._server.sockets:
            raise RuntimeError("endpoint is not listening")
        return int(self._server.sockets[0].getsockname()[1])

    async def start(self, address: str) -> None:
        host, port = parse_address(address)
        self._server = await asyncio.start_server(self._serve, host, port)

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()
            self._server = None

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            try:
                head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), timeout=10)
            except (asyncio.LimitOverrunError, asyncio.IncompleteReadError, TimeoutError):
                await self._reply(writer, 400, "text/plain", b"bad request\n", head_only=False)
                return
            if len(head) > _MAX_HEADER:
                await self._reply(writer, 431, "text/plain", b"request header too large\n", head_only=False)
                return
            request_line = head.split(b"\r\n", 1)[0].decode("latin-1")
            parts = request_line.split()
            if len(parts) != 3 or not parts[2].startswith("HTTP/1."):
                await self._reply(writer, 400, "text/plain", b"bad request\n", head_only=False)
                return
            method, target, _ = parts
            path = target.split("?", 1)[0]
            if method not in ("GET", "HEAD"):
                await self._reply(writer, 405, "text/plain", b"method not allowed\n", head_only=False)
                return
            route = self.routes.get(path)
            if route is None:
                await self._reply(writer, 404, "text/plain", f"no such path {path}\n".encode(), method == "HEAD")
                return
            try:
                status, ctype, body = route.handler()
            except Exception as err:  # a broken handler must not take the endpoint down
                log.exception("http handler for %s failed", path)
                status, ctype, body = 500, "text/plain", f"internal error: {err}\n".encode()
            await self._reply(writer, status, ctype, body, method == "HEAD")
        finally:
            with contextlib.suppress(Exception):
                writer.close()
                await writer.wait_closed()

    @staticmethod
    async def _reply(writer: asyncio.StreamWriter, status: int, ctype: str, body: bytes, head_only: bool) -> None:
        reason = {200: "OK", 400: "Bad Request", 404: "Not Found", 405: "Method Not Allowed",
                  431: "Request Header Fields Too Large", 500: "Internal Server Error", 503: "Service Unavailable"}
        head = (
            f"HTTP/1.1 {status} {reason.get(status, 'Status')}\r\n"
            f"Content-Type: {ctype}\r\nContent-Length: {len(body)}\r\nConnection: close\r\n\r\n"
        ).encode()
        writer.write(head if head_only else head + body)
        await writer.drain()
