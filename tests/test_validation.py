"""simcore against public measurements: accuracy thresholds, the data table, error paths."""

import math
from dataclasses import fields, replace

import pytest

from simcore import Efficiency, Workload
from simcore.cli import main
from simcore.validation import (
    FITTED_EFFICIENCY,
    KINDS,
    MEAN_ERROR_THRESHOLD,
    MEASUREMENTS,
    POINT_ERROR_THRESHOLD,
    UNMODELLED,
    Measurement,
    get_measurement,
    max_abs_error,
    mean_abs_error,
    megatron_flops_per_step,
    predict,
    validate,
)
from simcore.validation.data import MEGATRON_175B
from simcore.validation.fit import fast_predictor, fit_efficiency


@pytest.fixture(scope="module")
def rows():
    return validate()


# --- accuracy -----------------------------------------------------------------------------
# The targets (MEAN_ERROR_THRESHOLD 10%, POINT_ERROR_THRESHOLD 25%) are not both met on
# the 209-point set yet (see docs/validation.md, Current figures); these tests hold the line
# at the errors measured when the factors were fitted, so a change that makes any of them worse
# fails, and `simcore validate` still reports FAIL against the targets.

#: Mean absolute error ceilings of the current fit (in-sample, every fitted point: the MoE
#: serving set of data_moe and the MoE training points included), overall and per kind.
RECORDED_CEILINGS = {"all": 0.077, "train": 0.068, "prefill": 0.084, "decode": 0.089}
#: Configurations that ran but that simcore predicts not to fit (known gaps, each with its
#: reason here; their history in docs/validation.md, change 7): Llama 3 405B (no
#: recomputation stated; without it a 16-stage pipeline's first stage holds ~100 GiB of
#: activations), Nemotron-340B
#: (its 24.07 recipe is not among the launcher's examples: states 53.7 GiB + activations
#: 25.8 GiB with bf16 gradients and FP8-saved inputs), and TensorRT-LLM's H200 Llama 2 70B
#: TP1 FP8 runs (KV dtype unstated: a bf16 cache does not fit beside the FP8 weights, an
#: FP8 one fits but predicts 18-22% too fast; the same holds for the blog's batch-960
#: 128/128 row and the H200 launch blog's Llama 2 13B batch-1024 FP8 row: 1024 x 256
#: tokens of 16-bit cache are 215 GB on a 141 GB GPU). Megatron-family recipes' bf16 gradients,
#: FP8 primary weights and Transformer Engine's FP8-saved GEMM inputs (read from the
#: sources) made the other eight fit.
KNOWN_NOT_FITTING = frozenset({
    "falcon180b-blog-h200-llama70b-tp1-b192-128-2048:thr",
    "falcon180b-blog-h200-llama70b-tp1-b96-128-4096:thr",
    "falcon180b-blog-h200-llama70b-tp1-b960-128-128:thr", "h200launch-llama13b-b1024-128-128:thr",
    "llama3-405b-16k",
    "llama3-405b-16k-cp16-131k", "llama3-405b-8k", "nemo2407-nemotron-340b",
    # gpt-oss-120b at MBS 4 on PP4 (Megatron-Bridge 25.11): four in-flight micro-batches
    # of 9 layers at Korthikanti's count, + the 201k-vocabulary logits; the recipe's
    # partial recomputation is not modelled (docs/validation.md, MoE training points)
    "mb2511-gpt-oss-120b-h100",
})


def test_validate__errors_no_worse_than_recorded(rows):
    assert mean_abs_error(rows) <= RECORDED_CEILINGS["all"], _report(rows)
    for kind in KINDS:
        sel = [r for r in rows if r.kind == kind]
        assert sel and mean_abs_error(sel) <= RECORDED_CEILINGS[kind], _report(sel)
    assert max_abs_error(rows) <= 0.9


def test_validate__verdict_against_the_targets(rows):
    met = (mean_abs_error(rows) <= MEAN_ERROR_THRESHOLD
           and max_abs_error(rows) <= POINT_ERROR_THRESHOLD)
    assert met is False  # honest: the targets are open (issue: training/inference fidelity)


def test_validate__measured_runs_fit_memory_but_the_known_gaps(rows):
    not_fitting = {r.id for r in rows if not r.fits}
    assert not_fitting <= KNOWN_NOT_FITTING, sorted(not_fitting - KNOWN_NOT_FITTING)
    first = {m.id for m in MEASUREMENTS[:24]}
    assert not (not_fitting & first)


def test_validate__engine_defaults_are_the_fit(rows):
    assert Efficiency() == FITTED_EFFICIENCY
    # and the fit beats an unfitted, data-sheet-style guess
    guess = Efficiency(compute=0.8, memory=0.85, network=0.8, hbm_usable=0.9, train_compute=0.55)
    assert mean_abs_error(rows) < mean_abs_error(validate(efficiency=guess))


