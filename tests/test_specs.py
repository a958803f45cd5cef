import json
import math
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from simcore import HW_KNOBS, PRESETS, Hardware, Model, Topology, Workload
from simcore.hardware import specs as hardware_specs
from simcore.model import transformer, workload
from simcore.model.checks import Range
from simcore.model.presets import HARDWARE_FAMILIES, get_family, get_model
from simcore.model.specs import Efficiency, SpecError

DATA = Path(__file__).parent / "data"


@pytest.mark.parametrize("knob", HW_KNOBS)
@pytest.mark.parametrize("bad", [0, -1.0, float("nan"), float("inf"), "fast", None])
def test_hardware__rejects_non_positive_knob(knob, bad):
    with pytest.raises(ValueError, match=knob):
        Hardware(**{knob: bad})


def test_model__heads_must_divide_d_model():
    with pytest.raises(ValueError, match="n_heads=7 must divide Model.d_model=64"):
        Model("x", n_layers=1, d_model=64, n_heads=7, n_kv_heads=7, d_ff=8, vocab_size=8)


def test_model__kv_heads_must_divide_heads():
    with pytest.raises(ValueError, match="n_kv_heads=3"):
        Model("x", n_layers=1, d_model=64, n_heads=8, n_kv_heads=3, d_ff=8, vocab_size=8)


def test_model__top_k_bounded_by_experts():
    with pytest.raises(ValueError, match="top_k"):
        Model("x", n_layers=1, d_model=64, n_heads=8, n_kv_heads=8, d_ff=8, vocab_size=8,
              n_experts=2, top_k=3)


@pytest.mark.parametrize("field", ["n_layers", "d_model", "vocab_size"])
def test_model__rejects_non_positive(field):
    kw = dict(name="x", n_layers=1, d_model=64, n_heads=8, n_kv_heads=8, d_ff=8, vocab_size=8)
    kw[field] = 0
    with pytest.raises(ValueError, match=field):
        Model(**kw)


def test_workload__unknown_mode_lists_allowed():
    with pytest.raises(ValueError, match=r"pass one of \['prefill', 'decode', 'train'\]"):
        Workload("serve")


def test_workload__defaults_follow_mode():
    assert Workload("decode", s_kv=100).s_q == 1
    assert Workload("prefill", s_kv=100).s_q == 100
    assert Workload("train", s_kv=2048).seq_len == 2048


@pytest.mark.parametrize("kw", [dict(batch=0), dict(s_kv=-3), dict(s_q=5, s_kv=4, mode="prefill"),
                                dict(s_q=2, mode="decode")])
def test_workload__rejects_bad_sizes(kw):
    kw.setdefault("mode", "prefill")
    with pytest.raises(ValueError, match="Workload"):
        Workload(**kw)


def test_topology__rejects_bad_tiers():
    with pytest.raises(ValueError, match="pes_per_cube"):
        Topology(pes_per_cube=0)
    with pytest.raises(ValueError, match="alpha_intra_ns"):
        Topology(alpha_intra_ns=-1)
    with pytest.raises(ValueError, match="Topology.nvls must be True or False, got 'yes'"):
        Topology(nvls="yes")
    assert Topology(nvls=np.bool_(True)).nvls is True


def test_efficiency__fractions_only():
    with pytest.raises(ValueError, match="compute"):
        Efficiency(compute=1.5)


@pytest.mark.parametrize("kw, pattern", [
    ({"roofline_overlap": 1.5}, r"roofline_overlap must be a number in \[0, 1\]"),
    ({"roofline_overlap": -0.1}, r"roofline_overlap must be a number in \[0, 1\]"),
    ({"seq_overhead_ns": -1.0}, r"seq_overhead_ns must be a number in \[0, 1000000000\] ns"),
])
def test_efficiency__overlap_and_sequence_cost_ranges(kw, pattern):
    with pytest.raises(ValueError, match=pattern):
        Efficiency(**kw)
    # the edges are legal: the plain sum of compute and memory, no per-sequence cost
    assert Efficiency(roofline_overlap=0.0, seq_overhead_ns=0.0).roofline_overlap == 0.0


