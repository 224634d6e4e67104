"""The native.cpu device model: names, attributes, capacities, config and the API's rules."""

from __future__ import annotations

import dataclasses
import re

import pytest
from hypothesis import given
from hypothesis import strategies as st
from pydantic import ValidationError

from topodra.cpuset import CPUSet
from topodra.dra.attributes import (
    AttributeValidationError,
    Capacity,
    Version,
    attribute_from_api,
    attribute_to_api,
    validate_attributes,
)
from topodra.dra.devices import (
    DRIVER,
    NUMA_NODE_ATTRIBUTE,
    DeviceModelConfig,
    DeviceModelError,
    build_devices,
    device_class,
)
from topodra.topology import CoreType, CPUInfo, Topology, synthetic_topology

HYBRID = synthetic_topology("1s1n1l4c2t4e")
SERVER = synthetic_topology("2s1d2n1l4c2t")


def test_cpu_model_one_device_per_allowed_cpu() -> None:
    devices = build_devices(SERVER, exclude=CPUSet([0, 16]))
    assert sorted(d.name for d in devices) == sorted(f"cpu{c}" for c in SERVER.online - CPUSet([0, 16]))
    assert len(devices) == len(SERVER.online) - 2
    for d in devices:
        assert d.cpus == CPUSet([int(d.name[3:])])
        assert not d.allow_multiple_allocations
        assert d.capacity == {}


def test_cpu_attributes_follow_the_topology() -> None:
    by_name = {d.name: d for d in build_devices(SERVER)}
    for cpu in SERVER.cpus.values():
        a = by_name[f"cpu{cpu.id}"].attributes
        assert a["cpu"] == cpu.id
        assert a["package"] == cpu.package
        assert a["core"] == cpu.core  # machine-unique, not the per-package core_id
        assert a["localMemory"] == cpu.node
        assert a[NUMA_NODE_ATTRIBUTE] == cpu.node
        assert a["coreType"] == "standard"
        assert a["l3Cache"] == cpu.l3
        assert a["l2Cache"] == cpu.l2
        assert a["isolated"] is False
        assert a["maxFreq"] == 5000
        assert a["baseFreq"] == 1900
        assert a["minFreq"] == 400
        sibling = a["smtSibling"]
        assert isinstance(sibling, int)
        assert sibling in cpu.siblings
        assert sibling != cpu.id
        assert a["thread"] == sorted(cpu.siblings).index(cpu.id)
    # core ids are unique machine-wide even though sysfs core_id repeats across packages
    cores = {(by_name[f"cpu{c}"].attributes["core"]) for c in SERVER.cpus_of_package(1)}
    assert cores.isdisjoint({by_name[f"cpu{c}"].attributes["core"] for c in SERVER.cpus_of_package(0)})


def test_hybrid_core_types_and_single_thread_cores() -> None:
    devices = build_devices(HYBRID)
    types = {d.name: d.attributes["coreType"] for d in devices}
    assert {c for c, t in types.items() if t == "P-core"} == {f"cpu{c}" for c in HYBRID.cpus_of_type(HYBRID.core_types()[0])}
    e_cores = [d for d in devices if d.attributes["coreType"] == "E-core"]
    assert len(e_cores) == 4
    for d in e_cores:
        assert "smtSibling" not in d.attributes
        assert d.attributes["thread"] == 0
        assert d.attributes["maxFreq"] == 3900


def test_isolated_cpus_are_published_and_flagged() -> None:
    topo = synthetic_topology("1s1n1l2c2t")
    from dataclasses import replace

    topo = replace(topo, isolated=CPUSet([1]))
    by_name = {d.name: d for d in build_devices(topo)}
    assert by_name["cpu1"].attributes["isolated"] is True
    assert by_name["cpu0"].attributes["isolated"] is False


