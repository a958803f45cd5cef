"""The labelled layer and the physical invariants."""

import numpy as np
import pytest
import xarray as xr
from hypothesis import given, settings
from hypothesis import strategies as st

import simcore
from simcore import HW_KNOBS, PARALLEL_DIMS, Hardware, Workload, best, evaluate, evaluate_best
from simcore.engine.space import full_space, reduced_space

DECODE_128K = Workload("decode", s_kv=131072)
GRID = {k: [v, 2 * v] for k, v in Hardware().as_dict().items()}


def test_spaces__sizes():
    assert reduced_space().size == 1920
    assert full_space().size == 30720


def test_evaluate__dims_units_and_masks():
    ds = evaluate("Llama 3.1 70B", DECODE_128K)
    assert list(ds.latency_ns.dims) == [*HW_KNOBS, *PARALLEL_DIMS]
    assert ds.latency_ns.attrs["units"] == "ns"
    assert ds.mem_bytes.attrs["units"] == "B"
    # tp=128 exceeds Llama 70B's 64 heads: masked, not dropped
    assert 128 in ds.tp.values
    assert not ds.valid.sel(tp=128).any()
    assert ds.latency_ns.sel(tp=128).isnull().all()
    # head_seq forbids tp <= n_kv_heads
    assert not ds.valid.sel(kv_shard_mode="head_seq", tp=8).any()
    assert ds.valid.sel(kv_shard_mode="head_seq", tp=16, cp=1, pp=1, dp=1).all()
    # more devices than the system has (256): masked
    assert not ds.valid.where(ds.n_devices > 256, False).any()
    assert bool(ds.fits.any())


def test_evaluate__chunked_equals_in_memory():
    grid = {"bw_hbm_gbs": [2000.0, 4000.0, 8000.0], "pe_hbm_gb": [48.0, 96.0]}
    wl = Workload("prefill", s_kv=4096, batch=2)
    eager = evaluate("Llama 3.1 8B", wl, hardware=grid, space="full")
    lazy = evaluate("Llama 3.1 8B", wl, hardware=grid, space="full",
                    chunks={"bw_hbm_gbs": 1, "pe_hbm_gb": 1})
    assert lazy.latency_ns.chunks is not None
    xr.testing.assert_identical(eager, lazy.compute())


def test_evaluate__bad_inputs_raise_clearly():
    with pytest.raises(ValueError, match="bw_hbm_gbs"):
        evaluate("Llama 3.1 8B", DECODE_128K, hardware={"bw_hbm_gbs": [-1.0]})
    with pytest.raises(ValueError, match="unknown hardware knobs"):
        evaluate("Llama 3.1 8B", DECODE_128K, hardware={"hbm": [1.0]})
    with pytest.raises(ValueError, match="chunks may only split"):
        evaluate("Llama 3.1 8B", DECODE_128K, chunks={"tp": 1})
    with pytest.raises(ValueError, match="space must be"):
        evaluate("Llama 3.1 8B", DECODE_128K, space="huge")


@pytest.mark.parametrize("metric", ["latency", "throughput", "FLOPS"])
def test_evaluate_best__agrees_with_best_of_full_tensor(metric):
    wl = Workload("decode", s_kv=32768, batch=4)
    grid = {**GRID, "pe_hbm_gb": [0.1, 96.0, 192.0]}  # 0.1 GB: nothing fits there
    full = best(evaluate("Llama 3.1 70B", wl, space="full", hardware=grid), metric)
    fused = evaluate_best("Llama 3.1 70B", wl, space="full", hardware=grid, metric=metric,
                          chunk_size=5)
    assert not bool(full.any_fits.sel(pe_hbm_gb=0.1).any())
    assert bool(full.any_fits.sel(pe_hbm_gb=96.0).all())
    assert set(full.data_vars) == set(fused.data_vars)
    for name in full.data_vars:
        np.testing.assert_array_equal(full[name].values, fused[name].values, err_msg=name)


def test_best__works_on_lazy_datasets():
    wl = Workload("decode", s_kv=32768, batch=4)
    eager = best(evaluate("Llama 3.1 8B", wl, hardware=GRID), "latency")
    lazy = best(evaluate("Llama 3.1 8B", wl, hardware=GRID, chunks={"bw_hbm_gbs": 1}), "latency")
    xr.testing.assert_identical(eager, lazy.compute())


def test_top_points__layout_only_metric_and_first_row_is_best():
    from simcore.engine.metrics import top_points

    ds = evaluate("Llama 3.1 8B", Workload("decode", s_kv=8192), hardware=GRID)
    rows = top_points(ds, "memory", n=3)
    assert len(rows) == 3 and rows[0]["mem_bytes"] <= rows[1]["mem_bytes"] <= rows[2]["mem_bytes"]
    b = best(ds, "latency", dims=[*HW_KNOBS, *PARALLEL_DIMS])
    r0 = top_points(ds, "latency", n=1)[0]
    assert r0["latency_ns"] == float(b.latency_ns)
    assert all(r0[d] == b[f"best_{d}"].item() for d in PARALLEL_DIMS)


