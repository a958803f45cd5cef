"""Experiments, trials and tuning results; the optimal-config writers.

Every selection here goes through :mod:`simcore.engine.metrics` (:func:`select_best`,
:func:`metric_value`); a trial that failed, or has no value for the metric, never wins.

Examples
--------
>>> t = Trial("z1_gas1_tmbspg2", stage=1, micro_batch=2, grad_accum=1, status="ok",
...           metrics={"latency": 8.0})
>>> t.value("latency")
8.0
>>> Trial("x", stage=1, micro_batch=2, grad_accum=1, status="failed",
...       metrics={"latency": 1.0}).value("latency") is None
True
"""

from __future__ import annotations

import copy
import json
import math
import os
import shlex
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Literal

from ..engine.metrics import get_metric, metric_is_better, metric_key, metric_value, select_best
from ..io import write_files_atomic
from . import deepspeed as ds

__all__ = [
    "Experiment",
    "NoResultError",
    "Trial",
    "TuneResult",
    "atomic_write_text",
    "atomic_write_texts",
    "experiment_name",
    "optimal_ds_config",
    "render_command",
    "summary_table",
]

#: Short names of ZeRO knobs in experiment names (DeepSpeed-style acronyms).
_ACRONYMS = {
    "overlap_comm": "oc",
    "reduce_bucket_size": "rbs",
    "allgather_bucket_size": "abs",
    "stage3_prefetch_bucket_size": "pbs",
    "reduce_scatter": "rs",
    "contiguous_gradients": "cg",
}


class NoResultError(RuntimeError):
    """No successful trial with a value for the metric, so there is nothing to write."""


def _fmt_value(v: Any) -> str:
    if isinstance(v, bool):
        return str(int(v))
    if isinstance(v, float) and v.is_integer():
        v = int(v)
    if isinstance(v, int) and v >= 10_000:
        short = f"{v:.0e}"
        if float(short) == v:  # exact only: distinct values must give distinct names
            return short.replace("+0", "").replace("+", "")
    return str(v).replace(" ", "")


def experiment_name(stage: int, *, micro_batch: int, grad_accum: int,
                    knobs: Mapping[str, Any] | None = None) -> str:
    """DeepSpeed-style experiment name, e.g. ``z2_gas1_tmbspg4`` (+ tuned knobs).

    Examples
    --------
    >>> experiment_name(2, micro_batch=4, grad_accum=1,
    ...                 knobs={"overlap_comm": True, "reduce_bucket_size": 5e8})
    'z2_gas1_tmbspg4_oc1_rbs5e8'
    """
    parts = [f"z{stage}", f"gas{grad_accum}", f"tmbspg{micro_batch}"]
    for k in sorted(knobs or {}):
        parts.append(f"{_ACRONYMS.get(k, k)}{_fmt_value(knobs[k])}")  # type: ignore[index]
    return "_".join(parts)


@dataclass(frozen=True)
class Experiment:
    """One configuration to run.

    ``ds_config`` is the full DeepSpeed config for the run (no ``autotuning``
    section); ``knobs`` the tuned ``zero_optimization`` keys (beyond ``stage``).
    """

    name: str
    stage: int
    micro_batch: int
    grad_accum: int
    ds_config: Mapping[str, Any]
    knobs: Mapping[str, Any] = field(default_factory=dict)
    n_gpus: int = 1
    mp: int = 1
    phase: str = "tune"

    @property
    def zero(self) -> dict[str, Any]:
        """The ``zero_optimization`` section of the run."""
        return dict(self.ds_config.get("zero_optimization", {}))


