"""The request simulator against published serving percentiles, held out (never fitted).

``serving_percentiles.json`` holds vLLM ``benchmark_serving.py`` result files of
LambdaLabsML/vllm-benchmark (repository, path and commit per point): Meta-Llama-3-8B-Instruct
in bf16 at tensor parallel 1 on one H100-SXM or one A100-80G, ShareGPT prompts, every
request sent at t = 0 (``request_rate inf``), ``num_prompts`` of them. A file lists each
request's input and output length, so the simulation replays exactly those requests
(:func:`serving_rows`) through one aggregated instance of the ``TP1`` layout
(:func:`~simcore.studies.serving.simulate.price_instances`,
:func:`~simcore.studies.serving.simulate.serve_agg`) and reports the median and p99 TTFT
and TPOT beside the measured ones. ``simcore validate`` prints them as their own held-out
section; nothing here is fitted.

The server was vLLM v0.6.0 with multi-step scheduling, ``--num-scheduler-steps 10`` (not
v0.5.4, as this module first read it): the files themselves show it. Every request's first
streamed chunk holds one token and every later one ten (``1 + 10·(len(itls) - 1) <
output_len <= 1 + 10·len(itls)`` for every request; the H100 N=10 file's output 120 has
12 gaps of ~73 ms, ten decode steps of ~7.3 ms each); the runs are dated 2024-09-07/08,
two days after v0.6.0's release; the repository's later README sets ``vLLM_BUILD="v0.6.0"``
with ``NUM_SCHEDULER_STEPS=10`` and its benchmark_v0.md credits "the multi-step
scheduling feature (num-scheduler-steps=10)" and notes that ITL is "inflated by the
num-scheduler-steps". So the replay prices the steps with the ``vllm-0.6`` runtime
(:data:`SERVER_RUNTIME`) and schedules as v0.6.0's engine (vllm @32e7db25, the v0.6.0
tag) does: decodes in blocks of :data:`SERVER_MULTI_STEP` steps, the scheduler (admission,
retirement) running only at a block's end and the block's tokens streamed then; prompts
in single steps; asynchronous output processing (its default), so a prompt step's first
tokens reach the client when the next step ends.

Like for like with the measurement (vLLM's ``benchmark_serving.py`` of that time): a
request's TPOT is ``(latency - TTFT) / (output_len - 1)`` for output lengths above 1, the
percentiles are numpy's (linear interpolation), and a request the file lists with 0
output tokens counts with TTFT 0 (as the benchmark recorded it) and no TPOT; it is
served as a one-token request (its prompt still loads the server). The scheduler is
simcore's (:class:`~simcore.studies.serving.simulate.Scheduler`) with the server's
launch flags (the repository's ``benchmark.py`` at 29dd18a: ``--max-num-seqs 1024``,
``--gpu-memory-utilization 0.95``; neither binds with at most 160 requests), a token
budget of ``max(max_model_len, 2048)`` = 2048 (vLLM's default ``max_num_batched_tokens``
without chunked prefill), vLLM V0's prefill-first policy (:data:`SERVER_POLICY`:
waiting prompts run whole in steps of their own, before any decode) and the multi-step
blocks and output processing above. Not modelled: the server's per-request API work
(HTTP, tokenising, detokenising) and the host time of a scheduler call.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

import numpy as np

__all__ = ["ServingRow", "load_serving_points", "serving_rows", "serving_summary"]

_JSON = Path(__file__).with_name("serving_percentiles.json")
#: the servers' scheduling (the software stack's setting, not fitted): vLLM 0.5 / 0.6's V0
#: scheduler without chunked prefill (its default below 32K contexts) runs waiting prompts
#: whole in steps of their own before any decode
SERVER_POLICY = "prefill_first"
#: the servers' stack: vLLM v0.6.0 (:mod:`simcore.model.runtime`'s ``vllm-0.6``)
SERVER_RUNTIME = "vllm-0.6"
#: ``--num-scheduler-steps 10``: decodes in blocks of 10 steps, streamed at each block's end
SERVER_MULTI_STEP = 10
#: the metrics compared, (key in the file, label)
METRICS: tuple[tuple[str, str], ...] = (("median_ttft_ms", "p50 TTFT"),
                                        ("p99_ttft_ms", "p99 TTFT"),
                                        ("median_tpot_ms", "p50 TPOT"),
                                        ("p99_tpot_ms", "p99 TPOT"))


@lru_cache(maxsize=1)
def load_serving_points() -> tuple[dict[str, Any], ...]:
    """The points of ``serving_percentiles.json`` (each a dict, as transcribed)."""
    return tuple(json.loads(_JSON.read_text(encoding="utf-8"))["points"])


@dataclass(frozen=True)
class ServingRow:
    """One point: ``measured`` and ``predicted`` (ms) per :data:`METRICS` key, the
    signed relative ``error`` (predicted / measured - 1) of each."""

    id: str
    family: str
    n_requests: int
    measured: dict[str, float]
    predicted: dict[str, float]
    source: str

    @property
    def error(self) -> dict[str, float]:
        return {k: self.predicted[k] / self.measured[k] - 1.0 for k in self.measured}


def _instance(model: str, family: str, max_len: int, sched: Any, efficiency: Any = None) -> Any:
    from ..model.presets import get_family, load_model
    from ..studies.serving.simulate import price_instances

    fam = get_family(family)
    insts = price_instances(load_model(model), family=fam, hardware=fam.hardware,
                            efficiency=efficiency, dtype="", max_devices=1, max_tokens=max_len,
                            scheduler=sched, runtime=SERVER_RUNTIME)
    return next(i for i in insts if i.label == "TP1")


def _predict(p: dict[str, Any], efficiency: Any = None) -> dict[str, float]:
    from ..studies.serving.simulate import Scheduler, serve_agg
    from ..studies.serving.traffic import Traffic

    sched = Scheduler(token_budget=max(int(p["max_model_len"]), 2048), max_seqs=1024,
                      kv_usable_fraction=0.95, policy=SERVER_POLICY,
                      multi_step=SERVER_MULTI_STEP, async_output=True)
    isl = np.asarray(p["input_lens"], dtype=np.int64)
    out = np.asarray(p["output_lens"], dtype=np.int64)
    osl = np.maximum(out, 1)
    traffic = Traffic(arrival_s=np.zeros(isl.size), isl=isl, osl=osl,
                      duration_s=float(p["duration_s"]), source=p["id"])
    inst = _instance(p["model"], p["family"], int((isl + osl).max()) + 1, sched, efficiency)
    served = serve_agg(traffic, inst, 1, sched)
    ttft = np.where(out > 0, served.ttft_ns, 0.0) / 1e6  # the benchmark's 0 for no output
    tpot = served.tpot_ns[out > 1] / 1e6
    return {"median_ttft_ms": float(np.median(ttft)),
            "p99_ttft_ms": float(np.percentile(ttft, 99)),
            "median_tpot_ms": float(np.median(tpot)),
            "p99_tpot_ms": float(np.percentile(tpot, 99))}


def serving_rows(efficiency: Any = None) -> list[ServingRow]:
    """Every point of the file, simulated (``efficiency``: the factors; None = the fitted
    defaults)."""
    rows = []
    for p in load_serving_points():
        src = p["source"]
        rows.append(ServingRow(
            id=p["id"], family=p["family"], n_requests=int(p["num_prompts"]),
            measured={k: float(p[k]) for k, _ in METRICS}, predicted=_predict(p, efficiency),
            source=f"{src['repo']} {src['path']} @ {src['commit'][:12]}"))
    return rows


def serving_summary(rows: list[ServingRow]) -> dict[str, Any]:
    """Mean |error| per metric, and how many points have p99 TTFT and p99 TPOT both
    within 15% (issue 35's target)."""
    per = {k: float(np.mean([abs(r.error[k]) for r in rows])) for k, _ in METRICS}
    within = sum(abs(r.error["p99_ttft_ms"]) <= 0.15 and abs(r.error["p99_tpot_ms"]) <= 0.15
                 for r in rows)
    return {"n": len(rows), "per_metric": per, "p99_within_15": within}
