"""The kubelet plugin: registration and DRA gRPC services on unix sockets (grpc.aio).

Two servers, as the kubelet expects:

- ``<kubelet>/plugins/<driver>/dra.sock``: ``v1.DRAPlugin`` and
  ``v1beta1.DRAPlugin`` (Prepare/Unprepare, delegated to ``Driver``) and the
  ``v1.DRAResourceHealth`` and ``v1alpha1.DRAResourceHealth`` streams (the
  full device list each time, each device's health from ``health``: sent at
  once when ``health_changed()`` is called, and every ``health_interval``
  seconds). Started first, so the endpoint works when the kubelet learns of it.
- ``<kubelet>/plugins_registry/<driver>-reg.sock``: ``pluginregistration``
  GetInfo / NotifyRegistrationStatus; its appearance triggers registration.

The plugin directory is created with mode 0700 (private to the driver; the
agent keeps its checkpoint in ``stateDir``, ``PluginPaths.checkpoint`` is for
a driver run on its own);
stale sockets are removed before binding and both sockets on ``stop()``.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import stat
import time
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final, Protocol

import grpc
import grpc.aio

from topodra.dra.claims import ClaimRef
from topodra.dra.devices import DRIVER, Device
from topodra.dra.driver import PrepareResult, UnprepareResult
from topodra.dra.health import MESSAGE_MAX, DeviceHealth
from topodra.dra.proto import dra_v1_pb2 as v1
from topodra.dra.proto import dra_v1beta1_pb2 as v1beta1
from topodra.dra.proto import health_v1_pb2 as health_v1
from topodra.dra.proto import health_v1alpha1_pb2 as health_v1alpha1
from topodra.dra.proto import pluginregistration_pb2 as reg

__all__ = [
    "DRA_PLUGIN_TYPE",
    "HEALTH_INTERVAL",
    "HEALTH_TIMEOUT_SECONDS",
    "SUPPORTED_SERVICES",
    "KubeletPlugin",
    "PluginDriver",
    "PluginPaths",
    "PluginSocketError",
]

log = logging.getLogger(__name__)

DRA_PLUGIN_TYPE: Final = "DRAPlugin"
#: Advertised services, most preferred first: the kubelet takes the first DRA service it knows,
#: and v1 health when it knows both health services (v1alpha1 for 1.34-1.36 kubelets).
SUPPORTED_SERVICES: Final = (
    "v1.DRAPlugin",
    "v1beta1.DRAPlugin",
    "v1.DRAResourceHealth",
    "v1alpha1.DRAResourceHealth",
)
_V1_SERVICE: Final = "k8s.io.kubelet.pkg.apis.dra.v1.DRAPlugin"
_V1BETA1_SERVICE: Final = "k8s.io.kubelet.pkg.apis.dra.v1beta1.DRAPlugin"
#: gRPC service name -> generated module (the two protos differ only in their package).
_HEALTH_SERVICES: Final = {"v1.DRAResourceHealth": health_v1, "v1alpha1.DRAResourceHealth": health_v1alpha1}
_REGISTRATION_SERVICE: Final = "pluginregistration.Registration"
_SUN_PATH_MAX: Final = 107  # 108 bytes including the NUL
#: Seconds between two full health lists when nothing changes (changes are sent at once).
HEALTH_INTERVAL: Final = 10.0
#: ``health_check_timeout_seconds``: the kubelet marks a device Unknown when no message names
#: it for this long. Three intervals: a busy loop or a stream reconnect (the kubelet retries
#: every 5 s) does not flip healthy devices to Unknown, and a dead agent shows within 30 s.
HEALTH_TIMEOUT_SECONDS: Final = 30


class PluginDriver(Protocol):
    """What the plugin serves: ``dra.driver.Driver`` (and test doubles of other drivers)."""

    @property
    def driver_name(self) -> str: ...
    @property
    def pool(self) -> str: ...
    @property
    def devices(self) -> Sequence[Device]: ...
    async def prepare(self, claims: Sequence[ClaimRef]) -> dict[str, PrepareResult]: ...
    async def unprepare(self, claims: Sequence[ClaimRef]) -> dict[str, UnprepareResult]: ...


class PluginSocketError(OSError):
    """A socket path that cannot be used (too long, or a non-socket file in the way)."""


@dataclass(frozen=True, slots=True)
class PluginPaths:
    """Where the kubelet looks: paths must be the same inside and outside the driver's container."""

    kubelet_root: Path = Path("/var/lib/kubelet")
    driver: str = DRIVER

    @property
    def plugin_dir(self) -> Path:
        return self.kubelet_root / "plugins" / self.driver

    @property
    def dra_socket(self) -> Path:
        return self.plugin_dir / "dra.sock"

    @property
    def registry_dir(self) -> Path:
        return self.kubelet_root / "plugins_registry"

    @property
    def registration_socket(self) -> Path:
        return self.registry_dir / f"{self.driver}-reg.sock"

    @property
    def checkpoint(self) -> Path:
        return self.plugin_dir / "checkpoint.json"


