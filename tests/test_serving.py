import argparse
import csv
import io
import json
import math
import os
import time

import numpy as np
import pytest

import simcore
from simcore import Workload
from simcore.cli import main
from simcore.cli.serving import add_arguments, run
from simcore.engine.metrics import get_metric
from simcore.engine.space import PARALLEL_DIMS
from simcore.studies.serving import (
    ROW_KEYS,
    InfeasibleError,
    ServingError,
    agg_metrics,
    budget_mask,
    disagg_metrics,
    layout_label,
    plan,
    plot_frontier,
    serving_space,
    sweep,
)

SMALL = dict(family="H100-SXM", gpus=4, isl=2048, osl=256, batch=(1, 8, 32, 128),
             prefill_batch=(1, 2))


@pytest.fixture(scope="module")
def small():
    """Llama 3.1 8B on 4 H100s, no limits: every candidate is kept."""
    return plan("Llama 3.1 8B", **SMALL)


@pytest.fixture(scope="module")
def big():
    """The documented aiconfigurator case: Llama 3.1 70B, 8 H200s, ISL 4000, OSL 1000."""
    t0 = time.perf_counter()
    p = plan("Llama 3.1 70B", family="H200", gpus=8, isl=4000, osl=1000, max_ttft_ms=2000,
             max_tpot_ms=30)
    return p, time.perf_counter() - t0


def _parser():
    p = argparse.ArgumentParser(prog="simcore serving")
    add_arguments(p)
    return p


def _size(label):
    """Devices of a layout from its label (``TP2·CP2 ring=kv`` -> 4)."""
    n = 1
    for part in label.split()[0].split("·"):
        n *= int(part[2:])
    return n


def _layout_of(ds, label):
    """Coordinates of the first layout of the dataset with this label."""
    stacked = ds.n_devices.stack(_layout=PARALLEL_DIMS)
    for t in stacked.indexes["_layout"]:
        lay = dict(zip(PARALLEL_DIMS, t, strict=True))
        if layout_label(lay) == label:
            return lay
    raise AssertionError(f"no layout labelled {label!r}")


# --- budget mask and sweep dims ------------------------------------------------------------

def test_budget_mask__at_most_and_exactly():
    ds = sweep("Llama 3.1 8B", "decode", batch=[1, 16], s_kv=[1024, 8192], gpus=4,
               space="reduced", family="H100-SXM")
    plain = sweep("Llama 3.1 8B", "decode", batch=[1, 16], s_kv=[1024, 8192],
                  space="reduced", family="H100-SXM")
    assert bool(plain.fits.where(plain.n_devices > 4, False).any())  # the mask has work to do
    expect = plain.fits & (plain.n_devices <= 4)
    assert bool((ds.fits == expect).all())
    assert not bool(ds.valid.where(ds.n_devices > 4, False).any())
    exact = sweep("Llama 3.1 8B", "decode", batch=[16], s_kv=[1024], gpus=4, exact_gpus=True,
                  space="reduced", family="H100-SXM")
    used = exact.n_devices.where(exact.fits.any(["batch", "s_kv", *simcore.HW_KNOBS]))
    assert set(np.unique(used.values[~np.isnan(used.values)])) == {4}
    assert budget_mask(ds.n_devices, None).all()


def test_sweep__batch_and_context_dims_equal_single_evaluates():
    ds = sweep("Llama 3.1 8B", "prefill", batch=[1, 4], s_kv=[512, 2048], space="reduced",
               family="H100-SXM")
    assert dict(ds.sizes)["batch"] == 2 and dict(ds.sizes)["s_kv"] == 2
    one = simcore.evaluate("Llama 3.1 8B", Workload("prefill", batch=4, s_kv=2048),
                           space="reduced", family="H100-SXM")
    got = ds.latency_ns.sel(batch=4, s_kv=2048)
    np.testing.assert_array_equal(got.values, one.latency_ns.values)
    assert ds.batch.attrs["units"] == "requests" and ds.s_kv.attrs["units"] == "tokens"


