"""Scenario tests: the whole flow (real agent, NRI over a socket, DRA gRPC, API over HTTP)."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
import yaml

from topodra.cpuset import CPUSet
from topodra.playground.runner import evaluate, resolve_topology, run_scenario
from topodra.playground.scenario import Check, builtin_names, builtin_scenario
from topodra.playground.world import DEFAULT_TOPOLOGY, Playground
from topodra.topology.model import CoreType

#: The upstream prototype's example as published (tests/data/upstream-prototype).
UPSTREAM_EXAMPLE = Path(__file__).resolve().parents[1] / "data" / "upstream-prototype" / "upstream-prototype.yaml"


@pytest.mark.parametrize("name", ["default", "count", "numa", "grouped", "unsatisfiable", "core-or-thread", "cpu-config"])
def test_builtin_scenario_expectations_hold(name: str) -> None:
    assert name in builtin_names()
    sc = builtin_scenario(name)

    async def run() -> list[str]:
        topo, _ = resolve_topology(sc.topology)
        async with Playground(topology=sc.machine(topo), model=sc.model or "cpu", group_by=sc.group_by) as pg:
            results = await run_scenario(pg, sc)
        return [c.message for r in results for c in r.checks if not c.ok]

    assert asyncio.run(run()) == []


@pytest.mark.parametrize("model", ["cpu", "core", "core-or-thread", "grouped"])
def test_taints_scenario_holds_for_every_model(model: str) -> None:
    """Isolated CPUs published tainted: an ordinary claim never gets them, one asking for them
    without the toleration stays pending, a latency-critical pod tolerating the taint gets them."""
    sc = builtin_scenario("taints")

    async def run() -> list[str]:
        topo, _ = resolve_topology(sc.topology)
        async with Playground(topology=sc.machine(topo), model=model) as pg:
            assert pg.topology.isolated == CPUSet([3, 7])  # the last core of 1s1d1n1l4c2t
            results = await run_scenario(pg, sc)
            wrong = evaluate(pg, Check("default/web/nginx", isolated=True))  # the check can fail
            assert not wrong.ok
            assert "are not isolated" in wrong.message
        return [c.message for r in results for c in r.checks if not c.ok] + [p for r in results for p in r.problems]

    assert asyncio.run(run()) == []


def test_upstream_example_step_by_step() -> None:
    """The upstream example, verbatim: a P-core claim; shared containers shrink, then widen at once."""
    docs = list(yaml.safe_load_all(UPSTREAM_EXAMPLE.read_text()))

    async def run() -> None:
        topo, _ = resolve_topology(None)
        pcores = topo.cpus_of_type(CoreType.P_CORE)
        async with Playground(topology=topo) as pg:
            web = {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {"name": "web"},
                "spec": {"containers": [{"name": "nginx", "image": "nginx", "resources": {"requests": {"cpu": "250m"}}}]},
            }
            await pg.apply([web])
            assert pg.cpus_of("web") == topo.online
            lines = await pg.apply(docs)
            assert "pod/pcore-test running" in lines
            claimed = pg.cpus_of("pcore-test", "ctr0")
            assert len(claimed) == 1
            assert claimed <= pcores
            # The shared container lost exactly the claimed CPU, pushed without any NRI event.
            assert pg.cpus_of("web") == topo.online - claimed
            assert pg.last_source[_container_id(pg, "web")] == "unsolicited"
            # The claim exists with an allocation from the simulator's allocator.
            assert pg.agent is not None
            assert list(pg.agent.policy.claims().values()) == [claimed]
            await pg.delete_pod("pcore-test")
            assert pg.cpus_of("web") == topo.online
            assert pg.agent.policy.claims() == {}

    asyncio.run(run())


def _container_id(pg: Playground, pod: str) -> str:
    assert pg.runtime is not None
    pods = {p.id: p.name for p in pg.runtime.store.pods()}
    return next(c.id for c in pg.runtime.store.containers() if pods.get(c.pod_sandbox_id) == pod)


def test_packaged_example_is_the_upstream_one() -> None:
    from importlib import resources

    packaged = (resources.files("topodra.playground") / "scenarios" / "upstream-prototype.yaml").read_text()
    assert packaged == UPSTREAM_EXAMPLE.read_text()


def test_default_machine_is_the_packaged_hybrid_fixture() -> None:
    """The playground's default machine is the real Intel hybrid tree, shipped in the package."""
    topo, label = resolve_topology(None)
    assert label == f"fixture:{DEFAULT_TOPOLOGY}"
    assert len(topo.cpus) == 20
    assert len(topo.cpus_of_type(CoreType.P_CORE)) == 12
    assert len(topo.cpus_of_type(CoreType.E_CORE)) == 8


