"""Every inference physics piece against its plain-python twin, one pair at a time.

The pairs are declared once in ``simcore.kernels.twin_table.TWINS``; a pair takes the
same quantities under the same parameter names, so each side's arguments are read by
name from one drawn case: the specs, the layout and the intermediate quantities of its
row (worked out with the twin's pieces, handed to the kernel piece in the kernel's
types). A piece of plain scalars draws them from :data:`SCALAR_ARGS` instead.
"""

from __future__ import annotations

import importlib
import inspect
import math
from dataclasses import replace

import numpy as np
import pytest
from hypothesis import assume, given
from hypothesis import strategies as st
from simcore.space import CHOICES
from test_kernels import _layout_row, efficiencies, hardware, layouts, models, topologies, workloads

from simcore.kernels import common_ref, schema
from simcore.kernels import inference_ref as ref
from simcore.kernels._numba import Kernel
from simcore.kernels.twin_table import DRIVERS, TWINS

REL = 1e-9

#: the pairs this file compares (the training pairs have their own test)
PAIRS = [t for t in TWINS if t.kernel_module in ("common", "inference")]


@st.composite
def _experts(draw):
    n_experts = draw(st.sampled_from([1.0, 2.0, 8.0, 64.0, 256.0]))
    return n_experts, float(draw(st.integers(1, min(8, int(n_experts))))), draw(st.floats(1.0, 1e6))


#: pieces of plain scalars: their positional arguments, the same for both sides
SCALAR_ARGS = {
    "window_keys": st.tuples(st.integers(0, 300_000), st.integers(1, 300_000)).map(
        lambda t: (float(t[0]), float(t[1]))),
    "moe_permute_bytes": st.tuples(st.integers(1, 8).map(float), st.integers(1, 16384).map(float),
                                   st.sampled_from([0.5, 1.0, 2.0]), st.floats(0.0, 1e7)),
    "experts_touched": _experts(),
    "busiest_rank_experts": _experts().flatmap(lambda e: st.sampled_from(
        [d for d in (1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 64.0) if d <= e[0] and e[0] % d == 0]
    ).map(lambda ep: (*e, ep))),
}


def _legal(lay, model, workload, topo):
    """The drawn layout moved toward a legal one (the pieces price legal layouts)."""
    cp, tp, pp, dp, ep = lay.cp, math.gcd(lay.tp, model.n_heads), lay.pp, lay.dp, lay.ep
    pp, dp = min(pp, model.n_layers), min(dp, workload.batch)
    while cp > (workload.s_kv if workload.mode == "decode" else min(workload.s_q, workload.s_kv)):
        cp //= 2
    while cp * tp * pp * dp > topo.n_devices:
        if cp > 1:
            cp //= 2
        elif dp > 1 or pp > 1:
            dp = pp = 1
        else:
            tp //= 2
    kvh, kvm = ref.cache_heads(model), lay.kv_shard_mode
    if kvm == "head" and not ((kvh % tp == 0) if tp <= kvh else (tp % kvh == 0)):
        kvm = "seq"
    if kvm == "head_seq" and not (tp > kvh and tp % kvh == 0):
        kvm = "seq"
    ffs = lay.ffn_shard_scope
    if ep > 1 and (model.n_experts % ep or (tp * dp) % ep):
        ep = 1
    if ep > 1 and cp > 1:
        ffs = "TP"
    return replace(lay, cp=cp, tp=tp, pp=pp, dp=dp, ep=ep, kv_shard_mode=kvm, ffn_shard_scope=ffs)


#: pieces priced in one mode only (the row calls them for that mode)
MODE = {"attention_core_prefill": "prefill", "attention_core_decode": "decode",
        "attention_core_class": "decode"}


#: the runtime settings and the weight-only formats the pieces read, beyond test_kernels'
#: workloads and topologies (weight-only GEMM rates, a FlashAttention-2-class core, the
#: serving loop's host time per step and per sequence, group sizes and zero points)
_RUNTIME = dict(attention=st.sampled_from(["flash", "flash", "flash2", "unfused"]),
                host_step_ns=st.sampled_from([0.0, 0.0, 4e6]) | st.floats(0.0, 1e7),
                host_seq_ns=st.sampled_from([0.0, 0.0, 12_800.0]) | st.floats(0.0, 1e5),
                quant_group=st.sampled_from([128, 128, 32, 64, 0, 1]),
                quant_zeros=st.sampled_from(["none", "packed", "fp16"]))
