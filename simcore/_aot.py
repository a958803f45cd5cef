"""Compile the kernels a first ``simcore`` command needs into numba's on-disk cache.

``setup.py`` runs ``python -m simcore._aot`` on the built package when it builds a wheel
(so ``pip install .`` installs the machine code beside the sources, in
``simcore/kernels/__pycache__``). numba reads those files back only where everything it
keys them by matches: the source files' contents (numba 0.68, the version this was
checked with, stamps a source file by a hash of its contents, not by its mtime, so pip
writing the files anew keeps them valid; a numba that stamps by mtime finds them stale
and compiles; simcore adds a digest of every kernel source file to each stamp,
``kernels._numba.sources_digest``, so a kernel whose inlined helpers changed is stale
too), the Python bytecode, the numba version, and the CPU (name and features)
they were compiled for. A wheel built on
one machine and installed on another, or ``NUMBA_CACHE_DIR`` pointing elsewhere, finds
nothing and compiles on first use as before (``simcore`` then says so).

What it compiles: :data:`simcore.engine.core.FIRST_CALL_KERNELS` for inference and training
(``simcore evaluate`` with and without ``--mode train``, and ``simcore.predict``): the
sweep kernels (``fused_best``, ``evaluate_grid``) are compiled by the first command that
uses them.
"""

from __future__ import annotations

import contextlib
import io
import sys


def main() -> int:
    """Run the first-call work once; 0 if the kernels are now in the on-disk cache."""
    from . import Workload, predict
    from .cli import main as cli
    from .engine import core as engine

    small = ["--model", "Llama 3.1 8B"]
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        for argv in (["evaluate"], ["evaluate", "--mode", "train"],
                     ["explore", *small, "--s-kv", "4096", "--depth", "two_stage",
                      "--no-progress"],
                     ["serving", *small, "--family", "H100-SXM", "--gpus", "8", "--isl", "1000",
                      "--osl", "200"],
                     ["serving", *small, "--family", "H100-SXM", "--gpus", "8", "--isl", "500",
                      "--osl", "50", "--rate", "2", "--duration-s", "20", "--max-ttft-ms",
                      "2000", "--max-tpot-ms", "50"]):
            if cli(argv) != 0:  # a command that failed compiled nothing: say which
                failed = " ".join(argv)
                break
        else:
            failed = ""
    if failed:
        print(f"simcore._aot: 'simcore {failed}' failed", file=sys.stderr)
        return 1
    predict("Llama 3.1 8B", Workload("decode", s_kv=8192), {"tp": 2}, family="H100-SXM")
    kernels = {k for names in engine.FIRST_CALL_KERNELS.values() for k in names}
    return 0 if engine.kernels_cached(tuple(sorted(kernels))) else 1


if __name__ == "__main__":
    sys.exit(main())
