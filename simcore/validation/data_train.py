"""Public training measurements (``training_measurements.json``) as :class:`Measurement` s.

``training_measurements.json`` (and its ``.md``) holds 109 public training measurements
from 14 sources, transcribed with citations, raw values and notes. This module turns
the reproducible ones into :data:`TRAIN_MEASUREMENTS`, each keeping its citation (the
source's citation plus the row it comes from) and, in ``notes``, every setting the
source left implicit and the value assumed. :data:`TRAIN_SKIPPED` maps the others to
the reason (the table below).

Choices, per the sources' own notes:

* metric: the step time where the source states or derives one, else tokens/s per GPU,
  else model TFLOP/s per GPU counted with PaLM's convention (``model_tflops_per_gpu``);
* Llama 3 405B: its FSDP does not reshard after forward (ZeRO-2-like); modelled as one
  reduce-scatter + one all-gather per step (``zero_stage=1``), overlapped; its pipeline
  schedule is interleaved (section 3.3.2, Figure 6) with an unstated number of virtual
  stages: 2, as for every interleaved schedule whose count is not stated;
* torchtitan with pipelining keeps FSDP parameters gathered through the step
  (``reshard_after_forward = not pp_enabled`` in its ``apply_fsdp``): ``zero_stage=1``
  traffic and 6 + 12/d bytes of model states per parameter; torchtitan's "selective" checkpointing is per-op
  SAC (``recompute="op"``);
* the software stack: every row runs under the runtime its source (or, for torchtitan's
  end-2024 compiled rows, the row) names in the JSON (``"runtime"``,
  :data:`simcore.model.runtime.RUNTIMES`), whose profile fixes the framework's
  model-state formula and overlap, the gradient dtype, Transformer Engine's FP8 storage,
  eager or fused element-wise kernels, the eager fp32 loss and the attention kernel
  class: ``nemo`` / ``megatron-bridge`` (distributed optimizer, overlapped bf16
  gradient reduction, FP8-saved GEMM inputs; FP8 primary weights for Megatron-Bridge's
  ``fp8_cs`` runs), ``automodel``, ``llm-foundry`` and the torchtitan variants (FSDP2;
  torchtitan and llm-foundry with FlashAttention-2-class kernels; torchtitan 9dec370's
  eager loss; eager element-wise kernels where ``torch_compile`` is false),
  ``llama3-meta``, ``megatron-deepspeed`` (BLOOM);
* what a row sets against its runtime (:func:`_overrides`, listed in
  ``docs/validation.md``): Megatron-FSDP where the table's FSDP column is > 0, the
  ZeRO-2 sharding of llm-foundry's SHARD_GRAD_OP rows, torchtitan's gathered FSDP
  parameters under pipelining, TP communication overlap where the recipe turns it on
  (:data:`_TP_OVERLAP`), and the MoE recipes' dispatcher (DeepEP: one copy of a token per
  destination rank), all-to-all overlap and Automodel's FakeBalancedGate routing;
  Automodel's MoE benchmarks recompute every layer (``activation_checkpointing: true``
  in the configs the table lists);
* unstated micro-batch: 1, except pipelined torchtitan runs, whose schedule splits the
  local batch into PP micro-batches by default (``build_pipeline_schedule``:
  ``n_microbatches`` defaults to the pipeline degree); unstated recomputation: none; unstated precision: bf16;
  unstated global batch (torchtitan long-context tables): one micro-batch per replica
  and pipeline stage (torchtitan's default number of micro-batches);
* hardware: the ``H100-SXM``, ``H200`` and ``A100-80G`` presets; torchtitan's Grand
  Teton H100s are the 96 GB HBM2e / 500 W part (:data:`H100_96G`); systems larger than
  a preset's topology get more SiPs (same tiers and links).

Skipped points
--------------

================================  ==============================================================
point                             reason
================================  ==============================================================
mlm-readme-* (9)                  model shape not stated (FFN size, KV heads, embedding tying)
opt-175b-992gpu                   layout not stated (TP and DP unknown; a maximum, not a run)
korthikanti-*, sc21-* (11)        already in :mod:`simcore.validation.data` (kept there)
mb2511-qwen3-30b-a3b              superseded: the source's 26.02 and 26.02.01 tables measure one
                                  layout on the same system at 5,113 and 9,058 tokens/s/GPU (a
                                  software fix, 1.77x); 25.11's 5,275 is that software state. The
                                  26.02.01 and 26.04.01 rows are used
================================  ==============================================================

MoE runs with expert parallelism (Megatron-Bridge Qwen3-30B-A3B and Qwen3-235B-A22B,
Automodel DeepSeek-V3 and Qwen3-30B-A3B) are kept: the layout's ``ep`` comes from the
source, the models from the catalogue (Qwen3-30B-A3B; DeepSeek-V3 with MLA, one shared
expert and three leading dense layers) or, for Qwen3-235B-A22B, from its Hugging Face
config fields; routing is balanced (the sources force-balance their gates) and experts
are not tensor-parallel (expert TP 1, the only reading of EP 32 over TP 2 x DP 16).
"""

