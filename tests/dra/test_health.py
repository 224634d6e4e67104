"""Devices across CPU hotplug: stable names, offline ones tainted (or withdrawn), and their health."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from testkit.sysfs_writer import with_offline

from topodra.cpuset import CPUSet
from topodra.dra.devices import DeviceModelConfig, build_devices, follow_devices, offer_devices
from topodra.dra.health import MESSAGE_MAX, device_health
from topodra.topology.follow import carry_numbers
from topodra.topology.synthetic import synthetic_topology

MACHINE = synthetic_topology("1s1d2n1l4c2t")  # 16 CPUs; cores (0,8) (1,9) ...; node 1: 4-7,12-15
OFF = CPUSet([0, 8, 5])  # core 0 wholly, one thread of core 5


WITHDRAW = {"offline": "Withdraw", "unhealthy": "Withdraw"}


@pytest.mark.parametrize("model", ["cpu", "core", "grouped"])
def test_names_stay_and_offline_devices_are_withdrawn_not_renamed(model: str) -> None:
    cfg = DeviceModelConfig.from_mapping({"model": model, "sharedFloor": 0, "taints": WITHDRAW})
    known = build_devices(MACHINE, cfg)
    now = carry_numbers(MACHINE.cpus, with_offline(MACHINE, OFF))
    devices = follow_devices(known, build_devices(now, cfg), now.online)
    assert sorted(d.name for d in devices) == sorted(d.name for d in known)
    by_name = {d.name: d for d in known}
    for d in devices:
        assert d.cpus == by_name[d.name].cpus  # each still stands for every CPU it had
    offered = offer_devices(now, cfg, devices, now.online)
    published = CPUSet()
    for d in offered:
        published |= d.cpus
    assert published.isdisjoint(OFF)
    if model == "cpu":
        assert {d.name for d in offered} == {f"cpu{c}" for c in MACHINE.online - OFF}
    elif model == "core":  # core 5 has a thread left but is not offered as a smaller core
        assert {d.name for d in offered} == {f"core{i}" for i in (1, 2, 3, 4, 6, 7)}
    else:
        caps = {d.name: d.capacity["cpu"].value for d in offered}
        assert caps == {"numa0": 6, "numa1": 7}
    back = follow_devices(devices, build_devices(carry_numbers(now.cpus, MACHINE), cfg), MACHINE.online)
    assert [d.to_api() for d in back] == [d.to_api() for d in known]


@pytest.mark.parametrize("model", ["cpu", "core", "grouped"])
def test_offline_devices_are_published_tainted_by_default(model: str) -> None:
    cfg = DeviceModelConfig.from_mapping({"model": model, "sharedFloor": 0})
    known = build_devices(MACHINE, cfg)
    now = carry_numbers(MACHINE.cpus, with_offline(MACHINE, OFF))
    devices = follow_devices(known, build_devices(now, cfg), now.online)
    offered = {d.name: d for d in offer_devices(now, cfg, devices, now.online)}
    untainted = {n for n, d in offered.items() if not d.taints}
    taints = {n: [(t["key"], t["effect"]) for t in d.taints] for n, d in offered.items() if d.taints}
    if model == "cpu":  # every CPU device is published; the offline ones tainted
        assert untainted == {f"cpu{c}" for c in MACHINE.online - OFF}
        assert taints == {f"cpu{c}": [("native.cpu/offline", "NoExecute")] for c in OFF}
    elif model == "core":  # core 0 wholly offline, core 5 with one thread left
        assert untainted == {f"core{i}" for i in (1, 2, 3, 4, 6, 7)}
        assert taints == {"core0": [("native.cpu/offline", "NoExecute")], "core5": [("native.cpu/unhealthy", "NoExecute")]}
        assert offered["core5"].cpus == CPUSet([5, 13])  # the whole core, as allocated before
    else:  # a grouped device shrinks to its online CPUs (its capacity says what it can give)
        assert taints == {}
        assert {n: d.capacity["cpu"].value for n, d in offered.items()} == {"numa0": 6, "numa1": 7}
    back = follow_devices(devices, build_devices(carry_numbers(now.cpus, MACHINE), cfg), MACHINE.online)
    assert [d.to_api() for d in offer_devices(MACHINE, cfg, back, MACHINE.online)] == [d.to_api() for d in known]


def test_a_wholly_offline_group_is_published_tainted() -> None:
    cfg = DeviceModelConfig.from_mapping({"model": "grouped", "sharedFloor": 0})
    known = build_devices(MACHINE, cfg)
    node1 = CPUSet.parse("4-7,12-15")
    now = carry_numbers(MACHINE.cpus, with_offline(MACHINE, node1))
    devices = follow_devices(known, build_devices(now, cfg), now.online)
    offered = {d.name: d for d in offer_devices(now, cfg, devices, now.online)}
    assert offered["numa1"].taints == ({"key": "native.cpu/offline", "effect": "NoExecute"},)
    assert offered["numa1"].cpus == node1
    assert not offered["numa0"].taints


def test_health_names_offline_cpus_and_the_claims_on_them() -> None:
    devices = build_devices(MACHINE, DeviceModelConfig(model="grouped"))
    online = MACHINE.online - OFF
    health = {h.name: h for h in device_health(devices, online, {"uid-1": CPUSet([5]), "uid-2": CPUSet([6])})}
    assert not health["numa1"].healthy
    assert health["numa1"].message == "CPU 5 offline (7 of its 8 CPUs online); prepared claims on them: uid-1"
    assert not health["numa0"].healthy
    assert health["numa0"].message.startswith("CPUs 0,8 offline")
    assert all(h.healthy for h in device_health(devices, MACHINE.online))
    cpus = build_devices(MACHINE)
    states = {h.name: h.healthy for h in device_health(cpus, online)}
    assert states == {f"cpu{c}": c not in OFF for c in MACHINE.online}


def test_health_message_is_cut_to_the_kubelet_limit() -> None:
    devices = build_devices(MACHINE, DeviceModelConfig(model="grouped", group_by="machine"))
    claims = {f"claim-{i:04d}-{'x' * 40}": CPUSet([1]) for i in range(40)}
    (h,) = device_health(devices, MACHINE.online - CPUSet([1]), claims)
    assert len(h.message) == MESSAGE_MAX
    assert h.message.endswith("...")


def test_a_device_gone_because_its_cpu_is_reserved_now_is_gone() -> None:
    known = build_devices(MACHINE)
    devices = follow_devices(known, build_devices(MACHINE, exclude=CPUSet([1])), MACHINE.online)
    assert "cpu1" not in {d.name for d in devices}
    assert len(devices) == len(known) - 1


@settings(max_examples=30, deadline=None)
@given(
    model=st.sampled_from(["cpu", "core", "grouped"]),
    taints=st.sampled_from([WITHDRAW, {}, {"offline": "NoSchedule", "unhealthy": "None"}]),
    steps=st.lists(st.lists(st.sampled_from(list(MACHINE.online)), max_size=10, unique=True), min_size=1, max_size=4),
)
def test_any_hotplug_sequence_keeps_names_and_offers_an_offline_cpu_only_tainted(
    model: str, taints: dict[str, str], steps: list[list[int]]
) -> None:
    """(Offered: untainted, or tainted offline/unhealthy with the configured effect; withdrawn
    when the configuration says so.)"""
    taints = {"offline": "NoExecute", "unhealthy": "NoExecute", **taints}
    cfg = DeviceModelConfig.from_mapping({"model": model, "taints": taints})
    devices = build_devices(MACHINE, cfg)
    names = {d.name for d in devices}
    seen = dict(MACHINE.cpus)
    for off in steps:
        if CPUSet(off) == MACHINE.online:
            continue
        now = carry_numbers(seen, with_offline(MACHINE, CPUSet(off)) if off else MACHINE)
        seen.update(now.cpus)
        devices = follow_devices(devices, build_devices(now, cfg), now.online)
        assert {d.name for d in devices} == names  # the same machine: the same names, always
        for d in offer_devices(now, cfg, devices, now.online):
            if not d.cpus <= now.online:  # published only with a taint saying so, never withdrawn-by-choice
                reason = "offline" if not d.cpus & now.online else "unhealthy"
                assert d.taints[0] == {"key": f"native.cpu/{reason}", "effect": taints[reason]}
                assert model != "grouped" or reason == "offline"
        for h, d in zip(device_health(devices, now.online), devices, strict=True):
            assert h.healthy == (d.cpus <= now.online)
