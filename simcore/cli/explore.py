"""``simcore explore``: the co-design explorer.

Sweeps hardware candidates and, per candidate, finds the metric-best layout that fits.
Two row sets: ``pareto`` (the frontier: metric vs ``cost_score``, or any ``--objectives``
with directions from the metric registry; ``--cost-model`` adds ``cost_usd``, ``power_w``
and ``tokens_per_s_per_gpu``) and ``sensitivity``
(latency when doubling each knob on the best hardware). The table format prints both;
``--format json|csv`` (and ``--out``) write the set chosen by ``--rows`` (default
``pareto``), so every command's JSON is one array of row objects.
``--dataset`` saves the per-hardware Dataset (``.nc`` or ``.zarr``). Per candidate the
layouts compete within the device budget (``--gpus``; one node of a GPU family without
it, the whole system for SiP); decode steps replay CUDA graphs unless ``--eager``; the
header's ``assumed:`` line says both and the precision.
"""

from __future__ import annotations

import argparse
import contextlib
import shlex
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from ..errors import SimcoreInputError
from .options import (
    OptionError,
    add_budget_options,
    add_cuda_graphs_option,
    add_hardware_overrides,
    add_metric_options,
    add_model_options,
    add_output_options,
    add_space_option,
    add_workload_options,
    assignment,
    budget_error,
    make_workload,
    output_file,
    positive_floats,
    resolve_budget,
    resolve_family,
    resolve_model,
    resolve_space,
    runtime_kwargs,
    store_path,
)
from .output import LAYOUT_COLUMNS, Column, emit_rows, for_script, note_stream, refuse_shared_paths

__all__ = ["PARETO_COLUMNS", "SENSITIVITY_COLUMNS", "add_parser", "run"]

DATASET_SUFFIXES = (".nc", ".nc4", ".zarr")
PLOT_SUFFIXES = (".png", ".svg", ".pdf")


def _pareto_columns() -> list[Column]:
    from ..model.specs import HW_KNOBS

    return ([Column("cost_score", "cost"), Column("latency_ns", "latency", "latency_ms"),
             Column("throughput_tok_s", "tok/s")]
            + [Column(k, k) for k in HW_KNOBS] + LAYOUT_COLUMNS[:6]
            + [Column("n_devices", "devices")])


PARETO_COLUMNS = _pareto_columns()
SENSITIVITY_COLUMNS = [
    Column("knob", "knob"),
    Column("baseline_latency_ns", "baseline", "baseline_latency_ms", in_table=False),
    Column("doubled_latency_ns", "doubled latency", "doubled_latency_ms"),
    Column("rel_speedup", "speed-up", "speedup_pct",
           display=lambda r: f"{100 * r['rel_speedup']:.3f}%"),
]


def _depth(text: str) -> str | int:
    if text in ("two_stage", "balanced", "coarse"):
        return text
    try:
        n = int(text)
    except ValueError:
        raise OptionError(f"expected two_stage, balanced, coarse or an integer (values per "
                          f"knob), got {text!r}") from None
    if n < 1:
        raise OptionError(f"an integer depth must be >= 1, got {n}")
    return n


def _with_suffix(suffixes: tuple[str, ...]) -> Any:
    def check(text: str) -> Path:
        path = output_file(text)
        if path.suffix.lower() not in suffixes:
            raise OptionError(f"expected a name ending in {', '.join(suffixes)}, got {text!r}")
        return path

    check.__name__ = "path"
    return check


def _grid_assignment() -> Any:
    from ..model.specs import HW_KNOBS

    return assignment({k: positive_floats for k in HW_KNOBS})


