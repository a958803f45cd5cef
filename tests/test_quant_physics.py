"""Weight-only quantisation, the attention kernel class and the serving loop's host time
per step (issue 32 item 3, the inference side): each priced as declared, the kernel row
against its plain twin on drawn inputs, and the defaults leaving every other point as it
was."""

from __future__ import annotations

import math
from dataclasses import replace

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from test_kernels import (
    OUT_NAMES,
    _kernel_point,
    _layout_row,
    efficiencies,
    hardware,
    layouts,
    models,
    topologies,
    workloads,
)
from test_pieces import _RUNTIME, _WO_RATES

import simcore
from simcore import Workload
from simcore.errors import SpecError
from simcore.hardware.families import get_family, provenance
from simcore.kernels import inference as ki
from simcore.kernels import inference_ref as ref
from simcore.kernels import schema
from simcore.validation import FITTED_EFFICIENCY

REL = 1e-9
H100 = get_family("H100-SXM")
A100 = get_family("A100-80G")
LLAMA = simcore.get_model("Llama 3.1 8B")
TP1 = ref.Layout(cp=1, tp=1, pp=1, dp=1, kv_shard_mode="head", ffn_shard_scope="TP",
                 tp_placement="inner", cp_placement="inner", cp_ring_variant="kv", ep=1)


def _coeffs(workload, fam=H100, model=LLAMA, lay=TP1):
    return ki.layout_coeffs(_layout_row(lay), schema.pack_model(model),
                            schema.pack_workload(workload), schema.pack_topology(fam.topology))[0]


@settings(max_examples=150)
@given(models(), workloads(), hardware, topologies, efficiencies, layouts, st.data())
def test_kernel_row__matches_twin_with_runtime_settings(model, workload, hw, topo, eff, lay, data):
    """The whole point, kernel against twin, with the weight-only formats, the attention
    class and the host time per step drawn too."""
    workload = replace(workload, **{k: data.draw(v) for k, v in _RUNTIME.items()})
    topo = replace(topo, **{k: data.draw(v) for k, v in _WO_RATES.items()})
    got = _kernel_point(model, workload, hw, topo, eff, lay)
    want = ref.evaluate_point(model, workload, hw, topo, eff, lay)
    assert got["valid"] == want["valid"] and got["fits"] == want["fits"]
    if not want["valid"]:
        assert math.isnan(got["latency_ns"])
        return
    assert got["mem_bytes"] == pytest.approx(want["mem_bytes"], rel=REL)
    for name in OUT_NAMES[:-1]:
        assert got[name] == pytest.approx(want[name], rel=REL, abs=1e-12), name


@pytest.mark.parametrize(("group", "zeros", "extra"), [
    (128, "none", 2 / 128), (128, "packed", 2.5 / 128), (32, "fp16", 4 / 32), (0, "fp16", 0.0)])
def test_int4_weights_hold_their_group_scales(group, zeros, extra):
    """W4A16 weights take 0.5 + (2 + zero) / group bytes each: the 16-bit scale and the
    format's zero point per group (Marlin's 3.87x at group 128 is 16 / 4.125 bits)."""
    bf16 = _coeffs(Workload("decode", s_kv=1024))
    int4 = _coeffs(Workload("decode", s_kv=1024, weight_dtype="int4", quant_group=group,
                            quant_zeros=zeros))
    assert int4["mem_weights_bytes"] / bf16["mem_weights_bytes"] == pytest.approx(
        (0.5 + extra) / 2.0, rel=1e-12)


def test_int8_activations_are_not_weight_only():
    """W8A8 (INT8 activations) keeps its 1-byte weights, no group scales, its own rate."""
    w8a8 = _coeffs(Workload("decode", s_kv=1024, weight_dtype="int8", act_dtype="int8"))
    fp8 = _coeffs(Workload("decode", s_kv=1024, weight_dtype="fp8", act_dtype="int8"))
    assert w8a8["mem_weights_bytes"] == fp8["mem_weights_bytes"]
    assert w8a8["b_ffn"] == fp8["b_ffn"]