def test_e_core_claim_and_any_core_claim_coexist() -> None:
    async def run() -> None:
        topo, _ = resolve_topology(None)
        ecores = topo.cpus_of_type(CoreType.E_CORE)
        async with Playground(topology=topo) as pg:
            docs = list(yaml.safe_load_all(UPSTREAM_EXAMPLE.read_text()))
            await pg.apply([d for d in docs if d["kind"] == "ResourceClaimTemplate"])
            pods = []
            for name, template in (("e1", "e-cores"), ("e2", "e-cores"), ("any", "any-cores")):
                pods.append(
                    {
                        "apiVersion": "v1",
                        "kind": "Pod",
                        "metadata": {"name": name},
                        "spec": {
                            "resourceClaims": [{"name": "c", "resourceClaimTemplateName": template}],
                            "containers": [{"name": "app", "image": "x", "resources": {"claims": [{"name": "c"}]}}],
                        },
                    }
                )
            await pg.apply(pods)
            e1, e2, anyc = pg.cpus_of("e1"), pg.cpus_of("e2"), pg.cpus_of("any")
            assert e1 <= ecores
            assert e2 <= ecores
            assert len(e1 | e2 | anyc) == 3  # three different CPUs
            total = CPUSet()
            for c in pg.agent.policy.claims().values() if pg.agent else []:
                assert total.isdisjoint(c)
                total |= c
            assert total == e1 | e2 | anyc

    asyncio.run(run())


@pytest.mark.parametrize("machine", ["synthetic:1s1d1n1l6c2t8e", "synthetic:2s1d1n1l4c2t2e"])
def test_default_scenario_holds_on_any_machine_it_accepts(machine: str) -> None:
    """Expectations are stated relative to the machine: they hold beyond the laptop fixture."""
    sc = builtin_scenario("default")

    async def run() -> list[str]:
        topo, _ = resolve_topology(machine)
        assert sc.unmet(topo) is None
        async with Playground(topology=topo, model=sc.model or "cpu", group_by=sc.group_by) as pg:
            results = await run_scenario(pg, sc)
        return [c.message for r in results for c in r.checks if not c.ok]

    assert asyncio.run(run()) == []


def test_a_machine_the_scenario_cannot_use_is_one_clear_line() -> None:
    from typer.testing import CliRunner

    from topodra.cli import app

    r = CliRunner().invoke(app, ["playground", "--topology", "synthetic:1s1d1n1l1c2t"], env={"COLUMNS": "300"})
    assert r.exit_code == 1
    lines = [line for line in r.output.splitlines() if "error:" in line]
    assert len(lines) == 1, r.output
    assert "needs a machine with at least 4 online CPUs (it has 2)" in lines[0]
    assert "expectation(s) failed" not in r.output


def test_exact_cpu_scenarios_refuse_another_machine() -> None:
    from typer.testing import CliRunner

    from topodra.cli import app

    r = CliRunner().invoke(app, ["playground", "-s", "numa", "--topology", "synthetic:2s1d2n1l4c2t"], env={"COLUMNS": "300"})
    assert r.exit_code == 1
    assert "expects exact CPUs" in r.output


def test_a_playground_run_whose_pods_never_run_exits_non_zero(tmp_path: Path) -> None:
    """An empty file, or a pod that stays Pending (an unknown attribute in its CEL) when no
    expectation of the scenario asked for that: exit 1, with the reason on a ✘ line."""
    from typer.testing import CliRunner

    from topodra.cli import app

    empty = tmp_path / "empty.yaml"
    empty.write_text("")
    r = CliRunner().invoke(app, ["playground", str(empty)])
    assert r.exit_code == 1, r.output
    assert "nothing to apply" in r.output
    pending = tmp_path / "pending.yaml"
    pending.write_text(
        "apiVersion: resource.k8s.io/v1\nkind: ResourceClaimTemplate\nmetadata: {name: t}\nspec:\n"
        "  spec:\n    devices:\n      requests:\n      - name: cpu\n        exactly:\n"
        "          deviceClassName: native.cpu\n          count: 1000\n---\n"
        "apiVersion: v1\nkind: Pod\nmetadata: {name: p}\nspec:\n"
        "  resourceClaims: [{name: c, resourceClaimTemplateName: t}]\n"
        "  containers: [{name: c, image: x, resources: {claims: [{name: c}]}}]\n"
    )
    r = CliRunner().invoke(app, ["playground", str(pending)])
    assert r.exit_code == 1, r.output
    assert "pod default/p is Pending" in " ".join(r.output.split())


def test_a_manifest_file_among_the_scenarios_is_not_a_scenario() -> None:
    from typer.testing import CliRunner

    from topodra.cli import app

    r = CliRunner().invoke(app, ["playground", "-s", "background"])
    assert r.exit_code == 2, r.output
    assert "no built-in scenario 'background'" in " ".join(r.output.split())


