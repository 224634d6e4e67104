"""Server-side Tables (``Accept: application/json;as=Table;g=meta.k8s.io;v=v1``): what ``kubectl
get`` prints, for the kinds the API server double serves.

The columns and cells follow kube-apiserver 1.36.2's printers
(``pkg/printers/internalversion/printers.go``: ``printPod``, ``printNode``, ``printNamespace``,
``printResourceClaim``/``resourceClaimState``, ``printResourceClaimTemplate``,
``printDeviceClass``, ``printResourceSlice``), which the server always runs as ``-o wide`` does
(``pkg/printers/storage``: ``Wide: true``; kubectl hides the priority-1 columns unless asked).
Ages read as apimachinery's ``duration.HumanDuration``. Pure: the clock is an argument.
"""

from __future__ import annotations

import datetime
import json
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Final

from topodra.embedded.store import Kind
from topodra.kube.errors import ApiError

__all__ = ["INCLUDE_OBJECT", "human_duration", "table", "wants_table"]

Obj = Mapping[str, Any]
INCLUDE_OBJECT: Final = ("None", "Metadata", "Object")


def wants_table(accept: str) -> bool:
    """True when the client takes a ``meta.k8s.io/v1`` Table (kubectl get's first choice)."""
    for media in accept.split(","):
        kind, *params = (p.strip() for p in media.split(";"))
        args = dict(p.split("=", 1) for p in params if "=" in p)
        if kind in ("application/json", "*/*") and args.get("as") == "Table" and args.get("g") == "meta.k8s.io" and args.get("v") == "v1":
            return True
    return False


