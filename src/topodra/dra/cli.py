"""``topodra dra``: inspect the DRA devices and slices of a machine, run the API server double."""

from __future__ import annotations

import enum
import json
from pathlib import Path
from typing import Annotated, Any

import typer

from topodra.topology.machine import TOPOLOGY_HELP, load_machine

__all__ = ["register"]

dra_app = typer.Typer(
    name="dra",
    help="The native.cpu DRA driver: devices, ResourceSlices, DeviceClass, and an API server double.",
    no_args_is_help=True,
    rich_markup_mode="rich",
)


class Model(enum.StrEnum):
    CPU = "cpu"
    CORE = "core"
    CORE_OR_THREAD = "core-or-thread"
    GROUPED = "grouped"


class GroupBy(enum.StrEnum):
    NUMA = "numa"
    L3 = "l3"
    SOCKET = "socket"
    MACHINE = "machine"


class Format(enum.StrEnum):
    TABLE = "table"
    JSON = "json"
    YAML = "yaml"


class ObjectFormat(enum.StrEnum):
    """Kubernetes objects print as what kubectl applies: no table."""

    YAML = "yaml"
    JSON = "json"


TopologyOpt = Annotated[str | None, typer.Option("--topology", "-t", help=TOPOLOGY_HELP)]
ModelOpt = Annotated[Model | None, typer.Option("--model", help="Device model: one device per CPU, per core, cores and threads side by side (core-or-thread), or grouped.")]
GroupOpt = Annotated[GroupBy | None, typer.Option("--group-by", help="Grouping of the grouped model.")]
ReservedOpt = Annotated[str, typer.Option("--reserved", help="Reserved CPUs (kernel list format), left out of the devices.")]
ConfigOpt = Annotated[
    Path | None,
    typer.Option("--config", help="YAML file with the device model settings (model, group_by, add/rename/drop_attributes, attribute_hook).", dir_okay=False),
]


def _fail(message: str) -> typer.Exit:
    from topodra.cli_errors import fail

    return fail(message, 1)


def _device_settings(path: Path) -> tuple[dict[str, Any], tuple[str, ...]]:
    """The device model settings of ``path`` (the agent's whole configuration, checked whole, or
    its ``devices`` section alone) and the path of their keys in the file."""
    from topodra.agent.config import config_section
    from topodra.agent.config_file import ConfigError, read_config_file

    data, prefix = config_section(read_config_file(path, check_mode=False), str(path), "devices")
    if data is not None and not isinstance(data, dict):
        where = ".".join(prefix) or "(top level)"
        raise ConfigError(f"{path}: {where}: must be a mapping of device model settings (got {type(data).__name__})")
    return dict(data or {}), prefix


def _devices(
    topology: str | None, model: Model | None, group_by: GroupBy | None, reserved: str, config: Path | None
) -> tuple[Any, list[Any]]:
    from pydantic import ValidationError

    from topodra.agent.config_file import ConfigError
    from topodra.config_errors import describe
    from topodra.cpuset import CPUSet, CPUSetParseError
    from topodra.dra.attributes import AttributeValidationError
    from topodra.dra.devices import DeviceModelConfig, DeviceModelError, build_devices

    raw: dict[str, Any] = {}
    prefix: tuple[str, ...] = ()
    try:
        if config is not None:
            loaded, prefix = _device_settings(config)
            raw.update(loaded)
        if model is not None:
            raw["model"] = model.value
        if group_by is not None:
            raw["group_by"] = group_by.value
        cfg = DeviceModelConfig.from_mapping(raw)
        exclude = CPUSet.parse(reserved)
    except ConfigError as exc:
        raise _fail(str(exc)) from None
    except ValidationError as exc:
        raise _fail(describe(exc, str(config or "--model/--group-by"), DeviceModelConfig, prefix)) from None
    except CPUSetParseError as exc:
        raise _fail(f"--reserved: {exc}") from None
    try:
        from topodra.topology.errors import TopologyError

        try:
            topo = load_machine(topology)
        except TopologyError as exc:
            raise _fail(str(exc)) from None
        unknown = exclude - topo.online
        if unknown:
            raise _fail(f"--reserved: CPUs {unknown} are not online on this machine ({topo.online})")
        if not topo.online - exclude:
            raise _fail(f"--reserved {exclude}: leaves no CPU of {topo.online} for containers (the agent refuses that)")
        devices = build_devices(topo, cfg, reserved=exclude)
        if not devices:
            raise _fail(f"--reserved {exclude}: leaves no CPU of {topo.online} for devices")
        return topo, devices
    except (AttributeValidationError, DeviceModelError) as exc:
        raise _fail(str(exc)) from None


