"""YAML read from parser events (``yamlobjects``) builds what SafeLoader builds, fails where it
fails, and hands out a ``kind: List``'s items one at a time (``yamldocs``)."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from topodra.yamldocs import YamlFileError, iter_documents, load_documents, parse_documents, stream_files
from topodra.yamlobjects import Builder

C_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)

VALID = [
    "a: 1\nb: [1, 2.5, true, null, x]\nc: {d: e}\n",
    "a: ! 12\nb: !!str 12\nc: '12'\nd: \"12\"\ne: 12\n",
    "n: null\nN: Null\nt: True\nf: off\ny: yes\ne:\nq: ''\nt2: ~\n",
    "a: 0x1f\nb: 1_000\nc: 0o17\nd: 017\ne: 1:30\nf: -1\ng: +2\nh: -.5\ni: 1e3\nj: 1.0e+3\nk: .inf\nl: -.Inf\n",
    "a: 2001-12-14\nb: 2001-12-14T21:59:43.10-05:00\nc: '2001-12-14'\n",
    "a: !!binary aGVsbG8=\nb: !!float 1\nc: !!timestamp 2001-01-01\nd: !!bool yes\ne: !!null ''\nf: !!str\n",
    "x: !!set {a: 1, b}\ny: !!omap [a: 1, b: 2]\nz: !!pairs [a: 1, a: 2]\n",
    "- &a x\n- *a\n- &m {k: [1, 2]}\n- *m\n",
    "a: &x {b: 1}\nc: {<<: *x, d: 2}\ne: {z: 0, <<: {z: 1, w: 2}}\n",
    "a: &a {x: 1}\nb: &b {y: 2, x: 3}\nc:\n  <<: [*a, *b]\n  z: 4\n",
    "=: 1\n? a\n? b\n",
    "--- |\n  text\n  more\n--- >\n  folded\n  text\n",
    "---\n---\na: 1\n...\n---\n# only a comment\n",
    '{"a": [1, 2.5, true, null, "x"], "b": {"c": "d"}}',
    "a: 'it''s'\nb: \"tab\\there\\u00e9\"\nc: plain text, with a # not comment\n",
    "apiVersion: v1\nkind: List\nitems:\n- a: 1\n- b: 2\n",
    "a: [a, b, {c: d}]\nb: ''\nc: \"\"\nd:\n  - - 1\n    - 2\n  - []\n  - {}\n",
]

INVALID = [
    "kind: Pod\nmetadata:\n  name: [unclosed\n",
    "a: b\n c: d\n",
    "a: 'x\n",
    "- a\nb: c\n",
    "a: *nope\n",
    "a: &x 1\nb: &x 2\n",
    "a:\n\tb: 1\n",
    "key: value: other\n",
    "a: b\n---\nc: [1,\n",
    "x: !foo 1\n",
    "? [1]\n: 2\n",
    "<<: 1\n",
    "a: <<\n",
    "a: =\n",
    "x: !!omap [1]\n",
    "x: !!omap [{a: 1, b: 2}]\n",
    "x: !!map [1]\n",
    "x: !!seq {a: 1}\n",
    "a: !Foo {b: 1}\n",
    "a: !!int {b: 1}\n",
    "c:\n  <<: [{x: 1}, 5]\n",
    "x: &a 1\n---\ny: *a\n",
    'a: "\\q"\n',
]


def _same(a: Any, b: Any) -> bool:
    """Equal, NaN included."""
    if isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b):
        return True
    if isinstance(a, dict) and isinstance(b, dict):
        return list(a) == list(b) and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b, strict=True))
    return type(a) is type(b) and a == b


def _theirs(text: str, loader: Any = C_LOADER) -> list[Any]:
    return [d for d in yaml.load_all(text, Loader=loader) if d is not None]


def _events_of(text: str, loader: Any) -> list[Any]:
    """Every non-empty document of ``text`` built by ``Builder`` over ``loader``'s parser."""
    ld = loader(text)
    b, out = Builder(ld), []
    b.event()
    while not isinstance(b.peek(), yaml.StreamEndEvent):
        b.event()
        value = b.build(b.event())
        if value is not None:
            out.append(value)
        b.event()
        b.end_document()
    return out


