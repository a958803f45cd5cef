"""simcore tune/rank as a drop-in for `deepspeed --autotuning`, on folders DeepSpeed wrote.

The folders under tests/data/deepspeed_autotuning/ were written by DeepSpeed's own
launcher and autotuner (make_fixtures.py there; PROVENANCE.json in each), with a stub
training script. Item numbers refer to issue 13.
"""

from __future__ import annotations

import base64
import json
import os
import pathlib
import shutil
import sys
import warnings

import pytest

from simcore.autotune import (
    AutotuneConfig,
    Autotuner,
    CommandRunner,
    Experiment,
    ResultsFolderRunner,
    Trial,
    UnknownAutotuningKeyWarning,
    UnusedAutotuningKeyWarning,
    rank,
)
from simcore.autotune import deepspeed as ds
from simcore.autotune.cli import main

DATA = pathlib.Path(__file__).parent / "data"
FIXTURES = DATA / "deepspeed_autotuning"
REPLAY = DATA / "deepspeed_replay" / "train.py"
FAKE_DS = DATA / "deepspeed_replay" / "fake_deepspeed.py"
SCENARIOS = ("zero_latency", "hf_auto", "mp2", "two_nodes")


def _folder(tmp_path, name):
    dst = tmp_path / name
    shutil.copytree(FIXTURES / name, dst)
    return dst


def _ds_written(name, exp):
    return json.loads((FIXTURES / name / "autotuning_results" / exp / "ds_config.json").read_text())


# -- the fixtures are DeepSpeed's ------------------------------------------------------------
@pytest.mark.parametrize("name", SCENARIOS)
def test_fixtures__written_by_deepspeed_without_machine_paths(name):
    prov = json.loads((FIXTURES / name / "PROVENANCE.json").read_text())
    assert prov["made_by"].startswith("DeepSpeed's launcher and autotuner")
    assert prov["deepspeed_version"]
    for p in (FIXTURES / name).rglob("*"):
        if p.is_file():
            text = p.read_text(errors="replace")
            assert not any(m in text for m in ("/tmp/", "/work/", "/root/", "/home/")), p


@pytest.mark.parametrize("name", SCENARIOS)
def test_parse_launcher_args__reads_every_command_deepspeed_wrote(name):
    for d in (FIXTURES / name / "autotuning_results").iterdir():
        if not d.is_dir():
            continue
        exp = json.loads((d / "exp.json").read_text())
        words = (d / "cmd.txt").read_text().split()
        assert words[0] == "deepspeed"
        spec = ds.parse_launcher_args(words[1:])
        assert spec.user_script == "train.py"
        assert spec.launcher_argv() == exp["launcher_args"]
        assert spec.option("--master_port") == exp["master_port"]
        assert ds.decode_config(spec.config_path) == json.loads((d / "ds_config.json").read_text())


# -- item 1: a crash after metrics never wins --------------------------------------------------
@pytest.mark.parametrize("metric", ["latency", "throughput", "FLOPS"])
def test_rank__run_that_crashed_after_writing_metrics_never_wins(tmp_path, metric):
    folder = _folder(tmp_path, "zero_latency")
    crashed = {"z0_gas1_tmbspg2", "z1_gas2_tmbspg2"}  # metrics.json, then a traceback
    for name in crashed:
        assert (folder / "autotuning_results" / name / "metrics.json").exists()
    # DeepSpeed itself picked one of them
    assert "z1_gas2_tmbspg2" in (folder / "autotuning_results" / "summary.txt").read_text(
        ).splitlines()[-3]
    result = rank(folder, metric=metric)
    failed = {t.name for t in result.trials if not t.ok}
    assert crashed <= failed
    assert result.best.name not in crashed
    assert "NCCL error" in {t.name: t for t in result.trials}["z1_gas2_tmbspg2"].error


