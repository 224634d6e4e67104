# mypy: disable-error-code="no-untyped-call"
"""The kubelet plugin over real unix sockets, with clients built from the same protos."""

from __future__ import annotations

import asyncio
import shutil
import socket
import stat
import tempfile
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import grpc
import grpc.aio
import pytest

from topodra.cpuset import CPUSet
from topodra.dra.devices import build_devices
from topodra.dra.driver import Driver
from topodra.dra.health import DeviceHealth
from topodra.dra.kubeletplugin import KubeletPlugin, PluginPaths, PluginSocketError
from topodra.dra.proto import (
    dra_v1_pb2,
    dra_v1_pb2_grpc,
    dra_v1beta1_pb2,
    dra_v1beta1_pb2_grpc,
    health_v1_pb2,
    health_v1_pb2_grpc,
    health_v1alpha1_pb2,
    health_v1alpha1_pb2_grpc,
    pluginregistration_pb2,
    pluginregistration_pb2_grpc,
)
from topodra.topology import synthetic_topology

from .dra_fakes import ClaimStore, RecordingPolicy, make_claim

TOPO = synthetic_topology("1s1n1l4c2t")


@pytest.fixture
def root() -> Iterator[Path]:
    # short path: unix socket paths are limited to 107 bytes
    d = Path(tempfile.mkdtemp(prefix="kp", dir="/tmp"))
    yield d
    shutil.rmtree(d, ignore_errors=True)


class Env:
    def __init__(self, root: Path) -> None:
        self.policy = RecordingPolicy(TOPO)
        self.store = ClaimStore()
        self.paths = PluginPaths(kubelet_root=root / "kubelet")
        self.driver = Driver(
            policy=self.policy,
            lock=asyncio.Lock(),
            fetch_claim=self.store.fetch,
            cdi_dir=root / "cdi",
            checkpoint_path=self.paths.checkpoint,
            devices=build_devices(TOPO),
            pool="node-a",
        )
        self.plugin = KubeletPlugin(self.driver, self.paths, health_interval=0.05)

    def channel(self, path: Path) -> grpc.aio.Channel:
        return grpc.aio.insecure_channel(f"unix:{path}")


async def with_env(root: Path, body: Any) -> Any:
    env = Env(root)
    async with env.plugin:
        return await body(env)


def test_registration_get_info_and_status(root: Path) -> None:
    async def body(env: Env) -> None:
        async with env.channel(env.paths.registration_socket) as ch:
            stub = pluginregistration_pb2_grpc.RegistrationStub(ch)
            info = await stub.GetInfo(pluginregistration_pb2.InfoRequest())
            assert info.type == "DRAPlugin"
            assert info.name == "native.cpu"
            assert info.endpoint == str(env.paths.dra_socket)
            assert Path(info.endpoint).is_absolute()
            assert list(info.supported_versions) == [
                "v1.DRAPlugin",
                "v1beta1.DRAPlugin",
                "v1.DRAResourceHealth",
                "v1alpha1.DRAResourceHealth",
            ]
            await stub.NotifyRegistrationStatus(pluginregistration_pb2.RegistrationStatus(plugin_registered=True))
            assert env.plugin.registered.is_set()
            assert env.plugin.registration_error == ""
            await stub.NotifyRegistrationStatus(
                pluginregistration_pb2.RegistrationStatus(plugin_registered=False, error="endpoint already registered")
            )
            assert env.plugin.registration_error == "endpoint already registered"

    asyncio.run(with_env(root, body))


def test_sockets_and_directory_mode(root: Path) -> None:
    async def body(env: Env) -> None:
        assert stat.S_ISSOCK(env.paths.dra_socket.stat().st_mode)
        assert stat.S_ISSOCK(env.paths.registration_socket.stat().st_mode)
        assert stat.S_IMODE(env.paths.plugin_dir.stat().st_mode) == 0o700
        assert env.paths.registration_socket == root / "kubelet" / "plugins_registry" / "native.cpu-reg.sock"
        assert env.paths.dra_socket == root / "kubelet" / "plugins" / "native.cpu" / "dra.sock"
        return None

    env = Env(root)
    asyncio.run(with_env(root, body))
    # a clean stop removes both sockets
    assert not env.paths.dra_socket.exists()
    assert not env.paths.registration_socket.exists()


