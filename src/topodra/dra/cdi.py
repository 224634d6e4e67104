"""CDI specs that hand a prepared claim's CPUs to its containers.

One spec file per claim, one CDI device ``claim-<uid>`` whose only edit is
the environment variable ``DRA_CPUSET_<uid>=<cpuset>``. The runtime adds it
to every container that references the claim; topodra's NRI side reads it at
CreateContainer, checks it against the prepared claim (a pod cannot forge
it) and pins the container to exactly those CPUs.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Final

from topodra.cpuset import CPUSet, CPUSetParseError
from topodra.dra.claims import ClaimError, check_uid
from topodra.dra.files import remove, replace_atomically

__all__ = [
    "CDI_CLASS",
    "CDI_KIND",
    "CDI_VENDOR",
    "CDI_VERSION",
    "ENV_PREFIX",
    "ClaimEnvError",
    "cdi_device_id",
    "cdi_device_name",
    "claim_spec",
    "env_variable",
    "parse_claim_env",
    "read_spec_cpus",
    "remove_spec",
    "spec_path",
    "spec_uids",
    "write_spec",
]

CDI_VENDOR: Final = "native.cpu"
CDI_CLASS: Final = "cpuset"
CDI_KIND: Final = f"{CDI_VENDOR}/{CDI_CLASS}"
#: The oldest CDI version that has everything used here (env edits), so older runtimes load it too.
CDI_VERSION: Final = "0.3.0"
ENV_PREFIX: Final = "DRA_CPUSET_"
_SPEC_PREFIX: Final = f"{CDI_VENDOR}-{CDI_CLASS}_claim-"
_UID_IN_NAME: Final = re.compile(re.escape(_SPEC_PREFIX) + r"([A-Za-z0-9-]+)\.json\Z")


class ClaimEnvError(ValueError):
    """A malformed or unexpected ``DRA_CPUSET_<uid>`` variable in a container's environment."""


def cdi_device_name(uid: str) -> str:
    return f"claim-{uid}"


def cdi_device_id(uid: str) -> str:
    """The fully qualified CDI name returned to the kubelet: ``native.cpu/cpuset=claim-<uid>``."""
    return f"{CDI_KIND}={cdi_device_name(uid)}"


def env_variable(uid: str) -> str:
    return f"{ENV_PREFIX}{uid}"


def claim_spec(uid: str, cpus: CPUSet) -> dict[str, Any]:
    """The CDI spec for one claim."""
    check_uid(uid)
    if not cpus:
        raise ClaimError(f"refusing a CDI spec with an empty cpuset for claim {uid}")
    return {
        "cdiVersion": CDI_VERSION,
        "kind": CDI_KIND,
        "devices": [
            {
                "name": cdi_device_name(uid),
                "containerEdits": {"env": [f"{env_variable(uid)}={cpus.format()}"]},
            }
        ],
    }


def spec_path(cdi_dir: Path, uid: str) -> Path:
    check_uid(uid)
    return cdi_dir / f"{_SPEC_PREFIX}{uid}.json"


def write_spec(cdi_dir: Path, uid: str, cpus: CPUSet) -> Path:
    """Write the claim's spec atomically (not flushed: the checkpoint is the durable record and
    ``Driver.restore`` rewrites specs from it); returns its path."""
    spec = claim_spec(uid, cpus)
    cdi_dir.mkdir(parents=True, exist_ok=True)
    path = spec_path(cdi_dir, uid)
    replace_atomically(path, json.dumps(spec, indent=2, sort_keys=True).encode() + b"\n")
    return path


def remove_spec(cdi_dir: Path, uid: str) -> bool:
    return remove(spec_path(cdi_dir, uid))


def read_spec_cpus(cdi_dir: Path, uid: str) -> CPUSet | None:
    """The cpuset in the claim's spec on disk, None when there is no spec."""
    path = spec_path(cdi_dir, uid)
    try:
        spec = json.loads(path.read_text())
        (env,) = spec["devices"][0]["containerEdits"]["env"]
        name, _, value = env.partition("=")
        if name != env_variable(uid):
            raise ValueError(f"unexpected variable {name!r}")
        return CPUSet.parse(value)
    except FileNotFoundError:
        return None
    except (ValueError, KeyError, IndexError, TypeError) as exc:
        raise ClaimError(f"CDI spec {path} is malformed: {exc}") from exc


def spec_uids(cdi_dir: Path) -> list[str]:
    """Claim UIDs of the specs this driver wrote in ``cdi_dir``."""
    if not cdi_dir.is_dir():
        return []
    out = []
    for p in cdi_dir.iterdir():
        m = _UID_IN_NAME.match(p.name)
        if m:
            out.append(m.group(1))
    return sorted(out)


def parse_claim_env(env: Sequence[str]) -> dict[str, CPUSet]:
    """The ``DRA_CPUSET_<uid>`` variables of a container environment, strictly.

    A variable with our prefix that is malformed (bad UID, bad or empty
    cpuset, or the same UID twice with different values) is an error, never
    ignored: it decides which CPUs a container gets.
    """
    out: dict[str, CPUSet] = {}
    for entry in env:
        name, eq, value = entry.partition("=")
        if not name.startswith(ENV_PREFIX):
            continue
        uid = name[len(ENV_PREFIX) :]
        try:
            check_uid(uid)
        except ClaimError as exc:
            raise ClaimEnvError(f"environment variable {name!r}: {exc}") from None
        if not eq:
            raise ClaimEnvError(f"environment variable {name!r} has no value")
        try:
            cpus = CPUSet.parse(value)
        except CPUSetParseError as exc:
            raise ClaimEnvError(f"environment variable {name!r}: {exc}") from None
        if not cpus:
            raise ClaimEnvError(f"environment variable {name!r} holds an empty cpuset")
        if uid in out and out[uid] != cpus:
            raise ClaimEnvError(f"environment variable {name!r} is set twice with different cpusets")
        out[uid] = cpus
    return out
