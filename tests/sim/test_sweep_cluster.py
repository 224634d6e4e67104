"""Sweeps on a Dask distributed cluster give the same results and outputs as local processes."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from dataclasses import asdict
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from topodra.sim.distributed import EngineError, map_on_cluster
from topodra.sim.run import RunSummary
from topodra.sim.sweep import SweepConfig, run_sweep, write_outputs

#: Our own speed differs run to run; everything else must be equal.
TIMING = {"sim_seconds", "sim_pods_per_s", "build_seconds"}


def _figures(s: RunSummary) -> dict[str, Any]:
    return {k: v for k, v in asdict(s).items() if k not in TIMING}


@pytest.fixture(scope="module")
def dask_address() -> Iterator[str]:
    from distributed import LocalCluster

    # in-process workers: a real scheduler and real task submission, fast enough for the suite
    with LocalCluster(n_workers=1, threads_per_worker=2, processes=False, dashboard_address=None) as cluster:  # type: ignore[no-untyped-call]
        yield str(cluster.scheduler_address)


def _grid(**extra: Any) -> SweepConfig:
    return SweepConfig(nodes=[4, 12], cpus=[64], models=["cpu", "grouped"], workload="cpus-4", pods=6, processes=1, **extra)


def test_sweep_on_a_dask_cluster_equals_the_local_sweep(dask_address: str, tmp_path: Path) -> None:
    local = run_sweep(_grid())
    seen: list[RunSummary] = []
    remote = run_sweep(_grid(cluster=dask_address), progress=seen.append)
    assert [_figures(s) for s in remote] == [_figures(s) for s in local]
    assert len(seen) == len(remote)
    assert [(s.model, s.nodes) for s in remote] == [("cpu", 4), ("cpu", 12), ("grouped/numa", 4), ("grouped/numa", 12)]
    names = sorted(p.name for p in write_outputs(remote, tmp_path / "remote"))
    assert names == sorted(p.name for p in write_outputs(local, tmp_path / "local"))
    assert "end-to-end pods/s" in (tmp_path / "remote" / "report.md").read_text()


def test_results_come_back_with_their_job_index(dask_address: str) -> None:
    got = dict(map_on_cluster(dask_address, abs, [-3, 1, -7]))
    assert got == {0: 3, 1: 1, 2: 7}


def test_unreachable_scheduler_is_a_one_line_error(monkeypatch: pytest.MonkeyPatch) -> None:
    import topodra.sim.distributed as engine

    monkeypatch.setattr(engine, "CONNECT_TIMEOUT_S", 0.5)
    with pytest.raises(EngineError, match=r"^--cluster tcp://127\.0\.0\.1:1: cannot reach the Dask scheduler"):
        list(map_on_cluster("tcp://127.0.0.1:1", abs, [1]))


def test_bad_local_form_is_rejected() -> None:
    with pytest.raises(EngineError, match="local or local:N"):
        list(map_on_cluster("local:two", abs, [1]))


def test_missing_package_gives_one_clear_line(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    from topodra.cli import app

    monkeypatch.setitem(sys.modules, "distributed", None)  # import distributed -> ImportError
    result = CliRunner().invoke(
        app, ["sim", "sweep", "--nodes", "4", "--cpus", "64", "--model", "cpu", "--pods", "2", "--cluster", "tcp://127.0.0.1:1", "--out", str(tmp_path)]
    )
    assert result.exit_code == 2
    assert "--cluster needs Dask distributed: pip install 'topodra[cluster]'" in result.output
    assert "Traceback" not in result.output
