"""simcore: vectorized simulation of LLM hardware × parallelism, and a correct autotuner.

Importing simcore compiles nothing and loads nothing heavy: the public names below are
imported on first access (PEP 562), so ``simcore --version`` or a spec-only script does
not pay for xarray or numba.
"""

from __future__ import annotations

import importlib
import sys
import types
from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

#: public name -> the module that defines it
_LAZY: dict[str, str] = {
    "DeviceBudgetError": "errors", "SimcoreInputError": "errors",
    "evaluate": "evaluate", "evaluate_best": "evaluate",
    "Metric": "metrics", "best": "metrics", "get_metric": "metrics",
    "metric_is_better": "metrics", "metric_value": "metrics", "register_metric": "metrics",
    "get_options": "options", "set_options": "options",
    "HARDWARE_FAMILIES": "presets", "PRESETS": "presets", "get_family": "presets",
    "get_model": "presets",
    "Prediction": "single", "predict": "single",
    "PARALLEL_DIMS": "space", "Space": "space", "full_space": "space", "reduced_space": "space",
    "HW_KNOBS": "specs", "Efficiency": "specs", "Hardware": "specs", "HardwareFamily": "specs",
    "Model": "specs", "SpecError": "specs", "Topology": "specs", "Workload": "specs",
}

__all__ = [
    "DeviceBudgetError", "HARDWARE_FAMILIES", "HW_KNOBS", "PARALLEL_DIMS", "PRESETS", "Efficiency", "Hardware",
    "HardwareFamily", "Metric", "Model", "Prediction", "SimcoreInputError", "Space",
    "SpecError", "Topology", "Workload", "best", "evaluate", "evaluate_best", "full_space",
    "get_family", "get_metric", "get_model", "get_options", "metric_is_better",
    "metric_value", "predict", "reduced_space", "register_metric", "set_options",
]
assert sorted(__all__) == sorted(_LAZY)


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'simcore' has no attribute {name!r}")
    value = getattr(importlib.import_module(f".{module}", __name__), name)
    globals()[name] = value  # later accesses skip this function
    return value


def __dir__() -> list[str]:
    return sorted([*globals(), *_LAZY])


class _Package(types.ModuleType):
    """``simcore``: importing the submodule ``simcore.evaluate`` must not replace the
    public function ``simcore.evaluate`` (the import system sets the submodule as a
    package attribute; an eager ``from .evaluate import evaluate`` used to overwrite it)."""

    def __setattr__(self, name: str, value: Any) -> None:
        if name in _LAZY and isinstance(value, types.ModuleType):
            return
        super().__setattr__(name, value)


sys.modules[__name__].__class__ = _Package


if TYPE_CHECKING:  # for type checkers and IDEs: the same names, imported eagerly
    from .errors import DeviceBudgetError, SimcoreInputError
    from .evaluate import evaluate, evaluate_best
    from .metrics import Metric, best, get_metric, metric_is_better, metric_value, register_metric
    from .options import get_options, set_options
    from .presets import HARDWARE_FAMILIES, PRESETS, get_family, get_model
    from .single import Prediction, predict
    from .space import PARALLEL_DIMS, Space, full_space, reduced_space
    from .specs import (
        HW_KNOBS,
        Efficiency,
        Hardware,
        HardwareFamily,
        Model,
        SpecError,
        Topology,
        Workload,
    )
