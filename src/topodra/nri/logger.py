"""A plugin that logs every NRI event it receives: a debugging aid for real nodes.

Each event becomes one record (a dict) handed to a sink: the CLI prints them
with rich or as JSON lines. The config text the runtime passes (drop-in file
``NN-logger.conf``) may set, in YAML: ``events`` (names like
``CreateContainer``, a comma list, or ``all``), ``logFile`` (append JSON lines
there, for launched plugins whose stdout is /dev/null), ``addAnnotation`` and
``addEnv`` (add ``logger-pid-<pid>`` under that key to every created container,
which shows adjustments reaching the runtime).
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Iterable, Sequence
from typing import IO, Any

import yaml

from topodra.nri.plugin import Plugin
from topodra.nri.types import (
    ALL_EVENTS,
    Container,
    ContainerAdjustment,
    ContainerUpdate,
    Event,
    LinuxResources,
    Pod,
)
from topodra.nri.version import RuntimeInfo

__all__ = ["EventLogger", "LoggerConfigError", "parse_events"]

Record = dict[str, Any]


class LoggerConfigError(ValueError):
    """Config text the logger cannot use; the message names the key and value."""


def parse_events(value: object) -> frozenset[Event]:
    """``all``, ``"A,B"`` or ``[A, B]`` (rpc or enum names) -> events."""
    if isinstance(value, str):
        items: list[object] = [part for part in value.split(",") if part.strip()]
    elif isinstance(value, list):
        items = list(value)
    else:
        raise LoggerConfigError(f"events: expected a list or a comma-separated string, got {value!r}")
    events: set[Event] = set()
    for item in items:
        if not isinstance(item, str):
            raise LoggerConfigError(f"events: {item!r} is not an event name")
        if item.strip().lower() == "all":
            events |= ALL_EVENTS
            continue
        try:
            events.add(Event.parse(item))
        except ValueError as exc:
            raise LoggerConfigError(f"events: {exc}") from None
    return frozenset(events)


def _set(value: object) -> str | None:
    return None if value is None else str(value)


def _resources(res: LinuxResources | None) -> Record:
    if res is None:
        return {}
    out: Record = {"cpus": _set(res.cpus), "mems": _set(res.mems)}
    for key in ("cpu_shares", "cpu_quota", "cpu_period", "memory_limit"):
        value = getattr(res, key)
        if value is not None:
            out[key] = value
    return {k: v for k, v in out.items() if v is not None}


def _pod(pod: Pod) -> Record:
    return {"pod": f"{pod.namespace}/{pod.name}", "pod_id": pod.id, "pod_uid": pod.uid}


def _container(ctr: Container) -> Record:
    return {"container": ctr.name, "container_id": ctr.id, "state": ctr.state.name, **_resources(ctr.resources)}


def _update(u: ContainerUpdate) -> Record:
    return {"container_id": u.container_id, "cpus": _set(u.cpus), "mems": _set(u.mems)}


class EventLogger(Plugin):
    """Logs every subscribed event; see the module docstring for its config keys."""

    def __init__(
        self,
        sink: Callable[[Record], None],
        *,
        events: Iterable[Event] | None = None,
        add_annotation: str | None = None,
        add_env: str | None = None,
        log_files: bool = True,
    ) -> None:
        """``log_files=False`` ignores ``logFile`` in the runtime's config."""
        self.sink = sink
        self.log_files = log_files
        self.events = frozenset(events) if events is not None else ALL_EVENTS
        self.add_annotation = add_annotation
        self.add_env = add_env
        self._file: IO[str] | None = None

    def _emit(self, event: str, **fields: Any) -> None:
        record: Record = {"event": event, **fields}
        self.sink(record)
        if self._file is not None:
            self._file.write(json.dumps(record, sort_keys=True) + "\n")
            self._file.flush()

    def close(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None

    async def configure(self, config: str, runtime: RuntimeInfo) -> Iterable[Event] | None:
        if config.strip():
            self._apply_config(config)
        self._emit(
            "Configure",
            runtime=runtime.name,
            runtime_version=runtime.version,
            nri_version=str(runtime.nri_version) if runtime.nri_version else "unknown",
            events=sorted(e.rpc for e in self.events),
        )
        return self.events

    def _apply_config(self, text: str) -> None:
        try:
            data = yaml.safe_load(text)
        except yaml.YAMLError as exc:
            raise LoggerConfigError(f"logger config is not YAML: {exc}") from None
        if data is None:
            return
        if not isinstance(data, dict):
            raise LoggerConfigError(f"logger config must be a mapping, got {type(data).__name__}")
        known = {"events", "logFile", "addAnnotation", "addEnv"}
        unknown = sorted(set(data) - known)
        if unknown:
            raise LoggerConfigError(f"logger config: unknown key(s) {', '.join(map(str, unknown))}; known: {', '.join(sorted(known))}")
        if "events" in data:
            self.events = parse_events(data["events"])
        if data.get("addAnnotation") is not None:
            self.add_annotation = str(data["addAnnotation"])
        if data.get("addEnv") is not None:
            self.add_env = str(data["addEnv"])
        if data.get("logFile") and self.log_files:
            self.open_log(str(data["logFile"]))

    def open_log(self, path: str) -> None:
        """Also append every record to ``path`` as a JSON line (an error is logged, not raised)."""
        self.close()
        try:
            self._file = open(os.fspath(path), "a", encoding="utf-8")  # noqa: SIM115 (kept open)
        except OSError as exc:  # keep logging to the sink rather than failing Configure
            self._emit("LogFileError", path=path, error=str(exc))

    async def synchronize(self, pods: Sequence[Pod], containers: Sequence[Container]) -> Sequence[ContainerUpdate] | None:
        self._emit("Synchronize", pods=len(pods), containers=len(containers))
        for ctr in containers:
            self._emit("Synchronize.container", **_container(ctr), pod_id=ctr.pod_sandbox_id)
        return None

    async def run_pod_sandbox(self, pod: Pod) -> None:
        self._emit("RunPodSandbox", **_pod(pod))

    async def stop_pod_sandbox(self, pod: Pod) -> None:
        self._emit("StopPodSandbox", **_pod(pod))

    async def remove_pod_sandbox(self, pod: Pod) -> None:
        self._emit("RemovePodSandbox", **_pod(pod))

    async def update_pod_sandbox(self, pod: Pod, overhead: LinuxResources | None, resources: LinuxResources | None) -> None:
        self._emit("UpdatePodSandbox", **_pod(pod), resources=_resources(resources))

    async def post_update_pod_sandbox(self, pod: Pod) -> None:
        self._emit("PostUpdatePodSandbox", **_pod(pod))

    async def create_container(self, pod: Pod, container: Container) -> ContainerAdjustment | None:
        self._emit("CreateContainer", **_pod(pod), **_container(container))
        if not (self.add_annotation or self.add_env):
            return None
        value = f"logger-pid-{os.getpid()}"
        return ContainerAdjustment(
            annotations={self.add_annotation: value} if self.add_annotation else {},
            env={self.add_env: value} if self.add_env else {},
        )

    async def post_create_container(self, pod: Pod, container: Container) -> None:
        self._emit("PostCreateContainer", **_pod(pod), **_container(container))

    async def start_container(self, pod: Pod, container: Container) -> None:
        self._emit("StartContainer", **_pod(pod), **_container(container))

    async def post_start_container(self, pod: Pod, container: Container) -> None:
        self._emit("PostStartContainer", **_pod(pod), **_container(container))

    async def update_container(
        self, pod: Pod, container: Container, resources: LinuxResources | None
    ) -> Sequence[ContainerUpdate] | None:
        self._emit("UpdateContainer", **_pod(pod), **_container(container), requested=_resources(resources))
        return None

    async def post_update_container(self, pod: Pod, container: Container) -> None:
        self._emit("PostUpdateContainer", **_pod(pod), **_container(container))

    async def stop_container(self, pod: Pod, container: Container) -> Sequence[ContainerUpdate] | None:
        self._emit("StopContainer", **_pod(pod), **_container(container))
        return None

    async def remove_container(self, pod: Pod, container: Container) -> None:
        self._emit("RemoveContainer", **_pod(pod), **_container(container))

    async def validate_container_adjustment(
        self, pod: Pod, container: Container, adjustment: ContainerAdjustment | None, updates: Sequence[ContainerUpdate]
    ) -> str | None:
        adjusted: Record = {}
        if adjustment is not None:
            adjusted = {"cpus": _set(adjustment.cpus), "mems": _set(adjustment.mems), "annotations": dict(adjustment.annotations)}
        self._emit(
            "ValidateContainerAdjustment",
            **_pod(pod),
            **_container(container),
            adjustment=adjusted,
            updates=[_update(u) for u in updates],
        )
        return None
