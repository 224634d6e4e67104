"""``topodra policy``: show the pool tree and try placements without a cluster.

``pools`` prints the pools the policy builds for a machine and a config;
``place`` runs a workload file (claims and containers) through the policy and
prints where everything lands, so an operator can check a config or an
annotation before rolling it out.
"""

from __future__ import annotations

import enum
import json
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from topodra.cli_errors import print_error
from topodra.topology.machine import TOPOLOGY_HELP, load_machine, machine_label

if TYPE_CHECKING:
    from topodra.policy.policy import Policy

__all__ = ["register", "load_workload", "parse_memory_quantity"]

app = typer.Typer(
    name="policy",
    help="The topology-aware placement policy: pool trees and dry-run placements.",
    no_args_is_help=True,
    rich_markup_mode="rich",
)


class OutputFormat(enum.StrEnum):
    TABLE = "table"
    JSON = "json"


def parse_memory_quantity(value: object, what: str) -> int:
    """A Kubernetes memory quantity (``512Mi``, ``1G``, ``1000``) in bytes, rounded up.

    Milli-bytes and smaller (``1m``) are Kubernetes-legal but in a hand-written
    workload always a slip for ``1M`` or ``1Mi``; they are refused.
    """
    from topodra.quantity import memory_bytes

    example = "memory quantity like 512Mi or 2G"
    if isinstance(value, str) and value.strip()[-1:] in ("m", "u", "n"):
        raise ValueError(f"{what}: expected a {example}, got {value!r} (a fraction of a byte: did you mean M or Mi?)")
    return memory_bytes(value, what)


def _config(path: Path | None, inline: dict[str, Any] | None = None, source: str = "workload") -> Any:
    """The policy settings of ``path`` (the agent's whole configuration, or its ``policy``
    section alone), else a workload's inline ``config``; errors worded as the agent's."""
    from pydantic import ValidationError

    from topodra.agent.config import config_section
    from topodra.agent.config_file import read_config_file
    from topodra.config_errors import describe
    from topodra.policy.config import PolicyConfig

    data: Any = inline
    prefix: tuple[str, ...] = ("config",) if inline is not None else ()
    if path is not None:
        source = str(path)
        data = read_config_file(path, check_mode=False)
        if isinstance(data, dict) and "policy" in data and len(data) == 1:
            data, prefix = data["policy"], ("policy",)
        else:
            data, prefix = config_section(data, source, "policy")
    if data is not None and not isinstance(data, dict):
        where = ".".join(prefix) or "(top level)"
        raise ValueError(f"{source}: {where}: must be a mapping of policy settings (got {type(data).__name__})")
    try:
        return PolicyConfig.model_validate(data or {})
    except ValidationError as e:
        raise ValueError(describe(e, source, PolicyConfig, prefix)) from None


