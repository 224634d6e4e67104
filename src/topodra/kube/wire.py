"""A lean HTTP/1.1 path for the agent's pre-encoded writes (ResourceSlices), beside httpx.

A slice PUT through httpx/httpcore/anyio spends its event-loop CPU in thousands of
small calls (layers, context managers, header validation), and a CreateContainer
arriving meanwhile waits for it (``python -m benchmarks agent`` compares the two
paths). This path sends the same request bytes (headers taken from the httpx
client's own request building and auth flow, framed by h11 as httpcore frames
them) on one persistent connection of its own
(an asyncio protocol, TLS from the client's SSL context), and parses the answer
with h11. Anything unusual goes back to the httpx path: a proxy or custom
transport, HTTP/2, a Unix socket, an auth needing the body, a 401 (token
rotation is the auth flow's job), a concurrent write.
"""

from __future__ import annotations

import asyncio
import ssl
from collections.abc import AsyncIterator
from typing import Any, Final

import h11
import httpx2

__all__ = ["Lean", "Watch", "lean_for"]

_JSON_BODY: Final = {"Content-Type": "application/json"}
_NO_BODY: Final = [(b"Host", b"-"), (b"Content-Length", b"0")]
_PIECE: Final = 16 << 10  # bytes of a request body written per loop step
_END: Final = h11.EndOfMessage()


class _Closed(Exception):
    """The connection ended before a complete answer."""


class _Protocol(asyncio.Protocol):
    """One connection's bytes into h11; the reader waits on ``_wake``."""

    def __init__(self) -> None:
        self.h11 = h11.Connection(h11.CLIENT)
        self.transport: asyncio.Transport | None = None
        self.closed = False
        self._wake: asyncio.Future[None] | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport

    def data_received(self, data: bytes) -> None:
        self.h11.receive_data(data)
        self._notify()

    def eof_received(self) -> bool:
        self.closed = True
        self._notify()
        return False

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        self._notify()

    def _notify(self) -> None:
        if self._wake is not None and not self._wake.done():
            self._wake.set_result(None)

    async def event(self) -> Any:
        while True:
            event = self.h11.next_event()
            if event is not h11.NEED_DATA:
                return event
            if self.closed:
                raise _Closed("the API server closed the connection")
            self._wake = asyncio.get_running_loop().create_future()
            await self._wake
            self._wake = None

    def close(self) -> None:
        if self.transport is not None:
            self.transport.close()


