"""The policy's state as JSON-able data, and back, exactly.

The snapshot holds the configuration, the claims and every container's request
and grant (CPU sets in the kernel list format, pools by name). This module
checks the shape (fields, types, names, formats) and converts; the policy then
checks the state against its rules (``Supply.claim_problem``,
``Supply.grant_problem``, the memory rule, each recorded assignment). Either
raises ``SnapshotError`` naming what does not fit, rather than restoring a
state the policy could not have made.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from pydantic import ValidationError

from topodra.cpuset import CPUSet, CPUSetParseError
from topodra.policy.api import Assignment, BadRequestError, ContainerRequest, QoSClass, SnapshotError
from topodra.policy.classify import GrantKind, validate_request
from topodra.policy.config import PolicyConfig
from topodra.policy.grants import Grant
from topodra.policy.pools import Pool
from topodra.topology.model import Topology

__all__ = [
    "FORMAT_VERSION",
    "Saved",
    "decode",
    "encode",
    "read_config",
    "request_from_json",
    "request_to_json",
]

FORMAT_VERSION = 1


def request_to_json(req: ContainerRequest) -> dict[str, Any]:
    return {
        "id": req.id,
        "name": req.name,
        "podUID": req.pod_uid,
        "podName": req.pod_name,
        "namespace": req.namespace,
        "qos": req.qos.value,
        "cpuRequestMilli": req.cpu_request_milli,
        "cpuLimitMilli": req.cpu_limit_milli,
        "memoryRequest": req.memory_request,
        "memoryLimit": req.memory_limit,
        "annotations": dict(sorted(req.annotations.items())),
        "claims": list(req.claims),
    }


def _field(data: dict[str, Any], key: str, types: type | tuple[type, ...], where: str) -> Any:
    if key not in data:
        raise SnapshotError(f"snapshot: {where}: missing field {key!r}")
    value = data[key]
    allowed = types if isinstance(types, tuple) else (types,)
    if not isinstance(value, allowed) or (isinstance(value, bool) and bool not in allowed):
        raise SnapshotError(f"snapshot: {where}: field {key!r} has the wrong type: {value!r}")
    return value


def request_from_json(data: Any, where: str = "request") -> ContainerRequest:
    if not isinstance(data, dict):
        raise SnapshotError(f"snapshot: {where}: expected an object, got {data!r}")
    try:
        qos = QoSClass(_field(data, "qos", str, where))
    except ValueError:
        raise SnapshotError(f"snapshot: {where}: unknown qos {data['qos']!r}") from None
    annotations = _field(data, "annotations", dict, where)
    if not all(isinstance(k, str) and isinstance(v, str) for k, v in annotations.items()):
        raise SnapshotError(f"snapshot: {where}: annotations must map strings to strings")
    claims = _field(data, "claims", list, where)
    if not all(isinstance(c, str) for c in claims):
        raise SnapshotError(f"snapshot: {where}: claims must be strings")
    return ContainerRequest(
        id=_field(data, "id", str, where),
        name=_field(data, "name", str, where),
        pod_uid=_field(data, "podUID", str, where),
        pod_name=_field(data, "podName", str, where),
        namespace=_field(data, "namespace", str, where),
        qos=qos,
        cpu_request_milli=_field(data, "cpuRequestMilli", int, where),
        cpu_limit_milli=_field(data, "cpuLimitMilli", (int, type(None)), where),
        memory_request=_field(data, "memoryRequest", int, where),
        memory_limit=_field(data, "memoryLimit", (int, type(None)), where),
        annotations=annotations,
        claims=tuple(claims),
    )


def _cpus(text: Any, where: str) -> CPUSet:
    if not isinstance(text, str):
        raise SnapshotError(f"snapshot: {where}: expected a CPU list string, got {text!r}")
    try:
        return CPUSet.parse(text)
    except CPUSetParseError as e:
        raise SnapshotError(f"snapshot: {where}: {e}") from None


def assignment_to_json(a: Assignment | None) -> dict[str, str] | None:
    return None if a is None else {"cpus": a.cpus.format(), "mems": a.mems.format()}


def encode(
    topology: Topology,
    config: PolicyConfig,
    pools: Sequence[Pool],
    reserved: CPUSet,
    claims: Mapping[str, CPUSet],
    containers: Sequence[tuple[Grant, Assignment | None]],
    all_memory: Sequence[str] = (),
) -> dict[str, Any]:
    """The snapshot of one state, containers in the order given (by id); ``all_memory``: the
    claims whose containers get every memory node (written only when there are any)."""
    out = []
    for g, a in containers:
        out.append(
            {
                "request": request_to_json(g.request),
                "grant": {
                    "kind": g.kind.value,
                    "pool": pools[g.pool].name,
                    "exclusive": CPUSet.from_mask(g.exclusive).format(),
                    "isolated": g.isolated,
                    "milli": g.milli,
                    "memPool": pools[g.mem_pool].name,
                    "mems": CPUSet.from_mask(g.mems).format(),
                    "memory": g.memory,
                    "hideHyperthreads": g.hide_hyperthreads,
                    "memoryPreserve": g.memory_preserve,
                    "degraded": g.degraded,
                    "claims": list(g.claims),
                },
                "assignment": assignment_to_json(a),
            }
        )
    return {
        "version": FORMAT_VERSION,
        "machine": {"online": topology.online.format(), "source": topology.source},
        "config": config.to_json(),
        "reserved": reserved.format(),
        "claims": {k: v.format() for k, v in claims.items()},
        "containers": out,
    } | ({"allMemoryClaims": sorted(all_memory)} if all_memory else {})


def read_config(topology: Topology, snap: Any) -> PolicyConfig:
    """The snapshot's configuration, once the snapshot is known to come from this machine."""
    if not isinstance(snap, dict):
        raise SnapshotError(f"snapshot: expected an object, got {type(snap).__name__}")
    version = snap.get("version")
    if version != FORMAT_VERSION:
        raise SnapshotError(f"snapshot: unsupported version {version!r} (this build reads {FORMAT_VERSION})")
    machine = _field(snap, "machine", dict, "snapshot")
    online = _cpus(machine.get("online"), "machine.online")
    if online != topology.online:
        raise SnapshotError(
            f"snapshot: it was taken on a machine with online CPUs {online}, this one has {topology.online}"
        )
    try:
        return PolicyConfig.model_validate(_field(snap, "config", dict, "snapshot"))
    except ValidationError as e:
        from topodra.config_errors import describe

        raise SnapshotError(describe(e, "snapshot", PolicyConfig, ("config",))) from None


