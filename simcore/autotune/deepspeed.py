"""Everything DeepSpeed-specific, declared once: folder layout, config keys, metrics keys,
the launcher's grammar, the experiment command, the optimal config and command, and
DeepSpeed's ZeRO model-state memory formulas.

The rest of :mod:`simcore.autotune` is DeepSpeed-agnostic and imports these names; this
module imports nothing from the package, so it can be read (and moved) on its own.

Facts follow DeepSpeed 0.19 (``deepspeed/autotuning``, ``deepspeed/launcher/runner.py``,
``deepspeed/runtime/zero``); where simcore deliberately differs, the docstring says so.

Examples
--------
>>> spec = parse_launcher_args(["--autotuning", "run", "--num_gpus", "4", "train.py",
...                             "--deepspeed", "ds.json", "--lr", "1e-4"])
>>> spec.autotuning, spec.num_gpus, spec.user_script, spec.config_path, spec.hf_style
('run', 4, 'train.py', 'ds.json', True)
>>> with_config(list(spec.user_args), value="best.json")
['--deepspeed', 'best.json', '--lr', '1e-4']
"""

from __future__ import annotations

import argparse
import base64
import copy
import json
import math
import os
import re
import shlex
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NoReturn

__all__ = [
    "AUTOTUNING_KEYS",
    "CMD_TXT",
    "DEFAULT_HOSTFILE",
    "DS_CONFIG_JSON",
    "EXPS_DIR",
    "EXP_JSON",
    "FOREIGN_HINT",
    "LAUNCHER_OPTIONS",
    "LaunchSpec",
    "LauncherArgsError",
    "METRICS_JSON",
    "METRIC_KEYS",
    "OPTIMAL_CMD",
    "OPTIMAL_CONFIG",
    "PROFILE_RUN",
    "RESULTS_DIR",
    "STDERR_LOG",
    "STDOUT_LOG",
    "SUMMARY_TXT",
    "StageSpec",
    "ZERO_STAGES",
    "UNUSED_AUTOTUNING_KEYS",
    "Resources",
    "add_launcher_arguments",
    "apply_arg_mappings",
    "check_folders",
    "clear_folders",
    "config_arg",
    "decode_config",
    "encode_config",
    "estimate_zero2_model_states_mem_needs",
    "estimate_zero3_model_states_mem_needs",
    "experiment_command",
    "foreign_entries",
    "gpu_args",
    "launch_spec_from_namespace",
    "load_resources",
    "log_failure",
    "metric_reading_problem",
    "names_resources",
    "optimal_ds_config",
    "parse_hostfile",
    "parse_launcher_args",
    "resolve_resources",
    "summary_txt",
    "was_interrupted",
    "with_config",
    "zero_model_states_bytes",
]

# -- folder layout ---------------------------------------------------------------------
EXPS_DIR = "autotuning_exps"  #: one ``<name>.json`` per scheduled experiment
RESULTS_DIR = "autotuning_results"  #: one folder per experiment, plus the files below
EXP_JSON = "exp.json"
DS_CONFIG_JSON = "ds_config.json"
CMD_TXT = "cmd.txt"
METRICS_JSON = "metrics.json"
STDOUT_LOG = "stdout.log"
STDERR_LOG = "stderr.log"
SUMMARY_TXT = "summary.txt"
OPTIMAL_CONFIG = "ds_config_optimal.json"
OPTIMAL_CMD = "cmd_optimal.txt"
PROFILE_RUN = "profile_model_info"  #: DeepSpeed's model-profiling experiment
MODEL_INFO_JSON = "model_info.json"
DEFAULT_HOSTFILE = "/job/hostfile"  #: the launcher's default ``--hostfile``
DEFAULT_MASTER_PORT = 29500

#: Keys DeepSpeed's engine writes to ``metrics.json`` (``latency`` per global step,
#: ``throughput`` = train_batch_size * 1e6 / latency, ``FLOPS_per_gpu``).
METRIC_KEYS = ("latency", "throughput", "FLOPS_per_gpu")


def metric_reading_problem(metric: str, value: Any) -> str | None:
    """Why ``value`` cannot be a real reading of ``metric`` (a canonical metric name), or
    None when it can.

    Every metric must be a finite number (not a bool); DeepSpeed's ``METRIC_KEYS`` are
    also positive: a step takes time, and samples and FLOPs per second are more than
    zero. A zero, negative, NaN or infinite latency, throughput or FLOPS is a broken run
    or metrics file, not a result.

    Examples
    --------
    >>> metric_reading_problem("latency", 8.0) is None
    True
    >>> metric_reading_problem("latency", 0)
    'latency 0 is not positive'
    >>> metric_reading_problem("throughput", float("inf"))
    'throughput inf is not a finite number'
    """
    try:
        if isinstance(value, bool):
            raise TypeError
        v = float(value)
    except (TypeError, ValueError):
        return f"{metric} {value!r} is not a number"
    if not math.isfinite(v):
        return f"{metric} {value!r} is not a finite number"
    if metric in METRIC_KEYS and v <= 0:
        return f"{metric} {value!r} is not positive"
    return None

# -- the ``autotuning`` section ----------------------------------------------------------
#: Every documented ``autotuning`` key with DeepSpeed's default (``enabled``: simcore
#: tunes when asked to, so it defaults to true; ``false`` is refused).
AUTOTUNING_KEYS: dict[str, Any] = {
    "enabled": True,
    "fast": True,
    "metric": "throughput",
    "tuner_type": "gridsearch",
    "tuner_num_trials": 50,
    "tuner_early_stopping": 5,
    "min_train_micro_batch_size_per_gpu": 1,
    "max_train_micro_batch_size_per_gpu": 1024,
    "min_train_batch_size": 1,
    "max_train_batch_size": None,
    "num_tuning_micro_batch_sizes": 3,
    "results_dir": RESULTS_DIR,
    "exps_dir": EXPS_DIR,
    "overwrite": True,
    "start_profile_step": 3,
    "end_profile_step": 5,
    "mp_size": 1,
    "arg_mappings": None,
    "metric_path": None,
    "model_info": None,
    "model_info_path": None,
}

