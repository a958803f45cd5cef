"""Traffic for the request-level serving simulation: who arrives when, with how many
input and output tokens.

:func:`poisson` draws a Poisson process at a rate (every request ``isl`` input and ``osl``
output tokens); :func:`read_trace` reads a trace file, CSV with a header or JSON lines,
one request per row: ``arrival_s`` (seconds from the trace's start; optional), ``isl``
and ``osl`` (also spelled ``timestamp`` / ``input_tokens`` / ``prompt_tokens`` and
``output_tokens`` / ``completion_tokens``). A trace replays its own arrivals, rescaled to
``rate_rps`` if given; a trace without arrivals needs ``rate_rps`` and gets Poisson
arrivals. A bad row is one :class:`TrafficError` naming the file, the line and what to
write instead.
"""

from __future__ import annotations

import csv
import io
import json
import math
import os
from dataclasses import dataclass
from typing import Any

import numpy as np

from .model import ServingError

__all__ = ["MAX_REQUESTS", "Traffic", "TrafficError", "poisson", "read_trace"]

#: most requests one simulation takes (a rate x duration or a trace beyond this is refused)
MAX_REQUESTS = 1_000_000
#: most tokens of one request (input or output)
MAX_TOKENS = 10_000_000

_ARRIVAL = ("arrival_s", "arrival", "timestamp", "time_s")
_ISL = ("isl", "input_tokens", "prompt_tokens", "input_len", "prompt_len")
_OSL = ("osl", "output_tokens", "completion_tokens", "output_len")


class TrafficError(ServingError):
    """A bad rate, duration or trace file (the message says what would work)."""


@dataclass(frozen=True, eq=False)
class Traffic:
    """Requests to serve, sorted by arrival: ``arrival_s`` (float64 seconds), ``isl`` and
    ``osl`` (int64 tokens); ``duration_s`` the span they arrive over and ``source`` what
    they came from (for the header)."""

    arrival_s: np.ndarray
    isl: np.ndarray
    osl: np.ndarray
    duration_s: float
    source: str

    @property
    def n(self) -> int:
        return int(self.arrival_s.shape[0])

    @property
    def rate_rps(self) -> float:
        """Offered load: requests per second over the trace's span."""
        return self.n / self.duration_s

    def describe(self) -> str:
        return (f"{self.source}: {self.n} requests over {self.duration_s:.4g} s "
                f"({self.rate_rps:.4g} req/s), ISL mean {self.isl.mean():.0f} / max "
                f"{self.isl.max()}, OSL mean {self.osl.mean():.0f} / max {self.osl.max()}")


def _rate(rate_rps: Any) -> float:
    if isinstance(rate_rps, bool) or not isinstance(rate_rps, int | float | np.number) or not (
            math.isfinite(rate_rps) and rate_rps > 0):
        raise TrafficError(f"rate {rate_rps!r} (--rate): the request rate must be a number of "
                           "requests per second > 0, e.g. --rate 20")
    return float(rate_rps)


def _unit_arrivals(n_or_span: float, seed: int, *, count: bool) -> np.ndarray:
    """Arrivals of a rate-1 Poisson process: the first ``n`` (``count``) or those before
    ``n_or_span``. Drawn in blocks from one generator, so a longer span or a higher rate
    (:func:`poisson` divides by it) extends the same sequence: traces at two rates hold
    the same requests, compressed."""
    rng = np.random.default_rng(seed)
    out: list[np.ndarray] = []
    last, total = 0.0, 0
    while True:
        block = last + np.cumsum(rng.standard_exponential(4096))
        out.append(block)
        total += block.size
        last = float(block[-1])
        if (count and total >= n_or_span) or (not count and last > n_or_span):
            break
    arr = np.concatenate(out)
    return arr[:int(n_or_span)] if count else arr[arr < n_or_span]