def add_parser(sub: Any, name: str, help: str) -> None:
    p = sub.add_parser(
        name, help=help,
        description="Sweep hardware candidates and, for each, find the metric-best parallel "
                    "layout that fits memory; print the Pareto frontier (metric vs cost_score) "
                    "and the knob sensitivity ranking.")
    add_model_options(p)
    add_workload_options(p)
    add_budget_options(p)
    add_hardware_overrides(p, what=": the baseline the sweep scales and cost_score divides by")
    p.add_argument("--depth", type=_depth, default="balanced",
                   help="hardware sweep: two_stage (1 point), balanced (64), coarse (729), or "
                        "an integer n (n values per knob, 0.5x..2x, n^6 points) "
                        "(default: balanced)")
    p.add_argument("--grid", type=_grid_assignment(), action="append", default=[],
                   metavar="KNOB=V1,V2",
                   help="custom values for a knob (repeatable); overrides --depth; other knobs "
                        "stay at the family's values")
    add_space_option(p)
    add_metric_options(p, rows="Pareto rows")
    add_output_options(p, rows="the rows chosen by --rows")
    p.add_argument("--rows", choices=["pareto", "sensitivity"], default="pareto",
                   help="which rows --format json/csv and --out write (default: pareto); the "
                        "table on stdout shows both")
    p.add_argument("--dataset", type=_with_suffix(DATASET_SUFFIXES), default=None,
                   metavar="FILE.nc|FILE.zarr", help="save the per-hardware Dataset")
    p.add_argument("--plot", type=_with_suffix(PLOT_SUFFIXES), default=None,
                   metavar="FILE.png",
                   help="save the Pareto plot (.png, .svg or .pdf); the sensitivity chart goes "
                        "beside it as <name>_sensitivity.<ext>")
    p.add_argument("--scheduler", default=None, metavar="ADDRESS",
                   help="dask.distributed scheduler address (tcp://host:8786) to run the sweep "
                        "on a cluster; 'local' starts a 2-worker LocalCluster")
    p.add_argument("--resume", type=store_path, default=None, metavar="STORE.zarr",
                   help="checkpoint finished hardware chunks in this zarr store; rerun the same "
                        "command after an interruption to compute only what is missing")
    p.add_argument("--no-progress", action="store_true", help="hide the progress bar")
    p.add_argument("--cost-model", default=None, metavar="FILE.toml|FILE.json|default",
                   help="price and power per device from the knobs (simcore.costmodel); adds "
                        "cost_usd, power_w (totals over the best layout's devices) and "
                        "tokens_per_s_per_gpu; 'default' = the documented public estimates")
    p.add_argument("--objectives", default=None, metavar="M1,M2,...",
                   help="what the Pareto frontier is over, any number, directions from the "
                        "metric registry, e.g. latency,cost_usd,power_w (default: the metric "
                        "and cost_score, or cost_usd with --cost-model); cost/power objectives "
                        "without --cost-model use the default cost model")
    add_cuda_graphs_option(p)
    p.set_defaults(func=run)


def _deprecated_out_dataset(args: argparse.Namespace) -> None:
    """``--out FILE.nc|FILE.zarr`` (the old spelling of ``--dataset``) keeps working."""
    if args.out is None or args.out.suffix.lower() not in DATASET_SUFFIXES:
        return
    if args.dataset is not None:
        raise SimcoreInputError("--out: pass the Dataset file once, as --dataset")
    print(f"simcore explore: note: --out {args.out} saves the Dataset as before; this "
          f"spelling is deprecated, pass --dataset {args.out}", file=sys.stderr)
    args.dataset, args.out = args.out, None


def _connect(address: str | None) -> tuple[Any, Any]:
    if not address:
        return None, None
    from ..engine.distributed import connect

    try:
        return connect(address)
    except (ValueError, OSError) as exc:
        raise SimcoreInputError(f"--scheduler: {exc}") from None


def _depth_of(args: argparse.Namespace) -> Any:
    """``--depth``, or the ``--grid`` mapping (each knob once, each value once)."""
    if not args.grid:
        return args.depth
    grid: dict[str, list[float]] = {}
    for knob, values in args.grid:
        if knob in grid:
            raise SimcoreInputError(f"--grid: {knob} is given twice; pass all its values in "
                                    f"one --grid {knob}=V1,V2,...")
        dup = sorted({v for v in values if values.count(v) > 1})
        if dup:
            raise SimcoreInputError(f"--grid {knob}: repeats {', '.join(f'{v:g}' for v in dup)}; "
                                    "give each value once")
        grid[knob] = values
    return grid


def _rerun(args: argparse.Namespace) -> str:
    """The command that resumes this run (with a store added if it had none)."""
    argv = list(getattr(args, "argv", None) or ["explore"])
    if args.resume is None:
        argv += ["--resume", "sweep.zarr"]
    return "simcore " + shlex.join(argv)


def _sensitivity_path(plot: Path | None) -> Path | None:
    """Where ``--plot FILE.ext`` puts the sensitivity chart: ``FILE_sensitivity.ext``."""
    return None if plot is None else plot.with_name(plot.stem + "_sensitivity" + plot.suffix)


def _elsewhere(path: Path) -> str:
    return str(Path(tempfile.gettempdir()) / path.name)


