"""Runners turn an :class:`~simcore.autotune.results.Experiment` into a
:class:`~simcore.autotune.results.Trial`.

A runner is any object with ``n_gpus`` and ``run(experiment) -> Trial``; it may also
offer ``estimate(experiment) -> MemoryEstimate | None`` so the tuner can skip stages
whose model states cannot fit and bound the micro-batch search, and
``prefetch(experiments)`` to evaluate the experiments the tuner plans in one batch.
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
import subprocess
import time
import warnings
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

from ..presets import get_family, get_model
from ..specs import Efficiency, HardwareFamily, Model
from .results import Experiment, Trial, command_with_config
from .training import (
    PRECISIONS,
    TrainingEngine,
    TrainingEstimate,
    TrainingRun,
    precision_of,
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
        A preset name (``simcore.presets.PRESETS``) or a :class:`~simcore.specs.Model`.
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

    Examples
    --------
    >>> r = SimulatorRunner("Llama 2 7B", family="A100-80G", n_gpus=8)
    >>> r.n_gpus, r.hardware.pe_hbm_gb
    (8, 85.9)
    """

    def __init__(
        self,
        model: str | Model = "Llama 2 7B",
        *,
        family: str | HardwareFamily = "A100-80G",
        n_gpus: int = 8,
        gpu_mem_gb: float | None = None,
        seq_len: int = 2048,
        activation_checkpointing: bool = False,
        precision: str | None = None,
        efficiency: Efficiency | None = None,
    ) -> None:
        self.model = get_model(model)
        fam = get_family(family)
        if isinstance(n_gpus, bool) or not isinstance(n_gpus, int) or n_gpus < 1:
            raise ValueError(f"n_gpus must be a positive integer, got {n_gpus!r}")
        if isinstance(seq_len, bool) or not isinstance(seq_len, int) or seq_len < 1:
            raise ValueError(f"seq_len must be a positive integer, got {seq_len!r}")
        if precision is not None and precision not in PRECISIONS:
            raise ValueError(f"precision={precision!r} is unknown; pass one of {list(PRECISIONS)}")
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
            activation_checkpointing=self.activation_checkpointing)

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
    """(data, "") or (None, reason)."""
    try:
        with open(path, encoding="utf-8") as fh:
            return json.load(fh), ""
    except FileNotFoundError:
        return None, f"{path.name} is missing"
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        return None, f"{path} is not valid JSON ({exc})"
    except OSError as exc:
        return None, f"{path} cannot be read ({exc})"


def _tail(path: Path, n: int = 2000) -> str:
    try:
        with open(path, "rb") as fh:
            fh.seek(0, os.SEEK_END)
            size = fh.tell()
            fh.seek(max(0, size - n))
            text = fh.read().decode("utf-8", errors="replace")
    except OSError:
        return ""
    lines = [ln for ln in text.splitlines() if ln.strip()]
    return lines[-1].strip() if lines else ""


def _dump(path: Path, data: Any) -> None:
    path.write_text(json.dumps(data, indent=2) + "\n", encoding="utf-8")


