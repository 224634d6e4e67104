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
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from fractions import Fraction
from functools import lru_cache
from typing import TYPE_CHECKING, Any

import numpy as np

from topodra.cpuset import CPUSet
from topodra.dra.devices import DRIVER, MODELS, DeviceModelConfig, build_devices, device_class
from topodra.dra.slices import build_slices, slice_name
from topodra.dra.taints import TaintConfig
from topodra.quantity import Quantity
from topodra.sim.allocator import ClaimAllocation, DeviceResult, allocation_of_claim, share_id
from topodra.sim.gpus import GPU_DRIVER, PCI_HINT, gpu_device_class, gpu_slices, no_gpu_reason
from topodra.topology.errors import TopologyError
from topodra.topology.machine import load_machine
from topodra.topology.model import Topology
from topodra.topology.synthetic import synthetic_topology

if TYPE_CHECKING:
    import random

__all__ = ["ClusterSpec", "Cluster", "ClusterError", "Fill", "build_cluster", "cluster_from_objects", "machine_for_cpus", "topology_for"]


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
    taints: Mapping[str, str] = field(default_factory=dict)  # per reason: effect, Withdraw or Untainted
    fill: float = 0.0  # fraction of each node's CPUs already allocated by background pods
    seed: int = 1
    fill_patterns: int = 16  # distinct random usage patterns per machine (nodes pick one each)
    gpus: bool = False  # also the gpu.example.com driver's slices (sim/gpus.py): a GPU per PCIe root
    list_attributes: bool = False  # list-typed attributes (DRAListTypeAttributes): DeviceModelConfig.list_attributes


@dataclass
class Fill:
    """The background fill, compactly: per machine its random usage patterns, per node the one it took.

    A pattern is a list of device indexes (into the machine's devices in slice-name
    order, which is also their position on the node) and, for grouped devices, the CPUs
    taken from each. Stored as flat numpy arrays: with every node filled differently,
    50,000 nodes x 128 devices would otherwise be 6.4 million allocation records.
    """

    model: str
    node_names: list[str]  # in node order
    node_machine: list[str]  # in node order
    node_pattern: np.ndarray[Any, np.dtype[np.int64]]  # node -> pattern of its machine
    index: dict[str, np.ndarray[Any, np.dtype[np.int32]]]  # machine -> device indexes of all patterns, back to back
    start: dict[str, np.ndarray[Any, np.dtype[np.int64]]]  # machine -> where each pattern starts in ``index`` (+ the end)
    amount: dict[str, np.ndarray[Any, np.dtype[np.int32]] | None]  # machine -> CPUs per entry (grouped), else None
    device_names: dict[str, list[str]]  # machine -> device names in slice-name order

    def indexes(self, node: int) -> np.ndarray[Any, np.dtype[np.int32]]:
        """The device indexes (= positions) node ``node`` has in use."""
        m = self.node_machine[node]
        k = int(self.node_pattern[node])
        return self.index[m][self.start[m][k] : self.start[m][k + 1]]

    def allocations(self) -> Iterator[ClaimAllocation]:
        """The fill as allocations, one per node with something in use (what a scheduler's
        ``preallocate`` takes)."""
        grouped = self.model == "grouped"
        for node, (name, m) in enumerate(zip(self.node_names, self.node_machine, strict=True)):
            k = int(self.node_pattern[node])
            lo, hi = int(self.start[m][k]), int(self.start[m][k + 1])
            if lo == hi:
                continue
            names = self.device_names[m]
            amounts = self.amount[m]
            if grouped and amounts is not None:
                results = tuple(
                    DeviceResult(
                        "background",
                        "native.cpu",
                        name,
                        names[d],
                        share_id=share_id(f"bg-{name}", "background", ("native.cpu", name, names[d]), d),
                        consumed_capacity={"cpu": Quantity(Fraction(int(a)))},
                    )
                    for d, a in zip(self.index[m][lo:hi].tolist(), amounts[lo:hi].tolist(), strict=True)
                )
            else:
                results = tuple(DeviceResult("background", "native.cpu", name, names[d]) for d in self.index[m][lo:hi].tolist())
            yield ClaimAllocation(f"background/{name}", results)


