import subprocess
import sys

import pytest

from simcore.cli import main


def test_main__evaluate_default_prints_best_layouts(capsys):
    assert main(["evaluate", "--space", "reduced", "--top", "3"]) == 0
    out = capsys.readouterr().out
    assert "Llama 3.1 70B decode s_kv=131072" in out
    assert "memory-bound" in out
    assert out.count("qoml") >= 3


def test_main__no_subcommand_means_evaluate(capsys):
    assert main(["--model", "Llama 3.1 8B", "--s-kv", "4096", "--space", "reduced", "--top", "1"]) == 0
    assert "Llama 3.1 8B" in capsys.readouterr().out


@pytest.mark.parametrize("argv", [
    ["evaluate", "--s-kv", "-3"],
    ["evaluate", "--mode", "serve"],
    ["evaluate", "--model", "nope"],
    ["evaluate", "--family", "TPU"],
    ["evaluate", "--bogus"],
    ["evaluate", "--set", "bw_hbm_gbs=-5"],
    ["evaluate", "--set", "speed=5"],
    ["evaluate", "--mode", "train", "--batch", "6", "--micro-batch", "4"],
])
def test_main__bad_options_one_line_exit_2(argv, capsys):
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "error" in err


def test_main__model_that_fits_nowhere_says_so(capsys):
    # 1024 x 128K tokens of KV cache is ~69 TB: more than the 256-PE SiP holds
    rc = main(["evaluate", "--model", "Llama 3.1 405B", "--s-kv", "131072", "--batch", "1024",
               "--space", "reduced"])
    assert rc == 1
    assert "no layout fits" in capsys.readouterr().out


def test_console_script__help_documents_options():
    out = subprocess.run([sys.executable, "-m", "simcore", "evaluate", "--help"],
                         capture_output=True, text=True, check=True).stdout
    for opt in ("--model", "--family", "--mode", "--s-kv", "--batch", "--space", "--metric", "--top",
                "--set", "--micro-batch", "--recompute", "--zero-stage"):
        assert opt in out


def test_main__train_mode_and_hardware_override(capsys):
    assert main(["evaluate", "--model", "Llama 2 7B", "--mode", "train", "--s-kv", "4096",
                 "--batch", "64", "--family", "A100-80G", "--space", "reduced", "--top", "2"]) == 0
    assert "Llama 2 7B train s_kv=4096 batch=64" in capsys.readouterr().out
    assert main(["evaluate", "--model", "Llama 3.1 8B", "--s-kv", "8192", "--space", "reduced",
                 "--top", "1", "--set", "bw_hbm_gbs=8000"]) == 0
    fast = capsys.readouterr().out
    assert main(["evaluate", "--model", "Llama 3.1 8B", "--s-kv", "8192", "--space", "reduced",
                 "--top", "1"]) == 0
    slow = capsys.readouterr().out
    scale = {"ns": 1, "us": 1e3, "ms": 1e6, "s": 1e9}
    lat = []
    for out in (fast, slow):
        value, unit = out.split("best by latency: ")[1].split(" ")[:2]
        lat.append(float(value) * scale[unit])
    assert lat[0] < lat[1]


def test_main__model_from_a_config_folder_and_bad_paths(tmp_path, capsys):
    import shutil
    from pathlib import Path

    folder = tmp_path / "llama"
    folder.mkdir()
    shutil.copy(Path(__file__).parent / "data" / "llama3_8b_config.json", folder / "config.json")
    assert main(["evaluate", "--model", str(folder), "--s-kv", "4096", "--space", "reduced",
                 "--top", "1"]) == 0
    assert "best by latency" in capsys.readouterr().out
    empty = tmp_path / "empty"
    empty.mkdir()
    assert main(["evaluate", "--model", str(empty)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "no HuggingFace config" in err


def test_main__unreachable_scheduler_one_line_exit_2(capsys):
    rc = main(["explore", "--model", "Llama 3.1 8B", "--s-kv", "4096", "--depth", "two_stage",
               "--scheduler", "tcp://127.0.0.1:1", "--no-progress"])
    assert rc == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "cannot reach the dask scheduler" in err
