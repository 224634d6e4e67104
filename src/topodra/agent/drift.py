"""What a container's cgroup really holds, and repairing it when it is not what the agent decided.

The runtime can store an update without applying it: containerd writes an
update that arrives while a container is starting into the container's spec
but never into the starting task, and Synchronize then reports the spec. So
the agent checks the kernel's view: it reads ``cpuset.cpus`` and
``cpuset.mems`` from the container's cgroup and pushes its assignment again
when they differ.

Finding the cgroup (host root ``root``, normally ``/sys/fs/cgroup``):

- from the NRI container's ``linux.cgroups_path``, either a cgroupfs path
  (``/kubepods/burstable/pod<uid>/<id>``) or a systemd one
  (``kubepods-burstable-pod<uid>.slice:cri-containerd:<id>``, which lives at
  ``kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod<uid>.slice/cri-containerd-<id>.scope``);
- or, without one, from ``/proc/<pid>/cgroup`` of the container's process;
- cgroup v2 (``root/cgroup.controllers`` exists) keeps the files in that
  directory, v1 under the ``cpuset`` hierarchy (``root/cpuset/...``).

Reading is plain file I/O: the checker runs it in a worker thread, away from
the NRI event path.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from topodra.cpuset import CPUSet
from topodra.nri.types import ContainerUpdate
from topodra.policy.api import Assignment

__all__ = [
    "AppliedCpuset",
    "CgroupReader",
    "DriftChecker",
    "DriftSubject",
    "cgroup_dir",
    "parse_proc_cgroup",
    "systemd_path",
]

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class AppliedCpuset:
    """What a cgroup holds: ``cpus``/``mems`` empty when the file is empty (inherits the parent's)."""

    cpus: CPUSet
    mems: CPUSet

    def differs(self, want: Assignment) -> bool:
        """True when the kernel does not run the container where the agent decided."""
        if self.cpus != want.cpus:
            return True
        return bool(want.mems) and self.mems != want.mems


def systemd_path(cgroups_path: str) -> str:
    """``slice:prefix:name`` (the systemd cgroup driver's form) as a path under the cgroup root."""
    parent, prefix, name = cgroups_path.split(":", 2)
    parts: list[str] = []
    if parent and parent != "-.slice":
        if not parent.endswith(".slice"):
            raise ValueError(f"systemd cgroup parent {parent!r} is not a slice")
        stem = parent.removesuffix(".slice")
        pieces = stem.split("-")
        parts = ["-".join(pieces[: i + 1]) + ".slice" for i in range(len(pieces))]
    unit = name if name.endswith((".scope", ".slice")) else f"{prefix}-{name}.scope" if prefix else f"{name}.scope"
    return "/".join([*parts, unit])


def parse_proc_cgroup(text: str) -> str | None:
    """The cpuset cgroup path from a ``/proc/<pid>/cgroup`` file (v1 ``cpuset`` line, else v2 ``0::``)."""
    unified = None
    for line in text.splitlines():
        hid, _, rest = line.partition(":")
        controllers, _, path = rest.partition(":")
        if "cpuset" in controllers.split(","):
            return path
        if hid == "0" and controllers == "":
            unified = path
    return unified


def cgroup_dir(
    root: Path, cgroups_path: str = "", pid: int = 0, proc_root: Path | None = None, container_id: str = ""
) -> Path | None:
    """The directory holding the container's ``cpuset.cpus``; None when it cannot be told.

    Found through the pid, the path must name ``container_id`` (runtimes name the
    container's cgroup after it): a recycled pid never points at another cgroup.
    """
    v2 = (root / "cgroup.controllers").exists()
    base = root if v2 else root / "cpuset"
    if cgroups_path:
        try:
            rel = systemd_path(cgroups_path) if ":" in cgroups_path else cgroups_path
        except ValueError:
            return None
        return base / rel.lstrip("/")
    if pid > 0 and proc_root is not None:
        try:
            text = (proc_root / str(pid) / "cgroup").read_text()
        except OSError:
            return None
        rel2 = parse_proc_cgroup(text)
        if rel2 is None or (container_id and container_id not in rel2):
            return None
        return base / rel2.lstrip("/")
    return None


class CgroupReader:
    """Reads containers' applied cpusets under one cgroup root."""

    def __init__(self, root: Path, proc_root: Path | None = None) -> None:
        self.root = root
        self.proc_root = proc_root

    @property
    def available(self) -> bool:
        """The cgroup file system is there (v2 root, or a v1 cpuset hierarchy)."""
        return (self.root / "cgroup.controllers").exists() or (self.root / "cpuset").is_dir()

    def read(self, container_id: str, cgroups_path: str = "", pid: int = 0) -> AppliedCpuset | None:
        """The container's cgroup values; None if it has no cgroup (not started, gone, unknown)."""
        directory = cgroup_dir(self.root, cgroups_path, pid, self.proc_root, container_id)
        if directory is None:
            return None
        try:
            cpus = (directory / "cpuset.cpus").read_text().strip()
            mems = (directory / "cpuset.mems").read_text().strip()
        except OSError:
            return None
        try:
            return AppliedCpuset(CPUSet.parse(cpus), CPUSet.parse(mems))
        except ValueError:
            log.warning("unreadable cpuset in %s: cpus %r mems %r", directory, cpus, mems)
            return None


class DriftSubject(Protocol):
    """What the checker asks of the agent about its containers."""

    def assignment(self, container_id: str) -> Assignment | None:
        """The container's current assignment; None: not ours (any more)."""

    def cgroup_of(self, container_id: str) -> tuple[str, int] | None:
        """(cgroups_path, pid) of a container whose cgroup can be checked; None: not tracked, or
        its task is not running yet."""

    def container_ids(self) -> Iterable[str]:
        """Every container a full pass checks."""

    def awaits_push(self, container_id: str) -> bool:
        """Its new assignment is decided but not sent yet: the cgroup cannot hold it."""

    async def settled(self) -> None:
        """Until the pending pushes are done (or a short while)."""

    def repair(self, container_ids: list[str]) -> None:
        """These drifted (counted once here): send their assignments again."""


class DriftChecker:
    """Compares cgroups with the agent's assignments and hands the differences to
    ``subject.repair``. ``check`` runs once; ``run`` every ``interval`` seconds, and
    ``check_soon`` after a container started.
    """

    def __init__(self, reader: CgroupReader, subject: DriftSubject, *, interval: float = 30.0) -> None:
        self.reader = reader
        self.subject = subject
        self.interval = interval
        self._soon: set[str] = set()
        self._wake = asyncio.Event()
        self._serial = asyncio.Lock()
        self.checks = 0
        self.drifts = 0

    @property
    def pending(self) -> frozenset[str]:
        """The containers to check on the next wake-up."""
        return frozenset(self._soon)

    def check_soon(self, container_ids: Iterable[str]) -> None:
        """Check these containers as soon as the pending pushes are done."""
        self._soon.update(container_ids)
        if self._soon:
            self._wake.set()

    async def check(self, container_ids: Iterable[str]) -> list[str]:
        """One pass; returns the drifted containers (already handed to ``repair``)."""
        async with self._serial:  # one pass at a time: a drift is found and repaired once
            return await self._check(list(container_ids))

    async def _check(self, container_ids: list[str]) -> list[str]:
        subject = self.subject
        await subject.settled()
        where: dict[str, tuple[str, int]] = {}
        for cid in container_ids:
            loc = subject.cgroup_of(cid)
            if loc is not None:
                where[cid] = loc
        if not where:
            return []
        decided = {cid: subject.assignment(cid) for cid in where}
        applied = await asyncio.to_thread(self._read_all, where)
        drifted: list[str] = []
        for cid, got in applied.items():
            want = subject.assignment(cid)  # read after the I/O: the newest decision
            if want is None or got is None or not got.differs(want):
                continue
            if subject.cgroup_of(cid) is None:
                continue
            if subject.awaits_push(cid):
                continue  # decided, its push waiting for the claim's checkpoint: the cgroup cannot hold it yet
            if want != decided[cid]:
                self.check_soon([cid])  # decided anew during the read: checked again after its push
                continue
            log.warning(
                "container %s runs on cpus %s mems %s, assigned %s / %s: repairing",
                cid, got.cpus or "(parent's)", got.mems or "(parent's)", want.cpus, want.mems or "-",
            )
            drifted.append(cid)
        self.checks += 1
        if drifted:
            self.drifts += len(drifted)
            subject.repair(drifted)
        return drifted

    async def unapplied(self, updates: list[ContainerUpdate]) -> tuple[list[str], list[str]]:
        """After a rejected call: (ids to send again, ids whose cgroup confirms the update).

        Not confirmed by its cgroup: sent again. A started container whose cgroup
        is gone (its task exited; the StopContainer event is still to come): not.
        Without a readable cgroup hierarchy nothing can be confirmed: all again.
        """
        if not self.reader.available:
            return [u.container_id for u in updates], []
        where: dict[str, tuple[str, int]] = {}
        retry: list[str] = []
        confirmed: list[str] = []
        for u in updates:
            loc = self.subject.cgroup_of(u.container_id)
            if loc is None:
                retry.append(u.container_id)  # still starting: its cgroup says nothing yet
            else:
                where[u.container_id] = loc
        applied = await asyncio.to_thread(self._read_all, where) if where else {}
        for u in updates:
            if u.container_id not in where:
                continue
            got = applied.get(u.container_id)
            if got is None:
                log.info("container %s has no cgroup any more: not sending its update again", u.container_id)
            elif (u.cpus is not None and got.cpus != u.cpus) or (u.mems is not None and got.mems != u.mems):
                retry.append(u.container_id)
            else:
                confirmed.append(u.container_id)
        return retry, confirmed

    def _read_all(self, where: dict[str, tuple[str, int]]) -> dict[str, AppliedCpuset | None]:
        return {cid: self.reader.read(cid, path, pid) for cid, (path, pid) in where.items()}

    async def run(self, stop: asyncio.Event) -> None:
        loop = asyncio.get_running_loop()
        next_full = loop.time() + self.interval
        while not stop.is_set():
            timeout = max(0.0, next_full - loop.time())
            waker = asyncio.ensure_future(self._wake.wait())
            stopper = asyncio.ensure_future(stop.wait())
            try:
                await asyncio.wait({waker, stopper}, timeout=timeout, return_when=asyncio.FIRST_COMPLETED)
            finally:
                waker.cancel()
                stopper.cancel()
            if stop.is_set():
                return
            self._wake.clear()
            if loop.time() >= next_full:
                ids = set(self.subject.container_ids())
                next_full = loop.time() + self.interval
            else:
                ids = set()
            ids |= self._soon
            self._soon.clear()
            try:
                await self.check(sorted(ids))
            except Exception:  # never let a bad read end the checker
                log.exception("cpuset drift check failed")