#: Documented keys simcore reads but does not act on, with the reason (warned by name).
UNUSED_AUTOTUNING_KEYS: dict[str, str] = {
    "metric_path": "each experiment writes <results_dir>/<experiment>/metrics.json, as "
                   "DeepSpeed's scheduler sets it; the value given is not used",
    "model_info": "simcore runs no model-profiling experiment (the simulator knows the "
                  "model; real runs find the micro-batch limit by probing)",
    "model_info_path": "simcore runs no model-profiling experiment, so writes no model_info.json",
}

# -- ZeRO stages and the knobs full mode tunes ---------------------------------------------
_M = 1_000_000


@dataclass(frozen=True)
class StageSpec:
    """One row of the stage table: a ZeRO stage and the knobs full mode tunes for it."""

    stage: int
    partitions: str
    space: Mapping[str, tuple[Any, ...]] = field(default_factory=dict)


#: The stage table the tuner loops over once (DeepSpeed's ZeRO stages and tuning knobs).
ZERO_STAGES: tuple[StageSpec, ...] = (
    StageSpec(0, "nothing"),
    StageSpec(1, "optimizer states", {
        "reduce_bucket_size": (50 * _M, 500 * _M),
        "allgather_bucket_size": (50 * _M, 500 * _M),
    }),
    StageSpec(2, "optimizer states and gradients", {
        "overlap_comm": (True, False),
        "reduce_bucket_size": (50 * _M, 500 * _M),
        "allgather_bucket_size": (50 * _M, 500 * _M),
    }),
    StageSpec(3, "optimizer states, gradients and parameters", {
        "overlap_comm": (True, False),
        "reduce_bucket_size": (50 * _M, 500 * _M),
        "stage3_prefetch_bucket_size": (50 * _M, 500 * _M),
    }),
)


# -- the launcher's grammar ----------------------------------------------------------------
#: DeepSpeed launcher options: flag -> (aliases, type or "flag", default, help).
LAUNCHER_OPTIONS: dict[str, tuple[tuple[str, ...], Any, Any, str]] = {
    "--autotuning": ((), ("tune", "run"), None,
                     "tune: write the optimal config; run: tune, then launch the winner"),
    "--hostfile": (("-H",), str, None, "MPI-style hostfile (HOST slots=N per line)"),
    "--include": (("-i",), str, "", "resources to use, e.g. worker-0@worker-1:0,2"),
    "--exclude": (("-e",), str, "", "resources to leave out (same format as --include)"),
    "--num_nodes": ((), int, -1, "nodes per experiment (the first N of the hostfile)"),
    "--num_gpus": (("--num_accelerators",), int, -1, "GPUs per node per experiment"),
    "--master_port": ((), int, DEFAULT_MASTER_PORT, "torch.distributed port (each "
                      "experiment adds its number, as DeepSpeed does)"),
    "--master_addr": ((), str, "", "address of node 0"),
    "--node_rank": ((), int, -1, "this node's rank (with --no_ssh)"),
    "--launcher": ((), str, "pdsh", "multi-node backend: pdsh, openmpi, mvapich, slurm, "
                   "mpich, impi"),
    "--launcher_args": ((), str, "", "backend-specific arguments, one quoted string"),
    "--module": ((), "flag", False, "run the script as a module (python -m)"),
    "--no_python": ((), "flag", False, "execute the script directly, without python"),
    "--no_local_rank": ((), "flag", False, "do not pass --local_rank to the script"),
    "--no_ssh": ((), "flag", False, "launch each node independently"),
    "--no_ssh_check": ((), "flag", False, "skip the ssh check of the first node"),
    "--force_multi": ((), "flag", False, "force the multi-node launcher"),
    "--save_pid": ((), "flag", False, "save the launcher's pid"),
    "--enable_each_rank_log": ((), str, "None", "folder for per-rank logs"),
    "--bind_cores_to_rank": ((), "flag", False, "bind each rank to its own cores"),
    "--bind_core_list": ((), str, None, "cores to bind, e.g. 1,3-5,7"),
    "--ssh_port": ((), int, None, "ssh port"),
    "--venv_script": ((), str, None, "virtual environment activation script"),
    "--log_level": ((), ("debug", "info", "warning", "error", "critical"), "info",
                    "the launcher's log level"),
    "--quiet": (("-q",), "flag", False, "as --log_level error"),
}

#: Launcher options whose value simcore sets per experiment (they come from the resources).
_PER_EXPERIMENT = ("--autotuning", "--hostfile", "--include", "--exclude", "--num_nodes",
                   "--num_gpus", "--master_port")

_CONFIG_FLAGS = ("--deepspeed_config", "--deepspeed-config", "--ds_config", "--ds-config")
_HF_FLAG = "--deepspeed"


class LauncherArgsError(ValueError):
    """A command line, hostfile or resource filter DeepSpeed's launcher would reject."""


def _dest(flag: str) -> str:
    return flag.lstrip("-")


def add_launcher_arguments(parser: argparse.ArgumentParser) -> None:
    """Add DeepSpeed's launcher options, ``user_script`` and ``user_args`` to ``parser``.

    Options must come before the training script; everything after it is the script's.
    """
    for flag, (aliases, kind, default, help_text) in LAUNCHER_OPTIONS.items():
        names = [flag, *aliases]
        if kind == "flag":
            parser.add_argument(*names, dest=_dest(flag), action="store_true", help=help_text)
        elif isinstance(kind, tuple):
            parser.add_argument(*names, dest=_dest(flag), choices=kind, default=default,
                                help=help_text)
        else:
            parser.add_argument(*names, dest=_dest(flag), type=kind, default=default,
                                help=help_text)
    parser.add_argument("user_script", nargs="?", metavar="TRAINING_SCRIPT",
                        help="your training script (DeepSpeed's launcher grammar)")
    parser.add_argument("user_args", nargs=argparse.REMAINDER, metavar="...",
                        help="the script's arguments, e.g. --deepspeed_config ds.json")


