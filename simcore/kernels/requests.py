"""Request-level serving simulator (numba). Twin: ``requests_ref``.

One serving instance (an aggregated replica, a disaggregated prefill worker or a decode
worker) steps a scheduler shaped like vLLM V1's: every step it first schedules the running
requests in admission order (each gets ``min(tokens still to compute, budget left)``
tokens, so a long prompt is prefilled in chunks and a decode gets one token), then admits
waiting requests first-come first-served while the token budget, ``max_seqs`` and the
free KV-cache blocks allow (continuous batching, mixed prefill / decode batches). A
running request that needs a block when none is free preempts the newest running request
(recompute: its blocks are freed and it goes back to the front of the queue with nothing
computed); no request is admitted in a step that preempted. The step lasts
:func:`step_ns`, priced from the layout's cost tables (:class:`StepTables`); a request
whose computed tokens reach its known tokens samples its next token at the step's end.

Pieces, each with a twin of the same name in ``requests_ref``: :func:`segment`,
:func:`table_ns`, :func:`decode_part_ns`, :func:`prefill_part_ns`, :func:`step_ns`,
:func:`blocks_for`, :func:`spec_emit`; :func:`decode_stretch` and :func:`head_admissible` (which
it and the speculative stretches share), and the multi-step / async-output pieces
(:func:`block_ready`, :func:`block_kv`, :func:`release_pending`) are checked through the drivers:
:func:`simulate_instance`, :func:`simulate_round_robin`, :func:`kv_transfer_done`.
Times are float64 ns, token and block counts int64. Requests are given sorted by arrival.
"""

from __future__ import annotations

import math
from typing import NamedTuple

import numpy as np

from ._numba import jit

__all__ = ["StepTables", "blocks_for", "decode_part_ns", "kv_transfer_done", "prefill_part_ns",
           "segment", "simulate_instance", "simulate_round_robin", "spec_emit", "step_ns",
           "table_ns"]


class StepTables(NamedTuple):
    """Step costs of one layout, in ns, interpolated bilinearly (extrapolated linearly
    past the grid's ends).

    ``pre_ns[k, j]``: a prefill of ``pre_batch[k]`` sequences of ``pre_tokens[j]`` tokens
    each (launching every kernel). ``dec_ns[b, c]``: a decode step of ``dec_batch[b]``
    sequences at context ``dec_ctx[c]`` (replaying CUDA graphs). Every grid is increasing,
    float64, with at least two points. ``mix_base_ns``: what a mixed step saves of its
    decode part, the target's batch-1 decode at the shortest context (NaN: ``dec_ns[0, 0]``
    at batch 1; with speculative decoding ``dec_ns`` also holds the drafts, which a mixed
    step still runs, so the planner passes the verify alone).
    """

    pre_batch: np.ndarray
    pre_tokens: np.ndarray
    pre_ns: np.ndarray
    dec_batch: np.ndarray
    dec_ctx: np.ndarray
    dec_ns: np.ndarray
    mix_base_ns: float = math.nan


@jit()
def segment(xs, x):
    """(i, w): ``x`` lies at ``xs[i] + w · (xs[i+1] - xs[i])``; the first or last segment
    (``w`` < 0 or > 1) outside the grid."""
    n = xs.shape[0]
    i = 0
    while i < n - 2 and x > xs[i + 1]:
        i += 1
    return i, (x - xs[i]) / (xs[i + 1] - xs[i])


@jit()
def table_ns(xs, ys, z, x, y):
    """``z`` (over ``xs`` x ``ys``) at ``(x, y)``, bilinear; below ``ys[0]`` (fewer tokens
    or a shorter context than the grid's first) at ``ys[0]``, and never below ``z[0, 0]``
    (the cheapest step on the grid: a step costs at least its fixed overheads)."""
    i, wx = segment(xs, x)
    j, wy = segment(ys, y)
    if wy < 0.0 and j == 0:
        wy = 0.0
    lo = z[i, j] * (1.0 - wx) + z[i + 1, j] * wx
    hi = z[i, j + 1] * (1.0 - wx) + z[i + 1, j + 1] * wx
    v = lo * (1.0 - wy) + hi * wy
    if v < z[0, 0]:
        v = z[0, 0]
    return v


