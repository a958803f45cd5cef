"""Declarative, validated specifications: models, workloads, hardware and topology.

Every spec is a frozen dataclass validated once at construction. Every numeric field has
a declared physical range (one table per spec); a value outside it, of the wrong type,
non-finite or non-integral where an integer is needed raises :class:`SpecError` naming
the field, its range and unit, and the value received. Integral numpy scalars and
integral floats are accepted and stored as Python ``int``; booleans are never numbers.
"""

from __future__ import annotations

import json
import math
import numbers
import os
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from ..errors import SimcoreInputError

__all__ = [
    "DTYPE_BYTES",
    "HW_KNOBS",
    "MODES",
    "Efficiency",
    "Hardware",
    "Model",
    "SpecError",
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

#: Bytes per element of the inference dtypes (``Workload.weight_dtype`` etc.).
DTYPE_BYTES: dict[str, float] = {"bf16": 2.0, "fp16": 2.0, "fp8": 1.0, "int8": 1.0, "int4": 0.5}


class SpecError(SimcoreInputError):
    """A spec received a value it cannot represent: the one error type for user mistakes.

    The message is one line naming the field, what it accepts and what it got.

    Examples
    --------
    >>> Workload("decode", batch=1e20)
    Traceback (most recent call last):
    ...
    simcore.model.specs.SpecError: Workload.batch must be an integer in [1, 10000000] (sequences per step), got 1e+20
    """


class _Range(NamedTuple):
    """Declared range of one numeric spec field."""

    lo: float
    hi: float
    unit: str
    integer: bool = True


def _show(value: Any) -> str:
    """A value as a user would have typed it (numpy scalars without their wrapper)."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        return repr(value)
    if isinstance(value, numbers.Integral):
        return str(int(value))
    return repr(float(value))


def _bound(value: float) -> str:
    return str(int(value)) if float(value).is_integer() else repr(float(value))


def _checked(owner: str, name: str, value: Any, rng: _Range) -> int | float:
    """``value`` as a Python int/float inside ``rng``, or :class:`SpecError`."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise _range_error(owner, name, value, rng)
    as_float = float(value)
    if not math.isfinite(as_float):
        raise _range_error(owner, name, value, rng)
    if rng.integer:
        if isinstance(value, numbers.Integral):
            out: int | float = int(value)
        elif as_float.is_integer():
            out = int(as_float)
        else:
            raise _range_error(owner, name, value, rng)
    else:
        out = as_float
    if not rng.lo <= out <= rng.hi:
        raise _range_error(owner, name, value, rng)
    return out


def _range_error(owner: str, name: str, value: Any, rng: _Range) -> SpecError:
    """The :class:`SpecError` of a value outside its declared range (built only then)."""
    kind = "an integer" if rng.integer else "a number"
    unit = f" {rng.unit}" if rng.unit else ""
    return SpecError(f"{owner}.{name} must be {kind} in [{_bound(rng.lo)}, {_bound(rng.hi)}]"
                     f"{unit}, got {_show(value)}")


def _validate_table(spec: Any, table: dict[str, _Range]) -> None:
    owner = type(spec).__name__
    for name, rng in table.items():
        object.__setattr__(spec, name, _checked(owner, name, getattr(spec, name), rng))


def _flag(owner: str, name: str, value: Any) -> bool:
    """A boolean field: ``True``/``False`` (numpy booleans accepted), nothing else."""
    if type(value).__name__ in ("bool", "bool_") and value in (True, False):
        return bool(value)
    raise SpecError(f"{owner}.{name} must be True or False, got {_show(value)}")


def _choice(owner: str, name: str, value: Any, allowed: tuple[Any, ...], what: str) -> None:
    if not isinstance(value, str) or value not in allowed:
        raise SpecError(f"{owner}.{name}={value!r} is unknown; pass {what}")


def _per_layer(total: int, n_layers: int) -> int | float:
    """A model total spread over its layers: an int when it divides evenly."""
    whole, rest = divmod(total, n_layers)
    return whole if rest == 0 else total / n_layers


_MODEL_RANGES: dict[str, _Range] = {
    "n_layers": _Range(1, 10_000, "(decoder layers)"),
    "d_model": _Range(1, 1e6, "(hidden size)"),
    "n_heads": _Range(1, 1e5, "(query heads)"),
    "n_kv_heads": _Range(1, 1e5, "(key/value heads)"),
    "d_ff": _Range(1, 1e7, "(FFN width of a dense layer)"),
    "vocab_size": _Range(1, 1e8, "(tokens)"),
    "n_experts": _Range(1, 1e5, "(routed experts per MoE layer; 1 = dense)"),
    "top_k": _Range(1, 1e5, "(routed experts per token)"),
    "bytes_per_param": _Range(1, 8, "bytes"),
    "bytes_per_kv": _Range(1, 8, "bytes"),
    "head_dim": _Range(0, 1e5, "(query/key head width; 0 = d_model // n_heads)"),
    "v_head_dim": _Range(0, 1e5, "(value head width; 0 = head_dim)"),
    "n_norms_per_layer": _Range(1, 8, "(norm layers per decoder layer)"),
    "learned_pos_embeddings": _Range(0, 1e8, "(rows of a learned position table; 0 = none)"),
    "moe_d_ff": _Range(0, 1e7, "(FFN width of one routed expert; 0 = d_ff)"),
    "n_shared_experts": _Range(0, 1e4, "(always-active experts per MoE layer)"),
    "shared_d_ff": _Range(0, 1e7, "(FFN width of one shared expert; 0 = moe_d_ff)"),
    "n_dense_layers": _Range(0, 10_000, "(dense FFN layers of an MoE model)"),
    "kv_lora_rank": _Range(0, 1e6, "(MLA latent width; 0 = no MLA)"),
    "q_lora_rank": _Range(0, 1e6, "(MLA query low-rank width; 0 = full-rank queries)"),
    "qk_rope_head_dim": _Range(0, 1e5, "(MLA decoupled RoPE width per head)"),
    "sliding_window": _Range(0, 1e8, "tokens (local attention span; 0 = none)"),
    "n_local_layers": _Range(0, 10_000, "(layers with sliding-window attention)"),
}
_MODEL_FLAGS: tuple[str, ...] = (
    "gated_ffn", "tied_embeddings", "attn_bias", "qkv_bias", "mlp_bias", "qk_norm", "norm_bias",
    "attn_sinks", "router_bias", "shared_expert_gate",
)
#: Fields that only mean something for a mixture-of-experts model.
_MOE_ONLY: tuple[str, ...] = ("moe_d_ff", "n_shared_experts", "shared_d_ff", "n_dense_layers",
                              "router_bias", "shared_expert_gate")
#: At most this many parameters: counts (and FLOP totals built on them) stay exact in float64.
MAX_PARAMS = 10**15


@dataclass(frozen=True)
class Model:
    """A decoder-only transformer: dense, mixture-of-experts, MLA, sliding-window.

    Every field after ``attn_bias`` was added for the Hugging Face catalogue; its default
    reproduces the original uniform model, so older specs mean what they meant.

    Parameters
    ----------
    name : str
        Display name (the catalogue keeps the Hugging Face id, e.g. ``"Qwen/Qwen2.5-7B"``).
    n_layers, d_model, n_heads, n_kv_heads, d_ff, vocab_size : int
        Architecture. ``n_kv_heads`` must divide ``n_heads`` (grouped-query attention).
        When ``head_dim`` is left at 0 it is ``d_model // n_heads`` and ``n_heads`` must
        divide ``d_model``. ``d_ff`` is the FFN width of a dense layer.
    gated_ffn : bool
        SwiGLU/GeGLU FFN with three matrices (Llama) instead of two (GPT-3).
    n_experts, top_k : int
        Routed experts per MoE layer and routed experts per token (1, 1 for a dense model).
    tied_embeddings : bool
        Whether the LM head shares the embedding matrix.
    bytes_per_param, bytes_per_kv : int
        Storage precision of weights and KV cache (2 for fp16/bf16).
    head_dim : int, optional
        Query/key width per head; defaults to ``d_model // n_heads``. For MLA it is
        ``qk_nope_head_dim + qk_rope_head_dim``.
    attn_bias : bool
        Biases on the Q, K, V and output projections (GPT-2/3, GPT-OSS); a non-gated FFN
        then has biases too.
    qkv_bias : bool
        Biases on Q, K and V only, none on the output projection (Qwen2, Qwen2-MoE).
    mlp_bias : bool
        Biases in every FFN/expert matrix, gated or not (GPT-OSS experts, Llama ``mlp_bias``).
    v_head_dim : int
        Value width per head (0: ``head_dim``). DeepSeek MLA uses 128 with ``head_dim`` 192.
    qk_norm : bool
        RMSNorm of width ``head_dim`` on queries and on keys in every layer (Qwen3, Gemma 3).
    n_norms_per_layer : int
        Norm layers of width ``d_model`` per decoder layer: 2 (pre-attention, pre-FFN);
        4 for Gemma 2/3 (pre and post of both blocks); 1 for Falcon-7B's parallel block.
    norm_bias : bool
        LayerNorm with a bias (GPT-2, Falcon): twice the norm parameters, final norm too.
    learned_pos_embeddings : int
        Rows of a learned absolute position table (GPT-2 ``n_positions``); 0 for RoPE.
    attn_sinks : bool
        One learned attention-sink logit per head per layer (GPT-OSS).
    moe_d_ff : int
        FFN width of one routed expert (0: ``d_ff``), e.g. Qwen2-MoE/DeepSeek
        ``moe_intermediate_size``.
    n_shared_experts : int
        Experts every token passes through in each MoE layer, besides its ``top_k``.
    shared_d_ff : int
        FFN width of one shared expert (0: the routed expert width). Qwen2-MoE has one
        shared expert of ``shared_expert_intermediate_size``.
    n_dense_layers : int
        Layers of an MoE model whose FFN is dense (width ``d_ff``): DeepSeek's
        ``first_k_dense_replace`` leading layers, Qwen2-MoE's ``mlp_only_layers``.
    router_bias : bool
        A per-expert bias next to the router (GPT-OSS router bias, DeepSeek-V3
        ``e_score_correction_bias``).
    shared_expert_gate : bool
        A ``d_model -> 1`` sigmoid gate on the shared experts (Qwen2-MoE).
    kv_lora_rank : int
        Multi-head latent attention (DeepSeek-V2/V3): width of the compressed KV latent that
        is cached (0: ordinary attention).
    q_lora_rank : int
        MLA low-rank query projection width (0: a full-rank query projection).
    qk_rope_head_dim : int
        MLA decoupled RoPE key width, cached next to the latent; the rest of ``head_dim`` is
        ``qk_nope_head_dim``.
    sliding_window : int
        Tokens a local (sliding-window) layer attends to and caches (0: none).
    n_local_layers : int
        How many layers are local; the others attend to the whole context (Gemma 2: every
        other layer; Gemma 3: five of six; GPT-OSS: alternate; Mistral 7B v0.1: all).

    Notes
    -----
    The per-layer properties the uniform-layer kernels read (``attn_params_per_layer``,
    ``expert_params``, ``ffn_params_per_layer``, ``ffn_active_params_per_layer``,
    ``norm_params_per_layer``) are layer averages, so ``n_layers`` times each is the exact
    model total even with dense leading layers; they are ints whenever the total divides
    evenly (always for uniform models) and floats otherwise. ``n_params`` and
    ``n_active_params`` are exact integers.

    Examples
    --------
    >>> m = Model("tiny", n_layers=2, d_model=64, n_heads=4, n_kv_heads=2, d_ff=256, vocab_size=1000)
    >>> m.n_params
    251200
    >>> Model("tiny", n_layers=2, d_model=64, n_heads=4, n_kv_heads=2, d_ff=256.5, vocab_size=1000)
    Traceback (most recent call last):
    ...
    simcore.model.specs.SpecError: Model.d_ff must be an integer in [1, 10000000] (FFN width of a dense layer), got 256.5
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
    qkv_bias: bool = False
    mlp_bias: bool = False
    v_head_dim: int = 0
    qk_norm: bool = False
    n_norms_per_layer: int = 2
    norm_bias: bool = False
    learned_pos_embeddings: int = 0
    attn_sinks: bool = False
    moe_d_ff: int = 0
    n_shared_experts: int = 0
    shared_d_ff: int = 0
    n_dense_layers: int = 0
    router_bias: bool = False
    shared_expert_gate: bool = False
    kv_lora_rank: int = 0
    q_lora_rank: int = 0
    qk_rope_head_dim: int = 0
    sliding_window: int = 0
    n_local_layers: int = 0

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not self.name.strip():
            raise SpecError(f"Model.name must be a non-empty string, got {self.name!r}")
        _validate_table(self, _MODEL_RANGES)
        for f in _MODEL_FLAGS:
            object.__setattr__(self, f, _flag("Model", f, getattr(self, f)))
        if self.head_dim == 0:
            if self.d_model % self.n_heads:
                raise SpecError(
                    f"Model.n_heads={self.n_heads} must divide Model.d_model={self.d_model}; "
                    f"pass a head count that divides {self.d_model} (e.g. "
                    f"{[h for h in (8, 16, 32, 64, 96, 128) if self.d_model % h == 0]}) "
                    "or an explicit head_dim"
                )
            object.__setattr__(self, "head_dim", self.d_model // self.n_heads)
        if self.n_heads % self.n_kv_heads:
            raise SpecError(
                f"Model.n_kv_heads={self.n_kv_heads} must divide Model.n_heads={self.n_heads} "
                "(grouped-query attention); pass a divisor of n_heads"
            )
        if self.top_k > self.n_experts:
            raise SpecError(
                f"Model.top_k={self.top_k} must be <= Model.n_experts={self.n_experts}"
            )
        self._check_moe()
        self._check_mla()
        if (self.sliding_window > 0) != (self.n_local_layers > 0):
            raise SpecError(
                f"Model.sliding_window={self.sliding_window} and Model.n_local_layers="
                f"{self.n_local_layers} go together: pass both (> 0) for local attention, "
                "or both 0"
            )
        if self.n_local_layers > self.n_layers:
            raise SpecError(
                f"Model.n_local_layers={self.n_local_layers} exceeds Model.n_layers="
                f"{self.n_layers}; pass at most n_layers"
            )
        if self.n_params > MAX_PARAMS:
            raise SpecError(
                f"Model {self.name!r} has {self.n_params:.3g} parameters; at most 1e15 are "
                "supported (counts stay exact in float64), check n_layers, d_model and d_ff"
            )

    def _check_moe(self) -> None:
        if self.n_experts == 1:
            for f in _MOE_ONLY:
                if getattr(self, f):
                    raise SpecError(
                        f"Model.{f}={getattr(self, f)!r} needs a mixture-of-experts model; "
                        "pass n_experts > 1 or leave it at its default"
                    )
            return
        if self.n_dense_layers >= self.n_layers:
            raise SpecError(
                f"Model.n_dense_layers={self.n_dense_layers} leaves no MoE layer of "
                f"{self.n_layers}; pass fewer dense layers, or n_experts=1 for a dense model"
            )
        if self.shared_d_ff and not self.n_shared_experts:
            raise SpecError(
                f"Model.shared_d_ff={self.shared_d_ff} needs n_shared_experts >= 1"
            )
        if self.shared_expert_gate and not self.n_shared_experts:
            raise SpecError("Model.shared_expert_gate=True needs n_shared_experts >= 1")

    def _check_mla(self) -> None:
        if not self.kv_lora_rank:
            for f in ("q_lora_rank", "qk_rope_head_dim"):
                if getattr(self, f):
                    raise SpecError(
                        f"Model.{f}={getattr(self, f)} is a multi-head latent attention "
                        "field; pass kv_lora_rank > 0 as well, or leave it at 0"
                    )
            return
        if self.qk_rope_head_dim > self.head_dim:
            raise SpecError(
                f"Model.qk_rope_head_dim={self.qk_rope_head_dim} exceeds Model.head_dim="
                f"{self.head_dim} (= qk_nope_head_dim + qk_rope_head_dim); pass at most head_dim"
            )
        if self.attn_bias or self.qkv_bias or self.attn_sinks:
            raise SpecError(
                "attention biases and sinks are not modelled with multi-head latent "
                "attention; pass attn_bias=False, qkv_bias=False and attn_sinks=False"
            )

    # -- derived sizes ----------------------------------------------------------------
    @property
    def is_mla(self) -> bool:
        """Multi-head latent attention (``kv_lora_rank > 0``)."""
        return self.kv_lora_rank > 0

    @property
    def value_head_dim(self) -> int:
        """Value width per head (``v_head_dim``, or ``head_dim`` when 0)."""
        return self.v_head_dim or self.head_dim

    @property
    def n_moe_layers(self) -> int:
        """Layers with routed experts (0 for a dense model)."""
        return self.n_layers - self.n_dense_layers if self.n_experts > 1 else 0

    @property
    def n_global_layers(self) -> int:
        """Layers attending to (and caching) the whole context."""
        return self.n_layers - self.n_local_layers

    # -- attention --------------------------------------------------------------------
    @property
    def q_proj_params_per_layer(self) -> int:
        """Query projection weights of one layer (MLA: down- and up-projection)."""
        d, h, hd = self.d_model, self.n_heads, self.head_dim
        if self.is_mla and self.q_lora_rank:
            return d * self.q_lora_rank + self.q_lora_rank * h * hd
        bias = h * hd if (self.attn_bias or self.qkv_bias) else 0
        return d * h * hd + bias

    @property
    def kv_proj_params_per_layer(self) -> int:
        """Weights producing keys and values in one layer.

        GQA: ``d_model · n_kv_heads · (head_dim + v_head_dim)`` (+ biases). MLA: the latent
        down-projection ``d_model · (kv_lora_rank + qk_rope_head_dim)`` plus the per-head
        up-projection ``kv_lora_rank · n_heads · (qk_nope_head_dim + v_head_dim)``.
        """
        d, h, kvh = self.d_model, self.n_heads, self.n_kv_heads
        if self.is_mla:
            nope = self.head_dim - self.qk_rope_head_dim
            return (d * (self.kv_lora_rank + self.qk_rope_head_dim)
                    + self.kv_lora_rank * h * (nope + self.value_head_dim))
        width = kvh * (self.head_dim + self.value_head_dim)
        return d * width + (width if (self.attn_bias or self.qkv_bias) else 0)

    @property
    def o_proj_params_per_layer(self) -> int:
        """Output projection weights of one layer (+ its bias)."""
        return (self.n_heads * self.value_head_dim * self.d_model
                + (self.d_model if self.attn_bias else 0))

    @property
    def attn_params_per_layer(self) -> int:
        """Q, K, V and O projection weights of one layer (biases and sinks included)."""
        sinks = self.n_heads if self.attn_sinks else 0
        return (self.q_proj_params_per_layer + self.kv_proj_params_per_layer
                + self.o_proj_params_per_layer + sinks)

    @property
    def attn_core_flops_per_pair(self) -> int:
        """FLOPs of one (query, key) pair in one layer: QKᵀ and PV over all heads.

        ``2 · n_heads · (head_dim + v_head_dim)``; equals ``4 · n_heads · head_dim`` unless
        the value width differs (MLA).
        """
        return 2 * self.n_heads * (self.head_dim + self.value_head_dim)

    # -- FFN --------------------------------------------------------------------------
    @property
    def _ffn_has_bias(self) -> bool:
        return self.mlp_bias or (self.attn_bias and not self.gated_ffn)

    def _ffn(self, width: int) -> int:
        """Weights (+ biases) of one FFN of the given width."""
        mats = (3 if self.gated_ffn else 2) * self.d_model * width
        if self._ffn_has_bias:
            mats += (2 * width if self.gated_ffn else width) + self.d_model
        return mats

    @property
    def dense_ffn_params(self) -> int:
        """FFN weights of one dense layer (width ``d_ff``)."""
        return self._ffn(self.d_ff)

    @property
    def routed_expert_params(self) -> int:
        """Weights of one routed expert of an MoE layer (the dense FFN for a dense model)."""
        return self._ffn(self.moe_d_ff or self.d_ff) if self.n_experts > 1 else self.dense_ffn_params

    @property
    def shared_expert_params(self) -> int:
        """Weights of all shared experts of one MoE layer."""
        width = self.shared_d_ff or self.moe_d_ff or self.d_ff
        return self.n_shared_experts * self._ffn(width)

    @property
    def router_params(self) -> int:
        """Router (+ router bias, + shared-expert gate) weights of one MoE layer."""
        if self.n_experts == 1:
            return 0
        e, d = self.n_experts, self.d_model
        return d * e + (e if self.router_bias else 0) + (d if self.shared_expert_gate else 0)

    @property
    def ffn_params_total(self) -> int:
        """FFN weights of all layers: dense layers, routed and shared experts, routers."""
        if self.n_experts == 1:
            return self.n_layers * self.dense_ffn_params
        moe = (self.n_experts * self.routed_expert_params + self.shared_expert_params
               + self.router_params)
        return self.n_dense_layers * self.dense_ffn_params + self.n_moe_layers * moe

    @property
    def ffn_active_params_total(self) -> int:
        """FFN weights one token touches over all layers (top-k routed + shared + router)."""
        if self.n_experts == 1:
            return self.ffn_params_total
        moe = (self.top_k * self.routed_expert_params + self.shared_expert_params
               + self.router_params)
        return self.n_dense_layers * self.dense_ffn_params + self.n_moe_layers * moe

    @property
    def expert_params(self) -> int | float:
        """Weights of one routed expert, averaged over all layers.

        Equals one expert's weights when every layer is MoE (Mixtral); with dense layers it is
        ``n_moe_layers / n_layers`` of it, so that ``n_layers · n_experts · expert_params`` is
        the model's routed-expert total. See :attr:`routed_expert_params` for one expert.
        """
        if self.n_experts == 1:
            return self.dense_ffn_params
        return _per_layer(self.n_moe_layers * self.routed_expert_params, self.n_layers)

    @property
    def ffn_params_per_layer(self) -> int | float:
        """All FFN weights (experts, shared experts, routers, dense FFNs), layer average."""
        return _per_layer(self.ffn_params_total, self.n_layers)

    @property
    def ffn_active_params_per_layer(self) -> int | float:
        """FFN weights one token touches (top-k routed + shared + router), layer average."""
        return _per_layer(self.ffn_active_params_total, self.n_layers)

    def experts_touched(self, tokens: float) -> float:
        """Expected distinct routed experts one MoE layer reads for ``tokens`` tokens.

        Under uniform routing ``E · (1 − (1 − k/E)^T)``; 1 for a dense model.
        """
        if self.n_experts == 1:
            return 1.0
        e, k = self.n_experts, self.top_k
        return e * (1.0 - (1.0 - k / e) ** tokens)

    # -- norms, embeddings, totals ----------------------------------------------------
    @property
    def norm_params_per_layer(self) -> int:
        """Norm weights of one layer (LayerNorm biases, QK-norms and MLA latent norms too)."""
        per = self.d_model * (2 if self.norm_bias else 1)
        extra = 2 * self.head_dim if self.qk_norm else 0
        if self.is_mla:
            extra += self.kv_lora_rank + self.q_lora_rank
        return self.n_norms_per_layer * per + extra

    @property
    def final_norm_params(self) -> int:
        return self.d_model * (2 if self.norm_bias else 1)

    @property
    def params_per_layer(self) -> int | float:
        return self.attn_params_per_layer + self.ffn_params_per_layer + self.norm_params_per_layer

    @property
    def embedding_params(self) -> int:
        """Token embedding, LM head (unless tied) and any learned position table."""
        tokens = self.vocab_size * self.d_model * (1 if self.tied_embeddings else 2)
        return tokens + self.learned_pos_embeddings * self.d_model

    @property
    def n_params(self) -> int:
        """Total parameter count (embeddings, LM head and final norm included)."""
        per_layer = self.attn_params_per_layer + self.norm_params_per_layer
        return (self.n_layers * per_layer + self.ffn_params_total + self.embedding_params
                + self.final_norm_params)

    @property
    def n_active_params(self) -> int:
        """Parameters one token touches (differs from ``n_params`` for MoE)."""
        per_layer = self.attn_params_per_layer + self.norm_params_per_layer
        return (self.n_layers * per_layer + self.ffn_active_params_total
                + self.embedding_params + self.final_norm_params)

    # -- KV cache ---------------------------------------------------------------------
    @property
    def kv_bytes_per_token_per_layer(self) -> int:
        """Cache bytes one token adds to one layer.

        GQA: ``n_kv_heads · (head_dim + v_head_dim) · bytes_per_kv``. MLA caches the latent
        and the RoPE key: ``(kv_lora_rank + qk_rope_head_dim) · bytes_per_kv``.
        """
        if self.is_mla:
            return (self.kv_lora_rank + self.qk_rope_head_dim) * self.bytes_per_kv
        return self.n_kv_heads * (self.head_dim + self.value_head_dim) * self.bytes_per_kv

    @property
    def kv_bytes_per_token(self) -> int:
        """KV bytes per token of context over all layers, as if every layer were global.

        ``2 · n_layers · n_kv_heads · head_dim · bytes_per_kv`` for ordinary attention, the
        latent for MLA. Exact for contexts up to ``sliding_window``; beyond it use
        :meth:`kv_bytes`.
        """
        return self.n_layers * self.kv_bytes_per_token_per_layer

    def kv_bytes(self, context: Any) -> Any:
        """KV-cache bytes of one sequence holding ``context`` tokens.

        Local layers cache at most ``sliding_window`` tokens. ``context`` may be an int or a
        numpy array of ints.

        Examples
        --------
        >>> m = Model("m", n_layers=4, d_model=64, n_heads=4, n_kv_heads=4, d_ff=128,
        ...           vocab_size=10, sliding_window=100, n_local_layers=2)
        >>> m.kv_bytes(1000) == m.kv_bytes_per_token_per_layer * (2 * 1000 + 2 * 100)
        True
        """
        per = self.kv_bytes_per_token_per_layer
        if isinstance(context, numbers.Real):
            c = int(_checked("Model.kv_bytes", "context", context, _Range(0, 1e8, "tokens")))
            return per * (self.n_global_layers * c + self.n_local_layers
                          * min(c, self.sliding_window))
        import numpy as np

        c_arr = np.asarray(context)
        local = np.minimum(c_arr, self.sliding_window)
        return per * (self.n_global_layers * c_arr + self.n_local_layers * local)

    def attended_tokens(self, context: Any) -> Any:
        """Keys one new token attends to at ``context`` tokens, averaged over layers.

        ``context`` for full attention; local layers see at most ``sliding_window``.
        """
        return self.kv_bytes(context) / (self.kv_bytes_per_token_per_layer * self.n_layers)

    # -- Hugging Face -----------------------------------------------------------------
    @classmethod
    def from_hf_dict(cls, cfg: Any, *, name: str | None = None, source: str = "config") -> Model:
        """A :class:`Model` from the contents of a Hugging Face ``config.json``.

        Reads Llama, Mistral, Mixtral, Qwen2/2.5/3, Qwen2-MoE/Qwen3-MoE, DeepSeek-V2/V3
        (MLA, shared experts, leading dense layers), Gemma 1/2/3 (``text_config``, sliding
        window, explicit ``head_dim``), Phi-3/4, GPT-OSS, Falcon and GPT-2 styles. Every
        bad field raises :class:`SpecError` naming it. DeepSeek-V3's multi-token-prediction
        module (``num_nextn_predict_layers``) is not part of the model. Encoder-decoder
        configs (T5, BART, Pegasus, Whisper, ...: ``is_encoder_decoder``, an
        encoder-decoder ``model_type`` or ``num_decoder_layers``) are refused with a
        :class:`SpecError`: simcore models decoder-only transformers.

        Examples
        --------
        >>> cfg = {"model_type": "mixtral", "num_hidden_layers": 2, "hidden_size": 64,
        ...        "num_attention_heads": 4, "intermediate_size": 256, "vocab_size": 1000,
        ...        "num_local_experts": 8, "num_experts_per_tok": 2}
        >>> m = Model.from_hf_dict(cfg, name="toy")
        >>> (m.n_experts, m.top_k, m.n_kv_heads)
        (8, 2, 4)
        >>> Model.from_hf_dict({**cfg, "hidden_size": "64"})
        Traceback (most recent call last):
        ...
        simcore.model.specs.SpecError: config: field 'hidden_size' must be a JSON number, got the string '64'; write 64 without quotes
        """
        kwargs = _hf_model_kwargs(cfg, source)
        if name:
            kwargs["name"] = name
        try:
            return cls(**kwargs)
        except SpecError as exc:
            raise SpecError(f"{source}: {exc}") from None

    @classmethod
    def from_hf_config(cls, path: str | os.PathLike[str], *, name: str | None = None) -> Model:
        """Read a Hugging Face ``config.json`` (see :meth:`from_hf_dict`).

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
        where = os.fspath(path)
        try:
            with open(path, encoding="utf-8") as fh:
                cfg = json.load(fh)
        except FileNotFoundError:
            raise FileNotFoundError(f"no HuggingFace config at {where!r}") from None
        except IsADirectoryError:
            raise FileNotFoundError(f"no HuggingFace config at {where!r} (a folder)") from None
        except (json.JSONDecodeError, UnicodeDecodeError) as exc:
            raise SpecError(f"{where!r} is not valid JSON: {exc}") from None
        except RecursionError:
            raise SpecError(f"{where!r} nests JSON too deeply to be a config.json") from None
        if not isinstance(cfg, dict):
            raise SpecError(f"{where!r} must hold a JSON object, got a {type(cfg).__name__}")
        if name is None:
            fallback = os.path.basename(os.path.dirname(os.path.abspath(where))) or "hf-model"
            raw = cfg.get("_name_or_path")
            name = raw if isinstance(raw, str) and raw.strip() else None
            if name is None:
                mt = cfg.get("model_type")
                name = mt if isinstance(mt, str) and mt.strip() else fallback
        return cls.from_hf_dict(cfg, name=name, source=repr(where))


# --- Hugging Face config.json ------------------------------------------------------------
_MISSING: Any = object()
#: Keys naming the decoder depth; a config without one at the top level is read from its
#: ``text_config`` (multimodal wrappers such as Gemma 3).
_LAYER_KEYS = ("num_hidden_layers", "n_layer", "num_layers")
#: Model types whose FFN has two matrices and no gate.
_UNGATED_TYPES = frozenset({"gpt2", "gpt_neox", "opt", "gptj", "bloom", "falcon", "gpt_bigcode",
                            "phi"})
#: ``tie_word_embeddings`` when a config omits it, as the transformers config classes say.
_TIED_BY_DEFAULT = frozenset({"gemma", "gemma2", "gemma3", "gemma3_text", "gpt2", "gpt_bigcode",
                              "falcon"})
_UNTIED_BY_DEFAULT = frozenset({"llama", "mistral", "mixtral", "qwen2", "qwen2_moe", "qwen3",
                                "qwen3_moe", "phi3", "deepseek_v2", "deepseek_v3", "gpt_oss"})
#: ``vocab_size`` when a config omits it (transformers' Gemma3TextConfig default).
_VOCAB_DEFAULTS = {"gemma3_text": 262_208, "gemma3": 262_208}
_QWEN_TYPES = frozenset({"qwen2", "qwen2_moe", "qwen3", "qwen3_moe"})
#: Hugging Face model types of encoder-decoder (sequence-to-sequence) models: an encoder
#: stack plus a decoder with cross-attention, which simcore does not model.
_ENCODER_DECODER_TYPES = frozenset({
    "t5", "mt5", "umt5", "longt5", "switch_transformers", "t5gemma", "bart", "mbart", "plbart",
    "pegasus", "pegasus_x", "bigbird_pegasus", "marian", "fsmt", "m2m_100", "nllb-moe", "led",
    "blenderbot", "blenderbot-small", "prophetnet", "xlm-prophetnet", "whisper",
    "encoder-decoder", "speech-encoder-decoder", "vision-encoder-decoder",
})


class _HFReader:
    """Typed access to one config.json object; every error names the key."""

    def __init__(self, cfg: dict[str, Any], source: str) -> None:
        self.cfg, self.source = cfg, source

    def has(self, key: str) -> bool:
        return self.cfg.get(key) is not None

    def fail(self, key: str, problem: str) -> SpecError:
        return SpecError(f"{self.source}: field {key!r} {problem}")

    def integer(self, *keys: str, default: Any = _MISSING) -> int:
        """The first present key as a non-negative whole number."""
        for key in keys:
            if self.has(key):
                return self._whole(key, self.cfg[key])
        if default is _MISSING:
            raise SpecError(
                f"{self.source} lacks any of {list(keys)}; is this a decoder-only transformer "
                "config.json?"
            )
        return int(default)

    def _whole(self, key: str, v: Any) -> int:
        if isinstance(v, bool):
            raise self.fail(key, f"must be a number, got {v!r}")
        if isinstance(v, str):
            hint = v.strip()
            try:
                as_num = float(hint)
            except ValueError:
                raise self.fail(key, f"must be a JSON number, got the string {v!r}") from None
            shown = str(int(as_num)) if math.isfinite(as_num) and as_num.is_integer() else hint
            raise self.fail(key, f"must be a JSON number, got the string {v!r}; write {shown} "
                                 "without quotes")
        if isinstance(v, list | dict):
            kind = "list" if isinstance(v, list) else "object"
            raise self.fail(key, f"must be a single number, got a JSON {kind} {_short(v)}")
        if not isinstance(v, numbers.Real):
            raise self.fail(key, f"must be a number, got {v!r}")
        x = float(v)
        if not math.isfinite(x):
            raise self.fail(key, f"must be a finite number, got {_show(v)}")
        if not x.is_integer():
            raise self.fail(key, f"must be a whole number, got {_show(v)}")
        if x < 0:
            raise self.fail(key, f"must be >= 0, got {_show(v)}")
        if x > 2**53:
            raise self.fail(key, f"is implausibly large ({_show(v)}); pass the value from the "
                                 "model's config.json")
        return int(v) if isinstance(v, numbers.Integral) else int(x)

    def flag(self, key: str, default: bool) -> bool:
        if not self.has(key):
            return default
        v = self.cfg[key]
        if not isinstance(v, bool):
            raise self.fail(key, f"must be true or false, got {_short(v)}")
        return v

    def text(self, *keys: str, default: str = "") -> str:
        for key in keys:
            if self.has(key):
                v = self.cfg[key]
                if not isinstance(v, str):
                    raise self.fail(key, f"must be a string, got {_short(v)}")
                return v
        return default

    def int_list(self, key: str) -> list[int]:
        if not self.has(key):
            return []
        v = self.cfg[key]
        if not isinstance(v, list):
            raise self.fail(key, f"must be a list of layer indices, got {_short(v)}")
        return [self._whole(f"{key}[{i}]", x) for i, x in enumerate(v)]

    def str_list(self, key: str, length: int) -> list[str] | None:
        if not self.has(key):
            return None
        v = self.cfg[key]
        if not isinstance(v, list) or not all(isinstance(x, str) for x in v):
            raise self.fail(key, f"must be a list of strings, got {_short(v)}")
        if len(v) != length:
            raise self.fail(key, f"lists {len(v)} layers but num_hidden_layers is {length}")
        return v


def _short(v: Any) -> str:
    text = json.dumps(v) if isinstance(v, list | dict | str | bool | None) else repr(v)
    return text if len(text) <= 40 else text[:37] + "..."


def _hf_model_kwargs(cfg: Any, source: str) -> dict[str, Any]:
    """Model keyword arguments from a config.json object (see :meth:`Model.from_hf_dict`)."""
    if not isinstance(cfg, dict):
        raise SpecError(f"{source} must be a JSON object (a dict), got a {type(cfg).__name__}")
    text_cfg = cfg.get("text_config")
    if isinstance(text_cfg, dict) and not any(cfg.get(k) is not None for k in _LAYER_KEYS):
        cfg = {**{k: v for k, v in cfg.items() if k != "text_config"}, **text_cfg}
    r = _HFReader(cfg, source)
    mt = r.text("model_type")
    _refuse_encoder_decoder(cfg, mt, source)

    n_layers = r.integer(*_LAYER_KEYS)
    if n_layers < 1:
        raise r.fail("num_hidden_layers", "must be >= 1, got 0")
    d = r.integer("hidden_size", "n_embd", "d_model")
    h = r.integer("num_attention_heads", "n_head", "num_heads")
    vocab = r.integer("vocab_size", default=_VOCAB_DEFAULTS.get(mt, _MISSING))
    kw: dict[str, Any] = dict(n_layers=n_layers, d_model=d, n_heads=h, vocab_size=vocab)

    # attention heads
    if mt == "falcon":
        if r.flag("new_decoder_architecture", False):
            kv = r.integer("num_kv_heads", default=h)
        else:
            kv = 1 if r.flag("multi_query", True) else h
    elif r.flag("multi_query", False):
        kv = 1
    else:
        kv = r.integer("num_key_value_heads", "num_kv_heads", "n_head_kv", default=h)
    kw["n_kv_heads"] = kv
    if r.has("kv_lora_rank"):  # multi-head latent attention (DeepSeek-V2/V3)
        rope = r.integer("qk_rope_head_dim")
        nope = r.integer("qk_nope_head_dim")
        kw.update(kv_lora_rank=r.integer("kv_lora_rank"), q_lora_rank=r.integer("q_lora_rank", default=0),
                  qk_rope_head_dim=rope, head_dim=nope + rope,
                  v_head_dim=r.integer("v_head_dim", default=nope))
    else:
        kw["head_dim"] = r.integer("head_dim", default=0)

    # FFN and biases
    d_ff = r.integer("intermediate_size", "n_inner", "ffn_hidden_size", "ffn_dim", default=4 * d)
    gated = mt not in _UNGATED_TYPES
    act = r.text("hidden_act", "activation_function")
    if "gelu" in act and mt in ("", "gpt2"):
        gated = False
    kw.update(d_ff=d_ff, gated_ffn=gated)
    if mt in ("gpt2", "gpt_bigcode"):
        kw.update(attn_bias=True, norm_bias=True,
                  learned_pos_embeddings=r.integer("n_positions", "n_ctx", default=1024))
    elif mt == "falcon":
        kw.update(attn_bias=r.flag("bias", False), norm_bias=True)
        if not r.flag("new_decoder_architecture", False) and r.flag("parallel_attn", True):
            kw["n_norms_per_layer"] = 1
    elif mt == "gptj":  # one LayerNorm feeds attention and the MLP in parallel (ln_1)
        kw["n_norms_per_layer"] = 1
    elif mt in ("qwen2", "qwen2_moe"):
        kw["qkv_bias"] = True
    elif not r.has("kv_lora_rank"):
        kw["attn_bias"] = r.flag("attention_bias", False)
    kw["mlp_bias"] = r.flag("mlp_bias", False)
    if mt in ("gemma2", "gemma3_text", "gemma3"):
        kw["n_norms_per_layer"] = 4
    if mt in ("qwen3", "qwen3_moe", "gemma3_text", "gemma3"):
        kw["qk_norm"] = True

    # mixture of experts
    n_experts = r.integer("num_local_experts", "num_experts", "n_routed_experts", default=1) or 1
    moe_layers = _moe_layer_count(r, mt, n_layers) if n_experts > 1 else 0
    if moe_layers:  # else every layer is dense: an MoE config without MoE layers
        kw["n_experts"] = n_experts
        kw["top_k"] = r.integer("num_experts_per_tok", "experts_per_token", "moe_top_k", default=1)
        kw["moe_d_ff"] = r.integer("moe_intermediate_size", default=0)
        kw["n_dense_layers"] = n_layers - moe_layers
        if mt in ("qwen2_moe", "qwen3_moe"):
            shared = r.integer("shared_expert_intermediate_size", default=0)
            if shared:
                kw.update(n_shared_experts=1, shared_d_ff=shared, shared_expert_gate=True)
        else:
            kw["n_shared_experts"] = r.integer("n_shared_experts", "num_shared_experts", default=0)
        if mt == "gpt_oss":
            kw.update(router_bias=True, mlp_bias=True, attn_sinks=True)
        if r.text("topk_method") == "noaux_tc":
            kw["router_bias"] = True
    kw.update(_hf_local_attention(r, mt, n_layers))

    # embeddings and precision
    tied_default = (True if mt in _TIED_BY_DEFAULT else False if mt in _UNTIED_BY_DEFAULT
                    else not gated)
    kw["tied_embeddings"] = r.flag("tie_word_embeddings", tied_default)
    dtype = r.text("torch_dtype", "dtype", default="float16")
    kw["bytes_per_param"] = kw["bytes_per_kv"] = 4 if dtype == "float32" else 2
    kw["name"] = r.text("_name_or_path") or mt or "hf-model"
    return kw


def _refuse_encoder_decoder(cfg: dict[str, Any], mt: str, source: str) -> None:
    """A :class:`SpecError` for an encoder-decoder config (T5, BART, Whisper, ...): read as
    a decoder-only model it would plan a model that does not exist (issue 37)."""
    if cfg.get("is_encoder_decoder") is True:
        why = "is_encoder_decoder: true"
    elif mt.lower() in _ENCODER_DECODER_TYPES:
        why = f"model_type {mt!r}"
    elif cfg.get("num_decoder_layers") is not None:
        why = "it has num_decoder_layers"
    else:
        return
    raise SpecError(
        f"{source} describes an encoder-decoder model ({why}); simcore models decoder-only "
        "transformers: pass a decoder-only config.json (Llama, Qwen, Mistral, Gemma, ...), a "
        "preset or a catalogue id"
    )


def _moe_layer_count(r: _HFReader, mt: str, n_layers: int) -> int:
    """Layers with routed experts, as each family's modelling code decides."""
    if r.has("first_k_dense_replace") or mt.startswith("deepseek"):
        first = r.integer("first_k_dense_replace", default=0)
        freq = r.integer("moe_layer_freq", default=1) or 1
        return sum(1 for i in range(n_layers) if i >= first and i % freq == 0)
    if mt in ("qwen2_moe", "qwen3_moe"):
        step = r.integer("decoder_sparse_step", default=1) or 1
        dense = set(r.int_list("mlp_only_layers"))
        return sum(1 for i in range(n_layers) if i not in dense and (i + 1) % step == 0)
    return n_layers


def _hf_local_attention(r: _HFReader, mt: str, n_layers: int) -> dict[str, int]:
    """``sliding_window`` and ``n_local_layers`` from the config's layer pattern."""
    types = r.str_list("layer_types", n_layers)
    if types is not None:
        unknown = sorted(set(types) - {"sliding_attention", "full_attention"})
        if unknown:
            raise r.fail("layer_types", f"has {unknown}: only sliding_attention and "
                                        "full_attention layers are modelled")
        n_local = types.count("sliding_attention")
        window = r.integer("sliding_window", default=0) if n_local else 0
    elif mt == "gemma2":  # even-indexed layers are local
        window, n_local = r.integer("sliding_window", default=4096), (n_layers + 1) // 2
    elif mt in ("gemma3_text", "gemma3"):  # every pattern-th layer is global
        pattern = r.integer("sliding_window_pattern", "_sliding_window_pattern", default=6) or 1
        window, n_local = r.integer("sliding_window", default=4096), n_layers - n_layers // pattern
    elif mt in _QWEN_TYPES:  # layers from max_window_layers on, only when switched on
        window = r.integer("sliding_window", default=0) if r.flag("use_sliding_window", False) else 0
        n_local = n_layers - min(n_layers, r.integer("max_window_layers", default=n_layers))
    else:  # Mistral, Mixtral, Phi-3: one window for every layer when set
        window = r.integer("sliding_window", default=0)
        n_local = n_layers
    if not window or not n_local:
        return {}
    return {"sliding_window": window, "n_local_layers": n_local}


_WORKLOAD_RANGES: dict[str, _Range] = {
    "batch": _Range(1, 1e7, "(sequences per step)"),
    "s_kv": _Range(1, 1e8, "tokens (context length)"),
    "s_q": _Range(0, 1e8, "tokens (query tokens per sequence; 0 = by mode)"),
    "micro_batch": _Range(1, 1e7, "(sequences per micro-batch)"),
    "zero_stage": _Range(0, 3, "(ZeRO stage)"),
    "grad_bytes": _Range(1, 8, "bytes (per gradient element)"),
    "virtual_stages": _Range(1, 1024, "(interleaved pipeline chunks per device)"),
    "prefill_tokens": _Range(0, 1e9, "tokens (other requests' prompt tokens per decode step)"),
    "prefill_context": _Range(0, 1e8, "tokens (mean context of those prompt tokens)"),
}


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
    weight_dtype, act_dtype, kv_dtype : {"", "bf16", "fp16", "fp8", "int8", "int4"}
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
        the family's ``Topology.fp8_ratio`` / ``int8_ratio`` times the 16-bit peak.
    cuda_graphs : bool
        Decode only: the steps replay CUDA graphs (as vLLM, SGLang and TensorRT-LLM serve),
        so no kernel pays the host's launch time (``kernels.inference.LAUNCH_NS``, 5 us per
        kernel launched from the host), and the framework's per-step floor
        (``Efficiency.step_overhead_ns``) drops to a quarter. Ignored by prefill and
        training steps, which launch every kernel.
    virtual_stages : int
        Training only: virtual pipeline stages per device (interleaved 1F1B; bubble
        (p-1)/(v·m)); 1 = plain 1F1B.
    attention : {"flash", "flash2", "unfused"}
        Training only: FlashAttention-style core (no s² activations, backward at 2.5x
        the forward FLOPs) or the unfused core that stores the scores. ``"flash"`` is the
        family's native fused kernel (cuDNN / Transformer Engine / FlashAttention-3 on
        Hopper); ``"flash2"`` a FlashAttention-2-class kernel (the ``flash-attn`` 2
        package, PyTorch SDPA's flash backend), which on a family with
        ``Topology.fa2_ratio`` < 1 runs at that fraction of the native kernel's rate.
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
    weight_dtype: str = ""
    act_dtype: str = ""
    kv_dtype: str = ""
    cuda_graphs: bool = False
    virtual_stages: int = 1
    attention: str = "flash"
    framework: str = "deepspeed"
    overlap_grad_reduce: bool | None = None
    offload: str = "none"
    prefill_tokens: int = 0
    prefill_context: int = 0
    moe_dispatch: str = "per_expert"
    moe_routing: str = "random"
    moe_a2a_overlap: bool = False
    tp_comm_overlap: bool = False
    eager_elementwise: bool = False
    eager_loss: bool = False

    def __post_init__(self) -> None:
        _choice("Workload", "mode", self.mode, MODES, f"one of {list(MODES)}")
        _choice("Workload", "recompute", self.recompute, ("none", "selective", "full", "op"),
                "'none', 'selective', 'full' or 'op'")
        _choice("Workload", "precision", self.precision, ("fp16", "bf16", "fp32", "fp8"),
                "'fp16', 'bf16', 'fp32' or 'fp8'")
        object.__setattr__(self, "sequence_parallel",
                           _flag("Workload", "sequence_parallel", self.sequence_parallel))
        object.__setattr__(self, "cuda_graphs", _flag("Workload", "cuda_graphs", self.cuda_graphs))
        for f in ("weight_dtype", "act_dtype", "kv_dtype"):
            _choice("Workload", f, getattr(self, f), ("", *DTYPE_BYTES),
                    f"one of {list(DTYPE_BYTES)} or '' for the model's own precision")
        if self.mode == "train":
            self._check_train_dtypes()
        if self.act_dtype == "int4":
            raise SpecError("Workload.act_dtype='int4' is not supported (int4 is weight-only, "
                            "W4A16); pass weight_dtype='int4' with act_dtype='bf16' or 'fp16'")
        _choice("Workload", "attention", self.attention, ("flash", "flash2", "unfused"),
                "'flash', 'flash2' or 'unfused'")
        _choice("Workload", "framework", self.framework, ("deepspeed", "megatron", "fsdp"),
                "'deepspeed', 'megatron' or 'fsdp'")
        _choice("Workload", "offload", self.offload, ("none", "optimizer", "optimizer+params"),
                "'none', 'optimizer' or 'optimizer+params'")
        _choice("Workload", "moe_dispatch", self.moe_dispatch, ("per_expert", "per_rank"),
                "'per_expert' (Megatron's alltoall dispatcher) or 'per_rank' (DeepEP)")
        _choice("Workload", "moe_routing", self.moe_routing, ("random", "round_robin"),
                "'random' or 'round_robin' (Automodel's FakeBalancedGate)")
        object.__setattr__(self, "moe_a2a_overlap",
                           _flag("Workload", "moe_a2a_overlap", self.moe_a2a_overlap))
        object.__setattr__(self, "tp_comm_overlap",
                           _flag("Workload", "tp_comm_overlap", self.tp_comm_overlap))
        object.__setattr__(self, "eager_elementwise",
                           _flag("Workload", "eager_elementwise", self.eager_elementwise))
        object.__setattr__(self, "eager_loss", _flag("Workload", "eager_loss", self.eager_loss))
        if self.tp_comm_overlap and not self.sequence_parallel:
            raise SpecError("Workload.tp_comm_overlap overlaps the sequence-parallel "
                            "all-gathers / reduce-scatters with the GEMMs: pass "
                            "sequence_parallel=True (or tp_comm_overlap=False)")
        if self.overlap_grad_reduce is not None:
            object.__setattr__(self, "overlap_grad_reduce",
                               _flag("Workload", "overlap_grad_reduce", self.overlap_grad_reduce))
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
        _validate_table(self, _WORKLOAD_RANGES)
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


#: Units of the six knobs; each must lie in [1e-3, 1e7] of its unit.
HW_UNITS: dict[str, str] = {
    "pe_hbm_gb": "GB", "bw_hbm_gbs": "GB/s", "peak_tflops_f16": "TFLOP/s",
    "bw_intra_gbs": "GB/s", "bw_inter_gbs": "GB/s", "bw_intersip_gbs": "GB/s",
}
_HW_RANGES: dict[str, _Range] = {
    k: _Range(1e-3, 1e7, HW_UNITS[k], integer=False) for k in HW_KNOBS
}


@dataclass(frozen=True)
class Hardware:
    """One point of the six hardware knobs (a PE = one accelerator die with its HBM).

    Each knob must lie in [0.001, 10⁷] of its unit (GB, GB/s, TFLOP/s).

    Examples
    --------
    >>> Hardware(bw_hbm_gbs=-1)
    Traceback (most recent call last):
    ...
    simcore.model.specs.SpecError: Hardware.bw_hbm_gbs must be a number in [0.001, 10000000] GB/s, got -1
    """

    pe_hbm_gb: float = 96.0
    bw_hbm_gbs: float = 4000.0
    peak_tflops_f16: float = 1000.0
    bw_intra_gbs: float = 900.0
    bw_inter_gbs: float = 400.0
    bw_intersip_gbs: float = 100.0

    def __post_init__(self) -> None:
        _validate_table(self, _HW_RANGES)

    def as_dict(self) -> dict[str, float]:
        return {f: float(getattr(self, f)) for f in HW_KNOBS}

    def scaled(self, **factors: float) -> Hardware:
        """A copy with some knobs multiplied by factors."""
        unknown = set(factors) - set(HW_KNOBS)
        if unknown:
            raise SpecError(f"unknown hardware knobs {sorted(unknown)}; known: {list(HW_KNOBS)}")
        return Hardware(**{k: v * factors.get(k, 1.0) for k, v in self.as_dict().items()})


_TOPOLOGY_RANGES: dict[str, _Range] = {
    "pes_per_cube": _Range(1, 1e6, "(PEs per cube)"),
    "cubes_per_sip": _Range(1, 1e6, "(cubes per SiP)"),
    "n_sips": _Range(1, 1e6, "(SiPs in the system)"),
    "alpha_intra_ns": _Range(0, 1e9, "ns", integer=False),
    "alpha_inter_ns": _Range(0, 1e9, "ns", integer=False),
    "alpha_intersip_ns": _Range(0, 1e9, "ns", integer=False),
    "nics_per_cube": _Range(0, 1e6, "(scale-out NICs per cube; 0 = one per PE)"),
    "fp8_ratio": _Range(0, 1e3, "(FP8 peak / 16-bit peak; 0 = no FP8)", integer=False),
    "int8_ratio": _Range(0, 1e3, "(INT8 peak / 16-bit peak; 0 = no INT8)", integer=False),
    "fa2_ratio": _Range(0.01, 1, "(FlashAttention-2-class / native attention rate)",
                        integer=False),
    "mm_ratio": _Range(0.1, 10, "(achievable matmul fraction of peak / Hopper's)",
                       integer=False),
    "pcie_gbs": _Range(0, 1e7, "GB/s (host link per device; 0 = none)", integer=False),
    "host_mem_gb": _Range(0, 1e9, "GB (host memory per device; 0 = none)", integer=False),
}
#: At most this many devices in one system.
MAX_DEVICES = 10**9


@dataclass(frozen=True)
class Topology:
    """Tier sizes and link latencies of a hardware family (not swept).

    PEs form a cube (``pes_per_cube``, linked by ``bw_intra_gbs``), cubes form a SiP
    (``cubes_per_sip``, ``bw_inter_gbs``), SiPs form the system (``n_sips``,
    ``bw_intersip_gbs``). For a GPU cluster: cube = NVLink node, SiP = rack/leaf, system =
    the scale-out network. Link latencies lie in [0, 10⁹] ns; at most 10⁹ devices.
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
    #: rate of a FlashAttention-2-class attention kernel (``Workload.attention="flash2"``)
    #: relative to the family's native fused kernel (1 = the same)
    fa2_ratio: float = 1.0
    #: the family's measured maximum achievable matmul fraction of its data-sheet peak,
    #: relative to Hopper's (the efficiency factors are fitted in Hopper's terms; 1 = the
    #: same): scales the matmul rate (projections, FFN, LM head), not attention
    mm_ratio: float = 1.0
    #: host link (PCIe) bandwidth per device in GB/s and host memory per device in GB,
    #: for offloading (0 = no offload possible)
    pcie_gbs: float = 0.0
    host_mem_gb: float = 0.0
    #: the cube's switch reduces in the network (NVLink SHARP on NVSwitch-3 systems,
    #: used by NCCL's NVLS algorithm): an all-reduce of 2 MB or more inside one cube runs
    #: at NVLS's measured bus bandwidth, a wire factor of at most
    #: ``kernels.collectives.NVLS_FACTOR`` (1.35) instead of a ring's 2(g-1)/g
    nvls: bool = False

    def __post_init__(self) -> None:
        _validate_table(self, _TOPOLOGY_RANGES)
        object.__setattr__(self, "nvls", _flag("Topology", "nvls", self.nvls))
        if self.n_devices > MAX_DEVICES:
            raise SpecError(
                f"Topology has {self.n_devices} devices (pes_per_cube · cubes_per_sip · "
                f"n_sips); at most {MAX_DEVICES} are supported, pass smaller tiers"
            )

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
    training matmuls (forward, backward, recomputation), ``attention`` /
    ``train_attention`` the attention core, ``memory`` scales ``bw_hbm_gbs``, ``network``
    the scale-up links and ``network_inter`` / ``network_sip`` the scale-out ones;
    ``hbm_usable`` is the part of HBM available to weights, KV and activations (the
    rest: runtime, fragmentation). Fractions lie in [0.001, 1].
    ``op_latency_ns`` is the fixed cost of one kernel launch, ``step_overhead_ns`` the
    framework's floor per inference step (a quarter with CUDA graphs).
    ``lowp_compute`` scales the FP8 / INT8 matmul peak (``Topology.fp8_ratio`` /
    ``int8_ratio`` x ``peak_tflops_f16``) of inference matmuls in those dtypes.
    ``roofline_overlap`` is how much of an op's shorter side (compute or HBM traffic)
    hides under the longer (1: ``max``, 0: sum), ``seq_overhead_ns`` the framework's
    host cost per sequence of an inference step, run one step ahead under the device's
    step (overlap scheduling), so a step takes the longer of the two.
    ``comm_contention`` is the share of compute throughput a collective takes while it
    runs under compute (Calculon's "processor usage" of the network: NCCL kernels occupy
    SMs and HBM bandwidth): a collective of
    ``X`` ns hidden under ``W`` ns of compute costs ``max(X - W, comm_contention * X)``
    beyond ``W`` instead of ``max(X - W, 0)``. It applies to every overlapped collective:
    the CP ring under attention (prefill and training) and, in training, prefetched
    ZeRO-3 / FSDP all-gathers, overlapped TP and MoE all-to-all and the bucketed gradient
    reduction under the backward pass (inference's other collectives block). Not fitted:
    held at 0.15, Calculon's ``processor_usage`` of NVLink (0 = free overlap).
    The defaults are the single fit over all of ``simcore.validation.MEASUREMENTS``
    (176 published training and inference results from 23 sources); see
    ``simcore/validation/fitted.py`` for how and the errors, and ``simcore validate``.
    """

    compute: float = 0.71
    memory: float = 0.822
    network: float = 0.673
    hbm_usable: float = 0.90
    train_compute: float = 0.663
    #: scale-out (inter-cube) and inter-SiP link factors; None = ``network`` for the
    #: first and ``network_inter`` for the second
    network_inter: float | None = 0.95
    network_sip: float | None = None
    #: attention-core matmul factors (inference, training); None = ``compute`` /
    #: ``train_compute``
    attention: float | None = 0.379
    train_attention: float | None = 0.339
    #: fixed device-side cost of one kernel (launched from the host, each also pays the
    #: host's launch time, kernels.inference.LAUNCH_NS, unless replayed from a CUDA graph),
    #: and the framework's floor per inference step (ns)
    op_latency_ns: float = 4160.0
    step_overhead_ns: float = 0.0
    #: achievable fraction of the low-precision (FP8 / INT8) matmul peak in inference;
    #: None = ``compute``. (Training FP8 GEMMs use ``train_compute``.)
    lowp_compute: float | None = 0.621
    #: share of the shorter of an op's compute time and HBM time that hides under the
    #: longer one: 1 is the classic roofline ``max(compute, memory)``, 0 their sum
    roofline_overlap: float = 0.304
    #: the framework's host cost per sequence it schedules in an inference step (ns):
    #: batch bookkeeping, sampling, KV block tables, overlapped with the device's step
    #: (the step takes the longer); not paid by training steps
    seq_overhead_ns: float = 39522.0
    #: share of compute throughput an overlapped collective takes while it runs (0 = free);
    #: held at Calculon's value for NVLink (see simcore/validation/fitted.py)
    comm_contention: float = 0.15

    def __post_init__(self) -> None:
        fraction = _Range(1e-3, 1, "(fraction of peak)", integer=False)
        optional = ("network_inter", "network_sip", "attention", "train_attention",
                    "lowp_compute")
        _validate_table(self, {
            **{f: fraction for f in ("compute", "memory", "network", "hbm_usable",
                                     "train_compute")},
            **{f: fraction for f in optional if getattr(self, f) is not None},
            "roofline_overlap": _Range(0, 1, "(share of the shorter side hidden)", integer=False),
            "comm_contention": _Range(0, 0.99, "(share of compute a running collective takes)",
                                      integer=False),
            **{f: _Range(0, 1e9, "ns", integer=False)
               for f in ("op_latency_ns", "step_overhead_ns", "seq_overhead_ns")},
        })


@dataclass(frozen=True)
class HardwareFamily:
    """A named preset: a hardware point plus its topology."""

    name: str
    hardware: Hardware = field(default_factory=Hardware)
    topology: Topology = field(default_factory=Topology)
    description: str = ""
