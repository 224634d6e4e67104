"""Strategic merge patch, as kubectl's client-side apply sends it (pure; no store, no HTTP).

Written from apimachinery's ``strategicpatch`` (``staging/src/k8s.io/apimachinery/pkg/util/
strategicpatch/patch.go``, Kubernetes v1.36.2): maps merge key by key and ``null`` deletes a key;
a list whose schema says ``x-kubernetes-patch-strategy: merge`` merges its elements by
``x-kubernetes-patch-merge-key`` (objects) or by value (scalars), any other list is replaced.
Directives: ``$patch: replace|delete`` (in a map or a list element), ``$retainKeys``,
``$setElementOrder/FIELD`` and ``$deleteFromPrimitiveList/FIELD``. The schemas are the ones
``openapi.py`` serves.
"""

from __future__ import annotations

import copy
from typing import Any, Final

from topodra.kube.errors import ApiError

__all__ = ["strategic_merge"]

_ORDER: Final = "$setElementOrder/"
_DELETE_FROM: Final = "$deleteFromPrimitiveList/"
Schema = dict[str, Any]
Lookup = Any  # Callable[[Schema | None, str], Schema | None]: a property's schema, resolved


def strategic_merge(current: Any, patch: Any, schema: Schema | None, field: Lookup) -> Any:
    """``patch`` applied to ``current`` (neither is changed). ``field(schema, name)`` gives the
    resolved schema of property ``name`` (None when unknown: its lists are replaced)."""
    if not isinstance(patch, dict):
        raise ApiError.bad_request("a strategic merge patch must be a JSON object")
    return _merge_map(copy.deepcopy(current) if isinstance(current, dict) else {}, patch, schema, field)


def _merge_map(target: dict[str, Any], patch: dict[str, Any], schema: Schema | None, field: Lookup) -> Any:
    directive = patch.get("$patch")
    if directive == "delete":
        return None
    if directive == "replace":
        return {k: copy.deepcopy(v) for k, v in patch.items() if k != "$patch"}
    if directive is not None:
        raise ApiError.bad_request(f"Unknown patch type: {directive}")
    for key, value in patch.items():
        if key in ("$patch", "$retainKeys") or key.startswith(_ORDER):
            continue
        if key.startswith(_DELETE_FROM):
            name = key.removeprefix(_DELETE_FROM)
            if isinstance(target.get(name), list) and isinstance(value, list):
                target[name] = [x for x in target[name] if x not in value]
            continue
        sub = field(schema, key)
        if value is None:
            target.pop(key, None)
        elif isinstance(value, dict):
            merged = _merge_map(target[key] if isinstance(target.get(key), dict) else {}, value, sub, field)
            if merged is None:
                target.pop(key, None)
            else:
                target[key] = merged
        elif isinstance(value, list):
            target[key] = _merge_list(target.get(key), value, sub, field)
        else:
            target[key] = copy.deepcopy(value)
    for key, order in patch.items():
        if key.startswith(_ORDER) and isinstance(order, list) and isinstance(target.get(key.removeprefix(_ORDER)), list):
            name = key.removeprefix(_ORDER)
            target[name] = _ordered(target[name], order, (field(schema, name) or {}).get("x-kubernetes-patch-merge-key"))
    retain = patch.get("$retainKeys")
    if isinstance(retain, list):
        for key in [k for k in target if k not in retain]:
            del target[key]
    return target


def _merge_list(current: Any, patch: list[Any], schema: Schema | None, field: Lookup) -> list[Any]:
    strategy = (schema or {}).get("x-kubernetes-patch-strategy", "")
    if "merge" not in strategy.split(",") or any(isinstance(x, dict) and x.get("$patch") == "replace" for x in patch):
        return [copy.deepcopy(x) for x in patch if not (isinstance(x, dict) and x.get("$patch") == "replace")]
    have = list(current) if isinstance(current, list) else []
    key = (schema or {}).get("x-kubernetes-patch-merge-key")
    if key is None:  # a set of scalars: the union, in order
        return have + [copy.deepcopy(x) for x in patch if x not in have]
    items = field(schema, "[]")
    for element in patch:
        if not isinstance(element, dict) or key not in element:
            raise ApiError.bad_request(f"map: {element!r} does not contain declared merge key: {key}")
        at = next((i for i, x in enumerate(have) if isinstance(x, dict) and x.get(key) == element[key]), None)
        if element.get("$patch") == "delete":
            if at is not None:
                del have[at]
        elif at is None:
            have.append({k: copy.deepcopy(v) for k, v in element.items() if not k.startswith("$")})
        else:
            have[at] = _merge_map(have[at], element, items, field)
    return have


def _ordered(items: list[Any], order: list[Any], key: str | None) -> list[Any]:
    """``items`` in the order ``$setElementOrder`` gives; items it does not name keep their place after."""
    def ident(x: Any) -> Any:
        return x.get(key) if key is not None and isinstance(x, dict) else x

    wanted = [ident(x) for x in order]
    rank = {repr(v): i for i, v in enumerate(wanted)}
    return sorted(items, key=lambda x: rank.get(repr(ident(x)), len(wanted)))
