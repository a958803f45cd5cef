"""Serving at a request rate (issue 35): traffic, the request-level simulation of
aggregated and disaggregated deployments, ``plan_at_rate`` / ``--gpus auto`` and the CLI.

Physical sanity: a higher rate never lowers the p99 TTFT of a fixed deployment; as the
rate goes to 0 the TTFT is the unloaded prefill the engine prices; more replicas never
lower goodput; a KV transfer over RDMA costs more than over NVLink, and sending it layer by
layer exposes less of it. The shipped trace (``tests/data/sharegpt_style_trace.jsonl``)
is synthetic: 200 requests, Poisson arrivals at 4 req/s, lognormal lengths with
ShareGPT-like medians (input ~240, output ~170 tokens); no ShareGPT text.
"""

from __future__ import annotations

import dataclasses
import json
import math
from pathlib import Path

import numpy as np
import pytest

from simcore.cli import main
from simcore.kernels import requests_ref
from simcore.model.presets import get_family, load_model
from simcore.studies.serving import ServingError, sweep
from simcore.studies.serving.rate import RateInfeasibleError, plan_at_rate
from simcore.studies.serving.simulate import (
    Scheduler,
    kv_link,
    outcome,
    price_instances,
    serve_agg,
    serve_disagg,
)
from simcore.studies.serving.traffic import Traffic, TrafficError, poisson, read_trace

TRACE = Path(__file__).parent / "data" / "sharegpt_style_trace.jsonl"
MODEL, FAMILY = "Llama 3.1 8B", "H100-SXM"
ISL, OSL = 1024, 128
SMALL = ["serving", "--model", MODEL, "--family", FAMILY, "--isl", str(ISL), "--osl", str(OSL)]


@pytest.fixture(scope="module")
def fam():
    return get_family(FAMILY)


