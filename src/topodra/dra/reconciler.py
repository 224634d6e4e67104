"""Keeps this node's ``native.cpu`` ResourceSlices published, whatever happens to them.

The kubelet deletes every node-local slice when it starts and 30 s after a
driver goes away, so publishing once is not enough. The reconciler lists the
slices of its node and driver, makes them equal to ``build_slices`` (create
the missing, update the changed, delete the stale, first), then watches and
re-syncs whenever a slice is deleted or drifts from what it published.

Pool generation, as the upstream kubelet plugin helper keeps it: kept when at most
one existing slice changes and none is created or removed (only that slice is
written: consumers see the pool complete throughout, each device in one slice),
bumped otherwise, every slice rewritten (a wiped slice counts), so consumers never
mix slices of two states; it never goes down, even after every slice was wiped.

Homes (``homes``: the node's full device list, ``slices.Homes``): every device
stays in its home slice, a withdrawn one leaving a hole, so withdrawing a core
after an exclusive grant changes one slice, not every slice after it. A list
that does not fit the homes (a device without one) re-homes the pool: a full
rewrite at the next generation. Without ``homes`` each list is chunked afresh.

A new device list alone (``set_devices``: the agent withdrawing exclusive CPUs
after every grant) takes the fast path: the slices as this reconciler last
wrote them are the base, with no Node read and no LIST; a conflict or a
missing slice falls back to a full sync. New lists are written at most once per
``publish_delay`` (the first after a quiet spell at once), so a burst of them (one
per exclusive grant) gives two writes, not one each; ``wait_written`` waits until
every list set so far has gone out.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from collections.abc import Callable, Generator, Mapping, Sequence
from dataclasses import dataclass, field
from operator import is_
from typing import Any, Final, TypeVar

from topodra.dra.devices import DRIVER, Device
from topodra.dra.partitions import counter_set_chunks, counter_sets
from topodra.dra.slices import (
    Homes,
    check_pool,
    chunk_devices,
    counter_slice_object,
    encode_slice,
    event_head,
    owner_references,
    read_answer,
    same_spec,
    slice_name,
    slice_object,
)
from topodra.kube.client import NODES, RESOURCE_SLICES, KubeClient
from topodra.kube.errors import ApiError

__all__ = ["SliceReconciler", "SyncReport"]

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class SyncReport:
    generation: int
    created: tuple[str, ...] = ()
    updated: tuple[str, ...] = ()
    deleted: tuple[str, ...] = ()
    unchanged: tuple[str, ...] = field(default=())

    @property
    def changed(self) -> bool:
        return bool(self.created or self.updated or self.deleted)


def _same_devices(a: Sequence[Device], b: Sequence[Device]) -> bool:
    """The same device objects in the same order (their API form is cached on them)."""
    return len(a) == len(b) and all(map(is_, a, b))


def _same(existing: Mapping[str, Any], desired: Mapping[str, Any]) -> bool:
    return same_spec(existing.get("spec"), desired.get("spec")) and (existing.get("metadata") or {}).get(
        "ownerReferences"
    ) == desired["metadata"].get("ownerReferences")


_T = TypeVar("_T")


async def _stepped(steps: Generator[None, None, _T]) -> _T:
    """A generator's result, the event loop free after each of its steps."""
    while True:
        try:
            next(steps)
        except StopIteration as done:
            result: _T = done.value
            return result
        await asyncio.sleep(0)


async def _read_answer(answer: str, sent: Mapping[str, Any], devices: Sequence[Device]) -> dict[str, Any] | None:
    """``slices.read_answer`` with the event loop free between its steps (and before the first:
    the answer's arrival is a step of its own)."""
    await asyncio.sleep(0)
    return await _stepped(read_answer(answer, sent, devices))


