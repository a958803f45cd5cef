"""``--runtime`` on ``simcore serving`` and ``simcore tune`` (and the Python API they call):
the runtime changes the prediction, the header names it, bad input is one line, exit 2."""

from __future__ import annotations

import json
import re

import pytest

from simcore.autotune import Autotuner, Experiment, SimulatorRunner
from simcore.autotune.training import TUNE_DEFAULTS, tune_runtime, tune_runtimes
from simcore.cli import main
from simcore.cli.options import TRAIN_DEFAULTS
from simcore.model.runtime import RUNTIMES, runtime_names
from simcore.studies.serving import ServingError, plan

SERVE = ["serving", "--model", "Llama 3.1 8B", "--family", "H100-SXM", "--gpus", "1",
         "--isl", "512", "--osl", "64", "--mode", "agg", "--top", "1"]
STEADY = [*SERVE, "--batch", "1,8"]
TUNE = ["tune", "--model", "Llama 2 7B", "--stages", "1", "--max-micro-batch", "4"]


def _one_error_line(capsys: pytest.CaptureFixture[str], command: str) -> str:
    cap = capsys.readouterr()
    err = cap.err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(f"simcore {command}: error: "), err
    assert "Traceback" not in cap.err + cap.out
    return err[0]


# -- simcore serving ---------------------------------------------------------------------