@pytest.fixture(scope="module")
def instances(fam):
    """Every layout of Llama 3.1 8B on up to 2 H100s as a serving instance, by label."""
    insts = price_instances(load_model(MODEL), family=fam, hardware=fam.hardware,
                            efficiency=None, dtype="", max_devices=2, max_tokens=ISL + OSL,
                            scheduler=Scheduler(), tokens=[ISL], contexts=[ISL + OSL // 2])
    return {i.label: i for i in insts}


def _traffic(rate: float, duration_s: float = 60.0, seed: int = 3) -> Traffic:
    return poisson(rate, duration_s=duration_s, isl=ISL, osl=OSL, seed=seed)


def _res(served, traffic, **lim):
    return outcome(served, traffic, max_ttft_ms=lim.get("ttft"), max_tpot_ms=lim.get("tpot"))


# --- traffic ----------------------------------------------------------------------------------

def test_poisson__a_higher_rate_compresses_the_same_requests():
    slow, fast = _traffic(2.0), _traffic(4.0)
    k = slow.n
    assert fast.n > k
    np.testing.assert_allclose(fast.arrival_s[:k] * 2, slow.arrival_s, rtol=1e-12)
    assert abs(slow.rate_rps - 2.0) < 0.5


def test_read_trace__the_shipped_sharegpt_style_trace():
    t = read_trace(TRACE)
    assert t.n == 200 and np.all(np.diff(t.arrival_s) >= 0)
    assert 3.0 < t.rate_rps < 6.0 and t.isl.min() >= 4 and t.osl.min() >= 1
    scaled = read_trace(TRACE, rate_rps=20)
    assert scaled.rate_rps == pytest.approx(20.0)
    np.testing.assert_array_equal(scaled.isl, t.isl)


def test_read_trace__csv_without_arrivals_gets_poisson_at_the_rate(tmp_path):
    p = tmp_path / "t.csv"
    p.write_text("input_tokens,output_tokens\n100,20\n200,30\n")
    t = read_trace(p, rate_rps=5)
    assert t.n == 2 and list(t.isl) == [100, 200] and t.duration_s == pytest.approx(0.4)
    with pytest.raises(TrafficError, match="no arrival column"):
        read_trace(p)


@pytest.mark.parametrize(("text", "match"), [
    ('{"arrival_s": 0, "isl": 10, "osl": 5}\n{"arrival_s": -1, "isl": 10, "osl": 5}\n',
     "line 2: arrival_s -1 is not a time"),
    ('{"arrival_s": 0, "isl": 0, "osl": 5}\n', "line 1: isl 0 is not a whole number"),
    ('{"arrival_s": 0, "isl": 1.5, "osl": 5}\n', "isl 1.5 is not a whole number"),
    ('{"arrival_s": 0, "isl": 10}\n', "line 1: needs isl and osl"),
    ('{"arrival_s": 0, "isl": 10, "osl": 5}\n{oops\n', "line 2: not a JSON object"),
    ('{"arrival_s": "NaN", "isl": 10, "osl": 5}\n', "arrival_s 'NaN' is not a time"),
    ("arrival_s,isl,osl\n0,10,5\n1,x,5\n", "line 3: isl 'x'"),
    ("arrival_s,isl,osl\n", "has a header but no rows"),
    ("", "is empty"),
])
def test_read_trace__a_bad_row_is_one_line_naming_it(tmp_path, text, match):
    p = tmp_path / "bad.jsonl"
    p.write_text(text)
    with pytest.raises(TrafficError, match=match) as info:
        read_trace(p)
    assert "\n" not in str(info.value)


# --- the simulation: kernel vs twin on a real deployment, physical sanity -------------------

def test_serve_agg__kernel_and_discrete_event_twin_agree_on_a_real_layout(instances):
    """A small case through the engine's real step tables: the numba scheduler and the
    plain-Python event loop give the same times for every request."""
    from simcore.engine.core import request_kernels

    inst = instances["TP1"]
    t = _traffic(8.0, duration_s=4.0)
    arrival = t.arrival_s * 1e9
    zeros = np.zeros(t.n, np.int64)
    args = (arrival, t.isl, zeros, t.osl, inst.tables, 2048, 16, 130, 16)
    got = request_kernels().simulate_instance(*args)
    want = requests_ref.simulate_instance(*args)
    for a, b in zip(got[:4], want[:4], strict=True):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
    assert got[3].sum() > 0  # the small cache (130 blocks) preempted: that path compared too


def test_serve_agg__rate_to_zero_ttft_is_the_unloaded_prefill(instances, fam):
    inst = instances["TP1"]
    t = _traffic(0.02, duration_s=1000.0)  # ~20 requests, each alone
    served = serve_agg(t, inst, 1, Scheduler())
    res = _res(served, t)
    ds = sweep(MODEL, "prefill", batch=1, s_kv=ISL, space="full", family=FAMILY)
    prefill_ms = float(ds.latency_ns.sel(**inst.layout).squeeze()) / 1e6
    assert res["ttft_p50_ms"] == pytest.approx(prefill_ms, rel=1e-9)
    # all but the rare request that lands on another's decode see the unloaded prefill
    alone = np.isclose(served.ttft_ns / 1e6, prefill_ms, rtol=1e-9)
    assert alone.mean() >= 0.9 and res["ttft_p99_ms"] >= prefill_ms * (1 - 1e-9)
    step = inst.decode_ns(1, ISL + OSL / 2) / 1e6  # alone: decode steps at batch 1
    assert res["tpot_p50_ms"] == pytest.approx(step, rel=0.01)


def test_serve_agg__higher_rate_never_lowers_p99_ttft(instances):
    inst = instances["TP1"]
    p99 = [_res(serve_agg(t := _traffic(r), inst, 1, Scheduler()), t)["ttft_p99_ms"]
           for r in (2, 8, 16, 32, 64)]
    assert all(a <= b for a, b in zip(p99[:-1], p99[1:], strict=True)), p99
    assert p99[-1] > 10 * p99[0]  # overloaded at the top: queueing shows


def test_serve_agg__more_replicas_never_lower_goodput(instances):
    inst = instances["TP1"]
    t = _traffic(40.0)
    good = [_res(serve_agg(t, inst, r, Scheduler()), t, ttft=500, tpot=30)["goodput_rps"]
            for r in (1, 2, 3, 4, 6)]
    assert all(a <= b + 1e-12 for a, b in zip(good[:-1], good[1:], strict=True)), good
    assert good[-1] > good[0]


def test_serve_agg__a_smaller_token_budget_chunks_prefills(instances):
    """A prompt longer than the budget is prefilled in chunks: TTFT grows, decodes keep
    running between the chunks."""
    inst = instances["TP1"]
    t = _traffic(4.0, duration_s=20.0)
    whole = _res(serve_agg(t, inst, 1, Scheduler(token_budget=8192)), t)
    chunked = _res(serve_agg(t, inst, 1, Scheduler(token_budget=256)), t)
    assert chunked["ttft_p50_ms"] > whole["ttft_p50_ms"]


def test_serve_agg__prefix_cache_hits_shorten_ttft(instances):
    inst = instances["TP1"]
    t = _traffic(8.0, duration_s=20.0)
    cold = _res(serve_agg(t, inst, 1, Scheduler()), t)
    warm = _res(serve_agg(t, inst, 1, Scheduler(prefix_hit_rate=0.75)), t)
    assert warm["ttft_p50_ms"] < 0.6 * cold["ttft_p50_ms"]
    with pytest.raises(ServingError, match="prefix_hit_rate"):
        Scheduler(prefix_hit_rate=1.0)


def test_serve_agg__a_tiny_kv_cache_preempts(instances):
    inst = instances["TP1"]
    t = _traffic(30.0, duration_s=10.0)
    roomy = serve_agg(t, inst, 1, Scheduler())
    tight = serve_agg(t, dataclasses.replace(inst, kv_blocks=400), 1, Scheduler())
    assert roomy.preemptions == 0 and tight.preemptions > 0
    assert tight.served.all()


def test_serve_disagg__kv_transfer_costs_more_over_rdma_and_layerwise_hides_it(instances, fam):
    pre, dec = instances["TP1"], instances["TP1"]
    t = _traffic(4.0, duration_s=20.0)
    n_layers = load_model(MODEL).n_layers
    nvlink, rdma = kv_link(fam, fam.hardware, 2), kv_link(fam, fam.hardware, 64)
    assert (nvlink.tier, rdma.tier) == ("NVLink", "RDMA")
    runs = {(link.tier, ov): _res(serve_disagg(t, pre, 1, dec, 1, Scheduler(kv_overlap=ov),
                                               link, n_layers), t)
            for link in (nvlink, rdma) for ov in ("layerwise", "none")}
    assert runs["RDMA", "none"]["kv_transfer_ms"] > runs["NVLink", "none"]["kv_transfer_ms"] > 0
    assert runs["RDMA", "layerwise"]["kv_transfer_ms"] < runs["RDMA", "none"]["kv_transfer_ms"]
    assert runs["RDMA", "none"]["ttft_p50_ms"] > runs["NVLink", "none"]["ttft_p50_ms"]
    # the whole transfer, unhidden: KV bytes of the prompt over the link, plus its latency
    whole_ms = (ISL * pre.kv_bytes_per_token / rdma.bw_gbs + rdma.alpha_ns) / 1e6
    assert runs["RDMA", "none"]["kv_transfer_ms"] >= whole_ms * (1 - 1e-9)


# --- the search ----------------------------------------------------------------------------

def test_plan_at_rate__auto_finds_the_smallest_and_more_gpus_never_hurt(instances):
    p = plan_at_rate(MODEL, family=FAMILY, gpus="auto", rate_rps=30, duration_s=30, isl=ISL,
                     osl=OSL, max_ttft_ms=300, max_tpot_ms=15, modes=("agg",))
    best = p.best[0]
    assert best.meets_limits and best.ttft_p99_ms <= 300 and best.tpot_p99_ms <= 15
    assert best.prefill_chunk_tokens == 8192 and best.mode == "agg"
    assert all(c.n_devices >= best.n_devices for c in p.candidates if c.meets_limits)
    inst = instances[best.prefill_layout]
    good = [_res(serve_agg(p.traffic, inst, r, Scheduler()), p.traffic, ttft=300,
                 tpot=15) for r in (best.replicas - 1, best.replicas, best.replicas + 1)]
    if best.replicas > 1:  # one replica fewer misses a limit
        assert not good[0]["meets_limits"]
    assert good[1]["meets_limits"] and good[2]["meets_limits"]
    assert good[2]["goodput_rps"] >= good[1]["goodput_rps"] >= good[0]["goodput_rps"]


def test_plan_at_rate__disagg_searches_the_worker_ratio():
    p = plan_at_rate(MODEL, family=FAMILY, gpus=8, rate_rps=20, duration_s=20, isl=ISL,
                     osl=OSL, max_ttft_ms=400, max_tpot_ms=20, modes=("disagg",))
    b = p.best[0]
    assert b.mode == "disagg" and b.prefill_workers >= 1 and b.decode_workers >= 1
    assert b.kv_link == "NVLink" and b.kv_transfer_ms >= 0 and b.n_devices <= 8
    assert b.layout.startswith(f"{b.prefill_workers}×") and "decode" in b.layout


def test_plan_at_rate__nothing_meets_names_the_closest():
    with pytest.raises(RateInfeasibleError, match="closest: ") as info:
        plan_at_rate(MODEL, family=FAMILY, gpus=1, rate_rps=50, duration_s=10, isl=ISL,
                     osl=OSL, max_ttft_ms=50, modes=("agg",))
    assert info.value.closest is not None and info.value.closest.n_devices == 1


# --- the command line -------------------------------------------------------------------------

def _one_line(err: str) -> str:
    lines = [ln for ln in err.strip().splitlines()
             if not ln.startswith("simcore: compiling kernels (once")]
    assert len(lines) == 1, err
    assert "Traceback" not in err
    return lines[0]


def test_main__auto_at_a_rate_prints_percentiles(capsys):
    code = main([*SMALL, "--gpus", "auto", "--rate", "10", "--duration-s", "20",
                 "--max-ttft-ms", "500", "--max-tpot-ms", "30", "--format", "json"])
    out, err = capsys.readouterr()
    assert code == 0
    rows = json.loads(out)
    for key in ("ttft_p50_ms", "ttft_p99_ms", "tpot_p50_ms", "tpot_p99_ms", "rate_rps",
                "goodput_rps", "n_devices", "kv_transfer_ms", "prefill_chunk_tokens"):
        assert key in rows[0], key
    assert rows[0]["meets_limits"] and "token budget 8192" in err
    # what the held-out MLPerf replays say about a rate plan travels with it, on stderr
    assert "fidelity: on 23 held-out MLPerf runs" in err and "check your stack's rows" in err


def test_main__the_shipped_trace_as_a_table(capsys):
    code = main([*SMALL, "--gpus", "auto", "--trace", str(TRACE), "--max-ttft-ms", "500",
                 "--max-tpot-ms", "40", "--mode", "agg"])
    out = capsys.readouterr().out
    assert code == 0
    assert "trace sharegpt_style_trace.jsonl replayed: 200 requests" in out
    assert "TTFT p99" in out and "smallest agg: 1×TP1 (1 GPU)" in out


def test_main__csv_rows_carry_every_key(capsys):
    from simcore.studies.serving.rate import RATE_ROW_KEYS

    assert main([*SMALL, "--gpus", "2", "--rate", "5", "--duration-s", "10", "--max-ttft-ms",
                 "500", "--format", "csv", "--mode", "agg"]) == 0
    header = capsys.readouterr().out.splitlines()[0]
    assert header.split(",") == list(RATE_ROW_KEYS)


@pytest.mark.parametrize(("argv", "match"), [
    (["--gpus", "auto", "--rate", "0", "--max-ttft-ms", "500"], "argument --rate"),
    (["--gpus", "auto", "--rate", "-2", "--max-ttft-ms", "500"], "argument --rate"),
    (["--gpus", "auto", "--rate", "nan", "--max-ttft-ms", "500"], "argument --rate"),
    (["--gpus", "auto", "--max-ttft-ms", "500"], "--gpus auto searches"),
    (["--gpus", "auto", "--rate", "5"], "needs a limit to meet"),
    (["--gpus", "0", "--rate", "5", "--max-ttft-ms", "500"], "argument --gpus"),
    (["--gpus", "99999", "--rate", "5", "--max-ttft-ms", "500"], "at most 4096"),
    (["--gpus", str(2**70), "--rate", "5", "--max-ttft-ms", "500"], "at most 4096"),
    (["--gpus", "many", "--rate", "5", "--max-ttft-ms", "500"], "positive integer or auto"),
    (["--gpus", "auto", "--rate", "1e9", "--max-ttft-ms", "500"], "at most 1,000,000"),
    (["--gpus", "auto", "--rate", "5", "--max-ttft-ms", "500", "--exact-gpus"],
     "--exact-gpus needs a number"),
    (["--gpus", "auto", "--rate", "5", "--max-ttft-ms", "500", "--batch", "8"],
     "--batch belongs to the steady-state planner"),
    (["--gpus", "auto", "--trace", "no/such.jsonl", "--max-ttft-ms", "500"], "no such file"),
    (["--gpus", "auto", "--rate", "5", "--max-ttft-ms", "500", "--max-num-batched-tokens",
      "0"], "argument --max-num-batched-tokens"),
    (["--gpus", "auto", "--rate", "5", "--max-ttft-ms", "500", "--kv-usable-fraction", "0"],
     "argument --kv-usable-fraction"),
    (["--gpus", "auto", "--rate", "5", "--max-ttft-ms", "500", "--prefix-hit-rate", "1"],
     "argument --prefix-hit-rate"),
])
def test_main__bad_input_is_one_line_exit_2(argv, match, capsys):
    assert main([*SMALL, *argv]) == 2
    assert match in _one_line(capsys.readouterr().err)


def test_main__bad_trace_row_is_one_line_exit_2(tmp_path, capsys):
    p = tmp_path / "t.jsonl"
    p.write_text('{"arrival_s": 0, "isl": 10, "osl": 5}\n{"arrival_s": 1, "isl": -4, "osl": 5}\n')
    assert main([*SMALL, "--gpus", "auto", "--trace", str(p), "--max-ttft-ms", "500"]) == 2
    assert "line 2: isl -4" in _one_line(capsys.readouterr().err)


def test_main__nothing_meets_exit_1_with_the_closest(capsys):
    assert main([*SMALL, "--gpus", "1", "--rate", "50", "--duration-s", "10", "--max-ttft-ms",
                 "50", "--mode", "agg"]) == 1
    line = _one_line(capsys.readouterr().err)
    assert "closest: 1×TP1 (1 GPU)" in line and "p99 TTFT" in line
    assert math.isfinite(float(line.split("closest: ")[1].split("p99 TTFT ")[1].split(" ms")[0]))


def test_bench_requests__smoke():
    """The benchmark runs (a small size) and its kernel agrees with the twin."""
    import importlib.util

    path = Path(__file__).parents[1] / "benchmarks" / "bench_requests.py"
    spec = importlib.util.spec_from_file_location("bench_requests", path)
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    out = bench.main(["--smoke"])
    assert out["deployments"] == 10 and out["twin"]["identical"]
    assert out["simulate_s"] < 60


# --- published serving percentiles (simcore.validation.serving_rate) ------------------------

def test_serving_percentiles__transcription_matches_the_files_totals():
    """Each point's per-request lengths sum to the file's own totals, and carries its
    source (repository, path, 40-hex commit) and the four measured percentiles."""
    from simcore.validation.serving_rate import METRICS, load_serving_points

    points = load_serving_points()
    assert len(points) >= 10
    for p in points:
        assert len(p["input_lens"]) == len(p["output_lens"]) == p["num_prompts"]
        assert sum(p["input_lens"]) == p["total_input_tokens"], p["id"]
        assert sum(p["output_lens"]) == p["total_output_tokens"], p["id"]
        assert len(p["source"]["commit"]) == 40 and p["source"]["path"].endswith(".json")
        assert all(p[k] > 0 for k, _ in METRICS)
        assert p["median_ttft_ms"] <= p["p99_ttft_ms"] and p["median_tpot_ms"] <= p["p99_tpot_ms"]


def test_serving_rows__replay_and_report(capsys):
    """Every point simulates to finite percentiles in order (p50 <= p99); more requests
    sent at once never lower the predicted p99 TTFT on the same GPU; the section prints."""
    from simcore.cli.validate import _print_serving
    from simcore.validation.serving_rate import serving_rows, serving_summary

    rows = serving_rows()
    for r in rows:
        assert all(np.isfinite(v) and v > 0 for v in r.predicted.values()), r.id
        assert r.predicted["median_ttft_ms"] <= r.predicted["p99_ttft_ms"]
    h100 = sorted((r.n_requests, r.predicted["p99_ttft_ms"]) for r in rows
                  if r.family == "H100-SXM")
    assert [t for _, t in h100] == sorted(t for _, t in h100)
    s = serving_summary(rows)
    assert s["n"] == len(rows) and 0 <= s["p99_within_15"] <= s["n"]
    # vLLM 0.6.0's blocks of 10 decode steps: a 3-token request's last 2 tokens arrive at a
    # block's end, which sets the 10-request runs' p99 TPOT (~34 ms at ~7 ms a step);
    # single steps gave -80%, blocks of 10 give -14% (recorded 2026-12-06)
    for r in rows:
        if r.n_requests == 10:
            assert abs(r.error["p99_tpot_ms"]) < 0.2, r.id
    import sys
    _print_serving(None, sys.stdout)
    out = capsys.readouterr().out
    assert "serving percentiles, never fitted" in out and rows[0].id in out
    # the factors `simcore validate --efficiency` passes reach this section too
    from dataclasses import replace

    from simcore.validation import FITTED_EFFICIENCY

    slow = serving_rows(replace(FITTED_EFFICIENCY, memory=FITTED_EFFICIENCY.memory / 2))
    assert all(b.predicted["median_tpot_ms"] > a.predicted["median_tpot_ms"]
               for a, b in zip(rows, slow, strict=True))


def test_serving_crosscheck__like_for_like_on_aiconfigurators_own_deployments():
    """simcore bf16 on aiconfigurator 0.12's five bf16 winners (benchmarks/serving_crosscheck.py):
    tokens/s per GPU within 15% of aiconfigurator's on each (the issue's target is 10%; the
    page reports the figures), TPOT within 5 ms, and the TP1 bf16 prefill refused."""
    import importlib.util

    path = Path(__file__).resolve().parents[1] / "benchmarks" / "serving_crosscheck.py"
    spec = importlib.util.spec_from_file_location("serving_crosscheck", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    lf = mod.like_for_like()
    assert len(lf["rows"]) == len(mod.AIC_BF16) == 5
    for r in lf["rows"]:
        assert 0.85 <= r["sc_tokens_per_s_per_gpu"] / r["tokens_per_s_per_gpu"] <= 1.15, r
        assert abs(r["sc_tpot_ms"] - r["tpot_ms"]) <= 5.0, r
        assert r["sc_fits"] == (r["mode"] == "agg")
    assert lf["tp4_b128"]["latency_ns"] > lf["tp4_b128"]["memory_alone_ns"] > 0


def test_plan__a_large_budget_keeps_only_worker_counts_that_raise_tokens_per_gpu():
    """Steady-state disaggregated search (search._disagg_candidates): per (prefill, decode)
    pair a larger worker count is kept only when it raises tokens/s per GPU, so the best
    deployment is the one an exhaustive search ranks first and 4096 GPUs cost arithmetic
    (issue 35 item 4: 75 s -> 8 s), not millions of rows."""
    from simcore.studies.serving import plan

    p = plan("Llama 3.1 8B", family="H100-SXM", gpus=48, isl=1000, osl=200, max_tpot_ms=30,
             modes=("disagg",))
    by_pair: dict[tuple, list] = {}
    for c in p.candidates:
        by_pair.setdefault((c.prefill_layout, c.prefill_batch, c.decode_layout, c.batch),
                           []).append(c)
    for rows in by_pair.values():
        rows.sort(key=lambda c: c.decode_workers)
        gains = [c.tokens_per_s_per_gpu for c in rows]
        assert gains == sorted(gains) and len(set(gains)) == len(gains)
    # exhaustively: no worker count of the best pair does better than the one kept
    import re

    def size(label: str) -> int:
        return math.prod(int(n) for n in re.findall(r"(?:TP|CP|PP)(\d+)", label.split()[0]))

    best = p.best[0]
    s_p, s_d = size(best.prefill_layout), size(best.decode_layout)
    rate_p = best.prefill_batch / best.ttft_ms
    rate_d = best.batch / (199 * best.tpot_ms)
    per_gpu = []
    for y in range(1, 48 // s_d + 1):
        x = math.ceil(y * rate_d / rate_p * (1 - 1e-12))
        if x * s_p + y * s_d <= 48:
            per_gpu.append(min(x * rate_p, y * rate_d) * 200 * 1e3 / (x * s_p + y * s_d))
    assert best.tokens_per_s_per_gpu == pytest.approx(max(per_gpu), rel=1e-9)


def test_scheduler__multi_step_and_async_output_checked_and_described():
    """vLLM's --num-scheduler-steps is an integer >= 1 (not with speculation); the
    description names the blocks and the output processing."""
    from simcore.studies.serving.speculative import Speculative

    for bad in (0, -3, 1.5, True, "10"):
        with pytest.raises(ServingError, match=r"multi_step \(vLLM's --num-scheduler-steps\)"):
            Scheduler(multi_step=bad)
    with pytest.raises(ServingError, match="cannot be combined with speculative decoding"):
        Scheduler(multi_step=2, speculative=Speculative(3, 0.7))
    with pytest.raises(ServingError, match="async_output must be True or False"):
        Scheduler(async_output=1)
    text = Scheduler(policy="prefill_first", multi_step=10, async_output=True).describe()
    assert "decodes in blocks of 10 steps" in text and "asynchronous output" in text
    assert Scheduler().describe() == dataclasses.replace(Scheduler(), multi_step=1).describe()


def test_scheduler__long_prefill_threshold_checked_described_and_it_slows_first_tokens(instances):
    """vLLM V1's --long-prefill-token-threshold: an integer >= 0, mixed scheduling only,
    named in the header; capping each request's prompt tokens a step never shortens a
    p99 TTFT, and the CLI flag reaches the scheduler."""
    for bad in (-1, 1, 15, 1.5, True, "256", 1 << 25):
        with pytest.raises(ServingError, match=r"long_prefill_threshold \(--long-prefill"):
            Scheduler(long_prefill_threshold=bad)
    # the rows' chunk is what a prompt gets a step; a cap above the budget changes nothing
    assert Scheduler(long_prefill_threshold=256).chunk_tokens == 256
    above = Scheduler(token_budget=256, long_prefill_threshold=512)
    assert above.chunk_tokens == 256 and "prompt tokens of a request" not in above.describe()
    with pytest.raises(ServingError, match="pass --schedule mixed"):
        Scheduler(policy="prefill_first", long_prefill_threshold=256)
    assert "at most 256 prompt tokens of a request a step" in \
        Scheduler(long_prefill_threshold=256).describe()
    traffic = _traffic(4.0, duration_s=30)
    inst = instances["TP1"]
    whole = outcome(serve_agg(traffic, inst, 1, Scheduler()), traffic, max_ttft_ms=None,
                    max_tpot_ms=None)
    capped = outcome(serve_agg(traffic, inst, 1, Scheduler(long_prefill_threshold=128)),
                     traffic, max_ttft_ms=None, max_tpot_ms=None)
    assert capped["ttft_p99_ms"] > whole["ttft_p99_ms"]  # 1024-token prompts: 8 steps each


def test_main__long_prefill_threshold_flag(capsys):
    code = main([*SMALL, "--gpus", "1", "--rate", "2", "--duration-s", "10",
                 "--max-ttft-ms", "5000", "--long-prefill-token-threshold", "256"])
    out = capsys.readouterr().out
    assert code == 0 and "at most 256 prompt tokens of a request a step" in out
    assert main([*SMALL, "--gpus", "1", "--rate", "2", "--max-ttft-ms", "500",
                 "--long-prefill-token-threshold", "256", "--schedule", "prefill-first"]) == 2
    err = capsys.readouterr().err
    assert "pass --schedule mixed" in err and "Traceback" not in err
    # a cap of a few tokens would only multiply the steps: refused, as is the flag without
    # a rate (the steady-state planner has no scheduler to cap)
    assert main([*SMALL, "--gpus", "1", "--rate", "2", "--max-ttft-ms", "500",
                 "--long-prefill-token-threshold", "1"]) == 2
    assert "expected 0 (off) or an integer in [16," in capsys.readouterr().err
    assert main([*SMALL, "--gpus", "1", "--long-prefill-token-threshold", "256"]) == 2
    assert "belongs to the request simulation" in capsys.readouterr().err
    # nothing meets: the closest, and the cap named as the floor more GPUs cannot lower
    assert main([*SMALL, "--gpus", "1", "--rate", "2", "--duration-s", "10",
                 "--max-ttft-ms", "1", "--long-prefill-token-threshold", "16"]) == 1
    err = capsys.readouterr().err
    assert "raise --long-prefill-token-threshold 16" in err and "at least 64 steps" in err
