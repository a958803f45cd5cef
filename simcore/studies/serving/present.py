"""Presenting a serving plan: rows as a table / JSON / CSV, the header lines, the
frontier plot and the files (all written atomically).

Nothing here computes a number; :mod:`simcore.cli.serving` and the app call these.
"""

from __future__ import annotations

import csv
import io
import json
import math
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from ..plot import _save as _save_figure
from .model import ServingError
from .rate import RatePlan
from .search import ROW_KEYS, ServingPlan

__all__ = ["RATE_TABLE_COLUMNS", "TABLE_COLUMNS", "assumptions_line", "format_rows",
           "plot_frontier", "rate_summary_lines", "summary_lines", "write_output"]

#: The table's columns: (row key, header); JSON and CSV carry every key of
#: :data:`~.search.ROW_KEYS`.
TABLE_COLUMNS: tuple[tuple[str, str], ...] = (
    ("mode", "mode"), ("layout", "deployment"), ("batch", "batch"),
    ("prefill_batch", "p_batch"), ("ttft_ms", "TTFT ms"), ("tpot_ms", "TPOT ms"),
    ("request_latency_ms", "latency ms"), ("tokens_per_s_per_gpu", "tok/s/GPU"),
    ("tokens_per_s_per_user", "tok/s/user"), ("n_devices", "GPUs"),
    ("max_batch", "max batch"), ("meets_limits", "meets"))

#: The table's columns for a plan at a request rate (:class:`~.rate.RatePlan`); JSON and
#: CSV carry every key of :data:`~.rate.RATE_ROW_KEYS`.
RATE_TABLE_COLUMNS: tuple[tuple[str, str], ...] = (
    ("mode", "mode"), ("layout", "deployment"), ("n_devices", "GPUs"),
    ("prefill_chunk_tokens", "chunk"), ("ttft_p50_ms", "TTFT p50"),
    ("ttft_p99_ms", "TTFT p99"), ("tpot_p50_ms", "TPOT p50"), ("tpot_p99_ms", "TPOT p99"),
    ("kv_transfer_ms", "KV ms"), ("rate_rps", "req/s"), ("goodput_rps", "goodput"),
    ("max_concurrency", "seqs in KV"), ("meets_limits", "meets"))


# --- rows -------------------------------------------------------------------------------------

def _json_value(v: Any) -> Any:
    if isinstance(v, float) and not math.isfinite(v):
        return None
    return v


def format_rows(rows: Sequence[Mapping[str, Any]], fmt: str, *,
                keys: Sequence[str] = ROW_KEYS,
                columns: Sequence[tuple[str, str]] = TABLE_COLUMNS) -> str:
    """Rows as ``table`` (``columns``), ``json`` (a list of objects) or ``csv`` (header
    ``keys`` + one line each); a plan at a rate passes :data:`~.rate.RATE_ROW_KEYS` and
    :data:`RATE_TABLE_COLUMNS`."""
    if fmt == "json":
        return json.dumps([{k: _json_value(v) for k, v in r.items()} for r in rows], indent=2,
                          allow_nan=False) + "\n"
    if fmt == "csv":
        buf = io.StringIO()
        w = csv.DictWriter(buf, fieldnames=list(keys), lineterminator="\n")
        w.writeheader()
        for r in rows:
            w.writerow({k: ("" if _json_value(r.get(k)) is None else r.get(k))
                        for k in keys})
        return buf.getvalue()
    if fmt == "table":
        from ..report import table

        return table([dict(r) for r in rows], columns) + "\n"
    raise ServingError(f"format must be table, json or csv, got {fmt!r}")


# --- the header -------------------------------------------------------------------------------

