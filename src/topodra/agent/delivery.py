"""How container changes made outside an NRI event reach the containers, decided per runtime.

A claim prepared or released, a reload, a hotplug correction, a drift repair or the start-window
repair changes running containers while no NRI event is being answered. There are two ways to
deliver such a change:

``unsolicited``
    An unsolicited ``UpdateContainers`` (``agent/pusher.py``): the runtime applies it and keeps
    its own record in step. Safe only where the runtime's NRI adaptation does not hold its lock
    while it applies the update: NRI v0.12.1 and later.

``replies``
    The container's cgroup (``cpuset.cpus``, ``cpuset.mems``) is written at once, as ``runc
    update`` would, and the same update rides in the reply to the next NRI event that can carry
    updates (CreateContainer, UpdateContainer, StopContainer), which brings the runtime's own
    record in step. No request goes from the plugin to the runtime.

Why ``unsolicited`` hangs older runtimes (containerd v2.0 to v2.3, which vendor NRI v0.8 to
v0.12.0): ``Adaptation.updateContainers`` (nri ``pkg/adaptation/adaptation.go``) takes the
adaptation mutex and then calls containerd's ``local.updateFromPlugin`` (containerd
``internal/nri/nri.go``), which takes containerd's local NRI mutex. Every CRI lifecycle call takes
the local mutex first and the adaptation mutex second (``local.CreateContainer`` ->
``Adaptation.CreateContainer``). A CRI call that holds the local mutex when the update takes the
adaptation mutex waits for it for good, and so does the update (containerd#13733, fixed by
containerd/nri#301 in v0.12.1). No ordering on the plugin's side avoids it: the CRI call takes the
local mutex before its event reaches any plugin, so the plugin cannot see it coming, and an
update abandoned by the plugin is still waiting inside the runtime. ``replies`` cannot enter that
knot: updates in an event reply are applied by ``local`` under the mutex it already holds
(``local.CreateContainer`` applies ``response.Update`` itself), and a cgroup write takes no
runtime lock at all.

``auto`` (the default) picks ``unsolicited`` when the runtime's NRI version is known to be
v0.12.1 or later (sent in Configure since v0.12.0, else inferred from the runtime's name and
version: ``nri/version.py``), and ``replies`` otherwise, including when the version is unknown.
CRI-O vendors the same adaptation and gets the same rule.
"""

from __future__ import annotations

import asyncio
import enum
import logging
import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from topodra.agent.drift import cgroup_dir
from topodra.cpuset import CPUSet
from topodra.nri.types import ContainerUpdate
from topodra.nri.version import RuntimeInfo

__all__ = ["CgroupWriter", "Delivery", "DeliveryChoice", "ReplyDelivery", "choose_delivery"]

log = logging.getLogger(__name__)


class Delivery(enum.StrEnum):
    UNSOLICITED = "unsolicited"
    REPLIES = "replies"


@dataclass(frozen=True, slots=True)
class DeliveryChoice:
    """The delivery in use, why, and for which runtime (``/state``, metrics, the start log line)."""

    mode: Delivery
    reason: str
    runtime: str = ""

    def line(self) -> str:
        who = self.runtime or "no runtime yet"
        return f"NRI {who}: changes outside events are delivered by {self._how()} ({self.reason})"

    def _how(self) -> str:
        if self.mode is Delivery.UNSOLICITED:
            return "unsolicited UpdateContainers"
        return "cgroup writes at once and the next event reply"

    def as_dict(self) -> dict[str, str]:
        return {"mode": self.mode.value, "reason": self.reason, "runtime": self.runtime}


def _runtime_name(runtime: RuntimeInfo | None) -> str:
    if runtime is None:
        return ""
    version = runtime.nri_version or "unknown"
    inferred = ", inferred" if runtime.nri_version_inferred else ""
    return f"{runtime.name} {runtime.version} (NRI {version}{inferred})".strip()


