"""Property tests: random sequences of every operation keep every promise of the policy.

After each step: exclusive sets are disjoint, claimed CPUs are in no other
grant, shared sets lie inside their pool, no cpuset is empty, the returned
changes are exactly the difference between before and after, a failed step
changed nothing, and snapshot/restore and restart/sync reproduce the state.
"""

from __future__ import annotations

import json
from dataclasses import replace
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from topodra.cpuset import CPUSet
from topodra.policy import Changes, ContainerRequest, GrantKind, Policy, PolicyConfig, PolicyError, QoSClass
from topodra.topology.model import Topology
from topodra.topology.synthetic import synthetic_topology

from .helpers import GIB, check_changes, check_invariants, request

D = "resource-policy.nri.io"


def _isolated(topo: Topology, cpus: str) -> Topology:
    return replace(topo, isolated=CPUSet.parse(cpus))


MACHINES = [
    synthetic_topology("1s1d2n1l3c2t"),  # 12 CPUs, two NUMA nodes
    synthetic_topology("1s1d1n1l2c2t4e"),  # hybrid: 4 P-threads, 4 E-cores
    synthetic_topology("2s1d1n2l2c2t+hbm"),  # 16 CPUs, two sockets, two L3 each, HBM
    _isolated(synthetic_topology("1s1d1n2l3c2t"), "5,11"),  # isolated CPUs
]

CONFIGS = [
    {},
    {"reservedCPUCount": 1},
    {"reservedCPUs": "0"},
    {"reservedCPUs": "0-2"},  # claims may take reserved CPUs but one (a tolerated device taint)
    {"excludedCPUs": "1"},
    {"preferSharedCPUs": True},
    {"pinMemory": False, "defaultCPUPriority": "low"},
    {"colocatePods": True, "unlimitedBurstable": "numa"},
    {"pinCPU": False},
]

ANNOTATIONS = [
    {f"prefer-shared-cpus.{D}": "false"},
    {f"hide-hyperthreads.{D}": "true"},
    {f"prefer-isolated-cpus.{D}": "true"},
    {f"require-isolated-cpus.{D}": "true"},
    {f"prefer-cpu-priority.{D}": "high"},
    {f"prefer-cpu-priority.{D}": "low"},
    {f"memory-type.{D}": "hbm"},
    {f"memory-type.{D}": "dram,hbm"},
    {f"cpu.preserve.{D}": "true"},
    {f"memory.preserve.{D}": "true"},
    {f"prefer-reserved-cpus.{D}": "true"},
    {f"prefer-shared-cpus.{D}": "bogus"},
]

IDS = [f"c{i}" for i in range(8)]
CLAIMS = [f"claim{i}" for i in range(3)]


@st.composite
def requests(draw: st.DrawFn) -> ContainerRequest:
    cid = draw(st.sampled_from(IDS))
    qos = draw(st.sampled_from(list(QoSClass)))
    if qos is QoSClass.GUARANTEED:
        cpu = draw(st.sampled_from([500, 1000, 1000, 2000, 2500, 3000, 4000]))
        limit: int | None = cpu
    elif qos is QoSClass.BURSTABLE:
        cpu = draw(st.sampled_from([0, 100, 500, 1500]))
        limit = draw(st.sampled_from([None, cpu + 1000]))
    else:
        cpu, limit = 0, None
    annotations: dict[str, str] = {}
    for a in draw(st.lists(st.sampled_from(ANNOTATIONS), max_size=2)):
        annotations.update(a)
    claims = tuple(draw(st.lists(st.sampled_from(CLAIMS), max_size=2, unique=True))) if draw(st.booleans()) else ()
    return request(
        cid,
        qos,
        cpu,
        limit=limit,
        memory=draw(st.sampled_from([0, 0, 1 * GIB, 80 * GIB])),
        namespace=draw(st.sampled_from(["default", "default", "kube-system"])),
        pod=draw(st.sampled_from(["p1", "p2", None])),
        annotations=annotations,
        claims=claims,
    )


