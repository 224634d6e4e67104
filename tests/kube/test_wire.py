"""The lean write path (kube/wire.py): the same bytes on the wire as httpx sends, the same errors,
TLS and token auth as the kube config gives them, dropped connections."""

from __future__ import annotations

import asyncio
import base64
import gzip
import json
import ssl
import subprocess
from collections.abc import Callable, Coroutine
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from lightkube import AsyncClient, KubeConfig

from topodra.agent.claims import kube_client
from topodra.agent.config import parse_config
from topodra.dra.devices import build_devices
from topodra.dra.slices import build_slices, chunk_devices, encode_slice
from topodra.embedded.apiserver import ApiServer
from topodra.kube.client import RESOURCE_SLICES, KubeClient
from topodra.kube.errors import ApiError
from topodra.kube.wire import Lean
from topodra.topology import synthetic_topology

DEVICES = build_devices(synthetic_topology("1s1n1l4c2t"))
CHUNKS = chunk_devices(DEVICES)
SLICE = build_slices("node-a", DEVICES, generation=1, chunks=CHUNKS)[0]
NAME = SLICE["metadata"]["name"]


def encoded(rv: str | None = None) -> bytes:
    obj = SLICE if rv is None else {**SLICE, "metadata": {**SLICE["metadata"], "resourceVersion": rv}}
    return encode_slice(obj, CHUNKS[0])


def lean_of(client: KubeClient) -> Lean:
    lean = client._lean
    assert isinstance(lean, Lean), "this client should take the lean path"
    return lean


def httpx_only(client: KubeClient) -> KubeClient:
    client._lean = None
    return client


# --- a raw HTTP/1.1 peer: records each request's bytes, answers as told ---------------------------
Answer = Callable[[int, bytes], bytes | None]  # (request number on the connection, head) -> reply (None: hang up)


def reply(status: int, body: bytes, *, extra: bytes = b"", reason: bytes = b"OK") -> bytes:
    head = b"HTTP/1.1 %d %s\r\ncontent-type: application/json\r\ncontent-length: %d\r\n" % (status, reason, len(body))
    return head + extra + b"\r\n" + body


def ok(_: int, __: bytes) -> bytes:
    return reply(200, b'{"metadata":{"resourceVersion":"7"}}')


@dataclass
class Peer:
    answer: Answer = ok
    tls: ssl.SSLContext | None = None
    requests: list[bytes] = field(default_factory=list)
    connections: int = 0
    hang_up: bool = False  # close the connection after each answer
    url: str = ""
    _server: asyncio.Server | None = None

    async def __aenter__(self) -> Peer:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0, ssl=self.tls)
        port = self._server.sockets[0].getsockname()[1]
        self.url = f"{'https' if self.tls else 'http'}://127.0.0.1:{port}"
        return self

    async def __aexit__(self, *exc: object) -> None:
        assert self._server is not None
        self._server.close()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        n = 0
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                length = 0
                for line in head.split(b"\r\n"):
                    if line.lower().startswith(b"content-length:"):
                        length = int(line.split(b":", 1)[1])
                raw = head + await reader.readexactly(length)
                self.requests.append(raw)
                out = self.answer(n, head)
                n += 1
                if out is None:
                    break
                writer.write(out)
                await writer.drain()
                if self.hang_up:
                    break
        except (asyncio.IncompleteReadError, ConnectionError, asyncio.CancelledError):
            pass  # the client hung up, or the test is over
        finally:
            writer.close()


def run(body: Callable[[], Coroutine[Any, Any, Any]]) -> Any:
    return asyncio.run(body())


