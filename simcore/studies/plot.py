"""matplotlib figures shared by the CLI ``--plot``, the app and the notebooks: the Pareto
frontier, the sensitivity ranking, the latency breakdown of one point or of several, the
latency vs tokens/s-per-GPU map of layout sweeps, ZeRO memory per stage, autotuning curves
and the validation parity plot. Each returns its Figure; ``path=`` saves it atomically."""

from __future__ import annotations

import os
from typing import Any

from .report import fmt_ns

__all__ = ["plot_pareto", "plot_sensitivity", "layout_label", "plot_objectives", "plot_compare",
           "plot_breakdown", "plot_parity", "plot_holdout", "plot_latency_throughput", "plot_zero_memory",
           "plot_tuning"]


def _save(fig: Any, path: str | os.PathLike[str]) -> None:
    """Render ``fig`` in memory, then write it atomically (no 0-byte file on a full disk)."""
    import io as _io
    from pathlib import Path

    from ..io import write_bytes_atomic

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
    s = f"TP{layout['tp']}·CP{layout['cp']}·PP{layout['pp']}·DP{layout['dp']}"
    if (layout.get("ep") or 1) > 1:
        s += f"·EP{layout['ep']}"
    s += f" {layout['kv_shard_mode']}"
    if layout.get("cp", 1) > 1:
        s += f" {layout['cp_ring_variant']}/{layout['ffn_shard_scope']}"
    return s


def plot_pareto(result: Any, path: str | os.PathLike[str] | None = None, *, ax: Any = None,
                max_labels: int = 10) -> Any:
    """Latency vs cost of every fitting hardware candidate, coloured by its best layout;
    the Pareto frontier drawn as a step line, the legend to the right of the axes.
    Returns the figure."""
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
        ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.02, 1.0), borderaxespad=0)
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
        # room for the value after the longest bar (and for a bar that slows things down)
        ax.set_xlim(min(0.0, 1.18 * min(vals)), 1.18 * max(max(vals), 1e-9))
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
    from ..engine.metrics import get_metric

    try:
        m = get_metric(name)
        key, unit = m.key, m.unit
    except ValueError:
        key, unit = name, ""
    scale, shown, label = _SCALES.get(key, (1.0, unit, key))
    return key, scale, shown, label


def plot_objectives(result: Any, path: str | os.PathLike[str] | None = None, *,
                    objectives: Any = None, ax: Any = None) -> Any:
    """Two objectives of a :func:`~simcore.studies.codesign.joint_explore` result: every
    fitting hardware point, coloured by the devices its best layout uses (one colour and
    legend entry per device count), the frontier over those two objectives as a step line,
    and, beside it, the frontier's neighbourhood at full scale (the frontier is usually a
    small corner of the whole cloud). ``objectives`` defaults to the result's own, which
    must then be two (print a table for more). With ``ax`` only the overview is drawn
    there. Returns the figure."""
    from ..engine.pareto import objective_directions, pareto
    from ..errors import SimcoreInputError

    objs = objective_directions(objectives if objectives is not None else result.objectives)
    if len(objs) != 2:
        raise SimcoreInputError(f"plot_objectives draws two objectives, got {list(objs)}; "
                                "print the table for more")
    plt = _plt()
    if ax is None:
        fig, (ax, zoom) = plt.subplots(1, 2, figsize=(12, 5), layout="constrained")
    else:
        fig, zoom = ax.figure, None
    (xn, yn) = list(objs)
    (xk, xs, xu, xl), (yk, ys, yu, yl) = _objective_axis(xn), _objective_axis(yn)
    ds = result.dataset
    ok = ds.any_fits.values.ravel()
    w = result.workload
    ax.set_title(f"{result.model} {w.mode} s_kv={w.s_kv} batch={w.batch}: "
                 f"{result.n_hardware} hardware points, best layout each", fontsize=10)
    panels = [ax] if zoom is None else [ax, zoom]
    for a in panels:
        a.set_xlabel(f"{xl} ({xu})" if xu else xl)
        a.set_ylabel(f"{yl} ({yu})" if yu else yl)
    if not ok.any():
        ax.text(0.5, 0.5, result.message or "nothing fits", ha="center", va="center",
                wrap=True, transform=ax.transAxes)
        if zoom is not None:
            zoom.set_visible(False)
        return _finish(fig, path)
    dims = ds.any_fits.dims
    x = ds[xk].transpose(*dims).values.ravel()[ok] * xs
    y = ds[yk].transpose(*dims).values.ravel()[ok] * ys
    n = ds["n_devices"].transpose(*dims).values.ravel()[ok]
    front = pareto(ds, objectives=objs).transpose(*dims).values.ravel()[ok]
    order = sorted(range(int(front.sum())), key=lambda i: x[front][i])
    fx, fy, fn = x[front][order], y[front][order], n[front][order]
    for a in panels:
        _objective_points(a, x, y, n, fx, fy, fn)
    if y.max() > 20 * y.min():
        ax.set_yscale("log")
    ax.legend(fontsize=8, loc="best", title="devices (best layout)", title_fontsize=8)
    if zoom is not None:
        _zoom_to(zoom, fx, fy)
        zoom.set_title(f"the frontier's neighbourhood ({len(fx)} frontier points)",
                       fontsize=10)
    return _finish(fig, path)


