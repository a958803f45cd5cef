"""Resumable sweeps: finished hardware chunks go to a zarr store as they complete.

Killed and restarted with the same inputs and store, :func:`resumable_best` verifies the
chunks marked done (each carries the sha256 of its arrays), computes only the missing or
damaged ones and returns the same Dataset as an uninterrupted run. One run at a time uses
a store (``.lock`` with the owner's pid); stores written before checksums (format 1) are
refused with "pass a new store path".
The loop, the storage and the executors live in :mod:`simcore.engine.chunks`; this module is
the named entry point for checkpointed runs.
"""

from __future__ import annotations

import os
from typing import Any

import xarray as xr

from .chunks import StoreMismatchError, fingerprint, reduce_best
from .core import Prepared
from .metrics import Metric

__all__ = ["resumable_best", "fingerprint", "StoreMismatchError"]


def resumable_best(
    p: Prepared,
    store: str | os.PathLike[str],
    *,
    metric: str | Metric = "latency",
    chunk_size: int | None = None,
    progress: bool = False,
    client: Any = None,
) -> xr.Dataset:
    """The fused per-hardware reduction, checkpointed chunk by chunk in a zarr store.

    The result equals :func:`simcore.engine.evaluate.best_of_prepared`; ``attrs`` record
    ``chunks_total``, ``chunks_reused`` (found done and verified in the store),
    ``chunks_repaired`` (marked done but damaged, so recomputed) and ``chunks_computed``.
    """
    return reduce_best(p, metric=metric, chunk_size=chunk_size, progress=progress,
                       client=client, store=store)
