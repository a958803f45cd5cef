"""The public measurements simcore is validated against, with the models and systems behind them.

Every point names the run it reproduces: the paper and table (or the vendor page), the
model shape, the hardware, the parallel layout and the workload. Nothing here is
estimated: where a source left a setting implicit, the ``notes`` of the point say which
value was assumed and why. Each point names the software stack it ran (``Workload.runtime``,
:data:`_RUNTIMES`: ``megatron-2021``, ``trtllm-0.9``, ``lmdeploy-0.1``, ``fastertransformer``),
whose profile (:mod:`simcore.model.runtime`) fixes CUDA graphs, the attention core and the
model-state formula; no point sets them itself.

Sources
-------
* Narayanan et al., "Efficient Large-Scale Language Model Training on GPU Clusters Using
  Megatron-LM", SC'21, arXiv:2104.04473 — Table 2, PTD-P rows for the 174.6B GPT model.
* Korthikanti et al., "Reducing Activation Recomputation in Large Transformer Models",
  MLSys 2023, arXiv:2205.05198 — Table 5 (end-to-end iteration time) for the models and
  layouts of Table 3. The layouts and micro-batch sizes were cross-checked against the
  validation inputs of Calculon (github.com/calculon-ai/calculon, ``validation/*.json``).
* NVIDIA TensorRT-LLM, ``docs/source/performance.md`` (data of TensorRT-LLM v0.5), "Low
  Latency" tables, A100 FP16; ``docs/source/blogs/H100vsA100.md`` states the A100s were
  SXM 80GB.
* InternLM lmdeploy, ``docs/en/benchmark/a100_fp16.md`` (lmdeploy v0.1.0a1, 8x A100-80G,
  CUDA 11.8), "Static Inference Benchmark" tables.
* kipply, "Transformer Inference Arithmetic" (kipp.ly, 2022), section "comparing against
  real benchmarks": FasterTransformer with a 13B GPT on A100-40GB, as tabulated in
  cli99/llm-analysis ``examples/fastertransformer/README.md``.
"""

from __future__ import annotations

from ..model import presets
from ..model.specs import HardwareFamily, Model, Workload
from .points import Measurement

__all__ = [
    "A100_40G",
    "A100_80G",
    "FALCON_180B",
    "GPT_13B",
    "GPTJ_6B",
    "KIPPLY",
    "KORTHIKANTI",
    "LLAMA2_13B",
    "LLAMA2_70B",
    "LLAMA2_7B",
    "LMDEPLOY",
    "MEASUREMENTS",
    "MEGATRON_175B",
    "MEGATRON_1T",
    "MEGATRON_22B",
    "MEGATRON_530B",
    "SC21",
    "TRTLLM",
    "UNMODELLED",
]

# --- models ------------------------------------------------------------------------------


def _megatron_gpt(name: str, *, n_layers: int, d_model: int, n_heads: int) -> Model:
    """A Megatron-LM GPT: 4h FFN with GeLU, biases, tied embeddings, padded vocabulary 51200."""
    return Model(name, n_layers=n_layers, d_model=d_model, n_heads=n_heads, n_kv_heads=n_heads,
                 d_ff=4 * d_model, vocab_size=51200, gated_ffn=False, tied_embeddings=True,
                 attn_bias=True)


#: Korthikanti et al. 2022, Table 3 (sequence length 2048 for all four).
MEGATRON_22B = _megatron_gpt("Megatron GPT 22B", n_layers=48, d_model=6144, n_heads=64)
#: GPT-3 175B shape with Megatron's padded vocabulary (Narayanan et al. 2021; Korthikanti et al.).
MEGATRON_175B = _megatron_gpt("Megatron GPT 175B", n_layers=96, d_model=12288, n_heads=96)
MEGATRON_530B = _megatron_gpt("Megatron GPT 530B", n_layers=105, d_model=20480, n_heads=128)
MEGATRON_1T = _megatron_gpt("Megatron GPT 1T", n_layers=128, d_model=25600, n_heads=160)

#: meta-llama/Llama-2-13b-hf config.json.
LLAMA2_13B = Model("Llama 2 13B", n_layers=40, d_model=5120, n_heads=40, n_kv_heads=40,
                   d_ff=13824, vocab_size=32000)
#: tiiuae/falcon-180B as configured in TensorRT-LLM's performance docs (80 layers, 232 heads,
#: 8 KV heads, hidden 14848, GeLU 4h FFN, vocabulary 65024, no biases, untied embeddings).
#: Its parallel attention/FFN block does the same FLOPs and bytes as the sequential one.
FALCON_180B = Model("Falcon 180B", n_layers=80, d_model=14848, n_heads=232, n_kv_heads=8,
                    d_ff=4 * 14848, vocab_size=65024, gated_ffn=False)
