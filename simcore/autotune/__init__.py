"""A correct DeepSpeed-style autotuner (ZeRO stage × micro-batch × ZeRO knobs).

Every selector goes through :mod:`simcore.engine.metrics`, so ``latency`` keeps the smallest
value, ``FLOPS``/``flops`` read ``FLOPS_per_gpu``, and failed or metric-less trials
never win. ``tune()`` always returns a :class:`TuneResult`.

Examples
--------
>>> from simcore.autotune import Autotuner, SimulatorRunner
>>> runner = SimulatorRunner("Llama 2 7B", family="A100-80G", n_gpus=8)
>>> result = Autotuner({"fp16": {"enabled": True}, "zero_optimization": {"stage": "all"},
...                     "autotuning": {"metric": "throughput", "max_train_micro_batch_size_per_gpu": 8}},
...                    runner).tune()
>>> result.best.stage in (1, 2, 3)
True
"""

from . import deepspeed
from .config import (
    AutotuneConfig,
    AutotuneConfigError,
    UnknownAutotuningKeyWarning,
    UnusedAutotuningKeyWarning,
    load_ds_config,
    parse_stages,
)
from .deepspeed import LauncherArgsError, LaunchSpec, parse_launcher_args
from .results import (
    Experiment,
    NoResultError,
    Trial,
    TuneResult,
    atomic_write_text,
    experiment_name,
    optimal_ds_config,
    render_command,
    summary_table,
)
from .runners import (
    CommandRunner,
    MalformedExperimentWarning,
    MemoryEstimate,
    ResultsFolderRunner,
    Runner,
    SimulatorRunner,
)
from .tuner import ZERO_STAGES, Autotuner, StageSpec, rank

__all__ = [
    "ZERO_STAGES",
    "AutotuneConfig",
    "AutotuneConfigError",
    "Autotuner",
    "CommandRunner",
    "Experiment",
    "LaunchSpec",
    "LauncherArgsError",
    "MalformedExperimentWarning",
    "MemoryEstimate",
    "NoResultError",
    "ResultsFolderRunner",
    "Runner",
    "SimulatorRunner",
    "StageSpec",
    "Trial",
    "TuneResult",
    "UnknownAutotuningKeyWarning",
    "UnusedAutotuningKeyWarning",
    "atomic_write_text",
    "deepspeed",
    "experiment_name",
    "load_ds_config",
    "optimal_ds_config",
    "parse_launcher_args",
    "parse_stages",
    "rank",
    "render_command",
    "summary_table",
]
