"""``simcore evaluate --mode train`` searches micro-batch, ZeRO stage and recomputation
with the layout (issue 36 item 4); the engine sweeps them as workload dims."""

import json

import numpy as np
import pytest

import simcore
from simcore.cli import main
from simcore.engine.space import RECOMPUTE_CHOICES, workload_points
from simcore.errors import SimcoreInputError

# small enough to run in seconds: Llama 3.1 8B on one H100 node
BASE = ["evaluate", "--mode", "train", "--model", "Llama 3.1 8B", "--family", "H100-SXM",
        "--gpus", "8", "--batch", "32", "--s-kv", "4096", "--format", "json"]
TRAIN_KEYS = ("micro_batch", "zero_stage", "recompute", "mfu", "tokens_per_s_per_gpu",
              "mem_gb")


def _rows(capsys, *extra):
    assert main([*BASE, *extra]) == 0
    return json.loads(capsys.readouterr().out)


def test_evaluate_train__search_rows_carry_the_training_columns(capsys):
    rows = _rows(capsys, "--micro-batch", "all", "--zero-stage", "all", "--recompute", "all")
    assert rows
    for r in rows:
        assert all(k in r for k in TRAIN_KEYS)
        assert 0.0 < r["mfu"] < 1.0
        assert r["zero_stage"] in (0, 1, 2, 3) and r["recompute"] in RECOMPUTE_CHOICES
        assert r["micro_batch"] >= 1 and 32 % (r["micro_batch"] * r["dp"]) == 0
        assert r["tokens_per_s_per_gpu"] == pytest.approx(r["throughput_tok_s"]
                                                           / r["n_devices"])
        assert 0 < r["mem_gb"] <= 80
    lat = [r["latency_ms"] for r in rows]
    assert lat == sorted(lat)  # ranked by the metric (latency: step time)
    # the search found more than one combination among its best rows
    assert len({(r["micro_batch"], r["zero_stage"], r["recompute"]) for r in rows}) > 1


@pytest.mark.parametrize("fixed", [
    ("--micro-batch", "1", "--zero-stage", "0", "--recompute", "selective"),
    ("--micro-batch", "2", "--zero-stage", "3", "--recompute", "full"),
    ("--micro-batch", "4", "--zero-stage", "1", "--recompute", "none"),
])
def test_evaluate_train__best_of_search_beats_every_fixed_combination(fixed, capsys):
    best = _rows(capsys, "--micro-batch", "all", "--zero-stage", "all", "--recompute", "all",
                 "--top", "1")[0]
    one = _rows(capsys, *fixed, "--top", "1")[0]
    assert best["latency_ms"] <= one["latency_ms"]
    assert (one["micro_batch"], one["zero_stage"], one["recompute"]) == (
        int(fixed[1]), int(fixed[3]), fixed[5])


def test_evaluate_train__throughput_metric_ranks_by_tokens(capsys):
    rows = _rows(capsys, "--micro-batch", "1,2", "--zero-stage", "1,2", "--metric",
                 "throughput")
    tok = [r["throughput_tok_s"] for r in rows]
    assert tok == sorted(tok, reverse=True)


def test_evaluate_train__table_header_says_what_was_searched(capsys):
    argv = [a for a in BASE if a not in ("--format", "json")]
    assert main([*argv, "--zero-stage", "0,3", "--recompute", "full"]) == 0
    out = capsys.readouterr().out
    assert "searched with the layout: micro-batch 1 (fixed); ZeRO stage 0,3; recompute " \
           "full (fixed)" in out
    assert "MFU" in out and "tok/s/GPU" in out and "ZeRO stage" in out.splitlines()[-1]


def test_evaluate_train__fixed_run_keeps_its_numbers(capsys):
    # without lists the rows are the single workload's, now with the training columns
    rows = _rows(capsys, "--top", "3")
    ds = simcore.evaluate("Llama 3.1 8B", simcore.Workload("train", batch=32, s_kv=4096),
                          gpus=8, family="H100-SXM")
    best = simcore.best(ds)
    assert rows[0]["latency_ms"] == pytest.approx(float(best.latency_ns.values.squeeze()) * 1e-6)
    assert (rows[0]["micro_batch"], rows[0]["zero_stage"], rows[0]["recompute"]) == (
        1, 0, "selective")


def test_evaluate_train__micro_batch_dividing_no_layout_is_masked(capsys):
    # 16 divides the batch (32) but only DP <= 2 layouts: the others are masked, not an error
    rows = _rows(capsys, "--micro-batch", "16", "--top", "50")
    assert rows and all(r["dp"] <= 2 for r in rows)