#: EleutherAI/gpt-j-6b config.json (28 layers, 16 heads of 256, 4h FFN, vocabulary 50400);
#: a parallel block: one LayerNorm (``ln_1``) feeds attention and the MLP, whose outputs
#: join the residual in one add (transformers' ``GPTJBlock``)
GPTJ_6B = Model("GPT-J 6B", n_layers=28, d_model=4096, n_heads=16, n_kv_heads=16,
                d_ff=16384, vocab_size=50400, gated_ffn=False, n_norms_per_layer=1)
#: The 13B GPT of kipply's FasterTransformer benchmark (llm-analysis ``test-13b.json``).
GPT_13B = Model("GPT 13B", n_layers=40, d_model=5120, n_heads=40, n_kv_heads=40,
                d_ff=20480, vocab_size=50272, gated_ffn=False)

LLAMA2_7B = presets.PRESETS["Llama 2 7B"].model
LLAMA2_70B = presets.PRESETS["Llama 2 70B"].model

# --- hardware ----------------------------------------------------------------------------

#: DGX A100 (SXM4 80GB) clusters such as Selene: the ``A100-80G`` preset.
A100_80G = presets.HARDWARE_FAMILIES["A100-80G"]

#: DGX A100 with the 40GB SXM4 part (HBM2 1555 GB/s; NVIDIA A100 data sheet): the
#: ``A100-40G`` preset.
A100_40G = presets.HARDWARE_FAMILIES["A100-40G"]

# --- measurements ------------------------------------------------------------------------

SC21 = ("Narayanan et al., 'Efficient Large-Scale Language Model Training on GPU Clusters Using "
        "Megatron-LM', SC'21, arXiv:2104.04473, Table 2 (PTD-P rows, 174.6B GPT)")
KORTHIKANTI = ("Korthikanti et al., 'Reducing Activation Recomputation in Large Transformer "
               "Models', MLSys'23, arXiv:2205.05198, Table 5 (iteration time); layouts in Table 3")
TRTLLM = ("NVIDIA TensorRT-LLM, docs/source/performance.md (TensorRT-LLM v0.5 data), 'Low "
          "Latency' table 'A100 GPUs (FP16)', 1st token latency; A100 SXM 80GB per "
          "docs/source/blogs/H100vsA100.md")
LMDEPLOY = ("InternLM lmdeploy, docs/en/benchmark/a100_fp16.md (lmdeploy v0.1.0a1, 8x A100-80G, "
            "CUDA 11.8), 'Static Inference Benchmark'")
KIPPLY = ("kipply, 'Transformer Inference Arithmetic' (kipp.ly, 2022), section 'comparing against "
          "real benchmarks': FasterTransformer, 13B GPT, A100-40GB, context 512, batch 1, 10 "
          "generated tokens (tabulated in cli99/llm-analysis examples/fastertransformer/README.md)")

_REFS = {SC21: "Narayanan+21 T2", KORTHIKANTI: "Korthikanti+22 T5", TRTLLM: "TRT-LLM v0.5",
         LMDEPLOY: "lmdeploy v0.1", KIPPLY: "kipply FT"}
#: The runtime each source ran (:data:`simcore.model.runtime.RUNTIMES`): its settings come
#: from the profile, none from the points.
_RUNTIMES = {SC21: "megatron-2021", KORTHIKANTI: "megatron-2021", TRTLLM: "trtllm-0.9",
             LMDEPLOY: "lmdeploy-0.1", KIPPLY: "fastertransformer"}


def _train(mid: str, model: Model, *, tp: int, pp: int, dp: int, batch: int, micro_batch: int,
           recompute: str, sp: bool, metric: str, measured: float, unit: str, source: str,
           notes: str = "", virtual_stages: int = 1) -> Measurement:
    # the Megatron-LM of 2021-22 (runtime "megatron-2021"): fp16 with 18 B/param of model
    # states (no distributed optimizer), gradients all-reduced after the backward pass,
    # unfused attention (pre-FlashAttention)
    wl = Workload("train", batch=batch, s_kv=2048, micro_batch=micro_batch, recompute=recompute,
                  sequence_parallel=sp, virtual_stages=virtual_stages, runtime="megatron-2021")
    return Measurement(mid, "train", model, A100_80G, (("tp", tp), ("pp", pp), ("dp", dp)), wl,
                       metric, measured, unit, source, _REFS[source], notes)


