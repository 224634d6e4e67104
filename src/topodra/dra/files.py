"""File writes for the driver's state, each with the durability its role needs.

- ``overwrite_durably``: the checkpoint slots. The bytes are written in place
  and ``fdatasync``-ed: one flush per state change. A crash mid-write leaves a
  torn slot, which the checkpoint's checksum rejects; the other slot still
  holds the previous generation (see ``checkpoint``).
- ``replace_atomically`` / ``remove``: CDI specs. A reader (the runtime) sees
  the old file or the new one, never a torn mix, but nothing is flushed: the
  checkpoint is the source of truth and the specs are rewritten from it when
  the agent starts, so a spec lost or torn by a power cut is repaired before
  any container can use it.
- ``write_atomic``: temp file, fsync, rename, directory fsync, for files that
  must be both whole and durable on their own.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from pathlib import Path

from topodra.faults import crash_point

__all__ = ["overwrite_durably", "remove", "remove_durably", "replace_atomically", "write_atomic"]


def _fsync_dir(directory: Path) -> None:
    fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _write_temp(path: Path, data: bytes, mode: int, *, sync: bool) -> str:
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fchmod(f.fileno(), mode)
            if sync:
                os.fsync(f.fileno())
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise
    return tmp


def _rename(tmp: str, path: Path) -> None:
    try:
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise


def write_atomic(path: Path, data: bytes, *, mode: int = 0o644) -> None:
    """Replace ``path`` with ``data`` atomically and durably."""
    _rename(_write_temp(path, data, mode, sync=True), path)
    _fsync_dir(path.parent)


def replace_atomically(path: Path, data: bytes, *, mode: int = 0o644) -> None:
    """Replace ``path`` with ``data`` atomically (whole old or whole new), without flushing."""
    _rename(_write_temp(path, data, mode, sync=False), path)


def overwrite_durably(path: Path, data: bytes, *, mode: int = 0o600) -> None:
    """Write ``data`` over ``path`` in place and flush it (one ``fdatasync``).

    Not atomic: a crash mid-write leaves a torn file (the ``checkpoint.torn``
    crash point makes one on purpose), which callers must detect. Creating
    the file also flushes its directory, once.
    """
    created = not path.exists()
    fd = os.open(path, os.O_WRONLY | os.O_CREAT, mode)
    try:
        half = len(data) // 2
        _pwrite_all(fd, data[:half], 0)
        crash_point("checkpoint.torn")
        _pwrite_all(fd, data[half:], half)
        os.ftruncate(fd, len(data))
        os.fdatasync(fd)
    finally:
        os.close(fd)
    if created:
        _fsync_dir(path.parent)


def _pwrite_all(fd: int, data: bytes, offset: int) -> None:
    view = memoryview(data)
    while view:
        n = os.pwrite(fd, view, offset)
        view, offset = view[n:], offset + n


def remove(path: Path) -> bool:
    """Unlink ``path`` (True if it existed), without flushing the directory."""
    try:
        path.unlink()
    except FileNotFoundError:
        return False
    return True


def remove_durably(path: Path) -> bool:
    """Unlink ``path`` (True if it existed) and fsync its directory."""
    if not remove(path):
        return False
    _fsync_dir(path.parent)
    return True
