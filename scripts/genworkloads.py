#!/usr/bin/env python3
"""Write the simulator's built-in workloads, parsed, to ``src/topodra/sim/workloads/builtin.json``.

``topodra sim run`` loads a built-in workload from this file instead of parsing its YAML
(see ``topodra.sim.workload.BUILTIN_INDEX``). Run it after editing a built-in workload;
``--check`` fails when the committed file is stale (tests/test_cli_start.py runs it).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "src" / "topodra" / "sim" / "workloads" / "builtin.json"


def render() -> str:
    sys.path.insert(0, str(ROOT / "src"))
    from topodra.sim.workload import builtin_index

    return json.dumps(builtin_index(), indent=1, sort_keys=True) + "\n"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--check", action="store_true", help="fail if the committed file is stale")
    args = ap.parse_args()
    text = render()
    if args.check:
        if not OUT.is_file() or OUT.read_text() != text:
            print(f"{OUT.relative_to(ROOT)} is stale: run scripts/genworkloads.py", file=sys.stderr)
            return 1
        return 0
    OUT.write_text(text)
    print(f"wrote {OUT.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
