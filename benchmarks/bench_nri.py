"""NRI: CreateContainer round trips over a real socket, codec throughput, and a fuzz run.

* ``create_rtt``: a plugin (our ``Stub`` with a trivial handler) runs in its own
  process; this process plays the runtime with a bare ``Session`` and times
  CreateContainer from request written to reply decoded, with a realistic
  634-byte request (the shape of the recorded containerd requests).
* ``embedded_create``: ``EmbeddedRuntime.create_container`` end to end with one
  stub plugin in the same process (both sides' Python cost).
* ``frames``/``requests``: mux frames and ttrpc requests decoded per second.
* ``reply_encode``: the agent's exclusive CreateContainer reply (an adjustment and nine
  followers moved to one new shared set, 256-CPU lists, sets never seen before) written by
  ``replywire`` against the same reply built with upb, alternated.
* ``fuzz``: recorded runtime->plugin traffic, mutated, fed to the plugin-side
  session and the payload decoders; any exception other than the protocol's
  own errors is a failure.
"""

from __future__ import annotations

import asyncio
import contextlib
import gzip
import json
import logging
import os
import random
import sys
import tempfile
import time
from pathlib import Path

from benchmarks.common import Result, percentile
from topodra.cpuset import CPUSet
from topodra.embedded.runtime import EmbeddedRuntime
from topodra.nri import convert, mux, replywire, ttrpc
from topodra.nri.errors import ProtocolError
from topodra.nri.logger import EventLogger
from topodra.nri.plugin import Plugin
from topodra.nri.proto import api_pb2
from topodra.nri.session import RequestReceived, ResponseReceived, Role, Session
from topodra.nri.stub import PLUGIN_SERVICE, Stub
from topodra.nri.types import (
    Container,
    ContainerAdjustment,
    ContainerUpdate,
    LinuxResources,
    Pod,
    placement_update,
)

ROOT = Path(__file__).resolve().parents[1]
TRANSCRIPTS = ROOT / "tests" / "data" / "nri-transcripts"

_PLUGIN_PROCESS = """
import asyncio, sys
sys.path.insert(0, {src!r})
from topodra.cpuset import CPUSet
from topodra.nri.plugin import Plugin
from topodra.nri.stub import Stub
from topodra.nri.types import ContainerAdjustment
class Trivial(Plugin):
    async def create_container(self, pod, container):
        return ContainerAdjustment(cpus=CPUSet({{2, 3}}), mems=CPUSet({{0}}))
asyncio.run(Stub(Trivial(), socket_path={sock!r}, name="bench", idx="50", env={{}}, reconnect=False).run())
"""


def _create_request(i: int) -> bytes:
    req = api_pb2.CreateContainerRequest()
    pod = req.pod
    pod.id, pod.name, pod.uid, pod.namespace, pod.runtime_handler = "pod2", "pod-2", "uid-2", "default", "runc"
    pod.labels["app"] = "app2"
    pod.linux.cgroup_parent = "/kubepods/burstable/podpod2"
    pod.linux.pod_resources.cpu.shares.value = 1024
    ctr = req.container
    ctr.id, ctr.pod_sandbox_id, ctr.name = f"pod2-ctr{i}", "pod2", f"ctr-{i}"
    ctr.state = api_pb2.CONTAINER_CREATED
    ctr.labels["io.kubernetes.container.name"] = f"ctr-{i}"
    ctr.args.extend(["/bin/sleep", "3600"])
    ctr.env.extend(["PATH=/usr/bin:/bin", "HARNESS=1"])
    ctr.mounts.add(destination="/etc/hosts", type="bind", source="/var/lib/harness/hosts", options=["rbind", "ro"])
    for ns in ("pid", "ipc", "uts", "mount", "network"):
        ctr.linux.namespaces.add(type=ns)
    ctr.linux.resources.memory.limit.value = 268435456
    ctr.linux.resources.cpu.shares.value = 512
    ctr.linux.resources.cpu.quota.value = 100000
    ctr.linux.resources.cpu.period.value = 100000
    ctr.linux.cgroups_path = f"/kubepods/burstable/podpod2/pod2-ctr{i}"
    ctr.image.name = "registry.k8s.io/pause:3.10"
    return req.SerializeToString()


