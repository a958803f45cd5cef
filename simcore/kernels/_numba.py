"""Project-wide numba defaults: one place to set caching, threading and fastmath.

``OMP_WAIT_POLICY`` defaults to ``PASSIVE`` (set it to override). ``SIMCORE_NUMBA_CACHE=0`` turns the on-disk cache off (default on). numba picks the
``omp`` threading layer first (the one that is reliable on our machines), then ``tbb``,
then ``workqueue`` where OpenMP is missing, unless ``NUMBA_THREADING_LAYER`` or
``NUMBA_THREADING_LAYER_PRIORITY`` is set.

The on-disk cache of every kernel is stamped with a digest of *all* the kernel sources
(:func:`sources_digest`), not only of the file that defines it: numba keys a cache entry
by its own file's contents, while a kernel inlines helpers from other files
(``collectives.allreduce_hier`` into ``inference``), so editing or upgrading a helper
alone would otherwise leave the callers' stale machine code in use: silently old
numbers.

Every kernel is a :class:`Kernel`: what other kernels call is compiled without the
Python and C entry points and is not written to the on-disk cache (the caller's cache
entry holds the machine code it links in), and a call from Python goes to
:attr:`Kernel.public`, an ordinary cached ``numba.njit`` dispatcher of the same function.
A helper called only from kernels (``placement``, ``allreduce_hier``, the first-stage
row functions) so compiles once per signature, without the entry-point wrappers (large
for the parameter NamedTuples) and the cache files it never reads back: ~1 s of the
~6.5 s cold ``simcore evaluate`` (docs/design.md, *Speed*).
"""

from __future__ import annotations

import functools
import hashlib
import os
import warnings
from pathlib import Path
from typing import Any, Literal

os.environ.setdefault("NUMBA_THREADING_LAYER_PRIORITY", "omp tbb workqueue")
# idle OpenMP threads sleep instead of spinning: a small parallel call on a busy machine
# otherwise waits for spinning siblings (measured: 1.27 ms vs 0.19 ms for one hardware row)
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

import numba  # noqa: E402
from numba.core.registry import CPUDispatcher  # noqa: E402

CACHE: bool = os.environ.get("SIMCORE_NUMBA_CACHE", "1").strip().lower() not in ("0", "false", "no", "off")

#: target options of the calls between kernels (no entry points for Python or C)
_INTERNAL = {"no_cpython_wrapper": True, "no_cfunc_wrapper": True}

#: the folder of the kernel sources (this package)
KERNELS_DIR = Path(__file__).resolve().parent


def sources_digest(folder: Path = KERNELS_DIR) -> str:
    """SHA-256 of the names and contents of every ``*.py`` file in ``folder``."""
    h = hashlib.sha256()
    for path in sorted(folder.glob("*.py")):
        h.update(path.name.encode())
        h.update(b"\0")
        h.update(path.read_bytes())
        h.update(b"\0")
    return h.hexdigest()


@functools.cache
def _kernels_digest() -> str:
    return sources_digest()


def installed_in_site_packages(folder: Path = KERNELS_DIR) -> bool:
    """Whether the kernels run from an installed copy (``pip install .``), whose files pip
    owns, rather than from a source tree or an editable install."""
    return any(part in ("site-packages", "dist-packages") for part in folder.parts)


def user_cache_dir(folder: Path = KERNELS_DIR) -> Path:
    """Where an installed simcore writes the kernels it compiles at run time:
    ``$XDG_CACHE_HOME/simcore`` (default ``~/.cache/simcore``), one folder per install
    path."""
    root = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    tag = hashlib.sha1(str(folder).encode()).hexdigest()[:12]
    return root / "simcore" / f"numba-{tag}"


