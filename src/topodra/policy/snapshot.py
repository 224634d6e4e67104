"""The policy's state as JSON-able data, and back, exactly.

The snapshot holds the configuration, the claims and every container's request
and grant (CPU sets in the kernel list format, pools by name). Loading checks
it against the machine and the rules (exclusive CPUs disjoint, claims disjoint,
pools known, assignments as recorded) and raises ``PolicyError`` naming what
does not fit, rather than restoring a state the policy could not have made.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from pydantic import ValidationError

from topodra.cpuset import CPUSet, CPUSetParseError
from topodra.policy.api import Assignment, ContainerRequest, PolicyError, QoSClass
from topodra.policy.classify import GrantKind
from topodra.policy.config import PolicyConfig
from topodra.policy.grants import Grant
from topodra.topology.model import Topology

if TYPE_CHECKING:
    from topodra.policy.policy import Policy

__all__ = ["dump", "load", "FORMAT_VERSION", "request_to_json", "request_from_json"]

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
        raise PolicyError(f"snapshot: {where}: missing field {key!r}")
    value = data[key]
    allowed = types if isinstance(types, tuple) else (types,)
    if not isinstance(value, allowed) or (isinstance(value, bool) and bool not in allowed):
        raise PolicyError(f"snapshot: {where}: field {key!r} has the wrong type: {value!r}")
    return value


def request_from_json(data: Any, where: str = "request") -> ContainerRequest:
    if not isinstance(data, dict):
        raise PolicyError(f"snapshot: {where}: expected an object, got {data!r}")
    try:
        qos = QoSClass(_field(data, "qos", str, where))
    except ValueError:
        raise PolicyError(f"snapshot: {where}: unknown qos {data['qos']!r}") from None
    annotations = _field(data, "annotations", dict, where)
    if not all(isinstance(k, str) and isinstance(v, str) for k, v in annotations.items()):
        raise PolicyError(f"snapshot: {where}: annotations must map strings to strings")
    claims = _field(data, "claims", list, where)
    if not all(isinstance(c, str) for c in claims):
        raise PolicyError(f"snapshot: {where}: claims must be strings")
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
        raise PolicyError(f"snapshot: {where}: expected a CPU list string, got {text!r}")
    try:
        return CPUSet.parse(text)
    except CPUSetParseError as e:
        raise PolicyError(f"snapshot: {where}: {e}") from None


def dump(policy: Policy) -> dict[str, Any]:
    pools = policy.pools
    containers = []
    for cid in sorted(policy._grants):
        g = policy._grants[cid]
        a = policy.assignment(cid)
        containers.append(
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
                "assignment": None if a is None else {"cpus": a.cpus.format(), "mems": a.mems.format()},
            }
        )
    return {
        "version": FORMAT_VERSION,
        "machine": {"online": policy.topology.online.format(), "source": policy.topology.source},
        "config": policy.config.to_json(),
        "reserved": policy.reserved_cpus.format(),
        "claims": {k: v.format() for k, v in policy.claims().items()},
        "containers": containers,
    }


def load(cls: type[Policy], topology: Topology, snap: Any) -> Policy:
    if not isinstance(snap, dict):
        raise PolicyError(f"snapshot: expected an object, got {type(snap).__name__}")
    version = snap.get("version")
    if version != FORMAT_VERSION:
        raise PolicyError(f"snapshot: unsupported version {version!r} (this build reads {FORMAT_VERSION})")
    machine = _field(snap, "machine", dict, "snapshot")
    online = _cpus(machine.get("online"), "machine.online")
    if online != topology.online:
        raise PolicyError(
            f"snapshot: it was taken on a machine with online CPUs {online}, this one has {topology.online}"
        )
    try:
        config = PolicyConfig.model_validate(_field(snap, "config", dict, "snapshot"))
    except ValidationError as e:
        raise PolicyError(f"snapshot: invalid config: {e}") from None
    policy = cls(topology, config)
    reserved = _cpus(snap.get("reserved"), "reserved")
    if reserved != policy.reserved_cpus:
        raise PolicyError(f"snapshot: reserved CPUs {reserved} differ from the configuration's {policy.reserved_cpus}")
    claims = _field(snap, "claims", dict, "snapshot")
    for claim_id in sorted(claims):
        mask = _cpus(claims[claim_id], f"claim {claim_id!r}").mask
        if not mask or mask & ~policy._allowed or mask & policy._reserved or mask & policy._claimed:
            raise PolicyError(f"snapshot: claim {claim_id!r} CPUs {claims[claim_id]!r} are not claimable here")
        policy._set_claim(claim_id, mask)
    by_name = {p.name: p.index for p in policy.pools}
    recorded: dict[str, Any] = {}
    for i, item in enumerate(_field(snap, "containers", list, "snapshot")):
        where = f"containers[{i}]"
        if not isinstance(item, dict):
            raise PolicyError(f"snapshot: {where}: expected an object")
        req = request_from_json(item.get("request"), f"{where}.request")
        where = f"container {req.id}"
        if req.id in policy._grants:
            raise PolicyError(f"snapshot: {where} is listed twice")
        gd = _field(item, "grant", dict, where)
        try:
            kind = GrantKind(_field(gd, "kind", str, where))
        except ValueError:
            raise PolicyError(f"snapshot: {where}: unknown grant kind {gd['kind']!r}") from None
        pools = []
        for key in ("pool", "memPool"):
            name = _field(gd, key, str, where)
            if name not in by_name:
                raise PolicyError(f"snapshot: {where}: unknown pool {name!r} (pools: {', '.join(by_name)})")
            pools.append(by_name[name])
        exclusive = _cpus(gd.get("exclusive"), f"{where}.exclusive").mask
        used = policy._excl | policy._claimed
        allowed_here = policy._isolated if gd.get("isolated") else policy._sharable
        if exclusive & ~(allowed_here & policy._pools[pools[0]].cpus) or exclusive & used:
            raise PolicyError(f"snapshot: {where}: exclusive CPUs {gd.get('exclusive')!r} are not grantable")
        if (kind in (GrantKind.EXCLUSIVE, GrantKind.MIXED)) != bool(exclusive):
            raise PolicyError(f"snapshot: {where}: a {kind.value} grant with exclusive CPUs {gd.get('exclusive')!r}")
        grant_claims = _field(gd, "claims", list, where)
        if not all(isinstance(c, str) and c in policy._claims for c in grant_claims):
            raise PolicyError(f"snapshot: {where}: claims {grant_claims!r} are not all in the snapshot")
        if not set(grant_claims) <= set(req.claims):
            raise PolicyError(f"snapshot: {where}: grant claims {grant_claims!r} are not the request's")
        if (kind is GrantKind.CLAIMED) != bool(grant_claims):
            raise PolicyError(f"snapshot: {where}: a {kind.value} grant with claims {grant_claims!r}")
        for key in ("milli", "memory"):
            if _field(gd, key, int, where) < 0:
                raise PolicyError(f"snapshot: {where}: {key} must not be negative")
        mems = _cpus(gd.get("mems"), f"{where}.mems").mask
        if mems & ~CPUSet(topology.nodes).mask:
            raise PolicyError(f"snapshot: {where}: mems {gd.get('mems')!r} names nodes this machine does not have")
        if pools[1] not in policy.pools[pools[0]].path:  # memory is the pool's or an ancestor's
            raise PolicyError(f"snapshot: {where}: memory pool {gd['memPool']!r} is unrelated to pool {gd['pool']!r}")
        if kind is not GrantKind.PRESERVE:
            want = policy.pools[pools[1]].nodes_of(policy._classify_for_sync(req)[0].memory_kinds)
            if (mems & ~want or not mems) if kind is GrantKind.CLAIMED else mems != want:
                raise PolicyError(f"snapshot: {where}: mems {gd.get('mems')!r} are not those of pool {gd['memPool']!r}")
        grant = Grant(
            request=req,
            kind=kind,
            pool=pools[0],
            exclusive=exclusive,
            isolated=bool(_field(gd, "isolated", bool, where)),
            milli=_field(gd, "milli", int, where),
            mem_pool=pools[1],
            mems=mems,
            memory=_field(gd, "memory", int, where),
            hide_hyperthreads=bool(_field(gd, "hideHyperthreads", bool, where)),
            memory_preserve=bool(_field(gd, "memoryPreserve", bool, where)),
            degraded=_field(gd, "degraded", str, where),
            claims=tuple(grant_claims),
        )
        policy._put(req.id, grant)
        recorded[req.id] = item.get("assignment")
    for cid, want in recorded.items():
        a = policy._compute(policy._grants[cid])
        got = None if a is None else {"cpus": a.cpus.format(), "mems": a.mems.format()}
        if got != want:
            raise PolicyError(f"snapshot: container {cid}: recorded assignment {want!r} but the state gives {got!r}")
        if a is not None:
            policy._assigned[cid] = Assignment(cpus=a.cpus, mems=a.mems)
    return policy
