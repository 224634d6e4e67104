"""The DRA device model: a Topology becomes the ``native.cpu`` devices the node publishes.

One module for the agent (which publishes the devices and maps allocations
back to CPUs) and the simulator (which builds synthetic clusters from it), so
both always agree on names, attributes and capacities. Pure and
deterministic: no I/O except importing the optional attribute hook.

Four models:

- ``cpu`` (default): one device per allowed CPU, ``cpuN``.
- ``core``: one device per physical core, ``coreN``, capacity ``cpus``.
- ``core-or-thread``: both, in one pool: ``coreN`` (capacity ``cpus``) and
  ``cpuN`` devices, kept apart by a shared counter per core
  (``topodra.dra.partitions``); ``unit`` says which a device is.
- ``grouped``: one multi-allocatable device per NUMA node / L3 group /
  socket / machine with a consumable capacity ``cpu``; the policy picks the
  physical CPUs at Prepare. On hybrid machines a group is split by core type
  so every device has one ``coreType``.

Attribute names are unqualified, so they live in the driver's domain and CEL
reads them as ``device.attributes["native.cpu"].<name>``.

Every device also says how many of the node's ``cpu`` it stands for
(``nodeAllocatableResourceMappings``, KEP-5517, gate ``DRANodeAllocatableResources``):
a CPU device 1, a core device its threads, a grouped device the ``cpu`` capacity a
claim consumes; a scheduler with the gate on then counts claimed CPUs against the
node's allocatable CPU (``node_allocatable_mappings``).
"""

from __future__ import annotations

import functools
import importlib
import json
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, ClassVar, Final, Literal

from topodra.cpuset import CPUSet
from topodra.dra.attributes import (
    AttributeValidationError,
    AttrValue,
    Capacity,
    attribute_from_api,
    attribute_to_api,
    is_dns_label,
    is_list_value,
    validate_attributes,
    validate_qualified_name,
)
from topodra.dra.partitions import UNIT_ATTRIBUTE, core_consumption
from topodra.dra.taints import TaintConfig, offline_reason, static_reasons, static_taints, taint
from topodra.topology.model import CoreType, CPUInfo, Topology

__all__ = [
    "DRIVER",
    "NUMA_NODE_ATTRIBUTE",
    "PCIE_ROOT_ATTRIBUTE",
    "CAPACITY_CPU",
    "CAPACITY_CPUS",
    "Device",
    "DeviceModelConfig",
    "DeviceModelError",
    "MODELS",
    "AttributeHook",
    "build_devices",
    "follow_devices",
    "offer_devices",
    "offered_cpus",
    "ordered_cpus",
    "cpu_attributes",
    "pcie_root",
    "device_class",
    "node_allocatable_mappings",
    "NODE_ALLOCATABLE_SWITCHES",
    "yaml_switches",
    "validate_attributes",
]

#: The DRA driver name, DeviceClass name and attribute domain.
DRIVER: Final = "native.cpu"
#: The standard cross-driver NUMA attribute (KEP-6072).
NUMA_NODE_ATTRIBUTE: Final = "resource.kubernetes.io/numaNode"
#: The standard PCIe root attribute (``deviceattribute.StandardDeviceAttributePCIeRoot``).
PCIE_ROOT_ATTRIBUTE: Final = "resource.kubernetes.io/pcieRoot"
#: Consumable capacity of grouped devices, in whole CPUs.
CAPACITY_CPU: Final = "cpu"
#: Capacity of ``core`` devices: the core's hardware threads.
CAPACITY_CPUS: Final = "cpus"

#: Attributes that describe one hardware thread; devices standing for several
#: CPUs never carry them.
PER_THREAD_ATTRIBUTES: Final = frozenset({"cpu", "thread", "smtSibling"})

#: ``fn(cpu, topology) -> {name: value}``: extra attributes for one CPU.
AttributeHook = Callable[[CPUInfo, Topology], Mapping[str, Any]]

_HOOK_SPEC = re.compile(r"[A-Za-z_][\w]*(\.[A-Za-z_][\w]*)*:[A-Za-z_][\w]*(\.[A-Za-z_][\w]*)*\Z")


class DeviceModelError(ValueError):
    """The device model configuration cannot produce valid devices."""


def _camel(name: str) -> str:
    """``shared_floor`` -> ``sharedFloor``: the config file's spelling of a field."""
    first, *rest = name.split("_")
    return first + "".join(part.title() for part in rest)


#: The device models, by name.
MODELS: Final = ("cpu", "core", "core-or-thread", "grouped")
#: ``nodeAllocatable``: publish the mappings when the API server keeps them (``auto``), always, never.
NODE_ALLOCATABLE_SWITCHES: Final = ("auto", "on", "off")

