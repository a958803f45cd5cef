"""The Streamlit app: pure logic, the pages headless (AppTest), the CLI, a real browser."""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

import pytest

from simcore.app import logic as L
from simcore.cli import COMMANDS, main
from simcore.errors import SimcoreInputError

ROOT = Path(__file__).resolve().parents[1]
MAIN = str(ROOT / "simcore" / "app" / "main.py")
CHROMIUM = "/usr/bin/chromium"
DS_CONFIG = {"train_micro_batch_size_per_gpu": "auto",
             "zero_optimization": {"stage": "all"}, "autotuning": {"enabled": True}}

streamlit = pytest.importorskip("streamlit")


@pytest.fixture(scope="module")
def small_explore():
    return L.run_explore(L.load_model_input("Llama 3.1 8B"), s_kv=8192, depth="two_stage")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# ---- logic ---------------------------------------------------------------------------

def test_load_model_input__preset_and_upload():
    assert L.load_model_input("Llama 3.1 8B").name == "Llama 3.1 8B"
    cfg = (ROOT / "tests" / "data" / "llama3_8b_config.json").read_bytes()
    m = L.load_model_input(None, cfg)
    assert m.n_layers == 32


@pytest.mark.parametrize("upload", [b"not json", b"[1, 2]", b'{"hello": "world"}'])
def test_load_model_input__bad_upload_is_one_line(upload):
    with pytest.raises(SimcoreInputError) as exc:
        L.load_model_input(None, upload)
    assert "\n" not in str(exc.value)


def test_run_explore__too_large_points_to_cli():
    with pytest.raises(SimcoreInputError, match="--resume"):
        L.run_explore("Llama 3.1 8B", s_kv=8192, depth="4", mode="decode")


def test_run_explore__tables_and_downloads(small_explore):
    r = small_explore
    seen = []
    L.run_explore("Llama 3.1 8B", s_kv=8192, depth="two_stage",
                  progress=lambda f, t: seen.append(f))
    assert seen[-1] == 1.0
    rows = L.explore_table(r)
    assert len(rows) == len(r.all_scores) == len(L.point_labels(r)) >= 1
    assert {"latency_ms", "compute_ns", "memory_ns", "layout_label", "pareto"} <= set(rows[0])
    assert L.table_csv(rows).decode().startswith(",".join(rows[0]))
    assert L.dataset_netcdf(r.dataset)[:3] in (b"CDF", b"\x89HD")


def test_plots__breakdown_and_parity_files(small_explore, tmp_path):
    from simcore.plot import plot_breakdown, plot_parity

    plot_breakdown(small_explore.all_scores[0], tmp_path / "b.png")
    rows = L.run_validation(["prefill"])
    plot_parity(rows, tmp_path / "v.png")
    assert (tmp_path / "b.png").stat().st_size > 5000
    assert (tmp_path / "v.png").stat().st_size > 5000


def test_validation_tables():
    rows = L.run_validation(["prefill"])
    table = L.validation_table(rows)
    assert len(table) == len(rows) and {"measured", "predicted", "error_pct"} <= set(table[0])
    groups = {r["group"] for r in L.breakdown_table(rows)}
    assert "kind" in groups


def test_run_serving__rows():
    res = L.run_serving("Llama 3.1 8B", family="H200", gpus=8, isl=1024, osl=128)
    rows = L.serving_table(res)
    assert rows and "tokens_per_s_per_gpu" in rows[0]


def test_run_autotune__ranked_best_first():
    res = L.run_autotune(L.load_deepspeed_config(json.dumps(DS_CONFIG)))
    rows = L.trials_table(res)
    assert res.best_config is not None
    ok = [r[res.metric] for r in rows if r[res.metric] is not None]
    assert ok and ok[0] == res.value


def test_load_deepspeed_config__bad():
    with pytest.raises(SimcoreInputError, match="DeepSpeed"):
        L.load_deepspeed_config(b"{nope")


# ---- pages, headless -----------------------------------------------------------------

def _app(**params):
    from streamlit.testing.v1 import AppTest

    at = AppTest.from_file(MAIN, default_timeout=180)
    for k, v in params.items():
        at.query_params[k] = v
    return at


def test_app_explore__demo_sweep_renders_chart_and_table():
    at = _app(page="explore", demo="1").run()
    assert not at.exception
    assert not at.error
    assert any(s.value.startswith("Pareto frontier") for s in at.subheader)
    assert at.get("vega_lite_chart") and at.get("image") and at.dataframe


