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
from .search import ROW_KEYS, ServingPlan

__all__ = ["TABLE_COLUMNS", "format_rows", "plot_frontier", "summary_lines", "write_output"]

#: The table's columns: (row key, header); JSON and CSV carry every key of
#: :data:`~.search.ROW_KEYS`.
TABLE_COLUMNS: tuple[tuple[str, str], ...] = (
    ("mode", "mode"), ("layout", "deployment"), ("batch", "batch"),
    ("prefill_batch", "p_batch"), ("ttft_ms", "TTFT ms"), ("tpot_ms", "TPOT ms"),
    ("request_latency_ms", "latency ms"), ("tokens_per_s_per_gpu", "tok/s/GPU"),
    ("tokens_per_s_per_user", "tok/s/user"), ("n_devices", "GPUs"),
    ("max_batch", "max batch"), ("meets_limits", "meets"))


# --- rows -------------------------------------------------------------------------------------

def _json_value(v: Any) -> Any:
    if isinstance(v, float) and not math.isfinite(v):
        return None
    return v


def format_rows(rows: Sequence[Mapping[str, Any]], fmt: str) -> str:
    """Rows as ``table``, ``json`` (a list of objects) or ``csv`` (header + one line each)."""
    if fmt == "json":
        return json.dumps([{k: _json_value(v) for k, v in r.items()} for r in rows], indent=2,
                          allow_nan=False) + "\n"
    if fmt == "csv":
        buf = io.StringIO()
        w = csv.DictWriter(buf, fieldnames=list(ROW_KEYS), lineterminator="\n")
        w.writeheader()
        for r in rows:
            w.writerow({k: ("" if _json_value(r.get(k)) is None else r.get(k))
                        for k in ROW_KEYS})
        return buf.getvalue()
    if fmt == "table":
        from ..report import table

        return table([dict(r) for r in rows], TABLE_COLUMNS) + "\n"
    raise ServingError(f"format must be table, json or csv, got {fmt!r}")


# --- the header -------------------------------------------------------------------------------

def summary_lines(result: ServingPlan) -> list[str]:
    """The lines above the table: what was searched (model, budget, traffic, limits, how
    many layouts and configurations, how long), the plan's notes and each mode's best."""
    lim = ", ".join(f"{n} <= {v:g} ms" for n, v in (("TTFT", result.max_ttft_ms),
                                                     ("TPOT", result.max_tpot_ms))
                    if v is not None) or "no latency limits"
    n_lay = int(result.dataset.within_budget.sum())
    prec = f" in {result.dtype}" if result.dtype else ""
    lines = [f"{result.model}{prec} on {result.gpus} x {result.family}, ISL {result.isl} / OSL "
             f"{result.osl}, {lim}: {n_lay} layouts x {result.dataset.sizes['batch']} batches "
             f"searched in {result.elapsed_s:.1f} s; {len(result.candidates)} configurations"]
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
    else:
        write_bytes_atomic(path, text.encode("utf-8"))


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
    ax.legend(fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.13), ncols=2,
              frameon=False)  # below the axes: never over a candidate
    if path is not None:
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        _save_figure(fig, path)
    return fig
