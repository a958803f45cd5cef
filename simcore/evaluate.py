"""The labelled layer: names ↔ axes, then the kernels. No numerics live here.

:func:`evaluate` returns the full (hardware × layout) tensor as an ``xr.Dataset``
(numpy, or dask-chunked along the hardware dims). :func:`evaluate_best` is the fused
path: the kernel reduces inside its loop, streaming hardware chunks, and returns the
best layout per hardware point without materialising the tensor.
"""

from __future__ import annotations

import math
import sys
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np
import xarray as xr

from .metrics import Metric, get_metric
from .presets import get_family, get_model
from .space import CHOICES, PARALLEL_DIMS, Space, get_space, hardware_grid, layout_table
from .specs import HW_KNOBS, Efficiency, Hardware, HardwareFamily, Model, Topology, Workload

__all__ = ["evaluate", "evaluate_best", "best_of_prepared", "build_coeffs", "prepare", "Prepared",
           "UNITS"]

UNITS = {
    "latency_ns": "ns",
    "throughput_tok_s": "tokens/s",
    "flops_per_device": "FLOP/s",
    "compute_ns": "ns",
    "memory_ns": "ns",
    "comm_ns": "ns",
    "mem_bytes": "B",
    "mem_weights_bytes": "B",
    "mem_kv_bytes": "B",
    "mem_act_bytes": "B",
    "n_devices": "1",
    "pe_hbm_gb": "GB",
    "bw_hbm_gbs": "GB/s",
    "peak_tflops_f16": "TFLOP/s",
    "bw_intra_gbs": "GB/s",
    "bw_inter_gbs": "GB/s",
    "bw_intersip_gbs": "GB/s",
}

_DESCRIPTIONS = {
    "latency_ns": "TTFT (prefill), time per output token (decode) or step time (train)",
    "throughput_tok_s": "tokens produced per second by the whole system",
    "flops_per_device": "achieved model FLOP/s per device",
    "compute_ns": "time in compute-bound ops",
    "memory_ns": "time in HBM-bound ops",
    "comm_ns": "exposed communication time",
    "fits": "valid layout whose per-device memory fits usable HBM",
    "valid": "layout is a legal combination for this model and system",
    "mem_bytes": "memory per device: weights, KV cache, activations",
    "mem_weights_bytes": "weights (inference) or ZeRO model states (training) per device",
    "mem_kv_bytes": "KV cache per device",
    "mem_act_bytes": "activations and logits per device",
    "n_devices": "devices the layout occupies",
}


@dataclass(frozen=True)
class Prepared:
    """Everything the kernels need, packed once."""

    model: Model
    workload: Workload
    space: Space
    topology: Topology
    efficiency: Efficiency
    family: str
    knobs: dict[str, np.ndarray]
    layouts: np.ndarray
    coeffs: np.ndarray
    eff: np.ndarray

    @property
    def hw_shape(self) -> tuple[int, ...]:
        return tuple(len(self.knobs[k]) for k in HW_KNOBS)

    @property
    def n_hw(self) -> int:
        return int(np.prod(self.hw_shape))

    def layout_coords(self) -> dict[str, Any]:
        return {d: np.asarray(v, dtype=object if d in CHOICES else np.int64)
                for d, v in self.space.coords}

    def hw_coords(self) -> dict[str, np.ndarray]:
        return {k: self.knobs[k] for k in HW_KNOBS}

    def attrs(self) -> dict[str, Any]:
        w = self.workload
        return {
            "model": self.model.name,
            "mode": w.mode,
            "batch": w.batch,
            "s_q": w.s_q,
            "s_kv": w.s_kv,
            "family": self.family,
            "space": self.space.name,
            "n_system_devices": self.topology.n_devices,
            **{f"efficiency_{k}": v for k, v in vars(self.efficiency).items()},
        }

    def hw_rows(self, start: int, stop: int) -> np.ndarray:
        """Rows ``start:stop`` of the flattened (C-order) hardware grid, shape (n, 6)."""
        idx = np.unravel_index(np.arange(start, stop), self.hw_shape)
        return np.stack([self.knobs[k][i] for k, i in zip(HW_KNOBS, idx, strict=True)], axis=1)


def prepare(
    model: Model | str,
    workload: Workload,
    *,
    space: str | Space | Mapping[str, Sequence[Any]] | None = "reduced",
    hardware: Hardware | Mapping[str, Any] | None = None,
    family: str | HardwareFamily | None = None,
    efficiency: Efficiency | None = None,
) -> Prepared:
    """Validate inputs and compute the per-layout coefficients (cheap, eager)."""
    from .kernels import inference as k

    model = get_model(model)
    if not isinstance(workload, Workload):
        raise ValueError(f"workload must be a simcore.Workload, got {type(workload).__name__}")
    fam = get_family(family)
    if hardware is None:
        hardware = fam.hardware
    knobs = hardware_grid(hardware)
    sp = get_space(space, workload.mode)
    eff = efficiency or Efficiency()
    layouts = layout_table(sp)
    coeffs = build_coeffs(layouts, model, workload, fam.topology)
    return Prepared(model, workload, sp, fam.topology, eff, fam.name, knobs, layouts, coeffs,
                    k.pack_efficiency(eff, train=workload.mode == "train"))


