"""Large YAML: ``topodra sim replay`` of a cluster dump as ``kubectl get -o yaml`` writes it.

The dump is written fresh for the run (``testkit.kubedump``, deterministic: Nodes with a
kubelet's status, the agent's ResourceSlices, the DeviceClass, claim templates, allocated
claims and pods, ``managedFields`` on all, one ``kind: List``). Every run is a fresh process
(its own peak RSS from ``wait4``), its steps written as JSON to a file.

Rows: the 50 MB dump replayed by ``topodra sim replay -o json`` (goal: <= 30 s and <= 1 GiB);
in the same run, two peers on the same input: libyaml's own loader (``yaml.load`` with
``CSafeLoader``: the whole List built first, then replayed) on the 50 MB, and the reader this
replaced (PyYAML's pure-Python composer, serializer and loader, three passes; 537 s on 50 MB in
issue 29) on the 5 MB dump against ``sim replay`` on the same 5 MB. Every peer's steps must be
the command's (sources aside: the command names each item's own line).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from benchmarks.common import Result

GOAL_S = 30.0
GOAL_MIB = 1024.0

_PEER = """
import json, sys, yaml
from topodra.sim.replay import replay
mode, path, out = sys.argv[1:4]
text = open(path).read()
if mode == "libyaml":  # libyaml's loader: the whole document built, then replayed
    items = yaml.load(text, Loader=yaml.CSafeLoader)["items"]
else:  # the reader before: pure-Python compose, then serialize and load every document again
    items = [i for n in yaml.compose_all(text, Loader=yaml.SafeLoader) if n is not None for i in yaml.safe_load(yaml.serialize(n))["items"]]
r = replay((i, path) for i in items)
open(out, "w").write(json.dumps([s.as_dict() for s in r.steps], indent=2))
"""


def _measure(argv: list[str], stdout: Path) -> dict[str, float]:
    """Wall, CPU (user + system) and peak RSS of one child process."""
    with stdout.open("w") as out:
        t = time.perf_counter()
        proc = subprocess.Popen(argv, stdout=out, stderr=subprocess.DEVNULL, stdin=subprocess.DEVNULL)
        _, status, usage = os.wait4(proc.pid, 0)
        wall = time.perf_counter() - t
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode not in (0, 1):  # 1: some pod still pending
        raise RuntimeError(f"{argv[:6]} exited {proc.returncode}")
    return {"wall": wall, "cpu": usage.ru_utime + usage.ru_stime, "rss_mib": usage.ru_maxrss / 1024}


def _replay(dump: Path, out: Path) -> dict[str, float]:
    return _measure([sys.executable, "-m", "topodra", "sim", "replay", str(dump), "-o", "json"], out)


def _peer(mode: str, dump: Path, out: Path) -> dict[str, float]:
    return _measure([sys.executable, "-c", _PEER, mode, str(dump), str(out)], out.with_suffix(".log"))


def _steps(path: Path) -> list[Any]:
    steps: list[Any] = json.loads(path.read_text())
    for s in steps:
        s.pop("source", None)
    return steps


def _figures(label: str, mine: dict[str, float], note: str, goal: bool) -> list[Result]:
    return [
        Result(f"{label}: sim replay wall", mine["wall"], "s", goal=f"<= {GOAL_S:g} s" if goal else None, met=mine["wall"] <= GOAL_S if goal else None,
               note=f"CPU {mine['cpu']:.1f} s; {note}"),
        Result(f"{label}: sim replay peak RSS", mine["rss_mib"], "MiB", goal=f"<= {GOAL_MIB:g} MiB" if goal else None, met=mine["rss_mib"] <= GOAL_MIB if goal else None),
    ]


def run(quick: bool) -> list[Result]:
    from testkit.kubedump import spec_for_size, write_dump

    big_mb, small_mb = (5.0, 1.0) if quick else (50.0, 5.0)
    out: list[Result] = []
    with tempfile.TemporaryDirectory(prefix="bench-yaml-") as tmp:
        d = Path(tmp)
        big, small = d / "big.yaml", d / "small.yaml"
        size = write_dump(big, spec_for_size(big_mb))
        write_dump(small, spec_for_size(small_mb))
        load = os.getloadavg()[0]
        mine = _replay(big, d / "mine.json")
        lib = _peer("libyaml", big, d / "lib.json")
        same = _steps(d / "mine.json") == _steps(d / "lib.json")
        steps = len(_steps(d / "mine.json"))
        print(f"\n{size / 1e6:.1f} MB, {steps} steps: sim replay {mine['wall']:.1f} s wall, {mine['cpu']:.1f} s CPU, {mine['rss_mib']:.0f} MiB; "
              f"libyaml's loader whole, then replay: {lib['wall']:.1f} s, {lib['cpu']:.1f} s CPU, {lib['rss_mib']:.0f} MiB (load {load:.1f})")
        label = f"yaml {size / 1e6:.0f} MB kubectl dump, {steps} steps"
        out += _figures(label, mine, f"load {load:.1f}; peer libyaml's loader whole then replay {lib['wall']:.1f} s, CPU {lib['cpu']:.1f} s, "
                        f"{lib['rss_mib']:.0f} MiB; same steps: {same}", goal=not quick)
        out.append(
            Result(
                f"{label}: libyaml's loader whole, then replay / sim replay, CPU",
                lib["cpu"] / mine["cpu"],
                "x",
                goal="same steps",
                met=same,
                note=f"wall {lib['wall'] / mine['wall']:.2f}x, peak RSS {lib['rss_mib'] / mine['rss_mib']:.2f}x",
            )
        )
        mine_small = _replay(small, d / "mine-small.json")
        old = _peer("pure", small, d / "old.json")
        same_old = _steps(d / "mine-small.json") == _steps(d / "old.json")
        print(f"{small_mb:g} MB: sim replay {mine_small['wall']:.1f} s ({mine_small['rss_mib']:.0f} MiB); the reader before {old['wall']:.1f} s ({old['rss_mib']:.0f} MiB)")
        out.append(
            Result(
                f"yaml {small_mb:g} MB kubectl dump: the reader before (pure-Python, three passes) / sim replay, wall",
                old["wall"] / mine_small["wall"],
                "x",
                goal="same steps",
                met=same_old,
                note=f"{old['wall']:.1f} s vs {mine_small['wall']:.1f} s, CPU {old['cpu']:.1f} vs {mine_small['cpu']:.1f} s, {old['rss_mib']:.0f} vs {mine_small['rss_mib']:.0f} MiB",
            )
        )
    return out
