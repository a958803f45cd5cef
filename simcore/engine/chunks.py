"""One chunked reduction: hardware chunks through the fused kernel, with a pluggable
executor (in-process or a dask client) and storage (none, or a zarr checkpoint).

:func:`reduce_best` is the only loop over chunks in simcore; ``evaluate_best``,
``joint_explore``, the resumable sweep and the distributed sweep all call it. Whatever
the executor and storage, the result is the same Dataset, bit for bit. On any exit
(an error, Ctrl-C) chunks still queued on a cluster are cancelled; chunks already
stored stay stored, so a rerun with the same store computes only what is missing.

A store proves itself: every chunk carries a sha256 of its arrays in a completion mark
written after its data; a rerun verifies each chunk and recomputes the missing or
damaged ones (saying so on stderr), so a damaged store costs time, never a wrong number.
Ctrl-C is seen between chunks (:class:`~simcore.errors.SweepInterrupted`); a lost
cluster, a store in use by another run or a full disk raise
:class:`~simcore.errors.SimcoreRetryError` naming how many chunks are saved.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import json
import math
import numbers
import os
import shutil
import signal
import socket
import sys
import threading
import time
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

import numpy as np

from ..errors import SimcoreInputError, SimcoreRetryError, SweepInterrupted
from ..model.specs import HW_KNOBS
from ..options import OPTIONS
from .core import (
    LAYOUT_OUTPUTS,
    MEM_PARTS,
    N_BEST,
    OUTPUT_NAMES,
    Prepared,
    fused_metric,
)
from .metrics import Metric
from .space import CHOICES, LAYOUT_DIM_ATTRS

# xarray (with .labels) is imported where a Dataset is built: the memory checks also
# serve `simcore evaluate`, which never needs it
if TYPE_CHECKING:
    import xarray as xr

__all__ = ["BYTES_PER_HW_POINT", "EVALS_PER_SECOND", "STORE_FORMAT", "available_memory",
           "check_fits_in_memory", "check_sweep_memory", "StoreMismatchError", "assemble_best",
           "chunk_checksum", "default_chunk_size", "fingerprint", "hw_chunks", "prepared_bytes",
           "reduce_best"]


class StoreMismatchError(SimcoreInputError):
    """The store holds a different sweep, or is not a (current) simcore sweep store."""


#: Version of the checkpoint layout; stores of another version are refused.
STORE_FORMAT = 2
_ARRAYS = ("best_idx", "vals", "n_fit")


def _positive_int(name: str, value: Any) -> int:
    """``value`` as an int >= 1 (numpy integers accepted), else a :class:`SimcoreInputError`."""
    if isinstance(value, bool | np.bool_) or not isinstance(value, numbers.Integral):
        raise SimcoreInputError(f"{name} must be a positive integer (hardware points per "
                                f"chunk), got {value!r} ({type(value).__name__})")
    if int(value) < 1:
        raise SimcoreInputError(f"{name} must be >= 1 hardware points, got {int(value)}")
    return int(value)


def hw_chunks(n_hw: int, chunk_size: int) -> Iterator[tuple[int, int]]:
    """``(start, stop)`` of each chunk of ``chunk_size`` hardware rows."""
    for start in range(0, n_hw, chunk_size):
        yield start, min(n_hw, start + chunk_size)


def default_chunk_size(p: Prepared) -> int:
    """Hardware rows per chunk: about ``chunk_points`` joint evaluations (an option) of
    the layouts the kernel visits (the valid ones, :meth:`Prepared.live_layouts`)."""
    n_valid = int(np.count_nonzero(p.valid))
    return max(1, min(p.n_hw, math.ceil(OPTIONS["chunk_points"] / max(1, n_valid))))


# --- size checks ----------------------------------------------------------------------------

#: Conservative joint evaluations per second of one process (for time estimates only).
EVALS_PER_SECOND = 2_000_000
#: Result bytes per hardware point of :func:`reduce_best` (winners, buffers, labels).
BYTES_PER_HW_POINT = 400


def available_memory() -> int | None:
    """Bytes of memory this process can still get (MemAvailable, capped by a cgroup
    limit and by an address-space limit, ``ulimit -v``); None where that cannot be told."""
    avail: int | None = None
    try:
        with open("/proc/meminfo", encoding="ascii") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    avail = int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        try:
            avail = os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
        except (ValueError, OSError, AttributeError):
            avail = None
    try:
        with open("/sys/fs/cgroup/memory.max", encoding="ascii") as f:
            limit = f.read().strip()
        if limit != "max":
            with open("/sys/fs/cgroup/memory.current", encoding="ascii") as f:
                left = int(limit) - int(f.read().strip())
            avail = left if avail is None else min(avail, left)
    except (OSError, ValueError):
        pass
    room = _address_space_left()
    if room is not None:
        avail = room if avail is None else min(avail, room)
    return avail


def _address_space_left() -> int | None:
    """Bytes left under an address-space limit (``ulimit -v``, RLIMIT_AS): the limit less
    this process's virtual size; None without a limit or where it cannot be told."""
    try:
        import resource

        soft, _ = resource.getrlimit(resource.RLIMIT_AS)
        if soft == resource.RLIM_INFINITY:
            return None
        with open("/proc/self/status", encoding="ascii") as f:
            for line in f:
                if line.startswith("VmSize:"):
                    return max(0, soft - int(line.split()[1]) * 1024)
    except (ImportError, OSError, ValueError, IndexError):
        pass
    return None