def test_core_model() -> None:
    devices = build_devices(SERVER, DeviceModelConfig(model="core"), exclude=CPUSet([0]))
    assert len(devices) == len(SERVER.cores())
    first = next(d for d in devices if d.name == "core0")
    assert first.name == "core0"
    assert first.cpus == SERVER.cpus_of_core(0) - CPUSet([0])
    assert first.capacity["cpus"].value == 1
    assert devices[1].capacity["cpus"].value == 2
    assert devices[1].to_api()["capacity"] == {"cpus": {"value": "2"}}
    for d in devices:
        assert "cpu" not in d.attributes
        assert "smtSibling" not in d.attributes
        assert "thread" not in d.attributes
        assert d.attributes["core"] == int(d.name[4:])


def test_core_model_drops_fully_reserved_cores() -> None:
    devices = build_devices(SERVER, DeviceModelConfig(model="core"), exclude=SERVER.cpus_of_core(3))
    assert "core3" not in {d.name for d in devices}


@pytest.mark.parametrize(
    ("group_by", "names"),
    [
        ("numa", ["numa0", "numa1", "numa2", "numa3"]),
        ("socket", ["socket0", "socket1"]),
        ("machine", ["machine"]),
        ("l3", ["l3cache0", "l3cache1", "l3cache2", "l3cache3"]),
    ],
)
def test_grouped_model(group_by: str, names: list[str]) -> None:
    config = DeviceModelConfig(model="grouped", group_by=group_by)  # type: ignore[arg-type]
    devices = build_devices(SERVER, config, exclude=CPUSet([0, 1]))
    assert [d.name for d in devices] == names
    union = CPUSet()
    for d in devices:
        assert d.allow_multiple_allocations
        cap = d.capacity["cpu"]
        assert cap.value == len(d.cpus)
        assert d.to_api()["allowMultipleAllocations"] is True
        assert d.to_api()["capacity"]["cpu"]["requestPolicy"]["validRange"]["step"] == "1"
        assert union.isdisjoint(d.cpus)
        union |= d.cpus
    assert union == SERVER.online - CPUSet([0, 1])


def test_grouped_splits_hybrid_groups_by_core_type() -> None:
    devices = build_devices(HYBRID, DeviceModelConfig(model="grouped"))
    assert [d.name for d in devices] == ["numa0-pcore", "numa0-ecore"]
    assert devices[0].attributes["coreType"] == "P-core"
    assert devices[1].attributes["coreType"] == "E-core"
    assert devices[1].capacity["cpu"].value == 4


def dynamiq() -> Topology:
    """4 little, 3 big and 1 prime core: three CPU kinds, two of them P-cores."""
    t = synthetic_topology("1s1d1n1l8c1t")
    kind = [0] * 4 + [1] * 3 + [2]
    cpus = {
        c: dataclasses.replace(i, kind=kind[c], core_type=CoreType.E_CORE if kind[c] == 0 else CoreType.P_CORE)
        for c, i in t.cpus.items()
    }
    return dataclasses.replace(t, cpus=cpus)


def test_cpu_kind_rank_is_an_attribute_where_kinds_differ() -> None:
    assert all("cpuKind" not in d.attributes for d in build_devices(SERVER))
    assert {d.attributes["cpuKind"] for d in build_devices(HYBRID) if d.attributes["coreType"] == "P-core"} == {1}
    kinds = {d.name: d.attributes["cpuKind"] for d in build_devices(dynamiq())}
    assert kinds == {f"cpu{c}": 0 if c < 4 else 1 if c < 7 else 2 for c in range(8)}


def test_grouped_splits_by_kind_and_numbers_kinds_of_one_type() -> None:
    devices = build_devices(dynamiq(), DeviceModelConfig(model="grouped"))
    assert [d.name for d in devices] == ["numa0-pcore1", "numa0-pcore2", "numa0-ecore"]
    assert [(d.attributes["coreType"], d.attributes["cpuKind"]) for d in devices] == [
        ("P-core", 1),
        ("P-core", 2),
        ("E-core", 0),
    ]
    assert [d.capacity["cpu"].value for d in devices] == [3, 1, 4]


