"""The same sweep on dask.distributed: chunks along the hardware dims, the fused
reduction on the workers, results merged on the client into the same Dataset.

Multi-node use::

    # on the scheduler node
    dask scheduler                                  # listens on tcp://<host>:8786
    # on every worker node (after `pip install simcore` and warming the cache once:
    # python -c "import simcore.distributed as d; d.warm_cache()")
    dask worker tcp://<host>:8786 --nworkers 1 --nthreads 2
    # anywhere
    simcore explore --depth coarse --space full --scheduler tcp://<host>:8786

or from Python: ``joint_explore(..., client=distributed.Client("tcp://<host>:8786"))``.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import xarray as xr

from .evaluate import (
    Prepared,
    assemble_best,
    default_chunk_size,
    fused_chunk,
    fused_metric,
    hw_chunks,
)
from .kernels.inference import N_BEST
from .metrics import Metric

__all__ = ["warm_cache", "connect", "local_cluster", "distributed_best"]


def warm_cache() -> None:
    """Compile (or load from the on-disk cache) every kernel once, in this process.

    Run it before starting dask workers so they load the cached machine code instead of
    each compiling it.
    """
    from . import Workload, evaluate_best
    from .kernels import pareto

    evaluate_best("Llama 3.1 8B", Workload("decode", s_kv=128), space="reduced")
    evaluate_best("Llama 3.1 8B", Workload("decode", s_kv=128), space="reduced",
                  metric="throughput")
    from .evaluate import evaluate

    evaluate("Llama 3.1 8B", Workload("decode", s_kv=128), space={"tp": (1,)})
    pareto.pareto_mask(np.zeros((2, 2)))


def local_cluster(n_workers: int = 2, threads_per_worker: int = 1) -> Any:
    """A ``LocalCluster`` of worker processes, the numba cache warmed first."""
    from distributed import LocalCluster

    warm_cache()
    return LocalCluster(n_workers=n_workers, threads_per_worker=threads_per_worker,
                        processes=True, dashboard_address=None, silence_logs=40)


def connect(address: str) -> tuple[Any, Any]:
    """``(client, cluster)`` for ``"local"`` (a new 2-worker LocalCluster) or a scheduler
    address (``tcp://host:8786``; cluster is None)."""
    from distributed import Client

    if address == "local":
        cluster = local_cluster()
        return Client(cluster), cluster
    if "://" not in address:
        raise ValueError(f"scheduler address must look like tcp://host:8786 or be 'local', got {address!r}")
    warm_cache()
    try:
        return Client(address, timeout="20s"), None
    except OSError as exc:
        raise OSError(f"cannot reach the dask scheduler at {address}: {exc}; start one with "
                      "`dask scheduler` or pass --scheduler local") from None


def _run_chunk(p: Prepared, start: int, stop: int, code: int, sign: int
               ) -> tuple[int, int, np.ndarray, np.ndarray, np.ndarray]:
    bi, v, nf = fused_chunk(p, start, stop, code, sign)
    return start, stop, bi, v, nf


def distributed_best(
    p: Prepared,
    *,
    metric: str | Metric = "latency",
    client: Any,
    chunk_size: int | None = None,
    progress: bool = False,
) -> xr.Dataset:
    """:func:`simcore.evaluate.best_of_prepared` on a dask cluster (identical result)."""
    from distributed import as_completed

    m, code = fused_metric(metric)
    if chunk_size is None:
        n_workers = max(1, len(client.scheduler_info().get("workers", {})))
        chunk_size = max(1, min(default_chunk_size(p), -(-p.n_hw // (4 * n_workers))))
    [prep] = client.scatter([p], broadcast=True, hash=False)
    futures = [client.submit(_run_chunk, prep, a, b, code, m.sign, pure=False)
               for a, b in hw_chunks(p.n_hw, chunk_size)]
    best_idx = np.empty(p.n_hw, dtype=np.int64)
    vals = np.empty((p.n_hw, N_BEST))
    n_fit = np.empty(p.n_hw, dtype=np.int64)
    it: Any = as_completed(futures)
    if progress:
        import sys

        from tqdm.auto import tqdm

        it = tqdm(it, total=len(futures), desc="hardware chunks (dask)", unit="chunk",
                  file=sys.stderr)
    try:
        for fut in it:
            a, b, bi, v, nf = fut.result()
            best_idx[a:b], vals[a:b], n_fit[a:b] = bi, v, nf
    finally:  # a failed chunk (or Ctrl-C) must not leave the rest running on the cluster
        client.cancel([f for f in futures if not f.done()])
    return assemble_best(p, m, best_idx, vals, n_fit)
