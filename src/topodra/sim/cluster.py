"""Synthetic clusters: N nodes from a mix of machines, published with the agent's own device model.

Every node's ResourceSlices come from ``topodra.dra.devices.build_devices``
and ``topodra.dra.slices.build_slices`` -- the code the node agent publishes
with -- so the simulator allocates over exactly what a real cluster would
hold. Machines are synthetic specs (``2s1d2n2l8c2t``, ``6c2t4e``...), a CPU
count (``256``: a hybrid machine of 16-CPU L3 groups), or hwloc fixtures
(``fixture:NAME``).

Nodes of the same machine share one device list: slices are built once per
machine and copied per node with that node's names (identical to what
``build_slices`` returns for the node, which a test checks).
"""

from __future__ import annotations

import json
import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from fractions import Fraction
from functools import lru_cache
from typing import Any

from topodra.cpuset import CPUSet
from topodra.dra.devices import DeviceModelConfig, build_devices, device_class
from topodra.dra.slices import build_slices, slice_name
from topodra.quantity import Quantity
from topodra.sim.allocator import ClaimAllocation, DeviceResult, allocation_of_claim, share_id
from topodra.topology.errors import TopologyError
from topodra.topology.machine import load_machine
from topodra.topology.model import Topology
from topodra.topology.synthetic import synthetic_topology

__all__ = ["ClusterSpec", "Cluster", "ClusterError", "build_cluster", "cluster_from_objects", "machine_for_cpus", "topology_for"]


class ClusterError(ValueError):
    """A cluster description that cannot be built (names the bad value)."""


def machine_for_cpus(cpus: int) -> str:
    """A hybrid machine with ``cpus`` CPUs: L3 groups of 6 two-thread P-cores + 4 E-cores (16 CPUs),
    4 groups per NUMA node, two sockets from 2 NUMA nodes on."""
    if cpus < 16 or cpus % 16:
        raise ClusterError(f"--cpus {cpus}: must be a multiple of 16 (16-CPU L3 groups)")
    groups = cpus // 16
    if groups % 4 == 0:
        numa, l3 = groups // 4, 4
    else:
        numa, l3 = 1, groups
    sockets = 2 if numa >= 2 and numa % 2 == 0 else 1
    return f"{sockets}s1d{numa // sockets}n{l3}l6c2t4e"


@lru_cache(maxsize=64)
def topology_for(machine: str) -> Topology:
    """The topology of a machine name: a CPU count, or anything ``load_machine`` reads."""
    if machine.isdigit():
        return synthetic_topology(machine_for_cpus(int(machine)))
    try:
        return load_machine(machine)
    except TopologyError as e:
        raise ClusterError(str(e)) from None


@dataclass(frozen=True)
class ClusterSpec:
    """What to build: node count, machines (name -> weight), device model, reserved CPUs, fill."""

    nodes: int
    machines: Mapping[str, float] = field(default_factory=lambda: {"256": 1.0})
    model: str = "cpu"
    group_by: str = "numa"
    order: str = "topology-reversed"  # device order (DeviceModelConfig.order)
    reserved_cpus: int = 0  # the first N CPUs of each node are kept for the system
    fill: float = 0.0  # fraction of each node's CPUs already allocated by background pods
    seed: int = 1
    fill_patterns: int = 16  # distinct random usage patterns per machine (nodes pick one each)


@dataclass
class Cluster:
    spec: ClusterSpec
    nodes: list[dict[str, Any]]
    slices: list[dict[str, Any]]
    classes: list[dict[str, Any]]
    machine_of: dict[str, str]
    devices_per_machine: dict[str, int]
    slices_per_machine: dict[str, int]
    bytes_per_machine: dict[str, int]
    background: list[ClaimAllocation] = field(default_factory=list)
    from_objects: bool = False  # read from API objects (machine names are node names)

    @property
    def slice_count(self) -> int:
        return len(self.slices)

    @property
    def api_bytes(self) -> int:
        """JSON bytes of all ResourceSlices (the API footprint the driver publishes)."""
        return sum(self.bytes_per_machine[m] for m in self.machine_of.values())

    @property
    def device_count(self) -> int:
        return sum(self.devices_per_machine[m] for m in self.machine_of.values())


