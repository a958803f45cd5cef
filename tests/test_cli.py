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
    ["evaluate", "--mode", "train"],
    ["evaluate", "--model", "nope"],
    ["evaluate", "--family", "TPU"],
    ["evaluate", "--bogus"],
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
    for opt in ("--model", "--family", "--mode", "--s-kv", "--batch", "--space", "--metric", "--top"):
        assert opt in out
