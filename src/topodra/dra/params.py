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

__all__ = [
    "API_VERSION",
    "KIND",
    "MEMORY_NODES",
    "NUMA_PLACEMENTS",
    "CORE_TYPES",
    "CpuConfig",
    "Problem",
    "applies_to",
    "conflicts",
    "parse_parameters",
    "request_config",
]

API_VERSION: Final = f"{DRIVER}/v1alpha1"
KIND: Final = "CpuConfig"
NUMA_PLACEMENTS: Final = ("pack", "spread")
MEMORY_NODES: Final = ("local", "all")
CORE_TYPES: Final = ("P-core", "E-core", "standard")

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
        problems.extend(conflicts(merged, f"request {request!r}"))
    return merged, problems