@pytest.mark.parametrize("knob", HW_KNOBS)
@pytest.mark.parametrize("wl", [DECODE_128K, Workload("prefill", s_kv=8192, batch=2)],
                         ids=["decode128k", "prefill8k"])
def test_physics__doubling_a_knob_never_worsens_best_latency(knob, wl):
    base = Hardware().as_dict()
    grid = {knob: [base[knob], 2 * base[knob]]}
    r = evaluate_best("Llama 3.1 70B", wl, space="full", hardware=grid)
    lat = r.latency_ns.squeeze()
    assert bool(r.any_fits.all())
    assert float(lat.isel({knob: 1})) <= float(lat.isel({knob: 0})) * (1 + 1e-12)


def test_physics__more_hbm_never_unfits():
    ds = evaluate("Llama 3.1 70B", DECODE_128K, hardware={"pe_hbm_gb": [24.0, 48.0, 96.0, 192.0]})
    fits = ds.fits.squeeze([k for k in HW_KNOBS if k != "pe_hbm_gb"])
    for lo, hi in zip(fits.pe_hbm_gb.values[:-1], fits.pe_hbm_gb.values[1:], strict=True):
        assert bool((fits.sel(pe_hbm_gb=hi) >= fits.sel(pe_hbm_gb=lo)).all())
    assert fits.sum() > 0


def test_physics__llama70b_decode_128k_is_memory_bound():
    r = best(evaluate("Llama 3.1 70B", DECODE_128K, space="full"), "latency").squeeze()
    assert float(r.memory_ns) > float(r.compute_ns)
    assert float(r.memory_ns) > float(r.comm_ns)
    # at batch 1 launches and the per-step floor are a large share; of the rest, HBM
    # streaming dominates
    assert float(r.memory_ns) > 0.5 * (float(r.latency_ns) - float(r.overhead_ns))


def test_physics__prefill_long_prompt_is_compute_bound():
    r = best(evaluate("Llama 3.1 8B", Workload("prefill", s_kv=32768)), "latency").squeeze()
    assert float(r.compute_ns) > float(r.memory_ns)


def test_best__all_infeasible_gives_clear_empty_result():
    ds = evaluate("Llama 3.1 405B", DECODE_128K, hardware={"pe_hbm_gb": [0.5]},
                  family="SiP")
    r = best(ds, "latency")
    assert not bool(r.any_fits.any())
    assert bool(r.latency_ns.isnull().all())
    assert (r.best_tp == -1).all() and (r.best_kv_shard_mode == "").all()
    f = evaluate_best("Llama 3.1 405B", DECODE_128K, hardware={"pe_hbm_gb": [0.5]})
    assert not bool(f.any_fits.any()) and int(f.n_fits.sum()) == 0


def test_best__throughput_is_larger_is_better():
    ds = evaluate("Llama 3.1 8B", Workload("decode", s_kv=4096, batch=16))
    r = best(ds, "throughput").squeeze()
    feasible = ds.throughput_tok_s.where(ds.fits)
    assert float(r.throughput_tok_s) == float(feasible.max())


def test_evaluate__family_changes_topology():
    ds = evaluate("Llama 3.1 8B", Workload("decode", s_kv=4096), family="H100-SXM")
    assert ds.attrs["n_system_devices"] == 8 * 16 * 32
    assert ds.pe_hbm_gb.values.tolist() == [85.9]


def test_simcore_import__compiles_nothing():
    import subprocess
    import sys

    code = "import sys, simcore; print('numba' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"
    assert simcore.__version__


TRAIN_175B_LAYOUT = {"cp": (1,), "tp": (8,), "pp": (12,), "dp": (4,), "kv_shard_mode": ("head",),
                     "ffn_shard_scope": ("TP",), "tp_placement": ("inner",),
                     "cp_placement": ("inner",), "cp_ring_variant": ("kv",)}


def test_evaluate__train_mode_step_time_and_fit():
    wl = Workload("train", batch=1536, s_kv=2048, micro_batch=1, recompute="full",
                  sequence_parallel=False, zero_stage=0)
    ds = evaluate("GPT-3 175B", wl, space=TRAIN_175B_LAYOUT, family="A100-80G")
    r = ds.squeeze()
    assert bool(r.fits) and int(r.n_devices) == 384
    # compute-bound, tens of seconds per 1536 x 2048-token step on 384 A100s
    assert 20e9 < float(r.latency_ns) < 120e9
    assert float(r.compute_ns) > float(r.comm_ns) > float(r.memory_ns)


