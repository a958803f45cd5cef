"""The engine: layout spaces (:mod:`.space`), the one door into the kernels
(:mod:`.core`), labelled evaluation (:mod:`.evaluate`, :mod:`.single`), the metric
registry and reductions (:mod:`.metrics`, :mod:`.pareto`), chunked / resumable /
distributed sweeps (:mod:`.chunks`, :mod:`.sweep`, :mod:`.distributed`) and the labels of
Dataset variables (:mod:`.labels`).

``simcore.engine`` was one module before the package was cut by layer; its names are
forwarded from :mod:`.core` on first access, so ``from simcore.engine import prepare``
keeps working without importing numba at package import.
"""

from __future__ import annotations

import importlib
from typing import Any


def __getattr__(name: str) -> Any:
    if name.startswith("__"):
        raise AttributeError(name)
    core = importlib.import_module(".core", __name__)
    try:
        return getattr(core, name)
    except AttributeError:
        raise AttributeError(f"module 'simcore.engine' has no attribute {name!r}") from None
