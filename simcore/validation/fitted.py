"""The efficiency factors, fitted once against :data:`simcore.validation.MEASUREMENTS`.

How they were obtained
----------------------
``python -m simcore.validation.fit`` (:func:`simcore.validation.fit.fit_efficiency`): one
:class:`~simcore.specs.Efficiency` for the 152 points then held (91 training, 29 prefill,
32 decode; 22 sources; A100, H100 and H200), minimising the mean absolute percentage
error. Ten factors move a prediction and are fitted (a coordinate pattern search inside
each factor's declared range, :data:`simcore.validation.fit.FACTORS`); ``hbm_usable``
(0.90) is not fitted and ``network_sip`` follows ``network_inter``. Never per point, nor
per kind.

* ``compute`` = 0.677, ``train_compute`` = 0.66 — inference and training matmuls.
* ``lowp_compute`` = 0.408 — inference FP8 / INT8 matmuls, as a fraction of the FP8
  data-sheet peak (2x the 16-bit one on Hopper): 0.816 of the 16-bit peak, i.e. FP8
  inference matmuls run 1.2x faster than 16-bit ones, not 2x. Training FP8 GEMMs keep
  ``train_compute`` x ``fp8_ratio`` (a shared factor made the leave-one-source-out error
  of the FP8 training sources worse: NeMo 24.07 8% → 22%).
* ``attention`` = 0.95 (the upper bound), ``train_attention`` = 0.20 (the lower bound)
  — the attention core. Both at a bound: the fit uses them to absorb what the model
  still misses (long-sequence training is predicted too fast; inference attention is
  small next to the rest at the measured lengths). Treat them as symptoms, not
  measurements.
* ``memory`` = 0.636 — HBM streaming, once launch and per-step costs are separate.
* ``network`` = 0.628 (NVLink-class), ``network_inter`` = 0.95 (the upper bound;
  InfiniBand with the NICs of a node used in parallel).
* ``op_latency_ns`` = 2,491 ns per kernel launch, ``step_overhead_ns`` = 0.77 ms per
  inference step (a quarter with CUDA graphs).

Served runs (aiconfigurator's silicon CSV, at a client concurrency) are predicted as
the steady-state step of :meth:`simcore.Workload.served`: the decode batch plus the
prompt tokens of newly admitted requests in the same pass.

Result (``simcore validate``, 158 points): in-sample mean absolute error 16.0% (training
14.9%, prefill 16.0%, decode 19.4%), worst 85.3%; leave-one-source-out 20.2% (training
19.3%, prefill 17.1%, decode 25.9%). History: 16.1% / 18.7% with these factors before ZeRO-3's
prefetched all-gathers and its gradient reduction were made to share one compute window
(16.4% / 18.9% after), then torchtitan's per-op selective checkpointing
(``recompute="op"``) replaced Megatron-selective for its runs (15.6% / 18.1%; three
torchtitan runs that ran now fit), then torchtitan's pipelined FSDP keeps its parameters
gathered through the step (15.5% / 18.0%), then the six MoE runs with expert parallelism
joined (Megatron-Bridge Qwen3-30B-A3B -31.4%, Qwen3-235B-A22B +33.4% and +43.3%; Automodel
DeepSeek-V3 +26.3% and +29.7%, Qwen3-30B-A3B -0.4%): 158 points, in sample 16.0%
(training 14.9%), leave-one-source-out 20.2% (training 19.3%; torchtitan 14.6% -> 31.3%:
without it the fit speeds training attention up for the MoE runs). A refit over the 158
points moved only ``compute`` (0.677 -> 0.675) and the in-sample mean by < 0.01 points.
Refits after each change moved the in-sample mean by
< 0.05 points, so the factors were kept. Before the served-step model and ``lowp_compute``: 19.2%
in sample, 23.7% leave-one-source-out, worst 156.6%. The largest remaining errors:
TensorRT-LLM v0.9's large-batch FP8 throughput (Falcon-180B predicted up to 85% too
fast), Mixtral FP8 prefill, long-sequence context-parallel training, Llama 3 405B,
expert-parallel MoE training. 18 configurations that ran are predicted not to fit (listed in
``tests/test_validation.py``). Refit whenever the cost model changes.
"""

from __future__ import annotations

from ..specs import Efficiency

__all__ = ["FITTED_EFFICIENCY"]

#: One set of factors for all measurements (see the module docstring).
FITTED_EFFICIENCY = Efficiency(compute=0.677, memory=0.636, network=0.628, hbm_usable=0.90,
                               train_compute=0.66, network_inter=0.95, network_sip=None,
                               attention=0.95, train_attention=0.20, op_latency_ns=2491.0,
                               step_overhead_ns=769734.0, lowp_compute=0.408)
