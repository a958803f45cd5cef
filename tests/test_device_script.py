"""benchmarks/device/h200_firstparty.py without a GPU: the plain-Python parts (shapes, schedules
and memory-cap skipping, FLOP and byte counts, budget, writers, runtime estimate), the CLI with
torch blocked, and, where torch is installed, a CPU smoke run of every section."""

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "benchmarks" / "device" / "h200_firstparty.py"
CATALOGUE = ROOT / "simcore" / "catalogue"
GIB = 2**30


def _load():
    spec = importlib.util.spec_from_file_location("h200_firstparty_under_test", SCRIPT)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod            # dataclasses look their module up
    spec.loader.exec_module(mod)
    return mod


fp = _load()


def _run_blocked_torch(*args, cwd=ROOT):
    """The script as a program, with ``import torch`` made to fail (as on a machine without it)."""
    code = ("import runpy, sys; sys.modules['torch'] = None; "
            f"sys.argv = [{str(SCRIPT)!r}, *{list(args)!r}]; "
            f"runpy.run_path({str(SCRIPT)!r}, run_name='__main__')")
    return subprocess.run([sys.executable, "-c", code], cwd=cwd, capture_output=True, text=True,
                          timeout=60)


# --- shapes -------------------------------------------------------------------------------

def test_kv_bytes_per_token__llama_8b_is_128_kib():
    # 2 (K, V) x 32 layers x 8 kv heads x 128 head_dim x 2 bytes
    assert fp.LLAMA_8B.kv_bytes_per_token == 2 * 32 * 8 * 128 * 2 == 131072


def test_n_params__hf_counts():
    assert fp.LLAMA_8B.n_params == 8_030_261_248
    assert fp.LLAMA_70B.n_params == 70_553_706_496


def test_gemm_shape_schedule__llama_8b_and_70b_tp8_shards():
    got = [(label, g.n, g.k) for label, g in fp.gemm_shape_schedule()]
    assert got == [("8B qkv", 6144, 4096), ("8B o", 4096, 4096), ("8B gate_up", 28672, 4096),
                   ("8B down", 4096, 14336),
                   # 70B: QKV (64 + 2*8) heads * 128 / 8, O rows 8192 / 8, gate+up 2*28672 / 8
                   ("70B/TP8 qkv", 1280, 8192), ("70B/TP8 o", 8192, 1024),
                   ("70B/TP8 gate_up", 7168, 8192), ("70B/TP8 down", 8192, 3584)]


def test_projections__tp_that_does_not_divide():
    with pytest.raises(ValueError, match="does not split 3 ways"):
        fp.LLAMA_8B.projections(tp=3)


@pytest.mark.parametrize("shape,config", [("LLAMA_8B", "meta-llama--Llama-3.1-8B.json"),
                                          ("LLAMA_70B", "meta-llama--Llama-3.1-70B.json")])
def test_decoder_shape__matches_the_catalogue(shape, config):
    s, c = getattr(fp, shape), json.loads((CATALOGUE / config).read_text())
    assert (s.n_layers, s.d_model, s.n_heads, s.n_kv_heads, s.d_ff, s.vocab) == (
        c["num_hidden_layers"], c["hidden_size"], c["num_attention_heads"],
        c["num_key_value_heads"], c["intermediate_size"], c["vocab_size"])
    assert s.head_dim == c["hidden_size"] // c["num_attention_heads"]
    assert (s.rope_theta, s.norm_eps) == (c["rope_theta"], c["rms_norm_eps"])
    assert c["tie_word_embeddings"] is False


def test_make_plan__default_sizes():
    plan = fp.make_plan()
    assert plan.gemm_m == tuple(2**i for i in range(14))                 # 1 ... 8192
    assert plan.copy_bytes == tuple(2**20 * 4**i for i in range(7))      # 1 MiB ... 4 GiB
    assert plan.copy_bytes[-1] == 4 * GIB
    assert plan.decode_batches == (1, 8, 64, 256)
    assert plan.decode_contexts == plan.prefill_tokens == (1024, 8192, 32768)
    assert plan.mem_cap_bytes == 100 * GIB


# --- schedules and the memory cap ---------------------------------------------------------

def test_decode_schedule__skips_exactly_the_combos_over_the_cap():
    cases = fp.decode_schedule(fp.make_plan(mem_cap_gib=100))
    assert len(cases) == 12
    for c in cases:
        assert c.kv_bytes == c.batch * c.context * 131072
    # by hand: 64x32K = 256 GiB, 256x8K = 256 GiB, 256x32K = 1 TiB are over 100 GiB;
    # the largest kept is 64x8K = 64 GiB
    assert {(c.batch, c.context) for c in cases if c.skip} == {
        (64, 32768), (256, 8192), (256, 32768)}
    assert all(c.skip == "skipped (memory)" for c in cases if c.skip)
    assert max(c.kv_bytes for c in cases if not c.skip) == 64 * GIB


