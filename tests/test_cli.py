import csv
import importlib
import inspect
import io
import json
import os
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

import simcore
from simcore.cli import COMMANDS, build_parser, main
from simcore.cli.options import (
    DEFAULT_SPACE,
    OptionError,
    fraction,
    parse_assignment,
    positive_float,
    positive_floats,
)
from simcore.cli.output import Column, emit_rows, render_rows
from simcore.errors import SimcoreInputError
from simcore.model.presets import DEFAULT_FAMILY, DEFAULT_MODEL

ROOT = Path(__file__).resolve().parents[1]
SMALL = ["--model", "Llama 3.1 8B", "--s-kv", "4096"]


def _one_error_line(err: str, command: str) -> str:
    err = err.strip()
    assert len(err.splitlines()) == 1, err
    assert err.startswith(f"simcore {command}: error: "), err
    assert "Traceback" not in err
    return err


# -- the command table, --help, --version ----------------------------------------------

@pytest.mark.parametrize("command", [*COMMANDS, None])
def test_main__help_works_for_every_command(command, capsys):
    argv = ["--help"] if command is None else [command, "--help"]
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert out.startswith(f"usage: simcore{'' if command is None else ' ' + command} ")
    if command is None:
        for name in COMMANDS:
            assert name in out


def test_main__version_is_the_package_version(capsys):
    assert main(["--version"]) == 0
    version = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
    assert capsys.readouterr().out == f"simcore {version}\n" == f"simcore {simcore.__version__}\n"


def test_console_script__help_documents_options():
    out = subprocess.run([sys.executable, "-m", "simcore", "evaluate", "--help"],
                         capture_output=True, text=True, check=True).stdout
    for opt in ("--model", "--family", "--mode", "--s-kv", "--batch", "--space", "--metric", "--top",
                "--set", "--micro-batch", "--recompute", "--zero-stage", "--dtype", "--kv-dtype",
                "--format", "--out"):
        assert opt in out


def test_build_parser__shared_options_have_one_default_everywhere():
    parser = build_parser()
    ev, ex = parser.parse_args(["evaluate"]), parser.parse_args(["explore"])
    for ns in (ev, ex):
        assert ns.model == DEFAULT_MODEL and ns.family == DEFAULT_FAMILY
        assert ns.space == DEFAULT_SPACE
        assert (ns.mode, ns.s_kv, ns.batch, ns.metric, ns.top) == ("decode", 131072, 1,
                                                                   "latency", 10)
        assert (ns.format, ns.out, ns.set) == ("table", None, [])
    va = parser.parse_args(["validate"])
    assert (va.format, va.out) == ("table", None)


def test_default_space__is_the_engines_default():
    from simcore.studies.codesign import joint_explore

    ev = importlib.import_module("simcore.engine.evaluate")
    for fn in (ev.evaluate, ev.evaluate_best, joint_explore):
        assert inspect.signature(fn).parameters["space"].default == DEFAULT_SPACE


# -- evaluate ---------------------------------------------------------------------------

def test_main__evaluate_default_prints_best_layouts(capsys):
    assert main(["evaluate", "--top", "3"]) == 0
    out = capsys.readouterr().out
    assert "Llama 3.1 70B decode s_kv=131072" in out and "reduced space" in out
    # batch-1 decode: launches and the per-step floor are the largest part, each part
    # priced alone: the FLOPs cost time too (no "compute 0 ns"), less than the HBM reads
    assert "overhead-bound (each part alone: compute " in out
    import re

    line = out.strip().splitlines()[-1]
    comp = re.search(r"compute ([0-9.]+) us", line)
    mem = re.search(r"memory ([0-9.]+) ms", line)
    assert comp and mem and float(comp.group(1)) > 0
    assert "compute 0 ns" not in out
    header = out.splitlines()[2].split()
    assert header[-5:] == ["compute", "memory", "comm", "overhead", "bound"]
    assert out.count("qoml") >= 3


