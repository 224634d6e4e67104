"""The agent's configuration: one YAML file, one pydantic model tree.

Every error names the file, the field path and the bad value. Keys are
camelCase as in Kubernetes objects (snake_case is accepted too). This module
checks the file on its own; ``topodra.agent.validation`` adds what only the
machine can say, and both run for ``--check``, start and reload alike.
"""

from __future__ import annotations

import os
import re
import reprlib
import socket
import stat
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator
from pydantic.alias_generators import to_camel

from topodra.dra.devices import DeviceModelConfig
from topodra.nri.stub import check_plugin_index, check_plugin_name
from topodra.policy.config import PolicyConfig

__all__ = ["AgentConfig", "ConfigError", "MAX_CONFIG_BYTES", "check_file_mode", "load_config", "parse_config"]

#: The largest configuration read (a ConfigMap holds at most 1 MiB).
MAX_CONFIG_BYTES = 1024 * 1024
#: The most values a configuration may hold with its YAML aliases expanded (an alias bomb
#: would make validation and error messages take exponential time).
MAX_CONFIG_VALUES = 100_000
MAX_CONFIG_DEPTH = 64
_REPR = reprlib.Repr()
_REPR.maxlevel, _REPR.maxlist, _REPR.maxdict, _REPR.maxstring, _REPR.maxother = 3, 6, 6, 60, 60
_DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")


class ConfigError(ValueError):
    """A configuration file that cannot be used; the message says where and why."""


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, alias_generator=to_camel, populate_by_name=True)


def _absolute(value: Path) -> Path:
    """Host paths must not depend on the directory the agent happens to start in."""
    if not value.is_absolute():
        raise ValueError(f"must be an absolute path, got relative {str(value)!r}")
    return value


class NRIConfig(_Section):
    enabled: bool = True
    socket: Path = Path("/var/run/nri/nri.sock")
    plugin_name: str = "topodra"
    plugin_index: str = "90"
    #: Push container changes caused outside NRI events (claim release, reconfiguration)
    #: with an unsolicited UpdateContainers at once.
    unsolicited_updates: bool = True

    _socket = field_validator("socket")(_absolute)

    @field_validator("plugin_index")
    @classmethod
    def _idx(cls, value: str) -> str:
        check_plugin_index(value)  # the runtime's own rule
        return value

    @field_validator("plugin_name")
    @classmethod
    def _name(cls, value: str) -> str:
        check_plugin_name(value)
        return value


class DRAConfig(_Section):
    enabled: bool = True
    #: Publish ResourceSlices (off: the kubelet plugin still serves Prepare/Unprepare).
    publish_slices: bool = True


class KubeConfig(_Section):
    #: API server URL; empty: in-cluster service account, else ``kubeconfig``.
    server: str = ""
    kubeconfig: Path | None = None
    token_file: Path | None = None


def _default_node_name() -> str:
    return os.environ.get("NODE_NAME") or socket.gethostname().lower()


class AgentConfig(_Section):
    """Everything ``topodra agent`` needs (see docs/configuration.md)."""

    node_name: str = Field(default_factory=_default_node_name)
    #: Where sysfs is mounted (``/host`` in the DaemonSet, whose /sys is at /host/sys).
    sysfs_root: Path = Path("/")
    #: Use a fixture or synthetic machine instead of sysfs (testing and the playground).
    topology: str | None = None
    policy: PolicyConfig = Field(default_factory=PolicyConfig)
    devices: DeviceModelConfig = Field(default_factory=DeviceModelConfig)
    kubelet_root: Path = Path("/var/lib/kubelet")
    cdi_dir: Path = Path("/var/run/cdi")
    state_dir: Path = Path("/var/lib/topodra")
    #: /metrics, /healthz and /readyz (Prometheus and the kubelet's probes); "" turns it off.
    metrics_address: str = ":9402"
    #: /state (claim UIDs, container ids, CPU sets): by default the unix socket
    #: ``stateDir/state.sock`` (mode 0600); HOST:PORT or ``unix:/path`` elsewhere, "" off.
    state_address: str | None = None
    nri: NRIConfig = Field(default_factory=NRIConfig)
    dra: DRAConfig = Field(default_factory=DRAConfig)
    kube: KubeConfig = Field(default_factory=KubeConfig)
    log_level: Literal["debug", "info", "warning", "error"] = "info"
    log_format: Literal["text", "json"] = "text"

    @field_validator("node_name")
    @classmethod
    def _node(cls, value: str) -> str:
        if len(value) > 253 or not _DNS_SUBDOMAIN.match(value):
            raise ValueError(f"node name must be a DNS subdomain (lower case), got {value!r}")
        return value

    _paths = field_validator("sysfs_root", "kubelet_root", "cdi_dir", "state_dir")(_absolute)

    @field_validator("metrics_address")
    @classmethod
    def _addr(cls, value: str) -> str:
        if value:
            from topodra.agent.http import parse_address

            parse_address(value)
        return value

    @field_validator("state_address")
    @classmethod
    def _state_addr(cls, value: str | None) -> str | None:
        if value:
            from topodra.agent.http import parse_listen

            parse_listen(value)
        return value

    @property
    def state_listen(self) -> str:
        """Where /state is served ("" for nowhere)."""
        if self.state_address is None:
            return f"unix:{self.state_dir / 'state.sock'}"
        return self.state_address

    @property
    def checkpoint_path(self) -> Path:
        return self.state_dir / "dra-checkpoint.json"

    @property
    def plugin_dir(self) -> Path:
        return self.kubelet_root / "plugins" / "native.cpu"

    @property
    def registry_dir(self) -> Path:
        return self.kubelet_root / "plugins_registry"


