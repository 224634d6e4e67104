"""Topology discovery speed: read_topology on the largest fixture (goal <= 50 ms).

The largest fixture is the one with the most online CPUs (256ia64-64n2s2c:
256 CPUs, 64 NUMA nodes); the tree with the most files read per CPU
(memorysidecaches: 80 CPUs with four cache levels each) and a 512-CPU
synthetic server written by sysfs_writer are measured too. Trees are read
from a warm page cache (the fixtures unpack to /dev/shm when it exists), as
an agent re-reads sysfs after hotplug.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

from benchmarks.common import Result, median, percentile, time_calls
from topodra.testing.fixtures import fixture_names, unpacked_fixture
from topodra.testing.sysfs_writer import write_sysfs
from topodra.topology import read_topology, synthetic_topology

GOAL_MS = 50.0


def _largest() -> str:
    best = ("", -1)
    for name in fixture_names():
        n = len(read_topology(unpacked_fixture(name)).cpus)
        if n > best[1]:
            best = (name, n)
    return best[0]


def _measure(label: str, root: Path, repeat: int, goal: bool) -> list[Result]:
    read_topology(root)  # warm the page cache
    times = [t * 1000 for t in time_calls(lambda: read_topology(root), repeat)]
    med = median(times)
    out = [
        Result(
            f"{label} median",
            med,
            "ms",
            goal=f"<= {GOAL_MS:.0f} ms" if goal else None,
            met=(med <= GOAL_MS) if goal else None,
            note=f"min {min(times):.1f} ms over {repeat} reads",
        ),
        Result(f"{label} p95", percentile(times, 95), "ms"),
    ]
    return out


def run(quick: bool) -> list[Result]:
    repeat = 10 if quick else 50
    largest = _largest()
    t = read_topology(unpacked_fixture(largest))
    results = _measure(
        f"read {largest} ({len(t.cpus)} CPUs, {len(t.nodes)} nodes)", unpacked_fixture(largest), repeat, True
    )
    results += _measure(
        "read memorysidecaches (80 CPUs, 4 cache levels)", unpacked_fixture("memorysidecaches"), repeat, False
    )
    # sysfs lives in memory; tmpfs is the closer stand-in than a disk.
    shm = "/dev/shm" if os.access("/dev/shm", os.W_OK) else None
    with tempfile.TemporaryDirectory(dir=shm) as tmp:
        root = write_sysfs(synthetic_topology("2s1d4n2l16c2t"), tmp)
        results += _measure("read synthetic 2s1d4n2l16c2t (512 CPUs)", root, max(5, repeat // 5), False)
    return results
