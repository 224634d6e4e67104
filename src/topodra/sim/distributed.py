"""Sweep cells on a Dask distributed cluster (``sim sweep --cluster ADDRESS``).

A sweep is a grid of independent runs; on a cluster every cell is one task.
The engine is Dask distributed (why, against Ray: docs/simulator.md), imported
only here and only when an address is given, so the simulator needs it only
with the ``cluster`` extra. Workers must be able to import the same topodra.

``ADDRESS`` is a scheduler address (``tcp://host:8786``), or ``local`` /
``local:N`` for a local cluster of N worker processes started for the sweep.

What can go wrong is one line (``EngineError``): a malformed address, a scheduler that does
not answer within ``CONNECT_TIMEOUT_S`` (checked with one Dask handshake before a client is
made), a scheduler without workers for ``NO_WORKERS_S``, a cell whose workers died under it
as often as the scheduler allows (``KilledWorker``: out of memory, killed), or a scheduler lost
during the sweep. While cells run, ``tick`` hears every ``POLL_S`` how many are done, running
and how many workers there are.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import CancelledError
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, TypeVar

__all__ = ["ClusterProgress", "EngineError", "map_on_cluster"]

_T = TypeVar("_T")
_R = TypeVar("_R")

CONNECT_TIMEOUT_S = 20.0
NO_WORKERS_S = 60.0
POLL_S = 1.0


class EngineError(RuntimeError):
    """The cluster cannot be used: the package is missing, the address is wrong or does not
    answer, there are no workers, workers died under a cell, or the scheduler went away."""


@dataclass(frozen=True)
class ClusterProgress:
    """Where a sweep on a cluster is: cells done and running, workers connected."""

    done: int
    total: int
    running: int
    workers: int


def _distributed() -> Any:
    try:
        import distributed
    except ImportError:
        raise EngineError("--cluster needs Dask distributed: pip install 'topodra[cluster]'") from None
    return distributed


def map_on_cluster(
    address: str,
    fn: Callable[[_T], _R],
    jobs: Sequence[_T],
    *,
    describe: Callable[[_T], str] = str,
    tick: Callable[[ClusterProgress], None] | None = None,
) -> Iterator[tuple[int, _R]]:
    """Run ``fn`` on every job on the cluster at ``address``; yields (job index, result) as they
    finish. ``describe`` names a job in errors."""
    dist = _distributed()
    with _target(dist, address) as target:
        client = _client(dist, target, address)
        with client:
            _wait_for_workers(client, address)
            futures = client.map(fn, list(jobs), pure=False)
            yield from _results(dist, client, futures, address, lambda i: describe(jobs[i]), tick)


@contextmanager
def _target(dist: Any, address: str) -> Iterator[Any]:
    """What the client connects to: a local cluster started here (closed after), or the address."""
    if address != "local" and not address.startswith("local:"):
        _check_address(dist, address)
        yield address
        return
    _, _, n = address.partition(":")
    if n and (not n.isdigit() or int(n) < 1):
        raise EngineError(f"--cluster {address!r}: expected local or local:N (N worker processes)")
    cluster = dist.LocalCluster(n_workers=int(n) if n else None, threads_per_worker=1, dashboard_address=":0")  # any free port: 8787 may be taken
    try:
        yield cluster
    finally:
        cluster.close()


def _check_address(dist: Any, address: str) -> None:
    """A scheduler address that parses and answers a Dask handshake, before any client is made
    (a client that fails to connect leaves noise behind when it is collected)."""
    try:
        scheme, where = dist.comm.parse_address(address)
        dist.comm.registry.get_backend(scheme)  # a scheme Dask speaks
        if scheme in ("tcp", "tls"):
            dist.comm.parse_host_port(where)
    except ValueError as e:
        raise EngineError(f"--cluster {address!r}: not a Dask scheduler address ({e}); expected tcp://HOST:PORT, local or local:N") from None

    async def hello() -> None:
        comm = await dist.comm.connect(address, timeout=CONNECT_TIMEOUT_S)
        await comm.close()

    try:
        asyncio.run(hello())
    except (OSError, TimeoutError, ValueError) as e:
        raise EngineError(f"--cluster {address}: cannot reach the Dask scheduler ({e})") from None


def _client(dist: Any, target: Any, address: str) -> Any:
    try:
        return dist.Client(target, timeout=CONNECT_TIMEOUT_S)
    except (OSError, TimeoutError, ValueError) as e:
        raise EngineError(f"--cluster {address}: cannot reach the Dask scheduler ({e})") from None


def _wait_for_workers(client: Any, address: str) -> None:
    try:
        client.wait_for_workers(1, timeout=NO_WORKERS_S)
    except TimeoutError:
        raise EngineError(f"--cluster {address}: the Dask scheduler has no worker after {NO_WORKERS_S:g} s (start some: dask worker {address})") from None


def _results(
    dist: Any, client: Any, futures: list[Any], address: str, describe: Callable[[int], str], tick: Callable[[ClusterProgress], None] | None
) -> Iterator[tuple[int, Any]]:
    """(index, result) of each future as it finishes, watching the workers meanwhile."""
    index = {f.key: i for i, f in enumerate(futures)}
    pending = {f.key: f for f in futures}
    alone_since: float | None = None
    while pending:
        try:
            finished, _ = dist.wait(list(pending.values()), timeout=POLL_S, return_when="FIRST_COMPLETED")
        except TimeoutError:
            finished = set()
        for f in sorted(finished, key=lambda f: index[f.key]):
            del pending[f.key]
            yield index[f.key], _result(dist, f, address, describe(index[f.key]))
        threads = client.nthreads()  # worker -> threads, from the scheduler
        workers = len(threads)
        if workers:
            alone_since = None
        elif alone_since is None:
            alone_since = time.monotonic()
        elif time.monotonic() - alone_since > NO_WORKERS_S:
            raise EngineError(f"--cluster {address}: no Dask worker for {NO_WORKERS_S:g} s with {len(pending)} cells not done (did the workers stop?)")
        if tick is not None:
            # a worker may hold more tasks than it has threads to run them
            running = sum(min(len(keys), threads.get(w, 1)) for w, keys in client.processing().items())
            tick(ClusterProgress(len(futures) - len(pending), len(futures), running, workers))


def _result(dist: Any, future: Any, address: str, what: str) -> Any:
    try:
        return future.result()
    except dist.KilledWorker as e:
        raise EngineError(
            f"--cluster {address}: cell {what} was given up: the Dask workers running it died {e.allowed_failures + 1} times "
            "(out of memory, or killed; the workers' logs say which)"
        ) from None
    except CancelledError:
        raise EngineError(f"--cluster {address}: the Dask scheduler went away while cell {what} ran") from None
