"""The one row writer of the ``simcore`` commands: ``--format table|json|csv``, ``--out``.

A command declares its rows once as :class:`Column` objects and hands them, with row
dicts keyed by the engine's names (``latency_ns``, ``mem_bytes``), to :func:`emit_rows`:

* ``table``: the aligned text of :func:`simcore.studies.report.table` (times and large numbers
  made readable);
* ``json``: an array of row objects whose keys carry units (``latency_ms``, ``mem_gb``,
  ``throughput_tok_s``); NaN and missing values are ``null``;
* ``csv``: the same keys as the JSON, one header line, missing values empty.

``--out FILE`` is written atomically (a temporary file in the same folder, fsync,
``os.replace``): a failed write leaves an existing FILE as it was.
"""

from __future__ import annotations

import argparse
import csv
import io
import json
import math
import os
import sys
import tempfile
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from ..errors import SimcoreInputError

__all__ = ["ALONE_PARTS", "Column", "EP_COLUMN", "LAYOUT_COLUMNS", "METRIC_COLUMNS", "bound_of", "emit_rows", "for_script", "note_stream",
           "refuse_shared_paths", "render_rows", "write_atomic"]

# unit suffix -> (dimension, size in the dimension's base unit)
_UNITS: dict[str, tuple[str, float]] = {
    "ns": ("time", 1e-9), "us": ("time", 1e-6), "ms": ("time", 1e-3),
    "bytes": ("bytes", 1.0), "gb": ("bytes", 1e9),
    "pct": ("ratio", 1e-2),
}


def _scale(key: str, name: str) -> float:
    if name == key:
        return 1.0
    dst = _UNITS.get(name.rsplit("_", 1)[-1])
    # a key without a unit suffix (``error``, ``rel_speedup``) is a plain ratio
    src = _UNITS.get(key.rsplit("_", 1)[-1], ("ratio", 1.0))
    if dst is None or src[0] != dst[0]:
        raise ValueError(f"Column {key!r} -> {name!r}: no unit conversion between them; "
                         f"end both names in one of {', '.join(_UNITS)} of one dimension")
    return src[1] / dst[1]


@dataclass(frozen=True)
class Column:
    """One output column.

    Parameters
    ----------
    key : str
        Key in the row dicts (the engine's name, e.g. ``latency_ns``).
    header : str
        Table header.
    name : str, optional
        JSON/CSV key, with its unit (``latency_ms``); default ``key``. The value is
        converted from ``key``'s unit suffix to ``name``'s (ns/us/ms, bytes/gb, a ratio
        to pct).
    display : callable, optional
        ``display(row) -> str``: the table cell; default :func:`simcore.studies.report.table`'s
        formatting of the raw value.
    in_table : bool or callable
        Whether the table shows it (JSON/CSV always do); a callable ``in_table(rows) ->
        bool`` decides from the rows (:data:`EP_COLUMN`: only when some row has ep > 1).

    Examples
    --------
    >>> Column("latency_ns", "latency", "latency_ms").scale
    1e-06
    """

    key: str
    header: str = ""
    name: str = ""
    display: Callable[[Mapping[str, Any]], str] | None = None
    in_table: bool | Callable[[Sequence[Mapping[str, Any]]], bool] = True
    scale: float = field(init=False, repr=False)

    def __post_init__(self) -> None:
        if not self.header:
            object.__setattr__(self, "header", self.key)
        if not self.name:
            object.__setattr__(self, "name", self.key)
        object.__setattr__(self, "scale", _scale(self.key, self.name))


def _if_group(key: str, group: str) -> Callable[[Mapping[str, Any]], str]:
    """Table cell of a layout field that means nothing for a one-member group: "-"."""
    def cell(row: Mapping[str, Any]) -> str:
        size = row.get(group)
        return "-" if isinstance(size, int | float) and size <= 1 else str(row.get(key))
    return cell


def _any_above_one(key: str) -> Callable[[Sequence[Mapping[str, Any]]], bool]:
    """Whether some row's ``key`` is above 1 (a column worth a table's width)."""
    def shown(rows: Sequence[Mapping[str, Any]]) -> bool:
        return any(isinstance(v := r.get(key), int | float) and v > 1 for r in rows)
    return shown


#: Expert parallelism: in JSON/CSV always, in a table when some row has ep > 1.
EP_COLUMN = Column("ep", "EP", in_table=_any_above_one("ep"))

