"""The soak: a long randomized churn against the real agent process (testkit.churn).

Claim pods, Guaranteed pods and shared pods come and go from concurrent
workers, the agent process is restarted; at the end every container's applied
cpuset must equal the agent's record and no CPU may be held twice. Prints the
run's report and records its figures. ``--quick``: 200 operations; else 1,000.
"""

from __future__ import annotations

import asyncio
import logging

from testkit.churn import run_churn

from benchmarks.common import Result


def run(quick: bool) -> list[Result]:
    operations = 200 if quick else 1000
    logging.getLogger("topodra.embedded.runtime").setLevel(logging.ERROR)  # its per-update warnings
    report = asyncio.run(run_churn(operations, seed=7, restarts=3 if quick else 8))
    for line in report.lines():
        print("   " + line)
    w = sorted(report.withdraw_ms)
    p50 = w[len(w) // 2] if w else 0.0
    return [
        Result("operations", report.operations, "ops", note=f"{report.restarts} agent restarts, {report.seconds:.0f} s"),
        Result("cpuset_mismatches", len(report.mismatches), "containers", goal="0", met=not report.mismatches),
        Result("cpus_held_twice", len(report.double_held), "CPUs", goal="0", met=not report.double_held),
        Result("prepare_failures", len(report.prepare_failures), "claims", goal="0", met=not report.prepare_failures),
        Result(
            "exclusive_moved_outside_race",
            report.exclusive_moved - report.exclusive_moved_in_race,
            "containers",
            goal="0",
            met=report.exclusive_moved == report.exclusive_moved_in_race,
            note=f"{report.exclusive_moved_in_race} moved by claims allocated from slices not yet updated",
        ),
        Result("withdrawal_window_p50", p50, "ms", note="exclusive grant -> slices without its CPUs"),
        Result(
            "slice_writes_per_exclusive_grant",
            report.slice_writes / max(1, report.exclusive_grants),
            "writes",
            note="every offer change, exclusive grants and releases and floor moves",
        ),
        Result("start_window_updates_dropped_by_runtime", report.lost_updates, "updates", note="then repaired"),
    ]
