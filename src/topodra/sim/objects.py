"""resource.k8s.io/v1 objects as the allocator reads them, parsed from API JSON dicts.

Parsing happens once per object; every error names the object and the field
(``ResourceSlice node-1-cpu: spec.devices[3].capacity["cpu"].value: ...``).
The allocator then works on these plain, immutable-by-convention records.
"""

from __future__ import annotations

import functools
import hashlib
import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, ParamSpec, TypeVar

from topodra.quantity import Quantity, QuantityError, parse_quantity
from topodra.sim.cel import CelDevice, attribute_value
from topodra.sim.semver import SemverError

__all__ = [
    "ObjectError",
    "DeviceID",
    "Capacity",
    "RequestPolicy",
    "Taint",
    "Toleration",
    "Device",
    "Slice",
    "DeviceClass",
    "RequestSpec",
    "Request",
    "Constraint",
    "Claim",
    "Node",
    "parse_slice",
    "parse_class",
    "parse_claim",
    "parse_node",
    "node_selector_matches",
]

MAX_RESULTS = 32  # AllocationResultsMaxSize

DeviceID = tuple[str, str, str]  # (driver, pool, device)


class ObjectError(ValueError):
    """An API object the allocator cannot use, naming the object and field."""


def _get(obj: Mapping[str, Any], key: str, where: str, kind: type | tuple[type, ...], default: Any = ...) -> Any:
    if not isinstance(obj, Mapping):
        raise ObjectError(f"{where}: expected an object, got {type(obj).__name__}")
    if key not in obj or obj[key] is None:
        if default is ...:
            raise ObjectError(f"{where}.{key}: required field is missing")
        return default
    value = obj[key]
    if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
        names = kind.__name__ if isinstance(kind, type) else "/".join(k.__name__ for k in kind)
        raise ObjectError(f"{where}.{key}: expected {names}, got {type(value).__name__} {value!r}")
    return value


def _qty(value: Any, where: str) -> Quantity:
    try:
        return parse_quantity(value)
    except QuantityError as e:
        raise ObjectError(f"{where}: {e}") from None


@dataclass(frozen=True, slots=True)
class RequestPolicy:
    """A capacity's request policy (``requestPolicy``): the default, valid values or range a request is rounded to."""

    default: Quantity | None = None
    valid_values: tuple[Quantity, ...] = ()
    range_min: Quantity | None = None
    range_max: Quantity | None = None
    range_step: Quantity | None = None
    has_range: bool = False


@dataclass(frozen=True, slots=True)
class Capacity:
    """One capacity of a device: its value and, for shared devices, how requests for it are rounded."""

    value: Quantity
    policy: RequestPolicy | None = None


@dataclass(frozen=True, slots=True)
class Taint:
    """A device taint (``key=value:effect``); claims without a matching toleration skip the device."""

    key: str
    value: str
    effect: str


@dataclass(frozen=True, slots=True)
class Toleration:
    """A request's toleration of device taints; ``raw`` is what the allocation result writes back."""

    key: str
    operator: str
    value: str
    effect: str
    raw: Mapping[str, Any]

    def tolerates(self, taint: Taint) -> bool:
        """Kubernetes ``ToleratesTaint`` for device taints."""
        if self.effect and self.effect != taint.effect:
            return False
        if self.key and self.key != taint.key:
            return False
        if self.operator in ("", "Equal"):
            return self.value == taint.value
        return self.operator == "Exists"


@dataclass(slots=True)
class Device:
    """A published device as the allocator reads it (attributes as plain values)."""

    name: str
    driver: str
    attributes: dict[str, Any]  # qualified name -> plain value (int/bool/str/Semver/list)
    capacity: dict[str, Capacity]
    allow_multiple: bool = False
    consumes_counters: tuple[tuple[str, tuple[tuple[str, Quantity], ...]], ...] = ()
    taints: tuple[Taint, ...] = ()
    binding_conditions: tuple[str, ...] | None = None
    binding_failure_conditions: tuple[str, ...] | None = None
    binds_to_node: bool = False
    node_name: str = ""
    all_nodes: bool = False
    node_selector: Mapping[str, Any] | None = None
    #: Stable digest of everything a selector can see: caches key on it.
    fingerprint: str = ""
    #: Digest of everything allocation can see except the name (identical devices on other nodes).
    shape: str = ""
    #: The first attribute holding a list value ("" for none): with ``DRAListTypeAttributes``
    #: off, kube-scheduler's CEL cannot convert it, and every selector on the device fails.
    list_attribute: str = ""
    _cel: CelDevice | None = field(default=None, repr=False)

    def cel(self) -> CelDevice:
        if self._cel is None:
            self._cel = CelDevice.build(
                self.driver, self.attributes, {k: c.value for k, c in self.capacity.items()}, self.allow_multiple
            )
        return self._cel


