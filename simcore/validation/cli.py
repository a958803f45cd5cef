"""``simcore validate``: predicted vs measured for every public measurement.

Prints one row per point (id, kind, model, hardware, layout, measured, predicted, error,
source) and the mean absolute error; exits 1 when the mean exceeds
:data:`~simcore.validation.MEAN_ERROR_THRESHOLD` or any point exceeds
:data:`~simcore.validation.POINT_ERROR_THRESHOLD`. Bad options print one line, exit 2.
"""

from __future__ import annotations

import argparse
from dataclasses import fields, replace
from typing import Any

from ..specs import Efficiency

__all__ = ["add_parsers", "cmd_validate"]

_FACTORS = tuple(f.name for f in fields(Efficiency))


def _factor(text: str) -> tuple[str, float]:
    name, sep, value = text.partition("=")
    if not sep or name not in _FACTORS:
        raise argparse.ArgumentTypeError(
            f"--efficiency takes NAME=VALUE with NAME one of {', '.join(_FACTORS)}, got {text!r}"
        )
    try:
        v = float(value)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"--efficiency {name}: value must be a number in (0, 1], got {value!r}") from None
    if not 0.0 < v <= 1.0:
        raise argparse.ArgumentTypeError(
            f"--efficiency {name}: value must be in (0, 1], got {value!r}")
    return name, v


def add_parsers(sub: Any) -> None:
    """Register ``validate`` on the ``simcore`` sub-command parser."""
    from . import KINDS, MEAN_ERROR_THRESHOLD, POINT_ERROR_THRESHOLD

    p = sub.add_parser(
        "validate", help="compare predictions with published measurements",
        description="Predict every public measurement (Megatron-LM training, TensorRT-LLM / "
                    "lmdeploy / FasterTransformer inference) on its measured layout with the "
                    "fitted efficiency factors and print predicted vs measured. Exit code 1 "
                    f"when the mean |error| exceeds {MEAN_ERROR_THRESHOLD:.0%} or any point "
                    f"exceeds {POINT_ERROR_THRESHOLD:.0%}.")
    p.add_argument("--kind", choices=list(KINDS), action="append", default=None,
                   help="only this kind of measurement (repeatable; default all)")
    p.add_argument("--efficiency", type=_factor, action="append", default=[],
                   metavar="NAME=VALUE",
                   help="override a fitted factor (repeatable), e.g. compute=0.7; names: "
                        + ", ".join(_FACTORS))
    p.add_argument("--unmodelled", action="store_true",
                   help="also list the measurements the cost model does not cover (not "
                        "counted in the error)")
    p.set_defaults(func=cmd_validate)


def _fmt(v: float) -> str:
    return f"{v:.4g}"


def _table(rows: list[Any], refs: dict[str, str]) -> str:
    from ..report import table

    cols = [("id", "id"), ("kind", "kind"), ("model", "model"), ("hardware", "hardware"),
            ("layout", "layout"), ("measured", "measured"), ("predicted", "predicted"),
            ("unit", "unit"), ("error", "error"), ("ref", "source")]
    cells = [{"id": r.id, "kind": r.kind, "model": r.model, "hardware": r.hardware,
              "layout": r.layout, "measured": _fmt(r.measured), "predicted": _fmt(r.predicted),
              "unit": r.unit, "error": f"{100 * r.error:+.1f}%" + ("" if r.fits else " (no fit)"),
              "ref": refs[r.id]} for r in rows]
    return table(cells, cols)


def cmd_validate(args: argparse.Namespace) -> int:
    from . import (
        FITTED_EFFICIENCY,
        MEAN_ERROR_THRESHOLD,
        MEASUREMENTS,
        POINT_ERROR_THRESHOLD,
        UNMODELLED,
        max_abs_error,
        mean_abs_error,
        validate,
    )

    eff = replace(FITTED_EFFICIENCY, **dict(args.efficiency))
    rows = validate(efficiency=eff, kinds=args.kind)
    if not rows:  # pragma: no cover - every kind has points
        print("no measurements of the requested kinds")
        return 1
    refs = {m.id: m.ref for m in (*MEASUREMENTS, *UNMODELLED)}
    print(f"simcore vs {len(rows)} public measurements, efficiency "
          + ", ".join(f"{f}={getattr(eff, f):g}" for f in _FACTORS))
    print(_table(rows, refs))
    mean, worst = mean_abs_error(rows), max_abs_error(rows)
    by_kind: dict[str, list[Any]] = {}
    for r in rows:
        by_kind.setdefault(r.kind, []).append(r)
    parts = ", ".join(f"{k} {100 * mean_abs_error(v):.1f}% ({len(v)})" for k, v in by_kind.items())
    print(f"mean |error| {100 * mean:.1f}% over {len(rows)} points ({parts}); "
          f"max {100 * worst:.1f}%")
    if args.unmodelled and UNMODELLED:
        gaps = validate(UNMODELLED, efficiency=eff, kinds=args.kind)
        if gaps:
            print("\nnot covered by the cost model (not counted above):")
            print(_table(gaps, refs))
            for m in UNMODELLED:
                if m.id in {g.id for g in gaps}:
                    print(f"  {m.id}: {m.notes}")
    print("\nsources:")
    used = {r.id for r in rows}
    seen: dict[str, str] = {}
    for m in (*MEASUREMENTS, *UNMODELLED):
        if (m.id in used or args.unmodelled) and m.ref not in seen:
            seen[m.ref] = m.source
    for ref, src in seen.items():
        print(f"  [{ref}] {src}")
    ok = mean <= MEAN_ERROR_THRESHOLD and worst <= POINT_ERROR_THRESHOLD
    verdict = "PASS" if ok else "FAIL"
    print(f"{verdict}: mean {100 * mean:.1f}% (limit {100 * MEAN_ERROR_THRESHOLD:.0f}%), "
          f"worst {100 * worst:.1f}% (limit {100 * POINT_ERROR_THRESHOLD:.0f}%)")
    return 0 if ok else 1
