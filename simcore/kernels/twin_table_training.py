"""The training kernel's physics pieces and their plain-python twins, declared once.

A piece of :mod:`simcore.kernels.training` and its twin in
:mod:`simcore.kernels.training_ref` share a name and an argument order (the twin takes
the specs where the kernel takes the packed bundles, and ``links`` where the kernel takes
its per-tier accumulators), so the table lists names; ``tests/test_pieces_training.py``
compares each pair on hypothesis-drawn training points, and checks that every public
``@jit`` function of the training kernel is listed here. Meant to become the
``# training pieces`` block of ``simcore.kernels.twin_table``.
"""

from __future__ import annotations

from typing import Any, NamedTuple

from . import training, training_ref


class TwinPair(NamedTuple):
    """A kernel piece and the twin piece of the same name."""

    name: str
    kernel: Any
    twin: Any


#: the training pieces in the order the row sums them
TRAINING_PIECES: tuple[str, ...] = (
    # the layout and its groups
    "layout_valid", "gradient_group", "ep_groups", "ep_dispatch_copies", "expert_groups",
    "work_per_device",
    # how often each op runs
    "recompute_passes", "attention_pairs",
    # per layer and micro-batch: roofline ops
    "kv_heads_per_rank", "attention_weights", "attention_projections", "kv_block_bytes",
    "attention_core", "ffn_gemms", "lm_head", "elementwise_bytes", "eager_elementwise_bytes",
    "moe_permutes", "fp8_cast_bytes",
    # per layer and micro-batch: collectives
    "group_collective", "tp_collectives", "tp_cp_ffn_collectives", "tp_ffn_share",
    "moe_alltoalls_per_layer", "moe_alltoall", "zero3_param_gathers", "cp_ring",
    "kernels_per_layer",
    # the pipeline
    "pipeline_schedule", "pipeline_p2p",
    # once per step: gradients and the optimizer
    "grad_reduce", "grad_reduce_overlap", "layer_params", "stage_params", "optimizer_step",
    # memory per device
    "zero_state_bytes", "model_states", "zero_offload", "activation_bytes_per_layer",
    "op_sac_bytes_per_layer", "activation_memory", "logit_bytes",
    # rates and the step's model FLOPs
    "matmul_rates", "model_flops",
)

# training pieces
TRAINING_TWINS: tuple[TwinPair, ...] = tuple(
    TwinPair(name, getattr(training, name), getattr(training_ref, name))
    for name in TRAINING_PIECES)
