"""``simcore validate``: predicted vs measured for every public measurement.

Rows: one per point (``id``, ``kind``, ``model``, ``hardware``, ``layout``,
``measured``, ``predicted`` in the point's ``unit``, ``error_pct`` = predicted/measured
- 1 in percent, ``fits``, ``modelled`` (False for the ``--unmodelled`` extras), ``ref``,
``source``), then the mean absolute error. Exit code 1 when the mean exceeds
:data:`~simcore.validation.MEAN_ERROR_THRESHOLD` or any point exceeds
:data:`~simcore.validation.POINT_ERROR_THRESHOLD`.
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import asdict, fields, replace
from typing import Any

from ..errors import SimcoreInputError
from ..model.specs import Efficiency
from .options import add_output_options, assignment, fraction, plot_file, positive_float, share
from .output import Column, emit_rows, for_script, note_stream, refuse_shared_paths

__all__ = ["COLUMNS", "add_parser", "run"]

_FACTORS = tuple(f.name for f in fields(Efficiency))
_TIMES = ("op_latency_ns", "step_overhead_ns", "seq_overhead_ns")
#: factors for which 0 means something (no overlap, free overlap)
_SHARES = ("roofline_overlap", "comm_contention")


def _time_ns(text: str) -> float:
    return 0.0 if text.strip() in ("0", "0.0") else positive_float(text)

COLUMNS = [
    Column("id", "id"), Column("kind", "kind"), Column("model", "model"),
    Column("hardware", "hardware"), Column("layout", "layout"),
    Column("measured", "measured", display=lambda r: f"{r['measured']:.4g}"),
    Column("predicted", "predicted", display=lambda r: f"{r['predicted']:.4g}"),
    Column("unit", "unit"),
    Column("error", "error", "error_pct",
           display=lambda r: f"{100 * r['error']:+.1f}%" + ("" if r["fits"] else " (no fit)")),
    Column("fits", in_table=False), Column("modelled", in_table=False),
    Column("ref", "source"), Column("source", in_table=False),
]


def add_parser(sub: Any, name: str, help: str) -> None:
    from ..validation import KINDS, MEAN_ERROR_THRESHOLD, POINT_ERROR_THRESHOLD

    p = sub.add_parser(
        name, help=help,
        description="Predict every public measurement (Megatron-LM training, TensorRT-LLM / "
                    "lmdeploy / FasterTransformer inference) on its measured layout with the "
                    "fitted efficiency factors and print predicted vs measured: a report, "
                    "exit code 0. With --strict, exit code 1 when the mean |error| exceeds "
                    f"{MEAN_ERROR_THRESHOLD:.0%} or any point exceeds "
                    f"{POINT_ERROR_THRESHOLD:.0%}.")
    p.add_argument("--kind", choices=list(KINDS), action="append", default=None,
                   help="only this kind of measurement (repeatable; default: all)")
    p.add_argument("--efficiency",
                   type=assignment({f: _time_ns if f in _TIMES else
                                    (share if f in _SHARES else fraction)
                                    for f in _FACTORS}),
                   action="append", default=[], metavar="NAME=VALUE",
                   help="override a fitted factor (repeatable): a fraction in (0, 1] "
                        "([0, 1] for roofline_overlap, [0, 0.99] for comm_contention), or a "
                        "time in ns for "
                        + ", ".join(_TIMES) + ", e.g. compute=0.7; "
                        "names: " + ", ".join(_FACTORS))
    p.add_argument("--strict", action="store_true",
                   help=f"exit 1 when the targets fail (mean |error| over "
                        f"{100 * MEAN_ERROR_THRESHOLD:.0f}%% or a point over "
                        f"{100 * POINT_ERROR_THRESHOLD:.0f}%%), as CI gates do; default: "
                        "report, exit 0")
    p.add_argument("--no-loso", action="store_true",
                   help="skip the leave-one-source-out refits (about 15-60 s)")
    p.add_argument("--no-mlperf", action="store_true",
                   help="skip the MLPerf Inference Server replays (held out; about four minutes)")
    p.add_argument("--mlperf-plot", type=plot_file, default=None, metavar="FILE.png",
                   help="save the MLPerf replays' plot: capacity and Offline throughput per "
                        "run, measured vs simulated, and the percentiles' errors")
    p.add_argument("--unmodelled", action="store_true",
                   help="also list the measurements the cost model does not cover (not "
                        "counted in the error)")
    p.add_argument("--plot", type=plot_file, default=None, metavar="FILE.png",
                   help="save the predicted-vs-measured plot of the points (.png, .svg, .pdf)")
    p.add_argument("--holdout-plot", type=plot_file, default=None, metavar="FILE.png",
                   help="save the held-out check's plot: predicted vs measured TPOT per "
                        "serving framework, and the error against the TP degree")
    add_output_options(p, rows="the per-point rows")
    p.set_defaults(func=run)


def _rows(rows: list[Any], refs: dict[str, str], *, modelled: bool) -> list[dict[str, Any]]:
    return [{**asdict(r), "ref": refs[r.id], "modelled": modelled} for r in rows]


#: the plots a run could not write (one line each): the report goes on, the exit code is 2
_PLOT_FAILURES: list[str] = []


def _save_plot(option: str, draw: Any, path: Any) -> None:
    """Draw a figure to ``path`` (written atomically). A failed write is one line on
    stderr and exit code 2 at the end: the rest of the report still prints."""
    try:
        draw(path)
    except OSError as exc:
        line = (f"simcore validate: {option}: cannot write {str(path)!r} "
                f"({exc.strerror or exc}); pass another path")
        _PLOT_FAILURES.append(line)
        print(line, file=sys.stderr)
        return
    print(f"saved {option.removeprefix('--')} to {path}", file=sys.stderr)


def _print_holdout(eff: Efficiency, notes: Any, plot: Any = None) -> None:
    """The held-out check (:mod:`simcore.validation.holdout`): summary and groups, and
    its plot when ``plot`` is a path."""
    from ..validation.holdout import SOURCE, holdout_rows, holdout_summary

    hold = holdout_rows(eff)
    s = holdout_summary(hold)
    print(f"\nheld out, never fitted: {s['n']} served TPOT rows of aiconfigurator's silicon "
          "CSV (H100 / H200; TensorRT-LLM, vLLM, SGLang; Llama 3.1 8B / 70B, Qwen3-32B; "
          "simcore.validation.holdout):", file=notes)
    print(f"  mean |error| {100 * s['mean_abs_error']:.1f}% (median "
          f"{100 * s['median_abs_error']:.1f}%, mean signed {100 * s['mean_error']:+.1f}%), "
          f"within 10%: {100 * s['within_10']:.0f}%, within 25%: {100 * s['within_25']:.0f}%; "
          f"predicted not to fit (they ran): {s['not_fitting']}", file=notes)
    for (backend, hw, model, prec), (err, signed, n) in s["groups"].items():
        print(f"  {backend:<7} {hw:<9} {model:<33} {prec:<6} {n:4d} rows  "
              f"mean |error| {100 * err:5.1f}%  signed {100 * signed:+6.1f}%", file=notes)
    print(f"  [{SOURCE}]", file=notes)
    if plot is not None:
        from ..studies.plot import plot_holdout

        _save_plot("--holdout-plot", lambda path: plot_holdout(hold, path), plot)


def _print_by_reason(title: str, pairs: Any, notes: Any) -> None:
    """A held-out set's points left out: ``title``, then one line per reason with its
    (point id, reason) ``pairs``' ids."""
    gaps: dict[str, list[str]] = {}
    for pid, why in pairs:
        gaps.setdefault(why, []).append(pid)
    print(f"  {title}:", file=notes)
    for why, ids in gaps.items():
        print(f"    {len(ids):2d} x {why}: {', '.join(ids)}", file=notes)