# --- the bytes ----------------------------------------------------------------------------------
def test_request_bytes_equal_httpx_s() -> None:
    async def main() -> None:
        async with Peer() as peer:
            for lean in (False, True):
                client = KubeClient.for_url(peer.url)
                if not lean:
                    httpx_only(client)
                async with client:
                    assert await client.replace_encoded(RESOURCE_SLICES, NAME, encoded("3")) == '{"metadata":{"resourceVersion":"7"}}'
                    await client.create_encoded(RESOURCE_SLICES, encoded())
                    if lean:
                        assert lean_of(client).requests == 2
        put_httpx, post_httpx, put_lean, post_lean = peer.requests
        assert put_lean == put_httpx
        assert post_lean == post_httpx
        assert put_lean.startswith(b"PUT /apis/resource.k8s.io/v1/resourceslices/" + NAME.encode())
        assert b"\r\nAuthorization: Bearer topodra\r\n" in put_lean
        assert put_lean.endswith(b"\r\n\r\n" + encoded("3"))

    run(main)


def test_a_percent_escaped_query_is_sent_as_httpx_sends_it() -> None:
    config = KubeConfig.from_dict(
        {
            "clusters": [{"name": "c", "cluster": {"server": "http://127.0.0.1:1"}}],
            "contexts": [{"name": "c", "context": {"cluster": "c", "user": "u"}}],
            "users": [{"name": "u", "user": {"token": "t%d"}}],
            "current-context": "c",
        }
    )

    async def main() -> None:
        async with Peer() as peer:
            config.clusters["c"].server = peer.url
            for lean in (False, True):
                client = KubeClient(AsyncClient(config, field_manager="topo dra/100%", trust_env=False))
                if not lean:
                    httpx_only(client)
                async with client:
                    await client.replace_encoded(RESOURCE_SLICES, NAME, encoded("3"))
        assert peer.requests[0] == peer.requests[1]
        assert b"?fieldManager=topo+dra%2F100%25 HTTP/1.1\r\n" in peer.requests[1]
        assert b"Bearer t%d\r\n" in peer.requests[1]

    run(main)


def test_the_api_double_stores_what_either_path_sends() -> None:
    async def main() -> None:
        async with ApiServer() as server, KubeClient.for_url(server.url) as client:
            answer = json.loads(await client.create_encoded(RESOURCE_SLICES, encoded()))
            rv = answer["metadata"]["resourceVersion"]
            changed = json.loads(await client.replace_encoded(RESOURCE_SLICES, NAME, encoded(rv)))
            assert lean_of(client).requests == 2
            assert lean_of(client).connects == 1
            stored = await client.get(RESOURCE_SLICES, NAME)
            assert stored["spec"] == json.loads(encoded())["spec"] == changed["spec"]

    run(main)


# --- errors ---------------------------------------------------------------------------------------
def _error(exc: ApiError) -> tuple[int, str, str, str, str]:
    return exc.code, exc.reason, exc.message, exc.kind, exc.name


def test_errors_are_those_of_the_httpx_path() -> None:
    async def main() -> None:
        async with ApiServer() as server:
            seen: list[list[tuple[int, str, str, str, str]]] = []
            for lean in (False, True):
                async with KubeClient.for_url(server.url) as client:
                    if not lean:
                        httpx_only(client)
                    errors = []
                    with pytest.raises(ApiError) as missing:
                        await client.replace_encoded(RESOURCE_SLICES, NAME, encoded("1"))
                    errors.append(_error(missing.value))
                    created = json.loads(await client.create_encoded(RESOURCE_SLICES, encoded()))
                    with pytest.raises(ApiError) as exists:
                        await client.create_encoded(RESOURCE_SLICES, encoded())
                    errors.append(_error(exists.value))
                    with pytest.raises(ApiError) as stale:
                        await client.replace_encoded(RESOURCE_SLICES, NAME, encoded(str(int(created["metadata"]["resourceVersion"]) - 1)))
                    assert stale.value.is_conflict
                    errors.append(_error(stale.value))
                    with pytest.raises(ApiError) as invalid:
                        await client.replace_encoded(RESOURCE_SLICES, NAME, b'{"kind": "ResourceSlice", "spec": 3}')
                    errors.append(_error(invalid.value))
                    server.inject("PUT", "resourceslices", 500)
                    with pytest.raises(ApiError) as failed:
                        await client.replace_encoded(RESOURCE_SLICES, NAME, encoded(created["metadata"]["resourceVersion"]))
                    errors.append(_error(failed.value))
                    if lean:
                        assert lean_of(client).requests == 6
                    await client.delete(RESOURCE_SLICES, NAME)
                seen.append(errors)
            assert seen[0] == seen[1]
            codes = [e[0] for e in seen[1]]
            assert codes[:3] == [404, 409, 409]
            assert codes[3] in (400, 422)
            assert codes[4] == 500

    run(main)


