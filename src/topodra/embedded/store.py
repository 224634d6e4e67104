"""The in-memory object store behind the API server double: CRUD, resourceVersions, watches.

Semantics follow the real API server where a client can tell the difference:
one cluster-wide resourceVersion counter; optimistic concurrency (an update
with a stale resourceVersion is a 409 Conflict); ``metadata.generation``
bumped on spec changes; status only through the ``/status`` subresource;
finalizers delay deletion; deleting an owner deletes its dependents
(background garbage collection); watches replay from a resourceVersion or
answer 410 Gone when it is too old. No HTTP here: ``apiserver`` serves it,
and in-process users (the playground) may call it directly from the loop
that runs the server.
"""

from __future__ import annotations

import asyncio
import base64
import builtins
import copy
import datetime
import itertools
import json
import marshal
import re
import uuid
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any, Final, TypeVar

from topodra.embedded.apply import Owners, apply_devices, drop_deallocated, owned_by, update_owners
from topodra.embedded.prepare import drop_disabled_fields, set_defaults
from topodra.embedded.validation import SELECTOR_VALIDATORS, VALIDATORS
from topodra.gates import DEFAULTS, LIST_TYPE_ATTRIBUTES, feature_gates
from topodra.kube.errors import ApiError

_T = TypeVar("_T")


def _copy(obj: _T) -> _T:
    """A deep copy of a JSON-shaped object (dicts, lists, strings, numbers, bools, None) through
    marshal, several times faster than ``copy.deepcopy``: the double copies each write more than
    once, on the cores of the node it stands beside in the benchmarks, so its cost would land in
    the agent's figures. Anything else goes through ``copy.deepcopy``."""
    try:
        copied: _T = marshal.loads(marshal.dumps(obj))  # type: ignore[arg-type]
        return copied
    except ValueError:
        return copy.deepcopy(obj)


__all__ = [
    "KINDS",
    "Kind",
    "Store",
    "Watch",
    "WatchEvent",
    "kind_for",
    "parse_field_selector",
    "parse_label_selector",
]

Obj = dict[str, Any]


@dataclass(frozen=True, slots=True)
class Kind:
    group: str
    version: str
    plural: str
    kind: str
    namespaced: bool
    has_status: bool = False
    fields: tuple[str, ...] = ()  # field selector labels beyond metadata.name/namespace

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version

    @property
    def key(self) -> tuple[str, str]:
        return (self.group, self.plural)


KINDS: Final[dict[tuple[str, str], Kind]] = {
    k.key: k
    for k in (
        Kind("", "v1", "nodes", "Node", False, True),
        Kind("", "v1", "namespaces", "Namespace", False, True, ("status.phase",)),
        Kind("", "v1", "pods", "Pod", True, True, ("spec.nodeName", "status.phase")),
        Kind("resource.k8s.io", "v1", "resourceslices", "ResourceSlice", False, False, ("spec.nodeName", "spec.driver", "spec.pool.name")),
        Kind("resource.k8s.io", "v1", "deviceclasses", "DeviceClass", False),
        Kind("resource.k8s.io", "v1", "resourceclaims", "ResourceClaim", True, True),
        Kind("resource.k8s.io", "v1", "resourceclaimtemplates", "ResourceClaimTemplate", True),
    )
}


def kind_for(group: str, version: str, plural: str) -> Kind:
    kind = KINDS.get((group, plural))
    if kind is None or kind.version != version:
        raise ApiError(404, "NotFound", f"the server could not find the requested resource ({group or 'core'}/{version} {plural})")
    return kind


# --- selectors -----------------------------------------------------------------------------------

Predicate = Callable[[Mapping[str, Any]], bool]
_SET_EXPR: Final = re.compile(r"\s*([^\s!=(),]+)\s+(in|notin)\s+\(([^)]*)\)\s*\Z")


def _split_top(text: str) -> list[str]:
    parts: list[str] = []
    cur: list[str] = []
    depth = 0
    for ch in text:
        if ch == "(":
            depth += 1
        elif ch == ")":
            depth -= 1
        if ch == "," and depth == 0:
            parts.append("".join(cur))
            cur = []
        else:
            cur.append(ch)
    parts.append("".join(cur))
    return [p for p in (x.strip() for x in parts) if p]


def _in_test(key: str, values: set[str], positive: bool) -> Callable[[Mapping[str, str]], bool]:
    return lambda labels: (labels.get(key) in values) == positive