from __future__ import annotations

import json
import math
from dataclasses import replace
from pathlib import Path
from typing import Any

from ..model import presets
from ..model.runtime import Runtime, get_runtime
from ..model.specs import HardwareFamily, Model, Workload
from .points import Measurement

__all__ = ["H100_96G", "TRAIN_MEASUREMENTS", "TRAIN_SKIPPED", "load_points"]

_JSON = Path(__file__).with_name("training_measurements.json")

#: Grand Teton H100 (torchtitan benchmarks): 96 GB HBM2e at 2.4 TB/s, 500 W power limit
#: (the file's hardware note); NVLink4 and 400 Gb/s per GPU as the SXM part.
H100_96G = HardwareFamily(
    "H100-96G-HBM2e-500W",
    replace(presets.HARDWARE_FAMILIES["H100-SXM"].hardware, pe_hbm_gb=96.0, bw_hbm_gbs=2400.0),
    presets.HARDWARE_FAMILIES["H100-SXM"].topology,
    "H100 96GB HBM2e (2.4 TB/s), 500 W, Grand Teton: 8 per host with NVLink, 400 Gb/s per GPU",
)

#: TP communication overlap (``Workload.tp_comm_overlap``) per Megatron-family run, as its
#: recipe sets it per model (so a per-row override of the ``nemo`` / ``megatron-bridge``
#: profiles, which leave it off): NeMo-Framework-Launcher 24.07
#: ``launcher_scripts/conf/training/<model>.yaml`` ``ub_tp_comm_overlap`` (GPT-3 20B, Llama 2
#: 70B, Llama 3 70B, Nemotron 8B / 22B true; GPT-3 5B / 175B, Llama 2 7B / 13B, Llama 3 8B,
#: Nemotron 340B false); Megatron-Bridge's Llama 3 / 3.1 recipes ``tp_comm_overlap=True``
#: (``src/megatron/bridge/recipes/llama/llama3.py`` at v0.2.2, kept by
#: ``scripts/performance/configs/llama/`` at v0.4.2) and its Qwen3-235B-A22B H100 config
#: ``CommOverlapConfig(tp_comm_overlap=False)``. torchtitan's AsyncTP rows carry
#: ``async_tp`` in the transcription and keep the profile's (off). Megatron-Bridge's 25.09
#: Qwen3-235B-A22B H100 run: ``CommOverlapConfig(tp_comm_overlap=True)`` in
#: ``scripts/performance/run_script.py`` at fa0315ae2.
_TP_OVERLAP = {"nemo2407-gpt3-20b", "nemo2407-llama2-70b", "nemo2407-llama3-70b",
               "nemo2407-nemotron-8b", "nemo2407-nemotron-22b", "mb2511-llama3-70b",
               "mb2511-llama31-405b", "mb260401-llama3-70b", "mb260401-llama31-405b",
               "mb2509-qwen3-235b-a22b-h100-tokendrop"}


def load_points() -> dict[str, Any]:
    """The raw transcription (``{"sources": ..., "points": [...]}``)."""
    return json.loads(_JSON.read_text())


def _family(name: str, variant: str | None, n_gpus: int) -> HardwareFamily:
    fam = H100_96G if variant == "H100-96G-HBM2e-500W" else presets.HARDWARE_FAMILIES[name]
    topo = fam.topology
    if n_gpus > topo.n_devices:
        topo = replace(topo, n_sips=math.ceil(n_gpus / topo.pes_per_sip))
        fam = HardwareFamily(fam.name, fam.hardware, topo, fam.description)
    return fam


#: Hugging Face config of Qwen/Qwen3-235B-A22B (not in the catalogue): the fields the
#: transcription gives from the standard config, plus its ``intermediate_size`` (unused:
#: every layer is MoE) and ``model_type`` (QK-norm, untied embeddings).
_QWEN3_235B_HF = {"model_type": "qwen3_moe", "num_hidden_layers": 94, "hidden_size": 4096,
                  "num_attention_heads": 64, "num_key_value_heads": 4, "head_dim": 128,
                  "intermediate_size": 12288, "moe_intermediate_size": 1536,
                  "num_experts": 128, "num_experts_per_tok": 8, "vocab_size": 151936,
                  "tie_word_embeddings": False, "mlp_only_layers": [], "decoder_sparse_step": 1}


