"""Finding and safely unpacking the fixture tarballs."""

from __future__ import annotations

import io
import tarfile
from importlib import resources
from pathlib import Path

import pytest

from topodra.topology import fixtures
from topodra.topology.fixtures import FixtureError, fixture_dir, fixture_names, unpacked_fixture


def test_the_packaged_fixtures_are_found(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("TOPODRA_FIXTURES", raising=False)
    folder = fixture_dir()
    assert folder == Path(str(resources.files("topodra.topology") / "hwloc-linux"))
    assert (folder / "README.md").is_file()
    assert (folder / "COPYING").is_file()
    assert "20em64t-hybrid-1p6c2t+2ca4co1t" in fixture_names()
    # topology-check reads hwloc's expected readings from the same folder.
    assert (folder / "20em64t-hybrid-1p6c2t+2ca4co1t.test").is_file()
    assert (folder / "20em64t-hybrid-1p6c2t+2ca4co1t.console").is_file()


def test_unpacked_root_holds_sys_even_when_the_folder_is_named_differently() -> None:
    root = unpacked_fixture("20s390-2g6s4c")  # unpacks to 20s390-2g2g2s4co/
    assert (root / "sys" / "devices" / "system" / "cpu").is_dir()
    assert unpacked_fixture("20s390-2g6s4c") == root  # cached


def _tarball(folder: Path, name: str, members: list[tuple[tarfile.TarInfo, bytes | None]]) -> None:
    with tarfile.open(folder / f"{name}.tar.bz2", "w:bz2") as tar:
        for info, data in members:
            tar.addfile(info, io.BytesIO(data) if data is not None else None)


def _file(name: str, data: bytes = b"0\n") -> tuple[tarfile.TarInfo, bytes]:
    info = tarfile.TarInfo(name)
    info.size = len(data)
    return info, data


def _link(name: str, target: str) -> tuple[tarfile.TarInfo, None]:
    info = tarfile.TarInfo(name)
    info.type = tarfile.SYMTYPE
    info.linkname = target
    return info, None


@pytest.fixture
def own_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("TOPODRA_FIXTURES", str(tmp_path))
    return tmp_path


def test_env_var_and_a_good_tarball(own_dir: Path) -> None:
    _tarball(
        own_dir,
        "tiny",
        [
            _file("tiny-x/sys/devices/system/cpu/online", b"0\n"),
            _link("tiny-x/sys/cpu0", "devices/system/cpu"),
        ],
    )
    assert fixture_dir() == own_dir
    assert fixture_names() == ["tiny"]
    root = unpacked_fixture("tiny")
    assert root.name == "tiny-x"
    assert (root / "sys/cpu0/online").read_text() == "0\n"


@pytest.mark.parametrize(
    ("members", "problem"),
    [
        ([_file("/etc/evil")], "unsafe member name"),
        ([_file("a/../../evil")], "unsafe member name"),
        ([_link("a/sys", "../../../etc")], "leads outside the tree"),
        ([_link("a/sys", "/etc")], "leads outside the tree"),
        ([_link("a/up", "."), _link("a/sys", "up/../..")], "leads outside the tree"),
        ([_link("a/loop", "loop")], "leads outside the tree"),
        ([_link("a/d", "sys"), _file("a/d/x")], "lies below a symlink"),
    ],
)
def test_unsafe_tarballs_are_refused(
    own_dir: Path, members: list[tuple[tarfile.TarInfo, bytes | None]], problem: str
) -> None:
    _tarball(own_dir, "bad", [_file("a/sys/ok"), *members])
    with pytest.raises(FixtureError, match=problem):
        unpacked_fixture("bad")
    assert not (own_dir.parent / "evil").exists()


def test_size_cap(own_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(fixtures, "MAX_UNPACKED_BYTES", 10)
    _tarball(own_dir, "big", [_file("a/sys/x", b"x" * 11)])
    with pytest.raises(FixtureError, match="more than 10 bytes"):
        unpacked_fixture("big")


def test_unknown_and_invalid_names(own_dir: Path) -> None:
    with pytest.raises(FixtureError, match="no fixture 'nope'"):
        unpacked_fixture("nope")
    with pytest.raises(FixtureError, match="invalid fixture name"):
        unpacked_fixture("../etc")


def test_bad_env_var_is_a_clear_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TOPODRA_FIXTURES", str(tmp_path / "missing"))
    with pytest.raises(FixtureError, match="is not a directory"):
        fixture_dir()


def test_not_a_tarball(own_dir: Path) -> None:
    (own_dir / "junk.tar.bz2").write_bytes(b"this is not bzip2")
    with pytest.raises(FixtureError, match="cannot unpack"):
        unpacked_fixture("junk")
