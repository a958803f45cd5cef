"""Runtime profiles (issue 32 item 2): a software stack's settings declared once, with
sources, applied by ``Workload(runtime=...)`` and ``--runtime``; every validation point
names its runtime instead of carrying switches of its own."""

from __future__ import annotations

import json
import re
from dataclasses import fields, replace

import pytest

from simcore.cli import main
from simcore.errors import SpecError
from simcore.model.runtime import (
    DEFAULT_RUNTIME,
    PROFILE_FIELDS,
    RUNTIMES,
    get_runtime,
    runtime_names,
)
from simcore.model.specs import Workload
from simcore.validation import MEASUREMENTS
from simcore.validation.blackwell import load_blackwell
from simcore.validation.data import UNMODELLED
from simcore.validation.data_infer import load_infer_measurements
from simcore.validation.data_train import load_points

DECODE = ["evaluate", "--model", "Llama 3.1 8B", "--family", "H100-SXM", "--s-kv", "2048",
          "--batch", "1", "--top", "1"]


def _one_error_line(capsys: pytest.CaptureFixture[str]) -> str:
    cap = capsys.readouterr()
    err = cap.err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("simcore evaluate: error: "), err
    return err[0]


# -- the profiles ------------------------------------------------------------------------

def test_default_runtime__is_the_library_default_the_golden_numbers_are_pinned_on():
    lib = RUNTIMES[DEFAULT_RUNTIME]
    for mode in ("decode", "prefill", "train"):
        w = Workload(mode)
        assert w.runtime == ""
        assert (w.cuda_graphs, w.attention, w.framework, w.zero_stage, w.grad_bytes) == (
            False, "flash", "deepspeed", 0, 4)
        assert (w.eager_elementwise, w.eager_loss, w.tp_comm_overlap, w.moe_a2a_overlap) == (
            False, False, False, False)
        assert (w.moe_dispatch, w.moe_routing, w.overlap_grad_reduce) == (
            "per_expert", "random", None)
        for f in PROFILE_FIELDS:
            assert getattr(w, f) == lib.setting(f, mode, w.s_kv), f


def test_every_runtime__cites_where_its_settings_are_the_stacks_defaults():
    for name, rt in RUNTIMES.items():
        assert rt.name == name and rt.stack and rt.serves or rt.trains
        if name:  # a repository path at a commit, or the paper that states them
            assert re.search(r"[0-9a-f]{40}|@[0-9a-f]{7}|arXiv:\d{4}\.\d{4,5}", rt.source), name
        assert rt.attention in ("flash", "flash2", "unfused")
        assert rt.framework in ("deepspeed", "megatron", "fsdp")


def test_profile__serving_stacks_set_cuda_graphs_in_decode_only():
    for name in ("vllm", "sglang", "trtllm"):
        assert Workload("decode", runtime=name).cuda_graphs is True
        assert Workload("prefill", runtime=name).cuda_graphs is False
    for name in ("trtllm-0.9", "lmdeploy-0.1", "fastertransformer", "hf-eager"):
        assert Workload("decode", runtime=name).cuda_graphs is False


def test_profile__host_time_per_step_and_attention_class_of_the_vllm_versions():
    # vLLM 0.5's loop: ~4 ms per step on the host (vllm-project/vllm issue #6854)
    assert Workload("decode", runtime="vllm-0.5").host_step_ns == 4e6
    assert Workload("decode", runtime="vllm").host_step_ns == 0.0
    assert Workload("decode").host_step_ns == 0.0
    assert Workload("decode", runtime="vllm-0.5", host_step_ns=0).host_step_ns == 0.0
    # vLLM 0.9-0.10 schedule synchronously: 12.8 us per sequence a step (vLLM PR #23914);
    # the V1 engine of today schedules a step ahead (none), training never pays it
    assert Workload("decode", runtime="vllm-0.10").host_seq_ns == 12_800.0
    assert Workload("prefill", runtime="vllm-0.10").host_seq_ns == 12_800.0
    assert Workload("decode", runtime="vllm").host_seq_ns == 0.0
    assert Workload("decode").host_seq_ns == 0.0
    assert RUNTIMES["vllm-0.10"].setting("host_seq_ns", "train", 1024) == 0.0
    # every output says it: the evaluate header and the rate planner's steps line
    from simcore.studies.assumptions import runtime_text
    from simcore.studies.serving.present import _steps_text

    wait = "the device waits for the host's 12.8 us per scheduled sequence a step"
    assert wait in runtime_text(Workload("decode", runtime="vllm-0.10"))
    assert _steps_text("vllm-0.10").endswith(f"on every step {wait}")
    assert "the device waits" not in runtime_text(Workload("decode", runtime="vllm"))
    # the FlashAttention-2 kernels of vLLM 0.5 / 0.6 and of SDPA
    for name in ("vllm-0.5", "vllm-0.6", "hf-eager"):
        assert Workload("prefill", runtime=name).attention == "flash2"
    assert Workload("prefill", runtime="vllm").attention == "flash"