async def _create_rtt(count: int) -> list[float]:
    with tempfile.TemporaryDirectory(prefix="bench-nri-") as tmp:
        sock = os.path.join(tmp, "nri.sock")
        accepted: asyncio.Future[tuple[asyncio.StreamReader, asyncio.StreamWriter]] = (
            asyncio.get_running_loop().create_future()
        )
        server = await asyncio.start_unix_server(lambda r, w: accepted.set_result((r, w)), path=sock)
        script = _PLUGIN_PROCESS.format(src=str(ROOT / "src"), sock=sock)
        proc = await asyncio.create_subprocess_exec(sys.executable, "-c", script)
        try:
            reader, writer = await asyncio.wait_for(accepted, 30)
            session = Session(Role.RUNTIME)
            answers: dict[int, asyncio.Future[ResponseReceived]] = {}

            async def pump() -> None:
                while data := await reader.read(65536):
                    for ev in session.receive_data(data):
                        if isinstance(ev, RequestReceived):  # RegisterPlugin
                            session.send_response(ev.stream_id)
                        elif isinstance(ev, ResponseReceived):
                            answers[ev.stream_id].set_result(ev)
                    writer.write(session.data_to_send())

            reading = asyncio.get_running_loop().create_task(pump())

            async def call(method: str, payload: bytes) -> tuple[ResponseReceived, float]:
                t0 = time.perf_counter()
                sid = session.start_request(PLUGIN_SERVICE, method, payload, timeout_nano=2_000_000_000)
                fut = answers[sid] = asyncio.get_running_loop().create_future()
                writer.write(session.data_to_send())
                reply = await asyncio.wait_for(fut, 10)
                del answers[sid]
                return reply, time.perf_counter() - t0

            configure = api_pb2.ConfigureRequest(runtime_name="bench", runtime_version="v0", NRI_version="v0.12.2")
            await call("Configure", configure.SerializeToString())
            await call("Synchronize", b"")
            payloads = [_create_request(i) for i in range(64)]
            for i in range(50):  # warm up
                await call("CreateContainer", payloads[i % 64])
            times = []
            for i in range(count):
                reply, took = await call("CreateContainer", payloads[i % 64])
                if not (reply.status.ok and reply.payload):
                    raise RuntimeError(f"CreateContainer failed: {reply.status}")
                times.append(took)
            reading.cancel()
            writer.close()
            return times
        finally:
            server.close()
            with contextlib.suppress(ProcessLookupError):
                proc.kill()
            await proc.wait()


class _Pin(Plugin):
    async def create_container(self, pod: Pod, container: Container) -> ContainerAdjustment:
        return ContainerAdjustment(cpus=CPUSet({1}))


async def _embedded(count: int) -> list[float]:
    with tempfile.TemporaryDirectory(prefix="bench-nri-") as tmp:
        rt = EmbeddedRuntime(Path(tmp) / "nri.sock")
        await rt.start()
        stub = Stub(_Pin(), socket_path=str(Path(tmp) / "nri.sock"), name="pin", idx="10", env={}, reconnect=False)
        task = asyncio.get_running_loop().create_task(stub.run())
        await rt.wait_for_plugins(1)
        await rt.run_pod_sandbox(Pod(id="p"))
        times = []
        for i in range(count):
            ctr = Container(id=f"c{i}", pod_sandbox_id="p", resources=LinuxResources(cpus=CPUSet.parse("0-7")))
            t0 = time.perf_counter()
            res = await rt.create_container(ctr)
            times.append(time.perf_counter() - t0)
            assert res.ok
            await rt.remove_container(ctr.id)
        await stub.stop()
        await task
        await rt.stop()
        return times


