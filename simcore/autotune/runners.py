"""Runners turn an :class:`~simcore.autotune.results.Experiment` into a
:class:`~simcore.autotune.results.Trial`.

A runner is any object with ``n_gpus`` and ``run(experiment) -> Trial``; it may also
offer ``estimate(experiment) -> MemoryEstimate | None`` so the tuner can skip stages
whose model states cannot fit and bound the micro-batch search, and
``prefetch(experiments)`` to evaluate the experiments the tuner plans in one batch,
and ``costly = False`` when its experiments cost nothing to run (then ``"stage":
"all"`` tries every stage by default instead of DeepSpeed's early stop; a runner
without the attribute counts as costly).
``run`` never raises for a failed experiment: it returns a trial with
``status="failed"`` and the reason.

* :class:`SimulatorRunner` — the simcore engine's training model (no GPU).
* :class:`CommandRunner` — launches a real training command per experiment (a
  DeepSpeed launcher line), DeepSpeed's folder layout, timeout, captured logs.
* :class:`ResultsFolderRunner` — reads an existing DeepSpeed ``autotuning_exps/`` +
  ``autotuning_results/`` folder.
"""

from __future__ import annotations

import copy
import json
import math
import os
import shlex
import shutil
import signal
import stat
import subprocess
import time
import warnings
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

from ..errors import SimcoreInputError
from ..io import first_non_finite, read_json_file
from ..model.presets import get_family, get_model
from ..model.specs import Efficiency, HardwareFamily, Model
from . import deepspeed as ds
from .results import Experiment, Trial, atomic_write_text
from .training import (
    PRECISIONS,
    TUNE_DEFAULTS,
    TrainingEngine,
    TrainingEstimate,
    TrainingRun,
    precision_of,
    tune_runtime,
    with_memory,
)

__all__ = [
    "CommandRunner",
    "MalformedExperimentWarning",
    "MemoryEstimate",
    "ResultsFolderRunner",
    "Runner",
    "SimulatorRunner",
    "precision_of",
]


class MalformedExperimentWarning(UserWarning):
    """An experiment in a DeepSpeed results folder is malformed or partial; it is skipped."""


@dataclass(frozen=True)
class MemoryEstimate:
    """Per-GPU memory of a configuration: fixed model states + activations per sample.

    Examples
    --------
    >>> MemoryEstimate(40e9, 1e9, 72e9).max_micro_batch
    32
    """

    model_states_bytes: float
    activation_bytes_per_sample: float
    usable_bytes: float

    @property
    def states_fit(self) -> bool:
        return self.model_states_bytes < self.usable_bytes

    @property
    def max_micro_batch(self) -> int:
        """Largest micro-batch that fits (0 if none)."""
        room = self.usable_bytes - self.model_states_bytes
        if room <= 0:
            return 0
        if self.activation_bytes_per_sample <= 0:
            return 2**31
        return int(math.floor(room / self.activation_bytes_per_sample))


@runtime_checkable
class Runner(Protocol):
    """What the :class:`~simcore.autotune.Autotuner` needs from a runner (``estimate``
    and ``prefetch`` are optional, see the module docstring)."""

    n_gpus: int | None

    def run(self, experiment: Experiment) -> Trial: ...


def _gb(x: float) -> str:
    return f"{x / 1e9:.1f} GB"