def _eq_test(key: str, value: str, positive: bool) -> Callable[[Mapping[str, str]], bool]:
    return lambda labels: (labels.get(key) == value) == positive


def _exists_test(key: str, positive: bool) -> Callable[[Mapping[str, str]], bool]:
    return lambda labels: (key in labels) == positive


def parse_label_selector(text: str | None) -> Predicate:
    """``a=b,c!=d,e,!f,g in (x,y),h notin (z)`` over ``metadata.labels``."""
    if not text:
        return lambda obj: True
    tests: list[Callable[[Mapping[str, str]], bool]] = []
    for part in _split_top(text):
        m = _SET_EXPR.match(part)
        if m:
            values = {v.strip() for v in m.group(3).split(",") if v.strip()}
            tests.append(_in_test(m.group(1), values, m.group(2) == "in"))
        elif "!=" in part:
            key, _, value = part.partition("!=")
            tests.append(_eq_test(key.strip(), value.strip(), False))
        elif "=" in part:
            key, _, value = part.replace("==", "=").partition("=")
            tests.append(_eq_test(key.strip(), value.strip(), True))
        elif part.startswith("!"):
            tests.append(_exists_test(part[1:].strip(), False))
        elif re.fullmatch(r"[A-Za-z0-9_./-]+", part):
            tests.append(_exists_test(part, True))
        else:
            raise ApiError.bad_request(f"unable to parse requirement: {part!r}")

    def match(obj: Mapping[str, Any]) -> bool:
        labels = (obj.get("metadata") or {}).get("labels") or {}
        return all(t(labels) for t in tests)

    return match


def _field_value(obj: Mapping[str, Any], path: str) -> str:
    cur: Any = obj
    for part in path.split("."):
        cur = cur.get(part) if isinstance(cur, Mapping) else None
    if cur is None:
        return ""
    if isinstance(cur, bool):
        return "true" if cur else "false"
    return str(cur)


def parse_field_selector(text: str | None, kind: Kind) -> Predicate:
    """``spec.nodeName=n,spec.driver!=x``; only the fields the real server indexes for the kind."""
    if not text:
        return lambda obj: True
    allowed = {"metadata.name", "metadata.namespace", *kind.fields}
    tests: list[tuple[str, bool, str]] = []
    for part in _split_top(text):
        if "!=" in part:
            key, _, value = part.partition("!=")
            positive = False
        else:
            key, _, value = part.replace("==", "=").partition("=")
            positive = True
        key = key.strip()
        if key not in allowed:
            raise ApiError.bad_request(f'field label not supported: "{key}"')
        tests.append((key, positive, value.strip()))
    return lambda obj: all((_field_value(obj, k) == v) == pos for k, pos, v in tests)


# --- watches ------------------------------------------------------------------------------------------

@dataclass(frozen=True, slots=True)
class WatchEvent:
    type: str  # ADDED, MODIFIED, DELETED, ERROR
    object: Obj
    resource_version: int = 0

    def to_json(self) -> Obj:
        return {"type": self.type, "object": self.object}


@dataclass(slots=True)
class _Logged:
    rv: int
    kind: Kind
    type: str
    object: Obj


class Watch:
    """One watch: an async iterator of events; ``close()`` ends it."""

    def __init__(self, store: Store, kind: Kind, namespace: str | None, match: Predicate) -> None:
        self._store = store
        self.kind = kind
        self.namespace = namespace
        self.match = match
        self.queue: asyncio.Queue[WatchEvent | None] = asyncio.Queue()
        self.closed = False

    def offer(self, kind: Kind, event_type: str, obj: Obj, rv: int) -> None:
        if self.closed or kind is not self.kind:
            return
        if self.namespace is not None and (obj.get("metadata") or {}).get("namespace") != self.namespace:
            return
        if self.match(obj):
            self.queue.put_nowait(WatchEvent(event_type, obj, rv))

    def close(self) -> None:
        if not self.closed:
            self.closed = True
            self._store._watches.discard(self)
            self.queue.put_nowait(None)

    def __aiter__(self) -> Watch:
        return self

    async def __anext__(self) -> WatchEvent:
        item = await self.queue.get()
        if item is None:
            raise StopAsyncIteration
        return item


def _now() -> str:
    return datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


