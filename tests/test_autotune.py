"""The autotuner: selectors, stage loop, runners, DeepSpeed folders, outputs, CLI."""

from __future__ import annotations

import json
import os
import pathlib
import re
import stat
import sys

import pytest

from simcore.autotune import (
    ZERO_STAGES,
    AutotuneConfig,
    AutotuneConfigError,
    Autotuner,
    CommandRunner,
    Experiment,
    MalformedExperimentWarning,
    NoResultError,
    ResultsFolderRunner,
    SimulatorRunner,
    Trial,
    TuneResult,
    UnknownAutotuningKeyWarning,
    experiment_name,
    load_ds_config,
    optimal_ds_config,
    parse_stages,
    rank,
    render_command,
)
from simcore.autotune.cli import add_tune_parsers, main
from simcore.model.presets import PRESETS

REPLAY = pathlib.Path(__file__).parent / "data" / "deepspeed_replay" / "train.py"
LLAMA7B = PRESETS["Llama 2 7B"].model


class TableRunner:
    """Canned outcomes keyed by (stage, micro_batch); missing keys fail like an OOM."""

    def __init__(self, table, *, n_gpus=8):
        self.table = table
        self.n_gpus = n_gpus
        self.calls = []

    def run(self, exp: Experiment) -> Trial:
        self.calls.append(exp)
        out = self.table.get((exp.stage, exp.micro_batch))
        if out is None:
            return Trial.from_experiment(exp, status="failed", error="CUDA out of memory")
        if isinstance(out, tuple):  # ("failed", metrics): a crash after writing metrics
            return Trial.from_experiment(exp, status="failed", metrics=out[1], error="crashed")
        return Trial.from_experiment(exp, status="ok", metrics=out)


def _cfg(metric="latency", stage=1, max_mbs=2, **autotuning):
    return {
        "fp16": {"enabled": True},
        "zero_optimization": {"stage": stage},
        "autotuning": {"enabled": True, "metric": metric,
                       "max_train_micro_batch_size_per_gpu": max_mbs, **autotuning},
    }


# -- selectors: direction, aliases, None/NaN ---------------------------------------------
def test_tune__latency_30_vs_8_keeps_8():
    runner = TableRunner({(1, 1): {"latency": 30.0}, (1, 2): {"latency": 8.0}})
    result = Autotuner(_cfg("latency"), runner).tune()
    assert result.value == 8.0
    assert result.best.micro_batch == 2


def test_tune__throughput_keeps_the_larger():
    runner = TableRunner({(1, 1): {"throughput": 30.0}, (1, 2): {"throughput": 8.0}})
    result = Autotuner(_cfg("throughput"), runner).tune()
    assert (result.value, result.best.micro_batch) == (30.0, 1)


@pytest.mark.parametrize("name", ["FLOPS", "flops"])
def test_tune__flops_alias_reads_FLOPS_per_gpu(name):
    runner = TableRunner({(1, 1): {"FLOPS_per_gpu": 1e14}, (1, 2): {"FLOPS_per_gpu": 2e14}})
    result = Autotuner(_cfg(name), runner).tune()
    assert result.value == 2e14
    assert result.best.micro_batch == 2
    assert result.metric == name


def test_tune__exact_key_named_wins_over_alias():
    # "flops" is an alias of FLOPS_per_gpu, but the user named the key "flops" exactly
    runner = TableRunner({
        (1, 1): {"flops": 5.0, "FLOPS_per_gpu": 1.0},
        (1, 2): {"flops": 1.0, "FLOPS_per_gpu": 9.0},
    })
    result = Autotuner(_cfg("flops"), runner).tune()
    assert (result.best.micro_batch, result.value) == (1, 5.0)


@pytest.mark.parametrize("metric", ["latency", "throughput"])
def test_tune__none_and_nan_never_win(metric):
    runner = TableRunner({
        (1, 1): {metric: None},
        (1, 2): {metric: float("nan")},
        (1, 3): {metric: 30.0},
        (1, 4): {"something_else": 1.0},
    })
    result = Autotuner(_cfg(metric, max_mbs=4, num_tuning_micro_batch_sizes=4), runner).tune()
    assert result.best.micro_batch == 3
    assert result.value == 30.0


def test_trial_value__failed_trial_has_no_value():
    t = Trial("x", stage=1, micro_batch=1, grad_accum=1, status="failed",
              metrics={"latency": 1.0})
    assert t.value("latency") is None
    with pytest.raises(ValueError, match="'ok' or 'failed'"):
        Trial("x", stage=1, micro_batch=1, grad_accum=1, status="oom")


# -- the stage loop ---------------------------------------------------------------------
@pytest.mark.parametrize(
    ("stage", "expected"),
    [(2, {2}), ([1, 3], {1, 3}), ("all", {0, 1, 2, 3}), ([3, 0], {0, 3})],
)
def test_tune__stage_list_is_honoured(stage, expected):
    table = {(s, m): {"latency": 10.0 - s} for s in range(4) for m in (1, 2)}
    runner = TableRunner(table)
    result = Autotuner(_cfg("latency", stage=stage), runner).tune()
    assert {e.stage for e in runner.calls} == expected
    assert set(result.stage_values) == expected
    assert result.best.stage == max(expected)


def test_tune__stage_without_result_is_none_not_zero():
    # stage 0 fails everything: its "previous metric" must be None, so stage 1 and 2
    # (latency 10 then 5) are tuned and compared with each other, not with a fake 0
    table = {(1, 1): {"latency": 10.0}, (2, 1): {"latency": 5.0}, (3, 1): {"latency": 7.0}}
    result = Autotuner(_cfg("latency", stage="all", max_mbs=1), TableRunner(table)).tune()
    assert result.stage_values[0] is None
    assert "failed" in result.skipped[0]
    assert result.stage_values[1] == 10.0 and result.stage_values[2] == 5.0
    assert (result.best.stage, result.value) == (2, 5.0)