def _frames_per_second(count: int) -> tuple[float, float]:
    body = ttrpc.encode_request(ttrpc.Request(PLUGIN_SERVICE, "StateChange", b"\x08\x01" + b"\x12\x40" + b"p" * 64, 2 * 10**9))
    one = mux.encode_frames(1, ttrpc.encode_message(1, 1, body))
    stream = b"".join(mux.encode_frames(1, ttrpc.encode_message(2 * i + 1, 1, body)) for i in range(count))
    dec = mux.MuxDecoder()
    t0 = time.perf_counter()
    for start in range(0, len(stream), 65536):
        dec.feed(stream[start : start + 65536])
    frames = count / (time.perf_counter() - t0)
    session = Session(Role.PLUGIN)
    t0 = time.perf_counter()
    got = 0
    for start in range(0, len(stream), 65536):
        got += len(session.receive_data(stream[start : start + 65536]))
    requests = got / (time.perf_counter() - t0)
    assert got == count
    assert len(one) < 200
    return frames, requests


def _seeds() -> list[bytes]:
    seeds: list[bytes] = []
    for path in sorted(TRANSCRIPTS.glob("*.frames.jsonl")):
        data = b"".join(
            bytes.fromhex(rec["hex"])
            for rec in map(json.loads, path.read_text().splitlines())
            if rec.get("kind") == "frame" and rec.get("dir") == "runtime->plugin"
        )
        seeds.append(data)
    gz = TRANSCRIPTS / "split-sync.frames.jsonl.gz"
    if gz.exists():  # only its small frames: the 4 MB ones would dominate the run
        with gzip.open(gz, "rt") as fh:
            seeds.append(b"".join(
                bytes.fromhex(rec["hex"]) for rec in map(json.loads, fh)
                if rec.get("kind") == "frame" and rec.get("dir") == "runtime->plugin" and rec["len"] < 4096
            ))
    return [s for s in seeds if s] or [mux.encode_frames(1, ttrpc.encode_message(1, 1, b""))]


def _mutate(rng: random.Random, data: bytes) -> bytes:
    buf = bytearray(data)
    for _ in range(rng.randint(1, 8)):
        op = rng.random()
        if op < 0.4 and buf:
            buf[rng.randrange(len(buf))] = rng.getrandbits(8)
        elif op < 0.55 and buf:
            del buf[rng.randrange(len(buf)) :]
        elif op < 0.7 and buf:
            i = rng.randrange(len(buf))
            buf[i:i] = buf[i : i + rng.randint(1, 64)]
        elif op < 0.85:
            i = rng.randrange(len(buf) + 1)
            buf[i:i] = bytes(rng.getrandbits(8) for _ in range(rng.randint(1, 16)))
        elif len(buf) > 8:  # corrupt a length field near a frame start
            i = rng.randrange(0, len(buf) - 8)
            buf[i + 4 : i + 8] = rng.getrandbits(32).to_bytes(4, "big")
    return bytes(buf)


async def _fuzz_async(cases: int, seed: int) -> tuple[int, list[str]]:
    rng = random.Random(seed)
    seeds = _seeds()
    # a plugin with every handler, so every payload is decoded and converted
    stub = Stub(EventLogger(lambda record: None, log_files=False), name="fuzz", idx="01", env={})
    failures: list[str] = []
    events = 0
    for case in range(cases):
        data = _mutate(rng, rng.choice(seeds))
        session = Session(Role.PLUGIN)
        try:
            pos = 0
            while pos < len(data):
                step = rng.randint(1, 5000)
                for ev in session.receive_data(data[pos : pos + step]):
                    events += 1
                    if isinstance(ev, RequestReceived):
                        payload, status = await stub.handle(ev.request.method, ev.request.payload,
                                                            timeout_nano=ev.request.timeout_nano)
                        session.send_response(ev.stream_id, payload, status)
                pos += step
            session.eof()
            session.data_to_send()
        except ProtocolError:
            pass
        except Exception as exc:  # a crash: what the fuzz run looks for
            failures.append(f"case {case}: {type(exc).__name__}: {exc}")
    return events, failures


def _fuzz(cases: int, seed: int = 1) -> tuple[int, list[str]]:
    logging.getLogger("topodra.nri").setLevel(logging.CRITICAL)  # mutated requests log plenty
    try:
        return asyncio.run(_fuzz_async(cases, seed))
    finally:
        logging.getLogger("topodra.nri").setLevel(logging.NOTSET)