class _TwoTierCacheFile:
    """An installed package's cache: read the machine code compiled into the wheel (in
    the package, recorded by pip, removed with it), else the user's cache folder; write
    only to the user's folder. Files written into site-packages at run time are not in
    pip's record, survive ``pip uninstall`` and left a ``simcore`` folder without
    ``__init__.py`` that shadowed a later editable install (issue 36)."""

    def __init__(self, wheel: Any, user: Any, user_path: Path) -> None:
        self.wheel, self.user, self.user_path = wheel, user, user_path
        self._source_stamp = wheel._source_stamp  # both tiers are stamped alike

    def load(self, key: Any) -> Any:
        data = self.wheel.load(key)
        return data if data is not None else self.user.load(key)

    def save(self, key: Any, data: Any) -> None:
        try:
            self.user_path.mkdir(parents=True, exist_ok=True)
        except OSError:
            return  # no writable cache: the kernel compiles again in the next process
        self.user.save(key, data)


def _function_cache(py_func: Any) -> Any:
    """numba's on-disk cache of ``py_func``, its index stamped with numba's own stamp of the
    defining file and :func:`sources_digest` (an index written under other kernel sources
    is stale and gets rewritten). Installed in site-packages (and no ``NUMBA_CACHE_DIR``),
    run-time compilations go to :func:`user_cache_dir`, never into the package."""
    from numba.core.caching import FunctionCache, IndexDataCacheFile

    cache = FunctionCache(py_func)
    stamp = (cache._impl.locator.get_source_stamp(), _kernels_digest())

    def index(path: Any) -> Any:
        return IndexDataCacheFile(cache_path=str(path), filename_base=cache._impl.filename_base,
                                  source_stamp=stamp)

    cache._cache_file = index(cache._cache_path)
    cache.simcore_paths = (str(cache._cache_path),)  # type: ignore[attr-defined]
    if (installed_in_site_packages() and not os.environ.get("NUMBA_CACHE_DIR")
            and Path(cache._cache_path).resolve().parent == KERNELS_DIR):
        user = user_cache_dir()
        cache._cache_file = _TwoTierCacheFile(cache._cache_file, index(user), user)
        cache.simcore_paths = (str(cache._cache_path), str(user))  # type: ignore[attr-defined]
    return cache


#: callbacks run once, just before the process's first call of a kernel from Python (the
#: CLI's "compiling kernels" notice: printed when compiling is about to start, so a bad
#: input found before any kernel runs stays one line)
_BEFORE_FIRST_CALL: list[Any] = []


def before_first_call(callback: Any) -> None:
    """Run ``callback()`` once, just before the next call of any kernel from Python."""
    _BEFORE_FIRST_CALL.append(callback)


def _run_first_call_hooks() -> None:
    while _BEFORE_FIRST_CALL:
        _BEFORE_FIRST_CALL.pop(0)()


class Kernel(CPUDispatcher):
    """A numba dispatcher whose own compilations serve only calls from other kernels
    (no Python / C entry point, not cached); calls from Python go to :attr:`public`."""

    @functools.cached_property
    def public(self) -> Any:
        """The ordinary ``numba.njit`` dispatcher of the same function: what Python calls,
        with the on-disk cache (``CACHE``) and the Python entry point only (no C entry
        point: nothing calls one)."""
        options = {k: v for k, v in self.targetoptions.items()
                   if k != "no_cpython_wrapper" and k != "nopython"}
        dispatcher = numba.njit(cache=False, **options)(self.py_func)
        if CACHE:
            try:
                dispatcher._cache = _function_cache(self.py_func)
            except (ImportError, AttributeError, TypeError) as exc:  # another numba's internals
                warnings.warn(f"simcore: numba {numba.__version__} caches kernels by their own "
                              f"file only ({exc}); after editing a kernels/ file, clear its "
                              "__pycache__", RuntimeWarning, stacklevel=2)
                dispatcher.enable_caching()
        return dispatcher

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        if _BEFORE_FIRST_CALL:
            _run_first_call_hooks()
        return self.public(*args, **kwargs)


def jit(*, parallel: bool = False, inline: Literal["never", "always"] = "never") -> Any:
    """A :class:`Kernel` with the project defaults (cache on, no fastmath: results must be
    bit-identical between the fused and the full-tensor paths)."""
    options = {"nopython": True, "parallel": parallel, "fastmath": False, "nogil": True,
               "inline": inline, **_INTERNAL}

    def decorate(py_func: Any) -> Kernel:
        return Kernel(py_func, targetoptions=dict(options))

    return decorate


prange = numba.prange
