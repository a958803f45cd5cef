"""Serving under traffic: what one deployment does to each request.

The steady-state model (:mod:`.model`) prices one decode step and one prefill; here the
requests of a :class:`~.traffic.Traffic` go through a scheduler step by step
(``simcore.kernels.requests``, reached through :func:`simcore.engine.core.request_kernels`):

* :func:`price_instances` asks the engine (:func:`~.model.sweep`) for every layout's step
  costs (a mixture-of-experts model's expert-parallel / attention-DP layouts included),
  a prefill table over (sequences, tokens) and a decode table over (batch,
  context), and its KV-cache capacity in paged blocks: ``kv_usable_fraction`` of HBM
  (vLLM's ``gpu_memory_utilization``) less the weights and the activations of a
  ``token_budget``-token step, in blocks of ``block_size`` tokens;
* :func:`serve_agg` runs ``replicas`` aggregated instances (requests dealt round-robin in
  arrival order), each one scheduler with chunked prefill and mixed batches under the
  token budget;
* :func:`serve_disagg` runs ``x`` prefill workers (the same scheduler, one token per
  request), moves each request's KV cache to a decode worker over the link between them
  (:func:`kv_link`; NVLink when the whole deployment sits in one node / NVL domain, the
  scale-out NIC otherwise; layer by layer while the prefill runs, one transfer at a time
  per prefill worker, never holding up the next prefill) and runs ``y`` decode workers
  (requests dealt round-robin in the order their KV lands);
* :func:`outcome` turns the per-request times into percentiles and goodput.

Definitions: TTFT = the first token's time less the arrival (disaggregated: the first
token reaches the user with the KV cache at the decode worker, so TTFT includes the
exposed transfer); TPOT of a request = (last token - first token) / (osl - 1), its mean
time per output token (none for osl 1); percentiles over requests (numpy's linear
interpolation); goodput = requests meeting both limits per second of traffic.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ...engine.core import request_kernels
from ...engine.space import PARALLEL_DIMS
from ...errors import DeviceBudgetError
from ...model.specs import HW_KNOBS, Efficiency, Hardware, HardwareFamily, Model
from .model import ServingError, expert_space, moe_choices, serving_space, sweep
from .speculative import Speculative, spec_decode, spec_prefill
from .traffic import Traffic

__all__ = ["DECODE_BATCHES", "KV_OVERLAPS", "POLICIES", "PREFILL_BATCHES", "Instance", "KvLink",
           "PrefillStage", "Scheduler", "Served",
           "kv_arrivals", "kv_link", "outcome", "prefill_stage", "price_instances", "serve_agg", "serve_disagg"]

#: prefill table: sequences per step (the kernel extrapolates linearly beyond)
PREFILL_BATCHES: tuple[int, ...] = (1, 2, 4, 8, 16, 32, 64)
#: decode table: sequences per step
DECODE_BATCHES: tuple[int, ...] = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512)
#: the tables' token / context grids start here and double
_GRID_START = 16
#: KV-transfer overlap rules (:func:`serve_disagg`)
KV_OVERLAPS = ("layerwise", "none")
#: scheduling policies (:class:`Scheduler`): vLLM V1's mixed steps, vLLM V0's prefill-first
POLICIES = ("mixed", "prefill_first")


#: the smallest non-zero long-prefill threshold: a chunk of at least one default KV block
#: (smaller caps only multiply the steps a prompt takes)
MIN_PREFILL_CAP = 16
#: the largest long-prefill threshold (the token budget's bound)
MAX_PREFILL_CAP = 1 << 24


def prefill_cap_ok(cap: int) -> bool:
    """Whether ``cap`` is a long-prefill threshold: 0 (off) or in [:data:`MIN_PREFILL_CAP`,
    :data:`MAX_PREFILL_CAP`]."""
    return cap == 0 or MIN_PREFILL_CAP <= cap <= MAX_PREFILL_CAP


@dataclass(frozen=True)
class Scheduler:
    """How every instance schedules (vLLM V1's knobs and defaults).

    ``token_budget``: tokens per step (``max_num_batched_tokens``; prompts longer than
    what is left are prefilled in chunks); ``max_seqs``: sequences per step
    (``max_num_seqs``); ``block_size``: tokens per KV-cache block;
    ``kv_usable_fraction``: the share of HBM the instance may use
    (``gpu_memory_utilization``), the KV cache getting what the weights and a
    ``token_budget`` step's activations leave; ``kv_overlap``: ``"layerwise"`` (a
    disaggregated prefill sends each layer's KV as it is computed) or ``"none"`` (the
    transfer starts when the prefill ends); ``prefix_hit_rate``: the share of each
    prompt whose KV the instance finds in its prefix cache (not computed again; its blocks
    still counted per request, and a preempted request computes it again);
    ``speculative``: speculative decoding (:class:`~.speculative.Speculative`, None: off):
    each decode step verifies ``K + 1`` queries per sequence after ``K`` draft steps,
    emits the expected tokens per sequence and keeps their KV; ``policy``: ``"mixed"``
    (vLLM V1, SGLang, TensorRT-LLM: decodes first, prompts chunked into the rest of the
    budget) or ``"prefill_first"`` (vLLM V0 without chunked prefill, its default below 32K
    contexts: a step admits waiting prompts whole and runs them alone, decodes wait);
    ``multi_step``: vLLM's ``--num-scheduler-steps`` (>= 1; above 1 not with
    ``speculative``): a decode-only step runs as a block of that many decode steps of the
    same batch, the scheduler (admission, retirement) running again only at its end and
    the block's tokens reaching the client at its end, prompt steps running singly;
    ``async_output``: vLLM's asynchronous output processing, a single step's tokens
    reaching the client when the next step ends (vLLM 0.6's default; off: at once);
    ``long_prefill_threshold``: vLLM V1's ``--long-prefill-token-threshold``, a request
    gets at most that many of its prompt tokens a step (0: off, vLLM's default with one
    partial prefill; mixed policy only).
    """

    token_budget: int = 8192
    max_seqs: int = 256
    block_size: int = 16
    kv_usable_fraction: float = 0.9
    kv_overlap: str = "layerwise"
    prefix_hit_rate: float = 0.0
    speculative: Speculative | None = None
    policy: str = "mixed"
    multi_step: int = 1
    async_output: bool = False
    long_prefill_threshold: int = 0

    def __post_init__(self) -> None:
        for name, lo in (("token_budget", 1), ("max_seqs", 1), ("block_size", 1)):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int | np.integer) or not lo <= v <= 1 << 24:
                flag = {"token_budget": "--max-num-batched-tokens",
                        "max_seqs": "--max-num-seqs"}.get(name, name)
                raise ServingError(f"{name} ({flag}) must be an integer in [1, {1 << 24}], "
                                   f"got {v!r}")
        f = self.kv_usable_fraction
        if isinstance(f, bool) or not isinstance(f, int | float) or not 0 < f <= 1:
            raise ServingError(f"kv_usable_fraction (--kv-usable-fraction) must be in (0, 1] "
                               f"(vLLM's gpu_memory_utilization, e.g. 0.9), got {f!r}")
        h = self.prefix_hit_rate
        if isinstance(h, bool) or not isinstance(h, int | float) or not 0 <= h < 1:
            raise ServingError(f"prefix_hit_rate (--prefix-hit-rate) must be in [0, 1), the "
                               f"share of each prompt found in the prefix cache, got {h!r}")
        if self.speculative is not None and not isinstance(self.speculative, Speculative):
            raise ServingError(f"speculative must be a Speculative(draft_len, accept) or None, "
                               f"got {type(self.speculative).__name__}")
        if self.speculative is not None and self.token_budget <= self.speculative.draft_len:
            raise ServingError(f"token_budget (--max-num-batched-tokens) {self.token_budget} "
                               f"cannot hold one verify of {self.speculative.draft_len + 1} "
                               "tokens (--spec-draft-len + 1); raise it or draft fewer")
        if self.policy not in POLICIES:
            raise ServingError(f"policy (--schedule) must be one of {POLICIES}, got "
                               f"{self.policy!r}")
        ms = self.multi_step
        if isinstance(ms, bool) or not isinstance(ms, int | np.integer) or not 1 <= ms <= 1 << 10:
            raise ServingError(f"multi_step (vLLM's --num-scheduler-steps) must be an integer "
                               f"in [1, {1 << 10}], got {ms!r}")
        if ms > 1 and self.speculative is not None:
            raise ServingError("multi_step (--num-scheduler-steps) above 1 cannot be combined "
                               "with speculative decoding (vLLM refuses it too)")
        if not isinstance(self.async_output, bool | np.bool_):
            raise ServingError(f"async_output must be True or False, got "
                               f"{self.async_output!r}")
        if self.kv_overlap not in KV_OVERLAPS:
            raise ServingError(f"kv_overlap must be one of {KV_OVERLAPS}, got "
                               f"{self.kv_overlap!r}")
        cap = self.long_prefill_threshold
        if isinstance(cap, bool) or not isinstance(cap, int | np.integer) or \
                not prefill_cap_ok(cap):
            raise ServingError(f"long_prefill_threshold (--long-prefill-token-threshold) must be "
                               f"0 (off) or an integer in [{MIN_PREFILL_CAP}, {MAX_PREFILL_CAP}], "
                               f"got {cap!r}")
        if cap and self.policy == "prefill_first":
            raise ServingError("long_prefill_threshold (--long-prefill-token-threshold) chunks "
                               "prompts, which prefill-first scheduling runs whole; pass "
                               "--schedule mixed with it (vLLM V1 has both)")

    def describe(self) -> str:
        hit = (f", {self.prefix_hit_rate:g} of each prompt from the prefix cache"
               if self.prefix_hit_rate else "")
        spec = f"; {self.speculative.describe()}" if self.speculative is not None else ""
        how = ("chunked prefill, mixed batches" if self.policy == "mixed" else
               "prefill-first: waiting prompts whole, in steps of their own")
        if self.multi_step > 1:
            how += f", decodes in blocks of {self.multi_step} steps"
        if self.async_output:
            how += ", asynchronous output processing"
        if self.chunk_tokens < self.token_budget:
            how += f", at most {self.long_prefill_threshold} prompt tokens of a request a step"
        return (f"token budget {self.token_budget} per step ({how}), "
                f"at most {self.max_seqs} sequences, KV blocks of {self.block_size} tokens in "
                f"{self.kv_usable_fraction:g} of HBM less weights and activations{hit}{spec}")

    @property
    def chunk_tokens(self) -> int:
        """The most prompt tokens one request gets a step: the token budget, or the
        long-prefill threshold below it."""
        cap = int(self.long_prefill_threshold)
        return min(int(self.token_budget), cap) if cap else int(self.token_budget)

    @property
    def spec_args(self) -> tuple[int, float]:
        """``(spec_k, spec_gain)`` of the request kernel: ``(0, 1.0)`` without
        speculation."""
        s = self.speculative
        return (0, 1.0) if s is None else (int(s.draft_len), float(s.tokens_per_step))

    def cached_tokens(self, isl: np.ndarray) -> np.ndarray:
        """Prompt tokens found in the prefix cache (at least one token is computed)."""
        hit = np.floor(isl * self.prefix_hit_rate).astype(np.int64)
        return np.minimum(hit, isl - 1)


@dataclass(frozen=True, eq=False)
class Instance:
    """One layout as a serving instance: its step-cost tables (``StepTables``, ns), its
    KV cache in blocks and the whole model's KV bytes per token (what a transfer moves)."""

    label: str
    layout: Mapping[str, Any]
    n_devices: int
    tables: Any
    kv_blocks: int
    kv_bytes_per_token: float
    block_size: int

    @property
    def replica_blocks(self) -> int:
        """KV blocks one attention replica holds: a request's cache lives on one of the
        instance's ``dp`` attention-DP replicas (``kv_blocks`` is their total)."""
        return self.kv_blocks // max(1, int(self.layout.get("dp", 1)))

    def holds(self, tokens: int) -> bool:
        """Whether the cache can hold one request's ``tokens`` tokens (on one attention
        replica: with attention DP a request's KV does not spread over the replicas)."""
        return -(-int(tokens) // self.block_size) <= self.replica_blocks

    def concurrency(self, tokens: int) -> int:
        """Requests of ``tokens`` tokens the cache holds at once."""
        return self.kv_blocks // max(1, -(-int(tokens) // self.block_size))

    def prefill_ns(self, tokens: float, sequences: float = 1.0) -> float:
        """Unloaded prefill of ``sequences`` prompts of ``tokens`` tokens each."""
        k = request_kernels()
        t = int(round(tokens * sequences))
        pairs = sequences * tokens * (tokens + 1) / 2.0
        return float(k.prefill_part_ns(self.tables, max(t, 1), max(pairs, 1.0)))

    def decode_ns(self, batch: int, context: float) -> float:
        """A decode step of ``batch`` sequences at mean ``context``."""
        k = request_kernels()
        b = max(int(batch), 1)
        return float(k.decode_part_ns(self.tables, b, float(context) * b))


def _grid(top: int, extra: Sequence[int]) -> list[int]:
    vals, g = set(int(e) for e in extra if e >= 1), _GRID_START
    while True:
        vals.add(g)
        if g >= top:
            break
        g *= 2
    return sorted(vals)


def _per_layout(da: Any, lead: Sequence[str]) -> np.ndarray:
    """``da`` as (lead dims..., layout) in the stacked PARALLEL_DIMS order."""
    da = da.squeeze([k for k in HW_KNOBS if k in da.dims], drop=True)
    arr = da.transpose(*lead, *PARALLEL_DIMS).values
    return arr.reshape(*arr.shape[:len(lead)], -1)


@dataclass(frozen=True, eq=False)
class _Priced:
    """One layout space's sweeps, per layout (the last axis): step tables on the space's
    batch grids, validity, devices, KV bytes per instance token on a device, free bytes."""

    layouts: Any
    pre_batches: np.ndarray
    dec_batches: np.ndarray
    pre_ns: np.ndarray
    dec_ns: np.ndarray
    mix_base: np.ndarray | None
    ok: np.ndarray
    n_dev: np.ndarray
    kv_tok: np.ndarray
    free: np.ndarray


def _small_batches(grid: Sequence[int], dp: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``(small, first)``: where a grid batch is below a layout's attention DP (batch x
    layout; the engine masks ``dp > batch``) and, per layout, the index of the smallest grid
    batch >= dp (the grid's length where none is)."""
    small = np.asarray(grid)[:, None] < dp[None, :]
    return small, small.sum(axis=0)


def _fill_small(ns: np.ndarray, small: np.ndarray, first: np.ndarray) -> np.ndarray:
    """``ns`` (batch x context x layout) with the rows of batches below a layout's attention
    DP set to its row at the smallest batch >= dp: the replicas without a sequence idle, the
    step still runs."""
    out = ns.copy()
    for j in np.nonzero(small.any(axis=0) & (first < ns.shape[0]))[0]:
        out[:first[j], :, j] = ns[first[j], :, j]
    return out


def _price_space(model: Model, space: Any, common: dict[str, Any], *, pre_batches: list[int],
                 dec_batches: list[int], tok_grid: list[int], ctx_grid: list[int],
                 scheduler: Scheduler, hbm: float, dtype: str) -> _Priced:
    """:func:`price_instances` for one layout space (see there)."""
    common = dict(common, space=space)
    budget = scheduler.token_budget
    pre = sweep(model, "prefill", batch=pre_batches, s_kv=tok_grid, **common)
    dec = sweep(model, "decode", batch=dec_batches, s_kv=ctx_grid, **common)
    mix_base = None
    if scheduler.speculative is not None:  # a decode step: K drafts + a verify
        spec = scheduler.speculative
        pre = spec_prefill(model, spec, pre, common=common, dtype=dtype)
        dec = spec_decode(model, spec, dec, common=common, dtype=dtype)
        mix_base = _per_layout(dec.verify_ns, ("batch", "s_kv"))
        dec["latency_ns"] = dec.step_ns
    dp = _per_layout(dec.dp.broadcast_like(dec.n_devices), ()).astype(np.int64)
    p_small, p_first = _small_batches(pre_batches, dp)
    d_small, d_first = _small_batches(dec_batches, dp)
    pre_ns = _fill_small(_per_layout(pre.latency_ns, ("batch", "s_kv")), p_small, p_first)
    dec_ns = _fill_small(_per_layout(dec.latency_ns, ("batch", "s_kv")), d_small, d_first)
    # a layout serves if the engine takes every batch >= its attention DP (below, masked)
    ok = ((_per_layout(pre.valid, ("batch", "s_kv")) | p_small[:, None, :]).all(axis=(0, 1))
          & (_per_layout(dec.valid, ("batch", "s_kv")) | d_small[:, None, :]).all(axis=(0, 1))
          & (p_first < len(pre_batches)) & (d_first < len(dec_batches))
          & np.isfinite(pre_ns).all(axis=(0, 1)) & np.isfinite(dec_ns).all(axis=(0, 1))
          & _per_layout(dec.within_budget, ()).astype(bool))
    cols = np.arange(dp.size)
    pf, df = np.minimum(p_first, len(pre_batches) - 1), np.minimum(d_first, len(dec_batches) - 1)
    weights = _per_layout(dec.mem_weights_bytes, ("batch", "s_kv"))[df, 0, cols]
    act = _per_layout(pre.mem_act_bytes, ("batch", "s_kv"))[pf, tok_grid.index(budget), cols]
    # KV: the engine's per-device bytes at the smallest batch >= dp, b sequences at the
    # longest context, hold ceil(b / dp) sequences (the busiest attention replica's); each
    # of the dp replicas keeps its own sequences' KV on its own devices, so one device's
    # free bytes hold free / per-token bytes tokens of its replica and the instance dp
    # times that: kv_tok is a device's bytes per token of the instance, mem / (ceil(b /
    # dp) · context · dp) (dp 1: mem / context at batch 1, as before)
    seqs = -(-np.asarray(dec_batches)[df] // dp)
    kv_mem = _per_layout(dec.mem_kv_bytes, ("batch", "s_kv"))[df, -1, cols]
    kv_tok = kv_mem / (seqs * ctx_grid[-1] * dp)
    if mix_base is not None:
        mix_base = mix_base[df, 0, cols]
    return _Priced(layouts=dec.n_devices.stack(_l=PARALLEL_DIMS).indexes["_l"],
                   pre_batches=np.array(pre_batches, float),
                   dec_batches=np.array(dec_batches, float), pre_ns=pre_ns, dec_ns=dec_ns,
                   mix_base=mix_base, ok=ok,
                   n_dev=_per_layout(dec.n_devices, ()).astype(np.int64), kv_tok=kv_tok,
                   free=scheduler.kv_usable_fraction * hbm - weights - act)


def _expert_spaces(model: Model, max_devices: int) -> list[tuple[Any, tuple[int, ...]]]:
    """The expert-parallel layout space of a mixture-of-experts model, as the steady-state
    planner searches it by default (:func:`~.model.moe_choices` ``"all"``, every ``ep`` > 1),
    with its attention-DP degrees; none for a dense model."""
    if int(model.n_experts) <= 1:
        return []
    dps, eps = moe_choices(int(model.n_experts), max_devices)
    big = tuple(e for e in eps if e > 1)
    return [(expert_space(max_devices, dps, big), dps)] if big else []


def price_instances(model: Model, *, family: HardwareFamily, hardware: Hardware,
                    efficiency: Efficiency | None, dtype: str, max_devices: int,
                    max_tokens: int, scheduler: Scheduler,
                    tokens: Sequence[int] = (), contexts: Sequence[int] = (),
                    runtime: str = "", moe_imbalance: float = 1.0) -> list[Instance]:
    """Every layout of up to ``max_devices`` devices that can serve: its step tables and
    KV cache (at least one block); ``dtype``, ``runtime`` and ``moe_imbalance`` as
    :func:`~.model.sweep`'s.

    The layouts: :func:`~.model.serving_space`'s and, for a mixture-of-experts model, the
    expert-parallel ones the steady-state planner searches by default
    (:func:`~.model.expert_space` over :func:`~.model.moe_choices`' attention-DP degrees
    and every ``ep`` > 1; ``moe_imbalance`` moves those). Prefill: :func:`~.model.sweep`
    over :data:`PREFILL_BATCHES` x tokens (16, 32, ... doubling past ``max_tokens`` and the
    token budget, plus ``tokens``); decode: over :data:`DECODE_BATCHES` x contexts (the
    same doubling grid plus ``contexts``); the expert-parallel sweep adds the attention-DP
    degrees to both batch grids. A batch is the instance's sequences, split over its
    ``dp`` attention replicas; the engine masks batches below ``dp``, and there a step
    costs what it costs at the smallest batch >= ``dp`` (one sequence per replica: the
    replicas without a sequence idle, the step still runs; conservative, since the
    experts then see ``dp`` sequences' tokens). KV blocks per instance: ``(kv_usable_fraction
    · HBM - weights - activations of a token_budget prefill) / (block_size · KV bytes per
    token)`` per device, the activations and bytes per token those of the smallest batch
    >= ``dp``; with attention DP each replica holds its own sequences' KV, so the instance
    holds ``dp`` times what one replica's devices do.
    """
    from .search import layout_label

    budget = scheduler.token_budget
    tok_grid = _grid(max(max_tokens, budget), [*tokens, budget])
    ctx_grid = _grid(max_tokens, contexts)
    common: dict[str, Any] = dict(gpus=max_devices, hardware=hardware, family=family,
                                  efficiency=efficiency, dtype=dtype, runtime=runtime,
                                  moe_imbalance=moe_imbalance)
    grids: dict[str, Any] = dict(tok_grid=tok_grid, ctx_grid=ctx_grid, scheduler=scheduler,
                                 hbm=float(hardware.pe_hbm_gb) * 1e9, dtype=dtype)
    spaces = [(serving_space(max_devices), ())] + _expert_spaces(model, max_devices)
    parts, failed = [], None
    for space, dps in spaces:
        try:
            parts.append(_price_space(
                model, space, common, pre_batches=sorted({*PREFILL_BATCHES, *dps}),
                dec_batches=sorted({*DECODE_BATCHES, *dps}), **grids))
        except DeviceBudgetError as exc:  # no layout of this space fits the budget
            failed = failed or exc
    if not parts:
        assert failed is not None
        raise failed
    kv_tok = np.concatenate([p.kv_tok for p in parts])
    n_dev = np.concatenate([p.n_dev for p in parts])
    single = np.nonzero(n_dev == 1)[0]
    whole_kv = float(kv_tok[single[0]]) if single.size else float(np.nanmax(kv_tok * n_dev))
    kern = request_kernels()
    pt, dc = np.array(tok_grid, float), np.array(ctx_grid, float)
    out = []
    for p in parts:
        with np.errstate(divide="ignore", invalid="ignore"):
            blocks = np.floor(p.free / (scheduler.block_size * p.kv_tok))
        for j in np.nonzero(p.ok & np.isfinite(blocks) & (blocks >= 1))[0]:
            lay = dict(zip(PARALLEL_DIMS, (v.item() if hasattr(v, "item") else v
                                           for v in p.layouts[j]), strict=True))
            tables = kern.StepTables(p.pre_batches, pt, np.ascontiguousarray(p.pre_ns[:, :, j]),
                                     p.dec_batches, dc, np.ascontiguousarray(p.dec_ns[:, :, j]),
                                     math.nan if p.mix_base is None else float(p.mix_base[j]))
            out.append(Instance(label=layout_label(lay), layout=lay, n_devices=int(p.n_dev[j]),
                                tables=tables, kv_blocks=int(min(blocks[j], 1 << 40)),
                                kv_bytes_per_token=whole_kv, block_size=scheduler.block_size))
    return out


# --- running deployments ------------------------------------------------------------------

@dataclass(frozen=True, eq=False)
class Served:
    """Per request (in the traffic's order): ``ttft_ns``, ``tpot_ns`` (NaN for osl 1),
    ``kv_ns`` (the transfer's exposed part, 0 aggregated), ``served`` (False: dropped, its
    KV never fits); ``preemptions`` and ``steps`` summed over instances."""

    ttft_ns: np.ndarray
    tpot_ns: np.ndarray
    kv_ns: np.ndarray
    served: np.ndarray
    preemptions: int
    steps: int
    extra: dict[str, Any] = field(default_factory=dict)


def _deal(arrival_ns: np.ndarray, prompt: np.ndarray, cached: np.ndarray,
          max_new: np.ndarray, inst: Instance, sched: Scheduler,
          instances: int, decode: bool = True) -> tuple[Any, ...]:
    """Requests (sorted by arrival) dealt round-robin to ``instances`` instances of
    ``inst``, all simulated in one kernel call (``decode``: speculating when the
    scheduler does; a prefill worker never decodes, its KV ready at its step's end: no
    multi-step blocks, no output delay)."""
    spec_k, gain = sched.spec_args if decode else (0, 1.0)
    steps = int(sched.multi_step) if decode else 1
    return request_kernels().simulate_round_robin(
        np.ascontiguousarray(arrival_ns, dtype=np.float64),
        np.ascontiguousarray(prompt, dtype=np.int64),
        np.ascontiguousarray(cached, dtype=np.int64),
        np.ascontiguousarray(max_new, dtype=np.int64), inst.tables,
        int(sched.token_budget), int(sched.max_seqs), int(inst.kv_blocks),
        int(sched.block_size), int(instances), spec_k, gain, sched.policy == "prefill_first",
        steps, bool(sched.async_output) and decode, int(sched.long_prefill_threshold))


def _tpot(first: np.ndarray, last: np.ndarray, osl: np.ndarray) -> np.ndarray:
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(osl > 1, (last - first) / np.maximum(osl - 1, 1), np.nan)


def serve_agg(traffic: Traffic, inst: Instance, replicas: int, sched: Scheduler) -> Served:
    """``replicas`` aggregated instances of ``inst``; request ``i`` (in arrival order) goes
    to replica ``i % replicas``."""
    n = traffic.n
    arrival = traffic.arrival_s * 1e9
    first, last, _, pre, steps = _deal(arrival, traffic.isl, sched.cached_tokens(traffic.isl),
                                       traffic.osl, inst, sched, replicas)
    served = first >= 0
    return Served(ttft_ns=np.where(served, first - arrival, np.inf),
                  tpot_ns=np.where(served, _tpot(first, last, traffic.osl), np.inf),
                  kv_ns=np.zeros(n), served=served, preemptions=int(pre.sum()),
                  steps=int(steps))


@dataclass(frozen=True)
class KvLink:
    """The link a KV cache crosses from a prefill to a decode worker: ``tier`` (NVLink or
    RDMA), per-device bandwidth ``bw_gbs`` and latency ``alpha_ns``."""

    tier: str
    bw_gbs: float
    alpha_ns: float

    def transfer_ns(self, tokens: np.ndarray, kv_bytes_per_token: float, lanes: int) -> np.ndarray:
        """Whole transfer of ``tokens`` tokens' KV over ``lanes`` device pairs at once."""
        return tokens * kv_bytes_per_token / (lanes * self.bw_gbs) + self.alpha_ns


def kv_link(family: HardwareFamily, hardware: Hardware, n_devices: int) -> KvLink:
    """NVLink (``bw_intra_gbs``) when the deployment's ``n_devices`` fit one node / NVL
    domain (``pes_per_cube``), else the scale-out NIC (``bw_inter_gbs``, shared when a node
    has fewer NICs than GPUs)."""
    topo = family.topology
    if n_devices <= topo.pes_per_cube:
        return KvLink("NVLink", float(hardware.bw_intra_gbs), float(topo.alpha_intra_ns))
    share = min(1.0, topo.nics_per_cube / topo.pes_per_cube) if topo.nics_per_cube else 1.0
    return KvLink("RDMA", float(hardware.bw_inter_gbs) * share, float(topo.alpha_inter_ns))


@dataclass(frozen=True, eq=False)
class PrefillStage:
    """What ``workers`` prefill workers did: per request, the end of its prefill
    (``done_ns``), how long it ran (``span_ns``), its worker; dropped requests -1."""

    done_ns: np.ndarray
    span_ns: np.ndarray
    worker: np.ndarray
    preemptions: int
    steps: int


def prefill_stage(traffic: Traffic, inst: Instance, workers: int, sched: Scheduler) -> PrefillStage:
    """``workers`` prefill workers of ``inst`` (request ``i`` to worker ``i % workers``),
    each the aggregated scheduler with one token per request."""
    n = traffic.n
    done, _, start, pre, steps = _deal(traffic.arrival_s * 1e9, traffic.isl,
                                       sched.cached_tokens(traffic.isl), np.ones(n, np.int64), inst,
                                       sched, workers, decode=False)
    span = np.where(done >= 0, done - start, 0.0)
    worker = np.arange(n) % workers
    return PrefillStage(done, span, worker, int(pre.sum()), int(steps))


def kv_arrivals(traffic: Traffic, stage: PrefillStage, pre: Instance, dec_devices: int,
                link: KvLink, n_layers: int, sched: Scheduler) -> np.ndarray:
    """When each request's KV cache lands at its decode worker (ns; -1 dropped; a request
    with osl 1 needs no decode worker: its prefill's end). Each prefill worker's transfers
    share its link one at a time, in the order their prefills end (:func:`~simcore.kernels.
    requests.kv_transfer_done`, over ``min(prefill, decode)`` device pairs at once)."""
    k = request_kernels()
    whole = link.transfer_ns(traffic.isl.astype(float), pre.kv_bytes_per_token,
                             min(pre.n_devices, dec_devices))
    kv_done = np.full(traffic.n, -1.0)
    ok = stage.done_ns >= 0
    for w in range(int(stage.worker.max()) + 1 if stage.worker.size else 0):
        idx = np.nonzero(ok & (stage.worker == w))[0]
        if idx.size == 0:
            continue
        idx = idx[np.argsort(stage.done_ns[idx], kind="stable")]
        kv_done[idx] = k.kv_transfer_done(
            np.ascontiguousarray(stage.done_ns[idx]), np.ascontiguousarray(stage.span_ns[idx]),
            np.ascontiguousarray(whole[idx]), int(n_layers), sched.kv_overlap == "layerwise")
    return np.where((traffic.osl <= 1) & ok, stage.done_ns, kv_done)


def serve_disagg(traffic: Traffic, pre: Instance, x: int, dec: Instance, y: int,
                 sched: Scheduler, link: KvLink, n_layers: int,
                 stage: PrefillStage | None = None) -> Served:
    """``x`` prefill workers of ``pre`` hand each request's KV cache over ``link`` to ``y``
    decode workers of ``dec`` (``stage``: the prefill workers' run, if done already)."""
    n = traffic.n
    arrival = traffic.arrival_s * 1e9
    st = stage if stage is not None else prefill_stage(traffic, pre, x, sched)
    kv_done = kv_arrivals(traffic, st, pre, dec.n_devices, link, n_layers, sched)
    ok = st.done_ns >= 0
    one = traffic.osl <= 1  # nothing to decode: the prefill's token is the answer
    go = np.nonzero(ok & ~one)[0]
    go = go[np.argsort(kv_done[go], kind="stable")]
    last = np.full(n, -1.0)
    _, last[go], _, d_pre, d_steps = _deal(kv_done[go], traffic.isl[go] + 1, traffic.isl[go],
                                           traffic.osl[go] - 1, dec, sched, y)
    served = ok & (one | (last >= 0))
    return Served(ttft_ns=np.where(served, kv_done - arrival, np.inf),
                  tpot_ns=np.where(served, _tpot(kv_done, last, traffic.osl), np.inf),
                  kv_ns=np.where(served, kv_done - st.done_ns, 0.0), served=served,
                  preemptions=st.preemptions + int(d_pre.sum()), steps=st.steps + int(d_steps),
                  extra={"kv_tier": link.tier})


def _pct(values: np.ndarray, q: float) -> float:
    v = values[~np.isnan(values)]
    if v.size == 0:
        return math.nan
    if np.isinf(v).any():
        return float(np.sort(v)[min(v.size - 1, int(math.ceil(q / 100 * v.size)) - 1)]) \
            if q < 100 else math.inf
    return float(np.percentile(v, q))


def outcome(served: Served, traffic: Traffic, *, max_ttft_ms: float | None,
            max_tpot_ms: float | None) -> dict[str, Any]:
    """Percentiles (ms), goodput and what binds for one deployment's run."""
    ttft_ms, tpot_ms = served.ttft_ns / 1e6, served.tpot_ns / 1e6
    good = served.served.copy()
    if max_ttft_ms is not None:
        good &= ttft_ms <= max_ttft_ms
    if max_tpot_ms is not None:
        good &= np.isnan(tpot_ms) | (tpot_ms <= max_tpot_ms)
    res = {
        "ttft_p50_ms": _pct(ttft_ms, 50), "ttft_p99_ms": _pct(ttft_ms, 99),
        "tpot_p50_ms": _pct(tpot_ms, 50), "tpot_p99_ms": _pct(tpot_ms, 99),
        "rate_rps": traffic.rate_rps, "goodput_rps": float(good.sum()) / traffic.duration_s,
        "good_fraction": float(good.mean()),
        "kv_transfer_ms": float(np.mean(served.kv_ns[served.served]) / 1e6)
        if served.served.any() else math.nan,
        "preemptions": served.preemptions, "dropped": int((~served.served).sum()),
    }
    ttft_ok = max_ttft_ms is None or res["ttft_p99_ms"] <= max_ttft_ms
    tpot_ok = max_tpot_ms is None or math.isnan(res["tpot_p99_ms"]) or \
        res["tpot_p99_ms"] <= max_tpot_ms
    res["ttft_ok"], res["tpot_ok"] = bool(ttft_ok), bool(tpot_ok)
    res["meets_limits"] = bool(ttft_ok and tpot_ok and res["dropped"] == 0)
    return res
