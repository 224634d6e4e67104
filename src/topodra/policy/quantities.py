"""CPU and memory amounts in policy inputs, read with the project's one Kubernetes quantity grammar.

``topodra.quantity`` parses; this module only converts to the units the policy
counts in and rounds the way the kubelet does (``MilliValue()`` for CPU,
``Value()`` for memory: up). Errors are ``ValueError`` naming the field.
"""

from __future__ import annotations

import math
from fractions import Fraction

from topodra.quantity import QuantityError, parse_quantity

__all__ = ["cpu_milli", "memory_bytes"]


def _amount(value: object, what: str, example: str) -> Fraction:
    try:
        amount = parse_quantity(value).amount
    except (QuantityError, ValueError, OverflowError):  # floats: nan and inf are not quantities
        raise ValueError(f"{what}: expected a {example}, got {value!r}") from None
    if amount < 0:
        raise ValueError(f"{what}: expected a {example}, got {value!r}, which is negative")
    return amount


def cpu_milli(value: object, what: str) -> int:
    """A CPU quantity (``2``, ``750m``, ``1.5``, ``2e0``) in milli-CPU, rounded up."""
    return math.ceil(_amount(value, what, "CPU quantity like 2, 1.5 or 750m") * 1000)


def memory_bytes(value: object, what: str) -> int:
    """A memory quantity (``512Mi``, ``1G``, ``1k``, ``1000``) in bytes, rounded up.

    Milli-bytes and smaller (``1m``) are Kubernetes-legal but always a slip for
    ``1M`` or ``1Mi``; they are refused.
    """
    example = "memory quantity like 512Mi or 2G"
    if isinstance(value, str) and value.strip()[-1:] in ("m", "u", "n"):
        raise ValueError(f"{what}: expected a {example}, got {value!r} (a fraction of a byte: did you mean M or Mi?)")
    return math.ceil(_amount(value, what, example))
