"""The efficiency factors, fitted once against :data:`simcore.validation.MEASUREMENTS`.

This module keeps the values, where each comes from and why, and the current result.
The record behind them is ``docs/validation.md``: "Factors and provenance", "Current
figures" (per source, the held-out table, the largest errors), "Experiments not kept"
(every variant tried, with its in-sample / leave-one-source-out figures) and "Change
log" (changes 1-23 and the history before them). Refit whenever the cost model changes,
and record the refit there.

How they were obtained
----------------------
``python -m simcore.validation.fit`` (:func:`simcore.validation.fit.fit_efficiency`): one
:class:`~simcore.model.specs.Efficiency` for the 176 points (98 training, 24 prefill,
54 decode; 23 sources; A100, H100 and H200), minimising the mean absolute percentage
error. Ten factors are fitted (a coordinate pattern search inside each factor's declared
range, :data:`simcore.validation.fit.FACTORS`). Restarted from the values below, the
search moves them by at most 0.002 and the error by under 0.002 points (7.09%), so
they are kept. Never per point, nor per kind.

Fitted (value — what it scales; why this value)
-----------------------------------------------
* ``compute`` = 0.71, ``train_compute`` = 0.663 — inference and training matmuls, in
  Hopper's terms; a family's ``Topology.mm_ratio`` scales them (A100 1.082, its measured
  maximum achievable matmul share over the H100's, cited in ``presets.py``, not fitted).
* ``attention`` = 0.379 — the inference attention core (FlashAttention / paged attention
  in prefill and chunked prefill); identified by the Qwen2.5 speed benchmark's whole runs
  at 30K-129K tokens of context, where attention is up to half of a prefill's FLOPs
  (docs/validation.md, change 11).
* ``lowp_compute`` = 0.621 — inference FP8 / INT8 matmuls as a fraction of the FP8 peak:
  1.24 of the 16-bit peak, so FP8 inference matmuls run 1.75x faster than 16-bit ones,
  not 2x. Training FP8 GEMMs keep ``train_compute`` x ``fp8_ratio`` (a shared factor
  made the FP8 training sources' leave-one-source-out error worse: NeMo 24.07 8% → 22%).
* ``train_attention`` = 0.339 — the training attention core of the family's native fused
  kernel; FlashAttention-2-class kernels (``Workload.attention="flash2"``) run at
  ``Topology.fa2_ratio`` (0.522 on Hopper, a cited measurement, not fitted) of it.
* ``memory`` = 0.822 — HBM streaming, once the device's per-kernel cost, the host's
  launch time and per-sequence costs are separate (change 20); within the 0.81-0.91
  that aiconfigurator's silicon GEMV tables show (docs/validation.md, "Current figures").
* ``network`` = 0.673 — NVLink-class links.
* ``roofline_overlap`` = 0.304 — the share of the shorter of an op's compute and HBM time
  that hides under the longer: an op takes ``max + 0.696 x min``, not ``max`` (the
  classic roofline, 1.0) nor the sum (0.0); near the ridge point neither unit runs flat out.
* ``op_latency_ns`` = 4,160 ns per kernel on the device, inference and training (change
  21); within the 2.6-9.0 us fixed cost of the silicon GEMV tables. An inference kernel
  launched from the host also pays ``kernels.inference.LAUNCH_NS`` = 5 us, measured, not
  fitted (~5 us per ``cudaLaunchKernel``: pegainfer, "From Launch Overhead to CUDA
  Graph", susun-blog.com/blog/pegainfer-3-cuda-graph; ahrefs/ocannl issue #488; change 20).
* ``seq_overhead_ns`` = 39.5 us of host work per sequence of the replica per inference
  step (batch bookkeeping, sampling, KV block tables), run one step ahead under the
  device's step (overlap scheduling), so a step takes the longer of the two (change 17).
  It has a flat region: while every point's host work hides, moving it moves nothing, so
  a search started below the device steps stays there (from 6.2 us it ends at 7.80%);
  the value is the search's result from 20 us.

Held, not fitted
----------------
Their evidence is declared once, in :data:`HELD` (``simcore validate`` counts it; the
record is docs/validation.md, "Held constants and their evidence"). None of the five is
pinned to a timed measurement: three were chosen by looking at fits, one copies a peer
model's setting, one is a convention.

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
Served runs (aiconfigurator's silicon CSV, at a client concurrency) are predicted as
the steady-state step of :meth:`simcore.Workload.served`: the decode batch plus the
prompt tokens of newly admitted requests in the same pass. Whole runs (static-batch
throughput: TensorRT-LLM's ``batch x osl / run time``; the Qwen2.5 speed benchmark's one
timed vLLM ``generate()``) are the sum of their steps (``Measurement.steps``: the
prompts' prefill, chunked as vLLM 0.6 chunks it, then every decode step over the growing
context; see :mod:`simcore.validation.data_infer`).

Result
------
``simcore validate``, 176 points: in-sample mean absolute error 7.1% (7.09%;
training 6.8%, prefill 8.4%, decode 7.0%; inference 7.5%), worst 42.0% (Megatron-Bridge's
26.02.01 FP8 Qwen3-30B-A3B: it runs at 9.06K tokens/s/GPU where Automodel's BF16 run of
the same model with full recomputation reaches 12.0K on the same H100s; no roofline of
its FP8 grouped GEMMs shows that); leave-one-source-out, each refit from the neutral
start (:data:`simcore.validation.fit.NEUTRAL_START`), 9.2% (training 7.4%, prefill 10.2%,
decode 12.1%; inference 11.5%), 8.1% when the refits started from the all-data optimum
(``start="fitted"``, which leaks the held-out source); Korthikanti Table 5 6.0% (7.0% out
of sample). Ranking agreement: 95% of 153 measured pairs, in and out of sample. 1 point lies beyond 25% (that training point); the inference worst is 24.1%.
8 configurations that ran are predicted not to fit (``tests/test_validation.py``,
``KNOWN_NOT_FITTING``). Held out, never fitted (:mod:`simcore.validation.holdout`): 766
served TPOT rows of aiconfigurator's silicon CSV, 16.1% mean, 8.5% median absolute error.
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
FITTED_EFFICIENCY = Efficiency(compute=0.719, memory=0.8416, network=0.694, hbm_usable=0.90,
                               train_compute=0.748, network_inter=0.95, network_sip=None,
                               attention=0.324, train_attention=0.346, op_latency_ns=3923.0,
                               step_overhead_ns=0.0, lowp_compute=0.612, roofline_overlap=0.288,
                               seq_overhead_ns=38904.0, comm_contention=0.15, train_memory=0.552)
