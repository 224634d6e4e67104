"""Server-side apply of ``ResourceClaim.status.devices`` for the API server double.

The real API server merges an applied configuration field by field and tracks who
owns what (``metadata.managedFields``). ``status.devices`` is a list-map keyed by
driver/pool/device/shareID whose items' fields (``conditions``, ``data``,
``networkData``) are atomic, so ownership is kept per item field here:

- an applier owns the fields it names; fields and items it owned before and no
  longer names are removed unless another manager owns them too;
- naming a field another manager owns with a different value is a conflict
  (409) unless ``force`` is set, which takes the field over;
- a plain update (PUT, merge patch) owns the fields it changes and takes them
  from their previous owners.

Only ``status.devices`` is applied; the double refuses to apply anything else
(415), rather than pretend. Pure functions: the store keeps the tables.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from topodra.kube.errors import ApiError

__all__ = ["Owners", "apply_devices", "drop_deallocated", "item_key", "owned_by", "update_owners"]

Key = tuple[str, str, str, str]
#: item key -> field ("" = the item itself) -> managers owning it
Owners = dict[Key, dict[str, frozenset[str]]]
_KEY_FIELDS = ("driver", "pool", "device", "shareID")


def item_key(entry: Mapping[str, Any]) -> Key:
    return (str(entry.get("driver", "")), str(entry.get("pool", "")), str(entry.get("device", "")), str(entry.get("shareID") or ""))


def _path(key: Key, field: str) -> str:
    sel = ",".join(f'{n}="{v}"' for n, v in zip(_KEY_FIELDS, key, strict=True) if v)
    return f".status.devices[{sel}]" + (f".{field}" if field else "")


def _fields(entry: Mapping[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in entry.items() if k not in _KEY_FIELDS}


def _release(item: dict[str, Any], fields: dict[str, frozenset[str]], field: str, manager: str) -> None:
    left = fields.get(field, frozenset()) - {manager}
    if left:
        fields[field] = left
    else:
        fields.pop(field, None)
        if field:
            item.pop(field, None)


def apply_devices(
    current: Sequence[Mapping[str, Any]],
    owners: Owners,
    manager: str,
    applied: Sequence[Mapping[str, Any]],
    *,
    force: bool,
) -> tuple[list[dict[str, Any]], Owners]:
    """The devices list and ownership after ``manager`` applies ``applied``; ApiError 409 on a
    conflict without ``force``, 422 on an applied list naming one item twice."""
    items = {item_key(e): dict(e) for e in current}
    order = [item_key(e) for e in current]
    table: Owners = {k: dict(v) for k, v in owners.items()}
    wanted: dict[Key, Mapping[str, Any]] = {}
    for e in applied:
        if not isinstance(e, Mapping):
            raise ApiError.bad_request("status.devices items must be objects")
        k = item_key(e)
        if k in wanted:
            raise ApiError(422, "Invalid", f"{_path(k, '')}: duplicate entries for key in the applied configuration")
        wanted[k] = e
    conflicts: list[str] = []
    for k, e in wanted.items():
        fields = table.get(k, {})
        item = items.get(k, {})
        for f, value in _fields(e).items():
            others = fields.get(f, frozenset()) - {manager}
            if others and item.get(f) != value and not force:
                conflicts += [f'conflict with "{o}": {_path(k, f)}' for o in sorted(others)]
    if conflicts:
        raise ApiError(409, "Conflict", f"Apply failed with {len(conflicts)} conflict(s): {'; '.join(conflicts)}")
    # What this manager stops naming is released.
    for k in list(table):
        fields = table[k]
        item = items.get(k, {})
        keep = set(_fields(wanted[k])) if k in wanted else set()
        for f in [f for f, who in fields.items() if manager in who and f not in keep and f != ""]:
            _release(item, fields, f, manager)
        if k not in wanted and manager in fields.get("", frozenset()):
            _release(item, fields, "", manager)
        if not fields:
            del table[k]
            items.pop(k, None)
    # What it names is set and owned.
    for k, e in wanted.items():
        if k not in items:
            items[k] = {n: v for n, v in zip(_KEY_FIELDS, k, strict=True) if v}
            order.append(k)
        fields = table.setdefault(k, {})
        fields[""] = fields.get("", frozenset()) | {manager}
        for f, value in _fields(e).items():
            same = items[k].get(f) == value
            fields[f] = (fields.get(f, frozenset()) | {manager}) if same else frozenset({manager})
            items[k][f] = value
    return [items[k] for k in order if k in items], table


def update_owners(
    old: Sequence[Mapping[str, Any]], new: Sequence[Mapping[str, Any]], owners: Owners, manager: str
) -> Owners:
    """Ownership after a plain update from ``old`` to ``new`` by ``manager``."""
    before = {item_key(e): e for e in old}
    table: Owners = {}
    for e in new:
        k = item_key(e)
        fields = dict(owners.get(k, {}))
        prev = before.get(k)
        if prev is None:
            fields = {"": frozenset({manager})}
        for f, value in _fields(e).items():
            if prev is None or prev.get(f) != value or f not in fields:
                fields[f] = frozenset({manager})
        for f in [f for f in fields if f and f not in e]:
            del fields[f]
        fields.setdefault("", frozenset({manager}))
        table[k] = fields
    return table


def owned_by(owners: Owners) -> dict[str, list[str]]:
    """manager -> the field paths it owns (for tests and debugging, like managedFields)."""
    out: dict[str, list[str]] = {}
    for k, fields in sorted(owners.items()):
        for f, who in sorted(fields.items()):
            for m in who:
                out.setdefault(m, []).append(_path(k, f))
    return out


def drop_deallocated(new_status: dict[str, Any], old_status: Mapping[str, Any]) -> None:
    """Entries of devices the claim no longer has allocated are dropped, as the real server's
    status strategy does when an allocation is removed."""
    def ids(status: Mapping[str, Any]) -> set[tuple[str, str, str]]:
        alloc = status.get("allocation") if isinstance(status.get("allocation"), Mapping) else None
        results = ((alloc or {}).get("devices") or {}).get("results") or []
        return {(str(r.get("driver")), str(r.get("pool")), str(r.get("device"))) for r in results if isinstance(r, Mapping)}

    gone = ids(old_status) - ids(new_status)
    devices = new_status.get("devices")
    if not gone or not isinstance(devices, list):
        return
    kept = [d for d in devices if not (isinstance(d, Mapping) and item_key(d)[:3] in gone)]
    if kept:
        new_status["devices"] = kept
    else:
        new_status.pop("devices", None)
