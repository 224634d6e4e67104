"""Command-line start-up: wall time of ``topodra --help``, ``topodra sim --help`` and a real small
``topodra sim run``, each against ``python -c pass`` measured in the same rounds.

Every command runs in a fresh interpreter with byte-code caching on (in a private cache
directory, warmed once), as an installed package runs; rounds interleave the commands so
that the load of this shared machine falls on all of them alike. The small run is timed
twice: into a pipe (plain summary lines, as a script sees it) and on a pseudo-terminal
(the rich table and progress bar a person sees). Goal (issue 14): a small ``sim run`` in
<= 0.3 s.
"""

from __future__ import annotations

import os
import resource
import subprocess
import sys
import tempfile
import threading
import time

from benchmarks.common import Result, median

#: label -> arguments of ``python -m topodra`` (None: ``python -c pass``, the peer)
COMMANDS: dict[str, list[str] | None] = {
    "python -c pass": None,
    "topodra --help": ["--help"],
    "topodra sim --help": ["sim", "--help"],
    "topodra sim run (4 nodes x 16 CPUs, 8 pods)": ["sim", "run", "--nodes", "4", "--cpus", "16", "--pods", "8"],
    "  same, on a terminal": ["sim", "run", "--nodes", "4", "--cpus", "16", "--pods", "8"],
}
#: Commands run with stdout and stderr on a pseudo-terminal.
ON_TERMINAL = frozenset({"  same, on a terminal"})
GOAL_S = 0.3


def _argv(args: list[str] | None) -> list[str]:
    return [sys.executable, "-c", "pass"] if args is None else [sys.executable, "-m", "topodra", *args]


def _run(label: str, args: list[str] | None, env: dict[str, str]) -> tuple[int, str]:
    """Run one command to its end: exit code and the tail of what it wrote."""
    if label not in ON_TERMINAL:
        done = subprocess.run(_argv(args), env=env, stdin=subprocess.DEVNULL, capture_output=True, check=False)
        return done.returncode, done.stderr.decode()[-500:]
    master, slave = os.openpty()
    out: list[bytes] = []

    def drain() -> None:  # a full terminal buffer would block the child
        while True:
            try:
                chunk = os.read(master, 65536)
            except OSError:  # the child closed its end
                return
            if not chunk:
                return
            out.append(chunk)

    reader = threading.Thread(target=drain, daemon=True)
    reader.start()
    try:
        proc = subprocess.run(_argv(args), env=env, stdin=subprocess.DEVNULL, stdout=slave, stderr=slave, check=False)
    finally:
        os.close(slave)
    reader.join(timeout=10)
    os.close(master)
    return proc.returncode, b"".join(out).decode(errors="replace")[-500:]


def run(quick: bool) -> list[Result]:
    rounds = 3 if quick else 9
    times: dict[str, list[float]] = {k: [] for k in COMMANDS}
    cpu: dict[str, list[float]] = {k: [] for k in COMMANDS}  # user + system: steadier than wall under load
    with tempfile.TemporaryDirectory(prefix="topodra-pycache-") as cache:
        env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
        env.update(PYTHONPYCACHEPREFIX=cache, COLUMNS="100")
        for label, args in COMMANDS.items():  # warm the byte-code cache (an installed package ships it)
            _run(label, args, env)
        for _ in range(rounds):
            for label, args in COMMANDS.items():
                r0, t0 = resource.getrusage(resource.RUSAGE_CHILDREN), time.perf_counter()
                code, tail = _run(label, args, env)
                times[label].append(time.perf_counter() - t0)
                r1 = resource.getrusage(resource.RUSAGE_CHILDREN)
                cpu[label].append(r1.ru_utime - r0.ru_utime + r1.ru_stime - r0.ru_stime)
                if code != 0:
                    raise RuntimeError(f"{label}: exit {code}: {tail}")
    peer, peer_cpu = median(times["python -c pass"]), median(cpu["python -c pass"])
    out = [Result("python -c pass (peer)", peer * 1e3, "ms", note=f"median of {rounds}; CPU {peer_cpu * 1e3:.0f} ms")]
    print(f"\n{'command':<46}{'median ms':>10}{'min ms':>9}{'x python -c pass':>18}{'min x':>7}{'CPU ms':>9}")
    best_peer = min(times["python -c pass"])
    for label, ts in times.items():
        m, c = median(ts), median(cpu[label])
        print(f"{label:<46}{m * 1e3:>10.0f}{min(ts) * 1e3:>9.0f}{m / peer:>18.1f}{min(ts) / best_peer:>7.1f}{c * 1e3:>9.0f}")
        if COMMANDS[label] is None:
            continue
        is_run = "sim run" in label  # the goal is the pipe's; the terminal row shows what a person waits
        name = f"start: {label}" if label not in ON_TERMINAL else "start: topodra sim run (4 nodes x 16 CPUs, 8 pods) on a terminal"
        out.append(
            Result(
                name,
                m * 1e3,
                "ms",
                goal=f"<= {GOAL_S * 1e3:.0f} ms" if is_run else None,
                met=m <= GOAL_S if is_run else None,
                note=f"{m / peer:.1f}x python -c pass ({peer * 1e3:.0f} ms) in the same rounds; min {min(ts) * 1e3:.0f} ms; CPU {c * 1e3:.0f} ms; median of {rounds}",
            )
        )
    return out
