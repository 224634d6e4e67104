"""Per-claim parameters of ``native.cpu``: the opaque ``CpuConfig`` of a DeviceClass or a claim.

A DeviceClass (``spec.config``) or a ResourceClaim (``spec.devices.config``) may carry::

    opaque:
      driver: native.cpu
      parameters:
        apiVersion: native.cpu/v1alpha1
        kind: CpuConfig
        wholeCores: true          # whole physical cores only
        numaPlacement: spread     # pack (fewest NUMA nodes) | spread (evenly over them)
        preferredCoreType: P-core # P-core | E-core | standard
        memoryNodes: all          # local (the claim's NUMA nodes) | all (every memory node)
        cpuset: "4-7"             # the CPUs an external scheduler chose

The scheduler copies them into ``status.allocation.devices.config``: the class's first (source
``FromClass``), then the claim's (``FromClaim``), each naming the requests it applies to (none:
all). For one request the entries that apply are merged in that order, field by field, so a
claim's setting wins over its class's. What each field does depends on who chose the CPUs
(docs/dra.md, "Per-claim parameters"): topodra for a share of a grouped device, the scheduler for
every other device, where a field either checks the allocation or is refused.

Pure: plain data in, a ``CpuConfig`` or ``Problem`` lines out. Every problem names the field's
path and the value found, so ``topodra dra check-claim`` prints one line per problem and Prepare
refuses the claim with them.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, fields, replace
from typing import Any, Final

from topodra.cpuset import CPUSet, CPUSetParseError
from topodra.dra.devices import DRIVER
from topodra.policy.api import MEMORY_MODES
from topodra.topology.model import CoreType

__all__ = [
    "API_VERSION",
    "KIND",
    "MEMORY_NODES",
    "NUMA_PLACEMENTS",
    "CORE_TYPES",
    "CpuConfig",
    "Problem",
    "STEERING",
    "applies_to",
    "check_object",
    "conflicts",
    "parse_parameters",
    "request_config",
]

API_VERSION: Final = f"{DRIVER}/v1alpha1"
KIND: Final = "CpuConfig"
NUMA_PLACEMENTS: Final = ("pack", "spread")
MEMORY_NODES: Final = MEMORY_MODES
CORE_TYPES: Final = tuple(t.value for t in CoreType)

_MISSING: Final = object()


@dataclass(frozen=True, slots=True)
class Problem:
    """One thing wrong with a configuration: where, what, and the value found (if any)."""

    path: str
    what: str
    got: Any = _MISSING

    def __str__(self) -> str:
        if self.got is _MISSING:
            return f"{self.path}: {self.what}"
        return f"{self.path}: {self.what} (got {json.dumps(self.got, sort_keys=True, default=str)})"


@dataclass(frozen=True, slots=True)
class CpuConfig:
    """The parameters in force for one request; None: not set (the default applies)."""

    whole_cores: bool | None = None
    numa_placement: str | None = None
    preferred_core_type: str | None = None
    memory_nodes: str | None = None
    cpuset: CPUSet | None = None

    def over(self, earlier: CpuConfig) -> CpuConfig:
        """``earlier`` with every field this one sets replaced (the later configuration wins)."""
        return replace(earlier, **{f.name: v for f in fields(self) if (v := getattr(self, f.name)) is not None})

    @property
    def is_empty(self) -> bool:
        return all(getattr(self, f.name) is None for f in fields(self))


class _Bad(str):
    """What is wrong with a field's value (a check's answer that is not a value)."""


def _bool(value: Any) -> Any:
    return value if isinstance(value, bool) else _Bad("must be true or false")


def _choice(allowed: Sequence[str]) -> Any:
    def check(value: Any) -> Any:
        return value if isinstance(value, str) and value in allowed else _Bad(f"must be {' or '.join(allowed)}")

    return check


def _cpuset(value: Any) -> Any:
    if not isinstance(value, str):
        return _Bad('must be a CPU list in the kernel\'s format, e.g. "4-7,12"')
    try:
        cpus = CPUSet.parse(value)
    except CPUSetParseError as exc:
        return _Bad(f"is not a CPU list: {exc}")
    return cpus if cpus else _Bad("must name at least one CPU")


#: field of the parameters -> (attribute of ``CpuConfig``, check returning the value or a ``_Bad``)
_FIELDS: Final = {
    "wholeCores": ("whole_cores", _bool),
    "numaPlacement": ("numa_placement", _choice(NUMA_PLACEMENTS)),
    "preferredCoreType": ("preferred_core_type", _choice(CORE_TYPES)),
    "memoryNodes": ("memory_nodes", _choice(MEMORY_NODES)),
    "cpuset": ("cpuset", _cpuset),
}


def parse_parameters(parameters: Any, path: str = "parameters") -> tuple[CpuConfig, list[Problem]]:
    """One ``opaque.parameters`` object: the configuration it sets and every problem in it."""
    if not isinstance(parameters, Mapping):
        return CpuConfig(), [Problem(path, f"must be an object with apiVersion {API_VERSION} and kind {KIND}", parameters)]
    problems: list[Problem] = []
    for key, want, what in (("apiVersion", API_VERSION, "the version this driver reads"), ("kind", KIND, "")):
        value = parameters.get(key, _MISSING)
        if value is _MISSING:
            problems.append(Problem(f"{path}.{key}", f"is required: {want}"))
        elif value != want:
            problems.append(Problem(f"{path}.{key}", f"must be {want}" + (f", {what}" if what else ""), value))
    values: dict[str, Any] = {}
    for key, value in parameters.items():
        if key in ("apiVersion", "kind"):
            continue
        spec = _FIELDS.get(str(key))
        if spec is None:
            problems.append(Problem(f"{path}.{key}", f"unknown field; {KIND} has {', '.join(_FIELDS)}"))
            continue
        attr, check = spec
        parsed = check(value)
        if isinstance(parsed, _Bad):
            problems.append(Problem(f"{path}.{key}", str(parsed), value))
        else:
            values[attr] = parsed
    config = CpuConfig(**values)
    problems.extend(conflicts(config, path))
    return config, problems


def conflicts(config: CpuConfig, path: str) -> list[Problem]:
    """Fields that cannot be set together: an explicit cpuset leaves nothing to steer."""
    out: list[Problem] = []
    if config.cpuset is not None:
        for key, value in (("numaPlacement", config.numa_placement), ("preferredCoreType", config.preferred_core_type)):
            if value is not None:
                out.append(Problem(f"{path}.{key}", "cannot be set with cpuset: the CPUs are already chosen", value))
    return out


def applies_to(requests: Iterable[str] | None, request: str) -> bool:
    """Whether a configuration naming ``requests`` (none: all) applies to the result of ``request``
    (``main`` or ``main/sub``): a main request's name covers all its subrequests."""
    names = list(requests or ())
    return not names or request in names or request.split("/", 1)[0] in names


