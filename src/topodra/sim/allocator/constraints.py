"""Claim constraints (``matchAttribute``, ``distinctAttribute``) as the structured allocator keeps them.

Follows ``matchAttributeConstraint`` (in ``allocator_incubating.go``), ``distinctAttributeConstraint``
(``constraint.go``) and ``lookupAttribute`` of the incubating allocator (see the package docstring
for the upstream tree and commit). Upstream's ``add`` is split here into ``matches`` (does the
constraint name the request), ``accepts`` (would the value be taken, without changing anything)
and ``add`` (take it), so the accelerations can ask the first two on their own.

Attribute values are compared as upstream compares them: by type and value; a list-typed
value (``DRAListTypeAttributes`` is off by default in 1.36) equals nothing. Kept on purpose:
a ``distinctAttribute`` remembers one value per request name, so removing a device forgets
its request's value even when the request holds other devices.
"""

from __future__ import annotations

from typing import Any, ClassVar

from topodra.sim.objects import Constraint, Device

__all__ = ["ClaimConstraint", "DistinctAttributeConstraint", "MatchAttributeConstraint", "lookup_attribute", "make_constraint"]

#: an attribute value with its type: ("bool" | "int" | "string" | "version" | "list", value)
Typed = tuple[str, Any]


def _typed(value: Any) -> Typed:
    if isinstance(value, bool):
        return ("bool", value)
    if isinstance(value, int):
        return ("int", value)
    if isinstance(value, str):
        return ("string", value)
    if isinstance(value, list):
        return ("list", None)
    return ("version", str(value))


def lookup_attribute(device: Device, driver: str, name: str) -> Typed | None:
    """The device's attribute ``name`` (fully qualified, or unqualified for the device's own
    driver's domain), typed; None when the device has no such attribute."""
    if name in device.attributes:
        return _typed(device.attributes[name])
    i = name.find("/")
    if i < 0 or name[:i] != driver:
        return None
    bare = name[i + 1 :]
    if bare in device.attributes:
        return _typed(device.attributes[bare])
    return None


class ClaimConstraint:
    """One constraint of a claim during one Allocate call: the attribute it reads, the requests it
    names (none: all) and what the devices added so far hold (``num`` of them)."""

    __slots__ = ("name", "num", "requests", "stored", "values")
    distinct: ClassVar[bool] = False

    def __init__(self, c: Constraint) -> None:
        self.requests = c.requests
        self.name = (c.distinct_attribute or c.match_attribute) or ""
        self.num = 0
        self.values: dict[str, Typed] = {}  # distinct: per request name
        self.stored: Typed | None = None  # match: the fixed value

    def matches(self, base: str, sub: str) -> bool:
        """Whether the constraint applies to request ``base`` (subrequest ``sub``, or "")."""
        if not self.requests:
            return True
        if not sub:
            return base in self.requests
        return base in self.requests or f"{base}/{sub}" in self.requests

    def accepts(self, value: Typed | None) -> bool:  # pragma: no cover - each kind has its own
        raise NotImplementedError

    def add(self, base: str, value: Typed) -> None:  # pragma: no cover - each kind has its own
        raise NotImplementedError

    def remove(self, base: str) -> None:
        self.num -= 1


class MatchAttributeConstraint(ClaimConstraint):
    """``matchAttribute``: every device of the named requests has the same value; the first one fixes it."""

    __slots__ = ()
    distinct = False

    def accepts(self, value: Typed | None) -> bool:
        """Would ``add`` succeed (no mutation)?"""
        if value is None:
            return False
        if self.num == 0:
            return True
        assert self.stored is not None
        return value[0] != "list" and self.stored[0] == value[0] and self.stored[1] == value[1]

    def add(self, base: str, value: Typed) -> None:
        if self.num == 0:
            self.stored = value
        self.num += 1


class DistinctAttributeConstraint(ClaimConstraint):
    """``distinctAttribute``: no two devices of the named requests share a value (one kept per request name)."""

    __slots__ = ()
    distinct = True

    def accepts(self, value: Typed | None) -> bool:
        """Would ``add`` succeed (no mutation)?"""
        if value is None:
            return False
        if self.num == 0:
            return True
        if value[0] == "list":  # unknown to the scalar comparison: rejected by any stored value
            return not self.values
        return all(not (v[0] == value[0] and v[1] == value[1]) for v in self.values.values())

    def add(self, base: str, value: Typed) -> None:
        self.values[base] = value
        self.num += 1

    def remove(self, base: str) -> None:
        self.values.pop(base, None)
        self.num -= 1


def make_constraint(c: Constraint) -> ClaimConstraint:
    """The state of one claim constraint for a fresh Allocate call."""
    return DistinctAttributeConstraint(c) if c.distinct_attribute is not None else MatchAttributeConstraint(c)