def test_evaluate__train_memory_falls_with_zero_stage_and_recompute():
    mem = {}
    for attn in ("flash", "unfused"):
        for zs in (0, 1, 2, 3):
            for rc in ("none", "selective", "full"):
                wl = Workload("train", batch=64, s_kv=2048, zero_stage=zs, recompute=rc,
                              attention=attn)
                ds = evaluate("Llama 2 7B", wl, space={"tp": (1,), "pp": (1,), "dp": (8,),
                                                         "cp": (1,), "kv_shard_mode": ("head",)},
                              family="A100-80G")
                mem[attn, zs, rc] = float(ds.mem_bytes.max())
    for attn in ("flash", "unfused"):
        for rc in ("none", "selective", "full"):
            assert mem[attn, 0, rc] > mem[attn, 1, rc] > mem[attn, 2, rc] > mem[attn, 3, rc]
    for zs in range(4):
        # selective recomputation drops the attention scores: FlashAttention keeps none
        assert mem["flash", zs, "none"] == mem["flash", zs, "selective"] > mem["flash", zs, "full"]
        assert mem["unfused", zs, "none"] > mem["unfused", zs, "selective"] > mem["unfused", zs, "full"]


def test_workload__train_fields_validated():
    with pytest.raises(ValueError, match="recompute"):
        Workload("train", recompute="some")
    with pytest.raises(ValueError, match="zero_stage"):
        Workload("train", zero_stage=4)
    with pytest.raises(ValueError, match="multiple of micro_batch"):
        Workload("train", batch=6, micro_batch=4)


@st.composite
def _small_models(draw):
    kv = draw(st.sampled_from([1, 2, 4, 8]))
    heads = kv * draw(st.sampled_from([1, 2, 4]))
    return simcore.Model("drawn", n_layers=draw(st.integers(1, 64)), d_model=heads * 64,
                         n_heads=heads, n_kv_heads=kv, d_ff=draw(st.integers(64, 20000)),
                         vocab_size=draw(st.integers(1000, 100000)),
                         n_experts=draw(st.sampled_from([1, 4])), top_k=1)


@st.composite
def _workloads(draw):
    mode = draw(st.sampled_from(["prefill", "decode", "train"]))
    s_kv = draw(st.integers(16, 65536))
    if mode == "train":
        return Workload("train", batch=draw(st.sampled_from([8, 16, 64])), s_kv=s_kv,
                        recompute=draw(st.sampled_from(["none", "selective", "full"])),
                        zero_stage=draw(st.integers(0, 3)))
    return Workload(mode, batch=draw(st.integers(1, 32)), s_kv=s_kv)


@settings(max_examples=150)
@given(_small_models(), _workloads(), st.sampled_from(HW_KNOBS), st.floats(0.1, 10.0))
def test_physics__any_model_doubling_a_knob_never_worsens(model, wl, knob, scale):
    base = Hardware().as_dict()
    grid = {k: [v * scale] for k, v in base.items()}
    grid[knob] = [base[knob] * scale, 2 * base[knob] * scale]
    space = {"cp": (1, 2, 4), "tp": (1, 2, 4, 8), "pp": (1, 2, 4), "dp": (1, 2)}
    r = evaluate_best(model, wl, space=space, hardware=grid).latency_ns.values.ravel()
    if np.isnan(r[0]):
        return
    assert r[1] <= r[0] * (1 + 1e-12)


def test_evaluate__large_sweeps_come_back_chunked():
    from simcore.engine.space import depth_grid

    ds = evaluate("Llama 3.1 70B", DECODE_128K, space="full", hardware=depth_grid("coarse"))
    assert ds.latency_ns.chunks is not None  # 22M points: lazy, never all in memory
    n_chunks = np.prod([len(c) for c in ds.latency_ns.chunks])
    assert n_chunks >= 5
    sub = ds.isel(pe_hbm_gb=[0], bw_hbm_gbs=[1]).compute()
    direct = evaluate("Llama 3.1 70B", DECODE_128K, space="full",
                      hardware={**{k: ds[k].values for k in HW_KNOBS},
                                "pe_hbm_gb": ds.pe_hbm_gb.values[:1],
                                "bw_hbm_gbs": ds.bw_hbm_gbs.values[1:2]})
    xr.testing.assert_identical(sub, direct)


def test_evaluate__lazy_graph_stays_small_for_the_full_space():
    import pickle

    ds = evaluate("Llama 3.1 70B", DECODE_128K, space="full", hardware=GRID,
                  chunks={"bw_hbm_gbs": 1})
    graph = dict(ds.latency_ns.data.__dask_graph__())
    assert len(pickle.dumps(graph)) < 2_000_000  # the 8 MB coefficient table is not shipped