def _objective_points(ax: Any, x: Any, y: Any, n: Any, fx: Any, fy: Any, fn: Any) -> None:
    """Candidates coloured by device count (one legend entry each) and the frontier."""
    import numpy as np

    counts = sorted({int(v) for v in n})
    for i, count in enumerate(counts):
        mine = n == count
        ax.scatter(x[mine], y[mine], s=18, alpha=0.75, color=f"C{i % 10}",
                   label=f"{count} devices ({int(mine.sum())} candidates)")
    ax.step(fx, fy, where="post", color="k", lw=1.5, label=f"Pareto frontier ({len(fx)})")
    ax.scatter(fx, fy, facecolors="none", edgecolors="k", s=60)
    for j in np.flatnonzero(np.r_[True, fn[1:] != fn[:-1]]):  # where the count changes
        ax.annotate(f"{int(fn[j])} devices", (fx[j], fy[j]), textcoords="offset points",
                    xytext=(4, 6), fontsize=8)


def _zoom_to(ax: Any, fx: Any, fy: Any) -> None:
    """Limit ``ax`` to the frontier's bounding box plus a margin."""
    for lo, hi, setter in ((fx.min(), fx.max(), ax.set_xlim), (fy.min(), fy.max(), ax.set_ylim)):
        pad = 0.1 * (hi - lo) or 0.05 * abs(hi) or 1.0
        setter(lo - pad, hi + pad)


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


#: The latency terms of a point, declared once for both breakdown charts:
#: (attribute, label, colour). What the latency holds beyond them is drawn as ``_OTHER``.
_BREAKDOWN_TERMS = (("compute_ns", "FLOP time (compute-bound ops)", "C0"),
                    ("memory_ns", "byte time (memory-bound ops)", "C1"),
                    ("comm_ns", "communication (exposed)", "C2"))
_OTHER = ("other (launch and per-step overheads)", "0.6")


def _breakdown_terms(score: Any) -> list[tuple[str, float, str]]:
    """(label, ns, colour) of each latency term of ``score``, the rest ("other") last."""
    terms = [(label, float(getattr(score, key)), colour)
             for key, label, colour in _BREAKDOWN_TERMS]
    other = max(score.latency_ns - sum(v for _, v, _ in terms), 0.0)
    return [*terms, (_OTHER[0], other, _OTHER[1])]


def plot_breakdown(score: Any, path: str | os.PathLike[str] | None = None, *,
                   ax: Any = None, title: str | None = None) -> Any:
    """Where the latency goes: one point's terms, or the best layouts of several studies.

    Given one score, horizontal bars of its latency terms: FLOP time (``compute_ns``),
    byte time (``memory_ns``), exposed communication (``comm_ns``), the rest and the
    total (``latency_ns``). Where no op is compute-bound the FLOP bar says so, with the
    time the point's FLOPs take at the 16-bit peak, instead of "0 ns".

    Given a mapping ``{label: score}`` (or a sequence of scores), two panels of stacked
    bars, one bar per score labelled with its layout: the terms in ms (total on top) and
    their share of the latency in %; the legend sits below the panels.

    Parameters
    ----------
    score : JointScore, or mapping of str to JointScore, or sequence of JointScore
        Anything with ``latency_ns``, ``compute_ns``, ``memory_ns``, ``comm_ns`` and
        ``layout`` (e.g. ``result.best`` of :func:`~simcore.studies.codesign.joint_explore`).
    path : str or path-like, optional
        Save the figure there (format from the suffix), atomically, and close it.
    ax : matplotlib Axes, optional
        Draw one score's bars into it; several scores make their own two-panel figure.
    title : str, optional
        Title of the chart (one score) or of the figure (several).

    Returns
    -------
    matplotlib.figure.Figure

    Examples
    --------
    >>> from simcore.studies.codesign import joint_explore
    >>> studies = {mode: joint_explore("Llama 3.1 8B", s_kv=8192, mode=mode,
    ...                                depth="two_stage").best
    ...            for mode in ("decode", "prefill")}
    >>> fig = plot_breakdown(studies)
    >>> [ax.get_ylabel() for ax in fig.axes]
    ['latency (ms)', 'share of the latency (%)']
    >>> len(plot_breakdown(studies["decode"]).axes[0].patches)  # one bar per term + total
    5
    """
    from collections.abc import Mapping, Sequence

    if isinstance(score, Mapping | Sequence):
        if ax is not None:
            from ..errors import SimcoreInputError

            raise SimcoreInputError("plot_breakdown: ax= draws one score; several scores "
                                    "make their own two-panel figure (drop ax=)")
        scores = (dict(score) if isinstance(score, Mapping)
                  else {layout_label(s.layout): s for s in score})
        return _plot_breakdowns(scores, path, title=title)
    plt = _plt()
    if ax is None:
        fig, ax = plt.subplots(figsize=(7, 3.2), layout="constrained")
    else:
        fig = ax.figure
    terms = _breakdown_terms(score)
    names = [label for label, _, _ in terms] + ["total latency"]
    vals = [v for _, v, _ in terms] + [score.latency_ns]
    colours = [c for _, _, c in terms] + ["k"]
    ms = [v / 1e6 for v in vals][::-1]
    texts = [f" {fmt_ns(v)}" for v in vals]
    peak = getattr(getattr(score, "hardware", None), "peak_tflops_f16", None)
    if score.compute_ns <= 0 and peak:
        # no op is compute-bound: say what the FLOPs would take rather than "0 ns"
        flop_ns = score.flops_per_device * score.latency_ns / (peak * 1e12)
        texts[0] = f" no op compute-bound (FLOPs at 16-bit peak: {fmt_ns(flop_ns)})"
    bars = ax.barh(names[::-1], ms, color=colours[::-1])
    for b, t in zip(bars, texts[::-1], strict=True):
        ax.text(b.get_width(), b.get_y() + b.get_height() / 2, t, va="center", fontsize=8)
    ax.set_xlabel("time (ms)")
    ax.set_xlim(0, max(ms) * 1.25 if max(ms) > 0 else 1)
    ax.set_title(title or f"latency breakdown: {layout_label(score.layout)}, "
                 f"cost {score.cost_score:.2f}", fontsize=10)
    return _finish(fig, path)