def _claims_of(request: Any) -> list[ClaimRef]:
    return [ClaimRef(c.namespace, c.uid, c.name) for c in request.claims]


def _prepare_response(module: Any, results: dict[str, PrepareResult], *, with_share_id: bool) -> Any:
    response = module.NodePrepareResourcesResponse()
    for uid, result in results.items():
        entry = response.claims[uid]
        if result.error:
            entry.error = result.error
            continue
        for d in result.devices:
            dev = entry.devices.add(
                request_names=[d.request], pool_name=d.pool, device_name=d.device, cdi_device_ids=list(result.cdi_ids)
            )
            if with_share_id and d.share_id:
                dev.share_id = d.share_id
    return response


def _unprepare_response(module: Any, results: dict[str, UnprepareResult]) -> Any:
    response = module.NodeUnprepareResourcesResponse()
    for uid, result in results.items():
        response.claims[uid].error = result.error
    return response


def _prepare_socket(path: Path) -> None:
    if len(os.fsencode(path)) > _SUN_PATH_MAX:
        raise PluginSocketError(f"socket path {path} is longer than {_SUN_PATH_MAX} bytes (sun_path limit)")
    try:
        mode = path.lstat().st_mode
    except FileNotFoundError:
        return
    if not stat.S_ISSOCK(mode):
        raise PluginSocketError(f"{path} exists and is not a socket; refusing to replace it")
    path.unlink()


