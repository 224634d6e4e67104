"""Grant sequences replayed through the kubelet's own Go code, and through the Python port.

A grant sequence is a machine (each CPU as the kubelet sees it), the CPUs the
kubelet may hand out, and operations in order: ``{"take": id, "count": n}`` or
``{"release": id}`` (``{"sample": true}`` marks where a benchmark looks at
the free CPUs; the replays skip it). A take that does not fit is answered with an error and
holds nothing, as the static policy does.

The Go side is a small harness kept out of this repo: a test file placed in the
kubelet's ``pkg/kubelet/cm/cpumanager`` package of a Kubernetes v1.36.2 tree,
compiled with ``go test -c``; it reads ``HARNESS_IN`` (a JSON list of sequences),
calls ``takeByTopologyNUMAPacked`` (packed sorting, no uncore-cache preference)
for each take, and writes ``HARNESS_OUT``: per sequence, each grant's CPUs or
error and the fastest of ``repeat`` calls in nanoseconds. Its source and build
commands are in ``docs/policy.md`` ("The kubelet peer"). ``TOPODRA_KUBELET_HARNESS``
names the compiled binary; without it only the recorded answers in
``tests/data/kubelet-grants/`` are available.
"""

from __future__ import annotations

import json
import os
import random
import subprocess
import tempfile
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from testkit.kubelet_baseline import KubeletCPU, KubeletMachine, take_by_topology_numa_packed
from topodra.cpuset import CPUSet
from topodra.policy.api import PolicyError

__all__ = ["Grant", "GrantSequence", "churn_sequence", "grants_from_json", "harness_binary", "record", "replay_go", "replay_python"]

HARNESS_ENV = "TOPODRA_KUBELET_HARNESS"


@dataclass(frozen=True)
class Grant:
    """One take's answer: the CPUs, or the error; ``ns``: time of one call."""

    id: str
    count: int
    cpus: tuple[int, ...]
    error: str = ""
    ns: int = 0


@dataclass(frozen=True)
class GrantSequence:
    name: str
    machine: KubeletMachine
    available: CPUSet
    ops: tuple[Mapping[str, Any], ...]

    def to_json(self, repeat: int = 1) -> dict[str, Any]:
        return {
            "name": self.name,
            "cpus": [
                {"id": c, "socket": i.socket, "numa": i.numa, "core": i.core, "uncore": i.socket}
                for c, i in sorted(self.machine.cpus.items())
            ],
            "available": sorted(self.available),
            "ops": [dict(op) for op in self.ops if "sample" not in op],
            "repeat": repeat,
        }

    @classmethod
    def from_json(cls, raw: Mapping[str, Any]) -> GrantSequence:
        machine = KubeletMachine({c["id"]: KubeletCPU(socket=c["socket"], numa=c["numa"], core=c["core"]) for c in raw["cpus"]})
        return cls(raw["name"], machine, CPUSet(raw["available"]), tuple(raw["ops"]))


def replay_python(seq: GrantSequence) -> list[Grant]:
    """The sequence through the Python port, timed per take."""
    free = seq.available
    held: dict[str, CPUSet] = {}
    out: list[Grant] = []
    for op in seq.ops:
        if "sample" in op:
            continue
        if "release" in op:
            free |= held.pop(op["release"], CPUSet())
            continue
        t0 = time.perf_counter_ns()
        try:
            got = take_by_topology_numa_packed(seq.machine, free, op["count"])
        except PolicyError as exc:
            out.append(Grant(op["take"], op["count"], (), str(exc), time.perf_counter_ns() - t0))
            continue
        ns = time.perf_counter_ns() - t0
        free -= got
        held[op["take"]] = got
        out.append(Grant(op["take"], op["count"], tuple(sorted(got)), "", ns))
    return out


def harness_binary() -> Path | None:
    """The compiled Go harness named by ``TOPODRA_KUBELET_HARNESS``, if it exists."""
    name = os.environ.get(HARNESS_ENV)
    return Path(name) if name and Path(name).is_file() else None


def replay_go(binary: Path, seqs: Sequence[GrantSequence], repeat: int = 5) -> list[list[Grant]]:
    """The sequences through the kubelet's own code; each take timed as the fastest of ``repeat`` calls."""
    with tempfile.TemporaryDirectory() as tmp:
        src, dst = Path(tmp, "in.json"), Path(tmp, "out.json")
        src.write_text(json.dumps([s.to_json(repeat) for s in seqs]))
        env = dict(os.environ, HARNESS_IN=str(src), HARNESS_OUT=str(dst))
        subprocess.run([str(binary), "-test.run", "^TestTopodraHarness$"], env=env, check=True,
                       capture_output=True, timeout=600)
        answers = json.loads(dst.read_text())
    return [grants_from_json(a["grants"]) for a in answers]


def grants_from_json(raw: Sequence[Mapping[str, Any]]) -> list[Grant]:
    return [Grant(g["id"], g["count"], tuple(g.get("cpus") or ()), g.get("error", ""), g.get("ns", 0)) for g in raw]


def churn_sequence(name: str, machine: KubeletMachine, available: CPUSet, steps: int, seed: int) -> GrantSequence:
    """A random churn of takes (1 to a third of the CPUs) and releases."""
    rng = random.Random(seed)
    ops: list[dict[str, Any]] = []
    live: list[str] = []
    biggest = max(1, len(available) // 3)
    for step in range(steps):
        if live and rng.random() < 0.35:
            ops.append({"release": live.pop(rng.randrange(len(live)))})
        else:
            live.append(f"c{step}")
            ops.append({"take": f"c{step}", "count": rng.randint(1, biggest)})
    return GrantSequence(name, machine, available, tuple(ops))


def record(binary: Path, seqs: Sequence[GrantSequence], out: Path) -> None:
    """Write each sequence with the kubelet's answers (no timings) to ``out/NAME.json``."""
    out.mkdir(parents=True, exist_ok=True)
    for seq, grants in zip(seqs, replay_go(binary, seqs, repeat=1), strict=True):
        body = seq.to_json() | {"grants": [
            {"id": g.id, "count": g.count, "cpus": list(g.cpus), "error": g.error} for g in grants
        ]}
        (out / f"{seq.name}.json").write_text(json.dumps(body, separators=(",", ":")) + "\n")