def _plot_breakdowns(scores: dict[str, Any], path: str | os.PathLike[str] | None, *,
                     title: str | None) -> Any:
    """Stacked bars (ms and % share) of the latency terms of each score."""
    plt = _plt()
    n = len(scores)
    fig, (ax_ms, ax_pct) = plt.subplots(1, 2, figsize=(max(9.0, 3.0 + 2.4 * n), 4.6),
                                        layout="constrained")
    if not scores:
        ax_ms.text(0.5, 0.5, "no scores to break down", ha="center", va="center",
                   transform=ax_ms.transAxes)
        return _finish(fig, path)
    x = list(range(n))
    terms = [_breakdown_terms(s) for s in scores.values()]
    lat = [s.latency_ns for s in scores.values()]
    bottom_ms, bottom_pct = [0.0] * n, [0.0] * n
    for j, (label, _, colour) in enumerate(terms[0]):
        ns = [t[j][1] for t in terms]
        if j == len(terms[0]) - 1 and all(v <= 1e-9 * max(lat) for v in ns):
            continue  # the terms add up to the latency: no "other" bar
        ms = [v / 1e6 for v in ns]
        pct = [100 * v / total if total > 0 else 0.0 for v, total in zip(ns, lat, strict=True)]
        ax_ms.bar(x, ms, bottom=bottom_ms, color=colour, label=label, width=0.6)
        ax_pct.bar(x, pct, bottom=bottom_pct, color=colour, width=0.6)
        for i, p in enumerate(pct):
            if p >= 6:  # a label only where the segment has room for it
                ax_pct.text(i, bottom_pct[i] + p / 2, f"{p:.0f}%", ha="center", va="center",
                            fontsize=8, color="w")
        bottom_ms = [b + v for b, v in zip(bottom_ms, ms, strict=True)]
        bottom_pct = [b + v for b, v in zip(bottom_pct, pct, strict=True)]
    for i, total in enumerate(lat):
        ax_ms.text(i, bottom_ms[i], fmt_ns(total), ha="center", va="bottom", fontsize=8)
    ticks = ["\n".join([name, *layout_label(s.layout).split(" ", 1)])
             for name, s in scores.items()]
    for ax in (ax_ms, ax_pct):
        ax.set_xticks(x, ticks, fontsize=8)
        ax.set_xlim(-0.6, n - 0.4)
    ax_ms.set_ylim(0, 1.12 * max(bottom_ms) if max(bottom_ms) > 0 else 1)
    ax_ms.set_ylabel("latency (ms)")
    ax_ms.set_title("time per term (decode: per output token; prefill: TTFT)", fontsize=10)
    ax_pct.set_ylim(0, 100)
    ax_pct.set_ylabel("share of the latency (%)")
    ax_pct.set_title("share of the latency", fontsize=10)
    handles, labels = ax_ms.get_legend_handles_labels()
    fig.legend(handles, labels, loc="outside lower center", ncols=len(labels), fontsize=8,
               frameon=False)
    fig.suptitle(title or f"latency breakdown of {n} points")
    return _finish(fig, path)


def _fit_miss_scatter(ax: Any, pts: Any, xy: Any, color: str, name: str, label: str, *,
                      size: float, miss_size: float, alpha: float) -> None:
    """Measured vs predicted (``xy(row)``) of ``pts``: filled where the configuration is
    predicted to fit memory, hollow (and labelled so) where it ran but is predicted not to."""
    fit = [xy(r) for r in pts if r.fits]
    ax.scatter([x for x, _ in fit], [y for _, y in fit], s=size, color=color, alpha=alpha,
               label=label)
    miss = [xy(r) for r in pts if not r.fits]
    if miss:
        ax.scatter([x for x, _ in miss], [y for _, y in miss], s=miss_size, facecolors="none",
                   edgecolors=color, label=f"{name}: ran, predicted not to fit ({len(miss)})")


def _parity_frame(ax: Any, lo: float, hi: float) -> None:
    """Log-log axes from ``lo`` to ``hi`` with the y = x line and the ±25% error band."""
    ax.plot([lo, hi], [lo, hi], color="k", lw=1, label="predicted = measured")
    ax.fill_between([lo, hi], [lo * 0.75, hi * 0.75], [lo * 1.25, hi * 1.25], color="0.85",
                    alpha=0.6, label="±25% error")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlim(lo, hi)
    ax.set_ylim(lo, hi)


#: validation units -> (panel title, the panel's unit, scale into it): times share one
#: panel in ms; each kind of rate has its own
_PARITY_PANELS: dict[str, tuple[str, str, float]] = {
    "ms": ("time", "ms", 1.0), "s": ("time", "ms", 1e3),
    "tok/s": ("throughput", "tok/s", 1.0), "tokens/s/GPU": ("throughput per GPU", "tok/s/GPU", 1.0),
    "TFLOP/s": ("model FLOP/s per GPU", "TFLOP/s", 1.0),
}


def _parity_panel(r: Any) -> tuple[str, str, float]:
    return _PARITY_PANELS.get(r.unit, (r.unit, r.unit, 1.0))


def _parity_xy(r: Any) -> tuple[float, float]:
    """Measured and predicted of a row in its panel's unit."""
    scale = _parity_panel(r)[2]
    return r.measured * scale, r.predicted * scale


