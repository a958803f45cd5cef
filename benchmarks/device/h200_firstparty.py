"""First-party measurements on one NVIDIA H200 (or any CUDA GPU) for simcore's validation data.

    python benchmarks/device/h200_firstparty.py --out "$OUT" --budget-s 480 [--commit SHA]
    python benchmarks/device/h200_firstparty.py --dry-run      # schedule + runtime estimate, no torch
    python benchmarks/device/h200_firstparty.py --quick --out /tmp/q   # tiny sizes, smoke test

Sections, most valuable first (``--sections`` picks a subset):

- ``decode``: a random-weight Llama-3.1-8B-shaped decoder written here in plain PyTorch
  (bf16, preallocated KV cache), one decode step at batch {1, 8, 64, 256} × context
  {1K, 8K, 32K}, eager and replayed from a CUDA graph; combinations whose KV cache is over
  ``--mem-cap-gib`` are listed as ``skipped (memory)``.
- ``gemm``: bf16 ``torch.matmul`` and FP8 ``torch._scaled_mm`` (e4m3 inputs, per-tensor
  scales, bf16 output) for M = 1 … 8192 over Llama-3.1-8B's projection shapes and the
  70B model's TP8 shards.
- ``hbm``: device-to-device copy bandwidth (bytes read + bytes written over time), 1 MiB … 4 GiB.
- ``prefill``: the same decoder's prefill at 1K / 8K / 32K tokens, batch 1, eager.
- ``sdpa``: ``scaled_dot_product_attention`` alone, Llama-8B heads (32 q, 8 kv, head_dim 128).

Timing: CUDA events around each repeat, warm-up calls first, the median of the repeats.
Inputs are random (never zeros), and small operands rotate among several copies so that a
repeat reads HBM, not the 60 MB L2. Results are written after every measured row, atomically
(temporary file, then rename), as ``h200_firstparty.json`` and ``h200_firstparty.md`` in
``--out``; ``--budget-s`` is checked before every measurement, so the script stops cleanly
and keeps what it has. Everything that needs no torch (shapes, schedules, FLOP and byte
counts, the budget, the writers, the runtime estimate) is plain Python and is tested on the
CPU in tests/test_device_script.py; torch is imported only when measuring.
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime as _dt
import functools
import itertools
import json
import math
import os
import platform
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

KIB, MIB, GIB = 2**10, 2**20, 2**30
SCHEMA = "simcore.h200_firstparty/1"
SOURCE = ("simcore's own measurement: benchmarks/device/h200_firstparty.py, random weights and "
          "inputs, PyTorch eager ops and CUDA graphs, CUDA-event timing, median of repeats")
JSON_NAME, MD_NAME = "h200_firstparty.json", "h200_firstparty.md"
#: Section order: the most valuable first, so a short lease still gets them.
SECTIONS = ("decode", "gemm", "hbm", "prefill", "sdpa")
SKIP_MEMORY, SKIP_BUDGET = "skipped (memory)", "skipped (budget)"

# Planning ceilings for the runtime estimate only (never used as results): one H200 of this
# workplace measured 769-798 TFLOP/s bf16 (8192^3 matmul) and ~4.3 TB/s device-to-device.
PLAN_BF16_FLOPS = 780e12
PLAN_FP8_FLOPS = 1400e12
PLAN_HBM_BYTES_PER_S = 4.3e12
PLAN_LAUNCH_S = 6e-6            # host cost of one eager kernel launch
PLAN_LAUNCHES_PER_LAYER = 40    # eager decoder: norms, projections, RoPE, cache writes, SDPA, ...
PLAN_STARTUP_S = 20.0           # import torch, CUDA context, metadata, first cuBLAS handle


# --- shapes -------------------------------------------------------------------------------

@dataclass(frozen=True)
class DecoderShape:
    """A Llama-style decoder: fused QKV and gate+up projections, GQA, SwiGLU, untied head."""

    name: str
    n_layers: int
    d_model: int
    n_heads: int
    n_kv_heads: int
    head_dim: int
    d_ff: int
    vocab: int
    bytes_per_param: int = 2
    rope_theta: float = 500000.0
    norm_eps: float = 1e-5

    @property
    def q_dim(self) -> int:
        return self.n_heads * self.head_dim

    @property
    def kv_dim(self) -> int:
        return self.n_kv_heads * self.head_dim

    @property
    def kv_bytes_per_token(self) -> int:
        """K and V of every layer for one token.

        Examples
        --------
        >>> LLAMA_8B.kv_bytes_per_token  # 128 KiB
        131072
        """
        return 2 * self.n_layers * self.kv_dim * self.bytes_per_param

    def projections(self, tp: int = 1) -> tuple[GemmShape, ...]:
        """The four weight matrices of a layer as (N, K) of ``y = x @ W.T``, sharded ``tp`` ways
        the Megatron way (QKV and gate+up by columns, O and down by rows).

        Examples
        --------
        >>> [(g.name, g.n, g.k) for g in LLAMA_8B.projections()][0]
        ('qkv', 6144, 4096)
        """
        qkv = self.q_dim + 2 * self.kv_dim
        for dim in (qkv, self.q_dim, 2 * self.d_ff, self.d_ff):
            if dim % tp:
                raise ValueError(f"{self.name}: dimension {dim} does not split {tp} ways; "
                                 "pass a tp that divides it")
        return (GemmShape("qkv", qkv // tp, self.d_model),
                GemmShape("o", self.d_model, self.q_dim // tp),
                GemmShape("gate_up", 2 * self.d_ff // tp, self.d_model),
                GemmShape("down", self.d_model, self.d_ff // tp))

    @property
    def layer_matmul_params(self) -> int:
        return sum(g.n * g.k for g in self.projections())

    @property
    def n_params(self) -> int:
        """All parameters: layers (projections and two norms), embedding, final norm, LM head.

        Examples
        --------
        >>> round(LLAMA_8B.n_params / 1e9, 2)
        8.03
        """
        per_layer = self.layer_matmul_params + 2 * self.d_model
        return self.n_layers * per_layer + 2 * self.vocab * self.d_model + self.d_model

    @property
    def weight_bytes(self) -> int:
        return self.n_params * self.bytes_per_param

    @property
    def streamed_weight_bytes(self) -> int:
        """Weights one decode step must read: all but the embedding table (a row gather)."""
        return (self.n_params - self.vocab * self.d_model) * self.bytes_per_param


@dataclass(frozen=True)
class GemmShape:
    name: str
    n: int
    k: int


LLAMA_8B = DecoderShape("Llama-3.1-8B", n_layers=32, d_model=4096, n_heads=32, n_kv_heads=8,
                        head_dim=128, d_ff=14336, vocab=128256)
LLAMA_70B = DecoderShape("Llama-3.1-70B", n_layers=80, d_model=8192, n_heads=64, n_kv_heads=8,
                         head_dim=128, d_ff=28672, vocab=128256)
#: A two-layer decoder for --quick: exercises every code path in seconds.
TINY = DecoderShape("tiny (quick)", n_layers=2, d_model=512, n_heads=8, n_kv_heads=2,
                    head_dim=64, d_ff=1536, vocab=4096)


# --- the plan -----------------------------------------------------------------------------

@dataclass(frozen=True)
class Plan:
    """Everything the run measures and how; ``make_plan`` builds the default and quick ones."""

    decoder: DecoderShape
    decode_batches: tuple[int, ...]
    decode_contexts: tuple[int, ...]
    prefill_tokens: tuple[int, ...]
    gemm_m: tuple[int, ...]
    gemm_shapes: tuple[tuple[str, GemmShape], ...]   # (label, shape)
    copy_bytes: tuple[int, ...]
    sdpa_prefill_lens: tuple[int, ...]
    sdpa_decode_batches: tuple[int, ...]
    sdpa_decode_lens: tuple[int, ...]
    mem_cap_bytes: int
    warmup: int = 3
    repeats: int = 10
    decode_repeats: int = 20
    prefill_warmup: int = 1
    prefill_repeats: int = 5
    target_repeat_ms: float = 1.0    # short calls are looped inside one timed repeat
    max_inner: int = 256
    flush_bytes: int = 256 * MIB     # rotate small operands over at least this many bytes


def powers(start: int, stop: int, base: int = 2) -> tuple[int, ...]:
    """``start, start*base, ...`` up to and including ``stop``.

    Examples
    --------
    >>> powers(1, 16)
    (1, 2, 4, 8, 16)
    """
    out, v = [], start
    while v <= stop:
        out.append(v)
        v *= base
    return tuple(out)


def gemm_shape_schedule(quick: bool = False) -> tuple[tuple[str, GemmShape], ...]:
    """Llama-3.1-8B's projections, then Llama-3.1-70B's TP8 shards (labelled by model)."""
    if quick:
        return tuple((f"tiny {g.name}", g) for g in TINY.projections())
    return (tuple((f"8B {g.name}", g) for g in LLAMA_8B.projections())
            + tuple((f"70B/TP8 {g.name}", g) for g in LLAMA_70B.projections(tp=8)))


def make_plan(*, quick: bool = False, mem_cap_gib: float = 100.0) -> Plan:
    cap = int(mem_cap_gib * GIB)
    if quick:
        return Plan(decoder=TINY, decode_batches=(1, 4), decode_contexts=(128, 512),
                    prefill_tokens=(128, 512), gemm_m=(1, 16, 256),
                    gemm_shapes=gemm_shape_schedule(quick=True), copy_bytes=(MIB, 16 * MIB),
                    sdpa_prefill_lens=(256,), sdpa_decode_batches=(1, 4),
                    sdpa_decode_lens=(512,), mem_cap_bytes=cap, warmup=1, repeats=3,
                    decode_repeats=3, prefill_warmup=1, prefill_repeats=2, max_inner=8,
                    flush_bytes=8 * MIB)
    return Plan(decoder=LLAMA_8B, decode_batches=(1, 8, 64, 256),
                decode_contexts=(1024, 8192, 32768), prefill_tokens=(1024, 8192, 32768),
                gemm_m=powers(1, 8192), gemm_shapes=gemm_shape_schedule(),
                copy_bytes=powers(MIB, 4 * GIB, 4), sdpa_prefill_lens=(1024, 8192, 32768),
                sdpa_decode_batches=(1, 8, 64, 256), sdpa_decode_lens=(1024, 8192, 32768),
                mem_cap_bytes=cap)


# --- schedules and memory-cap skipping ----------------------------------------------------

@dataclass(frozen=True)
class KVCase:
    """One (batch, context) point and the bytes its KV tensors need; ``skip`` says why not."""

    batch: int
    context: int
    kv_bytes: int
    skip: str | None


def kv_schedule(batches: Iterable[int], contexts: Iterable[int], *, bytes_per_token: int,
                mem_cap_bytes: int) -> list[KVCase]:
    """Every batch × context, context-major; over ``mem_cap_bytes`` of KV is ``skipped (memory)``.

    Examples
    --------
    >>> [c.skip for c in kv_schedule([1, 2], [4], bytes_per_token=10, mem_cap_bytes=40)]
    [None, 'skipped (memory)']
    """
    out = []
    for context in contexts:
        for batch in batches:
            need = batch * context * bytes_per_token
            out.append(KVCase(batch, context, need, SKIP_MEMORY if need > mem_cap_bytes else None))
    return out


def decode_schedule(plan: Plan) -> list[KVCase]:
    """The decoder's decode points: KV of all layers, ``batch × context × kv_bytes_per_token``."""
    return kv_schedule(plan.decode_batches, plan.decode_contexts,
                       bytes_per_token=plan.decoder.kv_bytes_per_token,
                       mem_cap_bytes=plan.mem_cap_bytes)


