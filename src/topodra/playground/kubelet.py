"""The playground's kubelet: registers DRA plugins and runs pods on the embedded runtime.

It does what the real kubelet does for this flow, over the same wire:
- watches ``<root>/plugins_registry`` for registration sockets, calls
  ``pluginregistration.Registration/GetInfo`` and ``NotifyRegistrationStatus``
  over gRPC, picks the first DRA service it supports (``v1.DRAPlugin``, then
  ``v1beta1.DRAPlugin``) and connects to the advertised endpoint;
- before a pod starts, calls ``NodePrepareResources`` with the pod's claims
  (namespace, UID, name only) that are not prepared on the node yet, and hands
  each container the CDI devices of the claims it references; the runtime part
  (here too) applies the CDI specs' environment edits, as containerd/CRI-O do;
- turns the pod spec into the sandbox and containers the runtime sees
  (QoS cgroup parent, cpu.shares, CFS quota, memory limit), like the
  kubelet's container manager;
- after the pod's containers stopped, calls ``NodeUnprepareResources`` for the
  claims no other pod on the node uses.

A claim shared by several pods of the node is prepared once, for the first of
them, and unprepared once, after the last (the kubelet's claim info cache,
``pkg/kubelet/cm/dra/manager.go``, Kubernetes v1.36.2): the driver never hears
of the other pods.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import grpc
import grpc.aio

from topodra.cpuset import CPUSet
from topodra.dra.proto import dra_v1_pb2, dra_v1_pb2_grpc, pluginregistration_pb2, pluginregistration_pb2_grpc
from topodra.embedded.runtime import EmbeddedRuntime
from topodra.nri.types import Container, ContainerState, LinuxResources, Pod
from topodra.quantity import cpu_milli, memory_bytes

__all__ = ["ClaimInfo", "DRAConnection", "EmbeddedKubelet", "KubeletError", "PodRun", "pod_qos"]

log = logging.getLogger(__name__)

SUPPORTED_DRA_SERVICES = ("v1.DRAPlugin", "v1beta1.DRAPlugin")
PREPARE_TIMEOUT = 45.0  # the kubelet's per-call limit


class KubeletError(RuntimeError):
    """A pod could not be started or stopped; the message says why."""


@dataclass
class DRAConnection:
    driver: str
    endpoint: str
    service: str
    channel: grpc.aio.Channel
    stub: dra_v1_pb2_grpc.DRAPluginStub


@dataclass
class PodRun:
    """What the kubelet started for one pod."""

    pod_key: str  # namespace/name
    uid: str
    sandbox_id: str
    containers: dict[str, str] = field(default_factory=dict)  # container name -> runtime id
    claims: list[tuple[str, str, str, str]] = field(default_factory=list)  # (driver, namespace, uid, name)


def _resources(container: Mapping[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    res = container.get("resources") or {}
    return dict(res.get("requests") or {}), dict(res.get("limits") or {})


def pod_qos(pod: Mapping[str, Any]) -> str:
    """The pod's QoS class from its containers' requests and limits (as the kubelet computes it)."""
    containers = list((pod.get("spec") or {}).get("containers") or [])
    any_set = False
    guaranteed = True
    for c in containers:
        req, lim = _resources(c)
        if req or lim:
            any_set = True
        for name in ("cpu", "memory"):
            limit = lim.get(name)
            request = req.get(name, limit)
            if limit is None or request is None:
                guaranteed = False
                continue
            convert = cpu_milli if name == "cpu" else memory_bytes
            if convert(request) != convert(limit):
                guaranteed = False
    if not any_set:
        return "BestEffort"
    return "Guaranteed" if guaranteed else "Burstable"


def _claims_per_driver(key: str, ns: str, claims: Sequence[Mapping[str, Any]]) -> dict[str, list[tuple[str, str, str]]]:
    """Driver -> the (namespace, uid, name) of the claims it prepares; KubeletError for a
    claim without an allocation."""
    per_driver: dict[str, list[tuple[str, str, str]]] = {}
    for claim in claims:
        cmeta = claim["metadata"]
        alloc = ((claim.get("status") or {}).get("allocation") or {}).get("devices") or {}
        drivers = sorted({r["driver"] for r in alloc.get("results") or []})
        if not alloc:
            raise KubeletError(f"pod {key}: claim {cmeta['name']} is not allocated")
        for drv in drivers:
            per_driver.setdefault(drv, []).append((cmeta.get("namespace", ns), cmeta["uid"], cmeta["name"]))
    return per_driver


def _container_cdi_ids(
    key: str, c: Mapping[str, Any], by_ref: Mapping[str, Mapping[str, Any]], prepared: Mapping[str, list[Any]]
) -> list[str]:
    """The CDI device ids of the claims (and requests) a container references."""
    cdi_ids: list[str] = []
    for cref in (c.get("resources") or {}).get("claims") or []:
        ref_claim = by_ref.get(cref["name"])
        if ref_claim is None:
            raise KubeletError(f"pod {key}: container {c['name']} references unknown claim {cref['name']!r}")
        request = cref.get("request")
        for dev in prepared.get(ref_claim["metadata"]["uid"], []):
            if request and dev.request_names and request not in dev.request_names:
                continue
            cdi_ids.extend(dev.cdi_device_ids)
    return cdi_ids


@dataclass
class ClaimInfo:
    """The kubelet's record of a claim prepared on the node: the drivers' prepared devices and
    the pods of the node using it."""

    uid: str
    devices: dict[str, list[Any]] = field(default_factory=dict)  # driver -> its prepared devices
    pods: set[str] = field(default_factory=set)


def _short_id(*parts: str) -> str:
    return hashlib.sha256("/".join(parts).encode()).hexdigest()[:16]


class EmbeddedKubelet:
    """One node's kubelet for the playground and the agent's end-to-end tests."""

    def __init__(self, *, node_name: str, runtime: EmbeddedRuntime, kubelet_root: Path, cdi_dir: Path) -> None:
        self.node_name = node_name
        self.runtime = runtime
        self.kubelet_root = Path(kubelet_root)
        self.cdi_dir = Path(cdi_dir)
        self.plugins: dict[str, DRAConnection] = {}
        self.pods: dict[str, PodRun] = {}  # pod uid -> run
        #: stopped pods whose claims still need NodeUnprepareResources (retried, as the kubelet does)
        self.unprepare_pending: list[PodRun] = []
        #: claims prepared on the node, by (namespace, name)
        self.claim_infos: dict[tuple[str, str], ClaimInfo] = {}
        self.log: list[str] = []

    @property
    def registry_dir(self) -> Path:
        return self.kubelet_root / "plugins_registry"

    def write_cpu_manager_state(self, policy: str, cpus: CPUSet) -> Path:
        """Write ``cpu_manager_state`` as a kubelet started with ``cpuManagerPolicy: POLICY`` does
        (its ``policyName``, and under ``static`` the CPUs it would share, ``defaultCpuSet``):
        what the agent reads to refuse a kubelet that pins CPUs itself. No checksum: the agent
        reads the policy only."""
        state = {"policyName": policy, "defaultCpuSet": cpus.format() if policy == "static" else ""}
        path = self.kubelet_root / "cpu_manager_state"
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps(state))
        tmp.replace(path)
        return path

    def _note(self, text: str) -> None:
        self.log.append(text)
        log.info("kubelet: %s", text)

    # --- plugin registration ----------------------------------------------------------------
    async def register_plugins(self, *, expect: Sequence[str] = (), timeout: float = 10.0) -> list[str]:
        """Register every plugin socket in ``plugins_registry``; wait for the ``expect``ed drivers."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while True:
            self.registry_dir.mkdir(parents=True, exist_ok=True)
            for sock in sorted(self.registry_dir.glob("*.sock")):
                with contextlib.suppress(KubeletError):
                    await self._register(sock)
            missing = [d for d in expect if d not in self.plugins]
            if not missing:
                return sorted(self.plugins)
            if loop.time() > deadline:
                raise KubeletError(f"DRA plugin(s) {', '.join(missing)} did not register within {timeout:.0f}s")
            await asyncio.sleep(0.05)

    async def _register(self, sock: Path) -> None:
        async with grpc.aio.insecure_channel(f"unix://{sock}") as ch:
            reg = pluginregistration_pb2_grpc.RegistrationStub(ch)  # type: ignore[no-untyped-call]
            try:
                info = await reg.GetInfo(pluginregistration_pb2.InfoRequest(), timeout=5)
            except grpc.aio.AioRpcError as err:
                raise KubeletError(f"GetInfo on {sock} failed: {err.details()}") from None
            error = ""
            service = next((v for v in info.supported_versions if v in SUPPORTED_DRA_SERVICES), "")
            if info.type != "DRAPlugin":
                error = f"plugin type {info.type!r} is not DRAPlugin"
            elif not service:
                error = f"no supported DRA service in {list(info.supported_versions)}"
            elif not info.endpoint.startswith("/"):
                error = f"endpoint {info.endpoint!r} is not an absolute path"
            await reg.NotifyRegistrationStatus(
                pluginregistration_pb2.RegistrationStatus(plugin_registered=not error, error=error), timeout=5
            )
        if error:
            self._note(f"registration of {sock.name} refused: {error}")
            raise KubeletError(error)
        if service != "v1.DRAPlugin":
            raise KubeletError(f"{info.name}: only v1.DRAPlugin is used by this kubelet (got {service})")
        if info.name in self.plugins and self.plugins[info.name].endpoint == info.endpoint:
            return  # re-registered (plugin restarted): the channel reconnects by itself
        channel = grpc.aio.insecure_channel(f"unix://{info.endpoint}")
        old = self.plugins.get(info.name)
        self.plugins[info.name] = DRAConnection(
            info.name, info.endpoint, service, channel, dra_v1_pb2_grpc.DRAPluginStub(channel)  # type: ignore[no-untyped-call]
        )
        if old is not None:
            await old.channel.close()
        self._note(f"registered DRA driver {info.name} at {info.endpoint} ({service})")

    async def forget(self, driver: str) -> None:
        """Drop a driver's registration (its plugin went away); ``register_plugins`` finds it again."""
        conn = self.plugins.pop(driver, None)
        if conn is not None:
            await conn.channel.close()

    async def close(self) -> None:
        for conn in self.plugins.values():
            await conn.channel.close()
        self.plugins.clear()

    # --- claims ----------------------------------------------------------------------------------
    async def _call(self, method: str, driver: str, claims: list[tuple[str, str, str]]) -> dict[str, Any]:
        """One Node(Un)PrepareResources call; every claim must be answered, without error."""
        conn = self.plugins.get(driver)
        if conn is None:
            raise KubeletError(f"DRA driver {driver} is not registered on node {self.node_name}")
        request_type = getattr(dra_v1_pb2, f"{method}Request")
        req = request_type(claims=[dra_v1_pb2.Claim(namespace=ns, uid=uid, name=name) for ns, uid, name in claims])
        try:
            resp = await getattr(conn.stub, method)(req, timeout=PREPARE_TIMEOUT)
        except grpc.aio.AioRpcError as err:
            raise KubeletError(f"{method} to {driver} failed: {err.code().name}: {err.details()}") from None
        out = dict(resp.claims)
        verb = "prepare" if method == "NodePrepareResources" else "unprepare"
        for _, uid, name in claims:
            if uid not in out:
                raise KubeletError(f"{method} answer of {driver} misses claim {name} ({uid})")
            if out[uid].error:
                raise KubeletError(f"{verb} claim {name}: {out[uid].error}")
        return out

    async def _prepare(self, driver: str, claims: list[tuple[str, str, str]]) -> dict[str, Any]:
        return await self._call("NodePrepareResources", driver, claims)

    async def _unprepare(self, driver: str, claims: list[tuple[str, str, str]]) -> None:
        await self._call("NodeUnprepareResources", driver, claims)

    def _cdi_env(self, cdi_ids: Sequence[str]) -> list[str]:
        """Environment edits of the named CDI devices, from the spec files (the runtime's CDI step)."""
        wanted = set(cdi_ids)
        env: list[str] = []
        found: set[str] = set()
        for path in sorted(self.cdi_dir.glob("*.json")) + sorted(self.cdi_dir.glob("*.yaml")):
            try:
                spec = json.loads(path.read_text()) if path.suffix == ".json" else None
            except (OSError, ValueError):
                continue
            if not isinstance(spec, dict):
                continue
            kind = spec.get("kind", "")
            used = False
            for dev in spec.get("devices") or []:
                fq = f"{kind}={dev.get('name')}"
                if fq in wanted:
                    found.add(fq)
                    used = True
                    env.extend((dev.get("containerEdits") or {}).get("env") or [])
            if used:
                env.extend((spec.get("containerEdits") or {}).get("env") or [])
        missing = wanted - found
        if missing:
            raise KubeletError(f"CDI device(s) {', '.join(sorted(missing))} not found in {self.cdi_dir}")
        return env

    # --- pods ----------------------------------------------------------------------------------------
    async def run_pod(self, pod: Mapping[str, Any], claims: Sequence[Mapping[str, Any]]) -> PodRun:
        """Prepare the pod's claims, then create and start its sandbox and containers.

        ``claims`` are the pod's ResourceClaim objects (allocated, reserved for
        the pod), in the order of ``spec.resourceClaims``.
        """
        meta = pod.get("metadata") or {}
        spec = pod.get("spec") or {}
        ns, name, uid = meta.get("namespace", "default"), meta["name"], meta["uid"]
        key = f"{ns}/{name}"
        # Claims by the pod's own reference name, and what to prepare per driver.
        by_ref: dict[str, Mapping[str, Any]] = {}
        refs = list(spec.get("resourceClaims") or [])
        for ref, claim in zip(refs, claims, strict=True):
            by_ref[ref["name"]] = claim
        per_driver = _claims_per_driver(key, ns, claims)
        run = PodRun(key, uid, sandbox_id=_short_id("sandbox", uid))
        prepared = await self._prepare_claims(run, per_driver)
        self._note(f"prepared {len(prepared)} claim(s) for pod {key}")
        qos = pod_qos(pod)
        qos_dir = {"Guaranteed": "", "Burstable": "burstable/", "BestEffort": "besteffort/"}[qos]
        parent = f"/kubepods/{qos_dir}pod{uid}"
        sandbox = Pod(
            id=run.sandbox_id,
            name=name,
            uid=uid,
            namespace=ns,
            labels=dict(meta.get("labels") or {}),
            annotations=dict(meta.get("annotations") or {}),
            cgroup_parent=parent,
        )
        res = await self.runtime.run_pod_sandbox(sandbox)
        if not res.ok:
            await self._undo_claims(run)
            raise KubeletError(f"pod {key}: RunPodSandbox failed: {res.error}")
        self.pods[uid] = run
        for c in spec.get("containers") or []:
            await self._start_container(pod, run, parent, c, by_ref, prepared)
        self._note(f"started pod {key} ({qos}, {len(run.containers)} container(s))")
        return run

    async def _prepare_claims(self, run: PodRun, per_driver: Mapping[str, list[tuple[str, str, str]]]) -> dict[str, list[Any]]:
        """NodePrepareResources per driver for the claims not prepared on the node yet, noted in
        ``run`` and the claim infos: claim uid -> its prepared devices."""
        prepared: dict[str, list[Any]] = {}
        for drv, entries in per_driver.items():
            todo = []
            for n, u, nm in entries:
                info = self.claim_infos.get((n, nm))
                if info is not None and info.uid != u:
                    raise KubeletError(
                        f"old ResourceClaim with same name {nm} and different UID {info.uid} still exists "
                        "(previous pod force-deleted?!)"
                    )
                if info is not None and drv in info.devices:
                    info.pods.add(run.uid)  # prepared for another pod: not asked again
                    run.claims.append((drv, n, u, nm))
                    prepared.setdefault(u, []).extend(info.devices[drv])
                else:
                    todo.append((n, u, nm))
            if not todo:
                continue
            answers = await self._prepare(drv, todo)
            for n, u, nm in todo:
                info = self.claim_infos.setdefault((n, nm), ClaimInfo(u))
                info.devices[drv] = list(answers[u].devices)
                info.pods.add(run.uid)
                run.claims.append((drv, n, u, nm))
                prepared.setdefault(u, []).extend(answers[u].devices)
        return prepared

    async def _start_container(
        self,
        pod: Mapping[str, Any],
        run: PodRun,
        parent: str,
        c: Mapping[str, Any],
        by_ref: Mapping[str, Mapping[str, Any]],
        prepared: Mapping[str, list[Any]],
    ) -> None:
        """Create and start one container of the pod with its claims' CDI devices; on any
        failure the pod is stopped and KubeletError says why."""
        key, uid = run.pod_key, run.uid
        try:
            cdi_ids = _container_cdi_ids(key, c, by_ref, prepared)
            env = [f"{e['name']}={e.get('value', '')}" for e in c.get("env") or [] if "name" in e]
            try:
                env += self._cdi_env(cdi_ids)
            except KubeletError as err:
                raise KubeletError(f"pod {key}: {err}") from None
        except KubeletError:
            await self.stop_pod(pod)
            raise
        cid = _short_id("container", uid, c["name"])
        ctr = Container(
            id=cid,
            pod_sandbox_id=run.sandbox_id,
            name=c["name"],
            state=ContainerState.CREATED,
            args=tuple(c.get("args") or ()),
            env=tuple(env),
            resources=_linux_resources(c),
            cgroups_path=f"{parent}/{cid}",
            cdi_devices=tuple(dict.fromkeys(cdi_ids)),
        )
        result = await self.runtime.create_container(ctr)
        if not result.ok:
            await self.stop_pod(pod)
            raise KubeletError(f"pod {key}: container {c['name']}: {result.error}")
        run.containers[c["name"]] = cid
        started = await self.runtime.start_container(cid)
        if not started.ok:
            await self.stop_pod(pod)
            raise KubeletError(f"pod {key}: starting container {c['name']}: {started.error}")

    async def unprepare_claims(self, pod: Mapping[str, Any]) -> None:
        """NodeUnprepareResources for a running pod's claims, its containers left alone: a claim
        released while no container event happens (tests of how the release reaches others)."""
        uid = (pod.get("metadata") or {}).get("uid", "")
        run = self.pods.get(uid)
        if run is None:
            raise KubeletError(f"pod {uid or '(no uid)'} does not run on this node")
        await self._undo_claims(run)

    async def _undo_claims(self, run: PodRun) -> None:
        """NodeUnprepareResources for the run's claims no other pod of the node uses; the
        others only lose this pod's reference."""
        per: dict[str, list[tuple[str, str, str]]] = {}
        for drv, ns, uid, name in run.claims:
            info = self.claim_infos.get((ns, name))
            if info is None or info.uid != uid or info.pods - {run.uid}:
                continue
            per.setdefault(drv, []).append((ns, uid, name))
        for drv, entries in per.items():
            await self._unprepare(drv, entries)
            for ns, _, name in entries:
                info = self.claim_infos.get((ns, name))
                if info is not None:
                    info.devices.pop(drv, None)
        for _, ns, uid, name in run.claims:
            info = self.claim_infos.get((ns, name))
            if info is not None and info.uid == uid:
                info.pods.discard(run.uid)
                if not info.pods:
                    del self.claim_infos[(ns, name)]
        run.claims.clear()

    async def stop_pod(self, pod: Mapping[str, Any]) -> None:
        """Stop and remove the pod's containers and sandbox, then unprepare its claims."""
        uid = (pod.get("metadata") or {}).get("uid", "")
        run = self.pods.pop(uid, None)
        if run is None:
            return
        for cid in run.containers.values():
            with contextlib.suppress(Exception):
                await self.runtime.stop_container(cid)
            with contextlib.suppress(Exception):
                await self.runtime.remove_container(cid)
        with contextlib.suppress(Exception):
            await self.runtime.stop_pod_sandbox(run.sandbox_id)
        with contextlib.suppress(Exception):
            await self.runtime.remove_pod_sandbox(run.sandbox_id)
        try:
            await self._undo_claims(run)
        except KubeletError:
            self.unprepare_pending.append(run)
            raise
        self._note(f"stopped pod {run.pod_key}")

    async def retry_unprepare(self) -> None:
        """Retry NodeUnprepareResources for stopped pods whose claims were not released yet."""
        pending, self.unprepare_pending = self.unprepare_pending, []
        for i, run in enumerate(pending):
            try:
                await self._undo_claims(run)
            except KubeletError:
                self.unprepare_pending.extend(pending[i:])
                raise


def _linux_resources(container: Mapping[str, Any]) -> LinuxResources:
    """cpu.shares / CFS quota / memory limit as the kubelet sets them."""
    req, lim = _resources(container)
    cpu_req = req.get("cpu", lim.get("cpu"))
    shares = max(2, cpu_milli(cpu_req) * 1024 // 1000) if cpu_req is not None else 2
    quota = period = None
    if "cpu" in lim:
        period = 100_000
        quota = max(1000, cpu_milli(lim["cpu"]) * period // 1000)
    memory = memory_bytes(lim["memory"]) if "memory" in lim else None
    return LinuxResources(cpu_shares=shares, cpu_quota=quota, cpu_period=period, memory_limit=memory)
