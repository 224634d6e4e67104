"""The shapes behind the Go allocator timings, counted by our allocator.

``published_observations()`` rebuilds each measured situation, lets the
allocator count the steps kube-scheduler's search takes there, and pairs the
counts with the Go time; ``fitted_costs()`` feeds them to
``costmodel.calibrate``. The benchmark prints the fit and its residuals; the
defaults in ``costmodel.DEFAULT_COSTS`` are this fit (a test keeps them in
step).

Search steps (calls, visits, checks) are fitted to the incubating allocator of
Kubernetes 1.36.2 (the copy openshift/microshift vendors), built and timed on
this 2-core machine (CPU seconds of the Allocate call, best of 1-3 runs; the
allocator's own allocateOne counter equals ours on every case). The L3 and
``distinctAttribute`` shapes below are those timed cases. The per-node,
per-device and CEL costs stay fitted to published figures (selector scan,
4-CPU claims, scheduler_perf), which the same build reproduced (a non-matching
selector scans 256 devices in 3.7 ms; 4-CPU claims take 93-126 us).

Assumed shapes for the published figures: per-CPU devices of the agent's
``cpu`` model on hybrid machines; "matches nothing" = a one-CPU claim whose
selector rejects every device; the 4-CPU claim with a 3-clause selector on an
empty node (150 us) and on a node whose first half is taken (380 us);
scheduler_perf = 1 device from 10 per node, 230 of 500 nodes filtered,
GOMAXPROCS 6.
"""

from __future__ import annotations

from typing import Any, Literal

from topodra.dra.devices import DeviceModelConfig, build_devices, device_class
from topodra.dra.slices import build_slices
from topodra.sim.allocator import AllocatedState, Allocator, SearchStats
from topodra.sim.costmodel import CostModel, Observation, calibrate
from topodra.topology.synthetic import synthetic_topology

__all__ = [
    "published_observations",
    "fitted_costs",
    "l3_shape",
    "scheduler_perf_slices",
    "SCHEDULER_PERF_DRIVER",
    "L3_GROUP_SECONDS",
    "DISTINCT_SECONDS",
    "distinct_shape",
]

Order = Literal["topology-reversed", "topology", "cpu-id"]
P_CORE = 'device.attributes["native.cpu"].coreType == "P-core"'
THREE_CLAUSES = (
    'device.attributes["native.cpu"].coreType == "P-core" && device.attributes["native.cpu"].isolated == false'
    ' && device.attributes["native.cpu"].core >= 0'
)
#: Go allocator CPU seconds for the L3 blow-up on this machine (group size -> seconds; the 20-CPU
#: groups were stopped by a 20 s deadline after 12.4 s of CPU: a lower bound). Published elsewhere
#: for another build: 0.1 / 1.2 / 10 / >100 s for 12 / 16 / 20 / 24.
L3_GROUP_SECONDS = {12: 3.09, 16: 40.7, 20: 12.4}
#: Go allocator CPU seconds of failing ``distinctAttribute: l3Cache`` searches on this machine:
#: (machine, devices per request, requests) -> seconds.
DISTINCT_SECONDS = {
    ("1s1d1n4l6c2t4e", 5, 1): 0.735,
    ("1s1d1n4l2c2t", 5, 1): 0.00172,
    ("1s1d1n4l2c2t", 1, 5): 0.0921,
    ("1s1d1n3l2c2t", 1, 4): 0.00643,
}
SCHEDULER_PERF_DRIVER = "test-driver.cdi.k8s.io"


def _claim(count: int, selectors: tuple[str, ...] = (), match: str | None = None) -> dict[str, Any]:
    ex: dict[str, Any] = {"deviceClassName": "native.cpu", "count": count}
    if selectors:
        ex["selectors"] = [{"cel": {"expression": e}} for e in selectors]
    devices: dict[str, Any] = {"requests": [{"name": "cpu", "exactly": ex}]}
    if match:
        devices["constraints"] = [{"matchAttribute": match}]
    return {"metadata": {"name": "c", "namespace": "default"}, "spec": {"devices": devices}}


def _stats(machine: str, claim: dict[str, Any], used_fraction: float = 0.0, order: Order = "cpu-id") -> SearchStats:
    topo = synthetic_topology(machine)
    # The published timings were taken on the prototype's devices: one per CPU, in CPU-id order.
    slices = build_slices("node-0", build_devices(topo, DeviceModelConfig(model="cpu", order=order, node_allocatable="off")))
    state = AllocatedState()
    cpus = sorted(topo.online)
    state.devices = {("native.cpu", "node-0", f"cpu{c}") for c in cpus[: int(len(cpus) * used_fraction)]}
    _, stats = Allocator(slices, [device_class()], state, budget=None).allocate_with_stats("node-0", [claim])
    return stats