def prefill_schedule(plan: Plan) -> list[KVCase]:
    return kv_schedule([1], plan.prefill_tokens, bytes_per_token=plan.decoder.kv_bytes_per_token,
                       mem_cap_bytes=plan.mem_cap_bytes)


def sdpa_decode_schedule(plan: Plan) -> list[KVCase]:
    """SDPA alone is one layer: K and V of one layer per token (q and output are negligible)."""
    return kv_schedule(plan.sdpa_decode_batches, plan.sdpa_decode_lens,
                       bytes_per_token=plan.decoder.kv_bytes_per_token // plan.decoder.n_layers,
                       mem_cap_bytes=plan.mem_cap_bytes)


def rotation_sets(bytes_per_set: int, *, flush_bytes: int, mem_cap_bytes: int,
                  max_sets: int = 256) -> int:
    """How many copies of an operand to cycle through so a repeat reads ``flush_bytes`` or more.

    Examples
    --------
    >>> rotation_sets(48 * MIB, flush_bytes=256 * MIB, mem_cap_bytes=100 * GIB)
    6
    >>> rotation_sets(4 * GIB, flush_bytes=256 * MIB, mem_cap_bytes=100 * GIB)
    1
    """
    if bytes_per_set <= 0:
        raise ValueError(f"bytes_per_set must be positive, got {bytes_per_set}")
    want = math.ceil(flush_bytes / bytes_per_set)
    fit = max(1, mem_cap_bytes // bytes_per_set)
    return max(1, min(want, fit, max_sets))


def choose_inner(first_ms: float, *, target_ms: float, max_inner: int) -> int:
    """Calls per timed repeat so one repeat lasts about ``target_ms`` (event resolution ~1 us).

    Examples
    --------
    >>> choose_inner(0.01, target_ms=1.0, max_inner=256), choose_inner(5.0, target_ms=1.0, max_inner=256)
    (100, 1)
    """
    if first_ms <= 0:
        return max_inner
    return max(1, min(max_inner, math.ceil(target_ms / first_ms)))


# --- FLOP and byte counts -----------------------------------------------------------------

def gemm_flops(m: int, n: int, k: int) -> int:
    """Multiply-adds of an (M, K) × (K, N) product, counted as two FLOPs each.

    Examples
    --------
    >>> gemm_flops(1, 6144, 4096)
    50331648
    """
    return 2 * m * n * k


def gemm_bytes(m: int, n: int, k: int, *, bytes_in: int, bytes_out: int) -> int:
    """Fewest bytes a product moves: both inputs read once, the output written once."""
    return (m * k + n * k) * bytes_in + m * n * bytes_out


def copy_bytes_moved(nbytes: int) -> int:
    """A device-to-device copy reads and writes every byte."""
    return 2 * nbytes


def attention_pairs(q_len: int, kv_len: int, *, causal: bool) -> int:
    """(query, key) pairs scored; causal needs ``q_len == kv_len`` (PyTorch aligns top-left).

    Examples
    --------
    >>> attention_pairs(4, 4, causal=True), attention_pairs(1, 4, causal=False)
    (10, 4)
    """
    if causal:
        if q_len != kv_len:
            raise ValueError(f"causal attention here needs q_len == kv_len, got {q_len}, {kv_len}")
        return q_len * (q_len + 1) // 2
    return q_len * kv_len


def sdpa_flops(batch: int, n_heads: int, q_len: int, kv_len: int, head_dim: int, *,
               causal: bool) -> int:
    """QK^T and PV: 2 FLOPs × head_dim each, per scored pair and query head."""
    return 4 * batch * n_heads * head_dim * attention_pairs(q_len, kv_len, causal=causal)


def sdpa_bytes(batch: int, n_heads: int, n_kv_heads: int, q_len: int, kv_len: int,
               head_dim: int, *, bytes_per_el: int = 2) -> int:
    """Q and output once per query head, K and V once per KV head (GQA shares them)."""
    return bytes_per_el * head_dim * batch * (2 * n_heads * q_len + 2 * n_kv_heads * kv_len)


def decoder_flops(shape: DecoderShape, *, batch: int, q_len: int, kv_len: int) -> int:
    """One forward over ``q_len`` new tokens per sequence (prefill when q_len == kv_len, causal);
    the LM head runs on the last token of each sequence only."""
    linear = 2 * batch * q_len * shape.n_layers * shape.layer_matmul_params
    head = 2 * batch * shape.vocab * shape.d_model
    attn = shape.n_layers * sdpa_flops(batch, shape.n_heads, q_len, kv_len, shape.head_dim,
                                       causal=q_len > 1)
    return linear + head + attn


def decode_step_bytes(shape: DecoderShape, *, batch: int, context: int) -> int:
    """Fewest bytes one decode step moves: the streamed weights and the whole KV cache."""
    return shape.streamed_weight_bytes + batch * context * shape.kv_bytes_per_token


def per_second(count: float, ms: float | None, scale: float = 1.0) -> float | None:
    """``count / seconds / scale``; None when nothing was timed.

    Examples
    --------
    >>> per_second(2e12, 2.0, 1e12)
    1000.0
    """
    if ms is None or ms <= 0:
        return None
    return count / (ms / 1e3) / scale


def median(values: Sequence[float]) -> float:
    if not values:
        raise ValueError("median of no values")
    return float(statistics.median(values))


# --- budget and runtime estimate ----------------------------------------------------------

class Budget:
    """Wall-clock budget. ``allows(cost_s)``, asked before each measurement with its estimated
    cost, is true while ``safety × cost_s`` fits in what is left after ``reserve_s`` (kept for
    the final writes); the estimates are rooflines, so ``safety`` covers their optimism.

    Examples
    --------
    >>> now = [0.0]; b = Budget(120, reserve_s=10, safety=2.0, clock=lambda: now[0])
    >>> now[0] = 100.0
    >>> b.allows(5.0), b.allows(6.0)
    (True, False)
    """

    def __init__(self, budget_s: float, *, reserve_s: float = 10.0, safety: float = 2.0,
                 clock: Callable[[], float] = time.monotonic) -> None:
        if budget_s <= 0:
            raise ValueError(f"budget_s must be positive, got {budget_s}")
        self.budget_s, self.reserve_s, self.safety = budget_s, reserve_s, safety
        self._clock = clock
        self._t0 = clock()

    def elapsed_s(self) -> float:
        return self._clock() - self._t0

    def allows(self, cost_s: float = 0.0) -> bool:
        return self.budget_s - self.elapsed_s() - self.reserve_s >= self.safety * cost_s


def _timed_s(floor_s: float, plan: Plan, *, warmup: int, repeats: int) -> float:
    """Wall time of one measurement: warm-up, one probe call, repeats of >= target_ms each."""
    per_repeat = max(floor_s, min(plan.target_repeat_ms / 1e3, plan.max_inner * floor_s))
    return (warmup + 1) * floor_s + repeats * per_repeat + 0.005


def _roofline_s(flops: float, nbytes: float, *, flops_per_s: float, eff: float = 0.7) -> float:
    return max(flops / (flops_per_s * eff), nbytes / (PLAN_HBM_BYTES_PER_S * 0.8), 5e-6)


def estimate_decode_case_s(plan: Plan, case: KVCase) -> float:
    """Cache fill, eager steps, graph capture and replays of one decode point."""
    d = plan.decoder
    gpu = _roofline_s(decoder_flops(d, batch=case.batch, q_len=1, kv_len=case.context),
                      decode_step_bytes(d, batch=case.batch, context=case.context),
                      flops_per_s=PLAN_BF16_FLOPS, eff=0.5)
    eager = max(gpu, d.n_layers * PLAN_LAUNCHES_PER_LAYER * PLAN_LAUNCH_S)
    steps = plan.warmup + 2 + plan.decode_repeats
    fill = case.kv_bytes / (PLAN_HBM_BYTES_PER_S * 0.3) + 0.3
    return fill + steps * (eager + gpu) + 1.0        # + capture


def estimate_prefill_case_s(plan: Plan, case: KVCase) -> float:
    d = plan.decoder
    lin = 2 * case.context * d.n_layers * d.layer_matmul_params / (PLAN_BF16_FLOPS * 0.7)
    attn = d.n_layers * sdpa_flops(1, d.n_heads, case.context, case.context, d.head_dim,
                                   causal=True) / (PLAN_BF16_FLOPS * 0.45)
    step = lin + attn + d.n_layers * PLAN_LAUNCHES_PER_LAYER * PLAN_LAUNCH_S
    return (plan.prefill_warmup + plan.prefill_repeats) * step + case.kv_bytes / 1e12 + 0.3


def estimate_gemm_case_s(plan: Plan, m: int, g: GemmShape) -> float:
    """Both dtypes at one (M, N, K)."""
    total = 0.0
    for flops_per_s, b_in in ((PLAN_BF16_FLOPS, 2), (PLAN_FP8_FLOPS, 1)):
        floor = _roofline_s(gemm_flops(m, g.n, g.k),
                            gemm_bytes(m, g.n, g.k, bytes_in=b_in, bytes_out=2),
                            flops_per_s=flops_per_s)
        total += _timed_s(floor, plan, warmup=plan.warmup, repeats=plan.repeats)
    return total + 0.02


def estimate_copy_case_s(plan: Plan, nbytes: int) -> float:
    floor = _roofline_s(0, copy_bytes_moved(nbytes), flops_per_s=PLAN_BF16_FLOPS)
    return _timed_s(floor, plan, warmup=plan.warmup, repeats=plan.repeats) + nbytes / 1e11 + 0.02


def estimate_sdpa_case_s(plan: Plan, *, batch: int, q_len: int, kv_len: int) -> float:
    d = plan.decoder
    floor = _roofline_s(sdpa_flops(batch, d.n_heads, q_len, kv_len, d.head_dim,
                                   causal=q_len == kv_len),
                        sdpa_bytes(batch, d.n_heads, d.n_kv_heads, q_len, kv_len, d.head_dim),
                        flops_per_s=PLAN_BF16_FLOPS, eff=0.45)
    alloc = sdpa_bytes(batch, d.n_heads, d.n_kv_heads, q_len, kv_len, d.head_dim) / 1e12
    return _timed_s(floor, plan, warmup=plan.warmup, repeats=plan.repeats) + alloc + 0.05


def estimate_runtime_s(plan: Plan, sections: Sequence[str] = SECTIONS) -> dict[str, float]:
    """Expected wall seconds per section (at the planning ceilings above) and in total."""
    est: dict[str, float] = {"startup": PLAN_STARTUP_S}
    model_init = plan.decoder.weight_bytes / 5e10 + 1.0   # random init of the weights
    if "decode" in sections:
        est["decode"] = model_init + sum(estimate_decode_case_s(plan, c)
                                         for c in decode_schedule(plan) if c.skip is None)
    if "gemm" in sections:
        est["gemm"] = sum(estimate_gemm_case_s(plan, m, g)
                          for _, g in plan.gemm_shapes for m in plan.gemm_m)
    if "hbm" in sections:
        est["hbm"] = sum(estimate_copy_case_s(plan, n) for n in plan.copy_bytes)
    if "prefill" in sections:
        est["prefill"] = model_init + sum(estimate_prefill_case_s(plan, c)
                                          for c in prefill_schedule(plan) if c.skip is None)
    if "sdpa" in sections:
        est["sdpa"] = (sum(estimate_sdpa_case_s(plan, batch=1, q_len=n, kv_len=n)
                           for n in plan.sdpa_prefill_lens)
                       + sum(estimate_sdpa_case_s(plan, batch=c.batch, q_len=1, kv_len=c.context)
                             for c in sdpa_decode_schedule(plan) if c.skip is None))
    est["total"] = sum(est.values())
    return {k: round(v, 1) for k, v in est.items()}


# --- results: declared columns, markdown and atomic writes --------------------------------

@dataclass(frozen=True)
class Column:
    key: str
    header: str
    fmt: str = ""


#: Each section's title (formatted with the plan's decoder shape) and table columns, declared
#: once; rows may carry more keys, which only the JSON shows.
TABLES: dict[str, tuple[str, tuple[Column, ...]]] = {
    "decode": ("Decoder decode step (random-weight {model} shape, bf16)", (
        Column("batch", "batch"), Column("context", "context"), Column("mode", "mode"),
        Column("kv_gib", "KV GiB", ".2f"), Column("ms", "ms/step", ".3f"),
        Column("tokens_per_s", "tokens/s", ".0f"), Column("gbs", "GB/s (min bytes)", ".0f"),
        Column("tflops", "TFLOP/s", ".1f"), Column("status", "status"))),
    "gemm": ("GEMM y = x @ W.T (bf16 torch.matmul; FP8 e4m3 torch._scaled_mm, bf16 out)", (
        Column("shape", "shape"), Column("m", "M"), Column("n", "N"), Column("k", "K"),
        Column("bf16_ms", "bf16 ms", ".4f"), Column("bf16_tflops", "bf16 TFLOP/s", ".1f"),
        Column("fp8_ms", "fp8 ms", ".4f"), Column("fp8_tflops", "fp8 TFLOP/s", ".1f"),
        Column("status", "status"))),
    "hbm": ("HBM device-to-device copy (bytes read + written over time)", (
        Column("mib", "MiB copied", ".0f"), Column("ms", "ms", ".4f"),
        Column("gbs", "GB/s", ".0f"), Column("sets", "buffer sets"), Column("status", "status"))),
    "prefill": ("Decoder prefill ({model} shape, batch 1, eager, LM head on the last token)", (
        Column("tokens", "tokens"), Column("ms", "ms", ".1f"),
        Column("tokens_per_s", "tokens/s", ".0f"), Column("tflops", "TFLOP/s", ".1f"),
        Column("status", "status"))),
    "sdpa": ("scaled_dot_product_attention (bf16, {n_heads} q heads, {n_kv_heads} kv heads, "
             "head_dim {head_dim})", (
        Column("kind", "kind"), Column("batch", "batch"), Column("q_len", "q len"),
        Column("kv_len", "kv len"), Column("ms", "ms", ".4f"), Column("tflops", "TFLOP/s", ".1f"),
        Column("gbs", "GB/s (min bytes)", ".0f"), Column("status", "status"))),
}

#: Header fields of the markdown, (label, key in results["meta"]).
META_FIELDS = (("Source", "source"), ("Date (UTC)", "date_utc"), ("Device", "device"),
               ("Memory", "memory_gib"), ("SMs", "sm_count"), ("Compute capability", "capability"),
               ("torch", "torch"), ("CUDA", "cuda"), ("cuDNN", "cudnn"), ("Driver", "driver"),
               ("Python", "python"), ("Git commit", "git_commit"), ("Clocks at start", "clocks"),
               ("SDPA GQA", "gqa_mode"), ("SDPA backends", "sdpa_backends"),
               ("Budget (s)", "budget_s"), ("Elapsed (s)", "elapsed_s"), ("Status", "status"))


def new_results(plan: Plan, *, sections: Sequence[str] = SECTIONS) -> dict[str, Any]:
    d = plan.decoder
    return {"schema": SCHEMA,
            "meta": {"source": SOURCE, "status": "running"},
            "plan": dataclasses.asdict(plan),
            "sections": {s: {"title": TABLES[s][0].format(model=d.name, **dataclasses.asdict(d)),
                             "status": "not run", "notes": [], "rows": []} for s in sections}}


def _cell(value: Any, fmt: str) -> str:
    if value is None:
        return ""
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    if fmt and isinstance(value, int | float) and not isinstance(value, bool):
        return format(value, fmt)
    return str(value).replace("|", "\\|").replace("\n", " ")


def render_markdown(results: dict[str, Any]) -> str:
    """The results as markdown: the header fields, then one table per section."""
    meta = results["meta"]
    lines = ["# First-party GPU measurements for simcore validation", ""]
    for label, key in META_FIELDS:
        value = meta.get(key)
        if isinstance(value, dict):
            value = ", ".join(f"{k}: {v}" for k, v in value.items())
        lines.append(f"- {label}: {_cell(value, '') or 'unknown'}")
    for name, sec in results["sections"].items():
        columns = TABLES[name][1]
        lines += ["", f"## {name}: {sec['title']}", "", f"Status: {sec['status']}"]
        if sec["notes"]:
            lines += [""] + [f"- {n}" for n in sec["notes"]]
        lines += ["", "| " + " | ".join(c.header for c in columns) + " |",
                  "|" + "|".join(" --- " for _ in columns) + "|"]
        lines += ["| " + " | ".join(_cell(row.get(c.key), c.fmt) for c in columns) + " |"
                  for row in sec["rows"]]
    return "\n".join(lines) + "\n"


def write_text_atomic(path: Path, text: str) -> None:
    """Write ``text`` to a temporary file beside ``path``, then rename it over ``path``: a
    reader (or a kill mid-write) sees the old file or the new one, never half of one."""
    path = Path(path)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def write_json_atomic(path: Path, obj: Any) -> None:
    """Serialise first (so an unserialisable value leaves the old file alone), then write."""
    write_text_atomic(path, json.dumps(obj, indent=1, allow_nan=True) + "\n")


class Recorder:
    """The results document, rewritten (JSON and markdown, atomically) after every row."""

    def __init__(self, out_dir: Path, results: dict[str, Any], budget: Budget) -> None:
        self.out_dir, self.results, self.budget = Path(out_dir), results, budget
        self.out_dir.mkdir(parents=True, exist_ok=True)

    def section(self, name: str) -> dict[str, Any]:
        return self.results["sections"][name]

    def add(self, name: str, row: dict[str, Any]) -> None:
        self.section(name)["rows"].append(row)
        self.flush()

    def note(self, name: str, text: str) -> None:
        if text not in self.section(name)["notes"]:
            self.section(name)["notes"].append(text)

    def flush(self) -> None:
        meta = self.results["meta"]
        meta["elapsed_s"] = round(self.budget.elapsed_s(), 1)
        meta["budget_s"] = self.budget.budget_s
        write_json_atomic(self.out_dir / JSON_NAME, self.results)
        write_text_atomic(self.out_dir / MD_NAME, render_markdown(self.results))


# --- metadata -----------------------------------------------------------------------------

def _run_text(cmd: Sequence[str], cwd: Path | None = None) -> str | None:
    try:
        out = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, timeout=15)
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip() if out.returncode == 0 and out.stdout.strip() else None


