"""Rich rendering of the playground: the container table, step headers and check results."""

from __future__ import annotations

from rich.console import Group, RenderableType
from rich.table import Table
from rich.text import Text

from topodra.playground.runner import StepResult
from topodra.playground.world import Playground

__all__ = ["container_table", "step_report"]

_SOURCE = {
    "adjustment": "created",
    "update": "event reply",
    "unsolicited": "pushed at once",
    "synchronize": "synchronize",
}
_QOS = {"Guaranteed": "G", "Burstable": "Bu", "BestEffort": "BE"}


def _kinds(text: str) -> str:
    # "8 E-core 10 P-core" -> "10P 8E"
    parts = text.split()
    pairs = [(parts[i + 1][0], parts[i]) for i in range(0, len(parts) - 1, 2)]
    return " ".join(f"{n}{k}" for k, n in sorted(pairs, key=lambda p: p[0] != "P")) or "-"


def container_table(pg: Playground, title: str = "") -> Table:
    """Every container with its cpuset as the runtime holds it (QoS: G/Bu/BE; kinds: P-/E-cores)."""
    table = Table(title=title or None, title_justify="left", expand=False, pad_edge=False, box=None)
    table.add_column("pod/container", no_wrap=True)
    table.add_column("QoS")
    table.add_column("CPUs", style="bold", no_wrap=True)
    table.add_column("#", justify="right")
    table.add_column("kinds", no_wrap=True)
    table.add_column("mems")
    table.add_column("claim", overflow="ellipsis", max_width=14, no_wrap=True)
    table.add_column("last change", no_wrap=True)
    for row in pg.rows():
        src = _SOURCE.get(row.source, row.source)
        table.add_row(
            f"{row.pod.removeprefix('default/')}/{row.container}",
            _QOS.get(row.qos, row.qos),
            str(row.cpus) or "-",
            str(len(row.cpus)),
            _kinds(row.core_types),
            str(row.mems) or "-",
            row.claims or "-",
            Text(src, style="green" if row.source == "unsolicited" else "dim"),
        )
    if not table.rows:
        table.add_row("(no containers)", "", "", "", "", "", "", "")
    return table


def step_report(pg: Playground, res: StepResult) -> RenderableType:
    parts: list[RenderableType] = []
    for line in res.lines:
        style = "yellow" if " pending: " in line or " failed: " in line else ""
        parts.append(Text(f"  {line}", style=style))
    parts.append(container_table(pg))
    for c in res.checks:
        parts.append(Text(f"  {'✔' if c.ok else '✘'} {c.message}", style="green" if c.ok else "bold red"))
    for problem in res.problems:
        parts.append(Text(f"  ✘ {problem}", style="bold red"))
    return Group(*parts)