def test_a_non_json_error_is_reported_as_httpx_s() -> None:
    def plain(_: int, __: bytes) -> bytes:
        body = b"upstream broke"
        return b"HTTP/1.1 502 Bad Gateway\r\ncontent-type: text/plain\r\ncontent-length: %d\r\n\r\n%s" % (len(body), body)

    async def main() -> None:
        async with Peer(plain) as peer:
            got = []
            for client in (httpx_only(KubeClient.for_url(peer.url)), KubeClient.for_url(peer.url)):
                async with client:
                    with pytest.raises(ApiError) as exc:
                        await client.replace_encoded(RESOURCE_SLICES, NAME, encoded("1"))
                    got.append(_error(exc.value))
            assert got[0] == got[1]
            assert got[1][:3] == (502, "Unknown", "upstream broke")

    run(main)


def test_a_gzip_answer_is_decoded() -> None:
    text = b'{"metadata":{"resourceVersion":"9"}}'

    def zipped(_: int, __: bytes) -> bytes:
        return reply(200, gzip.compress(text), extra=b"content-encoding: gzip\r\n")

    async def main() -> None:
        async with Peer(zipped) as peer, KubeClient.for_url(peer.url) as client:
            assert await client.replace_encoded(RESOURCE_SLICES, NAME, encoded("1")) == text.decode()
            assert lean_of(client).requests == 1

    run(main)


# --- connections --------------------------------------------------------------------------------
def test_one_connection_is_kept_across_writes() -> None:
    async def main() -> None:
        async with Peer() as peer, KubeClient.for_url(peer.url) as client:
            for i in range(5):
                await client.replace_encoded(RESOURCE_SLICES, NAME, encoded(str(i)))
            assert peer.connections == 1
            assert lean_of(client).connects == 1

    run(main)


def test_a_connection_closed_while_idle_is_replaced() -> None:
    def once(n: int, _: bytes) -> bytes:
        return reply(200, b"{}", extra=b"connection: close\r\n") if n == 0 else reply(500, b"{}")

    async def main() -> None:
        async with Peer(once) as peer, KubeClient.for_url(peer.url) as client:
            for i in range(3):
                assert await client.replace_encoded(RESOURCE_SLICES, NAME, encoded(str(i))) == "{}"
            assert peer.connections == 3
            assert lean_of(client).connects == 3

    run(main)


def _hang_up_on_second(n: int, _: bytes) -> bytes | None:
    return None if n == 1 else reply(200, b"{}")


def test_a_put_dropped_unanswered_on_a_reused_connection_is_sent_again() -> None:
    async def main() -> None:
        async with Peer(_hang_up_on_second) as peer, KubeClient.for_url(peer.url) as client:
            await client.replace_encoded(RESOURCE_SLICES, NAME, encoded("1"))
            assert await client.replace_encoded(RESOURCE_SLICES, NAME, encoded("2")) == "{}"
            assert len(peer.requests) == 3
            assert peer.requests[1] == peer.requests[2]
            assert lean_of(client).connects == 2

    run(main)


def test_a_post_dropped_unanswered_is_not_sent_again() -> None:
    async def main() -> None:
        async with Peer(_hang_up_on_second) as peer, KubeClient.for_url(peer.url) as client:
            await client.create_encoded(RESOURCE_SLICES, encoded())
            with pytest.raises(ApiError) as exc:
                await client.create_encoded(RESOURCE_SLICES, encoded())
            assert exc.value.code == 503
            assert exc.value.reason == "ServiceUnavailable"
            assert len(peer.requests) == 2
            # and the next write opens a new connection
            assert await client.create_encoded(RESOURCE_SLICES, encoded()) == "{}"

    run(main)


