"""The node agent ships lean: its import closure holds no double, simulator or plotting module."""

from __future__ import annotations

import ast
import json
import os
import subprocess
import sys
from pathlib import Path

SRC = Path(__file__).resolve().parents[2] / "src"
AGENT = SRC / "topodra" / "agent"
#: What must never run on a node: test oracles and the test kit, the playground's embedded peers,
#: the simulator, the playground, and the simulator's heavy dependencies (extras, not installed
#: in the image).
FORBIDDEN = ("testkit", "topodra.embedded", "topodra.sim", "topodra.playground",
             "numpy", "matplotlib", "cel_expr_python", "celpy", "cel")


def _module_file(name: str) -> Path | None:
    base = SRC.joinpath(*name.split("."))
    for cand in (base.with_suffix(".py"), base / "__init__.py"):
        if cand.is_file():
            return cand
    return None


def _top_level_imports(path: Path, name: str) -> set[str]:
    """Modules imported at module level (what importing ``name`` runs), incl. under ``if``/``try``."""
    tree = ast.parse(path.read_text())
    out: set[str] = set()
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]

    def visit(body: list[ast.stmt]) -> None:
        for node in body:
            if isinstance(node, ast.Import):
                out.update(a.name for a in node.names)
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    parts = package.split(".")
                    base = ".".join(parts[: len(parts) - node.level + 1] + ([base] if base else []))
                out.add(base)
                out.update(f"{base}.{a.name}" for a in node.names)
            elif isinstance(node, ast.If) and not (
                isinstance(node.test, ast.Name) and node.test.id == "TYPE_CHECKING"
            ):
                visit(node.body)
                visit(node.orelse)
            elif isinstance(node, ast.Try):
                visit(node.body)
                for h in node.handlers:
                    visit(h.body)

    visit(tree.body)
    return out


def _closure(roots: list[str]) -> set[str]:
    seen: set[str] = set()
    todo = list(roots)
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        seen.add(name)
        if not name.startswith("topodra"):
            continue
        # importing a.b.c imports a and a.b first
        parts = name.split(".")
        todo.extend(".".join(parts[:i]) for i in range(1, len(parts)))
        path = _module_file(name)
        if path is not None:
            todo.extend(_top_level_imports(path, name))
    return seen


def test_static_closure_of_the_agent_is_lean() -> None:
    roots = [f"topodra.agent.{p.stem}" for p in AGENT.glob("*.py") if p.stem != "__init__"]
    closure = _closure(roots)
    bad = sorted(m for m in closure if any(m == f or m.startswith(f + ".") for f in FORBIDDEN))
    assert not bad, f"the agent imports {bad}"


def test_running_agent_code_loads_no_forbidden_module(tmp_path: Path) -> None:
    """What a started agent really loads: its modules, its CLI, and reading a (synthetic) machine."""
    code = (
        "import sys, json\n"
        "import topodra.cli\n"
        "from topodra.agent import agent, config\n"
        "agent.load_topology(config.AgentConfig(topology='synthetic:2s1d1n1l4c2t'))\n"
        "print(json.dumps(sorted(sys.modules)))\n"
    )
    env = {**os.environ, "PYTHONPATH": str(SRC)}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=60, check=True)
    loaded = json.loads(out.stdout)
    bad = sorted(m for m in loaded if any(m == f or m.startswith(f + ".") for f in FORBIDDEN))
    assert not bad, f"a running agent loads {bad}"
