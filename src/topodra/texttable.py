"""The one table layout for what people read in a terminal: every value whole, within the width.

A table wider than the terminal first takes each column's short header, then wraps the widest
values, only after the characters a column allows (``,`` in CPU lists and claim lists, ``/`` in
pod/container names, spaces in text), never inside a token; a value is never cut or replaced by
an ellipsis. When even that does not fit, the table is wider than the terminal rather than lossy.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from rich.text import Text

__all__ = ["Column", "render"]

_GAP = "  "


@dataclass(frozen=True)
class Column:
    name: str
    short: str = ""  # the header when the table must be narrower (default: the name)
    right: bool = False  # right-aligned (numbers)
    breaks: str = ""  # characters after which a value may continue on the next line
    style: str = ""  # rich style of the values


def _tokens(value: str, breaks: str) -> list[str]:
    """``value`` in the pieces a line may end after (each keeps its break character)."""
    out: list[str] = []
    start = 0
    for i, ch in enumerate(value):
        if ch in breaks:
            out.append(value[start : i + 1])
            start = i + 1
    if start < len(value) or not out:
        out.append(value[start:])
    return out


def _wrap(value: str, breaks: str, width: int) -> list[str]:
    lines: list[str] = []
    line = ""
    for token in _tokens(value, breaks):
        if line and len((line + token).rstrip()) > width:
            lines.append(line.rstrip())
            line = token.lstrip()
        else:
            line += token
    lines.append(line.rstrip())
    return lines


def _widths(columns: Sequence[Column], rows: Sequence[Sequence[str]], headers: list[str], width: int) -> list[int]:
    natural = [max([len(h), *(len(r[i]) for r in rows)]) for i, h in enumerate(headers)]
    least = [
        max([len(h), *(len(t.rstrip()) for r in rows for t in _tokens(r[i], c.breaks))])
        for i, (c, h) in enumerate(zip(columns, headers, strict=True))
    ]
    widths = list(natural)
    excess = sum(widths) + len(_GAP) * (len(widths) - 1) - width
    while excess > 0:
        slack = [w - m for w, m in zip(widths, least, strict=True)]
        i = max(range(len(widths)), key=lambda k: (slack[k], widths[k]))
        if slack[i] <= 0:
            break  # nothing wraps any further: wider than the terminal, but whole
        widths[i] -= 1
        excess -= 1
    return widths


def render(columns: Sequence[Column], rows: Sequence[Sequence[str]], width: int, title: str = "") -> Text:
    """``rows`` (strings, one per column) as a table of at most ``width`` columns when it fits."""
    headers = [c.name for c in columns]
    total = sum(max([len(h), *(len(r[i]) for r in rows)]) for i, h in enumerate(headers)) + len(_GAP) * (len(headers) - 1)
    if total > width:
        headers = [c.short or c.name for c in columns]
    widths = _widths(columns, rows, headers, width)
    out = Text()
    if title:
        out.append(title + "\n", style="bold")
    out.append(_GAP.join(h.rjust(w) if c.right else h.ljust(w) for c, h, w in zip(columns, headers, widths, strict=True)).rstrip() + "\n", style="bold")
    for row in rows:
        cells = [_wrap(v, c.breaks, w) for c, v, w in zip(columns, row, widths, strict=True)]
        for k in range(max(len(c) for c in cells)):
            line = Text()
            for i, (c, w) in enumerate(zip(columns, widths, strict=True)):
                part = cells[i][k] if k < len(cells[i]) else ""
                if i:
                    line.append(_GAP)
                line.append(part.rjust(w) if c.right else part.ljust(w), style=c.style)
            line.rstrip()
            out.append_text(line)
            out.append("\n")
    out.rstrip()
    return out
