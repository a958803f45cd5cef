"""The labelled layer: names ↔ axes, then the kernels. No numerics live here.

:func:`evaluate` returns the full (hardware × layout) tensor as an ``xr.Dataset``
(numpy, or dask-chunked along the hardware dims). :func:`evaluate_best` is the fused
path: the kernel reduces inside its loop, streaming hardware chunks, and returns the
best layout per hardware point without materialising the tensor.

Both take a device budget (``gpus=N``, ``exact_gpus``: masked in the engine, so a layout
outside it is a point that does not fit) and sweep ``batch`` and ``s_kv`` (training also
``micro_batch``, ``zero_stage`` and ``recompute``) as ordinary dimensions: one prepared
point per combination of the swept values, the labelled results concatenated along new
leading dims (:func:`stack_points`, in :data:`WORKLOAD_DIMS` order). A scalar only
replaces the workload's value, with today's shape.
"""

from __future__ import annotations

import functools
import math
import numbers
from collections.abc import Mapping, Sequence
from typing import Any, Literal

import numpy as np
import xarray as xr

from ..errors import SimcoreInputError
from ..model.specs import HW_KNOBS, Efficiency, Hardware, HardwareFamily, Model, Workload
from ..options import OPTIONS
from .chunks import (
    BYTES_PER_HW_POINT,
    assemble_best,
    check_sweep_memory,
    default_chunk_size,
    hw_chunks,
    reduce_best,
)
from .core import (
    LAYOUT_OUTPUTS,
    OUTPUT_NAMES,
    CoeffRecipe,
    Prepared,
    build_coeffs,
    check_budget,
    field_attrs,
    fused_metric,
    grid_block,
    map_points,
    prepare,
)
from .labels import dataset, layout_attrs, space_coords, var_attrs, variable
from .metrics import Metric
from .space import (
    PARALLEL_DIMS,
    TRAIN_DIMS,
    WORKLOAD_DIMS,
    Space,
    get_space,
    workload_points,
)

__all__ = ["evaluate", "evaluate_best", "best_of_prepared", "build_coeffs", "prepare", "Prepared",
           "UNITS", "WORKLOAD_DIMS", "assemble_best", "default_chunk_size", "fused_metric",
           "hw_chunks", "stack_points", "workload_points"]

#: Units of every output, per-layout output and knob (from the kernel schema).
UNITS: dict[str, str] = {
    n: field_attrs(n)["units"]
    for n in (*OUTPUT_NAMES, *LAYOUT_OUTPUTS, *HW_KNOBS) if n not in ("fits", "valid")
}

def stack_points(parts: Sequence[xr.Dataset], dims: Mapping[str, Sequence[Any]], *,
                 same: Sequence[str] = ()) -> xr.Dataset:
    """The Datasets of a sweep's points (C order over ``dims``) as one Dataset with
    ``dims`` leading, their coordinates labelled from :data:`WORKLOAD_DIMS`.

    Variables named in ``same`` do not depend on the workload (a layout's ``n_devices``)
    and keep the first point's dims. The swept fields leave the attrs (they are
    coordinates now), and so does ``s_q`` where it follows ``s_kv``.

    The parts come from one prepared space and hardware grid (same coordinates, variables
    and attrs but the workload's): in memory their arrays are stacked directly; lazy
    (dask) parts go through ``xr.concat``, which gives the same Dataset.
    """
    first = parts[0]
    names = [str(n) for n in first.data_vars]
    if not all(isinstance(q.variables[n].data, np.ndarray) for q in parts for n in names):
        return _concat_points(parts, dims, same=same)
    lead = tuple(dims)
    shape = tuple(len(v) for v in dims.values())
    data: dict[str, xr.Variable] = {}
    for name in names:
        var = first.variables[name]
        if name in same:
            data[name] = var.copy(deep=False)
            continue
        stacked = np.stack([q.variables[name].data for q in parts]).reshape(shape + var.shape)
        data[name] = variable((*lead, *map(str, var.dims)), stacked, dict(var.attrs))
    # xr.concat's order: the parts' coordinates, then the sweep's from the innermost out
    swept = _sweep_coords(tuple((d, tuple(x if isinstance(x, str) else int(x) for x in dims[d]))
                                for d in reversed(lead)))
    ds = dataset(data, xr.Coordinates({**first.coords.variables, **swept.variables},
                                      indexes={**first.xindexes, **swept.xindexes}),
                 first.attrs)
    return _sweep_attrs(ds, parts, dims)


