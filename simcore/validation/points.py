"""One measurement, and simcore's prediction of it.

A :class:`Measurement` is a declarative, validated value object: what ran (model, hardware
family, parallel layout, workload), what was measured (metric, value, unit) and where it
was published (source). :func:`predict` runs :func:`simcore.evaluate` on exactly that
layout and converts the result to the measurement's unit.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ..model.specs import Efficiency, HardwareFamily, Model, Workload

__all__ = [
    "KINDS",
    "LAYOUT_DIMS",
    "METRICS",
    "Measurement",
    "SignedError",
    "error_stats",
    "megatron_flops_per_step",
    "palm_flops_per_step",
    "predict",
    "run_steps",
]

#: Kinds of measurement; each is also the :class:`~simcore.model.specs.Workload` mode it runs.
KINDS: tuple[str, ...] = ("train", "prefill", "decode")

#: Parallel dims a measurement's layout may set (the rest of the layout is fixed, see
#: :meth:`Measurement.space`).
LAYOUT_DIMS: tuple[str, ...] = ("cp", "tp", "pp", "dp", "ep")

#: Metric name → units it may be reported in (value of one unit in the engine's base unit:
#: nanoseconds for ``latency``, FLOP/s for ``megatron_tflops_per_gpu``).
METRICS: dict[str, dict[str, float]] = {
    # TTFT (prefill), time per output token (decode) or time per iteration (train)
    "latency": {"ns": 1.0, "us": 1e3, "ms": 1e6, "s": 1e9},
    # achieved TFLOP/s per GPU, FLOPs counted with Narayanan et al. 2021, Eq. 3
    "megatron_tflops_per_gpu": {"TFLOP/s": 1e12},
    # decode only: output tokens per second of the whole system (batch / time per token)
    "output_tokens_per_s": {"tok/s": 1.0},
    # training tokens per second per GPU (global batch x sequence / step time / GPUs)
    "tokens_per_s_per_gpu": {"tokens/s/GPU": 1.0},
    # model TFLOP/s per GPU, PaLM's MFU convention (Chowdhery et al. 2022, App. B):
    # 6 N_matmul + 12 L s d per token (non-causal attention, no recompute)
    "model_tflops_per_gpu": {"TFLOP/s": 1e12},
    # model FLOPs utilisation: model_tflops_per_gpu over the 16-bit dense peak (PaLM)
    "mfu": {"fraction": 1.0, "%": 0.01},
    # hardware FLOPs utilisation: also counts the recomputed forward (full
    # recomputation: 8 instead of 6 N per token, as llm-foundry and Megatron report it)
    "hfu": {"fraction": 1.0, "%": 0.01},
}


def palm_flops_per_step(model: Model, workload: Workload) -> float:
    """Training FLOPs per step as PaLM's MFU counts them: ``(6 N + 12 L s d) · tokens``
    with N the matmul parameters (the embedding gather excluded; a tied embedding
    counted once, as the LM head).

    Examples
    --------
    >>> from simcore.model.presets import PRESETS
    >>> m = PRESETS["Llama 2 7B"].model
    >>> round(palm_flops_per_step(m, Workload("train", batch=1, s_kv=4096)) / 1e12, 1)
    188.8
    """
    n = model.n_params - model.embedding_params + model.vocab_size * model.d_model
    s = float(workload.s_kv)
    tokens = float(workload.batch) * s
    return (6.0 * n + 12.0 * model.n_layers * s * model.n_heads * model.head_dim) * tokens


def megatron_flops_per_step(model: Model, workload: Workload) -> float:
    """FLOPs of one training iteration as Megatron-LM reports them (full recomputation).

    Narayanan et al. 2021, Eq. 3: ``96·B·s·l·h²·(1 + s/(6h) + V/(16·l·h))`` — forward,
    backward and the recomputed forward of every GEMM, attention included, plus the
    logit layer.

    Examples
    --------
    >>> from simcore.validation.data import MEGATRON_175B
    >>> w = Workload("train", batch=1536, s_kv=2048, recompute="full")
    >>> round(megatron_flops_per_step(MEGATRON_175B, w) / 1e18, 2)
    4.51
    """
    if workload.mode != "train":
        raise ValueError(
            f"megatron_flops_per_step needs a training workload, got mode={workload.mode!r}; "
            "pass Workload('train', ...)"
        )
    B, s = float(workload.batch), float(workload.s_kv)
    lyr, h, v = float(model.n_layers), float(model.d_model), float(model.vocab_size)
    return 96.0 * B * s * lyr * h * h * (1.0 + s / (6.0 * h) + v / (16.0 * lyr * h))


@dataclass(frozen=True)
class Measurement:
    """A published measurement of an LLM run and how to reproduce it in simcore.

    Parameters
    ----------
    id : str
        Short unique name (``"korthikanti-175b-full"``).
    kind : {"train", "prefill", "decode"}
        What ran; must equal ``workload.mode``.
    model : Model
        The model's shape.
    family : HardwareFamily
        The hardware (data-sheet knobs) and its topology.
    layout : tuple of (dim, size) pairs
        The measured parallel layout over ``cp``, ``tp``, ``pp``, ``dp`` and ``ep`` (unset
        dims are 1; ``ep`` splits the experts over the TP x DP devices, adding none).
    workload : Workload
        Batch, sequence lengths and, for training, micro-batch and recomputation.
    metric : {"latency", "megatron_tflops_per_gpu"}
        What was measured (see :data:`METRICS`).
    measured : float
        The published value, in ``unit``.
    unit : str
        One of ``METRICS[metric]``.
    source : str
        Paper and table/figure, or vendor page, the value comes from.
    ref : str
        Short citation for tables (default: the source up to its first comma).
    notes : str
        Assumptions made where the source left a setting implicit.
    measured_mem_gib : float, optional
        Peak memory per GPU the source reports for the same run (GiB), if any; compared
        with the predicted memory by :func:`simcore.validation.validate_memory`, not fitted.
    steps : tuple of (Workload, weight) pairs, optional
        A measurement of a whole run (prompt processing and every generated token, as a
        benchmark that times one ``generate()`` call reports it): the run's latency is
        ``sum(weight * latency(step))`` over these steps, each an inference workload
        (``"prefill"`` or ``"decode"``) on the same layout, and it fits only if every
        step fits. A weight is how many times the step runs (a quadrature weight may be
        fractional, see :mod:`simcore.validation.data_infer`). Empty (default): the run
        is the single ``workload``, which is then also the step that labels the point.
    generated : int
        With ``steps`` and metric ``"output_tokens_per_s"``: output tokens per sequence
        of the whole run, so the throughput is ``batch * generated / latency``.

    Examples
    --------
    >>> from simcore.validation import MEASUREMENTS
    >>> m = MEASUREMENTS[0]
    >>> m.kind, m.layout_label, m.n_devices
    ('train', 'TP8 PP12 DP4', 384)
    >>> Measurement("x", "decode", m.model, m.family, (("tp", 8),), Workload("decode"),
    ...             "latency", 10.0, "ms", "")
    Traceback (most recent call last):
    ...
    ValueError: Measurement 'x': source is empty; cite the paper and table/figure or the vendor page
    """

    id: str
    kind: str
    model: Model
    family: HardwareFamily
    layout: tuple[tuple[str, int], ...]
    workload: Workload
    metric: str
    measured: float
    unit: str
    source: str
    ref: str = ""
    notes: str = ""
    measured_mem_gib: float | None = None
    steps: tuple[tuple[Workload, float], ...] = ()
    generated: int = 0

    def __post_init__(self) -> None:
        if not isinstance(self.id, str) or not self.id.strip():
            raise ValueError(f"Measurement.id must be a non-empty string, got {self.id!r}")
        where = f"Measurement {self.id!r}"
        if self.kind not in KINDS:
            raise ValueError(f"{where}: kind={self.kind!r} is unknown; pass one of {list(KINDS)}")
        if not isinstance(self.model, Model):
            raise ValueError(f"{where}: model must be a simcore.Model, got "
                             f"{type(self.model).__name__}")
        if not isinstance(self.family, HardwareFamily):
            raise ValueError(f"{where}: family must be a simcore.HardwareFamily (e.g. "
                             f"simcore.HARDWARE_FAMILIES['A100-80G']), got "
                             f"{type(self.family).__name__}")
        if not isinstance(self.workload, Workload):
            raise ValueError(f"{where}: workload must be a simcore.Workload, got "
                             f"{type(self.workload).__name__}")
        if self.workload.mode != self.kind:
            raise ValueError(f"{where}: kind={self.kind!r} but workload.mode="
                             f"{self.workload.mode!r}; pass a Workload({self.kind!r}, ...)")
        self._check_layout(where)
        if self.metric not in METRICS:
            raise ValueError(f"{where}: metric={self.metric!r} is unknown; pass one of "
                             f"{list(METRICS)}")
        if self.metric not in ("latency", "output_tokens_per_s") and self.kind != "train":
            raise ValueError(f"{where}: metric {self.metric!r} is for training "
                             "runs; use metric 'latency' for prefill/decode")
        if self.metric == "output_tokens_per_s" and self.kind != "decode":
            raise ValueError(f"{where}: metric 'output_tokens_per_s' is for decode runs; use "
                             "metric 'latency' for prefill (TTFT)")
        if self.unit not in METRICS[self.metric]:
            raise ValueError(f"{where}: unit={self.unit!r} does not fit metric "
                             f"{self.metric!r}; pass one of {list(METRICS[self.metric])}")
        v = self.measured
        if isinstance(v, bool) or not isinstance(v, int | float) or not math.isfinite(v) or v <= 0:
            raise ValueError(f"{where}: measured must be a number > 0, got {v!r}")
        if not isinstance(self.source, str) or not self.source.strip():
            raise ValueError(f"{where}: source is empty; cite the paper and table/figure or "
                             "the vendor page")
        if not self.ref:
            object.__setattr__(self, "ref", self.source.split(",")[0].strip()[:40])
        self._check_steps(where)
        mem = self.measured_mem_gib
        if mem is not None and (isinstance(mem, bool) or not isinstance(mem, int | float)
                                or not math.isfinite(mem) or mem <= 0):
            raise ValueError(f"{where}: measured_mem_gib must be a number > 0 or None, got "
                             f"{mem!r}")

    def _check_steps(self, where: str) -> None:
        try:
            steps = tuple((w, c) for w, c in self.steps)
        except (TypeError, ValueError):
            raise ValueError(f"{where}: steps must be (Workload, weight) pairs such as "
                             f"((Workload('prefill', s_kv=1024), 1.0),), got {self.steps!r}"
                             ) from None
        if steps and self.kind == "train":
            raise ValueError(f"{where}: steps describe an inference run; a training "
                             "measurement is its single workload")
        for w, c in steps:
            if not isinstance(w, Workload) or w.mode not in ("prefill", "decode"):
                raise ValueError(f"{where}: each step must be a prefill or decode "
                                 f"simcore.Workload, got {w!r}")
            if (isinstance(c, bool) or not isinstance(c, numbers.Real)
                    or not math.isfinite(c) or c <= 0):
                raise ValueError(f"{where}: step weight must be a number > 0 (how many times "
                                 f"the step runs), got {c!r}")
            if w.batch != self.workload.batch:
                raise ValueError(f"{where}: a step runs batch {w.batch} but the run's workload "
                                 f"batch {self.workload.batch}; every step of a run carries "
                                 "the same sequences")
        g = self.generated
        if isinstance(g, bool) or not isinstance(g, numbers.Integral) or g < 0:
            raise ValueError(f"{where}: generated must be a whole number >= 0, got {g!r}")
        if g and self.metric != "output_tokens_per_s":
            raise ValueError(f"{where}: generated counts the output tokens of a whole-run "
                             f"throughput; metric {self.metric!r} does not use it, leave it 0")
        if steps and self.metric == "output_tokens_per_s" and g < 1:
            raise ValueError(f"{where}: a whole-run throughput needs generated >= 1 (output "
                             "tokens per sequence of the run)")
        if g and not steps:
            raise ValueError(f"{where}: generated is for whole runs; pass steps too, or "
                             "leave generated at 0 for a per-step throughput")
        object.__setattr__(self, "steps", tuple((w, float(c)) for w, c in steps))
        object.__setattr__(self, "generated", int(g))

    def _check_layout(self, where: str) -> None:
        if isinstance(self.layout, Mapping):
            object.__setattr__(self, "layout", tuple(self.layout.items()))
        try:
            pairs = tuple((str(k), v) for k, v in self.layout)
        except (TypeError, ValueError):
            raise ValueError(f"{where}: layout must be (dim, size) pairs such as "
                             f"(('tp', 8), ('pp', 1)), got {self.layout!r}") from None
        dims = [k for k, _ in pairs]
        bad = sorted(set(dims) - set(LAYOUT_DIMS))
        if bad or len(set(dims)) != len(dims):
            raise ValueError(f"{where}: layout dims {bad or dims} are unknown or repeated; "
                             f"use each of {list(LAYOUT_DIMS)} at most once")
        for k, v in pairs:
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise ValueError(f"{where}: layout {k}={v!r} must be a positive integer")
        object.__setattr__(self, "layout", pairs)

    # -- derived ------------------------------------------------------------------------
    @property
    def layout_dict(self) -> dict[str, int]:
        """Sizes of ``cp``, ``tp``, ``pp``, ``dp``, ``ep`` (1 where the layout leaves a dim
        unset)."""
        d = dict.fromkeys(LAYOUT_DIMS, 1)
        d.update(dict(self.layout))
        return d

    @property
    def n_devices(self) -> int:
        d = self.layout_dict
        return d["cp"] * d["tp"] * d["pp"] * d["dp"]

    @property
    def layout_label(self) -> str:
        """``"TP8 PP12 DP4"`` (CP shown only when > 1)."""
        d = self.layout_dict
        parts = [f"TP{d['tp']}", f"PP{d['pp']}", f"DP{d['dp']}"]
        if d["cp"] > 1:
            parts.insert(0, f"CP{d['cp']}")
        if d["ep"] > 1:
            parts.append(f"EP{d['ep']}")
        return " ".join(parts)

    @property
    def space(self) -> dict[str, tuple[Any, ...]]:
        """The one-layout space mapping passed to :func:`simcore.evaluate`."""
        return self.space_for(self.kind)

    def space_for(self, mode: str) -> dict[str, tuple[Any, ...]]:
        """The one-layout space for a step of ``mode`` (the ring variant follows it)."""
        d = self.layout_dict
        return {
            "cp": (d["cp"],), "tp": (d["tp"],), "pp": (d["pp"],), "dp": (d["dp"],),
            "kv_shard_mode": ("head",), "ffn_shard_scope": ("TP",),
            "tp_placement": ("inner",), "cp_placement": ("inner",),
            "cp_ring_variant": ("qoml",) if mode == "decode" else ("kv",),
            "ep": (d["ep"],),
        }

    def from_latency_ns(self, latency_ns: float) -> float:
        """Convert a predicted latency (ns) into this measurement's metric and unit."""
        if self.metric == "latency":
            return latency_ns / METRICS["latency"][self.unit]
        if self.metric == "output_tokens_per_s":
            tokens = self.workload.batch * (self.generated if self.steps else 1)
            return tokens / (latency_ns * 1e-9) / METRICS[self.metric][self.unit]
        if self.metric == "tokens_per_s_per_gpu":
            tokens = self.workload.batch * self.workload.s_kv
            return tokens / (latency_ns * 1e-9) / self.n_devices
        if self.metric in ("model_tflops_per_gpu", "mfu", "hfu"):
            flops = palm_flops_per_step(self.model, self.workload)
            if self.metric == "hfu" and self.workload.recompute == "full":
                flops *= 4.0 / 3.0
            per_gpu = flops / (latency_ns * 1e-9) / self.n_devices
            if self.metric == "model_tflops_per_gpu":
                return per_gpu / METRICS[self.metric][self.unit]
            peak = self.family.hardware.peak_tflops_f16 * 1e12
            return per_gpu / peak / METRICS[self.metric][self.unit]
        flops = megatron_flops_per_step(self.model, self.workload)
        return flops / (latency_ns * 1e-9) / self.n_devices / METRICS[self.metric][self.unit]