_WO_RATES = dict(wo_int4_bw_ratio=st.sampled_from([1.0, 4.98 / 2.30 * 0.5 / 2.0]) | st.floats(0.01, 1.0),
                 wo_int8_bw_ratio=st.sampled_from([1.0, 3.46 / 2.30 * 1.0 / 2.0]) | st.floats(0.01, 1.0),
                 wo_mm_ratio=st.sampled_from([1.0, 0.816]) | st.floats(0.01, 1.0))


@st.composite
def cases(draw, legal: bool = True, mode: str | None = None):
    workload = draw(workloads().filter(lambda w: mode in (None, w.mode)))
    workload = replace(workload, **{k: draw(v) for k, v in _RUNTIME.items()})
    model, topo = draw(models()), draw(topologies)
    topo = replace(topo, **{k: draw(v) for k, v in _WO_RATES.items()})
    lay = draw(layouts)
    if legal:
        lay = _legal(lay, model, workload, topo)
        assume(ref.layout_valid(lay, model, workload, topo))
    return model, workload, draw(hardware), topo, draw(efficiencies), lay, draw(st.integers(0, 2))


def _twin_env(model, workload, hw, topo, eff, lay, tier) -> dict:
    """The twin's arguments by name: specs, layout labels, ``links`` and the row's
    intermediate quantities through the twin's own pieces."""
    decode = workload.mode == "decode"
    env = dict(model=model, workload=workload, topology=topo, lay=lay, decode=decode, tier=tier,
               s_q=workload.s_q, s_kv=workload.s_kv, mix_ctx=workload.prefill_context,
               cp=lay.cp, tp=lay.tp, pp=lay.pp, dp=lay.dp, ep=lay.ep, kvm=lay.kv_shard_mode,
               ffs=lay.ffn_shard_scope, ring=lay.cp_ring_variant,
               links=ref.hardware_rates(hw, topo, eff, workload)[3])

    def put(names: str, *values) -> None:
        env.update(zip(names.split(), values, strict=True))

    put("bytes_per_weight bytes_per_act bytes_per_kv bytes_per_msg mm_rate",
        *ref.precision(model, workload, topo))
    put("strides tier_tp tier_cp tier_pp tier_dp tier_tpcp", *common_ref.placement(lay, topo))
    put("tokens", ref.token_counts(lay.dp, lay.pp, lay.cp, workload))
    put("qk vd", *ref.attention_widths(model, decode))
    put("causal s_cache pair_frac ctx_mix",
        *ref.attention_span(model, workload.s_q, workload.s_kv, workload.prefill_context))
    put("shard", ref.kv_sharding(lay.kv_shard_mode, lay.tp, model))
    put("kv_read kv_held", *_call(ref.kv_cache_bytes, env))
    put("ffn_ranks ffn_tokens", *_call(ref.ffn_shard, env))
    put("attn_w", _call(ref.attention_weights, env))
    if decode:  # the decode core's two FLOP counts, which attention_core_class prices
        put("flops_cached flops_mixed", *_call(ref.attention_core_decode, env)[:2])
    put("act_bytes", env["tokens"][4] * model.d_model * env["bytes_per_msg"])
    put("layers_per_stage layer_mult micro", *_call(ref.pipeline_layers, env))
    put("n_ops", ref.layer_launches(model) + 2)
    put("seqs", env["tokens"][0])
    return env


#: quantities the kernel row holds as integers (the other numbers are float64)
_INTS = {"cp", "tp", "pp", "dp", "ep", "tier", "tier_tp", "tier_cp", "tier_pp", "tier_dp",
         "tier_tpcp", "layers_per_stage"}
#: a layout's labels in the twin, its codes (index into ``CHOICES``) in the kernel
_CODES = {"kvm": "kv_shard_mode", "ffs": "ffn_shard_scope", "ring": "cp_ring_variant",
          "tpp": "tp_placement", "cpp": "cp_placement"}