class PolicyMachine(RuleBasedStateMachine):
    policy: Policy
    topo: Topology

    @initialize(topo=st.sampled_from(MACHINES), config=st.sampled_from(CONFIGS))
    def start(self, topo: Topology, config: dict[str, Any]) -> None:
        self.topo = topo
        self.policy = Policy(topo, PolicyConfig.model_validate(config))

    def _step(self, op: Any, subject: str | None = None) -> Changes | None:
        before = self.policy.assignments()
        snap = self.policy.snapshot()
        try:
            changes: Changes = op()
        except PolicyError as e:
            assert str(e), "errors say what went wrong"
            assert self.policy.snapshot() == snap, "a failed operation changed the state"
            assert self.policy.assignments() == before
            return None
        check_changes(before, self.policy.assignments(), changes, subject)
        return changes

    @rule(req=requests())
    def add(self, req: ContainerRequest) -> None:
        changes = self._step(lambda: self.policy.add(req), req.id)
        if changes is not None and self.policy.assignment(req.id) is not None:
            assert req.id in changes

    @rule(req=requests())
    def update(self, req: ContainerRequest) -> None:
        self._step(lambda: self.policy.update(req), req.id)

    @rule(cid=st.sampled_from(IDS))
    def remove(self, cid: str) -> None:
        known = cid in self.policy.grants()
        changes = self._step(lambda: self.policy.remove(cid))
        assert changes is not None
        assert cid not in changes
        assert self.policy.grant(cid) is None
        if not known:
            assert changes == {}

    @rule(claim=st.sampled_from(CLAIMS), data=st.data())
    def claim(self, claim: str, data: st.DataObject) -> None:
        online = list(self.topo.online)
        cpus = CPUSet(data.draw(st.lists(st.sampled_from(online), min_size=1, max_size=3, unique=True)))
        changes = self._step(lambda: self.policy.claim(claim, cpus))
        if changes is not None:
            assert self.policy.claimed(claim) == cpus

    @rule(data=st.data())
    def pick_and_claim(self, data: st.DataObject) -> None:
        claim = data.draw(st.sampled_from(CLAIMS))
        count = data.draw(st.integers(min_value=1, max_value=4))
        whole, spread = data.draw(st.booleans()), data.draw(st.booleans())
        memory = data.draw(st.sampled_from(["local", "all"]))
        try:
            cpus = self.policy.pick(count, self.topo.online, whole_cores=whole, spread=spread)
        except PolicyError:
            return
        assert len(cpus) == count
        if whole:  # every online thread of each core it touches
            for cpu in cpus:
                assert self.topo.cpus_of_core(self.topo.cpus[cpu].core) & self.topo.online <= cpus
        granted = CPUSet()
        for g in self.policy.grants().values():
            granted |= CPUSet.from_mask(g.exclusive)
        for c in self.policy.claims().values():
            granted |= c
        assert cpus.isdisjoint(granted)
        if self._step(lambda: self.policy.claim(claim, cpus, memory=memory)) is not None:
            assert self.policy.claim_memory(claim) == memory

    @rule(claim=st.sampled_from(CLAIMS))
    def release(self, claim: str) -> None:
        known = self.policy.claimed(claim) is not None
        changes = self._step(lambda: self.policy.release(claim))
        assert changes is not None
        assert self.policy.claimed(claim) is None
        if not known:
            assert changes == {}

    @rule(config=st.sampled_from(CONFIGS))
    def reconfigure(self, config: dict[str, Any]) -> None:
        self._step(lambda: self.policy.reconfigure(PolicyConfig.model_validate(config)))

    @rule()
    def snapshot_restore(self) -> None:
        snap = json.loads(json.dumps(self.policy.snapshot()))
        restored = Policy.restore(self.topo, snap)
        assert restored.snapshot() == self.policy.snapshot()
        assert restored.assignments() == self.policy.assignments()
        assert restored.stats() == self.policy.stats()
        self.policy = restored

    @precondition(lambda self: bool(self.policy.grants()))
    @rule()
    def restart_and_sync(self) -> None:
        old = self.policy
        fresh = Policy(self.topo, old.config)
        for claim, cpus in old.claims().items():
            fresh.claim(claim, cpus)
        reported = {cid: old.assignment(cid) for cid in old.grants()}
        running = [(g.request, reported[cid]) for cid, g in old.grants().items()]
        changes = fresh.sync(running)
        after = fresh.assignments()
        for cid, a in reported.items():
            now = after.get(cid)
            if now is not None and now != a:
                assert changes[cid] == now
        for cid, a in changes.items():
            assert after[cid] == a
            assert reported[cid] != a
        if old.config.pin_cpu:
            for cid, g in old.grants().items():
                if g.kind is GrantKind.EXCLUSIVE and not g.hide_hyperthreads and not g.degraded:
                    assert fresh.assignment(cid) == reported[cid], f"{cid} lost its exclusive CPUs in a restart"
            moved = (GrantKind.MIXED, GrantKind.EXCLUSIVE)  # hidden threads / mixed parts are re-chosen
            if not any((g.kind in moved and (g.hide_hyperthreads or g.kind is GrantKind.MIXED)) or g.degraded
                       for g in old.grants().values()):
                for cid, g in old.grants().items():
                    if g.kind is GrantKind.SHARED and not g.hide_hyperthreads:
                        assert fresh.assignment(cid) == reported[cid], f"{cid} moved in a restart"
        self.policy = fresh

    @invariant()
    def holds(self) -> None:
        check_invariants(self.policy)