def _moe_model(m: dict[str, Any]) -> Model:
    """An MoE model: the catalogue's config where it has one (Qwen3-30B-A3B, DeepSeek-V3
    with MLA, one shared expert and three leading dense layers), else the config above."""
    cat = presets.catalogue()
    if m["hf_id"] in cat:
        model = cat[m["hf_id"]].model()
    elif m["hf_id"] == "Qwen/Qwen3-235B-A22B":
        model = Model.from_hf_dict(_QWEN3_235B_HF, name=m["hf_id"])
    else:  # pragma: no cover - every MoE point is one of the three
        raise ValueError(f"no config for the MoE model {m['hf_id']!r}")
    # the transcription's fields must agree with the config used
    for key, have in (("n_layers", model.n_layers), ("d_model", model.d_model),
                      ("n_experts", model.n_experts), ("top_k", model.top_k),
                      ("moe_d_ff", model.moe_d_ff or model.d_ff),  # 0: the FFN width
                      ("vocab_size", model.vocab_size)):
        if int(m[key]) != have:  # pragma: no cover - checked by the tests
            raise ValueError(f"{m['name']}: {key}={m[key]} but the config has {have}")
    return replace(model, name=m["name"])


def _model(m: dict[str, Any]) -> Model:
    if m.get("n_experts"):
        return _moe_model(m)
    kw: dict[str, Any] = {}
    if m.get("head_dim"):
        kw["head_dim"] = int(m["head_dim"])
    return Model(m["name"], n_layers=int(m["n_layers"]), d_model=int(m["d_model"]),
                 n_heads=int(m["n_heads"]), n_kv_heads=int(m["n_kv_heads"] or m["n_heads"]),
                 d_ff=int(m["d_ff"]), vocab_size=int(m["vocab_size"]),
                 gated_ffn=bool(m["gated_ffn"]), tied_embeddings=bool(m["tied_embeddings"]),
                 **kw)


def _skip_reason(p: dict[str, Any]) -> str | None:
    lay, m = p["layout"], p["model"]
    if p.get("already_in_simcore") or p["source"] in ("korthikanti2022", "narayanan2021"):
        return "already in simcore.validation.data"
    if not lay.get("tp") or not lay.get("dp"):
        return "layout not stated"
    if not m.get("n_experts") and (not m.get("d_ff") or m.get("gated_ffn") is None):
        return "model shape not stated (FFN size, KV heads, embedding tying)"
    if p.get("superseded"):
        return "superseded: " + p["superseded"]
    return None


def _recompute(r: str | None, runtime: str = "") -> str:
    """The source's recomputation as a :class:`Workload` ``recompute``; torchtitan's
    (and Trainy's torchtitan runs') "selective" is its per-op checkpointing (``"op"``)."""
    if not r:
        return "none"
    for k in ("full", "selective", "none"):
        if r.startswith(k):
            if k == "selective" and runtime.startswith("torchtitan"):
                return "op"
            return k
    return "none"


def _batch_sizes(w: dict[str, Any], src: str, dp: int, pp: int,
                 assumed: list[str]) -> tuple[int, Any]:
    """Micro-batch and global batch of a training row, with what was assumed where the
    source does not state them."""
    mb = w.get("micro_batch")
    batch = w.get("global_batch")
    if (mb is None and batch is not None and pp > 1 and src.startswith("torchtitan")
            and int(batch) % (dp * pp) == 0):
        # torchtitan's build_pipeline_schedule: n_microbatches defaults to the pipeline
        # degree ("The default value will be the number of pipeline stages")
        mb = int(batch) // (dp * pp)
        assumed.append(f"micro-batch {mb}: local batch / PP (torchtitan's default of PP "
                       "micro-batches)")
    if mb is None:
        mb = 1
        assumed.append("micro-batch 1")
    if batch is None:  # torchtitan: as many micro-batches as pipeline stages
        batch = mb * dp * pp
        assumed.append("global batch = one micro-batch per replica and pipeline stage "
                       "(torchtitan's default micro-batch count)" if pp > 1 else
                       "global batch = one micro-batch per replica")
    return mb, batch


