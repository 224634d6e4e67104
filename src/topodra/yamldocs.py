"""Multi-document YAML/JSON files of Kubernetes objects, with errors that say file:line:column.

Every command that reads manifests (the playground, ``sim allocate``, ``sim
replay``) reports bad YAML the same way, on one line, and knows the line each
document starts on. ``kind: List`` documents (what ``kubectl get -o yaml``
writes) are expanded into their items, in order.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

__all__ = [
    "Document", "YamlFileError", "expand_lists", "load_documents", "parse_documents", "read_text", "yaml_error",
]


def read_text(path: str | Path) -> str:
    """A text file's contents. A file that is not UTF-8 (a binary file given by mistake) raises
    OSError, like a file that cannot be read, so that every caller's one-line error names it."""
    try:
        return Path(path).read_text()
    except UnicodeDecodeError as err:
        raise OSError(f"not a text file (byte {err.start} is not UTF-8)") from None


class YamlFileError(ValueError):
    """A file that cannot be read or parsed; the message is one line naming file:line:column."""


@dataclass(frozen=True)
class Document:
    obj: Any
    source: str  # file:line of the document's first line


def yaml_error(err: yaml.YAMLError, source: str) -> str:
    """A parser error as one line: ``file:line:column: invalid YAML: problem``."""
    mark = getattr(err, "problem_mark", None) or getattr(err, "context_mark", None)
    problem = getattr(err, "problem", None) or str(err).splitlines()[0]
    if mark is not None:
        return f"{source}:{mark.line + 1}:{mark.column + 1}: invalid YAML: {problem}"
    return f"{source}: invalid YAML: {problem}"


def parse_documents(text: str, source: str = "<input>") -> list[Document]:
    """The non-empty documents of ``text`` (YAML or JSON), each with the line it starts on."""
    try:
        nodes = list(yaml.compose_all(text, Loader=yaml.SafeLoader))
    except yaml.YAMLError as err:
        raise YamlFileError(yaml_error(err, source)) from None
    out: list[Document] = []
    for node in nodes:
        if node is None:
            continue
        try:
            obj = yaml.safe_load(yaml.serialize(node))
        except yaml.YAMLError as err:  # pragma: no cover - composed nodes always construct
            raise YamlFileError(yaml_error(err, source)) from None
        if obj is not None:
            out.append(Document(obj, f"{source}:{node.start_mark.line + 1}"))
    return out


def load_documents(path: str | Path) -> list[Document]:
    p = Path(path)
    try:
        text = read_text(p)
    except OSError as err:
        raise YamlFileError(f"cannot read {p}: {getattr(err, 'strerror', None) or err}") from None
    return parse_documents(text, str(p))


def expand_lists(docs: Iterable[Document]) -> list[Document]:
    """``kind: List`` documents replaced by their items (each item keeps the List's source)."""
    out: list[Document] = []
    for d in docs:
        if isinstance(d.obj, dict) and d.obj.get("kind") == "List" and "items" in d.obj:
            items = d.obj.get("items") or []
            if not isinstance(items, list):
                raise YamlFileError(f"{d.source}: List.items is not a list")
            out.extend(Document(item, f"{d.source} items[{i}]") for i, item in enumerate(items))
        else:
            out.append(d)
    return out
