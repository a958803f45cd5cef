"""The efficiency factors, fitted once against :data:`simcore.validation.MEASUREMENTS`.

How they were obtained
----------------------
``python -m simcore.validation.fit`` (:func:`simcore.validation.fit.fit_efficiency`): one
:class:`~simcore.specs.Efficiency` for all 152 points together (91 training, 29 prefill,
32 decode; 22 sources; A100, H100 and H200), minimising the mean absolute percentage
error. Nine factors move a prediction and are fitted (a coordinate pattern search inside
each factor's declared range, :data:`simcore.validation.fit.FACTORS`); ``hbm_usable``
(0.90) is not fitted and ``network_sip`` follows ``network_inter``. Never per point, nor
per kind.

* ``compute`` = 0.647, ``train_compute`` = 0.682 — inference and training matmuls.
* ``attention`` = 0.28, ``train_attention`` = 0.20 (the lower bound) — the attention
  core. Implausibly low for FlashAttention: the fit uses it to absorb what the model
  still misses on long sequences (NeMo long-sequence CP runs, Llama 3 405B at 131K are
  predicted too fast). Treat it as a symptom, not a measurement.
* ``memory`` = 0.611 — HBM streaming, once launch and per-step costs are separate.
* ``network`` = 0.528 (NVLink-class), ``network_inter`` = 0.95 (the upper bound;
  InfiniBand with the NICs of a node used in parallel).
* ``op_latency_ns`` = 2,531 ns per kernel launch, ``step_overhead_ns`` = 0.98 ms per
  inference step (a quarter with CUDA graphs).

Result (``simcore validate``): in-sample mean absolute error 19.2% (training 15.2%,
prefill 18.4%, decode 31.6%), worst 156.6%; leave-one-source-out 23.7% (training
16.5%, prefill 23.7%, decode 44.3%). The largest remaining errors: FP8 inference at the
data-sheet 2x rate (TensorRT-LLM v0.9 tables, aiconfigurator's served runs, predicted
too fast), served-at-concurrency runs (queueing and prefill interference are not
modelled), long-sequence context-parallel training. 18 configurations that ran are
predicted not to fit (listed in ``tests/test_validation.py``). Refit whenever the cost
model changes.
"""

from __future__ import annotations

from ..specs import Efficiency

__all__ = ["FITTED_EFFICIENCY"]

#: One set of factors for all measurements (see the module docstring).
FITTED_EFFICIENCY = Efficiency(compute=0.647, memory=0.611, network=0.528, hbm_usable=0.90,
                               train_compute=0.682, network_inter=0.95, network_sip=None,
                               attention=0.28, train_attention=0.20, op_latency_ns=2531.0,
                               step_overhead_ns=980859.0)
