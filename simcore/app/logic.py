"""Pure functions behind the Streamlit pages: inputs, sweeps, tables and figures.

Nothing here imports streamlit, so every function is testable on its own. User
mistakes raise :class:`~simcore.errors.SimcoreInputError` with one line saying what to
pass instead; the pages show that line with ``st.error``.
"""

from __future__ import annotations

import io
import json
import math
import os
import tempfile
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from ..errors import SimcoreInputError

__all__ = [
    "MAX_JOINT", "model_choices", "family_choices", "load_model_input", "count_joint",
    "run_explore", "explore_table", "table_csv", "dataset_netcdf", "point_labels",
    "run_serving", "serving_table", "run_validation", "validation_table",
    "breakdown_table", "load_deepspeed_config", "run_autotune", "trials_table",
]

#: Above this many (hardware x layout) evaluations the app refuses and points to the CLI.
MAX_JOINT = 5_000_000


def model_choices() -> list[str]:
    """Preset names, then catalogue ids."""
    from ..presets import PRESETS, catalogue

    return list(PRESETS) + [k for k in catalogue() if k not in PRESETS]


def family_choices() -> list[str]:
    from ..presets import HARDWARE_FAMILIES

    return list(HARDWARE_FAMILIES)


def load_model_input(name: str | None = None, upload: bytes | str | None = None) -> Any:
    """A :class:`~simcore.specs.Model` from an uploaded ``config.json`` (bytes) or a name."""
    from ..presets import get_model
    from ..specs import Model

    if upload is not None:
        try:
            cfg = json.loads(upload)
        except (ValueError, UnicodeDecodeError) as exc:
            raise SimcoreInputError(
                f"the uploaded file is not JSON ({exc}); upload a HuggingFace config.json"
            ) from None
        if not isinstance(cfg, dict):
            raise SimcoreInputError("the uploaded JSON is not an object; upload a HuggingFace "
                                    "config.json")
        try:
            return Model.from_hf_dict(cfg, name=cfg.get("_name_or_path") or "uploaded model")
        except (SimcoreInputError, ValueError, KeyError, TypeError) as exc:
            msg = " ".join(str(exc).split()) or type(exc).__name__
            raise SimcoreInputError(f"the uploaded file is not a model config: {msg}") from None
    if not name:
        raise SimcoreInputError("pick a model preset or upload a config.json")
    try:
        return get_model(name)
    except (SimcoreInputError, ValueError, KeyError) as exc:
        raise SimcoreInputError(" ".join(str(exc).split())) from None


def _depth(depth: str | int | Mapping[str, Sequence[float]]) -> Any:
    if isinstance(depth, str) and depth.strip().isdigit():
        return int(depth)
    return depth


def count_joint(*, depth: Any, mode: str, family: str | None, space: str = "reduced") -> tuple[int, int]:
    """(hardware candidates, layouts) a sweep would evaluate, without running it."""
    from ..codesign import enumerate_hardware
    from ..space import get_space

    n_hw = len(enumerate_hardware(_depth(depth), family=family))
    n_layouts = get_space(space, mode).size
    return n_hw, n_layouts


def run_explore(model: Any, *, s_kv: int, mode: str = "decode", batch: int = 1,
                depth: Any = "two_stage", family: str | None = None,
                metric: str = "latency",
                progress: Callable[[float, str], Any] | None = None) -> Any:
    """:func:`~simcore.codesign.joint_explore` after checking the grid size."""
    from ..codesign import joint_explore

    try:
        n_hw, n_layouts = count_joint(depth=depth, mode=mode, family=family)
    except (SimcoreInputError, ValueError, KeyError) as exc:
        raise SimcoreInputError(" ".join(str(exc).split())) from None
    total = n_hw * n_layouts
    if total > MAX_JOINT:
        raise SimcoreInputError(
            f"{n_hw} hardware x {n_layouts} layouts = {total:,} evaluations is too large for "
            f"the app (limit {MAX_JOINT:,}); run `simcore explore ... --store run.zarr "
            "--resume` from the CLI instead")
    if progress:
        progress(0.1, f"sweeping {n_hw} hardware x {n_layouts} layouts = {total:,}")
    try:
        r = joint_explore(model, s_kv=int(s_kv), mode=mode, batch=int(batch),
                          depth=_depth(depth), family=family, metric=metric)
    except (SimcoreInputError, ValueError) as exc:
        raise SimcoreInputError(" ".join(str(exc).split())) from None
    if progress:
        progress(1.0, f"done: {len(r.all_scores)} hardware candidates fit")
    return r


def point_labels(result: Any) -> list[str]:
    """One label per fitting point (index: cost, latency, layout)."""
    from ..plot import layout_label

    return [f"#{i}: cost {s.cost_score:.2f}, {s.latency_ns / 1e6:.3g} ms, "
            f"{layout_label(s.layout)}" for i, s in enumerate(result.all_scores)]


