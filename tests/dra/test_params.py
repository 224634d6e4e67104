"""Per-claim parameters (``native.cpu/v1alpha1`` ``CpuConfig``): parsing, merging, and what each
field does at Prepare for every device model."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from topodra.cpuset import CPUSet
from topodra.dra.checkpoint import load_checkpoint
from topodra.dra.devices import DeviceModelConfig, build_devices
from topodra.dra.driver import ClaimRef, Driver, PrepareResult
from topodra.dra.params import API_VERSION, KIND, CpuConfig, parse_parameters, request_config
from topodra.policy.api import Changes, ContainerRequest, QoSClass
from topodra.topology import synthetic_topology
from topodra.topology.model import CoreType, Topology

from .dra_fakes import ClaimStore, RecordingPolicy, make_claim

#: 1 socket, 2 NUMA nodes: node 0 = cores 0-3 (CPUs 0-3, 8-11), node 1 = cores 4-7 (4-7, 12-15)
TWO_NODES = synthetic_topology("1s1d2n1l4c2t")
DRIVER = "native.cpu"


def params(**fields: Any) -> dict[str, Any]:
    return {"apiVersion": API_VERSION, "kind": KIND, **fields}


def opaque(source: str, parameters: Any, requests: list[str] | None = None, driver: str = DRIVER) -> dict[str, Any]:
    entry: dict[str, Any] = {"source": source, "opaque": {"driver": driver, "parameters": parameters}}
    if requests is not None:
        entry["requests"] = requests
    return entry


# --- parsing --------------------------------------------------------------------------------------------


def test_a_full_config_parses() -> None:
    config, problems = parse_parameters(
        params(wholeCores=True, numaPlacement="spread", preferredCoreType="P-core", memoryNodes="all")
    )
    assert problems == []
    assert config == CpuConfig(whole_cores=True, numa_placement="spread", preferred_core_type="P-core", memory_nodes="all")
    config, problems = parse_parameters(params(cpuset="4-7,12"))
    assert problems == []
    assert config.cpuset == CPUSet([4, 5, 6, 7, 12])


@pytest.mark.parametrize(
    ("fields", "line"),
    [
        ({"wholeCores": "yes"}, 'parameters.wholeCores: must be true or false (got "yes")'),
        ({"numaPlacement": "packed"}, 'parameters.numaPlacement: must be pack or spread (got "packed")'),
        ({"preferredCoreType": "p-core"}, 'parameters.preferredCoreType: must be P-core or E-core or standard (got "p-core")'),
        ({"memoryNodes": "interleave"}, 'parameters.memoryNodes: must be local or all (got "interleave")'),
        ({"memoryNodes": 1}, "parameters.memoryNodes: must be local or all (got 1)"),
        ({"cpuset": "4-"}, "parameters.cpuset: is not a CPU list"),
        ({"cpuset": 4}, 'parameters.cpuset: must be a CPU list in the kernel\'s format, e.g. "4-7,12" (got 4)'),
        ({"cpuset": ""}, 'parameters.cpuset: must name at least one CPU (got "")'),
        ({"cores": 2}, "parameters.cores: unknown field; CpuConfig has wholeCores, numaPlacement"),
        (
            {"cpuset": "1-2", "numaPlacement": "spread"},
            'parameters.numaPlacement: cannot be set with cpuset: the CPUs are already chosen (got "spread")',
        ),
    ],
)
def test_each_bad_value_is_one_problem_naming_its_path_and_value(fields: dict[str, Any], line: str) -> None:
    _, problems = parse_parameters(params(**fields))
    assert len(problems) == 1, problems
    assert str(problems[0]).startswith(line), str(problems[0])


def test_the_version_and_kind_are_required_and_checked() -> None:
    _, problems = parse_parameters({"wholeCores": True})
    assert [str(p) for p in problems] == [
        f"parameters.apiVersion: is required: {API_VERSION}",
        f"parameters.kind: is required: {KIND}",
    ]
    _, problems = parse_parameters({"apiVersion": "native.cpu/v1", "kind": "GpuConfig"})
    assert [str(p) for p in problems] == [
        f'parameters.apiVersion: must be {API_VERSION}, the version this driver reads (got "native.cpu/v1")',
        f'parameters.kind: must be {KIND} (got "GpuConfig")',
    ]
    _, problems = parse_parameters(["wholeCores"])
    assert len(problems) == 1
    assert "must be an object" in str(problems[0])


# --- merging in the API's order -------------------------------------------------------------------------


def test_class_first_claim_wins_field_by_field() -> None:
    entries = [
        opaque("FromClass", params(wholeCores=True, numaPlacement="spread"), ["cpus"]),
        opaque("FromClaim", params(numaPlacement="pack", memoryNodes="all")),
    ]
    config, problems = request_config(entries, "cpus")
    assert problems == []
    assert config == CpuConfig(whole_cores=True, numa_placement="pack", memory_nodes="all")


def test_configs_apply_to_the_requests_they_name() -> None:
    entries = [
        opaque("FromClaim", params(wholeCores=True), ["a"]),  # a main request covers its subrequests
        opaque("FromClaim", params(memoryNodes="all"), ["b/fast"]),
        opaque("FromClaim", {"anything": "goes"}, None, driver="gpu.example.com"),  # another driver's
    ]
    assert request_config(entries, "a/slow")[0] == CpuConfig(whole_cores=True)
    assert request_config(entries, "b/fast")[0] == CpuConfig(memory_nodes="all")
    assert request_config(entries, "b/slow")[0] == CpuConfig()
    assert request_config(entries, "c") == (CpuConfig(), [])


def test_a_merge_that_conflicts_is_a_problem_of_the_request() -> None:
    entries = [opaque("FromClass", params(numaPlacement="spread")), opaque("FromClaim", params(cpuset="4-5"))]
    _, problems = request_config(entries, "cpus")
    assert [str(p) for p in problems] == [
        "status.allocation.devices.config (merged for request 'cpus').numaPlacement: cannot be set with cpuset: the CPUs are already chosen (got \"spread\")"
    ]


# --- Prepare --------------------------------------------------------------------------------------------


class Rig:
    """A driver on ``topology`` with ``model`` devices, the real policy behind it."""

    def __init__(self, tmp: Path, topology: Topology = TWO_NODES, *, model: str = "cpu", group_by: str = "socket",
                 reserved: CPUSet | None = None) -> None:
        self.tmp = tmp
        self.topology = topology
        self.policy = RecordingPolicy(topology, reserved or CPUSet())
        self.store = ClaimStore()
        self.pushed: list[Changes] = []
        config = DeviceModelConfig(model=model, group_by=group_by)  # type: ignore[arg-type]
        self.devices = build_devices(topology, config, exclude=reserved or CPUSet())
        self.driver = self.new_driver()

    def new_driver(self) -> Driver:
        async def on_changes(changes: Changes) -> None:
            self.pushed.append(changes)

        return Driver(
            policy=self.policy, lock=asyncio.Lock(), fetch_claim=self.store.fetch, cdi_dir=self.tmp / "cdi",
            checkpoint_path=self.tmp / "plugin" / "checkpoint.json", devices=self.devices, pool="node-a",
            on_changes=on_changes,
        )

    def claim(self, uid: str, devices: list[str], *config: dict[str, Any], consumed: dict[str, str] | None = None,
              request: str = "cpu") -> None:
        obj = make_claim(uid, devices, consumed=consumed)
        for r in obj["status"]["allocation"]["devices"]["results"]:
            r["request"] = request
        if config:
            obj["status"]["allocation"]["devices"]["config"] = list(config)
        self.store.add(obj)

    def prepare(self, *uids: str) -> dict[str, PrepareResult]:
        return asyncio.run(self.driver.prepare([ClaimRef("default", u, f"claim-{u}") for u in uids]))

    def cpus(self, uid: str) -> CPUSet:
        res = self.prepare(uid)[uid]
        assert res.error == "", res.error
        assert res.claim is not None
        return res.claim.cpus

    def error(self, uid: str) -> str:
        res = self.prepare(uid)[uid]
        assert res.claim is None, f"prepared {res.claim}"
        assert "\n" not in res.error
        assert self.policy.claimed(uid) is None  # nothing claimed
        return res.error


def claim_config(**fields: Any) -> dict[str, Any]:
    return opaque("FromClaim", params(**fields))


def class_config(**fields: Any) -> dict[str, Any]:
    return opaque("FromClass", params(**fields), ["cpu"])


def nodes_of(topology: Topology, cpus: CPUSet) -> set[int]:
    return {topology.cpus[c].node for c in cpus}


def whole(topology: Topology, cpus: CPUSet) -> bool:
    return all(topology.cpus_of_core(topology.cpus[c].core) <= cpus for c in cpus)


# grouped: topodra picks, the parameters steer the pick


def test_grouped_packs_on_one_numa_node_by_default_and_spreads_when_asked(tmp_path: Path) -> None:
    rig = Rig(tmp_path, model="grouped")
    rig.claim("packed", ["socket0"], consumed={"socket0": "4"})
    rig.claim("spread", ["socket0"], claim_config(numaPlacement="spread"), consumed={"socket0": "4"})
    packed = rig.cpus("packed")
    assert len(packed) == 4
    assert len(nodes_of(TWO_NODES, packed)) == 1
    spread = rig.cpus("spread")
    assert len(spread) == 4
    assert [len(spread & TWO_NODES.cpus_of_node(n)) for n in (0, 1)] == [2, 2]
    assert spread.isdisjoint(packed)


def test_grouped_spread_with_whole_cores_spreads_cores(tmp_path: Path) -> None:
    rig = Rig(tmp_path, model="grouped")
    rig.claim("u", ["socket0"], claim_config(numaPlacement="spread", wholeCores=True), consumed={"socket0": "4"})
    cpus = rig.cpus("u")
    assert whole(TWO_NODES, cpus)
    assert [len(cpus & TWO_NODES.cpus_of_node(n)) for n in (0, 1)] == [2, 2]


def test_grouped_whole_cores_skip_half_used_cores_and_refuse_an_odd_count(tmp_path: Path) -> None:
    rig = Rig(tmp_path, model="grouped", group_by="numa")
    # A single CPU of each of cores 0-2 is taken (an explicit cpuset): only core 3 is whole on node 0.
    rig.claim("singles", ["numa0"], claim_config(cpuset="0-2"), consumed={"numa0": "3"})
    assert rig.cpus("singles") == CPUSet([0, 1, 2])
    rig.claim("plain", ["numa0"], consumed={"numa0": "2"})
    rig.claim("cores", ["numa0"], claim_config(wholeCores=True), consumed={"numa0": "2"})
    cores = rig.cpus("cores")
    assert cores == CPUSet([3, 11])  # the one whole core left
    rig.claim("more", ["numa0"], claim_config(wholeCores=True), consumed={"numa0": "2"})
    assert "2 CPUs wanted out of 8-10 but only 0 are free on whole cores" in rig.error("more")
    rig.claim("odd", ["numa1"], claim_config(wholeCores=True), consumed={"numa1": "3"})
    error = rig.error("odd")
    assert "3 CPUs of 4-7,12-15 cannot be whole cores" in error, error
    assert rig.cpus("plain") <= CPUSet([8, 9, 10])  # without the parameter, half-used cores are fine


def test_grouped_cpuset_takes_exactly_those_cpus(tmp_path: Path) -> None:
    rig = Rig(tmp_path, model="grouped")
    rig.claim("u", ["socket0"], claim_config(cpuset="5,9,13"), consumed={"socket0": "3"})
    assert rig.cpus("u") == CPUSet([5, 9, 13])
    rig.claim("count", ["socket0"], claim_config(cpuset="1-2"), consumed={"socket0": "3"})
    assert "cpuset 1-2 holds 2 CPUs of device socket0, 3 were allocated" in rig.error("count")
    rig.claim("busy", ["socket0"], claim_config(cpuset="4-5"), consumed={"socket0": "2"})
    assert "CPUs 5 are in use" in rig.error("busy")


def test_grouped_cpuset_must_lie_in_the_allocated_device(tmp_path: Path) -> None:
    rig = Rig(tmp_path, model="grouped", group_by="numa")
    rig.claim("u", ["numa0"], claim_config(cpuset="4-5"), consumed={"numa0": "2"})
    assert "cpuset 4-5 holds 0 CPUs of device numa0, 2 were allocated" in rig.error("u")


def test_grouped_preferred_core_type_steers_the_pick(tmp_path: Path) -> None:
    rig = Rig(tmp_path, model="grouped")
    seen: list[dict[str, Any]] = []
    pick = rig.policy.pick

    def recording(count: int, within: CPUSet, **steer: Any) -> CPUSet:
        seen.append(steer)
        return pick(count, within, **steer)

    rig.policy.pick = recording  # type: ignore[method-assign]
    rig.claim("u", ["socket0"], claim_config(preferredCoreType="standard", wholeCores=True), consumed={"socket0": "2"})
    rig.cpus("u")
    assert seen == [{"prefer": CoreType.STANDARD, "whole_cores": True}]


def test_preferred_core_type_picks_that_type_first() -> None:
    """The policy's side of ``preferredCoreType``: a pick over both kinds takes the preferred one."""
    from topodra.policy.config import PolicyConfig
    from topodra.policy.policy import Policy

    hybrid = synthetic_topology("1s1d1n1l2c2t4e")
    policy = Policy(hybrid, PolicyConfig())
    ecores, pcores = hybrid.cpus_of_type(CoreType.E_CORE), hybrid.cpus_of_type(CoreType.P_CORE)
    assert policy.pick(2, hybrid.online, prefer=CoreType.E_CORE) <= ecores
    assert policy.pick(2, hybrid.online, prefer=CoreType.P_CORE) <= pcores
    assert len(policy.pick(6, hybrid.online, prefer=CoreType.P_CORE)) == 6  # not enough: any kind


