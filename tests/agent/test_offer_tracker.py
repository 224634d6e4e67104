"""The offer tracker on its own: an offer kept up from the touched containers equals one read
from every grant, and it never offers an exclusive CPU."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from topodra.agent.offer import OfferTracker
from topodra.cpuset import CPUSet
from topodra.dra.devices import DeviceModelConfig, build_devices, ordered_cpus
from topodra.dra.taints import TaintConfig
from topodra.policy import Policy, PolicyConfig
from topodra.policy.api import ContainerRequest, PolicyError, QoSClass
from topodra.topology.synthetic import synthetic_topology

TOPO = synthetic_topology("1s1d2n1l4c2t")  # 16 CPUs
DEVICES = DeviceModelConfig(shared_floor=1)


def _request(i: int, cpus: int) -> ContainerRequest:
    if cpus:
        return ContainerRequest(
            id=f"c{i}", name="c", pod_uid=f"p{i}", pod_name=f"p{i}", namespace="default",
            qos=QoSClass.GUARANTEED, cpu_request_milli=1000 * cpus, cpu_limit_milli=1000 * cpus,
        )
    return ContainerRequest(
        id=f"c{i}", name="c", pod_uid=f"p{i}", pod_name=f"p{i}", namespace="default",
        qos=QoSClass.BURSTABLE, cpu_request_milli=100,
    )


OPS = st.lists(st.tuples(st.sampled_from(["add", "remove"]), st.integers(0, 12), st.integers(0, 3)), max_size=30)


@given(OPS)
def test_the_offer_kept_up_from_touched_containers_equals_a_full_one(ops: list[tuple[str, int, int]]) -> None:
    policy = Policy(TOPO)
    tracker = OfferTracker()
    tracker.compute(policy, TOPO, DEVICES)
    for op, i, cpus in ops:
        cid = f"c{i}"
        try:
            if op == "add" and policy.assignment(cid) is None:
                tracker.touch(policy.add(_request(i, cpus)))
            elif op == "remove" and policy.assignment(cid) is not None:
                tracker.touch(policy.remove(cid), subject=cid)
        except PolicyError:
            continue  # no room: nothing changed
        kept = tracker.compute(policy, TOPO, DEVICES)
        assert kept == OfferTracker().compute(policy, TOPO, DEVICES)
        stats = policy.stats().total
        assert kept.isdisjoint(stats.allocated), "exclusive CPUs are never offered"
        assert tracker.grants == {c: g.exclusive for c, g in policy.grants().items() if g.exclusive}


def test_moved_names_the_containers_whose_grant_changed_since_the_last_offer() -> None:
    policy = Policy(TOPO)
    tracker = OfferTracker()
    tracker.touch(policy.add(_request(0, 2)))
    tracker.touch(policy.add(_request(1, 0)))
    tracker.compute(policy, TOPO, DEVICES)
    assert tracker.moved(policy, ["c0", "c1"]) == []
    granted = policy.grant("c0")
    assert granted is not None
    changes = policy.claim("u1", CPUSet.from_mask(granted.exclusive))  # takes c0's CPUs
    assert "c0" in changes
    assert tracker.moved(policy, changes) == ["c0"]  # c1 holds no exclusive grant


def test_home_devices_are_the_same_list_until_their_inputs_change() -> None:
    policy = Policy(TOPO)
    tracker = OfferTracker()
    devices = build_devices(TOPO, DEVICES)
    homes = tracker.home_devices(policy, TOPO, DEVICES, devices)
    assert len(homes) == len(devices)
    assert tracker.home_devices(policy, TOPO, DEVICES, devices) is homes
    assert tracker.home_devices(policy, TOPO, DEVICES, list(devices)) is not homes  # new devices


def test_reserved_cpus_are_offered_but_the_last_one_no_claim_holds() -> None:
    """Reserved CPUs are published (tainted): a claim tolerating the taint may take them, but
    never the last one the system containers have, so Prepare never refuses what was offered."""
    policy = Policy(TOPO, PolicyConfig(reserved_cpus=CPUSet([0, 1, 8])))
    offer = OfferTracker().compute(policy, TOPO, DEVICES)
    order = ordered_cpus(TOPO, TOPO.online, DEVICES.order)
    last = [c for c in order if c in policy.reserved_cpus][-1]
    assert offer & policy.reserved_cpus == policy.reserved_cpus - CPUSet([last])
    others = policy.reserved_cpus - CPUSet([last])
    policy.claim("daemon", others)
    offer = OfferTracker().compute(policy, TOPO, DEVICES)
    assert offer & policy.reserved_cpus == others  # claimed ones stay offered; the last one never
    withdrawn = DeviceModelConfig(taints=TaintConfig(reserved="Withdraw"))
    assert OfferTracker().compute(policy, TOPO, withdrawn).isdisjoint(policy.reserved_cpus)
