"""``simcore compare``: two or more hardware designs over batch and context.

Designs are family names or a family with knob overrides
(``H100-SXM:bw_hbm_gbs=6700,pe_hbm_gb=141``). For every design and (batch, s_kv) point
it prints the best layout's latency, throughput and devices and the speed-up over the
first design; ``--plot`` draws latency and throughput curves (two panels, log x).
Every design gets the same device budget: ``--gpus N`` (``--exact-gpus``), one node of
each GPU design without it (8 devices on the HGX boards; the whole system for SiP), so
a speed-up compares equal device counts. Decode steps replay CUDA graphs unless
``--eager``. The header's ``assumed:`` line (on stderr with ``--format json|csv``) states
the budget, precision and runtime.
"""

from __future__ import annotations

import argparse
from typing import Any

from .options import (
    METRICS,
    OptionError,
    add_budget_options,
    add_cuda_graphs_option,
    add_output_options,
    add_space_option,
    cuda_graphs_flag,
    plot_file,
    positive_int,
    resolve_budget,
    resolve_model,
    resolve_space,
    runtime_kwargs,
)
from .output import LAYOUT_COLUMNS, Column, emit_rows, for_script, note_stream, refuse_shared_paths

__all__ = ["COMPARE_COLUMNS", "add_parser", "run"]

COMPARE_COLUMNS = [
    Column("design", "design"), Column("batch", "batch"), Column("s_kv", "s_kv"),
    Column("latency_ns", "latency", "latency_ms"), Column("throughput_tok_s", "tok/s"),
    Column("n_devices", "devices"),
    Column("speedup", "speed-up",
           display=lambda r: "-" if r["speedup"] != r["speedup"] else f"{r['speedup']:.2f}x"),
    *LAYOUT_COLUMNS[:6],
]


def positive_ints(text: str) -> list[int]:
    """``"1,8,64"`` -> ``[1, 8, 64]``."""
    parts = [t.strip() for t in text.split(",") if t.strip()]
    if not parts:
        raise OptionError(f"expected N1,N2,... (positive integers), got {text!r}")
    try:
        return [positive_int(t) for t in parts]
    except OptionError:
        raise OptionError(f"expected N1,N2,... (positive integers), got {text!r}") from None


def add_parser(sub: Any, name: str, help: str) -> None:
    from ..model.presets import DEFAULT_MODEL, HARDWARE_FAMILIES, PRESETS

    p = sub.add_parser(
        name, help=help,
        description="Compare two or more hardware designs: per design and (batch, s_kv) "
                    "point the best layout's latency and throughput, and the speed-up over "
                    "the first design.")
    p.add_argument("designs", nargs="+", metavar="DESIGN",
                   help=f"a family ({', '.join(HARDWARE_FAMILIES)}) or FAMILY:KNOB=V,KNOB=V "
                        "(e.g. H100-SXM:bw_hbm_gbs=6700); two or more, the first is the "
                        "baseline")
    p.add_argument("--model", default=DEFAULT_MODEL, metavar="NAME|CONFIG_JSON",
                   help=f"preset ({', '.join(PRESETS)}) or a HuggingFace config.json path or "
                        f"folder (default: {DEFAULT_MODEL})")
    p.add_argument("--mode", choices=["decode", "prefill"], default="decode",
                   help="decode (time per output token) or prefill (time to first token) "
                        "(default: decode)")
    p.add_argument("--batch", type=positive_ints, default=[1], metavar="N1,N2",
                   help="batch sizes to compare at (default: 1)")
    p.add_argument("--s-kv", type=positive_ints, default=[8192, 32768, 131072],
                   metavar="T1,T2", help="context lengths (default: 8192,32768,131072)")
    add_budget_options(p, per=" per design")
    add_space_option(p)
    p.add_argument("--metric", choices=METRICS, default="latency",
                   help="what 'best layout' means (default: latency)")
    add_output_options(p, rows="the rows")
    p.add_argument("--plot", type=plot_file, default=None, metavar="FILE.png",
                   help="save latency and throughput curves (.png, .svg or .pdf)")
    add_cuda_graphs_option(p)
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from ..errors import SimcoreInputError
    from ..model.specs import Workload
    from ..studies.assumptions import (
        assumed_line,
        budgets_text,
        precision_text,
        routing_text,
        runtime_text,
    )
    from ..studies.compare import compare, parse_design

    refuse_shared_paths(out=args.out, plot=args.plot)  # before any work
    graphs = cuda_graphs_flag(args)
    stack = runtime_kwargs(args)
    model = resolve_model(args)
    skew = ({"moe_load_imbalance": args.moe_imbalance}
            if getattr(args, "moe_imbalance", None) is not None else {})
    if stack.get("runtime") or skew:
        kw = {**stack, **skew}
        if graphs and args.mode == "decode":
            kw.setdefault("cuda_graphs", True)
        workload: Any = Workload(args.mode, batch=1, s_kv=8192, **kw)
    else:
        workload = Workload("decode", cuda_graphs=True) if graphs else args.mode
    budgets = [resolve_budget(args, parse_design(d)[1]) for d in args.designs]
    r = compare(args.designs, model, workload, batch=args.batch, s_kv=args.s_kv,
                space=resolve_space(args, model, [b.gpus for b in budgets]),
                metric=args.metric, gpus=[b.gpus for b in budgets],
                exact_gpus=budgets[0].exact)
    notes = note_stream(args)
    header = [f"{r.model} {r.mode}: {len(r.designs)} designs x "
              f"{r.dataset.sizes['batch'] * r.dataset.sizes['s_kv']} points, every design fits "
              f"at {len(r.shared)}; speed-up = latency of {r.designs[0]} / latency",
              assumed_line(budgets_text(r.designs, budgets),
                           precision_text(r.workload, model), runtime_text(r.workload),
                           routing_text(r.workload, model))]
    rows = r.rows()
    if args.plot is not None:
        from ..studies.plot import plot_compare

        try:
            plot_compare(r, args.plot)
        except OSError as exc:
            raise SimcoreInputError(f"--plot: cannot write: {exc.strerror or exc}") from None
        print(f"saved the plot to {args.plot}", file=notes)
    if for_script(args):
        emit_rows(rows, COMPARE_COLUMNS, args.format, args.out)
        print("\n".join(header), file=notes)
        return 0
    print("\n".join(header))
    emit_rows(rows, COMPARE_COLUMNS, "table")
    return 0

