"""Cross-check of the serving planner against aiconfigurator's documented example.

    python benchmarks/serving_crosscheck.py [--out docs/serving_crosscheck.md]

Llama 3.1 70B on 8 H200s, ISL 4000 / OSL 1000, TTFT <= 2000 ms, TPOT <= 30 ms.
aiconfigurator reports 492.66 tokens/s/GPU disaggregated (4 x TP1 prefill + 1 x TP4 decode,
batch 128) and 387.24 aggregated (2 x TP4, batch 48). This script runs simcore's planner
(bf16, and FP8 weights / activations / KV cache with ``plan(dtype="fp8")``: the family's FP8
matmul rate at the fitted ``lowp_compute`` efficiency), evaluates aiconfigurator's two configurations in simcore, prints JSON and
writes the markdown table (atomically).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import os
import tempfile
import time
from pathlib import Path
from typing import Any

AIC = {
    "disagg": {"tokens_per_s_per_gpu": 492.66, "deployment": "4×TP1 prefill + 1×TP4 decode",
               "batch": 128},
    "agg": {"tokens_per_s_per_gpu": 387.24, "deployment": "2×TP4", "batch": 48},
}
CASE = dict(family="H200", gpus=8, isl=4000, osl=1000, max_ttft_ms=2000.0, max_tpot_ms=30.0)

#: aiconfigurator 0.12.0 (PyPI) re-run here like for like: ``aiconfigurator cli default
#: --model-path meta-llama/Meta-Llama-3.1-70B --total-gpus 8 --system h200_sxm --isl 4000
#: --osl 1000 --ttft 2000 --tpot 30 --backend trtllm`` (perf DB trtllm 1.3.0rc20), its
#: ``best_config_topn.csv`` rows verbatim: every row gemm / kvcache / fmha ``bfloat16`` (the
#: log: "Quant inference result: quant_algo=None", the checkpoint's own precision).
AIC_BF16: tuple[dict[str, Any], ...] = (
    dict(mode="agg", label="2×TP4", tp=4, replicas=2, batch=48, ttft_ms=1584.68,
         tpot_ms=29.487, req_s=3.10, tokens_per_s_per_gpu=387.242),
    dict(mode="agg", label="1×TP8", tp=8, replicas=1, batch=80, ttft_ms=676.697,
         tpot_ms=28.839, req_s=2.73, tokens_per_s_per_gpu=341.419),
    dict(mode="agg", label="4×TP2", tp=2, replicas=4, batch=16, ttft_ms=1991.451,
         tpot_ms=29.735, req_s=1.98, tokens_per_s_per_gpu=247.425),
    dict(mode="disagg", label="4×TP1 prefill + 1×TP4 decode", p_tp=1, p_workers=4, tp=4,
         d_workers=1, batch=128, ttft_ms=1578.348, tpot_ms=29.908, req_s=3.94,
         tokens_per_s_per_gpu=492.66),
    dict(mode="disagg", label="2×TP1 prefill + 3×TP2 decode", p_tp=1, p_workers=2, tp=2,
         d_workers=3, batch=30, ttft_ms=1578.348, tpot_ms=29.739, req_s=2.05,
         tokens_per_s_per_gpu=256.5),
)
#: aiconfigurator 0.12.0 ``cli estimate --estimate-mode static_gen --tp 4 --batch-size 128
#: --isl 4000 --osl 1000 --detail time`` (same model, system, backend): its per-op
#: generation-phase latencies (ms over the 999 steps) and the TPOT, verbatim
AIC_TP4_B128_OPS = {"attention": 12562.415, "gate_ffn1_gemm": 5017.487,
                    "ffn2_gemm": 2740.723, "qkv_gemm": 1517.628, "proj_gemm": 978.008,
                    "ar_1": 1752.460, "ar_2 (listed as others)": 1752.460,
                    "add_norm_1": 414.348, "add_norm_2": 414.348, "act_gate": 354.333,
                    "logits_gemm": 135.180, "embedding_ar": 21.906, "embedding": 3.543}
AIC_TP4_B128_TPOT_MS = 27.693


def like_for_like() -> dict[str, Any]:
    """simcore bf16 on aiconfigurator's own bf16 deployments: the steady-state plan's TPOT
    and tokens/s/GPU at aiconfigurator's batch, the request simulator's mean TPOT at
    aiconfigurator's request rate (aggregated: chunked prefill in mixed steps, as
    TensorRT-LLM's in-flight batching runs), and the TP4 batch-128 decode step's parts."""
    import numpy as np

    import simcore
    from simcore.model.presets import get_family, load_model
    from simcore.studies.serving import agg_metrics, disagg_metrics, plan, serving_space
    from simcore.studies.serving.simulate import Scheduler, price_instances, serve_agg
    from simcore.studies.serving.traffic import poisson

    p = plan("Llama 3.1 70B", batch=sorted({d["batch"] for d in AIC_BF16}), prefill_batch=[1],
             **CASE)
    ds, osl = p.dataset, CASE["osl"]
    fam = get_family("H200")
    sched = Scheduler()
    insts = {i.label: i for i in price_instances(
        load_model("Llama 3.1 70B"), family=fam, hardware=fam.hardware, efficiency=None,
        dtype="", max_devices=8, max_tokens=CASE["isl"] + osl + 1, scheduler=sched)}
    rows = []
    for d in AIC_BF16:
        dec = ds.sel(**_tp_layout(d["tp"]), batch=d["batch"])
        step = float(dec.decode_step_ms) * 1e6
        row = dict(d)
        if d["mode"] == "agg":
            pre = float(dec.ttft_ms.sel(prefill_batch=1)) * 1e6
            m = agg_metrics(prefill_ns=pre, step_ns=step, batch=d["batch"], osl=osl)
            row.update(sc_tpot_ms=m["tpot_ns"] / 1e6,
                       sc_tokens_per_s_per_gpu=m["tokens_per_s"] / d["tp"],
                       sc_fits=bool(dec.agg_fits))
            traffic = poisson(d["req_s"], duration_s=600.0, isl=CASE["isl"], osl=osl, seed=0)
            served = serve_agg(traffic, insts[f"TP{d['tp']}"], d["replicas"], sched)
            ok = np.isfinite(served.tpot_ns)
            row.update(sim_tpot_mean_ms=float(np.mean(served.tpot_ns[ok])) / 1e6,
                       sim_ttft_p50_ms=float(np.median(served.ttft_ns[ok])) / 1e6)
        else:
            pre = ds.sel(**_tp_layout(d["p_tp"]), prefill_batch=1)
            m = disagg_metrics(prefill_ns=float(pre.ttft_ms) * 1e6, prefill_batch=1,
                               prefill_workers=d["p_workers"], step_ns=step, batch=d["batch"],
                               decode_workers=d["d_workers"], osl=osl)
            gpus = d["p_workers"] * d["p_tp"] + d["d_workers"] * d["tp"]
            row.update(sc_tpot_ms=step / 1e6,
                       sc_tokens_per_s_per_gpu=float(m["tokens_per_s"]) / gpus,
                       sc_fits=bool(dec.decode_fits) and bool(pre.prefill_fits))
        rows.append(row)
    lay = {k: v for k, v in _tp_layout(4).items() if k not in ("tp", "dp")}
    one = simcore.evaluate("Llama 3.1 70B", simcore.Workload("decode", batch=128, s_kv=4500,
                                                             cuda_graphs=True),
                           family="H200", gpus=8,
                           space=serving_space(8)).sel(tp=4, dp=1, **lay).squeeze()
    parts = {k: float(one[k]) / 1e6 for k in ("latency_ns", "memory_ns", "compute_ns",
                                                  "comm_ns", "overhead_ns", "compute_alone_ns",
                                                  "memory_alone_ns")}
    return {"rows": rows, "tp4_b128": parts}


def _tp_layout(tp: int) -> dict[str, Any]:
    return dict(cp=1, tp=tp, pp=1, dp=1, ep=1, kv_shard_mode="head", ffn_shard_scope="TP",
                tp_placement="inner", cp_placement="inner", cp_ring_variant="kv")


def fixed_configs(result: Any) -> dict[str, dict[str, Any]]:
    """aiconfigurator's two deployments evaluated on simcore's sweep of ``result``."""
    from simcore.studies.serving import agg_metrics, disagg_metrics

    ds, osl = result.dataset, result.osl
    out: dict[str, dict[str, Any]] = {}
    tp4 = ds.sel(**_tp_layout(4))
    # aggregated: 2 replicas of TP4 at batch 48
    if 48 in ds.batch.values:
        b = tp4.sel(batch=48, prefill_batch=1)
        m = agg_metrics(prefill_ns=float(b.ttft_ms) * 1e6, step_ns=float(b.decode_step_ms) * 1e6,
                        batch=48, osl=osl)
        out["agg"] = dict(fits=bool(b.agg_fits), ttft_ms=m["ttft_ns"] / 1e6,
                          tpot_ms=m["tpot_ns"] / 1e6,
                          tokens_per_s_per_gpu=m["tokens_per_s"] / 4)
    # disaggregated: 4 x TP1 prefill (batch 1) + 1 x TP4 decode at batch 128
    tp1 = ds.sel(**_tp_layout(1), prefill_batch=1)
    d = tp4.sel(batch=128)
    m = disagg_metrics(prefill_ns=float(tp1.ttft_ms) * 1e6, prefill_batch=1, prefill_workers=4,
                       step_ns=float(d.decode_step_ms) * 1e6, batch=128, decode_workers=1,
                       osl=osl)
    out["disagg"] = dict(fits=bool(tp1.prefill_fits) and bool(d.decode_fits),
                         prefill_mem_fits=bool(tp1.prefill_fits),
                         ttft_ms=m["ttft_ns"] / 1e6, tpot_ms=m["tpot_ns"] / 1e6,
                         rate_matched=bool(m["rate_matched"]),
                         tokens_per_s_per_gpu=float(m["tokens_per_s"]) / 8)
    return out


def run(plot: Path | None = None) -> dict[str, Any]:
    """The cross-check's numbers; with ``plot``, the bf16 plan's frontier figure the
    markdown embeds is written there too (so both follow the current fit)."""
    import simcore
    from simcore.studies.serving import plan, plot_frontier

    res: dict[str, Any] = {}
    for name in ("bf16", "fp8"):
        t0 = time.perf_counter()
        p = plan("Llama 3.1 70B", dtype=name, **CASE)
        wall = time.perf_counter() - t0
        best = {m: dataclasses.asdict(p.best_of(m)) if p.best_of(m) else None
                for m in ("agg", "disagg")}
        res[name] = {"wall_s": wall, "best": best, "aic_configs": fixed_configs(p)}
        if plot is not None and name == "bf16":
            plot_frontier(p, plot)
    res["like_for_like"] = like_for_like()
    eff = simcore.Efficiency()
    res["efficiency"] = {"op_latency_us": eff.op_latency_ns / 1e3,
                         "step_overhead_ms": eff.step_overhead_ns / 1e6,
                         "seq_overhead_us": eff.seq_overhead_ns / 1e3,
                         "lowp_compute": eff.lowp_compute, "compute": eff.compute}
    return res


def _f(x: Any, nd: int = 1) -> str:
    if x is None or (isinstance(x, float) and not math.isfinite(x)):
        return "—"
    return f"{x:.{nd}f}"


def markdown(res: dict[str, Any]) -> str:
    lines = [
        "# Serving planner cross-check: aiconfigurator's documented example",
        "",
        "Llama 3.1 70B on 8 H200s, ISL 4000, OSL 1000, TTFT ≤ 2000 ms, TPOT ≤ 30 ms "
        "(aiconfigurator's `cli default` limits). Generated by "
        "`python benchmarks/serving_crosscheck.py`; simcore numbers come from "
        "`simcore.studies.serving.plan(...)` with the engine's default efficiencies.",
        "",
        "| mode | source | deployment | batch | TTFT ms | TPOT ms | tokens/s/GPU | vs aiconfigurator |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for mode in ("disagg", "agg"):
        aic = AIC[mode]
        lines.append(f"| {mode} | aiconfigurator 0.12 (reported) | {aic['deployment']} | "
                     f"{aic['batch']} | — | — | {aic['tokens_per_s_per_gpu']:.2f} | 1.00 |")
        for name, label in (("bf16", "simcore bf16, best found"),
                            ("fp8", "simcore FP8, best found")):
            b = res[name]["best"][mode]
            if b is None:
                lines.append(f"| {mode} | {label} | none meets the limits | | | | | |")
                continue
            ratio = b["tokens_per_s_per_gpu"] / aic["tokens_per_s_per_gpu"]
            lines.append(f"| {mode} | {label} | {b['layout']} | {b['batch']} | "
                         f"{_f(b['ttft_ms'], 0)} | {_f(b['tpot_ms'])} | "
                         f"{b['tokens_per_s_per_gpu']:.1f} | {ratio:.2f} |")
        for name, label in (("bf16", "simcore bf16, aiconfigurator's config"),
                            ("fp8", "simcore FP8, aiconfigurator's config")):
            c = res[name]["aic_configs"].get(mode)
            if c is None:
                continue
            if not c["fits"]:
                lines.append(f"| {mode} | {label} | {aic['deployment']} | {aic['batch']} | "
                             f"{_f(c['ttft_ms'], 0)} | {_f(c['tpot_ms'])} | does not fit"
                             + (" (TP1 holds 141 GB of bf16 weights)" if name == "bf16" else "")
                             + " | — |")
                continue
            ratio = c["tokens_per_s_per_gpu"] / aic["tokens_per_s_per_gpu"]
            note = ""
            if c["tpot_ms"] > 30:
                note = " (TPOT > 30 ms: misses the limit)"
            if mode == "disagg" and not c.get("rate_matched", True):
                note += " (prefill-limited)"
            lines.append(f"| {mode} | {label} | {aic['deployment']} | {aic['batch']} | "
                         f"{_f(c['ttft_ms'], 0)} | {_f(c['tpot_ms'])} | "
                         f"{c['tokens_per_s_per_gpu']:.1f}{note} | {ratio:.2f} |")
    lines += [
        "",
        f"Plan time (8 GPUs, 960 layouts × 15 decode batches × 2 contexts + 4 prefill batches, "
        f"one `evaluate` each): {res['bf16']['wall_s']:.1f} s bf16, {res['fp8']['wall_s']:.1f} s "
        "FP8, on the shared 2-core machine.",
        "",
        "![simcore bf16 frontier: tokens/s per GPU vs tokens/s per user]"
        "(serving_frontier_70b_h200.png)",
        "",
        "(`simcore.studies.serving.plot_frontier(plan(\"Llama 3.1 70B\", family=\"H200\", gpus=8, "
        "isl=4000, osl=1000, max_ttft_ms=2000, max_tpot_ms=30), path)`)",
        "",
    ]
    lines += like_for_like_markdown(res["like_for_like"]) if "like_for_like" in res else []
    ratio = {(n, m): r for n, m, r in _ratios(res)}
    fp8 = [r for (n, _), r in ratio.items() if n.startswith("fp8")]
    agg = res["bf16"]["best"]["agg"]
    lf_rows = res.get("like_for_like", {}).get("rows", [])
    lf = [r["sc_tokens_per_s_per_gpu"] / r["tokens_per_s_per_gpu"] for r in lf_rows]
    derated = " and ".join(f"{0.92 * r['sc_tokens_per_s_per_gpu'] / r['tokens_per_s_per_gpu']:.2f}"
                           for r in lf_rows if r["mode"] == "disagg") or "—"
    reading = READING.format(bf16_d=ratio[("bf16", "disagg")], bf16_a=ratio[("bf16", "agg")],
                             lo=min(fp8), hi=max(fp8), agg_layout=agg["layout"] if agg else "—",
                             **res["efficiency"])
    reasons = REASONS.format(lf_lo=min(lf, default=float("nan")),
                             lf_hi=max(lf, default=float("nan")), lf_derated=derated)
    return "\n".join(lines) + "\n" + reading + reasons


def like_for_like_markdown(lf: dict[str, Any]) -> list[str]:
    """The like-for-like section: simcore bf16 on aiconfigurator's bf16 deployments."""
    out = [
        "## Like for like: aiconfigurator 0.12 re-run in bf16, its own deployments",
        "",
        "`aiconfigurator cli default --model-path meta-llama/Meta-Llama-3.1-70B --total-gpus 8 "
        "--system h200_sxm --isl 4000 --osl 1000 --ttft 2000 --tpot 30 --backend trtllm` "
        "(aiconfigurator 0.12.0 from PyPI, perf DB trtllm 1.3.0rc20) reproduces the reported "
        "387.24 / 492.66 tokens/s/GPU, and its `best_config_topn.csv` says every winner runs "
        "**bf16** GEMMs, KV cache and attention (the log: `quant_algo=None`, the checkpoint's "
        "own precision). simcore bf16 on those five deployments, at aiconfigurator's batch "
        "(steady state, `plan(...).dataset`), and through the request simulator at "
        "aiconfigurator's request rate (aggregated: prompts chunked into mixed steps, as "
        "TensorRT-LLM's in-flight batching runs them; 600 s of Poisson arrivals):",
        "",
        "| mode | deployment | batch | aiconfigurator TPOT ms | simcore TPOT ms (steady) | "
        "simcore TPOT ms (simulated, mean) | aiconfigurator tokens/s/GPU | simcore "
        "tokens/s/GPU | ratio | simcore: fits |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in lf["rows"]:
        sim = r.get("sim_tpot_mean_ms")
        out.append(
            f"| {r['mode']} | {r['label']} | {r['batch']} | {r['tpot_ms']:.2f} | "
            f"{r['sc_tpot_ms']:.2f} ({r['sc_tpot_ms'] - r['tpot_ms']:+.2f}) | "
            f"{_f(sim, 2)} | {r['tokens_per_s_per_gpu']:.1f} | "
            f"{r['sc_tokens_per_s_per_gpu']:.1f} | "
            f"{r['sc_tokens_per_s_per_gpu'] / r['tokens_per_s_per_gpu']:.3f} | "
            f"{'yes' if r['sc_fits'] else 'no (TP1 prefill: 141 GB of bf16 weights)'} |")
    parts = lf["tp4_b128"]
    aic = sum(AIC_TP4_B128_OPS.values()) / 999
    out += [
        "",
        "The TP4 batch-128 decode step (context 4500), part by part: aiconfigurator's "
        f"`estimate --estimate-mode static_gen --detail time` gives {AIC_TP4_B128_TPOT_MS:.2f} ms "
        f"({aic:.2f} ms summed over its ops: attention {AIC_TP4_B128_OPS['attention'] / 999:.2f}, "
        "the four GEMMs "
        f"{sum(AIC_TP4_B128_OPS[k] for k in ('gate_ffn1_gemm', 'ffn2_gemm', 'qkv_gemm', 'proj_gemm')) / 999:.2f}, "
        f"the two all-reduces {2 * AIC_TP4_B128_OPS['ar_1'] / 999:.2f}, norms / activation "
        f"{sum(AIC_TP4_B128_OPS[k] for k in ('add_norm_1', 'add_norm_2', 'act_gate')) / 999:.2f} "
        f"ms); simcore {parts['latency_ns']:.2f} ms = HBM-bound ops {parts['memory_ns']:.2f} "
        f"(every byte at the fitted HBM rate alone: {parts['memory_alone_ns']:.2f}; the "
        f"matmuls' FLOPs alone {parts['compute_alone_ns']:.2f}, of which the fitted "
        "`roofline_overlap` leaves ~70% on top of the memory time) + exposed communication "
        f"{parts['comm_ns']:.2f} + the fitted per-kernel cost {parts['overhead_ns']:.2f}.",
        "",
    ]
    return out


def _ratios(res: dict[str, Any]) -> list[tuple[str, str, float]]:
    """(source, mode, simcore / aiconfigurator tokens/s/GPU) of every row that has one."""
    out = []
    for name in ("bf16", "fp8"):
        for mode, aic in AIC.items():
            b = res[name]["best"][mode]
            if b is not None:
                out.append((name, mode, b["tokens_per_s_per_gpu"] / aic["tokens_per_s_per_gpu"]))
            c = res[name]["aic_configs"].get(mode)
            if c is not None and c["fits"] and name == "fp8":
                out.append((name + "_cfg", mode,
                            c["tokens_per_s_per_gpu"] / aic["tokens_per_s_per_gpu"]))
    return out


READING = """## Reading the table

simcore's bf16 answer is {bf16_d:.2f}× aiconfigurator's disaggregated and {bf16_a:.2f}×
its aggregated figure (aiconfigurator ran bf16 too: the like-for-like section above);
its FP8 rows (`dtype="fp8"`, what FP8 weights, KV and GEMMs would give) come out
{lo:.2f}–{hi:.2f}× aiconfigurator's bf16. simcore charges each kernel's fixed cost on
the device (prefill kernels also the host's launch time; decode replays CUDA graphs), the
scheduler's host work per sequence (overlapped with the device's step: a step takes the
longer of the two) and a per-step framework floor (fitted: {op_latency_us:.1f} µs per kernel,
{seq_overhead_us:.1f} µs per sequence, {step_overhead_ms:.2f} ms per step) and runs FP8 matmuls at the fitted `lowp_compute` = {lowp_compute:.3f} of the FP8
peak (16-bit matmuls: `compute` = {compute:.3f} of the 16-bit peak): measured FP8 runs get
well under the data sheet's 2× (`simcore validate`). Both tools agree that disaggregation
wins at this TTFT/TPOT point; simcore's best aggregated bf16 deployment is {agg_layout}.

"""

REASONS = """## Why the numbers differ

* **Precision.** aiconfigurator 0.12 infers the precision from the checkpoint: for
  `meta-llama/Meta-Llama-3.1-70B` every winner runs bf16 GEMMs, KV cache and attention
  (re-run above; v0.5.0's `TaskConfigFactory._get_quant_mode` defaulted a name-only model
  on SM90 to `fp8_block`, which the earlier version of this page assumed). So the bf16
  rows are the like-for-like ones; the FP8 rows (`plan(dtype="fp8")`) show what FP8 would
  give. aiconfigurator's 4 × TP1 prefill workers hold 141 GB of bf16 weights on a 141 GB
  H200: simcore refuses them (weights alone exceed the usable HBM), aiconfigurator does
  not.
* **Where simcore's TPOT is longer, part by part** (the like-for-like table): on a
  decode step simcore charges each kernel a fitted fixed device cost (3.8 ms a step for
  TP4's ~1,000 kernels) and, through the fitted `roofline_overlap`, ~70% of the matmuls'
  FLOP time on top of their HBM time; aiconfigurator's silicon GEMM tables at batch 128
  run at ~72% of HBM bandwidth with no compute added (its four GEMMs sum to 10.3 ms for
  35 GB of weights), and its all-reduces cost more (3.5 ms against 1.8). Aggregated, its
  48 prompts per 999 steps ride in 48 mixed steps of 267 ms whose decode tokens need no
  step of their own, and its context GEMMs run at 77–81% of peak against simcore's fitted
  0.71: simcore's steady-state aggregated TPOT (whole prefills between decode steps) is
  3.6 ms longer on TP4 / TP2, and simulated with chunked mixed steps at the same request
  rate still 3–4 ms longer (on TP8 the simulation is 4 ms shorter: the mixed steps share
  one weight read where the steady state prices a separate prefill). These are fitted factors (not changed here: the fit is
  global) and the aggregated scheduling model; tokens/s per GPU is {lf_lo:.2f}–{lf_hi:.2f}×
  aiconfigurator's on its five deployments. On the two disaggregated ones aiconfigurator
  derates a decode-limited match by 0.92 (`_RATE_MATCHING_DECODE_DEGRADATION_FACTOR`,
  src/aiconfigurator/sdk/picking.py @095f58a51c4ca8e61b66ec108d86f223f8d559ce: "comes from
  not saturating the batchsize slot of decode worker"), a factor of its own, not a
  measurement; simcore's rate derated the same way is {lf_derated}× aiconfigurator's.
* **Overheads.** simcore's per-step costs are fitted constants (a device-side cost per
  kernel, a host cost per scheduled sequence that runs under the device's step, and a
  framework floor per step, a quarter of it with CUDA graphs) plus the host's measured
  5 µs launch time of every kernel not replayed from a CUDA graph, the same for every
  framework; aiconfigurator interpolates measured per-op latencies of TensorRT-LLM,
  which carry that framework's own launch, scheduler, sampling and batch-padding costs.
* **Aggregated scheduling model.** simcore's aggregated replica runs whole-request
  prefills between decode steps (TPOT = step + batch · TTFT / (OSL − 1)), with no chunked
  prefill; aiconfigurator models TensorRT-LLM's in-flight batching with mixed
  context+generation steps (`ctx_tokens` chunks) and applies a TTFT correction factor.
  Interleaving whole 4000-token prefills stretches simcore's aggregated TPOT, so the
  30 ms limit binds at a smaller batch than with chunked prefill.
* **Rate matching.** aiconfigurator derates prefill and decode throughput by 0.9 and
  0.92 when matching workers (v0.5.0 `inference_session.py`); simcore matches exact rates
  (prefill requests/s ≥ decode requests/s) and reports the decode-limited rate. With those
  factors, 492.66 tokens/s/GPU (3.94 requests/s on 8 GPUs) means either a decode step of
  about 29.9 ms for TP4 at batch 128 (decode binds) or about 0.91 s per TP1 prefill
  (prefill binds); the report we compare with gives neither TTFT nor TPOT, so this is an
  inference, not a quoted figure.
* **Not modelled by the steady-state planner:** KV-cache transfer from prefill to decode
  workers, queueing (TTFT is the bare prefill time) and prefix caching: the request
  simulator (`--rate` / `--trace`, [serving.md](serving.md)) has all three; neither has
  the decode-step pipelining that makes PP useful for decode.
"""


def _write_atomic(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        mask = os.umask(0)
        os.umask(mask)
        os.chmod(tmp, 0o666 & ~mask)  # mkstemp makes 0600
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(text)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=Path("docs/serving_crosscheck.md"))
    a = ap.parse_args()
    result = run(plot=a.out.parent / "serving_frontier_70b_h200.png")
    print(json.dumps(result, indent=2, default=str))
    _write_atomic(a.out, markdown(result))
