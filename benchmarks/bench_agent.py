"""The whole agent: NRI CreateContainer round trip against a bare NRI round trip, and RSS.

Three processes besides this one, so no peer's work lands inside another's figure:

* the agent (``python -m topodra agent``) on a synthetic machine, DRA and slice
  publication on;
* the API server double (``topodra.embedded.apiserver``), which receives the
  agent's ResourceSlice writes;
* a bare NRI plugin: our ``Stub`` with a plugin that changes nothing.

This process plays the runtime for both plugins with the same minimal code (a
``Session`` as the unix socket's protocol, requests encoded before the clock
starts) and alternates the calls: container ``i`` to the agent, then to the bare
plugin. A round trip runs from the request written to the reply frame decoded
(in the read callback that receives it). The mix:
one Guaranteed 2-CPU container (exclusive) per ten, the rest Burstable or
BestEffort on the shared CPUs, so every exclusive grant answers with updates of
every shared container. The agent's own time per call (request bytes in to reply
bytes out: decode, policy, encode) comes from its ``/state/nri``. RSS is read from
/proc after the last container.

Sizes: 256 CPUs and 500 containers (``--quick``: 150); the full run adds 1,024 CPUs
and 2,000 containers to show the figures stay flat.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from benchmarks.common import Result, median, percentile
from topodra.agent.http import get
from topodra.nri import convert
from topodra.nri.proto import api_pb2
from topodra.nri.session import RequestReceived, ResponseReceived, Role, Session
from topodra.nri.stub import PLUGIN_SERVICE
from topodra.nri.types import Container, ContainerState, LinuxResources, Pod

ROOT = Path(__file__).resolve().parents[1]
MACHINE = "2s1d2n2l16c2t"  # 256 CPUs
BIG_MACHINE = "2s1d4n4l16c2t"  # 1,024 CPUs
NODE = "bench-node"
GOAL_P99_MS = 1.0
GOAL_EXCLUSIVE_P50_MS = 0.5
GOAL_RSS_MIB = 80.0

_API_PROCESS = """
import asyncio, sys
sys.path.insert(0, {src!r})
from topodra.embedded.apiserver import ApiServer
from topodra.embedded.store import KINDS, Store
async def main():
    store = Store()
    store.create(KINDS[("", "nodes")], None, {{"apiVersion": "v1", "kind": "Node", "metadata": {{"name": {node!r}}}}})
    api = ApiServer(store)
    await api.start()
    print(api.url, flush=True)
    await asyncio.Event().wait()
asyncio.run(main())
"""

_BARE_PLUGIN_PROCESS = """
import asyncio, sys
sys.path.insert(0, {src!r})
from topodra.nri.plugin import Plugin
from topodra.nri.stub import Stub
class Bare(Plugin):
    async def create_container(self, pod, container):
        return None
asyncio.run(Stub(Bare(), socket_path={sock!r}, name="bare", idx="50", env={{}}, reconnect=False).run())
"""


#: ``BENCH_AGENT_TRACE=1``: the agent runs under this tracer, which notes (in CLOCK_MONOTONIC
#: time, the same clock as this process's ``perf_counter``) every loop callback over 0.2 ms and
#: every collection, and writes them out at exit; the slowest round trips are then printed with
#: what the agent's loop and collector were doing meanwhile.
_TRACED_AGENT = """
import asyncio, asyncio.events, atexit, gc, json, sys, time
sys.path.insert(0, {src!r})
out = {out!r}
slow, gcs, pending = [], [], {{}}
run = asyncio.events.Handle._run
def _where(task):
    coro, at = task.get_coro(), ""
    while coro is not None and getattr(coro, "cr_frame", None) is not None:
        at = coro.cr_code.co_name + ":" + str(coro.cr_frame.f_lineno)
        coro = coro.cr_await
    return at
def _run(self):
    task = getattr(self._callback, "__self__", None)
    at = _where(task) if isinstance(task, asyncio.Task) else ""
    t0, c0 = time.perf_counter(), time.thread_time()
    run(self)
    t1 = time.perf_counter()
    if t1 - t0 > 2e-4:
        cpu = time.thread_time() - c0
        what = repr(self)
        if isinstance(task, asyncio.Task):
            coro = task.get_coro()
            what = task.get_name() + " " + getattr(coro, "__qualname__", repr(coro)) + " from " + at
        slow.append((t0, t1, cpu, what[:160]))