@dataclass(frozen=True)
class Trial:
    """The outcome of one experiment.

    Attributes
    ----------
    status : {"ok", "failed"}
        ``"failed"`` for a crash, an out-of-memory run, a timeout, missing or malformed
        metrics. A failed trial's ``metrics`` (if any) are kept for the record but
        :meth:`value` is ``None``, so it never wins.
    error : str
        Why it failed (the last stderr line, the timeout, ...).
    phase : str
        ``"probe"`` (micro-batch limit search), ``"tune"`` or ``"recorded"``.
    """

    name: str
    stage: int
    micro_batch: int
    grad_accum: int
    status: Literal["ok", "failed"]
    metrics: Mapping[str, Any] | None = None
    error: str = ""
    ds_config: Mapping[str, Any] = field(default_factory=dict)
    knobs: Mapping[str, Any] = field(default_factory=dict)
    phase: str = "tune"
    duration_s: float = 0.0
    result_dir: str | None = None
    command: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if self.status not in ("ok", "failed"):
            raise ValueError(f"Trial.status must be 'ok' or 'failed', got {self.status!r}")

    @property
    def ok(self) -> bool:
        return self.status == "ok"

    def value(self, metric: str) -> float | None:
        """``metric`` from this trial's metrics (exact key first, then aliases); ``None``
        if the trial failed or has no usable such value (:meth:`value_problem`).

        Examples
        --------
        >>> t = Trial("a", stage=1, micro_batch=1, grad_accum=1, status="ok",
        ...           metrics={"latency": -3.0, "throughput": 5.0})
        >>> t.value("latency") is None, t.value("throughput")
        (True, 5.0)
        """
        if not self.ok or self.value_problem(metric) is not None:
            return None
        return metric_value(self.metrics, metric)

    def value_problem(self, metric: str) -> str | None:
        """Why this trial's metrics hold no usable ``metric`` reading, or None: the key is
        missing, or its value is not a finite number, or (DeepSpeed's latency,
        throughput, FLOPS) not positive
        (:func:`simcore.autotune.deepspeed.metric_reading_problem`)."""
        key = metric_key(self.metrics, metric)
        if key is None or self.metrics is None:
            return f"no {metric!r} in its metrics"
        return ds.metric_reading_problem(get_metric(metric).name, self.metrics[key])

    def judged(self, metric: str) -> Trial:
        """This trial, or a failed copy of it when it succeeded without a usable ``metric``
        value: a run that reports an impossible or no value is a failed run.

        Examples
        --------
        >>> t = Trial("a", stage=1, micro_batch=1, grad_accum=1, status="ok",
        ...           metrics={"latency": float("nan")})
        >>> j = t.judged("latency")
        >>> j.status, j.error
        ('failed', 'no usable metric: latency nan is not a finite number')
        """
        if not self.ok:
            return self
        why = self.value_problem(metric)
        return self if why is None else replace(self, status="failed",
                                                error=f"no usable metric: {why}")

    def experiment_config(self) -> dict[str, Any]:
        """The DeepSpeed config this trial ran (stage, knobs and batch keys set)."""
        cfg = copy.deepcopy(dict(self.ds_config))
        cfg.pop("autotuning", None)
        zero = dict(cfg.get("zero_optimization") or {})
        cfg["zero_optimization"] = {**zero, "stage": int(self.stage),
                                    **copy.deepcopy(dict(self.knobs))}
        cfg["train_micro_batch_size_per_gpu"] = int(self.micro_batch)
        cfg["gradient_accumulation_steps"] = int(self.grad_accum)
        return cfg

    @classmethod
    def from_experiment(cls, experiment: Experiment, **kw: Any) -> Trial:
        """A trial carrying the experiment's identity."""
        return cls(name=experiment.name, stage=experiment.stage,
                   micro_batch=experiment.micro_batch, grad_accum=experiment.grad_accum,
                   ds_config=experiment.ds_config, knobs=dict(experiment.knobs),
                   phase=experiment.phase, **kw)


def optimal_ds_config(
    user_config: Mapping[str, Any],
    *,
    trial: Trial,
    n_gpus: int | None = None,
    mp: int = 1,
) -> dict[str, Any]:
    """The user's DeepSpeed config merged with a trial's settings
    (:func:`simcore.autotune.deepspeed.optimal_ds_config` on the trial's config).

    Examples
    --------
    >>> user = {"zero_optimization": {"stage": "all", "offload_optimizer": {"device": "cpu"}},
    ...         "autotuning": {"enabled": True}, "fp16": {"enabled": True}}
    >>> t = Trial("z2_gas1_tmbspg4", stage=2, micro_batch=4, grad_accum=1, status="ok")
    >>> cfg = optimal_ds_config(user, trial=t)
    >>> cfg["zero_optimization"], cfg["train_micro_batch_size_per_gpu"], "autotuning" in cfg
    ({'stage': 2, 'offload_optimizer': {'device': 'cpu'}}, 4, False)
    """
    return ds.optimal_ds_config(user_config, experiment_config=trial.experiment_config(),
                                n_gpus=n_gpus, mp=mp)


