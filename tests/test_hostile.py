"""Hostile inputs and faults: every command and public function, each with its outcome.

Each table row is one bad input or fault and the outcome it must have: an exit code (or
an exception type), exactly one line on stderr naming the problem, no traceback, and no
file left behind. Exit codes (``simcore --help``): 0 ok, 1 nothing found (a result), 2
bad input, 70 a bug, 75 stopped by the environment (store in use, cluster lost, disk
full mid-sweep: rerun to resume), 130 interrupted.

Spaces and grids are tiny (``--depth two_stage``, ``space={"tp": (1, 2)}``) and CLI cases
run in-process through :func:`simcore.cli.main`, so the file runs in seconds.
"""

from __future__ import annotations

import errno
import json
import os
import signal
import socket
import sys
from pathlib import Path

import numpy as np
import pytest
import xarray as xr
from hypothesis import given, settings
from hypothesis import strategies as st

import simcore
import simcore.engine.distributed
import simcore.io
from simcore import Workload
from simcore import chunks as chunks_mod
from simcore.cli import main
from simcore.engine.evaluate import best_of_prepared, evaluate, evaluate_best, prepare
from simcore.engine.sweep import StoreMismatchError, resumable_best
from simcore.errors import SimcoreInputError, SimcoreRetryError, SweepInterrupted
from simcore.studies.codesign import joint_explore
from simcore.studies.serving import plan

ROOT = Path(__file__).resolve().parents[1]
SMALL = ["--model", "Llama 3.1 8B", "--s-kv", "4096"]
#: chunk_points giving chunks of 8 hardware rows for SMALL (chunks count the valid layouts)
_EIGHT_ROWS = 8 * int(prepare("Llama 3.1 8B", Workload("decode", s_kv=4096)).valid.sum())
EXPLORE = ["explore", *SMALL, "--depth", "two_stage", "--no-progress"]
TINY = {"tp": (1, 2)}
WL = Workload("decode", s_kv=4096)


@pytest.fixture(autouse=True)
def _in_tmp(tmp_path, monkeypatch):
    """Every case runs in an empty folder, which must be empty again afterwards (but for
    what the case itself names)."""
    monkeypatch.chdir(tmp_path)
    yield


def _files(folder: Path) -> list[str]:
    return sorted(str(p.relative_to(folder)) for p in folder.rglob("*"))


def _one_line(err: str, prefix: str) -> str:
    # the one-time JIT notice precedes the error on a cold numba cache (test order)
    lines = [ln for ln in err.strip().splitlines()
             if not ln.startswith("simcore: compiling kernels (once")]
    assert len(lines) == 1, err
    assert lines[0].startswith(prefix), err
    assert "Traceback" not in err
    return lines[0]


# --- bad command-line input: exit 2, one line, nothing written ---------------------------

BAD_ARGV: list[tuple[list[str], str]] = [
    # evaluate
    (["evaluate", "--model", "nope"], "--model"),
    (["evaluate", "--model", ""], "--model"),
    (["evaluate", "--model", "/no/such/config.json"], "--model"),
    (["evaluate", "--family", "TPU"], "--family"),
    (["evaluate", "--family", ""], "--family"),
    (["evaluate", "--mode", "serve"], "--mode"),
    (["evaluate", "--s-kv", "0"], "--s-kv"),
    (["evaluate", "--s-kv", "-3"], "--s-kv"),
    (["evaluate", "--s-kv", "1.5"], "--s-kv"),
    (["evaluate", "--s-kv", "1e9999"], "--s-kv"),
    (["evaluate", "--s-kv", "nan"], "--s-kv"),
    (["evaluate", "--s-kv"], "--s-kv"),
    (["evaluate", "--batch", "0"], "--batch"),
    (["evaluate", "--batch", "-1"], "--batch"),
    (["evaluate", "--batch", "two"], "--batch"),
    (["evaluate", "--batch", ""], "--batch"),
    (["evaluate", "--set", "speed=5"], "--set"),
    (["evaluate", "--set", "bw_hbm_gbs=-5"], "--set"),
    (["evaluate", "--set", "bw_hbm_gbs=0"], "--set"),
    (["evaluate", "--set", "bw_hbm_gbs=inf"], "--set"),
    (["evaluate", "--set", "bw_hbm_gbs=nan"], "--set"),
    (["evaluate", "--set", "bw_hbm_gbs"], "--set"),
    (["evaluate", "--set", "=5"], "--set"),
    (["evaluate", "--set", "bw_hbm_gbs=fast"], "--set"),
    (["evaluate", "--space", "huge"], "--space"),
    (["evaluate", "--metric", "speed"], "--metric"),
    (["evaluate", "--metric", "cost"], "--metric"),
    (["evaluate", "--metric", ""], "--metric"),
    (["evaluate", "--top", "0"], "--top"),
    (["evaluate", "--top", "-2"], "--top"),
    (["evaluate", "--format", "xml"], "--format"),
    (["evaluate", "--out", "/no/such/folder/rows.json"], "--out"),
    (["evaluate", "--out", "."], "--out"),
    (["evaluate", "--mode", "train", "--batch", "6", "--micro-batch", "4"], ""),
    (["evaluate", "--mode", "train", "--micro-batch", "0"], "--micro-batch"),
    (["evaluate", "--mode", "train", "--zero-stage", "4"], "--zero-stage"),
    (["evaluate", "--mode", "train", "--recompute", "half"], "--recompute"),
    (["evaluate", "--gpus", "0"], "--gpus"),
    (["evaluate", "--gpus", "-8"], "--gpus"),
    (["evaluate", "--gpus", "2.5"], "--gpus"),
    (["evaluate", "--gpus", "eight"], "--gpus"),
    (["evaluate", "--gpus"], "--gpus"),
    (["evaluate", "--exact-gpus"], "--exact-gpus"),
    (["evaluate", "--gpus-exact"], "--exact-gpus"),
    (["evaluate", "--model", "Llama 3.1 70B", "--family", "H100-SXM", "--mode", "train",
      "--s-kv", "8192", "--batch", "8", "--gpus", "2"], "smallest device count that fits is 32"),
    (["evaluate", "--model", "Llama 3.1 8B", "--family", "H100-SXM", "--s-kv", "8192",
      "--gpus", "67", "--exact-gpus"], "exactly 67 devices"),
    (["evaluate", "--batch", "1,1"], "--batch"),
    (["evaluate", "--batch", "1,x"], "--batch"),
    (["evaluate", "--batch", "8,0"], "--batch"),
    (["evaluate", "--batch", ","], "--batch"),
    (["evaluate", "--s-kv", "1024,-1"], "--s-kv"),
    (["evaluate", "--s-kv", "1024,1024"], "--s-kv"),
    (["evaluate", "--mode", "train", "--batch", "4,6", "--micro-batch", "4"], "batch=6"),
    (["evaluate", "--bogus"], "--bogus"),
    (["evaluate", "extra-positional"], "unrecognized"),
    (["--bogus"], "--bogus"),
    # explore
    (["explore", "--model", "nope"], "--model"),
    (["explore", "--family", "TPU"], "--family"),
    (["explore", "--mode", "train"], "--mode"),
    (["explore", "--depth", "0"], "--depth"),
    (["explore", "--depth", "-4"], "--depth"),
    (["explore", "--depth", "deep"], "--depth"),
    (["explore", "--depth", "2.5"], "--depth"),
    (["explore", "--depth", ""], "--depth"),
    (["explore", "--depth", "30"], "--depth"),
    (["explore", "--grid", "bw_hbm_gbs=4000,4000"], "--grid"),
    (["explore", "--grid", "bw_hbm_gbs=2000", "--grid", "bw_hbm_gbs=4000"], "--grid"),
    (["explore", "--grid", "bw_hbm_gbs=0"], "--grid"),
    (["explore", "--grid", "bw_hbm_gbs=-1,2"], "--grid"),
    (["explore", "--grid", "bw_hbm_gbs="], "--grid"),
    (["explore", "--grid", "bw_hbm_gbs=,,"], "--grid"),
    (["explore", "--grid", "speed=1,2"], "--grid"),
    (["explore", "--grid", "bw_hbm_gbs"], "--grid"),
    (["explore", "--grid", "bw_hbm_gbs=a,b"], "--grid"),
    (["explore", "--grid", "bw_hbm_gbs=inf"], "--grid"),
    (["explore", "--set", "speed=5"], "--set"),
    (["explore", "--set", "pe_hbm_gb=-1"], "--set"),
    (["explore", "--metric", "fastest"], "--metric"),
    (["explore", "--metric", "memory"], "--metric"),
    (["explore", "--format", "xml"], "--format"),
    (["explore", "--rows", "all"], "--rows"),
    (["explore", "--out", "/no/such/folder/rows.csv"], "--out"),
    (["explore", "--dataset", "results.csv"], "--dataset"),
    (["explore", "--dataset", "/no/such/folder/r.nc"], "--dataset"),
    (["explore", "--dataset", "r"], "--dataset"),
    (["explore", "--plot", "plot.gif"], "--plot"),
    (["explore", "--plot", "/no/such/folder/p.png"], "--plot"),
    (["explore", "--resume", "/no/such/folder/s.zarr"], "--resume"),
    (["explore", "--out", "r.nc", "--dataset", "r2.nc"], "--out"),
    (["explore", "--top", "0"], "--top"),
    (["explore", "--s-kv", "0"], "--s-kv"),
    (["explore", "--batch", "0"], "--batch"),
    (["explore", "--batch", "1,8"], "--batch"),
    (["explore", "--gpus", "0"], "--gpus"),
    (["explore", "--exact-gpus"], "--exact-gpus"),
    (["explore", "--model", "Llama 3.1 70B", "--family", "H100-SXM", "--s-kv", "8192",
      "--depth", "two_stage", "--gpus", "1", "--no-progress"], "smallest device count"),
    (["explore", "--bogus"], "--bogus"),
    # validate
    (["validate", "--efficiency", "speed=0.5"], "--efficiency"),
    (["validate", "--efficiency", "compute=0"], "--efficiency"),
    (["validate", "--efficiency", "compute=1.5"], "--efficiency"),
    (["validate", "--efficiency", "compute=-0.1"], "--efficiency"),
    (["validate", "--efficiency", "roofline_overlap=1.5"], "--efficiency"),
    (["validate", "--efficiency", "seq_overhead_ns=-1"], "--efficiency"),
    (["validate", "--efficiency", "compute"], "--efficiency"),
    (["validate", "--efficiency", "op_latency_ns=-5"], "--efficiency"),
    (["validate", "--kind", "serving"], "--kind"),
    (["validate", "--format", "xml"], "--format"),
    (["validate", "--out", "/no/such/folder/rows.json"], "--out"),
    (["validate", "--bogus"], "--bogus"),
    (["validate", "--plot", "parity.txt"], "--plot"),
    (["validate", "--plot", "/no/such/folder/parity.png"], "--plot"),
    (["validate", "--holdout-plot", "held.jpg"], "--holdout-plot"),
    (["validate", "--kind", "train", "--holdout-plot", "held.png"], "--holdout-plot"),
    # tune / rank: bad CLI input only
    (["tune", "--model", "GPT-5"], ""),
    (["tune", "--model", "Llama 2 7B", "--family", "TPU"], ""),
    (["tune", "--bogus"], "--bogus"),
    (["tune", "--num-gpus", "zero"], ""),
    (["rank", "/no/such/folder"], ""),
    (["rank", ".", "--metric", "fastest"], ""),
    (["rank"], ""),
    (["rank", "--bogus"], ""),
    # serving: bad --dtype
    (["serving", "--gpus", "8", "--dtype", "fp6"], "--dtype"),
    (["serving", "--gpus", "8", "--dtype", "fp4"], "dtype 'fp4'"),  # H200: no FP4 rate
    (["serving", "--gpus", "8", "--family", "A100-80G", "--dtype", "fp8"], "dtype 'fp8'"),
    # the command itself
    (["nope"], ""),
    (["evaluate", "--help-me"], "--help-me"),
]