_CHOICES: Final[dict[str, tuple[str, ...]]] = {
    "model": MODELS,
    "group_by": ("numa", "l3", "socket", "machine"),
    "order": ("topology-reversed", "topology", "cpu-id"),
    "node_allocatable": NODE_ALLOCATABLE_SWITCHES,
}
#: YAML 1.1 reads a bare ``on``/``off`` as a boolean: the switch takes those too.
_SWITCH_BOOLS: Final = {True: "on", False: "off"}


def yaml_switches(raw: Any) -> Any:
    """A ``devices`` section with YAML's booleans for ``nodeAllocatable`` read as ``on``/``off``
    (what a person wrote unquoted); anything else as it is."""
    if isinstance(raw, Mapping):
        for key in ("nodeAllocatable", "node_allocatable"):
            value = raw.get(key)
            if isinstance(value, bool):
                raw = {**raw, key: _SWITCH_BOOLS[value]}
    return raw


def _check_add(value: object) -> None:
    if not isinstance(value, dict):
        raise ValueError(f"must be a mapping, got {value!r}")
    for name, raw in value.items():
        validate_qualified_name(name)
        validate_attributes({name: attribute_from_api(raw, name=name)}, driver=DRIVER)


def _check_rename(value: object) -> None:
    if not isinstance(value, dict):
        raise ValueError(f"must be a mapping, got {value!r}")
    targets: dict[str, str] = {}
    for old, new in value.items():
        validate_qualified_name(old)
        validate_qualified_name(new)
        if new in targets:
            raise AttributeValidationError(f"both {targets[new]!r} and {old!r} are renamed to it", attribute=new)
        targets[new] = old


def _check_drop(value: object) -> None:
    if not isinstance(value, list):
        raise ValueError(f"must be a list, got {value!r}")
    for name in value:
        validate_qualified_name(name)


def _check_hook(value: object) -> None:
    if value is not None and not (isinstance(value, str) and _HOOK_SPEC.match(value)):
        raise ValueError(f"{value!r} must look like 'package.module:function'")


@dataclass(frozen=True)
class DeviceModelConfig:
    """How the node's CPUs become DRA devices (the ``dra.devices`` config section).

    ``add_attributes`` sets constant attributes on every device (plain JSON
    scalars/lists or the API's ``{"version": "1.2.3"}`` form);
    ``rename_attributes`` maps old to new names; ``drop_attributes`` removes
    names. ``attribute_hook`` names a ``module:function`` called per CPU as
    ``fn(cpu: CPUInfo, topology: Topology)`` that returns extra attributes.
    Order: built-in, hook, add (wins over both), drop, rename.

    ``order`` is the order devices are listed in, which is the order the
    scheduler's first-fit allocator tries them: ``topology`` lists CPUs
    package by package, NUMA node by NUMA node, L3 group by L3 group, the
    threads of a core next to each other, so a ``count: N`` claim lands on
    whole cores of one L3 group; ``topology-reversed`` (the default) does the
    same from the other end of the machine, away from CPU 0 (the usual
    housekeeping and reserved CPU) and from where the policy packs exclusive
    grants, so claims and exclusive containers meet only on a full node;
    ``cpu-id`` lists devices by CPU number (the prototype's order; with the
    usual Linux numbering it spreads a claim over the first thread of many
    cores).

    ``node_allocatable``: whether devices carry ``nodeAllocatableResourceMappings``
    (how much of the node's ``cpu`` each stands for): ``auto`` (the default) when
    the API server keeps the field (the agent probes it once at start), ``on``,
    ``off``. The device model builds them unless ``off``; the agent leaves them out
    of its slices when the probe says the server drops them.

    ``list_attributes``: publish list-typed attribute values (gate ``DRAListTypeAttributes``,
    alpha in Kubernetes 1.36, off by default: an API server without it refuses such slices).
    Only ``resource.kubernetes.io/pcieRoot`` uses one: a CPU local to several PCIe roots
    carries the list of them when on, and no ``pcieRoot`` at all when off (a CPU local to one
    root carries it as a string either way). kube-scheduler 1.36 lets CEL selectors read such a
    list, but its ``matchAttribute`` matches no list (docs/dra.md).

    ``shared_floor``: how many shared CPUs are never offered, so that whatever
    the scheduler allocates from the slices leaves shared containers somewhere
    to run and Prepare never has to refuse a claim for that (see
    ``offered_cpus``). 0 offers every CPU (a claim may then be allocated that
    Prepare refuses).

    ``taints``: per reason (offline, unhealthy, isolated, reserved CPUs), the
    taint effect of its devices, or ``Withdraw`` / ``Untainted``
    (``topodra.dra.taints``).

    A plain dataclass that checks itself (``__post_init__``), so the simulator
    and the CLI build one without importing pydantic; the agent's config model
    validates it as a nested section with the same rules (``__pydantic_config__``:
    camelCase keys, unknown keys refused), and :meth:`from_mapping` does the same
    for a loose mapping.
    """

    __pydantic_config__: ClassVar[dict[str, Any]] = {
        "extra": "forbid",
        "alias_generator": _camel,
        "populate_by_name": True,
    }

    model: Literal["cpu", "core", "core-or-thread", "grouped"] = "cpu"
    group_by: Literal["numa", "l3", "socket", "machine"] = "numa"
    add_attributes: dict[str, Any] = field(default_factory=dict)
    rename_attributes: dict[str, str] = field(default_factory=dict)
    drop_attributes: list[str] = field(default_factory=list)
    attribute_hook: str | None = None
    order: Literal["topology-reversed", "topology", "cpu-id"] = "topology-reversed"
    shared_floor: int = 1
    node_allocatable: Literal["auto", "on", "off"] = "auto"
    taints: TaintConfig = field(default_factory=TaintConfig)
    list_attributes: bool = False

    def __post_init__(self) -> None:
        if isinstance(self.taints, Mapping):  # a plain mapping, as the loose constructors give it
            object.__setattr__(self, "taints", TaintConfig.of(self.taints))
        for name, allowed in _CHOICES.items():
            value = getattr(self, name)
            if value not in allowed:
                raise ValueError(f"{_camel(name)} must be one of {', '.join(allowed)}, got {value!r}")
        if isinstance(self.shared_floor, bool) or not isinstance(self.shared_floor, int) or self.shared_floor < 0:
            raise ValueError(f"sharedFloor must be a whole number >= 0, got {self.shared_floor!r}")
        if not isinstance(self.list_attributes, bool):
            raise ValueError(f"listAttributes must be true or false, got {self.list_attributes!r}")
        for name, check in (
            ("add_attributes", _check_add),
            ("rename_attributes", _check_rename),
            ("drop_attributes", _check_drop),
            ("attribute_hook", _check_hook),
        ):
            try:
                check(getattr(self, name))
            except ValueError as exc:
                raise ValueError(f"{_camel(name)}: {exc}") from exc

    @classmethod
    def from_mapping(cls, raw: Mapping[str, Any]) -> DeviceModelConfig:
        """Validate a config section (camelCase or snake_case keys) as the agent's config does.

        Raises pydantic's ``ValidationError`` naming each bad key.
        """
        from pydantic import TypeAdapter

        return TypeAdapter(cls).validate_python(dict(yaml_switches(raw)))

    def added(self) -> dict[str, AttrValue]:
        return {k: attribute_from_api(v, name=k) for k, v in self.add_attributes.items()}


