"""Plain-Python twin of :mod:`simcore.kernels.requests`: the same scheduler written as a
discrete-event loop over lists and a deque, the same pieces under the same names.

Tests compare the two on hypothesis-drawn traces (the same per-request times, exactly);
the arithmetic is written in the kernel's order so floats agree bit for bit.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Sequence
from typing import Any


def segment(xs: Sequence[float], x: float) -> tuple[int, float]:
    i = 0
    while i < len(xs) - 2 and x > xs[i + 1]:
        i += 1
    return i, (x - xs[i]) / (xs[i + 1] - xs[i])


def table_ns(xs: Sequence[float], ys: Sequence[float], z: Any, x: float, y: float) -> float:
    i, wx = segment(xs, x)
    j, wy = segment(ys, y)
    if wy < 0.0 and j == 0:
        wy = 0.0
    lo = float(z[i][j]) * (1.0 - wx) + float(z[i + 1][j]) * wx
    hi = float(z[i][j + 1]) * (1.0 - wx) + float(z[i + 1][j + 1]) * wx
    return max(lo * (1.0 - wy) + hi * wy, float(z[0][0]))


def decode_part_ns(tables: Any, n_dec: int, ctx_sum: float) -> float:
    return table_ns(list(tables.dec_batch), list(tables.dec_ctx), tables.dec_ns, float(n_dec),
                    ctx_sum / n_dec)


def prefill_part_ns(tables: Any, tokens: int, pairs: float) -> float:
    s = 2.0 * pairs / tokens - 1.0
    return table_ns(list(tables.pre_batch), list(tables.pre_tokens), tables.pre_ns,
                    tokens / s, s)


def step_ns(tables: Any, n_dec: int, ctx_sum: float, tokens: int, pairs: float) -> float:
    if tokens == 0:
        return decode_part_ns(tables, n_dec, ctx_sum)
    pre = prefill_part_ns(tables, tokens, pairs)
    if n_dec == 0:
        return pre
    base = float(getattr(tables, "mix_base_ns", math.nan))
    if math.isnan(base):
        base = table_ns(list(tables.dec_batch), list(tables.dec_ctx), tables.dec_ns, 1.0,
                        float(tables.dec_ctx[0]))
    return pre + max(decode_part_ns(tables, n_dec, ctx_sum) - base, 0.0)


def blocks_for(tokens: int, block_size: int) -> int:
    return -(-tokens // block_size)


def spec_emit(done_steps: int, gain: float, left: int) -> int:
    e = int(math.floor(gain * (done_steps + 1.0)) - math.floor(gain * done_steps))
    return min(max(e, 1), left)


class _Request:
    __slots__ = ("arrival", "computed", "first", "held", "index", "last", "max_new",
                 "preemptions", "prompt", "sampled", "spec_steps", "start", "tokens")

    def __init__(self, index: int, arrival: float, prompt: int, cached: int, max_new: int):
        self.index, self.arrival, self.prompt, self.max_new = index, arrival, prompt, max_new
        self.computed, self.tokens, self.sampled, self.held = cached, prompt, 0, 0
        self.spec_steps = 0
        self.first = self.last = self.start = -1.0
        self.preemptions = 0


class _Step:
    """One instance's scheduling rules (the kernel's ``take``, ``schedule_running`` and
    ``schedule_waiting``) over its running list and waiting queue."""

    def __init__(self, running: list[_Request], waiting: deque[_Request], spec_k: int,
                 spec_gain: float, block_size: int, max_seqs: int, cap: int = 0) -> None:
        self.running, self.waiting = running, waiting
        self.spec_k, self.spec_gain = spec_k, spec_gain
        self.block_size, self.max_seqs, self.cap = block_size, max_seqs, cap

    def take(self, r: _Request, budget: int) -> tuple[int, int, bool]:
        left = r.tokens - r.computed
        k = self.spec_k
        if k > 0 and left == 1 and r.computed >= 1:  # a verify of k + 1 queries
            if budget < k + 1:
                return 0, 0, True
            return spec_emit(r.spec_steps, self.spec_gain, r.max_new - r.sampled), k + 1, True
        if 0 < self.cap < left:  # vLLM V1's long_prefill_token_threshold
            left = self.cap
        m = min(left, budget)
        return m, m, m == 1 and r.computed >= 1

    def cost_of(self, r: _Request, m: int, dec: bool, acc: list[Any]) -> None:
        if dec:
            acc[0] += 1
            acc[1] += r.computed + 1
            if self.spec_k > 0:
                r.spec_steps += 1
        else:
            acc[2] += m
            acc[3] += m * r.computed + m * (m + 1) / 2.0

    def run(self, budget: int, free: int, scheduled: dict[int, int],
            acc: list[Any]) -> tuple[int, int, bool]:
        preempted = False
        for r in list(self.running):
            if budget <= 0 or r not in self.running:
                break
            m, cost, dec = self.take(r, budget)
            if cost == 0:
                break
            need = blocks_for(r.computed + m, self.block_size) - r.held
            while need > free:
                v = self.running.pop()
                free += v.held
                v.held, v.computed = 0, 0
                v.preemptions += 1
                self.waiting.appendleft(v)
                preempted = True
                if v is r:
                    break
            if r not in self.running:
                break
            r.held += need
            free -= need
            scheduled[r.index] = m
            budget -= cost
            self.cost_of(r, m, dec, acc)
        return budget, free, preempted

    def admit(self, budget: int, free: int, scheduled: dict[int, int], acc: list[Any],
              t: float, whole: bool) -> tuple[int, int]:
        while self.waiting and budget > 0 and len(self.running) < self.max_seqs:
            r = self.waiting[0]
            m, cost, dec = self.take(r, budget)
            need = blocks_for(r.computed + m, self.block_size)
            if cost == 0 or need > free:
                break
            if whole and acc[2] > 0 and m < r.tokens - r.computed:
                break
            self.waiting.popleft()
            self.running.append(r)
            r.held = need
            free -= need
            scheduled[r.index] = m
            budget -= cost
            if r.start < 0.0:
                r.start = t
            self.cost_of(r, m, dec, acc)
        return budget, free


def _release(pend: list[tuple[_Request, bool]], rel: float) -> list[tuple[_Request, bool]]:
    """Asynchronous output processing: what the last step sampled (each request, and
    whether its first token) reaches the client at ``rel``; nothing pending after."""
    for r, first in pend:
        if first:
            r.first = rel
        r.last = rel
    return []


def simulate_instance(arrival_ns: Sequence[float], prompt: Sequence[int], cached: Sequence[int],
                      max_new: Sequence[int], tables: Any, token_budget: int, max_seqs: int,
                      n_blocks: int, block_size: int, spec_k: int = 0,
                      spec_gain: float = 1.0,
                      prefill_first: bool = False, multi_step: int = 1,
                      async_output: bool = False,
                      prefill_cap: int = 0) -> tuple[list[float], list[float],
                                                     list[float], list[int], int]:
    spec_k = min(spec_k, token_budget - 1)  # a verify never outgrows the step's budget
    spec_gain = min(spec_gain, spec_k + 1.0)
    if spec_k > 0 or multi_step < 1:  # no multi-step blocks with speculation
        multi_step = 1
    # sampled in the last single step, not yet seen (async_output), and whether first
    pend: list[tuple[_Request, bool]] = []
    reqs = [_Request(i, float(a), int(p), int(c), int(m))
            for i, (a, p, c, m) in enumerate(zip(arrival_ns, prompt, cached, max_new,
                                                  strict=True))]
    pending = deque(reqs)  # not arrived yet
    waiting: deque[_Request] = deque()
    running: list[_Request] = []
    free, t, steps, left = n_blocks, 0.0, 0, len(reqs)
    step = _Step(running, waiting, spec_k, spec_gain, block_size, max_seqs, prefill_cap)

    while left:
        if not running and not waiting:
            pend = []  # idle: the last step's output is processed at once
            if pending[0].arrival > t:
                t = pending[0].arrival  # idle: jump to the next arrival
        while pending and pending[0].arrival <= t:
            r = pending.popleft()
            if blocks_for(r.prompt + r.max_new - 1, block_size) > n_blocks:
                left -= 1  # dropped
            else:
                waiting.append(r)
        if not running and not waiting:
            continue
        acc: list[Any] = [0, 0.0, 0, 0.0]  # decodes, their contexts, prefill tokens, pairs
        scheduled: dict[int, int] = {}
        budget, free, preempted, before = token_budget, free, False, len(running)
        if prefill_first:  # waiting prompts first, alone in their step (vLLM V0)
            budget, free = step.admit(budget, free, scheduled, acc, t, whole=True)
        if len(running) == before:  # nothing admitted: the running requests' step
            budget, free, preempted = step.run(budget, free, scheduled, acc)
            if not preempted and not prefill_first:
                budget, free = step.admit(budget, free, scheduled, acc, t, whole=False)
        if not scheduled:
            continue
        block = multi_step > 1 and acc[2] == 0 and all(
            r.tokens - r.computed == 1 for r in running if r.index in scheduled)
        if block:
            # a block of multi_step decode steps of the same batch, seen at its end
            for r in running:
                if r.index not in scheduled:
                    continue
                m = min(multi_step, r.max_new - r.sampled)
                while m > 1 and blocks_for(r.computed + m, block_size) - r.held > free:
                    m -= 1
                need = blocks_for(r.computed + m, block_size) - r.held
                r.held += need
                free -= need
                scheduled[r.index] = m
            rel, ctx = t, acc[1]
            for j in range(multi_step):
                t += step_ns(tables, acc[0], ctx, 0, 0.0)
                ctx += acc[0]
                if j == 0:
                    rel = t
            steps += multi_step
        else:
            t += step_ns(tables, acc[0], acc[1], acc[2], acc[3])
            steps += 1
            rel = t
        pend = _release(pend, rel)
        still = []
        for r in running:
            m = scheduled.get(r.index, 0)
            if m:
                r.computed += m
                if r.computed >= r.tokens:
                    new = r.computed - r.tokens + 1
                    r.sampled += new
                    r.tokens += new
                    if async_output and not block:  # a block's tokens are seen at its end
                        pend.append((r, r.first < 0.0))
                    if r.first < 0.0:
                        r.first = t
                    r.last = t
            if m and r.sampled == r.max_new:
                free += r.held
                r.held = 0
                left -= 1
            else:
                still.append(r)
        running[:] = still
    return ([r.first for r in reqs], [r.last for r in reqs], [r.start for r in reqs],
            [r.preemptions for r in reqs], steps)


def simulate_round_robin(arrival_ns: Sequence[float], prompt: Sequence[int],
                         cached: Sequence[int], max_new: Sequence[int], tables: Any,
                         token_budget: int, max_seqs: int, n_blocks: int, block_size: int,
                         instances: int, spec_k: int = 0, spec_gain: float = 1.0,
                         prefill_first: bool = False, multi_step: int = 1,
                         async_output: bool = False,
                         prefill_cap: int = 0) -> tuple[list[float], list[float],
                                                        list[float], list[int], int]:
    n = len(arrival_ns)
    first, last, start, pre, steps = [-1.0] * n, [-1.0] * n, [-1.0] * n, [0] * n, 0
    for w in range(instances):
        idx = list(range(w, n, instances))
        if not idx:
            continue
        f, la, s0, p, st = simulate_instance([arrival_ns[i] for i in idx], [prompt[i] for i in idx],
                                             [cached[i] for i in idx], [max_new[i] for i in idx],
                                             tables, token_budget, max_seqs, n_blocks, block_size,
                                             spec_k, spec_gain, prefill_first, multi_step,
                                             async_output, prefill_cap)
        for k, i in enumerate(idx):
            first[i], last[i], start[i], pre[i] = f[k], la[k], s0[k], p[k]
        steps += st
    return first, last, start, pre, steps


def kv_transfer_done(ready_ns: Sequence[float], span_ns: Sequence[float],
                     transfer_ns: Sequence[float], n_layers: int, layerwise: bool) -> list[float]:
    out, link_free = [], -math.inf
    for ready, span, whole_ns in zip(ready_ns, span_ns, transfer_ns, strict=True):
        lead = span * (n_layers - 1) / n_layers if layerwise else 0.0
        done = max(ready + whole_ns / n_layers, ready - lead + whole_ns, link_free + whole_ns)
        out.append(done)
        link_free = done
    return out