def l3_shape(group: int) -> tuple[str, dict[str, Any]]:
    """Machine spec and claim of the L3 blow-up for L3 groups of ``group`` P-core CPUs."""
    groups = max(1, 250 // (group + 1))
    return f"1s1d1n{groups}l{group // 2}c2t1e", _claim(group + 1, (P_CORE,), "native.cpu/l3Cache")


def distinct_shape(devices: int, requests: int = 1) -> dict[str, Any]:
    """``requests`` requests of ``devices`` CPUs each, all on distinct L3 groups."""
    reqs = [
        {"name": f"r{i}", "exactly": {"deviceClassName": "native.cpu", "count": devices}} for i in range(requests)
    ]
    return {
        "metadata": {"name": "c", "namespace": "default"},
        "spec": {"devices": {"requests": reqs, "constraints": [{"distinctAttribute": "native.cpu/l3Cache"}]}},
    }


def scheduler_perf_slices(nodes: int, devices: int = 10) -> list[dict[str, Any]]:
    """The scheduler_perf DRA shape: one slice per node, ``instance-0..N``, 1Gi of memory each."""
    out = []
    for n in range(nodes):
        node = f"node-{n:05d}"
        out.append(
            {
                "apiVersion": "resource.k8s.io/v1",
                "kind": "ResourceSlice",
                "metadata": {"name": f"{node}-{SCHEDULER_PERF_DRIVER}"},
                "spec": {
                    "driver": SCHEDULER_PERF_DRIVER,
                    "nodeName": node,
                    "pool": {"name": node, "generation": 1, "resourceSliceCount": 1},
                    "devices": [
                        {
                            "name": f"instance-{i}",
                            "attributes": {
                                "model": {"string": "model-a"},
                                "family": {"string": "family-a"},
                                "driverVersion": {"version": "1.2.3"},
                                "numa": {"int": i % 2},
                            },
                            "capacity": {"memory": {"value": "1Gi"}},
                        }
                        for i in range(devices)
                    ],
                },
            }
        )
    return out


def _scheduler_perf_stats() -> SearchStats:
    cls = {"metadata": {"name": "test-class"}, "spec": {"selectors": [{"cel": {"expression": f'device.driver == "{SCHEDULER_PERF_DRIVER}"'}}]}}
    claim = {"metadata": {"name": "c"}, "spec": {"devices": {"requests": [{"name": "r", "exactly": {"deviceClassName": "test-class"}}]}}}
    _, stats = Allocator(scheduler_perf_slices(1), [cls], budget=None).allocate_with_stats("node-00000", [claim])
    return stats


def published_observations() -> dict[str, Any]:
    """Every published figure with the steps we count for its shape."""
    scan = Observation("selector matching nothing, 256 CPUs", _stats("2s1d2n4l6c2t4e", _claim(1, ('device.attributes["native.cpu"].coreType == "X-core"',))), 13e-6 * 256)
    small = [
        Observation("4-CPU claim, 3-clause selector, empty node", _stats("2s1d2n4l6c2t4e", _claim(4, (THREE_CLAUSES,))), 150e-6),
        Observation("4-CPU claim, 3-clause selector, half-full node", _stats("2s1d2n4l6c2t4e", _claim(4, (THREE_CLAUSES,)), 0.5), 380e-6),
    ]
    groups = []
    for g, secs in L3_GROUP_SECONDS.items():
        machine, claim = l3_shape(g)
        groups.append(Observation(f"L3 groups of {g} CPUs ({machine})", _stats(machine, claim), secs, lower_bound=(g == 20)))
    for (machine, n, r), secs in DISTINCT_SECONDS.items():
        st = _stats(machine, distinct_shape(n, r), order="topology-reversed")
        groups.append(Observation(f"distinctAttribute L3, {r} x {n} CPUs on {machine}", st, secs))
    perf = Observation("scheduler_perf 500 nodes x 10 devices (per pod)", _scheduler_perf_stats(), 1 / 371.9)
    return {"scan": scan, "small": small, "groups": groups, "scheduler_perf": perf}


def fitted_costs() -> CostModel:
    obs = published_observations()
    return calibrate(obs["scan"], obs["small"], obs["groups"], obs["scheduler_perf"], scheduler_perf_filtered_nodes=230)