def test_package__submodule_import_does_not_shadow_the_function():
    import subprocess
    import sys

    # the flat paths of earlier releases (aliases now) and the module's own path alike
    for modules in ("simcore.evaluate, simcore.chunks", "simcore.engine.evaluate, simcore.engine.chunks"):
        code = (f"import {modules}, simcore; "
                "assert callable(simcore.evaluate) and simcore.evaluate.__name__ == 'evaluate'; "
                "import sys; assert 'xarray' in sys.modules")
        subprocess.run([sys.executable, "-c", code], check=True)
    light = "import simcore, sys; simcore.Workload('decode'); assert 'xarray' not in sys.modules"
    subprocess.run([sys.executable, "-c", light], check=True)


# --- device budget (gpus=N) -----------------------------------------------------------------

H100 = dict(family="H100-SXM", space="reduced")
TRAIN_8K = Workload("train", s_kv=8192)


def test_evaluate__gpus_masks_layouts_over_the_budget_as_not_fitting():
    wl = Workload("decode", s_kv=8192, batch=8)
    plain = evaluate("Llama 3.1 8B", wl, **H100)
    ds = evaluate("Llama 3.1 8B", wl, **H100, gpus=8)
    inside, outside = plain.n_devices <= 8, plain.n_devices > 8
    assert bool(plain.fits.where(outside, False).any())  # the mask has work to do
    # inside the budget: the same numbers, bit for bit
    xr.testing.assert_identical(ds.latency_ns.where(inside), plain.latency_ns.where(inside))
    assert bool((ds.fits == (plain.fits & inside)).all())
    # outside: exactly how a layout that cannot run is represented (NaN, not valid, no fit)
    assert bool(ds.latency_ns.where(outside).isnull().all())
    assert bool(ds.mem_bytes.where(outside).isnull().all())
    assert not bool(ds.valid.where(outside, False).any())
    assert (ds.attrs["gpus"], ds.attrs["exact_gpus"]) == (8, 0)
    assert "gpus" not in plain.attrs
    assert int(best(plain).n_devices.max()) > 8  # without the budget a larger layout wins
    for metric in ("latency", "throughput", "FLOPS"):  # a masked layout never wins
        assert int(best(ds, metric).n_devices.max()) <= 8
        fused = evaluate_best("Llama 3.1 8B", wl, **H100, gpus=8, metric=metric)
        assert int(fused.n_devices.max()) <= 8
        np.testing.assert_array_equal(fused.latency_ns.values,
                                      best(ds, metric).latency_ns.values)


def test_evaluate__masked_layouts_never_join_a_pareto_frontier():
    from simcore.engine.pareto import pareto

    ds = evaluate("Llama 3.1 8B", Workload("decode", s_kv=8192, batch=64), **H100, gpus=4)
    front = pareto(ds.squeeze(list(HW_KNOBS)), objectives=("latency", "throughput"),
                   feasible="fits")
    assert bool(front.any())
    assert int(ds.n_devices.where(front).max()) <= 4


def test_evaluate__train_llama8b_h100_gpus8_picks_at_most_8_devices():
    before = best(evaluate("Llama 3.1 8B", TRAIN_8K, **H100)).squeeze()
    # what it picked without a budget: CP8 x TP32 x PP8 (CP16 and 4096 devices before
    # cross-node collectives paid NCCL's latencies, issue 32)
    assert int(before.n_devices) == 2048
    after = best(evaluate("Llama 3.1 8B", TRAIN_8K, **H100, gpus=8)).squeeze()
    assert bool(after.any_fits) and int(after.n_devices) <= 8
    assert (int(after.best_tp), int(after.n_devices)) == (8, 8)