@pytest.mark.parametrize(("argv", "names"), BAD_ARGV, ids=[" ".join(a) or "empty"
                                                          for a, _ in BAD_ARGV])
def test_main__hostile_argv_exits_2_with_one_line(argv, names, tmp_path, capsys):
    assert main(argv) == 2
    cap = capsys.readouterr()
    command = argv[0] if argv[0] in simcore.cli.COMMANDS else (
        "evaluate" if argv[0].startswith("-") else "")
    prefix = f"simcore {command}: error: " if command else "simcore: error: "
    line = _one_line(cap.err, prefix)
    assert names in line
    assert cap.out == ""
    assert _files(tmp_path) == []


# --- faults in the command line: each with its exit code ----------------------------------

def test_main__nothing_fits_is_a_result_exit_1(capsys):
    argv = ["evaluate", "--model", "Llama 3.1 405B", "--family", "SiP", "--s-kv", "131072",
            "--batch", "64", "--set", "pe_hbm_gb=1"]
    assert main(argv) == 1
    cap = capsys.readouterr()
    assert "no layout fits" in cap.out and cap.err == ""
    assert main([*argv, "--format", "json"]) == 1
    cap = capsys.readouterr()
    assert json.loads(cap.out) == [] and "Traceback" not in cap.err


def test_main__help_documents_the_exit_codes(capsys):
    assert main(["--help"]) == 0
    out = capsys.readouterr().out
    for code in ("0 ", "1 ", "2 ", "70 ", "75 ", "130 ", "141 "):
        assert f"\n  {code}" in out


@pytest.mark.parametrize("metric", ["flops", "FLOPS", "FLOPS_per_gpu", "flops_per_gpu",
                                    "latency_ns", "time", "throughput_tok_s"])
def test_main__metric_accepts_every_registry_alias(metric, capsys):
    assert main(["evaluate", *SMALL, "--metric", metric, "--top", "1",
                 "--format", "json"]) == 0
    assert len(json.loads(capsys.readouterr().out)) == 1


def test_main__huge_depth_refused_before_any_compute(monkeypatch, capsys):
    import simcore.studies.codesign as codesign

    def no_compute(*a, **k):
        raise AssertionError("computed")

    monkeypatch.setattr(chunks_mod, "reduce_best", no_compute)
    monkeypatch.setattr(codesign, "reduce_best", no_compute)
    assert main(["explore", *SMALL, "--depth", "40"]) == 2
    line = _one_line(capsys.readouterr().err.splitlines()[-1], "simcore explore: error: --depth")
    assert "memory" in line and "smaller depth" in line


@pytest.mark.parametrize("option,name", [("--dataset", "r.nc"), ("--dataset", "r.zarr"),
                                         ("--plot", "p.png"), ("--out", "rows.json"),
                                         ("--resume", "s.zarr")])
