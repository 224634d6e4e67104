"""The OpenAPI v3 documents of the kinds the API server double serves, and field checks from them.

kubectl 1.36 reads ``/openapi/v3`` (a list of group-version documents, each under a
``serverRelativeURL`` carrying the document's hash), then the document of the object's group
and version. When that document's PATCH operation for the object's kind takes the
``fieldValidation`` query parameter, kubectl leaves validation to the server and sends
``fieldValidation=Strict`` (its default ``--validate=strict``); otherwise it validates the
object itself against the schemas, or gives up without ``--validate=false``.

The component schemas are kube-apiserver 1.36.2's for the served kinds and everything they
refer to, facts only (``openapi/README.md``; ``scripts/openapi-schemas`` extracts them). The
paths are built here from ``store.KINDS`` with the verbs and parameters the double serves. The
same schemas decide which fields of an object are unknown, as the real server's strict decoding
does: ``fieldValidation=Strict`` refuses them, ``Warn`` (the default) and ``Ignore`` drop them.
"""

from __future__ import annotations

import hashlib
import json
from functools import cache, lru_cache
from importlib import resources
from typing import Any, Final

from topodra.embedded.store import KINDS, Kind
from topodra.kube.errors import ApiError

__all__ = [
    "document",
    "strict_decoding_error",
    "drop_unknown_fields",
    "group_version_path",
    "schema_name",
    "strategic_patch",
    "unknown_fields",
]

_FILES: Final = {("", "v1"): "core-v1.json", ("resource.k8s.io", "v1"): "resource-v1.json"}
_REF: Final = "#/components/schemas/"
_META: Final = "io.k8s.apimachinery.pkg.apis.meta.v1."
_VERSION: Final = "v1.36.2"


@cache
def _schemas(group: str, version: str) -> dict[str, Any]:
    text = (resources.files("topodra.embedded") / "openapi" / _FILES[(group, version)]).read_text()
    loaded: dict[str, Any] = json.loads(text)
    return loaded


def group_version_path(group: str, version: str) -> str:
    """``api/v1`` or ``apis/GROUP/VERSION``: the key of a group-version in ``/openapi/v3``."""
    return f"apis/{group}/{version}" if group else f"api/{version}"


def schema_name(kind: Kind) -> str:
    """The component schema of ``kind`` (``io.k8s.api.core.v1.Pod``)."""
    for name, schema in _schemas(kind.group, kind.version).items():
        for gvk in schema.get("x-kubernetes-group-version-kind", []):
            if (gvk.get("group"), gvk.get("version"), gvk.get("kind")) == (kind.group, kind.version, kind.kind):
                return name
    raise KeyError(f"no schema for {kind.kind}")


def _ref(name: str) -> dict[str, str]:
    return {"$ref": _REF + name}


def _query(*names: str) -> list[dict[str, Any]]:
    types = {"limit": "integer", "timeoutSeconds": "integer", "watch": "boolean", "force": "boolean"}
    return [{"name": n, "in": "query", "schema": {"type": types.get(n, "string"), "uniqueItems": True}} for n in names]


_BODY_TYPES: Final = ("application/json", "application/yaml")
_PATCH_TYPES: Final = (
    "application/apply-patch+yaml",
    "application/json-patch+json",
    "application/merge-patch+json",
    "application/strategic-merge-patch+json",
)


def _operation(kind: Kind, action: str, schema: str, sub: str = "") -> dict[str, Any]:
    gvk = {"group": kind.group, "version": kind.version, "kind": kind.kind}
    what = f"{kind.kind}{sub.title()}"
    responses = {"200": {"description": "OK", "content": {t: {"schema": _ref(schema)} for t in _BODY_TYPES}}}
    op: dict[str, Any] = {
        "operationId": f"{action}{what}",
        "x-kubernetes-action": action,
        "x-kubernetes-group-version-kind": gvk,
        "responses": responses,
    }
    if action == "list":
        op["parameters"] = _query("labelSelector", "fieldSelector", "limit", "continue", "resourceVersion", "timeoutSeconds", "watch")
        op["responses"] = {"200": {"description": "OK", "content": {"application/json": {"schema": {"type": "object"}}}}}
    elif action in ("post", "put"):
        op["parameters"] = _query("dryRun", "fieldManager", "fieldValidation")
        op["requestBody"] = {"content": {"*/*": {"schema": _ref(schema)}}, "required": True}
        if action == "post":
            op["responses"]["201"] = {"description": "Created", "content": responses["200"]["content"]}
    elif action == "patch":
        op["parameters"] = _query("dryRun", "fieldManager", "fieldValidation", "force")
        op["requestBody"] = {"content": {t: {"schema": _ref(_META + "Patch")} for t in _PATCH_TYPES}, "required": True}
    elif action == "delete":
        op["parameters"] = _query("dryRun")
        op["requestBody"] = {"content": {"*/*": {"schema": _ref(_META + "DeleteOptions")}}}
    return op


