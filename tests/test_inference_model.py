"""Inference physics: launches and per-step floor, collectives, attention, MoE, precision,
pipelined decode, reported FLOPs (one test per modelled effect)."""

import dataclasses

import numpy as np
import pytest

from simcore.engine.core import prepare
from simcore.engine.evaluate import evaluate
from simcore.kernels.inference import LAUNCH_NS
from simcore.model.presets import get_family, get_model
from simcore.model.specs import Efficiency, HardwareFamily, Model, Workload


def _one(model, wl, fam=None, eff=None, **lay):
    space = {d: (lay.get(d, 1),) for d in ("cp", "tp", "pp", "dp", "ep")}
    space.update(kv_shard_mode=("head",), ffn_shard_scope=("TP",), tp_placement=("inner",),
                 cp_placement=("inner",), cp_ring_variant=("qoml",))
    ds = evaluate(get_model(model), wl, space=space, family=fam, efficiency=eff or Efficiency())
    return {v: float(ds[v].values.ravel()[0]) for v in ds.data_vars}


def _coeffs(model, wl, fam=None, **lay):
    space = {d: (lay.get(d, 1),) for d in ("cp", "tp", "pp", "dp")}
    from simcore.engine.space import full_space
    p = prepare(get_model(model), wl, space=full_space().with_(
        **space, kv_shard_mode=("head",), ffn_shard_scope=("TP",), tp_placement=("inner",),
        cp_placement=("inner",), cp_ring_variant=("qoml",)), family=fam)
    return p.coeffs[0]


def _coeffs_ep(model, wl, fam=None, **lay):
    from simcore.engine.space import full_space
    space = {d: (lay.get(d, 1),) for d in ("cp", "tp", "pp", "dp", "ep")}
    p = prepare(get_model(model), wl, space=full_space().with_(
        **space, kv_shard_mode=("head",), ffn_shard_scope=("TP",), tp_placement=("inner",),
        cp_placement=("inner",), cp_ring_variant=("qoml",)), family=fam)
    assert p.coeffs[0]["valid"] == 1.0
    return p.coeffs[0]


def test_decode_overhead__launches_and_per_step_floor():
    wl = Workload("decode", s_kv=2048)
    eff = Efficiency(op_latency_ns=2000.0, step_overhead_ns=1e6, seq_overhead_ns=0.0)
    base = _one("Llama 3.1 8B", wl, "H100-SXM",
                Efficiency(op_latency_ns=0.0, step_overhead_ns=0.0, seq_overhead_ns=0.0))
    over = _one("Llama 3.1 8B", wl, "H100-SXM", eff)
    c = _coeffs("Llama 3.1 8B", wl, "H100-SXM")
    launches = 32 * c["n_ops"] + c["step_ops"]
    assert c["n_ops"] == 10 and c["step_ops"] == 4 and c["step_count"] == 1
    # each kernel launched from the host also pays the host's launch time (measured)
    assert c["launch_ns"] == pytest.approx(launches * LAUNCH_NS) and LAUNCH_NS == 5000.0
    want = launches * 2000.0 + 1e6
    assert over["overhead_ns"] == pytest.approx(want + c["launch_ns"])
    assert over["latency_ns"] == pytest.approx(base["latency_ns"] + want)
    # replayed CUDA graphs: no host launches, a quarter of the framework's floor
    g_wl = dataclasses.replace(wl, cuda_graphs=True)
    graphs = _one("Llama 3.1 8B", g_wl, "H100-SXM", eff)
    assert _coeffs("Llama 3.1 8B", g_wl, "H100-SXM")["launch_ns"] == 0.0
    assert graphs["overhead_ns"] == pytest.approx(want - 0.75e6)
    assert graphs["latency_ns"] == pytest.approx(over["latency_ns"] - c["launch_ns"] - 0.75e6)
    # prefill never replays a graph: every launch pays
    pre = _coeffs("Llama 3.1 8B", dataclasses.replace(g_wl, mode="prefill", s_q=2048), "H100-SXM")
    assert pre["launch_ns"] == pytest.approx(pre["layer_mult"] * pre["n_ops"] * LAUNCH_NS
                                             + pre["step_ops"] * LAUNCH_NS)
    # TP adds two all-reduce launches per layer, MoE routing four
    assert _coeffs("Llama 3.1 8B", wl, "H100-SXM", tp=2)["n_ops"] == 12
    assert _coeffs("Mixtral 8x7B", wl, "H100-SXM")["n_ops"] == 14