def _weight_stream(c, workload, model=LLAMA):
    """The FFN's weight bytes of a TP1 decode pass: its HBM bytes less the activations."""
    return c["b_ffn"] - 2.0 * workload.batch * model.d_model * 2.0


@pytest.mark.parametrize(("dtype", "ratio"), [("int4", "wo_int4_bw_ratio"),
                                               ("int8", "wo_int8_bw_ratio")])
def test_small_batch_streams_weight_bytes_at_the_measured_rate(dtype, ratio):
    """A memory-bound W4A16 / W8A16 GEMM on Hopper streams its bytes (scales included) at
    the family's measured fraction of the 16-bit GEMM's rate; on Ampere as fast."""
    bf16 = Workload("decode", s_kv=1024)
    wo = Workload("decode", s_kv=1024, weight_dtype=dtype)
    held = {"int4": 0.5, "int8": 1.0}[dtype] + 2 / 128
    for fam in (H100, A100):
        got = _weight_stream(_coeffs(wo, fam), wo) / _weight_stream(_coeffs(bf16, fam), bf16)
        assert got == pytest.approx(held / getattr(fam.topology, ratio) / 2.0, rel=1e-9)
    assert H100.topology.wo_int4_bw_ratio == pytest.approx(0.5413, abs=1e-4)
    assert A100.topology.wo_int4_bw_ratio == 1.0


def test_large_batch_runs_the_matmuls_at_the_dequantising_rate():
    """A compute-bound weight-only GEMM runs at wo_mm_ratio of the 16-bit rate: its FLOPs
    count 1 / 0.816 more; the attention core's do not."""
    bf16 = _coeffs(Workload("prefill", batch=8, s_kv=4096))
    int4 = _coeffs(Workload("prefill", batch=8, s_kv=4096, weight_dtype="int4"))
    r = H100.topology.wo_mm_ratio
    assert r == pytest.approx(0.8160, abs=1e-4)
    for f in ("f_lin", "f_ffn", "f_head"):
        assert int4[f] == pytest.approx(bf16[f] / r, rel=1e-12), f
    assert int4["f_core"] == bf16["f_core"]
    assert int4["model_flops"] == bf16["model_flops"]


def test_flash2_runs_the_attention_core_at_fa2_ratio_on_hopper_only():
    """attention='flash2' (vLLM 0.x's flash-attn 2) prices the core at the family's
    fa2_ratio of the native kernel: 0.522 on Hopper, 1 on Ampere; prefill and decode."""
    for mode, s_kv in (("prefill", 16384), ("decode", 16384)):
        for fam, ratio in ((H100, 329.483 / 631.338), (A100, 1.0)):
            native = _coeffs(Workload(mode, s_kv=s_kv), fam)
            fa2 = _coeffs(Workload(mode, s_kv=s_kv, attention="flash2"), fam)
            assert fa2["f_core"] == pytest.approx(native["f_core"] / ratio, rel=1e-12)
            assert fa2["f_lin"] == native["f_lin"] and fa2["b_core"] == native["b_core"]
    a = simcore.predict(LLAMA, Workload("prefill", s_kv=32768), {"tp": 1}, family="H100-SXM")
    b = simcore.predict(LLAMA, Workload("prefill", s_kv=32768, attention="flash2"), {"tp": 1},
                        family="H100-SXM")
    assert b.latency_ns > 1.2 * a.latency_ns  # attention is most of a 32K prefill's FLOPs


@pytest.mark.parametrize("mode", ["prefill", "decode"])
def test_host_step_ns_adds_to_every_step(mode):
    """The serving loop's host time per step is paid once per step, on top of the device's
    step, and shows as overhead."""
    base = simcore.predict(LLAMA, Workload(mode, s_kv=2048, cuda_graphs=True), {"tp": 1},
                           family="H100-SXM")
    slow = simcore.predict(LLAMA, Workload(mode, s_kv=2048, cuda_graphs=True,
                                           host_step_ns=4e6), {"tp": 1}, family="H100-SXM")
    assert slow.latency_ns - base.latency_ns == pytest.approx(4e6, rel=1e-9)
    assert slow.overhead_ns - base.overhead_ns == pytest.approx(4e6, rel=1e-9)


