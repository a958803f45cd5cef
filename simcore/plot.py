"""matplotlib figures: the Pareto frontier and the sensitivity ranking."""

from __future__ import annotations

import os
from typing import Any

from .report import fmt_ns

__all__ = ["plot_pareto", "plot_sensitivity", "layout_label"]


def _save(fig: Any, path: str | os.PathLike[str]) -> None:
    """Render ``fig`` in memory, then write it atomically (no 0-byte file on a full disk)."""
    import io as _io
    from pathlib import Path

    from .io import write_bytes_atomic

    buf = _io.BytesIO()
    fmt = Path(path).suffix.lstrip(".").lower() or "png"
    fig.savefig(buf, dpi=120, format=fmt)
    write_bytes_atomic(path, buf.getbuffer())


def _plt():
    import matplotlib

    if os.environ.get("MPLBACKEND") is None and not os.environ.get("DISPLAY"):
        matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def layout_label(layout: dict[str, Any]) -> str:
    s = f"TP{layout['tp']}·CP{layout['cp']}·PP{layout['pp']}·DP{layout['dp']} {layout['kv_shard_mode']}"
    if layout.get("cp", 1) > 1:
        s += f" {layout['cp_ring_variant']}/{layout['ffn_shard_scope']}"
    return s


def plot_pareto(result: Any, path: str | os.PathLike[str] | None = None, *, ax: Any = None,
                max_labels: int = 10) -> Any:
    """Latency vs cost of every fitting hardware candidate, coloured by its best layout;
    the Pareto frontier drawn as a step line. Returns the figure."""
    plt = _plt()
    fig = None
    if ax is None:
        fig, ax = plt.subplots(figsize=(8, 5), layout="constrained")
    else:
        fig = ax.figure
    scores = result.all_scores
    if not scores:
        ax.text(0.5, 0.5, result.message or "nothing fits", ha="center", va="center", wrap=True,
                transform=ax.transAxes)
    else:
        labels = [layout_label(s.layout) for s in scores]
        counts: dict[str, int] = {}
        for lab in labels:
            counts[lab] = counts.get(lab, 0) + 1
        top = sorted(counts, key=lambda k: -counts[k])[:max_labels]
        cmap = plt.get_cmap("tab10")
        for i, lab in enumerate(top):
            pts = [s for s, l2 in zip(scores, labels, strict=True) if l2 == lab]
            ax.scatter([p.cost_score for p in pts], [p.latency_ns / 1e6 for p in pts], s=18,
                       color=cmap(i % 10), label=f"{lab} ({len(pts)})", alpha=0.8)
        rest = [s for s, lab in zip(scores, labels, strict=True) if lab not in top]
        if rest:
            ax.scatter([p.cost_score for p in rest], [p.latency_ns / 1e6 for p in rest], s=10,
                       color="0.7", label=f"other layouts ({len(rest)})")
        front = sorted(result.pareto_scores, key=lambda s: s.cost_score)
        ax.step([s.cost_score for s in front], [s.latency_ns / 1e6 for s in front], where="post",
                color="k", lw=1.5, label=f"Pareto frontier ({len(front)})")
        ax.scatter([s.cost_score for s in front], [s.latency_ns / 1e6 for s in front],
                   facecolors="none", edgecolors="k", s=60)
        lats = [s.latency_ns for s in scores]
        if max(lats) > 20 * min(lats):
            ax.set_yscale("log")
        ax.legend(fontsize=7, loc="upper right")
    w = result.workload
    ax.set_xlabel("cost_score (Σ knob / default; 6 = default hardware)")
    ax.set_ylabel("latency (ms)" + (" per output token" if w.mode == "decode" else ", TTFT"))
    ax.set_title(f"{result.model} {w.mode} s_kv={w.s_kv}: {result.n_hardware} hardware × "
                 f"{result.n_layouts} layouts")
    if path is not None:
        try:
            _save(fig, path)
        finally:
            plt.close(fig)
    return fig


def plot_sensitivity(result: Any, path: str | os.PathLike[str] | None = None, *,
                     ax: Any = None) -> Any:
    """Bar chart: speed-up from doubling each knob on the fastest hardware."""
    plt = _plt()
    if ax is None:
        fig, ax = plt.subplots(figsize=(7, 4), layout="constrained")
    else:
        fig = ax.figure
    rows = result.sensitivity
    if rows:
        knobs = [r.knob for r in rows][::-1]
        vals = [100 * r.rel_speedup for r in rows][::-1]
        bars = ax.barh(knobs, vals, color=["C3" if v == max(vals) else "C0" for v in vals])
        for b, v in zip(bars, vals, strict=True):
            ax.text(b.get_width(), b.get_y() + b.get_height() / 2, f" {v:.2f}%", va="center",
                    fontsize=8)
        base = fmt_ns(rows[0].baseline_latency_ns)
        ax.set_xlabel(f"speed-up from doubling the knob (%), baseline {base}")
    else:
        ax.text(0.5, 0.5, result.message or "no sensitivity (nothing fits)", ha="center",
                va="center", transform=ax.transAxes)
    ax.set_title(f"{result.model} {result.workload.mode}: which knob buys the most speed?")
    if path is not None:
        try:
            _save(fig, path)
        finally:
            plt.close(fig)
    return fig