def test_kv_schedule__cap_is_inclusive():
    at = fp.kv_schedule([64], [8192], bytes_per_token=131072, mem_cap_bytes=64 * GIB)
    under = fp.kv_schedule([64], [8192], bytes_per_token=131072, mem_cap_bytes=64 * GIB - 1)
    assert at[0].skip is None
    assert under[0].skip == "skipped (memory)"


def test_sdpa_decode_schedule__one_layer_of_kv():
    plan = fp.make_plan(mem_cap_gib=8)
    cases = fp.sdpa_decode_schedule(plan)
    assert all(c.kv_bytes == c.batch * c.context * 4096 for c in cases)   # 8 heads x 128 x 2 x 2 B
    # only 256 x 32K (32 GiB) is over 8 GiB; 64 x 32K and 256 x 8K are exactly 8 GiB
    assert [(c.batch, c.context) for c in cases if c.skip] == [(256, 32768)]
    assert not any(c.skip for c in fp.sdpa_decode_schedule(fp.make_plan()))


def test_rotation_sets__covers_flush_bytes_within_cap():
    assert fp.rotation_sets(48 * 2**20, flush_bytes=256 * 2**20, mem_cap_bytes=100 * GIB) == 6
    assert fp.rotation_sets(2**20, flush_bytes=256 * 2**20, mem_cap_bytes=100 * GIB) == 256
    assert fp.rotation_sets(2**20, flush_bytes=256 * 2**20, mem_cap_bytes=10 * 2**20) == 10
    assert fp.rotation_sets(8 * GIB, flush_bytes=256 * 2**20, mem_cap_bytes=GIB) == 1
    with pytest.raises(ValueError, match="positive"):
        fp.rotation_sets(0, flush_bytes=1, mem_cap_bytes=1)


def test_choose_inner__loops_short_calls_up_to_target():
    assert fp.choose_inner(0.004, target_ms=1.0, max_inner=256) == 250
    assert fp.choose_inner(0.001, target_ms=1.0, max_inner=256) == 256
    assert fp.choose_inner(3.0, target_ms=1.0, max_inner=256) == 1
    assert fp.choose_inner(3.0, target_ms=0.0, max_inner=1) == 1


# --- FLOP and byte counts -----------------------------------------------------------------

@pytest.mark.parametrize("m,n,k", [(1, 6144, 4096), (8192, 28672, 4096), (37, 4096, 14336)])
def test_gemm_flops__two_m_n_k(m, n, k):
    assert fp.gemm_flops(m, n, k) == 2 * m * n * k
    assert fp.gemm_bytes(m, n, k, bytes_in=2, bytes_out=2) == 2 * (m * k + n * k + m * n)
    assert fp.gemm_bytes(m, n, k, bytes_in=1, bytes_out=2) == m * k + n * k + 2 * m * n


def test_per_second__tflops_of_a_timed_gemm():
    # 8192^3 in 1.4 ms -> 785 TFLOP/s
    assert fp.per_second(fp.gemm_flops(8192, 8192, 8192), 1.4, 1e12) == pytest.approx(785.4, abs=0.1)
    assert fp.per_second(1.0, None) is None
    assert fp.copy_bytes_moved(4 * GIB) == 8 * GIB


def test_sdpa_counts__causal_prefill_and_decode():
    # causal 1K: 1024*1025/2 scored pairs, 4 FLOPs x head_dim each, per q head
    assert fp.sdpa_flops(1, 32, 1024, 1024, 128, causal=True) == 4 * 32 * 128 * 1024 * 1025 // 2
    assert fp.sdpa_flops(8, 32, 1, 8192, 128, causal=False) == 4 * 8 * 32 * 128 * 8192
    # decode: q and out per q head, K and V per kv head
    assert fp.sdpa_bytes(8, 32, 8, 1, 8192, 128) == 2 * 128 * 8 * (2 * 32 + 2 * 8 * 8192)
    with pytest.raises(ValueError, match="q_len == kv_len"):
        fp.attention_pairs(1, 8, causal=True)


def test_decoder_counts__decode_step():
    s = fp.LLAMA_8B
    linear = 2 * 32 * (6144 * 4096 + 4096 * 4096 + 28672 * 4096 + 4096 * 14336)
    head = 2 * 128256 * 4096
    attn = 32 * 4 * 32 * 128 * 8192
    assert fp.decoder_flops(s, batch=1, q_len=1, kv_len=8192) == linear + head + attn
    assert fp.decoder_flops(s, batch=4, q_len=1, kv_len=8192) == 4 * (linear + head + attn)
    # streamed weights: everything but the embedding table
    assert s.streamed_weight_bytes == 2 * (8_030_261_248 - 128256 * 4096)
    assert fp.decode_step_bytes(s, batch=8, context=1024) == (
        s.streamed_weight_bytes + 8 * 1024 * 131072)