def _emit(obj: Any, fmt: Format, *, documents: bool = False) -> None:
    """JSON, or YAML (Kubernetes objects as a multi-document stream when ``documents``)."""
    import yaml

    if fmt is Format.JSON:
        typer.echo(json.dumps(obj, indent=2))
    elif documents and isinstance(obj, list):
        typer.echo(yaml.safe_dump_all(obj, sort_keys=False), nl=False)
    else:
        typer.echo(yaml.safe_dump(obj, sort_keys=False), nl=False)


@dra_app.command("devices")
def devices_command(
    topology: TopologyOpt = None,
    model: ModelOpt = None,
    group_by: GroupOpt = None,
    reserved: ReservedOpt = "",
    config: ConfigOpt = None,
    output: Annotated[Format, typer.Option("--format", "-f", help="table, or the API's Device JSON/YAML.")] = Format.TABLE,
) -> None:
    """Show the devices this machine publishes as driver native.cpu.

    Examples:

    \b
      topodra dra devices
      topodra dra devices --topology fixture:20em64t-hybrid-1p6c2t+2ca4co1t --reserved 0-1
      topodra dra devices --topology 2s1d2n2l8c2t --model grouped --group-by numa -f yaml
    """
    _, devices = _devices(topology, model, group_by, reserved, config)
    if output is not Format.TABLE:
        _emit([d.to_api() for d in devices], output)
        return
    from rich.console import Console

    from topodra.dra.attributes import attribute_to_api
    from topodra.texttable import Column, render

    columns = [
        ("coreType", "type"),
        ("package", "pkg"),
        ("resource.kubernetes.io/numaNode", "numa"),
        ("core", "core"),
        ("l3Cache", "L3"),
        ("smtSibling", "sib"),
        ("isolated", "iso"),
        ("maxFreq", "MHz"),
    ]
    shown = {k for k, _ in columns}
    extra: set[str] = set()
    rows = []
    for d in devices:
        cells = []
        for k, _ in columns:
            v = d.attributes.get(k)
            cells.append("" if v is None else json.dumps(next(iter(attribute_to_api(v).values()))).strip('"'))
        extra |= set(d.attributes) - shown
        cap = ", ".join(f"{k}={c.value}" for k, c in d.capacity.items())
        rows.append([d.name, str(d.cpus), *cells, cap + (" shared" if d.allow_multiple_allocations else "")])
    console = Console()
    table = [Column("device"), Column("cpus", breaks=","), *(Column(h, breaks=",") for _, h in columns)]
    table.append(Column("capacity", "cap", breaks=", "))
    console.print(render(table, rows, console.width, f"{len(devices)} native.cpu devices"))
    console.print("all attributes: --format yaml", highlight=False)
    if extra:
        console.print(f"other attributes: {', '.join(sorted(extra))}", highlight=False)
    tainted: dict[str, list[str]] = {}
    for d in devices:
        for t in d.taints:
            value = f"={t['value']}" if t.get("value") else ""
            tainted.setdefault(f"{t['key']}{value}:{t['effect']}", []).append(d.name)
    for name, which in tainted.items():
        console.print(f"taint {name}: {', '.join(which)}", highlight=False)


@dra_app.command("slices")
def slices_command(
    node: Annotated[str, typer.Option("--node", help="Node name (the pool name).")] = "",
    topology: TopologyOpt = None,
    model: ModelOpt = None,
    group_by: GroupOpt = None,
    reserved: ReservedOpt = "",
    config: ConfigOpt = None,
    generation: Annotated[int, typer.Option("--generation", min=1, help="Pool generation to stamp.")] = 1,
    output: Annotated[ObjectFormat, typer.Option("--format", "-f", help="yaml or json.")] = ObjectFormat.YAML,
) -> None:
    """Print the ResourceSlices the driver would publish for this node."""
    import socket

    from topodra.dra.slices import build_slices

    node = node or socket.gethostname().lower()
    _, devices = _devices(topology, model, group_by, reserved, config)
    try:
        slices = build_slices(node, devices, generation=generation)
    except ValueError as exc:
        raise _fail(str(exc)) from None
    _emit(slices, Format(output.value), documents=True)


@dra_app.command("deviceclass")
def deviceclass_command(
    output: Annotated[ObjectFormat, typer.Option("--format", "-f", help="yaml or json.")] = ObjectFormat.YAML,
) -> None:
    """Print the native.cpu DeviceClass."""
    from topodra.dra.devices import device_class

    _emit(device_class(), Format(output.value))


