"""pytest-benchmark suite. In the default test run (``--benchmark-disable`` in the
pytest config) every body runs once as a smoke test on a bounded size; for figures:

    python -m pytest benchmarks --benchmark-enable --benchmark-json=bench.json
"""

import numpy as np

import simcore
from simcore import Workload
from simcore.engine.evaluate import best_of_prepared, prepare
from simcore.engine.pareto import pareto_mask
from simcore.engine.space import depth_grid
from simcore.studies.codesign import joint_explore

DECODE = Workload("decode", s_kv=131072)


def test_bench_evaluate_full_space(benchmark):
    ds = benchmark(simcore.evaluate, "Llama 3.1 70B", DECODE, space="full",
                   hardware=depth_grid({"bw_hbm_gbs": [2000.0, 4000.0]}))
    assert ds.latency_ns.size == 2 * 30720


def test_bench_fused_coarse_full(benchmark):
    p = prepare("Llama 3.1 70B", DECODE, space="full", hardware=depth_grid("coarse"))
    ds = benchmark(best_of_prepared, p)
    assert bool(ds.any_fits.all())


def test_bench_joint_explore_balanced(benchmark):
    r = benchmark(joint_explore, "Llama 3.1 70B", s_kv=131072, depth="balanced", space="full")
    assert r.sensitivity[0].knob == "bw_hbm_gbs"


def test_bench_pareto_mask_100k(benchmark):
    rng = np.random.default_rng(0)
    pts = rng.random((100_000, 2))
    mask = benchmark(pareto_mask, pts)
    assert 0 < mask.sum() < 200


def test_bench_autotune_simulated(benchmark):
    from simcore.autotune import Autotuner, SimulatorRunner

    cfg = {"fp16": {"enabled": True}, "zero_optimization": {"stage": "all"},
           "autotuning": {"enabled": True, "metric": "throughput", "fast": False,
                          "max_train_micro_batch_size_per_gpu": 16}}

    def tune():
        return Autotuner(cfg, SimulatorRunner("Llama 2 7B", family="A100-80G", n_gpus=8)).tune()

    result = benchmark(tune)
    assert result.best is not None and result.value is not None


def test_korthikanti_job__predicts_the_validation_points(capsys):
    """bench_small's whole-process Korthikanti job (simcore's own inputs, as Calculon's job
    reads its own) prices the same 8 runs as the validation points: same numbers."""
    import importlib.util
    from pathlib import Path

    from simcore.validation import MEASUREMENTS, predict

    spec = importlib.util.spec_from_file_location(
        "bench_small", Path(__file__).with_name("bench_small.py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    exec(mod._KORTHIKANTI_SIMCORE, {})
    got = eval(capsys.readouterr().out)
    want = [round(predict(m), 3) for m in MEASUREMENTS if m.id.startswith("korthikanti-")]
    assert got == want