@dataclass(slots=True)
class Slice:
    """A ResourceSlice: one pool's devices (or part of them), for one node or a node selector."""

    name: str
    driver: str
    pool: str
    generation: int
    slice_count: int
    node_name: str
    node_selector: Mapping[str, Any] | None
    all_nodes: bool
    per_device_node_selection: bool
    devices: list[Device]
    shared_counters: dict[str, dict[str, Quantity]]
    raw: Mapping[str, Any] = field(repr=False, default_factory=dict)

    @property
    def node_local(self) -> bool:
        return bool(self.node_name)


@dataclass(frozen=True, slots=True)
class DeviceClass:
    """A DeviceClass: the selectors (and config) every request of the class adds."""

    name: str
    selectors: tuple[str, ...]
    config: tuple[Mapping[str, Any], ...]


@dataclass(frozen=True, slots=True)
class RequestSpec:
    """An ``exactly`` request or one ``firstAvailable`` subrequest."""

    name: str
    class_name: str
    selectors: tuple[str, ...]
    mode: str  # "ExactCount" | "All"
    count: int
    admin_access: bool
    tolerations: tuple[Toleration, ...]
    capacity_requests: Mapping[str, Quantity] | None


@dataclass(frozen=True, slots=True)
class Request:
    """A claim's request: either ``exactly`` one spec or a ``firstAvailable`` list of specs tried in order."""

    name: str
    exactly: RequestSpec | None
    first_available: tuple[RequestSpec, ...]


@dataclass(frozen=True, slots=True)
class Constraint:
    """A claim constraint: the requests it covers share (``matchAttribute``) or differ in (``distinctAttribute``) an attribute."""

    requests: frozenset[str]
    match_attribute: str | None
    distinct_attribute: str | None


@dataclass(frozen=True, slots=True)
class Claim:
    """A ResourceClaim as the allocator sees it: its requests, constraints and config."""

    name: str
    namespace: str
    uid: str
    requests: tuple[Request, ...]
    constraints: tuple[Constraint, ...]
    config: tuple[Mapping[str, Any], ...]
    raw: Mapping[str, Any] = field(repr=False, default_factory=dict)

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}" if self.namespace else self.name


@dataclass(frozen=True, slots=True)
class Node:
    """A node: its name and labels (matched by node selectors of slices and allocations)."""

    name: str
    labels: Mapping[str, str]


# --- parsing ------------------------------------------------------------------------------------


_P = ParamSpec("_P")
_R = TypeVar("_R")


def _guarded(kind: str) -> Callable[[Callable[_P, _R]], Callable[_P, _R]]:
    """Turn any structural surprise in a parser into an ``ObjectError`` naming the object."""

    def wrap(fn: Callable[_P, _R]) -> Callable[_P, _R]:
        @functools.wraps(fn)
        def inner(*args: _P.args, **kwargs: _P.kwargs) -> _R:
            try:
                return fn(*args, **kwargs)
            except ObjectError:
                raise
            except (AttributeError, TypeError, KeyError, ValueError, IndexError) as e:
                obj = args[0] if args else None
                meta = obj.get("metadata") if isinstance(obj, Mapping) else None
                name = meta.get("name") if isinstance(meta, Mapping) else None
                raise ObjectError(f"{kind} {name or '<unnamed>'}: malformed object ({type(e).__name__}: {e})") from None

        return inner

    return wrap


def _name_of(obj: Mapping[str, Any], kind: str) -> str:
    meta = obj.get("metadata") if isinstance(obj, Mapping) else None
    if not isinstance(meta, Mapping) or not isinstance(meta.get("name"), str) or not meta["name"]:
        raise ObjectError(f"{kind}: metadata.name is missing")
    return str(meta["name"])