def _infer(mid: str, kind: str, model: Model, family: HardwareFamily, *, tp: int, s_kv: int,
           measured: float, unit: str, source: str, notes: str = "") -> Measurement:
    wl = Workload(kind, batch=1, s_kv=s_kv, runtime=_RUNTIMES[source])
    return Measurement(mid, kind, model, family, (("tp", tp), ("pp", 1), ("dp", 1)), wl,
                       "latency", measured, unit, source, _REFS[source], notes)


_FULL = "full activation recomputation, no sequence parallelism ('full recompute' column)"
_SEL = "selective recomputation + sequence parallelism ('present work' column)"
_SC21_NOTE = ("{n} A100-80GB, batch 1536, micro-batch 1, full recomputation; model-parallel size "
              "96 assumed as TP 8 (one DGX node) x PP 12; data-parallel gradients all-reduced "
              "without ZeRO (Workload defaults); FLOP/s counted with the paper's Eq. 3")
_INTERLEAVED = ("; interleaved 1F1B with 3 virtual stages per device, as in Calculon's input "
                "for this run")


def _trt(key: str, model: Model, tp: int, isl: int, ms: float, note: str = "") -> Measurement:
    return _infer(f"trtllm-{key}-tp{tp}-in{isl}", "prefill", model, A100_80G, tp=tp, s_kv=isl,
                  measured=ms, unit="ms", source=TRTLLM,
                  notes=f"batch 1, input {isl} tokens, TP{tp}" + (f"; {note}" if note else ""))


def _lmdeploy_decode(key: str, model: Model, tp: int, tok_s: float) -> Measurement:
    return _infer(f"lmdeploy-{key}-tp{tp}-decode", "decode", model, A100_80G, tp=tp, s_kv=64,
                  measured=round(1000.0 / tok_s, 2), unit="ms", source=LMDEPLOY,
                  notes=f"{key}, batch 1, tp {tp}, 1 prompt token, 128 output tokens: {tok_s} "
                        "out tok/s, i.e. 1000/tok_s ms per output token; the context grows "
                        "1..129 tokens, evaluated at its mean (64)")


