"""simcore.studies.plot: each figure draws what its docstring says (bars, lines, markers, labelled
axes with units, legends outside the data), on small hand-made inputs whose right
answer is known."""

from __future__ import annotations

from types import SimpleNamespace

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402
import xarray as xr  # noqa: E402

from simcore.autotune import MemoryEstimate, Trial, TuneResult  # noqa: E402
from simcore.errors import SimcoreInputError  # noqa: E402
from simcore.studies.plot import (  # noqa: E402
    plot_breakdown,
    plot_latency_throughput,
    plot_tuning,
    plot_zero_memory,
)


@pytest.fixture(autouse=True)
def _close_figures():
    yield
    plt.close("all")


def _legend_outside(fig, legend) -> bool:
    """The legend's box overlaps no axes' data area."""
    fig.canvas.draw()
    box = legend.get_window_extent()
    return not any(box.overlaps(ax.get_window_extent()) for ax in fig.axes)


def _layout(tp: int, cp: int = 1) -> dict:
    return dict(tp=tp, cp=cp, pp=1, dp=1, kv_shard_mode="head", cp_ring_variant="kv",
                ffn_shard_scope="TP")


def _score(latency_ms, compute_ms, memory_ms, comm_ms, tp=8):
    return SimpleNamespace(latency_ns=latency_ms * 1e6, compute_ns=compute_ms * 1e6,
                           memory_ns=memory_ms * 1e6, comm_ns=comm_ms * 1e6, layout=_layout(tp),
                           cost_score=6.0, flops_per_device=1e12, hardware=None)


# ---- plot_breakdown: several scores ------------------------------------------------------

def test_plot_breakdown__several_scores_stacked_ms_and_share():
    scores = {"decode": _score(10, 0, 5, 1, tp=32), "prefill": _score(40, 20, 4, 16, tp=8)}
    fig = plot_breakdown(scores)
    ax_ms, ax_pct = fig.axes
    # 4 terms (compute, memory, communication, the decode point's 4 ms of overhead) x 2 bars
    assert len(ax_ms.patches) == len(ax_pct.patches) == 8
    tops: dict[float, float] = {}
    for p in ax_ms.patches:
        x = round(p.get_x() + p.get_width() / 2, 6)
        tops[x] = max(tops.get(x, 0.0), p.get_y() + p.get_height())
    assert tops == pytest.approx({0.0: 10.0, 1.0: 40.0})  # the stack is the latency in ms
    shares: dict[float, float] = {}
    for p in ax_pct.patches:
        x = round(p.get_x() + p.get_width() / 2, 6)
        shares[x] = shares.get(x, 0.0) + p.get_height()
    assert shares == pytest.approx({0.0: 100.0, 1.0: 100.0})
    assert "50%" in [t.get_text() for t in ax_pct.texts]  # prefill compute: 20 of 40 ms
    assert ax_ms.get_ylabel() == "latency (ms)" and "(%)" in ax_pct.get_ylabel()
    ticks = [t.get_text() for t in ax_ms.get_xticklabels()]
    assert ticks[0].startswith("decode\nTP32") and ticks[1].startswith("prefill\nTP8")
    (legend,) = fig.legends
    assert [t.get_text() for t in legend.get_texts()][-1].startswith("other")
    assert _legend_outside(fig, legend)


def test_plot_breakdown__no_other_bar_when_the_terms_add_up(tmp_path):
    fig = plot_breakdown([_score(10, 2, 5, 3), _score(8, 0, 4, 4, tp=4)], tmp_path / "b.png")
    assert len(fig.axes[0].patches) == 6  # compute, memory, communication; no "other"
    assert (tmp_path / "b.png").stat().st_size > 5000
    assert fig.number not in plt.get_fignums()  # saved and closed


def test_plot_breakdown__several_scores_refuse_ax():
    _, ax = plt.subplots()
    with pytest.raises(SimcoreInputError, match="drop ax="):
        plot_breakdown({"a": _score(1, 0, 1, 0)}, ax=ax)


def test_plot_breakdown__one_score_bars_and_total():
    ax = plot_breakdown(_score(10, 2, 5, 1)).axes[0]
    widths = [p.get_width() for p in ax.patches][::-1]  # drawn bottom (total) first
    assert widths == pytest.approx([2, 5, 1, 2, 10])
    assert ax.get_xlabel() == "time (ms)"


# ---- plot_latency_throughput -----------------------------------------------------------

