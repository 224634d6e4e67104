"""The API server double copies what it stores, returns and sends (``store._copy``): equal
values, no shared containers, so a caller mutating what it got never changes the server's state."""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from topodra.embedded.store import KINDS, Store, _copy

JSON = st.recursive(
    st.none() | st.booleans() | st.integers(min_value=-(2**70), max_value=2**70) | st.floats(allow_nan=False) | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=6), inner, max_size=4),
    max_leaves=30,
)


def _containers(value: Any) -> list[Any]:
    out: list[Any] = []
    if isinstance(value, dict):
        out.append(value)
        for v in value.values():
            out += _containers(v)
    elif isinstance(value, list):
        out.append(value)
        for v in value:
            out += _containers(v)
    return out


@given(JSON)
@settings(max_examples=200)
def test_a_copy_is_equal_of_the_same_types_and_shares_no_container(value: Any) -> None:
    copied = _copy(value)
    assert copied == value
    assert repr(copied) == repr(value)  # same types (True is not 1), same key order
    originals = {id(c) for c in _containers(value)}
    assert not originals & {id(c) for c in _containers(copied)}


def test_a_value_marshal_cannot_write_is_still_copied() -> None:
    class Opaque:
        def __init__(self) -> None:
            self.items = [1]

    value = {"a": Opaque()}
    copied = _copy(value)
    assert copied["a"] is not value["a"]
    assert copied["a"].items == [1]
    assert copied["a"].items is not value["a"].items


def test_mutating_what_the_store_took_or_gave_leaves_its_state() -> None:
    store = Store()
    nodes = KINDS[("", "nodes")]
    body: dict[str, Any] = {"apiVersion": "v1", "kind": "Node", "metadata": {"name": "n", "labels": {"a": "1"}}}
    got = store.create(nodes, None, body)
    body["metadata"]["labels"]["a"] = "changed by the caller"
    got["metadata"]["labels"]["a"] = "changed by the reader"
    assert store.get(nodes, None, "n")["metadata"]["labels"] == {"a": "1"}
