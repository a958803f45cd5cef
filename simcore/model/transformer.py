"""The model declaration: :class:`Model`, a decoder-only transformer (dense,
mixture-of-experts, MLA, sliding-window), its field ranges and parameter counts.

Reading a Hugging Face ``config.json`` into one is :mod:`simcore.model.hf`.
"""

from __future__ import annotations

import numbers
import os
from dataclasses import dataclass, field
from typing import Any

from ..errors import SpecError
from .checks import Range, checked, flag, validate_table
from .hf import hf_model_kwargs, read_hf_config

__all__ = ["MAX_PARAMS", "Model"]


def _per_layer(total: int, n_layers: int) -> int | float:
    """A model total spread over its layers: an int when it divides evenly."""
    whole, rest = divmod(total, n_layers)
    return whole if rest == 0 else total / n_layers


_MODEL_RANGES: dict[str, Range] = {
    "n_layers": Range(1, 10_000, "(decoder layers)"),
    "d_model": Range(1, 1e6, "(hidden size)"),
    "n_heads": Range(1, 1e5, "(query heads)"),
    "n_kv_heads": Range(1, 1e5, "(key/value heads)"),
    "d_ff": Range(1, 1e7, "(FFN width of a dense layer)"),
    "vocab_size": Range(1, 1e8, "(tokens)"),
    "n_experts": Range(1, 1e5, "(routed experts per MoE layer; 1 = dense)"),
    "top_k": Range(1, 1e5, "(routed experts per token)"),
    "bytes_per_param": Range(1, 8, "bytes"),
    "bytes_per_kv": Range(1, 8, "bytes"),
    "head_dim": Range(0, 1e5, "(query/key head width; 0 = d_model // n_heads)"),
    "v_head_dim": Range(0, 1e5, "(value head width; 0 = head_dim)"),
    "n_norms_per_layer": Range(1, 8, "(norm layers per decoder layer)"),
    "learned_pos_embeddings": Range(0, 1e8, "(rows of a learned position table; 0 = none)"),
    "moe_d_ff": Range(0, 1e7, "(FFN width of one routed expert; 0 = d_ff)"),
    "n_shared_experts": Range(0, 1e4, "(always-active experts per MoE layer)"),
    "shared_d_ff": Range(0, 1e7, "(FFN width of one shared expert; 0 = moe_d_ff)"),
    "n_dense_layers": Range(0, 10_000, "(dense FFN layers of an MoE model)"),
    "kv_lora_rank": Range(0, 1e6, "(MLA latent width; 0 = no MLA)"),
    "q_lora_rank": Range(0, 1e6, "(MLA query low-rank width; 0 = full-rank queries)"),
    "qk_rope_head_dim": Range(0, 1e5, "(MLA decoupled RoPE width per head)"),
    "sliding_window": Range(0, 1e8, "tokens (local attention span; 0 = none)"),
    "n_local_layers": Range(0, 10_000, "(layers with sliding-window attention)"),
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
    note : str
        How the model was found when not by its own name (a model-card alias, the local
        Hugging Face cache: :func:`simcore.model.presets.load_model`), for the commands'
        notes. Not part of the shape: ``==`` and ``hash`` ignore it.

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
    simcore.errors.SpecError: Model.d_ff must be an integer in [1, 10000000] (FFN width of a dense layer), got 256.5
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
    note: str = field(default="", compare=False, repr=False)

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not self.name.strip():
            raise SpecError(f"Model.name must be a non-empty string, got {self.name!r}")
        validate_table(self, _MODEL_RANGES)
        for f in _MODEL_FLAGS:
            object.__setattr__(self, f, flag("Model", f, getattr(self, f)))
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
            c = int(checked("Model.kv_bytes", "context", context, Range(0, 1e8, "tokens")))
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
        simcore.errors.SpecError: config: field 'hidden_size' must be a JSON number, got the string '64'; write 64 without quotes
        """
        kwargs = hf_model_kwargs(cfg, source)
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
        cfg, default_name = read_hf_config(where)
        return cls.from_hf_dict(cfg, name=default_name if name is None else name,
                                source=repr(where))
