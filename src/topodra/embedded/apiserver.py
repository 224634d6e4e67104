"""An in-memory Kubernetes API server double that speaks real HTTP, so real clients run against it.

Serves the REST paths a DRA driver, the playground and the agent's tests
use (nodes, namespaces, pods, resourceslices, deviceclasses, resourceclaims
with ``/status``, resourceclaimtemplates): get, list (label and field
selectors, paging), watch (chunked JSON event stream, resourceVersion
replay, 410 Gone, ``timeoutSeconds``), create, update, merge patch and
delete (with preconditions), with the store's validation and conflicts.
HTTP/1.1 framing is h11's (sans-IO); asyncio is only the socket layer.
Plain HTTP on loopback, any bearer token accepted unless ``authorizer`` is set:
then RBAC rules (a ClusterRole's) decide every request, and a write that
changes a ResourceClaim's ``status.devices`` also needs the 1.36 per-driver
verbs on ``resourceclaims/driver`` (``associated-node:<verb>`` for the node the
claim is allocated to, ``arbitrary-node:<verb>`` for any), as the real server's
``DRAResourceClaimGranularStatusAuthorization`` check does. That extra check is
recorded in ``audit`` too, authorizer or not. Server-side apply of claim
``status.devices`` is served (``embedded/apply.py``).

    async with ApiServer() as server:
        client = KubeClient.for_url(server.url)

``ApiServerThread`` runs one in a background thread for synchronous users.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime
import json
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any, Final, TypeVar
from urllib.parse import parse_qs, unquote, urlsplit

import h11
import yaml

from topodra.embedded.store import KINDS, Kind, Store, kind_for
from topodra.embedded.tables import table, wants_table
from topodra.kube.errors import ApiError

__all__ = ["ApiServer", "ApiServerThread", "Authorizer", "Fault"]

T = TypeVar("T")
_JSON: Final = [("content-type", "application/json")]
_MAX_BODY: Final = 8 << 20  # 8 MiB, far above any object here; protects the double from runaway input


@dataclass(slots=True)
class Fault:
    """Answer the next ``times`` matching requests with ``code`` (fault injection for tests)."""

    method: str
    plural: str
    code: int = 500
    times: int = 1
    reason: str = "InternalError"


@dataclass(slots=True)
class Authorizer:
    """RBAC for the double: the rules of the ClusterRole bound to every caller, and the node each
    bearer token's service account is bound to (the token's ``authentication.kubernetes.io/node-name``)."""

    rules: list[dict[str, Any]]
    nodes: dict[str, str] = field(default_factory=dict)
    user: str = "system:serviceaccount:topodra:topodra"
    denied: list[tuple[str, str, str]] = field(default_factory=list)

    def allows(self, group: str, resource: str, verb: str, name: str | None = None) -> bool:
        for rule in self.rules:
            if not _matches(rule.get("apiGroups"), group) or not _matches(rule.get("resources"), resource):
                continue
            if not _matches(rule.get("verbs"), verb):
                continue
            names = rule.get("resourceNames")
            if names and (name is None or name not in names):
                continue
            return True
        return False

    def check(self, group: str, resource: str, verb: str, name: str | None, namespace: str | None) -> None:
        if self.allows(group, resource, verb, name):
            return
        self.denied.append((group, resource, verb))
        what = f'{resource.split("/")[0]}.{group}' if group else resource.split("/")[0]
        where = f' in the namespace "{namespace}"' if namespace else " at the cluster scope"
        raise ApiError(
            403,
            "Forbidden",
            f'{what} "{name or ""}" is forbidden: User "{self.user}" cannot {verb} resource "{resource}" '
            f'in API group "{group}"{where}',
        )


def _matches(values: Any, value: str) -> bool:
    return isinstance(values, list) and ("*" in values or value in values)


def _allocation_node(claim: dict[str, Any]) -> str | None:
    """The node a claim is allocated to (``metadata.name In [node]`` of its allocation's selector)."""
    selector = ((claim.get("status") or {}).get("allocation") or {}).get("nodeSelector") or {}
    for term in selector.get("nodeSelectorTerms") or []:
        for req in term.get("matchFields") or []:
            values = req.get("values") or []
            if req.get("key") == "metadata.name" and req.get("operator") == "In" and len(values) == 1:
                return str(values[0])
    return None


def _changed_drivers(old: dict[str, Any], new: dict[str, Any]) -> set[str]:
    """Drivers whose ``status.devices`` entries a write adds, changes or removes."""
    def by_key(obj: dict[str, Any]) -> dict[tuple[str, ...], Any]:
        items = (obj.get("status") or {}).get("devices") or []
        return {
            (str(e.get("driver")), str(e.get("pool")), str(e.get("device")), str(e.get("shareID") or "")): e
            for e in items
            if isinstance(e, dict)
        }

    a, b = by_key(old), by_key(new)
    return {k[0] for k in set(a) | set(b) if a.get(k) != b.get(k)}


@dataclass(frozen=True, slots=True)
class _Route:
    kind: Kind
    namespace: str | None
    name: str | None
    subresource: str


def _route(path: str) -> _Route | str:
    parts = [unquote(p) for p in path.strip("/").split("/") if p]
    if parts[:2] == ["api", "v1"]:
        group, version, rest = "", "v1", parts[2:]
    elif len(parts) >= 3 and parts[0] == "apis":
        group, version, rest = parts[1], parts[2], parts[3:]
    else:
        return "/".join(parts)
    if not rest:
        return "/".join(parts)  # discovery: /api/v1, /apis/<group>/<version>
    namespace: str | None = None
    if len(rest) >= 3 and rest[0] == "namespaces" and not (group == "" and rest[2] == "status" and len(rest) == 3):
        namespace, rest = rest[1], rest[2:]
    if not rest or len(rest) > 3:
        raise ApiError(404, "NotFound", f"the server could not find the requested resource: {path}")
    kind = kind_for(group, version, rest[0])
    name = rest[1] if len(rest) > 1 else None
    sub = rest[2] if len(rest) > 2 else ""
    return _Route(kind, namespace, name, sub)


def _audit_entry(method: str, route: _Route, query: dict[str, list[str]]) -> tuple[str, str, str]:
    if method == "GET":
        verb = "get" if route.name else ("watch" if _query_flag(query, "watch") else "list")
    else:
        verb = {"POST": "create", "PUT": "update", "PATCH": "patch", "DELETE": "delete"}.get(method, method.lower())
    resource = f"{route.kind.plural}/{route.subresource}" if route.subresource else route.kind.plural
    return (route.kind.group, resource, verb)


def _query_flag(query: dict[str, list[str]], key: str) -> bool:
    return query.get(key, [""])[-1].lower() in ("true", "1")


def _q(query: dict[str, list[str]], key: str) -> str | None:
    values = query.get(key)
    return values[-1] if values else None


_SHORT_NAMES: Final = {"pods": ["po"], "nodes": ["no"], "namespaces": ["ns"]}


def _discovery(path: str) -> dict[str, Any] | None:
    """Legacy discovery documents, so kubectl (``kubectl --server URL get resourceclaims -o yaml``)
    finds the resources the double serves."""
    groups = sorted({(k.group, k.version) for k in KINDS.values()})
    named = [(g, v) for g, v in groups if g]
    if path == "api":
        return {"kind": "APIVersions", "versions": ["v1"], "serverAddressByClientCIDRs": []}

    def group_doc(group: str, version: str) -> dict[str, Any]:
        gv = {"groupVersion": f"{group}/{version}", "version": version}
        return {"name": group, "versions": [gv], "preferredVersion": gv}

    if path == "apis":
        return {"kind": "APIGroupList", "apiVersion": "v1", "groups": [group_doc(g, v) for g, v in named]}
    for group, version in groups:
        prefix = f"apis/{group}" if group else "api"
        if group and path == prefix:
            return {"kind": "APIGroup", "apiVersion": "v1", **group_doc(group, version)}
        if path != f"{prefix}/{version}":
            continue
        resources: list[dict[str, Any]] = []
        for kind in (k for k in KINDS.values() if (k.group, k.version) == (group, version)):
            verbs = ["create", "delete", "get", "list", "patch", "update", "watch"]
            resources.append(
                {
                    "name": kind.plural,
                    "singularName": kind.kind.lower(),
                    "namespaced": kind.namespaced,
                    "kind": kind.kind,
                    "verbs": verbs,
                    "shortNames": _SHORT_NAMES.get(kind.plural, []),
                }
            )
            if kind.has_status:
                resources.append(
                    {"name": f"{kind.plural}/status", "singularName": "", "namespaced": kind.namespaced, "kind": kind.kind, "verbs": ["get", "patch", "update"]}
                )
        return {"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": f"{group}/{version}" if group else version, "resources": resources}
    return None


def _as_table(route: _Route, obj: dict[str, Any], include: str) -> dict[str, Any]:
    """A GET's answer as the Table ``kubectl get`` asks for (``embedded/tables.py``)."""
    now = datetime.datetime.now(datetime.UTC)
    if route.name is None:
        return table(route.kind, obj.get("items") or [], obj.get("metadata") or {}, include, now)
    meta = {"resourceVersion": (obj.get("metadata") or {}).get("resourceVersion", "")}
    return table(route.kind, [obj], meta, include, now)


def _watched_row(route: _Route, obj: dict[str, Any], include: str, headed: bool) -> dict[str, Any]:
    """A watch event's object as a one-row Table: the column definitions in the first event
    only, as the real watch encoder sends them (``watchEmbeddedEncoder``, NoHeaders after it)."""
    meta = {"resourceVersion": (obj.get("metadata") or {}).get("resourceVersion", "")}
    row = table(route.kind, [obj], meta, include, datetime.datetime.now(datetime.UTC))
    if headed:
        row["columnDefinitions"] = None
    return row


def _warning(text: str) -> str:
    """A ``Warning`` header value (RFC 7234 warn-code 299, agent "-"), as the real server writes it."""
    return "299 - " + json.dumps(text)


_VALIDATIONS: Final = ("Strict", "Warn", "Ignore")


def _decoded(kind: Kind, body: bytes, validation: str, ctype: str, warnings: list[str]) -> Any:
    """The request body as decoding into the typed object leaves it: unknown fields refused
    (``fieldValidation=Strict``), or dropped with a warning each (``Warn``, the default) or
    silently (``Ignore``). The decoded JSON object, or ``_RAW`` for a body the handler reads
    itself (not JSON, not an object, an apply configuration, a JSON patch)."""
    from topodra.embedded.openapi import drop_unknown_fields, strict_decoding_error

    if validation not in _VALIDATIONS:
        raise ApiError.bad_request(f"fieldValidation must be one of {', '.join(_VALIDATIONS)}, got {validation!r}")
    if ctype in ("application/apply-patch+yaml", "application/json-patch+json") or not body:
        return _RAW  # an apply configuration, or a list of operations
    try:
        obj = json.loads(body)
    except ValueError:
        return _RAW
    if not isinstance(obj, dict):
        return _RAW
    unknown = drop_unknown_fields(kind, obj, strategic=ctype == "application/strategic-merge-patch+json")
    if unknown and validation == "Strict":
        raise strict_decoding_error(kind, unknown)
    if validation == "Warn":
        warnings.extend(f"unknown field {json.dumps(f)}" for f in unknown)
    return obj


_RAW: Final = object()


def _default_manager(headers: dict[str, str]) -> str:
    """The real server names an update's manager after the client's user agent."""
    return headers.get("user-agent", "unknown").split("/")[0] or "unknown"


class ApiServer:
    """The HTTP front of a ``Store`` on 127.0.0.1."""

    def __init__(self, store: Store | None = None, *, host: str = "127.0.0.1", port: int = 0) -> None:
        self.store = store or Store()
        self._host, self._port = host, port
        self._server: asyncio.Server | None = None
        self._connections: set[asyncio.Task[None]] = set()
        self.faults: list[Fault] = []
        self.requests: list[tuple[str, str]] = []  # (method, path) of every request, for tests
        #: (API group, resource[/subresource], RBAC verb) of every routed request: what RBAC must allow
        self.audit: list[tuple[str, str, str]] = []
        #: None: every caller may do anything (the default)
        self.authorizer: Authorizer | None = None
        self.url = ""

    async def start(self) -> str:
        self._server = await asyncio.start_server(self._accept, self._host, self._port)
        host, port = self._server.sockets[0].getsockname()[:2]
        self.url = f"http://{host}:{port}"
        return self.url

    async def stop(self) -> None:
        self.store.close_watches()
        if self._server is not None:
            self._server.close()
        await asyncio.sleep(0)  # let watch streams finish their last chunk
        for task in list(self._connections):
            task.cancel()
        for task in list(self._connections):
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        if self._server is not None:
            with contextlib.suppress(Exception):
                await self._server.wait_closed()
            self._server = None

    async def __aenter__(self) -> ApiServer:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    def inject(self, method: str, plural: str, code: int = 500, times: int = 1, reason: str = "InternalError") -> None:
        self.faults.append(Fault(method.upper(), plural, code, times, reason))

    # --- connection ---------------------------------------------------------------------------
    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._connections.add(task)
        try:
            await self._serve(reader, writer)
        except (ConnectionError, h11.ProtocolError, asyncio.IncompleteReadError):
            pass
        except asyncio.CancelledError:
            pass  # stop(): the server owns this task; end it quietly
        finally:
            self._connections.discard(task)
            writer.close()
            with contextlib.suppress(Exception):
                await writer.wait_closed()

    async def _next(self, conn: h11.Connection, reader: asyncio.StreamReader) -> Any:
        while True:
            event = conn.next_event()
            if event is h11.NEED_DATA:
                conn.receive_data(await reader.read(65536))
                continue
            return event

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        conn = h11.Connection(h11.SERVER, max_incomplete_event_size=_MAX_BODY)
        while True:
            event = await self._next(conn, reader)
            if isinstance(event, h11.ConnectionClosed) or event is h11.PAUSED:
                return
            if not isinstance(event, h11.Request):
                return
            body = bytearray()
            while True:
                part = await self._next(conn, reader)
                if isinstance(part, h11.Data):
                    body += part.data
                    if len(body) > _MAX_BODY:
                        await self._respond(conn, writer, 413, ApiError(413, "RequestEntityTooLarge", "request body too large").status())
                        return
                elif isinstance(part, h11.EndOfMessage):
                    break
                else:
                    return
            headers = {k.decode().lower(): v.decode() for k, v in event.headers}
            await self._handle(conn, reader, writer, event.method.decode(), event.target.decode(), headers, bytes(body))
            if conn.our_state is h11.MUST_CLOSE or conn.their_state is h11.MUST_CLOSE:
                return
            try:
                conn.start_next_cycle()
            except h11.LocalProtocolError:
                return

    async def _respond(
        self, conn: h11.Connection, writer: asyncio.StreamWriter, code: int, obj: Any, warnings: Sequence[str] = ()
    ) -> None:
        data = obj if isinstance(obj, bytes) else json.dumps(obj).encode()
        headers = [*_JSON, *(("warning", _warning(w)) for w in warnings), ("content-length", str(len(data)))]
        writer.write(conn.send(h11.Response(status_code=code, headers=headers)) or b"")
        writer.write(conn.send(h11.Data(data=data)) or b"")
        writer.write(conn.send(h11.EndOfMessage()) or b"")
        await writer.drain()

    # --- request dispatch -----------------------------------------------------------------------
    async def _handle(
        self,
        conn: h11.Connection,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        method: str,
        target: str,
        headers: dict[str, str],
        body: bytes,
    ) -> None:
        split = urlsplit(target)
        query = parse_qs(split.query)
        self.requests.append((method, split.path))
        warnings: list[str] = []
        try:
            route = _route(split.path)
            if isinstance(route, str):
                code, obj = self._misc(route)
                await self._respond(conn, writer, code, obj)
                return
            entry = _audit_entry(method, route, query)
            self.audit.append(entry)
            if self.authorizer is not None:
                self.authorizer.check(*entry, route.name, route.namespace)
            fault = self._fault(method, route.kind.plural)
            if fault is not None:
                raise ApiError(fault.code, fault.reason, f"injected fault for {method} {route.kind.plural}")
            if method == "GET" and route.name is None and _query_flag(query, "watch"):
                await self._watch(conn, reader, writer, route, query, wants_table(headers.get("accept", "")))
                return
            self._granular_check(method, route, query, headers, body)
            code, obj = self._call(method, route, query, headers, body, warnings)
            if method == "GET" and code == 200 and wants_table(headers.get("accept", "")):
                obj = _as_table(route, obj, _q(query, "includeObject") or "Metadata")
        except ApiError as exc:
            code, obj = exc.code, exc.status()
        await self._respond(conn, writer, code, obj, warnings)

    def _granular_check(
        self, method: str, route: _Route, query: dict[str, list[str]], headers: dict[str, str], body: bytes
    ) -> None:
        """A write changing a claim's status.devices needs ``<mode>:<verb>`` on resourceclaims/driver
        for each driver whose entries it changes (Kubernetes 1.36+)."""
        if route.kind.plural != "resourceclaims" or route.subresource != "status" or route.name is None:
            return
        if method not in ("PUT", "PATCH"):
            return
        dry = {**query, "dryRun": ["All"]}
        try:
            old = self.store.get(route.kind, route.namespace, route.name)
            _, new = self._call(method, route, dry, headers, body)
        except ApiError:
            return  # the write itself fails below with the right error
        verb = "update" if method == "PUT" else "patch"
        token = headers.get("authorization", "").removeprefix("Bearer ").strip()
        for driver in sorted(_changed_drivers(old, new)):
            self.audit.append((route.kind.group, "resourceclaims/driver", f"associated-node:{verb}"))
            auth = self.authorizer
            if auth is None or auth.allows(route.kind.group, "resourceclaims/driver", f"arbitrary-node:{verb}", driver):
                continue
            node = auth.nodes.get(token)
            if node is not None and node == _allocation_node(old) and auth.allows(
                route.kind.group, "resourceclaims/driver", f"associated-node:{verb}", driver
            ):
                continue
            auth.check(route.kind.group, "resourceclaims/driver", f"associated-node:{verb}", driver, route.namespace)
            raise ApiError(  # allowed by RBAC, but the caller's node is not the claim's
                403,
                "Forbidden",
                f'resourceclaims.{route.kind.group} "{route.name}" is forbidden: User "{auth.user}" may update '
                f"the status of driver {driver} only for claims allocated to its own node ({node or 'none'})",
            )

    def _fault(self, method: str, plural: str) -> Fault | None:
        for fault in self.faults:
            if fault.method == method and fault.plural == plural and fault.times > 0:
                fault.times -= 1
                return fault
        return None

    def _misc(self, path: str) -> tuple[int, Any]:
        if path in ("healthz", "readyz", "livez"):
            return 200, "ok"
        if path.startswith("openapi/"):
            from topodra.embedded.openapi import document

            served = document(path)
            if served is not None:
                return 200, served
        if path == "version":
            return 200, {"major": "1", "minor": "37", "gitVersion": "v1.37.0-topodra-double", "platform": "linux/amd64"}
        found = _discovery(path)
        if found is not None:
            return 200, found
        raise ApiError(404, "NotFound", f"the server could not find the requested resource: /{path}")

    @staticmethod
    def _body(body: bytes, *, yaml_ok: bool = False) -> Any:
        if not body:
            return None
        try:
            return json.loads(body)
        except ValueError as exc:
            if yaml_ok:  # an apply configuration may be YAML
                try:
                    return yaml.safe_load(body)
                except yaml.YAMLError:
                    pass
            raise ApiError.bad_request(f"the request body is not valid JSON: {exc}") from None

    def _call(
        self,
        method: str,
        route: _Route,
        query: dict[str, list[str]],
        headers: dict[str, str],
        body: bytes,
        warnings: list[str] | None = None,
    ) -> tuple[int, Any]:
        store, kind, ns, name = self.store, route.kind, route.namespace, route.name
        dry_run = _q(query, "dryRun") == "All"
        decoded: Any = _RAW
        if method in ("POST", "PUT", "PATCH"):
            ctype = headers.get("content-type", "").split(";")[0].strip()
            decoded = _decoded(kind, body, _q(query, "fieldValidation") or "Warn", ctype, warnings if warnings is not None else [])

        def payload(*, yaml_ok: bool = False) -> Any:
            return self._body(body, yaml_ok=yaml_ok) if decoded is _RAW else decoded

        if route.subresource and route.subresource != "status":
            raise ApiError(404, "NotFound", f"unknown subresource {route.subresource!r}")
        if method == "GET":
            if name is not None:
                return 200, store.get(kind, ns, name)
            if kind.namespaced is False and ns is not None:
                raise ApiError(404, "NotFound", f"{kind.plural} are not namespaced")
            limit = _q(query, "limit")
            return 200, store.list(
                kind,
                ns,
                label_selector=_q(query, "labelSelector"),
                field_selector=_q(query, "fieldSelector"),
                limit=int(limit) if limit and limit.isdigit() else None,
                continue_token=_q(query, "continue"),
            )
        if method == "POST" and name is None:
            if kind.namespaced and ns is None:
                raise ApiError(404, "NotFound", f"{kind.plural} must be created in a namespace")
            return 201, store.create(kind, ns, payload(), dry_run=dry_run)
        if method == "PUT" and name is not None:
            return 200, store.update(
                kind,
                ns,
                name,
                payload(),
                subresource=route.subresource,
                dry_run=dry_run,
                manager=_q(query, "fieldManager") or _default_manager(headers),
            )
        if method == "PATCH" and name is not None:
            ctype = headers.get("content-type", "").split(";")[0].strip()
            apply = ctype == "application/apply-patch+yaml"
            return 200, store.patch(
                kind,
                ns,
                name,
                payload(yaml_ok=apply),
                content_type=ctype,
                subresource=route.subresource,
                dry_run=dry_run,
                manager=_q(query, "fieldManager") or ("" if apply else _default_manager(headers)),
                force=_query_flag(query, "force"),
            )
        if method == "DELETE" and name is not None:
            options = self._body(body) or {}
            pre = options.get("preconditions") if isinstance(options, dict) else None
            return 200, store.delete(kind, ns, name, preconditions=pre, dry_run=dry_run or options.get("dryRun") == ["All"])
        raise ApiError(405, "MethodNotAllowed", f"{method} is not supported on this path")

    async def _watch(
        self,
        conn: h11.Connection,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        route: _Route,
        query: dict[str, list[str]],
        as_table: bool = False,
    ) -> None:
        include = _q(query, "includeObject") or "Metadata"
        if as_table:
            table(route.kind, [], {}, include, datetime.datetime.now(datetime.UTC))  # a bad includeObject is a 400 first
        watch = self.store.watch(
            route.kind,
            route.namespace,
            resource_version=_q(query, "resourceVersion"),
            label_selector=_q(query, "labelSelector"),
            field_selector=_q(query, "fieldSelector"),
        )
        timeout_s = _q(query, "timeoutSeconds")
        timeout = float(timeout_s) if timeout_s and timeout_s.isdigit() else None
        writer.write(conn.send(h11.Response(status_code=200, headers=[*_JSON, ("transfer-encoding", "chunked")])) or b"")
        await writer.drain()

        async def watch_peer() -> None:
            # The peer closing its side ends the watch; anything it sends early is kept for h11.
            while True:
                data = await reader.read(65536)
                conn.receive_data(data)
                if not data:
                    watch.close()
                    return

        peer = asyncio.create_task(watch_peer())
        timer = asyncio.get_running_loop().call_later(timeout, watch.close) if timeout else None
        try:
            headed = False
            async for event in watch:
                sent = event.to_json()
                if as_table and event.type in ("ADDED", "MODIFIED", "DELETED"):
                    sent = {"type": event.type, "object": _watched_row(route, event.object, include, headed)}
                    headed = True
                writer.write(conn.send(h11.Data(data=json.dumps(sent).encode() + b"\n")) or b"")
                await writer.drain()
            if conn.their_state is not h11.ERROR and not peer.done():
                writer.write(conn.send(h11.EndOfMessage()) or b"")
                await writer.drain()
        finally:
            watch.close()
            if timer is not None:
                timer.cancel()
            peer.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await peer


class ApiServerThread:
    """An ``ApiServer`` on its own event loop in a daemon thread (for synchronous callers)."""

    def __init__(self, store: Store | None = None) -> None:
        self._store = store
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="topodra-apiserver", daemon=True)
        self.server: ApiServer | None = None
        self.url = ""

    def start(self) -> str:
        self._thread.start()
        self.server = ApiServer(self._store)
        self.url = asyncio.run_coroutine_threadsafe(self.server.start(), self._loop).result(10)
        return self.url

    def call(self, fn: Callable[[], T]) -> T:
        """Run ``fn`` on the server's loop (the store is not thread-safe) and return its result."""
        fut: Future[T] = Future()

        def run() -> None:
            try:
                fut.set_result(fn())
            except BaseException as exc:
                fut.set_exception(exc)

        self._loop.call_soon_threadsafe(run)
        return fut.result(10)

    def stop(self) -> None:
        if self.server is not None:
            asyncio.run_coroutine_threadsafe(self.server.stop(), self._loop).result(10)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)
        self._loop.close()

    def __enter__(self) -> ApiServerThread:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    @property
    def store(self) -> Store:
        assert self.server is not None
        return self.server.store

