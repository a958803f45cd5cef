"""simcore: vectorized simulation of LLM hardware × parallelism, and a correct autotuner.

Importing simcore compiles nothing: kernel modules load on first use.
"""

from .errors import SimcoreInputError
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

__version__ = "0.1.0"

__all__ = [
    "HW_KNOBS", "PARALLEL_DIMS", "PRESETS", "HARDWARE_FAMILIES",
    "Efficiency", "Hardware", "HardwareFamily", "Model", "Topology", "Workload",
    "Metric", "Space", "best", "evaluate", "evaluate_best", "get_family", "get_metric", "get_model",
    "full_space", "metric_is_better", "metric_value", "reduced_space", "register_metric",
    "Prediction", "SimcoreInputError", "SpecError", "predict", "get_options", "set_options",
]

