"""The cheap Dataset construction (simcore/labels.py) against the plain xarray one."""

import numpy as np
import pytest
import xarray as xr

import simcore
from simcore.engine.core import LAYOUT_OUTPUTS, MEM_PARTS, N_BEST, OUTPUT_NAMES, prepare
from simcore.engine.evaluate import _labelled, best_of_prepared
from simcore.engine.space import CHOICES, LAYOUT_DIM_ATTRS, PARALLEL_DIMS
from simcore.kernels.schema import field_attrs
from simcore.model.specs import HW_KNOBS

SPACE = {"tp": (1, 2, 4, 8), "pp": (1, 2), "dp": (1, 2), "cp": (1, 2)}


def plain_full(p):
    """evaluate's tensor built the plain way: xr.Dataset from tuples, attrs by name."""
    outs = p.combine(p.hw_rows(0, p.n_hw))
    shape = p.hw_shape + p.space.shape
    ds = xr.Dataset({n: ((*HW_KNOBS, *PARALLEL_DIMS), outs[n].reshape(shape))
                     for n in OUTPUT_NAMES})
    for name, col in p.layout_values().items():
        ds[name] = (PARALLEL_DIMS, col.reshape(p.space.shape))
    ds = ds.assign_coords(p.layout_coords()).assign_coords(p.hw_coords())
    for name in map(str, ds.variables):
        a = field_attrs(name)
        if a.get("units") and name not in ("fits", "valid"):
            ds[name].attrs["units"] = a["units"]
        if a.get("long_name"):
            ds[name].attrs.update(long_name=a["long_name"], description=a["long_name"])
        if name in LAYOUT_DIM_ATTRS:
            a = LAYOUT_DIM_ATTRS[name]
            ds[name].attrs.update(units=a["units"], long_name=a["long_name"],
                                  description=a["long_name"])
    ds.attrs.update(p.attrs())
    return ds


def plain_best(p, ds_best):
    """assemble_best's result built the plain way from the winners it reports."""
    best_idx = ds_best.best_layout_index.values.ravel()
    dims = list(HW_KNOBS)
    shape = p.hw_shape
    ok = best_idx >= 0
    safe = np.where(ok, best_idx, 0)
    data = {n: (dims, ds_best[n].values) for n in OUTPUT_NAMES[:N_BEST]}
    for name in ("mem_bytes", *MEM_PARTS, "n_devices"):
        data[name] = (dims, np.where(ok, p.column(name)[safe], np.nan).reshape(shape))
    for j, (dim, values) in enumerate(p.space.coords):
        col = np.asarray(values, dtype=object if dim in CHOICES else np.int64)
        picked = col[np.unravel_index(safe, p.space.shape)[j]]
        picked = np.where(ok, picked, "" if dim in CHOICES else -1)
        data[f"best_{dim}"] = (dims, picked.reshape(shape))
    data["best_layout_index"] = (dims, best_idx.reshape(shape))
    data["n_fits"] = (dims, ds_best.n_fits.values)
    for n in ("any_fits", "fits", "valid"):
        data[n] = (dims, ok.reshape(shape))
    ds = xr.Dataset(data, coords=p.hw_coords())
    from simcore.engine.chunks import _WINNER_ATTRS

    for name in map(str, ds.variables):
        got = field_attrs(name)
        if name in LAYOUT_OUTPUTS or name in OUTPUT_NAMES or name in HW_KNOBS:
            if got.get("units") and name not in ("fits", "valid"):
                ds[name].attrs["units"] = got["units"]
            if got.get("long_name"):  # every variable is labelled (issue 36 item 9)
                ds[name].attrs.update(long_name=got["long_name"], description=got["long_name"])
        else:
            ds[name].attrs.update(_WINNER_ATTRS[name])
    ds.attrs.update(ds_best.attrs)
    return ds


def same(a, b):
    xr.testing.assert_identical(a, b)
    assert list(a.variables) == list(b.variables)
    assert list(a.coords) == list(b.coords)
    assert list(a.sizes) == list(b.sizes)
    for n in a.variables:
        assert a[n].dtype == b[n].dtype, n
        assert a[n].attrs == b[n].attrs, n
    assert {k: type(v) for k, v in a.xindexes.items()} == \
        {k: type(v) for k, v in b.xindexes.items()}
    for k in a.xindexes:
        assert a.xindexes[k].index.dtype == b.xindexes[k].index.dtype, k


