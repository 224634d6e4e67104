"""``Policy.follow``: the machine changes under the node (CPU hotplug).

Containers on a vanished CPU move, nothing is ever left without CPUs, claims
keep what they claimed (their offline CPUs are reported and come back), and
a machine no placement fits is refused with nothing changed.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule
from testkit.sysfs_writer import with_offline

from topodra.cpuset import CPUSet
from topodra.policy import BadRequestError, Changes, ContainerRequest, Policy, PolicyConfig, PolicyError
from topodra.topology.model import Topology
from topodra.topology.synthetic import synthetic_topology

from .helpers import besteffort, check_changes, check_invariants, guaranteed
from .test_properties import CLAIMS, CONFIGS, IDS, requests

MACHINE = synthetic_topology("1s1d2n1l4c2t")  # 16 CPUs; node 0: 0-3,8-11; cores (0,8), (1,9) ...


def test_containers_on_vanished_cpus_move_and_come_back_to_their_claim() -> None:
    p = Policy(MACHINE)
    p.add(guaranteed("excl", 2))
    p.add(besteffort("shared"))
    p.claim("k", CPUSet([3, 11]))
    p.add(guaranteed("claimer", 2, claims=("k",)))
    excl = p.assignment("excl")
    assert excl is not None
    gone = excl.cpus | CPUSet([11])
    changes = p.follow(with_offline(MACHINE, gone))
    check_invariants(p)
    moved = p.assignment("excl")
    assert moved is not None
    assert moved.cpus.isdisjoint(gone)
    assert len(moved.cpus) == 2
    assert changes["excl"] == moved
    assert changes["claimer"].cpus == CPUSet([3])  # the online part of its claim
    shared = p.assignment("shared")
    assert shared is not None
    assert shared.cpus.isdisjoint(gone)
    # the claim is not shrunk: it still holds CPU 11, reported offline
    assert p.claimed("k") == CPUSet([3, 11])
    assert p.offline_claims() == {"k": CPUSet([11])}
    back = p.follow(MACHINE)
    check_invariants(p)
    assert back["claimer"].cpus == CPUSet([3, 11])
    assert p.offline_claims() == {}


def test_a_claim_with_no_cpu_online_leaves_its_container_on_a_fallback_not_on_none() -> None:
    p = Policy(MACHINE)
    p.claim("k", CPUSet([7, 15]))
    p.add(guaranteed("claimer", 2, claims=("k",)))
    changes = p.follow(with_offline(MACHINE, CPUSet([7, 15])))
    check_invariants(p)
    a = changes["claimer"]
    assert a.cpus
    assert a.cpus.isdisjoint(CPUSet([7, 15]))
    g = p.grant("claimer")
    assert g is not None
    assert "have no CPU online" in g.degraded
    assert p.claims() == {"k": CPUSet([7, 15])}
    # claiming it again with the same CPUs is the same claim; other CPUs are refused
    assert p.claim("k", CPUSet([7, 15])) == {}
    with pytest.raises(BadRequestError):
        p.claim("k", CPUSet([6]))
    p.follow(MACHINE)
    back = p.assignment("claimer")
    assert back is not None
    assert back.cpus == CPUSet([7, 15])
    # released while offline: forgotten
    p.follow(with_offline(MACHINE, CPUSet([7, 15])))
    p.release("k")
    assert p.claims() == {}
    assert p.offline_claims() == {}
    p.follow(MACHINE)
    assert p.claims() == {}


def test_configured_cpu_sets_lose_their_offline_cpus_and_get_them_back() -> None:
    p = Policy(MACHINE, PolicyConfig(reserved_cpus=CPUSet([0, 8]), available_cpus=CPUSet.parse("0-11")))
    p.add(guaranteed("sys", 1, namespace="kube-system"))
    p.follow(with_offline(MACHINE, CPUSet([8, 1])))
    check_invariants(p)
    assert p.reserved_cpus == CPUSet([0])
    assert p.available_cpus == CPUSet.parse("0,2-7,9-11")
    assert p.config.reserved_cpus == CPUSet([0, 8])  # the configuration as written
    p.follow(MACHINE)
    assert p.reserved_cpus == CPUSet([0, 8])
    assert p.available_cpus == CPUSet.parse("0-11")


def test_a_machine_nothing_fits_is_refused_with_nothing_changed() -> None:
    p = Policy(MACHINE, PolicyConfig(available_cpus=CPUSet([2, 3])))
    p.add(besteffort("b"))
    snap, before = p.snapshot(), p.assignments()
    with pytest.raises(PolicyError, match=r"availableCPUs|no CPU"):
        p.follow(with_offline(MACHINE, CPUSet([2, 3])))
    assert p.snapshot() == snap
    assert p.assignments() == before


def test_claims_may_hold_every_reserved_cpu_left_online_after_a_hotplug() -> None:
    """Found by the state machine below: reserved 0-2, a claim of 0-1, then 0 and 2 go offline.
    The claim keeps CPU 1, the last reserved CPU online; a system container runs on the root
    pool's shared CPUs until a reserved CPU returns, and a new claim still cannot take the last."""
    p = Policy(MACHINE, PolicyConfig(reserved_cpus=CPUSet([0, 1, 2]), reserved_pool_namespaces=("kube-system",)))
    p.claim("k", CPUSet([0, 1]))
    p.follow(with_offline(MACHINE, CPUSet([0, 2])))
    p.add(besteffort("sys", namespace="kube-system"))
    check_invariants(p, reserved_offline=True)
    sys = p.assignment("sys")
    assert sys is not None
    assert sys.cpus == p.shared_cpus(p.pools[0].name)
    assert p.claimed("k") == CPUSet([0, 1])
    p.follow(MACHINE)
    check_invariants(p)
    back = p.assignment("sys")
    assert back is not None
    assert back.cpus == CPUSet([2])  # the reserved CPU no claim holds