def _sweep(batch: int, latency_ms, n_devices, fits, mode="decode") -> xr.Dataset:
    lat = np.asarray(latency_ms, float) * 1e6
    return xr.Dataset(
        {"latency_ns": ("tp", lat), "throughput_tok_s": ("tp", batch / (lat * 1e-9)),
         "n_devices": ("tp", np.asarray(n_devices)), "fits": ("tp", np.asarray(fits))},
        coords={"tp": np.arange(len(lat))},
        attrs={"model": "M", "mode": mode, "batch": batch, "s_kv": 8192})


def test_plot_latency_throughput__points_frontier_optima_and_slo():
    # layouts: (latency ms, GPUs); the last fits nowhere. tok/s/GPU = 1000 / (ms * GPUs)
    a = _sweep(1, [2, 3, 5, 4, 1], [8, 2, 1, 4, 64], [True, True, True, True, False])
    b = _sweep(8, [4, 6], [8, 1], [True, True])
    fig = plot_latency_throughput({"batch 1": a, "batch 8": b}, slo_ms=4.5)
    ax = fig.axes[0]
    dots = [c for c in ax.collections if len(c.get_offsets()) > 1]
    assert [len(c.get_offsets()) for c in dots] == [4, 2]  # every fitting layout, no more
    lines = {ln.get_label(): ln for ln in ax.get_lines()}
    front = lines["batch 1: frontier of 4 fitting layouts"]
    # (2 ms, 8 GPUs) 62.5 tok/s/GPU, (3, 2) 166.7, (5, 1) 200; (4 ms, 4 GPUs) is dominated
    assert front.get_ydata().tolist() == [2, 3, 5]
    marks = [c.get_offsets()[0] for c in ax.collections if len(c.get_offsets()) == 1]
    # star, square of batch 1, then of batch 8 (8000 / (4 ms x 8), 8000 / (6 ms x 1))
    assert np.allclose(marks, [[62.5, 2.0], [200.0, 5.0], [250.0, 4.0], [1333.333, 6.0]])
    slo = [ln for ln in ax.get_lines() if ln.get_linestyle() == "--" and not ln.get_label()
           .startswith(("batch", "SLO"))]
    assert [ln.get_ydata()[0] for ln in slo] == [4.5]
    assert (ax.get_xlabel(), ax.get_ylabel()) == ("output tokens/s per GPU",
                                                  "time per output token (ms)")
    assert ax.get_xscale() == "log" and ax.get_yscale() == "linear"  # x spans 62-1333
    labels = [t.get_text() for t in ax.get_legend().get_texts()]
    assert labels[-3:] == ["lowest latency", "most tokens/s per GPU", "SLO 4.5 ms"]
    assert _legend_outside(fig, ax.get_legend())


def test_plot_latency_throughput__prefill_labels_and_nothing_fits():
    ds = _sweep(1, [100, 200], [1, 2], [False, False], mode="prefill")
    ax = plot_latency_throughput(ds).axes[0]
    assert ax.get_ylabel() == "time to first token (ms)"
    assert ax.get_xlabel() == "prompt tokens/s per GPU"
    assert [t.get_text() for t in ax.get_legend().get_texts()][0] == "batch 1: nothing fits"


def test_plot_latency_throughput__evaluate_sweep_marks_top_points():
    import simcore
    from simcore.engine.metrics import top_points

    ds = simcore.evaluate("Llama 3.1 8B", simcore.Workload("decode", batch=8, s_kv=8192),
                          family="H100-SXM")
    ax = plot_latency_throughput(ds).axes[0]
    star = next(c for c in ax.collections if len(c.get_offsets()) == 1).get_offsets()[0]
    best = top_points(ds, "latency", n=1)[0]
    assert star.tolist() == pytest.approx([best["throughput_tok_s"] / best["n_devices"],
                                           best["latency_ns"] / 1e6])


# ---- plot_zero_memory ------------------------------------------------------------------

def test_plot_zero_memory__bars_caps_and_usable_line():
    est = {0: MemoryEstimate(130e9, 5e9, 77e9), 1: MemoryEstimate(40e9, 5e9, 77e9),
           3: MemoryEstimate(20e9, 5e9, 77e9)}
    fig = plot_zero_memory(est)
    ax = fig.axes[0]
    heights = [round(p.get_height(), 6) for p in ax.patches]
    # states, then the activations of the largest micro-batch (0, 7 and 11 samples x 5 GB)
    assert heights == [130, 40, 20, 0, 35, 55]
    texts = [t.get_text() for t in ax.texts]
    assert texts == ["states 130.0 GB\ndoes not fit", "states 40.0 GB\nmicro-batch ≤ 7",
                     "states 20.0 GB\nmicro-batch ≤ 11"]
    (usable,) = [c for c in ax.collections if c.get_label() == "usable HBM per GPU"]
    assert {round(float(y), 6) for seg in usable.get_segments() for y in seg[:, 1]} == {77.0}
    assert [t.get_text() for t in ax.get_xticklabels()] == ["ZeRO-0", "ZeRO-1", "ZeRO-3"]
    assert ax.get_ylabel() == "memory per GPU (GB)"
    assert ax.get_ylim()[1] > 130  # the bar that does not fit is drawn whole
    assert _legend_outside(fig, ax.get_legend())


