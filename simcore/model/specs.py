"""Where every spec used to be declared; now re-exports, so old imports keep working.

The declarations live by what they declare (issue 31): :class:`Model` in
:mod:`simcore.model.transformer`, :class:`Workload` with ``MODES`` and ``DTYPE_BYTES`` in
:mod:`simcore.model.workload`, the Hugging Face ``config.json`` reader in
:mod:`simcore.model.hf`, the range checks in :mod:`simcore.model.checks`,
:class:`~simcore.errors.SpecError` in :mod:`simcore.errors`; the hardware declarations
(``Hardware``, ``Topology``, ``Efficiency``, ``HardwareFamily``, ``HW_KNOBS``,
``HW_UNITS``, ``MAX_DEVICES``) in :mod:`simcore.hardware.specs`.

The hardware layer sits above the model layer, so this module never imports it: the
moved hardware names are forwarded on first access (PEP 562), and
``from simcore.model.specs import Hardware`` (or ``simcore.specs.Hardware``) gets the
class from :mod:`simcore.hardware.specs`. New code imports them from there.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from ..errors import SpecError
from .transformer import MAX_PARAMS, Model
from .workload import DTYPE_BYTES, MODES, Workload

__all__ = [
    "DTYPE_BYTES",
    "HW_KNOBS",
    "MAX_PARAMS",
    "MODES",
    "Efficiency",
    "Hardware",
    "HardwareFamily",
    "Model",
    "SpecError",
    "Topology",
    "Workload",
]

#: names that moved up to the hardware layer -> the module that declares them now
MOVED: dict[str, str] = {
    name: "simcore.hardware.specs"
    for name in ("HW_KNOBS", "HW_UNITS", "MAX_DEVICES", "Efficiency", "Hardware",
                 "HardwareFamily", "Topology")
}


def __getattr__(name: str) -> Any:
    module = MOVED.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(module), name)


if TYPE_CHECKING:  # the forwarded names, for type checkers (through the lazy facade)
    from simcore import HW_KNOBS, Efficiency, Hardware, HardwareFamily, Topology