class SimulatorRunner:
    """Runs experiments on the simcore engine's training model (no GPU).

    Each experiment becomes one engine training step (:func:`simcore.evaluate` in
    ``"train"`` mode; mapping and units in :mod:`simcore.autotune.training`): TP = mp,
    DP = n_gpus / mp, the experiment's ZeRO stage, micro-batch and accumulation steps.
    Results are cached per configuration; :meth:`prefetch` evaluates many experiments in
    one engine call (the :class:`~simcore.autotune.Autotuner` hands it every experiment
    it plans). The ZeRO knobs (``overlap_comm``, bucket sizes) do not change the engine's
    numbers.

    Parameters
    ----------
    model : str or Model
        A preset name (``simcore.model.presets.PRESETS``) or a :class:`~simcore.model.specs.Model`.
    family : str or HardwareFamily
        Hardware family (``"A100-80G"``, ``"H100-SXM"``, ...).
    n_gpus : int
        Total GPUs.
    gpu_mem_gb : float, optional
        Overrides the family's HBM per GPU.
    seq_len : int
        Tokens per sample.
    activation_checkpointing : bool
        Whether the model recomputes activations (engine ``recompute="full"``).
    precision : {"fp16", "bf16", "fp32"}, optional
        Default: from each experiment's DeepSpeed config (``fp16``/``bf16`` sections).
    efficiency : Efficiency, optional
    runtime : str
        The software stack (:data:`simcore.model.runtime.RUNTIMES`) whose profile sets
        what a DeepSpeed config does not (element-wise kernels, the loss, attention,
        gradient-reduction overlap): one that trains with DeepSpeed's model states
        (:func:`~simcore.autotune.training.tune_runtime`; default ``"deepspeed"``, e.g.
        ``"hf-eager"`` for the Hugging Face Trainer's eager kernels).

    Examples
    --------
    >>> r = SimulatorRunner("Llama 2 7B", family="A100-80G", n_gpus=8)
    >>> r.n_gpus, r.hardware.pe_hbm_gb
    (8, 85.9)
    """

    #: simulated experiments cost nothing: ``"stage": "all"`` tries every stage
    costly = False

    def __init__(
        self,
        model: str | Model = TUNE_DEFAULTS.model,
        *,
        family: str | HardwareFamily = TUNE_DEFAULTS.family,
        n_gpus: int = TUNE_DEFAULTS.n_gpus,
        gpu_mem_gb: float | None = None,
        seq_len: int = TUNE_DEFAULTS.seq_len,
        activation_checkpointing: bool = False,
        precision: str | None = None,
        efficiency: Efficiency | None = None,
        runtime: str = TUNE_DEFAULTS.runtime,
    ) -> None:
        self.model = get_model(model)
        fam = get_family(family)
        if isinstance(n_gpus, bool) or not isinstance(n_gpus, int) or n_gpus < 1:
            raise ValueError(f"n_gpus must be a positive integer, got {n_gpus!r}")
        if isinstance(seq_len, bool) or not isinstance(seq_len, int) or seq_len < 1:
            raise ValueError(f"seq_len must be a positive integer, got {seq_len!r}")
        if precision is not None and precision not in PRECISIONS:
            raise ValueError(f"precision={precision!r} is unknown; pass one of {list(PRECISIONS)}")
        self.runtime = tune_runtime(runtime, precision)
        self.family = fam
        self.hardware = with_memory(fam.hardware, gpu_mem_gb=gpu_mem_gb)
        self.topology = fam.topology
        self.n_gpus = n_gpus
        self.seq_len = seq_len
        self.activation_checkpointing = bool(activation_checkpointing)
        self.precision = precision
        self.efficiency = efficiency if efficiency is not None else Efficiency()
        self._engine = TrainingEngine(self.model, family=fam, hardware=self.hardware,
                                      efficiency=self.efficiency)
        self._done: dict[TrainingRun, TrainingEstimate] = {}

    def __repr__(self) -> str:
        return (f"SimulatorRunner({self.model.name!r}, family={self.family.name!r}, "
                f"n_gpus={self.n_gpus}, gpu_mem_gb={self.hardware.pe_hbm_gb}, "
                f"seq_len={self.seq_len})")

    def training_run(self, experiment: Experiment) -> TrainingRun:
        """The engine configuration of ``experiment`` on this runner's GPUs
        (``ValueError`` if it has none)."""
        return TrainingRun.from_experiment(
            experiment, n_gpus=self.n_gpus, seq_len=self.seq_len, precision=self.precision,
            activation_checkpointing=self.activation_checkpointing, runtime=self.runtime)

    def _simulate(self, runs: Sequence[TrainingRun]) -> list[TrainingEstimate]:
        todo = list(dict.fromkeys(r for r in runs if r not in self._done))
        self._done.update(zip(todo, self._engine.estimates(todo), strict=True))
        return [self._done[r] for r in runs]

    def prefetch(self, experiments: Sequence[Experiment]) -> None:
        """Evaluate ``experiments`` in one engine call (cached for :meth:`run`); those
        without an engine configuration are left for :meth:`run` to report."""
        runs = []
        for exp in experiments:
            try:
                runs.append(self.training_run(exp))
            except ValueError:
                continue
        self._simulate(runs)

    def simulate(self, experiment: Experiment) -> TrainingEstimate:
        """The :class:`~simcore.autotune.training.TrainingEstimate` of ``experiment``."""
        return self._simulate([self.training_run(experiment)])[0]

    def estimate(self, experiment: Experiment) -> MemoryEstimate:
        """Model states and activation bytes per sample of ``experiment``'s stage (the
        engine's memory at micro-batch 1 and 2; no step time is computed)."""
        states, per_sample = self._engine.memory(self.training_run(experiment))
        return MemoryEstimate(states, per_sample, self._engine.usable_bytes())

    def run(self, experiment: Experiment) -> Trial:
        """Simulate one experiment; out of memory gives a failed trial.

        Examples
        --------
        >>> from simcore.autotune import Experiment
        >>> exp = Experiment("z0_gas1_tmbspg1", stage=0, micro_batch=1, grad_accum=1,
        ...                  ds_config={"fp16": {"enabled": True}}, n_gpus=8)
        >>> t = SimulatorRunner("Llama 2 7B", n_gpus=8).run(exp)
        >>> t.status, t.error.split(":")[0]
        ('failed', 'out of memory')
        """
        try:
            est = self.simulate(experiment)
        except ValueError as exc:
            return Trial.from_experiment(experiment, status="failed", error=str(exc))
        if not est.valid:
            run = est.run
            return Trial.from_experiment(
                experiment, status="failed",
                error=(f"the engine rejects tp={run.mp} x dp={run.dp} for {self.model.name} on "
                       f"{self.family.name}: mp must divide the {self.model.n_heads} heads and "
                       f"divide or be a multiple of the {self.model.n_kv_heads} KV heads, and "
                       f"{run.n_gpus} GPUs must not exceed the family's "
                       f"{self.topology.n_devices}"),
            )
        if not est.fits:
            return Trial.from_experiment(
                experiment, status="failed",
                error=(f"out of memory: needs {_gb(est.mem_bytes)} per GPU (model states "
                       f"{_gb(est.model_states_bytes)} + activations {_gb(est.activation_bytes)}"
                       f"), {_gb(est.usable_bytes)} usable"),
            )
        return Trial.from_experiment(experiment, status="ok", metrics=est.metrics())