@pytest.mark.parametrize("name", list(PRESETS))
def test_presets__parameter_counts_match_reported(name):
    p = PRESETS[name]
    assert p.model.n_params / 1e9 == pytest.approx(p.reported_params_b, rel=0.01)


def test_presets__llama_70b_counts_70_6b():
    assert PRESETS["Llama 3.1 70B"].model.n_params == pytest.approx(70.6e9, rel=0.01)


def test_presets__required_models_and_families():
    for name in ("Llama 3.1 8B", "Llama 3.1 70B", "Llama 3.1 405B", "GPT-3 175B", "Mixtral 8x7B"):
        assert name in PRESETS
    assert PRESETS["Mixtral 8x7B"].model.n_experts > 1
    assert PRESETS["Mixtral 8x7B"].model.n_active_params == pytest.approx(12.9e9, rel=0.01)
    for fam in ("SiP", "A100-80G", "H100-SXM", "H200"):
        assert fam in HARDWARE_FAMILIES
    assert get_family("h100-sxm").hardware.peak_tflops_f16 == 989.0


def test_get_model__unknown_lists_presets():
    with pytest.raises(ValueError, match="Llama 3.1 70B"):
        get_model("Llama 9")
    with pytest.raises(ValueError, match="SiP"):
        get_family("TPU")


def test_from_hf_config__llama_matches_preset():
    m = Model.from_hf_config(DATA / "llama3_8b_config.json", name="Llama 3.1 8B")
    assert m == PRESETS["Llama 3.1 8B"].model


def test_from_hf_config__mixtral_experts():
    m = Model.from_hf_config(DATA / "mixtral_config.json")
    assert (m.n_experts, m.top_k) == (8, 2)
    assert m.n_params == PRESETS["Mixtral 8x7B"].model.n_params


def test_from_hf_config__bad_files(tmp_path):
    with pytest.raises(FileNotFoundError, match="no HuggingFace config"):
        Model.from_hf_config(tmp_path / "missing.json")
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    with pytest.raises(ValueError, match="not valid JSON"):
        Model.from_hf_config(bad)
    partial = tmp_path / "partial.json"
    partial.write_text(json.dumps({"hidden_size": 64}))
    with pytest.raises(ValueError, match="num_hidden_layers"):
        Model.from_hf_config(partial)


def test_model__kv_bytes_per_token():
    m = PRESETS["Llama 3.1 70B"].model
    assert m.kv_bytes_per_token == 2 * 80 * 8 * 128 * 2


# --- pinned kernel-facing properties ----------------------------------------------------
# Recorded from the code before the MoE/MLA/sliding-window fields were added: every preset
# and validation model must keep exactly these values (and types) of every property the
# kernels read.
PINNED_PROPS = ("attn_params_per_layer", "expert_params", "ffn_params_per_layer",
                "ffn_active_params_per_layer", "norm_params_per_layer", "n_active_params",
                "embedding_params", "n_params", "kv_bytes_per_token", "head_dim",
                "bytes_per_param", "bytes_per_kv")