def test_grouped_single_cpu_group_is_valid() -> None:
    topo = synthetic_topology("1s1n1l1c1t")
    (dev,) = build_devices(topo, DeviceModelConfig(model="grouped"))
    api = dev.to_api()["capacity"]["cpu"]
    assert api["value"] == "1"
    assert "step" not in api["requestPolicy"]["validRange"]


def test_config_add_rename_drop() -> None:
    config = DeviceModelConfig(
        add_attributes={"rack": "r7", "example.com/tier": 3, "fw": {"version": "1.2.3"}},
        rename_attributes={"localMemory": "memoryNode"},
        drop_attributes=["minFreq"],
    )
    d = build_devices(HYBRID, config)[0]
    assert d.attributes["rack"] == "r7"
    assert d.attributes["example.com/tier"] == 3
    assert d.attributes["fw"] == Version("1.2.3")
    assert "localMemory" not in d.attributes
    assert d.attributes["memoryNode"] == 0
    assert "minFreq" not in d.attributes
    api = d.to_api()["attributes"]
    assert api["fw"] == {"version": "1.2.3"}
    assert api["example.com/tier"] == {"int": 3}


def test_drop_then_rename_replaces_an_attribute() -> None:
    config = DeviceModelConfig(drop_attributes=["coreType"], rename_attributes={"cluster": "coreType"})
    d = next(d for d in build_devices(HYBRID, config) if d.name == "cpu0")
    assert d.attributes["coreType"] == 0


@pytest.mark.parametrize(
    ("kwargs", "needle"),
    [
        ({"add_attributes": {"bad name": 1}}, "bad name"),
        ({"add_attributes": {"x" * 33: 1}}, "x" * 33),
        ({"add_attributes": {"Bad.Domain/x": 1}}, "Bad.Domain/x"),
        ({"add_attributes": {"long": "y" * 65}}, "long"),
        ({"add_attributes": {"v": {"version": "1.2"}}}, "'v'"),
        ({"add_attributes": {"e": []}}, "'e'"),
        ({"add_attributes": {"m": [1, "a"]}}, "'m'"),
        ({"add_attributes": {"f": 1.5}}, "'f'"),
        ({"add_attributes": {"big": 1 << 63}}, "'big'"),
        ({"rename_attributes": {"core": "9bad"}}, "9bad"),
        ({"rename_attributes": {"core": "x", "die": "x"}}, "'x'"),
        ({"drop_attributes": ["a/b/c"]}, "a/b/c"),
        ({"attribute_hook": "no-colon"}, "attributeHook"),
        ({"model": "socket"}, "model"),
        ({"unknown": 1}, "unknown"),
    ],
)
def test_config_errors_name_the_attribute(kwargs: dict[str, object], needle: str) -> None:
    with pytest.raises(ValidationError) as info:
        DeviceModelConfig.from_mapping(kwargs)
    assert needle in str(info.value)


def test_rename_or_drop_of_unknown_attribute_is_an_error() -> None:
    with pytest.raises(DeviceModelError, match="'coreTyp'"):
        build_devices(HYBRID, DeviceModelConfig(rename_attributes={"coreTyp": "kind"}))
    with pytest.raises(DeviceModelError, match="'smtSibling'"):
        build_devices(HYBRID, DeviceModelConfig(model="grouped", drop_attributes=["smtSibling"]))


def test_rename_collision_is_an_error() -> None:
    with pytest.raises(AttributeValidationError, match="'core'"):
        build_devices(HYBRID, DeviceModelConfig(rename_attributes={"cluster": "core"}))


def test_too_many_attributes_names_the_device() -> None:
    extra = {f"a{i}": i for i in range(20)}
    with pytest.raises(AttributeValidationError, match=r"device 'cpu0'.*at most 32"):
        build_devices(HYBRID, DeviceModelConfig(add_attributes=extra, order="cpu-id"))


# --- the attribute hook -------------------------------------------------------------------------

def rack_hook(cpu: CPUInfo, topology: Topology) -> dict[str, object]:
    return {
        "parity": "even" if cpu.id % 2 == 0 else "odd",
        "half": "low" if cpu.id < len(topology.cpus) // 2 else "high",
        "example.com/socketName": f"s{cpu.package}",
    }


