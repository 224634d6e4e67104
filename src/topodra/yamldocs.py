"""Multi-document YAML/JSON files of Kubernetes objects, with errors that say file:line:column.

Every command that reads manifests (the playground, ``sim allocate``, ``sim
replay``) reports bad YAML the same way, on one line, and knows the line each
document starts on. ``kind: List`` documents (what ``kubectl get -o yaml``
writes) are expanded into their items, in order.

Files are read with libyaml's parser where PyYAML has it, and objects are built straight from
its events (``topodra.yamlobjects``: SafeLoader's types and rules, no node tree), one document
at a time. The items of a ``kind: List`` are handed out one at a time as well, each with the
line it starts on, so a 50 MB ``kubectl get -o yaml`` is never held as one object and a bad
item fails before the rest is read. kubectl writes a List's ``kind`` after its ``items``: the
reader looks ahead in the text for the document's top-level ``kind:`` line (at the column of
its other top-level keys) and checks, when it reaches that key, that it is the line it trusted;
a document it cannot tell that way is built whole and then expanded.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from yaml.events import MappingStartEvent, SequenceEndEvent, SequenceStartEvent, StreamEndEvent

from topodra.yamlobjects import Builder, loader_for

__all__ = [
    "Document",
    "YamlFileError",
    "expand_lists",
    "iter_documents",
    "load_documents",
    "parse_documents",
    "read_text",
    "stream_files",
    "yaml_error",
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
    source: str  # file:line of the document's first line (a List's item: its own line, then items[i])
    offset: int = 0  # characters of its file read when the document was handed out


def yaml_error(err: yaml.YAMLError, source: str) -> str:
    """A parser error as one line: ``file:line:column: invalid YAML: problem``."""
    mark = getattr(err, "problem_mark", None) or getattr(err, "context_mark", None)
    problem = getattr(err, "problem", None) or str(err).splitlines()[0]
    if mark is not None:
        return f"{source}:{mark.line + 1}:{mark.column + 1}: invalid YAML: {problem}"
    return f"{source}: invalid YAML: {problem}"


_DEFAULT_TAGS = (None, "!", "tag:yaml.org,2002:map", "tag:yaml.org,2002:seq")


def iter_documents(text: str, source: str = "<input>", *, lists: bool = True) -> Iterator[Document]:
    """The non-empty documents of ``text`` (YAML or JSON) as they are read, each with the line
    it starts on; with ``lists``, a ``kind: List`` is replaced by its items."""
    loader = loader_for(text)
    b = Builder(loader)
    try:
        b.event()  # stream start
        while type(b.peek()) is not StreamEndEvent:
            b.event()  # document start
            ev = b.event()
            where = f"{source}:{ev.start_mark.line + 1}"
            if lists and type(ev) is MappingStartEvent and ev.tag in _DEFAULT_TAGS:
                yield from _root_mapping(b, ev, text, where)
            else:
                obj = b.build(ev)
                if obj is not None:
                    yield Document(obj, where, b.peek().start_mark.index)
            b.event()  # document end
            b.end_document()
    except yaml.YAMLError as err:
        raise YamlFileError(yaml_error(err, source)) from None
    finally:
        loader.dispose()


def _root_mapping(b: Builder, start: Any, text: str, where: str) -> Iterator[Document]:
    """A document's top-level mapping: a List's items one by one, anything else whole."""
    data: dict[Any, Any] = {}
    trusted: int | None = None  # the line of the List's kind (-1: read before its items)
    kind_line = -1
    source = where.rsplit(":", 1)[0]
    for key, kev, ev in b.entries(start, data):
        if key == "items" and trusted is None and type(ev) is SequenceStartEvent and ev.anchor is None and ev.tag in _DEFAULT_TAGS:
            trusted = -1 if data.get("kind") == "List" else _list_kind_line(text, kev)
            if trusted is not None:
                i = 0
                while type(sub := b.event()) is not SequenceEndEvent:
                    line = b.mark_of(sub).line + 1
                    item = b.build(sub)
                    yield Document(item, f"{source}:{line} items[{i}]", b.peek().start_mark.index)
                    i += 1
                continue
        if key == "kind":
            kind_line = kev.start_mark.line
        data[key] = b.build(ev)
    if trusted is not None:
        if data.get("kind") != "List" or (trusted >= 0 and kind_line != trusted):
            raise YamlFileError(
                f"{source}:{kind_line + 1}: the items above were read as a kind: List's (line {trusted + 1} says so), "
                f"but the document's kind is {data.get('kind')!r}"
            )
        return
    yield from expand_lists([Document(data, where, b.peek().start_mark.index)])


def _list_kind_line(text: str, items_key: Any) -> int | None:
    """The line (0-based) of the ``kind: List`` that ends the document whose ``items`` key is at
    ``items_key``'s mark: the last ``kind`` key written at that key's column before the document
    ends (YAML, or JSON as kubectl indents it); None when there is none or it is not List.
    Lines are found with ``str.rfind``: a regex anchored at every line start would try every
    character of a large file."""
    pos, column = items_key.start_mark.index, items_key.start_mark.column
    end = _document_end(text, pos)
    indent = "\n" + " " * column
    while True:
        at = max(text.rfind(indent + key, pos, end) for key in ("kind", '"kind"', "'kind'"))
        if at < 0:
            return None
        line = _KIND_LINE.match(text, at + len(indent), text.find("\n", at + 1) if text.find("\n", at + 1) >= 0 else len(text))
        if line is not None:
            break
        end = at  # "kindness:" or the like: look further up
    if line.group("v").strip("\"'") != "List":
        return None
    return text.count("\n", 0, at + 1)


_KIND_LINE = re.compile(r"(?:kind|\"kind\"|'kind')[ \t]*:[ \t]*(?P<v>[^\s#,]*)[ \t]*,?[ \t]*(?:#.*)?\r?$")


def _document_end(text: str, pos: int) -> int:
    """Where the document that ``pos`` is in ends: the next ``---`` or ``...`` line, else the text's end."""
    end = len(text)
    for marker in ("\n---", "\n..."):
        at = text.find(marker, pos, end)
        while at >= 0 and text[at + 4 : at + 5] not in ("", " ", "\t", "\r", "\n"):
            at = text.find(marker, at + 4, end)
        if at >= 0:
            end = at
    return end