def test_tune__higher_stages_not_tried_after_a_stage_fails_to_improve():
    table = {(0, 1): {"latency": 4.0}, (1, 1): {"latency": 6.0}, (2, 1): {"latency": 1.0}}
    runner = TableRunner(table)
    result = Autotuner(_cfg("latency", stage="all", max_mbs=1), runner).tune()
    assert {e.stage for e in runner.calls} == {0, 1}
    assert result.stage_values[2] is None and "did not improve" in result.skipped[2]
    assert result.best.stage == 0


def test_tune__stage_early_stop_says_how_to_try_every_stage():
    table = {(0, 1): {"latency": 4.0}, (1, 1): {"latency": 6.0}, (2, 1): {"latency": 1.0}}
    result = Autotuner(_cfg("latency", stage="all", max_mbs=1), TableRunner(table)).tune()
    assert "DeepSpeed's early stop" in result.skipped[2]
    assert "stage_early_stop=False" in result.skipped[3]


def test_tune__stage_early_stop_off_tries_every_stage():
    table = {(0, 1): {"latency": 4.0}, (1, 1): {"latency": 6.0}, (2, 1): {"latency": 1.0},
             (3, 1): {"latency": 2.0}}
    runner = TableRunner(table)
    result = Autotuner(_cfg("latency", stage="all", max_mbs=1), runner,
                       stage_early_stop=False).tune()
    assert {e.stage for e in runner.calls} == {0, 1, 2, 3}
    assert (result.best.stage, result.value) == (2, 1.0)
    assert not result.skipped
    stopped = [n for n in result.notes if "DeepSpeed's autotuner stops" in n]
    assert len(stopped) == 1 and "stage 1 (6) did not improve on stage 0 (4)" in stopped[0]
    assert "never tries stage 2, 3 (stage_early_stop=False)" in stopped[0]
    assert any("would have missed" in n and "stage 2" in n for n in result.notes)


def test_tune__free_runner_tries_every_stage_by_default():
    table = {(0, 1): {"latency": 4.0}, (1, 1): {"latency": 6.0}, (2, 1): {"latency": 9.0}}

    class FreeRunner(TableRunner):
        costly = False

    runner = FreeRunner(table)
    result = Autotuner(_cfg("latency", stage="all", max_mbs=1), runner).tune()
    assert {e.stage for e in runner.calls} == {0, 1, 2, 3}
    assert result.best.stage == 0
    assert any("cost nothing" in n for n in result.notes)
    assert not any("would have missed" in n for n in result.notes)  # stage 0 won anyway
    forced = FreeRunner(table)  # DeepSpeed's rule when asked for
    Autotuner(_cfg("latency", stage="all", max_mbs=1), forced, stage_early_stop=True).tune()
    assert {e.stage for e in forced.calls} == {0, 1}


def test_tune__stage_early_stop_never_cuts_an_explicit_list():
    table = {(s, 1): {"latency": v} for s, v in ((0, 4.0), (1, 6.0), (2, 1.0), (3, 2.0))}
    runner = TableRunner(table)
    result = Autotuner(_cfg("latency", stage=[0, 1, 2, 3], max_mbs=1), runner,
                       stage_early_stop=True).tune()
    assert {e.stage for e in runner.calls} == {0, 1, 2, 3}
    assert result.best.stage == 2 and not result.notes


def test_autotuner__stage_early_stop_must_be_a_bool():
    with pytest.raises(AutotuneConfigError, match="stage_early_stop must be True, False"):
        Autotuner(_cfg(), TableRunner({}), stage_early_stop="yes")


def test_tune__simulated_all_stages_finds_zero3_for_latency():
    # the ZeRO notebook's case: ZeRO-1 and ZeRO-2 tie at micro-batch 1, so DeepSpeed's early
    # stop never tries ZeRO-3, the simulator's fastest stage (prefetched gathers)
    runner = SimulatorRunner(LLAMA7B, family="A100-80G", n_gpus=8, seq_len=1024)
    cfg = _cfg("latency", stage="all", max_mbs=4)
    every = Autotuner(cfg, runner).tune()
    assert {t.stage for t in every.trials} == {1, 2, 3}  # ZeRO-0 does not fit
    assert every.best.stage == 3 and 3 not in every.skipped
    assert any("would have missed" in n for n in every.notes)
    deepspeed = Autotuner(cfg, runner, stage_early_stop=True).tune()
    assert "not tried" in deepspeed.skipped[3] and deepspeed.best.stage in (1, 2)
    assert every.value < deepspeed.value


def test_tune__failing_experiment_never_becomes_optimal():
    # mbs 2 "ran" with a stellar latency but crashed: it must not win
    runner = TableRunner({(1, 1): {"latency": 30.0}, (1, 2): ("failed", {"latency": 0.001})})
    result = Autotuner(_cfg("latency"), runner).tune()
    assert result.best.micro_batch == 1
    assert result.value == 30.0


def test_tune__returns_result_when_nothing_fits(tmp_path):
    runner = SimulatorRunner("Llama 3.1 70B", family="A100-80G", n_gpus=8)
    result = Autotuner(_cfg("throughput", stage="all"), runner).tune()
    assert isinstance(result, TuneResult)
    assert result.best is None and result.value is None
    assert all(v is None for v in result.stage_values.values())
    assert "model states need" in result.skipped[3]
    assert "no successful trial" in result.describe()
    with pytest.raises(NoResultError, match="nothing to write"):
        result.write(tmp_path)
    assert not list(tmp_path.iterdir())


def test_tune__early_stopping_ends_a_stage():
    table = {(2, m): {"latency": 10.0} for m in range(1, 9)}
    cfg = _cfg("latency", stage=2, max_mbs=8, fast=False, tuner_early_stopping=2,
               num_tuning_micro_batch_sizes=8)
    result = Autotuner(cfg, TableRunner(table)).tune()
    assert any("early stop" in n for n in result.notes)
    assert sum(t.phase == "tune" for t in result.trials) == 2


def test_tune__tuner_num_trials_caps_new_runs():
    table = {(2, m): {"latency": 10.0 - m} for m in range(1, 9)}
    cfg = _cfg("latency", stage=2, max_mbs=8, fast=False, tuner_num_trials=3,
               num_tuning_micro_batch_sizes=8)
    result = Autotuner(cfg, TableRunner(table)).tune()
    assert sum(t.phase == "tune" for t in result.trials) == 3