def _runtime(p: dict[str, Any], sources: dict[str, Any]) -> Runtime:
    """The runtime the row ran (its own ``runtime`` key, else its source's)."""
    name = p.get("runtime") or sources[p["source"]].get("runtime")
    if not name:
        raise ValueError(f"{p['id']}: no runtime named by the point or its source "
                         "(training_measurements.json)")
    return get_runtime(name)


def _stack_notes(rt: Runtime, pp: int, precision: str, assumed: list[str]) -> None:
    """What the row's runtime profile implies, in the words of the notes."""
    if rt.name == "llama3-meta":
        assumed.append("Llama 3's FSDP as one gradient reduce-scatter and one parameter "
                       "all-gather per step (zero_stage=1 traffic), overlapped")
    if rt.name == "automodel" and pp > 1:
        assumed.append("Automodel FSDP2 with PP reshards parameters after forward "
                       "(zero_stage=3; not stated)")
    if rt.eager_elementwise:
        assumed.append("eager element-wise kernels (torch_compile false)")
    if rt.eager_loss:
        assumed.append("eager fp32 cross-entropy loss (torchtitan 9dec370 train.py)")
    if rt.grad_bytes == 2:
        assumed.append(f"bf16 gradient buffers and reduction (runtime {rt.name!r})")
    if precision == "fp8" and rt.fp8_saved_inputs:
        assumed.append("Transformer Engine keeps FP8 copies of the GEMM inputs for backward")
    if rt.attention == "flash2":
        assumed.append("a FlashAttention-2-class attention kernel (PyTorch SDPA's flash "
                       "backend / the flash-attn package)")


def _overrides(p: dict[str, Any], rt: Runtime, lay: dict[str, Any], w: dict[str, Any],
               tp: int, pp: int, ep: int, assumed: list[str]) -> dict[str, Any]:
    """The settings a row states against its runtime's profile, as explicit Workload
    keywords: the remaining per-point degrees of freedom (docs/validation.md lists them).
    Sharding is the job's own configuration; the others are what its recipe sets."""
    kw: dict[str, Any] = {}
    if rt.framework == "megatron" and lay.get("fsdp"):
        # the table's FSDP column > 0: Megatron-FSDP over the DP group (parameters,
        # gradients and optimizer states sharded, parameters gathered per layer)
        kw.update(framework="fsdp", zero_stage=3)
    elif rt.name.startswith("torchtitan") and pp > 1:
        # torchtitan's apply_fsdp: reshard_after_forward = not pp_enabled ("to avoid
        # per-microbatch all-gathers"): with pipelining the stage's parameters stay
        # gathered from the first forward to the last backward, gradients are
        # reduce-scattered once per step. Memory: 16-bit parameters and fp32 gradients
        # (FSDP2 accumulates unsharded gradients in its reduce dtype) whole, fp32 master
        # weights and Adam sharded: 6 + 12/d bytes per parameter, the formula simcore
        # keeps under framework="megatron" (distributed optimizer)
        assumed.append("torchtitan FSDP with PP keeps parameters gathered through the step "
                       "(reshard_after_forward = not pp_enabled): zero_stage=1 traffic, "
                       "6 + 12/d bytes of model states per parameter")
        kw.update(framework="megatron", zero_stage=1, overlap_grad_reduce=True)
    elif rt.framework == "fsdp" and lay.get("zero_stage") == 2:
        # llm-foundry's SHARD_GRAD_OP: DeepSpeed-style ZeRO-2 with overlap
        kw.update(framework="deepspeed", zero_stage=2, overlap_grad_reduce=True)
    if tp > 1 and p["id"] in _TP_OVERLAP:
        kw["tp_comm_overlap"] = True
        assumed.append("TP communication overlapped with the GEMMs (the recipe's "
                       "tp_comm_overlap)")
    kernels, notes = str(w.get("kernels") or ""), str(p.get("notes") or "")
    if ep > 1 and "DeepEP" in kernels:
        # DeepEP (and its hierarchical HybridEP) sends a token once to each destination
        # rank, not once per expert
        kw["moe_dispatch"] = "per_rank"
    if ep > 1 and "moe_a2a_overlap True" in kernels:
        # the recipe overlaps the EP all-to-all with another micro-batch's compute
        kw["moe_a2a_overlap"] = True
    if ep > 1 and lay.get("expert_tp"):  # the recipe's expert TP (Workload.expert_tp)
        kw["expert_tp"] = int(lay["expert_tp"])
    if ep > 1 and "fake balanced gate" in notes:
        # the page's note: Automodel's FakeBalancedGate routes token i to experts
        # i·k … i·k + k − 1 (nemo_automodel/components/moe/layers.py at 8d9bfb90)
        kw["moe_routing"] = "round_robin"
    return kw


