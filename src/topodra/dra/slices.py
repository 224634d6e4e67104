"""ResourceSlices for one node: the pool of ``native.cpu`` devices, chunked by the API limits.

Pure: devices in, ResourceSlice JSON out. One pool per node (pool name = node
name, so device ids never collide across nodes, unlike the prototype's
``pool0``), slices named ``<node>-native.cpu-<index>`` so a re-publish
updates the same objects, every slice carrying the pool's generation and
slice count.

Writing: ``encode_slice`` joins each device's cached JSON instead of encoding the
whole slice again (the agent re-publishes after every exclusive grant, and only
the list of devices changes), and ``read_answer`` checks the server's answer
against what was sent device by device, comparing bytes first and decoding only
what differs, in steps between which the caller yields to its event loop.
"""

from __future__ import annotations

import hashlib
import json
import re
from bisect import bisect_left
from collections.abc import Generator, Iterator, Mapping, Sequence
from itertools import accumulate, islice, pairwise
from operator import attrgetter, lt
from typing import Any, Final, cast

from topodra.dra.attributes import is_dns_subdomain
from topodra.dra.devices import DRIVER, Device
from topodra.dra.partitions import counter_set_chunks, counter_sets

__all__ = [
    "MAX_DEVICES_PER_SLICE",
    "MAX_DEVICES_PER_SLICE_ADVANCED",
    "Homes",
    "build_slices",
    "check_pool",
    "iter_slices",
    "chunk_devices",
    "counter_slice_object",
    "owner_references",
    "slice_object",
    "encode_slice",
    "event_head",
    "read_answer",
    "same_spec",
    "slice_name",
    "stored_form",
]

MAX_DEVICES_PER_SLICE: Final = 128
_NAME: Final = attrgetter("name")
_ADVANCED: Final = attrgetter("uses_advanced_features")
#: Limit for a slice holding a device with taints, counters or list attributes.
MAX_DEVICES_PER_SLICE_ADVANCED: Final = 64
_MAX_NAME: Final = 253


def slice_name(node_name: str, index: int, driver: str = DRIVER) -> str:
    """Stable slice name; node names too long for the 253-character limit are shortened with a hash."""
    name = f"{node_name}-{driver}-{index}"
    if len(name) <= _MAX_NAME:
        return name
    digest = hashlib.sha256(node_name.encode()).hexdigest()[:10]
    tail = f"-{digest}-{driver}-{index}"
    head = node_name[: _MAX_NAME - len(tail)].rstrip(".-")
    return head + tail


def chunk_devices(devices: Sequence[Device]) -> list[list[Device]]:
    """Split devices into slices in order: 128 per slice, 64 in a slice holding an advanced device."""
    chunks: list[list[Device]] = []
    current: list[Device] = []
    advanced = False
    for device in devices:
        adv = advanced or device.uses_advanced_features
        limit = MAX_DEVICES_PER_SLICE_ADVANCED if adv else MAX_DEVICES_PER_SLICE
        if len(current) + 1 > limit:
            chunks.append(current)
            current, adv = [], device.uses_advanced_features
        current.append(device)
        advanced = adv
    if current or not chunks:
        chunks.append(current)
    return chunks


