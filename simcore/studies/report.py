"""Plain-text tables for the CLI (no numerics); columns are declared in
:mod:`simcore.cli.output`."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any


def fmt_ns(ns: float | None) -> str:
    if ns is None or ns != ns:
        return "-"
    for unit, scale in (("s", 1e9), ("ms", 1e6), ("us", 1e3)):
        if abs(ns) >= scale:
            return f"{ns / scale:.3g} {unit}"
    return f"{ns:.3g} ns"


def fmt_num(x: Any) -> str:
    if x is None:
        return "-"
    if isinstance(x, float):
        if x != x:
            return "-"
        ax = abs(x)
        if ax >= 1e12:
            return f"{x / 1e12:.3g}T"
        if ax >= 1e9:
            return f"{x / 1e9:.3g}G"
        if ax >= 1e6:
            return f"{x / 1e6:.3g}M"
        if ax >= 1e4:
            return f"{x / 1e3:.3g}k"
        return f"{x:.4g}"
    return str(x)


def table(rows: Sequence[dict[str, Any]], columns: Sequence[tuple[str, str]]) -> str:
    """Render rows as an aligned text table; ``columns`` = (key, header)."""
    cells = [[h for _, h in columns]]
    for r in rows:
        out = []
        for key, _ in columns:
            v = r.get(key)
            if isinstance(v, str):  # already formatted by the caller
                out.append(v)
            else:
                out.append(fmt_ns(v) if key.endswith("_ns") else fmt_num(v))
        cells.append(out)
    widths = [max(len(c[i]) for c in cells) for i in range(len(columns))]
    lines = ["  ".join(c.rjust(w) for c, w in zip(row, widths, strict=True)) for row in cells]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)