def test_stale_socket_is_replaced_but_other_files_are_not(root: Path) -> None:
    paths = PluginPaths(kubelet_root=root / "kubelet")

    # a crashed plugin leaves its socket files behind
    for path in (paths.dra_socket, paths.registration_socket):
        path.parent.mkdir(parents=True, exist_ok=True)
        with socket.socket(socket.AF_UNIX) as sock:
            sock.bind(str(path))
        assert stat.S_ISSOCK(path.lstat().st_mode)

    async def restart(env: Env) -> None:
        async with env.channel(env.paths.registration_socket) as ch:
            info = await pluginregistration_pb2_grpc.RegistrationStub(ch).GetInfo(pluginregistration_pb2.InfoRequest())
            assert info.name == "native.cpu"

    asyncio.run(with_env(root, restart))
    paths.plugin_dir.mkdir(parents=True, exist_ok=True)
    paths.dra_socket.write_text("not a socket")
    with pytest.raises(PluginSocketError, match="not a socket"):
        asyncio.run(with_env(root, restart))


def test_too_long_socket_path_is_refused(root: Path) -> None:
    env = Env(root)
    env.plugin.paths = PluginPaths(kubelet_root=root / ("x" * 100))
    with pytest.raises(PluginSocketError, match="longer than 107 bytes"):
        asyncio.run(env.plugin.start())


@pytest.mark.parametrize(("pb2", "grpc_mod"), [(dra_v1_pb2, dra_v1_pb2_grpc), (dra_v1beta1_pb2, dra_v1beta1_pb2_grpc)])
def test_prepare_unprepare_over_grpc(root: Path, pb2: Any, grpc_mod: Any) -> None:
    async def body(env: Env) -> None:
        env.store.add(make_claim("u1", ["cpu2", "cpu3"], consumed=None))
        claim = env.store.claims[("default", "claim-u1")]
        claim["status"]["allocation"]["devices"]["results"][0]["shareID"] = "s-1"
        env.store.add(make_claim("bad", [], allocated=False))
        async with env.channel(env.paths.dra_socket) as ch:
            stub = grpc_mod.DRAPluginStub(ch)
            req = pb2.NodePrepareResourcesRequest(
                claims=[
                    pb2.Claim(namespace="default", uid="u1", name="claim-u1"),
                    pb2.Claim(namespace="default", uid="bad", name="claim-bad"),
                ]
            )
            resp = await stub.NodePrepareResources(req)
            assert set(resp.claims) == {"u1", "bad"}
            assert "not allocated" in resp.claims["bad"].error
            good = resp.claims["u1"]
            assert good.error == ""
            assert [(list(d.request_names), d.pool_name, d.device_name, list(d.cdi_device_ids)) for d in good.devices] == [
                (["cpu"], "node-a", "cpu2", ["native.cpu/cpuset=claim-u1"]),
                (["cpu"], "node-a", "cpu3", ["native.cpu/cpuset=claim-u1"]),
            ]
            if pb2 is dra_v1_pb2:
                assert good.devices[0].HasField("share_id")
                assert good.devices[0].share_id == "s-1"
                assert not good.devices[1].HasField("share_id")
            assert env.policy.claimed("u1") == CPUSet([2, 3])
            again = await stub.NodePrepareResources(req)
            assert again.claims["u1"] == good
            un = await stub.NodeUnprepareResources(
                pb2.NodeUnprepareResourcesRequest(
                    claims=[pb2.Claim(namespace="default", uid="u1", name="claim-u1"), pb2.Claim(namespace="x", uid="gone", name="y")]
                )
            )
            assert set(un.claims) == {"u1", "gone"}
            assert un.claims["u1"].error == ""
            assert un.claims["gone"].error == ""
            assert env.policy.claims() == {}

    asyncio.run(with_env(root, body))


def test_v1beta1_wire_has_no_share_id() -> None:
    assert "share_id" in dra_v1_pb2.Device.DESCRIPTOR.fields_by_name
    assert dra_v1_pb2.Device.DESCRIPTOR.fields_by_name["share_id"].number == 5
    assert "share_id" not in dra_v1beta1_pb2.Device.DESCRIPTOR.fields_by_name
    assert dra_v1_pb2.DESCRIPTOR.package == "k8s.io.kubelet.pkg.apis.dra.v1"
    assert dra_v1beta1_pb2.DESCRIPTOR.package == "k8s.io.kubelet.pkg.apis.dra.v1beta1"
    assert health_v1alpha1_pb2.DESCRIPTOR.package == "v1alpha1"
    assert health_v1_pb2.DESCRIPTOR.package == "v1"
    assert health_v1_pb2.DESCRIPTOR.services_by_name["DRAResourceHealth"].full_name == "v1.DRAResourceHealth"
    assert pluginregistration_pb2.DESCRIPTOR.package == "pluginregistration"