def _paths(kind: Kind) -> dict[str, Any]:
    schema = schema_name(kind)
    base = f"/{group_version_path(kind.group, kind.version)}"
    named = [{"name": "name", "in": "path", "required": True, "schema": {"type": "string", "uniqueItems": True}}]
    if kind.namespaced:
        ns = [{"name": "namespace", "in": "path", "required": True, "schema": {"type": "string", "uniqueItems": True}}]
        collection = f"{base}/namespaces/{{namespace}}/{kind.plural}"
        paths: dict[str, Any] = {f"{base}/{kind.plural}": {"get": _operation(kind, "list", schema)}}
    else:
        ns = []
        collection = f"{base}/{kind.plural}"
        paths = {}
    paths[collection] = {"get": _operation(kind, "list", schema), "post": _operation(kind, "post", schema), "parameters": ns}
    paths[f"{collection}/{{name}}"] = {
        action: _operation(kind, action, schema) for action in ("get", "put", "patch", "delete")
    } | {"parameters": named + ns}
    if kind.has_status:
        paths[f"{collection}/{{name}}/status"] = {
            action: _operation(kind, action, schema, "status") for action in ("get", "put", "patch")
        } | {"parameters": named + ns}
    return paths


@cache
def _group_version_document(group: str, version: str) -> bytes:
    paths: dict[str, Any] = {}
    for kind in KINDS.values():
        if (kind.group, kind.version) == (group, version):
            paths.update(_paths(kind))
    doc = {
        "openapi": "3.0.0",
        "info": {"title": "Kubernetes", "version": _VERSION},
        "paths": paths,
        "components": {"schemas": _schemas(group, version)},
    }
    return json.dumps(doc, separators=(",", ":")).encode()


@lru_cache(maxsize=1)
def _root() -> bytes:
    paths = {}
    for group, version in sorted({(k.group, k.version) for k in KINDS.values()}):
        key = group_version_path(group, version)
        digest = hashlib.sha512(_group_version_document(group, version)).hexdigest().upper()
        paths[key] = {"serverRelativeURL": f"/openapi/v3/{key}?hash={digest}"}
    return json.dumps({"paths": paths}).encode()


def document(path: str) -> bytes | None:
    """The JSON of ``/openapi/v3`` or ``/openapi/v3/<group-version>`` (path without slashes at
    either end), or None for any other path."""
    if path == "openapi/v3":
        return _root()
    for group, version in {(k.group, k.version) for k in KINDS.values()}:
        if path == f"openapi/v3/{group_version_path(group, version)}":
            return _group_version_document(group, version)
    return None


# --- strict decoding ---------------------------------------------------------------------------------


def _resolve(schema: dict[str, Any], schemas: dict[str, Any]) -> dict[str, Any]:
    while True:
        if "$ref" in schema:
            schema = schemas[schema["$ref"].removeprefix(_REF)]
        elif len(schema.get("allOf", ())) == 1:
            schema = schema["allOf"][0]
        else:
            return schema


#: A schema as the walk needs it: (properties, additionalProperties, items, leaf keys), each a
#: ``_Node`` or None when there is nothing below to check; None for a leaf (a scalar, a free-form
#: object). Leaf keys: the properties when none of them has anything below (checked in place).
_Node = tuple[dict[str, Any] | None, Any, Any, frozenset[str] | None] | None
_UNSET: Final = object()