@jit()
def decode_part_ns(tables, n_dec, ctx_sum):
    """A decode step of ``n_dec`` sequences whose contexts sum to ``ctx_sum`` tokens,
    priced at their mean context."""
    return table_ns(tables.dec_batch, tables.dec_ctx, tables.dec_ns, float(n_dec),
                    ctx_sum / n_dec)


@jit()
def prefill_part_ns(tables, tokens, pairs):
    """Prefill chunks holding ``tokens`` tokens with ``pairs`` (query, key) attention pairs
    in all (a chunk of ``m`` tokens after ``p`` cached ones has ``m·p + m(m+1)/2``),
    priced as the ``k`` sequences of ``s`` tokens with the same tokens (``k·s``) and pairs
    (``k·s(s+1)/2``): ``s = 2·pairs/tokens - 1``, ``k = tokens / s``."""
    s = 2.0 * pairs / tokens - 1.0
    k = tokens / s
    return table_ns(tables.pre_batch, tables.pre_tokens, tables.pre_ns, k, s)


@jit()
def step_ns(tables, n_dec, ctx_sum, tokens, pairs):
    """One scheduler step: decode only, prefill only, or mixed. A mixed step is the
    prefill's cost plus the decode's above a batch-1 decode at the shortest context (the
    decode tokens ride in the prefill's forward: weights and step overheads once;
    ``tables.mix_base_ns`` when given)."""
    if tokens == 0:
        return decode_part_ns(tables, n_dec, ctx_sum)
    pre = prefill_part_ns(tables, tokens, pairs)
    if n_dec == 0:
        return pre
    base = tables.mix_base_ns
    if not base == base:  # NaN: the decode table's own batch-1 step
        base = table_ns(tables.dec_batch, tables.dec_ctx, tables.dec_ns, 1.0, tables.dec_ctx[0])
    extra = decode_part_ns(tables, n_dec, ctx_sum) - base
    if extra < 0.0:
        extra = 0.0
    return pre + extra


@jit()
def blocks_for(tokens, block_size):
    """KV-cache blocks holding ``tokens`` tokens."""
    return (tokens + block_size - 1) // block_size


@jit()
def head_admissible(queue, q_head, q_len, n_run, max_seqs, room, computed, tokens, free,
                    block_size, cap=0):
    """Whether the first waiting request could be admitted now: a sequence slot, ``room``
    tokens of the step's budget, and the free blocks for what it would compute (at most
    ``cap`` tokens where ``cap`` > 0, :func:`take`)."""
    if q_len == 0 or n_run >= max_seqs or room <= 0:
        return False
    head = queue[q_head]
    left = tokens[head] - computed[head]
    if 0 < cap < left:
        left = cap
    want = min(left, room)
    return blocks_for(computed[head] + want, block_size) <= free


@jit()
def spec_emit(done_steps, gain, left):
    """Tokens a speculative decode step emits for a sequence that has run ``done_steps``
    of them: ``floor(gain·(d+1)) - floor(gain·d)``, so that after ``d`` steps it has
    emitted ``floor(gain·d)`` (the expected ``gain`` per step, Leviathan et al. 2023
    eq. 1, spread deterministically), at most the ``left`` it still needs (>= 1)."""
    e = int(math.floor(gain * (done_steps + 1.0)) - math.floor(gain * done_steps))
    if e < 1:
        e = 1
    if e > left:
        e = left
    return e


@jit()
def take(r, budget, spec_k, spec_gain, tokens, computed, sampled, max_new, spec_steps, cap=0):
    """What request ``r`` gets this step: ``(m, cost, decode)``, ``m`` tokens whose KV the
    step computes, ``cost`` tokens of the budget, ``decode`` whether it is priced as a
    decode. Without speculation (``spec_k`` 0) ``m = cost = min(tokens left, budget)``, a
    decode when that is one token of a started sequence; ``cap`` > 0 (vLLM V1's
    ``long_prefill_token_threshold``): a request with more tokens left gets ``cap`` of
    them. With speculation a started sequence with one token left verifies ``spec_k + 1``
    queries (``cost``; 0 when the budget left is smaller: not scheduled) and keeps the KV
    of the tokens it emits (:func:`spec_emit`)."""
    left = tokens[r] - computed[r]
    if spec_k > 0 and left == 1 and computed[r] >= 1:
        if budget < spec_k + 1:
            return 0, 0, True
        return spec_emit(spec_steps[r], spec_gain, max_new[r] - sampled[r]), spec_k + 1, True
    if 0 < cap < left:
        left = cap
    m = min(left, budget)
    return m, m, m == 1 and computed[r] >= 1


