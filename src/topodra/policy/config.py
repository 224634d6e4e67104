"""The policy's configuration: one pydantic model, strict, with errors that name field and value.

Field names are snake_case; the camelCase spelling (``reservedCPUs``,
``pinMemory``, ...) is accepted too, so the same YAML reads naturally next to
Kubernetes objects. Checks that need the machine (is CPU 300 online?) happen
when a ``Policy`` is built and raise ``BadRequestError`` naming the field.
"""

from __future__ import annotations

import enum
import fnmatch
import re
from typing import Annotated, Any

from pydantic import (
    AliasChoices,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    PlainSerializer,
    WithJsonSchema,
    field_validator,
    model_validator,
)
from pydantic.alias_generators import to_camel

from topodra.cpuset import CPUSet, CPUSetParseError
from topodra.quantity import cpu_milli
from topodra.topology.model import MemoryKind

__all__ = ["PolicyConfig", "CPUPriority", "TopologyLevel", "parse_cpu_quantity"]


class CPUPriority(enum.StrEnum):
    """Which kind of CPU exclusive grants prefer (``prefer-cpu-priority``)."""

    HIGH = "high"  # P-cores
    NORMAL = "normal"  # anything but E-cores (without SST there is no finer priority)
    LOW = "low"  # E-cores
    NONE = "none"  # no preference


class TopologyLevel(enum.StrEnum):
    """Pool levels, top to bottom (``unlimited-burstable``)."""

    SYSTEM = "system"
    PACKAGE = "package"
    DIE = "die"
    NUMA = "numa"
    L3CACHE = "l3cache"


def parse_cpu_quantity(value: object, what: str) -> int:
    """A Kubernetes CPU quantity (``2``, ``750m``, ``1.5``) in milli-CPU, rounded up."""
    return cpu_milli(value, what)


def _to_cpuset(value: object) -> CPUSet:
    if isinstance(value, CPUSet):
        return value
    if isinstance(value, str):
        try:
            return CPUSet.parse(value)
        except CPUSetParseError as e:
            raise ValueError(str(e)) from None
    if isinstance(value, list | tuple) and all(isinstance(v, int) and not isinstance(v, bool) for v in value):
        try:
            return CPUSet(value)
        except ValueError as e:
            raise ValueError(f"invalid CPU list {value!r}: {e}") from None
    raise ValueError(f"expected a CPU list like '0-3,8' or a list of ids, got {value!r}")


#: A CPU set field: written as the kernel list format, read from it or from a list of ids.
CPUSetField = Annotated[
    CPUSet,
    BeforeValidator(_to_cpuset),
    PlainSerializer(lambda s: s.format(), return_type=str),
    WithJsonSchema({"type": "string", "description": "kernel CPU list, e.g. 0-3,8"}),
]


