"""Each training kernel piece against its twin, one to one, on hypothesis-drawn points.

A drawn training point (model, workload, topology, hardware, efficiency and a valid
layout) is taken apart by the twin's own pieces into the named quantities the pieces
take (:func:`_context`); :data:`ARGS` names, per piece, the quantities it takes in order.
The kernel gets the packed bundles (``model`` → ``ModelParams``, ...), a layout row's
tuple, and floats, ints or bools as the training row passes them; an argument named ``@...`` is a
per-tier accumulator the kernel adds a collective to: the twin gets ``links`` in place
of the first and returns one time (ns) per accumulator, compared with the accumulator's
bytes over each tier's GB/s plus its latency.
"""

from __future__ import annotations

import inspect
from dataclasses import replace

import numpy as np
import pytest
from hypothesis import assume, given
from hypothesis import strategies as st
from test_kernels import (
    _layout_row,
    efficiencies,
    hardware,
    train_layouts,
    train_models,
    train_topologies,
    train_workloads,
)

from simcore.kernels import common_ref, schema, training, training_ref
from simcore.kernels._numba import Kernel
from simcore.kernels.twin_table import DRIVERS, TWINS

REL = 1e-9
#: the training block of the twin table
TRAINING_TWINS = tuple(t for t in TWINS if t.kernel_module == "training")

#: the arguments of each piece, in order (kernel and twin alike)
ARGS: dict[str, tuple[str, ...]] = {
    "layout_valid": ("lay", "model", "workload", "topology"),
    "gradient_group": ("lay", "strides", "tier_dp", "tier_cp", "cube"),
    "expert_subgroup": ("iskip", "in_group", "itp", "icp", "idp", "strides", "cube"),
    "expert_blocks_spanned": ("expert_start", "itop_k", "in_experts", "experts_per_rank"),
    "ep_dispatch_copies": ("n_experts", "top_k", "ep", "k_ep", "round_robin"),
    "expert_groups": ("lay", "model", "workload", "strides", "topology"),
    "work_per_device": ("lay", "workload"),
    "recompute_passes": ("model", "workload"),
    "attention_pairs": ("model", "s"),
    "kv_heads_per_rank": ("model", "tp"),
    "attention_weights": ("model", "tp"),
    "attention_projections": ("model", "tokens", "tp", "bw", "p_attn"),
    "kv_block_bytes": ("model", "mb", "s", "cp", "tp", "bw"),
    "attention_core": ("model", "workload", "cp", "tp", "bw", "p_core", "causal", "pair_frac"),
    "ffn_gemms": ("model", "tokens", "ffn_tokens", "shard", "tp", "ep", "etp", "imbalance",
                  "bw", "p_ffn"),
    "lm_head": ("model", "m", "tokens", "tp", "bw"),
    "elementwise_bytes": ("model", "tokens", "tok_res", "ffn_tokens", "shard", "tp", "bw",
                          "p_elem"),
    "eager_elementwise_bytes": ("model", "tokens", "tok_res", "ffn_tokens", "shard", "tp",
                                "p_elem"),
    "moe_permutes": ("model", "ffn_rows", "bw", "p_ffn"),
    "fp8_cast_bytes": ("model", "tokens", "tok_res", "ffn_tokens", "tp", "shard", "ep_div",
                       "bw", "fwd_passes"),
    "group_collective": ("@acc", "grads", "g_sh", "k_sh", "tier_sh", "topology", "allreduce",
                         "m", "in_switch"),
    "tp_collectives": ("@acc", "act", "tp", "k_tp", "tier_tp", "topology", "n_half", "sp"),
    "tp_cp_ffn_collectives": ("@acc", "model", "mb", "s", "tp", "cp", "tier_tpcp", "tier_cp",
                              "topology", "n_half"),
    "tp_ffn_share": ("model", "ep"),
    "moe_alltoalls_per_layer": ("model", "workload"),
    "moe_alltoall": ("@acc", "model", "workload", "topology", "tokens", "tp", "ep", "k_ep",
                     "tier_ep", "n_a2a"),
    "expert_tp_relayout": ("@acc", "model", "workload", "topology", "tokens", "tp", "ep",
                           "etp", "k_etp", "tier_etp", "n_a2a"),
    "zero3_param_gathers": ("@acc", "layer_dense", "g_sh", "k_sh", "tier_sh", "topology",
                            "workload", "pw"),
    "cp_ring": ("lay", "model", "workload", "tp", "bw", "topology", "tier_cp"),
    "kernels_per_layer": ("model", "p_elem", "n_half", "n_a2a", "tp", "ep", "etp"),
    "pipeline_schedule": ("model", "pp", "m", "vs"),
    "pipeline_p2p": ("act", "tp", "pp", "vs", "m", "topology", "tier_pp"),
    "grad_reduce": ("@tail", "@step", "p_dense", "g_sh", "k_sh", "tier_sh", "zs", "m", "gb",
                    "pw", "topology"),
    "grad_reduce_overlap": ("workload", "p_ffn", "m", "per_slot"),
    "layer_params": ("model", "tp", "ep", "etp", "shard"),
    "stage_params": ("model", "layer_dense", "layer_exp", "lps", "tp", "pp"),
    "optimizer_step": ("workload", "p_dev", "p_dense", "p_exp", "g_sh", "g_edp", "use_ep"),
    "zero_state_bytes": ("zs", "sixteen_bit", "fsdp"),
    "model_states": ("workload", "p_dense", "p_exp", "p_dev", "largest", "g_sh", "g_edp", "pw",
                     "use_ep"),
    "zero_offload": ("workload", "p_dev", "p_dense", "p_exp", "largest", "g_sh", "g_edp",
                     "opt_share", "bw", "p_lin", "m", "topology", "use_ep"),
    "activation_bytes_per_layer": ("s_cp", "mb", "d", "heads", "tp", "recompute", "sp",
                                   "fp8_saved", "flash"),
    "op_sac_bytes_per_layer": ("s_cp", "mb", "d", "kv_width", "ffn_width", "gated", "tp", "sp"),
    "activation_memory": ("model", "workload", "cp", "tp", "pp", "m", "lps"),
    "logit_bytes": ("model", "workload", "tokens", "tp"),
    "matmul_rates": ("workload", "topology"),
    "model_flops": ("model", "workload", "causal", "pair_frac"),
}