def test_sweep__is_evaluate_with_batch_context_dims_and_the_engines_budget():
    kw = dict(space="reduced", family="H100-SXM")
    ds = sweep("Llama 3.1 8B", "decode", batch=[16, 1], s_kv=[8192, 1024], gpus=4, **kw)
    # the serving workloads' decode steps replay CUDA graphs
    ev = simcore.evaluate("Llama 3.1 8B", Workload("decode", cuda_graphs=True), batch=[1, 16],
                          s_kv=[1024, 8192], gpus=4, **kw)
    for name in ("latency_ns", "fits", "valid", "mem_bytes", "n_devices"):
        np.testing.assert_array_equal(ds[name].values, ev[name].values)
    # masked in the engine: a layout outside the budget has no numbers at all
    outside = ds.n_devices > 4
    assert bool(ds.latency_ns.where(outside).isnull().all())
    assert bool((ds.within_budget == ~outside).all())
    with pytest.raises(simcore.DeviceBudgetError, match="smallest device count that fits is 2"):
        sweep("Llama 3.1 70B", "decode", batch=[1], s_kv=[4096], gpus=1, **kw)


def test_serving_space__dp_is_replicas_and_sizes_stay_in_budget():
    sp = serving_space(4).dict
    assert sp["dp"] == (1,) and max(sp["tp"]) == 4 and max(sp["cp"]) == 4 and max(sp["pp"]) == 4


def test_plan__every_deployment_within_budget_and_exact_budget(small):
    assert small.candidates and all(c.n_devices <= 4 for c in small.candidates)
    assert {c.mode for c in small.candidates} == {"agg", "disagg"}
    six = {**SMALL, "gpus": 6, "batch": (8, 128)}
    assert any(c.n_devices < 6 for c in plan("Llama 3.1 8B", **six).candidates)
    exact = plan("Llama 3.1 8B", **six, exact_gpus=True)
    assert exact.candidates and all(c.n_devices == 6 for c in exact.candidates)
    for c in exact.candidates:
        if c.mode == "disagg":
            assert c.prefill_workers * _size(c.prefill_layout) + \
                c.decode_workers * _size(c.decode_layout) == 6
        else:
            assert c.replicas * _size(c.decode_layout) == 6


# --- the serving model -------------------------------------------------------------------------

def test_agg_metrics__one_cycle_by_hand():
    # 4 requests, 100 steps of 20 ms and 4 prefills of 100 ms: a 2.4 s cycle, 404 tokens
    m = agg_metrics(prefill_ns=100e6, step_ns=20e6, batch=4, osl=101)
    assert m["tpot_ns"] == pytest.approx(24e6)
    assert m["tokens_per_s"] == pytest.approx(404 / 2.4)
    assert m["requests_per_s"] == pytest.approx(4 / 2.4)
    assert m["request_latency_ns"] == pytest.approx(100e6 + 100 * 24e6)


def test_disagg_metrics__rate_matching_by_hand():
    m = disagg_metrics(prefill_ns=0.5e9, prefill_batch=1, prefill_workers=2, step_ns=25e6,
                       batch=100, decode_workers=1, osl=101)
    assert m["prefill_requests_per_s"] == pytest.approx(4.0)
    assert m["decode_requests_per_s"] == pytest.approx(100 / 2.5)
    assert bool(m["rate_matched"]) is False  # 4 req/s cannot feed 40
    assert m["requests_per_s"] == pytest.approx(4.0) and m["tokens_per_s"] == pytest.approx(404)
    fed = disagg_metrics(prefill_ns=0.05e9, prefill_batch=2, prefill_workers=1, step_ns=25e6,
                         batch=100, decode_workers=1, osl=101)
    assert bool(fed["rate_matched"]) and fed["requests_per_s"] == pytest.approx(40.0)


