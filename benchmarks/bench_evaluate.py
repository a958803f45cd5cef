"""Benchmark: evaluate() on the full layout space × 64 hardware points. Prints JSON.

    python benchmarks/bench_evaluate.py [--model "Llama 3.1 70B"] [--repeat 3]

Figures: first-call time (JIT compile or cache load), evaluations/second of the full
tensor path, of the fused path, and peak RSS of the process.
"""

from __future__ import annotations

import argparse
import json
import resource
import sys
import time


def peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


def run(model: str = "Llama 3.1 70B", repeat: int = 3, s_kv: int = 131072) -> dict:
    t0 = time.perf_counter()
    import simcore
    from simcore.engine.space import depth_grid

    import_s = time.perf_counter() - t0
    wl = simcore.Workload("decode", s_kv=s_kv)
    grid = depth_grid("balanced")
    t0 = time.perf_counter()
    ds = simcore.evaluate(model, wl, space="full", hardware=grid)
    first_s = time.perf_counter() - t0
    n = int(ds.latency_ns.size)
    walls = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        ds = simcore.evaluate(model, wl, space="full", hardware=grid)
        walls.append(time.perf_counter() - t0)
    t0 = time.perf_counter()
    simcore.evaluate_best(model, wl, space="full", hardware=grid)
    fused_first = time.perf_counter() - t0
    fwalls = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        simcore.evaluate_best(model, wl, space="full", hardware=grid)
        fwalls.append(time.perf_counter() - t0)
    best = min(walls)
    return {
        "benchmark": "evaluate_full_space_x64hw",
        "model": model,
        "mode": "decode",
        "s_kv": s_kv,
        "n_hardware": int(ds.sizes["pe_hbm_gb"] * ds.sizes["bw_hbm_gbs"] * ds.sizes["peak_tflops_f16"]
                          * ds.sizes["bw_intra_gbs"] * ds.sizes["bw_inter_gbs"]
                          * ds.sizes["bw_intersip_gbs"]),
        "n_layouts": int(ds.valid.size),
        "evaluations": n,
        "import_s": round(import_s, 4),
        "first_call_s": round(first_s, 4),
        "wall_s": round(best, 4),
        "evals_per_s": round(n / best),
        "fused_first_call_s": round(fused_first, 4),
        "fused_wall_s": round(min(fwalls), 4),
        "fused_evals_per_s": round(n / min(fwalls)),
        "dataset_mb": round(ds.nbytes / 2**20, 1),
        "peak_rss_mb": round(peak_rss_mb(), 1),
    }


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--model", default="Llama 3.1 70B")
    p.add_argument("--repeat", type=int, default=3)
    a = p.parse_args(argv)
    print(json.dumps(run(a.model, a.repeat), indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
