"""Fuzzing the readers: any content gives a result or a TopologyError, never a crash."""

from __future__ import annotations

import contextlib
import copy
import json
import os
import tempfile
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from testkit.sysfs_writer import write_sysfs

from topodra.topology import Topology, TopologyError, read_topology, synthetic_topology
from topodra.topology import hwloc as hw
from topodra.topology.serialize import topology_from_dict, topology_to_dict

from .conftest import FAST_TMP

_TREE = Path(tempfile.mkdtemp(prefix="topodra-fuzz-", dir=FAST_TMP))
write_sysfs(synthetic_topology("1s1d2n1l2c2t4e+cxl"), _TREE)
_FILES = sorted(str(p.relative_to(_TREE)) for p in _TREE.rglob("*") if p.is_file() and not p.is_symlink())

_text = st.one_of(
    st.text(max_size=40),
    st.binary(max_size=40).map(lambda b: b.decode("latin-1")),
    st.sampled_from(
        ["", "-1", "0x", "0-", "1-0", "99999", "4294967296", "0,,1", "ff" * 300, "(null)", "1e3"]
    ),
)


@pytest.fixture(scope="module", autouse=True)
def _cleanup() -> Any:
    yield
    import shutil

    shutil.rmtree(_TREE, ignore_errors=True)


@settings(suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(rel=st.sampled_from(_FILES), content=_text)
def test_any_file_content(rel: str, content: str) -> None:
    path = _TREE / rel
    saved = path.read_bytes()
    try:
        path.write_bytes(content.encode("latin-1", "replace"))
        try:
            t = read_topology(_TREE)
        except TopologyError as e:
            assert e.path.endswith(rel) or rel.startswith("sys/devices/system/node"), str(e)
        else:
            assert isinstance(t, Topology)
    finally:
        path.write_bytes(saved)


def test_the_fuzz_tree_is_healthy() -> None:
    assert len(read_topology(_TREE).cpus) == 16
    assert len(_FILES) > 100


_BASE = topology_to_dict(synthetic_topology("1s1d2n1l2c2t4e+hbm"))
_json = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**70), 2**70) | st.text(max_size=12),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=3),
    max_leaves=6,
)


def _paths(d: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    out = [prefix]
    if isinstance(d, dict):
        for k, v in d.items():
            out += _paths(v, (*prefix, k))
    elif isinstance(d, list):
        for i, v in enumerate(d):
            out += _paths(v, (*prefix, i))
    return out


_PATHS = [p for p in _paths(_BASE) if p]


@given(path=st.sampled_from(_PATHS), value=_json)
def test_any_value_anywhere_in_a_snapshot(path: tuple[Any, ...], value: Any) -> None:
    d = copy.deepcopy(_BASE)
    target = d
    for key in path[:-1]:
        target = target[key]
    target[path[-1]] = value
    try:
        t = topology_from_dict(json.loads(json.dumps(d)))
    except TopologyError:
        return
    # Whatever is accepted must be usable.
    for c in t.cpus:
        t.siblings(c)
    t.packages(), t.cores(), t.l3_groups()
    topology_to_dict(t)


@given(st.text(max_size=300))
def test_console_parser(text: str) -> None:
    with contextlib.suppress(hw.HwlocParseError):
        hw.parse_console(text)


@given(st.text(max_size=300))
def test_xml_parser(text: str) -> None:
    with contextlib.suppress(hw.HwlocParseError):
        hw.parse_xml(text)


def test_env_is_untouched() -> None:
    assert "TOPODRA_FIXTURES" not in os.environ or os.environ["TOPODRA_FIXTURES"]


_attr = st.sampled_from(["0x1", "0x000000ff,,0x0", "x", "-1", "3", "", "0xzz"])


@given(
    st.lists(
        st.tuples(
            st.sampled_from(["PU", "Core", "Package", "NUMANode", "L2Cache", "L3Cache", "Cache", "Group"]),
            _attr,
            _attr,
        ),
        max_size=6,
    )
)
def test_xml_parser_on_hwloc_shaped_documents(objects: list[tuple[str, str, str]]) -> None:
    inner = "".join(
        f'<object type="{t}" cpuset="{c}" os_index="{i}" local_memory="{i}" depth="{i}"/>'
        for t, c, i in objects
    )
    doc = f'<topology><object type="Machine" cpuset="0x1">{inner}</object></topology>'
    with contextlib.suppress(hw.HwlocParseError):
        hw.parse_xml(doc)


_line = st.sampled_from(
    [
        "  Package L#0 (P#0)",
        "    NUMANode L#0 (P#0 local=5iB)",
        "    NUMANode L#1 (P#1 local=2GiB)",
        "    Core L#0 (P#x)",
        "      PU L#0 (P#0)",
        "      PU L#1 (P#9000)",
        "   PU L#2 (P#2)",
        "  L3Cache L#0 (size=1KiB",
        "depth 0: 1 Machine",
        "CPU kind #0 efficiency 0 cpuset 0xzz",
        "CPU kind #1 efficiency 1 cpuset 0x3",
        "Relative latency matrix (name NUMALatency kind 5) between 2 NUMANodes (depth -3) by logical indexes:",
        " index     0     1",
        "     0    10    20",
        "     1    20",
        "     7    10    10",
    ]
)


@given(st.lists(_line, max_size=12))
def test_console_parser_on_lstopo_shaped_text(lines: list[str]) -> None:
    with contextlib.suppress(hw.HwlocParseError):
        hw.parse_console("\n".join(["Machine (P#0)", *lines]))


@settings(suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(st.sampled_from(_FILES), min_size=1, max_size=25, unique=True))
def test_any_files_missing(rels: list[str]) -> None:
    saved = {rel: (_TREE / rel).read_bytes() for rel in rels}
    try:
        for rel in rels:
            (_TREE / rel).unlink()
        try:
            t = read_topology(_TREE)
        except TopologyError as e:
            assert "no online CPU" in str(e) or "not the root" in str(e), str(e)
        else:
            assert t.cpus
            for c in t.cpus:
                assert c in t.cpus_of_package(t.cpu(c).package)
                assert c in t.siblings(c)
                assert c in t.cpus_of_node(t.cpu(c).node)
    finally:
        for rel, data in saved.items():
            (_TREE / rel).write_bytes(data)
