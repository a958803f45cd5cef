"""The same sweep on dask.distributed: chunks along the hardware dims, the fused
reduction on the workers, results merged on the client into the same Dataset.

Multi-node use::

    # on the scheduler node
    dask scheduler                                  # listens on tcp://<host>:8786
    # on every worker node (after `pip install simcore` and warming the cache once:
    # python -c "import simcore.engine.distributed as d; d.warm_cache()")
    dask worker tcp://<host>:8786 --nworkers 1 --nthreads 2
    # anywhere
    simcore explore --depth coarse --space full --scheduler tcp://<host>:8786

or from Python: ``joint_explore(..., client=distributed.Client("tcp://<host>:8786"))``.

If the cluster goes away mid-sweep (every worker lost, the scheduler gone), the sweep
raises :class:`~simcore.errors.SimcoreRetryError` naming how many chunks are saved; the
CLI prints it as one line with the command that resumes and exits with 75. Pass a store
(``--resume``) to keep finished chunks across such a loss.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import xarray as xr

from .chunks import reduce_best
from .core import Prepared
from .metrics import Metric

__all__ = ["warm_cache", "connect", "local_cluster", "distributed_best"]


def warm_cache() -> None:
    """Compile (or load from the on-disk cache) every kernel once, in this process.

    Run it before starting dask workers so they load the cached machine code instead of
    each compiling it.
    """
    from .. import Workload, evaluate_best
    from .core import pareto_mask

    evaluate_best("Llama 3.1 8B", Workload("decode", s_kv=128), space="reduced")
    evaluate_best("Llama 3.1 8B", Workload("decode", s_kv=128), space="reduced",
                  metric="throughput")
    from .evaluate import evaluate

    evaluate("Llama 3.1 8B", Workload("decode", s_kv=128), space={"tp": (1,)})
    pareto_mask(np.zeros((2, 2)))


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


def distributed_best(
    p: Prepared,
    *,
    metric: str | Metric = "latency",
    client: Any,
    chunk_size: int | None = None,
    progress: bool = False,
) -> xr.Dataset:
    """:func:`simcore.engine.evaluate.best_of_prepared` on a dask cluster (identical result)."""
    return reduce_best(p, metric=metric, chunk_size=chunk_size, progress=progress, client=client)
