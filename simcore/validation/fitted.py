"""The efficiency factors, fitted once against :data:`simcore.validation.MEASUREMENTS`.

This module keeps the values, where each comes from and why, and the current result.
The record behind them is ``docs/validation.md``: "Factors and provenance", "Current
figures" (per source, the held-out table, the largest errors), "Experiments not kept"
(every variant tried, with its in-sample / leave-one-source-out figures) and "Change
log" (changes 1-25 and the history before them). Refit whenever the cost model changes,
and record the refit there.

How they were obtained
----------------------
``python -m simcore.validation.fit`` (:func:`simcore.validation.fit.fit_efficiency`): one
:class:`~simcore.model.specs.Efficiency` for the 209 points (103 training, 24 prefill,
82 decode; 25 sources; A100, H100 and H200; the 28 MoE serving points of
:mod:`simcore.validation.data_moe` and the 5 MoE training points of ``mbridge_perf_moe``
included), minimising the mean absolute percentage error. Nine factors are fitted (a
coordinate pattern search inside each factor's declared range,
:data:`simcore.validation.fit.FACTORS`). Restarted from the values below, the search
ends at 8.486% against their 8.487%, moving ``network`` by 0.011, the other fractions by
at most 0.003 and ``seq_overhead_ns`` by 0.6 us; from the neutral start
(:data:`simcore.validation.fit.NEUTRAL_START`) it ends within 0.001 of every fraction
and 0.3 us of ``seq_overhead_ns``, at 8.486%. So they are kept. Never per point, nor per
kind.

Fitted (value — what it scales; why this value)
-----------------------------------------------
* ``compute`` = 0.719, ``train_compute`` = 0.748 — inference and training matmuls, in
  Hopper's terms; a family's ``Topology.mm_ratio`` scales them (A100 1.082, its measured
  maximum achievable matmul share over the H100's, cited in
  ``simcore/hardware/data/*.toml``, not fitted).
* ``attention`` = 0.324 — the inference attention core (FlashAttention / paged attention
  in prefill and chunked prefill); identified by the Qwen2.5 speed benchmark's whole runs
  at 30K-129K tokens of context, where attention is up to half of a prefill's FLOPs
  (docs/validation.md, change 11). MLA's absorbed decode core runs at ``compute`` instead
  (a GEMM-class kernel, FlashMLA; docs/validation.md, "MoE serving points").
* ``lowp_compute`` = 0.612 — inference FP8 / INT8 matmuls as a fraction of the FP8 peak:
  1.22 of the 16-bit peak, so FP8 inference matmuls run 1.70x faster than 16-bit ones,
  not 2x. Training FP8 GEMMs keep ``train_compute`` x ``fp8_ratio`` (a shared factor
  made the FP8 training sources' leave-one-source-out error worse: NeMo 24.07 8% → 22%).
* ``train_attention`` = 0.346 — the training attention core of the family's native fused
  kernel; FlashAttention-2-class kernels (``Workload.attention="flash2"``) run at
  ``Topology.fa2_ratio`` (0.522 on Hopper, a cited measurement, not fitted) of it.
* ``train_memory`` = 0.552 — HBM streaming of training steps (element-wise, optimizer and
  GEMM-operand traffic), times the family's ``Topology.hbm_ratio``. It takes the slot
  that ``memory`` freed when it was held at its measurement (change 25); before, one
  shared HBM factor left Korthikanti's Table 5 at 6.0% (3.9% now).
* ``network`` = 0.694 — NVLink-class links.
* ``roofline_overlap`` = 0.288 — the share of the shorter of an op's compute and HBM time
  that hides under the longer: an op takes ``max + 0.712 x min``, not ``max`` (the
  classic roofline, 1.0) nor the sum (0.0); near the ridge point neither unit runs flat out.
* ``seq_overhead_ns`` = 38.9 us (38,904 ns) of host work per sequence of the replica per
  inference step (batch bookkeeping, sampling, KV block tables), run one step ahead under
  the device's step (overlap scheduling), so a step takes the longer of the two (change
  17). It has a flat region: while every point's host work hides, moving it moves
  nothing, so a search started below the device steps stays there.

Held, not fitted
----------------
Their evidence is declared once, in :data:`HELD` (``simcore validate`` counts it: 2 cited
to a measurement, 3 chosen from fits, 1 copied from a peer model's setting, 1 a
convention; the record is docs/validation.md, "Held constants and their evidence").

* ``memory`` = 0.8416 — HBM streaming of inference steps, cited to a measurement: the
  median share of the HBM peak at which the bf16 GEMV rows (M = 1-8) of the 22 Hopper
  silicon GEMM tables of ai-dynamo/aiconfigurator @095f58a5
  (``systems/data/*/gemm/*/gemm_perf.parquet``) stream their weights (0.825-0.907 per
  table), regressed as latency = bytes / (HBM peak x share) + fixed cost. The A100
  streams at its own tables' median: ``Topology.hbm_ratio`` = 0.819 / 0.8416 (measured,
  in ``simcore/hardware/data/A100-*.toml``), applied to ``memory`` and ``train_memory``
  alike, as ``mm_ratio`` is to the matmul factors. Fitted, it had been 0.822.
* ``op_latency_ns`` = 3,923 ns per kernel on the device, inference and training (change
  21), cited to a measurement: the median fixed cost of the same 22 GEMV regressions
  (2.6-4.4 us per table). Fitted, it had been 4,160 ns. An inference kernel launched from
  the host also pays ``kernels.inference.LAUNCH_NS`` = 5 us, measured, not fitted (~5 us
  per ``cudaLaunchKernel``: pegainfer, "From Launch Overhead to CUDA Graph",
  susun-blog.com/blog/pegainfer-3-cuda-graph; ahrefs/ocannl issue #488; change 20).
* ``hbm_usable`` = 0.90 — memory fit only (moves no time); a convention for the runtime's
  and the allocator's share of HBM, neither measured nor fitted.
* ``network_inter`` = 0.95 — InfiniBand with the NICs of a node used in parallel; chosen
  from fits: the top of its range, where every fit that had it free put it (all points
  and each leave-one-source-out refit alike). ``network_sip`` follows it.
* ``step_overhead_ns`` = 0 — chosen from fits: its lower bound, where every fit since the
  per-launch and per-sequence costs joined put it (a quarter of it with CUDA graphs).
* ``comm_contention`` = 0.15 — a collective overlapped with compute takes that share of
  the compute's throughput while it runs: ``X`` ns of it under ``W`` ns of compute cost
  ``max(X − W, 0.15 X)`` beyond ``W``. Calculon's ``processor_usage`` of NVLink:
  calculon-ai/calculon systems/a100_80g.json and h100_80g_nvl8.json
  @caa4b11f8fe1fee3ba57adaacb7590d7deabd053, where InfiniBand's is 0.02; simcore uses one
  value for every tier (a scan of 0-0.45 with refits has its minimum there: change 13).
  A peer model's setting, not a timed run.

How runs are predicted
----------------------
Served runs (aiconfigurator's silicon CSV, fitted and held out, at a client
concurrency ``c``) are the steady-state steps of :meth:`simcore.Workload.served_steps`:
about ``c·isl/osl`` prompt tokens of newly admitted requests arrive per step, and a
newly admitted request's prompt runs whole together with the decode batch, so a share
``c·isl/(osl·C)`` of the steps carries a ``C``-token prompt (``C = isl``; a chunk of a
token budget where one is set) and the rest are pure decode steps; the TPOT is their
weighted mean (where prompts arrive faster than one per step, every step carries
``c·isl/osl`` tokens: :meth:`~simcore.Workload.served`). Before change 25 every step
carried ``c·isl/osl`` prompt tokens thinly spread, which for a sparse MoE routed them to
most experts every step. aiconfigurator's TensorRT-LLM rows run an FP8 KV cache where
the row states none (``kv_dtype_trtllm`` in the source entry, cited;
``data_infer._kv_dtype``), as do the H100vsA100 blog's H100 GPT-J points (its v0.5 build
commands pass ``--fp8_kv_cache``). A disaggregated decode worker is a plain decode step
at its batch. Whole runs (static-batch throughput: TensorRT-LLM's ``batch x osl / run
time``; the Qwen2.5 speed benchmark's one timed vLLM ``generate()``) are the sum of their
steps (``Measurement.steps``: the prompts' prefill, chunked as vLLM 0.6 chunks it, then
every decode step over the growing context; see :mod:`simcore.validation.data_infer`).

Result
------
``simcore validate``, 209 points: in-sample mean absolute error 8.5% (8.49%; training
6.7%, prefill 8.5%, decode 10.8%; inference 10.3%), worst 55.7% (TensorRT-LLM's
DeepSeek-R1 blog, the offline max-throughput run at concurrency 1,024 on attention DP8 x
EP8: the steady-state step leaves out each wave's synchronized prefill);
leave-one-source-out, each refit from the neutral start
(:data:`simcore.validation.fit.NEUTRAL_START`), 9.7% (training 7.4%, prefill 10.7%,
decode 12.4%; inference 12.0%). The 43 MoE points 16.7% in sample, 17.0% out of sample;
the 176 points of the previous fit 6.6% in sample (inference 7.1%). Korthikanti Table 5
3.9% (5.6% out of sample). Ranking agreement: 95% of 256 measured pairs in sample, 94%
out of sample. 12 points lie beyond 25% (8 inference, 7 of them MoE serving points, and
the H100vsA100 blog's FP8 GPT-J TTFT at 128 tokens, −25.5%; 4 training: gpt-oss-120b
twice, Megatron-Bridge's FP8 Qwen3-30B-A3B, llm-foundry's MPT-30B at 8K).
9 configurations that ran are predicted not to fit (``tests/test_validation.py``,
``KNOWN_NOT_FITTING``). Held out, never fitted (:mod:`simcore.validation.holdout`): 766
served TPOT rows of aiconfigurator's silicon CSV, 16.7% mean, 9.9% median absolute error;
Blackwell (:mod:`simcore.validation.blackwell`) 20 runs, 10.8%.
"""