def build_coeffs(layouts: np.ndarray, model: Model, workload: Workload,
                 topology: Topology) -> np.ndarray:
    """Per-layout coefficient rows from the right kernel (training or inference)."""
    from .kernels import inference as k

    if workload.mode == "train":
        from .kernels import training

        build = training.layout_coeffs
    else:
        build = k.layout_coeffs
    return build(np.ascontiguousarray(layouts, dtype=np.int64), k.pack_model(model),
                 k.pack_workload(workload), k.pack_topology(topology))


@dataclass(frozen=True)
class _CoeffRecipe:
    """What a dask block needs to rebuild the coefficients: a compact layout table and
    the specs (~0.5 MB for the full space instead of the 8 MB coefficient table, so task
    graphs stay small whatever the space)."""

    layouts: np.ndarray
    model: Model
    workload: Workload
    topology: Topology

    def coeffs(self) -> np.ndarray:
        return build_coeffs(self.layouts, self.model, self.workload, self.topology)


def _grid_block(coeffs: np.ndarray | _CoeffRecipe, eff: np.ndarray,
                layout_shape: tuple[int, ...], *knob_blocks: np.ndarray) -> tuple[np.ndarray, ...]:
    from .kernels import inference as k

    if isinstance(coeffs, _CoeffRecipe):
        coeffs = coeffs.coeffs()
    arrs = np.broadcast_arrays(*knob_blocks)
    shape = arrs[0].shape
    hw = np.stack([np.ascontiguousarray(a).ravel() for a in arrs], axis=1).astype(np.float64)
    outs = k.evaluate_grid(coeffs, hw, eff)
    return tuple(o.reshape(shape + layout_shape) for o in outs)


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
        is in memory, unless it would exceed :data:`AUTO_CHUNK_POINTS` joint points:
        then it is chunked automatically (about :data:`CHUNK_POINTS` per chunk).

    Returns
    -------
    xarray.Dataset
        Dims: the six knobs then the nine layout dims. Variables ``latency_ns``,
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
    from .kernels import inference as k

    p = prepare(model, workload, space=space, hardware=hardware, family=family,
                efficiency=efficiency)
    layout_shape = p.space.shape
    knob_das = [xr.DataArray(p.knobs[n], dims=[n], coords={n: p.knobs[n]}) for n in HW_KNOBS]
    dask_mode: Literal["forbidden", "parallelized"] = "forbidden"
    if chunks is None and p.n_hw * p.space.size > AUTO_CHUNK_POINTS:
        chunks = auto_chunks(p)
    if chunks is not None:
        if isinstance(chunks, int):
            first = next((n for n in HW_KNOBS if len(p.knobs[n]) > 1), HW_KNOBS[0])
            chunks = {first: chunks}
        unknown = set(chunks) - set(HW_KNOBS)
        if unknown:
            raise ValueError(
                f"chunks may only split hardware knobs {list(HW_KNOBS)}, got {sorted(unknown)}"
            )
        knob_das = [da.chunk({n: chunks.get(n, -1)})
                    for n, da in zip(HW_KNOBS, knob_das, strict=True)]
        dask_mode = "parallelized"
    outs = _apply(p, knob_das, dask_mode)
    ds = xr.Dataset(dict(zip(k.OUTPUTS, outs, strict=True)))
    lay = {
        "mem_bytes": p.coeffs[:, k.C_MEM].reshape(layout_shape),
        **{n: p.coeffs[:, c].reshape(layout_shape) for n, c in k.MEM_PARTS.items()},
        "valid": (p.coeffs[:, k.C_VALID] == 1.0).reshape(layout_shape),
        "n_devices": p.coeffs[:, k.C_NDEV].astype(np.int64).reshape(layout_shape),
    }
    for name, arr in lay.items():
        ds[name] = (PARALLEL_DIMS, arr)
    for name in ("mem_bytes", *k.MEM_PARTS):
        ds[name] = ds[name].where(ds.valid)
    ds = ds.assign_coords(p.layout_coords()).assign_coords(p.hw_coords())
    for name in map(str, ds.variables):
        if name in UNITS:
            ds[name].attrs["units"] = UNITS[name]
        if name in _DESCRIPTIONS:
            ds[name].attrs["description"] = _DESCRIPTIONS[name]
    ds.attrs.update(p.attrs())
    return ds


#: Above this many (hardware × layout) points ``evaluate`` returns a dask-chunked result.
AUTO_CHUNK_POINTS = 20_000_000
#: Target joint points per automatic chunk.
CHUNK_POINTS = 4_000_000


