"""A driver process for the restart test: ``python -m dra.dra_process prepare|restart DIR`` (from tests/).

Each run is a fresh interpreter with a fresh policy; only DIR (checkpoint, CDI
specs, the claim objects) survives between runs, as across a driver restart.
Prints one JSON line with what it saw.
"""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path
from typing import Any

from topodra.cpuset import CPUSet
from topodra.dra import cdi
from topodra.dra.devices import build_devices
from topodra.dra.driver import ClaimRef, Driver
from topodra.topology import synthetic_topology

from .dra_fakes import RecordingPolicy

TOPO = synthetic_topology("1s1n1l8c2t")


async def main(mode: str, root: Path) -> dict[str, Any]:
    policy = RecordingPolicy(TOPO, CPUSet([0]))
    claims = json.loads((root / "claims.json").read_text())

    async def fetch(namespace: str, name: str) -> dict[str, Any]:
        return claims[f"{namespace}/{name}"]  # type: ignore[no-any-return]

    driver = Driver(
        policy=policy,
        lock=asyncio.Lock(),
        fetch_claim=fetch,
        cdi_dir=root / "cdi",
        checkpoint_path=root / "plugin" / "checkpoint.json",
        devices=build_devices(TOPO, exclude=CPUSet([0])),
        pool="node-a",
    )
    ref = ClaimRef("default", "u1", "claim-u1")
    out: dict[str, Any] = {}
    if mode == "restart":
        report = await driver.restore()
        out["restored"] = list(report.restored)
        out["claims_after_restore"] = {k: str(v) for k, v in policy.claims().items()}
    res = (await driver.prepare([ref]))["u1"]
    out["error"] = res.error
    out["cpus"] = str(res.claim.cpus) if res.claim else ""
    out["cdi_ids"] = list(res.cdi_ids)
    out["devices"] = [d.device for d in res.devices]
    if mode == "restart":
        un = (await driver.unprepare([ref]))["u1"]
        out["unprepare_error"] = un.error
        out["claims_after_unprepare"] = {k: str(v) for k, v in policy.claims().items()}
        out["spec_after_unprepare"] = str(cdi.read_spec_cpus(root / "cdi", "u1"))
    return out


if __name__ == "__main__":
    print(json.dumps(asyncio.run(main(sys.argv[1], Path(sys.argv[2])))))