def test_plan__disagg_rows_are_rate_matched_with_fewest_prefill_workers(small):
    rows = [c for c in small.candidates if c.mode == "disagg"]
    assert rows
    for c in rows:
        steps = small.osl - 1
        prefill = c.prefill_workers * c.prefill_batch / c.ttft_ms
        decode = c.decode_workers * c.batch / (steps * c.tpot_ms)
        assert prefill >= decode * (1 - 1e-9)  # prefill never starves decode
        fewer = (c.prefill_workers - 1) * c.prefill_batch / c.ttft_ms
        assert fewer < decode  # and one prefill worker less would
        assert c.requests_per_s == pytest.approx(decode * 1e3)
        assert c.tokens_per_s_per_gpu == pytest.approx(decode * 1e3 * small.osl / c.n_devices)
        assert c.tokens_per_s_per_user == pytest.approx(1e3 / c.tpot_ms)
        assert c.request_latency_ms == pytest.approx(c.ttft_ms + steps * c.tpot_ms)


def test_plan__agg_row_equals_engine_decode_and_prefill(small):
    c = next(c for c in small.best if c.mode == "agg")
    lay = _layout_of(small.dataset, c.decode_layout)
    step = simcore.evaluate("Llama 3.1 8B", Workload("decode", batch=c.batch, s_kv=2048 + 128,
                                                     cuda_graphs=True),
                            space={k: [v] for k, v in lay.items()}, family="H100-SXM")
    pre = simcore.evaluate("Llama 3.1 8B", Workload("prefill", batch=1, s_kv=2048),
                           space={k: [v] for k, v in lay.items()}, family="H100-SXM")
    t_d, t_p = float(step.latency_ns.squeeze()), float(pre.latency_ns.squeeze())
    assert c.ttft_ms == pytest.approx(t_p / 1e6)
    assert c.tpot_ms == pytest.approx((t_d + c.batch * t_p / 255) / 1e6)
    per_replica = c.batch * 256 / (255 * t_d + c.batch * t_p) * 1e9
    n = int(step.n_devices.squeeze())
    assert c.replicas == 4 // n and c.n_devices == c.replicas * n
    assert c.tokens_per_s_per_gpu == pytest.approx(per_replica / n)


def test_plan__max_batch_is_largest_batch_whose_kv_fits_at_the_end():
    # OSL 16K: the KV cache nearly doubles between the mean and the end of generation
    batches = (1, 8, 16, 32, 64, 128)
    p = plan("Llama 3.1 70B", family="H100-SXM", gpus=4, isl=1024, osl=16384, batch=batches,
             prefill_batch=1, modes=("agg",))
    c = p.best[0]
    space = {k: [v] for k, v in _layout_of(p.dataset, c.decode_layout).items()}

    def fits(b, ctx):
        return bool(simcore.evaluate("Llama 3.1 70B", Workload("decode", batch=b, s_kv=ctx),
                                     space=space, family="H100-SXM").fits.squeeze())

    at_end = max(b for b in batches if fits(b, 1024 + 16384))
    at_mean = max(b for b in batches if fits(b, 1024 + 8192))
    assert at_end < at_mean < batches[-1]  # the case tells the two contexts apart
    assert c.max_batch == at_end
    assert all(x.batch <= x.max_batch for x in p.candidates)


# --- limits, ranking and the frontier -----------------------------------------------------------

def test_plan__limits_filter_and_best_is_the_max_meeting_them(small):
    ttft, tpot = 150.0, 12.0
    lim = plan("Llama 3.1 8B", **SMALL, max_ttft_ms=ttft, max_tpot_ms=tpot)
    assert lim.best
    for c in lim.best:
        assert c.meets_limits and c.ttft_ms <= ttft and c.tpot_ms <= tpot
    # the same configurations without limits: the best meeting them is the top of `lim`
    ok = [c for c in small.candidates if c.ttft_ms <= ttft and c.tpot_ms <= tpot]
    assert lim.best[0].tokens_per_s_per_gpu == pytest.approx(max(c.tokens_per_s_per_gpu for c in ok))
    assert any(c.tpot_ms > tpot for c in small.candidates)  # the limit removed something
    assert lim.best[0].tokens_per_s_per_gpu <= small.best[0].tokens_per_s_per_gpu
    marked = [c for c in lim.candidates if not c.meets_limits]
    assert marked and all(c.tpot_ms > tpot for c in marked)


