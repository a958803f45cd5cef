"""simcore: vectorized simulation of LLM hardware × parallelism, and a correct autotuner.

Importing simcore compiles nothing and loads nothing heavy: the public names below are
imported on first access (PEP 562), so ``simcore --version`` or a spec-only script does
not pay for xarray or numba.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.util
import sys
import types
from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

#: public name -> the module that defines it
_LAZY: dict[str, str] = {
    "DeviceBudgetError": "errors", "SimcoreInputError": "errors",
    "evaluate": "engine.evaluate", "evaluate_best": "engine.evaluate",
    "Metric": "engine.metrics", "best": "engine.metrics", "get_metric": "engine.metrics",
    "metric_is_better": "engine.metrics", "metric_value": "engine.metrics",
    "register_metric": "engine.metrics",
    "get_options": "options", "set_options": "options",
    "HARDWARE_FAMILIES": "hardware.families", "PRESETS": "model.presets",
    "get_family": "hardware.families", "get_model": "model.presets",
    "Prediction": "engine.single", "predict": "engine.single",
    "PARALLEL_DIMS": "engine.space", "Space": "engine.space", "full_space": "engine.space",
    "reduced_space": "engine.space",
    "HW_KNOBS": "hardware.specs", "Efficiency": "hardware.specs", "Hardware": "hardware.specs",
    "HardwareFamily": "hardware.specs", "Model": "model.transformer", "SpecError": "errors",
    "Topology": "hardware.specs", "Workload": "model.workload",
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
        if f"{__name__}.{name}" in LEGACY_MODULES:  # ``simcore.presets`` as before the cut
            return importlib.import_module(f".{name}", __name__)
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

#: Module paths before the package was cut by layer (issue 31) -> where they live now.
#: ``import simcore.specs`` / ``from simcore.codesign import joint_explore`` in users'
#: scripts keep working: the old name is an alias of the new module, not a copy.
LEGACY_MODULES: dict[str, str] = {
    f"{__name__}.{old}": f"{__name__}.{new}" for old, new in {
        "specs": "model.specs", "presets": "model.presets",
        "costmodel": "hardware.costmodel",
        "space": "engine.space", "engine": "engine.core", "chunks": "engine.chunks",
        "evaluate": "engine.evaluate", "single": "engine.single", "metrics": "engine.metrics",
        "pareto": "engine.pareto", "sweep": "engine.sweep", "distributed": "engine.distributed",
        "labels": "engine.labels",
        "codesign": "studies.codesign", "compare": "studies.compare",
        "serving": "studies.serving", "plot": "studies.plot", "report": "studies.report",
    }.items()
}


class _AliasLoader(importlib.abc.Loader):
    """Loads an old module path as the module now at its new path (the same object)."""

    def __init__(self, target: str) -> None:
        self.target = target

    def create_module(self, spec: Any) -> types.ModuleType:
        module = importlib.import_module(self.target)
        self.spec = module.__spec__
        return module

    def exec_module(self, module: types.ModuleType) -> None:
        """Nothing to run: the target module is already imported. The import system has
        set the module's ``__spec__`` to the alias's; give it its own back, or relative
        imports inside it would resolve against the old path."""
        module.__spec__ = self.spec


class _LegacyFinder(importlib.abc.MetaPathFinder):
    def find_spec(self, fullname: str, path: Any, target: Any = None) -> Any:
        new = LEGACY_MODULES.get(fullname)
        if new is None or fullname == "simcore.engine":
            return None  # simcore.engine is a package now; it forwards old names itself
        return importlib.util.spec_from_loader(fullname, _AliasLoader(new))


if not any(isinstance(f, _LegacyFinder) for f in sys.meta_path):
    sys.meta_path.insert(0, _LegacyFinder())


if TYPE_CHECKING:  # for type checkers and IDEs: the same names, imported eagerly
    from .engine.evaluate import evaluate, evaluate_best
    from .engine.metrics import (
        Metric,
        best,
        get_metric,
        metric_is_better,
        metric_value,
        register_metric,
    )
    from .engine.single import Prediction, predict
    from .engine.space import PARALLEL_DIMS, Space, full_space, reduced_space
    from .errors import DeviceBudgetError, SimcoreInputError, SpecError
    from .hardware.families import HARDWARE_FAMILIES, get_family
    from .hardware.specs import HW_KNOBS, Efficiency, Hardware, HardwareFamily, Topology
    from .model.presets import PRESETS, get_model
    from .model.transformer import Model
    from .model.workload import Workload
    from .options import get_options, set_options
