"""``simcore tune`` and ``simcore rank`` (argparse), wired into ``simcore.cli``.

Use :func:`add_tune_parsers` on the ``simcore`` sub-parsers; each sub-command sets
``func`` to its handler, which takes the parsed namespace and returns an exit code:
0 on success, 1 when no trial succeeded (or writing failed), 2 on bad options (after
printing one line to stderr). Nothing here calls ``exit()``.

Examples
--------
>>> import argparse
>>> parser = argparse.ArgumentParser(prog="simcore")
>>> add_tune_parsers(parser.add_subparsers(dest="command"))
>>> args = parser.parse_args(["tune", "--model", "Llama 2 7B", "--metric", "speed"])
>>> args.func(args)
2
"""

from __future__ import annotations

import argparse
import os
import sys
import warnings
from collections.abc import Sequence
from typing import Any

from ..metrics import get_metric
from ..presets import HARDWARE_FAMILIES, PRESETS, get_family, load_model
from ..specs import Model
from .config import TUNER_TYPES, AutotuneConfigError, load_ds_config, parse_stages
from .results import NoResultError, launcher_gpu_args
from .runners import MalformedExperimentWarning, SimulatorRunner
from .training import PRECISIONS
from .tuner import Autotuner, rank

__all__ = ["add_tune_parsers", "main", "rank_command", "tune_command"]


class _BadOption(ValueError):
    pass


def _err(prog: str, msg: str) -> int:
    print(f"simcore {prog}: error: {msg}", file=sys.stderr)
    return 2


def _pos_int(name: str, text: str | None) -> int | None:
    if text is None:
        return None
    try:
        v = int(text)
    except (TypeError, ValueError):
        raise _BadOption(f"{name} must be a positive integer, got {text!r}") from None
    if v < 1:
        raise _BadOption(f"{name} must be a positive integer, got {text!r}")
    return v


def _pos_float(name: str, text: str | None) -> float | None:
    if text is None:
        return None
    try:
        v = float(text)
    except (TypeError, ValueError):
        raise _BadOption(f"{name} must be a number > 0, got {text!r}") from None
    if not v > 0 or v == float("inf"):
        raise _BadOption(f"{name} must be a number > 0, got {text!r}")
    return v


def _stages(text: str) -> Any:
    t = text.strip()
    if t.lower() == "all":
        return "all"
    try:
        vals = [int(x) for x in t.split(",") if x.strip()]
    except ValueError:
        raise _BadOption(
            f"--stages {text!r} is not a stage list; pass all, one stage (0-3) or a "
            "comma list such as 1,2"
        ) from None
    try:
        parse_stages(vals)
    except AutotuneConfigError:
        raise _BadOption(
            f"--stages {text!r} holds no valid ZeRO stage; pass all, one stage (0-3) or a "
            "comma list such as 1,2"
        ) from None
    return vals[0] if len(vals) == 1 else vals


def _model(text: str | None) -> Model:
    if not text:
        raise _BadOption(
            f"--model is required; pass a preset ({', '.join(PRESETS)}) or a HuggingFace "
            "config.json path"
        )
    try:
        return load_model(text or "")
    except (FileNotFoundError, ValueError) as exc:
        raise _BadOption(f"--model: {exc}") from None


