"""``simcore tune`` and ``simcore rank``: a thin wrapper over :mod:`simcore.autotune.cli`.

The autotuner's command line is being rewritten with the package, so this module only
registers its two sub-parsers (options, defaults and handlers unchanged) under the names
and help of the command table. Its options do not yet use the shared builders of
:mod:`simcore.cli.options` (``--seq-len``, ``--family`` default ``A100-80G``,
``--out DIR``); see the module of each command for what it takes.
"""

from __future__ import annotations

from typing import Any

__all__ = ["add_parser"]


class _OneOf:
    """A sub-parsers stand-in that lets one of ``add_tune_parsers``' commands through."""

    def __init__(self, sub: Any, name: str, help: str) -> None:
        self._sub, self._name, self._help = sub, name, help

    def add_parser(self, name: str, **kw: Any) -> Any:
        if name != self._name:
            from .options import Parser

            return Parser(prog=f"simcore {name}", add_help=False)  # the other one: discarded
        kw["help"] = self._help
        return self._sub.add_parser(name, **kw)


def add_parser(sub: Any, name: str, help: str) -> None:
    """Register ``name`` (``tune`` or ``rank``) from :func:`~simcore.autotune.cli.add_tune_parsers`."""
    from ..autotune.cli import add_tune_parsers

    one = _OneOf(sub, name, help)
    add_tune_parsers(one)
