"""The ``simcore`` command line.

``simcore evaluate`` (the default) prints the best layouts for a model and workload on
a hardware family; ``simcore explore`` runs the co-design explorer; ``simcore tune``
and ``simcore rank`` drive the autotuner; ``simcore validate`` compares predictions
with published measurements. Bad options print one line and exit with code 2.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence
from typing import Any, NoReturn

from .presets import DEFAULT_FAMILY, DEFAULT_MODEL, HARDWARE_FAMILIES, PRESETS

__all__ = ["main", "build_parser", "CliError"]


class CliError(Exception):
    """A bad option or input: reported as one line, exit code 2."""


class OneLineParser(argparse.ArgumentParser):
    """argparse that reports errors in one line (usage stays behind --help)."""

    def error(self, message: str) -> NoReturn:
        raise CliError(f"{self.prog}: error: {message} (see {self.prog} --help)")


def add_model_options(p: argparse.ArgumentParser, *, default_model: str = DEFAULT_MODEL) -> None:
    p.add_argument("--model", default=default_model,
                   help=f"preset name ({', '.join(PRESETS)}) or a HuggingFace config.json path "
                        f"(default: {default_model})")
    p.add_argument("--family", default=DEFAULT_FAMILY,
                   help=f"hardware family: {', '.join(HARDWARE_FAMILIES)} (default: {DEFAULT_FAMILY})")


def add_workload_options(p: argparse.ArgumentParser, *, train: bool = False) -> None:
    modes = ["decode", "prefill", "train"] if train else ["decode", "prefill"]
    p.add_argument("--mode", choices=modes, default="decode",
                   help="decode (time per output token), prefill (TTFT)"
                        + (" or train (step time)" if train else "") + "; default decode")
    p.add_argument("--s-kv", type=positive_int, default=131072,
                   help="context length in tokens (prompt length for prefill, sequence length "
                        "for train; default 131072)")
    p.add_argument("--batch", type=positive_int, default=1,
                   help="sequences per step (global batch for train; default 1)")
    if train:
        p.add_argument("--micro-batch", type=positive_int, default=1,
                       help="train: sequences per micro-batch per replica (default 1)")
        p.add_argument("--recompute", choices=["none", "selective", "full"], default="selective",
                       help="train: activation recomputation (default selective)")
        p.add_argument("--zero-stage", type=int, choices=[0, 1, 2, 3], default=0,
                       help="train: ZeRO stage for model-state memory (default 0)")


def hardware_override(text: str) -> tuple[str, float]:
    from .specs import HW_KNOBS

    knob, sep, val = text.partition("=")
    if not sep or knob not in HW_KNOBS:
        raise argparse.ArgumentTypeError(
            f"expected KNOB=VALUE with KNOB one of {', '.join(HW_KNOBS)}, got {text!r}")
    try:
        v = float(val)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{knob}: expected a number, got {val!r}") from None
    if not v > 0:
        raise argparse.ArgumentTypeError(f"{knob} must be > 0, got {val!r}")
    return knob, v


def make_workload(args: argparse.Namespace):
    from .specs import Workload

    if args.mode == "train":
        return Workload("train", batch=args.batch, s_kv=args.s_kv, micro_batch=args.micro_batch,
                        recompute=args.recompute, zero_stage=args.zero_stage)
    return Workload(args.mode, batch=args.batch, s_kv=args.s_kv)


def positive_int(text: str) -> int:
    try:
        v = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}") from None
    if v < 1:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}")
    return v


def resolve_model(name: str):
    """A preset name, a HuggingFace config.json path or a folder holding one."""
    from .presets import load_model

    try:
        return load_model(name)
    except (ValueError, FileNotFoundError) as exc:
        raise CliError(f"simcore: error: --model: {exc}") from None


def cmd_evaluate(args: argparse.Namespace) -> int:
    from .evaluate import evaluate
    from .metrics import best, top_points
    from .presets import get_family
    from .report import LAYOUT_COLUMNS, METRIC_COLUMNS, fmt_ns, table
    from .specs import Hardware

    model = resolve_model(args.model)
    wl = make_workload(args)
    fam = get_family(args.family)
    hw = Hardware(**{**fam.hardware.as_dict(), **dict(args.set)})
    ds = evaluate(model, wl, space=args.space, family=fam, hardware=hw)
    n_fit = int(ds.fits.sum())
    print(f"{model.name} {wl.mode} s_kv={wl.s_kv} batch={wl.batch} on {ds.attrs['family']} "
          f"({ds.attrs['n_system_devices']} devices): {ds.valid.sum().item()} valid layouts of "
          f"{ds.valid.size}, {n_fit} fit in memory")
    if n_fit == 0:
        print("no layout fits: try a family with more HBM per device (--family H200), a "
              "shorter --s-kv or smaller --batch, --space full, or --set pe_hbm_gb=...")
        return 1
    rows = top_points(ds, args.metric, n=args.top)
    print(table(rows, LAYOUT_COLUMNS + METRIC_COLUMNS))
    b = best(ds, args.metric).squeeze()
    parts = {k: float(b[k]) for k in ("compute_ns", "memory_ns", "comm_ns")}
    bound = max(parts, key=lambda k: parts[k]).removesuffix("_ns")
    print(f"best by {args.metric}: {fmt_ns(float(b.latency_ns))} per step, {bound}-bound "
          f"(compute {fmt_ns(parts['compute_ns'])}, memory {fmt_ns(parts['memory_ns'])}, "
          f"comm {fmt_ns(parts['comm_ns'])})")
    return 0


def build_parser() -> OneLineParser:
    parser = OneLineParser(
        prog="simcore",
        description="Vectorized simulation of LLM hardware x parallelism, and a correct autotuner.",
    )
    sub = parser.add_subparsers(dest="command", parser_class=OneLineParser)
    ev = sub.add_parser("evaluate", help="best parallel layouts for a model on a hardware family",
                        description="Evaluate every parallel layout (TP/CP/PP/DP/KV sharding...) "
                                    "and print the best fitting ones.")
    add_model_options(ev)
    add_workload_options(ev, train=True)
    ev.add_argument("--set", type=hardware_override, action="append", default=[],
                    metavar="KNOB=VALUE",
                    help="override a hardware knob of the family (repeatable), e.g. "
                         "--set bw_hbm_gbs=8000")
    ev.add_argument("--space", choices=["reduced", "full"], default="full",
                    help="layout space (default: full, 30,720 layouts)")
    ev.add_argument("--metric", default="latency", choices=["latency", "throughput", "FLOPS"],
                    help="what 'best' means (default: latency)")
    ev.add_argument("--top", type=positive_int, default=10, help="rows to print (default 10)")
    ev.set_defaults(func=cmd_evaluate)
    for register in _extensions():
        register(sub)
    return parser


def _extensions() -> list[Callable[[Any], None]]:
    regs: list[Callable[[Any], None]] = []
    for mod, fn in (("simcore.codesign_cli", "add_parsers"),
                    ("simcore.autotune.cli", "add_tune_parsers"),
                    ("simcore.validation.cli", "add_parsers")):
        try:
            module = __import__(mod, fromlist=[fn])
        except ModuleNotFoundError as exc:
            if exc.name is not None and mod.startswith(exc.name):
                continue
            raise
        regs.append(getattr(module, fn))
    return regs


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    try:
        parser = build_parser()
        if not argv or argv[0].startswith("-") and argv[0] not in ("-h", "--help"):
            argv = ["evaluate", *argv]
        args = parser.parse_args(argv)
        if getattr(args, "func", None) is None:
            parser.print_help()
            return 2
        return int(args.func(args) or 0)
    except CliError as exc:
        print(str(exc), file=sys.stderr)
        return 2
    except BrokenPipeError:  # e.g. `simcore explore | head`
        import os

        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 141
    except (ValueError, OSError) as exc:  # bad input, unreachable scheduler, unreadable file
        print(f"simcore: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("simcore: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())
