"""Runtime profiles: the settings a software stack fixes, declared once with their sources.

A user runs a model under one stack (vLLM, TensorRT-LLM, Megatron-LM, torchtitan, ...),
and that stack decides things the user never types: whether decode steps replay CUDA
graphs, whether element-wise ops run as fused kernels, which attention kernel class the
training step runs, whose model-state formula and gradient-reduction overlap apply, how
the loss keeps its logits. :data:`RUNTIMES` declares each stack's choices as a frozen
:class:`Runtime`, each with the one line citing where the setting is that stack's default
(its documentation, or the repository path and commit). ``Workload(runtime=NAME)``
applies the profile (:func:`resolve`); a field passed explicitly overrides it.

Only settings the engine consumes are declared (the :class:`~simcore.model.workload.Workload`
fields of :data:`PROFILE_FIELDS`, and :attr:`Runtime.graph_max_ctx`, which turns CUDA
graphs off above a context length). The name ``""`` is the library's default stack:
today's :class:`Workload` defaults, on which the golden numbers and the validation are
pinned.

Examples
--------
>>> from simcore.model.workload import Workload
>>> Workload("decode", runtime="vllm").cuda_graphs
True
>>> Workload("decode", runtime="hf-eager").cuda_graphs
False
>>> Workload("decode", runtime="vllm", cuda_graphs=False).cuda_graphs  # explicit wins
False
>>> w = Workload("train", runtime="torchtitan")
>>> w.framework, w.zero_stage, w.attention, w.eager_elementwise
('fsdp', 3, 'flash2', True)
>>> get_runtime("vlm")
Traceback (most recent call last):
...
simcore.errors.SpecError: unknown runtime 'vlm'; did you mean 'vllm'? Known: ...
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..errors import SpecError
from .checks import did_you_mean

__all__ = ["DEFAULT_RUNTIME", "PROFILE_FIELDS", "RUNTIMES", "Runtime", "check_family",
           "get_runtime", "host_wait_text", "resolve", "runtime_help", "runtime_names",
           "unknown_runtime"]

#: The library's default runtime: today's Workload defaults (the validation's and the
#: golden numbers' reference).
DEFAULT_RUNTIME = ""

#: Workload fields a runtime profile sets (where the caller leaves them unset).
PROFILE_FIELDS: tuple[str, ...] = (
    "cuda_graphs", "host_step_ns", "host_seq_ns", "mla_decode_ns", "attention",
    "eager_elementwise", "eager_loss", "framework", "zero_stage", "overlap_grad_reduce",
    "grad_bytes", "moe_dispatch", "moe_routing", "moe_a2a_overlap", "tp_comm_overlap")

#: Every inference matmul-input dtype simcore models (``Workload.act_dtype``).
_ALL_ACT = ("bf16", "fp16", "fp8", "int8", "fp4", "mxfp4")
#: Stacks released before Blackwell: no FP4 (NVFP4 / MXFP4) matmuls.
_PRE_FP4 = ("bf16", "fp16", "fp8", "int8")


@dataclass(frozen=True)
class Runtime:
    """One software stack's settings.

    Parameters
    ----------
    name : str
        What ``--runtime`` / ``Workload.runtime`` takes.
    stack : str
        The stack (and version) in words.
    source : str
        Where its settings are its defaults: documentation, or repository path @ commit.
    serves, trains : bool
        Whether the stack runs inference (prefill / decode) and training steps; a
        workload of a mode its runtime does not run is refused.
    cuda_graphs : bool
        Decode steps replay CUDA graphs (``Workload.cuda_graphs``).
    graph_max_ctx : int
        With ``cuda_graphs``: graphs are captured only up to this context; longer decode
        steps run eagerly (0 = no limit).
    host_step_ns : float
        Inference: the serving loop's host time per step that does not overlap the
        device (``Workload.host_step_ns``); 0 where the stack overlaps it or no
        measurement is cited.
    host_seq_ns : float
        Inference: the engine's host time per scheduled sequence per step that does not
        overlap the device (``Workload.host_seq_ns``): a synchronous scheduler that
        schedules, prepares the inputs and processes the outputs between steps; 0 where
        the stack schedules one step ahead (its per-sequence host work then runs under
        the device's step: ``Efficiency.seq_overhead_ns``) or no measurement is cited.
    mla_decode_ns : float
        Decode: device time per layer the stack's MLA attention op (DeepSeek-V2/V3) takes
        beyond a GQA decode attention op at small batch (``Workload.mla_decode_ns``); 0
        where no measurement of the stack's kernels is cited.
    attention : str
        The attention kernel class (``Workload.attention``): training and, since the
        inference kernels price it, prefill / decode too (``"flash2"``: a
        FlashAttention-2-class kernel, at ``Topology.fa2_ratio`` of the native rate).
    eager_elementwise, eager_loss, framework, zero_stage, overlap_grad_reduce, grad_bytes, moe_dispatch, moe_routing, moe_a2a_overlap, tp_comm_overlap
        Training settings, as the :class:`~simcore.model.workload.Workload` fields of the
        same names.
    fp8_saved_inputs : bool
        FP8 training (``precision="fp8"``) saves the FP8 copies of the GEMM inputs for the
        backward (Transformer Engine's ``Linear``): ``Workload.act_dtype="fp8"``.
    fp8_params : bool
        FP8 training keeps FP8 primary weights (``fp8_param_gather``) where the
        distributed optimizer runs (``framework="megatron"``, ``zero_stage=1``, no
        offload): ``Workload.weight_dtype="fp8"``.
    act_dtypes : tuple of str
        Inference matmul-input dtypes the stack runs (``Workload.act_dtype``); the family
        must also have the rate (``Topology.fp8_ratio`` ...).
    precisions : tuple of str
        Training precisions the stack runs (``Workload.precision``).
    """

    name: str
    stack: str
    source: str
    serves: bool = True
    trains: bool = True
    cuda_graphs: bool = False
    graph_max_ctx: int = 0
    host_step_ns: float = 0.0
    host_seq_ns: float = 0.0
    mla_decode_ns: float = 0.0
    attention: str = "flash"
    eager_elementwise: bool = False
    eager_loss: bool = False
    framework: str = "deepspeed"
    zero_stage: int = 0
    overlap_grad_reduce: bool | None = None
    grad_bytes: int = 4
    moe_dispatch: str = "per_expert"
    moe_routing: str = "random"
    moe_a2a_overlap: bool = False
    tp_comm_overlap: bool = False
    fp8_saved_inputs: bool = False
    fp8_params: bool = False
    act_dtypes: tuple[str, ...] = _ALL_ACT
    precisions: tuple[str, ...] = ("fp16", "bf16", "fp32", "fp8")

    def setting(self, field: str, mode: str, s_kv: int) -> Any:
        """The profile's value of Workload ``field`` for a ``mode`` step at context ``s_kv``
        (CUDA graphs only in decode, and only up to :attr:`graph_max_ctx`)."""
        if field == "cuda_graphs":
            return (self.cuda_graphs and mode == "decode"
                    and (not self.graph_max_ctx or s_kv <= self.graph_max_ctx))
        if field == "host_step_ns":
            return 0.0 if mode == "train" else self.host_step_ns
        if field == "host_seq_ns":
            return 0.0 if mode == "train" else self.host_seq_ns
        if field == "mla_decode_ns":
            return self.mla_decode_ns if mode == "decode" else 0.0
        return getattr(self, field)

    def modes(self) -> str:
        return " and ".join(filter(None, ["inference" if self.serves else "",
                                          "training" if self.trains else ""]))

    def describe(self, host: bool = True) -> str:
        """The profile in one line: what it fixes (the header's words); ``host=False``
        leaves out the serving loop's host time (:func:`host_wait_text`), for a caller that
        places it itself."""
        parts = []
        if self.serves:
            graphs = ("CUDA graphs in decode" + (f" up to {self.graph_max_ctx} tokens of "
                                                 "context" if self.graph_max_ctx else "")
                      if self.cuda_graphs else "eager decode")
            wait = host_wait_text(self.host_step_ns, self.host_seq_ns) if host else ""
            mla = (f", MLA decode attention +{self.mla_decode_ns / 1e3:g} us per layer"
                   if self.mla_decode_ns else "")
            parts.append(graphs + (f", {wait}" if wait else "") + mla)
        if self.trains:
            parts.append(f"{self.framework} model states"
                         + (f" ZeRO-{self.zero_stage}" if self.zero_stage else "")
                         + (", eager" if self.eager_elementwise else ", fused")
                         + " element-wise kernels, "
                         + ("eager fp32 loss, " if self.eager_loss else "")
                         + f"{self.attention} attention")
        return "; ".join(parts)


def host_wait_text(host_step_ns: float, host_seq_ns: float) -> str:
    """The serving loop's host time the device waits for on every step, in words (``""``
    when there is none): ``Workload.host_step_ns`` and ``host_seq_ns``."""
    parts = ([f"{host_step_ns / 1e6:g} ms a step"] if host_step_ns else []) + (
        [f"{host_seq_ns / 1e3:g} us per scheduled sequence a step"] if host_seq_ns else [])
    return f"the device waits for the host's {' + '.join(parts)}" if parts else ""


_HF = "huggingface/transformers"
_MBRIDGE_CFG = ("NVIDIA-NeMo/Megatron-Bridge scripts/performance/configs/ at v0.2.2 "
                "(0465189601951c14ad592bd8eefbb673929e25bc) and v0.4.2 "
                "(c810129341a84e58f4cbed3093f70668a088c028)")


#: torchtitan's FSDP2 (full sharding) and PyTorch SDPA flash backend, in every version
_TITAN: dict[str, Any] = dict(framework="fsdp", zero_stage=3, attention="flash2")


def _serving(name: str, stack: str, source: str, *, graphs: bool, max_ctx: int = 0,
             act: tuple[str, ...] = _ALL_ACT, **kw: Any) -> Runtime:
    return Runtime(name, stack, source, serves=True, trains=False, cuda_graphs=graphs,
                   graph_max_ctx=max_ctx, act_dtypes=act, **kw)


def _training(name: str, stack: str, source: str, **kw: Any) -> Runtime:
    return Runtime(name, stack, source, serves=False, trains=True, **kw)


_ALL: tuple[Runtime, ...] = (
    Runtime(DEFAULT_RUNTIME, "simcore's library default (no named stack)",
            "simcore.model.workload.Workload defaults: eager decode, fused kernels, "
            "DeepSpeed's model-state formulas; the validation's reference"),
    # -- serving ------------------------------------------------------------------------
    _serving("vllm", "vLLM (V1 engine)",
             "vllm-project/vllm vllm/engine/arg_utils.py @99d7eb5d6a512cfcc5a2b104f24ebf2d6cda772b: "
             "EngineArgs.enforce_eager = False (decode steps replay captured CUDA graphs)",
             graphs=True),
    _serving("vllm-0.10", "vLLM 0.9-0.10 (V1 engine, synchronous scheduling)",
             "the vllm 0.10.0 wheel on PyPI (sha256 8ca37559d82b43b5e8c8248d2e4a1ecb51d6d4e5"
             "d517491d656df6491ed93dab): vllm/config.py SchedulerConfig.async_scheduling = "
             "False ('EXPERIMENTAL', since vllm-project/vllm PR #19970), so "
             "vllm/v1/engine/core.py EngineCore.step schedules, executes and updates from "
             "the outputs in turn, the host's work between the device's steps; that host "
             "time, as what overlapping it hides on vLLM V1 (vllm-project/vllm PR #23914, "
             "A100, TP 2, offline, 512 output tokens; tokens/s synchronous / overlapped "
             "1014 / 1025, 1853 / 1896, 3048 / 3177, 4039 / 4258 at 32, 64, 128, 256 "
             "sequences): 0.34, 0.78, 1.71, 3.26 ms a step (B / tokens/s), 12.8 us per "
             "sequence by least squares through the origin, a lower bound (that overlap "
             "was partial); CUDA graphs as 'vllm'",
             graphs=True, host_seq_ns=12_800.0),
    _serving("vllm-0.6", "vLLM 0.6 (the Qwen2.5 speed benchmark's vLLM 0.6.2 / 0.6.3)",
             "vllm-project/vllm vllm/entrypoints/llm.py @0012cf691b7e69423244d2b1405f4b6832156e19: "
             "enforce_eager = False, max_seq_len_to_capture = 8192 (longer decode steps run "
             "eagerly); FlashAttention-2 kernels (the benchmark's environment: 'Flash "
             "Attention 2.6.3', QwenLM docs/source/benchmark/speed_benchmark.rst "
             "@a912d239c2d0e2e5d10bb8d02e6f5685edb43e68); released before Blackwell (no "
             "FP4); its per-step host time is not priced (no measurement of 0.6's loop, "
             "which overlaps output processing with the next step, is cited)",
             graphs=True, max_ctx=8192, act=_PRE_FP4, attention="flash2"),
    _serving("vllm-0.5", "vLLM 0.5 (one scheduler step per decode step)",
             "vllm-project/vllm issue #6854 ('[RFC]: Multi-Step Scheduling', 2024-07-26): "
             "'about 4ms of GPU bubble' per decode step in the baseline (sampled tokens "
             "to the host, output pythonization, next-step input preparation, the "
             "scheduler), which multi-step scheduling amortises; vllm/entrypoints/llm.py "
             "@0012cf691b7e69423244d2b1405f4b6832156e19 for the CUDA-graph settings (as "
             "vllm-0.6); FlashAttention-2 kernels; released before Blackwell (no FP4)",
             graphs=True, max_ctx=8192, act=_PRE_FP4, attention="flash2",
             host_step_ns=4.0e6),
    _serving("sglang", "SGLang",
             "sgl-project/sglang python/sglang/srt/server_args.py "
             "@469c63e54e7d94591617ef9590c6aa26d54dc1bb: disable_cuda_graph = False",
             graphs=True),
    _serving("trtllm", "TensorRT-LLM 1.x (PyTorch backend: LLM API, trtllm-serve, trtllm-bench)",
             "NVIDIA/TensorRT-LLM tensorrt_llm/llmapi/llm_args.py "
             "@fcd3f31682808ae56118ae43c1d7864a3a945e6f: cuda_graph_config defaults to "
             "CudaGraphConfig() ('use CUDA graphs for decoding'); MLA decode: its "
             "mla_generation op at batch <= 8 and <= 256 cached tokens takes a median 25.5 us "
             "on H100 and H200 against 6.2-7.6 us for its GQA generation_attention op of the "
             "same heads (8 or 16 query heads, one KV head, FP8 cache), 17.5-19.0 us more "
             "(median 18.4 us; ai-dynamo/aiconfigurator aic-core/src/aiconfigurator_core/"
             "systems/data/{h100_sxm,h200_sxm}/{mla,attention}/trtllm/1.2.0rc5/"
             "generation_{mla,attention}_perf.parquet @095f58a51c4ca8e61b66ec108d86f223f8d559ce)",
             graphs=True, mla_decode_ns=18_400.0),
    _serving("trtllm-0.9", "TensorRT-LLM 0.5-0.9 C++ GptSession (gptSessionBenchmark, static "
             "batching)",
             "NVIDIA/TensorRT-LLM benchmarks/cpp/gptSessionBenchmark.cpp "
             "@3c44cb974badec8966108b16054a99c0923e410d: CUDA graphs only with the opt-in "
             "--enable_cuda_graph, which the v0.9.0 docs/source/performance.md reproduction "
             "commands do not pass; released before Blackwell (no FP4)",
             graphs=False, act=_PRE_FP4),
    _serving("lmdeploy-0.1", "lmdeploy 0.1 (TurboMind C++ engine)",
             "InternLM/lmdeploy docs/en/benchmark/a100_fp16.md @ebe90bc943eeace841b33fa54fbf1726311b63db "
             "(lmdeploy v0.1.0a1): CUDA graphs not stated, so none (every kernel launched "
             "by the engine); released before Blackwell (no FP4)",
             graphs=False, act=_PRE_FP4),
    _serving("fastertransformer", "NVIDIA FasterTransformer (C++)",
             "kipply, 'Transformer Inference Arithmetic' (2022) via cli99/llm-analysis "
             "examples/fastertransformer/README.md @d841e40aec8c84b9e76ba9cfbce67418adb172bd: "
             "CUDA graphs not stated, so none; released before Blackwell (no FP4)",
             graphs=False, act=_PRE_FP4),
    _serving("gpt-fast", "gpt-fast (native PyTorch, torch.compile) and torchao's "
             "_models/llama/generate.py, its fork",
             "pytorch-labs/gpt-fast generate.py @9ac48bc50e2e35a390c309f315ba2c767b6e582d "
             "(the README benchmarks' commit) line 297 and pytorch/ao "
             "torchao/_models/llama/generate.py @03d01adcbcf8f85b0e61bef84957013b89e6902f "
             "line 305: decode_one_token = torch.compile(..., mode='reduce-overhead') (decode "
             "steps replay CUDA graphs); the prefill is compiled only with --compile_prefill "
             "(gpt-fast line 300, torchao's benchmark_results.txt: 'compile_prefill: False'), "
             "so it runs eagerly; decode_n_tokens keeps the sampled tokens on the device (no "
             "host sync per token); the decode attention is SDPA's math backend, which "
             "Inductor code-generates (gpt-fast line 61): the library's fused core; no FP4 "
             "matmuls at these commits",
             graphs=True, act=_PRE_FP4),
    # -- both -----------------------------------------------------------------------------
    Runtime("hf-eager", "Hugging Face transformers in eager PyTorch (generate(), Trainer with "
            "DDP)",
            f"{_HF} src/transformers/loss/loss_utils.py @d0fed636753eeb35d790126c4496d06847983d60: "
            "ForCausalLMLoss upcasts with logits.float() before cross_entropy (the eager "
            "fp32 loss); the default attn_implementation "
            "'sdpa' (PyTorch SDPA's flash backend, a FlashAttention-2-class kernel); no "
            "torch.compile and no CUDA graphs unless asked for",
            cuda_graphs=False, attention="flash2", eager_elementwise=True, eager_loss=True),
    # -- training -------------------------------------------------------------------------
    _training("megatron", "Megatron-LM / Megatron-Core (its argument defaults)",
              "NVIDIA/Megatron-LM megatron/training/arguments.py "
              "@307dcf37f03d44da131ba21999278abe4112d2ad: --use-distributed-optimizer and "
              "--overlap-grad-reduce off by default, bf16 gradients accumulated and "
              "all-reduced in fp32 ('bfloat16 requires gradient accumulation and all-reduce "
              "to be done in fp32'); Transformer Engine layers and fused attention; FP8 via "
              "Transformer Engine (FP8 copies of the GEMM inputs saved for backward, "
              "transformer_engine/pytorch/module/linear.py)",
              framework="megatron", overlap_grad_reduce=False, fp8_saved_inputs=True),
    _training("megatron-2021", "Megatron-LM of 2021-22 (Narayanan et al. SC'21, Korthikanti "
              "et al. 2022)",
              "arXiv:2104.04473 and arXiv:2205.05198: fp16 with fp32 master weights and no "
              "distributed optimizer (18 B/param), gradients all-reduced after the backward "
              "pass, the attention core over stored s^2 scores (pre-FlashAttention: "
              "Korthikanti et al.'s 5as/h activation term); no FP8",
              framework="megatron", attention="unfused", overlap_grad_reduce=False,
              precisions=("fp16", "bf16", "fp32")),
    _training("megatron-deepspeed", "Megatron-DeepSpeed of 2022 (BLOOM-176B)",
              "bigscience-workshop/bigscience train/tr11-176B-ml/README.md "
              "@9e64edec2ad1fb9263bf39ba616a84ff64b4d947: DeepSpeed's BF16_Optimizer "
              "(its own ZeRO-1), gradients reduced after the backward pass; the attention "
              "kernel is not stated (the library's fused core); no FP8",
              framework="deepspeed", zero_stage=1, overlap_grad_reduce=False,
              precisions=("fp16", "bf16", "fp32")),
    _training("nemo", "NVIDIA NeMo 24.x (NeMo-Framework-Launcher recipes on Megatron-Core)",
              "NVIDIA/NeMo-Framework-Launcher launcher_scripts/conf/training/ and "
              "examples/training/*/h100/*_fp8*.sh at 24.07 (8325688d8345a5513660f0f8390f0482a721c009) "
              "and 24.03.01 (5c7e280a4b7be0afe3c0b0295cc7b1586125f6d4): distributed_fused_adam "
              "(the distributed optimizer) with overlapped gradient sync, "
              "grad_sync_dtype=bf16; Transformer Engine FP8",
              framework="megatron", zero_stage=1, overlap_grad_reduce=True, grad_bytes=2,
              fp8_saved_inputs=True),
    _training("megatron-bridge", "NVIDIA NeMo Megatron-Bridge (performance configs)",
              f"{_MBRIDGE_CFG}: the distributed optimizer with overlapped gradient reduction, "
              "ddp.grad_reduce_in_fp32 = False; fp8_cs precision (bf16_with_fp8_current_"
              "scaling_mixed) sets fp8_param_gather = True "
              "(src/megatron/bridge/training/mixed_precision.py); Transformer Engine FP8",
              framework="megatron", zero_stage=1, overlap_grad_reduce=True, grad_bytes=2,
              fp8_saved_inputs=True, fp8_params=True),
    _training("torchtitan", "torchtitan (its defaults: no torch.compile)",
              "pytorch/torchtitan torchtitan/config/job_config.py "
              "@6404b932421f5ce382e7dac5ad381b2c17b1373c: Compile.enable = False (model and "
              "loss compiled only when enabled: eager element-wise kernels and an eager fp32 "
              "loss), FSDP2 full sharding, PyTorch SDPA (its flash backend on Hopper, a "
              "FlashAttention-2-class kernel; cuDNN opt-in, pytorch/pytorch#138522)",
              **_TITAN, eager_elementwise=True, eager_loss=True),
    _training("torchtitan-compile", "torchtitan with torch.compile (model and loss)",
              "pytorch/torchtitan torchtitan/config/job_config.py "
              "@6404b932421f5ce382e7dac5ad381b2c17b1373c: Compile.components = ['model', "
              "'loss'] (the loss compiled with the model since e7c0cae, "
              "torchtitan/components/loss.py); FSDP2, SDPA flash backend",
              **_TITAN),
    _training("torchtitan-2412", "torchtitan of end 2024 (9dec370), no torch.compile",
              "pytorch/torchtitan train.py @9dec370: loss_fn = cross_entropy(pred.flatten(0, "
              "1).float(), ...) with its torch.compile commented out ('compiling loss "
              "function causes CUDA errors'); eager model; FSDP2, SDPA flash backend",
              **_TITAN, eager_elementwise=True, eager_loss=True),
    _training("torchtitan-2412-compile", "torchtitan of end 2024 (9dec370), model compiled",
              "pytorch/torchtitan train.py @9dec370: training.compile compiles the model "
              "only, the loss stays eager fp32 (see torchtitan-2412)",
              **_TITAN, eager_loss=True),
    _training("llm-foundry", "MosaicML llm-foundry (Composer FSDP, flash-attn)",
              "mosaicml/llm-foundry scripts/train/benchmarking/README.md "
              "@495218376830947dce625efabc4d86be7c47cc45: 'our models use Flash Attention' "
              "(the flash-attn package, before FlashAttention-3), FSDP FULL_SHARD",
              framework="fsdp", zero_stage=3, attention="flash2"),
    _training("automodel", "NVIDIA NeMo Automodel (FSDP2, Transformer Engine)",
              "NVIDIA-NeMo/Automodel docs/performance-summary.mdx "
              "@36044ad3d139363fb6c73c24af2e7c6b65ec52f6: FSDP2 with Transformer Engine "
              "kernels ('TE + fsdp2_prefetch', 'TE + DeepEP')",
              framework="fsdp", zero_stage=3),
    _training("llama3-meta", "Meta's Llama 3 405B training stack",
              "arXiv:2407.21783 section 3.3.2: FSDP that does not reshard after forward "
              "(one gradient reduce-scatter and one parameter all-gather per step, "
              "overlapped), fused kernels",
              framework="deepspeed", zero_stage=1, overlap_grad_reduce=True),
    _training("deepspeed", "DeepSpeed ZeRO (its per-stage formulas; overlap_comm on ZeRO-3)",
              "microsoft/DeepSpeed deepspeed/runtime/zero/config.py "
              "@50c6d6f244ea2f1237cfd580cd759233d469cdd3: overlap_comm_valid (an unset "
              "overlap_comm is stage == 3); model-state bytes per ZeRO stage from "
              "Rajbhandari et al. arXiv:1910.02054 section 5",
              framework="deepspeed"),
)

#: Every runtime by name (``""``: the library default).
RUNTIMES: dict[str, Runtime] = {r.name: r for r in _ALL}


def runtime_names(*, mode: str | None = None) -> list[str]:
    """The named runtimes (the library default ``""`` left out); with ``mode``, those that
    run it."""
    out = [n for n in RUNTIMES if n]
    if mode is None:
        return out
    return [n for n in out if (RUNTIMES[n].trains if mode == "train" else RUNTIMES[n].serves)]


def unknown_runtime(name: object) -> SpecError:
    """The one-line error of an unknown runtime: the closest names, then every known one."""
    hint = did_you_mean(str(name), runtime_names()) if isinstance(name, str) else ""
    return SpecError(f"unknown runtime {name!r}; {hint + ' ' if hint else ''}Known: "
                     f"{', '.join(runtime_names())} ('' = simcore's default)")


def get_runtime(name: str) -> Runtime:
    """The :class:`Runtime` called ``name`` (SpecError naming the known ones otherwise)."""
    if not isinstance(name, str) or name not in RUNTIMES:
        raise unknown_runtime(name)
    return RUNTIMES[name]


def resolve(workload: Any, previous: dict[str, Any]) -> tuple[tuple[str, Any], ...]:
    """Apply ``workload.runtime``'s profile to the fields left unset (None, or carried over
    unchanged from the profile that set them before: ``previous``, as
    :func:`dataclasses.replace` passes them), in place on the frozen workload; returns the
    (field, value) pairs the profile set. Refuses a mode or precision the stack does not
    run."""
    rt = get_runtime(workload.runtime)
    mode = workload.mode
    if rt.name and not (rt.trains if mode == "train" else rt.serves):
        runs = runtime_names(mode=mode)
        raise SpecError(f"Workload(runtime={rt.name!r}) is {rt.stack}, which runs "
                        f"{rt.modes()} only, not {mode} steps; pass one of "
                        f"{', '.join(runs)} (or runtime='')")
    set_: list[tuple[str, Any]] = []

    def unset(f: str, empty: Any) -> bool:
        """Left to the profile: ``empty`` (None; "" for the FP8 dtypes), or the value the
        previous profile set, carried over by :func:`dataclasses.replace`."""
        v = getattr(workload, f)
        return v is None or v == empty or (f in previous and v == previous[f])

    for f in PROFILE_FIELDS:
        if unset(f, None):
            v = rt.setting(f, mode, workload.s_kv)
            object.__setattr__(workload, f, v)
            set_.append((f, v))
    if mode == "train":
        _fp8_dtypes(workload, rt, unset, set_)
    _check_precision(workload, rt)
    return tuple(set_)


def _fp8_dtypes(workload: Any, rt: Runtime, unset: Any, set_: list[tuple[str, Any]]) -> None:
    """The FP8 storage a Transformer Engine stack implies in an FP8 training step."""
    fp8 = workload.precision == "fp8"
    if unset("act_dtype", ""):
        v = "fp8" if fp8 and rt.fp8_saved_inputs and workload.recompute != "op" else ""
        object.__setattr__(workload, "act_dtype", v)
        set_.append(("act_dtype", v))
    if unset("weight_dtype", ""):
        v = ("fp8" if fp8 and rt.fp8_params and workload.framework == "megatron"
             and workload.zero_stage == 1 and workload.offload == "none" else "")
        object.__setattr__(workload, "weight_dtype", v)
        set_.append(("weight_dtype", v))


def _check_precision(workload: Any, rt: Runtime) -> None:
    """A precision the stack does not run is a SpecError naming the ones it does."""
    if not rt.name:
        return
    if workload.mode == "train":
        if workload.precision not in rt.precisions:
            raise SpecError(f"Workload(runtime={rt.name!r}): {rt.stack} does not train in "
                            f"{workload.precision}; pass precision "
                            f"{' / '.join(map(repr, rt.precisions))} or another runtime")
        return
    if workload.act_dtype and workload.act_dtype not in rt.act_dtypes:
        others = [n for n in runtime_names(mode=workload.mode)
                  if workload.act_dtype in RUNTIMES[n].act_dtypes]
        raise SpecError(f"Workload(runtime={rt.name!r}): {rt.stack} runs no "
                        f"{workload.act_dtype} matmuls (it runs {', '.join(rt.act_dtypes)}); "
                        f"pass act_dtype {' / '.join(map(repr, rt.act_dtypes))} or a runtime "
                        f"that does: {', '.join(others)}")


def check_family(workload: Any, family: Any) -> None:
    """A named runtime's low-precision matmuls need the family's rate: ``--runtime trtllm
    --dtype fp8`` on A100 is refused in the runtime's words (the engine's own check,
    :func:`simcore.hardware.families.require_matmul_rate`, says it generically)."""
    rt = get_runtime(getattr(workload, "runtime", ""))
    if not rt.name:
        return
    need = workload.precision if workload.mode == "train" else workload.act_dtype
    rate = {"fp8": "fp8_ratio", "int8": "int8_ratio", "fp4": "fp4_ratio",
            "mxfp4": "fp4_ratio"}.get(need)
    if rate is None or getattr(family.topology, rate, 0.0) > 0:
        return
    raise SpecError(f"runtime {rt.name!r} on {family.name}: {need} matmuls need the "
                    f"hardware's {need.upper()} rate and {family.name} has none "
                    f"(Topology.{rate} = 0), so {rt.stack} cannot run them there; pass "
                    "a 16-bit precision or a family with that rate")


def runtime_help(*, train: bool = False, names: list[str] | None = None,
                 default: str | None = None, flags: bool = True) -> str:
    """``--runtime``'s help: every named runtime the command runs (``names``; by default
    the serving stacks and, with ``train``, the training stacks too), what it is, and what
    the command assumes without it (``default``: a runtime's name); ``flags``: the command
    also has ``--eager`` / ``--cuda-graphs``."""
    if names is None:
        names = runtime_names() if train else runtime_names(mode="decode")
    unset = (f"{default} ({RUNTIMES[default].stack})" if default else
             "simcore's own stack: decode replays CUDA graphs"
             + (" unless --eager" if flags else ""))
    return ("the software stack the run uses, whose settings (CUDA graphs in decode, fused "
            "or eager kernels, attention kernel class"
            + (", model-state formula, overlap" if train else "")
            + ") apply" + (" unless --eager / --cuda-graphs say otherwise" if flags else "")
            + ": "
            + "; ".join(f"{n} ({RUNTIMES[n].stack})" for n in names)
            + f" (default: {unset})")
