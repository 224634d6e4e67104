"""Python objects straight from a YAML parser's events, as PyYAML's ``SafeLoader`` constructs them.

``yaml.safe_load`` first composes a tree of nodes, each with two position marks, then constructs
the objects from the tree in Python: for a file of tens of megabytes the tree is most of the time
and of the memory. ``Builder`` reads the events of libyaml's parser (``yaml.CSafeLoader``, or
PyYAML's own parser where libyaml is missing) and builds every value as its events arrive, so a
caller can take one value at a time (``yamldocs`` hands out a ``kind: List``'s items that way)
and nothing of a value is kept once it is built.

The objects are SafeLoader's: plain scalars are resolved and constructed by SafeLoader's own
resolver and constructors (ints, floats, booleans, nulls, timestamps), explicit tags go to its
constructors (``!!str``, ``!!binary``, ``!!set``, ``!!omap``, ...), anchors and aliases share
one object, merge keys (``<<``) merge as ``SafeConstructor.flatten_mapping`` does, and a bad
input raises the ``yaml.MarkedYAMLError`` SafeLoader raises, with the mark of the event at fault.
A constructor's own ``ValueError`` (``!!int abc``) becomes such an error too.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import yaml
from yaml.composer import ComposerError
from yaml.constructor import ConstructorError
from yaml.events import (
    AliasEvent,
    MappingEndEvent,
    MappingStartEvent,
    ScalarEvent,
    SequenceEndEvent,
    SequenceStartEvent,
)
from yaml.nodes import MappingNode, Node, ScalarNode, SequenceNode

__all__ = ["Builder", "loader_for"]

_STR = "tag:yaml.org,2002:str"
_MAP = "tag:yaml.org,2002:map"
_SEQ = "tag:yaml.org,2002:seq"
_SET = "tag:yaml.org,2002:set"
_MERGE = "tag:yaml.org,2002:merge"
_VALUE = "tag:yaml.org,2002:value"
_PAIRS_TAGS = {"tag:yaml.org,2002:omap": "while constructing an ordered map", "tag:yaml.org,2002:pairs": "while constructing pairs"}


class _Key:
    """A mapping key that is not a value: ``<<`` (merge) or ``=`` (value), by their resolved tag."""

    def __init__(self, tag: str) -> None:
        self.tag = tag


_MERGE_KEY = _Key(_MERGE)
_VALUE_KEY = _Key(_VALUE)


def loader_for(text: str) -> Any:
    """SafeLoader's parser, resolver and constructors over ``text``: libyaml's when installed."""
    cls = getattr(yaml, "CSafeLoader", None) or yaml.SafeLoader
    return cls(text)


def _kind(value: Any) -> str:
    """What node a built value came from, in PyYAML's words (``Node.id``)."""
    return "mapping" if isinstance(value, dict | set) else "sequence" if isinstance(value, list) else "scalar"