class Homes:
    """Each device's fixed slice: ``chunk_devices`` of the node's full device list (what it offers
    with nothing withdrawn).

    The agent withdraws a core's CPUs after every exclusive grant. Re-chunking the shorter list
    would shift every later device into another slice, so every write would change every slice
    (and bump the pool generation); placed in its home, a withdrawn device leaves a hole there
    and only its own slice changes. With nothing withdrawn ``place`` gives ``chunk_devices``'
    chunks, so the slices are the same as without homes.
    """

    __slots__ = ("_bounds", "_rank", "_where", "names")

    def __init__(self, devices: Sequence[Device]) -> None:
        #: the device names of each home slice, in slice order
        self.names: tuple[tuple[str, ...], ...] = tuple(tuple(d.name for d in c) for c in chunk_devices(devices))
        self._where: dict[str, tuple[int, int]] = {
            name: (i, j) for i, chunk in enumerate(self.names) for j, name in enumerate(chunk)
        }
        # Each device's place in the full list, and where each home slice starts in it: a list in
        # home order (the agent's offer, always) is cut at those places without a step per device.
        self._rank: dict[str, int] = {name: k for k, name in enumerate(n for chunk in self.names for n in chunk)}
        self._bounds: list[int] = list(accumulate((len(c) for c in self.names), initial=0))

    def __len__(self) -> int:
        return len(self.names)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Homes) and other.names == self.names

    __hash__ = None  # type: ignore[assignment]  # compared by value, not hashed

    def place(self, devices: Sequence[Device]) -> list[list[Device]] | None:
        """``devices`` (a subset of the homes' devices) in their home slices, each slice in the full
        list's order; None when they do not fit (a device without a home, one listed twice, a
        slice over its limit because a device turned advanced): the caller re-homes."""
        steps = self.placing(devices)
        while True:
            try:
                next(steps)
            except StopIteration as done:
                placed: list[list[Device]] | None = done.value
                return placed

    def placing(
        self, devices: Sequence[Device], *, step: int = 256
    ) -> Generator[None, None, list[list[Device]] | None]:
        """``place`` as a generator that pauses (yields) after every ``step`` devices looked up: a
        caller on an event loop lets other work run between the pieces."""
        listed = devices if isinstance(devices, list) else list(devices)
        ranks: list[int] = []
        for at in range(0, len(listed), step):
            if at:
                yield
            found = list(map(self._rank.get, map(_NAME, listed[at : at + step])))
            if None in found:
                return None  # a device without a home
            ranks += cast("list[int]", found)
        if len(listed) > step:
            yield  # the last lookups and the cuts below: two steps, not one
        if not all(map(lt, ranks, islice(ranks, 1, None))):
            return self._place_unordered(listed)  # out of home order, or a device listed twice
        # In home order, each device once (the agent's offer, always): every home slice is a run of
        # the list, cut where the next one starts (C loops: no Python step per device).
        cuts = [bisect_left(ranks, b) for b in self._bounds]
        chunks = [listed[a:b] for a, b in pairwise(cuts)]
        for chunk in chunks:
            if len(chunk) > MAX_DEVICES_PER_SLICE_ADVANCED and any(map(_ADVANCED, chunk)):
                return None
        return chunks

    def _place_unordered(self, devices: Sequence[Device]) -> list[list[Device]] | None:
        """``place`` one device at a time: a list out of home order is sorted into its homes."""
        where = self._where
        chunks: list[list[Device]] = [[] for _ in self.names]
        last = [-1] * len(self.names)
        ordered = True
        for d in devices:
            w = where.get(d.name)
            if w is None:
                return None
            i, j = w
            if j <= last[i]:
                if j == last[i]:
                    return None  # listed twice
                ordered = False
            last[i] = j
            chunks[i].append(d)
        for chunk in chunks:
            if not ordered:
                chunk.sort(key=lambda d: where[d.name][1])
                if any(where[a.name] == where[b.name] for a, b in pairwise(chunk)):
                    return None
            if len(chunk) > MAX_DEVICES_PER_SLICE_ADVANCED and any(d.uses_advanced_features for d in chunk):
                return None
        return chunks


def build_slices(
    node_name: str,
    devices: Sequence[Device],
    *,
    generation: int = 1,
    node_uid: str | None = None,
    driver: str = DRIVER,
    chunks: Sequence[Sequence[Device]] | None = None,
) -> list[dict[str, Any]]:
    """The ResourceSlice objects (resource.k8s.io/v1) publishing ``devices`` for ``node_name``
    (``chunks``: ``chunk_devices(devices)``, when the caller has it already).

    A node with no devices still gets one empty slice, so the pool exists and
    is complete. Raises ValueError for a bad node name, generation or
    duplicate device name.
    """
    return list(iter_slices(node_name, devices, generation=generation, node_uid=node_uid, driver=driver, chunks=chunks))


def iter_slices(
    node_name: str,
    devices: Sequence[Device],
    *,
    generation: int = 1,
    node_uid: str | None = None,
    driver: str = DRIVER,
    chunks: Sequence[Sequence[Device]] | None = None,
) -> Iterator[dict[str, Any]]:
    """``build_slices`` one slice at a time (checked before the first): a caller on an event
    loop lets other work run between slices (the whole pool in one step would hold it longest
    on the largest nodes)."""
    check_pool(node_name, devices, generation)
    if chunks is None:
        chunks = chunk_devices(devices)
    counters = counter_set_chunks(counter_sets(devices))
    return _slices(node_name, chunks, generation, owner_references(node_name, node_uid), driver, counters)


