"""Saving and loading result Datasets (netCDF via h5netcdf, or zarr), atomically; writing
files atomically; reading input files (configs, metrics) without blocking or recursing."""

from __future__ import annotations

import contextlib
import json
import math
import os
import secrets
import shutil
import stat
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from .errors import SimcoreInputError

# xarray is imported where a Dataset is read, so writing rows (simcore evaluate --out)
# does not load it
if TYPE_CHECKING:
    import xarray as xr

__all__ = ["InputFileError", "MAX_INPUT_BYTES", "MAX_JSON_DEPTH", "check_json_value", "check_room",
           "first_non_finite", "load_dataset", "read_input_bytes", "read_json_file",
           "save_dataset", "storable", "write_bytes_atomic", "write_files_atomic"]

#: the largest input file simcore reads (a DeepSpeed config, a metrics.json, a cost model)
MAX_INPUT_BYTES = 16 * 1024 * 1024
#: the deepest nesting of lists and objects accepted in an input JSON file (a DeepSpeed
#: config nests 3 levels, a metrics.json 1); deeper is refused before anything recurses
MAX_JSON_DEPTH = 64

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
        raise SimcoreInputError(
            f"cannot tell the format of {str(path)!r}; end the name in .nc or .zarr")
    return fmt


def _fsync_dir(folder: Path) -> None:
    with contextlib.suppress(OSError):  # make a rename durable
        dfd = os.open(folder, os.O_RDONLY)
        try:
            os.fsync(dfd)
        finally:
            os.close(dfd)


def _new_file_mode(path: Path) -> int:
    try:
        return path.stat().st_mode & 0o777
    except FileNotFoundError:
        umask = os.umask(0)
        os.umask(umask)
        return 0o666 & ~umask


def write_bytes_atomic(path: str | os.PathLike[str], data: bytes | memoryview) -> Path:
    """Write ``data`` to ``path`` via a temporary file in the same folder, fsync and
    ``os.replace``: readers see the old file or the new one, never a part; on any failure
    (a full disk) the old file is untouched and the temporary file removed. A new file
    gets the usual mode (``0o666`` less the umask), a replaced one keeps its mode."""
    return write_files_atomic({path: data})[0]


def write_files_atomic(
    files: Mapping[str | os.PathLike[str], bytes | memoryview],
) -> list[Path]:
    """Write several files all or nothing (as :func:`write_bytes_atomic` writes one).

    Every temporary file is written and fsynced before any target changes, so a full
    disk or any other write error leaves every target as it was. Then each is renamed
    over its target; if a rename fails, the targets already replaced get their old
    contents back (hard-linked aside beforehand) and new ones are removed.

    Examples
    --------
    >>> import tempfile
    >>> with tempfile.TemporaryDirectory() as d:
    ...     a, b = write_files_atomic({Path(d, "a.json"): b"{}", Path(d, "b.txt"): b"hi"})
    ...     a.read_bytes(), b.read_bytes(), oct(a.stat().st_mode & 0o777) != "0o600"
    (b'{}', b'hi', True)
    """
    staged: list[tuple[str, Path]] = []  # (temporary file, target)
    backups: list[tuple[str, Path]] = []  # (hard link of an old target, target)
    new: set[Path] = set()  # targets that did not exist: undone by removing them
    replaced: list[Path] = []
    try:
        for p, data in files.items():
            path = Path(p)
            mode = _new_file_mode(path)
            fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
            staged.append((tmp, path))
            with os.fdopen(fd, "wb") as f:
                f.write(data)
                f.flush()
                os.fsync(f.fileno())
            os.chmod(tmp, mode)
        if len(staged) > 1:  # keep the old versions until every rename is done
            for _, path in staged:
                if not (path.exists() or path.is_symlink()):
                    new.add(path)
                elif path.is_file():
                    old = str(path.parent / f".{path.name}.{secrets.token_hex(6)}.old")
                    with contextlib.suppress(OSError):  # no hard links here: no undo
                        os.link(path, old)
                        backups.append((old, path))
        for tmp, path in staged:
            os.replace(tmp, path)
            replaced.append(path)
    except BaseException:
        kept = {path: old for old, path in backups}
        for path in replaced:
            with contextlib.suppress(OSError):
                if path in kept:
                    os.replace(kept.pop(path), path)
                elif path in new:
                    os.unlink(path)
        for tmp, _ in staged:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
        for old in kept.values():
            with contextlib.suppress(OSError):
                os.unlink(old)
        raise
    for old, _ in backups:
        with contextlib.suppress(OSError):
            os.unlink(old)
    for folder in {path.parent for _, path in staged}:
        _fsync_dir(folder)
    return [path for _, path in staged]


