import errno
import os

import numpy as np
import pytest
import xarray as xr

from simcore.io import load_dataset, save_dataset


def _ds():
    return xr.Dataset({"x": ("a", np.arange(3.0)), "s": ("a", np.array(["p", "q", "r"], dtype=object))},
                      attrs={"flag": True, "none": None})


@pytest.mark.parametrize("suffix", [".nc", ".zarr"])
def test_save_dataset__round_trip(tmp_path, suffix):
    path = save_dataset(_ds(), tmp_path / f"r{suffix}")
    back = load_dataset(path)
    assert back.x.values.tolist() == [0.0, 1.0, 2.0]
    assert back.s.values.tolist() == ["p", "q", "r"]
    assert back.attrs["flag"] == 1


def test_save_dataset__bad_suffix_and_missing_file(tmp_path):
    with pytest.raises(ValueError, match="end the name in .nc or .zarr"):
        save_dataset(_ds(), tmp_path / "r.csv")
    with pytest.raises(FileNotFoundError, match="no results"):
        load_dataset(tmp_path / "nope.nc")


def _disk_full(*args, **kw):
    raise OSError(errno.ENOSPC, "No space left on device")


@pytest.mark.parametrize("suffix", [".nc", ".zarr"])
def test_save_dataset__failed_write_leaves_old_file_and_no_temp(tmp_path, monkeypatch, suffix):
    target = save_dataset(_ds(), tmp_path / f"r{suffix}")
    before = load_dataset(target)
    if suffix == ".nc":
        monkeypatch.setattr(os, "fsync", _disk_full)
    else:
        monkeypatch.setattr(xr.Dataset, "to_zarr", _disk_full)
    with pytest.raises(OSError, match="No space left"):
        save_dataset(_ds().assign(x=("a", np.ones(3))), target)
    monkeypatch.undo()
    xr.testing.assert_identical(load_dataset(target), before)
    assert sorted(p.name for p in tmp_path.iterdir()) == [f"r{suffix}"]


@pytest.mark.parametrize("suffix", [".nc", ".zarr"])
def test_save_dataset__overwrite_replaces_old(tmp_path, suffix):
    target = save_dataset(_ds(), tmp_path / f"r{suffix}")
    save_dataset(_ds().assign(x=("a", np.ones(3))), target)
    assert load_dataset(target).x.values.tolist() == [1.0, 1.0, 1.0]
    assert sorted(p.name for p in tmp_path.iterdir()) == [f"r{suffix}"]


def test_load_dataset__truncated_file_is_one_clear_error(tmp_path):
    from simcore.errors import SimcoreInputError

    target = save_dataset(_ds(), tmp_path / "r.nc")
    target.write_bytes(target.read_bytes()[:100])
    with pytest.raises(SimcoreInputError, match="cannot read"):
        load_dataset(target)
