"""The range checks every spec runs once at construction (models, workloads, hardware).

Each numeric field of a spec has a declared :class:`Range`; :func:`validate_table` checks
a spec against its table and stores the value as a Python ``int``/``float``. A value
outside its range, of the wrong type, non-finite or non-integral where an integer is
needed raises :class:`~simcore.errors.SpecError` naming the field, its range and unit,
and the value received. Integral numpy scalars and integral floats are accepted as
integers; booleans are never numbers. :mod:`simcore.hardware` uses these too (it may
import the model layer; the model layer never imports it).

:func:`closest_names` is the one "did you mean" rule of an unknown name (a model, a
hardware family): exact up to case first, then a prefix (``H100`` -> ``H100-SXM``), then
:mod:`difflib` similarity, also on the part after an ``org/``.
"""

from __future__ import annotations

import difflib
import math
import numbers
from collections.abc import Iterable, Mapping
from typing import Any, NamedTuple

from ..errors import SpecError

__all__ = ["Range", "bound", "checked", "choice", "closest_names", "did_you_mean", "flag",
           "range_error", "show", "validate_table"]


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
    kind = type(value)
    if kind is int or kind is float:  # the usual types, without the ABC instance checks
        as_float = float(value)
        if not math.isfinite(as_float):
            raise range_error(owner, name, value, rng)
        if not rng.integer:
            out: int | float = as_float
        elif kind is int:
            out = value
        elif as_float.is_integer():
            out = int(as_float)
        else:
            raise range_error(owner, name, value, rng)
        if not rng.lo <= out <= rng.hi:
            raise range_error(owner, name, value, rng)
        return out
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise range_error(owner, name, value, rng)
    as_float = float(value)
    if not math.isfinite(as_float):
        raise range_error(owner, name, value, rng)
    if rng.integer:
        if isinstance(value, numbers.Integral):
            out = int(value)
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




#: A suggestion scores at least this (difflib ratio, 0..1) to be offered at all.
SUGGEST_CUTOFF = 0.5
#: Scores of an exact match up to case, and the floor of a prefix match (a truncated name).
_EXACT, _PREFIX = 3.0, 1.0


def _ranked(wanted: str, names: Mapping[str, str] | Iterable[str]) -> list[tuple[str, float]]:
    """(canonical name, score), best first; see :func:`closest_names`."""
    pairs = names.items() if isinstance(names, Mapping) else ((x, x) for x in names)
    want = wanted.strip().lower()
    want_bare = want.split("/", 1)[-1]
    scored: dict[str, float] = {}
    for spelling, canonical in pairs:
        key = spelling.lower()
        bare = key.split("/", 1)[-1]
        score = max(difflib.SequenceMatcher(None, want, key).ratio(),
                    difflib.SequenceMatcher(None, want_bare, bare).ratio())
        if key == want:
            score = _EXACT
        elif want_bare and (bare.startswith(want_bare) or key.startswith(want)):
            score = max(score, _PREFIX + len(want_bare) / len(bare))  # a truncated name
        scored[canonical] = max(score, scored.get(canonical, 0.0))
    return sorted(scored.items(), key=lambda kv: (-kv[1], kv[0]))


def closest_names(wanted: str, names: Mapping[str, str] | Iterable[str], *, n: int = 3,
                  cutoff: float = SUGGEST_CUTOFF) -> list[str]:
    """The known names closest to an unknown one, best first (at most ``n``; none when
    nothing scores ``cutoff``).

    ``names`` are the known names, or a mapping of every accepted spelling (aliases,
    file stems) to its canonical name, which is what is returned. Case is ignored. A
    known name that starts with ``wanted`` (a truncated name: ``H100`` for
    ``H100-SXM``) ranks above any mere similarity; similarity is :mod:`difflib`'s ratio,
    on the whole name and on the part after ``org/``.

    Examples
    --------
    >>> closest_names("H100", ["SiP", "A100-80G", "H100-SXM", "H200"])
    ['H100-SXM', 'H200', 'A100-80G']
    >>> closest_names("TPU", ["SiP", "H100-SXM"])
    []
    """
    return [k for k, score in _ranked(wanted, names) if score >= cutoff][:n]


def did_you_mean(wanted: str, names: Mapping[str, str] | Iterable[str]) -> str:
    """``"did you mean 'X'?"`` for the closest known name (every known name that starts
    with ``wanted``, when several do), or ``""`` when none is close.

    Examples
    --------
    >>> did_you_mean("h100", ["SiP", "A100-80G", "A100-40G", "H100-SXM", "H200"])
    "did you mean 'H100-SXM'?"
    >>> did_you_mean("A100", ["SiP", "A100-80G", "A100-40G", "H100-SXM", "H200"])
    "did you mean 'A100-40G' or 'A100-80G'?"
    >>> did_you_mean("TPU", ["SiP", "H100-SXM"])
    ''
    """
    ranked = [(k, s) for k, s in _ranked(wanted, names) if s >= SUGGEST_CUTOFF]
    if not ranked:
        return ""
    best = [k for k, s in ranked if s >= _PREFIX] or [ranked[0][0]]
    return f"did you mean {' or '.join(repr(k) for k in best[:3])}?"
