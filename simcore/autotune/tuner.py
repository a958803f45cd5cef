"""The autotuner: one table-driven loop over ZeRO stages, micro-batch search, tuners.

Every comparison goes through :mod:`simcore.engine.metrics` (:func:`metric_is_better`,
:func:`select_best`, :func:`metric_value` via :meth:`Trial.value`). ``tune()`` returns a
:class:`TuneResult` on every path; errors are exceptions with a message saying what to
pass instead, never ``exit()``.

Examples
--------
>>> from simcore.autotune import Autotuner, SimulatorRunner
>>> runner = SimulatorRunner("Llama 2 7B", family="A100-80G", n_gpus=8)
>>> cfg = {"fp16": {"enabled": True}, "zero_optimization": {"stage": [2, 3]},
...        "autotuning": {"metric": "latency", "max_train_micro_batch_size_per_gpu": 4}}
>>> result = Autotuner(cfg, runner).tune()
>>> result.best.stage, result.best.micro_batch  # ZeRO-3's gathers hide under compute
(3, 1)
"""

from __future__ import annotations

import contextlib
import itertools
import os
import random
import shlex
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

from ..engine.metrics import get_metric, metric_is_better, select_best
from . import deepspeed as ds
from .config import AutotuneConfig, AutotuneConfigError
from .deepspeed import ZERO_STAGES, StageSpec
from .results import Experiment, Trial, TuneResult, experiment_name
from .runners import MemoryEstimate, ResultsFolderRunner, SimulatorRunner, _gb, _read_json

__all__ = ["ZERO_STAGES", "Autotuner", "StageSpec", "rank"]

Point = tuple[int, tuple[tuple[str, Any], ...]]  # (micro_batch, sorted knob items)


class _GridSearch:
    """Points in order (micro-batch ascending, then knob combinations)."""

    def __init__(self, points: Sequence[Point]) -> None:
        self._it = iter(list(points))

    def ask(self) -> Point | None:
        return next(self._it, None)

    def tell(self, point: Point, value: float | None) -> None:
        pass

    def close(self) -> None:
        pass


class _RandomSearch(_GridSearch):
    """Points in a seeded random order."""

    def __init__(self, points: Sequence[Point], *, seed: int) -> None:
        pts = list(points)
        random.Random(seed).shuffle(pts)
        super().__init__(pts)


@contextlib.contextmanager
def _quiet_optuna() -> Iterator[Any]:
    import optuna

    old = optuna.logging.get_verbosity()
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    try:
        yield optuna
    finally:
        optuna.logging.set_verbosity(old)


class _ModelBasedSearch:
    """Optuna's TPE sampler (seeded) over micro-batch × knobs, for expensive real runs.

    The study minimises ``Metric.sign · value``; failed or metric-less trials are told
    as failed, so the model learns to avoid them.
    """

    def __init__(self, points: Sequence[Point], *, metric: str, seed: int) -> None:
        self._ctx = _quiet_optuna()
        optuna = self._ctx.__enter__()
        self._optuna = optuna
        self._sign = get_metric(metric).sign
        self._left = set(points)
        self._mbs = sorted({p[0] for p in points})
        keys = sorted({k for p in points for k, _ in p[1]})
        self._choices = {k: sorted({v for p in points for kk, v in p[1] if kk == k}, key=repr)
                         for k in keys}
        self._study = optuna.create_study(
            direction="minimize", sampler=optuna.samplers.TPESampler(seed=seed))
        self._pending: Any = None

    def ask(self) -> Point | None:
        if not self._left:
            return None
        trial = self._study.ask()
        mbs = trial.suggest_categorical("micro_batch", self._mbs)
        knobs = tuple((k, trial.suggest_categorical(k, v)) for k, v in self._choices.items())
        self._pending = trial
        point = (int(mbs), knobs)
        self._left.discard(point)
        return point

    def tell(self, point: Point, value: float | None) -> None:
        trial, self._pending = self._pending, None
        if value is None:
            self._study.tell(trial, state=self._optuna.trial.TrialState.FAIL)
        else:
            self._study.tell(trial, self._sign * value)

    def close(self) -> None:
        self._ctx.__exit__(None, None, None)


