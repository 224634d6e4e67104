"""The records one Allocate call works with (upstream's ``requestData``, ``deviceWithID``,
``internalDeviceResult`` and ``requestIndices`` / ``deviceIndices``), shared by the plain search
and the accelerations."""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

from topodra.quantity import Quantity
from topodra.sim.allocator.resourcepools import Pool
from topodra.sim.objects import Device, DeviceClass, DeviceID, RequestSpec, Slice

__all__ = ["Candidate", "MaxSizeExceeded", "PickedDevice", "RequestData", "RequestKey", "Slot"]

#: (claim index, request index, subrequest index): upstream's ``requestIndices``
RequestKey = tuple[int, int, int]


class MaxSizeExceeded(Exception):
    """Upstream's ``errAllocationResultMaxSizeExceeded``: a claim would get more than 32 results."""


@dataclass(slots=True)
class Candidate:
    """A device of a usable pool, by its position in search order (pools, slices, devices), with
    where it is (slice, pool) and whether its capacity always fits."""

    pos: int
    id: DeviceID
    device: Device
    slice: Slice
    pool: Pool
    simple_cap: bool = False  # exclusive, no request policy: consumes exactly its capacity, always fits


@dataclass(slots=True)
class RequestData:
    """Per-request state of one claim's search: its spec, class, device count and, for
    ``allocationMode: All``, its devices."""

    spec: RequestSpec
    parent: str | None  # parent request name for a subrequest
    cls: DeviceClass
    num_devices: int
    all_devices: list[Candidate] | None = None
    selected_sub: int = 0

    @property
    def name(self) -> str:
        return f"{self.parent}/{self.spec.name}" if self.parent else self.spec.name

    @property
    def base(self) -> str:
        return self.parent or self.spec.name

    @property
    def sub(self) -> str:
        return self.spec.name if self.parent else ""


@dataclass(slots=True)
class PickedDevice:
    """One device picked for a request, with its share id and consumed capacity."""

    rd: RequestData
    cand: Candidate
    share_id: str | None
    consumed: dict[str, Quantity] | None


class Slot(NamedTuple):
    """One ``allocateOne`` call that looks for a device: the device slot ``di`` of request
    ``(ci, ri, si)``, candidates from position ``start`` on (``in_sub``: inside a
    ``firstAvailable`` subrequest)."""

    ci: int
    ri: int
    si: int
    di: int
    in_sub: bool
    start: int
    rd: RequestData
    rkey: RequestKey
