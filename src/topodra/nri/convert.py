"""The one place where NRI protobuf messages meet topodra's dataclasses.

Decoding is strict where it matters to placement: a cpus/mems string that is
not a kernel CPU list raises ``ConversionError`` naming the object and field.
Encoding refuses an empty cpuset or memset (``EmptyCPUSetError``): on the wire
that is "", which every runtime reads as "leave alone". Sub-messages are only
written when one of their fields is set, as Go plugins write them.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from google.protobuf.internal.containers import RepeatedCompositeFieldContainer

from topodra.cpuset import CPUSet, CPUSetParseError
from topodra.nri.errors import ConversionError, EmptyCPUSetError
from topodra.nri.proto import api_pb2
from topodra.nri.types import (
    Container,
    ContainerAdjustment,
    ContainerState,
    ContainerUpdate,
    LinuxResources,
    Mount,
    Pod,
)

__all__ = [
    "adjustment_from_proto",
    "adjustment_to_proto",
    "container_from_proto",
    "container_to_proto",
    "parse_cpuset",
    "pod_from_proto",
    "pod_to_proto",
    "resources_from_proto",
    "resources_to_proto",
    "update_from_proto",
    "update_to_proto",
    "updates_from_proto",
    "updates_to_proto",
]


def parse_cpuset(text: str, where: str) -> CPUSet | None:
    """A wire cpus/mems string: "" is None, anything else must be a kernel list."""
    if not text:
        return None
    try:
        value = CPUSet.parse(text)
    except CPUSetParseError as exc:
        raise ConversionError(f"{where}: {exc}") from None
    return value if value else None


def _format_set(value: CPUSet | None, where: str) -> str:
    if value is None:
        return ""
    if not value:
        raise EmptyCPUSetError(f"{where}: refusing to encode an empty set (the runtime reads '' as 'no change')")
    return value.format()


# ---------------------------------------------------------------- resources
#: Wrapper fields of LinuxCPU / LinuxMemory and the LinuxResources fields they fill.
_CPU_FIELDS: dict[str, str] = {
    "shares": "cpu_shares",
    "quota": "cpu_quota",
    "period": "cpu_period",
    "realtime_runtime": "cpu_realtime_runtime",
    "realtime_period": "cpu_realtime_period",
}
_MEMORY_FIELDS: dict[str, str] = {
    "limit": "memory_limit",
    "reservation": "memory_reservation",
    "swap": "memory_swap",
    "kernel": "memory_kernel",
    "kernel_tcp": "memory_kernel_tcp",
    "swappiness": "memory_swappiness",
    "disable_oom_killer": "memory_disable_oom_killer",
    "use_hierarchy": "memory_use_hierarchy",
}


#: Decoded resources by their wire bytes. The containers of one workload carry the same
#: resources, and decoding them (wrapper fields, a 22-field frozen dataclass) costs several
#: times the lookup. The values are immutable (mappings typed read-only) and shared; decoding
#: errors are not kept (the next call names its own object again).
_RESOURCES_SEEN: dict[bytes, LinuxResources] = {}
_RESOURCES_SEEN_MAX = 512


def resources_from_proto(pb: api_pb2.LinuxResources, where: str = "resources") -> LinuxResources:
    """Only the fields the runtime set (``ListFields``): a create request carries a handful."""
    key = pb.SerializeToString()
    res = _RESOURCES_SEEN.get(key)
    if res is None:
        res = _decode_resources(pb, where)
        if len(_RESOURCES_SEEN) >= _RESOURCES_SEEN_MAX:
            _RESOURCES_SEEN.clear()
        _RESOURCES_SEEN[key] = res
    return res


def _decode_resources(pb: api_pb2.LinuxResources, where: str) -> LinuxResources:
    kw: dict[str, object] = {}
    for fd, value in pb.ListFields():
        name = fd.name
        if name == "cpu":
            for sub, v in value.ListFields():
                if sub.name == "cpus":
                    kw["cpus"] = parse_cpuset(v, f"{where}.cpu.cpus")
                elif sub.name == "mems":
                    kw["mems"] = parse_cpuset(v, f"{where}.cpu.mems")
                elif (field := _CPU_FIELDS.get(sub.name)) is not None:
                    kw[field] = v.value
        elif name == "memory":
            for sub, v in value.ListFields():
                if (field := _MEMORY_FIELDS.get(sub.name)) is not None:
                    kw[field] = v.value
        elif name == "hugepage_limits":
            kw["hugepage_limits"] = {h.page_size: h.limit for h in value}
        elif name == "blockio_class":
            kw["blockio_class"] = value.value
        elif name == "rdt_class":
            kw["rdt_class"] = value.value
        elif name == "unified":
            kw["unified"] = dict(value)
        elif name == "pids":
            kw["pids_limit"] = value.limit
    return LinuxResources(**kw)  # type: ignore[arg-type]


def _set_optional(parent: object, name: str, value: int | bool | None) -> None:
    if value is not None:
        wrapper = getattr(parent, name)
        wrapper.SetInParent()
        wrapper.value = value


def _fill_cpu_memory(
    out: api_pb2.LinuxResources,
    where: str,
    *,
    cpus: CPUSet | None,
    mems: CPUSet | None,
    shares: int | None = None,
    quota: int | None = None,
    period: int | None = None,
    rt_runtime: int | None = None,
    rt_period: int | None = None,
    memory: Mapping[str, int | bool | None] | None = None,
) -> None:
    # Explicit tests rather than any(<generator>): this runs for every reply and update.
    cpus_text = "" if cpus is None else _format_set(cpus, f"{where}.cpus")
    mems_text = "" if mems is None else _format_set(mems, f"{where}.mems")
    scalars = shares is not None or quota is not None or period is not None
    if scalars or rt_runtime is not None or rt_period is not None:
        cpu = out.cpu
        cpu.SetInParent()
        _set_optional(cpu, "shares", shares)
        _set_optional(cpu, "quota", quota)
        _set_optional(cpu, "period", period)
        _set_optional(cpu, "realtime_runtime", rt_runtime)
        _set_optional(cpu, "realtime_period", rt_period)
        cpu.cpus = cpus_text
        cpu.mems = mems_text
    elif cpus_text or mems_text:
        cpu = out.cpu
        cpu.cpus = cpus_text
        cpu.mems = mems_text
    if memory and any(v is not None for v in memory.values()):
        out.memory.SetInParent()
        for name, value in memory.items():
            _set_optional(out.memory, name, value)


def resources_to_proto(res: LinuxResources, out: api_pb2.LinuxResources, where: str = "resources") -> None:
    out.SetInParent()
    _fill_cpu_memory(
        out,
        where,
        cpus=res.cpus,
        mems=res.mems,
        shares=res.cpu_shares,
        quota=res.cpu_quota,
        period=res.cpu_period,
        rt_runtime=res.cpu_realtime_runtime,
        rt_period=res.cpu_realtime_period,
        memory={
            "limit": res.memory_limit,
            "reservation": res.memory_reservation,
            "swap": res.memory_swap,
            "kernel": res.memory_kernel,
            "kernel_tcp": res.memory_kernel_tcp,
            "swappiness": res.memory_swappiness,
            "disable_oom_killer": res.memory_disable_oom_killer,
            "use_hierarchy": res.memory_use_hierarchy,
        },
    )
    for page_size, limit in res.hugepage_limits.items():
        out.hugepage_limits.add(page_size=page_size, limit=limit)
    if res.blockio_class is not None:
        out.blockio_class.value = res.blockio_class
    if res.rdt_class is not None:
        out.rdt_class.value = res.rdt_class
    out.unified.update(res.unified)
    if res.pids_limit is not None:
        out.pids.limit = res.pids_limit


# ---------------------------------------------------------------- pods and containers
def pod_from_proto(pb: api_pb2.PodSandbox) -> Pod:
    """Empty maps and lists are tested before they are copied: copying an empty protobuf map
    costs ten times asking whether it is empty."""
    linux = pb.linux
    labels, annotations, ips = pb.labels, pb.annotations, pb.ips
    resources = overhead = None
    for fd, value in linux.ListFields():  # once, rather than HasField for each (a create has neither)
        name = fd.name
        if name == "pod_resources":
            resources = resources_from_proto(value, f"pod {pb.id or '?'}: linux.pod_resources")
        elif name == "pod_overhead":
            overhead = resources_from_proto(value, f"pod {pb.id or '?'}: linux.pod_overhead")
    return Pod(
        id=pb.id,
        name=pb.name,
        uid=pb.uid,
        namespace=pb.namespace,
        labels=dict(labels) if labels else {},
        annotations=dict(annotations) if annotations else {},
        runtime_handler=pb.runtime_handler,
        cgroup_parent=linux.cgroup_parent,
        cgroups_path=linux.cgroups_path,
        resources=resources,
        overhead=overhead,
        pid=pb.pid,
        ips=tuple(ips) if ips else (),
    )


def pod_to_proto(pod: Pod, out: api_pb2.PodSandbox | None = None) -> api_pb2.PodSandbox:
    pb = out if out is not None else api_pb2.PodSandbox()
    pb.id = pod.id
    pb.name = pod.name
    pb.uid = pod.uid
    pb.namespace = pod.namespace
    pb.labels.update(pod.labels)
    pb.annotations.update(pod.annotations)
    pb.runtime_handler = pod.runtime_handler
    pb.pid = pod.pid
    pb.ips.extend(pod.ips)
    if pod.cgroup_parent or pod.cgroups_path or pod.resources or pod.overhead:
        pb.linux.cgroup_parent = pod.cgroup_parent
        pb.linux.cgroups_path = pod.cgroups_path
        if pod.resources is not None:
            resources_to_proto(pod.resources, pb.linux.pod_resources, f"pod {pod.id}: pod_resources")
        if pod.overhead is not None:
            resources_to_proto(pod.overhead, pb.linux.pod_overhead, f"pod {pod.id}: pod_overhead")
    return pb


#: Container fields copied as they are.
_CONTAINER_SCALARS: frozenset[str] = frozenset(
    {"id", "pod_sandbox_id", "name", "pid", "created_at", "started_at", "finished_at", "exit_code",
     "status_reason", "status_message"}
)


#: Wire state -> ContainerState (a dict lookup, cheaper than calling the enum); unknown ones are UNKNOWN.
_STATES: dict[int, ContainerState] = {int(s): s for s in ContainerState}


def container_from_proto(pb: api_pb2.Container) -> Container:
    """Only the fields the runtime set (``ListFields``), each read once."""
    kw: dict[str, Any] = {"id": pb.id, "pod_sandbox_id": pb.pod_sandbox_id}
    for fd, value in pb.ListFields():
        name = fd.name
        if name in _CONTAINER_SCALARS:
            kw[name] = value
        elif name == "state":
            kw["state"] = _STATES.get(value, ContainerState.UNKNOWN)
        elif name in ("labels", "annotations"):
            kw[name] = dict(value)
        elif name in ("args", "env"):
            kw[name] = tuple(value)
        elif name == "mounts":
            kw["mounts"] = tuple(Mount(m.destination, m.type, m.source, tuple(m.options)) for m in value)
        elif name == "CDI_devices":
            kw["cdi_devices"] = tuple(d.name for d in value)
        elif name == "image":
            kw["image"] = value.name
        elif name == "linux":
            for sub, v in value.ListFields():
                if sub.name == "resources":
                    kw["resources"] = resources_from_proto(v, f"container {pb.id or '?'}: linux.resources")
                elif sub.name == "cgroups_path":
                    kw["cgroups_path"] = v
                elif sub.name == "oom_score_adj":
                    kw["oom_score_adj"] = v.value
    return Container(**kw)


def container_to_proto(ctr: Container, out: api_pb2.Container | None = None) -> api_pb2.Container:
    pb = out if out is not None else api_pb2.Container()
    pb.id = ctr.id
    pb.pod_sandbox_id = ctr.pod_sandbox_id
    pb.name = ctr.name
    pb.state = int(ctr.state)  # type: ignore[assignment]
    pb.labels.update(ctr.labels)
    pb.annotations.update(ctr.annotations)
    pb.args.extend(ctr.args)
    pb.env.extend(ctr.env)
    for m in ctr.mounts:
        pb.mounts.add(destination=m.destination, type=m.type, source=m.source, options=m.options)
    if ctr.resources is not None or ctr.cgroups_path or ctr.oom_score_adj is not None:
        pb.linux.SetInParent()
        if ctr.resources is not None:
            resources_to_proto(ctr.resources, pb.linux.resources, f"container {ctr.id}: resources")
        pb.linux.cgroups_path = ctr.cgroups_path
        _set_optional(pb.linux, "oom_score_adj", ctr.oom_score_adj)
    pb.pid = ctr.pid
    pb.created_at = ctr.created_at
    pb.started_at = ctr.started_at
    pb.finished_at = ctr.finished_at
    pb.exit_code = ctr.exit_code
    pb.status_reason = ctr.status_reason
    pb.status_message = ctr.status_message
    for name in ctr.cdi_devices:
        pb.CDI_devices.add(name=name)
    if ctr.image:
        pb.image.name = ctr.image
    return pb


# ---------------------------------------------------------------- adjustments and updates
def adjustment_to_proto(adj: ContainerAdjustment, out: api_pb2.ContainerAdjustment) -> None:
    """Fill ``out`` (marking it present even when ``adj`` changes nothing)."""
    out.SetInParent()
    if adj.annotations:
        out.annotations.update(adj.annotations)
    for key, value in adj.env.items():
        out.env.add(key=key, value=value)
    if (
        adj.cpus is not None
        or adj.mems is not None
        or adj.cpu_shares is not None
        or adj.cpu_quota is not None
        or adj.cpu_period is not None
        or adj.memory_limit is not None
    ):
        resources = out.linux.resources
        resources.SetInParent()
        _fill_cpu_memory(
            resources,
            "ContainerAdjustment",
            cpus=adj.cpus,
            mems=adj.mems,
            shares=adj.cpu_shares,
            quota=adj.cpu_quota,
            period=adj.cpu_period,
            memory={"limit": adj.memory_limit},
        )


def adjustment_from_proto(pb: api_pb2.ContainerAdjustment, where: str = "adjust") -> ContainerAdjustment:
    res = (
        resources_from_proto(pb.linux.resources, f"{where}.linux.resources")
        if pb.linux.HasField("resources")
        else LinuxResources()
    )
    return ContainerAdjustment(
        cpus=res.cpus,
        mems=res.mems,
        cpu_shares=res.cpu_shares,
        cpu_quota=res.cpu_quota,
        cpu_period=res.cpu_period,
        memory_limit=res.memory_limit,
        annotations=dict(pb.annotations),
        env={kv.key: kv.value for kv in pb.env},
    )


def update_to_proto(update: ContainerUpdate, out: api_pb2.ContainerUpdate | None = None) -> api_pb2.ContainerUpdate:
    pb = out if out is not None else api_pb2.ContainerUpdate()
    pb.container_id = update.container_id
    resources = pb.linux.resources
    resources.SetInParent()
    _fill_cpu_memory(
        resources,
        f"ContainerUpdate({update.container_id})",
        cpus=update.cpus,
        mems=update.mems,
        shares=update.cpu_shares,
        quota=update.cpu_quota,
        period=update.cpu_period,
        memory={"limit": update.memory_limit},
    )
    pb.ignore_failure = update.ignore_failure
    return pb


def update_from_proto(pb: api_pb2.ContainerUpdate) -> ContainerUpdate:
    if not pb.container_id:
        raise ConversionError("ContainerUpdate without container_id")
    where = f"update of {pb.container_id}: linux.resources"
    res = resources_from_proto(pb.linux.resources, where) if pb.linux.HasField("resources") else LinuxResources()
    return ContainerUpdate(
        container_id=pb.container_id,
        cpus=res.cpus,
        mems=res.mems,
        cpu_shares=res.cpu_shares,
        cpu_quota=res.cpu_quota,
        cpu_period=res.cpu_period,
        memory_limit=res.memory_limit,
        ignore_failure=pb.ignore_failure,
    )


def updates_from_proto(pbs: Iterable[api_pb2.ContainerUpdate]) -> list[ContainerUpdate]:
    return [update_from_proto(pb) for pb in pbs]


def updates_to_proto(updates: Iterable[ContainerUpdate], out: RepeatedCompositeFieldContainer[api_pb2.ContainerUpdate]) -> None:
    """Append ``updates`` to a repeated field: the resources of each distinct (cpus, mems, ...)
    are encoded once and copied (an exclusive grant moves every shared container of a pool to
    the same new set). Consecutive updates carrying the very same values (the policy hands out
    one shared ``Assignment``) are recognised by identity, without hashing their sets."""
    encoded: dict[tuple[object, ...], api_pb2.LinuxContainerUpdate] = {}
    last: ContainerUpdate | None = None
    linux: api_pb2.LinuxContainerUpdate | None = None
    add = out.add
    for update in updates:
        if (
            last is None
            or update.cpus is not last.cpus
            or update.mems is not last.mems
            or update.cpu_shares != last.cpu_shares
            or update.cpu_quota != last.cpu_quota
            or update.cpu_period != last.cpu_period
            or update.memory_limit != last.memory_limit
        ):
            key = (update.cpus, update.mems, update.cpu_shares, update.cpu_quota, update.cpu_period, update.memory_limit)
            linux = encoded.get(key)
            if linux is None:
                linux = encoded[key] = update_to_proto(update).linux
            last = update
        assert linux is not None
        item = add()
        item.container_id = update.container_id
        item.linux.CopyFrom(linux)
        if update.ignore_failure:
            item.ignore_failure = True
