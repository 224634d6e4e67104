"""Device taints: isolated and reserved CPUs published tainted (or withdrawn, or untainted) per
the configuration, in every device model; the configuration's checks."""

from __future__ import annotations

from dataclasses import replace

import pytest
from pydantic import ValidationError

from topodra.cpuset import CPUSet
from topodra.dra.devices import Device, DeviceModelConfig, build_devices, offer_devices
from topodra.dra.slices import MAX_DEVICES_PER_SLICE_ADVANCED, build_slices
from topodra.dra.taints import TaintConfig
from topodra.topology.synthetic import synthetic_topology

# 8 CPUs, cores (0,4) (1,5) (2,6) (3,7): core 3 isolated (isolcpus) and tickless, core 2 tickless only
MACHINE = replace(
    synthetic_topology("1s1d1n1l4c2t"), isolated=CPUSet.parse("3,7"), nohz_full=CPUSet.parse("2-3,6-7")
)
RESERVED = CPUSet([0])


def _taints(devices: list[Device]) -> dict[str, list[tuple[str, str, str]]]:
    return {d.name: [(t["key"], t.get("value", ""), t["effect"]) for t in d.taints] for d in devices if d.taints}


def test_cpu_model_taints_isolated_and_reserved_cpus() -> None:
    devices = build_devices(MACHINE, DeviceModelConfig(), reserved=RESERVED)
    assert len(devices) == 8  # every CPU published
    iso = "native.cpu/isolated"
    assert _taints(devices) == {
        "cpu0": [("native.cpu/reserved", "", "NoSchedule")],
        "cpu3": [(iso, "isolcpus.nohz_full", "NoSchedule")],
        "cpu7": [(iso, "isolcpus.nohz_full", "NoSchedule")],
        "cpu2": [(iso, "nohz_full", "NoSchedule")],
        "cpu6": [(iso, "nohz_full", "NoSchedule")],
    }
    assert {d.name: d.attributes["isolated"] for d in devices if d.attributes["isolated"]} == {"cpu3": True, "cpu7": True}


def test_core_model_taints_a_core_holding_such_a_cpu() -> None:
    devices = build_devices(MACHINE, DeviceModelConfig(model="core"), reserved=CPUSet([0, 3]))
    # reserved wins over isolated (the policy's partition): CPU 3 is reserved, its sibling 7 isolated
    assert _taints(devices) == {
        "core0": [("native.cpu/reserved", "", "NoSchedule")],
        "core3": [("native.cpu/reserved", "", "NoSchedule"), ("native.cpu/isolated", "isolcpus.nohz_full", "NoSchedule")],
        "core2": [("native.cpu/isolated", "nohz_full", "NoSchedule")],
    }


def test_grouped_model_sets_tainted_cpus_apart_in_devices_of_their_own() -> None:
    cfg = DeviceModelConfig(model="grouped", taints=TaintConfig(isolated="NoExecute"))
    devices = build_devices(MACHINE, cfg, reserved=RESERVED)
    assert {d.name: d.cpus for d in devices} == {
        "numa0": CPUSet.parse("1,4-5"),
        "numa0-reserved": CPUSet([0]),
        "numa0-isolated": CPUSet.parse("2-3,6-7"),
    }
    assert _taints(devices) == {
        "numa0-reserved": [("native.cpu/reserved", "", "NoSchedule")],
        "numa0-isolated": [("native.cpu/isolated", "isolcpus.nohz_full", "NoExecute")],
    }
    assert devices[2].capacity["cpu"].value == 4
    # the offer shrinks each device on its own; none merges into another
    offered = offer_devices(MACHINE, cfg, devices, MACHINE.online - CPUSet([7]), reserved=RESERVED)
    assert {d.name: len(d.cpus) for d in offered} == {"numa0": 3, "numa0-reserved": 1, "numa0-isolated": 3}


def test_withdraw_and_untainted_keep_the_behaviour_before_taints() -> None:
    for model in ("cpu", "core", "grouped"):
        cfg = DeviceModelConfig.from_mapping({"model": model, "taints": {"reserved": "Withdraw", "isolated": "Untainted"}})
        devices = build_devices(MACHINE, cfg, reserved=RESERVED)
        assert not _taints(devices), model
        published = CPUSet()
        for d in devices:
            published |= d.cpus
        assert published == MACHINE.online - RESERVED
    cfg = DeviceModelConfig(taints=TaintConfig(isolated="Withdraw"))
    names = {d.name for d in build_devices(MACHINE, cfg, reserved=RESERVED)}
    assert names == {"cpu0", "cpu1", "cpu4", "cpu5"}


def test_tainted_devices_hold_a_slice_to_64_devices() -> None:
    big = replace(synthetic_topology("1s1d1n1l64c2t"), isolated=CPUSet([127]))
    slices = build_slices("n", build_devices(big))
    assert [len(s["spec"]["devices"]) for s in slices] == [MAX_DEVICES_PER_SLICE_ADVANCED, 64]
    assert len(build_slices("n", build_devices(big, DeviceModelConfig(taints=TaintConfig(isolated="Untainted"))))) == 1


@pytest.mark.parametrize(
    ("taints", "words"),
    [
        ({"offline": "Untainted"}, "taints.offline must be one of NoSchedule, NoExecute, None, Withdraw"),
        ({"isolated": "PreferNoSchedule"}, "taints.isolated must be one of"),
        ({"isolation": "None"}, "isolation"),
    ],
)
def test_a_bad_taint_setting_is_refused_naming_it(taints: dict[str, str], words: str) -> None:
    with pytest.raises(ValidationError, match=words):
        DeviceModelConfig.from_mapping({"taints": taints})
    with pytest.raises(ValueError, match=words):
        DeviceModelConfig(taints=taints)  # type: ignore[arg-type]


def test_the_config_section_reads_camel_or_snake_keys() -> None:
    cfg = DeviceModelConfig.from_mapping({"sharedFloor": 0, "taints": {"isolated": "None", "reserved": "NoExecute"}})
    assert cfg.taints == TaintConfig(isolated="None", reserved="NoExecute")
    assert DeviceModelConfig.from_mapping({}).taints == TaintConfig()