class Autotuner:
    """Tunes ZeRO stage, micro-batch (and, in full mode, ZeRO knobs) of a DeepSpeed config.

    Parameters
    ----------
    config : dict or path
        A DeepSpeed config with an optional ``autotuning`` section (DeepSpeed's keys:
        ``enabled, fast, metric, tuner_type, tuner_num_trials, tuner_early_stopping,
        min_train_micro_batch_size_per_gpu, max_train_micro_batch_size_per_gpu,
        max_train_batch_size, num_tuning_micro_batch_sizes, results_dir, exps_dir,
        mp_size``...; every documented key is honoured or warned about by name).
        ``zero_optimization.stage`` may be an int, a list or ``"all"``; without it only
        stage 0 is tuned, as DeepSpeed does. The user's other ``zero_optimization`` keys
        are kept fixed, lists among them are tuned (full mode) or their first value used
        (fast mode).
    runner : runner, optional
        :class:`SimulatorRunner` (default), :class:`CommandRunner`,
        :class:`ResultsFolderRunner` or any object with ``n_gpus`` and ``run``.
    n_gpus : int, optional
        Total GPUs; default ``runner.n_gpus``.
    seed : int
        Seed of the random and model-based tuners.
    command : sequence of str, optional
        Training command for ``cmd_optimal.txt`` (default: the runner's command).
    launch, resources : optional
        The DeepSpeed launch (:func:`simcore.autotune.deepspeed.parse_launcher_args`) and
        its resources: ``cmd_optimal.txt`` keeps the user's launcher options and script
        arguments, and ``"auto"`` values are resolved from those arguments.
    stage_early_stop : bool, optional
        With ``"stage": "all"``: stop at the first stage that does not improve on the
        best lower one, as DeepSpeed's autotuner does (True), or try every stage
        (False). Default: DeepSpeed's early stop when experiments are costly (real
        runs: any runner without ``costly = False``), every stage when they are free
        (:class:`SimulatorRunner`, :class:`ResultsFolderRunner`). Explicit stage lists
        are always tried in full.

    Notes
    -----
    Per stage (one loop over :data:`ZERO_STAGES`): skip it if the runner's memory
    estimate says the model states cannot fit; find the largest runnable micro-batch
    (probe runs, bounded by the estimate when there is one); then search
    ``num_tuning_micro_batch_sizes`` micro-batches up to it (× the stage's ZeRO knobs
    when ``fast`` is false) with the tuner, at most ``tuner_num_trials`` trials, stopping
    after ``tuner_early_stopping`` trials without improvement. With ``stage: "all"`` and
    the stage early stop on, higher stages are not tried once a stage fails to improve on
    the best lower one (a stage without result never counts as a measurement), which
    saves real runs but can miss the best stage: higher stages do not only add
    communication (ZeRO-3's prefetched gathers overlap compute, its smaller states allow
    larger micro-batches). With it off, the result notes where DeepSpeed would have
    stopped and whether that would have missed the best. A runner with
    ``prefetch(experiments)`` (the simulator) first receives every experiment the stages
    plan, so it can evaluate them in one batch.
    """

    def __init__(
        self,
        config: Mapping[str, Any] | str | os.PathLike[str],
        runner: Any = None,
        *,
        n_gpus: int | None = None,
        seed: int = 0,
        command: Sequence[str] | None = None,
        launch: ds.LaunchSpec | None = None,
        resources: ds.Resources | None = None,
        stage_early_stop: bool | None = None,
    ) -> None:
        self.launch = launch if launch is not None else getattr(runner, "launch", None)
        self.resources = (resources if resources is not None
                          else getattr(runner, "resources", None))
        user_args = self.launch.user_args if self.launch is not None else ()
        self.config = AutotuneConfig.from_ds_config(config, user_args=user_args)
        self.runner = runner if runner is not None else SimulatorRunner()
        if not callable(getattr(self.runner, "run", None)):
            raise TypeError(
                f"runner must have a run(experiment) -> Trial method, got "
                f"{type(self.runner).__name__}; pass a SimulatorRunner, CommandRunner or "
                "ResultsFolderRunner"
            )
        gpus = n_gpus if n_gpus is not None else getattr(self.runner, "n_gpus", None)
        if gpus is None:
            raise AutotuneConfigError(
                f"{type(self.runner).__name__} does not know the GPU count; pass n_gpus="
            )
        if isinstance(gpus, bool) or not isinstance(gpus, int) or gpus < 1:
            raise AutotuneConfigError(f"n_gpus must be a positive integer, got {gpus!r}")
        mp = self.config.mp_size
        if gpus % mp:
            raise AutotuneConfigError(
                f"autotuning.mp_size={mp} must divide the GPU count {gpus}"
            )
        self.n_gpus = gpus
        self.dp = gpus // mp
        tbs = self.config.train_batch_size
        if tbs is not None and tbs % self.dp:
            raise AutotuneConfigError(
                f"train_batch_size={tbs} is not a multiple of the data-parallel size {self.dp}; "
                "pass a multiple or drop train_batch_size to let the tuner choose"
            )
        if isinstance(seed, bool) or not isinstance(seed, int):
            raise AutotuneConfigError(f"seed must be an integer, got {seed!r}")
        self.seed = seed
        if stage_early_stop is not None and not isinstance(stage_early_stop, bool):
            raise AutotuneConfigError(f"stage_early_stop must be True, False or None, got "
                                      f"{stage_early_stop!r}")
        self._stage_early_stop = stage_early_stop
        cmd = command if command is not None else getattr(self.runner, "command", ())
        self.command = tuple(cmd or ())
        self._trials: list[Trial] = []
        self._cache: dict[str, Trial] = {}
        self._ran: dict[str, bool] = {}
        self._notes: list[str] = []

    @property
    def metric(self) -> str:
        return self.config.metric

    @property
    def stage_early_stop(self) -> bool:
        """Whether ``"stage": "all"`` stops at the first stage that does not improve
        (DeepSpeed's rule): the ``stage_early_stop`` passed, else True unless the
        runner says its experiments cost nothing (``costly = False``)."""
        if self._stage_early_stop is not None:
            return self._stage_early_stop
        return bool(getattr(self.runner, "costly", True))

    def describe(self, precision: str | None = None) -> str:
        """One line saying what is tuned: the job (model, GPUs, family and HBM, sequence
        length, activation checkpointing and the runtime when simulated; the script and hosts when
        launched), the precision, the tuner, the stages and the metric. ``precision`` is
        :func:`~simcore.autotune.training.settle_precision`'s note (which and why); by
        default the config's precision. The header of ``simcore tune`` and of the app's
        Autotune page."""
        from ..model.specs import Workload
        from ..studies.assumptions import runtime_text

        c, r = self.config, self.runner
        if isinstance(r, SimulatorRunner):
            what = (f"{r.model.name} ({r.model.n_params / 1e9:.2f}B params) on {r.n_gpus}x "
                    f"{r.family.name} ({r.hardware.pe_hbm_gb:g} GB), seq {r.seq_len}, "
                    "activation checkpointing "
                    f"{'on' if r.activation_checkpointing else 'off'}, runtime: "
                    + runtime_text(Workload("train", runtime=r.runtime)))
        else:
            launch = self.launch
            job = shlex.join([str(launch.user_script), *launch.user_args]) if launch else ""
            where = f" ({self.resources.include()})" if self.resources else ""
            what = f"{job} on {r.n_gpus} GPUs{where}"
        stages = f"stages {list(c.stages)}"
        if c.stage_is_all:
            how = "early stop on, as DeepSpeed" if self.stage_early_stop else "every stage"
            stages = f'stages "all" ({how})'
        return (f"{what}, precision {precision or c.precision}, tuner {c.tuner_type} "
                f"({'fast' if c.fast else 'full'}), {stages}, metric {c.metric}")

    def __repr__(self) -> str:
        c = self.config
        return (f"Autotuner(metric={c.metric!r}, stages={list(c.stages)}, "
                f"tuner={c.tuner_type!r}, fast={c.fast}, runner={self.runner!r})")

    # -- experiments --------------------------------------------------------------------
    def _micro_batches(self) -> tuple[list[tuple[int, int]], str]:
        """Allowed (micro_batch, grad_accum) pairs, ascending, or ([], reason)."""
        c = self.config
        lo, hi = c.min_micro_batch, c.max_micro_batch
        if c.micro_batches is not None:  # a list in the config: exactly these (DeepSpeed)
            return [(m, c.grad_accum) for m in c.micro_batches], ""
        if c.min_train_batch_size > 1:  # global batch >= min_train_batch_size
            lo = max(lo, -(-c.min_train_batch_size // (c.grad_accum * self.dp)))
        if c.train_batch_size is not None:
            per_rank = c.train_batch_size // self.dp
            pairs = [(m, per_rank // m) for m in range(lo, min(hi, per_rank) + 1)
                     if per_rank % m == 0]
            if not pairs:
                return [], (f"train_batch_size={c.train_batch_size} over {self.dp} ranks gives "
                            f"no micro-batch in [{lo}, {hi}] that divides {per_rank}")
            return pairs, ""
        gas = c.grad_accum
        cap = hi
        if c.max_train_batch_size is not None:
            cap = min(cap, c.max_train_batch_size // (gas * self.dp))
            if cap < lo:
                return [], (f"max_train_batch_size={c.max_train_batch_size} allows micro-batch "
                            f"<= {cap} with {gas} accumulation steps on {self.dp} ranks, below "
                            f"min_train_micro_batch_size_per_gpu={lo}")
        return [(m, gas) for m in range(lo, cap + 1)], ""

    def _experiment(self, spec: StageSpec, micro_batch: int, grad_accum: int,
                    knobs: Mapping[str, Any], *, phase: str) -> Experiment:
        c = self.config
        cfg = dict(c.ds_config)
        first = {k: v[0] for k, v in c.zero_space.items()}  # fast mode: DeepSpeed's choice
        cfg["zero_optimization"] = {"stage": spec.stage, **c.zero_fixed, **first, **knobs}
        cfg["train_micro_batch_size_per_gpu"] = micro_batch
        cfg["gradient_accumulation_steps"] = grad_accum
        cfg["train_batch_size"] = micro_batch * grad_accum * self.dp  # DeepSpeed sets it
        return Experiment(
            name=experiment_name(spec.stage, micro_batch=micro_batch, grad_accum=grad_accum,
                                 knobs=knobs),
            stage=spec.stage, micro_batch=micro_batch, grad_accum=grad_accum, ds_config=cfg,
            knobs=dict(knobs), n_gpus=self.n_gpus, mp=self.config.mp_size, phase=phase,
        )

    def _run(self, exp: Experiment) -> Trial:
        if exp.name in self._cache:
            return self._cache[exp.name]
        trial = self.runner.run(exp)
        if not isinstance(trial, Trial):
            raise TypeError(
                f"{type(self.runner).__name__}.run returned {type(trial).__name__}; it must "
                "return a simcore.autotune.Trial (status 'failed' for a failed run)"
            )
        self._ran[exp.name] = trial.ok  # it ran (fits memory), whatever it reported
        trial = trial.judged(self.metric)  # but without a usable value it is a failed run
        self._cache[exp.name] = trial
        self._trials.append(trial)
        return trial

    def _estimate(self, exp: Experiment) -> MemoryEstimate | None:
        est = getattr(self.runner, "estimate", None)
        return est(exp) if callable(est) else None

    # -- per stage ------------------------------------------------------------------------
    def _find_max(self, spec: StageSpec, pairs: Sequence[tuple[int, int]],
                  bounded: bool) -> tuple[int | None, str]:
        """Index of the largest runnable pair (probe runs), or (None, reason)."""

        def probe(i: int) -> tuple[bool, Trial]:
            """(whether the micro-batch runs, its trial): a run without a value still ran."""
            m, g = pairs[i]
            exp = self._experiment(spec, m, g, {}, phase="probe")
            trial = self._run(exp)
            return self._ran[exp.name], trial

        def ok(i: int) -> bool:
            return probe(i)[0]

        ran, first = probe(0)
        if not ran:
            return None, f"the smallest micro-batch {pairs[0][0]} failed: {first.error}"
        last = len(pairs) - 1
        if last == 0:
            return 0, ""
        lo, hi = 0, None
        if bounded:  # the estimate bounds the range: try its top first
            if ok(last):
                return last, ""
            hi = last
        else:  # doubling: indices 1, 3, 7, ... (micro-batches 2, 4, 8, ... from 1)
            i = 1
            while True:
                i = min(i, last)
                if ok(i):
                    lo = i
                    if i == last:
                        return last, ""
                    i = 2 * i + 1
                else:
                    hi = i
                    break
        while hi - lo > 1:
            mid = (lo + hi) // 2
            if ok(mid):
                lo = mid
            else:
                hi = mid
        return lo, ""

    def _tuning_pairs(self, pairs: Sequence[tuple[int, int]]) -> list[tuple[int, int]]:
        n = self.config.num_tuning_micro_batch_sizes
        if n == 1 or len(pairs) == 1:
            return [pairs[-1]]
        step = (len(pairs) - 1) / (n - 1)
        idx = sorted({round(k * step) for k in range(n)})
        return [pairs[i] for i in idx]

    def _knob_grid(self, spec: StageSpec) -> list[dict[str, Any]]:
        if self.config.fast:
            return [{}]
        space = {k: v for k, v in spec.space.items() if k not in self.config.zero_fixed}
        space.update(self.config.zero_space)  # the user's tuning lists
        keys = sorted(space)
        return [dict(zip(keys, combo, strict=True))
                for combo in itertools.product(*(space[k] for k in keys))]

    def _searcher(self, points: Sequence[Point]) -> Any:
        kind = self.config.tuner_type
        if kind == "random":
            return _RandomSearch(points, seed=self.seed)
        if kind == "model_based":
            return _ModelBasedSearch(points, metric=self.metric, seed=self.seed)
        return _GridSearch(points)

    def _search(self, spec: StageSpec, pairs: Sequence[tuple[int, int]]) -> None:
        gas_of = dict(pairs)
        points: list[Point] = [(m, tuple(sorted(k.items())))
                               for m, _ in pairs for k in self._knob_grid(spec)]
        metric = self.metric
        stage_trials = [t for t in self._trials if t.stage == spec.stage]
        _, incumbent = select_best(stage_trials, metric, value=lambda t: t.value(metric))
        searcher = self._searcher(points)
        stale = fresh = 0
        max_asks = 10 * self.config.tuner_num_trials + len(points)
        try:
            for _ in range(max_asks):
                if fresh >= self.config.tuner_num_trials:
                    break
                point = searcher.ask()
                if point is None:
                    break
                mbs, knobs = point
                exp = self._experiment(spec, mbs, gas_of[mbs], dict(knobs), phase="tune")
                seen = exp.name in self._cache
                trial = self._run(exp)
                value = trial.value(metric)
                searcher.tell(point, value)
                if seen:  # already measured (a probe or a repeated suggestion): not a trial
                    continue
                fresh += 1
                if metric_is_better(metric, value, incumbent):
                    incumbent, stale = value, 0
                else:
                    stale += 1
                if stale >= self.config.tuner_early_stopping:
                    self._notes.append(
                        f"stage {spec.stage}: early stop after {fresh} tuner trials, the last "
                        f"{stale} without improvement (tuner_early_stopping="
                        f"{self.config.tuner_early_stopping})")
                    break
        finally:
            searcher.close()

    def _stage_pairs(self, spec: StageSpec) -> tuple[list[tuple[int, int]], bool, str]:
        """(pairs the stage may run, whether the memory estimate bounds them, reason if
        there are none)."""
        pairs, why = self._micro_batches()
        if not pairs:
            return [], False, why
        est = self._estimate(self._experiment(spec, pairs[0][0], pairs[0][1], {},
                                              phase="probe"))
        if est is None:
            return pairs, False, ""
        if not est.states_fit:
            return [], False, (f"model states need {_gb(est.model_states_bytes)} per GPU, "
                               f"{_gb(est.usable_bytes)} usable")
        cap = est.max_micro_batch
        fitting = [p for p in pairs if p[0] <= cap]
        if not fitting:
            need = est.model_states_bytes + pairs[0][0] * est.activation_bytes_per_sample
            return [], False, (f"micro-batch {pairs[0][0]} needs {_gb(need)} per GPU, "
                               f"{_gb(est.usable_bytes)} usable")
        return fitting, True, ""

    def _planned(self, spec: StageSpec) -> list[Experiment]:
        """The experiments the stage runs if its memory estimate is right (the probes at
        both ends, then the tuning points); what a runner's ``prefetch`` receives."""
        pairs, bounded, _ = self._stage_pairs(spec)
        if not pairs:
            return []
        ends = [pairs[0], pairs[-1]] if bounded else [pairs[0]]
        exps = [self._experiment(spec, m, g, {}, phase="probe") for m, g in ends]
        knobs = self._knob_grid(spec)
        tuned = pairs if self.config.micro_batches is not None else self._tuning_pairs(pairs)
        exps += [self._experiment(spec, m, g, k, phase="tune") for m, g in tuned for k in knobs]
        return exps

    def _tune_stage(self, spec: StageSpec) -> tuple[float | None, str]:
        pairs, bounded, why = self._stage_pairs(spec)
        if not pairs:
            return None, why
        if self.config.micro_batches is not None:  # the user's list: run it, no probing
            self._search(spec, pairs)
        else:
            top, why = self._find_max(spec, pairs, bounded)
            if top is None:
                return None, why
            self._search(spec, self._tuning_pairs(pairs[: top + 1]))
        metric = self.metric
        stage_trials = [t for t in self._trials if t.stage == spec.stage]
        _, value = select_best(stage_trials, metric, value=lambda t: t.value(metric))
        if value is None:
            return None, f"no successful trial reported {metric!r}"
        return value, ""

    def _why_no_early_stop(self) -> str:
        if self._stage_early_stop is False:
            return "stage_early_stop=False"
        return f"{type(self.runner).__name__}'s experiments cost nothing to run"

    # -- the loop -------------------------------------------------------------------------
    def tune(self) -> TuneResult:
        """Run the search; always returns a :class:`TuneResult` (``best`` may be None).

        Examples
        --------
        >>> from simcore.autotune import Autotuner, SimulatorRunner
        >>> r = Autotuner({"zero_optimization": {"stage": 0}},
        ...               SimulatorRunner("Llama 2 7B", n_gpus=8)).tune()
        >>> r.best is None, r.stage_values[0] is None
        (True, True)
        """
        import time

        t0 = time.monotonic()
        self._trials, self._cache, self._ran, self._notes = [], {}, {}, []
        if self.config.stage_defaulted:
            self._notes.append('no zero_optimization.stage: tuning ZeRO stage 0 only, as '
                               'DeepSpeed does; set "stage": "all" (or a list) to try more')
        metric = self.metric
        stage_values: dict[int, float | None] = {}
        skipped: dict[int, str] = {}
        leader: tuple[int, float] | None = None
        stop = ""
        early_stop = self.config.stage_is_all and self.stage_early_stop
        deepspeed_stop: tuple[int, str] | None = None  # where DeepSpeed would have stopped
        prefetch = getattr(self.runner, "prefetch", None)
        if callable(prefetch):  # e.g. the simulator: every planned experiment in one batch
            prefetch([e for spec in ZERO_STAGES if spec.stage in self.config.stages
                      for e in self._planned(spec)])
        for spec in ZERO_STAGES:
            if spec.stage not in self.config.stages:
                continue
            if stop:
                stage_values[spec.stage], skipped[spec.stage] = None, stop
                continue
            value, why = self._tune_stage(spec)
            stage_values[spec.stage] = value
            if why:
                skipped[spec.stage] = why
            if value is None:
                continue
            if leader is None or metric_is_better(metric, value, leader[1]):
                leader = (spec.stage, value)
            elif self.config.stage_is_all and deepspeed_stop is None:
                why = (f"stage {spec.stage} ({value:.6g}) did not improve on stage "
                       f"{leader[0]} ({leader[1]:.6g})")
                deepspeed_stop = (spec.stage, why)
                if early_stop:
                    stop = (f"not tried: {why}; DeepSpeed's early stop for \"stage\": "
                            "\"all\" (pass stage_early_stop=False, or --stage-early-stop "
                            "off, to try every stage)")
        if deepspeed_stop is not None and not early_stop:
            after = [s.stage for s in ZERO_STAGES
                     if s.stage > deepspeed_stop[0] and s.stage in self.config.stages]
            if after:
                self._notes.append(
                    f"\"stage\": \"all\" tried every stage: {deepspeed_stop[1]}, where "
                    f"DeepSpeed's autotuner stops and never tries stage "
                    f"{', '.join(map(str, after))} ({self._why_no_early_stop()})")
                top, _ = select_best(self._trials, metric, value=lambda t: t.value(metric))
                if top is not None and top.stage in after:
                    self._notes.append(
                        f"the best, {top.name} (stage {top.stage}), is one DeepSpeed's early "
                        "stop would have missed")
        return TuneResult.from_trials(
            self._trials, metric=metric, stage_values=stage_values, skipped=skipped,
            base_config=self.config.ds_config, n_gpus=self.n_gpus, mp=self.config.mp_size,
            notes=tuple(self._notes), command=self.command,
            results_dir=self.config.results_dir, launch=self.launch, resources=self.resources,
            arg_mappings=self.config.arg_mappings, duration_s=time.monotonic() - t0,
        )


def rank(
    path: str | os.PathLike[str],
    *,
    metric: str | None = None,
    out_dir: str | os.PathLike[str] | None = None,
    user_config: Mapping[str, Any] | str | os.PathLike[str] | None = None,
) -> TuneResult:
    """Re-rank an existing DeepSpeed autotuning folder with the correct direction.

    Reads ``<path>/autotuning_exps`` and ``<path>/autotuning_results``: a run that
    crashed (non-zero exit, an error in ``stderr.log``) never wins even if it wrote
    ``metrics.json``, and malformed experiments warn
    :class:`MalformedExperimentWarning`. ``metric`` defaults to the one the folder
    was tuned for (its configs' ``autotuning.metric``), else ``throughput``. The
    optimal config is the user's (``user_config``, else the one DeepSpeed recorded
    in ``profile_model_info/ds_config.json``) with the winner's ZeRO stage and batch
    sizes, so the user's ZeRO settings are kept; ``train_batch_size`` is the
    winner's (it counts ``mp_size``). With ``out_dir``, ``ds_config_optimal.json``,
    ``cmd_optimal.txt`` (the winner's launch; HF's ``--deepspeed`` kept) and
    ``summary.txt`` are written there.

    Examples
    --------
    >>> import json, pathlib, tempfile
    >>> with tempfile.TemporaryDirectory() as d:
    ...     for name, lat in (("z1_gas1_tmbspg1", 30.0), ("z1_gas1_tmbspg2", 8.0)):
    ...         e = pathlib.Path(d, "autotuning_results", name)
    ...         e.mkdir(parents=True)
    ...         mbs = int(name[-1])
    ...         _ = (e / "ds_config.json").write_text(json.dumps(
    ...             {"zero_optimization": {"stage": 1}, "train_micro_batch_size_per_gpu": mbs}))
    ...         _ = (e / "metrics.json").write_text(json.dumps({"latency": lat}))
    ...     rank(d, metric="latency").best.name
    'z1_gas1_tmbspg2'
    """
    from .config import load_ds_config

    runner = ResultsFolderRunner(path)
    if metric is None:
        metric = runner.metric or "throughput"
    get_metric(metric)
    trials = [t.judged(metric) for t in runner.trials]  # no usable value: failed
    best, _ = select_best(trials, metric, value=lambda t: t.value(metric))
    stage_values: dict[int, float | None] = {}
    skipped: dict[int, str] = {}
    for s in sorted({t.stage for t in trials}):
        _, v = select_best([t for t in trials if t.stage == s], metric,
                           value=lambda t: t.value(metric))
        stage_values[s] = v
        if v is None:
            skipped[s] = f"no successful experiment reported {metric!r}"
    notes = () if trials else (f"no experiments found in {os.fspath(path)!r}",)
    if user_config is not None:
        base: Mapping[str, Any] = load_ds_config(user_config)
    elif runner.user_config is not None:
        base = runner.user_config
    else:
        base = dict(best.ds_config) if best is not None else {}
    exp = None
    if best is not None and best.result_dir:
        exp, _ = _read_json(Path(best.result_dir) / ds.EXP_JSON)
    launch = ds.spec_from_recorded(exp if isinstance(exp, dict) else None,
                                   " ".join(best.command) if best is not None else None)
    mappings = (best.ds_config.get("autotuning") or {}).get("arg_mappings") if best else None
    result = TuneResult.from_trials(
        trials, metric=metric, stage_values=stage_values, skipped=skipped,
        base_config=base, n_gpus=runner.n_gpus, mp=runner.mp_size, notes=notes,
        command=best.command if best is not None else (), launch=launch,
        arg_mappings=mappings if isinstance(mappings, dict) else None,
        overwrite=runner.overwrite,
    )
    if out_dir is not None:
        result.write(out_dir)
    return result
