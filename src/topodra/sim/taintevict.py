"""When kube-controller-manager's device taint eviction controller evicts the pods of a claim
(KEP-5055, ``DRADeviceTaints``, beta and on in Kubernetes 1.36).

Written from ``claimEvictionTime`` and ``allEvictingDeviceTaints`` in
``pkg/controller/devicetainteviction/device_taint_eviction.go`` (Kubernetes v1.36.2): every
``NoExecute`` taint of an allocated device counts unless a toleration copied into that
allocation result has effect ``NoExecute`` exactly (an empty effect, which the scheduler takes as
matching, does not count here) and tolerates it; one without ``tolerationSeconds`` tolerates it
for ever, otherwise the shortest ``tolerationSeconds`` (negative: 0) is added to the taint's
time. The claim's pods go at the earliest of these times. DeviceTaintRules are left out (see
``topodra.sim.replay``). Times are seconds on the caller's clock. Pure.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from topodra.sim.objects import Taint, Toleration

__all__ = ["DeviceTaints", "TimedTaint", "claim_eviction_time", "timed_taints"]


@dataclass(frozen=True, slots=True)
class TimedTaint:
    """A device's taint and the time it was added (the API server's ``timeAdded``)."""

    taint: Taint
    since: float


def timed_taints(raw: Iterable[Mapping[str, Any]], now: float) -> tuple[TimedTaint, ...]:
    """A device's ``taints`` as written at ``now``: the server stamps each with the write's time."""
    return tuple(
        TimedTaint(Taint(str(t.get("key", "")), str(t.get("value", "")), str(t.get("effect", ""))), now)
        for t in raw
        if isinstance(t, Mapping)
    )


def _toleration(raw: Mapping[str, Any]) -> Toleration:
    return Toleration(
        str(raw.get("key", "")), str(raw.get("operator") or "Equal"), str(raw.get("value", "")), str(raw.get("effect", "")), raw
    )


def claim_eviction_time(
    results: Sequence[Any], taints_of: Callable[[str, str, str], Sequence[TimedTaint]]
) -> float | None:
    """When the pods of a claim allocated ``results`` (``driver``, ``pool``, ``device``,
    ``tolerations`` each) are evicted, or None; ``taints_of(driver, pool, device)``: the device's
    taints as published now."""
    when: float | None = None
    for r in results:
        tolerations = [_toleration(t) for t in r.tolerations if t.get("effect") == "NoExecute"]
        for timed in taints_of(r.driver, r.pool, r.device):
            if timed.taint.effect != "NoExecute":
                continue
            seconds: float | None = None
            forever = False
            for tol in tolerations:
                if not tol.tolerates(timed.taint):
                    continue
                limit = tol.raw.get("tolerationSeconds")
                if limit is None:
                    forever = True
                    break
                seconds = max(0, int(limit)) if seconds is None else min(seconds, max(0, int(limit)))
            if forever:
                continue
            at = timed.since + (seconds or 0)
            if when is None or at < when:
                when = at
    return when


class _Allocated(Protocol):
    @property
    def results(self) -> Sequence[Any]: ...


class _Claim(Protocol):
    """An allocated claim as the replay holds it."""

    @property
    def namespace(self) -> str: ...
    @property
    def allocation(self) -> _Allocated | None: ...
    @property
    def reserved_for(self) -> Sequence[str]: ...


class DeviceTaints:
    """The taints of every published device with their times, slice by slice (a slice written
    again replaces its taints: each stamped with the write's time, as the API server does for a
    taint sent without ``timeAdded``)."""

    def __init__(self) -> None:
        self._by_slice: dict[str, dict[tuple[str, str, str], tuple[TimedTaint, ...]]] = {}

    def write(self, name: str, obj: Mapping[str, Any], now: float) -> None:
        spec = obj.get("spec") or {}
        driver, pool = str(spec.get("driver", "")), str((spec.get("pool") or {}).get("name", ""))
        self._by_slice[name] = {
            (driver, pool, str(d.get("name", ""))): timed_taints(d.get("taints") or (), now)
            for d in spec.get("devices") or ()
            if isinstance(d, Mapping) and d.get("taints")
        }

    def drop(self, name: str) -> None:
        self._by_slice.pop(name, None)

    def of(self, driver: str, pool: str, device: str) -> tuple[TimedTaint, ...]:
        for per_device in self._by_slice.values():
            found = per_device.get((driver, pool, device))
            if found:
                return found
        return ()

    def doomed(self, claims: Iterable[_Claim], now: float) -> list[str]:
        """The pods (``namespace/name``) of the claims whose eviction time has come."""
        if not any(self._by_slice.values()):
            return []
        out: dict[str, None] = {}
        for claim in claims:
            if claim.allocation is None or not claim.reserved_for:
                continue
            when = claim_eviction_time(claim.allocation.results, self.of)
            if when is not None and when <= now:
                out.update(dict.fromkeys(f"{claim.namespace}/{p}" for p in claim.reserved_for))
        return list(out)