def plot_parity(rows: Any, path: str | os.PathLike[str] | None = None) -> Any:
    """Predicted vs measured (log-log) for validation rows, one panel per quantity (times
    in ms, throughput, throughput per GPU, model FLOP/s: never two units on one axis), one
    colour per kind, the y = x line and the ±25% error band (0.75x to 1.25x the measured
    value); rows whose configuration is predicted not to fit memory are hollow markers
    (they ran, so the miss is the model's). Returns the figure."""
    plt = _plt()
    rows = [r for r in rows if r.measured > 0 and r.predicted > 0]
    panels: dict[tuple[str, str], list[Any]] = {}
    for r in rows:
        title, unit, _ = _parity_panel(r)
        panels.setdefault((title, unit), []).append(r)
    n = max(len(panels), 1)
    ncols = min(n, 2)
    nrows = -(-n // ncols)
    fig, axes = plt.subplots(nrows, ncols, figsize=(6.2 * ncols, 4.6 * nrows),
                             layout="constrained", squeeze=False)
    flat = list(axes.ravel())
    if not rows:
        flat[0].text(0.5, 0.5, "no validation points with a prediction", ha="center",
                     va="center", transform=flat[0].transAxes)
        return _finish(fig, path)
    kinds = sorted({r.kind for r in rows})
    for ax, ((title, unit), pts) in zip(flat, sorted(panels.items()), strict=False):
        for kind in kinds:
            mine = [r for r in pts if r.kind == kind]
            if not mine:
                continue
            mae = sum(abs(r.error) for r in mine) / len(mine)
            _fit_miss_scatter(ax, mine, _parity_xy, f"C{kinds.index(kind)}", kind,
                              f"{kind} ({len(mine)}), mean |err| {mae:.0%}",
                              size=20, miss_size=28, alpha=0.8)
        xy = [v for r in pts for v in _parity_xy(r)]
        lo, hi = min(xy) / 1.5, max(xy) * 1.5
        _parity_frame(ax, lo, hi)
        ax.set_xlabel(f"measured {title} ({unit})")
        ax.set_ylabel(f"predicted {title} ({unit})")
        ax.set_title(f"{title}: {len(pts)} measurements", fontsize=10)
        ax.legend(fontsize=7, loc="upper left")
    for ax in flat[len(panels):]:
        ax.set_visible(False)
    fig.suptitle(f"validation: {len(rows)} measurements, predicted vs measured")
    return _finish(fig, path)


def plot_holdout(rows: Any, path: str | os.PathLike[str] | None = None) -> Any:
    """The held-out check (:func:`simcore.validation.holdout_rows`) in two panels: predicted
    vs measured time per output token (log-log, one colour per serving framework, hollow
    where simcore predicts the configuration not to fit, the ±25% band), and the signed
    error against the tensor-parallel degree, each framework's mean per degree joined by a
    line (a trend across degrees is a bias of the model, not noise)."""
    import numpy as np

    plt = _plt()
    fig, (ax, ax_tp) = plt.subplots(1, 2, figsize=(13, 5.2), layout="constrained",
                                    gridspec_kw={"width_ratios": [1.15, 1]})
    rows = [r for r in rows if r.measured_ms > 0 and r.predicted_ms > 0]
    if not rows:
        ax.text(0.5, 0.5, "no held-out rows with a prediction", ha="center", va="center",
                transform=ax.transAxes)
        return _finish(fig, path)
    backends = sorted({r.backend for r in rows})
    for i, b in enumerate(backends):
        pts = [r for r in rows if r.backend == b]
        mae = sum(abs(r.error) for r in pts) / len(pts)
        _fit_miss_scatter(ax, pts, lambda r: (r.measured_ms, r.predicted_ms), f"C{i}", b,
                          f"{b} ({len(pts)} rows), mean |err| {mae:.0%}", size=10,
                          miss_size=18, alpha=0.55)
        tps = sorted({r.tp for r in pts})
        jitter = (i - (len(backends) - 1) / 2) * 0.12
        ax_tp.scatter([np.log2(r.tp) + jitter for r in pts], [100 * r.error for r in pts],
                      s=7, color=f"C{i}", alpha=0.35)
        means = [100 * float(np.mean([r.error for r in pts if r.tp == t])) for t in tps]
        ax_tp.plot([np.log2(t) + jitter for t in tps], means, "o-", color=f"C{i}", lw=2,
                   label=f"{b}: mean per TP")
    lo = min(min(r.measured_ms, r.predicted_ms) for r in rows) / 1.3
    hi = max(max(r.measured_ms, r.predicted_ms) for r in rows) * 1.3
    _parity_frame(ax, lo, hi)
    ax.set_xlabel("measured time per output token (ms)")
    ax.set_ylabel("predicted by simcore (ms)")
    mae = sum(abs(r.error) for r in rows) / len(rows)
    med = float(np.median([abs(r.error) for r in rows]))
    ax.set_title(f"held out, never fitted: {len(rows)} served runs, mean |err| {mae:.0%}, "
                 f"median {med:.0%}", fontsize=10)
    ax.legend(fontsize=7, loc="lower right")
    all_tp = sorted({r.tp for r in rows})
    ax_tp.axhline(0, color="k", lw=1)
    ax_tp.axhspan(-25, 25, color="0.9", zorder=0)
    ax_tp.set_xticks([np.log2(t) for t in all_tp], [f"TP{t}" for t in all_tp])
    ax_tp.set_ylim(max(-100, ax_tp.get_ylim()[0]), min(150, ax_tp.get_ylim()[1]))
    ax_tp.set_xlabel("tensor-parallel degree")
    ax_tp.set_ylabel("signed error (%): + = predicted slower")
    ax_tp.set_title("error against TP degree (clipped to -100..150%)", fontsize=10)
    ax_tp.legend(fontsize=7, loc="upper right")
    return _finish(fig, path)


def plot_mlperf(rows: Any, path: str | os.PathLike[str] | None = None) -> Any:
    """The MLPerf Server replays (:func:`simcore.validation.serving_mlperf.mlperf_rows`) in
    two panels: per run, the rate the submission ran at (scheduled) and simcore's capacity under the
    run's p99 limits, with the Offline counterpart measured and simulated (samples/s); and
    the signed error of the four percentiles at the logged rate (the ±15% band is issue
    35's target)."""
    import numpy as np

    plt = _plt()
    fig, (ax, ax_p) = plt.subplots(1, 2, figsize=(14, max(5.2, 1.8 + 0.42 * len(rows))),
                                   layout="constrained")
    if not rows:
        ax.text(0.5, 0.5, "no MLPerf runs replayed", ha="center", va="center",
                transform=ax.transAxes)
        return _finish(fig, path)
    y = np.arange(len(rows))
    names = [r.id for r in rows]
    h = 0.2
    ax.barh(y - 1.5 * h, [r.measured_rps for r in rows], h, color="C0",
            label="Server: rate the submission ran at and passed (scheduled)")
    ax.barh(y - 0.5 * h, [r.capacity_rps for r in rows], h, color="C0", alpha=0.45,
            label="Server: simcore's capacity under the run's p99 limits")
    ax.barh(y + 0.5 * h, [r.offline_measured_rps for r in rows], h, color="C1",
            label="Offline: measured samples/s")
    ax.barh(y + 1.5 * h, [r.offline_rps for r in rows], h, color="C1", alpha=0.45,
            label="Offline: simcore")
    for i, r in enumerate(rows):
        ax.text(max(r.capacity_rps, r.measured_rps) * 1.02, i - h,
                f"{r.capacity_bound}{100 * r.capacity_error:+.0f}%", va="center", fontsize=7)
    ax.set_yticks(y, names, fontsize=6)
    ax.invert_yaxis()
    ax.set_xlabel("requests (samples) per second")
    ax.set_title("MLPerf runs, held out: capacity and Offline throughput", fontsize=10)
    ax.set_xlim(0, 1.12 * max(max(r.capacity_rps, r.measured_rps) for r in rows))
    ax.legend(fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.1), ncol=2)
    # the rows' percentiles, in their order: "ttft_p50_ms" is "p50 TTFT"
    keys = [(k, f"{k.split('_')[1]} {k.split('_')[0].upper()}") for k in rows[0].measured]
    lo, hi = -100.0, 150.0  # the axis; a bar beyond it is clipped and labelled
    for j, (k, label) in enumerate(keys):
        err = [100 * r.error[k] for r in rows]
        ax_p.barh(y + (j - 1.5) * h, np.clip(err, lo, hi), h, color=f"C{j + 2}", label=label)
        for i, e in enumerate(err):
            if e > hi:
                ax_p.text(hi, i + (j - 1.5) * h, f" {e:+.0f}%", va="center", fontsize=6)
    ax_p.axvline(0, color="k", lw=1)
    ax_p.axvspan(-15, 15, color="0.9", zorder=0)
    ax_p.set_xlim(lo, hi + 40)
    ax_p.set_yticks(y, [""] * len(rows))
    ax_p.invert_yaxis()
    ax_p.set_xlabel("signed error at the logged rate (%): - = predicted faster")
    ax_p.set_title(f"percentiles at the logged rate (band: ±15%; clipped at {hi:+.0f}%)",
                   fontsize=10)
    ax_p.legend(fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.1), ncol=4)
    return _finish(fig, path)


