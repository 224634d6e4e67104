"""From the runtime's view of a container (NRI) to the policy's ``ContainerRequest``.

The runtime does not tell us the pod spec, only what the kubelet turned it
into: the QoS class is in the cgroup path (``kubepods/burstable/...``,
``kubepods-besteffort-pod<uid>.slice``; Guaranteed pods sit directly under
``kubepods``), the CPU request is in ``cpu.shares`` (the kubelet writes
``milli * 1024 / 1000``, at least 2) and the limit in quota/period.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import fields

from topodra.nri.types import Container, Pod
from topodra.policy.api import ContainerRequest, QoSClass

__all__ = ["container_request", "qos_class", "shares_to_milli"]

#: The kubelet's minimum cpu.shares (what BestEffort containers get).
MIN_SHARES = 2


def shares_to_milli(shares: int) -> int:
    """Invert the kubelet's ``MilliCPUToShares`` (rounding to the nearest milli-CPU)."""
    if shares <= MIN_SHARES:
        return 0
    return (shares * 1000 + 512) // 1024


def _qos_from_path(*paths: str) -> QoSClass | None:
    for path in paths:
        p = path.lower()
        if not p:
            continue
        if "besteffort" in p:
            return QoSClass.BEST_EFFORT
        if "burstable" in p:
            return QoSClass.BURSTABLE
        if "kubepods" in p:
            return QoSClass.GUARANTEED
    return None


def qos_class(pod: Pod, container: Container) -> QoSClass:
    """The pod's QoS class, from its cgroup path, else from the container's resources."""
    found = _qos_from_path(pod.cgroup_parent, pod.cgroups_path, container.cgroups_path)
    if found is not None:
        return found
    res = container.resources
    if res is None:
        return QoSClass.BEST_EFFORT
    shares = res.cpu_shares or 0
    limited_cpu = res.cpu_quota is not None and res.cpu_quota > 0
    if shares <= MIN_SHARES and not limited_cpu and not res.memory_limit:
        return QoSClass.BEST_EFFORT
    request = shares_to_milli(shares)
    limit = _limit_milli(res.cpu_quota, res.cpu_period)
    if limit is not None and limit == request and res.memory_limit:
        return QoSClass.GUARANTEED
    return QoSClass.BURSTABLE


def _limit_milli(quota: int | None, period: int | None) -> int | None:
    if quota is None or quota <= 0:
        return None
    period = period or 100_000
    return -(-quota * 1000 // period)


def container_request(pod: Pod, container: Container, claims: tuple[str, ...] = ()) -> ContainerRequest:
    """The policy's request for ``container`` of ``pod`` (claims: verified DRA claim UIDs)."""
    qos = qos_class(pod, container)
    res = container.resources
    request = 0
    limit_opt: int | None = None
    memory_limit: int | None = None
    if res is not None:
        request = shares_to_milli(res.cpu_shares or 0)
        limit_opt = _limit_milli(res.cpu_quota, res.cpu_period)
        memory_limit = res.memory_limit if res.memory_limit and res.memory_limit > 0 else None
    if qos is QoSClass.BEST_EFFORT:
        request, limit_opt = 0, None
    elif qos is QoSClass.GUARANTEED and limit_opt is not None:
        # Guaranteed means request == limit; the limit is exact, shares are rounded.
        request = limit_opt
    memory_request = memory_limit if qos is QoSClass.GUARANTEED and memory_limit else 0
    return _request(
        container.id, container.name, pod.uid, pod.name, pod.namespace, qos, request, limit_opt, memory_request,
        memory_limit, dict(pod.annotations), claims,
    )


_FIELDS = (
    "id", "name", "pod_uid", "pod_name", "namespace", "qos", "cpu_request_milli", "cpu_limit_milli", "memory_request",
    "memory_limit", "annotations", "claims",
)
if tuple(f.name for f in fields(ContainerRequest)) != _FIELDS or hasattr(ContainerRequest, "__post_init__"):
    raise TypeError("ContainerRequest changed: update topodra.agent.container_request._request")
_SET = tuple(getattr(ContainerRequest, name).__set__ for name in _FIELDS)
_new = object.__new__


def _request(
    cid: str, name: str, pod_uid: str, pod_name: str, namespace: str, qos: QoSClass, request: int,
    limit: int | None, memory_request: int, memory_limit: int | None, annotations: Mapping[str, str],
    claims: tuple[str, ...],
) -> ContainerRequest:
    """``ContainerRequest(...)`` with its slots filled directly: the frozen dataclass' ``__init__``
    (twelve ``object.__setattr__``) cost a third of the conversion, once per CreateContainer. It has
    no checks to skip (the import fails if it gets some, or other fields)."""
    req = _new(ContainerRequest)
    s_id, s_name, s_uid, s_pod, s_ns, s_qos, s_request, s_limit, s_mreq, s_mlimit, s_annotations, s_claims = _SET
    s_id(req, cid)
    s_name(req, name)
    s_uid(req, pod_uid)
    s_pod(req, pod_name)
    s_ns(req, namespace)
    s_qos(req, qos)
    s_request(req, request)
    s_limit(req, limit)
    s_mreq(req, memory_request)
    s_mlimit(req, memory_limit)
    s_annotations(req, annotations)
    s_claims(req, claims)
    return req