def git_commit(explicit: str | None = None) -> str | None:
    """``--commit`` if given (the device copy of the tree may have no .git), else git's HEAD
    with ``-dirty`` when the tree has uncommitted changes."""
    if explicit:
        return explicit
    here = Path(__file__).resolve().parent
    head = _run_text(["git", "rev-parse", "HEAD"], cwd=here)
    if head and _run_text(["git", "status", "--porcelain", "--untracked-files=no"], cwd=here):
        head += "-dirty"
    return head


def host_meta(commit: str | None) -> dict[str, Any]:
    return {"date_utc": _dt.datetime.now(_dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
            "python": platform.python_version(), "platform": platform.platform(),
            "git_commit": git_commit(commit)}


def nvidia_smi_meta() -> dict[str, Any]:
    """Driver and clocks from nvidia-smi, where it exists (read only; nothing is set)."""
    q = "driver_version,clocks.sm,clocks.mem,clocks.max.sm,power.limit,temperature.gpu"
    text = _run_text(["nvidia-smi", f"--query-gpu={q}", "--format=csv,noheader"])
    if not text:
        return {}
    f = [s.strip() for s in text.splitlines()[0].split(",")]
    if len(f) < 6:
        return {"driver": f[0]}
    return {"driver": f[0], "clocks": {"sm": f[1], "mem": f[2], "max_sm": f[3],
                                       "power_limit": f[4], "temp_c": f[5]}}


# --- torch side (imported only when measuring) --------------------------------------------

class Interrupted(BaseException):
    """SIGTERM (an outer ``timeout``): stop measuring, write what we have."""


class Bench:
    """Timing helpers bound to one device; CUDA events on a GPU, perf_counter on the CPU
    (``--device cpu`` is for smoke tests only: its numbers mean nothing)."""

    def __init__(self, torch: Any, device: str) -> None:
        self.torch, self.device = torch, torch.device(device)
        self.cuda = self.device.type == "cuda"

    def sync(self) -> None:
        if self.cuda:
            self.torch.cuda.synchronize()

    def time_ms(self, fn: Callable[[], Any], *, warmup: int, repeats: int, target_ms: float,
                max_inner: int) -> dict[str, Any]:
        """Median over ``repeats`` of (time of ``inner`` back-to-back calls) / inner."""
        for _ in range(warmup):
            fn()
        self.sync()
        probe = self._repeat_ms(fn, 1, 1)[0]
        inner = choose_inner(probe, target_ms=target_ms, max_inner=max_inner)
        times = self._repeat_ms(fn, repeats, inner)
        return {"ms": median(times), "ms_min": min(times), "ms_max": max(times),
                "repeats": repeats, "inner": inner}

    def _repeat_ms(self, fn: Callable[[], Any], repeats: int, inner: int) -> list[float]:
        if not self.cuda:
            out = []
            for _ in range(repeats):
                t0 = time.perf_counter()
                for _ in range(inner):
                    fn()
                out.append((time.perf_counter() - t0) * 1e3 / inner)
            return out
        ev = self.torch.cuda.Event
        marks = [(ev(enable_timing=True), ev(enable_timing=True)) for _ in range(repeats)]
        for start, end in marks:
            start.record()
            for _ in range(inner):
                fn()
            end.record()
        self.torch.cuda.synchronize()
        return [start.elapsed_time(end) / inner for start, end in marks]

    def free_bytes(self) -> int | None:
        if not self.cuda:
            return None
        return int(self.torch.cuda.mem_get_info()[0])

    def release(self) -> None:
        import gc
        gc.collect()
        if self.cuda:
            self.torch.cuda.empty_cache()


def _error(exc: BaseException) -> str:
    text = f"{type(exc).__name__}: {exc}".replace("\n", " ")
    return "error: " + (text[:160] + "…" if len(text) > 160 else text)


def sdpa_gqa(torch: Any) -> Callable[..., Any]:
    """``sdpa(q, k, v, causal)`` for GQA: ``enable_gqa=True`` where this torch has it, else K
    and V repeated to the query heads (``sdpa_gqa.mode`` says which)."""
    F = torch.nn.functional
    q = torch.zeros(1, 4, 2, 8)
    kv = torch.zeros(1, 2, 2, 8)
    try:
        F.scaled_dot_product_attention(q, kv, kv, enable_gqa=True)
        def sdpa(q: Any, k: Any, v: Any, causal: bool) -> Any:
            return F.scaled_dot_product_attention(q, k, v, is_causal=causal, enable_gqa=True)
        sdpa.mode = "enable_gqa=True"  # type: ignore[attr-defined]
    except TypeError:
        def sdpa(q: Any, k: Any, v: Any, causal: bool) -> Any:
            rep = q.shape[1] // k.shape[1]
            return F.scaled_dot_product_attention(q, k.repeat_interleave(rep, 1),
                                                  v.repeat_interleave(rep, 1), is_causal=causal)
        sdpa.mode = "repeat_interleave (no enable_gqa in this torch: K/V bytes x4)"  # type: ignore[attr-defined]
    return sdpa


def sdpa_backend_probe(torch: Any, device: Any, shape: DecoderShape) -> dict[str, str]:
    """Which SDPA backends accept the decode (q len 1) and prefill (causal) GQA shapes."""
    try:
        from torch.nn.attention import SDPBackend, sdpa_kernel
    except ImportError:
        return {"probe": "torch.nn.attention not available"}
    F = torch.nn.functional
    out: dict[str, str] = {}
    for kind, q_len, causal in (("decode", 1, False), ("prefill", 256, True)):
        q = torch.randn(2, shape.n_heads, q_len, shape.head_dim, device=device,
                        dtype=torch.bfloat16)
        kv = torch.randn(2, shape.n_kv_heads, 256, shape.head_dim, device=device,
                         dtype=torch.bfloat16)
        ok = []
        for name in ("FLASH_ATTENTION", "CUDNN_ATTENTION", "EFFICIENT_ATTENTION", "MATH"):
            backend = getattr(SDPBackend, name, None)
            if backend is None:
                continue
            try:
                with sdpa_kernel([backend]):
                    F.scaled_dot_product_attention(q, kv, kv, is_causal=causal, enable_gqa=True)
                ok.append(name.split("_")[0].lower())
            except Exception:  # a refusal is the answer
                pass
        out[kind] = "/".join(ok) or "none"
    return out


class RandomDecoder:
    """A Llama-3.1-style decoder with random bf16 weights, in plain PyTorch ops.

    Fused QKV and gate+up projections (the shapes of the gemm section), RMSNorm computed in
    fp32 as eager reference code does, rotate-half RoPE (theta from the shape; Llama 3.1's
    frequency rescaling is left out: it changes no cost), GQA attention through SDPA, SwiGLU,
    untied LM head applied to the last position only. Weights are scaled by 1/sqrt(fan_in)
    so activations stay finite through the layers.
    """

    def __init__(self, torch: Any, shape: DecoderShape, *, device: Any, max_len: int,
                 seed: int = 0) -> None:
        self.torch, self.shape, self.device = torch, shape, device
        self.sdpa = sdpa_gqa(torch)
        bf16 = torch.bfloat16
        gen = torch.Generator(device=device).manual_seed(seed)

        def weight(n: int, k: int) -> Any:
            return torch.randn(n, k, device=device, dtype=bf16, generator=gen).mul_(k ** -0.5)

        def ones() -> Any:
            return torch.ones(shape.d_model, device=device, dtype=bf16)

        projections = shape.projections()
        self.layers = [{"attn_norm": ones(), "ffn_norm": ones(),
                        **{g.name: weight(g.n, g.k) for g in projections}}
                       for _ in range(shape.n_layers)]
        self.embed = torch.randn(shape.vocab, shape.d_model, device=device, dtype=bf16,
                                 generator=gen)
        self.final_norm = ones()
        self.lm_head = weight(shape.vocab, shape.d_model)
        half = shape.head_dim // 2
        inv_freq = shape.rope_theta ** (-torch.arange(half, device=device,
                                                      dtype=torch.float32) / half)
        angles = torch.outer(torch.arange(max_len, device=device, dtype=torch.float32), inv_freq)
        self.cos, self.sin = angles.cos().to(bf16), angles.sin().to(bf16)

    def new_cache(self, batch: int, max_len: int) -> Any:
        """K and V of every layer: (layers, 2, batch, kv_heads, max_len, head_dim), random."""
        s, torch = self.shape, self.torch
        cache = torch.empty(s.n_layers, 2, batch, s.n_kv_heads, max_len, s.head_dim,
                            device=self.device, dtype=torch.bfloat16)
        for layer in cache:            # one layer at a time: no giant temporaries
            layer.normal_()
        return cache

    def _norm(self, x: Any, w: Any) -> Any:
        xf = x.float()
        xf = xf * self.torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + self.shape.norm_eps)
        return xf.to(x.dtype) * w

    def _rope(self, x: Any, cos: Any, sin: Any) -> Any:
        x1, x2 = x.chunk(2, dim=-1)
        return self.torch.cat((x1 * cos - x2 * sin, x2 * cos + x1 * sin), dim=-1)

    def forward(self, tokens: Any, positions: Any, cache: Any, *, prefill: bool) -> Any:
        """Logits of the last position. Prefill: tokens (B, T) at positions 0..T-1, causal
        attention over themselves. Decode: tokens (B, 1) at ``positions`` (one element),
        written into the cache, attending over the whole cache (every slot is context)."""
        torch, s = self.torch, self.shape
        F = torch.nn.functional
        b, t = tokens.shape
        cos = torch.index_select(self.cos, 0, positions)
        sin = torch.index_select(self.sin, 0, positions)
        x = F.embedding(tokens, self.embed)
        for i, w in enumerate(self.layers):
            h = self._norm(x, w["attn_norm"])
            q, k, v = F.linear(h, w["qkv"]).split([s.q_dim, s.kv_dim, s.kv_dim], dim=-1)
            q = self._rope(q.view(b, t, s.n_heads, s.head_dim).transpose(1, 2), cos, sin)
            k = self._rope(k.view(b, t, s.n_kv_heads, s.head_dim).transpose(1, 2), cos, sin)
            v = v.view(b, t, s.n_kv_heads, s.head_dim).transpose(1, 2)
            k_cache, v_cache = cache[i, 0], cache[i, 1]
            k_cache.index_copy_(2, positions, k)
            v_cache.index_copy_(2, positions, v)
            if prefill:
                a = self.sdpa(q, k, v, True)
            else:
                a = self.sdpa(q, k_cache, v_cache, False)
            x = x + F.linear(a.transpose(1, 2).reshape(b, t, s.q_dim), w["o"])
            gate, up = F.linear(self._norm(x, w["ffn_norm"]), w["gate_up"]).chunk(2, dim=-1)
            x = x + F.linear(F.silu(gate) * up, w["down"])
        return F.linear(self._norm(x[:, -1], self.final_norm), self.lm_head)