def _gb(n: float) -> str:
    return f"{n / 1e9:,.1f} GB" if n >= 1e8 else f"{n / 1e6:,.1f} MB"


def _duration(seconds: float) -> str:
    if seconds < 120:
        return f"{seconds:.0f} s"
    if seconds < 7200:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:,.1f} h"


def check_fits_in_memory(need_bytes: float, what: str, advice: str, *,
                         n_evals: float | None = None) -> None:
    """Refuse (a :class:`SimcoreInputError`) a result of ``need_bytes`` that would not fit
    in the memory available now, before any compute."""
    avail = available_memory()
    if avail is None or need_bytes <= avail:
        return
    took = "" if n_evals is None else (
        f", and {n_evals:.3g} joint evaluations would take about "
        f"{_duration(n_evals / EVALS_PER_SECOND)}")
    raise SimcoreInputError(f"{what} needs about {_gb(need_bytes)} of memory, {_gb(avail)} "
                            f"are available{took}; {advice}")


def prepared_bytes(p: Prepared) -> int:
    """Bytes one prepared point holds: its per-layout coefficients, layout table and knob
    values (what every point of a batch / s_kv sweep keeps while the sweep runs)."""
    return int(p.coeffs.nbytes + p.layouts.nbytes + sum(v.nbytes for v in p.knobs.values()))


def check_sweep_memory(p: Prepared, n_points: int, *, result_bytes: float, what: str,
                       advice: str) -> None:
    """Refuse (a :class:`~simcore.errors.SimcoreInputError`: ``what`` needs about N GB,
    M GB are available; ``advice``) a sweep of ``n_points`` workload points whose other
    prepared points (as large as ``p``, the first, already built) and ``result_bytes`` of
    results would not fit in the memory available now: called after preparing the first
    point, before the others, so a sweep too large is refused in about a second instead
    of failing with MemoryError minutes later."""
    need = (n_points - 1) * prepared_bytes(p) + result_bytes
    check_fits_in_memory(need, what, advice)


# --- storage --------------------------------------------------------------------------------

def fingerprint(p: Prepared, metric: Metric, chunk_size: int) -> str:
    """Hash of everything that determines the sweep's results and chunking."""
    h = hashlib.sha256()
    h.update(np.ascontiguousarray(p.coeffs).tobytes())
    h.update(np.asarray(p.eff, dtype=np.float64).tobytes())
    h.update(json.dumps({
        "shape": [len(p.coeffs), len(p.coeffs.dtype.names or ())],
        "knobs": {k: p.knobs[k].tolist() for k in sorted(p.knobs)},
        "model": repr(p.model), "workload": repr(p.workload), "topology": repr(p.topology),
        "space": [[d, list(map(str, v))] for d, v in p.space.coords],
        "metric": metric.name, "chunk_size": chunk_size,
    }, sort_keys=True).encode())
    return h.hexdigest()