def check_pool(node_name: str, devices: Sequence[Device], generation: int) -> None:
    """ValueError for what ``build_slices`` refuses: a bad node name or generation, a device
    listed twice."""
    if not is_dns_subdomain(node_name):
        raise ValueError(f"node name {node_name!r} is not a DNS subdomain")
    if generation < 1:
        raise ValueError(f"pool generation must be positive, got {generation}")
    names = list(map(_NAME, devices))
    if len(set(names)) == len(names):
        return
    seen: set[str] = set()
    for name in names:
        if name in seen:
            raise ValueError(f"device name {name!r} appears twice in pool {node_name!r}")
        seen.add(name)


def owner_references(node_name: str, node_uid: str | None) -> list[dict[str, Any]]:
    """The slices' owner: their Node, when its UID is known."""
    if not node_uid:
        return []
    return [{"apiVersion": "v1", "kind": "Node", "name": node_name, "uid": node_uid, "controller": True}]


def slice_object(
    node_name: str,
    index: int,
    devices: list[dict[str, Any]],
    *,
    generation: int,
    slice_count: int,
    owner: Sequence[Mapping[str, Any]],
    driver: str = DRIVER,
) -> dict[str, Any]:
    """Slice ``index`` of the pool, listing ``devices`` (the devices' ``to_api()``, kept as given:
    a caller that rebuilds a pool passes the list it built for the same devices before)."""
    metadata: dict[str, Any] = {"name": slice_name(node_name, index, driver)}
    if owner:
        metadata["ownerReferences"] = [dict(o) for o in owner]
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceSlice",
        "metadata": metadata,
        "spec": {
            "driver": driver,
            "nodeName": node_name,
            "pool": {"name": node_name, "generation": generation, "resourceSliceCount": slice_count},
            "devices": devices,
        },
    }


def counter_slice_object(
    node_name: str,
    index: int,
    sets: Sequence[Mapping[str, Any]],
    *,
    generation: int,
    slice_count: int,
    owner: Sequence[Mapping[str, Any]],
    driver: str = DRIVER,
) -> dict[str, Any]:
    """Slice ``index`` of the pool, holding the counter sets ``sets`` and no device (1.36 allows
    ``sharedCounters`` only in a slice without ``devices``)."""
    obj = slice_object(
        node_name, index, [], generation=generation, slice_count=slice_count, owner=owner, driver=driver
    )
    spec = obj["spec"]
    del spec["devices"]
    spec["sharedCounters"] = [dict(s) for s in sets]
    return obj


def _slices(
    node_name: str,
    chunks: Sequence[Sequence[Device]],
    generation: int,
    owner: list[dict[str, Any]],
    driver: str,
    counters: Sequence[Sequence[Mapping[str, Any]]] = (),
) -> Iterator[dict[str, Any]]:
    """The device slices, then the counter slices (after them, so that a model with counters
    names its device slices as any other does)."""
    total = len(chunks) + len(counters)
    for index, chunk in enumerate(chunks):
        yield slice_object(
            node_name,
            index,
            [d.to_api() for d in chunk],
            generation=generation,
            slice_count=total,
            owner=owner,
            driver=driver,
        )
    for offset, sets in enumerate(counters):
        yield counter_slice_object(
            node_name, len(chunks) + offset, sets, generation=generation, slice_count=total, owner=owner, driver=driver
        )


_COMPACT: Final = (",", ":")
#: Stands for the device list while the rest of a slice is encoded: a NUL cannot be in any
#: field of a valid slice, so its encoding appears once, where the list goes.
_MARK: Final = "\x00devices\x00"
_MARK_JSON: Final = json.dumps(_MARK)


