"""One loader for "which machine?": a spec string -> ``Topology``.

Every command that takes a machine (``--topology``), the agent's ``topology``
setting, the simulator and the playground go through ``load_machine``, so the
forms and their errors are the same everywhere:

- ``host`` (or ``/``): this machine's sysfs;
- a directory (a path with ``/`` or an existing folder): a sysfs root holding ``sys/``;
- ``synthetic:SPEC`` or a bare spec such as ``2s1d2n2l8c2t``: a generated machine;
- ``fixture:NAME`` or a bare fixture name: one of hwloc's recorded trees (test data,
  found through ``topodra.topology.fixtures`` only when asked for).
"""

from __future__ import annotations

import re
from pathlib import Path

from topodra.topology.errors import TopologyError
from topodra.topology.model import Topology

__all__ = ["MachineSpecError", "load_machine", "machine_label", "TOPOLOGY_HELP"]

#: The help text of every ``--topology`` option.
TOPOLOGY_HELP = (
    "The machine: 'host' (this one), a sysfs root directory, 'synthetic:SPEC' or a bare spec "
    "(e.g. 2s1d2n2l8c2t: sockets, dies, NUMA nodes, L3 groups, cores, threads, E-cores), "
    "or 'fixture:NAME' (a hwloc test tree; topodra topology --list-fixtures)."
)

_SPEC = re.compile(r"(\d+[sdnlcte])+(\+\w+)*\Z", re.IGNORECASE)


class MachineSpecError(TopologyError):
    """A machine spec that names no machine, or one that cannot be read."""


def _is_path(spec: str) -> bool:
    return "/" in spec or spec.startswith(".") or Path(spec).is_dir()


def machine_label(spec: str | None) -> str:
    """A short human name for what ``load_machine(spec)`` reads."""
    if spec in (None, "", "host", "/"):
        return "this machine"
    assert spec is not None
    if spec.startswith(("synthetic:", "fixture:")):
        return spec
    if _is_path(spec):
        return f"sysfs at {spec}"
    if _SPEC.match(spec):
        return f"synthetic:{spec}"
    return f"fixture:{spec}"


def load_machine(spec: str | None, *, host_root: Path | str = "/") -> Topology:
    """Read the machine ``spec`` names; ``None``/``host`` reads ``host_root`` (default ``/``).

    Raises ``MachineSpecError`` (a ``TopologyError``) with one line naming the spec.
    """
    from topodra.topology.synthetic import SpecError, synthetic_topology
    from topodra.topology.sysfs import read_topology

    text = (spec or "host").strip()
    try:
        if text in ("host", "/"):
            return read_topology(host_root)
        if text.startswith("synthetic:"):
            return synthetic_topology(text.removeprefix("synthetic:"))
        if text.startswith("fixture:"):
            return _fixture(text.removeprefix("fixture:"), text)
        if _is_path(text):
            return read_topology(_sysfs_root(text))
        if _SPEC.match(text) or (text[:1].isdigit() and not _is_fixture(text)):
            return synthetic_topology(text)
        return _fixture(text, text)
    except MachineSpecError:
        raise
    except (TopologyError, SpecError, OSError) as err:
        raise MachineSpecError(f"topology {text!r}", str(err)) from None


def _sysfs_root(text: str) -> str:
    """A directory to read as a sysfs root; a path that is not one is said to be so."""
    path = Path(text)
    if not path.exists():
        raise MachineSpecError(f"topology {text!r}", "no such directory")
    if not path.is_dir():
        raise MachineSpecError(f"topology {text!r}", "a file, not a directory holding sys/ (a sysfs root)")
    return text


def _is_fixture(name: str) -> bool:
    from topodra.topology.fixtures import FixtureError, fixture_tarball

    try:
        fixture_tarball(name)
    except FixtureError:
        return False
    return True


def _fixture(name: str, text: str) -> Topology:
    """Fixture ``name``, written ``text`` (``fixture:NAME`` or a bare word)."""
    from topodra.topology.fixtures import FixtureError, unpacked_fixture
    from topodra.topology.sysfs import read_topology

    try:
        root = unpacked_fixture(name)
    except FixtureError as err:
        if not str(err).startswith("no fixture"):
            raise MachineSpecError(f"topology {text!r}", str(err).splitlines()[0]) from None
        if text.startswith("fixture:"):
            raise MachineSpecError(f"topology {text!r}", "no such fixture (topodra topology --list-fixtures)") from None
        if text.startswith("-") and text[1:].isdigit():
            raise MachineSpecError(f"topology {text!r}", "a CPU count or machine spec cannot be negative") from None
        raise MachineSpecError(
            f"topology {text!r}",
            "not 'host', a directory, a machine spec such as 2s1d2n2l8c2t, or a fixture name "
            "(topodra topology --list-fixtures)",
        ) from None
    return read_topology(root)