#: y-axis label of a latency in ms, per workload mode.
_LATENCY_LABEL = {"decode": "time per output token (ms)", "prefill": "time to first token (ms)",
                  "train": "step time (ms)"}
#: x-axis label of tokens/s per device, per workload mode.
_PER_GPU_LABEL = {"decode": "output tokens/s per GPU", "prefill": "prompt tokens/s per GPU",
                  "train": "training tokens/s per GPU"}


def _flat(*arrays: Any) -> list[Any]:
    """The DataArrays broadcast against each other and flattened in one dim order."""
    import xarray as xr

    arrays = xr.broadcast(*arrays)
    dims = arrays[0].dims
    return [a.transpose(*dims).values.ravel() for a in arrays]


def _log_if_wide(ax: Any, axis: str, values: Any, ratio: float = 20.0) -> None:
    """Log scale where the positive values span more than ``ratio`` times."""
    import numpy as np
    from matplotlib.ticker import FuncFormatter

    v = np.asarray(values, dtype=float)
    v = v[np.isfinite(v) & (v > 0)]
    if v.size and v.max() > ratio * v.min():
        (ax.set_xscale if axis == "x" else ax.set_yscale)("log")
        if v.max() < 100 * v.min():  # under two decades: plain numbers, minor 2s and 5s too
            def minor(x: float, _: Any) -> str:
                lead = round(x / 10 ** np.floor(np.log10(x)))
                return f"{x:g}" if lead in (2, 5) else ""

            which = ax.xaxis if axis == "x" else ax.yaxis
            which.set_major_formatter(FuncFormatter(lambda x, _: f"{x:g}"))
            which.set_minor_formatter(FuncFormatter(minor))