def test_evaluate__budget_widens_dp_and_pp_of_the_named_spaces():
    """The named spaces' DP / PP grids stop at 8; a budget widens them, so "the fastest
    layout of 64 H100s" for Llama 2 7B training is pure data parallelism (TP1 x DP64), not
    the best layout that DP <= 8 allows (CP2 x PP4 x DP8, ~8% slower)."""
    from simcore.engine.space import get_space

    for name in ("reduced", "full"):
        for mode in ("train", "decode"):
            plain, wide = get_space(name, mode), get_space(name, mode, 64)
            assert wide.dict["dp"] == (1, 2, 4, 8, 16, 32, 64)
            assert wide.dict["pp"] == (1, 2, 4, 8, 16, 32, 64)
            assert {k: v for k, v in wide.dict.items() if k not in ("dp", "pp")} == {
                k: v for k, v in plain.dict.items() if k not in ("dp", "pp")}
            assert get_space(name, mode, 8) == plain  # within the default grids: unchanged
    assert get_space("full", "train", 24).dict["dp"] == (1, 2, 3, 4, 6, 8, 12, 16, 24)
    assert get_space("reduced", "decode", 6).dict["dp"] == (1, 2, 3, 4, 6, 8)
    six = evaluate_best("Llama 3.1 8B", Workload("decode", batch=48, s_kv=4096), space="full",
                        family="H100-SXM", gpus=6, exact_gpus=True)  # e.g. TP2 x DP3
    assert int(six.best_tp.values.ravel()[0]) * int(six.best_dp.values.ravel()[0]) * int(
        six.best_cp.values.ravel()[0]) * int(six.best_pp.values.ravel()[0]) == 6
    assert get_space({"dp": (2,)}, "train", 64).dict["dp"] == (2,)  # given grids stay
    w = Workload("train", batch=512, s_kv=4096, micro_batch=1, zero_stage=1, precision="bf16")
    r = evaluate_best("Llama 2 7B", w, space="full", family="H100-SXM", gpus=64,
                      exact_gpus=True)
    lay = {d: int(r[f"best_{d}"].values.ravel()[0]) for d in ("cp", "tp", "pp", "dp")}
    assert lay == {"cp": 1, "tp": 1, "pp": 1, "dp": 64}
    dp8 = evaluate_best("Llama 2 7B", w, space=full_space(), family="H100-SXM", gpus=64,
                        exact_gpus=True)  # a Space as given: DP <= 8
    assert int(dp8.best_dp.values.ravel()[0]) <= 8
    assert float(r.latency_ns.values.ravel()[0]) < float(dp8.latency_ns.values.ravel()[0])


def test_evaluate__exact_gpus_keeps_only_that_device_count():
    ds = evaluate("Llama 3.1 8B", TRAIN_8K, **H100, gpus=8, exact_gpus=True)
    used = ds.n_devices.where(ds.fits.any(list(HW_KNOBS))).values
    assert set(used[np.isfinite(used)].tolist()) == {8.0}


def test_evaluate__budget_too_small_names_the_smallest_count_that_fits():
    wl = Workload("train", s_kv=8192, batch=8)
    with pytest.raises(simcore.DeviceBudgetError, match="smallest device count that fits is") \
            as info:
        evaluate("Llama 3.1 70B", wl, **H100, gpus=2)
    e = info.value
    assert isinstance(e, simcore.SimcoreInputError) and "\n" not in str(e)
    n = e.min_devices
    assert n is not None and n > 2 and f"at least {n}" in str(e)
    assert bool(evaluate("Llama 3.1 70B", wl, **H100, gpus=n).fits.any())
    ds = evaluate("Llama 3.1 70B", wl, **H100)
    assert int(ds.n_devices.where(ds.fits.any(list(HW_KNOBS))).min()) == n
    with pytest.raises(simcore.DeviceBudgetError, match="exactly 6 devices.*counts that fit"):
        # an explicit grid (powers of two only) cannot make exactly 6
        evaluate("Llama 3.1 8B", Workload("decode", s_kv=8192), gpus=6, exact_gpus=True,
                 **{**H100, "space": {"pp": (1, 2, 4, 8), "dp": (1, 2, 4, 8)}})


def test_evaluate__budget_survives_dask_chunks():
    grid = {"pe_hbm_gb": [40.0, 80.0], "bw_hbm_gbs": [2000.0, 4000.0]}
    kw = dict(hardware=grid, family="H100-SXM", space="reduced", gpus=4, batch=[1, 16])
    eager = evaluate("Llama 3.1 8B", Workload("decode", s_kv=8192), **kw)
    lazy = evaluate("Llama 3.1 8B", Workload("decode", s_kv=8192), **kw, chunks=1)
    assert lazy.latency_ns.chunks is not None
    xr.testing.assert_identical(eager, lazy.compute())
    assert not bool(eager.fits.where(eager.n_devices > 4, False).any())


# --- batch and s_kv as sweep dimensions -----------------------------------------------------

