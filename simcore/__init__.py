"""simcore: vectorized simulation of LLM hardware × parallelism, and a correct autotuner."""

from .metrics import Metric, best, get_metric, metric_is_better, metric_value, register_metric
from .presets import HARDWARE_FAMILIES, PRESETS, get_family, get_model
from .space import PARALLEL_DIMS, Space, full_space, reduced_space
from .specs import HW_KNOBS, Efficiency, Hardware, HardwareFamily, Model, Topology, Workload

__version__ = "0.1.0"

__all__ = [
    "HW_KNOBS", "PARALLEL_DIMS", "PRESETS", "HARDWARE_FAMILIES",
    "Efficiency", "Hardware", "HardwareFamily", "Model", "Topology", "Workload",
    "Metric", "Space", "best", "evaluate", "get_family", "get_metric", "get_model",
    "full_space", "metric_is_better", "metric_value", "reduced_space", "register_metric",
]


def __getattr__(name: str):  # lazy: importing simcore compiles nothing
    if name == "evaluate":
        from .evaluate import evaluate

        return evaluate
    raise AttributeError(f"module 'simcore' has no attribute {name!r}")
