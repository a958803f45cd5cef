"""A legacy auto_hardware script, run as its users wrote it (only the import path changed)."""

import math

from simcore.auto_hardware import (
    _HW_KNOB_DEFAULTS,
    PRESETS,
    HardwareCandidate,
    JointExploreResult,
    JointScore,
    enumerate_hardware,
    joint_explore,
)


def test_auto_hardware__legacy_script():
    # --- the script, verbatim apart from the import ---
    cands = enumerate_hardware("balanced")
    assert len(cands) == 64
    assert all(isinstance(c, HardwareCandidate) for c in cands)
    assert HardwareCandidate(**_HW_KNOB_DEFAULTS).cost_score == 6.0
    model = PRESETS["Llama 3.1 8B"].model
    result = joint_explore(model, s_kv=8192, mode="decode", depth="balanced")
    assert isinstance(result, JointExploreResult)
    assert result.total_joint == 64 * 1920
    best = result.all_scores[0]
    assert isinstance(best, JointScore)
    print(f"best: {best.total_latency_ns / 1e6:.3f} ms at cost {best.cost_score:.2f}")
    for s in result.pareto_scores:
        print(s.hardware.cost_score, s.cost_score, s.total_latency_ns)
        assert s.total_latency_ns == s.latency_ns
        assert math.isclose(s.hardware.cost_score, s.cost_score)
    for row in result.sensitivity:
        print(row.knob, row.rel_speedup, row.baseline_latency_ns, row.doubled_latency_ns)
    # --- what the script relied on ---
    assert result.pareto_scores and set(map(id, result.pareto_scores)) <= set(
        map(id, result.all_scores))
    lat = [s.total_latency_ns for s in result.all_scores]
    assert lat == sorted(lat)
    knobs = {r.knob for r in result.sensitivity}
    # one row per knob, and (since issue 32) one for the scale-out latency halved
    assert knobs == set(_HW_KNOB_DEFAULTS) | {"scaleout_latency_halved"}
    assert all(r.rel_speedup >= 0 for r in result.sensitivity)
    assert all(math.isclose(r.baseline_latency_ns, best.total_latency_ns)
               for r in result.sensitivity)


def test_auto_hardware__names_are_codesign_objects():
    import simcore.studies.codesign as cd

    assert joint_explore is cd.joint_explore and JointScore is cd.JointScore
    assert _HW_KNOB_DEFAULTS is cd.HW_KNOB_DEFAULTS
    assert "total_latency_ns" in dir(cd.JointScore)