MEASUREMENTS: tuple[Measurement, ...] = (
    # -- training: Megatron-LM SC'21, GPT-3 175B on 384/768/1536 A100s ------------------
    *(
        _train(f"sc21-175b-{n}gpu", MEGATRON_175B, tp=8, pp=12, dp=n // 96, batch=1536,
               micro_batch=1, recompute="full", sp=False, metric="megatron_tflops_per_gpu",
               measured=v, unit="TFLOP/s", source=SC21, notes=_SC21_NOTE.format(n=n))
        for n, v in ((384, 153.0), (768, 149.0), (1536, 141.0))
    ),
    # -- training: Korthikanti et al. 2022, iteration time -----------------------------
    _train("korthikanti-22b-full", MEGATRON_22B, tp=8, pp=1, dp=1, batch=4, micro_batch=4,
           recompute="full", sp=False, metric="latency", measured=1.42, unit="s",
           source=KORTHIKANTI, notes=f"8 A100-80GB, batch 4; {_FULL}"),
    _train("korthikanti-22b-selective", MEGATRON_22B, tp=8, pp=1, dp=1, batch=4, micro_batch=4,
           recompute="selective", sp=True, metric="latency", measured=1.10, unit="s",
           source=KORTHIKANTI, notes=f"8 A100-80GB, batch 4; {_SEL}"),
    _train("korthikanti-175b-full", MEGATRON_175B, tp=8, pp=8, dp=1, batch=64, micro_batch=1,
           recompute="full", sp=False, metric="latency", measured=18.13, unit="s",
           source=KORTHIKANTI, notes=f"64 A100-80GB, batch 64; {_FULL}{_INTERLEAVED}", virtual_stages=3),
    _train("korthikanti-175b-selective", MEGATRON_175B, tp=8, pp=8, dp=1, batch=64,
           micro_batch=1, recompute="selective", sp=True, metric="latency", measured=13.75,
           unit="s", source=KORTHIKANTI, notes=f"64 A100-80GB, batch 64; {_SEL}{_INTERLEAVED}", virtual_stages=3),
    _train("korthikanti-530b-full", MEGATRON_530B, tp=8, pp=35, dp=1, batch=280, micro_batch=1,
           recompute="full", sp=False, metric="latency", measured=49.05, unit="s",
           source=KORTHIKANTI, notes=f"280 A100-80GB, batch 280; {_FULL}{_INTERLEAVED}", virtual_stages=3),
    _train("korthikanti-530b-selective", MEGATRON_530B, tp=8, pp=35, dp=1, batch=280,
           micro_batch=1, recompute="selective", sp=True, metric="latency", measured=37.83,
           unit="s", source=KORTHIKANTI, notes=f"280 A100-80GB, batch 280; {_SEL}{_INTERLEAVED}", virtual_stages=3),
    _train("korthikanti-1t-full", MEGATRON_1T, tp=8, pp=64, dp=1, batch=512, micro_batch=1,
           recompute="full", sp=False, metric="latency", measured=94.42, unit="s",
           source=KORTHIKANTI, notes=f"512 A100-80GB, batch 512; {_FULL}"),
    _train("korthikanti-1t-selective", MEGATRON_1T, tp=8, pp=64, dp=1, batch=512, micro_batch=1,
           recompute="selective", sp=True, metric="latency", measured=71.49, unit="s",
           source=KORTHIKANTI, notes=f"512 A100-80GB, batch 512; {_SEL}"),
    # -- prefill: TensorRT-LLM v0.5 time to first token, A100 FP16 ------------------------
    _trt("gptj-6b", GPTJ_6B, 1, 2048, 129.0),
    _trt("llama-70b", LLAMA2_70B, 4, 2048, 377.0, "'LLaMA 70B' is Llama 2 70B (8 KV heads)"),
    _trt("falcon-180b", FALCON_180B, 8, 2048, 509.0),
    # the same table at 128 prompt tokens (ridge-point GEMMs: the roofline overlap matters)
    _trt("gptj-6b", GPTJ_6B, 1, 128, 12.0),
    _trt("llama-7b", LLAMA2_7B, 1, 128, 16.0, "'LLaMA 7B' has the Llama 2 7B shape"),
    _trt("llama-70b", LLAMA2_70B, 4, 128, 47.0, "'LLaMA 70B' is Llama 2 70B (8 KV heads)"),
    _trt("falcon-180b", FALCON_180B, 8, 128, 61.0),
    # -- prefill and decode: lmdeploy v0.1.0a1, A100-80G fp16 -----------------------------
    _infer("lmdeploy-llama2-13b-tp1-ftl2048", "prefill", LLAMA2_13B, A100_80G, tp=1, s_kv=2048,
           measured=242.0, unit="ms", source=LMDEPLOY,
           notes="llama2-13b, batch 1, tp 1, 2048 prompt tokens: FTL(ave) 0.242 s"),
    _infer("lmdeploy-llama2-70b-tp4-ftl2048", "prefill", LLAMA2_70B, A100_80G, tp=4, s_kv=2048,
           measured=402.0, unit="ms", source=LMDEPLOY,
           notes="llama2-70b, batch 1, tp 4, 2048 prompt tokens: FTL(ave) 0.402 s"),
    _lmdeploy_decode("llama2-7b", LLAMA2_7B, 1, 100.02),
    _lmdeploy_decode("llama2-13b", LLAMA2_13B, 1, 57.49),
    _lmdeploy_decode("llama2-70b", LLAMA2_70B, 4, 33.94),
    # -- FasterTransformer 13B on A100-40GB, 1 vs 2 GPUs (kipply) -------------------------
    _infer("ft-gpt13b-tp1-prefill512", "prefill", GPT_13B, A100_40G, tp=1, s_kv=512,
           measured=63.17, unit="ms", source=KIPPLY, notes="1 GPU, prefill of 512 tokens"),
    _infer("ft-gpt13b-tp2-prefill512", "prefill", GPT_13B, A100_40G, tp=2, s_kv=512,
           measured=45.45, unit="ms", source=KIPPLY, notes="2 GPUs (TP2), prefill of 512 tokens"),
    _infer("ft-gpt13b-tp1-decode", "decode", GPT_13B, A100_40G, tp=1, s_kv=517, measured=22.0,
           unit="ms", source=KIPPLY,
           notes="1 GPU, per generated token; context 512..522, evaluated at its mean (517)"),
    _infer("ft-gpt13b-tp2-decode", "decode", GPT_13B, A100_40G, tp=2, s_kv=517, measured=13.5,
           unit="ms", source=KIPPLY,
           notes="2 GPUs (TP2), per generated token; context 512..522, evaluated at its mean"),
)

_SUPERSEDED_V09 = ("superseded: the same document's v0.9.0 table measures the same "
                   "configuration (A100-80G, TP1, batch 1, 2048 input tokens, FP16) at "
                   "132.4 ms (trt09-a100-llama7b-ttft2048, used)")

#: Published measurements listed by ``simcore validate --unmodelled`` and never counted in
#: the error: ones the cost model does not cover yet, and ones a later table of the same
#: source supersedes. Each ``notes`` says why.
UNMODELLED: tuple[Measurement, ...] = (
    _trt("llama-7b", LLAMA2_7B, 1, 2048, 133.0, _SUPERSEDED_V09),
)
