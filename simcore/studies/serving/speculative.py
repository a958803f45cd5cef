"""Speculative decoding: what a decode step costs and how many tokens it emits.

A speculative decode step (Leviathan, Kalman & Matias, "Fast Inference from Transformers
via Speculative Decoding", ICML 2023) drafts ``K`` tokens per sequence with a cheap
proposer, then verifies them with one forward pass of the target model over ``K + 1``
positions per sequence (the last sampled token and the ``K`` drafts). With each drafted
token accepted with probability ``A`` (independently, the paper's assumption), a step
emits the accepted prefix plus the target's own next token, in expectation (their
eq. 1)::

    E[tokens per step] = (1 - A^(K+1)) / (1 - A)

:class:`Speculative` holds ``K`` (``--spec-draft-len``), ``A`` (``--spec-accept``,
the acceptance rate per drafted token, what vLLM's spec-decode metrics and SGLang's
``accept length`` report) and the proposer (``--spec-draft``):

* ``"mtp"`` (default): one extra decoder layer of the target's shape per drafted token,
  sharing its embedding and LM head, as DeepSeek-V3's multi-token-prediction module
  (DeepSeek-V3 technical report, §2.2: one MTP module, a full Transformer block, with the
  main model's embedding and output head) and EAGLE's one-layer draft head serve;
* a model preset name (``"Llama 3.2 1B"``): a separate draft model, run on the target's
  layout (vLLM's draft tensor parallelism defaults to the target's).

Pricing, all from the engine (:func:`spec_decode`):

* **verify** = a decode step of ``b`` sequences at context ``c`` whose forward also
  carries ``b·K`` more query tokens attending to ``c`` keys
  (``Workload(prefill_tokens=b·K, prefill_context=c)``): the matmuls over ``b·(K+1)``
  tokens, the weights and the KV cache read once, the attention FLOPs of every query.
  ``Workload`` refuses ``s_q != 1`` in decode, and a verify is not a prefill (it replays
  CUDA graphs and reads each sequence's cache once), so the mixed-token form is the
  engine's own decode with ``K+1`` queries per sequence. The engine charges mixed prompt
  tokens a share of eager kernel launches (a step that admits a prompt runs eagerly);
  a verify step replays its graph (vLLM, SGLang and TensorRT-LLM capture spec-decode
  steps), so that launch time is taken off again, and the LM head, which the engine runs
  for the last position only, is charged for the ``K`` drafted positions too (its FLOPs
  at the achievable matmul rate, from the engine's compute-alone times);
* **drafts** = ``K`` decode steps of the proposer at batch ``b`` and context ``c``
  (CUDA graphs);
* **memory**: the proposer's weights (MTP: one layer; the embedding and head are shared)
  and its KV cache come on top of the target's.

A pipeline-parallel layout is not priced with a one-layer MTP proposer (the engine puts
at most one stage per layer; the MTP layer sits on the last stage): such layouts are
left out (NaN) when speculating.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, replace
from functools import partial
from typing import Any

import numpy as np
import xarray as xr

from ...engine.evaluate import evaluate
from ...errors import DeviceBudgetError
from ...model.presets import get_family, load_model
from ...model.specs import Efficiency, Model
from .model import ServingError, _workload

__all__ = ["DRAFTS", "Speculative", "draft_model", "expected_tokens", "spec_decode", "spec_prefill"]

#: proposers priced without a model name
DRAFTS: tuple[str, ...] = ("mtp",)


def expected_tokens(k: int, a: float) -> float:
    """Expected tokens a speculative step emits per sequence: ``(1 - a^(k+1)) / (1 - a)``
    (Leviathan et al. 2023, eq. 1), ``k`` drafted tokens each accepted with probability
    ``a`` until the first rejection, plus the target's own token.

    Examples
    --------
    >>> expected_tokens(3, 0.0), expected_tokens(3, 0.5), round(expected_tokens(4, 0.8), 4)
    (1.0, 1.875, 3.3616)
    """
    return (1.0 - a ** (k + 1)) / (1.0 - a)


@dataclass(frozen=True)
class Speculative:
    """Speculative decoding: ``draft_len`` tokens drafted per step (``--spec-draft-len``),
    each accepted with probability ``accept`` (``--spec-accept``, in [0, 1)), drafted by
    ``draft`` (``"mtp"`` or a model preset name, ``--spec-draft``)."""

    draft_len: int
    accept: float
    draft: str = "mtp"

    def __post_init__(self) -> None:
        k = self.draft_len
        if isinstance(k, bool) or not isinstance(k, int | np.integer) or not 1 <= k <= 64:
            raise ServingError(f"spec_draft_len (--spec-draft-len) must be an integer in "
                               f"[1, 64], the tokens drafted per step, got {k!r}")
        a = self.accept
        if isinstance(a, bool) or not isinstance(a, int | float) or not (
                math.isfinite(a) and 0 <= a < 1):
            raise ServingError(f"spec_accept (--spec-accept) must be in [0, 1), the "
                               f"probability that a drafted token is accepted, got {a!r}")
        if not isinstance(self.draft, str) or not self.draft.strip():
            raise ServingError(f"spec_draft (--spec-draft) must be 'mtp' or a model preset "
                               f"name, got {self.draft!r}")
        if self.draft != "mtp":
            draft_model(None, self)  # an unknown draft model is refused before any work

    @property
    def tokens_per_step(self) -> float:
        """:func:`expected_tokens` of this configuration."""
        return expected_tokens(int(self.draft_len), float(self.accept))

    def describe(self) -> str:
        who = ("an MTP layer" if self.draft == "mtp" else self.draft)
        return (f"speculative decoding: {self.draft_len} tokens drafted per step by {who}, "
                f"each accepted with p {self.accept:g}: {self.tokens_per_step:.3g} tokens "
                f"per step (Leviathan et al. 2023, eq. 1), verified with {self.draft_len + 1} "
                "queries per sequence")


def draft_model(target: Model | None, spec: Speculative) -> tuple[Model, Model | None]:
    """The proposer as a model, and (MTP) a two-layer twin whose weights less the
    proposer's are one layer's (the MTP layer's weights, the embedding being shared)."""
    if spec.draft != "mtp":
        try:
            return load_model(spec.draft), None
        except (ValueError, FileNotFoundError) as exc:
            raise ServingError(f"spec_draft (--spec-draft) {spec.draft!r}: {exc}") from None
    assert target is not None
    return (replace(target, name=f"{target.name} MTP", n_layers=1, n_dense_layers=0,
                    n_local_layers=0, sliding_window=0),
            replace(target, name=f"{target.name} MTP x2", n_layers=2, n_dense_layers=0,
                    n_local_layers=0, sliding_window=0))


#: the proposer's passes run inside the engine's step, so they pay none of a synchronous
#: serving loop's host time (the step's, charged once on the verify or the prefill)
_IN_STEP: dict[str, Any] = {"host_step_ns": 0.0, "host_seq_ns": 0.0}


def _stack(common: dict[str, Any], dtype: str) -> tuple[dict[str, Any], Callable[..., Any]]:
    """``common`` less the serving stack (``dtype``, ``runtime``, ``moe_imbalance``): the
    keyword arguments of :func:`simcore.evaluate`; and the workload builder of that stack."""
    ekw = {k: v for k, v in common.items() if k not in ("dtype", "runtime", "moe_imbalance")}
    return ekw, partial(_workload, dtype=dtype, runtime=common.get("runtime", ""),
                        moe_imbalance=common.get("moe_imbalance", 1.0))


def _head_extra_ns(model: Model, k: int, batch: int, ctx: int, common: dict[str, Any],
                   wl: Callable[..., Any]) -> xr.DataArray:
    """The LM head over the ``k`` drafted positions of each of ``batch`` sequences, which
    the engine's mixed tokens skip (it runs the head for the last position only): the
    compute-alone time of a decode of ``batch·(k+1)`` sequences less the verify's (the
    same matmul and attention FLOPs but the head's), at a short context ``ctx``; charged
    in full, not hidden under the step's memory time (an upper bound, small: ``2·d·V``
    FLOPs a position)."""
    free = {**common, "gpus": None, "exact_gpus": False}  # FLOPs only: no memory budget
    wide = evaluate(model, wl("decode", batch=batch * (k + 1), s_kv=ctx), **free)
    verify = evaluate(model, wl("decode", batch=batch, s_kv=ctx, prefill_tokens=batch * k,
                                prefill_context=ctx), **free)
    return (wide.compute_alone_ns - verify.compute_alone_ns).clip(min=0.0)


def _verify(model: Model, k: int, batch: int, ctx: int, common: dict[str, Any],
            wl: Callable[..., Any]) -> xr.Dataset | None:
    """The verify step's evaluation (None when no layout in the budget holds it)."""
    try:
        return evaluate(model, wl("decode", batch=batch, s_kv=ctx, prefill_tokens=batch * k,
                                  prefill_context=ctx), **common)
    except DeviceBudgetError:
        return None


def spec_decode(model: Model, spec: Speculative, plain: xr.Dataset, *,
                common: dict[str, Any], dtype: str = "") -> xr.Dataset:
    """``plain`` (a decode sweep over ``batch`` x ``s_kv``, :func:`~.model.sweep`) priced
    with speculative decoding.

    Returns a Dataset over the same dims with ``step_ns`` (one speculative step: verify +
    ``K`` drafts), ``verify_ns`` (the verify alone), ``latency_ns`` (``step_ns`` over the expected tokens per step: the time
    per output token), ``throughput_tok_s``, ``mem_bytes`` / ``mem_weights_bytes`` /
    ``mem_kv_bytes`` (target and proposer), ``mem_act_bytes``, ``fits``, ``valid``,
    ``n_devices`` and ``within_budget`` (from ``plain``). ``common``: the keyword arguments
    of :func:`simcore.evaluate` (budget, space, hardware, family, efficiency), and the
    ``runtime`` of :func:`~.model.sweep` where given.
    """
    K, E = int(spec.draft_len), spec.tokens_per_step
    drafter, twin = draft_model(model, spec)
    p = plain
    batches = [int(b) for b in p.batch.values]
    ctxs = [int(c) for c in p.s_kv.values]
    ekw, wl = _stack(common, dtype)
    rows = []
    for b in batches:
        head = _head_extra_ns(model, K, b, min(ctxs), ekw, wl)
        cols = []
        for c in ctxs:
            here = p.sel(batch=b, s_kv=c, drop=True)
            v = _verify(model, K, b, c, ekw, wl)
            if v is None:  # nothing in the budget holds this batch's verify
                cols.append(here.latency_ns * np.nan)
                continue
            # the verify replays its CUDA graph: the eager launches the engine charges to
            # the mixed tokens come off again
            eager = (v.overhead_ns - here.overhead_ns).clip(min=0.0)
            cols.append(v.latency_ns - eager + head)
        rows.append(xr.concat(cols, dim="s_kv"))
    verify = xr.concat(rows, dim="batch").assign_coords(batch=p.batch, s_kv=p.s_kv)
    try:
        dr = evaluate(drafter, wl("decode", **_IN_STEP), batch=batches, s_kv=ctxs, **ekw)
    except ValueError as exc:
        raise ServingError(f"spec_draft (--spec-draft) {spec.draft!r} cannot run on these "
                           f"layouts: {exc}") from None
    step = verify + K * dr.latency_ns
    w_extra, kv_extra = dr.mem_weights_bytes, dr.mem_kv_bytes
    if twin is not None:  # MTP: one layer's weights (the embedding and head are shared)
        # weights do not depend on the batch: read them at every batch a layout holds (an
        # attention-DP layout is valid only from batch dp up; NaN-skipping max over them)
        w2 = evaluate(twin, wl("decode", s_kv=ctxs[0]), batch=batches, **ekw)
        w_extra = (w2.mem_weights_bytes.max("batch")
                   - dr.mem_weights_bytes.isel(s_kv=0, drop=True).max("batch"))
    fam = get_family(common.get("family"))
    hw = common.get("hardware") or fam.hardware
    usable = (common.get("efficiency") or Efficiency()).hbm_usable
    mem_w = p.mem_weights_bytes + w_extra
    mem_kv = p.mem_kv_bytes + kv_extra
    mem = mem_w + mem_kv + np.maximum(p.mem_act_bytes, dr.mem_act_bytes)
    valid = p.valid & dr.valid & np.isfinite(step)
    fits = valid & (mem <= float(hw.pe_hbm_gb) * 1e9 * usable)
    lat = (step / E).where(valid)
    out = xr.Dataset({
        "step_ns": step.where(valid), "verify_ns": verify.where(valid), "latency_ns": lat,
        "throughput_tok_s": p.batch / lat * 1e9,
        "mem_bytes": mem, "mem_weights_bytes": mem_w, "mem_kv_bytes": mem_kv,
        "mem_act_bytes": p.mem_act_bytes, "fits": fits, "valid": valid,
        "n_devices": p.n_devices,
    })
    if "within_budget" in p:
        out["within_budget"] = p.within_budget
    for k in ("step_ns", "verify_ns", "latency_ns"):
        out[k].attrs["units"] = "ns"
    out.attrs.update(p.attrs, speculative=spec.describe())
    return out


def spec_prefill(model: Model, spec: Speculative, pre: xr.Dataset, *, common: dict[str, Any],
                 dtype: str = "") -> xr.Dataset:
    """``pre`` (a prefill sweep over ``batch`` x ``s_kv``) with the proposer's own prefill
    of the prompt added to ``latency_ns`` (a draft model or the MTP layer builds its KV
    cache of the prompt too; it runs after the target's, on the same devices)."""
    drafter, _ = draft_model(model, spec)
    ekw, wl = _stack(common, dtype)
    batch, s_kv = ([int(v) for v in pre[d].values] for d in ("batch", "s_kv"))
    try:
        dr = evaluate(drafter, wl("prefill", **_IN_STEP), batch=batch, s_kv=s_kv, **ekw)
    except ValueError as exc:
        raise ServingError(f"spec_draft (--spec-draft) {spec.draft!r} cannot run on these "
                           f"layouts: {exc}") from None
    out = pre.copy()
    lat = pre.latency_ns + dr.latency_ns.transpose(*pre.latency_ns.dims)
    out["latency_ns"] = lat.assign_attrs(pre.latency_ns.attrs)
    out["valid"] = pre.valid & dr.valid
    out["fits"] = pre.fits & dr.valid.broadcast_like(pre.fits)
    return out
