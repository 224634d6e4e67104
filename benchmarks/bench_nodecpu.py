"""Node CPU accounting under churn: claimed CPUs counted against the node's cpu or not.

The same randomized churn (testkit.churn, ``mix="node-cpu"``: claim pods, Guaranteed pods and
shared pods requesting 0.5 to 1.5 CPU on a 16-CPU node, one agent restart) runs twice through the
playground with the real agent process: with ``DRANodeAllocatableResources`` off (Kubernetes
1.36's default: the scheduler counts claimed CPUs as free node cpu) and on (the agent publishes
nodeAllocatableResourceMappings, the scheduler counts each claim's CPUs against the node). Every
third operation the workers pause and the node's shared CPUs are set against its running shared
pods' CPU requests. ``--quick``: 150 operations per run; else 600.
"""

from __future__ import annotations

import asyncio
import logging

from testkit.churn import ChurnReport, run_churn

from benchmarks.common import Result
from topodra.gates import NODE_ALLOCATABLE


def _churn(operations: int, gate: bool) -> ChurnReport:
    report = asyncio.run(
        run_churn(operations, seed=7, restarts=1, gates={NODE_ALLOCATABLE: gate}, mix="node-cpu", sample_every=3)
    )
    print(f"   DRANodeAllocatableResources={str(gate).lower()}:")
    for line in report.lines():
        print("     " + line)
    return report


def run(quick: bool) -> list[Result]:
    operations = 150 if quick else 600
    logging.getLogger("topodra.embedded.runtime").setLevel(logging.ERROR)  # its per-update warnings
    off, on = _churn(operations, False), _churn(operations, True)
    return [
        Result(
            "gate_off_samples_over",
            100 * off.shared_over / max(1, off.shared_samples),
            "%",
            note=f"{off.shared_over} of {off.shared_samples} quiet moments: shared pods requested more than the shared CPUs",
        ),
        Result(
            "gate_off_most_over",
            off.shared_over_max_milli / 1000,
            "CPUs",
            note=f"{off.shared_worst or '-'}; {off.guaranteed_refused} Guaranteed pods bound, then refused by the agent",
        ),
        Result(
            "gate_on_samples_over",
            on.shared_over,
            "samples",
            goal="0",
            met=on.shared_over == 0,
            note=f"of {on.shared_samples}; {on.unschedulable} pods refused up front by the scheduler",
        ),
        Result("gate_on_guaranteed_refused_by_agent", on.guaranteed_refused, "pods", goal="0", met=on.guaranteed_refused == 0),
    ]
