"""``topodra playground``: the whole flow on one machine, from Kubernetes YAML."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from topodra.cli_errors import print_error

if TYPE_CHECKING:
    from rich.console import Console

    from topodra.playground.runner import StepResult
    from topodra.playground.scenario import Scenario
    from topodra.playground.world import Playground
    from topodra.topology.model import Topology

__all__ = ["register"]


def playground_command(
    files: Annotated[
        list[Path] | None,
        typer.Argument(help="Kubernetes YAML files or scenario files, run in order (default: the built-in scenario)."),
    ] = None,
    topology: Annotated[
        str | None,
        typer.Option(
            "--topology",
            "-t",
            help="A fixture name (topodra topology --list-fixtures), 'host', 'synthetic:SPEC' (e.g. synthetic:2s1d2n1l8c2t) "
            "or a sysfs root directory. Default: the scenario's, else the Intel hybrid laptop fixture.",
        ),
    ] = None,
    model: Annotated[
        str | None, typer.Option("--model", "-m", help="Device model: cpu, core, core-or-thread or grouped (default: the scenario's, else cpu).")
    ] = None,
    scenario: Annotated[str, typer.Option("--scenario", "-s", help="Built-in scenario to run when no FILES are given.")] = "default",
    list_scenarios: Annotated[bool, typer.Option("--list", help="List the built-in scenarios and exit.")] = False,
    step: Annotated[bool, typer.Option("--step", help="Wait for Enter before each step.")] = False,
    hold: Annotated[bool, typer.Option("--hold", help="Keep the node running after the last step (Ctrl-C ends).")] = False,
    verbose: Annotated[bool, typer.Option("--verbose", "-v", help="Show the agent's and the runtime's logs.")] = False,
) -> None:
    """Run topodra's agent on a simulated node with an embedded runtime, kubelet and scheduler.

    The agent is the real one: the runtime speaks NRI to it over a unix socket, the kubelet calls its DRA gRPC service, and the scheduler is the simulator's allocator. Without FILES the built-in scenario applies the upstream prototype's example (a pod claiming a P-core) next to shared workloads, then deletes it: the shared containers get the CPU back at once.
    """
    from rich.console import Console

    from topodra.extras import MissingExtra, require_extra
    from topodra.playground.scenario import ScenarioError, builtin_names, builtin_scenario, load_scenario

    console = Console()
    try:
        require_extra("sim", "playground")  # the scheduler is the simulator's allocator
    except MissingExtra as exc:
        print_error(str(exc))
        raise typer.Exit(2) from None
    if list_scenarios:
        import textwrap

        names = builtin_names()
        indent = max(map(len, names), default=0) + 2
        for name in names:
            lines = textwrap.wrap(builtin_scenario(name).title, max(20, console.width - indent)) or [""]
            console.print(f"{name:{indent}}" + ("\n" + " " * indent).join(lines), markup=False, highlight=False, soft_wrap=True)
        return
    from topodra.dra.devices import MODELS

    if model is not None and model not in MODELS:
        print_error(f"--model must be {', '.join(MODELS)}, got {model!r}")
        raise typer.Exit(2)
    try:
        scenarios = [load_scenario(f) for f in files] if files else [builtin_scenario(scenario)]
    except ScenarioError as exc:
        print_error(str(exc))
        raise typer.Exit(2) from None
    logging.basicConfig(level=logging.INFO if verbose else logging.ERROR, format="%(levelname)s %(name)s: %(message)s")
    ok = asyncio.run(_run(console, scenarios, topology, model, step, hold))
    raise typer.Exit(0 if ok else 1)


async def _run(console: object, scenarios: Sequence[object], topology: str | None, model: str | None, step: bool, hold: bool) -> bool:
    from rich.console import Console
    from rich.rule import Rule

    from topodra.playground.runner import run_scenario
    from topodra.playground.scenario import Scenario, Step
    from topodra.playground.ui import step_report
    from topodra.playground.world import Playground, PlaygroundError

    assert isinstance(console, Console)
    all_ok = True
    for sc in scenarios:
        assert isinstance(sc, Scenario)
        chosen_model = model or sc.model or "cpu"
        refused = sc.unmet_model(chosen_model)
        if refused is not None:
            print_error(refused)
            return False
        machine = _scenario_machine(console, sc, topology)
        if machine is None:
            return False
        topo, label = machine
        console.print(Rule(f"[bold]{sc.title}"))
        console.print(
            f"node [bold]playground[/bold]: {label}, {len(topo.cpus)} CPUs"
            + (f" ({', '.join(f'{len(topo.cpus_of_type(t))} {t.value}' for t in topo.core_types())})")
            + f", device model [bold]{chosen_model}[/bold]",
            highlight=False,
        )

        async def before(i: int, s: Step) -> None:
            console.print(f"\n[bold cyan]step {i}[/bold cyan] {s.title}", highlight=False)
            if step:
                await asyncio.to_thread(input, "  press Enter to run it ")

        async def after(res: StepResult) -> None:
            console.print(step_report(pg, res, console.width))

        try:
            async with Playground(topology=topo, model=chosen_model, group_by=sc.group_by, gates=sc.gates, gpus=sc.gpus) as pg:
                console.print(f"  {pg.log.lines[0]}" if pg.log.lines else "", highlight=False)
                results = await run_scenario(pg, sc, before_step=before, after_step=after)
                ok = all(r.ok for r in results)
                all_ok &= ok
                _print_expectations(console, results, ok)
                if hold:
                    await _hold(console, pg)
        except PlaygroundError as exc:
            print_error(str(exc))
            return False
        except (KeyboardInterrupt, asyncio.CancelledError):
            return all_ok
    return all_ok


def _scenario_machine(console: Console, sc: Scenario, topology: str | None) -> tuple[Topology, str] | None:
    """The machine a scenario runs on and its label; None (the error printed) when it cannot
    be read, when --topology overrides a scenario that expects exact CPUs, or when it lacks
    what the scenario needs."""
    from topodra.playground.runner import resolve_topology
    from topodra.playground.world import PlaygroundError

    try:
        topo, label = resolve_topology(topology or sc.topology)
    except (PlaygroundError, ValueError, OSError) as exc:
        print_error(str(exc))
        return None
    unmet = sc.unmet(topo)
    exact = any(c.cpus is not None for st in sc.steps for c in st.expect)
    if exact and topology and sc.topology and topology != sc.topology:
        print_error(f"scenario {sc.name} expects exact CPUs of {sc.topology}; run it without --topology")
        return None
    if unmet:
        hint = (
            f"run it without --topology (it runs on {sc.topology})"
            if topology and sc.topology
            else f"try --topology {_suggestion(sc)} or your own scenario file"
        )
        print_error(f"scenario {sc.name} needs a machine with {unmet}; {label} does not have it: {hint}")
        return None
    if sc.isolate:
        topo = sc.machine(topo)
        label += f", CPUs {topo.isolated} isolated"
    return topo, label


def _suggestion(sc: Scenario) -> str:
    """A machine to try instead, for what the scenario requires."""
    if sc.min_gpus:
        return "synthetic:2s1d1n1l4c2t+pci (a PCIe root per socket)"
    return "synthetic:1s1d1n1l6c2t8e (a hybrid laptop)"


def _print_expectations(console: Console, results: Sequence[StepResult], ok: bool) -> None:
    """How many of the scenario's expectations held (nothing when it has none)."""
    checks = sum(len(r.checks) for r in results)
    problems = sum(len(r.problems) for r in results)
    if problems:
        console.print(f"\n[red]{problems} problem(s) no expectation asked for (see ✘ above)[/]")
    if checks:
        failed = sum(1 for r in results for c in r.checks if not c.ok)
        ok = failed == 0
        console.print(
            f"\n{'[green]all' if ok else '[red]' + str(failed) + ' of'} {checks} expectation(s) "
            f"{'held' if ok else 'failed'}[/]"
        )


async def _hold(console: Console, pg: Playground) -> None:
    """Keep the node running with a live container table until Ctrl-C."""
    from rich.console import Group
    from rich.live import Live
    from rich.text import Text

    from topodra.playground.follower import PodFollower
    from topodra.playground.ui import container_table

    for what, where in pg.endpoints():
        console.print(f"  {what + ':':19} {where}", highlight=False, soft_wrap=True)
    console.print("[dim]node running: pods applied with kubectl are scheduled and started, deleted ones stopped; Ctrl-C ends[/dim]")
    follower = PodFollower(pg)
    task = asyncio.create_task(follower.run())

    def view() -> Group:
        return Group(container_table(pg, width=console.width), *(Text(f"  {line}") for line in follower.lines[-5:]))

    try:
        with Live(view(), console=console, refresh_per_second=4) as live:
            while not task.done():
                await asyncio.sleep(0.25)
                live.update(view())
        task.result()  # the follower's failure, if it ended
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


def register(app: typer.Typer) -> None:
    app.command("playground")(playground_command)