def _rel_diff(a: Any, b: Any) -> float:
    a, b = a.float(), b.float()
    return float((a - b).norm() / b.norm().clamp_min(1e-30))


def cycling(fn: Callable[..., Any], operand_sets: Sequence[tuple[Any, ...]]) -> Callable[[], Any]:
    """A no-argument call of ``fn(*set)`` that takes the next operand set each time."""
    sets = itertools.cycle(operand_sets)
    return lambda: fn(*next(sets))


def _matmul_bf16(torch: Any, x: Any, out: Any, w: Any) -> Any:
    return torch.matmul(x, w.t(), out=out)


def _matmul_fp8(torch: Any, x8: Any, scale: Any, w8: Any) -> Any:
    out = torch._scaled_mm(x8, w8.t(), scale_a=scale, scale_b=scale, out_dtype=torch.bfloat16)
    return out[0] if isinstance(out, tuple) else out   # torch < 2.4 also returned amax


def _copy(src: Any, dst: Any) -> Any:
    return dst.copy_(src)


def _attend(sdpa: Callable[..., Any], causal: bool, q: Any, k: Any, v: Any) -> Any:
    return sdpa(q, k, v, causal)


def _decode_rows(c: KVCase, modes: Iterable[str], status: str) -> list[dict[str, Any]]:
    return [{"batch": c.batch, "context": c.context, "mode": mode, "kv_gib": c.kv_bytes / GIB,
             "status": status} for mode in modes]


