"""The API server's validation rules for the objects the double stores.

Enough of the real rules that a driver bug (a 129-device slice, a bad
attribute name, a changed pool name, a missing slice count) is rejected here
exactly as a real resource.k8s.io/v1 API server would reject it, with the
field path in the error. Limits: docs/dra.md and resource.k8s.io/v1 types.go.

Written from the API's rules, independently of the driver's own validator
(``topodra.dra.attributes``): a bug there must not be hidden by the double
sharing it. Only the quantity grammar is shared (``topodra.quantity``).
"""

from __future__ import annotations

import importlib.util
import json
import re
from collections.abc import Callable, Mapping
from fractions import Fraction
from typing import Any, Final

from topodra.kube.errors import FieldError
from topodra.quantity import QuantityError, format_quantity
from topodra.quantity import parse_quantity as _parse_quantity

__all__ = ["SELECTOR_VALIDATORS", "VALIDATORS", "validate_metadata", "Validator"]

Validator = Callable[[Mapping[str, Any], Mapping[str, Any] | None], list[FieldError]]
#: Validators whose objects hold selectors; they take ``lists`` (the ``DRAListTypeAttributes`` gate).
SelectorValidator = Callable[..., list[FieldError]]

MAX_DEVICES: Final = 128
MAX_DEVICES_ADVANCED: Final = 64
MAX_TAINTS: Final = 16
MAX_REQUESTS: Final = 32
MAX_SELECTORS: Final = 32
MAX_CEL_LENGTH: Final = 10 * 1024
MAX_RESULTS: Final = 32
MAX_RESERVED_FOR: Final = 256
MAX_SUBREQUESTS: Final = 8
MAX_COUNTER_SETS: Final = 8
MAX_ATTRIBUTES_AND_CAPACITIES: Final = 32
MAX_ATTRIBUTE_VALUES: Final = 48
MAX_VALUE_LENGTH: Final = 64
MAX_ID_LENGTH: Final = 32
MAX_DOMAIN_LENGTH: Final = 63
MAX_DEVICE_STATUS_CONDITIONS: Final = 8
MAX_DEVICE_STATUS_DATA: Final = 10 * 1024
MAX_NETWORK_IPS: Final = 16
_CONDITION_REASON: Final = re.compile(r"[A-Za-z]([A-Za-z0-9_,:]*[A-Za-z0-9_])?\Z")
_CONDITION_STATUSES: Final = ("True", "False", "Unknown")
_DNS_1123_LABEL: Final = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?\Z")
_C_IDENT: Final = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")
_NUMERIC_ID = r"0|[1-9][0-9]*"
_PRE_ID = rf"(?:{_NUMERIC_ID}|[0-9]*[A-Za-z-][0-9A-Za-z-]*)"
_SEMVER_2: Final = re.compile(
    rf"({_NUMERIC_ID})\.({_NUMERIC_ID})\.({_NUMERIC_ID})(?:-{_PRE_ID}(?:\.{_PRE_ID})*)?(?:\+[0-9A-Za-z-]+(?:\.[0-9A-Za-z-]+)*)?\Z"
)
#: DeviceAttribute: exactly one of these members, with the Go type each holds.
_SCALAR_MEMBERS: Final = {"bool": bool, "int": int, "string": str, "version": str}
_LIST_MEMBERS: Final = {"bools": bool, "ints": int, "strings": str, "versions": str}
_INT64 = (-(1 << 63), (1 << 63) - 1)
_LABEL_VALUE: Final = re.compile(r"(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?\Z")
_LABEL_NAME: Final = re.compile(r"([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]\Z")


def _m(value: Any) -> Mapping[str, Any]:
    """The value if it is an object, else an empty one (shape errors are reported where they matter)."""
    return value if isinstance(value, Mapping) else {}


def _l(value: Any) -> list[Any]:
    return value if isinstance(value, list) else []


def _req(errors: list[FieldError], obj: Mapping[str, Any], key: str, path: str) -> Any:
    value = obj.get(key)
    if value is None or value == "":
        errors.append(FieldError(f"{path}.{key}", "Required value", "FieldValueRequired"))
    return value


def _label_key_ok(key: str) -> bool:
    prefix, slash, name = key.rpartition("/")
    if slash and not is_dns_subdomain(prefix):
        return False
    return len(name) <= 63 and bool(_LABEL_NAME.match(name))


def validate_metadata(meta: Mapping[str, Any], *, namespaced: bool, dns_label: bool = False) -> list[FieldError]:
    errors: list[FieldError] = []
    name = meta.get("name")
    if not name:
        errors.append(FieldError("metadata.name", "name or generateName is required", "FieldValueRequired"))
    elif not isinstance(name, str):
        errors.append(FieldError("metadata.name", f"Invalid value: {name!r}: must be a string"))
    else:
        errors += _invalid("metadata.name", name, _dns_label_problems(name) if dns_label else _dns_subdomain_problems(name))
    if namespaced:
        ns = meta.get("namespace")
        if not ns:
            errors.append(FieldError("metadata.namespace", "Required value", "FieldValueRequired"))
        elif not isinstance(ns, str):
            errors.append(FieldError("metadata.namespace", f"Invalid value: {ns!r}: must be a string"))
        else:
            errors += _invalid("metadata.namespace", ns, _dns_label_problems(ns))
    for key, value in _m(meta.get("labels")).items():
        if not isinstance(key, str) or not _label_key_ok(key):
            errors.append(FieldError("metadata.labels", f"Invalid value: {key!r}: not a valid label key"))
        if not isinstance(value, str) or len(value) > 63 or not _LABEL_VALUE.match(value):
            errors.append(FieldError(f"metadata.labels[{key}]", f"Invalid value: {value!r}: not a valid label value"))
    return errors


# --- ResourceSlice ------------------------------------------------------------------------------

def is_dns_label(name: object) -> bool:
    """RFC 1123 label: lower-case alphanumerics and '-', at most 63 (a non-string is not one)."""
    return isinstance(name, str) and len(name) <= 63 and bool(_DNS_1123_LABEL.match(name))