def plot_latency_throughput(sweeps: Any, path: str | os.PathLike[str] | None = None, *,
                            ax: Any = None, slo_ms: float | None = None,
                            feasible: str = "fits", title: str | None = None) -> Any:
    """Latency vs tokens/s per GPU of every fitting layout of one or more sweeps.

    Each sweep (a Dataset from :func:`simcore.evaluate`, e.g. one per batch size) is
    drawn in its own colour: every feasible layout as a faint dot, the Pareto frontier
    of (latency ↓, tokens/s per GPU ↑) as a line, the lowest-latency layout as a star
    and the layout with the most tokens/s per GPU as a square (both from
    :func:`simcore.engine.metrics.top_points`, so they are the points the tables name). Later
    sweeps get smaller markers, so optima that coincide stay visible. Tokens/s per GPU
    is ``throughput_tok_s / n_devices``. Axes that span more than 10x are logarithmic;
    the legend sits to the right of the axes.

    Parameters
    ----------
    sweeps : Dataset, or mapping of str to Dataset
        Sweeps of one mode; a mapping's keys label them (default ``"batch <b>"``).
    path : str or path-like, optional
        Save the figure there (format from the suffix), atomically, and close it.
    ax : matplotlib Axes, optional
        Draw into it (e.g. one panel of a grid of contexts).
    slo_ms : float, optional
        A latency limit, drawn as a dashed horizontal line.
    feasible : str
        The boolean variable that marks the layouts to draw (``"fits"``).
    title : str, optional
        Default: model, mode and context of the first sweep.

    Returns
    -------
    matplotlib.figure.Figure

    Examples
    --------
    >>> import simcore
    >>> sweeps = {f"batch {b}": simcore.evaluate("Llama 3.1 8B",
    ...                                          simcore.Workload("decode", batch=b, s_kv=8192),
    ...                                          family="H100-SXM") for b in (1, 8)}
    >>> fig = plot_latency_throughput(sweeps, slo_ms=20)
    >>> fig.axes[0].get_xlabel(), fig.axes[0].get_ylabel()
    ('output tokens/s per GPU', 'time per output token (ms)')
    """
    from collections.abc import Mapping

    import xarray as xr
    from matplotlib.lines import Line2D

    from ..engine.metrics import top_points
    from ..engine.pareto import pareto

    plt = _plt()
    if ax is None:
        fig, ax = plt.subplots(figsize=(8.5, 5), layout="constrained")
    else:
        fig = ax.figure
    if isinstance(sweeps, xr.Dataset) or not isinstance(sweeps, Mapping):  # a Dataset is a Mapping
        sweeps = {f"batch {sweeps.attrs.get('batch', '?')}": sweeps}
    first = next(iter(sweeps.values()), None)
    mode = first.attrs.get("mode", "decode") if first is not None else "decode"
    xs_all, ys_all = [], []
    for i, (label, ds) in enumerate(sweeps.items()):
        colour, size = f"C{i % 10}", max(500 * 0.45 ** i, 40)
        ds = ds.assign(tokens_per_s_per_gpu=ds.throughput_tok_s / ds.n_devices)
        front = pareto(ds, objectives={"latency_ns": "min", "tokens_per_s_per_gpu": "max"},
                       feasible=feasible)
        lat, tpg, ok, on = _flat(ds.latency_ns / 1e6, ds.tokens_per_s_per_gpu, ds[feasible],
                                 front)
        ok, on = ok.astype(bool), on.astype(bool)
        if not ok.any():
            ax.plot([], [], color=colour, label=f"{label}: nothing fits")
            continue
        xs_all.extend(tpg[ok])
        ys_all.extend(lat[ok])
        ax.scatter(tpg[ok], lat[ok], s=6, color=colour, alpha=0.25, linewidths=0)
        order = tpg[on].argsort()
        ax.plot(tpg[on][order], lat[on][order], color=colour, lw=1.5,
                label=f"{label}: frontier of {int(ok.sum())} fitting layouts")
        for metric, marker, s in (("latency", "*", size), ("tokens_per_s_per_gpu", "s",
                                                           size / 2.5)):
            best = top_points(ds, metric, n=1, feasible=feasible)[0]
            ax.scatter([best["tokens_per_s_per_gpu"]], [best["latency_ns"] / 1e6], marker=marker,
                       s=s, color=colour, edgecolors="k", linewidths=0.7, zorder=3)
    handles = [Line2D([], [], ls="none", marker="*", ms=13, color="0.6", mec="k",
                      label="lowest latency"),
               Line2D([], [], ls="none", marker="s", ms=7, color="0.6", mec="k",
                      label="most tokens/s per GPU")]
    if slo_ms is not None:
        ax.axhline(slo_ms, color="k", ls="--", lw=1)
        handles.append(Line2D([], [], color="k", ls="--", lw=1, label=f"SLO {slo_ms:g} ms"))
        ys_all.append(slo_ms)
    _log_if_wide(ax, "x", xs_all, 10.0)
    _log_if_wide(ax, "y", ys_all, 10.0)
    ax.set_xlabel(_PER_GPU_LABEL.get(mode, "tokens/s per GPU"))
    ax.set_ylabel(_LATENCY_LABEL.get(mode, "latency (ms)"))
    ax.grid(True, which="major", alpha=0.3)
    own, _ = ax.get_legend_handles_labels()
    ax.legend(handles=own + handles, fontsize=7, loc="upper left", bbox_to_anchor=(1.02, 1.0),
              borderaxespad=0)
    if first is not None:
        ax.set_title(title or f"{first.attrs.get('model', '')} {mode}, "
                     f"s_kv={int(first.attrs.get('s_kv', 0)):,}", fontsize=10)
    return _finish(fig, path)