def _read_json(path: Path) -> tuple[Any, str]:
    """(data, "") or (None, reason): only a regular file of at most
    :data:`simcore.io.MAX_INPUT_BYTES` is read (a FIFO would block forever), and JSON
    nested deeper than :data:`simcore.io.MAX_JSON_DEPTH` is a reason, not a
    RecursionError."""
    try:
        return read_json_file(path), ""
    except FileNotFoundError:
        return None, f"{path.name} is missing"
    except SimcoreInputError as exc:
        return None, str(exc)
    except OSError as exc:
        return None, f"{path} cannot be read ({exc})"


def _text(path: Path, limit: int = 1 << 20) -> str:
    """The last ``limit`` bytes of the regular file ``path`` as text; "" if it is
    missing, unreadable or not a regular file (a FIFO is never opened for a blocking
    read)."""
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
    except OSError:
        return ""
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return ""
        with os.fdopen(os.dup(fd), "rb") as fh:
            size = fh.seek(0, os.SEEK_END)
            fh.seek(max(0, size - limit))
            return fh.read().decode("utf-8", errors="replace")
    except OSError:
        return ""
    finally:
        os.close(fd)


def _last_line(text: str) -> str:
    lines = [ln for ln in text.splitlines() if ln.strip()]
    return lines[-1].strip() if lines else ""


def _dump(path: Path, data: Any) -> None:
    atomic_write_text(json.dumps(data, indent=2) + "\n", path=path)


def judge(*, exit_code: int | None, stderr: str, metrics: Any, metrics_why: str,
          metrics_path: Path) -> tuple[str, str]:
    """("ok", "") or ("failed", why) for a finished run, from its exit status and log
    first, its ``metrics.json`` last: metrics written before a crash never count."""
    if exit_code not in (None, 0):
        last = ds.log_failure(stderr) or _last_line(stderr)
        return "failed", f"exit code {exit_code}" + (f": {last}" if last else "")
    failure = ds.log_failure(stderr)
    if failure is not None:
        return "failed", f"error in {ds.STDERR_LOG}: {failure}"
    if metrics is None:
        return "failed", f"no usable metrics: {metrics_why}"
    if not isinstance(metrics, dict):
        return "failed", f"{metrics_path} holds {type(metrics).__name__}, not an object"
    return "ok", ""