def test_evaluate__batch_and_s_kv_are_sweep_dims_equal_to_single_evaluates():
    ds = evaluate("Llama 3.1 8B", batch=[1, 8, 64, 256], s_kv=[2048, 8192], **H100)
    assert list(ds.latency_ns.dims) == ["s_kv", "batch", *HW_KNOBS, *PARALLEL_DIMS]
    assert list(ds.mem_bytes.dims) == ["s_kv", "batch", *PARALLEL_DIMS]
    assert list(ds.n_devices.dims) == list(PARALLEL_DIMS)
    assert ds.batch.values.tolist() == [1, 8, 64, 256] and ds.s_kv.values.tolist() == [2048, 8192]
    assert ds.batch.attrs["units"] == "sequences" and ds.s_kv.attrs["units"] == "tokens"
    assert "batch" not in ds.attrs and "s_kv" not in ds.attrs and ds.attrs["mode"] == "decode"
    for b in (1, 64):
        one = evaluate("Llama 3.1 8B", Workload("decode", batch=b, s_kv=8192), **H100)
        for name in ("latency_ns", "fits", "mem_bytes", "valid"):
            np.testing.assert_array_equal(ds[name].sel(batch=b, s_kv=8192).values,
                                          one[name].values)
    # one call and one .plot: latency of the best layout vs batch, labelled with units
    line = best(ds).latency_ns.squeeze(list(HW_KNOBS)).sel(s_kv=8192).plot(x="batch")
    assert line[0].axes.get_xlabel() == "sequences per step [sequences]"


def test_evaluate__scalar_batch_and_s_kv_keep_todays_shape():
    wl = Workload("prefill", s_kv=4096, batch=2)
    got = evaluate("Llama 3.1 8B", Workload("prefill"), batch=2, s_kv=4096, **H100)
    xr.testing.assert_identical(got, evaluate("Llama 3.1 8B", wl, **H100))
    one = evaluate("Llama 3.1 8B", Workload("prefill"), batch=[2], s_kv=4096, **H100)
    assert dict(one.sizes)["batch"] == 1  # a sequence, even of one value, is a dim


def test_evaluate__prefill_and_train_sweeps_move_s_q_with_s_kv():
    ds = evaluate("Llama 3.1 8B", Workload("prefill"), s_kv=[1024, 4096], **H100)
    for s in (1024, 4096):
        one = evaluate("Llama 3.1 8B", Workload("prefill", s_kv=s), **H100)
        np.testing.assert_array_equal(ds.latency_ns.sel(s_kv=s).values, one.latency_ns.values)
    assert "s_q" not in ds.attrs
    tr = evaluate("Llama 3.1 8B", Workload("train", micro_batch=2, batch=8), batch=[8, 16],
                  s_kv=[2048, 4096], **H100, gpus=8)
    assert dict(tr.sizes)["batch"] == 2 and int(best(tr).n_devices.max()) <= 8


def test_evaluate_best__sweep_dims_agree_with_best_of_the_full_tensor():
    kw = dict(batch=[1, 32], s_kv=[1024, 16384], hardware={"bw_hbm_gbs": [2000.0, 4000.0]},
              **H100, gpus=8)
    fused = evaluate_best("Llama 3.1 8B", **kw)
    full = best(evaluate("Llama 3.1 8B", **kw))
    assert list(fused.latency_ns.dims) == ["s_kv", "batch", *HW_KNOBS]
    for name in ("latency_ns", "n_devices", "best_tp", "best_layout_index", "any_fits"):
        np.testing.assert_array_equal(fused[name].values, full[name].values)
    assert fused.batch.attrs["units"] == "sequences"


@pytest.mark.parametrize("fused", [False, True])
def test_evaluate__sweep_of_small_calls_on_threads_is_the_sweep_on_one(fused, monkeypatch):
    """A batch / s_kv sweep of small calls that together are large runs its points on
    several threads (engine.map_points); the result is identical to the one-thread run."""
    import threading

    import simcore.engine.evaluate as ev

    threads: set[str] = set()
    real = ev.prepare

    def spy(*a, **k):
        threads.add(threading.current_thread().name)
        return real(*a, **k)

    monkeypatch.setattr(ev, "prepare", spy)
    import numba

    from simcore.engine import core

    monkeypatch.setattr(core, "_concurrent_launches", lambda: True)
    run = evaluate_best if fused else evaluate
    kw = dict(batch=[1, 4, 16, 64], s_kv=[1024, 8192], hardware={"bw_hbm_gbs": [2000.0, 4000.0]},
              **H100)
    with simcore.set_options(serial_below_points=10**12):  # together small: one thread
        one = run("Llama 3.1 8B", **kw)
    assert threads == {threading.current_thread().name}
    with simcore.set_options(serial_below_points=5000):  # each call small, together not
        many = run("Llama 3.1 8B", **kw)
    assert any(t.startswith("simcore-points") for t in threads) == (numba.get_num_threads() > 1)
    xr.testing.assert_identical(one, many)


# --- rows at one hardware point without a Dataset (simcore evaluate) ------------------------

def _same_rows(a, b):
    assert [list(r) for r in a] == [list(r) for r in b]  # same keys, same order
    for ra, rb in zip(a, b, strict=True):
        for k in ra:
            va, vb = ra[k], rb[k]
            assert type(va) is type(vb), k
            assert va == vb or (va != va and vb != vb), (k, va, vb)  # NaN == NaN here


