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
>>> AutotuneConfig.from_ds_config({"autotuning": {}}).stages  # DeepSpeed: stage 0 only
(0,)
"""

from __future__ import annotations

import copy
import os
import warnings
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from ..engine.metrics import get_metric
from ..errors import SimcoreInputError
from ..io import check_json_value, read_json_file
from . import deepspeed as ds

__all__ = [
    "AUTOTUNING_KEYS",
    "AutotuneConfig",
    "AutotuneConfigError",
    "TUNER_TYPES",
    "UnknownAutotuningKeyWarning",
    "UnusedAutotuningKeyWarning",
    "load_ds_config",
    "parse_stages",
]

#: Tuner names (DeepSpeed's) and accepted spellings.
TUNER_TYPES: dict[str, str] = {
    "gridsearch": "gridsearch", "grid": "gridsearch",
    "random": "random",
    "model_based": "model_based", "model-based": "model_based", "modelbased": "model_based",
}

# DeepSpeed's ``autotuning`` keys and defaults, and the ones read but not acted on.
AUTOTUNING_KEYS = ds.AUTOTUNING_KEYS

class AutotuneConfigError(SimcoreInputError):
    """An invalid autotuning or DeepSpeed configuration value (a user mistake: the CLI
    prints it as one line and exits 2)."""


class UnknownAutotuningKeyWarning(UserWarning):
    """An ``autotuning`` key simcore does not know (probably a typo); it is ignored."""


class UnusedAutotuningKeyWarning(UserWarning):
    """A documented ``autotuning`` key simcore reads but does not act on (says why)."""


def load_ds_config(config: Mapping[str, Any] | str | os.PathLike[str]) -> dict[str, Any]:
    """A deep copy of a DeepSpeed config given as a mapping or a JSON file path.

    The file must be a regular file (a folder or a FIFO is refused, never read) of at
    most :data:`simcore.io.MAX_INPUT_BYTES`; a NaN or infinite number anywhere (Python's
    ``json`` reads ``NaN``, strict JSON readers do not) is refused with its key path, as
    is nesting deeper than :data:`simcore.io.MAX_JSON_DEPTH`.

    Examples
    --------
    >>> load_ds_config({"train_micro_batch_size_per_gpu": 2})
    {'train_micro_batch_size_per_gpu': 2}
    >>> load_ds_config({"zero_optimization": {"reduce_bucket_size": [float("nan"), 5e8]}})
    Traceback (most recent call last):
    ...
    simcore.autotune.config.AutotuneConfigError: the DeepSpeed config: zero_optimization.reduce_bucket_size[0] is NaN; pass a finite number (strict JSON has no NaN or Infinity)
    """
    if isinstance(config, Mapping):
        try:
            check_json_value(config, source="the DeepSpeed config")
        except SimcoreInputError as exc:
            raise AutotuneConfigError(str(exc)) from None
        return copy.deepcopy(dict(config))
    if isinstance(config, str | os.PathLike):
        path = os.fspath(config)
        try:
            data = read_json_file(path, finite=True)
        except FileNotFoundError:
            raise FileNotFoundError(
                f"no DeepSpeed config at {path!r}; pass an existing JSON file or a dict"
            ) from None
        except SimcoreInputError as exc:
            raise AutotuneConfigError(str(exc)) from None
        except OSError as exc:
            raise AutotuneConfigError(f"cannot read {path!r} ({exc.strerror or exc}); pass a "
                                      "readable JSON file") from None
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


def _batch_value(key: str, value: Any, *, auto: int | None) -> int | None:
    """An int, ``"auto"`` (Hugging Face: ``auto``, else None), or ``None`` if absent."""
    if value is None:
        return None
    if value == "auto":
        return auto
    return _int("config", key, value)


@dataclass(frozen=True)
class AutotuneConfig:
    """A validated view of a DeepSpeed config for tuning.

    Build it with :meth:`from_ds_config`. ``ds_config`` is the user's config without
    the ``autotuning`` section. ``zero_fixed`` holds the ``zero_optimization`` keys the
    user set to one value (other than ``stage``), which the tuner never changes;
    ``zero_space`` those set to a DeepSpeed tuning list (``reduce_bucket_size: [5e7,
    5e8]``): full mode tunes over the list, fast mode uses its first value, as DeepSpeed
    does. ``micro_batches`` is a ``train_micro_batch_size_per_gpu`` list (tried as given,
    no micro-batch search). With no ``zero_optimization.stage`` only stage 0 is tuned
    (DeepSpeed's default; ``stage_defaulted`` is then true).
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
    zero_space: Mapping[str, tuple[Any, ...]] = field(default_factory=dict)
    micro_batches: tuple[int, ...] | None = None
    min_train_batch_size: int = 1
    overwrite: bool = True
    start_profile_step: int = 3
    end_profile_step: int = 5
    arg_mappings: Mapping[str, str] | None = None
    stage_defaulted: bool = False

    @classmethod
    def from_ds_config(cls, config: Mapping[str, Any] | str | os.PathLike[str], *,
                       user_args: Sequence[str] = ()) -> AutotuneConfig:
        """Validate a DeepSpeed config (dict or JSON path) once.

        ``user_args`` (the training script's arguments) resolve Hugging Face
        ``"auto"`` values: through ``autotuning.arg_mappings`` for the accumulation
        steps, and ``--fp16``/``--bf16`` for ``fp16/bf16.enabled: "auto"``.

        Examples
        --------
        >>> AutotuneConfig.from_ds_config({"autotuning": {"tuner_type": "bayes"}})
        Traceback (most recent call last):
        ...
        simcore.autotune.config.AutotuneConfigError: autotuning.tuner_type='bayes' is unknown; pass one of ['gridsearch', 'model_based', 'random']
        """
        ds_cfg = load_ds_config(config)
        at, a = _autotuning_section(ds_cfg)
        zero = _zero_section(ds_cfg)
        micro_batches, gas, tbs = _batch_section(ds_cfg, user_args=user_args,
                                                 mappings=a["arg_mappings"])
        precision = precision_of(ds_cfg, user_args=user_args)
        if "fp16" in ds_cfg and "bf16" in ds_cfg and all(
            isinstance(ds_cfg[k], Mapping) and ds_cfg[k].get("enabled") is True
            for k in ("fp16", "bf16")
        ):
            raise AutotuneConfigError("fp16 and bf16 are both enabled; enable at most one")
        mappings = a["arg_mappings"]
        return cls(
            ds_config=ds_cfg, stages=zero["stages"], stage_is_all=zero["stage_is_all"],
            zero_fixed=zero["zero_fixed"], metric=a["metric"], fast=a["fast"],
            tuner_type=TUNER_TYPES[a["tuner_type"].lower()],
            tuner_num_trials=a["tuner_num_trials"], tuner_early_stopping=a["tuner_early_stopping"],
            min_micro_batch=a["min_train_micro_batch_size_per_gpu"],
            max_micro_batch=a["max_train_micro_batch_size_per_gpu"],
            max_train_batch_size=a["max_train_batch_size"],
            num_tuning_micro_batch_sizes=a["num_tuning_micro_batch_sizes"],
            results_dir=a["results_dir"], exps_dir=a["exps_dir"], mp_size=a["mp_size"],
            grad_accum=gas or 1, train_batch_size=tbs, precision=precision, autotuning=dict(at),
            zero_space=zero["zero_space"], micro_batches=micro_batches,
            min_train_batch_size=a["min_train_batch_size"], overwrite=a["overwrite"],
            start_profile_step=a["start_profile_step"], end_profile_step=a["end_profile_step"],
            arg_mappings=dict(mappings) if mappings else None,
            stage_defaulted=zero["stage_defaulted"],
        )


def _autotuning_section(ds_cfg: dict[str, Any]) -> tuple[Mapping[str, Any], dict[str, Any]]:
    """Pop ``autotuning`` from ``ds_cfg``: (the section as given, every key of
    :data:`AUTOTUNING_KEYS` with its value checked or DeepSpeed's default)."""
    at = ds_cfg.pop("autotuning", None)
    if at is None:
        at = {}
    if not isinstance(at, Mapping):
        raise AutotuneConfigError(
            f"autotuning must be a JSON object, got {type(at).__name__}"
        )
    unknown = sorted(set(at) - set(AUTOTUNING_KEYS))
    if unknown:  # stacklevel: the caller of AutotuneConfig.from_ds_config
        warnings.warn(
            f"ignoring unknown autotuning keys {unknown}; known keys: "
            f"{sorted(AUTOTUNING_KEYS)}",
            UnknownAutotuningKeyWarning,
            stacklevel=4,
        )
    for key in sorted(set(at) & set(ds.UNUSED_AUTOTUNING_KEYS)):
        warnings.warn(f"autotuning.{key} is not used: {ds.UNUSED_AUTOTUNING_KEYS[key]}",
                      UnusedAutotuningKeyWarning, stacklevel=4)
    a = {k: at.get(k, v) for k, v in AUTOTUNING_KEYS.items()}
    if a["enabled"] is False:
        raise AutotuneConfigError(
            "autotuning.enabled is false; set it to true (or drop the key) to tune"
        )
    for key in ("enabled", "fast", "overwrite"):
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
    _check_autotuning_numbers(a)
    for key in ("results_dir", "exps_dir"):
        if not isinstance(a[key], str) or not a[key]:
            raise AutotuneConfigError(f"autotuning.{key} must be a folder path, got {a[key]!r}")
    mappings = a["arg_mappings"]
    if mappings is not None and not (isinstance(mappings, Mapping) and all(
            isinstance(k, str) and isinstance(v, str) for k, v in mappings.items())):
        raise AutotuneConfigError(
            "autotuning.arg_mappings must map DeepSpeed keys to script arguments, e.g. "
            '{"train_micro_batch_size_per_gpu": "--per_device_train_batch_size"}')
    return at, a


def _check_autotuning_numbers(a: dict[str, Any]) -> None:
    """The integer keys of the ``autotuning`` section and their min <= max pairs."""
    sec = "autotuning"
    for key in ("tuner_num_trials", "tuner_early_stopping", "min_train_micro_batch_size_per_gpu",
                "max_train_micro_batch_size_per_gpu"):
        _int(sec, key, a[key])
    lo, hi = a["min_train_micro_batch_size_per_gpu"], a["max_train_micro_batch_size_per_gpu"]
    if lo > hi:
        raise AutotuneConfigError(
            f"autotuning.min_train_micro_batch_size_per_gpu={lo} exceeds "
            f"max_train_micro_batch_size_per_gpu={hi}; pass min <= max"
        )
    max_tbs = _int(sec, "max_train_batch_size", a["max_train_batch_size"], optional=True)
    min_tbs = _int(sec, "min_train_batch_size", a["min_train_batch_size"])
    if max_tbs is not None and min_tbs > max_tbs:
        raise AutotuneConfigError(f"autotuning.min_train_batch_size={min_tbs} exceeds "
                                  f"max_train_batch_size={max_tbs}; pass min <= max")
    for key in ("num_tuning_micro_batch_sizes", "mp_size", "start_profile_step",
                "end_profile_step"):
        _int(sec, key, a[key])
    start, end = a["start_profile_step"], a["end_profile_step"]
    if end <= start:
        raise AutotuneConfigError(f"autotuning.end_profile_step={end} must exceed "
                                  f"start_profile_step={start}")


def _zero_section(ds_cfg: Mapping[str, Any]) -> dict[str, Any]:
    """``zero_optimization``: the stages to try (``stages``, ``stage_is_all``,
    ``stage_defaulted``), the keys set to one value (``zero_fixed``) and those set to a
    tuning list (``zero_space``)."""
    zero = ds_cfg.get("zero_optimization", {})
    if zero is None:
        zero = {}
    if not isinstance(zero, Mapping):
        raise AutotuneConfigError(
            f"zero_optimization must be a JSON object, got {type(zero).__name__}"
        )
    raw_stage = zero.get("stage", 0)  # DeepSpeed: no stage means stage 0 only
    zero_fixed = {k: copy.deepcopy(v) for k, v in zero.items()
                  if k != "stage" and not isinstance(v, list)}
    zero_space: dict[str, tuple[Any, ...]] = {}
    stages = parse_stages(raw_stage)
    for k, v in zero.items():
        if k != "stage" and isinstance(v, list):
            if not v:
                raise AutotuneConfigError(f"zero_optimization.{k} is an empty list; pass "
                                          "a value or a list of values to tune")
            zero_space[k] = tuple(v)
    return {"stages": stages, "stage_is_all": isinstance(raw_stage, str),
            "stage_defaulted": "stage" not in zero, "zero_fixed": zero_fixed,
            "zero_space": zero_space}


def _batch_section(ds_cfg: Mapping[str, Any], *, user_args: Sequence[str],
                   mappings: Mapping[str, str] | None
                   ) -> tuple[tuple[int, ...] | None, int | None, int | None]:
    """(the ``train_micro_batch_size_per_gpu`` list or None, the gradient accumulation
    steps, a fixed ``train_batch_size`` or None), ``"auto"`` resolved from ``user_args``."""
    mbs = ds_cfg.get("train_micro_batch_size_per_gpu")
    micro_batches = None
    if isinstance(mbs, list):
        vals = [m for m in mbs if isinstance(m, int) and not isinstance(m, bool) and m > 0]
        if not vals:
            raise AutotuneConfigError(
                f"train_micro_batch_size_per_gpu={mbs!r} holds no positive integer; pass "
                "a list such as [1, 2, 4]")
        micro_batches = tuple(sorted(set(vals)))
    elif mbs is not None and mbs != "auto":
        _int("config", "train_micro_batch_size_per_gpu", mbs)
    for key in ("gradient_accumulation_steps", "train_batch_size"):
        if isinstance(ds_cfg.get(key), list):
            raise AutotuneConfigError(
                f"{key} is a list; DeepSpeed's autotuner does not tune it, pass one "
                "integer or \"auto\"")
    auto_gas = ds.mapped_value(user_args, mappings=mappings,
                               key="gradient_accumulation_steps") or 1
    gas = _batch_value("gradient_accumulation_steps",
                       ds_cfg.get("gradient_accumulation_steps", 1), auto=auto_gas)
    tbs = _batch_value("train_batch_size", ds_cfg.get("train_batch_size"), auto=None)
    return micro_batches, gas, tbs


def precision_of(ds_config: Mapping[str, Any], *, user_args: Sequence[str] = ()) -> str:
    """``"fp16"``, ``"bf16"`` or ``"fp32"`` from a DeepSpeed config.

    ``"enabled": "auto"`` (Hugging Face) is resolved from the script's ``--fp16`` /
    ``--bf16`` argument, as the Trainer does.

    Examples
    --------
    >>> precision_of({"bf16": {"enabled": True}})
    'bf16'
    >>> precision_of({"fp16": {"enabled": "auto"}}, user_args=["--fp16"])
    'fp16'
    """
    for key in ("fp16", "bf16"):
        sect = ds_config.get(key)
        if not isinstance(sect, Mapping):
            continue
        on = sect.get("enabled", False)
        if on is True or (on == "auto" and f"--{key}" in user_args):
            return key
    return "fp32"