def test_decode_overhead__framework_cost_per_sequence_of_the_replica():
    # each sequence a replica schedules costs seq_overhead_ns of host time per step, run
    # one step ahead under the device's step (overlap scheduling): the step takes the
    # longer of the two; DP replicas schedule their own share, and training steps pay
    # none of it
    wl = Workload("decode", s_kv=2048, batch=64)
    c = _coeffs("Llama 3.1 8B", wl, "H100-SXM")
    assert c["step_seqs"] == 64
    assert _coeffs("Llama 3.1 8B", wl, "H100-SXM", dp=4)["step_seqs"] == 16
    no = Efficiency(seq_overhead_ns=0.0)
    r0 = _one("Llama 3.1 8B", wl, "H100-SXM", no)
    device = r0["latency_ns"]
    # hidden: 64 sequences' host work shorter than the device's step
    hidden = Efficiency(seq_overhead_ns=0.5 * device / 64)
    assert _one("Llama 3.1 8B", wl, "H100-SXM", hidden)["latency_ns"] == device
    # host-bound: the step is the host's time, the excess counted as overhead
    per = Efficiency(seq_overhead_ns=3.0 * device / 64)
    r1 = _one("Llama 3.1 8B", wl, "H100-SXM", per)
    assert r1["latency_ns"] == pytest.approx(3.0 * device, rel=1e-12)
    assert r1["overhead_ns"] - r0["overhead_ns"] == pytest.approx(2.0 * device, rel=1e-9)
    parts = r1["compute_ns"] + r1["memory_ns"] + r1["comm_ns"] + r1["overhead_ns"]
    assert parts == pytest.approx(r1["latency_ns"], rel=1e-9)
    tr = Workload("train", s_kv=2048, batch=64)
    assert _coeffs("Llama 3.1 8B", tr, "H100-SXM")["step_seqs"] == 0
    t0, t1 = (_one("Llama 3.1 8B", tr, "H100-SXM", e) for e in (no, per))
    assert t1["latency_ns"] == t0["latency_ns"]


def test_roofline_overlap__between_sum_and_max_of_compute_and_memory():
    # overlap 1 is max(compute, memory) per op, 0 their sum; in between, linear; never
    # below the classic roofline and never faster with less overlap
    wl = Workload("prefill", s_q=512, s_kv=512)
    lat = {}
    for ov in (0.0, 0.5, 1.0):
        lat[ov] = _one("Llama 3.1 8B", wl, "H100-SXM", Efficiency(roofline_overlap=ov))["latency_ns"]
    assert lat[1.0] < lat[0.5] < lat[0.0]
    assert lat[0.5] == pytest.approx(0.5 * (lat[0.0] + lat[1.0]))


def test_decode_bandwidth__small_transfers_reach_less_of_peak():
    # with a per-launch cost, a small model's decode step moves its bytes at a lower
    # fraction of HBM peak than a large model's (size-dependent achievable bandwidth)
    eff = Efficiency(op_latency_ns=3000.0)
    wl = Workload("decode", s_kv=1024)
    fam = get_family("H100-SXM")

    def frac(model):
        r = _one(model, wl, fam, eff)
        return r["memory_ns"] / r["latency_ns"]

    assert frac("Llama 3.1 8B") < frac("Llama 3.1 70B") < 1.0


def test_collectives__tp_allreduce_latency_logarithmic():
    wl = Workload("decode", s_kv=4096)
    fam = get_family("SiP")
    c = _coeffs("Llama 3.1 70B", wl, fam, tp=8)
    # two all-reduces, each 2·log2(8) link latencies inside the cube (ring: 2·7)
    assert c["comm_alpha_ns"] == pytest.approx(2 * 2 * 3 * fam.topology.alpha_intra_ns)
    # TP16 spans two cubes: hierarchical (reduce-scatter / all-gather inside) at NCCL's tree
    # latency: the base, and per phase 7 in-cube hops and one network step
    c16 = _coeffs("Llama 3.1 70B", wl, fam, tp=16)
    t = fam.topology
    assert c16["comm_alpha_ns"] == pytest.approx(
        2 * (t.coll_base_scaleout_ns + 2 * (7 * t.alpha_intra_scaleout_ns + t.alpha_inter_ns)))
    assert c16["comm1_bytes"] < c16["comm0_bytes"]


