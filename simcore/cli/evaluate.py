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
from .output import LAYOUT_COLUMNS, METRIC_COLUMNS, Column, emit_rows, for_script, note_stream

__all__ = ["COLUMNS", "add_parser", "run"]

COLUMNS = LAYOUT_COLUMNS + METRIC_COLUMNS


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


def run(args: argparse.Namespace) -> int:
    import numpy as np

    from ..engine.core import check_budget, prepare
    from ..engine.space import workload_points
    from ..errors import DeviceBudgetError
    from ..studies.assumptions import assumed_line, precision_text, runtime_text
    from ..studies.report import fmt_ns

    model = resolve_model(args)
    fam = resolve_family(args)
    wl = make_workload(args, family=fam)
    budget = resolve_budget(args, fam)
    sweep = sweep_kwargs(args)
    notes = note_stream(args)
    # one hardware point: the engine's rows (Prepared.top_rows, the rows of
    # metrics.top_points over evaluate) without building a Dataset (no xarray import)
    sweep_dims, wls = workload_points(wl, **sweep)
    kw = dict(space=resolve_space(args, model, budget.gpus), family=fam,
              hardware=fam.hardware, **budget.kwargs())
    preps = [prepare(model, wls[0], **kw)]
    if len(wls) > 1:  # every point's coefficients are kept: refuse a sweep beyond memory
        from ..engine.chunks import check_sweep_memory

        shape = " x ".join(f"{len(v):,} {d}" for d, v in sweep_dims.items())
        check_sweep_memory(
            preps[0], len(wls), result_bytes=2000.0 * len(wls) * args.top,
            what=f"--s-kv / --batch: {shape} = {len(wls):,} points of "
                 f"{preps[0].space.size:,} layouts",
            advice="pass fewer --s-kv / --batch values (e.g. one run per --s-kv value)"
                   + (" or --space reduced" if args.space != "reduced" else ""))
    preps += [prepare(model, w, **kw) for w in wls[1:]]
    try:
        check_budget(preps)
    except DeviceBudgetError as exc:
        raise budget_error(exc, budget) from None
    dims = list(sweep_dims)
    columns = [Column(d, d) for d in dims] + COLUMNS
    tops = [p.top_rows(args.metric, args.top) for p in preps]
    n_fit = sum(n for _, n in tops)
    s_kv = ",".join(map(str, sweep.get("s_kv", [wl.s_kv])))
    batch = ",".join(map(str, sweep.get("batch", [wl.batch])))
    valid = np.logical_or.reduce([p.valid for p in preps])  # valid at some point of the sweep
    p0 = preps[0]
    print(f"{model.name} {wl.mode} s_kv={s_kv} batch={batch} on {p0.family} "
          f"(a {p0.topology.n_devices}-device system), {args.space} space{_ep_text(p0)}: "
          f"{int(valid.sum())} valid layouts of {valid.size}, {n_fit} fit in memory"
          + (f" (over {len(preps)} batch/s_kv points)" if dims else ""), file=notes)
    print(assumed_line(budget.describe(), precision_text(wl, model), runtime_text(wl)),
          file=notes)
    if n_fit == 0:
        if for_script(args):  # an empty row set, so a script still gets valid JSON/CSV
            emit_rows([], columns, args.format, args.out)
        print("no layout fits: try a family with more HBM per device (--family H200), a "
              "shorter --s-kv or smaller --batch, --space full, or --set pe_hbm_gb=..."
              + ("" if budget.gpus is None else ", or a larger --gpus"), file=notes)
        return 1
    rows: list[dict[str, Any]] = []
    lines: list[str] = []
    for w, (top, _) in zip(wls, tops, strict=True):
        at = {d: getattr(w, d) for d in dims}
        where = ", ".join(f"{k} {v}" for k, v in at.items())
        if not top:
            lines.append(f"{where}: no layout fits")
            continue
        rows += [{**r, **at} for r in top]
        b = top[0]  # the metric-best layout (what metrics.best picks)
        parts = {k: float(b[k]) for k in ("compute_ns", "memory_ns", "comm_ns", "overhead_ns")}
        bound = max(parts, key=lambda k: parts[k]).removesuffix("_ns")
        lines.append(
            (f"{where}: " if where else "")
            + f"best by {args.metric}: {fmt_ns(float(b['latency_ns']))} per step, {bound}-bound "
              f"(compute {fmt_ns(parts['compute_ns'])}, memory {fmt_ns(parts['memory_ns'])}, "
              f"comm {fmt_ns(parts['comm_ns'])}, launch and framework overhead "
              f"{fmt_ns(parts['overhead_ns'])})"
            + f" on {int(b['n_devices'])} devices")
    if (wl.mode == "decode" and not wl.cuda_graphs and rows
            and float(rows[0]["overhead_ns"]) > 0.3 * float(rows[0]["latency_ns"])):
        lines.append("note: --eager launches every kernel from the host (5 us of host time "
                     "each); serving frameworks replay decode steps from CUDA graphs, the "
                     "default without --eager")
    emit_rows(rows, columns, args.format, args.out)
    for line in lines:
        print(line, file=notes)
    return 0