def atomic_write_text(text: str, *, path: str | os.PathLike[str]) -> Path:
    """Write ``text`` to ``path`` atomically (temp file in the same folder + os.replace,
    :func:`simcore.io.write_bytes_atomic`), creating its folder; a new file gets the
    usual mode (``0o666`` less the umask).

    Readers see the old file or the new one, never a partial write.

    Examples
    --------
    >>> import tempfile, os
    >>> with tempfile.TemporaryDirectory() as d:
    ...     p = atomic_write_text("hi\\n", path=os.path.join(d, "a.txt"))
    ...     p.read_text()
    'hi\\n'
    """
    return atomic_write_texts({path: text})[0]


def atomic_write_texts(texts: Mapping[str | os.PathLike[str], str]) -> list[Path]:
    """Write several UTF-8 text files all or nothing (:func:`simcore.io.write_files_atomic`:
    every temporary file is complete before any target is replaced), creating their
    folders."""
    for p in texts:
        Path(p).parent.mkdir(parents=True, exist_ok=True)
    return write_files_atomic({p: t.encode("utf-8") for p, t in texts.items()})


def _num(v: float | None, unit_scale: float = 1.0) -> str:
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return "-"
    x = v / unit_scale
    if x != 0 and (abs(x) >= 1e6 or abs(x) < 1e-2):
        return f"{x:.3e}"
    return f"{x:,.2f}"


def summary_table(trials: Sequence[Trial], *, metric: str, best: Trial | None = None) -> str:
    """A plain-text table of trials; the best one is marked ``*``, ``[metric]`` is the
    value it was ranked by (the key the user named, else the alias).

    Examples
    --------
    >>> ts = [Trial("a", stage=1, micro_batch=1, grad_accum=1, status="ok",
    ...             metrics={"latency": 30.0}),
    ...       Trial("b", stage=1, micro_batch=2, grad_accum=1, status="failed", error="OOM")]
    >>> print(summary_table(ts, metric="latency", best=ts[0]))
       experiment  stage  mbs  gas  status  [latency]  latency_us  throughput  FLOPS_per_gpu  mem_GB  note
       ----------  -----  ---  ---  ------  ---------  ----------  ----------  -------------  ------  ----
    *  a               1    1    1  ok          30.00       30.00           -              -       -
       b               1    2    1  failed          -           -           -              -       -  OOM
    """
    headers = ["", "experiment", "stage", "mbs", "gas", "status", f"[{metric}]",
               "latency_us", "throughput", "FLOPS_per_gpu", "mem_GB", "note"]
    rows = []
    for t in trials:
        m = t.metrics or {}
        rows.append([
            "*" if best is not None and t is best else "",
            t.name, str(t.stage), str(t.micro_batch), str(t.grad_accum), t.status,
            _num(t.value(metric)),
            _num(metric_value(m, "latency")),
            _num(metric_value(m, "throughput")),
            _num(metric_value(m, "FLOPS_per_gpu")),
            _num(metric_value(m, "mem_bytes"), 1e9),
            t.error.splitlines()[-1][:60] if t.error else ("" if t.phase == "tune" else t.phase),
        ])
    widths = [max(len(h), *(len(r[i]) for r in rows)) if rows else len(h)
              for i, h in enumerate(headers)]
    numeric = {2, 3, 4, 6, 7, 8, 9, 10}

    def line(cells: Sequence[str]) -> str:
        return "  ".join(c.rjust(widths[i]) if i in numeric else c.ljust(widths[i])
                         for i, c in enumerate(cells)).rstrip()

    sep = "  ".join(("-" if i else " ") * w for i, w in enumerate(widths))
    return "\n".join([line(headers), sep, *(line(r) for r in rows)])