def _measured_metric(by: dict[str, Any], assumed: list[str]) -> tuple[str, Any, str]:
    """The metric simcore compares with, its measured value and unit."""
    if "step_time" in by:
        return "latency", by["step_time"]["value"], "s"
    if "tokens_per_s_per_gpu" in by:
        return ("tokens_per_s_per_gpu", by["tokens_per_s_per_gpu"]["value"],
                "tokens/s/GPU")
    assumed.append("TFLOP/s compared with PaLM's 6N + 12Lsd count (the source's own "
                   "FLOP convention may differ)")
    return "model_tflops_per_gpu", by["tflops_per_gpu"]["value"], "TFLOP/s"


def _measured_mem_gib(point_id: str, by: dict[str, Any]) -> float | None:
    """The measured memory per GPU in GiB, if the source gives it."""
    mem = by.get("memory_gb_per_gpu")
    if mem is None:
        return None
    if mem.get("unit") != "GiB":  # pragma: no cover - every transcribed value is GiB
        raise ValueError(f"{point_id}: memory_gb_per_gpu in {mem.get('unit')!r}, not GiB")
    return float(mem["value"])


def _measurement(p: dict[str, Any], sources: dict[str, Any]) -> Measurement:
    lay, w, src = p["layout"], p["workload"], p["source"]
    tp, pp, cp, dp, ep = (int(lay.get(k) or 1) for k in ("tp", "pp", "cp", "dp", "ep"))
    assumed: list[str] = []
    mb, batch = _batch_sizes(w, src, dp, pp, assumed)
    precision = w.get("precision") or p.get("precision_inferred") or "bf16"
    if not w.get("precision"):
        assumed.append(f"{precision} (precision_inferred: see notes)"
                       if p.get("precision_inferred") else "bf16")
    if not w.get("recompute"):
        assumed.append("no recomputation")
    v = int(lay.get("vpp") or 1)
    # Llama 3 (section 3.3.2, Figure 6) runs Meta's interleaved schedule, count not stated
    interleaved = ("nterleaved" in str(lay.get("pp_schedule") or "")
                   or (src == "llama3_paper" and pp > 1))
    if lay.get("vpp") is None and interleaved:
        v = 2
        assumed.append("2 virtual stages per rank (interleaved 1F1B, count not stated)")
    rt = _runtime(p, sources)
    wl_kw = _overrides(p, rt, lay, w, tp, pp, ep, assumed)
    _stack_notes(rt, pp, precision, assumed)
    wl = Workload("train", batch=int(batch), s_kv=int(w["seq_len"]), micro_batch=int(mb),
                  recompute=_recompute(w.get("recompute"), rt.name), sequence_parallel=tp > 1,
                  precision=precision, virtual_stages=v, runtime=rt.name, **wl_kw)
    if wl.weight_dtype == "fp8":
        assumed.append("FP8 primary weights (fp8_param_gather=True in the fp8_cs "
                       "precision config)")
    by = {x["metric"]: x for x in p["measured"]}
    metric, value, unit = _measured_metric(by, assumed)
    layout = (("cp", cp), ("tp", tp), ("pp", pp), ("dp", dp)) + ((("ep", ep),) if ep > 1 else ())
    if ep > 1:
        assumed.append("balanced routing (the sources force-balance the experts, or drop "
                       "tokens at capacity factor 1 with padding)"
                       + ("" if lay.get("expert_tp") else "; expert tensor parallelism 1"))
    citation = f"{sources[src]['citation']}; {p['where']}"
    notes = "; ".join(filter(None, ["assumed: " + ", ".join(assumed) if assumed else "",
                                    p.get("notes", "")]))
    mem_gib = _measured_mem_gib(p["id"], by)
    return Measurement(p["id"], "train", _model(p["model"]),
                       _family(p["hardware"], p.get("hardware_variant"), int(p["n_gpus"])),
                       layout, wl, metric, float(value), unit, citation, src, notes,
                       measured_mem_gib=mem_gib)


def _build() -> tuple[tuple[Measurement, ...], dict[str, str]]:
    raw = load_points()
    kept, skipped = [], {}
    for p in raw["points"]:
        why = _skip_reason(p)
        if why:
            skipped[p["id"]] = why
        else:
            kept.append(_measurement(p, raw["sources"]))
    return tuple(kept), skipped


#: The reproducible points of ``training_measurements.json``, and the rest with reasons.
TRAIN_MEASUREMENTS, TRAIN_SKIPPED = _build()
