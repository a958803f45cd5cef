"""Held-out public inference measurements, read from ``inference_measurements.json``.

``inference_measurements.json`` (and its ``.md``) transcribe 106 published inference
results with their citations. This module turns the ones simcore can reproduce with a
single workload into :class:`~simcore.validation.points.Measurement` objects
(:data:`INFER_MEASUREMENTS`); each point keeps its source's citation (``source``), the
table row it was read from and the JSON id (``notes``).

What is used
------------
* **TTFT** (``ttft_ms``) of static runs (TensorRT-LLM v0.5/v0.9 performance tables, the
  H100-vs-A100 blog, lmdeploy's static benchmark): a ``prefill`` of ``batch`` prompts of
  ``isl`` tokens.
* **TPOT** (``tpot_ms``): one ``decode`` step at ``batch`` sequences and the mean context
  ``isl + osl/2`` (lmdeploy static runs). Served runs (aiconfigurator's silicon CSV, at a
  fixed client concurrency) are the steady-state steps of :meth:`Workload.served_steps`: the
  running batch is the concurrency, and about ``concurrency·isl/osl`` prompt tokens of
  newly admitted requests arrive per step, each prompt run whole with the decode batch in
  a share of the steps (in-flight batching).
* **Output throughput** (``output_tokens_per_s``, whole system) of static runs:
  ``batch x osl`` over the whole run (TensorRT-LLM's ``out_tps``), reproduced as a
  :class:`~simcore.validation.points.Measurement` with ``steps`` (:func:`_whole_run`): one
  context phase for the batch's prompts, then ``osl - 1`` decode steps over the growing
  context, summed by Simpson's rule.

Precision (``weight_dtype``, ``act_dtype``, ``kv_dtype``) comes from each point's workload;
an unstated KV dtype is taken as 16-bit. How the steps run comes from the runtime the point
(or its source) names in the JSON (``"runtime"``, :data:`simcore.model.runtime.RUNTIMES`):
TensorRT-LLM 0.5-0.9's gptSessionBenchmark (``trtllm-0.9``: no CUDA graphs), TensorRT-LLM
1.x, SGLang and vLLM behind aiconfigurator (``trtllm``, ``sglang``, ``vllm``: CUDA graphs in
decode), vLLM 0.6 (``vllm-0.6``: graphs up to 8192 tokens of context), lmdeploy's TurboMind
(``lmdeploy-0.1``); no point sets a switch of its own.

Skipped, with the reason
------------------------
* ``already_in_simcore`` points (TensorRT-LLM v0.5 A100 TTFT at 2048, lmdeploy batch-1
  rows, kipply's FasterTransformer): they are in :mod:`simcore.validation.data`.
* **vLLM whole runs** (the Qwen2.5 speed benchmark, :data:`_VLLM_RUNTIMES`): its speed is
  ``osl`` / the wall time of one ``generate()`` call at batch 1, prefill included, so each
  row is a :class:`~simcore.validation.points.Measurement` with ``steps``: the prompt's
  prefill (512-token chunks when vLLM 0.6 turns chunked prefill on for contexts over
  32K) and the ``osl - 1`` decode steps over the growing context (CUDA graphs up to
  8192 tokens of context), summed by Simpson's rule; see :func:`_whole_run`.
* Offline / max-throughput runs whose batch the scheduler chose (TensorRT-LLM
  perf-overview v1.0, Qwen2-57B throughput, MLPerf v4.1): no batch to simulate.
* aiconfigurator TTFT rows: served at a fixed concurrency, so TTFT includes queueing
  behind other requests' prefills.
* Models simcore does not describe: DeepSeek-R1 (MLA, shared experts, dense first layers),
  Qwen2-57B-A14B (shared expert), Llama 4 Maverick (no architecture transcribed).
  (Qwen3-235B-A22B at TP8 EP8 on H100 is used: the experts split over the 8 TP ranks.)
* LMSYS' 96xH100 DeepSeek run: node split and EP degrees not transcribed.
* ``excluded`` points, where the source contradicts itself on a setting the run needs (an
  independent audit against the sources, 2026-12-03): TensorRT-LLM v0.9's Falcon-180B
  batch-1024 throughput (its own reproduction command runs batch 96) and its H100 / H200
  Mixtral rows (headed FP8, but 0.9.0 had no FP8 Mixtral export, NVIDIA/TensorRT-LLM PR
  #1734 / issue #1229, while one of them is faster than 16-bit weights can be read),
  throughput rows included; and its A100 Mixtral batch-32 2048/2048 throughput, whose
  mean step (20.0 ms, prefill included) is shorter than reading the 46.7 GB of 16-bit
  weights per GPU takes at the A100's full bandwidth (22.9 ms); lmdeploy's Llama 2 7B
  batch-64 128/2048 TPOT (the batch's 16-bit KV cache at full length and the weights,
  86.5 GB, exceed the A100's 85.9 GB: it cannot have stayed resident);
  ``excluded_metrics``: lmdeploy's TTFT at batch > 1, a mean over client threads of each
  request's first token, not one batched prefill.
* ``superseded`` points, where a later version of the same document measures the same
  configuration: TensorRT-LLM v0.5's H100 Falcon-180B TP8 TTFT at 2048 tokens (205 ms;
  129.9 ms in the v0.9.0 table, which is used).
"""