def choose_delivery(setting: str, runtime: RuntimeInfo | None) -> DeliveryChoice:
    """The delivery for ``setting`` (``auto``, ``unsolicited`` or ``replies``) on ``runtime``."""
    who = _runtime_name(runtime)
    safe = runtime is not None and runtime.unsolicited_updates_safe
    if setting == Delivery.UNSOLICITED.value:
        if safe:
            return DeliveryChoice(Delivery.UNSOLICITED, "nri.delivery: unsolicited", who)
        return DeliveryChoice(
            Delivery.UNSOLICITED,
            "nri.delivery: unsolicited, although this runtime's NRI can deadlock on them: containerd#13733",
            who,
        )
    if setting == Delivery.REPLIES.value:
        return DeliveryChoice(Delivery.REPLIES, "nri.delivery: replies", who)
    if setting != "auto":
        raise ValueError(f"nri.delivery: must be auto, unsolicited or replies (got {setting!r})")
    if runtime is None:
        return DeliveryChoice(Delivery.REPLIES, "auto: no runtime connected yet", who)
    if safe:
        return DeliveryChoice(Delivery.UNSOLICITED, "auto: NRI v0.12.1 or later applies them without the lock inversion", who)
    if runtime.nri_version is None:
        return DeliveryChoice(Delivery.REPLIES, "auto: NRI version unknown, so unsolicited updates may deadlock", who)
    return DeliveryChoice(
        Delivery.REPLIES, "auto: NRI before v0.12.1 deadlocks on unsolicited updates (containerd#13733)", who
    )


class CgroupWriter:
    """Writes a container's cpuset into its cgroup, the files ``runc update`` writes."""

    def __init__(self, root: Path, proc_root: Path | None = None) -> None:
        self.root = root
        self.proc_root = proc_root

    @property
    def writable(self) -> bool:
        """The cgroup tree is there and not mounted read-only for us."""
        return self.root.is_dir() and os.access(self.root, os.W_OK)

    def write(self, container_id: str, cgroups_path: str, pid: int, cpus: CPUSet, mems: CPUSet | None) -> bool:
        """True once written; False when the container has no cgroup (gone, or not found).

        Refuses an empty cpuset (the kernel would refuse it too, but never ask). Raises OSError
        when the files exist and cannot be written.
        """
        if not cpus:
            raise ValueError(f"refusing an empty cpuset for container {container_id}")
        directory = cgroup_dir(self.root, cgroups_path, pid, self.proc_root, container_id)
        if directory is None or not (directory / "cpuset.cpus").is_file():
            return False
        _write_existing(directory / "cpuset.cpus", str(cpus))
        if mems:
            _write_existing(directory / "cpuset.mems", str(mems))
        return True


def _write_existing(path: Path, text: str) -> None:
    """Write into a file that must exist (a cgroup file is never created by us)."""
    with path.open("r+") as f:
        f.write(text + "\n")
        f.truncate()


#: container id -> (cgroups_path, pid), or None while it has no task to write to
Locate = Callable[[str], "tuple[str, int] | None"]


class ReplyDelivery:
    """The ``replies`` delivery: write each update's cgroup now, carry it in the next event reply.

    ``locate`` finds a container's cgroup (None while it is starting or unknown: the reply and
    the start-window repair deliver it then); ``defer`` queues ids for the next event reply.
    The pusher calls ``send`` as it would call the runtime, with current assignments; what it
    returns is what failed (a cgroup that exists and could not be written) and is retried.
    """

    def __init__(self, writer: CgroupWriter, *, locate: Locate, defer: Callable[[list[str]], None]) -> None:
        self.writer = writer
        self._locate = locate
        self._defer = defer
        self.written = 0
        self.not_found = 0

    async def send(self, updates: list[ContainerUpdate]) -> list[ContainerUpdate]:
        self._defer([u.container_id for u in updates])
        where = [(u, self._locate(u.container_id)) for u in updates]
        located = [(u, loc) for u, loc in where if loc is not None]
        failed, missing = await asyncio.to_thread(self._write_all, located)
        self.not_found += missing + len(where) - len(located)
        self.written += len(located) - missing - len(failed)
        return failed

    def _write_all(self, located: list[tuple[ContainerUpdate, tuple[str, int]]]) -> tuple[list[ContainerUpdate], int]:
        failed: list[ContainerUpdate] = []
        missing = 0
        for u, (path, pid) in located:
            if u.cpus is None:  # an assignment always has cpus; nothing to write otherwise
                continue
            try:
                if not self.writer.write(u.container_id, path, pid, u.cpus, u.mems):
                    missing += 1
            except OSError as exc:
                log.warning("could not write the cgroup cpuset of container %s: %s", u.container_id, exc)
                failed.append(u)
        return failed, missing