def test_a_put_dropped_twice_is_an_error() -> None:
    async def main() -> None:
        peer = Peer()
        peer.answer = lambda _, __: reply(200, b"{}") if len(peer.requests) == 1 else None
        async with peer, KubeClient.for_url(peer.url) as client:
            await client.replace_encoded(RESOURCE_SLICES, NAME, encoded("1"))
            with pytest.raises(ApiError) as exc:
                await client.replace_encoded(RESOURCE_SLICES, NAME, encoded("2"))
            assert exc.value.code == 503
            assert len(peer.requests) == 3
            assert peer.connections == 2

    run(main)


def test_an_unreachable_server_is_503() -> None:
    async def main() -> None:
        async with Peer() as peer:
            url = peer.url
        async with KubeClient.for_url(url, timeout=2.0) as client:
            with pytest.raises(ApiError) as exc:
                await client.replace_encoded(RESOURCE_SLICES, NAME, encoded("1"))
            assert exc.value.code == 503
            assert "cannot reach the API server" in exc.value.message

    run(main)


def test_concurrent_writes_all_arrive() -> None:
    async def main() -> None:
        async with Peer() as peer, KubeClient.for_url(peer.url) as client:
            answers = await asyncio.gather(*(client.replace_encoded(RESOURCE_SLICES, NAME, encoded(str(i))) for i in range(6)))
            assert len(answers) == 6
            assert len(peer.requests) == 6
            assert sorted(r.split(b"\r\n\r\n", 1)[1] for r in peer.requests) == sorted(encoded(str(i)) for i in range(6))

    run(main)


# --- auth and TLS as the kube config gives them -----------------------------------------------------
def _client(url: str, user: dict[str, Any], cluster: dict[str, Any] | None = None) -> KubeClient:
    config = KubeConfig.from_dict(
        {
            "clusters": [{"name": "c", "cluster": {"server": url, **(cluster or {})}}],
            "contexts": [{"name": "c", "context": {"cluster": "c", "user": "u"}}],
            "users": [{"name": "u", "user": user}],
            "current-context": "c",
        }
    )
    return KubeClient(AsyncClient(config, trust_env=False))


def test_a_rotated_token_file_is_read_again_on_401(tmp_path: Path) -> None:
    token = tmp_path / "token"
    token.write_text("one\n")

    def check(_: int, head: bytes) -> bytes:
        want = b"Authorization: Bearer " + token.read_text().strip().encode() + b"\r\n"
        return reply(200, b"{}") if want in head else reply(401, b'{"kind":"Status","code":401,"reason":"Unauthorized","message":"Unauthorized"}', reason=b"Unauthorized")

    async def main() -> None:
        async with Peer(check) as peer, _client(peer.url, {"tokenFile": str(token)}) as client:
            assert await client.replace_encoded(RESOURCE_SLICES, NAME, encoded("1")) == "{}"
            token.write_text("two\n")
            assert await client.replace_encoded(RESOURCE_SLICES, NAME, encoded("2")) == "{}"
            # lean (old token, 401), then httpx: old token (401), re-read, new token
            assert len(peer.requests) == 4
            assert b"Bearer two" in peer.requests[-1]
            assert await client.replace_encoded(RESOURCE_SLICES, NAME, encoded("3")) == "{}"
            assert len(peer.requests) == 5
            assert b"Bearer two" in peer.requests[-1]
            assert lean_of(client).requests == 3

    run(main)


@pytest.fixture(scope="module")
def certificate(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    where = tmp_path_factory.mktemp("tls")
    cert, key = where / "cert.pem", where / "key.pem"
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-subj", "/CN=127.0.0.1",
         "-addext", "subjectAltName=IP:127.0.0.1", "-keyout", str(key), "-out", str(cert)],
        check=True, capture_output=True,
    )
    return cert, key