def is_dns_subdomain(name: object) -> bool:
    """RFC 1123 subdomain: dot-separated labels, at most 253 in all (a non-string is not one)."""
    return isinstance(name, str) and 0 < len(name) <= 253 and all(is_dns_label(p) for p in name.split("."))


def parse_quantity(text: Any) -> Fraction:
    """A resource.Quantity as the API server parses it (strings only)."""
    if not isinstance(text, str):
        raise ValueError(f"quantity {text!r} must be a string")
    try:
        return _parse_quantity(text).amount
    except QuantityError:
        raise ValueError(f"quantities must match the regular expression of resource.Quantity, got {text!r}") from None


def _qualified_name_errors(name: Any, path: str) -> list[FieldError]:
    """QualifiedName: a C identifier of at most 32, optionally after '<DNS subdomain of at most 63>/'."""
    if not isinstance(name, str):
        return [FieldError(path, f"Invalid value: {name!r}: must be a string")]
    domain, slash, ident = name.rpartition("/")
    out = []
    if slash and (not domain or len(domain) > MAX_DOMAIN_LENGTH or not is_dns_subdomain(domain)):
        out.append(FieldError(path, f"Invalid value: {domain!r}: the domain must be a DNS subdomain of at most {MAX_DOMAIN_LENGTH} characters"))
    if not ident or len(ident) > MAX_ID_LENGTH or not _C_IDENT.match(ident):
        out.append(FieldError(path, f"Invalid value: {ident!r}: must be a C identifier of at most {MAX_ID_LENGTH} characters"))
    return out


def _value_errors(member: str, value: Any, path: str) -> list[FieldError]:
    kind = _SCALAR_MEMBERS.get(member) or _LIST_MEMBERS[member]
    if kind is int and (isinstance(value, bool) or not isinstance(value, int)):
        return [FieldError(path, f"Invalid value: {value!r}: must be an integer")]
    if kind is int and not _INT64[0] <= value <= _INT64[1]:
        return [FieldError(path, f"Invalid value: {value}: out of int64 range")]
    if kind is not int and not isinstance(value, kind):
        return [FieldError(path, f"Invalid value: {value!r}: must be a {kind.__name__}")]
    errors = []
    if member in ("version", "versions") and not _SEMVER_2.match(value):
        errors.append(FieldError(path, f"Invalid value: {json.dumps(value)}: must be a string compatible with semver.org spec 2.0.0"))
    if kind is str and len(value) > MAX_VALUE_LENGTH:
        errors.append(FieldError(path, f"Too long: may not be more than {MAX_VALUE_LENGTH} bytes", "FieldValueTooLong"))
    return errors


#: The API's DeviceAttribute members in validateDeviceAttribute's order, with the internal Go
#: type's field names (which name them in an "exactly one value" error's value).
_MEMBER_ORDER: Final = ("bool", "int", "string", "version", "bools", "ints", "strings", "versions")
_GO_FIELDS: Final = (
    ("int", "IntValue"),
    ("bool", "BoolValue"),
    ("string", "StringValue"),
    ("version", "VersionValue"),
    ("ints", "IntValues"),
    ("bools", "BoolValues"),
    ("strings", "StringValues"),
    ("versions", "VersionValues"),
)


def _attribute_entries(raw: Any) -> int:
    """``numEntriesDeviceAttribute``: the values an attribute counts for the 48-value limit."""
    lists = [raw.get(k) for k in _LIST_MEMBERS] if isinstance(raw, Mapping) else []
    n = sum(len(v) for v in lists if isinstance(v, list))
    return n or 1


def _attribute_errors(raw: Any, path: str) -> list[FieldError]:
    """One DeviceAttribute as ``validateDeviceAttribute`` checks it: each member given (not null),
    then exactly one of them."""
    if not isinstance(raw, Mapping):
        return [FieldError(path, "must be a DeviceAttribute object")]
    unknown = [k for k in raw if k not in _SCALAR_MEMBERS and k not in _LIST_MEMBERS]
    if unknown:
        return [FieldError(path, f"unknown field(s) {sorted(unknown)}")]
    members = [k for k in _MEMBER_ORDER if raw.get(k) is not None]
    errors: list[FieldError] = []
    for member in members:
        value = raw[member]
        if member in _SCALAR_MEMBERS:
            errors.extend(_value_errors(member, value, f"{path}.{member}"))
        elif not isinstance(value, list):
            errors.append(FieldError(f"{path}.{member}", f"Invalid value: {value!r}: must be a list"))
        elif not value:
            errors.append(FieldError(f"{path}.{member}", "Invalid value: []: must not be empty if specified"))
        else:
            errors.extend(e for i, v in enumerate(value) for e in _value_errors(member, v, f"{path}.{member}[{i}]"))
    if not members:
        errors.append(FieldError(path, 'Invalid value: "": exactly one value must be specified'))
    elif len(members) > 1:
        shown = json.dumps({go: raw.get(k) for k, go in _GO_FIELDS}, separators=(",", ":"))
        errors.append(FieldError(path, f"Invalid value: {shown}: exactly one value must be specified"))
    return errors