def _decoded(text: str, what: str) -> dict[str, Any]:
    try:
        obj = json.loads(text)
    except ValueError as exc:
        raise ApiError(500, "InternalError", f"the API server's {what} is not JSON: {exc}") from exc
    if not isinstance(obj, dict):
        raise ApiError(500, "InternalError", f"the API server's {what} is not a JSON object")
    return obj


async def _end(box: list[asyncio.Task[None] | None]) -> None:
    """Stop the watch task in ``box`` (saying why it ended, if it did)."""
    task, box[0] = box[0], None
    if task is None:
        return
    if task.done() and not task.cancelled() and task.exception() is not None:
        log.info("slice watch ended: %s", task.exception())
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError, ApiError):
        await task


#: How a real API server without DRAListTypeAttributes answers a list-typed attribute: it drops
#: the list and then finds the attribute without a value (topodra never publishes one itself).
_LIST_DROPPED: Final = 'Invalid value: "": exactly one value must be specified'


#: A refusal naming more fields than this is told by its count and its first field.
_MAX_CAUSES: Final = 3


def _brief(exc: ApiError) -> str:
    """The refusal in one short line: the API server names every field it refuses, and a slice
    of 128 devices refused for one attribute makes a line of 13 KB at every retry."""
    causes = exc.causes
    if len(causes) <= _MAX_CAUSES:
        return str(exc)
    head = exc.message.split(": [", 1)[0] if ": [" in exc.message else f"{exc.kind} {exc.name!r} is invalid"
    return f"{head}: {len(causes)} field errors, the first: {causes[0]}"


def _hint(exc: ApiError) -> str:
    """What to do about a refusal whose cause the message alone does not name."""
    if exc.code == 422 and _LIST_DROPPED in str(exc):
        return (
            "; the API server dropped a list-typed attribute: turn the DRAListTypeAttributes gate on "
            "or set devices.listAttributes: false"
        )
    return ""