def test_tls_with_the_config_s_certificate_authority(certificate: tuple[Path, Path]) -> None:
    cert, key = certificate
    tls = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    tls.load_cert_chain(cert, key)
    ca = base64.b64encode(cert.read_bytes()).decode()

    async def main() -> None:
        async with Peer(tls=tls) as peer:
            for lean in (False, True):
                async with _client(peer.url, {"token": "secret"}, {"certificate-authority-data": ca}) as client:
                    if not lean:
                        httpx_only(client)
                    for i in range(2):
                        assert await client.replace_encoded(RESOURCE_SLICES, NAME, encoded(str(i))) == '{"metadata":{"resourceVersion":"7"}}'
                    if lean:
                        assert lean_of(client).requests == 2
                        assert lean_of(client).connects == 1
            assert peer.requests[:2] == peer.requests[2:]
            assert b"\r\nAuthorization: Bearer secret\r\n" in peer.requests[3]

    run(main)


def test_tls_refuses_a_server_the_config_does_not_trust(certificate: tuple[Path, Path]) -> None:
    cert, key = certificate
    tls = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    tls.load_cert_chain(cert, key)

    async def main() -> None:
        async with Peer(tls=tls) as peer, _client(peer.url, {"token": "secret"}) as client:
            assert isinstance(client._lean, bool)
            assert client._lean is False
            with pytest.raises(ApiError) as exc:
                await client.replace_encoded(RESOURCE_SLICES, NAME, encoded("1"))
            assert exc.value.code == 503
            assert lean_of(client).requests == 1
            assert peer.requests == []

    run(main)


def test_the_agent_s_kube_server_takes_its_ca_file_and_re_reads_its_token_file(certificate: tuple[Path, Path], tmp_path: Path) -> None:
    """``kube: {server, tokenFile, caFile}`` reaches a real cluster's API server without a
    kubeconfig: its certificate checked against caFile, the token file read again after a 401."""
    cert, key = certificate
    tls = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    tls.load_cert_chain(cert, key)
    token = tmp_path / "token"
    token.write_text("one\n")

    def check(_: int, head: bytes) -> bytes:
        want = b"Authorization: Bearer " + token.read_text().strip().encode() + b"\r\n"
        return reply(200, b"{}") if want in head else reply(401, b'{"kind":"Status","code":401,"reason":"Unauthorized","message":"Unauthorized"}', reason=b"Unauthorized")

    async def main() -> None:
        async with Peer(check, tls=tls) as peer:
            config = parse_config({"kube": {"server": peer.url, "tokenFile": str(token), "caFile": str(cert)}}, "test")
            async with kube_client(config) as client:
                assert await client.replace_encoded(RESOURCE_SLICES, NAME, encoded("1")) == "{}"
                token.write_text("two\n")
                assert await client.replace_encoded(RESOURCE_SLICES, NAME, encoded("2")) == "{}"
                assert b"Bearer two" in peer.requests[-1]

    run(main)


# --- the watch: lines split from the answer's bytes ---------------------------------------------------
EVENTS = [json.dumps({"type": "MODIFIED", "object": {**SLICE, "metadata": {**SLICE["metadata"], "resourceVersion": str(v)}}})
          for v in (5, 6)]


