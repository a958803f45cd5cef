import json

import numpy as np
import pytest
import xarray as xr
from hypothesis import given, settings
from hypothesis import strategies as st

from simcore.cli import main
from simcore.engine.metrics import get_metric
from simcore.engine.pareto import objective_directions, pareto
from simcore.errors import SimcoreInputError
from simcore.hardware.costmodel import (
    COST_VARIABLES,
    DEFAULT_COST_MODEL,
    CostModel,
    KnobCost,
    add_costs,
    get_cost_model,
    load_cost_model,
)
from simcore.model.presets import get_family
from simcore.model.specs import HW_KNOBS
from simcore.studies.codesign import joint_explore


def brute_force_front(points: np.ndarray) -> np.ndarray:
    """O(n²) twin: a row is on the front iff no other row is <= everywhere and < somewhere
    (all columns minimised); rows with NaN never are."""
    ok = ~np.isnan(points).any(axis=1)
    le = (points[:, None, :] <= points[None, :, :]).all(axis=2)  # le[j, i]: j <= i
    lt = (points[:, None, :] < points[None, :, :]).any(axis=2)
    dom = le & lt & ok[:, None]
    return ok & ~dom.any(axis=0)


def _hw(name):
    return get_family(name).hardware.as_dict()


def test_cost_model__defaults_near_public_totals():
    m = DEFAULT_COST_MODEL
    h100, a100, h200 = _hw("H100-SXM"), _hw("A100-80G"), _hw("H200")
    assert 25_000 <= m.device_cost_usd(h100) <= 40_000  # public reporting: $25k-40k
    assert 12_000 <= m.device_cost_usd(a100) <= 20_000  # ~$15k-17k list
    gpu_w = {k: v for k, v in h100.items()}
    net = m.term("bw_inter_gbs").watts(h100["bw_inter_gbs"]) + m.term("bw_intersip_gbs").watts(
        h100["bw_intersip_gbs"])
    assert abs(m.device_power_w(gpu_w) - net - 700) / 700 < 0.05  # H100 SXM TDP 700 W
    net_a = m.term("bw_inter_gbs").watts(a100["bw_inter_gbs"]) + m.term(
        "bw_intersip_gbs").watts(a100["bw_intersip_gbs"])
    assert abs(m.device_power_w(a100) - net_a - 400) / 400 < 0.05  # A100 SXM TDP 400 W
    assert m.device_power_w(h200) > m.device_power_w(h100)
    assert all(t.source for t in m.knobs) and {t.knob for t in m.knobs} == set(HW_KNOBS)


def test_knob_cost__linear_at_ref_superlinear_above():
    t = KnobCost("bw_hbm_gbs", usd_per_unit=1000, w_per_unit=10, exponent=1.5, ref=4.0)
    assert t.usd(4000.0) == pytest.approx(4000.0)  # 4 TB/s at the reference: price x amount
    assert t.usd(8000.0) == pytest.approx(4000.0 * 2**1.5)
    assert t.watts(8000.0) == pytest.approx(80.0)  # w_exponent 1
    m = CostModel(base_usd=10, base_w=1, knobs=(t,))
    arr = m.device_cost_usd({"bw_hbm_gbs": np.array([4000.0, 8000.0])})
    np.testing.assert_allclose(arr, [4010.0, 10 + 4000 * 2**1.5])


def test_load_cost_model__toml_and_json_agree(tmp_path):
    toml = tmp_path / "m.toml"
    toml.write_text('name = "x"\nbase_usd = 100\n[knobs.pe_hbm_gb]\nusd_per_unit = 20\n'
                    'exponent = 1.1\nref = 80\n')
    js = tmp_path / "m.json"
    js.write_text(json.dumps({"name": "x", "base_usd": 100,
                              "knobs": {"pe_hbm_gb": {"usd_per_unit": 20, "exponent": 1.1,
                                                      "ref": 80}}}))
    a, b = load_cost_model(toml), load_cost_model(js)
    def numbers(m):
        return [(t.knob, t.usd_per_unit, t.w_per_unit, t.exponent, t.w_exponent, t.ref)
                for t in m.knobs], m.base_usd, m.base_w, m.name

    assert numbers(a) == numbers(b)
    assert a.base_usd == 100 and a.term("pe_hbm_gb").usd_per_unit == 20
    # knobs not named keep the defaults; power too
    assert a.term("peak_tflops_f16") == DEFAULT_COST_MODEL.term("peak_tflops_f16")
    assert a.base_w == DEFAULT_COST_MODEL.base_w
    fresh = CostModel.from_dict({"replace": True, "knobs": {"pe_hbm_gb": {"usd_per_unit": 1}}})
    assert [t.knob for t in fresh.knobs] == ["pe_hbm_gb"] and fresh.base_usd == 0
    assert numbers(get_cost_model(str(toml))) == numbers(a) and get_cost_model("default") is DEFAULT_COST_MODEL
    assert get_cost_model(None) is None


