"""Options shared by the ``simcore`` commands, declared once.

Every command builds its parser from these helpers, so an option has one spelling, one
default and one help text everywhere: :func:`add_model_options` (``--model``,
``--family``), :func:`add_workload_options` (``--mode``, ``--s-kv``, ``--batch`` and the
training options; with ``sweep=True`` ``--s-kv`` and ``--batch`` take comma lists),
:func:`add_dtype_options` (``--dtype``, ``--kv-dtype`` and :func:`add_cuda_graphs_option`'s
``--eager`` / ``--cuda-graphs``, which ``explore`` and ``compare`` add alone;
:func:`cuda_graphs_flag` reads them: decode replays CUDA graphs unless ``--eager``),
:func:`add_budget_options` (``--gpus``, ``--exact-gpus``; :func:`resolve_budget` reads them:
one node of a GPU family unless ``--gpus`` says otherwise),
:func:`add_hardware_overrides` (``--set KNOB=VALUE``),
:func:`add_space_option` (``--space``, ``--ep``; :func:`resolve_space` reads them),
:func:`add_metric_options` (``--metric``, ``--top``) and :func:`add_output_options` (``--format``, ``--out``).

Every ``NAME=VALUE`` option (``--set``, ``--grid``, ``--efficiency``) goes through
:func:`parse_assignment`. Bad values raise :class:`OptionError`, a
:class:`~simcore.errors.SimcoreInputError` that argparse also reports as its own.

The ``resolve_*`` / :func:`make_workload` helpers are the places where the command line
hands user input to the library: they turn the library's ``ValueError`` /
``OSError`` for that input into a :class:`~simcore.errors.SimcoreInputError` naming the
option. Nothing else catches ``ValueError``.
"""

from __future__ import annotations

import argparse
import math
import os
import re
import sys
from collections.abc import Callable, Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any, NoReturn

from ..errors import SimcoreInputError
from ..model.presets import DEFAULT_FAMILY, DEFAULT_MODEL, HARDWARE_FAMILIES, PRESETS
from ..model.runtime import runtime_help
from ..model.specs import DTYPE_BYTES

__all__ = [
    "DEFAULT_SPACE", "DTYPES", "FORMATS", "KV_DTYPES", "METRICS", "SPACES", "TRAIN_PRECISIONS",
    "TRAIN_DEFAULTS", "TRAIN_OPTIONS", "micro_batch_arg", "recompute_arg", "zero_stage_arg",
    "OptionError", "Parser", "ParserExit", "UsageError",
    "add_budget_options", "add_cuda_graphs_option", "add_dtype_options", "add_hardware_overrides",
    "add_metric_options", "add_model_options", "add_output_options", "add_runtime_option",
    "add_space_option", "add_workload_options",
    "assignment", "budget_error", "budget_kwargs", "cuda_graphs_flag", "gpus_budget", "fraction", "int_or_list", "make_workload", "output_file",
    "parse_assignment", "plot_file", "positive_float", "positive_floats", "positive_int",
    "resolve_budget", "resolve_family", "resolve_runtime", "runtime_kwargs",
    "resolve_model", "resolve_space", "ep_values", "share", "store_path", "sweep_kwargs",
]

#: The layout space every command uses unless told otherwise: the engine's default
#: (``simcore.evaluate(space="reduced")``); ``tests/test_cli.py`` pins the two together.
DEFAULT_SPACE = "reduced"
SPACES = ("reduced", "full")
FORMATS = ("table", "json", "csv")
METRICS = ("latency", "throughput", "FLOPS")
#: ``--dtype`` of decode / prefill (``Workload.weight_dtype`` and ``act_dtype``; int4 is
#: weight-only, W4A16), of train (``Workload.precision``), and ``--kv-dtype``
#: (``Workload.kv_dtype``)
DTYPES: tuple[str, ...] = tuple(DTYPE_BYTES)
TRAIN_PRECISIONS: tuple[str, ...] = ("fp16", "bf16", "fp32", "fp8")
KV_DTYPES: tuple[str, ...] = tuple(d for d in DTYPE_BYTES if d != "int4")


# -- errors and the parser --------------------------------------------------------------

class OptionError(SimcoreInputError, argparse.ArgumentTypeError):
    """A bad option value.

    Raised by the value converters below; argparse reports it as
    ``argument --x: <message>``, and outside argparse it is a plain
    :class:`~simcore.errors.SimcoreInputError`.
    """


class UsageError(SimcoreInputError):
    """What argparse objects to (unknown option, bad choice), with the parser's ``prog``."""

    def __init__(self, message: str, *, prog: str) -> None:
        super().__init__(message)
        self.prog = prog


class ParserExit(Exception):
    """``--help`` or ``--version`` finished: :func:`simcore.cli.main` returns ``status``."""

    def __init__(self, status: int) -> None:
        super().__init__(status)
        self.status = status


class Parser(argparse.ArgumentParser):
    """argparse that raises instead of exiting: errors become one-line :class:`UsageError`."""

    def error(self, message: str) -> NoReturn:
        raise UsageError(f"{message} (see {self.prog} --help)", prog=self.prog)

    def exit(self, status: int = 0, message: str | None = None) -> NoReturn:
        if message:
            self._print_message(message, sys.stderr)
        raise ParserExit(status)


# -- value converters (argparse ``type=``) ----------------------------------------------