def test_fitted_efficiency__physically_plausible():
    from simcore.validation.fit import FACTORS

    assert 0.85 <= FITTED_EFFICIENCY.hbm_usable <= 0.95
    for f in fields(Efficiency):
        v = getattr(FITTED_EFFICIENCY, f.name)
        if f.name in FACTORS and v is not None:
            _, lo, hi = FACTORS[f.name]
            assert lo <= v <= hi, f.name


def test_fast_predictor__matches_predict():
    pts = [get_measurement("korthikanti-175b-full"), get_measurement("lmdeploy-llama2-70b-tp4-decode"),
           get_measurement("trtllm-llama-7b-tp1-in2048")]
    fast = fast_predictor(pts)(FITTED_EFFICIENCY)
    for pt, v in zip(pts, fast, strict=True):
        assert v == pytest.approx(predict(pt), rel=1e-12)


def _report(rows) -> str:
    return "\n".join(f"{r.id}: measured {r.measured} predicted {r.predicted:.4g} {r.unit} "
                     f"({100 * r.error:+.1f}%)" for r in rows)


# --- the table ------------------------------------------------------------------------------

def test_measurements__at_least_ten_points_training_and_inference():
    kinds = {m.kind for m in MEASUREMENTS}
    assert len(MEASUREMENTS) >= 10
    assert "train" in kinds and kinds & {"prefill", "decode"}


def test_measurements__ids_unique_and_sources_cited():
    ids = [m.id for m in (*MEASUREMENTS, *UNMODELLED)]
    assert len(ids) == len(set(ids))
    for m in (*MEASUREMENTS, *UNMODELLED):
        assert m.source.strip() and m.ref.strip(), m.id
        assert m.workload.mode == m.kind


def test_unmodelled__explain_why(rows):
    assert all(m.notes for m in UNMODELLED)
    assert not {m.id for m in UNMODELLED} & {r.id for r in rows}


def test_validate__rows_follow_points_and_sign_convention():
    pt = get_measurement("korthikanti-22b-full")
    (row,) = validate([pt])
    assert row.id == pt.id and row.measured == pt.measured and row.unit == "s"
    assert row.error == pytest.approx(row.predicted / row.measured - 1.0)
    assert row.layout == "TP8 PP1 DP1" and row.hardware == "A100-80G"


def test_validate__kinds_filter():
    assert {r.kind for r in validate(kinds=["prefill"])} == {"prefill"}


def test_megatron_flops_per_step__paper_formula():
    w = Workload("train", batch=1536, s_kv=2048, recompute="full")
    h, s, lyr, v = 12288, 2048, 96, 51200
    expected = 96 * 1536 * s * lyr * h**2 * (1 + s / (6 * h) + v / (16 * lyr * h))
    assert megatron_flops_per_step(MEGATRON_175B, w) == pytest.approx(expected)


# --- error paths -------------------------------------------------------------------------

def _base(point="lmdeploy-llama2-7b-tp1-decode", **kw):
    m = get_measurement(point)
    d = {f.name: getattr(m, f.name) for f in fields(Measurement)}
    d.update(kw)
    return Measurement(**d)


@pytest.mark.parametrize(("kw", "match"), [
    ({"source": "  "}, "source is empty"),
    ({"id": ""}, "id must be a non-empty"),
    ({"kind": "serve"}, "kind='serve' is unknown"),
    ({"kind": "prefill"}, "workload.mode='decode'"),
    ({"metric": "joules"}, "metric='joules' is unknown"),
    ({"metric": "megatron_tflops_per_gpu", "unit": "TFLOP/s"}, "for training runs"),
    ({"unit": "hours"}, "unit='hours'"),
    ({"measured": 0.0}, "measured must be a number > 0"),
    ({"measured": float("nan")}, "measured must be a number > 0"),
    ({"layout": (("sp", 2),)}, "unknown or repeated"),
    ({"layout": (("tp", 2), ("tp", 4))}, "unknown or repeated"),
    ({"layout": (("tp", 0),)}, "must be a positive integer"),
    ({"layout": "tp4"}, "layout must be"),
    ({"model": "Llama 2 7B"}, "model must be a simcore.Model"),
    ({"family": "A100-80G"}, "family must be a simcore.HardwareFamily"),
    ({"workload": {"mode": "decode"}}, "workload must be a simcore.Workload"),
])
def test_measurement__rejects_bad_fields(kw, match):
    with pytest.raises(ValueError, match=match):
        _base(**kw)


def test_measurement__layout_mapping_accepted_and_defaults():
    m = _base(layout={"tp": 2})
    assert m.layout == (("tp", 2),) and m.layout_dict == {"cp": 1, "tp": 2, "pp": 1, "dp": 1, "ep": 1}
    assert m.n_devices == 2 and m.layout_label == "TP2 PP1 DP1"
    assert _base(layout={"cp": 2, "tp": 2}).layout_label == "CP2 TP2 PP1 DP1"