@dataclass(frozen=True, eq=True)
class Device:
    """One published device and the physical CPUs it stands for.

    ``cpus`` is not published; the agent uses it to turn an allocation back
    into CPUs (for grouped devices: the CPUs the policy may pick from).
    ``node_allocatable``: the API's ``nodeAllocatableResourceMappings`` (resource name ->
    ``{capacityKey, allocationMultiplier}``), empty for none.
    """

    name: str
    attributes: Mapping[str, AttrValue]
    capacity: Mapping[str, Capacity] = field(default_factory=dict)
    allow_multiple_allocations: bool = False
    cpus: CPUSet = field(default_factory=CPUSet)
    taints: tuple[Mapping[str, Any], ...] = ()
    consumes_counters: tuple[Mapping[str, Any], ...] = ()
    node_allocatable: Mapping[str, Mapping[str, str]] = field(default_factory=dict)

    __hash__ = None  # type: ignore[assignment]  # holds mappings

    @functools.cached_property
    def without_node_allocatable(self) -> Device:
        """This device without ``nodeAllocatableResourceMappings`` (for an API server that drops
        them); the same object every time, so a re-publication of it is seen as unchanged."""
        return replace(self, node_allocatable={}) if self.node_allocatable else self

    @functools.cached_property
    def uses_advanced_features(self) -> bool:
        """True if the device lowers its slice's limit to 64 devices (taints, counters, lists)."""
        return bool(self.taints or self.consumes_counters) or any(
            is_list_value(v) for v in self.attributes.values()
        )

    def to_api(self) -> dict[str, Any]:
        """The resource.k8s.io/v1 ``Device`` JSON object (a new top-level dict; treat its values as read-only)."""
        return dict(self._api)

    @functools.cached_property
    def api_json(self) -> str:
        """``to_api()`` as compact JSON, encoded once: a slice re-publication joins these
        (``slices.encode_slice``) instead of encoding every device again."""
        return json.dumps(self._api, separators=(",", ":"))

    @functools.cached_property
    def api_json_spaced(self) -> str:
        """``to_api()`` as ``json.dumps`` writes it by default (", " and ": "): how a server written
        in Python (the API server double) answers; checked against an answer before decoding it."""
        return json.dumps(self._api)

    @functools.cached_property
    def _api(self) -> dict[str, Any]:
        # Built once: the agent republishes its devices after every change of the offer.
        out: dict[str, Any] = {"name": self.name}
        if self.attributes:
            out["attributes"] = {k: attribute_to_api(self.attributes[k]) for k in sorted(self.attributes)}
        if self.capacity:
            out["capacity"] = {k: self.capacity[k].to_api() for k in sorted(self.capacity)}
        if self.consumes_counters:
            out["consumesCounters"] = [dict(c) for c in self.consumes_counters]
        if self.taints:
            out["taints"] = [dict(t) for t in self.taints]
        if self.allow_multiple_allocations:
            out["allowMultipleAllocations"] = True
        if self.node_allocatable:
            # the API server's field order (capacityKey, then allocationMultiplier): its answer
            # then matches byte for byte
            out["nodeAllocatableResourceMappings"] = {
                k: {f: self.node_allocatable[k][f] for f in _MAPPING_FIELDS if f in self.node_allocatable[k]}
                for k in sorted(self.node_allocatable)
            }
        return out


