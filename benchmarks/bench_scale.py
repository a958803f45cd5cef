"""Scale benchmark (issue 5). Prints one JSON document.

    python benchmarks/bench_scale.py [--quick] [--no-distributed]

Figures:
* ``compile``: first-call time with a cold numba cache (a fresh NUMBA_CACHE_DIR, in a
  subprocess) and with the warm on-disk cache;
* ``coarse_full``: fused sweep of the coarse depth (729 hardware) × full space (30,720
  layouts) = 22.4M joint evaluations after warm-up: median wall of 5 (``first_wall_s``:
  the first, which also finds the dominated layouts), evals/s; ``coarse_full_unpruned``
  the same without pruning (``prune_dominated=False``) and ``pruning_speedup_coarse``;
* ``five_per_knob_full``: 5 values per knob (15,625 hardware) × full space = 480M joint
  evaluations, streamed in chunks: wall, evals/s, peak RSS (and unpruned);
* ``eight_per_knob_full``: 8 values per knob (262,144 hardware) × full space = 8.05G joint
  evaluations through ``evaluate_best``, in a fresh subprocess (its own peak RSS, which
  includes the imports and the loaded kernels, ``rss_before_sweep_mb``); targets 8 s and
  300 MB;
* evaluations count every layout of the space; the kernel visits only the valid,
  undominated ones (``visited_layouts``);
* ``reference``: the plain-python twin's evals/s on a uniform sample of the same space
  (same share of masked layouts), and the ratio;
Masked (invalid) layouts cost almost nothing; ``valid_evals_per_s`` counts only valid ones.
* ``kernel_per_core``: the fused kernel alone on one thread, over the coarse grid and the
  layouts the coarse × full sweep visits (``live``) or every valid one (``valid``):
  computed evaluations per second per core (visited layouts × hardware rows over the
  thread's CPU time, best of 11, so a busy machine's waits do not count), per metric;
* ``distributed``: the coarse × full sweep on a 2-worker LocalCluster.
Peak RSS is the process high-water mark (ru_maxrss), which covers everything before it.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time

MODEL = "Llama 3.1 70B"
S_KV = 131072


def rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


def first_call_seconds(cache_dir: str | None) -> float:
    code = (
        "import time; t=time.perf_counter();"
        "import simcore;"
        f"simcore.evaluate_best({MODEL!r}, simcore.Workload('decode', s_kv={S_KV}), space='full');"
        "print(time.perf_counter()-t)"
    )
    env = dict(os.environ)
    if cache_dir is not None:
        env["NUMBA_CACHE_DIR"] = cache_dir
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env,
                         check=True)
    return float(out.stdout.strip().splitlines()[-1])


def sweep(depth, repeat: int = 3, prune: bool = True) -> dict:
    import numpy as np

    import simcore
    from simcore import Workload
    from simcore.engine.evaluate import best_of_prepared, prepare
    from simcore.engine.space import depth_grid

    with simcore.set_options(prune_dominated=prune, prune_min_points=1):
        p = prepare(MODEL, Workload("decode", s_kv=S_KV), space="full",
                    hardware=depth_grid(depth))
        n = p.n_hw * p.space.size
        n_valid = p.n_hw * int(p.valid.sum())
        walls = []
        for _ in range(repeat):  # the first call also finds the dominated layouts
            t0 = time.perf_counter()
            ds = best_of_prepared(p)
            walls.append(time.perf_counter() - t0)
        live, pruned = p.live_layouts(prune=prune)
    return {"prune": prune, "n_hardware": p.n_hw, "n_layouts": p.space.size,
            "valid_layouts": int(p.valid.sum()), "visited_layouts": len(live),
            "pruned_layouts": len(pruned), "joint_evaluations": n,
            "valid_joint_evaluations": n_valid,
            "first_wall_s": round(walls[0], 4), "wall_s": round(float(np.median(walls)), 4),
            "evals_per_s": round(n / float(np.median(walls))),
            "valid_evals_per_s": round(n_valid / float(np.median(walls))),
            "n_fitting_hardware": int(ds.any_fits.sum()), "peak_rss_mb": round(rss_mb(), 1)}


def kernel_per_core(repeat: int = 11) -> dict:
    """The fused kernel on one thread: evaluations it computes per second of its CPU time."""
    import numba
    import numpy as np

    from simcore import Workload
    from simcore.engine.evaluate import prepare
    from simcore.engine.space import depth_grid
    from simcore.kernels import inference

    p = prepare(MODEL, Workload("decode", s_kv=S_KV), space="full", hardware=depth_grid("coarse"))
    hw = p.hw_rows(0, p.n_hw)
    live, _ = p.live_layouts(prune=True)
    tables = {"live": p.coeffs[live], "valid": p.coeffs[np.flatnonzero(p.valid)]}
    out: dict = {"n_hardware": p.n_hw, "threads": 1}
    before = numba.get_num_threads()
    numba.set_num_threads(1)
    try:
        for name, table in tables.items():
            for metric, code, sign in (("latency", 0, 1.0), ("throughput", 1, -1.0)):
                inference.fused_best(table, hw, p.eff, code, sign)
                cpu = []
                for _ in range(repeat):
                    t0 = time.thread_time()
                    inference.fused_best(table, hw, p.eff, code, sign)
                    cpu.append(time.thread_time() - t0)
                out[f"{name}_{metric}"] = {
                    "layouts": len(table), "cpu_s": round(min(cpu), 5),
                    "evals_per_s_per_core": round(p.n_hw * len(table) / min(cpu))}
    finally:
        numba.set_num_threads(before)
    return out


_EIGHT = """
import json, resource, time
t0 = time.perf_counter()
import simcore
from simcore.engine.space import depth_grid
rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
t1 = time.perf_counter()
ds = simcore.evaluate_best({model!r}, simcore.Workload("decode", s_kv={s_kv}), space="full",
                           hardware=depth_grid(8))
