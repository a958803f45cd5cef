"""One configuration in microseconds: :func:`predict`.

For notebooks, the autotuner and any loop over a handful of configurations, building an
``xr.Dataset`` per call costs far more than the physics. :func:`predict` evaluates one
(model, workload, layout, hardware) point with the same kernels as
:func:`simcore.evaluate` — identical numbers — and returns a small frozen
:class:`Prediction`. The per-layout coefficient record is cached per (model, workload,
layout, topology), and what a call's arguments resolve to (the record, the hardware row,
the packed efficiency, the compiled kernel for their types) per the arguments as passed,
so a warm call is a dictionary lookup, one serial kernel call without numba's type
dispatch and the :class:`Prediction`: ~5 µs.

Examples
--------
>>> import simcore
>>> r = simcore.predict("Llama 3.1 8B", simcore.Workload("decode", s_kv=8192), {"tp": 2},
...                     family="H100-SXM")
>>> r.valid and r.fits and r.latency_ns > 0
True
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, NamedTuple

import numpy as np

from ..errors import SimcoreInputError
from ..model.presets import get_family, get_model
from ..model.specs import HW_KNOBS, Efficiency, Hardware, HardwareFamily, Model, Topology, Workload
from .core import _api_compile_notice, build_coeffs, pack_efficiency, point_one_call
from .space import CHOICES, PARALLEL_DIMS

__all__ = ["Prediction", "predict"]


@dataclass(frozen=True)
class Prediction:
    """One configuration's latency, fit and breakdown (the outputs of ``evaluate``).

    NaN outputs (memory included) and ``valid=False`` for a layout that is not a legal
    combination.
    """

    latency_ns: float
    throughput_tok_s: float
    flops_per_device: float
    compute_ns: float
    memory_ns: float
    comm_ns: float
    overhead_ns: float
    compute_alone_ns: float
    memory_alone_ns: float
    fits: bool
    valid: bool
    mem_bytes: float
    mem_weights_bytes: float
    mem_kv_bytes: float
    mem_act_bytes: float
    n_devices: int


def _layout_row(layout: Mapping[str, Any], mode: str) -> tuple[int, ...]:
    key = (mode, tuple(sorted(_items(layout))))
    try:
        return _ROWS[key]
    except (KeyError, TypeError):
        pass
    row = _encode(layout, mode)
    try:
        _ROWS[key] = row
    except TypeError:  # unhashable values: no cache
        pass
    return row


_ROWS: dict[Any, tuple[int, ...]] = {}


def _encode(layout: Mapping[str, Any], mode: str) -> tuple[int, ...]:
    unknown = sorted(set(layout) - set(PARALLEL_DIMS))
    if unknown:
        raise SimcoreInputError(f"unknown layout dims {unknown}; pass some of {list(PARALLEL_DIMS)}")
    defaults: dict[str, Any] = {"cp": 1, "tp": 1, "pp": 1, "dp": 1, "kv_shard_mode": "head",
                                "ffn_shard_scope": "TP", "tp_placement": "inner",
                                "cp_placement": "inner",
                                "cp_ring_variant": "qoml" if mode == "decode" else "kv", "ep": 1}
    row = []
    for dim in PARALLEL_DIMS:
        v = layout.get(dim, defaults[dim])
        if dim in CHOICES:
            if v not in CHOICES[dim]:
                raise SimcoreInputError(f"layout {dim}={v!r} is unknown; pass one of {list(CHOICES[dim])}")
            row.append(CHOICES[dim].index(v))
        else:
            if isinstance(v, bool) or not isinstance(v, int | np.integer) or int(v) < 1:
                raise SimcoreInputError(f"layout {dim}={v!r} must be a positive integer")
            row.append(int(v))
    return tuple(row)


@functools.lru_cache(maxsize=8192)
def _record(model: Model, workload: Workload, row: tuple[int, ...], topology: Topology
            ) -> np.ndarray:
    _api_compile_notice(workload.mode)  # once per process: says so if kernels must compile
    return build_coeffs(np.array([row], dtype=np.int64), model, workload, topology)


@functools.lru_cache(maxsize=256)
def _eff(eff: Efficiency | None, train: bool, hbm_ratio: float = 1.0) -> Any:
    return pack_efficiency(Efficiency() if eff is None else eff, train=train,
                           hbm_ratio=hbm_ratio)


@functools.lru_cache(maxsize=1024)
def _hw_row(hw: Hardware) -> np.ndarray:
    row = np.array([getattr(hw, k) for k in HW_KNOBS], dtype=np.float64)
    row.flags.writeable = False
    return row


def predict(
    model: Model | str,
    workload: Workload,
    layout: Mapping[str, Any] | None = None,
    hardware: Hardware | Mapping[str, float] | None = None,
    *,
    family: str | HardwareFamily | None = None,
    efficiency: Efficiency | None = None,
) -> Prediction:
    """Evaluate one configuration (same numbers as :func:`simcore.evaluate`).

    Parameters
    ----------
    model : Model or str
        A :class:`~simcore.model.specs.Model`, preset name or catalogue id.
    workload : Workload
    layout : mapping, optional
        Sizes of ``cp``, ``tp``, ``pp``, ``dp`` and the categorical dims; unset dims are
        1 / the first choice (``cp_ring_variant``: ``qoml`` for decode, ``kv`` otherwise).
    hardware : Hardware or mapping knob → value, optional
        Default: the family's hardware (a mapping overrides some of its knobs).
    family : str or HardwareFamily, optional
        Topology and default hardware; default ``"SiP"``.
    efficiency : Efficiency, optional

    Returns
    -------
    Prediction
    """
    try:
        key: Any = _call_key(model, workload, layout, hardware, family, efficiency)
        call = _CALLS.get(key)
    except TypeError:  # unhashable arguments: resolved on every call
        key = call = None
    if call is None:
        call = _resolve(model, workload, layout, hardware, family, efficiency, key)
    out = call.kernel(call.rec, call.hw_row, call.eff)
    p = _new_prediction(Prediction)
    p.__dict__.update(zip(_FIELDS, out + call.tail, strict=True))  # frozen: no __init__
    return p


class _Call(NamedTuple):
    """What one call's arguments resolve to (:func:`_resolve`)."""

    rec: np.ndarray  #: the layout's coefficient record (one-row table)
    hw_row: np.ndarray  #: the hardware row, read-only
    eff: Any  #: the packed efficiency
    kernel: Any  #: ``point_one`` compiled for the types of these three
    #: the Prediction's fields after the kernel's outputs: valid, memory parts, devices
    tail: tuple[Any, ...]