class SignedError:
    """A held-out row's signed relative error, ``predicted / measured - 1`` (mixed into the
    row dataclasses of :mod:`.blackwell` and :mod:`.weight_only`)."""

    measured: float
    predicted: float

    @property
    def error(self) -> float:
        return self.predicted / self.measured - 1.0


def error_stats(errors: list[float]) -> tuple[float, float, int]:
    """(mean |error|, mean signed error, count) of a held-out group's relative errors."""
    return (sum(abs(e) for e in errors) / len(errors), sum(errors) / len(errors),
            len(errors))


def run_steps(point: Measurement) -> tuple[tuple[Workload, float], ...]:
    """The (workload, weight) steps whose weighted latencies sum to the point's run: its
    ``steps``, or its single ``workload`` once."""
    return point.steps or ((point.workload, 1.0),)


def evaluate_point(point: Measurement, efficiency: Efficiency) -> tuple[float, bool]:
    """(latency_ns, fits) of the point's run on its single layout (summed over its
    :func:`run_steps`); raises if the layout is invalid.

    Each step is one configuration, so it goes through :func:`simcore.predict` (the same
    numbers as :func:`simcore.evaluate` over the one-layout space, without building a
    Dataset or loading xarray)."""
    from ..engine.single import predict

    total, fits = 0.0, True
    for wl, weight in run_steps(point):
        layout = {dim: sizes[0] for dim, sizes in point.space_for(wl.mode).items()}
        r = predict(point.model, wl, layout, family=point.family, efficiency=efficiency)
        if not r.valid:
            raise ValueError(
                f"measurement {point.id!r}: simcore marks layout {point.layout_label} invalid "
                f"for {point.model.name} on {point.family.name}; check that TP divides the "
                "heads, the device count fits the family and the batch splits over DP and "
                "micro-batches"
            )
        total += weight * r.latency_ns
        fits = fits and r.fits
    return total, fits


def predict(point: Measurement, *, efficiency: Efficiency | None = None) -> float:
    """simcore's prediction of a measurement, in the measurement's metric and unit.

    Parameters
    ----------
    point : Measurement
        One of :data:`simcore.validation.MEASUREMENTS` (or your own).
    efficiency : Efficiency, optional
        Achievable fractions of peak; default the fitted
        :data:`simcore.validation.FITTED_EFFICIENCY`.

    Examples
    --------
    >>> from simcore.validation import MEASUREMENTS, get_measurement
    >>> p = get_measurement("korthikanti-175b-full")
    >>> 10 < predict(p) < 30   # seconds per iteration; measured 18.13
    True
    """
    from .fitted import FITTED_EFFICIENCY

    if not isinstance(point, Measurement):
        raise ValueError(f"predict takes a simcore.validation.Measurement, got "
                         f"{type(point).__name__}; pick one from MEASUREMENTS")
    eff = FITTED_EFFICIENCY if efficiency is None else efficiency
    if not isinstance(eff, Efficiency):
        raise ValueError(f"efficiency must be a simcore.Efficiency, got {type(eff).__name__}")
    latency_ns, _ = evaluate_point(point, eff)
    return point.from_latency_ns(latency_ns)