def _validate_capacity(raw: Any, path: str, errors: list[FieldError]) -> None:
    if not isinstance(raw, Mapping) or "value" not in raw:
        errors.append(FieldError(f"{path}.value", "Required value", "FieldValueRequired"))
        return
    try:
        value = parse_quantity(raw["value"])
    except ValueError as exc:
        errors.append(FieldError(f"{path}.value", f"Invalid value: {exc}"))
        return
    policy = raw.get("requestPolicy")
    if policy is not None:
        if not isinstance(policy, Mapping):
            errors.append(FieldError(f"{path}.requestPolicy", "must be an object"))
        elif "validRange" in policy and "validValues" in policy:
            errors.append(FieldError(f"{path}.requestPolicy", "validRange and validValues are mutually exclusive"))
        else:
            try:
                default = parse_quantity(policy["default"]) if "default" in policy else None
                rng = policy.get("validRange")
                if isinstance(rng, Mapping):
                    lo = parse_quantity(_need(rng, "min"))
                    hi = parse_quantity(rng["max"]) if "max" in rng else None
                    step = parse_quantity(rng["step"]) if "step" in rng else None
                    if hi is not None and hi < lo:
                        errors.append(FieldError(f"{path}.requestPolicy.validRange.max", "must not be less than min"))
                    if step is not None and (step <= 0 or lo + step > value):
                        errors.append(
                            FieldError(f"{path}.requestPolicy.validRange.step", "min + step must not exceed the capacity value")
                        )
                    if default is not None and (default < lo or (hi is not None and default > hi)):
                        errors.append(FieldError(f"{path}.requestPolicy.default", "must lie within validRange"))
                values = policy.get("validValues")
                if values is not None:
                    parsed = [parse_quantity(v) for v in values]
                    if len(parsed) > 10 or parsed != sorted(set(parsed)):
                        errors.append(FieldError(f"{path}.requestPolicy.validValues", "at most 10, ascending, unique"))
                    if default is not None and default not in parsed:
                        errors.append(FieldError(f"{path}.requestPolicy.default", "must be one of validValues"))
            except (ValueError, KeyError) as exc:
                errors.append(FieldError(f"{path}.requestPolicy", f"Invalid value: {exc}"))
    if value < 0:
        errors.append(FieldError(f"{path}.value", f"Invalid value: {raw['value']!r}: must not be negative"))


def _need(obj: Mapping[str, Any], key: str) -> Any:
    if key not in obj:
        raise KeyError(f"{key} is required")
    return obj[key]


def _device_is_advanced(device: Mapping[str, Any]) -> bool:
    if device.get("taints") or device.get("consumesCounters"):
        return True
    return any(
        isinstance(v, Mapping) and any(k in v for k in ("ints", "bools", "strings", "versions"))
        for v in _m(device.get("attributes")).values()
    )


def _validate_device(device: Any, path: str, driver: str, errors: list[FieldError]) -> None:
    if not isinstance(device, Mapping):
        errors.append(FieldError(path, "must be an object"))
        return
    name = device.get("name")
    if not name or not isinstance(name, str) or not is_dns_label(name):
        errors.append(FieldError(f"{path}.name", f"Invalid value: {name!r}: must be a DNS label"))
        name = str(name)
    raw_attrs = device.get("attributes") or {}
    raw_caps = device.get("capacity") or {}
    for field, value in (("attributes", raw_attrs), ("capacity", raw_caps)):
        if not isinstance(value, Mapping):
            errors.append(FieldError(f"{path}.{field}", "must be a map"))
    raw_attrs, raw_caps = _m(raw_attrs), _m(raw_caps)
    total = len(raw_attrs) + len(raw_caps)
    if total > MAX_ATTRIBUTES_AND_CAPACITIES:
        errors.append(FieldError(path, f"Too many: {total}: must have at most {MAX_ATTRIBUTES_AND_CAPACITIES} attributes and capacities combined", "FieldValueTooMany"))
    values = sum(_attribute_entries(raw) for raw in raw_attrs.values())
    if values > MAX_ATTRIBUTE_VALUES:
        errors.append(FieldError(path, f"Invalid value: {values}: the total number of attribute values must not exceed {MAX_ATTRIBUTE_VALUES}"))
    # An unqualified name lives in the driver's domain: "x" and "<driver>/x" are the same key.
    full_names: dict[str, str] = {}
    for key, raw in raw_attrs.items():
        errors.extend(_qualified_name_errors(key, f"{path}.attributes[{key}]"))
        full = key if "/" in str(key) else f"{driver}/{key}"
        if full in full_names:
            errors.append(FieldError(f"{path}.attributes[{key}]", f"Duplicate value: also given as {full_names[full]!r}", "FieldValueDuplicate"))
        full_names[full] = str(key)
        errors.extend(_attribute_errors(raw, f"{path}.attributes[{key}]"))
    cap_names: set[str] = set()
    for key, raw in raw_caps.items():
        errors.extend(_qualified_name_errors(key, f"{path}.capacity[{key}]"))
        full = key if "/" in str(key) else f"{driver}/{key}"
        if full in cap_names:
            errors.append(FieldError(f"{path}.capacity[{key}]", "Duplicate value", "FieldValueDuplicate"))
        cap_names.add(full)
        _validate_capacity(raw, f"{path}.capacity[{key}]", errors)
        if isinstance(raw, Mapping) and raw.get("requestPolicy") and not device.get("allowMultipleAllocations"):
            errors.append(FieldError(f"{path}.capacity[{key}].requestPolicy", "requires allowMultipleAllocations"))
    taints = _l(device.get("taints"))
    if len(taints) > MAX_TAINTS:
        errors.append(FieldError(f"{path}.taints", f"Too many: {len(taints)}: must have at most {MAX_TAINTS} items", "FieldValueTooMany"))
    else:
        for i, t in enumerate(taints):
            errors.extend(_taint_errors(_m(t), f"{path}.taints[{i}]"))
    if len(_l(device.get("consumesCounters"))) > 2:
        errors.append(FieldError(f"{path}.consumesCounters", "must have at most 2 items", "FieldValueTooMany"))
    _validate_node_allocatable(device.get("nodeAllocatableResourceMappings"), raw_caps, f"{path}.nodeAllocatableResourceMappings", errors)


def _is_native_resource(name: str) -> bool:
    """v1helper.IsNativeResource: unprefixed, or in the kubernetes.io/ namespace."""
    return "/" not in name or "kubernetes.io/" in name