def _policy(raw: Mapping[str, Any], where: str) -> RequestPolicy:
    default = _qty(raw["default"], f"{where}.default") if raw.get("default") is not None else None
    values = tuple(_qty(v, f"{where}.validValues[{i}]") for i, v in enumerate(raw.get("validValues") or ()))
    rng = raw.get("validRange")
    if isinstance(rng, Mapping):
        return RequestPolicy(
            default=default,
            valid_values=values,
            range_min=_qty(rng["min"], f"{where}.validRange.min") if rng.get("min") is not None else None,
            range_max=_qty(rng["max"], f"{where}.validRange.max") if rng.get("max") is not None else None,
            range_step=_qty(rng["step"], f"{where}.validRange.step") if rng.get("step") is not None else None,
            has_range=True,
        )
    return RequestPolicy(default=default, valid_values=values)


def _device(raw: Mapping[str, Any], driver: str, where: str) -> Device:
    name = _get(raw, "name", where, str)
    attrs: dict[str, Any] = {}
    for key, val in (_get(raw, "attributes", where, Mapping, {}) or {}).items():
        try:
            attrs[key] = attribute_value(key, val)
        except (ValueError, SemverError) as e:
            raise ObjectError(f"{where}.attributes[{key!r}]: {e}") from None
    caps: dict[str, Capacity] = {}
    for key, val in (_get(raw, "capacity", where, Mapping, {}) or {}).items():
        cw = f"{where}.capacity[{key!r}]"
        if not isinstance(val, Mapping) or "value" not in val:
            raise ObjectError(f"{cw}.value: required field is missing")
        pol = val.get("requestPolicy")
        caps[key] = Capacity(_qty(val["value"], f"{cw}.value"), _policy(pol, f"{cw}.requestPolicy") if isinstance(pol, Mapping) else None)
    consumes = []
    for i, cc in enumerate(_get(raw, "consumesCounters", where, list, []) or []):
        cw = f"{where}.consumesCounters[{i}]"
        cset = _get(cc, "counterSet", cw, str)
        counters = tuple(
            (n, _qty(_get(c, "value", f"{cw}.counters[{n!r}]", (str, int)), f"{cw}.counters[{n!r}].value"))
            for n, c in (_get(cc, "counters", cw, Mapping, {}) or {}).items()
        )
        consumes.append((cset, counters))
    taints = tuple(
        Taint(str(t.get("key", "")), str(t.get("value", "")), str(t.get("effect", "")))
        for t in (_get(raw, "taints", where, list, []) or [])
    )
    bc = raw.get("bindingConditions")
    bfc = raw.get("bindingFailureConditions")
    fp = hashlib.blake2b(
        json.dumps([driver, raw.get("attributes"), raw.get("capacity"), bool(raw.get("allowMultipleAllocations"))], sort_keys=True, default=str).encode(),
        digest_size=12,
    ).hexdigest()
    return Device(
        name=name,
        driver=driver,
        attributes=attrs,
        capacity=caps,
        allow_multiple=bool(raw.get("allowMultipleAllocations", False)),
        consumes_counters=tuple(consumes),
        taints=taints,
        binding_conditions=tuple(bc) if bc else None,
        binding_failure_conditions=tuple(bfc) if bfc else None,
        binds_to_node=bool(raw.get("bindsToNode", False)),
        node_name=str(raw.get("nodeName") or ""),
        all_nodes=bool(raw.get("allNodes", False)),
        node_selector=raw.get("nodeSelector"),
        fingerprint=fp,
        shape=hashlib.blake2b(
            json.dumps({k: v for k, v in raw.items() if k != "name"}, sort_keys=True, default=str).encode(), digest_size=12
        ).hexdigest(),
        list_attribute=next((k for k, v in attrs.items() if isinstance(v, list)), ""),
    )


DeviceCache = dict[tuple[int, str], tuple[Any, list[Device]]]


