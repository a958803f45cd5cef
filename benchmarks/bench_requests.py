"""Request-level serving simulation: a 10-minute trace at 20 req/s through 100 deployments.

Prints JSON (one run, ratios from that run):

* ``price_s`` — the engine's step-cost tables and KV capacity of every layout of Llama 3.1
  70B on up to 8 H200s (:func:`simcore.studies.serving.simulate.price_instances`);
* ``deployments`` — 100 candidate deployments (up to 30 disaggregated: the planner's
  shortlisted prefill and decode layouts paired, at the prefill:decode worker counts the
  rate needs and one more of each; the rest aggregated: the layouts with the most
  steady-state requests/s per GPU at 5 replica counts around the count the rate needs), each simulated
  on the same Poisson trace (``requests`` of ISL 4000 / OSL 1000 over 600 s):
  ``simulate_s`` serial and ``simulate_threads_s`` on 2 threads (the kernel releases the
  GIL), target < 60 s on 2 cores; ``deployments_per_s``, ``tokens_per_s`` (output tokens
  simulated per second of wall time), ``steps_per_s``;
* ``peak_rss_mb`` — the process's peak resident memory;
* ``twin`` — the plain-Python discrete-event twin on one replica's first 50 requests
  against the kernel on the same: both times and the ratio (and that their per-request
  times agree exactly).

Run: ``python benchmarks/bench_requests.py [--smoke]`` (``--smoke``: 20 s of traffic, 10
deployments; what the tests run). Figures move ±20% on a shared machine.
"""

from __future__ import annotations

import argparse
import json
import math
import resource
import sys
import time
from concurrent.futures import ThreadPoolExecutor

import numpy as np

MODEL, FAMILY = "Llama 3.1 70B", "H200"
RATE, ISL, OSL = 20.0, 4000, 1000
LIMITS = {"max_ttft_ms": 2000.0, "max_tpot_ms": 30.0}


def _deployments(req, insts, total: int, most_disagg: int) -> list[tuple]:
    """``total`` deployments: up to ``most_disagg`` disaggregated (each shortlisted prefill
    and decode layout paired, at the worker counts the rate needs and one more of each),
    the rest aggregated (layouts by steady-state requests/s per GPU, 5 replica counts
    around the count the rate needs)."""
    from simcore.studies.serving import rate

    short = rate._shortlist(req, insts)
    disagg = []
    for p in short["prefill"]:
        for d in short["decode"]:
            x0 = max(1, math.ceil(req.rate / rate._prefill_rps(req, p)))
            y0 = max(1, math.ceil(req.rate / rate._decode_rps(req, d)))
            disagg += [("disagg", p, x, d, y) for x, y in ((x0, y0), (x0 + 1, y0), (x0, y0 + 1))]
    disagg = disagg[:most_disagg]
    per_gpu = sorted(rate._distinct(insts), key=lambda i: -rate._agg_rps(req, i) / i.n_devices)
    agg = []
    for inst in per_gpu:
        r0 = max(1, math.ceil(req.rate / rate._agg_rps(req, inst)))
        agg += [("agg", inst, max(1, r0 + d)) for d in (-2, -1, 0, 1, 2)]
    return agg[:total - len(disagg)] + disagg


def _simulate(req, dep) -> dict:
    from simcore.studies.serving.simulate import kv_link, outcome, serve_agg, serve_disagg

    if dep[0] == "agg":
        _, inst, r = dep
        served = serve_agg(req.traffic, inst, r, req.sched)
    else:
        _, p, x, d, y = dep
        link = kv_link(req.family, req.hardware, x * p.n_devices + y * d.n_devices)
        served = serve_disagg(req.traffic, p, x, d, y, req.sched, link, req.model.n_layers)
    res = outcome(served, req.traffic, **LIMITS)
    res["steps"] = served.steps
    return res


def _twin_ratio(req, inst) -> dict:
    from simcore.engine.core import request_kernels
    from simcore.kernels import requests_ref

    t = req.traffic
    n = min(50, t.n)
    args = (t.arrival_s[:n] * 1e9, t.isl[:n], np.zeros(n, np.int64), t.osl[:n], inst.tables,
            req.sched.token_budget, req.sched.max_seqs, inst.kv_blocks, req.sched.block_size)
    kernel = request_kernels().simulate_instance
    kernel(*args)  # compiled
    t0 = time.perf_counter()
    got = kernel(*args)
    k_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    want = requests_ref.simulate_instance(*args)
    r_s = time.perf_counter() - t0
    same = all(np.array_equal(np.asarray(a), np.asarray(b))
               for a, b in zip(got[:4], want[:4], strict=True))
    return {"requests": n, "kernel_s": round(k_s, 4), "twin_s": round(r_s, 3),
            "twin_over_kernel": round(r_s / k_s, 1), "identical": same}


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--smoke", action="store_true", help="20 s of traffic, 10 deployments")
    args = ap.parse_args(argv)
    from simcore.studies.serving import rate
    from simcore.studies.serving.simulate import Scheduler

    duration, total, most_disagg = (20.0, 10, 3) if args.smoke else (600.0, 100, 30)
    req = rate._rate_request(
        MODEL, family=FAMILY, gpus="auto", rate_rps=RATE, trace=None, traffic=None,
        duration_s=duration, isl=ISL, osl=OSL, hardware=None, efficiency=None, dtype=None,
        scheduler=Scheduler(), modes=("agg", "disagg"), exact_gpus=False, top=5, seed=0, **LIMITS)
    t0 = time.perf_counter()
    insts = rate._instances(req)
    price_s = time.perf_counter() - t0
    deps = _deployments(req, insts, total, most_disagg)
    _simulate(req, deps[0])  # compile outside the timing
    t0 = time.perf_counter()
    results = [_simulate(req, d) for d in deps]
    serial_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    with ThreadPoolExecutor(2) as pool:
        threaded = list(pool.map(lambda d: _simulate(req, d), deps))
    threads_s = time.perf_counter() - t0
    assert [r["ttft_p99_ms"] for r in threaded] == [r["ttft_p99_ms"] for r in results]
    tokens = int(req.traffic.osl.sum()) * len(deps)
    steps = sum(r["steps"] for r in results)
    out = {
        "model": MODEL, "family": FAMILY, "rate_rps": RATE, "duration_s": duration,
        "requests": req.traffic.n, "isl": ISL, "osl": OSL, "layouts": len(insts),
        "price_s": round(price_s, 2),
        "deployments": len(deps),
        "agg_deployments": sum(d[0] == "agg" for d in deps),
        "simulate_s": round(serial_s, 2), "simulate_threads_s": round(threads_s, 2),
        "target_s": 60.0,
        "deployments_per_s": round(len(deps) / serial_s, 2),
        "tokens_per_s": round(tokens / serial_s),
        "steps_per_s": round(steps / serial_s),
        "meeting_limits": sum(r["meets_limits"] for r in results),
        "peak_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
        "twin": _twin_ratio(req, deps[0][1]),
    }
    json.dump(out, sys.stdout, indent=2)
    sys.stdout.write("\n")
    return out


if __name__ == "__main__":
    main()
