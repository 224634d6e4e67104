"""Changes outside NRI events on runtimes whose NRI deadlocks on unsolicited updates.

The embedded runtime takes containerd's two NRI locks in the order of the NRI version it
emulates (``embedded/nrilocks.py``). Up to NRI v0.12.0 a plugin's unsolicited UpdateContainers
takes the adaptation lock and then the local one, while a CRI call takes the local lock and then
the adaptation's: opened deterministically with ``between_locks``, that window hangs the runtime.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

from topodra.agent.delivery import CgroupWriter, Delivery, choose_delivery
from topodra.agent.drift import CgroupReader
from topodra.cpuset import CPUSet
from topodra.embedded.nrilocks import RuntimeHung
from topodra.nri.types import Container, ContainerState, Pod
from topodra.nri.version import RuntimeInfo
from topodra.playground.runner import resolve_topology
from topodra.playground.world import Playground

EXAMPLE = Path(__file__).resolve().parents[1] / "data" / "upstream-prototype" / "upstream-prototype.yaml"


def _runtime(name: str, version: str, nri: str = "") -> RuntimeInfo:
    return RuntimeInfo.from_configure(name, version, nri, 5000, 2000)


@pytest.mark.parametrize(
    ("setting", "runtime", "mode"),
    [
        ("auto", None, Delivery.REPLIES),
        ("auto", _runtime("containerd", "v2.3.4", "v0.12.0"), Delivery.REPLIES),
        ("auto", _runtime("containerd", "v2.2.7"), Delivery.REPLIES),  # inferred v0.11.0
        ("auto", _runtime("cri-o", "1.35.1"), Delivery.REPLIES),
        ("auto", _runtime("somert", "0.1"), Delivery.REPLIES),  # version unknown
        ("auto", _runtime("containerd", "v2.4.0-beta.0", "v0.12.1"), Delivery.UNSOLICITED),
        ("auto", _runtime("containerd", "v2.4.0", "v0.12.3-0.20260820221634-8ec8b285eae3"), Delivery.UNSOLICITED),
        ("unsolicited", _runtime("containerd", "v2.3.4", "v0.12.0"), Delivery.UNSOLICITED),
        ("replies", _runtime("containerd", "v2.4.0", "v0.12.2"), Delivery.REPLIES),
    ],
)
def test_delivery_is_chosen_from_the_runtime_nri_version(
    setting: str, runtime: RuntimeInfo | None, mode: Delivery
) -> None:
    choice = choose_delivery(setting, runtime)
    assert choice.mode is mode
    assert choice.reason
    assert "\n" not in choice.line()


def test_forcing_unsolicited_on_an_old_runtime_says_it_can_deadlock() -> None:
    choice = choose_delivery("unsolicited", _runtime("containerd", "v2.3.4", "v0.12.0"))
    assert "deadlock" in choice.reason


def test_cgroup_writer_writes_existing_files_only_and_never_an_empty_set(tmp_path: Path) -> None:
    root = tmp_path / "cgroup"
    (root / "kubepods" / "c1").mkdir(parents=True)
    (root / "cgroup.controllers").write_text("cpuset\n")
    for name in ("cpuset.cpus", "cpuset.mems"):
        (root / "kubepods" / "c1" / name).write_text("0-15\n")
    writer = CgroupWriter(root)
    assert writer.write("c1", "/kubepods/c1", 0, CPUSet([2, 3]), CPUSet([0]))
    got = CgroupReader(root).read("c1", "/kubepods/c1")
    assert got is not None
    assert (got.cpus, got.mems) == (CPUSet([2, 3]), CPUSet([0]))
    assert not writer.write("c2", "/kubepods/c2", 0, CPUSet([1]), None)  # no cgroup: nothing created
    assert not (root / "kubepods" / "c2").exists()
    with pytest.raises(ValueError, match="empty cpuset"):
        writer.write("c1", "/kubepods/c1", 0, CPUSet(), None)


class _Window:
    """Holds the next CreateContainer between containerd's local NRI lock and the adaptation lock."""

    def __init__(self) -> None:
        self.armed = False
        self.entered = asyncio.Event()
        self.release = asyncio.Event()

    async def __call__(self, label: str) -> None:
        if self.armed and label.startswith("CreateContainer"):
            self.armed = False
            self.entered.set()
            await self.release.wait()


def _run(body: Callable[[Playground, _Window], Awaitable[None]], **kw: Any) -> None:
    async def main() -> None:
        topo, _ = resolve_topology(None)
        window = _Window()
        async with Playground(
            topology=topo, cgroups=True, nri_version="v0.12.0", runtime_options={"between_locks": window}, **kw
        ) as pg:
            await body(pg, window)

    asyncio.run(main())


async def _until_waiting(pg: Playground, label: str, timeout: float = 5.0) -> None:
    """Until a task labelled ``label...`` waits for one of the runtime's NRI locks."""
    assert pg.runtime is not None
    locks = pg.runtime.nri_locks

    async def wait() -> None:
        while locks.waiting(label) == 0:
            locks.changed.clear()
            await locks.changed.wait()  # set each time a task starts waiting for a lock

    await asyncio.wait_for(wait(), timeout)


