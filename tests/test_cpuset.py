"""CPUSet: kernel list format, algebra, strict parsing (with property tests)."""

from __future__ import annotations

import pickle

import pytest
from hypothesis import given
from hypothesis import strategies as st

from topodra.cpuset import MAX_CPU_ID, CPUSet, CPUSetParseError, parse_hexmask

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
    "text",
    ["a", "1-", "-1", "3-1", "1,,2", ",1", "1,", "0x3", "1 2", "1-2:3", "1:1/2", "0-3:0/2", "9999", "-"],
)
def test_parse_rejects_with_quoted_text(text: str) -> None:
    with pytest.raises(CPUSetParseError) as err:
        CPUSet.parse(text)
    assert repr(text) in str(err.value)


def test_hexmask() -> None:
    assert parse_hexmask("00000000,0000000f\n") == CPUSet.parse("0-3")
    assert parse_hexmask("1,00000000") == CPUSet([32])
    with pytest.raises(CPUSetParseError):
        parse_hexmask("zz")


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


def test_first_last() -> None:
    s = CPUSet.parse("3,5-7")
    assert (s.first(), s.last()) == (3, 7)
    assert list(s) == [3, 5, 6, 7]  # ascending
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


# --- strict parsing: only the kernel's formats (issue 13 item 8) ------------------

_HEX_WORD = st.text(alphabet="0123456789abcdefABCDEF", min_size=1, max_size=8)


@pytest.mark.parametrize(
    "text",
    [
        "-B6631",
        "-1",
        "+f",
        "0x3",
        "0X3",
        "f_f",
        "1 f",
        "f,,0",
        ",f",
        "f,",
        "123456789",
        "\uff11",
        "\u0661",
        "f\u2000",
        "1" + ",00000000" * 256,
    ],
)
def test_hexmask_rejects_what_the_kernel_never_writes(text: str) -> None:
    with pytest.raises(CPUSetParseError) as err:
        parse_hexmask(text)
    assert repr(text) in str(err.value)


def test_hexmask_words_are_32_bits_even_when_not_padded() -> None:
    assert parse_hexmask("1,0") == CPUSet([32])
    assert parse_hexmask("1,00000000") == CPUSet([32])
    assert parse_hexmask(" 3\n") == CPUSet([0, 1])
    assert parse_hexmask("") == CPUSet()
    assert parse_hexmask("80000000," + "00000000," * 254 + "00000000") == CPUSet([MAX_CPU_ID])


@pytest.mark.parametrize(
    "text", ["+1", "1_0", "\u0661", "1 ,2", "1, 2", "0-3:1/+2", "\u20001", "1\u00a0", "0-\uff13"]
)
def test_list_rejects_what_int_would_accept(text: str) -> None:
    with pytest.raises(CPUSetParseError):
        CPUSet.parse(text)


@given(st.lists(_HEX_WORD, min_size=1, max_size=6))
def test_hexmask_reads_each_word_as_32_bits(words: list[str]) -> None:
    expected = 0
    for w in words:
        expected = (expected << 32) | int(w, 16)
    if expected >> (MAX_CPU_ID + 1):
        return
    assert parse_hexmask(",".join(words)).mask == expected


@given(big_ids)
def test_hexmask_roundtrips_the_kernel_format(cpus: frozenset[int]) -> None:
    s = CPUSet(cpus)
    words = [(s.mask >> (32 * i)) & 0xFFFFFFFF for i in range(max(1, (s.mask.bit_length() + 31) // 32))]
    text = ",".join(f"{w:08x}" for w in reversed(words))
    assert parse_hexmask(text + "\n") == s


def _check_hexmask(text: str) -> None:
    """parse_hexmask raises only CPUSetParseError and accepts only the kernel grammar."""
    try:
        s = parse_hexmask(text)
    except CPUSetParseError as err:
        assert repr(text) in str(err)
    else:
        body = text.strip(" \t\n\r\v\f")
        assert body == "" or all(
            0 < len(w) <= 8 and all(ch in "0123456789abcdefABCDEF" for ch in w) for w in body.split(",")
        )
        assert not s or s.last() <= MAX_CPU_ID


@given(st.text(max_size=24))
def test_hexmask_never_raises_anything_but_the_documented_error(text: str) -> None:
    _check_hexmask(text)


@given(st.text(alphabet="0123456789abcdefBx,-+_ \n\uff11", max_size=30))
def test_hexmask_fuzz_on_near_miss_alphabet(text: str) -> None:
    _check_hexmask(text)


@given(st.text(alphabet="0123456789-,:/ +_\n\u0661\uff11", max_size=24))
def test_list_parse_accepts_only_ascii_kernel_grammar(text: str) -> None:
    try:
        s = CPUSet.parse(text)
    except CPUSetParseError:
        return
    body = text.strip(" \t\n\r\v\f")
    assert all(ch in "0123456789-,:/" for ch in body)
    assert CPUSet.parse(s.format()) == s


def test_cpuset_text_is_cached_and_stays_true() -> None:
    s = CPUSet.parse("0-3,8")
    assert s.format() == "0-3,8"
    assert s.format() is s.format()
    assert (s | CPUSet({9})).format() == "0-3,8-9"  # a derived set formats its own text