@pytest.mark.parametrize("tuner", ["gridsearch", "random", "model_based"])
def test_tune__every_tuner_finds_the_simulated_optimum(tuner):
    runner = SimulatorRunner("Llama 2 7B", family="H100-SXM", n_gpus=8,
                             activation_checkpointing=True)
    cfg = _cfg("throughput", stage=[2, 3], max_mbs=16, fast=False, tuner_type=tuner,
               tuner_early_stopping=50)
    result = Autotuner(cfg, runner, seed=3).tune()
    grid = Autotuner({**cfg, "autotuning": {**cfg["autotuning"], "tuner_type": "gridsearch"}},
                     runner).tune()
    assert result.best.micro_batch == 16
    assert result.value == pytest.approx(grid.value)


def test_tune__model_based_is_seeded():
    runner = SimulatorRunner("Llama 2 7B", n_gpus=8, activation_checkpointing=True)
    cfg = _cfg("latency", stage=3, max_mbs=8, fast=False, tuner_type="model_based",
               tuner_num_trials=6)
    a = [t.name for t in Autotuner(cfg, runner, seed=7).tune().trials]
    b = [t.name for t in Autotuner(cfg, runner, seed=7).tune().trials]
    assert a == b


def test_tune__max_train_batch_size_bounds_micro_batch():
    runner = SimulatorRunner("Llama 2 7B", n_gpus=8, activation_checkpointing=True)
    result = Autotuner(_cfg("throughput", stage=3, max_mbs=64, max_train_batch_size=16),
                       runner).tune()
    assert max(t.micro_batch for t in result.trials) == 2
    assert result.best.micro_batch == 2


def test_tune__fixed_train_batch_size_sets_accumulation():
    runner = SimulatorRunner("Llama 2 7B", n_gpus=8, activation_checkpointing=True)
    cfg = {**_cfg("throughput", stage=2, max_mbs=64), "train_batch_size": 64}
    result = Autotuner(cfg, runner).tune()
    assert {(t.micro_batch, t.grad_accum) for t in result.trials} <= {
        (1, 8), (2, 4), (4, 2), (8, 1)}
    best = result.best_config
    assert best["train_batch_size"] == 64
    assert best["train_micro_batch_size_per_gpu"] * best["gradient_accumulation_steps"] * 8 == 64


def test_tune__user_zero_settings_kept_and_not_tuned(tmp_path):
    cfg = _cfg("throughput", stage=[2], max_mbs=4, fast=False)
    cfg["zero_optimization"].update(overlap_comm=False, offload_optimizer={"device": "none"},
                                    contiguous_gradients=True)
    runner = SimulatorRunner("Llama 2 7B", n_gpus=8, activation_checkpointing=True)
    result = Autotuner(cfg, runner).tune()
    assert all("overlap_comm" not in t.knobs for t in result.trials)
    assert any(t.knobs for t in result.trials)  # the other knobs were tuned
    paths = result.write(tmp_path)
    written = json.loads(paths["ds_config"].read_text())
    assert "autotuning" not in written
    zero = written["zero_optimization"]
    assert zero["stage"] == 2 and zero["overlap_comm"] is False
    assert zero["offload_optimizer"] == {"device": "none"} and zero["contiguous_gradients"]
    assert written["train_micro_batch_size_per_gpu"] == result.best.micro_batch
    assert written["gradient_accumulation_steps"] == 1
    assert written["fp16"] == {"enabled": True}
    cmd = paths["cmd"].read_text()
    assert str(paths["ds_config"].resolve()) in cmd and cmd.startswith("deepspeed --num_gpus 8")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["cmd_optimal.txt",
                                                          "ds_config_optimal.json",
                                                          "summary.txt"]


def test_optimal_ds_config__merges_trial_into_user_config():
    user = {"zero_optimization": {"stage": "all", "reduce_bucket_size": 1},
            "autotuning": {"enabled": True}, "train_batch_size": 32, "optimizer": {"type": "Adam"}}
    t = Trial("n", stage=3, micro_batch=2, grad_accum=2, status="ok",
              knobs={"stage3_prefetch_bucket_size": 5})
    cfg = optimal_ds_config(user, trial=t, n_gpus=8)
    assert cfg == {"zero_optimization": {"stage": 3, "reduce_bucket_size": 1,
                                         "stage3_prefetch_bucket_size": 5},
                   "train_batch_size": 32, "optimizer": {"type": "Adam"},
                   "train_micro_batch_size_per_gpu": 2, "gradient_accumulation_steps": 2}
    assert user["autotuning"] == {"enabled": True}  # input untouched


def test_experiment_name__distinct_knob_values_give_distinct_names():
    names = {experiment_name(2, micro_batch=1, grad_accum=1, knobs={"reduce_bucket_size": v})
             for v in (100_000, 120_000, 5e8, 500_000_000.5)}
    assert len(names) == 4
    assert experiment_name(2, micro_batch=1, grad_accum=1,
                           knobs={"reduce_bucket_size": 5e8}) == "z2_gas1_tmbspg1_rbs5e8"


def test_render_command__replaces_or_appends_the_config_flag():
    assert render_command(["deepspeed", "t.py", "--deepspeed_config=a.json"],
                          ds_config="b.json") == "deepspeed t.py --deepspeed_config=b.json"
    assert render_command(["python", "t.py"], ds_config="b c.json") == (
        "python t.py --deepspeed_config 'b c.json'")
    assert render_command([], ds_config="c.json", n_gpus=32).startswith(
        "deepspeed --num_nodes 4 --num_gpus 8")


# -- configuration errors ---------------------------------------------------------------
@pytest.mark.parametrize("stage", [4, -1, "2", "zero3", [], [1, 5], [True], 1.0])
def test_parse_stages__bad_stage_raises(stage):
    with pytest.raises(AutotuneConfigError, match='pass 0, 1, 2 or 3, a list such as'):
        parse_stages(stage)


def test_autotuner__bad_stage_in_config_raises():
    with pytest.raises(AutotuneConfigError, match="is not a ZeRO stage"):
        Autotuner(_cfg(stage=7), TableRunner({}))


