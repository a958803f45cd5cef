"""Small queries: one configuration, a 512-point grid, the cold first call.

Prints JSON (one run, ratios from that run):

* ``predict_us_per_call`` — :func:`simcore.predict`, warm (the same arguments again),
  median of 7 repeats; ``predict_us_per_new_config`` — a configuration not asked before
  (its coefficient record built, its arguments checked);
* ``grid512`` — 512 configurations (8 batches × 64 layouts of Llama 2 7B on A100-80G),
  each priced in both phases llm-analysis ``inference()`` prices (the prefill of a
  2,048-token prompt and one decode step), four ways: a ``predict`` loop (warm: the same
  configurations again; ``uncached``: predict's caches emptied first), ``evaluate``
  (kernel + xarray, split), and the fused ``evaluate_best``; and, when llm-analysis is
  importable (``pip install .[bench]``), its ``inference()`` on the same 512
  configurations, with the ratios (without it ``llm_analysis`` says why not);
* ``cold_first_call_s`` — a fresh interpreter with an empty numba cache running
  ``simcore.predict`` once; ``cold_cli_evaluate_s`` — ``simcore evaluate`` with an empty
  cache; ``warm_cli_*_s`` — ``simcore --version`` and ``simcore evaluate`` with the cache
  warm (median of 3);
* ``korthikanti_8_rows_whole_process`` — the 8 Korthikanti et al. Table 5 training runs
  predicted by a fresh process from simcore's own inputs (``simcore.predict`` per run;
  median of 5), and by Calculon from its own inputs when
  ``CALCULON_DIR`` names a checkout of calculon-ai/calculon (not on PyPI), with the ratio.

Run: ``python benchmarks/bench_small.py [--no-cold]``. Figures move ±20% on a shared
machine; compare ratios from one run.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

MODEL = "Llama 2 7B"
BATCHES = (1, 2, 4, 8, 16, 32, 64, 128)
TPS = (1, 2, 4, 8)
PPS = (1, 2, 4, 8)
DPS = (1, 2, 4, 8)


def _best_of(fn, repeat: int = 7, number: int = 1) -> float:
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        for _ in range(number):
            fn()
        times.append((time.perf_counter() - t0) / number)
    return statistics.median(times)


def predict_rate() -> dict:
    import simcore
    from simcore import Workload

    wl = Workload("decode", s_kv=8192)
    simcore.predict("Llama 3.1 8B", wl, {"tp": 2}, family="H100-SXM")
    t = _best_of(lambda: simcore.predict("Llama 3.1 8B", wl, {"tp": 2}, family="H100-SXM"),
                 number=2000)
    # configurations never asked before (workloads built beforehand): each is checked and
    # builds its coefficient record
    fresh = iter([Workload("decode", s_kv=8192 + i) for i in range(1, 7 * 200 + 1)])

    def new_config() -> None:
        simcore.predict("Llama 3.1 8B", next(fresh), {"tp": 2}, family="H100-SXM")

    t_new = _best_of(new_config, number=200)
    return {"predict_us_per_call": round(t * 1e6, 2),
            "predict_us_per_new_config": round(t_new * 1e6, 2)}


def grid512() -> dict:
    """512 configurations, each priced as llm-analysis ``inference(seq_len=2048,
    num_tokens_to_generate=1)`` prices it: the prefill of a 2,048-token prompt and one
    decode step at that context (both phases, so simcore does the same work)."""
    import simcore
    from simcore import Workload
    from simcore.engine import single
    from simcore.engine.core import prepare
    from simcore.engine.evaluate import evaluate_best

    layouts = [{"tp": t, "pp": p, "dp": d} for t in TPS for p in PPS for d in DPS]
    phases = {b: (Workload("prefill", batch=b, s_kv=2048, s_q=2048),
                  Workload("decode", batch=b, s_kv=2048)) for b in BATCHES}
    # the same 64 layouts as the predict loop and llm-analysis: the other layout dims at
    # predict's defaults (a mapping alone overrides dims of the full space: 15,360 layouts)
    space = {"tp": TPS, "pp": PPS, "dp": DPS, "cp": (1,), "kv_shard_mode": ("head",),
             "ffn_shard_scope": ("TP",), "tp_placement": ("inner",),
             "cp_placement": ("inner",), "cp_ring_variant": ("qoml",), "ep": (1,)}

    def loop():
        for b in BATCHES:
            for lay in layouts:
                for wl in phases[b]:
                    simcore.predict(MODEL, wl, lay, family="A100-80G")

    def loop_uncached():  # as if never asked: predict's per-call and record caches emptied
        single._CALLS.clear()
        single._record.cache_clear()
        loop()

    def full():
        for b in BATCHES:
            for wl in phases[b]:
                simcore.evaluate(MODEL, wl, space=space, family="A100-80G")

    def kernel_only():
        for b in BATCHES:
            for wl in phases[b]:
                p = prepare(MODEL, wl, space=space, family="A100-80G")
                p.combine(p.hw_rows(0, 1))

    def fused():
        for b in BATCHES:
            for wl in phases[b]:
                evaluate_best(MODEL, wl, space=space, family="A100-80G")

    for f in (loop, full, kernel_only, fused):
        f()
    out = {"configs": len(BATCHES) * len(layouts), "phases": "prefill 2048 + 1 decode step",
           "predict_loop_s": _best_of(loop), "predict_loop_uncached_s": _best_of(loop_uncached),
           "evaluate_s": _best_of(full), "prepare_and_kernel_s": _best_of(kernel_only),
           "evaluate_best_s": _best_of(fused)}
    out["xarray_share_of_evaluate"] = round(1 - out["prepare_and_kernel_s"] / out["evaluate_s"], 3)
    peer = llm_analysis_grid()
    if peer is None:
        out["llm_analysis"] = "not importable: pip install .[bench] for the peer ratios"
    else:
        out["llm_analysis_s"] = peer
        for k in ("predict_loop_s", "predict_loop_uncached_s", "evaluate_s", "evaluate_best_s"):
            out[f"speedup_{k.removesuffix('_s')}_vs_llm_analysis"] = round(peer / out[k], 2)
    return {k: (round(v, 6) if isinstance(v, float) else v) for k, v in out.items()}


def llm_analysis_grid() -> float | None:
    """llm-analysis ``inference()`` (the prompt's prefill and ``num_tokens_to_generate``
    decode steps) over the same 512 configurations (None if not installed)."""
    try:
        from llm_analysis.analysis import LLMAnalysis
        from llm_analysis.config import (
            ParallelismConfig,
            get_dtype_config_by_name,
            get_gpu_config_by_name,
            get_model_config_by_name,
        )
    except Exception:  # not installed, or an incompatible version
        return None
    import logging

    logging.disable(logging.CRITICAL)
    model = get_model_config_by_name("NousResearch_Llama-2-7b-hf")
    gpu = get_gpu_config_by_name("a100-sxm-80gb")
    dtype = get_dtype_config_by_name("w16a16e16")

    def run():
        for b in BATCHES:
            for t in TPS:
                for p in PPS:
                    for d in DPS:
                        a = LLMAnalysis(model, gpu, dtype, ParallelismConfig(tp_size=t, pp_size=p,
                                                                             dp_size=d))
                        try:
                            a.inference(batch_size_per_gpu=max(1, b // d), seq_len=2048,
                                        num_tokens_to_generate=1)
                        except Exception:  # a layout llm-analysis refuses
                            pass

    run()
    return _best_of(run, repeat=3)


#: simcore's own inputs for the 8 runs, as Calculon's job reads its own (the four models of
#: Korthikanti et al. Table 3, the layouts and batches of the validation points
#: ``korthikanti-*``; ``tests/test_tooling.py`` checks the two give the same numbers)
_KORTHIKANTI_SIMCORE = """
import simcore
from simcore import Model, Workload
def gpt(name, layers, d, heads):
    return Model(name, n_layers=layers, d_model=d, n_heads=heads, n_kv_heads=heads, d_ff=4 * d,
                 vocab_size=51200, gated_ffn=False, tied_embeddings=True, attn_bias=True)
