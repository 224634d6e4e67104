"""Semantic versions (semver 2.0.0) as the Kubernetes CEL ``semver`` library sees them."""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["Semver", "SemverError", "parse_semver"]


class SemverError(ValueError):
    """A string that is not a semantic version."""


_NUMBERS = "0123456789"
_ALPHANUM = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ-" + _NUMBERS


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
    """A semantic version as blang/semver v4's ``Parse`` reads it (its error messages word for
    word); with ``normalize``, first as the Kubernetes semver library's ``normalizeAndParse``:
    a ``v`` prefix dropped, leading zeros trimmed, missing minor and patch filled with 0."""
    s = text
    if normalize:
        s = s.removeprefix("v")
        parts = s.split(".", 2)
        for i, part in enumerate(parts):
            if len(part) > 1:
                part = part.lstrip("0")
                if not part or part[0] not in _NUMBERS:
                    part = "0" + part
                parts[i] = part
        if len(parts) < 3:
            if any(c in parts[-1] for c in "+-"):
                raise SemverError("Short version cannot contain PreRelease/Build meta data")
            parts += ["0"] * (3 - len(parts))
        s = ".".join(parts)
    return _parse(s)


def _only(s: str, allowed: str) -> bool:
    return all(c in allowed for c in s)


def _number(s: str, what: str) -> int:
    if not _only(s, _NUMBERS):
        raise SemverError(f"Invalid character(s) found in {what} number {_quote(s)}")
    if len(s) > 1 and s[0] == "0":
        raise SemverError(f"{what.capitalize()} number must not contain leading zeroes {_quote(s)}")
    if not s or int(s) >= 2**64:
        raise SemverError(f'strconv.ParseUint: parsing {_quote(s)}: {"invalid syntax" if not s else "value out of range"}')
    return int(s)


def _quote(s: str) -> str:
    """Go's %q for the ASCII strings these messages quote."""
    return '"' + s.replace("\\", "\\\\").replace('"', '\\"') + '"'


def _parse(s: str) -> Semver:
    """blang/semver v4 ``Parse``."""
    if not s:
        raise SemverError("Version string empty")
    parts = s.split(".", 2)
    if len(parts) != 3:
        raise SemverError("No Major.Minor.Patch elements found")
    major = _number(parts[0], "major")
    minor = _number(parts[1], "minor")
    patch_str = parts[2]
    build: list[str] = []
    pre: list[str] = []
    if "+" in patch_str:
        patch_str, _, rest = patch_str.partition("+")
        build = rest.split(".")
    if "-" in patch_str:
        patch_str, _, rest = patch_str.partition("-")
        pre = rest.split(".")
    patch = _number(patch_str, "patch")
    for p in pre:
        if not p:
            raise SemverError("Prerelease is empty")
        if _only(p, _NUMBERS):
            if len(p) > 1 and p[0] == "0":
                raise SemverError(f"Numeric PreRelease version must not contain leading zeroes {_quote(p)}")
        elif not _only(p, _ALPHANUM):
            raise SemverError(f"Invalid character(s) found in prerelease {_quote(p)}")
    for b in build:
        if not b:
            raise SemverError("Build meta data is empty")
        if not _only(b, _ALPHANUM):
            raise SemverError(f"Invalid character(s) found in build meta data {_quote(b)}")
    return Semver(major, minor, patch, tuple(pre), tuple(build))