class Store:
    """All objects of the double, keyed by kind, namespace and name."""

    def __init__(self, *, event_log: int = 10_000, gates: Mapping[str, bool] | None = None) -> None:
        self._objects: dict[tuple[str, str], dict[tuple[str, str], Obj]] = {k: {} for k in KINDS}
        self._rv = itertools.count(1)
        self._last_rv = 0
        self._log: deque[_Logged] = deque(maxlen=event_log)
        self._watches: set[Watch] = set()
        #: Mutating admission: ``fn(kind, obj)`` may change an object being created or updated
        #: (e.g. drop fields of a disabled feature gate, as a real API server does).
        self.admission: list[Callable[[Kind, Obj], None]] = []
        #: The feature gates whose fields the store keeps or drops (``topodra.gates``): a disabled
        #: gate's fields are dropped before validation (``embedded.prepare``). Unless given, every gate
        #: is on (a server keeping every field topodra writes); ``dra apiserver`` and the playground
        #: start from 1.36's defaults.
        self.gates: dict[str, bool] = feature_gates(gates) if gates is not None else dict.fromkeys(DEFAULTS, True)
        #: claim UID -> who owns which field of its status.devices (server-side apply)
        self._owners: dict[str, Owners] = {}

    # --- helpers -------------------------------------------------------------------------------
    @property
    def resource_version(self) -> int:
        return self._last_rv

    def _next_rv(self) -> int:
        self._last_rv = next(self._rv)
        return self._last_rv

    def _emit(self, kind: Kind, event_type: str, obj: Obj) -> None:
        rv = int(obj["metadata"]["resourceVersion"])
        self._log.append(_Logged(rv, kind, event_type, obj))
        for w in list(self._watches):
            w.offer(kind, event_type, _copy(obj), rv)

    def _bucket(self, kind: Kind) -> dict[tuple[str, str], Obj]:
        return self._objects[kind.key]

    @staticmethod
    def _ns(kind: Kind, namespace: str | None) -> str:
        if kind.namespaced:
            if not namespace:
                raise ApiError.bad_request(f"{kind.plural} are namespaced: a namespace is required")
            return namespace
        return ""

    def _validate(self, kind: Kind, obj: Obj, old: Obj | None) -> None:
        with_selectors = SELECTOR_VALIDATORS.get(kind.plural)
        if with_selectors is not None:
            errors = with_selectors(obj, old, lists=self.gates.get(LIST_TYPE_ATTRIBUTES, False))
        else:
            errors = VALIDATORS[kind.plural](obj, old)
        if errors:
            name = (obj.get("metadata") or {}).get("name") or ""
            raise ApiError.invalid(kind.kind, name, errors, kind=kind.kind, group=kind.group)

    def _check_body(self, kind: Kind, obj: Any) -> Obj:
        if not isinstance(obj, dict):
            raise ApiError.bad_request(f"the body of a {kind.kind} must be a JSON object")
        api_version, obj_kind = obj.get("apiVersion"), obj.get("kind")
        if api_version is not None and api_version != kind.api_version:
            raise ApiError.bad_request(f"apiVersion {api_version!r} does not match the endpoint's {kind.api_version!r}")
        if obj_kind is not None and obj_kind != kind.kind:
            raise ApiError.bad_request(f"kind {obj_kind!r} does not match the endpoint's {kind.kind!r}")
        if not isinstance(obj.get("metadata", {}), dict):
            raise ApiError.bad_request("metadata must be an object")
        return _copy(obj)

    def _present(self, kind: Kind, obj: Obj) -> Obj:
        out = _copy(obj)
        out["apiVersion"], out["kind"] = kind.api_version, kind.kind
        return out

    # --- reads ------------------------------------------------------------------------------------
    def get(self, kind: Kind, namespace: str | None, name: str) -> Obj:
        ns = self._ns(kind, namespace)
        obj = self._bucket(kind).get((ns, name))
        if obj is None:
            raise ApiError.not_found(kind.plural, name, kind.group)
        return self._present(kind, obj)

    def list(
        self,
        kind: Kind,
        namespace: str | None = None,
        *,
        label_selector: str | None = None,
        field_selector: str | None = None,
        limit: int | None = None,
        continue_token: str | None = None,
    ) -> Obj:
        """A ``<Kind>List``; ``limit``/``continue`` page through a consistent snapshot order."""
        labels = parse_label_selector(label_selector)
        fields = parse_field_selector(field_selector, kind)
        items = [
            o
            for (ns, _), o in sorted(self._bucket(kind).items())
            if (namespace is None or ns == namespace) and labels(o) and fields(o)
        ]
        start = 0
        if continue_token:
            try:
                start = int(json.loads(base64.urlsafe_b64decode(continue_token))["start"])
            except (ValueError, KeyError, TypeError):
                raise ApiError(410, "Expired", "the provided continue parameter is invalid") from None
        meta: Obj = {"resourceVersion": str(self._last_rv)}
        if limit is not None and limit > 0 and start + limit < len(items):
            meta["continue"] = base64.urlsafe_b64encode(json.dumps({"start": start + limit}).encode()).decode()
            page = items[start : start + limit]
        else:
            page = items[start:]
        return {
            "apiVersion": kind.api_version,
            "kind": f"{kind.kind}List",
            "metadata": meta,
            "items": [_copy(o) for o in page],
        }

    def watch(
        self,
        kind: Kind,
        namespace: str | None = None,
        *,
        resource_version: str | None = None,
        label_selector: str | None = None,
        field_selector: str | None = None,
    ) -> Watch:
        """Events after ``resource_version``; unset or "0": the current objects as ADDED first."""
        labels = parse_label_selector(label_selector)
        fields = parse_field_selector(field_selector, kind)
        watch = Watch(self, kind, namespace, lambda o: labels(o) and fields(o))
        if resource_version in (None, "", "0"):
            for (ns, _), obj in sorted(self._bucket(kind).items()):
                if namespace is None or ns == namespace:
                    watch.offer(kind, "ADDED", self._present(kind, obj), int(obj["metadata"]["resourceVersion"]))
        else:
            try:
                since = int(resource_version)
            except ValueError:
                raise ApiError.bad_request(f"invalid resourceVersion {resource_version!r}") from None
            oldest = self._log[0].rv if self._log else self._last_rv + 1
            if since < oldest - 1 and since < self._last_rv:
                raise ApiError(410, "Expired", f"too old resource version: {since} ({oldest - 1})")
            for entry in self._log:
                if entry.rv > since:
                    watch.offer(entry.kind, entry.type, _copy(entry.object), entry.rv)
        self._watches.add(watch)
        return watch

    def _admit(self, kind: Kind, obj: Obj, old: Obj | None) -> None:
        """What a real server does to an object before validating it: defaults, a disabled gate's
        fields dropped, then the mutating admission."""
        set_defaults(kind.plural, obj)
        drop_disabled_fields(self.gates, kind.plural, obj, old)
        for admit in self.admission:
            admit(kind, obj)

    def close_watches(self) -> None:
        for w in list(self._watches):
            w.close()

    # --- writes -------------------------------------------------------------------------------------
    def create(self, kind: Kind, namespace: str | None, obj: Any, *, dry_run: bool = False) -> Obj:
        obj = self._check_body(kind, obj)
        meta = obj.setdefault("metadata", {})
        ns = self._ns(kind, namespace or meta.get("namespace"))
        if kind.namespaced:
            if meta.get("namespace") not in (None, ns):
                raise ApiError.bad_request(f"the namespace of the object ({meta['namespace']}) does not match the namespace on the request ({ns})")
            meta["namespace"] = ns
        if meta.get("resourceVersion"):
            raise ApiError.bad_request("resourceVersion should not be set on objects to be created")
        if not meta.get("name") and meta.get("generateName"):
            meta["name"] = f"{meta['generateName']}{uuid.uuid4().hex[:5]}"
        if kind.plural in ("resourceclaims", "pods"):
            obj.pop("status", None)  # set only through the status subresource, as on a real server
        if kind.plural == "pods":
            obj["status"] = {"phase": "Pending"}  # the pod strategy's PrepareForCreate
        self._admit(kind, obj, None)
        self._validate(kind, obj, None)
        if (ns, meta["name"]) in self._bucket(kind):
            raise ApiError.already_exists(kind.plural, meta["name"], kind.group)
        if dry_run:
            return self._present(kind, obj)
        meta["uid"] = str(uuid.uuid4())
        meta["creationTimestamp"] = _now()
        meta["generation"] = 1
        meta["resourceVersion"] = str(self._next_rv())
        obj["apiVersion"], obj["kind"] = kind.api_version, kind.kind
        self._bucket(kind)[(ns, meta["name"])] = obj
        self._emit(kind, "ADDED", obj)
        return self._present(kind, obj)

    def update(
        self,
        kind: Kind,
        namespace: str | None,
        name: str,
        obj: Any,
        *,
        subresource: str = "",
        dry_run: bool = False,
        manager: str = "",
        owners: Owners | None = None,
    ) -> Obj:
        """PUT: the whole object (or, for ``status``, only its status) with optimistic concurrency.
        ``manager`` owns the ``status.devices`` fields it changes (``owners``: the table an apply
        computed instead)."""
        obj = self._check_body(kind, obj)
        ns = self._ns(kind, namespace)
        old = self._bucket(kind).get((ns, name))
        if old is None:
            raise ApiError.not_found(kind.plural, name, kind.group)
        meta = obj.setdefault("metadata", {})
        if meta.get("name", name) != name:
            raise ApiError.bad_request(f"the name of the object ({meta.get('name')}) does not match the name on the URL ({name})")
        rv = meta.get("resourceVersion")
        if rv and rv != old["metadata"]["resourceVersion"]:
            raise ApiError.conflict(
                kind.plural, name, "the object has been modified; please apply your changes to the latest version and try again", kind.group
            )
        if meta.get("uid") and meta["uid"] != old["metadata"]["uid"]:
            raise ApiError.conflict(kind.plural, name, f"Precondition failed: UID in object meta: {meta['uid']}", kind.group)
        if subresource == "status":
            if not kind.has_status:
                raise ApiError.not_found(f"{kind.plural}/status", name, kind.group)
            new = _copy(old)
            new["status"] = obj.get("status", {})
        elif subresource:
            raise ApiError.not_found(f"{kind.plural}/{subresource}", name, kind.group)
        else:
            new = obj
            if kind.has_status:
                if "status" in old:
                    new["status"] = _copy(old["status"])
                else:
                    new.pop("status", None)
            # system fields are kept; user-settable metadata is taken from the request
            for key in ("uid", "creationTimestamp", "namespace", "deletionTimestamp", "generation"):
                if key in old["metadata"]:
                    new["metadata"][key] = old["metadata"][key]
                else:
                    new["metadata"].pop(key, None)
            new["metadata"]["name"] = name
        claim = kind.plural == "resourceclaims"
        if claim and isinstance(new.get("status"), dict):
            drop_deallocated(new["status"], old.get("status") or {})
        self._admit(kind, new, old)
        self._validate(kind, new, old)
        if new.get("spec") != old.get("spec"):
            new["metadata"]["generation"] = int(old["metadata"].get("generation", 1)) + 1
        if dry_run:
            return self._present(kind, new)
        new["apiVersion"], new["kind"] = kind.api_version, kind.kind
        if claim:
            uid = old["metadata"]["uid"]
            before = (old.get("status") or {}).get("devices") or []
            after = (new.get("status") or {}).get("devices") or []
            table = owners if owners is not None else update_owners(before, after, self._owners.get(uid, {}), manager or "unknown")
            if table:
                self._owners[uid] = table
            else:
                self._owners.pop(uid, None)
        if _same(new, old):
            return self._present(kind, old)  # a no-op update keeps the resourceVersion
        new["metadata"]["resourceVersion"] = str(self._next_rv())
        if new["metadata"].get("deletionTimestamp") and not new["metadata"].get("finalizers"):
            self._remove(kind, ns, name, new)
            return self._present(kind, new)
        self._bucket(kind)[(ns, name)] = new
        self._emit(kind, "MODIFIED", new)
        return self._present(kind, new)

    def patch(
        self,
        kind: Kind,
        namespace: str | None,
        name: str,
        patch: Any,
        *,
        content_type: str = "application/merge-patch+json",
        subresource: str = "",
        dry_run: bool = False,
        manager: str = "",
        force: bool = False,
    ) -> Obj:
        """JSON merge patch (RFC 7386), strategic merge patch (``embedded/strategic.py``, by the
        kind's OpenAPI schema) or JSON patch (RFC 6902, ``embedded/jsonpatch.py``); server-side
        apply (``application/apply-patch+yaml``) goes to ``apply``."""
        if content_type == "application/apply-patch+yaml":
            return self.apply(kind, namespace, name, patch, manager=manager, force=force, subresource=subresource, dry_run=dry_run)
        if content_type == "application/json-patch+json":
            patched = _json_patched(self.get(kind, namespace, name), patch)
            return self.update(kind, namespace, name, patched, subresource=subresource, dry_run=dry_run, manager=manager)
        if content_type not in ("application/merge-patch+json", "application/strategic-merge-patch+json"):
            raise ApiError(415, "UnsupportedMediaType", f"the double does not support patch type {content_type!r}")
        if not isinstance(patch, dict):
            raise ApiError.bad_request("a merge patch must be a JSON object")
        current = self.get(kind, namespace, name)
        if content_type == "application/strategic-merge-patch+json":
            from topodra.embedded.openapi import strategic_patch

            merged = strategic_patch(kind, current, patch)
        else:
            merged = _merge_patch(current, patch)
        if not isinstance(merged, dict):
            raise ApiError.bad_request("the patch did not produce an object")
        merged.setdefault("metadata", {})["resourceVersion"] = (patch.get("metadata") or {}).get(
            "resourceVersion", current["metadata"]["resourceVersion"]
        )
        return self.update(kind, namespace, name, merged, subresource=subresource, dry_run=dry_run, manager=manager)

    def apply(
        self,
        kind: Kind,
        namespace: str | None,
        name: str,
        config: Any,
        *,
        manager: str,
        force: bool = False,
        subresource: str = "",
        dry_run: bool = False,
    ) -> Obj:
        """Server-side apply; the double applies ``status.devices`` of ResourceClaims only."""
        if not manager:
            raise ApiError(422, "Invalid", "PatchOptions.meta.k8s.io \"\" is invalid: fieldManager: Required value: is required for apply patch")
        if kind.plural != "resourceclaims" or subresource != "status":
            raise ApiError(415, "UnsupportedMediaType", f"the double applies only resourceclaims/status, not {kind.plural}{'/' + subresource if subresource else ''}")
        body = self._check_body(kind, config)
        for key in ("apiVersion", "kind"):
            if not body.get(key):
                raise ApiError.bad_request(f"{key} must be set in an apply configuration")
        meta = body.get("metadata") or {}
        if meta.get("name", name) != name:
            raise ApiError.bad_request(f"the name of the object ({meta.get('name')}) does not match the name on the URL ({name})")
        status = body.get("status") or {}
        if not isinstance(status, dict) or set(status) - {"devices"}:
            raise ApiError(415, "UnsupportedMediaType", "the double applies only status.devices of a ResourceClaim")
        current = self.get(kind, namespace, name)
        uid = current["metadata"]["uid"]
        if meta.get("uid") and meta["uid"] != uid:
            raise ApiError.conflict(kind.plural, name, f"Precondition failed: UID in object meta: {meta['uid']}", kind.group)
        applied = status.get("devices") or []
        if not isinstance(applied, list):
            raise ApiError.bad_request("status.devices must be a list")
        have = (current.get("status") or {}).get("devices") or []
        devices, table = apply_devices(have, self._owners.get(uid, {}), manager, applied, force=force)
        merged = _copy(current)
        merged.setdefault("status", {})
        if devices:
            merged["status"]["devices"] = devices
        else:
            merged["status"].pop("devices", None)
        return self.update(kind, namespace, name, merged, subresource="status", dry_run=dry_run, manager=manager, owners=table)

    def field_owners(self, kind: Kind, namespace: str | None, name: str) -> dict[str, builtins.list[str]]:
        """Who owns which ``status.devices`` field of a claim (manager -> field paths)."""
        obj = self.get(kind, namespace, name)
        return owned_by(self._owners.get(obj["metadata"]["uid"], {}))

    def delete(
        self,
        kind: Kind,
        namespace: str | None,
        name: str,
        *,
        preconditions: Mapping[str, Any] | None = None,
        dry_run: bool = False,
    ) -> Obj:
        ns = self._ns(kind, namespace)
        old = self._bucket(kind).get((ns, name))
        if old is None:
            raise ApiError.not_found(kind.plural, name, kind.group)
        pre = preconditions or {}
        if pre.get("uid") and pre["uid"] != old["metadata"]["uid"]:
            raise ApiError.conflict(
                kind.plural, name, f"Precondition failed: UID in precondition: {pre['uid']}, UID in object meta: {old['metadata']['uid']}", kind.group
            )
        if pre.get("resourceVersion") and pre["resourceVersion"] != old["metadata"]["resourceVersion"]:
            raise ApiError.conflict(
                kind.plural,
                name,
                f"Precondition failed: ResourceVersion in precondition: {pre['resourceVersion']}, "
                f"ResourceVersion in object meta: {old['metadata']['resourceVersion']}",
                kind.group,
            )
        if dry_run:
            return self._present(kind, old)
        if old["metadata"].get("finalizers"):
            if old["metadata"].get("deletionTimestamp"):
                return self._present(kind, old)
            new = _copy(old)
            new["metadata"]["deletionTimestamp"] = _now()
            new["metadata"]["resourceVersion"] = str(self._next_rv())
            self._bucket(kind)[(ns, name)] = new
            self._emit(kind, "MODIFIED", new)
            return self._present(kind, new)
        gone = _copy(old)
        gone["metadata"]["resourceVersion"] = str(self._next_rv())
        self._remove(kind, ns, name, gone)
        return self._present(kind, gone)

    def _remove(self, kind: Kind, ns: str, name: str, final: Obj) -> None:
        del self._bucket(kind)[(ns, name)]
        self._owners.pop(final["metadata"].get("uid", ""), None)
        self._emit(kind, "DELETED", final)
        self._collect_dependents(final["metadata"]["uid"])

    def _collect_dependents(self, owner_uid: str) -> None:
        """Background garbage collection: delete objects owned by a deleted object."""
        for key, bucket in self._objects.items():
            kind = KINDS[key]
            for (ns, name), obj in list(bucket.items()):
                refs = obj["metadata"].get("ownerReferences") or []
                if any(r.get("uid") == owner_uid for r in refs) and (ns, name) in bucket:
                    self.delete(kind, ns or None, name)

    # --- convenience for in-process users ------------------------------------------------------------
    def objects(self, kind: Kind) -> Iterator[Obj]:
        for obj in self._bucket(kind).values():
            yield self._present(kind, obj)

    def load(self, objects: Iterable[Mapping[str, Any]]) -> builtins.list[Obj]:
        """Create objects from manifests (``apiVersion``/``kind`` pick the resource)."""
        out = []
        for raw in objects:
            kind = self.kind_of(raw)
            ns = (raw.get("metadata") or {}).get("namespace") or ("default" if kind.namespaced else None)
            out.append(self.create(kind, ns, dict(raw)))
        return out

    @staticmethod
    def kind_of(obj: Mapping[str, Any]) -> Kind:
        api_version, kind_name = str(obj.get("apiVersion", "")), obj.get("kind")
        group, _, version = api_version.rpartition("/")
        for kind in KINDS.values():
            if kind.group == group and kind.version == version and kind.kind == kind_name:
                return kind
        raise ApiError.bad_request(f"no resource for apiVersion {api_version!r} kind {kind_name!r}")