class CommandRunner:
    """Launches a training command per experiment and reads its ``metrics.json``.

    Each experiment gets DeepSpeed's layout: ``<exps_dir>/<name>.json`` and
    ``<results_dir>/<name>/{exp.json, ds_config.json, cmd.txt, stdout.log,
    stderr.log, metrics.json}``. Its config has the user's ``autotuning`` section with
    ``metric_path`` set there, so a DeepSpeed engine writes ``metrics.json`` and stops
    after ``end_profile_step``. A run succeeds only if it exits 0, its ``stderr.log``
    holds no error (:func:`simcore.autotune.deepspeed.log_failure`) and it wrote a
    metrics object; the exit code is recorded in ``exp.json`` (``exit_code``).

    Two ways to launch:

    * ``launch`` (a :class:`~simcore.autotune.deepspeed.LaunchSpec`) and
      ``resources``: DeepSpeed's scheduler format, ``deepspeed [--hostfile H] --include
      HOST:SLOTS@... --master_port P script args`` with the experiment's config in
      DeepSpeed's base64 form after ``--deepspeed_config`` (or HF's ``--deepspeed``)
      and ``arg_mappings`` arguments set to the experiment's values;
    * ``command``: any command; ``{ds_config}``, ``{metrics_path}``, ``{exp_dir}`` and
      ``{name}`` are filled, else the config path replaces the ``--deepspeed_config``
      value (or is appended).

    Parameters
    ----------
    command : sequence of str or str, optional
    n_gpus : int
        GPUs each run uses in total (default: ``resources.n_gpus``).
    results_dir, exps_dir : path
    timeout_s : float
        Wall-clock limit per run; a run over it is killed and recorded as failed.
    env : mapping, optional
    cwd : path, optional
    estimator : runner with ``estimate``, optional
        E.g. a :class:`SimulatorRunner` to bound the micro-batch search by memory.
    launch, resources, executable : optional
        DeepSpeed launches (``executable`` is the launcher, default ``deepspeed``).
    autotuning : mapping, optional
        The user's ``autotuning`` section, copied into each experiment's config.
    arg_mappings : mapping, optional
    reuse : bool
        Reuse an experiment folder that finished before (``stderr.log`` present, not
        interrupted) instead of running it again: DeepSpeed's behaviour with
        ``overwrite: false``.

    Examples
    --------
    >>> import sys
    >>> r = CommandRunner([sys.executable, "train.py"], n_gpus=8)
    >>> r.n_gpus
    8
    """

    #: each experiment is a real training job: DeepSpeed's stage early stop by default
    costly = True

    def __init__(
        self,
        command: Sequence[str] | str = (),
        *,
        n_gpus: int | None = None,
        results_dir: str | os.PathLike[str] = ds.RESULTS_DIR,
        exps_dir: str | os.PathLike[str] = ds.EXPS_DIR,
        timeout_s: float = 3600.0,
        env: Mapping[str, str] | None = None,
        cwd: str | os.PathLike[str] | None = None,
        estimator: Any = None,
        start_profile_step: int = 3,
        end_profile_step: int = 5,
        launch: ds.LaunchSpec | None = None,
        resources: ds.Resources | None = None,
        executable: str = "deepspeed",
        autotuning: Mapping[str, Any] | None = None,
        arg_mappings: Mapping[str, str] | None = None,
        reuse: bool = False,
    ) -> None:
        args = shlex.split(command) if isinstance(command, str) else [str(a) for a in command]
        if launch is not None:
            if resources is None:
                raise ValueError("pass resources= with launch= (the hosts and GPU slots)")
            args = [executable]
            n_gpus = resources.n_gpus if n_gpus is None else n_gpus
        if not args:
            raise ValueError("command is empty; pass the training command, e.g. "
                             "['deepspeed', 'train.py', '--deepspeed_config', '{ds_config}']")
        exe = args[0]
        if os.sep not in exe and shutil.which(exe) is None:
            raise FileNotFoundError(
                f"command {exe!r} is not on PATH; pass the launcher's full path or install it"
            )
        if isinstance(n_gpus, bool) or not isinstance(n_gpus, int) or n_gpus < 1:
            raise ValueError(f"n_gpus must be a positive integer, got {n_gpus!r}")
        if not (isinstance(timeout_s, int | float) and timeout_s > 0):
            raise ValueError(f"timeout_s must be > 0 seconds, got {timeout_s!r}")
        self.command = tuple(args)
        self.n_gpus = n_gpus
        self.results_dir = Path(results_dir)
        self.exps_dir = Path(exps_dir)
        self.timeout_s = float(timeout_s)
        self.env = dict(env or {})
        self.cwd = None if cwd is None else Path(cwd)
        self.estimator = estimator
        self.start_profile_step = start_profile_step
        self.end_profile_step = end_profile_step
        self.launch, self.resources, self.executable = launch, resources, executable
        self.autotuning = {k: v for k, v in (autotuning or {}).items()
                           if k not in ("results_dir", "exps_dir")}
        if arg_mappings is None:
            arg_mappings = (autotuning or {}).get("arg_mappings")
        self.arg_mappings = dict(arg_mappings) if arg_mappings else None
        self.reuse = reuse
        self._count = 0

    def __repr__(self) -> str:
        return f"CommandRunner({shlex.join(self.command)!r}, n_gpus={self.n_gpus})"

    @classmethod
    def from_ds_config(
        cls,
        command: Sequence[str] | str,
        *,
        config: Mapping[str, Any] | str | os.PathLike[str],
        n_gpus: int | None = None,
        **kw: Any,
    ) -> CommandRunner:
        """A runner set up from the config's ``autotuning`` section: ``results_dir``,
        ``exps_dir``, ``start/end_profile_step``, ``arg_mappings`` and ``overwrite``
        (false: finished experiments are reused).

        Examples
        --------
        >>> import sys
        >>> r = CommandRunner.from_ds_config([sys.executable, "train.py"], n_gpus=8,
        ...     config={"autotuning": {"results_dir": "runs/results", "exps_dir": "runs/exps"}})
        >>> str(r.results_dir), str(r.exps_dir)
        ('runs/results', 'runs/exps')
        """
        from .config import AutotuneConfig

        user_args = kw["launch"].user_args if kw.get("launch") is not None else ()
        cfg = AutotuneConfig.from_ds_config(config, user_args=user_args)
        for key, value in (("results_dir", cfg.results_dir), ("exps_dir", cfg.exps_dir),
                           ("start_profile_step", cfg.start_profile_step),
                           ("end_profile_step", cfg.end_profile_step),
                           ("arg_mappings", cfg.arg_mappings), ("reuse", not cfg.overwrite),
                           ("autotuning", cfg.autotuning)):
            kw.setdefault(key, value)
        return cls(command, n_gpus=n_gpus, **kw)

    def estimate(self, experiment: Experiment) -> MemoryEstimate | None:
        est = getattr(self.estimator, "estimate", None)
        return est(experiment) if est is not None else None

    def _args(self, *, ds_config: Path, config: Mapping[str, Any], metrics: Path,
              exp_dir: Path, name: str, port: int) -> list[str]:
        if self.launch is not None:
            user = ds.with_config(list(self.launch.user_args), value=ds.encode_config(config))
            user = ds.apply_arg_mappings(user, mappings=self.arg_mappings, config=config)
            assert self.resources is not None
            return ds.experiment_command(self.launch, resources=self.resources,
                                         master_port=port, user_args=user,
                                         executable=self.executable)
        fills = {"{metrics_path}": str(metrics), "{exp_dir}": str(exp_dir), "{name}": name}
        args = []
        for a in self.command:
            for k, v in fills.items():
                a = a.replace(k, v)
            args.append(a)
        args = ds.apply_arg_mappings(args, mappings=self.arg_mappings, config=config)
        return ds.with_config(args, value=str(ds_config))

    def _record(self, experiment: Experiment, *, ds_cfg: dict[str, Any], exp_dir: Path,
                args: list[str], port: int) -> dict[str, Any]:
        """``exp.json`` with DeepSpeed's keys."""
        res = self.resources
        record: dict[str, Any] = {
            "name": experiment.name, "ds_config": ds_cfg,
            "num_gpus": res.gpus_per_node if res else self.n_gpus,
            "num_nodes": res.n_nodes if res else 1,
            "hostfile": (res.from_hostfile if res and res.from_hostfile else ds.DEFAULT_HOSTFILE),
            "exp_id": self._count, "result_dir": str(exp_dir), "master_port": port,
            "ds_config_path": str(exp_dir / ds.DS_CONFIG_JSON),
            "ds_config_base64": ds.encode_config(ds_cfg),
            "cmd": args,
        }
        if self.launch is not None:
            i = args.index(str(self.launch.user_script))
            record.update(launcher_args=args[1:i], user_script=args[i], user_args=args[i + 1:])
        return record

    def run(self, experiment: Experiment) -> Trial:
        exp_dir = (self.results_dir / experiment.name).resolve()
        if self.reuse and (exp_dir / ds.STDERR_LOG).exists() and not ds.was_interrupted(
                _text(exp_dir / ds.STDERR_LOG)):
            done, _ = read_experiment(exp_dir, self.exps_dir)
            if done is not None:
                return replace(done, phase=experiment.phase, knobs=dict(experiment.knobs))
        exp_dir.mkdir(parents=True, exist_ok=True)
        self.exps_dir.mkdir(parents=True, exist_ok=True)
        metrics_path = exp_dir / ds.METRICS_JSON
        metrics_path.unlink(missing_ok=True)  # never read a previous run's numbers
        port = int(self.launch.option("--master_port") if self.launch else
                   ds.DEFAULT_MASTER_PORT) + self._count
        ds_cfg = copy.deepcopy(dict(experiment.ds_config))
        ds_cfg["autotuning"] = {
            "start_profile_step": self.start_profile_step,
            "end_profile_step": self.end_profile_step, **copy.deepcopy(self.autotuning),
            "enabled": True, "metric_path": str(metrics_path),
        }
        cfg_path = exp_dir / ds.DS_CONFIG_JSON
        _dump(cfg_path, ds_cfg)
        args = self._args(ds_config=cfg_path, config=ds_cfg, metrics=metrics_path,
                          exp_dir=exp_dir, name=experiment.name, port=port)
        record = self._record(experiment, ds_cfg=ds_cfg, exp_dir=exp_dir, args=args, port=port)
        self._count += 1
        _dump(self.exps_dir / f"{experiment.name}.json",
              {k: record[k] for k in ("name", "ds_config", "num_gpus", "num_nodes", "hostfile")})
        _dump(exp_dir / ds.EXP_JSON, record)
        atomic_write_text(shlex.join(args) + "\n", path=exp_dir / ds.CMD_TXT)

        env = dict(os.environ)
        env.update(self.env)
        out_path, err_path = exp_dir / ds.STDOUT_LOG, exp_dir / ds.STDERR_LOG
        t0 = time.monotonic()
        common = dict(result_dir=str(exp_dir), command=tuple(args))
        with open(out_path, "wb") as out, open(err_path, "wb") as err:
            try:
                proc = subprocess.Popen(args, stdout=out, stderr=err, cwd=self.cwd, env=env,
                                        start_new_session=True)
            except OSError as exc:
                return Trial.from_experiment(experiment, status="failed",
                                             error=f"could not start {args[0]!r}: {exc}",
                                             **common)
            try:
                rc = proc.wait(timeout=self.timeout_s)
            except subprocess.TimeoutExpired:
                _kill_group(proc)
                _dump(exp_dir / ds.EXP_JSON, {**record, "exit_code": None, "timed_out": True})
                return Trial.from_experiment(
                    experiment, status="failed", duration_s=time.monotonic() - t0,
                    error=f"timed out after {self.timeout_s:g} s (killed)", **common)
            except BaseException:  # Ctrl-C or any error here: never orphan a training job
                _kill_group(proc)
                raise
        duration = time.monotonic() - t0
        _dump(exp_dir / ds.EXP_JSON, {**record, "exit_code": rc})
        metrics, why = _read_json(metrics_path)
        status, error = judge(exit_code=rc, stderr=_text(err_path), metrics=metrics,
                              metrics_why=why, metrics_path=metrics_path)
        return Trial.from_experiment(
            experiment, status=status, error=error, duration_s=duration,
            metrics=metrics if isinstance(metrics, dict) else None, **common)