#: arguments the training row passes as ints or bools (everything else a float)
INTS = {"iep", "itp", "icp", "idp", "iskip", "in_group", "tier_etp", "expert_start", "itop_k", "in_experts", "experts_per_rank", "tier_dp", "tier_cp", "tier_tp", "tier_sh", "tier_ep",
        "tier_tpcp", "tier_pp", "zs", "lps", "recompute"}
BOOLS = {"round_robin", "allreduce", "in_switch", "sp", "use_ep", "sixteen_bit", "fsdp",
         "gated", "fp8_saved", "flash"}
#: the kernel's form of an argument the twin takes as a spec
PACK = {"model": schema.pack_model, "workload": schema.pack_workload,
        "topology": schema.pack_topology,
        "lay": lambda lay: tuple(int(x) for x in _layout_row(lay)[0]),  # the row's tuple
        "strides": lambda st: tuple(int(x) for x in st),
        "recompute": lambda rc: schema.RECOMPUTE_CODES[rc]}


@st.composite
def training_points(draw):
    """A valid training point; expert parallelism kept where its groups are valid."""
    model, workload = draw(train_models()), draw(train_workloads())
    topology, lay = draw(train_topologies), draw(train_layouts)
    kvh = training_ref._kv_heads(model)
    tps = [t for t in (1, 2, 4, 8, 16) if model.n_heads % t == 0
           and ((kvh % t == 0) if t <= kvh else (t % kvh == 0))]
    lay = replace(lay, tp=draw(st.sampled_from(tps)), pp=min(lay.pp, model.n_layers),
                  cp=min(lay.cp, workload.s_kv), kv_shard_mode="head")
    if model.n_experts > 1 and draw(st.booleans()):  # toward expert parallelism's region
        lay = replace(lay, ffn_shard_scope="TP", ep=min(max(lay.ep, 2), model.n_experts))
        workload = replace(workload, sequence_parallel=True)
    # expert TP and the busiest rank's load (kept where the groups allow them, below)
    workload = replace(workload, expert_tp=draw(st.sampled_from([1, 1, 2, 4])),
                       moe_load_imbalance=draw(st.sampled_from([1.0, 1.0, 1.3, 2.5])))
    workload = replace(workload, batch=workload.micro_batch * lay.dp * draw(st.integers(1, 8)))
    assume(training_ref.layout_valid(lay, model, workload, topology))
    if lay.ep > 1:
        strides = common_ref.placement(lay, topology)[0]
        if not training_ref.expert_groups(lay, model, workload, strides, topology)[0]:
            workload = replace(workload, expert_tp=1)
        if not training_ref.expert_groups(lay, model, workload, strides, topology)[0]:
            lay = replace(lay, ep=1)
    if lay.ep == 1:
        workload = replace(workload, expert_tp=1)
    # arguments some pieces take besides the point's own (a collective's kind, ...)
    extra = st.fixed_dictionaries({
        **{k: st.booleans() for k in ("allreduce", "in_switch", "sixteen_bit", "fsdp")},
        "recompute": st.sampled_from(["none", "selective", "full"]),
        "expert_start": st.integers(0, 255), "expert_block": st.integers(1, 256),
        "iskip": st.sampled_from([1, 2, 4, 8, 16]), "in_group": st.sampled_from([1, 2, 4, 8])})
    return model, workload, topology, draw(hardware), draw(efficiencies), lay, draw(extra)