_MAPPING_FIELDS: Final = ("capacityKey", "allocationMultiplier")


def node_allocatable_mappings(model: str, cpus: int) -> dict[str, dict[str, str]]:
    """A device's ``nodeAllocatableResourceMappings``: how much of the node's ``cpu`` allocating it
    takes. A ``cpu`` device (``cpus`` 1) or a core device (``cpus`` its threads) takes its CPUs
    for each allocation (``allocationMultiplier``, the device count's factor); a grouped device
    (``model`` ``grouped``) the ``cpu`` capacity a claim consumes from it (``capacityKey``, times
    1: the API server's default, written out so its answer equals what was sent)."""
    if model == "grouped":
        return {"cpu": {"capacityKey": CAPACITY_CPU, "allocationMultiplier": "1"}}
    return {"cpu": {"allocationMultiplier": str(cpus)}}


def device_class(name: str = DRIVER) -> dict[str, Any]:
    """The ``native.cpu`` DeviceClass: every device of this driver."""
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "DeviceClass",
        "metadata": {"name": name},
        "spec": {"selectors": [{"cel": {"expression": f'device.driver == "{DRIVER}"'}}]},
    }


def _mhz(khz: int | None) -> int | None:
    return khz // 1000 if khz else None


def cpu_attributes(topology: Topology, cpu: CPUInfo, *, lists: bool = False) -> dict[str, AttrValue]:
    """The built-in attributes of one CPU (the ``cpu`` model's device attributes).

    ``package``, ``die``, ``cluster`` and ``core`` are machine-unique indexes
    (sysfs ids repeat across packages); frequencies are in MHz and present
    only when known; ``smtSibling`` only on cores with several threads;
    ``resource.kubernetes.io/pcieRoot`` names the PCIe root(s) the CPU is local to
    (``pcie_root``; ``lists``: list values allowed).
    """
    siblings = cpu.siblings or CPUSet([cpu.id])
    attrs: dict[str, AttrValue] = {
        "cpu": cpu.id,
        "package": cpu.package,
        "die": cpu.die,
        "cluster": cpu.cluster,
        "core": cpu.core,
        "coreType": cpu.core_type.value,
        "localMemory": cpu.node,
        "isolated": cpu.isolated or cpu.id in topology.isolated,
        "thread": sorted(siblings).index(cpu.id) if cpu.id in siblings else 0,
        NUMA_NODE_ATTRIBUTE: cpu.node,
    }
    if len(topology.cpu_kinds()) > 1:
        attrs["cpuKind"] = cpu.kind
    others = siblings - CPUSet([cpu.id])
    if others:
        attrs["smtSibling"] = others.first()
    for name, khz in (("baseFreq", cpu.base_freq_khz), ("minFreq", cpu.min_freq_khz), ("maxFreq", cpu.max_freq_khz)):
        mhz = _mhz(khz)
        if mhz:
            attrs[name] = mhz
    if cpu.l2 is not None:
        attrs["l2Cache"] = cpu.l2
    if cpu.l3 is not None:
        attrs["l3Cache"] = cpu.l3
    root = pcie_root(topology, cpu.id, lists=lists)
    if root is not None:
        attrs[PCIE_ROOT_ATTRIBUTE] = root
    return attrs


def pcie_root(topology: Topology, cpu: int, *, lists: bool) -> str | tuple[str, ...] | None:
    """The ``pcieRoot`` value of a CPU: the one root it is local to, the list of several (when
    ``lists``), else None. Roots holding only bridges and uncore registers do not count
    (``Topology.pcie_roots_of``)."""
    roots = topology.pcie_roots_of(cpu)
    if len(roots) == 1:
        return roots[0]
    if roots and lists:
        return roots
    return None