def _preflight(args: argparse.Namespace, fam: Any, depth: Any, gpus: int | None,
               space: Any = None, experts: int = 1) -> None:
    """Before any compute: the sweep fits in memory, and every output path can take what
    it will be given."""
    from ..engine.core import N_BEST
    from ..engine.space import depth_grid, get_space
    from ..io import check_room
    from ..studies.codesign import check_depth, check_explore_size

    try:
        grid = depth_grid(check_depth(depth), defaults=fam.hardware.as_dict())
        n_layouts = get_space(args.space if space is None else space, args.mode, gpus,
                              experts).size
    except ValueError as exc:
        raise SimcoreInputError(f"{'--grid' if args.grid else '--depth'}: {exc}") from None
    n_hw = 1
    for values in grid.values():
        n_hw *= len(values)
    try:
        check_explore_size(n_hw, n_layouts)
    except SimcoreInputError as exc:
        raise SimcoreInputError(f"{'--grid' if args.grid else '--depth'}: {exc}") from None
    from ..studies.codesign import estimate_explore

    _, seconds = estimate_explore(n_hw, n_layouts)
    if seconds > 600 and args.resume is None:
        print(f"simcore explore: note: {n_hw:,} hardware points may take about "
              f"{seconds / 60:,.0f} min; pass --resume STORE.zarr to keep finished chunks if "
              "it is interrupted", file=sys.stderr)
    needs = [("--out", args.out, 1e6), ("--dataset", args.dataset, 300.0 * n_hw),
             ("--plot", args.plot, 2e6),
             ("--resume", args.resume, 1.5 * (N_BEST + 2) * 8 * n_hw)]
    for opt, path, need in needs:
        if path is None:
            continue
        why = check_room(path, need)
        if why is not None:
            raise SimcoreInputError(f"{opt}: cannot write {str(path)!r}: {why}; pass a path "
                                    f"on a disk with room, e.g. {opt} {_elsewhere(path)}")


def _cost_kwargs(args: argparse.Namespace) -> dict[str, Any]:
    """``--cost-model`` / ``--objectives`` as joint_explore keywords, checked up front."""
    from ..engine.pareto import objective_directions
    from ..hardware.costmodel import get_cost_model

    out: dict[str, Any] = {}
    if getattr(args, "cost_model", None) is not None:
        out["cost_model"] = get_cost_model(args.cost_model)
    if getattr(args, "objectives", None) is not None:
        objs = objective_directions(args.objectives)
        if not objs:
            raise SimcoreInputError("--objectives: pass one or more metric names, e.g. "
                                    "latency,cost_usd,power_w")
        out["objectives"] = args.objectives
    return out


def _cost_columns(r: Any) -> list[Column]:
    """Objective and cost columns in front of the Pareto rows."""
    if r.cost_model is None:
        return PARETO_COLUMNS
    extra = [Column("cost_usd", "cost $"), Column("power_w", "power W"),
             Column("tokens_per_s_per_gpu", "tok/s/dev"),
             Column("cost_usd_per_device", "$/dev", in_table=False),
             Column("power_w_per_device", "W/dev", in_table=False)]
    return [*extra, *PARETO_COLUMNS]


def run(args: argparse.Namespace) -> int:
    from ..engine.distributed import warm_cache
    from ..engine.sweep import StoreMismatchError
    from ..errors import DeviceBudgetError, SimcoreRetryError
    from ..studies.assumptions import assumed_line, precision_text, routing_text, runtime_text
    from ..studies.codesign import joint_explore
    from ..studies.report import fmt_ns, fmt_num

    _deprecated_out_dataset(args)
    refuse_shared_paths({"--plot's sensitivity chart": _sensitivity_path(args.plot)},
                        out=args.out, dataset=args.dataset, plot=args.plot, resume=args.resume)
    _cost_kwargs(args)  # reject a bad cost model / objective before any work
    model = resolve_model(args)
    make_workload(args)  # reject a bad workload before any work
    fam = resolve_family(args)
    budget = resolve_budget(args, fam)
    depth = _depth_of(args)
    space = resolve_space(args, model, budget.gpus)
    _preflight(args, fam, depth, budget.gpus, space, model.n_experts)
    notes = note_stream(args)
    client, cluster = _connect(args.scheduler)
    try:
        t_load = time.perf_counter()
        warm_cache()  # load (or compile) the kernels before timing the sweep
        t_load = time.perf_counter() - t_load
        t0 = time.perf_counter()
        r = joint_explore(model, s_kv=args.s_kv, mode=args.mode, batch=args.batch, depth=depth,
                          space=space, metric=args.metric, family=fam,
                          progress=not args.no_progress, client=client,
                          store=None if args.resume is None else str(args.resume),
                          **runtime_kwargs(args), **_cost_kwargs(args), **budget.kwargs(),
                          **({"moe_imbalance": args.moe_imbalance}
                             if args.moe_imbalance is not None else {}))
        wall = time.perf_counter() - t0
    except DeviceBudgetError as exc:
        raise budget_error(exc, budget) from None
    except StoreMismatchError as exc:
        raise SimcoreInputError(f"--resume: {exc}") from None
    except SimcoreRetryError as exc:
        raise SimcoreRetryError(f"{exc}; resume with: {_rerun(args)}") from None
    finally:
        if client is not None:
            with contextlib.suppress(Exception):
                client.close()
        if cluster is not None:
            with contextlib.suppress(Exception):
                cluster.close()
    print(f"{r.model} {r.workload.mode} s_kv={r.workload.s_kv} batch={r.workload.batch} on "
          f"{fam.name} (a {fam.topology.n_devices}-device system): "
          f"{r.n_hardware} hardware x {r.n_layouts} layouts = {r.total_joint:,} joint "
          f"evaluations in {wall:.2f} s ({fmt_num(r.total_joint / max(wall, 1e-9))} evals/s, "
          f"sensitivity included; kernels loaded in {t_load:.1f} s before)", file=notes)
    print(assumed_line(budget.describe(), precision_text(r.workload, model),
                       runtime_text(r.workload), routing_text(r.workload, model)), file=notes)
    code = _print_rows(args, r, fmt_ns)
    _save_files(args, r, notes)  # after the rows: a failed save never hides the result
    return code


