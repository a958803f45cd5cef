import subprocess
import sys

import pytest

from simcore.cli import main
from simcore.io import load_dataset


def test_explore__writes_dataset_and_plots(tmp_path, capsys):
    out, plot = tmp_path / "r.nc", tmp_path / "pareto.png"
    rc = main(["explore", "--model", "Llama 3.1 70B", "--mode", "decode", "--s-kv", "131072",
               "--depth", "balanced", "--out", str(out), "--plot", str(plot), "--no-progress"])
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
               "bw_hbm_gbs=2000,4000,8000", "--out", str(out), "--no-progress"])
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
    ["explore", "--out", "r.csv"],
    ["explore", "--plot", "p.txt"],
    ["explore", "--space", "huge"],
    ["explore", "--scheduler", "nowhere", "--depth", "two_stage"],
])
def test_explore__bad_options_one_line_exit_2(argv, capsys):
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "error" in err


def test_explore__help_documents_every_option():
    out = subprocess.run([sys.executable, "-m", "simcore", "explore", "--help"],
                         capture_output=True, text=True, check=True).stdout
    for opt in ("--model", "--family", "--mode", "--s-kv", "--batch", "--depth", "--grid",
                "--space", "--metric", "--top", "--out", "--plot", "--scheduler", "--resume",
                "--no-progress"):
        assert opt in out


def test_explore__resume_store_reuses_chunks(tmp_path, capsys):
    store = tmp_path / "s.zarr"
    argv = ["explore", "--model", "Llama 3.1 8B", "--s-kv", "8192", "--resume", str(store),
            "--no-progress"]
    assert main(argv) == 0
    first = capsys.readouterr().out
    assert main(argv) == 0
    assert capsys.readouterr().out.splitlines()[1:] == first.splitlines()[1:]
    assert (store / "done").exists()