@pytest.mark.parametrize("text, match", [
    ('[knobs.pe_hbm_gb]\nusd_per_unit = -5\n', "cannot be negative"),
    ('base_usd = -1\n', "cannot be negative"),
    ('[knobs.speed]\nusd_per_unit = 5\n', "unknown knob 'speed'"),
    ('[knobs.pe_hbm_gb]\nprice = 5\n', "unknown keys \\['price'\\]"),
    ('[knobs.pe_hbm_gb]\nexponent = 0\n', "must be a finite number > 0"),
    ('[knobs.pe_hbm_gb]\nusd_per_unit = "a lot"\n', "must be a number"),
    ('colour = "red"\n', "unknown keys \\['colour'\\]"),
    ('this is = = not toml', "not valid TOML"),
])
def test_load_cost_model__bad_input(tmp_path, text, match):
    p = tmp_path / "bad.toml"
    p.write_text(text)
    with pytest.raises(SimcoreInputError, match=match):
        load_cost_model(p)


def test_load_cost_model__unreadable(tmp_path):
    with pytest.raises(SimcoreInputError, match="cannot read it"):
        load_cost_model(tmp_path / "missing.toml")
    with pytest.raises(SimcoreInputError, match="cannot read it"):
        load_cost_model(tmp_path)  # a folder


def test_add_costs__totals_scale_with_devices():
    h = _hw("H100-SXM")
    ds = xr.Dataset({"n_devices": ("bw_hbm_gbs", [8.0, 16.0, np.nan]),
                     "throughput_tok_s": ("bw_hbm_gbs", [80.0, 320.0, np.nan])},
                    coords={"bw_hbm_gbs": [3350.0, 6700.0, 13400.0],
                            **{k: v for k, v in h.items() if k != "bw_hbm_gbs"}})
    out = add_costs(ds)
    per = DEFAULT_COST_MODEL.device_cost_usd({**h, "bw_hbm_gbs": np.array([3350.0, 6700.0])})
    np.testing.assert_allclose(out.cost_usd.values[:2], per * [8, 16])
    np.testing.assert_allclose(out.tokens_per_s_per_gpu.values[:2], [10.0, 20.0])
    assert np.isnan(out.cost_usd.values[2])
    for name, (units, long_name) in COST_VARIABLES.items():
        assert out[name].attrs["units"] == units and out[name].attrs["long_name"] == long_name


def test_metrics__cost_directions_registered():
    assert get_metric("cost_usd").direction == "min"
    assert get_metric("power_w").direction == "min"
    assert get_metric("tokens_per_s_per_gpu").direction == "max"
    assert objective_directions("latency,cost_usd,power_w") == {
        "latency": "min", "cost_usd": "min", "power_w": "min"}
    with pytest.raises(SimcoreInputError, match="unknown metric 'bogus'"):
        objective_directions("latency,bogus")


@settings(max_examples=300, deadline=None)
@given(st.integers(1, 60), st.integers(1, 4), st.integers(0, 2**32 - 1),
       st.lists(st.sampled_from(["latency", "cost_usd", "power_w", "tokens_per_s_per_gpu",
                                 "throughput"]), min_size=1, max_size=4, unique=True))
def test_pareto__nd_matches_brute_force(n, levels, seed, objectives):
    rng = np.random.default_rng(seed)
    data = {get_metric(o).key: ("x", rng.integers(0, levels + 1, n).astype(float))
            for o in objectives}
    ok = rng.random(n) > 0.2
    ds = xr.Dataset({**data, "any_fits": ("x", ok)})
    mask = pareto(ds, objectives=objectives).values
    signs = np.array([get_metric(o).sign for o in objectives], dtype=float)
    pts = np.stack([ds[get_metric(o).key].values for o in objectives], axis=1) * signs
    pts[~ok] = np.nan
    np.testing.assert_array_equal(mask, brute_force_front(pts))
    # non-dominance: nothing on the front is dominated, everything off it (feasible) is
    front = pts[mask]
    for i in np.flatnonzero(ok):
        dominated = ((front <= pts[i]).all(axis=1) & (front < pts[i]).any(axis=1)).any()
        assert dominated != mask[i]


def test_pareto__unknown_objective():
    ds = xr.Dataset({"latency_ns": ("x", [1.0, 2.0])})
    with pytest.raises(SimcoreInputError, match="unknown metric 'bogus'"):
        pareto(ds, objectives=["latency", "bogus"])
    with pytest.raises(SimcoreInputError, match="not in the Dataset"):
        pareto(ds, objectives=["latency", "cost_usd"])


@pytest.fixture(scope="module")
def explored():
    return joint_explore("Llama 3.1 70B", s_kv=131072, depth="coarse", family="H100-SXM",
                         cost_model=DEFAULT_COST_MODEL,
                         objectives="latency,cost_usd,power_w", with_sensitivity=False)


