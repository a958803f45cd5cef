"""The weight-only and multi-node inference held-out set, never fitted.

``multinode_quant_measurements.json`` (transcribed for issue 32 item 6;
``docs/sources/cross_node.md`` section 4) holds 23 cited inference points: gpt-fast's and
torchao's batch-1 decode on an A100 with weight-only INT8 / INT4 weights and their bf16
baselines (Llama 2 7B / 70B, Llama 3 8B; 1 GPU and TP8 on one node), and DeepSeek-R1 runs
across nodes (SGLang, vLLM, DeepSeek's own service). No fitted factor saw them
(:data:`simcore.validation.MEASUREMENTS` does not hold them): they are reported beside the
fitted error by ``simcore validate``, never folded into it.

What is used
------------
The gpt-fast README's and the torchao quantization README's tokens/s, each a whole
``generate()`` call timed by the script: ``tokens_generated / t``, ``t`` from before the
prompt's prefill to the last token (gpt-fast generate.py @9ac48bc lines 335-371, torchao
torchao/_models/llama/generate.py @03d01adc lines 344-380). Both scripts run their default
``--prompt "Hello, my name is"`` (5 tokens as gpt-fast's README counts them) and
``--max_new_tokens 200`` (gpt-fast line 393; torchao's benchmark_results.txt @03d01adc
lines 6-21 print the repro command of each row: ``--max_new_tokens 200 --compile``,
``compile_prefill: False``, ``dtype: torch.bfloat16``), so each row is a
:class:`~simcore.validation.points.Measurement` with ``steps``: the eager prefill of 5
tokens, then 199 decode steps over the growing context, summed by Simpson's rule
(:func:`simcore.validation.data_infer._whole_run`, as a static batch: no chunking), under
the ``gpt-fast`` runtime profile (:mod:`simcore.model.runtime`: CUDA graphs in decode,
``torch.compile(mode="reduce-overhead")``). The points are converted with
:mod:`~simcore.validation.data_infer`'s helpers (``_model``, ``_dtype``, ``_value``,
``_runtime``); the weights' format is the row's technique (:func:`_quant_format`):

* INT4: torch's ``tinygemm`` layout, a 16-bit scale and a 16-bit zero per group
  (``quant_zeros="fp16"``): gpt-fast quantize.py @9ac48bc lines 85-90 and 504
  (``scales_and_zeros``, bf16, ``in_features // groupsize`` x ``out_features`` x 2), torchao
  ``int4_weight_only`` @03d01adc torchao/quantization/quant_api.py lines 449-457 (bf16 zero
  point in the float domain); the group size is the row's (32 or 64).
* INT8: one bf16 scale per output channel (``quant_group=0``): gpt-fast quantize.py lines
  347-350, torchao ``int8_weight_only`` (quant_api.py line 471, ``block_size = (1, K)``).
* Activations stay bf16 (``act_dtype="bf16"``, weight-only: W4A16 / W8A16), as does the KV
  cache (gpt-fast model.py line 62).

The torchao README at 03d01adc says only "a single A100 GPU"; a later version of the same
README (@03b83ec5fcfb89b42941fd8b1805e04cb6cb9f52, 2025-03-05, line 5) prints the same rows
under "a single NVIDIA-A100-80GB GPU", so they run on ``A100-80G``.

What simcore lacks (rows kept with their error, nothing tuned)
---------------------------------------------------------------
The A100 family's weight-only rates (``Topology.wo_int4_bw_ratio`` / ``wo_int8_bw_ratio``
= 1) are Marlin's: its W4A16 kernel streams its bytes as fast as a 16-bit GEMM. gpt-fast
and torchao run torch's ``tinygemm`` kernel (``torch.ops.aten._weight_int4pack_mm``) for
INT4 and an Inductor-generated dequantising GEMV for INT8; simcore has no rate for either,
so those rows read fast. gpt-fast's A100s are power-limited to 330 W (its README: "peak
bandwidth is about 1700 GB/s"); simcore's A100-80G is the 400 W part.

Skipped, with the reason (:func:`weight_only_skipped`)
------------------------------------------------------
Every multi-node point: DeepSeek's 24-hour production averages, the Kempner vLLM runs
(no fixed input / output lengths, "tokens/s" undefined), the Tenstorrent SGLang rows
(layout and node split not stated), and InferenceX's disaggregated H100 run (MTP
speculative decoding with no acceptance rate, values quoted by a third party). So the set
has no reproducible multi-node point yet.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

from ..model import presets
from ..model.specs import Efficiency
from .data_infer import _dtype, _model, _runtime, _value, _whole_run
from .points import Measurement, SignedError, error_stats

__all__ = ["NEW_TOKENS", "PROMPT_TOKENS", "RUNTIME_BY_SOURCE", "SOURCES", "WeightOnlyRow",
           "load_weight_only", "weight_only_rows", "weight_only_skipped",
           "weight_only_summary"]

_JSON = Path(__file__).with_name("multinode_quant_measurements.json")

#: The sources reproduced, by the JSON's source id: their short label (the runtime each ran:
#: :data:`RUNTIME_BY_SOURCE`).
SOURCES: dict[str, str] = {"gptfast_readme": "gpt-fast README",
                           "torchao_quant_readme": "torchao quantization README"}
#: The runtime profile (:data:`simcore.model.runtime.RUNTIMES`) each source ran.
RUNTIME_BY_SOURCE: dict[str, str] = {"gptfast_readme": "gpt-fast",
                                     "torchao_quant_readme": "gpt-fast"}
#: The default prompt of both scripts, "Hello, my name is": 5 tokens (gpt-fast README,
#: "just 5 tokens"); used where a row leaves its prompt length unstated (torchao).
PROMPT_TOKENS = 5
#: Tokens generated per timed run: both scripts' ``--max_new_tokens`` default (see the
#: module docstring).
NEW_TOKENS = 200

#: The family a row's ``hardware`` text names, and the note when it is read, not printed.
_HARDWARE: dict[str, tuple[str, str]] = {
    "A100-80G": ("A100-80G", ""),
    "A100 (memory size not stated)": (
        "A100-80G", "A100-80GB per the same README at 03b83ec5 (2025-03-05, line 5: 'a single "
        "NVIDIA-A100-80GB GPU', same rows)"),
}

#: Why each source the set cannot reproduce is skipped (all multi-node).
_SKIPPED: dict[str, str] = {
    "deepseek_infra_day6": "24-hour production average over all DeepSeek-V3 / R1 traffic "
                           "(in-house engine): no fixed batch, lengths or per-GPU layout",
    "kempner_dsr1_vllm": "chat prompts sent without max_tokens: input / output lengths "
                         "neither fixed nor stated, and 'tokens/s' not defined",
    "tenstorrent_dsr1_gpu": "16 H100 over InfiniBand, but the TP / EP / DP flags and the "
                            "node split are not stated",
    "inferencex_h100_disagg": "MTP speculative decoding with no acceptance rate stated "
                              "(TPOT per accepted token); values quoted by a third party, "
                              "whose reproduction ran 1.7-1.9x faster",
}

#: The weight-only format of each row's technique text (see :func:`_quant_format`).
_GROUP = re.compile(r"group size (\d+)")


@dataclass(frozen=True)
class WeightOnlyRow(SignedError):
    """One held-out point: measured and predicted value in the point's unit and the signed
    relative error (``predicted / measured - 1``; for tokens/s, + means simcore predicts
    it faster). ``dtype`` is the weights' (``int4``, ``int8``, ``bf16``)."""

    id: str
    dtype: str
    hardware: str
    model: str
    layout: str
    nodes: int
    metric: str
    unit: str
    measured: float
    predicted: float = float("nan")