from __future__ import annotations

import json
import math
import numbers
import os
from functools import lru_cache
from typing import Any

from ..model import presets
from ..model.runtime import RUNTIMES, get_runtime
from ..model.specs import Model, Workload
from .points import Measurement

__all__ = ["INFER_MEASUREMENTS", "INFER_SOURCES", "load_infer_measurements", "whole_run"]

_PATH = os.path.join(os.path.dirname(__file__), "inference_measurements.json")

#: Short labels per source id (tables group by these).
INFER_SOURCES: dict[str, str] = {
    "trtllm_perf_v090": "TRT-LLM v0.9 perf",
    "trtllm_perf_v061": "TRT-LLM v0.5/0.6 perf",
    "trtllm_blog_h200launch": "TRT-LLM H200 blog",
    "trtllm_blog_falcon180b_h200": "TRT-LLM Falcon/H200 blog",
    "trtllm_blog_h100vsa100": "TRT-LLM H100vsA100 blog",
    "aiconfigurator_silicon": "aiconfigurator silicon",
    "qwen25_speed": "Qwen2.5 speed",
    "lmdeploy_a100": "lmdeploy A100",
}

#: Runtimes whose whole runs are one vLLM 0.6 ``generate()`` call, prompts chunked above
#: 32K tokens (the other static throughput rows are TensorRT-LLM static batches), see
#: :func:`_whole_run`.
_VLLM_RUNTIMES = frozenset({"vllm-0.6"})

#: vLLM captures CUDA graphs for decode steps up to this context and runs longer ones
#: eagerly (the ``vllm-0.6`` runtime's ``graph_max_ctx``, :mod:`simcore.model.runtime`);
#: :func:`whole_run` applies it to an explicit ``cuda_graphs=True`` with ``vllm=True``.
_VLLM_GRAPH_MAX_CTX = RUNTIMES["vllm-0.6"].graph_max_ctx
#: vLLM 0.6 turns chunked prefill on by itself when ``max_model_len`` exceeds 32K tokens
#: (vllm/engine/arg_utils.py @001999d2f360c2c5da23a916510c273b1a73d06c, ``use_long_context``)
#: and then schedules at most 512 prompt tokens per step (SchedulerConfig's default
#: ``max_num_batched_tokens`` under chunked prefill in vLLM 0.5/0.6; 2048 from 0.7,
#: vllm/config.py @0004438383ee731a6e44708609d175c48528a8d0).
_VLLM_LONG_CONTEXT = 32768
_VLLM_CHUNK = 512

_DTYPES = {"bf16": "bf16", "fp16": "fp16", "fp8": "fp8", "int8": "int8", "int4": "int4"}


def _dtype(v: str | None) -> str:
    if not v:
        return ""
    return _DTYPES.get(str(v).split()[0].lower(), "")


