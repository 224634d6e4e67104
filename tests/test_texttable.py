"""Tables fit the terminal without losing a value: short headers first, then wrapping between list
items (never inside a token), never an ellipsis (``topodra.texttable``, used by the playground,
``policy place|pools`` and ``dra devices``)."""

from __future__ import annotations

import re
from pathlib import Path

from hypothesis import given
from hypothesis import strategies as st
from typer.testing import CliRunner

from topodra.cli import app
from topodra.texttable import Column, render

COLUMNS = [Column("container", "ctr", breaks="/"), Column("cpus", breaks=","), Column("count", "#", right=True), Column("note", breaks=" ")]


def test_a_table_that_fits_keeps_its_headers() -> None:
    out = render(COLUMNS, [["a/b", "0-3", "4", "ok"]], 80).plain
    assert out.splitlines()[0].split() == ["container", "cpus", "count", "note"]


def test_a_narrow_table_takes_short_headers_then_wraps_between_items() -> None:
    row = ["default/inference-server/main", "0-3,8-11,16-19,24-27", "16", "degraded: spread over two nodes"]
    out = render(COLUMNS, [row], 40).plain
    lines = out.splitlines()
    assert lines[0].split() == ["ctr", "cpus", "#", "note"]
    assert all(len(line) <= 40 for line in lines), out
    body = " ".join(lines[1:])
    for token in ("default/", "inference-server/", "main", "0-3,", "8-11,", "16-19,", "24-27", "16", "degraded:", "spread"):
        assert token in body, (token, out)  # every piece whole, on some line
    assert "…" not in out


def test_a_value_that_cannot_wrap_makes_the_table_wider_rather_than_cut() -> None:
    out = render([Column("claim"), Column("x")], [["pcore-test-claim-pcores-7b2f4", "1"]], 10).plain
    assert "pcore-test-claim-pcores-7b2f4" in out


@given(
    st.lists(st.lists(st.integers(0, 300), min_size=1, max_size=12), min_size=1, max_size=6),
    st.integers(20, 120),
)
def test_every_value_reads_whole_from_its_lines(cpu_lists: list[list[int]], width: int) -> None:
    from topodra.cpuset import CPUSet

    values = [str(CPUSet(c)) for c in cpu_lists]
    cols = [Column("id"), Column("cpus", breaks=",")]
    lines = render(cols, [[f"r{i}", v] for i, v in enumerate(values)], width).plain.splitlines()[1:]
    rows: list[list[str]] = []
    for line in lines:
        if line.startswith("r"):
            rows.append([line.split(None, 1)[1]])
        else:
            rows[-1].append(line.strip())
    assert ["".join(r) for r in rows] == values
    longest = max(len(t) for v in values for t in re.findall(r"[^,]+,?", v))
    assert all(len(line) <= max(width, longest + 2 + len(f"r{len(values)}")) for line in lines)


def _run(argv: list[str], columns: int) -> str:
    r = CliRunner().invoke(app, argv, env={"COLUMNS": str(columns)})
    assert r.exit_code in (0, 1), r.output
    return r.output


def test_the_first_playground_table_at_80_columns_shows_qos_and_mems() -> None:
    out = _run(["playground"], 80)
    table = out[out.index("pod/") : out.index("✔")]
    assert all(len(line) <= 80 for line in table.splitlines()), table
    assert "…" not in out
    assert re.search(r"db/postgres\s+G\s+0-1\s+2\s+2P\s+0\s", table), table


def test_the_claim_column_at_120_columns_is_whole() -> None:
    out = _run(["playground"], 120)
    assert re.search(r"pcore-test-claim-pcores-[0-9a-f]{5}\b", out), out
    assert "…" not in out


def test_policy_place_at_80_columns_never_splits_a_cpu_range(tmp_path: Path) -> None:
    w = tmp_path / "w.yaml"
    w.write_text(
        "claims: {big-claim-for-inference: '8-11,24-27'}\n"
        "containers:\n"
        "- {name: inference-server-with-a-long-name, cpu: '8', claims: [big-claim-for-inference]}\n"
        "- {name: db, cpu: '6', memory: 1Gi}\n"
        "- {name: web, cpu: 500m}\n"
    )
    out = _run(["policy", "place", str(w), "--topology", "2s1d2n1l4c2t"], 80)
    assert all(len(line) <= 80 for line in out.splitlines()), out
    for line in out.splitlines():
        for cell in line.split():
            # a piece of a CPU list ends at a comma or is a whole range: never "2" of "24-27" etc.
            if re.fullmatch(r"[\d,-]+", cell) and cell.endswith("-"):
                raise AssertionError(f"a range was cut: {line!r}")
    assert "8-11," in out
    assert "24-27" in out
    assert "inference-server-with-a-long-name" in out