def test_command_runner__exit_status_decides_not_metrics(tmp_path, monkeypatch):
    runner = _ds_runner(tmp_path, monkeypatch, {"1-1-1": {"crash_after_metrics": {"latency": 1.0}},
                                                "1-2-1": {"metrics": {"latency": 9.0}}})
    crash = runner.run(_exp(mbs=1))
    ok = runner.run(_exp(mbs=2))
    assert not crash.ok and crash.value("latency") is None and "exit code 1" in crash.error
    assert ok.ok and ok.value("latency") == 9.0
    exp = json.loads((tmp_path / "autotuning_results" / "z1_gas1_tmbspg1" / "exp.json").read_text())
    assert exp["exit_code"] == 1
    # re-read as a folder: still failed, from exp.json's exit code and stderr.log
    assert {t.name: t.ok for t in ResultsFolderRunner(tmp_path).trials} == {
        "z1_gas1_tmbspg1": False, "z1_gas1_tmbspg2": True}


# -- item 2: the user's ZeRO settings survive rank -------------------------------------------------
def test_rank__keeps_user_zero_settings_from_the_profiling_run(tmp_path):
    folder = _folder(tmp_path, "zero_latency")
    best = _ds_written("zero_latency", "z0_gas1_tmbspg1")
    assert best["zero_optimization"] == {"stage": 0}  # DeepSpeed dropped them
    out = tmp_path / "out"
    result = rank(folder, metric="throughput", out_dir=out)
    written = json.loads((out / "ds_config_optimal.json").read_text())
    zero = written["zero_optimization"]
    assert zero["overlap_comm"] is True and zero["contiguous_gradients"] is True
    assert zero["stage"] == result.best.stage
    assert "reduce_bucket_size" not in zero  # a tuning list in the user's config: no value
    assert "autotuning" not in written and "memory_breakdown" not in written


def test_rank__user_config_wins_and_tuning_lists_resolve(tmp_path):
    folder = _folder(tmp_path, "zero_latency")
    user = json.loads((FIXTURES / "zero_latency" / "ds_config.json").read_text())
    user["zero_optimization"]["allgather_bucket_size"] = 2e8
    result = rank(folder, metric="throughput", user_config=user)
    cfg = result.best_config
    assert cfg["zero_optimization"]["allgather_bucket_size"] == 2e8
    assert not any(isinstance(v, list) for v in cfg["zero_optimization"].values())
    assert cfg["train_micro_batch_size_per_gpu"] == result.best.micro_batch


# -- item 3: mp_size -----------------------------------------------------------------------------
def test_rank__train_batch_size_counts_mp_size(tmp_path):
    folder = _folder(tmp_path, "mp2")
    result = rank(folder)
    cfg = result.best_config
    recorded = _ds_written("mp2", result.best.name)
    assert cfg["train_batch_size"] == recorded["train_batch_size"]
    # 4 GPUs / mp 2 = 2 data-parallel ranks
    assert cfg["train_batch_size"] == cfg["train_micro_batch_size_per_gpu"] * cfg[
        "gradient_accumulation_steps"] * 2
    assert result.mp == 2


def test_optimal_config__loads_in_deepspeeds_config_class(tmp_path):
    dsc = pytest.importorskip("deepspeed.runtime.config")

    class MP2:  # DeepSpeed reads the data-parallel size from an mpu
        @staticmethod
        def get_data_parallel_world_size():
            return 2

    folder = _folder(tmp_path, "mp2")
    cfg = rank(folder).best_config
    orig = dsc.dist.get_rank
    dsc.dist.get_rank = lambda *a, **k: 0
    try:
        loaded = dsc.DeepSpeedConfig(cfg, mpu=MP2())
    finally:
        dsc.dist.get_rank = orig
    assert loaded.train_batch_size == cfg["train_batch_size"]
    assert loaded.zero_optimization_stage == cfg["zero_optimization"]["stage"]


# -- item 4: Hugging Face launches ------------------------------------------------------------------
def test_rank__hf_command_replaces_the_deepspeed_value(tmp_path):
    folder = _folder(tmp_path, "hf_auto")
    out = tmp_path / "out"
    result = rank(folder, out_dir=out)
    cmd = (out / "cmd_optimal.txt").read_text().split()
    path = str((out / "ds_config_optimal.json").resolve())
    assert cmd[cmd.index("--deepspeed") + 1] == path
    assert "--deepspeed_config" not in cmd
    assert not any(ds.decode_config(w) for w in cmd)  # no base64 experiment config left
    # arg_mappings: the script's batch argument follows the winner
    assert cmd[cmd.index("--per_device_train_batch_size") + 1] == str(result.best.micro_batch)
    assert cmd[:2] == ["deepspeed", "--num_gpus"] and "--include" not in cmd