def plot_zero_memory(estimates: Any, path: str | os.PathLike[str] | None = None, *,
                     ax: Any = None, title: str | None = None) -> Any:
    """Per-GPU memory of each ZeRO stage against the usable HBM.

    One stacked bar per stage: the model states, then the activations of the largest
    micro-batch that fits; the usable HBM per GPU as a dashed line over each bar, and
    above each bar its states in GB and the micro-batch cap (or "does not fit"). The
    legend sits to the right of the axes.

    Parameters
    ----------
    estimates : mapping of int to MemoryEstimate
        ZeRO stage -> :class:`~simcore.autotune.MemoryEstimate` (e.g. from
        :meth:`SimulatorRunner.estimate <simcore.autotune.SimulatorRunner.estimate>`);
        ``None`` values (a runner without estimates) are skipped.
    path : str or path-like, optional
        Save the figure there (format from the suffix), atomically, and close it.
    ax : matplotlib Axes, optional
        Draw into it.
    title : str, optional

    Returns
    -------
    matplotlib.figure.Figure

    Examples
    --------
    >>> from simcore.autotune import Experiment, SimulatorRunner
    >>> runner = SimulatorRunner("Llama 2 7B", family="A100-80G", n_gpus=8, seq_len=1024)
    >>> est = {s: runner.estimate(Experiment(f"z{s}", stage=s, micro_batch=1, grad_accum=1,
    ...                                      ds_config={"fp16": {"enabled": True}}, n_gpus=8))
    ...        for s in range(4)}
    >>> fig = plot_zero_memory(est)
    >>> [t.get_text() for t in fig.axes[0].get_xticklabels()]
    ['ZeRO-0', 'ZeRO-1', 'ZeRO-2', 'ZeRO-3']
    """
    plt = _plt()
    if ax is None:
        fig, ax = plt.subplots(figsize=(8.5, 4.2), layout="constrained")
    else:
        fig = ax.figure
    est = {int(s): e for s, e in estimates.items() if e is not None}
    if not est:
        ax.text(0.5, 0.5, "no memory estimates", ha="center", va="center",
                transform=ax.transAxes)
        return _finish(fig, path)
    stages = sorted(est)
    states = [est[s].model_states_bytes / 1e9 for s in stages]
    caps = [est[s].max_micro_batch for s in stages]
    acts = [c * est[s].activation_bytes_per_sample / 1e9 for s, c in zip(stages, caps,
                                                                           strict=True)]
    usable = [est[s].usable_bytes / 1e9 for s in stages]
    ax.bar(stages, states, width=0.6, color="C0", label="model states")
    ax.bar(stages, acts, width=0.6, bottom=states, color="C1",
           label="activations at the largest micro-batch that fits")
    ax.hlines(usable, [s - 0.5 for s in stages], [s + 0.5 for s in stages], colors="k",
              linestyles="--", lw=1.2, label="usable HBM per GPU")
    top = max(max(a + b for a, b in zip(states, acts, strict=True)), max(usable))
    for s, st, act, u, cap, e in zip(stages, states, acts, usable, caps,
                                     (est[s] for s in stages), strict=True):
        if not cap:
            note = "does not fit"
        elif e.activation_bytes_per_sample <= 0:
            note = "no activations"
        else:
            note = f"micro-batch ≤ {cap}"
        ax.text(s, max(st + act, u) + 0.02 * top, f"states {st:.1f} GB\n{note}", ha="center",
                va="bottom", fontsize=8)
    ax.set_ylim(0, 1.22 * top)
    ax.set_xlim(min(stages) - 0.6, max(stages) + 0.6)
    ax.set_xticks(stages, [f"ZeRO-{s}" for s in stages])
    ax.set_ylabel("memory per GPU (GB)")
    ax.set_title(title or "ZeRO model states + activations per GPU", fontsize=10)
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.02, 1.0), borderaxespad=0)
    return _finish(fig, path)


#: Trial metric -> (scale, axis label with unit, panel title) for :func:`plot_tuning`.
_TUNING_AXES = {"throughput": (1.0, "throughput (samples/s)", "throughput: larger is better"),
                "latency": (1e-3, "step time (ms)", "step time: smaller is better"),
                "FLOPS_per_gpu": (1e-12, "model TFLOP/s per GPU", "FLOP/s: larger is better"),
                "mem_bytes": (1e-9, "memory per GPU (GB)", "memory: the cap on the micro-batch")}
#: ZeRO stage -> (marker, line style, marker size): overlapping stages stay visible.
_STAGE_STYLE = {0: ("D", ":", 10), 1: ("s", "--", 9), 2: ("o", "-", 5), 3: ("^", "-.", 4)}