@pytest.mark.parametrize("mode,batch,dp", [("decode", 96, 1), ("decode", 96, 4),
                                           ("decode", 7, 2), ("prefill", 3, 1)])
def test_host_seq_ns_adds_per_scheduled_sequence(mode, batch, dp):
    """A synchronous scheduler's host time per sequence is paid once per step for each of
    the replica's sequences (ceil(batch / dp)), on top of the device's step."""
    lay = {"tp": 1, "dp": dp}
    w = Workload(mode, s_kv=2048, batch=batch, cuda_graphs=True)
    base = simcore.predict(LLAMA, w, lay, family="H100-SXM")
    slow = simcore.predict(LLAMA, replace(w, host_seq_ns=12_800.0), lay, family="H100-SXM")
    seqs = -(-batch // dp)
    assert slow.latency_ns - base.latency_ns == pytest.approx(12_800.0 * seqs, rel=1e-9)
    assert slow.overhead_ns - base.overhead_ns == pytest.approx(12_800.0 * seqs, rel=1e-9)


def test_host_time_the_device_waits_for_survives_a_host_bound_step():
    """A step bound by the overlapped per-sequence host work (the fitted seq_overhead_ns,
    here 1,024 short sequences of an 8B model) still pays a synchronous loop's host time on
    top: the device waits for it either way."""
    w = Workload("decode", s_kv=128, batch=1024, cuda_graphs=True)
    lay = {"tp": 2}
    base = simcore.predict(LLAMA, w, lay, family="H100-SXM")
    host_bound = 1024 * FITTED_EFFICIENCY.seq_overhead_ns
    assert base.latency_ns == pytest.approx(host_bound, rel=1e-9)  # the premise
    slow = simcore.predict(LLAMA, replace(w, host_seq_ns=12_800.0, host_step_ns=1e6), lay,
                           family="H100-SXM")
    assert slow.latency_ns - base.latency_ns == pytest.approx(12_800.0 * 1024 + 1e6, rel=1e-9)


def test_defaults_keep_the_old_coefficients():
    """The defaults (no weight-only format, the native attention kernel, no host time per
    step) leave every coefficient of a point bit for bit where the explicit settings put
    it, and a 16-bit point's as without the new fields."""
    for w in (Workload("decode", s_kv=4096, batch=16, weight_dtype="fp8", act_dtype="fp8"),
              Workload("prefill", s_kv=8192), Workload("decode", s_kv=999, cuda_graphs=True)):
        a = _coeffs(w)
        b = _coeffs(replace(w, attention="flash", host_step_ns=0.0, host_seq_ns=0.0, quant_group=64,
                            quant_zeros="fp16"))
        assert np.array_equal(np.array(a.tolist()), np.array(b.tolist()))


def test_bad_runtime_settings_are_one_line_errors():
    with pytest.raises(SpecError, match="quant_zeros"):
        Workload("decode", quant_zeros="asym")
    with pytest.raises(SpecError, match="quant_group"):
        Workload("decode", quant_group=-1)
    with pytest.raises(SpecError, match="host_step_ns"):
        Workload("decode", host_step_ns=-5.0)
    with pytest.raises(SpecError, match="host_seq_ns"):
        Workload("decode", host_seq_ns=-1.0)


def test_family_constants_are_cited():
    """Every new per-family constant has a unit, a tag and a source; Hopper's streaming
    ratios are measurements."""
    for fam in ("H100-SXM", "A100-80G", "B200", "SiP"):
        prov = provenance(fam)
        for key in ("wo_int4_bw_ratio", "wo_int8_bw_ratio", "wo_mm_ratio"):
            d = prov[f"topology.{key}"]
            assert d.unit == "ratio" and d.source and d.tag in ("measured", "inferred")
    assert provenance("H100-SXM")["topology.wo_int4_bw_ratio"].tag == "measured"
    assert "humming" in provenance("H100-SXM")["topology.wo_int4_bw_ratio"].source
