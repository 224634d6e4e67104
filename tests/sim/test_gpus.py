"""The second driver (gpu.example.com) in the simulator: its devices, clusters, runs and replays."""

from __future__ import annotations

from typing import Any

import pytest
from typer.testing import CliRunner

from topodra.cli import app
from topodra.cpuset import CPUSet
from topodra.dra.devices import PCIE_ROOT_ATTRIBUTE
from topodra.gates import LIST_TYPE_ATTRIBUTES
from topodra.sim.cluster import ClusterError, ClusterSpec, build_cluster, topology_for
from topodra.sim.gpus import GPU_DRIVER, gpu_devices, no_gpu_reason
from topodra.sim.replay import replay
from topodra.sim.run import RunConfig, run_simulation
from topodra.sim.workload import load_workload

TWO_SOCKETS = "fixture:32em64t-2n8c+dax+nvme+mic+dimms"
SHARED = "fixture:40intel64-2g2n4c+pcilocality"  # both roots local to every CPU


def test_one_gpu_per_root_with_a_device() -> None:
    t = topology_for(TWO_SOCKETS)
    got = [(d.name, d.attributes[PCIE_ROOT_ATTRIBUTE], d.attributes.get("resource.kubernetes.io/numaNode")) for d in gpu_devices(t)]
    # pci0000:7f and pci0000:ff hold only uncore registers: no GPU stands there
    assert got == [("gpu0", "pci0000:00", 0), ("gpu1", "pci0000:80", 1)]
    assert gpu_devices(t)[0].attributes["resource.kubernetes.io/pciBusID"] == "0000:05:00.0"  # its VGA
    assert no_gpu_reason(topology_for("2s1d2n1l4c2t")) == "it has no PCI data"


def test_clusters_with_gpus() -> None:
    c = build_cluster(ClusterSpec(nodes=2, machines={TWO_SOCKETS: 1.0}, gpus=True))
    assert [s["metadata"]["name"] for s in c.slices] == [
        "node-00000-native.cpu-0",
        "node-00000-gpu.example.com-0",
        "node-00001-native.cpu-0",
        "node-00001-gpu.example.com-0",
    ]
    assert [k["metadata"]["name"] for k in c.classes] == ["native.cpu", GPU_DRIVER]
    gpu = c.slices[3]["spec"]
    assert (gpu["driver"], gpu["nodeName"], gpu["pool"]["name"]) == (GPU_DRIVER, "node-00001", "node-00001")
    with pytest.raises(ClusterError, match=r"machine .2s1d2n1l4c2t. gets no gpu\.example\.com device: it has no PCI data"):
        build_cluster(ClusterSpec(nodes=1, machines={"2s1d2n1l4c2t": 1.0}, gpus=True))


def _aligned(results: list[Any], machine: str) -> int:
    """Checks that every bound pod's CPUs are local to its GPU's root; returns how many were bound."""
    t = topology_for(machine)
    local = {d.name: d.cpus for d in gpu_devices(t)}
    bound = 0
    for r in results:
        if r.node is None:
            continue
        bound += 1
        (alloc,) = r.allocations
        (gpu,) = [d.device for d in alloc.results if d.driver == GPU_DRIVER]
        cpus = CPUSet(int(d.device[3:]) for d in alloc.results if d.driver == "native.cpu")
        assert len(cpus) == 4
        assert cpus <= local[gpu], (r.pod, gpu, cpus)
    return bound


@pytest.mark.parametrize("lists", [False, True])
def test_a_run_aligns_cpus_with_gpus(lists: bool) -> None:
    config = RunConfig(nodes=3, machines={TWO_SOCKETS: 1.0}, workload="gpu-aligned", pods=7, gpus=True, list_type_attributes=lists)
    _, results = run_simulation(config)
    assert _aligned(results, TWO_SOCKETS) == 6  # two GPUs a node
    assert results[-1].failure_kind == "unschedulable"


def test_cpus_of_several_roots_never_match_a_gpu() -> None:
    # Every CPU of this machine is local to both roots: without lists it carries no pcieRoot, with
    # them a list, which kube-scheduler 1.36's matchAttribute never matches.
    for lists in (False, True):
        config = RunConfig(nodes=2, machines={SHARED: 1.0}, workload="gpu-aligned", pods=2, gpus=True, keep_going=True, list_type_attributes=lists)
        _, results = run_simulation(config)
        assert [r.failure_kind for r in results] == ["unschedulable", "unschedulable"]


def test_a_replay_of_such_a_cluster() -> None:
    c = build_cluster(ClusterSpec(nodes=1, machines={TWO_SOCKETS: 1.0}, gpus=True, list_attributes=True))
    wl = load_workload("gpu-aligned")
    template = wl.templates["gpu-aligned-cpu"]
    objects: list[Any] = [*c.nodes, *c.classes, *c.slices]
    objects.append({"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaimTemplate", "metadata": {"name": "t", "namespace": "default"}, "spec": {"spec": template}})
    for i in range(3):
        objects.append(
            {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {"name": f"p{i}", "namespace": "default"},
                "spec": {"containers": [{"name": "c", "image": "x"}], "resourceClaims": [{"name": "g", "resourceClaimTemplateName": "t"}]},
            }
        )
    r = replay([(o, "test") for o in objects], gates={LIST_TYPE_ATTRIBUTES: True})
    steps = [s for s in r.steps if s.op == "create"]
    assert [s.node for s in steps] == ["node-00000", "node-00000", None]
    assert [d for s in steps[:2] for c in s.claims for d in c.devices if d.startswith("gpu")] == ["gpu0", "gpu1"]


def test_the_cli_refuses_gpus_without_pci_data_in_one_line() -> None:
    out = CliRunner().invoke(app, ["sim", "run", "-n", "1", "-t", "2s1d2n1l4c2t", "-w", "gpu-aligned", "--gpus"])
    assert out.exit_code == 2
    assert "gets no gpu.example.com device: it has no PCI data" in out.output
    assert "Traceback" not in out.output


def test_a_gpu_workload_without_gpus_is_refused_up_front() -> None:
    with pytest.raises(ValueError, match=r"workload gpu-aligned asks for DeviceClass gpu\.example\.com: add --gpus"):
        run_simulation(RunConfig(nodes=1, machines={TWO_SOCKETS: 1.0}, workload="gpu-aligned"))