# --- budget and estimate ------------------------------------------------------------------

def test_budget__allows_while_cost_fits_before_reserve():
    now = [0.0]
    b = fp.Budget(100.0, reserve_s=10.0, safety=1.0, clock=lambda: now[0])
    assert b.allows(90.0) and not b.allows(90.1)
    now[0] = 85.0
    assert b.elapsed_s() == 85.0
    assert b.allows(5.0) and not b.allows(5.1)
    now[0] = 95.0
    assert not b.allows(0.0)
    # the default safety factor doubles each estimate: 40 s left after the reserve
    now[0] = 0.0
    b2 = fp.Budget(100.0, reserve_s=10.0, clock=lambda: now[0])
    now[0] = 50.0
    assert b2.allows(20.0) and not b2.allows(20.1)
    with pytest.raises(ValueError, match="positive"):
        fp.Budget(0)


def test_estimate_runtime__default_fits_the_budget():
    est = fp.estimate_runtime_s(fp.make_plan())
    assert set(est) == {"startup", *fp.SECTIONS, "total"}
    assert est["total"] == pytest.approx(sum(v for k, v in est.items() if k != "total"), abs=0.3)
    assert 30 < est["total"] < 480
    # a 32K-token prefill alone: 2 x 7 GFLOP/token x 32K at 546 TFLOP/s is ~0.8 s
    plan = fp.make_plan()
    c32k = fp.prefill_schedule(plan)[-1]
    assert 1.0 < fp.estimate_prefill_case_s(plan, c32k) / (plan.prefill_warmup
                                                           + plan.prefill_repeats) < 3.0
    only = fp.estimate_runtime_s(plan, ["hbm"])
    assert set(only) == {"startup", "hbm", "total"}


# --- writers ------------------------------------------------------------------------------

META = {"date_utc": "2027-01-01T00:00:00Z", "device": "NVIDIA H200", "memory_gib": 139.8,
        "sm_count": 132, "capability": "9.0", "torch": "2.11.0+cu130", "cuda": "13.0",
        "cudnn": 91300, "driver": "580.159.04", "python": "3.12.3", "git_commit": "abc1234",
        "clocks": {"sm": "1980 MHz", "mem": "3201 MHz"}, "status": "complete"}


def _results():
    plan = fp.make_plan()
    res = fp.new_results(plan)
    res["meta"].update(META)
    res["sections"]["decode"]["status"] = "done"
    res["sections"]["decode"]["rows"] = [
        {"batch": 1, "context": 1024, "mode": "graph", "kv_gib": 0.125, "ms": 4.51234,
         "tokens_per_s": 221.6, "gbs": 3600.2, "tflops": 3.6, "status": "ok"},
        {"batch": 256, "context": 32768, "mode": "eager", "kv_gib": 1024.0,
         "status": "skipped (memory)"},
        {"batch": 8, "context": 8192, "mode": "graph", "status": "error: a | b"}]
    return res


def test_render_markdown__header_fields_and_tables():
    md = fp.render_markdown(_results())
    for line in ["- Device: NVIDIA H200", "- Memory: 139.8", "- torch: 2.11.0+cu130",
                 "- CUDA: 13.0", "- cuDNN: 91300", "- Driver: 580.159.04",
                 "- Git commit: abc1234", "- Date (UTC): 2027-01-01T00:00:00Z",
                 "- Clocks at start: sm: 1980 MHz, mem: 3201 MHz", "- SDPA backends: unknown",
                 f"- Source: {fp.SOURCE}"]:
        assert line in md.splitlines()
    assert "## decode: Decoder decode step (random-weight Llama-3.1-8B shape, bf16)" in md
    assert "| batch | context | mode | KV GiB | ms/step | tokens/s | GB/s (min bytes) | TFLOP/s | status |" in md
    assert "| 1 | 1024 | graph | 0.12 | 4.512 | 222 | 3600 | 3.6 | ok |" in md
    assert "| 256 | 32768 | eager | 1024.00 |  |  |  |  | skipped (memory) |" in md
    assert "error: a \\| b" in md                                        # no broken table
    for name in fp.SECTIONS:
        assert f"## {name}: " in md
    assert "Status: done" in md and md.count("Status: not run") == 4


