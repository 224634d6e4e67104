"""PCIe root complexes and the CPUs local to each, read from sysfs.

The rules, and where they come from:

- A PCI device is an entry ``sys/bus/pci/devices/<address>`` named as the kernel
  names it (``DDDD:BB:DD.F``, a domain of at least four hex digits).
- Its PCIe root is found as Kubernetes' ``deviceattribute`` helper finds it
  (``staging/src/k8s.io/dynamic-resource-allocation/deviceattribute/pci_linux.go``
  ``resolvePCIeRoot``, v1.36.2), so the CPUs carry the very value another driver
  publishes for its device: the entry is a symlink; its target, resolved relative
  to ``sys/bus/pci/devices`` (an absolute target is not), must start with
  ``devices/pci`` (below ``sys/``) and end with the address; the root is the first
  path component under ``devices/`` (``pci0000:00``). An entry that is no such
  symlink has no root (one warning names the first of them).
- A device's local CPUs are its ``local_cpus`` hex mask, else its ``local_cpulist``
  (hwloc reads the mask: ``topology-linux.c``
  ``hwloc_linux_backend_get_pci_busid_cpuset``); a device with neither counts the
  CPUs of its ``numa_node`` (hwloc counts the whole machine then; the kernel writes
  ``local_cpus`` for every PCI device, so only hand-made trees tell the two apart).
- A root's local CPUs are the online CPUs local to any of its devices. When none
  of its devices tells (or they name only offline CPUs), every online CPU is local
  to it: hwloc attaches a PCI tree whose locality is unknown to the whole machine
  (``pci-common.c`` ``hwloc__pci_get_busid_cpuset``), and the kernel itself writes
  every CPU for a device without a NUMA node.
- A root's NUMA nodes are the ``numa_node`` values (not -1) of its devices.

Files that exist but hold garbage (a bad mask, class or node) are informational
here: the value is dropped with a warning, the device still counts for its root.
"""

from __future__ import annotations

import posixpath
import re
from collections.abc import Callable, Mapping

from topodra.cpuset import CPUSet
from topodra.topology.errors import TopologyError
from topodra.topology.model import PCIDevice, PCIRoot
from topodra.topology.sysfs_tree import SysfsTree

__all__ = ["PCI_DEVICES_DIR", "read_pci_roots", "resolve_pcie_root", "pci_sort_key"]

PCI_DEVICES_DIR = "sys/bus/pci/devices"
_ADDRESS = re.compile(r"[0-9a-f]{4,8}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-7]\Z")
_CLASS = re.compile(r"0x[0-9a-fA-F]{1,6}\Z")


def pci_sort_key(name: str) -> tuple[int, str]:
    """Order of addresses and root names: by domain, then bus... (the domain may be longer than 4 digits)."""
    return (len(name), name)


def resolve_pcie_root(address: str, target: str | None) -> str | None:
    """The PCIe root of the device ``address`` whose ``bus/pci/devices`` entry links to
    ``target``, as ``resolvePCIeRoot`` reads it; None when it cannot be resolved."""
    if target is None or posixpath.isabs(target):
        return None
    path = posixpath.normpath(posixpath.join("bus/pci/devices", target))
    if not path.startswith("devices/pci") or posixpath.basename(path) != address:
        return None
    return path.removeprefix("devices/").split("/")[0]


def read_pci_roots(
    tree: SysfsTree, online: CPUSet, node_cpus: Mapping[int, CPUSet], warn: Callable[[str], None]
) -> tuple[PCIRoot, ...]:
    """The machine's PCIe roots, in name order; empty when sysfs lists no PCI device."""
    by_root: dict[str, list[PCIDevice]] = {}
    unrooted: list[str] = []
    for address in sorted((n for n in tree.listdir(PCI_DEVICES_DIR) if _ADDRESS.match(n)), key=pci_sort_key):
        rel = f"{PCI_DEVICES_DIR}/{address}"
        root = resolve_pcie_root(address, tree.readlink(rel))
        if root is None:
            unrooted.append(address)
            continue
        by_root.setdefault(root, []).append(_read_device(tree, rel, address, warn))
    if unrooted:
        warn(
            f"{len(unrooted)} PCI device(s) in {tree.shown(PCI_DEVICES_DIR)} (first {unrooted[0]}) are not "
            "symlinks into sys/devices/pci*: they have no PCIe root"
        )
    return tuple(_root(name, tuple(devices), online, node_cpus) for name, devices in sorted(by_root.items(), key=lambda kv: pci_sort_key(kv[0])))


def _read_device(tree: SysfsTree, rel: str, address: str, warn: Callable[[str], None]) -> PCIDevice:
    cpus: CPUSet | None = None
    node: int | None = None
    class_code: int | None = None
    try:
        cpus = tree.cpus_mask_first(f"{rel}/local_cpus", f"{rel}/local_cpulist")
    except TopologyError as e:
        warn(f"ignored: {e}")
    try:
        got = tree.int(f"{rel}/numa_node")
        node = got if got is not None and got >= 0 else None
    except TopologyError as e:
        warn(f"ignored: {e}")
    text = tree.text(f"{rel}/class")
    if text is not None:
        if _CLASS.match(text):
            class_code = int(text, 16)
        else:
            warn(f"ignored: {tree.shown(rel + '/class')}: expected a PCI class such as 0x030000 (content: {text[:80]!r})")
    return PCIDevice(address=address, class_code=class_code, cpus=cpus, node=node)


def _root(name: str, devices: tuple[PCIDevice, ...], online: CPUSet, node_cpus: Mapping[int, CPUSet]) -> PCIRoot:
    local = 0
    for d in devices:
        if d.cpus is not None:
            local |= d.cpus.mask
        elif d.node is not None:
            local |= node_cpus.get(d.node, CPUSet()).mask
    local &= online.mask
    nodes = tuple(sorted({d.node for d in devices if d.node is not None}))
    if not local:
        return PCIRoot(name=name, cpus=online, devices=devices, nodes=nodes, locality_known=False)
    return PCIRoot(name=name, cpus=CPUSet.from_mask(local), devices=devices, nodes=nodes)