def test_wire_bytes_match_the_kubelet_encoding() -> None:
    # field numbers and types fixed by the kubelet's api.proto: hand-encoded reference bytes
    claim = dra_v1_pb2.Claim(namespace="ns", uid="u", name="n")
    assert claim.SerializeToString() == b"\n\x02ns\x12\x01u\x1a\x01n"
    dev = dra_v1_pb2.Device(request_names=["r"], pool_name="p", device_name="d", cdi_device_ids=["c"], share_id="s")
    assert dev.SerializeToString() == b"\n\x01r\x12\x01p\x1a\x01d\"\x01c*\x01s"
    info = pluginregistration_pb2.PluginInfo(type="t", name="n", endpoint="e", supported_versions=["v"])
    assert info.SerializeToString() == b"\n\x01t\x12\x01n\x1a\x01e\"\x01v"
    h = health_v1alpha1_pb2.DeviceHealth(
        device=health_v1alpha1_pb2.DeviceIdentifier(pool_name="p", device_name="d"),
        health=health_v1alpha1_pb2.HEALTHY,
        last_updated_time=1,
        health_check_timeout_seconds=2,
        message="m",
    )
    assert h.SerializeToString() == b"\n\x06\n\x01p\x12\x01d\x10\x01\x18\x01 \x02*\x01m"
    # v1 is the same wire format under another package
    h1 = health_v1_pb2.DeviceHealth(
        device=health_v1_pb2.DeviceIdentifier(pool_name="p", device_name="d"),
        health=health_v1_pb2.UNHEALTHY,
        last_updated_time=1,
        health_check_timeout_seconds=2,
        message="m",
    )
    assert h1.SerializeToString() == b"\n\x06\n\x01p\x12\x01d\x10\x02\x18\x01 \x02*\x01m"
    assert [v.name for v in health_v1_pb2.HealthStatus.DESCRIPTOR.values] == ["UNKNOWN", "HEALTHY", "UNHEALTHY"]


def test_health_stream_sends_the_full_list(root: Path) -> None:
    async def body(env: Env) -> None:
        async with env.channel(env.paths.dra_socket) as ch:
            stub = health_v1alpha1_pb2_grpc.DRAResourceHealthStub(ch)
            call = stub.NodeWatchResources(health_v1alpha1_pb2.NodeWatchResourcesRequest())
            seen = []
            stream: AsyncIterator[Any] = call.__aiter__()
            for _ in range(2):
                seen.append(await stream.__anext__())
            call.cancel()
            for msg in seen:
                names = [d.device.device_name for d in msg.devices]
                assert sorted(names) == sorted(f"cpu{c}" for c in TOPO.online)
                assert len(names) == len(TOPO.online)
                assert all(d.health == health_v1alpha1_pb2.HEALTHY for d in msg.devices)
                assert all(d.device.pool_name == "node-a" for d in msg.devices)
                assert all(d.health_check_timeout_seconds == 30 for d in msg.devices)
                assert all(d.last_updated_time > 1_600_000_000 for d in msg.devices)

    asyncio.run(with_env(root, body))


def test_health_change_reaches_both_streams_at_once(root: Path) -> None:
    """A change is sent on v1 and v1alpha1 streams right away, not at the next interval."""

    async def body(env: Env) -> None:
        sick: dict[str, str] = {}
        env.plugin._health = lambda: [DeviceHealth(d.name, d.name not in sick, sick.get(d.name, "")) for d in env.driver.devices]
        env.plugin._health_interval = 3600.0  # only a change can produce a second message
        async with env.channel(env.paths.dra_socket) as ch:
            calls = [
                health_v1_pb2_grpc.DRAResourceHealthStub(ch).NodeWatchResources(health_v1_pb2.NodeWatchResourcesRequest()),
                health_v1alpha1_pb2_grpc.DRAResourceHealthStub(ch).NodeWatchResources(
                    health_v1alpha1_pb2.NodeWatchResourcesRequest()
                ),
            ]
            streams: list[AsyncIterator[Any]] = [c.__aiter__() for c in calls]
            for s in streams:
                first = await s.__anext__()
                assert {d.health for d in first.devices} == {health_v1_pb2.HEALTHY}
            sick["cpu3"] = "CPU 3 offline"
            env.plugin.health_changed()
            for s in streams:
                msg = await asyncio.wait_for(s.__anext__(), 10)
                bad = {d.device.device_name: d.message for d in msg.devices if d.health == health_v1_pb2.UNHEALTHY}
                assert bad == {"cpu3": "CPU 3 offline"}
                assert len(msg.devices) == len(TOPO.online)  # still the complete list
            for c in calls:
                c.cancel()

    asyncio.run(with_env(root, body))


def test_unknown_method_is_unimplemented(root: Path) -> None:
    async def body(env: Env) -> None:
        async with env.channel(env.paths.dra_socket) as ch:
            call: Any = ch.unary_unary("/k8s.io.kubelet.pkg.apis.dra.v1alpha4.Node/NodePrepareResources")
            with pytest.raises(grpc.aio.AioRpcError) as info:
                await call(b"")
            assert info.value.code() == grpc.StatusCode.UNIMPLEMENTED

    asyncio.run(with_env(root, body))