def _decode_row(plan: Plan, c: KVCase, mode: str, t: dict[str, Any],
                **extra: Any) -> dict[str, Any]:
    d = plan.decoder
    flops = decoder_flops(d, batch=c.batch, q_len=1, kv_len=c.context)
    nbytes = decode_step_bytes(d, batch=c.batch, context=c.context)
    return {"batch": c.batch, "context": c.context, "mode": mode, "kv_gib": c.kv_bytes / GIB,
            **t, "tokens_per_s": per_second(c.batch, t["ms"]),
            "gbs": per_second(nbytes, t["ms"], 1e9), "tflops": per_second(flops, t["ms"], 1e12),
            "status": "ok", **extra}


def _capture_decode(bench: Bench, step: Callable[[], Any]) -> tuple[Any, Any]:
    """Capture one decode step in a CUDA graph (after warm-up on a side stream, as PyTorch's
    docs ask); returns the graph and its static output."""
    torch = bench.torch
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(2):
            step()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        static_out = step()
    return graph, static_out


def _measure_decode(bench: Bench, plan: Plan, rec: Recorder, model: RandomDecoder,
                    c: KVCase) -> None:
    """Eager then graph-replayed decode step at one (batch, context)."""
    torch, d = bench.torch, plan.decoder
    cache = model.new_cache(c.batch, c.context)
    gen = torch.Generator(device=bench.device).manual_seed(c.batch * 7 + c.context)
    tokens = torch.randint(0, d.vocab, (c.batch, 1), device=bench.device, generator=gen)
    pos = torch.tensor([c.context - 1], device=bench.device)
    step = functools.partial(model.forward, tokens, pos, cache, prefill=False)
    with torch.inference_mode():
        eager = bench.time_ms(step, warmup=plan.warmup, repeats=plan.decode_repeats,
                              target_ms=0.0, max_inner=1)
        ref = step()
        rec.add("decode", _decode_row(plan, c, "eager", eager,
                                      logits_finite=bool(torch.isfinite(ref).all())))
        if not bench.cuda:
            rec.add("decode", _decode_rows(c, ["graph"], "n/a (no CUDA)")[0])
            return
        try:
            graph, static_out = _capture_decode(bench, step)
            replayed = bench.time_ms(graph.replay, warmup=plan.warmup,
                                     repeats=plan.decode_repeats, target_ms=0.0, max_inner=1)
            rec.add("decode", _decode_row(plan, c, "graph", replayed,
                                          graph_vs_eager_rel=_rel_diff(static_out, ref)))
        except Exception as exc:  # record it and go on
            rec.add("decode", _decode_rows(c, ["graph"], _error(exc))[0])