def _kernel_env(twin_env: dict, model, workload, topo, lay) -> dict:
    """The kernel piece's arguments by name: the same quantities in the kernel row's types,
    the packed bundles, the integer layout row and its codes, and a zeroed ``acc``."""
    env = {}
    for name, value in twin_env.items():
        if name in _INTS:
            value = int(value)
        elif isinstance(value, float | int) and not isinstance(value, bool):
            value = float(value)
        env[name] = value
    t = twin_env["tokens"]
    wp = schema.pack_workload(workload)
    env.update(
        tokens=(int(t[0]), float(t[1]), int(t[2]), float(t[3]), float(t[4]), float(t[5])),
        shard=tuple(float(v) for v in twin_env["shard"]),
        strides=tuple(int(v) for v in twin_env["strides"]),
        mp=schema.pack_model(model), wp=wp, topo=schema.pack_topology(topo),
        lay=_layout_row(lay)[0], s_q=wp.s_q, s_kv=wp.s_kv, mix_ctx=wp.mix_ctx, acc=np.zeros(4),
        **{code: CHOICES[dim].index(getattr(lay, dim)) for code, dim in _CODES.items()},
    )
    return env


def _call(fn, env: dict):
    params = inspect.signature(getattr(fn, "py_func", fn)).parameters
    return fn(*(env[p] for p in params))


def _flat(value) -> list:
    if isinstance(value, tuple):
        return [x for v in value for x in _flat(v)]
    return [value]


def _assert_same(name: str, got, want) -> None:
    got, want = _flat(got), _flat(want)
    assert len(got) == len(want), (name, got, want)
    for i, (g, w) in enumerate(zip(got, want, strict=True)):
        if isinstance(w, bool):
            assert bool(g) == w, (name, i)
        else:
            assert math.isclose(g, w, rel_tol=REL, abs_tol=1e-9), (name, i, g, w)


@pytest.mark.parametrize("pair", PAIRS, ids=[t.name for t in PAIRS])
@given(data=st.data())
def test_piece__matches_twin(pair, data):
    if pair.name in SCALAR_ARGS:
        args = data.draw(SCALAR_ARGS[pair.name])
        _assert_same(pair.name, pair.kernel(*args), pair.twin(*args))
        return
    model, workload, hw, topo, eff, lay, tier = data.draw(
        cases(legal=pair.name != "layout_valid", mode=MODE.get(pair.name)))
    twin_env = _twin_env(model, workload, hw, topo, eff, lay, tier)
    kernel_env = _kernel_env(twin_env, model, workload, topo, lay)
    got, want = _call(pair.kernel, kernel_env), _call(pair.twin, twin_env)
    if "acc" in inspect.signature(pair.kernel.py_func).parameters:  # a collective: its time
        acc, links = kernel_env["acc"], twin_env["links"]
        got = (sum(acc[t] / links[t][0] for t in range(3)) + acc[3], got)
    _assert_same(pair.name, got, want)


def test_twin_table__every_kernel_piece_has_its_twin():
    """Every jitted function of a kernel module is a piece in TWINS or a driver in DRIVERS,
    and every pair names a numba piece and a plain function of its name."""
    modules = {t.kernel_module for t in TWINS} | set(DRIVERS)
    for module in sorted(modules):
        mod = importlib.import_module(f"simcore.kernels.{module}")
        jitted = {name for name, obj in vars(mod).items()
                  if isinstance(obj, Kernel) and obj.py_func.__module__ == mod.__name__}
        declared = {t.name for t in TWINS if t.kernel_module == module}
        missing = jitted - declared - set(DRIVERS.get(module, ()))
        assert not missing, (f"simcore/kernels/{module}.py: jitted functions with no twin in "
                             f"twin_table.TWINS (nor in DRIVERS): {sorted(missing)}")
        assert not (set(DRIVERS.get(module, ())) - jitted), "DRIVERS names a missing function"
    assert len({(t.kernel_module, t.name) for t in TWINS}) == len(TWINS)
    for t in TWINS:
        assert isinstance(t.kernel, Kernel) and t.kernel.py_func.__name__ == t.name, t
        assert inspect.isfunction(t.twin) and t.twin.__name__ == t.name, t