class Builder:
    """Values from the events of ``loader`` (see :func:`loader_for`), one node at a time."""

    def __init__(self, loader: Any) -> None:
        self.loader = loader
        self.event = loader.get_event
        self.peek = loader.peek_event
        self._anchors: dict[str, tuple[Any, Any]] = {}  # anchor -> (value, mark of its node)
        self._plain: dict[str, Any] = {}  # resolved plain scalars (immutable values only)
        self._first = frozenset(k for k in loader.yaml_implicit_resolvers if k)  # first characters a plain scalar may resolve on
        self._resolve_empty = "" in loader.yaml_implicit_resolvers

    def end_document(self) -> None:
        """Anchors live for one document (PyYAML's composer forgets them at its end)."""
        self._anchors.clear()
        if len(self._plain) > 100_000:
            self._plain.clear()

    def mark_of(self, ev: Any) -> Any:
        """Where the node an event starts was written (an alias: where its anchor was)."""
        if type(ev) is AliasEvent and ev.anchor in self._anchors:
            return self._anchors[ev.anchor][1]
        return ev.start_mark

    # ---- values
    def build(self, ev: Any) -> Any:
        """The value of the node that ``ev`` (just taken from the parser) starts."""
        t = type(ev)
        if t is ScalarEvent:
            value = self._scalar(ev)
            if isinstance(value, _Key):
                raise ConstructorError(None, None, f"could not determine a constructor for the tag {value.tag!r}", ev.start_mark)
            return value
        if t is MappingStartEvent:
            return self._mapping(ev)
        if t is SequenceStartEvent:
            return self._sequence(ev)
        if t is AliasEvent:
            if ev.anchor not in self._anchors:
                raise ComposerError(None, None, f"found undefined alias {ev.anchor!r}", ev.start_mark)
            value = self._anchors[ev.anchor][0]
            if isinstance(value, _Key):
                raise ConstructorError(None, None, f"could not determine a constructor for the tag {value.tag!r}", self._anchors[ev.anchor][1])
            return value
        raise ComposerError(None, None, f"expected a node, found {type(ev).__name__}", ev.start_mark)  # pragma: no cover - the parser orders events

    def _anchor(self, ev: Any, value: Any) -> None:
        anchor = ev.anchor
        if anchor in self._anchors:
            raise ComposerError(f"found duplicate anchor {anchor!r}; first occurrence", self._anchors[anchor][1], "second occurrence", ev.start_mark)
        self._anchors[anchor] = (value, ev.start_mark)

    def _scalar(self, ev: Any) -> Any:
        tag, value = ev.tag, ev.value
        if tag is None or tag == "!":
            if not ev.implicit[0] or (value[:1] not in self._first and (value or not self._resolve_empty)):
                result: Any = value
            else:
                result = self._plain.get(value, _MISSING)
                if result is _MISSING:
                    result = self._resolved(ev)
        else:
            result = self._tagged_scalar(ev, tag)
        if ev.anchor is not None:
            self._anchor(ev, result)
        return result

    def _resolved(self, ev: Any) -> Any:
        tag = self.loader.resolve(ScalarNode, ev.value, (True, False))
        if tag == _STR:
            result = ev.value
        elif tag in (_MERGE, _VALUE):
            return _MERGE_KEY if tag == _MERGE else _VALUE_KEY
        else:
            result = self._construct(ScalarNode(tag, ev.value, ev.start_mark, ev.end_mark, ev.style))
        self._plain[ev.value] = result
        return result

    def _tagged_scalar(self, ev: Any, tag: str) -> Any:
        if tag in (_MERGE, _VALUE):
            return _MERGE_KEY if tag == _MERGE else _VALUE_KEY
        return self._construct(ScalarNode(tag, ev.value, ev.start_mark, ev.end_mark, ev.style))

    def _construct(self, node: Node) -> Any:
        """SafeConstructor's value for one node (scalars, and collections with a tag it refuses)."""
        try:
            return self.loader.construct_document(node)
        except yaml.YAMLError:
            raise
        except (ValueError, TypeError, ArithmeticError) as e:  # SafeConstructor lets some through: !!int abc
            raise ConstructorError(None, None, f"cannot construct {node.tag}: {e}", node.start_mark) from None

    def _sequence(self, start: Any) -> Any:
        tag = start.tag
        if tag is not None and tag != "!" and tag != _SEQ:
            return self._tagged_sequence(start, tag)
        data: list[Any] = []
        if start.anchor is not None:
            self._anchor(start, data)
        get, append, first = self.event, data.append, self._first
        while True:
            ev = get()
            t = type(ev)
            if t is ScalarEvent and ev.anchor is None and ev.tag is None and (not ev.implicit[0] or (ev.value[:1] not in first and ev.value)):
                append(ev.value)
            elif t is SequenceEndEvent:
                return data
            else:
                append(self.build(ev))

    def _mapping(self, start: Any) -> Any:
        tag = start.tag
        if tag is not None and tag != "!" and tag != _MAP:
            return self._tagged_mapping(start, tag)
        data: dict[Any, Any] = {}
        if start.anchor is not None:
            self._anchor(start, data)
        self._fill(start, data)
        return data

    def _fill(self, start: Any, data: dict[Any, Any]) -> None:
        get, first = self.event, self._first
        merges: list[tuple[Any, Any]] | None = None
        while True:
            kev = get()
            t = type(kev)
            if t is ScalarEvent and kev.anchor is None and kev.tag is None and (not kev.implicit[0] or (kev.value[:1] not in first and kev.value)):
                key = kev.value
            elif t is MappingEndEvent:
                break
            else:
                key = self.key(start, kev)
                if key is _MERGE_KEY:
                    merges = merges or []
                    merges.append(self._merge_source(get()))
                    continue
            ev = get()
            if type(ev) is ScalarEvent and ev.anchor is None and ev.tag is None and (not ev.implicit[0] or (ev.value[:1] not in first and ev.value)):
                data[key] = ev.value
            else:
                data[key] = self.build(ev)
        if merges:
            self._merge(start, data, merges)

    def entries(self, start: Any, data: dict[Any, Any]) -> Iterator[tuple[Any, Any, Any]]:
        """The pairs of the mapping ``start`` opened, for a caller that builds (or streams) each
        value itself: yields (key, the key's event, the value's first event); ``data`` is the
        mapping being filled (merge keys are applied to it at the end, as in every other mapping)."""
        if start.anchor is not None:
            self._anchor(start, data)
        merges: list[tuple[Any, Any]] = []
        while type(kev := self.event()) is not MappingEndEvent:
            key = self.key(start, kev)
            if key is _MERGE_KEY:
                merges.append(self._merge_source(self.event()))
            else:
                yield key, kev, self.event()
        if merges:
            self._merge(start, data, merges)

    def key(self, start: Any, kev: Any) -> Any:
        """A mapping key (``<<`` comes back as the merge marker); an unhashable key is an error."""
        key = self._scalar(kev) if type(kev) is ScalarEvent else self.build(kev)
        if key is _VALUE_KEY:
            return "="
        try:
            hash(key)
        except TypeError:
            raise ConstructorError("while constructing a mapping", start.start_mark, "found unhashable key", self.mark_of(kev)) from None
        return key

    # ---- merge keys (SafeConstructor.flatten_mapping)
    def _merge_source(self, ev: Any) -> tuple[Any, Any]:
        """A ``<<`` value: (a mapping, or a list of (mapping, mark) for a sequence, its mark)."""
        mark = self.mark_of(ev)
        if type(ev) is SequenceStartEvent and ev.anchor is None and ev.tag in (None, "!", _SEQ):
            items = []
            while type(sub := self.event()) is not SequenceEndEvent:
                items.append((self.build(sub), self.mark_of(sub)))
            return items, mark
        value = self.build(ev)
        if isinstance(value, list):
            return [(v, mark) for v in value], mark
        return value, mark

    def _merge(self, start: Any, data: dict[Any, Any], merges: list[tuple[Any, Any]]) -> None:
        """Merged keys first, in the order of their mappings, the first mapping with a key giving
        its value (PyYAML 6.0.4's ``flatten_mapping``); the mapping's own keys override them."""
        merged: dict[Any, Any] = {}
        for value, mark in merges:
            if isinstance(value, dict):
                sources = [value]
            elif isinstance(value, list):
                for sub, submark in value:
                    if not isinstance(sub, dict):
                        raise ConstructorError("while constructing a mapping", start.start_mark, f"expected a mapping for merging, but found {_kind(sub)}", submark)
                sources = [sub for sub, _ in value]
            else:
                raise ConstructorError("while constructing a mapping", start.start_mark, f"expected a mapping or list of mappings for merging, but found {_kind(value)}", mark)
            for sub in sources:
                for k, v in sub.items():
                    merged.setdefault(k, v)
        merged.update(data)
        data.clear()
        data.update(merged)

    # ---- collections with an explicit tag
    def _tagged_mapping(self, start: Any, tag: str) -> Any:
        if tag != _SET:
            return self._refused(start, MappingNode(tag, [], start.start_mark, start.end_mark, start.flow_style))
        data: set[Any] = set()
        if start.anchor is not None:
            self._anchor(start, data)
        keys: dict[Any, Any] = {}
        self._fill(start, keys)
        data.update(keys)
        return data

    def _tagged_sequence(self, start: Any, tag: str) -> Any:
        if tag not in _PAIRS_TAGS:
            return self._refused(start, SequenceNode(tag, [], start.start_mark, start.end_mark, start.flow_style))
        data: list[Any] = []
        if start.anchor is not None:
            self._anchor(start, data)
        while type(ev := self.event()) is not SequenceEndEvent:
            mark, sub = self.mark_of(ev), self.build(ev)
            if not isinstance(sub, dict):
                raise ConstructorError(_PAIRS_TAGS[tag], start.start_mark, f"expected a mapping of length 1, but found {_kind(sub)}", mark)
            if len(sub) != 1:
                raise ConstructorError(_PAIRS_TAGS[tag], start.start_mark, f"expected a single mapping item, but found {len(sub)} items", mark)
            data.append(next(iter(sub.items())))
        return data

    def _refused(self, start: Any, node: Node) -> Any:
        """A collection under a tag SafeConstructor does not build from that kind of node: its error."""
        self._construct(node)
        raise ConstructorError(None, None, f"could not determine a constructor for the tag {node.tag!r}", start.start_mark)  # pragma: no cover


_MISSING = object()