def test_measurement__ref_defaults_to_source_head():
    assert _base(ref="", source="Some Paper, Table 9").ref == "Some Paper"


def test_predict__invalid_layout_says_why():
    bad = _base(layout={"tp": 3})  # 32 heads do not split over 3 ranks
    with pytest.raises(ValueError, match="invalid"):
        predict(bad)


@pytest.mark.parametrize(("call", "match"), [
    (lambda: predict("korthikanti-175b-full"), "takes a simcore.validation.Measurement"),
    (lambda: predict(MEASUREMENTS[0], efficiency={"compute": 0.5}), "simcore.Efficiency"),
    (lambda: validate(kinds=["serve"]), "unknown kinds"),
    (lambda: validate(efficiency=0.5), "simcore.Efficiency"),
    (lambda: validate(["x"]), "Measurement objects"),
    (lambda: get_measurement("nope"), "no measurement 'nope'"),
    (lambda: mean_abs_error([]), "at least one row"),
    (lambda: max_abs_error([]), "at least one row"),
    (lambda: megatron_flops_per_step(MEGATRON_175B, Workload("decode")), "training workload"),
    (lambda: fit_efficiency([]), "at least one measurement"),
    (lambda: fit_efficiency(MEASUREMENTS[:1], bounds=(0.9, 0.5)), "bounds"),
    (lambda: fit_efficiency(MEASUREMENTS[:1], fixed=["speed"]), "unknown"),
])
def test_api__errors_say_what_to_pass(call, match):
    with pytest.raises(ValueError, match=match):
        call()


def test_fit_efficiency__recovers_factor_on_synthetic_point():
    pt = get_measurement("trtllm-gptj-6b-tp1-in2048")
    truth = replace(Efficiency(), compute=0.62)
    synthetic = replace(pt, measured=predict(pt, efficiency=truth))
    res = fit_efficiency([synthetic], base=Efficiency(), factors=["compute"], coarse_step=0.1)
    assert res.fitted == ("compute",) and res.efficiency.compute == pytest.approx(0.62, abs=0.002)
    assert res.mean_abs_error < 1e-2


# --- CLI ---------------------------------------------------------------------------------

def test_cli_validate__prints_table_and_verdict(capsys, monkeypatch):
    # the MLPerf replays (about a minute) have their own tests (tests/test_serving_mlperf.py);
    # --no-mlperf never reaches them
    import simcore.validation.serving_mlperf as mlperf

    monkeypatch.setattr(mlperf, "mlperf_rows", lambda *a, **k: pytest.fail("replayed"))
    assert main(["validate", "--no-mlperf"]) == 0  # a report: targets not met (FAIL), exit 0
    out = capsys.readouterr().out
    assert "--strict exits 1" in out
    for m in MEASUREMENTS:
        assert m.id in out
    assert "mean |error|" in out and "FAIL: mean" in out and "sources:" in out
    assert "Korthikanti" in out and "predicted" in out
    assert "per source" in out and "per hardware generation" in out
    assert "leave-one-source-out mean abs error" in out
    assert "refits from the neutral start" in out and "out-of-sample ranking agreement" in out


def test_leave_one_source_out__predicts_each_source_with_factors_fitted_without_it():
    from simcore.validation.fit import (
        NEUTRAL_START,
        fast_predictor,
        leave_one_source_out,
        source_of,
    )

    pts = [m for m in MEASUREMENTS if m.kind == "decode"]
    loso = leave_one_source_out(pts, factors=["compute"])
    assert set(loso.by_source) == {source_of(p) for p in pts}
    for src, (_, eff) in loso.by_source.items():
        held = [p for p in pts if source_of(p) == src]
        pred = fast_predictor(held)(eff)
        assert [loso.predicted[p.id] for p in held] == pytest.approx(list(pred), rel=1e-12)
        errs = [abs(loso.predicted[p.id] / p.measured - 1) for p in held]
        assert loso.by_source[src][0] == pytest.approx(sum(errs) / len(errs))
        # the factors are those fitted on the other sources only, from the neutral start
        rest = [p for p in pts if source_of(p) != src]
        assert eff == fit_efficiency(rest, base=NEUTRAL_START, factors=["compute"]).efficiency


def test_breakdown__per_kind_source_and_generation(rows):
    from simcore.validation import breakdown

    b = breakdown(rows)
    assert sum(n for _, n in b["kind"].values()) == len(rows)
    assert set(b["hardware"]) == {"A100", "H100", "H200"}
    for err, n in b["source"].values():
        assert n >= 1 and 0 <= err < 1


