"""Hostile inputs, second audit (issue 37): each case has the right answer or one line.

Tables of command lines (argv, expected exit code, a substring of the one stderr line)
and of API calls (call, expected exception, a substring of its message). Every CLI case
asserts its exit code, exactly one line on stderr for a refusal, no traceback, and that
nothing already on disk is lost. Cases that could block (a FIFO) run under a timeout.
Helpers come from :mod:`tests.test_hostile`.
"""

from __future__ import annotations

import pytest
from test_hostile import _one_line

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
