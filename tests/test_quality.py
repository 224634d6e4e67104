"""ruff and mypy --strict run as part of the suite (scripts/test runs them first too)."""

from __future__ import annotations

import ast
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


SRC = ROOT / "src" / "topodra"

#: (file under src/topodra, construct) kept on purpose, each with its reason.
ALLOWED: dict[tuple[str, str], str] = {
    ("faults.py", "os._exit"): "a crash point kills the process as abruptly as SIGKILL, by design",
    ("sim/run.py", "gc.freeze"): "the built cluster frozen for the run: measured >= 10 % of a large sim run (docs/simulator.md)",
}


def _imported_names(tree: ast.Module) -> dict[str, str]:
    """Names bound by imports of modules outside topodra -> the module they come from."""
    names: dict[str, str] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.split(".")[0] != "topodra":
                    names[alias.asname or alias.name.split(".")[0]] = alias.name
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module and node.module.split(".")[0] != "topodra":
            for alias in node.names:
                names[alias.asname or alias.name] = node.module
    return names


def _root_name(node: ast.expr) -> str | None:
    while isinstance(node, ast.Attribute):
        node = node.value
    return node.id if isinstance(node, ast.Name) else None


def _patches(tree: ast.Module) -> list[tuple[int, str]]:
    """Assignments (``x.attr = ...``, ``del``, ``setattr``/``delattr``) to an attribute of an
    imported library: a private one of any module, any one of a third-party module."""
    imported = _imported_names(tree)

    def foreign(target: ast.expr, attr: str) -> bool:
        name = _root_name(target)
        if name not in imported:
            return False
        third_party = imported[name].split(".")[0] not in sys.stdlib_module_names
        return third_party or (attr.startswith("_") and not attr.startswith("__"))

    found: list[tuple[int, str]] = []
    for node in ast.walk(tree):
        targets: list[ast.expr] = []
        if isinstance(node, (ast.Assign, ast.Delete)):
            targets = list(node.targets)
        elif isinstance(node, (ast.AugAssign, ast.AnnAssign)):
            targets = [node.target]
        for target in targets:
            if isinstance(target, ast.Attribute) and foreign(target.value, target.attr):
                found.append((target.lineno, ast.unparse(target)))
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Name)
            and node.func.id in ("setattr", "delattr")
            and len(node.args) >= 2
            and isinstance(node.args[1], ast.Constant)
            and isinstance(node.args[1].value, str)
            and foreign(node.args[0], node.args[1].value)
        ):
            found.append((node.lineno, ast.unparse(node)))
    return found


def test_no_interpreter_tricks_in_src() -> None:
    """No ``exec``, no ``gc.freeze``, no ``os._exit`` and no patching of a library's attributes
    in src/ (the developers' guide), except the reasoned entries of ``ALLOWED``."""
    found: list[str] = []
    used: set[tuple[str, str]] = set()
    for path in sorted(SRC.rglob("*.py")):
        rel = path.relative_to(SRC).as_posix()
        tree = ast.parse(path.read_text(), str(path))
        for node in ast.walk(tree):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "exec":
                hit = ("exec", node.lineno)
            elif isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name):
                hit = (f"{node.value.id}.{node.attr}", node.lineno)
            else:
                continue
            construct, line = hit
            if construct not in ("exec", "gc.freeze", "os._exit"):
                continue
            if (rel, construct) in ALLOWED:
                used.add((rel, construct))
            else:
                found.append(f"{rel}:{line}: {construct}")
        found += [f"{rel}:{line}: assigns {what}" for line, what in _patches(tree)]
    assert found == [], "\n".join(found)
    assert used == set(ALLOWED), f"allowed but gone (drop them from ALLOWED): {sorted(set(ALLOWED) - used)}"


def test_the_trick_check_sees_what_it_bans() -> None:
    """The patch finder flags a library's private and third-party attributes, not ours."""
    source = (
        "import os\nimport typer\nfrom typer import core\nfrom topodra import cli\n"
        "os._exit = None\ntyper.echo = print\nsetattr(core, 'build_runtime_param', len)\n"
        "os.environ = {}\ncli._thing = 1\nos.__doc__ = ''\n"
    )
    assert [line for line, _ in _patches(ast.parse(source))] == [5, 6, 7]


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


#: The size rules of the codebase: a function fits on a screen, a class has one job.
MAX_FUNCTION_LINES = 80
MAX_CLASS_METHODS = 25


def test_functions_fit_on_a_screen_and_classes_have_few_methods() -> None:
    too_big: list[str] = []
    for path in sorted((ROOT / "src" / "topodra").rglob("*.py")):
        if path.name.endswith(("_pb2.py", "_pb2_grpc.py")):
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            where = f"{path.relative_to(ROOT)}:{getattr(node, 'lineno', 0)}"
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                lines = (node.end_lineno or node.lineno) - node.lineno + 1
                if lines > MAX_FUNCTION_LINES:
                    too_big.append(f"{where} {node.name}: {lines} lines")
            elif isinstance(node, ast.ClassDef):
                methods = sum(isinstance(b, ast.FunctionDef | ast.AsyncFunctionDef) for b in node.body)
                if methods > MAX_CLASS_METHODS:
                    too_big.append(f"{where} class {node.name}: {methods} methods")
    assert too_big == [], "\n".join(too_big)