def _context(model, workload, topology, hw, eff, lay, extra) -> dict:
    """The named quantities of a training point, from the twin's pieces."""
    tr = training_ref
    cube = topology.pes_per_cube
    strides, t_tp, t_cp, t_pp, t_dp, t_tpcp = common_ref.placement(lay, topology)
    g_sh, k_sh, t_sh = tr.gradient_group(lay, strides, t_dp, t_cp, cube)
    g_edp, k_ep, t_ep, k_edp, t_edp, k_etp, t_etp = 1, 1, 0, 1, 0, 1, 0
    if lay.ep > 1:
        _, g_edp, k_ep, t_ep, k_edp, t_edp, k_etp, t_etp = tr.expert_groups(
            lay, model, workload, strides, topology)
    m, tokens, tok_res, ffn_tokens, shard, _ = tr.work_per_device(lay, workload)
    p_lin, p_attn, p_ffn, p_elem, p_core, n_half = tr.recompute_passes(model, workload)
    causal, pair_frac = tr.attention_pairs(model, workload.s_kv)
    wb = model.bytes_per_param
    etp = workload.expert_tp
    layer_dense, layer_exp = tr.layer_params(model, lay.tp, lay.ep, etp, shard)
    lps, per_slot, _ = tr.pipeline_schedule(model, lay.pp, m, workload.virtual_stages)
    p_dense, p_exp = tr.stage_params(model, layer_dense, layer_exp, lps, lay.tp, lay.pp)
    use_ep = lay.ep > 1
    opt_share, _ = tr.optimizer_step(workload, p_dense + p_exp, p_dense, p_exp, g_sh, g_edp,
                                     use_ep)
    return dict(
        {k: v for k, v in extra.items() if not k.startswith("expert_")}, model=model, workload=workload, topology=topology, lay=lay, strides=strides,
        links=training_ref._links(hw, topology, eff), cube=cube,
        tp=lay.tp, cp=lay.cp, pp=lay.pp, ep=lay.ep, iep=lay.ep, itp=lay.tp, icp=lay.cp,
        idp=lay.dp, tier_tp=t_tp, tier_cp=t_cp, tier_pp=t_pp, tier_dp=t_dp, tier_tpcp=t_tpcp,
        g_sh=g_sh, k_sh=k_sh, tier_sh=t_sh, g_edp=g_edp, k_ep=k_ep, tier_ep=t_ep,
        etp=etp, k_etp=k_etp, tier_etp=t_etp, imbalance=workload.moe_load_imbalance,
        k_tp=training_ref._per_cube(lay.tp, strides[0], cube),
        n_experts=model.n_experts, top_k=model.top_k, itop_k=model.top_k,
        in_experts=model.n_experts, expert_start=extra["expert_start"] % model.n_experts,
        experts_per_rank=1 + (extra["expert_block"] - 1) % model.n_experts,
        round_robin=workload.moe_routing == "round_robin",
        m=m, tokens=tokens, tok_res=tok_res, ffn_tokens=ffn_tokens, shard=shard,
        ep_div=lay.tp if use_ep else 1, ffn_rows=ffn_tokens / (lay.tp if use_ep else 1),
        p_lin=p_lin, p_attn=p_attn, p_ffn=p_ffn, p_elem=p_elem, p_core=p_core, n_half=n_half,
        fwd_passes=p_lin - 2, causal=causal, pair_frac=pair_frac, s=workload.s_kv,
        mb=workload.micro_batch, bw=wb, pw=1 if workload.weight_dtype == "fp8" else wb,
        act=tokens * model.d_model * wb, grads=p_dense * workload.grad_bytes,
        n_a2a=tr.moe_alltoalls_per_layer(model, workload) if use_ep else 0.0,
        layer_dense=layer_dense, layer_exp=layer_exp, lps=lps, per_slot=per_slot,
        vs=workload.virtual_stages, p_dense=p_dense, p_exp=p_exp, p_dev=p_dense + p_exp,
        largest=max(layer_dense + layer_exp, model.vocab_size * model.d_model / lay.tp),
        opt_share=opt_share, use_ep=use_ep, zs=workload.zero_stage, gb=workload.grad_bytes,
        sp=workload.sequence_parallel, s_cp=workload.s_kv / lay.cp, d=model.d_model,
        heads=model.n_heads,
        fp8_saved=workload.act_dtype == "fp8",
        flash=workload.attention in ("flash", "flash2"), gated=model.gated_ffn,
        kv_width=tr.kv_heads_per_rank(model, lay.tp) * model.head_dim,
        ffn_width=model.ffn_active_params_per_layer
        / ((3 if model.gated_ffn else 2) * model.d_model) / lay.tp,
    )