@dataclass(frozen=True)
class LaunchSpec:
    """A parsed DeepSpeed launcher command line (``deepspeed [options] script [args]``).

    ``options`` holds every launcher option with its value (defaults included);
    ``given`` the flags the user actually passed, in order, with their values, so
    commands can be rebuilt with the user's own options.
    """

    user_script: str | None
    user_args: tuple[str, ...] = ()
    options: Mapping[str, Any] = field(default_factory=dict)
    given: tuple[tuple[str, Any], ...] = ()

    def option(self, flag: str) -> Any:
        return self.options.get(_dest(flag), LAUNCHER_OPTIONS[flag][2])

    @property
    def autotuning(self) -> str | None:
        return self.option("--autotuning")

    @property
    def num_gpus(self) -> int:
        return int(self.option("--num_gpus"))

    @property
    def num_nodes(self) -> int:
        return int(self.option("--num_nodes"))

    @property
    def hostfile(self) -> str | None:
        return self.option("--hostfile")

    @property
    def config_path(self) -> str | None:
        """The DeepSpeed config after ``--deepspeed_config`` (or HF's ``--deepspeed``)."""
        found = config_arg(self.user_args)
        return found[1] if found else None

    @property
    def hf_style(self) -> bool:
        """True when the config comes after ``--deepspeed`` (Hugging Face's Trainer)."""
        found = config_arg(self.user_args)
        return found is not None and found[0] == _HF_FLAG

    def launcher_argv(self, *, drop: Sequence[str] = ("--autotuning",)) -> list[str]:
        """The launcher options the user passed, minus ``drop``, as argv tokens."""
        out: list[str] = []
        for flag, value in self.given:
            if flag in drop:
                continue
            kind = LAUNCHER_OPTIONS[flag][1]
            out += [flag] if kind == "flag" else [flag, str(value)]
        return out


def launch_spec_from_namespace(ns: argparse.Namespace, argv: Sequence[str] = ()) -> LaunchSpec:
    """The :class:`LaunchSpec` of a namespace filled by :func:`add_launcher_arguments`.

    ``argv`` (the tokens parsed) tells which options were given; without it, options
    that differ from their default count as given.
    """
    opts = {_dest(f): getattr(ns, _dest(f), LAUNCHER_OPTIONS[f][2]) for f in LAUNCHER_OPTIONS}
    names = {n: f for f, (aliases, *_rest) in LAUNCHER_OPTIONS.items() for n in (f, *aliases)}
    script = getattr(ns, "user_script", None)
    seen: list[str] = []
    for tok in argv:
        if script is not None and tok == script:
            break
        flag = names.get(tok.split("=", 1)[0])
        if flag is not None and flag not in seen:
            seen.append(flag)
    if not argv:
        seen = [f for f in LAUNCHER_OPTIONS if opts[_dest(f)] != LAUNCHER_OPTIONS[f][2]]
    given = tuple((f, opts[_dest(f)]) for f in seen)
    return LaunchSpec(user_script=script, user_args=tuple(getattr(ns, "user_args", []) or []),
                      options=opts, given=given)


class _RaisingParser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        raise LauncherArgsError(f"{message}; pass DeepSpeed launcher options, then the "
                                "training script and its arguments")


def parse_launcher_args(argv: Sequence[str]) -> LaunchSpec:
    """Parse DeepSpeed's launcher command line (without the leading ``deepspeed``).

    Examples
    --------
    >>> s = parse_launcher_args(["--num_nodes", "2", "--num_gpus", "4", "-H", "hosts",
    ...                          "train.py", "--deepspeed_config", "ds.json"])
    >>> s.num_nodes, s.num_gpus, s.hostfile, s.user_args
    (2, 4, 'hosts', ('--deepspeed_config', 'ds.json'))
    >>> s.launcher_argv()
    ['--num_nodes', '2', '--num_gpus', '4', '--hostfile', 'hosts']
    >>> parse_launcher_args(["--num_gpus", "four", "t.py"])
    Traceback (most recent call last):
    ...
    simcore.autotune.deepspeed.LauncherArgsError: argument --num_gpus/--num_accelerators: invalid int value: 'four'; pass DeepSpeed launcher options, then the training script and its arguments
    """
    parser = _RaisingParser(prog="deepspeed", add_help=False, allow_abbrev=False)
    add_launcher_arguments(parser)
    ns = parser.parse_args(list(argv))
    if ns.user_script is None:
        raise LauncherArgsError("no training script; pass DeepSpeed launcher options, then "
                                "the training script and its arguments")
    return launch_spec_from_namespace(ns, list(argv))


# -- the config argument ------------------------------------------------------------------
def config_arg(user_args: Sequence[str]) -> tuple[str, str, int] | None:
    """(flag, value, index of the value) of the DeepSpeed config in a script's arguments.

    ``--deepspeed_config X`` (or ``=X``) first, as DeepSpeed does; else Hugging Face's
    ``--deepspeed X`` when X is a value (a bare ``--deepspeed`` is DeepSpeed's own
    boolean flag). ``index`` is -1 for the ``--flag=X`` form.

    Examples
    --------
    >>> config_arg(["--deepspeed", "--deepspeed_config", "a.json"])
    ('--deepspeed_config', 'a.json', 2)
    >>> config_arg(["--deepspeed=z.json"])
    ('--deepspeed', 'z.json', -1)
    """
    args = list(user_args)
    for flags in (_CONFIG_FLAGS, (_HF_FLAG,)):
        for i, a in enumerate(args):
            name, eq, val = a.partition("=")
            if name not in flags:
                continue
            if eq:
                return name, val, -1
            if i + 1 < len(args) and not args[i + 1].startswith("-"):
                return name, args[i + 1], i + 1
    return None


def with_config(args: list[str], *, value: str) -> list[str]:
    """``args`` with the DeepSpeed config replaced by ``value`` (a path or base64).

    ``{ds_config}`` placeholders are filled; else the value of ``--deepspeed_config``
    or HF's ``--deepspeed`` is replaced; else ``--deepspeed_config value`` is appended.

    Examples
    --------
    >>> with_config(["--deepspeed", "ds.json", "--fp16"], value="best.json")
    ['--deepspeed', 'best.json', '--fp16']
    >>> with_config(["--lr", "1"], value="best.json")
    ['--lr', '1', '--deepspeed_config', 'best.json']
    """
    out = list(args)
    if any("{ds_config}" in a for a in out):
        return [a.replace("{ds_config}", value) for a in out]
    found = config_arg(out)
    if found is None:
        return [*out, "--deepspeed_config", value]
    flag, _, idx = found
    if idx >= 0:
        out[idx] = value
    else:
        out = [f"{flag}={value}" if a.partition("=")[0] == flag else a for a in out]
    return out