#: The layout columns, leading with the group sizes (TP, CP, PP, DP, EP).
LAYOUT_COLUMNS = [
    Column("tp", "TP"), Column("cp", "CP"), Column("pp", "PP"), Column("dp", "DP"), EP_COLUMN,
    Column("kv_shard_mode", "kv_shard"), Column("ffn_shard_scope", "ffn_scope"),
    Column("tp_placement", "tp_pl", display=_if_group("tp_placement", "tp")),
    Column("cp_placement", "cp_pl", display=_if_group("cp_placement", "cp")),
    Column("cp_ring_variant", "ring", display=_if_group("cp_ring_variant", "cp")),
]
METRIC_COLUMNS = [
    Column("latency_ns", "latency", "latency_ms"), Column("throughput_tok_s", "tok/s"),
    Column("n_devices", "devices"), Column("mem_bytes", "mem/dev B", "mem_gb"),
    # each part alone (the step overlaps them) and the largest; JSON/CSV also carry the
    # roofline attribution (each op's time booked to its longer side) as compute_ms/memory_ms
    Column("compute_alone_ns", "compute", "compute_alone_ms"),
    Column("memory_alone_ns", "memory", "memory_alone_ms"),
    Column("comm_ns", "comm", "comm_ms"), Column("overhead_ns", "overhead", "overhead_ms"),
    Column("bound", "bound"),
    Column("compute_ns", name="compute_ms", in_table=False),
    Column("memory_ns", name="memory_ms", in_table=False),
]

#: The parts a row's ``bound`` picks from: each alone (:func:`bound_of`).
ALONE_PARTS = {"compute": "compute_alone_ns", "memory": "memory_alone_ns", "comm": "comm_ns",
               "overhead": "overhead_ns"}


def bound_of(row: Mapping[str, Any]) -> str:
    """The part that bounds a row's step: the largest of compute, memory, communication
    and overhead, each the time it alone would take (:data:`ALONE_PARTS`)."""
    return max(ALONE_PARTS, key=lambda part: float(row[ALONE_PARTS[part]]))


def _plain(value: Any, scale: float) -> Any:
    """A JSON-ready Python value: numpy scalars unwrapped, NaN/inf -> None, units scaled."""
    if hasattr(value, "item") and not isinstance(value, str | bytes):
        value = value.item()
    if value is None or isinstance(value, bool | str):
        return value
    if isinstance(value, int):
        return value if scale == 1.0 else value * scale
    if isinstance(value, float):
        return value * scale if math.isfinite(value) else None
    return str(value)


def render_rows(rows: Sequence[Mapping[str, Any]], columns: Sequence[Column], fmt: str) -> str:
    """The text of ``rows`` in ``fmt`` (``table``, ``json`` or ``csv``), ending in a newline.

    Examples
    --------
    >>> cols = [Column("tp", "TP"), Column("latency_ns", "latency", "latency_ms")]
    >>> print(render_rows([{"tp": 8, "latency_ns": 4.97e6}], cols, "json"), end="")
    [
      {"tp": 8, "latency_ms": 4.97}
    ]
    >>> print(render_rows([{"tp": 8, "latency_ns": 4.97e6}], cols, "csv"), end="")
    tp,latency_ms
    8,4.97
    """
    if fmt == "table":
        from ..studies.report import table

        shown = [c for c in columns
                 if (c.in_table(rows) if callable(c.in_table) else c.in_table)]
        cells = [{c.key: c.display(r) if c.display is not None else r.get(c.key) for c in shown}
                 for r in rows]
        return table(cells, [(c.key, c.header) for c in shown]) + "\n"
    objs = [{c.name: _plain(r.get(c.key), c.scale) for c in columns} for r in rows]
    if fmt == "json":
        if not objs:
            return "[]\n"
        body = ",\n".join("  " + json.dumps(o, allow_nan=False) for o in objs)
        return f"[\n{body}\n]\n"
    if fmt == "csv":
        buf = io.StringIO()
        w = csv.writer(buf, lineterminator="\n")
        w.writerow([c.name for c in columns])
        for o in objs:
            w.writerow(["" if v is None else str(v).lower() if isinstance(v, bool) else v
                        for v in o.values()])
        return buf.getvalue()
    raise ValueError(f"unknown format {fmt!r}")  # argparse's choices rule this out


def write_atomic(path: str | os.PathLike[str], text: str) -> None:
    """Write ``text`` to ``path`` via a temporary file in the same folder, fsync and
    ``os.replace``: readers see the old file or the new one, never a part; on failure
    the old file is untouched and the temporary file removed."""
    from ..io import write_bytes_atomic

    write_bytes_atomic(path, text.encode("utf-8"))