# cpu, core, core-or-thread: the scheduler chose the CPUs; parameters check or are refused


def test_cpu_devices_whole_cores_check_the_allocation(tmp_path: Path) -> None:
    rig = Rig(tmp_path)
    rig.claim("whole", ["cpu4", "cpu12"], claim_config(wholeCores=True))
    assert rig.cpus("whole") == CPUSet([4, 12])
    rig.claim("half", ["cpu5", "cpu6"], claim_config(wholeCores=True))
    error = rig.error("half")
    assert "request 'cpu': wholeCores: CPUs 5-6 are not whole cores: their cores also hold CPUs 13-14" in error


@pytest.mark.parametrize(
    ("fields", "words"),
    [
        ({"numaPlacement": "pack"}, "numaPlacement: pack steers the CPUs topodra picks in a grouped device"),
        ({"preferredCoreType": "standard"}, "preferredCoreType: standard steers the CPUs topodra picks"),
    ],
)
@pytest.mark.parametrize("model", ["cpu", "core", "core-or-thread"])
def test_scheduler_chosen_devices_refuse_what_steers_a_pick(tmp_path: Path, model: str, fields: dict[str, Any], words: str) -> None:
    rig = Rig(tmp_path, model=model)
    device = "cpu4" if model == "cpu" else "core4"
    rig.claim("u", [device], class_config(**fields))
    error = rig.error("u")
    assert words in error, error
    assert f"the scheduler chose device {device}'s CPUs" in error, error