def positive_int(text: str) -> int:
    """``"8"`` -> 8; anything but an integer >= 1 is an :class:`OptionError`.

    Examples
    --------
    >>> positive_int("8")
    8
    >>> positive_int("0")
    Traceback (most recent call last):
    ...
    simcore.cli.options.OptionError: expected a positive integer, got '0'
    """
    try:
        v = int(text)
    except ValueError:
        raise OptionError(f"expected a positive integer, got {text!r}") from None
    if v < 1:
        raise OptionError(f"expected a positive integer, got {text!r}")
    return v


def int_or_list(text: str) -> int | list[int]:
    """``"8"`` -> 8 (one value); ``"1,8,64"`` -> ``[1, 8, 64]`` (a sweep dimension), each
    a positive integer given once.

    Examples
    --------
    >>> int_or_list("8"), int_or_list("1,8,64")
    (8, [1, 8, 64])
    >>> int_or_list("8,8")
    Traceback (most recent call last):
    ...
    simcore.cli.options.OptionError: repeats 8 in '8,8'; give each value once
    """
    if "," not in text:
        return positive_int(text.strip())
    parts = [t.strip() for t in text.split(",") if t.strip()]
    if not parts:
        raise OptionError(f"expected N or N1,N2,... (positive integers), got {text!r}")
    try:
        values = [positive_int(t) for t in parts]
    except OptionError:
        raise OptionError(f"expected N or N1,N2,... (positive integers), got {text!r}") from None
    dup = sorted({v for v in values if values.count(v) > 1})
    if dup:
        raise OptionError(f"repeats {', '.join(map(str, dup))} in {text!r}; give each value once")
    return values


def positive_float(text: str) -> float:
    """A finite number > 0."""
    try:
        v = float(text)
    except ValueError:
        raise OptionError(f"expected a number > 0, got {text!r}") from None
    if not (v > 0 and math.isfinite(v)):
        raise OptionError(f"expected a number > 0, got {text!r}")
    return v


def positive_floats(text: str) -> list[float]:
    """A comma list of numbers > 0: ``"2000,4000"`` -> ``[2000.0, 4000.0]``."""
    parts = [t.strip() for t in text.split(",") if t.strip()]
    if not parts:
        raise OptionError(f"expected V1,V2,... (numbers > 0), got {text!r}")
    try:
        return [positive_float(t) for t in parts]
    except OptionError:
        raise OptionError(f"expected V1,V2,... (numbers > 0), got {text!r}") from None


def fraction(text: str) -> float:
    """A number in (0, 1]."""
    try:
        v = float(text)
    except ValueError:
        raise OptionError(f"expected a number in (0, 1], got {text!r}") from None
    if not 0.0 < v <= 1.0:
        raise OptionError(f"expected a number in (0, 1], got {text!r}")
    return v


def share(text: str) -> float:
    """A number in [0, 1] (a share that may be zero, e.g. ``roofline_overlap``)."""
    try:
        v = float(text)
    except ValueError:
        raise OptionError(f"expected a number in [0, 1], got {text!r}") from None
    if not 0.0 <= v <= 1.0:
        raise OptionError(f"expected a number in [0, 1], got {text!r}")
    return v


def parse_assignment(text: str, allowed: Mapping[str, Callable[[str], Any]]) -> tuple[str, Any]:
    """Parse ``NAME=VALUE``: ``NAME`` must be a key of ``allowed``, whose converter turns
    ``VALUE`` into the result. The one parser of every ``NAME=VALUE`` option.

    Examples
    --------
    >>> parse_assignment("bw_hbm_gbs=8000", {"bw_hbm_gbs": positive_float})
    ('bw_hbm_gbs', 8000.0)
    >>> parse_assignment("speed=2", {"bw_hbm_gbs": positive_float})
    Traceback (most recent call last):
    ...
    simcore.cli.options.OptionError: unknown name 'speed' in 'speed=2'; pass one of bw_hbm_gbs
    """
    name, sep, value = text.partition("=")
    name = name.strip()
    if not sep or not name:
        raise OptionError(
            f"expected NAME=VALUE with NAME one of {', '.join(allowed)}, got {text!r}")
    if name not in allowed:
        raise OptionError(f"unknown name {name!r} in {text!r}; pass one of {', '.join(allowed)}")
    try:
        return name, allowed[name](value.strip())
    except ValueError as exc:  # OptionError, or a converter's own ValueError
        raise OptionError(f"{name}: {exc}") from None


def assignment(allowed: Mapping[str, Callable[[str], Any]]) -> Callable[[str], tuple[str, Any]]:
    """:func:`parse_assignment` bound to ``allowed``, for argparse's ``type=``."""

    def parse(text: str) -> tuple[str, Any]:
        return parse_assignment(text, allowed)

    parse.__name__ = "assignment"
    return parse


def _check_folder(text: str) -> Path:
    path = Path(text)
    folder = path.parent
    if not folder.is_dir():
        raise OptionError(f"cannot write {text!r}: folder {str(folder)!r} does not exist")
    if not os.access(folder, os.W_OK | os.X_OK):
        raise OptionError(f"cannot write {text!r}: folder {str(folder)!r} is not writable")
    return path


def output_file(text: str) -> Path:
    """A file path whose folder exists and is writable (checked before any work is done)."""
    path = _check_folder(text)
    if path.is_dir() and path.suffix.lower() != ".zarr":
        raise OptionError(f"cannot write {text!r}: it is a folder; pass a file name")
    return path


def plot_file(text: str) -> Path:
    """An :func:`output_file` for a figure: .png, .svg or .pdf."""
    path = output_file(text)
    if path.suffix.lower() not in (".png", ".svg", ".pdf"):
        raise OptionError(f"expected a name ending in .png, .svg or .pdf, got {text!r}")
    return path


