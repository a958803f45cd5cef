"""A large held-out check: aiconfigurator's silicon-measured serving runs, never fitted.

aiconfigurator (NVIDIA ai-dynamo) keeps a CSV of serving benchmarks measured on real
systems to score its own predictions (``silicon_sample.csv``). Thirteen of its rows are
validation points (:mod:`simcore.validation.data_infer`), fitted with the rest. This
module reads all the others that simcore describes — every aggregated (``agg``) row of a
dense model on ``h100_sxm`` / ``h200_sxm`` with plain tensor parallelism: Llama 3.1 8B
(Instruct, and NVIDIA's FP8 checkpoint), Llama 3.1 70B and Qwen3-32B under TensorRT-LLM,
vLLM and SGLang, ISL 1K-8K, OSL 128-8K, concurrency 4-512 — and predicts their time per
output token with the fitted factors. None of them is used by the fit; it is reported
beside the fitted error (``simcore validate``), not folded into it. Four of its (backend,
GPU, model) groups — TensorRT-LLM's Llama 3.1 8B on H100 and 70B on H200, vLLM's 70B on
H100, SGLang's 8B on H200, 328 rows — share those with fitted points, so for them only
the batch, lengths and TP degree are new; the other 438 rows are new in framework or
model as well.

Each row becomes what the fitted served rows are (:meth:`Workload.served_steps`): the running
batch is the client concurrency (``batch_size``, equal to the concurrency in every row
used: no attention data parallelism), and about ``concurrency · isl / osl`` prompt
tokens of newly admitted requests arrive per step, each prompt run whole with the decode
batch in a share of the steps. Precision from
``gemm_quant_mode``: ``fp8`` / ``fp8_block`` / ``fp8_static`` → FP8 weights and GEMM
inputs, empty / ``bfloat16`` / ``float16`` → 16-bit; the KV cache dtype is not in the CSV
and is taken as 16-bit. Decode steps replay CUDA graphs, as in the fitted rows
(aiconfigurator's generator configures them; see ``_convert``). Only TPOT is used: the CSV's TTFT includes queueing behind
other requests at the concurrency.

The rows are kept verbatim in ``aic_silicon_holdout.csv`` (the upstream columns, the
selected rows in upstream order); :data:`SOURCE` cites them.
"""

from __future__ import annotations

import csv
import statistics
from collections.abc import Sequence
from dataclasses import dataclass, replace
from functools import lru_cache
from pathlib import Path
from typing import Any

from ..model import presets
from ..model.specs import Efficiency
from .data_infer import json_sources, kv_dtype_for, served_steps
from .points import Measurement

__all__ = ["SOURCE", "HoldoutRow", "holdout_rows", "holdout_summary", "load_holdout"]

_CSV = Path(__file__).with_name("aic_silicon_holdout.csv")

#: Where the rows come from (repository, path, commit).
SOURCE = ("NVIDIA ai-dynamo/aiconfigurator, aic-core/src/aiconfigurator_core/systems/"
          "silicon_sample.csv @ 095f58a51c4ca8e61b66ec108d86f223f8d559ce (columns "
          "silicon_tpot_ms; rows: mode agg, system h100_sxm / h200_sxm, dense models)")
#: The label the rows are grouped under.
REF = "aiconfigurator silicon (held out)"

#: model_path -> catalogue id (the Instruct and FP8 checkpoints share the base shape)
_MODELS = {
    "meta-llama/Llama-3.1-8B-Instruct": "meta-llama/Llama-3.1-8B",
    "nvidia/Llama-3.1-8B-Instruct-FP8": "meta-llama/Llama-3.1-8B",
    "meta-llama/Llama-3.1-70B": "meta-llama/Llama-3.1-70B",
    "Qwen/Qwen3-32B": "Qwen/Qwen3-32B",
}
_SYSTEMS = {"h100_sxm": "H100-SXM", "h200_sxm": "H200"}
_FP8 = {"fp8", "fp8_block", "fp8_static"}


def _int(v: str) -> int:
    return int(v) if v not in ("", None) else 1


@dataclass(frozen=True)
class HoldoutRow:
    """One held-out row: measured and predicted time per output token (ms), whether
    simcore predicts the configuration to fit, and the signed relative error
    (``predicted / measured - 1``: + means simcore predicts it slower)."""

    id: str
    backend: str
    hardware: str
    model: str
    tp: int
    concurrency: int
    isl: int
    osl: int
    fp8: bool
    measured_ms: float
    predicted_ms: float = float("nan")
    fits: bool = True

    @property
    def error(self) -> float:
        return self.predicted_ms / self.measured_ms - 1.0


#: The runtime profile of each backend the CSV names.
_RUNTIMES = {"trtllm": "trtllm", "vllm": "vllm", "sglang": "sglang"}


