"""One wording for every configuration error: ``FILE: key.path: what is wrong (got VALUE)``.

The agent's configuration, the policy's (``policy pools|place --config``, a workload's inline
``config``, a snapshot's), and the device model's (``dra devices --config``) are pydantic models
and dataclasses; their validation errors go through :func:`describe`, so a misspelt key reads
``unknown key`` (with the nearest known one) at any depth, and no raw pydantic text or URL
reaches the user.
"""

from __future__ import annotations

import dataclasses
import difflib
import re
import reprlib
import typing
from collections.abc import Sequence
from typing import Any

from pydantic import AliasChoices, BaseModel, ValidationError
from pydantic.alias_generators import to_camel

__all__ = ["describe", "show_value"]

_REPR = reprlib.Repr()
_REPR.maxlevel, _REPR.maxlist, _REPR.maxdict, _REPR.maxstring, _REPR.maxother = 3, 6, 6, 60, 60
_UNKNOWN = ("extra_forbidden", "unexpected_keyword_argument")
_LEADING_KEY = re.compile(r"(\w+): (.+)\Z", re.S)
#: a section's check that names its key another way: "KEY[.SUBKEY] must ..., got VALUE"
_KEY_MUST = re.compile(r"(\w+(?:\.\w+)*) (must .+?)(?:, got .+)?\Z", re.S)


def show_value(value: Any) -> str:
    """A value as an error shows it: short, one line."""
    shown = _REPR.repr(value).replace("\n", "\\n")
    return shown if len(shown) <= 80 else shown[:77] + "..."


def _keys(model: Any) -> dict[str, Any]:
    """The keys a section takes (as the file spells them) -> the type of each."""
    if isinstance(model, type) and issubclass(model, BaseModel):
        out: dict[str, Any] = {}
        for name, info in model.model_fields.items():
            alias = info.validation_alias
            key = alias.choices[0] if isinstance(alias, AliasChoices) else (alias if isinstance(alias, str) else info.alias)
            out[str(key or name)] = info.annotation
        return out
    if dataclasses.is_dataclass(model) and isinstance(model, type):
        hints = typing.get_type_hints(model)
        return {to_camel(f.name): hints.get(f.name) for f in dataclasses.fields(model)}
    return {}


def _section(model: Any, loc: Sequence[Any]) -> Any:
    """The model of the section at ``loc`` (None when it is not a model)."""
    for part in loc:
        keys = _keys(model)
        if not keys:
            return None
        by_name = {**keys, **{k.lower(): v for k, v in keys.items()}}
        model = by_name.get(str(part)) or by_name.get(str(part).lower())
        for arg in typing.get_args(model) or ():  # X | None
            if _keys(arg):
                model = arg
    return model


def _what(error: Any, model: Any) -> tuple[list[Any], str]:
    """(the key path, what is wrong) of one pydantic error."""
    loc = list(error["loc"])
    kind, msg = error["type"], str(error["msg"])
    if kind in _UNKNOWN:
        known = list(_keys(_section(model, loc[:-1])))
        near = difflib.get_close_matches(str(loc[-1]), known, n=1, cutoff=0.6)
        return loc, f"unknown key; did you mean {near[0]}?" if near else f"unknown key (known: {', '.join(known)})"
    if kind == "missing":
        return loc, "required"
    msg = msg.removeprefix("Value error, ").removeprefix("Assertion failed, ")
    msg = re.sub(r"^Input should be\b", "must be", msg)
    leading = _LEADING_KEY.match(msg) or _KEY_MUST.match(msg)
    if leading:  # a section's own check names its key
        keys = leading.group(1).split(".")
        if loc and keys[0] == str(loc[-1]) and len(keys) > 1:
            keys = keys[1:]  # "taints.offline ..." from the taints section itself
        if keys[0] in _keys(_section(model, loc)):
            return [*loc, *keys], leading.group(2)
    return loc, msg


def _at(value: Any, keys: Sequence[Any]) -> Any:
    """The value at ``keys`` (as the file spells them, or snake_case) under a section's input."""
    for key in keys:
        if not isinstance(value, dict):
            return None
        name = str(key)
        snake = re.sub(r"(?<!^)(?=[A-Z])", "_", name).lower()
        value = value.get(name, value.get(snake))
    return value


def describe(err: ValidationError, source: str, model: Any, prefix: Sequence[str] = ()) -> str:
    """Every error of ``err`` (validating ``model``), one line each: ``source: key.path: what is
    wrong (got VALUE)``; ``prefix`` is the path of the section in its file."""
    lines = []
    for error in err.errors():
        loc, what = _what(error, model)
        path = ".".join(str(p) for p in [*prefix, *loc]) or "(top level)"
        value = error.get("input")
        named = loc[len(error["loc"]) :]
        if named:  # the key a section's check named: show its value, not the section's
            value = _at(value, named)
        shown = show_value(value)
        got = "" if error["type"] == "missing" or shown in what else f" (got {shown})"
        lines.append(f"{source}: {path}: {what}{got}")
    return "\n".join(lines)
