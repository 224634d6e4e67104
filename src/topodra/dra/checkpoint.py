"""What the driver prepared, persisted so Unprepare and restarts work without the API server.

The kubelet may call Unprepare after the claim object is gone, and after a
driver restart, so the driver keeps its own record. The file is JSON with a
format version and a SHA-256 checksum over the claims, written atomically.
A file that fails any check is a ``CheckpointError`` that names the file and
the problem: the driver then claims nothing rather than guessing (no CPU is
leaked or handed out twice).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

from topodra.cpuset import CPUSet, CPUSetParseError
from topodra.dra.cdi import cdi_device_id
from topodra.dra.claims import ClaimError, check_uid
from topodra.dra.files import write_atomic

__all__ = [
    "CHECKPOINT_KIND",
    "CHECKPOINT_VERSION",
    "CheckpointError",
    "PreparedClaim",
    "PreparedDevice",
    "dump_checkpoint",
    "load_checkpoint",
    "parse_checkpoint",
    "save_checkpoint",
]

CHECKPOINT_KIND: Final = "topodra.dra/checkpoint"
CHECKPOINT_VERSION: Final = 1


class CheckpointError(Exception):
    """A checkpoint that cannot be trusted; the message names the file and the check that failed."""


@dataclass(frozen=True, slots=True)
class PreparedDevice:
    """One allocation result as prepared: which device, for which request, which CPUs."""

    request: str
    pool: str
    device: str
    cpus: CPUSet
    share_id: str | None = None


@dataclass(frozen=True, slots=True)
class PreparedClaim:
    """A claim this node prepared: its CPUs, devices and the pods allowed to use them."""

    uid: str
    namespace: str
    name: str
    cpus: CPUSet
    devices: tuple[PreparedDevice, ...] = ()
    pod_uids: tuple[str, ...] = ()
    error: str = field(default="", compare=False)  # set when restore could not re-claim the CPUs

    @property
    def cdi_ids(self) -> tuple[str, ...]:
        return (cdi_device_id(self.uid),) if self.cpus else ()


def _claim_to_json(c: PreparedClaim) -> dict[str, Any]:
    return {
        "namespace": c.namespace,
        "name": c.name,
        "cpus": c.cpus.format(),
        "podUIDs": list(c.pod_uids),
        "devices": [
            {"request": d.request, "pool": d.pool, "device": d.device, "cpus": d.cpus.format()}
            | ({"shareID": d.share_id} if d.share_id else {})
            for d in c.devices
        ],
    }


def _canonical(obj: object) -> bytes:
    return json.dumps(obj, sort_keys=True, separators=(",", ":")).encode()


def dump_checkpoint(claims: Mapping[str, PreparedClaim]) -> bytes:
    body = {uid: _claim_to_json(c) for uid, c in sorted(claims.items())}
    digest = hashlib.sha256(_canonical(body)).hexdigest()
    doc = {"kind": CHECKPOINT_KIND, "version": CHECKPOINT_VERSION, "checksum": f"sha256:{digest}", "claims": body}
    return json.dumps(doc, indent=1, sort_keys=True).encode() + b"\n"


def save_checkpoint(path: Path, claims: Mapping[str, PreparedClaim]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    write_atomic(path, dump_checkpoint(claims), mode=0o600)


def _str(obj: Mapping[str, Any], key: str, where: str) -> str:
    value = obj.get(key)
    if not isinstance(value, str):
        raise CheckpointError(f"{where}.{key} must be a string, got {value!r}")
    return value


def _cpus(obj: Mapping[str, Any], key: str, where: str) -> CPUSet:
    try:
        return CPUSet.parse(_str(obj, key, where))
    except CPUSetParseError as exc:
        raise CheckpointError(f"{where}.{key}: {exc}") from None


def parse_checkpoint(data: bytes, source: str = "checkpoint") -> dict[str, PreparedClaim]:
    """Decode and verify a checkpoint; every failure names ``source`` and the field."""
    try:
        doc = json.loads(data)
    except (ValueError, UnicodeDecodeError) as exc:
        raise CheckpointError(f"{source}: not valid JSON ({exc})") from None
    if not isinstance(doc, dict):
        raise CheckpointError(f"{source}: top level is not an object")
    if doc.get("kind") != CHECKPOINT_KIND:
        raise CheckpointError(f"{source}: kind is {doc.get('kind')!r}, expected {CHECKPOINT_KIND!r}")
    if doc.get("version") != CHECKPOINT_VERSION:
        raise CheckpointError(
            f"{source}: format version {doc.get('version')!r} is not supported (expected {CHECKPOINT_VERSION})"
        )
    body = doc.get("claims")
    if not isinstance(body, dict):
        raise CheckpointError(f"{source}: 'claims' is not an object")
    digest = "sha256:" + hashlib.sha256(_canonical(body)).hexdigest()
    if doc.get("checksum") != digest:
        raise CheckpointError(f"{source}: checksum mismatch (file is corrupt or was edited by hand)")
    claims: dict[str, PreparedClaim] = {}
    owner: dict[int, str] = {}
    for uid, raw in body.items():
        where = f"{source}: claims[{uid!r}]"
        try:
            check_uid(uid)
        except ClaimError as exc:
            raise CheckpointError(f"{where}: {exc}") from None
        if not isinstance(raw, dict):
            raise CheckpointError(f"{where} is not an object")
        devices = []
        raw_devices = raw.get("devices", [])
        if not isinstance(raw_devices, list):
            raise CheckpointError(f"{where}.devices is not a list")
        for i, d in enumerate(raw_devices):
            dw = f"{where}.devices[{i}]"
            if not isinstance(d, dict):
                raise CheckpointError(f"{dw} is not an object")
            share = d.get("shareID")
            if share is not None and not isinstance(share, str):
                raise CheckpointError(f"{dw}.shareID must be a string")
            devices.append(
                PreparedDevice(_str(d, "request", dw), _str(d, "pool", dw), _str(d, "device", dw), _cpus(d, "cpus", dw), share)
            )
        pods = raw.get("podUIDs", [])
        if not isinstance(pods, list) or not all(isinstance(p, str) for p in pods):
            raise CheckpointError(f"{where}.podUIDs must be a list of strings")
        cpus = _cpus(raw, "cpus", where)
        union = CPUSet()
        for d in devices:
            union |= d.cpus
        if union != cpus:
            raise CheckpointError(f"{where}: devices hold CPUs {union}, the claim records {cpus}")
        for cpu in cpus:
            if cpu in owner:
                raise CheckpointError(f"{where}: CPU {cpu} is also held by claim {owner[cpu]!r}")
            owner[cpu] = uid
        claims[uid] = PreparedClaim(
            uid=uid,
            namespace=_str(raw, "namespace", where),
            name=_str(raw, "name", where),
            cpus=cpus,
            devices=tuple(devices),
            pod_uids=tuple(pods),
        )
    return claims


def load_checkpoint(path: Path) -> dict[str, PreparedClaim]:
    """The prepared claims in ``path``; an absent file means none."""
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return {}
    except OSError as exc:
        raise CheckpointError(f"{path}: cannot read: {exc}") from None
    return parse_checkpoint(data, str(path))
