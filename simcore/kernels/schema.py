"""The kernel interface, declared once.

Everything that crosses between the labelled layer and the numba kernels is declared
here and nowhere else:

* :data:`COEFFICIENTS` — the per-layout coefficient record (one row of the first
  stage, hardware-independent). :data:`COEF_DTYPE` is the numpy structured dtype
  generated from it; kernels read and write fields by name (``c.f_lin``), the
  labelled layer reads columns by name (``coeffs["mem_bytes"]``). Adding a
  coefficient is one row of the table.
* The parameter bundles :class:`ModelParams`, :class:`WorkloadParams`,
  :class:`TopologyParams`, :class:`EfficiencyParams` — float NamedTuples numba passes
  by value — and the ``pack_*`` functions that build them from the specs.
* :data:`HW` — the column of each hardware knob in a hardware row.
* :data:`LAYOUT` — the column of each layout dim in an integer layout row.
* :data:`OUTPUTS` (per hardware × layout point) and :data:`LAYOUT_OUTPUTS` (per
  layout, read straight from the coefficients), with units and long names; the
  Dataset attrs come from here.

The reference twins (``*_ref.py``) do not use this module: they take the specs as they
are, so they stay an independent oracle.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

__all__ = [
    "ACT_CODES", "COEFFICIENTS", "COEF_DTYPE", "EfficiencyParams", "Field", "FUSED_METRICS", "HW",
    "KNOB_FIELDS", "LAYOUT", "LAYOUT_OUTPUTS", "MEM_PARTS", "MODE_CODES", "ModelParams",
    "N_BEST", "OUTPUTS", "PRECISION_CODES", "RECOMPUTE_CODES", "TopologyParams",
    "WorkloadParams", "field_attrs", "hbm_factor", "pack_efficiency", "pack_model",
    "pack_topology", "pack_workload",
]


class Field(NamedTuple):
    """One declared quantity: its name, units and a long name for plots and tables."""

    name: str
    units: str
    long_name: str


# --- the per-layout coefficient record ----------------------------------------------------
#: Per-layout coefficients (first stage). "per layer" means per layer of the critical
#: path's stage, per micro-batch for training; the combine multiplies by ``layer_mult``.
#: Tiers are 0 intra (cube), 1 inter (SiP), 2 inter-SiP.
COEFFICIENTS: tuple[Field, ...] = (
    Field("valid", "1", "1 if the layout is a legal combination for this model and system"),
    Field("n_devices", "1", "devices the layout occupies"),
    Field("mem_bytes", "B", "memory per device: weights or ZeRO states, KV cache, activations"),
    Field("f_lin", "FLOP", "attention projection FLOPs per layer"),
    Field("b_lin", "B", "attention projection HBM bytes per layer"),
    Field("f_core", "FLOP", "attention core (QK^T, softmax, AV) FLOPs per layer"),
    Field("b_core", "B", "attention core HBM bytes per layer (KV cache, Q, O)"),
    Field("f_ffn", "FLOP", "FFN / experts FLOPs per layer"),
    Field("b_ffn", "B", "FFN / experts HBM bytes per layer"),
    Field("f_head", "FLOP", "LM head FLOPs (once per step)"),
    Field("b_head", "B", "LM head HBM bytes (once per step)"),
    Field("comm0_bytes", "B", "effective wire bytes per layer on the intra tier"),
    Field("comm1_bytes", "B", "effective wire bytes per layer on the inter tier"),
    Field("comm2_bytes", "B", "effective wire bytes per layer on the inter-SiP tier"),
    Field("comm_alpha_ns", "ns", "link latency per layer"),
    Field("ring_bytes", "B", "CP ring bytes per layer"),
    Field("ring_tier", "1", "tier the CP ring runs on"),
    Field("ring_alpha_ns", "ns", "CP ring link latency per layer"),
    Field("ring_overlap", "1", "1 if the ring overlaps the attention core"),
    Field("layer_mult", "1", "layer slots on the critical path (pipeline included)"),
    Field("pp_bytes", "B", "pipeline p2p bytes per step"),
    Field("pp_tier", "1", "tier the pipeline sends run on"),
    Field("pp_alpha_ns", "ns", "pipeline p2p link latency per step"),
    Field("tokens", "1", "tokens produced (inference) or processed (train) per step"),
    Field("model_flops", "FLOP", "model FLOPs per step, whole system"),
    Field("tail0_bytes", "B", "once-per-step wire bytes on the intra tier (DP gradients)"),
    Field("tail1_bytes", "B", "once-per-step wire bytes on the inter tier"),
    Field("tail2_bytes", "B", "once-per-step wire bytes on the inter-SiP tier"),
    Field("tail_alpha_ns", "ns", "once-per-step link latency"),
    Field("tail_mem_bytes", "B", "once-per-step HBM bytes (optimizer step)"),
    Field("mem_weights_bytes", "B", "weights (inference) or ZeRO model states (training) per device"),
    Field("mem_kv_bytes", "B", "KV cache per device"),
    Field("mem_act_bytes", "B", "activations and logits per device"),
    Field("b_elem", "B", "memory-bound element-wise bytes per layer (norms, residuals, RoPE, activations)"),
    Field("ovl0_bytes", "B", "per-layer wire bytes on the intra tier that overlap the layer's compute"),
    Field("ovl1_bytes", "B", "per-layer wire bytes on the inter tier that overlap the layer's compute"),
    Field("ovl2_bytes", "B", "per-layer wire bytes on the inter-SiP tier that overlap the layer's compute"),
    Field("ovl_alpha_ns", "ns", "link latency of the overlapping per-layer collectives"),
    Field("tail_hide", "1", "fraction of the layers' compute the once-per-step collectives hide under"),
    Field("n_ops", "1", "kernel launches per layer"),
    Field("step_ops", "1", "kernel launches once per step (outside the layers)"),
    Field("step_count", "1", "framework steps per latency unit (each pays the per-step floor)"),
    Field("step_seqs", "1", "sequences the framework schedules per inference step (their "
          "per-sequence host cost runs under the device's step; the step takes the longer)"),
    Field("fixed_ns", "ns", "hardware-knob-independent time per step (host transfers over PCIe)"),
    Field("launch_ns", "ns", "host time per step to launch the kernels that are not replayed "
          "from a CUDA graph (inference.LAUNCH_NS each); decode of an MLA model: the stack's "
          "MLA attention op's extra device time per layer (Workload.mla_decode_ns), and FP8 "
          "expert slices"),
    Field("host_block_ns", "ns", "host time per step the device waits for, after the step "
          "(a synchronous serving loop): Workload.host_step_ns, and Workload.host_seq_ns per "
          "scheduled sequence of the replica; added after the overlapped host work's max"),
    Field("lowp_mm", "1", "1 if the projection and FFN matmuls run at a low-precision (FP8 / INT8) rate"),
    Field("lowp_head", "1", "1 if the LM head matmul runs at a low-precision (FP8 / INT8) rate"),
    Field("core_gemm", "1", "share of the attention core's FLOPs that run at the matmul rate "
          "instead of the attention kernel's (1: an unfused core's batched GEMMs; MLA decode: "
          "the absorbed part over the cached latent)"),
)

#: The structured dtype of a coefficient table (all float64, in declaration order).
COEF_DTYPE = np.dtype([(f.name, np.float64) for f in COEFFICIENTS])

#: Memory parts per device; they add up to ``mem_bytes``.
MEM_PARTS: tuple[str, ...] = ("mem_weights_bytes", "mem_kv_bytes", "mem_act_bytes")


# --- outputs ------------------------------------------------------------------------------
#: Outputs of the combine, per (hardware, layout) point, in kernel order.
OUTPUTS: tuple[Field, ...] = (
    Field("latency_ns", "ns", "TTFT (prefill), time per output token (decode) or step time (train)"),
    Field("throughput_tok_s", "tokens/s", "tokens produced per second by the whole system"),
    Field("flops_per_device", "FLOP/s", "achieved model FLOP/s per device"),
    Field("compute_ns", "ns", "time in compute-bound ops"),
    Field("memory_ns", "ns", "time in HBM-bound ops"),
    Field("comm_ns", "ns", "exposed communication time"),
    Field("overhead_ns", "ns", "kernel-launch and per-step framework overhead, and the "
          "scheduler's host time where it outlasts the device's step"),
    Field("compute_alone_ns", "ns", "compute alone: every op's FLOPs at the achievable peak "
          "(what the step would take if nothing else cost time)"),
    Field("memory_alone_ns", "ns", "HBM traffic alone: every op's bytes at the achievable "
          "HBM bandwidth (what the step would take if nothing else cost time)"),
    Field("fits", "1", "valid layout whose per-device memory fits usable HBM"),
)
#: The numeric outputs (all but ``fits``) the fused reduction returns per winner.
N_BEST = len(OUTPUTS) - 1
#: Output name → code understood by the fused kernels (its position in :data:`OUTPUTS`).
FUSED_METRICS: dict[str, int] = {"latency_ns": 0, "throughput_tok_s": 1, "flops_per_device": 2}

#: Outputs per layout (no hardware dims), each a coefficient column.
LAYOUT_OUTPUTS: tuple[str, ...] = ("mem_bytes", *MEM_PARTS, "valid", "n_devices")

# --- hardware rows and layout rows --------------------------------------------------------


class _Knobs(NamedTuple):
    pe_hbm_gb: int
    bw_hbm_gbs: int
    peak_tflops_f16: int
    bw_intra_gbs: int
    bw_inter_gbs: int
    bw_intersip_gbs: int


#: Column of each knob in a hardware row (the order of ``simcore.specs.HW_KNOBS``).
HW = _Knobs(*range(len(_Knobs._fields)))
#: The knobs as declared fields (units from their names).
KNOB_FIELDS: tuple[Field, ...] = (
    Field("pe_hbm_gb", "GB", "HBM capacity per device"),
    Field("bw_hbm_gbs", "GB/s", "HBM bandwidth per device"),
    Field("peak_tflops_f16", "TFLOP/s", "16-bit matmul peak per device"),
    Field("bw_intra_gbs", "GB/s", "scale-up (cube / NVLink) bandwidth per device"),
    Field("bw_inter_gbs", "GB/s", "SiP-level (inter-cube) bandwidth per device"),
    Field("bw_intersip_gbs", "GB/s", "scale-out (inter-SiP) bandwidth per device"),
)


class _LayoutCols(NamedTuple):
    cp: int
    tp: int
    pp: int
    dp: int
    kv_shard_mode: int
    ffn_shard_scope: int
    tp_placement: int
    cp_placement: int
    cp_ring_variant: int
    ep: int


#: Column of each layout dim in an integer layout row (the order of
#: ``simcore.space.PARALLEL_DIMS``; categorical dims hold the index of their choice).
LAYOUT = _LayoutCols(*range(len(_LayoutCols._fields)))

# --- parameter bundles --------------------------------------------------------------------
MODE_CODES = {"prefill": 0, "decode": 1, "train": 2}
RECOMPUTE_CODES = {"none": 0, "selective": 1, "full": 2, "op": 3}
PRECISION_CODES = {"fp16": 0, "bf16": 1, "fp32": 2, "fp8": 3}
ATTENTION_CODES = {"flash": 0, "unfused": 1, "flash2": 2}
FRAMEWORK_CODES = {"deepspeed": 0, "megatron": 1, "fsdp": 2}
OFFLOAD_CODES = {"none": 0, "optimizer": 1, "optimizer+params": 2}


class ModelParams(NamedTuple):
    """The model as the kernels see it (all float64; parameter counts per layer)."""

    n_layers: float
    d_model: float
    n_heads: float
    n_kv_heads: float  #: K/V heads of the attention (MLA: n_heads, the decompressed form)
    head_dim: float
    d_ff: float
    vocab_size: float
    n_experts: float
    top_k: float
    bytes_per_param: float
    bytes_per_kv: float
    qo_params: float  #: attention weights sharded over TP by query head (Q, O, MLA up-projections)
    kv_params: float  #: K and V projections, sharded by KV head (0 for MLA)
    ffn_params: float  #: all experts + router per layer
    expert_params: float  #: one expert
    router_params: float  #: the router (0 for a dense model)
    ffn_active_params: float  #: FFN weights one token touches
    norm_params: float
    n_active_params: float  #: parameters one token touches, whole model
    embedding_params: float  #: embedding + LM head (once if tied)
    gated_ffn: float  #: 1.0: three FFN matrices per expert (SwiGLU), 0.0: two (GeLU)
    ffn_width: float  #: active width of the first FFN matmul per token (top_k x d_ff for MoE)
    rep_params: float  #: attention weights every TP rank holds whole (MLA down-projections)
    mla: float  #: 1 for multi-head latent attention
    cache_heads: float  #: heads the KV cache shards over (n_kv_heads; MLA: 1, the shared latent)
    cache_width: float  #: cached elements per token, layer and cache head (K + V; MLA: latent + RoPE key)
    qk_dim: float  #: score width per query head, decompressed form (prefill, training)
    v_dim: float  #: value width per query head, decompressed form
    qk_dim_dec: float  #: score width per query head in decode (MLA absorbed: latent + RoPE key)
    v_dim_dec: float  #: value width per query head in decode (MLA absorbed: the latent)
    window: float  #: sliding-window span of a local layer, tokens (0: none)
    n_local: float  #: local (sliding-window) layers; the others are global
    moe_layers: float  #: layers with routed experts (0 for a dense model)
    shared_experts: float  #: always-active (shared) experts per MoE layer
    norms: float  #: norm layers per decoder layer (2 pre-norms; 1 in a parallel block)


class WorkloadParams(NamedTuple):
    """The workload (codes from :data:`MODE_CODES`, ...; training fields 0 for inference)."""

    mode: float
    batch: float
    s_q: float
    s_kv: float
    micro_batch: float
    recompute: float
    sequence_parallel: float
    zero_stage: float
    grad_bytes: float
    precision: float
    w_bytes: float  #: bytes per weight (0: the model's bytes_per_param)
    a_bytes: float  #: bytes per activation / message element (0: the model's bytes_per_param)
    kv_bytes: float  #: bytes per KV-cache element (0: the model's bytes_per_kv)
    act_code: float  #: matmul input dtype: 0 16-bit, 1 fp8, 2 int8, 3 fp4 (see ACT_CODES)
    cuda_graphs: float  #: 1 if decode steps replay CUDA graphs

    virtual_stages: float = 1.0  #: interleaved 1F1B chunks per device
    attention: float = 0.0  #: :data:`ATTENTION_CODES`
    framework: float = 0.0  #: :data:`FRAMEWORK_CODES`
    grad_overlap: float = 0.0  #: 1 if the DP gradient reduction overlaps backward
    offload: float = 0.0  #: :data:`OFFLOAD_CODES`
    mix_tokens: float = 0.0  #: decode: other requests' prompt tokens in the same pass
    mix_ctx: float = 0.0  #: decode: mean context those prompt tokens attend to
    moe_per_rank: float = 0.0  #: train, EP: 1 if the all-to-all sends one copy per rank
    moe_round_robin: float = 0.0  #: train, EP: 1 if token i routes to experts i·k … i·k+k−1
    moe_a2a_overlap: float = 0.0  #: train, EP: 1 if the all-to-all hides under compute
    expert_tp: float = 1.0  #: train, EP: expert tensor-parallel ranks per routed expert
    moe_imbalance: float = 1.0  #: EP: busiest EP rank's routed tokens / the mean
    tp_overlap: float = 0.0  #: train: 1 if the TP collectives hide under compute
    eager: float = 0.0  #: train: 1 if element-wise ops run unfused (PyTorch eager)
    eager_loss: float = 0.0  #: train: 1 if the loss is PyTorch's eager fp32 cross entropy
    #: inference: weight-only quantised weights (16-bit activations): 0 none, 1 INT8, 2 INT4
    wo_code: float = 0.0
    quant_group: float = 128.0  #: inference, weight-only: weights per scale group (0: per channel)
    quant_zeros: float = 0.0  #: inference, weight-only: :data:`QUANT_ZERO_CODES`
    host_step_ns: float = 0.0  #: inference: the serving loop's host time per step (ns)
    #: inference: a synchronous scheduler's host time per scheduled sequence per step (ns)
    host_seq_ns: float = 0.0
    mla_decode_ns: float = 0.0  #: decode: an MLA attention op's extra device time per layer (ns)


#: ``Workload.quant_zeros`` → code in :attr:`WorkloadParams.quant_zeros`
QUANT_ZERO_CODES = {"none": 0, "packed": 1, "fp16": 2}
#: weight dtype → :attr:`WorkloadParams.wo_code` when the activations are 16-bit
WO_CODES = {"int8": 1, "int4": 2}

#: Matmul-input dtype → code in :attr:`WorkloadParams.act_code` (NVFP4 and MXFP4 share
#: the FP4 rate, ``TopologyParams.fp4_ratio``).
ACT_CODES = {"": 0, "bf16": 0, "fp16": 0, "fp8": 1, "int8": 2, "fp4": 3, "mxfp4": 3}


class TopologyParams(NamedTuple):
    """Tier sizes and link latencies of the system."""

    pes_per_cube: float
    pes_per_sip: float
    n_devices: float
    alpha_intra_ns: float
    alpha_inter_ns: float
    alpha_intersip_ns: float
    nics_per_cube: float  #: scale-out NICs per cube (node)
    fp8_ratio: float  #: FP8 matmul peak / 16-bit peak (0: no FP8)
    int8_ratio: float  #: INT8 matmul peak / 16-bit peak (0: no INT8)
    fa2_ratio: float  #: FlashAttention-2-class core rate / the native kernel's
    mm_ratio: float  #: achievable matmul fraction of peak relative to Hopper's
    pcie_gbs: float  #: host link bandwidth per device (offload)
    host_mem_gb: float  #: host memory per device (offload)
    nvls: float = 0.0  #: 1 if an all-reduce inside one cube reduces in the switch (NVLS)
    fp4_ratio: float = 0.0  #: FP4 matmul peak / 16-bit peak (0: no FP4)
    #: base latency of a collective or send whose group crosses the cube (NCCL's model)
    coll_base_scaleout_ns: float = 0.0
    #: one in-cube step of a collective whose group crosses the cube (NCCL's NVLink latency)
    alpha_intra_scaleout_ns: float = 0.0
    #: weight-only INT4 / INT8 GEMMs' weight-streaming rate / a 16-bit GEMM's
    wo_int4_bw_ratio: float = 1.0
    wo_int8_bw_ratio: float = 1.0
    wo_mm_ratio: float = 1.0  #: weight-only GEMMs' matmul rate / the 16-bit one


class EfficiencyParams(NamedTuple):
    """Achievable fractions of peak and fixed costs (``compute`` and ``attention`` are
    the training factors for a training step; ``network`` is the intra tier's)."""

    compute: float
    memory: float
    network: float
    hbm_usable: float
    network_inter: float
    network_sip: float
    attention: float
    op_ns: float
    step_ns: float
    lowp: float  #: fraction of the FP8 / INT8 matmul peak (for ``lowp_mm`` / ``lowp_head``)
    overlap: float  #: share of an op's shorter side (compute or HBM) hidden under the longer
    seq_ns: float  #: host cost per scheduled sequence per inference step (overlapped)
    #: share of compute throughput an overlapped collective takes while it runs
    contention: float = 0.0


def pack_model(model) -> ModelParams:
    """Model spec → :class:`ModelParams`.

    Attention weights split three ways by how TP shards them: by query head (``qo_params``:
    Q, O and, for MLA, the per-head up-projections), by KV head (``kv_params``: K and V
    of ordinary attention) and not at all (``rep_params``: MLA's down-projections to the
    query and KV latents, which every rank computes in full, as vLLM's ``ReplicatedLinear``
    and Megatron-Core's duplicated ``linear_*_down_proj`` do).
    """
    d = model.d_model
    mla = bool(getattr(model, "is_mla", False))
    if mla:
        rep = d * (model.q_lora_rank + model.kv_lora_rank + model.qk_rope_head_dim)
        kvw = 0
        cache_heads, cache_width = 1, model.kv_lora_rank + model.qk_rope_head_dim
        qk_dec, v_dec = cache_width, model.kv_lora_rank
        kv_heads = model.n_heads  # the decompressed K and V have one head per query head
    else:
        rep = 0
        kvw = d * model.n_kv_heads * (model.head_dim + model.value_head_dim)  # no biases
        cache_heads = model.n_kv_heads
        cache_width = model.head_dim + model.value_head_dim
        qk_dec, v_dec = model.head_dim, model.value_head_dim
        kv_heads = model.n_kv_heads
    return ModelParams(
        n_layers=float(model.n_layers), d_model=float(d),
        n_heads=float(model.n_heads), n_kv_heads=float(kv_heads),
        head_dim=float(model.head_dim), d_ff=float(model.d_ff),
        vocab_size=float(model.vocab_size), n_experts=float(model.n_experts),
        top_k=float(model.top_k), bytes_per_param=float(model.bytes_per_param),
        bytes_per_kv=float(model.bytes_per_kv),
        qo_params=float(model.attn_params_per_layer - kvw - rep), kv_params=float(kvw),
        ffn_params=float(model.ffn_params_per_layer), expert_params=float(model.expert_params),
        router_params=float(model.ffn_params_per_layer - model.n_experts * model.expert_params),
        ffn_active_params=float(model.ffn_active_params_per_layer),
        norm_params=float(model.norm_params_per_layer),
        n_active_params=float(model.n_active_params),
        embedding_params=float(model.embedding_params),
        gated_ffn=1.0 if model.gated_ffn else 0.0,
        ffn_width=float(model.ffn_active_params_per_layer)
        / ((3.0 if model.gated_ffn else 2.0) * model.d_model),
        rep_params=float(rep), mla=1.0 if mla else 0.0,
        cache_heads=float(cache_heads), cache_width=float(cache_width),
        qk_dim=float(model.head_dim), v_dim=float(model.value_head_dim),
        qk_dim_dec=float(qk_dec), v_dim_dec=float(v_dec),
        window=float(model.sliding_window), n_local=float(model.n_local_layers),
        moe_layers=float(model.n_moe_layers),
        shared_experts=float(model.n_shared_experts if model.n_experts > 1 else 0),
        norms=float(model.n_norms_per_layer),
    )


def pack_workload(workload) -> WorkloadParams:
    """Workload spec → :class:`WorkloadParams`."""
    train = workload.mode == "train"
    return WorkloadParams(
        mode=float(MODE_CODES[workload.mode]), batch=float(workload.batch),
        s_q=float(workload.s_q), s_kv=float(workload.s_kv),
        micro_batch=float(workload.micro_batch) if train else 0.0,
        recompute=float(RECOMPUTE_CODES[workload.recompute]) if train else 0.0,
        sequence_parallel=(1.0 if workload.sequence_parallel else 0.0) if train else 0.0,
        zero_stage=float(workload.zero_stage) if train else 0.0,
        grad_bytes=float(workload.grad_bytes) if train else 0.0,
        precision=float(PRECISION_CODES[workload.precision]) if train else 0.0,
        # training: 1.0 marks FP8 primary weights / FP8-saved GEMM inputs, else 0
        w_bytes=(1.0 if workload.weight_dtype == "fp8" else 0.0) if train
        else workload.dtype_bytes("weight_dtype"),
        a_bytes=(1.0 if workload.act_dtype == "fp8" else 0.0) if train
        else workload.dtype_bytes("act_dtype"),
        kv_bytes=0.0 if train else workload.dtype_bytes("kv_dtype"),
        act_code=0.0 if train else float(ACT_CODES[workload.act_dtype]),
        cuda_graphs=1.0 if (workload.cuda_graphs and not train) else 0.0,
        virtual_stages=float(workload.virtual_stages) if train else 1.0,
        attention=float(ATTENTION_CODES[workload.attention]),
        framework=float(FRAMEWORK_CODES[workload.framework]) if train else 0.0,
        grad_overlap=(1.0 if workload.grad_overlap else 0.0) if train else 0.0,
        offload=float(OFFLOAD_CODES[workload.offload]) if train else 0.0,
        mix_tokens=float(workload.prefill_tokens), mix_ctx=float(workload.prefill_context),
        moe_per_rank=1.0 if (train and workload.moe_dispatch == "per_rank") else 0.0,
        moe_round_robin=1.0 if (train and workload.moe_routing == "round_robin") else 0.0,
        moe_a2a_overlap=1.0 if (train and workload.moe_a2a_overlap) else 0.0,
        expert_tp=float(workload.expert_tp) if train else 1.0,
        moe_imbalance=float(workload.moe_load_imbalance),
        tp_overlap=1.0 if (train and workload.tp_comm_overlap) else 0.0,
        eager=1.0 if (train and workload.eager_elementwise) else 0.0,
        eager_loss=1.0 if (train and workload.eager_loss) else 0.0,
        wo_code=0.0 if (train or ACT_CODES[workload.act_dtype] != 0)
        else float(WO_CODES.get(workload.weight_dtype, 0)),
        quant_group=float(workload.quant_group),
        quant_zeros=float(QUANT_ZERO_CODES[workload.quant_zeros]),
        host_step_ns=0.0 if train else float(workload.host_step_ns),
        host_seq_ns=0.0 if train else float(workload.host_seq_ns),
        mla_decode_ns=float(workload.mla_decode_ns) if workload.mode == "decode" else 0.0,
    )


def pack_topology(topology) -> TopologyParams:
    """Topology spec → :class:`TopologyParams`."""
    return TopologyParams(float(topology.pes_per_cube), float(topology.pes_per_sip),
                          float(topology.n_devices), float(topology.alpha_intra_ns),
                          float(topology.alpha_inter_ns), float(topology.alpha_intersip_ns),
                          float(topology.nics_per_cube or topology.pes_per_cube),
                          float(topology.fp8_ratio), float(topology.int8_ratio),
                          float(topology.fa2_ratio), float(topology.mm_ratio),
                          float(topology.pcie_gbs), float(topology.host_mem_gb),
                          1.0 if topology.nvls else 0.0, fp4_ratio=float(topology.fp4_ratio),
                          coll_base_scaleout_ns=float(topology.coll_base_scaleout_ns),
                          alpha_intra_scaleout_ns=float(topology.alpha_intra_scaleout_ns),
                          wo_int4_bw_ratio=float(topology.wo_int4_bw_ratio),
                          wo_int8_bw_ratio=float(topology.wo_int8_bw_ratio),
                          wo_mm_ratio=float(topology.wo_mm_ratio))


def pack_efficiency(eff, *, train: bool = False, hbm_ratio: float = 1.0) -> EfficiencyParams:
    """Efficiency spec → :class:`EfficiencyParams`; training uses ``train_compute``,
    ``train_attention`` and ``train_memory``; the HBM factor is scaled by the family's
    ``hbm_ratio`` (``Topology.hbm_ratio``). Unset factors fall back: ``network_inter``
    to ``network``,
    ``network_sip`` to ``network_inter`` (both scale-out), attention to the matmul factor."""
    compute = float(eff.train_compute if train else eff.compute)
    attention = eff.train_attention if train else eff.attention
    lowp = compute if (train or eff.lowp_compute is None) else float(eff.lowp_compute)
    net = float(eff.network)
    inter = net if eff.network_inter is None else float(eff.network_inter)
    return EfficiencyParams(
        compute, hbm_factor(eff, train) * float(hbm_ratio), net, float(eff.hbm_usable), inter,
        inter if eff.network_sip is None else float(eff.network_sip),
        compute if attention is None else float(attention),
        float(eff.op_latency_ns), float(eff.step_overhead_ns), lowp,
        float(eff.roofline_overlap), 0.0 if train else float(eff.seq_overhead_ns),
        float(eff.comm_contention))


def hbm_factor(eff, train: bool) -> float:
    """The HBM factor of a step: ``train_memory`` for training where set, else ``memory``
    (before the family's ``hbm_ratio``)."""
    if train and getattr(eff, "train_memory", None) is not None:
        return float(eff.train_memory)
    return float(eff.memory)


def field_attrs(name: str) -> dict[str, str]:
    """``{"units": ..., "long_name": ...}`` for a declared output, coefficient or knob."""
    for table in (OUTPUTS, COEFFICIENTS, KNOB_FIELDS):
        for f in table:
            if f.name == name:
                return {"units": f.units, "long_name": f.long_name}
    return {}
