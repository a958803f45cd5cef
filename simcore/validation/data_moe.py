"""Public MoE serving measurements (expert parallelism, attention data parallelism), read
from ``moe_measurements.json``.

``moe_measurements.json`` transcribes 41 published MoE inference results with their
citations (summary, ranking pairs and conflicts in ``docs/sources/moe_multinode.md``);
this module turns the ones simcore can reproduce into
:class:`~simcore.validation.points.Measurement` objects (:data:`MOE_MEASUREMENTS`), as
:mod:`simcore.validation.data_infer` does for ``inference_measurements.json`` and with its
functions (precision, runtime, measured values). It also takes the points of
``inference_measurements.json`` that ``data_infer`` leaves out because their model has
MLA or shared experts (the three DeepSeek-R1 aiconfigurator rows).

Models
------
Each point's model resolves through simcore's catalogue (:func:`simcore.get_model`) by
its ``hf_id``, its ``name``, or, for a quantised checkpoint (``-FP8``, ``-FP4``, ``-AWQ``),
the catalogue entry of the same repository name (``Qwen/Qwen3-235B-A22B-FP8`` ->
``Qwen/Qwen3-235B-A22B``). The transcribed architecture must agree with the catalogue's
in every key field it states (:data:`ARCH_FIELDS`: layers, width, heads, experts, top-k,
expert width, shared experts, dense first layers, MLA ranks, vocabulary); otherwise the
point is refused with the fields that differ (:func:`resolve_model`).

Layouts
-------
The kernel's ``tp`` is the attention TP degree, ``dp`` the attention data-parallel degree
(the batch split over ``dp`` replicas of attention), ``ep`` the expert-parallel degree,
each expert sharded over the other ``tp·dp/ep`` ranks (the point's ``moe_tp``): the point
is used only when ``tp·dp`` is the GPUs of one model instance and ``ep·moe_tp = tp·dp``.
TensorRT-LLM's ``--tp 8`` with ``enable_attention_dp`` counts all 8 ranks; attention is then
TP1 × DP8 (``tp = tp / attention_dp``). ``batch`` is the instance's whole batch (under
attention DP, ``batch_per_attention_dp_rank`` × DP, checked).

Metrics
-------
* ``tpot_ms`` of an aggregated server at a client concurrency: the mean steady-state
  step of :meth:`Workload.served_steps` (running batch = concurrency; a share of the steps
  also runs an admitted request's whole prompt). Of a disaggregated decode worker: a plain decode step at the
  worker's batch and the mean context ``isl + osl/2`` (prompts run on other GPUs).
* ``output_tokens_per_s`` of a server or an offline benchmark at a stated concurrency
  (trtllm-bench, benchmark_serving): the same served steps, tokens/s = concurrency / mean
  step.

Each point runs under the runtime profile its source (or the point) names
(``"runtime"``, :data:`simcore.model.runtime.RUNTIMES`). A point that states no KV-cache
dtype takes, on the TensorRT-LLM runtime, the one its source says the runs used
(aiconfigurator's generator wrote an FP8 cache: ``kv_dtype_trtllm`` with its citation in
the source entry), else the model's 16-bit cache. TTFTs are not used (served at a
concurrency, they include queueing), as in ``data_infer``.

Skipped, with the reason (:func:`load_moe_measurements`, printed by ``simcore validate``):
the GPU model unstated (LMDeploy); Blackwell rows (held out in
:mod:`simcore.validation.blackwell`, never fitted); a model not in the catalogue
(Kimi-K2.5, Qwen2-57B) or without a transcribed architecture; speculative decoding (MTP,
acceptance unstated); attention TP/DP sizes unstated or ``ep`` not dividing the experts
(LMSYS' EP72 over 288 physical experts); prefill throughput per node (no batch per step).
"""

from __future__ import annotations

import json
import os
import re
from functools import lru_cache
from typing import Any