def add_tune_parsers(subparsers: Any) -> None:
    """Add ``tune`` and ``rank`` to an argparse sub-parsers object.

    Each sets ``func`` (:func:`tune_command`, :func:`rank_command`): call
    ``args.func(args)`` and use its return value as the exit code.

    Examples
    --------
    >>> import argparse
    >>> p = argparse.ArgumentParser(prog="simcore")
    >>> add_tune_parsers(p.add_subparsers(dest="command"))
    >>> p.parse_args(["rank", "runs/"]).metric
    'throughput'
    """
    t = subparsers.add_parser(
        "tune",
        help="simulate DeepSpeed autotuning (ZeRO stage x micro-batch) without GPUs",
        description=(
            "Tune ZeRO stage and micro-batch size on the simcore training model and write "
            "the optimal DeepSpeed config. Metrics as DeepSpeed's metrics.json: latency "
            "(us per step, lower is better), throughput (samples/s), FLOPS (FLOPS_per_gpu)."
        ),
    )
    t.add_argument("--model", metavar="NAME|CONFIG_JSON",
                   help=f"preset ({', '.join(PRESETS)}) or a HuggingFace config.json path")
    t.add_argument("--gpus", default="8", metavar="N", help="total GPUs (default 8)")
    t.add_argument("--gpu-mem-gb", metavar="GB", help="HBM per GPU (default: the family's)")
    t.add_argument("--metric", metavar="METRIC",
                   help="latency, throughput or FLOPS (default: the config's, else throughput)")
    t.add_argument("--family", default="A100-80G", metavar="FAMILY",
                   help=f"hardware family: {', '.join(HARDWARE_FAMILIES)} (default A100-80G)")
    t.add_argument("--stages", metavar="all|S|S,S",
                   help="ZeRO stages to try (default: the config's, else all)")
    t.add_argument("--seq-len", default="2048", metavar="TOKENS",
                   help="tokens per sample (default 2048)")
    t.add_argument("--activation-checkpointing", action="store_true",
                   help="the model recomputes activations (full recomputation)")
    t.add_argument("--precision", metavar="|".join(PRECISIONS),
                   help="training precision (default: the config's, else fp16)")
    t.add_argument("--tuner", metavar="gridsearch|random|model_based",
                   help="search strategy (default: the config's, else gridsearch)")
    t.add_argument("--full", action="store_true",
                   help="also tune ZeRO knobs (bucket sizes, overlap_comm), not just micro-batch")
    t.add_argument("--min-micro-batch", metavar="N",
                   help="smallest micro-batch per GPU to try (default 1)")
    t.add_argument("--max-micro-batch", metavar="N",
                   help="largest micro-batch per GPU to try (default 1024)")
    t.add_argument("--max-train-batch-size", metavar="N",
                   help="cap on the global batch (micro-batch x accumulation x GPUs)")
    t.add_argument("--config", metavar="DS_CONFIG_JSON",
                   help="your DeepSpeed config (its autotuning and zero_optimization are used)")
    t.add_argument("--script", default="train.py",
                   help="training script for cmd_optimal.txt (default train.py)")
    t.add_argument("--seed", default="0", help="seed of the random/model-based tuners")
    t.add_argument("--out", metavar="DIR",
                   help="write ds_config_optimal.json and cmd_optimal.txt here")
    t.set_defaults(func=tune_command)

    r = subparsers.add_parser(
        "rank",
        help="re-rank an existing DeepSpeed autotuning folder with the correct direction",
        description=(
            "Read DIR/autotuning_exps and DIR/autotuning_results (DeepSpeed's layout), pick "
            "the best successful experiment for METRIC and write ds_config_optimal.json and "
            "cmd_optimal.txt."
        ),
    )
    r.add_argument("dir", metavar="DIR", help="the folder DeepSpeed's autotuner ran in")
    r.add_argument("--metric", default="throughput",
                   help="latency, throughput or FLOPS (default throughput)")
    r.add_argument("--out", metavar="DIR", help="where to write (default: DIR)")
    r.set_defaults(func=rank_command)


def _tune_setup(args: argparse.Namespace) -> tuple[dict[str, Any], SimulatorRunner, list[str]]:
    model = _model(args.model)
    gpus = _pos_int("--gpus", args.gpus) or 8
    mem = _pos_float("--gpu-mem-gb", args.gpu_mem_gb)
    seq = _pos_int("--seq-len", args.seq_len) or 2048
    try:
        family = get_family(args.family)
    except ValueError as exc:
        raise _BadOption(f"--family: {exc}") from None
    try:
        int(args.seed)
    except ValueError:
        raise _BadOption(f"--seed must be an integer, got {args.seed!r}") from None
    if args.precision is not None and args.precision not in PRECISIONS:
        raise _BadOption(f"--precision {args.precision!r} is unknown; pass one of "
                         f"{', '.join(PRECISIONS)}")
    try:
        cfg = load_ds_config(args.config) if args.config else {}
    except (FileNotFoundError, AutotuneConfigError) as exc:
        raise _BadOption(f"--config: {exc}") from None
    at = cfg.get("autotuning")
    at = dict(at) if isinstance(at, dict) else ({} if at is None else at)
    if not isinstance(at, dict):
        raise _BadOption("--config: autotuning must be a JSON object")
    if args.metric is not None:
        try:
            get_metric(args.metric)
        except ValueError as exc:
            raise _BadOption(f"--metric: {exc}") from None
        at["metric"] = args.metric
    if args.tuner is not None:
        if args.tuner.lower() not in TUNER_TYPES:
            raise _BadOption(f"--tuner {args.tuner!r} is unknown; pass one of "
                             f"{', '.join(sorted(set(TUNER_TYPES.values())))}")
        at["tuner_type"] = args.tuner
    if args.full:
        at["fast"] = False
    for flag, key in (("min_micro_batch", "min_train_micro_batch_size_per_gpu"),
                      ("max_micro_batch", "max_train_micro_batch_size_per_gpu"),
                      ("max_train_batch_size", "max_train_batch_size")):
        v = _pos_int("--" + flag.replace("_", "-"), getattr(args, flag))
        if v is not None:
            at[key] = v
    cfg["autotuning"] = at
    zero = cfg.get("zero_optimization")
    zero = dict(zero) if isinstance(zero, dict) else {}
    if args.stages is not None:
        zero["stage"] = _stages(args.stages)
    cfg["zero_optimization"] = zero
    precision = args.precision
    if precision is None and not any(
        isinstance(cfg.get(k), dict) and cfg[k].get("enabled") is True for k in ("fp16", "bf16")
    ):
        precision = "fp16"
    if precision is not None:
        for k in ("fp16", "bf16"):
            sect = cfg.get(k) if isinstance(cfg.get(k), dict) else None
            if k == precision:
                cfg[k] = {**(sect or {}), "enabled": True}
            elif sect is not None:
                cfg[k] = {**sect, "enabled": False}
    try:
        runner = SimulatorRunner(model, family=family, n_gpus=gpus, gpu_mem_gb=mem,
                                 seq_len=seq,
                                 activation_checkpointing=args.activation_checkpointing)
    except ValueError as exc:
        raise _BadOption(str(exc)) from None
    cmd = ["deepspeed", *launcher_gpu_args(gpus, per_node=family.topology.pes_per_cube),
           args.script, "--deepspeed_config", "{ds_config}"]
    return cfg, runner, cmd