runs = [(gpt("Megatron GPT 22B", 48, 6144, 64), 1, 4, 4, 1),
        (gpt("Megatron GPT 175B", 96, 12288, 96), 8, 64, 1, 3),
        (gpt("Megatron GPT 530B", 105, 20480, 128), 35, 280, 1, 3),
        (gpt("Megatron GPT 1T", 128, 25600, 160), 64, 512, 1, 1)]
out = []
for model, pp, batch, micro, virtual in runs:
    for recompute, sp in (("full", False), ("selective", True)):
        wl = Workload("train", batch=batch, s_kv=2048, micro_batch=micro, recompute=recompute,
                      sequence_parallel=sp, virtual_stages=virtual, runtime="megatron-2021")
        r = simcore.predict(model, wl, {"tp": 8, "pp": pp, "dp": 1}, family="A100-80G")
        out.append(round(r.latency_ns / 1e9, 3))
print(out)
"""
#: Calculon's own inputs for the same 8 runs (its llm-validation Table 5)
_KORTHIKANTI_CALCULON = """
import logging, os, sys
import calculon
from calculon.llm import Llm
from calculon.system import System
base = sys.argv[1]
syst = System(calculon.io.read_json_file(os.path.join(base, "systems", "a100_80g.json")))
out = []
for model in ("megatron-22B", "gpt3-175B", "turing-530B", "megatron-1T"):
    for mode in ("full", "seqsel"):
        app = Llm.Application(calculon.read_json_file(os.path.join(base, "models", model + ".json")))
        exe = Llm.Execution.from_json(calculon.read_json_file(
            os.path.join(base, "validation", "seqsel", "tab5", model + "_" + mode + ".json")))
        mt = Llm(app, logging.getLogger())
        mt.compile(syst, exe)
        mt.run(syst)
        out.append(round(mt.get_stats_json(False)["total_time"], 3))