def summary_lines(result: ServingPlan) -> list[str]:
    """The lines above the table: what was searched (model, budget, traffic, limits, how
    many layouts and configurations, how long), the plan's notes and each mode's best."""
    lim = ", ".join(f"{n} <= {v:g} ms" for n, v in (("TTFT", result.max_ttft_ms),
                                                     ("TPOT", result.max_tpot_ms))
                    if v is not None) or "no latency limits"
    n_lay, n_ep = _layout_counts(result)
    prec = f" in {result.dtype}" if result.dtype else ""
    n_b = {int(ds.sizes["batch"]) for ds in result.sweeps or (result.dataset,)}
    batches = (f"{min(n_b)} batches" if len(n_b) == 1 else
               f"{min(n_b)} batches ({max(n_b)} for expert-parallel instances)")
    ep = f" ({n_ep} expert-parallel: {_ep_searched(result)})" if n_ep else ""
    lines = [f"{result.model}{prec} on {result.gpus} x {result.family}, ISL {result.isl} / OSL "
             f"{result.osl}, {lim}: {n_lay} layouts{ep} x {batches} searched in "
             f"{result.elapsed_s:.1f} s; {len(result.candidates)} configurations",
             assumptions_line(result)]
    lines += [f"note: {note}" for note in result.notes]
    for mode in ("agg", "disagg"):
        b = result.best_of(mode)
        if b is not None:
            tpot = f", TPOT {b.tpot_ms:.1f} ms" if math.isfinite(b.tpot_ms) else ""
            lines.append(f"best {mode}: {b.layout} at batch {b.batch}: "
                         f"{b.tokens_per_s_per_gpu:.1f} tokens/s/GPU, "
                         f"{b.tokens_per_s_per_user:.1f} tokens/s/user, TTFT {b.ttft_ms:.0f} ms"
                         f"{tpot}")
    return lines


def _layout_counts(result: ServingPlan) -> tuple[int, int]:
    """Layouts searched within the budget, and how many of them are expert-parallel (an
    expert-parallel sweep counts the layouts the engine prices: ep dividing TP x DP)."""
    n_lay = n_ep = 0
    for ds in result.sweeps or (result.dataset,):
        if str(ds.attrs.get("layouts", "")).startswith("expert"):
            n = int((ds.within_budget & ds.decode_step_ms.notnull().any("batch")).sum())
            n_ep += n
        else:
            n = int(ds.within_budget.sum())
        n_lay += n
    return n_lay, n_ep


def _ep_searched(result: ServingPlan) -> str:
    def vals(v: tuple[int, ...]) -> str:
        return ",".join(map(str, v))

    return f"attention DP {vals(result.attn_dps)} x EP {vals(tuple(e for e in result.eps if e > 1))}"


def assumptions_line(result: ServingPlan) -> str:
    """The ``assumed:`` line every command's header carries
    (:func:`~simcore.studies.assumptions.assumed_line`): the device budget, the precision
    and the runtime (``result.runtime``'s; by default decode steps replay CUDA graphs,
    prefills launch from the host), and a mixture-of-experts model's routing
    (``result.moe_imbalance``, :func:`~simcore.studies.assumptions.routing_text`)."""
    from types import SimpleNamespace

    from ...model.presets import get_family
    from ..assumptions import Budget, assumed_line, dtypes_text, routing_text, runtime_text
    from .model import _workload

    budget = Budget(result.gpus, result.exact_gpus, False,
                    get_family(result.family).topology.n_devices)
    prec = (dtypes_text(result.dtype, result.dtype, result.dtype) if result.dtype else
            "weights, activations and KV cache the model's own (16-bit for the presets)")
    decode = _workload("decode", runtime=result.runtime, moe_imbalance=result.moe_imbalance)
    return assumed_line(budget.describe(), prec,
                        runtime_text(decode, _workload("prefill", runtime=result.runtime)),
                        routing_text(decode, SimpleNamespace(n_experts=result.n_experts)))


#: what the held-out checks say about a rate plan (``simcore validate``'s MLPerf section)
RATE_FIDELITY = ("fidelity: on 23 held-out MLPerf runs the simulated capacity under p99 limits "
                 "is within 3% of 2025 TensorRT-LLM Server runs, 20-32% low at its Interactive "
                 "limits and 7-46% high for vLLM, SGLang and 2024 TensorRT-LLM (their serving "
                 "host work is priced only for vLLM 0.9-0.10's synchronous scheduler, "
                 "--runtime vllm-0.10); p99 TTFT is the least reliable figure: check your "
                 "stack's rows (simcore validate; docs/validation.md)")


