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
from .options import (
    FORMATS,
    OptionError,
    add_runtime_option,
    ep_values,
    fraction,
    moe_imbalance_arg,
    output_file,
    plot_file,
    positive_float,
    positive_int,
    resolve_runtime,
)
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


def _gpus(text: str) -> int | str:
    """``--gpus``: ``auto`` or a positive integer (the family's system size is checked
    before any work)."""
    if text.strip().lower() == "auto":
        return "auto"
    try:
        return positive_int(text)
    except OptionError:
        raise OptionError(f"expected a positive integer or auto, got {text!r}") from None


def _share(text: str) -> float:
    try:
        v = float(text)
    except ValueError:
        v = -1.0
    if not 0 <= v < 1:
        raise OptionError(f"expected a number in [0, 1), got {text!r}")
    return v


def _seed(text: str) -> int:
    try:
        v = int(text)
    except ValueError:
        v = -1
    if v < 0:
        raise OptionError(f"expected an integer >= 0, got {text!r}")
    return v


def _prefill_cap(text: str) -> int:
    """``--long-prefill-token-threshold``: 0 (off) or an integer in [16, 2^24]."""
    from ..studies.serving.simulate import MAX_PREFILL_CAP, MIN_PREFILL_CAP, prefill_cap_ok

    try:
        v = int(text)
    except ValueError:
        v = -1
    if not prefill_cap_ok(v):
        raise OptionError(f"expected 0 (off) or an integer in [{MIN_PREFILL_CAP}, "
                          f"{MAX_PREFILL_CAP}], got {text!r}")
    return v


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Options of ``simcore serving`` (see :func:`run`)."""
    from ..studies.serving import DEFAULT_BATCHES, DEFAULT_PREFILL_BATCHES, DTYPES
    from ..studies.serving.rate import AUTO_MAX_GPUS, DEFAULT_DURATION_S
    from ..studies.serving.simulate import KV_OVERLAPS, Scheduler

    parser.add_argument("--model", default="Llama 3.1 70B",
                        help=f"preset name ({', '.join(PRESETS)}) or a HuggingFace config.json "
                             "path (default: Llama 3.1 70B)")
    parser.add_argument("--family", default="H200",
                        help=f"hardware family: {', '.join(HARDWARE_FAMILIES)} (default: H200)")
    parser.add_argument("--gpus", type=_gpus, required=True,
                        help="device budget: deployments using more GPUs are not considered "
                             "(at most the family's system size); with --rate or --trace, "
                             "auto: the smallest deployment meeting the limits (up to "
                             f"{AUTO_MAX_GPUS} GPUs)")
    parser.add_argument("--exact-gpus", "--gpus-exact", dest="exact_gpus", action="store_true",
                        help="use exactly --gpus devices instead of at most")
    parser.add_argument("--dtype", choices=list(DTYPES), default=None,
                        help="precision of weights, activations and KV cache: fp8 / int8 / "
                             "fp4 (NVFP4, Blackwell) run the matmuls at the family's FP8 / "
                             "INT8 / FP4 rate (default: the model's own, 16-bit for the "
                             "presets)")
    add_runtime_option(parser)
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
    _add_expert_options(parser)
    parser.add_argument("--top", type=positive_int, default=5,
                        help="best configurations per mode (default 5)")
    parser.add_argument("--rows", choices=["best", "frontier", "candidates"], default="best",
                        help="print the best configurations (default), the Pareto frontier "
                             "(steady state) or every configuration searched")
    parser.add_argument("--format", choices=FORMATS, default="table",
                        help="how rows are printed (default table)")
    parser.add_argument("--out", type=output_file, default=None, metavar="FILE",
                        help="also write the rows to FILE in --format; a .nc or .zarr FILE "
                             "gets the per-layout sweep Dataset instead")
    parser.add_argument("--plot", type=plot_file, default=None, metavar="FILE",
                        help="save the tokens/s per GPU vs tokens/s per user plot (.png, .svg, "
                             ".pdf; steady state only)")
    sched = Scheduler()
    traffic = parser.add_argument_group(
        "request traffic", "simulate requests arriving at a rate through a scheduler (chunked "
        "prefill, continuous batching, paged KV cache) instead of steady-state steps; the "
        "limits apply to the p99 TTFT and p99 TPOT")
    traffic.add_argument("--rate", type=positive_float, default=None, metavar="R",
                         help="requests per second: Poisson arrivals of --isl / --osl tokens, "
                              "or --trace's arrivals rescaled to R")
    traffic.add_argument("--trace", default=None, metavar="FILE",
                         help="CSV (with a header) or JSON-lines file of arrival_s, isl, osl "
                              "rows; replayed as written unless --rate is given")
    traffic.add_argument("--duration-s", type=positive_float, default=DEFAULT_DURATION_S,
                         metavar="S", help="seconds of Poisson traffic to simulate (default "
                                           f"{DEFAULT_DURATION_S:g})")
    traffic.add_argument("--seed", type=_seed, default=0,
                         help="seed of the Poisson arrivals (default 0)")
    traffic.add_argument("--max-num-batched-tokens", type=positive_int,
                         default=sched.token_budget, metavar="N",
                         help="token budget per scheduler step: prompts beyond what is left "
                              f"are prefilled in chunks (default {sched.token_budget}, vLLM V1's)")
    traffic.add_argument("--max-num-seqs", type=positive_int, default=sched.max_seqs,
                         metavar="N", help="sequences per step at most (default "
                                           f"{sched.max_seqs}, vLLM's)")
    traffic.add_argument("--kv-usable-fraction", type=fraction,
                         default=sched.kv_usable_fraction, metavar="F",
                         help="share of HBM an instance uses, the KV cache getting what the "
                              "weights and activations leave (vLLM's gpu_memory_utilization; "
                              f"default {sched.kv_usable_fraction:g})")
    traffic.add_argument("--prefix-hit-rate", type=_share, default=0.0, metavar="H",
                         help="share of each prompt found in the prefix cache, not computed "
                              "again (default 0)")
    traffic.add_argument("--schedule", choices=["mixed", "prefill-first"], default="mixed",
                         help="mixed: decodes first, prompts chunked into the rest of the "
                              "budget (vLLM V1, SGLang, TensorRT-LLM; default); prefill-first: "
                              "waiting prompts whole, in steps of their own (vLLM V0)")
    traffic.add_argument("--long-prefill-token-threshold", type=_prefill_cap, default=0,
                         metavar="N",
                         help="a request gets at most N of its prompt tokens a step (vLLM V1's "
                              "flag; default 0: off; with --schedule mixed)")
    traffic.add_argument("--kv-overlap", choices=list(KV_OVERLAPS), default=sched.kv_overlap,
                         help="disaggregated KV transfer: sent layer by layer while the "
                              "prefill runs (default) or after it")
    spec = parser.add_argument_group(
        "speculative decoding", "each decode step drafts K tokens and verifies them with one "
        "target pass of K+1 queries per sequence, emitting (1 - A^(K+1)) / (1 - A) tokens "
        "(Leviathan et al. 2023, eq. 1); steady state and at a rate")
    spec.add_argument("--spec-draft-len", type=int, default=None, metavar="K",
                      help="tokens drafted per step (>= 1; default: no speculation)")
    spec.add_argument("--spec-accept", type=float, default=None, metavar="A",
                      help="probability that a drafted token is accepted, in [0, 1)")
    spec.add_argument("--spec-draft", default="mtp", metavar="DRAFT",
                      help="the proposer: mtp (default: one extra decoder layer of the "
                           "target's shape per drafted token, sharing its embedding and head, "
                           "as DeepSeek-V3's MTP module and EAGLE heads) or a draft model "
                           "preset name, run on the target's layout")


def _add_expert_options(parser: argparse.ArgumentParser) -> None:
    """``--attn-dp``, ``--ep`` and ``--moe-imbalance``: a mixture-of-experts model's
    search (steady state only) and its routing skew."""
    parser.add_argument("--attn-dp", type=ep_values, default="all", metavar="N[,N...]|all",
                        help="mixture-of-experts models: attention data-parallel degrees to "
                             "search (an instance's requests split over N attention replicas, "
                             "its experts over --ep of its GPUs; one value pins it; default "
                             "all: the powers of two up to --gpus and each --gpus / 2^k)")
    parser.add_argument("--ep", type=ep_values, default="all", metavar="N[,N...]|all",
                        help="mixture-of-experts models: expert-parallel degrees to search "
                             "(experts over N of an instance's TP x attention-DP GPUs, "
                             "all-to-all dispatch and combine, or without attention DP and "
                             "N <= 8 one all-reduce over TP; 1: experts sharded like the "
                             "FFN over TP; default all: every divisor of the experts a "
                             "layout's GPUs can hold); shown as ADP / EP in the layout, "
                             "attn_dp / ep in JSON and CSV")
    parser.add_argument("--moe-imbalance", type=moe_imbalance_arg, default=1.0,
                        metavar="balanced|eplb|no-eplb|X",
                        help="mixture-of-experts models with --ep > 1: the busiest "
                             "expert-parallel rank's routed tokens over the mean; its expert "
                             "matmuls and all-to-all traffic scale by it. eplb = 1.109 and "
                             "no-eplb = 2.564 are measured (TensorRT-LLM, DeepSeek-R1 decode at "
                             "EP 32 with and without its expert load balancer) (default: "
                             "balanced, 1)")


def run(args: argparse.Namespace) -> int:
    """Run ``simcore serving``: 0 on success, 1 when nothing meets the budget or limits
    (one line on stderr); bad input raises a :class:`~simcore.errors.SimcoreInputError`."""
    from ..studies import serving

    refuse_shared_paths(out=args.out, plot=args.plot)  # before any work
    args.runtime = resolve_runtime(args)  # an unknown name: one line, before any work
    if args.rate is not None or args.trace is not None:
        return _run_at_rate(args)
    if args.gpus == "auto":
        raise SimcoreInputError("--gpus auto searches the smallest deployment for a request "
                                "rate: pass --rate R (or --trace FILE), or a number of GPUs")
    if args.long_prefill_token_threshold:
        raise SimcoreInputError("--long-prefill-token-threshold belongs to the request "
                                "simulation: pass --rate R (or --trace FILE) with it, or drop it")
    try:
        result = _plan(args)
    except serving.InfeasibleError as exc:  # a result, not bad input
        print(f"simcore serving: {exc}", file=sys.stderr)
        return 1
    text = serving.format_rows(result.rows(args.rows), args.format)
    if args.format == "table":
        print("\n".join(serving.summary_lines(result)) + "\n")
    else:  # stdout holds JSON / CSV only
        print(serving.assumptions_line(result), file=sys.stderr)
        for note in result.notes:
            print(f"note: {note}", file=sys.stderr)
    sys.stdout.write(text)
    sys.stdout.flush()
    _save_files(args, result, text)  # after the rows: a failed save never hides them
    return 0


def _run_at_rate(args: argparse.Namespace) -> int:
    """``--rate`` / ``--trace``: the request-level simulation
    (:func:`~simcore.studies.serving.rate.plan_at_rate`); exit 1 with the closest
    deployment when none meets the limits."""
    from ..studies import serving
    from ..studies.serving.present import RATE_TABLE_COLUMNS, rate_summary_lines
    from ..studies.serving.rate import RATE_ROW_KEYS, plan_at_rate
    from ..studies.serving.simulate import Scheduler

    for flag, given in (("--plot", args.plot is not None), ("--rows frontier", args.rows == "frontier"),
                        ("--batch", args.batch is not None),
                        ("--prefill-batch", args.prefill_batch is not None)):
        if given:
            raise SimcoreInputError(f"{flag} belongs to the steady-state planner; with --rate "
                                    "or --trace the batches come from the scheduler: drop it")
    for flag, value in (("--attn-dp", args.attn_dp), ("--ep", args.ep)):
        if value != "all":
            raise SimcoreInputError(f"{flag} belongs to the steady-state planner: the request "
                                    "simulation (--rate / --trace) searches every attention-DP "
                                    f"and EP degree that fits and cannot pin one; drop {flag}")
    if args.out is not None and args.out.suffix.lower() in serving.present.DATASET_SUFFIXES:
        raise SimcoreInputError(f"--out {str(args.out)!r}: a plan at a rate has rows, no "
                                "per-layout Dataset; pass a .json, .csv or .txt file")
    modes = ("agg", "disagg") if args.mode == "both" else (args.mode,)
    sched = Scheduler(token_budget=args.max_num_batched_tokens, max_seqs=args.max_num_seqs,
                      kv_usable_fraction=args.kv_usable_fraction, kv_overlap=args.kv_overlap,
                      prefix_hit_rate=args.prefix_hit_rate, speculative=_speculative(args),
                      policy=args.schedule.replace("-", "_"),
                      long_prefill_threshold=args.long_prefill_token_threshold)
    try:
        result = plan_at_rate(args.model, family=args.family, gpus=args.gpus, rate_rps=args.rate,
                              trace=args.trace, duration_s=args.duration_s, isl=args.isl,
                              osl=args.osl, max_ttft_ms=args.max_ttft_ms,
                              max_tpot_ms=args.max_tpot_ms, dtype=args.dtype, scheduler=sched,
                              modes=modes, exact_gpus=args.exact_gpus, top=args.top,
                              seed=args.seed, runtime=args.runtime,
                              moe_imbalance=args.moe_imbalance)
    except serving.InfeasibleError as exc:  # a result, not bad input
        print(f"simcore serving: {exc}", file=sys.stderr)
        return 1
    rows = result.rows("candidates" if args.rows == "candidates" else "best")
    text = serving.format_rows(rows, args.format, keys=RATE_ROW_KEYS, columns=RATE_TABLE_COLUMNS)
    header = rate_summary_lines(result)
    if args.format == "table":
        print("\n".join(header) + "\n")
    else:  # stdout holds JSON / CSV only
        for line in header[1:]:
            if line.startswith(("assumed:", "fidelity:", "note:")):
                print(line, file=sys.stderr)
    sys.stdout.write(text)
    sys.stdout.flush()
    _save_files(args, result, text)
    return 0


def _speculative(args: argparse.Namespace) -> Any:
    """``--spec-draft-len`` / ``--spec-accept`` / ``--spec-draft`` as a ``Speculative``
    (None without them); both numbers are needed, checked by ``Speculative``."""
    from ..studies.serving.speculative import Speculative

    k, a = args.spec_draft_len, args.spec_accept
    if k is None and a is None:
        if args.spec_draft != "mtp":
            raise SimcoreInputError("--spec-draft needs --spec-draft-len K and --spec-accept A")
        return None
    if k is None or a is None:
        given, missing = (("--spec-draft-len", "--spec-accept A") if a is None
                          else ("--spec-accept", "--spec-draft-len K"))
        raise SimcoreInputError(f"{given} needs {missing} too (speculative decoding takes "
                                "both the draft length and the acceptance rate)")
    return Speculative(k, a, args.spec_draft)


def _plan(args: argparse.Namespace) -> Any:
    from ..studies import serving

    def flat(lists: list[list[int]] | None) -> list[int] | None:
        return None if lists is None else [b for part in lists for b in part]

    modes = ("agg", "disagg") if args.mode == "both" else (args.mode,)
    return serving.plan(args.model, family=args.family, gpus=args.gpus, isl=args.isl,
                        osl=args.osl, max_ttft_ms=args.max_ttft_ms, max_tpot_ms=args.max_tpot_ms,
                        batch=flat(args.batch) or serving.DEFAULT_BATCHES,
                        prefill_batch=flat(args.prefill_batch) or serving.DEFAULT_PREFILL_BATCHES,
                        exact_gpus=args.exact_gpus, modes=modes, top=args.top, dtype=args.dtype,
                        attn_dp=args.attn_dp, ep=args.ep, speculative=_speculative(args),
                        runtime=args.runtime, moe_imbalance=args.moe_imbalance)


def _save_files(args: argparse.Namespace, result: Any, text: str) -> None:
    """``--out`` and ``--plot``; a failed write is one line naming the option (the rows
    are on stdout already, any old file is unchanged)."""
    from ..studies import serving
    from ..studies.serving import plot_frontier, write_output

    failed: list[str] = []
    if args.out is not None:
        try:
            write_output(result, text, args.out)
            print(f"wrote {args.out}", file=sys.stderr)
            if args.out.suffix.lower() in serving.present.DATASET_SUFFIXES:
                for extra, _ in serving.present.sweep_paths(result, args.out)[1:]:
                    print(f"wrote {extra} (the expert-parallel layouts)", file=sys.stderr)
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
