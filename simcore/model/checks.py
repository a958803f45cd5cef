"""The range checks every spec runs once at construction (models, workloads, hardware).

Each numeric field of a spec has a declared :class:`Range`; :func:`validate_table` checks
a spec against its table and stores the value as a Python ``int``/``float``. A value
outside its range, of the wrong type, non-finite or non-integral where an integer is
needed raises :class:`~simcore.errors.SpecError` naming the field, its range and unit,
and the value received. Integral numpy scalars and integral floats are accepted as
integers; booleans are never numbers. :mod:`simcore.hardware` uses these too (it may
import the model layer; the model layer never imports it).
"""

from __future__ import annotations

import math
import numbers
from typing import Any, NamedTuple

from ..errors import SpecError

__all__ = ["Range", "bound", "checked", "choice", "flag", "range_error", "show", "validate_table"]


class Range(NamedTuple):
    """Declared range of one numeric spec field."""

    lo: float
    hi: float
    unit: str
    integer: bool = True


def show(value: Any) -> str:
    """A value as a user would have typed it (numpy scalars without their wrapper)."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        return repr(value)
    if isinstance(value, numbers.Integral):
        return str(int(value))
    return repr(float(value))


def bound(value: float) -> str:
    return str(int(value)) if float(value).is_integer() else repr(float(value))


def checked(owner: str, name: str, value: Any, rng: Range) -> int | float:
    """``value`` as a Python int/float inside ``rng``, or :class:`SpecError`."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise range_error(owner, name, value, rng)
    as_float = float(value)
    if not math.isfinite(as_float):
        raise range_error(owner, name, value, rng)
    if rng.integer:
        if isinstance(value, numbers.Integral):
            out: int | float = int(value)
        elif as_float.is_integer():
            out = int(as_float)
        else:
            raise range_error(owner, name, value, rng)
    else:
        out = as_float
    if not rng.lo <= out <= rng.hi:
        raise range_error(owner, name, value, rng)
    return out


def range_error(owner: str, name: str, value: Any, rng: Range) -> SpecError:
    """The :class:`SpecError` of a value outside its declared range (built only then)."""
    kind = "an integer" if rng.integer else "a number"
    unit = f" {rng.unit}" if rng.unit else ""
    return SpecError(f"{owner}.{name} must be {kind} in [{bound(rng.lo)}, {bound(rng.hi)}]"
                     f"{unit}, got {show(value)}")


def validate_table(spec: Any, table: dict[str, Range]) -> None:
    owner = type(spec).__name__
    for name, rng in table.items():
        object.__setattr__(spec, name, checked(owner, name, getattr(spec, name), rng))


def flag(owner: str, name: str, value: Any) -> bool:
    """A boolean field: ``True``/``False`` (numpy booleans accepted), nothing else."""
    if type(value).__name__ in ("bool", "bool_") and value in (True, False):
        return bool(value)
    raise SpecError(f"{owner}.{name} must be True or False, got {show(value)}")


def choice(owner: str, name: str, value: Any, allowed: tuple[Any, ...], what: str) -> None:
    if not isinstance(value, str) or value not in allowed:
        raise SpecError(f"{owner}.{name}={value!r} is unknown; pass {what}")