@pytest.mark.parametrize(
    ("model", "same", "other"),
    [("cpu", ["cpu4", "cpu5"], ["cpu6", "cpu7"]), ("core", ["core4", "core5"], ["core6", "core7"]),
     ("core-or-thread", ["core4", "cpu5"], ["cpu6", "cpu7"])],
)
def test_scheduler_chosen_cpuset_must_equal_the_allocation(tmp_path: Path, model: str, same: list[str], other: list[str]) -> None:
    rig = Rig(tmp_path, model=model)
    want = CPUSet()
    for name in same:
        want |= next(d.cpus for d in rig.devices if d.name == name)
    rig.claim("same", same, claim_config(cpuset=want.format()))
    assert rig.cpus("same") == want
    rig.claim("other", other, claim_config(cpuset="6,8"))
    error = rig.error("other")
    assert "request 'cpu': cpuset is 6,8 but the request holds CPUs" in error
    assert "(not allocated: 8)" in error


def test_core_devices_are_whole_unless_a_thread_is_reserved(tmp_path: Path) -> None:
    rig = Rig(tmp_path, model="core", reserved=CPUSet([0]))
    rig.claim("ok", ["core5"], claim_config(wholeCores=True))
    assert rig.cpus("ok") == CPUSet([5, 13])
    rig.claim("part", ["core0"], claim_config(wholeCores=True))  # core 0's other thread is reserved
    assert "wholeCores: CPUs 8 are not whole cores: their cores also hold CPUs 0" in rig.error("part")