def encode_config(config: Mapping[str, Any]) -> str:
    """DeepSpeed's command-line form of a config (url-safe base64 of its JSON)."""
    return base64.urlsafe_b64encode(json.dumps(config).encode("utf-8")).decode("utf-8")


def decode_config(value: str) -> dict[str, Any] | None:
    """The config of a ``--deepspeed_config`` value in base64 form, else ``None``."""
    try:
        data = json.loads(base64.urlsafe_b64decode(value.encode("ascii")).decode("utf-8"))
    except (ValueError, UnicodeError):
        return None
    return data if isinstance(data, dict) else None


def _lookup(config: Mapping[str, Any], key: str) -> Any:
    if key in config:
        return config[key]
    for v in config.values():
        if isinstance(v, Mapping):
            r = _lookup(v, key)
            if r is not None:
                return r
    return None


def apply_arg_mappings(user_args: Sequence[str], *, mappings: Mapping[str, str] | None,
                       config: Mapping[str, Any]) -> list[str]:
    """``user_args`` with each ``arg_mappings`` argument set to the config's value.

    As DeepSpeed's scheduler: ``{"train_micro_batch_size_per_gpu":
    "--per_device_train_batch_size"}`` sets (or appends) that argument to the
    configuration's micro-batch; ``"auto"`` values are left alone.

    Examples
    --------
    >>> apply_arg_mappings(["--per_device_train_batch_size", "1"],
    ...                    mappings={"train_micro_batch_size_per_gpu": "--per_device_train_batch_size",
    ...                              "gradient_accumulation_steps": "--gradient_accumulation_steps"},
    ...                    config={"train_micro_batch_size_per_gpu": 4,
    ...                            "gradient_accumulation_steps": 2})
    ['--per_device_train_batch_size', '4', '--gradient_accumulation_steps', '2']
    """
    out = list(user_args)
    for key, arg in (mappings or {}).items():
        val = _lookup(config, key.strip())
        if val is None or str(val) == "auto":
            continue
        arg = arg.strip()
        if arg in out and out.index(arg) + 1 < len(out):
            out[out.index(arg) + 1] = str(val)
        else:
            out += [arg, str(val)]
    return out


def mapped_value(user_args: Sequence[str], *, mappings: Mapping[str, str] | None,
                 key: str) -> int | None:
    """The integer a user argument named in ``arg_mappings`` gives ``key`` (DeepSpeed's
    source for ``"auto"`` micro-batch and accumulation values), else ``None``."""
    arg = (mappings or {}).get(key)
    args = list(user_args)
    if arg is None or arg.strip() not in args:
        return None
    i = args.index(arg.strip())
    return int(args[i + 1]) if i + 1 < len(args) and args[i + 1].isdigit() else None


# -- resources ------------------------------------------------------------------------------
@dataclass(frozen=True)
class Resources:
    """Hosts and their GPU slots, as DeepSpeed's launcher resolves them.

    Examples
    --------
    >>> r = Resources((("worker-0", (0, 1, 2, 3)), ("worker-1", (0, 1, 2, 3))))
    >>> r.n_nodes, r.gpus_per_node, r.n_gpus, r.include()
    (2, 4, 8, 'worker-0:0,1,2,3@worker-1:0,1,2,3')
    """

    hosts: tuple[tuple[str, tuple[int, ...]], ...]
    from_hostfile: str | None = None

    @property
    def n_nodes(self) -> int:
        return len(self.hosts)

    @property
    def gpus_per_node(self) -> int:
        return min((len(s) for _, s in self.hosts), default=0)

    @property
    def n_gpus(self) -> int:
        return self.n_nodes * self.gpus_per_node

    def include(self) -> str:
        """The ``--include`` value of these resources."""
        return "@".join(f"{h}:{','.join(map(str, s))}" for h, s in self.hosts)


def parse_hostfile(text: str, *, source: str = "hostfile") -> OrderedDict[str, int]:
    """``HOST slots=N`` lines → {host: N}; comments and blank lines skipped.

    Examples
    --------
    >>> dict(parse_hostfile("worker-0 slots=4\\n# spare\\nworker-1 slots=4\\n"))
    {'worker-0': 4, 'worker-1': 4}
    >>> parse_hostfile("worker-0\\n")
    Traceback (most recent call last):
    ...
    simcore.autotune.deepspeed.LauncherArgsError: hostfile line 'worker-0' lists no slots; write one 'HOST slots=N' line per node
    """
    pool: OrderedDict[str, int] = OrderedDict()
    hint = "write one 'HOST slots=N' line per node"
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        m = re.match(r"^(\S+)\s+slots=(\d+)\s*$", line)
        if not m:
            raise LauncherArgsError(f"{source} line {line!r} lists no slots; {hint}")
        host, slots = m[1], int(m[2])
        if host in pool:
            raise LauncherArgsError(f"{source} lists {host!r} twice; {hint}")
        if slots < 1:
            raise LauncherArgsError(f"{source} gives {host!r} slots={slots}; {hint} with N >= 1")
        pool[host] = slots
    if not pool:
        raise LauncherArgsError(f"{source} lists no hosts with slots; {hint}")
    return pool


def _parse_filter(text: str, pool: Mapping[str, Sequence[int]], flag: str) -> dict[str, list[int]]:
    out: dict[str, list[int]] = {}
    for part in text.split("@"):
        host, _, slots = part.partition(":")
        if host not in pool:
            raise LauncherArgsError(f"{flag} names host {host!r}, which is not in the "
                                    f"resources ({', '.join(pool)}); pass one of those")
        if not slots:
            out[host] = list(pool[host])
            continue
        try:
            wanted = [int(s) for s in slots.split(",")]
        except ValueError:
            raise LauncherArgsError(f"{flag} {text!r}: slots must be integers, e.g. "
                                    "worker-0:0,1@worker-1") from None
        bad = [s for s in wanted if s not in pool[host]]
        if bad:
            raise LauncherArgsError(f"{flag} asks for slots {bad} of {host!r}, which has "
                                    f"{list(pool[host])}")
        out[host] = wanted
    return out