@_guarded("ResourceSlice")
def parse_slice(obj: Mapping[str, Any], device_cache: DeviceCache | None = None) -> Slice:
    """A ResourceSlice dict (resource.k8s.io/v1) as a ``Slice``.

    With ``device_cache``, slices that share the very same ``devices`` list
    object (nodes of one machine in a synthetic cluster) share parsed devices.
    """
    name = _name_of(obj, "ResourceSlice")
    where = f"ResourceSlice {name}: spec"
    spec = _get(obj, "spec", f"ResourceSlice {name}", Mapping)
    driver = _get(spec, "driver", where, str)
    pool = _get(spec, "pool", where, Mapping)
    raw_devices = _get(spec, "devices", where, list, []) or []
    cached = device_cache.get((id(raw_devices), driver)) if device_cache is not None else None
    if cached is not None and cached[0] is raw_devices:
        devices = cached[1]
    else:
        devices = [_device(d, driver, f"{where}.devices[{i}]") for i, d in enumerate(raw_devices)]
        if device_cache is not None:
            device_cache[(id(raw_devices), driver)] = (raw_devices, devices)
    counters: dict[str, dict[str, Quantity]] = {}
    for i, cs in enumerate(_get(spec, "sharedCounters", where, list, []) or []):
        cw = f"{where}.sharedCounters[{i}]"
        counters[_get(cs, "name", cw, str)] = {
            n: _qty(_get(c, "value", f"{cw}.counters[{n!r}]", (str, int)), f"{cw}.counters[{n!r}].value")
            for n, c in (_get(cs, "counters", cw, Mapping, {}) or {}).items()
        }
    return Slice(
        name=name,
        driver=driver,
        pool=_get(pool, "name", f"{where}.pool", str),
        generation=_get(pool, "generation", f"{where}.pool", int, 0),
        slice_count=_get(pool, "resourceSliceCount", f"{where}.pool", int, 1),
        node_name=str(spec.get("nodeName") or ""),
        node_selector=spec.get("nodeSelector"),
        all_nodes=bool(spec.get("allNodes", False)),
        per_device_node_selection=bool(spec.get("perDeviceNodeSelection", False)),
        devices=devices,
        shared_counters=counters,
        raw=obj,
    )


@_guarded("DeviceClass")
def parse_class(obj: Mapping[str, Any]) -> DeviceClass:
    name = _name_of(obj, "DeviceClass")
    spec = obj.get("spec") or {}
    return DeviceClass(name, _selectors(spec.get("selectors"), f"DeviceClass {name}: spec.selectors"), tuple(spec.get("config") or ()))


def _selectors(raw: Any, where: str) -> tuple[str, ...]:
    out = []
    for i, sel in enumerate(raw or ()):
        cel = sel.get("cel") if isinstance(sel, Mapping) else None
        if not isinstance(cel, Mapping) or not isinstance(cel.get("expression"), str):
            raise ObjectError(f"{where}[{i}]: CEL expression empty (unsupported selector type?)")
        out.append(cel["expression"])
    return tuple(out)


def _spec(raw: Mapping[str, Any], name: str, where: str) -> RequestSpec:
    cls = raw.get("deviceClassName")
    if not isinstance(cls, str) or not cls:
        raise ObjectError(f"{where}.deviceClassName: missing device class name (unsupported request type?)")
    mode = raw.get("allocationMode") or "ExactCount"
    count = raw.get("count", 1) if mode == "ExactCount" else 0
    if mode == "ExactCount" and (not isinstance(count, int) or isinstance(count, bool) or count < 1):
        raise ObjectError(f"{where}.count: must be a positive integer, got {count!r}")
    # the operator defaults to Equal, as the API server stores it (and so the results carry it)
    tols = tuple(
        Toleration(str(t.get("key", "")), op, str(t.get("value", "")), str(t.get("effect", "")), {**t, "operator": op})
        for t in (raw.get("tolerations") or ())
        if isinstance(t, Mapping) and (op := str(t.get("operator") or "Equal"))
    )
    cap = raw.get("capacity")
    creq = None
    if isinstance(cap, Mapping) and cap.get("requests") is not None:
        creq = {k: _qty(v, f"{where}.capacity.requests[{k!r}]") for k, v in cap["requests"].items()}
    return RequestSpec(
        name=name,
        class_name=cls,
        selectors=_selectors(raw.get("selectors"), f"{where}.selectors"),
        mode=str(mode),
        count=int(count),
        admin_access=bool(raw.get("adminAccess", False)),
        tolerations=tols,
        capacity_requests=creq,
    )