def test_plan__frontier_is_pareto_set_per_mode(small):
    gpu, user = get_metric("tokens_per_s_per_gpu"), get_metric("tokens_per_s_per_user")
    assert gpu.direction == "max" and user.direction == "max"
    for mode in ("agg", "disagg"):
        front = [c for c in small.frontier if c.mode == mode]
        pts = [c for c in small.candidates if c.mode == mode]
        assert front

        def dominates(a, b):
            return (a.tokens_per_s_per_gpu >= b.tokens_per_s_per_gpu
                    and a.tokens_per_s_per_user >= b.tokens_per_s_per_user
                    and (a.tokens_per_s_per_gpu > b.tokens_per_s_per_gpu
                         or a.tokens_per_s_per_user > b.tokens_per_s_per_user))

        for f in front:
            assert not any(dominates(c, f) for c in pts)
        for c in pts:
            assert any(dominates(f, c) or (f.tokens_per_s_per_gpu == c.tokens_per_s_per_gpu
                                            and f.tokens_per_s_per_user == c.tokens_per_s_per_user)
                       for f in front)


def test_plan__70b_on_8_h200_in_seconds(big):
    p, wall = big
    assert wall < 60, f"the 8-GPU plan took {wall:.1f} s"
    assert p.best_of("agg") is not None and p.best_of("disagg") is not None
    for c in p.best:
        assert c.n_devices <= 8 and c.ttft_ms <= 2000 and c.tpot_ms <= 30
    # bf16 70B weights (141 GB) exceed one H200's usable HBM: no single-GPU worker
    assert all(not c.decode_layout.startswith("TP1 ") or "·" in c.decode_layout
               for c in p.candidates)
    assert p.best[0].tokens_per_s_per_gpu == max(c.tokens_per_s_per_gpu for c in p.candidates
                                                 if c.meets_limits)


# --- bad input and infeasible requests ----------------------------------------------------------

@pytest.mark.parametrize("kw, word", [
    ({"gpus": 0}, "gpus"), ({"isl": 0}, "isl"), ({"osl": -5}, "osl"), ({"isl": 2.5}, "isl"),
    ({"max_tpot_ms": 0}, "max_tpot_ms"), ({"max_ttft_ms": float("nan")}, "max_ttft_ms"),
    ({"batch": []}, "batch"), ({"modes": ("static",)}, "modes"),
    ({"hardware": {"bw_hbm_gbs": [2000, 4000]}}, "one hardware point"),
])
def test_plan__bad_input_raises_what_would_work(kw, word):
    args = {**SMALL, **kw}
    with pytest.raises(ServingError, match=word) as info:
        plan("Llama 3.1 8B", **args)
    assert not isinstance(info.value, InfeasibleError)


def test_plan__budget_too_small_names_smallest_gpu_count_that_fits():
    kw = dict(family="A100-80G", isl=4000, osl=1000, batch=(1, 8), prefill_batch=1)
    with pytest.raises(InfeasibleError, match="smallest GPU count that fits is") as info:
        plan("Llama 3.1 70B", gpus=1, **kw)
    n = info.value.min_gpus
    assert info.value.binding == "gpus" and n is not None and n > 1
    assert f"gpus >= {n}" in str(info.value)
    assert plan("Llama 3.1 70B", gpus=n, modes=("agg",), **kw).best  # n GPUs do fit
    if n > 2:
        with pytest.raises(InfeasibleError):
            plan("Llama 3.1 70B", gpus=n - 1, **kw)


def test_plan__batches_too_large_for_the_budget_say_so():
    with pytest.raises(InfeasibleError, match="pass smaller batches") as info:
        plan("Llama 3.1 70B", family="A100-80G", gpus=2, isl=4000, osl=1000, batch=(2048,),
             prefill_batch=1)
    assert info.value.binding == "batch" and info.value.min_gpus <= 2