def rate_summary_lines(result: RatePlan) -> list[str]:
    """The lines above a rate plan's table: the model and budget, the traffic and the
    limits, what the simulation assumed, what was searched, notes, each mode's smallest."""
    lim = ", ".join(f"p99 {n} <= {v:g} ms" for n, v in (("TTFT", result.max_ttft_ms),
                                                         ("TPOT", result.max_tpot_ms))
                    if v is not None)
    prec = f" in {result.dtype}" if result.dtype else ""
    budget = (f"--gpus auto (up to {result.gpus})" if result.auto else f"up to {result.gpus}")
    sched = result.scheduler
    kv = ("layer by layer while the prefill runs" if sched.kv_overlap == "layerwise"
          else "after the prefill")
    routing = _routing(result)
    lines = [
        f"{result.model}{prec} on {budget} x {result.family}; {result.traffic.describe()}; "
        f"limits {lim}",
        f"assumed: {sched.describe()}; FCFS admission, recompute preemption of the newest "
        "request; requests dealt round-robin to replicas and workers; "
        f"{_steps_text(result.runtime)}; disaggregated KV "
        f"sent {kv} (NVLink inside a node, RDMA across), the first token arriving with it"
        + (f"; MoE routing: {routing}" if routing else ""),
        f"searched: {result.n_layouts} layouts, {len(result.candidates)} deployments "
        f"simulated in {result.elapsed_s:.1f} s",
    ]
    lines.append(RATE_FIDELITY)
    lines += [f"note: {note}" for note in result.notes]
    for mode in ("agg", "disagg"):
        b = result.best_of(mode)
        if b is not None:
            tpot = f", p99 TPOT {b.tpot_p99_ms:.1f} ms" if math.isfinite(b.tpot_p99_ms) else ""
            kvt = f", KV transfer {b.kv_transfer_ms:.2f} ms ({b.kv_link})" if mode == "disagg" else ""
            gpus = f"{b.n_devices} GPU{'s' if b.n_devices != 1 else ''}"
            lines.append(f"smallest {mode}: {b.layout} ({gpus}): p99 TTFT "
                         f"{b.ttft_p99_ms:.0f} ms{tpot}{kvt}, goodput {b.goodput_rps:.3g} of "
                         f"{b.rate_rps:.3g} req/s")
    return lines


def _routing(result: RatePlan) -> str:
    """A mixture-of-experts rate plan's routing (:func:`~..assumptions.routing_text`)."""
    from types import SimpleNamespace

    from ..assumptions import routing_text

    return routing_text(SimpleNamespace(moe_load_imbalance=result.moe_imbalance),
                        SimpleNamespace(n_experts=result.n_experts))


def _steps_text(runtime: str) -> str:
    """How a rate plan's steps run: simcore's default stack, or ``runtime``'s profile."""
    if not runtime:
        return "decode-only steps replay CUDA graphs, prefill and mixed steps launch every kernel"
    from ...model.runtime import get_runtime, host_wait_text

    rt = get_runtime(runtime)
    wait = host_wait_text(rt.host_step_ns, rt.host_seq_ns)
    return (f"runtime --runtime {rt.name} ({rt.stack}): {rt.describe(host=False)} "
            "(decode-only steps), prefill and mixed steps launch every kernel"
            + (f"; on every step {wait}" if wait else ""))


# --- files ------------------------------------------------------------------------------------

#: ``write_output`` saves the per-layout sweep Dataset (not the rows) to these suffixes.
DATASET_SUFFIXES = (".nc", ".nc4", ".zarr")


