"""Restart across real processes: a new driver on the same checkpoint answers Prepare the same way."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from .dra_fakes import make_claim

HERE = Path(__file__).resolve().parent
SRC = HERE.parents[1] / "src"


def _run(mode: str, root: Path) -> dict[str, Any]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(SRC), str(HERE.parent)])}
    r = subprocess.run(
        [sys.executable, "-m", "dra.dra_process", mode, str(root)], capture_output=True, text=True, env=env, timeout=60
    )
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout.strip().splitlines()[-1])  # type: ignore[no-any-return]


def test_new_process_same_cpus_same_cdi_ids_then_frees(tmp_path: Path) -> None:
    (tmp_path / "claims.json").write_text(json.dumps({"default/claim-u1": make_claim("u1", ["cpu4", "cpu5"])}))
    first = _run("prepare", tmp_path)
    assert first["error"] == ""
    assert first["cpus"] == "4-5"
    second = _run("restart", tmp_path)
    assert second["restored"] == ["u1"]
    assert second["claims_after_restore"] == {"u1": "4-5"}
    assert second["error"] == ""
    assert second["cpus"] == first["cpus"]
    assert second["cdi_ids"] == first["cdi_ids"] == ["native.cpu/cpuset=claim-u1"]
    assert second["devices"] == first["devices"] == ["cpu4", "cpu5"]
    assert second["unprepare_error"] == ""
    assert second["claims_after_unprepare"] == {}
    assert second["spec_after_unprepare"] == "None"