def test_profile__vllm_06_captures_graphs_up_to_8192_tokens_of_context():
    assert Workload("decode", runtime="vllm-0.6", s_kv=8192).cuda_graphs is True
    assert Workload("decode", runtime="vllm-0.6", s_kv=8193).cuda_graphs is False
    # a replace() over the context re-resolves the profile's setting
    w = replace(Workload("decode", runtime="vllm-0.6", s_kv=4096), s_kv=65536)
    assert w.cuda_graphs is False


def test_profile__training_stacks():
    w = Workload("train", runtime="torchtitan")
    assert (w.framework, w.zero_stage, w.attention, w.eager_elementwise, w.eager_loss) == (
        "fsdp", 3, "flash2", True, True)
    w = Workload("train", runtime="torchtitan-compile")
    assert (w.eager_elementwise, w.eager_loss) == (False, False)
    w = Workload("train", runtime="megatron-2021")
    assert (w.framework, w.attention, w.overlap_grad_reduce, w.grad_overlap) == (
        "megatron", "unfused", False, False)
    w = Workload("train", runtime="nemo", precision="fp8")
    assert (w.zero_stage, w.grad_bytes, w.grad_overlap, w.act_dtype, w.weight_dtype) == (
        1, 2, True, "fp8", "")
    w = Workload("train", runtime="megatron-bridge", precision="fp8")
    assert (w.act_dtype, w.weight_dtype) == ("fp8", "fp8")  # fp8_param_gather
    # FP8 storage follows the precision when replace() changes it
    w16 = replace(w, precision="bf16")
    assert (w16.act_dtype, w16.weight_dtype) == ("", "")


# -- override precedence ---------------------------------------------------------------

def test_explicit_fields_override_the_profile():
    assert Workload("decode", runtime="vllm", cuda_graphs=False).cuda_graphs is False
    assert Workload("decode", runtime="hf-eager", cuda_graphs=True).cuda_graphs is True
    w = Workload("train", runtime="torchtitan", framework="megatron", zero_stage=1,
                 eager_loss=False)
    assert (w.framework, w.zero_stage, w.eager_loss, w.eager_elementwise) == (
        "megatron", 1, False, True)
    # an explicit setting survives replace(); the profile's are re-resolved for the new stack
    w2 = replace(w, runtime="torchtitan-compile")
    assert (w2.framework, w2.zero_stage, w2.eager_loss, w2.eager_elementwise) == (
        "megatron", 1, False, False)
    w3 = replace(Workload("decode", runtime="hf-eager"), runtime="vllm")
    assert w3.cuda_graphs is True


# -- bad input ---------------------------------------------------------------------------

def test_unknown_runtime__one_line_with_the_closest_and_every_known_one(capsys):
    with pytest.raises(SpecError, match=r"unknown runtime 'vlm'; did you mean 'vllm'\?"):
        Workload("decode", runtime="vlm")
    assert main([*DECODE, "--runtime", "torchtitn"]) == 2
    line = _one_error_line(capsys)
    assert "--runtime: unknown runtime 'torchtitn'; did you mean" in line
    assert all(n in line for n in runtime_names())


def test_unsupported_runtime_combinations_are_clear_errors(capsys):
    # FP8 matmuls on a family without an FP8 rate, in the runtime's words
    assert main([*DECODE, "--family", "A100-80G", "--runtime", "trtllm", "--dtype", "fp8"]) == 2
    line = _one_error_line(capsys)
    assert "runtime 'trtllm' on A100-80G" in line and "FP8 rate" in line
    # FP4 off Blackwell
    assert main([*DECODE, "--runtime", "vllm", "--dtype", "fp4"]) == 2
    assert "runtime 'vllm' on H100-SXM" in _one_error_line(capsys)
    # a stack released before FP4, on Blackwell
    assert main([*DECODE, "--family", "B200", "--runtime", "trtllm-0.9", "--dtype", "fp4"]) == 2
    assert "runs no fp4 matmuls" in _one_error_line(capsys)
    # a training stack for a decode step, and the other way round
    assert main([*DECODE, "--runtime", "megatron"]) == 2
    assert "training only, not decode steps" in _one_error_line(capsys)
    with pytest.raises(SpecError, match="inference only, not train steps"):
        Workload("train", runtime="vllm")
    with pytest.raises(SpecError, match="does not train in fp8"):
        Workload("train", runtime="megatron-2021", precision="fp8")
    with pytest.raises(SpecError, match="runs no fp4 matmuls"):
        Workload("decode", runtime="vllm-0.6", act_dtype="fp4")


