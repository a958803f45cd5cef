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


def test_save_dataset__failed_write_leaves_old_file_and_no_temp(tmp_path, monkeypatch):
    target = save_dataset(_ds(), tmp_path / "r.nc")
    before = target.read_bytes()

    def disk_full(self, path, **kw):
        open(path, "wb").write(b"partial")
        raise OSError("No space left on device")

    monkeypatch.setattr(xr.Dataset, "to_netcdf", disk_full)
    with pytest.raises(OSError, match="No space left"):
        save_dataset(_ds(), target)
    assert target.read_bytes() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["r.nc"]
