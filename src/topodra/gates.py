"""Kubernetes feature gates that change what topodra's peers do: their 1.36 defaults and the
``--feature-gates`` flag's grammar (``A=true,B=false``, as component-base's ``featureGate.Set``).

The simulator's scheduler, the API server double and the playground read the same gates, so a
scenario states a gate once and every peer follows it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Final

__all__ = ["DEFAULTS", "LIST_TYPE_ATTRIBUTES", "NODE_ALLOCATABLE", "FeatureGateError", "feature_gates", "parse_feature_gates"]

#: KEP-5517: claimed node-allocatable resources (``cpu``) count against the node's allocatable.
NODE_ALLOCATABLE: Final = "DRANodeAllocatableResources"

#: List-typed device attribute values (``ints``, ``strings``...): kept by the API server, seen by
#: the scheduler's CEL (its constraints still match no list in 1.36: docs/dra.md).
LIST_TYPE_ATTRIBUTES: Final = "DRAListTypeAttributes"

#: The gates topodra models, at their Kubernetes 1.36 defaults (alpha: off).
DEFAULTS: Final[Mapping[str, bool]] = {NODE_ALLOCATABLE: False, LIST_TYPE_ATTRIBUTES: False}

_TRUE: Final = frozenset({"1", "t", "T", "TRUE", "true", "True"})
_FALSE: Final = frozenset({"0", "f", "F", "FALSE", "false", "False"})


class FeatureGateError(ValueError):
    """A ``--feature-gates`` value that cannot be read; the message says which entry and why."""


def parse_feature_gates(text: str) -> dict[str, bool]:
    """``"A=true,B=false"`` -> ``{"A": True, "B": False}`` (Go's ``strconv.ParseBool`` spellings);
    only the gates in ``DEFAULTS`` are known."""
    out: dict[str, bool] = {}
    for entry in text.split(","):
        if not entry:
            continue
        key, sep, raw = entry.partition("=")
        key, raw = key.strip(), raw.strip()
        if not sep:
            raise FeatureGateError(f"missing bool value for {key}")
        if raw in _TRUE:
            value = True
        elif raw in _FALSE:
            value = False
        else:
            raise FeatureGateError(f"invalid value of {key}={raw}: not a bool (true or false)")
        if key not in DEFAULTS:
            raise FeatureGateError(f"unrecognized feature gate: {key} (topodra models {', '.join(sorted(DEFAULTS))})")
        out[key] = value
    return out


def feature_gates(overrides: Mapping[str, bool] | None = None) -> dict[str, bool]:
    """Every gate topodra models: the 1.36 defaults with ``overrides`` applied."""
    gates = dict(DEFAULTS)
    for key, value in (overrides or {}).items():
        if key not in DEFAULTS:
            raise FeatureGateError(f"unrecognized feature gate: {key} (topodra models {', '.join(sorted(DEFAULTS))})")
        gates[key] = value
    return gates
