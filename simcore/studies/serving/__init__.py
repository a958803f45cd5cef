"""Serving planner: which deployment gives the most tokens/s per GPU within latency limits?

Given a model, ``gpus`` devices of one hardware family, the traffic (``isl`` input and
``osl`` output tokens per request) and limits on TTFT and TPOT, :func:`plan` searches

* **aggregated** serving: one layout replicated over the budget
  (``replicas = gpus // n_devices``), each replica continuously batching ``batch``
  requests: prefills of new requests interleave with the decode steps;
* **disaggregated** serving: ``x`` prefill workers and ``y`` decode workers, each side
  with its own layout, rate-matched so that prefill never starves decode
  (``x · prefill_batch / TTFT >= y · batch / ((osl - 1) · TPOT)`` requests/s) and
  ``x · size_p + y · size_d <= gpus``;

and returns the best configurations by output tokens/s per GPU that meet the limits and
the Pareto frontier of tokens/s per GPU vs tokens/s per user (directions from the metric
registry). Everything comes from the public engine API: :func:`simcore.evaluate` with
``batch`` and ``s_kv`` as sweep dimensions and the device budget ``gpus`` (masked in the
engine), over the whole layout space, then labelled arithmetic. ``dtype`` (fp16, bf16,
fp8, int8) sets the precision of the weights, the activations (so the matmul rate) and
the KV cache on both sides.

The serving model (see :func:`agg_metrics`, :func:`disagg_metrics`):

* TTFT = prefill of the ``isl`` input tokens (at the prefill batch), no queueing;
* TPOT = one decode step at batch ``b`` with the KV cache at the mean context during
  generation, ``isl + osl // 2``; aggregated TPOT also carries the prefills that
  interleave with the decode steps (``b`` prefills per ``osl - 1`` steps);
* request latency = TTFT + (osl - 1) · TPOT; tokens/s per user = 1000 / TPOT_ms;
  tokens/s counts output tokens; with ``osl`` 1 there is no decode step: no TPOT, the
  request latency is the TTFT, tokens/s per user 1000 / TTFT_ms, and only aggregated
  serving is searched;
* memory: the decode layout must hold the KV cache at the *end* of generation
  (``isl + osl`` tokens per request) for the whole batch; the largest such batch in the
  sweep is reported as ``max_batch``; an aggregated replica must also fit a batch-1
  prefill (its activations are not added on top of the decode KV cache).

The package is cut in three: :mod:`.model` (what a deployment costs: the sweeps, the
aggregated and disaggregated metrics, rate matching), :mod:`.search` (enumerating and
ranking deployments under the limits: :func:`plan`) and :mod:`.present` (rows as table /
JSON / CSV, the header lines, the frontier plot, files). The command line,
``simcore serving``, is :mod:`simcore.cli.serving`. A budget larger than the family's
system is refused before any work.

At a request rate, :func:`plan_at_rate` (``simcore serving --rate R`` / ``--trace FILE``,
``--gpus auto``) replaces the steady state by requests: :mod:`.traffic` (Poisson arrivals
or a trace), :mod:`.simulate` (per-layout step-cost tables and a paged KV cache from the
engine; aggregated replicas and disaggregated prefill / decode workers with the KV
transfer between them, through the request kernel: chunked prefill, mixed batches,
continuous batching, preemption) and :mod:`.rate` (the fewest replicas or prefill:decode
workers whose p99 TTFT and TPOT meet the limits; goodput).

Data parallelism is expressed as replicas / workers: the planner's layouts have
``dp = 1`` (in the engine DP only splits the batch, so a DP-``k`` layout is ``k``
replicas), except a mixture-of-experts model's expert-parallel layouts
(:func:`expert_space`): there ``dp`` is attention data parallelism inside one instance,
its requests split over ``dp`` attention replicas while the experts are split over ``ep``
of its TP x DP GPUs (``plan(..., attn_dp=, ep=)``, :func:`moe_choices`; labelled
``TP1·ADP16·EP16``).

Examples
--------
>>> from simcore.studies.serving import plan
>>> p = plan("Llama 3.1 8B", family="H100-SXM", gpus=2, isl=1024, osl=128,
...          max_ttft_ms=500, max_tpot_ms=50, batch=(1, 16))
>>> row = p.rows()[0]
>>> row["mode"] in ("agg", "disagg") and row["tpot_ms"] <= 50 and row["n_devices"] <= 2
True
"""

from __future__ import annotations

from .model import (
    DTYPES,
    InfeasibleError,
    LayoutCosts,
    ServingError,
    agg_metrics,
    budget_mask,
    contexts,
    disagg_metrics,
    expert_space,
    moe_choices,
    serving_costs,
    serving_space,
    sweep,
)
from .present import (
    RATE_TABLE_COLUMNS,
    TABLE_COLUMNS,
    assumptions_line,
    format_rows,
    plot_frontier,
    rate_summary_lines,
    summary_lines,
    write_output,
)
from .rate import RATE_ROW_KEYS, RateConfig, RateInfeasibleError, RatePlan, plan_at_rate
from .search import (
    DEFAULT_BATCHES,
    DEFAULT_PREFILL_BATCHES,
    FRONTIER_OBJECTIVES,
    ROW_KEYS,
    SERVING_METRICS,
    ServingConfig,
    ServingPlan,
    layout_label,
    plan,
)
from .simulate import Scheduler
from .traffic import Traffic, TrafficError, poisson, read_trace

__all__ = [
    "DEFAULT_BATCHES",
    "DEFAULT_PREFILL_BATCHES",
    "DTYPES",
    "FRONTIER_OBJECTIVES",
    "RATE_ROW_KEYS",
    "RATE_TABLE_COLUMNS",
    "ROW_KEYS",
    "SERVING_METRICS",
    "TABLE_COLUMNS",
    "InfeasibleError",
    "LayoutCosts",
    "RateConfig",
    "RateInfeasibleError",
    "RatePlan",
    "Scheduler",
    "ServingConfig",
    "ServingError",
    "ServingPlan",
    "Traffic",
    "TrafficError",
    "agg_metrics",
    "assumptions_line",
    "budget_mask",
    "contexts",
    "disagg_metrics",
    "expert_space",
    "format_rows",
    "layout_label",
    "moe_choices",
    "plan",
    "plan_at_rate",
    "plot_frontier",
    "poisson",
    "rate_summary_lines",
    "read_trace",
    "serving_costs",
    "serving_space",
    "summary_lines",
    "sweep",
    "write_output",
]
