"""NRI protocol versions: what a runtime of a given version accepts and sends.

The schema only ever grew, so the differences that matter are behavioural:
the valid event mask (0x7ff before v0.10.0, 0x3fff since), dedicated
notification rpcs (v0.12.0) and whether unsolicited updates are safe
(containerd/nri#301, first in v0.12.1). Runtimes since v0.12.0 send their NRI
version in ConfigureRequest; for older ones it is inferred from the runtime's
name and version, from the table of what each containerd and CRI-O release
vendors.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import total_ordering
from typing import Final

from topodra.nri.types import Event, event_mask

__all__ = [
    "CURRENT",
    "NRIVersion",
    "RuntimeInfo",
    "infer_nri_version",
    "valid_event_mask",
]

_VERSION_RE: Final = re.compile(r"^v?(\d+)\.(\d+)(?:\.(\d+))?(?:[-+].*)?$")


@total_ordering
@dataclass(frozen=True, slots=True)
class NRIVersion:
    major: int
    minor: int
    patch: int = 0

    @classmethod
    def parse(cls, text: str) -> NRIVersion:
        """``v0.12.3-0.2026...-8ec8b28``, ``0.8.0`` or ``v1.7`` -> (major, minor, patch)."""
        m = _VERSION_RE.match(text.strip())
        if not m:
            raise ValueError(f"not a version: {text!r}")
        return cls(int(m.group(1)), int(m.group(2)), int(m.group(3) or 0))

    @classmethod
    def try_parse(cls, text: str) -> NRIVersion | None:
        try:
            return cls.parse(text)
        except ValueError:
            return None

    def _key(self) -> tuple[int, int, int]:
        return (self.major, self.minor, self.patch)

    def __lt__(self, other: object) -> bool:
        if not isinstance(other, NRIVersion):
            return NotImplemented
        return self._key() < other._key()

    def __str__(self) -> str:
        return f"v{self.major}.{self.minor}.{self.patch}"


#: The protocol level this package implements (api.proto of nri v0.12.2).
CURRENT: Final = NRIVersion(0, 12, 2)

_V0_7: Final = NRIVersion(0, 7, 0)
_V0_10: Final = NRIVersion(0, 10, 0)
_V0_12: Final = NRIVersion(0, 12, 0)
_V0_12_1: Final = NRIVersion(0, 12, 1)


def valid_event_mask(version: NRIVersion | None) -> int:
    """Events a runtime accepts in ConfigureResponse (unknown version: the safe 0x7ff)."""
    if version is None or version < _V0_10:
        return (1 << 11) - 1
    return event_mask(list(Event))


# (first release, NRI version it vendors), ascending; the closest release at or
# below a runtime's version decides. From containerd's go.mod per tag and
# nri's pkg/api/version.go.
_RUNTIME_TABLE: Final[dict[str, tuple[tuple[NRIVersion, NRIVersion], ...]]] = {
    "containerd": tuple(
        (NRIVersion.parse(r), NRIVersion.parse(n))
        for r, n in [
            ("1.7.0", "0.3.0"),
            ("1.7.7", "0.4.0"),
            ("1.7.14", "0.6.0"),
            ("1.7.16", "0.6.1"),
            ("1.7.26", "0.8.0"),
            ("2.0.0", "0.8.0"),
            ("2.2.0", "0.10.0"),
            ("2.2.1", "0.11.0"),
            ("2.3.0", "0.12.0"),
        ]
    ),
    "cri-o": tuple(
        (NRIVersion.parse(r), NRIVersion.parse(n))
        for r, n in [
            ("1.26.0", "0.2.0"),
            ("1.26.2", "0.3.0"),
            ("1.26.4", "0.3.1"),
            ("1.27.0", "0.3.0"),
            ("1.27.1", "0.3.1"),
            ("1.29.0", "0.5.0"),
            ("1.29.2", "0.6.0"),
            ("1.31.0", "0.6.1"),
            ("1.32.0", "0.9.0"),
            ("1.33.0", "0.9.1"),
            ("1.34.0", "0.10.0"),
            ("1.35.0", "0.11.0"),
        ]
    ),
}


def infer_nri_version(runtime_name: str, runtime_version: str) -> NRIVersion | None:
    """The NRI version a known containerd/CRI-O release vendors, else None."""
    table = _RUNTIME_TABLE.get(runtime_name.strip().lower())
    version = NRIVersion.try_parse(runtime_version)
    if table is None or version is None:
        return None
    found = None
    for release, nri in table:
        if release <= version:
            found = nri
    return found


@dataclass(frozen=True, slots=True)
class RuntimeInfo:
    """What the plugin learnt about its runtime from ConfigureRequest."""

    name: str = ""
    version: str = ""
    #: NRI version as sent (v0.12.0+) or inferred from name and version; None if unknown
    nri_version: NRIVersion | None = None
    nri_version_inferred: bool = False
    #: seconds, or None when the runtime did not say (NRI < v0.7.0)
    registration_timeout: float | None = None
    request_timeout: float | None = None

    @classmethod
    def from_configure(
        cls, name: str, version: str, nri_version: str, registration_timeout_ms: int, request_timeout_ms: int
    ) -> RuntimeInfo:
        sent = NRIVersion.try_parse(nri_version) if nri_version not in ("", "unknown", "devel") else None
        inferred = None if sent else infer_nri_version(name, version)
        return cls(
            name=name,
            version=version,
            nri_version=sent or inferred,
            nri_version_inferred=inferred is not None,
            registration_timeout=registration_timeout_ms / 1000 if registration_timeout_ms > 0 else None,
            request_timeout=request_timeout_ms / 1000 if request_timeout_ms > 0 else None,
        )

    @property
    def valid_events(self) -> int:
        return valid_event_mask(self.nri_version)

    @property
    def dedicated_event_rpcs(self) -> bool:
        """Whether notification events arrive as their own rpcs (else as StateChange)."""
        return self.nri_version is not None and self.nri_version >= _V0_12

    @property
    def split_synchronize(self) -> bool:
        return self.nri_version is not None and self.nri_version >= _V0_7

    @property
    def unsolicited_updates_safe(self) -> bool:
        """False where containerd can deadlock on plugin-initiated updates (NRI < v0.12.1)."""
        return self.nri_version is not None and self.nri_version >= _V0_12_1
