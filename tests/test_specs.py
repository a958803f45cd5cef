import json
from pathlib import Path

import pytest

from simcore import HW_KNOBS, PRESETS, Hardware, Model, Topology, Workload
from simcore.presets import HARDWARE_FAMILIES, get_family, get_model
from simcore.specs import Efficiency

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


def test_efficiency__fractions_only():
    with pytest.raises(ValueError, match="compute"):
        Efficiency(compute=1.5)


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
    'GPT-J 6B': (67108864, 134217728, 134217728, 134217728, 8192, 6050254848, 412876800, 6050254848, 458752, 256, 2, 2),
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
    assert dict(zip(PINNED_PROPS, got)) == dict(zip(PINNED_PROPS, PINNED[name]))
    assert all(type(v) is int for v in got), [type(v).__name__ for v in got]