@pytest.mark.parametrize("text", VALID)
def test_values_are_the_ones_safeloader_builds(text: str) -> None:
    assert _same([d.obj for d in parse_documents(text)], _theirs(text))
    # and over PyYAML's own parser, where libyaml is missing
    assert _same(_events_of(text, yaml.SafeLoader), _theirs(text, yaml.SafeLoader))


def test_an_alias_shares_the_anchored_object_and_a_merge_overrides_in_order() -> None:
    [doc] = parse_documents("a: &m {k: [1]}\nb: *m\nc:\n  <<: [{x: 1, y: 1}, {x: 2, z: 2}]\n  y: 0\n")
    assert doc.obj["a"] is doc.obj["b"]
    assert doc.obj["c"] == {"x": 1, "y": 0, "z": 2}


def _position(err: yaml.YAMLError) -> str:
    mark = getattr(err, "problem_mark", None) or getattr(err, "context_mark", None)
    assert mark is not None
    return f"{mark.line + 1}:{mark.column + 1}"


@pytest.mark.parametrize("text", INVALID)
def test_bad_yaml_fails_at_the_position_safeloader_names_on_one_line(text: str) -> None:
    with pytest.raises(yaml.YAMLError) as theirs:
        _theirs(text)
    with pytest.raises(YamlFileError) as mine:
        parse_documents(text, "f.yaml")
    message = str(mine.value)
    assert message.startswith(f"f.yaml:{_position(theirs.value)}: invalid YAML: "), message
    assert "\n" not in message


def test_a_constructor_error_safeloader_lets_through_is_one_line_too() -> None:
    with pytest.raises(ValueError):  # noqa: PT011 - SafeLoader's own, untyped
        yaml.load("x: !!int abc\n", Loader=C_LOADER)
    with pytest.raises(YamlFileError, match=r"^f\.yaml:1:4: invalid YAML: cannot construct tag:yaml\.org,2002:int"):
        parse_documents("x: !!int abc\n", "f.yaml")


_SCALARS = st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=12) | st.sampled_from(
    ["1", "yes", "No", "~", "null", "2001-01-01", "<<", "=", "0x1f", "1:30", ".inf", "- x", "a: b", "#", "'", '"', "", " lead", "trail "]
)
_DATA = st.recursive(_SCALARS, lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8) | st.integers(), inner, max_size=4), max_leaves=20)


@settings(max_examples=200, deadline=None)
@given(st.lists(_DATA, min_size=1, max_size=3), st.sampled_from([False, True, None]), st.booleans())
def test_dumped_data_reads_back_as_safeloader_reads_it(docs: list[Any], flow: bool | None, start: bool) -> None:
    text = yaml.safe_dump_all(docs, default_flow_style=flow, explicit_start=start)
    assert _same([d.obj for d in parse_documents(text)], _theirs(text))


# ---- kind: List


def _kubectl_list(items: list[dict[str, Any]]) -> str:
    return yaml.safe_dump({"apiVersion": "v1", "items": items, "kind": "List", "metadata": {"resourceVersion": ""}})


PODS = [{"apiVersion": "v1", "kind": "Pod", "metadata": {"name": f"p{i}"}} for i in range(3)]


def test_list_items_come_one_by_one_each_with_its_own_line_before_the_rest_is_read() -> None:
    text = _kubectl_list(PODS) + "---\nbroken: [\n"
    docs = iter_documents(text, "dump.yaml")
    first = next(docs)
    assert first.obj == PODS[0]
    assert first.source == "dump.yaml:3 items[0]"  # the line of "- apiVersion: v1"
    assert [d.obj for d in (next(docs), next(docs))] == PODS[1:]
    with pytest.raises(YamlFileError, match=r"^dump\.yaml:\d+:\d+: invalid YAML"):
        next(docs)


def test_a_list_whose_kind_comes_first_or_in_json_streams_the_same_items() -> None:
    kind_first = yaml.safe_dump({"kind": "List", "apiVersion": "v1", "items": PODS}, sort_keys=False)
    as_kubectl_json = json.dumps({"apiVersion": "v1", "items": PODS, "kind": "List", "metadata": {}}, indent=4)
    compact_json = json.dumps({"apiVersion": "v1", "items": PODS, "kind": "List"})
    for text in (kind_first, as_kubectl_json, compact_json):
        assert [d.obj for d in iter_documents(text)] == PODS
    assert [d.source for d in iter_documents(as_kubectl_json, "l.json")] == ["l.json:4 items[0]", "l.json:11 items[1]", "l.json:18 items[2]"]
    assert [d.source for d in iter_documents(compact_json, "c.json")] == [f"c.json:1 items[{i}]" for i in range(3)]


