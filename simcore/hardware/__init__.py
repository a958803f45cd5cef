"""Declarations of what it runs on: hardware families, topology and the cost model
(prices and power as functions of the knobs). Depends on :mod:`simcore.model` and
:mod:`simcore.errors`; never on the engine or kernels."""