# -- item 5: the folder's metric --------------------------------------------------------------------
def test_rank__default_metric_is_the_one_the_folder_was_tuned_for(tmp_path):
    result = rank(_folder(tmp_path, "zero_latency"))
    assert result.metric == "latency"
    lat = {t.name: t.value("latency") for t in result.trials if t.ok}
    assert result.best.name == min(lat, key=lat.get)
    assert rank(_folder(tmp_path, "hf_auto")).metric == "throughput"


def test_main__rank_without_metric_uses_the_folder_metric(tmp_path, capsys):
    folder = _folder(tmp_path, "zero_latency")
    assert main(["rank", str(folder)]) == 0
    assert "metric: latency (min)" in capsys.readouterr().out


# -- item 6: "auto", tuning lists ---------------------------------------------------------------------
def test_autotune_config__hf_auto_values_resolve():
    user = json.loads((FIXTURES / "hf_auto" / "ds_config.json").read_text())
    args = (FIXTURES / "hf_auto" / "command.txt").read_text().split()[1:]
    spec = ds.parse_launcher_args(args)
    cfg = AutotuneConfig.from_ds_config(user, user_args=spec.user_args)
    assert (cfg.train_batch_size, cfg.grad_accum, cfg.precision) == (None, 1, "fp16")
    assert cfg.micro_batches is None
    plain = AutotuneConfig.from_ds_config(user)
    assert plain.precision == "fp32"  # no --fp16 in the script's arguments


class _Table:
    def __init__(self, n_gpus=2):
        self.n_gpus, self.calls = n_gpus, []

    def run(self, exp):
        self.calls.append(exp)
        return Trial.from_experiment(exp, status="ok",
                                     metrics={"throughput": float(exp.micro_batch)})


def test_tune__micro_batch_list_is_tried_as_given():
    runner = _Table()
    cfg = {"train_micro_batch_size_per_gpu": [1, 2], "zero_optimization": {"stage": 1},
           "autotuning": {"metric": "throughput"}}
    result = Autotuner(cfg, runner).tune()
    assert sorted({e.micro_batch for e in runner.calls}) == [1, 2]
    assert result.best_config["train_micro_batch_size_per_gpu"] == 2


@pytest.mark.parametrize("fast", [True, False])
def test_tune__zero_tuning_list_gives_one_value_in_the_optimal_config(fast):
    runner = _Table()
    cfg = {"zero_optimization": {"stage": 2, "reduce_bucket_size": [5e7, 5e8]},
           "autotuning": {"metric": "throughput", "fast": fast,
                          "max_train_micro_batch_size_per_gpu": 2}}
    result = Autotuner(cfg, runner).tune()
    values = {e.ds_config["zero_optimization"]["reduce_bucket_size"] for e in runner.calls}
    assert values == ({5e7} if fast else {5e7, 5e8})
    assert result.best_config["zero_optimization"]["reduce_bucket_size"] in (5e7, 5e8)


def test_main__tune_accepts_hf_auto_config(tmp_path, capsys):
    out = tmp_path / "out"
    rc = main(["tune", "--model", "Llama 2 7B", "--num_gpus", "8", "--out", str(out),
               str(FIXTURES / "hf_auto" / "train.py"), "--deepspeed",
               str(FIXTURES / "hf_auto" / "ds_config.json"), "--fp16",
               "--per_device_train_batch_size", "1"])
    assert rc == 0, capsys.readouterr().err
    cfg = json.loads((out / "ds_config_optimal.json").read_text())
    assert isinstance(cfg["train_micro_batch_size_per_gpu"], int)
    assert cfg["train_batch_size"] == cfg["train_micro_batch_size_per_gpu"] * 8
    assert cfg["fp16"] == {"enabled": "auto"}  # left for the Trainer, as DeepSpeed does
    cmd = (out / "cmd_optimal.txt").read_text().split()
    assert cmd[cmd.index("--per_device_train_batch_size") + 1] == str(
        cfg["train_micro_batch_size_per_gpu"])


