"""The agent's configuration: one YAML file, one pydantic model tree.

Every error names the file, the field path and the bad value. Keys are
camelCase as in Kubernetes objects (snake_case is accepted too). This module
checks the file on its own; ``topodra.agent.config_check`` adds what only the
machine can say, and both run for ``--check``, start and reload alike.
"""

from __future__ import annotations

import os
import re
import socket
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator
from pydantic.alias_generators import to_camel

from topodra.agent.config_file import MAX_CONFIG_BYTES, ConfigError, check_file_mode, read_config_file
from topodra.config_errors import describe, show_value
from topodra.dra.devices import DeviceModelConfig, yaml_switches
from topodra.nri.stub import check_plugin_index, check_plugin_name
from topodra.policy.config import PolicyConfig

__all__ = [
    "AgentConfig",
    "ConfigError",
    "MAX_CONFIG_BYTES",
    "check_file_mode",
    "config_section",
    "load_config",
    "parse_config",
]

_DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")


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
    #: How container changes made outside NRI events (claim release, reconfiguration) reach the
    #: containers at once: ``unsolicited`` UpdateContainers, or ``replies`` (the cgroup written
    #: now, the update carried in the next event reply); ``auto`` picks by the runtime's NRI
    #: version (agent/delivery.py).
    delivery: Literal["auto", "unsolicited", "replies"] = "auto"

    @model_validator(mode="before")
    @classmethod
    def _retired(cls, data: Any) -> Any:
        if isinstance(data, dict) and {"unsolicitedUpdates", "unsolicited_updates"} & data.keys():
            raise ValueError(
                "unsolicitedUpdates was replaced by delivery: auto (the default), unsolicited or replies"
                " (what false meant)"
            )
        return data

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
    #: At most one slice write of a new offer per this many seconds: a grant after a quiet spell is
    #: published at once, a burst of them together (the window in which a just-granted CPU is
    #: still offered grows by up to this much).
    publish_delay: float = Field(default=0.1, ge=0, le=10)


class KubeConfig(_Section):
    #: API server URL; empty: in-cluster service account, else ``kubeconfig``.
    server: str = ""
    kubeconfig: Path | None = None
    #: ``server``'s bearer token, read again when the server answers 401 (a rotated token).
    token_file: Path | None = None
    #: The CA bundle (PEM) that signs ``server``'s certificate; none: the system's trust store.
    ca_file: Path | None = None

    @field_validator("server")
    @classmethod
    def _url(cls, value: str) -> str:
        from urllib.parse import urlsplit

        if value:
            try:
                url = urlsplit(value)
                url.port  # noqa: B018 -- raises on a port that is not a number
            except ValueError as exc:
                raise ValueError(f"must be an http:// or https:// URL ({exc})") from None
            if url.scheme not in ("http", "https") or not url.hostname:
                raise ValueError("must be an http:// or https:// URL with a host, e.g. https://10.0.0.1:6443")
        return value


class HotplugConfig(_Section):
    #: Follow CPUs and NUMA nodes going offline/online and the isolated set changing.
    enabled: bool = True
    #: Seconds between two reads of the online/isolated/node files (sysfs has no inotify).
    interval: float = Field(default=2.0, gt=0, le=3600)


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
    #: The kubelet's configuration file, read for ``cpuManagerPolicy`` (agent/cpumanager.py);
    #: default ``kubeletRoot/config.yaml``.
    kubelet_config: Path | None = None
    #: The kubelet's CPU manager state; default ``kubeletRoot/cpu_manager_state``.
    kubelet_cpu_manager_state: Path | None = None
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
    hotplug: HotplugConfig = Field(default_factory=HotplugConfig)
    log_level: Literal["debug", "info", "warning", "error"] = "info"
    log_format: Literal["text", "json"] = "text"

    @field_validator("devices", mode="before")
    @classmethod
    def _switches(cls, value: Any) -> Any:
        return yaml_switches(value)  # ``nodeAllocatable: off`` unquoted is YAML's false

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

    @field_validator("kubelet_config", "kubelet_cpu_manager_state")
    @classmethod
    def _optional_path(cls, value: Path | None) -> Path | None:
        return None if value is None else _absolute(value)

    @property
    def kubelet_config_file(self) -> Path:
        return self.kubelet_config or self.kubelet_root / "config.yaml"

    @property
    def cpu_manager_state(self) -> Path:
        return self.kubelet_cpu_manager_state or self.kubelet_root / "cpu_manager_state"

    @property
    def plugin_dir(self) -> Path:
        return self.kubelet_root / "plugins" / "native.cpu"

    @property
    def registry_dir(self) -> Path:
        return self.kubelet_root / "plugins_registry"


def parse_config(data: Any, source: str = "<config>") -> AgentConfig:
    """Validate a parsed YAML document (None or {} gives the defaults)."""
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise ConfigError(f"{source}: (top level): must be a mapping of settings (got {show_value(data)})")
    try:
        return AgentConfig.model_validate(data)
    except ValidationError as err:
        raise ConfigError(describe(err, source, AgentConfig)) from None


def config_section(data: Any, source: str, section: Literal["policy", "devices"]) -> tuple[Any, tuple[str, ...]]:
    """(the ``section`` settings, the path of their keys) from a file holding either the agent's
    whole configuration or that section alone; an agent configuration is checked whole first, so
    a command given the agent's own file reports its errors as the agent does."""
    keys = set(AgentConfig.model_fields) | {f.alias for f in AgentConfig.model_fields.values() if f.alias}
    if isinstance(data, dict) and keys & set(data):
        parse_config(data, source)
        return data.get(section) or {}, (section,)
    return data, ()


def load_config(path: str | os.PathLike[str]) -> AgentConfig:
    """Read and validate the YAML file at ``path`` (its permissions, bytes and content)."""
    return parse_config(read_config_file(Path(path)), str(path))