asyncio.events.Handle._run = _run
def _gc(phase, info):
    if phase == "start":
        pending["t"] = time.perf_counter()
    else:
        gcs.append((pending.pop("t", 0.0), time.perf_counter(), info["generation"], info["collected"]))
gc.callbacks.append(_gc)
atexit.register(lambda: open(out, "w").write(json.dumps({{"slow": slow, "gc": gcs}})))
sys.argv = ["topodra", *{argv!r}]
from topodra.cli import main
main()
"""


def _trace_report(run: _Run, path: Path, worst: int = 12) -> None:
    """The slowest agent round trips, each with the agent's slow loop steps and collections
    that overlapped it (to stderr: a diagnosis, not a figure)."""
    if not path.exists():
        print(f"trace: the agent wrote no {path}", file=sys.stderr)
        return
    trace = json.loads(path.read_text())
    t_lo, t_hi = run.spans[0][0], run.spans[-1][1]
    slow = [s for s in trace["slow"] if s[1] >= t_lo and s[0] <= t_hi]
    gcs = [g for g in trace["gc"] if g[1] >= t_lo and g[0] <= t_hi]
    print(f"trace: {len(slow)} loop steps > 0.2 ms and {len(gcs)} collections "
          f"(gen2: {sum(1 for g in gcs if g[2] == 2)}) during the run", file=sys.stderr)
    by_kind: dict[str, list[float]] = {}
    for _, _, cpu, what in slow:
        by_kind.setdefault(what.split(" ", 1)[-1][:90], []).append(cpu * 1000)
    for what, cpus in sorted(by_kind.items(), key=lambda kv: -max(kv[1])):
        print(f"  {len(cpus):4d} x {what}: CPU max {max(cpus):.2f} ms, median {median(cpus):.2f} ms", file=sys.stderr)
    order = sorted(range(len(run.agent)), key=lambda i: -run.agent[i])[:worst]
    for i in order:
        t0, t1 = run.spans[i]
        hand = run.handler[i] * 1000 if i < len(run.handler) else float("nan")
        cpu = sum(c for a, b, c, _ in slow if b >= t0 and a <= t1) * 1000
        print(f"#{i}: round trip {run.agent[i] * 1000:.2f} ms, handler {hand:.2f} ms, "
              f"agent CPU in the steps overlapping it {cpu:.2f} ms", file=sys.stderr)
        for a, b, cpu, what in slow:
            if b >= t0 and a <= t1:
                print(f"    step {(b - a) * 1000:6.2f} ms ({cpu * 1000:5.2f} ms CPU) at +{(a - t0) * 1000:6.2f}: {what}",
                      file=sys.stderr)
        for a, b, gen, n in gcs:
            if b >= t0 and a <= t1:
                print(f"    gc gen{gen} {(b - a) * 1000:6.2f} ms at +{(a - t0) * 1000:6.2f} ({n} collected)", file=sys.stderr)


def _resources(i: int) -> tuple[str, LinuxResources]:
    if i % 10 == 0:
        return "", LinuxResources(cpu_shares=2048, cpu_quota=200_000, cpu_period=100_000, memory_limit=256 << 20)
    if i % 3 == 0:
        return "besteffort/", LinuxResources(cpu_shares=2)
    return "burstable/", LinuxResources(cpu_shares=256, memory_limit=128 << 20)


def _create_request(i: int) -> bytes:
    qos_dir, res = _resources(i)
    pod = Pod(id=f"s{i}", name=f"pod{i}", uid=f"uid{i}", namespace="bench", cgroup_parent=f"/kubepods/{qos_dir}poduid{i}")
    ctr = Container(
        id=f"c{i}", pod_sandbox_id=pod.id, name="app", state=ContainerState.CREATED, resources=res,
        cgroups_path=f"/kubepods/{qos_dir}poduid{i}/c{i}",
    )
    req = api_pb2.CreateContainerRequest()
    convert.pod_to_proto(pod, req.pod)
    convert.container_to_proto(ctr, req.container)
    return req.SerializeToString()


class _Runtime(asyncio.Protocol):
    """The runtime end of one plugin's socket: answers RegisterPlugin and UpdateContainers,
    times the calls it makes. The socket's protocol itself, so a reply is timed in the read
    callback that receives it (no reader task between the socket and the clock)."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.session = Session(Role.RUNTIME)
        self._answers: dict[int, asyncio.Future[tuple[ResponseReceived, float]]] = {}
        self._accepted: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._transport: asyncio.Transport | None = None
        self._server: asyncio.Server | None = None
        self._empty_updates = api_pb2.UpdateContainersResponse().SerializeToString()
        self.t0 = 0.0

    async def start(self) -> None:
        self._server = await asyncio.get_running_loop().create_unix_server(self._protocol, path=self.path)

    def _protocol(self) -> asyncio.Protocol:
        return asyncio.Protocol() if self._accepted.done() else self  # one plugin per socket

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self._transport = transport
        self._accepted.set_result(None)

    def data_received(self, data: bytes) -> None:
        assert self._transport is not None
        events = self.session.receive_data(data)
        now = time.perf_counter()  # the reply frame decoded
        for ev in events:
            if isinstance(ev, ResponseReceived):
                fut = self._answers.pop(ev.stream_id, None)
                if fut is not None and not fut.done():
                    fut.set_result((ev, now))
            elif isinstance(ev, RequestReceived):  # RegisterPlugin, UpdateContainers
                payload = self._empty_updates if ev.request.method == "UpdateContainers" else b""
                self.session.send_response(ev.stream_id, payload)
        if out := self.session.data_to_send():
            self._transport.write(out)

    async def connected(self, timeout: float) -> None:
        await asyncio.wait_for(self._accepted, timeout)

    async def call(self, method: str, payload: bytes) -> tuple[bytes, float]:
        assert self._transport is not None
        t0 = self.t0 = time.perf_counter()
        sid = self.session.start_request(PLUGIN_SERVICE, method, payload, timeout_nano=2_000_000_000)
        fut = self._answers[sid] = asyncio.get_running_loop().create_future()
        self._transport.write(self.session.data_to_send())
        reply, t1 = await asyncio.wait_for(fut, 10)
        if not reply.status.ok:
            raise RuntimeError(f"{method} failed: {reply.status}")
        return reply.payload, t1 - t0

    async def setup(self) -> None:
        configure = api_pb2.ConfigureRequest(runtime_name="bench", runtime_version="v0", NRI_version="v0.12.2")
        await self.call("Configure", configure.SerializeToString())
        await self.call("Synchronize", b"")

    async def stop(self) -> None:
        if self._transport is not None:
            self._transport.close()
        if self._server is not None:
            self._server.close()