def chunk_checksum(best_idx: np.ndarray, vals: np.ndarray, n_fit: np.ndarray) -> str:
    """sha256 of one chunk's arrays (int64, float64, int64 bytes in that order)."""
    h = hashlib.sha256()
    for arr, dtype in ((best_idx, np.int64), (vals, np.float64), (n_fit, np.int64)):
        h.update(np.ascontiguousarray(arr, dtype=dtype).tobytes())
    return h.hexdigest()


class _Memory:
    """The result buffers: every chunk lands here, whatever the storage."""

    def __init__(self, n_hw: int) -> None:
        self.best_idx = np.full(n_hw, -1, dtype=np.int64)
        self.vals = np.full((n_hw, N_BEST), np.nan)
        self.n_fit = np.zeros(n_hw, dtype=np.int64)

    def write(self, a: int, b: int, bi: np.ndarray, v: np.ndarray, nf: np.ndarray) -> None:
        self.best_idx[a:b], self.vals[a:b], self.n_fit[a:b] = bi, v, nf

    def read(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        return self.best_idx, self.vals, self.n_fit


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # someone else's process
        return True
    except OSError:
        return False
    return True


@contextlib.contextmanager
def _folder_mutex(folder: str) -> Iterator[None]:
    """Runs on this host take a store's lock one at a time (``flock`` on the store folder,
    held for the few system calls of :class:`_StoreLock`): no run reads a lock another is
    still writing (and takes it for a half-written, stale one), and no two runs take over
    the same stale lock. Without ``flock`` (or where the file system refuses it) the lock
    file alone decides, as before."""
    try:
        import fcntl
    except ImportError:  # pragma: no cover - not POSIX
        yield
        return
    try:
        fd = os.open(folder, os.O_RDONLY)
    except OSError:  # pragma: no cover - the folder was just created or opened
        yield
        return
    try:
        with contextlib.suppress(OSError):  # e.g. a network file system without locks
            fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # releases the flock


class _StoreLock:
    """``<store>/.lock``, created with ``O_CREAT | O_EXCL`` and holding the owner's pid and
    host. A lock whose process is gone (on this host) is stale and taken over. Runs on one
    host go through the protocol one at a time (:func:`_folder_mutex`)."""

    def __init__(self, folder: str) -> None:
        self.path = os.path.join(folder, ".lock")
        self.held = False
        with _folder_mutex(folder):
            self._take(folder)

    def _take(self, folder: str) -> None:
        me = {"pid": os.getpid(), "host": socket.gethostname(), "started": time.time()}
        for _ in range(3):
            try:
                fd = os.open(self.path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
            except FileExistsError:
                owner = self._owner()
                if owner is not None and not self._stale(owner):
                    since = time.strftime("%Y-%m-%d %H:%M:%S",
                                          time.localtime(float(owner.get("started", 0))))
                    raise SimcoreRetryError(
                        f"checkpoint store {folder!r} is in use by another simcore run (pid "
                        f"{owner.get('pid')} on {owner.get('host')}, since {since}); wait for "
                        "it to finish and rerun this command (it then reuses every finished "
                        "chunk), or pass another store path for a separate sweep") from None
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(self.path)
                print(f"simcore: note: took over the stale lock of {folder!r} (its run is gone)",
                      file=sys.stderr)
                continue
            try:
                os.write(fd, json.dumps(me).encode())
            finally:
                os.close(fd)
            self.held = True
            return
        raise SimcoreRetryError(f"cannot lock checkpoint store {folder!r}: another run keeps "
                                "taking it; rerun when it has finished")

    def _owner(self) -> dict[str, Any] | None:
        try:
            with open(self.path, encoding="utf-8") as f:
                owner = json.load(f)
            return owner if isinstance(owner, dict) else None
        except FileNotFoundError:
            return {"pid": -1, "host": "", "gone": True}
        except (OSError, ValueError):  # half-written by a run killed at once: stale
            return None

    @staticmethod
    def _stale(owner: dict[str, Any]) -> bool:
        if owner.get("gone"):
            return True
        if owner.get("host") != socket.gethostname():  # cannot tell: assume alive
            return False
        try:
            return not _pid_alive(int(owner.get("pid", -1)))
        except (TypeError, ValueError):
            return True

    def release(self) -> None:
        if self.held:
            self.held = False
            with contextlib.suppress(OSError):
                os.unlink(self.path)


def _is_empty_store_dir(path: str) -> bool:
    return all(name in (".lock",) for name in os.listdir(path))


class _ZarrCheckpoint:
    """Finished chunks in a zarr store that proves itself.

    Layout (format :data:`STORE_FORMAT`): arrays ``best_idx``, ``vals``, ``n_fit`` chunked
    like the sweep; ``marks/<chunk>`` holds the sha256 of the chunk's arrays
    (:func:`chunk_checksum`) and is written (atomically) only after the chunk's data, so
    it is the chunk's completion mark. Opening verifies every marked chunk against its
    checksum; a chunk whose data is missing, truncated or altered is recomputed (and
    said so on stderr), never returned. ``.lock`` keeps a second writer out.
    """

    def __init__(self, store: str | os.PathLike[str], p: Prepared, m: Metric,
                 chunk_size: int, n_chunks: int, mem: _Memory) -> None:
        self.path = path = os.fspath(store)
        self.chunk_size, self.n_hw, self.n_chunks = chunk_size, p.n_hw, n_chunks
        self.marks = os.path.join(path, "marks")
        self.lock: _StoreLock | None = None
        if os.path.exists(path) and not os.path.isdir(path):
            raise StoreMismatchError(f"{path!r} exists but is not a simcore sweep store (it is "
                                     "a file); pass a new store path")
        self.done = np.zeros(n_chunks, dtype=bool)
        try:
            os.makedirs(path, exist_ok=True)
            self.lock = _StoreLock(path)
            self._open(p, m, fingerprint(p, m, chunk_size))
            self.repaired = self._verify(mem)
        except BaseException as exc:
            self.close()
            if isinstance(exc, OSError):
                advice = ("free some space or pass a store path on another disk"
                          if exc.errno in (errno.ENOSPC, errno.EDQUOT) else
                          "pass a store path in a folder you can write")
                raise SimcoreRetryError(
                    f"cannot create or open the checkpoint store {path!r}: "
                    f"{exc.strerror or exc}; {advice}") from None
            raise

    def _open(self, p: Prepared, m: Metric, fp: str) -> None:
        import zarr

        path = self.path
        if _is_empty_store_dir(path):
            self._create(p, m, fp)
            return
        try:
            g = zarr.open_group(path, mode="r+")
            attrs = dict(g.attrs)
        except Exception as exc:  # not a zarr group, or its metadata is damaged
            raise StoreMismatchError(
                f"{path!r} exists but is not a readable simcore sweep store "
                f"({type(exc).__name__}); pass a new store path") from None
        fmt = attrs.get("simcore_store_format")
        if fmt is None and "fingerprint" in attrs:
            raise StoreMismatchError(
                f"{path!r} was written by an older simcore without chunk checksums, so its "
                "chunks cannot be verified; pass a new store path to start over")
        ours = {".lock", "zarr.json", "marks", *_ARRAYS}
        if fmt is None and not os.path.isdir(self.marks) and set(os.listdir(path)) <= ours:
            self._create(p, m, fp)  # a creation that did not finish
            return
        if fmt is None:
            raise StoreMismatchError(f"{path!r} is a zarr store but not a simcore sweep store; "
                                     "pass a new store path")
        if fmt != STORE_FORMAT:
            raise StoreMismatchError(f"{path!r} is a simcore store of format {fmt!r}, this "
                                     f"simcore reads format {STORE_FORMAT}; pass a new store path")
        if attrs.get("fingerprint") != fp:
            raise StoreMismatchError(
                f"{path!r} holds a different sweep (other model, workload, grid, metric or "
                "chunk size); pass a new store path, or delete this one to start over")
        self.g: Any = g
        for name in _ARRAYS:  # a missing or unreadable array is recreated (its chunks then
            try:              # fail verification and are recomputed)
                g[name]
            except Exception:
                self._create_array(name)

    def _create_array(self, name: str) -> None:
        n, cs = self.n_hw, self.chunk_size
        spec = {"best_idx": ((n,), (cs,), "int64", -1), "vals": ((n, N_BEST), (cs, N_BEST),
                "float64", np.nan), "n_fit": ((n,), (cs,), "int64", 0)}[name]
        shape, chunks, dtype, fill = spec
        self.g.create_array(name, shape=shape, chunks=chunks, dtype=dtype, fill_value=fill,
                            overwrite=True)

    def _create(self, p: Prepared, m: Metric, fp: str) -> None:
        import zarr

        self.g = zarr.open_group(self.path, mode="a")
        for name in _ARRAYS:
            self._create_array(name)
        shutil.rmtree(self.marks, ignore_errors=True)
        os.makedirs(self.marks)
        # the format and fingerprint last: a store without them is an unfinished creation
        self.g.attrs.update(metric=m.name, chunk_size=self.chunk_size, n_hw=self.n_hw,
                            n_chunks=self.n_chunks, model=p.model.name,
                            simcore_store_format=STORE_FORMAT, fingerprint=fp)

    def _read_chunks(self, name: str, marked: list[int]) -> tuple[np.ndarray, set[int]]:
        """The whole array, and the chunks that could not be read."""
        try:
            arr = self.g[name]
        except Exception:  # pragma: no cover - checked on opening
            self._create_array(name)
            arr = self.g[name]
        try:
            return np.asarray(arr[:]), set()
        except Exception:  # a truncated or garbled chunk: find which
            out = np.asarray(np.full(arr.shape, arr.fill_value, dtype=arr.dtype))
            bad: set[int] = set()
            for c in marked:
                a, b = c * self.chunk_size, min(self.n_hw, (c + 1) * self.chunk_size)
                try:
                    out[a:b] = arr[a:b]
                except Exception:
                    bad.add(c)
            return out, bad

    def _verify(self, mem: _Memory) -> int:
        marked: dict[int, str] = {}
        for entry in os.listdir(self.marks):
            if not entry.isdigit() or int(entry) >= self.n_chunks:
                continue
            try:
                with open(os.path.join(self.marks, entry), encoding="ascii") as f:
                    marked[int(entry)] = f.read().strip()
            except (OSError, ValueError):
                marked[int(entry)] = ""
        if not marked:
            return 0
        order = sorted(marked)
        data, bad = [], set()
        for name in _ARRAYS:
            arr, unreadable = self._read_chunks(name, order)
            data.append(arr)
            bad |= unreadable
        bi, v, nf = data
        damaged = 0
        for c in order:
            a, b = c * self.chunk_size, min(self.n_hw, (c + 1) * self.chunk_size)
            if c not in bad and chunk_checksum(bi[a:b], v[a:b], nf[a:b]) == marked[c]:
                mem.write(a, b, bi[a:b], v[a:b], nf[a:b])
                self.done[c] = True
            else:
                damaged += 1
                with contextlib.suppress(OSError):
                    os.unlink(os.path.join(self.marks, str(c)))
        if damaged:
            print(f"simcore: checkpoint {self.path}: recomputing {damaged} damaged "
                  f"chunk{'s' if damaged != 1 else ''} (missing, truncated or altered data)",
                  file=sys.stderr)
        return damaged

    def write(self, chunk: int, a: int, b: int, bi: np.ndarray, v: np.ndarray,
              nf: np.ndarray) -> None:
        self.g["best_idx"][a:b] = bi
        self.g["vals"][a:b] = v
        self.g["n_fit"][a:b] = nf
        mark = os.path.join(self.marks, str(chunk))
        tmp = f"{mark}.{os.getpid()}.tmp"
        try:
            with open(tmp, "w", encoding="ascii") as f:
                f.write(chunk_checksum(bi, v, nf))
            os.replace(tmp, mark)  # the completion mark, after the data
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
            raise
        self.done[chunk] = True

    def close(self) -> None:
        if self.lock is not None:
            self.lock.release()


# --- executors ------------------------------------------------------------------------------

def _run_chunk(p: Prepared, start: int, stop: int, metric: str
               ) -> tuple[int, int, np.ndarray, np.ndarray, np.ndarray]:
    bi, v, nf = p.best_chunk(start, stop, metric)
    return start, stop, bi, v, nf


def _in_process(p: Prepared, todo: list[tuple[int, int]], metric: str
                ) -> Iterator[tuple[int, int, np.ndarray, np.ndarray, np.ndarray]]:
    for a, b in todo:
        yield _run_chunk(p, a, b, metric)


def _on_dask(client: Any, p: Prepared, todo: list[tuple[int, int]], metric: str
             ) -> Iterator[tuple[int, int, np.ndarray, np.ndarray, np.ndarray]]:
    from distributed import as_completed

    [prep] = client.scatter([p], broadcast=True, hash=False)
    futures = [client.submit(_run_chunk, prep, a, b, metric, pure=False) for a, b in todo]
    try:
        for fut in as_completed(futures):
            yield fut.result()
    finally:  # an error, Ctrl-C or an abandoned generator: nothing left running
        with contextlib.suppress(Exception):
            client.cancel([f for f in futures if not f.done()])


def _lost_cluster(exc: BaseException) -> bool:
    """A failure of the cluster (cancelled futures, killed workers, a closed comm), not of
    the computation."""
    import asyncio
    import concurrent.futures

    if isinstance(exc, concurrent.futures.CancelledError | asyncio.CancelledError):
        return True
    mod = type(exc).__module__ or ""
    return mod.startswith("distributed") and type(exc).__name__ in (
        "KilledWorker", "CommClosedError", "FutureCancelledError", "TimeoutError",
        "CancelledError", "FutureState")


def _caused_by_ctrl_c(exc: BaseException) -> bool:
    from ..errors import interrupt_behind

    return interrupt_behind(exc) is not None


class _SigintFlag:
    """While active (main thread only), Ctrl-C sets a flag instead of raising inside a numba
    kernel; the chunk loop checks it between chunks."""

    def __init__(self) -> None:
        self.hit = False
        self._old: Any = None

    def __enter__(self) -> _SigintFlag:
        if (threading.current_thread() is threading.main_thread()
                and signal.getsignal(signal.SIGINT) is signal.default_int_handler):
            self._old = signal.signal(signal.SIGINT, self._handler)
        return self

    def _handler(self, signum: int, frame: Any) -> None:
        self.hit = True

    def __exit__(self, *exc: object) -> None:
        if self._old is not None:
            signal.signal(signal.SIGINT, self._old)
            self._old = None


def _check_client(client: Any) -> None:
    if client is not None and not (hasattr(client, "submit") and hasattr(client, "scatter")):
        raise SimcoreInputError(
            f"client must be a dask.distributed.Client, got {type(client).__name__} "
            f"{client!r}; connect first, e.g. client, _ = simcore.engine.distributed.connect("
            "'tcp://host:8786')")


def reduce_best(
    p: Prepared,
    *,
    metric: str | Metric = "latency",
    chunk_size: int | None = None,
    progress: bool = False,
    client: Any = None,
    store: str | os.PathLike[str] | None = None,
) -> xr.Dataset:
    """The metric-best fitting layout per hardware point, chunk by chunk.

    Parameters
    ----------
    p : Prepared
        From :func:`simcore.engine.core.prepare`.
    metric : str or Metric
        ``"latency"``, ``"throughput"`` or ``"FLOPS_per_gpu"`` (aliases accepted).
    chunk_size : int, optional
        Hardware rows per chunk; default about ``chunk_points`` (an option) joint
        evaluations; for a dask client without a store, at least
        ``dask_chunks_per_worker`` chunks per worker.
    progress : bool
        A progress bar on stderr.
    client : dask.distributed.Client, optional
        Run the chunks on a cluster (executor); default in-process.
    store : path, optional
        A zarr checkpoint (storage): finished chunks are saved as they complete, each
        with a checksum, and a rerun with the same store verifies them and computes only
        the missing or damaged ones. One run at a time uses a store (``.lock``).

    Returns
    -------
    xarray.Dataset
        Over the hardware dims. With a ``store``, ``attrs`` also record ``store``,
        ``chunks_total``, ``chunks_reused``, ``chunks_repaired`` and ``chunks_computed``.

    Raises
    ------
    SweepInterrupted
        Ctrl-C (in the main thread it is seen between chunks); says how many are saved.
    SimcoreRetryError
        The store is in use by another run, the cluster was lost or the store could not
        be written; rerunning with the same store loses nothing.
    """
    m, _ = fused_metric(metric)
    _check_client(client)
    if chunk_size is None:
        chunk_size = default_chunk_size(p)
        if client is not None and store is None:  # a store keeps one chunking for any executor
            n_workers = max(1, len(client.scheduler_info().get("workers", {})))
            per = OPTIONS["dask_chunks_per_worker"] * n_workers
            chunk_size = max(1, min(chunk_size, -(-p.n_hw // per)))
    chunk_size = _positive_int("chunk_size", chunk_size)
    check_fits_in_memory(p.n_hw * BYTES_PER_HW_POINT, f"the best layouts of {p.n_hw:,} "
                         "hardware points", "sweep fewer hardware points (fewer values per "
                         "knob)", n_evals=p.n_hw * p.space.size)
    chunks = list(hw_chunks(p.n_hw, chunk_size))
    mem = _Memory(p.n_hw)
    ckpt = None if store is None else _ZarrCheckpoint(store, p, m, chunk_size, len(chunks), mem)
    try:
        done = np.zeros(len(chunks), dtype=bool) if ckpt is None else ckpt.done.copy()
        todo = [c for c, is_done in zip(chunks, done, strict=True) if not is_done]
        _loop(p, m, todo, chunks, chunk_size, mem, ckpt, client, progress)
    finally:
        if ckpt is not None:
            ckpt.close()
    ds = assemble_best(p, m, *mem.read())
    if ckpt is not None:  # the result itself is the same for any chunking and executor
        ds.attrs.update(chunks_total=len(chunks), chunks_reused=len(chunks) - len(todo),
                        chunks_repaired=ckpt.repaired, chunks_computed=len(todo),
                        store=os.fspath(store))  # type: ignore[arg-type]
    return ds


def _loop(p: Prepared, m: Metric, todo: list[tuple[int, int]], chunks: list[tuple[int, int]],
          chunk_size: int, mem: _Memory, ckpt: _ZarrCheckpoint | None, client: Any,
          progress: bool) -> None:
    def saved() -> str:
        if ckpt is None:
            return ""
        return f"{int(ckpt.done.sum())} of {len(chunks)} chunks saved in {ckpt.path}"

    bar: Any = None
    if progress:
        from tqdm.auto import tqdm

        bar = tqdm(total=len(chunks), initial=len(chunks) - len(todo), unit="chunk",
                   desc="hardware chunks" + (" (dask)" if client is not None else ""),
                   file=sys.stderr)
    runs: Any = None
    with _SigintFlag() as sigint:
        try:
            if sigint.hit:
                raise KeyboardInterrupt
            runs = (_in_process(p, todo, m.name) if client is None
                    else _on_dask(client, p, todo, m.name))
            for a, b, bi, v, nf in runs:
                mem.write(a, b, bi, v, nf)
                if ckpt is not None:
                    try:
                        ckpt.write(a // chunk_size, a, b, bi, v, nf)
                    except OSError as exc:
                        raise SimcoreRetryError(
                            f"cannot write to the checkpoint store {ckpt.path}: "
                            f"{exc.strerror or exc}; {saved()}; free some space and rerun the "
                            "same command to resume") from None
                if bar is not None:
                    bar.update(1)
                if sigint.hit:
                    raise KeyboardInterrupt
        except Exception as exc:
            if _caused_by_ctrl_c(exc):  # e.g. numba's SystemError under a foreign handler
                s = saved()
                raise SweepInterrupted(f"interrupted; {s}, rerun to resume" if s else
                                       "interrupted", saved=0 if ckpt is None else
                                       int(ckpt.done.sum()), total=len(chunks)) from None
            if client is None or not _lost_cluster(exc):
                raise
            s = saved()
            raise SimcoreRetryError(
                f"lost the dask cluster ({type(exc).__name__}: {str(exc)[:120]}); "
                + (f"{s}; rerun the same command to resume" if s else
                   "nothing was saved; rerun, with a checkpoint store (--resume STORE.zarr, "
                   "store=) to keep finished chunks")) from None
        except KeyboardInterrupt:
            s = saved()
            n = 0 if ckpt is None else int(ckpt.done.sum())
            raise SweepInterrupted(f"interrupted; {s}, rerun to resume" if s else "interrupted",
                                   saved=n, total=len(chunks)) from None
        finally:
            close = getattr(runs, "close", None)
            if close is not None:
                with contextlib.suppress(Exception):
                    close()
            if bar is not None:
                bar.close()


#: long names (and units) of the per-hardware winner variables the schema does not declare
_WINNER_ATTRS: dict[str, dict[str, str]] = {
    **{f"best_{d}": {"units": a["units"], "long_name": f"best layout's {a['long_name']}"}
       for d, a in LAYOUT_DIM_ATTRS.items()},
    "best_layout_index": {"units": "1", "long_name": "best layout's row in the layout space "
                                                      "(-1: none fits)"},
    "n_fits": {"units": "layouts", "long_name": "layouts that fit in memory"},
    "any_fits": {"long_name": "some layout fits in memory"},
}


def assemble_best(p: Prepared, m: Metric, best_idx: np.ndarray, vals: np.ndarray,
                  n_fit: np.ndarray) -> xr.Dataset:
    """Per-hardware winners (flat arrays over the C-order hw grid) → labelled Dataset."""
    from .labels import dataset, knob_coords, var_attrs, variable

    shape = p.hw_shape
    dims = HW_KNOBS
    ok = best_idx >= 0
    safe = np.where(ok, best_idx, 0)
    data: dict[str, np.ndarray] = {}
    for q, name in enumerate(OUTPUT_NAMES[:N_BEST]):
        data[name] = vals[:, q]  # views of the result buffer: no copies
    for name in ("mem_bytes", *MEM_PARTS, "n_devices"):
        data[name] = np.where(ok, p.column(name)[safe], np.nan)
    # each layout dim's position in turn (not all at once: a large sweep's peak memory)
    stride = p.space.size
    for dim, values in p.space.coords:
        stride //= len(values)
        col = np.asarray(values, dtype=object if dim in CHOICES else np.int64)
        picked = col[(safe // stride) % len(values)]
        picked[~ok] = "" if dim in CHOICES else -1
        data[f"best_{dim}"] = picked
    data["best_layout_index"] = best_idx
    data["n_fits"] = n_fit
    data["any_fits"] = ok
    data["fits"] = ok  # the winner fits (as best() reports it)
    data["valid"] = ok
    declared = {*LAYOUT_OUTPUTS, *OUTPUT_NAMES}
    variables = {n: variable(dims, a.reshape(shape),
                             var_attrs(n) if n in declared else dict(_WINNER_ATTRS.get(n, {})))
                 for n, a in data.items()}
    return dataset(variables, knob_coords(p.knobs, attrs="all"),
                   {**p.attrs(), "best_metric": m.name, "best_direction": m.direction,
                    "n_layouts": int(p.space.size)})