def _kill_group(proc: subprocess.Popen) -> None:
    """Kill the process group this runner started (by its id) and reap it."""
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        proc.kill()
    proc.wait()


def _as_int(v: Any) -> int | None:
    if isinstance(v, bool):
        return None
    if isinstance(v, int):
        return v
    if isinstance(v, float) and v.is_integer():
        return int(v)
    return None


def read_experiment(d: Path, exps_dir: Path) -> tuple[Trial | None, str]:
    """(the trial recorded in experiment folder ``d``, a warning): the trial is ``None``
    when its config cannot be read; a malformed or partial experiment is a failed trial
    with a warning.

    Success is judged as for a live run (:func:`judge`): the exit code when the folder
    records one (simcore's ``exp.json`` does), then ``stderr.log``, then
    ``metrics.json``; a run that wrote metrics and then crashed is a failure.
    """
    name = d.name
    exp: Any = None
    problems = []
    for p in (d / ds.EXP_JSON, exps_dir / f"{name}.json"):
        if p.exists():
            exp, why = _read_json(p)
            if isinstance(exp, dict):
                break
            problems.append(why or f"{p} does not hold a JSON object")
            exp = None
    cfg: Any = None
    if (d / ds.DS_CONFIG_JSON).exists():
        cfg, why = _read_json(d / ds.DS_CONFIG_JSON)
        if not isinstance(cfg, dict):
            problems.append(why or f"{ds.DS_CONFIG_JSON} does not hold a JSON object")
            cfg = None
    if cfg is None and exp is not None and isinstance(exp.get("ds_config"), dict):
        cfg = exp["ds_config"]
    if cfg is None:
        return None, "; ".join([*problems, f"no readable {ds.DS_CONFIG_JSON} (or ds_config "
                                           f"in {ds.EXP_JSON}); skipped"])
    bad = first_non_finite(cfg)
    if bad is not None:  # never the winner: ds_config_optimal.json must be strict JSON
        return None, f"its DeepSpeed config's {bad} is not a finite number; skipped"
    g = _as_int(exp.get("num_gpus")) if exp else None
    nodes = (_as_int(exp.get("num_nodes")) if exp else None) or 1
    n_gpus = g * nodes if g else None
    zero = cfg.get("zero_optimization") or {}
    stage = _as_int(zero.get("stage", 0)) if isinstance(zero, dict) else None
    gas = _as_int(cfg.get("gradient_accumulation_steps", 1))
    mbs = _as_int(cfg.get("train_micro_batch_size_per_gpu"))
    if mbs is None and _as_int(cfg.get("train_batch_size")) and n_gpus and gas:
        mbs = cfg["train_batch_size"] // (gas * n_gpus)
    if stage is None or stage not in (0, 1, 2, 3) or not mbs or not gas:
        return None, (f"{ds.DS_CONFIG_JSON} lacks a valid zero_optimization.stage, "
                      "train_micro_batch_size_per_gpu or gradient_accumulation_steps; skipped")
    cmd_txt = _text(d / ds.CMD_TXT) or None
    command: tuple[str, ...] = ()
    if exp and isinstance(exp.get("cmd"), list):
        command = tuple(a for a in exp["cmd"] if isinstance(a, str))
    elif cmd_txt:
        try:
            command = tuple(shlex.split(cmd_txt))
        except ValueError:
            command = ()
    common: dict[str, Any] = dict(
        name=name, stage=stage, micro_batch=mbs, grad_accum=gas, ds_config=dict(cfg),
        knobs={k: v for k, v in zero.items() if k != "stage"}, phase="recorded",
        result_dir=str(d), command=command)
    logs = [(d / f).exists() for f in (ds.STDERR_LOG, ds.STDOUT_LOG)]
    metrics_path = d / ds.METRICS_JSON
    if not any(logs) and not metrics_path.exists():
        why = "no metrics.json and no logs (partial experiment)"
        return Trial(status="failed", error=why, **common), f"{why}; recorded as failed"
    metrics, why = _read_json(metrics_path)
    if metrics_path.exists() and not isinstance(metrics, dict):
        why = why or f"{ds.METRICS_JSON} does not hold a JSON object"
        return (Trial(status="failed", error=f"malformed metrics: {why}", **common),
                f"{why}; recorded as failed, never ranked")
    status, error = judge(exit_code=exp.get("exit_code") if exp else None,
                          stderr=_text(d / ds.STDERR_LOG), metrics=metrics,
                          metrics_why="no metrics.json (the run failed)",
                          metrics_path=metrics_path)
    if status == "failed" and error.startswith("no usable metrics"):
        error = _last_line(_text(d / ds.STDERR_LOG)) or "no metrics.json (the run failed)"
    return Trial(status=status, error=error,  # type: ignore[arg-type]
                 metrics=metrics if isinstance(metrics, dict) else None, **common), ""