PolicyMachine.TestCase.settings = settings(stateful_step_count=25, deadline=None)
test_policy_state_machine = PolicyMachine.TestCase


_SNAPSHOT_POLICY = Policy(MACHINES[2], PolicyConfig(reserved_cpu_count=1))
_SNAPSHOT_POLICY.claim("claim0", CPUSet([5]))
for _req in (
    request("a", QoSClass.GUARANTEED, 2000),
    request("b", QoSClass.BEST_EFFORT, 0, annotations={f"memory-type.{D}": "hbm"}),
    request("c", QoSClass.GUARANTEED, 1000, claims=("claim0",)),
    request("d", QoSClass.GUARANTEED, 2500, annotations={f"prefer-shared-cpus.{D}": "false"}),
):
    _SNAPSHOT_POLICY.add(_req)
SNAPSHOT = _SNAPSHOT_POLICY.snapshot()

json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-3, 300) | st.text(max_size=6) | st.sampled_from(["0-3", "root", "1"]),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=4), inner, max_size=3),
    max_leaves=6,
)


def _paths(value: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    out = [prefix]
    if isinstance(value, dict):
        for k, v in value.items():
            out += _paths(v, (*prefix, k))
    elif isinstance(value, list):
        for i, v in enumerate(value):
            out += _paths(v, (*prefix, i))
    return out


PATHS = _paths(SNAPSHOT)[1:]


@settings(deadline=None)
@given(path=st.sampled_from(PATHS), value=json_values, drop=st.booleans())
def test_restore_fuzz_never_crashes(path: tuple[Any, ...], value: Any, drop: bool) -> None:
    snap = json.loads(json.dumps(SNAPSHOT))
    parent = snap
    for key in path[:-1]:
        parent = parent[key]
    if drop and isinstance(parent, dict):
        del parent[path[-1]]
    else:
        parent[path[-1]] = value
    try:
        restored = Policy.restore(MACHINES[2], snap)
    except PolicyError as e:
        assert str(e).startswith("snapshot") or "reserved" in str(e) or "available" in str(e)
        return
    check_invariants(restored)
