"""Declarative, validated specifications: models, workloads, hardware and topology.

Every spec is a frozen dataclass validated once at construction. Errors name the
field, the value received and what to pass instead.
"""

from __future__ import annotations

import json
import math
import os
from dataclasses import dataclass, field
from typing import Any

__all__ = [
    "HW_KNOBS",
    "MODES",
    "Efficiency",
    "Hardware",
    "Model",
    "Topology",
    "Workload",
]

#: The six swept hardware knobs, in canonical order.
HW_KNOBS: tuple[str, ...] = (
    "pe_hbm_gb",
    "bw_hbm_gbs",
    "peak_tflops_f16",
    "bw_intra_gbs",
    "bw_inter_gbs",
    "bw_intersip_gbs",
)

#: Workload modes.
MODES: tuple[str, ...] = ("prefill", "decode", "train")


def _positive(owner: str, name: str, value: Any, *, integer: bool = False) -> None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ValueError(f"{owner}.{name} must be a number > 0, got {value!r}")
    if integer and int(value) != value:
        raise ValueError(f"{owner}.{name} must be a positive integer, got {value!r}")
    if not math.isfinite(value) or value <= 0:
        raise ValueError(f"{owner}.{name} must be > 0 (finite), got {value!r}")


def _fraction(owner: str, name: str, value: float) -> None:
    if not (isinstance(value, int | float) and 0 < value <= 1):
        raise ValueError(f"{owner}.{name} must be in (0, 1], got {value!r}")


