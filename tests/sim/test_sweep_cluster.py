"""Sweeps on a Dask distributed cluster give the same results and outputs as local processes."""

from __future__ import annotations

import json
import os
import sys
import time
from collections.abc import Iterator
from dataclasses import asdict
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from topodra.sim.distributed import ClusterProgress, EngineError, map_on_cluster
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
    with LocalCluster(n_workers=1, threads_per_worker=2, processes=False, dashboard_address=":0") as cluster:  # type: ignore[no-untyped-call]
        yield str(cluster.scheduler_address)


def _grid(**extra: Any) -> SweepConfig:
    return SweepConfig(**{"nodes": [4, 12], "cpus": [64], "models": ["cpu", "grouped"], "workload": "cpus-4", "pods": 6, "processes": 1, **extra})


def _cells(results_json: Path) -> list[dict[str, Any]]:
    return [{k: v for k, v in cell.items() if k not in TIMING} for cell in json.loads(results_json.read_text())]


def test_sweep_on_a_dask_cluster_equals_the_local_sweep(dask_address: str, tmp_path: Path) -> None:
    workload = tmp_path / "mine.yaml"  # a workload file: read once, sent with every cell
    workload.write_text((Path(__file__).parent / "data" / "churn.yaml").read_text())
    local = run_sweep(_grid(workload=str(workload)))
    seen: list[RunSummary] = []
    ticks: list[ClusterProgress] = []
    remote = run_sweep(_grid(workload=str(workload), cluster=dask_address), progress=seen.append, tick=ticks.append)
    assert [_figures(s) for s in remote] == [_figures(s) for s in local]
    assert len(seen) == len(remote)
    assert ticks
    assert ticks[-1] == ClusterProgress(done=4, total=4, running=0, workers=1)
    assert [(s.model, s.nodes) for s in remote] == [("cpu", 4), ("cpu", 12), ("grouped/numa", 4), ("grouped/numa", 12)]
    names = sorted(p.name for p in write_outputs(remote, tmp_path / "remote"))
    assert names == sorted(p.name for p in write_outputs(local, tmp_path / "local"))
    assert "end-to-end pods/s" in (tmp_path / "remote" / "report.md").read_text()
    mine, theirs = _cells(tmp_path / "remote" / "results.json"), _cells(tmp_path / "local" / "results.json")
    assert len(mine) == 4
    for a, b in zip(mine, theirs, strict=True):  # cell by cell, every figure but our own timings
        assert a == b


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


@pytest.mark.parametrize("address", ["http://sched:8786", "sched", "tcp://sched"])
def test_a_malformed_address_says_what_one_looks_like(address: str) -> None:
    with pytest.raises(EngineError, match=rf"^--cluster '{address}': not a Dask scheduler address \(.*\); expected tcp://HOST:PORT, local or local:N$"):
        list(map_on_cluster(address, abs, [1]))


def test_a_scheduler_without_workers_is_an_error_not_a_hang(monkeypatch: pytest.MonkeyPatch) -> None:
    from distributed import LocalCluster

    import topodra.sim.distributed as engine

    monkeypatch.setattr(engine, "NO_WORKERS_S", 0.5)
    with LocalCluster(n_workers=0, processes=False, dashboard_address=":0") as cluster:  # type: ignore[no-untyped-call]
        address = str(cluster.scheduler_address)
        with pytest.raises(EngineError, match=rf"^--cluster {address}: the Dask scheduler has no worker after 0.5 s \(start some: dask worker {address}\)$"):
            list(map_on_cluster(address, abs, [1]))


def test_progress_ticks_while_cells_run(dask_address: str) -> None:
    ticks: list[ClusterProgress] = []
    got = dict(map_on_cluster(dask_address, time.sleep, [1.5, 1.5], tick=ticks.append))
    assert got == {0: None, 1: None}
    assert any(t.running >= 1 and t.done < 2 for t in ticks), ticks
    assert all(t.workers == 1 and t.total == 2 for t in ticks)


def test_a_cell_whose_worker_dies_is_one_line_naming_it() -> None:
    import dask
    from distributed import LocalCluster

    # a real worker process; the scheduler gives a task up after its first worker dies
    with dask.config.set({"distributed.scheduler.allowed-failures": 0}), LocalCluster(
        n_workers=1, processes=True, threads_per_worker=1, dashboard_address=":0"
    ) as cluster:  # type: ignore[no-untyped-call]
        address = str(cluster.scheduler_address)
        with pytest.raises(EngineError, match=rf"^--cluster {address}: cell exit 3 was given up: the Dask workers running it died 1 times \(out of memory, or killed"):
            list(map_on_cluster(address, os._exit, [3], describe=lambda code: f"exit {code}"))


def test_missing_package_gives_one_clear_line(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    from topodra.cli import app

    monkeypatch.setitem(sys.modules, "distributed", None)  # import distributed -> ImportError
    result = CliRunner().invoke(
        app, ["sim", "sweep", "--nodes", "4", "--cpus", "64", "--model", "cpu", "--pods", "2", "--cluster", "tcp://127.0.0.1:1", "--out", str(tmp_path)]
    )
    assert result.exit_code == 2
    assert "--cluster needs Dask distributed: pip install 'topodra[cluster]'" in result.output
    assert "Traceback" not in result.output