@pytest.mark.parametrize(("model", "wl", "metric", "kw"), [
    ("Llama 3.1 70B", DECODE_128K, "latency", {}),
    ("Llama 3.1 8B", Workload("decode", s_kv=8192, batch=64), "throughput",
     {"family": "H100-SXM", "space": "full"}),
    ("Llama 3.1 8B", Workload("prefill", s_kv=4096), "flops", {"gpus": 16}),
    ("Llama 3.1 8B", Workload("train", s_kv=4096), "latency", {"family": "H100-SXM"}),
    ("Mixtral 8x7B", Workload("decode", s_kv=4096), "latency",
     {"space": {"ep": (1, 2, 4, 8)}}),
])
def test_prepared_top_rows__are_top_points_of_evaluate(model, wl, metric, kw):
    from simcore.engine.core import prepare
    from simcore.engine.metrics import top_points

    rows, n_fit = prepare(model, wl, **kw).top_rows(metric, n=12)
    ds = evaluate(model, wl, **kw)
    _same_rows(rows, top_points(ds, metric, n=12))
    assert n_fit == int(ds.fits.sum())


def test_prepared_top_rows__refuses_a_grid():
    from simcore.engine.core import prepare

    with pytest.raises(ValueError, match="single hardware point"):
        prepare("Llama 3.1 8B", DECODE_128K, hardware=GRID).top_rows()


# --- one layout per physical configuration ---------------------------------------------------

def _physical(row):
    """An independent description of a layout row: which device holds which (TP, CP, PP,
    DP) ranks, and the options that matter (seq KV sharding is head sharding on one TP
    rank; TP+CP FFN sharding is TP sharding and there is no ring without CP)."""
    from simcore.engine.space import CHOICES, PLACEMENT_ORDERS

    lay = dict(zip(PARALLEL_DIMS, (int(v) for v in row), strict=True))
    names = {d: CHOICES[d][lay[d]] for d in CHOICES}
    sizes = {"tp": lay["tp"], "cp": lay["cp"], "pp": lay["pp"], "dp": lay["dp"]}
    order = [("tp", "cp", "pp", "dp")[g]
             for g in PLACEMENT_ORDERS[lay["tp_placement"] + 2 * lay["cp_placement"]]]
    dev = np.arange(int(np.prod(list(sizes.values()))))
    ranks = {}
    for g in order:  # innermost first: device d's rank in each group
        ranks[g] = dev % sizes[g]
        dev = dev // sizes[g]
    where = np.stack([ranks[g] for g in ("tp", "cp", "pp", "dp")], axis=1).tobytes()
    kv = "head" if lay["tp"] == 1 and names["kv_shard_mode"] == "seq" else names["kv_shard_mode"]
    cp = lay["cp"] > 1
    return (tuple(sizes.values()), lay["ep"], kv, names["ffn_shard_scope"] if cp else "TP",
            names["cp_ring_variant"] if cp else "", where)


FULL_EP = full_space(ep=(1, 2, 4, 8))
DEDUP_CASES = [
    ("Llama 3.1 8B", Workload("decode", s_kv=8192, batch=8), "H100-SXM"),
    ("Mixtral 8x7B", Workload("prefill", s_kv=4096), "SiP"),
    ("Llama 2 7B", Workload("train", s_kv=4096, batch=64, zero_stage=3), "A100-80G"),
]


def test_placement_orders__are_the_kernels():
    from simcore.engine.space import PLACEMENT_ORDERS
    from simcore.kernels import common

    np.testing.assert_array_equal(np.asarray(PLACEMENT_ORDERS), common._ORDERS)


@pytest.mark.parametrize(("model", "wl", "family"), DEDUP_CASES)
def test_prepare__no_two_valid_layouts_are_one_physical_configuration(model, wl, family):
    from simcore.engine.core import build_coeffs, prepare

    p = prepare(model, wl, space=FULL_EP, family=family)
    raw = build_coeffs(p.layouts, p.model, p.workload, p.topology)["valid"] == 1.0
    kept = [_physical(r) for r in p.layouts[p.valid]]
    assert len(set(kept)) == len(kept)  # no configuration twice
    assert set(kept) == {_physical(r) for r in p.layouts[raw]}  # and none lost
    assert p.valid.sum() < raw.sum()


