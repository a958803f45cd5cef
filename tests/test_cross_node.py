"""Collectives that cross the scale-out network, priced as NCCL's tuning model prices them
(issue 32 item 1; docs/sources/cross_node.md).

NCCL's tree all-reduce over nNodes nodes of ppn GPUs costs base + 2·((ppn − 1)·NVLink +
log2i(nNodes)·NET) (``NVIDIA/nccl src/graph/tuning.cc`` @ 5067397c, lines 414-417; Tree/LL
6.8 + 2·(7·0.6 + 1·5.0) = 25.2 µs on 2 × 8 H100, 35.2 µs on 4 × 8). The GPU families pin
those constants; a collective inside one node keeps simcore's fitted intra-node latency.
"""

import numpy as np
import pytest

import simcore
from simcore import Workload, get_family
from simcore.hardware.families import provenance
from simcore.kernels import collectives as kc
from simcore.kernels import collectives_ref as kr
from simcore.kernels import schema
from simcore.kernels import training as kt
from simcore.kernels.common import tier_base_ns
from simcore.studies.codesign import SCALEOUT_LATENCY_ROW, sensitivity

H100 = get_family("H100-SXM").topology
TOPO = schema.pack_topology(H100)


def _allreduce_latency_ns(g: int, stride: int = 1) -> float:
    acc = np.zeros(4)
    kc.allreduce_hier(acc, 16384.0, float(g), float(stride), TOPO)
    return float(acc[3])


def test_families__pin_nccl_tuning_constants():
    for name in ("A100-80G", "A100-40G", "H100-SXM", "H200", "B200", "B300", "GB200-NVL72",
                 "GB300-NVL72"):
        t = get_family(name).topology
        assert (t.coll_base_scaleout_ns, t.alpha_intra_scaleout_ns) == (6800.0, 600.0)
        assert t.alpha_inter_ns == t.alpha_intersip_ns == 5000.0
    prov = provenance("H100-SXM")
    for key in ("alpha_inter_ns", "alpha_intersip_ns", "coll_base_scaleout_ns",
                "alpha_intra_scaleout_ns"):
        d = prov[f"topology.{key}"]
        assert d.tag == "datasheet" and "5067397c2676d5aed50042fc39e5c8ee96eb0027" in d.source
        assert "tuning-model constant" in d.note


@pytest.mark.parametrize(("nodes", "want_us"), [(2, 25.2), (3, 25.2), (4, 35.2), (8, 45.2)])
def test_allreduce_hier__is_nccl_tree_latency_across_h100_nodes(nodes, want_us):
    # 6.8 + 2·(7·0.6 + log2i(nodes)·5.0) µs: NCCL's own numbers for 8 GPUs per node
    assert _allreduce_latency_ns(8 * nodes) == pytest.approx(want_us * 1000.0, rel=1e-12)
    # the twin agrees (its links carry the tiers' alphas)
    links = [(450.0, H100.alpha_intra_ns), (50.0, H100.alpha_inter_ns),
             (50.0, H100.alpha_intersip_ns)]
    assert kr.allreduce_hier_ns(0.0, 8 * nodes, 1, H100, links) == pytest.approx(
        want_us * 1000.0, rel=1e-12)


def test_allreduce_hier__latency_monotone_in_nodes_and_above_one_node():
    lat = [_allreduce_latency_ns(8 * n) for n in range(1, 65)]
    assert all(b >= a for a, b in zip(lat, lat[1:], strict=False))
    assert lat[1] > 3 * lat[0]  # one node: 2·log2(8) steps of the fitted 0.7 µs
    # one rank per node (a data-parallel group at stride 8): ppn = 1, no NVLink steps
    assert _allreduce_latency_ns(4, stride=8) == pytest.approx((6.8 + 2 * 2 * 5.0) * 1000.0)


def test_tier_base_ns__only_across_cubes():
    assert tier_base_ns(TOPO, 0) == 0.0
    assert tier_base_ns(TOPO, 1) == tier_base_ns(TOPO, 2) == 6800.0


def test_group_collective__training_collectives_across_nodes_pay_nccl_latency():
    # a ZeRO-0 gradient all-reduce over 16 ranks, 8 per node: NCCL's 25.2 µs
    acc = np.zeros(4)
    kt.group_collective(acc, 1e6, 16.0, 8.0, 1, TOPO, True, 1.0, True)
    assert acc[3] == pytest.approx(25200.0)
    # sequence parallelism's reduce-scatter + all-gather: two collectives, two bases
    acc = np.zeros(4)
    kt.group_collective(acc, 1e6, 16.0, 8.0, 1, TOPO, True, 1.0, False)
    assert acc[3] == pytest.approx(2 * 6800.0 + 2 * (7 * 600.0 + 5000.0))
    # a ZeRO-3 all-gather over 4 nodes: one phase, two tree levels
    acc = np.zeros(4)
    kt.group_collective(acc, 1e6, 32.0, 8.0, 1, TOPO, False, 1.0, False)
    assert acc[3] == pytest.approx(6800.0 + 7 * 600.0 + 2 * 5000.0)


@pytest.mark.parametrize("cuda_graphs", [False, True])
def test_evaluate_best__70b_batch1_decode_stays_on_one_h100_node(cuda_graphs):
    """Issue 32 item 1: with cross-node all-reduces priced from NCCL's model, TP8 on one
    node beats TP16 / TP32 across nodes (before: TP32 on 4 nodes, 13.2 ms / 8.37 ms)."""
    wl = Workload("decode", cuda_graphs=cuda_graphs)
    ds = simcore.evaluate_best("Llama 3.1 70B", wl, family="H100-SXM").squeeze()
    assert int(ds.n_devices) <= 8 and int(ds.best_tp) == 8
    tp8, tp16, tp32 = (simcore.predict("Llama 3.1 70B", wl, {"tp": tp}, family="H100-SXM")
                       for tp in (8, 16, 32))
    assert float(ds.latency_ns) == pytest.approx(tp8.latency_ns, rel=1e-12)
    assert tp8.latency_ns < tp16.latency_ns and tp8.latency_ns < tp32.latency_ns
    # 2 all-reduces per layer x 80 layers: (25.2 - 10.2) µs more each at TP16 than before
    assert tp16.comm_ns - tp8.comm_ns > 160 * 20_000.0


def test_sensitivity__scaleout_latency_halved_row():
    rows = {r.knob: r for r in sensitivity("Llama 3.1 70B", Workload("decode"),
                                           family="H100-SXM")}
    row = rows[SCALEOUT_LATENCY_ROW]
    # at half the network latency TP32 across 4 nodes wins again: a faster layout
    assert row.rel_speedup > 0.02 and row.doubled_latency_ns < row.baseline_latency_ns
    assert row.baseline_latency_ns == rows["bw_hbm_gbs"].baseline_latency_ns
