"""The embedded runtime's container store: pods, containers, their tasks and who hears of changes.

A container's spec and its running task are kept apart, as containerd does: ``tasks`` holds
the (cpus, mems) each task runs with (its cgroup, optionally written to cgroup v2 files under
``cgroup_root``), and an update of a container whose task is ``starting`` reaches its spec only
(``lost_updates``). Every change of a container's cpus/mems goes to the subscribers and
``on_change``.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Iterable

from topodra.cpuset import CPUSet
from topodra.embedded.runtime_types import ContainerChange, RuntimeJournal, RuntimeSettings, RuntimeUsageError
from topodra.nri.merge import apply_update, cpus_and_mems
from topodra.nri.types import Container, ContainerState, ContainerUpdate, Pod

__all__ = ["ContainerStore"]


class ContainerStore:
    """Pods, containers, tasks and start-window records; reports every cpus/mems change."""

    def __init__(self, settings: RuntimeSettings, journal: RuntimeJournal) -> None:
        self._settings = settings
        self._journal = journal
        cgroup_root = settings.cgroup_root
        if cgroup_root is not None:  # a cgroup v2 hierarchy
            cgroup_root.mkdir(parents=True, exist_ok=True)
            (cgroup_root / "cgroup.controllers").write_text("cpuset cpu io memory pids\n")
        #: pod sandbox id -> pod, and container id -> container (its spec)
        self.pods_by_id: dict[str, Pod] = {}
        self.containers_by_id: dict[str, Container] = {}
        #: container id -> (cpus, mems) its task runs with (the cgroup), once the task exists
        self._task: dict[str, tuple[CPUSet | None, CPUSet | None]] = {}
        #: task created, not yet running: updates reach the spec only
        self.starting: set[str] = set()
        #: updates stored in a starting container's spec that its task never got
        self.lost_updates: list[ContainerUpdate] = []
        #: seconds from the end of a start whose update was lost to the next update of its task
        self.repair_delays: list[float] = []
        self._unrepaired: dict[str, float] = {}  # container -> when its start ended (monotonic)
        self._subscribers: list[asyncio.Queue[ContainerChange]] = []

    def pods(self) -> list[Pod]:
        return list(self.pods_by_id.values())

    def containers(self) -> list[Container]:
        return list(self.containers_by_id.values())

    def pod(self, pod_id: str) -> Pod:
        try:
            return self.pods_by_id[pod_id]
        except KeyError:
            raise RuntimeUsageError(f"no pod sandbox {pod_id!r}") from None

    def container(self, container_id: str) -> Container:
        try:
            return self.containers_by_id[container_id]
        except KeyError:
            raise RuntimeUsageError(f"no container {container_id!r}") from None

    def subscribe(self) -> asyncio.Queue[ContainerChange]:
        """A queue that receives every later ``ContainerChange``."""
        queue: asyncio.Queue[ContainerChange] = asyncio.Queue()
        self._subscribers.append(queue)
        return queue

    @property
    def unrepaired(self) -> frozenset[str]:
        """Running containers whose task kept a stale cpuset from their start and got no update since."""
        return frozenset(self._unrepaired)

    def applied(self, container_id: str) -> tuple[CPUSet | None, CPUSet | None] | None:
        """The (cpus, mems) the container's task runs with; None before its task exists."""
        return self._task.get(container_id)

    def set_running(self, ctr: Container) -> None:
        """The started task runs (the state change moves no CPU: no notification); a task that
        runs on another cpuset than the spec's stays unrepaired until its next update."""
        self.containers_by_id[ctr.id] = ctr
        if ctr.id in self._task and cpus_and_mems(ctr) != self._task[ctr.id]:
            self._unrepaired[ctr.id] = time.monotonic()  # the task runs on a stale cpuset

    def set_task(self, ctr: Container) -> None:
        """The task (its cgroup) takes the container's current cpus and mems."""
        values = cpus_and_mems(ctr)
        self._task[ctr.id] = values
        ended = self._unrepaired.pop(ctr.id, None)
        if ended is not None:
            self.repair_delays.append(time.monotonic() - ended)
        cgroup_root = self._settings.cgroup_root
        if cgroup_root is None or not ctr.cgroups_path:
            return
        directory = cgroup_root / ctr.cgroups_path.lstrip("/")
        directory.mkdir(parents=True, exist_ok=True)
        for name, value in zip(("cpuset.cpus", "cpuset.mems"), values, strict=True):
            (directory / name).write_text(f"{value or ''}\n")

    def drop_task(self, ctr: Container) -> None:
        self._task.pop(ctr.id, None)
        self._unrepaired.pop(ctr.id, None)
        cgroup_root = self._settings.cgroup_root
        if cgroup_root is None or not ctr.cgroups_path:
            return
        directory = cgroup_root / ctr.cgroups_path.lstrip("/")
        for name in ("cpuset.cpus", "cpuset.mems"):
            with contextlib.suppress(FileNotFoundError):
                (directory / name).unlink()
        with contextlib.suppress(OSError):
            directory.rmdir()

    def set_container(self, new: Container, *, source: str, plugin: str | None) -> None:
        old = self.containers_by_id.get(new.id)
        self.containers_by_id[new.id] = new
        if new.id in self._task:
            if new.id in self.starting:
                if cpus_and_mems(new) != self._task[new.id]:
                    self._journal.note(
                        f"container {new.id} is starting: update stored in its spec, not applied to its task",
                        logging.WARNING,
                    )
                    self.lost_updates.append(ContainerUpdate(new.id, cpus=new.cpus, mems=new.mems))
            elif new.state == ContainerState.RUNNING:
                self.set_task(new)
        before = cpus_and_mems(old) if old is not None else (None, None)
        after = cpus_and_mems(new)
        if before != after:
            change = ContainerChange(new.id, after[0], after[1], before[0], before[1], source, plugin)
            for queue in self._subscribers:
                queue.put_nowait(change)
            if self._settings.on_change is not None:
                self._settings.on_change(change)

    def check_sets(self, cpus: CPUSet | None, mems: CPUSet | None) -> str | None:
        online_cpus, online_mems = self._settings.online_cpus, self._settings.online_mems
        if cpus is not None and online_cpus is not None and not cpus <= online_cpus:
            return f"cpuset.cpus {cpus}: CPUs {cpus - online_cpus} are not online ({online_cpus})"
        if mems is not None and online_mems is not None and not mems <= online_mems:
            return f"cpuset.mems {mems}: nodes {mems - online_mems} are not online ({online_mems})"
        return None

    def apply_updates(
        self, updates: Iterable[ContainerUpdate], *, source: str, plugin: str | None
    ) -> list[ContainerUpdate]:
        """Apply updates to stored containers; returns the failed ones (ignore_failure ones excluded)."""
        failed: list[ContainerUpdate] = []
        for update in updates:
            ctr = self.containers_by_id.get(update.container_id)
            problem = None
            if ctr is None:
                problem = "no such container"
            elif ctr.state == ContainerState.STOPPED:
                problem = f"container {ctr.id} is not running (stopped)"
            elif update.container_id in self._settings.fail_updates:
                problem = "update failed (fail_updates)"
            else:
                problem = self.check_sets(update.cpus, update.mems)
            if problem is not None:
                self._journal.note(f"failed to update container {update.container_id}: {problem}", logging.WARNING)
                if not update.ignore_failure:
                    failed.append(update)
                continue
            assert ctr is not None
            self.set_container(apply_update(ctr, update), source=source, plugin=plugin)
        return failed
