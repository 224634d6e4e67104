"""Consumable capacity (``DRAConsumableCapacity``, beta and on in Kubernetes 1.36): what a request
consumes of a device's capacity under its ``requestPolicy`` and whether it still fits.

Follows ``consumable_capacity.go`` of the incubating allocator (see the package docstring for
the upstream tree and commit): ``cmp_request_over_capacity`` is ``CmpRequestOverCapacity``
(a request naming a capacity the device lacks does not fit; otherwise every capacity's
consumption, added to what is allocated and what this call is allocating, must stay within
its value and its policy), ``consumed_capacity`` is ``calculateConsumedCapacity`` (the
policy's default when nothing is requested, else the request rounded up to the policy's
range step or next valid value) and ``violates_policy`` is ``violatesPolicy``. Integer
division and remainder truncate toward zero, as Go's do.
"""

from __future__ import annotations

from collections.abc import Mapping
from fractions import Fraction

from topodra.quantity import Quantity
from topodra.sim.objects import Capacity, Device

__all__ = ["cmp_request_over_capacity", "consumed_capacity", "violates_policy"]

_ZERO = Fraction(0)


def cmp_request_over_capacity(
    device: Device,
    requests: Mapping[str, Quantity] | None,
    allocated: Mapping[str, Fraction],
    allocating: Mapping[str, Fraction],
) -> bool:
    """Whether a request (``requests``: its capacity requests, by capacity name) fits the device,
    given what other pods hold (``allocated``) and what this call holds already (``allocating``)."""
    if not requests and not device.allow_multiple and not any(c.policy for c in device.capacity.values()):
        return True  # consumed == value for every capacity: always fits (fast path)
    if requests:
        for name in requests:
            if name not in device.capacity:
                return False
    for name, cap in device.capacity.items():
        consumed = consumed_capacity(requests.get(name) if requests else None, cap)
        if violates_policy(consumed, cap):
            return False
        total = allocated.get(name, _ZERO) + consumed.amount + allocating.get(name, _ZERO)
        if total > cap.value.amount:
            return False
    return True


def consumed_capacity(requested: Quantity | None, cap: Capacity) -> Quantity:
    """What a request of ``requested`` (None: nothing named) consumes of capacity ``cap``."""
    pol = cap.policy
    if requested is None:
        if pol is not None and pol.default is not None:
            return pol.default
        return cap.value
    if pol is None:
        return requested
    if pol.has_range and pol.range_min is not None:
        if requested < pol.range_min:
            return pol.range_min
        if pol.range_step is None:
            return requested
        req, step, mn = requested.value(), pol.range_step.value(), pol.range_min.value()
        added = req - mn
        n = _go_div(added, step)
        if _go_mod(added, step) != 0:
            n += 1
        return Quantity.of(mn + step * n, "BinarySI")
    if pol.valid_values:
        for v in pol.valid_values:
            if requested <= v:
                return v
        return requested
    return requested


def violates_policy(value: Quantity, cap: Capacity) -> bool:
    """Whether consuming ``value`` breaks the capacity's ``requestPolicy``."""
    pol = cap.policy
    if pol is None:
        return False
    if pol.default is not None and value == pol.default:
        return False
    if pol.has_range:
        if pol.range_max is not None and value > pol.range_max:
            return True
        if pol.range_step is not None and pol.range_min is not None:
            return _go_mod(value.value() - pol.range_min.value(), pol.range_step.value()) != 0
        return False
    if pol.valid_values:
        return all(value != v for v in pol.valid_values)
    return False


def _go_div(a: int, b: int) -> int:
    q = abs(a) // abs(b)
    return q if (a >= 0) == (b >= 0) else -q


def _go_mod(a: int, b: int) -> int:
    return a - b * _go_div(a, b)
