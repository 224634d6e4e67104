"""A binary file or a directory where a command wants a text file: one line naming it, exit != 0."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from typer.testing import CliRunner

from topodra.cli import app

COMMANDS = [
    ["playground", "{f}"],
    ["sim", "run", "--nodes", "2", "--cpus", "8", "--workload", "{f}"],
    ["sim", "run", "--nodes", "2", "--cpus", "8", "--objects", "{f}"],
    ["sim", "replay", "{f}"],
    ["policy", "place", "{f}"],
    ["policy", "pools", "--config", "{f}"],
    ["dra", "devices", "--topology", "1s2c1t", "--config", "{f}"],
]


@pytest.mark.parametrize("argv", COMMANDS, ids=lambda a: " ".join(a[:2]) + " " + a[-2])
def test_a_binary_file_is_one_line_naming_it(tmp_path: Path, argv: list[str]) -> None:
    garbage = tmp_path / "garbage.bin"
    garbage.write_bytes(b"\x00\xbc\xff" + bytes(range(256)))
    r = CliRunner().invoke(app, [a.format(f=garbage) for a in argv])
    assert r.exit_code != 0, r.output
    assert r.exception is None or isinstance(r.exception, SystemExit), repr(r.exception)
    text = " ".join(r.output.split())  # a narrow terminal may wrap the line
    assert re.search(rf"{re.escape(str(garbage))}(:\d+:\d+)?: not a text file", text), r.output
    assert "Traceback" not in r.output


def test_a_workload_that_is_a_directory_says_so(tmp_path: Path) -> None:
    r = CliRunner().invoke(app, ["sim", "run", "--nodes", "2", "--cpus", "8", "--workload", str(tmp_path)])
    assert r.exit_code == 2, r.output
    assert "is a directory, not a workload file" in " ".join(r.output.split())