@dataclass
class _Run:
    agent: list[float] = field(default_factory=list)
    bare: list[float] = field(default_factory=list)
    handler: list[float] = field(default_factory=list)
    rss_kib: int = 0
    updates: int = 0
    spans: list[tuple[float, float]] = field(default_factory=list)  # each agent call, perf_counter
    slice_writes: int = 0  # the agent's slice writes during the calls (replayed from the watch log after)
    slice_bytes: int = 0  # their objects' size as the watch sends them
    generations: int = 0  # pool generations moved meanwhile


async def _slice_events(url: str, since: str) -> tuple[int, int, int]:
    """The ResourceSlice events after ``since``, replayed from the API server double's event log
    once the calls are done (watching during the run would add a reader to the measurement):
    their count, their size, and the highest pool generation seen."""
    from topodra.kube.client import RESOURCE_SLICES, KubeClient

    count = size = generation = 0
    async with KubeClient.for_url(url) as client:
        lines = aiter(client.watch_lines(RESOURCE_SLICES, fields={"spec.nodeName": NODE}, resource_version=since))
        while True:
            try:
                line = await asyncio.wait_for(anext(lines), 1.0)
            except (TimeoutError, StopAsyncIteration):
                break
            event = json.loads(line)
            count += 1
            size += len(line)
            pool = ((event.get("object") or {}).get("spec") or {}).get("pool") or {}
            generation = max(generation, int(pool.get("generation", 0)))
    return count, size, generation


