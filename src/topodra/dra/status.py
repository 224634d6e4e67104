"""Claim device status: what a prepared claim got on this node, written to ``status.devices``.

``kubectl get resourceclaim -o yaml`` then shows, per allocated device of ours
(driver, pool, device, shareID), the CPUs it stands for and their NUMA nodes in
``data``, and a ``Ready`` condition: True once prepared, False while one of its
CPUs is offline (hotplug) or when a restarted agent could not restore it.

Why it is shaped like this:

- The builder (``device_statuses``) is pure: plain data in, API dicts out, so
  the rules (limits, condition shape, which CPUs are offline) are unit-tested
  without I/O.
- The writer (``StatusWriter``) runs **off the Prepare reply path**: Prepare
  only records the wanted state of the claim (a dict assignment) and answers;
  a background task sends it with server-side apply (field manager = the driver
  name, on the ``status`` subresource, so only our own entries are touched and
  the API server merges them into the list-map keyed by driver/pool/device/shareID).
  Wanted states are coalesced per claim (only the newest is sent), bounded in
  number, retried with backoff on transient errors and dropped on permanent
  ones (claim gone, re-created under another UID, forbidden, invalid).
- ``ClaimStatus`` ties them to the driver and the machine: it remembers which
  claims it reports, re-reports a claim whose CPUs go offline or come back, and
  is fed from the checkpoint by ``Driver.restore`` so a restarted agent keeps
  (and re-asserts) every entry.

Writing ``status.devices`` needs ``patch`` on ``resourceclaims/status`` and, from
Kubernetes 1.36 (gate ``DRAResourceClaimGranularStatusAuthorization``), the verbs
``associated-node:patch`` / ``associated-node:update`` on ``resourceclaims/driver``
for resourceName ``native.cpu`` (deploy/ and examples/rbac.yaml carry both).
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime
import functools
import json
import logging
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

from topodra.cpuset import CPUSet
from topodra.dra.checkpoint import PreparedClaim, PreparedDevice
from topodra.dra.devices import DRIVER

__all__ = [
    "CONDITIONS_MAX",
    "DATA_MAX",
    "REASON_NOT_RESTORED",
    "REASON_OFFLINE",
    "REASON_PREPARED",
    "ClaimStatus",
    "StatusWriter",
    "apply_body",
    "device_key",
    "device_statuses",
    "kube_claim_status",
]

log = logging.getLogger(__name__)

#: resource.k8s.io/v1 limits on one AllocatedDeviceStatus.
CONDITIONS_MAX: Final = 8
DATA_MAX: Final = 10 * 1024
MESSAGE_MAX: Final = 32768
READY: Final = "Ready"
REASON_PREPARED: Final = "Prepared"
REASON_OFFLINE: Final = "CPUsOffline"
REASON_NOT_RESTORED: Final = "NotRestored"

#: (driver, pool, device, shareID or "") -- the key of the status.devices list-map.
DeviceKey = tuple[str, str, str, str]
Entry = dict[str, Any]


def device_key(entry: Mapping[str, Any]) -> DeviceKey:
    return (str(entry.get("driver", "")), str(entry.get("pool", "")), str(entry.get("device", "")), str(entry.get("shareID") or ""))


def _now() -> str:
    return datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _data(device: PreparedDevice, node_of: Mapping[int, int], online: CPUSet) -> dict[str, Any]:
    nodes = sorted({node_of[c] for c in device.cpus if c in node_of})
    data: dict[str, Any] = {"cpuset": str(device.cpus), "cpus": len(device.cpus), "numaNodes": nodes}
    offline = device.cpus - online
    if offline:
        data["offlineCPUs"] = str(offline)
    return data


def _cpus(cpus: CPUSet) -> str:
    return f"CPUs {cpus}" if len(cpus) > 1 else f"CPU {cpus}"


def _ready(claim: PreparedClaim, device: PreparedDevice, online: CPUSet, now: str) -> dict[str, Any]:
    offline = device.cpus - online
    if claim.error:
        status, reason, message = "False", REASON_NOT_RESTORED, claim.error
    elif offline:
        running = claim.cpus & online
        until = "they return" if len(offline) > 1 else "it returns"
        status, reason = "False", REASON_OFFLINE
        if running:
            message = f"{_cpus(offline)} offline; the claim's containers run on {running} until {until}"
        else:
            message = f"{_cpus(offline)} offline; no CPU of the claim is online: its containers run where their CPU request places them until {until}"
    else:
        status, reason, message = "True", REASON_PREPARED, f"{_cpus(device.cpus)} prepared for the claim's containers"
    return {
        "type": READY,
        "status": status,
        "reason": reason,
        "message": message[:MESSAGE_MAX],
        "lastTransitionTime": now,
    }


def device_statuses(
    claim: PreparedClaim,
    *,
    node_of: Mapping[int, int],
    online: CPUSet,
    driver: str = DRIVER,
    now: str | None = None,
) -> list[Entry]:
    """One AllocatedDeviceStatus per prepared device of ``claim`` (none for a claim without
    devices). ``node_of``: CPU -> NUMA node, for every CPU ever seen (offline ones too);
    ``online``: the CPUs online now."""
    stamp = now or _now()
    out: list[Entry] = []
    for device in claim.devices:
        entry: Entry = {"driver": driver, "pool": device.pool, "device": device.device}
        if device.share_id:
            entry["shareID"] = device.share_id
        entry["conditions"] = [_ready(claim, device, online, stamp)]
        data = _data(device, node_of, online)
        if len(device.cpus) > 512 and len(json.dumps(data, separators=(",", ":"))) > DATA_MAX:  # thousands of CPUs
            data = {"cpus": len(device.cpus), "numaNodes": data["numaNodes"]}
        entry["data"] = data
        out.append(entry)
    return out


def apply_body(namespace: str, name: str, uid: str, entries: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """The server-side apply configuration of our entries (none: remove every entry we own).
    The UID makes the API server refuse the write if the claim was re-created meanwhile."""
    status: dict[str, Any] = {"devices": [dict(e) for e in entries]} if entries else {}
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": name, "namespace": namespace, "uid": uid},
        "status": status,
    }


# --- the writer ------------------------------------------------------------------------------------

#: ``await apply(namespace, name, body)``: server-side apply on the claim's status subresource.
ApplyFn = Callable[[str, str, dict[str, Any]], Awaitable[Mapping[str, Any]]]
#: ``await get(namespace, name)``: the claim (to carry condition times over after a restart).
GetFn = Callable[[str, str], Awaitable[Mapping[str, Any]]]
#: ``observe(result, seconds)``; result is ok, unchanged, retry, failed, gone or dropped.
ObserveFn = Callable[[str, float], None]

#: HTTP codes worth retrying: the API server is busy, restarting or unreachable (503 here).
_TRANSIENT: Final = frozenset({408, 429, 500, 502, 503, 504})


#: A claim's wanted entries, or a function building them when they are sent.
Entries = Sequence[Entry] | Callable[[], list[Entry]]


@dataclass(slots=True)
class _Want:
    namespace: str
    name: str
    uid: str
    entries: Sequence[Entry] | Callable[[], list[Entry]]
    adopt: bool = False  # after a restart: read the claim first to keep condition times
    attempts: int = 0
    due: float = 0.0


def _untimed(entries: Sequence[Mapping[str, Any]]) -> list[Any]:
    """Entries without condition times: what decides whether a write changes anything."""
    out = []
    for e in entries:
        conds = [{k: v for k, v in c.items() if k != "lastTransitionTime"} for c in e.get("conditions") or []]
        out.append({**e, "conditions": conds})
    return out


def _clock() -> float:
    try:
        return asyncio.get_running_loop().time()
    except RuntimeError:  # submitted outside a loop: due at once
        return 0.0


def _code(exc: BaseException) -> int:
    code = getattr(exc, "code", None)
    return int(code) if isinstance(code, int) else 503


class _Gone(Exception):
    pass


class StatusWriter:
    """Sends each claim's newest wanted status in the background, one request at a time."""

    def __init__(
        self,
        apply: ApplyFn,
        *,
        get: GetFn | None = None,
        observe: ObserveFn | None = None,
        driver: str = DRIVER,
        max_pending: int = 4096,
        retry_base: float = 0.2,
        retry_max: float = 30.0,
        max_attempts: int = 12,
        delay: float = 0.01,
    ) -> None:
        """``delay``: seconds a new wanted state waits before it is sent, so the Prepare reply
        leaves first (the write shares the event loop with it) and quick changes coalesce."""
        self._apply = apply
        self._delay = delay
        self._get = get
        self._observe = observe
        self._driver = driver
        self._max_pending = max_pending
        self._retry_base = retry_base
        self._retry_max = retry_max
        self._max_attempts = max_attempts
        self._want: dict[str, _Want] = {}
        self._written: dict[str, list[Entry]] = {}  # uid -> our entries as last written
        self._inflight: str | None = None
        self._forbidden_hint = False  # the RBAC hint is logged once
        self._wake = asyncio.Event()
        self._idle = asyncio.Event()
        self._idle.set()
        self.counts: dict[str, int] = {}
        self.last_error = ""

    @property
    def pending(self) -> int:
        return len(self._want)

    def written(self, uid: str) -> list[Entry] | None:
        """Our entries in the claim's status as last written (None: unknown or none)."""
        return self._written.get(uid)

    def submit(self, uid: str, namespace: str, name: str, entries: Entries, *, adopt: bool = False) -> None:
        """Want ``entries`` (empty: none of ours; a function: built when sent, off the caller's
        path) in the claim's status. Never blocks, never raises."""
        old = self._want.get(uid)
        if (
            not callable(entries)
            and not entries
            and old is not None
            and not old.adopt
            and uid not in self._written
            and self._inflight != uid
        ):
            del self._want[uid]  # prepared and released before anything was written: nothing to undo
            self._settle_idle()
            return
        if old is None and len(self._want) >= self._max_pending:
            self._count("dropped", 0.0)
            log.warning("claim %s/%s: status not written, %d claims already wait", namespace, name, len(self._want))
            return
        due = old.due if old is not None else _clock() + self._delay
        keep_adopt = adopt or (old is not None and old.adopt)
        self._want[uid] = _Want(namespace, name, uid, entries if callable(entries) else list(entries), keep_adopt, 0, due)
        self._idle.clear()
        self._wake.set()

    def _settle_idle(self) -> None:
        if not self._want and self._inflight is None:
            self._idle.set()

    async def wait_idle(self, timeout: float | None = None) -> None:
        """Until nothing waits to be written (tests, benchmarks, a clean stop)."""
        async with asyncio.timeout(timeout):
            await self._idle.wait()

    def _count(self, result: str, seconds: float) -> None:
        self.counts[result] = self.counts.get(result, 0) + 1
        if self._observe is not None:
            with contextlib.suppress(Exception):
                self._observe(result, seconds)

    def _next(self, now: float) -> _Want | float | None:
        """The job due first, or the seconds until one is due, or None when nothing waits."""
        best: _Want | None = None
        for want in self._want.values():
            if best is None or want.due < best.due:
                best = want
        if best is None:
            return None
        return best if best.due <= now else best.due - now

    async def run(self, stop: asyncio.Event) -> None:
        loop = asyncio.get_running_loop()
        stopped = asyncio.ensure_future(stop.wait())
        try:
            while not stop.is_set():
                job = self._next(loop.time())
                if job is None or isinstance(job, float):
                    self._settle_idle()
                    self._wake.clear()
                    woken = asyncio.ensure_future(self._wake.wait())
                    try:
                        await asyncio.wait({stopped, woken}, timeout=job, return_when=asyncio.FIRST_COMPLETED)
                    finally:
                        woken.cancel()
                    continue
                self._inflight = job.uid
                try:
                    await self._send(job, loop)
                finally:
                    self._inflight = None
        finally:
            stopped.cancel()

    @staticmethod
    def _carry_times(entries: list[Entry], before: Sequence[Mapping[str, Any]]) -> None:
        """Keep lastTransitionTime of a condition whose status did not change."""
        old = {device_key(e): {c.get("type"): c for c in e.get("conditions") or []} for e in before}
        for entry in entries:
            prev = old.get(device_key(entry), {})
            for cond in entry.get("conditions") or []:
                p = prev.get(cond.get("type"))
                if p is not None and p.get("status") == cond.get("status") and p.get("lastTransitionTime"):
                    cond["lastTransitionTime"] = p["lastTransitionTime"]

    async def _send(self, job: _Want, loop: asyncio.AbstractEventLoop) -> None:
        start = loop.time()
        entries = [dict(e) for e in (job.entries() if callable(job.entries) else job.entries)]
        try:
            if job.uid not in self._written and job.adopt and self._get is not None:
                current = await self._get(job.namespace, job.name)
                if (current.get("metadata") or {}).get("uid") not in (None, job.uid):
                    raise _Gone(f"claim {job.namespace}/{job.name} was re-created")
                devices = (current.get("status") or {}).get("devices") or []
                self._written[job.uid] = [dict(e) for e in devices if e.get("driver") == self._driver]
            before = self._written.get(job.uid)
            self._carry_times(entries, before or [])
            if before is not None and _untimed(before) == _untimed(entries):
                self._done(job, "unchanged", start, loop)  # a repeated Prepare: nothing to write
                return
            if before is None and not entries and not job.adopt:
                self._done(job, "unchanged", start, loop)  # nothing of ours was written
                return
            await self._apply(job.namespace, job.name, apply_body(job.namespace, job.name, job.uid, entries))
        except _Gone:
            self._done(job, "gone", start, loop)
            return
        except Exception as exc:
            code = _code(exc)
            if code == 404 or (code == 409 and "UID" in str(exc)):
                self._done(job, "gone", start, loop)  # the claim is gone or re-created: nothing to report
                return
            job.attempts += 1
            self.last_error = f"claim {job.namespace}/{job.name}: {exc}"
            if code == 403 and not self._forbidden_hint:
                self._forbidden_hint = True
                log.error(
                    "writing claim status is forbidden (%s): the agent needs patch on resourceclaims/status and, "
                    "on Kubernetes 1.36+, associated-node:patch on resourceclaims/driver for %s (see docs/dra.md)",
                    exc,
                    self._driver,
                )
            # 409: another writer raced us; 403: RBAC may be fixed meanwhile; the rest: a busy server
            if (code in _TRANSIENT or code in (403, 409)) and job.attempts < self._max_attempts:
                delay = min(self._retry_max, self._retry_base * 2 ** (job.attempts - 1))
                job.due = loop.time() + delay
                self._count("retry", loop.time() - start)
                log.warning("status of claim %s/%s not written (%s); retrying in %.1f s", job.namespace, job.name, exc, delay)
                return
            log.error("status of claim %s/%s not written: %s", job.namespace, job.name, exc)
            self._done(job, "failed", start, loop)
            return
        if entries:
            self._written[job.uid] = entries
        else:
            self._written.pop(job.uid, None)
        self._done(job, "ok", start, loop)

    def _done(self, job: _Want, result: str, start: float, loop: asyncio.AbstractEventLoop) -> None:
        if result not in ("ok", "unchanged"):
            self._written.pop(job.uid, None)
        if self._want.get(job.uid) is job:
            del self._want[job.uid]
        self._count(result, loop.time() - start)