def test_cli_validate__kind_filter_and_unmodelled(capsys):
    # decode meets the targets since GPT-J's parallel block joined: PASS, exit 0
    assert main(["validate", "--kind", "decode", "--unmodelled", "--no-loso"]) == 0
    out = capsys.readouterr().out
    assert "lmdeploy-llama2-70b-tp4-decode" in out and "korthikanti-175b-full" not in out
    assert "listed, not counted" not in out  # no decode point is set aside
    # prefill meets the targets since the host's launch time joined: PASS, exit 0
    assert main(["validate", "--kind", "prefill", "--unmodelled", "--no-loso"]) == 0
    out = capsys.readouterr().out
    listed = out[out.index("listed, not counted"):]
    assert "trtllm-llama-7b-tp1-in2048" in listed and "superseded" in listed
    assert "trtllm-llama-7b-tp1-in128" not in listed  # counted since the roofline overlap


def test_cli_validate__overrides_accept_a_zero_overlap_and_a_zero_sequence_cost(capsys):
    # roofline_overlap=0 (compute and memory summed) and seq_overhead_ns=0 are legal values
    assert main(["validate", "--kind", "decode", "--no-loso", "--strict", "--efficiency",
                 "roofline_overlap=0", "--efficiency", "seq_overhead_ns=0",
                 "--efficiency", "comm_contention=0"]) == 1
    out = capsys.readouterr().out
    assert "roofline_overlap=0," in out and "seq_overhead_ns=0" in out
    assert "comm_contention=0" in out


def test_cli_validate__threshold_failure_exits_1(capsys):
    argv = ["validate", "--efficiency", "compute=0.3", "--efficiency", "train_compute=0.3",
            "--no-loso", "--no-mlperf"]
    assert main([*argv, "--strict"]) == 1
    assert "FAIL" in capsys.readouterr().out
    assert main(argv) == 0  # without --strict a failing report still exits 0
    assert "FAIL" in capsys.readouterr().out


def test_cli_validate__compiling_notice_names_the_kernels_validate_compiles(capsys):
    """The "compiling kernels" notice of ``simcore validate`` checks the kernels it runs
    (not ``evaluate``'s), so once it has run the notice is gone."""
    from simcore.engine.core import FIRST_CALL_KERNELS, kernels_cached
    from simcore.kernels import _numba

    if not _numba.CACHE:
        pytest.skip("SIMCORE_NUMBA_CACHE=0: nothing is cached")
    main(["validate", "--kind", "train", "--no-loso"])
    assert kernels_cached(FIRST_CALL_KERNELS["validate"])
    capsys.readouterr()
    main(["validate", "--kind", "train", "--no-loso"])
    assert "compiling kernels" not in capsys.readouterr().err


@pytest.mark.parametrize("argv", [
    ["validate", "--kind", "serve"],
    ["validate", "--efficiency", "speed=0.5"],
    ["validate", "--efficiency", "compute=2"],
    ["validate", "--efficiency", "compute"],
    ["validate", "--efficiency", "compute=fast"],
    ["validate", "--efficiency", "comm_contention=1"],
    ["validate", "--efficiency", "comm_contention=-0.1"],
    ["validate", "--bogus"],
    ["validate", "--format", "xml"],
    ["validate", "--out", "/no/such/folder/points.json"],
])
def test_cli_validate__bad_options_one_line_exit_2(argv, capsys):
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and err.startswith("simcore validate: error: ")


def test_cli_validate__json_rows_per_point_with_units(capsys):
    import json

    assert main(["validate", "--kind", "prefill", "--unmodelled", "--format", "json",
                 "--no-loso"]) == 0  # rows written; prefill meets the targets: PASS
    cap = capsys.readouterr()
    rows = json.loads(cap.out)  # nothing but the JSON on stdout
    # the verdict (the 2023 blog's GPT-J FP8 TTFT at 128 tokens lies just past the 25% worst-point
    # limit since memory and op_latency_ns are held at the silicon medians: issue 32 item 5)
    assert ("PASS: mean" in cap.err or "FAIL: mean" in cap.err) and "sources:" in cap.err
    want = validate(kinds=["prefill"])
    modelled = [r for r in rows if r["modelled"]]
    assert [r["id"] for r in modelled] == [w.id for w in want]
    for got, w in zip(modelled, want, strict=True):
        assert got["error_pct"] == pytest.approx(100 * w.error, rel=1e-12)
        assert (got["measured"], got["unit"], got["fits"]) == (w.measured, w.unit, w.fits)
    assert any(not r["modelled"] for r in rows)  # the --unmodelled extras, marked


def test_cli_validate__csv_to_out_file(tmp_path, capsys):
    import csv

    out = tmp_path / "points.csv"
    assert main(["validate", "--kind", "decode", "--format", "csv", "--out", str(out),  # PASS
                 "--no-loso"]) == 0
    assert capsys.readouterr().out == ""
    rows = list(csv.DictReader(out.open()))
    assert [r["id"] for r in rows] == [w.id for w in validate(kinds=["decode"])]
    assert {"measured", "predicted", "unit", "error_pct", "ref", "source"} <= set(rows[0])