PINNED = {
    'Llama 3.1 8B': (41943040, 176160768, 176160768, 176160768, 8192, 8030261248, 1050673152, 8030261248, 131072, 128, 2, 2),
    'Llama 3.1 70B': (150994944, 704643072, 704643072, 704643072, 16384, 70553706496, 2101346304, 70553706496, 327680, 128, 2, 2),
    'Llama 3.1 405B': (570425344, 2617245696, 2617245696, 2617245696, 32768, 405853388800, 4202692608, 405853388800, 516096, 128, 2, 2),
    'GPT-3 175B': (604028928, 1208020992, 1208020992, 1208020992, 24576, 174576721920, 617558016, 174576721920, 4718592, 128, 2, 2),
    'Mixtral 8x7B': (41943040, 176160768, 1409318912, 352354304, 8192, 12879925248, 262144000, 46702792704, 131072, 128, 2, 2),
    'Llama 2 7B': (67108864, 135266304, 135266304, 135266304, 8192, 6738415616, 262144000, 6738415616, 524288, 128, 2, 2),
    'Llama 2 70B': (150994944, 704643072, 704643072, 704643072, 16384, 68976648192, 524288000, 68976648192, 327680, 128, 2, 2),
    'Falcon 180B': (456130560, 1763704832, 1763704832, 1763704832, 29696, 179520174592, 1930952704, 179520174592, 163840, 64, 2, 2),
    # GPT-J: one norm per layer (its parallel block) since 2026-12-05, was 8192 / 6050254848
    'GPT-J 6B': (67108864, 134217728, 134217728, 134217728, 4096, 6050140160, 412876800, 6050140160, 458752, 256, 2, 2),
    'GPT 13B': (104857600, 209715200, 209715200, 209715200, 10240, 13098112000, 514785280, 13098112000, 819200, 128, 2, 2),
    'Llama 2 13B': (104857600, 212336640, 212336640, 212336640, 10240, 13015864320, 327680000, 13015864320, 819200, 128, 2, 2),
    'Megatron GPT 175B': (604028928, 1208020992, 1208020992, 1208020992, 24576, 174588309504, 629145600, 174588309504, 4718592, 128, 2, 2),
    'Megatron GPT 1T': (2621542400, 5243008000, 5243008000, 5243008000, 51200, 1007979750400, 1310720000, 1007979750400, 13107200, 160, 2, 2),
    'Megatron GPT 22B': (151019520, 302020608, 302020608, 302020608, 12288, 22061094912, 314572800, 22061094912, 1179648, 96, 2, 2),
    'Megatron GPT 530B': (1677803520, 3355545600, 3355545600, 3355545600, 40960, 529554554880, 1048576000, 529554554880, 8601600, 160, 2, 2),
}


def _known_models() -> dict[str, Model]:
    import simcore.validation.data as vd

    found = {p.model.name: p.model for p in PRESETS.values()}
    for value in vars(vd).values():
        if isinstance(value, Model):
            found.setdefault(value.name, value)
    return found


def test_pinned__every_known_model_is_pinned():
    assert set(_known_models()) == set(PINNED)


@pytest.mark.parametrize("name", sorted(PINNED))
def test_pinned__kernel_properties_unchanged(name):
    model = _known_models()[name]
    got = tuple(getattr(model, p) for p in PINNED_PROPS)
    assert dict(zip(PINNED_PROPS, got, strict=True)) == dict(zip(PINNED_PROPS, PINNED[name], strict=True))
    assert all(type(v) is int for v in got), [type(v).__name__ for v in got]


# --- physics ranges (issue 12) ----------------------------------------------------------
TINY = dict(name="t", n_layers=2, d_model=64, n_heads=4, n_kv_heads=2, d_ff=128, vocab_size=100)
RANGE_TABLES = [
    (Model, TINY, transformer._MODEL_RANGES),
    (Workload, dict(mode="prefill"), workload._WORKLOAD_RANGES),
    (Hardware, {}, hardware_specs._HW_RANGES),
    (Topology, {}, hardware_specs._TOPOLOGY_RANGES),
    (Efficiency, {}, {f: Range(1e-3, 1, "", integer=False) for f in
                      ("compute", "memory", "network", "hbm_usable", "train_compute")}),
]
RANGE_CASES = [(cls, base, name, rng) for cls, base, table in RANGE_TABLES
               for name, rng in table.items()]
RANGE_IDS = [f"{cls.__name__}.{name}" for cls, _, name, _ in RANGE_CASES]


def test_spec_error__is_the_value_error_users_get():
    assert issubclass(SpecError, ValueError)
    with pytest.raises(SpecError):
        Workload("decode", batch=0)


def test_workload__batch_1e20_message():
    with pytest.raises(SpecError) as err:
        Workload("decode", batch=1e20)
    assert str(err.value) == ("Workload.batch must be an integer in [1, 10000000] "
                              "(sequences per step), got 1e+20")


def test_hardware__denormal_link_rejected_with_unit():
    with pytest.raises(SpecError, match=r"Hardware\.bw_intra_gbs must be a number in "
                                        r"\[0\.001, 10000000\] GB/s, got 5e-324"):
        Hardware(bw_intra_gbs=5e-324)