def plot_tuning(result: Any, path: str | os.PathLike[str] | None = None, *,
                sweep: Any = None, metrics: Any = ("throughput", "latency", "mem_bytes"),
                usable_bytes: float | None = None) -> Any:
    """Tuning curves: each metric against the micro-batch per GPU, one line per ZeRO stage.

    One panel per metric. The lines run through ``sweep`` (every successful trial of an
    exhaustive sweep, e.g. :meth:`SimulatorRunner.run
    <simcore.autotune.SimulatorRunner.run>` over every stage and micro-batch) or, without
    one, through the tuner's own trials; where several trials share a stage and
    micro-batch (other accumulation steps or knobs) the line takes the one best by the
    tuner's metric. Circles mark every successful trial of the tuner, a gold star the
    chosen one, a dashed line on the memory panel ``usable_bytes``. The legend sits
    below the panels; the title names the stages without a result.

    Parameters
    ----------
    result : TuneResult
        From :meth:`Autotuner.tune <simcore.autotune.Autotuner.tune>`.
    path : str or path-like, optional
        Save the figure there (format from the suffix), atomically, and close it.
    sweep : sequence of Trial, optional
        The trials to draw the lines through (failed ones are skipped).
    metrics : sequence of str
        Panels, from ``throughput`` (samples/s), ``latency`` (step time, ms),
        ``FLOPS_per_gpu`` (TFLOP/s) and ``mem_bytes`` (GB), or their aliases.
    usable_bytes : float, optional
        Usable HBM per GPU, drawn on the ``mem_bytes`` panel.

    Returns
    -------
    matplotlib.figure.Figure

    Examples
    --------
    >>> from simcore.autotune import Autotuner, SimulatorRunner
    >>> runner = SimulatorRunner("Llama 2 7B", family="A100-80G", n_gpus=8, seq_len=1024)
    >>> result = Autotuner({"fp16": {"enabled": True}, "zero_optimization": {"stage": [1, 3]},
    ...                     "autotuning": {"metric": "throughput",
    ...                                    "num_tuning_micro_batch_sizes": 3}}, runner).tune()
    >>> fig = plot_tuning(result, metrics=("throughput", "latency"))
    >>> [ax.get_ylabel() for ax in fig.axes]
    ['throughput (samples/s)', 'step time (ms)']
    """
    from matplotlib.lines import Line2D
    from matplotlib.ticker import MaxNLocator

    from ..engine.metrics import UnknownMetricError, get_metric, metric_value
    from ..errors import SimcoreInputError

    names = []
    for m in metrics:
        try:
            name = get_metric(m).name
        except UnknownMetricError:
            name = m
        if name not in _TUNING_AXES:
            raise SimcoreInputError(f"plot_tuning: no panel for metric {m!r}; pass some of "
                                    f"{list(_TUNING_AXES)}")
        names.append(name)
    sign = get_metric(result.metric).sign  # +1: smaller is better
    tried = [t for t in result.trials if t.ok and t.metrics]

    def rank(t: Any) -> float:  # smaller is better; a trial without the metric ranks last
        v = metric_value(t.metrics, result.metric)
        return sign * v if v is not None else float("inf")

    lines: dict[int, dict[int, Any]] = {}
    for t in [t for t in (sweep if sweep is not None else tried) if t.ok and t.metrics]:
        kept = lines.setdefault(t.stage, {}).get(t.micro_batch)
        if kept is None or rank(t) < rank(kept):
            lines[t.stage][t.micro_batch] = t
    plt = _plt()
    fig, axes = plt.subplots(1, len(names), figsize=(5.2 * len(names), 4.4),
                             layout="constrained", squeeze=False)
    axes = list(axes[0])
    best = result.best
    def point(t: Any, name: str, scale: float) -> list[tuple[int, float]]:
        """[(micro-batch, scaled value)] of trial ``t``, or [] without the metric."""
        v = metric_value(t.metrics, name)
        return [] if v is None else [(t.micro_batch, v * scale)]

    for ax, name in zip(axes, names, strict=True):
        scale, label, panel = _TUNING_AXES[name]
        for stage in sorted(lines):
            marker, ls, ms = _STAGE_STYLE.get(stage, ("v", "-", 5))
            xy = [p for _, t in sorted(lines[stage].items()) for p in point(t, name, scale)]
            ax.plot([x for x, _ in xy], [y for _, y in xy], marker=marker, ls=ls, ms=ms,
                    color=f"C{stage}", label=f"ZeRO-{stage}")
            xy = [p for t in tried if t.stage == stage for p in point(t, name, scale)]
            ax.scatter([x for x, _ in xy], [y for _, y in xy], s=90, facecolors="none",
                       edgecolors=f"C{stage}", zorder=2)
        for x, y in point(best, name, scale) if best is not None else []:
            ax.scatter([x], [y], marker="*", s=300, color="gold", edgecolors="k", zorder=3,
                       label=f"chosen by the tuner ({result.metric}): ZeRO-{best.stage}, "
                             f"micro-batch {best.micro_batch}")
        if name == "mem_bytes" and usable_bytes is not None:
            ax.axhline(usable_bytes * scale, color="k", ls="--", lw=1,
                       label="usable HBM per GPU")
            ax.set_ylim(top=max(ax.get_ylim()[1], 1.06 * usable_bytes * scale))
        ax.set_xlabel("micro-batch per GPU")
        ax.set_ylabel(label)
        ax.set_title(panel, fontsize=10)
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.grid(True, alpha=0.3)
    seen: dict[str, Any] = {}
    for ax in axes:
        for h, lab in zip(*ax.get_legend_handles_labels(), strict=True):
            seen.setdefault(lab, h)
    seen["the tuner's trials"] = Line2D([], [], ls="none", marker="o", ms=9, mfc="none",
                                        mec="0.3")
    fig.legend(list(seen.values()), list(seen), loc="outside lower center", fontsize=8,
               ncols=min(len(seen), 4), frameon=False)
    what = ("lines: every micro-batch that fits; circles: the tuner's trials"
            if sweep is not None else "lines and circles: the tuner's trials")
    none = sorted(set(result.skipped) | {s for s, v in result.stage_values.items() if v is None})
    fig.suptitle(f"{result.metric} tuning — {what}"
                 + (f"; no result for {', '.join(f'ZeRO-{s}' for s in none)}" if none else ""),
                 fontsize=11)
    return _finish(fig, path)
