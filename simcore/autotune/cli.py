"""``simcore tune`` and ``simcore rank`` (argparse), wired into ``simcore.cli``.

``simcore tune`` takes DeepSpeed's own command line (``simcore tune --autotuning
tune|run --num_gpus 4 [--num_nodes 2 --hostfile H] train.py --deepspeed_config ds.json
...``): with ``--model`` the experiments are simulated, otherwise each one is launched
through DeepSpeed's launcher (the command runner); ``run`` launches the winner after.

Use :func:`add_tune_parsers` on the ``simcore`` sub-parsers; each sub-command sets
``func`` to its handler, which takes the parsed namespace and returns an exit code:
0 on success (with ``--autotuning run``: the training's exit code), 1 when no trial
succeeded (or writing failed), 2 on bad input (after printing one line to stderr).
The handlers only parse and call library functions; nothing here calls ``exit()``.

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
from pathlib import Path
from typing import Any

from ..engine.metrics import get_metric
from ..model.presets import HARDWARE_FAMILIES, PRESETS, get_family, load_model
from ..model.runtime import runtime_help
from ..model.specs import Model
from . import deepspeed as ds
from .config import (
    TUNER_TYPES,
    AutotuneConfig,
    AutotuneConfigError,
    UnknownAutotuningKeyWarning,
    UnusedAutotuningKeyWarning,
    load_ds_config,
    parse_stages,
)
from .results import NoResultError, TuneResult
from .runners import CommandRunner, MalformedExperimentWarning, SimulatorRunner
from .training import (
    DEFAULT_PRECISION,
    PRECISIONS,
    TUNE_DEFAULTS,
    settle_precision,
    tune_runtime,
    tune_runtimes,
)
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
    >>> p.parse_args(["rank", "runs/"]).metric is None
    True
    >>> a = p.parse_args(["tune", "--autotuning", "run", "--num_gpus", "4", "train.py",
    ...                   "--deepspeed_config", "ds.json"])
    >>> a.autotuning, a.num_gpus, a.user_script, a.user_args
    ('run', 4, 'train.py', ['--deepspeed_config', 'ds.json'])
    """
    t = subparsers.add_parser(
        "tune",
        help="DeepSpeed autotuning: simulated (--model) or real launches (a training script)",
        description=(
            "Tune ZeRO stage and micro-batch size and write DeepSpeed's ds_config_optimal.json, "
            "cmd_optimal.txt and summary.txt. Takes DeepSpeed's launcher command line: "
            "simcore tune --autotuning tune|run --num_gpus 4 train.py --deepspeed_config "
            "ds.json. With --model the experiments are simulated; without it each one is "
            "launched through DeepSpeed's launcher, in DeepSpeed's folder layout. Metrics as "
            "DeepSpeed's metrics.json: latency (lower is better), throughput, FLOPS."
        ),
    )
    t.add_argument("--model", metavar="NAME|CONFIG_JSON",
                   help=f"simulate: a preset ({', '.join(PRESETS)}) or a HuggingFace config.json")
    t.add_argument("--gpus", default=str(TUNE_DEFAULTS.n_gpus), metavar="N",
                   help=f"simulate: total GPUs (default {TUNE_DEFAULTS.n_gpus}; "
                        "--num_gpus/--num_nodes win)")
    t.add_argument("--gpu-mem-gb", metavar="GB", help="simulate: HBM per GPU (default: the family's)")
    t.add_argument("--metric", metavar="METRIC",
                   help="latency, throughput or FLOPS (default: the config's, else throughput)")
    t.add_argument("--family", default=TUNE_DEFAULTS.family, metavar="FAMILY",
                   help=f"simulate: hardware family: {', '.join(HARDWARE_FAMILIES)} "
                        f"(default {TUNE_DEFAULTS.family})")
    t.add_argument("--stages", metavar="all|S|S,S",
                   help="ZeRO stages to try (default: the config's, else 0 as in DeepSpeed)")
    t.add_argument("--stage-early-stop", choices=("on", "off"), default=None,
                   help='with "stage": "all": stop at the first ZeRO stage that does not '
                        "improve, as DeepSpeed does (default: on for real runs, off when "
                        "simulated, where every stage costs nothing)")
    t.add_argument("--s-kv", "--seq-len", dest="seq_len", default=str(TUNE_DEFAULTS.seq_len),
                   metavar="TOKENS",
                   help="simulate: tokens per sample, the sequence length (default "
                        f"{TUNE_DEFAULTS.seq_len}; --seq-len is the old spelling)")
    t.add_argument("--activation-checkpointing", action="store_true",
                   help="simulate: the model recomputes activations (full recomputation)")
    t.add_argument("--runtime", default=None, metavar="NAME",
                   help=runtime_help(train=True, names=tune_runtimes(),
                                     default=TUNE_DEFAULTS.runtime, flags=False))
    t.add_argument("--precision", metavar="|".join(PRECISIONS),
                   help=f"training precision (default: the config's, else {DEFAULT_PRECISION})")
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
                   help="your DeepSpeed config, when no training script names it")
    t.add_argument("--script", default="train.py",
                   help="simulate: training script for cmd_optimal.txt (default train.py)")
    t.add_argument("--seed", default="0", help="seed of the random/model-based tuners")
    t.add_argument("--exp-timeout", default="3600", metavar="S",
                   help="real runs: seconds before an experiment is killed (default 3600)")
    t.add_argument("--out", metavar="DIR",
                   help="write the results here (default: autotuning.results_dir with a "
                        "training script, else nowhere)")
    ds.add_launcher_arguments(t)
    t.set_defaults(func=tune_command)

    r = subparsers.add_parser(
        "rank",
        help="re-rank an existing DeepSpeed autotuning folder with the correct direction",
        description=(
            "Read DIR/autotuning_exps and DIR/autotuning_results (DeepSpeed's layout), pick "
            "the best successful experiment for METRIC and write ds_config_optimal.json, "
            "cmd_optimal.txt and summary.txt."
        ),
    )
    r.add_argument("dir", metavar="DIR", help="the folder DeepSpeed's autotuner ran in")
    r.add_argument("--metric", default=None,
                   help="latency, throughput or FLOPS (default: the folder's, else throughput)")
    r.add_argument("--config", metavar="DS_CONFIG_JSON",
                   help="your original DeepSpeed config (default: the one DeepSpeed recorded "
                        "in profile_model_info/)")
    r.add_argument("--out", metavar="DIR", help="where to write (default: DIR/autotuning_results)")
    r.set_defaults(func=rank_command)