@pytest.mark.parametrize(("cls", "base", "name", "rng"), RANGE_CASES, ids=RANGE_IDS)
def test_ranges__outside_rejected_naming_field(cls, base, name, rng):
    from simcore.model.runtime import PROFILE_FIELDS

    # None is "the runtime's" for the fields a runtime profile sets (simcore.model.runtime)
    unset_ok = cls is Workload and name in PROFILE_FIELDS
    for bad in (rng.hi * 10 + 1, rng.lo - 1, float("nan"), float("inf"), True, "1",
                *(() if unset_ok else (None,)), [1]):
        with pytest.raises(SpecError, match=rf"^{cls.__name__}\.{name} must be"):
            cls(**{**base, name: bad})


@pytest.mark.parametrize(("cls", "base", "name", "rng"),
                         [c for c in RANGE_CASES if c[3].integer],
                         ids=[i for i, c in zip(RANGE_IDS, RANGE_CASES, strict=True)
                              if c[3].integer])
def test_ranges__integers_not_truncated(cls, base, name, rng):
    with pytest.raises(SpecError, match=rf"{name} must be an integer .*, got {rng.lo + 0.5}"):
        cls(**{**base, name: rng.lo + 0.5})


@pytest.mark.parametrize(("cls", "base", "name", "rng"), RANGE_CASES, ids=RANGE_IDS)
def test_ranges__numpy_scalars_stored_as_python_numbers(cls, base, name, rng):
    default = getattr(cls(**base), name)
    kind = np.int64 if rng.integer else np.float64
    got = getattr(cls(**{**base, name: kind(default)}), name)
    assert got == default and type(got) is (int if rng.integer else float)
    if rng.integer:  # an integral float is an integer too
        assert type(getattr(cls(**{**base, name: float(default)}), name)) is int


def test_ranges__flags_reject_non_booleans():
    with pytest.raises(SpecError, match="Model.gated_ffn must be True or False, got 1"):
        Model(**TINY, gated_ffn=1)
    with pytest.raises(SpecError, match="Workload.sequence_parallel"):
        Workload("train", sequence_parallel="yes")
    with pytest.raises(SpecError, match="Workload.eager_loss must be True or False, got 'yes'"):
        Workload("train", eager_loss="yes")
    assert Model(**TINY, tied_embeddings=np.bool_(True)).tied_embeddings is True


def test_ranges__parameter_count_cannot_overflow_float64():
    with pytest.raises(SpecError, match="at most 1e15"):
        Model("huge", n_layers=10_000, d_model=1_000_000, n_heads=8, n_kv_heads=8,
              d_ff=10_000_000, vocab_size=10)


def test_topology__device_count_bounded():
    with pytest.raises(SpecError, match="at most 1000000000"):
        Topology(pes_per_cube=1000, cubes_per_sip=1000, n_sips=1001)


def test_model__explicit_head_dim_need_not_divide_d_model():
    m = Model("g", n_layers=2, d_model=3584, n_heads=16, n_kv_heads=8, d_ff=64, vocab_size=10,
              head_dim=256)
    assert m.attn_params_per_layer == 3584 * 16 * 256 * 2 + 2 * 3584 * 8 * 256


@pytest.mark.parametrize(("extra", "field"), [
    (dict(n_shared_experts=1), "n_shared_experts"),
    (dict(n_experts=4, top_k=2, n_dense_layers=2), "n_dense_layers"),
    (dict(n_experts=4, top_k=2, shared_d_ff=8), "shared_d_ff"),
    (dict(q_lora_rank=8), "q_lora_rank"),
    (dict(kv_lora_rank=8, qk_rope_head_dim=32), "qk_rope_head_dim"),
    (dict(sliding_window=16), "sliding_window"),
    (dict(sliding_window=16, n_local_layers=3), "n_local_layers"),
])
def test_model__inconsistent_new_fields_rejected(extra, field):
    with pytest.raises(SpecError, match=field):
        Model(**{**TINY, **extra})


