"""ruff and mypy --strict run as part of the suite (scripts/test runs them first too)."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _tool(name: str) -> str:
    exe = Path(sys.executable).with_name(name)
    found = str(exe) if exe.exists() else shutil.which(name)
    assert found, f"{name} is not installed (pip install -e '.[dev]')"
    return found


def test_ruff_clean() -> None:
    r = subprocess.run([_tool("ruff"), "check", "src", "testkit", "tests", "benchmarks"], cwd=ROOT, capture_output=True, text=True)
    assert r.returncode == 0, r.stdout + r.stderr


@pytest.mark.slow
def test_mypy_strict() -> None:
    r = subprocess.run([_tool("mypy")], cwd=ROOT, capture_output=True, text=True)
    assert r.returncode == 0, r.stdout + r.stderr


#: What marks a diary rather than a user guide: a tracker number a user cannot look up, or a
#: working round. History goes in CHANGELOG.md.
DIARY = re.compile(r"\bissues? #?[0-9]+|\bthis (round|session)\b|\bround [0-9]+\b|\bthe round after\b", re.IGNORECASE)


def test_docs_state_how_things_work_not_their_history() -> None:
    pages = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
    assert len(pages) > 5, pages
    found = [
        f"{page.relative_to(ROOT)}:{n}: {line.strip()}"
        for page in pages
        for n, line in enumerate(page.read_text(encoding="utf-8").splitlines(), 1)
        if DIARY.search(line)
    ]
    assert found == [], "\n".join(found)
