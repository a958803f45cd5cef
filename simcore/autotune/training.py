"""DeepSpeed glue for the simulator runner: experiment → engine training step → metrics.json.

Every formula lives in the engine (:func:`simcore.evaluate` in ``"train"`` mode, kernel
:mod:`simcore.kernels.training`): DeepSpeed's ZeRO model-state formula, Korthikanti
activations, ZeRO-3 per-layer all-gathers, the data-parallel gradient reduction, the
optimizer step and gradient accumulation. This module only maps a DeepSpeed
experiment onto an engine workload and layout, batches the engine calls, and converts
the outputs to the units of DeepSpeed's ``metrics.json``.

Mapping (:class:`TrainingRun`)
------------------------------
* ``mp`` → ``tp`` (innermost, no sequence parallelism), ``n_gpus / mp`` → ``dp``; no
  context or pipeline parallelism.
* ``zero_optimization.stage`` → ``zero_stage``; ``train_micro_batch_size_per_gpu`` →
  ``micro_batch``; the global batch ``micro_batch · grad_accum · dp`` → ``batch``, so
  the engine accumulates ``grad_accum`` micro-batches per step.
* activation checkpointing → ``recompute="full"``, otherwise ``"none"``.
* ``fp16`` / ``bf16`` / fp32 → ``precision``; gradients are reduced in
  ``communication_data_type`` (default: the training precision, 2 bytes; fp32 4 bytes).

Outputs (:class:`TrainingEstimate`)
-----------------------------------
* ``latency`` µs per global step = ``latency_ns / 1e3``; ``throughput`` samples/s =
  global batch / step time; ``FLOPS_per_gpu`` = the engine's ``flops_per_device``.
* The fit check is the engine's ``fits``. Its per-device memory is affine in the
  micro-batch (no pipeline): fixed model states + micro-batch × activations per
  sample. Both are read off the engine's rows at micro-batch 1 and 2, for messages and
  for the tuner's micro-batch bound (:class:`~simcore.autotune.runners.MemoryEstimate`).

The ZeRO knobs the full mode tunes (``overlap_comm``, bucket sizes) do not enter the
engine, so their combinations tie on the simulator.

Examples
--------
>>> est = estimate_training("Llama 2 7B", family="A100-80G", n_gpus=8, stage=0,
...                         micro_batch=1)
>>> est.fits, round(est.model_states_bytes / 1e9, 1)  # ZeRO-0: 20 bytes per parameter
(False, 134.8)
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any, NamedTuple

import numpy as np

from ..model.presets import get_family, get_model
from ..model.specs import Efficiency, Hardware, HardwareFamily, Model, Workload
from .config import precision_of

__all__ = [
    "DEFAULT_PRECISION",
    "PRECISIONS",
    "TUNE_DEFAULTS",
    "TuneDefaults",
    "TrainingEngine",
    "TrainingEstimate",
    "TrainingRun",
    "estimate_training",
    "precision_of",
    "settle_precision",
    "simulate_runs",
    "tune_runtime",
    "tune_runtimes",
    "with_memory",
]

#: Accepted training precisions (fp16 and bf16: DeepSpeed's 16-bit model-state formula).
PRECISIONS: tuple[str, ...] = ("fp16", "bf16", "fp32")

class TuneDefaults(NamedTuple):
    """What a simulated tuning job assumes when not told otherwise."""

    model: str
    family: str
    n_gpus: int
    seq_len: int
    #: the software stack (:data:`simcore.model.runtime.RUNTIMES`): DeepSpeed's own profile
    runtime: str = "deepspeed"


#: The simulated job's defaults, declared once for :class:`~simcore.autotune.SimulatorRunner`,
#: ``simcore tune --model`` and the app's Autotune page (with :data:`DEFAULT_PRECISION`).
TUNE_DEFAULTS = TuneDefaults(model="Llama 2 7B", family="A100-80G", n_gpus=8, seq_len=2048)


def tune_runtimes() -> list[str]:
    """The runtimes a simulated DeepSpeed job can name: the training stacks with
    DeepSpeed's model states, :data:`TUNE_DEFAULTS`'s first.

    Examples
    --------
    >>> tune_runtimes()
    ['deepspeed', 'hf-eager', 'megatron-deepspeed', 'llama3-meta']
    """
    from ..model.runtime import RUNTIMES, runtime_names

    ok = [n for n in runtime_names(mode="train") if RUNTIMES[n].framework == "deepspeed"]
    return sorted(ok, key=lambda n: n != TUNE_DEFAULTS.runtime)


def tune_runtime(name: str, precision: str | None = None) -> str:
    """``name`` checked as the stack of a simulated DeepSpeed job: a known runtime
    (:data:`simcore.model.runtime.RUNTIMES`) that trains with DeepSpeed's model states
    (the ZeRO stages the tuner searches) and, where given, in ``precision``; a
    ``ValueError`` of one line naming the ones that do otherwise.

    Examples
    --------
    >>> tune_runtime("hf-eager")
    'hf-eager'
    >>> tune_runtime("vllm")
    Traceback (most recent call last):
    ...
    ValueError: runtime 'vllm' is vLLM (V1 engine), which runs inference only; the tuner simulates DeepSpeed training: pass one of deepspeed, hf-eager, megatron-deepspeed, llama3-meta
    """
    from ..model.runtime import get_runtime

    rt = get_runtime(name)  # an unknown name: SpecError (a ValueError) naming the known ones
    ok = tune_runtimes()
    if rt.name and rt.name not in ok:
        runs = ("inference only" if not rt.trains else
                f"{rt.framework} model states, not DeepSpeed's ZeRO stages")
        raise ValueError(f"runtime {rt.name!r} is {rt.stack}, which runs {runs}; the tuner "
                         f"simulates DeepSpeed training: pass one of {', '.join(ok)}")
    if precision is not None and rt.name and precision not in rt.precisions:
        raise ValueError(f"runtime {rt.name!r} ({rt.stack}) does not train in {precision}; "
                         f"pass precision {' / '.join(rt.precisions)} or another runtime")
    return rt.name

#: The training precision of a DeepSpeed config that enables neither ``fp16`` nor
#: ``bf16`` (DeepSpeed itself would train it in fp32), for ``simcore tune`` and the app
#: alike: :func:`settle_precision`.
DEFAULT_PRECISION = "fp16"


def settle_precision(ds_config: Mapping[str, Any], precision: str | None = None, *,
                     user_args: Sequence[str] = (), asked_as: str = "asked for"
                     ) -> tuple[dict[str, Any], str]:
    """A copy of ``ds_config`` with its training precision settled, and a note saying
    which precision and why (for the header of ``simcore tune`` and the app's page).

    ``precision`` (``fp16``, ``bf16`` or ``fp32``; ``asked_as`` names where it came from,
    e.g. ``"--precision"``) wins: its section is enabled and the other 16-bit one
    disabled. Otherwise a config that enables ``fp16`` or ``bf16`` (``true``, or
    ``"auto"`` resolved from the script's ``--fp16`` / ``--bf16`` in ``user_args``) keeps
    it, and one that enables neither gets :data:`DEFAULT_PRECISION`. One rule for
    ``simcore tune`` and the app, so the same job gives the same numbers in both.

    Examples
    --------
    >>> settle_precision({"autotuning": {"enabled": True}})[1]
    'fp16 (the default: the DeepSpeed config enables neither fp16 nor bf16, which DeepSpeed would train in fp32)'
    >>> settle_precision({"bf16": {"enabled": True}})[1]
    'bf16 (DeepSpeed config: bf16.enabled)'
    >>> cfg, note = settle_precision({"bf16": {"enabled": True}}, "fp32", asked_as="--precision")
    >>> cfg, note
    ({'bf16': {'enabled': False}}, 'fp32 (--precision)')
    """
    if precision is not None and precision not in PRECISIONS:
        raise ValueError(f"precision {precision!r} is unknown; pass one of "
                         f"{', '.join(PRECISIONS)}")
    cfg = dict(ds_config)
    enabled = {k: cfg[k].get("enabled") for k in ("fp16", "bf16")
               if isinstance(cfg.get(k), Mapping) and cfg[k].get("enabled") in (True, "auto")}
    if precision is None and enabled:
        settled = precision_of(cfg, user_args=user_args)
        key, on = next(iter(enabled.items()))
        if on is True:
            return cfg, f"{settled} (DeepSpeed config: {key}.enabled)"
        if settled != "fp32":
            return cfg, f'{settled} (DeepSpeed config: {settled}.enabled "auto" and the ' \
                        f"script's --{settled})"
        return cfg, (f'fp32 (DeepSpeed config: {key}.enabled "auto" without --{key} in the '
                     "script's arguments)")
    if precision is None:
        precision = DEFAULT_PRECISION
        why = ("the default: the DeepSpeed config enables neither fp16 nor bf16, which "
               "DeepSpeed would train in fp32")
    else:
        why = asked_as
    for k in ("fp16", "bf16"):
        section = cfg.get(k) if isinstance(cfg.get(k), Mapping) else None
        if k == precision:
            cfg[k] = {**(section or {}), "enabled": True}
        elif section is not None:
            cfg[k] = {**section, "enabled": False}
    return cfg, f"{precision} ({why})"


#: Bytes per gradient element of DeepSpeed's ``communication_data_type`` values.
_COMM_BYTES = {"fp16": 2, "bf16": 2, "fp32": 4}


def _positive_int(name: str, v: Any) -> None:
    if isinstance(v, bool) or not isinstance(v, int | np.integer) or v < 1:
        raise ValueError(f"{name} must be a positive integer, got {v!r}")


@dataclass(frozen=True)
class TrainingRun:
    """One DeepSpeed configuration as the engine sees it (hashable, validated).

    Parameters
    ----------
    stage, micro_batch, grad_accum : int
        ZeRO stage, micro-batch per GPU, gradient accumulation steps.
    n_gpus, mp : int
        Total GPUs and the model-parallel degree (``mp`` divides ``n_gpus``).
    seq_len : int
        Tokens per sample.
    precision : {"fp16", "bf16", "fp32"}
    activation_checkpointing : bool
        Full recomputation.
    grad_bytes : int, optional
        Bytes per gradient element in the data-parallel reduction; 0 (default): 4 for
        fp32, else 2.
    runtime : str
        The software stack (:func:`tune_runtime`), whose profile sets what the experiment
        does not (kernels, attention, gradient-reduction overlap); ``""``: the library's
        default stack (the same numbers as ``"deepspeed"``).

    Examples
    --------
    >>> run = TrainingRun(stage=2, micro_batch=4, grad_accum=2, n_gpus=8, mp=2)
    >>> run.dp, run.global_batch, run.workload().batch, run.space()["tp"]
    (4, 32, 32, (2,))
    """

    stage: int
    micro_batch: int
    grad_accum: int = 1
    n_gpus: int = 1
    mp: int = 1
    seq_len: int = 2048
    precision: str = "fp16"
    activation_checkpointing: bool = False
    grad_bytes: int = 0
    runtime: str = ""

    def __post_init__(self) -> None:
        if self.precision not in PRECISIONS:
            raise ValueError(f"precision={self.precision!r} is unknown; pass one of "
                             f"{list(PRECISIONS)}")
        if isinstance(self.stage, bool) or self.stage not in (0, 1, 2, 3):
            raise ValueError(f"ZeRO stage must be 0, 1, 2 or 3, got {self.stage!r}")
        for name in ("micro_batch", "grad_accum", "n_gpus", "mp", "seq_len"):
            _positive_int(name, getattr(self, name))
        if self.n_gpus % self.mp:
            raise ValueError(f"mp={self.mp} must divide n_gpus={self.n_gpus}")
        if self.grad_bytes == 0:
            object.__setattr__(self, "grad_bytes", 4 if self.precision == "fp32" else 2)
        _positive_int("grad_bytes", self.grad_bytes)

    @classmethod
    def from_experiment(
        cls,
        experiment: Any,
        *,
        n_gpus: int | None = None,
        seq_len: int = 2048,
        precision: str | None = None,
        activation_checkpointing: bool = False,
        runtime: str = "",
    ) -> TrainingRun:
        """The run of an :class:`~simcore.autotune.results.Experiment`.

        ``n_gpus`` defaults to the experiment's, ``precision`` to its DeepSpeed config
        (``fp16``/``bf16`` sections), the gradient bytes to its
        ``communication_data_type``.

        Examples
        --------
        >>> from simcore.autotune import Experiment
        >>> exp = Experiment("z3_gas1_tmbspg2", stage=3, micro_batch=2, grad_accum=1,
        ...                  ds_config={"bf16": {"enabled": True}}, n_gpus=8)
        >>> r = TrainingRun.from_experiment(exp)
        >>> r.precision, r.grad_bytes, r.dp
        ('bf16', 2, 8)
        """
        ds = experiment.ds_config
        prec = precision or precision_of(ds)
        comm = ds.get("communication_data_type")
        if comm is not None and comm not in _COMM_BYTES:
            raise ValueError(f"communication_data_type={comm!r} is unknown; pass one of "
                             f"{list(_COMM_BYTES)}")
        return cls(
            stage=experiment.stage, micro_batch=experiment.micro_batch,
            grad_accum=experiment.grad_accum,
            n_gpus=experiment.n_gpus if n_gpus is None else n_gpus, mp=experiment.mp,
            seq_len=seq_len, precision=prec,
            activation_checkpointing=bool(activation_checkpointing),
            grad_bytes=_COMM_BYTES[comm] if comm is not None else 0, runtime=runtime,
        )

    @property
    def dp(self) -> int:
        return self.n_gpus // self.mp

    @property
    def global_batch(self) -> int:
        """Samples per step, ``micro_batch · grad_accum · dp``."""
        return self.micro_batch * self.grad_accum * self.dp

    def workload(self) -> Workload:
        """The engine's training workload."""
        return Workload(
            "train", batch=self.global_batch, s_kv=self.seq_len, micro_batch=self.micro_batch,
            recompute="full" if self.activation_checkpointing else "none",
            sequence_parallel=False, zero_stage=self.stage, grad_bytes=self.grad_bytes,
            precision=self.precision, runtime=self.runtime,
        )

    def space(self) -> dict[str, tuple[Any, ...]]:
        """The one engine layout: TP = mp (innermost), DP = n_gpus / mp."""
        return {"cp": (1,), "tp": (self.mp,), "pp": (1,), "dp": (self.dp,),
                "kv_shard_mode": ("head",), "ffn_shard_scope": ("TP",),
                "tp_placement": ("inner",), "cp_placement": ("inner",),
                "cp_ring_variant": ("kv",)}


@dataclass(frozen=True)
class TrainingEstimate:
    """One simulated training configuration (per GPU, per global step), from the engine.

    Attributes
    ----------
    run : TrainingRun
    valid : bool
        The engine accepts the layout (``mp`` divides the heads, the GPUs fit the family).
    fits : bool
        The engine's memory-fit check (``mem_bytes`` within usable HBM).
    model_states_bytes, activation_bytes, mem_bytes, usable_bytes : float
        Memory per GPU: ``mem_bytes = model_states_bytes + activation_bytes``.
    compute_ns, memory_ns, comm_ns, latency_ns : float
        The engine's step time and breakdown (NaN for an invalid layout).
    flops_per_gpu : float
        Achieved model FLOP/s per GPU.
    """

    run: TrainingRun
    valid: bool
    fits: bool
    model_states_bytes: float
    activation_bytes: float
    mem_bytes: float
    usable_bytes: float
    compute_ns: float
    memory_ns: float
    comm_ns: float
    latency_ns: float
    flops_per_gpu: float

    @property
    def stage(self) -> int:
        return self.run.stage

    @property
    def micro_batch(self) -> int:
        return self.run.micro_batch

    @property
    def grad_accum(self) -> int:
        return self.run.grad_accum

    @property
    def n_gpus(self) -> int:
        return self.run.n_gpus

    @property
    def global_batch(self) -> int:
        return self.run.global_batch

    @property
    def activation_bytes_per_sample(self) -> float:
        return self.activation_bytes / self.micro_batch

    def metrics(self) -> dict[str, float]:
        """The metrics.json DeepSpeed writes: ``latency`` (µs per global step),
        ``throughput`` (samples/s), ``FLOPS_per_gpu`` (model FLOP/s per GPU), plus
        ``mem_bytes`` per GPU."""
        return {
            "latency": self.latency_ns / 1e3,
            "throughput": self.global_batch / (self.latency_ns * 1e-9),
            "FLOPS_per_gpu": self.flops_per_gpu,
            "mem_bytes": self.mem_bytes,
        }


class TrainingEngine:
    """The engine for one model and hardware point; prepares each :class:`TrainingRun`
    once (:func:`simcore.engine.evaluate.prepare`) and keeps its coefficient row.

    Examples
    --------
    >>> from simcore.model.presets import get_family, get_model
    >>> fam = get_family("A100-80G")
    >>> eng = TrainingEngine(get_model("Llama 2 7B"), family=fam, hardware=fam.hardware,
    ...                      efficiency=Efficiency())
    >>> states, per_sample = eng.memory(TrainingRun(stage=3, micro_batch=1, n_gpus=8))
    >>> round(states / 1e9, 2), round(per_sample / 1e9, 1)  # 4L + 18N/8 (DeepSpeed); flash
    (15.97, 9.4)
    """

    def __init__(self, model: Model, *, family: HardwareFamily, hardware: Hardware,
                 efficiency: Efficiency) -> None:
        self.model, self.family, self.hardware, self.efficiency = (
            model, family, hardware, efficiency)
        self._rows: dict[TrainingRun, np.ndarray] = {}
        self._hw: np.ndarray | None = None
        self._eff: Any = None

    def row(self, run: TrainingRun) -> np.ndarray:
        """The run's coefficient record (a one-row structured table of the engine)."""
        if run not in self._rows:
            from ..engine.core import prepare

            p = prepare(self.model, run.workload(), space=run.space(), hardware=self.hardware,
                        family=self.family, efficiency=self.efficiency)
            self._rows[run] = p.coeffs[:1]
            if self._hw is None:
                self._hw, self._eff = p.hw_rows(0, 1), p.eff
        return self._rows[run]

    def memory(self, run: TrainingRun) -> tuple[float, float]:
        """(model states, activations per sample) from the engine's memory breakdown
        (activations and logits grow linearly in the micro-batch without a pipeline)."""
        row = self.row(run)
        return float(row["mem_weights_bytes"][0]), float(row["mem_act_bytes"][0]) / run.micro_batch

    def usable_bytes(self) -> float:
        return self.hardware.pe_hbm_gb * 1e9 * self.efficiency.hbm_usable

    def estimates(self, runs: Sequence[TrainingRun]) -> list[TrainingEstimate]:
        """All ``runs`` through one call of the engine's hardware combine."""
        from ..engine.core import combine

        if not runs:
            return []
        rows = np.concatenate([self.row(r) for r in runs])
        assert self._hw is not None  # set by the first row()
        outs = combine(rows, self._hw, self._eff)
        usable = self.usable_bytes()
        found = []
        for j, run in enumerate(runs):
            states = float(rows["mem_weights_bytes"][j])
            mem = float(rows["mem_bytes"][j])
            found.append(TrainingEstimate(
                run=run, valid=bool(rows["valid"][j] == 1.0), fits=bool(outs["fits"][0, j]),
                model_states_bytes=states, activation_bytes=mem - states, mem_bytes=mem,
                usable_bytes=usable, compute_ns=float(outs["compute_ns"][0, j]),
                memory_ns=float(outs["memory_ns"][0, j]), comm_ns=float(outs["comm_ns"][0, j]),
                latency_ns=float(outs["latency_ns"][0, j]),
                flops_per_gpu=float(outs["flops_per_device"][0, j]),
            ))
        return found


def _engine(model: str | Model, family: str | HardwareFamily, hardware: Hardware | None,
            efficiency: Efficiency | None) -> TrainingEngine:
    fam = get_family(family)
    return TrainingEngine(get_model(model), family=fam,
                       hardware=hardware if hardware is not None else fam.hardware,
                       efficiency=efficiency if efficiency is not None else Efficiency())


def simulate_runs(
    model: str | Model,
    runs: Iterable[TrainingRun],
    *,
    family: str | HardwareFamily = "A100-80G",
    hardware: Hardware | None = None,
    efficiency: Efficiency | None = None,
) -> list[TrainingEstimate]:
    """Engine estimates of many runs (one hardware-combine call for all of them).

    Examples
    --------
    >>> runs = [TrainingRun(stage=s, micro_batch=1, n_gpus=8) for s in (1, 2, 3)]
    >>> [e.fits for e in simulate_runs("Llama 2 7B", runs, family="A100-80G")]
    [True, True, True]
    """
    return _engine(model, family, hardware, efficiency).estimates(list(runs))


def estimate_training(
    model: str | Model,
    *,
    family: str | HardwareFamily = "A100-80G",
    hardware: Hardware | None = None,
    n_gpus: int,
    stage: int,
    micro_batch: int,
    grad_accum: int = 1,
    seq_len: int = 2048,
    mp: int = 1,
    precision: str = "fp16",
    activation_checkpointing: bool = False,
    efficiency: Efficiency | None = None,
    runtime: str = "",
) -> TrainingEstimate:
    """Memory and step time of one ZeRO training configuration, from the engine.

    Parameters
    ----------
    model : str or Model
    family : str or HardwareFamily
        Topology (and default hardware), e.g. ``"A100-80G"``.
    hardware : Hardware, optional
        Overrides the family's hardware point.
    n_gpus, stage, micro_batch, grad_accum, seq_len, mp, precision, activation_checkpointing, runtime
        See :class:`TrainingRun`.
    efficiency : Efficiency, optional

    Examples
    --------
    >>> est = estimate_training("Llama 2 7B", family="A100-80G", n_gpus=8, stage=1,
    ...                         micro_batch=1)
    >>> est.fits, est.metrics()["latency"] == est.latency_ns / 1e3
    (True, True)
    """
    run = TrainingRun(stage=stage, micro_batch=micro_batch, grad_accum=grad_accum,
                      n_gpus=n_gpus, mp=mp, seq_len=seq_len, precision=precision,
                      activation_checkpointing=activation_checkpointing,
                      runtime=tune_runtime(runtime))
    return simulate_runs(model, [run], family=family, hardware=hardware,
                         efficiency=efficiency)[0]


def with_memory(hardware: Hardware, *, gpu_mem_gb: float | None) -> Hardware:
    """``hardware`` with ``pe_hbm_gb`` replaced (validated by :class:`Hardware`).

    Examples
    --------
    >>> with_memory(Hardware(), gpu_mem_gb=40).pe_hbm_gb
    40.0
    """
    return hardware if gpu_mem_gb is None else replace(hardware, pe_hbm_gb=float(gpu_mem_gb))