@dataclass(frozen=True)
class Model:
    """A decoder-only transformer, dense or mixture-of-experts.

    Parameters
    ----------
    name : str
        Display name.
    n_layers, d_model, n_heads, n_kv_heads, d_ff, vocab_size : int
        Architecture. ``n_heads`` must divide ``d_model`` and ``n_kv_heads`` must divide
        ``n_heads`` (grouped-query attention).
    gated_ffn : bool
        SwiGLU-style FFN with three matrices (Llama) instead of two (GPT-3).
    n_experts, top_k : int
        MoE experts per layer and experts per token (1, 1 for a dense model).
    tied_embeddings : bool
        Whether the LM head shares the embedding matrix.
    bytes_per_param, bytes_per_kv : int
        Storage precision of weights and KV cache (2 for fp16/bf16).
    head_dim : int, optional
        Defaults to ``d_model // n_heads``.

    Examples
    --------
    >>> m = Model("tiny", n_layers=2, d_model=64, n_heads=4, n_kv_heads=2, d_ff=256, vocab_size=1000)
    >>> m.n_params
    251200
    """

    name: str
    n_layers: int
    d_model: int
    n_heads: int
    n_kv_heads: int
    d_ff: int
    vocab_size: int
    gated_ffn: bool = True
    n_experts: int = 1
    top_k: int = 1
    tied_embeddings: bool = False
    bytes_per_param: int = 2
    bytes_per_kv: int = 2
    head_dim: int = 0
    attn_bias: bool = False

    def __post_init__(self) -> None:
        for f in ("n_layers", "d_model", "n_heads", "n_kv_heads", "d_ff", "vocab_size",
                  "n_experts", "top_k", "bytes_per_param", "bytes_per_kv"):
            _positive("Model", f, getattr(self, f), integer=True)
        if self.d_model % self.n_heads:
            raise ValueError(
                f"Model.n_heads={self.n_heads} must divide Model.d_model={self.d_model}; "
                f"pass a head count that divides {self.d_model} (e.g. "
                f"{[h for h in (8, 16, 32, 64, 96, 128) if self.d_model % h == 0]})"
            )
        if self.n_heads % self.n_kv_heads:
            raise ValueError(
                f"Model.n_kv_heads={self.n_kv_heads} must divide Model.n_heads={self.n_heads} "
                "(grouped-query attention); pass a divisor of n_heads"
            )
        if self.top_k > self.n_experts:
            raise ValueError(
                f"Model.top_k={self.top_k} must be <= Model.n_experts={self.n_experts}"
            )
        if self.head_dim == 0:
            object.__setattr__(self, "head_dim", self.d_model // self.n_heads)
        _positive("Model", "head_dim", self.head_dim, integer=True)

    # -- parameter counts -------------------------------------------------------------
    @property
    def attn_params_per_layer(self) -> int:
        """Q, K, V and O projection weights of one layer."""
        q = self.d_model * self.n_heads * self.head_dim
        kv = 2 * self.d_model * self.n_kv_heads * self.head_dim
        o = self.n_heads * self.head_dim * self.d_model
        bias = (self.n_heads + 2 * self.n_kv_heads) * self.head_dim + self.d_model
        return q + kv + o + (bias if self.attn_bias else 0)

    @property
    def expert_params(self) -> int:
        """Weights of one FFN expert."""
        return (3 if self.gated_ffn else 2) * self.d_model * self.d_ff + (
            0 if self.gated_ffn else (self.d_ff + self.d_model) * int(self.attn_bias)
        )

    @property
    def ffn_params_per_layer(self) -> int:
        """All experts plus the router (if MoE)."""
        router = self.d_model * self.n_experts if self.n_experts > 1 else 0
        return self.n_experts * self.expert_params + router

    @property
    def ffn_active_params_per_layer(self) -> int:
        """FFN weights one token touches (top-k experts)."""
        router = self.d_model * self.n_experts if self.n_experts > 1 else 0
        return self.top_k * self.expert_params + router

    @property
    def norm_params_per_layer(self) -> int:
        return 2 * self.d_model

    @property
    def params_per_layer(self) -> int:
        return self.attn_params_per_layer + self.ffn_params_per_layer + self.norm_params_per_layer

    @property
    def embedding_params(self) -> int:
        return self.vocab_size * self.d_model * (1 if self.tied_embeddings else 2)

    @property
    def n_params(self) -> int:
        """Total parameter count (embeddings, LM head and final norm included)."""
        return self.n_layers * self.params_per_layer + self.embedding_params + self.d_model

    @property
    def n_active_params(self) -> int:
        """Parameters one token touches (differs from ``n_params`` for MoE)."""
        per_layer = (self.attn_params_per_layer + self.ffn_active_params_per_layer
                     + self.norm_params_per_layer)
        return self.n_layers * per_layer + self.embedding_params + self.d_model

    @property
    def kv_bytes_per_token(self) -> int:
        """2 · n_layers · n_kv_heads · head_dim · bytes_per_kv."""
        return 2 * self.n_layers * self.n_kv_heads * self.head_dim * self.bytes_per_kv

    @classmethod
    def from_hf_config(cls, path: str | os.PathLike[str], *, name: str | None = None) -> Model:
        """Read a HuggingFace ``config.json`` (Llama, Mistral, Mixtral, Qwen, GPT-2 styles).

        Examples
        --------
        >>> import json, tempfile, os
        >>> cfg = {"num_hidden_layers": 2, "hidden_size": 64, "num_attention_heads": 4,
        ...        "intermediate_size": 256, "vocab_size": 1000}
        >>> with tempfile.TemporaryDirectory() as d:
        ...     p = os.path.join(d, "config.json")
        ...     _ = open(p, "w").write(json.dumps(cfg))
        ...     Model.from_hf_config(p).n_kv_heads
        4
        """
        try:
            with open(path, encoding="utf-8") as fh:
                cfg = json.load(fh)
        except FileNotFoundError:
            raise FileNotFoundError(f"no HuggingFace config at {os.fspath(path)!r}") from None
        except json.JSONDecodeError as exc:
            raise ValueError(f"{os.fspath(path)!r} is not valid JSON: {exc}") from None
        if not isinstance(cfg, dict):
            raise ValueError(f"{os.fspath(path)!r} must hold a JSON object")

        def pick(*keys: str, default: Any = None) -> Any:
            for k in keys:
                if k in cfg and cfg[k] is not None:
                    return cfg[k]
            if default is None:
                raise ValueError(
                    f"{os.fspath(path)!r} lacks any of {list(keys)}; "
                    "is this a decoder-only transformer config.json?"
                )
            return default

        n_layers = int(pick("num_hidden_layers", "n_layer", "num_layers"))
        d_model = int(pick("hidden_size", "n_embd", "d_model"))
        n_heads = int(pick("num_attention_heads", "n_head"))
        n_kv = int(pick("num_key_value_heads", "num_kv_heads", default=n_heads))
        d_ff = int(pick("intermediate_size", "moe_intermediate_size", "n_inner", "ffn_dim",
                        default=4 * d_model))
        vocab = int(pick("vocab_size"))
        n_experts = int(pick("num_local_experts", "num_experts", "n_routed_experts", default=1))
        top_k = int(pick("num_experts_per_tok", "moe_top_k", default=1)) if n_experts > 1 else 1
        model_type = str(cfg.get("model_type", ""))
        gated = model_type not in ("gpt2", "gpt_neox", "opt", "gptj", "bloom", "falcon")
        hidden_act = str(cfg.get("hidden_act", cfg.get("activation_function", "")))
        if "gelu" in hidden_act and model_type in ("", "gpt2"):
            gated = False
        dtype = str(cfg.get("torch_dtype", "float16"))
        bpp = 4 if dtype == "float32" else 2
        return cls(
            name=name or str(cfg.get("_name_or_path") or model_type or os.path.basename(
                os.path.dirname(os.path.abspath(path))) or "hf-model"),
            n_layers=n_layers, d_model=d_model, n_heads=n_heads, n_kv_heads=n_kv, d_ff=d_ff,
            vocab_size=vocab, gated_ffn=gated, n_experts=n_experts, top_k=top_k,
            tied_embeddings=bool(cfg.get("tie_word_embeddings", not gated)),
            bytes_per_param=bpp, bytes_per_kv=bpp,
            head_dim=int(cfg.get("head_dim") or 0),
        )


@dataclass(frozen=True)
class Workload:
    """What the model runs.

    Parameters
    ----------
    mode : {"prefill", "decode", "train"}
    batch : int
        Sequences per step (global batch).
    s_q : int
        Query tokens per sequence this step (prompt length for prefill, 1 for decode).
        Defaults to ``s_kv`` for prefill/train and 1 for decode.
    s_kv : int
        Context length the queries attend to (``seq_len`` for training).
    micro_batch : int
        Training only: sequences per micro-batch per data-parallel replica; the global
        ``batch`` must be a multiple of ``micro_batch · dp``.
    recompute : {"none", "selective", "full"}
        Training only: activation recomputation (Korthikanti et al. 2022).
    sequence_parallel : bool
        Training only: Megatron sequence parallelism for the TP group.
    zero_stage : int
        Training only: ZeRO stage 0–3 for model-state memory and DP communication.
    grad_bytes : int
        Training only: bytes per gradient element in the data-parallel reduction.
    precision : {"fp16", "bf16", "fp32", "fp8"}
        Training only: selects DeepSpeed's model-state formula (fp16: 20N at ZeRO-0;
        bf16/fp32/fp8: 16N). fp32 also halves the usable matmul peak; fp8 runs the
        matmuls (projections, FFN) at the family's ``fp8_ratio`` x the 16-bit peak
        (Transformer-Engine style: bf16 weights and attention, fp8 GEMMs).
    virtual_stages : int
        Training only: virtual pipeline stages per device (interleaved 1F1B; bubble
        (p-1)/(v·m)); 1 = plain 1F1B.
    attention : {"flash", "unfused"}
        Training only: FlashAttention-style core (no s² activations, backward at 2.5x
        the forward FLOPs) or the unfused core that stores the scores.
    framework : {"deepspeed", "megatron", "fsdp"}
        Training only: whose model-state formula and defaults apply. ``deepspeed``:
        DeepSpeed's per-stage formulas (ZeRO-3 also holds the fully gathered largest
        layer); ``megatron``: 18 B/param, distributed optimizer (``zero_stage=1``)
        6 + 12/d; ``fsdp``: full sharding (``zero_stage`` 3), 16/d + the gathered unit.
    overlap_grad_reduce : bool or None
        Training only: data-parallel gradient reduction bucketed and overlapped with
        the backward pass (DeepSpeed ``overlap_comm``, Megatron ``overlap_grad_reduce``,
        FSDP). None = the framework's default (DeepSpeed: on for ZeRO-3 only; Megatron:
        off, its argument default; FSDP: on).
    offload : {"none", "optimizer", "optimizer+params"}
        Training only: ZeRO-Offload of the optimizer states (and ZeRO-Infinity of the
        parameters, ZeRO-3 only) to host memory over PCIe.

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
    zero_stage: int = 0
    grad_bytes: int = 4
    precision: str = "fp16"
    virtual_stages: int = 1
    attention: str = "flash"
    framework: str = "deepspeed"
    overlap_grad_reduce: bool | None = None
    offload: str = "none"

    def __post_init__(self) -> None:
        if self.mode not in MODES:
            raise ValueError(f"Workload.mode={self.mode!r} is unknown; pass one of {list(MODES)}")
        _positive("Workload", "micro_batch", self.micro_batch, integer=True)
        _positive("Workload", "grad_bytes", self.grad_bytes, integer=True)
        if self.recompute not in ("none", "selective", "full"):
            raise ValueError(
                f"Workload.recompute={self.recompute!r} is unknown; pass 'none', 'selective' or 'full'"
            )
        if self.precision not in ("fp16", "bf16", "fp32", "fp8"):
            raise ValueError(
                f"Workload.precision={self.precision!r} is unknown; pass 'fp16', 'bf16', "
                "'fp32' or 'fp8'"
            )
        _positive("Workload", "virtual_stages", self.virtual_stages, integer=True)
        for f, choices in (("attention", ("flash", "unfused")),
                           ("framework", ("deepspeed", "megatron", "fsdp")),
                           ("offload", ("none", "optimizer", "optimizer+params"))):
            if getattr(self, f) not in choices:
                raise ValueError(f"Workload.{f}={getattr(self, f)!r} is unknown; pass one of "
                                 f"{list(choices)}")
        if self.overlap_grad_reduce not in (None, True, False):
            raise ValueError("Workload.overlap_grad_reduce must be True, False or None (the "
                             f"framework's default), got {self.overlap_grad_reduce!r}")
        if self.framework == "megatron" and self.zero_stage > 1:
            raise ValueError(
                f"Workload(framework='megatron') shards at most the optimizer (zero_stage=1, "
                f"the distributed optimizer), got zero_stage={self.zero_stage}; pass "
                "framework='fsdp' or 'deepspeed' for ZeRO-2/3")
        if self.framework == "fsdp" and self.zero_stage != 3:
            raise ValueError(f"Workload(framework='fsdp') is full sharding: pass zero_stage=3, "
                             f"got {self.zero_stage}")
        if self.offload != "none" and self.zero_stage == 0:
            raise ValueError("Workload.offload needs ZeRO (zero_stage >= 1): the offloaded "
                             "optimizer step runs on each rank's shard")
        if self.offload == "optimizer+params" and self.zero_stage != 3:
            raise ValueError("Workload(offload='optimizer+params') offloads partitioned "
                             f"parameters: pass zero_stage=3, got {self.zero_stage}")
        if self.zero_stage not in (0, 1, 2, 3):
            raise ValueError(f"Workload.zero_stage must be 0, 1, 2 or 3, got {self.zero_stage!r}")
        _positive("Workload", "batch", self.batch, integer=True)
        _positive("Workload", "s_kv", self.s_kv, integer=True)
        if self.s_q == 0:
            object.__setattr__(self, "s_q", 1 if self.mode == "decode" else self.s_kv)
        _positive("Workload", "s_q", self.s_q, integer=True)
        if self.s_q > self.s_kv:
            raise ValueError(
                f"Workload.s_q={self.s_q} exceeds Workload.s_kv={self.s_kv}; queries attend to "
                "at most the context they are part of, so pass s_q <= s_kv"
            )
        if self.mode == "decode" and self.s_q != 1:
            raise ValueError(f"Workload.s_q must be 1 for mode='decode', got {self.s_q}")
        if self.mode == "train" and self.s_q != self.s_kv:
            raise ValueError(
                f"Workload.s_q must equal s_kv (the sequence length) for mode='train', got "
                f"s_q={self.s_q}, s_kv={self.s_kv}"
            )
        if self.mode == "train" and self.batch % self.micro_batch:
            raise ValueError(
                f"Workload.batch={self.batch} (global batch) must be a multiple of "
                f"micro_batch={self.micro_batch}"
            )

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


@dataclass(frozen=True)
class Hardware:
    """One point of the six hardware knobs (a PE = one accelerator die with its HBM).

    Examples
    --------
    >>> Hardware(bw_hbm_gbs=-1)
    Traceback (most recent call last):
    ...
    ValueError: Hardware.bw_hbm_gbs must be > 0 (finite), got -1
    """

    pe_hbm_gb: float = 96.0
    bw_hbm_gbs: float = 4000.0
    peak_tflops_f16: float = 1000.0
    bw_intra_gbs: float = 900.0
    bw_inter_gbs: float = 400.0
    bw_intersip_gbs: float = 100.0

    def __post_init__(self) -> None:
        for f in HW_KNOBS:
            _positive("Hardware", f, getattr(self, f))

    def as_dict(self) -> dict[str, float]:
        return {f: float(getattr(self, f)) for f in HW_KNOBS}

    def scaled(self, **factors: float) -> Hardware:
        """A copy with some knobs multiplied by factors."""
        unknown = set(factors) - set(HW_KNOBS)
        if unknown:
            raise ValueError(f"unknown hardware knobs {sorted(unknown)}; known: {list(HW_KNOBS)}")
        return Hardware(**{k: v * factors.get(k, 1.0) for k, v in self.as_dict().items()})


@dataclass(frozen=True)
class Topology:
    """Tier sizes and link latencies of a hardware family (not swept).

    PEs form a cube (``pes_per_cube``, linked by ``bw_intra_gbs``), cubes form a SiP
    (``cubes_per_sip``, ``bw_inter_gbs``), SiPs form the system (``n_sips``,
    ``bw_intersip_gbs``). For a GPU cluster: cube = NVLink node, SiP = rack/leaf, system =
    the scale-out network.
    """

    pes_per_cube: int = 8
    cubes_per_sip: int = 4
    n_sips: int = 8
    alpha_intra_ns: float = 500.0
    alpha_inter_ns: float = 1000.0
    alpha_intersip_ns: float = 2500.0
    #: scale-out NICs per cube (node); 0 = one per PE
    nics_per_cube: int = 0
    #: FP8 / INT8 matmul peak relative to the 16-bit peak (0 = the family has none)
    fp8_ratio: float = 0.0
    int8_ratio: float = 0.0
    #: host link (PCIe) bandwidth per device in GB/s and host memory per device in GB,
    #: for offloading (0 = no offload possible)
    pcie_gbs: float = 0.0
    host_mem_gb: float = 0.0

    def __post_init__(self) -> None:
        for f in ("pes_per_cube", "cubes_per_sip", "n_sips"):
            _positive("Topology", f, getattr(self, f), integer=True)
        for f in ("alpha_intra_ns", "alpha_inter_ns", "alpha_intersip_ns", "nics_per_cube",
                  "fp8_ratio", "int8_ratio", "pcie_gbs", "host_mem_gb"):
            v = getattr(self, f)
            if not (isinstance(v, int | float) and math.isfinite(v) and v >= 0):
                raise ValueError(f"Topology.{f} must be >= 0 (finite), got {v!r}")

    @property
    def n_devices(self) -> int:
        return self.pes_per_cube * self.cubes_per_sip * self.n_sips

    @property
    def pes_per_sip(self) -> int:
        return self.pes_per_cube * self.cubes_per_sip


@dataclass(frozen=True)
class Efficiency:
    """Achievable fractions of peak, fitted once against public measurements.

    ``compute`` scales ``peak_tflops_f16`` for inference matmuls, ``train_compute`` for
    training matmuls (forward, backward, recomputation), ``memory`` scales
    ``bw_hbm_gbs``, ``network`` scales every link bandwidth, ``hbm_usable`` is the part
    of HBM available to weights, KV and activations (the rest: runtime, fragmentation).
    The defaults are the single fit over all of ``simcore.validation.MEASUREMENTS``
    (24 published training and inference results; mean absolute error 8.5%); see
    ``simcore/validation/fitted.py`` for how, and ``simcore validate`` for the table.
    """

    compute: float = 0.700
    memory: float = 0.650
    network: float = 0.362
    hbm_usable: float = 0.90
    train_compute: float = 0.798
    #: scale-out (inter-cube) and inter-SiP link factors; None = ``network``
    network_inter: float | None = None
    network_sip: float | None = None
    #: attention-core matmul factors (inference, training); None = ``compute`` /
    #: ``train_compute``
    attention: float | None = None
    train_attention: float | None = None
    #: fixed cost of one kernel launch, and the framework's floor per inference step (ns)
    op_latency_ns: float = 0.0
    step_overhead_ns: float = 0.0

    def __post_init__(self) -> None:
        for f in ("compute", "memory", "network", "hbm_usable", "train_compute"):
            _fraction("Efficiency", f, getattr(self, f))
        for f in ("network_inter", "network_sip", "attention", "train_attention"):
            if getattr(self, f) is not None:
                _fraction("Efficiency", f, getattr(self, f))
        for f in ("op_latency_ns", "step_overhead_ns"):
            v = getattr(self, f)
            if isinstance(v, bool) or not isinstance(v, int | float) or not (
                    math.isfinite(v) and 0 <= v <= 1e9):
                raise ValueError(f"Efficiency.{f} must be a time in [0, 1e9] ns, got {v!r}")


@dataclass(frozen=True)
class HardwareFamily:
    """A named preset: a hardware point plus its topology."""

    name: str
    hardware: Hardware = field(default_factory=Hardware)
    topology: Topology = field(default_factory=Topology)
    description: str = ""