def store_path(text: str) -> Path:
    """A folder-like store (zarr) path whose parent folder exists and is writable."""
    return _check_folder(text)


# -- option builders --------------------------------------------------------------------

def add_model_options(p: argparse.ArgumentParser) -> None:
    """``--model`` (default :data:`~simcore.model.presets.DEFAULT_MODEL`) and ``--family``
    (default :data:`~simcore.model.presets.DEFAULT_FAMILY`)."""
    p.add_argument("--model", default=DEFAULT_MODEL, metavar="NAME|CONFIG_JSON",
                   help=f"preset ({', '.join(PRESETS)}), catalogue id (simcore models lists "
                        "them; model-card ids of the same shape, such as "
                        "meta-llama/Meta-Llama-3.1-70B-Instruct, resolve to them), a "
                        "HuggingFace config.json path or folder, or the id of a model in the "
                        f"local Hugging Face cache (default: {DEFAULT_MODEL})")
    p.add_argument("--family", default=DEFAULT_FAMILY, metavar="FAMILY",
                   help=f"hardware family: {', '.join(HARDWARE_FAMILIES)} (simcore families "
                        f"compares them) (default: {DEFAULT_FAMILY})")


def add_workload_options(p: argparse.ArgumentParser, *, train: bool = False,
                         sweep: bool = False) -> None:
    """``--mode``, ``--s-kv``, ``--batch``; with ``train=True`` also ``--micro-batch``,
    ``--recompute`` and ``--zero-stage``; with ``sweep=True`` ``--s-kv`` and ``--batch``
    also take comma lists (``--batch 1,8,64``: a sweep dimension, see
    :func:`sweep_kwargs`)."""
    modes = ["decode", "prefill", "train"] if train else ["decode", "prefill"]
    convert = int_or_list if sweep else positive_int
    lists = "; a comma list (1,8,64) sweeps it" if sweep else ""
    p.add_argument("--mode", choices=modes, default="decode",
                   help="decode (time per output token), prefill (time to first token)"
                        + (" or train (step time)" if train else "") + " (default: decode)")
    p.add_argument("--s-kv", type=convert, default=131072,
                   metavar="TOKENS[,TOKENS...]" if sweep else "TOKENS",
                   help="context length in tokens: prompt length for prefill"
                        + (", sequence length for train" if train else "") + lists
                        + " (default: 131072)")
    p.add_argument("--batch", type=convert, default=1, metavar="N[,N...]" if sweep else "N",
                   help="sequences per step" + (" (global batch for train)" if train else "")
                        + lists + " (default: 1)")
    if train:
        # default None: given or not (only --mode train takes them); make_workload fills in
        # TRAIN_DEFAULTS, sweep_kwargs turns comma lists and "all" into sweep dims
        search = "; a comma list or all searches it with the layout" if sweep else ""
        p.add_argument("--micro-batch", type=micro_batch_arg if sweep else positive_int,
                       default=None, metavar="N[,N...]|all" if sweep else "N",
                       help="train: sequences per micro-batch per replica" + search
                            + (" (all: the powers of two dividing the batch)" if sweep else "")
                            + " (default: 1)")
        p.add_argument("--recompute", type=recompute_arg if sweep else _recompute_one,
                       default=None, metavar="MODE[,MODE...]|all" if sweep else "MODE",
                       help="train: activation recomputation: none, Megatron's selective or "
                            "full, or op (torchtitan's per-op checkpointing)" + search
                            + " (default: selective)")
        p.add_argument("--zero-stage", type=zero_stage_arg if sweep else _zero_stage_one,
                       default=None, metavar="STAGE[,STAGE...]|all" if sweep else "STAGE",
                       help="train: ZeRO stage 0-3 for model-state memory and data-parallel "
                            "communication" + search + " (default: the --runtime's, else 0)")


#: ``--micro-batch`` / ``--zero-stage`` / ``--recompute`` when not given (``Workload``'s).
#: ``zero_stage`` None: the runtime's (``--runtime``; FSDP stacks shard fully, ZeRO-3),
#: 0 without one.
TRAIN_DEFAULTS: dict[str, Any] = {"micro_batch": 1, "zero_stage": None,
                                  "recompute": "selective"}

#: The training options, by Workload field.
TRAIN_OPTIONS: dict[str, str] = {"micro_batch": "--micro-batch", "zero_stage": "--zero-stage",
                                 "recompute": "--recompute"}


def _list_or_all(text: str, one: Any, what: str) -> Any:
    """``"all"``, one value or a comma list (each once) of ``one(part)``."""
    text = text.strip()
    if text.lower() == "all":
        return "all"
    parts = [t.strip() for t in text.split(",")]
    if not all(parts):
        raise OptionError(f"expected {what}, a comma list of them or all, got {text!r}")
    values = [one(t) for t in parts]
    dup = sorted({v for v in values if values.count(v) > 1}, key=str)
    if dup:
        raise OptionError(f"repeats {', '.join(map(str, dup))} in {text!r}; give each value once")
    return values if len(values) > 1 else values[0]


def micro_batch_arg(text: str) -> Any:
    """``--micro-batch``: a positive integer, a comma list of them, or ``all``.

    Examples
    --------
    >>> micro_batch_arg("2"), micro_batch_arg("1,2,4"), micro_batch_arg("all")
    (2, [1, 2, 4], 'all')
    """
    def one(t: str) -> int:
        try:
            return positive_int(t)
        except OptionError:
            raise OptionError(f"expected N, N1,N2,... (positive integers) or all, got "
                              f"{text!r}") from None
    return _list_or_all(text, one, "a positive integer")