async def _pool_state(url: str) -> tuple[str, int]:
    """The slices' list resourceVersion and the pool's generation now."""
    from topodra.kube.client import RESOURCE_SLICES, KubeClient

    async with KubeClient.for_url(url) as client:
        items, rv = await client.list(RESOURCE_SLICES, fields={"spec.nodeName": NODE})
    return rv, max((int(s["spec"]["pool"]["generation"]) for s in items), default=0)


async def _spawn(script: str, log: Path) -> asyncio.subprocess.Process:
    return await asyncio.create_subprocess_exec(
        sys.executable, "-c", script, stdout=asyncio.subprocess.PIPE, stderr=open(log, "ab")
    )


async def _start_agent(
    base: Path, machine: str, api_url: str, log: Path, trace: Path | None = None
) -> tuple[asyncio.subprocess.Process, int]:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    for sub in ("kubelet", "cdi", "state"):
        (base / sub).mkdir()
    cfg = {
        "nodeName": NODE,
        "topology": f"synthetic:{machine}",
        "kubeletRoot": str(base / "kubelet"),
        "cdiDir": str(base / "cdi"),
        "stateDir": str(base / "state"),
        "metricsAddress": f"127.0.0.1:{port}",
        "stateAddress": f"127.0.0.1:{port}",
        "nri": {"socket": str(base / "agent.sock")},
        "kube": {"server": api_url},
    }
    path = base / "agent.yaml"
    path.write_text(json.dumps(cfg))
    path.chmod(0o600)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in (str(ROOT / "src"), os.environ.get("PYTHONPATH", "")) if p)}
    argv = ["agent", "--config", str(path)]
    command = ["-m", "topodra", *argv]
    if trace is not None:
        command = ["-c", _TRACED_AGENT.format(src=str(ROOT / "src"), out=str(trace), argv=argv)]
    proc = await asyncio.create_subprocess_exec(
        sys.executable, *command,
        env=env, stdout=asyncio.subprocess.DEVNULL, stderr=open(log, "ab"),  # noqa: SIM115
    )
    return proc, port


async def _measure(machine: str, count: int) -> _Run:
    run = _Run()
    procs: list[asyncio.subprocess.Process] = []
    runtimes: list[_Runtime] = []
    with tempfile.TemporaryDirectory(prefix="bench-agent-", dir="/tmp") as tmp:
        base = Path(tmp)
        log = base / "peers.log"
        trace = base / "trace.json" if os.environ.get("BENCH_AGENT_TRACE") else None
        try:
            api = await _spawn(_API_PROCESS.format(src=str(ROOT / "src"), node=NODE), log)
            procs.append(api)
            assert api.stdout is not None
            api_url = (await asyncio.wait_for(api.stdout.readline(), 30)).decode().strip()
            agent_rt, bare_rt = _Runtime(str(base / "agent.sock")), _Runtime(str(base / "bare.sock"))
            runtimes += [agent_rt, bare_rt]
            await agent_rt.start()
            await bare_rt.start()
            agent, port = await _start_agent(base, machine, api_url, base / "agent.log", trace)
            procs.append(agent)
            procs.append(await _spawn(_BARE_PLUGIN_PROCESS.format(src=str(ROOT / "src"), sock=bare_rt.path), log))
            try:
                await agent_rt.connected(60)
                await bare_rt.connected(60)
            except TimeoutError:
                raise RuntimeError("a plugin did not connect:\n" + (base / "agent.log").read_text()[-2000:]) from None
            await agent_rt.setup()
            await bare_rt.setup()
            payloads = [_create_request(i) for i in range(count)]
            await asyncio.sleep(1.0)  # let the first slice publication pass
            since, generation = await _pool_state(api_url)
            for i, payload in enumerate(payloads):
                reply, took = await agent_rt.call("CreateContainer", payload)
                run.agent.append(took)
                run.spans.append((agent_rt.t0, agent_rt.t0 + took))
                _, took = await bare_rt.call("CreateContainer", payload)
                run.bare.append(took)
                answer = api_pb2.CreateContainerResponse.FromString(reply)
                if not answer.adjust.linux.resources.cpu.cpus:
                    raise RuntimeError(f"container {i}: the agent set no cpus")
                run.updates += len(answer.update)
            run.rss_kib = _rss_kib(agent.pid)
            await asyncio.sleep(0.5)  # the last offer written (publish delay 0.1 s)
            run.slice_writes, run.slice_bytes, last = await _slice_events(api_url, since)
            run.generations = max(last - generation, 0)
            status, body = await get(f"127.0.0.1:{port}", "/state/nri")
            if status != 200:
                raise RuntimeError(f"the agent's /state/nri answered {status}")
            run.handler = json.loads(body)["handler_seconds"]["CreateContainer"][-count:]
        finally:
            for rt in runtimes:
                await rt.stop()
            for proc in procs:
                with contextlib.suppress(ProcessLookupError):
                    proc.terminate()
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(proc.wait(), 10)
                with contextlib.suppress(ProcessLookupError):
                    proc.kill()
                await proc.wait()
        if trace is not None and run.spans:
            _trace_report(run, trace)
    return run


