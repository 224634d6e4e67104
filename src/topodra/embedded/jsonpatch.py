"""JSON patch (RFC 6902, ``application/json-patch+json``) as kube-apiserver 1.36 applies it.

The server decodes the body with ``jsonpatch.DecodePatch`` and applies it with
``gopkg.in/evanphx/json-patch.v4`` (``apiserver/pkg/endpoints/handlers/patch.go``, v1.36.2), whose
rules differ from the RFC in places this module keeps:

- negative array indexes count from the end (``SupportNegativeIndices``);
- ``replace`` of a missing object member adds it (only an array index must exist);
- ``test`` of a missing object member holds when the operation has no ``value``;
- ``copy`` may add at most 3 MiB in all (the server's ``JSONPatchMaxCopyBytes``);
- at most 10,000 operations (413), checked by the server before applying.

A body that does not decode is a 400 in Go's ``encoding/json`` words; an operation that does not
apply is a 422 whose message is the generic "the server rejected our request due to an error in
our request" (the library's own error is not returned), which :class:`JsonPatchError` carries for
the logs and the tests. Pure functions over JSON-shaped data; the document is not modified.
"""

from __future__ import annotations

import copy
import json
from typing import Any, Final

__all__ = ["MAX_OPERATIONS", "JsonPatchError", "apply_patch", "decode_patch"]

MAX_OPERATIONS: Final = 10_000
COPY_LIMIT: Final = 3 * 1024 * 1024

Doc = dict[str, Any] | list[Any]


class JsonPatchError(ValueError):
    """An operation that does not apply, in the library's words."""


def _go_json_type(value: Any) -> str:
    """The JSON type word of Go's ``UnmarshalTypeError`` ("object", "number"...)."""
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, (int, float)):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        return "array"
    return "object" if isinstance(value, dict) else "value"


def decode_patch(body: Any) -> list[dict[str, Any]]:
    """The operations of a decoded JSON body; ``ValueError`` with ``json.Unmarshal``'s words
    when it is not a list of objects (``null`` is no operation, as in Go)."""
    if body is None:
        return []
    if not isinstance(body, list):
        raise ValueError(f"json: cannot unmarshal {_go_json_type(body)} into Go value of type jsonpatch.Patch")
    for op in body:
        if op is not None and not isinstance(op, dict):
            raise ValueError(f"json: cannot unmarshal {_go_json_type(op)} into Go value of type jsonpatch.Operation")
    return [op or {} for op in body]


def apply_patch(doc: Doc, operations: list[dict[str, Any]]) -> Doc:
    """``doc`` with every operation applied in order; ``JsonPatchError`` at the first that fails."""
    state = _State(copy.deepcopy(doc))
    for op in operations:
        named = op.get("op")
        kind = named if isinstance(named, str) else "unknown"
        step = _STEPS.get(kind)
        if step is None:
            raise JsonPatchError(f"Unexpected kind: {kind}")
        step(state, op)
    return state.doc


class _State:
    def __init__(self, doc: Doc) -> None:
        self.doc = doc
        self.copied = 0


def _pointer(op: dict[str, Any], field: str, what: str) -> str:
    value = op.get(field)
    if value is None:
        raise JsonPatchError(f"{what} failed to decode {field}: missing value")
    if not isinstance(value, str):
        raise JsonPatchError(f"{what} failed to decode {field}: json: cannot unmarshal {_go_json_type(value)} into Go value of type string")
    return value


def _unescape(token: str) -> str:
    return token.replace("~1", "/").replace("~0", "~")


def _index(container: list[Any], key: str, *, extra: int = 0) -> int:
    """An array index as the library reads it: an integer, negative from the end; ``extra`` 1
    where one past the end is allowed (add). ``JsonPatchError`` when out of range."""
    try:
        idx = int(key, 10)
    except ValueError:
        raise JsonPatchError(f'strconv.Atoi: parsing "{key}": invalid syntax') from None
    size = len(container) + extra
    if idx >= size or idx < -size:
        raise JsonPatchError(f"Unable to access invalid index: {idx}: invalid index referenced")
    return idx + size if idx < 0 else idx


def _parent(doc: Doc, path: str) -> tuple[Doc, str] | None:
    """``findObject``: the container the last token of ``path`` is in, and that token; None when
    the path has no token or a step on the way is missing or not a container."""
    tokens = path.split("/")
    if len(tokens) < 2:
        return None
    here: Any = doc
    for token in tokens[1:-1]:
        key = _unescape(token)
        if isinstance(here, dict):
            here = here.get(key)
        else:
            try:
                here = here[_index(here, key)]
            except JsonPatchError:
                return None
        if not isinstance(here, (dict, list)):
            return None
    return here, _unescape(tokens[-1])