def test_infer_measurements__enough_cited_points_that_predict():
    import math

    from simcore.validation.data_infer import INFER_MEASUREMENTS, load_infer_measurements

    pts = INFER_MEASUREMENTS
    assert len(pts) >= 30 and len({p.ref for p in pts}) >= 6
    assert len({p.id for p in pts}) == len(pts)
    assert all(p.source and "json id" in p.notes for p in pts)
    assert {p.kind for p in pts} == {"prefill", "decode"}
    assert any(p.workload.act_dtype == "fp8" for p in pts)
    preds = fast_predictor(pts)(FITTED_EFFICIENCY)
    assert all(math.isfinite(v) and v > 0 for v in preds)
    _, skipped = load_infer_measurements()
    assert skipped and all(why for _, why in skipped)


def test_infer_measurements__self_contradicting_rows_are_excluded_with_the_reason():
    """Rows whose source contradicts itself on a setting the run needs are skipped with the
    reason: TensorRT-LLM v0.9's Falcon-180B batch-1024 throughput (its reproduction command
    runs batch 96), its H100 / H200 Mixtral rows (precision: FP8 header, no FP8 Mixtral in
    0.9.0, one row faster than 16-bit weights allow); lmdeploy's batch > 1 TTFT (a mean
    over client threads) goes while its TPOT stays. The rest of those tables is kept."""
    from simcore.validation.data_infer import INFER_MEASUREMENTS, load_infer_measurements

    skipped = dict(load_infer_measurements()[1])
    for i in ("trt09-h100-falcon-tp8-b1024-128-2048", "trt09-h200-falcon-tp4-b1024-128-2048"):
        assert skipped[i].startswith("excluded: batch ambiguous") and "batch 96" in skipped[i]
    for i in ("trt09-h200-mixtral-ttft128", "trt09-h200-mixtral-ttft2048",
              "trt09-h100-mixtral-ttft2048", "trt09-h200-mixtral-b256-128-2048"):
        assert skipped[i].startswith("excluded: precision unknown") and "#1734" in skipped[i]
    ids = {p.id for p in INFER_MEASUREMENTS}
    assert not any(i.split(":")[0] in skipped for i in ids)
    assert "trt09-a100-mixtral-ttft2048:ttft" in ids  # the A100 table is FP16: no question
    lm = "lmdeploy-llama2-70b-tp4-b64-128-2048"
    assert f"{lm}:tpot" in ids and f"{lm}:ttft" not in ids
    assert skipped[f"{lm}:ttft"].startswith("excluded: TTFT at batch > 1")
    v09 = [p for p in INFER_MEASUREMENTS if p.ref == "TRT-LLM v0.9 perf"]
    hopper_dense = [p for p in v09 if p.model.n_experts == 1 and p.family.name != "A100-80G"]
    assert hopper_dense and all(p.workload.act_dtype == "fp8" for p in hopper_dense)


def test_validate_memory__reported_peaks_next_to_predictions():
    from simcore.validation import MEASUREMENTS, validate_memory

    reported = [m for m in MEASUREMENTS if m.measured_mem_gib is not None]
    rows = validate_memory()
    assert len(rows) == len(reported) >= 20
    r = next(x for x in rows if x.id == "tt2412-8b-8gpu-fsdp")
    assert r.measured_gib == 82.4 and r.capacity_gib == pytest.approx(96e9 / 2**30)
    assert r.error == pytest.approx(r.predicted_gib / r.measured_gib - 1)
    # reserved peaks include allocator caching and temporaries: predictions run low on
    # the whole (recorded: mean |error| 11.1% since torchtitan's eager loss buffers are
    # counted, 28.4% before), and no run that reported its memory is predicted above the
    # device
    assert all(x.predicted_gib < x.capacity_gib for x in rows)
    assert sum(x.error for x in rows) < 0
    assert sum(abs(x.error) for x in rows) / len(rows) <= 0.112


@pytest.mark.parametrize("bad", [0.0, -3.0, float("nan"), float("inf"), True, "82.4"])
def test_measurement__reported_memory_must_be_a_positive_number(bad):
    from dataclasses import replace

    from simcore.validation import get_measurement

    m = get_measurement("tt2412-8b-8gpu-fsdp")
    with pytest.raises(ValueError, match="measured_mem_gib must be a number > 0 or None"):
        replace(m, measured_mem_gib=bad)


# --- whole runs (Measurement.steps) ----------------------------------------------------------

def _whole(**kw):
    return _base("qwen25-7b-tp1-in63488:thr", **kw)