# --- layer-average kernel properties ------------------------------------------------------
def _moe_models():
    yield Model("dsk", n_layers=5, d_model=64, n_heads=4, n_kv_heads=4, d_ff=320, vocab_size=50,
                n_experts=8, top_k=2, moe_d_ff=32, n_shared_experts=2, n_dense_layers=2,
                kv_lora_rank=16, q_lora_rank=24, qk_rope_head_dim=8, head_dim=24, v_head_dim=16,
                router_bias=True)
    yield Model("qmoe", n_layers=3, d_model=64, n_heads=4, n_kv_heads=2, d_ff=96, vocab_size=50,
                n_experts=6, top_k=3, moe_d_ff=24, n_shared_experts=1, shared_d_ff=96,
                shared_expert_gate=True, qkv_bias=True)


@pytest.mark.parametrize("model", list(_moe_models()), ids=lambda m: m.name)
def test_model__per_layer_averages_reproduce_totals(model):
    L = model.n_layers
    total = (L * (model.attn_params_per_layer + model.ffn_params_per_layer
                  + model.norm_params_per_layer) + model.embedding_params + model.d_model)
    active = (L * (model.attn_params_per_layer + model.ffn_active_params_per_layer
                   + model.norm_params_per_layer) + model.embedding_params + model.d_model)
    assert total == pytest.approx(model.n_params, rel=1e-12)
    assert active == pytest.approx(model.n_active_params, rel=1e-12)
    # what the kernels derive as "router" = everything always read in the FFN
    always = model.ffn_params_per_layer - model.n_experts * model.expert_params
    routed = L * model.n_experts * model.expert_params
    assert routed == pytest.approx(model.n_moe_layers * model.n_experts
                                   * model.routed_expert_params)
    assert L * always == pytest.approx(model.ffn_params_total - routed) and always > 0


def test_model__kv_bytes_windows_and_latent():
    mla = next(_moe_models())
    assert mla.kv_bytes_per_token == 5 * (16 + 8) * 2
    assert mla.kv_bytes(100) == 100 * mla.kv_bytes_per_token
    local = Model(**TINY, sliding_window=10, n_local_layers=1)
    per = 2 * 2 * 16 * 2  # kv heads · (k + v) head widths · bytes
    assert local.kv_bytes_per_token == 2 * per
    assert local.kv_bytes(4) == 4 * 2 * per            # inside the window
    assert local.kv_bytes(1000) == per * (1000 + 10)   # the local layer stops at 10
    assert local.kv_bytes(np.array([4, 1000])).tolist() == [8 * per, 1010 * per]
    assert local.attended_tokens(1000) == pytest.approx(505.0)
    with pytest.raises(SpecError, match="context"):
        local.kv_bytes(-1)


def test_model__experts_touched_matches_sampling():
    m = Model(**{**TINY, "n_experts": 16, "top_k": 2})
    rng = np.random.default_rng(0)
    for tokens in (1, 4, 16, 64):
        hits = [len({int(e) for _ in range(tokens) for e in rng.choice(16, 2, replace=False)})
                for _ in range(400)]
        assert m.experts_touched(tokens) == pytest.approx(np.mean(hits), rel=0.03)
    assert m.experts_touched(1) == pytest.approx(2) and m.experts_touched(10**6) == 16
    assert Model(**TINY).experts_touched(100) == 1.0


# --- Hugging Face reader (issues 11, 12, 16) ------------------------------------------------
BASE_CFG = {"model_type": "llama", "num_hidden_layers": 2, "hidden_size": 64,
            "num_attention_heads": 4, "intermediate_size": 128, "vocab_size": 100}


@pytest.mark.parametrize(("value", "says"), [
    ([4096], "must be a single number, got a JSON list"),
    (float("inf"), "must be a finite number, got inf"),
    (float("nan"), "must be a finite number, got nan"),
    (4096.7, "must be a whole number, got 4096.7"),
    ("32.0", "must be a JSON number, got the string '32.0'; write 32 without quotes"),
    ("abc", "must be a JSON number, got the string 'abc'"),
    (True, "must be a number, got True"),
    (-64, "must be >= 0"),
    ({"a": 1}, "must be a single number, got a JSON object"),
])
def test_from_hf_dict__bad_field_named(value, says):
    with pytest.raises(SpecError) as err:
        Model.from_hf_dict({**BASE_CFG, "hidden_size": value})
    assert "'hidden_size'" in str(err.value) and says in str(err.value)
    assert "\n" not in str(err.value)