def _load_hook(spec: str) -> AttributeHook:
    module_name, _, attr_path = spec.partition(":")
    try:
        obj: Any = importlib.import_module(module_name)
    except Exception as exc:
        raise DeviceModelError(f"attribute_hook {spec!r}: cannot import {module_name!r}: {exc}") from exc
    for part in attr_path.split("."):
        try:
            obj = getattr(obj, part)
        except AttributeError:
            raise DeviceModelError(f"attribute_hook {spec!r}: {module_name!r} has no {attr_path!r}") from None
    if not callable(obj):
        raise DeviceModelError(f"attribute_hook {spec!r} is not callable")
    return obj  # type: ignore[no-any-return]


def _hook_attributes(hook: AttributeHook, spec: str, topology: Topology, cpu: CPUInfo) -> dict[str, AttrValue]:
    try:
        raw = hook(cpu, topology)
    except Exception as exc:
        raise DeviceModelError(f"attribute_hook {spec!r} failed for CPU {cpu.id}: {exc!r}") from exc
    if not isinstance(raw, Mapping):
        raise DeviceModelError(
            f"attribute_hook {spec!r} returned {type(raw).__name__} for CPU {cpu.id}; expected a mapping"
        )
    out: dict[str, AttrValue] = {}
    for name, value in raw.items():
        if not isinstance(name, str):
            raise DeviceModelError(f"attribute_hook {spec!r} returned a non-string name {name!r} for CPU {cpu.id}")
        validate_qualified_name(name, device=f"cpu{cpu.id}")
        out[name] = attribute_from_api(value, name=name, device=f"cpu{cpu.id}")
    return out


def _agreeing(per_cpu: Sequence[Mapping[str, AttrValue]]) -> dict[str, AttrValue]:
    """Attributes shared by every CPU of a multi-CPU device, per-thread ones left out."""
    first, *rest = per_cpu
    out: dict[str, AttrValue] = {}
    for name, value in first.items():
        if name in PER_THREAD_ATTRIBUTES:
            continue
        if all(name in other and other[name] == value and type(other[name]) is type(value) for other in rest):
            out[name] = value
    return out


_NO_CPUS: Final = CPUSet()
_GROUP_PREFIX: Final = {"numa": "numa", "l3": "l3cache", "socket": "socket", "machine": "machine"}
_TYPE_SUFFIX: Final = {CoreType.P_CORE: "pcore", CoreType.E_CORE: "ecore", CoreType.STANDARD: "standard"}


def _group_key(config: DeviceModelConfig, cpu: CPUInfo) -> int:
    if config.group_by == "numa":
        return cpu.node
    if config.group_by == "l3":
        return cpu.l3 if cpu.l3 is not None else -1
    if config.group_by == "socket":
        return cpu.package
    return 0


def _grouped_capacity(n: int) -> Capacity:
    # Whole CPUs; a request that names no amount takes one CPU.
    if n >= 2:
        return Capacity(value=n, default=1, valid_range=(1, n, 1))
    return Capacity(value=n, default=1, valid_range=(1, n, None))


def ordered_cpus(topology: Topology, cpus: CPUSet, order: str = "topology-reversed") -> list[int]:
    """``cpus`` in device order (see ``DeviceModelConfig.order``); threads of a core stay together."""
    if order == "cpu-id":
        return list(cpus)

    def key(cpu: int) -> tuple[int, ...]:
        i = topology.cpus[cpu]
        return (i.package, i.die, i.node, -1 if i.l3 is None else i.l3, -1 if i.l2 is None else i.l2, i.core)

    if order == "topology":
        return sorted(cpus, key=lambda c: (key(c), c))
    if order == "topology-reversed":
        return sorted(cpus, key=lambda c: (tuple(-k for k in key(c)), c))
    raise DeviceModelError(f"unknown device order {order!r}: topology-reversed, topology or cpu-id")


#: One device before customization: name, attributes, capacity, allowMultipleAllocations, its CPUs.
_RawDevice = tuple[str, dict[str, AttrValue], dict[str, Capacity], bool, CPUSet]


#: Grouped devices: the CPUs set apart for a lasting reason (``taints.static_reasons``) form
#: devices of their own, named after the group and the reason.
_SET_APART: Final = ("", "reserved", "isolated")


