"""Saving and loading result Datasets (netCDF via h5netcdf, or zarr), atomically."""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

import numpy as np
import xarray as xr

__all__ = ["save_dataset", "load_dataset", "storable"]

_FORMATS = {".nc": "netcdf", ".nc4": "netcdf", ".h5": "netcdf", ".zarr": "zarr"}


def storable(ds: xr.Dataset) -> xr.Dataset:
    """A copy netCDF/zarr can hold: object strings → unicode, bool attrs → int."""
    out = ds.copy()
    for name in list(out.variables):
        var = out[name]
        if var.dtype == object:
            out[name] = var.astype(str)
    for name in list(out.coords):
        if out[name].dtype == object:
            out = out.assign_coords({name: out[name].astype(str)})

    def clean(attrs: dict[str, Any]) -> dict[str, Any]:
        res = {}
        for k, v in attrs.items():
            if isinstance(v, bool | np.bool_):
                v = int(v)
            elif v is None:
                v = ""
            res[k] = v
        return res

    out.attrs = clean(out.attrs)
    for name in out.variables:
        out[name].attrs = clean(out[name].attrs)
    return out


def _format(path: Path) -> str:
    fmt = _FORMATS.get(path.suffix.lower())
    if fmt is None:
        raise ValueError(f"cannot tell the format of {str(path)!r}; end the name in .nc or .zarr")
    return fmt


def save_dataset(ds: xr.Dataset, path: str | os.PathLike[str]) -> Path:
    """Write ``ds`` to ``path`` (.nc or .zarr); the file appears only when complete."""
    path = Path(path)
    fmt = _format(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    data = storable(ds)
    tmp = Path(tempfile.mkdtemp(prefix=f".{path.name}.", dir=path.parent)) / path.name
    try:
        if fmt == "netcdf":
            data.to_netcdf(tmp, engine="h5netcdf")
        else:
            data.to_zarr(tmp, mode="w", consolidated=False, zarr_format=2)
        if path.exists():
            shutil.rmtree(path) if path.is_dir() else path.unlink()
        os.replace(tmp, path)
    finally:
        shutil.rmtree(tmp.parent, ignore_errors=True)
    return path


def load_dataset(path: str | os.PathLike[str]) -> xr.Dataset:
    path = Path(path)
    if not path.exists():
        raise FileNotFoundError(f"no results at {str(path)!r}")
    if _format(path) == "netcdf":
        return xr.load_dataset(path, engine="h5netcdf")
    return xr.open_zarr(path, consolidated=False).load()
