"""The one place where NRI protobuf messages meet topodra's dataclasses.

Decoding is strict where it matters to placement: a cpus/mems string that is
not a kernel CPU list raises ``ConversionError`` naming the object and field.
Encoding refuses an empty cpuset or memset (``EmptyCPUSetError``): on the wire
that is "", which every runtime reads as "leave alone". Sub-messages are only
written when one of their fields is set, as Go plugins write them.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

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
def resources_from_proto(pb: api_pb2.LinuxResources, where: str = "resources") -> LinuxResources:
    cpus = mems = None
    shares = quota = period = rt_runtime = rt_period = None
    if pb.HasField("cpu"):
        cpu = pb.cpu
        cpus = parse_cpuset(cpu.cpus, f"{where}.cpu.cpus")
        mems = parse_cpuset(cpu.mems, f"{where}.cpu.mems")
        shares = cpu.shares.value if cpu.HasField("shares") else None
        quota = cpu.quota.value if cpu.HasField("quota") else None
        period = cpu.period.value if cpu.HasField("period") else None
        rt_runtime = cpu.realtime_runtime.value if cpu.HasField("realtime_runtime") else None
        rt_period = cpu.realtime_period.value if cpu.HasField("realtime_period") else None
    limit = reservation = swap = kernel = kernel_tcp = swappiness = None
    disable_oom = use_hierarchy = None
    if pb.HasField("memory"):
        mem = pb.memory
        limit = mem.limit.value if mem.HasField("limit") else None
        reservation = mem.reservation.value if mem.HasField("reservation") else None
        swap = mem.swap.value if mem.HasField("swap") else None
        kernel = mem.kernel.value if mem.HasField("kernel") else None
        kernel_tcp = mem.kernel_tcp.value if mem.HasField("kernel_tcp") else None
        swappiness = mem.swappiness.value if mem.HasField("swappiness") else None
        disable_oom = mem.disable_oom_killer.value if mem.HasField("disable_oom_killer") else None
        use_hierarchy = mem.use_hierarchy.value if mem.HasField("use_hierarchy") else None
    return LinuxResources(
        cpus=cpus,
        mems=mems,
        cpu_shares=shares,
        cpu_quota=quota,
        cpu_period=period,
        cpu_realtime_runtime=rt_runtime,
        cpu_realtime_period=rt_period,
        memory_limit=limit,
        memory_reservation=reservation,
        memory_swap=swap,
        memory_kernel=kernel,
        memory_kernel_tcp=kernel_tcp,
        memory_swappiness=swappiness,
        memory_disable_oom_killer=disable_oom,
        memory_use_hierarchy=use_hierarchy,
        hugepage_limits={h.page_size: h.limit for h in pb.hugepage_limits},
        blockio_class=pb.blockio_class.value if pb.HasField("blockio_class") else None,
        rdt_class=pb.rdt_class.value if pb.HasField("rdt_class") else None,
        unified=dict(pb.unified),
        pids_limit=pb.pids.limit if pb.HasField("pids") else None,
    )


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
    cpus_text = _format_set(cpus, f"{where}.cpus")
    mems_text = _format_set(mems, f"{where}.mems")
    if cpus_text or mems_text or any(v is not None for v in (shares, quota, period, rt_runtime, rt_period)):
        cpu = out.cpu
        cpu.SetInParent()
        _set_optional(cpu, "shares", shares)
        _set_optional(cpu, "quota", quota)
        _set_optional(cpu, "period", period)
        _set_optional(cpu, "realtime_runtime", rt_runtime)
        _set_optional(cpu, "realtime_period", rt_period)
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
    linux = pb.linux
    where = f"pod {pb.id or '?'}"
    return Pod(
        id=pb.id,
        name=pb.name,
        uid=pb.uid,
        namespace=pb.namespace,
        labels=dict(pb.labels),
        annotations=dict(pb.annotations),
        runtime_handler=pb.runtime_handler,
        cgroup_parent=linux.cgroup_parent,
        cgroups_path=linux.cgroups_path,
        resources=resources_from_proto(linux.pod_resources, f"{where}: linux.pod_resources")
        if linux.HasField("pod_resources")
        else None,
        overhead=resources_from_proto(linux.pod_overhead, f"{where}: linux.pod_overhead")
        if linux.HasField("pod_overhead")
        else None,
        pid=pb.pid,
        ips=tuple(pb.ips),
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


def container_from_proto(pb: api_pb2.Container) -> Container:
    linux = pb.linux
    try:
        state = ContainerState(pb.state)
    except ValueError:
        state = ContainerState.UNKNOWN
    return Container(
        id=pb.id,
        pod_sandbox_id=pb.pod_sandbox_id,
        name=pb.name,
        state=state,
        labels=dict(pb.labels),
        annotations=dict(pb.annotations),
        args=tuple(pb.args),
        env=tuple(pb.env),
        mounts=tuple(Mount(m.destination, m.type, m.source, tuple(m.options)) for m in pb.mounts),
        resources=resources_from_proto(linux.resources, f"container {pb.id or '?'}: linux.resources")
        if linux.HasField("resources")
        else None,
        cgroups_path=linux.cgroups_path,
        cdi_devices=tuple(d.name for d in pb.CDI_devices),
        pid=pb.pid,
        created_at=pb.created_at,
        started_at=pb.started_at,
        finished_at=pb.finished_at,
        exit_code=pb.exit_code,
        status_reason=pb.status_reason,
        status_message=pb.status_message,
        oom_score_adj=linux.oom_score_adj.value if linux.HasField("oom_score_adj") else None,
        image=pb.image.name,
    )


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
    out.annotations.update(adj.annotations)
    for key, value in adj.env.items():
        out.env.add(key=key, value=value)
    if any(
        v is not None for v in (adj.cpus, adj.mems, adj.cpu_shares, adj.cpu_quota, adj.cpu_period, adj.memory_limit)
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
    are encoded once and copied (an exclusive grant moves hundreds of shared containers to
    the same new set)."""
    encoded: dict[tuple[object, ...], api_pb2.LinuxResources] = {}
    for update in updates:
        key = (update.cpus, update.mems, update.cpu_shares, update.cpu_quota, update.cpu_period, update.memory_limit)
        resources = encoded.get(key)
        if resources is None:
            resources = encoded[key] = update_to_proto(update).linux.resources
        pb = out.add()
        pb.container_id = update.container_id
        pb.linux.resources.CopyFrom(resources)
        pb.ignore_failure = update.ignore_failure
