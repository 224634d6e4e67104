"""Topology discovery speed, side by side with hwloc's lstopo on the same trees.

Three trees, read from a warm page cache (tmpfs, as sysfs lives in memory):
the synthetic 2-socket 256-CPU server written by sysfs_writer (goal: <= 50 ms),
the fixture with the most online CPUs (256ia64-64n2s2c: 256 CPUs, 64 NUMA
nodes) and the one with the most files per CPU (memorysidecaches: 80 CPUs,
four cache levels). Each is read by topodra and by ``lstopo-no-graphics
--input DIR --of xml`` in the same run, interleaved, and both are timed in
CPU time (user + system): topodra's ``read_topology`` call in this process,
lstopo's whole process (goal: topodra <= lstopo). lstopo's process start-up is
part of its figure, so its time on a one-CPU tree is reported beside it. For
completeness the whole ``python -c 'read_topology(DIR)'`` process is timed too
(interpreter start-up and imports included; the agent pays those once, then
re-reads in-process on hotplug).
"""

from __future__ import annotations

import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from testkit.sysfs_writer import write_sysfs

from benchmarks.common import Result, median
from topodra.topology import read_topology, synthetic_topology
from topodra.topology.fixtures import unpacked_fixture

GOAL_MS = 50.0
SYNTHETIC = "2s1d2n2l16c2t"  # 2 sockets x 2 nodes x 2 L3 x 16 cores x 2 threads = 256 CPUs
LSTOPO = "lstopo-no-graphics"


def _topodra_cpu_ms(root: Path) -> float:
    t0 = time.process_time()
    read_topology(root)
    return (time.process_time() - t0) * 1000


def _child_cpu_ms(argv: list[str]) -> float:
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    subprocess.run(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return (after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime) * 1000


def _lstopo_cpu_ms(root: Path) -> float:
    return _child_cpu_ms([LSTOPO, "--input", str(root), "--of", "xml"])


def _topodra_process_cpu_ms(root: Path) -> float:
    code = f"from topodra.topology import read_topology; read_topology({str(root)!r})"
    return _child_cpu_ms([sys.executable, "-c", code])


def _measure(label: str, root: Path, repeat: int, goal_ms: float | None, lstopo: bool) -> list[Result]:
    read_topology(root)  # warm the page cache
    ours: list[float] = []
    theirs: list[float] = []
    for _ in range(repeat):  # interleaved, so load changes hit both alike
        ours.append(_topodra_cpu_ms(root))
        if lstopo:
            theirs.append(_lstopo_cpu_ms(root))
    med = median(ours)
    out = [
        Result(
            f"{label}: topodra read (CPU)",
            med,
            "ms",
            goal=f"<= {goal_ms:.0f} ms" if goal_ms else None,
            met=(med <= goal_ms) if goal_ms else None,
            note=f"min {min(ours):.1f} ms over {repeat} reads",
        )
    ]
    if lstopo:
        peer = median(theirs)
        out += [
            Result(f"{label}: lstopo whole process (CPU)", peer, "ms", note=f"min {min(theirs):.1f} ms"),
            Result(f"{label}: topodra / lstopo", med / peer, "x", goal="<= 1", met=med <= peer),
        ]
    return out


def run(quick: bool) -> list[Result]:
    repeat = 7 if quick else 25
    lstopo = shutil.which(LSTOPO) is not None
    results: list[Result] = []
    if not lstopo:
        results.append(
            Result(f"{LSTOPO} not installed: no side-by-side figures", 0, "", note="apt install hwloc")
        )
    shm = "/dev/shm" if os.access("/dev/shm", os.W_OK) else None  # sysfs lives in memory
    with tempfile.TemporaryDirectory(dir=shm) as tmp:
        root = write_sysfs(synthetic_topology(SYNTHETIC), Path(tmp) / "synthetic")
        results += _measure(f"synthetic {SYNTHETIC} (256 CPUs)", root, repeat, GOAL_MS, lstopo)
        whole = median([_topodra_process_cpu_ms(root) for _ in range(max(3, repeat // 3))])
        results.append(
            Result(
                f"synthetic {SYNTHETIC}: topodra whole process (CPU)",
                whole,
                "ms",
                note="python start-up and imports included; compare lstopo whole process",
            )
        )
        results += _measure(
            "256ia64-64n2s2c (256 CPUs, 64 nodes)",
            unpacked_fixture("256ia64-64n2s2c"),
            repeat,
            GOAL_MS,
            lstopo,
        )
        results += _measure(
            "memorysidecaches (80 CPUs, 4 cache levels)",
            unpacked_fixture("memorysidecaches"),
            repeat,
            None,
            lstopo,
        )
        if lstopo:
            tiny = write_sysfs(synthetic_topology("1s1d1n1l1c1t"), Path(tmp) / "tiny")
            start = median([_lstopo_cpu_ms(tiny) for _ in range(repeat)])
            results.append(
                Result("lstopo start-up (one-CPU tree, CPU)", start, "ms", note="part of every lstopo figure")
            )
        big = write_sysfs(synthetic_topology("2s1d4n2l16c2t"), Path(tmp) / "big")
        results += _measure("synthetic 2s1d4n2l16c2t (512 CPUs)", big, max(3, repeat // 3), None, False)
    return results