class ResultsFolderRunner:
    """Reads the experiments of an existing DeepSpeed autotuning run.

    Layout: ``<path>/autotuning_exps/<name>.json`` and
    ``<path>/autotuning_results/<name>/{exp.json, ds_config.json, metrics.json,
    stdout.log, stderr.log}``. Each experiment is judged by :func:`read_experiment`;
    a malformed or partial one becomes a failed trial and warns
    :class:`MalformedExperimentWarning`. Nothing here raises for a bad experiment.

    Parameters
    ----------
    path : path
        The folder DeepSpeed ran in (holding ``autotuning_results/``), or the
        ``autotuning_results`` folder itself.
    results_dir, exps_dir : str
        Folder names inside ``path``.

    Attributes
    ----------
    trials : tuple of Trial
        Every recorded experiment, by name (DeepSpeed's profiling run left out).
    metric : str or None
        The ``autotuning.metric`` the folder was tuned for (from the experiments'
        configs), ``None`` if none says.
    mp_size : int
        Its ``autotuning.mp_size`` (default 1).
    overwrite : bool
        False when its configs say ``autotuning.overwrite: false``.
    user_config : dict or None
        The user's config as DeepSpeed recorded it in the profiling run
        (``profile_model_info/ds_config.json``, less DeepSpeed's own overrides: the
        ZeRO stage, micro-batch, ``memory_breakdown`` and the ``autotuning`` section).
    """

    #: the experiments already ran: reading them costs nothing
    costly = False

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        results_dir: str = ds.RESULTS_DIR,
        exps_dir: str = ds.EXPS_DIR,
    ) -> None:
        root = Path(path)
        hint = (f"pass the folder DeepSpeed's autotuner ran in (it holds {exps_dir}/ and "
                f"{results_dir}/)")
        if not root.is_dir():
            raise FileNotFoundError(f"no folder {os.fspath(path)!r}; {hint}")
        if (root / results_dir).is_dir():
            self.results_dir, self.exps_dir = root / results_dir, root / exps_dir
        elif root.name == results_dir or any(
            (d / ds.DS_CONFIG_JSON).exists() or (d / ds.EXP_JSON).exists()
            for d in root.iterdir() if d.is_dir()
        ):
            self.results_dir, self.exps_dir = root, root.parent / exps_dir
        else:
            raise FileNotFoundError(f"{os.fspath(path)!r} holds no {results_dir}/ folder; {hint}")
        foreign = ds.foreign_entries(self.results_dir, kind="results")
        experiments = [d for d in self.results_dir.iterdir() if d.is_dir()]
        if foreign and len(foreign) >= len(experiments):
            raise FileNotFoundError(
                f"{os.fspath(self.results_dir)!r} is not a DeepSpeed autotuning folder: "
                + ds.FOREIGN_HINT.format(", ".join(foreign[:3])).replace(
                    "pass another autotuning.results_dir/exps_dir or move them", hint))
        self.path = root
        self.trials: tuple[Trial, ...] = tuple(self._load())
        gpus = Counter(self._gpus(t) for t in self.trials if self._gpus(t))
        self.n_gpus: int | None = gpus.most_common(1)[0][0] if gpus else None
        sections = [t.ds_config.get("autotuning") or {} for t in self.trials]
        metrics = Counter(a.get("metric") for a in sections if isinstance(a.get("metric"), str))
        self.metric: str | None = metrics.most_common(1)[0][0] if metrics else None
        self.overwrite: bool = all(a.get("overwrite", True) is not False for a in sections)
        mps = Counter(_as_int(a.get("mp_size")) or 1 for a in sections)
        self.mp_size: int = mps.most_common(1)[0][0] if mps else 1
        self.user_config = self._profiled_config()

    def __repr__(self) -> str:
        return f"ResultsFolderRunner({os.fspath(self.path)!r}, {len(self.trials)} experiments)"

    @staticmethod
    def _gpus(t: Trial) -> int | None:
        exp, _ = _read_json(Path(t.result_dir or ".") / ds.EXP_JSON)
        if not isinstance(exp, dict):
            return None
        g, nodes = _as_int(exp.get("num_gpus")), _as_int(exp.get("num_nodes")) or 1
        return g * nodes if g else None

    def _profiled_config(self) -> dict[str, Any] | None:
        path = self.results_dir / ds.PROFILE_RUN / ds.DS_CONFIG_JSON
        cfg, _ = _read_json(path)
        if not isinstance(cfg, dict):
            return None
        bad = first_non_finite(cfg)
        if bad is not None:
            warnings.warn(f"{os.fspath(path)!r}: {bad} is not a finite number; the optimal "
                          "config starts from the winning experiment's instead (pass --config "
                          "with your original config)", MalformedExperimentWarning, stacklevel=3)
            return None
        cfg.pop("autotuning", None)
        cfg.pop("train_micro_batch_size_per_gpu", None)  # DeepSpeed's profiling value (1)
        if cfg.get("memory_breakdown") is False:
            cfg.pop("memory_breakdown")
        zero = cfg.get("zero_optimization")
        if isinstance(zero, dict):
            zero.pop("stage", None)  # DeepSpeed profiles at stage 3, not the user's choice
        return cfg

    def _load(self) -> list[Trial]:
        names: set[str] = set()
        if self.exps_dir.is_dir():
            names |= {p.stem for p in self.exps_dir.glob("*.json")}
        names |= {p.name for p in self.results_dir.iterdir() if p.is_dir()}
        names.discard(ds.PROFILE_RUN)
        trials = []
        for name in sorted(names):
            t, why = read_experiment(self.results_dir / name, self.exps_dir)
            if why:
                warnings.warn(f"experiment {name!r} in {os.fspath(self.path)!r}: {why}",
                              MalformedExperimentWarning, stacklevel=3)
            if t is not None:
                trials.append(t)
        return trials

    def run(self, experiment: Experiment) -> Trial:
        """The recorded trial with the experiment's stage, micro-batch, accumulation and
        knobs; a failed trial if the folder does not hold it."""
        for t in self.trials:
            if (t.stage, t.micro_batch, t.grad_accum) != (
                experiment.stage, experiment.micro_batch, experiment.grad_accum
            ):
                continue
            zero = t.ds_config.get("zero_optimization") or {}
            if all(zero.get(k) == v for k, v in experiment.knobs.items()):
                return replace(t, phase=experiment.phase)
        return Trial.from_experiment(
            experiment, status="failed",
            error=f"not recorded in {os.fspath(self.results_dir)!r}")
