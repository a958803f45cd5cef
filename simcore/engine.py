"""The engine: the one door into the numba kernels.

No module outside ``simcore/kernels/`` but this one imports the kernels. It validates
the specs, builds the per-layout coefficient table once (:func:`prepare` →
:class:`Prepared`) and offers labelled operations on it:

* :meth:`Prepared.combine` — every output over hardware rows × layouts (full tensor);
* :meth:`Prepared.best` — the metric-best fitting layout per hardware row (fused);
* :meth:`Prepared.doubling` — the metric at one hardware point and with each knob doubled;
* :meth:`Prepared.column` — a per-layout coefficient by name (``"mem_bytes"``, ...).

The kernel interface itself (coefficients, parameter bundles, outputs with units) is
declared in ``simcore/kernels/schema.py``; its names are re-exported here.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from .kernels import schema
from .metrics import Metric, get_metric
from .presets import get_family, get_model
from .space import CHOICES, Space, get_space, hardware_grid, layout_table
from .specs import HW_KNOBS, Efficiency, Hardware, HardwareFamily, Model, Topology, Workload

__all__ = [
    "LAYOUT_OUTPUTS", "MEM_PARTS", "N_BEST", "OUTPUT_NAMES", "CoeffRecipe", "Prepared",
    "build_coeffs", "combine", "field_attrs", "point_one", "fused_metric", "grid_block", "pack_efficiency",
    "pareto_mask", "prepare",
]

#: Names of the per-point outputs, in kernel order (``fits`` last).
OUTPUT_NAMES: tuple[str, ...] = tuple(f.name for f in schema.OUTPUTS)
#: Numeric outputs the fused reduction returns per winner (all but ``fits``).
N_BEST: int = schema.N_BEST
#: Per-layout outputs (coefficient columns) and the memory parts among them.
LAYOUT_OUTPUTS: tuple[str, ...] = schema.LAYOUT_OUTPUTS
MEM_PARTS: tuple[str, ...] = schema.MEM_PARTS
field_attrs = schema.field_attrs
pack_efficiency = schema.pack_efficiency


def kernels_cached() -> bool:
    """Whether numba's on-disk cache holds compiled kernels for this install (if not, the
    first kernel call compiles them: seconds to tens of seconds)."""
    import os

    from .kernels import _numba

    if not _numba.CACHE:
        return False
    folder = os.path.join(os.path.dirname(_numba.__file__), "__pycache__")
    try:
        names = os.listdir(os.environ.get("NUMBA_CACHE_DIR") or folder)
    except OSError:
        return False
    return any(n.startswith("inference.") and n.endswith(".nbi") for n in names)


def _kernels(train: bool) -> Any:
    if train:
        from .kernels import training

        return training
    from .kernels import inference

    return inference


def build_coeffs(layouts: np.ndarray, model: Model, workload: Workload,
                 topology: Topology) -> np.ndarray:
    """Per-layout coefficient table (structured, ``schema.COEF_DTYPE``)."""
    k = _kernels(workload.mode == "train")
    return k.layout_coeffs(np.ascontiguousarray(layouts, dtype=np.int64),
                           schema.pack_model(model), schema.pack_workload(workload),
                           schema.pack_topology(topology))


class _threads:
    """Run a kernel call single-threaded when it is small (the ``serial_below_points``
    option) or has one hardware row (the kernels parallelise over hardware rows)."""

    def __init__(self, n_hw: int, n_layouts: int) -> None:
        from .options import OPTIONS

        self.serial = n_hw <= 1 or n_hw * n_layouts < OPTIONS["serial_below_points"]
        self.before = 0

    def __enter__(self) -> None:
        if self.serial:
            import numba

            self.before = numba.get_num_threads()
            numba.set_num_threads(1)

    def __exit__(self, *exc: object) -> None:
        if self.serial:
            import numba

            numba.set_num_threads(self.before)


def combine(coeffs: np.ndarray, hw: np.ndarray, eff: schema.EfficiencyParams
            ) -> dict[str, np.ndarray]:
    """Every output over ``hw`` rows (n, 6) × coefficient rows: name → (n_hw, n_layout)."""
    from .kernels import inference

    hw = np.ascontiguousarray(hw, dtype=np.float64)
    with _threads(hw.shape[0], len(coeffs)):
        outs = inference.evaluate_grid(coeffs, hw, eff)
    return dict(zip(OUTPUT_NAMES, outs, strict=True))


def point_one(coeffs: np.ndarray, hw_row: np.ndarray, eff: schema.EfficiencyParams
              ) -> tuple[Any, ...]:
    """Every output of one coefficient record (``coeffs[0]``) on one hardware row, serially."""
    from .kernels import inference

    return inference.point_one(coeffs, hw_row, eff)


def fused_metric(metric: str | Metric) -> tuple[Metric, int]:
    """Metric → (Metric, code understood by the fused kernel)."""
    m = get_metric(metric)
    if m.key not in schema.FUSED_METRICS:
        raise ValueError(
            f"the fused path reduces by {sorted(schema.FUSED_METRICS)} "
            f"(metrics latency, throughput, FLOPS_per_gpu); got {m.name!r}"
        )
    return m, schema.FUSED_METRICS[m.key]


def pareto_mask(points: np.ndarray) -> np.ndarray:
    """Non-dominated rows of an (n, k) array, every column minimised."""
    from .kernels.pareto import pareto_mask as _mask

    return _mask(points)


@dataclass(frozen=True)
class Prepared:
    """Validated specs and the per-layout coefficients, built once."""

    model: Model
    workload: Workload
    space: Space
    topology: Topology
    efficiency: Efficiency
    family: str
    knobs: dict[str, np.ndarray]
    layouts: np.ndarray
    coeffs: np.ndarray
    eff: schema.EfficiencyParams

    # -- shapes and coordinates -----------------------------------------------------------
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
            **{f"efficiency_{k}": v for k, v in vars(self.efficiency).items() if v is not None},
        }

    def hw_rows(self, start: int, stop: int) -> np.ndarray:
        """Rows ``start:stop`` of the flattened (C-order) hardware grid, shape (n, 6)."""
        idx = np.unravel_index(np.arange(start, stop), self.hw_shape)
        return np.stack([self.knobs[k][i] for k, i in zip(HW_KNOBS, idx, strict=True)], axis=1)

    # -- labelled operations --------------------------------------------------------------
    def column(self, name: str) -> np.ndarray:
        """A per-layout coefficient (``"mem_bytes"``, ``"valid"``, ...) as a flat array."""
        names = schema.COEF_DTYPE.names or ()
        if name not in names:
            raise KeyError(f"no coefficient {name!r}; known: {', '.join(names)}")
        return self.coeffs[name]

    @property
    def valid(self) -> np.ndarray:
        """Per layout: a legal combination for this model and system."""
        return self.coeffs["valid"] == 1.0

    def combine(self, hw: np.ndarray) -> dict[str, np.ndarray]:
        """Every output over hardware rows ``hw`` (n, 6) × all layouts."""
        return combine(self.coeffs, hw, self.eff)

    def best(self, hw: np.ndarray, metric: str | Metric = "latency"
             ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Per hardware row: (index of the metric-best fitting layout or -1, its
        :data:`N_BEST` outputs (NaN where nothing fits), the number of fitting layouts)."""
        from .kernels import inference

        m, code = fused_metric(metric)
        hw = np.ascontiguousarray(hw, dtype=np.float64)
        with _threads(hw.shape[0], len(self.coeffs)):
            return inference.fused_best(self.coeffs, hw, self.eff, code, float(m.sign))

    def best_chunk(self, start: int, stop: int, metric: str | Metric = "latency"
                   ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """:meth:`best` over rows ``start:stop`` of the hardware grid."""
        return self.best(self.hw_rows(start, stop), metric)

    def doubling(self, hardware: Hardware, metric: str | Metric = "latency"
                 ) -> tuple[np.ndarray, np.ndarray] | None:
        """The chosen metric of the best layout at ``hardware`` and with each knob doubled.

        Returns ``(values, latency_ns)``, each of length 7 (baseline, then one per knob in
        :data:`~simcore.specs.HW_KNOBS` order), or ``None`` if nothing fits at ``hardware``.
        """
        m, _ = fused_metric(metric)
        base = np.array([hardware.as_dict()[kn] for kn in HW_KNOBS])
        rows = np.tile(base, (len(HW_KNOBS) + 1, 1))
        for j in range(len(HW_KNOBS)):
            rows[j + 1, j] *= 2.0
        idx, vals, _ = self.best(rows, m)
        if idx[0] < 0:
            return None
        return vals[:, OUTPUT_NAMES.index(m.key)], vals[:, 0]


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
                    schema.pack_efficiency(eff, train=workload.mode == "train"))


