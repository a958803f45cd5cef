"""matplotlib figures: the Pareto frontier, the sensitivity ranking, the latency
breakdown of one point and the validation parity plot (shared by the CLI and the app)."""

from __future__ import annotations

import os
from typing import Any

from .report import fmt_ns

__all__ = ["plot_pareto", "plot_sensitivity", "layout_label", "plot_objectives", "plot_compare",
           "plot_breakdown", "plot_parity"]


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


# variable -> (scale, unit shown, axis label)
_SCALES = {"latency_ns": (1e-6, "ms", "latency"), "cost_usd": (1e-3, "k$", "price of the devices"),
           "power_w": (1e-3, "kW", "power of the devices"),
           "cost_usd_per_device": (1e-3, "k$", "price per device"),
           "power_w_per_device": (1.0, "W", "power per device"),
           "throughput_tok_s": (1.0, "tokens/s", "throughput"),
           "tokens_per_s_per_gpu": (1.0, "tokens/s", "throughput per device")}


def _objective_axis(name: str) -> tuple[str, float, str, str]:
    from .metrics import get_metric

    try:
        m = get_metric(name)
        key, unit = m.key, m.unit
    except ValueError:
        key, unit = name, ""
    scale, shown, label = _SCALES.get(key, (1.0, unit, key))
    return key, scale, shown, label


def plot_objectives(result: Any, path: str | os.PathLike[str] | None = None, *,
                    objectives: Any = None, ax: Any = None) -> Any:
    """Two objectives of a :func:`~simcore.codesign.joint_explore` result: every fitting
    hardware point (colour = devices its best layout uses) and the frontier over those
    two objectives as a step line. ``objectives`` defaults to the result's own, which
    must then be two (print a table for more). Returns the figure."""
    from .errors import SimcoreInputError
    from .pareto import objective_directions, pareto

    objs = objective_directions(objectives if objectives is not None else result.objectives)
    if len(objs) != 2:
        raise SimcoreInputError(f"plot_objectives draws two objectives, got {list(objs)}; "
                                "print the table for more")
    plt = _plt()
    if ax is None:
        fig, ax = plt.subplots(figsize=(8, 5), layout="constrained")
    else:
        fig = ax.figure
    (xn, yn) = list(objs)
    (xk, xs, xu, xl), (yk, ys, yu, yl) = _objective_axis(xn), _objective_axis(yn)
    ds = result.dataset
    ok = ds.any_fits.values.ravel()
    if not ok.any():
        ax.text(0.5, 0.5, result.message or "nothing fits", ha="center", va="center",
                wrap=True, transform=ax.transAxes)
    else:
        x = ds[xk].transpose(*ds.any_fits.dims).values.ravel()[ok] * xs
        y = ds[yk].transpose(*ds.any_fits.dims).values.ravel()[ok] * ys
        n = ds["n_devices"].transpose(*ds.any_fits.dims).values.ravel()[ok]
        sc = ax.scatter(x, y, c=n, cmap="viridis", s=18, alpha=0.85,
                        norm=_lognorm(n) if n.max() > 2 * n.min() else None)
        fig.colorbar(sc, ax=ax, label="devices (best layout)")
        front = pareto(ds, objectives=objs).transpose(*ds.any_fits.dims).values.ravel()[ok]
        order = sorted(range(int(front.sum())), key=lambda i: x[front][i])
        fx, fy = x[front][order], y[front][order]
        ax.step(fx, fy, where="post", color="k", lw=1.5,
                label=f"Pareto frontier ({len(fx)} points)")
        ax.scatter(fx, fy, facecolors="none", edgecolors="k", s=60)
        last = None
        for xi, yi, ni in zip(fx, fy, n[front][order], strict=True):
            if ni != last:  # label where the device count changes along the frontier
                ax.annotate(f"{int(ni)} devices", (xi, yi), textcoords="offset points",
                            xytext=(4, 6), fontsize=8)
            last = ni
        if y.max() > 20 * y.min():
            ax.set_yscale("log")
        ax.legend(fontsize=8, loc="best")
    ax.set_xlabel(f"{xl} ({xu})" if xu else xl)
    ax.set_ylabel(f"{yl} ({yu})" if yu else yl)
    w = result.workload
    ax.set_title(f"{result.model} {w.mode} s_kv={w.s_kv} batch={w.batch}: "
                 f"{result.n_hardware} hardware points, best layout each", fontsize=10)
    if path is not None:
        _save(fig, path)
        plt.close(fig)
    return fig


