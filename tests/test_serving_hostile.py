"""Bad input to ``simcore serving`` and the serving planner (issue 37 items 4, 7, 13, 17).

Each CLI row is one bad input and its outcome: the exit code, exactly one line on stderr
naming the problem (the one-time "compiling kernels" notice aside), no traceback, and
nothing computed: refusals come before the planner's sweep, so nothing is lost and no
file is left behind.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from simcore.cli import main
from simcore.studies import serving
from simcore.studies.serving import ServingError, agg_metrics, disagg_metrics, plan

SMALL = ["serving", "--model", "Llama 3.1 8B", "--family", "H100-SXM", "--isl", "1024",
         "--batch", "1", "8"]


@pytest.fixture(autouse=True)
def _in_tmp(tmp_path, monkeypatch):
    """Every case runs in an empty folder."""
    monkeypatch.chdir(tmp_path)


@pytest.fixture
def no_compute(monkeypatch):
    """The planner's sweep fails the test if it runs: a refusal must come first."""
    def computed(*args, **kwargs):
        raise AssertionError("the planner computed before refusing")

    monkeypatch.setattr(serving.search, "sweep", computed)


def _one_line(err: str) -> str:
    # JSON / CSV runs state their assumptions on stderr before the rows ("assumed: ...")
    lines = [ln for ln in err.strip().splitlines()
             if not ln.startswith(("simcore: compiling kernels (once", "assumed: "))]
    assert len(lines) == 1, err
    assert "Traceback" not in err
    return lines[0]


def _files(folder: Path) -> list[str]:
    return sorted(str(p.relative_to(folder)) for p in folder.rglob("*"))


# --- refused before any work: exit 2, one line ---------------------------------------------

REFUSED: list[tuple[list[str], int, str]] = [
    # item 7: budgets beyond what the family's system holds
    ([*SMALL, "--gpus", "1000000"], 2, "--gpus): one H100-SXM system holds at most 4096"),
    ([*SMALL, "--gpus", str(2**70)], 2, "pass gpus <= 4096"),
    ([*SMALL, "--gpus", "4097", "--family", "H200"], 2, "at most 4096 devices"),
    ([*SMALL, "--gpus", "257", "--family", "SiP", "--exact-gpus"], 2, "at most 256 devices"),
    # item 4: osl 1 has no decode step, so no TPOT and no decode workers
    ([*SMALL, "--gpus", "2", "--osl", "1", "--max-tpot-ms", "50"], 2,
     "--max-tpot-ms): with osl 1 there is no decode step"),
    ([*SMALL, "--gpus", "2", "--osl", "1", "--mode", "disagg"], 2,
     "--mode disagg): with osl 1 there is no decode step"),
    # item 17: --out and --plot checked while parsing, as evaluate / explore / compare do
    ([*SMALL, "--gpus", "2", "--out", "/no/such/folder/rows.csv"], 2,
     "argument --out: cannot write '/no/such/folder/rows.csv': folder '/no/such/folder' does "
     "not exist"),
    ([*SMALL, "--gpus", "2", "--out", "."], 2, "argument --out: cannot write '.': it is a folder"),
    ([*SMALL, "--gpus", "2", "--plot", "/no/such/folder/p.png"], 2, "argument --plot: cannot write"),
    ([*SMALL, "--gpus", "2", "--plot", "p.txt"], 2, "argument --plot: expected a name ending in"),
    # item 13: --out and --plot naming one file (the rows would be replaced by the picture)
    ([*SMALL, "--gpus", "2", "--out", "x.png", "--plot", "x.png"], 2,
     "--out and --plot both name 'x.png', so one would overwrite the other; pass a different "
     "file to --plot, e.g. --plot x_plot.png"),
    ([*SMALL, "--gpus", "2", "--out", "./x.svg", "--plot", "x.svg"], 2,
     "--out and --plot both name 'x.svg'"),
]


@pytest.mark.parametrize(("argv", "code", "message"), REFUSED,
                         ids=[" ".join(a[len(SMALL):]) for a, _, _ in REFUSED])
def test_main__serving_bad_input_refused_before_compute(argv, code, message, no_compute,
                                                        tmp_path, capsys):
    assert main(argv) == code
    cap = capsys.readouterr()
    line = _one_line(cap.err)
    assert line.startswith("simcore serving: error: ") and message in line, line
    assert cap.out == ""
    assert _files(tmp_path) == []


