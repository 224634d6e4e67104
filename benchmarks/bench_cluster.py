"""A sweep on a Dask cluster: 50 cells of 10,000 to 50,000 nodes on a local Dask cluster of 2
worker processes (``sim sweep --cluster local:2``) against the same sweep in 2 local processes
(``-j 2``), in the same run. Goal (issue 29): every cell finishes, with the results of the local
processes cell by cell (every figure of ``results.json`` but our own timings).

Both are run as the command a person types, each in its own process, writing into a temporary
``--out``; the command lines are printed. Quick: 4 cells of 1,000 and 2,000 nodes.
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from benchmarks.common import Result

TIMING = {"sim_seconds", "sim_pods_per_s", "build_seconds"}


def _grid(quick: bool) -> list[str]:
    if quick:
        return ["--nodes", "1000,2000", "--cpus", "64", "--model", "cpu,grouped"]
    return ["--nodes", "10000,20000,30000,40000,50000", "--cpus", "64,256", "--model", "cpu,core,grouped,grouped:l3,grouped:socket"]


def _sweep(args: list[str], out: Path) -> float:
    argv = [sys.executable, "-m", "topodra", "sim", "sweep", *args, "--out", str(out)]
    print("  " + " ".join(["topodra", *argv[3:]]))
    t = time.perf_counter()
    done = subprocess.run(argv, capture_output=True, text=True, check=False)
    wall = time.perf_counter() - t
    if done.returncode != 0:
        raise RuntimeError(f"sim sweep exited {done.returncode}: {done.stderr[-2000:]}")
    for line in done.stderr.splitlines()[:3]:  # its progress lines (stderr is a pipe here)
        print("    " + line)
    return wall


def _cells(out: Path) -> list[dict[str, Any]]:
    return [{k: v for k, v in c.items() if k not in TIMING} for c in json.loads((out / "results.json").read_text())]


def run(quick: bool) -> list[Result]:
    grid = _grid(quick)
    with tempfile.TemporaryDirectory(prefix="bench-cluster-") as tmp:
        dask_out, local_out = Path(tmp) / "dask", Path(tmp) / "local"
        t_dask = _sweep([*grid, "--cluster", "local:2"], dask_out)
        t_local = _sweep([*grid, "-j", "2"], local_out)
        mine, theirs = _cells(dask_out), _cells(local_out)
    differ = [f"{a['model']}/{a['cpus_per_node']:g}/{a['nodes']}" for a, b in zip(mine, theirs, strict=True) if a != b]
    same = len(mine) == len(theirs) and not differ
    nodes = sorted({c["nodes"] for c in mine})
    print(f"{len(mine)} cells of {nodes[0]:,}-{nodes[-1]:,} nodes: Dask local:2 {t_dask:.1f} s, 2 local processes {t_local:.1f} s; cells that differ: {differ or 'none'}")
    return [
        Result(
            f"sweep {len(mine)} cells of {nodes[0]:,}-{nodes[-1]:,} nodes on a local Dask cluster of 2 workers (incl. its start)",
            t_dask,
            "s",
            goal="every cell, the local processes' results",
            met=same and len(mine) >= (4 if quick else 50),
            note=f"2 local processes {t_local:.1f} s ({t_dask / t_local:.2f}x); {sum(c['scheduled'] for c in mine):,} pods scheduled; cells that differ: {', '.join(differ) or 'none'}",
        )
    ]