def _lognorm(values: Any) -> Any:
    from matplotlib.colors import LogNorm

    return LogNorm(vmin=float(values.min()), vmax=float(values.max()))


def _count_label(v: float) -> str:
    """8192 -> "8K", 131072 -> "128K", 1048576 -> "1M", 48 -> "48"."""
    v = int(v)
    for div, suffix in ((1 << 20, "M"), (1 << 10, "K")):
        if v >= div and v % div == 0:
            return f"{v // div}{suffix}"
    return str(v)


def plot_compare(result: Any, path: str | os.PathLike[str] | None = None, *,
                 speedup: bool = False) -> Any:
    """Latency and throughput of each design's best layout (log x) over the swept axis
    (``s_kv``, or ``batch`` when only it varies); other values of the second axis are
    drawn as further line styles. ``speedup=True`` adds a third panel, the speed-up of
    every design over the first. The legend sits below the panels. Returns the figure."""
    import numpy as np
    from matplotlib.ticker import FixedLocator, NullLocator

    plt = _plt()
    ds = result.dataset
    x_dim = "s_kv" if ds.sizes["s_kv"] > 1 or ds.sizes["batch"] == 1 else "batch"
    other = "batch" if x_dim == "s_kv" else "s_kv"
    n_ax = 3 if speedup else 2
    fig, axes = plt.subplots(1, n_ax, figsize=(5.2 * n_ax, 4.6), layout="constrained")
    ax_l, ax_t = axes[0], axes[1]
    styles = ["-", "--", ":", "-."]
    markers = "osD^v"
    base = result.designs[0]
    for i, d in enumerate(result.designs):
        for j, ov in enumerate(ds[other].values.tolist()):
            pt = ds.sel(design=d, **{other: ov})
            xs = pt[x_dim].values
            label = d if ds.sizes[other] == 1 else f"{d}, {other}={_count_label(ov)}"
            if i == 0:
                label += " (baseline)"
            # a marker and a size per design: designs with equal numbers stay visible
            kw = dict(color=f"C{i}", ls=styles[j % len(styles)], marker=markers[i % 5],
                      ms=max(9 - 1.5 * i, 3), mfc="none" if i else f"C{i}", label=label)
            ax_l.plot(xs, pt.latency_ns.values / 1e6, **kw)
            ax_t.plot(xs, pt.throughput_tok_s.values, **kw)
            if speedup:
                axes[2].plot(xs, pt.speedup.values, **kw)
    xvals = ds[x_dim].values.tolist()
    for ax in axes:
        ax.set_xscale("log", base=2)
        ax.xaxis.set_major_locator(FixedLocator(xvals))
        ax.xaxis.set_minor_locator(NullLocator())
        ax.set_xticks(xvals, [_count_label(v) for v in xvals])
        ax.set_xlabel("context s_kv (tokens)" if x_dim == "s_kv" else "batch (sequences)")
        ax.grid(True, which="both", alpha=0.3)
    for ax, var in ((ax_l, "latency_ns"), (ax_t, "throughput_tok_s")):
        vals = ds[var].where(ds.fits).values
        if np.nanmax(vals) > 20 * np.nanmin(vals):
            ax.set_yscale("log")
    ax_l.set_ylabel("latency of the best layout (ms)"
                    + (" per output token" if result.mode == "decode" else ", TTFT"))
    ax_l.set_title("latency (lower is better)", fontsize=10)
    ax_t.set_ylabel("throughput (tokens/s)")
    ax_t.set_title("throughput (higher is better)", fontsize=10)
    if speedup:
        ax_s = axes[2]
        ax_s.axhline(1.0, color="0.5", lw=1)
        ax_s.set_ylabel(f"speed-up over {base} (×)")
        ax_s.set_title(f"latency of {base} / latency", fontsize=10)
    handles, labels = ax_l.get_legend_handles_labels()
    fig.legend(handles, labels, loc="outside lower center", fontsize=8,
               ncols=min(len(labels), 4), frameon=False)
    fig.suptitle(f"{result.model} {result.mode}: {len(result.designs)} designs, best layout "
                 "per point")
    if path is not None:
        _save(fig, path)
        plt.close(fig)
    return fig