def poisson(rate_rps: float, *, duration_s: float, isl: int, osl: int, seed: int = 0) -> Traffic:
    """Poisson arrivals at ``rate_rps`` over ``duration_s`` seconds, each request ``isl``
    input and ``osl`` output tokens.

    Examples
    --------
    >>> t = poisson(20, duration_s=60, isl=1000, osl=100, seed=1)
    >>> 1000 < t.n < 1400, t.duration_s
    (True, 60.0)
    """
    rate = _rate(rate_rps)
    if isinstance(duration_s, bool) or not isinstance(duration_s, int | float) or not (
            math.isfinite(duration_s) and duration_s > 0):
        raise TrafficError(f"duration_s {duration_s!r} (--duration-s): pass the seconds of "
                           "traffic to simulate, a number > 0")
    if rate * duration_s > MAX_REQUESTS:
        raise TrafficError(f"rate {rate:g} x duration {duration_s:g} s is {rate * duration_s:,.0f} "
                           f"requests; simulate at most {MAX_REQUESTS:,}: shorten --duration-s or lower "
                           "--rate")
    for name, v in (("isl", isl), ("osl", osl)):
        if isinstance(v, bool) or not isinstance(v, int | np.integer) or not 1 <= v <= MAX_TOKENS:
            raise TrafficError(f"{name} must be an integer in [1, {MAX_TOKENS:,}], got {v!r}")
    arrival = _unit_arrivals(rate * duration_s, seed, count=False) / rate
    if arrival.size == 0:
        raise TrafficError(f"rate {rate:g} req/s over {duration_s:g} s brings no request; "
                           "raise --rate or --duration-s")
    n = arrival.size
    return Traffic(arrival_s=arrival, isl=np.full(n, int(isl), np.int64),
                   osl=np.full(n, int(osl), np.int64), duration_s=float(duration_s),
                   source=f"Poisson arrivals at {rate:g} req/s (seed {seed})")


# --- trace files ----------------------------------------------------------------------------

def _rows(text: str, name: str) -> list[tuple[int, dict[str, Any]]]:
    """(line number, row) of a JSON-lines or CSV text."""
    first = next((ln.strip() for ln in text.splitlines() if ln.strip()), "")
    if not first:
        raise TrafficError(f"trace {name!r} is empty; write one request per row: arrival_s, "
                           "isl, osl")
    if first.startswith("{"):
        rows = []
        for k, line in enumerate(text.splitlines(), 1):
            if not line.strip():
                continue
            try:
                obj = json.loads(line)
            except json.JSONDecodeError as exc:
                raise TrafficError(f"trace {name!r} line {k}: not a JSON object ({exc.msg}); "
                                   "write one object per line, e.g. {\"arrival_s\": 0.5, "
                                   "\"isl\": 812, \"osl\": 230}") from None
            if not isinstance(obj, dict):
                raise TrafficError(f"trace {name!r} line {k}: expected a JSON object, got "
                                   f"{type(obj).__name__}")
            rows.append((k, obj))
        return rows
    reader = csv.DictReader(io.StringIO(text))
    if not reader.fieldnames:
        raise TrafficError(f"trace {name!r}: no CSV header; the first line names the "
                           "columns, e.g. arrival_s,isl,osl")
    return [(reader.line_num, row) for row in reader]


def _pick(row: dict[str, Any], names: tuple[str, ...]) -> Any:
    for k in names:
        if k in row and row[k] not in (None, ""):
            return row[k]
    return None


def _tokens(value: Any, what: str, where: str) -> int:
    try:
        f = float(value)
    except (TypeError, ValueError):
        f = math.nan
    if isinstance(value, bool) or not (math.isfinite(f) and f == int(f) and 1 <= f <= MAX_TOKENS):
        raise TrafficError(f"{where}: {what} {value!r} is not a whole number of tokens in "
                           f"[1, {MAX_TOKENS:,}]")
    return int(f)


