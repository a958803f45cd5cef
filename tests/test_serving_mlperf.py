"""MLPerf Inference Server runs against the request simulator (simcore.validation.serving_mlperf,
issue 35), held out: the transcription is checked against itself (every rate, percentile and
citation in place; tokens per sample the logged ratio), the replay's traffic against the
dataset and the run, and the replay's physics (a higher rate never lowers the p99 TTFT; the
capacity search brackets a rate that meets the limits and one that does not; a slower GPU
serves a lower capacity and Offline throughput). The full seven-run section is
`simcore validate`'s (about a minute); the tests replay the one-GPU run over a short span.
"""

from __future__ import annotations

import math
import sys
from dataclasses import replace

import numpy as np
import pytest

import simcore.validation.serving_mlperf as M
from simcore.validation import FITTED_EFFICIENCY

ONE_GPU = "redhat-v5.1-h100x1-vllm-llama3.1-8b-server"


def _run(run_id: str) -> dict:
    return next(r for r in M.load_mlperf_runs() if r["id"] == run_id)


def test_transcription__every_run_cited_ordered_and_self_consistent():
    runs = M.load_mlperf_runs()
    assert len(runs) == 23 and len({r["id"] for r in runs}) == 23
    for r in runs:
        m, src = r["measured"], r["source"]
        assert len(src["commit"]) == 40 and src["path"].endswith("mlperf_log_summary.txt"), r["id"]
        assert src["repo"].startswith("mlcommons/inference_results_v")
        assert m["ttft_p50_ms"] < m["ttft_p99_ms"] and m["tpot_p50_ms"] < m["tpot_p99_ms"]
        # a valid run meets its own limits at p99 (the benchmark's pass rule)
        assert m["ttft_p99_ms"] <= r["limits"]["ttft_ms"] and m["tpot_p99_ms"] <= r["limits"]["tpot_ms"]
        # LoadGen completes a little below the rate it schedules
        assert 0.9 * m["scheduled_rps"] < m["completed_rps"] <= m["scheduled_rps"]
        # the capacity search replays LoadGen's minimum run, no more than the run lasted
        assert M.CAP_SPAN_S == 600.0 <= m["min_duration_s"]
        assert r["tokens_per_sample"] == pytest.approx(
            m["completed_tokens_per_s"] / m["completed_rps"], abs=0.01)
        eng = r["engine"]
        assert eng["tp"] * eng["instances"] <= 8 and 0 < eng["kv_usable_fraction"] <= 1
        assert r["dataset"] in ("openorca", "cnndm")
        if "offline" in r:
            off = r["offline"]
            assert len(off["source"]["commit"]) == 40 and "/offline/" in off["source"]["path"].lower()
            assert off["tokens_per_sample"] == pytest.approx(
                off["tokens_per_s"] / off["samples_per_s"], abs=0.01)
            # the same system serves less under latency limits than all at once
            assert m["completed_rps"] < off["samples_per_s"]


def test_datasets__the_benchmarks_sets_in_full():
    isl, ref = M.dataset_lengths("openorca")
    assert isl.size == ref.size == 24576
    assert isl.max() <= 1024 and ref.max() <= 1024  # the task's filter
    isl8, _ = M.dataset_lengths("cnndm")
    assert isl8.size == 13368 and 0 < isl8.min()


def test_replay_traffic__the_runs_own_mean_output_and_the_same_samples_at_every_rate():
    run = _run("nvidia-v4.1-h100x8-trt-llama2-70b-server")
    slow = M.replay_traffic(run, rate_rps=10.0, span_s=600.0)
    fast = M.replay_traffic(run, rate_rps=20.0, span_s=600.0)
    # the reference lengths scaled to the logged tokens per sample (capped at 1,024)
    assert slow.osl.mean() == pytest.approx(run["tokens_per_sample"], rel=0.05)
    assert slow.osl.max() <= 1024
    n = slow.n
    assert fast.n > 1.8 * n
    np.testing.assert_array_equal(fast.isl[:n], slow.isl)
    np.testing.assert_allclose(fast.arrival_s[:n], slow.arrival_s / 2)
    one = M.replay_traffic(_run(ONE_GPU), rate_rps=5.0, span_s=60.0)
    assert (one.osl == 129).all()


@pytest.fixture(scope="module")
def one_gpu():
    run = _run(ONE_GPU)
    sched = M._scheduler(run)
    return run, sched, M._instance(run, sched, None)


def test_replay__higher_rate_never_lowers_p99_ttft_and_percentiles_in_order(one_gpu):
    run, sched, inst = one_gpu
    prev = 0.0
    for rate in (5.0, 20.0, 40.0):
        p = M._percentiles(run, inst, sched, rate, 60.0)
        assert all(np.isfinite(p[k]) and p[k] > 0 for k, _ in M.METRICS)
        assert p["ttft_p50_ms"] <= p["ttft_p99_ms"] and p["tpot_p50_ms"] <= p["tpot_p99_ms"]
        assert p["ttft_p99_ms"] >= prev
        prev = p["ttft_p99_ms"]


