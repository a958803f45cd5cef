"""The busiest expert-parallel rank's distinct experts (``busiest_rank_experts``):
against sampling, and its bounds."""

from __future__ import annotations

import numpy as np
import pytest

from simcore.kernels.inference import busiest_rank_experts, experts_touched


@pytest.mark.parametrize("n_experts, top_k, ep", [(256, 8, 8), (128, 8, 8), (64, 6, 4)])
@pytest.mark.parametrize("tokens", [1, 4, 24])
def test_busiest_rank_experts__matches_uniform_routing_sampled(n_experts, top_k, ep, tokens):
    rng = np.random.default_rng(7)
    m = n_experts // ep
    busiest = []
    for _ in range(1000):
        hit = np.zeros(n_experts, dtype=bool)
        for _t in range(tokens):
            hit[rng.choice(n_experts, top_k, replace=False)] = True
        busiest.append(hit.reshape(ep, m).sum(axis=1).max())
    want = float(np.mean(busiest))
    assert busiest_rank_experts(float(n_experts), float(top_k), float(tokens), float(ep)) == \
        pytest.approx(want, rel=0.04, abs=0.05)


def test_busiest_rank_experts__between_the_mean_and_every_local_expert():
    for tokens in (1.0, 3.0, 10.0, 100.0, 1e5):
        mean = experts_touched(256.0, 8.0, tokens) / 8.0
        got = busiest_rank_experts(256.0, 8.0, tokens, 8.0)
        assert mean - 1e-9 <= got <= 32.0 + 1e-9
    # one rank: the mean; every expert touched: all local ones; more tokens never fewer
    assert busiest_rank_experts(256.0, 8.0, 4.0, 1.0) == pytest.approx(experts_touched(256.0, 8.0, 4.0))
    assert busiest_rank_experts(256.0, 8.0, 1e6, 8.0) == pytest.approx(32.0)
    seq = [busiest_rank_experts(256.0, 8.0, t, 8.0) for t in (1.0, 2.0, 4.0, 8.0, 32.0)]
    assert seq == sorted(seq)
