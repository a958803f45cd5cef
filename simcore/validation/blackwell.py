"""The Blackwell held-out set: public B200 / B300 / GB200 NVL72 / GB300 NVL72 measurements,
never fitted.

``blackwell_measurements.json`` (transcribed for issue 34; ``docs/sources/blackwell.md``)
holds Megatron-Bridge pre-training rows (its 26.04.01 and 25.11 performance tables) and
TensorRT-LLM / SGLang inference figures on the four Blackwell families, with the Hopper
rows of the same tables. A new GPU generation is out of sample by construction: the
efficiency factors were fitted on Ampere and Hopper (:mod:`simcore.validation.fitted`),
and these points only check how they carry over through the families' cited data-sheet
peaks, bandwidths and measured matmul fractions (``mm_ratio``). They are reported beside
the fitted error (``simcore validate``), never folded into it.

What is used
------------
The pre-training rows, converted exactly as the fitted Megatron-Bridge rows of
``training_measurements.json`` are (:func:`simcore.validation.data_train._measurement`:
Megatron's distributed optimizer, bf16 gradient reduction, FP8 primary weights and
Transformer Engine's FP8-saved GEMM inputs for FP8 runs). Per row, from the matching
Megatron-Bridge v0.4.2 preset (:data:`RECIPES`, resolved from
``scripts/performance/configs/`` at c810129341a84e58f4cbed3093f70668a088c028, the
repository's own performance summary's version): the MoE dispatcher (HybridEP / DeepEP send
a token once per destination rank; Megatron's ``alltoall`` once per expert) and whether the
all-to-all overlaps compute; the Llama 3.1 recipes' TP communication overlap. MXFP8 runs
(``bf16_with_mxfp8_mixed``: FP8 E4M3 GEMMs with 32-element block scales and
``fp8_param_gather = True``) are FP8 runs at the family's FP8 rate. A job larger than one
72-GPU NVLink domain runs 64 GPUs per rack (4 racks for 256 GPUs: the sources do not
state the placement, and Megatron's power-of-two groups tile 64 of a rack's 72 GPUs, not
72), :func:`~simcore.studies.compare.with_domain`.

Not covered (listed with the reason by :func:`blackwell_not_covered`, never guessed)
-----------------------------------------------------------------------------------
* Grace activation offload (``cpu_offloading_num_layers`` of the GB200 / GB300 Megatron-FSDP
  rows): Grace memory over NVLink-C2C is not modelled.
* NVFP4 training: simcore's training GEMMs are 16-bit or FP8 (``Workload.precision``).
* gpt-oss-120b training: the transcription's expert FFN width (2880) is not the
  catalogue model's ``moe_d_ff`` (attention sinks and alternating sliding windows are not
  modelled for training either).
* The inference figures: TensorRT-LLM's perf-overview tables are offline max-throughput
  runs whose batch the scheduler chose (no batch to simulate: the same rule skips their
  Hopper rows in :mod:`simcore.validation.data_infer`), and the SGLang / LMSYS figures are
  headline numbers of prefill-decode-disaggregated deployments whose group sizes and
  batches are not stated. So no FP4 inference point is pinned yet.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, replace
from functools import lru_cache
from pathlib import Path
from typing import Any

from ..model.specs import Efficiency
from .points import Measurement, SignedError, error_stats

__all__ = ["FAMILIES", "RECIPES", "BlackwellRow", "blackwell_not_covered", "blackwell_rows",
           "blackwell_summary", "load_blackwell"]

_JSON = Path(__file__).with_name("blackwell_measurements.json")

#: The Blackwell families the set measures.
FAMILIES: tuple[str, ...] = ("B200", "B300", "GB200-NVL72", "GB300-NVL72")

_MB_AT = ("NVIDIA-NeMo/Megatron-Bridge v0.4.2 (c810129341a84e58f4cbed3093f70668a088c028), "
          "scripts/performance/configs/")
#: Per MoE row: the matching Megatron-Bridge v0.4.2 preset (its file under
#: ``scripts/performance/configs/``), its ``moe_flex_dispatcher_backend`` (None: Megatron's
#: ``alltoall`` dispatcher) and ``moe_a2a_overlap``, resolved through the presets'
#: ``replace`` chains; every preset's layout, micro-batch and global batch match the row.
RECIPES: dict[str, tuple[str, str, str | None, bool]] = {
    "mb260401-gb300-deepseek-v3": ("DEEPSEEK_V3_PRETRAIN_CONFIG_GB300_FP8_MX_V2",
                                   "deepseek/deepseek_workload_base_configs.py", "hybridep",
                                   False),
    "mb260401-gb200-deepseek-v3": ("DEEPSEEK_V3_PRETRAIN_CONFIG_GB200_FP8_MX_V2",
                                   "deepseek/deepseek_workload_base_configs.py", "hybridep",
                                   False),
    "mb260401-b300-deepseek-v3": ("DEEPSEEK_V3_PRETRAIN_CONFIG_B300_FP8_MX_V2",
                                  "deepseek/deepseek_workload_base_configs.py", "hybridep",
                                  False),
    "mb260401-b200-deepseek-v3": ("DEEPSEEK_V3_PRETRAIN_CONFIG_B200_FP8_MX_V2",
                                  "deepseek/deepseek_workload_base_configs.py", "deepep", True),
    "mb260401-gb300-qwen3-235b-a22b": ("QWEN3_235B_A22B_PRETRAIN_CONFIG_GB300_FP8_MX_V2",
                                       "qwen/qwen3_workload_base_configs.py", "hybridep", False),
    "mb260401-gb200-qwen3-235b-a22b": ("QWEN3_235B_A22B_PRETRAIN_CONFIG_GB200_FP8_MX_V2",
                                       "qwen/qwen3_workload_base_configs.py", "hybridep", False),
    "mb260401-b300-qwen3-235b-a22b": ("QWEN3_235B_A22B_PRETRAIN_CONFIG_B300_FP8_MX_V2",
                                      "qwen/qwen3_workload_base_configs.py", "hybridep", False),
    "mb260401-b200-qwen3-235b-a22b": ("QWEN3_235B_A22B_PRETRAIN_CONFIG_B200_FP8_MX_V2",
                                      "qwen/qwen3_workload_base_configs.py", None, False),
    "mb260401-gb300-qwen3-30b-a3b": ("QWEN3_30B_A3B_PRETRAIN_CONFIG_GB300_FP8_MX_V1",
                                     "qwen/qwen3_workload_base_configs.py", "hybridep", False),
    "mb260401-gb200-qwen3-30b-a3b": ("QWEN3_30B_A3B_PRETRAIN_CONFIG_GB200_FP8_MX_V1",
                                     "qwen/qwen3_workload_base_configs.py", "hybridep", False),
    "mb260401-b300-qwen3-30b-a3b": ("QWEN3_30B_A3B_PRETRAIN_CONFIG_B300_FP8_MX_V1",
                                    "qwen/qwen3_workload_base_configs.py", "hybridep", False),
    "mb260401-b200-qwen3-30b-a3b": ("QWEN3_30B_A3B_PRETRAIN_CONFIG_B200_FP8_MX_V1",
                                    "qwen/qwen3_workload_base_configs.py", "hybridep", False),
}
#: Llama rows with TP > 1: Megatron-Bridge's Llama 3 / 3.1 recipes turn TP communication
#: overlap on (``tp_comm_overlap=True``, as for the fitted Hopper rows of the same tables)
_TP_OVERLAP_MODELS = ("llama3-70b", "llama31-405b")
#: GPUs per rack a multi-rack NVL72 job uses (see the module docstring)
_RACK_SHARE = 64


@dataclass(frozen=True)
class BlackwellRow(SignedError):
    """One held-out Blackwell point: measured and predicted value in the point's unit and
    the signed relative error (``predicted / measured - 1``; for a step time, + means
    simcore predicts it slower)."""

    id: str
    kind: str
    hardware: str
    model: str
    layout: str
    metric: str
    unit: str
    measured: float
    predicted: float = float("nan")


def _kernels(pid: str) -> str:
    """The MoE dispatch text of a row, in the words ``data_train`` reads (DeepEP: one copy
    per destination rank; ``moe_a2a_overlap True``: overlapped)."""
    preset, path, backend, overlap = RECIPES[pid]
    how = {"hybridep": "HybridEP (DeepEP's hierarchical dispatch; moe_flex_dispatcher_backend "
                       "'hybridep')",
           "deepep": "DeepEP (moe_flex_dispatcher_backend 'deepep')",
           None: "Megatron's alltoall dispatcher (no flex backend)"}[backend]
    return f"{how}, moe_a2a_overlap {overlap}: {preset} in {_MB_AT}{path}"


def _not_covered(p: dict[str, Any]) -> str | None:
    w = p["workload"]
    if w.get("activation_offload"):
        return ("Grace CPU activation offload (Megatron-FSDP with cpu_offloading_num_layers): "
                "Grace memory over NVLink-C2C is not modelled")
    if w.get("precision") == "fp4":
        return "NVFP4 training: simcore's training GEMMs are 16-bit or FP8"
    if "gpt-oss" in p["id"]:
        return ("gpt-oss-120b: the transcribed expert FFN width (2880) is not the catalogue "
                "model's; attention sinks and alternating windows are not modelled in training")
    return None


def _training(p: dict[str, Any], sources: dict[str, Any]) -> Measurement:
    from ..studies.compare import with_domain
    from .data_train import _measurement

    q = json.loads(json.dumps(p))  # a copy to annotate
    q["source"] = "mbridge_perf"  # the fitted rows' source: the same document, converter
    extra: list[str] = []
    if p["id"] in RECIPES:
        q["workload"]["kernels"] = _kernels(p["id"])
        extra.append(q["workload"]["kernels"])
    if q["workload"].get("precision_printed") == "MXFP8":
        extra.append("MXFP8 as FP8 GEMMs at the family's FP8 rate (bf16_with_mxfp8_mixed: "
                     "E4M3 with 32-element block scales, fp8_param_gather=True)")
    m = _measurement(q, {"mbridge_perf": sources["mbridge_perf_bw"]})
    wl, fam = m.workload, m.family
    if int(p["layout"].get("tp") or 1) > 1 and any(k in p["id"] for k in _TP_OVERLAP_MODELS):
        wl = replace(wl, tp_comm_overlap=True)
        extra.append("TP communication overlapped (the Llama recipes' tp_comm_overlap=True)")
    n = int(p["n_gpus"])
    if fam.topology.pes_per_cube > _RACK_SHARE and n > fam.topology.pes_per_cube:
        fam = with_domain(fam, _RACK_SHARE)
        extra.append(f"{n} GPUs as {n // _RACK_SHARE} racks of {_RACK_SHARE} GPUs on NVLink "
                     "(placement not stated)")
    notes = "; ".join(filter(None, [m.notes, "Blackwell held out: " + "; ".join(extra)
                                    if extra else ""]))
    return replace(m, workload=wl, family=fam, ref="mbridge_perf_bw", notes=notes)


def _inference_reason(p: dict[str, Any]) -> str:
    if p["source"].startswith("trtllm"):
        return ("offline max-throughput run, batch chosen by TensorRT-LLM's scheduler: no "
                "batch to simulate (its Hopper rows are skipped alike)")
    return ("headline figure of a prefill-decode-disaggregated deployment; group sizes and "
            "batch not stated")


@lru_cache(maxsize=1)
def _load() -> tuple[tuple[Measurement, ...], tuple[tuple[str, str, str], ...]]:
    data = json.loads(_JSON.read_text(encoding="utf-8"))
    kept: list[Measurement] = []
    gaps: list[tuple[str, str, str]] = []
    for p in data["training_points"]:
        if p["hardware"] not in FAMILIES:
            continue  # a Hopper pair of the same table
        why = _not_covered(p)
        if why:
            gaps.append((p["id"], p["hardware"], why))
        else:
            kept.append(_training(p, data["sources"]))
    for p in data["inference_points"]:
        if p["hardware"] in FAMILIES:
            gaps.append((p["id"], p["hardware"], _inference_reason(p)))
    return tuple(kept), tuple(gaps)


def load_blackwell() -> tuple[Measurement, ...]:
    """The held-out Blackwell measurements simcore can express."""
    return _load()[0]


def blackwell_not_covered() -> tuple[tuple[str, str, str], ...]:
    """(point id, family, reason) of every Blackwell point simcore cannot express yet."""
    return _load()[1]


def _layout(m: Measurement) -> str:
    return " ".join(f"{k.upper()}{v}" for k, v in m.layout if v > 1) or "1 GPU"


def blackwell_rows(efficiency: Efficiency | None = None) -> list[BlackwellRow]:
    """Predict every held-out Blackwell point (default: the fitted factors).

    Examples
    --------
    >>> rows = blackwell_rows()
    >>> len(rows) >= 10 and all(r.predicted > 0 for r in rows)
    True
    """
    from .fitted import FITTED_EFFICIENCY
    from .points import predict

    eff = FITTED_EFFICIENCY if efficiency is None else efficiency
    if not isinstance(eff, Efficiency):
        raise ValueError(f"efficiency must be a simcore.Efficiency, got {type(eff).__name__}")
    return [BlackwellRow(m.id, m.kind, m.family.name, m.model.name, _layout(m), m.metric,
                         m.unit, m.measured, float(predict(m, efficiency=eff)))
            for m in load_blackwell()]


def blackwell_summary(rows: Sequence[BlackwellRow]) -> dict[str, Any]:
    """Mean |error| and mean signed error over the rows, per kind and per family
    (``{name: (mean |error|, mean signed error, rows)}``).

    Examples
    --------
    >>> s = blackwell_summary(blackwell_rows())
    >>> 0.0 < s["mean_abs_error"] < 1.0 and set(s["families"]) <= set(FAMILIES)
    True
    """
    if not rows:
        raise ValueError("blackwell_summary needs rows; pass blackwell_rows()")

    by_kind: dict[str, list[float]] = {}
    by_family: dict[str, list[float]] = {}
    for r in rows:
        by_kind.setdefault(r.kind, []).append(r.error)
        by_family.setdefault(r.hardware, []).append(r.error)
    mean_abs, mean, n = error_stats([r.error for r in rows])
    return {"n": n, "mean_abs_error": mean_abs, "mean_error": mean,
            "kinds": {k: error_stats(v) for k, v in by_kind.items()},
            "families": {f: error_stats(by_family[f]) for f in FAMILIES if f in by_family}}
