"""How a runtime combines plugin answers: field ownership, adjustments, updates.

Pure functions over ``types`` dataclasses, used by the embedded runtime. Each
field of each container may be set by one plugin per event; a second plugin
setting it is a conflict that fails the operation, with the message the NRI
adaptation gives (``plugins "20-b" and "10-a" both tried to set CPUSetCPUs``).
Field numbers are NRI's ``Field`` enum, as carried in
``ValidateContainerAdjustmentRequest.owners``.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Final

from topodra.cpuset import CPUSet
from topodra.nri.proto import api_pb2
from topodra.nri.types import Container, ContainerAdjustment, ContainerUpdate, LinuxResources

__all__ = [
    "FIELD_NUMBERS",
    "OwnershipConflict",
    "Owners",
    "apply_adjustment",
    "apply_update",
    "merge_adjustment",
    "merge_update",
]

#: NRI ``Field`` enum numbers of the fields modelled here.
FIELD_NUMBERS: Final = {
    "Annotations": 1,
    "Env": 6,
    "MemLimit": 8,
    "CPUShares": 16,
    "CPUQuota": 17,
    "CPUPeriod": 18,
    "CPUSetCPUs": 21,
    "CPUSetMems": 22,
}

# (dataclass attribute, Field name) of the simple resource fields
_RESOURCE_FIELDS: Final = (
    ("cpus", "CPUSetCPUs"),
    ("mems", "CPUSetMems"),
    ("cpu_shares", "CPUShares"),
    ("cpu_quota", "CPUQuota"),
    ("cpu_period", "CPUPeriod"),
    ("memory_limit", "MemLimit"),
)


class OwnershipConflict(Exception):
    """Two plugins set the same field of the same container."""


@dataclass
class Owners:
    """Which plugin set which field of which container during one event."""

    simple: dict[tuple[str, str], str] = field(default_factory=dict)
    compound: dict[tuple[str, str, str], str] = field(default_factory=dict)

    def claim(self, container_id: str, name: str, plugin: str, key: str | None = None) -> None:
        if key is None:
            other = self.simple.setdefault((container_id, name), plugin)
            what = name
        else:
            other = self.compound.setdefault((container_id, name, key), plugin)
            what = f"{name} {key}"
        if other != plugin:
            raise OwnershipConflict(f"plugins {plugin!r} and {other!r} both tried to set {what}".replace("'", '"'))

    def to_proto(self, out: api_pb2.OwningPlugins) -> None:
        for (cid, name), plugin in self.simple.items():
            out.owners[cid].simple[FIELD_NUMBERS[name]] = plugin
        for (cid, name, key), plugin in self.compound.items():
            out.owners[cid].compound[FIELD_NUMBERS[name]].owners[key] = plugin


def merge_adjustment(
    merged: ContainerAdjustment | None, adj: ContainerAdjustment, container_id: str, plugin: str, owners: Owners
) -> ContainerAdjustment:
    """Add one plugin's adjustment to the ones before it, claiming every field it sets."""
    base = merged or ContainerAdjustment()
    changes: dict[str, object] = {}
    for attr, name in _RESOURCE_FIELDS:
        value = getattr(adj, attr)
        if value is not None:
            owners.claim(container_id, name, plugin)
            changes[attr] = value
    annotations = dict(base.annotations)
    for key, value in adj.annotations.items():
        owners.claim(container_id, "Annotations", plugin, key.removeprefix("-"))
        annotations[key] = value
    env = dict(base.env)
    for key, value in adj.env.items():
        owners.claim(container_id, "Env", plugin, key.removeprefix("-"))
        env[key] = value
    return dataclasses.replace(base, annotations=annotations, env=env, **changes)  # type: ignore[arg-type]


def merge_update(
    merged: dict[str, ContainerUpdate], update: ContainerUpdate, plugin: str, owners: Owners
) -> None:
    """Fold one plugin's update of a container into ``merged`` (keyed by container id)."""
    cid = update.container_id
    base = merged.get(cid)
    changes: dict[str, object] = {}
    for attr, name in _RESOURCE_FIELDS:
        value = getattr(update, attr)
        if value is not None:
            owners.claim(cid, name, plugin)
            changes[attr] = value
    if base is None:
        merged[cid] = update
    else:
        # one ignore_failure=False makes the merged update a required one
        merged[cid] = dataclasses.replace(
            base, ignore_failure=base.ignore_failure and update.ignore_failure, **changes  # type: ignore[arg-type]
        )


def _resources_with(res: LinuxResources | None, source: ContainerAdjustment | ContainerUpdate) -> LinuxResources:
    current = res or LinuxResources()
    changes = {attr: getattr(source, attr) for attr, _ in _RESOURCE_FIELDS if getattr(source, attr) is not None}
    return dataclasses.replace(current, **changes)


def _with_env(env: tuple[str, ...], changes: dict[str, str]) -> tuple[str, ...]:
    items = list(env)
    for key, value in changes.items():
        name = key.removeprefix("-")
        items = [e for e in items if e.split("=", 1)[0] != name]
        if not key.startswith("-"):
            items.append(f"{name}={value}")
    return tuple(items)


def apply_adjustment(container: Container, adj: ContainerAdjustment) -> Container:
    """The container as created after ``adj`` ("-key" removes an annotation or variable)."""
    annotations = dict(container.annotations)
    for key, value in adj.annotations.items():
        if key.startswith("-"):
            annotations.pop(key[1:], None)
        else:
            annotations[key] = value
    return dataclasses.replace(
        container,
        annotations=annotations,
        env=_with_env(container.env, dict(adj.env)),
        resources=_resources_with(container.resources, adj),
    )


def apply_update(container: Container, update: ContainerUpdate) -> Container:
    return dataclasses.replace(container, resources=_resources_with(container.resources, update))


def cpus_and_mems(container: Container) -> tuple[CPUSet | None, CPUSet | None]:
    res = container.resources
    return (res.cpus, res.mems) if res else (None, None)
