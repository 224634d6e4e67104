"""The agent's most frequent replies written straight to protobuf wire bytes (sans-IO).

A CreateContainer reply with an adjustment and a dozen ContainerUpdates cost more to build
as upb messages (one Python call per field set, a CopyFrom per update) than the placement
behind it. Here the bytes are written directly: tags, varints and length-delimited fields in
field-number order, exactly as upb's ``SerializeToString`` writes the same message (property
tests compare the two). Formatted cpus/mems fields are memoised by mask.

Only plain values take this path: exact ``CPUSet``s, ``int``s in range, strings that encode
as UTF-8, an adjustment without annotations (upb orders map entries by its own hash). Anything
else, and every error case (an empty set, a value out of range, a wrong type), goes through
``topodra.nri.convert``, the reference encoder, which raises its usual error: so this writer
never writes an empty cpuset, and never accepts what the reference refuses.
"""

from __future__ import annotations

from collections.abc import Iterable

from topodra.cpuset import CPUSet
from topodra.nri import convert
from topodra.nri.proto import api_pb2
from topodra.nri.types import (
    ContainerAdjustment,
    ContainerUpdate,
    Placement,
    PlacementUpdates,
    placement_update,
)

__all__ = ["adjustment_bytes", "create_container_response", "update_bytes", "updates_message"]

_INT64_MIN = -(1 << 63)
_INT64_MAX = (1 << 63) - 1
_UINT64_MAX = (1 << 64) - 1
_BYTE = [bytes([i]) for i in range(128)]


def _varint(n: int) -> bytes:
    """A non-negative int below 2**64 as a protobuf varint."""
    if n < 128:
        return _BYTE[n]
    out = bytearray()
    while n >= 128:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def _field(tag: bytes, body: bytes) -> bytes:
    """A length-delimited field: tag, length, body."""
    n = len(body)
    return tag + (_BYTE[n] if n < 128 else _varint(n)) + body


def _optional(tag: bytes, value: int, signed: bool) -> bytes | None:
    """An Optional(U)Int64 wrapper field (present even for 0, whose body is empty), or None
    when the value is not a plain int in range: the reference encoder then raises."""
    if type(value) is not int:
        return None
    if signed:
        if not _INT64_MIN <= value <= _INT64_MAX:
            return None
        if value < 0:
            value += 1 << 64
    elif not 0 <= value <= _UINT64_MAX:
        return None
    if value == 0:
        return tag + b"\x00"
    return _field(tag, b"\x08" + _varint(value))


def _resources(
    cpus: CPUSet | None,
    mems: CPUSet | None,
    shares: int | None,
    quota: int | None,
    period: int | None,
    limit: int | None,
) -> bytes | None:
    """A LinuxResources body as ``convert._fill_cpu_memory`` fills it: memory (1), then cpu (2)
    with its wrappers (1-3) and lists (6, 7). None: leave it to the reference encoder."""
    cpu = b""
    if shares is not None or quota is not None or period is not None or limit is not None:
        head = b""
        if limit is not None:
            wrapper = _optional(b"\x0a", limit, True)
            if wrapper is None:
                return None
            head = _field(b"\x0a", wrapper)
        for tag, value, signed in ((b"\x0a", shares, False), (b"\x12", quota, True), (b"\x1a", period, False)):
            if value is not None:
                wrapper = _optional(tag, value, signed)
                if wrapper is None:
                    return None
                cpu += wrapper
    else:
        head = b""
    if cpus is not None:
        field = _set_field(b"\x32", cpus)
        if field is None:
            return None
        cpu += field
    if mems is not None:
        field = _set_field(b"\x3a", mems)
        if field is None:
            return None
        cpu += field
    return head + _field(b"\x12", cpu) if cpu else head


#: Set list fields by (tag, mask). Every reply names its memory node ("0", "1") and often a
#: set it named before; formatting a fresh ``CPUSet`` costs 1.5-5 us, looking it up 0.2 us.
_SET_FIELDS: dict[tuple[bytes, int], bytes] = {}
_SET_FIELDS_MAX = 1024


def _set_field(tag: bytes, value: CPUSet) -> bytes | None:
    """The cpus/mems field of a non-empty set; None for an empty set or a CPUSet subclass."""
    if type(value) is not CPUSet:
        return None
    key = (tag, value.mask)
    field = _SET_FIELDS.get(key)
    if field is None:
        if not key[1]:
            return None
        field = _field(tag, _list_text(key[1]).encode())
        if len(_SET_FIELDS) >= _SET_FIELDS_MAX:
            _SET_FIELDS.clear()
        _SET_FIELDS[key] = field
    return field


