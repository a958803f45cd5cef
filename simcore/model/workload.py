"""The workload declaration: :class:`Workload`, what a model runs (a prefill, a decode
step or a training step, its batch, context, precisions and parallel-runtime options).
"""

from __future__ import annotations

import numbers
from dataclasses import dataclass, field, fields
from typing import Any

from ..errors import SpecError
from .checks import Range, choice, flag, validate_table
from .runtime import DEFAULT_RUNTIME
from .runtime import resolve as resolve_runtime

__all__ = ["DTYPE_BYTES", "FP4_DTYPES", "MODES", "MOE_IMBALANCE_HINT", "MOE_ROUTING",
           "QUANT_ZEROS", "Workload", "check_moe_imbalance", "moe_imbalance_value"]

#: Workload modes.
MODES: tuple[str, ...] = ("prefill", "decode", "train")

#: Bytes per element of the inference dtypes (``Workload.weight_dtype`` etc.). The 4-bit
#: floating-point block formats count their scales: ``fp4`` is NVFP4, E2M1 values with one
#: FP8 (E4M3) scale per 16-value micro-block, 0.5 + 1/16 bytes (the per-tensor FP32 scale is
#: negligible); ``mxfp4`` is OCP MXFP4, E2M1 values with one power-of-two (E8M0) scale per
#: 32-value block, 0.5 + 1/32 bytes (NVIDIA Technical Blog, "Introducing NVFP4 for
#: Efficient and Accurate Low-Precision Inference", 2025-06-24, developer.nvidia.com/blog/
#: introducing-nvfp4-for-efficient-and-accurate-low-precision-inference, and its table
#: comparing FP4, MXFP4 and NVFP4; OCP Microscaling Formats (MX) Specification v1.0).
#: ``int4`` is weight-only (W4A16); its group scales (and zero points) are counted by the
#: inference kernels from ``Workload.quant_group`` / ``quant_zeros``, not here.
DTYPE_BYTES: dict[str, float] = {"bf16": 2.0, "fp16": 2.0, "fp8": 1.0, "int8": 1.0, "int4": 0.5,
                                 "fp4": 0.5625, "mxfp4": 0.53125}
#: Dtypes whose matmuls run at the family's FP4 rate (``Topology.fp4_ratio``) when they
#: are the activations' dtype; as weights alone they are weight-only (dequantised to the
#: activations' dtype, as gpt-oss's MXFP4 experts run on Hopper).
FP4_DTYPES: tuple[str, ...] = ("fp4", "mxfp4")

#: Named values of ``Workload.moe_load_imbalance`` (the busiest expert-parallel rank's
#: routed tokens over the mean), for ``--moe-imbalance NAME``. ``balanced`` (1, the
#: default) is what the validation's MoE sources run (force-balanced gates, token dropping
#: at capacity factor 1); the other two are measured: TensorRT-LLM's "Scaling Expert
#: Parallelism in TensorRT-LLM (Part 1)", Table 1 (NVIDIA/TensorRT-LLM
#: docs/source/blogs/tech_blog/blog4_Scaling_Expert_Parallelism_in_TensorRT-LLM.md
#: @1d263f15a979ef2902c60de3f6238bcc0952bb29): DeepSeek-R1 decode on 32 GB200, EP 32 with
#: attention DP, 256 sequences per rank, a machine-translation dataset, the imbalance ratio
#: (max - mean) / mean of the routed tokens per rank averaged over layers and iterations:
#: 1.564 without a load balancer (``no-eplb``: max / mean 2.564) and 0.109 with EPLB's
#: redundant experts (9 slots a rank; ``eplb``: 1.109). Measured at 8 experts a rank: a rank
#: holding more experts averages its hot ones with cold ones, so at EP 8 of 256 experts the
#: no-EPLB figure overstates the skew (no measurement covers that regime).
MOE_ROUTING: dict[str, float] = {"balanced": 1.0, "eplb": 1.109, "no-eplb": 2.564}
#: what a bad ``--moe-imbalance`` value is told to pass instead
MOE_IMBALANCE_HINT = (f"pass {', '.join(MOE_ROUTING)} or a number from 1 to 1024 (the busiest "
                      "EP rank's routed tokens over the mean)")