def test_core_or_thread_whole_cores_accept_cores_and_refuse_threads(tmp_path: Path) -> None:
    rig = Rig(tmp_path, model="core-or-thread")
    rig.claim("core", ["core6"], claim_config(wholeCores=True))
    assert rig.cpus("core") == CPUSet([6, 14])
    rig.claim("thread", ["cpu7"], claim_config(wholeCores=True))
    assert "wholeCores: CPUs 7 are not whole cores" in rig.error("thread")


# every model: errors per claim, memory nodes, restart


def test_a_bad_config_refuses_that_claim_only_in_one_line(tmp_path: Path) -> None:
    rig = Rig(tmp_path)
    rig.claim("bad", ["cpu4"], claim_config(wholeCores="yes", numaPlacement="packed"))
    rig.claim("good", ["cpu5"], claim_config(wholeCores=False))
    out = rig.prepare("bad", "good")
    assert out["good"].error == ""
    error = out["bad"].error
    assert error.startswith("claim default/claim-bad (bad): invalid native.cpu parameters: ")
    assert 'status.allocation.devices.config[0] (FromClaim).opaque.parameters.wholeCores: must be true or false (got "yes")' in error
    assert "numaPlacement: must be pack or spread" in error
    assert "\n" not in error


def test_a_class_config_for_another_request_does_not_apply(tmp_path: Path) -> None:
    rig = Rig(tmp_path)
    rig.claim("u", ["cpu5"], opaque("FromClass", params(wholeCores=True), ["other"]))
    assert rig.cpus("u") == CPUSet([5])


