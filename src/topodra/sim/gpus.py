"""A second driver beside ``native.cpu``: made-up GPUs, one per PCIe root of the machine.

``gpu.example.com`` stands for a GPU driver such as NVIDIA's, so that the simulator and the
playground can show alignment across drivers: it publishes one device per PCIe root that holds
an endpoint device (``PCIRoot.has_endpoint``), named ``gpu0``, ``gpu1``... in root order, with
the attributes a real driver publishes for a PCI device:

- ``resource.kubernetes.io/pcieRoot``: the root, as Kubernetes' ``deviceattribute`` helper
  resolves it for any device below it (always one root: a string);
- ``resource.kubernetes.io/pciBusID``: the address of the root's first display controller,
  when it has one (the device the made-up GPU stands for);
- ``resource.kubernetes.io/numaNode``: when the root's devices name one NUMA node;
- ``index`` and ``model`` in the driver's own domain.

A claim then asks for a GPU and ``native.cpu`` CPUs on the same root with
``constraints: [{matchAttribute: resource.kubernetes.io/pcieRoot}]`` (or on the same NUMA node
with ``resource.kubernetes.io/numaNode``). Pure: no I/O.
"""

from __future__ import annotations

from typing import Any, Final

from topodra.dra.attributes import AttrValue
from topodra.dra.devices import NUMA_NODE_ATTRIBUTE, PCIE_ROOT_ATTRIBUTE, Device
from topodra.dra.slices import build_slices
from topodra.topology.model import Topology

__all__ = [
    "GPU_DRIVER",
    "PCI_HINT",
    "PCI_BUS_ID_ATTRIBUTE",
    "alignable_gpus",
    "gpu_device_class",
    "gpu_devices",
    "gpu_slices",
    "no_gpu_reason",
]

#: The made-up GPU driver's name, DeviceClass name and attribute domain.
GPU_DRIVER: Final = "gpu.example.com"
#: Where machines with PCI data come from, for messages.
PCI_HINT: Final = "a fixture with PCI devices (e.g. 32em64t-2n8c+dax+nvme+mic+dimms) or a synthetic spec with +pci"
#: ``deviceattribute.StandardDeviceAttributePCIBusID``.
PCI_BUS_ID_ATTRIBUTE: Final = "resource.kubernetes.io/pciBusID"


def gpu_devices(topology: Topology) -> list[Device]:
    """One GPU per PCIe root holding an endpoint device, in root order (none without PCI data)."""
    out: list[Device] = []
    for root in topology.pci_roots:
        if not root.has_endpoint:
            continue
        attrs: dict[str, AttrValue] = {
            "index": len(out),
            "model": "fake",
            PCIE_ROOT_ATTRIBUTE: root.name,
        }
        display = next((d for d in root.devices if d.is_display), None)
        if display is not None:
            attrs[PCI_BUS_ID_ATTRIBUTE] = display.address
        if len(root.nodes) == 1:
            attrs[NUMA_NODE_ATTRIBUTE] = root.nodes[0]
        out.append(Device(name=f"gpu{len(out)}", attributes=dict(sorted(attrs.items())), cpus=root.cpus))
    return out


def alignable_gpus(topology: Topology, cpus: int = 2) -> list[Device]:
    """The GPUs whose root has at least ``cpus`` CPUs local to it alone: the CPUs that carry it
    as a plain string, which is what kube-scheduler 1.36's ``matchAttribute`` can match (it
    matches no list)."""
    out = []
    for gpu in gpu_devices(topology):
        root = gpu.attributes[PCIE_ROOT_ATTRIBUTE]
        alone = sum(1 for c in gpu.cpus if topology.pcie_roots_of(c) == (root,))
        if alone >= cpus:
            out.append(gpu)
    return out


def no_gpu_reason(topology: Topology) -> str | None:
    """Why a machine gets no GPU (one line), or None when it gets some."""
    if gpu_devices(topology):
        return None
    if not topology.pci_roots:
        return "it has no PCI data"
    return "none of its PCIe roots holds a device other than bridges and system peripherals"


def gpu_slices(node: str, topology: Topology, *, generation: int = 1) -> list[dict[str, Any]]:
    """The ResourceSlice(s) of the node's GPUs (one pool named after the node)."""
    return build_slices(node, gpu_devices(topology), generation=generation, driver=GPU_DRIVER)


def gpu_device_class() -> dict[str, Any]:
    """The ``gpu.example.com`` DeviceClass: every device of that driver."""
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "DeviceClass",
        "metadata": {"name": GPU_DRIVER},
        "spec": {"selectors": [{"cel": {"expression": f'device.driver == "{GPU_DRIVER}"'}}]},
    }