def _print_blackwell(eff: Efficiency, notes: Any) -> None:
    """The Blackwell held-out set (:mod:`simcore.validation.blackwell`): summary per kind
    and family, each point, and the points not covered with the reason."""
    from ..validation.blackwell import blackwell_not_covered, blackwell_rows, blackwell_summary

    rows = blackwell_rows(eff)
    s = blackwell_summary(rows)
    kinds = ", ".join(f"{k} {100 * e:.1f}% ({n})" for k, (e, _, n) in s["kinds"].items())
    print(f"\nBlackwell, never fitted: {s['n']} points, mean |error| "
          f"{100 * s['mean_abs_error']:.1f}% (mean signed {100 * s['mean_error']:+.1f}%), per "
          f"kind: {kinds} (simcore.validation.blackwell; a new generation is out of sample):",
          file=notes)
    for fam, (err, signed, n) in s["families"].items():
        print(f"  {fam:<12} {n:3d} points  mean |error| {100 * err:5.1f}%  signed "
              f"{100 * signed:+6.1f}%", file=notes)
    for r in rows:
        print(f"  {r.id:<34} {r.layout:<18} measured {r.measured:9.4g} {r.unit:<12} predicted "
              f"{r.predicted:9.4g}  {100 * r.error:+6.1f}%", file=notes)
    _print_by_reason("not covered (no pinned setting simcore can express; never guessed)",
                     [(pid, why) for pid, _, why in blackwell_not_covered()], notes)
    print("  [NVIDIA-NeMo Megatron-Bridge docs/performance-summary-archive.md, 26.04.01 and "
          "25.11 pre-training tables (DGX-GB300, DGX-GB200, DGX-B300, DGX-B200 rows); "
          "simcore/validation/blackwell_measurements.json]", file=notes)