def _model(spec: dict) -> Model | None:
    a = spec["architecture"]
    if "n_layers" not in a or "n_shared_experts" in a or "shared_expert_intermediate_size" in a:
        return None
    if "attention" in a:  # MLA
        return None
    n_exp = int(a.get("n_experts", 1))
    d_ff = a.get("d_ff", a.get("d_ff_expert", a.get("moe_intermediate_size")))
    gated = "gelu" not in str(a.get("ffn", ""))
    name = spec["name"]
    return Model(name, n_layers=a["n_layers"], d_model=a["d_model"], n_heads=a["n_heads"],
                 n_kv_heads=a.get("n_kv_heads", a["n_heads"]), d_ff=int(d_ff),
                 vocab_size=a["vocab_size"], gated_ffn=gated, n_experts=n_exp,
                 top_k=int(a.get("top_k", 1)), head_dim=int(a.get("head_dim", 0)),
                 attn_bias=name.startswith("Qwen2"),
                 n_norms_per_layer=int(a.get("n_norms_per_layer", 2)))


def _value(p: dict, metric: str) -> float | None:
    """The point's measured ``metric``, None if absent or excluded (``excluded_metrics``)."""
    if metric in (p.get("excluded_metrics") or {}):
        return None
    for m in p["measured"]:
        if m["metric"] == metric:
            return float(m["value"])
    return None


#: Simpson panels per summed range: enough nodes that a kink (a step that turns from
#: host-bound to device-bound as the context grows) costs < ~0.5%.
_SIMPSON_PANELS = 8


def _simpson(first: int, last: int, count: float) -> list[tuple[int, float]]:
    """(position, weight) pairs whose weighted sum approximates the sum of a per-step cost
    over ``count`` evenly spaced steps from ``first`` to ``last``: every step when there
    are few, else composite Simpson's rule on :data:`_SIMPSON_PANELS` panels. A node that
    falls between two steps splits its weight over both (linearly), so a cost linear in
    position is summed exactly and a curved or kinked one closely."""
    if count <= 1 or first == last:
        return [(first, float(count))]
    n = 2 * _SIMPSON_PANELS
    if count <= n + 1:  # few steps: each one, equal weight
        k = int(round(count))
        pos = [first + (last - first) * i / (k - 1) for i in range(k)]
        wts = [count / k] * k
    else:
        pos = [first + (last - first) * i / n for i in range(n + 1)]
        wts = [(1.0 if i in (0, n) else (4.0 if i % 2 else 2.0)) * count / (3.0 * n)
               for i in range(n + 1)]
    out: dict[int, float] = {}
    for x, w in zip(pos, wts, strict=True):
        lo = math.floor(x)
        frac = x - lo
        out[lo] = out.get(lo, 0.0) + w * (1.0 - frac)
        if frac > 0.0:
            out[lo + 1] = out.get(lo + 1, 0.0) + w * frac
    return [(p, w) for p, w in sorted(out.items()) if w > 0.0]