@pytest.mark.parametrize(("kw", "match"), [
    ({"steps": 5}, "steps must be"),
    ({"steps": ((Workload("train"), 1.0),)}, "prefill or decode"),
    ({"steps": (("decode", 1.0),)}, "prefill or decode"),
    ({"steps": ((Workload("decode"), 0.0),)}, "weight must be a number > 0"),
    ({"steps": ((Workload("decode"), float("inf")),)}, "weight must be a number > 0"),
    ({"steps": ((Workload("decode"), True),)}, "weight must be a number > 0"),
    ({"generated": 0}, "needs generated >= 1"),
    ({"generated": -3}, "whole number >= 0"),
    ({"generated": 2.5}, "whole number >= 0"),
    ({"steps": (), "generated": 2048}, "generated is for whole runs"),
    ({"steps": ((Workload("decode", batch=4), 1.0),)}, "same sequences"),
    ({"metric": "latency", "unit": "ms"}, "does not use it"),
])
def test_measurement__rejects_bad_steps(kw, match):
    with pytest.raises(ValueError, match=match):
        _whole(**kw)


def test_measurement__numpy_step_weights_and_generated_accepted():
    import numpy as np

    m = _whole()
    n = _whole(steps=tuple((w, np.float64(c)) for w, c in m.steps), generated=np.int64(2048))
    assert n.generated == 2048 and type(n.generated) is int
    assert all(type(c) is float for _, c in n.steps)
    assert predict(n) == predict(m)


def test_measurement__steps_on_a_training_point_rejected():
    with pytest.raises(ValueError, match="steps describe an inference run"):
        _base("korthikanti-22b-full", steps=((Workload("decode"), 1.0),))


def test_whole_run__latency_is_the_weighted_sum_of_its_steps():
    from simcore.validation.points import evaluate_point, run_steps

    m = _whole()
    assert len(run_steps(m)) == len(m.steps) > 1
    total = 0.0
    for wl, weight in m.steps:
        one = _whole(steps=((wl, 1.0),), generated=1)
        total += weight * evaluate_point(one, FITTED_EFFICIENCY)[0]
    lat, fits = evaluate_point(m, FITTED_EFFICIENCY)
    assert fits and lat == pytest.approx(total, rel=1e-12)
    # throughput is batch x generated tokens over the whole run
    assert predict(m) == pytest.approx(m.workload.batch * m.generated / (lat * 1e-9), rel=1e-12)
    # doubling one step's weight adds exactly that step's latency once more
    (w0, c0), *rest = m.steps
    more = _whole(steps=((w0, 2 * c0), *rest))
    single = evaluate_point(_whole(steps=((w0, 1.0),), generated=1), FITTED_EFFICIENCY)[0]
    assert evaluate_point(more, FITTED_EFFICIENCY)[0] == pytest.approx(lat + c0 * single, rel=1e-9)


def test_whole_run__a_single_step_point_is_its_workload():
    from simcore.validation.points import run_steps

    m = get_measurement("lmdeploy-llama2-7b-tp1-decode")
    assert run_steps(m) == ((m.workload, 1.0),)


def test_fast_predictor__matches_predict_on_whole_runs():
    pts = [get_measurement("qwen25-7b-tp1-in129024:thr"), get_measurement("qwen25-72b-tp4-in1:thr"),
           get_measurement("korthikanti-22b-full"), get_measurement("qwen25-32b-tp2-in63488:thr")]
    fast = fast_predictor(pts)(FITTED_EFFICIENCY)
    for pt, v in zip(pts, fast, strict=True):
        assert v == pytest.approx(predict(pt), rel=1e-12)