def test_main__evaluate_json_rows_carry_each_part_alone_and_the_bound(capsys):
    assert main(["evaluate", "--model", "Llama 3.1 8B", "--family", "H100-SXM", "--top", "4",
                 "--format", "json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    parts = ("compute_alone_ms", "memory_alone_ms", "comm_ms", "overhead_ms")
    for r in rows:
        assert r["overhead_ms"] > 0 and r["compute_alone_ms"] > 0
        assert r["compute_ms"] == 0.0  # the roofline books decode ops to the memory side
        largest = max(parts, key=lambda k: r[k])
        assert r["bound"] == largest.split("_")[0]


@pytest.mark.parametrize("argv", [
    ["evaluate", "--top", "1"],
    ["evaluate", "--batch", "1,8", "--s-kv", "2048,8192", "--top", "1"],  # the memory check
    ["evaluate", "--mode", "train", "--micro-batch", "all", "--top", "1"],
    ["evaluate", "--top", "2", "--format", "csv", "--out", "{tmp}/rows.csv"],  # atomic write
])
def test_main__evaluate_loads_only_what_it_uses(argv, tmp_path):
    # the warm command is numba's import and cache load: no xarray/pandas/dask/matplotlib,
    # no other command's module, on every path of simcore evaluate
    argv = [a.replace("{tmp}", str(tmp_path)) for a in argv]
    code = (f"import sys; from simcore.cli import main; assert main({argv!r}) == 0; "
            "heavy = {'xarray', 'pandas', 'dask', 'distributed', 'matplotlib', 'zarr', "
            "'simcore.studies.serving', 'simcore.autotune', 'simcore.cli.explore'} & set(sys.modules); "
            "assert not heavy, heavy")
    subprocess.run([sys.executable, "-c", code], check=True, capture_output=True)


def test_main__no_subcommand_means_evaluate(capsys):
    assert main([*SMALL, "--top", "1"]) == 0
    assert "Llama 3.1 8B" in capsys.readouterr().out


def test_main__evaluate_json_rows_carry_units_and_match_the_engine(capsys):
    from simcore.engine.metrics import top_points
    from simcore.model.specs import Workload

    assert main(["evaluate", *SMALL, "--top", "3", "--format", "json", "--eager"]) == 0
    cap = capsys.readouterr()
    rows = json.loads(cap.out)  # nothing but the JSON on stdout
    assert "best by latency" in cap.err and "Llama 3.1 8B" in cap.err
    assert len(rows) == 3
    assert {"latency_ms", "mem_gb", "throughput_tok_s", "comm_ms", "tp"} <= set(rows[0])
    assert not any(k.endswith(("_ns", "_bytes")) for k in rows[0])
    ev = importlib.import_module("simcore.engine.evaluate")
    ds = ev.evaluate("Llama 3.1 8B", Workload("decode", s_kv=4096), space=DEFAULT_SPACE)
    want = top_points(ds, "latency", n=3)
    for got, w in zip(rows, want, strict=True):
        assert got["latency_ms"] == pytest.approx(float(w["latency_ns"]) / 1e6, rel=1e-12)
        assert got["mem_gb"] == pytest.approx(float(w["mem_bytes"]) / 1e9, rel=1e-12)
        assert (got["tp"], got["kv_shard_mode"]) == (int(w["tp"]), str(w["kv_shard_mode"]))


def test_main__evaluate_csv_has_the_json_keys_and_values(capsys):
    argv = ["evaluate", *SMALL, "--top", "2"]
    assert main([*argv, "--format", "json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert main([*argv, "--format", "csv"]) == 0
    got = list(csv.DictReader(io.StringIO(capsys.readouterr().out)))
    assert [list(r) for r in got] == [list(r) for r in rows]
    for g, r in zip(got, rows, strict=True):
        assert float(g["latency_ms"]) == r["latency_ms"] and g["kv_shard_mode"] == r["kv_shard_mode"]


def test_main__evaluate_out_writes_the_file_and_nothing_on_stdout(tmp_path, capsys):
    out = tmp_path / "rows.json"
    assert main(["evaluate", *SMALL, "--top", "2", "--format", "json", "--out", str(out)]) == 0
    cap = capsys.readouterr()
    assert cap.out == "" and "best by latency" in cap.err
    assert len(json.loads(out.read_text())) == 2
    assert sorted(p.name for p in tmp_path.iterdir()) == ["rows.json"]  # no temp file left


def test_main__model_that_fits_nowhere_says_so(capsys):
    # 1024 x 128K tokens of KV cache is ~69 TB: more than the 256-PE SiP holds
    argv = ["evaluate", "--model", "Llama 3.1 405B", "--s-kv", "131072", "--batch", "1024"]
    assert main(argv) == 1
    assert "no layout fits" in capsys.readouterr().out
    assert main([*argv, "--format", "json"]) == 1
    cap = capsys.readouterr()
    assert json.loads(cap.out) == [] and "no layout fits" in cap.err


def test_main__train_mode_and_hardware_override(capsys):
    assert main(["evaluate", "--model", "Llama 2 7B", "--mode", "train", "--s-kv", "4096",
                 "--batch", "64", "--family", "A100-80G", "--top", "2"]) == 0
    assert "Llama 2 7B train s_kv=4096 batch=64" in capsys.readouterr().out
    argv = ["evaluate", "--model", "Llama 3.1 8B", "--s-kv", "8192", "--top", "1",
            "--format", "json"]
    assert main([*argv, "--set", "bw_hbm_gbs=8000"]) == 0
    fast = json.loads(capsys.readouterr().out)[0]["latency_ms"]
    assert main(argv) == 0
    slow = json.loads(capsys.readouterr().out)[0]["latency_ms"]
    assert fast < slow


def test_main__evaluate_gpus_budget_picks_a_layout_within_it(capsys):
    argv = ["evaluate", "--model", "Llama 3.1 8B", "--family", "H100-SXM", "--mode", "train",
            "--s-kv", "8192", "--top", "5", "--format", "json"]
    assert main([*argv, "--gpus", "all"]) == 0
    # no budget: CP8 x TP32 x PP8 (4096 devices before cross-node collectives paid NCCL's
    # latencies, issue 32)
    assert json.loads(capsys.readouterr().out)[0]["n_devices"] == 2048
    assert main([*argv, "--gpus", "8"]) == 0
    cap = capsys.readouterr()
    rows = json.loads(cap.out)
    assert rows and all(r["n_devices"] <= 8 for r in rows)
    assert (rows[0]["tp"], rows[0]["n_devices"]) == (8, 8)
    assert "budget: at most 8 devices" in cap.err and "on 8 devices" in cap.err
    assert main([*argv, "--gpus", "4", "--gpus-exact"]) == 0
    assert {r["n_devices"] for r in json.loads(capsys.readouterr().out)} == {4}


def test_main__evaluate_budget_too_small_exit_2_names_the_smallest_count(capsys):
    argv = ["evaluate", "--model", "Llama 3.1 70B", "--family", "H100-SXM", "--mode", "train",
            "--s-kv", "8192", "--batch", "8", "--gpus", "2"]
    assert main(argv) == 2
    cap = capsys.readouterr()
    line = _one_error_line(cap.err, "evaluate")
    assert "--gpus 2:" in line and "the smallest device count that fits is 32" in line
    assert cap.out == ""


def test_main__evaluate_batch_and_s_kv_lists_give_the_top_per_point(capsys):
    argv = ["evaluate", "--model", "Llama 3.1 8B", "--family", "H100-SXM", "--batch", "1,8,64",
            "--s-kv", "2048,8192", "--gpus", "8", "--top", "2", "--eager"]
    assert main([*argv, "--format", "json"]) == 0
    cap = capsys.readouterr()
    rows = json.loads(cap.out)
    points = [(r["s_kv"], r["batch"]) for r in rows]
    assert points == [(s, b) for s in (2048, 8192) for b in (1, 8, 64) for _ in range(2)]
    assert list(rows[0])[:2] == ["s_kv", "batch"]
    assert cap.err.count("best by latency") == 6 and "s_kv 8192, batch 64: best" in cap.err
    ev = importlib.import_module("simcore.engine.evaluate")
    best = simcore.best(ev.evaluate("Llama 3.1 8B", batch=[1, 8, 64], s_kv=[2048, 8192],
                                    family="H100-SXM", gpus=8)).squeeze()
    for r in rows[::2]:
        want = float(best.latency_ns.sel(s_kv=r["s_kv"], batch=r["batch"])) / 1e6
        assert r["latency_ms"] == pytest.approx(want, rel=1e-12)
    assert main([*argv, "--format", "csv"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith("s_kv,batch,tp,") and len(lines) == 13
    assert main(argv) == 0  # the table
    assert "s_kv  batch  TP" in capsys.readouterr().out


def _layouts(argv: list[str], capsys: pytest.CaptureFixture[str]) -> dict[tuple, dict]:
    """The JSON rows of ``simcore evaluate argv`` keyed by their layout."""
    assert main(["evaluate", *argv, "--format", "json"]) == 0
    keys = ("tp", "cp", "pp", "dp", "kv_shard_mode", "ffn_shard_scope", "tp_placement",
            "cp_placement", "cp_ring_variant")
    return {tuple(r[k] for k in keys): r for r in json.loads(capsys.readouterr().out)}


def test_make_workload__dtype_and_kv_dtype_set_the_workload_fields():
    from simcore.cli.options import make_workload

    parser = build_parser()

    def wl(*argv):
        return make_workload(parser.parse_args(["evaluate", *argv]))

    fields = ("weight_dtype", "act_dtype", "kv_dtype", "precision")
    assert [getattr(wl(), f) for f in fields] == ["", "", "", "fp16"]
    assert [getattr(wl("--dtype", "fp8"), f) for f in fields] == ["fp8", "fp8", "", "fp16"]
    assert [getattr(wl("--dtype", "int4"), f) for f in fields] == ["int4", "", "", "fp16"]  # W4A16
    assert [getattr(wl("--mode", "prefill", "--dtype", "int8", "--kv-dtype", "fp8"), f)
            for f in fields] == ["int8", "int8", "fp8", "fp16"]
    assert [getattr(wl("--mode", "train", "--dtype", "bf16"), f)
            for f in fields] == ["", "", "", "bf16"]


def test_main__evaluate_dtype_fp8_decodes_faster_than_bf16_and_matches_the_engine(capsys):
    from simcore.engine.metrics import top_points
    from simcore.model.specs import Workload

    # replayed CUDA graphs: no host launch time, so batch-1 decode streams the weights
    argv = ["--model", "Llama 3.1 8B", "--family", "H100-SXM", "--s-kv", "8192", "--gpus", "8",
            "--top", "3", "--cuda-graphs"]
    bf16, fp8, default = (_layouts([*argv, *extra], capsys)
                          for extra in (["--dtype", "bf16"], ["--dtype", "fp8"], []))
    assert [r["latency_ms"] for r in bf16.values()] == [r["latency_ms"] for r in default.values()]
    common = bf16.keys() & fp8.keys()
    assert common
    for k in common:  # batch-1 decode streams the weights: half the bytes in fp8
        assert fp8[k]["latency_ms"] < 0.9 * bf16[k]["latency_ms"]
        assert fp8[k]["memory_ms"] < 0.6 * bf16[k]["memory_ms"]
        assert fp8[k]["mem_gb"] < 0.6 * bf16[k]["mem_gb"]
    ev = importlib.import_module("simcore.engine.evaluate")
    ds = ev.evaluate("Llama 3.1 8B", Workload("decode", s_kv=8192, weight_dtype="fp8",
                                              act_dtype="fp8", cuda_graphs=True),
                     family="H100-SXM", gpus=8)
    want = [float(w["latency_ns"]) / 1e6 for w in top_points(ds, "latency", n=3)]
    assert [r["latency_ms"] for r in fp8.values()] == pytest.approx(want, rel=1e-12)


def test_main__evaluate_cuda_graphs_removes_the_host_launch_time(capsys):
    from simcore.engine.single import predict
    from simcore.kernels.inference import LAUNCH_NS
    from simcore.model.specs import Workload

    argv = ["--model", "Llama 3.1 8B", "--family", "H100-SXM", "--s-kv", "8192", "--gpus", "1",
            "--top", "1"]
    eager, graphs = (_layouts([*argv, *extra], capsys)
                     for extra in (["--eager"], ["--cuda-graphs"]))
    (k, e), = eager.items()
    g = graphs[k]  # the same layout wins
    # one GPU, 32 layers of 10 launches + 4 per step, each 5 us of host time saved
    assert e["latency_ms"] - g["latency_ms"] == pytest.approx((32 * 10 + 4) * LAUNCH_NS / 1e6)
    one = predict("Llama 3.1 8B", Workload("decode", s_kv=8192, cuda_graphs=True),
                  {"tp": 1}, family="H100-SXM")
    assert g["latency_ms"] == pytest.approx(one.latency_ns / 1e6, rel=1e-12)


def test_main__evaluate_header_says_cuda_graphs(capsys):
    argv = ["evaluate", "--model", "Llama 3.1 8B", "--s-kv", "8192", "--top", "1"]
    assert main([*argv, "--cuda-graphs"]) == 0
    out = capsys.readouterr().out
    assert "runtime: CUDA graphs in decode" in out.splitlines()[1] and "--eager launches" not in out
    assert main([*argv, "--eager"]) == 0
    out = capsys.readouterr().out
    assert "runtime: eager decode (every kernel launched from the host)" in out.splitlines()[1]
    # launch-bound batch-1 decode without graphs: a note says what serving frameworks do
    assert out.splitlines()[-1].startswith("note: --eager launches every kernel from the host")
    assert "replay decode steps from CUDA graphs" in out


@pytest.mark.parametrize("mode", ["prefill", "train"])
def test_main__evaluate_cuda_graphs_outside_decode_is_one_line(mode, capsys):
    rc = main(["evaluate", "--model", "Llama 3.1 8B", "--mode", mode, "--cuda-graphs"])
    err = capsys.readouterr().err
    assert rc == 2 and len(err.strip().splitlines()) == 1
    assert "--cuda-graphs" in err and "decode" in err and "Traceback" not in err


def test_main__evaluate_kv_dtype_fp8_halves_the_kv_cache(capsys):
    # batch 16 x 32K context: the KV cache (~69 GB in bf16) outweighs the 16 GB of weights
    argv = ["--model", "Llama 3.1 8B", "--family", "H100-SXM", "--s-kv", "32768", "--batch",
            "16", "--gpus", "8", "--top", "20"]
    bf16, fp8 = (_layouts([*argv, *extra], capsys) for extra in ([], ["--kv-dtype", "fp8"]))
    common = bf16.keys() & fp8.keys()
    assert common
    for k in common:
        assert fp8[k]["mem_gb"] < 0.75 * bf16[k]["mem_gb"]
        assert fp8[k]["latency_ms"] < bf16[k]["latency_ms"]


def test_main__evaluate_dtype_int4_is_weight_only(capsys):
    argv = ["--model", "Llama 3.1 8B", "--family", "H100-SXM", "--s-kv", "8192", "--gpus", "8",
            "--top", "3"]
    bf16, int4 = (_layouts([*argv, *extra], capsys) for extra in ([], ["--dtype", "int4"]))
    for k in bf16.keys() & int4.keys():  # a quarter of the weight bytes, same KV cache
        assert int4[k]["mem_gb"] < 0.35 * bf16[k]["mem_gb"]
        assert int4[k]["latency_ms"] < bf16[k]["latency_ms"]
    assert main(["evaluate", *argv, "--dtype", "int4", "--top", "1"]) == 0
    assert ("precision: weights int4, activations 16-bit, KV cache 16-bit |"
            in capsys.readouterr().out.splitlines()[1])


def test_main__evaluate_dtype_fp8_sets_the_training_precision(capsys):
    argv = ["--model", "Llama 3.1 8B", "--family", "H100-SXM", "--mode", "train", "--s-kv",
            "4096", "--batch", "64", "--gpus", "8", "--top", "3"]
    bf16, fp8 = (_layouts([*argv, "--dtype", d], capsys) for d in ("bf16", "fp8"))
    common = bf16.keys() & fp8.keys()
    assert common
    for k in common:  # the GEMMs at the FP8 rate
        assert fp8[k]["compute_ms"] < 0.9 * bf16[k]["compute_ms"]


def test_main__evaluate_dtype_the_family_has_no_rate_for_exits_2(capsys):
    assert main(["evaluate", *SMALL, "--dtype", "fp8", "--family", "A100-80G"]) == 2
    line = _one_error_line(capsys.readouterr().err, "evaluate")
    assert line.endswith("--dtype fp8: A100-80G has no FP8 matmul rate (Topology.fp8_ratio = 0); "
                         "pass --family H100-SXM, H200, B200, B300, GB200-NVL72 or GB300-NVL72, "
                         "or --dtype bf16, fp16, int8 or int4")
    assert main(["evaluate", *SMALL, "--dtype", "int8", "--family", "A100-80G", "--top", "1"]) == 0
    capsys.readouterr()
    assert main(["evaluate", *SMALL, "--mode", "train", "--dtype", "fp8"]) == 2  # SiP: no FP8
    assert ("pass --family H100-SXM, H200, B200, B300, GB200-NVL72 or GB300-NVL72, or --dtype "
            "fp16, bf16 or fp32") in _one_error_line(
        capsys.readouterr().err, "evaluate")


def test_main__explore_gpus_budget_keeps_each_candidates_layout_within_it(capsys):
    argv = ["explore", "--model", "Llama 3.1 8B", "--family", "H100-SXM", "--s-kv", "8192",
            "--depth", "two_stage", "--no-progress", "--format", "json"]
    assert main(argv) == 0
    assert json.loads(capsys.readouterr().out)[0]["n_devices"] > 4
    assert main([*argv, "--gpus", "4"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert rows and all(r["n_devices"] <= 4 for r in rows)


def test_main__model_from_a_config_folder_and_bad_paths(tmp_path, capsys):
    import shutil

    folder = tmp_path / "llama"
    folder.mkdir()
    shutil.copy(Path(__file__).parent / "data" / "llama3_8b_config.json", folder / "config.json")
    assert main(["evaluate", "--model", str(folder), "--s-kv", "4096", "--top", "1"]) == 0
    assert "best by latency" in capsys.readouterr().out
    empty = tmp_path / "empty"
    empty.mkdir()
    assert main(["evaluate", "--model", str(empty)]) == 2
    err = _one_error_line(capsys.readouterr().err, "evaluate")
    assert "--model" in err and "no HuggingFace config" in err


# -- tune / rank (the autotuner's parsers, registered through the command table) ----------

def test_main__tune_readme_example_runs_through_the_command_table(tmp_path, capsys):
    out = tmp_path / "out"
    assert main(["tune", "--model", "Llama 2 7B", "--gpus", "8", "--gpu-mem-gb", "80",
                 "--metric", "throughput", "--stages", "all", "--out", str(out)]) == 0
    assert "best: ZeRO stage" in capsys.readouterr().out
    cfg = json.loads((out / "ds_config_optimal.json").read_text())
    assert cfg["zero_optimization"]["stage"] in (1, 2, 3)


# -- bad input: one line, exit 2, for every command ---------------------------------------

@pytest.mark.parametrize("argv", [
    ["evaluate", "--model", "nope"],
    ["evaluate", "--set", "speed=5"],
    ["evaluate", "--set", "bw_hbm_gbs=-5"],
    ["evaluate", "--set", "bw_hbm_gbs"],
    ["evaluate", "--format", "xml"],
    ["evaluate", "--out", "/no/such/folder/rows.json"],
    ["evaluate", "--s-kv", "-3"],
    ["evaluate", "--mode", "serve"],
    ["evaluate", "--family", "TPU"],
    ["evaluate", "--bogus"],
    ["evaluate", "--mode", "train", "--batch", "6", "--micro-batch", "4"],
    ["evaluate", "--dtype", "fp4"],
    ["evaluate", "--dtype", "fp32"],
    ["evaluate", "--dtype", "fp8"],
    ["evaluate", "--kv-dtype", "int4"],
    ["evaluate", "--kv-dtype", "fp8", "--mode", "train"],
    ["evaluate", "--dtype", "int4", "--mode", "train"],
    ["explore", "--model", "nope"],
    ["explore", "--set", "speed=5"],
    ["explore", "--format", "xml"],
    ["explore", "--out", "/no/such/folder/rows.csv"],
    ["explore", "--family", "TPU"],
    ["validate", "--efficiency", "speed=0.5"],
    ["validate", "--format", "xml"],
    ["validate", "--out", "/no/such/folder/rows.json"],
    ["tune", "--model", "GPT-5"],
    ["tune", "--model", "Llama 2 7B", "--family", "TPU"],
    ["tune", "--bogus"],
    ["rank", "/no/such/folder"],
    ["rank", ".", "--metric", "fastest"],
    ["nope"],
])
def test_main__bad_input_one_line_exit_2(argv, capsys):
    assert main(argv) == 2
    cap = capsys.readouterr()
    err = cap.err.strip()
    assert len(err.splitlines()) == 1 and "Traceback" not in err, err
    prefix = "simcore: error: " if argv == ["nope"] else f"simcore {argv[0]}: error: "
    assert err.startswith(prefix), err
    assert cap.out == ""


def test_main__bad_input_names_the_option(capsys):
    cases = {("--model", "nope"): "--model", ("--set", "speed=5"): "--set",
             ("--family", "TPU"): "--family", ("--format", "xml"): "--format",
             ("--out", "/no/such/folder/x.json"): "--out", ("--dtype", "fp4"): "--dtype",
             ("--dtype", "fp32"): "--dtype", ("--kv-dtype", "fp2"): "--kv-dtype"}
    for (opt, val), name in cases.items():
        assert main(["evaluate", opt, val]) == 2
        assert name in _one_error_line(capsys.readouterr().err, "evaluate")


def test_main__unreachable_scheduler_one_line_exit_2(capsys):
    rc = main(["explore", "--model", "Llama 3.1 8B", "--s-kv", "4096", "--depth", "two_stage",
               "--scheduler", "tcp://127.0.0.1:1", "--no-progress"])
    assert rc == 2
    err = _one_error_line(capsys.readouterr().err, "explore")
    assert "--scheduler: cannot reach the dask scheduler" in err


# -- bugs are bugs -------------------------------------------------------------------------

@pytest.mark.parametrize("exc", [RuntimeError("boom"), ValueError("engine bug")])
def test_main__internal_error_is_not_reported_as_bad_input(exc, monkeypatch, capsys):
    def broken(*args, **kwargs):
        raise exc

    monkeypatch.setattr(importlib.import_module("simcore.engine.core"), "prepare", broken)
    assert main(["evaluate", *SMALL]) == 70
    err = capsys.readouterr().err
    assert "Traceback" in err
    assert not any(line.startswith("simcore evaluate: error:") for line in err.splitlines())
    assert err.rstrip().splitlines()[-1] == (
        f"simcore evaluate: internal error (a bug, please report): {type(exc).__name__}: {exc}")


@pytest.mark.parametrize(("argv", "module", "name"), [
    (["explore", *SMALL, "--depth", "two_stage", "--no-progress"], "simcore.studies.codesign",
     "joint_explore"),
    (["validate"], "simcore.validation", "validate"),
    (["tune", "--model", "Llama 2 7B"], "simcore.autotune.cli", "Autotuner"),
])
def test_main__internal_error_in_any_command_exits_70(argv, module, name, monkeypatch, capsys):
    def broken(*args, **kwargs):
        raise ValueError("a bug, not your input")

    monkeypatch.setattr(importlib.import_module(module), name, broken)
    assert main(argv) == 70
    err = capsys.readouterr().err
    assert f"simcore {argv[0]}: internal error (a bug, please report): ValueError" in err
    assert "Traceback" in err


def test_main__keyboard_interrupt_exits_130(monkeypatch, capsys):
    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(importlib.import_module("simcore.engine.core"), "prepare", interrupted)
    assert main(["evaluate", *SMALL]) == 130
    assert capsys.readouterr().err.strip() == "simcore evaluate: interrupted"


def test_console_script__closed_stdout_exits_141_quietly():
    p = subprocess.Popen([sys.executable, "-m", "simcore", "validate", "--kind", "decode", "--no-loso",
                          "--format", "csv"], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    p.stdout.close()  # like `| head` exiting before simcore writes
    err = p.stderr.read().decode()
    assert p.wait(timeout=120) == 141
    assert "Traceback" not in err and "Exception ignored" not in err


# -- --out is atomic -----------------------------------------------------------------------

def test_main__out_failed_write_leaves_existing_file_intact(tmp_path, monkeypatch, capsys):
    out = tmp_path / "rows.json"
    out.write_text("previous results\n")

    def failing_fsync(fd):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "fsync", failing_fsync)
    assert main(["evaluate", *SMALL, "--format", "json", "--out", str(out)]) == 2
    cap = capsys.readouterr()
    err = cap.err  # the notes, then the one error line
    assert "Traceback" not in err
    assert len(json.loads(cap.out)) >= 1  # the rows are not lost: on stdout instead
    assert err.splitlines()[-1].startswith("simcore evaluate: error: --out: cannot write ")
    assert "No space left on device" in err.splitlines()[-1]
    assert "the rows went to stdout instead" in err.splitlines()[-1]
    assert out.read_text() == "previous results\n"
    assert [p.name for p in tmp_path.iterdir()] == ["rows.json"]  # temp file removed


def test_emit_rows__replaces_the_file_and_keeps_its_mode(tmp_path):
    out = tmp_path / "rows.csv"
    out.write_text("old\n")
    out.chmod(0o640)
    emit_rows([{"tp": 8, "latency_ns": 2e6}], [Column("tp"), Column("latency_ns", "", "latency_ms")],
              "csv", out)
    assert out.read_text() == "tp,latency_ms\n8,2.0\n"
    assert out.stat().st_mode & 0o777 == 0o640


# -- the NAME=VALUE parser and the row writer ----------------------------------------------

def test_parse_assignment__converts_with_the_named_converter():
    allowed = {"bw_hbm_gbs": positive_float, "compute": fraction, "grid": positive_floats}
    assert parse_assignment("bw_hbm_gbs=8000", allowed) == ("bw_hbm_gbs", 8000.0)
    assert parse_assignment(" compute = 0.5 ", allowed) == ("compute", 0.5)
    assert parse_assignment("grid=1,2,4", allowed) == ("grid", [1.0, 2.0, 4.0])


@pytest.mark.parametrize(("text", "message"), [
    ("bw_hbm_gbs", "expected NAME=VALUE"),
    ("=5", "expected NAME=VALUE"),
    ("speed=5", "unknown name 'speed'"),
    ("bw_hbm_gbs=fast", "bw_hbm_gbs: expected a number > 0, got 'fast'"),
    ("bw_hbm_gbs=inf", "bw_hbm_gbs: expected a number > 0"),
    ("compute=1.5", "compute: expected a number in (0, 1]"),
    ("grid=1,x", "grid: expected V1,V2"),
    ("raw=x", "raw: invalid literal for int()"),
])
def test_parse_assignment__bad_text_is_an_input_error(text, message):
    allowed = {"bw_hbm_gbs": positive_float, "compute": fraction, "grid": positive_floats,
               "raw": int}
    with pytest.raises(OptionError) as info:
        parse_assignment(text, allowed)
    assert isinstance(info.value, SimcoreInputError) and message in str(info.value)


def test_column__unit_conversion_follows_the_names():
    assert Column("latency_ns", "", "latency_ms").scale == pytest.approx(1e-6)
    assert Column("mem_bytes", "", "mem_gb").scale == pytest.approx(1e-9)
    assert Column("error", "", "error_pct").scale == pytest.approx(100)
    assert Column("tp").scale == 1.0
    with pytest.raises(ValueError, match="no unit conversion"):
        Column("latency_ns", "", "latency_gb")
    with pytest.raises(ValueError, match="no unit conversion"):
        Column("latency_ns", "", "latency")


def test_render_rows__json_nulls_and_csv_blanks_for_missing_values():
    cols = [Column("knob"), Column("latency_ns", "latency", "latency_ms"), Column("fits")]
    rows = [{"knob": "a", "latency_ns": float("nan"), "fits": True}, {"knob": "b"}]
    assert json.loads(render_rows(rows, cols, "json")) == [
        {"knob": "a", "latency_ms": None, "fits": True},
        {"knob": "b", "latency_ms": None, "fits": None}]
    assert render_rows(rows, cols, "csv") == "knob,latency_ms,fits\na,,true\nb,,\n"
    table = render_rows(rows, cols, "table")
    assert table.splitlines()[0].split() == ["knob", "latency", "fits"]


def test_kernels_cached__finds_the_kernels_in_a_numba_cache_dir(tmp_path):
    # numba keeps NUMBA_CACHE_DIR's files in a subfolder per source folder
    code = ("import os, sys; from simcore.engine import core as engine; from simcore.kernels import inference; "
            "print(engine.kernels_cached()); folder = inference.point_one.public._cache._cache_path; "
            "os.makedirs(folder, exist_ok=True); "
            "[open(os.path.join(folder, k + '-1.py311.nbi'), 'w').close() "
            " for k in engine.FIRST_CALL_KERNELS['inference']]; "
            "print(engine.kernels_cached(), engine.kernels_cached(engine.FIRST_CALL_KERNELS['train']))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         env={**os.environ, "NUMBA_CACHE_DIR": str(tmp_path)}).stdout.split()
    assert out == ["False", "True", "False"]


def test_kernels_cached__an_index_written_on_another_cpu_does_not_count(tmp_path):
    """A numba index whose entries were compiled for another CPU (a wheel built elsewhere)
    makes numba recompile, so the compile notice must be printed: the entries are keyed by
    (signature, (triple, CPU name, CPU features), ...). An unreadable index is trusted."""
    import pickle

    import numba

    from simcore.engine import core as engine

    here = engine._cpu_magic()
    other = (here[0], "some-other-cpu", "+sse2")

    def index(path, magics):
        with open(path, "wb") as fh:
            pickle.dump(numba.__version__, fh)
            fh.write(pickle.dumps((0.0, {("(float64,)", m, ()): f"x{i}.nbc"
                                         for i, m in enumerate(magics)})))
        return str(path)

    assert not engine._index_matches_cpu(index(tmp_path / "a.nbi", [other]))
    assert engine._index_matches_cpu(index(tmp_path / "b.nbi", [other, here]))
    (tmp_path / "c.nbi").write_bytes(b"not a pickle")
    assert engine._index_matches_cpu(str(tmp_path / "c.nbi"))
    from numba.core.registry import cpu_target

    assert here == tuple(cpu_target.target_context.codegen().magic_tuple())


def test_kernel_cache__stamped_by_every_kernel_source(tmp_path):
    """A kernel inlines helpers from other files (collectives into inference), so its
    cache index is stamped with a digest of all kernel sources, not only its own file's:
    editing a helper alone makes every index stale (numba recompiles) and the compile
    notice says so."""
    import pickle
    import shutil

    import numba

    from simcore.engine import core as engine
    from simcore.kernels import _numba, inference

    copy = tmp_path / "kernels"
    shutil.copytree(_numba.KERNELS_DIR, copy, ignore=shutil.ignore_patterns("__pycache__"))
    assert _numba.sources_digest(copy) == _numba.sources_digest()
    with open(copy / "collectives.py", "a") as fh:
        fh.write("# edited\n")
    assert _numba.sources_digest(copy) != _numba.sources_digest()
    if not _numba.CACHE:
        return
    stamp = inference.point_one.public._cache._cache_file._source_stamp
    assert stamp[1] == _numba.sources_digest()

    def index(path, written):
        with open(path, "wb") as fh:
            pickle.dump(numba.__version__, fh)
            fh.write(pickle.dumps((written, {("sig", engine._cpu_magic(), ()): "x1.nbc"})))
        return str(path)

    assert engine._index_matches_cpu(index(tmp_path / "a.nbi", stamp), stamp)
    stale = (stamp[0], _numba.sources_digest(copy))
    assert not engine._index_matches_cpu(index(tmp_path / "b.nbi", stale), stamp)


def test_kernel_cache__other_numba_internals_fall_back_to_numba_own_cache(monkeypatch):
    """If numba's cache internals differ (another numba release), kernels still compile
    and cache the ordinary way, with a warning saying what is lost."""
    from simcore.kernels import _numba

    def broken(py_func):
        raise AttributeError("'FunctionCache' object has no attribute '_impl'")

    monkeypatch.setattr(_numba, "_function_cache", broken)
    monkeypatch.setattr(_numba, "CACHE", True)

    def add_one(x):
        return x + 1

    kernel = _numba.jit()(add_one)
    with pytest.warns(RuntimeWarning, match="caches kernels by their own file only"):
        assert kernel(41) == 42


def test_kernel_cache__editing_a_helper_file_recompiles_its_callers(tmp_path):
    """End to end on a copy of the package: cache the kernels, edit only collectives.py
    (a helper inference inlines) and the cached kernels no longer count."""
    import shutil

    from simcore.kernels import _numba

    if not _numba.CACHE:
        pytest.skip("SIMCORE_NUMBA_CACHE=0")
    pkg = Path(__file__).resolve().parents[1] / "simcore"
    shutil.copytree(pkg, tmp_path / "simcore", ignore=shutil.ignore_patterns("__pycache__"))
    code = ("from simcore import predict, Workload; from simcore.engine import core as engine; "
            "import simcore; "
            f"assert simcore.__file__.startswith({str(tmp_path)!r}); "
            "r = predict('Llama 3.1 8B', Workload('decode', s_kv=1024), {'tp': 2}); "
            "print(engine.kernels_cached())")
    env = {**os.environ, "PYTHONPATH": str(tmp_path), "NUMBA_CACHE_DIR": str(tmp_path / "cache")}

    def run():
        return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                              check=True, env=env, cwd=tmp_path)

    first = run()
    assert first.stdout.split() == ["True"]
    # the Python API says once, on stderr, that its first call compiles (issue 36 item 7)
    assert first.stderr.count("simcore: compiling kernels (once") == 1
    assert "compiling kernels" not in run().stderr  # loaded from the cache now
    with open(tmp_path / "simcore" / "kernels" / "collectives.py", "a") as fh:
        fh.write("# edited\n")
    code = code.replace("r = predict", "print(engine.kernels_cached()); r = predict")
    assert run().stdout.split() == ["False", "True"]  # stale before the call, recompiled after


def test_kernel_cache__installed_copy_writes_nothing_into_the_package(tmp_path):
    """Issue 36: an installed simcore (site-packages) that compiles a kernel at run time
    writes the machine code to the user's cache folder, not beside its sources: files pip
    did not record survive ``pip uninstall`` and left a ``simcore`` folder that shadowed a
    later editable install ("cannot import name '__version__'")."""
    import shutil

    from simcore.kernels import _numba

    if not _numba.CACHE:
        pytest.skip("SIMCORE_NUMBA_CACHE=0")
    site = tmp_path / "lib" / "site-packages"
    pkg = Path(__file__).resolve().parents[1] / "simcore"
    shutil.copytree(pkg, site / "simcore", ignore=shutil.ignore_patterns("__pycache__"))
    code = ("from simcore import predict, Workload; from simcore.engine import core as engine; "
            "from simcore.kernels import _numba; "
            "print(_numba.installed_in_site_packages(), _numba.user_cache_dir()); "
            "predict('Llama 3.1 8B', Workload('decode', s_kv=1024), {'tp': 2}); "
            "print(engine.kernels_cached())")
    env = {k: v for k, v in os.environ.items() if k != "NUMBA_CACHE_DIR"}
    env.update(PYTHONPATH=str(site), XDG_CACHE_HOME=str(tmp_path / "cache"))

    def run():
        return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                              check=True, env=env, cwd=tmp_path).stdout.split()

    installed, user_dir, cached = run()
    assert installed == "True" and user_dir.startswith(str(tmp_path / "cache" / "simcore"))
    assert cached == "True"
    written = [p.name for p in (site / "simcore").rglob("*") if p.suffix in (".nbi", ".nbc")]
    assert written == []
    assert any(p.suffix == ".nbi" for p in Path(user_dir).iterdir())
    assert run()[2] == "True"  # the next process finds them there


def test_aot_main__leaves_the_first_call_kernels_cached(capsys):
    # what setup.py runs on the built package (a wheel then carries the machine code)
    from simcore import _aot
    from simcore.engine import core as engine
    from simcore.kernels import _numba

    assert _aot.main() == (0 if _numba.CACHE else 1)
    assert capsys.readouterr().out == ""  # the rows of the commands it runs are dropped
    if _numba.CACHE:
        kernels = [k for names in engine.FIRST_CALL_KERNELS.values() for k in names]
        assert engine.kernels_cached(kernels)


def test_main__fresh_install_says_it_compiles_kernels(monkeypatch, capsys):
    from simcore.engine import core as engine

    monkeypatch.setattr(engine, "kernels_cached", lambda *kernels: False)
    assert main(["evaluate", "--model", "Llama 3.1 8B", "--s-kv", "1024", "--top", "1"]) == 0
    assert "compiling kernels (once" in capsys.readouterr().err
    monkeypatch.setattr(engine, "kernels_cached", lambda *kernels: True)
    assert main(["evaluate", "--model", "Llama 3.1 8B", "--s-kv", "1024", "--top", "1"]) == 0
    assert "compiling kernels" not in capsys.readouterr().err


@pytest.mark.parametrize("argv", [
    ["evaluate", "--model", "Llama 3.1 8B", "--gpus", "0"],
    ["explore", "--model", "Llama 3.1 8B", "--s-kv", "1024", "--cuda-graphs", "--mode",
     "prefill"],
    ["explore", "--model", "Llama 3.1 8B", "--s-kv", "1024", "--objectives", "bogus"],
])
def test_main__bad_input_on_a_fresh_install_is_one_line(argv, monkeypatch, capsys):
    """The compile notice is printed just before the first kernel runs, so bad input found
    before that stays one line on a fresh install (it used to be preceded by the notice)."""
    from simcore.engine import core as engine
    from simcore.kernels import _numba

    monkeypatch.setattr(engine, "kernels_cached", lambda *kernels: False)
    assert main(argv) == 2
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 1 and "error" in err[0], err
    assert _numba._BEFORE_FIRST_CALL == []  # main drops the notice it never needed
