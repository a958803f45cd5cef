"""Tuning values in one place: ``simcore.set_options`` (as xarray and flox do).

Examples
--------
>>> import simcore
>>> simcore.get_options()["chunk_points"]
4000000
>>> with simcore.set_options(chunk_points=1_000_000):
...     simcore.get_options()["chunk_points"]
1000000
>>> simcore.get_options()["chunk_points"]
4000000
"""

from __future__ import annotations

import numbers
from typing import Any

import numpy as np

from .errors import SimcoreInputError

__all__ = ["OPTIONS", "get_options", "set_options"]

#: Option → (default, description). Each value is a positive integer, or a bool where the
#: default is one.
_DECLARED: dict[str, tuple[int | bool, str]] = {
    "chunk_points": (4_000_000, "target (hardware × layout) points per chunk of a chunked "
                                "reduction (counting the valid layouts it visits) or a "
                                "lazily evaluated tensor (counting every layout)"),
    "auto_chunk_points": (20_000_000, "above this many points `evaluate` returns a "
                                      "dask-chunked (lazy) Dataset"),
    "dask_chunks_per_worker": (4, "hardware chunks per dask worker in a distributed sweep"),
    "serial_below_points": (262_144, "kernel calls over fewer (hardware × layout) points, or "
                                     "over a single hardware row, run on one thread"),
    "prune_dominated": (True, "the fused best-layout sweep skips layouts that an earlier "
                              "layout beats or ties at every hardware point (exact: same "
                              "winners, values and counts)"),
    "prune_min_points": (10_000_000, "prune only sweeps of at least this many (hardware × "
                                     "valid layout) points: finding the dominated layouts "
                                     "costs tens of ms, more than a small sweep"),
}

OPTIONS: dict[str, Any] = {k: v for k, (v, _) in _DECLARED.items()}


def get_options() -> dict[str, Any]:
    """A copy of the current options."""
    return dict(OPTIONS)


def _check(name: str, value: Any) -> int | bool:
    if name not in _DECLARED:
        raise SimcoreInputError(f"unknown simcore option {name!r}; known: {', '.join(_DECLARED)}")
    if isinstance(_DECLARED[name][0], bool):
        if not isinstance(value, bool | np.bool_):
            raise SimcoreInputError(f"option {name} must be True or False "
                                    f"({_DECLARED[name][1]}), got {value!r}")
        return bool(value)
    if isinstance(value, bool | np.bool_) or not isinstance(value, numbers.Integral):
        raise SimcoreInputError(f"option {name} must be a positive integer "
                                f"({_DECLARED[name][1]}), got {value!r} "
                                f"({type(value).__name__})")
    if int(value) < 1:
        raise SimcoreInputError(f"option {name} must be >= 1 ({_DECLARED[name][1]}), "
                                f"got {int(value)}")
    return int(value)


class set_options:  # noqa: N801 - used like a function, as xarray.set_options
    """Set options globally, or for a ``with`` block only.

    Parameters
    ----------
    chunk_points : int
        Target points per chunk (default 4,000,000).
    auto_chunk_points : int
        Above this many points ``evaluate`` returns a lazy dask-backed Dataset
        (default 20,000,000).
    dask_chunks_per_worker : int
        Hardware chunks per worker in a distributed sweep (default 4).
    serial_below_points : int
        Kernel calls over fewer points (or one hardware row) run single-threaded: thread
        start-up costs more than it saves there (default 262,144).
    prune_dominated : bool
        The fused best-layout sweep skips layouts an earlier layout beats or ties at
        every hardware point of the sweep; the result is identical (default True).
    prune_min_points : int
        ... but only in sweeps of at least this many (hardware × valid layout) points
        (default 10,000,000): finding the dominated layouts costs tens of milliseconds,
        more than a small sweep takes (an explicit ``prune=True`` ignores it).
    """

    def __init__(self, **kwargs: int | bool) -> None:
        checked = {k: _check(k, v) for k, v in kwargs.items()}
        self._old = dict(OPTIONS)
        OPTIONS.update(checked)

    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc: object) -> None:
        OPTIONS.clear()
        OPTIONS.update(self._old)