def _whole_run(batch: int, isl: int, osl: int, dt: dict[str, Any], *, vllm: bool = True
               ) -> tuple[Workload, tuple[tuple[Workload, float], ...], str]:
    """A whole generation of ``osl`` tokens after ``batch`` prompts of ``isl`` tokens, as
    steps: the prompts' prefill, which yields the first output token, then ``osl - 1``
    decode steps at contexts ``isl + 1`` … ``isl + osl - 1``, summed by Simpson's rule.
    ``vllm``: one vLLM ``generate()`` (the prefill in 512-token chunks, each attending to
    the chunks before it, when vLLM's long-context default turns chunked prefill on; CUDA
    graphs only up to vLLM's capture limit); otherwise a static batch as TensorRT-LLM's
    ``gptSessionBenchmark`` runs it (one context phase for the whole batch). Every step
    runs as ``dt``'s ``runtime`` profile says (CUDA graphs in decode, up to its capture
    limit), or as an explicit ``cuda_graphs`` says. Returns (the last decode step, the
    steps, a note)."""
    pre = dict(dt, cuda_graphs=False) if "cuda_graphs" in dt else dict(dt)
    steps: list[tuple[Workload, float]] = []
    # the benchmark's rows set max_model_len to the smallest of 32768 / 65536 / 131072
    # that holds isl + osl (its setting notes), so isl + osl > 32K is vLLM's long context
    chunked = vllm and isl + osl > _VLLM_LONG_CONTEXT and isl > _VLLM_CHUNK
    if chunked:
        n, rest = divmod(isl, _VLLM_CHUNK)  # n full chunks, then the remainder
        for j, c in _simpson(0, n - 1, n):
            ctx = (j + 1) * _VLLM_CHUNK
            steps.append((Workload("prefill", batch=batch, s_q=_VLLM_CHUNK, s_kv=ctx, **pre),
                          c))
        if rest:
            steps.append((Workload("prefill", batch=batch, s_q=rest, s_kv=isl, **pre), 1.0))
    else:
        steps.append((Workload("prefill", batch=batch, s_kv=isl, **pre), 1.0))
    last = None
    for ctx, c in _simpson(isl + 1, isl + osl - 1, osl - 1):
        if "cuda_graphs" in dt:  # explicit: vLLM's capture limit applies by ``vllm``
            graphs = bool(dt["cuda_graphs"]) and (not vllm or ctx <= _VLLM_GRAPH_MAX_CTX)
            last = Workload("decode", batch=batch, s_kv=ctx, **dict(dt, cuda_graphs=graphs))
        else:  # the runtime's profile decides, its capture limit included
            last = Workload("decode", batch=batch, s_kv=ctx, **dt)
        steps.append((last, c))
    assert last is not None
    note = (f"whole run: prefill of {batch} x {isl} tokens"
            + (f" in {_VLLM_CHUNK}-token chunks (vLLM chunked prefill)" if chunked else "")
            + f", then {osl - 1} decode steps (Simpson's rule over context); "
            f"system output tok/s = batch x {osl} / run time")
    return last, tuple(steps), note


#: The Workload settings every step of a whole run shares (:func:`whole_run`).
_WHOLE_RUN_SETTINGS = ("weight_dtype", "act_dtype", "kv_dtype", "cuda_graphs", "runtime")


def whole_run(batch: int, isl: int, osl: int, *, vllm: bool = False, **workload: Any
              ) -> tuple[Workload, tuple[tuple[Workload, float], ...]]:
    """The steps of a whole generation run, for a :class:`Measurement` of your own.

    ``batch`` prompts of ``isl`` tokens, ``osl`` output tokens each: one context phase
    (as TensorRT-LLM's static batches run it; ``vllm=True``: as vLLM 0.6's ``generate()``
    runs it, chunked above 32K tokens, CUDA graphs only up to 8K of context), then
    ``osl - 1`` decode steps over the growing context, summed by Simpson's rule.
    ``workload`` holds the :class:`~simcore.model.specs.Workload` settings every step shares
    (``weight_dtype``, ``act_dtype``, ``kv_dtype``, ``cuda_graphs``, ``runtime``: a
    runtime profile's CUDA graphs and capture limit, which an explicit ``cuda_graphs``
    overrides). Returns (the
    last decode step, the ``steps``): pass them as ``workload`` and ``steps`` of a
    ``Measurement`` with ``generated=osl``.

    Examples
    --------
    >>> import simcore
    >>> from simcore.validation import Measurement, predict, whole_run
    >>> last, steps = whole_run(32, 1024, 256, weight_dtype="fp8", act_dtype="fp8")
    >>> m = Measurement("my-run", "decode", simcore.get_model("Llama 3.1 8B"),
    ...                 simcore.get_family("H100-SXM"), {"tp": 1}, last, "output_tokens_per_s",
    ...                 4000.0, "tok/s", "my cluster, 2026-12-04", steps=steps, generated=256)
    >>> 1000 < predict(m) < 20000   # output tokens/s of the whole run
    True
    """
    sizes: dict[str, int] = {}
    for name, v in (("batch", batch), ("isl", isl), ("osl", osl)):
        least = 2 if name == "osl" else 1
        if isinstance(v, bool) or not isinstance(v, numbers.Integral) or v < least:
            raise ValueError(f"whole_run: {name} must be a whole number >= {least}, got {v!r}")
        sizes[name] = int(v)
    if not isinstance(vllm, bool):
        raise ValueError(f"whole_run: vllm must be True or False, got {vllm!r}")
    if {"mode", "batch", "s_kv", "s_q"} & set(workload):
        raise ValueError("whole_run: the steps set mode, batch, s_q and s_kv themselves; pass "
                         f"only the settings they share, some of {list(_WHOLE_RUN_SETTINGS)}")
    other = sorted(set(workload) - set(_WHOLE_RUN_SETTINGS))
    if other:
        raise ValueError(f"whole_run: {other} do not apply to every step of an inference run; "
                         f"pass only some of {list(_WHOLE_RUN_SETTINGS)}")
    dt = dict(workload)
    last, steps, _ = _whole_run(sizes["batch"], sizes["isl"], sizes["osl"], dt, vllm=vllm)
    return last, steps