def _node_names(spec: ClusterSpec) -> list[tuple[str, str]]:
    """(node name, machine) pairs, machines spread by weight (deterministic)."""
    total = sum(spec.machines.values())
    if total <= 0:
        raise ClusterError("machines: weights must add up to more than zero")
    out: list[tuple[str, str]] = []
    credit = dict.fromkeys(spec.machines, 0.0)
    for i in range(spec.nodes):
        for m, w in spec.machines.items():
            credit[m] += w / total
        m = max(credit, key=lambda k: credit[k])
        credit[m] -= 1
        out.append((f"node-{i:05d}", m))
    return out


def build_cluster(spec: ClusterSpec) -> Cluster:
    """Build the nodes, their ResourceSlices and the ``native.cpu`` DeviceClass."""
    if spec.nodes < 1:
        raise ClusterError(f"nodes: need at least one node, got {spec.nodes}")
    if spec.model not in ("cpu", "core", "grouped"):
        raise ClusterError(f"model: must be cpu, core or grouped, got {spec.model!r}")
    if not 0 <= spec.fill < 1:
        raise ClusterError(f"fill: must be in [0, 1), got {spec.fill}")
    config = DeviceModelConfig(model=spec.model, group_by=spec.group_by, order=spec.order)  # type: ignore[arg-type]
    templates: dict[str, list[dict[str, Any]]] = {}
    devices_per: dict[str, int] = {}
    bytes_per: dict[str, int] = {}
    cpus_per_device: dict[str, list[int]] = {}
    for m in spec.machines:
        topo = topology_for(m)
        exclude = CPUSet(sorted(topo.online)[: spec.reserved_cpus])
        devices = build_devices(topo, config, exclude=exclude)
        templates[m] = build_slices("template-node", devices)
        devices_per[m] = len(devices)
        cpus_per_device[m] = [len(d.cpus) for d in devices]
    nodes: list[dict[str, Any]] = []
    slices: list[dict[str, Any]] = []
    machine_of: dict[str, str] = {}
    for name, m in _node_names(spec):
        nodes.append({"apiVersion": "v1", "kind": "Node", "metadata": {"name": name, "labels": {"topodra.io/machine": m}}})
        machine_of[name] = m
        slices.extend(_for_node(templates[m], name))
    for m, tmpl in templates.items():
        bytes_per[m] = sum(len(json.dumps(s, separators=(",", ":"))) for s in _for_node(tmpl, "node-00000"))
    cluster = Cluster(
        spec=spec,
        nodes=nodes,
        slices=slices,
        classes=[device_class()],
        machine_of=machine_of,
        devices_per_machine=devices_per,
        slices_per_machine={m: len(t) for m, t in templates.items()},
        bytes_per_machine=bytes_per,
    )
    if spec.fill > 0:
        cluster.background = _background(cluster, cpus_per_device)
    return cluster


def cluster_from_objects(docs: Sequence[Mapping[str, Any]], model: str = "cpu") -> Cluster:
    """A cluster from API objects (e.g. ``kubectl get nodes,resourceslices,deviceclasses,resourceclaims -o yaml``).

    Nodes come from Node objects, or from the ``nodeName`` of node-local slices when
    there are none. Allocated ResourceClaims become the cluster's existing allocations.
    """
    objs: list[Mapping[str, Any]] = []
    for d in docs:
        if isinstance(d, Mapping) and d.get("kind") == "List":
            objs.extend(i for i in d.get("items") or [] if isinstance(i, Mapping))
        elif isinstance(d, Mapping):
            objs.append(d)
    by_kind: dict[str, list[Mapping[str, Any]]] = {}
    for o in objs:
        by_kind.setdefault(str(o.get("kind")), []).append(o)
    slices = [dict(s) for s in by_kind.get("ResourceSlice", [])]
    if not slices:
        raise ClusterError("the objects hold no ResourceSlice")
    nodes = [dict(n) for n in by_kind.get("Node", [])]
    if not nodes:
        names = sorted({str((s.get("spec") or {}).get("nodeName")) for s in slices if (s.get("spec") or {}).get("nodeName")})
        nodes = [{"apiVersion": "v1", "kind": "Node", "metadata": {"name": n}} for n in names]
    if not nodes:
        raise ClusterError("the objects hold no Node and no node-local ResourceSlice")
    devices: dict[str, int] = {}
    sizes: dict[str, int] = {}
    count: dict[str, int] = {}
    for s in slices:
        node = str((s.get("spec") or {}).get("nodeName") or "")
        devices[node] = devices.get(node, 0) + len((s.get("spec") or {}).get("devices") or [])
        sizes[node] = sizes.get(node, 0) + len(json.dumps(s, separators=(",", ":")))
        count[node] = count.get(node, 0) + 1
    names = [str(n["metadata"]["name"]) for n in nodes]
    background = [a for a in (allocation_of_claim(c) for c in by_kind.get("ResourceClaim", [])) if a is not None]
    shared = {k: v for k, v in devices.items() if k == ""}
    machine_of = {n: n for n in names}
    return Cluster(
        spec=ClusterSpec(nodes=len(nodes), machines={"objects": 1.0}, model=model),
        nodes=nodes,
        slices=slices,
        classes=[dict(c) for c in by_kind.get("DeviceClass", [])] or [device_class()],
        machine_of=machine_of,
        devices_per_machine={n: devices.get(n, 0) + sum(shared.values()) for n in names},
        slices_per_machine={n: count.get(n, 0) for n in names},
        bytes_per_machine={n: sizes.get(n, 0) for n in names},
        background=background,
        from_objects=True,
    )


