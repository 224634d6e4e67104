"""Semantic versions (semver 2.0.0) as the Kubernetes CEL ``semver`` library sees them."""

from __future__ import annotations

import re
from dataclasses import dataclass

__all__ = ["Semver", "SemverError", "parse_semver"]


class SemverError(ValueError):
    """A string that is not a semantic version."""


#: compiled on first use (``re``'s cache): most runs parse no version
_STRICT = (
    r"^(0|[1-9]\d*)\.(0|[1-9]\d*)\.(0|[1-9]\d*)"
    r"(?:-((?:0|[1-9]\d*|\d*[A-Za-z-][0-9A-Za-z-]*)(?:\.(?:0|[1-9]\d*|\d*[A-Za-z-][0-9A-Za-z-]*))*))?"
    r"(?:\+([0-9A-Za-z-]+(?:\.[0-9A-Za-z-]+)*))?$"
)


@dataclass(frozen=True, slots=True)
class Semver:
    """A parsed semantic version; :meth:`compare` orders them as semver 2.0.0 does."""

    major: int
    minor: int
    patch: int
    pre: tuple[str, ...] = ()
    build: tuple[str, ...] = ()

    def compare(self, other: Semver) -> int:
        a, b = (self.major, self.minor, self.patch), (other.major, other.minor, other.patch)
        if a != b:
            return -1 if a < b else 1
        if self.pre == other.pre:
            return 0
        if not self.pre:
            return 1
        if not other.pre:
            return -1
        for x, y in zip(self.pre, other.pre, strict=False):
            if x == y:
                continue
            xn, yn = x.isdigit(), y.isdigit()
            if xn and yn:
                return -1 if int(x) < int(y) else 1
            if xn != yn:
                return -1 if xn else 1
            return -1 if x < y else 1
        return -1 if len(self.pre) < len(other.pre) else 1

    def __str__(self) -> str:
        s = f"{self.major}.{self.minor}.{self.patch}"
        if self.pre:
            s += "-" + ".".join(self.pre)
        if self.build:
            s += "+" + ".".join(self.build)
        return s


def parse_semver(text: str, normalize: bool = False) -> Semver:
    """Strict semver; with ``normalize`` a ``v`` prefix is dropped and missing parts filled."""
    s = text
    if normalize:
        if s.startswith("v"):
            s = s[1:]
        core, sep, rest = _split_core(s)
        parts = core.split(".")
        if 0 < len(parts) < 3 and all(parts):
            parts += ["0"] * (3 - len(parts))
            parts = [p.lstrip("0") or "0" for p in parts]
        s = ".".join(parts) + sep + rest
    m = re.match(_STRICT, s)
    if not m:
        raise SemverError(f"could not parse {text!r} as semver")
    major, minor, patch, pre, build = m.groups()
    return Semver(
        int(major),
        int(minor),
        int(patch),
        tuple(pre.split(".")) if pre else (),
        tuple(build.split(".")) if build else (),
    )


def _split_core(s: str) -> tuple[str, str, str]:
    for i, ch in enumerate(s):
        if ch in "-+":
            return s[:i], ch, s[i + 1 :]
    return s, "", ""
