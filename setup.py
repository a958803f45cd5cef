"""Build hook: a wheel carries the numba machine code of the first-call kernels.

``build_py`` copies the package as usual, then runs ``python -m simcore._aot`` on the
copy (see that module for when numba reads the files back); an editable install runs it
on the source tree, whose cache the installed package reads. The wheel is tagged for
the building platform (it carries machine code). The build environment holds the runtime
dependencies every command's first run imports (``[build-system] requires``). Skipped
with ``SIMCORE_AOT=0`` or ``SIMCORE_NUMBA_CACHE=0``; a failure only warns: the kernels
then compile on first use.
"""

from __future__ import annotations

import os
import subprocess
import sys

from setuptools import Distribution, setup
from setuptools.command.build_py import build_py


def _off(name: str) -> bool:
    return os.environ.get(name, "1").strip().lower() in ("0", "false", "no", "off")


class BuildPyAOT(build_py):
    def run(self) -> None:
        super().run()
        if _off("SIMCORE_AOT") or _off("SIMCORE_NUMBA_CACHE"):
            return
        if getattr(self, "editable_mode", False):  # the package is the source tree
            lib = os.path.dirname(os.path.abspath(__file__))
        else:
            lib = os.path.abspath(self.build_lib)
        env = {k: v for k, v in os.environ.items() if k not in ("NUMBA_CACHE_DIR", "NUMBA_DISABLE_JIT")}
        # pip's isolated build environment reaches numba and numpy through PYTHONPATH
        env["PYTHONPATH"] = os.pathsep.join(p for p in (lib, env.get("PYTHONPATH")) if p)
        self.announce("compiling the first-call numba kernels into the wheel", level=2)
        try:
            subprocess.run([sys.executable, "-m", "simcore._aot"], cwd=lib, env=env, check=True,
                           timeout=600)
        except (OSError, subprocess.SubprocessError) as exc:
            self.warn(f"simcore: kernels not compiled ahead of time ({exc}); they compile on "
                      "first use")


class PlatformDistribution(Distribution):
    """The wheel carries machine code for the CPU it was built on (the compiled kernels),
    so it is tagged for this Python and platform (``cp311-cp311-linux_x86_64``), not
    ``py3-none-any``."""

    def has_ext_modules(self) -> bool:
        return True


setup(cmdclass={"build_py": BuildPyAOT}, distclass=PlatformDistribution)
