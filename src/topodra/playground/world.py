"""One simulated node, whole: API store, runtime, kubelet, scheduler and the real agent.

Everything talks the real protocols across real sockets: the agent's NRI
plugin connects to the embedded runtime's unix socket (mux + ttrpc), the
embedded kubelet registers the agent's DRA plugin and calls it over gRPC,
and the agent publishes ResourceSlices and fetches claims over HTTP from the
API server double. The scheduler is the simulator's allocator. Used by
``topodra playground``, the scenario tests and the agent's end-to-end tests.
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import datetime
import tempfile
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from topodra.agent.agent import Agent
from topodra.agent.config import AgentConfig, parse_config
from topodra.cpuset import CPUSet
from topodra.dra.devices import DRIVER, device_class
from topodra.dra.kubeletplugin import KubeletPlugin
from topodra.embedded.apiserver import ApiServer
from topodra.embedded.gpudriver import start_gpu_driver
from topodra.embedded.openapi import strict_decoding_error, unknown_fields
from topodra.embedded.runtime import ContainerChange, EmbeddedRuntime
from topodra.embedded.store import KINDS, Kind, Store
from topodra.gates import LIST_TYPE_ATTRIBUTES, feature_gates
from topodra.kube.errors import ApiError
from topodra.playground.kubelet import EmbeddedKubelet, KubeletError
from topodra.playground.scheduler import EmbeddedScheduler, SchedulingError
from topodra.sim.gpus import GPU_DRIVER
from topodra.topology.model import Topology

__all__ = ["DEFAULT_TOPOLOGY", "ContainerRow", "Playground", "PlaygroundError"]

DEFAULT_TOPOLOGY = "20em64t-hybrid-1p6c2t+2ca4co1t"  # Intel Core i7-1370P: 6 P-cores (HT) + 8 E-cores
NODE_NAME = "playground"

_KIND_BY_NAME: dict[tuple[str, str], Kind] = {(k.api_version, k.kind): k for k in KINDS.values()}


def node_allocatable(topology: Topology, config: AgentConfig) -> dict[str, str]:
    """The node's ``status.allocatable`` as the kubelet reports it: every online CPU but the agent's
    reserved ones, the machine's memory, 110 pods."""
    from topodra.policy import Policy

    reserved = Policy(topology, config.policy).reserved_cpus
    memory = sum(n.memory_bytes for n in topology.nodes.values()) or 64 << 30
    return {"cpu": str(len(topology.online - reserved)), "memory": str(memory), "pods": "110"}


class PlaygroundError(RuntimeError):
    """Something the user asked for failed; the message says what and why."""


@dataclass(frozen=True)
class ContainerRow:
    """One line of the live table."""

    pod: str
    container: str
    qos: str
    claims: str
    cpus: CPUSet
    mems: CPUSet
    core_types: str
    source: str


@dataclass
class StepLog:
    lines: list[str] = field(default_factory=list)

    def add(self, text: str) -> None:
        self.lines.append(text)


def _pod_status(pod: Mapping[str, Any], phase: str, message: str) -> dict[str, Any]:
    """A pod's status as the scheduler and the kubelet leave it (what ``kubectl get pods``
    reads): PodScheduled false with reason Unschedulable for a pending pod; Ready, and each
    container running and ready, for a running one."""
    now = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    status: dict[str, Any] = {**(pod.get("status") or {}), "phase": phase, "message": message}
    status.pop("containerStatuses", None)
    if phase == "Pending":
        status["conditions"] = [
            {"type": "PodScheduled", "status": "False", "reason": "Unschedulable", "message": message, "lastTransitionTime": now}
        ]
    elif phase == "Running":
        status["conditions"] = [
            {"type": t, "status": "True", "lastTransitionTime": now} for t in ("PodScheduled", "Initialized", "ContainersReady", "Ready")
        ]
        status["startTime"] = now
        status["containerStatuses"] = [
            {"name": c.get("name"), "image": c.get("image", ""), "imageID": "", "ready": True, "started": True,
             "restartCount": 0, "state": {"running": {"startedAt": now}}}
            for c in (pod.get("spec") or {}).get("containers") or []
        ]
    else:
        status["conditions"] = [{"type": "Ready", "status": "False", "reason": "PodFailed", "lastTransitionTime": now}]
    return status