def check_room(path: str | os.PathLike[str], need_bytes: float) -> str | None:
    """Why ``path`` cannot take a file of about ``need_bytes`` (its folder missing or not
    writable, or fewer free bytes than twice that), or None when it can."""
    path = Path(path)
    folder = path.parent
    if not folder.is_dir():
        return f"folder {str(folder)!r} does not exist"
    if not os.access(folder, os.W_OK | os.X_OK):
        return f"folder {str(folder)!r} is not writable"
    try:
        free = shutil.disk_usage(folder).free
    except OSError:
        return None
    if free < 2 * need_bytes + (1 << 20):
        return (f"about {need_bytes / 1e6:,.1f} MB needed there, {free / 1e6:,.1f} MB free")
    return None


def save_dataset(ds: xr.Dataset, path: str | os.PathLike[str]) -> Path:
    """Write ``ds`` to ``path`` (.nc or .zarr); the file appears only when complete.

    netCDF is serialised in memory, then written to a temporary file in the same folder,
    fsynced and renamed over ``path``; zarr is written to a temporary folder beside
    ``path`` and swapped in. On any failure (a full disk) an existing ``path`` is left as
    it was and nothing else is left behind.
    """
    path = Path(path)
    fmt = _format(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    data = storable(ds)
    if fmt == "netcdf":  # in memory first: HDF5 never sees a full disk
        write_bytes_atomic(path, data.to_netcdf(engine="h5netcdf"))
        return path
    work = Path(tempfile.mkdtemp(prefix=f".{path.name}.", dir=path.parent))
    tmp, old = work / path.name, work / "old"
    try:
        data.to_zarr(tmp, mode="w", consolidated=False, zarr_format=2)
        if path.exists() or path.is_symlink():
            os.replace(path, old)  # moved aside, not deleted, until the new one is in
        try:
            os.replace(tmp, path)
        except BaseException:
            if old.exists() or old.is_symlink():
                os.replace(old, path)
            raise
        _fsync_dir(path.parent)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return path


def load_dataset(path: str | os.PathLike[str]) -> xr.Dataset:
    """Read a Dataset written by :func:`save_dataset`.

    A missing path raises ``FileNotFoundError``; a file that is not a readable netCDF /
    zarr Dataset (truncated, another format) a :class:`~simcore.errors.SimcoreInputError`.
    """
    import xarray as xr

    path = Path(path)
    if not path.exists():
        raise FileNotFoundError(f"no results at {str(path)!r}")
    fmt = _format(path)
    try:
        if fmt == "netcdf":
            return xr.load_dataset(path, engine="h5netcdf")
        return xr.open_zarr(path, consolidated=False).load()
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise SimcoreInputError(f"cannot read {str(path)!r} as a {fmt} Dataset "
                                f"({type(exc).__name__}: {str(exc)[:100]}); is it complete? "
                                "save it again with simcore.io.save_dataset") from None


class InputFileError(SimcoreInputError):
    """An input path that is not a regular file of a readable size: ``path`` and ``why``
    (``"is a folder, not a file"``) say which and why, the message adds what to pass."""

    def __init__(self, path: str, why: str, fix: str) -> None:
        super().__init__(f"{path!r} {why}; {fix}")
        self.path, self.why = path, why


def read_input_bytes(path: str | os.PathLike[str], *, limit: int = MAX_INPUT_BYTES) -> bytes:
    """The bytes of the regular file ``path``, refused without blocking otherwise.

    A FIFO, a socket or a device would block ``open`` or a read forever, and a folder
    fails with ``IsADirectoryError``: the file is opened non-blocking and anything but a
    regular file (after symlinks) raises an :class:`InputFileError` (a
    :class:`~simcore.errors.SimcoreInputError`), as does a file over ``limit`` bytes. A
    missing file raises ``FileNotFoundError``; other ``OSError`` (no permission)
    propagate.

    Examples
    --------
    >>> import tempfile
    >>> with tempfile.TemporaryDirectory() as d:
    ...     _ = Path(d, "a.json").write_text("{}")
    ...     print(read_input_bytes(Path(d, "a.json")))
    ...     try:
    ...         read_input_bytes(d)
    ...     except ValueError as exc:
    ...         print(exc.why)
    b'{}'
    is a folder, not a file
    """
    name = os.fspath(path)
    fix = "pass the path of a file"
    fd = os.open(name, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            kind = ("a folder" if stat.S_ISDIR(st.st_mode) else
                    "a FIFO (named pipe)" if stat.S_ISFIFO(st.st_mode) else
                    "a socket" if stat.S_ISSOCK(st.st_mode) else "a device or special file")
            raise InputFileError(name, f"is {kind}, not a file", fix)
        too_big = f"is more than the {limit:,} bytes simcore reads"
        if st.st_size > limit:
            raise InputFileError(name, f"is {st.st_size:,} bytes, more than the {limit:,} "
                                       "simcore reads", "pass a smaller file")
        chunks, size = [], 0
        while True:  # a file still growing is cut off at the limit too
            chunk = os.read(fd, min(1 << 20, limit + 1 - size))
            if not chunk:
                break
            chunks.append(chunk)
            size += len(chunk)
            if size > limit:
                raise InputFileError(name, too_big, "pass a smaller file")
        return b"".join(chunks)
    finally:
        os.close(fd)


def _walk(data: Any) -> tuple[int, str | None, float]:
    """(the nesting depth of ``data``, the key path of its first non-finite float or
    None, that float), without recursion; stops descending past :data:`MAX_JSON_DEPTH`."""
    depth, bad, value = 0, None, math.nan
    stack: list[tuple[Any, str, int]] = [(data, "", 0)]
    while stack:
        item, where, level = stack.pop()
        if isinstance(item, float) and not math.isfinite(item) and bad is None:
            bad, value = where or "the value", item
        if isinstance(item, Mapping | list | tuple):
            depth = max(depth, level + 1)
            if level + 1 > MAX_JSON_DEPTH:
                continue
            if isinstance(item, Mapping):
                subs = [(f"{where}.{k}" if where else str(k), v) for k, v in item.items()]
            else:
                subs = [(f"{where}[{i}]", v) for i, v in enumerate(item)]
            stack.extend((v, sub, level + 1) for sub, v in reversed(subs))
    return depth, bad, value


def first_non_finite(data: Any) -> str | None:
    """The key path (``zero_optimization.reduce_bucket_size[0]``) of the first NaN or
    infinite float in nested dicts and lists, or None.

    Examples
    --------
    >>> first_non_finite({"zero": {"bucket": [float("nan"), 5e8]}, "lr": 1e-4})
    'zero.bucket[0]'
    >>> first_non_finite({"lr": 1e-4}) is None
    True
    """
    return _walk(data)[1]


def read_json_file(path: str | os.PathLike[str], *, limit: int = MAX_INPUT_BYTES,
                   finite: bool = False) -> Any:
    """The JSON value in the regular file ``path`` (:func:`read_input_bytes`), checked.

    Raises a :class:`~simcore.errors.SimcoreInputError` naming the file for anything but
    a regular file, a file over ``limit`` bytes, text that is not UTF-8 JSON, nesting
    deeper than :data:`MAX_JSON_DEPTH` (which would otherwise end in a RecursionError)
    and, with ``finite=True``, a NaN or infinite number (named by its key path; strict
    JSON has neither). ``FileNotFoundError`` for a missing file.

    Examples
    --------
    >>> import tempfile
    >>> with tempfile.TemporaryDirectory() as d:
    ...     _ = Path(d, "c.json").write_text('{"a": [NaN]}')
    ...     try:
    ...         read_json_file(Path(d, "c.json"), finite=True)
    ...     except ValueError as exc:
    ...         print(str(exc).split(": ", 1)[1])
    a[0] is NaN; pass a finite number (strict JSON has no NaN or Infinity)
    """
    name = os.fspath(path)
    raw = read_input_bytes(path, limit=limit)
    deep = (f"{name!r} nests lists or objects more than {MAX_JSON_DEPTH} deep; pass a "
            "flatter one")
    try:
        data = json.loads(raw.decode("utf-8"))
    except UnicodeDecodeError as exc:
        raise SimcoreInputError(f"{name!r} is not UTF-8 text ({exc.reason} at byte "
                                f"{exc.start}); pass a JSON file") from None
    except json.JSONDecodeError as exc:
        raise SimcoreInputError(f"{name!r} is not valid JSON ({exc}); pass a JSON file") from None
    except RecursionError:
        raise SimcoreInputError(deep) from None
    check_json_value(data, source=repr(name), finite=finite)
    return data


def check_json_value(data: Any, *, source: str, finite: bool = True) -> None:
    """Refuse ``data`` (nested dicts and lists, as from JSON) nested deeper than
    :data:`MAX_JSON_DEPTH` or, with ``finite``, holding a NaN or infinite float, with a
    :class:`~simcore.errors.SimcoreInputError` starting with ``source`` and naming the
    key path; no recursion, so any depth is safe.

    Examples
    --------
    >>> check_json_value({"zero": {"bucket": [float("inf")]}}, source="the config")
    Traceback (most recent call last):
    ...
    simcore.errors.SimcoreInputError: the config: zero.bucket[0] is Infinity; pass a finite number (strict JSON has no NaN or Infinity)
    """
    depth, bad, value = _walk(data)
    if depth > MAX_JSON_DEPTH:
        raise SimcoreInputError(f"{source} nests lists or objects more than {MAX_JSON_DEPTH} "
                                "deep; pass a flatter one")
    if finite and bad is not None:
        raise SimcoreInputError(f"{source}: {bad} is {_json_spelling(value)}; pass a finite "
                                "number (strict JSON has no NaN or Infinity)")


def _json_spelling(value: float) -> str:
    return "NaN" if math.isnan(value) else "Infinity" if value > 0 else "-Infinity"
