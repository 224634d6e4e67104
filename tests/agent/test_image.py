"""The container image: a pinned base, a build context of exactly what the Dockerfile copies, and
manifests, chart and docs that name the image the build produces."""

from __future__ import annotations

import fnmatch
import re
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
DOCKERFILE = ROOT / "Dockerfile"


def _base_images() -> list[str]:
    text = DOCKERFILE.read_text()
    args = dict(re.findall(r"^ARG (\w+)=(\S+)$", text, re.M))
    bases = []
    for ref in re.findall(r"^FROM (\S+)", text, re.M):
        bases.append(re.sub(r"\$\{(\w+)\}", lambda m: args[m.group(1)], ref))
    return bases


def _copied_sources() -> set[str]:
    """The paths of the build context that the Dockerfile copies (COPY without --from)."""
    out: set[str] = set()
    for line in DOCKERFILE.read_text().splitlines():
        words = line.split()
        if words[:1] == ["COPY"] and not any(w.startswith("--from") for w in words):
            out.update(w.rstrip("/") for w in words[1:-1])
    return out


def _in_context(path: str) -> bool:
    """Docker's rule for .dockerignore: the last pattern matching the path (or a parent of it) wins;
    a pattern starting with ! re-includes."""
    parts = path.split("/")
    candidates = ["/".join(parts[: i + 1]) for i in range(len(parts))]
    included = True
    for raw in (ROOT / ".dockerignore").read_text().splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        negate = line.startswith("!")
        pattern = line.lstrip("!").rstrip("/")
        if pattern.startswith("**/"):
            hit = any(fnmatch.fnmatch(c.split("/")[-1], pattern[3:]) for c in candidates)
        else:
            hit = any(fnmatch.fnmatch(c, pattern) for c in candidates)
        if hit:
            included = negate
    return included


def test_every_base_image_is_pinned_to_a_python_and_a_debian_release() -> None:
    bases = _base_images()
    assert bases
    for base in bases:
        assert re.fullmatch(r"python:3\.11\.\d+-slim-[a-z]+(@sha256:[0-9a-f]{64})?", base), base


def test_the_build_context_is_exactly_what_the_dockerfile_copies() -> None:
    copied = _copied_sources()
    assert copied == {"pyproject.toml", "README.md", "src"}
    for path in copied:
        assert _in_context(path), path
    for path in (".venv/bin/python", ".git/HEAD", "tests/data/README.md", "benchmarks/__init__.py",
                 "src/topodra/__pycache__/x.pyc", "docs/index.md"):
        assert not _in_context(path), path


def test_the_manifests_and_chart_name_the_image_of_this_version() -> None:
    version = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
    chart = yaml.safe_load((ROOT / "deploy" / "helm" / "topodra" / "Chart.yaml").read_text())
    assert chart["appVersion"] == version
    images = re.findall(r"image: (\S+)", (ROOT / "deploy" / "manifests" / "topodra.yaml").read_text())
    assert images
    assert all(i.endswith(f":{version}") for i in images)
    assert f"topodra:{version}" in (ROOT / "docs" / "deploy.md").read_text()


def test_the_walkthrough_uses_files_and_names_that_exist() -> None:
    text = (ROOT / "docs" / "deploy.md").read_text()
    for path in re.findall(r"(?:examples|deploy)/[\w./-]+", text):
        assert (ROOT / path.rstrip(".")).exists(), path
    pods = {d["metadata"]["name"] for d in yaml.safe_load_all((ROOT / "examples" / "upstream-prototype.yaml").read_text())
            if d and d.get("kind") == "Pod"}
    assert "pcore-test" in pods
    assert "pod/pcore-test" in text
    assert "cpuManagerPolicy: none" in text


@pytest.mark.slow
def test_the_package_builds_from_the_image_context_alone(tmp_path: Path) -> None:
    for path in _copied_sources():
        src = ROOT / path
        if src.is_dir():
            shutil.copytree(src, tmp_path / path, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
        else:
            shutil.copy(src, tmp_path / path)
    r = subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation",
                        "-w", str(tmp_path / "wheels"), str(tmp_path)], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    assert list((tmp_path / "wheels").glob("topodra-*.whl"))
