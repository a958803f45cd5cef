"""The training model behind SimulatorRunner: ZeRO memory, activations, collectives."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from simcore.autotune.training import (
    activation_bytes,
    allgather_ns,
    allreduce_ns,
    estimate_training,
    link_for_span,
    optimizer_step_ns,
    reduce_scatter_ns,
    train_compute_ns,
    zero_comm_ns,
    zero_model_states_bytes,
)
from simcore.presets import HARDWARE_FAMILIES, PRESETS
from simcore.specs import Efficiency

A100 = HARDWARE_FAMILIES["A100-80G"]
H100 = HARDWARE_FAMILIES["H100-SXM"]
LLAMA7B = PRESETS["Llama 2 7B"].model


@pytest.mark.parametrize(
    ("stage", "fp16", "per_param"),
    [
        (0, True, 20.0), (1, True, 4 + 16 / 8), (2, True, 2 + 18 / 8), (3, True, 20 / 8),
        (0, False, 16.0), (1, False, 8 + 8 / 8), (2, False, 4 + 12 / 8), (3, False, 16 / 8),
    ],
)
def test_zero_model_states_bytes__deepspeed_formula(stage, fp16, per_param):
    n, mp = 7e9, 2
    got = zero_model_states_bytes(n, stage=stage, n_gpus=8, mp=mp, fp16=fp16)
    assert got == pytest.approx(per_param * n / mp)


def test_zero_model_states_bytes__bad_stage_raises():
    with pytest.raises(ValueError, match="0, 1, 2 or 3"):
        zero_model_states_bytes(1e9, stage=4, n_gpus=8)


@settings(max_examples=40, deadline=None)
@given(
    n=st.floats(1e6, 1e12),
    g=st.integers(1, 4096),
    fp16=st.booleans(),
)
def test_zero_model_states_bytes__monotone_in_stage(n, g, fp16):
    mem = zero_model_states_bytes(n, stage=np.arange(4), n_gpus=g, fp16=fp16)
    assert np.all(np.diff(mem) <= 1e-9 * mem[0])


def test_activation_bytes__korthikanti_per_layer():
    s, b, h, a, L = 2048, 3, 4096, 32, 5
    full = activation_bytes(s, micro_batch=b, d_model=h, n_heads=a, n_layers=L)
    assert full == pytest.approx(L * s * b * h * (34 + 5 * a * s / h))
    ckpt = activation_bytes(s, micro_batch=b, d_model=h, n_heads=a, n_layers=L, recompute=True)
    assert ckpt == pytest.approx(L * 2 * s * b * h)
    tp = activation_bytes(s, micro_batch=b, d_model=h, n_heads=a, n_layers=L, mp=4)
    assert tp == pytest.approx(L * s * b * h * (10 + 24 / 4 + 5 * a * s / (h * 4)))


def test_allreduce_ns__ring_formula():
    got = allreduce_ns(1e9, group=8, bw_gbs=100.0, alpha_ns=1000.0)
    assert got == pytest.approx(2 * 7 / 8 * 1e9 / 100.0 + 2 * 7 * 1000.0)
    assert allreduce_ns(1e9, group=1, bw_gbs=100.0, alpha_ns=1000.0) == 0.0


def test_allgather_ns__ring_formula():
    got = allgather_ns(1e9, group=4, bw_gbs=50.0, alpha_ns=500.0, calls=3)
    assert got == pytest.approx(3 / 4 * 1e9 / 50.0 + 3 * 500.0 * 3)
    assert reduce_scatter_ns(1e9, group=4, bw_gbs=50.0, alpha_ns=500.0, calls=3) == got


def test_link_for_span__node_then_scale_out():
    eff = Efficiency()
    bw, alpha = link_for_span(8, hardware=H100.hardware, topology=H100.topology)
    assert (bw, alpha) == (450.0 * eff.network, H100.topology.alpha_intra_ns)
    bw, alpha = link_for_span(16, hardware=H100.hardware, topology=H100.topology)
    assert (bw, alpha) == (50.0 * eff.network, H100.topology.alpha_inter_ns)
    bws, _ = link_for_span(np.array([2, 8, 9, 4096]), hardware=A100.hardware,
                           topology=A100.topology)
    assert bws.tolist() == [240.0, 240.0, 20.0, 20.0]


@settings(max_examples=30, deadline=None)
@given(
    n=st.floats(1e8, 1e11),
    stages=st.lists(st.integers(0, 3), min_size=1, max_size=6),
    gpus=st.sampled_from([1, 2, 8, 16, 64]),
    gas=st.integers(1, 8),
    overlap=st.booleans(),
)
def test_zero_comm_ns__vectorised_matches_scalar(n, stages, gpus, gas, overlap):
    kw = dict(n_gpus=gpus, grad_accum=gas, bw_gbs=200.0, alpha_ns=700.0,
              fwd_ns=1e6, bwd_ns=2e6, overlap_comm=overlap)
    vec = zero_comm_ns(n, stage=np.array(stages), **kw)
    one = [zero_comm_ns(n, stage=s, **kw) for s in stages]
    np.testing.assert_allclose(np.atleast_1d(vec), one, rtol=1e-12)
    mem = zero_model_states_bytes(n, stage=np.array(stages), n_gpus=gpus)
    np.testing.assert_allclose(
        np.atleast_1d(mem), [zero_model_states_bytes(n, stage=s, n_gpus=gpus) for s in stages])


def test_zero_comm_ns__stage3_moves_one_and_a_half_times_the_bytes():
    kw = dict(n_gpus=8, bw_gbs=100.0, alpha_ns=0.0, bytes_per_grad=2)
    z0 = zero_comm_ns(1e9, stage=0, **kw)
    z3 = zero_comm_ns(1e9, stage=3, **kw)
    assert z3 == pytest.approx(1.5 * z0)
    # Z2 reduces gradients every micro-step; Z1 once per step
    z1 = zero_comm_ns(1e9, stage=1, grad_accum=4, **kw)
    z2 = zero_comm_ns(1e9, stage=2, grad_accum=4, **kw)
    assert z2 > z1


def test_train_compute_ns__six_n_tokens():
    fwd, bwd = train_compute_ns(7e9, tokens=2048, peak_tflops=312.0, efficiency=0.5)
    assert fwd + bwd == pytest.approx(6 * 7e9 * 2048 / (312e12 * 0.5) * 1e9)
    f2, b2 = train_compute_ns(7e9, tokens=2048, peak_tflops=312.0, efficiency=0.5,
                              recompute=True)
    assert f2 + b2 == pytest.approx(8 / 6 * (fwd + bwd))


def test_optimizer_step_ns__partitioned_from_stage1():
    z0 = optimizer_step_ns(1e9, stage=0, n_gpus=8, bw_hbm_gbs=2000.0)
    z1 = optimizer_step_ns(1e9, stage=1, n_gpus=8, bw_hbm_gbs=2000.0)
    assert z0 == pytest.approx(8 * z1)


def test_estimate_training__metrics_json_units():
    est = estimate_training(LLAMA7B, hardware=A100.hardware, topology=A100.topology,
                            n_gpus=8, stage=2, micro_batch=1, grad_accum=2, seq_len=2048)
    m = est.metrics()
    assert m["latency"] == pytest.approx(est.latency_ns / 1e3)  # µs per global step
    assert est.global_batch == 16
    assert m["throughput"] == pytest.approx(16 / (est.latency_ns * 1e-9))
    flops = 6 * LLAMA7B.n_params * 16 * 2048 / 8 / (est.latency_ns * 1e-9)
    assert m["FLOPS_per_gpu"] == pytest.approx(flops)
    assert est.compute_ns == pytest.approx(
        2 * 6 * LLAMA7B.n_params * 2048 / (312e12 * Efficiency().train_compute) * 1e9)
    assert 0.2 < m["FLOPS_per_gpu"] / 312e12 < Efficiency().train_compute


def test_estimate_training__7b_fits_from_stage1_on_80gb():
    fits = [estimate_training(LLAMA7B, hardware=A100.hardware, topology=A100.topology,
                              n_gpus=8, stage=s, micro_batch=1).fits for s in range(4)]
    assert fits == [False, True, True, True]


def test_estimate_training__bad_inputs_raise():
    with pytest.raises(ValueError, match="precision"):
        estimate_training(LLAMA7B, hardware=A100.hardware, topology=A100.topology,
                          n_gpus=8, stage=1, micro_batch=1, precision="int8")
    with pytest.raises(ValueError, match="mp=3 must divide"):
        estimate_training(LLAMA7B, hardware=A100.hardware, topology=A100.topology,
                          n_gpus=8, stage=1, micro_batch=1, mp=3)
    assert math.isfinite(estimate_training(
        LLAMA7B, hardware=A100.hardware, topology=A100.topology, n_gpus=1, stage=0,
        micro_batch=1).latency_ns)