def run_decode(bench: Bench, plan: Plan, rec: Recorder) -> None:
    d = plan.decoder
    cases = decode_schedule(plan)
    rec.note("decode", f"KV cache {d.kv_bytes_per_token // KIB} KiB per token (bf16); cap "
                       f"{plan.mem_cap_bytes / GIB:.0f} GiB of KV beside "
                       f"{d.weight_bytes / GIB:.1f} GiB of weights")
    rec.note("decode", "one new token per sequence, attending over `context` cache slots (the "
                       "new one included); tokens/s = batch / step time; GB/s counts streamed "
                       "weights + the whole KV cache; graph = one torch.cuda.CUDAGraph replay")
    todo = [c for c in cases if c.skip is None]
    model = (RandomDecoder(bench.torch, d, device=bench.device,
                           max_len=max(c.context for c in todo)) if todo else None)
    if model is not None:
        rec.results["meta"]["gqa_mode"] = model.sdpa.mode
    for c in cases:
        free = bench.free_bytes()
        if c.skip:
            rec.section("decode")["rows"] += _decode_rows(c, ("eager", "graph"), c.skip)
        elif not rec.budget.allows(estimate_decode_case_s(plan, c)):
            rec.section("decode")["rows"] += _decode_rows(c, ("eager", "graph"), SKIP_BUDGET)
        elif free is not None and c.kv_bytes > free - 4 * GIB:
            rec.section("decode")["rows"] += _decode_rows(
                c, ("eager", "graph"), f"{SKIP_MEMORY}: {free / GIB:.0f} GiB free")
        else:
            try:
                _measure_decode(bench, plan, rec, model, c)
            except Exception as exc:  # record it and go on
                rec.add("decode", _decode_rows(c, ["eager"], _error(exc))[0])
            finally:
                bench.release()
        rec.flush()
    del model
    bench.release()


def run_prefill(bench: Bench, plan: Plan, rec: Recorder) -> None:
    torch, d = bench.torch, plan.decoder
    cases = prefill_schedule(plan)
    rec.note("prefill", "tokens/s = prompt tokens / prefill time; TFLOP/s counts linear "
                        "layers, causal attention (half the score matrix) and the LM head on "
                        "one token")
    todo = [c for c in cases if c.skip is None]
    model = (RandomDecoder(torch, d, device=bench.device, max_len=max(c.context for c in todo))
             if todo else None)
    for c in cases:
        if c.skip:
            rec.add("prefill", {"tokens": c.context, "status": c.skip})
            continue
        if not rec.budget.allows(estimate_prefill_case_s(plan, c)):
            rec.add("prefill", {"tokens": c.context, "status": SKIP_BUDGET})
            continue
        try:
            cache = model.new_cache(1, c.context)
            gen = torch.Generator(device=bench.device).manual_seed(c.context)
            tokens = torch.randint(0, d.vocab, (1, c.context), device=bench.device, generator=gen)
            positions = torch.arange(c.context, device=bench.device)
            with torch.inference_mode():
                t = bench.time_ms(functools.partial(model.forward, tokens, positions, cache,
                                                    prefill=True),
                                  warmup=plan.prefill_warmup, repeats=plan.prefill_repeats,
                                  target_ms=0.0, max_inner=1)
            flops = decoder_flops(d, batch=1, q_len=c.context, kv_len=c.context)
            rec.add("prefill", {"tokens": c.context, **t,
                                "tokens_per_s": per_second(c.context, t["ms"]),
                                "tflops": per_second(flops, t["ms"], 1e12), "status": "ok"})
        except Exception as exc:  # record it and go on
            rec.add("prefill", {"tokens": c.context, "status": _error(exc)})
        finally:
            cache = None
            bench.release()
    del model
    bench.release()