def _validate_node_allocatable(raw: Any, capacities: Mapping[str, Any], path: str, errors: list[FieldError]) -> None:
    """validateNodeAllocatableResourceMappings (pkg/apis/resource/validation/validation.go, v1.36.2),
    its words, keys in order (Go walks the map in random order)."""
    if raw is None:
        return
    if not isinstance(raw, Mapping):
        errors.append(FieldError(path, "must be a map"))
        return
    for name in sorted(raw):
        mapping, key = raw[name], f"{path}[{name}]"
        if not _is_native_resource(str(name)):
            errors.append(FieldError(key, f"Invalid value: {json.dumps(name)}: must be a node allocatable resource name"))
        mapping = _m(mapping)
        multiplier, capacity_key = mapping.get("allocationMultiplier"), mapping.get("capacityKey")
        if multiplier is None and capacity_key is None:
            errors.append(FieldError(key, 'Invalid value: "": at least one of allocationMultiplier or capacityKey must be set'))
            continue
        if multiplier is not None:
            try:
                amount = parse_quantity(multiplier)
            except ValueError as exc:
                errors.append(FieldError(f"{key}.allocationMultiplier", f"Invalid value: {exc}"))
            else:
                if amount <= 0:
                    shown = format_quantity(amount, _parse_quantity(multiplier).format)
                    errors.append(FieldError(f"{key}.allocationMultiplier", f"Invalid value: {json.dumps(shown)}: must be positive"))
        if capacity_key is not None:
            if capacity_key == "":
                errors.append(FieldError(f"{key}.capacityKey", 'Invalid value: "": capacityKey must not be an empty string'))
            elif capacity_key not in capacities:
                errors.append(FieldError(f"{key}.capacityKey", f"Not found: {json.dumps(capacity_key)}", "FieldValueNotFound"))


def _validate_pool_name(name: Any) -> bool:
    return isinstance(name, str) and 0 < len(name) <= 253 and all(is_dns_subdomain(p) for p in name.split("/"))


def validate_resource_slice(obj: Mapping[str, Any], old: Mapping[str, Any] | None) -> list[FieldError]:
    errors = validate_metadata(_m(obj.get("metadata")), namespaced=False)
    spec = obj.get("spec")
    if not isinstance(spec, Mapping):
        return [*errors, FieldError("spec", "Required value", "FieldValueRequired")]
    driver = _req(errors, spec, "driver", "spec")
    if driver is not None and (not isinstance(driver, str) or len(driver) > 63 or not is_dns_subdomain(driver)):
        errors.append(FieldError("spec.driver", f"Invalid value: {driver!r}: must be a DNS subdomain of at most 63 characters"))
    pool = spec.get("pool")
    if not isinstance(pool, Mapping):
        errors.append(FieldError("spec.pool", "Required value", "FieldValueRequired"))
        pool = {}
    else:
        if not _validate_pool_name(pool.get("name")):
            errors.append(FieldError("spec.pool.name", f"Invalid value: {pool.get('name')!r}: DNS subdomains joined by '/', at most 253"))
        gen = pool.get("generation")
        if not isinstance(gen, int) or isinstance(gen, bool) or gen < 0:
            errors.append(FieldError("spec.pool.generation", f"Invalid value: {gen!r}: must be greater than or equal to 0"))
        count = pool.get("resourceSliceCount")
        if not isinstance(count, int) or isinstance(count, bool) or count <= 0:
            errors.append(FieldError("spec.pool.resourceSliceCount", f"Invalid value: {count!r}: must be greater than zero"))
    selectors = [k for k in ("nodeName", "nodeSelector", "allNodes", "perDeviceNodeSelection") if spec.get(k)]
    if len(selectors) != 1:
        errors.append(
            FieldError("spec", f"exactly one of nodeName, nodeSelector, allNodes, perDeviceNodeSelection is required, got {selectors or 'none'}")
        )
    node = spec.get("nodeName")
    if node is not None and (not isinstance(node, str) or not is_dns_subdomain(node)):
        errors.append(FieldError("spec.nodeName", f"Invalid value: {node!r}"))
    devices = _l(spec.get("devices"))
    if not isinstance(devices, list):
        errors.append(FieldError("spec.devices", "must be a list"))
        devices = []
    if devices and spec.get("sharedCounters"):
        errors.append(FieldError("spec", "devices and sharedCounters are mutually exclusive"))
    if len(_l(spec.get("sharedCounters"))) > MAX_COUNTER_SETS:
        errors.append(FieldError("spec.sharedCounters", f"must have at most {MAX_COUNTER_SETS} items", "FieldValueTooMany"))
    limit = MAX_DEVICES_ADVANCED if any(isinstance(d, Mapping) and _device_is_advanced(d) for d in devices) else MAX_DEVICES
    if len(devices) > limit:
        errors.append(FieldError("spec.devices", f"Too many: {len(devices)}: must have at most {limit} items", "FieldValueTooMany"))
    seen: set[str] = set()
    for i, device in enumerate(devices):
        _validate_device(device, f"spec.devices[{i}]", str(driver or ""), errors)
        name = device.get("name") if isinstance(device, Mapping) else None
        if isinstance(name, str):
            if name in seen:
                errors.append(FieldError(f"spec.devices[{i}].name", f"Duplicate value: {name!r}", "FieldValueDuplicate"))
            seen.add(name)
    if old is not None:
        old_spec = _m(old.get("spec"))
        for path, new_v, old_v in (
            ("spec.driver", spec.get("driver"), old_spec.get("driver")),
            ("spec.nodeName", spec.get("nodeName"), old_spec.get("nodeName")),
            ("spec.pool.name", pool.get("name"), _m(old_spec.get("pool")).get("name")),
        ):
            if new_v != old_v:
                errors.append(FieldError(path, "field is immutable"))
    return errors


# --- DeviceClass, ResourceClaim(Template) ------------------------------------------------------------

