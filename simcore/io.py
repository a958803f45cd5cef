"""Saving and loading result Datasets (netCDF via h5netcdf, or zarr), atomically."""

from __future__ import annotations

import contextlib
import os
import secrets
import shutil
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
import xarray as xr

from .errors import SimcoreInputError

__all__ = ["check_room", "load_dataset", "save_dataset", "storable", "write_bytes_atomic",
           "write_files_atomic"]

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