def load_workload(data: Any, source: str = "workload") -> tuple[dict[str, Any], dict[str, Any], list[Any]]:
    """Check a workload document: ``{config, claims, containers}`` -> (config, claims, requests)."""
    from topodra.policy.api import ContainerRequest, QoSClass
    from topodra.policy.config import parse_cpu_quantity

    if not isinstance(data, dict):
        got = "nothing" if data is None else f"a {'list' if isinstance(data, list) else type(data).__name__}"
        raise ValueError(f"{source}: expected a mapping with 'containers', got {got}")
    unknown = set(data) - {"config", "claims", "containers"}
    if unknown:
        raise ValueError(f"{source}: unknown keys {sorted(unknown)} (known: config, claims, containers)")
    config = data.get("config") or {}
    claims = data.get("claims") or {}
    if not isinstance(config, dict) or not isinstance(claims, dict):
        raise ValueError(f"{source}: 'config' and 'claims' must be mappings")
    items = data.get("containers") or []
    if not isinstance(items, list):
        raise ValueError(f"{source}: 'containers' must be a list")
    requests: list[ContainerRequest] = []
    seen: set[str] = set()
    fields = {"name", "pod", "namespace", "qos", "cpu", "cpuLimit", "memory", "memoryLimit", "annotations", "claims"}
    for i, item in enumerate(items):
        where = f"{source}: containers[{i}]"
        if not isinstance(item, dict) or "name" not in item:
            raise ValueError(f"{where}: expected a mapping with at least 'name'")
        bad = set(item) - fields
        if bad:
            raise ValueError(f"{where}: unknown keys {sorted(bad)} (known: {', '.join(sorted(fields))})")
        name = str(item["name"])
        pod = str(item.get("pod", name))
        namespace = str(item.get("namespace", "default"))
        cid = f"{namespace}/{pod}/{name}"
        if cid in seen:
            raise ValueError(f"{where}: container {cid} is listed twice")
        seen.add(cid)
        cpu = parse_cpu_quantity(item["cpu"], f"{where}.cpu") if "cpu" in item else 0
        limit = parse_cpu_quantity(item["cpuLimit"], f"{where}.cpuLimit") if "cpuLimit" in item else None
        memory = parse_memory_quantity(item["memory"], f"{where}.memory") if "memory" in item else 0
        mem_limit = parse_memory_quantity(item["memoryLimit"], f"{where}.memoryLimit") if "memoryLimit" in item else None
        if "qos" in item:
            try:
                qos = QoSClass(item["qos"])
            except ValueError:
                raise ValueError(f"{where}.qos: {item['qos']!r} is not Guaranteed, Burstable or BestEffort") from None
        elif not cpu and not memory and limit is None:
            qos = QoSClass.BEST_EFFORT
        elif cpu and limit in (None, cpu) and (mem_limit is None or mem_limit == memory):
            qos, limit = QoSClass.GUARANTEED, cpu
        else:
            qos = QoSClass.BURSTABLE
        annotations = item.get("annotations") or {}
        if not isinstance(annotations, dict):
            raise ValueError(f"{where}.annotations: expected a mapping")
        item_claims = item.get("claims") or []
        if not isinstance(item_claims, list):
            raise ValueError(f"{where}.claims: expected a list of claim names")
        requests.append(
            ContainerRequest(
                id=cid,
                name=name,
                pod_uid=f"{namespace}/{pod}",
                pod_name=pod,
                namespace=namespace,
                qos=qos,
                cpu_request_milli=cpu,
                cpu_limit_milli=limit,
                memory_request=memory,
                memory_limit=mem_limit,
                annotations={str(k): str(v) for k, v in annotations.items()},
                claims=tuple(str(c) for c in item_claims),
            )
        )
    return config, claims, requests


def _pool_table(policy: Policy, title: str, width: int) -> Any:
    from topodra.texttable import Column, render

    columns = [
        Column("pool"),
        Column("CPUs", breaks=","),
        Column("shared", right=True),
        Column("excl", right=True),
        Column("claimed", "claim", right=True),
        Column("reserved", "resv", right=True),
        Column("isolated", "isol", right=True),
        Column("mems", breaks=","),
        Column("shared req", "req", breaks="/"),
    ]
    rows = [
        [
            "  " * p.depth + p.name,
            str(p.usage.cpus),
            str(len(p.usage.shared)),
            str(len(p.usage.allocated)),
            str(len(p.usage.claimed)),
            str(len(p.usage.reserved)),
            str(len(p.usage.isolated)),
            str(p.mems),
            f"{p.shared_requested_milli}m/{p.shared_capacity_milli // 1000}",
        ]
        for p in policy.stats().pools
    ]
    return render(columns, rows, width, title)


TopologyOpt = Annotated[str | None, typer.Option("--topology", "-t", help=TOPOLOGY_HELP)]
ConfigOpt = Annotated[
    Path | None,
    typer.Option("--config", "-c", help="Policy configuration (YAML; a top-level 'policy:' key is unwrapped).",
                 dir_okay=False),
]


@app.command("pools")
def pools_command(
    topology: TopologyOpt = None,
    config: ConfigOpt = None,
) -> None:
    """Show the pool tree (root, sockets, dies, NUMA nodes, L3 groups) and each pool's supply.

    Examples:

    \b
      topodra policy pools
      topodra policy pools --topology fixture:64amd64-4s2n4ca2co --config policy.yaml
      topodra policy pools --topology 2s1d2n2l8c2t
    """
    from rich.console import Console

    from topodra.policy.policy import Policy

    console = Console()
    try:
        policy = Policy(load_machine(topology), _config(config))
    except Exception as e:  # every input error ends here with its message
        print_error(str(e))
        raise typer.Exit(1) from None
    console.print(_pool_table(policy, f"pools of {machine_label(topology)}", console.width))
    for note in policy.notes:
        console.print(f"[yellow]note:[/yellow] {note}", highlight=False)


