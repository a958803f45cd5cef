"""numba kernels over bare arrays, each with a plain-python twin in ``*_ref.py``.

Import the kernel modules lazily (``simcore.kernels.inference``) so ``import simcore``
compiles nothing.
"""