class CommandRunner:
    """Launches a training command per experiment and reads its ``metrics.json``.

    Each experiment gets DeepSpeed's layout: ``<exps_dir>/<name>.json`` and
    ``<results_dir>/<name>/{exp.json, ds_config.json, cmd.txt, stdout.log, stderr.log}``.
    Its ``ds_config.json`` has ``autotuning.enabled`` and ``autotuning.metric_path``
    set, so a DeepSpeed engine writes ``metrics.json`` (``latency`` µs per step,
    ``throughput`` samples/s, ``FLOPS_per_gpu``) there and stops after
    ``end_profile_step``.

    Parameters
    ----------
    command : sequence of str or str
        The training command. ``{ds_config}``, ``{metrics_path}``, ``{exp_dir}`` and
        ``{name}`` are filled per experiment; without ``{ds_config}`` the value after
        ``--deepspeed_config`` is replaced (or the flag appended).
    n_gpus : int
        GPUs each run uses in total.
    results_dir, exps_dir : path
        Where experiment folders and records go.
    timeout_s : float
        Wall-clock limit per run; a run over it is killed and recorded as failed.
    env : mapping, optional
        Extra environment variables.
    cwd : path, optional
        Working directory of the command.
    estimator : runner with ``estimate``, optional
        E.g. a :class:`SimulatorRunner` to bound the micro-batch search by memory.

    Examples
    --------
    >>> import sys
    >>> r = CommandRunner([sys.executable, "train.py"], n_gpus=8)
    >>> r.n_gpus
    8
    """

    def __init__(
        self,
        command: Sequence[str] | str,
        *,
        n_gpus: int,
        results_dir: str | os.PathLike[str] = "autotuning_results",
        exps_dir: str | os.PathLike[str] = "autotuning_exps",
        timeout_s: float = 3600.0,
        env: Mapping[str, str] | None = None,
        cwd: str | os.PathLike[str] | None = None,
        estimator: Any = None,
        start_profile_step: int = 3,
        end_profile_step: int = 5,
    ) -> None:
        args = shlex.split(command) if isinstance(command, str) else [str(a) for a in command]
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

    def __repr__(self) -> str:
        return f"CommandRunner({shlex.join(self.command)!r}, n_gpus={self.n_gpus})"

    @classmethod
    def from_ds_config(
        cls,
        command: Sequence[str] | str,
        *,
        config: Mapping[str, Any] | str | os.PathLike[str],
        n_gpus: int,
        **kw: Any,
    ) -> CommandRunner:
        """A runner whose folders are the config's ``autotuning.results_dir`` and
        ``autotuning.exps_dir``.

        Examples
        --------
        >>> import sys
        >>> r = CommandRunner.from_ds_config([sys.executable, "train.py"], n_gpus=8,
        ...     config={"autotuning": {"results_dir": "runs/results", "exps_dir": "runs/exps"}})
        >>> str(r.results_dir), str(r.exps_dir)
        ('runs/results', 'runs/exps')
        """
        from .config import AutotuneConfig

        cfg = AutotuneConfig.from_ds_config(config)
        kw.setdefault("results_dir", cfg.results_dir)
        kw.setdefault("exps_dir", cfg.exps_dir)
        return cls(command, n_gpus=n_gpus, **kw)

    def estimate(self, experiment: Experiment) -> MemoryEstimate | None:
        est = getattr(self.estimator, "estimate", None)
        return est(experiment) if est is not None else None

    def _args(self, *, ds_config: Path, metrics: Path, exp_dir: Path, name: str) -> list[str]:
        fills = {"{metrics_path}": str(metrics), "{exp_dir}": str(exp_dir), "{name}": name}
        args = []
        for a in self.command:
            for k, v in fills.items():
                a = a.replace(k, v)
            args.append(a)
        return command_with_config(args, ds_config=str(ds_config))

    def run(self, experiment: Experiment) -> Trial:
        exp_dir = (self.results_dir / experiment.name).resolve()
        exp_dir.mkdir(parents=True, exist_ok=True)
        self.exps_dir.mkdir(parents=True, exist_ok=True)
        metrics_path = exp_dir / "metrics.json"
        metrics_path.unlink(missing_ok=True)  # never read a previous run's numbers
        ds = copy.deepcopy(dict(experiment.ds_config))
        ds["autotuning"] = {
            "enabled": True, "metric_path": str(metrics_path),
            "start_profile_step": self.start_profile_step,
            "end_profile_step": self.end_profile_step,
        }
        cfg_path = exp_dir / "ds_config.json"
        _dump(cfg_path, ds)
        args = self._args(ds_config=cfg_path, metrics=metrics_path, exp_dir=exp_dir,
                          name=experiment.name)
        record = {
            "name": experiment.name, "ds_config": ds, "num_gpus": self.n_gpus,
            "result_dir": str(exp_dir), "cmd": args,
        }
        _dump(exp_dir / "exp.json", record)
        _dump(self.exps_dir / f"{experiment.name}.json", record)
        (exp_dir / "cmd.txt").write_text(shlex.join(args) + "\n", encoding="utf-8")

        env = dict(os.environ)
        env.update(self.env)
        out_path, err_path = exp_dir / "stdout.log", exp_dir / "stderr.log"
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
                return Trial.from_experiment(
                    experiment, status="failed", duration_s=time.monotonic() - t0,
                    error=f"timed out after {self.timeout_s:g} s (killed)", **common)
            except BaseException:  # Ctrl-C or any error here: never orphan a training job
                _kill_group(proc)
                raise
        duration = time.monotonic() - t0
        metrics, why = _read_json(metrics_path)
        if metrics is not None and not isinstance(metrics, dict):
            metrics, why = None, f"{metrics_path} holds {type(metrics).__name__}, not an object"
        if rc != 0:
            last = _tail(err_path) or _tail(out_path)
            return Trial.from_experiment(
                experiment, status="failed", metrics=metrics, duration_s=duration,
                error=f"exit code {rc}" + (f": {last}" if last else ""), **common)
        if metrics is None:
            return Trial.from_experiment(experiment, status="failed", duration_s=duration,
                                         error=f"no usable metrics: {why}", **common)
        return Trial.from_experiment(experiment, status="ok", metrics=metrics,
                                     duration_s=duration, **common)


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