def test_the_claim_overrides_its_class(tmp_path: Path) -> None:
    rig = Rig(tmp_path)
    rig.claim("u", ["cpu5"], class_config(wholeCores=True), claim_config(wholeCores=False))
    assert rig.cpus("u") == CPUSet([5])
    rig.claim("v", ["cpu6"], class_config(wholeCores=False), claim_config(wholeCores=True))
    assert "wholeCores" in rig.error("v")


@pytest.mark.parametrize("model", ["cpu", "core", "core-or-thread", "grouped"])
def test_memory_nodes_all_reach_the_claims_containers_and_survive_a_restart(tmp_path: Path, model: str) -> None:
    rig = Rig(tmp_path, model=model, group_by="numa")
    device = {"cpu": "cpu4", "core": "core4", "core-or-thread": "core4", "grouped": "numa1"}[model]
    consumed = {"numa1": "2"} if model == "grouped" else None
    rig.claim("all", [device], claim_config(memoryNodes="all"), consumed=consumed)
    rig.claim("local", [device.replace("4", "5")], consumed=consumed)
    assert rig.cpus("all") <= TWO_NODES.cpus_of_node(1)
    assert rig.cpus("local") <= TWO_NODES.cpus_of_node(1)
    policy = rig.policy.inner
    for uid, mems in (("all", CPUSet([0, 1])), ("local", CPUSet([1]))):
        ctr = ContainerRequest(id=f"ctr-{uid}", name="app", pod_uid="pod-1", pod_name="p", namespace="default",
                               qos=QoSClass.GUARANTEED, cpu_request_milli=1000, cpu_limit_milli=1000, claims=(uid,))
        changes = policy.add(ctr)
        assert changes[ctr.id].mems == mems, (uid, changes[ctr.id])
    saved = load_checkpoint(tmp_path / "plugin" / "checkpoint.json")
    assert (saved["all"].memory, saved["local"].memory) == ("all", "local")
    # A restarted agent: a fresh policy, the driver re-claims from its checkpoint.
    rig.policy = RecordingPolicy(TWO_NODES, CPUSet())
    rig.driver = rig.new_driver()
    report = asyncio.run(rig.driver.restore())
    assert sorted(report.restored) == ["all", "local"]
    assert rig.policy.inner.claim_memory("all") == "all"
    assert rig.policy.inner.claim_memory("local") == "local"


def test_a_claim_rebuilt_from_the_api_keeps_its_memory_nodes() -> None:
    """After a damaged checkpoint, a claim rebuilt from its CDI spec and the API server gets the
    memory nodes its parameters ask for."""
    from topodra.dra.recovery import claim_from_api

    devices = {d.name: d for d in build_devices(TWO_NODES, DeviceModelConfig(model="cpu"))}
    obj = make_claim("u1", ["cpu4"])
    obj["status"]["allocation"]["devices"]["config"] = [claim_config(memoryNodes="all")]
    rebuilt = claim_from_api(obj, CPUSet([4]), devices, pool="node-a", driver=DRIVER)
    assert rebuilt.memory == "all"
    obj["status"]["allocation"]["devices"]["config"] = []
    assert claim_from_api(obj, CPUSet([4]), devices, pool="node-a", driver=DRIVER).memory == "local"