#: Prediction's fields in order; the kernel's outputs come first
_FIELDS: tuple[str, ...] = tuple(Prediction.__dataclass_fields__)
_new_prediction = object.__new__
#: resolved calls, keyed by the arguments as passed (:func:`_call_key`)
_CALLS: dict[Any, _Call] = {}
_MAX_CALLS = 16384
#: ``point_one`` entry points per argument type key (:func:`_kernel_for`)
_KERNELS: dict[Any, Any] = {}


def _call_key(model: Any, workload: Any, layout: Any, hardware: Any, family: Any,
              efficiency: Any) -> tuple[Any, ...]:
    """The arguments of :func:`predict` as a dictionary key (``TypeError`` if one of them
    is unhashable). Names resolve to presets and families loaded once per process."""
    return (model, workload, _items(layout) if layout else None,
            hardware if hardware is None or isinstance(hardware, Hardware)
            else (dict, _items(hardware)), family, efficiency)


def _items(mapping: Mapping[str, Any]) -> tuple[Any, ...]:
    """A mapping's items with each value's type (``2``, ``2.0`` and ``True`` stay apart:
    only the first is a layout size)."""
    return tuple((k, type(v), v) for k, v in mapping.items())


def _resolve(model: Any, workload: Any, layout: Any, hardware: Any, family: Any,
             efficiency: Any, key: Any) -> _Call:
    """Check the arguments (errors say what to pass), resolve them and remember the result
    under ``key`` (:func:`_call_key`; None: not remembered) for the next call."""
    m = get_model(model)
    if not isinstance(workload, Workload):
        raise SimcoreInputError(f"workload must be a simcore.Workload, got {type(workload).__name__}")
    fam = get_family(family)
    if hardware is None:
        hw = fam.hardware
    elif isinstance(hardware, Hardware):
        hw = hardware
    else:
        hw = Hardware(**{**fam.hardware.as_dict(), **dict(hardware)})
    rec = _record(m, workload, _layout_row(layout or {}, workload.mode), fam.topology)
    hw_row = _hw_row(hw)
    eff = _eff(efficiency, workload.mode == "train", fam.topology.hbm_ratio)
    c = rec[0]
    valid = bool(c["valid"] == 1.0)
    nan = float("nan")  # memory of an illegal layout is masked, as evaluate does
    tail = (valid, *(float(c[k]) if valid else nan
                     for k in ("mem_bytes", "mem_weights_bytes", "mem_kv_bytes", "mem_act_bytes")),
            int(c["n_devices"]))
    call = _Call(rec, hw_row, eff, _kernel_for(rec, hw_row, eff), tail)
    if key is not None:
        if len(_CALLS) >= _MAX_CALLS:
            _CALLS.clear()
        _CALLS[key] = call
    return call


def _kernel_for(rec: np.ndarray, hw_row: np.ndarray, eff: Any) -> Any:
    """``point_one`` compiled for these arguments' types (:func:`~.core.point_one_call`),
    one per type key."""
    key = tuple((a.dtype, a.ndim, a.flags.c_contiguous, a.flags.aligned, a.flags.writeable)
                for a in (rec, hw_row)) + (type(eff), tuple(map(type, eff)))
    kernel = _KERNELS.get(key)
    if kernel is None:
        kernel = _KERNELS[key] = point_one_call(rec, hw_row, eff)
    return kernel