class Playground:
    """``async with Playground(...) as pg: await pg.apply(docs)``."""

    def __init__(
        self,
        *,
        topology: Topology,
        model: str = "cpu",
        group_by: str = "numa",
        workdir: Path | None = None,
        agent_overrides: Mapping[str, Any] | None = None,
        nri_version: str = "v0.12.2",
        on_change: Callable[[ContainerChange], None] | None = None,
        agent_process: str | None = None,
        cgroups: bool = False,
        runtime_options: Mapping[str, Any] | None = None,
        gates: Mapping[str, bool] | None = None,
        gpus: bool = False,
    ) -> None:
        """``agent_process``: run the agent as a child process (``python -m topodra agent``) with
        this topology spec (fixture name or ``synthetic:SPEC``), as the crash tests do.
        ``cgroups``: the runtime writes each task's cpuset to cgroup files under the work
        directory's ``host/sys/fs/cgroup``, where the agent (``sysfsRoot: host``) reads them.
        ``runtime_options``: more ``EmbeddedRuntime`` options (``start_delay``, ``fail_updates``...).
        ``gates``: feature gates of the API server and the scheduler (``topodra.gates``; unless
        given, Kubernetes 1.36's defaults); both read ``store.gates``, so changing it there is
        restarting them with other ``--feature-gates`` (the agent sees it at its next start).
        ``gpus``: a second driver on the node, ``gpu.example.com`` (``topodra.sim.gpus``): its
        DeviceClass, its slices (a GPU per PCIe root of the machine) and its kubelet plugin."""
        self.topology = topology
        self.model = model
        self.group_by = group_by
        self._tmp: tempfile.TemporaryDirectory[str] | None = None
        self.workdir = workdir
        self.agent_overrides = dict(agent_overrides or {})
        self.nri_version = nri_version
        self.on_change = on_change
        self.store = Store(gates=feature_gates(gates))
        self.api = ApiServer(self.store)
        self.runtime: EmbeddedRuntime | None = None
        self.agent: Agent | None = None
        self.kubelet: EmbeddedKubelet | None = None
        self.scheduler = EmbeddedScheduler(self.store, NODE_NAME)
        self.gpus = gpus
        self.gpu_plugin: KubeletPlugin | None = None
        self.log = StepLog()
        self.last_source: dict[str, str] = {}  # container id -> how its cpus last changed
        self.pod_errors: dict[str, str] = {}
        self.agent_process = agent_process
        self.cgroups = cgroups
        self.runtime_options = dict(runtime_options or {})
        self.process: asyncio.subprocess.Process | None = None
        self.agent_port = 0

    # --- lifecycle ----------------------------------------------------------------------------------
    async def __aenter__(self) -> Playground:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    def _dirs(self) -> Path:
        if self.workdir is None:
            # unix socket paths are limited to 108 bytes: keep the temp dir short.
            self._tmp = tempfile.TemporaryDirectory(prefix="tdpg-", dir="/tmp")
            self.workdir = Path(self._tmp.name)
        for sub in ("run", "kubelet", "cdi", "state"):
            (self.workdir / sub).mkdir(parents=True, exist_ok=True)
        return self.workdir

    def agent_config(self) -> AgentConfig:
        base = self._dirs()
        raw: dict[str, Any] = {
            "nodeName": NODE_NAME,
            # list-typed pcieRoot where the API server keeps lists (DRAListTypeAttributes)
            "devices": {"model": self.model, "group_by": self.group_by, "listAttributes": self.store.gates[LIST_TYPE_ATTRIBUTES]},
            "kubeletRoot": str(base / "kubelet"),
            "cdiDir": str(base / "cdi"),
            "stateDir": str(base / "state"),
            "metricsAddress": "",
            "nri": {"socket": str(base / "run" / "nri.sock")},
            "kube": {"server": self.api.url},
        }
        if self.cgroups:
            raw["sysfsRoot"] = str(base / "host")
        for key, value in self.agent_overrides.items():
            if isinstance(value, Mapping) and isinstance(raw.get(key), Mapping):
                raw[key] = {**raw[key], **value}
            else:
                raw[key] = value
        return parse_config(raw, "playground agent configuration")

    async def start(self) -> None:
        if self.gpus:
            from topodra.sim.gpus import PCI_HINT, no_gpu_reason

            why = no_gpu_reason(self.topology)
            if why is not None:  # before anything starts
                raise PlaygroundError(f"no {GPU_DRIVER} device on this machine: {why} (use {PCI_HINT})")
        base = self._dirs()
        await self.api.start()
        self.store.create(
            KINDS[("", "nodes")],
            None,
            {
                "apiVersion": "v1",
                "kind": "Node",
                "metadata": {"name": NODE_NAME, "labels": {"kubernetes.io/hostname": NODE_NAME}},
                "status": {
                    "allocatable": node_allocatable(self.topology, self.agent_config()),
                    "conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady", "message": "the playground's kubelet is ready"}],
                    "nodeInfo": {"kubeletVersion": "v1.36.2", "containerRuntimeVersion": "embedded://topodra", "osImage": "topodra playground"},
                },
            },
        )
        self.store.create(KINDS[("resource.k8s.io", "deviceclasses")], None, device_class())
        mems = CPUSet(n.id for n in self.topology.nodes.values() if n.memory_bytes > 0) or CPUSet([0])
        self.runtime = EmbeddedRuntime(
            base / "run" / "nri.sock",
            nri_version=self.nri_version,
            online_cpus=self.topology.online,
            online_mems=mems,
            on_change=self._changed,
            cgroup_root=base / "host" / "sys" / "fs" / "cgroup" if self.cgroups else None,
            **self.runtime_options,
        )
        await self.runtime.start()
        await self.start_agent()
        self.kubelet = EmbeddedKubelet(
            node_name=NODE_NAME, runtime=self.runtime, kubelet_root=base / "kubelet", cdi_dir=base / "cdi"
        )
        drivers = [DRIVER]
        if self.gpus:
            self.gpu_plugin = await start_gpu_driver(self.store, self.topology, NODE_NAME, base / "kubelet")
            drivers.append(GPU_DRIVER)
        await self.kubelet.register_plugins(expect=drivers)
        await self.wait_slices()
        self.log.add(f"node {NODE_NAME}: {len(self.topology.cpus)} CPUs, agent ready, {len(self.slices())} ResourceSlice(s)")

    def endpoints(self) -> list[tuple[str, str]]:
        """What a person can connect to while the node runs (``playground --hold``)."""
        base = self._dirs()
        cfg = self.agent_config()
        out = [
            ("API server", f"{self.api.url}  (kubectl --server {self.api.url} get resourceslices,resourceclaims,pods)"),
            ("NRI socket", str(base / "run" / "nri.sock")),
            ("DRA plugin socket", str(cfg.kubelet_root / "plugins" / DRIVER / "dra.sock")),
            ("DRA registration", str(cfg.kubelet_root / "plugins_registry" / f"{DRIVER}-reg.sock")),
            ("CDI specs", str(cfg.cdi_dir)),
            ("agent state", str(cfg.state_dir)),
        ]
        if self.agent_port:
            out.append(("agent HTTP", f"http://127.0.0.1:{self.agent_port}/state  (/metrics, /healthz)"))
        elif cfg.state_listen.startswith("unix:"):
            sock = cfg.state_listen.removeprefix("unix:")
            out.append(("agent /state", f"curl --unix-socket {sock} http://agent/state"))
        return out

    async def start_agent(self, env: Mapping[str, str] | None = None) -> Agent | None:
        assert self.runtime is not None
        if self.agent_process is not None:
            await self._start_agent_process(env or {})
            return None
        agent = Agent(self.agent_config(), topology=self.topology, reload_interval=3600)
        await agent.start()  # an AgentError (e.g. a kubelet whose CPU manager is static) leaves no agent
        self.agent = agent
        stub = self.agent.stub
        assert stub is not None
        await stub.wait_synchronized(timeout=10)
        return self.agent

    async def restart_agent(self, env: Mapping[str, str] | None = None) -> Agent | None:
        """Stop the agent and start a new one on the same state (a crash or upgrade). An agent that
        refuses to start raises its ``AgentError``; the node then has none until the next restart."""
        if self.agent is not None:
            await self.agent.stop()
            self.agent = None
        await self.kill_agent_process()
        if self.kubelet is not None:
            await self.kubelet.forget(DRIVER)
        agent = await self.start_agent(env)
        if self.kubelet is not None:
            await self.kubelet.register_plugins(expect=[DRIVER])
        await self.settle()
        return agent

    def child_config(self) -> Path:
        """Write the configuration of an agent in its own process: a free port serving /metrics and
        /state, the playground's machine; returns the file."""
        import json
        import socket

        assert self.workdir is not None
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            self.agent_port = s.getsockname()[1]
        cfg = self.agent_config().model_dump(mode="json", by_alias=True)
        cfg["topology"] = self.agent_process
        cfg["metricsAddress"] = cfg["stateAddress"] = f"127.0.0.1:{self.agent_port}"  # /state over TCP too
        path = self.workdir / "agent.yaml"
        path.write_text(json.dumps(cfg))  # JSON is YAML
        path.chmod(0o600)  # the agent refuses a configuration others could write (any umask)
        return path

    async def _start_agent_process(self, env: Mapping[str, str]) -> None:
        import os
        import sys

        assert self.runtime is not None
        assert self.workdir is not None
        path = self.child_config()
        before = {p.id for p in self.runtime.plugins}
        # The child imports the same topodra as this process.
        import topodra

        src = str(Path(topodra.__file__).resolve().parents[1])
        pythonpath = os.pathsep.join(p for p in (src, os.environ.get("PYTHONPATH", "")) if p)
        self.process = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "topodra",
            "agent",
            "--config",
            str(path),
            env={**os.environ, "PYTHONPATH": pythonpath, **env},
            stdout=asyncio.subprocess.DEVNULL,
            stderr=open(self.workdir / "agent.log", "ab"),  # noqa: SIM115 - the child owns it
        )
        loop = asyncio.get_running_loop()
        deadline = loop.time() + 20
        while not any(p.id not in before and p.synchronized for p in self.runtime.plugins):
            if self.process.returncode is not None or loop.time() > deadline:
                log = (self.workdir / "agent.log").read_text()[-2000:]
                raise PlaygroundError(f"the agent process did not connect (exit {self.process.returncode}):\n{log}")
            await asyncio.sleep(0.05)

    async def kill_agent_process(self) -> int | None:
        """End the child agent (if it has not died already); returns its exit status."""
        proc, self.process = self.process, None
        if proc is None:
            return None
        if proc.returncode is None:
            proc.terminate()
            try:
                await asyncio.wait_for(proc.wait(), 10)
            except TimeoutError:
                proc.kill()
                await proc.wait()
        return proc.returncode

    async def agent_state(self) -> dict[str, Any]:
        """The agent's /state (in-process or over HTTP from the child)."""
        if self.agent is not None and self.agent_process is None:
            return self.agent.state()
        import json

        from topodra.agent.http import get

        status, body = await get(f"127.0.0.1:{self.agent_port}", "/state")
        if status != 200:
            raise OSError(f"the agent's /state answered {status}")
        state: dict[str, Any] = json.loads(body)
        return state

    async def wait_slices(self, timeout: float = 10.0) -> None:
        if self.agent is not None and self.agent.publisher.reconciler is not None:
            await asyncio.wait_for(self.agent.publisher.reconciler.synced.wait(), timeout)
            return
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while not [s for s in self.slices() if s["spec"]["driver"] == DRIVER]:
            if loop.time() > deadline:
                raise PlaygroundError("the agent published no ResourceSlice")
            await asyncio.sleep(0.05)

    async def settle(self, timeout: float = 5.0) -> None:
        """Until the agent has pushed every pending container update."""
        if self.agent is not None and self.agent.router.pusher is not None:
            await self.agent.router.pusher.wait_idle(timeout)
        elif self.process is not None:
            loop = asyncio.get_running_loop()
            deadline = loop.time() + timeout
            while self.process.returncode is None:
                try:
                    if (await self.agent_state()).get("push_idle", True):
                        return
                except OSError:
                    # Not listening yet, or gone (a crash test): a dead agent has nothing to push.
                    with contextlib.suppress(TimeoutError):
                        await asyncio.wait_for(asyncio.shield(self.process.wait()), 0.05)
                if loop.time() > deadline:
                    raise PlaygroundError("the agent did not finish pushing container updates")
                await asyncio.sleep(0.02)

    async def stop(self) -> None:
        if self.kubelet is not None:
            await self.kubelet.close()
        if self.gpu_plugin is not None:
            await self.gpu_plugin.stop()
        if self.agent is not None:
            await self.agent.stop()
        await self.kill_agent_process()
        if self.runtime is not None:
            await self.runtime.stop()
        await self.api.stop()
        if self._tmp is not None:
            with contextlib.suppress(OSError):
                self._tmp.cleanup()

    def _changed(self, change: ContainerChange) -> None:
        self.last_source[change.container_id] = change.source
        if self.on_change is not None:
            self.on_change(change)

    # --- objects ------------------------------------------------------------------------------------------
    def slices(self) -> list[dict[str, Any]]:
        items: list[dict[str, Any]] = self.store.list(KINDS[("resource.k8s.io", "resourceslices")])["items"]
        return items

    async def apply(self, docs: Sequence[Mapping[str, Any]], *, source: str = "") -> list[str]:
        """Create (or replace) each object; pods are scheduled and started. Returns what happened."""
        done: list[str] = []
        pods: list[dict[str, Any]] = []
        for doc in docs:
            kind = _KIND_BY_NAME.get((str(doc.get("apiVersion")), str(doc.get("kind"))))
            where = f"{source}: " if source else ""
            if kind is None:
                raise PlaygroundError(
                    f"{where}{doc.get('kind')!r} ({doc.get('apiVersion')}) is not supported by the playground; "
                    "it knows " + ", ".join(sorted(k.kind for k in KINDS.values()))
                )
            obj = copy.deepcopy(dict(doc))
            meta = obj.setdefault("metadata", {})
            ns = meta.get("namespace", "default") if kind.namespaced else None
            name = meta.get("name", "?")
            unknown = unknown_fields(kind, obj)  # refused as kubectl apply's strict validation has it
            if unknown:
                raise PlaygroundError(f"{where}{kind.kind} {name}: {strict_decoding_error(kind, unknown)}")
            try:
                if kind.plural == "pods":
                    created = self.store.create(kind, ns, obj)
                    pods.append(created)
                    done.append(f"pod/{name} created")
                    continue
                try:
                    old = self.store.get(kind, ns, name)
                except ApiError as err:
                    if not err.is_not_found:
                        raise
                    self.store.create(kind, ns, obj)
                    done.append(f"{kind.kind.lower()}/{name} created")
                else:
                    meta["resourceVersion"] = old["metadata"]["resourceVersion"]
                    self.store.update(kind, ns, name, obj)
                    done.append(f"{kind.kind.lower()}/{name} configured")
            except ApiError as err:
                raise PlaygroundError(f"{where}{kind.kind} {name}: {err}") from None
        for pod in pods:
            done.append(await self._start_pod(pod))
        for line in done:
            self.log.add(line)
        return done

    async def _start_pod(self, pod: dict[str, Any]) -> str:
        meta = pod["metadata"]
        key = f"{meta.get('namespace', 'default')}/{meta['name']}"
        assert self.kubelet is not None
        try:
            claims = self.scheduler.schedule(pod)
        except SchedulingError as err:
            self.pod_errors[key] = str(err)
            self._set_phase(pod, "Pending", str(err))
            return f"pod/{meta['name']} pending: {err}"
        fresh = self.store.get(KINDS[("", "pods")], meta.get("namespace", "default"), meta["name"])
        try:
            await self.kubelet.run_pod(fresh, claims)
        except KubeletError as err:
            self.pod_errors[key] = str(err)
            self._set_phase(fresh, "Failed", str(err))
            return f"pod/{meta['name']} failed: {err}"
        await self.settle()
        self.pod_errors.pop(key, None)
        self._set_phase(fresh, "Running", "")
        return f"pod/{meta['name']} running"

    def _set_phase(self, pod: Mapping[str, Any], phase: str, message: str) -> None:
        kind = KINDS[("", "pods")]
        meta = pod["metadata"]
        with contextlib.suppress(ApiError):
            fresh = self.store.get(kind, meta.get("namespace", "default"), meta["name"])
            fresh["status"] = _pod_status(fresh, phase, message)
            self.store.update(kind, meta.get("namespace", "default"), meta["name"], fresh, subresource="status")

    async def retry_pod(self, name: str, namespace: str = "default") -> str:
        """Start a pod again that failed to start (the kubelet's retry)."""
        pod = self.store.get(KINDS[("", "pods")], namespace, name)
        line = await self._start_pod(pod)
        self.log.add(line)
        return line

    async def delete_pod(self, name: str, namespace: str = "default") -> str:
        kind = KINDS[("", "pods")]
        try:
            pod = self.store.get(kind, namespace, name)
        except ApiError:
            raise PlaygroundError(f"pod {namespace}/{name} does not exist") from None
        assert self.kubelet is not None
        try:
            await self.kubelet.stop_pod(pod)
        finally:
            self.scheduler.release(pod)
        self.store.delete(kind, namespace, name)
        self.pod_errors.pop(f"{namespace}/{name}", None)
        await self.settle()
        line = f"pod/{name} deleted"
        self.log.add(line)
        return line

    # --- views ------------------------------------------------------------------------------------------
    def rows(self) -> list[ContainerRow]:
        assert self.runtime is not None
        assert self.kubelet is not None
        out: list[ContainerRow] = []
        pods = {p.id: p for p in self.runtime.store.pods()}
        qos_of = {}
        claims_of: dict[str, str] = {}
        for run in self.kubelet.pods.values():
            claims_of[run.sandbox_id] = ",".join(name for _, _, _, name in run.claims)
        for pod in pods.values():
            parent = pod.cgroup_parent
            qos_of[pod.id] = "BestEffort" if "besteffort" in parent else "Burstable" if "burstable" in parent else "Guaranteed"
        for ctr in sorted(self.runtime.store.containers(), key=lambda c: (pods[c.pod_sandbox_id].name if c.pod_sandbox_id in pods else "", c.name)):
            owner = pods.get(ctr.pod_sandbox_id)
            cpus = ctr.resources.cpus if ctr.resources and ctr.resources.cpus else CPUSet()
            mems = ctr.resources.mems if ctr.resources and ctr.resources.mems else CPUSet()
            kinds: dict[str, int] = {}
            for c in cpus:
                if c in self.topology.cpus:
                    t = self.topology.cpu(c).core_type.value
                    kinds[t] = kinds.get(t, 0) + 1
            out.append(
                ContainerRow(
                    pod=f"{owner.namespace}/{owner.name}" if owner else ctr.pod_sandbox_id,
                    container=ctr.name,
                    qos=qos_of.get(ctr.pod_sandbox_id, "?"),
                    claims=claims_of.get(ctr.pod_sandbox_id, ""),
                    cpus=cpus,
                    mems=mems,
                    core_types=" ".join(f"{n} {t}" for t, n in sorted(kinds.items())),
                    source=self.last_source.get(ctr.id, ""),
                )
            )
        return out

    def cpus_of(self, pod: str, container: str | None = None, namespace: str = "default") -> CPUSet:
        """The cpuset the runtime holds for a pod's container (the first one if not named)."""
        for row in self.rows():
            if row.pod == f"{namespace}/{pod}" and (container is None or row.container == container):
                return row.cpus
        raise PlaygroundError(f"no running container {container or '(any)'} in pod {namespace}/{pod}")