def encode_slice(obj: Mapping[str, Any], devices: Sequence[Device]) -> bytes:
    """``json.dumps(obj, separators=(",", ":"))`` as UTF-8, for a slice whose ``spec.devices`` is
    ``[d.to_api() for d in devices]`` (as ``build_slices`` makes it): the device list is joined
    from each device's cached encoding and only the fields around it are encoded."""
    spec = obj["spec"]
    if "devices" not in spec:  # a counter slice
        return json.dumps(obj, separators=_COMPACT).encode()
    listed = spec["devices"]
    if len(listed) != len(devices) or (devices and (listed[0]["name"], listed[-1]["name"]) != (devices[0].name, devices[-1].name)):
        raise ValueError("encode_slice: the slice does not list these devices")  # a cheap guard, not a proof
    shell = json.dumps({**obj, "spec": {**spec, "devices": _MARK}}, separators=_COMPACT)
    head, mark, tail = shell.partition(_MARK_JSON)
    if not mark or _MARK_JSON in tail:  # not a slice of ours (a NUL in a field): the plain way
        return json.dumps(obj, separators=_COMPACT).encode()
    return "".join((head, "[", ",".join([d.api_json for d in devices]), "]", tail)).encode()


_WS: Final = re.compile(r"[ \t\n\r]*")
_DECODER: Final = json.JSONDecoder()
_ABSENT: Final = object()
_BLANKS: Final = frozenset(" \t\n\r")


def _empty(value: Any) -> bool:
    return isinstance(value, (list, dict)) and not value


def stored_form(value: Any) -> Any:
    """``value`` as the API server stores it: members holding an empty list or map left out, at
    every depth. The resource.k8s.io types mark their lists and maps ``omitempty``, so an empty
    one and an absent one are the same (a slice offering no device is stored without ``devices``)."""
    if isinstance(value, dict):
        return {k: stored_form(v) for k, v in value.items() if not _empty(v)}
    if isinstance(value, list):
        return [stored_form(v) for v in value]
    return value


def _same_stored(value: Any, sent: Any) -> bool:
    """``value`` (decoded from an answer) is ``sent`` as the server stores it."""
    if value == sent:
        return True
    if sent is _ABSENT:
        return _empty(value)
    return bool(stored_form(value) == stored_form(sent))


def same_spec(a: Any, b: Any) -> bool:
    """Two slice specs are the same, a member holding an empty list or map being the same as an
    absent one. Only the top level is normalised (the spec's ``devices``, which the server drops
    when empty): our devices leave out their own empty members, and a deep copy of a 128-device
    spec costs milliseconds on every changed slice."""
    if a == b:
        return True
    if not isinstance(a, dict) or not isinstance(b, dict):
        return False
    return {k: v for k, v in a.items() if not _empty(v)} == {k: v for k, v in b.items() if not _empty(v)}


class _Differs(Exception):
    """The answer is not what was sent (or not a JSON object): the caller decodes it whole."""


def _skip(text: str, i: int) -> int:
    m = _WS.match(text, i)
    return m.end() if m else i


def _members(text: str, i: int) -> Generator[tuple[str, int], int, None]:
    """The members of the JSON object at ``text[i]``: yields (key, index of its value) and is sent
    the index after that value; returns with the object read."""
    i = _skip(text, i)
    if not text.startswith("{", i):
        raise _Differs
    i = _skip(text, i + 1)
    if text.startswith("}", i):
        return
    while True:
        key, i = _DECODER.raw_decode(text, i)
        i = _skip(text, i)
        if not isinstance(key, str) or not text.startswith(":", i):
            raise _Differs
        i = _skip(text, (yield key, _skip(text, i + 1)))
        if text.startswith(",", i):
            i = _skip(text, i + 1)
        elif text.startswith("}", i):
            return
        else:
            raise _Differs