def test_whole_run__vllm_steps_follow_its_defaults():
    """A Qwen2.5 speed row: prefill (chunked in 512-token pieces above a 32K model length),
    then osl - 1 decode steps over the growing context, CUDA graphs only up to 8192."""
    from simcore.validation.data_infer import _simpson, _whole_run

    dt = {"weight_dtype": "bf16", "act_dtype": "bf16", "kv_dtype": "bf16", "cuda_graphs": True}
    last, steps, note = _whole_run(1, 63488, 2048, dt)
    pre = [(w, c) for w, c in steps if w.mode == "prefill"]
    dec = [(w, c) for w, c in steps if w.mode == "decode"]
    assert sum(c for _, c in pre) == pytest.approx(63488 / 512)
    assert all(w.s_q == 512 for w, _ in pre) and pre[-1][0].s_kv == 63488
    assert sum(c for _, c in dec) == pytest.approx(2047)
    ctx = [w.s_kv for w, _ in dec]
    assert ctx[0] == 63489 and ctx[-1] == last.s_kv == 65535 and ctx == sorted(set(ctx))
    assert not any(w.cuda_graphs for w, _ in steps) and "chunks" in note
    _, steps, note = _whole_run(1, 30720, 2048, dt)  # max_model_len 32768: one prefill
    assert steps[0][0].s_q == 30720 and steps[0][1] == 1.0 and "chunks" not in note
    _, steps, _ = _whole_run(1, 1, 2048, dt)  # short: decode replayed as CUDA graphs
    assert all(w.cuda_graphs for w, _ in steps if w.mode == "decode")
    # Simpson's weights: exact for a per-step cost linear in position, close for a curved one
    lin = lambda x: 3.0 + 2.0 * x  # noqa: E731
    quad = lambda x: 3.0 + 2.0 * x + 0.01 * x * x  # noqa: E731
    for f, rel in ((lin, 1e-12), (quad, 1e-3)):
        assert sum(c * f(x) for x, c in _simpson(10, 2056, 2047)) == pytest.approx(
            sum(f(10 + i) for i in range(2047)), rel=rel)
    assert _simpson(5, 5, 1) == [(5, 1.0)]
    # a static TensorRT-LLM batch: one context phase, no chunking, graphs as the row says
    _, steps, note = _whole_run(1024, 40000, 4096, dt, vllm=False)
    pre = [w for w, _ in steps if w.mode == "prefill"]
    assert len(pre) == 1 and pre[0].s_q == 40000 and pre[0].batch == 1024
    assert all(w.cuda_graphs for w, _ in steps if w.mode == "decode") and "chunks" not in note
    # a kink (host-bound, then device-bound) is summed closely, not exactly
    kink = lambda x: max(500.0, 0.3 * x)  # noqa: E731
    assert sum(c * kink(x) for x, c in _simpson(10, 2056, 2047)) == pytest.approx(
        sum(kink(10 + i) for i in range(2047)), rel=5e-3)
    # few steps: each one
    assert _simpson(0, 4, 5) == [(i, 1.0) for i in range(5)]
    # an even count over positions 0 .. n-1: nodes fall between two steps
    for f, rel in ((lin, 1e-12), (quad, 1e-3)):
        assert sum(c * f(x) for x, c in _simpson(0, 251, 252)) == pytest.approx(
            sum(f(i) for i in range(252)), rel=rel)
    # a prompt that is not a whole number of chunks: every prompt token is prefilled once
    for isl in (40000, 33000, 65537, 63488):
        _, steps, _ = _whole_run(1, isl, 2048, dt)
        pre = [(w, c) for w, c in steps if w.mode == "prefill"]
        assert sum(c * w.s_q for w, c in pre) == pytest.approx(isl, rel=1e-12)
        assert max(w.s_kv for w, _ in pre) == isl


def test_whole_run__public_helper_builds_a_measurement_and_rejects_bad_input():
    import simcore
    from simcore.model.specs import SpecError
    from simcore.validation import whole_run

    last, steps = whole_run(32, 1024, 256, cuda_graphs=True, weight_dtype="fp8")
    assert last.mode == "decode" and last.s_kv == 1024 + 255 and last.cuda_graphs
    assert sum(c for w, c in steps if w.mode == "decode") == pytest.approx(255)
    assert [w.s_q for w, _ in steps if w.mode == "prefill"] == [1024]
    m = Measurement("mine", "decode", simcore.get_model("Llama 3.1 8B"),
                    simcore.get_family("H100-SXM"), {"tp": 1}, last, "output_tokens_per_s",
                    4000.0, "tok/s", "my cluster", steps=steps, generated=256)
    assert predict(m) > 0
    for kw, match in (({"batch": 0}, "batch must be"), ({"osl": 1}, "osl must be"),
                      ({"isl": 2.5}, "isl must be")):
        args = {"batch": 4, "isl": 128, "osl": 16, **kw}
        with pytest.raises(ValueError, match=match):
            whole_run(args["batch"], args["isl"], args["osl"])
    with pytest.raises(ValueError, match="set mode, batch"):
        whole_run(4, 128, 16, s_kv=99)
    with pytest.raises(ValueError, match="do not apply to every step"):
        whole_run(4, 128, 16, kv_dtype="fp8", flux=1)
    with pytest.raises(ValueError, match="do not apply to every step"):
        whole_run(4, 128, 16, precision="fp8")  # a training setting
    with pytest.raises(ValueError, match="do not apply to every step"):
        whole_run(4, 128, 16, prefill_tokens=64)
    with pytest.raises(ValueError, match="vllm must be True or False"):
        whole_run(4, 128, 16, vllm="no")
    import numpy as np
    assert whole_run(np.int64(4), 128, 16)[0].batch == 4
    with pytest.raises(SpecError):
        whole_run(4, 128, 16, kv_dtype="fp3")