def bad_hook(cpu: CPUInfo, topology: Topology) -> dict[str, object]:
    return {"bad-name": 1}


def list_hook(cpu: CPUInfo, topology: Topology) -> object:
    return ["not", "a", "mapping"]


def raising_hook(cpu: CPUInfo, topology: Topology) -> dict[str, object]:
    raise RuntimeError("boom")


def test_attribute_hook_adds_per_cpu_attributes() -> None:
    config = DeviceModelConfig(attribute_hook=f"{__name__}:rack_hook")
    devices = {d.name: d for d in build_devices(SERVER, config)}
    assert devices["cpu0"].attributes["parity"] == "even"
    assert devices["cpu1"].attributes["parity"] == "odd"
    # aggregate devices keep hook attributes their CPUs agree on
    cores = {d.name: d for d in build_devices(SERVER, DeviceModelConfig(model="core", attribute_hook=f"{__name__}:rack_hook"))}
    assert cores["core0"].cpus == CPUSet([0, 16])
    assert cores["core0"].attributes["parity"] == "even"  # both threads even
    assert "half" not in cores["core0"].attributes  # thread 0 is low, thread 16 high
    assert cores["core0"].attributes["example.com/socketName"] == "s0"


@pytest.mark.parametrize(
    ("hook", "needle"),
    [
        ("bad_hook", "bad-name"),
        ("list_hook", "expected a mapping"),
        ("raising_hook", "boom"),
        ("missing_hook", "has no 'missing_hook'"),
    ],
)
def test_attribute_hook_errors(hook: str, needle: str) -> None:
    with pytest.raises((DeviceModelError, AttributeValidationError), match=needle):
        build_devices(SERVER, DeviceModelConfig(attribute_hook=f"{__name__}:{hook}"))


def test_attribute_hook_import_error() -> None:
    with pytest.raises(DeviceModelError, match="cannot import 'no_such_module_xyz'"):
        build_devices(SERVER, DeviceModelConfig(attribute_hook="no_such_module_xyz:f"))


# --- validation rules ----------------------------------------------------------------------------

def test_validate_attributes_rules() -> None:
    validate_attributes({"a": 1, "example.com/b": "x", "c": True, "d": Version("1.0.0-rc.1+b5")})
    with pytest.raises(AttributeValidationError, match="given twice"):
        validate_attributes({"x": 1, f"{DRIVER}/x": 2})
    with pytest.raises(AttributeValidationError, match="48"):
        validate_attributes({f"l{i}": tuple(range(10)) for i in range(5)})
    with pytest.raises(AttributeValidationError, match="one type"):
        validate_attributes({"l": (1, "a")})  # type: ignore[dict-item]
    with pytest.raises(AttributeValidationError, match="at most 32"):
        validate_attributes({f"a{i}": i for i in range(30)}, {f"c{i}": Capacity(1) for i in range(3)})
    with pytest.raises(AttributeValidationError, match="semantic version"):
        validate_attributes({"v": Version("01.2.3")})
    with pytest.raises(AttributeValidationError, match="exceeds the capacity"):
        validate_attributes({}, {"cpu": Capacity(1, default=1, valid_range=(1, 1, 1))})


def test_list_attributes_round_trip() -> None:
    for value in ((1, 2), ("a",), (True, False), (Version("1.0.0"),)):
        assert attribute_from_api(attribute_to_api(value)) == value
    for scalar in (1, True, "s", Version("2.0.0")):
        assert attribute_from_api(attribute_to_api(scalar)) == scalar


def test_device_class() -> None:
    cls = device_class()
    assert cls["metadata"]["name"] == "native.cpu"
    assert cls["spec"]["selectors"] == [{"cel": {"expression": 'device.driver == "native.cpu"'}}]