@jit()
def decode_stretch(left, free, n_run, queue, q_head, q_len, computed, tokens, token_budget,
                   max_seqs, block_size, prefill_first=False, cap=0):
    """Steps from now in which, the running requests all decoding (each has sampled its
    first token), only time changes: none finishes (``left``: steps before the first
    does), no block runs out (``n_run · ceil(k / block_size) <= free`` new blocks at most:
    no preemption), and the first waiting request cannot be admitted (it does not fit, and
    the free blocks only shrink). An arrival ends the stretch early (the driver checks the
    time). Stepping such a stretch in one go gives the step-by-step times exactly.
    ``prefill_first``: a waiting prompt gets a step's whole budget (:func:`simulate_instance`)."""
    k = left
    by_blocks = block_size * (free // n_run)
    if by_blocks < k:
        k = by_blocks
    room = token_budget if prefill_first else token_budget - n_run
    if k > 0 and head_admissible(queue, q_head, q_len, n_run, max_seqs, room, computed, tokens,
                                 free, block_size, cap):
        return 0  # it could be admitted at the next step
    return k


@jit()
def enqueue_arrivals(arrival_ns, prompt, max_new, n_blocks, block_size, queue, q_head, q_len,
                     nxt, done, t):
    """Queue the requests that have arrived by ``t`` (a request whose final KV can never fit
    ``n_blocks`` is dropped: counted done). Returns ``(q_len, nxt, done)``."""
    n = arrival_ns.shape[0]
    while nxt < n and arrival_ns[nxt] <= t:
        if blocks_for(prompt[nxt] + max_new[nxt] - 1, block_size) > n_blocks:
            done += 1  # can never hold its KV: dropped
        else:
            queue[(q_head + q_len) % n] = nxt
            q_len += 1
        nxt += 1
    return q_len, nxt, done


@jit()
def book_tokens(r, m, t, computed, tokens, sampled, last_ns, held, block_size, free):
    """Book ``m`` decoded tokens of request ``r`` at the end of a stretch at ``t``: computed,
    known and sampled, and the KV blocks they take. Returns the free blocks left."""
    computed[r] += m
    tokens[r] += m
    sampled[r] += m
    last_ns[r] = t
    need = blocks_for(computed[r], block_size) - held[r]
    held[r] += need
    return free - need


@jit()
def step_stretch(k, tables, n_run, fast_ctx, running, computed, tokens, sampled, last_ns, held,
                 block_size, arrival_ns, nxt, q_len, t, free):
    """Run up to ``k`` decode-only steps of the ``n_run`` running requests in one go,
    stopping early at an arrival the next step may admit. Returns ``(t, steps, free)``."""
    n = arrival_ns.shape[0]
    ctx_sum = fast_ctx
    done_steps = 0
    while done_steps < k:
        t += step_ns(tables, n_run, ctx_sum, 0, 0.0)
        done_steps += 1
        ctx_sum += n_run
        if q_len == 0 and nxt < n and arrival_ns[nxt] <= t:
            break  # an arrival: the next step may admit it
    for j in range(n_run):
        free = book_tokens(running[j], done_steps, t, computed, tokens, sampled, last_ns, held,
                           block_size, free)
    return t, done_steps, free


@jit()
def spec_stretch(tables, n_run, fast_ctx, running, computed, tokens, sampled, max_new,
                 spec_steps, spec_gain, emitted, last_ns, held, block_size, arrival_ns, nxt,
                 q_len, t, free):
    """Speculative decode-only steps of the ``n_run`` running requests in one go, each
    step exactly as :func:`schedule_running` would run it: stops before a step in which a
    request would finish (it emits what it still needs) or the blocks its emitted tokens
    need would exceed ``free`` (a preemption), and after a step at whose end a request has
    arrived to an empty queue. ``emitted`` is scratch (zeros, left zeroed). The caller has
    checked that every running request decodes, that their verifies fit the budget and
    that the first waiting request cannot be admitted. Returns ``(t, steps, free)``."""
    n = arrival_ns.shape[0]
    ctx_sum = fast_ctx
    done_steps = 0
    while True:
        grown = 0
        new_blocks = 0
        stop = False
        for j in range(n_run):
            r = running[j]
            left = max_new[r] - sampled[r] - emitted[r]
            e = spec_emit(spec_steps[r] + done_steps, spec_gain, left)
            if e >= left:
                stop = True  # it finishes in this step: the step-by-step path books it
                break
            new_blocks += blocks_for(computed[r] + emitted[r] + e, block_size) - held[r]
            grown += e
        if stop or new_blocks > free:
            break
        t += step_ns(tables, n_run, ctx_sum, 0, 0.0)
        done_steps += 1
        ctx_sum += grown
        for j in range(n_run):
            r = running[j]
            emitted[r] += spec_emit(spec_steps[r] + done_steps - 1, spec_gain,
                                    max_new[r] - sampled[r] - emitted[r])
        if q_len == 0 and nxt < n and arrival_ns[nxt] <= t:
            break  # an arrival: the next step may admit it
    for j in range(n_run):
        r = running[j]
        m = emitted[r]
        emitted[r] = 0
        if done_steps == 0:
            continue
        spec_steps[r] += done_steps
        free = book_tokens(r, m, t, computed, tokens, sampled, last_ns, held, block_size, free)
    return t, done_steps, free


@jit()
def count_scheduled(r, m, dec, computed, spec_k, spec_steps, n_dec, ctx_sum, pre_tokens,
                    pairs):
    """Add request ``r``'s ``m`` scheduled tokens to the step's totals: a decode (its
    context; a speculative verify counted in ``spec_steps``) or ``m`` prompt tokens (their
    causal attention pairs). Returns ``(n_dec, ctx_sum, pre_tokens, pairs)``."""
    if dec:
        n_dec += 1
        ctx_sum += computed[r] + 1
        if spec_k > 0:
            spec_steps[r] += 1
    else:
        pre_tokens += m
        pairs += m * computed[r] + m * (m + 1) / 2.0
    return n_dec, ctx_sum, pre_tokens, pairs


@jit()
def schedule_running(running, n_run, tokens, computed, held, sched, preemptions, queue, q_head,
                     q_len, free, budget, block_size, spec_k, spec_gain, sampled, max_new,
                     spec_steps, cap=0):
    """The running requests' share of the step's token budget, in admission order; when
    the cache runs short the newest running request is preempted (recompute) back to the
    queue's head. Returns ``(n_run, q_head, q_len, free, budget, n_dec, ctx_sum,
    pre_tokens, pairs, preempted)``."""
    n = queue.shape[0]
    n_dec = 0
    ctx_sum = 0.0
    pre_tokens = 0
    pairs = 0.0
    preempted = False
    k = 0
    while k < n_run and budget > 0:  # running requests first, in admission order
        r = running[k]
        m, cost, dec = take(r, budget, spec_k, spec_gain, tokens, computed, sampled, max_new,
                            spec_steps, cap)
        if cost == 0:
            break  # a verify needs more of the budget than is left
        need = blocks_for(computed[r] + m, block_size) - held[r]
        lost = False
        while need > free:  # preempt the newest running request (recompute)
            v = running[n_run - 1]
            n_run -= 1
            free += held[v]
            held[v] = 0
            computed[v] = 0
            preemptions[v] += 1
            q_head = (q_head - 1) % n
            queue[q_head] = v
            q_len += 1
            preempted = True
            if v == r:
                lost = True
                break
        if lost:
            break
        held[r] += need
        free -= need
        sched[r] = m
        budget -= cost
        n_dec, ctx_sum, pre_tokens, pairs = count_scheduled(
            r, m, dec, computed, spec_k, spec_steps, n_dec, ctx_sum, pre_tokens, pairs)
        k += 1
    return n_run, q_head, q_len, free, budget, n_dec, ctx_sum, pre_tokens, pairs, preempted


@jit()
def schedule_waiting(queue, q_head, q_len, running, n_run, max_seqs, tokens, computed, held,
                     sched, start_ns, free, budget, block_size, t, n_dec, ctx_sum, pre_tokens,
                     pairs, spec_k, spec_gain, sampled, max_new, spec_steps, whole=False, cap=0):
    """Admit waiting requests, first come first served, while the budget, the sequence
    cap and free KV blocks allow (``whole``: a prompt only whole, unless it is the step's
    first and larger than the whole budget, then in chunks). Returns ``(q_head, q_len, n_run, free, budget, n_dec,
    ctx_sum, pre_tokens, pairs)``."""
    n = queue.shape[0]
    while q_len > 0 and budget > 0 and n_run < max_seqs:
        r = queue[q_head]  # waiting requests, first come first served
        m, cost, dec = take(r, budget, spec_k, spec_gain, tokens, computed, sampled, max_new,
                            spec_steps, cap)
        need = blocks_for(computed[r] + m, block_size)
        if cost == 0 or need > free:
            break
        if whole and pre_tokens > 0 and m < tokens[r] - computed[r]:
            break  # the rest of the budget cannot hold this prompt whole
        q_head = (q_head + 1) % n
        q_len -= 1
        running[n_run] = r
        n_run += 1
        held[r] = need
        free -= need
        sched[r] = m
        budget -= cost
        if start_ns[r] < 0.0:
            start_ns[r] = t
        n_dec, ctx_sum, pre_tokens, pairs = count_scheduled(
            r, m, dec, computed, spec_k, spec_steps, n_dec, ctx_sum, pre_tokens, pairs)
    return q_head, q_len, n_run, free, budget, n_dec, ctx_sum, pre_tokens, pairs


@jit()
def finish_step(running, n_run, sched, computed, tokens, sampled, max_new, first_ns, last_ns,
                held, free, done, t):
    """Book a step that ended at ``t``: tokens computed, tokens sampled, requests finished
    (their blocks freed), and what a decode stretch from the next step needs to know.
    Returns ``(n_run, free, done, fast_ok, fast_left, fast_ctx)``."""
    kept = 0
    fast_ok = True
    fast_left = 1 << 62
    fast_ctx = 0.0
    for k in range(n_run):
        r = running[k]
        m = sched[r]
        sched[r] = 0
        finished = False
        if m > 0:
            computed[r] += m
            if computed[r] >= tokens[r]:  # caught up: samples one token (a verify: m)
                new = computed[r] - tokens[r] + 1
                sampled[r] += new
                tokens[r] += new
                if first_ns[r] < 0.0:
                    first_ns[r] = t
                last_ns[r] = t
                if sampled[r] == max_new[r]:
                    finished = True
        if finished:
            free += held[r]
            held[r] = 0
            done += 1
        else:
            running[kept] = r
            kept += 1
            if tokens[r] - computed[r] != 1 or sampled[r] < 1:
                fast_ok = False
            else:
                left = max_new[r] - sampled[r] - 1
                if left < fast_left:
                    fast_left = left
                fast_ctx += computed[r] + 1
    return kept, free, done, fast_ok, fast_left, fast_ctx


@jit()
def block_ready(running, n_run, sched, tokens, computed):
    """Whether every request the step scheduled is a decode (one token left to compute):
    the step can run as a multi-step block."""
    for k in range(n_run):
        r = running[k]
        if sched[r] > 0 and tokens[r] - computed[r] != 1:
            return False
    return True


@jit()
def block_kv(multi_step, running, n_run, sched, computed, sampled, max_new, held, free,
             block_size):
    """The KV blocks of a multi-step block's later sub-steps, in admission order: each
    scheduled decode samples ``min(multi_step, tokens it still needs)`` tokens in the
    block (``sched`` becomes that), fewer when the free blocks cannot hold them (vLLM
    would preempt; not modelled). Returns the free blocks left."""
    for k in range(n_run):
        r = running[k]
        if sched[r] == 0:
            continue
        m = min(multi_step, max_new[r] - sampled[r])
        while m > 1 and blocks_for(computed[r] + m, block_size) - held[r] > free:
            m -= 1
        need = blocks_for(computed[r] + m, block_size) - held[r]
        held[r] += need
        free -= need
        sched[r] = m
    return free


@jit()
def release_pending(pend, pend_first, n_pend, rel, first_ns, last_ns):
    """Asynchronous output processing: the ``n_pend`` requests in ``pend`` that sampled in
    the last step (``pend_first``: their first token) see those tokens at ``rel`` (the next
    step's end). Returns 0 (none pending)."""
    for i in range(n_pend):
        r = pend[i]
        if pend_first[i]:
            first_ns[r] = rel
        last_ns[r] = rel
    return 0


@jit()
def stretch(tables, spec_k, spec_gain, token_budget, max_seqs, prefill_first, fast_left,
            fast_ctx, n_run, running, queue, q_head, q_len, computed, tokens, sampled, max_new,
            spec_steps, emitted, last_ns, held, block_size, arrival_ns, nxt, t, free, cap=0):
    """The decode-only stretch the state allows, stepped at once: speculative steps
    (:func:`spec_stretch`) while the head of the queue cannot be admitted, or ``k``
    plain decode steps (:func:`decode_stretch`, :func:`step_stretch`). Returns ``(t,
    steps, free, ran)``; ``ran``: the caller goes on to the next pass."""
    if spec_k > 0:
        if 0 < n_run and n_run * (spec_k + 1) <= token_budget:
            room = token_budget if prefill_first else token_budget - n_run * (spec_k + 1)
            if not head_admissible(queue, q_head, q_len, n_run, max_seqs, room, computed,
                                   tokens, free, block_size, cap):
                t, done_steps, free = spec_stretch(
                    tables, n_run, fast_ctx, running, computed, tokens, sampled, max_new,
                    spec_steps, spec_gain, emitted, last_ns, held, block_size, arrival_ns,
                    nxt, q_len, t, free)
                return t, done_steps, free, done_steps > 0
        return t, 0, free, False
    if 0 < n_run <= token_budget:
        k = decode_stretch(fast_left, free, n_run, queue, q_head, q_len, computed, tokens,
                           token_budget, max_seqs, block_size, prefill_first, cap)
        if k > 0:
            t, done_steps, free = step_stretch(k, tables, n_run, fast_ctx, running, computed,
                                               tokens, sampled, last_ns, held, block_size,
                                               arrival_ns, nxt, q_len, t, free)
            return t, done_steps, free, True
    return t, 0, free, False


@jit()
def run_step(tables, m, n_dec, ctx_sum, pre_tokens, pairs, collect, running, n_run, sched,
             computed, tokens, sampled, max_new, first_ns, last_ns, held, free, done, t, pend,
             pend_first, n_pend):
    """Run one scheduled step (``m`` = 1) or a multi-step block of ``m`` decode sub-steps of
    the same batch, contexts growing; release the pending (async) tokens at the end of the
    step or of the block's first sub-step; book the step (a block as one step of ``m``
    tokens each, every token it sampled seen at its end, :func:`finish_step`); with
    ``collect`` (async output, single steps) queue the requests that sampled, to be seen
    at the next step's end. Returns ``(t, n_pend, n_run, free, done, fast_ok, fast_left,
    fast_ctx)``."""
    rel = t
    for j in range(m):
        if m == 1:
            t += step_ns(tables, n_dec, ctx_sum, pre_tokens, pairs)
        else:
            t += step_ns(tables, n_dec, ctx_sum, 0, 0.0)
            ctx_sum += n_dec
        if j == 0:
            rel = t
    if n_pend > 0:
        n_pend = release_pending(pend, pend_first, n_pend, rel, first_ns, last_ns)
    n_cand = 0
    if collect:  # this step's samplers, before finish_step retires any
        for k in range(n_run):
            if sched[running[k]] > 0:
                pend[n_cand] = running[k]
                pend_first[n_cand] = first_ns[running[k]] < 0.0
                n_cand += 1
    n_run, free, done, fast_ok, fast_left, fast_ctx = finish_step(
        running, n_run, sched, computed, tokens, sampled, max_new, first_ns, last_ns, held,
        free, done, t)
    for i in range(n_cand):
        if last_ns[pend[i]] == t:  # it sampled: seen at the next step's end
            pend[n_pend] = pend[i]
            pend_first[n_pend] = pend_first[i]
            n_pend += 1
    return t, n_pend, n_run, free, done, fast_ok, fast_left, fast_ctx


@jit()
def simulate_instance(arrival_ns, prompt, cached, max_new, tables, token_budget, max_seqs,
                      n_blocks, block_size, spec_k=0, spec_gain=1.0, prefill_first=False,
                      multi_step=1, async_output=False, prefill_cap=0):
    """Step one instance's scheduler until every request finished or was dropped.

    Per request (sorted by ``arrival_ns``): ``prompt`` tokens known at arrival, of which
    ``cached`` already have their KV (a disaggregated decode worker receives them), and
    ``max_new`` tokens to sample (>= 1). A request whose final KV (``prompt + max_new -
    1`` tokens) needs more than ``n_blocks`` blocks can never run: dropped (times -1).
    ``spec_k`` > 0: speculative decoding, each decode step verifying ``spec_k + 1``
    queries per sequence (``tables.dec_ns`` then prices a whole speculative step) and
    emitting ``spec_gain`` tokens per sequence on average (:func:`spec_emit`; ``spec_k``
    at most ``token_budget - 1``, ``spec_gain`` at most ``spec_k + 1``); decode-only
    stretches then go through :func:`spec_stretch`. ``prefill_first``: vLLM V0's default scheduling (no
    chunked prefill): a step first admits waiting prompts, whole, in the full budget, and
    runs them alone; only a step that admits none decodes the running requests.
    ``multi_step`` > 1 (vLLM's ``--num-scheduler-steps``; 1 with speculation): a
    decode-only step runs as a block of that many sub-steps of the same sequences, the
    scheduler and the client seeing only its end (:func:`run_step`); ``async_output``: a
    single step's tokens reach the client at the next step's end (or at once when idle).
    Either turns the decode stretches off. ``prefill_cap``: :func:`take`'s ``cap``.

    Returns ``(first_ns, last_ns, start_ns, preemptions, steps)``: the end of the step
    that sampled its first and its last token, the start of the first step that scheduled
    it, how often it was preempted, and the number of steps run.
    """
    n = arrival_ns.shape[0]
    if spec_k > token_budget - 1:  # a verify never outgrows the step's budget
        spec_k = token_budget - 1
    if spec_gain > spec_k + 1.0:
        spec_gain = spec_k + 1.0
    if spec_k > 0 or multi_step < 1:  # no multi-step blocks with speculation
        multi_step = 1
    plain = multi_step == 1 and not async_output  # the decode stretches hold
    first_ns = np.full(n, -1.0)
    last_ns = np.full(n, -1.0)
    start_ns = np.full(n, -1.0)
    preemptions = np.zeros(n, dtype=np.int64)
    computed = np.zeros(n, dtype=np.int64)
    tokens = np.zeros(n, dtype=np.int64)
    sampled = np.zeros(n, dtype=np.int64)
    held = np.zeros(n, dtype=np.int64)
    sched = np.zeros(n, dtype=np.int64)
    spec_steps = np.zeros(n, dtype=np.int64)
    emitted = np.zeros(n, dtype=np.int64)  # spec_stretch's scratch
    running = np.empty(max(n, 1), dtype=np.int64)
    queue = np.empty(max(n, 1), dtype=np.int64)  # ring buffer of waiting requests
    pend = np.empty(max(n, 1), dtype=np.int64)  # tokens not yet processed (async_output)
    pend_first = np.zeros(max(n, 1), dtype=np.bool_)  # ... among them its first
    n_pend = 0
    for i in range(n):
        computed[i] = cached[i]
        tokens[i] = prompt[i]
    n_run = 0
    fast_ok = False
    fast_left = 0
    fast_ctx = 0.0
    q_head = 0
    q_len = 0
    free = n_blocks
    t = 0.0
    nxt = 0
    done = 0
    steps = 0
    while done < n:
        if n_run == 0 and q_len == 0:
            n_pend = 0  # idle: the last step's output is processed at once
            if arrival_ns[nxt] > t:
                t = arrival_ns[nxt]
        q_len, nxt, done = enqueue_arrivals(arrival_ns, prompt, max_new, n_blocks, block_size,
                                            queue, q_head, q_len, nxt, done, t)
        if n_run == 0 and q_len == 0:
            continue
        if plain and fast_ok:  # decode-only stretches with nothing to decide but time
            t, done_steps, free, ran = stretch(
                tables, spec_k, spec_gain, token_budget, max_seqs, prefill_first, fast_left,
                fast_ctx, n_run, running, queue, q_head, q_len, computed, tokens, sampled,
                max_new, spec_steps, emitted, last_ns, held, block_size, arrival_ns, nxt, t, free,
                prefill_cap)
            steps += done_steps
            if ran:
                fast_ok = False
                continue
        fast_ok = False
        n_dec, ctx_sum, pre_tokens, pairs, preempted = 0, 0.0, 0, 0.0, False
        before = n_run
        if prefill_first:  # waiting prompts first, alone in their step
            (q_head, q_len, n_run, free, budget, n_dec, ctx_sum, pre_tokens,
             pairs) = schedule_waiting(queue, q_head, q_len, running, n_run, max_seqs, tokens,
                                       computed, held, sched, start_ns, free, token_budget,
                                       block_size, t, n_dec, ctx_sum, pre_tokens, pairs,
                                       spec_k, spec_gain, sampled, max_new, spec_steps, True,
                                       prefill_cap)
        if n_run == before:  # nothing admitted: the running requests' step
            (n_run, q_head, q_len, free, budget, n_dec, ctx_sum, pre_tokens, pairs,
             preempted) = schedule_running(running, n_run, tokens, computed, held, sched,
                                           preemptions, queue, q_head, q_len, free,
                                           token_budget, block_size, spec_k, spec_gain,
                                           sampled, max_new, spec_steps, prefill_cap)
            if not preempted and not prefill_first:
                (q_head, q_len, n_run, free, budget, n_dec, ctx_sum, pre_tokens,
                 pairs) = schedule_waiting(queue, q_head, q_len, running, n_run, max_seqs,
                                           tokens, computed, held, sched, start_ns, free,
                                           budget, block_size, t, n_dec, ctx_sum, pre_tokens,
                                           pairs, spec_k, spec_gain, sampled, max_new,
                                           spec_steps, False, prefill_cap)
        if n_dec == 0 and pre_tokens == 0:
            continue  # everything running was preempted: admit again next pass
        m = 1
        if multi_step > 1 and pre_tokens == 0 and block_ready(running, n_run, sched, tokens,
                                                              computed):
            m = multi_step
            free = block_kv(m, running, n_run, sched, computed, sampled, max_new, held, free,
                            block_size)
        t, n_pend, n_run, free, done, fast_ok, fast_left, fast_ctx = run_step(
            tables, m, n_dec, ctx_sum, pre_tokens, pairs, async_output and m == 1, running,
            n_run, sched, computed, tokens, sampled, max_new, first_ns, last_ns, held, free,
            done, t, pend, pend_first, n_pend)
        steps += m
    return first_ns, last_ns, start_ns, preemptions, steps


@jit()
def simulate_round_robin(arrival_ns, prompt, cached, max_new, tables, token_budget, max_seqs,
                         n_blocks, block_size, instances, spec_k=0, spec_gain=1.0,
                         prefill_first=False, multi_step=1, async_output=False, prefill_cap=0):
    """:func:`simulate_instance` on ``instances`` alike instances, request ``i`` (sorted by
    arrival) dealt to instance ``i % instances``; per-request results in the input order,
    preemptions and steps summed over the instances."""
    n = arrival_ns.shape[0]
    first_ns = np.full(n, -1.0)
    last_ns = np.full(n, -1.0)
    start_ns = np.full(n, -1.0)
    preemptions = np.zeros(n, dtype=np.int64)
    steps = 0
    for w in range(instances):
        idx = np.arange(w, n, instances)
        if idx.shape[0] == 0:
            continue
        f, la, s0, p, st = simulate_instance(arrival_ns[idx], prompt[idx], cached[idx],
                                             max_new[idx], tables, token_budget, max_seqs,
                                             n_blocks, block_size, spec_k, spec_gain,
                                             prefill_first, multi_step, async_output,
                                             prefill_cap)
        first_ns[idx] = f
        last_ns[idx] = la
        start_ns[idx] = s0
        preemptions[idx] = p
        steps += st
    return first_ns, last_ns, start_ns, preemptions, steps


@jit()
def kv_transfer_done(ready_ns, span_ns, transfer_ns, n_layers, layerwise):
    """When each request's KV cache has reached its decode worker, over one link.

    Requests in the order given (their prefill's end, ``ready_ns``); ``span_ns`` is how
    long their prefill ran, ``transfer_ns`` the whole transfer. ``layerwise``: layer ``l``
    of ``n_layers`` is sent as soon as it is computed (the link idle), so the last layer
    leaves at the prefill's end; otherwise the transfer starts after the prefill. The
    link carries one transfer at a time; it never holds up the next prefill.
    """
    n = ready_ns.shape[0]
    out = np.empty(n)
    link_free = -np.inf
    for i in range(n):
        lead = span_ns[i] * (n_layers - 1) / n_layers if layerwise else 0.0
        done = ready_ns[i] + transfer_ns[i] / n_layers
        whole = ready_ns[i] - lead + transfer_ns[i]
        if whole > done:
            done = whole
        queued = link_free + transfer_ns[i]
        if queued > done:
            done = queued
        out[i] = done
        link_free = done
    return out