def test_attention__own_factor_and_causal_flops():
    wl = Workload("prefill", s_kv=8192)
    a = _one("Llama 3.1 8B", wl, "H100-SXM", Efficiency(attention=0.35))
    b = _one("Llama 3.1 8B", wl, "H100-SXM", Efficiency(attention=0.7))
    assert a["latency_ns"] > b["latency_ns"]
    c = _coeffs("Llama 3.1 8B", wl, "H100-SXM")
    m = get_model("Llama 3.1 8B")
    causal = 1 - (8192 - 1) / (2 * 8192)
    assert c["f_core"] == pytest.approx(4 * 8192 * 8192 * causal * m.head_dim * m.n_heads)


def test_moe__expected_experts_touched():
    m = get_model("Mixtral 8x7B")
    c = _coeffs(m, Workload("decode", batch=4, s_kv=1024))
    touched = 8 * (1 - (1 - 2 / 8) ** 4)
    assert touched == pytest.approx(5.47, abs=0.01)
    router = m.ffn_params_per_layer - m.n_experts * m.expert_params
    act = 4 * m.d_model * 2 * 2
    assert c["b_ffn"] == pytest.approx((touched * m.expert_params + router) * 2 + act)


def test_precision__dtypes_rates_and_errors():
    wl = Workload("prefill", s_kv=2048)
    bf = _coeffs("Llama 3.1 8B", wl, "H100-SXM")
    f8 = _coeffs("Llama 3.1 8B", dataclasses.replace(wl, weight_dtype="fp8", act_dtype="fp8",
                                                      kv_dtype="fp8"), "H100-SXM")
    assert f8["f_lin"] == pytest.approx(bf["f_lin"] / 2)  # fp8 at 2x the bf16 rate
    assert f8["mem_weights_bytes"] == pytest.approx(bf["mem_weights_bytes"] / 2)
    assert f8["mem_kv_bytes"] == pytest.approx(bf["mem_kv_bytes"] / 2)
    w4 = _coeffs("Llama 3.1 8B", dataclasses.replace(wl, weight_dtype="int4"), "A100-80G")
    bfa = _coeffs("Llama 3.1 8B", wl, "A100-80G")
    # W4A16: 16-bit compute at the dequantising GEMM's rate, 4-bit weights + group-128 scales
    wo_mm = get_family("A100-80G").topology.wo_mm_ratio
    assert w4["f_lin"] == pytest.approx(bfa["f_lin"] / wo_mm, rel=1e-12)
    assert w4["mem_weights_bytes"] == pytest.approx(
        bfa["mem_weights_bytes"] / 4 * (0.5 + 2 / 128) / 0.5)
    with pytest.raises(ValueError, match="act_dtype='fp8'.*fp8_ratio"):
        _coeffs("Llama 3.1 8B", dataclasses.replace(wl, act_dtype="fp8"), "A100-80G")
    with pytest.raises(ValueError, match="Workload.kv_dtype"):
        Workload("decode", kv_dtype="fp6")
    with pytest.raises(ValueError, match="weight-only"):
        Workload("decode", act_dtype="int4")