def _list_text(mask: int) -> str:
    """``CPUSet.format`` of a non-empty mask, a run per step (twice as fast: no generator, and
    the set's own cache is of no use for a set first seen here)."""
    parts: list[str] = []
    while mask:
        low = mask & -mask
        first = low.bit_length() - 1
        above = (mask + low) & ~mask  # the bit just above the lowest run
        last = above.bit_length() - 2
        parts.append(str(first) if first == last else f"{first}-{last}")
        mask &= -above  # drop the run
    return ",".join(parts)


def _text(value: str) -> bytes | None:
    """UTF-8 of a str; None when it is no str or has a lone surrogate (the reference raises)."""
    if type(value) is not str:
        return None
    try:
        return value.encode()
    except UnicodeEncodeError:
        return None


def _rest(
    cpus: CPUSet | None,
    mems: CPUSet | None,
    shares: int | None,
    quota: int | None,
    period: int | None,
    limit: int | None,
    ignore_failure: bool,
) -> bytes | None:
    """What follows the id in an update's message (linux, ignore_failure); None when the
    reference encoder must handle it."""
    if ignore_failure is not True and ignore_failure is not False:
        return None
    res = _resources(cpus, mems, shares, quota, period, limit)
    if res is None:
        return None
    rest = _field(b"\x12", _field(b"\x0a", res))
    return rest + b"\x18\x01" if ignore_failure else rest


def update_bytes(update: ContainerUpdate) -> bytes:
    """One ContainerUpdate message body, as ``convert.update_to_proto`` writes it."""
    cid = _text(update.container_id)
    if cid is not None:
        rest = _rest(
            update.cpus, update.mems, update.cpu_shares, update.cpu_quota, update.cpu_period, update.memory_limit,
            update.ignore_failure,
        )
        if rest is not None:
            return (_field(b"\x0a", cid) + rest) if cid else rest
    return convert.update_to_proto(update).SerializeToString()


def _updates(tag: bytes, updates: Iterable[ContainerUpdate]) -> bytes:
    """The repeated ContainerUpdate field ``tag``, one item per update."""
    if type(updates) is PlacementUpdates:
        return _placements(tag, updates.placements)
    return b"".join(_field(tag, update_bytes(update)) for update in updates)


def _placements(tag: bytes, placements: tuple[Placement, ...]) -> bytes:
    """The repeated ContainerUpdate field ``tag`` of ``PlacementUpdates``, from its triples: the
    bytes ``_updates`` writes for the same ``placement_update``s, without building them. Anything
    not plain (an empty or odd set, an empty or unencodable id) sends the whole list the general
    way, built as ``placement_update``s: refused as it would have been, with the same error."""
    out: list[bytes] = []
    for cid, cpus, mems in placements:
        text = _text(cid) if cid else None
        rest = None if text is None else _rest(cpus, mems, None, None, None, None, False)
        if text is None or rest is None:
            return _updates(tag, [placement_update(*p) for p in placements])
        out.append(_field(tag, _field(b"\x0a", text) + rest))
    return b"".join(out)


def updates_message(updates: Iterable[ContainerUpdate]) -> bytes:
    """A message whose only field set is ``repeated ContainerUpdate update = 1``: the replies to
    UpdateContainer, StopContainer and a final Synchronize chunk, and UpdateContainersRequest."""
    return _updates(b"\x0a", updates)


def _adjustment_fast(adj: ContainerAdjustment) -> bytes | None:
    if adj.annotations:
        return None
    parts: list[bytes] = []
    for key, value in adj.env.items():
        k, v = _text(key), _text(value)
        if k is None or v is None:
            return None
        parts.append(_field(b"\x22", (_field(b"\x0a", k) if k else b"") + (_field(b"\x12", v) if v else b"")))
    cpus, mems, shares, quota, period, limit = (
        adj.cpus, adj.mems, adj.cpu_shares, adj.cpu_quota, adj.cpu_period, adj.memory_limit
    )
    if not (cpus is None and mems is None and shares is None and quota is None and period is None and limit is None):
        res = _resources(cpus, mems, shares, quota, period, limit)
        if res is None:
            return None
        parts.append(_field(b"\x32", _field(b"\x12", res)))
    return b"".join(parts)


def adjustment_bytes(adj: ContainerAdjustment) -> bytes:
    """A ContainerAdjustment message body, as ``convert.adjustment_to_proto`` fills it."""
    fast = _adjustment_fast(adj)
    if fast is not None:
        return fast
    pb = api_pb2.ContainerAdjustment()
    convert.adjustment_to_proto(adj, pb)
    return pb.SerializeToString()


def create_container_response(adjust: bytes | None, updates: Iterable[ContainerUpdate]) -> bytes:
    """A CreateContainerResponse: ``adjust`` (1, an ``adjustment_bytes`` body) when given, then
    the updates (2)."""
    head = _field(b"\x0a", adjust) if adjust is not None else b""
    return head + _updates(b"\x12", updates)
