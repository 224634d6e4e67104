"""Every built-in scenario, with every ``--model`` and on every machine asked for, either holds
(exit 0) or refuses in one line (exit 1, one ``error:`` line, no expectation run).

The scenarios are listed by ``builtin_names()``, so a scenario added to
``src/topodra/playground/scenarios/`` is in the matrix without a change here. The default suite
runs each scenario with each model on its own machine; the ``slow`` matrix adds machines of
other shapes (this host, two CPUs, a hybrid, one-thread cores on eight NUMA nodes, four NUMA nodes
with SMT).
"""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from topodra.cli import app
from topodra.dra.devices import MODELS
from topodra.playground.scenario import builtin_names

OTHER_MACHINES = [
    "host",
    "synthetic:1s1d1n1l1c2t",
    "synthetic:1s1d1n1l6c2t8e",
    "fixture:16amd64-8n2c",
    "synthetic:2s1d2n1l4c2t",
]


def _verdict(scenario: str, model: str, machine: str | None) -> str:
    argv = ["playground", "-s", scenario, "--model", model] + (["--topology", machine] if machine else [])
    r = CliRunner().invoke(app, argv, env={"COLUMNS": "200"})
    assert r.exception is None or isinstance(r.exception, SystemExit), repr(r.exception)
    if r.exit_code == 0:
        return "holds"
    errors = [line for line in r.output.splitlines() if "error:" in line or "✘" in line]
    if r.exit_code == 1 and len(errors) == 1 and errors[0].startswith("error: ") and "expectation(s)" not in r.output:
        return "refuses"
    return f"fails (exit {r.exit_code}):\n" + "\n".join(errors or r.output.splitlines()[-5:])


def test_the_matrix_covers_every_builtin_scenario() -> None:
    assert {"default", "count", "grouped", "numa", "unsatisfiable"} <= set(builtin_names())


@pytest.mark.parametrize("model", MODELS)
@pytest.mark.parametrize("scenario", builtin_names())
def test_a_scenario_holds_or_refuses_for_every_model(scenario: str, model: str) -> None:
    assert _verdict(scenario, model, None) in ("holds", "refuses")


@pytest.mark.slow
@pytest.mark.parametrize("machine", OTHER_MACHINES)
@pytest.mark.parametrize("model", MODELS)
@pytest.mark.parametrize("scenario", builtin_names())
def test_a_scenario_holds_or_refuses_on_every_machine(scenario: str, model: str, machine: str) -> None:
    assert _verdict(scenario, model, machine) in ("holds", "refuses")


def test_a_scenario_runs_with_its_own_model() -> None:
    """A scenario that refuses every model would pass the matrix: each holds with its own."""
    from topodra.playground.scenario import builtin_scenario

    for name in builtin_names():
        sc = builtin_scenario(name)
        assert _verdict(name, sc.model or "cpu", None) == "holds", name


@pytest.mark.parametrize(
    ("scenario", "model"), [("default", "core"), ("default", "core-or-thread"), ("numa", "core-or-thread")]
)
def test_a_device_that_is_a_whole_core_is_expected_as_one(scenario: str, model: str) -> None:
    """The cases that failed their own expectations before: a device of these models may be a
    whole core, so the scenario states what such a claim gets (``byModel``)."""
    assert _verdict(scenario, model, None) == "holds"


@pytest.mark.parametrize(
    ("argv", "line"),
    [
        (
            ["-s", "count", "--model", "grouped"],
            "error: 'A claim for four CPUs of any kind (count)' is written for cpu or core or core-or-thread devices; "
            "its expectations do not hold with --model grouped (run it without --model, or with cpu or core or core-or-thread)",
        ),
        (
            ["-s", "grouped", "--topology", "synthetic:1s1d1n1l1c2t"],
            "error: scenario grouped needs a machine with at least 6 online CPUs (it has 2) and a NUMA node of at least 4 "
            "online CPUs (its largest has 2); synthetic:1s1d1n1l1c2t does not have it: run it without --topology "
            "(it runs on synthetic:2s1d1n1l4c2t)",
        ),
    ],
)
def test_a_refusal_is_one_line_that_says_why(argv: list[str], line: str) -> None:
    r = CliRunner().invoke(app, ["playground", *argv], env={"COLUMNS": "300"})
    assert r.exit_code == 1, r.output
    assert r.output.strip() == line