def _save_files(args: argparse.Namespace, r: Any, notes: Any) -> None:
    failed: list[str] = []
    if args.dataset is not None:
        from ..io import save_dataset

        try:
            save_dataset(r.dataset, args.dataset)
            print(f"saved the per-hardware Dataset to {args.dataset}", file=notes)
        except OSError as exc:
            failed.append(f"--dataset: cannot write {str(args.dataset)!r} ({exc.strerror or exc}; "
                          f"any old file is unchanged); rerun with --dataset "
                          f"{_elsewhere(args.dataset)}")
    if args.plot is not None:
        from ..studies.plot import plot_pareto, plot_sensitivity

        sens_path = _sensitivity_path(args.plot)
        try:
            if r.cost_model is not None and len(r.objectives) >= 2:
                from ..studies.plot import plot_objectives

                shown = list(r.objectives)[:2]
                if len(r.objectives) > 2:
                    print(f"note: {len(r.objectives)} objectives: the plot shows the first "
                          f"two ({' vs '.join(shown)}) and their 2-D frontier; the table "
                          "lists every objective", file=notes)
                plot_objectives(r, args.plot, objectives=shown)
            else:
                plot_pareto(r, args.plot)
            plot_sensitivity(r, sens_path)
            print(f"saved plots to {args.plot} and {sens_path}", file=notes)
        except OSError as exc:
            failed.append(f"--plot: cannot write {str(args.plot)!r} ({exc.strerror or exc}; any "
                          f"old file is unchanged); rerun with --plot {_elsewhere(args.plot)}")
    if failed:
        raise SimcoreInputError("the results above are complete, but " + "; ".join(failed))


def _print_rows(args: argparse.Namespace, r: Any, fmt_ns: Any) -> int:
    pareto_rows = [s.as_row() for s in r.pareto_scores[: args.top]]
    sens_rows = [{"knob": s.knob, "baseline_latency_ns": s.baseline_latency_ns,
                  "doubled_latency_ns": s.doubled_latency_ns, "rel_speedup": s.rel_speedup}
                 for s in r.sensitivity]
    notes = note_stream(args)
    if for_script(args):  # one row set, nothing else on stdout
        if args.rows == "pareto":
            emit_rows(pareto_rows, _cost_columns(r), args.format, args.out)
        else:
            emit_rows(sens_rows, SENSITIVITY_COLUMNS, args.format, args.out)
        if r.empty:
            print(r.message, file=notes)
        return 1 if r.empty else 0
    if r.empty:
        print(r.message)
        return 1
    print(f"\nPareto frontier ({' vs '.join(r.objectives)}): {len(r.pareto_scores)} of "
          f"{len(r.all_scores)} fitting candidates")
    emit_rows(pareto_rows, _cost_columns(r), "table")
    baseline = fmt_ns(r.sensitivity[0].baseline_latency_ns) if r.sensitivity else "-"
    print(f"\nSensitivity: latency when doubling each knob (or halving the scale-out "
          f"latency) on the {r.metric}-best hardware (baseline {baseline})")
    emit_rows(sens_rows, SENSITIVITY_COLUMNS, "table")
    return 0