# ---- plot_tuning -----------------------------------------------------------------------

def _trial(stage, mbs, throughput, *, gas=1, ok=True, phase="tune"):
    metrics = {"throughput": throughput, "latency": 1e6 * mbs / throughput,
               "mem_bytes": (10 + 5 * mbs) * 1e9, "FLOPS_per_gpu": 1e14}
    return Trial(f"z{stage}_gas{gas}_tmbspg{mbs}", stage=stage, micro_batch=mbs,
                 grad_accum=gas, status="ok" if ok else "failed",
                 metrics=metrics if ok else None, phase=phase)


def _result():
    trials = [_trial(1, 1, 10.0), _trial(1, 2, 15.0), _trial(1, 2, 12.0, gas=2),
              _trial(1, 4, 1.0, ok=False), _trial(2, 1, 11.0), _trial(2, 3, 20.0)]
    return TuneResult.from_trials(trials, metric="throughput",
                                  stage_values={0: None, 1: 15.0, 2: 20.0},
                                  skipped={0: "model states do not fit"})


def test_plot_tuning__lines_through_trials_best_per_micro_batch():
    fig = plot_tuning(_result(), usable_bytes=40e9)
    assert len(fig.axes) == 3
    thr = fig.axes[0]
    lines = {ln.get_label(): ln for ln in thr.get_lines()}
    assert lines["ZeRO-1"].get_xdata().tolist() == [1, 2]  # failed micro-batch 4 left out
    assert lines["ZeRO-1"].get_ydata().tolist() == [10, 15]  # gas=2's 12 loses to 15
    assert lines["ZeRO-2"].get_ydata().tolist() == [11, 20]
    circles = [c for c in thr.collections if c.get_label().startswith("_")]
    assert sum(len(c.get_offsets()) for c in circles) == 5  # every successful trial
    star = next(c for c in thr.collections if c.get_label().startswith("chosen"))
    assert star.get_offsets()[0].tolist() == [3, 20]
    assert [ax.get_ylabel() for ax in fig.axes] == ["throughput (samples/s)", "step time (ms)",
                                                    "memory per GPU (GB)"]
    assert fig.axes[1].get_lines()[0].get_ydata()[0] == pytest.approx(100.0)  # 1e5 us -> ms
    usable = [ln for ln in fig.axes[2].get_lines() if ln.get_label() == "usable HBM per GPU"]
    assert usable and usable[0].get_ydata()[0] == pytest.approx(40)
    assert fig._suptitle.get_text() == ("throughput tuning — lines and circles: the tuner's "
                                        "trials; no result for ZeRO-0")
    (legend,) = fig.legends
    assert "the tuner's trials" in [t.get_text() for t in legend.get_texts()]
    assert _legend_outside(fig, legend)


def test_plot_tuning__sweep_draws_the_lines(tmp_path):
    sweep = [_trial(1, m, 10.0 + m) for m in range(1, 6)] + [_trial(1, 6, 1.0, ok=False)]
    fig = plot_tuning(_result(), tmp_path / "t.svg", sweep=sweep, metrics=("flops", "memory"))
    assert [ax.get_ylabel() for ax in fig.axes] == ["model TFLOP/s per GPU",
                                                    "memory per GPU (GB)"]
    (line,) = [ln for ln in fig.axes[0].get_lines() if ln.get_label() == "ZeRO-1"]
    assert line.get_xdata().tolist() == [1, 2, 3, 4, 5]
    assert "every micro-batch that fits" in fig._suptitle.get_text()
    assert (tmp_path / "t.svg").read_text().startswith("<?xml")


def test_plot_tuning__unknown_panel_says_what_to_pass():
    with pytest.raises(SimcoreInputError, match="pass some of .*'throughput'"):
        plot_tuning(_result(), metrics=("energy_per_token",))


# ---- plot_pareto, plot_sensitivity: legend and labels stay clear of the data --------------