class KubeletPlugin:
    """Serves a ``Driver`` (any ``PluginDriver``) to the kubelet."""

    def __init__(
        self,
        driver: PluginDriver,
        paths: PluginPaths | None = None,
        *,
        health: Callable[[], Sequence[DeviceHealth]] | None = None,
        health_interval: float = HEALTH_INTERVAL,
        health_timeout_seconds: int = HEALTH_TIMEOUT_SECONDS,
    ) -> None:
        """``health``: each device's health now (default: every driver device healthy)."""
        self._driver = driver
        self.paths = paths or PluginPaths(driver=driver.driver_name)
        self._health = health or (lambda: [DeviceHealth(d.name, True) for d in self._driver.devices])
        self._health_interval = health_interval
        self._health_timeout = health_timeout_seconds
        self._health_wake = asyncio.Event()  # replaced (after being set) at every change
        self.health_streams = 0  # open NodeWatchResources streams
        self._dra_server: grpc.aio.Server | None = None
        self._reg_server: grpc.aio.Server | None = None
        self.registered = asyncio.Event()
        self.registration_error = ""
        self._stopping = asyncio.Event()

    # --- lifecycle ---------------------------------------------------------------------------
    async def start(self) -> None:
        """Start the DRA service, then announce it on the registration socket."""
        paths = self.paths
        paths.plugin_dir.mkdir(parents=True, exist_ok=True)
        os.chmod(paths.plugin_dir, 0o700)
        paths.registry_dir.mkdir(parents=True, exist_ok=True)
        _prepare_socket(paths.dra_socket)
        _prepare_socket(paths.registration_socket)
        self._stopping.clear()

        dra = grpc.aio.server()
        dra.add_generic_rpc_handlers(
            (
                self._dra_handler(_V1_SERVICE, v1, with_share_id=True),
                self._dra_handler(_V1BETA1_SERVICE, v1beta1, with_share_id=False),
                *(self._health_handler(service, module) for service, module in _HEALTH_SERVICES.items()),
            )
        )
        self._bind(dra, paths.dra_socket)
        await dra.start()
        self._dra_server = dra

        registration = grpc.aio.server()
        registration.add_generic_rpc_handlers(
            (
                grpc.method_handlers_generic_handler(
                    _REGISTRATION_SERVICE,
                    {
                        "GetInfo": grpc.unary_unary_rpc_method_handler(
                            self._get_info,
                            request_deserializer=reg.InfoRequest.FromString,
                            response_serializer=reg.PluginInfo.SerializeToString,
                        ),
                        "NotifyRegistrationStatus": grpc.unary_unary_rpc_method_handler(
                            self._notify_registration_status,
                            request_deserializer=reg.RegistrationStatus.FromString,
                            response_serializer=reg.RegistrationStatusResponse.SerializeToString,
                        ),
                    },
                ),
            )
        )
        try:
            self._bind(registration, paths.registration_socket)
            await registration.start()
        except BaseException:
            await self.stop(0)
            raise
        self._reg_server = registration
        log.info("kubelet plugin %s serving %s, registering at %s", self._driver.driver_name, paths.dra_socket, paths.registration_socket)

    @staticmethod
    def _bind(server: grpc.aio.Server, path: Path) -> None:
        if server.add_insecure_port(f"unix:{path}") == 0:
            raise PluginSocketError(f"cannot listen on {path}")

    async def stop(self, grace: float = 1.0) -> None:
        """Withdraw the registration socket first, then stop serving; remove both sockets."""
        self._stopping.set()
        self.health_changed()  # open streams end
        for server, path in ((self._reg_server, self.paths.registration_socket), (self._dra_server, self.paths.dra_socket)):
            if server is not None:
                await server.stop(grace)
            with contextlib.suppress(FileNotFoundError):
                path.unlink()
        self._reg_server = self._dra_server = None

    async def __aenter__(self) -> KubeletPlugin:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    # --- registration --------------------------------------------------------------------------
    async def _get_info(self, request: Any, context: grpc.aio.ServicerContext[Any, Any]) -> Any:
        return reg.PluginInfo(
            type=DRA_PLUGIN_TYPE,
            name=self._driver.driver_name,
            endpoint=str(self.paths.dra_socket.absolute()),
            supported_versions=list(SUPPORTED_SERVICES),
        )

    async def _notify_registration_status(self, request: Any, context: grpc.aio.ServicerContext[Any, Any]) -> Any:
        if request.plugin_registered:
            self.registration_error = ""
            log.info("kubelet registered %s", self._driver.driver_name)
        else:
            self.registration_error = request.error or "the kubelet refused the registration"
            log.error("kubelet did not register %s: %s", self._driver.driver_name, self.registration_error)
        self.registered.set()
        return reg.RegistrationStatusResponse()

    # --- DRA ---------------------------------------------------------------------------------------
    def _dra_handler(self, service: str, module: Any, *, with_share_id: bool) -> grpc.GenericRpcHandler:
        async def prepare(request: Any, context: grpc.aio.ServicerContext[Any, Any]) -> Any:
            results = await self._driver.prepare(_claims_of(request))
            return _prepare_response(module, results, with_share_id=with_share_id)

        async def unprepare(request: Any, context: grpc.aio.ServicerContext[Any, Any]) -> Any:
            results = await self._driver.unprepare(_claims_of(request))
            return _unprepare_response(module, results)

        return grpc.method_handlers_generic_handler(
            service,
            {
                "NodePrepareResources": grpc.unary_unary_rpc_method_handler(
                    prepare,
                    request_deserializer=module.NodePrepareResourcesRequest.FromString,
                    response_serializer=module.NodePrepareResourcesResponse.SerializeToString,
                ),
                "NodeUnprepareResources": grpc.unary_unary_rpc_method_handler(
                    unprepare,
                    request_deserializer=module.NodeUnprepareResourcesRequest.FromString,
                    response_serializer=module.NodeUnprepareResourcesResponse.SerializeToString,
                ),
            },
        )

    def _health_handler(self, service: str, module: Any) -> grpc.GenericRpcHandler:
        async def watch(request: Any, context: grpc.aio.ServicerContext[Any, Any]) -> AsyncIterator[Any]:
            async for message in self._watch_health(module):
                yield message

        return grpc.method_handlers_generic_handler(
            service,
            {
                "NodeWatchResources": grpc.unary_stream_rpc_method_handler(
                    watch,
                    request_deserializer=module.NodeWatchResourcesRequest.FromString,
                    response_serializer=module.NodeWatchResourcesResponse.SerializeToString,
                )
            },
        )

    def health_changed(self) -> None:
        """A device's health changed: every open stream sends the full list now."""
        wake, self._health_wake = self._health_wake, asyncio.Event()
        wake.set()

    def health_snapshot(self, module: Any = health_v1) -> Any:
        """The full device list with each device's health, as ``module``'s message."""
        now = int(time.time())
        return module.NodeWatchResourcesResponse(
            devices=[
                module.DeviceHealth(
                    device=module.DeviceIdentifier(pool_name=self._driver.pool, device_name=h.name),
                    health=module.HEALTHY if h.healthy else module.UNHEALTHY,
                    last_updated_time=now,
                    health_check_timeout_seconds=self._health_timeout,
                    message=h.message[:MESSAGE_MAX],
                )
                for h in self._health()
            ]
        )

    async def _watch_health(self, module: Any) -> AsyncIterator[Any]:
        self.health_streams += 1
        try:
            while not self._stopping.is_set():
                wake = self._health_wake  # taken before the snapshot: a change after it wakes us
                yield self.health_snapshot(module)
                with contextlib.suppress(asyncio.TimeoutError):
                    await asyncio.wait_for(wake.wait(), self._health_interval)
        finally:
            self.health_streams -= 1