def write_output(result: ServingPlan, text: str, path: str | os.PathLike[str]) -> None:
    """``text`` (the rows as printed) to ``path``, or the plan's per-layout Dataset if
    ``path`` ends in one of :data:`DATASET_SUFFIXES`; atomically either way (a failed
    write leaves an old file as it was and raises ``OSError``)."""
    from ...io import save_dataset, write_bytes_atomic

    if Path(path).suffix.lower() in DATASET_SUFFIXES:
        save_dataset(result.dataset, path)
        for extra in sweep_paths(result, path)[1:]:
            save_dataset(extra[1], extra[0])
    else:
        write_bytes_atomic(path, text.encode("utf-8"))


def sweep_paths(result: ServingPlan, path: str | os.PathLike[str]) -> list[tuple[Path, Any]]:
    """Where :func:`write_output` saves each per-layout sweep of a plan for a Dataset
    ``path``: the first at ``path``, an MoE plan's expert-parallel sweep (when it is not
    the first) beside it as ``<stem>-ep<suffix>``."""
    p = Path(path)
    sweeps = result.sweeps or (result.dataset,)
    return [(p if i == 0 else p.with_name(f"{p.stem}-ep{p.suffix}"), ds)
            for i, ds in enumerate(sweeps)]


# --- plot -------------------------------------------------------------------------------------

_MODE_STYLE = {"agg": ("C0", "o", "aggregated"), "disagg": ("C1", "s", "disaggregated")}


def plot_frontier(result: ServingPlan, path: str | os.PathLike[str] | None = None) -> Any:
    """Tokens/s per GPU vs tokens/s per user: every candidate, each mode's Pareto frontier,
    the best configuration of each mode and the TPOT limit; the legend sits below the
    axes. Saved atomically to ``path``
    (format from the suffix) with the Agg backend; returns the matplotlib Figure."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(8.5, 5.5), layout="constrained")
    FigureCanvasAgg(fig)
    ax = fig.add_subplot()
    for mode, (color, marker, name) in _MODE_STYLE.items():
        pts = [c for c in result.candidates if c.mode == mode]
        if not pts:
            continue
        ax.scatter([c.tokens_per_s_per_user for c in pts], [c.tokens_per_s_per_gpu for c in pts],
                   s=9, color=color, alpha=0.25, marker=marker, linewidths=0)
        front = [c for c in result.frontier if c.mode == mode]
        ax.plot([c.tokens_per_s_per_user for c in front], [c.tokens_per_s_per_gpu for c in front],
                color=color, marker=marker, ms=4, lw=1.8,
                label=f"{name} frontier ({len(front)} of {len(pts)})")
        b = result.best_of(mode)
        if b is not None:
            ax.scatter([b.tokens_per_s_per_user], [b.tokens_per_s_per_gpu], s=220, marker="*",
                       color=color, edgecolors="k", zorder=5,
                       label=f"best {mode}: {b.layout}, batch {b.batch} — "
                             f"{b.tokens_per_s_per_gpu:.1f} tok/s/GPU")
    if result.max_tpot_ms is not None:
        ax.axvline(1e3 / result.max_tpot_ms, color="0.3", ls="--", lw=1,
                   label=f"TPOT limit {result.max_tpot_ms:g} ms (meets it to the right)")
    per_token = "TPOT" if result.osl > 1 else "TTFT"  # osl 1: the one token comes at TTFT
    ax.set_xlabel(f"tokens/s per user (1000 / {per_token} in ms)")
    ax.set_ylabel("output tokens/s per GPU")
    ttft = f"TTFT ≤ {result.max_ttft_ms:g} ms" if result.max_ttft_ms is not None else "no TTFT limit"
    ax.set_title(f"{result.model} on {result.gpus}× {result.family}: ISL {result.isl}, "
                 f"OSL {result.osl}, {ttft}", fontsize=10)
    ax.set_xlim(left=0)
    ax.set_ylim(bottom=0)
    ax.grid(alpha=0.3)
    longest = max((len(t) for t in ax.get_legend_handles_labels()[1]), default=0)
    ax.legend(fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.13),
              ncols=2 if longest <= 55 else 1,  # long labels one per line: none cut off
              frameon=False)  # below the axes: never over a candidate
    if path is not None:
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        _save_figure(fig, path)
    return fig