@_guarded("ResourceClaim")
def parse_claim(obj: Mapping[str, Any]) -> Claim:
    """A ResourceClaim dict (or a template's ``spec``, wrapped by the caller) as a ``Claim``."""
    name = _name_of(obj, "ResourceClaim")
    meta = obj.get("metadata") or {}
    where = f"ResourceClaim {name}: spec.devices"
    devices = (obj.get("spec") or {}).get("devices") or {}
    requests = []
    for i, r in enumerate(devices.get("requests") or ()):
        rw = f"{where}.requests[{i}]"
        rname = _get(r, "name", rw, str)
        if r.get("firstAvailable"):
            subs = tuple(
                _spec(s, _get(s, "name", f"{rw}.firstAvailable[{j}]", str), f"{rw}.firstAvailable[{j}]")
                for j, s in enumerate(r["firstAvailable"])
            )
            requests.append(Request(rname, None, subs))
        elif isinstance(r.get("exactly"), Mapping):
            requests.append(Request(rname, _spec(r["exactly"], rname, f"{rw}.exactly"), ()))
        elif r.get("deviceClassName"):  # v1beta1-style flat request, accepted for convenience
            requests.append(Request(rname, _spec(r, rname, rw), ()))
        else:
            raise ObjectError(f"{rw}: needs exactly or firstAvailable")
    constraints = []
    for i, c in enumerate(devices.get("constraints") or ()):
        constraints.append(
            Constraint(
                frozenset(c.get("requests") or ()),
                c.get("matchAttribute"),
                c.get("distinctAttribute"),
            )
        )
        if not constraints[-1].match_attribute and not constraints[-1].distinct_attribute:
            raise ObjectError(f"{where}.constraints[{i}]: empty constraint (unsupported constraint type?)")
    return Claim(
        name=name,
        namespace=str(meta.get("namespace") or ""),
        uid=str(meta.get("uid") or f"uid-{meta.get('namespace') or ''}-{name}"),
        requests=tuple(requests),
        constraints=tuple(constraints),
        config=tuple(devices.get("config") or ()),
        raw=obj,
    )


@_guarded("Node")
def parse_node(obj: Mapping[str, Any] | str) -> Node:
    if isinstance(obj, str):
        return Node(obj, {})
    name = _name_of(obj, "Node")
    return Node(name, dict((obj.get("metadata") or {}).get("labels") or {}))


# --- node selectors -----------------------------------------------------------------------------


def node_selector_matches(selector: Mapping[str, Any], node: Node) -> bool:
    """core/v1 NodeSelector: terms are ORed, requirements inside a term ANDed."""
    try:
        return _selector_matches(selector, node)
    except (AttributeError, TypeError) as e:
        raise ObjectError(f"malformed node selector {selector!r}: {e}") from None


def _selector_matches(selector: Mapping[str, Any], node: Node) -> bool:
    terms = selector.get("nodeSelectorTerms") or []
    for term in terms:
        exprs = term.get("matchExpressions") or []
        fields = term.get("matchFields") or []
        if not exprs and not fields:
            continue  # an empty term matches nothing
        if all(_requirement(r, node.labels) for r in exprs) and all(
            _requirement(r, {"metadata.name": node.name}) for r in fields
        ):
            return True
    return False


def _requirement(req: Mapping[str, Any], labels: Mapping[str, str]) -> bool:
    key, op, values = req.get("key", ""), req.get("operator", ""), list(req.get("values") or ())
    present = key in labels
    if op == "In":
        return present and labels[key] in values
    if op == "NotIn":
        return not present or labels[key] not in values
    if op == "Exists":
        return present
    if op == "DoesNotExist":
        return not present
    if op in ("Gt", "Lt"):
        try:
            have, want = int(labels[key]), int(values[0])
        except (KeyError, ValueError, IndexError):
            return False
        return have > want if op == "Gt" else have < want
    raise ObjectError(f"node selector requirement {key!r}: unknown operator {op!r}")

