"""The DeepSpeed glue behind SimulatorRunner: experiments → engine training steps."""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import simcore
from simcore.autotune import Autotuner, Experiment, SimulatorRunner
from simcore.autotune import deepspeed as ds
from simcore.autotune.training import (
    TrainingEngine,
    TrainingRun,
    estimate_training,
    simulate_runs,
    with_memory,
)
from simcore.model.presets import HARDWARE_FAMILIES, PRESETS
from simcore.model.specs import Efficiency

A100 = HARDWARE_FAMILIES["A100-80G"]
LLAMA7B = PRESETS["Llama 2 7B"].model


def _exp(stage=1, mbs=1, gas=1, n_gpus=8, mp=1, **ds):
    return Experiment(name=f"z{stage}_gas{gas}_tmbspg{mbs}", stage=stage, micro_batch=mbs,
                      grad_accum=gas, n_gpus=n_gpus, mp=mp,
                      ds_config={"zero_optimization": {"stage": stage}, **ds})


def _engine_point(run: TrainingRun, family="A100-80G", hardware=None):
    ds = simcore.evaluate(LLAMA7B, run.workload(), space=run.space(), family=family,
                          hardware=hardware)
    return {k: ds[k].values.item() for k in ("latency_ns", "throughput_tok_s",
                                             "flops_per_device", "mem_bytes", "fits",
                                             "compute_ns", "memory_ns", "comm_ns")}


# -- the mapping ---------------------------------------------------------------------------
def test_training_run__maps_deepspeed_onto_the_engine():
    run = TrainingRun(stage=3, micro_batch=4, grad_accum=2, n_gpus=16, mp=2, seq_len=1024,
                      precision="bf16", activation_checkpointing=True)
    w = run.workload()
    assert (w.mode, w.batch, w.micro_batch, w.s_kv) == ("train", 4 * 2 * 8, 4, 1024)
    assert (w.zero_stage, w.precision, w.recompute, w.sequence_parallel) == (3, "bf16", "full",
                                                                             False)
    assert w.batch // (run.dp * w.micro_batch) == 2  # the engine's m = grad_accum
    sp = run.space()
    assert (sp["tp"], sp["dp"], sp["cp"], sp["pp"]) == ((2,), (8,), (1,), (1,))
    assert TrainingRun(stage=0, micro_batch=1).workload().recompute == "none"


@pytest.mark.parametrize(("ds", "precision", "grad_bytes"), [
    ({"fp16": {"enabled": True}}, "fp16", 2),
    ({"bf16": {"enabled": True}}, "bf16", 2),
    ({}, "fp32", 4),
    ({"fp16": {"enabled": True}, "communication_data_type": "fp32"}, "fp16", 4),
])
def test_training_run_from_experiment__precision_and_gradient_bytes(ds, precision, grad_bytes):
    run = TrainingRun.from_experiment(_exp(**ds))
    assert (run.precision, run.grad_bytes) == (precision, grad_bytes)
    assert run.workload().grad_bytes == grad_bytes


def test_training_run__bad_inputs_raise():
    with pytest.raises(ValueError, match="precision"):
        TrainingRun(stage=1, micro_batch=1, precision="int8")
    with pytest.raises(ValueError, match="mp=3 must divide n_gpus=8"):
        TrainingRun(stage=1, micro_batch=1, n_gpus=8, mp=3)
    with pytest.raises(ValueError, match="0, 1, 2 or 3"):
        TrainingRun(stage=4, micro_batch=1)
    with pytest.raises(ValueError, match="micro_batch must be a positive integer"):
        TrainingRun(stage=1, micro_batch=0)
    with pytest.raises(ValueError, match="communication_data_type"):
        TrainingRun.from_experiment(_exp(communication_data_type="int8"))


# -- one mechanism: the glue returns the engine's numbers ------------------------------------
@pytest.mark.parametrize("stage", [0, 1, 2, 3])
@pytest.mark.parametrize(("mbs", "gas", "ckpt"), [(1, 1, False), (2, 4, True)])
def test_estimate_training__is_the_engine_point(stage, mbs, gas, ckpt):
    run = TrainingRun(stage=stage, micro_batch=mbs, grad_accum=gas, n_gpus=8,
                      activation_checkpointing=ckpt)
    est = simulate_runs(LLAMA7B, [run], family="A100-80G")[0]
    ref = _engine_point(run)
    assert est.fits == ref["fits"] and est.valid
    for ours, theirs in (("latency_ns", "latency_ns"), ("mem_bytes", "mem_bytes"),
                         ("flops_per_gpu", "flops_per_device"), ("compute_ns", "compute_ns"),
                         ("memory_ns", "memory_ns"), ("comm_ns", "comm_ns")):
        assert getattr(est, ours) == pytest.approx(ref[theirs], rel=1e-12)
    m = est.metrics()
    assert m["latency"] == pytest.approx(ref["latency_ns"] / 1e3)  # µs per global step
    assert m["throughput"] == pytest.approx(ref["throughput_tok_s"] / 2048)  # samples/s
    assert m["throughput"] == pytest.approx(est.global_batch / (est.latency_ns * 1e-9))
    assert m["FLOPS_per_gpu"] == pytest.approx(ref["flops_per_device"])
    assert est.global_batch == mbs * gas * 8


