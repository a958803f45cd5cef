"""One chunked reduction: hardware chunks through the fused kernel, with a pluggable
executor (in-process or a dask client) and storage (none, or a zarr checkpoint).

:func:`reduce_best` is the only loop over chunks in simcore; ``evaluate_best``,
``joint_explore``, the resumable sweep and the distributed sweep all call it. Whatever
the executor and storage, the result is the same Dataset, bit for bit. On any exit
(an error, Ctrl-C) chunks still queued on a cluster are cancelled; chunks already
stored stay stored, so a rerun with the same store computes only what is missing.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import sys
from collections.abc import Iterator
from typing import Any

import numpy as np
import xarray as xr

from .engine import (
    LAYOUT_OUTPUTS,
    MEM_PARTS,
    N_BEST,
    OUTPUT_NAMES,
    Prepared,
    field_attrs,
    fused_metric,
)
from .metrics import Metric
from .options import OPTIONS
from .space import CHOICES
from .specs import HW_KNOBS

__all__ = ["StoreMismatchError", "assemble_best", "default_chunk_size", "fingerprint",
           "hw_chunks", "reduce_best"]


class StoreMismatchError(ValueError):
    """The store holds a different sweep."""


def hw_chunks(n_hw: int, chunk_size: int) -> Iterator[tuple[int, int]]:
    """``(start, stop)`` of each chunk of ``chunk_size`` hardware rows."""
    for start in range(0, n_hw, chunk_size):
        yield start, min(n_hw, start + chunk_size)


def default_chunk_size(p: Prepared) -> int:
    """Hardware rows per chunk: about ``chunk_points`` joint evaluations (an option)."""
    return max(1, min(p.n_hw, math.ceil(OPTIONS["chunk_points"] / max(1, p.space.size))))


# --- storage --------------------------------------------------------------------------------

def fingerprint(p: Prepared, metric: Metric, chunk_size: int) -> str:
    """Hash of everything that determines the sweep's results and chunking."""
    h = hashlib.sha256()
    h.update(np.ascontiguousarray(p.coeffs).tobytes())
    h.update(np.asarray(p.eff, dtype=np.float64).tobytes())
    h.update(json.dumps({
        "shape": [len(p.coeffs), len(p.coeffs.dtype.names or ())],
        "knobs": {k: p.knobs[k].tolist() for k in sorted(p.knobs)},
        "model": repr(p.model), "workload": repr(p.workload), "topology": repr(p.topology),
        "space": [[d, list(map(str, v))] for d, v in p.space.coords],
        "metric": metric.name, "chunk_size": chunk_size,
    }, sort_keys=True).encode())
    return h.hexdigest()