def _raw_devices(
    topology: Topology,
    config: DeviceModelConfig,
    allowed: CPUSet,
    per_cpu: Mapping[int, dict[str, AttrValue]],
    reasons: Mapping[int, str],
) -> list[_RawDevice]:
    """The devices of the ``cpu``, ``core`` and grouped models, in publishing order."""
    raw: list[_RawDevice] = []
    if config.model == "cpu":
        for cpu_id in ordered_cpus(topology, allowed, config.order):
            raw.append((f"cpu{cpu_id}", per_cpu[cpu_id], {}, False, CPUSet([cpu_id])))
    elif config.model == "core":
        cores = list(dict.fromkeys(topology.cpus[c].core for c in ordered_cpus(topology, allowed, config.order)))
        for core in cores:
            cpus = topology.cpus_of_core(core) & allowed
            if not cpus:
                continue
            attrs = _agreeing([per_cpu[c] for c in cpus])
            raw.append((f"core{core}", attrs, {CAPACITY_CPUS: Capacity(len(cpus))}, False, cpus))
    else:
        # One device per group and CPU kind (which fixes the core type), so every device has
        # one coreType and one cpuKind; P before E as before, kinds of a type by rank.
        split_by_type = topology.hybrid
        kinds_of_type = {ct: {topology.cpus[c].kind for c in topology.cpus_of_type(ct)} for ct in CoreType}
        groups: dict[tuple[int, int, int, int], int] = {}
        for cpu_id in allowed:
            info = topology.cpus[cpu_id]
            type_index = list(CoreType).index(info.core_type) if split_by_type else 0
            key = (_group_key(config, info), type_index, info.kind if split_by_type else 0, _SET_APART.index(reasons.get(cpu_id, "")))
            groups[key] = groups.get(key, 0) | (1 << cpu_id)
        for (gid, type_index, kind, apart), mask in sorted(groups.items()):
            cpus = CPUSet.from_mask(mask)
            prefix = _GROUP_PREFIX[config.group_by]
            name = prefix if config.group_by == "machine" else f"{prefix}{gid}"
            if split_by_type:
                core_type = list(CoreType)[type_index]
                name += "-" + _TYPE_SUFFIX[core_type] + (f"{kind}" if len(kinds_of_type[core_type]) > 1 else "")
            if apart:
                name += "-" + _SET_APART[apart]
            attrs = _agreeing([per_cpu[c] for c in cpus])
            raw.append((name, attrs, {CAPACITY_CPU: _grouped_capacity(len(cpus))}, True, cpus))

    return raw


def build_devices(
    topology: Topology,
    config: DeviceModelConfig | None = None,
    *,
    exclude: CPUSet = _NO_CPUS,
    reserved: CPUSet = _NO_CPUS,
) -> list[Device]:
    """The devices a node publishes, in ``config.order`` (groups: by group id).

    ``exclude``: CPUs never published. ``reserved``: the CPUs reserved for system containers;
    they and the kernel-isolated CPUs are published tainted or withdrawn as ``config.taints``
    says (``topodra.dra.taints``). Raises ``AttributeValidationError`` (naming device and
    attribute) for anything the API server would reject, ``DeviceModelError`` for a broken config.
    """
    config = config or DeviceModelConfig()
    reasons = static_reasons(topology, reserved, config.taints)
    withdrawn = CPUSet(c for c, why in reasons.items() if config.taints.withdraws(why))
    allowed = topology.online - exclude - withdrawn
    hook = _load_hook(config.attribute_hook) if config.attribute_hook else None
    added = config.added()

    per_cpu: dict[int, dict[str, AttrValue]] = {}
    for cpu_id in allowed:
        info = topology.cpus[cpu_id]
        attrs = cpu_attributes(topology, info, lists=config.list_attributes)
        if hook is not None:
            assert config.attribute_hook is not None
            attrs.update(_hook_attributes(hook, config.attribute_hook, topology, info))
        per_cpu[cpu_id] = attrs

    raw: list[_RawDevice] = []
    counters: dict[str, tuple[dict[str, Any], ...]] = {}
    if config.model == "core-or-thread":
        _core_or_thread(topology, config, allowed, per_cpu, raw, counters)
    else:
        raw = _raw_devices(topology, config, allowed, per_cpu, reasons)

    present: set[str] = set()
    for _, attrs, _, _, _ in raw:
        present.update(attrs)
    present.update(added)
    for old in config.rename_attributes:
        if old not in present:
            raise DeviceModelError(
                f"rename_attributes: no {config.model!r} device has attribute {old!r} "
                f"(known: {', '.join(sorted(present))})"
            )
    for name in config.drop_attributes:
        if name not in present:
            raise DeviceModelError(
                f"drop_attributes: no {config.model!r} device has attribute {name!r} "
                f"(known: {', '.join(sorted(present))})"
            )

    devices: list[Device] = []
    mapped = config.node_allocatable != "off"
    for name, attrs, capacity, multi, cpus in raw:
        final = _customize(name, attrs, added, config)
        if not is_dns_label(name):
            raise AttributeValidationError(f"device name {name!r} is not a DNS label", device=name)
        validate_attributes(final, capacity, driver=DRIVER, device=name)
        devices.append(
            Device(
                name=name,
                attributes=final,
                capacity=capacity,
                allow_multiple_allocations=multi,
                cpus=cpus,
                taints=static_taints(topology, cpus, reasons, config.taints),
                consumes_counters=counters.get(name, ()),
                node_allocatable=node_allocatable_mappings(config.model, len(cpus)) if mapped else {},
            )
        )
    return devices