t2 = time.perf_counter()
print(json.dumps({{"n_hardware": int(ds.latency_ns.size), "n_layouts": ds.attrs["n_layouts"],
                  "joint_evaluations": int(ds.latency_ns.size) * ds.attrs["n_layouts"],
                  "wall_s": round(t2 - t1, 3), "import_s": round(t1 - t0, 3),
                  "n_fitting_hardware": int(ds.any_fits.sum()),
                  "rss_before_sweep_mb": round(rss, 1),
                  "peak_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
                                       / 1024, 1)}}))
"""


def eight_per_knob() -> dict:
    """8 values per knob × full space in a fresh interpreter (warm numba cache)."""
    code = _EIGHT.format(model=MODEL, s_kv=S_KV)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True)
    got = json.loads(out.stdout.strip().splitlines()[-1])
    got["evals_per_s"] = round(got["joint_evaluations"] / got["wall_s"])
    return got


def reference_rate(n_points: int = 3000) -> dict:
    import itertools

    from simcore.engine.space import full_space
    from simcore.kernels import inference_ref as ref
    from simcore.model.presets import get_family, get_model
    from simcore.model.specs import Efficiency, Workload

    model, wl, fam, eff = get_model(MODEL), Workload("decode", s_kv=S_KV), get_family("SiP"), Efficiency()
    sp = full_space()
    import random

    # a uniform sample of the full space, so the share of masked layouts matches the sweep
    everything = list(itertools.product(*sp.dict.values()))
    sample = random.Random(0).sample(everything, n_points)
    lays = [ref.Layout(**dict(zip(sp.dict, vals, strict=True))) for vals in sample]
    t0 = time.perf_counter()
    for lay in lays:
        ref.evaluate_point(model, wl, fam.hardware, fam.topology, eff, lay)
    wall = time.perf_counter() - t0
    return {"points": len(lays), "wall_s": round(wall, 4), "evals_per_s": round(len(lays) / wall)}


def distributed_run() -> dict:
    from distributed import Client

    from simcore import Workload
    from simcore.engine.distributed import distributed_best, local_cluster
    from simcore.engine.evaluate import prepare
    from simcore.engine.space import depth_grid

    p = prepare(MODEL, Workload("decode", s_kv=S_KV), space="full", hardware=depth_grid("coarse"))
    t0 = time.perf_counter()
    with local_cluster(n_workers=2) as cluster, Client(cluster) as client:
        start = time.perf_counter() - t0
        distributed_best(p, client=client)  # first run ships the inputs and loads the kernels
        t1 = time.perf_counter()
        distributed_best(p, client=client)
        wall = time.perf_counter() - t1
    n = p.n_hw * p.space.size
    return {"workers": 2, "cluster_start_s": round(start, 2), "wall_s": round(wall, 4),
            "evals_per_s": round(n / wall)}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="skip the 480M-evaluation sweep")
    ap.add_argument("--no-distributed", action="store_true")
    a = ap.parse_args(argv)
    out: dict = {"benchmark": "scale", "model": MODEL, "mode": "decode", "s_kv": S_KV,
                 "cores": os.cpu_count()}
    with tempfile.TemporaryDirectory() as cold:
        out["compile"] = {"cold_first_call_s": round(first_call_seconds(cold), 3)}
    out["compile"]["cached_first_call_s"] = round(first_call_seconds(None), 3)
    import simcore  # noqa: F401

    sweep("two_stage", repeat=1)  # warm-up in this process
    out["coarse_full"] = sweep("coarse", repeat=5)
    out["coarse_full_unpruned"] = sweep("coarse", repeat=5, prune=False)
    out["pruning_speedup_coarse"] = round(out["coarse_full_unpruned"]["wall_s"]
                                          / out["coarse_full"]["wall_s"], 2)
    if not a.quick:
        out["five_per_knob_full"] = sweep(5, repeat=1)
        out["five_per_knob_full_unpruned"] = sweep(5, repeat=1, prune=False)
        out["pruning_speedup_five_per_knob"] = round(
            out["five_per_knob_full_unpruned"]["wall_s"] / out["five_per_knob_full"]["wall_s"], 2)
        out["eight_per_knob_full"] = eight_per_knob()
    out["kernel_per_core"] = kernel_per_core()
    out["reference"] = reference_rate()
    out["speedup_vs_reference"] = round(out["coarse_full"]["evals_per_s"]
                                        / out["reference"]["evals_per_s"])
    if not a.no_distributed:
        out["distributed"] = distributed_run()
    out["peak_rss_mb"] = round(rss_mb(), 1)
    print(json.dumps(out, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
