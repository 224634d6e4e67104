"""The agent's most frequent replies written straight to protobuf wire bytes (sans-IO).

A CreateContainer reply with an adjustment and a dozen ContainerUpdates cost more to build
as upb messages (one Python call per field set, a CopyFrom per update) than the placement
behind it. Here the bytes are written directly: tags, varints and length-delimited fields in
field-number order, exactly as upb's ``SerializeToString`` writes the same message (property
tests compare the two). What follows an update's id is written once per reply for the same
(cpus, mems, shares, quota, period, memory limit, ignore_failure) objects and its bytes reused;
formatted cpus/mems fields are memoised by mask.

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


#: What a reply remembers of the updates it wrote: identities of an update's values -> that
#: update (kept so the identities stay unique) and the bytes after its id.
_Memo = dict[tuple[int, ...], tuple[ContainerUpdate, bytes]]


def _rest(update: ContainerUpdate, memo: _Memo) -> bytes | None:
    """What follows the id in an update's message (linux, ignore_failure), written once for
    the same value objects (the policy hands many containers one ``Assignment``); None when
    the reference encoder must handle it."""
    cpus, mems, shares, quota, period, limit, flag = (
        update.cpus, update.mems, update.cpu_shares, update.cpu_quota, update.cpu_period, update.memory_limit,
        update.ignore_failure,
    )
    key = (id(cpus), id(mems), id(shares), id(quota), id(period), id(limit), id(flag))
    hit = memo.get(key)
    if hit is not None:
        return hit[1]
    if flag is not True and flag is not False:
        return None
    res = _resources(cpus, mems, shares, quota, period, limit)
    if res is None:
        return None
    rest = b"\x12" + _BYTE[len(res) + 2] + b"\x0a" + _BYTE[len(res)] + res if len(res) < 126 else _field(
        b"\x12", _field(b"\x0a", res)
    )
    if flag:
        rest += b"\x18\x01"
    memo[key] = (update, rest)
    return rest


def update_bytes(update: ContainerUpdate, memo: _Memo | None = None) -> bytes:
    """One ContainerUpdate message body, as ``convert.update_to_proto`` writes it."""
    cid = _text(update.container_id)
    if cid is not None:
        rest = _rest(update, {} if memo is None else memo)
        if rest is not None:
            return (_field(b"\x0a", cid) + rest) if cid else rest
    return convert.update_to_proto(update).SerializeToString()


def _updates(tag: bytes, updates: Iterable[ContainerUpdate]) -> bytes:
    """The repeated ContainerUpdate field ``tag``, one item per update.

    The agent's updates carry only cpus and mems, and runs of them share the very same sets
    (sorted by id, the followers of one pool come together): those take the short way here,
    compared by identity with the previous update; the rest goes through ``_rest``."""
    if type(updates) is PlacementUpdates:
        return _placements(tag, updates.placements)
    memo: _Memo = {}
    out: list[bytes] = []
    last_cpus: object = _NO_SET
    last_mems: object = _NO_SET
    plain = b""  # the bytes after the id of an update with only last_cpus and last_mems
    for update in updates:
        cid = update.container_id
        if (
            type(cid) is str
            and cid
            and update.cpu_shares is None
            and update.cpu_quota is None
            and update.cpu_period is None
            and update.memory_limit is None
            and update.ignore_failure is False
        ):
            cpus, mems = update.cpus, update.mems
            if cpus is not last_cpus or mems is not last_mems:
                rest = _rest(update, memo)
                if rest is None:  # not plain after all (an empty set, a CPUSet subclass): the reference
                    out.append(_field(tag, update_bytes(update)))
                    continue
                plain, last_cpus, last_mems = rest, cpus, mems
            try:
                text = cid.encode()
            except UnicodeEncodeError:
                out.append(_field(tag, update_bytes(update)))
                continue
            n = len(text)
            size = n + len(plain) + 2
            if size < 128:
                out.append(tag + _BYTE[size] + b"\x0a" + _BYTE[n] + text + plain)
            else:
                out.append(_field(tag, _field(b"\x0a", text) + plain))
            continue
        text_or_none = _text(cid)
        rest = _rest(update, memo) if text_or_none is not None else None
        if text_or_none is not None and rest is not None:
            out.append(_field(tag, (_field(b"\x0a", text_or_none) + rest) if text_or_none else rest))
        else:
            out.append(_field(tag, update_bytes(update)))
    return b"".join(out)


#: No set: what the first update's sets are compared with.
_NO_SET = object()


def _placements(tag: bytes, placements: tuple[Placement, ...]) -> bytes:
    """The repeated ContainerUpdate field ``tag`` of ``PlacementUpdates``, from its triples: the
    bytes ``_updates`` writes for the same ``placement_update``s, without building them. Runs
    sharing their sets (by identity) share the bytes after the id. Anything not plain (an empty
    or odd set, an empty or unencodable id) sends the whole list the general way, built as
    ``placement_update``s: refused as it would have been, with the same error."""
    out: list[bytes] = []
    add = out.extend  # the pieces of an update, joined once at the end
    last_cpus: object = _NO_SET
    last_mems: object = _NO_SET
    plain = b""
    room = 0  # the longest id whose update still has a one-byte length
    for cid, cpus, mems in placements:
        if cpus is not last_cpus or mems is not last_mems:
            res = _resources(cpus, mems, None, None, None, None) if type(cpus) is CPUSet else None
            if res is None:
                break
            n = len(res)
            plain = b"\x12" + _BYTE[n + 2] + b"\x0a" + _BYTE[n] + res if n < 126 else _field(b"\x12", _field(b"\x0a", res))
            room = 125 - len(plain)
            last_cpus, last_mems = cpus, mems
        if type(cid) is not str or not cid:
            break
        try:
            text = cid.encode()
        except UnicodeEncodeError:
            break
        n = len(text)
        if n <= room:
            add((tag, _BYTE[n + len(plain) + 2], b"\x0a", _BYTE[n], text, plain))
        else:
            out.append(_field(tag, _field(b"\x0a", text) + plain))
    else:
        return b"".join(out)
    return _updates(tag, [placement_update(*p) for p in placements])


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