def _core_or_thread(
    topology: Topology,
    config: DeviceModelConfig,
    allowed: CPUSet,
    per_cpu: Mapping[int, dict[str, AttrValue]],
    raw: list[_RawDevice],
    counters: dict[str, tuple[dict[str, Any], ...]],
) -> None:
    """Per core in device order: the core device, then its threads' devices (so a thread
    request fills one core before it starts the next), each consuming the core's counter."""
    by_core: dict[int, list[int]] = {}
    for c in ordered_cpus(topology, allowed, config.order):
        by_core.setdefault(topology.cpus[c].core, []).append(c)
    for core, threads in by_core.items():
        cpus = CPUSet(threads)
        attrs = {**_agreeing([per_cpu[c] for c in cpus]), UNIT_ATTRIBUTE: "core"}
        raw.append((f"core{core}", attrs, {CAPACITY_CPUS: Capacity(len(cpus))}, False, cpus))
        counters[f"core{core}"] = core_consumption(core, len(cpus))
        for cpu_id in threads:
            raw.append((f"cpu{cpu_id}", {**per_cpu[cpu_id], UNIT_ATTRIBUTE: "thread"}, {}, False, CPUSet([cpu_id])))
            counters[f"cpu{cpu_id}"] = core_consumption(core, 1)


def _customize(
    device: str, attrs: Mapping[str, AttrValue], added: Mapping[str, AttrValue], config: DeviceModelConfig
) -> dict[str, AttrValue]:
    merged: dict[str, AttrValue] = {**attrs, **added}
    for name in config.drop_attributes:
        merged.pop(name, None)
    renamed: dict[str, AttrValue] = {}
    for name, value in merged.items():
        new = config.rename_attributes.get(name, name)
        if new in renamed:
            raise AttributeValidationError(
                f"renaming {name!r} collides with an existing attribute", device=device, attribute=new
            )
        renamed[new] = value
    return dict(sorted(renamed.items()))


def offered_cpus(
    topology: Topology,
    config: DeviceModelConfig,
    *,
    candidates: CPUSet,
    shared_free: CPUSet,
    exclusive: CPUSet,
    order: Sequence[int] | None = None,
    reserved_free: CPUSet = _NO_CPUS,
) -> CPUSet:
    """The CPUs the node offers in its ResourceSlices now.

    ``candidates`` may ever be offered (online, not reserved); ``exclusive``
    are held by containers outside DRA (Guaranteed containers' exclusive
    CPUs): withdrawn while held, so no claim lands on a running exclusive
    container; ``shared_free`` are the shared CPUs neither claimed nor held
    exclusively. The last ``config.shared_floor`` of them in device order (the
    scheduler's last choices, so the floor moves rarely) are kept off offer:
    with every offered CPU allocated, shared containers still have a CPU.
    Claimed CPUs stay offered (the scheduler counts them as allocated).
    ``order``: ``ordered_cpus(topology, topology.online, config.order)``, if the
    caller keeps it (this runs after every placement). ``reserved_free``: the published reserved
    CPUs no claim holds; the last of them in device order is kept off offer, so a claim (whose
    reserved taint is tolerated) never takes the last one the system containers have.
    """
    floor = 0
    want = config.shared_floor
    free = shared_free.mask
    tails: list[int] = []
    if reserved_free:
        tails = _tail_masks(order if order is not None else ordered_cpus(topology, topology.online, config.order))
        floor = _last_of(tails, reserved_free.mask)
    if want and free:
        tails = tails or _tail_masks(order if order is not None else ordered_cpus(topology, topology.online, config.order))
        # The floor is the free CPUs among the shortest tail of the order holding ``want`` of them
        # (all of them when fewer): a binary search over the tails, not a walk through the order
        # (which, once the first exclusive grants are taken from its far end, tests every CPU held).
        # The floor moves rarely: the last answer is tried first.
        lo, hi = 0, len(tails) - 1
        last = _LAST_TAIL[0]
        if 0 < last <= hi and (tails[last] & free).bit_count() >= want > (tails[last - 1] & free).bit_count():
            hi = last
        elif (tails[hi] & free).bit_count() > want:
            while hi - lo > 1:
                mid = (lo + hi) // 2
                if (tails[mid] & free).bit_count() >= want:
                    hi = mid
                else:
                    lo = mid
            _LAST_TAIL[0] = hi
        floor |= tails[hi] & free
    return CPUSet.from_mask(candidates.mask & ~exclusive.mask & ~floor)


