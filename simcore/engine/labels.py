"""Building the labelled results cheaply: coordinates built once, variables without checks.

``xr.Dataset(dict_of_tuples, coords=dict_of_arrays)`` re-derives what simcore already
knows on every call: it converts each array (object arrays go through pandas), builds a
pandas index per coordinate, aligns the variables and merges them; setting attrs through
``ds[name].attrs`` builds a DataArray per name. On a small result that is ~30 ms, most of
a call. Here:

* the indexed coordinates of a layout space or a hardware grid are an ``xr.Coordinates``
  built once (:func:`space_coords`, :func:`knob_coords`; the Dataset copies them, so the
  cached ones are never shared with a result);
* data variables are ``xr.Variable`` objects made directly from arrays simcore produced
  (C-contiguous numpy arrays of the declared dtype), with their attrs (``units``,
  ``long_name``) from the kernel schema (:func:`var_attrs`);
* :func:`dataset` puts them together without xarray's merge and alignment (the inputs
  agree by construction).

The result is identical to the plain construction (``xr.testing.assert_identical``, the
same variable, coordinate and dim order; tests check it).
"""

from __future__ import annotations

import functools
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import xarray as xr

from ..kernels import schema
from ..model.specs import HW_KNOBS
from .space import CHOICES, LAYOUT_DIM_ATTRS, Space

__all__ = ["coord_attrs", "dataset", "knob_coords", "layout_attrs", "space_coords", "var_attrs",
           "variable"]


@functools.cache
def _attrs(name: str, units: bool, long_name: bool) -> tuple[tuple[str, str], ...]:
    got = schema.field_attrs(name)
    out: list[tuple[str, str]] = []
    if units and got.get("units") and name not in ("fits", "valid"):
        out.append(("units", got["units"]))
    if long_name and got.get("long_name"):
        out += [("long_name", got["long_name"]), ("description", got["long_name"])]
    return tuple(out)


def var_attrs(name: str, *, units: bool = True, long_name: bool = True) -> dict[str, str]:
    """A fresh attrs dict for variable ``name`` from the kernel schema: ``units`` (not for
    the booleans ``fits`` / ``valid``), ``long_name`` and ``description`` (= long_name)."""
    return dict(_attrs(name, units, long_name))


def variable(dims: Sequence[str], data: np.ndarray, attrs: dict[str, Any] | None = None
             ) -> xr.Variable:
    """An ``xr.Variable`` over ``dims`` holding ``data`` as it is (no conversion: numeric
    or bool numpy arrays, or object arrays of Python str / int as simcore builds them)."""
    return xr.Variable(tuple(dims), data, attrs, fastpath=True)


#: which attrs a coordinate carries: none, ``units`` only, or ``units`` and ``long_name``
#: (from the kernel schema); ``"layout"``: a layout dim's (:data:`LAYOUT_DIM_ATTRS`)
_ATTRS = {"none": (False, False), "units": (True, False), "all": (True, True)}


def coord_attrs(name: str, mode: str) -> dict[str, str]:
    """A coordinate's attrs: a layout dim's units and long name (``mode="layout"``), or
    the kernel schema's per :data:`_ATTRS` (a hardware knob)."""
    if mode == "layout":
        return layout_attrs(name)
    return var_attrs(name, units=_ATTRS[mode][0], long_name=_ATTRS[mode][1])


def layout_attrs(name: str) -> dict[str, str]:
    """A layout dim's ``units``, ``long_name`` and ``description`` (= long_name); ``{}``
    for any other name."""
    got = LAYOUT_DIM_ATTRS.get(name)
    return {} if got is None else {**got, "description": got["long_name"]}


@functools.lru_cache(maxsize=64)
def _coords(key: tuple[tuple[str, str, tuple[Any, ...], str], ...]) -> xr.Coordinates:
    variables = {name: xr.Variable(name, np.array(values, dtype=dtype), coord_attrs(name, mode))
                 for name, dtype, values, mode in key}
    return xr.Coordinates(variables)  # default (pandas) indexes, as xr.Dataset builds them


def _key(coords: Mapping[str, Any], mode: str) -> tuple[tuple[str, str, tuple[Any, ...], str], ...]:
    out = []
    for name, values in coords.items():
        arr = np.asarray(values)
        out.append((name, arr.dtype.str, tuple(arr.tolist()), mode))
    return tuple(out)


@functools.lru_cache(maxsize=64)
def _space_key(space: Space) -> tuple[tuple[str, str, tuple[Any, ...], str], ...]:
    return _key({d: np.asarray(v, dtype=object if d in CHOICES else np.int64)
                 for d, v in space.coords}, "layout")


def space_coords(space: Space, knobs: Mapping[str, np.ndarray] | None = None, *,
                 knob_attrs: str = "all") -> xr.Coordinates:
    """Indexed coordinates, cached: the layout dims of ``space`` (object dtype for the
    categorical dims, int64 for the sizes; units and long names from
    :data:`~simcore.engine.space.LAYOUT_DIM_ATTRS`), then the hardware ``knobs`` if given
    (as they are, with ``units`` and ``long_name`` / ``description``: ``knob_attrs``
    ``"all"``, ``"units"`` or ``"none"``)."""
    key = _space_key(space)
    if knobs is not None:
        key = key + _key({k: knobs[k] for k in HW_KNOBS}, knob_attrs)
    return _coords(key)


def knob_coords(knobs: Mapping[str, np.ndarray], *, attrs: str = "all") -> xr.Coordinates:
    """The hardware knobs as indexed coordinates (``attrs`` as in :func:`space_coords`),
    cached per grid."""
    return _coords(_key({k: knobs[k] for k in HW_KNOBS}, attrs))


def dataset(data_vars: Mapping[str, xr.Variable], coords: xr.Coordinates,
            attrs: Mapping[str, Any]) -> xr.Dataset:
    """A Dataset of ready variables over cached coordinates.

    What ``xr.Dataset(data_vars, coords=coords, attrs=attrs)`` gives (variables: the data
    variables, then the coordinates; dims in order of first use), put together directly:
    the coordinate variables shallow copies (their attrs are the result's own), the index
    objects shared (xarray treats them as immutable and shares them between a Dataset and
    the ones derived from it), no merge or alignment (the inputs come from one prepared
    space: same dims, same sizes). A dim whose sizes disagree is a ``ValueError``; an
    xarray without ``Dataset._construct_direct`` gets the public constructor.
    """
    direct = getattr(xr.Dataset, "_construct_direct", None)
    if direct is None or set(data_vars) & set(coords.variables):
        return xr.Dataset(dict(data_vars), coords=coords, attrs=dict(attrs))
    variables: dict[Any, xr.Variable] = dict(data_vars)
    variables.update((k, v.copy(deep=False)) for k, v in coords.variables.items())
    dims: dict[Any, int] = {}
    for name, var in variables.items():
        for dim, size in zip(var.dims, var.shape, strict=True):
            if dims.setdefault(dim, size) != size:
                raise ValueError(f"conflicting sizes for dimension {dim!r}: {dims[dim]} and "
                                 f"{size} (variable {name!r})")
    return direct(variables, set(coords.variables), dims, dict(attrs), dict(coords.xindexes))