from ..model import presets
from ..model.specs import Model, Workload
from .data_infer import (
    INFER_SOURCES,
    _model,
    _value,
    json_data,
    served_steps,
    step_settings,
)
from .points import Measurement

__all__ = ["ARCH_FIELDS", "MOE_MEASUREMENTS", "MOE_SOURCES", "is_moe", "load_moe_measurements",
           "resolve_model"]

_DIR = os.path.dirname(__file__)
_PATH = os.path.join(_DIR, "moe_measurements.json")

#: Short labels per source id (tables and leave-one-source-out group by these; the
#: aiconfigurator rows join that source's existing points).
MOE_SOURCES: dict[str, str] = {
    "aiconfigurator_silicon": INFER_SOURCES["aiconfigurator_silicon"],
    "trtllm_dsr1_best_perf": "TRT-LLM DeepSeek-R1 blog",
    "dzhsurf_dsv3_awq": "dzhsurf DeepSeek-V3-AWQ",
    "lmsys_large_ep_eval": "LMSYS large-EP eval",
    "lmdeploy_dsv3_bench": "lmdeploy DeepSeek-V3",
}

#: Transcribed architecture key -> the catalogue Model attribute it must equal.
ARCH_FIELDS: dict[str, str] = {
    "n_layers": "n_layers", "d_model": "d_model", "n_heads": "n_heads",
    "n_kv_heads": "n_kv_heads", "head_dim": "head_dim", "n_experts": "n_experts",
    "n_routed_experts": "n_experts", "top_k": "top_k", "moe_intermediate_size": "moe_d_ff",
    "n_shared_experts": "n_shared_experts", "first_k_dense_replace": "n_dense_layers",
    "d_ff_dense": "d_ff", "vocab_size": "vocab_size", "kv_lora_rank": "kv_lora_rank",
    "q_lora_rank": "q_lora_rank", "qk_rope_head_dim": "qk_rope_head_dim",
}
_MLA_RANKS = ("kv_lora_rank", "q_lora_rank", "qk_rope_head_dim")
#: Suffixes of quantised checkpoints that keep their base model's shape.
_QUANT_SUFFIX = re.compile(r"(-(fp8|fp4|nvfp4|awq|int4|w4a16|gptq))+$", re.IGNORECASE)
#: Hardware held out as a generation (:mod:`simcore.validation.blackwell`).
_HELD_OUT_GPUS = ("B200", "B300", "GB200-NVL72", "GB300-NVL72")


def is_moe(m: Measurement) -> bool:
    """Whether a measurement's model is a mixture of experts."""
    return m.model.n_experts > 1


def _stated_arch(a: dict[str, Any]) -> dict[str, int]:
    """The architecture's key fields as integers (MLA ranks parsed from its ``attention``
    text, e.g. ``"MLA (kv_lora_rank 512, ...)"``)."""
    out = {k: int(a[k]) for k in ARCH_FIELDS if isinstance(a.get(k), int)}
    text = str(a.get("attention", ""))
    for rank in _MLA_RANKS:
        hit = re.search(rf"{rank} (\d+)", text)
        if hit:
            out[rank] = int(hit.group(1))
    return out


def _expected(model: Model, attr: str) -> int:
    if attr == "moe_d_ff":  # experts as wide as the FFN leave moe_d_ff unset (Mixtral)
        return int(model.moe_d_ff or model.d_ff)
    return int(getattr(model, attr))


def _candidates(spec: dict[str, Any]) -> list[str]:
    """Names to look the model up by: hf_id, name, and a quantised checkpoint's base."""
    hf_id = str(spec.get("hf_id") or "")
    out = [n for n in (hf_id, str(spec.get("name") or "")) if n]
    repo = _QUANT_SUFFIX.sub("", hf_id.partition("/")[2]).lower()
    if repo:
        out += [cid for cid in presets.catalogue() if cid.partition("/")[2].lower() == repo]
    return out