# -- item 7: every documented autotuning key honoured or warned about --------------------------------
def test_autotune_config__every_documented_key_is_known():
    section = {"enabled": True, "fast": True, "metric": "latency", "tuner_type": "random",
               "tuner_num_trials": 3, "tuner_early_stopping": 2,
               "min_train_micro_batch_size_per_gpu": 1, "max_train_micro_batch_size_per_gpu": 4,
               "min_train_batch_size": 2, "max_train_batch_size": 64,
               "num_tuning_micro_batch_sizes": 2, "results_dir": "r", "exps_dir": "e",
               "overwrite": False, "start_profile_step": 2, "end_profile_step": 4, "mp_size": 1,
               "arg_mappings": {"train_micro_batch_size_per_gpu": "--bs"},
               "metric_path": "m.json", "model_info": {"num_params": 1},
               "model_info_path": "mi.json"}
    assert set(section) == set(ds.AUTOTUNING_KEYS)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        cfg = AutotuneConfig.from_ds_config({"autotuning": section})
    kinds = {w.category for w in caught}
    assert UnknownAutotuningKeyWarning not in kinds
    unused = " ".join(str(w.message) for w in caught if w.category is UnusedAutotuningKeyWarning)
    for key in ds.UNUSED_AUTOTUNING_KEYS:
        assert f"autotuning.{key} is not used" in unused
    assert (cfg.results_dir, cfg.exps_dir, cfg.overwrite) == ("r", "e", False)
    assert (cfg.start_profile_step, cfg.end_profile_step) == (2, 4)
    assert cfg.min_train_batch_size == 2 and cfg.arg_mappings == {
        "train_micro_batch_size_per_gpu": "--bs"}


def test_tune__min_train_batch_size_bounds_the_global_batch():
    runner = _Table(n_gpus=4)
    cfg = {"zero_optimization": {"stage": 1},
           "autotuning": {"metric": "throughput", "min_train_batch_size": 12,
                          "max_train_micro_batch_size_per_gpu": 6}}
    Autotuner(cfg, runner).tune()
    assert min(e.micro_batch for e in runner.calls) == 3  # 3 x 4 GPUs = 12


def test_command_runner__profile_steps_and_arg_mappings_reach_the_experiment(tmp_path, monkeypatch):
    runner = _ds_runner(tmp_path, monkeypatch, {"1-2-1": {"metrics": {"latency": 2.0}}},
                        user_args=["--deepspeed_config", "ds.json", "--bs", "1"],
                        autotuning={"start_profile_step": 7, "end_profile_step": 9,
                                    "arg_mappings": {"train_micro_batch_size_per_gpu": "--bs"},
                                    "metric": "latency"})
    assert runner.run(_exp(mbs=2)).ok
    d = tmp_path / "autotuning_results" / "z1_gas1_tmbspg2"
    cfg = json.loads((d / "ds_config.json").read_text())
    assert (cfg["autotuning"]["start_profile_step"], cfg["autotuning"]["end_profile_step"]) == (7, 9)
    assert cfg["autotuning"]["metric"] == "latency"
    exp = json.loads((d / "exp.json").read_text())
    assert exp["user_args"][exp["user_args"].index("--bs") + 1] == "2"


def test_command_runner__overwrite_false_reuses_finished_experiments(tmp_path, monkeypatch):
    table = {"1-1-1": {"metrics": {"latency": 3.0}}}
    first = _ds_runner(tmp_path, monkeypatch, table)
    assert first.run(_exp(mbs=1)).ok
    log = tmp_path / "launches.log"
    n = len(log.read_text().splitlines())
    again = _ds_runner(tmp_path, monkeypatch, table, reuse=True)
    t = again.run(_exp(mbs=1))
    assert t.ok and t.value("latency") == 3.0
    assert len(log.read_text().splitlines()) == n  # nothing launched


# -- item 8: DeepSpeed's command line -------------------------------------------------------------
def _on_path(tmp_path, monkeypatch):
    bindir = tmp_path / "bin"
    bindir.mkdir(exist_ok=True)
    exe = bindir / "deepspeed"
    exe.write_text(f"#!{sys.executable}\nimport runpy, sys\nsys.argv[0] = {str(FAKE_DS)!r}\n"
                   f"runpy.run_path({str(FAKE_DS)!r}, run_name='__main__')\n")
    exe.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bindir}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("FAKE_DEEPSPEED_LOG", str(tmp_path / "launches.log"))