_WORKLOAD_RANGES: dict[str, Range] = {
    "batch": Range(1, 1e7, "(sequences per step)"),
    "s_kv": Range(1, 1e8, "tokens (context length)"),
    "s_q": Range(0, 1e8, "tokens (query tokens per sequence; 0 = by mode)"),
    "micro_batch": Range(1, 1e7, "(sequences per micro-batch)"),
    "zero_stage": Range(0, 3, "(ZeRO stage)"),
    "grad_bytes": Range(1, 8, "bytes (per gradient element)"),
    "virtual_stages": Range(1, 1024, "(interleaved pipeline chunks per device)"),
    "prefill_tokens": Range(0, 1e9, "tokens (other requests' prompt tokens per decode step)"),
    "prefill_context": Range(0, 1e8, "tokens (mean context of those prompt tokens)"),
    "expert_tp": Range(1, 1024, "(expert tensor-parallel ranks)"),
    "moe_load_imbalance": Range(1, 1024, "(busiest EP rank's routed tokens / the mean)",
                                integer=False),
    "host_step_ns": Range(0, 1e10, "ns (serving loop's host time per step)", integer=False),
    "host_seq_ns": Range(0, 1e8, "ns (serving loop's host time per sequence per step)",
                         integer=False),
    "mla_decode_ns": Range(0, 1e7, "ns (MLA decode attention's extra time per layer)", integer=False),
    "quant_group": Range(0, 1e6, "(weights per scale group; 0 = one per output channel)"),
}
#: Zero points of a weight-only INT4 / INT8 format, per scale group: ``Workload.quant_zeros``
#: -> bytes per group beside the 16-bit scale ("packed": one at the weight's own width)
QUANT_ZEROS: tuple[str, ...] = ("none", "packed", "fp16")


