"""``simcore evaluate``: the best parallel layouts for a model on a hardware family.

Rows: the ``--top`` best fitting layouts (layout dims, ``latency_ms``,
``throughput_tok_s``, ``n_devices``, ``mem_gb`` per device, ``compute_ms``,
``memory_ms``, ``comm_ms``). Exit code 1 when no layout fits in memory.
"""

from __future__ import annotations

import argparse
from typing import Any

from .options import (
    add_hardware_overrides,
    add_metric_options,
    add_model_options,
    add_output_options,
    add_space_option,
    add_workload_options,
    make_workload,
    resolve_family,
    resolve_model,
)
from .output import LAYOUT_COLUMNS, METRIC_COLUMNS, emit_rows, for_script, note_stream

__all__ = ["COLUMNS", "add_parser", "run"]

COLUMNS = LAYOUT_COLUMNS + METRIC_COLUMNS


def add_parser(sub: Any, name: str, help: str) -> None:
    p = sub.add_parser(
        name, help=help,
        description="Evaluate every parallel layout (TP/CP/PP/DP, KV sharding, placements) "
                    "of a model and workload on a hardware family and print the best ones "
                    "that fit in memory.")
    add_model_options(p)
    add_workload_options(p, train=True)
    add_hardware_overrides(p)
    add_space_option(p)
    add_metric_options(p, rows="layouts")
    add_output_options(p, rows="the layouts")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from ..evaluate import evaluate
    from ..metrics import best, top_points
    from ..report import fmt_ns

    model = resolve_model(args)
    wl = make_workload(args)
    fam = resolve_family(args)
    notes = note_stream(args)
    ds = evaluate(model, wl, space=args.space, family=fam, hardware=fam.hardware)
    n_fit = int(ds.fits.sum())
    print(f"{model.name} {wl.mode} s_kv={wl.s_kv} batch={wl.batch} on {ds.attrs['family']} "
          f"({ds.attrs['n_system_devices']} devices), {args.space} space: "
          f"{ds.valid.sum().item()} valid layouts of {ds.valid.size}, {n_fit} fit in memory",
          file=notes)
    if n_fit == 0:
        if for_script(args):  # an empty row set, so a script still gets valid JSON/CSV
            emit_rows([], COLUMNS, args.format, args.out)
        print("no layout fits: try a family with more HBM per device (--family H200), a "
              "shorter --s-kv or smaller --batch, --space full, or --set pe_hbm_gb=...",
              file=notes)
        return 1
    emit_rows(top_points(ds, args.metric, n=args.top), COLUMNS, args.format, args.out)
    b = best(ds, args.metric).squeeze()
    parts = {k: float(b[k]) for k in ("compute_ns", "memory_ns", "comm_ns", "overhead_ns")}
    bound = max(parts, key=lambda k: parts[k]).removesuffix("_ns")
    print(f"best by {args.metric}: {fmt_ns(float(b.latency_ns))} per step, {bound}-bound "
          f"(compute {fmt_ns(parts['compute_ns'])}, memory {fmt_ns(parts['memory_ns'])}, "
          f"comm {fmt_ns(parts['comm_ns'])}, launch and framework overhead "
          f"{fmt_ns(parts['overhead_ns'])})", file=notes)
    return 0