def _load_config(path: str) -> dict[str, Any]:
    try:
        cfg = load_ds_config(path)
    except (FileNotFoundError, AutotuneConfigError) as exc:
        raise _BadOption(f"config: {exc}") from None
    if "autotuning" not in cfg:
        raise _BadOption(f"{path!r} has no autotuning section; add "
                         '"autotuning": {"enabled": true} (DeepSpeed\'s autotuner reads it)')
    return cfg


def _apply_overrides(cfg: dict[str, Any], args: argparse.Namespace,
                     user_args: Sequence[str] = ()) -> str:
    """Apply the command line's overrides to ``cfg`` (in place); return the precision
    note (:func:`~simcore.autotune.training.settle_precision`: which and why)."""
    at = cfg.get("autotuning")
    at = dict(at) if isinstance(at, dict) else ({} if at is None else at)
    if not isinstance(at, dict):
        raise _BadOption("config: autotuning must be a JSON object")
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
    if args.stages is not None:
        zero = cfg.get("zero_optimization")
        cfg["zero_optimization"] = {**(zero if isinstance(zero, dict) else {}),
                                    "stage": _stages(args.stages)}
    precision = args.precision
    if precision is not None and precision not in PRECISIONS:
        raise _BadOption(f"--precision {precision!r} is unknown; pass one of "
                         f"{', '.join(PRECISIONS)}")
    settled, note = settle_precision(cfg, precision, user_args=user_args,
                                     asked_as="--precision")
    cfg.clear()
    cfg.update(settled)
    return note