def resolve_model(spec: dict[str, Any]) -> tuple[Model | None, str]:
    """(the catalogue model a point's ``model`` block names, "") or (None, why not): not in
    the catalogue, no architecture transcribed, or a key field that differs.

    Examples
    --------
    >>> spec = {"hf_id": "Qwen/Qwen3-235B-A22B-FP8", "architecture": {"n_layers": 94,
    ...         "n_experts": 128, "top_k": 8, "moe_intermediate_size": 1536}}
    >>> resolve_model(spec)[0].name
    'Qwen/Qwen3-235B-A22B'
    >>> spec["architecture"]["moe_intermediate_size"] = 2048
    >>> resolve_model(spec)[1]
    "transcribed architecture differs from catalogue 'Qwen/Qwen3-235B-A22B': moe_intermediate_size 2048 (catalogue 1536)"
    """
    model = next((m for m in map(presets.find_model, _candidates(spec)) if m is not None), None)
    if model is None:
        return None, f"model {spec.get('hf_id') or spec.get('name')!r} is not in simcore's catalogue"
    stated = _stated_arch(spec.get("architecture") or {})
    if "n_layers" not in stated:
        return None, "no architecture transcribed to check against the catalogue"
    diff = [f"{k} {v} (catalogue {_expected(model, ARCH_FIELDS[k])})"
            for k, v in stated.items() if v != _expected(model, ARCH_FIELDS[k])]
    if diff:
        return None, (f"transcribed architecture differs from catalogue {model.name!r}: "
                      + ", ".join(diff))
    return model, ""


