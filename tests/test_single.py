"""The single-configuration fast path: same numbers as evaluate and as the twins."""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import simcore
from simcore import Workload
from simcore.engine.space import CHOICES
from simcore.errors import SimcoreInputError
from simcore.kernels import inference_ref, training_ref
from simcore.model.presets import get_family, get_model

FAMILIES = ["SiP", "H100-SXM", "A100-80G"]
MODELS = ["Llama 3.1 8B", "Llama 3.1 70B", "Mixtral 8x7B"]
pow2 = st.sampled_from([1, 2, 4, 8])
layouts = st.fixed_dictionaries(
    {"cp": pow2, "tp": pow2, "pp": st.sampled_from([1, 2, 4]), "dp": st.sampled_from([1, 2])},
    optional={d: st.sampled_from(CHOICES[d]) for d in CHOICES},
)
workloads = st.one_of(
    st.builds(lambda b, s: Workload("decode", batch=b, s_kv=s),
              st.sampled_from([1, 4, 16]), st.sampled_from([1024, 8192])),
    st.builds(lambda b, s: Workload("prefill", batch=b, s_kv=s, s_q=s),
              st.sampled_from([1, 2]), st.sampled_from([512, 4096])),
    st.builds(lambda b, mb, z: Workload("train", batch=b, s_kv=2048, micro_batch=mb, zero_stage=z),
              st.sampled_from([8, 16]), st.sampled_from([1, 2]), st.integers(0, 3)),
)


def _space(layout, mode):
    row = {"cp": 1, "tp": 1, "pp": 1, "dp": 1, "kv_shard_mode": "head", "ffn_shard_scope": "TP",
           "tp_placement": "inner", "cp_placement": "inner",
           "cp_ring_variant": "qoml" if mode == "decode" else "kv", "ep": 1, **layout}
    return {k: (v,) for k, v in row.items()}, row


@settings(max_examples=40, deadline=None)
@given(st.sampled_from(MODELS), workloads, layouts, st.sampled_from(FAMILIES))
def test_predict__identical_to_evaluate(model, wl, layout, family):
    got = simcore.predict(model, wl, layout, family=family)
    space, _ = _space(layout, wl.mode)
    ds = simcore.evaluate(model, wl, space=space, family=family)
    assert got.valid == bool(ds.valid.values.ravel()[0])
    for name in ("latency_ns", "throughput_tok_s", "flops_per_device", "compute_ns",
                 "memory_ns", "comm_ns", "overhead_ns", "mem_bytes"):
        want = float(ds[name].values.ravel()[0])
        have = getattr(got, name)
        assert (math.isnan(want) and math.isnan(have)) or have == want, name
    assert got.fits == bool(ds.fits.values.ravel()[0])


@settings(max_examples=40, deadline=None)
@given(st.sampled_from(MODELS), workloads, layouts, st.sampled_from(FAMILIES))
def test_predict__matches_the_reference_twin(model, wl, layout, family):
    got = simcore.predict(model, wl, layout, family=family)
    _, row = _space(layout, wl.mode)
    fam, m = get_family(family), get_model(model)
    twin = training_ref if wl.mode == "train" else inference_ref
    want = twin.evaluate_point(m, wl, fam.hardware, fam.topology, simcore.Efficiency(),
                               twin.Layout(**row))
    assert got.valid == want["valid"]
    if not want["valid"]:
        assert math.isnan(got.latency_ns)
        return
    assert got.latency_ns == pytest.approx(want["latency_ns"], rel=1e-9)
    assert got.mem_bytes == pytest.approx(want["mem_bytes"], rel=1e-9)
    assert got.fits == want["fits"]


def test_predict__overrides_knobs_of_the_family():
    wl = Workload("decode", s_kv=8192)
    base = simcore.predict("Llama 3.1 8B", wl, {"tp": 2}, family="H100-SXM")
    fast = simcore.predict("Llama 3.1 8B", wl, {"tp": 2}, {"bw_hbm_gbs": 6700}, family="H100-SXM")
    assert fast.latency_ns < base.latency_ns


@pytest.mark.parametrize("layout, match", [
    ({"xp": 2}, "unknown layout dims"),
    ({"tp": 0}, "positive integer"),
    ({"tp": 2.5}, "positive integer"),
    ({"kv_shard_mode": "diagonal"}, "is unknown"),
])
def test_predict__bad_layout_says_what_to_pass(layout, match):
    with pytest.raises(SimcoreInputError, match=match):
        simcore.predict("Llama 3.1 8B", Workload("decode"), layout)


def test_predict__bad_workload_is_an_input_error():
    with pytest.raises(SimcoreInputError, match="simcore.Workload"):
        simcore.predict("Llama 3.1 8B", {"mode": "decode"})


def test_predict__warm_call_is_the_first_call():
    """The second call with the same arguments (resolved once, the compiled kernel called
    without numba's dispatch) gives the same Prediction, same field types."""
    import dataclasses

    wl = Workload("decode", batch=4, s_kv=4096)
    for layout, hardware in (({"tp": 2}, None), ({"tp": 4, "dp": 2}, {"bw_hbm_gbs": 5000.0}),
                             ({"tp": 3}, None)):
        first = simcore.predict("Llama 3.1 8B", wl, layout, hardware, family="H100-SXM")
        again = simcore.predict("Llama 3.1 8B", wl, dict(layout), hardware and dict(hardware),
                                family="H100-SXM")
        a, b = dataclasses.astuple(first), dataclasses.astuple(again)
        assert [type(v) for v in a] == [type(v) for v in b]
        assert all((v != v and w != w) or v == w for v, w in zip(a, b, strict=True))
        assert type(first.latency_ns) is float and type(first.fits) is bool
        with pytest.raises(dataclasses.FrozenInstanceError):
            again.latency_ns = 0.0  # type: ignore[misc]


@pytest.mark.parametrize("bad", [2.0, True])
def test_predict__a_cached_size_does_not_admit_an_equal_float_or_bool(bad):
    wl = Workload("decode", s_kv=2048)
    simcore.predict("Llama 3.1 8B", wl, {"tp": 2 if bad == 2.0 else 1})
    with pytest.raises(SimcoreInputError, match="positive integer"):
        simcore.predict("Llama 3.1 8B", wl, {"tp": bad})