# -- the CLI ---------------------------------------------------------------------------

def _latency(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[float, str]:
    assert main([*argv, "--format", "json"]) == 0
    cap = capsys.readouterr()
    return float(json.loads(cap.out)[0]["latency_ms"]), cap.err


def test_cli_runtime__hf_eager_decode_is_slower_than_vllm_and_the_header_says_which(capsys):
    vllm, err_v = _latency([*DECODE, "--runtime", "vllm"], capsys)
    hf, err_h = _latency([*DECODE, "--runtime", "hf-eager"], capsys)
    default, err_d = _latency(DECODE, capsys)
    assert hf > 1.2 * vllm  # every kernel launched from the host
    assert default == vllm  # the CLI's default replays CUDA graphs, as vLLM does
    assert "(--runtime vllm: vLLM" in err_v and "runtime: CUDA graphs in decode" in err_v
    assert "runtime: eager decode" in err_h and "(--runtime hf-eager:" in err_h
    assert "(simcore's default stack)" in err_d
    # --eager overrides the profile; hf-eager differs only by its FlashAttention-2-class
    # core (Topology.fa2_ratio on Hopper), a small share of a decode step
    eager = _latency([*DECODE, "--runtime", "vllm", "--eager"], capsys)[0]
    assert eager < hf < 1.01 * eager


def test_cli_runtime__vllm_05_pays_its_host_loop_per_step(capsys):
    old, err = _latency([*DECODE, "--runtime", "vllm-0.5"], capsys)
    new, _ = _latency([*DECODE, "--runtime", "vllm"], capsys)
    assert old > new + 3.9  # ms: the 4 ms loop, beside the FA2 core's small share
    assert "(--runtime vllm-0.5: vLLM 0.5" in err


def test_cli_runtime__training_stack_sets_its_framework(capsys):
    argv = ["evaluate", "--model", "Llama 3.1 8B", "--family", "H100-SXM", "--mode", "train",
            "--s-kv", "4096", "--batch", "64", "--top", "1"]
    assert main([*argv, "--runtime", "torchtitan", "--format", "json"]) == 0
    eager = json.loads(capsys.readouterr().out)[0]
    assert main([*argv, "--runtime", "torchtitan-compile", "--format", "json"]) == 0
    compiled = json.loads(capsys.readouterr().out)[0]
    assert eager["zero_stage"] == compiled["zero_stage"] == 3  # FSDP: full sharding
    assert float(eager["latency_ms"]) > float(compiled["latency_ms"])  # eager kernels


# -- the validation names a runtime per point --------------------------------------------

def _all_points():
    return [*MEASUREMENTS, *UNMODELLED, *load_blackwell()]


def test_every_validation_point_names_a_known_runtime():
    points = _all_points()
    assert len(points) > 150
    for m in points:
        assert m.workload.runtime in RUNTIMES and m.workload.runtime, m.id
        for step, _ in m.steps:
            assert step.runtime == m.workload.runtime, m.id
        mode_ok = (get_runtime(m.workload.runtime).trains if m.kind == "train"
                   else get_runtime(m.workload.runtime).serves)
        assert mode_ok, m.id


def test_held_out_served_runs_name_their_backends_runtime():
    from simcore.validation.holdout import load_holdout

    pts, _ = load_holdout()
    assert len(pts) > 500
    seen = set()
    for m in pts:
        backend = m.notes.split("; ")[1].split()[0]
        assert m.workload.runtime == backend, m.id  # trtllm, vllm or sglang
        assert all(s.cuda_graphs and s.runtime == backend for s, _ in m.steps), m.id
        seen.add(backend)
    assert seen == {"trtllm", "vllm", "sglang"}


def test_validation_runtimes_follow_the_sources():
    by_id = {m.id: m.workload.runtime for m in _all_points()}
    assert by_id["sc21-175b-384gpu"] == "megatron-2021"
    assert by_id["trtllm-gptj-6b-tp1-in2048"] == "trtllm-0.9"
    assert by_id["tt2412-8b-8gpu-fsdp"] == "torchtitan-2412"
    assert by_id["tt2412-8b-8gpu-fsdp-compile"] == "torchtitan-2412-compile"
    assert by_id["qwen25-7b-tp1-in1:thr"] == "vllm-0.6"
    assert by_id["aic-llama31_8b-h200-sglang-1000x1000-c512-tp8:tpot"] == "sglang"
    # torchtitan's compiled rows, and only those, name the compiled variant
    for p in load_points()["points"]:
        if p["source"] == "torchtitan_202412":
            compiled = bool(p["workload"].get("torch_compile"))
            assert (p.get("runtime") == "torchtitan-2412-compile") == compiled, p["id"]
    # the vLLM 0.6 whole runs: graphs up to the capture limit only
    m = next(m for m in MEASUREMENTS if m.id == "qwen25-7b-tp1-in30720:thr")
    decode = [s for s, _ in m.steps if s.mode == "decode"]
    assert decode and not any(s.cuda_graphs for s in decode)  # context > 8192 throughout
    m = next(m for m in MEASUREMENTS if m.id == "qwen25-7b-tp1-in1:thr")
    assert all(s.cuda_graphs for s, _ in m.steps if s.mode == "decode")  # context <= 2049
    assert not any(s.cuda_graphs for s, _ in m.steps if s.mode == "prefill")


def test_inference_points_carry_no_cuda_graphs_switch_of_their_own():
    """Every converted inference point's CUDA graphs are its runtime's (no override)."""
    pts, _ = load_infer_measurements()
    for m in pts:
        for step in [m.workload, *(s for s, _ in m.steps)]:
            rt = get_runtime(step.runtime)
            assert step.cuda_graphs == rt.setting("cuda_graphs", step.mode, step.s_kv), m.id
            assert ("cuda_graphs", step.cuda_graphs) in step._profiled, m.id


def test_workload_runtime_field_is_last_and_defaults_to_the_library():
    names = [f.name for f in fields(Workload)]
    assert names[-2:] == ["runtime", "_profiled"]


def test_with_runtime__keeps_explicit_settings_even_equal_to_the_old_profiles():
    """replace(w, runtime=..., field=v) cannot tell an explicit v equal to the old profile's
    value from a carried-over one; with_runtime keeps every explicit setting and re-resolves
    only what the old profile set."""
    w = Workload("decode", runtime="vllm")  # graphs: the profile's
    assert w.with_runtime("hf-eager").cuda_graphs is False  # re-resolved
    assert w.with_runtime("hf-eager", cuda_graphs=True).cuda_graphs is True  # kept
    assert replace(w, runtime="hf-eager", cuda_graphs=True).cuda_graphs is False  # the trap
    t = Workload("train", runtime="torchtitan")  # FSDP, ZeRO-3 from the profile
    assert t.with_runtime("deepspeed").zero_stage == 0
    assert t.with_runtime("deepspeed", zero_stage=3).zero_stage == 3
    e = Workload("decode", runtime="vllm", cuda_graphs=False)  # explicit before: kept
    assert e.with_runtime("trtllm").cuda_graphs is False
    assert e.with_runtime("trtllm").runtime == "trtllm"


def test_profile__trtllm_mla_decode_floor_prices_mla_decode_layers_only():
    from simcore import get_model
    from simcore.engine.single import predict

    rt = RUNTIMES["trtllm"]
    assert rt.setting("mla_decode_ns", "decode", 1024) == 18_400.0
    assert rt.setting("mla_decode_ns", "prefill", 1024) == 0.0
    assert RUNTIMES["sglang"].setting("mla_decode_ns", "decode", 1024) == 0.0
    ds = get_model("deepseek-ai/DeepSeek-V3")
    lay = {"tp": 8, "ep": 8}
    wl = Workload("decode", batch=4, s_kv=1536, runtime="trtllm")
    with_floor = predict(ds, wl, lay, family="H200").latency_ns
    without = predict(ds, replace(wl, mla_decode_ns=0.0), lay, family="H200").latency_ns
    assert with_floor - without == pytest.approx(ds.n_layers * 18_400.0, rel=1e-9)
    # a GQA model and a prefill step do not move
    llama = get_model("Llama 3.1 70B")
    gqa = Workload("decode", batch=4, s_kv=1536, runtime="trtllm")
    assert predict(llama, gqa, {"tp": 8}, family="H200").latency_ns == pytest.approx(
        predict(llama, replace(gqa, mla_decode_ns=0.0), {"tp": 8}, family="H200").latency_ns)
    pre = Workload("prefill", batch=1, s_kv=1024, runtime="trtllm")
    assert pre.mla_decode_ns == 0.0
