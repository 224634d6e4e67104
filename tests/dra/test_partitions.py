"""The core-or-thread device model: cores and threads of the same CPUs, kept apart by counters."""

from __future__ import annotations

from typing import Any

from topodra.dra.devices import DRIVER, DeviceModelConfig, build_devices, device_class
from topodra.dra.slices import build_slices
from topodra.sim.allocator import Allocator
from topodra.topology import synthetic_topology

SERVER = synthetic_topology("2s1d2n1l4c2t")
MODEL = DeviceModelConfig(model="core-or-thread")


def _claim(name: str, unit: str, count: int, same: str | None = None) -> dict[str, Any]:
    sel = [{"cel": {"expression": f'device.attributes["{DRIVER}"].unit == "{unit}"'}}]
    devices: dict[str, Any] = {"requests": [{"name": "r", "exactly": {"deviceClassName": DRIVER, "count": count, "selectors": sel}}]}
    if same:
        devices["constraints"] = [{"requests": ["r"], "matchAttribute": f"{DRIVER}/{same}"}]
    return {"metadata": {"name": name, "namespace": "default", "uid": name}, "spec": {"devices": devices}}


def test_every_core_and_every_thread_is_a_device_consuming_its_core_counter() -> None:
    devices = build_devices(SERVER, MODEL)
    cores = [d for d in devices if d.attributes["unit"] == "core"]
    threads = [d for d in devices if d.attributes["unit"] == "thread"]
    assert len(threads) == len(SERVER.online)
    assert len(cores) == len(SERVER.online) // 2
    for d in cores:
        (use,) = d.consumes_counters
        assert use["counters"] == {d.name: {"value": "2"}}
        assert len(d.cpus) == 2
    for d in threads:
        (use,) = d.consumes_counters
        assert use["counters"] == {f"core{SERVER.cpus[d.cpus.first()].core}": {"value": "1"}}


def test_counters_go_in_a_slice_of_their_own_after_the_device_slices() -> None:
    slices = build_slices("node-1", build_devices(SERVER, MODEL))
    assert "sharedCounters" not in slices[0]["spec"]
    assert "devices" not in slices[-1]["spec"]
    assert all(s["spec"]["pool"]["resourceSliceCount"] == len(slices) for s in slices)
    assert [len(s["spec"].get("devices", [])) <= 64 for s in slices] == [True] * len(slices)


def test_cores_hide_their_threads_and_threads_their_cores() -> None:
    devices = build_devices(SERVER, MODEL)
    by_name = {d.name: d for d in devices}
    alloc = Allocator(build_slices("node-1", devices), [device_class()], budget=None)
    got, _ = alloc.allocate_with_stats("node-1", [_claim("cores", "core", 2), _claim("threads", "thread", 3, "l3Cache")])
    assert got is not None
    cores, threads = ([by_name[r.device] for r in g.results] for g in got)
    core_cpus = cores[0].cpus | cores[1].cpus
    thread_cpus = threads[0].cpus | threads[1].cpus | threads[2].cpus
    assert len(core_cpus) == 4
    assert len(thread_cpus) == 3
    assert not core_cpus & thread_cpus
    assert len({SERVER.cpus[c].l3 for c in thread_cpus}) == 1
    # a third claim for every core left cannot take a core one of whose threads is allocated
    left = len(SERVER.online) // 2 - 2 - len({SERVER.cpus[c].core for c in thread_cpus})
    got2, _ = alloc.allocate_with_stats("node-1", [_claim("a", "core", 2), _claim("b", "thread", 3, "l3Cache"), _claim("c", "core", left + 1)])
    assert got2 is None


def test_a_withdrawn_core_leaves_every_offered_thread_of_it_allocatable_together() -> None:
    from topodra.cpuset import CPUSet
    from topodra.dra.devices import offer_devices

    smt4 = synthetic_topology("1s1n1l2c4t")
    devices = build_devices(smt4, MODEL)
    kept = smt4.cpus_of_core(0).first()  # one thread of core 0 kept back (the shared floor)
    offered = offer_devices(smt4, MODEL, devices, smt4.online - CPUSet([kept]))
    assert "core0" not in {d.name for d in offered}
    slices = build_slices("node-1", offered)
    counters = slices[-1]["spec"]["sharedCounters"][0]["counters"]
    assert counters == {"core0": {"value": "3"}, "core1": {"value": "4"}}
    got, _ = Allocator(slices, [device_class()], budget=None).allocate_with_stats("node-1", [_claim("t", "thread", 7)])
    assert got is not None
    assert len(got[0].results) == 7  # the three threads of core 0 left and the four of core 1
