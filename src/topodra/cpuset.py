"""CPUSet: an immutable set of CPU ids with the kernel's list format.

The kernel prints CPU lists as comma-separated ids and ranges ("0-3,8,10-11"),
and accepts the same plus the ``a-b:used/group`` stride form on input
(``bitmap_parselist``). CPUSet parses strictly (errors quote the bad text) and
prints exactly what the kernel prints. Internally it is an int bitmask, so set
algebra is a handful of machine-word operations even for sparse ids like 4095.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator
from typing import Final

__all__ = ["CPUSet", "CPUSetParseError", "MAX_CPU_ID", "iter_bits", "parse_hexmask"]

#: Largest CPU id accepted by the parser (the kernel's NR_CPUS is at most 8192).
MAX_CPU_ID: Final = 8191

# The kernel trims only ASCII whitespace (a trailing newline) around a value.
_SPACE: Final = " \t\n\r\v\f"
# The kernel's mask format: comma-separated 32-bit words of 1-8 hex digits,
# most significant first ("ff,00000001"); no sign, prefix or separator.
_HEX_MASK: Final = re.compile(r"[0-9a-fA-F]{1,8}(?:,[0-9a-fA-F]{1,8})*")
# What the kernel prints: every word but the first padded to eight digits.
_PADDED_HEX_MASK: Final = re.compile(r"[0-9a-fA-F]{1,8}(?:,[0-9a-fA-F]{8})*")


def iter_bits(mask: int) -> Iterator[int]:
    """The set bits of ``mask``, lowest first: the one bit iteration of the project."""
    while mask:
        low = mask & -mask
        yield low.bit_length() - 1
        mask ^= low


class CPUSetParseError(ValueError):
    """Text that is not a valid kernel CPU list."""

    def __init__(self, text: str, reason: str) -> None:
        super().__init__(f"invalid CPU list {text!r}: {reason}")
        self.text = text
        self.reason = reason


def _parse_id(token: str, whole: str) -> int:
    if not token.isascii() or not token.isdigit():
        what = "not a CPU id or range" if token == whole.strip(_SPACE) else f"{token!r} is not a CPU id"
        raise CPUSetParseError(whole, what)
    value = int(token)
    if value > MAX_CPU_ID:
        raise CPUSetParseError(whole, f"CPU id {value} exceeds {MAX_CPU_ID}")
    return value


def _ranges(mask: int) -> Iterator[tuple[int, int]]:
    """Maximal runs of consecutive ids in ``mask`` as (first, last)."""
    while mask:
        low = (mask & -mask).bit_length() - 1
        run = mask >> low
        length = ((run + 1) & ~run).bit_length() - 1  # trailing ones
        yield low, low + length - 1
        mask &= ~(((1 << length) - 1) << low)


class CPUSet:
    """Immutable, hashable set of CPU ids, iterated in ascending order."""

    __slots__ = ("_mask", "_text")

    _mask: int
    _text: str | None  # the formatted list, cached (the set is immutable; replies format it often)

    def __init__(self, cpus: Iterable[int] = ()) -> None:
        mask = 0
        for cpu in cpus:
            if not isinstance(cpu, int) or isinstance(cpu, bool):
                raise TypeError(f"CPU id must be an int, got {cpu!r}")
            if cpu < 0 or cpu > MAX_CPU_ID:
                raise ValueError(f"CPU id {cpu} out of range 0..{MAX_CPU_ID}")
            mask |= 1 << cpu
        object.__setattr__(self, "_mask", mask)
        object.__setattr__(self, "_text", None)

    # construction -------------------------------------------------------
    @classmethod
    def from_mask(cls, mask: int) -> CPUSet:
        """Build from a bitmask (bit n set = CPU n)."""
        if mask < 0:
            raise ValueError("CPU mask must not be negative")
        if mask >> (MAX_CPU_ID + 1):
            raise ValueError(f"CPU mask has bits above {MAX_CPU_ID}")
        new = object.__new__(cls)
        object.__setattr__(new, "_mask", mask)
        object.__setattr__(new, "_text", None)
        return new

    @classmethod
    def parse(cls, text: str) -> CPUSet:
        """Parse the kernel list format; surrounding whitespace is ignored.

        Accepts ``N``, ``A-B`` and ``A-B:U/G`` (the first U of every G CPUs
        from A to B), comma separated. The empty string is the empty set.
        """
        whole = text
        body = text.strip(_SPACE)
        if not body:
            return _EMPTY
        mask = 0
        for part in body.split(","):
            if not part:
                raise CPUSetParseError(whole, "empty element between commas")
            stride: tuple[int, int] | None = None
            if ":" in part:
                part, _, groups = part.partition(":")
                used_s, slash, size_s = groups.partition("/")
                if not slash:
                    raise CPUSetParseError(whole, f"stride {groups!r} must be USED/GROUP")
                used, size = _parse_id(used_s, whole), _parse_id(size_s, whole)
                if used == 0 or size == 0 or used > size:
                    raise CPUSetParseError(whole, f"bad stride {used}/{size}")
                stride = (used, size)
            if "-" in part:
                lo_s, _, hi_s = part.partition("-")
                if not lo_s or not hi_s:
                    raise CPUSetParseError(whole, f"range {part!r} has no {'start (CPU ids are not negative)' if not lo_s else 'end'}")
                lo, hi = _parse_id(lo_s, whole), _parse_id(hi_s, whole)
                if lo > hi:
                    raise CPUSetParseError(whole, f"range {part!r} runs backwards")
            else:
                if stride is not None:
                    raise CPUSetParseError(whole, "a stride needs a range")
                lo = hi = _parse_id(part, whole)
            if stride is None:
                mask |= ((1 << (hi - lo + 1)) - 1) << lo
            else:
                used, size = stride
                for start in range(lo, hi + 1, size):
                    for cpu in range(start, min(start + used, hi + 1)):
                        mask |= 1 << cpu
        return cls.from_mask(mask)

    # formatting ---------------------------------------------------------
    def format(self) -> str:
        """The kernel list format: ascending ids, runs of two or more as A-B."""
        text = self._text
        if text is None:
            text = ",".join(str(lo) if lo == hi else f"{lo}-{hi}" for lo, hi in _ranges(self._mask))
            object.__setattr__(self, "_text", text)
        return text

    __str__ = format

    def __repr__(self) -> str:
        return f"CPUSet({self.format()!r})"

    # set protocol -------------------------------------------------------
    @property
    def mask(self) -> int:
        return self._mask

    def __iter__(self) -> Iterator[int]:
        return iter_bits(self._mask)

    def __len__(self) -> int:
        return self._mask.bit_count()

    def __bool__(self) -> bool:
        return self._mask != 0

    def __contains__(self, cpu: object) -> bool:
        return isinstance(cpu, int) and 0 <= cpu <= MAX_CPU_ID and bool(self._mask >> cpu & 1)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, CPUSet) and other._mask == self._mask

    def __hash__(self) -> int:
        return hash(("CPUSet", self._mask))

    def __setattr__(self, name: str, value: object) -> None:
        raise AttributeError("CPUSet is immutable")

    def __reduce__(self) -> tuple[object, tuple[int]]:
        return (CPUSet.from_mask, (self._mask,))

    # algebra ------------------------------------------------------------
    def __or__(self, other: CPUSet) -> CPUSet:
        return CPUSet.from_mask(self._mask | other._mask)

    def __and__(self, other: CPUSet) -> CPUSet:
        return CPUSet.from_mask(self._mask & other._mask)

    def __sub__(self, other: CPUSet) -> CPUSet:
        return CPUSet.from_mask(self._mask & ~other._mask)

    def __xor__(self, other: CPUSet) -> CPUSet:
        return CPUSet.from_mask(self._mask ^ other._mask)

    def __le__(self, other: CPUSet) -> bool:
        return self._mask & ~other._mask == 0

    def __lt__(self, other: CPUSet) -> bool:
        return self <= other and self._mask != other._mask

    def __ge__(self, other: CPUSet) -> bool:
        return other <= self

    def __gt__(self, other: CPUSet) -> bool:
        return other < self

    union = __or__
    intersection = __and__
    difference = __sub__
    symmetric_difference = __xor__
    issubset = __le__
    issuperset = __ge__

    def isdisjoint(self, other: CPUSet) -> bool:
        return self._mask & other._mask == 0

    def first(self) -> int:
        """Lowest id; ValueError when empty."""
        if not self._mask:
            raise ValueError("empty CPUSet has no first CPU")
        return (self._mask & -self._mask).bit_length() - 1

    def last(self) -> int:
        """Highest id; ValueError when empty."""
        if not self._mask:
            raise ValueError("empty CPUSet has no last CPU")
        return self._mask.bit_length() - 1


_EMPTY: Final = CPUSet()


def parse_hexmask(text: str) -> CPUSet:
    """Parse the kernel's hex mask format ("ff,00000001"), as in cpumap files.

    Only the kernel's format: comma-separated 32-bit words of one to eight
    hex digits, most significant first, with surrounding ASCII whitespace.
    Signs, ``0x``, ``_`` and spaces inside raise :class:`CPUSetParseError`,
    as does a bit above :data:`MAX_CPU_ID`. The empty string is the empty set.
    """
    body = text.strip(_SPACE)
    if not body:
        return _EMPTY
    if _PADDED_HEX_MASK.fullmatch(body):
        mask = int(body.replace(",", ""), 16)
    elif _HEX_MASK.fullmatch(body):
        mask = 0
        for w in body.split(","):
            mask = (mask << 32) | int(w, 16)
    else:
        raise CPUSetParseError(text, "not a kernel hex CPU mask (comma-separated 32-bit hex words)")
    if mask >> (MAX_CPU_ID + 1):
        raise CPUSetParseError(text, f"sets a CPU above {MAX_CPU_ID}")
    return CPUSet.from_mask(mask)
