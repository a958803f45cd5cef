"""The labelled layer: names ↔ axes, then the kernels. No numerics live here.

:func:`evaluate` returns the full (hardware × layout) tensor as an ``xr.Dataset``
(numpy, or dask-chunked along the hardware dims). :func:`evaluate_best` is the fused
path: the kernel reduces inside its loop, streaming hardware chunks, and returns the
best layout per hardware point without materialising the tensor.
"""

from __future__ import annotations

import numbers
from collections.abc import Mapping, Sequence
from typing import Any, Literal

import numpy as np
import xarray as xr

from .chunks import (
    assemble_best,
    check_fits_in_memory,
    default_chunk_size,
    hw_chunks,
    reduce_best,
)
from .engine import (
    LAYOUT_OUTPUTS,
    MEM_PARTS,
    OUTPUT_NAMES,
    CoeffRecipe,
    Prepared,
    build_coeffs,
    field_attrs,
    fused_metric,
    grid_block,
    prepare,
)
from .errors import SimcoreInputError
from .metrics import Metric
from .options import OPTIONS
from .space import PARALLEL_DIMS, Space
from .specs import HW_KNOBS, Efficiency, Hardware, HardwareFamily, Model, Workload

__all__ = ["evaluate", "evaluate_best", "best_of_prepared", "build_coeffs", "prepare", "Prepared",
           "UNITS", "assemble_best", "default_chunk_size", "fused_metric", "hw_chunks"]

#: Units of every output, per-layout output and knob (from the kernel schema).
UNITS: dict[str, str] = {
    n: field_attrs(n)["units"]
    for n in (*OUTPUT_NAMES, *LAYOUT_OUTPUTS, *HW_KNOBS) if n not in ("fits", "valid")
}


def evaluate(
    model: Model | str,
    workload: Workload,
    *,
    space: str | Space | Mapping[str, Sequence[Any]] | None = "reduced",
    hardware: Hardware | Mapping[str, Any] | None = None,
    family: str | HardwareFamily | None = None,
    efficiency: Efficiency | None = None,
    chunks: Mapping[str, int] | int | None = None,
) -> xr.Dataset:
    """Latency, memory fit and breakdown over every (hardware, layout) point.

    Parameters
    ----------
    model : Model or str
        A :class:`~simcore.specs.Model` or a preset name (``"Llama 3.1 70B"``).
    workload : Workload
        Mode (``"prefill"`` | ``"decode"`` | ``"train"``), batch, ``s_q``, ``s_kv``; for
        training also ``micro_batch``, ``recompute``, ``sequence_parallel``, ``zero_stage``.
    space : {"reduced", "full"}, Space or mapping
        Layout coordinates (a mapping overrides dims of the full space).
    hardware : Hardware or mapping knob -> values, optional
        One point, or a grid (each knob a dimension). Default: the family's hardware.
    family : str or HardwareFamily, optional
        Topology (tier sizes, link latencies); default ``"SiP"``.
    efficiency : Efficiency, optional
        Achievable fractions of peak.
    chunks : int or mapping knob -> chunk size, optional
        Chunk the hardware dims with dask (lazy result; ``.compute()`` to run).
        An int chunks the first knob with more than one value. By default the result
        is in memory, unless it would exceed the ``auto_chunk_points`` option
        (:func:`simcore.set_options`): then it is chunked automatically (about
        ``chunk_points`` per chunk).

    Returns
    -------
    xarray.Dataset
        Dims: the six knobs then the ten layout dims. Variables ``latency_ns``,
        ``throughput_tok_s``, ``flops_per_device``, ``compute_ns``, ``memory_ns``,
        ``comm_ns``, ``fits`` over all dims; ``mem_bytes`` (= ``mem_weights_bytes`` +
        ``mem_kv_bytes`` + ``mem_act_bytes``), ``valid``, ``n_devices`` over the layout
        dims. Units in each variable's ``attrs["units"]``.

    Examples
    --------
    >>> import simcore
    >>> ds = simcore.evaluate("Llama 3.1 8B", simcore.Workload("decode", s_kv=8192))
    >>> int(ds.sizes["tp"]), bool(ds.fits.any())
    (8, True)
    """
    p = prepare(model, workload, space=space, hardware=hardware, family=family,
                efficiency=efficiency)
    layout_shape = p.space.shape
    knob_das = [xr.DataArray(p.knobs[n], dims=[n], coords={n: p.knobs[n]}) for n in HW_KNOBS]
    dask_mode: Literal["forbidden", "parallelized"] = "forbidden"
    if chunks is None and p.n_hw * p.space.size > OPTIONS["auto_chunk_points"]:
        chunks = auto_chunks(p)
    if chunks is None:
        check_fits_in_memory(
            8.0 * len(OUTPUT_NAMES) * p.n_hw * p.space.size,
            f"the full tensor of {p.n_hw:,} hardware points x {p.space.size:,} layouts",
            "pass chunks= for a lazy dask-backed result, or use evaluate_best (the best "
            "layout per hardware point, streamed)")
    if chunks is not None:
        chunks = _check_chunks(chunks)
        if isinstance(chunks, int):
            first = next((n for n in HW_KNOBS if len(p.knobs[n]) > 1), HW_KNOBS[0])
            chunks = {first: chunks}
        knob_das = [da.chunk({n: chunks.get(n, -1)})
                    for n, da in zip(HW_KNOBS, knob_das, strict=True)]
        dask_mode = "parallelized"
    outs = _apply(p, knob_das, dask_mode)
    ds = xr.Dataset(dict(zip(OUTPUT_NAMES, outs, strict=True)))
    valid = p.valid.reshape(layout_shape)
    for name in LAYOUT_OUTPUTS:
        col = p.column(name).reshape(layout_shape)
        if name == "valid":
            ds[name] = (PARALLEL_DIMS, valid)
        elif name == "n_devices":
            ds[name] = (PARALLEL_DIMS, col.astype(np.int64))
        else:
            ds[name] = (PARALLEL_DIMS, col)
    for name in ("mem_bytes", *MEM_PARTS):
        ds[name] = ds[name].where(ds.valid)
    ds = ds.assign_coords(p.layout_coords()).assign_coords(p.hw_coords())
    for name in map(str, ds.variables):
        if name in UNITS:
            ds[name].attrs["units"] = UNITS[name]
        long_name = field_attrs(name).get("long_name")
        if long_name:
            ds[name].attrs["long_name"] = long_name
            ds[name].attrs["description"] = long_name
    ds.attrs.update(p.attrs())
    return ds