def test_messages__16bit_gemm_outputs_and_in_switch_allreduce():
    wl = Workload("decode", s_kv=4096, batch=8)
    f8wl = dataclasses.replace(wl, weight_dtype="fp8", act_dtype="fp8", kv_dtype="fp8")
    d = get_model("Llama 3.1 70B").d_model
    # W8A8 GEMMs write 16-bit outputs: the TP all-reduce sums 16-bit elements, so FP8
    # inputs leave the messages as they are (the weights and the cache halve)
    bf = _coeffs("Llama 3.1 70B", wl, "H100-SXM", tp=8)
    f8 = _coeffs("Llama 3.1 70B", f8wl, "H100-SXM", tp=8)
    assert f8["comm0_bytes"] == pytest.approx(bf["comm0_bytes"])
    assert f8["mem_weights_bytes"] == pytest.approx(bf["mem_weights_bytes"] / 2)
    # decode messages (8 tokens x d x 2 B = 131 KB) are below NCCL's 2 MB NVLS threshold:
    # a ring on the H100 as on the A100, two all-reduces of 2(g-1)/g per layer
    assert bf["comm0_bytes"] == pytest.approx(2 * 8 * d * 2 * 2 * 7 / 8)
    a100 = _coeffs("Llama 3.1 70B", wl, "A100-80G", tp=8)
    assert a100["comm0_bytes"] == pytest.approx(bf["comm0_bytes"])
    # a prefill's 2048 x d x 2 B = 33.5 MB messages run in the H100's NVSwitch (NVLS): the
    # ring's bytes at the measured 370 / 480 bus-bandwidth ratio; same link latencies
    pf = Workload("prefill", s_kv=2048)
    h100 = get_family("H100-SXM")
    ring = HardwareFamily("H100 ring", h100.hardware,
                          dataclasses.replace(h100.topology, nvls=False))
    hp, rp = (_coeffs("Llama 3.1 70B", pf, f, tp=8) for f in ("H100-SXM", ring))
    assert rp["comm0_bytes"] == pytest.approx(2 * 2048 * d * 2 * 2 * 7 / 8)
    assert hp["comm0_bytes"] == pytest.approx(rp["comm0_bytes"] * 370 / 480)
    assert hp["comm_alpha_ns"] == rp["comm_alpha_ns"]
    assert _one("Llama 3.1 70B", pf, "H100-SXM", tp=8)["comm_ns"] < _one(
        "Llama 3.1 70B", pf, ring, tp=8)["comm_ns"]
    # a group spanning nodes reduces hierarchically over the ring, as before
    assert _coeffs("Llama 3.1 70B", pf, "H100-SXM", tp=16)["comm0_bytes"] == pytest.approx(
        _coeffs("Llama 3.1 70B", pf, ring, tp=16)["comm0_bytes"])
    # expert parallelism: the dispatch sends FP8 inputs, the combine 16-bit outputs
    mx = "Mixtral 8x7B"
    e16 = Workload("decode", s_kv=1024, batch=64)
    e8 = dataclasses.replace(e16, weight_dtype="fp8", act_dtype="fp8")
    c16, c8 = (_coeffs_ep(mx, w, "H100-SXM", tp=1, dp=8, ep=8) for w in (e16, e8))
    assert c8["comm0_bytes"] == pytest.approx(0.75 * c16["comm0_bytes"])
    # pipeline sends carry the 16-bit residual stream too
    pf8 = dataclasses.replace(pf, weight_dtype="fp8", act_dtype="fp8", kv_dtype="fp8")
    assert (_one("Llama 3.1 70B", pf8, "H100-SXM", pp=2)["comm_ns"]
            == pytest.approx(_one("Llama 3.1 70B", pf, "H100-SXM", pp=2)["comm_ns"]))


def test_pipeline_decode__throughput_grows_latency_does_not_drop():
    # compute-heavy decode: min(pp, batch) micro-batches in flight multiply throughput
    # (the framework's per-sequence cost is paid per step whatever the pipeline depth, so
    # it is left out to isolate the pipeline's effect)
    wl = Workload("decode", batch=2048, s_kv=256)
    eff = Efficiency(seq_overhead_ns=0.0)
    r1 = _one("Llama 3.1 70B", wl, "H100-SXM", eff, tp=8)
    r4 = _one("Llama 3.1 70B", wl, "H100-SXM", eff, tp=8, pp=4)
    assert r4["throughput_tok_s"] > 2.0 * r1["throughput_tok_s"]
    # one sequence: nothing to pipeline, the token still passes all 80 layers
    one = _one("Llama 3.1 70B", dataclasses.replace(wl, batch=1), "H100-SXM", tp=8, pp=4)
    ref = _one("Llama 3.1 70B", dataclasses.replace(wl, batch=1), "H100-SXM", tp=8)
    assert one["latency_ns"] >= ref["latency_ns"]
    assert one["throughput_tok_s"] <= ref["throughput_tok_s"]