def auto_chunks(p: Prepared) -> dict[str, int]:
    """Chunk sizes along the hardware knobs giving about :data:`CHUNK_POINTS` per chunk."""
    per = p.space.size * p.n_hw
    out: dict[str, int] = {}
    for k in HW_KNOBS:
        n = len(p.knobs[k])
        per //= n
        if per * n <= CHUNK_POINTS:
            out[k] = max(1, CHUNK_POINTS // max(1, per))
            break
        out[k] = 1
    return out


def _apply(p: Prepared, knob_das: list[xr.DataArray],
           dask_mode: Literal["forbidden", "parallelized"]) -> tuple[xr.DataArray, ...]:
    from functools import partial

    from .kernels import inference as k

    n_out = len(k.OUTPUTS)
    layout_shape = p.space.shape
    source: np.ndarray | _CoeffRecipe = p.coeffs
    if dask_mode == "parallelized":
        small = np.int16 if int(p.layouts.max(initial=0)) < 2**15 else np.int64
        source = _CoeffRecipe(p.layouts.astype(small), p.model, p.workload, p.topology)
    func = partial(_grid_block, source, p.eff, layout_shape)
    return xr.apply_ufunc(
        func,
        *knob_das,
        output_core_dims=[list(PARALLEL_DIMS)] * n_out,
        dask=dask_mode,
        output_dtypes=[np.float64] * (n_out - 1) + [np.bool_],
        dask_gufunc_kwargs={"output_sizes": dict(zip(PARALLEL_DIMS, layout_shape, strict=True))},
    )


# --- fused path -------------------------------------------------------------------------

def fused_metric(metric: str | Metric) -> tuple[Metric, int]:
    """Metric → (Metric, code understood by the fused kernel)."""
    from .kernels import inference as k

    m = get_metric(metric)
    if m.key not in k.FUSED_METRICS:
        raise ValueError(
            f"the fused path reduces by {sorted(k.FUSED_METRICS)} "
            f"(metrics latency, throughput, FLOPS_per_gpu); got {m.name!r}"
        )
    return m, k.FUSED_METRICS[m.key]


def hw_chunks(n_hw: int, chunk_size: int) -> Iterator[tuple[int, int]]:
    for start in range(0, n_hw, chunk_size):
        yield start, min(n_hw, start + chunk_size)


def fused_chunk(p: Prepared, start: int, stop: int, code: int, sign: int
                ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Run the fused kernel over hardware rows ``start:stop``."""
    from .kernels import inference as k

    return k.fused_best(p.coeffs, p.hw_rows(start, stop), p.eff, code, float(sign))


def assemble_best(p: Prepared, m: Metric, best_idx: np.ndarray, vals: np.ndarray,
                  n_fit: np.ndarray) -> xr.Dataset:
    """Per-hardware winners (flat arrays over the C-order hw grid) → labelled Dataset."""
    from .kernels import inference as k

    shape = p.hw_shape
    dims = list(HW_KNOBS)
    ok = best_idx >= 0
    safe = np.where(ok, best_idx, 0)
    data: dict[str, Any] = {}
    for q, name in enumerate(k.OUTPUTS[:-1]):
        data[name] = (dims, vals[:, q].reshape(shape))
    for name, c in {"mem_bytes": k.C_MEM, **k.MEM_PARTS}.items():
        data[name] = (dims, np.where(ok, p.coeffs[safe, c], np.nan).reshape(shape))
    data["n_devices"] = (dims, np.where(ok, p.coeffs[safe, k.C_NDEV], np.nan).reshape(shape))
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
        if name in UNITS:
            ds[name].attrs["units"] = UNITS[name]
    ds.attrs.update(p.attrs(), best_metric=m.name, best_direction=m.direction,
                    n_layouts=int(p.space.size))
    return ds


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


def default_chunk_size(p: Prepared) -> int:
    """Hardware rows per chunk: ~4M joint evaluations (fine progress, tiny memory)."""
    return max(1, min(p.n_hw, math.ceil(4_000_000 / max(1, p.space.size))))


def best_of_prepared(
    p: Prepared,
    *,
    metric: str | Metric = "latency",
    chunk_size: int | None = None,
    progress: bool = False,
) -> xr.Dataset:
    """The fused reduction over already-prepared inputs (see :func:`evaluate_best`)."""
    from .kernels.inference import N_BEST

    m, code = fused_metric(metric)
    n_hw = p.n_hw
    if chunk_size is None:
        chunk_size = default_chunk_size(p)
    if chunk_size < 1:
        raise ValueError(f"chunk_size must be >= 1 hardware points, got {chunk_size}")
    best_idx = np.empty(n_hw, dtype=np.int64)
    vals = np.empty((n_hw, N_BEST))
    n_fit = np.empty(n_hw, dtype=np.int64)
    chunks = list(hw_chunks(n_hw, chunk_size))
    it: Any = chunks
    if progress:
        from tqdm.auto import tqdm

        it = tqdm(chunks, desc="hardware chunks", unit="chunk", file=sys.stderr)
    for start, stop in it:
        bi, v, nf = fused_chunk(p, start, stop, code, m.sign)
        best_idx[start:stop], vals[start:stop], n_fit[start:stop] = bi, v, nf
    return assemble_best(p, m, best_idx, vals, n_fit)