def resolve_resources(spec: LaunchSpec, *, hostfile_text: str | None = None,
                      local_gpus: int | None = None) -> Resources:
    """The hosts and slots one experiment uses (DeepSpeed's resolution order).

    The hostfile (``hostfile_text``) or, without one, ``localhost`` with
    ``local_gpus`` slots (default ``--num_gpus``); then ``--include``/``--exclude``;
    then the first ``--num_nodes`` hosts and ``--num_gpus`` slots of each.

    Examples
    --------
    >>> spec = parse_launcher_args(["--num_nodes", "2", "--num_gpus", "2", "t.py"])
    >>> resolve_resources(spec, hostfile_text="a slots=8\\nb slots=8\\nc slots=8").include()
    'a:0,1@b:0,1'
    """
    include, exclude = spec.option("--include"), spec.option("--exclude")
    if (include or exclude) and (spec.num_nodes > 0 or spec.num_gpus > 0):
        raise LauncherArgsError("pass --include/--exclude or --num_nodes/--num_gpus, not both "
                                "(DeepSpeed's launcher refuses the mix)")
    if include and exclude:
        raise LauncherArgsError("pass --include or --exclude, not both")
    if hostfile_text is not None:
        pool = {h: list(range(n)) for h, n in
                parse_hostfile(hostfile_text, source=f"hostfile {spec.hostfile!r}").items()}
    else:
        n = local_gpus if local_gpus is not None else spec.num_gpus
        if n is None or n < 1:
            raise LauncherArgsError("no hostfile and no GPU count; pass --num_gpus N (GPUs on "
                                    "this node) or --hostfile with 'HOST slots=N' lines")
        if spec.num_nodes > 1:
            raise LauncherArgsError(f"--num_nodes {spec.num_nodes} needs a hostfile listing "
                                    "the nodes; pass --hostfile with 'HOST slots=N' lines")
        pool = {"localhost": list(range(n))}
    if include:
        pool = _parse_filter(include, pool, "--include")
    elif exclude:
        drop = _parse_filter(exclude, pool, "--exclude")
        pool = {h: [s for s in slots if not (h in drop and (s in drop[h]))]
                for h, slots in pool.items()}
        pool = {h: s for h, s in pool.items() if s}
    hosts = list(pool.items())
    if spec.num_nodes > 0:
        if spec.num_nodes > len(hosts):
            raise LauncherArgsError(f"--num_nodes {spec.num_nodes} but the resources have "
                                    f"{len(hosts)} node(s); pass at most {len(hosts)}")
        hosts = hosts[: spec.num_nodes]
    if spec.num_gpus > 0:
        short = [h for h, s in hosts if len(s) < spec.num_gpus]
        if short and hostfile_text is not None:
            raise LauncherArgsError(f"--num_gpus {spec.num_gpus} but {short[0]!r} has "
                                    f"{len(dict(hosts)[short[0]])} slots")
        hosts = [(h, s[: spec.num_gpus]) for h, s in hosts]
    if not hosts:
        raise LauncherArgsError("the resource filter leaves no GPU; loosen --include/--exclude")
    width = min(len(s) for _, s in hosts)
    return Resources(tuple((h, tuple(s[:width])) for h, s in hosts),
                     from_hostfile=spec.hostfile if hostfile_text is not None else None)


def names_resources(spec: LaunchSpec) -> bool:
    """Whether the command line says which GPUs to use (a hostfile, a GPU count or an
    include filter)."""
    return spec.hostfile is not None or spec.num_gpus > 0 or bool(spec.option("--include"))


def load_resources(spec: LaunchSpec) -> Resources:
    """:func:`resolve_resources` with the hostfile ``spec`` names read from disk."""
    text = None
    if spec.hostfile is not None:
        from ..errors import SimcoreInputError
        from ..io import read_input_bytes

        try:  # a regular file only: a FIFO would block forever
            text = read_input_bytes(spec.hostfile).decode("utf-8", errors="replace")
        except SimcoreInputError as exc:
            raise LauncherArgsError(f"hostfile: {exc}") from None
        except OSError:
            raise LauncherArgsError(f"no hostfile {spec.hostfile!r}; pass an existing file with "
                                    "one 'HOST slots=N' line per node") from None
    return resolve_resources(spec, hostfile_text=text)


def experiment_command(spec: LaunchSpec, *, resources: Resources, master_port: int,
                       user_args: Sequence[str], executable: str = "deepspeed") -> list[str]:
    """The launch of one experiment, in DeepSpeed's scheduler format.

    ``deepspeed [--hostfile H] --include HOST:SLOTS@... --master_port P [the user's
    other launcher options] script user_args``. DeepSpeed's scheduler drops the
    user's other launcher options (``--launcher``, ``--no_local_rank``...); simcore keeps
    them.

    Examples
    --------
    >>> spec = parse_launcher_args(["--num_gpus", "2", "--no_local_rank", "t.py", "--x"])
    >>> r = Resources((("localhost", (0, 1)),))
    >>> experiment_command(spec, resources=r, master_port=29501, user_args=["--x"])
    ['deepspeed', '--include', 'localhost:0,1', '--master_port', '29501', '--no_local_rank', 't.py', '--x']
    """
    head = [executable]
    if resources.from_hostfile:
        head += ["--hostfile", resources.from_hostfile]
    head += ["--include", resources.include(), "--master_port", str(master_port)]
    return [*head, *spec.launcher_argv(drop=_PER_EXPERIMENT), str(spec.user_script),
            *user_args]


def optimal_command(spec: LaunchSpec | None, *, ds_config_path: str, resources: Resources | None,
                    config: Mapping[str, Any], mappings: Mapping[str, str] | None = None,
                    executable: str = "deepspeed", n_gpus: int | None = None) -> list[str]:
    """The training command for the optimal config: the user's own launcher options
    (less ``--autotuning``; ``--num_nodes/--num_gpus`` from ``resources`` when the user
    gave none), the script, its arguments with the config replaced by
    ``ds_config_path`` (``--deepspeed`` stays ``--deepspeed`` for Hugging Face scripts)
    and ``arg_mappings`` arguments set to the optimal values.

    Examples
    --------
    >>> spec = parse_launcher_args(["--autotuning", "run", "--num_gpus", "4", "t.py",
    ...                             "--deepspeed", "ds.json"])
    >>> optimal_command(spec, ds_config_path="best.json", resources=None, config={})
    ['deepspeed', '--num_gpus', '4', 't.py', '--deepspeed', 'best.json']
    """
    if spec is None or spec.user_script is None:
        head = [executable, *(_resource_args(resources) if resources else gpu_args(n_gpus)),
                "train.py"]
        return [*head, *with_config([], value=ds_config_path)]
    launcher = spec.launcher_argv()
    if not any(f in launcher for f in ("--num_nodes", "--num_gpus", "--include", "--exclude")):
        launcher = [*(_resource_args(resources) if resources else gpu_args(n_gpus)), *launcher]
    args = apply_arg_mappings(spec.user_args, mappings=mappings, config=config)
    return [executable, *launcher, spec.user_script, *with_config(args, value=ds_config_path)]


