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