def _rss_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return 0


def _report(run: _Run, label: str, cpus: int, count: int, *, goals: bool) -> list[Result]:
    ms = [x * 1000 for x in run.agent]
    bare = [x * 1000 for x in run.bare]
    handler = [x * 1000 for x in run.handler]
    exclusive = [ms[i] for i in range(0, len(ms), 10)]
    exclusive_handler = [handler[i] for i in range(0, len(handler), 10)]
    p50, p99 = median(ms), percentile(ms, 99)
    bare50, bare99 = median(bare), percentile(bare, 99)
    ex50, ex99 = median(exclusive), percentile(exclusive, 99)
    rss = run.rss_kib / 1024
    where = f"{count} containers, {cpus} CPUs"

    return [
        Result(f"create_p50{label}", p50, "ms", note=f"{where}; bare NRI {bare50:.3f} ms, x{p50 / bare50:.2f}"),
        Result(f"create_p99{label}", p99, "ms", note=f"bare NRI p99 {bare99:.3f} ms, x{p99 / bare99:.2f}",
               goal=f"<= {GOAL_P99_MS} ms" if goals else None, met=(p99 <= GOAL_P99_MS) if goals else None),
        Result(f"create_p50_vs_bare{label}", p50 / bare50, "x", note="agent round trip / bare NRI round trip, p50"),
        Result(f"create_p99_vs_bare{label}", p99 / bare99, "x", note="agent round trip / bare NRI round trip, p99"),
        Result(f"bare_nri_p50{label}", bare50, "ms", note="a plugin that does nothing, same transport, same run"),
        Result(f"bare_nri_p99{label}", bare99, "ms"),
        Result(f"create_exclusive_p50{label}", ex50, "ms", note=f"answers with updates of every shared container; x{ex50 / bare50:.2f} bare p50",
               goal=f"<= {GOAL_EXCLUSIVE_P50_MS} ms" if goals else None, met=(ex50 <= GOAL_EXCLUSIVE_P50_MS) if goals else None),
        Result(f"create_exclusive_p50_vs_bare{label}", ex50 / bare50, "x",
               note=f"exclusive round trip / bare NRI p50; the agent's own part: {median(exclusive_handler):.3f} ms"),
        Result(f"create_exclusive_p99{label}", ex99, "ms", note=f"x{ex99 / bare99:.2f} bare p99 ({len(exclusive)} exclusive calls)"),
        Result(f"handler_p50{label}", median(handler), "ms", note="the agent's own time: request bytes in to reply bytes out"),
        Result(f"handler_p99{label}", percentile(handler, 99), "ms"),
        Result(f"handler_exclusive_p50{label}", median(exclusive_handler), "ms", note=f"{run.updates} updates in {count} replies"),
        Result(f"slice_writes{label}", run.slice_writes, "writes",
               note=f"the agent's slice writes during the {count} calls: {run.slice_bytes / 1024:.0f} KiB of watch events, "
                    f"pool generation moved {run.generations} times"),
        Result(f"agent_rss{label}", rss, "MiB", note=f"after {count} containers",
               goal=f"<= {GOAL_RSS_MIB:g} MiB" if goals else None, met=(rss <= GOAL_RSS_MIB) if goals else None),
    ]