def _validate_selectors(selectors: Any, path: str, errors: list[FieldError], lists: bool) -> None:
    if selectors is None:
        return
    if not isinstance(selectors, list):
        errors.append(FieldError(path, "must be a list"))
        return
    if len(selectors) > MAX_SELECTORS:
        errors.append(FieldError(path, f"must have at most {MAX_SELECTORS} items", "FieldValueTooMany"))
    for i, s in enumerate(selectors):
        expr = s.get("cel", {}).get("expression") if isinstance(s, Mapping) and isinstance(s.get("cel"), Mapping) else None
        if not isinstance(expr, str) or not expr.strip():
            errors.append(FieldError(f"{path}[{i}].cel.expression", "Required value", "FieldValueRequired"))
        elif len(expr) > MAX_CEL_LENGTH:
            errors.append(FieldError(f"{path}[{i}].cel.expression", f"Too long: may not be more than {MAX_CEL_LENGTH} bytes", "FieldValueTooLong"))
        elif (problem := cel_compile_problem(expr, lists=lists)) is not None:
            errors.append(FieldError(f"{path}[{i}].cel.expression", f"Invalid value: {json.dumps(expr)}: {problem}"))


def cel_compile_problem(expression: str, *, lists: bool = False) -> str | None:
    """Why the API server refuses to store a selector, in its words (cel-go's compile error with
    the line and a caret under the column), or None when it compiles; ``lists``: with
    ``DRAListTypeAttributes`` on, attributes are typed ``dyn`` as the server's compiler then types
    them (``exists`` over a list attribute compiles). The CEL engine comes with
    the ``sim`` extra; without it selectors are not compiled here (``cel_checked()`` says so)."""
    if not cel_checked():
        return None
    from topodra.sim.cel import CelCompileError, compile_selector

    try:
        compile_selector(expression, lists=lists)
    except CelCompileError as err:
        # compile.go's words: cel-go's issues with the caret, or a result that is not a bool
        # (dynamic-resource-allocation/cel/compile.go CompileCELExpression, v1.36.2)
        return err.detail()
    return None


def cel_checked() -> bool:
    """True when selectors are compiled at create time (the CEL engine is installed)."""
    return importlib.util.find_spec("cel_expr_python") is not None


def validate_device_class(obj: Mapping[str, Any], old: Mapping[str, Any] | None, *, lists: bool = False) -> list[FieldError]:
    errors = validate_metadata(_m(obj.get("metadata")), namespaced=False)
    spec = _m(obj.get("spec"))
    _validate_selectors(spec.get("selectors"), "spec.selectors", errors, lists)
    return errors


# --- device taints and tolerations (validateDeviceTaint, validateDeviceToleration) ----------------
#: ``sets.List(validDeviceTaintEffects)``: sorted
_TAINT_EFFECTS: Final = ("NoExecute", "NoSchedule", "None")
_TOLERATION_OPERATORS: Final = ("Equal", "Exists")
_LABEL_KEY_FMT: Final = "([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]"
_LABEL_KEY_MSG: Final = (
    "must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character"
)
_LABEL_VALUE_MSG: Final = (
    "a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or '.', "
    "and must start and end with an alphanumeric character"
)
_DNS_SUBDOMAIN_MSG: Final = (
    "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', "
    "and must start and end with an alphanumeric character"
)
_DNS_SUBDOMAIN_FMT: Final = "[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*"


_DNS_LABEL_MSG: Final = (
    "a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', "
    "and must start and end with an alphanumeric character"
)
_DNS_LABEL_FMT: Final = "[a-z0-9]([-a-z0-9]*[a-z0-9])?"
_DNS_SUBDOMAIN: Final = re.compile(_DNS_SUBDOMAIN_FMT + r"\Z")


def _dns_label_problems(value: str) -> list[str]:
    """apimachinery's ``IsDNS1123Label`` (util/validation/validation.go, v1.36.2), word for word."""
    out = ["must be no more than 63 characters"] if len(value) > 63 else []
    if not _DNS_1123_LABEL.match(value):
        out.append("must not contain dots" if _DNS_SUBDOMAIN.match(value) else _regex_error(_DNS_LABEL_MSG, _DNS_LABEL_FMT, "my-name", "123-abc"))
    return out


def _dns_subdomain_problems(value: str) -> list[str]:
    """apimachinery's ``IsDNS1123Subdomain``, word for word (its regex does not limit each label)."""
    out = ["must be no more than 253 characters"] if len(value) > 253 else []
    if not _DNS_SUBDOMAIN.match(value):
        out.append(_regex_error(_DNS_SUBDOMAIN_MSG, _DNS_SUBDOMAIN_FMT, "example.com"))
    return out


def _regex_error(msg: str, fmt: str, *examples: str) -> str:
    """apimachinery's ``content.RegexError``, spacing included."""
    shown = " or ".join(f"'{e}', " for e in examples)
    return f"{msg} (e.g. {shown}regex used for validation is '{fmt}')"


def _label_key_problems(key: str) -> list[str]:
    """``content.IsLabelKey``: a name of at most 63, optionally after a DNS subdomain and '/'."""
    parts = key.split("/")
    out: list[str] = []
    if len(parts) > 2:
        return [
            "a valid label key " + _regex_error(_LABEL_KEY_MSG, _LABEL_KEY_FMT, "MyName", "my.name", "123-abc")
            + " with an optional DNS subdomain prefix and '/' (e.g. 'example.com/MyName')"
        ]
    if len(parts) == 2:
        prefix = parts[0]
        if not prefix:
            out.append("prefix part must be non-empty")
        else:
            if len(prefix) > 253:
                out.append("prefix part must be no more than 253 bytes")
            if not all(is_dns_label(p) for p in prefix.split(".")):
                out.append("prefix part " + _regex_error(_DNS_SUBDOMAIN_MSG, _DNS_SUBDOMAIN_FMT, "example.com"))
    name = parts[-1]
    if not name:
        out.append("name part must be non-empty")
    elif len(name) > 63:
        out.append("name part must be no more than 63 bytes")
    if not _LABEL_NAME.match(name):
        out.append("name part " + _regex_error(_LABEL_KEY_MSG, _LABEL_KEY_FMT, "MyName", "my.name", "123-abc"))
    return out