def test_simulate_runs__one_batch_matches_one_by_one():
    runs = [TrainingRun(stage=s, micro_batch=m, grad_accum=g, n_gpus=8, precision=p)
            for s in range(4) for m, g in ((1, 1), (3, 2)) for p in ("fp16", "fp32")]
    batch = simulate_runs(LLAMA7B, runs, family="H100-SXM")
    for run, est in zip(runs, batch, strict=True):
        one = estimate_training(LLAMA7B, family="H100-SXM", n_gpus=8, stage=run.stage,
                                micro_batch=run.micro_batch, grad_accum=run.grad_accum,
                                precision=run.precision)
        assert est == one


def test_estimate_training__gpu_memory_override_changes_only_the_fit():
    kw = dict(family="A100-80G", n_gpus=8, stage=2, micro_batch=2)
    big = estimate_training(LLAMA7B, **kw)
    small = estimate_training(LLAMA7B, hardware=with_memory(A100.hardware, gpu_mem_gb=40), **kw)
    assert big.latency_ns == small.latency_ns and big.mem_bytes == small.mem_bytes
    assert small.usable_bytes == pytest.approx(40e9 * Efficiency().hbm_usable)
    assert not small.fits


# -- memory: DeepSpeed's states formula, Korthikanti activations -----------------------------
@pytest.mark.parametrize("precision", ["fp16", "bf16", "fp32"])
@pytest.mark.parametrize("stage", [0, 1, 2, 3])
@pytest.mark.parametrize("n_gpus", [8, 128])
def test_estimate_training__model_states_are_deepspeeds_estimators(stage, precision, n_gpus):
    model = PRESETS["Llama 3.1 8B"].model
    est = estimate_training(model, family="H100-SXM", n_gpus=n_gpus, stage=stage,
                            micro_batch=1, precision=precision)
    # the engine counts the parameters on the device (the final norm aside); its largest
    # layer is the embedding (DeepSpeed gathers it whole at ZeRO-3)
    n = model.n_params - model.d_model
    layer = model.vocab_size * model.d_model
    nodes, per_node = n_gpus // 8, 8
    if precision != "fp32" and stage == 2:
        expected = ds.estimate_zero2_model_states_mem_needs(
            n, per_node, nodes, cpu_offload=False)[1]
    elif precision != "fp32" and stage == 3:
        expected = ds.estimate_zero3_model_states_mem_needs(
            n, layer, per_node, nodes, cpu_offload=False, cpu_offload_params=False)[1]
    else:  # DeepSpeed has no estimator for ZeRO 0-1 nor an fp32 one: its counting
        expected = ds.zero_model_states_bytes(stage, precision=precision, total_params=n,
                                              largest_layer_params=layer, n_gpus=n_gpus)
    assert est.model_states_bytes == pytest.approx(expected, rel=1e-9)


def test_estimate_training__bf16_states_are_fp16s_not_fp32s():
    kw = dict(family="H100-SXM", n_gpus=8, stage=2, micro_batch=1)
    z = {p: estimate_training(LLAMA7B, precision=p, **kw).model_states_bytes
         for p in ("fp16", "bf16", "fp32")}
    assert z["bf16"] == z["fp16"] < z["fp32"]
    n = LLAMA7B.n_params
    assert z["bf16"] == pytest.approx((2 + 18 / 8) * n, rel=1e-5)


@settings(max_examples=200, deadline=None)
@given(stage=st.integers(0, 3), mbs=st.integers(1, 16), ckpt=st.booleans(),
       mp=st.sampled_from([1, 2, 4]))
def test_estimate_training__memory_is_states_plus_activations_per_sample(stage, mbs, ckpt, mp):
    est = estimate_training(LLAMA7B, n_gpus=8, mp=mp, stage=stage, micro_batch=mbs,
                            activation_checkpointing=ckpt)
    one = estimate_training(LLAMA7B, n_gpus=8, mp=mp, stage=stage, micro_batch=1,
                            activation_checkpointing=ckpt)
    assert est.model_states_bytes == pytest.approx(one.model_states_bytes)
    assert est.mem_bytes == pytest.approx(est.model_states_bytes + mbs * one.activation_bytes)
    assert est.activation_bytes_per_sample == pytest.approx(one.activation_bytes)
    assert est.fits == (est.mem_bytes <= est.usable_bytes)


