"""The serving search at a request rate: the smallest deployments meeting p99 limits.

:func:`plan_at_rate` runs in named steps: :func:`_rate_request` checks the input and builds
the traffic (:mod:`.traffic`); :func:`_instances` prices every layout as a serving
instance (:func:`~.simulate.price_instances`); :func:`_shortlist` keeps, per layout size,
the few layouts worth simulating (by steady-state capacity and unloaded latency);
:func:`_agg_search` finds, per layout, the fewest replicas whose simulated p99 TTFT and
TPOT meet the limits; :func:`_disagg_search` finds, per (prefill, decode) layout pair, the
fewest prefill workers meeting the TTFT limit, then the fewest decode workers meeting the
TPOT limit (the prefill:decode ratio); :func:`_choose_at_rate` ranks them (meets the
limits, fewest GPUs, goodput, p99 TTFT) or raises :class:`RateInfeasibleError` naming the
closest deployment.

The searches assume more replicas / workers never hurt (requests are dealt round-robin,
so each gets fewer): they step up from the steady-state estimate and bisect.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, fields, replace
from typing import Any

import numpy as np

from ...errors import DeviceBudgetError
from ...model.presets import get_family, load_model
from ...model.specs import Efficiency, Hardware, HardwareFamily, Model
from .model import (
    InfeasibleError,
    PlanRows,
    ServingError,
    _dtype,
    _limit,
    _moe_imbalance,
    _one_hardware,
    _positive_int,
    _runtime,
)
from .simulate import (
    Instance,
    PrefillStage,
    Scheduler,
    kv_arrivals,
    kv_link,
    outcome,
    prefill_stage,
    price_instances,
    serve_agg,
    serve_disagg,
)
from .speculative import Speculative
from .traffic import Traffic, TrafficError, poisson, read_trace

__all__ = ["AUTO_MAX_GPUS", "DEFAULT_DURATION_S", "RATE_ROW_KEYS", "RateConfig", "RateInfeasibleError",
           "RatePlan", "plan_at_rate"]

#: ``gpus="auto"`` searches deployments of up to this many devices (or the family's system)
AUTO_MAX_GPUS = 1024
#: seconds of Poisson traffic simulated by default
DEFAULT_DURATION_S = 120.0
#: aggregated layouts simulated per layout size; (prefill, decode) pairs simulated
_KEEP_AGG, _KEEP_PAIRS = 3, 8
#: layouts or pairs whose steady-state estimate needs more than this many times the
#: fewest GPUs are not simulated
_SPREAD = 2.0


@dataclass(frozen=True)
class RateConfig:
    """One deployment under the traffic (a row): what it is and what its requests saw."""

    mode: str
    layout: str
    prefill_layout: str
    decode_layout: str
    replicas: int | None
    prefill_workers: int | None
    decode_workers: int | None
    #: largest prefill chunk per step (the token budget, ``--max-num-batched-tokens``)
    prefill_chunk_tokens: int
    ttft_p50_ms: float
    ttft_p99_ms: float
    tpot_p50_ms: float
    tpot_p99_ms: float
    rate_rps: float
    goodput_rps: float
    #: mean exposed KV transfer per request (0 aggregated)
    kv_transfer_ms: float
    #: the link the KV crosses (``NVLink`` / ``RDMA``; empty aggregated)
    kv_link: str
    n_devices: int
    #: KV-cache blocks per instance (decode worker when disaggregated)
    kv_blocks: int
    #: requests of the traffic's mean length the KV cache of one instance holds at once
    max_concurrency: int
    preemptions: int
    meets_limits: bool
    dtype: str = "default"

    def as_row(self) -> dict[str, Any]:
        return asdict(self)


RATE_ROW_KEYS: tuple[str, ...] = tuple(f.name for f in fields(RateConfig))


class RateInfeasibleError(InfeasibleError):
    """No deployment in the budget meets the limits at the rate; ``closest`` is the
    deployment that came nearest (most requests within the limits)."""

    def __init__(self, message: str, *, closest: RateConfig | None, binding: str) -> None:
        super().__init__(message, binding=binding)
        self.closest = closest


@dataclass(frozen=True, eq=False)
class RatePlan(PlanRows):
    """What :func:`plan_at_rate` found: ``best`` (meeting the limits, smallest first, the
    top of each mode), ``candidates`` (every deployment simulated), the traffic and the
    assumptions."""

    model: str
    family: str
    gpus: int
    auto: bool
    traffic: Traffic
    max_ttft_ms: float | None
    max_tpot_ms: float | None
    scheduler: Scheduler
    best: tuple[RateConfig, ...]
    candidates: tuple[RateConfig, ...]
    n_layouts: int
    elapsed_s: float
    dtype: str = ""
    notes: tuple[str, ...] = ()
    #: the serving stack (``plan_at_rate(runtime=)``; ``""``: simcore's default)
    runtime: str = ""
    #: the busiest EP rank's routed tokens over the mean (``plan_at_rate(moe_imbalance=)``)
    moe_imbalance: float = 1.0
    #: the model's routed experts (1: dense), for the header's MoE routing part
    n_experts: int = 1


def plan_at_rate(
    model: Model | str,
    *,
    family: str | HardwareFamily | None = None,
    gpus: int | str = "auto",
    rate_rps: float | None = None,
    trace: str | None = None,
    traffic: Traffic | None = None,
    duration_s: float = DEFAULT_DURATION_S,
    isl: int = 4000,
    osl: int = 1000,
    max_ttft_ms: float | None = None,
    max_tpot_ms: float | None = None,
    hardware: Hardware | Mapping[str, Any] | None = None,
    efficiency: Efficiency | None = None,
    dtype: str | None = None,
    scheduler: Scheduler | None = None,
    modes: Sequence[str] = ("agg", "disagg"),
    exact_gpus: bool = False,
    top: int = 5,
    seed: int = 0,
    speculative: Speculative | None = None,
    runtime: str | None = None,
    moe_imbalance: float | str = 1.0,
) -> RatePlan:
    """The smallest deployments of ``model`` that serve the traffic within p99 limits.

    Parameters
    ----------
    model : Model or str
    family : str or HardwareFamily, optional
    gpus : int or "auto"
        Device budget; ``"auto"``: up to :data:`AUTO_MAX_GPUS` or the family's system.
    rate_rps : float, optional
        Requests per second: Poisson arrivals (``isl`` / ``osl`` tokens each, over
        ``duration_s``), or a ``trace``'s arrivals rescaled to it.
    trace : str, optional
        A CSV / JSON-lines file of ``arrival_s, isl, osl`` rows (:func:`~.traffic.read_trace`).
    traffic : Traffic, optional
        Requests built by the caller (then ``rate_rps``, ``trace`` and ``duration_s`` are
        not used).
    max_ttft_ms, max_tpot_ms : float, optional
        Limits on the p99 TTFT and the p99 TPOT (at least one); goodput counts the
        requests within both.
    scheduler : Scheduler, optional
        Token budget, max sequences, KV block size, usable HBM fraction, KV overlap.
    modes : sequence of {"agg", "disagg"}
    exact_gpus : bool
        Deployments of exactly ``gpus`` devices (not with ``"auto"``).
    top : int
        Rows kept per mode.
    seed : int
        Seed of the Poisson arrivals.
    speculative : Speculative, optional
        Speculative decoding (draft length, acceptance rate, proposer); replaces the
        scheduler's ``speculative``.
    runtime : str, optional
        The serving stack (:data:`simcore.model.runtime.RUNTIMES`), as
        :func:`~.search.plan`'s ``runtime``.
    moe_imbalance : float or str
        A mixture-of-experts model's routing skew, as :func:`~.search.plan`'s: it moves
        the expert-parallel layouts (:func:`~.simulate.price_instances` prices them next
        to those without EP); a note says so when it is not 1 and no expert-parallel
        layout fits the budget.

    Raises
    ------
    ServingError
        Bad input, before any work.
    RateInfeasibleError
        Nothing in the budget meets the limits (``closest`` says what came nearest).

    Examples
    --------
    >>> p = plan_at_rate("Llama 3.1 8B", family="H100-SXM", gpus=2, rate_rps=2,
    ...                  duration_s=30, isl=512, osl=64, max_ttft_ms=1000, modes=("agg",))
    >>> p.best[0].n_devices, p.best[0].ttft_p99_ms <= 1000
    (1, True)
    """
    t0 = time.perf_counter()
    req = _rate_request(model, family=family, gpus=gpus, rate_rps=rate_rps, trace=trace,
                        traffic=traffic, duration_s=duration_s, isl=isl, osl=osl,
                        max_ttft_ms=max_ttft_ms, max_tpot_ms=max_tpot_ms, hardware=hardware,
                        efficiency=efficiency, dtype=dtype, scheduler=scheduler, modes=modes,
                        exact_gpus=exact_gpus, top=top, seed=seed, speculative=speculative,
                        runtime=runtime, moe_imbalance=moe_imbalance)
    insts = _instances(req)
    notes = req.notes + _skew_notes(req, insts)
    short = _shortlist(req, insts)
    cands: list[RateConfig] = []
    bound = _Bound(req.gpus)
    if "agg" in req.modes:
        cands += _agg_search(req, short["agg"], bound)
    if "disagg" in req.modes:
        cands += _disagg_search(req, short["prefill"], short["decode"], bound)
    best = _choose_at_rate(req, cands)
    return RatePlan(model=req.model.name, family=req.family.name, gpus=req.gpus, auto=req.auto,
                    traffic=req.traffic, max_ttft_ms=req.max_ttft_ms,
                    max_tpot_ms=req.max_tpot_ms, scheduler=req.sched, best=tuple(best),
                    candidates=tuple(_order(cands)), n_layouts=len(insts),
                    elapsed_s=time.perf_counter() - t0, dtype=req.dtype, notes=notes,
                    runtime=req.runtime, moe_imbalance=req.moe_imbalance,
                    n_experts=int(req.model.n_experts))


# --- step 1: the request --------------------------------------------------------------------

@dataclass(frozen=True, eq=False)
class _RateRequest:
    model: Model
    family: HardwareFamily
    hardware: Hardware
    efficiency: Efficiency | None
    gpus: int
    auto: bool
    exact_gpus: bool
    traffic: Traffic
    max_ttft_ms: float | None
    max_tpot_ms: float | None
    sched: Scheduler
    modes: tuple[str, ...]
    top: int
    dtype: str
    notes: tuple[str, ...]
    runtime: str = ""
    moe_imbalance: float = 1.0

    @property
    def rate(self) -> float:
        return self.traffic.rate_rps

    @property
    def mean_isl(self) -> float:
        return float(self.traffic.isl.mean())

    @property
    def mean_osl(self) -> float:
        return float(self.traffic.osl.mean())

    @property
    def longest(self) -> int:
        """The most KV tokens one request holds (``isl + osl - 1``)."""
        return int((self.traffic.isl + self.traffic.osl - 1).max())

    def where(self) -> str:
        up = "up to " if not self.exact_gpus else ""
        return f"{up}{self.gpus} {self.family.name} GPU{'s' if self.gpus > 1 else ''}"


def _budget(gpus: Any, fam: HardwareFamily) -> tuple[int, bool]:
    most = fam.topology.n_devices
    if isinstance(gpus, str) and gpus.strip().lower() == "auto":
        return min(AUTO_MAX_GPUS, most), True
    n = _positive_int("gpus", gpus, "the device budget, or 'auto'")
    if n > most:
        raise ServingError(f"gpus {n} (--gpus): one {fam.name} system holds at most {most} "
                           f"devices; pass gpus <= {most} or --gpus auto")
    return n, False


def _rate_request(model: Model | str, *, family: Any, gpus: Any, rate_rps: Any, trace: Any,
                  traffic: Traffic | None, duration_s: Any, isl: Any, osl: Any,
                  max_ttft_ms: Any, max_tpot_ms: Any, hardware: Any, efficiency: Any,
                  dtype: Any, scheduler: Scheduler | None, modes: Sequence[str],
                  exact_gpus: bool, top: Any, seed: Any,
                  speculative: Speculative | None = None,
                  runtime: str | None = None, moe_imbalance: Any = 1.0) -> _RateRequest:
    """Step 1: every argument checked (cheap ones first), the model, family and traffic
    loaded; nothing simulated."""
    ttft_lim = _limit("max_ttft_ms", max_ttft_ms)
    tpot_lim = _limit("max_tpot_ms", max_tpot_ms)
    if ttft_lim is None and tpot_lim is None:
        raise ServingError("a request rate needs a limit to meet: pass --max-ttft-ms and/or "
                           "--max-tpot-ms (p99 limits; goodput counts the requests within them)")
    top = _positive_int("top", top, "rows per mode")
    if isinstance(seed, bool) or not isinstance(seed, int | np.integer) or seed < 0:
        raise ServingError(f"seed (--seed) must be an integer >= 0, got {seed!r}")
    sched = scheduler if scheduler is not None else Scheduler()
    if speculative is not None:
        sched = replace(sched, speculative=speculative)
    modes = tuple(modes)
    if not modes or set(modes) - {"agg", "disagg"}:
        raise ServingError(f"modes must be some of ('agg', 'disagg'), got {modes!r}")
    try:
        mdl = load_model(model)
        fam = get_family(family)
    except (ValueError, FileNotFoundError) as exc:
        raise ServingError(str(exc)) from None
    budget, auto = _budget(gpus, fam)
    if auto and exact_gpus:
        raise ServingError("--exact-gpus needs a number of GPUs, not --gpus auto")
    hw = _one_hardware(hardware, fam)
    prec = _dtype(dtype, fam)
    stack = _runtime(runtime, prec)
    lam = _moe_imbalance(moe_imbalance, mdl)
    if traffic is None:
        if trace is not None:
            traffic = read_trace(trace, rate_rps=rate_rps, seed=int(seed))
        elif rate_rps is None:
            raise TrafficError("pass a request rate (--rate R) or a trace (--trace FILE)")
        else:
            traffic = poisson(rate_rps, duration_s=duration_s, isl=isl, osl=osl, seed=int(seed))
    notes: list[str] = []
    if bool((traffic.osl <= 1).all()):
        if tpot_lim is not None:
            raise ServingError("every request has osl 1: no decode step and so no TPOT to "
                               "limit; drop --max-tpot-ms")
        if modes == ("disagg",):
            raise ServingError("every request has osl 1: disaggregated decode workers have "
                               "nothing to do; pass --mode agg")
        if "disagg" in modes:
            notes.append("every request has osl 1: disaggregated serving not searched")
        modes = tuple(m for m in modes if m != "disagg")
    return _RateRequest(model=mdl, family=fam, hardware=hw, efficiency=efficiency, gpus=budget,
                        auto=auto, exact_gpus=bool(exact_gpus), traffic=traffic,
                        max_ttft_ms=ttft_lim, max_tpot_ms=tpot_lim, sched=sched, modes=modes,
                        top=top, dtype=prec, notes=tuple(notes), runtime=stack,
                        moe_imbalance=lam)


# --- step 2: layouts as instances, a shortlist ---------------------------------------------

def _instances(req: _RateRequest) -> list[Instance]:
    """Step 2: every layout up to one node / NVL domain (more only if no smaller layout
    holds the longest request), priced as a serving instance (a mixture-of-experts model's
    expert-parallel and attention-DP layouts too)."""
    size = min(req.gpus, req.family.topology.pes_per_cube)
    isl_m, osl_m = round(req.mean_isl), round(req.mean_osl)
    while True:
        try:
            insts = price_instances(
                req.model, family=req.family, hardware=req.hardware, efficiency=req.efficiency,
                dtype=req.dtype, max_devices=size, max_tokens=req.longest + 1,
                scheduler=req.sched, tokens=[isl_m], contexts=[isl_m + osl_m // 2],
                runtime=req.runtime, moe_imbalance=req.moe_imbalance)
        except DeviceBudgetError:  # the weights fit no layout this size: a larger one
            if size >= req.gpus:
                raise
            insts = []
        fitting = [i for i in insts if i.holds(req.longest)]
        if fitting or size >= req.gpus:
            break
        size = min(req.gpus, size * 2)
    if not fitting:
        biggest = max((i.replica_blocks * i.block_size for i in insts), default=0)
        raise RateInfeasibleError(
            f"{req.model.name} fits no layout of {req.where()} with room for the longest "
            f"request ({req.longest} KV tokens; the roomiest KV cache holds {biggest}); "
            "add GPUs, raise --kv-usable-fraction or shorten the requests",
            closest=None, binding="gpus")
    return fitting


def _skew_notes(req: _RateRequest, insts: Sequence[Instance]) -> tuple[str, ...]:
    """A note when ``moe_imbalance`` is not 1 but no expert-parallel layout was priced
    (none fits the budget), so the skew moves nothing."""
    if req.moe_imbalance == 1.0 or any(int(i.layout.get("ep", 1)) > 1 for i in insts):
        return ()
    return (f"moe_imbalance {req.moe_imbalance:g} (--moe-imbalance) moves nothing here: no "
            f"expert-parallel layout of {req.model.name} fits {req.where()} with room for the "
            "longest request, and routing skew costs nothing without expert parallelism",)


def _batches(cap: int) -> list[int]:
    out, b = [], 1
    while b < cap:
        out += [b, b + b // 2] if b > 1 else [1]
        b *= 2
    return sorted({x for x in out if x < cap} | {cap})


def _steady(req: _RateRequest, inst: Instance, *, agg: bool) -> float:
    """Steady-state requests/s of one instance (aggregated, or a decode worker): at the
    largest batch its KV cache and ``max_seqs`` allow whose TPOT (the step, plus the
    interleaved prefills when aggregated) stays within the TPOT limit; every prompt
    prefilled alone, decode at the mean context."""
    cap = max(1, min(req.sched.max_seqs, inst.concurrency(round(req.mean_isl + req.mean_osl))))
    tokens = max(req.mean_osl - 1, 1.0)
    steps = tokens / req.sched.spec_args[1]  # a speculative step emits the expected tokens
    pre = inst.prefill_ns(req.mean_isl) if agg else 0.0
    best = 0.0
    for b in _batches(cap):
        step = inst.decode_ns(b, req.mean_isl + req.mean_osl / 2)
        tpot = (steps * step + b * pre) / tokens
        if best and req.max_tpot_ms is not None and tpot / 1e6 > req.max_tpot_ms:
            break
        best = max(best, b / (steps * step + b * pre) * 1e9)
    return best


def _agg_rps(req: _RateRequest, inst: Instance) -> float:
    return _steady(req, inst, agg=True)


def _decode_rps(req: _RateRequest, inst: Instance) -> float:
    return _steady(req, inst, agg=False)


def _prefill_rps(req: _RateRequest, inst: Instance) -> float:
    """Steady-state requests/s of one prefill worker filling its token budget."""
    k = max(1.0, req.sched.token_budget // max(req.mean_isl, 1.0))
    return k / inst.prefill_ns(req.mean_isl, k) * 1e9


def _distinct(insts: Sequence[Instance]) -> list[Instance]:
    """One of each set of layouts that price alike (same size, tables and KV cache: e.g.
    placements that cannot matter in one node), the shortest label kept."""
    seen: dict[Any, Instance] = {}
    for i in sorted(insts, key=lambda i: (len(i.label), i.label)):
        t = i.tables
        key = (i.n_devices, i.kv_blocks, t.pre_ns.tobytes(), t.dec_ns.tobytes())
        seen.setdefault(key, i)
    return list(seen.values())


def _shortlist(req: _RateRequest, insts: Sequence[Instance]) -> dict[str, list[Instance]]:
    """Step 3: the layouts worth simulating. Aggregated: per layout size the two needing
    the fewest GPUs at the rate by the steady-state estimate, and the one with the lowest
    unloaded TTFT, dropping those estimated at more than :data:`_SPREAD` times the fewest
    GPUs (the fastest-TTFT layout overall is always kept). Prefill workers: per size the
    most requests/s per GPU, and the lowest unloaded TTFT overall; decode workers: per
    size the most requests/s per GPU, and the fastest step overall."""
    insts = _distinct(insts)
    ttft = {id(i): i.prefill_ns(req.mean_isl) for i in insts}
    if req.max_ttft_ms is not None:  # an unloaded prefill over the limit never meets it
        fast_enough = [i for i in insts if ttft[id(i)] / 1e6 <= req.max_ttft_ms]
        insts = fast_enough or insts
    sizes = sorted({i.n_devices for i in insts})

    def agg_gpus(i: Instance) -> int:
        return math.ceil(req.rate / _agg_rps(req, i)) * i.n_devices

    agg: list[Instance] = []
    for s in sizes:
        group = [i for i in insts if i.n_devices == s]
        agg += sorted(group, key=lambda i: (agg_gpus(i), ttft[id(i)], i.label))[:_KEEP_AGG - 1]
        quick = min(group, key=lambda i: (ttft[id(i)], agg_gpus(i), i.label))
        if quick not in agg:
            agg.append(quick)
    fastest = min(insts, key=lambda i: (ttft[id(i)], i.n_devices, i.label))
    floor = min(agg_gpus(i) for i in agg)
    agg = [i for i in agg if agg_gpus(i) <= _SPREAD * floor or i is fastest]

    def step(i: Instance) -> float:
        return i.decode_ns(8, req.mean_isl + req.mean_osl / 2)

    longest_prompt = int(req.traffic.isl.max())
    pre_ok = [i for i in insts if i.holds(longest_prompt)]
    pre = [max((i for i in pre_ok if i.n_devices == s),
               key=lambda i: (_prefill_rps(req, i) / i.n_devices, -ttft[id(i)]))
           for s in sizes if any(i.n_devices == s for i in pre_ok)]
    quick_pre = min(pre_ok, key=lambda i: (ttft[id(i)], i.n_devices, i.label))
    if quick_pre not in pre:
        pre.append(quick_pre)
    dec = [max((i for i in insts if i.n_devices == s),
               key=lambda i: (_decode_rps(req, i) / i.n_devices, -step(i))) for s in sizes]
    quick_dec = min(insts, key=lambda i: (step(i), i.n_devices, i.label))
    if quick_dec not in dec:
        dec.append(quick_dec)
    return {"agg": agg, "prefill": pre, "decode": dec}


def _pairs(req: _RateRequest, pres: Sequence[Instance],
           decs: Sequence[Instance]) -> list[tuple[Instance, Instance, int, int]]:
    """(prefill, decode, x0, y0) worth simulating: workers sized by the steady-state
    rates, the :data:`_KEEP_PAIRS` needing the fewest GPUs within :data:`_SPREAD` times
    the fewest."""
    out = []
    for p in pres:
        x0 = max(1, math.ceil(req.rate / _prefill_rps(req, p)))
        for d in decs:
            if p.n_devices + d.n_devices > req.gpus:
                continue
            y0 = max(1, math.ceil(req.rate / _decode_rps(req, d)))
            out.append((x0 * p.n_devices + y0 * d.n_devices, p, d, x0, y0))
    if not out:
        return []
    floor = min(o[0] for o in out)
    out.sort(key=lambda o: (o[0], o[1].label, o[2].label))
    return [(p, d, x0, y0) for est, p, d, x0, y0 in out if est <= _SPREAD * floor][:_KEEP_PAIRS]


@dataclass
class _Bound:
    """The most GPUs still worth searching: the budget, or :data:`_SPREAD` times the
    smallest deployment found meeting the limits (the search wants the smallest)."""

    gpus: int
    found: int | None = None

    @property
    def most(self) -> int:
        if self.found is None:
            return self.gpus
        return min(self.gpus, int(_SPREAD * self.found))

    def met(self, n_devices: int) -> None:
        self.found = n_devices if self.found is None else min(self.found, n_devices)


# --- step 4: aggregated -----------------------------------------------------------------------

def _smallest(start: int, most: int, ok: Callable[[int], bool]) -> int | None:
    """The smallest ``n`` in [1, most] with ``ok(n)``, assuming ``ok`` never turns False as
    ``n`` grows: try ``start``, step up by half or step down by one, then bisect."""
    if most < 1:
        return None
    start = min(max(start, 1), most)
    if ok(start):
        if start == 1 or not ok(start - 1):
            return start
        lo, hi = 0, start - 1
    else:
        lo, r = start, start
        while True:
            if r >= most:
                return None
            r = min(most, max(r + 1, math.ceil(r * 1.5)))
            if ok(r):
                hi = r
                break
            lo = r
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if ok(mid):
            hi = mid
        else:
            lo = mid
    return hi


def _agg_row(req: _RateRequest, inst: Instance, r: int, res: dict[str, Any]) -> RateConfig:
    return RateConfig(
        mode="agg", layout=f"{r}×{inst.label}", prefill_layout=inst.label,
        decode_layout=inst.label, replicas=r, prefill_workers=None, decode_workers=None,
        prefill_chunk_tokens=req.sched.chunk_tokens, ttft_p50_ms=res["ttft_p50_ms"],
        ttft_p99_ms=res["ttft_p99_ms"], tpot_p50_ms=res["tpot_p50_ms"],
        tpot_p99_ms=res["tpot_p99_ms"], rate_rps=res["rate_rps"],
        goodput_rps=res["goodput_rps"], kv_transfer_ms=0.0, kv_link="",
        n_devices=r * inst.n_devices, kv_blocks=inst.kv_blocks,
        max_concurrency=inst.concurrency(round(req.mean_isl + req.mean_osl)),
        preemptions=res["preemptions"], meets_limits=res["meets_limits"],
        dtype=req.dtype or "default")


def _agg_search(req: _RateRequest, insts: Sequence[Instance], bound: _Bound) -> list[RateConfig]:
    """Step 4: per layout (fewest GPUs estimated first), the fewest replicas meeting both
    p99 limits (exactly ``gpus // size`` with ``exact_gpus``), searched up to
    ``bound.most`` GPUs; the largest tried when none does."""
    out = []
    for inst in sorted(insts, key=lambda i: math.ceil(req.rate / _agg_rps(req, i)) * i.n_devices):
        most = (req.gpus if req.exact_gpus else bound.most) // inst.n_devices
        tried: dict[int, dict[str, Any]] = {}

        def ok(r: int, inst: Instance = inst, tried: dict[int, dict[str, Any]] = tried) -> bool:
            if r not in tried:
                served = serve_agg(req.traffic, inst, r, req.sched)
                tried[r] = outcome(served, req.traffic, max_ttft_ms=req.max_ttft_ms,
                                   max_tpot_ms=req.max_tpot_ms)
            return bool(tried[r]["meets_limits"])

        if req.exact_gpus:
            if most < 1 or req.gpus % inst.n_devices:
                continue
            ok(most)
            r: int | None = most
        else:
            r = _smallest(math.ceil(req.rate / _agg_rps(req, inst)), most, ok)
        if r is None and tried:
            r = max(tried)
        if r is not None:
            out.append(_agg_row(req, inst, r, tried[r]))
            if tried[r]["meets_limits"]:
                bound.met(r * inst.n_devices)
    return out


# --- step 5: disaggregated ----------------------------------------------------------------------

def _disagg_search(req: _RateRequest, pres: Sequence[Instance], decs: Sequence[Instance],
                   bound: _Bound) -> list[RateConfig]:
    """Step 5: per (prefill, decode) layout pair, the fewest prefill workers ``x`` whose p99
    TTFT (prefill and the KV transfer) meets the limit, then the fewest decode workers
    ``y`` whose p99 TPOT does, within ``x · size_p + y · size_d <= gpus``."""
    stages: dict[tuple[int, int], PrefillStage] = {}
    n_layers = req.model.n_layers
    out = []

    def stage(pre: Instance, x: int) -> PrefillStage:
        key = (id(pre), x)
        if key not in stages:
            stages[key] = prefill_stage(req.traffic, pre, x, req.sched)
        return stages[key]

    arrival_ns = req.traffic.arrival_s * 1e9
    for pre, dec, x0, y0 in _pairs(req, pres, decs):
        sp, sd = pre.n_devices, dec.n_devices

        def ttft_ok(x: int, pre: Instance = pre, dec: Instance = dec, y0: int = y0) -> bool:
            if req.max_ttft_ms is None:
                return True
            st = stage(pre, x)
            link = kv_link(req.family, req.hardware, x * pre.n_devices + y0 * dec.n_devices)
            kv = kv_arrivals(req.traffic, st, pre, dec.n_devices, link, n_layers, req.sched)
            if (kv < 0).any():
                return False
            return float(np.percentile((kv - arrival_ns) / 1e6, 99)) <= req.max_ttft_ms

        most = req.gpus if req.exact_gpus else bound.most
        x_most = (most - sd) // sp
        if x_most < 1:
            continue
        x = _smallest(x0, x_most, ttft_ok)
        if x is None:
            x = x_most
        y_most = (most - x * sp) // sd
        if y_most < 1 and not req.exact_gpus:
            continue
        tried: dict[int, dict[str, Any]] = {}

        def run(y: int, pre: Instance = pre, dec: Instance = dec, x: int = x,
                tried: dict[int, dict[str, Any]] = tried) -> bool:
            if y not in tried:
                link = kv_link(req.family, req.hardware, x * pre.n_devices + y * dec.n_devices)
                served = serve_disagg(req.traffic, pre, x, dec, y, req.sched, link, n_layers,
                                      stage=stage(pre, x))
                res = outcome(served, req.traffic, max_ttft_ms=req.max_ttft_ms,
                              max_tpot_ms=req.max_tpot_ms)
                res["kv_link"] = link.tier
                tried[y] = res
            return bool(tried[y]["tpot_ok"])

        if req.exact_gpus:
            rest = req.gpus - x * sp
            if rest < sd or rest % sd:
                continue
            y: int | None = rest // sd
            run(rest // sd)
        else:
            y = _smallest(y0, y_most, run)
        if y is None:
            y = max(tried) if tried else None
        if y is None:
            continue
        res = tried[y]
        if res["meets_limits"]:
            bound.met(x * sp + y * sd)
        out.append(RateConfig(
            mode="disagg", layout=f"{x}×{pre.label} prefill + {y}×{dec.label} decode",
            prefill_layout=pre.label, decode_layout=dec.label, replicas=None,
            prefill_workers=x, decode_workers=y,
            prefill_chunk_tokens=req.sched.chunk_tokens, ttft_p50_ms=res["ttft_p50_ms"],
            ttft_p99_ms=res["ttft_p99_ms"], tpot_p50_ms=res["tpot_p50_ms"],
            tpot_p99_ms=res["tpot_p99_ms"], rate_rps=res["rate_rps"],
            goodput_rps=res["goodput_rps"], kv_transfer_ms=res["kv_transfer_ms"],
            kv_link=res["kv_link"], n_devices=x * sp + y * sd, kv_blocks=dec.kv_blocks,
            max_concurrency=dec.concurrency(round(req.mean_isl + req.mean_osl)),
            preemptions=res["preemptions"], meets_limits=res["meets_limits"],
            dtype=req.dtype or "default"))
    return out


# --- step 6: choosing -----------------------------------------------------------------------

def _order(cands: Sequence[RateConfig]) -> list[RateConfig]:
    """Meeting the limits first, then fewest GPUs, most goodput, lowest p99 TTFT / TPOT."""
    def tpot(c: RateConfig) -> float:
        return c.tpot_p99_ms if math.isfinite(c.tpot_p99_ms) else 0.0

    return sorted(cands, key=lambda c: (not c.meets_limits, c.n_devices, -c.goodput_rps,
                                        c.ttft_p99_ms, tpot(c), c.layout))


def _closeness(req: _RateRequest, c: RateConfig) -> tuple[float, ...]:
    over = [v / lim for v, lim in ((c.ttft_p99_ms, req.max_ttft_ms),
                                   (c.tpot_p99_ms, req.max_tpot_ms))
            if lim is not None and math.isfinite(v)]
    return (-c.goodput_rps, max(over, default=0.0), c.n_devices)


def _cap_hint(req: _RateRequest) -> str:
    """With a long-prefill threshold below the budget, what it costs a prompt (it sets a
    TTFT floor more GPUs cannot lower)."""
    cap = req.sched.chunk_tokens
    if cap >= req.sched.token_budget:
        return ""
    longest = int(req.traffic.isl.max())
    return (f" (or raise --long-prefill-token-threshold {cap}: it prefills a "
            f"{longest}-token prompt in at least {math.ceil(longest / cap)} steps, whatever "
            "the GPU count)")


def _gpus(n: int) -> str:
    return f"{n} GPU{'s' if n != 1 else ''}"


def _choose_at_rate(req: _RateRequest, cands: Sequence[RateConfig]) -> list[RateConfig]:
    """Step 6: the ``top`` smallest deployments of each mode meeting the limits, or the
    RateInfeasibleError naming the closest."""
    best: list[RateConfig] = []
    for mode in req.modes:
        best += [c for c in _order(cands) if c.mode == mode and c.meets_limits][:req.top]
    if best:
        return _order(best)
    lim = ", ".join(f"p99 {n} <= {v:g} ms" for n, v in (("TTFT", req.max_ttft_ms),
                                                         ("TPOT", req.max_tpot_ms))
                    if v is not None)
    if not cands:
        raise RateInfeasibleError(
            f"no {'/'.join(req.modes)} deployment of {req.model.name} fits {req.where()}; "
            "add GPUs", closest=None, binding="gpus")
    c = min(cands, key=lambda c: _closeness(req, c))
    tpot = f", p99 TPOT {c.tpot_p99_ms:.1f} ms" if math.isfinite(c.tpot_p99_ms) else ""
    binding = "max_ttft_ms" if req.max_ttft_ms is not None and not (
        c.ttft_p99_ms <= req.max_ttft_ms) else "max_tpot_ms"
    raise RateInfeasibleError(
        f"no deployment on {req.where()} meets {lim} at {req.rate:.4g} req/s; closest: "
        f"{c.layout} ({_gpus(c.n_devices)}): p99 TTFT {c.ttft_p99_ms:.0f} ms{tpot}, goodput "
        f"{c.goodput_rps:.3g} req/s; add GPUs, lower the rate or raise the limits"
        + _cap_hint(req), closest=c, binding=binding)
