"""The optional extras (pyproject.toml): which command needs which, checked before it starts.

A command that needs an extra checks for it first, so a core install gets one line naming the
extra to install instead of running part of the way and then failing on an import.
"""

from __future__ import annotations

from importlib.util import find_spec

__all__ = ["EXTRA_PACKAGES", "MissingExtra", "package_installed", "require_extra"]

#: The importable packages each extra brings.
EXTRA_PACKAGES: dict[str, tuple[str, ...]] = {"sim": ("numpy", "matplotlib", "cel_expr_python", "re2")}


class MissingExtra(RuntimeError):
    """An extra the command needs is not installed (one line naming it)."""


def package_installed(name: str) -> bool:
    """True when the package can be imported (without importing it)."""
    return find_spec(name) is not None


def require_extra(extra: str, command: str) -> None:
    """Raise ``MissingExtra`` unless every package of ``extra`` can be imported."""
    missing = [p for p in EXTRA_PACKAGES[extra] if not package_installed(p)]
    if missing:
        raise MissingExtra(
            f"topodra {command} needs the optional '{extra}' dependencies ({', '.join(missing)} not installed): "
            f"pip install 'topodra[{extra}]'"
        )
