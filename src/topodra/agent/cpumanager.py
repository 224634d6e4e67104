"""The kubelet's CPU manager must be off (``cpuManagerPolicy: none``) for topodra to run.

With ``static`` the kubelet pins every Guaranteed container with whole CPUs to CPUs of its own
choosing (its ``cpu_manager_state`` file) and rewrites the cgroups to match on its reconcile loop,
so topodra's placement and the kubelet's would overwrite each other, and the kubelet would hand
a claim's CPUs to containers it pins itself. The agent therefore reads the kubelet's configuration
and its CPU manager state before it registers anywhere and refuses to start, in one line naming
the setting and the file, when either says ``static``.

A missing file says nothing (the kubelet's default policy is ``none``; a kubelet configured by
flags has no config file); an unreadable or malformed one is reported, since a kubelet that
cannot be checked may be pinning CPUs.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import yaml

__all__ = ["CPUManagerError", "check_cpu_manager", "kubelet_cpu_manager_policy"]

_MAX_BYTES = 4 << 20


class CPUManagerError(RuntimeError):
    """The kubelet runs a CPU manager topodra cannot work beside (one line)."""


def _read(path: Path) -> str | None:
    try:
        with path.open("rb") as f:
            data = f.read(_MAX_BYTES + 1)
    except FileNotFoundError:
        return None
    except OSError as err:
        raise CPUManagerError(f"cannot read {path} to check the kubelet's CPU manager: {err.strerror or err}") from None
    if len(data) > _MAX_BYTES:
        raise CPUManagerError(f"{path} is larger than {_MAX_BYTES} bytes; not a kubelet file")
    return data.decode("utf-8", errors="replace")


def _policy_in(doc: Any, key: str, path: Path) -> str:
    if doc is None:
        return "none"
    if not isinstance(doc, dict):
        raise CPUManagerError(f"{path}: expected a mapping, got {type(doc).__name__}; cannot check the kubelet's CPU manager")
    value = doc.get(key, "none")
    if not isinstance(value, str):
        raise CPUManagerError(f"{path}: {key} must be a string, got {value!r}")
    return value or "none"


def kubelet_cpu_manager_policy(config_file: Path, state_file: Path) -> tuple[str, Path] | None:
    """The CPU manager policy the kubelet runs other than ``none`` and the file that says so, or None.

    The state file is what the running kubelet wrote at its start (``policyName``), so it wins
    over the configuration (``cpuManagerPolicy``), which a restart would apply.
    """
    state = _read(state_file)
    if state is not None:
        try:
            doc = json.loads(state) if state.strip() else None
        except json.JSONDecodeError as err:
            raise CPUManagerError(f"{state_file}: not JSON ({err.msg} at line {err.lineno}); cannot check the kubelet's CPU manager") from None
        policy = _policy_in(doc, "policyName", state_file)
        if policy != "none":
            return policy, state_file
    config = _read(config_file)
    if config is not None:
        try:
            doc = yaml.safe_load(config)
        except yaml.YAMLError as err:
            raise CPUManagerError(f"{config_file}: not YAML ({err}); cannot check the kubelet's CPU manager") from None
        policy = _policy_in(doc, "cpuManagerPolicy", config_file)
        if policy != "none":
            return policy, config_file
    return None


def check_cpu_manager(config_file: Path, state_file: Path) -> None:
    """Raise ``CPUManagerError`` when the kubelet's CPU manager policy is not ``none``."""
    found = kubelet_cpu_manager_policy(config_file, state_file)
    if found is None:
        return
    policy, path = found
    raise CPUManagerError(
        f"the kubelet runs cpuManagerPolicy: {policy} ({path}); topodra requires cpuManagerPolicy: none "
        "(set it in the kubelet configuration, remove the kubelet's cpu_manager_state file and restart the kubelet)"
    )
