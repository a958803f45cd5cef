"""Distributed, chunked and in-memory sweeps agree exactly."""

import numpy as np
import pytest
import xarray as xr

from simcore import Workload, best, evaluate
from simcore.engine.evaluate import best_of_prepared, prepare
from simcore.engine.space import depth_grid
from simcore.studies.codesign import joint_explore


@pytest.fixture(scope="module")
def client():
    from distributed import Client

    from simcore.engine.distributed import local_cluster

    cluster = local_cluster(n_workers=2)
    c = Client(cluster)
    yield c
    c.close()
    cluster.close()


def test_distributed_best__identical_to_in_memory_and_chunked(client):
    from simcore.engine.distributed import distributed_best

    wl = Workload("decode", s_kv=65536, batch=2)
    p = prepare("Llama 3.1 70B", wl, space="full", hardware=depth_grid("balanced"))
    mem = best_of_prepared(p, chunk_size=64)
    chunked = best_of_prepared(p, chunk_size=7)
    dist = distributed_best(p, client=client, chunk_size=5)
    xr.testing.assert_identical(mem, chunked)
    xr.testing.assert_identical(mem, dist)
    # and the full-tensor path, chunked with dask
    lazy = evaluate("Llama 3.1 70B", wl, space="full", hardware=depth_grid("balanced"),
                    chunks={"bw_hbm_gbs": 1}).compute()
    full = best(lazy, "latency")
    np.testing.assert_array_equal(full.latency_ns.values, mem.latency_ns.values)
    np.testing.assert_array_equal(full.best_tp.values, mem.best_tp.values)


def test_joint_explore__client_gives_same_answer(client):
    a = joint_explore("Llama 3.1 8B", s_kv=16384, depth="balanced", with_sensitivity=False)
    b = joint_explore("Llama 3.1 8B", s_kv=16384, depth="balanced", with_sensitivity=False,
                      client=client)
    assert [s.as_row() for s in a.all_scores] == [s.as_row() for s in b.all_scores]
    assert [s.as_row() for s in a.pareto_scores] == [s.as_row() for s in b.pareto_scores]


def test_connect__bad_address():
    from simcore.engine.distributed import connect

    with pytest.raises(ValueError, match="tcp://host:8786"):
        connect("nowhere")


def test_resumable_best__on_the_cluster_equals_in_memory(client, tmp_path):
    from simcore.engine.sweep import resumable_best

    p = prepare("Llama 3.1 8B", Workload("decode", s_kv=8192), space="full",
                hardware=depth_grid("balanced"))
    store = tmp_path / "s.zarr"
    first = resumable_best(p, store, chunk_size=8, client=client)
    assert first.attrs["chunks_computed"] == 8
    again = resumable_best(p, store, chunk_size=8, client=client)
    assert again.attrs["chunks_computed"] == 0
    xr.testing.assert_equal(again.drop_attrs(), best_of_prepared(p).drop_attrs())