def _convert(r: dict[str, str], fitted: frozenset[str]
             ) -> tuple[tuple[Measurement, HoldoutRow] | None, str]:
    if r["id"] in fitted:
        return None, "a fitted validation point (simcore.validation.data_infer)"
    if (r["mode"] != "agg" or r["system"] not in _SYSTEMS or r["model_path"] not in _MODELS
            or r["backend"] not in _RUNTIMES):
        return None, "not an aggregated dense-model row on H100 / H200"
    if _int(r["attention_dp_size"]) != 1 or _int(r["pp_size"]) != 1:
        return None, "attention data parallelism or pipeline parallelism"
    quant = r["gemm_quant_mode"]
    if quant and quant not in _FP8 and quant not in ("bfloat16", "float16"):
        return None, f"GEMM precision {quant!r} not modelled"
    if not r["silicon_tpot_ms"]:
        return None, "no TPOT"
    fp8 = quant in _FP8
    dt: dict[str, Any] = dict(weight_dtype="fp8", act_dtype="fp8") if fp8 else {}
    # the row's serving stack (simcore.model.runtime): each replays decode steps from CUDA
    # graphs, as aiconfigurator's generator configures TensorRT-LLM
    # (cuda_graph_config.batch_sizes, src/aiconfigurator/generator/rendering/engine.py;
    # its benchmark rule captures every batch size, .claude/rules/generator/guard_rails.md,
    # at the CSV's commit) and vLLM and SGLang do by default
    dt["runtime"] = _RUNTIMES[r["backend"]]
    # the KV-cache dtype the fitted rows of the same CSV use (data_infer._kv_dtype: on
    # TensorRT-LLM the FP8 cache aiconfigurator's generator wrote, cited in the source)
    kv = kv_dtype_for(None, dt["runtime"], json_sources()["aiconfigurator_silicon"])
    if kv:
        dt["kv_dtype"] = kv
    batch, isl, osl, tp = (int(r[k]) for k in ("batch_size", "isl", "osl", "tp_size"))
    model = presets.catalogue()[_MODELS[r["model_path"]]].model()
    family = presets.HARDWARE_FAMILIES[_SYSTEMS[r["system"]]]
    steps, how = served_steps(batch, isl, osl, dt)
    notes = (f"silicon_sample.csv row id {r['id']!r}; {r['backend']} "
             f"{r['backend_version'] or '(version blank)'}, {r['model_path']}, "
             f"{'FP8' if fp8 else '16-bit'} GEMMs, TP{tp}, concurrency {batch}, ISL {isl}, "
             f"OSL {osl}{how}")
    m = Measurement(f"aic-holdout:{r['id']}", "decode", model, family,
                    (("tp", tp), ("pp", 1), ("dp", 1)), steps[-1][0], "latency",
                    float(r["silicon_tpot_ms"]), "ms", SOURCE, REF, notes, steps=steps)
    row = HoldoutRow(m.id, r["backend"], family.name, r["model_path"], tp, batch, isl, osl,
                     fp8, m.measured)
    return (m, row), ""


def _fitted_ids() -> frozenset[str]:
    """The CSV row ids that are fitted validation points (their ``notes`` name them)."""
    from .data_infer import INFER_MEASUREMENTS, INFER_SOURCES

    key = "row id '"
    out = set()
    for m in INFER_MEASUREMENTS:
        i = m.notes.find(key)
        if m.ref == INFER_SOURCES["aiconfigurator_silicon"] and i >= 0:
            out.add(m.notes[i + len(key):m.notes.index("'", i + len(key))])
    return frozenset(out)


@lru_cache(maxsize=1)
def _load() -> tuple[tuple[tuple[Measurement, HoldoutRow], ...], tuple[tuple[str, str], ...]]:
    fitted = _fitted_ids()
    kept: list[tuple[Measurement, HoldoutRow]] = []
    skipped: list[tuple[str, str]] = []
    with open(_CSV, newline="", encoding="utf-8") as fh:
        for r in csv.DictReader(fh):
            got, why = _convert(r, fitted)
            if got is None:
                skipped.append((r["id"], why))
            else:
                kept.append(got)
    return tuple(kept), tuple(skipped)


def load_holdout() -> tuple[tuple[Measurement, ...], tuple[tuple[str, str], ...]]:
    """(the held-out measurements, skipped (row id, reason)) from the verbatim rows."""
    kept, skipped = _load()
    return tuple(m for m, _ in kept), skipped


def holdout_rows(efficiency: Efficiency | None = None) -> list[HoldoutRow]:
    """Predict every held-out row (default: the fitted factors).

    Examples
    --------
    >>> rows = holdout_rows()
    >>> len(rows) > 700 and all(r.predicted_ms > 0 for r in rows)
    True
    """
    from .fit import fast_predictor
    from .fitted import FITTED_EFFICIENCY

    eff = FITTED_EFFICIENCY if efficiency is None else efficiency
    if not isinstance(eff, Efficiency):
        raise ValueError(f"efficiency must be a simcore.Efficiency, got {type(eff).__name__}")
    kept, _ = _load()
    predicted, fits = fast_predictor([m for m, _ in kept])(eff, fits=True)
    return [replace(row, predicted_ms=float(v), fits=bool(f))
            for (_, row), v, f in zip(kept, predicted, fits, strict=True)]


def holdout_summary(rows: Sequence[HoldoutRow]) -> dict[str, Any]:
    """Mean and median |error|, the mean signed error, the shares within 10% and 25%, the
    rows predicted not to fit, and per (backend, hardware, model, GEMM precision) group
    its (mean |error|, mean signed error, rows).

    Examples
    --------
    >>> s = holdout_summary(holdout_rows())
    >>> 0.0 < s["median_abs_error"] <= s["mean_abs_error"] < 1.0
    True
    """
    if not rows:
        raise ValueError("holdout_summary needs rows; pass holdout_rows()")
    abs_err = [abs(r.error) for r in rows]
    groups: dict[tuple[str, str, str, str], list[float]] = {}
    for r in rows:
        key = (r.backend, r.hardware, r.model, "FP8" if r.fp8 else "16-bit")
        groups.setdefault(key, []).append(r.error)
    return {
        "n": len(rows),
        "mean_abs_error": sum(abs_err) / len(abs_err),
        "median_abs_error": statistics.median(abs_err),
        "mean_error": sum(r.error for r in rows) / len(rows),
        "within_10": sum(e <= 0.10 for e in abs_err) / len(rows),
        "within_25": sum(e <= 0.25 for e in abs_err) / len(rows),
        "not_fitting": sum(not r.fits for r in rows),
        "groups": {k: (sum(abs(e) for e in v) / len(v), sum(v) / len(v), len(v))
                   for k, v in sorted(groups.items())},
    }