def test_plan__impossible_tpot_says_which_limit_binds_and_by_how_much(small):
    low = min(c.tpot_ms for c in small.candidates)
    assert plan("Llama 3.1 8B", **SMALL, max_tpot_ms=low * 1.001).best[0].tpot_ms <= low * 1.001
    with pytest.raises(InfeasibleError) as info:
        plan("Llama 3.1 8B", **SMALL, max_tpot_ms=low * 0.95)
    e = info.value
    assert e.binding == "max_tpot_ms" and e.limit == pytest.approx(low * 0.95)
    assert e.best == pytest.approx(low)
    assert f"lowest TPOT any layout reaches on 4 H100-SXM GPUs is {low:.1f} ms > " \
           f"--max-tpot-ms {low * 0.95:g}" in str(e)
    assert "raise the limit or add GPUs" in str(e)


def test_plan__impossible_ttft_says_which_limit_binds(small):
    with pytest.raises(InfeasibleError) as info:
        plan("Llama 3.1 8B", **SMALL, max_ttft_ms=1.0, max_tpot_ms=1000.0)
    e = info.value
    floor = float(small.dataset.ttft_ms.sel(prefill_batch=1).where(
        small.dataset.prefill_fits.sel(prefill_batch=1)).min())
    assert e.binding == "max_ttft_ms" and e.best == pytest.approx(floor) and floor > 1.0
    assert "--max-ttft-ms 1" in str(e)


def test_plan__hardware_point_overrides_the_family():
    kw = dict(family="H200", gpus=2, isl=1024, osl=128, batch=(1, 8), prefill_batch=1)
    stock = plan("Llama 3.1 70B", **kw)
    assert all(c.n_devices == 2 for c in stock.candidates if c.mode == "agg")  # 141 GB > 1 GPU
    big_hbm = plan("Llama 3.1 70B", **kw, hardware={"pe_hbm_gb": 300.0})
    assert big_hbm.dataset.pe_hbm_gb.item() == 300.0
    assert big_hbm.dataset.bw_hbm_gbs.item() == 4800.0  # the rest stays the H200's
    assert any(c.decode_layout == "TP1" for c in big_hbm.candidates)


def test_plan__disagg_only_on_one_gpu_needs_two_workers():
    with pytest.raises(InfeasibleError, match="one prefill and one decode worker"):
        plan("Llama 3.1 8B", **{**SMALL, "gpus": 1}, modes=("disagg",))


# --- precision (dtype) --------------------------------------------------------------------------

def test_plan__dtype_sets_weights_activations_and_kv_cache(small):
    bf16 = plan("Llama 3.1 8B", **SMALL, dtype="bf16").rows("candidates")
    assert {r["dtype"] for r in bf16} == {"bf16"} and {r["dtype"] for r in small.rows()} == {"default"}
    drop = lambda rows: [{k: v for k, v in r.items() if k != "dtype"} for r in rows]  # noqa: E731
    assert drop(bf16) == drop(small.rows("candidates"))  # the presets are 16-bit already
    fp8 = plan("Llama 3.1 8B", **SMALL, dtype="fp8")
    assert fp8.dtype == "fp8" and fp8.dataset.attrs["dtype"] == "fp8" and small.dtype == ""
    b8, b16 = fp8.best_of("agg"), small.best_of("agg")
    # half the bytes per token, but not twice the speed: the per-step overhead stays and FP8
    # matmuls run at their own (measured, lower) efficiency, lowp_compute
    assert b8.tokens_per_s_per_gpu > 1.3 * b16.tokens_per_s_per_gpu
    # one byte per weight and per KV element: decode memory halves at the same layout
    m8 = fp8.dataset.decode_mem_per_gpu_gb.where(fp8.dataset.decode_fits)
    m16 = small.dataset.decode_mem_per_gpu_gb.where(small.dataset.decode_fits & fp8.dataset.decode_fits)
    np.testing.assert_allclose((m8 / m16).median(), 0.5, rtol=0.05)
    assert plan("Llama 3.1 8B", **SMALL, dtype="int8").best  # H100 has an INT8 rate
    wl = Workload("decode", batch=8, s_kv=2048 + 128, weight_dtype="fp8", act_dtype="fp8",
                  kv_dtype="fp8", cuda_graphs=True)
    one = simcore.evaluate("Llama 3.1 8B", wl, space=serving_space(4), family="H100-SXM")
    lay = _layout_of(fp8.dataset, "TP1")
    assert float(fp8.dataset.decode_step_ms.sel(batch=8, **lay)) == \
        float(one.latency_ns.sel(**lay).squeeze()) / 1e6