def _zero_stage_one(t: str) -> int:
    from ..engine.space import ZERO_STAGES

    if t.strip() not in {str(z) for z in ZERO_STAGES}:
        raise OptionError(f"expected a ZeRO stage {_or(map(str, ZERO_STAGES))}, got {t!r}")
    return int(t)


def zero_stage_arg(text: str) -> Any:
    """``--zero-stage``: 0, 1, 2 or 3, a comma list of them, or ``all``.

    Examples
    --------
    >>> zero_stage_arg("1"), zero_stage_arg("0,3"), zero_stage_arg("all")
    (1, [0, 3], 'all')
    >>> zero_stage_arg("5")
    Traceback (most recent call last):
    ...
    simcore.cli.options.OptionError: expected a ZeRO stage 0, 1, 2 or 3, got '5'
    """
    return _list_or_all(text, _zero_stage_one, "a ZeRO stage")


def _recompute_one(t: str) -> str:
    from ..engine.space import RECOMPUTE_CHOICES

    if t not in RECOMPUTE_CHOICES:
        raise OptionError(f"expected a recompute mode {_or(RECOMPUTE_CHOICES)}, got {t!r}")
    return t


def recompute_arg(text: str) -> Any:
    """``--recompute``: none, selective, full or op, a comma list of them, or ``all``.

    Examples
    --------
    >>> recompute_arg("full"), recompute_arg("none,full"), recompute_arg("all")
    ('full', ['none', 'full'], 'all')
    """
    return _list_or_all(text, _recompute_one, "a recompute mode")


def add_dtype_options(p: argparse.ArgumentParser, *, train: bool = False) -> None:
    """``--dtype`` (weights and activations of decode / prefill; with ``train=True`` also
    the training precision) and ``--kv-dtype`` (the KV cache); read by
    :func:`make_workload`."""
    names = list(dict.fromkeys([*DTYPES, *(TRAIN_PRECISIONS if train else ())]))
    p.add_argument("--dtype", choices=names, default=None, metavar="DTYPE",
                   help="decode/prefill: precision of weights and activations, bf16, fp16, "
                        "fp8, int8, fp4 (NVFP4) or mxfp4 (fp8 / int8 / fp4 matmuls at the "
                        "family's FP8 / INT8 / FP4 rate; fp4 on Blackwell only), or int4: "
                        "int4 weights, 16-bit activations (W4A16)"
                        + ("; train: the training precision, fp16, bf16, fp32 or fp8"
                           if train else "")
                        + " (default: the model's own, 16-bit for the presets"
                        + ("; train: fp16" if train else "") + ")")
    p.add_argument("--kv-dtype", choices=KV_DTYPES, default=None, metavar="DTYPE",
                   help="decode/prefill: precision of the KV cache, bf16, fp16, fp8, int8, "
                        "fp4 (NVFP4: 4 bits and one FP8 scale per 16 values) or mxfp4 "
                        "(default: the model's own; --dtype leaves it as it is)")
    add_cuda_graphs_option(p, train=train)


def add_runtime_option(p: Any, *, train: bool = False, names: list[str] | None = None,
                       default: str | None = None, flags: bool = False) -> None:
    """``--runtime NAME`` (a software stack's profile, :mod:`simcore.model.runtime`), value
    None when not given; its help lists ``names`` (:func:`runtime_help`). Read it with
    :func:`resolve_runtime`."""
    p.add_argument("--runtime", default=None, metavar="NAME",
                   help=runtime_help(train=train, names=names, default=default, flags=flags))


def add_cuda_graphs_option(p: argparse.ArgumentParser, *, train: bool = False) -> None:
    """``--runtime NAME`` (a software stack's profile, :mod:`simcore.model.runtime`),
    ``--eager`` (decode launches every kernel from the host) and ``--cuda-graphs`` (the
    default, kept so scripts that pass it still run); one or the other. Read them with
    :func:`runtime_kwargs` (or :func:`cuda_graphs_flag`)."""
    add_runtime_option(p, train=train, flags=True)
    g = p.add_mutually_exclusive_group()
    g.add_argument("--eager", action="store_true",
                   help="decode: launch every kernel from the host (5 us of host time each) "
                        "instead of replaying CUDA graphs (default: decode steps replay CUDA "
                        "graphs, as vLLM, SGLang and TensorRT-LLM serve by default; prefill "
                        "and training steps always launch from the host)")
    g.add_argument("--cuda-graphs", action="store_true",
                   help="decode: replay CUDA graphs (the default; accepted so scripts that "
                        "pass it keep working)")


def gpus_budget(text: str) -> int | str:
    """``--gpus``: a positive integer, or ``all`` (no cap: the family's whole system).

    Examples
    --------
    >>> gpus_budget("8"), gpus_budget("all")
    (8, 'all')
    """
    if text.strip().lower() == "all":
        return "all"
    try:
        return positive_int(text)
    except OptionError:
        raise OptionError(f"expected a positive integer or 'all', got {text!r}") from None


