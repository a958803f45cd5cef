"""``simcore serving``: the serving planner (:mod:`simcore.studies.serving`) on the command line.

:func:`add_arguments` declares the options (with the shared converters of
:mod:`simcore.cli.options`: ``--out`` and ``--plot`` must name a writable folder, checked
while parsing, and must not name one file, checked by
:func:`~simcore.cli.output.refuse_shared_paths`; all before anything is computed);
:func:`run` plans, prints the header
(:func:`~simcore.studies.serving.summary_lines`) and the rows, then writes the files.
Bad input raises a :class:`~simcore.errors.SimcoreInputError` (exit 2, one line, from
:func:`simcore.cli.main`); "nothing meets the budget or the limits" is a result: exit 1,
one line saying what binds.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from ..errors import SimcoreInputError
from ..model.presets import HARDWARE_FAMILIES, PRESETS
from .options import FORMATS, OptionError, output_file, plot_file, positive_float, positive_int
from .output import refuse_shared_paths

__all__ = ["add_arguments", "add_parser", "run"]


def add_parser(sub: Any, name: str, help: str) -> None:
    p = sub.add_parser(
        name, help=help,
        description="Plan LLM serving on a GPU budget: search layouts x batch for aggregated "
                    "and disaggregated (prefill / decode workers) deployments, rank those that "
                    "meet the TTFT / TPOT limits by tokens/s per GPU, and print the frontier "
                    "of tokens/s per GPU vs tokens/s per user.")
    add_arguments(p)
    p.set_defaults(func=run)


def _batches(text: str) -> list[int]:
    """``"1,8,64"`` -> ``[1, 8, 64]`` (one ``--batch`` word; several words add up)."""
    parts = [t.strip() for t in text.split(",") if t.strip()]
    if not parts:
        raise OptionError(f"expected positive integers like 1,8,64, got {text!r}")
    return [positive_int(t) for t in parts]


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Options of ``simcore serving`` (see :func:`run`)."""
    from ..studies.serving import DEFAULT_BATCHES, DEFAULT_PREFILL_BATCHES, DTYPES

    parser.add_argument("--model", default="Llama 3.1 70B",
                        help=f"preset name ({', '.join(PRESETS)}) or a HuggingFace config.json "
                             "path (default: Llama 3.1 70B)")
    parser.add_argument("--family", default="H200",
                        help=f"hardware family: {', '.join(HARDWARE_FAMILIES)} (default: H200)")
    parser.add_argument("--gpus", type=positive_int, required=True,
                        help="device budget: deployments using more GPUs are not considered "
                             "(at most the family's system size)")
    parser.add_argument("--exact-gpus", "--gpus-exact", dest="exact_gpus", action="store_true",
                        help="use exactly --gpus devices instead of at most")
    parser.add_argument("--dtype", choices=list(DTYPES), default=None,
                        help="precision of weights, activations and KV cache: fp8 / int8 run "
                             "the matmuls at the family's FP8 / INT8 rate (default: the "
                             "model's own, 16-bit for the presets)")
    parser.add_argument("--isl", type=positive_int, default=4000,
                        help="input tokens per request (default 4000)")
    parser.add_argument("--osl", type=positive_int, default=1000,
                        help="output tokens per request (default 1000; 1: prefill only, no "
                             "TPOT, aggregated serving only)")
    parser.add_argument("--max-ttft-ms", type=positive_float, default=None,
                        help="limit on time to first token in ms (default: none)")
    parser.add_argument("--max-tpot-ms", type=positive_float, default=None,
                        help="limit on time per output token in ms (default: none)")
    parser.add_argument("--batch", type=_batches, nargs="+", default=None, metavar="B",
                        help="decode batches to search, e.g. --batch 1 8 64 or --batch 1,8,64 "
                             f"(default {','.join(map(str, DEFAULT_BATCHES))})")
    parser.add_argument("--prefill-batch", type=_batches, nargs="+", default=None,
                        metavar="B",
                        help="prefill batches of disaggregated prefill workers (default "
                             f"{','.join(map(str, DEFAULT_PREFILL_BATCHES))})")
    parser.add_argument("--mode", choices=["both", "agg", "disagg"], default="both",
                        help="aggregated, disaggregated or both (default both)")
    parser.add_argument("--top", type=positive_int, default=5,
                        help="best configurations per mode (default 5)")
    parser.add_argument("--rows", choices=["best", "frontier"], default="best",
                        help="print the best configurations (default) or the Pareto frontier")
    parser.add_argument("--format", choices=FORMATS, default="table",
                        help="how rows are printed (default table)")
    parser.add_argument("--out", type=output_file, default=None, metavar="FILE",
                        help="also write the rows to FILE in --format; a .nc or .zarr FILE "
                             "gets the per-layout sweep Dataset instead")
    parser.add_argument("--plot", type=plot_file, default=None, metavar="FILE",
                        help="save the tokens/s per GPU vs tokens/s per user plot (.png, .svg, .pdf)")


def run(args: argparse.Namespace) -> int:
    """Run ``simcore serving``: 0 on success, 1 when nothing meets the budget or limits
    (one line on stderr); bad input raises a :class:`~simcore.errors.SimcoreInputError`."""
    from ..studies import serving

    refuse_shared_paths(out=args.out, plot=args.plot)  # before any work
    try:
        result = _plan(args)
    except serving.InfeasibleError as exc:  # a result, not bad input
        print(f"simcore serving: {exc}", file=sys.stderr)
        return 1
    text = serving.format_rows(result.rows(args.rows), args.format)
    if args.format == "table":
        print("\n".join(serving.summary_lines(result)) + "\n")
    else:  # stdout holds JSON / CSV only
        for note in result.notes:
            print(f"note: {note}", file=sys.stderr)
    sys.stdout.write(text)
    sys.stdout.flush()
    _save_files(args, result, text)  # after the rows: a failed save never hides them
    return 0


def _plan(args: argparse.Namespace) -> Any:
    from ..studies import serving

    def flat(lists: list[list[int]] | None) -> list[int] | None:
        return None if lists is None else [b for part in lists for b in part]

    modes = ("agg", "disagg") if args.mode == "both" else (args.mode,)
    return serving.plan(args.model, family=args.family, gpus=args.gpus, isl=args.isl,
                        osl=args.osl, max_ttft_ms=args.max_ttft_ms, max_tpot_ms=args.max_tpot_ms,
                        batch=flat(args.batch) or serving.DEFAULT_BATCHES,
                        prefill_batch=flat(args.prefill_batch) or serving.DEFAULT_PREFILL_BATCHES,
                        exact_gpus=args.exact_gpus, modes=modes, top=args.top, dtype=args.dtype)


def _save_files(args: argparse.Namespace, result: Any, text: str) -> None:
    """``--out`` and ``--plot``; a failed write is one line naming the option (the rows
    are on stdout already, any old file is unchanged)."""
    from ..studies.serving import plot_frontier, write_output

    failed: list[str] = []
    if args.out is not None:
        try:
            write_output(result, text, args.out)
            print(f"wrote {args.out}", file=sys.stderr)
        except OSError as exc:
            failed.append(f"--out: cannot write {str(args.out)!r} ({exc.strerror or exc}; any "
                          "old file is unchanged)")
    if args.plot is not None:
        try:
            plot_frontier(result, args.plot)
            print(f"saved plot to {args.plot}", file=sys.stderr)
        except OSError as exc:
            failed.append(f"--plot: cannot write {str(args.plot)!r} ({exc.strerror or exc}; "
                          "any old file is unchanged)")
    if failed:
        raise SimcoreInputError("the rows above are complete, but " + "; ".join(failed))