def _print_weight_only(eff: Efficiency, notes: Any) -> None:
    """The weight-only and multi-node inference held-out set
    (:mod:`simcore.validation.weight_only`): summary per weight dtype, each point, the
    points skipped with the reason."""
    from ..validation.weight_only import weight_only_rows, weight_only_skipped, weight_only_summary

    rows = weight_only_rows(eff)
    s = weight_only_summary(rows)
    dts = ", ".join(f"{d} {100 * e:.1f}% ({n})" for d, (e, _, n) in s["dtypes"].items())
    print(f"\nweight-only and multi-node inference, never fitted: {s['n']} points, mean "
          f"|error| {100 * s['mean_abs_error']:.1f}% ({dts}; mean signed "
          f"{100 * s['mean_error']:+.1f}%, + = predicted faster; {s['multi_node']} across "
          "nodes; simcore.validation.weight_only):", file=notes)
    for r in rows:
        print(f"  {r.id:<44} {r.dtype:<5} {r.layout:<6} measured {r.measured:7.4g} {r.unit:<6} "
              f"predicted {r.predicted:7.4g}  {100 * r.error:+6.1f}%", file=notes)
    print("  int4 / int8 rows run torch's tinygemm kernel / an Inductor dequantising GEMV, "
          "slower per byte than the Marlin-class rate the A100 carries (wo_int4_bw_ratio, "
          "wo_int8_bw_ratio = 1): simcore lacks that kernel rate, kept as is, not tuned",
          file=notes)
    _print_by_reason("skipped (no setting simcore can reproduce; never guessed)",
                     weight_only_skipped(), notes)
    print("  [pytorch-labs/gpt-fast README.md @0f925b5d 'Benchmarks'; pytorch/ao "
          "torchao/quantization/README.md @03d01adc 'Benchmarks'; "
          "simcore/validation/multinode_quant_measurements.json]", file=notes)