@pytest.mark.parametrize("hardware", [None, {"bw_hbm_gbs": [1000, 2000], "pe_hbm_gb": [40, 80]}])
@pytest.mark.parametrize("mode", ["decode", "train"])
def test_labelled__identical_to_plain_construction(hardware, mode):
    wl = simcore.Workload(mode, batch=8, s_kv=2048)
    p = prepare("Llama 2 7B", wl, space=SPACE, hardware=hardware, family="A100-80G")
    same(_labelled(p, None), plain_full(p))
    r = best_of_prepared(p)
    same(r, plain_best(p, r))


def test_labelled__results_do_not_share_cached_coordinates():
    wl = simcore.Workload("decode", batch=8, s_kv=2048)
    a = simcore.evaluate("Llama 2 7B", wl, space=SPACE, family="A100-80G")
    a.tp.attrs["note"] = "mine"
    a.attrs["x"] = 1
    b = simcore.evaluate("Llama 2 7B", wl, space=SPACE, family="A100-80G")
    assert "note" not in b.tp.attrs and "x" not in b.attrs
    c = simcore.evaluate_best("Llama 2 7B", wl, space=SPACE, family="A100-80G")
    c.pe_hbm_gb.attrs["units"] = "TB"
    d = simcore.evaluate_best("Llama 2 7B", wl, space=SPACE, family="A100-80G")
    assert d.pe_hbm_gb.attrs["units"] == "GB"


@pytest.mark.parametrize("fused", [False, True])
@pytest.mark.parametrize("sweep", [{"batch": [1, 8, 64]}, {"batch": [1, 8], "s_kv": [512, 4096]},
                                   {"s_kv": [512, 2048]}])
@pytest.mark.parametrize("mode", ["decode", "prefill"])
def test_stack_points__identical_to_concat(fused, sweep, mode):
    from simcore.engine.evaluate import _concat_points, stack_points
    from simcore.engine.space import workload_points

    dims, wls = workload_points(simcore.Workload(mode), **sweep)
    preps = [prepare("Llama 2 7B", w, space=SPACE, family="A100-80G",
                     hardware={"bw_hbm_gbs": [1000, 2000]}) for w in wls]
    parts = [best_of_prepared(q) if fused else _labelled(q, None) for q in preps]
    same_ = () if fused else ("n_devices",)
    got = stack_points(parts, dims, same=same_)
    parts = [best_of_prepared(q) if fused else _labelled(q, None) for q in preps]
    same(got, _concat_points(parts, dims, same=same_))


def test_explore_dataset__every_variable_has_a_long_name_and_units():
    """Issue 36 item 9: the explore Dataset labels itself (``.plot()`` axes name what they
    show): every variable and coordinate has a long name, and units unless boolean."""
    from simcore.studies.codesign import joint_explore

    ds = joint_explore("Llama 3.1 8B", s_kv=1024, depth="two_stage",
                       with_sensitivity=False).dataset
    for name in map(str, ds.variables):
        assert ds[name].attrs.get("long_name"), name
        if ds[name].dtype != bool:
            assert "units" in ds[name].attrs, name


@pytest.mark.parametrize("chunks", [None, 1])
def test_evaluate_dataset__every_variable_has_a_long_name_and_units(chunks):
    """Issue 36 item 9: the full tensor of ``evaluate`` (in memory and lazy) labels its
    layout coordinates (tp, cp, ..., placements) as well as its outputs and knobs."""
    ds = simcore.evaluate("Llama 3.1 8B", simcore.Workload("decode"), batch=[1, 8],
                          s_kv=1024, space=SPACE, chunks=chunks)
    for name in map(str, ds.variables):
        assert ds[name].attrs.get("long_name"), name
        if ds[name].dtype != bool:
            assert "units" in ds[name].attrs, name
    assert ds.tp.attrs["long_name"] == "tensor-parallel degree"