def _devices_as_sent(
    text: str, i: int, sent: Sequence[Mapping[str, Any]], devices: Sequence[Device], step: int
) -> Generator[None, None, int]:
    """Reads the device list at ``text[i]``, equal to ``sent`` (bytes first, then decoded); a pause
    after every ``step`` devices. Returns the index after the list."""
    if not text.startswith("[", i):
        raise _Differs
    if devices and len(sent) == len(devices):
        # The whole list as sent, byte for byte, in one comparison (compact, or json.dumps'
        # default spacing: the first device says which): no step per device for the usual answer.
        first = devices[0]
        if text.startswith(first.api_json, i + 1):
            whole = "[" + ",".join([d.api_json for d in devices]) + "]"
        else:
            whole = "[" + ", ".join([d.api_json_spaced for d in devices]) + "]"
        if text.startswith(whole, i):
            return i + len(whole)
    i = _skip(text, i + 1)
    if text.startswith("]", i):
        if sent:
            raise _Differs
        return i + 1
    count = len(sent)
    n = 0
    while True:
        if n >= count:
            raise _Differs
        device = devices[n]
        fragment = device.api_json
        if text.startswith(fragment, i):  # stored as sent, byte for byte (a server writing compact JSON)
            i += len(fragment)
        elif text.startswith(spaced := device.api_json_spaced, i):  # a server writing json.dumps' default
            i += len(spaced)
        else:
            value, i = _DECODER.raw_decode(text, i)
            if not _same_stored(value, sent[n]):
                raise _Differs
        n += 1
        c = text[i : i + 1]
        if c not in (",", "]"):
            i = _skip(text, i)
            c = text[i : i + 1]
        if c == "]":
            break
        if c != ",":
            raise _Differs
        i += 1
        if text.startswith(" ", i):  # ", " (json.dumps' default)
            i += 1
        if text[i : i + 1] in _BLANKS:
            i = _skip(text, i)
        if n % step == 0:
            yield
    if n != count:
        raise _Differs
    return i + 1


def _spec_as_sent(
    text: str, i: int, sent: Mapping[str, Any], devices: Sequence[Device], step: int
) -> Generator[None, None, int]:
    seen: set[str] = set()
    members = _members(text, i)
    try:
        key, i = next(members)
        while True:
            if key in seen:
                raise _Differs
            seen.add(key)
            if key == "devices":
                i = yield from _devices_as_sent(text, i, sent.get("devices") or (), devices, step)
            else:
                value, i = _DECODER.raw_decode(text, i)
                if not _same_stored(value, sent.get(key, _ABSENT)):
                    raise _Differs
            key, i = members.send(i)
    except StopIteration:
        pass
    if any(key not in seen and not _empty(value) for key, value in sent.items()):
        raise _Differs  # a member sent and not stored (an empty list or map is stored as absent)
    return i


def read_answer(
    answer: str, sent: Mapping[str, Any], devices: Sequence[Device], *, step: int = 32
) -> Generator[None, None, dict[str, Any] | None]:
    """The server's answer to a write of ``sent`` (listing ``devices``, as for ``encode_slice``):
    its metadata if it stored the spec and owner references as sent, else None (decode it whole
    to see what changed). A generator: it pauses (yields) after every ``step`` devices, so a
    caller on an event loop can let other work run between the steps."""
    metadata: Any = _ABSENT
    spec_read = False
    members = _members(answer, 0)
    try:
        try:
            key, i = next(members)
            while True:
                if key == "spec":
                    i = yield from _spec_as_sent(answer, i, sent["spec"], devices, step)
                    spec_read = True
                else:
                    value, i = _DECODER.raw_decode(answer, i)
                    if key == "metadata":
                        metadata = value
                key, i = members.send(i)
        except StopIteration:
            pass
    except (_Differs, ValueError, IndexError, KeyError):
        return None
    if not spec_read or not isinstance(metadata, dict):
        return None
    if metadata.get("ownerReferences") != (sent.get("metadata") or {}).get("ownerReferences"):
        return None
    return metadata


def event_head(line: str) -> tuple[str, dict[str, Any]] | None:
    """A watch event's type and its object's metadata, read without decoding the rest (the spec
    of a slice is most of it), or None when the line does not start that way ("type" first,
    the object's "metadata" before its "spec", as the API server writes it): decode it whole."""
    try:
        outer = _members(line, 0)
        key, i = next(outer)
        if key != "type":
            return None
        kind, i = _DECODER.raw_decode(line, i)
        key, i = outer.send(i)
        if key != "object" or not isinstance(kind, str):
            return None
        inner = _members(line, i)
        field_, j = next(inner)
        while field_ != "metadata":
            if field_ == "spec":
                return None
            _, j = _DECODER.raw_decode(line, j)
            field_, j = inner.send(j)
        metadata, _ = _DECODER.raw_decode(line, j)
    except (_Differs, ValueError, IndexError, StopIteration):
        return None
    return (kind, metadata) if isinstance(metadata, dict) else None