@functools.lru_cache(maxsize=64)
def _sweep_coords(dims: tuple[tuple[str, tuple[Any, ...]], ...]) -> xr.Coordinates:
    return xr.Coordinates({d: xr.Variable(d, np.array(v, dtype=str if d == "recompute"
                                                      else np.int64), dict(WORKLOAD_DIMS[d]))
                           for d, v in dims})


def _sweep_attrs(ds: xr.Dataset, parts: Sequence[xr.Dataset],
                 dims: Mapping[str, Sequence[Any]]) -> xr.Dataset:
    for name in dims:
        ds.attrs.pop(name, None)
    if len({q.attrs.get("s_q") for q in parts}) > 1:
        ds.attrs.pop("s_q", None)
    return ds


def _concat_points(parts: Sequence[xr.Dataset], dims: Mapping[str, Sequence[Any]], *,
                   same: Sequence[str] = ()) -> xr.Dataset:
    """:func:`stack_points` by ``xr.concat`` (any backing arrays, dask included)."""
    level = list(parts)
    for name, values in reversed(list(dims.items())):
        n = len(values)
        coord = xr.DataArray(list(values), dims=name, name=name)
        level = [xr.concat(level[i:i + n], dim=coord, data_vars="all", coords="minimal",
                           compat="override", join="exact", combine_attrs="override")
                 for i in range(0, len(level), n)]
    [ds] = level
    first = {d: 0 for d in dims}
    for name in same:
        ds[name] = ds[name].isel(first, drop=True)
    for name in dims:
        ds[name].attrs.update(WORKLOAD_DIMS[name])
    return _sweep_attrs(ds, parts, dims)