def test_plan__budget_beyond_the_family_refused(no_compute):
    with pytest.raises(ServingError, match="one SiP system holds at most 256 devices"):
        plan("Llama 3.1 8B", family="SiP", gpus=257, isl=128, osl=16)
    with pytest.raises(ServingError, match="pass gpus <= 4096"):
        plan("Llama 3.1 8B", family="H200", gpus=2**70, isl=128, osl=16)


# --- osl 1: a prefill-only workload --------------------------------------------------------

def test_agg_metrics__osl_1_has_no_tpot_and_latency_is_the_ttft():
    m = agg_metrics(prefill_ns=50e6, step_ns=20e6, batch=8, osl=1)
    assert math.isnan(m["tpot_ns"])
    assert m["request_latency_ns"] == m["ttft_ns"] == 50e6
    assert m["requests_per_s"] == m["tokens_per_s"] == 20.0  # one request per prefill
    d = disagg_metrics(prefill_ns=50e6, prefill_batch=1, prefill_workers=2, step_ns=20e6,
                       batch=8, decode_workers=1, osl=1)
    assert math.isnan(d["tpot_ns"]) and d["request_latency_ns"] == 50e6
    assert d["requests_per_s"] == 40.0 and bool(d["rate_matched"])


def test_plan__osl_1_rows_have_no_tpot_and_say_so():
    p = plan("Llama 3.1 8B", family="H100-SXM", gpus=2, isl=1024, osl=1, batch=(1, 8),
             max_ttft_ms=1000)
    assert p.best and p.candidates
    assert {c.mode for c in p.candidates} == {"agg"}  # no decode workers to disaggregate
    for c in p.candidates:
        assert math.isnan(c.tpot_ms)
        assert c.request_latency_ms == c.ttft_ms
        assert c.tokens_per_s_per_user == pytest.approx(1e3 / c.ttft_ms)
        assert c.meets_limits
    layouts = [c.layout for c in p.candidates]
    assert len(layouts) == len(set(layouts))  # one row per layout, not one per batch
    assert any("no TPOT" in n for n in p.notes) and any("disaggregated" in n for n in p.notes)
    assert p.dataset.agg_tpot_ms.isnull().all()
    with pytest.raises(ServingError, match="no TPOT to limit"):
        plan("Llama 3.1 8B", family="H100-SXM", gpus=2, isl=1024, osl=1, max_tpot_ms=50)


def test_main__serving_osl_1_prints_no_tpot_and_a_note(capsys):
    assert main([*SMALL, "--gpus", "2", "--osl", "1"]) == 0
    out = capsys.readouterr().out
    assert "note: osl 1: no decode step, so no TPOT" in out
    best = [ln for ln in out.splitlines() if ln.startswith("best agg:")]
    assert best and "TPOT" not in best[0] and "best disagg" not in out
    assert main([*SMALL, "--gpus", "2", "--osl", "1", "--format", "json"]) == 0
    cap = capsys.readouterr()
    rows = json.loads(cap.out)  # notes go to stderr, stdout is JSON only
    assert rows and all(r["tpot_ms"] is None for r in rows)
    assert all(r["request_latency_ms"] == r["ttft_ms"] for r in rows)
    assert "no TPOT" in cap.err


# --- a write that fails after the plan: the rows are not lost ------------------------------

def test_main__serving_failed_out_write_keeps_the_rows_on_stdout(monkeypatch, tmp_path, capsys):
    import errno

    import simcore.io

    def full_disk(path, data):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(simcore.io, "write_bytes_atomic", full_disk)
    assert main([*SMALL, "--gpus", "2", "--osl", "64", "--format", "csv", "--out",
                 "rows.csv"]) == 2
    cap = capsys.readouterr()
    line = _one_line(cap.err)
    assert line.startswith("simcore serving: error: the rows above are complete, but --out: "
                           "cannot write 'rows.csv' (No space left on device"), line
    assert cap.out.startswith("mode,layout,") and len(cap.out.splitlines()) > 1
    assert _files(tmp_path) == []


def test_main__serving_out_and_plot_through_a_symlink_refused(no_compute, tmp_path, capsys):
    (tmp_path / "real.png").write_bytes(b"old")
    (tmp_path / "link.png").symlink_to(tmp_path / "real.png")
    assert main([*SMALL, "--gpus", "2", "--out", "real.png", "--plot", "link.png"]) == 2
    line = _one_line(capsys.readouterr().err)
    assert "--out and --plot both name 'real.png'" in line
    assert (tmp_path / "real.png").read_bytes() == b"old"  # nothing written