class PolicyConfig(BaseModel):
    """Configuration of the topology-aware policy (see docs/policy.md)."""

    model_config = ConfigDict(
        extra="forbid",
        frozen=True,
        alias_generator=to_camel,
        populate_by_name=True,
        arbitrary_types_allowed=True,
        use_enum_values=False,
    )

    reserved_cpus: CPUSetField | None = Field(
        default=None,
        validation_alias=AliasChoices("reservedCPUs", "reserved_cpus"),
        serialization_alias="reservedCPUs",
        description="CPUs kept for system and kube-system containers, e.g. '0-1'.",
    )
    reserved_cpu_count: int | None = Field(
        default=None,
        validation_alias=AliasChoices("reservedCPUCount", "reserved_cpu_count"),
        serialization_alias="reservedCPUCount",
        description="Reserve this many CPUs (a quantity like 2 or 750m, rounded up), picked topology-packed.",
    )
    available_cpus: CPUSetField | None = Field(
        default=None,
        validation_alias=AliasChoices("availableCPUs", "available_cpus"),
        serialization_alias="availableCPUs",
        description="The CPUs the policy may use (default: every online CPU).",
    )
    excluded_cpus: CPUSetField | None = Field(
        default=None,
        validation_alias=AliasChoices("excludedCPUs", "excluded_cpus"),
        serialization_alias="excludedCPUs",
        description="CPUs the policy must never use.",
    )
    pin_cpu: bool = Field(
        default=True,
        validation_alias=AliasChoices("pinCPU", "pin_cpu"),
        serialization_alias="pinCPU",
        description="Set containers' cpuset.cpus.",
    )
    pin_memory: bool = Field(default=True, description="Set containers' cpuset.mems.")
    prefer_isolated_cpus: bool = Field(
        default=True,
        validation_alias=AliasChoices("preferIsolatedCPUs", "prefer_isolated_cpus"),
        serialization_alias="preferIsolatedCPUs",
        description="Give 1-2 CPU exclusive containers kernel-isolated CPUs when there are free ones.",
    )
    prefer_shared_cpus: bool = Field(
        default=False,
        validation_alias=AliasChoices("preferSharedCPUs", "prefer_shared_cpus"),
        serialization_alias="preferSharedCPUs",
        description="Run whole-CPU Guaranteed containers on shared CPUs instead of exclusive ones.",
    )
    reserved_pool_namespaces: tuple[str, ...] = Field(
        default=(),
        description="Namespace globs whose containers run on the reserved CPUs (kube-system always does).",
    )
    default_cpu_priority: CPUPriority = Field(
        default=CPUPriority.NONE,
        validation_alias=AliasChoices("defaultCPUPriority", "default_cpu_priority"),
        serialization_alias="defaultCPUPriority",
        description="Core kind exclusive CPUs prefer: high (P-cores), low (E-cores), normal/none (any).",
    )
    default_memory_types: tuple[MemoryKind, ...] = Field(
        default=(MemoryKind.DRAM,),
        description="Memory kinds a container gets when it does not ask (HBM/PMEM/CXL only when listed).",
    )
    unlimited_burstable: TopologyLevel = Field(
        default=TopologyLevel.PACKAGE,
        description="Pool level for Burstable containers without a CPU limit.",
    )
    colocate_pods: bool = Field(default=False, description="Prefer the pool of the pod's other containers.")
    colocate_namespaces: bool = Field(
        default=False, description="Prefer pools holding containers of the same namespace."
    )

    # --- validation ---------------------------------------------------------
    @field_validator("reserved_cpu_count", mode="before")
    @classmethod
    def _count(cls, value: object) -> int | None:
        if value is None:
            return None
        milli = parse_cpu_quantity(value, "reserved CPU count")
        return (milli + 999) // 1000

    @field_validator("reserved_pool_namespaces", mode="before")
    @classmethod
    def _globs(cls, value: object) -> object:
        if isinstance(value, str):
            raise ValueError(f"expected a list of namespace globs, got the string {value!r}")
        if isinstance(value, list | tuple):
            for item in value:
                if not isinstance(item, str) or not item.strip():
                    raise ValueError(f"namespace glob must be a non-empty string, got {item!r}")
                try:
                    re.compile(fnmatch.translate(item))
                except re.error as e:  # pragma: no cover - fnmatch.translate always yields a valid regex
                    raise ValueError(f"invalid namespace glob {item!r}: {e}") from None
        return value

    @field_validator("default_memory_types", mode="before")
    @classmethod
    def _kinds(cls, value: object) -> object:
        if isinstance(value, str):
            value = value.split(",")
        if isinstance(value, list | tuple):
            out: list[MemoryKind] = []
            for item in value:
                if isinstance(item, MemoryKind):
                    kind = item
                elif isinstance(item, str):
                    try:
                        kind = MemoryKind(item.strip().upper())
                    except ValueError:
                        known = ", ".join(k.value for k in MemoryKind)
                        raise ValueError(f"unknown memory type {item!r} (known: {known})") from None
                else:
                    raise ValueError(f"memory type must be a string, got {item!r}")
                if kind not in out:
                    out.append(kind)
            if not out:
                raise ValueError("default memory types must not be empty")
            return tuple(out)
        return value

    @field_validator("default_cpu_priority", "unlimited_burstable", mode="before")
    @classmethod
    def _lower(cls, value: object) -> object:
        return value.strip().lower() if isinstance(value, str) else value

    @model_validator(mode="after")
    def _exclusive_fields(self) -> PolicyConfig:
        if self.reserved_cpus is not None and self.reserved_cpu_count is not None:
            raise ValueError(
                f"set either reservedCPUs ({self.reserved_cpus.format()!r}) or reservedCPUCount "
                f"({self.reserved_cpu_count}), not both"
            )
        return self

    def reserved_namespace(self, namespace: str) -> bool:
        """True if containers of ``namespace`` belong on the reserved CPUs."""
        if namespace == "kube-system":
            return True
        globs = self.reserved_pool_namespaces  # usually none: skip building the generator
        return bool(globs) and any(fnmatch.fnmatchcase(namespace, glob) for glob in globs)

    def to_json(self) -> dict[str, Any]:
        """JSON-able form that ``model_validate`` reads back to an equal config."""
        return self.model_dump(mode="json", by_alias=True)