@pytest.mark.parametrize(("model", "wl", "family"), DEDUP_CASES)
@pytest.mark.parametrize("metric", ["latency", "throughput", "FLOPS"])
def test_evaluate_best__dedup_keeps_every_winner(model, wl, family, metric):
    from simcore.engine.core import OUTPUT_NAMES, build_coeffs, combine, fused_metric, prepare

    p = prepare(model, wl, space=FULL_EP, family=family,
                hardware={"bw_hbm_gbs": [1000, 4000], "bw_inter_gbs": [50, 400],
                          "pe_hbm_gb": [24, 96], "peak_tflops_f16": [400, 1600]})
    m, _ = fused_metric(metric)
    raw = build_coeffs(p.layouts, p.model, p.workload, p.topology)  # every duplicate kept
    outs = combine(raw, p.hw_rows(0, p.n_hw), p.eff)
    score = np.where(outs["fits"], m.sign * outs[m.key], np.inf)
    idx, vals, _ = p.best(p.hw_rows(0, p.n_hw), metric)
    want = np.where(np.isinf(score.min(1)), -1, score.argmin(1))  # first of equals wins
    np.testing.assert_array_equal(idx, want)
    got = vals[:, OUTPUT_NAMES.index(m.key)]
    np.testing.assert_array_equal(got[idx >= 0], outs[m.key][idx >= 0, want[idx >= 0]])


# --- exact pruning of the fused sweep -------------------------------------------------------

def test_dominated__every_coefficient_has_a_role():
    from simcore.engine.core import _ROLES
    from simcore.kernels import schema

    assert set(_ROLES) == set(schema.COEF_DTYPE.names)  # a new coefficient needs one


def _pruned_and_not(*args, **kw):
    out = []
    for prune in (False, True):
        with simcore.set_options(prune_dominated=prune, prune_min_points=1):
            out.append(evaluate_best(*args, **kw))
    return out


@pytest.mark.parametrize(("model", "wl", "family"), [
    ("Llama 3.1 70B", DECODE_128K, "SiP"),
    ("Llama 3.1 8B", Workload("prefill", s_kv=32768), "H100-SXM"),
    ("Mixtral 8x7B", Workload("decode", s_kv=4096, batch=16), "H100-SXM"),
    ("Llama 2 7B", Workload("train", s_kv=4096, batch=64, zero_stage=3), "A100-80G"),
    ("Llama 2 70B", Workload("train", s_kv=4096, batch=512, recompute="full"), "H100-SXM"),
])
@pytest.mark.parametrize("metric", ["latency", "throughput", "FLOPS"])
def test_evaluate_best__pruned_sweep_is_the_unpruned_one(model, wl, family, metric):
    from simcore.engine.core import prepare
    from simcore.engine.space import depth_grid

    kw = dict(space="full", family=family, hardware=depth_grid("coarse"), metric=metric)
    plain, pruned = _pruned_and_not(model, wl, **kw)
    xr.testing.assert_identical(pruned, plain)  # winners, values, indices, n_fits
    p = prepare(model, wl, space="full", family=family, hardware=depth_grid("coarse"))
    assert len(p.live_layouts(metric, prune=True)[1]) > 0  # and it did skip some


@settings(max_examples=150)
@given(_small_models(), _workloads(), st.sampled_from(["latency", "throughput", "FLOPS"]),
       st.floats(0.25, 4.0), st.floats(0.25, 4.0))
def test_evaluate_best__pruning_never_changes_a_winner(model, wl, metric, intra, inter):
    base = Hardware().as_dict()
    grid = {"pe_hbm_gb": [base["pe_hbm_gb"] / 4, base["pe_hbm_gb"]],
            "bw_intra_gbs": [base["bw_intra_gbs"] * intra],  # inter may beat intra here
            "bw_inter_gbs": [base["bw_inter_gbs"] * inter, base["bw_inter_gbs"] * 4 * inter],
            "bw_hbm_gbs": [base["bw_hbm_gbs"], base["bw_hbm_gbs"] * 2]}
    space = {"cp": (1, 2, 4), "tp": (1, 2, 4, 8), "pp": (1, 2, 4), "dp": (1, 2)}
    plain, pruned = _pruned_and_not(model, wl, space=space, hardware=grid, metric=metric)
    xr.testing.assert_identical(pruned, plain)


def test_prepared_best__ties_go_to_the_first_layout_when_pruning():
    import dataclasses

    from simcore.engine.core import prepare

    p = prepare("Llama 3.1 8B", Workload("decode", s_kv=8192), family="H100-SXM", hardware=GRID)
    n = len(p.coeffs)
    q = dataclasses.replace(p, coeffs=np.concatenate([p.coeffs[::-1], p.coeffs]))  # all twice
    hw = q.hw_rows(0, q.n_hw)
    for metric in ("latency", "throughput", "FLOPS"):
        for want, got in zip(q.best(hw, metric, prune=False), q.best(hw, metric, prune=True),
                             strict=True):
            np.testing.assert_array_equal(got, want)
        _, pruned = q.live_layouts(metric, prune=True)
        assert set(np.flatnonzero(q.coeffs["valid"][n:] == 1.0) + n) <= set(pruned)
