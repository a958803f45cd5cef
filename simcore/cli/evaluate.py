"""``simcore evaluate``: the best parallel layouts for a model on a hardware family.

Rows: the ``--top`` best fitting layouts (layout dims, ``latency_ms``,
``throughput_tok_s``, ``n_devices``, ``mem_gb`` per device, ``compute_ms``,
``memory_ms``, ``comm_ms``). ``--s-kv`` / ``--batch`` comma lists sweep them: the
``--top`` best per (``s_kv``, ``batch``) point, each row led by its ``s_kv`` and
``batch``. ``--gpus N`` (``--exact-gpus``) is a device budget, one node of a GPU family
(8 devices on the HGX boards) without it; decode steps replay CUDA graphs unless
``--eager``. The header's ``assumed:`` line states the budget, precision and runtime
(:mod:`simcore.studies.assumptions`). Exit code 1 when no layout fits in memory.
"""

from __future__ import annotations

import argparse
from typing import Any

from .options import (
    add_budget_options,
    add_dtype_options,
    add_hardware_overrides,
    add_metric_options,
    add_model_options,
    add_output_options,
    add_space_option,
    add_workload_options,
    budget_error,
    make_workload,
    resolve_budget,
    resolve_family,
    resolve_model,
    resolve_space,
    sweep_kwargs,
)
from .output import (
    ALONE_PARTS,
    LAYOUT_COLUMNS,
    METRIC_COLUMNS,
    Column,
    bound_of,
    emit_rows,
    for_script,
    note_stream,
)

__all__ = ["COLUMNS", "TRAIN_COLUMNS", "add_parser", "run"]

COLUMNS = LAYOUT_COLUMNS + METRIC_COLUMNS

#: The columns of a training row (``--mode train``), between the layout and the metrics.
TRAIN_COLUMNS = [
    Column("micro_batch", "mb"), Column("zero_stage", "ZeRO"), Column("recompute", "recomp"),
    Column("mfu", "MFU", display=lambda r: f"{float(r['mfu']):.1%}"),
    Column("tokens_per_s_per_gpu", "tok/s/GPU"),
]


def add_parser(sub: Any, name: str, help: str) -> None:
    p = sub.add_parser(
        name, help=help,
        description="Evaluate every parallel layout (TP/CP/PP/DP, KV sharding, placements) "
                    "of a model and workload on a hardware family and print the best ones "
                    "that fit in memory.")
    add_model_options(p)
    add_workload_options(p, train=True, sweep=True)
    add_dtype_options(p, train=True)
    add_budget_options(p)
    add_hardware_overrides(p)
    add_space_option(p)
    add_metric_options(p, rows="layouts (per batch/s_kv point when swept)")
    add_output_options(p, rows="the layouts")
    p.set_defaults(func=run)


def _ep_text(p: Any) -> str:
    """`` (EP 1, 2, 4)``: the expert-parallel degrees searched, for an MoE model."""
    ep = p.space.dict["ep"]
    return f" (EP {', '.join(map(str, ep))})" if p.model.n_experts > 1 else ""


def _mfu(model: Any, wl: Any, row: dict[str, Any]) -> float:
    """Model FLOPs utilisation of a training row: PaLM's model FLOPs per step (what
    ``simcore validate`` scores MFU by, :func:`~simcore.validation.points.palm_flops_per_step`;
    an MoE model counts the parameters a token touches) per second per device, over the
    device's 16-bit matmul peak (``peak_tflops_f16``). Recomputation is not counted."""
    from ..validation.points import palm_flops_per_step

    tokens = float(wl.batch) * float(wl.s_kv)
    flops = (palm_flops_per_step(model, wl)
             - 6.0 * (model.n_params - model.n_active_params) * tokens)
    per_device = flops / (float(row["latency_ns"]) * 1e-9) / float(row["n_devices"])
    return per_device / (float(row["peak_tflops_f16"]) * 1e12)