def test_estimate_training__checkpointing_shrinks_activations():
    s, h, L = 2048, LLAMA7B.d_model, LLAMA7B.n_layers
    full = estimate_training(LLAMA7B, n_gpus=8, stage=3, micro_batch=1)
    ckpt = estimate_training(LLAMA7B, n_gpus=8, stage=3, micro_batch=1,
                             activation_checkpointing=True)
    # Korthikanti et al.: 34 bytes per token and hidden unit per layer with a flash
    # attention core (no 5as/h scores), 2 when only each layer's input is kept
    assert full.activation_bytes > L * s * h * 34
    assert full.activation_bytes < L * s * h * (34 + 5 * LLAMA7B.n_heads * s / h)
    assert ckpt.activation_bytes < full.activation_bytes / 5
    assert ckpt.activation_bytes > L * s * h * 2
    assert ckpt.latency_ns > full.latency_ns  # one extra forward


def test_estimate_training__7b_fits_from_stage1_on_80gb():
    fits = [estimate_training(LLAMA7B, family="A100-80G", n_gpus=8, stage=s,
                              micro_batch=1).fits for s in range(4)]
    assert fits == [False, True, True, True]


def test_estimate_training__stage3_pays_parameter_gathers():
    z = [estimate_training(LLAMA7B, n_gpus=8, stage=s, micro_batch=1) for s in range(4)]
    assert z[1].comm_ns == pytest.approx(z[2].comm_ns)
    # ZeRO-3 gathers are on the wire but prefetched under compute, and DeepSpeed's
    # overlap_comm (on by default at stage 3) hides the reduce-scatter under backward
    fam = HARDWARE_FAMILIES["A100-80G"]
    row = TrainingEngine(LLAMA7B, family=fam, hardware=fam.hardware,
                         efficiency=Efficiency()).row(z[3].run)
    assert float(row["ovl0_bytes"][0]) > 0.0 and float(row["tail_hide"][0]) > 0.0
    assert z[3].comm_ns < z[2].comm_ns
    assert all(a.mem_bytes > b.mem_bytes for a, b in zip(z[:-1], z[1:], strict=True))


def test_estimate_training__one_gpu_has_no_data_parallel_traffic():
    est = estimate_training(LLAMA7B, n_gpus=1, stage=0, micro_batch=1)
    assert math.isfinite(est.latency_ns) and est.comm_ns == 0.0


# -- the runner ----------------------------------------------------------------------------
def test_simulator_runner__invalid_layout_is_a_failed_trial():
    # 32 heads cannot be split over mp=3
    t = SimulatorRunner("Llama 2 7B", n_gpus=6).run(_exp(stage=3, n_gpus=6, mp=3,
                                                         fp16={"enabled": True}))
    assert t.status == "failed" and "engine rejects tp=3" in t.error
    bad = SimulatorRunner("Llama 2 7B", n_gpus=8).run(_exp(n_gpus=8, mp=3))
    assert bad.status == "failed" and "mp=3 must divide" in bad.error


def test_simulator_runner__out_of_memory_message_splits_states_and_activations():
    t = SimulatorRunner("Llama 2 7B", n_gpus=8).run(_exp(stage=1, mbs=4,
                                                         fp16={"enabled": True}))
    assert t.status == "failed"
    assert t.error.startswith("out of memory: needs ") and "model states 40.4 GB" in t.error


def test_simulator_runner__estimate_bounds_exactly_what_fits():
    sim = SimulatorRunner("Llama 2 7B", family="H100-SXM", n_gpus=8,
                          activation_checkpointing=True)
    for stage in (1, 2, 3):
        cap = sim.estimate(_exp(stage=stage, fp16={"enabled": True})).max_micro_batch
        assert cap > 1
        assert sim.run(_exp(stage=stage, mbs=cap, fp16={"enabled": True})).ok
        assert not sim.run(_exp(stage=stage, mbs=cap + 1, fp16={"enabled": True})).ok


def test_autotuner__simulator_evaluates_the_whole_plan_in_one_engine_call(monkeypatch):
    from simcore.engine import core as engine

    calls = []
    real = engine.combine

    def counting(coeffs, hw, eff):
        calls.append(coeffs.shape[0])
        return real(coeffs, hw, eff)

    monkeypatch.setattr(engine, "combine", counting)
    runner = SimulatorRunner("Llama 2 7B", family="H100-SXM", n_gpus=8,
                             activation_checkpointing=True)
    cfg = {"fp16": {"enabled": True}, "zero_optimization": {"stage": "all"},
           "autotuning": {"metric": "throughput", "max_train_micro_batch_size_per_gpu": 16,
                          "fast": False}}
    result = Autotuner(cfg, runner).tune()
    assert result.best is not None and result.best.micro_batch == 16
    assert len(calls) == 1 and calls[0] > 1
    # every knob combination maps onto the same engine point: the knobs tie
    groups: dict[tuple[int, int], set[float]] = {}
    sizes: dict[tuple[int, int], int] = {}
    for t in result.trials:
        if t.ok:
            key = (t.stage, t.micro_batch)
            groups.setdefault(key, set()).add(t.value("throughput"))
            sizes[key] = sizes.get(key, 0) + 1
    assert any(n > 1 for n in sizes.values())
    assert all(len(v) == 1 for v in groups.values())
    best = runner.simulate(_exp(stage=result.best.stage, mbs=16, fp16={"enabled": True}))
    assert result.value == best.metrics()["throughput"]