def run(quick: bool) -> list[Result]:
    count = 150 if quick else 500
    results = _report(asyncio.run(_measure(MACHINE, count)), "", 256, count, goals=True)
    results += _report_writes(asyncio.run(_measure_writes(MACHINE, 10 if quick else 30)), 256)
    results += _report_puts(asyncio.run(_measure_puts(MACHINE, 40 if quick else 150)), 256)
    if not quick:
        results += _report(asyncio.run(_measure(BIG_MACHINE, 2000)), "_1024cpu_2000", 1024, 2000, goals=False)
        results += _report_writes(asyncio.run(_measure_writes(BIG_MACHINE, 20)), 1024, "_1024cpu")
    return results


# --- one slice write, seen from the event loop -----------------------------------------------------
async def _loop_probe(gaps: list[float], stop: asyncio.Event) -> None:
    """Yields to the loop back to back; every gap between two turns is time something else held it
    (in this thread's CPU time: on a shared machine, wall gaps also hold the time the process
    waited for a core)."""
    last = time.thread_time()
    while not stop.is_set():
        await asyncio.sleep(0)
        now = time.thread_time()
        gaps.append(now - last)
        last = now


@dataclass
class _Writes:
    blocked: list[float] = field(default_factory=list)  # the loop held by a write, summed over its steps
    longest: list[float] = field(default_factory=list)  # the longest single step
    idle: list[float] = field(default_factory=list)  # the same sum over as long with nothing to do
    wall: list[float] = field(default_factory=list)
    puts: list[int] = field(default_factory=list)  # slice writes (PUT/POST) per new offer
    sent: list[int] = field(default_factory=list)  # request body bytes per new offer
    bumps: int = 0  # new offers that moved the pool generation


async def _probe(seconds: float) -> list[float]:
    gaps: list[float] = []
    stop = asyncio.Event()
    probe = asyncio.create_task(_loop_probe(gaps, stop))
    await asyncio.sleep(seconds)
    stop.set()
    await probe
    return gaps


def _steps(gaps: list[float]) -> list[float]:
    return [g for g in gaps if g > 20e-6]  # the probe's own turn is a few µs