def _train_rows(model: Any, wl: Any, top: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """``top`` with the training columns: the workload's micro-batch, ZeRO stage and
    recomputation, ``mfu`` and ``tokens_per_s_per_gpu`` (tokens of a step, batch x s_kv,
    per second per device)."""
    return [{**r, "micro_batch": wl.micro_batch, "zero_stage": wl.zero_stage,
             "recompute": wl.recompute, "mfu": _mfu(model, wl, r),
             "tokens_per_s_per_gpu": float(r["throughput_tok_s"]) / float(r["n_devices"])}
            for r in top]


def run(args: argparse.Namespace) -> int:
    from ..engine.core import check_budget, prepare
    from ..engine.space import TRAIN_DIMS, workload_points
    from ..errors import DeviceBudgetError

    model = resolve_model(args)
    fam = resolve_family(args)
    sweep = sweep_kwargs(args)  # first: a micro-batch dividing no batch names the valid ones
    wl = make_workload(args, family=fam)
    budget = resolve_budget(args, fam)
    notes = note_stream(args)
    train = wl.mode == "train"
    # one hardware point: the engine's rows (Prepared.top_rows, the rows of
    # metrics.top_points over evaluate) without building a Dataset (no xarray import)
    sweep_dims, wls = workload_points(wl, **sweep)
    kw = dict(space=resolve_space(args, model, budget.gpus), family=fam,
              hardware=fam.hardware, **budget.kwargs())
    first = prepare(model, wls[0], **kw)
    if len(wls) > 1:
        _check_sweep_memory(args, first, sweep_dims, len(wls), train)
    points, kept, valid, n_prepared = _points(args, model, wls, sweep_dims, first, kw)
    try:
        if kept:
            check_budget(kept)
    except DeviceBudgetError as exc:
        raise budget_error(exc, budget) from None
    outer, groups = _ranked_groups(args, points, sweep_dims)
    columns = [Column(d, d) for d in outer] + COLUMNS
    if train:
        columns = [Column(d, d) for d in outer] + LAYOUT_COLUMNS + TRAIN_COLUMNS + METRIC_COLUMNS
    n_fit = sum(n for _, _, n in points)
    _print_header(args, model, wl, fam, budget, first, sweep, sweep_dims, valid, n_fit,
                  len(points), len(wls) - n_prepared, notes)
    if n_fit == 0:
        if for_script(args):  # an empty row set, so a script still gets valid JSON/CSV
            emit_rows([], columns, args.format, args.out)
        searched = any(d in TRAIN_DIMS for d in sweep_dims)
        print("no layout fits: try a family with more HBM per device (--family H200), a "
              "shorter --s-kv or smaller --batch, --space full, or --set pe_hbm_gb=..."
              + (", or --zero-stage all --recompute all" if train and not searched else "")
              + ("" if budget.gpus is None else ", or a larger --gpus"), file=notes)
        return 1
    rows, lines = _best_lines(args, wl, outer, groups, train)
    emit_rows(rows, columns, args.format, args.out)
    for line in lines:
        print(line, file=notes)
    return 0


def _check_sweep_memory(args: argparse.Namespace, first: Any, sweep_dims: dict[str, Any],
                        n_points: int, train: bool) -> None:
    """Every point's coefficients may be kept: refuse a sweep beyond memory."""
    from ..engine.chunks import check_sweep_memory

    shape = " x ".join(f"{len(v):,} {d}" for d, v in sweep_dims.items())
    opts = "--s-kv / --batch" + (" / --micro-batch / --zero-stage / --recompute"
                                 if train else "")
    check_sweep_memory(
        first, n_points, result_bytes=2000.0 * n_points * args.top,
        what=f"{opts}: {shape} = {n_points:,} points of {first.space.size:,} layouts",
        advice=f"pass fewer {opts} values (e.g. one run per --s-kv value)"
               + (" or --space reduced" if args.space != "reduced" else ""))


def _points(args: argparse.Namespace, model: Any, wls: list[Any], sweep_dims: dict[str, Any],
            first: Any, kw: dict[str, Any]) -> tuple[list[Any], list[Any], Any, int]:
    """The rows of every point, as each is prepared: ``(points, kept, valid, n_prepared)``.

    A point's coefficients are dropped once some point fits (``check_budget`` needs them
    only when none does: ``kept``). A micro-batch whose divisor (same stage and
    recomputation) fitted nowhere is skipped: a layout's memory grows with the micro-batch
    and its valid layouts are a subset. ``valid``: layouts valid at some point."""
    import numpy as np

    from ..engine.core import prepare

    train = wls[0].mode == "train"
    points: list[tuple[Any, list[dict[str, Any]], int]] = []
    kept: list[Any] = []
    valid = np.zeros(first.valid.shape, dtype=bool)
    dead: dict[tuple[Any, ...], list[int]] = {}
    n_prepared = 0
    for i, w in enumerate(wls):
        rest = tuple(getattr(w, d) for d in sweep_dims if d != "micro_batch")
        if any(w.micro_batch % m == 0 for m in dead.get(rest, ())):
            continue
        q = first if i == 0 else prepare(model, w, **kw)
        n_prepared += 1
        top, n = q.top_rows(args.metric, args.top)
        valid |= q.valid
        if n == 0 and "micro_batch" in sweep_dims:
            dead.setdefault(rest, []).append(w.micro_batch)
        points.append((w, _train_rows(model, w, top) if train else top, n))
        kept = [] if any(n for _, _, n in points) else [*kept, q]
    return points, kept, valid, n_prepared


def _ranked_groups(args: argparse.Namespace, points: list[Any], sweep_dims: dict[str, Any]
                   ) -> tuple[list[str], dict[tuple[Any, ...], list[dict[str, Any]]]]:
    """The outer points (s_kv, batch) each keep their --top best rows; the training dims
    are searched with the layout: their rows merge, ranked by the metric."""
    from ..engine.metrics import get_metric
    from ..engine.space import TRAIN_DIMS

    outer = [d for d in sweep_dims if d not in TRAIN_DIMS]
    groups: dict[tuple[Any, ...], list[dict[str, Any]]] = {}
    for w, top, _ in points:
        groups.setdefault(tuple(getattr(w, d) for d in outer), []).extend(top)
    m = get_metric(args.metric)
    for key, rows_ in groups.items():
        rows_.sort(key=lambda r: m.sign * float(r[m.key]))  # stable: ties keep sweep order
        groups[key] = rows_[:args.top]
    return outer, groups


def _print_header(args: argparse.Namespace, model: Any, wl: Any, fam: Any, budget: Any,
                  p0: Any, sweep: dict[str, Any], sweep_dims: dict[str, Any], valid: Any,
                  n_fit: int, n_points: int, n_skipped: int, notes: Any) -> None:
    """What was evaluated, what it assumed and, in training, what was searched."""
    from ..engine.space import TRAIN_DIMS
    from ..studies.assumptions import assumed_line, precision_text, routing_text, runtime_text

    s_kv = ",".join(map(str, sweep.get("s_kv", [wl.s_kv])))
    batch = ",".join(map(str, sweep.get("batch", [wl.batch])))
    over = (f" (over {n_points} {'/'.join(sweep_dims)} points"
            + (f"; {n_skipped} larger micro-batches skipped, nothing fits at a "
               "divisor" if n_skipped else "") + ")") if sweep_dims else ""
    print(f"{model.name} {wl.mode} s_kv={s_kv} batch={batch} on {p0.family} "
          f"(a {p0.topology.n_devices}-device system), {args.space} space{_ep_text(p0)}: "
          f"{int(valid.sum())} valid layouts of {valid.size}, {n_fit} fit in memory{over}",
          file=notes)
    routing = routing_text(wl, model)
    if routing and max(p0.space.dict["ep"]) <= 1 and wl.moe_load_imbalance != 1.0:
        routing += " (no expert-parallel layout searched: it moves nothing here)"
    print(assumed_line(budget.describe(), precision_text(wl, model), runtime_text(wl),
                       routing), file=notes)
    if wl.mode == "train":
        searched = [d for d in sweep_dims if d in TRAIN_DIMS]
        text = {"micro_batch": "micro-batch", "zero_stage": "ZeRO stage",
                "recompute": "recompute"}
        vals = {d: ",".join(map(str, sweep_dims[d])) if d in sweep_dims else
                f"{getattr(wl, d)} (fixed)" for d in TRAIN_DIMS}
        print(("searched with the layout: " if searched else "training: ")
              + "; ".join(f"{text[d]} {vals[d]}" for d in TRAIN_DIMS)
              + f"; mfu against the {fam.hardware.peak_tflops_f16:g} TFLOP/s 16-bit peak",
              file=notes)


def _best_lines(args: argparse.Namespace, wl: Any, outer: list[str],
                groups: dict[tuple[Any, ...], list[dict[str, Any]]], train: bool
                ) -> tuple[list[dict[str, Any]], list[str]]:
    """The rows to print and, per outer point, the best layout in words."""
    from ..studies.report import fmt_ns

    rows: list[dict[str, Any]] = []
    lines: list[str] = []
    for key, top in groups.items():
        at = dict(zip(outer, key, strict=True))
        where = ", ".join(f"{k} {v}" for k, v in at.items())
        if not top:
            lines.append(f"{where}: no layout fits")
            continue
        top = [{**r, **at, "bound": bound_of(r)} for r in top]
        rows += top
        b = top[0]  # the metric-best layout (what metrics.best picks)
        alone = ", ".join(f"{part} {fmt_ns(float(b[key]))}" for part, key in ALONE_PARTS.items())
        lines.append(
            (f"{where}: " if where else "")
            + f"best by {args.metric}: {fmt_ns(float(b['latency_ns']))} per step, "
              f"{b['bound']}-bound (each part alone: {alone}; the step overlaps them in part)"
            + f" on {int(b['n_devices'])} devices"
            + (f", micro-batch {b['micro_batch']}, ZeRO stage {b['zero_stage']}, recompute "
               f"{b['recompute']}: MFU {float(b['mfu']):.1%}, "
               f"{float(b['tokens_per_s_per_gpu']):,.0f} tokens/s per GPU" if train else ""))
    if (wl.mode == "decode" and not wl.cuda_graphs and rows
            and float(rows[0]["overhead_ns"]) > 0.3 * float(rows[0]["latency_ns"])):
        how = f"--runtime {wl.runtime}" if wl.runtime and not args.eager else "--eager"
        lines.append(f"note: {how} launches every kernel from the host (5 us of host time "
                     "each); serving frameworks replay decode steps from CUDA graphs, the "
                     "default without --eager")
    return rows, lines