def _label_value_problems(value: str) -> list[str]:
    out = ["must be no more than 63 bytes"] if len(value) > 63 else []
    if not _LABEL_VALUE.match(value):
        out.append(_regex_error(_LABEL_VALUE_MSG, f"({_LABEL_KEY_FMT})?", "MyValue", "my_value", "12345"))
    return out


def _invalid(path: str, value: str, problems: list[str]) -> list[FieldError]:
    return [FieldError(path, f"Invalid value: {json.dumps(value, ensure_ascii=False)}: {p}") for p in problems]


def _unsupported(path: str, value: str, allowed: tuple[str, ...]) -> FieldError:
    supported = ", ".join(f'"{a}"' for a in allowed)
    return FieldError(path, f"Unsupported value: {json.dumps(value, ensure_ascii=False)}: supported values: {supported}", "FieldValueNotSupported")


def _taint_errors(taint: Mapping[str, Any], path: str) -> list[FieldError]:
    key, value, effect = str(taint.get("key") or ""), str(taint.get("value") or ""), str(taint.get("effect") or "")
    errors = _invalid(f"{path}.key", key, _label_key_problems(key))
    if value:
        errors += _invalid(f"{path}.value", value, _label_value_problems(value))
    if not effect:
        errors.append(FieldError(f"{path}.effect", "Required value", "FieldValueRequired"))
    elif effect not in _TAINT_EFFECTS:
        errors.append(_unsupported(f"{path}.effect", effect, _TAINT_EFFECTS))
    return errors


def _toleration_errors(tol: Mapping[str, Any], path: str) -> list[FieldError]:
    """One device toleration (its operator defaulted to Equal: ``topodra.embedded.defaults``).
    The API documents at most 16 tolerations per request but a 1.36 server does not check it."""
    key, op = str(tol.get("key") or ""), str(tol.get("operator") or "")
    value, effect = str(tol.get("value") or ""), str(tol.get("effect") or "")
    errors = _invalid(f"{path}.key", key, _label_key_problems(key)) if key else []
    if op == "Exists":
        if value:
            errors += _invalid(f"{path}.value", value, ["must be empty for operator `Exists`"])
    elif op == "Equal":
        errors += _invalid(f"{path}.value", value, _label_value_problems(value))
    elif not op:
        errors.append(FieldError(f"{path}.operator", "Required value", "FieldValueRequired"))
    else:
        errors.append(_unsupported(f"{path}.operator", op, _TOLERATION_OPERATORS))
    if effect and effect not in _TAINT_EFFECTS:
        errors.append(_unsupported(f"{path}.effect", effect, _TAINT_EFFECTS))
    return errors


def _validate_exact(req: Mapping[str, Any], path: str, errors: list[FieldError], lists: bool) -> None:
    if not req.get("deviceClassName"):
        errors.append(FieldError(f"{path}.deviceClassName", "Required value", "FieldValueRequired"))
    _validate_selectors(req.get("selectors"), f"{path}.selectors", errors, lists)
    mode = req.get("allocationMode", "ExactCount")
    if mode not in ("ExactCount", "All"):
        errors.append(FieldError(f"{path}.allocationMode", f"Unsupported value: {mode!r}", "FieldValueNotSupported"))
    if "count" in req:
        count = req["count"]
        if mode == "All":
            errors.append(FieldError(f"{path}.count", "must not be set when allocationMode is All"))
        elif not isinstance(count, int) or isinstance(count, bool) or count <= 0:
            errors.append(FieldError(f"{path}.count", f"Invalid value: {count!r}: must be greater than zero"))
    for i, tol in enumerate(_l(req.get("tolerations"))):
        errors.extend(_toleration_errors(_m(tol), f"{path}.tolerations[{i}]"))


def validate_claim_spec(spec: Mapping[str, Any], path: str, *, lists: bool = False) -> list[FieldError]:
    errors: list[FieldError] = []
    devices = _m(spec.get("devices"))
    requests = _l(devices.get("requests"))
    if len(requests) > MAX_REQUESTS:
        errors.append(FieldError(f"{path}.devices.requests", f"must have at most {MAX_REQUESTS} items", "FieldValueTooMany"))
    names: set[str] = set()
    for i, r in enumerate(requests):
        rp = f"{path}.devices.requests[{i}]"
        if not isinstance(r, Mapping):
            errors.append(FieldError(rp, "must be an object"))
            continue
        name = r.get("name")
        if not isinstance(name, str) or not is_dns_label(name):
            errors.append(FieldError(f"{rp}.name", f"Invalid value: {name!r}: must be a DNS label"))
        elif name in names:
            errors.append(FieldError(f"{rp}.name", f"Duplicate value: {name!r}", "FieldValueDuplicate"))
        else:
            names.add(name)
        exact, first = r.get("exactly"), r.get("firstAvailable")
        if (exact is None) == (first is None):
            errors.append(FieldError(rp, "exactly one of exactly or firstAvailable is required"))
        elif isinstance(exact, Mapping):
            _validate_exact(exact, f"{rp}.exactly", errors, lists)
        elif isinstance(first, list):
            if not first or len(first) > MAX_SUBREQUESTS:
                errors.append(FieldError(f"{rp}.firstAvailable", f"must have 1 to {MAX_SUBREQUESTS} items"))
            for j, sub in enumerate(first):
                if not isinstance(sub, Mapping) or not is_dns_label(str(sub.get("name", ""))):
                    errors.append(FieldError(f"{rp}.firstAvailable[{j}].name", "must be a DNS label"))
                else:
                    _validate_exact(sub, f"{rp}.firstAvailable[{j}]", errors, lists)
    for key in ("constraints", "config"):
        if len(_l(devices.get(key))) > 32:
            errors.append(FieldError(f"{path}.devices.{key}", "must have at most 32 items", "FieldValueTooMany"))
    return errors


