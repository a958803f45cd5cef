"""The one error type for user mistakes.

Anything raised as :class:`SimcoreInputError` (or a subclass) is bad input: the CLI
prints its message as one line and exits with code 2. Every other exception is a bug in
simcore and is shown as one.
"""

from __future__ import annotations

__all__ = ["DeviceBudgetError", "SimcoreInputError", "SimcoreRetryError", "SpecError",
           "SweepInterrupted", "interrupt_behind"]


class SimcoreInputError(ValueError):
    """Bad input from the user: the message names what was passed and what to pass instead.

    It subclasses ``ValueError`` so callers that caught ``ValueError`` keep working.

    Examples
    --------
    >>> try:
    ...     raise SimcoreInputError("--batch must be a positive integer, got '0'")
    ... except ValueError as exc:
    ...     print(exc)
    --batch must be a positive integer, got '0'
    """


class SpecError(SimcoreInputError):
    """A spec received a value it cannot represent (a model, workload, hardware point,
    topology or hardware family file; ``simcore.SpecError``).

    The message is one line naming the field, what it accepts and what it got.

    Examples
    --------
    >>> from simcore import Workload
    >>> Workload("decode", batch=1e20)
    Traceback (most recent call last):
    ...
    simcore.errors.SpecError: Workload.batch must be an integer in [1, 10000000] (sequences per step), got 1e+20
    """


class DeviceBudgetError(SimcoreInputError):
    """A device budget (``gpus=N``) on which nothing fits, though a larger one would.

    ``gpus`` and ``exact`` are the budget asked for; ``fitting`` the device counts on
    which some layout fits (ascending; empty if none does at any count) and
    ``min_devices`` the smallest of them (None if none).
    """

    def __init__(self, message: str, *, gpus: int, exact: bool,
                 fitting: tuple[int, ...] = ()) -> None:
        super().__init__(message)
        self.gpus, self.exact, self.fitting = gpus, exact, tuple(fitting)
        self.min_devices = self.fitting[0] if self.fitting else None


class SimcoreRetryError(RuntimeError):
    """A run stopped by its environment, not by its input: the checkpoint store is in use
    by another run, every dask worker was lost, the disk filled up mid-sweep. Rerunning
    the same command later (with the same ``--resume`` store) loses nothing. The CLI
    prints its message as one line and exits with code 75 (``EX_TEMPFAIL``).
    """


class SweepInterrupted(KeyboardInterrupt):
    """Ctrl-C between two chunks of a sweep; ``str()`` says how many chunks are saved.

    A :class:`KeyboardInterrupt`, so code that handles Ctrl-C keeps working; the CLI
    prints the message as one line and exits with code 130.
    """

    def __init__(self, message: str = "interrupted", *, saved: int = 0, total: int = 0) -> None:
        super().__init__(message)
        self.saved, self.total = saved, total


def interrupt_behind(exc: BaseException) -> KeyboardInterrupt | None:
    """The ``KeyboardInterrupt`` in ``exc``'s cause/context chain, if any: e.g. numba's
    ``SystemError: ... returned a result with an exception set`` when Ctrl-C lands
    inside a kernel."""
    seen: set[int] = set()
    cur: BaseException | None = exc
    while cur is not None and id(cur) not in seen:
        if isinstance(cur, KeyboardInterrupt):
            return cur
        seen.add(id(cur))
        cur = cur.__cause__ or cur.__context__
    return None