def test_joint_explore__cost_model_variables(explored):
    r = explored
    ds = r.dataset
    assert r.objectives == {"latency": "min", "cost_usd": "min", "power_w": "min"}
    for name in COST_VARIABLES:
        assert ds[name].dims == tuple(HW_KNOBS)
    np.testing.assert_allclose(ds.cost_usd, ds.cost_usd_per_device * ds.n_devices)
    np.testing.assert_allclose(ds.power_w, ds.power_w_per_device * ds.n_devices)
    for s in r.all_scores[:20]:
        assert s.cost_usd == pytest.approx(
            DEFAULT_COST_MODEL.device_cost_usd(s.hardware.as_dict()) * s.n_devices)
        assert s.tokens_per_s_per_gpu == pytest.approx(s.throughput_tok_s / s.n_devices)
        assert s.as_row()["cost_usd"] == s.cost_usd
    assert "cost_score" in ds  # the original proxy stays


def test_joint_explore__three_objective_front_matches_brute_force(explored):
    r = explored
    ds = r.dataset.stack(_hw=list(HW_KNOBS))
    pts = np.stack([ds.latency_ns.values, ds.cost_usd.values, ds.power_w.values], axis=1)
    pts[~ds.any_fits.values] = np.nan
    np.testing.assert_array_equal(ds.pareto.values, brute_force_front(pts))
    assert len(r.pareto_scores) == int(ds.pareto.sum())
    on = {(s.hardware.as_dict()[HW_KNOBS[1]], s.latency_ns, s.cost_usd) for s in r.pareto_scores}
    assert len(on) == len(r.pareto_scores)


def test_joint_explore__defaults_unchanged_without_cost_model():
    r = joint_explore("Llama 3.1 8B", s_kv=8192, depth="two_stage")
    assert r.objectives == {"latency": "min", "cost_score": "min"}
    assert "cost_usd" not in r.dataset and np.isnan(r.best.cost_usd)
    assert r.best.total_latency_ns == r.best.latency_ns
    # a cost objective without a cost model uses the default one
    r2 = joint_explore("Llama 3.1 8B", s_kv=8192, depth="two_stage", objectives=["cost_usd"])
    assert r2.cost_model is DEFAULT_COST_MODEL and r2.best.cost_usd > 0


def test_joint_explore__unknown_objective():
    with pytest.raises(SimcoreInputError, match="bogus"):
        joint_explore("Llama 3.1 8B", s_kv=8192, depth="two_stage", objectives="latency,bogus")


def test_explore_cli__cost_model_and_objectives(tmp_path, capsys):
    cm = tmp_path / "cm.toml"
    cm.write_text("[knobs.bw_hbm_gbs]\nusd_per_unit = 3000\n")
    rc = main(["explore", "--model", "Llama 3.1 8B", "--s-kv", "8192", "--depth", "balanced",
               "--cost-model", str(cm), "--objectives", "latency,cost_usd,power_w",
               "--format", "json", "--no-progress"])
    assert rc == 0
    rows = json.loads(capsys.readouterr().out)
    assert rows and {"cost_usd", "power_w", "tokens_per_s_per_gpu", "n_devices"} <= set(rows[0])
    png = tmp_path / "front.png"
    assert main(["explore", "--model", "Llama 3.1 8B", "--s-kv", "8192", "--depth", "balanced",
                 "--cost-model", "default", "--plot", str(png), "--no-progress"]) == 0
    assert png.stat().st_size > 10_000
    assert "latency vs cost_usd" in capsys.readouterr().out


@pytest.mark.parametrize("argv, match", [
    (["--objectives", "latency,bogus"], "unknown metric 'bogus'"),
    (["--cost-model", "/no/such/file.toml"], "cannot read it"),
])
def test_explore_cli__bad_cost_input(capsys, argv, match):
    assert main(["explore", "--depth", "two_stage", "--no-progress", *argv]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and match in err[0]


def test_explore_cli__negative_price(tmp_path, capsys):
    cm = tmp_path / "neg.json"
    cm.write_text(json.dumps({"knobs": {"pe_hbm_gb": {"usd_per_unit": -3}}}))
    assert main(["explore", "--depth", "two_stage", "--cost-model", str(cm)]) == 2
    assert "cannot be negative" in capsys.readouterr().err


def test_load_cost_model__docs_example(tmp_path):
    """The ``my_prices.toml`` example of docs/codesign.md loads as it reads."""
    from pathlib import Path

    doc = (Path(__file__).parents[1] / "docs" / "codesign.md").read_text()
    text = doc[doc.index("# my_prices.toml"):]
    p = tmp_path / "my_prices.toml"
    p.write_text(text[: text.index("```")])
    m = load_cost_model(p)
    assert m.name == "HBM3e quote" and m.term("bw_hbm_gbs").exponent == 1.3
    assert m.term("pe_hbm_gb").source == f"cost model {str(p)!r}"  # not the default's source
    assert m.term("peak_tflops_f16") == DEFAULT_COST_MODEL.term("peak_tflops_f16")


def test_plot_objectives__two_objectives_only(explored, tmp_path):
    from simcore.studies.plot import plot_objectives

    path = tmp_path / "f.png"
    plot_objectives(explored, path, objectives="cost_usd,latency")
    assert path.stat().st_size > 10_000
    with pytest.raises(SimcoreInputError, match="two objectives"):
        plot_objectives(explored)  # the result's own three