def add_budget_options(p: argparse.ArgumentParser, *, per: str = "") -> None:
    """``--gpus N|all`` (a device budget: layouts using more are masked; default one node
    of a GPU family, :meth:`~simcore.studies.assumptions.Budget.resolve`) and
    ``--exact-gpus`` (also spelled ``--gpus-exact``: exactly N); read them with
    :func:`resolve_budget`. ``per``: what the budget applies to (" per design")."""
    p.add_argument("--gpus", type=gpus_budget, default=None, metavar="N|all",
                   help=f"device budget{per}: layouts using more than N devices are left out "
                        "(a budget on which nothing fits names the smallest count that "
                        "does); all: the family's whole system (default: one node of a GPU "
                        "family, at most 8 devices on the H100 / H200 / A100 HGX boards; the "
                        "whole system for SiP)")
    p.add_argument("--exact-gpus", "--gpus-exact", dest="exact_gpus", action="store_true",
                   help="with --gpus N: only layouts using exactly N devices")


def resolve_budget(args: argparse.Namespace, family: Any) -> Any:
    """``--gpus`` / ``--exact-gpus`` as a :class:`~simcore.studies.assumptions.Budget` of
    ``family`` (one node of a GPU family without ``--gpus``); its ``kwargs()`` are the
    engine's ``gpus=``, ``exact_gpus=``."""
    from ..studies.assumptions import Budget

    gpus = getattr(args, "gpus", None)
    exact = bool(getattr(args, "exact_gpus", False))
    if exact and not isinstance(gpus, int):
        raise SimcoreInputError("--exact-gpus needs a device count: pass --gpus N as well"
                                if gpus is None else
                                "--exact-gpus: --gpus all has no count; pass --gpus N")
    if gpus == "all":
        return replace(Budget.resolve(family), gpus=None, default=False)
    return Budget.resolve(family, gpus, exact)


def budget_kwargs(args: argparse.Namespace, family: Any = None) -> dict[str, Any]:
    """``--gpus`` / ``--exact-gpus`` as ``gpus=``, ``exact_gpus=`` keywords: with
    ``family``, :func:`resolve_budget`'s (one node by default); without, only what was
    passed (``{}`` without ``--gpus`` or with ``--gpus all``)."""
    if family is not None:
        return dict(resolve_budget(args, family).kwargs())
    gpus = getattr(args, "gpus", None)
    if gpus is None or gpus == "all":
        resolve_budget(args, "SiP")  # the --exact-gpus checks
        return {}
    return {"gpus": gpus, "exact_gpus": bool(getattr(args, "exact_gpus", False))}


def budget_error(exc: Any, budget: Any) -> SimcoreInputError:
    """A :class:`~simcore.errors.DeviceBudgetError` as the option to change: ``--gpus N``,
    or for the default budget the count to pass."""
    if budget.default:
        n = exc.min_devices
        msg = str(exc).removesuffix(f"; pass a budget of at least {n}")
        return SimcoreInputError(f"{msg} (the default budget: one node); pass --gpus {n}")
    return SimcoreInputError(f"--gpus {budget.gpus}: {exc}")


def add_hardware_overrides(p: argparse.ArgumentParser, *, what: str = "") -> None:
    """``--set KNOB=VALUE`` (repeatable): override a hardware knob of the family."""
    from ..model.specs import HW_KNOBS

    p.add_argument("--set", type=assignment({k: positive_float for k in HW_KNOBS}),
                   action="append", default=[], metavar="KNOB=VALUE",
                   help="override a hardware knob of the family (repeatable)" + what
                        + f", e.g. --set bw_hbm_gbs=8000; knobs: {', '.join(HW_KNOBS)}")


def add_space_option(p: argparse.ArgumentParser) -> None:
    """``--space reduced|full`` (default :data:`DEFAULT_SPACE`), ``--ep`` (expert
    parallelism of a mixture-of-experts model) and ``--moe-imbalance`` (its routing skew);
    read them with :func:`resolve_space` and :func:`make_workload`."""
    p.add_argument("--space", choices=SPACES, default=DEFAULT_SPACE,
                   help="layout space: reduced (1,920 layouts of a dense model) or full "
                        "(30,720); a mixture-of-experts model's also search expert "
                        f"parallelism (--ep) (default: {DEFAULT_SPACE})")
    p.add_argument("--ep", type=ep_values, default=None, metavar="N[,N...]|all",
                   help="mixture-of-experts models: the expert-parallel degrees to search "
                        "(experts split over N of a stage's TP x DP devices; all-to-all "
                        "dispatch and combine, or with no DP and N <= 8 one all-reduce over "
                        "TP); one value pins it, all takes every divisor "
                        "of the experts that a layout's devices can hold (default: the powers "
                        "of two dividing the experts, up to the budget)")
    p.add_argument("--moe-imbalance", type=moe_imbalance_arg, default=None,
                   metavar="balanced|eplb|no-eplb|X",
                   help="mixture-of-experts models with --ep > 1: the busiest expert-parallel "
                        "rank's routed tokens over the mean, 1 to 1024; its expert matmuls and "
                        "all-to-all traffic scale by it (not its memory), capped at what a "
                        "layout allows (ep x min(top-k, experts/ep) / top-k). eplb = 1.109 and "
                        "no-eplb = 2.564 are measured at EP 32, 8 experts a rank (TensorRT-LLM, "
                        "DeepSeek-R1 decode with and without its expert load balancer) "
                        "(default: balanced, 1)")


def moe_imbalance_arg(text: str) -> float:
    """``--moe-imbalance``: a :data:`~simcore.model.workload.MOE_ROUTING` name or a number
    >= 1.

    Examples
    --------
    >>> moe_imbalance_arg("eplb"), moe_imbalance_arg("1.5")
    (1.109, 1.5)
    """
    from ..model.workload import MOE_IMBALANCE_HINT, moe_imbalance_value

    try:
        return moe_imbalance_value(text)
    except ValueError:
        raise argparse.ArgumentTypeError(MOE_IMBALANCE_HINT) from None