def _for_node(template: Sequence[Mapping[str, Any]], node: str) -> list[dict[str, Any]]:
    """``build_slices(node, devices)`` from the template-node slices, sharing the device lists."""
    out = []
    for index, s in enumerate(template):
        spec = dict(s["spec"])
        spec["nodeName"] = node
        spec["pool"] = dict(spec["pool"], name=node)
        meta = dict(s["metadata"], name=slice_name(node, index))
        out.append({**s, "metadata": meta, "spec": spec})
    return out


def _background(cluster: Cluster, cpus_per_device: Mapping[str, list[int]]) -> list[ClaimAllocation]:
    """Allocations that occupy ``fill`` of every node's CPUs: random exclusive devices, or
    capacity on grouped devices. Each node takes one of ``fill_patterns`` random patterns of
    its machine (deterministic for a seed), so nodes fall into a few usage classes."""
    rng = random.Random(cluster.spec.seed)
    patterns: dict[str, list[list[tuple[int, int]]]] = {}  # machine -> patterns of (device index, CPUs)
    out: list[ClaimAllocation] = []
    by_node: dict[str, list[dict[str, Any]]] = {}
    for s in cluster.slices:
        by_node.setdefault(s["spec"]["nodeName"], []).append(s)
    for node, node_slices in by_node.items():
        machine = cluster.machine_of[node]
        devices = [(s["spec"]["pool"]["name"], d) for s in sorted(node_slices, key=lambda s: s["metadata"]["name"]) for d in s["spec"]["devices"]]
        sizes = cpus_per_device[machine]
        if machine not in patterns:
            patterns[machine] = [_pattern(rng, sizes, cluster.spec) for _ in range(max(1, cluster.spec.fill_patterns))]
        chosen = rng.choice(patterns[machine])
        results: list[DeviceResult] = []
        for k, amount in chosen:
            pool, d = devices[k]
            did = ("native.cpu", pool, d["name"])
            if cluster.spec.model == "grouped":
                results.append(
                    DeviceResult("background", *did, share_id=share_id(f"bg-{node}", "background", did, k), consumed_capacity={"cpu": Quantity(Fraction(amount))})
                )
            else:
                results.append(DeviceResult("background", *did))
        if results:
            out.append(ClaimAllocation(f"background/{node}", tuple(results)))
    return out


def _pattern(rng: random.Random, sizes: Sequence[int], spec: ClusterSpec) -> list[tuple[int, int]]:
    """One random usage pattern: (device index, CPUs taken) covering ``fill`` of the CPUs."""
    target = int(sum(sizes) * spec.fill)
    out: list[tuple[int, int]] = []
    if spec.model == "grouped":
        left = target
        for k, size in enumerate(sizes):
            share = min(left, int(size * spec.fill + rng.random()))
            if share > 0:
                left -= share
                out.append((k, share))
        return out
    order = list(range(len(sizes)))
    rng.shuffle(order)
    used = 0
    for k in order:
        if used >= target:
            break
        used += sizes[k]
        out.append((k, sizes[k]))
    return out