def test_from_hf_config__json_overflow_and_nan_literals(tmp_path):
    for literal, says in (("1e400", "finite"), ("NaN", "finite"), ("[1, 2]", "list")):
        path = tmp_path / "config.json"
        text = json.dumps(BASE_CFG).replace('"hidden_size": 64', f'"hidden_size": {literal}')
        path.write_text(text)
        with pytest.raises(SpecError, match=rf"config.json'?: field 'hidden_size' .*{says}"):
            Model.from_hf_config(path)


def test_from_hf_dict__range_errors_say_where():
    with pytest.raises(SpecError, match=r"^cfg\.json: Model\.n_layers must be an integer"):
        Model.from_hf_dict({**BASE_CFG, "num_hidden_layers": 20_000}, source="cfg.json")


def test_from_hf_dict__falcon_kv_heads():
    falcon = {"model_type": "falcon", "num_hidden_layers": 2, "hidden_size": 4544,
              "num_attention_heads": 71, "vocab_size": 65024}
    m = Model.from_hf_dict({**falcon, "multi_query": True})
    assert (m.n_kv_heads, m.head_dim, m.gated_ffn, m.n_norms_per_layer) == (1, 64, False, 1)
    assert Model.from_hf_dict(falcon).n_kv_heads == 1  # multi_query defaults to true
    assert Model.from_hf_dict({**falcon, "multi_query": False}).n_kv_heads == 71
    big = {"model_type": "falcon", "num_hidden_layers": 2, "hidden_size": 14848,
           "num_attention_heads": 232, "num_kv_heads": 8, "new_decoder_architecture": True,
           "vocab_size": 65024}
    m = Model.from_hf_dict(big)
    assert (m.n_kv_heads, m.n_norms_per_layer, m.norm_bias) == (8, 2, True)


def test_from_hf_dict__gpt2_small_exact():
    gpt2 = {"model_type": "gpt2", "n_layer": 12, "n_embd": 768, "n_head": 12, "n_inner": None,
            "n_positions": 1024, "vocab_size": 50257, "activation_function": "gelu_new"}
    m = Model.from_hf_dict(gpt2)
    assert (m.d_ff, m.gated_ffn, m.tied_embeddings) == (3072, False, True)
    assert m.n_params == 124_439_808  # GPT-2 small as Hugging Face counts it


def test_from_hf_dict__layer_types_and_unknown_kinds():
    cfg = {**BASE_CFG, "sliding_window": 8, "layer_types": ["sliding_attention", "full_attention"]}
    m = Model.from_hf_dict(cfg)
    assert (m.sliding_window, m.n_local_layers) == (8, 1)
    with pytest.raises(SpecError, match="'layer_types' has \\['linear_attention'\\]"):
        Model.from_hf_dict({**cfg, "layer_types": ["linear_attention", "full_attention"]})
    with pytest.raises(SpecError, match="lists 1 layers but num_hidden_layers is 2"):
        Model.from_hf_dict({**cfg, "layer_types": ["full_attention"]})


def test_from_hf_dict__gemma3_text_config_and_defaults():
    cfg = {"model_type": "gemma3", "text_config": {
        "model_type": "gemma3_text", "num_hidden_layers": 12, "hidden_size": 64,
        "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 32,
        "intermediate_size": 128, "sliding_window": 16}}
    m = Model.from_hf_dict(cfg)
    assert (m.vocab_size, m.n_local_layers, m.tied_embeddings, m.qk_norm) == (262_208, 10, True,
                                                                              True)


