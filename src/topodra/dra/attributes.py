"""Device attribute and capacity values, and the resource.k8s.io/v1 rules they must obey.

The apiserver rejects a whole ResourceSlice for one bad attribute, and the
scheduler then sees no devices at all, so every attribute is checked here
first, with an error that names the device and the attribute. Limits come
from resource.k8s.io/v1 (types.go constants); see docs/dra.md.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final, TypeAlias

__all__ = [
    "AttributeValidationError",
    "AttrValue",
    "Capacity",
    "Version",
    "attribute_from_api",
    "attribute_to_api",
    "capacity_to_api",
    "is_dns_label",
    "is_dns_subdomain",
    "is_list_value",
    "qualify",
    "validate_attributes",
    "validate_qualified_name",
    "MAX_ATTRIBUTES_AND_CAPACITIES",
    "MAX_ATTRIBUTE_VALUES",
    "MAX_STRING_LENGTH",
]

MAX_ATTRIBUTES_AND_CAPACITIES: Final = 32
MAX_ATTRIBUTE_VALUES: Final = 48  # scalar + list elements over all attributes (1.36+)
MAX_STRING_LENGTH: Final = 64
MAX_ID_LENGTH: Final = 32
MAX_DOMAIN_LENGTH: Final = 63
INT64_MIN: Final = -(1 << 63)
INT64_MAX: Final = (1 << 63) - 1

_C_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")
_DNS_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?\Z")
# semver 2.0.0, strict (no leading zeros, no "v" prefix); compiled on first use (``re``'s
# cache): only version attributes need it
_SEMVER = (
    r"(0|[1-9]\d*)\.(0|[1-9]\d*)\.(0|[1-9]\d*)"
    r"(?:-((?:0|[1-9]\d*|\d*[a-zA-Z-][0-9a-zA-Z-]*)(?:\.(?:0|[1-9]\d*|\d*[a-zA-Z-][0-9a-zA-Z-]*))*))?"
    r"(?:\+([0-9a-zA-Z-]+(?:\.[0-9a-zA-Z-]+)*))?\Z"
)


class AttributeValidationError(ValueError):
    """An attribute, capacity or device that the API server would reject."""

    def __init__(self, message: str, *, device: str = "", attribute: str = "") -> None:
        where = []
        if device:
            where.append(f"device {device!r}")
        if attribute:
            where.append(f"attribute {attribute!r}")
        super().__init__(f"{', '.join(where)}: {message}" if where else message)
        self.device = device
        self.attribute = attribute



@dataclass(frozen=True, slots=True)
class Version:
    """A semver attribute value (``{"version": "1.2.3"}`` in the API)."""

    text: str

    def __str__(self) -> str:
        return self.text


Scalar: TypeAlias = bool | int | str | Version
#: A device attribute value: a scalar, or a non-empty tuple of one scalar type (1.36 list attributes).
AttrValue: TypeAlias = bool | int | str | Version | tuple[bool, ...] | tuple[int, ...] | tuple[str, ...] | tuple[Version, ...]


@dataclass(frozen=True, slots=True)
class Capacity:
    """A device capacity: a whole-number value and an optional request policy.

    ``valid_range`` is (min, max, step); ``default`` is what a request that
    does not name the capacity consumes on a multi-allocatable device.
    """

    value: int
    default: int | None = None
    valid_range: tuple[int, int | None, int | None] | None = None

    def to_api(self) -> dict[str, Any]:
        return capacity_to_api(self)


def is_dns_label(name: str) -> bool:
    return len(name) <= 63 and bool(_DNS_LABEL.match(name))


def is_dns_subdomain(name: str) -> bool:
    return 0 < len(name) <= 253 and all(is_dns_label(part) for part in name.split("."))


def validate_qualified_name(name: str, *, device: str = "") -> None:
    """A QualifiedName: C identifier (≤ 32) or ``<DNS subdomain ≤ 63>/<C identifier ≤ 32>``."""
    domain, slash, ident = name.rpartition("/")
    if slash:
        if not domain:
            raise AttributeValidationError("the domain before '/' is empty", device=device, attribute=name)
        if len(domain) > MAX_DOMAIN_LENGTH or not is_dns_subdomain(domain):
            raise AttributeValidationError(
                f"domain {domain!r} must be a lower-case DNS subdomain of at most {MAX_DOMAIN_LENGTH} characters",
                device=device,
                attribute=name,
            )
    if not ident:
        raise AttributeValidationError("the name is empty", device=device, attribute=name)
    if len(ident) > MAX_ID_LENGTH:
        raise AttributeValidationError(
            f"name part {ident!r} is longer than {MAX_ID_LENGTH} characters", device=device, attribute=name
        )
    if not _C_IDENTIFIER.match(ident):
        raise AttributeValidationError(
            f"name part {ident!r} must be a C identifier ([A-Za-z_][A-Za-z0-9_]*)", device=device, attribute=name
        )


def qualify(name: str, driver: str) -> str:
    """The fully qualified form: unqualified names live in the driver's domain."""
    return name if "/" in name else f"{driver}/{name}"