def _explore_result():
    scores = [SimpleNamespace(latency_ns=lat * 1e6, cost_score=cost, layout=_layout(tp))
              for lat, cost, tp in ((7.2, 6, 32), (7.2, 7, 8), (5.9, 7, 32), (5.9, 8, 32),
                                    (5.8, 9, 8))]
    return SimpleNamespace(
        all_scores=scores, pareto_scores=[scores[0], scores[2], scores[4]], message="",
        workload=SimpleNamespace(mode="decode", s_kv=8192), model="M", n_hardware=5,
        n_layouts=2,
        sensitivity=[SimpleNamespace(knob="bw_hbm_gbs", rel_speedup=0.14,
                                     baseline_latency_ns=5.8e6),
                     SimpleNamespace(knob="pe_hbm_gb", rel_speedup=0.0,
                                     baseline_latency_ns=5.8e6)])


def test_plot_pareto__legend_outside_the_points():
    from simcore.studies.plot import plot_pareto

    fig = plot_pareto(_explore_result())
    ax = fig.axes[0]
    assert ax.get_ylabel() == "latency (ms) per output token"
    labels = [t.get_text() for t in ax.get_legend().get_texts()]
    assert labels[-1] == "Pareto frontier (3)"
    assert _legend_outside(fig, ax.get_legend())


def test_plot_sensitivity__value_labels_inside_the_axes():
    from simcore.studies.plot import plot_sensitivity

    fig = plot_sensitivity(_explore_result())
    ax = fig.axes[0]
    fig.canvas.draw()
    frame = ax.get_window_extent()
    assert [t.get_text() for t in ax.texts] == [" 0.00%", " 14.00%"]
    assert all(t.get_window_extent().x1 <= frame.x1 for t in ax.texts)
    assert "(%)" in ax.get_xlabel()


def test_plot_parity__every_row_shown_hollow_where_predicted_not_to_fit():
    from simcore.studies.plot import plot_parity

    def row(kind, measured, predicted, fits, unit="ms"):
        return SimpleNamespace(kind=kind, measured=measured, predicted=predicted, unit=unit,
                               error=(predicted - measured) / measured, fits=fits)

    rows = [row("decode", 10.0, 11.0, True), row("decode", 20.0, 15.0, False),
            row("train", 1.0, 1.2, True, unit="s")]
    fig = plot_parity(rows)
    ax = fig.axes[0]
    assert "3 measurements" in fig.get_suptitle()
    assert ax.get_title() == "time: 3 measurements"  # seconds join the ms panel
    labels = [t.get_text() for t in ax.get_legend().get_texts()]
    assert "decode: ran, predicted not to fit (1)" in labels
    # the legend's mean error counts the non-fitting row too: (10% + 25%) / 2
    assert any(t.startswith("decode (2), mean |err| 18%") for t in labels)
    hollow = [c for c in ax.collections if len(c.get_offsets()) == 1
              and c.get_facecolors().size == 0]
    assert len(hollow) == 1 and tuple(hollow[0].get_offsets()[0]) == (20.0, 15.0)
    train = [c for c in ax.collections if c.get_label().startswith("train")][0]
    assert tuple(train.get_offsets()[0]) == (1000.0, 1200.0)  # 1 s -> 1000 ms
    # the ±25% error band spans 0.75x to 1.25x the measured value
    band = [c for c in ax.collections if c.get_label() == "±25% error"][0]
    ys = band.get_paths()[0].vertices[:, 1]
    xs = band.get_paths()[0].vertices[:, 0]
    assert min(ys / xs) == pytest.approx(0.75) and max(ys / xs) == pytest.approx(1.25)
    plt.close(fig)


def test_plot_parity__one_panel_per_quantity_never_two_units_on_an_axis():
    from simcore.studies.plot import plot_parity

    rows = [SimpleNamespace(kind=k, measured=m, predicted=m * 1.1, unit=u, error=0.1, fits=True)
            for k, m, u in [("decode", 5.0, "ms"), ("decode", 900.0, "tok/s"),
                            ("train", 3000.0, "tokens/s/GPU"), ("train", 400.0, "TFLOP/s")]]
    fig = plot_parity(rows)
    shown = [a for a in fig.axes if a.get_visible()]
    assert sorted(a.get_xlabel() for a in shown) == [
        "measured model FLOP/s per GPU (TFLOP/s)", "measured throughput (tok/s)",
        "measured throughput per GPU (tok/s/GPU)", "measured time (ms)"]
    plt.close(fig)
