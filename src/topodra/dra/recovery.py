"""Settling prepared claims after a damaged checkpoint: the pure part of the repair.

When a checkpoint slot fails its checks, the claims come from the other slot
(the previous generation) or, with no good slot, from nothing. Either may miss
the last Prepare or Unprepare. The other records on the node then decide, per
claim where the two disagree:

- a CDI spec on disk is the trace of a Prepare (it is written before the
  checkpoint); a checkpointed claim without a spec may be an Unprepare whose
  last write was lost (the spec goes after the checkpoint);
- the API server says whether the claim still exists with that UID,
  allocated to devices of this node and reserved for a pod: only then is it
  (still) prepared here.

Claims on which checkpoint and specs agree are kept as they are. Plain data
in, plain data out: no I/O.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from topodra.cpuset import CPUSet
from topodra.dra.checkpoint import PreparedClaim, PreparedDevice
from topodra.dra.claims import (
    ClaimError,
    ClaimRef,
    allocated_devices,
    claim_configs,
    claim_memory,
    pod_consumers,
)
from topodra.dra.devices import Device

__all__ = ["Settled", "claim_from_api", "disputed", "settle"]


@dataclass(frozen=True, slots=True)
class Settled:
    """The claims to restore, and one line per decision taken."""

    claims: dict[str, PreparedClaim]
    notes: tuple[str, ...]


def disputed(claims: Mapping[str, PreparedClaim], specs: Mapping[str, CPUSet | None]) -> set[str]:
    """UIDs where the checkpoint and the CDI specs disagree (a spec of None is unreadable)."""
    out = {uid for uid in specs if uid not in claims}
    out |= {uid for uid, c in claims.items() if c.cpus and specs.get(uid) != c.cpus}
    return out


def claim_from_api(
    obj: Mapping[str, Any], cpus: CPUSet, devices: Mapping[str, Device], *, pool: str, driver: str
) -> PreparedClaim:
    """The prepared claim behind ``obj`` whose CPUs were ``cpus`` (ClaimError if they cannot be).

    Whole devices stand for their own CPUs; a share of a multi-allocatable
    device is the part of ``cpus`` inside it, of the consumed size.
    """
    meta = obj.get("metadata") or {}
    ref = ClaimRef(str(meta.get("namespace", "")), str(meta.get("uid", "")), str(meta.get("name", "")))
    allocated = allocated_devices(obj, ref, pool=pool, driver=driver)
    pods = pod_consumers(obj)
    if not allocated:
        raise ClaimError(f"claim {ref} has no {driver} device of pool {pool}")
    if not pods:
        raise ClaimError(f"claim {ref} is reserved for no pod")
    prepared: list[PreparedDevice] = []
    union = CPUSet()
    for a in allocated:
        device = devices.get(a.device)
        if device is None:
            raise ClaimError(f"claim {ref}: device {a.device!r} is not a device of this node")
        mine = device.cpus & cpus if device.allow_multiple_allocations and a.cpus is not None else device.cpus
        if a.cpus is not None and device.allow_multiple_allocations and len(mine) != a.cpus:
            raise ClaimError(f"claim {ref}: the spec's CPUs hold {len(mine)} of {a.device}, {a.cpus} were allocated")
        prepared.append(PreparedDevice(a.request, a.pool, a.device, mine, a.share_id))
        union |= mine
    if union != cpus:
        raise ClaimError(f"claim {ref}: its devices hold CPUs {union}, the CDI spec says {cpus}")
    memory = claim_memory(claim_configs(obj, ref, allocated, driver=driver))
    return PreparedClaim(ref.uid, ref.namespace, ref.name, cpus, tuple(prepared), pods, memory=memory)


def settle(
    claims: Mapping[str, PreparedClaim],
    specs: Mapping[str, CPUSet | None],
    api_claims: Iterable[Mapping[str, Any]],
    devices: Mapping[str, Device],
    *,
    pool: str,
    driver: str,
) -> Settled:
    """Decide every disputed claim with the API server's claims (see the module docstring)."""
    by_uid = {str((o.get("metadata") or {}).get("uid")): o for o in api_claims}
    out = dict(claims)
    notes: list[str] = []
    taken: dict[int, str] = {}
    for uid in sorted(disputed(claims, specs)):
        known = claims.get(uid)
        cpus = known.cpus if known is not None else specs.get(uid)
        obj = by_uid.get(uid)
        try:
            if cpus is None:
                raise ClaimError("its CDI spec is unreadable and the checkpoint does not have it")
            if obj is None:
                raise ClaimError("the API server has no claim with this UID")
            rebuilt = claim_from_api(obj, cpus, devices, pool=pool, driver=driver)
        except ClaimError as exc:
            out.pop(uid, None)
            notes.append(f"claim {uid}: not prepared here any more ({exc})")
            continue
        out[uid] = known if known is not None else rebuilt
        notes.append(f"claim {uid}: prepared on CPUs {cpus} ({'kept' if known else 'rebuilt from its CDI spec'})")
    for uid in sorted(out):  # no CPU in two claims, whatever the records said
        for cpu in out[uid].cpus:
            if cpu in taken:
                notes.append(f"claim {uid}: CPU {cpu} is also held by claim {taken[cpu]}; dropped")
                out.pop(uid)
                break
        else:
            for cpu in out[uid].cpus:
                taken[cpu] = uid
    return Settled(out, tuple(notes))