def test_autotuner__bad_metric_raises_with_known_names():
    with pytest.raises(AutotuneConfigError, match=r"unknown metric 'speed'; pass one of"):
        Autotuner(_cfg("speed"), TableRunner({}))


@pytest.mark.parametrize(
    ("autotuning", "match"),
    [
        ({"enabled": False}, "autotuning.enabled is false"),
        ({"tuner_type": "bayes"}, "tuner_type='bayes' is unknown"),
        ({"min_train_micro_batch_size_per_gpu": 8, "max_train_micro_batch_size_per_gpu": 2},
         "pass min <= max"),
        ({"tuner_num_trials": 0}, "tuner_num_trials must be an integer >= 1"),
        ({"fast": "yes"}, "autotuning.fast must be true or false"),
        ({"mp_size": 3}, "mp_size=3 must divide"),
    ],
)
def test_autotuner__bad_autotuning_values_raise(autotuning, match):
    cfg = {"autotuning": autotuning}
    with pytest.raises(AutotuneConfigError, match=match):
        Autotuner(cfg, TableRunner({}))


def test_autotuner__train_batch_size_not_multiple_of_dp_raises():
    with pytest.raises(AutotuneConfigError, match="multiple of the data-parallel size 8"):
        Autotuner({"train_batch_size": 12}, TableRunner({}))


def test_autotune_config__unknown_key_warns():
    with pytest.warns(UnknownAutotuningKeyWarning, match="max_train_micro_batch"):
        cfg = AutotuneConfig.from_ds_config({"autotuning": {"max_train_micro_batch": 4}})
    assert cfg.max_micro_batch == 1024


def test_load_ds_config__malformed_or_missing_file_raises(tmp_path):
    bad = tmp_path / "ds.json"
    bad.write_text("{not json")
    with pytest.raises(AutotuneConfigError, match="not valid JSON"):
        load_ds_config(bad)
    with pytest.raises(FileNotFoundError, match="pass an existing JSON file"):
        load_ds_config(tmp_path / "missing.json")


def test_autotuner__runner_without_run_raises():
    with pytest.raises(TypeError, match="run\\(experiment\\)"):
        Autotuner({}, object())


# -- CommandRunner: real subprocesses ---------------------------------------------------
def _replay_runner(tmp_path, table, **kw):
    table_path = tmp_path / "table.json"
    table_path.write_text(json.dumps(table))
    return CommandRunner(
        [sys.executable, str(REPLAY), "--table", str(table_path)], n_gpus=8,
        results_dir=tmp_path / "autotuning_results", exps_dir=tmp_path / "autotuning_exps",
        **kw)


def _exp(stage=1, mbs=1, gas=1):
    return Experiment(name=f"z{stage}_gas{gas}_tmbspg{mbs}", stage=stage, micro_batch=mbs,
                      grad_accum=gas, n_gpus=8,
                      ds_config={"zero_optimization": {"stage": stage},
                                 "fp16": {"enabled": True},
                                 "train_micro_batch_size_per_gpu": mbs,
                                 "gradient_accumulation_steps": gas})


def test_command_runner__writes_deepspeed_layout_and_reads_metrics(tmp_path):
    runner = _replay_runner(tmp_path, {"1-1-1": {"metrics": {"latency": 12.5}}})
    trial = runner.run(_exp())
    assert trial.ok and trial.value("latency") == 12.5
    d = tmp_path / "autotuning_results" / "z1_gas1_tmbspg1"
    assert {p.name for p in d.iterdir()} >= {"exp.json", "ds_config.json", "metrics.json",
                                             "stdout.log", "stderr.log", "cmd.txt"}
    assert (tmp_path / "autotuning_exps" / "z1_gas1_tmbspg1.json").exists()
    assert "replay 1-1-1" in (d / "stdout.log").read_text()
    ds = json.loads((d / "ds_config.json").read_text())
    assert ds["autotuning"]["metric_path"] == str(d / "metrics.json")


def test_command_runner__failed_run_recorded_as_failed(tmp_path):
    runner = _replay_runner(tmp_path, {"1-1-1": {"oom": True},
                                       "1-2-1": {"crash_after_metrics": {"latency": 0.1}},
                                       "1-3-1": {"corrupt": True}})
    oom = runner.run(_exp(mbs=1))
    assert not oom.ok and "exit code 1" in oom.error and "out of memory" in oom.error
    crash = runner.run(_exp(mbs=2))
    assert not crash.ok and crash.metrics == {"latency": 0.1} and crash.value("latency") is None
    corrupt = runner.run(_exp(mbs=3))
    assert not corrupt.ok and "not valid JSON" in corrupt.error


def test_command_runner__timeout_kills_and_records(tmp_path):
    runner = _replay_runner(tmp_path, {"1-1-1": {"sleep": 30, "metrics": {"latency": 1.0}}},
                            timeout_s=0.5)
    trial = runner.run(_exp())
    assert not trial.ok and "timed out after 0.5 s" in trial.error
    assert trial.duration_s < 10


def test_command_runner__interrupt_kills_the_job(tmp_path, monkeypatch):
    import subprocess

    runner = _replay_runner(tmp_path, {"1-1-1": {"sleep": 30, "metrics": {"latency": 1.0}}},
                            timeout_s=60)
    started = []
    real_wait = subprocess.Popen.wait

    def interrupted_wait(self, timeout=None):
        if timeout is not None:  # the runner's wait for the job: Ctrl-C arrives
            started.append(self)
            raise KeyboardInterrupt
        return real_wait(self)

    monkeypatch.setattr(subprocess.Popen, "wait", interrupted_wait)
    with pytest.raises(KeyboardInterrupt):
        runner.run(_exp())
    [proc] = started
    assert proc.poll() is not None  # the training job was killed and reaped, not orphaned


def test_command_runner__missing_executable_raises():
    with pytest.raises(FileNotFoundError, match="not on PATH"):
        CommandRunner(["no-such-launcher-xyz", "train.py"], n_gpus=8)