def test_reported_flops__no_embedding_head_only_for_logits():
    wl = Workload("prefill", s_kv=2048)
    r = _one("Llama 3.1 8B", wl, "H100-SXM")
    peak = get_family("H100-SXM").hardware.peak_tflops_f16 * 1e12
    assert r["flops_per_device"] < peak * Efficiency().compute
    c = _coeffs("Llama 3.1 8B", wl, "H100-SXM")
    m = get_model("Llama 3.1 8B")
    body = m.n_active_params - m.embedding_params - m.d_model
    attn = 4 * m.n_layers * 2048 * 2048 * (1 - 2047 / 4096) * m.n_heads * m.head_dim
    assert c["model_flops"] == pytest.approx(2 * body * 2048 + 2 * m.d_model * m.vocab_size + attn)
    assert np.isfinite(c["model_flops"])


def test_expert_parallel__layout_dim_masks_and_costs():
    from simcore.kernels import inference_ref as ref

    wl = Workload("decode", batch=64, s_kv=4096)
    fam = get_family("H100-SXM")
    space = {"cp": (1,), "tp": (8,), "pp": (1,), "dp": (1,), "ep": (1, 2, 4, 8, 3),
             "kv_shard_mode": ("head",), "ffn_shard_scope": ("TP",), "tp_placement": ("inner",),
             "cp_placement": ("inner",), "cp_ring_variant": ("qoml",)}
    ds = evaluate(get_model("Mixtral 8x7B"), wl, space=space, family=fam, efficiency=Efficiency())
    valid = ds.valid.values.ravel()
    assert valid.tolist() == [True, True, True, True, False]  # 3 divides neither 8 experts nor 8
    dense = evaluate(get_model("Llama 3.1 8B"), wl, space=space, family=fam)
    assert dense.valid.values.ravel().tolist() == [True, False, False, False, False]
    # EP8: each device holds one whole expert; weights per device drop vs TP8 only by the
    # router/attention share, the FFN all-reduce becomes dispatch + combine all-to-all
    w = ds.mem_weights_bytes.values.ravel()
    assert w[3] == pytest.approx(w[0], rel=1e-6)
    m = get_model("Mixtral 8x7B")
    for ep in (2, 8):
        got = _one(m, wl, fam, tp=8, ep=ep)
        want = ref.evaluate_point(m, wl, fam.hardware, fam.topology, Efficiency(),
                                  ref.Layout(tp=8, ep=ep))
        assert got["latency_ns"] == pytest.approx(want["latency_ns"], rel=1e-9)
    # EP over DP replicas: experts no longer replicated per replica
    r = _one(m, wl, fam, tp=2, dp=4, ep=8)
    r1 = _one(m, wl, fam, tp=2, dp=4)
    assert r["mem_weights_bytes"] < 0.4 * r1["mem_weights_bytes"]


def test_lowp_compute__fp8_matmuls_at_their_own_factor():
    wl = Workload("prefill", s_kv=8192, weight_dtype="fp8", act_dtype="fp8")
    f8 = _coeffs("Llama 3.1 8B", wl, "H100-SXM")
    assert f8["lowp_mm"] == 1.0 and f8["lowp_head"] == 1.0
    assert _coeffs("Llama 3.1 8B", Workload("prefill", s_kv=8192), "H100-SXM")["lowp_mm"] == 0.0
    no_overhead = dict(op_latency_ns=0.0, step_overhead_ns=0.0)
    same = _one("Llama 3.1 8B", wl, "H100-SXM",
                Efficiency(compute=0.6, lowp_compute=None, **no_overhead))
    slow = _one("Llama 3.1 8B", wl, "H100-SXM",
                Efficiency(compute=0.6, lowp_compute=0.3, **no_overhead))
    # a compute-bound 8K prefill: the matmuls take twice as long at half the factor, the
    # attention core (16-bit, own factor) does not change
    assert 1.6 < slow["compute_ns"] / same["compute_ns"] <= 2.0
    bf = _one("Llama 3.1 8B", Workload("prefill", s_kv=8192), "H100-SXM",
              Efficiency(compute=0.6, lowp_compute=0.3, **no_overhead))
    bf_ref = _one("Llama 3.1 8B", Workload("prefill", s_kv=8192), "H100-SXM",
                  Efficiency(compute=0.6, lowp_compute=None, **no_overhead))
    assert bf["latency_ns"] == bf_ref["latency_ns"]  # 16-bit runs ignore the factor
    tr = Workload("train", batch=8, s_kv=4096, precision="fp8")  # training: train_compute
    t_same = _one("Llama 3.1 8B", tr, "H100-SXM", Efficiency(train_compute=0.6))
    t_slow = _one("Llama 3.1 8B", tr, "H100-SXM", Efficiency(train_compute=0.6, lowp_compute=0.3))
    assert t_slow["latency_ns"] == t_same["latency_ns"]
    with pytest.raises(ValueError, match="lowp_compute"):
        Efficiency(lowp_compute=1.5)