@dra_app.command("check-claim")
def check_claim_command(
    files: Annotated[list[Path], typer.Argument(help="YAML/JSON files of ResourceClaims, ResourceClaimTemplates and DeviceClasses.", dir_okay=False, metavar="FILE")],
    model: ModelOpt = None,
) -> None:
    """Check claims, templates and classes offline: what a kube-apiserver 1.36 would refuse, and
    the native.cpu parameters (opaque CpuConfig).

    One line per problem, FILE:LINE: Kind/name path: what (got VALUE), and exit 1; with --model,
    also the fields that do not apply to that device model.

    \b
      topodra dra check-claim examples/cpu-config.yaml
      topodra dra check-claim claim.yaml --model cpu
    """
    from topodra.dra.params import check_object
    from topodra.yamldocs import YamlFileError, expand_lists, load_documents

    failed = False
    for path in files:
        try:
            docs = expand_lists(load_documents(path))
        except YamlFileError as exc:
            typer.echo(str(exc), err=True)
            failed = True
            continue
        objects = configs = 0
        for doc in docs:
            count, problems = check_object(doc.obj, model=model.value if model is not None else None)
            if isinstance(doc.obj, dict) and doc.obj.get("kind") in ("DeviceClass", "ResourceClaim", "ResourceClaimTemplate"):
                objects += 1
            configs += count
            for problem in [*_api_problems(doc.obj), *map(str, problems)]:
                typer.echo(f"{doc.source}: {problem}")
                failed = True
        if not objects:
            typer.echo(f"{path}: no DeviceClass, ResourceClaim or ResourceClaimTemplate to check", err=True)
            failed = True
        elif not failed:
            typer.echo(f"{path}: {configs} {'configuration' if configs == 1 else 'configurations'} of native.cpu in {objects} object(s): ok")
    raise typer.Exit(1 if failed else 0)


def _api_problems(obj: object) -> list[str]:
    """What a kube-apiserver 1.36 would refuse in a DeviceClass, claim or template, in its words
    (the API server double's validation; selectors are compiled when the CEL engine is installed)."""
    from topodra.embedded.validation import (
        validate_claim_template,
        validate_device_class,
        validate_resource_claim,
    )

    validators = {"DeviceClass": validate_device_class, "ResourceClaim": validate_resource_claim, "ResourceClaimTemplate": validate_claim_template}
    if not isinstance(obj, dict) or obj.get("kind") not in validators:
        return []
    meta: dict[str, Any] = obj["metadata"] if isinstance(obj.get("metadata"), dict) else {}
    # kubectl fills in the namespace: a file without one is not wrong
    namespaced = {**obj, "metadata": {"namespace": "default", **meta}} if obj["kind"] != "DeviceClass" else obj
    head = f"{obj['kind']}/{meta.get('name') or '?'}"
    return [f"{head} {e.field}: {e.message}" for e in validators[obj["kind"]](namespaced, None)]


@dra_app.command("apiserver")
def apiserver_command(
    port: Annotated[int, typer.Option("--port", min=0, max=65535, help="TCP port on 127.0.0.1 (0: any free port).")] = 0,
    load: Annotated[
        list[Path] | None, typer.Option("--load", help="Manifests (multi-document YAML) to create at start.", dir_okay=False)
    ] = None,
    feature_gates: Annotated[
        str,
        typer.Option(
            "--feature-gates",
            help="Gates as a real API server takes them, e.g. DRANodeAllocatableResources=true (default: 1.36's, off).",
        ),
    ] = "",
) -> None:
    """Run the in-memory Kubernetes API server double on 127.0.0.1 until interrupted.

    It serves nodes, namespaces, pods, resourceslices, deviceclasses, resourceclaims and
    resourceclaimtemplates with the API's validation, for trying the driver without a cluster.
    A disabled gate's fields are dropped as a real server drops them.
    """
    import asyncio

    from rich.console import Console

    from topodra.embedded.apiserver import ApiServer
    from topodra.embedded.store import Store
    from topodra.gates import FeatureGateError, parse_feature_gates
    from topodra.gates import feature_gates as with_defaults
    from topodra.kube.errors import ApiError
    from topodra.yamldocs import YamlFileError, expand_lists, load_documents

    console = Console()
    try:
        gates = parse_feature_gates(feature_gates)
    except FeatureGateError as exc:
        raise _fail(f"--feature-gates: {exc}") from None

    async def main() -> None:
        async with ApiServer(Store(gates=with_defaults(gates)), port=port) as server:
            for path in load or []:
                try:
                    docs = [d.obj for d in expand_lists(load_documents(path))]
                    server.store.load(docs)
                except YamlFileError as exc:
                    raise _fail(str(exc)) from None
                except ApiError as exc:
                    raise _fail(f"{path}: {exc}") from None
                console.print(f"loaded {len(docs)} object(s) from {path}")
            console.print(f"[bold]API server double listening on {server.url}[/bold] (Ctrl-C to stop)")
            await asyncio.Event().wait()

    try:
        asyncio.run(main())
    except KeyboardInterrupt:
        console.print("stopped")
    except OSError as exc:
        raise _fail(f"cannot listen on port {port}: {exc}") from None


def register(app: typer.Typer) -> None:
    app.add_typer(dra_app)