@dataclass
class Cluster:
    """A built cluster: nodes, ResourceSlices and DeviceClasses as API objects, and where each came from."""

    spec: ClusterSpec
    nodes: list[dict[str, Any]]
    slices: list[dict[str, Any]]
    classes: list[dict[str, Any]]
    machine_of: dict[str, str]
    devices_per_machine: dict[str, int]
    slices_per_machine: dict[str, int]
    bytes_per_machine: dict[str, int]
    allocations: list[ClaimAllocation] = field(default_factory=list)  # existing allocations (from API objects)
    fill: Fill | None = None  # the synthetic background fill
    from_objects: bool = False  # read from API objects (machine names are node names)

    @property
    def background(self) -> list[ClaimAllocation]:
        """Everything allocated before the run: existing allocations and the fill, as allocations."""
        return self.allocations + (list(self.fill.allocations()) if self.fill is not None else [])

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
    """Build the nodes, their ResourceSlices and the ``native.cpu`` DeviceClass (with ``gpus``,
    also each node's ``gpu.example.com`` slices and that DeviceClass)."""
    if spec.nodes < 1:
        raise ClusterError(f"nodes: need at least one node, got {spec.nodes}")
    if spec.model not in MODELS:
        raise ClusterError(f"model: must be {', '.join(MODELS)}, got {spec.model!r}")
    if not 0 <= spec.fill < 1:
        raise ClusterError(f"fill: must be in [0, 1), got {spec.fill}")
    if spec.fill and spec.model == "core-or-thread":
        # random devices of this model would take a core and one of its threads together
        raise ClusterError("fill: not available for the core-or-thread model (its devices share counters)")
    # Without nodeAllocatableResourceMappings: ``sim run`` does not model node cpu (its pods request
    # none, its nodes have no allocatable), and a 1.36 API server with its default gates drops them.
    try:
        config = DeviceModelConfig(
            model=spec.model,  # type: ignore[arg-type]
            group_by=spec.group_by,  # type: ignore[arg-type]
            order=spec.order,  # type: ignore[arg-type]
            node_allocatable="off",
            taints=TaintConfig.of(spec.taints),
            list_attributes=spec.list_attributes,
        )
    except ValueError as e:
        raise ClusterError(str(e)) from None
    templates: dict[str, list[dict[str, Any]]] = {}
    gpu_templates = _gpu_templates(spec) if spec.gpus else {}
    devices_per: dict[str, int] = {}
    bytes_per: dict[str, int] = {}
    cpus_per_device: dict[str, list[int]] = {}
    for m in spec.machines:
        topo = topology_for(m)
        if spec.reserved_cpus >= len(topo.online):
            raise ClusterError(
                f"--reserved-cpus {spec.reserved_cpus}: leaves no CPU of machine {m}'s {len(topo.online)} for devices"
            )
        exclude = CPUSet(sorted(topo.online)[: spec.reserved_cpus])
        devices = build_devices(topo, config, reserved=exclude)
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
        if spec.gpus:
            slices.extend(_for_node(gpu_templates[m], name, GPU_DRIVER))
    for m, tmpl in templates.items():
        bytes_per[m] = sum(len(json.dumps(s, separators=(",", ":"))) for s in _for_node(tmpl, "node-00000"))
    cluster = Cluster(
        spec=spec,
        nodes=nodes,
        slices=slices,
        classes=[device_class(), gpu_device_class()] if spec.gpus else [device_class()],
        machine_of=machine_of,
        devices_per_machine=devices_per,
        slices_per_machine={m: len(t) for m, t in templates.items()},
        bytes_per_machine=bytes_per,
    )
    if spec.fill > 0:
        cluster.fill = _fill(cluster, templates, cpus_per_device)
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
        allocations=background,
        from_objects=True,
    )


def _gpu_templates(spec: ClusterSpec) -> dict[str, list[dict[str, Any]]]:
    """Each machine's GPU slices for the template node; a machine without GPUs is an error."""
    out: dict[str, list[dict[str, Any]]] = {}
    for m in spec.machines:
        topo = topology_for(m)
        why = no_gpu_reason(topo)
        if why is not None:
            raise ClusterError(f"gpus: machine {m!r} gets no {GPU_DRIVER} device: {why} (use {PCI_HINT})")
        out[m] = gpu_slices("template-node", topo)
    return out


def _for_node(template: Sequence[Mapping[str, Any]], node: str, driver: str = DRIVER) -> list[dict[str, Any]]:
    """``build_slices(node, devices)`` from the template-node slices, sharing the device lists."""
    out = []
    for index, s in enumerate(template):
        spec = dict(s["spec"])
        spec["nodeName"] = node
        spec["pool"] = dict(spec["pool"], name=node)
        meta = dict(s["metadata"], name=slice_name(node, index, driver))
        out.append({**s, "metadata": meta, "spec": spec})
    return out


