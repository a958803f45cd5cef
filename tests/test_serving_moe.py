"""The serving planner's attention data parallelism x expert parallelism (issues 33, 34).

A mixture-of-experts model's instances may split their requests over ``attn_dp``
attention replicas and their experts over ``ep`` of their GPUs (``ep`` = tp·attn_dp:
every expert whole on one GPU, "DEP"); a dense model's search is what it was.
"""

from __future__ import annotations

import csv
import io
import json

import pytest

from simcore import Workload, evaluate
from simcore.cli import main
from simcore.studies.serving import ROW_KEYS, ServingError, plan
from simcore.studies.serving.model import moe_choices
from simcore.studies.serving.search import wide_batches

DSV3 = "deepseek-ai/DeepSeek-V3"


@pytest.fixture(scope="module")
def h200_16():
    return plan(DSV3, family="H200", gpus=16, isl=4000, osl=1000)


@pytest.fixture(scope="module")
def nvl72():
    return plan(DSV3, family="GB200-NVL72", gpus=72, isl=4000, osl=1000, max_tpot_ms=50)


# --- the issue targets ------------------------------------------------------------------------

def test_h200_16__returns_attention_dp_and_ep_rows(h200_16):
    best = h200_16.best[0]
    assert best.attn_dp > 1 and best.ep > 1
    assert any(c.attn_dp > 1 and c.ep > 1 for c in h200_16.best)
    assert h200_16.attn_dps == (1, 2, 4, 8, 16) and h200_16.eps == (1, 2, 4, 8, 16)
    # the layouts without expert parallelism are still searched, next to the EP ones
    assert {str(ds.attrs["layouts"]).split(" ")[0] for ds in h200_16.sweeps} == {"no", "expert"}
    assert any(c.ep == 1 for c in h200_16.candidates)


def test_nvl72__rows_with_ep_above_8(nvl72):
    assert any(c.ep > 8 for c in nvl72.best)
    assert all(c.tpot_ms <= 50 for c in nvl72.best)
    # a wide instance searches batches up to 512 requests per attention-DP rank
    assert max(c.batch for c in nvl72.candidates if c.mode == "agg") > 512


def test_evaluate__deepseek_decode_b256_on_16_h200_picks_ep():
    ds = evaluate(DSV3, Workload("decode", batch=256, s_kv=4500), gpus=16, family="H200",
                  space="reduced")
    tput = ds.throughput_tok_s.where(ds.fits).squeeze()
    best = tput.stack(_l=tput.dims).dropna("_l").idxmax("_l").item()
    lay = dict(zip(tput.dims, best, strict=True))
    assert lay["ep"] > 1


# --- physics -----------------------------------------------------------------------------------

def test_expert_sharded_over_dp_pays_its_dispatch():
    """TP2 x DP8: experts over 16 GPUs whole (ep 16) or each sharded over 8 (ep 2): every
    routed token then goes to 8 shards (7.5 copies off the device, not 0.5)."""
    space = {"tp": [2], "cp": [1], "pp": [1], "dp": [8], "ep": [2, 16],
             "kv_shard_mode": ["head"], "ffn_shard_scope": ["TP"], "tp_placement": ["inner"],
             "cp_placement": ["inner"], "cp_ring_variant": ["kv"]}
    ds = evaluate(DSV3, Workload("decode", batch=256, s_kv=4500), family="H200", space=space)
    comm = ds.comm_ns.squeeze()
    assert float(comm.sel(ep=2)) > 1.5 * float(comm.sel(ep=16))
    mem = ds.mem_weights_bytes.squeeze()  # expert weights spread over tp·dp either way
    assert float(mem.sel(ep=2)) == pytest.approx(float(mem.sel(ep=16)))


def test_more_ep_choices_never_make_the_best_worse():
    kw = dict(family="H200", gpus=16, isl=2000, osl=500, max_tpot_ms=80, modes=("agg",),
              batch=(32, 64, 128, 256, 512))
    none = plan(DSV3, ep=1, **kw).best[0].tokens_per_s_per_gpu
    some = plan(DSV3, ep=(1, 8), **kw).best[0].tokens_per_s_per_gpu
    every = plan(DSV3, **kw).best[0].tokens_per_s_per_gpu
    assert none <= some <= every
    assert every > none  # and EP is worth something here


def test_pinned_values_are_what_rows_carry():
    p = plan(DSV3, family="H200", gpus=16, isl=2000, osl=500, attn_dp=16, ep=16,
             modes=("agg",), batch=(64, 256))
    assert {(c.attn_dp, c.ep) for c in p.candidates} == {(16, 16)}
    assert len(p.sweeps) == 1 and str(p.dataset.attrs["layouts"]).startswith("expert")
    c = p.best[0]
    # an aggregated attention-DP instance prefills one request per rank at a time
    assert c.prefill_batch == 16 and c.layout == "1×TP1·ADP16·EP16"