async def _measure_writes(machine: str, writes: int) -> dict[str, _Writes]:
    """The agent's slice publication in this process (a running ``SliceReconciler``, its watch
    included, given a new offer: two CPUs withdrawn or offered again), the API server double in
    another, and a probe task on this loop measuring how long each write keeps the loop from
    other work (a CreateContainer waits that long), from the new offer until the write is out
    and 50 ms more (the watch re-established); beside it, the same probe on the idle loop for
    as long (the probe's own noise floor). Two reconcilers (two nodes) alternate: ``homes``
    (devices stay in their home slice, as the agent publishes) and ``chunked`` (the offered list
    chunked afresh: every later device shifts), the peer measured in the same run."""
    from topodra.dra.devices import build_devices
    from topodra.dra.reconciler import SliceReconciler
    from topodra.kube.client import NODES, KubeClient
    from topodra.topology.machine import load_machine

    devices = build_devices(load_machine(f"synthetic:{machine}"))
    out = {"homes": _Writes(), "chunked": _Writes()}
    log = Path(tempfile.gettempdir()) / "bench-agent-writes.log"
    api = await _spawn(_API_PROCESS.format(src=str(ROOT / "src"), node=NODE), log)
    try:
        assert api.stdout is not None
        url = (await asyncio.wait_for(api.stdout.readline(), 30)).decode().strip()
        async with KubeClient.for_url(url) as client:
            sent: list[int] = []  # body sizes of the slice writes since the last new offer

            def counting(real: Any) -> Any:
                def counted(*args: Any) -> Any:
                    sent.append(len(args[-1]))  # the body
                    return real(*args)

                return counted

            for method in ("create_encoded", "replace_encoded"):
                setattr(client, method, counting(getattr(client, method)))
            await client.create(NODES, {"metadata": {"name": NODE + "-peer"}})  # owned, as the agent's
            recs = {
                "homes": SliceReconciler(client, NODE, devices, homes=devices),
                "chunked": SliceReconciler(client, NODE + "-peer", devices),
            }
            stop = asyncio.Event()
            tasks = [asyncio.create_task(rec.run(stop)) for rec in recs.values()]
            for rec in recs.values():
                await rec.wait_written(30)
            await asyncio.sleep(0.2)
            # Exclusive grants as they come and go: each new offer withdraws one more core (its two
            # threads, next to each other in device order; cores 37 apart, all over the machine),
            # every third one also offers the oldest withdrawn core again.
            cores = len(devices) // 2
            held: list[int] = []
            offers: list[set[int]] = []
            for k in range(writes + 2):
                held.append((37 * k) % cores)
                if k % 3 == 2:
                    held.pop(0)
                offers.append({j for c in held for j in (2 * c, 2 * c + 1)})
            for i in range(2 * (writes + 2)):
                kind = ("homes", "chunked")[i % 2]
                rec, w, k = recs[kind], out[kind], i // 2
                gaps: list[float] = []
                done = asyncio.Event()
                probe = asyncio.create_task(_loop_probe(gaps, done))
                await asyncio.sleep(0)
                sent.clear()
                generation = rec.generation
                t0 = time.perf_counter()
                rec.set_devices([d for j, d in enumerate(devices) if j not in offers[k]])
                await rec.wait_written(30)
                took = time.perf_counter() - t0
                await asyncio.sleep(0.05)
                done.set()
                await probe
                idle = await _probe(took + 0.05)
                if k < 2:
                    continue  # warm-up: connections, caches
                w.wall.append(took)
                w.blocked.append(sum(_steps(gaps)))
                w.longest.append(max(_steps(gaps), default=0.0))
                w.idle.append(sum(_steps(idle)))
                w.puts.append(len(sent))
                w.sent.append(sum(sent))
                w.bumps += rec.generation != generation
            stop.set()
            for task in tasks:
                await asyncio.wait_for(task, 10)
    finally:
        with contextlib.suppress(ProcessLookupError):
            api.terminate()
        await api.wait()
    return out


def _report_writes(both: dict[str, _Writes], cpus: int, label: str = "") -> list[Result]:
    w, peer = both["homes"], both["chunked"]
    blocked, longest, idle = median(w.blocked) * 1000, median(w.longest) * 1000, median(w.idle) * 1000
    peer_blocked, peer_wall = median(peer.blocked) * 1000, median(peer.wall) * 1000
    puts, peer_puts = median([float(x) for x in w.puts]), median([float(x) for x in peer.puts])
    kib, peer_kib = median([float(x) for x in w.sent]) / 1024, median([float(x) for x in peer.sent]) / 1024
    over = median([b - i for b, i in zip(w.blocked, w.idle, strict=True)]) * 1000
    peer_over = median([b - i for b, i in zip(peer.blocked, peer.idle, strict=True)]) * 1000
    return [
        Result(f"slice_write_blocked_p50{label}", blocked, "ms",
               note=f"loop held per new offer incl. the watch ({cpus} CPUs, {len(w.wall)} offers); idle loop over as long: {idle:.3f} ms; "
                    f"chunked afresh: {peer_blocked:.3f} ms (x{peer_blocked / blocked:.2f})"),
        Result(f"slice_write_blocked_over_idle_p50{label}", over, "ms",
               note="per new offer, the loop held beyond the idle probe's own floor over as long (the floor is most of "
                    f"the figure above on a busy machine); chunked afresh: {peer_over:.3f} ms"),
        Result(f"slice_write_blocked_max{label}", max(w.blocked) * 1000, "ms"),
        Result(f"slice_write_longest_step_p50{label}", longest, "ms", note="the longest single loop step of a write"),
        Result(f"slice_write_wall_p50{label}", median(w.wall) * 1000, "ms",
               note=f"new offer to written, API server double in another process; chunked afresh: {peer_wall:.3f} ms (x{peer_wall / (median(w.wall) * 1000):.2f})"),
        Result(f"slice_write_puts{label}", puts, "PUTs",
               note=f"slice writes per new offer (a core withdrawn, or one withdrawn and one offered again); chunked afresh: {peer_puts:g} "
                    f"(generation moved {w.bumps}/{len(w.puts)} vs {peer.bumps}/{len(peer.puts)})"),
        Result(f"slice_write_kib{label}", kib, "KiB",
               note=f"request bytes per new offer; chunked afresh: {peer_kib:.1f} KiB (x{peer_kib / kib:.2f})"),
    ]