def _ds_runner(tmp_path, monkeypatch, table, *, user_args=None, launcher=(), **kw):
    _on_path(tmp_path, monkeypatch)
    table_path = tmp_path / "table.json"
    table_path.write_text(json.dumps(table))
    args = list(user_args or ["--deepspeed_config", "ds.json"]) + ["--table", str(table_path)]
    spec = ds.parse_launcher_args([*launcher, "--num_gpus", "2", str(REPLAY), *args])
    res = ds.resolve_resources(spec)
    return CommandRunner(launch=spec, resources=res, results_dir=tmp_path / "autotuning_results",
                         exps_dir=tmp_path / "autotuning_exps", **kw)


def _exp(stage=1, mbs=1, gas=1):
    return Experiment(name=f"z{stage}_gas{gas}_tmbspg{mbs}", stage=stage, micro_batch=mbs,
                      grad_accum=gas, n_gpus=2,
                      ds_config={"zero_optimization": {"stage": stage}, "fp16": {"enabled": True},
                                 "train_micro_batch_size_per_gpu": mbs,
                                 "gradient_accumulation_steps": gas,
                                 "train_batch_size": mbs * gas * 2})


def _project(tmp_path, table, *, config=None, hostfile=None):
    work = tmp_path / "job"
    work.mkdir()
    shutil.copy(REPLAY, work / "train.py")
    (work / "table.json").write_text(json.dumps(table))
    cfg = config or {"fp16": {"enabled": True}, "zero_optimization": {"stage": [1, 2]},
                     "autotuning": {"enabled": True, "metric": "latency",
                                    "max_train_micro_batch_size_per_gpu": 2}}
    (work / "ds.json").write_text(json.dumps(cfg))
    if hostfile is not None:
        (work / "hostfile").write_text(hostfile)
    return work


TABLE = {"1-1-1": {"metrics": {"latency": 30.0}}, "1-2-1": {"metrics": {"latency": 20.0}},
         "2-1-1": {"metrics": {"latency": 25.0}}, "2-2-1": {"crash_after_metrics": {"latency": 1.0}}}


def test_main__tune_run_with_deepspeeds_command_line(tmp_path, monkeypatch, capsys):
    _on_path(tmp_path, monkeypatch)
    work = _project(tmp_path, TABLE)
    monkeypatch.chdir(work)
    rc = main(["tune", "--autotuning", "run", "--num_gpus", "2", "--master_port", "29600",
               "train.py", "--deepspeed_config", "ds.json", "--table", "table.json"])
    out = capsys.readouterr().out
    assert rc == 0, out
    res = work / "autotuning_results"
    for name in ("z1_gas1_tmbspg1", "z1_gas1_tmbspg2", "z2_gas1_tmbspg2"):
        assert {p.name for p in (res / name).iterdir()} >= {
            "ds_config.json", "exp.json", "cmd.txt", "stdout.log", "stderr.log"}
        assert (work / "autotuning_exps" / f"{name}.json").exists()
    assert (res / "summary.txt").read_text().startswith("| tuning_space ")
    best = json.loads((res / "ds_config_optimal.json").read_text())
    assert best["zero_optimization"]["stage"] == 1 and best["train_micro_batch_size_per_gpu"] == 2
    launches = [json.loads(ln) for ln in (tmp_path / "launches.log").read_text().splitlines()]
    first = launches[0]
    assert first[:4] == ["--include", "localhost:0,1", "--master_port", "29600"]
    assert ds.decode_config(first[first.index("--deepspeed_config") + 1])  # DeepSpeed's base64
    # `run`: the winner was launched last, with the optimal config's path
    assert launches[-1][launches[-1].index("--deepspeed_config") + 1] == str(
        (res / "ds_config_optimal.json").resolve())
    assert "trained 1-2-1" in out or "running the optimal configuration" in out