class SliceReconciler:
    """Publishes ``devices`` as the node's pool and keeps it that way (``run()``)."""

    def __init__(
        self,
        client: KubeClient,
        node_name: str,
        devices: Sequence[Device],
        *,
        driver: str = DRIVER,
        resync_delay: float = 0.1,
        max_backoff: float = 30.0,
        resync_period: float = 600.0,
        publish_delay: float = 0.0,
        homes: Sequence[Device] | Callable[[], Sequence[Device]] | None = None,
    ) -> None:
        """``publish_delay``: at most one write of a new device list (``set_devices``) per that
        many seconds: the first change after a quiet spell is written at once, the ones after it
        within the delay together at its end; drift and the first sync do not wait.
        ``homes``: the full device list each device's slice is computed from (a callable is
        called at every sync; return the same list object while it has not changed, the
        homes are recomputed only when it is a new one)."""
        self._client = client
        self._homes_src = homes
        self._homes_seen: Sequence[Device] | None = None  # the homes list the layout was computed from
        self._layout: Homes | None = None
        #: times a device list did not fit its homes (the pool re-homed)
        self.rehomed = 0
        self.node_name = node_name
        self._devices: list[Device] | Callable[[], Sequence[Device]] = list(devices)
        self._driver = driver
        self._publish_delay = publish_delay
        self._requested = 0  # set_devices calls so far
        self._written = 0  # of those, how many the last successful sync included
        self._progress = asyncio.Event()  # pulsed after every successful sync
        self._last_write = float("-inf")  # loop time the last sync started
        self._resync_delay = resync_delay
        self._max_backoff = max_backoff
        self._resync_period = resync_period
        self._generation = 0
        self._node_uid: str | None = None
        self._desired: dict[str, dict[str, Any]] = {}
        self._list_rv = ""
        self._wrote: dict[str, str] = {}  # slice name -> resourceVersion of this reconciler's last write
        self._idle = asyncio.Event()  # set while no sync is under way
        self._idle.set()
        self._published: dict[str, dict[str, Any]] | None = None  # slices as last written (fast path base)
        #: slice name -> the devices of its last build and their API dicts (reused while unchanged)
        self._built: dict[str, tuple[list[Device], list[dict[str, Any]]]] = {}
        self._wake = asyncio.Event()
        self.synced = asyncio.Event()
        #: set while the last pass failed (``last_error`` says why), cleared by the next success
        self.failed = asyncio.Event()
        self.syncs = 0
        #: watch events recognised as this reconciler's own writes (skipped, not compared)
        self.own_events = 0
        self.last_error = ""
        #: slices the API server stored differently from what was sent (see sync())
        self.dropped_fields: set[str] = set()

    @property
    def generation(self) -> int:
        return self._generation

    async def _chunks(self, devices: Sequence[Device]) -> tuple[list[list[Device]], bool]:
        """The device list in slices: in their homes when there are homes and the list fits (placed
        in pieces, the loop free between them); and whether it was
        placed so (``Homes.place`` refuses a device listed twice: no need to look again)."""
        if self._homes_src is None:
            return chunk_devices(devices), False
        src = self._homes_src() if callable(self._homes_src) else self._homes_src
        if src is not self._homes_seen or self._layout is None:
            self._homes_seen = src
            homes = Homes(src)
            if homes != self._layout:
                self._layout = homes
            await asyncio.sleep(0)
        chunks = await _stepped(self._layout.placing(devices))
        if chunks is None:
            # A device without a home (hotplug, a new device model) or a slice over its limit:
            # re-home every device from this list (the pool moves to the next generation).
            self.rehomed += 1
            log.info("pool %s: the device list does not fit its slices, re-homing every device", self.node_name)
            self._layout = Homes(devices)
            chunks = self._layout.place(devices)
        if chunks is None:
            return chunk_devices(devices), False  # (a duplicate: check_pool says so)
        return chunks, True

    def set_devices(self, devices: Sequence[Device] | Callable[[], Sequence[Device]]) -> None:
        """Publish a new device list (CPU hotplug, config change) at the next sync; a callable is
        called at that sync, so the list is built once per write, from the latest state."""
        self._devices = devices if callable(devices) else list(devices)
        self._requested += 1
        self._wake.set()

    def devices(self) -> list[Device]:
        """The device list the next sync publishes."""
        if callable(self._devices):
            return list(self._devices())
        return self._devices

    async def wait_written(self, timeout: float | None = None) -> None:
        """Until a successful sync has included every ``set_devices`` so far (the publish delay
        included)."""

        async def _wait() -> None:
            while self._written < self._requested or not self.synced.is_set():
                await self._progress.wait()

        await asyncio.wait_for(_wait(), timeout)

    async def published_devices(self) -> list[dict[str, Any]]:
        """The devices this node's pool has on the API server now (one LIST; ``ApiError``)."""
        items, _ = await self._client.list(RESOURCE_SLICES, fields=self._fields())
        out: list[dict[str, Any]] = []
        for s in items:
            spec = s.get("spec") or {}
            if spec.get("nodeName") == self.node_name and (spec.get("pool") or {}).get("name") == self.node_name:
                out.extend(d for d in spec.get("devices") or () if isinstance(d, dict))
        return out

    def _fields(self) -> dict[str, str]:
        return {"spec.nodeName": self.node_name, "spec.driver": self._driver}

    async def _owner_uid(self) -> str | None:
        """The Node's current UID (read every sync: a re-created Node has a new one)."""
        try:
            node = await self._client.get(NODES, self.node_name)
            self._node_uid = node["metadata"]["uid"]
        except ApiError as exc:
            if not exc.is_not_found:
                raise
            if self._node_uid is not None or self.syncs == 0:
                log.warning("node %s not found; publishing slices without an owner reference", self.node_name)
            self._node_uid = None
        return self._node_uid

    async def sync(self, *, fast: bool = False) -> SyncReport:
        """One pass: make the published slices equal to the desired ones (``fast``: from what this
        reconciler last wrote, without reading the Node or listing; falls back to a full pass)."""
        if fast and self._published is not None:
            try:
                return await self._synced(self._node_uid, dict(self._published), [])
            except ApiError as exc:
                if not (exc.is_not_found or exc.code == 409):
                    raise
                log.info("fast re-publish of pool %s failed (%s): full sync", self.node_name, exc)
        owner = await self._owner_uid()
        existing_list, self._list_rv = await self._client.list(RESOURCE_SLICES, fields=self._fields())
        existing: dict[str, dict[str, Any]] = {}
        stale: list[dict[str, Any]] = []
        for s in existing_list:
            spec = s.get("spec") or {}
            if spec.get("nodeName") != self.node_name or spec.get("driver") != self._driver:
                continue  # a server without field selectors: skip others' slices
            if (spec.get("pool") or {}).get("name") == self.node_name:
                existing[s["metadata"]["name"]] = s
            else:
                stale.append(s)
        return await self._synced(owner, existing, stale)

    async def _synced(
        self, owner: str | None, existing: dict[str, dict[str, Any]], stale: list[dict[str, Any]]
    ) -> SyncReport:
        self._idle.clear()
        try:
            return await self._sync(owner, existing, stale)
        finally:
            self._idle.set()

    async def _sync(
        self, owner: str | None, existing: dict[str, dict[str, Any]], stale: list[dict[str, Any]]
    ) -> SyncReport:
        self._published = None  # until this pass has written everything
        seen_gen = max((int((s["spec"].get("pool") or {}).get("generation", 0)) for s in existing.values()), default=0)
        generation = max(self._generation, seen_gen, 1)
        devices = self.devices()
        await asyncio.sleep(0)  # the device list made (by the caller's callable, if one)
        chunks, placed = await self._chunks(devices)
        if not placed:  # (a list placed in its homes lists no device twice: nothing to scan)
            await asyncio.sleep(0)
            check_pool(self.node_name, devices, generation)
        else:
            check_pool(self.node_name, (), generation)
        await asyncio.sleep(0)  # the device list chunked and checked
        desired = await self._build_slices(chunks, generation, owner)
        listed = {name: chunk for name, (chunk, _) in self._built.items()}
        names = {d["metadata"]["name"] for d in desired}
        stale += [s for name, s in existing.items() if name not in names]
        new = any(d["metadata"]["name"] not in existing for d in desired)
        removed = any(name not in names for name in existing)
        changed = sum(1 for d in desired if (have := existing.get(d["metadata"]["name"])) is not None and not _same(have, d))
        # The upstream helper's rule: one existing slice rewritten in place keeps the generation
        # (the pool stays complete while it is written); anything more is a new generation.
        if (new or removed or changed > 1) and (existing or self._generation or seen_gen):
            generation += 1
            for d in desired:  # the same slices at the next generation (no second build)
                d["spec"]["pool"] = {**d["spec"]["pool"], "generation": generation}
        self._desired = {d["metadata"]["name"]: d for d in desired}
        published: dict[str, dict[str, Any]] = {}
        # The loop is free between building the slices, encoding each and sending it: three short
        # steps, not one long one, for an NRI call that arrives meanwhile.
        await asyncio.sleep(0)

        deleted = await self._delete_stale(stale)
        created: list[str] = []
        updated: list[str] = []
        unchanged: list[str] = []
        for d in desired:
            name = d["metadata"]["name"]
            have = existing.get(name)
            # Encoded from the devices' cached JSON, the answer read device by device with the loop
            # free between steps: the agent's NRI calls wait for no slice write.
            if have is not None and _same(have, d):
                unchanged.append(name)
                published[name] = have
                continue
            if created or updated:
                await asyncio.sleep(0)  # the last answer read, and this slice encoded: two steps
            answer = await self._write_slice(d, have, listed[name])
            (created if have is None else updated).append(name)
            published[name] = await self._stored_slice(d, listed[name], answer)
            # the watch, open across writes, skips this write's event by its resourceVersion
            self._wrote[name] = str((published[name].get("metadata") or {}).get("resourceVersion", ""))
        await asyncio.sleep(0)
        self._generation = generation
        self._published = published
        # The watch resumes after our own writes, so it does not replay them as drift.
        rvs = [int(v) for o in published.values() if str(v := (o.get("metadata") or {}).get("resourceVersion", "")).isdigit()]
        if rvs and (not self._list_rv.isdigit() or max(rvs) > int(self._list_rv)):
            self._list_rv = str(max(rvs))
        self.syncs += 1
        report = SyncReport(generation, tuple(created), tuple(updated), tuple(deleted), tuple(unchanged))
        if report.changed:
            log.info(
                "pool %s generation %d: created %s, updated %s, deleted %s",
                self.node_name, generation, created, updated, deleted,
            )
        return report

    async def _build_slices(self, chunks: list[list[Device]], generation: int, owner: str | None) -> list[dict[str, Any]]:
        """The desired slice objects, one per chunk; kept in ``_built`` with their device dicts.

        A slice whose devices are the same objects as at its last build lists the same device
        dicts (shared, so comparing it with what was published is cheap too); the others are
        built, one per loop step.
        """
        desired: list[dict[str, Any]] = []
        built: dict[str, tuple[list[Device], list[dict[str, Any]]]] = {}
        owner_refs = owner_references(self.node_name, owner)
        counters = counter_set_chunks(counter_sets(d for chunk in chunks for d in chunk))
        for index, chunk in enumerate(chunks):
            name = slice_name(self.node_name, index, self._driver)
            before = self._built.get(name)
            if before is not None and _same_devices(before[0], chunk):
                api = before[1]
            else:
                api = [d.to_api() for d in chunk]
                await asyncio.sleep(0)
            built[name] = (chunk, api)
            desired.append(
                slice_object(
                    self.node_name,
                    index,
                    api,
                    generation=generation,
                    slice_count=len(chunks) + len(counters),
                    owner=owner_refs,
                    driver=self._driver,
                )
            )
        for offset, sets in enumerate(counters):  # after the device slices (see slices._slices)
            index = len(chunks) + offset
            built[slice_name(self.node_name, index, self._driver)] = ([], [])
            desired.append(
                counter_slice_object(
                    self.node_name,
                    index,
                    sets,
                    generation=generation,
                    slice_count=len(chunks) + len(counters),
                    owner=owner_refs,
                    driver=self._driver,
                )
            )
        self._built = built
        return desired

    async def _delete_stale(self, stale: list[dict[str, Any]]) -> list[str]:
        """Delete obsolete slices, each only if it is still what we saw (gone already is fine)."""
        deleted: list[str] = []
        for s in stale:
            meta = s["metadata"]
            try:
                await self._client.delete(RESOURCE_SLICES, meta["name"], uid=meta.get("uid"), resource_version=meta.get("resourceVersion"))
            except ApiError as exc:
                if not exc.is_not_found:
                    raise
            deleted.append(meta["name"])
        return deleted

    async def _write_slice(self, d: dict[str, Any], have: Mapping[str, Any] | None, chunk: list[Device]) -> Any:
        """Create slice ``d`` (``have`` None) or replace ``have`` with it; the server's answer."""
        if have is None:
            encoded = encode_slice(d, chunk)
            await asyncio.sleep(0)
            return await self._client.create_encoded(RESOURCE_SLICES, encoded)
        name = d["metadata"]["name"]
        body = {**d, "metadata": {**d["metadata"], "resourceVersion": have["metadata"]["resourceVersion"]}}
        encoded = encode_slice(body, chunk)
        await asyncio.sleep(0)
        return await self._client.replace_encoded(RESOURCE_SLICES, name, encoded)

    async def _stored_slice(self, d: dict[str, Any], chunk: list[Device], answer: Any) -> dict[str, Any]:
        """What the server stored for the slice ``d`` just written, from its answer."""
        name = d["metadata"]["name"]
        metadata = await _read_answer(answer, d, chunk)
        if metadata is not None:
            # Stored as sent: keep what was sent (its device dicts are shared with the device
            # list) under the server's metadata, not a decoded copy: one copy of the pool
            # in memory, not two (about 10 MiB at 1,024 CPUs).
            return {**d, "metadata": metadata}
        stored = _decoded(answer, f"answer for ResourceSlice {name}")
        # The server dropped or changed fields (a feature gate off, e.g. DRAConsumableCapacity
        # for grouped devices). Say so, and take its version as the published state so the
        # watch does not re-sync forever.
        log.error(
            "API server changed ResourceSlice %s on write (fields dropped by a disabled feature gate?); "
            "devices may not be allocatable as published",
            name,
        )
        self.dropped_fields.add(name)
        self._desired[name] = {**d, "spec": stored.get("spec"), "metadata": {**d["metadata"]}}
        return stored

    def _drifted(self, event_type: str, obj: Mapping[str, Any]) -> bool:
        spec = obj.get("spec") or {}
        if spec.get("nodeName") != self.node_name or spec.get("driver") != self._driver:
            return False
        name = (obj.get("metadata") or {}).get("name", "")
        desired = self._desired.get(name)
        if event_type == "DELETED":
            return desired is not None
        if desired is None:
            return True  # a slice of our node and driver we do not want
        return not _same(obj, desired)

    def _own_write(self, event_type: str, metadata: Mapping[str, Any]) -> bool:
        """An event of this reconciler's last write of that slice, or of an older state."""
        if event_type not in ("ADDED", "MODIFIED"):
            return False
        wrote = self._wrote.get(str(metadata.get("name", "")))
        rv = str(metadata.get("resourceVersion", ""))
        if wrote is None or not rv:
            return False
        return rv == wrote or (rv.isdigit() and wrote.isdigit() and int(rv) <= int(wrote))

    async def _watch_until_drift(self) -> None:
        """Until an event shows drift. The watch stays open across the fast path's writes: the
        events of those writes are skipped on their metadata alone (``slices.event_head``), the
        rest decoded and compared. Re-opened from the last event seen when the server ends it."""
        rv = self._list_rv
        while True:
            async for line in self._client.watch_lines(RESOURCE_SLICES, fields=self._fields(), resource_version=rv):
                # The event of our own write can come before its answer has been read: decide once
                # the sync under way (if any) is done. One event per loop step: a sync's writes
                # come back as a burst (eight 60 KB events for a new generation at 1,024 CPUs).
                await self._idle.wait()
                await asyncio.sleep(0)
                head = event_head(line)
                if head is not None and self._own_write(*head):
                    rv = str(head[1]["resourceVersion"])
                    self.own_events += 1
                    continue
                event = _decoded(line, "ResourceSlice watch event")
                event_type, obj = str(event.get("type", "")), event.get("object") or {}
                if event_type == "ERROR":  # e.g. 410 Gone: our resourceVersion is too old
                    raise ApiError(int(obj.get("code") or 500), str(obj.get("reason", "")), str(obj.get("message", "")))
                metadata = obj.get("metadata") or {}
                rv = str(metadata.get("resourceVersion") or rv)
                if event_type == "BOOKMARK":
                    continue
                if self._own_write(event_type, metadata):
                    self.own_events += 1
                    continue
                if not self._drifted(event_type, obj):
                    continue
                log.info("slice %s %s: re-syncing pool %s", metadata.get("name"), event_type.lower(), self.node_name)
                return
            await asyncio.sleep(0.1)  # the server ended the watch (its timeout): resume where it was

    async def run(self, stop: asyncio.Event | None = None) -> None:
        """Sync, watch, re-sync on drift, ``set_devices`` or every ``resync_period`` s; back off on API errors."""
        stop = stop or asyncio.Event()
        box: list[asyncio.Task[None] | None] = [None]
        try:
            await self._run(stop, box)
        finally:
            await _end(box)

    async def _run(self, stop: asyncio.Event, box: list[asyncio.Task[None] | None]) -> None:
        """``run``'s loop; ``box[0]``: the watch task, kept across fast-path writes. The tasks
        waiting for ``stop`` and for a new device list last across passes (one new task per
        write at most, not two started and cancelled around every write)."""
        stopper = asyncio.create_task(stop.wait())
        wakers: list[asyncio.Task[bool] | None] = [None]
        try:
            await self._passes(stop, stopper, box, wakers)
        finally:
            waiting = [t for t in (stopper, wakers[0]) if t is not None]
            for t in waiting:
                t.cancel()
            for t in waiting:
                with contextlib.suppress(asyncio.CancelledError):
                    await t

    async def _passes(
        self,
        stop: asyncio.Event,
        stopper: asyncio.Task[bool],
        box: list[asyncio.Task[None] | None],
        wakers: list[asyncio.Task[bool] | None],
    ) -> None:
        backoff = 0.5
        fast = False
        raced = False  # the last pass met another writer: one more at once, then the backoff
        while not stop.is_set():
            self._wake.clear()
            requested = self._requested
            self._last_write = asyncio.get_running_loop().time()
            try:
                await self.sync(fast=fast)
                self.synced.set()
                self._written = requested
                self._progress.set()
                self._progress = asyncio.Event()
                self.last_error = ""
                self.failed.clear()
                backoff = 0.5
                raced = False
            except ApiError as exc:
                self.last_error = _brief(exc) + _hint(exc)
                self.failed.set()
                if (exc.is_not_found or exc.code == 409) and not raced:
                    # A slice deleted or changed by someone else between the list and the write
                    # (the kubelet wipes a node's slices one by one): drift, followed at once.
                    raced = True
                    log.info("pool %s changed while it was written (%s): re-syncing", self.node_name, self.last_error)
                    await _end(box)
                    fast = False
                    await asyncio.wait({stopper}, timeout=self._resync_delay)
                    continue
                log.warning("publishing slices for %s failed: %s (retry in %.1fs)", self.node_name, self.last_error, backoff)
                await _end(box)
                fast = False
                await asyncio.wait({stopper}, timeout=backoff)
                backoff = min(backoff * 2, self._max_backoff)
                continue
            watcher = box[0]
            if watcher is None:
                watcher = box[0] = asyncio.create_task(self._watch_until_drift())
            waker = wakers[0]
            if waker is None or waker.done():  # (it fired: the event was cleared above since)
                waker = wakers[0] = asyncio.create_task(self._wake.wait())
            # a periodic full sync as well, like an informer's resync: catches what no event shows
            # (a Node created after the slices, so the owner reference can now be set)
            if not watcher.done():
                await asyncio.wait(
                    {watcher, waker, stopper}, timeout=self._resync_period, return_when=asyncio.FIRST_COMPLETED
                )
            drifted = watcher.done()
            fast = self._wake.is_set() and not drifted
            if not fast:  # a full sync next: it lists, and the watch starts again from that list
                await _end(box)
            # Only a new device list (no drift seen, no periodic resync due): the fast path.
            if fast:
                # At most one write per publish delay: a change after a quiet spell goes out at once,
                # the ones that follow it within the delay together at its end.
                wait = self._last_write + self._publish_delay - asyncio.get_running_loop().time()
                if wait > 0:
                    await asyncio.wait({stopper}, timeout=wait)
            if not stop.is_set() and not self._wake.is_set():
                # Drift seen by the watch: a short pause, so a fight with another writer cannot
                # spin. A new offer (set_devices) waits only the publish delay, above.
                await asyncio.wait({stopper}, timeout=self._resync_delay)