@dataclass(frozen=True, slots=True)
class Saved:
    """A snapshot's claims and containers, well-formed, with pools resolved; not yet checked
    against the policy's rules."""

    claims: dict[str, int]
    containers: list[tuple[Grant, Any]]  # each grant and the assignment recorded for it (JSON)
    all_memory: frozenset[str] = frozenset()  # claims whose containers get every memory node


def decode(snap: dict[str, Any], topology: Topology, pools: Sequence[Pool], reserved: CPUSet) -> Saved:
    """Read claims and containers of a snapshot whose ``read_config`` built ``pools``."""
    got = _cpus(snap.get("reserved"), "reserved")
    if got != reserved:
        raise SnapshotError(f"snapshot: reserved CPUs {got} differ from the configuration's {reserved}")
    raw_claims = _field(snap, "claims", dict, "snapshot")
    claims = {str(k): _cpus(raw_claims[k], f"claim {k!r}").mask for k in sorted(raw_claims)}
    all_memory = snap.get("allMemoryClaims", [])
    if not isinstance(all_memory, list) or not all(isinstance(c, str) and c in claims for c in all_memory):
        raise SnapshotError(f"snapshot: allMemoryClaims must list claims of the snapshot, got {all_memory!r}")
    by_name = {p.name: p.index for p in pools}
    nodes = CPUSet(topology.nodes).mask
    containers: list[tuple[Grant, Any]] = []
    for i, item in enumerate(_field(snap, "containers", list, "snapshot")):
        where = f"containers[{i}]"
        if not isinstance(item, dict):
            raise SnapshotError(f"snapshot: {where}: expected an object")
        req = request_from_json(item.get("request"), f"{where}.request")
        try:
            validate_request(req)
        except BadRequestError as e:
            raise SnapshotError(f"snapshot: {where}.request: {e}") from None
        where = f"container {req.id}"
        gd = _field(item, "grant", dict, where)
        try:
            kind = GrantKind(_field(gd, "kind", str, where))
        except ValueError:
            raise SnapshotError(f"snapshot: {where}: unknown grant kind {gd['kind']!r}") from None
        found = []
        for key in ("pool", "memPool"):
            name = _field(gd, key, str, where)
            if name not in by_name:
                raise SnapshotError(f"snapshot: {where}: unknown pool {name!r} (pools: {', '.join(by_name)})")
            found.append(by_name[name])
        exclusive = _cpus(gd.get("exclusive"), f"{where}.exclusive").mask
        if (kind in (GrantKind.EXCLUSIVE, GrantKind.MIXED)) != bool(exclusive):
            raise SnapshotError(f"snapshot: {where}: a {kind.value} grant with exclusive CPUs {gd.get('exclusive')!r}")
        grant_claims = _field(gd, "claims", list, where)
        if not all(isinstance(c, str) and c in claims for c in grant_claims):
            raise SnapshotError(f"snapshot: {where}: claims {grant_claims!r} are not all in the snapshot")
        if not set(grant_claims) <= set(req.claims):
            raise SnapshotError(f"snapshot: {where}: grant claims {grant_claims!r} are not the request's")
        if (kind is GrantKind.CLAIMED) != bool(grant_claims):
            raise SnapshotError(f"snapshot: {where}: a {kind.value} grant with claims {grant_claims!r}")
        for key in ("milli", "memory"):
            if _field(gd, key, int, where) < 0:
                raise SnapshotError(f"snapshot: {where}: {key} must not be negative")
        mems = _cpus(gd.get("mems"), f"{where}.mems").mask
        if mems & ~nodes:
            raise SnapshotError(f"snapshot: {where}: mems {gd.get('mems')!r} names nodes this machine does not have")
        grant = Grant(
            request=req,
            kind=kind,
            pool=found[0],
            exclusive=exclusive,
            isolated=bool(_field(gd, "isolated", bool, where)),
            milli=_field(gd, "milli", int, where),
            mem_pool=found[1],
            mems=mems,
            memory=_field(gd, "memory", int, where),
            hide_hyperthreads=bool(_field(gd, "hideHyperthreads", bool, where)),
            memory_preserve=bool(_field(gd, "memoryPreserve", bool, where)),
            degraded=_field(gd, "degraded", str, where),
            claims=tuple(grant_claims),
        )
        containers.append((grant, item.get("assignment")))
    return Saved(claims=claims, containers=containers, all_memory=frozenset(all_memory))