def _serve(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[dict, str]:
    assert main([*argv, "--format", "json"]) == 0
    cap = capsys.readouterr()
    return json.loads(cap.out)[0], cap.err


def test_serving_runtime__changes_the_plan_and_the_header_names_it(capsys):
    default, err_d = _serve(STEADY, capsys)
    vllm, err_v = _serve([*STEADY, "--runtime", "vllm"], capsys)
    old, err_o = _serve([*STEADY, "--runtime", "vllm-0.5"], capsys)
    hf, err_h = _serve([*STEADY, "--runtime", "hf-eager"], capsys)
    # the default is what serving deployed before: CUDA graphs in decode, as vLLM does
    assert default["tpot_ms"] == vllm["tpot_ms"]
    assert "runtime: CUDA graphs in decode" in err_d and "(simcore's default stack)" in err_d
    assert "(--runtime vllm: vLLM (V1 engine))" in err_v
    # vLLM 0.5 pays its 4 ms host loop on every step (decode and prefill)
    assert old["tpot_ms"] > default["tpot_ms"] + 3.9
    assert old["ttft_ms"] > default["ttft_ms"] + 3.9
    assert "(--runtime vllm-0.5: vLLM 0.5" in err_o
    # eager decode: every kernel launched from the host
    assert hf["tpot_ms"] > 1.1 * default["tpot_ms"]
    assert "eager decode (every kernel launched from the host)" in err_h
    assert "(--runtime hf-eager:" in err_h


def test_serving_runtime__table_header_names_it(capsys):
    assert main([*STEADY, "--runtime", "sglang"]) == 0
    out = capsys.readouterr().out
    assumed = [ln for ln in out.splitlines() if ln.startswith("assumed:")]
    assert len(assumed) == 1 and "(--runtime sglang: SGLang)" in assumed[0]


def test_serving_runtime__at_a_rate(capsys):
    rate = [*SERVE, "--rate", "2", "--duration-s", "20", "--max-ttft-ms", "5000"]
    new, err_n = _serve([*rate, "--runtime", "vllm"], capsys)
    old, err_o = _serve([*rate, "--runtime", "vllm-0.5"], capsys)
    assert old["tpot_p99_ms"] > new["tpot_p99_ms"] + 3.9
    assert "runtime --runtime vllm-0.5 (vLLM 0.5" in err_o
    assert "the device waits for the host's 4 ms a step" in err_o
    assert "runtime --runtime vllm (vLLM (V1 engine)): CUDA graphs in decode" in err_n


def test_serving_runtime__python_api():
    kw = dict(family="H100-SXM", gpus=1, isl=512, osl=64, batch=[1, 8], modes=("agg",), top=1)
    base = plan("Llama 3.1 8B", **kw)
    old = plan("Llama 3.1 8B", runtime="vllm-0.5", **kw)
    assert base.runtime == "" and old.runtime == "vllm-0.5"
    assert old.best[0].tpot_ms > base.best[0].tpot_ms + 3.9
    assert old.dataset.attrs["runtime"] == "vllm-0.5"
    with pytest.raises(ServingError, match="a training stack"):
        plan("Llama 3.1 8B", runtime="torchtitan", **kw)


def test_serving_runtime__bad_input_is_one_line_exit_2(capsys):
    assert main([*STEADY, "--runtime", "vlm"]) == 2
    line = _one_error_line(capsys, "serving")
    assert "--runtime: unknown runtime 'vlm'; did you mean 'vllm'?" in line
    assert all(n in line for n in runtime_names())
    # a training stack
    assert main([*STEADY, "--runtime", "megatron"]) == 2
    line = _one_error_line(capsys, "serving")
    assert "runtime 'megatron' (--runtime)" in line and "a training stack" in line
    assert all(n in line for n in runtime_names(mode="decode"))
    # ... also at a rate, before any simulation
    assert main([*SERVE, "--rate", "2", "--max-ttft-ms", "1000", "--runtime", "nemo"]) == 2
    assert "a training stack" in _one_error_line(capsys, "serving")
    # a precision the stack does not run: vLLM 0.6 predates FP4
    assert main([*STEADY, "--family", "B200", "--dtype", "fp4", "--runtime", "vllm-0.6"]) == 2
    line = _one_error_line(capsys, "serving")
    assert "runtime 'vllm-0.6' (--runtime) with dtype 'fp4' (--dtype)" in line
    assert "runs no fp4 matmuls" in line


# -- simcore tune ------------------------------------------------------------------------

def _best(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[float, str]:
    assert main(argv) == 0
    out = capsys.readouterr().out
    m = re.search(r"stage 1: best ([0-9.]+)", out)
    assert m, out
    return float(m.group(1)), out.splitlines()[0]


def test_tune_runtime__changes_the_result_and_the_header_names_it(capsys):
    default, head_d = _best(TUNE, capsys)  # the default is the deepspeed profile
    hf, head_h = _best([*TUNE, "--runtime", "hf-eager"], capsys)
    assert TUNE_DEFAULTS.runtime == "deepspeed"
    assert "(--runtime deepspeed: DeepSpeed ZeRO" in head_d
    # the Hugging Face Trainer's eager element-wise kernels and fp32 loss: fewer samples/s
    assert hf < 0.95 * default
    assert "eager element-wise kernels" in head_h and "(--runtime hf-eager:" in head_h


def test_tune_runtime__python_api():
    exp = Experiment("z1_gas1_tmbspg2", stage=1, micro_batch=2, grad_accum=1,
                     ds_config={"bf16": {"enabled": True}}, n_gpus=8)
    ds = SimulatorRunner("Llama 2 7B", n_gpus=8).simulate(exp)
    lib = SimulatorRunner("Llama 2 7B", n_gpus=8, runtime="").simulate(exp)
    hf = SimulatorRunner("Llama 2 7B", n_gpus=8, runtime="hf-eager").simulate(exp)
    assert ds.latency_ns == lib.latency_ns  # deepspeed is the library's default stack
    assert hf.latency_ns > ds.latency_ns
    tuner = Autotuner({"bf16": {"enabled": True}, "zero_optimization": {"stage": 1}},
                      SimulatorRunner("Llama 2 7B", n_gpus=8, runtime="llama3-meta"))
    assert "(--runtime llama3-meta:" in tuner.describe()


def test_tune_runtime__bad_input_is_one_line_exit_2(capsys):
    assert main([*TUNE, "--runtime", "deepsped"]) == 2
    line = _one_error_line(capsys, "tune")
    assert "--runtime: unknown runtime 'deepsped'; did you mean 'deepspeed'?" in line
    # an inference stack, and a training stack without DeepSpeed's ZeRO stages
    assert main([*TUNE, "--runtime", "vllm"]) == 2
    line = _one_error_line(capsys, "tune")
    assert "runs inference only" in line and ", ".join(tune_runtimes()) in line
    assert main([*TUNE, "--runtime", "torchtitan"]) == 2
    assert "fsdp model states, not DeepSpeed's ZeRO stages" in _one_error_line(capsys, "tune")
    # a real launch runs what the script runs
    assert main(["tune", "--config", "ds.json", "--runtime", "hf-eager"]) == 2
    assert "drop --runtime or pass --model" in _one_error_line(capsys, "tune")


def test_tune_runtime__precision_the_stack_does_not_train_in():
    assert tune_runtime("megatron-deepspeed", "bf16") == "megatron-deepspeed"
    with pytest.raises(ValueError, match="does not train in fp8"):
        tune_runtime("megatron-deepspeed", "fp8")
    assert tune_runtimes()[0] == "deepspeed"
    assert all(RUNTIMES[n].framework == "deepspeed" and RUNTIMES[n].trains
               for n in tune_runtimes())


# -- TRAIN_DEFAULTS: zero_stage left to the runtime --------------------------------------

def test_train_defaults__zero_stage_is_the_runtimes(capsys):
    assert TRAIN_DEFAULTS["zero_stage"] is None
    argv = ["evaluate", "--model", "Llama 3.1 8B", "--family", "H100-SXM", "--mode", "train",
            "--s-kv", "4096", "--batch", "64", "--top", "1", "--format", "json"]
    assert main(argv) == 0
    assert json.loads(capsys.readouterr().out)[0]["zero_stage"] == 0  # no runtime: ZeRO-0
    assert main([*argv, "--runtime", "nemo"]) == 0
    assert json.loads(capsys.readouterr().out)[0]["zero_stage"] == 1  # the distributed optimizer
    assert main([*argv, "--runtime", "nemo", "--zero-stage", "0"]) == 0
    assert json.loads(capsys.readouterr().out)[0]["zero_stage"] == 0  # explicit wins