def _kernel_value(name: str, value):
    if name in PACK:
        return PACK[name](value)
    if name in BOOLS:
        return bool(value)
    return int(value) if name in INTS else float(value)


def _seconds(acc, links) -> float:
    """An accumulator's time (ns): wire bytes per tier over its GB/s, plus the latency."""
    return sum(acc[t] / links[t][0] for t in range(3)) + acc[3]


def _compare(got, want, name):
    if want is None:  # undefined where the twin says the layout is invalid
        return
    if isinstance(want, tuple):
        assert isinstance(got, tuple) and len(got) == len(want), name
        for g, w in zip(got, want, strict=True):
            _compare(g, w, name)
        return
    if isinstance(want, bool):
        assert bool(got) == want, name
        return
    assert got == pytest.approx(want, rel=REL, abs=1e-9), name


def _check(pair, ctx: dict) -> None:
    """Call the kernel piece and its twin with the arguments :data:`ARGS` names from
    ``ctx`` and compare what they return."""
    args = ARGS[pair.name]
    accs = [np.zeros(4) for a in args if a.startswith("@")]
    kernel_args, twin_args, it = [], [], iter(accs)
    for a in args:
        if a.startswith("@"):  # the twin takes the links once, for all its accumulators
            kernel_args.append(next(it))
            if len(kernel_args) == 1:
                twin_args.append(ctx["links"])
            continue
        kernel_args.append(_kernel_value(a, ctx[a]))
        twin_args.append(ctx[a])
    got = pair.kernel(*kernel_args)
    want = pair.twin(*twin_args)
    if accs:
        got = tuple(_seconds(acc, ctx["links"]) for acc in accs)
        want = want if isinstance(want, tuple) else (want,)
    _compare(got, want, pair.name)


@pytest.mark.parametrize("pair", TRAINING_TWINS, ids=lambda p: p.name)
@given(point=training_points())
def test_training_piece__matches_twin(pair, point):
    _check(pair, _context(*point))


#: the pieces that decide validity, also drawn on layouts that are not valid
VALIDITY = tuple(p for p in TRAINING_TWINS
                 if p.name in ("layout_valid", "expert_subgroup", "expert_groups"))


@pytest.mark.parametrize("pair", VALIDITY, ids=lambda p: p.name)
@given(model=train_models(), workload=train_workloads(), topology=train_topologies,
       lay=train_layouts, etp=st.sampled_from([1, 2, 4]))
def test_training_validity_piece__matches_twin_on_any_layout(pair, model, workload, topology,
                                                             lay, etp):
    workload = replace(workload, expert_tp=etp)
    _check(pair, dict(model=model, workload=workload, topology=topology, lay=lay,
                      strides=common_ref.placement(lay, topology)[0], cube=topology.pes_per_cube,
                      iep=lay.ep, itp=lay.tp, icp=lay.cp, idp=lay.dp, iskip=lay.ep,
                      in_group=lay.tp))


def test_training_pieces__every_kernel_piece_has_a_twin_entry():
    jitted = {name for name, fn in vars(training).items()
              if isinstance(fn, Kernel) and fn.py_func.__module__ == training.__name__}
    listed = {p.name for p in TRAINING_TWINS}
    assert jitted == listed | set(DRIVERS["training"])
    assert not listed & set(DRIVERS["training"])
    assert set(ARGS) == listed
    # a piece and its twin share their parameter names: the specs for the packed bundles,
    # the links for the accumulators
    spec = {"mp": "model", "wp": "workload", "topo": "topology", "acc": "links",
            "tail": "links"}
    for p in TRAINING_TWINS:
        kernel = [spec.get(n, n) for n in inspect.signature(p.kernel.py_func).parameters
                  if n != "step"]
        assert kernel == list(inspect.signature(p.twin).parameters), p.name
        assert len(ARGS[p.name]) == len(inspect.signature(p.kernel.py_func).parameters), p.name


def test_training_pieces__no_function_over_120_lines():
    # the row function stays a sum of named pieces
    import ast
    import inspect

    for module in (training, training_ref):
        tree = ast.parse(inspect.getsource(module))
        longest = max((n.end_lineno - n.lineno + 1, n.name) for n in tree.body
                      if isinstance(n, ast.FunctionDef))
        assert longest[0] <= 120, (module.__name__, longest)


def test_training_row__copies_every_layout_column():
    # _train_row hands the pieces its layout row as a tuple of the LAYOUT columns
    source = inspect.getsource(training._train_row.py_func)
    assert all(f"row[{i}]" in source for i in range(len(schema.LAYOUT)))
    assert f"row[{len(schema.LAYOUT)}]" not in source