@dataclass(frozen=True)
class Workload:
    """What the model runs.

    Parameters
    ----------
    mode : {"prefill", "decode", "train"}
    batch : int
        Sequences per step (global batch), 1 … 10⁷.
    s_q : int
        Query tokens per sequence this step (prompt length for prefill, 1 for decode).
        Defaults to ``s_kv`` for prefill/train and 1 for decode.
    s_kv : int
        Context length the queries attend to (``seq_len`` for training), 1 … 10⁸ tokens.
    micro_batch : int
        Training only: sequences per micro-batch per data-parallel replica; the global
        ``batch`` must be a multiple of ``micro_batch · dp``.
    recompute : {"none", "selective", "full", "op"}
        Training only: activation recomputation — Megatron's ``"selective"`` / ``"full"``
        (Korthikanti et al. 2022), or ``"op"``: PyTorch per-operator selective
        checkpointing as torchtitan applies it (matmul, attention and reduce-scatter
        outputs kept except every second matmul of a layer; the rest recomputed).
    sequence_parallel : bool
        Training only: Megatron sequence parallelism for the TP group.
    zero_stage : int
        Training only: ZeRO stage 0–3 for model-state memory and DP communication.
    grad_bytes : int
        Training only: bytes per gradient element in the data-parallel reduction (and,
        under ``framework="megatron"``, in its gradient buffer: 4 for fp32
        ``grad_reduce_in_fp32``, 2 for bf16).
    precision : {"fp16", "bf16", "fp32", "fp8"}
        Training only: selects DeepSpeed's model-state formula (fp16: 20N at ZeRO-0;
        bf16/fp32/fp8: 16N). fp32 also halves the usable matmul peak; fp8 runs the
        matmuls (projections, FFN) at the family's ``fp8_ratio`` x the 16-bit peak
        (Transformer-Engine style: bf16 weights and attention, fp8 GEMMs).
    weight_dtype, act_dtype, kv_dtype : {"", "bf16", "fp16", "fp8", "int8", "int4", "fp4", "mxfp4"}
        Inference: storage dtype of the weights, dtype of activations / matmul
        inputs (and of the EP dispatch), and of the KV cache. The other messages (TP
        all-reduces, pipeline sends, CP and split-K traffic, the EP combine) carry GEMM
        and attention outputs, 16-bit when the inputs are fp8 / int8. Training,
        with ``precision="fp8"`` only: ``weight_dtype="fp8"`` keeps the parameters
        themselves in FP8 (Megatron's ``--fp8-param-gather``: ``framework="megatron"``
        with its distributed optimizer, ``zero_stage=1``, no offload): 1 byte per
        parameter in the model states and in every parameter all-gather (Transformer
        Engine's cached FP8 weight transposes are not counted);
        ``act_dtype="fp8"`` saves the FP8 copies of the GEMM inputs for the backward
        (Transformer Engine's ``Linear``), 1 byte instead of 2 for the QKV, FC1, FC2 and
        output-projection inputs: Korthikanti et al.'s 34 bytes per token and hidden
        unit become 29 with a flash core (which keeps its 16-bit output for its own
        backward as well), 27 unfused; not with ``recompute="op"``. ``""`` keeps them
        16-bit (torchao's float8 training saves the high-precision inputs).
        ``kv_dtype`` is inference-only. ``""`` keeps
        the model's ``bytes_per_param`` / ``bytes_per_kv`` at the 16-bit rate. ``int4``
        is weight-only (W4A16). ``act_dtype`` ``"fp8"`` / ``"int8"`` runs the matmuls at
        the family's ``Topology.fp8_ratio`` / ``int8_ratio`` times the 16-bit peak,
        ``"fp4"`` (NVFP4) / ``"mxfp4"`` at its ``fp4_ratio`` (Blackwell; a family without
        an FP4 rate refuses it), with the scale bytes of :data:`DTYPE_BYTES`; as
        ``weight_dtype`` alone they are weight-only (dequantised, valid on any family).
    cuda_graphs : bool
        Decode only: the steps replay CUDA graphs (as vLLM, SGLang and TensorRT-LLM serve),
        so no kernel pays the host's launch time (``kernels.inference.LAUNCH_NS``, 5 us per
        kernel launched from the host), and the framework's per-step floor
        (``Efficiency.step_overhead_ns``) drops to a quarter. Ignored by prefill and
        training steps, which launch every kernel. Default False here; the CLI and the
        app replay graphs in decode unless ``--eager`` (as every serving framework does,
        :mod:`simcore.studies.assumptions`), while the library keeps False because the
        validation rows and the golden numbers are pinned on it. A ``runtime`` that
        serves with CUDA graphs turns it on (up to its capture limit).
    virtual_stages : int
        Training only: virtual pipeline stages per device (interleaved 1F1B; bubble
        (p-1)/(v·m)); 1 = plain 1F1B.
    attention : {"flash", "flash2", "unfused"}
        Training: FlashAttention-style core (no s² activations, backward at 2.5x
        the forward FLOPs) or the unfused core that stores the scores. ``"flash"`` is the
        family's native fused kernel (cuDNN / Transformer Engine / FlashAttention-3 on
        Hopper); ``"flash2"`` a FlashAttention-2-class kernel (the ``flash-attn`` 2
        package, PyTorch SDPA's flash backend), which on a family with
        ``Topology.fa2_ratio`` < 1 runs at that fraction of the native kernel's rate.
        Inference reads ``"flash2"`` the same way (the attention core of prefill and
        decode steps at ``fa2_ratio`` of the native FlashAttention-3 / TensorRT-LLM /
        FlashInfer class kernel: vLLM 0.x's flash-attn 2 on Hopper) and prices
        ``"unfused"`` like ``"flash"``.
    framework : {"deepspeed", "megatron", "fsdp"}
        Training only: whose model-state formula and defaults apply. ``deepspeed``:
        DeepSpeed's per-stage formulas (ZeRO-3 also holds the fully gathered largest
        layer); ``megatron``: 16-bit (or FP8) parameters + ``grad_bytes`` gradients + 12
        bytes of fp32 master weights and Adam states per parameter, the last /d with the
        distributed optimizer (``zero_stage=1``): 18 B/param, 6 + 12/d with fp32
        gradients (with bf16 ones the optimizer's transient fp32 copy of its gradient
        shard, 4/d, lives only during the step, when activations are freed, and is not
        counted); ``fsdp``: full sharding (``zero_stage`` 3), 16/d + the gathered unit.
    overlap_grad_reduce : bool or None
        Training only: data-parallel gradient reduction bucketed and overlapped with
        the backward pass (DeepSpeed ``overlap_comm``, Megatron ``overlap_grad_reduce``,
        FSDP). None = the framework's default (DeepSpeed: on for ZeRO-3 only; Megatron:
        off, its argument default; FSDP: on).
    moe_dispatch : {"per_expert", "per_rank"}
        Training only, MoE with ``ep`` > 1: what the dispatch / combine all-to-all sends
        per token. ``"per_expert"``: one copy per routed expert (Megatron-Core's
        ``alltoall`` dispatcher permutes tokens by expert before the exchange);
        ``"per_rank"``: one copy per destination rank however many of its experts the
        token routes to (DeepEP, Megatron's ``flex`` dispatcher), i.e. under uniform
        routing ``ep·(1 − C(E − E/ep, k) / C(E, k))`` copies instead of ``k``; across
        nodes DeepEP sends a token once per destination node over the scale-out tier and
        forwards it inside that node over the scale-up tier (DeepSeek-V3 report §3.2.2),
        so the scale-out copies are the distinct remote nodes, not ranks.
    moe_routing : {"random", "round_robin"}
        Training only, MoE with ``ep`` > 1 and ``moe_dispatch="per_rank"``: which experts
        a token routes to, with experts placed contiguously over the EP ranks.
        ``"random"``: k distinct experts uniformly at random; ``"round_robin"``: token i
        of a rank takes experts i·k … i·k + k − 1 (mod E), NeMo Automodel's
        ``FakeBalancedGate`` that its published benchmarks run with (Qwen3-30B-A3B at EP 8:
        one rank per token; DeepSeek-V3 at EP 64: two ranks, on one node).
    moe_a2a_overlap : bool
        Training only, MoE with ``ep`` > 1: the dispatch / combine all-to-all of one
        micro-batch runs under the compute of another (Megatron-Core's
        ``overlap_moe_expert_parallel_comm``, Megatron-Bridge's ``moe_a2a_overlap``), so
        only what outlasts the layer's compute is exposed.
    expert_tp : int
        Training only, MoE with ``ep`` > 1: expert tensor parallelism (Megatron-Core's
        ``--expert-tensor-parallel-size``): each routed expert's GEMMs are sharded over
        ``expert_tp`` ranks. The stage's TP x CP x DP devices fold into expert TP
        (innermost) x EP x expert-data-parallel ``tp·cp·dp / (expert_tp·ep)`` (Megatron's
        MoE parallel folding); ZeRO / the distributed optimizer / FSDP shard and reduce the
        expert states over that expert-data-parallel group. With ``expert_tp`` > 1 the
        alltoall dispatcher all-gathers the dispatched tokens over the expert-TP group
        after the EP all-to-all and reduce-scatters them before the combine
        (``MoEAlltoAllTokenDispatcher``: "A2A(EP) ... AG(TP)" / "RS(TP) ... A2A(EP)").
        Default 1, Megatron-Core's default for MoE (old Megatron-LM sharded experts over
        the attention TP group: pass ``expert_tp=tp`` for that). A layout where
        ``expert_tp·ep`` does not divide ``tp·cp·dp`` is masked. With ``ep`` = 1 the
        experts shard over TP like a dense FFN and ``expert_tp`` must be 1 or ``tp``.
    moe_load_imbalance : float
        MoE with ``ep`` > 1: the busiest EP rank's routed token copies over the mean
        (≥ 1). The step waits for that rank: its expert GEMMs, its dispatch / combine
        traffic and (training) its expert-TP gathers scale by this factor; the weights it
        reads do not (inference counts the distinct experts its tokens touch from uniform
        routing's statistics). 1 (the default) is balanced routing, as the published
        benchmarks force it (Megatron-Bridge's "we force-balance the token distribution
        among experts", Automodel's ``FakeBalancedGate``); a token-dropping run with
        capacity factor c caps it at c (Switch Transformer / Megatron-Core
        ``--moe-expert-capacity-factor``). :data:`MOE_ROUTING` names the measured values
        (TensorRT-LLM's DeepSeek-R1 EP 32: 2.564 without a load balancer, 1.109 with EPLB).
    tp_comm_overlap : bool
        Training only: tensor-parallel communication overlap (Megatron's
        ``--tp-comm-overlap`` with Transformer Engine's userbuffers): the TP all-gathers
        and reduce-scatters run pipelined with the GEMMs they feed, so, like the
        overlapped collectives above, only what outlasts the layer's compute is exposed
        (the window is the whole layer's compute: an upper bound on what hides). Needs
        ``sequence_parallel``. The FFN's TP x CP all-reduce of ``ffn_shard_scope="TP+CP"``
        layouts stays blocking. torchtitan's AsyncTP hides far less (its table measures
        +9-10% over vanilla TP where full hiding predicts +18-50%); the validation leaves
        it off for those rows.
    eager_elementwise : bool
        Training only: the element-wise ops run as PyTorch eager kernels (no
        ``torch.compile``, no fused kernels), as torchtitan's Llama does without
        compilation: each RMSNorm moves 36 bytes per element (upcast, square, mean,
        scale, downcast, weight) where a fused kernel moves 4, RoPE 20 instead of 4, the
        SwiGLU product 10 instead of 6 per FFN element. Default False: fused (Megatron /
        Transformer Engine, or compiled).
    eager_loss : bool
        Training only: the loss is PyTorch's eager ``cross_entropy(logits.float())``, as
        torchtitan ran it until it compiled the loss (commented out at 9dec370,
        ``train.py``: "compiling loss function causes CUDA errors"; compiled with
        ``training.compile`` by e7c0cae, ``torchtitan/components/loss.py``). Its peak,
        in the backward of the loss while every activation is still held, is 12 bytes per
        logit element (the fp32 log-softmax kept for the backward, and the fp32 gradients
        of its output and its input) where a fused or compiled loss (Megatron's
        vocab-parallel cross entropy, a compiled one) keeps 4 (the fp32 softmax). Memory
        only; ignored by inference workloads, as the other training-only flags are.
        Default False.
    offload : {"none", "optimizer", "optimizer+params"}
        Training only: ZeRO-Offload of the optimizer states (and ZeRO-Infinity of the
        parameters, ZeRO-3 only) to host memory over PCIe.
    prefill_tokens : int
        Decode only: prompt tokens of other requests processed in the same forward pass
        as the ``batch`` decode tokens (continuous / in-flight batching, prompts chunked
        into decode steps). In steady state a server at concurrency ``c`` with prompts of
        ``isl`` and ``osl`` output tokens processes about ``c·isl/osl`` of them per step;
        :meth:`served` sets it. 0 = a pure decode step.
    prefill_context : int
        Decode only: mean number of earlier tokens each of those prompt tokens attends
        to (causal: about ``isl/2``). Default ``s_kv // 2`` when ``prefill_tokens > 0``.
    runtime : str
        The software stack the step runs under, one of
        :data:`simcore.model.runtime.RUNTIMES` (``"vllm"``, ``"trtllm"``, ``"megatron"``,
        ``"torchtitan"``, ``"hf-eager"``, ...). Its profile sets the stack settings the
        caller leaves unset: ``cuda_graphs``, ``host_step_ns``, ``host_seq_ns``, ``attention``,
        ``eager_elementwise``,
        ``eager_loss``, ``framework``, ``zero_stage``, ``overlap_grad_reduce``,
        ``grad_bytes``, ``moe_dispatch``, ``moe_routing``, ``moe_a2a_overlap``,
        ``tp_comm_overlap`` (and, in FP8 training, Transformer Engine's FP8
        ``act_dtype`` / ``weight_dtype``). A field passed explicitly overrides the
        profile (``None``, the default of those fields, means "the runtime's";
        ``overlap_grad_reduce=None`` under a runtime that sets none is the framework's
        default). :meth:`with_runtime` switches stacks and keeps explicit settings, also
        those passed with it; :func:`dataclasses.replace` re-resolves the values the
        profile set too, but cannot tell an explicit value equal to the old profile's
        from a carried-over one (it re-resolves it). A
        mode or precision the stack does not run is refused. ``""`` (default) is
        simcore's library default, today's values of those fields (eager decode, fused
        kernels, DeepSpeed's formulas), on which the validation and golden numbers are
        pinned.
    host_step_ns : float
        Inference: host time per step of the serving loop that does not overlap the
        device's step (a Python engine loop that schedules, prepares the inputs and
        processes the sampled tokens between steps: vLLM 0.x without multi-step
        scheduling), added to every step (``kernels.inference.step_overheads``). 0 (default):
        the loop overlaps the device (CUDA graphs, overlap schedulers), today's pricing.
        A runtime profile sets it (None, the default: the runtime's, 0 for the library
        default): ``runtime="vllm-0.5"`` adds the 4 ms per decode step that
        vllm-project/vllm issue #6854 measures in vLLM 0.5.
    host_seq_ns : float
        Inference: host time per scheduled sequence per step of an engine that schedules
        synchronously (between the device's steps), added to every step times the
        replica's sequences (``kernels.inference.step_overheads``); where the engine
        schedules one step ahead its per-sequence work runs under the device's step
        instead (``Efficiency.seq_overhead_ns``). A runtime profile sets it (None, the
        default: the runtime's, 0 for the library default): ``runtime="vllm-0.10"`` adds
        the 12.8 us per sequence that vLLM V1's synchronous scheduling exposes (vLLM PR
        #23914).
    mla_decode_ns : float
        Decode of an MLA model: device time per layer the stack's MLA attention op takes
        beyond a GQA decode attention op (``kernels.inference.mla_decode_floor``). A
        runtime profile sets it (None, the default: the runtime's; ``runtime="trtllm"``:
        18.4 us, measured; 0 for the library default and the stacks whose MLA kernels no
        cited measurement covers).
    quant_group : int
        Inference, ``weight_dtype`` ``"int4"`` / ``"int8"`` with 16-bit activations
        (weight-only, W4A16 / W8A16): weights per scale group along the input dimension;
        each group stores a 16-bit scale (and ``quant_zeros``' zero point), so the weights
        take ``w + (2 + z) / quant_group`` bytes each. Default 128 (AWQ and GPTQ's
        published group size); 0 = one scale per output channel (TensorRT-LLM's and
        gpt-fast's INT8 weight-only), negligible.
    quant_zeros : {"none", "packed", "fp16"}
        Zero points of that format: ``"none"`` (symmetric: GPTQ ``sym=True``, Marlin),
        ``"packed"`` (one per group at the weight's width: AWQ, GPTQ asymmetric),
        ``"fp16"`` (a 16-bit one beside each scale: torchao / gpt-fast's int4 ``tinygemm``
        layout).

    Examples
    --------
    >>> Workload("decode", s_kv=131072).s_q
    1
    >>> Workload("prefill", s_kv=8192).s_q
    8192
    """

    mode: str
    batch: int = 1
    s_kv: int = 4096
    s_q: int = 0
    micro_batch: int = 1
    recompute: str = "selective"
    sequence_parallel: bool = True
    zero_stage: int = None  # type: ignore[assignment]  # None: the runtime's
    grad_bytes: int = None  # type: ignore[assignment]
    precision: str = "fp16"
    weight_dtype: str = ""
    act_dtype: str = ""
    kv_dtype: str = ""
    cuda_graphs: bool = None  # type: ignore[assignment]
    virtual_stages: int = 1
    attention: str = None  # type: ignore[assignment]
    framework: str = None  # type: ignore[assignment]
    overlap_grad_reduce: bool | None = None
    offload: str = "none"
    prefill_tokens: int = 0
    prefill_context: int = 0
    moe_dispatch: str = None  # type: ignore[assignment]
    moe_routing: str = None  # type: ignore[assignment]
    moe_a2a_overlap: bool = None  # type: ignore[assignment]
    expert_tp: int = 1
    moe_load_imbalance: float = 1.0
    tp_comm_overlap: bool = None  # type: ignore[assignment]
    eager_elementwise: bool = None  # type: ignore[assignment]
    eager_loss: bool = None  # type: ignore[assignment]
    host_step_ns: float = None  # type: ignore[assignment]  # None: the runtime's
    host_seq_ns: float = None  # type: ignore[assignment]  # None: the runtime's
    mla_decode_ns: float = None  # type: ignore[assignment]  # None: the runtime's
    quant_group: int = 128
    quant_zeros: str = "none"
    runtime: str = DEFAULT_RUNTIME
    #: (field, value) pairs the runtime profile set (neither compared nor shown): what
    #: dataclasses.replace carries over from them is re-resolved, not taken as explicit
    _profiled: tuple[tuple[str, Any], ...] = field(default=(), repr=False, compare=False)

    def __post_init__(self) -> None:
        choice("Workload", "mode", self.mode, MODES, f"one of {list(MODES)}")
        # the runtime profile fills the stack settings left unset (simcore.model.runtime)
        object.__setattr__(self, "_profiled", resolve_runtime(self, dict(self._profiled)))
        choice("Workload", "recompute", self.recompute, ("none", "selective", "full", "op"),
                "'none', 'selective', 'full' or 'op'")
        choice("Workload", "precision", self.precision, ("fp16", "bf16", "fp32", "fp8"),
                "'fp16', 'bf16', 'fp32' or 'fp8'")
        object.__setattr__(self, "sequence_parallel",
                           flag("Workload", "sequence_parallel", self.sequence_parallel))
        object.__setattr__(self, "cuda_graphs", flag("Workload", "cuda_graphs", self.cuda_graphs))
        for f in ("weight_dtype", "act_dtype", "kv_dtype"):
            choice("Workload", f, getattr(self, f), ("", *DTYPE_BYTES),
                    f"one of {list(DTYPE_BYTES)} or '' for the model's own precision")
        if self.mode == "train":
            self._check_train_dtypes()
        if self.act_dtype == "int4":
            raise SpecError("Workload.act_dtype='int4' is not supported (int4 is weight-only, "
                            "W4A16); pass weight_dtype='int4' with act_dtype='bf16' or 'fp16'")
        choice("Workload", "attention", self.attention, ("flash", "flash2", "unfused"),
                "'flash', 'flash2' or 'unfused'")
        choice("Workload", "quant_zeros", self.quant_zeros, QUANT_ZEROS,
                "'none' (symmetric), 'packed' (AWQ / GPTQ) or 'fp16' (tinygemm)")
        choice("Workload", "framework", self.framework, ("deepspeed", "megatron", "fsdp"),
                "'deepspeed', 'megatron' or 'fsdp'")
        choice("Workload", "offload", self.offload, ("none", "optimizer", "optimizer+params"),
                "'none', 'optimizer' or 'optimizer+params'")
        choice("Workload", "moe_dispatch", self.moe_dispatch, ("per_expert", "per_rank"),
                "'per_expert' (Megatron's alltoall dispatcher) or 'per_rank' (DeepEP)")
        choice("Workload", "moe_routing", self.moe_routing, ("random", "round_robin"),
                "'random' or 'round_robin' (Automodel's FakeBalancedGate)")
        object.__setattr__(self, "moe_a2a_overlap",
                           flag("Workload", "moe_a2a_overlap", self.moe_a2a_overlap))
        object.__setattr__(self, "tp_comm_overlap",
                           flag("Workload", "tp_comm_overlap", self.tp_comm_overlap))
        object.__setattr__(self, "eager_elementwise",
                           flag("Workload", "eager_elementwise", self.eager_elementwise))
        object.__setattr__(self, "eager_loss", flag("Workload", "eager_loss", self.eager_loss))
        if self.tp_comm_overlap and not self.sequence_parallel:
            raise SpecError("Workload.tp_comm_overlap overlaps the sequence-parallel "
                            "all-gathers / reduce-scatters with the GEMMs: pass "
                            "sequence_parallel=True (or tp_comm_overlap=False)")
        if self.overlap_grad_reduce is not None:
            object.__setattr__(self, "overlap_grad_reduce",
                               flag("Workload", "overlap_grad_reduce", self.overlap_grad_reduce))
        if self.framework == "megatron" and self.zero_stage > 1:
            raise SpecError(
                f"Workload(framework='megatron') shards at most the optimizer (zero_stage=1, "
                f"the distributed optimizer), got zero_stage={self.zero_stage}; pass "
                "framework='fsdp' or 'deepspeed' for ZeRO-2/3")
        if self.framework == "fsdp" and self.zero_stage != 3:
            raise SpecError(f"Workload(framework='fsdp') is full sharding: pass zero_stage=3, "
                            f"got {self.zero_stage}")
        if self.offload != "none" and self.zero_stage == 0:
            raise SpecError("Workload.offload needs ZeRO (zero_stage >= 1): the offloaded "
                            "optimizer step runs on each rank's shard")
        if self.offload == "optimizer+params" and self.zero_stage != 3:
            raise SpecError("Workload(offload='optimizer+params') offloads partitioned "
                            f"parameters: pass zero_stage=3, got {self.zero_stage}")
        validate_table(self, _WORKLOAD_RANGES)
        if (self.prefill_tokens or self.prefill_context) and self.mode != "decode":
            raise SpecError(
                f"Workload.prefill_tokens / prefill_context describe prompts mixed into decode "
                f"steps; they need mode='decode', got mode={self.mode!r} (a prefill is "
                "Workload('prefill', batch=..., s_kv=prompt length))")
        if self.prefill_tokens and not self.prefill_context:
            object.__setattr__(self, "prefill_context", max(self.s_kv // 2, 1))
        if self.s_q == 0:
            object.__setattr__(self, "s_q", 1 if self.mode == "decode" else self.s_kv)
        if self.s_q > self.s_kv:
            raise SpecError(
                f"Workload.s_q={self.s_q} exceeds Workload.s_kv={self.s_kv}; queries attend to "
                "at most the context they are part of, so pass s_q <= s_kv"
            )
        if self.mode == "decode" and self.s_q != 1:
            raise SpecError(f"Workload.s_q must be 1 for mode='decode', got {self.s_q}")
        if self.mode == "train" and self.s_q != self.s_kv:
            raise SpecError(
                f"Workload.s_q must equal s_kv (the sequence length) for mode='train', got "
                f"s_q={self.s_q}, s_kv={self.s_kv}"
            )
        if self.mode == "train" and self.batch % self.micro_batch:
            raise SpecError(
                f"Workload.batch={self.batch} (global batch) must be a multiple of "
                f"micro_batch={self.micro_batch}"
            )

    def _check_train_dtypes(self) -> None:
        """Training reads ``weight_dtype`` / ``act_dtype`` as Transformer Engine's FP8
        storage options (see the class docstring); anything else is refused."""
        if self.kv_dtype:
            raise SpecError(f"Workload.kv_dtype={self.kv_dtype!r} is inference-only (training "
                            "keeps no KV cache); pass kv_dtype='' for mode='train'")
        for f, what in (("weight_dtype", "FP8 primary weights (Megatron --fp8-param-gather)"),
                        ("act_dtype", "FP8 copies of the GEMM inputs saved for backward "
                                      "(Transformer Engine)")):
            v = getattr(self, f)
            if v in ("", "bf16", "fp16"):
                continue
            if v != "fp8":
                raise SpecError(f"Workload.{f}={v!r} is not a training option: pass '' (16-bit) "
                                f"or 'fp8' ({what}) for mode='train'")
            if self.precision != "fp8":
                raise SpecError(f"Workload.{f}='fp8' ({what}) needs FP8 GEMMs: pass "
                                f"precision='fp8', got precision={self.precision!r}")
        if self.weight_dtype == "fp8" and (self.framework != "megatron"
                                           or self.zero_stage != 1 or self.offload != "none"):
            raise SpecError("Workload.weight_dtype='fp8' in training is Megatron's FP8 primary "
                            "weights (--fp8-param-gather, which needs the distributed "
                            "optimizer): pass framework='megatron', zero_stage=1, "
                            f"offload='none', got framework={self.framework!r}, "
                            f"zero_stage={self.zero_stage}, offload={self.offload!r}")
        if self.act_dtype == "fp8" and self.recompute == "op":
            raise SpecError("Workload.act_dtype='fp8' (Transformer Engine's FP8-saved GEMM "
                            "inputs) applies to Korthikanti et al.'s activation count, not to "
                            "recompute='op' (torchtitan's per-op checkpointing, which keeps "
                            "16-bit tensors): pass act_dtype='' or another recompute")

    @property
    def seq_len(self) -> int:
        return self.s_kv

    @property
    def grad_overlap(self) -> bool:
        """Whether the gradient reduction overlaps backward (the framework's default
        where ``overlap_grad_reduce`` is None)."""
        if self.overlap_grad_reduce is not None:
            return bool(self.overlap_grad_reduce)
        if self.framework == "fsdp":
            return True
        if self.framework == "megatron":
            return False
        return self.zero_stage == 3

    def dtype_bytes(self, field_name: str) -> float:
        """Bytes per element of ``weight_dtype``, ``act_dtype`` or ``kv_dtype`` (0 = the
        model's own precision)."""
        v = getattr(self, field_name)
        return DTYPE_BYTES[v] if v else 0.0

    def with_runtime(self, runtime: str, **explicit: Any) -> Workload:
        """This workload under another runtime profile: what the old profile set is
        resolved again from the new one; the settings given explicitly, before or in
        ``explicit``, are kept (even where they equal the old profile's value).

        Examples
        --------
        >>> w = Workload("decode", runtime="vllm")
        >>> w.with_runtime("hf-eager").cuda_graphs, w.with_runtime("hf-eager",
        ...                                                       cuda_graphs=True).cuda_graphs
        (False, True)
        """
        kw = {f.name: getattr(self, f.name) for f in fields(self) if f.name != "_profiled"}
        for name, _ in self._profiled:  # back to "the runtime's"
            kw[name] = "" if name in ("weight_dtype", "act_dtype") else None
        kw.update(explicit, runtime=runtime)
        return type(self)(**kw)

    @classmethod
    def served(cls, *, concurrency: int, isl: int, osl: int, **kw: Any) -> Workload:
        """The average decode step of a server in steady state (continuous batching).

        ``concurrency`` requests are in flight, each with an ``isl``-token prompt and
        ``osl`` output tokens. Each step decodes one token for every request at the mean
        context ``isl + osl/2``; meanwhile every slot turns over once per ``osl`` steps,
        so the same forward pass also processes about ``concurrency·isl/osl`` prompt
        tokens of newly admitted requests (mean causal context ``isl/2``). Its latency is
        the time per output token a client sees; queueing before the first token is not
        part of it.

        Examples
        --------
        >>> w = Workload.served(concurrency=64, isl=8192, osl=1024)
        >>> w.batch, w.s_kv, w.prefill_tokens, w.prefill_context
        (64, 8704, 512, 4096)
        """
        for name, v in (("concurrency", concurrency), ("isl", isl), ("osl", osl)):
            if isinstance(v, bool) or not isinstance(v, numbers.Integral) or v < 1:
                raise SpecError(f"Workload.served: {name} must be a positive integer, got {v!r}")
        return cls("decode", batch=int(concurrency), s_kv=int(isl) + int(osl) // 2,
                   prefill_tokens=int(round(concurrency * isl / osl)),
                   prefill_context=max(int(isl) // 2, 1), **kw)

    @classmethod
    def served_steps(cls, *, concurrency: int, isl: int, osl: int, chunk_tokens: int = 0,
                     **kw: Any) -> tuple[tuple[Workload, float], ...]:
        """The steady-state steps of an in-flight-batching server, with the share of steps
        each takes: their weighted latency is the mean time per output token.

        As :meth:`served`, ``concurrency`` requests are in flight and about
        ``T = concurrency·isl/osl`` prompt tokens arrive per step. A scheduler does not
        spread them thinly over every step: it runs a newly admitted request's prompt in
        one forward pass together with the decode batch (TensorRT-LLM's in-flight batching
        with chunked context off, its default), or in chunks of its token budget
        ``chunk_tokens`` (chunked prefill; 0 = whole prompts). So a share ``f = T / C`` of
        the steps carries a chunk of ``C = min(isl, chunk_tokens or isl)`` prompt tokens
        (mean causal context ``isl/2``) and the rest are pure decode steps. Where prompts
        arrive faster than one chunk per step (``T >= C``), every step carries ``T`` tokens:
        the single step of :meth:`served`.

        The difference matters most for a sparse mixture of experts: the ``T`` tokens of
        a thinly spread prompt route to many experts every step (36 prompt tokens of a
        top-8-of-256 model touch 68% of a layer's experts, the decode batch of 4 alone
        12%), while a whole prompt reads the experts once per ``1/f`` steps.

        Examples
        --------
        >>> steps = Workload.served_steps(concurrency=4, isl=8192, osl=1024)
        >>> [(w.prefill_tokens, round(f, 4)) for w, f in steps]
        [(0, 0.9961), (8192, 0.0039)]
        >>> [(w.prefill_tokens, f) for w, f in Workload.served_steps(concurrency=64, isl=100,
        ...                                                            osl=10)]
        [(640, 1.0)]
        """
        one = cls.served(concurrency=concurrency, isl=isl, osl=osl, **kw)
        if isinstance(chunk_tokens, bool) or not isinstance(chunk_tokens, numbers.Integral) \
                or chunk_tokens < 0:
            raise SpecError("Workload.served_steps: chunk_tokens must be an integer >= 0 (0 = "
                            f"whole prompts), got {chunk_tokens!r}")
        chunk = min(int(isl), int(chunk_tokens) or int(isl))
        tokens = concurrency * isl / osl
        if tokens >= chunk:
            return ((one, 1.0),)
        share = tokens / chunk
        decode = cls("decode", batch=int(concurrency), s_kv=one.s_kv, **kw)
        mixed = cls("decode", batch=int(concurrency), s_kv=one.s_kv, prefill_tokens=chunk,
                    prefill_context=one.prefill_context, **kw)
        return ((decode, 1.0 - share), (mixed, share))


def moe_imbalance_value(text: Any) -> float:
    """A ``--moe-imbalance`` value: a :data:`MOE_ROUTING` name or a number ≥ 1.

    Examples
    --------
    >>> moe_imbalance_value("no-eplb"), moe_imbalance_value("1.3")
    (2.564, 1.3)
    """
    key = str(text).strip().lower()
    if key in MOE_ROUTING:
        return MOE_ROUTING[key]
    try:
        value = float(key)
    except ValueError:
        value = float("nan")
    if not 1.0 <= value <= 1024.0:
        raise ValueError(f"moe_load_imbalance {text!r}: {MOE_IMBALANCE_HINT}")
    return value


def check_moe_imbalance(value: float, model: Any) -> None:
    """A ``ValueError`` of one line where ``value`` skews a dense ``model``'s routing (it
    has none: only 1 means anything there).

    Examples
    --------
    >>> from types import SimpleNamespace
    >>> check_moe_imbalance(2.0, SimpleNamespace(name="Llama 3.1 8B", n_experts=1))
    Traceback (most recent call last):
    ...
    ValueError: model Llama 3.1 8B is dense (no experts); --moe-imbalance applies to mixture-of-experts models
    """
    if value != 1.0 and int(getattr(model, "n_experts", 1)) <= 1:
        raise ValueError(f"model {model.name} is dense (no experts); --moe-imbalance applies "
                         "to mixture-of-experts models")
