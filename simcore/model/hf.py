"""The Hugging Face ``config.json`` reader: a config's contents as :class:`~simcore.model.
transformer.Model` keyword arguments (see :meth:`Model.from_hf_dict
<simcore.model.transformer.Model.from_hf_dict>`).

It reads the decoder-only families the catalogue ships (Llama, Llama 4, Mistral, Mixtral, Qwen,
DeepSeek, Gemma, Phi, GPT-OSS, Falcon, GPT-2) and refuses what simcore does not model
(encoder-decoder configs such as T5 or BART) with one line saying what to pass instead.
Every bad field raises :class:`~simcore.errors.SpecError` naming it.

:func:`cached_hf_config` finds a model's ``config.json`` in the local Hugging Face cache
by its id, offline (``huggingface_hub.try_to_load_from_cache``: files only, never the
network), in the folder :func:`hf_cache_dir` names.
"""

from __future__ import annotations

import json
import math
import numbers
import os
from typing import Any

from ..errors import SpecError
from .checks import show

__all__ = ["cached_hf_config", "hf_cache_dir", "hf_context_tokens", "hf_model_kwargs",
           "looks_like_hub_id", "read_hf_config"]

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
                                "qwen3_moe", "phi3", "deepseek_v2", "deepseek_v3", "gpt_oss",
                                "llama4", "llama4_text"})