def parse_documents(text: str, source: str = "<input>") -> list[Document]:
    """The non-empty documents of ``text`` (YAML or JSON), each with the line it starts on."""
    return list(iter_documents(text, source, lists=False))


def _read(path: Path) -> str:
    try:
        return read_text(path)
    except OSError as err:
        raise YamlFileError(f"cannot read {path}: {getattr(err, 'strerror', None) or err}") from None


def load_documents(path: str | Path) -> list[Document]:
    p = Path(path)
    return parse_documents(_read(p), str(p))


def stream_files(paths: Sequence[str | Path], progress: Callable[[int, int], None] | None = None) -> Iterator[Document]:
    """Every document of ``paths`` in order, Lists expanded, each read when it is asked for;
    ``progress(done, total)`` after each, in characters of all the files (about bytes)."""
    sizes = []
    for p in paths:
        try:
            sizes.append(Path(p).stat().st_size)
        except OSError:
            sizes.append(0)  # _read names the problem when the file's turn comes
    total = sum(sizes)
    before = 0
    for p, size in zip(paths, sizes, strict=True):
        for doc in iter_documents(_read(Path(p)), str(p)):
            if progress is not None:
                progress(before + doc.offset, total)
            yield doc
        before += size


def expand_lists(docs: Iterable[Document]) -> list[Document]:
    """``kind: List`` documents replaced by their items (each item keeps the List's source)."""
    out: list[Document] = []
    for d in docs:
        if isinstance(d.obj, dict) and d.obj.get("kind") == "List" and "items" in d.obj:
            items = d.obj.get("items") or []
            if not isinstance(items, list):
                raise YamlFileError(f"{d.source}: List.items is not a list")
            out.extend(Document(item, f"{d.source} items[{i}]", d.offset) for i, item in enumerate(items))
        else:
            out.append(d)
    return out