def _tune_setup(args: argparse.Namespace) -> tuple[Autotuner, str | None, str]:
    """The tuner the command line asks for, the folder to write to and the precision
    note (which precision, and why)."""
    spec = ds.launch_spec_from_namespace(args)
    script = spec.user_script
    simulate = args.model is not None
    if script is not None and not (spec.option("--module") or spec.option("--no_python")) \
            and not os.path.isfile(script):
        raise _BadOption(f"training script {script!r} does not exist; pass the path of your "
                         "training script (after the launcher options)")
    path = spec.config_path
    if path is not None and args.config is not None and path != args.config:
        raise _BadOption(f"two configs: --config {args.config!r} and {path!r} in the script's "
                         "arguments; pass one")
    path = path or args.config
    if script is not None and path is None:
        raise _BadOption("no DeepSpeed config in the training script's arguments; pass "
                         "--deepspeed_config ds.json (or --deepspeed ds.json for Hugging Face "
                         "scripts) after the script")
    if not simulate and args.runtime is not None:
        raise _BadOption(f"--runtime {args.runtime}: the stack prices simulated experiments "
                         "(--model); real launches run what the training script runs: drop "
                         "--runtime or pass --model")
    if not simulate and script is None:
        raise _BadOption(f"pass --model (a preset: {', '.join(PRESETS)}, or a HuggingFace "
                         "config.json) to simulate, or a training script with its "
                         "--deepspeed_config to run real experiments")
    cfg = _load_config(path) if path else {}
    precision = _apply_overrides(cfg, args, spec.user_args)
    seed = args.seed
    try:
        seed = int(seed)
    except ValueError:
        raise _BadOption(f"--seed must be an integer, got {args.seed!r}") from None
    early = {"on": True, "off": False, None: None}[args.stage_early_stop]
    if args.autotuning == "run" and script is None:
        raise _BadOption("--autotuning run launches your training script after tuning; pass "
                         "it (after the launcher options) with its --deepspeed_config")
    resources = (None if simulate and not ds.names_resources(spec)
                 else ds.load_resources(spec))
    checked = AutotuneConfig.from_ds_config(cfg, user_args=spec.user_args)
    out = args.out or (checked.results_dir if script is not None else None)
    if not simulate or (out is not None and args.out is None):  # the folders we write or clear
        ds.check_folders(checked.results_dir, None if simulate else checked.exps_dir)
    if simulate:
        runner, cmd = _simulator(args, resources), None
        if script is None:
            per_node = runner.family.topology.pes_per_cube
            cmd = ["deepspeed", *ds.gpu_args(runner.n_gpus, per_node=per_node), args.script,
                   "--deepspeed_config", "{ds_config}"]
        tuner = Autotuner(cfg, runner, seed=seed, command=cmd,
                          launch=spec if script is not None else None, resources=resources,
                          stage_early_stop=early)
        return tuner, out, precision
    assert resources is not None
    try:
        command = CommandRunner.from_ds_config(
            (), config=cfg, launch=spec, resources=resources,
            timeout_s=_pos_float("--exp-timeout", args.exp_timeout) or 3600.0)
    except FileNotFoundError as exc:
        raise _BadOption(f"{exc} (DeepSpeed's launcher runs each experiment)") from None
    tuner = Autotuner(cfg, command, seed=seed, stage_early_stop=early)
    if checked.overwrite:  # DeepSpeed's default: a fresh run (folders checked above)
        ds.clear_folders(checked.results_dir, checked.exps_dir)
    return tuner, out, precision


