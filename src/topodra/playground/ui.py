"""Rich rendering of the playground: the container table, step headers and check results."""

from __future__ import annotations

from rich.console import Group, RenderableType
from rich.text import Text

from topodra.playground.runner import StepResult
from topodra.playground.world import Playground
from topodra.texttable import Column, render

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


_COLUMNS = (
    Column("pod/container", "pod/ctr", breaks="/"),
    Column("QoS"),
    Column("CPUs", breaks=",", style="bold"),
    Column("#", right=True),
    Column("kinds", breaks=" "),
    Column("mems", breaks=","),
    Column("claim", breaks=","),
    Column("last change", "change", breaks=" "),
)


def container_table(pg: Playground, title: str = "", width: int = 80) -> Text:
    """Every container with its cpuset as the runtime holds it (QoS: G/Bu/BE; kinds: P-/E-cores),
    every value whole within ``width`` columns (``texttable``)."""
    rows = [
        [
            f"{row.pod.removeprefix('default/')}/{row.container}",
            _QOS.get(row.qos, row.qos),
            str(row.cpus) or "-",
            str(len(row.cpus)),
            _kinds(row.core_types),
            str(row.mems) or "-",
            row.claims or "-",
            _SOURCE.get(row.source, row.source),
        ]
        for row in pg.rows()
    ]
    if not rows:
        return Text("(no containers)")
    return render(_COLUMNS, rows, width, title)


def step_report(pg: Playground, res: StepResult, width: int = 80) -> RenderableType:
    parts: list[RenderableType] = []
    for line in res.lines:
        style = "yellow" if " pending: " in line or " failed: " in line else ""
        parts.append(Text(f"  {line}", style=style))
    parts.append(container_table(pg, width=width))
    for c in res.checks:
        parts.append(Text(f"  {'✔' if c.ok else '✘'} {c.message}", style="green" if c.ok else "bold red"))
    for problem in res.problems:
        parts.append(Text(f"  ✘ {problem}", style="bold red"))
    return Group(*parts)
