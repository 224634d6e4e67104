"""Command-line start-up: wall time of ``topodra --help``, ``topodra sim --help`` and a real small
``topodra sim run``, each against ``python -c pass`` measured in the same rounds.

Every command runs in a fresh interpreter with byte-code caching on (in a private cache
directory, warmed once), as an installed package runs; rounds interleave the commands so
that the load of this shared machine falls on all of them alike. Goal (issue 14): a small
``sim run`` in <= 0.3 s.
"""

from __future__ import annotations

import os
import resource
import subprocess
import sys
import tempfile
import time

from benchmarks.common import Result, median

#: label -> arguments of ``python -m topodra`` (None: ``python -c pass``, the peer)
COMMANDS: dict[str, list[str] | None] = {
    "python -c pass": None,
    "topodra --help": ["--help"],
    "topodra sim --help": ["sim", "--help"],
    "topodra sim run (4 nodes x 16 CPUs, 8 pods)": ["sim", "run", "--nodes", "4", "--cpus", "16", "--pods", "8"],
}
GOAL_S = 0.3


def _argv(args: list[str] | None) -> list[str]:
    return [sys.executable, "-c", "pass"] if args is None else [sys.executable, "-m", "topodra", *args]


def run(quick: bool) -> list[Result]:
    rounds = 3 if quick else 9
    times: dict[str, list[float]] = {k: [] for k in COMMANDS}
    cpu: dict[str, list[float]] = {k: [] for k in COMMANDS}  # user + system: steadier than wall under load
    with tempfile.TemporaryDirectory(prefix="topodra-pycache-") as cache:
        env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
        env.update(PYTHONPYCACHEPREFIX=cache, COLUMNS="100")
        for args in COMMANDS.values():  # warm the byte-code cache (an installed package ships it)
            subprocess.run(_argv(args), env=env, stdin=subprocess.DEVNULL, capture_output=True, check=False)
        for _ in range(rounds):
            for label, args in COMMANDS.items():
                r0, t0 = resource.getrusage(resource.RUSAGE_CHILDREN), time.perf_counter()
                done = subprocess.run(_argv(args), env=env, stdin=subprocess.DEVNULL, capture_output=True, check=False)
                times[label].append(time.perf_counter() - t0)
                r1 = resource.getrusage(resource.RUSAGE_CHILDREN)
                cpu[label].append(r1.ru_utime - r0.ru_utime + r1.ru_stime - r0.ru_stime)
                if done.returncode != 0:
                    raise RuntimeError(f"{label}: exit {done.returncode}: {done.stderr.decode()[-500:]}")
    peer, peer_cpu = median(times["python -c pass"]), median(cpu["python -c pass"])
    out = [Result("python -c pass (peer)", peer * 1e3, "ms", note=f"median of {rounds}; CPU {peer_cpu * 1e3:.0f} ms")]
    print(f"\n{'command':<46}{'median ms':>10}{'min ms':>9}{'x python -c pass':>18}{'CPU ms':>9}")
    for label, ts in times.items():
        m, c = median(ts), median(cpu[label])
        print(f"{label:<46}{m * 1e3:>10.0f}{min(ts) * 1e3:>9.0f}{m / peer:>18.1f}{c * 1e3:>9.0f}")
        if COMMANDS[label] is None:
            continue
        is_run = "sim run" in label
        out.append(
            Result(
                f"start: {label}",
                m * 1e3,
                "ms",
                goal=f"<= {GOAL_S * 1e3:.0f} ms" if is_run else None,
                met=m <= GOAL_S if is_run else None,
                note=f"{m / peer:.1f}x python -c pass ({peer * 1e3:.0f} ms) in the same rounds; min {min(ts) * 1e3:.0f} ms; CPU {c * 1e3:.0f} ms; median of {rounds}",
            )
        )
    return out
