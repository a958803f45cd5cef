"""``simcore serving``: the serving planner (:mod:`simcore.studies.serving`) on the command line.

Options and the handler live with the planner (``serving.add_arguments``,
``serving.run``); this module registers them in the command table. Bad input exits 2
with one line, "nothing meets the limits" exits 1 and says which limit binds.
"""

from __future__ import annotations

from typing import Any

__all__ = ["add_parser"]


def add_parser(sub: Any, name: str, help: str) -> None:
    from ..studies import serving

    p = sub.add_parser(
        name, help=help,
        description="Plan LLM serving on a GPU budget: search layouts x batch for aggregated "
                    "and disaggregated (prefill / decode workers) deployments, rank those that "
                    "meet the TTFT / TPOT limits by tokens/s per GPU, and print the frontier "
                    "of tokens/s per GPU vs tokens/s per user.")
    serving.add_arguments(p)
    p.set_defaults(func=serving.run)