def is_list_value(value: AttrValue) -> bool:
    return isinstance(value, tuple)


def _check_scalar(value: object, name: str, device: str) -> int:
    """Validate one scalar; returns its type index (for list homogeneity)."""
    if isinstance(value, bool):
        return 0
    if isinstance(value, int):
        if not INT64_MIN <= value <= INT64_MAX:
            raise AttributeValidationError(f"int value {value} does not fit in int64", device=device, attribute=name)
        return 1
    if isinstance(value, str):
        if len(value) > MAX_STRING_LENGTH:
            raise AttributeValidationError(
                f"string value is {len(value)} characters long; at most {MAX_STRING_LENGTH} are allowed",
                device=device,
                attribute=name,
            )
        return 2
    if isinstance(value, Version):
        if len(value.text) > MAX_STRING_LENGTH:
            raise AttributeValidationError(
                f"version value is longer than {MAX_STRING_LENGTH} characters", device=device, attribute=name
            )
        if not re.match(_SEMVER, value.text):
            raise AttributeValidationError(
                f"version value {value.text!r} is not a semantic version (semver 2.0.0, e.g. 1.2.3)",
                device=device,
                attribute=name,
            )
        return 3
    raise AttributeValidationError(
        f"value {value!r} has unsupported type {type(value).__name__}; use int, bool, str or Version",
        device=device,
        attribute=name,
    )


def validate_attributes(
    attributes: Mapping[str, AttrValue],
    capacity: Mapping[str, Capacity] | None = None,
    *,
    driver: str = "native.cpu",
    device: str = "",
) -> None:
    """Check a device's attributes and capacities against the resource.k8s.io/v1 rules.

    Qualified names, value types and lengths, int64 range, semver syntax,
    homogeneous non-empty lists, at most 32 attributes and capacities
    together, at most 48 values in all, and no name given twice (``x`` and
    ``<driver>/x`` are the same attribute).
    """
    capacity = capacity or {}
    total = len(attributes) + len(capacity)
    if total > MAX_ATTRIBUTES_AND_CAPACITIES:
        names = sorted([*attributes, *capacity])
        raise AttributeValidationError(
            f"{total} attributes and capacities; at most {MAX_ATTRIBUTES_AND_CAPACITIES} are allowed "
            f"(first over the limit: {names[MAX_ATTRIBUTES_AND_CAPACITIES]!r})",
            device=device,
        )
    seen: dict[str, str] = {}
    values = 0
    for name, value in attributes.items():
        if not isinstance(name, str):
            raise AttributeValidationError(f"attribute name {name!r} is not a string", device=device)
        validate_qualified_name(name, device=device)
        full = qualify(name, driver)
        if full in seen:
            raise AttributeValidationError(
                f"given twice (also as {seen[full]!r})", device=device, attribute=name
            )
        seen[full] = name
        if isinstance(value, tuple):
            if not value:
                raise AttributeValidationError("a list value must not be empty", device=device, attribute=name)
            kinds = {_check_scalar(v, name, device) for v in value}
            if len(kinds) != 1:
                raise AttributeValidationError("list elements must all have one type", device=device, attribute=name)
            values += len(value)
        else:
            _check_scalar(value, name, device)
            values += 1
    if values > MAX_ATTRIBUTE_VALUES:
        raise AttributeValidationError(
            f"{values} attribute values in all; at most {MAX_ATTRIBUTE_VALUES} are allowed", device=device
        )
    for name, cap in capacity.items():
        validate_qualified_name(name, device=device)
        full = qualify(name, driver)
        if full in seen and seen[full] in capacity:
            raise AttributeValidationError(
                f"capacity given twice (also as {seen[full]!r})", device=device, attribute=name
            )
        _validate_capacity(cap, name, device)