class _Memory:
    """No storage: results in memory only."""

    def __init__(self, n_hw: int) -> None:
        self.best_idx = np.empty(n_hw, dtype=np.int64)
        self.vals = np.empty((n_hw, N_BEST))
        self.n_fit = np.empty(n_hw, dtype=np.int64)

    def done(self, n_chunks: int) -> np.ndarray:
        return np.zeros(n_chunks, dtype=bool)

    def write(self, a: int, b: int, bi: np.ndarray, v: np.ndarray, nf: np.ndarray,
              chunk: int) -> None:
        self.best_idx[a:b], self.vals[a:b], self.n_fit[a:b] = bi, v, nf

    def read(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        return self.best_idx, self.vals, self.n_fit


class _ZarrCheckpoint:
    """Finished chunks in a zarr store; a chunk's data is written before its ``done`` flag,
    so a kill between the two only costs recomputing that chunk."""

    def __init__(self, store: str | os.PathLike[str], p: Prepared, m: Metric,
                 chunk_size: int) -> None:
        import zarr

        fp = fingerprint(p, m, chunk_size)
        n_hw = p.n_hw
        n_chunks = -(-n_hw // chunk_size)
        path = os.fspath(store)
        self.path = path
        if os.path.exists(path):
            try:
                g = zarr.open_group(path, mode="r+")
            except Exception as exc:  # corrupt or not a zarr group
                raise StoreMismatchError(
                    f"{path!r} exists but is not a simcore sweep store ({exc}); pass a new path"
                ) from None
            if g.attrs.get("fingerprint") != fp:
                raise StoreMismatchError(
                    f"{path!r} holds a different sweep (other model, workload, grid, metric or "
                    "chunk size); pass a new store path or delete this one to start over"
                )
        else:
            g = zarr.open_group(path, mode="w")
            g.create_array("best_idx", shape=(n_hw,), chunks=(chunk_size,), dtype="int64",
                           fill_value=-1)
            g.create_array("vals", shape=(n_hw, N_BEST), chunks=(chunk_size, N_BEST),
                           dtype="float64", fill_value=np.nan)
            g.create_array("n_fit", shape=(n_hw,), chunks=(chunk_size,), dtype="int64",
                           fill_value=0)
            g.create_array("done", shape=(n_chunks,), chunks=(1,), dtype="bool",
                           fill_value=False)
            g.attrs.update(fingerprint=fp, metric=m.name, chunk_size=chunk_size, n_hw=n_hw,
                           model=p.model.name)
        self.g: Any = g

    def done(self, n_chunks: int) -> np.ndarray:
        return np.asarray(self.g["done"][:], dtype=bool)

    def write(self, a: int, b: int, bi: np.ndarray, v: np.ndarray, nf: np.ndarray,
              chunk: int) -> None:
        self.g["best_idx"][a:b] = bi
        self.g["vals"][a:b] = v
        self.g["n_fit"][a:b] = nf
        self.g["done"][chunk] = True

    def read(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        return self.g["best_idx"][:], self.g["vals"][:], self.g["n_fit"][:]


# --- executors ------------------------------------------------------------------------------

def _run_chunk(p: Prepared, start: int, stop: int, metric: str
               ) -> tuple[int, int, np.ndarray, np.ndarray, np.ndarray]:
    bi, v, nf = p.best_chunk(start, stop, metric)
    return start, stop, bi, v, nf


def _in_process(p: Prepared, todo: list[tuple[int, int]], metric: str
                ) -> Iterator[tuple[int, int, np.ndarray, np.ndarray, np.ndarray]]:
    for a, b in todo:
        yield _run_chunk(p, a, b, metric)


def _on_dask(client: Any, p: Prepared, todo: list[tuple[int, int]], metric: str
             ) -> Iterator[tuple[int, int, np.ndarray, np.ndarray, np.ndarray]]:
    from distributed import as_completed

    [prep] = client.scatter([p], broadcast=True, hash=False)
    futures = [client.submit(_run_chunk, prep, a, b, metric, pure=False) for a, b in todo]
    try:
        for fut in as_completed(futures):
            yield fut.result()
    finally:  # an error, Ctrl-C or an abandoned generator: nothing left running
        client.cancel([f for f in futures if not f.done()])


def reduce_best(
    p: Prepared,
    *,
    metric: str | Metric = "latency",
    chunk_size: int | None = None,
    progress: bool = False,
    client: Any = None,
    store: str | os.PathLike[str] | None = None,
) -> xr.Dataset:
    """The metric-best fitting layout per hardware point, chunk by chunk.

    Parameters
    ----------
    p : Prepared
        From :func:`simcore.engine.prepare`.
    metric : str or Metric
        ``"latency"``, ``"throughput"`` or ``"FLOPS_per_gpu"`` (aliases accepted).
    chunk_size : int, optional
        Hardware rows per chunk; default about ``chunk_points`` (an option) joint
        evaluations; for a dask client without a store, at least
        ``dask_chunks_per_worker`` chunks per worker.
    progress : bool
        A progress bar on stderr.
    client : dask.distributed.Client, optional
        Run the chunks on a cluster (executor); default in-process.
    store : path, optional
        A zarr checkpoint (storage): finished chunks are saved as they complete, and a
        rerun with the same store computes only the missing ones.

    Returns
    -------
    xarray.Dataset
        Over the hardware dims. With a ``store``, ``attrs`` also record ``store``,
        ``chunks_total``, ``chunks_reused`` and ``chunks_computed``.
    """
    m, _ = fused_metric(metric)
    if chunk_size is None:
        chunk_size = default_chunk_size(p)
        if client is not None and store is None:  # a store keeps one chunking for any executor
            n_workers = max(1, len(client.scheduler_info().get("workers", {})))
            per = OPTIONS["dask_chunks_per_worker"] * n_workers
            chunk_size = max(1, min(chunk_size, -(-p.n_hw // per)))
    if chunk_size < 1:
        raise ValueError(f"chunk_size must be >= 1 hardware points, got {chunk_size}")
    chunks = list(hw_chunks(p.n_hw, chunk_size))
    storage: _Memory | _ZarrCheckpoint = (
        _Memory(p.n_hw) if store is None else _ZarrCheckpoint(store, p, m, chunk_size))
    done = storage.done(len(chunks))
    todo = [c for c, is_done in zip(chunks, done, strict=True) if not is_done]
    runs = _in_process(p, todo, m.name) if client is None else _on_dask(client, p, todo, m.name)
    bar: Any = None
    if progress:
        from tqdm.auto import tqdm

        bar = tqdm(total=len(chunks), initial=len(chunks) - len(todo), unit="chunk",
                   desc="hardware chunks" + (" (dask)" if client is not None else ""),
                   file=sys.stderr)
    try:
        for a, b, bi, v, nf in runs:
            storage.write(a, b, bi, v, nf, a // chunk_size)
            if bar is not None:
                bar.update(1)
    finally:
        close = getattr(runs, "close", None)
        if close is not None:
            close()
        if bar is not None:
            bar.close()
    ds = assemble_best(p, m, *storage.read())
    if store is not None:  # the result itself is the same for any chunking and executor
        ds.attrs.update(chunks_total=len(chunks), chunks_reused=len(chunks) - len(todo),
                        chunks_computed=len(todo), store=os.fspath(store))
    return ds


def assemble_best(p: Prepared, m: Metric, best_idx: np.ndarray, vals: np.ndarray,
                  n_fit: np.ndarray) -> xr.Dataset:
    """Per-hardware winners (flat arrays over the C-order hw grid) → labelled Dataset."""
    shape = p.hw_shape
    dims = list(HW_KNOBS)
    ok = best_idx >= 0
    safe = np.where(ok, best_idx, 0)
    data: dict[str, Any] = {}
    for q, name in enumerate(OUTPUT_NAMES[:N_BEST]):
        data[name] = (dims, vals[:, q].reshape(shape))
    for name in ("mem_bytes", *MEM_PARTS, "n_devices"):
        data[name] = (dims, np.where(ok, p.column(name)[safe], np.nan).reshape(shape))
    for j, (dim, values) in enumerate(p.space.coords):
        col = np.asarray(values, dtype=object if dim in CHOICES else np.int64)
        pos = np.unravel_index(safe, p.space.shape)[j]
        picked = col[pos]
        if dim in CHOICES:
            picked = np.where(ok, picked, "")
        else:
            picked = np.where(ok, picked, -1)
        data[f"best_{dim}"] = (dims, picked.reshape(shape))
    data["best_layout_index"] = (dims, best_idx.reshape(shape))
    data["n_fits"] = (dims, n_fit.reshape(shape))
    data["any_fits"] = (dims, ok.reshape(shape))
    data["fits"] = (dims, ok.reshape(shape))  # the winner fits (as best() reports it)
    data["valid"] = (dims, ok.reshape(shape))
    ds = xr.Dataset(data, coords=p.hw_coords())
    for name in map(str, ds.variables):
        if name in LAYOUT_OUTPUTS or name in OUTPUT_NAMES or name in HW_KNOBS:
            units = field_attrs(name).get("units")
            if units and name not in ("fits", "valid"):
                ds[name].attrs["units"] = units
    ds.attrs.update(p.attrs(), best_metric=m.name, best_direction=m.direction,
                    n_layouts=int(p.space.size))
    return ds