def validate_claim_status(status: Mapping[str, Any]) -> list[FieldError]:
    errors: list[FieldError] = []
    allocation = status.get("allocation")
    if allocation is not None and not isinstance(allocation, Mapping):
        errors.append(FieldError("status.allocation", "must be an AllocationResult object"))
    elif allocation is not None:
        results = _l(_m(allocation.get("devices")).get("results"))
        if len(results) > MAX_RESULTS:
            errors.append(FieldError("status.allocation.devices.results", f"must have at most {MAX_RESULTS} items", "FieldValueTooMany"))
        for i, r in enumerate(results):
            for key in ("request", "driver", "pool", "device"):
                if not isinstance(r, Mapping) or not r.get(key):
                    errors.append(FieldError(f"status.allocation.devices.results[{i}].{key}", "Required value", "FieldValueRequired"))
    reserved = _l(status.get("reservedFor"))
    if len(reserved) > MAX_RESERVED_FOR:
        errors.append(FieldError("status.reservedFor", f"must have at most {MAX_RESERVED_FOR} items", "FieldValueTooMany"))
    uids = set()
    for i, r in enumerate(reserved):
        if not isinstance(r, Mapping) or not r.get("resource") or not r.get("name") or not r.get("uid"):
            errors.append(FieldError(f"status.reservedFor[{i}]", "resource, name and uid are required"))
        elif r["uid"] in uids:
            errors.append(FieldError(f"status.reservedFor[{i}].uid", "Duplicate value", "FieldValueDuplicate"))
        else:
            uids.add(r["uid"])
    if reserved and allocation is None:
        errors.append(FieldError("status.reservedFor", "may not be set when the claim is not allocated", "FieldValueForbidden"))
    errors += _validate_device_statuses(status)
    return errors


def _allocated_ids(status: Mapping[str, Any]) -> set[tuple[str, str, str, str]]:
    results = _l(_m(_m(status.get("allocation")).get("devices")).get("results"))
    return {
        (str(r.get("driver", "")), str(r.get("pool", "")), str(r.get("device", "")), str(r.get("shareID") or ""))
        for r in results
        if isinstance(r, Mapping)
    }


def _validate_conditions(conditions: Any, path: str, errors: list[FieldError]) -> None:
    """metav1.Condition rules (apimachinery ValidateConditions), and the DRA limit of 8."""
    if conditions is None:
        return
    if not isinstance(conditions, list):
        errors.append(FieldError(path, "must be a list"))
        return
    if len(conditions) > MAX_DEVICE_STATUS_CONDITIONS:
        errors.append(FieldError(path, f"must have at most {MAX_DEVICE_STATUS_CONDITIONS} items", "FieldValueTooMany"))
    types: set[str] = set()
    for i, c in enumerate(conditions):
        where = f"{path}[{i}]"
        if not isinstance(c, Mapping):
            errors.append(FieldError(where, "must be an object"))
            continue
        ctype = c.get("type")
        if not ctype:
            errors.append(FieldError(f"{where}.type", "Required value", "FieldValueRequired"))
        else:
            errors += _qualified_name_errors(ctype, f"{where}.type")
            if ctype in types:
                errors.append(FieldError(f"{where}.type", "Duplicate value", "FieldValueDuplicate"))
            types.add(str(ctype))
        if c.get("status") not in _CONDITION_STATUSES:
            errors.append(FieldError(f"{where}.status", f"Unsupported value: {c.get('status')!r}: supported values: \"False\", \"True\", \"Unknown\"", "FieldValueNotSupported"))
        reason = c.get("reason")
        if not reason:
            errors.append(FieldError(f"{where}.reason", "Required value", "FieldValueRequired"))
        elif not isinstance(reason, str) or len(reason) > 1024 or not _CONDITION_REASON.match(reason):
            errors.append(FieldError(f"{where}.reason", "a condition reason must start with alphabetic character, optionally followed by a string of alphanumeric characters or '_,:', and must end with an alphanumeric character or '_'"))
        if not c.get("lastTransitionTime"):
            errors.append(FieldError(f"{where}.lastTransitionTime", "must be set", "FieldValueRequired"))
        if len(str(c.get("message") or "")) > 32768:
            errors.append(FieldError(f"{where}.message", "may not be more than 32768 bytes", "FieldValueTooLong"))
        generation = c.get("observedGeneration")
        if generation is not None and (not isinstance(generation, int) or generation < 0):
            errors.append(FieldError(f"{where}.observedGeneration", "must be greater than or equal to zero"))


def _validate_device_statuses(status: Mapping[str, Any]) -> list[FieldError]:
    """``status.devices``: each entry names an allocated device of the claim, once, within the
    API's limits (resource.k8s.io/v1 validateDeviceStatus)."""
    errors: list[FieldError] = []
    devices = status.get("devices")
    if devices is None:
        return errors
    if not isinstance(devices, list):
        return [FieldError("status.devices", "must be a list")]
    allocated = _allocated_ids(status)
    seen: set[tuple[str, str, str, str]] = set()
    for i, d in enumerate(devices):
        path = f"status.devices[{i}]"
        if not isinstance(d, Mapping):
            errors.append(FieldError(path, "must be an object"))
            continue
        driver, pool, device = _req(errors, d, "driver", path), _req(errors, d, "pool", path), _req(errors, d, "device", path)
        if driver and not (is_dns_subdomain(driver) and len(str(driver)) <= MAX_DOMAIN_LENGTH):
            errors.append(FieldError(f"{path}.driver", "must be a DNS subdomain of at most 63 characters"))
        if pool and not _validate_pool_name(pool):
            errors.append(FieldError(f"{path}.pool", "must be DNS subdomains separated by '/', at most 253 characters"))
        if device and not is_dns_label(device):
            errors.append(FieldError(f"{path}.device", "must be a DNS label"))
        key = (str(driver or ""), str(pool or ""), str(device or ""), str(d.get("shareID") or ""))
        shown = "/".join(key[:3]) + (f"/{key[3]}" if key[3] else "")
        if key in seen:
            errors.append(FieldError(path, f"Duplicate value: {shown!r}", "FieldValueDuplicate"))
        seen.add(key)
        if driver and pool and device and key not in allocated:
            errors.append(FieldError(path, f"Invalid value: {shown!r}: must be an allocated device in the claim"))
        _validate_conditions(d.get("conditions"), f"{path}.conditions", errors)
        data = d.get("data")
        if data is not None:
            if not isinstance(data, Mapping):
                errors.append(FieldError(f"{path}.data", "must be a valid JSON object"))
            elif len(json.dumps(data, separators=(",", ":")).encode()) > MAX_DEVICE_STATUS_DATA:
                errors.append(FieldError(f"{path}.data", f"Too long: may not be more than {MAX_DEVICE_STATUS_DATA} bytes", "FieldValueTooLong"))
        net = _m(d.get("networkData"))
        if len(str(net.get("interfaceName") or "")) > 256:
            errors.append(FieldError(f"{path}.networkData.interfaceName", "may not be more than 256 bytes", "FieldValueTooLong"))
        if len(str(net.get("hardwareAddress") or "")) > 128:
            errors.append(FieldError(f"{path}.networkData.hardwareAddress", "may not be more than 128 bytes", "FieldValueTooLong"))
        if len(_l(net.get("ips"))) > MAX_NETWORK_IPS:
            errors.append(FieldError(f"{path}.networkData.ips", f"must have at most {MAX_NETWORK_IPS} items", "FieldValueTooMany"))
    return errors