@pytest.mark.parametrize("overwrite", [True, False])
def test_main__results_and_exps_dirs_and_overwrite_from_the_config(tmp_path, monkeypatch,
                                                                   capsys, overwrite):
    _on_path(tmp_path, monkeypatch)
    cfg = {"zero_optimization": {"stage": 1},
           "autotuning": {"metric": "latency", "max_train_micro_batch_size_per_gpu": 1,
                          "results_dir": "out/res", "exps_dir": "out/exps",
                          "overwrite": overwrite}}
    work = _project(tmp_path, TABLE, config=cfg)
    old = work / "out" / "res" / "z3_gas1_tmbspg9"  # a previous run's experiment
    old.mkdir(parents=True)
    (old / "stderr.log").write_text("")
    monkeypatch.chdir(work)
    argv = ["tune", "--num_gpus", "2", "train.py", "--deepspeed_config", "ds.json",
            "--table", "table.json"]
    assert main(argv) == 0, capsys.readouterr().err
    res = work / "out" / "res"
    assert (res / "z1_gas1_tmbspg1" / "metrics.json").exists()
    assert (work / "out" / "exps" / "z1_gas1_tmbspg1.json").exists()
    assert (res / "ds_config_optimal.json").exists()
    assert old.exists() is (not overwrite)
    capsys.readouterr()
    n = len((tmp_path / "launches.log").read_text().splitlines())
    assert main(argv) == 0
    again = len((tmp_path / "launches.log").read_text().splitlines()) - n
    assert again == (1 if overwrite else 0)  # overwrite false: the finished run is reused


def test_main__run_without_a_script_exits_2(capsys):
    assert main(["tune", "--autotuning", "run", "--model", "Llama 2 7B"]) == 2
    _one_line(capsys, "--autotuning run launches your training script")


def test_main__two_nodes_from_a_hostfile(tmp_path, monkeypatch, capsys):
    _on_path(tmp_path, monkeypatch)
    work = _project(tmp_path, {"2-1-1": {"metrics": {"throughput": 5.0}}},
                    config={"zero_optimization": {"stage": 2},
                            "autotuning": {"max_train_micro_batch_size_per_gpu": 1}},
                    hostfile="worker-0 slots=4\nworker-1 slots=4\nworker-2 slots=4\n")
    monkeypatch.chdir(work)
    rc = main(["tune", "--num_nodes", "2", "--num_gpus", "4", "--hostfile", "hostfile",
               "train.py", "--deepspeed_config", "ds.json", "--table", "table.json"])
    assert rc == 0, capsys.readouterr().err
    exp = json.loads((work / "autotuning_results" / "z2_gas1_tmbspg1" / "exp.json").read_text())
    assert (exp["num_nodes"], exp["num_gpus"]) == (2, 4)
    assert exp["launcher_args"][:4] == ["--hostfile", "hostfile", "--include",
                                        "worker-0:0,1,2,3@worker-1:0,1,2,3"]
    assert exp["ds_config"]["train_batch_size"] == 8
    cmd = (work / "autotuning_results" / "cmd_optimal.txt").read_text().split()
    head = cmd[1:cmd.index("train.py")]
    assert sorted(zip(head[::2], head[1::2], strict=True)) == [("--hostfile", "hostfile"),
                                                  ("--num_gpus", "4"), ("--num_nodes", "2")]


def test_rank__two_node_folder_deepspeed_wrote(tmp_path):
    result = rank(_folder(tmp_path, "two_nodes"))
    assert result.n_gpus == 8
    cfg = result.best_config
    assert cfg["train_batch_size"] == cfg["train_micro_batch_size_per_gpu"] * cfg[
        "gradient_accumulation_steps"] * 8
    argv = result.optimal_argv("best.json")
    assert argv[:5] == ["deepspeed", "--num_nodes", "2", "--hostfile", "hostfile"]


@pytest.mark.parametrize(("launcher", "expected"), [
    (["--include", "localhost:1"], ["--include", "localhost:1"]),
    (["--exclude", "localhost:0"], ["--include", "localhost:1"]),
    (["--master_addr", "10.0.0.1", "--launcher", "openmpi", "--no_local_rank"],
     ["--master_addr", "10.0.0.1", "--launcher", "openmpi", "--no_local_rank"]),
])
def test_experiment_command__keeps_the_users_launcher_options(launcher, expected):
    spec = ds.parse_launcher_args([*launcher, "t.py", "--deepspeed_config", "c.json"])
    res = ds.resolve_resources(spec, local_gpus=2)
    cmd = ds.experiment_command(spec, resources=res, master_port=29501, user_args=["--x"])
    assert all(tok in cmd for tok in expected)
    assert cmd[-2:] == ["t.py", "--x"]