def request_config(
    entries: Sequence[Mapping[str, Any]], request: str, *, driver: str = DRIVER, path: str = "status.allocation.devices.config"
) -> tuple[CpuConfig, list[Problem]]:
    """The merged configuration of one request from ``status.allocation.devices.config`` (in the
    API's order: class entries first, then the claim's), with the problems of every entry that
    applies to it and the conflicts of the merge."""
    merged = CpuConfig()
    problems: list[Problem] = []
    for i, entry in enumerate(entries):
        opaque = entry.get("opaque") if isinstance(entry, Mapping) else None
        if not isinstance(opaque, Mapping) or opaque.get("driver") != driver:
            continue
        requests = entry.get("requests")
        if not applies_to(requests if isinstance(requests, list) else None, request):
            continue
        source = entry.get("source")
        where = f"{path}[{i}]" + (f" ({source})" if isinstance(source, str) else "")
        config, found = parse_parameters(opaque.get("parameters"), f"{where}.opaque.parameters")
        problems.extend(found)
        merged = config.over(merged)
    if not problems:
        problems.extend(conflicts(merged, f"{path} (merged for request {request!r})"))
    return merged, problems


#: The fields that steer topodra's pick, which only grouped devices have (the scheduler chooses
#: the CPUs of every other device), with what to use there instead.
STEERING: Final = {
    "numaPlacement": "a constraint matchAttribute: resource.kubernetes.io/numaNode",
    "preferredCoreType": 'a selector on device.attributes["native.cpu"].coreType',
}