def emit_rows(rows: Sequence[Mapping[str, Any]], columns: Sequence[Column], fmt: str,
              out: str | os.PathLike[str] | None = None) -> None:
    """Write ``rows`` as ``fmt`` to ``out`` (atomically) or, if ``out`` is None, stdout.

    A failed write to ``out`` leaves an old file as it was, writes the rows to stdout
    instead and raises a :class:`~simcore.errors.SimcoreInputError` naming ``--out`` and a
    place to write them.
    """
    text = render_rows(rows, columns, fmt)
    if out is None:
        sys.stdout.write(text)
        sys.stdout.flush()
        return
    try:
        write_atomic(out, text)
    except OSError as exc:  # the rows are not lost: they go to stdout instead
        sys.stdout.write(text)
        sys.stdout.flush()
        elsewhere = Path(tempfile.gettempdir()) / Path(out).name
        raise SimcoreInputError(f"--out: cannot write {os.fspath(out)!r} (any old file is "
                                f"unchanged): {exc.strerror or exc}; the rows went to stdout "
                                f"instead; write them elsewhere, e.g. --out {elsewhere}"
                                ) from None


def for_script(args: argparse.Namespace) -> bool:
    """Whether the rows go to a script or a file (``--format json|csv`` or ``--out``)
    rather than to a person reading a table on stdout."""
    return args.format != "table" or args.out is not None


def note_stream(args: argparse.Namespace) -> IO[str]:
    """Where a command's notes (headers, summaries) go: stdout when the rows are a table
    on stdout, else stderr, so JSON/CSV on stdout is never mixed with prose."""
    return sys.stderr if for_script(args) else sys.stdout


def _same_file_key(path: str | os.PathLike[str]) -> str:
    """One spelling per file: absolute, symlinks and ``..`` resolved, case folded where
    the platform folds it."""
    return os.path.normcase(os.path.realpath(os.path.abspath(os.fspath(path))))


def _option_of(label: str) -> str:
    """The option a label names (``--plot`` of "--plot's sensitivity chart")."""
    word = label.split()[0] if label.split() else label
    return word.split("'")[0]


def refuse_shared_paths(paths: Mapping[str, str | os.PathLike[str] | None] | None = None,
                        /, **options: str | os.PathLike[str] | None) -> None:
    """Refuse two outputs of one command that name the same file, before any work.

    ``options`` are output options by their keyword (``out=``, ``plot=``; shown as
    ``--out``, ``--plot``); ``paths`` adds files under a label of their own (e.g.
    ``{"--plot's sensitivity chart": path}``), for a file a command derives from an
    option. None values (an option not given) are skipped. Two entries that resolve to
    one file (the same spelling, ``./x`` and ``x``, a symlink, a hard link) raise a
    :class:`~simcore.errors.SimcoreInputError` with one line naming both and a free name
    to pass instead: without it the later write would silently replace the earlier one.

    Examples
    --------
    >>> refuse_shared_paths(out="rows.json", plot="curves.png")
    >>> try:
    ...     refuse_shared_paths(out="x.png", plot="x.png")
    ... except ValueError as exc:
    ...     print(*str(exc).split("; "), sep="\\n")
    --out and --plot both name 'x.png', so one would overwrite the other
    pass a different file to --plot, e.g. --plot x_plot.png
    """
    entries: list[tuple[str, str | os.PathLike[str]]] = []
    named = {f"--{k.replace('_', '-')}": v for k, v in options.items()}
    for label, path in {**named, **(paths or {})}.items():
        if path is not None:
            entries.append((label, path))
    own = {label: path for label, path in entries if label.startswith("--") and " " not in label
           and "'" not in label}
    keys = [_same_file_key(p) for _, p in entries]
    for j in range(len(entries)):
        for i in range(j):
            same = keys[i] == keys[j]
            if not same:
                try:
                    same = os.path.samefile(entries[i][1], entries[j][1])
                except OSError:  # one does not exist yet: different files
                    same = False
            if not same:
                continue
            (first, path), (second, _) = entries[i], entries[j]
            fix = _option_of(second) if _option_of(second) in own else _option_of(first)
            base = Path(own.get(fix, path))
            taken = set(keys)
            suggestion = base.with_name(f"{base.stem}_{fix.lstrip('-')}{base.suffix}")
            n = 2
            while _same_file_key(suggestion) in taken:
                suggestion = base.with_name(f"{base.stem}_{fix.lstrip('-')}{n}{base.suffix}")
                n += 1
            raise SimcoreInputError(
                f"{first} and {second} both name {os.fspath(path)!r}, so one would overwrite "
                f"the other; pass a different file to {fix}, e.g. {fix} {suggestion}")