def _gemm_row(bench: Bench, plan: Plan, m: int, g: GemmShape, w16: list[Any],
              w8: list[Any] | None, fp8_error: str | None) -> dict[str, Any]:
    """bf16 and FP8 timings of one (M, N, K), with per-dtype failures in ``status``."""
    torch, dev = bench.torch, bench.device
    gen = torch.Generator(device=dev).manual_seed(m)
    flops, status, row = gemm_flops(m, g.n, g.k), [], {}
    timing = dict(warmup=plan.warmup, repeats=plan.repeats, target_ms=plan.target_repeat_ms,
                  max_inner=plan.max_inner)
    x = torch.randn(m, g.k, device=dev, dtype=torch.bfloat16, generator=gen)
    try:
        out = torch.empty(m, g.n, device=dev, dtype=torch.bfloat16)
        t = bench.time_ms(cycling(functools.partial(_matmul_bf16, torch, x, out),
                                  [(w,) for w in w16]), **timing)
        row.update(bf16_ms=t["ms"], bf16_tflops=per_second(flops, t["ms"], 1e12),
                   bf16_gbs=per_second(gemm_bytes(m, g.n, g.k, bytes_in=2, bytes_out=2),
                                       t["ms"], 1e9), bf16_inner=t["inner"])
    except Exception as exc:  # record it and go on
        status.append("bf16 " + _error(exc))
    if fp8_error or w8 is None:
        status.append(fp8_error or "fp8 unsupported")
    else:
        try:
            scale = torch.ones((), device=dev, dtype=torch.float32)
            t = bench.time_ms(cycling(functools.partial(_matmul_fp8, torch, x.to(w8[0].dtype),
                                                        scale), [(w,) for w in w8]), **timing)
            row.update(fp8_ms=t["ms"], fp8_tflops=per_second(flops, t["ms"], 1e12),
                       fp8_gbs=per_second(gemm_bytes(m, g.n, g.k, bytes_in=1, bytes_out=2),
                                          t["ms"], 1e9), fp8_inner=t["inner"])
        except Exception as exc:  # record it and go on
            status.append("fp8 unsupported (" + _error(exc) + ")")
    return {**row, "sets": len(w16), "status": "; ".join(status) or "ok"}


def run_gemm(bench: Bench, plan: Plan, rec: Recorder) -> None:
    torch, dev = bench.torch, bench.device
    rec.note("gemm", "x (M, K) row-major times W.T, W (N, K) row-major (a column-major B); "
                     "FP8: e4m3 x and W, per-tensor float32 scales, bf16 output; TFLOP/s = "
                     "2·M·N·K / time")
    rec.note("gemm", f"weights rotate among copies of >= {plan.flush_bytes // MIB} MiB in all, "
                     "so small-M products read HBM rather than L2")
    gen = torch.Generator(device=dev).manual_seed(1)
    fp8 = getattr(torch, "float8_e4m3fn", None)
    for label, g in plan.gemm_shapes:
        rows = [{"shape": label, "m": m, "n": g.n, "k": g.k} for m in plan.gemm_m]
        if not rec.budget.allows(estimate_gemm_case_s(plan, plan.gemm_m[0], g)):
            for row in rows:
                rec.add("gemm", {**row, "status": SKIP_BUDGET})
            continue
        sets = rotation_sets(g.n * g.k * 2, flush_bytes=plan.flush_bytes,
                             mem_cap_bytes=plan.mem_cap_bytes)
        w16 = [torch.randn(g.n, g.k, device=dev, dtype=torch.bfloat16, generator=gen)
               for _ in range(sets)]
        w8, fp8_error = None, None
        try:
            if fp8 is None:
                raise RuntimeError("torch has no float8_e4m3fn")
            w8 = [w.to(fp8) for w in w16]
        except Exception as exc:  # record it and go on
            fp8_error = "fp8 unsupported (" + _error(exc) + ")"
        for row, m in zip(rows, plan.gemm_m, strict=True):
            if not rec.budget.allows(estimate_gemm_case_s(plan, m, g)):
                rec.add("gemm", {**row, "status": SKIP_BUDGET})
                continue
            try:
                rec.add("gemm", {**row, **_gemm_row(bench, plan, m, g, w16, w8, fp8_error)})
            except Exception as exc:  # record it and go on
                rec.add("gemm", {**row, "status": _error(exc)})
        del w16, w8
        bench.release()


def run_hbm(bench: Bench, plan: Plan, rec: Recorder) -> None:
    torch = bench.torch
    rec.note("hbm", "dst.copy_(src) on uint8 buffers; GB/s = 2 × bytes / time (1 GB = 1e9 B); "
                    f"small buffers rotate among copies of >= {plan.flush_bytes // MIB} MiB in "
                    "all so they are not served from L2")
    for nbytes in plan.copy_bytes:
        row: dict[str, Any] = {"mib": nbytes / MIB, "bytes": nbytes}
        if copy_bytes_moved(nbytes) > plan.mem_cap_bytes:
            rec.add("hbm", {**row, "status": SKIP_MEMORY})
            continue
        if not rec.budget.allows(estimate_copy_case_s(plan, nbytes)):
            rec.add("hbm", {**row, "status": SKIP_BUDGET})
            continue
        sets = rotation_sets(copy_bytes_moved(nbytes), flush_bytes=plan.flush_bytes,
                             mem_cap_bytes=plan.mem_cap_bytes)
        pairs: list[tuple[Any, Any]] = []
        try:
            pairs = [(torch.randint(0, 256, (nbytes,), device=bench.device, dtype=torch.uint8),
                      torch.empty(nbytes, device=bench.device, dtype=torch.uint8))
                     for _ in range(sets)]
            t = bench.time_ms(cycling(_copy, pairs), warmup=plan.warmup, repeats=plan.repeats,
                              target_ms=plan.target_repeat_ms, max_inner=plan.max_inner)
            ok = all(bool(torch.equal(src, dst)) for src, dst in pairs[:2])
            rec.add("hbm", {**row, **t, "gbs": per_second(copy_bytes_moved(nbytes), t["ms"], 1e9),
                            "sets": sets, "status": "ok" if ok else "error: copy mismatch"})
        except Exception as exc:  # record it and go on
            rec.add("hbm", {**row, "status": _error(exc)})
        finally:
            pairs = []
            bench.release()