class ResultsFolderRunner:
    """Reads the experiments of an existing DeepSpeed autotuning run.

    Layout: ``<path>/autotuning_exps/<name>.json`` and
    ``<path>/autotuning_results/<name>/{exp.json, ds_config.json, metrics.json,
    stdout.log, stderr.log}``. An experiment that ran and failed (logs, no
    ``metrics.json``) becomes a failed trial; a malformed or partial one also warns
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
        Every recorded experiment, by name.
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        results_dir: str = "autotuning_results",
        exps_dir: str = "autotuning_exps",
    ) -> None:
        root = Path(path)
        if not root.is_dir():
            raise FileNotFoundError(
                f"no folder {os.fspath(path)!r}; pass the folder DeepSpeed's autotuner ran in "
                f"(it holds {exps_dir}/ and {results_dir}/)"
            )
        if (root / results_dir).is_dir():
            self.results_dir, self.exps_dir = root / results_dir, root / exps_dir
        elif root.name == results_dir or any(
            (d / "ds_config.json").exists() or (d / "exp.json").exists()
            for d in root.iterdir() if d.is_dir()
        ):
            self.results_dir, self.exps_dir = root, root.parent / exps_dir
        else:
            raise FileNotFoundError(
                f"{os.fspath(path)!r} holds no {results_dir}/ folder; pass the folder "
                f"DeepSpeed's autotuner ran in (it holds {exps_dir}/ and {results_dir}/)"
            )
        self.path = root
        self.trials: tuple[Trial, ...] = tuple(self._load())
        gpus = Counter(n for n in self._n_gpus.values() if n)
        self.n_gpus: int | None = gpus.most_common(1)[0][0] if gpus else None

    def __repr__(self) -> str:
        return f"ResultsFolderRunner({os.fspath(self.path)!r}, {len(self.trials)} experiments)"

    def _warn(self, name: str, why: str) -> None:
        warnings.warn(f"experiment {name!r} in {os.fspath(self.path)!r}: {why}",
                      MalformedExperimentWarning, stacklevel=3)

    def _load(self) -> list[Trial]:
        self._n_gpus: dict[str, int | None] = {}
        names: set[str] = set()
        if self.exps_dir.is_dir():
            names |= {p.stem for p in self.exps_dir.glob("*.json")}
        names |= {p.name for p in self.results_dir.iterdir() if p.is_dir()}
        names.discard("profile_model_info")  # DeepSpeed's model-profiling run
        trials = []
        for name in sorted(names):
            t = self._load_one(name)
            if t is not None:
                trials.append(t)
        return trials

    def _load_one(self, name: str) -> Trial | None:
        d = self.results_dir / name
        exp: Any = None
        for p in (d / "exp.json", self.exps_dir / f"{name}.json"):
            if p.exists():
                exp, why = _read_json(p)
                if exp is None or not isinstance(exp, dict):
                    self._warn(name, why or f"{p} does not hold a JSON object")
                    exp = None
                    continue
                break
        ds: Any = None
        if (d / "ds_config.json").exists():
            ds, why = _read_json(d / "ds_config.json")
            if not isinstance(ds, dict):
                self._warn(name, why or "ds_config.json does not hold a JSON object")
                ds = None
        if ds is None and exp is not None and isinstance(exp.get("ds_config"), dict):
            ds = exp["ds_config"]
        if ds is None:
            self._warn(name, "no readable ds_config.json (or ds_config in exp.json); skipped")
            return None
        n_gpus = None
        if exp is not None:
            g, nodes = _as_int(exp.get("num_gpus")), _as_int(exp.get("num_nodes")) or 1
            n_gpus = g * nodes if g else None
        self._n_gpus[name] = n_gpus
        zero = ds.get("zero_optimization") or {}
        stage = _as_int(zero.get("stage", 0)) if isinstance(zero, dict) else None
        gas = _as_int(ds.get("gradient_accumulation_steps", 1))
        mbs = _as_int(ds.get("train_micro_batch_size_per_gpu"))
        if mbs is None and _as_int(ds.get("train_batch_size")) and n_gpus and gas:
            mbs = ds["train_batch_size"] // (gas * n_gpus)
        if stage is None or stage not in (0, 1, 2, 3) or not mbs or not gas:
            self._warn(name, "ds_config lacks a valid zero_optimization.stage, "
                             "train_micro_batch_size_per_gpu or gradient_accumulation_steps; skipped")
            return None
        clean = {k: v for k, v in ds.items() if k != "autotuning"}
        knobs = {k: v for k, v in zero.items() if k != "stage"}
        common: dict[str, Any] = dict(name=name, stage=stage, micro_batch=mbs, grad_accum=gas,
                      ds_config=clean, knobs=knobs, phase="recorded", result_dir=str(d),
                      command=_recorded_command(exp, d))
        metrics_path = d / "metrics.json"
        if metrics_path.exists():
            metrics, why = _read_json(metrics_path)
            if not isinstance(metrics, dict):
                why = why or "metrics.json does not hold a JSON object"
                self._warn(name, f"{why}; recorded as failed, never ranked")
                return Trial(status="failed", error=f"malformed metrics: {why}", **common)
            return Trial(status="ok", metrics=metrics, **common)
        err = _tail(d / "stderr.log")
        if (d / "stderr.log").exists() or (d / "stdout.log").exists():
            return Trial(status="failed", error=err or "no metrics.json (the run failed)",
                         **common)
        self._warn(name, "no metrics.json and no logs (partial experiment); recorded as failed")
        return Trial(status="failed", error="partial experiment: no metrics.json", **common)

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


def _recorded_command(exp: Mapping[str, Any] | None, d: Path) -> tuple[str, ...]:
    """DeepSpeed's command of a recorded experiment (exp.json fields or cmd.txt)."""
    if exp:
        cmd = exp.get("cmd")
        if isinstance(cmd, list) and all(isinstance(a, str) for a in cmd):
            return tuple(cmd)
        script = exp.get("user_script")
        if isinstance(script, str):
            launcher = [a for a in exp.get("launcher_args") or [] if isinstance(a, str)]
            user = [a for a in exp.get("user_args") or [] if isinstance(a, str)]
            return ("deepspeed", *launcher, script, *user)
    try:
        return tuple(shlex.split((d / "cmd.txt").read_text(encoding="utf-8")))
    except (OSError, ValueError):
        return ()
