"""Kubernetes resource quantities as the kubelet reads them (CPU in milli, memory in bytes)."""

from __future__ import annotations

import math
from fractions import Fraction

from topodra.quantity import Quantity, QuantityError

__all__ = ["QuantityError", "cpu_milli", "memory_bytes"]


def _parse(value: object, what: str) -> Fraction:
    text = str(value).strip() if isinstance(value, int | float | str) and not isinstance(value, bool) else None
    if text is None:
        raise QuantityError(f"{what}: expected a quantity like 2, 500m or 100Mi, got {value!r}")
    try:
        amount = Quantity.parse(text).amount
    except QuantityError as err:
        raise QuantityError(f"{what}: {err}") from None
    if amount < 0:
        raise QuantityError(f"{what}: must not be negative, got {value!r}")
    return amount


def cpu_milli(value: object) -> int:
    """CPU quantity in milli-CPUs, rounded up (``1`` -> 1000, ``250m`` -> 250)."""
    return math.ceil(_parse(value, "cpu") * 1000)


def memory_bytes(value: object) -> int:
    """Memory quantity in bytes, rounded up (``100M`` -> 100000000, ``1Gi`` -> 1073741824)."""
    return math.ceil(_parse(value, "memory"))