def explore_table(result: Any) -> list[dict[str, Any]]:
    """Rows of every fitting hardware point (hardware knobs, layout, times, Pareto flag)."""
    from ..plot import layout_label

    front = {id(s) for s in result.pareto_scores}
    rows = []
    for s in result.all_scores:
        row = s.as_row()
        row["latency_ms"] = s.latency_ns / 1e6
        row["layout_label"] = layout_label(s.layout)
        row["pareto"] = id(s) in front or any(
            p.hardware == s.hardware for p in result.pareto_scores)
        rows.append(row)
    return rows


def table_csv(rows: Sequence[Mapping[str, Any]]) -> bytes:
    import csv

    buf = io.StringIO()
    if rows:
        w = csv.DictWriter(buf, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(rows)
    return buf.getvalue().encode()


def dataset_netcdf(ds: Any) -> bytes:
    """The sweep's dataset as netCDF bytes (attrs that netCDF cannot hold are dropped)."""
    ds = ds.copy()
    for obj in [ds, *ds.variables.values()]:
        obj.attrs = {k: v for k, v in obj.attrs.items()
                     if isinstance(v, (str, int, float)) and not isinstance(v, bool)}
    for name in list(ds.variables):
        if ds[name].dtype == object or ds[name].dtype.kind == "b":
            ds[name] = ds[name].astype(str if ds[name].dtype == object else "i1")
    fd, path = tempfile.mkstemp(suffix=".nc")
    os.close(fd)
    try:
        ds.to_netcdf(path)
        with open(path, "rb") as f:
            return f.read()
    finally:
        os.unlink(path)


def run_serving(model: Any, *, family: str | None, gpus: int, isl: int, osl: int,
                max_ttft_ms: float | None = None, max_tpot_ms: float | None = None) -> Any:
    from .. import serving

    try:
        return serving.plan(model, family=family, gpus=int(gpus), isl=int(isl), osl=int(osl),
                            max_ttft_ms=max_ttft_ms or None, max_tpot_ms=max_tpot_ms or None)
    except (SimcoreInputError, ValueError) as exc:
        raise SimcoreInputError(" ".join(str(exc).split())) from None


def serving_table(result: Any) -> list[dict[str, Any]]:
    return [c.as_row() for c in result.best]


def run_validation(kinds: Sequence[str] | None = None) -> list[Any]:
    from ..validation import validate

    return validate(kinds=list(kinds) if kinds else None)


def validation_table(rows: Sequence[Any]) -> list[dict[str, Any]]:
    return [{"id": r.id, "kind": r.kind, "model": r.model, "hardware": r.hardware,
             "layout": r.layout, "measured": r.measured, "predicted": r.predicted,
             "unit": r.unit, "error_pct": 100 * r.error, "fits": r.fits, "source": r.source}
            for r in rows]


def breakdown_table(rows: Sequence[Any]) -> list[dict[str, Any]]:
    """Mean |error| (%) and count per kind, per source and per hardware generation."""
    from ..validation import breakdown

    out = []
    for group, entries in breakdown(rows).items():
        for key, (mae, n) in entries.items():
            out.append({"group": group, "name": key, "mean_abs_error_pct": 100 * mae, "n": n})
    return out


def load_deepspeed_config(upload: bytes | str) -> dict[str, Any]:
    try:
        cfg = json.loads(upload)
    except (ValueError, UnicodeDecodeError) as exc:
        raise SimcoreInputError(f"the uploaded file is not JSON ({exc}); upload a DeepSpeed "
                                "config (ds_config.json)") from None
    if not isinstance(cfg, dict):
        raise SimcoreInputError("the uploaded JSON is not an object; upload a DeepSpeed config")
    return cfg


def run_autotune(cfg: Mapping[str, Any], *, model: Any = "Llama 2 7B",
                 family: str = "A100-80G", n_gpus: int = 8) -> Any:
    from ..autotune import Autotuner, SimulatorRunner

    try:
        return Autotuner(dict(cfg), SimulatorRunner(model, family=family, n_gpus=int(n_gpus))
                         ).tune()
    except (SimcoreInputError, ValueError, TypeError, KeyError) as exc:
        raise SimcoreInputError(" ".join(str(exc).split()) or type(exc).__name__) from None


def trials_table(result: Any) -> list[dict[str, Any]]:
    """Trials, best metric value first (failed ones last)."""
    rows = []
    for t in result.trials:
        v = t.value(result.metric)
        rows.append({"name": t.name, "stage": t.stage, "micro_batch": t.micro_batch,
                     "grad_accum": t.grad_accum, "status": t.status, "phase": t.phase,
                     result.metric: v, "error": t.error})
    from ..metrics import get_metric

    sign = get_metric(result.metric).sign  # +1: smaller is better
    rows.sort(key=lambda r: (r[result.metric] is None,
                             sign * r[result.metric] if r[result.metric] is not None
                             else math.inf))
    return rows