def _reply_encode(rounds: int) -> tuple[float, float]:
    """Median seconds to encode an exclusive-create reply: (direct writer, upb), alternated each
    round. The inputs are built beforehand with fresh sets (formatting them is part of either),
    each reply's exclusive and shared sets new within the writer's memo, its memory node not."""
    full = CPUSet.parse("0-255").mask
    node = CPUSet({0}).mask
    ids = [f"{i:064x}" for i in range(9)]  # containerd ids: 64 hex digits
    Reply = tuple[ContainerAdjustment, list[ContainerUpdate]]
    made = 0

    def inputs() -> Reply:
        nonlocal made
        a, b = 2 * (made % 60), 128 + 2 * ((made // 60) % 60)
        made += 1
        mine = 3 << a | 3 << b
        to, mems = CPUSet.from_mask(full & ~mine), CPUSet.from_mask(node)
        return ContainerAdjustment(cpus=CPUSet.from_mask(mine), mems=mems), [placement_update(c, to, mems) for c in ids]

    def direct(reply: Reply) -> bytes:
        return replywire.create_container_response(replywire.adjustment_bytes(reply[0]), reply[1])

    def upb(reply: Reply) -> bytes:
        pb = api_pb2.CreateContainerResponse()
        convert.adjustment_to_proto(reply[0], pb.adjust)
        convert.updates_to_proto(reply[1], pb.update)
        return pb.SerializeToString()

    made = 0
    first = direct(inputs())
    made = 0
    assert first == upb(inputs())
    times: tuple[list[float], list[float]] = ([], [])
    clock = time.perf_counter
    for _ in range(rounds):
        for encode, out in ((direct, times[0]), (upb, times[1])):
            batch = [inputs() for _ in range(20)]
            t0 = clock()
            for reply in batch:
                encode(reply)
            out.append((clock() - t0) / len(batch))
    return percentile(times[0], 50), percentile(times[1], 50)


def run(quick: bool) -> list[Result]:
    results: list[Result] = []
    rtt = asyncio.run(_create_rtt(300 if quick else 3000))
    results.append(Result("create_rtt_p50", percentile(rtt, 50) * 1e3, "ms", "< 1 ms", percentile(rtt, 50) < 1e-3,
                          "CreateContainer round trip, plugin in its own process, real unix socket"))
    results.append(Result("create_rtt_p99", percentile(rtt, 99) * 1e3, "ms", "< 5 ms", percentile(rtt, 99) < 5e-3))
    emb = asyncio.run(_embedded(100 if quick else 1000))
    results.append(Result("embedded_create_p50", percentile(emb, 50) * 1e3, "ms", "< 3 ms", percentile(emb, 50) < 3e-3,
                          "EmbeddedRuntime.create_container with one stub plugin, one process"))
    frames, requests = _frames_per_second(20_000 if quick else 200_000)
    results.append(Result("mux_frames_per_s", frames, "frames/s", ">= 200k", frames >= 200_000, "MuxDecoder.feed"))
    results.append(Result("ttrpc_requests_per_s", requests, "req/s", ">= 50k", requests >= 50_000,
                          "Session.receive_data: mux + ttrpc + envelope decode"))
    direct, upb = _reply_encode(100 if quick else 1000)
    results.append(Result("reply_encode_us", direct * 1e6, "us", note="exclusive CreateContainer reply, 9 updates, replywire"))
    results.append(Result("reply_encode_vs_upb", direct / upb, "x", "< 1", direct < upb,
                          f"the same reply built with upb: {upb * 1e6:.1f} us"))
    cases = 3000 if quick else 30_000
    t0 = time.perf_counter()
    events, failures = _fuzz(cases)
    for failure in failures[:10]:
        print("fuzz failure:", failure)
    results.append(Result("fuzz_failures", len(failures), "cases", "0", not failures,
                          f"{cases} mutated transcripts, {events} events, {time.perf_counter() - t0:.1f} s"))
    return results