print(out)
"""


def korthikanti_job(repeat: int = 5) -> dict:
    """The 8 Korthikanti et al. Table 5 training runs (22B, 175B, 530B, 1T x full /
    selective recomputation) predicted by a fresh process, warm numba cache; and by
    Calculon (calculon-ai/calculon, not on PyPI: a checkout named by ``CALCULON_DIR``) from
    its own inputs for the same runs, interleaved."""
    jobs = {"simcore_s": ([sys.executable, "-c", _KORTHIKANTI_SIMCORE], None)}
    calculon = os.environ.get("CALCULON_DIR")
    if calculon:
        env = {**os.environ, "PYTHONPATH": calculon}
        jobs["calculon_s"] = ([sys.executable, "-c", _KORTHIKANTI_CALCULON, calculon], env)
    walls: dict[str, list[float]] = {k: [] for k in jobs}
    for i in range(repeat + 1):  # the first round warms the caches
        for name, (argv, env) in jobs.items():
            t0 = time.perf_counter()
            subprocess.run(argv, env=env, check=True, capture_output=True)
            if i:
                walls[name].append(time.perf_counter() - t0)
    out: dict = {k: round(statistics.median(v), 3) for k, v in walls.items()}
    if "calculon_s" in out:
        out["simcore_over_calculon"] = round(out["simcore_s"] / out["calculon_s"], 2)
    else:
        out["calculon"] = "set CALCULON_DIR to a calculon-ai/calculon checkout for its time"
    return out


def cold_and_cli() -> dict:
    env = dict(os.environ)
    out: dict = {}
    with tempfile.TemporaryDirectory() as cache:
        env_cold = {**env, "NUMBA_CACHE_DIR": cache}
        code = ("import simcore; simcore.predict('Llama 3.1 8B', "
                "simcore.Workload('decode', s_kv=8192), {'tp': 2})")
        t0 = time.perf_counter()
        subprocess.run([sys.executable, "-c", code], env=env_cold, check=True)
        out["cold_first_call_s"] = round(time.perf_counter() - t0, 2)
    with tempfile.TemporaryDirectory() as cache:  # the README's main job on a fresh install
        t0 = time.perf_counter()
        subprocess.run([sys.executable, "-m", "simcore", "evaluate"], check=True,
                       capture_output=True, env={**env, "NUMBA_CACHE_DIR": cache})
        out["cold_cli_evaluate_s"] = round(time.perf_counter() - t0, 2)
    for name, argv in (("warm_cli_version_s", ["--version"]),
                       ("warm_cli_evaluate_s", ["evaluate"])):
        subprocess.run([sys.executable, "-m", "simcore", *argv], env=env, check=True,
                       capture_output=True)
        t = _best_of(lambda argv=argv: subprocess.run([sys.executable, "-m", "simcore", *argv],
                                                      env=env, check=True, capture_output=True),
                     repeat=3)
        out[name] = round(t, 2)
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--no-cold", action="store_true", help="skip the subprocess timings")
    a = ap.parse_args(argv)
    out: dict = {"benchmark": "small", "cores": os.cpu_count(), **predict_rate(),
                 "grid512": grid512()}
    if not a.no_cold:
        out.update(cold_and_cli())
        out["korthikanti_8_rows_whole_process"] = korthikanti_job()
    print(json.dumps(out, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