def _runtime(p: dict, source: dict) -> dict[str, Any]:
    """The point's runtime (its own ``runtime`` key, else its source's) as Workload
    keywords; a ``cuda_graphs`` the row states against its runtime's profile stays an
    explicit override (none does today)."""
    name = p.get("runtime") or source.get("runtime")
    if not name:
        raise ValueError(f"{p['id']}: no runtime named by the point or its source "
                         "(inference_measurements.json)")
    rt = get_runtime(name)
    stated = p["workload"].get("cuda_graphs")
    if stated is not None and bool(stated) != rt.cuda_graphs:
        return {"runtime": name, "cuda_graphs": bool(stated)}
    return {"runtime": name}


def served_steps(concurrency: int, isl: int, osl: int, dt: dict[str, Any]
                 ) -> tuple[tuple[tuple[Workload, float], ...], str]:
    """A served row's steady-state steps (:meth:`Workload.served_steps`: whole prompts
    admitted with the decode batch in a share of the steps) and the note saying so."""
    steps = Workload.served_steps(concurrency=concurrency, isl=isl, osl=osl, **dt)
    if len(steps) == 1:
        return steps, (f"; served: running batch = the client concurrency, plus "
                       f"{steps[0][0].prefill_tokens} prompt tokens of admitted requests "
                       "every step")
    share = steps[1][1]
    return steps, (f"; served: running batch = the client concurrency; {100 * share:.3g}% of "
                   f"the steps also run a whole {steps[1][0].prefill_tokens}-token prompt of "
                   "an admitted request")


def kv_dtype_for(stated: str | None, runtime: str | None, source: dict[str, Any]) -> str:
    """A run's KV-cache dtype: the one ``stated``, else, on the TensorRT-LLM runtime, the one
    its source states the runs used (``kv_dtype_trtllm``, cited in the source's
    ``kv_dtype_trtllm_source``: aiconfigurator's generator wrote FP8), else the model's."""
    if not stated and (runtime or source.get("runtime")) == "trtllm":
        stated = source.get("kv_dtype_trtllm")
    return _dtype(stated)


def _kv_dtype(p: dict[str, Any], source: dict[str, Any]) -> str:
    """A JSON point's KV-cache dtype (:func:`kv_dtype_for` of its workload and runtime)."""
    return kv_dtype_for(p["workload"].get("kv_dtype"), p.get("runtime"), source)


def step_settings(p: dict[str, Any], source: dict[str, Any]) -> dict[str, Any]:
    """A JSON point's Workload keywords for its steps: weight / activation / KV dtypes (FP8
    or INT8 weights with no activation dtype stated run FP8 / INT8 GEMMs) and its runtime."""
    w = p["workload"]
    dt: dict[str, Any] = dict(weight_dtype=_dtype(w.get("weight_dtype")),
                              act_dtype=_dtype(w.get("act_dtype")), kv_dtype=_kv_dtype(p, source),
                              **_runtime(p, source))
    if dt["act_dtype"] == "" and dt["weight_dtype"] in ("fp8", "int8"):
        dt["act_dtype"] = dt["weight_dtype"]
    return dt


