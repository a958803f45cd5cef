"""Hostile inputs, second audit (issue 37): each case has the right answer or one line.

Tables of command lines (argv, expected exit code, a substring of the one stderr line)
and of API calls (call, expected exception, a substring of its message). Every CLI case
asserts its exit code, exactly one line on stderr for a refusal, no traceback, and that
nothing already on disk is lost. Cases that could block (a FIFO) run under a timeout.
Helpers come from :mod:`tests.test_hostile`.
"""

from __future__ import annotations

import json
import math
import os
import signal
from pathlib import Path
from typing import Any

import pytest
from test_hostile import _files, _one_line

import simcore.io
from simcore.autotune import AutotuneConfig, rank
from simcore.autotune.config import AutotuneConfigError, load_ds_config
from simcore.autotune.runners import MalformedExperimentWarning
from simcore.cli import main
from simcore.cli.output import refuse_shared_paths
from simcore.errors import SimcoreInputError

SMALL = ["--model", "Llama 3.1 8B", "--s-kv", "4096"]
EXPLORE = ["explore", *SMALL, "--depth", "two_stage", "--no-progress"]
COMPARE = ["compare", "H100-SXM", "B200", "--model", "Llama 3.1 8B", "--s-kv", "4096"]


@pytest.fixture(autouse=True)
def _in_tmp(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    yield


# --- items 13-16: two outputs naming one file are refused before any work ----------------

CLASH_ARGV: list[tuple[list[str], str]] = [
    ([*COMPARE, "--out", "x.png", "--plot", "x.png"], "--out and --plot both name 'x.png'"),
    ([*COMPARE, "--out", "x.png", "--plot", "./x.png"], "--plot x_plot.png"),
    ([*COMPARE, "--format", "csv", "--out", "sub/../x.png", "--plot", "x.png"], "--plot"),
    ([*EXPLORE, "--out", "x.png", "--plot", "x.png"], "--out and --plot both name 'x.png'"),
    ([*EXPLORE, "--format", "json", "--out", "x.png", "--plot", "x.png"], "--plot x_plot.png"),
    ([*EXPLORE, "--rows", "sensitivity", "--out", "x_sensitivity.png", "--plot", "x.png"],
     "--out and --plot's sensitivity chart both name 'x_sensitivity.png'"),
    ([*EXPLORE, "--dataset", "d.zarr", "--resume", "d.zarr"], "--dataset and --resume"),
    ([*EXPLORE, "--out", "x.png", "--plot", "link/x.png"], "--plot link/x_plot.png"),
]


@pytest.mark.parametrize(("argv", "names"), CLASH_ARGV, ids=[" ".join(a[-4:]) for a, _ in CLASH_ARGV])
def test_main__outputs_sharing_a_file_exit_2_before_any_work(argv, names, tmp_path, capsys,
                                                              monkeypatch):
    import simcore.studies.codesign
    import simcore.studies.compare

    def no_compute(*a, **k):
        raise AssertionError("computed before refusing the clash")

    monkeypatch.setattr(simcore.studies.compare, "compare", no_compute)
    monkeypatch.setattr(simcore.studies.codesign, "joint_explore", no_compute)
    (tmp_path / "sub").mkdir()
    (tmp_path / "link").symlink_to(tmp_path)
    (tmp_path / "x.png").write_bytes(b"old")  # an earlier result must survive
    assert main(argv) == 2
    cap = capsys.readouterr()
    line = _one_line(cap.err, f"simcore {argv[0]}: error: ")
    assert names in line and "pass a different file" in line
    assert cap.out == ""
    assert (tmp_path / "x.png").read_bytes() == b"old"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["link", "sub", "x.png"]


def test_refuse_shared_paths__hard_link_and_symlink(tmp_path):
    (tmp_path / "a.json").write_text("[]")
    (tmp_path / "b.json").hardlink_to(tmp_path / "a.json")
    (tmp_path / "c.json").symlink_to(tmp_path / "a.json")
    for other in ("b.json", "c.json"):
        with pytest.raises(SimcoreInputError, match="--out and --plot both name"):
            refuse_shared_paths(out=tmp_path / "a.json", plot=tmp_path / other)
    refuse_shared_paths(out="a.json", plot=None, dataset="d.nc")  # distinct: fine
    with pytest.raises(SimcoreInputError, match="e.g. --plot a_plot2.json"):
        refuse_shared_paths(out="a.json", plot="a.json", dataset="a_plot.json")


# --- items 2, 8, 9, 11: DeepSpeed configs and autotuning folders -------------------------

class _Hang(BaseException):
    """Raised by the alarm of :func:`_no_hang`: not an Exception, so ``main`` cannot
    turn it into an exit code."""


@pytest.fixture
def _no_hang():
    """Fail (instead of blocking the suite) a case that runs longer than 30 s: a
    blocking ``open`` of a FIFO is interrupted by the alarm."""
    def ring(signum, frame):
        raise _Hang("the command blocked (e.g. on a FIFO)")

    old = signal.signal(signal.SIGALRM, ring)
    signal.setitimer(signal.ITIMER_REAL, 30.0)
    yield
    signal.setitimer(signal.ITIMER_REAL, 0)
    signal.signal(signal.SIGALRM, old)


def _strict_json(text: str):
    """``json.loads`` that refuses NaN / Infinity, as strict readers do."""
    def refuse(name):
        raise ValueError(f"non-strict JSON constant {name}")
    return json.loads(text, parse_constant=refuse)


_DS = '"train_micro_batch_size_per_gpu": 1, "autotuning": {"enabled": true, "fast": false}'
#: name -> the file's text (a str), "fifo", "folder", "deep" (nested 100,000 lists),
#: "deep950" (nested 950 objects: parses, then would recurse), "huge" (a sparse 17 MiB file)
CONFIGS: dict[str, str] = {
    "nan.json": '{"zero_optimization": {"stage": 2, "reduce_bucket_size": [NaN, 5e8]}, ' + _DS + "}",
    "inf.json": '{"optimizer": {"params": {"lr": Infinity}}, ' + _DS + "}",
    "neginf.json": '{"zero_optimization": {"stage": -Infinity}, ' + _DS + "}",
    "fifo.json": "fifo",
    "folder.json": "folder",
    "deep.json": "deep",
    "deep950.json": "deep950",
    "huge.json": "huge",
    "hosts": "fifo",
}


def _make(path: Path, kind: str) -> None:
    if kind == "fifo":
        os.mkfifo(path)
    elif kind == "folder":
        path.mkdir()
    elif kind == "deep":
        path.write_text("[" * 100_000 + "]" * 100_000)
    elif kind == "deep950":
        path.write_text('{"a": ' * 950 + "1" + "}" * 950)
    elif kind == "huge":
        with open(path, "wb") as f:
            f.truncate(17 * 1024 * 1024)
    else:
        path.write_text(kind)


def _rank_folder(root: Path, hostile: dict[str, str]) -> Path:
    """An autotuning folder with a good experiment (z1_gas1_tmbspg1) and one
    (z1_gas1_tmbspg2) whose files are ``hostile`` (file name -> kind, see _make)."""
    for mbs, files in ((1, {}), (2, hostile)):
        d = root / "autotuning_results" / f"z1_gas1_tmbspg{mbs}"
        d.mkdir(parents=True)
        base = {"ds_config.json": json.dumps({"zero_optimization": {"stage": 1},
                                              "train_micro_batch_size_per_gpu": mbs}),
                "metrics.json": json.dumps({"latency": 5.0 * mbs, "throughput": 10.0 * mbs})}
        for name, text in base.items():
            if name not in files:
                (d / name).write_text(text)
        for name, kind in files.items():
            _make(d / name, kind)
    return root


TUNE = ["tune", "--model", "Llama 2 7B", "--gpus", "8"]
#: (argv, configs to create, exit code, the one line's prefix, a substring of it)
AUTOTUNE_ARGV: list[tuple[list[str], list[str], int, str, str]] = [
    # item 2: NaN / Infinity anywhere in a DeepSpeed config, named by key path
    ([*TUNE, "--config", "nan.json"], ["nan.json"], 2, "simcore tune: error: ",
     "zero_optimization.reduce_bucket_size[0] is NaN; pass a finite number"),
    ([*TUNE, "--config", "inf.json"], ["inf.json"], 2, "simcore tune: error: ",
     "optimizer.params.lr is Infinity"),
    ([*TUNE, "--config", "neginf.json"], ["neginf.json"], 2, "simcore tune: error: ",
     "zero_optimization.stage is -Infinity"),
    (["rank", "r", "--config", "nan.json"], ["nan.json"], 2, "simcore rank: error: ",
     "reduce_bucket_size[0] is NaN"),
    # item 11: a folder, a FIFO (item 8), a huge file or deep nesting (item 9) as --config
    ([*TUNE, "--config", "folder.json"], ["folder.json"], 2, "simcore tune: error: ",
     "'folder.json' is a folder, not a file"),
    ([*TUNE, "--config", "fifo.json"], ["fifo.json"], 2, "simcore tune: error: ",
     "'fifo.json' is a FIFO (named pipe), not a file"),
    ([*TUNE, "--config", "huge.json"], ["huge.json"], 2, "simcore tune: error: ",
     "more than the 16,777,216 simcore reads"),
    ([*TUNE, "--config", "deep.json"], ["deep.json"], 2, "simcore tune: error: ",
     "nests lists or objects more than 64 deep"),
    ([*TUNE, "--config", "deep950.json"], ["deep950.json"], 2, "simcore tune: error: ",
     "nests lists or objects more than 64 deep"),
    (["rank", "r", "--config", "folder.json"], ["folder.json"], 2, "simcore rank: error: ",
     "is a folder, not a file"),
    (["rank", "r", "--config", "fifo.json"], ["fifo.json"], 2, "simcore rank: error: ",
     "is a FIFO"),
    (["rank", "r", "--config", "deep.json"], ["deep.json"], 2, "simcore rank: error: ",
     "nests lists or objects"),
    ([*TUNE, "--hostfile", "hosts"], ["hosts"], 2, "simcore tune: error: ",
     "hostfile: 'hosts' is a FIFO"),
]


@pytest.mark.parametrize(("argv", "configs", "code", "prefix", "names"), AUTOTUNE_ARGV,
                         ids=[" ".join(a[:1] + a[-2:]) for a, *_ in AUTOTUNE_ARGV])
def test_main__hostile_deepspeed_configs(argv, configs, code, prefix, names, tmp_path, capsys,
                                         _no_hang):
    _rank_folder(tmp_path / "r", {})
    for name in configs:
        _make(tmp_path / name, CONFIGS[name])
    before = _files(tmp_path)
    assert main(argv) == code
    cap = capsys.readouterr()
    assert names in _one_line(cap.err, prefix)
    assert cap.out == ""
    assert _files(tmp_path) == before  # nothing written, nothing lost


#: (files of the hostile experiment, the warning's substring): rank skips or fails that
#: experiment with one warning line, ranks the good one and writes strict JSON, exit 0
RANK_FOLDERS: list[tuple[dict[str, str], str]] = [
    ({"metrics.json": "fifo"}, "metrics.json' is a FIFO (named pipe)"),  # item 8
    ({"metrics.json": "folder"}, "metrics.json' is a folder"),
    ({"metrics.json": "huge"}, "more than the 16,777,216 simcore reads"),
    ({"metrics.json": "deep"}, "nests lists or objects more than 64 deep"),  # item 9
    ({"metrics.json": "deep950"}, "nests lists or objects more than 64 deep"),
    ({"ds_config.json": "fifo"}, "ds_config.json' is a FIFO"),
    ({"ds_config.json": "deep"}, "nests lists or objects"),
    ({"ds_config.json": '{"zero_optimization": {"stage": 1, "reduce_bucket_size": NaN}, '
                        '"train_micro_batch_size_per_gpu": 2}'},
     "zero_optimization.reduce_bucket_size is not a finite number; skipped"),  # item 2
]


@pytest.mark.parametrize(("files", "names"), RANK_FOLDERS,
                         ids=[" ".join(f"{k}={v[:8]}" for k, v in f.items())
                              for f, _ in RANK_FOLDERS])
def test_main__rank_reads_only_regular_bounded_json(files, names, tmp_path, capsys, _no_hang):
    _rank_folder(tmp_path / "r", files)
    assert main(["rank", "r", "--metric", "latency"]) == 0
    cap = capsys.readouterr()
    assert names in _one_line(cap.err, "warning: experiment 'z1_gas1_tmbspg2'")
    assert "best: ZeRO stage 1, micro-batch 1" in cap.out
    out = tmp_path / "r" / "autotuning_results"
    cfg = _strict_json((out / "ds_config_optimal.json").read_text())
    assert cfg["train_micro_batch_size_per_gpu"] == 1


def test_main__rank_fifo_logs_never_block(tmp_path, capsys, _no_hang):
    _rank_folder(tmp_path / "r", {"stderr.log": "fifo", "stdout.log": "fifo", "cmd.txt": "fifo",
                                  "exp.json": "fifo"})
    assert main(["rank", "r", "--metric", "latency"]) == 0
    assert "best: ZeRO stage 1, micro-batch 1" in capsys.readouterr().out


def test_main__rank_profiled_config_with_nan_is_not_the_base(tmp_path, capsys):
    root = _rank_folder(tmp_path / "r", {})
    prof = root / "autotuning_results" / "profile_model_info"
    prof.mkdir()
    (prof / "ds_config.json").write_text('{"optimizer": {"params": {"lr": NaN}}}')
    assert main(["rank", "r", "--metric", "latency"]) == 0
    cap = capsys.readouterr()
    assert "optimizer.params.lr is not a finite number" in _one_line(cap.err, "warning: ")
    _strict_json((root / "autotuning_results" / "ds_config_optimal.json").read_text())


#: (a call, the exception it raises, a substring of its message)
API_CASES: list[tuple[str, Any, type[BaseException], str]] = [
    ("load_ds_config nan", lambda p: load_ds_config(
        {"zero_optimization": {"reduce_bucket_size": [math.nan, 5e8]}}),
     AutotuneConfigError, "zero_optimization.reduce_bucket_size[0] is NaN"),
    ("load_ds_config -inf", lambda p: load_ds_config({"a": {"b": -math.inf}}),
     AutotuneConfigError, "a.b is -Infinity"),
    ("from_ds_config inf", lambda p: AutotuneConfig.from_ds_config(
        {"zero_optimization": {"stage": 1, "allgather_bucket_size": math.inf}}),
     AutotuneConfigError, "allgather_bucket_size is Infinity"),
    ("from_ds_config folder", lambda p: AutotuneConfig.from_ds_config(p / "folder.json"),
     AutotuneConfigError, "is a folder, not a file"),
    ("from_ds_config fifo", lambda p: AutotuneConfig.from_ds_config(p / "fifo.json"),
     AutotuneConfigError, "is a FIFO"),
    ("load_ds_config deep", lambda p: load_ds_config(p / "deep.json"),
     AutotuneConfigError, "more than 64 deep"),
    ("load_ds_config deep dict", lambda p: load_ds_config(_nested(5000)),
     AutotuneConfigError, "more than 64 deep"),
    ("read_json_file fifo", lambda p: simcore.io.read_json_file(p / "fifo.json"),
     SimcoreInputError, "is a FIFO"),
    ("read_json_file huge", lambda p: simcore.io.read_json_file(p / "huge.json"),
     SimcoreInputError, "more than the 16,777,216"),
]


def _nested(depth: int) -> dict:
    d: dict = {}
    for _ in range(depth):
        d = {"a": d}
    return d


@pytest.mark.parametrize(("call", "exc", "names"), [c[1:] for c in API_CASES],
                         ids=[c[0] for c in API_CASES])
def test_api__hostile_deepspeed_configs(call, exc, names, tmp_path, _no_hang):
    for name in ("folder.json", "fifo.json", "deep.json", "huge.json"):
        _make(tmp_path / name, CONFIGS[name])
    with pytest.raises(exc) as info:
        call(tmp_path)
    assert names in str(info.value) and "\n" not in str(info.value)


def test_api__rank_with_a_fifo_metrics_returns_the_good_trial(tmp_path, _no_hang):
    _rank_folder(tmp_path / "r", {"metrics.json": "fifo"})
    with pytest.warns(MalformedExperimentWarning, match="is a FIFO"):
        result = rank(tmp_path / "r", metric="latency", out_dir=tmp_path / "out")
    assert result.best.name == "z1_gas1_tmbspg1"
    _strict_json((tmp_path / "out" / "ds_config_optimal.json").read_text())