# reference twin: count the tensors the transformers modules allocate, family by family
def _hf_tensors(cfg):
    """(numel, routed-expert index or None) of every weight the checkpoint would hold."""
    mt, d, L = cfg["model_type"], cfg["hidden_size"], cfg["num_hidden_layers"]
    h, V = cfg["num_attention_heads"], cfg["vocab_size"]
    out = []

    def t(*shape, expert=None):
        out.append((math.prod(shape), expert))

    if mt == "gpt2":
        ff, P = cfg.get("n_inner") or 4 * d, cfg["n_positions"]
        t(V, d), t(P, d), t(d), t(d)
        for _ in range(L):
            t(d), t(d), t(d, 3 * d), t(3 * d), t(d, d), t(d), t(d), t(d), t(d, ff), t(ff)
            t(ff, d), t(d)
        return out
    if mt == "falcon":
        kv = cfg.get("num_kv_heads", h) if cfg.get("new_decoder_architecture") else 1
        hd = d // h
        t(V, d), t(d), t(d)
        for _ in range(L):
            t(d), t(d)
            if cfg.get("new_decoder_architecture"):
                t(d), t(d)
            t((h + 2 * kv) * hd, d), t(d, h * hd), t(4 * d, d), t(d, 4 * d)
        return out
    kv = cfg.get("num_key_value_heads", h)
    mla = "kv_lora_rank" in cfg
    hd = cfg.get("head_dim") or d // h
    qkv_b = mt == "qwen2_moe" or cfg.get("attention_bias", False)
    o_b = cfg.get("attention_bias", False)
    E = cfg.get("num_local_experts") or cfg.get("num_experts") or cfg.get("n_routed_experts") or 1
    ff = cfg["intermediate_size"]
    t(V, d), t(d)
    if not cfg.get("tie_word_embeddings", False):
        t(V, d)
    for i in range(L):
        t(d), t(d)  # input and post-attention norms
        if mt == "gemma2":
            t(d), t(d)
        if mla:
            r, qr = cfg["kv_lora_rank"], cfg.get("q_lora_rank") or 0
            rope, nope, vd = cfg["qk_rope_head_dim"], cfg["qk_nope_head_dim"], cfg["v_head_dim"]
            if qr:
                t(qr, d), t(qr), t(h * (nope + rope), qr)
            else:
                t(h * (nope + rope), d)
            t(r + rope, d), t(r), t(h * (nope + vd), r), t(d, h * vd)
        else:
            t(h * hd, d), t(kv * hd, d), t(kv * hd, d), t(d, h * hd)
            if qkv_b:
                t(h * hd), t(kv * hd), t(kv * hd)
            if o_b:
                t(d)
            if mt == "qwen3_moe":
                t(hd), t(hd)
            if mt == "gpt_oss":
                t(h)
        if mt.startswith("deepseek"):
            moe = i >= cfg.get("first_k_dense_replace", 0)
        elif mt in ("qwen2_moe", "qwen3_moe"):
            moe = (i not in cfg.get("mlp_only_layers", [])
                   and (i + 1) % cfg.get("decoder_sparse_step", 1) == 0)
        else:
            moe = E > 1
        if not moe:
            t(ff, d), t(ff, d), t(d, ff)
            continue
        eff = cfg.get("moe_intermediate_size", ff)
        t(E, d)  # router
        if mt == "gpt_oss" or cfg.get("topk_method") == "noaux_tc":
            t(E)
        for j in range(E):
            t(d, 2 * eff, expert=j), t(eff, d, expert=j)  # gate+up, down
            if mt == "gpt_oss":
                t(2 * eff, expert=j), t(d, expert=j)
        if mt == "qwen2_moe":
            s = cfg["shared_expert_intermediate_size"]
            t(s, d), t(s, d), t(d, s), t(1, d)
        if mt.startswith("deepseek"):
            t(3 * d * eff * cfg.get("n_shared_experts", 0))
    return out


TWIN_FAMILIES = ("gpt2", "falcon", "llama", "qwen2_moe", "qwen3_moe", "deepseek_v3", "gpt_oss",
                 "gemma2", "mixtral")