def test_served_decode__prompt_tokens_share_the_pass():
    base = Workload("decode", batch=64, s_kv=8704)
    mixed = dataclasses.replace(base, prefill_tokens=512, prefill_context=4096)
    assert Workload.served(concurrency=64, isl=8192, osl=1024) == mixed
    fam = "H200"
    pure = _one("Llama 3.1 70B", base, fam, tp=8)
    both = _one("Llama 3.1 70B", mixed, fam, tp=8)
    zero = _one("Llama 3.1 70B", dataclasses.replace(base, prefill_tokens=0), fam, tp=8)
    assert zero == pure  # no prompt tokens: exactly the pure decode step
    assert both["latency_ns"] > pure["latency_ns"]
    assert both["throughput_tok_s"] == pytest.approx(64 / both["latency_ns"] * 1e9)
    assert both["compute_ns"] > pure["compute_ns"]
    # one fused pass reads the weights once: never slower than the decode step plus a
    # separate prefill of the same prompt tokens
    alone = _one("Llama 3.1 70B", Workload("prefill", batch=1, s_kv=512), fam, tp=8)
    assert both["latency_ns"] < pure["latency_ns"] + alone["latency_ns"] * 1.2
    # more prompt tokens per pass never make a step faster
    lat = [_one("Llama 3.1 70B", dataclasses.replace(mixed, prefill_tokens=p), fam,
                tp=8)["latency_ns"] for p in (1, 64, 512, 4096)]
    assert lat == sorted(lat)
    with pytest.raises(ValueError, match="prefill_tokens.*mode='decode'"):
        Workload("prefill", prefill_tokens=10)
    with pytest.raises(ValueError, match="osl must be a positive integer"):
        Workload.served(concurrency=8, isl=1024, osl=0)
    assert Workload("decode", s_kv=1000, prefill_tokens=8).prefill_context == 500


def test_served_step__admitting_a_prompt_runs_eagerly():
    # a served step that mixes a prompt into the decode batch launches its kernels from
    # the host even with CUDA graphs (frameworks replay graphs for pure decode batches):
    # the share of steps admitting a prompt, prompts per step = tokens / prompt length
    for conc, isl, osl, share in ((64, 1024, 128, 0.5), (8, 1024, 1024, 1 / 128),
                                  (256, 2048, 128, 1.0)):
        wl = Workload.served(concurrency=conc, isl=isl, osl=osl, cuda_graphs=True)
        c = _coeffs("Llama 3.1 8B", wl, "H100-SXM")
        launches = c["layer_mult"] * c["n_ops"] + c["step_ops"]
        assert c["launch_ns"] == pytest.approx(share * launches * LAUNCH_NS)
    eager = _coeffs("Llama 3.1 8B", Workload.served(concurrency=64, isl=1024, osl=128),
                    "H100-SXM")
    assert eager["launch_ns"] == pytest.approx(
        (eager["layer_mult"] * eager["n_ops"] + eager["step_ops"]) * LAUNCH_NS)


def test_launches__a_parallel_block_has_one_norm_kernel_fewer():
    # GPT-J's block: one LayerNorm feeds attention and the MLP (one residual add): 9
    # kernels a layer; Gemma's four norms: 12
    from dataclasses import replace as _replace

    base = get_model("Llama 3.1 8B")
    wl = Workload("decode", s_kv=2048)
    for norms, want in ((1, 9.0), (2, 10.0), (4, 12.0)):
        m = _replace(base, n_norms_per_layer=norms)
        assert _coeffs(m, wl, "H100-SXM")["n_ops"] == want
    # the Hugging Face reader knows GPT-J's parallel block (EleutherAI/gpt-j-6b config.json)
    gptj = Model.from_hf_dict({"model_type": "gptj", "n_layer": 28, "n_embd": 4096,
                               "n_head": 16, "n_inner": None, "vocab_size": 50400,
                               "activation_function": "gelu_new", "rotary_dim": 64,
                               "n_positions": 2048})
    assert gptj.n_norms_per_layer == 1 and not gptj.gated_ffn
