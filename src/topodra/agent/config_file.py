"""Reading the agent's configuration file safely: who may write it, how big and how deep it
may be, and one clear line for every way the bytes can be wrong (never a traceback)."""

from __future__ import annotations

import os
import stat
from pathlib import Path
from typing import Any

import yaml

__all__ = [
    "ConfigError",
    "MAX_CONFIG_BYTES",
    "MAX_CONFIG_DEPTH",
    "MAX_CONFIG_VALUES",
    "check_file_mode",
    "read_config_file",
]

#: The largest configuration read (a ConfigMap holds at most 1 MiB).
MAX_CONFIG_BYTES = 1024 * 1024
#: The most values a configuration may hold with its YAML aliases expanded (an alias bomb
#: would make validation and error messages take exponential time).
MAX_CONFIG_VALUES = 100_000
#: The deepest nesting read, as written and with aliases expanded (a configuration is a few
#: levels deep; the YAML composer and the validators recurse).
MAX_CONFIG_DEPTH = 64


class ConfigError(ValueError):
    """A configuration file that cannot be used; the message says where and why."""


def check_file_mode(path: Path, st: os.stat_result) -> None:
    """Refuse a file others could rewrite: the configuration names code the agent runs
    (``devices.attributeHook``) and decides every container's CPUs."""
    if st.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        raise ConfigError(
            f"configuration {path} is writable by group or others (mode {stat.filemode(st.st_mode)}); "
            f"it names code the agent runs: chmod go-w {path}"
        )
    if st.st_uid not in (0, os.geteuid()):
        raise ConfigError(
            f"configuration {path} is owned by uid {st.st_uid}, neither root nor the agent's user "
            f"(uid {os.geteuid()}); it names code the agent runs"
        )


def _decode(raw: bytes, path: Path) -> str:
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as err:
        line = raw.count(b"\n", 0, err.start) + 1
        column = err.start - (raw.rfind(b"\n", 0, err.start) + 1) + 1
        bad = raw[err.start : err.end].hex()
        raise ConfigError(f"{path}:{line}:{column}: not a text file (byte 0x{bad} is not UTF-8)") from None


def _check_depth(text: str, path: Path) -> None:
    """Refuse deep nesting from the event stream (iterative) before the recursive composer
    meets it; a configuration is a few levels deep."""
    depth = 0
    for event in yaml.parse(text, Loader=yaml.SafeLoader):
        if isinstance(event, yaml.MappingStartEvent | yaml.SequenceStartEvent):
            depth += 1
            if depth > MAX_CONFIG_DEPTH:
                mark = event.start_mark
                where = f"{path}:{mark.line + 1}:{mark.column + 1}" if mark is not None else str(path)
                raise ConfigError(f"{where}: invalid YAML: nested deeper than {MAX_CONFIG_DEPTH} levels")
        elif isinstance(event, yaml.MappingEndEvent | yaml.SequenceEndEvent):
            depth -= 1


def _expanded_shape(data: Any) -> tuple[int, int]:
    """(values, depth) of ``data`` once YAML aliases are expanded (a shared list counts once per
    reference); raises ``ValueError`` for a structure that contains itself."""
    shapes: dict[int, tuple[int, int]] = {}
    open_: set[int] = set()

    def shape(value: Any) -> tuple[int, int]:
        if not isinstance(value, dict | list):
            return 1, 0
        key = id(value)
        if key in shapes:
            return shapes[key]
        if key in open_:
            raise ValueError("an alias refers to a value that contains it")
        open_.add(key)
        children = [shape(c) for c in ([*value.keys(), *value.values()] if isinstance(value, dict) else value)]
        open_.discard(key)
        shapes[key] = (1 + sum(n for n, _ in children), 1 + max((d for _, d in children), default=0))
        return shapes[key]

    return shape(data)


def read_config_file(path: Path, *, check_mode: bool = True) -> Any:
    """The YAML document at ``path``, or ``ConfigError`` saying in one line what is wrong.
    ``check_mode``: refuse a file others could rewrite (the agent's own reading; a command that
    only shows what a configuration would do passes False)."""
    try:
        with path.open("rb") as f:
            if check_mode:
                check_file_mode(path, os.fstat(f.fileno()))
            raw = f.read(MAX_CONFIG_BYTES + 1)
    except OSError as err:
        raise ConfigError(f"cannot read {path}: {err.strerror or err}") from None
    if len(raw) > MAX_CONFIG_BYTES:
        raise ConfigError(f"{path}: larger than {MAX_CONFIG_BYTES} bytes (a ConfigMap's limit)")
    text = _decode(raw, path)
    try:
        _check_depth(text, path)
        data = yaml.safe_load(text)
    except yaml.reader.ReaderError as err:
        char = err.character if isinstance(err.character, int) else ord(err.character)
        raise ConfigError(f"{path}: invalid YAML: character U+{char:04X} at offset {err.position} is not allowed") from None
    except yaml.YAMLError as err:
        mark = getattr(err, "problem_mark", None)
        where = f"{path}:{mark.line + 1}:{mark.column + 1}" if mark is not None else str(path)
        problem = getattr(err, "problem", None) or str(err).splitlines()[0]
        raise ConfigError(f"{where}: invalid YAML: {problem}") from None
    try:
        values, depth = _expanded_shape(data)
    except ValueError as err:
        raise ConfigError(f"{path}: invalid YAML: {err}") from None
    except RecursionError:  # deeper than Python recurses: far beyond the limit
        values, depth = 0, MAX_CONFIG_DEPTH + 1
    if depth > MAX_CONFIG_DEPTH:
        raise ConfigError(f"{path}: invalid YAML: its aliases nest deeper than {MAX_CONFIG_DEPTH} levels")
    if values > MAX_CONFIG_VALUES:
        raise ConfigError(f"{path}: invalid YAML: its aliases expand to more than {MAX_CONFIG_VALUES} values")
    return data
