"""How an expert-parallel MoE layer combines its experts' outputs in inference (change 31):
without attention DP every TP rank holds every token, so an EP group of at most
``EP_ALLREDUCE_MAX`` ranks all-reduces the outputs over TP as a dense FFN does; attention DP
or a larger EP group dispatches and combines with all-to-alls."""

from __future__ import annotations

from simcore import Workload, evaluate
from simcore.kernels.common import EP_ALLREDUCE_MAX
from simcore.model.presets import load_model

MIXTRAL = load_model("Mixtral 8x7B")
WL = Workload("decode", batch=16, s_kv=4096)


def _comm(tp, dp, ep, gpus=8):
    ds = evaluate(MIXTRAL, WL, family="H100-SXM", gpus=gpus,
                  space={"tp": (tp,), "cp": (1,), "pp": (1,), "dp": (dp,), "ep": (ep,),
                         "kv_shard_mode": ("head",)})
    return float(ds.comm_ns.min())


def test_ep_without_attention_dp__all_reduces_like_a_dense_ffn():
    assert EP_ALLREDUCE_MAX == 8  # TensorRT-LLM's blog 4: EP4 / EP8 reduce, EP > 8 all-to-all
    dense_like = _comm(8, 1, 1)
    assert _comm(8, 1, 8) == dense_like and _comm(8, 1, 4) == dense_like


def test_attention_dp__dispatches_with_all_to_alls():
    # the same 8 GPUs with attention DP 2: the a2a dispatch / combine, not the TP all-reduce
    assert _comm(4, 2, 8) != _comm(4, 2, 1)


def test_the_twin_holds_the_same_threshold():
    from simcore.kernels import common_ref

    assert common_ref.EP_ALLREDUCE_MAX == EP_ALLREDUCE_MAX