def _print_serving(eff: Any, notes: Any) -> None:
    """Published serving percentiles against the request simulator
    (:mod:`simcore.validation.serving_rate`), held out: per point and metric."""
    from ..validation.serving_rate import METRICS, serving_rows, serving_summary

    rows = serving_rows(eff)
    s = serving_summary(rows)
    per = ", ".join(f"{label} {100 * s['per_metric'][k]:.1f}%" for k, label in METRICS)
    print(f"\nserving percentiles, never fitted: {s['n']} published vLLM benchmark runs "
          f"replayed request by request, mean |error| {per}; p99 TTFT and p99 TPOT both "
          f"within 15% on {s['p99_within_15']} of {s['n']} (simcore.validation.serving_rate):",
          file=notes)
    for r in rows:
        cells = "  ".join(f"{label} {r.measured[k]:7.1f} -> {r.predicted[k]:7.1f} ms "
                          f"{100 * r.error[k]:+5.0f}%" for k, label in METRICS)
        print(f"  {r.id:<34} {cells}", file=notes)
    print("  [LambdaLabsML/vllm-benchmark results/prompt_*/1x{H100,A100}-80GB-SXM/"
          "Meta-Llama-3-8B-Instruct_tp1_len*.json; simcore/validation/serving_percentiles.json]",
          file=notes)


def _print_mlperf(eff: Any, notes: Any, plot: Any = None) -> None:
    """MLPerf Inference Server / Interactive runs against the request simulator
    (:mod:`simcore.validation.serving_mlperf`), held out: percentiles at the logged rate,
    the capacity under the run's limits, the Offline counterpart's throughput."""
    from ..validation.serving_mlperf import (
        METRICS,
        load_mlperf_runs,
        mlperf_rows,
        mlperf_summary,
    )

    print(f"\nMLPerf Inference Server runs, never fitted: replaying {len(load_mlperf_runs())} "
          "runs request by request (about four minutes; --no-mlperf skips) ...", file=notes,
          flush=True)
    def tick(done: int, total: int, row: Any) -> None:
        print(f"  [{done}/{total}] {row.id}: capacity {100 * row.capacity_error:+.0f}%",
              file=sys.stderr, flush=True)

    rows = mlperf_rows(eff, progress=tick)
    s = mlperf_summary(rows)
    per = ", ".join(f"{label} {100 * s['per_metric'][k]:.0f}%" for k, label in METRICS)
    print(f"  {s['n']} runs at their logged Poisson rates: mean |error| {per}; p99 TTFT and p99 "
          f"TPOT both within 15% on {s['p99_within_15']} of {s['n']}", file=notes)
    print(f"  capacity (the highest rate meeting the run's p99 limits over 600 s) vs the rate "
          f"the submission ran at: mean |error| {100 * s['capacity']:.0f}% (signed "
          f"{100 * s['capacity_signed']:+.0f}%) over the {s['n_capacity']} runs bisected (a "
          f"bound, > or <, is left out); the Offline "
          f"counterparts' throughput: mean {100 * s['offline_signed']:+.0f}% "
          f"(|error| {100 * s['offline']:.0f}%, {s['n_offline']} runs)", file=notes)
    for r in rows:
        cells = "  ".join(f"{label} {r.measured[k]:6.0f}->{r.predicted[k]:6.0f} "
                          f"{100 * r.error[k]:+4.0f}%" for k, label in METRICS)
        off = (f"  offline {r.offline_measured_rps:6.1f}->{r.offline_rps:6.1f} "
               f"{100 * r.offline_error:+4.0f}%" if r.offline_rps == r.offline_rps else "")
        bound = r.capacity_bound or " "
        print(f"  {r.id:<46} {cells}  capacity {r.measured_rps:6.1f}->{bound}"
              f"{r.capacity_rps:6.1f} req/s {bound}{100 * r.capacity_error:+4.0f}%{off}",
              file=notes)
    print("  [mlcommons/inference_results_v4.0, v4.1, v5.1 results/*/performance/run_1/"
          "mlperf_log_summary.txt; simcore/validation/mlperf_server.json; per stack and "
          "why: docs/validation.md, \"23 MLPerf Inference runs\"]", file=notes)
    if plot is not None:
        from ..studies.plot import plot_mlperf

        _save_plot("--mlperf-plot", lambda path: plot_mlperf(rows, path), plot)