def test_tune__command_runner_crash_after_metrics_never_wins(tmp_path):
    runner = _replay_runner(tmp_path, {"1-1-1": {"metrics": {"latency": 30.0}},
                                       "1-2-1": {"crash_after_metrics": {"latency": 0.1}}})
    result = Autotuner(_cfg("latency", stage=1, max_mbs=2), runner).tune()
    assert result.best.micro_batch == 1 and result.value == 30.0
    failed = [t for t in result.trials if not t.ok]
    assert [t.micro_batch for t in failed] == [2] and "NCCL error" in failed[0].error


def test_command_runner_from_ds_config__uses_autotuning_folders(tmp_path):
    cfg = {"autotuning": {"results_dir": str(tmp_path / "res"), "exps_dir": str(tmp_path / "ex")}}
    runner = CommandRunner.from_ds_config([sys.executable, str(REPLAY)], config=cfg, n_gpus=8)
    assert runner.results_dir == tmp_path / "res" and runner.exps_dir == tmp_path / "ex"


def test_tune_result_write__defaults_to_results_dir(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    runner = TableRunner({(1, 1): {"latency": 3.0}})
    result = Autotuner(_cfg("latency", max_mbs=1), runner).tune()
    paths = result.write()
    assert paths["ds_config"] == pathlib.Path("autotuning_results") / "ds_config_optimal.json"
    assert json.loads(paths["ds_config"].read_text())["zero_optimization"] == {"stage": 1}


def test_tune__simulator_and_command_runner_agree(tmp_path):
    sim = SimulatorRunner("Llama 2 7B", family="A100-80G", n_gpus=8, gpu_mem_gb=35,
                          activation_checkpointing=True)
    table = {}
    for s in (1, 2, 3):
        for m in range(1, 9):
            t = sim.run(_exp(stage=s, mbs=m))
            table[f"{s}-{m}-1"] = {"metrics": dict(t.metrics)} if t.ok else {"oom": True}
    cfg = _cfg("throughput", stage=[1, 2, 3], max_mbs=8)
    by_sim = Autotuner(cfg, sim).tune()
    by_cmd = Autotuner(cfg, _replay_runner(tmp_path, table)).tune()
    assert by_sim.best.name == by_cmd.best.name
    assert by_cmd.value == pytest.approx(by_sim.value)
    assert by_sim.stage_values[1] is None and by_cmd.stage_values[1] is None
    assert by_cmd.stage_values[2] == pytest.approx(by_sim.stage_values[2])
    assert by_cmd.stage_values[3] == pytest.approx(by_sim.stage_values[3])
    # the stage-2 memory limit: estimated by the simulator, found by probing real runs
    top = [max(t.micro_batch for t in r.trials if t.stage == 2 and t.ok) for r in (by_sim, by_cmd)]
    assert top[0] == top[1] < 8
    # the command runner had no memory estimate, so its OOM probes show up as failed
    assert any(not t.ok for t in by_cmd.trials)


# -- DeepSpeed results folders -----------------------------------------------------------
def _ds_folder(root, experiments):
    """DeepSpeed layout: autotuning_exps/<name>.json, autotuning_results/<name>/..."""
    exps, results = root / "autotuning_exps", root / "autotuning_results"
    exps.mkdir(parents=True, exist_ok=True)
    for name, (stage, mbs, metrics) in experiments.items():
        ds = {"train_micro_batch_size_per_gpu": mbs, "gradient_accumulation_steps": 1,
              "fp16": {"enabled": True},
              "zero_optimization": {"stage": stage, "overlap_comm": True,
                                    "offload_optimizer": {"device": "none"}},
              "autotuning": {"enabled": True, "metric_path": f"{results}/{name}/metrics.json"}}
        exp = {"name": name, "ds_config": ds, "num_gpus": 8, "num_nodes": 1,
               "user_script": "train.py",
               "user_args": ["--deepspeed_config", f"{results}/{name}/ds_config.json"],
               "launcher_args": ["--num_gpus", "8"]}
        (exps / f"{name}.json").write_text(json.dumps(exp))
        d = results / name
        d.mkdir(parents=True, exist_ok=True)
        (d / "exp.json").write_text(json.dumps(exp))
        (d / "ds_config.json").write_text(json.dumps(ds))
        (d / "stdout.log").write_text("training...\n")
        (d / "stderr.log").write_text("" if metrics is not None else
                                      "RuntimeError: CUDA out of memory\n")
        if isinstance(metrics, str):
            (d / "metrics.json").write_text(metrics)
        elif metrics is not None:
            (d / "metrics.json").write_text(json.dumps(metrics))
    (results / "profile_model_info").mkdir(exist_ok=True)
    return root


def _three_runs(tmp_path):
    return _ds_folder(tmp_path / "run", {
        "z1_gas1_tmbspg1": (1, 1, {"latency": 30.0, "throughput": 266.0,
                                   "FLOPS_per_gpu": 1e14}),
        "z2_gas1_tmbspg2": (2, 2, {"latency": 8.0, "throughput": 2000.0,
                                   "FLOPS_per_gpu": 3e14}),
        "z3_gas1_tmbspg4": (3, 4, {"latency": 15.0, "throughput": 2100.0,
                                   "FLOPS_per_gpu": 2e14}),
        "z3_gas1_tmbspg8": (3, 8, None),  # ran out of memory: no metrics.json
    })


def test_rank__picks_lowest_latency(tmp_path):
    folder = _three_runs(tmp_path)
    out = tmp_path / "out"
    result = rank(folder, metric="latency", out_dir=out)
    assert result.best.name == "z2_gas1_tmbspg2" and result.value == 8.0
    assert result.n_gpus == 8
    written = json.loads((out / "ds_config_optimal.json").read_text())
    assert "autotuning" not in written
    assert written["zero_optimization"] == {"stage": 2, "overlap_comm": True,
                                            "offload_optimizer": {"device": "none"}}
    assert written["train_micro_batch_size_per_gpu"] == 2
    cmd = (out / "cmd_optimal.txt").read_text().strip()
    assert cmd == f"deepspeed --num_gpus 8 train.py --deepspeed_config {out.resolve()}/" \
                  "ds_config_optimal.json"


@pytest.mark.parametrize(("metric", "best"), [("throughput", "z3_gas1_tmbspg4"),
                                              ("FLOPS", "z2_gas1_tmbspg2")])
def test_rank__direction_follows_the_metric(tmp_path, metric, best):
    assert rank(_three_runs(tmp_path), metric=metric).best.name == best


def test_results_folder_runner__corrupted_metrics_skipped_not_fatal(tmp_path):
    folder = _ds_folder(tmp_path / "run", {
        "z1_gas1_tmbspg1": (1, 1, {"latency": 30.0}),
        "z1_gas1_tmbspg2": (1, 2, '{"latency": 1.0, "thr'),  # truncated write
        "z1_gas1_tmbspg4": (1, 4, "[1, 2]"),  # not an object
    })
    with pytest.warns(MalformedExperimentWarning) as record:
        result = rank(folder, metric="latency")
    text = " ".join(str(w.message) for w in record)
    assert "z1_gas1_tmbspg2" in text and "z1_gas1_tmbspg4" in text
    assert result.best.name == "z1_gas1_tmbspg1"
    bad = {t.name: t for t in result.trials if not t.ok}
    assert set(bad) == {"z1_gas1_tmbspg2", "z1_gas1_tmbspg4"}


def test_results_folder_runner__partial_experiment_warns(tmp_path):
    folder = _ds_folder(tmp_path / "run", {"z1_gas1_tmbspg1": (1, 1, {"latency": 3.0})})
    (folder / "autotuning_exps" / "z2_gas1_tmbspg1.json").write_text("{broken")
    half = folder / "autotuning_results" / "z3_gas1_tmbspg1"
    half.mkdir()
    (half / "ds_config.json").write_text(json.dumps(
        {"zero_optimization": {"stage": 3}, "train_micro_batch_size_per_gpu": 1}))
    with pytest.warns(MalformedExperimentWarning) as record:
        runner = ResultsFolderRunner(folder)
    text = " ".join(str(w.message) for w in record)
    assert "z2_gas1_tmbspg1" in text and "z3_gas1_tmbspg1" in text
    assert [t.name for t in runner.trials if t.ok] == ["z1_gas1_tmbspg1"]


def test_results_folder_runner__replays_through_autotuner(tmp_path):
    folder = _three_runs(tmp_path)
    runner = ResultsFolderRunner(folder)
    cfg = _cfg("latency", stage=[2, 3], max_mbs=8, min_train_micro_batch_size_per_gpu=2)
    result = Autotuner(cfg, runner).tune()
    assert result.best.name == "z2_gas1_tmbspg2"
    assert "not recorded" in result.skipped[3]


def test_rank__missing_folder_raises(tmp_path):
    with pytest.raises(FileNotFoundError, match="pass the folder DeepSpeed's autotuner ran in"):
        rank(tmp_path / "nope", metric="latency")
    (tmp_path / "empty").mkdir()
    with pytest.raises(FileNotFoundError, match="holds no autotuning_results"):
        ResultsFolderRunner(tmp_path / "empty")


def test_rank__bad_metric_raises(tmp_path):
    with pytest.raises(ValueError, match="unknown metric 'fastest'"):
        rank(_three_runs(tmp_path), metric="fastest")


# -- CLI ----------------------------------------------------------------------------------
def test_main__tune_llama2_7b_on_8x80gb_prints_stage_and_micro_batch(tmp_path, capsys):
    out = tmp_path / "out"
    rc = main(["tune", "--model", "Llama 2 7B", "--gpus", "8", "--gpu-mem-gb", "80",
               "--metric", "throughput", "--stages", "all", "--out", str(out)])
    text = capsys.readouterr().out
    assert rc == 0
    assert "model states need 134.8 GB" in text  # ZeRO-0: 20 N bytes do not fit
    best = json.loads((out / "ds_config_optimal.json").read_text())
    assert best["zero_optimization"]["stage"] in (1, 2, 3)
    assert best["train_micro_batch_size_per_gpu"] >= 1
    line = [ln for ln in text.splitlines() if ln.startswith("best: ")][0]
    assert f"ZeRO stage {best['zero_optimization']['stage']}, micro-batch " \
           f"{best['train_micro_batch_size_per_gpu']}" in line
    assert "deepspeed --num_gpus 8 train.py" in (out / "cmd_optimal.txt").read_text()


def test_main__tune_stage_early_stop_flag(capsys):
    argv = ["tune", "--model", "Llama 2 7B", "--gpus", "8", "--s-kv", "1024",
            "--metric", "latency", "--stages", "all", "--max-micro-batch", "2"]
    assert main(argv) == 0
    text = capsys.readouterr().out
    assert 'stages "all" (every stage)' in text and "ZeRO stage 3" in text
    assert "DeepSpeed's autotuner stops" in text
    assert main([*argv, "--stage-early-stop", "on"]) == 0
    text = capsys.readouterr().out
    assert 'stages "all" (early stop on, as DeepSpeed)' in text
    assert "stage 3: no result - not tried" in text and "ZeRO stage 3" not in text
    assert main([*argv, "--stage-early-stop", "maybe"]) == 2


def test_main__tune_with_checkpointing_uses_bigger_micro_batches(capsys):
    def best(*extra):
        rc = main(["tune", "--model", "Llama 2 7B", "--gpus", "8", "--metric", "FLOPS",
                   "--family", "H100-SXM", "--stages", "2,3", "--max-micro-batch", "32",
                   *extra])
        assert rc == 0
        line = [ln for ln in capsys.readouterr().out.splitlines() if ln.startswith("best: ")][0]
        m = re.search(r"ZeRO stage (\d), micro-batch (\d+),", line)
        return int(m[1]), int(m[2])

    plain = best()
    stage, mbs = best("--activation-checkpointing")
    assert mbs > plain[1] and mbs > 1
    # FLOPS grow with the micro-batch: the largest that fits wins
    sim = SimulatorRunner("Llama 2 7B", family="H100-SXM", n_gpus=8,
                          activation_checkpointing=True)
    assert sim.run(_exp(stage=stage, mbs=mbs)).ok
    # the largest micro-batch that fits, or the --max-micro-batch cap
    assert mbs == 32 or "out of memory" in sim.run(_exp(stage=stage, mbs=mbs + 1)).error


def test_main__tune_reads_hf_config_json(tmp_path, capsys):
    cfg = {"num_hidden_layers": 4, "hidden_size": 512, "num_attention_heads": 8,
           "intermediate_size": 2048, "vocab_size": 32000, "model_type": "llama"}
    path = tmp_path / "config.json"
    path.write_text(json.dumps(cfg))
    rc = main(["tune", "--model", str(path), "--gpus", "2", "--metric", "latency",
               "--max-micro-batch", "4"])
    assert rc == 0
    assert "micro-batch 1," in capsys.readouterr().out  # latency: the smallest step wins


def test_main__tune_with_nothing_feasible_returns_1(capsys):
    rc = main(["tune", "--model", "Llama 3.1 405B", "--gpus", "8", "--metric", "latency"])
    assert rc == 1
    assert "no successful trial" in capsys.readouterr().out


def test_main__rank_writes_optimal_config(tmp_path, capsys):
    folder = _three_runs(tmp_path)
    rc = main(["rank", str(folder), "--metric", "latency"])
    assert rc == 0  # DeepSpeed's place for the optimal config: the results folder
    assert json.loads((folder / "autotuning_results" / "ds_config_optimal.json").read_text())[
        "train_micro_batch_size_per_gpu"] == 2
    assert "best: ZeRO stage 2, micro-batch 2" in capsys.readouterr().out


def test_main__rank_reports_malformed_experiments_on_stderr(tmp_path, capsys):
    folder = _ds_folder(tmp_path / "run", {"z1_gas1_tmbspg1": (1, 1, {"latency": 3.0}),
                                           "z1_gas1_tmbspg2": (1, 2, "{oops")})
    assert main(["rank", str(folder), "--metric", "latency", "--out", str(tmp_path / "o")]) == 0
    assert "warning: experiment 'z1_gas1_tmbspg2'" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["tune", "--model", "Llama 2 7B", "--metric", "speed"], "unknown metric 'speed'"),
        (["tune", "--model", "Llama 2 7B", "--stages", "5"], "--stages '5'"),
        (["tune", "--model", "Llama 2 7B", "--stages", "one"], "--stages 'one'"),
        (["tune", "--model", "Llama 2 7B", "--gpus", "0"], "--gpus must be a positive"),
        (["tune", "--model", "Llama 2 7B", "--gpus", "abc"], "--gpus must be a positive"),
        (["tune", "--model", "Llama 2 7B", "--gpu-mem-gb", "-4"], "--gpu-mem-gb must be"),
        (["tune", "--model", "GPT-5"], "unknown model 'GPT-5'"),
        (["tune", "--model", "Llama 2 7B", "--family", "TPU"], "unknown hardware family"),
        (["tune", "--model", "Llama 2 7B", "--tuner", "bayes"], "--tuner 'bayes'"),
        (["tune", "--model", "Llama 2 7B", "--precision", "int4"], "--precision 'int4'"),
        (["tune", "--model", "missing/config.json"], "no HuggingFace config"),
        (["tune", "--model", "Llama 2 7B", "--config", "missing.json"], "no DeepSpeed config"),
        (["tune"], "pass --model"),
        (["rank", "/no/such/dir"], "no folder '/no/such/dir'"),
        (["rank", ".", "--metric", "fastest"], "unknown metric 'fastest'"),
    ],
)
def test_main__bad_options_exit_2_with_one_line(argv, message, capsys):
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1
    assert err.startswith(f"simcore {argv[0]}: error: ")
    assert message in err