def _failed(name: str, model: str) -> list[str]:
    sc = builtin_scenario(name)

    async def run() -> list[str]:
        topo, _ = resolve_topology(sc.topology)
        async with Playground(topology=sc.machine(topo), model=model, group_by=sc.group_by, gates=sc.gates, gpus=sc.gpus) as pg:
            results = await run_scenario(pg, sc)
        return [c.message for r in results for c in r.checks if not c.ok] + [p for r in results for p in r.problems]

    return asyncio.run(run())


@pytest.mark.parametrize("name", builtin_names())
def test_every_scenario_holds_or_refuses_the_core_or_thread_model(name: str) -> None:
    """With --model core-or-thread a built-in scenario either holds or says in one line that its
    expectations are written for other devices."""
    sc = builtin_scenario(name)
    why = sc.unmet_model("core-or-thread")
    if why is None:
        assert _failed(name, "core-or-thread") == []
    else:
        assert "\n" not in why
        assert f"do not hold with --model core-or-thread (run it without --model, or with {' or '.join(sc.models)})" in why


def test_another_model_is_refused_on_one_line_by_the_command() -> None:
    from typer.testing import CliRunner

    from topodra.cli import app

    r = CliRunner().invoke(app, ["playground", "-s", "numa", "--model", "grouped"], env={"COLUMNS": "400"})
    assert r.exit_code == 1
    errors = [line for line in r.output.splitlines() if "error:" in line]
    assert errors == [
        "error: 'Six CPUs on one NUMA node (matchAttribute) on a machine with two NUMA nodes' is written for cpu "
        "or core-or-thread devices; its expectations do not hold with --model grouped (run it without --model, "
        "or with cpu or core-or-thread)"
    ]


def test_the_allocated_check_compares_with_the_schedulers_devices() -> None:
    """``allocated`` holds when the container runs on its devices' CPUs and says why not otherwise:
    another container's CPUs, or a grouped share whose CPUs topodra picked."""
    from topodra.playground.runner import allocated_cpus, evaluate
    from topodra.playground.scenario import Check

    claim_pod = {
        "apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"},
        "spec": {"resourceClaims": [{"name": "c", "resourceClaimTemplateName": "t"}],
                 "containers": [{"name": "app", "image": "x", "resources": {"claims": [{"name": "c"}]}}]},
    }
    template = {
        "apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaimTemplate", "metadata": {"name": "t"},
        "spec": {"spec": {"devices": {"requests": [{"name": "r", "exactly": {"deviceClassName": "native.cpu", "count": 2}}]}}},
    }

    async def run(model: str) -> tuple[object, object, object]:
        topo, _ = resolve_topology("synthetic:1s1d1n1l4c2t")
        if model == "grouped":
            template["spec"]["spec"]["devices"]["requests"][0]["exactly"] = {  # type: ignore[index]
                "deviceClassName": "native.cpu", "capacity": {"requests": {"cpu": "2"}},
            }
        async with Playground(topology=topo, model=model) as pg:
            await pg.apply([template, claim_pod])
            mine = evaluate(pg, Check(target="default/p/app", allocated=True))
            other = evaluate(pg, Check(target="default/p/app", allocated=True, cpus=CPUSet([0])))
            return mine, other, allocated_cpus(pg, "default/p/app")

    mine, other, chosen = asyncio.run(run("core"))
    assert mine.ok, mine.message  # type: ignore[attr-defined]
    assert isinstance(chosen, CPUSet)
    assert len(chosen) == 4  # two core devices of two threads
    assert not other.ok  # type: ignore[attr-defined]
    _, _, grouped = asyncio.run(run("grouped"))
    assert str(grouped).startswith("device numa0 of claim p-c-")
    assert "topodra picks its CPUs, not the scheduler" in str(grouped)


@pytest.mark.parametrize(
    ("text", "words"),
    [
        ("steps: [{expect: {p/c: {allocated: 1}}}]", "expect[p/c].allocated must be true or false, got 1"),
        ("steps: [{expect: {p/c: {mems: x}}}]", "expect[p/c].mems:"),
        ("requires: {models: [cores]}\nsteps: []", "requires.models must be a list of cpu, core, core-or-thread, grouped"),
        ("groupBy: die\nsteps: []", "groupBy must be numa, l3, socket, machine, got 'die'"),
    ],
)
def test_bad_scenario_keys_are_one_line(tmp_path: Path, text: str, words: str) -> None:
    from topodra.playground.scenario import ScenarioError, load_scenario

    f = tmp_path / "s.yaml"
    f.write_text(text)
    with pytest.raises(ScenarioError) as err:
        load_scenario(f)
    assert words in str(err.value)
    assert "\n" not in str(err.value)