def _convert(p: dict, sources: dict) -> tuple[list[Measurement], str]:
    if p.get("already_in_simcore"):
        return [], "already in simcore.validation.data"
    if p.get("excluded"):  # the source contradicts itself on a setting the run needs
        return [], "excluded: " + p["excluded"]
    if p.get("superseded"):  # a later table of the same source measures the same run
        return [], "superseded: " + p["superseded"]
    model = _model(p["model"])
    if model is None:
        return [], "model architecture not described by simcore (MLA / shared experts)"
    if p["source"] not in INFER_SOURCES:
        return [], "source not reproducible (offline scheduler-chosen batch or headline only)"
    lay = p["layout"]
    w = p["workload"]
    if not w.get("batch"):
        return [], "batch not stated"
    tp, pp, dp = int(lay.get("tp") or 1), int(lay.get("pp") or 1), int(lay.get("dp") or 1)
    ep = int(lay.get("ep") or 1)
    layout = (("tp", tp), ("pp", pp), ("dp", dp), ("ep", ep))
    family = presets.HARDWARE_FAMILIES[p["hardware"]]
    batch, isl, osl = int(w["batch"]), int(w.get("isl") or 1), w.get("osl")
    dt = step_settings(p, sources[p["source"]])
    src = sources[p["source"]]["citation"]
    ref = INFER_SOURCES[p["source"]]
    base = f"{p['where']} [json id {p['id']}]"
    out: list[Measurement] = []
    server = w.get("mode") == "server"
    ttft = _value(p, "ttft_ms")
    if ttft is not None and not server:
        wl = Workload("prefill", batch=batch, s_kv=isl, **dt)
        out.append(Measurement(f"{p['id']}:ttft", "prefill", model, family, layout, wl, "latency",
                               ttft, "ms", src, ref, f"{base}; TTFT, batch {batch}, ISL {isl}"))
    ctx = isl + (int(osl) // 2 if osl else 0)
    tpot = _value(p, "tpot_ms")
    if tpot is not None:
        steps: tuple[tuple[Workload, float], ...] = ()
        if server and osl:  # steady state: new requests' prompts share the decode passes
            steps, note = served_steps(batch, isl, int(osl), dt)
            wl = steps[-1][0]
        else:
            wl = Workload("decode", batch=batch, s_kv=max(ctx, 1), **dt)
            note = ""
        out.append(Measurement(f"{p['id']}:tpot", "decode", model, family, layout, wl, "latency",
                               tpot, "ms", src, ref,
                               f"{base}; TPOT at batch {batch}, mean context {ctx}{note}",
                               steps=steps))
    thr = _value(p, "output_tokens_per_s")
    per_gpu = _value(p, "output_tokens_per_s_per_gpu")
    if thr is None and per_gpu is not None:
        thr = per_gpu * tp * pp * dp
    if thr is not None and osl and int(osl) > 1 and not server and tpot is None:
        # a static run's throughput: batch x osl over the whole run, prefill included
        last, steps, note = _whole_run(batch, isl, int(osl), dt,
                                       vllm=dt["runtime"] in _VLLM_RUNTIMES)
        out.append(Measurement(f"{p['id']}:thr", "decode", model, family, layout, last,
                               "output_tokens_per_s", thr, "tok/s", src, ref,
                               f"{base}; {note}", steps=steps, generated=int(osl)))
    if not out:
        return [], "no reproducible metric (queued TTFT, or throughput with a large prefill share)"
    return out, ""


@lru_cache(maxsize=1)
def json_data() -> dict[str, Any]:
    """``inference_measurements.json`` as read (once per process; do not modify it)."""
    with open(_PATH, encoding="utf-8") as fh:
        return dict(json.load(fh))


def json_sources() -> dict[str, Any]:
    """The ``sources`` of ``inference_measurements.json`` (citations and stack settings)."""
    return dict(json_data()["sources"])


@lru_cache(maxsize=1)
def load_infer_measurements() -> tuple[tuple[Measurement, ...], tuple[tuple[str, str], ...]]:
    """(measurements, skipped (json id, reason)) from ``inference_measurements.json``."""
    data = json_data()
    pts: list[Measurement] = []
    skipped: list[tuple[str, str]] = []
    for p in data["points"]:
        ms, why = _convert(p, data["sources"])
        pts.extend(ms)
        if why:
            skipped.append((p["id"], why))
        for metric, reason in (p.get("excluded_metrics") or {}).items():
            skipped.append((f"{p['id']}:{metric.removesuffix('_ms')}", "excluded: " + reason))
    return tuple(pts), tuple(skipped)


#: The reproducible held-out inference points.
INFER_MEASUREMENTS: tuple[Measurement, ...] = load_infer_measurements()[0]