def _request_names(devices: Mapping[str, Any]) -> set[str]:
    names: set[str] = set()
    for r in devices.get("requests") or ():
        if isinstance(r, Mapping) and isinstance(r.get("name"), str):
            names.add(r["name"])
            for sub in r.get("firstAvailable") or ():
                if isinstance(sub, Mapping) and isinstance(sub.get("name"), str):
                    names.add(f"{r['name']}/{sub['name']}")
    return names


def _config_entries(entries: Any, path: str, requests: set[str] | None, model: str | None) -> list[Problem]:
    """Problems of a ``config`` list of a class (``requests`` None) or a claim."""
    if entries is None:
        return []
    if not isinstance(entries, list):
        return [Problem(path, "must be a list", entries)]
    problems: list[Problem] = []
    for i, entry in enumerate(entries):
        where = f"{path}[{i}]"
        opaque = entry.get("opaque") if isinstance(entry, Mapping) else None
        if not isinstance(opaque, Mapping) or opaque.get("driver") != DRIVER:
            continue
        config, found = parse_parameters(opaque.get("parameters"), f"{where}.opaque.parameters")
        problems.extend(found)
        names = entry.get("requests") or []
        for j, name in enumerate(names if requests is not None and isinstance(names, list) else ()):
            assert requests is not None
            if name not in requests and str(name).split("/", 1)[0] not in requests:
                known = ", ".join(sorted(requests)) or "none"
                problems.append(Problem(f"{where}.requests[{j}]", f"names no request of the claim (it has {known})", name))
        if model is not None and model != "grouped":
            problems.extend(_not_applying(config, f"{where}.opaque.parameters", model))
    return problems


def _not_applying(config: CpuConfig, path: str, model: str) -> list[Problem]:
    out: list[Problem] = []
    for key, value in (("numaPlacement", config.numa_placement), ("preferredCoreType", config.preferred_core_type)):
        if value is not None:
            out.append(Problem(
                f"{path}.{key}",
                f"does not apply to {model} devices, whose CPUs the scheduler chooses; use {STEERING[key]}",
                value,
            ))
    return out


def _map(value: Any) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def check_object(obj: Any, *, model: str | None = None) -> tuple[int, list[Problem]]:
    """(how many ``native.cpu`` configurations, their problems) of a DeviceClass, ResourceClaim or
    ResourceClaimTemplate; an allocated claim's ``status.allocation.devices.config`` too, merged
    per request as Prepare merges it. ``model``: also report fields that do not apply to it."""
    obj = _map(obj)
    kind = obj.get("kind")
    head = f"{kind}/{_map(obj.get('metadata')).get('name') or '?'} "
    spec = _map(obj.get("spec"))
    requests: set[str] | None = None
    if kind == "DeviceClass":
        entries, path = spec.get("config"), "spec.config"
    elif kind == "ResourceClaim":
        devices = _map(spec.get("devices"))
        entries, path, requests = devices.get("config"), "spec.devices.config", _request_names(devices)
    elif kind == "ResourceClaimTemplate":
        devices = _map(_map(spec.get("spec")).get("devices"))
        entries, path, requests = devices.get("config"), "spec.spec.devices.config", _request_names(devices)
    else:
        return 0, []
    problems = _config_entries(entries, head + path, requests, model)
    count = sum(1 for e in entries or () if _map(_map(e).get("opaque")).get("driver") == DRIVER)
    if kind == "ResourceClaim":
        problems.extend(_allocated(obj, head))
    return count, problems


def _allocated(claim: Mapping[str, Any], head: str) -> list[Problem]:
    """The merge conflicts of an allocated claim's requests (each entry's own problems are its spec's)."""
    devices = _map(_map(_map(claim.get("status")).get("allocation")).get("devices"))
    config = devices.get("config")
    if not isinstance(config, list):
        return []
    out: list[Problem] = []
    for request in dict.fromkeys(str(_map(r).get("request")) for r in devices.get("results") or ()):
        _, found = request_config(config, request, path=head + "status.allocation.devices.config")
        out.extend(p for p in found if p not in out)
    return out