from __future__ import annotations

from ..model.specs import Efficiency

__all__ = ["EVIDENCE", "FITTED_EFFICIENCY", "HELD"]

#: Kinds of evidence a held constant rests on, with the phrase ``simcore validate`` prints.
EVIDENCE: dict[str, str] = {
    "measurement": "cited to a measurement",
    "fit": "chosen from fits",
    "peer": "copied from a peer model's setting",
    "convention": "a convention",
}

#: Every :class:`~simcore.model.specs.Efficiency` field that is held, not fitted (the
#: fields outside :data:`simcore.validation.fit.FACTORS`) → (evidence, what it rests on).
#: The evidence is one of :data:`EVIDENCE`; "fit" means the value was read off fits, so
#: it is a fitted value in disguise and leave-one-source-out does not refit it.
HELD: dict[str, tuple[str, str]] = {
    "hbm_usable": ("convention", "0.90 of HBM for weights, KV and activations; decides "
                   "memory fit only, moves no time; no measurement, no fit"),
    "network_inter": ("fit", "0.95, the top of its range, where every fit that had it free "
                      "put it (all points and each leave-one-source-out refit)"),
    "network_sip": ("fit", "None: follows network_inter (no SiP hardware is measured)"),
    "step_overhead_ns": ("fit", "0, its lower bound, where every fit since the per-launch and "
                         "per-sequence costs joined put it"),
    "memory": ("measurement", "0.8416, the median HBM streaming share of the bf16 GEMV rows "
               "(M = 1-8) of the 22 Hopper silicon GEMM tables of ai-dynamo/aiconfigurator "
               "@095f58a5 (systems/data/*/gemm/*/gemm_perf.parquet); the A100 at its own "
               "median, Topology.hbm_ratio 0.819 / 0.8416"),
    "op_latency_ns": ("measurement", "3,923 ns, the median fixed cost per kernel of the same "
                      "22 Hopper GEMV regressions (latency = bytes / (HBM peak x share) + "
                      "fixed cost)"),
    "comm_contention": ("peer", "0.15, Calculon's processor_usage of NVLink "
                        "(calculon-ai/calculon systems/a100_80g.json, h100_80g_nvl8.json "
                        "@caa4b11f); a scan of 0-0.45 with refits has its minimum there"),
}

#: One set of factors for all measurements (see the module docstring).
FITTED_EFFICIENCY = Efficiency(compute=0.719, memory=0.8416, network=0.65, hbm_usable=0.90,
                               train_compute=0.75, network_inter=0.95, network_sip=None,
                               attention=0.326, train_attention=0.346, op_latency_ns=3923.0,
                               step_overhead_ns=0.0, lowp_compute=0.612, roofline_overlap=0.288,
                               seq_overhead_ns=39512.0, comm_contention=0.15, train_memory=0.559)