class FollowMachine(RuleBasedStateMachine):
    """Random workloads while random CPU sets go offline and online."""

    policy: Policy

    @initialize(config=st.sampled_from(CONFIGS))
    def start(self, config: dict[str, Any]) -> None:
        self.policy = Policy(MACHINE, PolicyConfig.model_validate(config))
        self.topo: Topology = MACHINE
        self.reserved = self.policy.reserved_cpus  # as picked on the whole machine
        self.follows = 0

    def _step(self, op: Any, subject: str | None = None) -> Changes | None:
        before, claims = self.policy.assignments(), self.policy.claims()
        snap = self.policy.snapshot()
        try:
            changes: Changes = op()
        except PolicyError as e:
            assert str(e)
            assert self.policy.snapshot() == snap
            assert self.policy.assignments() == before
            assert self.policy.claims() == claims
            return None
        check_changes(before, self.policy.assignments(), changes, subject)
        return changes

    @rule(req=requests())
    def add(self, req: ContainerRequest) -> None:
        self._step(lambda: self.policy.add(req), req.id)

    @rule(cid=st.sampled_from(IDS))
    def remove(self, cid: str) -> None:
        self._step(lambda: self.policy.remove(cid))

    @rule(claim=st.sampled_from(CLAIMS), data=st.data())
    def claim(self, claim: str, data: st.DataObject) -> None:
        online = list(self.topo.online)
        cpus = CPUSet(data.draw(st.lists(st.sampled_from(online), min_size=1, max_size=3, unique=True)))
        self._step(lambda: self.policy.claim(claim, cpus))

    @rule(claim=st.sampled_from(CLAIMS))
    def release(self, claim: str) -> None:
        self._step(lambda: self.policy.release(claim))
        assert self.policy.claimed(claim) is None
        assert claim not in self.policy.offline_claims()

    @rule(data=st.data())
    def hotplug(self, data: st.DataObject) -> None:
        off = CPUSet(data.draw(st.lists(st.sampled_from(list(MACHINE.online)), max_size=10, unique=True)))
        if off == MACHINE.online:
            return
        topo = with_offline(MACHINE, off) if off else MACHINE
        claims = self.policy.claims()
        if self._step(lambda: self.policy.follow(topo)) is None:
            # refused only when no CPU would be left for shared containers
            excluded = self.policy.config.excluded_cpus or CPUSet()
            assert not topo.online - excluded - self.reserved, f"refused with CPUs {off} offline"
            return
        self.follows += 1
        self.topo = topo
        assert self.policy.claims() == claims, "a machine change never shrinks or drops a claim"
        want = {k: c - topo.online for k, c in claims.items() if c - topo.online}
        assert self.policy.offline_claims() == want

    @invariant()
    def holds(self) -> None:
        check_invariants(self.policy, reserved_offline=bool(self.reserved - self.topo.online))


FollowMachine.TestCase.settings = settings(max_examples=40, stateful_step_count=20, deadline=None)
test_follow_state_machine = FollowMachine.TestCase


def test_a_claim_restored_while_its_cpus_are_offline_keeps_them() -> None:
    topo = with_offline(MACHINE, CPUSet([7, 15]))
    p = Policy(topo)
    with pytest.raises(BadRequestError, match="not online"):
        p.claim("k", CPUSet([6, 7]))  # Prepare: an offline CPU cannot be handed out
    p.claim("k", CPUSet([6, 7]), keep_offline=True)  # restored after a restart
    p.add(guaranteed("claimer", 2, claims=("k",)))
    check_invariants(p)
    a = p.assignment("claimer")
    assert a is not None
    assert a.cpus == CPUSet([6])
    assert p.claimed("k") == CPUSet([6, 7])
    assert p.offline_claims() == {"k": CPUSet([7])}
    with pytest.raises(BadRequestError, match="already holds"):
        p.claim("k", CPUSet([15]), keep_offline=True)
    with pytest.raises(BadRequestError, match="already claimed"):
        p.claim("j", CPUSet([7]), keep_offline=True)
    with pytest.raises(BadRequestError, match="not present"):
        p.claim("j", CPUSet([99]), keep_offline=True)
    p.follow(MACHINE)
    back = p.assignment("claimer")
    assert back is not None
    assert back.cpus == CPUSet([6, 7])


def test_a_numa_node_losing_all_its_cpus_keeps_serving_its_memory() -> None:
    p = Policy(MACHINE)
    p.add(guaranteed("a", 2, memory=1 << 30))
    p.add(besteffort("b"))
    node0 = MACHINE.nodes[0].cpus
    a = p.assignment("a")
    assert a is not None
    assert a.cpus <= node0
    p.follow(with_offline(MACHINE, node0))
    check_invariants(p)
    for cid in ("a", "b"):
        moved = p.assignment(cid)
        assert moved is not None
        assert moved.cpus.isdisjoint(node0)
    moved_a = p.assignment("a")
    assert moved_a is not None
    assert 0 in moved_a.mems  # the node's memory is still there: a CPU-less node


def test_a_changed_isolated_set_is_followed() -> None:
    p = Policy(MACHINE)
    p.add(besteffort("b"))
    assert p.isolated_cpus == CPUSet()
    p.follow(replace(MACHINE, isolated=CPUSet([6, 14])))
    check_invariants(p)
    assert p.isolated_cpus == CPUSet([6, 14])
    b = p.assignment("b")
    assert b is not None
    assert b.cpus.isdisjoint(CPUSet([6, 14]))  # shared containers leave the isolated CPUs