def _print_request_level(eff: Any, notes: Any, *, mlperf: bool, plot: Any = None) -> None:
    """The request simulator's held-out sections: the vLLM benchmark runs, then (unless
    ``--no-mlperf``) the MLPerf Server runs (``plot``: ``--mlperf-plot``'s file)."""
    _print_serving(eff, notes)
    if mlperf:
        _print_mlperf(eff, notes, plot)


def _print_held(notes: Any) -> None:
    """How many held factors rest on which evidence (:data:`simcore.validation.fitted.HELD`)."""
    from ..validation.fitted import EVIDENCE, HELD

    counts = {kind: sum(ev == kind for ev, _ in HELD.values()) for kind in EVIDENCE}
    first = f"{counts['measurement']} {EVIDENCE['measurement']}, {counts['fit']} {EVIDENCE['fit']}"
    rest = "".join(f", {n} {EVIDENCE[k]}" for k, n in counts.items()
                   if n and k not in ("measurement", "fit"))
    print(f"\nheld constants: {first}{rest} (see docs/validation.md, \"Held constants and "
          "their evidence\")", file=notes)
    for name, (kind, why) in HELD.items():
        print(f"  {name:<18} {kind:<11} {why}", file=notes)


def _print_moe(rows: list[Any], notes: Any, loso: Any = None) -> None:
    """The mixture-of-experts points' mean |error|: in sample (with the MoE points the
    loader skipped, by reason), or leave-one-source-out from ``loso`` (id -> error)."""
    from ..validation import moe_rows
    from ..validation.data_moe import load_moe_measurements

    moe = moe_rows(rows)
    if not moe:
        return
    errs = {r.id: abs(r.error if loso is None else loso[r.id]) for r in moe}
    by_kind: dict[str, list[float]] = {}
    for r in moe:
        by_kind.setdefault(r.kind, []).append(errs[r.id])
    parts = ", ".join(f"{k} {100 * sum(v) / len(v):.1f}% ({len(v)})" for k, v in by_kind.items())
    mean = sum(errs.values()) / len(errs)
    if loso is not None:
        print(f"  MoE points: {100 * mean:.1f}% over {len(moe)} ({parts})", file=notes)
        return
    print(f"MoE points: mean |error| {100 * mean:.1f}% over {len(moe)} in sample ({parts}; "
          "every mixture-of-experts point, the EP / attention-DP serving set from "
          "simcore.validation.data_moe)", file=notes)
    _print_by_reason("skipped", load_moe_measurements()[1], notes)


def _print_ranking(title: str, points: Any, predicted: Any, notes: Any) -> None:
    """Decision accuracy (:func:`simcore.validation.ranking.ranking_agreement`): the share of
    measured pairs of one job ordered as measured, per kind, and the worst jobs."""
    from ..validation.ranking import RANKING_TIE, ranking_agreement

    r = ranking_agreement(points, predicted)
    if not r.n_pairs:
        return
    kinds = ", ".join(f"{k} {100 * a / n:.0f}% of {n}" for k, (a, n) in r.by_kind.items())
    print(f"\n{title} {100 * r.share:.0f}% of {r.n_pairs} measured pairs ({kinds}; pairs of "
          "configurations of one job: source, model, kind, metric, hardware; measured ties "
          f"within {100 * RANKING_TIE:.0f}% not counted)", file=notes)
    for (ref, model, kind, metric, hw), wrong, n in r.worst_jobs(3):
        print(f"  {wrong} of {n} pairs ordered otherwise: {ref}, {model}, {kind} {metric}, {hw}",
              file=notes)