def test_wide_batches():
    assert wide_batches(1) == ()
    assert wide_batches(16)[-1] == 512 * 16 and min(wide_batches(2)) > 512


# --- rows carry attn_dp and ep -----------------------------------------------------------------

def test_rows_carry_attn_dp_and_ep(h200_16):
    assert {"attn_dp", "ep", "prefill_attn_dp", "prefill_ep"} <= set(ROW_KEYS)
    for c in h200_16.candidates:
        lab = c.decode_layout
        assert (f"ADP{c.attn_dp}" in lab) == (c.attn_dp > 1)
        assert (f"EP{c.ep}" in lab) == (c.ep > 1)
        assert (f"EP{c.prefill_ep}" in c.prefill_layout) == (c.prefill_ep > 1)


def test_cli_json_and_csv_carry_the_fields(capsys):
    args = ["serving", "--model", DSV3, "--family", "H200", "--gpus", "16", "--isl", "2000",
            "--osl", "500", "--mode", "agg", "--batch", "64,256", "--attn-dp", "8,16",
            "--ep", "16", "--top", "2"]
    assert main([*args, "--format", "json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert rows and all(r["ep"] == 16 and r["attn_dp"] in (8, 16) for r in rows)
    assert main([*args, "--format", "csv"]) == 0
    rows = list(csv.DictReader(io.StringIO(capsys.readouterr().out)))
    assert rows and all(r["ep"] == "16" for r in rows)
    assert main(args) == 0
    out = capsys.readouterr().out
    assert "expert-parallel: attention DP 8,16 x EP 16" in out and "·ADP" in out


# --- a dense model is unaffected ---------------------------------------------------------------

def test_dense_model_unaffected():
    kw = dict(family="H100-SXM", gpus=2, isl=1024, osl=128, batch=(1, 16))
    p = plan("Llama 3.1 8B", **kw)
    pinned = plan("Llama 3.1 8B", attn_dp=1, ep=1, **kw)
    assert len(p.sweeps) == 1 and "layouts" not in p.dataset.attrs
    assert all(c.attn_dp == 1 and c.ep == 1 for c in p.candidates)
    assert [c.as_row() for c in p.best] == [c.as_row() for c in pinned.best]
    assert p.attn_dps == p.eps == (1,)
    assert all("ADP" not in c.layout and "EP" not in c.layout for c in p.candidates)


# --- bad input: one line, exit 2 ----------------------------------------------------------------

@pytest.mark.parametrize("args, words", [
    (["--model", DSV3, "--gpus", "16", "--attn-dp", "32"], "beyond the budget of 16 GPUs"),
    (["--gpus", "8", "--ep", "8"], "dense (no experts)"),
    (["--gpus", "8", "--attn-dp", "2"], "dense (no experts)"),
    (["--model", DSV3, "--gpus", "16", "--ep", "3"], "pass some of 1, 2, 4, 8, 16"),
    (["--model", DSV3, "--gpus", "16", "--ep", "32"], "pass some of 1, 2, 4, 8, 16"),
    (["--model", DSV3, "--gpus", "16", "--attn-dp", "4", "--ep", "1"], "is replicas"),
    (["--model", DSV3, "--gpus", "16", "--ep", "x"], "positive integers"),
    (["--model", DSV3, "--gpus", "16", "--ep", "8", "--rate", "2"], "steady-state planner"),
])
def test_bad_input__one_line_exit_2(capsys, args, words):
    assert main(["serving", *args]) == 2
    err = capsys.readouterr().err.strip()
    assert words in err and "\n" not in err and "Traceback" not in err


def test_moe_choices_library_errors():
    with pytest.raises(ServingError, match="dense"):
        moe_choices(1, 8, ep=(1, 2))
    with pytest.raises(ServingError, match="'all'"):
        moe_choices(256, 8, ep="some")
    assert moe_choices(1, 8, ep=1, attn_dp=1) == ((1,), (1,))
    assert moe_choices(256, 16, ep=1) == ((1,), (1,))  # --ep 1 alone: the old search
    assert moe_choices(256, 16, attn_dp=1) == ((1,), (1, 2, 4, 8, 16))  # TP x EP only
    assert moe_choices(60, 24)[1] == (1, 2, 3, 4, 6, 12)


# --- the app's Serving page --------------------------------------------------------------------

def test_app_serving_offers_attn_dp_and_ep():
    from simcore.app import logic as L
    from simcore.model.presets import load_model

    dps, eps = L.serving_moe_options(load_model(DSV3), 16)
    assert dps == ["all", "1", "2", "4", "8", "16"] and eps == ["all", "1", "2", "4", "8", "16"]
    assert L.serving_moe_options(load_model("Llama 3.1 8B"), 16) == ([], [])
    res = L.run_serving(DSV3, family="H200", gpus=16, isl=1024, osl=256, attn_dp="8", ep="16")
    rows = L.serving_table(res)
    assert rows and all(r["attn_dp"] == 8 and r["ep"] == 16 for r in rows)