def human_duration(seconds: float) -> str:
    """apimachinery's ``duration.HumanDuration`` (util/duration/duration.go, v1.36.2)."""
    s = int(seconds)
    if s < -1:
        return "<invalid>"
    if s < 0:
        return "0s"
    if s < 60 * 2:
        return f"{s}s"
    minutes = s // 60
    if minutes < 10:
        return f"{minutes}m" if s % 60 == 0 else f"{minutes}m{s % 60}s"
    if minutes < 60 * 3:
        return f"{minutes}m"
    hours = s // 3600
    if hours < 8:
        return f"{hours}h" if minutes % 60 == 0 else f"{hours}h{minutes % 60}m"
    if hours < 48:
        return f"{hours}h"
    if hours < 24 * 8:
        return f"{hours // 24}d" if hours % 24 == 0 else f"{hours // 24}d{hours % 24}h"
    if hours < 24 * 365 * 2:
        return f"{hours // 24}d"
    if hours < 24 * 365 * 8:
        days = (hours // 24) % 365
        return f"{hours // 24 // 365}y" if days == 0 else f"{hours // 24 // 365}y{days}d"
    return f"{hours // 24 // 365}y"


def _age(obj: Obj, now: datetime.datetime) -> str:
    stamp = (obj.get("metadata") or {}).get("creationTimestamp")
    if not stamp:
        return "<unknown>"
    created = datetime.datetime.fromisoformat(str(stamp).replace("Z", "+00:00"))
    return human_duration((now - created).total_seconds())


def _name(obj: Obj) -> str:
    return str((obj.get("metadata") or {}).get("name", ""))


def _pod_status(pod: Obj) -> tuple[str, str]:
    """READY and STATUS as ``printPod`` derives them (containers only: the double's pods have no
    init containers)."""
    spec, status = pod.get("spec") or {}, pod.get("status") or {}
    reason = status.get("reason") or status.get("phase") or ""
    ready = 0
    for cs in reversed(status.get("containerStatuses") or []):
        state = cs.get("state") or {}
        if (state.get("waiting") or {}).get("reason"):
            reason = state["waiting"]["reason"]
        elif "terminated" in state:
            term = state["terminated"] or {}
            reason = term.get("reason") or (f"Signal:{term['signal']}" if term.get("signal") else f"ExitCode:{term.get('exitCode', 0)}")
        elif cs.get("ready") and "running" in state:
            ready += 1
    if (pod.get("metadata") or {}).get("deletionTimestamp") and reason not in ("Succeeded", "Failed"):
        reason = "Terminating"
    return f"{ready}/{len(spec.get('containers') or [])}", reason


def _pod(pod: Obj, now: datetime.datetime) -> list[Any]:
    ready, reason = _pod_status(pod)
    status = pod.get("status") or {}
    restarts = sum(int(cs.get("restartCount") or 0) for cs in status.get("containerStatuses") or [])
    ips = status.get("podIPs") or []
    gates = (pod.get("spec") or {}).get("readinessGates") or []
    conditions = {c.get("type"): c.get("status") for c in status.get("conditions") or []}
    return [
        _name(pod),
        ready,
        reason,
        str(restarts),
        _age(pod, now),
        (ips[0].get("ip") if ips else "") or "<none>",
        (pod.get("spec") or {}).get("nodeName") or "<none>",
        status.get("nominatedNodeName") or "<none>",
        f"{sum(conditions.get(g.get('conditionType')) == 'True' for g in gates)}/{len(gates)}" if gates else "<none>",
    ]


def _node(node: Obj, now: datetime.datetime) -> list[Any]:
    status = node.get("status") or {}
    ready = [c for c in status.get("conditions") or [] if c.get("type") == "Ready"]
    states = ["Ready" if c.get("status") == "True" else "NotReady" for c in ready[-1:]] or ["Unknown"]
    if (node.get("spec") or {}).get("unschedulable"):
        states.append("SchedulingDisabled")
    labels = (node.get("metadata") or {}).get("labels") or {}
    roles = sorted(
        {k.removeprefix("node-role.kubernetes.io/") for k in labels if k.startswith("node-role.kubernetes.io/")}
        | {v for k, v in labels.items() if k == "kubernetes.io/role"}
    )
    info = status.get("nodeInfo") or {}
    addresses = status.get("addresses") or []

    def address(kind: str) -> str:
        return next((a.get("address") for a in addresses if a.get("type") == kind), None) or "<none>"

    kernel = info.get("kernelVersion") or "<unknown>"
    if info.get("architecture"):
        kernel += f" ({info['architecture']})"
    return [
        _name(node), ",".join(states), ",".join(r for r in roles if r) or "<none>", _age(node, now),
        info.get("kubeletVersion", ""), address("InternalIP"), address("ExternalIP"),
        info.get("osImage") or "<unknown>", kernel, info.get("containerRuntimeVersion") or "<unknown>",
    ]


def _claim_state(claim: Obj) -> str:
    """``resourceClaimState``: deleted, pending, allocated, reserved."""
    status = claim.get("status") or {}
    deleted = bool((claim.get("metadata") or {}).get("deletionTimestamp"))
    states = ["deleted"] if deleted else []
    if not status.get("allocation"):
        states += [] if deleted else ["pending"]
    else:
        states.append("allocated")
        if status.get("reservedFor"):
            states.append("reserved")
    return ",".join(states)


def _col(name: str, priority: int = 0, fmt: str = "") -> dict[str, Any]:
    return {"name": name, "type": "string", "format": fmt, "description": "", "priority": priority}


Row = Callable[[Obj, datetime.datetime], list[Any]]
_NAME: Final = _col("Name", fmt="name")
_AGE: Final = _col("Age")
_TABLES: Final[dict[str, tuple[list[dict[str, Any]], Row]]] = {
    "Pod": (
        [_NAME, _col("Ready"), _col("Status"), _col("Restarts"), _AGE, _col("IP", 1), _col("Node", 1), _col("Nominated Node", 1), _col("Readiness Gates", 1)],
        _pod,
    ),
    "Node": (
        [_NAME, _col("Status"), _col("Roles"), _AGE, _col("Version"), _col("Internal-IP", 1), _col("External-IP", 1), _col("OS-Image", 1), _col("Kernel-Version", 1), _col("Container-Runtime", 1)],
        _node,
    ),
    "Namespace": ([_NAME, _col("Status"), _AGE], lambda o, now: [_name(o), (o.get("status") or {}).get("phase", ""), _age(o, now)]),
    "ResourceClaim": ([_NAME, _col("State"), _AGE], lambda o, now: [_name(o), _claim_state(o), _age(o, now)]),
    "ResourceClaimTemplate": ([_NAME, _AGE], lambda o, now: [_name(o), _age(o, now)]),
    "DeviceClass": ([_NAME, _AGE], lambda o, now: [_name(o), _age(o, now)]),
    "ResourceSlice": (
        [_NAME, _col("Node"), _col("Driver"), _col("Pool"), _AGE],
        lambda o, now: [
            _name(o), (o.get("spec") or {}).get("nodeName") or "", (o.get("spec") or {}).get("driver", ""),
            ((o.get("spec") or {}).get("pool") or {}).get("name", ""), _age(o, now),
        ],
    ),
}


def table(kind: Kind, items: Sequence[Obj], list_meta: Mapping[str, Any], include: str, now: datetime.datetime) -> dict[str, Any]:
    """A ``meta.k8s.io/v1`` Table of ``items``; ``include`` is the request's ``includeObject``
    (``Metadata`` by default: each row carries a PartialObjectMetadata)."""
    if include not in INCLUDE_OBJECT:
        raise ApiError.bad_request(
            f"Unable to convert to Table as requested: includeObject: Invalid value: {json.dumps(include)}: "
            "must be 'Metadata', 'Object', 'None', or empty"
        )
    columns, row = _TABLES[kind.kind]
    rows = []
    for obj in items:
        entry: dict[str, Any] = {"cells": row(obj, now)}
        if include == "Object":
            entry["object"] = dict(obj)
        elif include == "Metadata":
            entry["object"] = {"kind": "PartialObjectMetadata", "apiVersion": "meta.k8s.io/v1", "metadata": obj.get("metadata") or {}}
        else:
            entry["object"] = None
        rows.append(entry)
    meta = {k: v for k, v in list_meta.items() if k in ("resourceVersion", "continue", "remainingItemCount")}
    return {"kind": "Table", "apiVersion": "meta.k8s.io/v1", "metadata": meta, "columnDefinitions": columns, "rows": rows}