def _quant_format(pid: str, weight_dtype: str) -> tuple[dict[str, Any], str]:
    """(the Workload's weight-only keywords, a note) for a row's ``weight_dtype`` text:
    INT4 in the tinygemm layout with the row's group size, INT8 per output channel (see
    the module docstring); nothing for 16-bit weights."""
    wd = _dtype(weight_dtype)
    if wd == "int4":
        m = _GROUP.search(weight_dtype)
        if m is None:
            raise ValueError(f"{pid}: int4 weight_dtype {weight_dtype!r} states no 'group "
                             "size N'; the group scales' bytes need it")
        g = int(m.group(1))
        return (dict(quant_group=g, quant_zeros="fp16"),
                f"INT4 weight-only, tinygemm layout: a bf16 scale and zero per {g} weights")
    if wd == "int8":
        return dict(quant_group=0), "INT8 weight-only, one bf16 scale per output channel"
    if wd in ("bf16", "fp16"):
        return {}, "16-bit weights"
    raise ValueError(f"{pid}: weight_dtype {weight_dtype!r} is not one this set reproduces "
                     "(int4 / int8 weight-only, or bf16)")


def _measurement(p: dict[str, Any], sources: dict[str, Any]) -> Measurement:
    """A gpt-fast / torchao row as a whole-run :class:`Measurement` (module docstring)."""
    pid, w, lay = p["id"], p["workload"], p["layout"]
    if p["hardware"] not in _HARDWARE:
        raise ValueError(f"{pid}: hardware {p['hardware']!r} is not one of {list(_HARDWARE)}")
    fam_name, fam_note = _HARDWARE[p["hardware"]]
    model = _model(p["model"])
    if model is None:  # pragma: no cover - the rows are dense Llamas
        raise ValueError(f"{pid}: model architecture not described by simcore")
    fmt, fmt_note = _quant_format(pid, str(w.get("weight_dtype")))
    dt: dict[str, Any] = dict(weight_dtype=_dtype(w["weight_dtype"]), act_dtype="bf16",
                              kv_dtype=_dtype(w.get("kv_dtype")) or "bf16", **fmt,
                              **_runtime(p, {"runtime": RUNTIME_BY_SOURCE[p["source"]]}))
    batch = int(w["batch"])
    isl = int(w.get("isl") or PROMPT_TOKENS)
    last, steps, note = _whole_run(batch, isl, NEW_TOKENS, dt, vllm=False)
    thr = _value(p, "output_tokens_per_s")
    if thr is None:
        raise ValueError(f"{pid}: no output_tokens_per_s to compare")
    layout = (("tp", int(lay.get("tp") or 1)), ("pp", int(lay.get("pp") or 1)),
              ("dp", int(lay.get("dp") or 1)))
    notes = "; ".join(filter(None, [
        f"{p['where']} [json id {pid}]", f"{note} ({NEW_TOKENS} = --max_new_tokens default"
        + ("" if w.get("isl") else f"; prompt {isl} tokens, the default 'Hello, my name is'")
        + ")", fmt_note, fam_note, f"runtime {dt['runtime']}"]))
    return Measurement(f"{pid}:thr", "decode", model, presets.HARDWARE_FAMILIES[fam_name],
                       layout, last, "output_tokens_per_s", thr, "tok/s",
                       sources[p["source"]]["citation"], SOURCES[p["source"]], notes,
                       steps=steps, generated=NEW_TOKENS)


