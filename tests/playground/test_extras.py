"""A core install asked for the playground says which extra to install before running anything."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from topodra import extras
from topodra.cli import app


def test_the_playground_checks_for_the_sim_extra_before_its_first_step(monkeypatch: pytest.MonkeyPatch) -> None:
    present = extras.package_installed
    monkeypatch.setattr(extras, "package_installed", lambda name: name != "cel_expr_python" and present(name))
    r = CliRunner().invoke(app, ["playground"])
    assert r.exit_code == 2
    assert "needs the optional 'sim' dependencies (cel_expr_python not installed)" in r.output
    assert "pip install 'topodra[sim]'" in r.output
    assert "step" not in r.output.lower()


def test_with_every_package_present_nothing_is_refused() -> None:
    extras.require_extra("sim", "playground")