def test_app_explore__button_runs_sweep():
    at = _app().run()
    assert not at.exception
    at.button(key="explore_run").click().run()
    assert not at.exception and not at.error
    assert at.get("vega_lite_chart")


def test_app_explore__bad_upload_is_an_error_element():
    # AppTest cannot drive a file_uploader: the page reads "<key>_upload_bytes" instead
    at = _app(page="explore").run()
    at.session_state["explore_upload_bytes"] = b"this is not a config"
    at.button(key="explore_run").click().run()
    assert not at.exception
    assert at.error and "not JSON" in at.error[0].value
    assert "Traceback" not in at.error[0].value


def test_app_explore__too_large_grid_is_an_error_element():
    at = _app().run()
    at.selectbox(key="explore_depth").select("4").run()
    at.button(key="explore_run").click().run()
    assert not at.exception
    assert at.error and "--resume" in at.error[0].value


# ---- CLI -----------------------------------------------------------------------------

def test_app_cli__registered_and_help(capsys):
    assert COMMANDS["app"][0] == "simcore.cli.app"
    assert main(["app", "--help"]) == 0
    out = capsys.readouterr().out
    assert "--port" in out and "--host" in out


def test_app_cli__port_in_use_exits_2(capsys):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        assert main(["app", "--port", str(port)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.endswith(f"port {port} is in use; pass --port {port + 1}")
    assert len(err.splitlines()) == 1


def test_app_cli__without_streamlit_says_pip_install(monkeypatch, capsys):
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *a: None if name == "streamlit" else real(name, *a))
    assert main(["app", "--port", str(_free_port())]) == 2
    assert 'pip install "simcore[app]"' in capsys.readouterr().err


def test_app_cli__streamlit_command():
    from simcore.cli.app import streamlit_command

    cmd = streamlit_command("127.0.0.1", 8600)
    assert cmd[1:4] == ["-m", "streamlit", "run"] and Path(cmd[4]).name == "main.py"
    assert "--server.headless" in cmd and "--browser.gatherUsageStats" in cmd


# ---- a real browser ------------------------------------------------------------------

@pytest.mark.skipif(not os.path.exists(CHROMIUM),
                    reason=f"{CHROMIUM} missing (apt-get install chromium) - no browser test")
def test_app_browser__explore_demo_screenshot(tmp_path):
    port = _free_port()
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    proc = subprocess.Popen([sys.executable, "-m", "simcore", "app", "--port", str(port)],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=env,
                            start_new_session=True)
    try:
        url = f"http://127.0.0.1:{port}"
        for _ in range(120):
            try:
                with urllib.request.urlopen(url + "/_stcore/health", timeout=1) as resp:
                    if resp.read().strip() == b"ok":
                        break
            except OSError:
                time.sleep(0.5)
        else:
            pytest.fail("streamlit did not come up")
        png = tmp_path / "explore.png"
        # virtual time runs ahead of the server: the first loads compile the kernels (numba)
        # and only show the loading skeleton (~7 kB), so retry until the page rendered
        for _ in range(12):
            _chromium(url + "/?page=explore&demo=1", png, tmp_path)
            if png.stat().st_size > 40_000:
                break
            time.sleep(5)
        shot = os.environ.get("SIMCORE_APP_SCREENSHOT")
        if shot:
            shutil.copy(png, shot)
        # the loading skeleton is ~7 kB; the rendered page with the Pareto header ~60 kB
        assert png.stat().st_size > 40_000, "screenshot looks blank (page did not render)"
    finally:
        os.killpg(proc.pid, 15)
        proc.wait(timeout=30)
        if proc.stdout:
            proc.stdout.close()


def _chromium(url: str, png: Path, tmp: Path) -> None:
    base = [CHROMIUM, "--headless=new", "--no-sandbox", "--disable-gpu",
            "--disable-background-networking", "--disable-component-update", "--disable-sync",
            "--no-first-run", "--window-size=1400,1000", "--virtual-time-budget=60000"]
    with tempfile.TemporaryDirectory(dir=tmp) as prof:
        subprocess.run([*base, f"--user-data-dir={prof}", f"--screenshot={png}", url],
                       check=True, capture_output=True, timeout=180)