def _validate_capacity(cap: Capacity, name: str, device: str) -> None:
    if cap.value < 0:
        raise AttributeValidationError(f"capacity value {cap.value} is negative", device=device, attribute=name)
    if cap.valid_range is not None:
        lo, hi, step = cap.valid_range
        if lo < 0 or (hi is not None and hi < lo):
            raise AttributeValidationError(f"bad valid range {cap.valid_range}", device=device, attribute=name)
        if step is not None:
            if step <= 0:
                raise AttributeValidationError("range step must be positive", device=device, attribute=name)
            if lo + step > cap.value:
                raise AttributeValidationError(
                    f"range min + step ({lo + step}) exceeds the capacity value {cap.value}",
                    device=device,
                    attribute=name,
                )
            if hi is not None and hi % step:
                raise AttributeValidationError("range max must be a multiple of step", device=device, attribute=name)
            if cap.default is not None and cap.default % step:
                raise AttributeValidationError("default must be a multiple of step", device=device, attribute=name)
        if cap.default is not None and (cap.default < lo or (hi is not None and cap.default > hi)):
            raise AttributeValidationError(
                f"default {cap.default} lies outside the valid range", device=device, attribute=name
            )


_SCALAR_KEYS: Final = {"bool": bool, "int": int, "string": str, "version": Version}
_LIST_KEYS: Final = {"bools": bool, "ints": int, "strings": str, "versions": Version}


def attribute_to_api(value: AttrValue) -> dict[str, Any]:
    """The API's one-of form: ``{"int": 3}``, ``{"strings": ["a"]}``..."""
    if isinstance(value, tuple):
        first = value[0] if value else ""
        if isinstance(first, bool):
            return {"bools": list(value)}
        if isinstance(first, int):
            return {"ints": list(value)}
        if isinstance(first, Version):
            return {"versions": [v.text for v in value]}  # type: ignore[union-attr]
        return {"strings": list(value)}
    if isinstance(value, bool):
        return {"bool": value}
    if isinstance(value, int):
        return {"int": value}
    if isinstance(value, Version):
        return {"version": value.text}
    return {"string": value}


def attribute_from_api(raw: object, *, name: str = "", device: str = "") -> AttrValue:
    """Parse the API's one-of form, or a plain JSON scalar/list (config convenience)."""
    if isinstance(raw, bool | int | str):
        return raw
    if isinstance(raw, list):
        if not raw:
            raise AttributeValidationError("a list value must not be empty", device=device, attribute=name)
        if all(isinstance(v, bool) for v in raw):
            return tuple(bool(v) for v in raw)
        if all(isinstance(v, int) and not isinstance(v, bool) for v in raw):
            return tuple(int(v) for v in raw)
        if all(isinstance(v, str) for v in raw):
            return tuple(str(v) for v in raw)
        raise AttributeValidationError("list elements must all be ints, bools or strings", device=device, attribute=name)
    if isinstance(raw, dict):
        if len(raw) != 1:
            raise AttributeValidationError(
                f"exactly one of {sorted([*_SCALAR_KEYS, *_LIST_KEYS])} must be set, got {sorted(raw)}",
                device=device,
                attribute=name,
            )
        ((key, inner),) = raw.items()
        if key in _SCALAR_KEYS:
            kind = _SCALAR_KEYS[key]
            return _typed(inner, kind, key, name, device)
        if key in _LIST_KEYS:
            kind = _LIST_KEYS[key]
            if not isinstance(inner, list) or not inner:
                raise AttributeValidationError(f"{key!r} must be a non-empty list", device=device, attribute=name)
            return tuple(_typed(v, kind, key, name, device) for v in inner)  # type: ignore[return-value]
        raise AttributeValidationError(f"unknown value kind {key!r}", device=device, attribute=name)
    raise AttributeValidationError(f"value {raw!r} is not an attribute value", device=device, attribute=name)


def _typed(value: object, kind: type, key: str, name: str, device: str) -> bool | int | str | Version:
    if kind is Version:
        if not isinstance(value, str):
            raise AttributeValidationError(f"{key!r} must hold strings", device=device, attribute=name)
        return Version(value)
    ok = isinstance(value, bool) if kind is bool else isinstance(value, kind) and not isinstance(value, bool)
    if not ok:
        raise AttributeValidationError(f"{key!r} value {value!r} is not a {kind.__name__}", device=device, attribute=name)
    return value  # type: ignore[return-value]


def capacity_to_api(cap: Capacity) -> dict[str, Any]:
    out: dict[str, Any] = {"value": str(cap.value)}
    policy: dict[str, Any] = {}
    if cap.default is not None:
        policy["default"] = str(cap.default)
    if cap.valid_range is not None:
        lo, hi, step = cap.valid_range
        rng: dict[str, str] = {"min": str(lo)}
        if hi is not None:
            rng["max"] = str(hi)
        if step is not None:
            rng["step"] = str(step)
        policy["validRange"] = rng
    if policy:
        out["requestPolicy"] = policy
    return out