def ep_values(text: str) -> tuple[int, ...] | str:
    """``--ep``: ``"8"`` -> ``(8,)``, ``"1,8"`` -> ``(1, 8)``, ``"all"`` -> ``"all"``.

    Examples
    --------
    >>> ep_values("1,8"), ep_values("all")
    ((1, 8), 'all')
    """
    if text.strip().lower() == "all":
        return "all"
    try:
        v = int_or_list(text)
    except OptionError:
        raise OptionError(f"expected N, N1,N2,... (positive integers) or 'all', "
                          f"got {text!r}") from None
    return (v,) if isinstance(v, int) else tuple(v)


def resolve_space(args: argparse.Namespace, model: Any, gpus: Any = None) -> Any:
    """``--space`` with ``--ep``: the name, or a
    :class:`~simcore.engine.space.NamedSpace` pinning ``ep``. ``gpus``: the budget, or a
    list of budgets (one per design); an ``--ep`` the model cannot take within one of
    them is a :class:`SimcoreInputError` naming the values it can, and any ``--ep``
    above 1 on a dense model one saying so."""
    from ..model.workload import check_moe_imbalance

    try:
        check_moe_imbalance(getattr(args, "moe_imbalance", None) or 1.0, model)
    except ValueError as exc:
        raise SimcoreInputError(f"--moe-imbalance: {exc}") from None
    ep = getattr(args, "ep", None)
    if ep is None:
        return args.space
    from ..engine.space import NamedSpace, check_ep, get_space

    text = ep if isinstance(ep, str) else ",".join(map(str, ep))
    if model.n_experts <= 1 and (ep == "all" or any(v > 1 for v in ep)):
        raise SimcoreInputError(f"--ep {text}: model {model.name} is dense (no experts); "
                                "--ep applies to mixture-of-experts models")
    mode = getattr(args, "mode", "decode")
    if ep != "all":
        for g in dict.fromkeys(gpus if isinstance(gpus, list) else [gpus]):
            space = get_space(args.space, mode, g, model.n_experts)
            try:
                check_ep(ep, space, model.n_experts, mode, g)
            except SimcoreInputError as exc:
                raise SimcoreInputError(f"--ep {text}: {model.name}: "
                                        f"{str(exc).split(': ', 1)[1]}") from None
    return NamedSpace(args.space, ep=ep)


def metric_name(text: str) -> str:
    """``--metric``: latency, throughput or FLOPS, or any alias of them in the metric
    registry (``flops``, ``FLOPS_per_gpu``, ``latency_ns``, ...); returned as given.

    Examples
    --------
    >>> metric_name("flops")
    'flops'
    >>> metric_name("speed")
    Traceback (most recent call last):
    ...
    simcore.cli.options.OptionError: unknown metric 'speed'; pass one of latency, throughput, FLOPS (aliases: latency_ns, time, step_time, throughput_tok_s, samples_per_sec, FLOPS_per_gpu, flops, flops_per_gpu)
    """
    from ..engine.metrics import get_metric

    names = _metric_aliases()
    try:
        m = get_metric(text)
    except (KeyError, ValueError):
        m = None
    if m is None or m.name not in names:
        extra = [a for n, al in names.items() for a in (n, *al) if a not in METRICS]
        raise OptionError(f"unknown metric {text!r}; pass one of {', '.join(METRICS)} "
                          f"(aliases: {', '.join(extra)})")
    return text


def _metric_aliases() -> dict[str, tuple[str, ...]]:
    """The fused metrics (latency, throughput, FLOPS_per_gpu) → their registry aliases."""
    from ..engine.metrics import get_metric

    out: dict[str, tuple[str, ...]] = {}
    for name in METRICS:
        m = get_metric(name)
        out[m.name] = tuple(dict.fromkeys(a for a in (m.name, *m.aliases) if a != m.name))
    return out


def add_metric_options(p: argparse.ArgumentParser, *, rows: str = "rows") -> None:
    """``--metric`` (what "best" means) and ``--top`` (how many rows)."""
    p.add_argument("--metric", type=metric_name, default="latency", metavar="METRIC",
                   help="what 'best' means: latency (lower is better), throughput or FLOPS "
                        "(higher is better), or an alias (flops, FLOPS_per_gpu, latency_ns, "
                        "throughput_tok_s, ...) (default: latency)")
    p.add_argument("--top", type=positive_int, default=10, metavar="N",
                   help=f"{rows} to print (default: 10)")


def add_output_options(p: argparse.ArgumentParser, *, rows: str = "the rows") -> None:
    """``--format table|json|csv`` and ``--out FILE``."""
    p.add_argument("--format", choices=FORMATS, default="table",
                   help=f"how to write {rows}: an aligned table, a JSON array of objects or "
                        "CSV, both with unit-carrying keys such as latency_ms and mem_gb "
                        "(default: table)")
    p.add_argument("--out", type=output_file, default=None, metavar="FILE",
                   help=f"write {rows} to FILE (atomically) instead of stdout")


# -- handing user input to the library ---------------------------------------------------