def _check_chunks(chunks: Any) -> int | dict[str, int]:
    """``chunks=``: a positive int, or a mapping hardware knob -> positive int (numpy
    integers accepted); anything else a :class:`SimcoreInputError`."""
    def one(name: str, v: Any) -> int:
        if isinstance(v, bool | np.bool_) or not isinstance(v, numbers.Integral) or v < 1:
            raise SimcoreInputError(f"{name} must be a positive integer (hardware points per "
                                    f"chunk), got {v!r}")
        return int(v)

    if isinstance(chunks, Mapping):
        unknown = sorted(map(str, set(chunks) - set(HW_KNOBS)))
        if unknown:
            raise SimcoreInputError(
                f"chunks may only split hardware knobs {list(HW_KNOBS)}, got {unknown}")
        return {k: one(f"chunks[{k!r}]", v) for k, v in chunks.items()}
    return one("chunks", chunks)


def auto_chunks(p: Prepared) -> dict[str, int]:
    """Chunk sizes along the hardware knobs giving about ``chunk_points`` (an option) per
    chunk."""
    target = OPTIONS["chunk_points"]
    per = p.space.size * p.n_hw
    out: dict[str, int] = {}
    for k in HW_KNOBS:
        n = len(p.knobs[k])
        per //= n
        if per * n <= target:
            out[k] = max(1, target // max(1, per))
            break
        out[k] = 1
    return out


def _apply(p: Prepared, knob_das: list[xr.DataArray],
           dask_mode: Literal["forbidden", "parallelized"]) -> tuple[xr.DataArray, ...]:
    from functools import partial

    n_out = len(OUTPUT_NAMES)
    layout_shape = p.space.shape
    source: np.ndarray | CoeffRecipe = p.coeffs
    if dask_mode == "parallelized":
        source = CoeffRecipe.of(p)
    func = partial(grid_block, source, p.eff, layout_shape)
    return xr.apply_ufunc(
        func,
        *knob_das,
        output_core_dims=[list(PARALLEL_DIMS)] * n_out,
        dask=dask_mode,
        output_dtypes=[np.float64] * (n_out - 1) + [np.bool_],
        dask_gufunc_kwargs={"output_sizes": dict(zip(PARALLEL_DIMS, layout_shape, strict=True))},
    )


# --- fused path -------------------------------------------------------------------------

def evaluate_best(
    model: Model | str,
    workload: Workload,
    *,
    space: str | Space | Mapping[str, Sequence[Any]] | None = "reduced",
    hardware: Hardware | Mapping[str, Any] | None = None,
    family: str | HardwareFamily | None = None,
    efficiency: Efficiency | None = None,
    metric: str | Metric = "latency",
    chunk_size: int | None = None,
    progress: bool = False,
) -> xr.Dataset:
    """Best fitting layout per hardware point, reduced inside the kernel (fused path).

    Identical to ``simcore.best(simcore.evaluate(...), metric)`` (same winners, same
    values) but streams hardware chunks, so memory stays bounded for any sweep.

    Examples
    --------
    >>> import simcore
    >>> from simcore.evaluate import evaluate_best
    >>> r = evaluate_best("Llama 3.1 8B", simcore.Workload("decode", s_kv=8192),
    ...                   hardware={"bw_hbm_gbs": [2000, 4000]})
    >>> bool((r.latency_ns.sel(bw_hbm_gbs=4000) < r.latency_ns.sel(bw_hbm_gbs=2000)).all())
    True
    """
    p = prepare(model, workload, space=space, hardware=hardware, family=family,
                efficiency=efficiency)
    return best_of_prepared(p, metric=metric, chunk_size=chunk_size, progress=progress)


def best_of_prepared(
    p: Prepared,
    *,
    metric: str | Metric = "latency",
    chunk_size: int | None = None,
    progress: bool = False,
) -> xr.Dataset:
    """The fused reduction over already-prepared inputs (see :func:`evaluate_best`)."""
    return reduce_best(p, metric=metric, chunk_size=chunk_size, progress=progress)