# -- item 9: no zero_optimization section ------------------------------------------------------------
def test_tune__without_zero_section_only_stage_0_as_deepspeed(capsys):
    runner = _Table()
    result = Autotuner({"autotuning": {"max_train_micro_batch_size_per_gpu": 1}}, runner).tune()
    assert {e.stage for e in runner.calls} == {0}
    assert any("stage 0 only, as DeepSpeed does" in n for n in result.notes)


# -- item 10: DeepSpeed's memory estimators ------------------------------------------------------------
def test_estimate_zero2__matches_deepspeeds_documented_example():
    # docs/code-docs/source/memory.rst: 2851M params, 1 node x 8 GPUs
    cpu, gpu = ds.estimate_zero2_model_states_mem_needs(2851e6, num_gpus_per_node=8)
    assert (round(cpu / 2**30, 2), round(gpu / 2**30, 2)) == (127.45, 5.31)
    cpu, gpu = ds.estimate_zero2_model_states_mem_needs(2851e6, num_gpus_per_node=8,
                                                        cpu_offload=False)
    assert round(cpu / 2**30, 2) == 127.45
    assert gpu == 2 * 2851e6 + int(18 * 2851e6 / 8)  # the code's comment: 2 + 18/G


@pytest.mark.parametrize(("offload", "params", "zero_init", "cpu_gb", "gpu_gb"), [
    (True, True, True, 71.69, 0.12), (True, True, False, 127.45, 0.12),
    (True, False, True, 63.72, 0.78), (True, False, False, 127.45, 0.78),
    (False, False, True, 1.43, 6.09), (False, False, False, 127.45, 6.09),
])
def test_estimate_zero3__matches_deepspeeds_documented_table(offload, params, zero_init,
                                                             cpu_gb, gpu_gb):
    cpu, gpu, _ = ds.estimate_zero3_model_states_mem_needs(
        2851e6, 32e6, num_gpus_per_node=8, cpu_offload=offload, cpu_offload_params=params,
        zero_init=zero_init)
    assert (round(cpu / 2**30, 2), round(gpu / 2**30, 2)) == (cpu_gb, gpu_gb)


def test_estimate_zero3__documented_t5_large_case():
    total, largest, gpus = 737.67e6, 32.90e6, 4
    _, case1, layer = ds.estimate_zero3_model_states_mem_needs(
        total, largest, num_gpus_per_node=gpus, cpu_offload=False, cpu_offload_params=False)
    assert (layer >> 20, case1 >> 20) == (125, 3291)


@pytest.mark.parametrize("precision", ["fp16", "bf16"])
@pytest.mark.parametrize(("nodes", "per_node"), [(1, 8), (16, 8)])
def test_zero_model_states_bytes__16_bit_is_deepspeeds_estimator(precision, nodes, per_node):
    n, layer = 8.03e9, 525.3e6
    g = nodes * per_node
    z2 = ds.zero_model_states_bytes(2, precision=precision, total_params=n, n_gpus=g)
    z3 = ds.zero_model_states_bytes(3, precision=precision, total_params=n,
                                    largest_layer_params=layer, n_gpus=g)
    assert z2 == ds.estimate_zero2_model_states_mem_needs(n, per_node, nodes, cpu_offload=False)[1]
    assert z3 == ds.estimate_zero3_model_states_mem_needs(
        n, layer, per_node, nodes, cpu_offload=False, cpu_offload_params=False)[1]


def test_zero_model_states_bytes__fp32_and_model_parallel():
    n = 1e9
    z = [ds.zero_model_states_bytes(s, precision="fp32", total_params=n,
                                    largest_layer_params=1e8, n_gpus=8) for s in range(4)]
    assert z == [16 * n, 8 * n + 8 * n / 8, 4 * n + 12 * n / 8, 8 * 1e8 + 16 * n / 8]
    half = ds.zero_model_states_bytes(2, precision="bf16", total_params=n, n_gpus=8, mp=2)
    assert half == 2 * n / 2 + int(18 * (n / 2) / 4)