def _format_errors(err: ValidationError, source: str) -> str:
    lines = [f"invalid configuration in {source}:"]
    for e in err.errors():
        path = ".".join(str(p) for p in e["loc"]) or "(top level)"
        value = e.get("input")
        shown = _REPR.repr(value)
        if len(shown) > 80:
            shown = shown[:77] + "..."
        msg = e["msg"].removeprefix("Value error, ")
        lines.append(f"  {path}: {msg} (got {shown})")
    return "\n".join(lines)


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
                raise ConfigError(f"invalid YAML in {where}: nested deeper than {MAX_CONFIG_DEPTH} levels")
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


def parse_config(data: Any, source: str = "<config>") -> AgentConfig:
    """Validate a parsed YAML document (None or {} gives the defaults)."""
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise ConfigError(f"invalid configuration in {source}: expected a mapping, got {type(data).__name__}")
    try:
        return AgentConfig.model_validate(data)
    except ValidationError as err:
        raise ConfigError(_format_errors(err, source)) from None


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
        raise ConfigError(f"invalid configuration in {path}:{line}:{column}: not UTF-8 (byte 0x{bad})") from None


def load_config(path: str | os.PathLike[str]) -> AgentConfig:
    """Read and validate the YAML file at ``path`` (its content and its permissions)."""
    p = Path(path)
    try:
        with p.open("rb") as f:
            check_file_mode(p, os.fstat(f.fileno()))
            raw = f.read(MAX_CONFIG_BYTES + 1)
    except OSError as err:
        raise ConfigError(f"cannot read configuration {p}: {err.strerror or err}") from None
    if len(raw) > MAX_CONFIG_BYTES:
        raise ConfigError(f"configuration {p} is larger than {MAX_CONFIG_BYTES} bytes (a ConfigMap's limit)")
    text = _decode(raw, p)
    try:
        _check_depth(text, p)
        data = yaml.safe_load(text)
    except yaml.reader.ReaderError as err:
        char = err.character if isinstance(err.character, int) else ord(err.character)
        raise ConfigError(f"invalid YAML in {p}: character U+{char:04X} at offset {err.position} is not allowed") from None
    except yaml.YAMLError as err:
        mark = getattr(err, "problem_mark", None)
        where = f"{p}:{mark.line + 1}:{mark.column + 1}" if mark is not None else str(p)
        problem = getattr(err, "problem", None) or str(err).splitlines()[0]
        raise ConfigError(f"invalid YAML in {where}: {problem}") from None
    try:
        values, depth = _expanded_shape(data)
    except ValueError as err:
        raise ConfigError(f"invalid YAML in {p}: {err}") from None
    except RecursionError:
        depth = MAX_CONFIG_DEPTH + 1
    if depth > MAX_CONFIG_DEPTH:
        raise ConfigError(f"invalid YAML in {p}: its aliases nest deeper than {MAX_CONFIG_DEPTH} levels")
    if values > MAX_CONFIG_VALUES:
        raise ConfigError(f"invalid YAML in {p}: its aliases expand to more than {MAX_CONFIG_VALUES} values")
    return parse_config(data, str(p))
