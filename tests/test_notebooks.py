"""The notebooks in ``notebooks/`` run top to bottom and render their figures.

Each notebook is executed with nbclient in a fresh kernel that runs *this* interpreter
(a throw-away kernelspec pointing at ``sys.executable``, so a ``python3`` kernelspec from
some other environment can never be picked up), from the ``notebooks/`` folder, with an
in-memory copy: the committed files are never rewritten. The notebooks assert their own
claims, so a cell error here usually means the model changed under the text.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import nbclient
import nbformat
import pytest
from jupyter_client.kernelspec import KernelSpecManager
from jupyter_client.manager import AsyncKernelManager

NOTEBOOK_DIR = Path(__file__).resolve().parents[1] / "notebooks"
NOTEBOOKS = ("codesign_llama70b", "serving_layout_h100", "zero_tuning_7b", "serving_planner_h100_vs_h200")
KERNEL_NAME = "python3"
CELL_TIMEOUT_S = 600



def _images(nb) -> int:
    return sum(
        1
        for cell in nb.cells if cell.cell_type == "code"
        for out in cell.get("outputs", [])
        if out.get("output_type") in ("display_data", "execute_result")
        and "image/png" in out.get("data", {})
    )


def _errors(nb) -> list[str]:
    return [
        f"cell {i}: {out.get('ename')}: {out.get('evalue')}"
        for i, cell in enumerate(nb.cells) if cell.cell_type == "code"
        for out in cell.get("outputs", []) if out.get("output_type") == "error"
    ]


@pytest.fixture(scope="module")
def kernel_spec_manager(tmp_path_factory: pytest.TempPathFactory) -> KernelSpecManager:
    """A kernelspec ``python3`` that launches ipykernel in this interpreter."""
    kernels = tmp_path_factory.mktemp("kernels")
    spec_dir = kernels / KERNEL_NAME
    spec_dir.mkdir()
    spec = {
        "argv": [sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"],
        "display_name": f"Python 3 ({sys.executable})",
        "language": "python",
    }
    (spec_dir / "kernel.json").write_text(json.dumps(spec), encoding="utf-8")
    return KernelSpecManager(kernel_dirs=[str(kernels)], ensure_native_kernel=False)


def _read(name: str):
    path = NOTEBOOK_DIR / f"{name}.ipynb"
    assert path.is_file(), f"{path} is missing"
    return nbformat.read(path, as_version=4)


@pytest.mark.parametrize("name", NOTEBOOKS)
def test_notebook__executes_and_renders_figures(name: str, kernel_spec_manager) -> None:
    nb = _read(name)
    km = AsyncKernelManager(kernel_name=KERNEL_NAME, kernel_spec_manager=kernel_spec_manager)
    client = nbclient.NotebookClient(
        nb, km=km, timeout=CELL_TIMEOUT_S, record_timing=False,
        resources={"metadata": {"path": str(NOTEBOOK_DIR)}},
    )
    try:
        client.execute()
    except nbclient.exceptions.CellExecutionError as exc:
        pytest.fail(f"{name}.ipynb failed:\n{exc}", pytrace=False)
    assert not _errors(nb)
    assert _images(nb) >= 1, f"{name}.ipynb rendered no image/png output"


@pytest.mark.parametrize("name", NOTEBOOKS)
def test_notebook__committed_executed(name: str) -> None:
    """The committed file carries its outputs (plots visible on GitHub), without errors."""
    nb = _read(name)
    nbformat.validate(nb)
    assert nb.metadata.get("kernelspec", {}).get("name") == KERNEL_NAME
    code = [c for c in nb.cells if c.cell_type == "code"]
    assert code and all(c.get("execution_count") for c in code), "commit the notebook executed"
    assert not _errors(nb)
    assert _images(nb) >= 1, f"{name}.ipynb was committed without its figures"
