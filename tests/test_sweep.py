"""Resume: a killed sweep restarts where it stopped and gives the same answer."""

import os
import signal
import subprocess
import sys
import textwrap
import time

import pytest
import xarray as xr

from simcore import Workload
from simcore.engine.evaluate import best_of_prepared, prepare
from simcore.engine.space import depth_grid
from simcore.engine.sweep import StoreMismatchError, resumable_best

SCRIPT = textwrap.dedent("""
    import sys
    from simcore import Workload
    from simcore.engine.evaluate import prepare
    from simcore.engine.space import depth_grid
    from simcore.engine.sweep import resumable_best
    p = prepare("Llama 3.1 70B", Workload("decode", s_kv=131072), space="full",
                hardware=depth_grid("coarse"))
    resumable_best(p, sys.argv[1], chunk_size=4)
""")


def _prepared():
    return prepare("Llama 3.1 70B", Workload("decode", s_kv=131072), space="full",
                   hardware=depth_grid("coarse"))


def _n_marked(store):
    marks = store / "marks"
    return sum(1 for m in marks.iterdir() if m.name.isdigit()) if marks.is_dir() else 0


def test_resumable_best__killed_subprocess_resumes(tmp_path):
    store = tmp_path / "sweep.zarr"
    proc = subprocess.Popen([sys.executable, "-c", SCRIPT, str(store)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    n_done = 0
    deadline = time.monotonic() + 120
    try:
        while time.monotonic() < deadline and proc.poll() is None:
            time.sleep(0.2)
            n_done = _n_marked(store)
            if n_done >= 10:
                break
    finally:
        if proc.poll() is None:
            os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
    assert proc.returncode == -signal.SIGKILL, proc.stderr.read().decode()[-2000:]
    before = _n_marked(store)
    assert (store / ".lock").exists()  # the killed run's lock: stale, taken over below
    total = -(-729 // 4)
    assert 10 <= before < total
    p = _prepared()
    resumed = resumable_best(p, store, chunk_size=4)
    assert resumed.attrs["chunks_reused"] == before
    assert not (store / ".lock").exists()
    assert resumed.attrs["chunks_computed"] == total - before
    clean = best_of_prepared(p)
    xr.testing.assert_equal(resumed.drop_attrs(), clean.drop_attrs())
    # a third run computes nothing
    again = resumable_best(p, store, chunk_size=4)
    assert again.attrs["chunks_computed"] == 0


def test_resumable_best__refuses_a_different_sweep(tmp_path):
    store = tmp_path / "s.zarr"
    p = prepare("Llama 3.1 8B", Workload("decode", s_kv=4096), hardware=depth_grid("balanced"))
    resumable_best(p, store, chunk_size=8)
    q = prepare("Llama 3.1 8B", Workload("decode", s_kv=8192), hardware=depth_grid("balanced"))
    with pytest.raises(StoreMismatchError, match="different sweep"):
        resumable_best(q, store, chunk_size=8)
    with pytest.raises(StoreMismatchError, match="different sweep"):
        resumable_best(p, store, chunk_size=4)
    # same values, spread over the knobs differently: a different sweep
    a = prepare("Llama 3.1 8B", Workload("decode", s_kv=4096),
                hardware={"bw_hbm_gbs": [4000.0, 8000.0], "bw_inter_gbs": [400.0]})
    b = prepare("Llama 3.1 8B", Workload("decode", s_kv=4096),
                hardware={"bw_hbm_gbs": [4000.0], "bw_inter_gbs": [8000.0, 400.0]})
    store2 = tmp_path / "s2.zarr"
    resumable_best(a, store2, chunk_size=1)
    with pytest.raises(StoreMismatchError, match="different sweep"):
        resumable_best(b, store2, chunk_size=1)
    junk = tmp_path / "junk.zarr"
    junk.write_text("not a store")
    with pytest.raises(StoreMismatchError, match="not a simcore sweep store"):
        resumable_best(p, junk, chunk_size=8)
