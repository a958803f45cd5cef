"""The DeepSpeed configuration as the autotuner reads it, validated once.

:class:`AutotuneConfig` holds the ``autotuning`` section (DeepSpeed's key names and
defaults) plus what the tuner needs from the rest of the DeepSpeed config: the ZeRO
stages to try, the user's fixed ``zero_optimization`` settings, gradient accumulation,
a fixed ``train_batch_size`` and the precision.

Examples
--------
>>> cfg = AutotuneConfig.from_ds_config({"zero_optimization": {"stage": [1, 2]},
...                                      "autotuning": {"metric": "latency"}})
>>> cfg.stages, cfg.metric, cfg.tuner_type
((1, 2), 'latency', 'gridsearch')
"""

from __future__ import annotations

import copy
import json
import os
import warnings
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from ..metrics import get_metric

__all__ = [
    "AUTOTUNING_KEYS",
    "AutotuneConfig",
    "AutotuneConfigError",
    "TUNER_TYPES",
    "UnknownAutotuningKeyWarning",
    "load_ds_config",
    "parse_stages",
]

#: Tuner names (DeepSpeed's) and accepted spellings.
TUNER_TYPES: dict[str, str] = {
    "gridsearch": "gridsearch", "grid": "gridsearch",
    "random": "random",
    "model_based": "model_based", "model-based": "model_based", "modelbased": "model_based",
}

#: ``autotuning`` keys the tuner uses, with DeepSpeed's defaults.
AUTOTUNING_KEYS: dict[str, Any] = {
    "enabled": True,
    "fast": True,
    "metric": "throughput",
    "tuner_type": "gridsearch",
    "tuner_num_trials": 50,
    "tuner_early_stopping": 5,
    "min_train_micro_batch_size_per_gpu": 1,
    "max_train_micro_batch_size_per_gpu": 1024,
    "max_train_batch_size": None,
    "num_tuning_micro_batch_sizes": 3,
    "results_dir": "autotuning_results",
    "exps_dir": "autotuning_exps",
    "mp_size": 1,
}

# DeepSpeed keys that only matter to DeepSpeed's own launcher/profiler; accepted, unused.
_IGNORED_KEYS = frozenset({
    "start_profile_step", "end_profile_step", "metric_path", "arg_mappings", "model_info",
    "model_info_path", "overwrite", "max_train_batch_size_per_gpu",
})


class AutotuneConfigError(ValueError):
    """An invalid autotuning or DeepSpeed configuration value."""


class UnknownAutotuningKeyWarning(UserWarning):
    """An ``autotuning`` key simcore does not know (probably a typo); it is ignored."""


def load_ds_config(config: Mapping[str, Any] | str | os.PathLike[str]) -> dict[str, Any]:
    """A deep copy of a DeepSpeed config given as a mapping or a JSON file path.

    Examples
    --------
    >>> load_ds_config({"train_micro_batch_size_per_gpu": 2})
    {'train_micro_batch_size_per_gpu': 2}
    """
    if isinstance(config, Mapping):
        return copy.deepcopy(dict(config))
    if isinstance(config, str | os.PathLike):
        path = os.fspath(config)
        try:
            with open(path, encoding="utf-8") as fh:
                data = json.load(fh)
        except FileNotFoundError:
            raise FileNotFoundError(
                f"no DeepSpeed config at {path!r}; pass an existing JSON file or a dict"
            ) from None
        except json.JSONDecodeError as exc:
            raise AutotuneConfigError(f"{path!r} is not valid JSON: {exc}") from None
        if not isinstance(data, dict):
            raise AutotuneConfigError(f"{path!r} must hold a JSON object (a DeepSpeed config)")
        return data
    raise AutotuneConfigError(
        f"config must be a dict or a path to a DeepSpeed JSON config, got {type(config).__name__}"
    )