def _family_cfg(draw, mt):
    h = draw(st.sampled_from([2, 4, 8]))
    d = h * draw(st.sampled_from([4, 8, 16]))
    cfg = {"model_type": mt, "num_hidden_layers": draw(st.integers(1, 6)), "hidden_size": d,
           "num_attention_heads": h, "vocab_size": draw(st.integers(1, 300)),
           "intermediate_size": draw(st.integers(1, 96))}
    if mt == "gpt2":
        return {"model_type": "gpt2", "n_layer": cfg["num_hidden_layers"], "n_embd": d,
                "n_head": h, "n_inner": draw(st.none() | st.integers(1, 96)),
                "n_positions": draw(st.integers(1, 64)), "vocab_size": cfg["vocab_size"],
                "num_hidden_layers": cfg["num_hidden_layers"], "hidden_size": d,
                "num_attention_heads": h}
    if mt == "falcon":
        new = draw(st.booleans())
        out = {**cfg, "new_decoder_architecture": new, "multi_query": True}
        out.pop("intermediate_size")
        if new:
            out["num_kv_heads"] = draw(st.sampled_from([x for x in (1, 2, h) if h % x == 0]))
        return out
    cfg["num_key_value_heads"] = draw(st.sampled_from([x for x in (1, 2, h) if h % x == 0]))
    cfg["tie_word_embeddings"] = draw(st.booleans())
    if mt in ("llama", "gpt_oss", "gemma2"):
        cfg["attention_bias"] = draw(st.booleans()) or mt == "gpt_oss"
        cfg["head_dim"] = draw(st.sampled_from([4, 8, 24]))
    if mt in ("qwen2_moe", "qwen3_moe", "deepseek_v3", "gpt_oss", "mixtral"):
        E = draw(st.integers(2, 9))
        cfg.update(num_experts_per_tok=draw(st.integers(1, E)))
        key = {"mixtral": "num_local_experts", "gpt_oss": "num_local_experts",
               "deepseek_v3": "n_routed_experts"}.get(mt, "num_experts")
        cfg[key] = E
    if mt in ("qwen2_moe", "qwen3_moe", "deepseek_v3"):
        cfg["moe_intermediate_size"] = draw(st.integers(1, 48))
    if mt == "qwen2_moe":
        cfg.update(shared_expert_intermediate_size=draw(st.integers(1, 64)),
                   decoder_sparse_step=draw(st.integers(1, 2)),
                   mlp_only_layers=draw(st.lists(st.integers(0, 5), max_size=2, unique=True)))
    if mt == "qwen3_moe":
        cfg["head_dim"] = draw(st.sampled_from([4, 8, 24]))
    if mt == "deepseek_v3":
        rope = draw(st.sampled_from([0, 4, 8]))
        cfg.update(kv_lora_rank=draw(st.integers(1, 32)), q_lora_rank=draw(st.none() | st.integers(1, 32)),
                   qk_rope_head_dim=rope, qk_nope_head_dim=draw(st.integers(1, 16)),
                   v_head_dim=draw(st.integers(1, 16)), n_shared_experts=draw(st.integers(0, 2)),
                   first_k_dense_replace=draw(st.integers(0, cfg["num_hidden_layers"] - 1)),
                   topk_method=draw(st.sampled_from(["greedy", "noaux_tc"])))
    return cfg


@pytest.mark.parametrize("family", TWIN_FAMILIES)
@given(data=st.data())
def test_from_hf_dict__counts_equal_the_tensor_twin(family, data):
    cfg = data.draw(st.composite(lambda draw: _family_cfg(draw, family))())
    model = Model.from_hf_dict(cfg, name="twin")
    tensors = _hf_tensors(cfg)
    assert model.n_params == sum(n for n, _ in tensors)
    k = model.top_k
    active = sum(n for n, e in tensors if e is None or e < k)
    assert model.n_active_params == active


def test_model__value_width_enters_kv_cache_and_attention():
    m = Model(**TINY, v_head_dim=8)  # head_dim 16, 2 KV heads, 2 layers
    assert m.kv_bytes_per_token == 2 * 2 * (16 + 8) * 2
    assert m.attn_core_flops_per_pair == 2 * 4 * (16 + 8)
    assert m.attn_params_per_layer == 64 * 4 * 16 + 64 * 2 * (16 + 8) + 4 * 8 * 64
    assert Model(**TINY).attn_core_flops_per_pair == 4 * 4 * 16