def test_capacity__brackets_the_limits_and_a_slower_gpu_serves_less(one_gpu):
    run, sched, inst = one_gpu
    cap, bound = M._capacity(run, inst, sched, 120.0)
    assert bound == "" and cap > 0
    # bisected: just below meets the run's p99 limits, just above does not
    assert M._percentiles(run, inst, sched, cap * 0.97, 120.0)["meets_limits"]
    assert not M._percentiles(run, inst, sched, cap * 1.05, 120.0)["meets_limits"]
    # the run's FP8 matmuls run at lowp_compute: halving it serves less, Offline too
    slow_eff = replace(FITTED_EFFICIENCY, lowp_compute=FITTED_EFFICIENCY.lowp_compute / 2)
    slow = M._instance(run, sched, slow_eff)
    assert M._capacity(run, slow, sched, 120.0)[0] < cap
    off_sched = M._scheduler(run, offline=True)
    assert off_sched.max_seqs == 1024 and off_sched.token_budget == 4096
    fast_off = M._offline_rps(run, off_sched, M._instance(run, off_sched, None))
    slow_off = M._offline_rps(run, off_sched, M._instance(run, off_sched, slow_eff))
    assert 0 < slow_off < fast_off


def test_capacity__a_bound_is_reported_as_one_and_left_out_of_the_mean(one_gpu):
    """A run whose every rate tried meets the limits reports '>' at the highest rate tried
    (not a capped value passed off as the capacity), and the summary leaves it out."""
    run, sched, inst = one_gpu
    tiny = {**run, "measured": {**run["measured"], "scheduled_rps": 0.5}}
    rate, bound = M._capacity(tiny, inst, sched, 60.0)
    assert bound == ">" and rate == pytest.approx(M.CAP_HI * 0.5 * 2 ** (M.CAP_WIDEN - 1))
    row = M.MlperfRow(id="x", label="x", measured={k: 1.0 for k, _ in M.METRICS},
                      predicted={k: 1.0 for k, _ in M.METRICS}, measured_rps=1.0,
                      capacity=(2.0, ">"), offline_measured_rps=math.nan,
                      offline_rps=math.nan, source="")
    ok = replace(row, id="y", capacity=(1.5, ""))
    s = M.mlperf_summary([row, ok])
    assert s["n_capacity"] == 1 and s["capacity_signed"] == pytest.approx(0.5)
    assert s["n_offline"] == 0 and s["p99_within_15"] == 2


def test_print_mlperf__the_section_prints_each_run_and_the_summary(monkeypatch, capsys):
    from simcore.cli.validate import _print_mlperf

    real = M.mlperf_rows
    monkeypatch.setattr(M, "mlperf_rows", lambda eff, progress=None: real(
        eff, span_s=60.0, ids=(ONE_GPU,), progress=progress))
    _print_mlperf(None, sys.stdout)
    cap = capsys.readouterr()
    assert "MLPerf Inference Server runs, never fitted" in cap.out and ONE_GPU in cap.out
    assert "capacity" in cap.out and "offline" in cap.out
    assert f"[1/1] {ONE_GPU}: capacity" in cap.err  # progress, as each run finishes
    rows = real(None, span_s=60.0, ids=(ONE_GPU,))
    s = M.mlperf_summary(rows)
    assert s["n"] == 1 and s["n_offline"] == 1
    assert math.isfinite(rows[0].offline_error) and rows[0].capacity_rps > 0
    # what the rate planner's 'fidelity:' line says (RATE_FIDELITY): capacity runs high
    assert rows[0].capacity_error > 0


def test_validate__no_mlperf_flag_parses():
    from simcore.cli import build_parser

    args = build_parser().parse_args(["validate", "--no-mlperf"])
    assert args.no_mlperf is True


def test_plot_mlperf__draws_one_replayed_run(tmp_path):
    from simcore.studies.plot import plot_mlperf

    rows = M.mlperf_rows(None, span_s=60.0, ids=(ONE_GPU,))
    out = tmp_path / "mlperf.png"
    plot_mlperf(rows, out)
    assert out.stat().st_size > 10_000
    plot_mlperf([], tmp_path / "empty.png")  # nothing replayed: a figure that says so


@pytest.mark.parametrize("argv, match", [
    (["--mlperf-plot", "m.png", "--kind", "decode"], "--mlperf-plot: the MLPerf replays run only"),
    (["--mlperf-plot", "m.png", "--no-mlperf"], "--mlperf-plot: the MLPerf replays run only"),
    (["--mlperf-plot", "m.png", "--plot", "m.png"], "both name 'm.png'"),
])
def test_validate__mlperf_plot_refused_up_front(argv, match, capsys, tmp_path, monkeypatch):
    from simcore.cli import main

    monkeypatch.chdir(tmp_path)
    assert main(["validate", *argv]) == 2
    err = capsys.readouterr().err
    assert match in err and "Traceback" not in err and len(err.strip().splitlines()) == 1
    assert not (tmp_path / "m.png").exists()


def test_validate__an_unwritable_plot_loses_nothing_else(capsys, tmp_path):
    """A plot that cannot be written after the work (a path the up-front check passes):
    one line, the rest of the report and the rows still out, exit 2."""
    from simcore.cli import main

    out = tmp_path / "rows.json"
    code = main(["validate", "--kind", "decode", "--no-loso", "--plot", "/proc/p.png",
                 "--out", str(out), "--format", "json"])
    err = capsys.readouterr().err
    assert code == 2 and out.stat().st_size > 1000
    assert "--plot: cannot write '/proc/p.png'" in err and "Traceback" not in err
    assert "sources:" in err and ("FAIL: mean" in err or "PASS: mean" in err)
    assert "exit 2: 1 plot(s) not written (above)" in err and "a report (exit 0)" not in err