def run_sdpa(bench: Bench, plan: Plan, rec: Recorder) -> None:
    torch, d = bench.torch, plan.decoder
    sdpa = sdpa_gqa(torch)
    rec.note("sdpa", f"GQA through {sdpa.mode}; backend chosen by PyTorch (see the header's "  # type: ignore[attr-defined]
                     "SDPA backends); prefill causal, TFLOP/s counting half the score matrix; "
                     "decode q len 1 over the whole KV, no mask")
    gen = torch.Generator(device=bench.device).manual_seed(2)
    cases = ([("prefill", KVCase(1, n, 0, None)) for n in plan.sdpa_prefill_lens]
             + [("decode", c) for c in sdpa_decode_schedule(plan)])
    for kind, c in cases:
        q_len = c.context if kind == "prefill" else 1
        row: dict[str, Any] = {"kind": kind, "batch": c.batch, "q_len": q_len,
                               "kv_len": c.context}
        if c.skip:
            rec.add("sdpa", {**row, "status": c.skip})
            continue
        if not rec.budget.allows(estimate_sdpa_case_s(plan, batch=c.batch, q_len=q_len,
                                                      kv_len=c.context)):
            rec.add("sdpa", {**row, "status": SKIP_BUDGET})
            continue
        causal = kind == "prefill"
        nbytes = sdpa_bytes(c.batch, d.n_heads, d.n_kv_heads, q_len, c.context, d.head_dim)
        flops = sdpa_flops(c.batch, d.n_heads, q_len, c.context, d.head_dim, causal=causal)
        sets = rotation_sets(nbytes, flush_bytes=plan.flush_bytes,
                             mem_cap_bytes=plan.mem_cap_bytes)
        tensors: list[tuple[Any, Any, Any]] = []
        try:
            def rnd(*shape: int) -> Any:
                return torch.randn(*shape, device=bench.device, dtype=torch.bfloat16,
                                   generator=gen)

            tensors = [(rnd(c.batch, d.n_heads, q_len, d.head_dim),
                        rnd(c.batch, d.n_kv_heads, c.context, d.head_dim),
                        rnd(c.batch, d.n_kv_heads, c.context, d.head_dim)) for _ in range(sets)]
            with torch.inference_mode():
                t = bench.time_ms(cycling(functools.partial(_attend, sdpa, causal), tensors),
                                  warmup=plan.warmup, repeats=plan.repeats,
                                  target_ms=plan.target_repeat_ms, max_inner=plan.max_inner)
            rec.add("sdpa", {**row, **t, "tflops": per_second(flops, t["ms"], 1e12),
                             "gbs": per_second(nbytes, t["ms"], 1e9), "sets": sets,
                             "status": "ok"})
        except Exception as exc:  # record it and go on
            rec.add("sdpa", {**row, "status": _error(exc)})
        finally:
            tensors = []
            bench.release()


RUNNERS: dict[str, Callable[[Bench, Plan, Recorder], None]] = {
    "decode": run_decode, "gemm": run_gemm, "hbm": run_hbm, "prefill": run_prefill,
    "sdpa": run_sdpa}


def torch_meta(bench: Bench, plan: Plan) -> dict[str, Any]:
    torch = bench.torch
    meta: dict[str, Any] = {"torch": torch.__version__, "cuda": torch.version.cuda,
                            "cudnn": torch.backends.cudnn.version()}
    if bench.cuda:
        p = torch.cuda.get_device_properties(bench.device)
        meta.update(device=p.name, memory_gib=round(p.total_memory / GIB, 1),
                    sm_count=p.multi_processor_count, capability=f"{p.major}.{p.minor}")
        meta.update(nvidia_smi_meta())
        try:
            meta["sdpa_backends"] = sdpa_backend_probe(torch, bench.device, plan.decoder)
        except Exception as exc:
            meta["sdpa_backends"] = {"probe": _error(exc)}
    else:
        meta.update(device=f"cpu ({platform.processor() or platform.machine()}): smoke test, "
                           "timings meaningless")
    return meta


# --- CLI ----------------------------------------------------------------------------------

def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", type=Path, default=Path(os.environ.get("OUT", "h200_out")),
                   help="folder for h200_firstparty.json / .md (default: $OUT)")
    p.add_argument("--budget-s", type=float, default=480.0,
                   help="wall-clock budget; checked before every measurement (default 480)")
    p.add_argument("--mem-cap-gib", type=float, default=100.0,
                   help="largest KV cache / attention operands to allocate (default 100 GiB)")
    p.add_argument("--sections", default=",".join(SECTIONS),
                   help=f"comma-separated subset of {','.join(SECTIONS)}, run in that order")
    p.add_argument("--quick", action="store_true", help="tiny sizes and repeats (smoke test)")
    p.add_argument("--device", default="cuda", help="torch device (cpu: smoke test only)")
    p.add_argument("--commit", default=None, help="git commit to record (the device copy of "
                   "the tree may have no .git)")
    p.add_argument("--dry-run", action="store_true",
                   help="print the schedule and the runtime estimate as JSON; needs no torch")
    a = p.parse_args(argv)
    sections = tuple(s.strip() for s in a.sections.split(",") if s.strip())
    bad = [s for s in sections if s not in SECTIONS]
    if bad or not sections:
        p.error(f"--sections: unknown {bad}; pass a subset of {','.join(SECTIONS)}")
    a.sections = tuple(s for s in SECTIONS if s in sections)
    if a.budget_s <= 0:
        p.error("--budget-s must be positive")
    return a


def dry_run(plan: Plan, sections: Sequence[str]) -> dict[str, Any]:
    def cases(cs: list[KVCase]) -> list[dict[str, Any]]:
        return [{"batch": c.batch, "context": c.context, "kv_gib": round(c.kv_bytes / GIB, 2),
                 "skip": c.skip} for c in cs]
    return {"sections": list(sections), "estimate_s": estimate_runtime_s(plan, sections),
            "decode": cases(decode_schedule(plan)), "prefill": cases(prefill_schedule(plan)),
            "gemm": {"m": list(plan.gemm_m),
                     "shapes": [[label, g.n, g.k] for label, g in plan.gemm_shapes]},
            "hbm_mib": [n / MIB for n in plan.copy_bytes],
            "sdpa_decode": cases(sdpa_decode_schedule(plan))}


def main(argv: Sequence[str] | None = None) -> int:
    a = parse_args(argv)
    plan = make_plan(quick=a.quick, mem_cap_gib=a.mem_cap_gib)
    if a.dry_run:
        print(json.dumps(dry_run(plan, a.sections), indent=1))
        return 0
    budget = Budget(a.budget_s, reserve_s=2.0 if a.quick else 10.0)
    results = new_results(plan, sections=a.sections)
    results["meta"].update(host_meta(a.commit), estimate_s=estimate_runtime_s(plan, a.sections))
    rec = Recorder(a.out, results, budget)
    meta = results["meta"]

    def on_term(signum: int, frame: Any) -> None:
        raise Interrupted(f"signal {signum}")

    previous = signal.signal(signal.SIGTERM, on_term)
    current = None
    try:
        try:
            import torch
        except ImportError as exc:
            meta["status"] = f"error: torch not importable ({exc})"
            print(meta["status"], file=sys.stderr)
            return 2
        bench = Bench(torch, a.device)
        if bench.cuda and not torch.cuda.is_available():
            meta["status"] = "error: CUDA not available (pass --device cpu for a smoke test)"
            print(meta["status"], file=sys.stderr)
            return 2
        meta.update(torch_meta(bench, plan))
        rec.flush()
        for current in a.sections:
            sec = rec.section(current)
            sec["status"] = "running"
            t0 = time.monotonic()
            try:
                RUNNERS[current](bench, plan, rec)
                statuses = [r.get("status", "") for r in sec["rows"]]
                sec["status"] = ("partial (budget)" if SKIP_BUDGET in statuses else "done")
            except Exception as exc:  # one section's failure spares the rest
                sec["status"] = _error(exc)
                bench.release()
            sec["wall_s"] = round(time.monotonic() - t0, 1)
            print(f"[{budget.elapsed_s():6.1f} s] {current}: {sec['status']} "
                  f"({len(sec['rows'])} rows)", flush=True)
            rec.flush()
        current = None
        sections = rec.results["sections"].values()
        meta["status"] = ("complete" if all(s["status"] == "done" for s in sections)
                          else "finished with gaps (see section statuses)")
        return 0
    except (Interrupted, KeyboardInterrupt) as exc:
        meta["status"] = f"interrupted ({str(exc) or type(exc).__name__})"
        if current:
            rec.section(current)["status"] = "interrupted"
        return 3
    finally:
        signal.signal(signal.SIGTERM, previous)
        rec.flush()
        print(f"wrote {a.out / JSON_NAME} and {a.out / MD_NAME}: {meta['status']}", flush=True)


if __name__ == "__main__":
    sys.exit(main())