# --- the driver's side ----------------------------------------------------------------------------------


class ClaimStatus:
    """What the driver reports: every prepared claim's entries, kept true as CPUs come and go."""

    def __init__(
        self,
        writer: StatusWriter,
        *,
        node_of: Mapping[int, int],
        online: CPUSet,
        driver: str = DRIVER,
        now: Callable[[], str] = _now,
    ) -> None:
        self.writer = writer
        self._node_of = dict(node_of)
        self._online = online
        self._driver = driver
        self._now = now
        self._claims: dict[str, PreparedClaim] = {}

    def entries(self, claim: PreparedClaim) -> list[Entry]:
        return device_statuses(claim, node_of=self._node_of, online=self._online, driver=self._driver, now=self._now())

    def prepared(self, claim: PreparedClaim, *, restored: bool = False) -> None:
        """The claim is prepared (or restored from the checkpoint, or failed to restore)."""
        if not claim.devices:
            return
        self._claims[claim.uid] = claim
        self.writer.submit(claim.uid, claim.namespace, claim.name, functools.partial(self.entries, claim), adopt=restored)

    def unprepared(self, claim: PreparedClaim) -> None:
        """The claim is released: remove our entries."""
        self._claims.pop(claim.uid, None)
        if claim.devices:
            self.writer.submit(claim.uid, claim.namespace, claim.name, [])

    def follow(self, online: CPUSet, node_of: Mapping[int, int]) -> list[str]:
        """The machine changed: re-report every claim whose offline CPUs changed; their UIDs."""
        before = self._online
        self._online = online
        self._node_of.update(node_of)
        changed = []
        for uid, claim in self._claims.items():
            if claim.cpus - before != claim.cpus - online:
                changed.append(uid)
                self.writer.submit(uid, claim.namespace, claim.name, functools.partial(self.entries, claim))
        return changed


def kube_claim_status(
    kube: Any, *, node_of: Mapping[int, int], online: CPUSet, observe: ObserveFn | None = None, driver: str = DRIVER
) -> ClaimStatus:
    """A ``ClaimStatus`` writing through ``kube`` (a ``topodra.kube.client.KubeClient``) with
    server-side apply as field manager ``driver``, forced: the driver is the authority on its own
    devices' entries. Run ``.writer.run(stop)`` as a task."""
    from topodra.kube.client import RESOURCE_CLAIMS

    async def apply(namespace: str, name: str, body: dict[str, Any]) -> Mapping[str, Any]:
        out: Mapping[str, Any] = await kube.apply(RESOURCE_CLAIMS, body, field_manager=driver, force=True, status=True)
        return out

    async def get(namespace: str, name: str) -> Mapping[str, Any]:
        out: Mapping[str, Any] = await kube.get(RESOURCE_CLAIMS, name, namespace)
        return out

    writer = StatusWriter(apply, get=get, observe=observe, driver=driver)
    return ClaimStatus(writer, node_of=node_of, online=online, driver=driver)