def _get(container: Doc, key: str) -> tuple[bool, Any]:
    """(found, value): a missing object member is (False, None); an array index out of range fails."""
    if isinstance(container, dict):
        return key in container, container.get(key)
    return True, container[_index(container, key)]


def _add(container: Doc, key: str, value: Any) -> None:
    if isinstance(container, dict):
        container[key] = value
    elif key == "-":
        container.append(value)
    else:
        try:
            int(key, 10)
        except ValueError:
            raise JsonPatchError(f"value was not a proper array index: '{key}': strconv.Atoi: parsing \"{key}\": invalid syntax") from None
        container.insert(_index(container, key, extra=1), value)


def _remove(container: Doc, key: str) -> Any:
    if isinstance(container, dict):
        if key not in container:
            raise JsonPatchError(f"Unable to remove nonexistent key: {key}: missing value")
        return container.pop(key)
    return container.pop(_index(container, key))


def _found(state: _State, op: dict[str, Any], field: str, what: str, missing: str) -> tuple[Doc, str]:
    path = _pointer(op, field, what)
    found = _parent(state.doc, path)
    if found is None:
        raise JsonPatchError(f"{what} does not apply: {missing}: {path}: missing value")
    return found


def _op_add(state: _State, op: dict[str, Any]) -> None:
    container, key = _found(state, op, "path", "add operation", "doc is missing path")
    _add(container, key, copy.deepcopy(op.get("value")))


def _op_remove(state: _State, op: dict[str, Any]) -> None:
    container, key = _found(state, op, "path", "remove operation", "doc is missing path")
    _remove(container, key)


def _op_replace(state: _State, op: dict[str, Any]) -> None:
    path = _pointer(op, "path", "replace operation")
    value = copy.deepcopy(op.get("value"))
    if path == "":
        if not isinstance(value, (dict, list)):
            raise JsonPatchError("replace operation value must be object or array")
        state.doc = value
        return
    container, key = _found(state, op, "path", "replace operation", "doc is missing path")
    try:
        _get(container, key)
    except JsonPatchError:
        raise JsonPatchError(f"replace operation does not apply: doc is missing key: {path}: missing value") from None
    if isinstance(container, dict):
        container[key] = value
    else:
        container[_index(container, key)] = value


def _op_move(state: _State, op: dict[str, Any]) -> None:
    container, key = _found(state, op, "from", "move operation", "doc is missing from path")
    value = _remove(container, key)
    target, key = _found(state, op, "path", "move operation", "doc is missing destination path")
    _add(target, key, value)


def _op_copy(state: _State, op: dict[str, Any]) -> None:
    container, key = _found(state, op, "from", "copy operation", "doc is missing from path")
    _, value = _get(container, key)
    target, key = _found(state, op, "path", "copy operation", "doc is missing destination path")
    state.copied += len(json.dumps(value, separators=(",", ":")))
    if state.copied > COPY_LIMIT:
        raise JsonPatchError(
            f"Unable to complete the copy, the accumulated size increase of copy is {state.copied}, exceeding the limit {COPY_LIMIT}"
        )
    _add(target, key, copy.deepcopy(value))


def _op_test(state: _State, op: dict[str, Any]) -> None:
    path = _pointer(op, "path", "test operation")
    if path == "":
        found, value = True, state.doc
    else:
        container, key = _found(state, op, "path", "test operation", "is missing path")
        found, value = _get(container, key)
    if not found:
        if "value" not in op:
            return
    elif "value" in op and _equal(value, op["value"]):
        return
    raise JsonPatchError(f"testing value {path} failed: test failed")


def _equal(a: Any, b: Any) -> bool:
    """JSON equality: a bool is not a number, 1 equals 1.0."""
    if isinstance(a, bool) or isinstance(b, bool):
        return type(a) is type(b) and a == b
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_equal(a[k], b[k]) for k in a)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(_equal(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, (int, float)) and isinstance(b, (int, float)):
        return float(a) == float(b)
    return type(a) is type(b) and a == b


_STEPS: Final = {"add": _op_add, "remove": _op_remove, "replace": _op_replace, "move": _op_move, "copy": _op_copy, "test": _op_test}
