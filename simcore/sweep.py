"""Resumable sweeps: finished hardware chunks go to a zarr store as they complete.

Killed and restarted with the same inputs and store, :func:`resumable_best` computes only
the chunks not yet marked done and returns the same Dataset as an uninterrupted run.
A chunk's results are written before its ``done`` flag, so a kill between the two only
costs recomputing that chunk.
"""

from __future__ import annotations

import hashlib
import os
import sys
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

__all__ = ["resumable_best", "fingerprint", "StoreMismatchError"]


class StoreMismatchError(ValueError):
    """The store holds a different sweep."""


def fingerprint(p: Prepared, metric: Metric, chunk_size: int) -> str:
    """Hash of everything that determines the sweep's results and chunking."""
    import json

    h = hashlib.sha256()
    h.update(np.ascontiguousarray(p.coeffs).tobytes())
    h.update(np.ascontiguousarray(p.eff).tobytes())
    h.update(json.dumps({
        "shape": list(p.coeffs.shape),
        "knobs": {k: p.knobs[k].tolist() for k in sorted(p.knobs)},
        "model": repr(p.model), "workload": repr(p.workload), "topology": repr(p.topology),
        "space": [[d, list(map(str, v))] for d, v in p.space.coords],
        "metric": metric.name, "chunk_size": chunk_size,
    }, sort_keys=True).encode())
    return h.hexdigest()


def _open(store: str | os.PathLike[str], p: Prepared, m: Metric, chunk_size: int) -> Any:
    import zarr

    fp = fingerprint(p, m, chunk_size)
    n_hw = p.n_hw
    n_chunks = -(-n_hw // chunk_size)
    path = os.fspath(store)
    if os.path.exists(path):
        try:
            g = zarr.open_group(path, mode="r+")
        except Exception as exc:  # corrupt or not a zarr group
            raise StoreMismatchError(
                f"{path!r} exists but is not a simcore sweep store ({exc}); pass a new path"
            ) from None
        got = g.attrs.get("fingerprint")
        if got != fp:
            raise StoreMismatchError(
                f"{path!r} holds a different sweep (other model, workload, grid, metric or "
                "chunk size); pass a new store path or delete this one to start over"
            )
        return g
    g = zarr.open_group(path, mode="w")
    g.create_array("best_idx", shape=(n_hw,), chunks=(chunk_size,), dtype="int64", fill_value=-1)
    g.create_array("vals", shape=(n_hw, N_BEST), chunks=(chunk_size, N_BEST), dtype="float64",
                   fill_value=np.nan)
    g.create_array("n_fit", shape=(n_hw,), chunks=(chunk_size,), dtype="int64", fill_value=0)
    g.create_array("done", shape=(n_chunks,), chunks=(1,), dtype="bool", fill_value=False)
    g.attrs.update(fingerprint=fp, metric=m.name, chunk_size=chunk_size, n_hw=n_hw,
                   model=p.model.name)
    return g


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

    The result equals :func:`simcore.evaluate.best_of_prepared`; ``attrs`` record
    ``chunks_total``, ``chunks_reused`` (found done in the store) and ``chunks_computed``.
    """
    m, code = fused_metric(metric)
    if chunk_size is None:
        chunk_size = default_chunk_size(p)
    g = _open(store, p, m, chunk_size)
    done = g["done"][:]
    chunks = list(hw_chunks(p.n_hw, chunk_size))
    todo = [c for c, is_done in zip(chunks, done, strict=True) if not is_done]
    bar: Any = None
    if progress:
        from tqdm.auto import tqdm

        bar = tqdm(total=len(chunks), initial=len(chunks) - len(todo), desc="hardware chunks",
                   unit="chunk", file=sys.stderr)

    def write(a: int, b: int, bi: np.ndarray, v: np.ndarray, nf: np.ndarray) -> None:
        g["best_idx"][a:b] = bi
        g["vals"][a:b] = v
        g["n_fit"][a:b] = nf
        g["done"][a // chunk_size] = True
        if bar is not None:
            bar.update(1)

    if client is None:
        for a, b in todo:
            write(a, b, *fused_chunk(p, a, b, code, m.sign))
    else:
        from distributed import as_completed

        from .distributed import _run_chunk

        [prep] = client.scatter([p], broadcast=True, hash=False)
        futs = [client.submit(_run_chunk, prep, a, b, code, m.sign, pure=False) for a, b in todo]
        for fut in as_completed(futs):
            write(*fut.result())
    if bar is not None:
        bar.close()
    ds = assemble_best(p, m, g["best_idx"][:], g["vals"][:], g["n_fit"][:])
    ds.attrs.update(chunks_total=len(chunks), chunks_reused=len(chunks) - len(todo),
                    chunks_computed=len(todo), store=os.fspath(store))
    return ds
