"""The CLI's and the app's defaults are what practitioners deploy (issue 36 item 2): one
node's GPUs unless ``--gpus`` says otherwise (SiP keeps its system), CUDA graphs in decode
unless ``--eager``, and every output header says what it assumed."""

from __future__ import annotations

import inspect
import json

import pytest

import simcore
from simcore.app import logic as L
from simcore.cli import main
from simcore.kernels.inference import LAUNCH_NS
from simcore.model.specs import Workload
from simcore.studies.assumptions import SYSTEM_FAMILIES, Budget, default_gpus
from simcore.studies.compare import compare

NODE = "budget: at most 8 devices (one node; pass --gpus N for more)"
EVAL = ["evaluate", "--model", "Llama 3.1 8B", "--family", "H100-SXM", "--s-kv", "8192"]


def _json(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[list[dict], str]:
    assert main([*argv, "--format", "json"]) == 0
    cap = capsys.readouterr()
    return json.loads(cap.out), cap.err


def _one_error_line(capsys: pytest.CaptureFixture[str], command: str) -> str:
    cap = capsys.readouterr()
    err = cap.err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(f"simcore {command}: error: "), err
    assert cap.out == ""
    return err[0]


# -- the device budget -----------------------------------------------------------------

def test_default_gpus__one_node_of_a_gpu_family_the_whole_sip():
    for fam in ("H100-SXM", "H200", "A100-80G", "A100-40G"):
        assert default_gpus(fam) == 8
    assert SYSTEM_FAMILIES == ("SiP",) and default_gpus("SiP") is None
    assert Budget.resolve("H100-SXM").kwargs() == {"gpus": 8, "exact_gpus": False}
    assert Budget.resolve("SiP").kwargs() == {}


def test_evaluate__no_gpus_on_h100_uses_one_node_and_says_so(capsys):
    argv = ["evaluate", "--model", "Llama 3.1 70B", "--family", "H100-SXM", "--s-kv", "8192",
            "--top", "20"]
    rows, err = _json(argv, capsys)
    assert rows and all(r["n_devices"] <= 8 for r in rows)
    assert NODE in err
    assert main(argv) == 0
    out = capsys.readouterr().out.splitlines()
    assert "on H100-SXM (a 4096-device system)" in out[0]
    assert out[1].startswith(f"assumed: {NODE} | ")
    # as --gpus 8 would, at most (not exactly) 8
    assert _json([*argv, "--gpus", "8"], capsys)[0] == rows
    # --gpus all is the library's default: the whole system
    wide, err = _json([*argv, "--gpus", "all"], capsys)
    assert max(r["n_devices"] for r in wide) > 8
    assert "budget: the whole system, 4096 devices |" in err


def test_evaluate__sip_keeps_its_system_size(capsys):
    rows, err = _json(["evaluate", "--model", "Llama 3.1 8B", "--s-kv", "8192", "--top", "3"],
                      capsys)
    assert "budget: the whole system, 256 devices (pass --gpus N to cap it)" in err
    ds = simcore.evaluate("Llama 3.1 8B", Workload("decode", s_kv=8192, cuda_graphs=True))
    assert rows[0]["latency_ms"] == pytest.approx(float(simcore.best(ds).latency_ns.squeeze()) / 1e6,
                                                  rel=1e-12)


def test_evaluate__default_budget_too_small_names_the_count_to_pass(capsys):
    # 405B in 16-bit needs 810 GB of weights: more than one node of H100s holds
    assert main(["evaluate", "--model", "Llama 3.1 405B", "--family", "H100-SXM"]) == 2
    line = _one_error_line(capsys, "evaluate")
    assert "(the default budget: one node); pass --gpus 16" in line


def test_library_defaults_are_unchanged():
    assert Workload("decode").cuda_graphs is False
    assert inspect.signature(simcore.evaluate).parameters["gpus"].default is None
    assert "differ on purpose" in simcore.evaluate.__doc__


# -- CUDA graphs in decode -----------------------------------------------------------------

def test_evaluate__decode_replays_graphs_by_default_and_eager_adds_the_launches(capsys):
    argv = [*EVAL, "--gpus", "1", "--top", "1"]
    default, err = _json(argv, capsys)
    assert "runtime: CUDA graphs in decode" in err
    assert _json([*argv, "--cuda-graphs"], capsys)[0] == default  # still parses: a no-op
    eager, err = _json([*argv, "--eager"], capsys)
    assert "runtime: eager decode (every kernel launched from the host)" in err
    # one GPU, 32 layers of 10 launches + 4 per step, each 5 us of host time
    assert eager[0]["latency_ms"] - default[0]["latency_ms"] == pytest.approx(
        (32 * 10 + 4) * LAUNCH_NS / 1e6)
    one = simcore.predict("Llama 3.1 8B", Workload("decode", s_kv=8192, cuda_graphs=True),
                          {"tp": 1}, family="H100-SXM")
    assert default[0]["latency_ms"] == pytest.approx(one.latency_ns / 1e6, rel=1e-12)


@pytest.mark.parametrize("mode", ["prefill", "train"])
def test_evaluate__prefill_and_train_never_replay_graphs(mode, capsys):
    argv = ["evaluate", "--model", "Llama 3.1 8B", "--family", "H100-SXM", "--mode", mode,
            "--s-kv", "4096", "--batch", "8", "--top", "1"]
    rows, err = _json(argv, capsys)  # neither flag: no error
    assert rows and "CUDA graphs in decode" not in err
    assert ("prefill launched from the host (no CUDA graphs)" if mode == "prefill"
            else "deepspeed training") in err
    for flag in ("--eager", "--cuda-graphs"):
        assert main([*argv, flag]) == 2
        line = _one_error_line(capsys, "evaluate")
        assert flag in line and "only decode steps replay CUDA graphs" in line


def test_explore__graphs_and_one_node_by_default(capsys):
    from simcore.studies.codesign import joint_explore

    argv = ["explore", "--model", "Llama 3.1 8B", "--family", "H100-SXM", "--s-kv", "8192",
            "--depth", "two_stage", "--no-progress"]
    rows, err = _json(argv, capsys)
    assert NODE in err and "runtime: CUDA graphs in decode" in err
    r = joint_explore("Llama 3.1 8B", s_kv=8192, depth="two_stage", family="H100-SXM", gpus=8,
                      cuda_graphs=True)
    assert [x["latency_ms"] for x in rows] == pytest.approx(
        [s.latency_ns / 1e6 for s in r.pareto_scores], rel=1e-12)
    assert all(x["n_devices"] <= 8 for x in rows)
    eager, err = _json([*argv, "--eager"], capsys)
    assert eager[0]["latency_ms"] > rows[0]["latency_ms"] and "eager decode" in err


# -- compare -----------------------------------------------------------------------------

def test_compare__gpus_compares_equal_device_counts(capsys):
    argv = ["compare", "H100-SXM", "H200", "--model", "Llama 3.1 70B", "--s-kv", "8192,32768"]
    rows, err = _json([*argv, "--gpus", "8", "--exact-gpus"], capsys)
    assert {r["n_devices"] for r in rows} == {8}
    assert "budget: exactly 8 devices per design |" in err
    default, err = _json(argv, capsys)  # one node per design
    assert all(r["n_devices"] <= 8 for r in default)
    assert "budget: at most 8 devices per design (one node; pass --gpus N for more)" in err
    want = compare(["H100-SXM", "H200"], "Llama 3.1 70B", Workload("decode", cuda_graphs=True),
                   s_kv=[8192, 32768], gpus=8).rows()
    assert [r["latency_ms"] for r in default] == pytest.approx(
        [w["latency_ns"] / 1e6 for w in want], rel=1e-12)


def test_compare__budget_per_design_mixes_a_node_and_a_system(capsys):
    _, err = _json(["compare", "H100-SXM", "SiP", "--model", "Llama 3.1 8B", "--s-kv", "8192"],
                   capsys)
    assert ("budget: H100-SXM: at most 8 devices (one node); SiP: the whole system, 256 "
            "devices; pass --gpus N for one budget |") in err


def test_compare__library_takes_a_budget_per_design():
    r = compare(["H100-SXM", "SiP"], "Llama 3.1 8B", "decode", s_kv=[8192], gpus=[2, None])
    assert r.gpus == (2, None) and r.dataset.attrs["gpus"] == "2,all"
    assert int(r.dataset.n_devices.sel(design="H100-SXM").max()) <= 2
    with pytest.raises(simcore.SimcoreInputError, match="one budget for every design"):
        compare(["H100-SXM", "SiP"], "Llama 3.1 8B", "decode", s_kv=[8192], gpus=[2])


# -- every header says what it assumed ----------------------------------------------------------

HEADERS = {
    "evaluate": [*EVAL, "--top", "2"],
    "explore": ["explore", "--model", "Llama 3.1 8B", "--family", "H100-SXM", "--s-kv", "8192",
                "--depth", "two_stage", "--no-progress"],
    "compare": ["compare", "H100-SXM", "H200", "--model", "Llama 3.1 8B", "--s-kv", "8192"],
    "serving": ["serving", "--model", "Llama 3.1 8B", "--family", "H100-SXM", "--gpus", "8",
                "--batch", "1,8", "--top", "1"],
}


@pytest.mark.parametrize("command", list(HEADERS))
@pytest.mark.parametrize("fmt", ["table", "json"])
def test_every_header_states_budget_precision_and_runtime(command, fmt, capsys):
    argv = HEADERS[command]
    assert main([*argv, "--format", fmt]) == 0
    cap = capsys.readouterr()
    text = cap.out if fmt == "table" else cap.err
    if fmt == "json":
        json.loads(cap.out)  # stdout holds the rows only
    line = next(x for x in text.splitlines() if x.startswith("assumed: "))
    budget = ("budget: at most 8 devices" if command == "serving" else
              "budget: at most 8 devices per design (one node" if command == "compare" else NODE)
    assert f"assumed: {budget}" in line
    assert "| precision: weights" in line and "KV cache" in line
    assert "| runtime: CUDA graphs in decode" in line


# -- bad input: one line, exit 2 ----------------------------------------------------------

@pytest.mark.parametrize("command", ["evaluate", "explore", "compare"])
@pytest.mark.parametrize("extra", [["--gpus", "0"], ["--eager", "--cuda-graphs"],
                                   ["--exact-gpus"], ["--gpus", "all", "--exact-gpus"]])
def test_bad_budget_and_graphs_flags_are_one_line(command, extra, capsys):
    argv = {"evaluate": ["evaluate", "--model", "Llama 3.1 8B"],
            "explore": ["explore", "--model", "Llama 3.1 8B", "--depth", "two_stage"],
            "compare": ["compare", "H100-SXM", "H200"]}[command]
    assert main([*argv, *extra]) == 2
    line = _one_error_line(capsys, command)
    assert ("--gpus" in line or "--eager" in line or "--cuda-graphs" in line), line


# -- the app uses the CLI's defaults and shows them ----------------------------------------

def test_app__compare_and_explore_use_the_cli_defaults():
    r = L.run_compare("Llama 3.1 70B", designs=["H100-SXM", "H200"], values="8192")
    assert r.workload.cuda_graphs and r.gpus == (8, 8)
    assert int(r.dataset.n_devices.max()) <= 8
    line = L.compare_assumptions(r)
    assert line.startswith("assumed: budget: at most 8 devices per design (one node) |")
    assert "runtime: CUDA graphs in decode" in line
    p = L.run_compare("Llama 3.1 8B", designs=["H100-SXM", "H200"], values="8192",
                      mode="prefill")  # prefill: no graphs, no error
    assert not p.workload.cuda_graphs
    e = L.run_explore("Llama 3.1 8B", s_kv=8192, family="H100-SXM")
    assert e.workload.cuda_graphs and e.best.n_devices <= 8
    assert "at most 8 devices (one node)" in L.explore_assumptions(e, family="H100-SXM")