def test_estimators__agree_with_installed_deepspeed():
    s12 = pytest.importorskip("deepspeed.runtime.zero.stage_1_and_2")
    s3 = pytest.importorskip("deepspeed.runtime.zero.stage3")
    for off in (True, False):
        assert ds.estimate_zero2_model_states_mem_needs(7e9, 8, 2, off) == \
            s12.estimate_zero2_model_states_mem_needs(7e9, 8, 2, off)
        for par in (True, False):
            for zi in (True, False):
                assert ds.estimate_zero3_model_states_mem_needs(7e9, 3e8, 8, 2, off, par, zi) == \
                    s3.estimate_zero3_model_states_mem_needs(7e9, 3e8, 8, 2, off, par, zi)


# -- bad input: one line, exit 2, nothing overwritten ----------------------------------------------------
def _one_line(capsys, needle):
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and err.startswith("simcore "), err
    assert needle in err, err


def test_main__config_without_autotuning_section_exits_2(tmp_path, monkeypatch, capsys):
    work = _project(tmp_path, {}, config={"zero_optimization": {"stage": 1}})
    monkeypatch.chdir(work)
    assert main(["tune", "--num_gpus", "2", "train.py", "--deepspeed_config", "ds.json"]) == 2
    _one_line(capsys, "has no autotuning section")
    assert not (work / "autotuning_results").exists()


@pytest.mark.parametrize("hostfile", ["worker-0\nworker-1\n", "# nothing\n", "w slots=0\n"])
def test_main__hostfile_without_slots_exits_2(tmp_path, monkeypatch, capsys, hostfile):
    work = _project(tmp_path, {}, hostfile=hostfile)
    monkeypatch.chdir(work)
    assert main(["tune", "--hostfile", "hostfile", "train.py",
                 "--deepspeed_config", "ds.json"]) == 2
    _one_line(capsys, "hostfile")


def test_main__missing_training_script_exits_2(tmp_path, monkeypatch, capsys):
    work = _project(tmp_path, {})
    monkeypatch.chdir(work)
    assert main(["tune", "--num_gpus", "2", "nope.py", "--deepspeed_config", "ds.json"]) == 2
    _one_line(capsys, "training script 'nope.py' does not exist")


def test_main__results_folder_of_another_tool_is_refused(tmp_path, monkeypatch, capsys):
    work = _project(tmp_path, TABLE)
    other = work / "autotuning_results"
    other.mkdir()
    (other / "notes.md").write_text("my notes")
    (other / "checkpoints").mkdir()
    monkeypatch.chdir(work)
    assert main(["tune", "--num_gpus", "2", "train.py", "--deepspeed_config", "ds.json"]) == 2
    _one_line(capsys, "holds files no DeepSpeed autotuner wrote")
    assert (other / "notes.md").read_text() == "my notes"
    assert main(["rank", str(work)]) == 2
    _one_line(capsys, "is not a DeepSpeed autotuning folder")
    assert sorted(p.name for p in other.iterdir()) == ["checkpoints", "notes.md"]


def test_main__rank_respects_overwrite_false(tmp_path, capsys):
    folder = _folder(tmp_path, "mp2")
    for cfg_path in (folder / "autotuning_results").glob("*/ds_config.json"):
        cfg = json.loads(cfg_path.read_text())
        cfg.setdefault("autotuning", {})["overwrite"] = False
        cfg_path.write_text(json.dumps(cfg))
    before = (folder / "autotuning_results" / "ds_config_optimal.json").read_text()
    assert main(["rank", str(folder)]) == 2
    _one_line(capsys, "overwrite is false; pass --out DIR")
    assert (folder / "autotuning_results" / "ds_config_optimal.json").read_text() == before
    assert main(["rank", str(folder), "--out", str(tmp_path / "o")]) == 0
    capsys.readouterr()


def test_main__bad_launcher_option_exits_2(capsys):
    assert main(["tune", "--autotuning", "sweep", "train.py"]) == 2
    capsys.readouterr()


def test_deepspeed_module__commands_carry_base64_configs_deepspeed_can_read():
    cfg = {"train_micro_batch_size_per_gpu": 2, "zero_optimization": {"stage": 1}}
    enc = ds.encode_config(cfg)
    assert json.loads(base64.urlsafe_b64decode(enc)) == cfg == ds.decode_config(enc)
    assert ds.decode_config("ds_config.json") is None
