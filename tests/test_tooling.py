"""House tooling (STYLE.md): ruff on the tree, mypy on the package."""

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", *args], cwd=ROOT, capture_output=True, text=True)


def test_ruff__clean():
    pytest.importorskip("ruff")
    out = _run("ruff", "check", "simcore", "tests", "benchmarks")
    assert out.returncode == 0, out.stdout + out.stderr


def test_mypy__package_clean():
    pytest.importorskip("mypy")
    out = _run("mypy", "simcore")
    assert out.returncode == 0, out.stdout + out.stderr
