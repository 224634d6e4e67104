"""Committed generated protobuf modules must equal a fresh regeneration."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_generated_modules_are_fresh() -> None:
    r = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "genproto.py"), "--check"], capture_output=True, text=True
    )
    assert r.returncode == 0, r.stdout + r.stderr