def test_a_document_with_items_that_is_not_a_list_is_one_document() -> None:
    text = "items:\n- a: 1\nkind: PodTemplate\n---\nitems: [1]\nkind: List\n"
    docs = list(iter_documents(text, "x.yaml"))
    assert [d.obj for d in docs] == [{"items": [{"a": 1}], "kind": "PodTemplate"}, 1]
    assert [d.source for d in docs] == ["x.yaml:1", "x.yaml:5 items[0]"]
    with pytest.raises(YamlFileError, match=r"^x\.yaml:1: List\.items is not a list"):
        list(iter_documents("kind: List\nitems: 3\n", "x.yaml"))


def test_a_kind_line_the_lookahead_trusted_wrongly_is_an_error_not_silently_a_list() -> None:
    # "kind: List" at column 0 inside a quoted scalar looks like the document's kind to the
    # lookahead; the real kind says otherwise and the reader says so
    text = 'items:\n- a: 1\nkind: Other\nnote: "x\nkind: List"\n'
    assert yaml.load(text, Loader=C_LOADER)["kind"] == "Other"
    with pytest.raises(YamlFileError, match=r"^x\.yaml:3: the items above were read as a kind: List's \(line 5 says so\), but the document's kind is 'Other'"):
        list(iter_documents(text, "x.yaml"))


def test_lists_stay_whole_when_asked(tmp_path: Path) -> None:
    f = tmp_path / "l.yaml"
    f.write_text(_kubectl_list(PODS))
    [doc] = load_documents(f)
    assert doc.obj["items"] == PODS


def test_stream_files_reports_progress_through_every_file(tmp_path: Path) -> None:
    a, b = tmp_path / "a.yaml", tmp_path / "b.yaml"
    a.write_text(_kubectl_list(PODS))
    b.write_text(yaml.safe_dump_all(PODS))
    seen: list[tuple[int, int]] = []
    docs = list(stream_files([a, b], lambda done, total: seen.append((done, total))))
    assert [d.obj for d in docs] == PODS + PODS
    total = a.stat().st_size + b.stat().st_size
    assert all(t == total for _, t in seen)
    assert [d for d, _ in seen] == sorted(d for d, _ in seen)
    assert seen[-1][0] == total
    with pytest.raises(YamlFileError, match="cannot read"):
        list(stream_files([tmp_path / "missing.yaml"]))


def test_a_kubectl_dump_reads_as_safeloader_reads_it_and_errors_name_their_line(tmp_path: Path) -> None:
    from testkit.kubedump import DumpSpec, write_dump

    f = tmp_path / "dump.yaml"
    write_dump(f, DumpSpec(nodes=2, bound_per_node=3, pending=2, namespaces=2))
    text = f.read_text()
    docs = list(iter_documents(text, str(f)))
    assert [d.obj for d in docs] == yaml.load(text, Loader=C_LOADER)["items"]
    assert {d.obj["kind"] for d in docs} == {"Node", "DeviceClass", "ResourceSlice", "ResourceClaimTemplate", "ResourceClaim", "Pod"}
    lines = text.splitlines(keepends=True)
    for d in docs[:: len(docs) // 7]:
        line = int(d.source.split(":")[1].split()[0])
        assert lines[line - 1].startswith("- apiVersion:"), d.source
    bad_line = len(lines) * 2 // 3
    lines.insert(bad_line - 1, "\tbad: 1\n")  # a tab cannot indent YAML
    f.write_text("".join(lines))
    with pytest.raises(yaml.YAMLError) as theirs:
        yaml.load(f.read_text(), Loader=C_LOADER)
    with pytest.raises(YamlFileError) as mine:
        list(iter_documents(f.read_text(), str(f)))
    assert str(mine.value).startswith(f"{f}:{_position(theirs.value)}: invalid YAML")
    assert _position(theirs.value) == f"{bad_line}:1"