def _fill(cluster: Cluster, templates: Mapping[str, Sequence[Mapping[str, Any]]], cpus_per_device: Mapping[str, list[int]]) -> Fill:
    """Allocations that occupy ``fill`` of every node's CPUs: random exclusive devices, or
    capacity on grouped devices. Each node takes one of ``fill_patterns`` random patterns of
    its machine (deterministic for a seed), so nodes fall into a few usage classes -- or,
    with as many patterns as nodes, nearly every node is different."""
    spec = cluster.spec
    count = max(1, spec.fill_patterns)
    index: dict[str, np.ndarray[Any, np.dtype[np.int32]]] = {}
    start: dict[str, np.ndarray[Any, np.dtype[np.int64]]] = {}
    amount: dict[str, np.ndarray[Any, np.dtype[np.int32]] | None] = {}
    names: dict[str, list[str]] = {}
    for m in spec.machines:
        ordered = sorted(_for_node(templates[m], "node-00000"), key=lambda s: s["metadata"]["name"])
        names[m] = [d["name"] for s in ordered for d in s["spec"]["devices"]]
    node_names = [str(n["metadata"]["name"]) for n in cluster.nodes]
    node_machine = [cluster.machine_of[n] for n in node_names]
    node_pattern = np.zeros(len(node_names), dtype=np.int64)
    if spec.model == "grouped":
        # A few devices per node: Python's generator, drawn in the order the fill always drew
        # (a machine's patterns when its first node comes, then each node's choice): the golden
        # digests pin grouped runs' placements to this order.
        import random  # only the grouped model's fill draws with it

        py = random.Random(spec.seed)
        for i, m in enumerate(node_machine):
            if m not in index:
                drawn = [_grouped_pattern(py, cpus_per_device[m], spec) for _ in range(count)]
                index[m] = np.asarray([k for p in drawn for k, _ in p], dtype=np.int32)
                amount[m] = np.asarray([a for p in drawn for _, a in p], dtype=np.int32)
                start[m] = np.concatenate(([0], np.cumsum([len(p) for p in drawn]))).astype(np.int64)
            node_pattern[i] = py.choice(range(count))
    else:
        # Many devices per node: numpy draws every pattern and every node's choice at once.
        rng = np.random.default_rng(spec.seed)
        for m in spec.machines:
            index[m], start[m] = _exclusive_patterns(rng, np.asarray(cpus_per_device[m], dtype=np.int64), spec.fill, count)
            amount[m] = None
        by_machine = np.asarray([list(spec.machines).index(m) for m in node_machine], dtype=np.int64)
        for k, _ in enumerate(spec.machines):
            sel = np.flatnonzero(by_machine == k)
            node_pattern[sel] = rng.integers(0, count, size=sel.size)
    return Fill(spec.model, node_names, node_machine, node_pattern, index, start, amount, names)


#: Patterns drawn per numpy step (bounds the temporary arrays: this many x devices per node).
_PATTERN_CHUNK = 4096


def _exclusive_patterns(
    rng: np.random.Generator, sizes: np.ndarray[Any, np.dtype[np.int64]], fill: float, count: int
) -> tuple[np.ndarray[Any, np.dtype[np.int32]], np.ndarray[Any, np.dtype[np.int64]]]:
    """``count`` random usage patterns of whole devices, back to back (device indexes, and
    where each pattern starts): the devices of a random order while the CPUs taken are
    below ``fill`` of the node's."""
    target = int(int(sizes.sum()) * fill)
    parts: list[np.ndarray[Any, np.dtype[np.int64]]] = []
    lengths: list[np.ndarray[Any, np.dtype[np.int64]]] = []
    for lo in range(0, count, _PATTERN_CHUNK):
        rows = min(_PATTERN_CHUNK, count - lo)
        order = np.argsort(rng.random((rows, sizes.size)), axis=1)
        sized = sizes[order]
        keep = np.cumsum(sized, axis=1) - sized < target  # taken while the target is not reached
        parts.append(order[keep])
        lengths.append(keep.sum(axis=1))
    start = np.concatenate(([0], np.cumsum(np.concatenate(lengths)))).astype(np.int64)
    return np.concatenate(parts).astype(np.int32), start


def _grouped_pattern(rng: random.Random, sizes: Sequence[int], spec: ClusterSpec) -> list[tuple[int, int]]:
    """One usage pattern of grouped devices: (device index, CPUs taken) covering ``fill`` of the CPUs."""
    left = int(sum(sizes) * spec.fill)
    out: list[tuple[int, int]] = []
    for k, size in enumerate(sizes):
        share = min(left, int(size * spec.fill + rng.random()))
        if share > 0:
            left -= share
            out.append((k, share))
    return out