def test_main__full_disk_refused_before_any_compute(option, name, monkeypatch, tmp_path, capsys):
    import shutil

    import simcore.studies.codesign as codesign

    def no_compute(*a, **k):
        raise AssertionError("computed")

    monkeypatch.setattr(codesign, "joint_explore", no_compute)
    monkeypatch.setattr(shutil, "disk_usage", lambda p: shutil._ntuple_diskusage(10, 10, 0))
    assert main([*EXPLORE, option, name]) == 2
    line = _one_line(capsys.readouterr().err, f"simcore explore: error: {option}: cannot write")
    assert "free" in line and "e.g." in line
    assert _files(tmp_path) == []


@pytest.mark.parametrize("name", ["r.nc", "r.zarr", "p.png"])
def test_main__full_disk_while_saving_keeps_old_file_and_prints_results(
        name, monkeypatch, tmp_path, capsys):
    from simcore.io import save_dataset

    option = "--plot" if name.endswith(".png") else "--dataset"
    old = tmp_path / name
    if option == "--dataset":
        save_dataset(xr.Dataset({"old": ("a", [1.0])}), old)
    else:
        old.write_bytes(b"old png")
    before = _files(tmp_path)

    def disk_full(*a, **k):
        raise OSError(errno.ENOSPC, "No space left on device")

    if name.endswith(".zarr"):
        monkeypatch.setattr(xr.Dataset, "to_zarr", disk_full)
    else:
        monkeypatch.setattr(os, "fsync", disk_full)
    assert main([*EXPLORE, option, name]) == 2
    cap = capsys.readouterr()
    assert "Pareto frontier" in cap.out  # the computed result is still printed
    line = _one_line(cap.err, "simcore explore: error: the results above are complete")
    assert "No space left" in line and f"{option} " in line
    monkeypatch.undo()
    assert _files(tmp_path) == before
    if option == "--plot":
        assert old.read_bytes() == b"old png"
    else:
        assert "old" in simcore.io.load_dataset(old)


def test_main__ctrl_c_mid_sweep_says_what_is_saved(monkeypatch, tmp_path, capsys):
    from simcore.engine.core import Prepared

    real = Prepared.best_chunk
    calls = []

    def best_then_ctrl_c(self, *a, **k):
        out = real(self, *a, **k)
        calls.append(1)
        if len(calls) == 2:
            signal.raise_signal(signal.SIGINT)  # lands while the handler is the flag
        return out

    monkeypatch.setattr(simcore.distributed, "warm_cache", lambda: None)
    monkeypatch.setattr(Prepared, "best_chunk", best_then_ctrl_c)
    with simcore.set_options(chunk_points=_EIGHT_ROWS):  # 64 hardware rows: 8 chunks
        assert main(["explore", *SMALL, "--depth", "balanced", "--no-progress",
                     "--resume", "s.zarr"]) == 130
        line = _one_line(capsys.readouterr().err, "simcore explore: interrupted; 2 of 8 chunks")
        assert "rerun to resume" in line
        assert not (tmp_path / "s.zarr" / ".lock").exists()
        monkeypatch.setattr(Prepared, "best_chunk", real)
        assert main(["explore", *SMALL, "--depth", "balanced", "--no-progress",
                     "--resume", "s.zarr"]) == 0


def test_main__ctrl_c_without_a_store_says_interrupted(monkeypatch, capsys):
    from simcore.engine.core import Prepared

    def ctrl_c(self, *a, **k):
        signal.raise_signal(signal.SIGINT)
        return real(self, *a, **k)

    real = Prepared.best_chunk
    monkeypatch.setattr(simcore.distributed, "warm_cache", lambda: None)
    monkeypatch.setattr(Prepared, "best_chunk", ctrl_c)
    assert main(EXPLORE) == 130
    assert capsys.readouterr().err.strip() == "simcore explore: interrupted"


def test_main__numba_system_error_from_ctrl_c_is_an_interrupt(monkeypatch, capsys):
    import simcore.studies.codesign as codesign

    def leaky(*a, **k):
        try:
            raise KeyboardInterrupt
        except KeyboardInterrupt:
            raise SystemError("CPUDispatcher(fused_best) returned a result with an "
                              "exception set") from None

    monkeypatch.setattr(codesign, "joint_explore", leaky)
    # ``from None`` hides the cause but keeps the context: still an interrupt
    assert main(EXPLORE) == 130
    assert capsys.readouterr().err.strip() == "simcore explore: interrupted"