def test_write_json_atomic__temp_file_then_rename(tmp_path, monkeypatch):
    target = tmp_path / "r.json"
    fp.write_json_atomic(target, {"v": 1})
    real_replace, seen = os.replace, []

    def spy(src, dst):
        src, dst = Path(src), Path(dst)
        seen.append((src, dst))
        assert src.parent == dst.parent and src != dst and src.name.endswith(".tmp")
        assert json.loads(src.read_text()) == {"v": 2}       # complete before the rename
        assert json.loads(dst.read_text()) == {"v": 1}       # old file untouched until then
        real_replace(src, dst)

    monkeypatch.setattr(os, "replace", spy)
    fp.write_json_atomic(target, {"v": 2})
    assert len(seen) == 1 and seen[0][1] == target
    assert json.loads(target.read_text()) == {"v": 2}
    assert [p.name for p in tmp_path.iterdir()] == ["r.json"]


def test_write_json_atomic__failures_keep_the_old_file_and_no_temp(tmp_path, monkeypatch):
    target = tmp_path / "r.json"
    fp.write_json_atomic(target, {"v": 1})
    with pytest.raises(TypeError):
        fp.write_json_atomic(target, {"v": object()})
    assert json.loads(target.read_text()) == {"v": 1}

    def broken(src, dst):
        raise OSError("disk gone")

    monkeypatch.setattr(os, "replace", broken)
    with pytest.raises(OSError, match="disk gone"):
        fp.write_text_atomic(target, "{}")
    assert json.loads(target.read_text()) == {"v": 1}
    assert [p.name for p in tmp_path.iterdir()] == ["r.json"]


def test_recorder__writes_both_files_after_every_row(tmp_path):
    now = [0.0]
    rec = fp.Recorder(tmp_path / "out", fp.new_results(fp.make_plan(quick=True), sections=["hbm"]),
                      fp.Budget(480, clock=lambda: now[0]))
    now[0] = 12.34
    rec.add("hbm", {"mib": 1.0, "ms": 0.01, "gbs": 210.0, "sets": 4, "status": "ok"})
    data = json.loads((tmp_path / "out" / fp.JSON_NAME).read_text())
    assert data["schema"] == fp.SCHEMA
    assert data["sections"]["hbm"]["rows"][0]["gbs"] == 210.0
    assert data["meta"]["elapsed_s"] == 12.3 and data["meta"]["budget_s"] == 480
    assert "| 1 | 0.0100 | 210 | 4 | ok |" in (tmp_path / "out" / fp.MD_NAME).read_text()


# --- CLI without torch --------------------------------------------------------------------

def test_main__dry_run_needs_no_torch():
    out = _run_blocked_torch("--dry-run")
    assert out.returncode == 0, out.stderr
    plan = json.loads(out.stdout)
    assert plan["sections"] == list(fp.SECTIONS)
    assert plan["estimate_s"]["total"] < 480
    assert [(c["batch"], c["context"]) for c in plan["decode"] if c["skip"]] == [
        (256, 8192), (64, 32768), (256, 32768)]                  # context-major order
    assert plan["gemm"]["m"][-1] == 8192 and len(plan["gemm"]["shapes"]) == 8


def test_main__without_torch_writes_the_error(tmp_path):
    out = _run_blocked_torch("--out", str(tmp_path), "--commit", "deadbeef", "--quick")
    assert out.returncode == 2
    assert "torch not importable" in out.stderr
    data = json.loads((tmp_path / fp.JSON_NAME).read_text())
    assert data["meta"]["status"].startswith("error: torch not importable")
    assert data["meta"]["git_commit"] == "deadbeef"
    assert "- Git commit: deadbeef" in (tmp_path / fp.MD_NAME).read_text()


def test_parse_args__unknown_section(capsys):
    with pytest.raises(SystemExit) as exc:
        fp.parse_args(["--sections", "decode,flux"])
    assert exc.value.code == 2
    assert "unknown ['flux']" in capsys.readouterr().err
    assert fp.parse_args(["--sections", "hbm,decode"]).sections == ("decode", "hbm")


# --- the whole script on the CPU, where torch is installed --------------------------------

def test_main__quick_cpu_smoke_run(tmp_path):
    pytest.importorskip("torch")
    rc = fp.main(["--quick", "--device", "cpu", "--out", str(tmp_path), "--budget-s", "300"])
    assert rc == 0
    data = json.loads((tmp_path / fp.JSON_NAME).read_text())
    assert {k: s["status"] for k, s in data["sections"].items()} == dict.fromkeys(fp.SECTIONS,
                                                                                 "done")
    decode = data["sections"]["decode"]["rows"]
    assert [r["status"] for r in decode if r["mode"] == "eager"] == ["ok"] * 4
    assert all(r["logits_finite"] for r in decode if r["mode"] == "eager")
    assert {r["status"] for r in decode if r["mode"] == "graph"} == {"n/a (no CUDA)"}
    assert all(r["status"] == "ok" for r in data["sections"]["hbm"]["rows"])
    assert all(r["bf16_ms"] > 0 for r in data["sections"]["gemm"]["rows"])