def evaluate(
    model: Model | str,
    workload: Workload | None = None,
    *,
    batch: int | Sequence[int] | None = None,
    s_kv: int | Sequence[int] | None = None,
    micro_batch: int | Sequence[int] | None = None,
    zero_stage: int | Sequence[int] | None = None,
    recompute: str | Sequence[str] | None = None,
    gpus: int | None = None,
    exact_gpus: bool = False,
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
        A :class:`~simcore.model.specs.Model` or a preset name (``"Llama 3.1 70B"``).
    workload : Workload, optional
        Mode (``"prefill"`` | ``"decode"`` | ``"train"``), batch, ``s_q``, ``s_kv``; for
        training also ``micro_batch``, ``recompute``, ``sequence_parallel``, ``zero_stage``.
        Default ``Workload("decode")``.
    batch, s_kv : int or sequence of int, optional
        A sequence sweeps the field as a dimension (``batch=[1, 8, 64]``): the result
        gains leading ``s_kv`` and/or ``batch`` dims (coordinates with ``units``). A
        scalar replaces the workload's value (no new dim). For prefill and training
        ``s_q`` follows ``s_kv``.
    micro_batch, zero_stage, recompute : int, str or a sequence of them, optional
        Training only: a sequence sweeps the field as a dimension, as ``batch`` does
        (``zero_stage=[0, 1, 2, 3]``, ``recompute=["selective", "full"]``); a scalar
        replaces the workload's value. A micro-batch that does not divide a layout's
        per-replica batch masks that layout (not valid); one that divides no batch is a
        ``SimcoreInputError``.
    gpus : int, optional
        Device budget: layouts using more than ``gpus`` devices are masked (not valid:
        NaN outputs, ``fits`` False, so they never win :func:`simcore.best` or join a
        Pareto frontier). ``SimcoreInputError`` (a ``DeviceBudgetError``) when nothing
        fits within it but a larger budget would; the message gives the smallest device
        count that fits. Default None: no budget, every layout of the family's whole
        system competes. The CLI and the app differ on purpose: without ``--gpus`` they
        pass one node of a GPU family (``Topology.pes_per_cube``, 8 on the HGX boards),
        what a deployment uses unless told otherwise
        (:mod:`simcore.studies.assumptions`); the library keeps None because the
        validation and the golden numbers are pinned on it.
    exact_gpus : bool
        With ``gpus``: keep only layouts using exactly ``gpus`` devices.
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
        Dims: the swept ``s_kv`` / ``batch`` / ``micro_batch`` / ``zero_stage`` /
        ``recompute`` (if any), the six knobs, then the ten layout
        dims. Variables ``latency_ns``, ``throughput_tok_s``, ``flops_per_device``,
        ``compute_ns``, ``memory_ns``, ``comm_ns``, ``fits`` over all dims; ``mem_bytes``
        (= ``mem_weights_bytes`` + ``mem_kv_bytes`` + ``mem_act_bytes``) and ``valid``
        over the swept and layout dims, ``n_devices`` over the layout dims. Units in each
        variable's ``attrs["units"]``; with ``gpus`` the attrs record the budget.

    Examples
    --------
    >>> import simcore
    >>> ds = simcore.evaluate("Llama 3.1 8B", simcore.Workload("decode", s_kv=8192))
    >>> int(ds.sizes["tp"]), bool(ds.fits.any())
    (8, True)
    >>> ds = simcore.evaluate("Llama 3.1 8B", batch=[1, 8, 64], s_kv=[2048, 8192], gpus=8,
    ...                       family="H100-SXM")
    >>> dict(ds.latency_ns.sizes)["batch"], ds.batch.attrs["units"]
    (3, 'sequences')
    >>> int(simcore.best(ds).n_devices.max()) <= 8
    True
    """
    dims, wls = workload_points(workload, batch=batch, s_kv=s_kv, micro_batch=micro_batch,
                                zero_stage=zero_stage, recompute=recompute)
    kw: dict[str, Any] = dict(space=space, hardware=hardware, family=family,
                              efficiency=efficiency, gpus=gpus, exact_gpus=exact_gpus)
    p = prepare(model, wls[0], **kw)
    n_points = len(wls) * p.n_hw * p.space.size
    if chunks is None and n_points > OPTIONS["auto_chunk_points"]:
        chunks = auto_chunks(p)
    if chunks is not None:
        chunks = _check_chunks(chunks)
    _check_sweep_memory(p, dims, fused=False, in_memory=chunks is None)
    each = p.n_hw * p.space.size if chunks is None else 0  # lazy parts: nothing runs yet
    # the first stage never runs in parallel: its rows are serial work however many
    preps = [p, *map_points(lambda w: prepare(model, w, **kw), wls[1:], p.space.size,
                            serial_each=True)]
    check_budget(preps)
    parts = map_points(lambda q: _labelled(q, chunks), preps, each)
    return stack_points(parts, dims, same=("n_devices",)) if dims else parts[0]


def _check_sweep_memory(p: Prepared, dims: Mapping[str, Sequence[Any]], *, fused: bool,
                        in_memory: bool) -> None:
    """Refuse, before the sweep's other points are prepared, a sweep over ``dims`` (the
    swept workload values: batch, s_kv, training's micro_batch, zero_stage, recompute) whose prepared points and results would not fit in memory.

    ``p`` is the sweep's first point; every point holds as much
    (:func:`~simcore.engine.chunks.prepared_bytes`) while the sweep runs. The results: the
    full tensor (``in_memory``, twice over a sweep: the points and their stack), nothing
    for a lazy result, or the best layouts (``fused``, twice over a sweep; one point alone
    is checked by :func:`~simcore.engine.chunks.reduce_best`)."""
    if not dims and (fused or not in_memory):
        return
    n = math.prod(len(v) for v in dims.values()) if dims else 1
    stack = 2 if dims else 1
    if fused:
        out_bytes = float(p.n_hw * BYTES_PER_HW_POINT)
    else:
        out_bytes = 8.0 * len(OUTPUT_NAMES) * p.n_hw * p.space.size if in_memory else 0.0
    sweep = " x ".join(f"{len(v):,} {d}" for d, v in dims.items())
    train = [d for d in dims if d in TRAIN_DIMS]
    fewer = (f"sweep fewer batch / s_kv{''.join(f' / {d}' for d in train)} values ({sweep} = "
             f"{n:,} points; e.g. one call per s_kv value)")
    if p.space.size > get_space("reduced", p.workload.mode, p.gpus, p.model.n_experts).size:
        fewer += " or the reduced space"
    if not fused and in_memory:
        what = (f"the full tensor of {p.n_hw:,} hardware points x {p.space.size:,} layouts"
                + (f" x {n:,} workload points" if dims else ""))
        advice = ("pass chunks= for a lazy dask-backed result, or use evaluate_best (the best "
                  "layout per hardware point, streamed)")
        if dims:
            advice = f"{fewer}, pass chunks= for a lazy result, or use evaluate_best"
    else:
        what = (f"{'evaluate_best' if fused else 'evaluate'} over {n:,} workload points of "
                f"{p.space.size:,} layouts x {p.n_hw:,} hardware points")
        advice = fewer
    check_sweep_memory(p, n, result_bytes=n * stack * out_bytes, what=what, advice=advice)


def _labelled(p: Prepared, chunks: int | dict[str, int] | None) -> xr.Dataset:
    """The full tensor of one prepared point as a labelled Dataset (lazy with ``chunks``)."""
    if chunks is not None:
        return _labelled_lazy(p, chunks)
    full = (*HW_KNOBS, *PARALLEL_DIMS)
    shape = p.hw_shape + p.space.shape
    outs = p.combine(p.hw_rows(0, p.n_hw))
    data = {n: variable(full, outs[n].reshape(shape), var_attrs(n)) for n in OUTPUT_NAMES}
    data.update({n: variable(PARALLEL_DIMS, col.reshape(p.space.shape), var_attrs(n))
                 for n, col in p.layout_values().items()})
    return dataset(data, space_coords(p.space, p.knobs), p.attrs())


def _labelled_lazy(p: Prepared, chunks: int | dict[str, int]) -> xr.Dataset:
    """The full tensor as a dask-backed Dataset chunked along the hardware dims."""
    layout_shape = p.space.shape
    knob_das = [xr.DataArray(p.knobs[n], dims=[n], coords={n: p.knobs[n]}) for n in HW_KNOBS]
    if isinstance(chunks, int):
        first = next((n for n in HW_KNOBS if len(p.knobs[n]) > 1), HW_KNOBS[0])
        chunks = {first: chunks}
    knob_das = [da.chunk({n: chunks.get(n, -1)}) for n, da in zip(HW_KNOBS, knob_das, strict=True)]
    outs = _apply(p, knob_das, "parallelized")
    ds = xr.Dataset(dict(zip(OUTPUT_NAMES, outs, strict=True)))
    for name, col in p.layout_values().items():
        ds[name] = (PARALLEL_DIMS, col.reshape(layout_shape))
    ds = ds.assign_coords(p.layout_coords()).assign_coords(p.hw_coords())
    for name in map(str, ds.variables):
        ds[name].attrs.update(var_attrs(name))
        ds[name].attrs.update(layout_attrs(name))
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
    workload: Workload | None = None,
    *,
    batch: int | Sequence[int] | None = None,
    s_kv: int | Sequence[int] | None = None,
    micro_batch: int | Sequence[int] | None = None,
    zero_stage: int | Sequence[int] | None = None,
    recompute: str | Sequence[str] | None = None,
    gpus: int | None = None,
    exact_gpus: bool = False,
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
    ``batch``, ``s_kv``, ``micro_batch``, ``zero_stage``, ``recompute``, ``gpus`` and
    ``exact_gpus`` as in :func:`evaluate`: the best layout per (swept workload fields,
    hardware) point, within the budget.

    Examples
    --------
    >>> import simcore
    >>> from simcore.engine.evaluate import evaluate_best
    >>> r = evaluate_best("Llama 3.1 8B", simcore.Workload("decode", s_kv=8192),
    ...                   hardware={"bw_hbm_gbs": [2000, 4000]})
    >>> bool((r.latency_ns.sel(bw_hbm_gbs=4000) < r.latency_ns.sel(bw_hbm_gbs=2000)).all())
    True
    """
    dims, wls = workload_points(workload, batch=batch, s_kv=s_kv, micro_batch=micro_batch,
                                zero_stage=zero_stage, recompute=recompute)
    kw: dict[str, Any] = dict(space=space, hardware=hardware, family=family,
                              efficiency=efficiency, gpus=gpus, exact_gpus=exact_gpus)
    first = prepare(model, wls[0], **kw)
    _check_sweep_memory(first, dims, fused=True, in_memory=True)
    preps = [first, *map_points(lambda w: prepare(model, w, **kw), wls[1:],
                                first.space.size, serial_each=True)]
    check_budget(preps)
    parts = map_points(lambda q: best_of_prepared(q, metric=metric, chunk_size=chunk_size,
                                                  progress=progress), preps,
                       first.n_hw * first.space.size,
                       serial_each=None if not progress else False)  # bars: one at a time
    return stack_points(parts, dims) if dims else parts[0]


def best_of_prepared(
    p: Prepared,
    *,
    metric: str | Metric = "latency",
    chunk_size: int | None = None,
    progress: bool = False,
) -> xr.Dataset:
    """The fused reduction over already-prepared inputs (see :func:`evaluate_best`)."""
    return reduce_best(p, metric=metric, chunk_size=chunk_size, progress=progress)