def _print_sources(rows: list[Any], measurements: Any, every: bool, notes: Any) -> None:
    """The sources of the points printed (``every``: of every measurement listed)."""
    print("\nsources:", file=notes)
    used = {r.id for r in rows}
    seen: dict[str, str] = {}
    for m in measurements:
        if (m.id in used or every) and m.ref not in seen:
            seen[m.ref] = m.source
    for ref, src in seen.items():
        print(f"  [{ref}] {src}", file=notes)


def _check_plots(args: argparse.Namespace) -> None:
    """Refuse, before any work, a plot whose section the other flags leave out, and two
    outputs on one path."""
    if args.holdout_plot is not None and args.kind is not None and "decode" not in args.kind:
        raise SimcoreInputError("--holdout-plot: the held-out rows are decode steps; pass "
                                "--kind decode (or no --kind) with it")
    if args.mlperf_plot is not None and (args.kind is not None or args.no_mlperf):
        raise SimcoreInputError("--mlperf-plot: the MLPerf replays run only without --kind "
                                "and --no-mlperf; drop those flags or the plot")
    refuse_shared_paths(out=args.out, plot=args.plot, holdout_plot=args.holdout_plot,
                        mlperf_plot=args.mlperf_plot)


def run(args: argparse.Namespace) -> int:
    from ..validation import (
        FITTED_EFFICIENCY,
        MEAN_ERROR_THRESHOLD,
        MEASUREMENTS,
        POINT_ERROR_THRESHOLD,
        UNMODELLED,
        max_abs_error,
        mean_abs_error,
        validate,
    )

    _check_plots(args)
    _PLOT_FAILURES.clear()
    try:
        eff = replace(FITTED_EFFICIENCY, **dict(args.efficiency))
    except ValueError as exc:
        raise SimcoreInputError(f"--efficiency: {exc}") from None
    notes = note_stream(args)
    machine = for_script(args)
    rows = validate(efficiency=eff, kinds=args.kind)
    refs = {m.id: m.ref for m in (*MEASUREMENTS, *UNMODELLED)}
    gaps = validate(UNMODELLED, efficiency=eff, kinds=args.kind) if args.unmodelled else []
    print(f"simcore vs {len(rows)} public measurements, efficiency "
          + ", ".join(f"{f}={getattr(eff, f):g}" for f in _FACTORS
                      if getattr(eff, f) is not None), file=notes)
    if machine:
        emit_rows(_rows(rows, refs, modelled=True) + _rows(gaps, refs, modelled=False),
                  COLUMNS, args.format, args.out)
    else:
        emit_rows(_rows(rows, refs, modelled=True), COLUMNS, "table")
    if not rows:  # pragma: no cover - every kind has points
        print("no measurements of the requested kinds", file=notes)
        return 1
    mean, worst = mean_abs_error(rows), max_abs_error(rows)
    by_kind: dict[str, list[Any]] = {}
    for r in rows:
        by_kind.setdefault(r.kind, []).append(r)
    parts = ", ".join(f"{k} {100 * mean_abs_error(v):.1f}% ({len(v)})" for k, v in by_kind.items())
    print(f"mean |error| {100 * mean:.1f}% over {len(rows)} points ({parts}); "
          f"max {100 * worst:.1f}%", file=notes)
    _print_moe(rows, notes)
    from ..validation import breakdown, get_measurement

    tables = breakdown(rows, sources={r.id: refs[r.id] for r in rows})
    for key, title in (("kind", "per kind"), ("source", "per source"),
                       ("hardware", "per hardware generation")):
        print(f"\nin-sample mean |error| {title}:", file=notes)
        for label, (err, n) in sorted(tables[key].items()):
            print(f"  {label:<28} {100 * err:5.1f}%  ({n} points)", file=notes)
    points = [get_measurement(r.id) for r in rows]
    _print_held(notes)
    _print_ranking("ranking agreement", points, {r.id: r.predicted for r in rows}, notes)
    if not args.no_loso and len(tables["source"]) > 1:
        from ..validation.fit import leave_one_source_out

        loso = leave_one_source_out(points)
        print("\nleave-one-source-out (factors refitted without the source, each refit from "
              "the neutral start, simcore.validation.fit.NEUTRAL_START):", file=notes)
        for label, (err, _) in sorted(loso.by_source.items()):
            print(f"  {label:<28} {100 * err:5.1f}%", file=notes)
        per_kind: dict[str, list[float]] = {}
        for r in rows:
            per_kind.setdefault(r.kind, []).append(abs(loso.errors[r.id]))
        print("  per kind: " + ", ".join(f"{k} {100 * sum(v) / len(v):.1f}%"
                                         for k, v in per_kind.items()), file=notes)
        _print_moe(rows, notes, loso.errors)
        print(f"leave-one-source-out mean abs error {100 * loso.mean_abs_error:.1f}% (refits "
              "from the neutral start: every fitted factor at the middle of its range, never "
              "the all-data optimum)", file=notes)
        _print_ranking("out-of-sample ranking agreement", points, loso.predicted, notes)
    if args.kind is None or "train" in args.kind:
        from ..validation import validate_memory

        mem_rows = validate_memory([get_measurement(r.id) for r in rows], efficiency=eff)
        if mem_rows:
            print("\npeak memory per GPU where the source reports it (not fitted; reported "
                  "peaks are reserved memory, so predictions run low):", file=notes)
            for mr in mem_rows:
                print(f"  {mr.id:<34} {mr.layout:<18} measured {mr.measured_gib:5.1f} GiB  "
                      f"predicted {mr.predicted_gib:5.1f} GiB  {100 * mr.error:+6.1f}%",
                      file=notes)
            mem_err = sum(abs(mr.error) for mr in mem_rows) / len(mem_rows)
            print(f"  memory mean |error| {100 * mem_err:.1f}% over {len(mem_rows)} runs",
                  file=notes)
    if args.plot is not None:
        from ..studies.plot import plot_parity

        _save_plot("--plot", lambda path: plot_parity(rows, path), args.plot)
    if args.kind is None or "decode" in args.kind:
        _print_holdout(eff, notes, args.holdout_plot)
        _print_weight_only(eff, notes)
    if args.kind is None or "train" in args.kind:
        _print_blackwell(eff, notes)
    if args.kind is None:
        _print_request_level(eff, notes, mlperf=not args.no_mlperf, plot=args.mlperf_plot)
    if gaps and not machine:
        print("\nlisted, not counted above (not covered by the cost model yet, or superseded "
              "by a later table of the same source):")
        emit_rows(_rows(gaps, refs, modelled=False), COLUMNS, "table")
        gap_ids = {g.id for g in gaps}
        for m in UNMODELLED:
            if m.id in gap_ids:
                print(f"  {m.id}: {m.notes}")
    _print_sources(rows, (*MEASUREMENTS, *UNMODELLED), args.unmodelled, notes)
    ok = mean <= MEAN_ERROR_THRESHOLD and worst <= POINT_ERROR_THRESHOLD
    verdict = "PASS" if ok else "FAIL"
    print(f"{verdict}: mean {100 * mean:.1f}% (limit {100 * MEAN_ERROR_THRESHOLD:.0f}%), "
          f"worst {100 * worst:.1f}% (limit {100 * POINT_ERROR_THRESHOLD:.0f}%)"
          + ("" if ok or args.strict or _PLOT_FAILURES else
             "; a report (exit 0): --strict exits 1 on this")
          + (f"; exit 2: {len(_PLOT_FAILURES)} plot(s) not written (above)"
             if _PLOT_FAILURES else ""), file=notes)
    if _PLOT_FAILURES:  # the report is out; a plot is not
        return 2
    return 1 if args.strict and not ok else 0