def gpu_args(n_gpus: int | None, per_node: int = 8) -> list[str]:
    """Launcher flags for ``n_gpus`` GPUs in total, ``per_node`` to a node.

    Examples
    --------
    >>> gpu_args(32)
    ['--num_nodes', '4', '--num_gpus', '8']
    """
    if not n_gpus:
        return []
    if n_gpus <= per_node:
        return ["--num_gpus", str(n_gpus)]
    return ["--num_nodes", str(-(-n_gpus // per_node)), "--num_gpus", str(per_node)]


def _resource_args(resources: Resources | None) -> list[str]:
    if resources is None:
        return []
    out = ["--num_gpus", str(resources.gpus_per_node)]
    if resources.n_nodes > 1:
        out = ["--num_nodes", str(resources.n_nodes), *out]
    if resources.from_hostfile:
        out = ["--hostfile", resources.from_hostfile, *out]
    return out


def spec_from_recorded(exp: Mapping[str, Any] | None, cmd_txt: str | None) -> LaunchSpec | None:
    """The launch of a recorded experiment, for its optimal command: the script and
    arguments from ``exp.json`` (``user_script``/``user_args``, which simcore records)
    or ``cmd.txt`` (DeepSpeed writes ``exp.json`` before it sets them), the scheduler's
    per-experiment options (``--include``, ``--master_port``) replaced by
    ``--num_nodes``/``--num_gpus``/``--hostfile`` from ``exp.json``."""
    if exp and isinstance(exp.get("user_script"), str):
        argv = [exp["user_script"], *(a for a in exp.get("user_args") or [] if isinstance(a, str))]
        argv = [*(a for a in exp.get("launcher_args") or [] if isinstance(a, str)), *argv]
    elif cmd_txt:
        try:
            words = shlex.split(cmd_txt)
        except ValueError:
            return None
        if not words or os.path.basename(words[0]) != "deepspeed":
            return None
        argv = words[1:]
    else:
        return None
    try:
        spec = parse_launcher_args(argv)
    except LauncherArgsError:
        return None
    pre: list[str] = []
    nodes, gpus = (exp or {}).get("num_nodes"), (exp or {}).get("num_gpus")
    hostfile = (exp or {}).get("hostfile") or spec.hostfile
    if isinstance(nodes, int) and nodes > 1:
        pre += ["--num_nodes", str(nodes)]
        if isinstance(hostfile, str) and hostfile != DEFAULT_HOSTFILE:
            pre += ["--hostfile", hostfile]
    if isinstance(gpus, int) and gpus > 0:
        pre += ["--num_gpus", str(gpus)]
    return parse_launcher_args([*pre, *spec.launcher_argv(drop=_PER_EXPERIMENT),
                                str(spec.user_script), *spec.user_args])


# -- logs ------------------------------------------------------------------------------------
_ERROR_LINE = re.compile(r"^\s*(?:[\w.]+\.)?\w*(?:Error|Exception)(?::|$)|CUDA out of memory|"
                         r"^\s*Traceback \(most recent call last\)")


def log_failure(text: str) -> str | None:
    """Why a run failed, from its ``stderr.log``: the exception line of a traceback or
    the first error line; ``None`` for a clean log.

    DeepSpeed's scheduler takes the first line holding "error" anywhere; simcore takes
    tracebacks, ``...Error:``/``...Exception:`` lines and CUDA out-of-memory messages,
    so a warning that mentions the word does not fail a run.

    Examples
    --------
    >>> log_failure("Traceback (most recent call last):\\n  File 'x'\\nRuntimeError: NCCL error\\n")
    'RuntimeError: NCCL error'
    >>> log_failure("UserWarning: this may cause an error later\\n") is None
    True
    >>> log_failure("Exception ignored in: <function _del at 0x1>\\n") is None
    True
    """
    lines = [ln.rstrip() for ln in text.splitlines() if ln.strip()]
    first = next((i for i, ln in enumerate(lines) if _ERROR_LINE.search(ln)), None)
    if first is None:
        return None
    if lines[first].lstrip().startswith("Traceback"):
        rest = [ln for ln in lines[first + 1:] if not ln.startswith((" ", "\t"))]
        return rest[0].strip() if rest else "Traceback"
    return lines[first].strip()


def was_interrupted(text: str) -> bool:
    """A run stopped by Ctrl-C (DeepSpeed re-runs such experiments)."""
    return "KeyboardInterrupt" in text


def foreign_entries(folder: str | os.PathLike[str], *, kind: str) -> list[str]:
    """Entries of an existing ``results_dir`` (``kind="results"``) or ``exps_dir``
    (``kind="exps"``) that no DeepSpeed-style autotuner wrote; ``[]`` for a missing or
    recognisable folder."""
    root = Path(folder)
    if not root.is_dir():
        return []
    bad = []
    for p in sorted(root.iterdir()):
        if kind == "exps":
            ok = p.is_file() and p.suffix == ".json"
        elif p.is_dir():  # an experiment (or one that stopped before writing anything)
            ok = not any(p.iterdir()) or any(
                (p / f).exists() for f in (EXP_JSON, DS_CONFIG_JSON, STDERR_LOG, CMD_TXT))
        else:
            ok = p.name in (SUMMARY_TXT, OPTIMAL_CONFIG, OPTIMAL_CMD) or p.name.startswith(".")
        if not ok:
            bad.append(p.name)
    return bad


FOREIGN_HINT = ("it holds files no DeepSpeed autotuner wrote ({}); pass another "
                "autotuning.results_dir/exps_dir or move them")


def check_folders(results_dir: str | os.PathLike[str],
                  exps_dir: str | os.PathLike[str] | None = None) -> None:
    """Raise :class:`LauncherArgsError` if a results or experiments folder holds files
    no DeepSpeed-style autotuner wrote (they are never deleted or overwritten)."""
    for folder, kind in ((results_dir, "results"), (exps_dir, "exps")):
        if folder is None:
            continue
        bad = foreign_entries(folder, kind=kind)
        if bad:
            raise LauncherArgsError(f"autotuning.{kind}_dir {os.fspath(folder)!r}: "
                                    + FOREIGN_HINT.format(", ".join(bad[:3])))


def clear_folders(results_dir: str | os.PathLike[str], exps_dir: str | os.PathLike[str]) -> None:
    """Remove a previous run's folders (DeepSpeed's ``overwrite: true``), after
    :func:`check_folders` found only an autotuner's files in them."""
    import shutil

    check_folders(results_dir, exps_dir)
    for folder in (results_dir, exps_dir):
        shutil.rmtree(folder, ignore_errors=True)


# -- the optimal config -------------------------------------------------------------------------
_BATCH_KEYS = ("train_micro_batch_size_per_gpu", "gradient_accumulation_steps",
               "train_batch_size")


def optimal_ds_config(user_config: Mapping[str, Any], *, experiment_config: Mapping[str, Any],
                      n_gpus: int | None = None, mp: int = 1) -> dict[str, Any]:
    """``ds_config_optimal.json``: the user's config with one experiment's settings.

    The ``autotuning`` section is removed. ``zero_optimization`` is the experiment's
    (its stage and tuned values) with the user's fixed settings on top; a tuning list
    in the user's section (``reduce_bucket_size: [5e7, 5e8]``) takes the experiment's
    value. The batch keys (micro-batch, accumulation, ``train_batch_size``) are the
    experiment's, so ``"auto"`` and lists become numbers; without a recorded
    ``train_batch_size`` it is ``mbs * gas * n_gpus // mp`` (DeepSpeed's formula).

    Examples
    --------
    >>> user = {"zero_optimization": {"stage": [1, 2], "overlap_comm": True,
    ...                               "reduce_bucket_size": [5e7, 5e8]},
    ...         "train_micro_batch_size_per_gpu": "auto", "autotuning": {"mp_size": 2}}
    >>> exp = {"zero_optimization": {"stage": 2, "reduce_bucket_size": 5e8},
    ...        "train_micro_batch_size_per_gpu": 4, "gradient_accumulation_steps": 1,
    ...        "train_batch_size": 8}
    >>> optimal_ds_config(user, experiment_config=exp)
    {'zero_optimization': {'stage': 2, 'reduce_bucket_size': 500000000.0, 'overlap_comm': True}, 'train_micro_batch_size_per_gpu': 4, 'gradient_accumulation_steps': 1, 'train_batch_size': 8}
    """
    cfg = copy.deepcopy(dict(user_config))
    cfg.pop("autotuning", None)
    exp = experiment_config
    user_zero = cfg.get("zero_optimization") or {}
    exp_zero = dict(exp.get("zero_optimization") or {})
    fixed = {k: copy.deepcopy(v) for k, v in user_zero.items()
             if k != "stage" and not isinstance(v, list)}
    zero = {"stage": exp_zero.get("stage", 0),
            **{k: copy.deepcopy(v) for k, v in exp_zero.items() if k != "stage"}, **fixed}
    cfg["zero_optimization"] = zero
    for key in _BATCH_KEYS:
        if key in exp:
            cfg[key] = exp[key]
    mbs, gas = cfg.get(_BATCH_KEYS[0]), cfg.get(_BATCH_KEYS[1], 1)
    if "train_batch_size" not in exp:
        if n_gpus and isinstance(mbs, int) and isinstance(gas, int):
            cfg["train_batch_size"] = mbs * gas * n_gpus // mp
        elif not isinstance(cfg.get("train_batch_size", 0), int):
            cfg.pop("train_batch_size")
    return cfg


# -- summary.txt ---------------------------------------------------------------------------------
def summary_txt(rows: Sequence[tuple[str, int, float | None, str | None]], *,
                seconds: float, n_experiments: int) -> str:
    """DeepSpeed's ``summary.txt``: a pipe table (``tuning_space``, ``num_experiments``,
    ``best_metric_val``, ``best_exp_name``; one row per stage space ``z0``.. and
    ``global``) and the closing line.

    Examples
    --------
    >>> print(summary_txt([("z1", 2, 8.5, "z1_gas1_tmbspg2"), ("global", 2, 8.5,
    ...                    "z1_gas1_tmbspg2")], seconds=61.5, n_experiments=2))
    | tuning_space   |   num_experiments |   best_metric_val | best_exp_name   |
    |:---------------|------------------:|------------------:|:----------------|
    | z1             |                 2 |               8.5 | z1_gas1_tmbspg2 |
    | global         |                 2 |               8.5 | z1_gas1_tmbspg2 |
    <BLANKLINE>
    Tuning completed in 0:01:01.500000. Total number of experiments: 2.
    """
    import datetime

    head = ["tuning_space", "num_experiments", "best_metric_val", "best_exp_name"]
    body = [[r[0], str(r[1]), "" if r[2] is None else f"{r[2]:g}", r[3] or ""]
            for r in rows if r[3]]
    w = [max(len(h) + 2, *(len(b[i]) for b in body)) for i, h in enumerate(head)]  # tabulate
    right = (False, True, True, False)

    def cell(text: str, i: int) -> str:
        return text.rjust(w[i]) if right[i] else text.ljust(w[i])

    lines = ["| " + " | ".join(cell(h, i) for i, h in enumerate(head)) + " |",
             "|" + "|".join((":" + "-" * (w[i] + 1)) if not right[i] else ("-" * (w[i] + 1) + ":")
                            for i in range(4)) + "|"]
    lines += ["| " + " | ".join(cell(c, i) for i, c in enumerate(b)) + " |" for b in body]
    took = datetime.timedelta(seconds=seconds)
    return ("\n".join(lines) + f"\n\nTuning completed in {took}. Total number of experiments: "
            f"{n_experiments}.")


# -- memory: DeepSpeed's ZeRO model-state estimators -------------------------------------------
def estimate_zero2_model_states_mem_needs(total_params: float, num_gpus_per_node: int = 1,
                                          num_nodes: int = 1, cpu_offload: bool = True,
                                          additional_buffer_factor: float = 1.5) -> tuple[int, int]:
    """(CPU bytes, GPU bytes) of ZeRO-2 model states, DeepSpeed's formula (16-bit
    mixed precision with Adam).

    GPU: ``2 N`` (16-bit params) with the optimizer offloaded, else ``2 N + 18 N /
    gpus`` (16-bit grads 2 + fp32 grads 4 + fp32 params 4 + Adam 8, partitioned). CPU:
    ``N max(4 gpus, 16) f`` offloaded, else ``4 N gpus_per_node f``.

    Examples
    --------
    >>> cpu, gpu = estimate_zero2_model_states_mem_needs(2851e6, num_gpus_per_node=8)
    >>> round(cpu / 2**30, 2), round(gpu / 2**30, 2)  # DeepSpeed's docs: 127.45GB, 5.31GB
    (127.45, 5.31)
    """
    total_gpus = num_nodes * num_gpus_per_node
    if cpu_offload:
        gpu = 2 * total_params
        cpu = total_params * max(4 * total_gpus, 16) * additional_buffer_factor
    else:
        gpu = 2 * total_params + int(18 * total_params / total_gpus)
        cpu = total_params * 4 * num_gpus_per_node * additional_buffer_factor
    return int(cpu), int(gpu)


def estimate_zero3_model_states_mem_needs(
    total_params: float, largest_layer_params: float, num_gpus_per_node: int = 1,
    num_nodes: int = 1, cpu_offload: bool = True, cpu_offload_params: bool = True,
    zero_init: bool = True, additional_buffer_factor: float = 1.5,
) -> tuple[int, int, int]:
    """(CPU bytes, GPU bytes, largest-layer bytes) of ZeRO-3 model states, DeepSpeed's
    formula (16-bit mixed precision with Adam).

    The largest layer is gathered whole on each GPU: ``4 L`` (its 16-bit params and
    grads). GPU: ``4 L + 18 N / gpus`` without offload; ``4 L + 2 N / gpus`` with the
    optimizer offloaded; ``4 L`` with params offloaded too.

    Examples
    --------
    >>> cpu, gpu, _ = estimate_zero3_model_states_mem_needs(
    ...     2851e6, 32e6, num_gpus_per_node=8, cpu_offload=False, cpu_offload_params=False)
    >>> round(cpu / 2**30, 2), round(gpu / 2**30, 2)  # DeepSpeed's docs: 1.43GB, 6.09GB
    (1.43, 6.09)
    """
    total_gpus = num_nodes * num_gpus_per_node
    gpus_factor = 1 / num_nodes
    largest = 4 * largest_layer_params
    if cpu_offload:
        if cpu_offload_params:
            gpu = largest
            per = 18 * gpus_factor
        else:
            gpu = largest + int(2 * total_params / total_gpus)
            per = 16 * gpus_factor
        cpu = total_params * (per if zero_init else max(4 * num_gpus_per_node, per))
        cpu *= additional_buffer_factor
    else:
        gpu = largest + int(18 * total_params / total_gpus)
        cpu = (largest_layer_params if zero_init else total_params) * 4 * num_gpus_per_node
        cpu *= additional_buffer_factor
    return int(cpu), int(gpu), int(largest)


def zero_model_states_bytes(stage: int, *, precision: str, total_params: float,
                            largest_layer_params: float = 0.0, n_gpus: int = 1,
                            mp: int = 1) -> float:
    """GPU bytes of model states per GPU (no offload), per precision, in DeepSpeed's terms.

    16-bit (``fp16``, ``bf16``; mixed precision: 2-byte params and grads, fp32 master
    params, fp32 grads and Adam states partitioned as DeepSpeed's estimators count
    them, 18 bytes per parameter): ZeRO-0 ``20 N``, ZeRO-1 ``4 N + 16 N/G``, ZeRO-2
    ``2 N + 18 N/G`` (:func:`estimate_zero2_model_states_mem_needs`), ZeRO-3 ``4 L +
    18 N/G`` (:func:`estimate_zero3_model_states_mem_needs`). ``fp32`` (no 16-bit copy;
    DeepSpeed's estimators have no fp32 branch, this follows the same counting with
    4-byte params and grads and 8 bytes of Adam states): ZeRO-0 ``16 N``, ZeRO-1 ``8 N
    + 8 N/G``, ZeRO-2 ``4 N + 12 N/G``, ZeRO-3 ``8 L + 16 N/G``. ``N`` is the
    parameters per model-parallel rank (``total_params / mp``), ``L`` the largest
    layer's, ``G`` the data-parallel size ``n_gpus / mp``.

    Examples
    --------
    >>> n, layer = 8.03e9, 525.3e6  # Llama 3.1 8B: its embedding is the largest layer
    >>> z3 = zero_model_states_bytes(3, precision="bf16", total_params=n,
    ...                              largest_layer_params=layer, n_gpus=128)
    >>> z3 == estimate_zero3_model_states_mem_needs(n, layer, num_gpus_per_node=8,
    ...     num_nodes=16, cpu_offload=False, cpu_offload_params=False)[1]
    True
    """
    if stage not in (0, 1, 2, 3):
        raise ValueError(f"ZeRO stage must be 0, 1, 2 or 3, got {stage!r}")
    if precision not in ("fp16", "bf16", "fp32"):
        raise ValueError(f"precision={precision!r} is unknown; pass fp16, bf16 or fp32")
    if n_gpus % mp:
        raise ValueError(f"mp={mp} must divide n_gpus={n_gpus}")
    replicated, partitioned = _STATE_BYTES["fp32" if precision == "fp32" else "16-bit"][stage]
    n, g = total_params / mp, n_gpus // mp
    whole = largest_layer_params / mp if stage == 3 else n  # ZeRO-3 gathers one layer
    return float(replicated * whole + int(partitioned * n / g))


#: (bytes per parameter kept whole, bytes per parameter partitioned over the
#: data-parallel ranks) per ZeRO stage; at ZeRO-3 the first applies to the largest layer.
_STATE_BYTES: dict[str, dict[int, tuple[int, int]]] = {
    "16-bit": {0: (20, 0), 1: (4, 16), 2: (2, 18), 3: (4, 18)},
    "fp32": {0: (16, 0), 1: (8, 8), 2: (4, 12), 3: (8, 16)},
}