def test_main__argparse_usage_errors_exit_2(capsys):
    assert main(["tune", "--no-such-flag"]) == 2
    assert main(["rank"]) == 2
    capsys.readouterr()


def test_add_tune_parsers__sets_handlers():
    import argparse

    p = argparse.ArgumentParser(prog="simcore")
    add_tune_parsers(p.add_subparsers(dest="command"))
    args = p.parse_args(["tune", "--model", "Llama 2 7B"])
    assert args.func.__name__ == "tune_command"
    assert p.parse_args(["rank", "x"]).func.__name__ == "rank_command"


# -- the design promises ------------------------------------------------------------------
def test_autotune_package__never_calls_exit():
    pkg = pathlib.Path(__file__).parents[1] / "simcore" / "autotune"
    for path in pkg.glob("*.py"):
        src = path.read_text()
        assert not re.search(r"(?<![`\w])exit\(|sys\.exit|os\._exit|SystemExit\(", src), path.name


def test_zero_stages__one_row_per_stage():
    assert [s.stage for s in ZERO_STAGES] == [0, 1, 2, 3]
    assert not ZERO_STAGES[0].space


def test_tune_result__summary_lists_stages_and_choice():
    trials = [Trial("z1_gas1_tmbspg1", stage=1, micro_batch=1, grad_accum=1, status="ok",
                    metrics={"latency": 30.0}),
              Trial("z1_gas1_tmbspg2", stage=1, micro_batch=2, grad_accum=1, status="ok",
                    metrics={"latency": 8.0}),
              Trial("z1_gas1_tmbspg4", stage=1, micro_batch=4, grad_accum=1, status="failed",
                    error="CUDA out of memory")]
    r = TuneResult.from_trials(trials, metric="latency", stage_values={0: None, 1: 8.0},
                               skipped={0: "model states need 135 GB"})
    text = r.summary()
    assert "stage 0: no result - model states need 135 GB" in text
    assert "* " in [ln for ln in text.splitlines() if "tmbspg2" in ln][0]
    assert "CUDA out of memory" in text
    assert text.splitlines()[-1].startswith("best: ZeRO stage 1, micro-batch 2")