def test_console_script__real_ctrl_c_mid_sweep_exits_130_without_traceback(tmp_path):
    import subprocess
    import time

    store = tmp_path / "s.zarr"
    proc = subprocess.Popen([sys.executable, "-m", "simcore", "explore", *SMALL, "--depth", "8",
                             "--no-progress", "--resume", str(store)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            # a background job starts with SIGINT ignored: undo that
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
                            cwd=ROOT, env={**os.environ, "PYTHONPATH": os.pathsep.join(
                                [str(ROOT), os.environ.get("PYTHONPATH", "")])})
    deadline = time.monotonic() + 60
    try:
        while time.monotonic() < deadline and proc.poll() is None:
            marks = store / "marks"
            if marks.is_dir() and sum(m.name.isdigit() for m in marks.iterdir()) >= 2:
                break
            time.sleep(0.05)
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    err = err.decode()
    assert proc.returncode == 130, err
    line = _one_line(err, "simcore explore: interrupted; ")
    assert "chunks saved in" in line and "rerun to resume" in line
    assert not (store / ".lock").exists()


class _FakeClient:
    """Stands for a dask Client; the executor is replaced by one that loses the cluster."""

    def submit(self, *a, **k):  # pragma: no cover - never called
        raise AssertionError

    def scatter(self, *a, **k):  # pragma: no cover - never called
        raise AssertionError

    def scheduler_info(self):
        return {"workers": {"w1": {}, "w2": {}}}

    def close(self):
        pass


def _losing_executor(client, p, todo, metric):
    from distributed.client import FutureCancelledError

    a, b = todo[0]
    yield chunks_mod._run_chunk(p, a, b, metric)
    raise FutureCancelledError("k-1", reason="scheduler-connection-lost")


@pytest.mark.parametrize("resume", [False, True])
def test_main__lost_dask_workers_one_line_exit_75(resume, monkeypatch, tmp_path, capsys):
    import simcore.cli.explore as explore

    monkeypatch.setattr(explore, "_connect", lambda address: (_FakeClient(), None))
    monkeypatch.setattr(chunks_mod, "_on_dask", _losing_executor)
    argv = ["explore", *SMALL, "--depth", "balanced", "--no-progress", "--scheduler", "x"]
    if resume:
        argv += ["--resume", "s.zarr"]
    with simcore.set_options(chunk_points=_EIGHT_ROWS):  # 64 hardware rows: 8 chunks
        assert main(argv) == 75
    line = _one_line(capsys.readouterr().err, "simcore explore: error: lost the dask cluster")
    assert "resume with: simcore explore" in line and "--resume" in line
    assert ("1 of 8 chunks saved" in line) == resume


def test_main__store_in_use_by_another_run_exit_75(tmp_path, capsys):
    store = tmp_path / "s.zarr"
    store.mkdir()
    (store / ".lock").write_text(json.dumps({"pid": os.getppid(), "host": socket.gethostname(),
                                             "started": 0}))
    assert main([*EXPLORE, "--resume", str(store)]) == 75
    line = _one_line(capsys.readouterr().err, "simcore explore: error: checkpoint store")
    assert "in use by another simcore run" in line and "delete" not in line
    assert (store / ".lock").exists()  # not ours: left alone


def _race_for_the_lock(folder, *, pause):
    """Two runs (threads) take ``folder``'s store lock at once; ``pause(first)`` is called
    by the first run inside the lock protocol. Returns each run's lock or error."""
    import threading

    got: dict[str, object] = {}

    def run(name):
        try:
            got[name] = chunks_mod._StoreLock(str(folder))
        except SimcoreRetryError as exc:
            got[name] = exc

    first = threading.Thread(target=run, args=("first",))
    first.start()
    pause.wait_until_paused()
    second = threading.Thread(target=run, args=("second",))
    second.start()
    second.join(0.5)  # with the fix it waits for the first run's lock to be complete
    pause.go()
    first.join(10)
    second.join(10)
    return got


class _Pause:
    """A gate for one thread: the first caller stops until :meth:`go`."""

    def __init__(self):
        import threading

        self._paused, self._go, self._first = threading.Event(), threading.Event(), None

    def __call__(self):
        import threading

        if self._first is None:
            self._first = threading.get_ident()
        if self._first == threading.get_ident():
            self._paused.set()
            self._go.wait(5)

    def wait_until_paused(self):
        assert self._paused.wait(5)

    def go(self):
        self._go.set()


def _one_holder(got):
    held = [k for k, v in got.items() if isinstance(v, chunks_mod._StoreLock) and v.held]
    refused = [v for v in got.values() if isinstance(v, SimcoreRetryError)]
    for v in got.values():
        if isinstance(v, chunks_mod._StoreLock):
            v.release()
    return held, refused


def test_store_lock__a_lock_being_written_is_not_stale(tmp_path, monkeypatch, capsys):
    # two runs start on one new store: the second must not read the first's lock between
    # its creation and its content, judge it "half-written, stale" and take it over
    pause = _Pause()
    real_write = os.write

    def slow_write(fd, data):
        if data.startswith(b'{"pid"'):
            pause()
        return real_write(fd, data)

    monkeypatch.setattr(chunks_mod.os, "write", slow_write)
    got = _race_for_the_lock(tmp_path, pause=pause)
    monkeypatch.undo()
    held, refused = _one_holder(got)
    assert held == ["first"] and len(refused) == 1
    assert "in use by another simcore run" in str(refused[0])
    assert "took over" not in capsys.readouterr().err


def test_store_lock__two_runs_never_both_take_over_a_stale_lock(tmp_path, monkeypatch, capsys):
    (tmp_path / ".lock").write_text(json.dumps({"pid": 2**22 + 12345,
                                                "host": socket.gethostname(), "started": 0}))
    pause = _Pause()
    real_stale = chunks_mod._StoreLock._stale

    def stale(owner):
        verdict = real_stale(owner)
        pause()  # the first run has judged the old lock stale, not yet replaced it
        return verdict

    monkeypatch.setattr(chunks_mod._StoreLock, "_stale", staticmethod(stale))
    got = _race_for_the_lock(tmp_path, pause=pause)
    monkeypatch.undo()
    held, refused = _one_holder(got)
    assert held == ["first"] and len(refused) == 1
    assert capsys.readouterr().err.count("took over the stale lock") == 1


def test_main__store_of_another_sweep_exit_2(tmp_path, capsys):
    assert main([*EXPLORE, "--resume", "s.zarr"]) == 0
    capsys.readouterr()
    assert main([*EXPLORE, "--resume", "s.zarr", "--s-kv", "8192"]) == 2
    _one_line(capsys.readouterr().err, "simcore explore: error: --resume: ")


def test_main__full_disk_creating_the_store_is_not_a_different_sweep(monkeypatch, capsys):
    def disk_full(*a, **k):
        raise OSError(errno.ENOSPC, "No space left on device")

    with monkeypatch.context() as m:  # (monkeypatch.undo() would also undo the chdir)
        m.setattr(chunks_mod._ZarrCheckpoint, "_create", disk_full)
        assert main([*EXPLORE, "--resume", "s.zarr"]) == 75
    line = _one_line(capsys.readouterr().err, "simcore explore: error: cannot create")
    assert "No space left" in line and "different sweep" not in line
    code = main([*EXPLORE, "--resume", "s.zarr"])
    assert code == 0, capsys.readouterr().err  # the half-made store is reused
    assert Path("s.zarr").is_dir() and Path.cwd() != ROOT  # in the test's own folder


# --- damaged checkpoints: recomputed, never a wrong number ---------------------------------

@pytest.fixture(scope="module")
def swept():
    p = prepare("Llama 3.1 8B", WL, space=TINY,
                hardware={"bw_hbm_gbs": [2000.0, 4000.0, 8000.0, 16000.0],
                          "pe_hbm_gb": [8.0, 16.0, 96.0]})
    return p, best_of_prepared(p)


def _store(tmp_path, p):
    store = tmp_path / "s.zarr"
    ds = resumable_best(p, store, chunk_size=3)
    assert ds.attrs["chunks_computed"] == 4
    return store


def _delete(path):
    import shutil

    shutil.rmtree(path) if path.is_dir() else path.unlink()


DAMAGE = {
    "delete a vals chunk": lambda s: _delete(s / "vals" / "c" / "1" / "0"),
    "delete a best_idx chunk": lambda s: _delete(s / "best_idx" / "c" / "2"),
    "delete an n_fit chunk": lambda s: _delete(s / "n_fit" / "c" / "0"),
    "truncate a vals chunk": lambda s: os.truncate(s / "vals" / "c" / "0" / "0", 7),
    "truncate to zero": lambda s: os.truncate(s / "best_idx" / "c" / "3", 0),
    "flip bytes": lambda s: (s / "n_fit" / "c" / "1").write_bytes(
        bytes(b ^ 0xFF for b in (s / "n_fit" / "c" / "1").read_bytes())),
    "swap two chunks": lambda s: os.replace(s / "vals" / "c" / "0" / "0",
                                            s / "vals" / "c" / "3" / "0"),
    "delete the vals array": lambda s: _delete(s / "vals"),
    "delete an array's metadata": lambda s: _delete(s / "best_idx" / "zarr.json"),
    "garbage array metadata": lambda s: (s / "n_fit" / "zarr.json").write_text("{"),
    "delete a mark": lambda s: _delete(s / "marks" / "2"),
    "delete every mark": lambda s: [_delete(m) for m in (s / "marks").iterdir()],
    "garbage mark": lambda s: (s / "marks" / "1").write_text("not a checksum"),
    "empty mark": lambda s: (s / "marks" / "1").write_text(""),
    "mark out of range": lambda s: (s / "marks" / "99").write_text("x"),
    "stray file in marks": lambda s: (s / "marks" / "notes.txt").write_text("x"),
    "stale lock of a gone run": lambda s: (s / ".lock").write_text(
        json.dumps({"pid": 2**22 + 12345, "host": socket.gethostname(), "started": 0})),
    "half-written lock": lambda s: (s / ".lock").write_text("{\"pid\":"),
}


@pytest.mark.parametrize("damage", list(DAMAGE), ids=list(DAMAGE))
def test_resumable_best__damaged_store_is_verified_and_repaired(damage, swept, tmp_path, capsys):
    p, clean = swept
    store = _store(tmp_path, p)
    capsys.readouterr()
    DAMAGE[damage](store)
    try:
        ds = resumable_best(p, store, chunk_size=3)
    except StoreMismatchError as exc:  # metadata too damaged to trust: refused, clearly
        assert damage.endswith("metadata") and "pass a new store path" in str(exc)
        return
    xr.testing.assert_equal(ds.drop_attrs(), clean.drop_attrs())
    err = capsys.readouterr().err
    assert "Traceback" not in err
    if ds.attrs["chunks_repaired"]:
        assert f"recomputing {ds.attrs['chunks_repaired']} damaged chunk" in err
    again = resumable_best(p, store, chunk_size=3)  # repaired for good
    assert again.attrs["chunks_computed"] == 0
    xr.testing.assert_equal(again.drop_attrs(), clean.drop_attrs())
    assert not (store / ".lock").exists()


STORE_REFUSALS = {
    "a file": lambda s: s.write_text("not a store"),
    "a foreign folder": lambda s: (s.mkdir(), (s / "data.csv").write_text("a,b")),
    "an old-format store": lambda s: (s.mkdir(), (s / "zarr.json").write_text(json.dumps(
        {"zarr_format": 3, "node_type": "group", "attributes": {"fingerprint": "abc"}}))),
    "a future-format store": lambda s: (s.mkdir(), (s / "marks").mkdir(),
                                        (s / "zarr.json").write_text(json.dumps(
        {"zarr_format": 3, "node_type": "group",
         "attributes": {"fingerprint": "abc", "simcore_store_format": 99}}))),
    "garbage group metadata": lambda s: (s.mkdir(), (s / "zarr.json").write_text("{{")),
    "a saved Dataset (zarr v2)": lambda s: simcore.io.save_dataset(
        xr.Dataset({"x": ("a", [1.0, 2.0])}), s),
    "a zarr v3 group of someone else": lambda s: __import__("zarr").open_group(
        str(s), mode="w").create_array("data", shape=(2,), dtype="f8"),
}


@pytest.mark.parametrize("kind", list(STORE_REFUSALS), ids=list(STORE_REFUSALS))
def test_resumable_best__not_a_store_is_refused_clearly(kind, swept, tmp_path):
    p, _ = swept
    store = tmp_path / "s.zarr"
    STORE_REFUSALS[kind](store)
    before = _files(tmp_path)
    with pytest.raises(StoreMismatchError, match="pass a new store path"):
        resumable_best(p, store, chunk_size=3)
    assert _files(tmp_path) == before  # nothing written into what is not ours


def test_resumable_best__store_in_use_is_refused_without_delete_advice(swept, tmp_path):
    p, _ = swept
    store = tmp_path / "s.zarr"
    store.mkdir()
    lock = {"pid": os.getpid(), "host": socket.gethostname(), "started": 0}
    (store / ".lock").write_text(json.dumps(lock))
    with pytest.raises(SimcoreRetryError, match="in use by another simcore run") as exc:
        resumable_best(p, store, chunk_size=3)
    assert "delete" not in str(exc.value)
    assert json.loads((store / ".lock").read_text()) == lock


def test_resumable_best__ctrl_c_while_verifying_releases_the_lock(swept, tmp_path, monkeypatch):
    p, _ = swept
    store = _store(tmp_path, p)

    def interrupted(self, mem):
        raise KeyboardInterrupt

    monkeypatch.setattr(chunks_mod._ZarrCheckpoint, "_verify", interrupted)
    with pytest.raises(KeyboardInterrupt):
        resumable_best(p, store, chunk_size=3)
    assert not (store / ".lock").exists()


def test_resumable_best__full_disk_mid_sweep_keeps_what_is_saved(swept, tmp_path,
                                                                  monkeypatch):
    p, clean = swept
    store = tmp_path / "s.zarr"
    real = chunks_mod._ZarrCheckpoint.write
    n = []

    def fills_up(self, chunk, *a):
        n.append(chunk)
        if len(n) == 3:
            raise OSError(errno.ENOSPC, "No space left on device")
        return real(self, chunk, *a)

    monkeypatch.setattr(chunks_mod._ZarrCheckpoint, "write", fills_up)
    with pytest.raises(SimcoreRetryError, match="2 of 4 chunks saved"):
        resumable_best(p, store, chunk_size=3)
    monkeypatch.undo()
    ds = resumable_best(p, store, chunk_size=3)
    assert ds.attrs["chunks_reused"] == 2
    xr.testing.assert_equal(ds.drop_attrs(), clean.drop_attrs())


def test_reduce_best__ctrl_c_between_chunks(swept, tmp_path, monkeypatch):
    from simcore.engine.core import Prepared

    p, clean = swept
    real = Prepared.best_chunk

    def ctrl_c(self, *a, **k):
        signal.raise_signal(signal.SIGINT)
        return real(self, *a, **k)

    monkeypatch.setattr(Prepared, "best_chunk", ctrl_c)
    with pytest.raises(SweepInterrupted, match=r"interrupted; 1 of 4 chunks saved") as exc:
        resumable_best(p, tmp_path / "s.zarr", chunk_size=3)
    assert isinstance(exc.value, KeyboardInterrupt) and exc.value.saved == 1
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
    monkeypatch.undo()
    ds = resumable_best(p, tmp_path / "s.zarr", chunk_size=3)
    assert ds.attrs["chunks_reused"] == 1
    xr.testing.assert_equal(ds.drop_attrs(), clean.drop_attrs())


def test_reduce_best__lost_cluster_is_a_retry_error(swept, tmp_path, monkeypatch):
    p, clean = swept
    monkeypatch.setattr(chunks_mod, "_on_dask", _losing_executor)
    with pytest.raises(SimcoreRetryError, match="1 of 4 chunks saved"):
        chunks_mod.reduce_best(p, client=_FakeClient(), store=tmp_path / "s.zarr",
                               chunk_size=3)
    with pytest.raises(SimcoreRetryError, match="nothing was saved"):
        chunks_mod.reduce_best(p, client=_FakeClient(), chunk_size=3)
    monkeypatch.undo()
    ds = resumable_best(p, tmp_path / "s.zarr", chunk_size=3)
    xr.testing.assert_equal(ds.drop_attrs(), clean.drop_attrs())


# --- public functions: bad arguments raise one clear SimcoreInputError ---------------------

def _p():
    return prepare("Llama 3.1 8B", WL, space=TINY)


def _written(name: str, text: str) -> Path:
    Path(name).write_text(text)
    return Path(name).resolve()


BAD_CALLS: dict[str, tuple[object, type[BaseException], str]] = {
    "reduce_best chunk_size=0": (lambda: chunks_mod.reduce_best(_p(), chunk_size=0),
                                 SimcoreInputError, "chunk_size"),
    "reduce_best chunk_size=-3": (lambda: chunks_mod.reduce_best(_p(), chunk_size=-3),
                                  SimcoreInputError, "chunk_size"),
    "reduce_best chunk_size=2.5": (lambda: chunks_mod.reduce_best(_p(), chunk_size=2.5),
                                   SimcoreInputError, "chunk_size"),
    "reduce_best chunk_size='4'": (lambda: chunks_mod.reduce_best(_p(), chunk_size="4"),
                                   SimcoreInputError, "chunk_size"),
    "reduce_best chunk_size=True": (lambda: chunks_mod.reduce_best(_p(), chunk_size=True),
                                    SimcoreInputError, "chunk_size"),
    "reduce_best client=str": (lambda: chunks_mod.reduce_best(_p(), client="tcp://x"),
                               SimcoreInputError, "dask.distributed.Client"),
    "reduce_best client=int": (lambda: chunks_mod.reduce_best(_p(), client=3),
                               SimcoreInputError, "dask.distributed.Client"),
    "reduce_best metric=cost": (lambda: chunks_mod.reduce_best(_p(), metric="cost"),
                                ValueError, "fused path"),
    "reduce_best metric=nope": (lambda: chunks_mod.reduce_best(_p(), metric="nope"),
                                ValueError, "nope"),
    "evaluate_best chunk_size=0": (lambda: evaluate_best("Llama 3.1 8B", WL, space=TINY,
                                                         chunk_size=0),
                                   SimcoreInputError, "chunk_size"),
    "evaluate_best chunk_size=1.0": (lambda: evaluate_best("Llama 3.1 8B", WL, space=TINY,
                                                           chunk_size=1.0),
                                     SimcoreInputError, "chunk_size"),
    "evaluate chunks=0": (lambda: evaluate("Llama 3.1 8B", WL, space=TINY, chunks=0),
                          SimcoreInputError, "chunks"),
    "evaluate chunks=2.5": (lambda: evaluate("Llama 3.1 8B", WL, space=TINY, chunks=2.5),
                            SimcoreInputError, "chunks"),
    "evaluate chunks='x'": (lambda: evaluate("Llama 3.1 8B", WL, space=TINY, chunks="x"),
                            SimcoreInputError, "chunks"),
    "evaluate chunks={knob: 0}": (lambda: evaluate("Llama 3.1 8B", WL, space=TINY,
                                                   chunks={"bw_hbm_gbs": 0}),
                                  SimcoreInputError, "bw_hbm_gbs"),
    "evaluate chunks={tp: 1}": (lambda: evaluate("Llama 3.1 8B", WL, space=TINY,
                                                 chunks={"tp": 1}),
                                SimcoreInputError, "hardware knobs"),
    "evaluate model=nope": (lambda: evaluate("nope", WL, space=TINY), ValueError, "nope"),
    "evaluate workload=str": (lambda: evaluate("Llama 3.1 8B", "decode", space=TINY),
                              ValueError, "Workload"),
    "evaluate hardware=bad knob": (lambda: evaluate("Llama 3.1 8B", WL, space=TINY,
                                                    hardware={"speed": [1]}),
                                   ValueError, "speed"),
    "evaluate hardware=negative": (lambda: evaluate("Llama 3.1 8B", WL, space=TINY,
                                                    hardware={"bw_hbm_gbs": [-1]}),
                                   ValueError, "bw_hbm_gbs"),
    "evaluate hardware=nan": (lambda: evaluate("Llama 3.1 8B", WL, space=TINY,
                                               hardware={"bw_hbm_gbs": [float("nan")]}),
                              ValueError, "bw_hbm_gbs"),
    "evaluate hardware=empty": (lambda: evaluate("Llama 3.1 8B", WL, space=TINY,
                                                 hardware={"bw_hbm_gbs": []}),
                                ValueError, "bw_hbm_gbs"),
    "evaluate hardware=42": (lambda: evaluate("Llama 3.1 8B", WL, space=TINY, hardware=42),
                             ValueError, "hardware"),
    "evaluate family=TPU": (lambda: evaluate("Llama 3.1 8B", WL, space=TINY, family="TPU"),
                            ValueError, "TPU"),
    "evaluate space=huge": (lambda: evaluate("Llama 3.1 8B", WL, space="huge"),
                            ValueError, "huge"),
    "evaluate gpus=0": (lambda: evaluate("Llama 3.1 8B", WL, space=TINY, gpus=0),
                        SimcoreInputError, "gpus must be a positive integer"),
    "evaluate gpus=-4": (lambda: evaluate("Llama 3.1 8B", WL, space=TINY, gpus=-4),
                         SimcoreInputError, "gpus"),
    "evaluate gpus=2.5": (lambda: evaluate("Llama 3.1 8B", WL, space=TINY, gpus=2.5),
                          SimcoreInputError, "gpus"),
    "evaluate gpus=8.0": (lambda: evaluate("Llama 3.1 8B", WL, space=TINY, gpus=8.0),
                          SimcoreInputError, "gpus"),
    "evaluate gpus='8'": (lambda: evaluate("Llama 3.1 8B", WL, space=TINY, gpus="8"),
                          SimcoreInputError, "gpus"),
    "evaluate gpus=True": (lambda: evaluate("Llama 3.1 8B", WL, space=TINY, gpus=True),
                           SimcoreInputError, "gpus"),
    "evaluate exact_gpus without gpus": (lambda: evaluate("Llama 3.1 8B", WL, space=TINY,
                                                          exact_gpus=True),
                                         SimcoreInputError, "pass gpus=N"),
    "evaluate exact_gpus='yes'": (lambda: evaluate("Llama 3.1 8B", WL, space=TINY, gpus=2,
                                                   exact_gpus="yes"),
                                  SimcoreInputError, "exact_gpus"),
    "evaluate gpus too small": (lambda: evaluate("Llama 3.1 70B", WL, family="H100-SXM",
                                                 gpus=1),
                                simcore.DeviceBudgetError, "smallest device count that fits is 2"),
    "evaluate exact gpus no such count": (lambda: evaluate("Llama 3.1 8B", WL, space=TINY,
                                                           family="H100-SXM", gpus=3,
                                                           exact_gpus=True),
                                          simcore.DeviceBudgetError, "exactly 3 devices"),
    "evaluate_best gpus=0": (lambda: evaluate_best("Llama 3.1 8B", WL, space=TINY, gpus=0),
                             SimcoreInputError, "gpus"),
    "evaluate_best gpus too small": (lambda: evaluate_best("Llama 3.1 70B", WL,
                                                           family="H100-SXM", gpus=1),
                                     simcore.DeviceBudgetError, "at least 2"),
    "joint_explore gpus=0": (lambda: joint_explore("Llama 3.1 8B", s_kv=4096,
                                                   depth="two_stage", gpus=0),
                             SimcoreInputError, "gpus"),
    "evaluate batch=[]": (lambda: evaluate("Llama 3.1 8B", WL, space=TINY, batch=[]),
                          SimcoreInputError, "batch needs at least one value"),
    "evaluate batch=[1, 1]": (lambda: evaluate("Llama 3.1 8B", WL, space=TINY, batch=[1, 1]),
                              SimcoreInputError, "repeats 1"),
    "evaluate batch=[8, 0]": (lambda: evaluate("Llama 3.1 8B", WL, space=TINY, batch=[8, 0]),
                              SimcoreInputError, "batch"),
    "evaluate batch=2.5": (lambda: evaluate("Llama 3.1 8B", WL, space=TINY, batch=2.5),
                           SimcoreInputError, "batch"),
    "evaluate batch=[True]": (lambda: evaluate("Llama 3.1 8B", WL, space=TINY, batch=[True]),
                              SimcoreInputError, "batch"),
    "evaluate s_kv='8192'": (lambda: evaluate("Llama 3.1 8B", WL, space=TINY, s_kv="8192"),
                             SimcoreInputError, "s_kv"),
    "evaluate s_kv={1: 2}": (lambda: evaluate("Llama 3.1 8B", WL, space=TINY, s_kv={1: 2}),
                             SimcoreInputError, "s_kv"),
    "evaluate s_kv=[10**9]": (lambda: evaluate("Llama 3.1 8B", WL, space=TINY, s_kv=[10**9]),
                              SimcoreInputError, "s_kv=1000000000"),
    "evaluate train batch not a multiple": (lambda: evaluate(
        "Llama 3.1 8B", Workload("train", micro_batch=4, batch=4), space=TINY, batch=[4, 6]),
        SimcoreInputError, "batch=6"),
    "evaluate_best batch=[]": (lambda: evaluate_best("Llama 3.1 8B", WL, space=TINY, batch=[]),
                               SimcoreInputError, "batch"),
    "plan dtype=fp6": (lambda: plan("Llama 3.1 8B", family="H100-SXM", gpus=2, isl=128,
                                    osl=16, dtype="fp6"), ValueError, "dtype must be one of"),
    "plan dtype=fp4 on H100": (lambda: plan("Llama 3.1 8B", family="H100-SXM", gpus=2,
                                            isl=128, osl=16, dtype="fp4"),
                               ValueError, "H100-SXM has none"),
    "plan dtype=fp8 on A100": (lambda: plan("Llama 3.1 8B", family="A100-80G", gpus=2,
                                            isl=128, osl=16, dtype="fp8"),
                               ValueError, "A100-80G has none"),
    "joint_explore depth=0": (lambda: joint_explore("Llama 3.1 8B", s_kv=4096,
                                                            depth=0),
                              ValueError, "depth"),
    "joint_explore depth=deep": (lambda: joint_explore("Llama 3.1 8B", s_kv=4096,
                                                               depth="deep"),
                                 ValueError, "deep"),
    "joint_explore depth=2.5": (lambda: joint_explore("Llama 3.1 8B", s_kv=4096,
                                                              depth=2.5),
                                ValueError, "depth"),
    "joint_explore depth=40": (lambda: joint_explore("Llama 3.1 8B", s_kv=4096,
                                                             depth=40),
                               SimcoreInputError, "memory"),
    "joint_explore repeated grid": (lambda: joint_explore(
        "Llama 3.1 8B", s_kv=4096, depth={"bw_hbm_gbs": [4000, 4000]}),
        SimcoreInputError, "repeats"),
    "joint_explore grid of str": (lambda: joint_explore(
        "Llama 3.1 8B", s_kv=4096, depth={"bw_hbm_gbs": "fast"}),
        SimcoreInputError, "numbers"),
    "joint_explore metric=nope": (lambda: joint_explore("Llama 3.1 8B", s_kv=4096,
                                                                depth="two_stage",
                                                                metric="nope"),
                                  ValueError, "nope"),
    "joint_explore mode=serve": (lambda: joint_explore("Llama 3.1 8B", s_kv=4096,
                                                               mode="serve"),
                                 ValueError, "serve"),
    "joint_explore s_kv=0": (lambda: joint_explore("Llama 3.1 8B", s_kv=0),
                             ValueError, "s_kv"),
    "joint_explore client=str": (lambda: joint_explore(
        "Llama 3.1 8B", s_kv=4096, depth="two_stage", client="tcp://x"),
        SimcoreInputError, "Client"),
    "set_options chunk_points=0": (lambda: simcore.set_options(chunk_points=0),
                                   SimcoreInputError, "chunk_points"),
    "set_options chunk_points=2.5": (lambda: simcore.set_options(chunk_points=2.5),
                                     SimcoreInputError, "chunk_points"),
    "set_options chunk_points=True": (lambda: simcore.set_options(chunk_points=True),
                                      SimcoreInputError, "chunk_points"),
    "set_options chunk_points='big'": (lambda: simcore.set_options(chunk_points="big"),
                                       SimcoreInputError, "chunk_points"),
    "set_options prune_min_points=0": (lambda: simcore.set_options(prune_min_points=0),
                                       SimcoreInputError, "prune_min_points"),
    "set_options prune_dominated=1": (lambda: simcore.set_options(prune_dominated=1),
                                      SimcoreInputError, "prune_dominated"),
    "set_options unknown": (lambda: simcore.set_options(speed=3), SimcoreInputError,
                            "unknown simcore option"),
    "Workload mode=serve": (lambda: Workload("serve"), ValueError, "serve"),
    "Workload batch=0": (lambda: Workload("decode", batch=0), ValueError, "batch"),
    "Workload s_kv=-1": (lambda: Workload("decode", s_kv=-1), ValueError, "s_kv"),
    "Hardware bw=0": (lambda: simcore.Hardware(bw_hbm_gbs=0), ValueError, "bw_hbm_gbs"),
    "Hardware bw=nan": (lambda: simcore.Hardware(bw_hbm_gbs=float("nan")), ValueError,
                        "bw_hbm_gbs"),
    "Hardware pe_hbm_gb=-1": (lambda: simcore.Hardware(pe_hbm_gb=-1), ValueError,
                              "pe_hbm_gb"),
    "Model.from_hf_config missing": (lambda: simcore.Model.from_hf_config("/no/such.json"),
                                     (ValueError, OSError), "such"),
    "Model.from_hf_config empty config": (lambda: simcore.Model.from_hf_config(
        _written("config.json", "{}")), ValueError, ""),
    "Model.from_hf_config not json": (lambda: simcore.Model.from_hf_config(
        _written("config.json", "{not json")), ValueError, ""),
    "Model.from_hf_config negative layers": (lambda: simcore.Model.from_hf_config(
        _written("config.json", json.dumps({"num_hidden_layers": -1, "hidden_size": 4096,
                                            "num_attention_heads": 32}))), ValueError, ""),
    "save_dataset .csv": (lambda: simcore.io.save_dataset(xr.Dataset(), "r.csv"),
                          SimcoreInputError, ".nc or .zarr"),
    "load_dataset missing": (lambda: simcore.io.load_dataset("nope.nc"), FileNotFoundError,
                             "no results"),
    "load_dataset .txt": (lambda: simcore.io.load_dataset(Path("x.txt").resolve()
                                                          if Path("x.txt").write_text("x")
                                                          else None),
                          SimcoreInputError, ".nc or .zarr"),
    "load_dataset garbage .nc": (lambda: simcore.io.load_dataset(
        Path("g.nc") if Path("g.nc").write_bytes(b"garbage" * 10) else None),
        SimcoreInputError, "cannot read"),
    "load_dataset empty .zarr": (lambda: simcore.io.load_dataset(
        Path("e.zarr") if Path("e.zarr").mkdir() is None else None),
        SimcoreInputError, "cannot read"),
}


@pytest.mark.parametrize("case", list(BAD_CALLS), ids=list(BAD_CALLS))
def test_public_function__hostile_argument_raises_clearly(case, tmp_path):
    call, exc_type, match = BAD_CALLS[case]
    with pytest.raises(exc_type) as info:
        call()
    assert match in str(info.value)
    assert "\n" not in str(info.value).strip() or isinstance(info.value, OSError)
    leftovers = [f for f in _files(tmp_path) if f not in ("x.txt", "g.nc", "e.zarr", "config.json")]
    assert leftovers == []


NUMPY_INTS = {
    "reduce_best chunk_size": lambda: chunks_mod.reduce_best(_p(), chunk_size=np.int64(1)),
    "evaluate_best chunk_size": lambda: evaluate_best("Llama 3.1 8B", WL, space=TINY,
                                                      chunk_size=np.int32(2)),
    "evaluate chunks int": lambda: evaluate("Llama 3.1 8B", WL, space=TINY,
                                            hardware={"bw_hbm_gbs": [2000, 4000]},
                                            chunks=np.int64(1)).compute(),
    "evaluate chunks mapping": lambda: evaluate("Llama 3.1 8B", WL, space=TINY,
                                                hardware={"bw_hbm_gbs": [2000, 4000]},
                                                chunks={"bw_hbm_gbs": np.int16(1)}).compute(),
    "joint_explore depth": lambda: joint_explore("Llama 3.1 8B", s_kv=4096,
                                                         depth=np.int64(1), space=TINY),
    "joint_explore grid of numpy ints": lambda: joint_explore(
        "Llama 3.1 8B", s_kv=4096, depth={"bw_hbm_gbs": np.array([2000, 4000])}, space=TINY),
    "set_options": lambda: simcore.set_options(chunk_points=np.int64(1000))._old,
    "hardware grid": lambda: evaluate("Llama 3.1 8B", WL, space=TINY,
                                      hardware={"bw_hbm_gbs": [np.int64(4000)]}),
    "evaluate gpus": lambda: evaluate("Llama 3.1 8B", WL, space=TINY, gpus=np.int64(2),
                                      exact_gpus=np.bool_(True)),
    "evaluate batch array": lambda: evaluate("Llama 3.1 8B", WL, space=TINY,
                                             batch=np.array([1, 8])),
    "evaluate s_kv numpy ints": lambda: evaluate("Llama 3.1 8B", WL, space=TINY,
                                                 s_kv=[np.int32(1024), np.int64(2048)]),
    "evaluate batch numpy scalar": lambda: evaluate("Llama 3.1 8B", WL, space=TINY,
                                                    batch=np.int16(4)),
    "plan gpus": lambda: plan("Llama 3.1 8B", family="H100-SXM", gpus=np.int64(2), isl=128,
                              osl=16, batch=(1,), prefill_batch=(1,), dtype="fp8"),
}


@pytest.mark.parametrize("case", list(NUMPY_INTS), ids=list(NUMPY_INTS))
def test_public_function__numpy_integers_accepted(case):
    with simcore.set_options():
        assert NUMPY_INTS[case]() is not None


def test_evaluate__full_tensor_beyond_memory_is_refused(monkeypatch):
    monkeypatch.setattr(chunks_mod, "available_memory", lambda: 1000)
    with pytest.raises(SimcoreInputError, match="chunks=.*evaluate_best"):
        evaluate("Llama 3.1 8B", WL, space=TINY)
    lazy = evaluate("Llama 3.1 8B", WL, space=TINY, chunks=1)  # lazy: not refused
    assert lazy.latency_ns.chunks is not None


def test_save_dataset__overwrite_failure_keeps_old_and_leaves_nothing(tmp_path, monkeypatch):
    from simcore.io import load_dataset, save_dataset

    target = save_dataset(xr.Dataset({"x": ("a", [1.0])}), tmp_path / "r.zarr")

    def fail_swap(src, dst):
        if str(dst).endswith("r.zarr") and "old" not in str(src):
            raise OSError(errno.EIO, "I/O error")
        return real(src, dst)

    real = os.replace
    monkeypatch.setattr(os, "replace", fail_swap)
    with pytest.raises(OSError, match="I/O error"):
        save_dataset(xr.Dataset({"x": ("a", [2.0])}), target)
    monkeypatch.undo()
    assert load_dataset(target).x.values.tolist() == [1.0]
    assert _files(tmp_path)[0] == "r.zarr" and not any(
        f.startswith(".") for f in _files(tmp_path))


def test_plot__full_disk_leaves_no_zero_byte_png(tmp_path, monkeypatch):
    from simcore.studies.plot import plot_pareto

    r = joint_explore("Llama 3.1 8B", s_kv=4096, depth="two_stage", space=TINY)

    def disk_full(fd):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(os, "fsync", disk_full)
    with pytest.raises(OSError, match="No space"):
        plot_pareto(r, tmp_path / "p.png")
    assert _files(tmp_path) == []


# --- properties, each with its explicit tolerance -----------------------------------------

#: Doubling a knob never makes the best latency worse by more than this (relative): one
#: rounding step of the float sums, when the winner changes between two layouts whose
#: latencies agree to the last bits (docs/design.md, Testing).
DOUBLING_REL_TOL = 1e-12


@settings(max_examples=150, deadline=None)
@given(knob=st.sampled_from(simcore.model.specs.HW_KNOBS),
       s_kv=st.sampled_from([512, 4096, 32768]), batch=st.integers(1, 8),
       mode=st.sampled_from(["decode", "prefill"]))
def test_property__doubling_a_knob_never_hurts_beyond_rounding(knob, s_kv, batch, mode):
    base = simcore.Hardware().as_dict()
    hw = {knob: [base[knob], 2 * base[knob]]}
    r = evaluate_best("Llama 3.1 8B", Workload(mode, s_kv=s_kv, batch=batch),
                      space={"tp": (1, 2, 4), "pp": (1, 2)}, hardware=hw)
    lat = r.latency_ns.squeeze().values
    if np.isfinite(lat[0]):
        assert np.isfinite(lat[1])  # more of a knob never un-fits
        assert lat[1] <= lat[0] * (1 + DOUBLING_REL_TOL)


#: Decode throughput of a layout with DP=d never drops when the batch grows by d (an
#: even split); between multiples of d it may (an uneven split leaves a replica idle).
THROUGHPUT_REL_TOL = 1e-12


@settings(max_examples=100, deadline=None)  # 18 distinct inputs: all of them
@given(dp=st.sampled_from([1, 2, 4]), k=st.integers(1, 6))
def test_property__decode_throughput_grows_with_even_batches(dp, k):
    space = {"tp": (1,), "dp": (dp,), "pp": (1,), "cp": (1,)}
    tput = []
    for batch in (k * dp, (k + 1) * dp):
        ds = evaluate("Llama 3.1 8B", Workload("decode", s_kv=4096, batch=batch), space=space)
        fits = ds.fits.values.ravel()
        tput.append(np.where(fits, ds.throughput_tok_s.values.ravel(), np.nan))
    both = np.isfinite(tput[0]) & np.isfinite(tput[1])
    assert np.all(tput[1][both] >= tput[0][both] * (1 - THROUGHPUT_REL_TOL))


@settings(max_examples=20, deadline=None)
@given(chunk_size=st.integers(1, 12), damaged=st.sets(st.integers(0, 11), max_size=4))
def test_property__any_damage_to_any_chunks_is_repaired(chunk_size, damaged, tmp_path_factory):
    p = prepare("Llama 3.1 8B", WL, space=TINY,
                hardware={"bw_hbm_gbs": [2000.0, 4000.0, 8000.0, 16000.0],
                          "pe_hbm_gb": [8.0, 16.0, 96.0]})
    clean = best_of_prepared(p)
    store = tmp_path_factory.mktemp("prop") / "s.zarr"
    resumable_best(p, store, chunk_size=chunk_size)
    n_chunks = -(-12 // chunk_size)
    for c in {d % n_chunks for d in damaged}:
        f = store / "vals" / "c" / str(c) / "0"
        if f.exists():
            f.write_bytes(f.read_bytes()[:3])
    ds = resumable_best(p, store, chunk_size=chunk_size)
    xr.testing.assert_equal(ds.drop_attrs(), clean.drop_attrs())


def test_hostile_table__has_at_least_150_cases():
    tables = (BAD_ARGV, DAMAGE, STORE_REFUSALS, BAD_CALLS, NUMPY_INTS)
    assert sum(map(len, tables)) >= 150


if __name__ == "__main__":  # pragma: no cover
    sys.exit(pytest.main([__file__, "-q"]))