def _last_of(tails: Sequence[int], mask: int) -> int:
    """The last CPU of ``mask`` in the order ``tails`` were made from, as a mask (0: none)."""
    lo, hi = 0, len(tails) - 1
    if not tails[hi] & mask:
        return 0
    while hi - lo > 1:  # the shortest tail holding one of them
        mid = (lo + hi) // 2
        if tails[mid] & mask:
            hi = mid
        else:
            lo = mid
    return tails[hi] & ~tails[hi - 1]


#: The last order ``_tail_masks`` saw (a copy, and the tuple itself: one is never changed) and its
#: tails; the agent passes the same order each time.
_TAILS: list[tuple[list[int], Sequence[int], list[int]]] = []
#: The tail the last floor was found in (only a hint: checked before use).
_LAST_TAIL = [0]


def _tail_masks(order: Sequence[int]) -> list[int]:
    """``tails[i]``: the mask of the last ``i`` CPUs of ``order`` (``tails[0]`` is 0)."""
    if _TAILS:
        copy, seen, tails = _TAILS[0]
        if (seen is order and type(order) is tuple) or copy == (order if type(order) is list else list(order)):
            return tails
    tails = [0]
    mask = 0
    for cpu in reversed(order):
        mask |= 1 << cpu
        tails.append(mask)
    _TAILS[:] = [(list(order), order, tails)]
    return tails


def offer_devices(
    topology: Topology,
    config: DeviceModelConfig,
    devices: Sequence[Device],
    offered: CPUSet,
    *,
    reserved: CPUSet = _NO_CPUS,
) -> list[Device]:
    """``devices`` (built from every candidate CPU, or ``follow_devices``' list, whose devices may
    stand for offline CPUs) narrowed to ``offered`` (online CPUs only).

    ``cpu`` and ``core`` devices not wholly offered are left out (a core with
    one thread held exclusively is not offered: Prepare gives a core
    device all its threads); ``grouped`` devices are rebuilt over their offered CPUs
    (capacity shrinks, a device with none left disappears; ``reserved``: as for
    ``build_devices``). Names never change.

    A device standing for offline CPUs (every one: ``offline``; some: ``unhealthy``, not for
    grouped devices, which shrink) is published with that taint when ``config.taints`` gives the
    reason an effect and the rest of its CPUs are offered; withdrawn otherwise.
    """
    online, treat = topology.online, config.taints
    out: list[Device] = []
    if config.model == "grouped":
        out = build_devices(topology, config, exclude=online - offered, reserved=reserved)
        names = {d.name for d in out}
        devices = [d for d in devices if d.name not in names and not d.cpus & online]
    for d in devices:
        if d.cpus <= offered:
            out.append(d)
        elif (reason := offline_reason(d.cpus, online)) is not None and (d.cpus & online) <= offered:
            effect = treat.effect(reason)
            if effect is not None:
                out.append(_tainted(d, taint(reason, effect)))
    return out


#: device name -> (the device, the taint added, the device with it): the same object while
#: neither changes, so the slices' writer sees an unchanged device as the same one.
_TAINTED: dict[str, tuple[Device, Mapping[str, Any], Device]] = {}


def _tainted(device: Device, added: Mapping[str, Any]) -> Device:
    """``device`` with ``added`` before its own taints (one object per device and taint)."""
    cached = _TAINTED.get(device.name)
    if cached is not None and cached[0] is device and cached[1] == added:
        return cached[2]
    if len(_TAINTED) > 4096:
        _TAINTED.clear()
    out = replace(device, taints=(added, *device.taints))
    _TAINTED[device.name] = (device, added, out)
    return out


def follow_devices(known: Sequence[Device], fresh: Sequence[Device], online: CPUSet) -> list[Device]:
    """The device list after the machine changed (CPU hotplug): ``fresh`` (built from the
    re-read machine, its group numbers carried: ``topology.follow``) and the ``known`` devices
    that stand for CPUs now offline (not in ``online``).

    A device keeps its name and stands for every CPU it stood for that is offline now: one whose
    CPUs are partly offline keeps its whole definition (a core device whose thread is offline is
    not offered as a smaller core: Prepare gives a core all its threads); one wholly offline stays
    listed (unhealthy, never offered) so claims that name it stay valid; new ones are added. A
    device gone for another reason (its CPU reserved now) is gone. Fresh devices come first, in
    their order (the slices' order); the offline ones after them.
    """
    by_name = {d.name: d for d in known}
    out: list[Device] = []
    for d in fresh:
        k = by_name.pop(d.name, None)
        missing = k.cpus - d.cpus - online if k is not None else _NO_CPUS
        out.append(d if k is None or not missing else replace(k, cpus=d.cpus | missing))
    out.extend(k for k in by_name.values() if k.cpus - online)
    return out
