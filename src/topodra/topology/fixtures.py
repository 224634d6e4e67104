"""Real sysfs trees to test against: hwloc's ``tests/hwloc/linux`` tarballs.

The trees and hwloc's expected readings ship as package data in
``topodra/topology/hwloc-linux/`` (its README says where they come from and
their licence); ``TOPODRA_FIXTURES`` points at another folder of the same kind.
``fixture_dir()`` returns the folder, ``fixture_names()`` lists the trees and
``unpacked_fixture(name)`` unpacks one and returns the root that holds
``sys/``, ready for ``read_topology``. Each tree is unpacked once per process
into a private temp dir removed at exit (RAM-backed ``/dev/shm`` when it has
room: tens of thousands of tiny files unpack many times faster there).

Unpacking is safe: absolute paths, ``..``, members below a symlink and
symlinks that lead outside the folder are refused, devices and hard links are
skipped, and size caps stop archive bombs. (tarfile's ``data`` filter is as
strict but checks every member on disk, several times slower here.)
"""

from __future__ import annotations

import atexit
import os
import shutil
import tarfile
import tempfile
import threading
from importlib import resources
from pathlib import Path

__all__ = [
    "FixtureError",
    "fixture_dir",
    "fixture_names",
    "fixture_tarball",
    "unpacked_fixture",
]

#: The folder of hwloc's trees inside the ``topodra.topology`` package (package data).
PACKAGED_FOLDER = "hwloc-linux"
_SUFFIX = ".tar.bz2"
#: Upper bounds on what one fixture may unpack to.
MAX_UNPACKED_BYTES = 256 << 20
MAX_MEMBERS = 100_000


class FixtureError(LookupError):
    """The fixture folder or a fixture in it cannot be found or unpacked."""


def _packaged_dir() -> Path:
    """The trees shipped in the package (``topodra/topology/hwloc-linux``)."""
    folder = resources.files("topodra.topology") / PACKAGED_FOLDER
    if not isinstance(folder, Path) or not folder.is_dir():
        # A zipped install has no folder to unpack from; point TOPODRA_FIXTURES at a copy.
        raise FixtureError(f"the packaged fixture folder {folder} is not a directory; set TOPODRA_FIXTURES")
    return folder


def fixture_dir() -> Path:
    """The folder of ``NAME.tar.bz2`` trees: ``$TOPODRA_FIXTURES`` if set, else the packaged one."""
    env = os.environ.get("TOPODRA_FIXTURES")
    if env:
        if not Path(env).is_dir():
            raise FixtureError(f"TOPODRA_FIXTURES={env!r} is not a directory")
        return Path(env)
    return _packaged_dir()


def fixture_names() -> list[str]:
    """Names of every tree in the fixture folder (tarball names without ``.tar.bz2``)."""
    return sorted(p.name[: -len(_SUFFIX)] for p in fixture_dir().glob(f"*{_SUFFIX}"))


def fixture_tarball(name: str) -> Path:
    """The tarball of fixture ``name``, with a clear error listing the known names."""
    if not name or "/" in name or name.startswith("."):
        raise FixtureError(f"invalid fixture name {name!r}")
    path = fixture_dir() / f"{name}{_SUFFIX}"
    if not path.is_file():
        known = ", ".join(fixture_names())
        raise FixtureError(f"no fixture {name!r} in {fixture_dir()}; known: {known}")
    return path


_lock = threading.Lock()
_cache: dict[Path, Path] = {}
_tmp_root: Path | None = None


def _cleanup() -> None:
    if _tmp_root is not None:
        shutil.rmtree(_tmp_root, ignore_errors=True)


def unpacked_fixture(name: str) -> Path:
    """Unpack fixture ``name`` (cached per process) and return the root holding ``sys/``."""
    global _tmp_root
    tarball = fixture_tarball(name)
    with _lock:
        got = _cache.get(tarball)
        if got is not None and got.is_dir():
            return got
        if _tmp_root is None:
            _tmp_root = Path(tempfile.mkdtemp(prefix="topodra-fixtures-", dir=_tmp_parent()))
            atexit.register(_cleanup)
        dest = Path(tempfile.mkdtemp(prefix=f"{name}-", dir=_tmp_root))
        root = _extract(tarball, dest)
        _cache[tarball] = root
        return root