def parse_stages(stage: Any) -> tuple[int, ...]:
    """ZeRO stages from ``zero_optimization.stage``: an int, a list of ints, or ``"all"``.

    Examples
    --------
    >>> parse_stages("all")
    (0, 1, 2, 3)
    >>> parse_stages([2, 1])
    (1, 2)
    >>> parse_stages(4)
    Traceback (most recent call last):
    ...
    simcore.autotune.config.AutotuneConfigError: zero_optimization.stage=4 is not a ZeRO stage; pass 0, 1, 2 or 3, a list such as [1, 2], or "all"
    """
    hint = 'pass 0, 1, 2 or 3, a list such as [1, 2], or "all"'
    if isinstance(stage, str):
        if stage.strip().lower() == "all":
            return (0, 1, 2, 3)
        raise AutotuneConfigError(f"zero_optimization.stage={stage!r} is not a ZeRO stage; {hint}")
    items = list(stage) if isinstance(stage, list | tuple) else [stage]
    if not items:
        raise AutotuneConfigError(f"zero_optimization.stage is an empty list; {hint}")
    out = set()
    for s in items:
        if isinstance(s, bool) or not isinstance(s, int) or not 0 <= s <= 3:
            raise AutotuneConfigError(
                f"zero_optimization.stage={stage!r} is not a ZeRO stage; {hint}"
            )
        out.add(s)
    return tuple(sorted(out))


def _int(section: str, key: str, value: Any, *, minimum: int = 1, optional: bool = False) -> Any:
    if optional and value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise AutotuneConfigError(
            f"{section}.{key} must be an integer >= {minimum}, got {value!r}"
        )
    return value