def test_holdout__every_row_read_once_none_fitted():
    """The held-out rows (aiconfigurator's silicon CSV, agg dense-model rows on H100 /
    H200) are all read: kept, or skipped because they are fitted validation points."""
    import csv

    from simcore.validation import holdout

    with open(holdout._CSV, newline="", encoding="utf-8") as fh:
        raw = list(csv.DictReader(fh))
    assert raw and list(raw[0])[-2:] == ["silicon_ttft_ms", "silicon_tpot_ms"]
    assert {r["system"] for r in raw} == {"h100_sxm", "h200_sxm"}
    kept, skipped = holdout.load_holdout()
    assert len(kept) + len(skipped) == len(raw)
    fitted_notes = " ".join(m.notes for m in MEASUREMENTS if m.ref == "aiconfigurator silicon")
    assert skipped and all(why.startswith("a fitted validation point") for _, why in skipped)
    assert all(f"'{sid}'" in fitted_notes for sid, _ in skipped)
    assert not any(f"'{m.notes.split(chr(39))[1]}'" in fitted_notes for m in kept)
    for m in kept:  # served: the running batch is the concurrency
        r = next(x for x in raw if x["id"] == m.notes.split("'")[1])
        assert m.workload.batch == int(r["batch_size"]) and m.layout_dict["tp"] == int(r["tp_size"])
        assert m.measured == float(r["silicon_tpot_ms"])
        assert (m.workload.act_dtype == "fp8") == (r["gemm_quant_mode"] in ("fp8", "fp8_block"))


def test_holdout__predictions_summary_and_bad_input():
    from simcore.validation import holdout_rows, holdout_summary

    rows = holdout_rows()
    assert len(rows) > 700
    assert all(r.predicted_ms > 0 and math.isfinite(r.error) for r in rows)
    s = holdout_summary(rows)
    assert sum(n for _, _, n in s["groups"].values()) == s["n"] == len(rows)
    assert 0 <= s["within_10"] <= s["within_25"] <= 1
    # a slower memory system predicts every row slower
    slow = holdout_rows(replace(FITTED_EFFICIENCY, memory=0.5))
    assert all(b.predicted_ms >= a.predicted_ms for a, b in zip(rows, slow, strict=True))
    with pytest.raises(ValueError, match="simcore.Efficiency"):
        holdout_rows("fast")
    with pytest.raises(ValueError, match="needs rows"):
        holdout_summary([])


def test_validate_cli__prints_the_held_out_check(capsys):
    from simcore.cli import main

    main(["validate", "--no-loso", "--kind", "decode"])
    out = capsys.readouterr()
    text = out.out + out.err
    assert "held out, never fitted: 766 served TPOT rows" in text
    assert "silicon_sample.csv @ 095f58a51c4ca8e61b66ec108d86f223f8d559ce" in text


def test_validate_cli__writes_both_plots(tmp_path, capsys):
    from simcore.cli import main
    from simcore.studies.plot import plot_holdout
    from simcore.validation import holdout_rows

    parity, held = tmp_path / "parity.png", tmp_path / "held.png"
    main(["validate", "--no-loso", "--kind", "decode", "--plot", str(parity),
          "--holdout-plot", str(held)])
    assert parity.stat().st_size > 10_000 and held.stat().st_size > 10_000
    err = capsys.readouterr().err
    assert f"saved plot to {parity}" in err and f"saved holdout-plot to {held}" in err
    fig = plot_holdout(holdout_rows())
    left, right = fig.axes
    assert "766 served runs" in left.get_title()
    assert [t.get_text() for t in right.get_xticklabels()] == ["TP1", "TP2", "TP4", "TP8"]
    empty = plot_holdout([])
    assert "no held-out rows" in empty.axes[0].texts[0].get_text()


def test_served_steps__whole_prompts_in_a_share_of_the_steps():
    """Workload.served_steps: the steps' shares sum to 1 and carry the arriving prompt
    tokens (c·isl/osl per step) whole; past one chunk per step, the single step of
    Workload.served; a token budget chunks the prompts; a bad budget is one clear line."""
    from simcore.errors import SpecError

    steps = Workload.served_steps(concurrency=32, isl=1024, osl=1024)
    assert sum(f for _, f in steps) == pytest.approx(1.0)
    assert sum(w.prefill_tokens * f for w, f in steps) == pytest.approx(32 * 1024 / 1024)
    assert [w.prefill_tokens for w, _ in steps] == [0, 1024]
    one = Workload.served_steps(concurrency=64, isl=100, osl=10)
    assert len(one) == 1 and one[0][0] == Workload.served(concurrency=64, isl=100, osl=10)
    chunked = Workload.served_steps(concurrency=4, isl=8192, osl=1024, chunk_tokens=2048)
    assert chunked[1][0].prefill_tokens == 2048
    assert chunked[1][1] == pytest.approx(4 * 8192 / 1024 / 2048)
    for bad in (-1, 1.5, True):
        with pytest.raises(SpecError, match="chunk_tokens must be an integer >= 0"):
            Workload.served_steps(concurrency=4, isl=8192, osl=1024, chunk_tokens=bad)
