"""The NRI create path run on a scratch copy of the node before the runtime connects.

The first CreateContainer calls after a start pay for everything done for the first time: the
interpreter specialising each function's bytecode over its first runs, the encoders' and the
policy's caches filling, first-use imports. Left to real containers, they would be the slowest
calls of a start, and so its p99.

``warm_up`` answers a short, node-like mix of calls (exclusive, shared and best-effort creates,
an update, stops) on a scratch node (``scratch_node``): the NRI-handling components built on a
``NodeState`` of their own from the same configuration and machine, never connected, logging
nothing, with crash points held. The node's state is not touched and no peer sees anything;
the start pays for the scratch policy instead.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator

from topodra import faults
from topodra.agent.config import AgentConfig
from topodra.agent.parts import NodeParts
from topodra.agent.state import NodeState
from topodra.nri import convert
from topodra.nri.proto import api_pb2
from topodra.nri.types import Container, ContainerState, LinuxResources, Pod
from topodra.topology.model import Topology

__all__ = ["scratch_node", "warm_up", "warm_up_calls"]

log = logging.getLogger(__name__)

#: Scratch nodes log nothing: what they decide is not the node's.
SILENT = logging.getLogger("topodra.agent.warmup.scratch")
SILENT.setLevel(logging.CRITICAL + 1)
SILENT.propagate = False

_GIB = 1 << 30


def _resources(i: int) -> tuple[str, LinuxResources]:
    """One container in four Guaranteed (1 or 2 whole CPUs), the rest Burstable or BestEffort."""
    if i % 4 == 0:
        cpus = 1 + (i // 4) % 2
        return "", LinuxResources(
            cpu_shares=1024 * cpus, cpu_quota=100_000 * cpus, cpu_period=100_000, memory_limit=_GIB // 4
        )
    if i % 4 == 3:
        return "besteffort/", LinuxResources(cpu_shares=2)
    return "burstable/", LinuxResources(cpu_shares=256, memory_limit=_GIB // 8)


def _pod_and_container(i: int) -> tuple[Pod, Container]:
    qos, res = _resources(i)
    pod = Pod(
        id=f"warm-up-{i}", name=f"warm-up-{i}", uid=f"warm-up-{i}", namespace="topodra-warm-up",
        cgroup_parent=f"/kubepods/{qos}podwarm-up-{i}",
    )
    container = Container(
        id=f"warm-up-{i}", pod_sandbox_id=pod.id, name="warm-up", state=ContainerState.CREATED, resources=res,
        cgroups_path=f"/kubepods/{qos}podwarm-up-{i}/warm-up-{i}",
    )
    return pod, container


def warm_up_calls(count: int = 16) -> Iterator[tuple[str, bytes]]:
    """The mix as (method, request payload): ``count`` creates, one resize, then a stop of each."""
    made = [_pod_and_container(i) for i in range(count)]
    for pod, container in made:
        req = api_pb2.CreateContainerRequest()
        convert.pod_to_proto(pod, req.pod)
        convert.container_to_proto(container, req.container)
        yield "CreateContainer", req.SerializeToString()
    pod, container = made[1]
    update = api_pb2.UpdateContainerRequest()
    convert.pod_to_proto(pod, update.pod)
    convert.container_to_proto(container, update.container)
    convert.resources_to_proto(LinuxResources(cpu_shares=512, memory_limit=_GIB // 8), update.linux_resources)
    yield "UpdateContainer", update.SerializeToString()
    for pod, container in made:
        stop = api_pb2.StopContainerRequest()
        convert.pod_to_proto(pod, stop.pod)
        convert.container_to_proto(container, stop.container)
        yield "StopContainer", stop.SerializeToString()


def scratch_node(config: AgentConfig, topology: Topology) -> NodeParts:
    """The NRI-handling components on a state of their own, logging nothing (``AgentError`` when
    the configuration does not hold on the machine)."""
    scratch = NodeParts.build(NodeState.build(config, topology), logger=SILENT)
    scratch.after.hold()  # its after-step work runs in ``warm_up``, not on the loop
    return scratch


async def warm_up(scratch: NodeParts, count: int = 16) -> int:
    """Answer the mix on ``scratch`` (``scratch_node``); the number of calls answered without an
    error. A failure is logged and ends the warm-up, never the start."""
    from topodra.nri.stub import Stub

    t0 = time.perf_counter()
    stub = Stub(scratch.nri, socket_path="", name="warm-up", idx="99", env={}, reconnect=False)
    stub.log = SILENT  # a refusal is reported below, in one line
    answered = 0
    try:
        with faults.held():
            calls = list(warm_up_calls(count))
            for method, payload in calls:
                _, status = await stub.handle(method, payload)
                scratch.after.run()
                scratch.after.hold()
                if status is not None:
                    log.warning("NRI warm-up: ran %d of its %d calls, not the rest: %s was refused (%s); the first "
                                "calls may be slower", answered, len(calls), method, status.message)
                    break
                answered += 1
    except Exception as exc:  # a warm-up must never cost the start
        log.warning("NRI warm-up failed: %r; the first calls may be slower", exc)
    log.debug("NRI warm-up: %d calls in %.1f ms", answered, (time.perf_counter() - t0) * 1000)
    return answered