@dataclass(frozen=True)
class AutotuneConfig:
    """A validated view of a DeepSpeed config for tuning.

    Build it with :meth:`from_ds_config`. ``ds_config`` is the user's config without
    the ``autotuning`` section; ``zero_fixed`` holds the ``zero_optimization`` keys the
    user set (other than ``stage``), which the tuner never changes.
    """

    ds_config: Mapping[str, Any]
    stages: tuple[int, ...]
    stage_is_all: bool
    zero_fixed: Mapping[str, Any]
    metric: str
    fast: bool
    tuner_type: str
    tuner_num_trials: int
    tuner_early_stopping: int
    min_micro_batch: int
    max_micro_batch: int
    max_train_batch_size: int | None
    num_tuning_micro_batch_sizes: int
    results_dir: str
    exps_dir: str
    mp_size: int
    grad_accum: int
    train_batch_size: int | None
    precision: str
    autotuning: Mapping[str, Any] = field(default_factory=dict)

    @classmethod
    def from_ds_config(cls, config: Mapping[str, Any] | str | os.PathLike[str]) -> AutotuneConfig:
        """Validate a DeepSpeed config (dict or JSON path) once.

        Examples
        --------
        >>> AutotuneConfig.from_ds_config({"autotuning": {"tuner_type": "bayes"}})
        Traceback (most recent call last):
        ...
        simcore.autotune.config.AutotuneConfigError: autotuning.tuner_type='bayes' is unknown; pass one of ['gridsearch', 'model_based', 'random']
        """
        ds = load_ds_config(config)
        at = ds.pop("autotuning", None)
        if at is None:
            at = {}
        if not isinstance(at, Mapping):
            raise AutotuneConfigError(
                f"autotuning must be a JSON object, got {type(at).__name__}"
            )
        unknown = sorted(set(at) - set(AUTOTUNING_KEYS) - _IGNORED_KEYS)
        if unknown:
            warnings.warn(
                f"ignoring unknown autotuning keys {unknown}; known keys: "
                f"{sorted(AUTOTUNING_KEYS)}",
                UnknownAutotuningKeyWarning,
                stacklevel=3,
            )
        a = {k: at.get(k, v) for k, v in AUTOTUNING_KEYS.items()}
        if a["enabled"] is False:
            raise AutotuneConfigError(
                "autotuning.enabled is false; set it to true (or drop the key) to tune"
            )
        for key in ("enabled", "fast"):
            if not isinstance(a[key], bool):
                raise AutotuneConfigError(f"autotuning.{key} must be true or false, got {a[key]!r}")
        metric = a["metric"]
        if not isinstance(metric, str):
            raise AutotuneConfigError(
                f"autotuning.metric must be a name such as 'throughput', got {metric!r}"
            )
        try:
            get_metric(metric)
        except ValueError as exc:
            raise AutotuneConfigError(f"autotuning.metric: {exc}") from None
        tuner = a["tuner_type"]
        if not isinstance(tuner, str) or tuner.lower() not in TUNER_TYPES:
            raise AutotuneConfigError(
                f"autotuning.tuner_type={tuner!r} is unknown; pass one of "
                f"{sorted(set(TUNER_TYPES.values()))}"
            )
        sec = "autotuning"
        n_trials = _int(sec, "tuner_num_trials", a["tuner_num_trials"])
        early = _int(sec, "tuner_early_stopping", a["tuner_early_stopping"])
        lo = _int(sec, "min_train_micro_batch_size_per_gpu", a["min_train_micro_batch_size_per_gpu"])
        hi = _int(sec, "max_train_micro_batch_size_per_gpu", a["max_train_micro_batch_size_per_gpu"])
        if lo > hi:
            raise AutotuneConfigError(
                f"autotuning.min_train_micro_batch_size_per_gpu={lo} exceeds "
                f"max_train_micro_batch_size_per_gpu={hi}; pass min <= max"
            )
        max_tbs = _int(sec, "max_train_batch_size", a["max_train_batch_size"], optional=True)
        n_mbs = _int(sec, "num_tuning_micro_batch_sizes", a["num_tuning_micro_batch_sizes"])
        mp = _int(sec, "mp_size", a["mp_size"])
        for key in ("results_dir", "exps_dir"):
            if not isinstance(a[key], str) or not a[key]:
                raise AutotuneConfigError(f"autotuning.{key} must be a folder path, got {a[key]!r}")

        zero = ds.get("zero_optimization", {})
        if zero is None:
            zero = {}
        if not isinstance(zero, Mapping):
            raise AutotuneConfigError(
                f"zero_optimization must be a JSON object, got {type(zero).__name__}"
            )
        raw_stage = zero.get("stage", "all")
        stages = parse_stages(raw_stage)
        is_all = isinstance(raw_stage, str)
        zero_fixed = {k: copy.deepcopy(v) for k, v in zero.items() if k != "stage"}

        gas = _int("config", "gradient_accumulation_steps", ds.get("gradient_accumulation_steps", 1))
        tbs = _int("config", "train_batch_size", ds.get("train_batch_size"), optional=True)
        precision = precision_of(ds)
        if "fp16" in ds and "bf16" in ds and all(
            isinstance(ds[k], Mapping) and ds[k].get("enabled") is True for k in ("fp16", "bf16")
        ):
            raise AutotuneConfigError("fp16 and bf16 are both enabled; enable at most one")
        return cls(
            ds_config=ds, stages=stages, stage_is_all=is_all, zero_fixed=zero_fixed,
            metric=metric, fast=a["fast"], tuner_type=TUNER_TYPES[tuner.lower()],
            tuner_num_trials=n_trials, tuner_early_stopping=early, min_micro_batch=lo,
            max_micro_batch=hi, max_train_batch_size=max_tbs, num_tuning_micro_batch_sizes=n_mbs,
            results_dir=a["results_dir"], exps_dir=a["exps_dir"], mp_size=mp, grad_accum=gas,
            train_batch_size=tbs, precision=precision, autotuning=dict(at),
        )


def precision_of(ds_config: Mapping[str, Any]) -> str:
    """``"fp16"``, ``"bf16"`` or ``"fp32"`` from a DeepSpeed config.

    Examples
    --------
    >>> precision_of({"bf16": {"enabled": True}})
    'bf16'
    """
    for key in ("fp16", "bf16"):
        sect = ds_config.get(key)
        if isinstance(sect, Mapping) and sect.get("enabled", False) is True:
            return key
    return "fp32"