async def _claim_then_release_during_a_create(pg: Playground, window: _Window) -> asyncio.Task[Any]:
    """web shares the CPUs but the claim's (the claim came first, so no update was pushed yet);
    the claim's containers are gone. A new container's CreateContainer is held between the
    runtime's two locks while the claim is released."""
    assert pg.runtime is not None
    assert pg.kubelet is not None
    await pg.apply(list(yaml.safe_load_all(EXAMPLE.read_text())))
    await pg.apply([_pod("web", "500m")])
    claim_pod = pg.store.get(*_pod_key("pcore-test"))
    run = pg.kubelet.pods[claim_pod["metadata"]["uid"]]
    for cid in run.containers.values():
        assert (await pg.runtime.stop_container(cid)).ok
        assert (await pg.runtime.remove_container(cid)).ok
    sandbox = Pod(id="late-sandbox", name="late", uid="late-uid", namespace="default",
                  cgroup_parent="/kubepods/besteffort/podlate-uid")
    assert (await pg.runtime.run_pod_sandbox(sandbox)).ok
    late = Container(id="late-ctr", pod_sandbox_id=sandbox.id, name="c", state=ContainerState.CREATED,
                     cgroups_path="/kubepods/besteffort/podlate-uid/late-ctr")
    window.armed = True
    create = asyncio.ensure_future(pg.runtime.create_container(late))
    await asyncio.wait_for(window.entered.wait(), 5)
    await pg.kubelet.unprepare_claims(claim_pod)  # NodeUnprepareResources: web may widen again
    return create


def test_unsolicited_updates_hang_a_containerd_2_3_runtime() -> None:
    """Today's delivery forced on NRI v0.12.0: the lock inversion of containerd#13733, every time."""

    async def body(pg: Playground, window: _Window) -> None:
        assert pg.runtime is not None
        create = await _claim_then_release_during_a_create(pg, window)
        # The agent's UpdateContainers holds the adaptation lock and waits for the local one.
        await _until_waiting(pg, "UpdateContainers")
        window.release.set()  # the CRI call goes on to the adaptation lock: the knot closes
        with pytest.raises(RuntimeHung, match="CreateContainer late-ctr holds the local NRI lock"):
            await asyncio.wait_for(create, 5)
        (knot,) = pg.runtime.deadlocks
        assert "UpdateContainers from" in knot

    _run(body, agent_overrides={"nri": {"delivery": "unsolicited"}})


def test_replies_delivery_widens_at_once_without_entering_the_knot() -> None:
    """auto on NRI v0.12.0: no UpdateContainers; web's cgroup is widened at once, and the runtime's
    own record follows with the held CreateContainer's reply."""

    async def body(pg: Playground, window: _Window) -> None:
        assert pg.runtime is not None
        assert pg.agent is not None
        assert pg.agent.router.pusher is not None
        assert pg.agent.state()["delivery"]["mode"] == "replies"
        create = await _claim_then_release_during_a_create(pg, window)
        await pg.agent.router.pusher.wait_idle(5)
        assert _cgroup_cpus(pg, _cid(pg, "web")) == pg.topology.online  # the kernel runs web widened
        assert pg.cpus_of("web") != pg.topology.online  # the runtime does not know yet
        window.release.set()
        result = await asyncio.wait_for(create, 5)
        assert result.ok
        assert pg.runtime.deadlocks == []
        assert pg.cpus_of("web") == pg.topology.online  # carried by the CreateContainer reply
        assert not [line for line in pg.runtime.log if "requested container updates" in line]
        metrics = pg.agent.metrics.render().decode()
        assert 'topodra_nri_delivery{mode="replies"} 1.0' in metrics
        assert 'topodra_cgroup_writes_total{result="written"}' in metrics

    _run(body)


def _cgroup_cpus(pg: Playground, container_id: str) -> CPUSet:
    assert pg.runtime is not None
    ctr = pg.runtime.store.container(container_id)
    assert pg.agent is not None
    got = CgroupReader(pg.agent.node.config.sysfs_root / "sys" / "fs" / "cgroup").read(container_id, ctr.cgroups_path)
    assert got is not None
    return got.cpus


def _cid(pg: Playground, pod: str) -> str:
    assert pg.runtime is not None
    pods = {p.id: p.name for p in pg.runtime.store.pods()}
    return next(c.id for c in pg.runtime.store.containers() if pods.get(c.pod_sandbox_id) == pod)


def _pod_key(name: str) -> tuple[Any, str, str]:
    from topodra.embedded.store import KINDS

    return KINDS[("", "pods")], "default", name


def _pod(name: str, cpu: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name},
        "spec": {"containers": [{"name": "c", "image": "x", "resources": {"requests": {"cpu": cpu, "memory": "64Mi"}}}]},
    }


def test_replies_delivery_repairs_the_start_window_through_the_cgroup() -> None:
    """A claim prepared while web starts on NRI v0.12.0: the update carried by the claim's reply
    reaches web's spec only; after PostStartContainer the agent writes web's cgroup itself."""

    async def body(pg: Playground, window: _Window) -> None:
        assert pg.runtime is not None
        assert pg.agent is not None
        fired = False

        async def starting(container_id: str) -> None:
            nonlocal fired
            if not fired:
                fired = True
                await pg.apply(list(yaml.safe_load_all(EXAMPLE.read_text())))

        pg.runtime.start_gate = starting
        await pg.apply([_pod("web", "100m")])
        assert fired
        assert pg.runtime.lost_updates, "the claim's reply reached web's spec, not its starting task"
        assert pg.agent.router.pusher is not None
        await pg.agent.router.pusher.wait_idle(5)
        claimed = next(iter(pg.agent.policy.claims().values()))
        web = _cid(pg, "web")
        assignment = pg.agent.policy.assignment(web)
        assert assignment is not None
        assert _cgroup_cpus(pg, web) == assignment.cpus
        assert _cgroup_cpus(pg, web).isdisjoint(claimed)
        assert pg.runtime.deadlocks == []
        assert b"topodra_start_window_repushes_total 1.0" in pg.agent.metrics.render()

    _run(body)