@app.command("place")
def place_command(
    workload: Annotated[Path, typer.Argument(help="YAML: optional config and claims, and a list of containers.",
                                             exists=True, dir_okay=False)],
    topology: TopologyOpt = None,
    config: ConfigOpt = None,
    output: Annotated[OutputFormat, typer.Option("--format", "-f", help="table or json.")] = OutputFormat.TABLE,
) -> None:
    """Dry-run a workload: claims first, then containers in order; print every cpuset and mems.

    The workload file looks like:

    \b
      claims: {gpu-cpus: "4-5"}          # DRA claims: id -> CPU list
      containers:
        - {name: db, cpu: "4", memory: 8Gi}                  # Guaranteed: exclusive
        - {name: web, cpu: 500m, cpuLimit: "2"}               # Burstable: shared
        - {name: side, annotations: {"memory-type.resource-policy.nri.io": "dram"}}
        - {name: inf, cpu: "2", claims: [gpu-cpus]}            # pinned to the claim
    """
    from rich.console import Console
    from rich.markup import escape
    from rich.progress import track

    from topodra.cpuset import CPUSet
    from topodra.policy.api import PolicyError
    from topodra.policy.policy import Policy
    from topodra.yamldocs import load_documents

    console, err = Console(), Console(stderr=True)
    try:
        docs = load_documents(workload)
        if len(docs) > 1:
            raise ValueError(f"{workload}: holds {len(docs)} YAML documents; a workload is one")
        inline_config, claims, requests = load_workload(docs[0].obj if docs else None, str(workload))
        cfg = _config(config) if config is not None else _config(None, inline_config, str(workload))
        policy = Policy(load_machine(topology), cfg)
        for claim_id, cpus in claims.items():
            policy.claim(str(claim_id), CPUSet.parse(str(cpus)))
    except OSError as e:
        print_error(f"cannot read {workload}: {e.strerror or e}")
        raise typer.Exit(1) from None
    except Exception as e:
        print_error(str(e))
        raise typer.Exit(1) from None
    refused: dict[str, str] = {}
    show = output is OutputFormat.TABLE and len(requests) > 200
    for req in track(requests, description="placing", disable=not show, console=err):
        try:
            policy.add(req)
        except PolicyError as e:
            refused[req.id] = str(e)
    if output is OutputFormat.JSON:
        typer.echo(json.dumps(_placements_json(policy, requests, refused), indent=2))
        raise typer.Exit(1 if refused else 0)
    console.print(_placement_table(policy, requests, console.width))
    console.print(_pool_table(policy, "pools after placement", console.width))
    for cid, why in refused.items():
        why = why.removeprefix(f"container {cid}: ")
        err.print(f"[red]refused[/red] {escape(cid)}: {escape(why)}", highlight=False, soft_wrap=True)
    if refused:
        raise typer.Exit(1)


def _placements_json(policy: Policy, requests: list[Any], refused: dict[str, str]) -> dict[str, Any]:
    """``place --format json``: every placed container's cpus and mems, the refusals, the snapshot."""
    return {
        "containers": {
            cid: None if a is None else {"cpus": a.cpus.format(), "mems": a.mems.format()}
            for cid, a in ((r.id, policy.assignment(r.id)) for r in requests)
            if cid not in refused
        },
        "refused": refused,
        "snapshot": policy.snapshot(),
    }


def _placement_table(policy: Policy, requests: list[Any], width: int) -> Any:
    """One row per container: its class, pool, cpus and mems, or refused."""
    from topodra.texttable import Column, render

    columns = [
        Column("container", breaks="/"),
        Column("class"),
        Column("pool"),
        Column("cpus", breaks=", "),
        Column("mems", breaks=","),
        Column("note", breaks=" "),
    ]
    rows = []
    for req in requests:
        g = policy.grant(req.id)
        if g is None:
            rows.append([req.id, "refused", "", "", "", "see below"])
            continue
        a = policy.assignment(req.id)
        rows.append(
            [
                req.id,
                g.kind.value,
                policy.pool_name(g.pool),
                "(unchanged)" if a is None else f"{a.cpus} ({len(a.cpus)})",
                "" if a is None else str(a.mems),
                g.degraded,
            ]
        )
    return render(columns, rows, width, "placements")


def register(root_app: typer.Typer) -> None:
    """Add ``policy`` to the topodra command line."""
    root_app.add_typer(app, name="policy")