def test_plan__dtype_the_family_cannot_run_says_what_would_work():
    with pytest.raises(ServingError, match="A100-80G has none: pass one of fp16, bf16, int8"):
        plan("Llama 3.1 8B", **{**SMALL, "family": "A100-80G"}, dtype="fp8")
    with pytest.raises(ServingError, match="dtype must be one of fp16, bf16, fp8, int8"):
        plan("Llama 3.1 8B", **SMALL, dtype="fp32")


def test_run__dtype_option_reaches_the_plan(capsys):
    argv = ["--model", "Llama 3.1 8B", "--family", "H100-SXM", "--gpus", "4", "--isl", "2048",
            "--osl", "256", "--batch", "8", "32", "--dtype", "fp8"]
    assert run(_parser().parse_args(argv)) == 0
    assert "Llama 3.1 8B in fp8 on 4 x H100-SXM" in capsys.readouterr().out
    assert run(_parser().parse_args([*argv, "--format", "json"])) == 0
    got = json.loads(capsys.readouterr().out)
    want = plan("Llama 3.1 8B", family="H100-SXM", gpus=4, isl=2048, osl=256, batch=(8, 32),
                dtype="fp8").rows()
    assert [r["tokens_per_s_per_gpu"] for r in got] == [r["tokens_per_s_per_gpu"] for r in want]
    assert {r["dtype"] for r in got} == {"fp8"}
    with pytest.raises(SystemExit):
        _parser().parse_args([*argv[:-1], "fp6"])


# --- rows, CLI and plot ------------------------------------------------------------------------

def test_rows__keys_carry_units_and_json_round_trips(small, capsys):
    rows = small.rows()
    assert rows and set(rows[0]) == set(ROW_KEYS)
    for key in ("ttft_ms", "tpot_ms", "tokens_per_s_per_gpu", "tokens_per_s_per_user",
                "n_devices", "mode", "batch"):
        assert key in rows[0]
    args = _parser().parse_args(["--model", "Llama 3.1 8B", "--family", "H100-SXM", "--gpus", "4",
                                 "--isl", "2048", "--osl", "256", "--batch", "1,8", "32", "128",
                                 "--prefill-batch", "1", "2", "--format", "json"])
    assert run(args) == 0
    got = json.loads(capsys.readouterr().out)
    assert [r["layout"] for r in got] == [r["layout"] for r in rows]
    assert got[0]["tokens_per_s_per_gpu"] == pytest.approx(rows[0]["tokens_per_s_per_gpu"])
    assert {r["mode"] for r in got} == {"agg", "disagg"}


def test_run__csv_out_file_dataset_and_plot(tmp_path, capsys):
    out, plot = tmp_path / "rows.csv", tmp_path / "frontier.png"
    argv = ["--model", "Llama 3.1 8B", "--family", "H100-SXM", "--gpus", "4", "--isl", "2048",
            "--osl", "256", "--batch", "1", "8", "32", "128", "--max-tpot-ms", "15",
            "--format", "csv", "--out", str(out), "--plot", str(plot)]
    assert run(_parser().parse_args(argv)) == 0
    printed = capsys.readouterr().out
    assert out.read_text() == printed
    rows = list(csv.DictReader(io.StringIO(printed)))
    assert rows and all(float(r["tpot_ms"]) <= 15 for r in rows)
    assert plot.stat().st_size > 20_000
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]  # no temp files left
    mask = os.umask(0)
    os.umask(mask)
    for f in (out, plot):  # the usual mode for new files, not mkstemp's private 0600
        assert f.stat().st_mode & 0o777 == 0o666 & ~mask
    nc = tmp_path / "sweep.nc"
    assert run(_parser().parse_args(argv[:-6] + ["--out", str(nc)])) == 0
    from simcore.io import load_dataset

    assert load_dataset(nc).ttft_ms.attrs["units"] == "ms"


