"""The original ``auto_hardware`` interface, for scripts written against it.

simcore grew out of an ``auto_hardware`` module; its users' scripts run unchanged apart
from the import path (``from simcore.auto_hardware import ...``). Everything here is a
re-export of :mod:`simcore.studies.codesign` and :mod:`simcore.model.presets`; nothing is redefined.

Examples
--------
>>> from simcore.auto_hardware import PRESETS, joint_explore
>>> r = joint_explore(PRESETS["Llama 3.1 8B"].model, s_kv=8192, mode="decode", depth="two_stage")
>>> r.total_joint, r.all_scores[0].total_latency_ns == r.all_scores[0].latency_ns
(1920, True)
"""

from __future__ import annotations

from .model.presets import HARDWARE_FAMILIES, PRESETS
from .studies.codesign import (
    HW_KNOB_DEFAULTS,
    HardwareCandidate,
    JointExploreResult,
    JointScore,
    SensitivityRow,
    cost_score,
    enumerate_hardware,
    joint_explore,
    sensitivity,
)

#: The original private name of the knob defaults (the SiP family's hardware).
_HW_KNOB_DEFAULTS = HW_KNOB_DEFAULTS

__all__ = [
    "HardwareCandidate",
    "JointScore",
    "JointExploreResult",
    "SensitivityRow",
    "enumerate_hardware",
    "joint_explore",
    "sensitivity",
    "cost_score",
    "PRESETS",
    "HARDWARE_FAMILIES",
    "HW_KNOB_DEFAULTS",
    "_HW_KNOB_DEFAULTS",
]
