import csv
import io
import json
import subprocess
import sys

import pytest

from simcore.cli import main
from simcore.io import load_dataset
from simcore.studies.codesign import joint_explore


def test_explore__writes_dataset_and_plots(tmp_path, capsys):
    out, plot = tmp_path / "r.nc", tmp_path / "pareto.png"
    rc = main(["explore", "--model", "Llama 3.1 70B", "--mode", "decode", "--s-kv", "131072",
               "--depth", "balanced", "--dataset", str(out), "--plot", str(plot), "--no-progress"])
    assert rc == 0
    text = capsys.readouterr().out
    assert "1,966,080" not in text  # reduced space by default: 64 x 1920
    assert "122,880 joint evaluations" in text
    assert "Pareto frontier" in text and "bw_hbm_gbs" in text
    ds = load_dataset(out)
    assert int(ds.pareto.sum()) >= 1 and "cost_score" in ds
    assert plot.stat().st_size > 10_000
    assert (tmp_path / "pareto_sensitivity.png").stat().st_size > 10_000


def test_explore__zarr_and_custom_grid(tmp_path, capsys):
    out = tmp_path / "r.zarr"
    rc = main(["explore", "--model", "Llama 3.1 8B", "--s-kv", "8192", "--grid",
               "bw_hbm_gbs=2000,4000,8000", "--dataset", str(out), "--no-progress"])
    assert rc == 0
    assert load_dataset(out).sizes["bw_hbm_gbs"] == 3
    assert "3 hardware x 1920 layouts" in capsys.readouterr().out


def test_explore__fits_nowhere_exit_1_with_message(capsys):
    rc = main(["explore", "--model", "Llama 3.1 405B", "--batch", "1024", "--depth", "two_stage",
               "--no-progress"])
    assert rc == 1
    assert "fits on none" in capsys.readouterr().out


@pytest.mark.parametrize("argv", [
    ["explore", "--depth", "deep"],
    ["explore", "--depth", "0"],
    ["explore", "--grid", "bw_hbm_gbs"],
    ["explore", "--grid", "hbm=1,2"],
    ["explore", "--grid", "bw_hbm_gbs=-1"],
    ["explore", "--dataset", "r.csv"],
    ["explore", "--dataset", "/no/such/folder/r.nc"],
    ["explore", "--out", "r.nc", "--dataset", "s.nc"],
    ["explore", "--plot", "p.txt"],
    ["explore", "--rows", "all"],
    ["explore", "--space", "huge"],
    ["explore", "--scheduler", "nowhere", "--depth", "two_stage"],
])
def test_explore__bad_options_one_line_exit_2(argv, capsys):
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and err.startswith("simcore explore: error: ")


def test_explore__help_documents_every_option():
    out = subprocess.run([sys.executable, "-m", "simcore", "explore", "--help"],
                         capture_output=True, text=True, check=True).stdout
    for opt in ("--model", "--family", "--mode", "--s-kv", "--batch", "--set", "--depth", "--grid",
                "--space", "--metric", "--top", "--format", "--out", "--rows", "--dataset",
                "--plot", "--scheduler", "--resume", "--no-progress"):
        assert opt in out


def test_explore__resume_store_reuses_chunks(tmp_path, capsys):
    store = tmp_path / "s.zarr"
    argv = ["explore", "--model", "Llama 3.1 8B", "--s-kv", "8192", "--resume", str(store),
            "--no-progress"]
    assert main(argv) == 0
    first = capsys.readouterr().out
    assert main(argv) == 0
    assert capsys.readouterr().out.splitlines()[1:] == first.splitlines()[1:]
    assert (store / "marks" / "0").exists() and not (store / ".lock").exists()


def test_explore__deprecated_out_dataset_spelling_still_saves(tmp_path, capsys):
    out = tmp_path / "r.nc"
    assert main(["explore", "--model", "Llama 3.1 8B", "--s-kv", "8192", "--depth", "two_stage",
                 "--out", str(out), "--no-progress"]) == 0
    cap = capsys.readouterr()
    assert "deprecated, pass --dataset" in cap.err
    assert f"saved the per-hardware Dataset to {out}" in cap.out and "Pareto frontier" in cap.out
    assert load_dataset(out).sizes["bw_hbm_gbs"] == 1


def test_explore__json_pareto_rows_match_joint_explore(capsys):
    argv = ["explore", "--model", "Llama 3.1 8B", "--s-kv", "8192", "--grid",
            "bw_hbm_gbs=2000,4000,8000", "--grid", "peak_tflops_f16=500,1000", "--no-progress",
            "--eager"]
    assert main([*argv, "--format", "json"]) == 0
    cap = capsys.readouterr()
    rows = json.loads(cap.out)  # nothing but the JSON on stdout
    assert "joint evaluations" in cap.err
    r = joint_explore("Llama 3.1 8B", s_kv=8192,
                      depth={"bw_hbm_gbs": [2000, 4000, 8000], "peak_tflops_f16": [500, 1000]})
    assert len(rows) == len(r.pareto_scores) >= 1
    for got, want in zip(rows, r.pareto_scores, strict=True):
        assert got["latency_ms"] == pytest.approx(want.latency_ns / 1e6, rel=1e-12)
        assert got["bw_hbm_gbs"] == want.hardware.bw_hbm_gbs and got["tp"] == want.layout["tp"]
        assert got["cost_score"] == pytest.approx(want.cost_score)
    assert not any(k.endswith("_ns") for k in rows[0])


def test_explore__csv_sensitivity_rows(tmp_path, capsys):
    out = tmp_path / "sens.csv"
    assert main(["explore", "--model", "Llama 3.1 8B", "--s-kv", "8192", "--depth", "two_stage",
                 "--no-progress", "--format", "csv", "--rows", "sensitivity",
                 "--out", str(out), "--eager"]) == 0
    assert capsys.readouterr().out == ""
    rows = list(csv.DictReader(io.StringIO(out.read_text())))
    r = joint_explore("Llama 3.1 8B", s_kv=8192, depth="two_stage")
    assert [row["knob"] for row in rows] == [s.knob for s in r.sensitivity]
    assert float(rows[0]["speedup_pct"]) == pytest.approx(100 * r.sensitivity[0].rel_speedup)
    assert set(rows[0]) == {"knob", "baseline_latency_ms", "doubled_latency_ms", "speedup_pct"}


def test_explore__set_moves_the_baseline_hardware(capsys):
    argv = ["explore", "--model", "Llama 3.1 8B", "--s-kv", "8192", "--depth", "two_stage",
            "--no-progress", "--format", "json"]
    assert main(argv) == 0
    base = json.loads(capsys.readouterr().out)[0]
    assert main([*argv, "--set", "bw_hbm_gbs=8000"]) == 0
    fast = json.loads(capsys.readouterr().out)[0]
    assert (base["bw_hbm_gbs"], fast["bw_hbm_gbs"]) == (4000, 8000)
    assert fast["latency_ms"] < base["latency_ms"]


def test_explore__fits_nowhere_json_is_an_empty_array(capsys):
    rc = main(["explore", "--model", "Llama 3.1 405B", "--batch", "1024", "--depth", "two_stage",
               "--no-progress", "--format", "json"])
    assert rc == 1
    cap = capsys.readouterr()
    assert json.loads(cap.out) == [] and "fits on none" in cap.err


def test_explore__cuda_graphs_outside_decode_is_one_line(capsys):
    rc = main(["explore", "--mode", "prefill", "--cuda-graphs", "--depth", "two_stage"])
    err = capsys.readouterr().err
    assert rc == 2 and len(err.strip().splitlines()) == 1 and "--cuda-graphs" in err