def validate_resource_claim(obj: Mapping[str, Any], old: Mapping[str, Any] | None, *, lists: bool = False) -> list[FieldError]:
    errors = validate_metadata(_m(obj.get("metadata")), namespaced=True)
    errors += validate_claim_spec(_m(obj.get("spec")), "spec", lists=lists)
    errors += validate_claim_status(_m(obj.get("status")))
    if old is not None and _m(obj.get("spec")) != _m(old.get("spec")):
        errors.append(FieldError("spec", "field is immutable"))
    if old is not None:
        old_alloc = _m(old.get("status")).get("allocation")
        new_alloc = _m(obj.get("status")).get("allocation")
        if old_alloc is not None and new_alloc is not None and old_alloc != new_alloc:
            errors.append(FieldError("status.allocation", "field is immutable once set"))
    return errors


def validate_claim_template(obj: Mapping[str, Any], old: Mapping[str, Any] | None, *, lists: bool = False) -> list[FieldError]:
    errors = validate_metadata(_m(obj.get("metadata")), namespaced=True)
    inner = _m(_m(obj.get("spec")).get("spec"))
    errors += validate_claim_spec(inner, "spec.spec", lists=lists)
    return errors


def validate_pod(obj: Mapping[str, Any], old: Mapping[str, Any] | None) -> list[FieldError]:
    errors = validate_metadata(_m(obj.get("metadata")), namespaced=True)
    spec = _m(obj.get("spec"))
    containers = spec.get("containers")
    if not containers:
        errors.append(FieldError("spec.containers", "Required value", "FieldValueRequired"))
    for key in ("initContainers", "containers"):
        for i, c in enumerate(_l(spec.get(key))):
            errors += _resource_errors(_m(_m(c).get("resources")), f"spec.{key}[{i}].resources")
    if old is not None:
        old_node = _m(old.get("spec")).get("nodeName")
        if old_node and _m(obj.get("spec")).get("nodeName") != old_node:
            errors.append(FieldError("spec.nodeName", "field is immutable once set"))
    return errors


def _resource_errors(resources: Mapping[str, Any], path: str) -> list[FieldError]:
    """A container's requests and limits as ``validateResourceRequirements`` checks them
    (pkg/apis/core/validation, v1.36.2): quantities that parse, none negative, no request over
    its limit."""
    errors: list[FieldError] = []
    parsed: dict[str, dict[str, tuple[str, Fraction]]] = {"limits": {}, "requests": {}}
    for part in ("limits", "requests"):
        for name, raw in _m(resources.get(part)).items():
            where = f"{path}.{part}[{name}]"
            # a JSON number decodes as a quantity too (resource.Quantity's UnmarshalJSON)
            text = str(raw) if isinstance(raw, (int, float)) and not isinstance(raw, bool) else raw
            try:
                amount = parse_quantity(text)
            except ValueError as exc:
                errors.append(FieldError(where, f"Invalid value: {json.dumps(str(text))}: {exc}"))
                continue
            if amount < 0:
                errors.append(FieldError(where, f"Invalid value: {json.dumps(text)}: must be greater than or equal to 0"))
            parsed[part][name] = (text, amount)
    for name, (text, amount) in parsed["requests"].items():
        limit = parsed["limits"].get(name)
        if limit is not None and amount > limit[1]:
            errors.append(FieldError(f"{path}.requests", f"Invalid value: {json.dumps(text)}: must be less than or equal to {name} limit of {limit[0]}"))
    return errors


def validate_node(obj: Mapping[str, Any], old: Mapping[str, Any] | None) -> list[FieldError]:
    return validate_metadata(_m(obj.get("metadata")), namespaced=False)


def validate_namespace(obj: Mapping[str, Any], old: Mapping[str, Any] | None) -> list[FieldError]:
    return validate_metadata(_m(obj.get("metadata")), namespaced=False, dns_label=True)


VALIDATORS: Final[dict[str, Validator]] = {
    "resourceslices": validate_resource_slice,
    "deviceclasses": validate_device_class,
    "resourceclaims": validate_resource_claim,
    "resourceclaimtemplates": validate_claim_template,
    "pods": validate_pod,
    "nodes": validate_node,
    "namespaces": validate_namespace,
}
#: The kinds whose selectors are compiled, with the list gate (``lists=``) as the server has it.
SELECTOR_VALIDATORS: Final[dict[str, SelectorValidator]] = {
    "deviceclasses": validate_device_class,
    "resourceclaims": validate_resource_claim,
    "resourceclaimtemplates": validate_claim_template,
}