def _node(schema: dict[str, Any], schemas: dict[str, Any], memo: dict[int, _Node]) -> _Node:
    schema = _resolve(schema, schemas)
    key = id(schema)
    if key in memo:
        return memo[key]
    memo[key] = None  # a schema that contains itself is checked one level deep
    props, extra, items = schema.get("properties"), schema.get("additionalProperties"), schema.get("items")
    node: _Node = None
    if props is not None or isinstance(extra, dict) or isinstance(items, dict):
        children = {k: _node(v, schemas, memo) for k, v in props.items()} if props is not None else None
        leaves = frozenset(children) if children is not None and all(c is None for c in children.values()) else None
        node = (
            children,
            _node(extra, schemas, memo) if isinstance(extra, dict) else None,
            _node(items, schemas, memo) if isinstance(items, dict) else None,
            leaves,
        )
    memo[key] = node
    return node


@cache
def _kind_node(kind: Kind) -> _Node:
    schemas = _schemas(kind.group, kind.version)
    return _node({"$ref": _REF + schema_name(kind)}, schemas, {})


def _path(trail: list[Any]) -> str:
    out = ""
    for part in trail:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out


def _walk(value: Any, node: _Node, trail: list[Any], drop: bool | None, out: list[str]) -> None:
    """Unknown fields of ``value`` into ``out``; ``drop``: remove them too (None: remove them, and
    pass over ``$`` directives)."""
    if node is None:
        return
    props, extra, items, _ = node
    if isinstance(value, dict):
        for key in list(value) if props is not None else value:
            sub = props.get(key, _UNSET) if props is not None else extra
            if sub is _UNSET:
                if drop is None and str(key).startswith("$"):
                    continue  # a strategic merge patch's directive
                out.append(_path([*trail, key]))
                if drop is not False:
                    del value[key]
            elif sub is not None:
                child = value[key]
                if sub[3] is not None and isinstance(child, dict) and child.keys() <= sub[3]:
                    continue  # every key of a flat object known: nothing below to see
                trail.append(key)
                _walk(child, sub, trail, drop, out)
                trail.pop()
    elif isinstance(value, list) and items is not None:
        for i, item in enumerate(value):
            trail.append(i)
            _walk(item, items, trail, drop, out)
            trail.pop()


def unknown_fields(kind: Kind, obj: Any) -> list[str]:
    """The fields of ``obj`` that ``kind``'s schema does not declare, in document order, written
    as the real server's strict decoding writes them (``spec.devices[0].attributes.DOMAIN/ID.x``)."""
    out: list[str] = []
    _walk(obj, _kind_node(kind), [], False, out)
    return out


def strict_decoding_error(kind: Kind, unknown: list[str]) -> ApiError:
    """The real server's refusal of fields its schema lacks (``fieldValidation=Strict``)."""
    fields = ", ".join(f"unknown field {json.dumps(f)}" for f in unknown)
    return ApiError.bad_request(
        f'{kind.kind} in version "{kind.version}" cannot be handled as a {kind.kind}: strict decoding error: {fields}'
    )


def drop_unknown_fields(kind: Kind, obj: Any, *, strategic: bool = False) -> list[str]:
    """Remove the unknown fields from ``obj`` (in place), as decoding into the typed object does;
    returns them. ``strategic``: ``obj`` is a strategic merge patch, whose ``$`` directives stay."""
    out: list[str] = []
    _walk(obj, _kind_node(kind), [], None if strategic else True, out)
    return out


def strategic_patch(kind: Kind, current: Any, patch: Any) -> Any:
    """``current`` with the strategic merge ``patch`` applied, by ``kind``'s schema."""
    from topodra.embedded.strategic import strategic_merge

    schemas = _schemas(kind.group, kind.version)

    def field(schema: dict[str, Any] | None, name: str) -> dict[str, Any] | None:
        if schema is None:
            return None
        if name == "[]":
            items = schema.get("items")
            return _resolve(items, schemas) if isinstance(items, dict) else None
        sub = (schema.get("properties") or {}).get(name, schema.get("additionalProperties"))
        return _resolve(sub, schemas) if isinstance(sub, dict) else None

    return strategic_merge(current, patch, _resolve({"$ref": _REF + schema_name(kind)}, schemas), field)