@dataclass(frozen=True)
class TuneResult:
    """What :meth:`Autotuner.tune` (or :func:`rank`) found; returned on every path.

    Attributes
    ----------
    metric : str
        The metric as the user named it.
    best : Trial or None
        The winning trial (``None`` if no trial succeeded with a value).
    value : float or None
        Its metric value.
    trials : tuple of Trial
        Every trial, in the order run (probes included).
    stage_values : mapping int -> float or None
        Best value per considered stage; ``None`` (never 0) when a stage has no result.
    skipped : mapping int -> str
        Why a stage has no result or was not tried.
    notes : tuple of str
        Early stops and other events.
    results_dir : str, optional
        Where :meth:`write` writes by default (``autotuning.results_dir``).

    Examples
    --------
    >>> trials = [Trial("a", stage=1, micro_batch=1, grad_accum=1, status="ok",
    ...                 metrics={"latency": 30.0}),
    ...           Trial("b", stage=1, micro_batch=2, grad_accum=1, status="ok",
    ...                 metrics={"latency": 8.0})]
    >>> r = TuneResult.from_trials(trials, metric="latency", stage_values={1: 8.0}, skipped={})
    >>> r.best.name, r.value
    ('b', 8.0)
    >>> r.describe()
    'best: ZeRO stage 1, micro-batch 2, gradient accumulation 1 -> latency 8.00 (lowest of 2 successful trials)'
    """

    metric: str
    best: Trial | None
    value: float | None
    trials: tuple[Trial, ...]
    stage_values: Mapping[int, float | None]
    skipped: Mapping[int, str]
    base_config: Mapping[str, Any] = field(default_factory=dict)
    n_gpus: int | None = None
    mp: int = 1
    notes: tuple[str, ...] = ()
    command: tuple[str, ...] = ()
    results_dir: str | None = None
    launch: Any = None
    resources: Any = None
    arg_mappings: Mapping[str, str] | None = None
    duration_s: float = 0.0
    overwrite: bool = True

    def __post_init__(self) -> None:
        object.__setattr__(self, "stage_values", dict(self.stage_values))
        object.__setattr__(self, "skipped", dict(self.skipped))

    @classmethod
    def from_trials(cls, trials: Sequence[Trial], *, metric: str, **kw: Any) -> TuneResult:
        """Pick the best trial with :func:`simcore.engine.metrics.select_best`."""
        get_metric(metric)
        best, value = select_best(trials, metric, value=lambda t: t.value(metric))
        return cls(metric=metric, best=best, value=value, trials=tuple(trials), **kw)

    @property
    def found(self) -> bool:
        return self.best is not None

    @property
    def best_config(self) -> dict[str, Any] | None:
        """``ds_config_optimal.json`` contents, or ``None`` without a winner."""
        if self.best is None:
            return None
        return optimal_ds_config(self.base_config, trial=self.best, n_gpus=self.n_gpus,
                                 mp=self.mp)

    def describe(self) -> str:
        """One line: the choice and its value, or why there is none."""
        if self.best is None:
            reasons = "; ".join(f"stage {s}: {r}" for s, r in sorted(self.skipped.items()))
            return f"no successful trial for metric {self.metric!r}" + (
                f" ({reasons})" if reasons else "")
        m = get_metric(self.metric)
        b = self.best
        word = "lowest" if m.direction == "min" else "highest"
        knobs = "".join(f", {k}={v}" for k, v in sorted(b.knobs.items()))
        ties = [t.name for t in self.trials if t is not b and t.value(self.metric) is not None
                and not metric_is_better(m, t.value(self.metric), self.value)
                and not metric_is_better(m, self.value, t.value(self.metric))]
        tie = f"; ties with {', '.join(ties)}, the first run is kept" if ties else ""
        return (f"best: ZeRO stage {b.stage}, micro-batch {b.micro_batch}, "
                f"gradient accumulation {b.grad_accum}{knobs} -> {self.metric} "
                f"{_num(self.value)} ({word} of {sum(t.ok for t in self.trials)} successful "
                f"trials{tie})")

    def summary(self) -> str:
        """Plain-text report: per-stage results, the trial table, the choice."""
        lines = [f"metric: {self.metric} ({get_metric(self.metric).direction})"]
        for s in sorted(set(self.stage_values) | set(self.skipped)):
            v = self.stage_values.get(s)
            why = self.skipped.get(s, "")
            lines.append(f"  stage {s}: " + (f"best {_num(v)}" if v is not None else "no result")
                         + (f" - {why}" if why else ""))
        lines.extend(f"  note: {n}" for n in self.notes)
        lines.append(summary_table(self.trials, metric=self.metric, best=self.best))
        lines.append(self.describe())
        return "\n".join(lines)

    def optimal_argv(self, ds_config_path: str | os.PathLike[str]) -> list[str]:
        """The training command (argument list) with ``ds_config_path`` as its config:
        the user's launcher options and script arguments when the result knows its
        launch (:func:`simcore.autotune.deepspeed.optimal_command`)."""
        path = os.fspath(ds_config_path)
        if self.launch is not None:
            return ds.optimal_command(self.launch, ds_config_path=path, resources=self.resources,
                                      config=self.best_config or {}, mappings=self.arg_mappings,
                                      n_gpus=self.n_gpus)
        args = list(self.command) or ["deepspeed", *ds.gpu_args(self.n_gpus), "train.py"]
        args = ds.apply_arg_mappings(args, mappings=self.arg_mappings,
                                     config=self.best_config or {})
        return ds.with_config(args, value=path)

    def optimal_command(self, ds_config_path: str | os.PathLike[str]) -> str:
        """:meth:`optimal_argv` as one shell-quoted line."""
        return shlex.join(self.optimal_argv(ds_config_path))

    def launch_optimal(self, ds_config_path: str | os.PathLike[str], **popen: Any) -> int:
        """Run :meth:`optimal_argv` (DeepSpeed's ``--autotuning run``) and return its exit
        code; output goes to this process's stdout/stderr unless ``popen`` redirects it."""
        import subprocess

        return subprocess.run(self.optimal_argv(ds_config_path), check=False, **popen).returncode

    def summary_txt(self) -> str:
        """DeepSpeed's ``summary.txt``: best value and experiment per stage, and global."""
        rows = []
        for s in sorted({t.stage for t in self.trials}):
            ts = [t for t in self.trials if t.stage == s]
            best, val = select_best(ts, self.metric, value=lambda t: t.value(self.metric))
            rows.append((f"z{s}", len(ts), val, best.name if best else None))
        rows.append(("global", len(self.trials), self.value,
                     self.best.name if self.best else None))
        return ds.summary_txt(rows, seconds=self.duration_s, n_experiments=len(self.trials))

    def write(self, out_dir: str | os.PathLike[str] | None = None) -> dict[str, Path]:
        """Write ``ds_config_optimal.json``, ``cmd_optimal.txt`` and ``summary.txt``
        (DeepSpeed's names and formats) atomically.

        Parameters
        ----------
        out_dir : path, optional
            Default: ``results_dir`` (the config's ``autotuning.results_dir``).

        Returns
        -------
        dict
            ``{"ds_config": path, "cmd": path, "summary": path}``.

        Raises
        ------
        NoResultError
            When no trial succeeded; nothing is written.

        Examples
        --------
        >>> import tempfile
        >>> t = Trial("z2_gas1_tmbspg4", stage=2, micro_batch=4, grad_accum=1, status="ok",
        ...           metrics={"throughput": 10.0})
        >>> r = TuneResult.from_trials([t], metric="throughput", stage_values={2: 10.0},
        ...                            skipped={}, n_gpus=8)
        >>> with tempfile.TemporaryDirectory() as d:
        ...     sorted(p.name for p in r.write(d).values())
        ['cmd_optimal.txt', 'ds_config_optimal.json', 'summary.txt']
        """
        if out_dir is None:
            if self.results_dir is None:
                raise ValueError("pass out_dir=: this result has no results_dir to default to")
            out_dir = self.results_dir
        cfg = self.best_config
        if cfg is None:
            raise NoResultError(
                f"nothing to write to {os.fspath(out_dir)!r}: {self.describe()}; widen the "
                "search (stages, micro-batch range) or check the failed trials' errors"
            )
        out = Path(out_dir)
        cfg_path, cmd_path, summary = out / ds.OPTIMAL_CONFIG, out / ds.OPTIMAL_CMD, \
            out / ds.SUMMARY_TXT
        # all or nothing: a failed write leaves the three files of the last run as they were
        atomic_write_texts({
            cfg_path: json.dumps(cfg, indent=2, allow_nan=False) + "\n",  # strict JSON
            cmd_path: self.optimal_command(cfg_path.resolve()) + "\n",
            summary: self.summary_txt(),
        })
        return {"ds_config": cfg_path, "cmd": cmd_path, "summary": summary}


def render_command(command: Sequence[str], *, ds_config: str, n_gpus: int | None = None) -> str:
    """``command`` pointing at ``ds_config``, as one shell-quoted line
    (:func:`simcore.autotune.deepspeed.with_config`); an empty command gives a generic
    ``deepspeed`` launcher line.

    Examples
    --------
    >>> render_command(["deepspeed", "train.py", "--deepspeed_config", "old.json"],
    ...                ds_config="new.json")
    'deepspeed train.py --deepspeed_config new.json'
    >>> render_command([], ds_config="c.json", n_gpus=8)
    'deepspeed --num_gpus 8 train.py --deepspeed_config c.json'
    """
    args = list(command) or ["deepspeed", *ds.gpu_args(n_gpus), "train.py"]
    return shlex.join(ds.with_config(args, value=ds_config))
