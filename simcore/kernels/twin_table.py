"""Each physics piece of the kernels and its plain-python twin, declared once.

A piece prices one operation (``attention_core_decode``, ``moe_alltoall``, ``pp_p2p``) in a
numba kernel module; its twin, under the same name, prices it in the matching ``*_ref``
module straight from the specs. ``tests/test_pieces.py`` compares every pair on
hypothesis-drawn inputs, and checks that every jitted function of a kernel module is a
piece listed in :data:`TWINS` or a driver listed in :data:`DRIVERS`, so a new piece cannot
skip its twin.

A pair takes the same quantities under the same parameter names (the test passes them by
name): the twin takes the specs (``model``, ``workload``, ``topology``, ``lay`` a
``Layout``) where the kernel takes the packed bundles (``mp``, ``wp``, ``topo``, ``lay`` an
integer layout row), a layout's labels (``"head"``, ``"TP+CP"``, ``"kv"``) where the kernel
takes their codes, and ``links`` (GB/s, alpha ns of each tier) where the kernel takes
``acc``: a kernel collective adds its wire bytes per tier and link latency to ``acc`` and
returns its launches, its twin returns ``(ns, launches)``. Every other pair returns the
same floats.

Importing this module imports no kernel: :attr:`Twin.kernel` and :attr:`Twin.twin` import
their module on first use.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import Any

__all__ = ["DRIVERS", "TWINS", "Twin"]


@dataclass(frozen=True)
class Twin:
    """One piece: its name (the same in both modules), the kernel module under
    ``simcore.kernels`` that holds the numba piece and the module that holds its twin."""

    name: str
    kernel_module: str
    twin_module: str

    @property
    def kernel(self) -> Any:
        """The numba piece (a ``_numba.Kernel``)."""
        return getattr(importlib.import_module(f".{self.kernel_module}", __package__), self.name)

    @property
    def twin(self) -> Any:
        """The plain-python twin."""
        return getattr(importlib.import_module(f".{self.twin_module}", __package__), self.name)


TWINS: tuple[Twin, ...] = (
    # inference pieces (with the shared ones of common.py)
    Twin("tier_alpha_ns", "common", "common_ref"),
    Twin("tier_base_ns", "common", "common_ref"),
    Twin("placement", "common", "common_ref"),
    Twin("window_keys", "common", "common_ref"),
    Twin("moe_permute_bytes", "common", "common_ref"),
    Twin("attention_kernel_rate", "common", "common_ref"),
    Twin("busiest_share", "common", "common_ref"),
    Twin("ep_alltoall", "common", "common_ref"),
    Twin("precision", "inference", "inference_ref"),
    Twin("weight_only", "inference", "inference_ref"),
    Twin("layout_valid", "inference", "inference_ref"),
    Twin("token_counts", "inference", "inference_ref"),
    Twin("attention_widths", "inference", "inference_ref"),
    Twin("attention_span", "inference", "inference_ref"),
    Twin("kv_sharding", "inference", "inference_ref"),
    Twin("kv_cache_bytes", "inference", "inference_ref"),
    Twin("attention_weights", "inference", "inference_ref"),
    Twin("attention_projections", "inference", "inference_ref"),
    Twin("attention_core_decode", "inference", "inference_ref"),
    Twin("attention_core_class", "inference", "inference_ref"),
    Twin("attention_core_prefill", "inference", "inference_ref"),
    Twin("cp_ring", "inference", "inference_ref"),
    Twin("splitk_combine", "inference", "inference_ref"),
    Twin("ffn_shard", "inference", "inference_ref"),
    Twin("experts_touched", "inference", "inference_ref"),
    Twin("busiest_rank_experts", "inference", "inference_ref"),
    Twin("ffn_gemms", "inference", "inference_ref"),
    Twin("expert_gemms_ep", "inference", "inference_ref"),
    Twin("expert_slice_ns", "inference", "inference_ref"),
    Twin("mla_decode_floor", "inference", "inference_ref"),
    Twin("elementwise_bytes", "inference", "inference_ref"),
    Twin("lm_head", "inference", "inference_ref"),
    Twin("tp_allreduce", "inference", "inference_ref"),
    Twin("ffn_tpcp_allreduce", "inference", "inference_ref"),
    Twin("moe_alltoall", "inference", "inference_ref"),
    Twin("pipeline_layers", "inference", "inference_ref"),
    Twin("pp_p2p", "inference", "inference_ref"),
    Twin("weight_bytes", "inference", "inference_ref"),
    Twin("activation_bytes", "inference", "inference_ref"),
    Twin("model_flops", "inference", "inference_ref"),
    Twin("layer_launches", "inference", "inference_ref"),
    Twin("step_overheads", "inference", "inference_ref"),
    # training pieces (tests/test_pieces_training.py): a training collective adds to its
    # accumulators and returns nothing, its twin returns ns over links (grad_reduce: the
    # gradients' and the after-step all-gather's, for its tail and step accumulators)
    Twin("layout_valid", "training", "training_ref"),
    Twin("gradient_group", "training", "training_ref"),
    Twin("expert_subgroup", "training", "training_ref"),
    Twin("expert_blocks_spanned", "training", "training_ref"),
    Twin("ep_dispatch_copies", "training", "training_ref"),
    Twin("expert_groups", "training", "training_ref"),
    Twin("work_per_device", "training", "training_ref"),
    Twin("recompute_passes", "training", "training_ref"),
    Twin("attention_pairs", "training", "training_ref"),
    Twin("kv_heads_per_rank", "training", "training_ref"),
    Twin("attention_weights", "training", "training_ref"),
    Twin("attention_projections", "training", "training_ref"),
    Twin("kv_block_bytes", "training", "training_ref"),
    Twin("attention_core", "training", "training_ref"),
    Twin("ffn_gemms", "training", "training_ref"),
    Twin("lm_head", "training", "training_ref"),
    Twin("elementwise_bytes", "training", "training_ref"),
    Twin("eager_elementwise_bytes", "training", "training_ref"),
    Twin("moe_permutes", "training", "training_ref"),
    Twin("fp8_cast_bytes", "training", "training_ref"),
    Twin("group_collective", "training", "training_ref"),
    Twin("tp_collectives", "training", "training_ref"),
    Twin("tp_cp_ffn_collectives", "training", "training_ref"),
    Twin("tp_ffn_share", "training", "training_ref"),
    Twin("moe_alltoalls_per_layer", "training", "training_ref"),
    Twin("moe_alltoall", "training", "training_ref"),
    Twin("expert_tp_relayout", "training", "training_ref"),
    Twin("zero3_param_gathers", "training", "training_ref"),
    Twin("cp_ring", "training", "training_ref"),
    Twin("kernels_per_layer", "training", "training_ref"),
    Twin("pipeline_schedule", "training", "training_ref"),
    Twin("pipeline_p2p", "training", "training_ref"),
    Twin("grad_reduce", "training", "training_ref"),
    Twin("grad_reduce_overlap", "training", "training_ref"),
    Twin("layer_params", "training", "training_ref"),
    Twin("stage_params", "training", "training_ref"),
    Twin("optimizer_step", "training", "training_ref"),
    Twin("zero_state_bytes", "training", "training_ref"),
    Twin("model_states", "training", "training_ref"),
    Twin("zero_offload", "training", "training_ref"),
    Twin("activation_bytes_per_layer", "training", "training_ref"),
    Twin("op_sac_bytes_per_layer", "training", "training_ref"),
    Twin("activation_memory", "training", "training_ref"),
    Twin("logit_bytes", "training", "training_ref"),
    Twin("matmul_rates", "training", "training_ref"),
    Twin("model_flops", "training", "training_ref"),
)

#: Jitted functions of the kernel modules that are not pieces: the row drivers, the
#: hardware combine and the accumulators (tested whole against the twins' ``evaluate_point``
#: by tests/test_kernels.py).
DRIVERS: dict[str, tuple[str, ...]] = {
    "common": ("add_comm",),
    "inference": ("_coeff_row", "_no_training_terms", "_layout_coeffs", "row_rates", "_roof",
                  "per_second", "point", "coef_columns", "coef_at", "evaluate_grid",
                  "fused_best", "_point_call", "point_one"),
    "training": ("_train_row", "_layer_ops", "_write_comm", "_layout_coeffs"),
}