def tune_command(args: argparse.Namespace) -> int:
    """Handler of ``simcore tune``; returns the exit code.

    Examples
    --------
    >>> import argparse
    >>> p = argparse.ArgumentParser(prog="simcore")
    >>> add_tune_parsers(p.add_subparsers(dest="command"))
    >>> args = p.parse_args(["tune", "--model", "Llama 2 7B", "--gpus", "0"])
    >>> tune_command(args)
    2
    """
    try:
        cfg, runner, cmd = _tune_setup(args)
        tuner = Autotuner(cfg, runner, seed=int(args.seed), command=cmd)
    except (_BadOption, AutotuneConfigError) as exc:
        return _err("tune", str(exc))
    r = runner
    prec = tuner.config.precision
    print(f"{r.model.name} ({r.model.n_params / 1e9:.2f}B params) on {r.n_gpus}x "
          f"{r.family.name} ({r.hardware.pe_hbm_gb:g} GB), seq {r.seq_len}, {prec}, "
          f"activation checkpointing {'on' if r.activation_checkpointing else 'off'}, "
          f"tuner {tuner.config.tuner_type} ({'fast' if tuner.config.fast else 'full'})")
    result = tuner.tune()
    print(result.summary())
    if not result.found:
        return 1
    if args.out:
        try:
            paths = result.write(args.out)
        except (OSError, NoResultError) as exc:
            print(f"simcore tune: error: cannot write to {args.out!r}: {exc}", file=sys.stderr)
            return 1
        print(f"wrote {paths['ds_config']} and {paths['cmd']}")
    return 0


def rank_command(args: argparse.Namespace) -> int:
    """Handler of ``simcore rank``; returns the exit code.

    Examples
    --------
    >>> import argparse
    >>> p = argparse.ArgumentParser(prog="simcore")
    >>> add_tune_parsers(p.add_subparsers(dest="command"))
    >>> rank_command(p.parse_args(["rank", "/no/such/folder"]))
    2
    """
    try:
        get_metric(args.metric)
    except ValueError as exc:
        return _err("rank", f"--metric: {exc}")
    if not os.path.isdir(args.dir):
        return _err("rank", f"no folder {args.dir!r}; pass the folder DeepSpeed's autotuner "
                            "ran in (it holds autotuning_exps/ and autotuning_results/)")
    out = args.out if args.out is not None else args.dir
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", MalformedExperimentWarning)
        try:
            result = rank(args.dir, metric=args.metric)
        except FileNotFoundError as exc:
            return _err("rank", str(exc))
    for w in caught:
        if issubclass(w.category, MalformedExperimentWarning):
            print(f"warning: {w.message}", file=sys.stderr)
        else:
            warnings.warn_explicit(w.message, w.category, w.filename, w.lineno)
    print(result.summary())
    if not result.found:
        return 1
    try:
        paths = result.write(out)
    except OSError as exc:
        print(f"simcore rank: error: cannot write to {out!r}: {exc}", file=sys.stderr)
        return 1
    print(f"wrote {paths['ds_config']} and {paths['cmd']}")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """A stand-alone ``simcore``-like entry with just ``tune`` and ``rank`` (for tests);
    argparse's own usage errors give 2.

    Examples
    --------
    >>> main(["rank", "/no/such/folder"])
    2
    """
    parser = argparse.ArgumentParser(prog="simcore")
    add_tune_parsers(parser.add_subparsers(dest="command", required=True))
    try:
        args = parser.parse_args(list(argv) if argv is not None else None)
    except SystemExit as exc:  # argparse reports usage errors by raising SystemExit
        return exc.code if isinstance(exc.code, int) else 2
    return int(args.func(args))