def _same(a: Obj, b: Obj) -> bool:
    strip = ("resourceVersion",)
    ma = {k: v for k, v in a.get("metadata", {}).items() if k not in strip}
    mb = {k: v for k, v in b.get("metadata", {}).items() if k not in strip}
    return ma == mb and {k: v for k, v in a.items() if k != "metadata"} == {k: v for k, v in b.items() if k != "metadata"}


def _json_patched(current: Obj, body: Any) -> Obj:
    """``current`` with a JSON patch applied, refused as kube-apiserver 1.36 refuses it: a body
    that does not decode (400), too many operations (413), an operation that does not apply
    (422, the server's generic words: it does not return the library's error)."""
    from topodra.embedded.jsonpatch import MAX_OPERATIONS, JsonPatchError, apply_patch, decode_patch

    try:
        operations = decode_patch(body)
    except ValueError as exc:
        raise ApiError.bad_request(str(exc)) from None
    if len(operations) > MAX_OPERATIONS:
        raise ApiError(
            413,
            "RequestEntityTooLarge",
            f"Request entity too large: The allowed maximum operations in a JSON patch is {MAX_OPERATIONS}, got {len(operations)}",
        )
    try:
        patched = apply_patch(current, operations)
    except JsonPatchError:
        raise ApiError(422, "Invalid", "the server rejected our request due to an error in our request") from None
    if not isinstance(patched, dict):
        raise ApiError.bad_request("the patch did not produce an object")
    return patched


def _merge_patch(target: Any, patch: Any) -> Any:
    if not isinstance(patch, dict):
        return _copy(patch)
    out = dict(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            out.pop(key, None)
        else:
            out[key] = _merge_patch(out.get(key), value)
    return out