def _tmp_parent() -> str | None:
    """Where to unpack: ``TOPODRA_FIXTURE_TMP``, else RAM-backed /dev/shm when it
    has room (tens of thousands of tiny files unpack many times faster there),
    else the system temp dir."""
    env = os.environ.get("TOPODRA_FIXTURE_TMP")
    if env:
        return env
    shm = "/dev/shm"
    try:
        if os.path.isdir(shm) and os.access(shm, os.W_OK) and shutil.disk_usage(shm).free >= 1 << 30:
            return shm
    except OSError:
        pass
    return None


class _Namespace:
    """The archive's own view of paths, to check symlinks without touching disk."""

    def __init__(self) -> None:
        self.links: dict[str, str] = {}

    def escapes(self, rel: str) -> bool:
        """Whether resolving ``rel`` (a path inside the root) ever leaves the root."""
        return self.resolve(rel, 0) is None

    def resolve(self, rel: str, hops: int) -> str | None:
        """The path ``rel`` names after following links, or None if it escapes."""
        if hops > 40:
            return None
        stack: list[str] = []
        for part in rel.split("/"):
            if part in ("", "."):
                continue
            if part == "..":
                if not stack:
                    return None
                stack.pop()
                continue
            stack.append(part)
            target = self.links.get("/".join(stack))
            if target is not None:
                if target.startswith("/"):
                    return None
                base = "/".join(stack[:-1])
                got = self.resolve(f"{base}/{target}" if base else target, hops + 1)
                if got is None:
                    return None
                stack = got.split("/") if got else []
        return "/".join(stack)


def _extract(tarball: Path, dest: Path) -> Path:
    """Unpack regular files, folders and symlinks that stay inside ``dest``.

    Refused: absolute names, ``..``, members below a symlink, symlinks whose
    resolution (followed through the archive's own links) leaves the folder,
    and archives over the size caps. Hard links, devices and FIFOs are skipped.
    Ownership, modes and times are not restored: the tree is only read.
    """
    ns = _Namespace()
    made: set[str] = set()
    pending_links: list[tuple[str, str]] = []
    total = count = 0
    try:
        with tarfile.open(tarball, "r:*") as tar:
            for m in tar:
                count += 1
                if count > MAX_MEMBERS:
                    raise FixtureError(f"{tarball}: more than {MAX_MEMBERS} members")
                parts = [p for p in m.name.split("/") if p not in ("", ".")]
                if m.name.startswith("/") or ".." in parts:
                    raise FixtureError(f"{tarball}: unsafe member name {m.name!r}")
                if not parts:
                    continue
                rel = "/".join(parts)
                for i in range(1, len(parts)):
                    if "/".join(parts[:i]) in ns.links:
                        raise FixtureError(f"{tarball}: member {m.name!r} lies below a symlink")
                path = os.path.join(dest, rel)
                parent = os.path.dirname(path)
                if parent not in made:
                    os.makedirs(parent, exist_ok=True)
                    made.add(parent)
                if m.isdir():
                    if path not in made:
                        os.makedirs(path, exist_ok=True)
                        made.add(path)
                elif m.isfile():
                    total += m.size
                    if total > MAX_UNPACKED_BYTES:
                        raise FixtureError(f"{tarball}: unpacks to more than {MAX_UNPACKED_BYTES} bytes")
                    src = tar.extractfile(m)
                    data = src.read() if src is not None else b""
                    with open(path, "wb") as out:
                        out.write(data)
                elif m.issym():
                    ns.links[rel] = m.linkname
                    pending_links.append((rel, m.linkname))
        for rel, target in pending_links:
            if ns.escapes(rel):
                raise FixtureError(f"{tarball}: symlink {rel!r} -> {target!r} leads outside the tree")
            os.symlink(target, os.path.join(dest, rel))
    except (tarfile.TarError, OSError, EOFError) as e:
        raise FixtureError(f"{tarball}: cannot unpack: {e}") from None
    if (dest / "sys").is_dir():
        return dest
    tops = [p for p in dest.iterdir() if p.is_dir() and (p / "sys").is_dir()]
    if len(tops) != 1:
        raise FixtureError(f"{tarball}: expected one top folder holding sys/, found {len(tops)}")
    return tops[0]