def test_run__table_reports_best_of_each_mode(capsys):
    argv = ["--model", "Llama 3.1 8B", "--family", "H100-SXM", "--gpus", "4", "--isl", "2048",
            "--osl", "256", "--batch", "8", "32", "--max-ttft-ms", "500", "--max-tpot-ms", "20"]
    assert run(_parser().parse_args(argv)) == 0
    out = capsys.readouterr().out
    assert "best agg:" in out and "best disagg:" in out and "tok/s/GPU" in out


@pytest.mark.parametrize("argv, code", [
    (["--gpus", "1", "--model", "Llama 3.1 70B", "--family", "A100-80G", "--batch", "1"], 1),
    (["--gpus", "4", "--model", "Llama 3.1 8B", "--family", "H100-SXM", "--batch", "1",
      "--max-tpot-ms", "0.5"], 1),
    (["--gpus", "4", "--model", "nope"], 2),
    (["--gpus", "4", "--family", "TPU"], 2),
    (["--gpus", "4", "--model", "Llama 3.1 8B", "--plot", "p.txt"], 2),
])
def test_run__infeasible_exit_1_bad_input_exit_2_one_line(argv, code, capsys):
    assert main(["serving", *argv]) == code
    err = "\n".join(ln for ln in capsys.readouterr().err.splitlines()
                    if not ln.startswith("simcore: compiling kernels (once"))
    assert len(err.splitlines()) == 1 and "simcore serving" in err
    assert "Traceback" not in err


@pytest.mark.parametrize("argv", [["--gpus", "0"], ["--gpus", "2", "--isl", "0"],
                                  ["--gpus", "2", "--osl", "-1"], ["--gpus", "2", "--batch", "x"],
                                  ["--gpus", "2", "--max-ttft-ms", "-3"], ["--isl", "10"]])
def test_add_arguments__rejects_bad_values(argv, capsys):
    with pytest.raises(SystemExit) as info:
        _parser().parse_args(argv)
    assert info.value.code == 2


def test_plot_frontier__both_modes_labelled(small, tmp_path):
    fig = plot_frontier(small, tmp_path / "f.png")
    ax = fig.axes[0]
    assert "tokens/s per user" in ax.get_xlabel() and "tokens/s per GPU" in ax.get_ylabel()
    labels = [t.get_text() for t in ax.get_legend().get_texts()]
    assert any("aggregated frontier" in t for t in labels)
    assert any("disaggregated frontier" in t for t in labels)
    assert (tmp_path / "f.png").stat().st_size > 20_000
    fig.canvas.draw()  # the legend covers no candidate: it is outside the axes
    assert not ax.get_legend().get_window_extent().overlaps(ax.get_window_extent())


def test_layout_label__drops_choices_that_cannot_matter():
    base = dict(cp=1, tp=4, pp=1, dp=1, kv_shard_mode="head", ffn_shard_scope="TP+CP",
                tp_placement="outer", cp_placement="outer", cp_ring_variant="kv")
    assert layout_label(base) == "TP4"
    assert layout_label({**base, "cp": 2, "pp": 2, "kv_shard_mode": "seq"}) == \
        "TP4·CP2·PP2 kv=seq ring=kv ffn=TP+CP tp=outer cp=outer"


def test_plan__identical_layouts_collapse_to_the_simplest(small):
    seen = {}
    for c in small.candidates:
        key = (c.mode, c.batch, c.prefill_batch, c.n_devices, c.replicas, c.prefill_workers,
               c.decode_workers, round(c.tokens_per_s_per_gpu, 6),
               round(c.tokens_per_s_per_user, 6), round(c.ttft_ms, 6))
        assert key not in seen, (c.layout, seen.get(key))
        seen[key] = c.layout
    assert not any(math.isnan(c.tokens_per_s_per_gpu) for c in small.candidates)
