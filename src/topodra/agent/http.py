"""The agent's small HTTP/1.1 endpoints: /metrics, /healthz, /readyz (and /state, locally).

HTTP is parsed by h11 (sans-IO); asyncio only moves bytes. GET and HEAD, one
request per connection, and every resource a client can hold is bounded: the
request head's size, the time to send it and to read the answer, and the
number of connections at once. A slow or hostile client costs one small task
until its deadline, never the agent's event loop.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import ipaddress
import json
import logging
import socket
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import h11

__all__ = ["HttpEndpoint", "Limits", "Listen", "Route", "get", "json_route", "parse_address", "parse_listen"]

log = logging.getLogger(__name__)

_REASONS = {
    200: b"OK",
    400: b"Bad Request",
    404: b"Not Found",
    405: b"Method Not Allowed",
    408: b"Request Timeout",
    413: b"Content Too Large",
    431: b"Request Header Fields Too Large",
    500: b"Internal Server Error",
    503: b"Service Unavailable",
}


@dataclass(frozen=True)
class Route:
    """A handler returning (status, content type, body)."""

    handler: Callable[[], tuple[int, str, bytes]]


@dataclass(frozen=True)
class Limits:
    """What one client may cost: bytes of request head, seconds to send it and to take the
    answer, and connections served at once (the rest are closed unanswered)."""

    max_head_bytes: int = 16 * 1024
    request_timeout: float = 5.0
    write_timeout: float = 10.0
    max_connections: int = 32


@dataclass(frozen=True)
class Listen:
    """Where an endpoint listens: TCP ``host``/``port``, or a unix socket ``path``."""

    host: str = ""
    port: int = 0
    path: Path | None = None

    @property
    def is_local(self) -> bool:
        """Reachable only from this host (or pod): a unix socket or a loopback address."""
        if self.path is not None:
            return True
        if self.host == "localhost":
            return True
        try:
            return ipaddress.ip_address(self.host).is_loopback
        except ValueError:
            return False


def parse_address(address: str) -> tuple[str, int]:
    """``":9402"``, ``"127.0.0.1:9402"`` or ``"[::1]:9402"`` -> (host, port)."""
    host, sep, port_s = address.rpartition(":")
    if not sep or not port_s.isdigit() or not 0 <= int(port_s) <= 65535:
        raise ValueError(f"invalid listen address {address!r}: expected HOST:PORT or :PORT")
    host = host.strip("[]") or "0.0.0.0"
    return host, int(port_s)


def parse_listen(address: str) -> Listen:
    """A TCP address (see ``parse_address``) or ``unix:/absolute/path``."""
    if address.startswith("unix:"):
        path = Path(address.removeprefix("unix:"))
        if not path.is_absolute():
            raise ValueError(f"invalid listen address {address!r}: expected unix:/absolute/path")
        return Listen(path=path)
    host, port = parse_address(address)
    return Listen(host=host, port=port)


def json_route(fn: Callable[[], object]) -> Route:
    return Route(lambda: (200, "application/json", json.dumps(fn(), indent=2, sort_keys=True).encode()))


class _Refused(Exception):
    """The request is answered with an error status and the connection closed."""

    def __init__(self, status: int, text: str) -> None:
        super().__init__(text)
        self.status = status


class HttpEndpoint:
    """One listener serving ``routes``; ``await start(address)``, then ``await stop()``."""

    def __init__(self, routes: dict[str, Route], limits: Limits | None = None) -> None:
        self.routes = routes
        self.limits = limits or Limits()
        self._server: asyncio.Server | None = None
        self._clients: set[asyncio.StreamWriter] = set()
        self._idle = asyncio.Event()
        self._unix: Path | None = None

    @property
    def port(self) -> int:
        if self._server is None or not self._server.sockets:
            raise RuntimeError("endpoint is not listening")
        return int(self._server.sockets[0].getsockname()[1])

    @property
    def active(self) -> int:
        """Connections being served now."""
        return len(self._clients)

    async def start(self, address: str) -> None:
        where = parse_listen(address)
        if where.path is not None:
            where.path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
            _remove_stale_socket(where.path)
            self._server = await asyncio.start_unix_server(self._serve, str(where.path))
            where.path.chmod(0o600)  # the directory (stateDir) is the agent's alone as well
            self._unix = where.path
        else:
            self._server = await asyncio.start_server(self._serve, where.host, where.port)

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
            if self._clients:  # end the connections still being served, and wait for them
                self._idle.clear()
                for writer in list(self._clients):
                    writer.transport.abort()
                await self._idle.wait()
            await self._server.wait_closed()
            self._server = None
        if self._unix is not None:
            with contextlib.suppress(OSError):
                self._unix.unlink()
            self._unix = None

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        if len(self._clients) >= self.limits.max_connections:
            writer.close()
            return
        self._clients.add(writer)
        conn = h11.Connection(h11.SERVER, max_incomplete_event_size=self.limits.max_head_bytes)
        try:
            try:
                async with asyncio.timeout(self.limits.request_timeout):
                    request = await self._read_request(conn, reader)
                if request is None:
                    return
                status, ctype, body = self._answer(request)
                head_only = request.method == b"HEAD"
            except TimeoutError:
                status, ctype, body, head_only = 408, "text/plain", b"request timeout\n", False
            except h11.RemoteProtocolError as err:
                status, ctype, body, head_only = err.error_status_hint, "text/plain", f"{err}\n".encode(), False
            except _Refused as err:
                status, ctype, body, head_only = err.status, "text/plain", f"{err}\n".encode(), False
            await self._send(conn, writer, status, ctype, body, head_only)
        except (ConnectionError, TimeoutError, h11.LocalProtocolError):
            writer.transport.abort()  # the client left or would not take its answer
        finally:
            writer.close()
            try:
                await asyncio.wait_for(writer.wait_closed(), self.limits.write_timeout)
            except (TimeoutError, OSError):
                writer.transport.abort()  # unsent bytes a client never reads are dropped
            self._clients.discard(writer)
            if not self._clients:
                self._idle.set()

    async def _read_request(self, conn: h11.Connection, reader: asyncio.StreamReader) -> h11.Request | None:
        while True:
            event = conn.next_event()
            if event is h11.NEED_DATA:
                conn.receive_data(await reader.read(4096))
                continue
            if isinstance(event, h11.Request):
                return event
            return None  # ConnectionClosed before a request: nothing to answer

    def _answer(self, request: h11.Request) -> tuple[int, str, bytes]:
        if request.method not in (b"GET", b"HEAD"):
            raise _Refused(405, "method not allowed")
        length = dict(request.headers).get(b"content-length", b"0")
        if length != b"0" or any(k == b"transfer-encoding" for k, _ in request.headers):
            raise _Refused(413, "requests carry no body here")
        path = request.target.split(b"?", 1)[0].decode("ascii", "replace")
        route = self.routes.get(path)
        if route is None:
            return 404, "text/plain", f"no such path {path}\n".encode()
        try:
            return route.handler()
        except Exception as err:  # a broken handler must not take the endpoint down
            log.exception("http handler for %s failed", path)
            return 500, "text/plain", f"internal error: {err}\n".encode()

    async def _send(
        self, conn: h11.Connection, writer: asyncio.StreamWriter, status: int, ctype: str, body: bytes, head_only: bool
    ) -> None:
        headers = [("Content-Type", ctype), ("Content-Length", str(len(body))), ("Connection", "close")]
        events: list[h11.Event] = [h11.Response(status_code=status, headers=headers, reason=_REASONS.get(status, b""))]
        if not head_only:
            events.append(h11.Data(data=body))
        events.append(h11.EndOfMessage())
        writer.write(b"".join(conn.send(e) or b"" for e in events))
        await asyncio.wait_for(writer.drain(), self.limits.write_timeout)


def _remove_stale_socket(path: Path) -> None:
    """A socket file left by a previous run is removed; one a live process answers on is not."""
    if not path.is_socket():
        return  # absent, or not a socket: binding reports it
    with socket.socket(socket.AF_UNIX) as probe:
        try:
            probe.connect(str(path))
        except OSError:
            path.unlink(missing_ok=True)
            return
    raise OSError(errno.EADDRINUSE, f"{path} is in use by another process")


async def get(address: str, path: str, timeout: float = 10.0, max_body: int = 64 * 1024 * 1024) -> tuple[int, bytes]:
    """GET ``path`` from an endpoint at ``address`` (TCP or ``unix:``): (status, body)."""
    where = parse_listen(address)
    async with asyncio.timeout(timeout):
        if where.path is not None:
            reader, writer = await asyncio.open_unix_connection(str(where.path))
        else:
            host = "127.0.0.1" if where.host in ("0.0.0.0", "") else ("::1" if where.host == "::" else where.host)
            reader, writer = await asyncio.open_connection(host, where.port)
        try:
            conn = h11.Connection(h11.CLIENT)
            request = h11.Request(method="GET", target=path, headers=[("Host", "topodra"), ("Connection", "close")])
            writer.write(b"".join(conn.send(e) or b"" for e in (request, h11.EndOfMessage())))
            await writer.drain()
            status, body = 0, bytearray()
            while True:
                try:
                    event = conn.next_event()
                except h11.RemoteProtocolError as exc:
                    # The server closed early (killed mid-answer) or spoke nonsense: a failed
                    # connection to the caller, like a refused one.
                    raise ConnectionError(f"answer from {address}{path} cut short: {exc}") from None
                if event is h11.NEED_DATA:
                    conn.receive_data(await reader.read(65536))
                elif isinstance(event, h11.Response):
                    status = event.status_code
                elif isinstance(event, h11.Data):
                    body += event.data
                    if len(body) > max_body:
                        raise ValueError(f"answer from {address}{path} is larger than {max_body} bytes")
                elif isinstance(event, h11.EndOfMessage | h11.ConnectionClosed):
                    return status, bytes(body)
        finally:
            writer.close()