@pytest.mark.parametrize("extra, says", [
    (("--micro-batch", "3"), "--micro-batch 3: does not divide batch=32"),
    (("--micro-batch", "2,3"), "pass a divisor of every --batch (32): 1, 2, 4, 8, 16, 32"),
    (("--zero-stage", "5"), "ZeRO stage 0, 1, 2 or 3"),
    (("--recompute", "bogus"), "none, selective, full or op"),
    (("--micro-batch", "2,2"), "repeats 2"),
])
def test_evaluate_train__bad_input_one_line_exit_2(extra, says, capsys):
    assert main([*BASE, *extra]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and says in err, err


@pytest.mark.parametrize("flag, value", [("--zero-stage", "1"), ("--micro-batch", "all"),
                                         ("--recompute", "full")])
def test_evaluate_train__training_flags_outside_train_exit_2(flag, value, capsys):
    assert main(["evaluate", "--model", "Llama 3.1 8B", "--s-kv", "4096", flag, value]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "pass --mode train" in err and flag in err, err


# -- the engine: the training dims are workload sweep dims ----------------------------------

def test_workload_points__training_dims():
    dims, wls = workload_points(simcore.Workload("train", batch=8), micro_batch=[1, 2],
                                zero_stage=[0, 3], recompute="full")
    assert dims == {"micro_batch": (1, 2), "zero_stage": (0, 3)}
    assert [(w.micro_batch, w.zero_stage, w.recompute) for w in wls] == [
        (1, 0, "full"), (1, 3, "full"), (2, 0, "full"), (2, 3, "full")]
    with pytest.raises(SimcoreInputError, match="training only"):
        workload_points(simcore.Workload("decode"), zero_stage=[0, 1])
    with pytest.raises(SimcoreInputError, match="micro_batch=3"):
        workload_points(simcore.Workload("train", batch=8), micro_batch=[1, 3])
    with pytest.raises(SimcoreInputError, match="recompute values"):
        workload_points(simcore.Workload("train", batch=8), recompute=["full", "bogus"])


def test_evaluate__training_dims_label_and_match_the_fused_path():
    from simcore.engine.evaluate import evaluate_best

    wl = simcore.Workload("train", batch=16, s_kv=2048)
    kw = dict(micro_batch=[1, 2], zero_stage=[0, 3], recompute=["selective", "full"],
              gpus=8, family="H100-SXM")
    ds = simcore.evaluate("Llama 3.1 8B", wl, **kw)
    assert ds.latency_ns.dims[:3] == ("micro_batch", "zero_stage", "recompute")
    assert list(ds.recompute.values) == ["selective", "full"]
    assert ds.zero_stage.attrs["long_name"] == "ZeRO stage"
    one = simcore.evaluate("Llama 3.1 8B", simcore.Workload(
        "train", batch=16, s_kv=2048, micro_batch=2, zero_stage=3, recompute="full"),
        gpus=8, family="H100-SXM")
    np.testing.assert_array_equal(
        ds.latency_ns.sel(micro_batch=2, zero_stage=3, recompute="full").values,
        one.latency_ns.values)
    fused = evaluate_best("Llama 3.1 8B", wl, **kw)
    np.testing.assert_allclose(fused.latency_ns.values.squeeze(),
                               simcore.best(ds).latency_ns.values.squeeze())


@pytest.mark.parametrize("fused", [False, True])
def test_evaluate__memory_check_covers_the_training_dims(fused, monkeypatch):
    import simcore.engine.chunks as chunks_mod
    from simcore.engine.evaluate import evaluate_best

    monkeypatch.setattr(chunks_mod, "available_memory", lambda: 10_000_000)  # 10 MB
    run = evaluate_best if fused else simcore.evaluate
    with pytest.raises(SimcoreInputError) as info:
        run("Llama 3.1 8B", simcore.Workload("train", batch=64, s_kv=2048),
            micro_batch=[1, 2, 4, 8], zero_stage=[0, 1, 2, 3], recompute=list(RECOMPUTE_CHOICES),
            family="H100-SXM", gpus=8)
    msg = str(info.value)
    assert "sweep fewer batch / s_kv / micro_batch / zero_stage / recompute" in msg, msg
    assert "64 points" in msg, msg


def test_evaluate_train__cli_memory_check_covers_the_training_dims(monkeypatch, capsys):
    import simcore.engine.chunks as chunks_mod

    monkeypatch.setattr(chunks_mod, "available_memory", lambda: 10_000_000)  # 10 MB
    assert main([*BASE, "--micro-batch", "all", "--zero-stage", "all",
                 "--recompute", "all"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "--micro-batch / --zero-stage / --recompute" in err
