"""Kubernetes ``resource.Quantity``: exact parsing, comparison and formatting.

Quantities appear in device capacities, capacity requests, request policies,
shared counters and pod resources; the simulator, the DRA driver, the API
server double, the policy and the playground all parse them here. They are kept as exact ``Fraction`` values so that sums
and comparisons never round; ``value()`` rounds up to an integer as Go's
``Quantity.Value()`` does (used by the ``validRange.step`` arithmetic).
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from fractions import Fraction

__all__ = ["Quantity", "QuantityError", "cpu_milli", "memory_bytes", "parse_quantity"]


class QuantityError(ValueError):
    """A string that is not a Kubernetes quantity."""


_BINARY = {"Ki": 1024, "Mi": 1024**2, "Gi": 1024**3, "Ti": 1024**4, "Pi": 1024**5, "Ei": 1024**6}
_DECIMAL = {
    "n": Fraction(1, 10**9),
    "u": Fraction(1, 10**6),
    "m": Fraction(1, 10**3),
    "": Fraction(1),
    "k": Fraction(10**3),
    "M": Fraction(10**6),
    "G": Fraction(10**9),
    "T": Fraction(10**12),
    "P": Fraction(10**15),
    "E": Fraction(10**18),
}
_RE = re.compile(r"^([+-]?)([0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:(Ki|Mi|Gi|Ti|Pi|Ei|n|u|m|k|M|G|T|P|E)|[eE]([+-]?[0-9]+))?$")


@dataclass(frozen=True, slots=True)
class Quantity:
    """An exact quantity plus the format it was written in (for output)."""

    amount: Fraction
    format: str = "DecimalSI"  # "BinarySI" | "DecimalSI" | "DecimalExponent"

    @staticmethod
    def parse(text: str) -> Quantity:
        return parse_quantity(text)

    @staticmethod
    def of(value: int | Fraction, fmt: str = "DecimalSI") -> Quantity:
        return Quantity(Fraction(value), fmt)

    # arithmetic and comparison -------------------------------------------
    def __add__(self, other: Quantity) -> Quantity:
        return Quantity(self.amount + other.amount, self.format)

    def __sub__(self, other: Quantity) -> Quantity:
        return Quantity(self.amount - other.amount, self.format)

    def __lt__(self, other: Quantity) -> bool:
        return self.amount < other.amount

    def __le__(self, other: Quantity) -> bool:
        return self.amount <= other.amount

    def __gt__(self, other: Quantity) -> bool:
        return self.amount > other.amount

    def __ge__(self, other: Quantity) -> bool:
        return self.amount >= other.amount

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Quantity) and self.amount == other.amount

    def __hash__(self) -> int:
        return hash(self.amount)

    def cmp(self, other: Quantity) -> int:
        return (self.amount > other.amount) - (self.amount < other.amount)

    def value(self) -> int:
        """Integer value rounded up (away from zero), as Go's ``Value()``."""
        a = self.amount
        return math.ceil(a) if a >= 0 else -math.ceil(-a)

    def is_zero(self) -> bool:
        return self.amount == 0

    def __str__(self) -> str:
        return format_quantity(self.amount, self.format)

    def __repr__(self) -> str:
        return f"Quantity({self})"


def parse_quantity(text: object) -> Quantity:
    """Parse ``"4"``, ``"1500m"``, ``"1Gi"``, ``"1e3"``; ints are accepted too."""
    if isinstance(text, bool):
        raise QuantityError(f"quantity must be a string or number, got {text!r}")
    if isinstance(text, int):
        return Quantity(Fraction(text))
    if isinstance(text, float):
        return Quantity(Fraction(str(text)))
    if not isinstance(text, str):
        raise QuantityError(f"quantity must be a string or number, got {type(text).__name__}")
    m = _RE.match(text.strip())
    if not m or text.strip() in ("", "+", "-"):
        raise QuantityError(f"quantities must match the regular expression '^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$': {text!r}")
    sign, number, suffix, exponent = m.groups()
    amount = Fraction(number)
    if exponent is not None:
        if abs(int(exponent)) > 30:  # Kubernetes caps quantities far below this; keep Fractions small
            raise QuantityError(f"quantity {text!r} is out of range")
        amount *= Fraction(10) ** int(exponent)
        fmt = "DecimalExponent"
    elif suffix in _BINARY:
        amount *= _BINARY[suffix]
        fmt = "BinarySI"
    else:
        amount *= _DECIMAL[suffix or ""]
        fmt = "DecimalSI"
    if sign == "-":
        amount = -amount
    return Quantity(amount, fmt)


def format_quantity(amount: Fraction, fmt: str = "DecimalSI") -> str:
    """Canonical text in the spirit of Kubernetes: the largest exact suffix.

    Values that are not a multiple of a nano-unit are rounded up to one, as
    Kubernetes does when it canonicalises.
    """
    if amount == 0:
        return "0"
    sign = "-" if amount < 0 else ""
    a = -amount if amount < 0 else amount
    if fmt == "BinarySI" and a.denominator == 1 and a >= 1024:
        n = a.numerator
        for suffix, mult in reversed(list(_BINARY.items())):
            if n % mult == 0:
                return f"{sign}{n // mult}{suffix}"
    nanos = math.ceil(a * 10**9)
    for suffix, exp in (("E", 27), ("P", 24), ("T", 21), ("G", 18), ("M", 15), ("k", 12), ("", 9), ("m", 6), ("u", 3), ("n", 0)):
        if nanos % 10**exp == 0:
            mant = nanos // 10**exp
            if fmt == "DecimalExponent" and exp >= 9:
                e = exp - 9
                return f"{sign}{mant}" + (f"e{e}" if e else "")
            return f"{sign}{mant}{suffix}"
    return f"{sign}{nanos}n"  # unreachable: exp 0 always divides


def _amount(value: object, what: str, example: str) -> Fraction:
    """The exact, non-negative amount of ``value``; errors name ``what`` and show an example."""
    try:
        amount = parse_quantity(value).amount
    except (QuantityError, ValueError, OverflowError):  # floats: nan and inf are not quantities
        raise QuantityError(f"{what}: expected a {example}, got {value!r}") from None
    if amount < 0:
        raise QuantityError(f"{what}: expected a {example}, got {value!r}, which is negative")
    return amount


def cpu_milli(value: object, what: str = "cpu") -> int:
    """A CPU quantity (``2``, ``750m``, ``1.5``, ``2e0``) in milli-CPU, rounded up as the
    kubelet's ``MilliValue()`` does."""
    return math.ceil(_amount(value, what, "CPU quantity like 2, 1.5 or 750m") * 1000)


def memory_bytes(value: object, what: str = "memory") -> int:
    """A memory quantity (``512Mi``, ``1G``, ``1k``, ``1000``) in bytes, rounded up as the
    kubelet's ``Value()`` does (``1m`` is one byte)."""
    return math.ceil(_amount(value, what, "memory quantity like 512Mi or 2G"))
