"""CPUSet: kernel list format, algebra, strict parsing (with property tests)."""

from __future__ import annotations

import pickle

import pytest
from hypothesis import given
from hypothesis import strategies as st

from topodra.cpuset import MAX_CPU_ID, CPUSet, CPUSetParseError

ids = st.frozensets(st.integers(min_value=0, max_value=300), max_size=80)
big_ids = st.frozensets(st.integers(min_value=0, max_value=MAX_CPU_ID), max_size=40)


@pytest.mark.parametrize(
    ("text", "cpus", "canonical"),
    [
        ("", [], ""),
        ("0", [0], "0"),
        ("0-3", [0, 1, 2, 3], "0-3"),
        ("0-3,8,10-11", [0, 1, 2, 3, 8, 10, 11], "0-3,8,10-11"),
        ("10-11", [10, 11], "10-11"),
        ("3,1,2", [1, 2, 3], "1-3"),
        ("0-3\n", [0, 1, 2, 3], "0-3"),
        ("0-7:2/4", [0, 1, 4, 5], "0-1,4-5"),
        ("4095", [4095], "4095"),
        ("0,0,0", [0], "0"),
    ],
)
def test_parse_and_format(text: str, cpus: list[int], canonical: str) -> None:
    s = CPUSet.parse(text)
    assert list(s) == cpus
    assert s.format() == canonical
    assert str(s) == canonical


@pytest.mark.parametrize(
    "text", ["a", "1-", "-1", "3-1", "1,,2", ",1", "1,", "0x3", "1 2", "1-2:3", "1:1/2", "0-3:0/2", "9999", "-"]
)
def test_parse_rejects_with_quoted_text(text: str) -> None:
    with pytest.raises(CPUSetParseError) as err:
        CPUSet.parse(text)
    assert repr(text) in str(err.value)


def test_hexmask() -> None:
    assert CPUSet.parse_hexmask("00000000,0000000f\n") == CPUSet.parse("0-3")
    assert CPUSet.parse_hexmask("1,00000000") == CPUSet([32])
    with pytest.raises(CPUSetParseError):
        CPUSet.parse_hexmask("zz")


def test_immutable_and_hashable() -> None:
    s = CPUSet([1, 2])
    with pytest.raises(AttributeError):
        s._mask = 3
    assert {s: 1}[CPUSet.parse("1-2")] == 1
    assert pickle.loads(pickle.dumps(s)) == s


def test_rejects_bad_ids() -> None:
    with pytest.raises(ValueError, match="out of range"):
        CPUSet([-1])
    with pytest.raises(TypeError):
        CPUSet([True])


def test_first_last_take() -> None:
    s = CPUSet.parse("3,5-7")
    assert (s.first(), s.last()) == (3, 7)
    assert s.take(2) == CPUSet([3, 5])
    assert s.take(10) == s
    with pytest.raises(ValueError, match="empty"):
        CPUSet().first()


@given(ids)
def test_roundtrip(cpus: frozenset[int]) -> None:
    s = CPUSet(cpus)
    assert CPUSet.parse(s.format()) == s
    assert sorted(cpus) == list(s)
    assert len(s) == len(cpus)


@given(big_ids)
def test_roundtrip_sparse(cpus: frozenset[int]) -> None:
    s = CPUSet(cpus)
    assert CPUSet.parse(s.format()) == s


@given(ids)
def test_format_matches_kernel_rules(cpus: frozenset[int]) -> None:
    text = CPUSet(cpus).format()
    # Kernel list format: ascending maximal runs, single ids alone, runs as lo-hi.
    prev_hi = -2
    for part in text.split(",") if text else []:
        lo, _, hi = part.partition("-")
        lo_i, hi_i = int(lo), int(hi or lo)
        assert lo_i > prev_hi + 1
        assert (hi == "") == (lo_i == hi_i)
        prev_hi = hi_i


@given(ids, ids)
def test_algebra_matches_frozenset(a: frozenset[int], b: frozenset[int]) -> None:
    x, y = CPUSet(a), CPUSet(b)
    assert set(x | y) == a | b
    assert set(x & y) == a & b
    assert set(x - y) == a - b
    assert set(x ^ y) == a ^ b
    assert (x <= y) == (a <= b)
    assert (x < y) == (a < b)
    assert x.isdisjoint(y) == a.isdisjoint(b)
    assert (3 in x) == (3 in a)


@given(st.text(max_size=20))
def test_parse_never_crashes(text: str) -> None:
    try:
        s = CPUSet.parse(text)
    except CPUSetParseError as err:
        assert repr(text) in str(err)
    else:
        assert CPUSet.parse(s.format()) == s
