"""Golden numbers: predictions stay bit-identical unless a change means to move them.

``tests/golden/golden.json`` pins every validation prediction, the evaluate / fused
outputs of five workloads (SHA-256 per variable), the README explore example and the
README tune example. Regenerate with ``python tests/golden/generate.py`` only for a
deliberate numeric change.
"""

from __future__ import annotations

import importlib.util
import json
import os

import pytest

_HERE = os.path.join(os.path.dirname(__file__), "golden")


def _load_generator():
    spec = importlib.util.spec_from_file_location("golden_generate",
                                                  os.path.join(_HERE, "generate.py"))
    mod = importlib.util.module_from_spec(spec)
    assert spec.loader is not None
    spec.loader.exec_module(mod)
    return mod


@pytest.fixture(scope="module")
def recomputed():
    return _load_generator().cases()


@pytest.fixture(scope="module")
def pinned():
    with open(os.path.join(_HERE, "golden.json")) as fh:
        return json.load(fh)


def test_golden__same_cases(recomputed, pinned):
    assert sorted(recomputed) == sorted(pinned)


@pytest.mark.parametrize("case", sorted(json.load(open(os.path.join(_HERE, "golden.json")))))
def test_golden__bit_identical(case, recomputed, pinned):
    got = json.loads(json.dumps(recomputed[case]))
    assert got == pinned[case]


def test_golden__digest_detects_a_one_ulp_change():
    import numpy as np

    gen = _load_generator()
    a = np.array([1.0, 2.0, np.nan])
    b = a.copy()
    b[1] = np.nextafter(b[1], 3.0)
    assert gen.digest(a) != gen.digest(b)
    assert gen.digest(a) == gen.digest(a.copy())
