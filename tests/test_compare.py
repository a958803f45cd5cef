import csv
import io
import json

import numpy as np
import pytest

from simcore.cli import main
from simcore.engine.evaluate import evaluate_best
from simcore.errors import SimcoreInputError
from simcore.model.specs import Workload
from simcore.studies.compare import compare, parse_design

DESIGNS = ["H100-SXM", "H200", "H100-SXM:bw_hbm_gbs=6700"]


@pytest.fixture(scope="module")
def result():
    return compare(DESIGNS, "Llama 3.1 70B", "decode", batch=[1, 8], s_kv=[8192, 131072])


def test_parse_design__family_and_overrides():
    label, fam = parse_design("H100-SXM:bw_hbm_gbs=6700, pe_hbm_gb=141")
    assert label == "H100-SXM:bw_hbm_gbs=6700, pe_hbm_gb=141"
    assert (fam.hardware.bw_hbm_gbs, fam.hardware.pe_hbm_gb) == (6700.0, 141.0)
    assert fam.topology == parse_design("H100-SXM")[1].topology
    assert parse_design("H200")[0] == "H200"


@pytest.mark.parametrize("text, match", [
    ("X300", "unknown hardware family 'X300'"),
    ("H100-SXM:speed=2", "knob one of"),
    ("H100-SXM:bw_hbm_gbs=fast", "must be a number"),
    ("H100-SXM:bw_hbm_gbs=-1", "bw_hbm_gbs"),
])
def test_parse_design__bad(text, match):
    with pytest.raises(SimcoreInputError, match=match):
        parse_design(text)


def test_compare__best_layout_matches_evaluate_best(result):
    ds = result.dataset
    assert ds.sizes == {"design": 3, "batch": 2, "s_kv": 2}
    ref = evaluate_best("Llama 3.1 70B", Workload("decode", batch=8, s_kv=131072),
                        family="H200")
    pt = ds.sel(design="H200", batch=8, s_kv=131072)
    assert float(pt.latency_ns) == float(ref.latency_ns.squeeze())
    assert int(pt.n_devices) == int(ref.n_devices.squeeze())
    assert pt.best_tp.item() == ref.best_tp.squeeze().item()


def test_compare__speedup_over_first(result):
    ds = result.dataset
    np.testing.assert_allclose(ds.speedup.sel(design="H100-SXM"), 1.0)
    np.testing.assert_allclose(
        ds.speedup, (ds.latency_ns.sel(design="H100-SXM") / ds.latency_ns).transpose(
            *ds.speedup.dims))
    assert (ds.speedup.sel(design="H100-SXM:bw_hbm_gbs=6700") > 1).all()  # decode: HBM-bound
    assert result.shared == [(1, 8192), (1, 131072), (8, 8192), (8, 131072)]
    rows = result.rows()
    assert len(rows) == 12 and [r["design"] for r in rows[::4]] == DESIGNS
    assert all(r["fits"] and r["tp"] >= 1 for r in rows)
    assert ds.latency_ns.attrs["units"] == "ns"


def test_compare__no_shared_point():
    with pytest.raises(SimcoreInputError, match="share no point where a layout fits"):
        compare(["H100-SXM", "A100-40G:pe_hbm_gb=0.1"], "Llama 3.1 405B", "decode",
                s_kv=[8192])


@pytest.mark.parametrize("designs, match", [
    (["H100-SXM"], "two or more designs"),
    (["H100-SXM", "H100-SXM"], "repeat a name"),
])
def test_compare__bad_designs(designs, match):
    with pytest.raises(SimcoreInputError, match=match):
        compare(designs, "Llama 3.1 8B", "decode")


def test_compare_cli__table_json_csv_plot(tmp_path, capsys):
    argv = ["compare", "H100-SXM", "H100-SXM:bw_hbm_gbs=6700", "--model", "Llama 3.1 8B",
            "--batch", "1,4", "--s-kv", "8192"]
    png = tmp_path / "cmp.png"
    assert main([*argv, "--plot", str(png)]) == 0
    out = capsys.readouterr().out
    assert "speed-up" in out and "1.00x" in out and png.stat().st_size > 10_000
    assert main([*argv, "--format", "json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert len(rows) == 4 and {"design", "batch", "s_kv", "latency_ms", "throughput_tok_s",
                               "n_devices", "speedup", "tp"} <= set(rows[0])
    assert main([*argv, "--format", "csv"]) == 0
    parsed = list(csv.DictReader(io.StringIO(capsys.readouterr().out)))
    assert [r["design"] for r in parsed] == [r["design"] for r in rows]


@pytest.mark.parametrize("argv, match", [
    (["compare", "H100-SXM", "A100-40G:pe_hbm_gb=0.1", "--model", "Llama 3.1 405B",
      "--s-kv", "8192"], "share no point"),
    (["compare", "H100-SXM"], "two or more designs"),
    (["compare", "H100-SXM", "H100-SXM:foo=1"], "knob one of"),
    (["compare", "H100-SXM", "H200", "--batch", "0"], "positive integers"),
])
def test_compare_cli__bad_input_one_line(capsys, argv, match):
    assert main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and match in err[0]


def test_cli_compare__cuda_graphs_compares_graph_replaying_decode(capsys):
    argv = ["compare", "H100-SXM", "H200", "--model", "Llama 3.1 8B", "--s-kv", "8192",
            "--format", "json", "--gpus", "all"]
    assert main([*argv, "--cuda-graphs"]) == 0
    rows = json.loads(capsys.readouterr().out)
    want = compare(["H100-SXM", "H200"], "Llama 3.1 8B", Workload("decode", cuda_graphs=True),
                   s_kv=[8192]).rows()
    assert [r["latency_ms"] for r in rows] == pytest.approx([w["latency_ns"] / 1e6 for w in want])
    assert main([*argv, "--eager"]) == 0  # launched from the host: every design slower
    eager = json.loads(capsys.readouterr().out)
    assert all(e["latency_ms"] > g["latency_ms"] for e, g in zip(eager, rows, strict=True))
    assert main(["compare", "H100-SXM", "H200", "--mode", "prefill", "--cuda-graphs"]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and "--cuda-graphs" in err