def resolve_model(args: argparse.Namespace) -> Any:
    """``--model``: a preset name, a catalogue id (or a model-card id of its shape), a
    HuggingFace config.json path or a folder holding one, or an id whose config.json is
    in the local Hugging Face cache. How a model was found, when not by its own name
    (``Model.note``: "resolved X as catalogue Y"), is printed as a ``note:`` line with
    the command's notes (stdout under a table, else stderr)."""
    from ..model.presets import load_model

    try:
        model = load_model(args.model)
    except (ValueError, OSError) as exc:
        raise SimcoreInputError(f"--model: {exc}") from None
    if model.note:
        from .output import note_stream

        notes = note_stream(args) if hasattr(args, "format") else sys.stderr
        print(f"note: {model.note}", file=notes)
    return model


def resolve_family(args: argparse.Namespace) -> Any:
    """``--family`` with the ``--set`` overrides (if the command has them) applied."""
    from dataclasses import replace

    from ..model.presets import get_family
    from ..model.specs import Hardware

    try:
        fam = get_family(args.family)
    except ValueError as exc:
        raise SimcoreInputError(f"--family: {exc}") from None
    overrides = dict(getattr(args, "set", None) or ())
    if not overrides:
        return fam
    try:
        hw = Hardware(**{**fam.hardware.as_dict(), **overrides})
    except ValueError as exc:
        raise SimcoreInputError(f"--set: {exc}") from None
    return replace(fam, hardware=hw)


_WORKLOAD_OPTIONS = {"mode": "--mode", "s_kv": "--s-kv", "batch": "--batch",
                     "micro_batch": "--micro-batch", "recompute": "--recompute",
                     "zero_stage": "--zero-stage", "precision": "--dtype",
                     "weight_dtype": "--dtype", "act_dtype": "--dtype", "kv_dtype": "--kv-dtype",
                     "cuda_graphs": "--cuda-graphs", "runtime": "--runtime",
                     "moe_load_imbalance": "--moe-imbalance"}


def sweep_kwargs(args: argparse.Namespace) -> dict[str, Any]:
    """The comma lists among ``--s-kv`` / ``--batch`` (and, for ``--mode train``,
    ``--micro-batch`` / ``--zero-stage`` / ``--recompute``, ``all`` expanded) as keywords of
    :func:`simcore.evaluate` (sweep dimensions); single values are in the workload.

    ``--micro-batch all`` is the powers of two dividing every ``--batch`` value; a listed
    micro-batch that divides no batch is a :class:`SimcoreInputError` naming the valid
    ones (one that divides the batch but not a layout's per-replica share masks that
    layout in the engine)."""
    from ..engine.space import RECOMPUTE_CHOICES, ZERO_STAGES

    out = {k: v for k in ("s_kv", "batch") if isinstance(v := getattr(args, k), list)}
    if getattr(args, "mode", None) != "train":
        return out
    batches = args.batch if isinstance(args.batch, list) else [args.batch]
    common = math.gcd(*batches)
    divisors = [d for d in range(1, common + 1) if common % d == 0]
    for field, opt in TRAIN_OPTIONS.items():
        v = getattr(args, field, None)
        if v == "all":
            v = {"micro_batch": [d for d in divisors if d & (d - 1) == 0],
                 "zero_stage": list(ZERO_STAGES), "recompute": list(RECOMPUTE_CHOICES)}[field]
        if field == "micro_batch" and v is not None:
            bad = [m for m in (v if isinstance(v, list) else [v]) if common % m]
            if bad:
                shown = ", ".join(map(str, divisors[:12])) + (", ..." if len(divisors) > 12
                                                              else "")
                short = ", ".join(f"batch={b}" for b in batches if any(b % m for m in bad))
                raise SimcoreInputError(
                    f"{opt} {','.join(map(str, bad))}: does not divide {short} (a global "
                    f"batch is a multiple of micro-batch x DP); pass a divisor of every "
                    f"--batch ({common}): {shown}, or all")
        if isinstance(v, list):
            out[field] = v
    return out


def _first(value: int | list[int]) -> int:
    return value[0] if isinstance(value, list) else value


def _or(names: Any) -> str:
    """``["a", "b", "c"]`` -> ``"a, b or c"``."""
    names = list(names)
    return " or ".join(filter(None, [", ".join(names[:-1]), names[-1]]))


def cuda_graphs_flag(args: argparse.Namespace) -> bool:
    """Whether the steps replay CUDA graphs: decode does unless ``--eager``; prefill and
    training never do. ``--eager`` or ``--cuda-graphs`` outside ``--mode decode`` is a
    :class:`SimcoreInputError` (neither means anything there)."""
    from ..studies.assumptions import decode_graphs

    eager = bool(getattr(args, "eager", False))
    for flag, given in (("--cuda-graphs", getattr(args, "cuda_graphs", False)),
                        ("--eager", eager)):
        if given and args.mode != "decode":
            raise SimcoreInputError(f"{flag}: only decode steps replay CUDA graphs ({args.mode} "
                                    f"steps launch every kernel from the host); drop it for "
                                    f"--mode {args.mode}")
    return decode_graphs(args.mode, eager=eager)


def resolve_runtime(args: argparse.Namespace) -> str:
    """``--runtime``: a known runtime's name ("" when not given); an unknown one is a
    :class:`SimcoreInputError` of one line naming the closest and every known runtime."""
    from ..model.runtime import get_runtime

    name = getattr(args, "runtime", None)
    if name is None:
        return ""
    try:
        return get_runtime(name).name
    except ValueError as exc:
        raise SimcoreInputError(f"--runtime: {exc}") from None


