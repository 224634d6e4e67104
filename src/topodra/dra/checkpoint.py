"""What the driver prepared, persisted so Unprepare and restarts work without the API server.

The kubelet may call Unprepare after the claim object is gone, and after a
driver restart, so the driver keeps its own record: the source of truth for
prepared claims (CDI specs are rebuilt from it at start-up).

A document is JSON with a kind, a format version, a generation number and a
SHA-256 checksum over generation and claims. ``CheckpointStore`` keeps two
slots, ``<path>`` and ``<path>.1``: generation ``g`` is written in place over
slot ``g % 2`` with one ``fdatasync``, so the other slot always holds the
previous generation whole. Reading takes the newest slot that passes every
check; a slot that fails one (torn by a crash mid-write, bit rot, an unknown
version, hand edits) is reported, never trusted.
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
from topodra.dra.files import overwrite_durably, write_atomic
from topodra.policy.api import MEMORY_MODES

__all__ = [
    "CHECKPOINT_KIND",
    "CHECKPOINT_VERSION",
    "CheckpointError",
    "CheckpointStore",
    "LoadedCheckpoint",
    "PreparedClaim",
    "PreparedDevice",
    "dump_checkpoint",
    "load_checkpoint",
    "parse_checkpoint",
    "save_checkpoint",
]

CHECKPOINT_KIND: Final = "topodra.dra/checkpoint"
CHECKPOINT_VERSION: Final = 2
#: Versions this code reads: 1 had no generation (read as generation 0).
_READABLE_VERSIONS: Final = (1, 2)


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
    memory: str = "local"  # the memory nodes of its containers (``memoryNodes``): local or all

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
    } | ({"memoryNodes": c.memory} if c.memory != "local" else {})


def _canonical(obj: object) -> bytes:
    return json.dumps(obj, sort_keys=True, separators=(",", ":")).encode()


def _digest(version: object, generation: object, body: object) -> str:
    covered = body if version == 1 else {"generation": generation, "claims": body}
    return "sha256:" + hashlib.sha256(_canonical(covered)).hexdigest()


def dump_checkpoint(claims: Mapping[str, PreparedClaim], generation: int = 0) -> bytes:
    body = {uid: _claim_to_json(c) for uid, c in sorted(claims.items())}
    doc = {
        "kind": CHECKPOINT_KIND,
        "version": CHECKPOINT_VERSION,
        "generation": generation,
        "checksum": _digest(CHECKPOINT_VERSION, generation, body),
        "claims": body,
    }
    return json.dumps(doc, sort_keys=True, separators=(",", ":")).encode() + b"\n"  # compact: C encoder


def save_checkpoint(path: Path, claims: Mapping[str, PreparedClaim]) -> None:
    """One checkpoint file on its own (tools, tests); the driver uses ``CheckpointStore``."""
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
    return parse_generation(data, source)[1]


def parse_generation(data: bytes, source: str = "checkpoint") -> tuple[int, dict[str, PreparedClaim]]:
    """Decode and verify a checkpoint: (generation, claims)."""
    try:
        doc = json.loads(data)
    except (ValueError, UnicodeDecodeError) as exc:
        raise CheckpointError(f"{source}: not valid JSON ({exc})") from None
    if not isinstance(doc, dict):
        raise CheckpointError(f"{source}: top level is not an object")
    if doc.get("kind") != CHECKPOINT_KIND:
        raise CheckpointError(f"{source}: kind is {doc.get('kind')!r}, expected {CHECKPOINT_KIND!r}")
    version = doc.get("version")
    if version not in _READABLE_VERSIONS or isinstance(version, bool):
        raise CheckpointError(
            f"{source}: format version {version!r} is not supported (expected {CHECKPOINT_VERSION})"
        )
    generation = doc.get("generation", 0) if version == 1 else doc.get("generation")
    if not isinstance(generation, int) or isinstance(generation, bool) or generation < 0:
        raise CheckpointError(f"{source}: generation {generation!r} is not a non-negative integer")
    body = doc.get("claims")
    if not isinstance(body, dict):
        raise CheckpointError(f"{source}: 'claims' is not an object")
    if doc.get("checksum") != _digest(version, generation, body):
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
        memory = raw.get("memoryNodes", "local")
        if memory not in MEMORY_MODES:
            raise CheckpointError(f"{where}.memoryNodes must be {' or '.join(MEMORY_MODES)}, got {memory!r}")
        claims[uid] = PreparedClaim(
            uid=uid,
            namespace=_str(raw, "namespace", where),
            name=_str(raw, "name", where),
            cpus=cpus,
            devices=tuple(devices),
            pod_uids=tuple(pods),
            memory=memory,
        )
    return generation, claims


def load_checkpoint(path: Path) -> dict[str, PreparedClaim]:
    """The prepared claims of the newest good slot of ``path``; no file means none.

    Raises CheckpointError when a slot exists but none passes the checks.
    """
    loaded = CheckpointStore(path).load()
    if loaded.problems and loaded.generation < 0:
        raise CheckpointError("; ".join(loaded.problems))
    return dict(loaded.claims)


@dataclass(frozen=True, slots=True)
class LoadedCheckpoint:
    """What ``CheckpointStore.load`` found.

    ``generation`` is -1 when no slot passed the checks (or none exists);
    ``problems`` names every slot that exists and failed a check.
    """

    claims: Mapping[str, PreparedClaim]
    generation: int
    problems: tuple[str, ...] = ()
    damaged: tuple[Path, ...] = ()

    @property
    def previous_generation(self) -> bool:
        """A slot was damaged and the claims come from the other one."""
        return bool(self.problems) and self.generation >= 0


class CheckpointStore:
    """The two-slot checkpoint at ``path`` (see the module docstring)."""

    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        self.slots = (self.path, self.path.with_name(self.path.name + ".1"))
        self.generation = -1
        self._loaded = False

    def load(self) -> LoadedCheckpoint:
        best: tuple[int, dict[str, PreparedClaim]] | None = None
        problems: list[str] = []
        damaged: list[Path] = []
        for slot in self.slots:
            try:
                data = slot.read_bytes()
            except FileNotFoundError:
                continue
            except OSError as exc:
                problems.append(f"{slot}: cannot read: {exc}")
                damaged.append(slot)
                continue
            try:
                got = parse_generation(data, str(slot))
            except CheckpointError as exc:
                problems.append(str(exc))
                damaged.append(slot)
                continue
            if best is None or got[0] > best[0]:
                best = got
        generation, claims = best if best is not None else (-1, {})
        self.generation = max(self.generation, generation)
        self._loaded = True
        return LoadedCheckpoint(claims, generation, tuple(problems), tuple(damaged))

    def save(self, claims: Mapping[str, PreparedClaim]) -> None:
        """Write the next generation over the older slot (one ``fdatasync``)."""
        if not self._loaded:
            self.load()  # never overwrite the newest slot of an earlier run
        generation = self.generation + 1
        self.path.parent.mkdir(parents=True, exist_ok=True)
        overwrite_durably(self.slots[generation % 2], dump_checkpoint(claims, generation), mode=0o600)
        self.generation = generation