# --- one slice PUT, the lean path against httpx's --------------------------------------------------
async def _measure_puts(machine: str, puts: int) -> dict[str, list[float]]:
    """The thread CPU of one ``replace_encoded`` of the pool's first slice (the API server double
    in another process), on the client's lean path (kube/wire.py) and on httpx's, alternated in
    one run; and, in other PUTs (the probe costs CPU), the longest loop step of a PUT."""
    from topodra.dra.devices import build_devices
    from topodra.dra.slices import build_slices, chunk_devices, encode_slice
    from topodra.kube.client import RESOURCE_SLICES, KubeClient
    from topodra.topology.machine import load_machine

    devices = build_devices(load_machine(f"synthetic:{machine}"))
    chunks = chunk_devices(devices)
    first = build_slices(NODE, devices, generation=1, chunks=chunks)[0]
    name = first["metadata"]["name"]
    out: dict[str, list[float]] = {"lean": [], "httpx": [], "lean_step": [], "httpx_step": [], "bytes": []}
    log = Path(tempfile.gettempdir()) / "bench-agent-puts.log"
    api = await _spawn(_API_PROCESS.format(src=str(ROOT / "src"), node=NODE), log)
    try:
        assert api.stdout is not None
        url = (await asyncio.wait_for(api.stdout.readline(), 30)).decode().strip()
        async with KubeClient.for_url(url) as lean, KubeClient.for_url(url) as plain:
            plain._lean = None  # httpx only
            answer = await lean.create_encoded(RESOURCE_SLICES, encode_slice(first, chunks[0]))
            rv = json.loads(answer)["metadata"]["resourceVersion"]
            for i in range(4 * puts + 8):
                kind, client = ("lean", lean) if i % 2 else ("httpx", plain)
                probed = i % 4 >= 2  # CPU without the probe, the longest step with it
                body = encode_slice({**first, "metadata": {**first["metadata"], "resourceVersion": rv}}, chunks[0])
                gaps: list[float] = []
                done = asyncio.Event()
                probe = asyncio.create_task(_loop_probe(gaps, done)) if probed else None
                await asyncio.sleep(0)
                t0 = time.thread_time()
                answer = await client.replace_encoded(RESOURCE_SLICES, name, body)
                cpu = time.thread_time() - t0
                done.set()
                if probe is not None:
                    await probe
                rv = json.loads(answer)["metadata"]["resourceVersion"]
                if i < 8:
                    continue  # warm-up: connections
                if probed:
                    out[kind + "_step"].append(max(_steps(gaps), default=0.0))
                else:
                    out[kind].append(cpu)
            out["bytes"].append(len(body))
    finally:
        with contextlib.suppress(ProcessLookupError):
            api.terminate()
        await api.wait()
    return out


def _report_puts(p: dict[str, list[float]], cpus: int) -> list[Result]:
    lean, plain = median(p["lean"]) * 1000, median(p["httpx"]) * 1000
    step, plain_step = median(p["lean_step"]) * 1000, median(p["httpx_step"]) * 1000
    size = int(p["bytes"][0]) // 1024
    return [
        Result("slice_put_cpu_p50", lean, "ms",
               note=f"thread CPU of one {size} KiB slice PUT, lean path ({cpus} CPUs, {len(p['lean'])} PUTs); "
                    f"httpx path in the same run: {plain:.3f} ms (x{plain / lean:.2f})"),
        Result("slice_put_longest_step_p50", step, "ms",
               note=f"the longest loop step of one PUT; httpx path: {plain_step:.3f} ms (x{plain_step / step:.2f})"),
    ]