SPECS = st.builds(
    lambda s, n, c, t, e: f"{s}s1d{n}n1l{c}c{t}t{e}e",
    st.integers(1, 2),
    st.integers(1, 2),
    st.integers(1, 6),
    st.integers(1, 2),
    st.integers(0, 4),
)


@given(spec=SPECS, data=st.data())
def test_every_model_partitions_the_allowed_cpus(spec: str, data: st.DataObject) -> None:
    topo = synthetic_topology(spec)
    reserved = CPUSet(data.draw(st.sets(st.sampled_from(sorted(topo.online)), max_size=3)))
    allowed = topo.online - reserved
    for config in (
        DeviceModelConfig(),
        DeviceModelConfig(model="core"),
        DeviceModelConfig(model="grouped", group_by="numa"),
        DeviceModelConfig(model="grouped", group_by="l3"),
        DeviceModelConfig(model="grouped", group_by="socket"),
    ):
        devices = build_devices(topo, config, exclude=reserved)
        union = CPUSet()
        for d in devices:
            assert d.cpus
            assert union.isdisjoint(d.cpus)
            union |= d.cpus
            assert d.cpus <= allowed
        assert union == allowed
        assert len({d.name for d in devices}) == len(devices)
        assert build_devices(topo, config, exclude=reserved) == devices  # deterministic


# --- device order: what the scheduler's first fit tries first ------------------------------------


def test_topology_order_keeps_core_threads_together_and_walks_groups() -> None:
    names = [d.name for d in build_devices(SERVER, DeviceModelConfig(order="topology"))]
    cpus = [int(n[3:]) for n in names]
    # Threads of a core are neighbours (Linux numbers SMT siblings 16 apart on this machine).
    for a, b in zip(cpus[::2], cpus[1::2], strict=True):
        assert SERVER.siblings(a) == CPUSet([a, b])
    # NUMA nodes (and packages) are contiguous runs, in ascending order.
    nodes = [SERVER.cpu(c).node for c in cpus]
    assert nodes == sorted(nodes)


def test_topology_reversed_starts_at_the_far_end() -> None:
    names = [d.name for d in build_devices(SERVER)]
    cpus = [int(n[3:]) for n in names]
    assert SERVER.cpu(cpus[0]).package == max(SERVER.packages())
    assert cpus[-2:] == [0, 16]  # CPU 0's core comes last
    nodes = [SERVER.cpu(c).node for c in cpus]
    assert nodes == sorted(nodes, reverse=True)
    for a, b in zip(cpus[::2], cpus[1::2], strict=True):
        assert SERVER.siblings(a) == CPUSet([a, b])


def test_cpu_id_order_is_the_prototypes() -> None:
    names = [d.name for d in build_devices(SERVER, DeviceModelConfig(order="cpu-id"))]
    assert names == [f"cpu{c}" for c in SERVER.online]


def test_core_model_follows_the_order() -> None:
    names = [d.name for d in build_devices(SERVER, DeviceModelConfig(model="core"))]
    assert names[0] == f"core{max(SERVER.cores())}"
    assert names[-1] == "core0"


@pytest.mark.parametrize(
    ("kwargs", "needle"),
    [
        ({"model": "socket"}, "model must be one of"),
        ({"group_by": "rack"}, "groupBy must be one of"),
        ({"order": "random"}, "order must be one of"),
        ({"shared_floor": -1}, "sharedFloor"),
        ({"shared_floor": True}, "sharedFloor"),
        ({"add_attributes": {"f": 1.5}}, "addAttributes: attribute 'f'"),
        ({"rename_attributes": {"core": "x", "die": "x"}}, "renameAttributes:"),
        ({"drop_attributes": "coreType"}, "dropAttributes: must be a list"),
        ({"attribute_hook": "no-colon"}, "attributeHook:"),
    ],
)
def test_config_built_directly_checks_itself(kwargs: dict[str, object], needle: str) -> None:
    """The simulator and the CLI build the config without pydantic: the same rules hold."""
    with pytest.raises(ValueError, match=re.escape(needle)):
        DeviceModelConfig(**kwargs)  # type: ignore[arg-type]