def chunked(body: bytes, cuts: list[int]) -> bytes:
    """``body`` as a chunked 200 answer cut at ``cuts`` (mid-line, mid-event)."""
    out = [b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ntransfer-encoding: chunked\r\n\r\n"]
    for a, b in zip([0, *cuts], [*cuts, len(body)], strict=True):
        if b > a:
            out.append(b"%x\r\n%s\r\n" % (b - a, body[a:b]))
    return b"".join(out) + b"0\r\n\r\n"


async def _watch_all(client: KubeClient, rv: str = "3") -> list[str]:
    return [line async for line in client.watch_lines(RESOURCE_SLICES, fields={"spec.nodeName": "node-a"}, resource_version=rv)]


def test_watch_lines_and_request_equal_httpx_s() -> None:
    body = (EVENTS[0] + "\n\n" + EVENTS[1] + "\n").encode()
    cuts = [7, len(EVENTS[0]), len(EVENTS[0]) + 1, len(EVENTS[0]) + 100, len(body) - 1]

    async def main() -> None:
        async with Peer(answer=lambda n, head: chunked(body, cuts)) as peer:
            seen = []
            for lean in (False, True):
                async with KubeClient.for_url(peer.url) as client:
                    if not lean:
                        httpx_only(client)
                    seen.append(await _watch_all(client))
                    if lean:
                        assert lean_of(client).watches == 1
            assert seen[0] == seen[1] == EVENTS
            watch_httpx, watch_lean = peer.requests
            assert watch_lean == watch_httpx
            assert watch_lean.startswith(b"GET /apis/resource.k8s.io/v1/resourceslices?")

    run(main)


async def _collect(client: KubeClient, into: list[str]) -> None:
    async for line in client.watch_lines(RESOURCE_SLICES, resource_version="3"):
        into.append(line)


async def _watch_outcome(answer: bytes, lean: bool) -> tuple[list[str], tuple[int, str, str, str, str], int]:
    """(lines read, the error raised, watches on the lean path) for one answer on one path."""
    async with Peer(answer=lambda n, head: answer, hang_up=True) as peer, KubeClient.for_url(peer.url) as client:
        if not lean:
            httpx_only(client)
        lines: list[str] = []
        with pytest.raises(ApiError) as info:
            await _collect(client, lines)
        return lines, _error(info.value), lean_of(client).watches if lean else 0


def test_watch_errors_are_those_of_the_httpx_path() -> None:
    cut = (EVENTS[0] + "\n" + EVENTS[1][:50]).encode()
    unfinished = chunked(cut, [])[: -len(b"0\r\n\r\n")]  # the server hangs up mid-event
    gone = reply(410, b'{"kind":"Status","code":410,"reason":"Expired","message":"too old"}', reason=b"Gone")

    async def main() -> None:
        for answer in (unfinished, gone):
            plain = await _watch_outcome(answer, lean=False)
            lean = await _watch_outcome(answer, lean=True)
            assert lean[0] == plain[0]
            # the same ApiError; a connection cut mid-body says so in its own words
            assert (lean[1][0], *lean[1][1:2], *lean[1][3:]) == (plain[1][0], *plain[1][1:2], *plain[1][3:])
            assert lean[1] == plain[1] or "closed" in lean[1][2]
            assert lean[2] == (1 if answer is unfinished else 0), "an error status is judged by the httpx path"
        assert plain[1][0] == 410
        assert (await _watch_outcome(unfinished, lean=True))[0] == [EVENTS[0]]

    run(main)


def test_the_reconciler_s_watch_reads_on_the_lean_path() -> None:
    """Against the API server double: the slices' watch (the agent's read-back of its own writes)
    runs on the lean path and sees every event httpx sees."""

    async def main() -> None:
        async with ApiServer() as server, KubeClient.for_url(server.url) as writer:
            await writer.create_encoded(RESOURCE_SLICES, encoded())
            created = json.loads(await writer.replace_encoded(RESOURCE_SLICES, NAME, encoded("1")))
            seen = []
            for lean in (False, True):
                async with KubeClient.for_url(server.url) as client:
                    if not lean:
                        httpx_only(client)
                    lines = [line async for line in client.watch_lines(RESOURCE_SLICES, resource_version="0", server_timeout=1)]
                    seen.append([(e["type"], e["object"]["metadata"]["resourceVersion"]) for e in map(json.loads, lines)])
                    if lean:
                        assert lean_of(client).watches == 1
            assert seen[0] == seen[1]
            assert seen[1]
            assert seen[1][-1][1] == created["metadata"]["resourceVersion"]

    run(main)