def _layout(p: dict[str, Any]) -> tuple[tuple[tuple[str, int], ...] | None, str]:
    """The kernel layout of one model instance (see the module notes), or (None, why)."""
    lay = p["layout"]
    if lay.get("tp") is None:
        return None, "attention TP / DP sizes not stated"
    gpus = int((lay.get("decode") or {}).get("gpus") or p.get("n_gpus") or 0)
    tp, dp = int(lay["tp"]), int(lay.get("dp") or 1)
    adp = int(lay.get("attention_dp") or 1)
    if adp > 1 and tp * dp != gpus and tp == gpus and tp % adp == 0:
        tp //= adp  # TensorRT-LLM's --tp counts every rank; attention DP splits them
    ep = int(lay.get("ep") or 1)
    moe_tp = int(lay.get("moe_tp") or tp * dp // ep)  # unstated: experts over all ranks
    if gpus and tp * dp != gpus:
        return None, f"TP{tp} x DP{dp} is not the instance's {gpus} GPUs"
    if ep * moe_tp != tp * dp:
        return None, f"EP{ep} x expert-TP{moe_tp} is not the TP{tp} x DP{dp} ranks"
    pp = int(lay.get("pp") or 1)
    return (("tp", tp), ("pp", pp), ("dp", dp), ("ep", ep)), ""


def _skip(p: dict[str, Any]) -> str:
    """Why the point cannot be reproduced before its model and layout are read, or ""."""
    w = p["workload"]
    if p.get("already_in_simcore"):
        return "already in simcore.validation"
    if p.get("excluded"):
        return "excluded: " + p["excluded"]
    if not p.get("hardware"):
        return "GPU model not stated"
    if p["hardware"] in _HELD_OUT_GPUS:
        return "Blackwell: held out as a generation (simcore.validation.blackwell), never fitted"
    if p["source"] not in MOE_SOURCES:
        return "source not reproducible (offline scheduler-chosen batch or headline only)"
    if w.get("speculative"):
        return "speculative decoding (MTP), acceptance rate not stated"
    if any(m.get("approximate") for m in p["measured"]):
        return "approximate values only (worded 'around' / 'about' by the source): not fitted"
    if not {m["metric"] for m in p["measured"]} & {"tpot_ms", "output_tokens_per_s"}:
        return "no TPOT or output throughput (prefill input tok/s per node only)"
    return ""


def _convert(p: dict[str, Any], sources: dict[str, Any]) -> tuple[list[Measurement], str]:
    why = _skip(p)
    if why:
        return [], why
    model, why = resolve_model(p["model"])
    if model is None:
        return [], why
    layout, why = _layout(p)
    if layout is None:
        return [], why
    w = p["workload"]
    if not w.get("batch") or not w.get("isl") or not w.get("osl"):
        return [], "batch, ISL or OSL not stated"
    batch, isl, osl = int(w["batch"]), int(w["isl"]), int(w["osl"])
    sizes = dict(layout)
    per_rank = w.get("batch_per_attention_dp_rank")
    if per_rank is not None and int(per_rank) * sizes["dp"] != batch:
        return [], f"batch {batch} is not {per_rank} per attention-DP rank x DP{sizes['dp']}"
    if model.n_experts % sizes["ep"]:
        return [], f"EP{sizes['ep']} does not divide the {model.n_experts} experts"
    dt = step_settings(p, sources[p["source"]])
    disagg = bool(p["layout"].get("disaggregated"))
    steps: tuple[tuple[Workload, float], ...] = ()
    if disagg:  # a decode worker: its prompts ran on the prefill workers
        wl = Workload("decode", batch=batch, s_kv=isl + osl // 2, **dt)
        how = f"disaggregated decode worker: batch {batch}, mean context {isl + osl // 2}"
    else:
        steps, how = served_steps(batch, isl, osl, dt)
        wl = steps[-1][0]
        how = f"running batch {batch}{how}"
    head = (model, presets.HARDWARE_FAMILIES[p["hardware"]], layout, wl)
    cite = (sources[p["source"]]["citation"], MOE_SOURCES[p["source"]])
    base = f"{p['where']} [json id {p['id']}]; {p.get('kind', 'moe')}; {how}"
    tpot = _value(p, "tpot_ms")
    if tpot is not None and not any(m.get("derived") for m in p["measured"]):
        return [Measurement(f"{p['id']}:tpot", "decode", *head, "latency", tpot, "ms", *cite,
                            base, steps=steps)], ""
    thr = _value(p, "output_tokens_per_s")
    if thr is not None and not disagg:
        return [Measurement(f"{p['id']}:thr", "decode", *head, "output_tokens_per_s", thr,
                            "tok/s", *cite, f"{base}; output tok/s = concurrency / mean step",
                            steps=steps, generated=1 if steps else 0)], ""
    return [], "no reproducible metric (queued TTFT only)"


def _points() -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """moe_measurements.json's points, then inference_measurements.json's points whose
    model data_infer does not describe (MLA / shared experts), with both files' sources."""
    with open(_PATH, encoding="utf-8") as fh:
        moe = json.load(fh)
    infer = json_data()
    extra = [dict(p) for p in infer["points"]
             if not p.get("already_in_simcore") and _model(p["model"]) is None]
    sources = {**{f"inference:{k}": v for k, v in infer["sources"].items()}, **moe["sources"]}
    for p in extra:
        if p["source"] not in moe["sources"]:
            p["source"] = f"inference:{p['source']}"
    return [*moe["points"], *extra], sources


@lru_cache(maxsize=1)
def load_moe_measurements() -> tuple[tuple[Measurement, ...], tuple[tuple[str, str], ...]]:
    """(measurements, skipped (json id, reason)) from ``moe_measurements.json`` and the MLA /
    shared-expert points of ``inference_measurements.json``."""
    points, sources = _points()
    pts: list[Measurement] = []
    skipped: list[tuple[str, str]] = []
    for p in points:
        ms, why = _convert(p, sources)
        pts.extend(ms)
        if why:
            skipped.append((p["id"], why))
    return tuple(pts), tuple(skipped)


#: The reproducible MoE serving points.
MOE_MEASUREMENTS: tuple[Measurement, ...] = load_moe_measurements()[0]
