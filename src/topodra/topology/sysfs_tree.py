"""Thin, strict access to the files of a sysfs tree under some root.

Everything topology discovery reads goes through :class:`SysfsTree`: a missing
file is ``None`` (callers choose a documented fallback), while a file that
exists but holds garbage raises :class:`TopologyError` naming the file and its
content. Paths are kept relative to the root in messages ("sys/devices/...")
so errors read the same for a live machine and an unpacked fixture.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

from topodra.cpuset import CPUSet, CPUSetParseError, parse_hexmask
from topodra.topology.errors import TopologyError

__all__ = ["SysfsTree"]

_INT = re.compile(r"-?[0-9]+")
_PADDING = b" \t\n\r\x0b\x0c\x00"  # ASCII whitespace and NUL around a value
_CHUNK = 1 << 16
_MAX_FILE = 1 << 20  # no topology file is anywhere near this


class SysfsTree:
    """Reads small text files below ``root`` (``/`` on a live machine)."""

    __slots__ = ("_prefix", "root")

    def __init__(self, root: str | os.PathLike[str] = "/") -> None:
        self.root = Path(root)
        self._prefix = os.fspath(self.root).rstrip("/") + "/"

    def path(self, rel: str) -> str:
        return self._prefix + rel

    def shown(self, rel: str) -> str:
        """How a file is named in messages: absolute for ``/``, else root-joined."""
        return self.path(rel)

    # --- raw access -------------------------------------------------------
    def text(self, rel: str) -> str | None:
        """The file's text, stripped; None when it does not exist."""
        # os.open/read/close: half the system calls of open(), which matters
        # when a big machine has thousands of one-line files.
        path = self._prefix + rel
        try:
            fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
        except (FileNotFoundError, NotADirectoryError):
            return None
        except OSError as e:
            raise TopologyError(self.shown(rel), f"cannot be read: {e.strerror or e}") from None
        try:
            data = os.read(fd, _CHUNK)
            # sysfs hands over a whole attribute in one read, and a regular
            # file reads short only at its end; keep going only on a full chunk.
            if len(data) == _CHUNK:
                chunks = [data]
                while len(chunks[-1]) == _CHUNK and len(chunks) * _CHUNK < _MAX_FILE:
                    chunks.append(os.read(fd, _CHUNK))
                data = b"".join(chunks)
        except IsADirectoryError:
            raise TopologyError(self.shown(rel), "expected a file, found a directory") from None
        except OSError as e:
            raise TopologyError(self.shown(rel), f"cannot be read: {e.strerror or e}") from None
        finally:
            os.close(fd)
        try:
            # Some gathered trees carry a trailing NUL after the newline; the
            # kernel never writes one inside the value, so it is safe to drop.
            return data.strip(_PADDING).decode("ascii")
        except UnicodeDecodeError:
            raise TopologyError(
                self.shown(rel), "is not ASCII text", data[:80].decode("ascii", "replace")
            ) from None

    def exists(self, rel: str) -> bool:
        return os.path.exists(self._prefix + rel)

    def isdir(self, rel: str) -> bool:
        return os.path.isdir(self._prefix + rel)

    def listdir(self, rel: str) -> list[str]:
        """Entry names of a directory; empty when it does not exist."""
        try:
            return os.listdir(self._prefix + rel)
        except (FileNotFoundError, NotADirectoryError):
            return []
        except OSError as e:
            raise TopologyError(self.shown(rel), f"cannot be listed: {e.strerror or e}") from None

    def numbered(self, rel: str, prefix: str) -> dict[int, str]:
        """Entries named ``<prefix><number>`` of a directory, by number."""
        out: dict[int, str] = {}
        n = len(prefix)
        for name in self.listdir(rel):
            if name.startswith(prefix) and name[n:].isdigit() and name[n:].isascii():
                out[int(name[n:])] = name
        return out

    def realpath(self, rel: str) -> str:
        return os.path.realpath(self._prefix + rel)

    def readlink(self, rel: str) -> str | None:
        """A symlink's target as written; None when ``rel`` is missing or not a symlink."""
        try:
            return os.readlink(self._prefix + rel)
        except OSError:  # missing, or not a symlink (EINVAL)
            return None

    # --- typed access -------------------------------------------------------
    def int(self, rel: str) -> int | None:
        """A decimal integer file; None when missing, error on garbage."""
        text = self.text(rel)
        if text is None:
            return None
        if not _INT.fullmatch(text):
            raise TopologyError(self.shown(rel), "expected an integer", text)
        return int(text)

    def cpulist(self, rel: str) -> CPUSet | None:
        """A kernel list-format file ("0-3,8"); None when missing."""
        text = self.text(rel)
        if text is None:
            return None
        try:
            return CPUSet.parse(text)
        except CPUSetParseError as e:
            raise TopologyError(self.shown(rel), f"expected a CPU list: {e.reason}", text) from None

    def cpumask(self, rel: str) -> CPUSet | None:
        """A kernel hex-mask file ("ff,00000001"); None when missing."""
        text = self.text(rel)
        if text is None:
            return None
        try:
            return parse_hexmask(text)
        except CPUSetParseError as e:
            raise TopologyError(self.shown(rel), f"expected a hex CPU mask: {e.reason}", text) from None

    def cpus(self, rel_list: str, rel_mask: str) -> CPUSet | None:
        """A CPU set from the ``*_list`` file, else from the hex mask file."""
        got = self.cpulist(rel_list)
        return got if got is not None else self.cpumask(rel_mask)

    def cpus_mask_first(self, rel_mask: str, rel_list: str) -> CPUSet | None:
        """A CPU set from the hex mask file, else from the ``*_list`` file."""
        got = self.cpumask(rel_mask)
        return got if got is not None else self.cpulist(rel_list)