def _simulator(args: argparse.Namespace, resources: ds.Resources | None) -> SimulatorRunner:
    model = _model(args.model)
    gpus = resources.n_gpus if resources is not None else (_pos_int("--gpus", args.gpus)
                                                           or TUNE_DEFAULTS.n_gpus)
    mem = _pos_float("--gpu-mem-gb", args.gpu_mem_gb)
    seq = _pos_int("--s-kv", args.seq_len) or TUNE_DEFAULTS.seq_len
    try:
        family = get_family(args.family)
    except ValueError as exc:
        raise _BadOption(f"--family: {exc}") from None
    try:  # an unknown name or a stack the tuner cannot price: one line
        runtime = tune_runtime(args.runtime if args.runtime is not None
                               else TUNE_DEFAULTS.runtime, args.precision)
    except ValueError as exc:
        raise _BadOption(f"--runtime: {exc}") from None
    try:
        return SimulatorRunner(model, family=family, n_gpus=gpus, gpu_mem_gb=mem, seq_len=seq,
                               activation_checkpointing=args.activation_checkpointing,
                               runtime=runtime)
    except ValueError as exc:
        raise _BadOption(str(exc)) from None


def _report(caught: list[warnings.WarningMessage]) -> None:
    mine = (MalformedExperimentWarning, UnknownAutotuningKeyWarning, UnusedAutotuningKeyWarning)
    for w in caught:
        if issubclass(w.category, mine):
            print(f"warning: {w.message}", file=sys.stderr)
        else:
            warnings.warn_explicit(w.message, w.category, w.filename, w.lineno)


def _write(prog: str, result: TuneResult, out: str) -> dict[str, Path] | None:
    try:
        paths = result.write(out)
    except (OSError, NoResultError) as exc:
        print(f"simcore {prog}: error: cannot write to {out!r}: {exc}", file=sys.stderr)
        return None
    print(f"wrote {paths['ds_config']}, {paths['cmd']} and {paths['summary']}")
    return paths


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
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", UnknownAutotuningKeyWarning)
        warnings.simplefilter("always", UnusedAutotuningKeyWarning)
        try:
            tuner, out, precision = _tune_setup(args)
        except (_BadOption, AutotuneConfigError, ds.LauncherArgsError) as exc:
            return _err("tune", str(exc))
    _report(caught)
    if isinstance(tuner.runner, SimulatorRunner) and tuner.runner.model.note:
        print(f"note: {tuner.runner.model.note}")
    print(tuner.describe(precision))
    result = tuner.tune()
    print(result.summary())
    if not result.found:
        return 1
    if out is None:
        return 0
    paths = _write("tune", result, out)
    if paths is None:
        return 1
    if args.autotuning == "run":
        argv = result.optimal_argv(paths["ds_config"].resolve())
        print(f"running the optimal configuration: {' '.join(argv)}", flush=True)
        try:
            return result.launch_optimal(paths["ds_config"].resolve())
        except OSError as exc:
            print(f"simcore tune: error: cannot launch {argv[0]!r}: {exc}", file=sys.stderr)
            return 1
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
    if args.metric is not None:
        try:
            get_metric(args.metric)
        except ValueError as exc:
            return _err("rank", f"--metric: {exc}")
    if not os.path.isdir(args.dir):
        return _err("rank", f"no folder {args.dir!r}; pass the folder DeepSpeed's autotuner "
                            "ran in (it holds autotuning_exps/ and autotuning_results/)")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", MalformedExperimentWarning)
        try:
            user = load_ds_config(args.config) if args.config else None
            result = rank(args.dir, metric=args.metric, user_config=user)
        except (FileNotFoundError, AutotuneConfigError) as exc:
            return _err("rank", str(exc))
    _report(caught)
    print(result.summary())
    if not result.found:
        return 1
    root = Path(args.dir)
    out = args.out if args.out is not None else os.fspath(
        root / ds.RESULTS_DIR if (root / ds.RESULTS_DIR).is_dir() else root)
    if args.out is None and result.overwrite is False and (Path(out) / ds.OPTIMAL_CONFIG).exists():
        return _err("rank", f"{out!r} already holds {ds.OPTIMAL_CONFIG} and the folder's "
                            "autotuning.overwrite is false; pass --out DIR")
    return 0 if _write("rank", result, out) is not None else 1


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

