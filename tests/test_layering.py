"""The package is cut by layer, and imports only go down (issue 31).

Every ``import`` / ``from ... import`` in ``simcore/`` is read with :mod:`ast` (function
level imports included, since a lazy import is still a dependency) and resolved to the
layer it lands in. A module may import its own layer or a lower one; only the engine
imports the kernels; nothing imports the CLI or the app but the entry points. The
``simcore`` package facade itself (``from simcore import Workload``) forwards lazily and
may be imported from anywhere.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "simcore"

#: layer of each top-level module or subpackage of simcore; imports go to a lower number
#: or stay inside the same module / subpackage
LAYERS: dict[str, int] = {
    "errors": 0,
    "options": 1, "io": 1, "kernels": 1,
    "model": 2,
    "hardware": 3,
    "engine": 4,
    "studies": 5,
    "validation": 6, "autotune": 6, "auto_hardware": 6,
    "cli": 7, "app": 7,
    "__main__": 8, "_aot": 8,
}
#: who may import the kernels (the engine is their one door)
KERNEL_IMPORTERS = {"engine", "kernels"}
#: most modules directly under simcore/ (packages not counted)
MAX_TOP_LEVEL_MODULES = 12


def _module_name(path: Path) -> tuple[str, bool]:
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    is_package = parts[-1] == "__init__"
    if is_package:
        parts = parts[:-1]
    return ".".join(parts), is_package


def _unit(module: str) -> str:
    """The layer unit of a dotted module name: its top-level module or subpackage."""
    parts = module.split(".")
    if len(parts) < 2 or not ((PACKAGE / parts[1]).is_dir() or (PACKAGE / f"{parts[1]}.py").is_file()):
        return ""  # the simcore facade, or a name it forwards (``from simcore import Workload``)
    return parts[1]


def import_edges() -> list[tuple[str, str, int]]:
    """(importing module, imported module, line) for every simcore-internal import."""
    edges = []
    for path in sorted(PACKAGE.rglob("*.py")):
        module, is_package = _module_name(path)
        package = module if is_package else module.rsplit(".", 1)[0]
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.ImportFrom):
                if node.level:
                    base = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                    target = ".".join(base + ([node.module] if node.module else []))
                else:
                    target = node.module or ""
                names = [target] if node.module else [f"{target}.{a.name}" for a in node.names]
            elif isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            else:
                continue
            edges += [(module, t, node.lineno) for t in names if t.split(".")[0] == "simcore"]
    return edges


def layering_violations(edges: list[tuple[str, str, int]]) -> list[str]:
    """Each import that goes up a layer, sideways into another unit of the same layer, or
    into the kernels from outside the engine, as one readable line."""
    bad = []
    for src, dst, line in edges:
        a, b = _unit(src), _unit(dst)
        if "" in (a, b) or a == b:
            continue  # the lazy facade (either way), or inside one unit
        if a not in LAYERS or b not in LAYERS:
            bad.append(f"{src}:{line} -> {dst}: a unit with no declared layer")
        elif b == "kernels" and a not in KERNEL_IMPORTERS:
            bad.append(f"{src}:{line} -> {dst}: only the engine imports the kernels")
        elif LAYERS[b] >= LAYERS[a]:
            bad.append(f"{src}:{line} -> {dst}: layer {LAYERS[a]} imports layer {LAYERS[b]}")
    return bad


def test_layering__no_import_goes_up_or_sideways():
    edges = import_edges()
    assert len(edges) > 100  # the walk found the package's imports
    assert layering_violations(edges) == []


@pytest.mark.parametrize(("src", "dst", "why"), [
    ("simcore.studies.plot", "simcore.cli.output", "layer 5 imports layer 7"),
    ("simcore.validation.fit", "simcore.kernels.inference", "only the engine imports"),
    ("simcore.autotune.tuner", "simcore.validation.data", "layer 6 imports layer 6"),
    ("simcore.model.specs", "simcore.engine.space", "layer 2 imports layer 4"),
    ("simcore.errors", "simcore.io", "layer 0 imports layer 1"),
])
def test_layering__catches_an_import_across_layers(src, dst, why):
    assert any(why in v for v in layering_violations([(src, dst, 1)]))


def test_layering__every_unit_has_a_layer():
    units = {p.stem if p.is_file() else p.name for p in PACKAGE.iterdir()
             if (p.suffix == ".py" and p.stem != "__init__") or (p / "__init__.py").exists()}
    assert units <= set(LAYERS), sorted(units - set(LAYERS))


def test_layering__few_modules_directly_under_simcore():
    modules = sorted(p.name for p in PACKAGE.glob("*.py"))
    assert len(modules) <= MAX_TOP_LEVEL_MODULES, modules


def test_layering__old_module_paths_still_import():
    """Scripts written against the flat layout (``simcore.specs``, ``simcore.codesign``,
    ``simcore.engine``'s names) keep working: the old path is the new module."""
    import importlib

    import simcore

    for old, new in simcore.LEGACY_MODULES.items():
        if old == "simcore.engine":
            continue  # now a package forwarding its names, checked below
        assert importlib.import_module(old) is importlib.import_module(new)
    from simcore.engine import FIRST_CALL_KERNELS, prepare

    assert callable(prepare) and "validate" in FIRST_CALL_KERNELS
    assert simcore.presets is importlib.import_module("simcore.model.presets")


#: longest function allowed anywhere in simcore/ (issue 31: physics in named pieces)
MAX_FUNCTION_LINES = 120


def test_layering__no_function_over_120_lines():
    long = []
    for path in sorted(PACKAGE.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                n = node.end_lineno - node.lineno + 1
                if n > MAX_FUNCTION_LINES:
                    long.append(f"{path.relative_to(PACKAGE.parent)}:{node.lineno} {node.name} "
                                f"({n} lines)")
    assert long == []
