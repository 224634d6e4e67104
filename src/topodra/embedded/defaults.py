"""The resource.k8s.io/v1 defaults and decoding of device taints and tolerations (the double's
``prepare.set_defaults`` applies them before it validates a write).

Written from ``pkg/apis/resource/v1/defaults.go`` and ``zz_generated.defaults.go`` (Kubernetes
v1.36.2) for the fields of device taints: a taint's ``timeAdded`` is set to the time of the write
(whole seconds) when missing, and stored as ``metav1.Time`` writes it (UTC, whole seconds); a
device toleration's ``operator`` defaults to ``Equal`` (in claim and template requests and in
allocation results). A ``timeAdded`` that is not RFC 3339 fails the decoding, as Go's
``time.Parse`` does, with a 400.
"""

from __future__ import annotations

import datetime
import re
from collections.abc import Callable, Iterator, MutableMapping
from typing import Any, Final

from topodra.kube.errors import ApiError

__all__ = ["parse_go_time", "taint_defaults"]

_RFC3339_LAYOUT: Final = "2006-01-02T15:04:05Z07:00"
#: Go's RFC 3339 layout, element by element: (layout element, what the value must hold there).
_ELEMENTS: Final = (
    ("2006", r"\d{4}"), ("-", "-"), ("01", r"\d{2}"), ("-", "-"), ("02", r"\d{2}"), ("T", "T"),
    ("15", r"\d{2}"), (":", ":"), ("04", r"\d{2}"), (":", ":"), ("05", r"\d{2}(?:\.\d+)?"),
    ("Z07:00", r"Z|[+-]\d{2}:\d{2}"),
)
_RANGES: Final = (("month", 1, 12), ("day", 1, 31), ("hour", 0, 23), ("minute", 0, 59), ("second", 0, 59))


def parse_go_time(text: str) -> datetime.datetime:
    """``time.Parse(time.RFC3339, text)``; ``ValueError`` with Go's words after "parsing time"."""
    rest, parts = text, []
    for layout, pattern in _ELEMENTS:
        m = re.match(pattern, rest)
        if m is None:
            raise ValueError(f'parsing time "{text}" as "{_RFC3339_LAYOUT}": cannot parse "{rest}" as "{layout}"')
        parts.append(m.group())
        rest = rest[m.end() :]
    if rest:
        raise ValueError(f'parsing time "{text}": extra text: "{rest}"')
    year, month, day, hour, minute = (int(parts[i]) for i in (0, 2, 4, 6, 8))
    second = float(parts[10])
    for (name, lo, hi), value in zip(_RANGES, (month, day, hour, minute, int(second)), strict=True):
        if not lo <= value <= hi:
            raise ValueError(f'parsing time "{text}": {name} out of range')
    zone = parts[11]
    offset = datetime.timedelta(0) if zone == "Z" else (1 if zone[0] == "+" else -1) * datetime.timedelta(
        hours=int(zone[1:3]), minutes=int(zone[4:6])
    )
    try:
        naive = datetime.datetime(year, month, day, hour, minute, int(second))
    except ValueError:
        raise ValueError(f'parsing time "{text}": day out of range') from None
    return naive.replace(tzinfo=datetime.timezone(offset))


def _rfc3339(when: datetime.datetime) -> str:
    return when.astimezone(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _dicts(value: Any) -> Iterator[MutableMapping[str, Any]]:
    if isinstance(value, list):
        yield from (v for v in value if isinstance(v, dict))


def _get(obj: Any, *path: str) -> Any:
    for key in path:
        obj = obj.get(key) if isinstance(obj, dict) else None
    return obj


def _slice_defaults(obj: MutableMapping[str, Any], now: str) -> None:
    for device in _dicts(_get(obj, "spec", "devices")):
        for taint in _dicts(device.get("taints")):
            when = taint.get("timeAdded")
            if when is None:
                taint["timeAdded"] = now
            elif isinstance(when, str):
                try:
                    taint["timeAdded"] = _rfc3339(parse_go_time(when))
                except ValueError as exc:
                    raise ApiError.bad_request(
                        f'ResourceSlice in version "v1" cannot be handled as a ResourceSlice: {exc}'
                    ) from None


def _request_defaults(spec: Any) -> None:
    for request in _dicts(_get(spec, "devices", "requests")):
        exact = request.get("exactly")
        subs: list[MutableMapping[str, Any]] = [exact] if isinstance(exact, dict) else []
        subs += _dicts(request.get("firstAvailable"))
        for sub in subs:
            for toleration in _dicts(sub.get("tolerations")):
                if not toleration.get("operator"):
                    toleration["operator"] = "Equal"


def _claim_defaults(obj: MutableMapping[str, Any], now: str) -> None:
    _request_defaults(obj.get("spec"))
    for result in _dicts(_get(obj, "status", "allocation", "devices", "results")):
        for toleration in _dicts(result.get("tolerations")):
            if not toleration.get("operator"):
                toleration["operator"] = "Equal"


def _template_defaults(obj: MutableMapping[str, Any], now: str) -> None:
    _request_defaults(_get(obj, "spec", "spec"))


_DEFAULTERS: Final[dict[str, Callable[[MutableMapping[str, Any], str], None]]] = {
    "resourceslices": _slice_defaults,
    "resourceclaims": _claim_defaults,
    "resourceclaimtemplates": _template_defaults,
}


def taint_defaults(plural: str, obj: MutableMapping[str, Any]) -> None:
    """Fill in the defaults of an object of kind ``plural`` being written (in place); an
    undecodable field is an ``ApiError`` 400."""
    defaulter = _DEFAULTERS.get(plural)
    if defaulter is not None:
        defaulter(obj, _rfc3339(datetime.datetime.now(datetime.UTC)))
