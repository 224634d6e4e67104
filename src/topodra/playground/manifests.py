"""Kubernetes YAML in, objects out, with errors that name the file and line."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from topodra.yamldocs import read_text
from topodra.yamldocs import yaml_error as _yaml_error

__all__ = ["Manifest", "ManifestError", "load_manifests", "parse_manifests"]


class ManifestError(ValueError):
    """Bad YAML or a document that is not a Kubernetes object; says file:line."""


@dataclass(frozen=True)
class Manifest:
    obj: dict[str, Any]
    source: str  # file:line of the document's first line

    @property
    def kind(self) -> str:
        return str(self.obj.get("kind", ""))

    @property
    def name(self) -> str:
        return str((self.obj.get("metadata") or {}).get("name", ""))


def parse_manifests(text: str, source: str = "<input>") -> list[Manifest]:
    """Every non-empty document of a multi-document YAML text, checked to be an object with
    ``apiVersion``, ``kind`` and ``metadata.name``."""
    out: list[Manifest] = []
    try:
        nodes = list(yaml.compose_all(text, Loader=yaml.SafeLoader))
    except yaml.YAMLError as err:
        raise ManifestError(_yaml_error(err, source)) from None
    for node in nodes:
        if node is None:
            continue
        line = node.start_mark.line + 1
        where = f"{source}:{line}"
        try:
            obj = yaml.safe_load(yaml.serialize(node))
        except yaml.YAMLError as err:  # pragma: no cover - composed nodes always construct
            raise ManifestError(_yaml_error(err, source)) from None
        if obj is None:
            continue
        if not isinstance(obj, dict):
            raise ManifestError(f"{where}: expected a Kubernetes object (a mapping), got {type(obj).__name__}")
        for key in ("apiVersion", "kind"):
            if not isinstance(obj.get(key), str) or not obj[key]:
                raise ManifestError(f"{where}: the object has no {key}")
        meta = obj.get("metadata")
        if not isinstance(meta, dict) or not isinstance(meta.get("name"), str) or not meta["name"]:
            raise ManifestError(f"{where}: {obj['kind']} has no metadata.name")
        out.append(Manifest(obj, where))
    return out


def load_manifests(path: str | Path) -> list[Manifest]:
    p = Path(path)
    try:
        text = read_text(p)
    except OSError as err:
        raise ManifestError(f"cannot read {p}: {err.strerror or err}") from None
    return parse_manifests(text, str(p))

