"""Training model used by the simulator runner: ZeRO memory, activations, step latency.

The bare functions take numbers or numpy arrays (broadcast against each other) and
return floats or arrays; they hold every formula. :func:`estimate_training` is the
labelled layer: it maps a :class:`~simcore.specs.Model`, a
:class:`~simcore.specs.Hardware` and a :class:`~simcore.specs.Topology` onto them.

Formulas
--------
* Model states per GPU (DeepSpeed autotuner's instantiation formula, Adam, ``G`` the
  total GPU count, ``mp`` the model-parallel degree): fp16 Z0 = 20N/mp,
  Z1 = (4+16/G)N/mp, Z2 = (2+18/G)N/mp, Z3 = 20N/(G·mp); fp32/bf16 16N, (8+8/G)N,
  (4+12/G)N, 16N/G, all divided by mp.
* Activations per micro-batch (Korthikanti et al. 2022, 16-bit activations, tensor
  parallelism without sequence parallelism): per layer s·b·h·(10 + 24/mp + 5·a·s/(h·mp))
  bytes, i.e. s·b·h·(34 + 5·a·s/h) at mp = 1; 2·s·b·h with full recomputation.
* Ring collectives: all-reduce 2(g−1)/g·B/bw + 2(g−1)·α; all-gather and reduce-scatter
  (g−1)/g·B/bw + (g−1)·α, with α paid once per bucket.
* Compute: 6·N·tokens FLOPs (8·N·tokens with full recomputation) at
  ``peak · Efficiency.train_compute``.

Examples
--------
>>> zero_model_states_bytes(1e9, stage=3, n_gpus=8) / 1e9
2.5
>>> activation_bytes(2048, micro_batch=1, d_model=4096, n_heads=32, n_layers=1) / 2**20
912.0
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from ..specs import Efficiency, Hardware, Model, Topology

__all__ = [
    "PRECISIONS",
    "TrainingEstimate",
    "activation_bytes",
    "allgather_ns",
    "allreduce_ns",
    "estimate_training",
    "link_for_span",
    "optimizer_step_ns",
    "reduce_scatter_ns",
    "train_compute_ns",
    "zero_comm_ns",
    "zero_model_states_bytes",
]

#: Accepted training precisions (bf16 uses DeepSpeed's non-fp16 memory branch).
PRECISIONS: tuple[str, ...] = ("fp16", "bf16", "fp32")

#: Bytes of optimizer-step HBM traffic per parameter (fp32 master, m, v read and written,
#: gradient read, 16-bit parameter written).
_ADAM_BYTES_PER_PARAM = 28.0


def _out(x: np.ndarray) -> Any:
    """A float for 0-d results, the array otherwise."""
    return float(x) if np.ndim(x) == 0 else x


def _check_stage(stage: np.ndarray) -> None:
    if np.any((stage < 0) | (stage > 3)) or np.any(stage != np.round(stage)):
        raise ValueError(
            f"ZeRO stage must be 0, 1, 2 or 3, got {np.unique(stage).tolist()}"
        )


def zero_model_states_bytes(
    n_params: Any, *, stage: Any, n_gpus: Any, mp: Any = 1, fp16: Any = True
) -> Any:
    """Per-GPU bytes of parameters, gradients and Adam states (DeepSpeed's formula).

    Parameters
    ----------
    n_params : float or array
        Parameter count N.
    stage : int or array
        ZeRO stage 0–3.
    n_gpus : int or array
        Total GPU count G (DeepSpeed's autotuner partitions over all GPUs).
    mp : int or array
        Model-parallel degree.
    fp16 : bool or array
        True: 2-byte params and grads, 16 bytes of optimizer state per parameter
        (20N at Z0). False (fp32, bf16): 4 + 4 + 8 bytes (16N at Z0).

    Examples
    --------
    >>> zero_model_states_bytes(1.0, stage=[0, 1, 2, 3], n_gpus=8)
    array([20.  ,  6.  ,  4.25,  2.5 ])
    >>> zero_model_states_bytes(1.0, stage=0, n_gpus=8, fp16=False)
    16.0
    """
    n = np.asarray(n_params, dtype=float)
    st = np.asarray(stage)
    _check_stage(st)
    g = np.asarray(n_gpus, dtype=float)
    half = np.asarray(fp16, dtype=bool)
    p_bytes = np.where(half, 2.0, 4.0)
    opt_bytes = np.where(half, 16.0, 8.0)
    opt = np.where(st >= 1, opt_bytes / g, opt_bytes)
    grad = np.where(st >= 2, p_bytes / g, p_bytes)
    par = np.where(st >= 3, p_bytes / g, p_bytes)
    return _out(n * (par + grad + opt) / np.asarray(mp, dtype=float))


def activation_bytes(
    seq_len: Any,
    *,
    micro_batch: Any,
    d_model: Any,
    n_heads: Any,
    n_layers: Any,
    mp: Any = 1,
    recompute: Any = False,
    bytes_per_value: Any = 2,
) -> Any:
    """Activation bytes per GPU for one micro-batch (Korthikanti et al. 2022).

    Without recomputation each layer keeps s·b·h·(10 + 24/mp + 5·a·s/(h·mp)) bytes;
    with full recomputation only the layer input, 2·s·b·h. The paper's counts assume
    16-bit activations; ``bytes_per_value=4`` scales them for fp32 training.

    Examples
    --------
    >>> activation_bytes(1, micro_batch=1, d_model=1, n_heads=1, n_layers=1)
    39.0
    >>> activation_bytes(1, micro_batch=1, d_model=1, n_heads=1, n_layers=1, recompute=True)
    2.0
    """
    s = np.asarray(seq_len, dtype=float)
    b = np.asarray(micro_batch, dtype=float)
    h = np.asarray(d_model, dtype=float)
    a = np.asarray(n_heads, dtype=float)
    t = np.asarray(mp, dtype=float)
    per_layer_full = s * b * h * (10.0 + 24.0 / t + 5.0 * a * s / (h * t))
    per_layer_ckpt = 2.0 * s * b * h
    per_layer = np.where(np.asarray(recompute, dtype=bool), per_layer_ckpt, per_layer_full)
    scale = np.asarray(bytes_per_value, dtype=float) / 2.0
    return _out(np.asarray(n_layers, dtype=float) * per_layer * scale)


def allreduce_ns(nbytes: Any, *, group: Any, bw_gbs: Any, alpha_ns: Any, calls: Any = 1) -> Any:
    """Ring all-reduce time: 2(g−1)/g·B/bw + 2(g−1)·α per call.

    ``bw_gbs`` is in GB/s, so ``B / bw_gbs`` is in ns. A group of one costs nothing.

    Examples
    --------
    >>> allreduce_ns(8e9, group=8, bw_gbs=100.0, alpha_ns=0.0) / 1e9
    0.14
    """
    g = np.asarray(group, dtype=float)
    frac = np.where(g > 1, (g - 1.0) / np.maximum(g, 1.0), 0.0)
    out = 2.0 * frac * np.asarray(nbytes, dtype=float) / np.asarray(bw_gbs, dtype=float)
    out = out + 2.0 * np.maximum(g - 1.0, 0.0) * np.asarray(alpha_ns, dtype=float) * np.asarray(
        calls, dtype=float
    )
    return _out(out)


def allgather_ns(nbytes: Any, *, group: Any, bw_gbs: Any, alpha_ns: Any, calls: Any = 1) -> Any:
    """Ring all-gather time: (g−1)/g·B/bw + (g−1)·α per call (B = gathered bytes).

    Examples
    --------
    >>> allgather_ns(8e9, group=8, bw_gbs=100.0, alpha_ns=0.0) / 1e9
    0.07
    """
    g = np.asarray(group, dtype=float)
    frac = np.where(g > 1, (g - 1.0) / np.maximum(g, 1.0), 0.0)
    out = frac * np.asarray(nbytes, dtype=float) / np.asarray(bw_gbs, dtype=float)
    out = out + np.maximum(g - 1.0, 0.0) * np.asarray(alpha_ns, dtype=float) * np.asarray(
        calls, dtype=float
    )
    return _out(out)


def reduce_scatter_ns(
    nbytes: Any, *, group: Any, bw_gbs: Any, alpha_ns: Any, calls: Any = 1
) -> Any:
    """Ring reduce-scatter time; the same cost as :func:`allgather_ns`.

    Examples
    --------
    >>> reduce_scatter_ns(8e9, group=8, bw_gbs=100.0, alpha_ns=0.0) / 1e9
    0.07
    """
    return allgather_ns(nbytes, group=group, bw_gbs=bw_gbs, alpha_ns=alpha_ns, calls=calls)


def link_for_span(
    span: Any,
    *,
    hardware: Hardware,
    topology: Topology,
    efficiency: Efficiency | None = None,
) -> tuple[Any, Any]:
    """Bandwidth (GB/s, times ``Efficiency.network``) and α (ns) of the tier a group spans.

    A group spanning at most one node (cube) uses ``bw_intra_gbs``; at most one SiP
    (rack) ``bw_inter_gbs``; beyond that ``bw_intersip_gbs``.

    Examples
    --------
    >>> from simcore.presets import HARDWARE_FAMILIES
    >>> fam = HARDWARE_FAMILIES["A100-80G"]
    >>> link_for_span(8, hardware=fam.hardware, topology=fam.topology)
    (240.0, 700.0)
    >>> link_for_span(16, hardware=fam.hardware, topology=fam.topology)
    (20.0, 3000.0)
    """
    eff = efficiency if efficiency is not None else Efficiency()
    sp = np.asarray(span, dtype=float)
    in_cube = sp <= topology.pes_per_cube
    in_sip = sp <= topology.pes_per_sip
    bw = np.select(
        [in_cube, in_sip],
        [hardware.bw_intra_gbs, hardware.bw_inter_gbs],
        hardware.bw_intersip_gbs,
    ) * eff.network
    alpha = np.select(
        [in_cube, in_sip],
        [topology.alpha_intra_ns, topology.alpha_inter_ns],
        topology.alpha_intersip_ns,
    )
    return _out(bw), _out(alpha)


def train_compute_ns(
    n_params: Any,
    *,
    tokens: Any,
    peak_tflops: Any,
    efficiency: Any,
    mp: Any = 1,
    recompute: Any = False,
) -> tuple[Any, Any]:
    """Forward and backward compute time (ns) of one micro-step on one GPU.

    Forward is 2·N·tokens FLOPs, backward 4·N·tokens (6·N·tokens with full
    recomputation), divided over ``mp`` GPUs, at ``peak_tflops · efficiency``.

    Examples
    --------
    >>> train_compute_ns(1e9, tokens=1000, peak_tflops=1000.0, efficiency=1.0)
    (2000000.0, 4000000.0)
    """
    rate = np.asarray(peak_tflops, dtype=float) * 1e3 * np.asarray(efficiency, dtype=float)
    work = np.asarray(n_params, dtype=float) * np.asarray(tokens, dtype=float) / np.asarray(
        mp, dtype=float
    )
    fwd = 2.0 * work / rate
    bwd = np.where(np.asarray(recompute, dtype=bool), 6.0, 4.0) * work / rate
    return _out(fwd), _out(bwd)


def optimizer_step_ns(
    n_params: Any, *, stage: Any, n_gpus: Any, mp: Any = 1, bw_hbm_gbs: Any, efficiency: Any = 1.0
) -> Any:
    """Adam step time (ns): 28 bytes of HBM traffic per parameter the GPU updates.

    ZeRO stages 1–3 partition the optimizer, so each GPU updates N/(mp·dp) parameters.

    Examples
    --------
    >>> optimizer_step_ns(1e9, stage=0, n_gpus=8, bw_hbm_gbs=28.0)
    1000000000.0
    >>> optimizer_step_ns(1e9, stage=1, n_gpus=8, bw_hbm_gbs=28.0)
    125000000.0
    """
    st = np.asarray(stage)
    _check_stage(st)
    t = np.asarray(mp, dtype=float)
    dp = np.asarray(n_gpus, dtype=float) / t
    share = np.asarray(n_params, dtype=float) / t / np.where(st >= 1, dp, 1.0)
    bw = np.asarray(bw_hbm_gbs, dtype=float) * np.asarray(efficiency, dtype=float)
    return _out(_ADAM_BYTES_PER_PARAM * share / bw)


def _exposed(comm: np.ndarray, compute: np.ndarray, calls: np.ndarray, overlap: np.ndarray):
    """Communication left after overlapping with ``compute``; the last bucket never hides."""
    hidden = np.maximum(comm - compute, comm / np.maximum(calls, 1.0))
    return np.where(overlap, hidden, comm)


def zero_comm_ns(
    n_params: Any,
    *,
    stage: Any,
    n_gpus: Any,
    grad_accum: Any = 1,
    mp: Any = 1,
    bw_gbs: Any,
    alpha_ns: Any,
    bytes_per_grad: Any = 2,
    fwd_ns: Any = 0.0,
    bwd_ns: Any = 0.0,
    overlap_comm: Any = False,
    reduce_bucket: Any = 5e8,
    allgather_bucket: Any = 5e8,
    prefetch_bucket: Any = 5e7,
) -> Any:
    """Exposed data-parallel communication (ns) of one global step.

    The DP group has ``n_gpus / mp`` ranks and moves ``bytes_per_grad · N / mp`` bytes.

    * Z0: one gradient all-reduce per step.
    * Z1: one gradient reduce-scatter per step, then an all-gather of the updated
      parameters.
    * Z2: a gradient reduce-scatter every micro-step (gradients are partitioned), one
      parameter all-gather per step.
    * Z3: per micro-step, parameter all-gathers in forward and backward and a gradient
      reduce-scatter.

    Buckets (in elements, as DeepSpeed's ``reduce_bucket_size``,
    ``allgather_bucket_size``, ``stage3_prefetch_bucket_size``) set how many collective
    calls pay α. With ``overlap_comm`` (stages 1–3) reductions hide behind backward and
    Z3 gathers behind the pass they feed, except the last bucket.

    Examples
    --------
    >>> zero_comm_ns(8e9, stage=0, n_gpus=8, bw_gbs=100.0, alpha_ns=0.0,
    ...              bytes_per_grad=1) / 1e9
    0.14
    >>> zero_comm_ns(8e9, stage=3, n_gpus=8, bw_gbs=100.0, alpha_ns=0.0,
    ...              bytes_per_grad=1) / 1e9
    0.21
    """
    st = np.asarray(stage)
    _check_stage(st)
    t = np.asarray(mp, dtype=float)
    dp = np.asarray(n_gpus, dtype=float) / t
    elems = np.asarray(n_params, dtype=float) / t
    nbytes = elems * np.asarray(bytes_per_grad, dtype=float)
    gas = np.asarray(grad_accum, dtype=float)
    n_red = np.ceil(elems / np.asarray(reduce_bucket, dtype=float))
    n_ag = np.ceil(elems / np.asarray(allgather_bucket, dtype=float))
    n_pf = np.ceil(elems / np.asarray(prefetch_bucket, dtype=float))
    link = dict(group=dp, bw_gbs=bw_gbs, alpha_ns=alpha_ns)
    overlap = np.asarray(overlap_comm, dtype=bool) & (st >= 1)
    fwd = np.asarray(fwd_ns, dtype=float)
    bwd = np.asarray(bwd_ns, dtype=float)

    ar = np.asarray(allreduce_ns(nbytes, calls=n_red, **link))
    rs = np.asarray(reduce_scatter_ns(nbytes, calls=n_red, **link))
    ag = np.asarray(allgather_ns(nbytes, calls=n_ag, **link))
    pf = np.asarray(allgather_ns(nbytes, calls=n_pf, **link))

    z0 = ar
    z1 = _exposed(rs, bwd, n_red, overlap) + ag
    z2 = gas * _exposed(rs, bwd, n_red, overlap) + ag
    z3 = gas * (
        _exposed(pf, fwd, n_pf, overlap)
        + _exposed(pf + rs, bwd, n_pf + n_red, overlap)
    )
    return _out(np.select([st == 0, st == 1, st == 2], [z0, z1, z2], z3))


@dataclass(frozen=True)
class TrainingEstimate:
    """One simulated training configuration (per GPU, per global step).

    Attributes
    ----------
    model_states_bytes, activation_bytes, mem_bytes, usable_bytes : float
        Memory per GPU; ``fits`` is ``mem_bytes <= usable_bytes``.
    compute_ns, comm_ns, optimizer_ns, latency_ns : float
        Step-time breakdown; ``latency_ns`` is their sum.
    global_batch : int
        Samples per step, ``micro_batch · grad_accum · n_gpus / mp``.
    """

    stage: int
    micro_batch: int
    grad_accum: int
    n_gpus: int
    model_states_bytes: float
    activation_bytes: float
    mem_bytes: float
    usable_bytes: float
    compute_ns: float
    comm_ns: float
    optimizer_ns: float
    latency_ns: float
    global_batch: int
    model_flops: float
    extra: Mapping[str, float] = field(default_factory=dict)

    @property
    def fits(self) -> bool:
        return bool(self.mem_bytes <= self.usable_bytes)

    @property
    def activation_bytes_per_sample(self) -> float:
        return self.activation_bytes / self.micro_batch

    def metrics(self) -> dict[str, float]:
        """The metrics.json DeepSpeed writes: ``latency`` (µs per global step),
        ``throughput`` (samples/s), ``FLOPS_per_gpu`` (model FLOP/s per GPU), plus
        ``mem_bytes`` per GPU."""
        step_s = self.latency_ns * 1e-9
        return {
            "latency": self.latency_ns / 1e3,
            "throughput": self.global_batch / step_s,
            "FLOPS_per_gpu": self.model_flops / (self.n_gpus * step_s),
            "mem_bytes": self.mem_bytes,
        }


def estimate_training(
    model: Model,
    *,
    hardware: Hardware,
    topology: Topology,
    n_gpus: int,
    stage: int,
    micro_batch: int,
    grad_accum: int = 1,
    seq_len: int = 2048,
    mp: int = 1,
    precision: str = "fp16",
    activation_checkpointing: bool = False,
    zero: Mapping[str, Any] | None = None,
    efficiency: Efficiency | None = None,
) -> TrainingEstimate:
    """Memory and step time of one ZeRO training configuration.

    Parameters
    ----------
    model : Model
    hardware, topology : Hardware, Topology
        E.g. ``simcore.presets.HARDWARE_FAMILIES["A100-80G"]``'s fields.
    n_gpus : int
        Total GPUs; the DP group is ``n_gpus / mp`` and spans all of them.
    stage, micro_batch, grad_accum : int
        ZeRO stage, micro-batch per GPU, gradient accumulation steps.
    seq_len : int
        Tokens per sample.
    precision : {"fp16", "bf16", "fp32"}
    activation_checkpointing : bool
        Full recomputation (2·s·b·h per layer kept, one extra forward pass).
    zero : mapping, optional
        The ``zero_optimization`` section: ``overlap_comm``, ``reduce_bucket_size``,
        ``allgather_bucket_size``, ``stage3_prefetch_bucket_size`` are used.
    efficiency : Efficiency, optional
        ``train_compute`` scales peak FLOP/s, ``network`` the links, ``memory`` HBM
        bandwidth, ``hbm_usable`` the memory budget.

    Examples
    --------
    >>> from simcore.presets import HARDWARE_FAMILIES, PRESETS
    >>> fam = HARDWARE_FAMILIES["A100-80G"]
    >>> est = estimate_training(PRESETS["Llama 2 7B"].model, hardware=fam.hardware,
    ...                         topology=fam.topology, n_gpus=8, stage=0, micro_batch=1)
    >>> est.fits
    False
    """
    if precision not in PRECISIONS:
        raise ValueError(f"precision={precision!r} is unknown; pass one of {list(PRECISIONS)}")
    for name, v in (("n_gpus", n_gpus), ("micro_batch", micro_batch),
                    ("grad_accum", grad_accum), ("seq_len", seq_len), ("mp", mp)):
        if isinstance(v, bool) or not isinstance(v, int | np.integer) or v < 1:
            raise ValueError(f"{name} must be a positive integer, got {v!r}")
    if n_gpus % mp:
        raise ValueError(f"mp={mp} must divide n_gpus={n_gpus}")
    eff = efficiency if efficiency is not None else Efficiency()
    z = dict(zero or {})
    n = float(model.n_params)
    fp16 = precision == "fp16"
    value_bytes = 4 if precision == "fp32" else 2
    states = zero_model_states_bytes(n, stage=stage, n_gpus=n_gpus, mp=mp, fp16=fp16)
    acts = activation_bytes(
        seq_len, micro_batch=micro_batch, d_model=model.d_model, n_heads=model.n_heads,
        n_layers=model.n_layers, mp=mp, recompute=activation_checkpointing,
        bytes_per_value=value_bytes,
    )
    tokens = micro_batch * seq_len
    active = float(model.n_active_params)
    fwd, bwd = train_compute_ns(
        active, tokens=tokens, peak_tflops=hardware.peak_tflops_f16 * (0.5 if precision == "fp32"
                                                                        else 1.0),
        efficiency=eff.train_compute, mp=mp, recompute=activation_checkpointing,
    )
    bw, alpha = link_for_span(n_gpus, hardware=hardware, topology=topology, efficiency=eff)
    comm = zero_comm_ns(
        n, stage=stage, n_gpus=n_gpus, grad_accum=grad_accum, mp=mp, bw_gbs=bw,
        alpha_ns=alpha, bytes_per_grad=value_bytes, fwd_ns=fwd, bwd_ns=bwd,
        overlap_comm=bool(z.get("overlap_comm", stage == 3)),
        reduce_bucket=float(z.get("reduce_bucket_size", 5e8)),
        allgather_bucket=float(z.get("allgather_bucket_size", 5e8)),
        prefetch_bucket=float(z.get("stage3_prefetch_bucket_size", 5e7)),
    )
    opt = optimizer_step_ns(n, stage=stage, n_gpus=n_gpus, mp=mp,
                            bw_hbm_gbs=hardware.bw_hbm_gbs, efficiency=eff.memory)
    compute = grad_accum * (fwd + bwd)
    global_batch = micro_batch * grad_accum * (n_gpus // mp)
    return TrainingEstimate(
        stage=stage, micro_batch=micro_batch, grad_accum=grad_accum, n_gpus=n_gpus,
        model_states_bytes=float(states), activation_bytes=float(acts),
        mem_bytes=float(states + acts), usable_bytes=hardware.pe_hbm_gb * 1e9 * eff.hbm_usable,
        compute_ns=float(compute), comm_ns=float(comm), optimizer_ns=float(opt),
        latency_ns=float(compute + comm + opt), global_batch=int(global_batch),
        model_flops=6.0 * active * global_batch * seq_len,
    )


def with_memory(hardware: Hardware, *, gpu_mem_gb: float | None) -> Hardware:
    """``hardware`` with ``pe_hbm_gb`` replaced (validated by :class:`Hardware`).

    Examples
    --------
    >>> with_memory(Hardware(), gpu_mem_gb=40).pe_hbm_gb
    40.0
    """
    return hardware if gpu_mem_gb is None else replace(hardware, pe_hbm_gb=float(gpu_mem_gb))
