"""Declarations of what runs: models (architecture, parameter counts, the Hugging Face
config reader), the model catalogue and named presets, and workloads (prefill, decode,
training steps). Depends only on :mod:`simcore.errors`; never on the engine or kernels."""
