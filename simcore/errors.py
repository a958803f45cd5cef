"""The one error type for user mistakes.

Anything raised as :class:`SimcoreInputError` (or a subclass) is bad input: the CLI
prints its message as one line and exits with code 2. Every other exception is a bug in
simcore and is shown as one.
"""

from __future__ import annotations

__all__ = ["SimcoreInputError"]


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