#: Llama 4 (``text_config`` of ``llama4``): MoE layers every ``interleave_moe_layer_step``-th
#: layer, each with one shared expert; chunked attention on the RoPE layers.
_LLAMA4_TYPES = frozenset({"llama4", "llama4_text"})
#: transformers' ``Llama4TextConfig.no_rope_layer_interval`` default: every 4th layer is a
#: global NoPE layer, the others RoPE layers with chunked attention.
_LLAMA4_NOPE_INTERVAL = 4
#: ``vocab_size`` when a config omits it (transformers' Gemma3TextConfig default).
_VOCAB_DEFAULTS = {"gemma3_text": 262_208, "gemma3": 262_208}
#: Keys naming the context length a model was trained for, and its value when a config
#: omits them (transformers' Gemma3TextConfig default); shown, never used in the physics.
_CONTEXT_KEYS = ("max_position_embeddings", "n_positions", "seq_length")
_CONTEXT_DEFAULTS = {"gemma3_text": 131_072, "gemma3": 131_072}
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
            raise self.fail(key, f"must be a finite number, got {show(v)}")
        if not x.is_integer():
            raise self.fail(key, f"must be a whole number, got {show(v)}")
        if x < 0:
            raise self.fail(key, f"must be >= 0, got {show(v)}")
        if x > 2**53:
            raise self.fail(key, f"is implausibly large ({show(v)}); pass the value from the "
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


def hf_model_kwargs(cfg: Any, source: str) -> dict[str, Any]:
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

    # FFN and biases (Llama 4: intermediate_size_mlp is the dense layers' FFN,
    # intermediate_size an expert's)
    d_ff = r.integer(*(("intermediate_size_mlp",) if mt in _LLAMA4_TYPES else ()),
                     "intermediate_size", "n_inner", "ffn_hidden_size", "ffn_dim", default=4 * d)
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
        if mt in _LLAMA4_TYPES:  # Llama4TextMoe: routed experts plus one shared expert
            kw.update(moe_d_ff=r.integer("intermediate_size"), n_shared_experts=1)
        elif mt in ("qwen2_moe", "qwen3_moe"):
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
    if mt in _LLAMA4_TYPES or r.has("interleave_moe_layer_step"):
        # transformers' Llama4TextConfig: moe_layers, else every step-th layer from step-1
        if r.has("moe_layers"):
            return len({i for i in r.int_list("moe_layers") if i < n_layers})
        step = r.integer("interleave_moe_layer_step", default=1)
        return len(range(step - 1, n_layers, step)) if step else 0
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
    chunked = mt in _LLAMA4_TYPES and r.has("attention_chunk_size")
    if types is not None:
        local = "chunked_attention" if chunked else "sliding_attention"
        unknown = sorted(set(types) - {local, "full_attention"})
        if unknown:
            raise r.fail("layer_types", f"has {unknown}: only {local} and full_attention "
                                        "layers are modelled")
        n_local = types.count(local)
        key = "attention_chunk_size" if chunked else "sliding_window"
        window = r.integer(key, default=0) if n_local else 0
    elif chunked:  # Llama 4: the RoPE layers (no_rope_layers[i] == 1) attend in chunks
        rope = r.int_list("no_rope_layers")
        if rope and len(rope) != n_layers:
            raise r.fail("no_rope_layers", f"lists {len(rope)} layers but num_hidden_layers "
                                           f"is {n_layers}")
        interval = r.integer("no_rope_layer_interval", default=_LLAMA4_NOPE_INTERVAL) or 1
        n_local = (sum(1 for x in rope if x) if rope
                   else sum(1 for i in range(n_layers) if (i + 1) % interval != 0))
        window = r.integer("attention_chunk_size")
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


def read_hf_config(path: str) -> tuple[dict[str, Any], str]:
    """The JSON object of the ``config.json`` at ``path`` and the model name it implies
    (``_name_or_path``, else ``model_type``, else the folder's name)."""
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
    fallback = os.path.basename(os.path.dirname(os.path.abspath(where))) or "hf-model"
    raw = cfg.get("_name_or_path")
    if isinstance(raw, str) and raw.strip():
        return cfg, raw
    mt = cfg.get("model_type")
    return cfg, mt if isinstance(mt, str) and mt.strip() else fallback


def hf_context_tokens(cfg: Any) -> int | None:
    """The context length (tokens) a config.json declares: ``max_position_embeddings``
    (GPT-2's ``n_positions``), read from a multimodal wrapper's ``text_config`` too, or
    transformers' default for a model type that omits it; None if neither says.

    Examples
    --------
    >>> hf_context_tokens({"max_position_embeddings": 131072})
    131072
    >>> hf_context_tokens({"model_type": "gemma3", "text_config": {"model_type": "gemma3_text"}})
    131072
    """
    if not isinstance(cfg, dict):
        return None
    for where in (cfg, cfg.get("text_config")):
        if not isinstance(where, dict):
            continue
        for key in _CONTEXT_KEYS:
            value = where.get(key)
            if isinstance(value, int) and not isinstance(value, bool) and value > 0:
                return value
    for where in (cfg.get("text_config"), cfg):
        if isinstance(where, dict) and where.get("model_type") in _CONTEXT_DEFAULTS:
            return _CONTEXT_DEFAULTS[where["model_type"]]
    return None


def hf_cache_dir() -> str:
    """The local Hugging Face hub cache, found as ``huggingface_hub`` finds it, from the
    environment at the time of the call: ``HF_HUB_CACHE``, else ``HUGGINGFACE_HUB_CACHE``,
    else ``$HF_HOME/hub``, else ``$XDG_CACHE_HOME/huggingface/hub``, else
    ``~/.cache/huggingface/hub``.

    Examples
    --------
    >>> import os
    >>> os.path.basename(hf_cache_dir()) != ""
    True
    """
    env = os.environ
    for key in ("HF_HUB_CACHE", "HUGGINGFACE_HUB_CACHE"):
        if env.get(key):
            return os.path.expanduser(os.path.expandvars(env[key]))
    home = env.get("HF_HOME") or os.path.join(
        env.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache"),
        "huggingface")
    return os.path.join(os.path.expanduser(os.path.expandvars(home)), "hub")


def looks_like_hub_id(text: str) -> bool:
    """Whether ``text`` is spelled like a Hugging Face model id (``org/name``: one slash,
    neither part empty, not a path that starts with ``.``, ``/`` or ``~``, not a ``.json``
    file name).

    Examples
    --------
    >>> looks_like_hub_id("meta-llama/Llama-3.1-8B"), looks_like_hub_id("./cfg/config.json")
    (True, False)
    """
    org, sep, name = text.strip().partition("/")
    return (bool(sep and org and name) and "/" not in name and "\\" not in text
            and not text.startswith((".", "~", os.sep)) and not name.endswith(".json")
            and not any(c.isspace() for c in text.strip()))


def cached_hf_config(repo_id: str, *, cache_dir: str | None = None) -> str | None:
    """The path of ``repo_id``'s ``config.json`` in the local Hugging Face cache, or None.

    Offline: ``huggingface_hub.try_to_load_from_cache`` reads the cache's files only
    (``models--<org>--<name>/refs/main`` names the snapshot; the id's case need not
    match the folder's); when ``refs/main`` is absent (a download pinned to a
    revision), the newest snapshot holding a ``config.json`` is taken. ``cache_dir``
    defaults to :func:`hf_cache_dir`.
    """
    folder = cache_dir or hf_cache_dir()
    if not looks_like_hub_id(repo_id):
        return None
    want = "models--" + repo_id.strip().replace("/", "--")
    try:
        entries = os.listdir(folder)
    except OSError:
        return None
    # the cache keeps the id's case; a differently cased id finds its folder too
    repo = want if want in entries else next(
        (e for e in entries if e.lower() == want.lower()), None)
    if repo is None:
        return None
    repo_id = repo.removeprefix("models--").replace("--", "/", 1)
    try:
        from huggingface_hub import try_to_load_from_cache
    except ImportError:  # a declared dependency; without it, read the layout directly
        found: Any = None
    else:
        try:
            found = try_to_load_from_cache(repo_id, "config.json", cache_dir=folder)
        except ValueError:  # huggingface_hub refuses the id's spelling
            return None
    if isinstance(found, str) and os.path.isfile(found):
        return found
    snapshots = os.path.join(folder, repo, "snapshots")
    try:
        revisions = os.listdir(snapshots)
    except OSError:
        return None
    configs = [p for r in revisions if os.path.isfile(p := os.path.join(snapshots, r,
                                                                         "config.json"))]
    return max(configs, key=os.path.getmtime) if configs else None