def _finish(fig: Any, path: str | os.PathLike[str] | None) -> Any:
    if path is not None:
        _save(fig, path)
        _plt().close(fig)
    return fig


def plot_breakdown(score: Any, path: str | os.PathLike[str] | None = None, *,
                   ax: Any = None, title: str | None = None) -> Any:
    """Horizontal bars of one point's latency terms: FLOP time (``compute_ns``), byte
    time (``memory_ns``), communication (``comm_ns``), the rest and the total
    (``latency_ns``). Where no op is compute-bound the FLOP bar says so, with the time
    the point's FLOPs take at the 16-bit peak, instead of "0 ns"."""
    plt = _plt()
    if ax is None:
        fig, ax = plt.subplots(figsize=(7, 3.2), layout="constrained")
    else:
        fig = ax.figure
    names = ["FLOP time (compute-bound ops)", "byte time (memory-bound ops)",
             "communication", "other (overheads, bubbles)", "total latency"]
    other = max(score.latency_ns - score.compute_ns - score.memory_ns - score.comm_ns, 0.0)
    vals = [score.compute_ns, score.memory_ns, score.comm_ns, other, score.latency_ns]
    ms = [v / 1e6 for v in vals][::-1]
    texts = [f" {fmt_ns(v)}" for v in vals]
    peak = getattr(getattr(score, "hardware", None), "peak_tflops_f16", None)
    if score.compute_ns <= 0 and peak:
        # no op is compute-bound: say what the FLOPs would take rather than "0 ns"
        flop_ns = score.flops_per_device * score.latency_ns / (peak * 1e12)
        texts[0] = f" no op compute-bound (FLOPs at 16-bit peak: {fmt_ns(flop_ns)})"
    bars = ax.barh(names[::-1], ms, color=["k", "0.6", "C2", "C1", "C0"])
    for b, t in zip(bars, texts[::-1], strict=True):
        ax.text(b.get_width(), b.get_y() + b.get_height() / 2, t, va="center", fontsize=8)
    ax.set_xlabel("time (ms)")
    ax.set_xlim(0, max(ms) * 1.25 if max(ms) > 0 else 1)
    ax.set_title(title or f"latency breakdown: {layout_label(score.layout)}, "
                 f"cost {score.cost_score:.2f}", fontsize=10)
    return _finish(fig, path)


def plot_parity(rows: Any, path: str | os.PathLike[str] | None = None, *,
                ax: Any = None) -> Any:
    """Predicted vs measured (log-log) for validation rows, one colour per kind, the
    y = x line and ±25% band; the legend outside the data."""
    plt = _plt()
    if ax is None:
        fig, ax = plt.subplots(figsize=(8, 5.5), layout="constrained")
    else:
        fig = ax.figure
    rows = [r for r in rows if r.fits and r.measured > 0 and r.predicted > 0]
    if not rows:
        ax.text(0.5, 0.5, "no fitting validation points", ha="center", va="center",
                transform=ax.transAxes)
        return _finish(fig, path)
    for i, kind in enumerate(sorted({r.kind for r in rows})):
        pts = [r for r in rows if r.kind == kind]
        units = sorted({r.unit for r in pts})
        mae = sum(abs(r.error) for r in pts) / len(pts)
        ax.scatter([r.measured for r in pts], [r.predicted for r in pts], s=20,
                   color=f"C{i}", alpha=0.8,
                   label=f"{kind} ({len(pts)}, {', '.join(units)}), mean |err| {mae:.0%}")
    lo = min(min(r.measured, r.predicted) for r in rows) / 1.5
    hi = max(max(r.measured, r.predicted) for r in rows) * 1.5
    ax.plot([lo, hi], [lo, hi], color="k", lw=1, label="predicted = measured")
    ax.fill_between([lo, hi], [lo / 1.25, hi / 1.25], [lo * 1.25, hi * 1.25], color="0.85",
                    alpha=0.6, label="±25%")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlim(lo, hi)
    ax.set_ylim(lo, hi)
    ax.set_xlabel("measured (each point in its own unit: ms, s, tok/s, TFLOP/s)")
    ax.set_ylabel("predicted by simcore (same unit)")
    ax.set_title(f"validation: {len(rows)} measurements, predicted vs measured")
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    return _finish(fig, path)