# -- rank: impossible metrics never win, atomic all-or-nothing outputs (issue 12) ------------
_GOOD = {"latency": 30.0, "throughput": 266.0, "FLOPS_per_gpu": 1e14}


def _with(**bad):
    return {**_GOOD, **bad}


@pytest.mark.parametrize(("metric", "bad"), [
    ("latency", -5.0), ("latency", 0.0), ("latency", float("nan")), ("latency", float("inf")),
    ("latency", True), ("latency", "fast"),
    ("throughput", -1.0), ("throughput", float("nan")), ("throughput", float("inf")),
    ("throughput", 0.0),
    ("FLOPS", -1e14), ("FLOPS", float("nan")), ("FLOPS", float("inf")),
    ("FLOPS", float("-inf")),
])
def test_rank__impossible_metric_never_wins_and_counts_as_failed(tmp_path, metric, bad):
    key = "FLOPS_per_gpu" if metric == "FLOPS" else metric
    folder = _ds_folder(tmp_path / "run", {
        "z1_gas1_tmbspg1": (1, 1, dict(_GOOD)),
        "z2_gas1_tmbspg2": (2, 2, _with(**{key: bad})),  # json writes NaN / Infinity
    })
    result = rank(folder, metric=metric)
    assert result.best.name == "z1_gas1_tmbspg1"
    broken = {t.name: t for t in result.trials}["z2_gas1_tmbspg2"]
    assert broken.status == "failed" and "no usable metric" in broken.error
    assert result.describe().endswith("of 1 successful trials)")
    assert result.stage_values[2] is None and "no successful experiment" in result.skipped[2]