class Lean:
    """Pre-encoded writes on a persistent connection of their own (see the module docstring)."""

    def __init__(self, client: httpx2.AsyncClient, host: str, port: int, tls: ssl.SSLContext | None) -> None:
        self._client = client
        self._host, self._port, self._tls = host, port, tls
        self._conn: _Protocol | None = None
        self._lock = asyncio.Lock()
        self._heads: dict[tuple[str, str], bytes] = {}  # request heads, built once per object's URL
        self._requests: dict[tuple[str, bytes], h11.Request] = {}  # h11's (immutable) events for them
        self.requests = 0  # sent on this path (tests)
        self.connects = 0
        self.watches = 0  # watch answers read on this path (tests)
        self._last_got_bytes = False  # the last exchange had an answer's head: no retry after that

    @property
    def busy(self) -> bool:
        return self._lock.locked()

    async def close(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None

    async def send(self, method: str, url: httpx2.URL, body: bytes) -> tuple[int, list[tuple[bytes, bytes]], bytes] | None:
        """(status, headers, body) of the answer, or None: the caller sends this one through
        httpx (a 401: the auth flow re-reads its token). A lost connection is retried once for a
        PUT on a reused connection that answered nothing (the server closed it idle);
        otherwise it raises ``httpx2.TransportError`` as httpx would."""
        async with self._lock:
            head = await self._head(method, url)
            if head is None:
                return None
            self.requests += 1
            for attempt in (0, 1):
                reused = self._conn is not None and not self._conn.closed
                try:
                    status, answer_headers, data = await self._exchange(method, url, head % len(body), body)
                except (_Closed, OSError) as exc:
                    await self.close()
                    if attempt == 0 and reused and method == "PUT" and not self._last_got_bytes:
                        continue
                    raise httpx2.RemoteProtocolError(str(exc) or type(exc).__name__) from exc
                except BaseException:
                    await self.close()  # mid-answer (a timeout, a cancel): the connection is unusable
                    raise
                if status == 401:
                    self._heads.clear()  # the httpx path's auth flow renews the token: ask it again next time
                    return None
                return status, answer_headers, data
            raise AssertionError("unreachable")

    async def _head(self, method: str, url: httpx2.URL) -> bytes | None:
        """The request head as httpx would send it, with ``%d`` for the body's length: built
        once per object (httpx's request building and the client's auth flow: lightkube's
        auths change their header only after a 401, when this cache is emptied), in h11's
        framing (Host first)."""
        key = (method, str(url))
        head = self._heads.get(key)
        if head is not None:
            return head
        request = self._client.build_request(method, url, content=b" ", headers=_JSON_BODY)  # a body orders them
        authed = await self._authed(request)
        if authed is None:
            return None
        lines = [(b"%s %s HTTP/1.1\r\n" % (method.encode(), url.raw_path)).replace(b"%", b"%%")]  # a %-escaped query
        items = [(k, k.lower(), v) for k, v in authed.headers.raw]
        for raw, name, value in sorted(items, key=lambda item: item[1] != b"host"):  # stable: Host first
            value = b"%d" if name == b"content-length" else value.replace(b"%", b"%%")
            lines.append(raw + b": " + value + b"\r\n")
        head = b"".join(lines) + b"\r\n"
        if len(self._heads) >= 256:
            self._heads.clear()
        self._heads[key] = head
        return head

    async def _authed(self, request: httpx2.Request) -> httpx2.Request | None:
        """``request`` as the client's auth flow sends it first, or None for an auth that needs
        the body or the answer (the httpx path's job)."""
        auth = self._client._build_request_auth(request)
        if auth.requires_request_body or auth.requires_response_body:
            return None
        flow = auth.async_auth_flow(request)
        try:
            return await flow.__anext__()
        finally:
            await flow.aclose()

    async def _exchange(
        self, method: str, url: httpx2.URL, head: bytes, body: bytes
    ) -> tuple[int, list[tuple[bytes, bytes]], bytes]:
        timeout = self._client.timeout
        conn = self._conn
        if conn is None or conn.closed or conn.transport is None or conn.transport.is_closing():
            await self.close()
            conn = await self._connect(timeout.connect)
        self._last_got_bytes = False
        target = url.raw_path
        h = conn.h11
        transport = conn.transport
        assert transport is not None
        # h11 keeps the connection's state (it frames the answer): told of a request with the
        # same method and no body, the head and body going out as formatted above.
        request = self._requests.get((method, target))
        if request is None:  # built once per object: h11 checks every header of a new one
            if len(self._requests) >= 256:
                self._requests.clear()
            request = self._requests[(method, target)] = h11.Request(method=method, target=target, headers=_NO_BODY)
        h.send(request)
        h.send(_END)
        # The body in pieces, the loop free between them: on loopback (and in the TLS layer) the
        # kernel's and the cipher's work on a send is done in the sender's step.
        # The head goes with the first piece: one send, not two.
        transport.write(head + body[:_PIECE])
        view = memoryview(body)
        for at in range(_PIECE, len(view), _PIECE):
            await asyncio.sleep(0)
            if conn.closed:
                raise _Closed("the API server closed the connection")
            transport.write(view[at : at + _PIECE])
        async with asyncio.timeout(timeout.read):
            response = await conn.event()
            while isinstance(response, h11.InformationalResponse):
                response = await conn.event()
            self._last_got_bytes = True
            if not isinstance(response, h11.Response):
                raise _Closed(f"unexpected {type(response).__name__} from the API server")
            parts: list[bytes] = []
            while True:
                event = await conn.event()
                if isinstance(event, h11.Data):
                    parts.append(bytes(event.data))
                elif isinstance(event, h11.EndOfMessage):
                    break
                else:
                    raise _Closed(f"unexpected {type(event).__name__} from the API server")
        if h.our_state is h11.DONE and h.their_state is h11.DONE:
            h.start_next_cycle()
        else:  # Connection: close, or an answer before the whole request was read
            await self.close()
        return response.status_code, list(response.headers.raw_items()), b"".join(parts)

    async def _connect(self, timeout: float | None, *, keep: bool = True) -> _Protocol:
        loop = asyncio.get_running_loop()
        async with asyncio.timeout(timeout):
            _, proto = await loop.create_connection(
                _Protocol,
                self._host,
                self._port,
                ssl=self._tls,
                server_hostname=self._host if self._tls is not None else None,
            )
        if keep:
            self._conn = proto
        self.connects += 1
        return proto

    async def watch(self, request: httpx2.Request) -> Watch | None:
        """A watch GET (built by httpx, with its timeouts) on a connection of its own, or None:
        the caller sends it through httpx, which also judges every answer but a plain 200 (an
        error status, an encoded body, a 401)."""
        authed = await self._authed(request)
        if authed is None:
            return None
        lines = [b"GET %s HTTP/1.1\r\n" % authed.url.raw_path]
        items = sorted(authed.headers.raw, key=lambda item: item[0].lower() != b"host")  # Host first
        lines += [k + b": " + v + b"\r\n" for k, v in items]
        timeouts = request.extensions.get("timeout") or {}
        conn = await self._connect(timeouts.get("connect"), keep=False)
        try:
            assert conn.transport is not None
            conn.h11.send(h11.Request(method="GET", target=authed.url.raw_path, headers=[(b"Host", b"-")]))
            conn.h11.send(h11.EndOfMessage())
            conn.transport.write(b"".join(lines) + b"\r\n")
            async with asyncio.timeout(timeouts.get("read")):
                response = await conn.event()
                while isinstance(response, h11.InformationalResponse):
                    response = await conn.event()
        except BaseException:
            conn.close()
            raise
        if (
            not isinstance(response, h11.Response)
            or response.status_code != 200
            or any(k.lower() == b"content-encoding" for k, _ in response.headers.raw_items())
        ):
            conn.close()
            return None
        self.watches += 1
        return Watch(conn, timeouts.get("read"))


class Watch:
    """One watch answer's event lines, split from the body's bytes as they come: no text
    decoding or line scanning of the whole stream in layers above (httpx's line iterator
    costs several times as much per slice event)."""

    def __init__(self, conn: _Protocol, read_timeout: float | None) -> None:
        self._conn = conn
        self._timeout = read_timeout

    def close(self) -> None:
        self._conn.close()

    async def lines(self) -> AsyncIterator[str]:
        """The non-empty lines until the server ends the answer (an unfinished one raises
        ``httpx2.RemoteProtocolError``, as httpx would)."""
        rest = b""
        while True:
            try:
                async with asyncio.timeout(self._timeout):
                    event = await self._conn.event()
            except _Closed as exc:
                raise httpx2.RemoteProtocolError(str(exc)) from exc
            if isinstance(event, h11.EndOfMessage):
                if rest.strip():
                    yield rest.decode()
                return
            if not isinstance(event, h11.Data):
                raise httpx2.RemoteProtocolError(f"unexpected {type(event).__name__} from the API server")
            chunk = rest + bytes(event.data) if rest else bytes(event.data)
            *complete, rest = chunk.split(b"\n")
            for line in complete:
                if line.strip():
                    yield line.decode()


def lean_for(client: Any) -> Lean | None:
    """A lean writer for this httpx client, or None when its setup is one this path does not
    reproduce (proxies, mounts, a custom transport, HTTP/2, a Unix socket)."""
    if not isinstance(client, httpx2.AsyncClient):
        return None
    transport = client._transport
    if type(transport) is not httpx2.AsyncHTTPTransport:
        return None
    if any(t is not None for t in client._mounts.values()):
        return None
    pool = getattr(transport, "_pool", None)
    if pool is None or type(pool).__name__ != "AsyncConnectionPool":
        return None
    if getattr(pool, "_http2", False) or getattr(pool, "_uds", None) or getattr(pool, "_local_address", None):
        return None
    if getattr(pool, "_socket_options", None):
        return None
    base = client.base_url
    if base.scheme not in ("http", "https") or not base.host:
        return None
    tls = pool._ssl_context if base.scheme == "https" else None
    if base.scheme == "https" and not isinstance(tls, ssl.SSLContext):
        return None
    port = base.port or (443 if base.scheme == "https" else 80)
    return Lean(client, base.host, port, tls)
