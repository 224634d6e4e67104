"""A stable, documented dict form of a Topology (for JSON/YAML and snapshots).

``topology_to_dict(t)`` gives plain JSON types only; ``topology_from_dict(d)``
rebuilds an equal Topology and rejects malformed input with a
:class:`TopologyError` naming the field (``cpus[3].package``) and the value.
The schema is described in ``docs/topology.md``; ``schema`` is bumped on any
incompatible change. A ``summary`` block is written for people and ignored on
reading.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from topodra.cpuset import CPUSet, CPUSetParseError
from topodra.topology.errors import TopologyError
from topodra.topology.model import (
    CacheInstance,
    CoreType,
    CoreTypeSource,
    CPUInfo,
    MemoryKind,
    NUMANode,
    PCIDevice,
    PCIRoot,
    Topology,
)

__all__ = ["SCHEMA", "topology_from_dict", "topology_to_dict"]

#: Version of the dict layout.
SCHEMA = 2

_CPU_INTS = ("id", "package", "die", "die_id", "cluster", "cluster_id", "core", "core_id", "node")
_CPU_OPT_INTS = ("l1d", "l1i", "l2", "l3", "base_freq_khz", "min_freq_khz", "max_freq_khz", "capacity")


def topology_to_dict(t: Topology) -> dict[str, Any]:
    """The topology as JSON-ready data (CPU sets in the kernel list format)."""
    node_ids = sorted(t.nodes)
    matrix: list[list[int | None]] = [[t.distances.get((a, b)) for b in node_ids] for a in node_ids]
    return {
        "schema": SCHEMA,
        "source": t.source,
        "summary": {
            "online_cpus": len(t.cpus),
            "packages": len(t.packages()),
            "dies": len(t.dies()),
            "numa_nodes": len(t.nodes),
            "cores": len(t.cores()),
            "threads_per_core": t.threads_per_core,
            "core_types": [ct.value for ct in t.core_types()],
            "memory_bytes": sum(n.memory_bytes for n in t.nodes.values()),
        },
        "cpu_sets": {
            "possible": t.possible.format(),
            "present": t.present.format(),
            "online": t.online_cpus.format(),
            "offline": t.offline.format(),
            "isolated": t.isolated.format(),
            "nohz_full": t.nohz_full.format(),
        },
        "core_type_source": t.core_type_source.value,
        "cpus": [_cpu_to_dict(t.cpus[c]) for c in sorted(t.cpus)],
        "nodes": [
            {
                "id": n.id,
                "cpus": n.cpus.format(),
                "memory_bytes": n.memory_bytes,
                "kind": n.kind.value,
                "tier": n.tier,
                "kind_reason": n.kind_reason,
            }
            for n in (t.nodes[i] for i in node_ids)
        ],
        "distances": {"nodes": node_ids, "matrix": matrix},
        "caches": [
            {
                "level": k.level,
                "kind": k.kind,
                "id": k.id,
                "cpus": k.cpus.format(),
                "size_bytes": k.size_bytes,
            }
            for k in t.caches
        ],
        "warnings": list(t.warnings),
        "pci_roots": [
            {
                "name": r.name,
                "cpus": r.cpus.format(),
                "nodes": list(r.nodes),
                "locality_known": r.locality_known,
                "devices": [
                    {
                        "address": d.address,
                        "class": None if d.class_code is None else f"0x{d.class_code:06x}",
                        "cpus": None if d.cpus is None else d.cpus.format(),
                        "node": d.node,
                    }
                    for d in r.devices
                ],
            }
            for r in t.pci_roots
        ],
    }


def _cpu_to_dict(c: CPUInfo) -> dict[str, Any]:
    out: dict[str, Any] = {name: getattr(c, name) for name in _CPU_INTS}
    out["siblings"] = c.siblings.format()
    for name in _CPU_OPT_INTS:
        out[name] = getattr(c, name)
    out["core_type"] = c.core_type.value
    out["kind"] = c.kind
    out["isolated"] = c.isolated
    return out


# --- reading ------------------------------------------------------------------------


class _Fields:
    """Typed field access that names the offending field on error."""

    def __init__(self, data: object, where: str) -> None:
        if not isinstance(data, Mapping):
            raise TopologyError(where or "topology", "expected a mapping", repr(data))
        self.data = data
        self.where = where

    def _name(self, key: str) -> str:
        return f"{self.where}.{key}" if self.where else key

    def get(self, key: str) -> object:
        if key not in self.data:
            raise TopologyError(self._name(key), "is missing")
        return self.data[key]

    def opt_int(self, key: str, optional: bool = False, minimum: int | None = None) -> int | None:
        v = self.data.get(key) if optional else self.get(key)
        if v is None and optional:
            return None
        if not isinstance(v, int) or isinstance(v, bool):
            raise TopologyError(self._name(key), "expected an integer", repr(v))
        if minimum is not None and v < minimum:
            raise TopologyError(self._name(key), f"must be at least {minimum}", repr(v))
        return v

    def req_int(self, key: str, minimum: int | None = None) -> int:
        v = self.opt_int(key, minimum=minimum)
        assert v is not None
        return v

    def text(self, key: str, default: str | None = None) -> str:
        v = self.data.get(key, default) if default is not None else self.get(key)
        if not isinstance(v, str):
            raise TopologyError(self._name(key), "expected a string", repr(v))
        return v

    def flag(self, key: str) -> bool:
        v = self.data.get(key, False)
        if not isinstance(v, bool):
            raise TopologyError(self._name(key), "expected true or false", repr(v))
        return v

    def cpuset(self, key: str, default: str | None = None) -> CPUSet:
        text = self.text(key, default)
        try:
            return CPUSet.parse(text)
        except CPUSetParseError as e:
            raise TopologyError(self._name(key), f"expected a CPU list: {e.reason}", text) from None

    def items(self, key: str, default: list[Any] | None = None) -> list[Any]:
        v = self.data.get(key, default) if default is not None else self.get(key)
        if not isinstance(v, list):
            raise TopologyError(self._name(key), "expected a list", repr(v))
        return v

    def choice(self, key: str, enum: type[Any], default: str | None = None) -> Any:
        text = self.text(key, default)
        try:
            return enum(text)
        except ValueError:
            allowed = ", ".join(e.value for e in enum)
            raise TopologyError(self._name(key), f"expected one of {allowed}", text) from None


def topology_from_dict(data: object) -> Topology:
    """Rebuild a Topology from :func:`topology_to_dict` output."""
    top = _Fields(data, "")
    schema = top.req_int("schema")
    if schema != SCHEMA:
        raise TopologyError("schema", f"unsupported schema version (this reader knows {SCHEMA})", str(schema))
    sets = _Fields(top.get("cpu_sets"), "cpu_sets")
    cpus = _read_cpus(top.items("cpus"))
    nodes = _read_nodes(top.items("nodes"))
    for c in cpus.values():
        if c.node not in nodes:
            raise TopologyError(f"cpus[{c.id}].node", "names a node that is not in 'nodes'", str(c.node))
    distances = _read_distances(top.get("distances"), nodes)
    caches = _read_caches(top.items("caches", []))
    warnings = top.items("warnings", [])
    if not all(isinstance(w, str) for w in warnings):
        raise TopologyError("warnings", "expected a list of strings", repr(warnings))
    return Topology(
        cpus=dict(sorted(cpus.items())),
        nodes=dict(sorted(nodes.items())),
        distances=distances,
        caches=caches,
        possible=sets.cpuset("possible"),
        present=sets.cpuset("present"),
        online_cpus=sets.cpuset("online"),
        isolated=sets.cpuset("isolated", ""),
        nohz_full=sets.cpuset("nohz_full", ""),
        core_type_source=top.choice("core_type_source", CoreTypeSource, CoreTypeSource.NONE.value),
        source=top.text("source", ""),
        warnings=tuple(warnings),
        pci_roots=_read_pci_roots(top.items("pci_roots", [])),
    )


def _read_pci_roots(items: list[Any]) -> tuple[PCIRoot, ...]:
    """The ``pci_roots`` list (absent in dicts written before it existed: no PCI data)."""
    roots = []
    for i, raw in enumerate(items):
        f = _Fields(raw, f"pci_roots[{i}]")
        nodes = f.items("nodes", [])
        if not all(isinstance(n, int) and not isinstance(n, bool) and n >= 0 for n in nodes):
            raise TopologyError(f"pci_roots[{i}].nodes", "expected a list of node ids", repr(nodes))
        devices = []
        for j, rd in enumerate(f.items("devices", [])):
            d = _Fields(rd, f"pci_roots[{i}].devices[{j}]")
            code = rd.get("class") if isinstance(rd, Mapping) else None
            if code is not None and not (isinstance(code, str) and code.startswith("0x") and _is_hex(code[2:])):
                raise TopologyError(d._name("class"), "expected a class such as 0x030000", repr(code))
            cpus = rd.get("cpus") if isinstance(rd, Mapping) else None
            devices.append(
                PCIDevice(
                    address=d.text("address"),
                    class_code=None if code is None else int(code, 16),
                    cpus=None if cpus is None else d.cpuset("cpus"),
                    node=d.opt_int("node", optional=True, minimum=0),
                )
            )
        roots.append(
            PCIRoot(
                name=f.text("name"),
                cpus=f.cpuset("cpus"),
                devices=tuple(devices),
                nodes=tuple(nodes),
                locality_known=f.flag("locality_known") if "locality_known" in raw else True,
            )
        )
    return tuple(roots)


def _is_hex(text: str) -> bool:
    return bool(text) and all(c in "0123456789abcdefABCDEF" for c in text)


def _read_cpus(items: list[Any]) -> dict[int, CPUInfo]:
    """The ``cpus`` list, by CPU id (in the order given)."""
    cpus: dict[int, CPUInfo] = {}
    for i, raw in enumerate(items):
        f = _Fields(raw, f"cpus[{i}]")
        opt = {name: f.opt_int(name, optional=True, minimum=0) for name in _CPU_OPT_INTS}
        info = CPUInfo(
            id=f.req_int("id", minimum=0),
            package=f.req_int("package", minimum=0),
            die=f.req_int("die", minimum=0),
            die_id=f.req_int("die_id", minimum=0),
            cluster=f.req_int("cluster", minimum=0),
            cluster_id=f.req_int("cluster_id", minimum=-1),
            core=f.req_int("core", minimum=0),
            core_id=f.req_int("core_id", minimum=0),
            siblings=f.cpuset("siblings"),
            node=f.req_int("node", minimum=0),
            l1d=opt["l1d"],
            l1i=opt["l1i"],
            l2=opt["l2"],
            l3=opt["l3"],
            core_type=f.choice("core_type", CoreType, CoreType.STANDARD.value),
            kind=f.req_int("kind", minimum=0),
            base_freq_khz=opt["base_freq_khz"],
            min_freq_khz=opt["min_freq_khz"],
            max_freq_khz=opt["max_freq_khz"],
            capacity=opt["capacity"],
            isolated=f.flag("isolated"),
        )
        if info.id in cpus:
            raise TopologyError(f"cpus[{i}].id", "duplicate CPU id", str(info.id))
        if info.id not in info.siblings:
            raise TopologyError(
                f"cpus[{i}].siblings", "does not contain the CPU itself", info.siblings.format()
            )
        cpus[info.id] = info
    return cpus


def _read_nodes(items: list[Any]) -> dict[int, NUMANode]:
    """The ``nodes`` list, by node id (in the order given)."""
    nodes: dict[int, NUMANode] = {}
    for i, raw in enumerate(items):
        f = _Fields(raw, f"nodes[{i}]")
        node = NUMANode(
            id=f.req_int("id"),
            cpus=f.cpuset("cpus"),
            memory_bytes=f.req_int("memory_bytes", minimum=0),
            kind=f.choice("kind", MemoryKind, MemoryKind.DRAM.value),
            tier=f.opt_int("tier", optional=True),
            kind_reason=f.text("kind_reason", ""),
        )
        if node.id in nodes:
            raise TopologyError(f"nodes[{i}].id", "duplicate node id", str(node.id))
        nodes[node.id] = node
    return nodes


def _read_caches(items: list[Any]) -> tuple[CacheInstance, ...]:
    caches = []
    for i, raw in enumerate(items):
        f = _Fields(raw, f"caches[{i}]")
        caches.append(
            CacheInstance(
                level=f.req_int("level", minimum=1),
                kind=f.text("kind"),
                id=f.req_int("id"),
                cpus=f.cpuset("cpus"),
                size_bytes=f.opt_int("size_bytes", optional=True, minimum=0),
            )
        )
    return tuple(caches)


def _read_distances(data: object, nodes: Mapping[int, NUMANode]) -> dict[tuple[int, int], int]:
    f = _Fields(data, "distances")
    ids = f.items("nodes")
    matrix = f.items("matrix")
    if not all(isinstance(i, int) and not isinstance(i, bool) for i in ids):
        raise TopologyError("distances.nodes", "expected a list of node ids", repr(ids))
    if len(matrix) != len(ids):
        raise TopologyError("distances.matrix", f"expected {len(ids)} rows", f"{len(matrix)} rows")
    out: dict[tuple[int, int], int] = {}
    for r, (a, row) in enumerate(zip(ids, matrix, strict=True)):
        if not isinstance(row, list) or len(row) != len(ids):
            raise TopologyError(f"distances.matrix[{r}]", f"expected a row of {len(ids)} values", repr(row))
        for col, (b, v) in enumerate(zip(ids, row, strict=True)):
            if v is None:
                continue
            if not isinstance(v, int) or isinstance(v, bool) or v < 0:
                raise TopologyError(f"distances.matrix[{r}][{col}]", "expected a distance", repr(v))
            if a not in nodes or b not in nodes:
                raise TopologyError("distances.nodes", "names a node that is not in 'nodes'", repr(ids))
            out[(a, b)] = v
    return out