def read_trace(path: str | os.PathLike[str], *, rate_rps: float | None = None,
               seed: int = 0) -> Traffic:
    """The requests of a trace file (CSV with a header, or JSON lines), sorted by arrival.

    Arrivals (``arrival_s``, seconds >= 0) are replayed as written, scaled to
    ``rate_rps`` when given; a trace with no arrival column needs ``rate_rps`` and gets
    Poisson arrivals (``seed``). Raises :class:`TrafficError` for a missing or unreadable
    file and for the first bad row (file and line named).
    """
    from ...io import read_input_bytes

    name = os.fspath(path)
    try:
        raw = read_input_bytes(name)
    except FileNotFoundError:
        raise TrafficError(f"trace {name!r} (--trace): no such file; pass a CSV or JSON-lines "
                           "file of arrival_s, isl, osl rows") from None
    except OSError as exc:
        raise TrafficError(f"trace {name!r} (--trace): cannot read it ({exc.strerror or exc})"
                           ) from None
    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError:
        raise TrafficError(f"trace {name!r} is not UTF-8 text; pass a CSV or JSON-lines "
                           "file") from None
    rows = _rows(text, name)
    if not rows:
        raise TrafficError(f"trace {name!r} has a header but no rows")
    if len(rows) > MAX_REQUESTS:
        raise TrafficError(f"trace {name!r} has {len(rows):,} rows; at most {MAX_REQUESTS:,}")
    has_arrival = _pick(rows[0][1], _ARRIVAL) is not None
    arr, isl, osl = [], [], []
    for k, row in rows:
        where = f"trace {name!r} line {k}"
        a = _pick(row, _ARRIVAL)
        if has_arrival:
            try:
                t = float(a)
            except (TypeError, ValueError):
                t = math.nan
            if isinstance(a, bool) or not (math.isfinite(t) and t >= 0):
                raise TrafficError(f"{where}: arrival_s {a!r} is not a time in seconds >= 0 "
                                   "(every row needs one when the first has one)")
            arr.append(t)
        i, o = _pick(row, _ISL), _pick(row, _OSL)
        if i is None or o is None:
            raise TrafficError(f"{where}: needs isl and osl (input and output tokens), got "
                               f"keys {sorted(row)}")
        isl.append(_tokens(i, "isl", where))
        osl.append(_tokens(o, "osl", where))
    n = len(rows)
    isl_a, osl_a = np.array(isl, np.int64), np.array(osl, np.int64)
    if has_arrival:
        a_s = np.array(arr)
        order = np.argsort(a_s, kind="stable")
        a_s, isl_a, osl_a = a_s[order] - a_s.min(), isl_a[order], osl_a[order]
        span = float(a_s[-1]) * n / (n - 1) if n > 1 and a_s[-1] > 0 else 0.0
        if rate_rps is None:
            if span <= 0:
                raise TrafficError(f"trace {name!r}: every request arrives at once; pass "
                                   "--rate to spread them")
            return Traffic(arrival_s=a_s, isl=isl_a, osl=osl_a, duration_s=span,
                           source=f"trace {os.path.basename(name)} replayed")
        rate = _rate(rate_rps)
        if span <= 0:
            a_s = _unit_arrivals(n, seed, count=True) / rate
            source = f"trace {os.path.basename(name)} at {rate:g} req/s (Poisson, seed {seed})"
        else:
            a_s = a_s * (n / span) / rate
            source = f"trace {os.path.basename(name)} rescaled to {rate:g} req/s"
        return Traffic(arrival_s=a_s, isl=isl_a, osl=osl_a, duration_s=n / rate, source=source)
    if rate_rps is None:
        raise TrafficError(f"trace {name!r} has no arrival column ({', '.join(_ARRIVAL)}); "
                           "pass --rate for Poisson arrivals")
    rate = _rate(rate_rps)
    a_s = _unit_arrivals(n, seed, count=True) / rate
    return Traffic(arrival_s=a_s, isl=isl_a, osl=osl_a, duration_s=n / rate,
                   source=f"trace {os.path.basename(name)} at {rate:g} req/s (Poisson, "
                          f"seed {seed})")
