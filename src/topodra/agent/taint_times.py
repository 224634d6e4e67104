"""When each device taint appeared: the ``timeAdded`` the agent publishes with it.

The API server sets a missing ``timeAdded`` to the time of each write (resource.k8s.io/v1
defaults), so a taint published without one would seem added again whenever its slice is
rewritten (after every exclusive grant), and a ``NoExecute`` toleration's
``tolerationSeconds``, counted from it by the device taint eviction controller, would never run
out. The agent stamps each taint once, when it first publishes it, and keeps that time while the
device keeps the taint.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import replace
from datetime import UTC, datetime
from typing import Any

from topodra.dra.devices import Device

__all__ = ["TaintTimes", "rfc3339"]

#: (key, value, effect)
_Key = tuple[str, str, str]


def rfc3339(when: datetime) -> str:
    """A ``metav1.Time`` as the API writes it: UTC, whole seconds."""
    return when.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _key(taint: Mapping[str, Any]) -> _Key:
    return (str(taint.get("key", "")), str(taint.get("value", "")), str(taint.get("effect", "")))


class TaintTimes:
    """The first time each (device, taint) was published, and the devices stamped with it."""

    def __init__(self, now: Callable[[], datetime] | None = None) -> None:
        self._now = now or (lambda: datetime.now(UTC))
        self._since: dict[str, dict[_Key, str]] = {}  # device name -> taint -> timeAdded
        #: device name -> (the device as given, the device stamped): the same object while unchanged
        self._stamped: dict[str, tuple[Device, Device]] = {}

    def seed(self, published: Iterable[Mapping[str, Any]]) -> None:
        """Times already published (the slices' devices as the API server has them, after a
        restart), kept for the same taints; ones already known are not changed."""
        for device in published:
            for t in device.get("taints") or ():
                when = t.get("timeAdded")
                if isinstance(when, str) and when:
                    self._since.setdefault(str(device.get("name", "")), {}).setdefault(_key(t), when)

    def stamp(self, devices: Sequence[Device]) -> list[Device]:
        """``devices`` with every taint's ``timeAdded`` (the same objects for unchanged devices).
        A device listed without a taint it had forgets that taint's time (it is added afresh when
        it comes back); the times of devices not listed are kept (withdrawn for a while)."""
        out: list[Device] = []
        now: str | None = None
        for d in devices:
            cached = self._stamped.get(d.name)
            if cached is not None and cached[0] is d:
                out.append(cached[1])
                continue
            known = self._since.pop(d.name, {})
            if not d.taints:
                self._stamped[d.name] = (d, d)
                out.append(d)
                continue
            since = self._since[d.name] = {}  # (the taints it no longer has are forgotten)
            taints: list[Mapping[str, Any]] = []
            for t in d.taints:
                key = _key(t)
                if "timeAdded" not in t:
                    when = known.get(key)
                    if when is None:
                        now = now or rfc3339(self._now())
                        when = now
                    t = {**t, "timeAdded": when}
                since[key] = str(t["timeAdded"])
                taints.append(t)
            stamped = replace(d, taints=tuple(taints))
            self._stamped[d.name] = (d, stamped)
            out.append(stamped)
        return out