@dataclass(frozen=True)
class CoeffRecipe:
    """What a dask block needs to rebuild the coefficients: a compact layout table and
    the specs (~0.5 MB for the full space instead of the 8 MB coefficient table, so task
    graphs stay small whatever the space)."""

    layouts: np.ndarray
    model: Model
    workload: Workload
    topology: Topology

    @classmethod
    def of(cls, p: Prepared) -> CoeffRecipe:
        small = np.int16 if int(p.layouts.max(initial=0)) < 2**15 else np.int64
        return cls(p.layouts.astype(small), p.model, p.workload, p.topology)

    def coeffs(self) -> np.ndarray:
        return build_coeffs(self.layouts, self.model, self.workload, self.topology)


def grid_block(coeffs: np.ndarray | CoeffRecipe, eff: schema.EfficiencyParams,
               layout_shape: tuple[int, ...], *knob_blocks: np.ndarray) -> tuple[np.ndarray, ...]:
    """One block of the full tensor: broadcast knob blocks → every output, shaped
    (knob block shape) + ``layout_shape`` (the ``xr.apply_ufunc`` callback)."""
    if isinstance(coeffs, CoeffRecipe):
        coeffs = coeffs.coeffs()
    arrs = np.broadcast_arrays(*knob_blocks)
    shape = arrs[0].shape
    hw = np.stack([np.ascontiguousarray(a).ravel() for a in arrs], axis=1).astype(np.float64)
    outs = combine(coeffs, hw, eff)
    return tuple(outs[n].reshape(shape + layout_shape) for n in OUTPUT_NAMES)