def runtime_kwargs(args: argparse.Namespace) -> dict[str, Any]:
    """``--runtime`` / ``--eager`` / ``--cuda-graphs`` as Workload keywords. Without
    ``--runtime``: decode replays CUDA graphs unless ``--eager`` (the CLI's default); with
    it, the runtime's profile decides and ``--eager`` / ``--cuda-graphs`` override it."""
    graphs = cuda_graphs_flag(args)  # refuses the flags outside decode
    name = resolve_runtime(args)
    if not name:
        return {"cuda_graphs": True} if graphs else {}
    kw: dict[str, Any] = {"runtime": name}
    if getattr(args, "eager", False):
        kw["cuda_graphs"] = False
    elif getattr(args, "cuda_graphs", False):
        kw["cuda_graphs"] = True
    return kw


def _dtype_kwargs(args: argparse.Namespace) -> dict[str, Any]:
    """``--dtype`` / ``--kv-dtype`` / ``--runtime`` / ``--cuda-graphs`` as
    :class:`~simcore.model.specs.Workload` fields."""
    dtype, kv = getattr(args, "dtype", None), getattr(args, "kv_dtype", None)
    stack = runtime_kwargs(args)
    if args.mode == "train":
        if kv:
            raise SimcoreInputError(
                f"--kv-dtype {kv}: --mode train keeps no KV cache; drop --kv-dtype (--dtype "
                f"sets the training precision: {_or(TRAIN_PRECISIONS)})")
        if dtype and dtype not in TRAIN_PRECISIONS:
            raise SimcoreInputError(
                f"--dtype {dtype}: --mode train takes {_or(TRAIN_PRECISIONS)} "
                f"({dtype} is an inference dtype)")
        return {**stack, **({"precision": dtype} if dtype else {})}
    if dtype and dtype not in DTYPES:
        raise SimcoreInputError(
            f"--dtype {dtype}: --mode {args.mode} takes {_or(DTYPES)} ({dtype} is a "
            "training precision); leave --dtype out for the model's own")
    kw: dict[str, Any] = ({"weight_dtype": dtype, "act_dtype": "" if dtype == "int4" else dtype}
                          if dtype else {})
    kw.update(stack)
    return {**kw, "kv_dtype": kv} if kv else kw


def _check_rate(wl: Any, family: Any) -> None:
    """``--dtype fp8`` / ``int8`` / ``fp4`` / ``mxfp4`` needs the family's FP8 / INT8 / FP4
    matmul rate (what the kernels' ``layout_coeffs`` requires); 4-bit weights alone stay
    valid anywhere (``--dtype int4``: weight-only, dequantised)."""
    from ..hardware.specs import RATE_FIELDS
    from ..model.runtime import check_family

    try:
        check_family(wl, family)
    except ValueError as exc:
        raise SimcoreInputError(f"--runtime {wl.runtime} --dtype: {exc}") from None
    need = wl.precision if wl.mode == "train" else wl.act_dtype
    if need not in (("fp8",) if wl.mode == "train" else RATE_FIELDS):
        return
    rate = RATE_FIELDS[need]
    if getattr(family.topology, rate) > 0:
        return
    fams = [n for n, f in HARDWARE_FAMILIES.items() if getattr(f.topology, rate) > 0]
    if wl.mode == "train":
        others = [d for d in TRAIN_PRECISIONS if d != need]
    else:
        others = [d for d in DTYPES if family.topology.matmul_ratio(d) > 0]
    four_bit = (" (int4: 4-bit weights run weight-only, dequantised to 16-bit, as MXFP4 "
                "weights run on Hopper)" if rate == "fp4_ratio" and "int4" in others else "")
    raise SimcoreInputError(
        f"--dtype {need}: {family.name} has no {rate.removesuffix('_ratio').upper()} matmul "
        f"rate (Topology.{rate} = 0); pass --family {_or(fams)}, or --dtype {_or(others)}"
        f"{four_bit}")


def make_workload(args: argparse.Namespace, family: Any = None) -> Any:
    """The :class:`~simcore.model.specs.Workload` of ``--mode``, ``--s-kv``, ``--batch``, ...
    (the first value of a comma list; :func:`sweep_kwargs` gives the lists), with
    ``--dtype`` / ``--kv-dtype`` where the command has them; with ``family``, also checks
    that it has the matmul rate of ``--dtype``."""
    from ..model.specs import Workload

    kw: dict[str, Any] = {"batch": _first(args.batch), "s_kv": _first(args.s_kv)}
    given = [opt for field, opt in TRAIN_OPTIONS.items()
             if getattr(args, field, None) is not None]
    if args.mode == "train":
        # a list or "all" is a sweep (sweep_kwargs): the workload keeps the default
        kw.update({field: v if (v := getattr(args, field, None)) is not None
                   and not isinstance(v, list) and v != "all" else default
                   for field, default in TRAIN_DEFAULTS.items()})
    elif given:
        raise SimcoreInputError(f"{', '.join(given)}: training options; pass --mode train or "
                                f"drop {'them' if len(given) > 1 else 'it'} (--mode {args.mode})")
    kw.update(_dtype_kwargs(args))
    if getattr(args, "moe_imbalance", None) is not None:
        kw["moe_load_imbalance"] = args.moe_imbalance
    try:
        wl = Workload(args.mode, **kw)
    except ValueError as exc:
        named = [opt for field, opt in _WORKLOAD_OPTIONS.items()
                 if re.search(rf"\b{field}\b", str(exc))]
        raise SimcoreInputError(f"{'/'.join(dict.fromkeys(named)) or '--mode'}: {exc}") from None
    if family is not None:
        _check_rate(wl, family)
    return wl