@lru_cache(maxsize=1)
def _load() -> tuple[tuple[Measurement, ...], tuple[tuple[str, str], ...],
                     dict[str, tuple[str, int]]]:
    data = json.loads(_JSON.read_text(encoding="utf-8"))
    kept: list[Measurement] = []
    skipped: list[tuple[str, str]] = []
    meta: dict[str, tuple[str, int]] = {}
    for p in data["points"]:
        src = p["source"]
        if src in RUNTIME_BY_SOURCE:
            m = _measurement(p, data["sources"])
            kept.append(m)
            meta[m.id] = (_dtype(p["workload"]["weight_dtype"]), int(p.get("nodes") or 1))
        else:
            skipped.append((p["id"], _SKIPPED.get(
                src, f"source {src!r} has no runtime profile in simcore.validation."
                     "weight_only.RUNTIME_BY_SOURCE")))
    return tuple(kept), tuple(skipped), meta


def load_weight_only() -> tuple[Measurement, ...]:
    """The held-out weight-only / multi-node points simcore reproduces.

    Examples
    --------
    >>> pts = load_weight_only()
    >>> len(pts), {m.workload.runtime for m in pts}
    (14, {'gpt-fast'})
    """
    return _load()[0]


def weight_only_skipped() -> tuple[tuple[str, str], ...]:
    """(point id, reason) of every point of the set simcore cannot reproduce."""
    return _load()[1]


def weight_only_rows(efficiency: Efficiency | None = None) -> list[WeightOnlyRow]:
    """Predict every held-out point (default: the fitted factors).

    Examples
    --------
    >>> rows = weight_only_rows()
    >>> sorted({r.dtype for r in rows}), all(r.predicted > 0 for r in rows)
    (['bf16', 'int4', 'int8'], True)
    """
    from .fitted import FITTED_EFFICIENCY
    from .points import predict

    eff = FITTED_EFFICIENCY if efficiency is None else efficiency
    if not isinstance(eff, Efficiency):
        raise ValueError(f"efficiency must be a simcore.Efficiency, got {type(eff).__name__}")
    meta = _load()[2]
    return [WeightOnlyRow(m.id, meta[m.id][0], m.family.name, m.model.name,
                          " ".join(f"{k.upper()}{v}" for k, v in m.layout if v > 1) or "1 GPU",
                          meta[m.id][1], m.metric, m.unit,
                          m.measured, float(predict(m, efficiency=eff)))
            for m in load_weight_only()]


def weight_only_summary(rows: Sequence[WeightOnlyRow]) -> dict[str, Any]:
    """Mean |error| and mean signed error over the rows and per weight dtype
    (``{"dtypes": {dtype: (mean |error|, mean signed error, rows)}}``), and the number of
    rows that cross a node (``multi_node``).

    Examples
    --------
    >>> s = weight_only_summary(weight_only_rows())
    >>> s["n"], list(s["dtypes"]), s["multi_node"]
    (14, ['int4', 'int8', 'bf16'], 0)
    """
    if not rows:
        raise ValueError("weight_only_summary needs rows; pass weight_only_rows()")

    by_dtype: dict[str, list[float]] = {}
    for r in rows:
        by_dtype.setdefault(r.dtype, []).append(r.error)
    mean_abs, mean, n = error_stats([r.error for r in rows])
    return {"n": n, "mean_abs_error": mean_abs, "mean_error": mean,
            "dtypes": {d: error_stats(by_dtype[d]) for d in ("int4", "int8", "bf16")
                       if d in by_dtype},
            "multi_node": sum(r.nodes > 1 for r in rows)}