def test_rank__folder_without_usable_values_finds_nothing(tmp_path, capsys):
    folder = _ds_folder(tmp_path / "run", {
        "z1_gas1_tmbspg1": (1, 1, _with(latency=-1.0)),
        "z2_gas1_tmbspg1": (2, 1, _with(latency=0.0)),
        "z3_gas1_tmbspg1": (3, 1, {"throughput": 5.0}),  # no latency at all
    })
    result = rank(folder, metric="latency")
    assert result.best is None and not result.found
    assert all(t.status == "failed" for t in result.trials)
    assert "no 'latency' in its metrics" in {t.name: t for t in result.trials}[
        "z3_gas1_tmbspg1"].error
    assert main(["rank", str(folder), "--metric", "latency"]) == 1
    text = capsys.readouterr().out
    assert "latency -1.0 is not positive" in text and "no successful trial" in text
    assert not (folder / "autotuning_results" / "ds_config_optimal.json").exists()


def test_tune__impossible_values_from_a_runner_are_failed_runs():
    runner = TableRunner({(1, 1): {"latency": 30.0}, (1, 2): {"latency": -8.0},
                          (1, 3): {"latency": 0.0}, (1, 4): {"latency": float("inf")}})
    result = Autotuner(_cfg("latency", max_mbs=4, num_tuning_micro_batch_sizes=4),
                       runner).tune()
    assert (result.best.micro_batch, result.value) == (1, 30.0)
    assert [t.micro_batch for t in result.trials if t.ok] == [1]
    # a run that reports no usable value still ran: the probe found micro-batch 4 runs
    assert max(t.micro_batch for t in result.trials) == 4


def _old_outputs(out):
    out.mkdir(parents=True, exist_ok=True)
    old = {"ds_config_optimal.json": '{"old": true}\n', "cmd_optimal.txt": "old command\n",
           "summary.txt": "old summary\n"}
    for name, text in old.items():
        (out / name).write_text(text)
    return old


def test_rank__outputs_have_a_normal_file_mode_under_the_umask(tmp_path):
    folder = _three_runs(tmp_path)
    previous = os.umask(0o027)
    try:
        rank(folder, metric="latency", out_dir=tmp_path / "o27")
        os.umask(0o022)
        rank(folder, metric="latency", out_dir=tmp_path / "o22")
    finally:
        os.umask(previous)
    for name in ("ds_config_optimal.json", "cmd_optimal.txt", "summary.txt"):
        assert stat.S_IMODE((tmp_path / "o27" / name).stat().st_mode) == 0o640
        assert stat.S_IMODE((tmp_path / "o22" / name).stat().st_mode) == 0o644


def test_rank__outputs_replace_the_old_files_by_rename(tmp_path):
    folder = _three_runs(tmp_path)
    out = tmp_path / "out"
    _old_outputs(out)
    before = {n: (out / n).stat().st_ino for n in ("ds_config_optimal.json", "cmd_optimal.txt")}
    with open(out / "ds_config_optimal.json", encoding="utf-8") as reader:
        rank(folder, metric="latency", out_dir=out)
        assert reader.read() == '{"old": true}\n'  # a reader of the old file is undisturbed
    for name, ino in before.items():
        assert (out / name).stat().st_ino != ino  # a new file renamed in, not rewritten
    assert json.loads((out / "ds_config_optimal.json").read_text())[
        "train_micro_batch_size_per_gpu"] == 2
    assert sorted(p.name for p in out.iterdir()) == [
        "cmd_optimal.txt", "ds_config_optimal.json", "summary.txt"]


@pytest.mark.parametrize("phase", ["write", "rename"])
def test_rank__failed_second_file_leaves_the_first_untouched(tmp_path, monkeypatch, capsys,
                                                             phase):
    import errno

    import simcore.io as sio

    folder = _three_runs(tmp_path)
    out = tmp_path / "out"
    old = _old_outputs(out)
    if phase == "write":  # the disk fills up while cmd_optimal.txt's temp file is written
        real_fdopen = os.fdopen

        def fdopen(fd, *a, **kw):
            fh = real_fdopen(fd, *a, **kw)
            if ".cmd_optimal.txt." in os.readlink(f"/proc/self/fd/{fd}"):
                fh.close()
                raise OSError(errno.ENOSPC, "No space left on device")
            return fh

        monkeypatch.setattr(sio.os, "fdopen", fdopen)
    else:  # renaming cmd_optimal.txt into place fails after ds_config_optimal.json's
        real_replace = os.replace

        def replace(src, dst, *a, **kw):
            if str(dst).endswith("cmd_optimal.txt") and ".tmp" in str(src):
                raise OSError(errno.EIO, "Input/output error")
            return real_replace(src, dst, *a, **kw)

        monkeypatch.setattr(sio.os, "replace", replace)
    assert main(["rank", str(folder), "--metric", "latency", "--out", str(out)]) == 1
    assert "cannot write to" in capsys.readouterr().err
    assert {p.name: p.read_text() for p in out.iterdir()} == old  # no temp files either
