"""``simcore explore``: the co-design explorer on the command line."""

from __future__ import annotations

import argparse
import time
from pathlib import Path
from typing import Any

from .specs import HW_KNOBS


def _depth(text: str) -> str | int:
    if text in ("two_stage", "balanced", "coarse"):
        return text
    try:
        n = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"depth must be two_stage, balanced, coarse or an integer (values per knob), got {text!r}"
        ) from None
    if n < 1:
        raise argparse.ArgumentTypeError(f"depth as an integer must be >= 1, got {n}")
    return n


def _grid_item(text: str) -> tuple[str, list[float]]:
    if "=" not in text:
        raise argparse.ArgumentTypeError(f"--grid takes KNOB=V1,V2,..., got {text!r}")
    knob, _, vals = text.partition("=")
    if knob not in HW_KNOBS:
        raise argparse.ArgumentTypeError(f"unknown knob {knob!r}; known: {', '.join(HW_KNOBS)}")
    try:
        values = [float(v) for v in vals.split(",") if v.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"--grid {knob}: values must be numbers, got {vals!r}") from None
    if not values or any(v <= 0 for v in values):
        raise argparse.ArgumentTypeError(f"--grid {knob}: pass positive values, got {vals!r}")
    return knob, values


def add_parsers(sub: Any) -> None:
    from .cli import add_model_options, add_workload_options, positive_int

    p = sub.add_parser(
        "explore", help="co-design: sweep hardware candidates, best layout per candidate",
        description="Sweep hardware candidates and, for each, find the metric-best parallel "
                    "layout that fits memory; print the Pareto frontier (latency vs cost) and "
                    "the knob sensitivity ranking.")
    add_model_options(p)
    add_workload_options(p)
    p.add_argument("--depth", type=_depth, default="balanced",
                   help="hardware sweep: two_stage (1 point), balanced (64), coarse (729), or "
                        "an integer n (n values per knob, 0.5x..2x, n^6 points); default balanced")
    p.add_argument("--grid", type=_grid_item, action="append", default=[], metavar="KNOB=V1,V2",
                   help="custom values for a knob (repeatable); overrides --depth; other knobs "
                        "stay at their defaults")
    p.add_argument("--space", choices=["reduced", "full"], default="reduced",
                   help="layout space: reduced (1,920) or full (30,720); default reduced")
    p.add_argument("--metric", choices=["latency", "throughput", "FLOPS"], default="latency",
                   help="what the best layout minimises/maximises (default latency)")
    p.add_argument("--top", type=positive_int, default=10, help="Pareto rows to print (default 10)")
    p.add_argument("--out", type=Path, default=None,
                   help="save the per-hardware Dataset (.nc netCDF or .zarr)")
    p.add_argument("--plot", type=Path, default=None,
                   help="save the Pareto plot (PNG); the sensitivity chart goes beside it as "
                        "<name>_sensitivity.png")
    p.add_argument("--scheduler", default=None,
                   help="dask.distributed scheduler address (tcp://host:8786) to run the sweep "
                        "on a cluster; 'local' starts a 2-worker LocalCluster")
    p.add_argument("--resume", type=Path, default=None, metavar="STORE.zarr",
                   help="checkpoint finished hardware chunks in this zarr store; rerun the same "
                        "command after an interruption to compute only what is missing")
    p.add_argument("--no-progress", action="store_true", help="hide the progress bar")
    p.set_defaults(func=cmd_explore)


def cmd_explore(args: argparse.Namespace) -> int:
    from .cli import CliError, resolve_model
    from .codesign import joint_explore
    from .report import LAYOUT_COLUMNS, fmt_ns, fmt_num, table

    if args.out is not None and args.out.suffix.lower() not in (".nc", ".nc4", ".zarr"):
        raise CliError(f"simcore explore: error: --out must end in .nc or .zarr, got {str(args.out)!r}")
    if args.plot is not None and args.plot.suffix.lower() not in (".png", ".svg", ".pdf"):
        raise CliError(f"simcore explore: error: --plot must end in .png, .svg or .pdf, got {str(args.plot)!r}")
    model = resolve_model(args.model)
    depth: Any = dict(args.grid) if args.grid else args.depth
    client = None
    cluster = None
    if args.scheduler:
        from .distributed import connect

        client, cluster = connect(args.scheduler)
    from .distributed import warm_cache

    t_load = time.perf_counter()
    warm_cache()  # load (or compile) the kernels before timing the sweep
    t_load = time.perf_counter() - t_load
    t0 = time.perf_counter()
    try:
        r = joint_explore(model, s_kv=args.s_kv, mode=args.mode, batch=args.batch, depth=depth,
                          space=args.space, metric=args.metric, family=args.family,
                          progress=not args.no_progress, client=client,
                          store=None if args.resume is None else str(args.resume))
    finally:
        if client is not None:
            client.close()
        if cluster is not None:
            cluster.close()
    wall = time.perf_counter() - t0
    print(f"{r.model} {r.workload.mode} s_kv={r.workload.s_kv} batch={r.workload.batch}: "
          f"{r.n_hardware} hardware x {r.n_layouts} layouts = {r.total_joint:,} joint "
          f"evaluations in {wall:.2f} s ({fmt_num(r.total_joint / wall)} evals/s, sensitivity "
          f"included; kernels loaded in {t_load:.1f} s before)")
    if args.out is not None:
        from .io import save_dataset

        save_dataset(r.dataset, args.out)
        print(f"saved the per-hardware Dataset to {args.out}")
    if args.plot is not None:
        from .plot import plot_pareto, plot_sensitivity

        plot_pareto(r, args.plot)
        sens_path = args.plot.with_name(args.plot.stem + "_sensitivity" + args.plot.suffix)
        plot_sensitivity(r, sens_path)
        print(f"saved plots to {args.plot} and {sens_path}")
    if r.empty:
        print(r.message)
        return 1
    knob_cols = [(k, k) for k in HW_KNOBS]
    rows = [s.as_row() for s in r.pareto_scores[: args.top]]
    print(f"\nPareto frontier ({r.metric} vs cost_score): {len(r.pareto_scores)} of "
          f"{len(r.all_scores)} fitting candidates")
    print(table(rows, [("cost_score", "cost"), ("latency_ns", "latency"),
                       ("throughput_tok_s", "tok/s")] + knob_cols + LAYOUT_COLUMNS[:5]
                + [("n_devices", "devices")]))
    print(f"\nSensitivity: latency when doubling each knob on the {r.metric}-best hardware "
          f"(baseline {fmt_ns(r.sensitivity[0].baseline_latency_ns) if r.sensitivity else '-'})")
    print(table([{"knob": s.knob, "doubled_latency_ns": s.doubled_latency_ns,
                  "speedup": f"{100 * s.rel_speedup:.3f}%"} for s in r.sensitivity],
                [("knob", "knob"), ("doubled_latency_ns", "doubled latency"), ("speedup", "speed-up")]))
    return 0
