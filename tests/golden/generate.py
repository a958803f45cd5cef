"""Pin simcore's numbers: ``python tests/golden/generate.py`` writes ``golden.json``.

The golden test (``tests/test_golden.py``) recomputes every case and compares bit for
bit (SHA-256 of each array, NaN made canonical). Regenerate only for a deliberate
numeric change, and say so in the commit message.
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
from typing import Any

import numpy as np


def digest(arr: Any) -> str:
    a = np.asarray(arr)
    if a.dtype.kind == "f":
        a = np.where(np.isnan(a), np.nan, a)  # one NaN bit pattern
    elif a.dtype.kind == "O":
        a = a.astype(str)
    return hashlib.sha256(np.ascontiguousarray(a).tobytes()).hexdigest()[:24]


def dataset_digest(ds: Any) -> dict[str, str]:
    return {str(n): digest(ds[n].values) for n in sorted(map(str, ds.data_vars))}


def cases() -> dict[str, Any]:
    import simcore
    from simcore import Workload
    from simcore.engine.evaluate import evaluate_best
    from simcore.studies.codesign import joint_explore
    from simcore.validation import validate

    out: dict[str, Any] = {}
    out["validation"] = {r.id: repr(r.predicted) for r in validate()}
    grid = {"bw_hbm_gbs": [2000, 8000], "peak_tflops_f16": [250, 1000]}
    ev = {
        "decode_70b_128k_full": ("Llama 3.1 70B", Workload("decode", s_kv=131072), "full", None, None),
        "prefill_8b_32k_grid": ("Llama 3.1 8B", Workload("prefill", s_kv=32768, s_q=32768), "reduced", grid, None),
        "decode_mixtral_b64_h100": ("Mixtral 8x7B", Workload("decode", batch=64, s_kv=4096), "full", None, "H100-SXM"),
        "train_7b_a100": ("Llama 2 7B", Workload("train", batch=64, s_kv=4096, micro_batch=2, zero_stage=1), "reduced", None, "A100-80G"),
        "train_70b_h100_full": ("Llama 2 70B", Workload("train", batch=512, s_kv=4096, micro_batch=1, recompute="full", zero_stage=3), "full", None, "H100-SXM"),
    }
    for name, (m, w, sp, hw, fam) in ev.items():
        out[f"evaluate/{name}"] = dataset_digest(simcore.evaluate(m, w, space=sp, hardware=hw, family=fam))
        for metric in ("latency", "throughput", "FLOPS"):
            out[f"evaluate_best/{name}/{metric}"] = dataset_digest(
                evaluate_best(m, w, space=sp, hardware=hw, family=fam, metric=metric))
    r = joint_explore("Llama 3.1 70B", s_kv=131072, mode="decode", depth="coarse", space="full")
    out["explore/readme"] = {
        "pareto": [[s.cost_score, repr(s.latency_ns), s.n_devices] for s in r.pareto_scores],
        "sensitivity_latency": [[s.knob, repr(s.baseline_latency_ns), repr(s.doubled_latency_ns)]
                                for s in r.sensitivity],
        "dataset": dataset_digest(r.dataset),
    }
    from simcore.autotune import Autotuner, SimulatorRunner

    res = Autotuner({"bf16": {"enabled": True}, "zero_optimization": {"stage": "all"},
                     "autotuning": {"metric": "throughput"}},
                    SimulatorRunner("Llama 2 7B", family="A100-80G", n_gpus=8)).tune()
    out["tune/readme"] = [[t.name, json.dumps(t.metrics, sort_keys=True, default=repr)]
                          for t in res.trials if t.ok][:40]
    return out


def main() -> int:
    path = os.path.join(os.path.dirname(__file__), "golden.json")
    with open(path + ".tmp", "w") as fh:
        json.dump(cases(), fh, indent=1, sort_keys=True)
    os.replace(path + ".tmp", path)
    print(f"wrote {path}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", ".."))
    raise SystemExit(main())
