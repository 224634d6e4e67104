"""The update pusher sends current state, re-sends what changed while in flight, retries failures."""

from __future__ import annotations

import asyncio

from topodra.agent.pusher import UpdatePusher
from topodra.cpuset import CPUSet
from topodra.nri.errors import NRIError, RpcError
from topodra.nri.ttrpc import Code
from topodra.nri.types import ContainerUpdate
from topodra.policy.api import Assignment


class FakeRuntime:
    def __init__(self) -> None:
        self.applied: dict[str, CPUSet] = {}
        self.calls: list[list[str]] = []
        self.fail_ids: set[str] = set()
        self.fail_connection = 0
        self.gate: asyncio.Event | None = None

    def send(self, updates: list[ContainerUpdate]) -> asyncio.Future[list[ContainerUpdate]]:
        return asyncio.ensure_future(self._send(updates))

    async def _send(self, updates: list[ContainerUpdate]) -> list[ContainerUpdate]:
        self.calls.append([u.container_id for u in updates])
        if self.gate is not None:
            await self.gate.wait()
        if self.fail_connection:
            self.fail_connection -= 1
            raise NRIError("not connected to a runtime")
        failed = []
        for u in updates:
            if u.container_id in self.fail_ids:
                failed.append(u)
            else:
                assert u.cpus
                self.applied[u.container_id] = u.cpus
        return failed


def _pusher(rt: FakeRuntime, state: dict[str, Assignment]) -> UpdatePusher:
    return UpdatePusher(send=rt.send, lookup=state.get, lock=asyncio.Lock(), retry_delays=(0.001, 0.001, 0.001))


def test_sends_the_current_assignment_and_skips_unknown_containers() -> None:
    async def main() -> None:
        rt = FakeRuntime()
        state = {"a": Assignment(CPUSet([1, 2]))}
        p = _pusher(rt, state)
        task = asyncio.create_task(p.run())
        p.push(["a", "gone"])
        state["a"] = Assignment(CPUSet([3]))  # changed again before the send: the newest goes out
        await p.wait_idle(2)
        assert rt.applied == {"a": CPUSet([3])}
        assert p.stats.sent == 1
        task.cancel()

    asyncio.run(main())


def test_change_during_flight_is_pushed_again() -> None:
    async def main() -> None:
        rt = FakeRuntime()
        rt.gate = asyncio.Event()
        state = {"a": Assignment(CPUSet([1]))}
        p = _pusher(rt, state)
        task = asyncio.create_task(p.run())
        p.push(["a"])
        while not rt.calls:
            await asyncio.sleep(0)
        # An NRI event moves "a" while our update is on the wire; its reply carried CPU 5.
        state["a"] = Assignment(CPUSet([5]))
        p.bump(["a"])
        rt.gate.set()
        await asyncio.sleep(0.01)
        await p.wait_idle(2)
        assert rt.applied["a"] == CPUSet([5])
        assert len(rt.calls) == 2
        task.cancel()

    asyncio.run(main())


def test_failures_are_retried_then_given_up() -> None:
    async def main() -> None:
        rt = FakeRuntime()
        rt.fail_connection = 1
        rt.fail_ids = {"b"}
        state = {"a": Assignment(CPUSet([1])), "b": Assignment(CPUSet([2]))}
        p = _pusher(rt, state)
        task = asyncio.create_task(p.run())
        p.push(["a", "b"])
        await asyncio.sleep(0.2)
        await p.wait_idle(2)
        assert rt.applied == {"a": CPUSet([1])}
        assert p.stats.failed == 3  # b failed on each of its three retries, then was given up
        assert "b" not in p.pending
        task.cancel()

    asyncio.run(main())


def test_a_rejected_call_is_counted_and_narrowed() -> None:
    """containerd answers a batch with one failed update with an error for the whole call: count it, and
    send again only what is still ours and not confirmed applied."""

    async def main() -> None:
        state = {"a": Assignment(CPUSet([1])), "b": Assignment(CPUSet([2])), "c": Assignment(CPUSet([3]))}
        calls: list[list[str]] = []

        def send(updates: list[ContainerUpdate]) -> asyncio.Future[list[ContainerUpdate]]:
            calls.append([u.container_id for u in updates])
            fut: asyncio.Future[list[ContainerUpdate]] = asyncio.get_running_loop().create_future()
            if len(calls) == 1:
                fut.set_exception(RpcError(Code.UNKNOWN, "NRI update of some containers failed"))
            else:
                fut.set_result([])
            return fut

        async def unapplied(updates: list[ContainerUpdate]) -> tuple[list[str], list[str]]:
            return ["b"], ["a"]  # a's cgroup holds it; b's does not; c is gone by now

        p = UpdatePusher(send=send, lookup=state.get, lock=asyncio.Lock(), retry_delays=(0.001,), unapplied=unapplied)
        task = asyncio.create_task(p.run())
        p.push(["a", "b", "c"])
        del state["c"]
        for _ in range(500):  # the rejected batch, then the narrowed retry
            if len(calls) >= 2:
                break
            await asyncio.sleep(0.005)
        await p.wait_idle(2)
        assert calls == [["a", "b"], ["b"]]
        assert p.stats.rejected_calls == 1
        assert p.stats.failed == 1
        assert p.stats.sent == 2
        task.cancel()

    asyncio.run(main())
