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
    "PAGES", "footer", "MAX_JOINT", "model_choices", "family_choices", "load_model_input", "count_joint",
    "assumptions", "compare_assumptions", "explore_assumptions",
    "run_explore", "explore_table", "table_csv", "dataset_netcdf", "point_labels",
    "run_serving", "serving_table", "run_validation", "validation_table",
    "breakdown_table", "load_deepspeed_config", "autotune_job", "run_autotune", "tune",
    "trials_table", "tune_defaults",
    "FRONTIER_PALETTE", "OFF_FRONTIER_COLOUR", "explore_chart", "DESIGN_EXAMPLES",
    "design_choices", "parse_ints", "run_compare", "compare_table", "speedup_summary",
    "EXAMPLE_DEEPSPEED_CONFIG", "DEEPSPEED_METRIC_UNITS", "MAX_BREAKDOWN_BARS",
    "ep_options", "EP_HELP", "design_family", "serving_moe_options", "SERVING_MOE_HELP",
    "routing_options", "routing_label", "ROUTING_HELP",
]

#: The app's pages (tabs), in order; ``?page=<name in lower case>`` opens one.
PAGES = ("Explore", "Serving", "Compare", "Autotune", "Validation")



def footer() -> str:
    """The line under every page; the page shows it last, so a browser that sees it knows
    the script has rendered everything above."""
    from .. import __version__

    return (f"simcore {__version__}: an analytical model fitted to published measurements "
            "(the Validation tab shows how far to trust it)")


#: Above this many (hardware x layout) evaluations the app refuses and points to the CLI.
MAX_JOINT = 5_000_000

#: Colours of the Explore chart's frontier points, one per "knob raised" step. None is in
#: matplotlib's tab10, so the browser test can tell this chart's markers from the
#: matplotlib figures' (Okabe-Ito, without the yellow that vanishes on white).
FRONTIER_PALETTE = ("#e69f00", "#0072b2", "#009e73", "#cc79a7", "#d55e00", "#56b4e9",
                    "#7b3294", "#000000")
#: Colour of the points off the frontier.
OFF_FRONTIER_COLOUR = "#c8c8c8"

#: Designs with knob overrides offered next to the families on the Compare page.
DESIGN_EXAMPLES = ("H100-SXM:bw_hbm_gbs=6700", "H100-SXM:peak_tflops_f16=1978",
                   "H100-SXM:pe_hbm_gb=150.8,bw_hbm_gbs=4800")

#: The Explore page breaks down at most this many frontier points (the cheapest).
MAX_BREAKDOWN_BARS = 8

#: Above this many (design x point) evaluations the Compare page refuses.
MAX_COMPARE_POINTS = 400

#: Units of the metrics DeepSpeed's autotuner ranks by (its ``metrics.json``).
DEEPSPEED_METRIC_UNITS = {"throughput": "samples/s", "latency": "µs per step",
                          "FLOPS_per_gpu": "FLOP/s"}

#: The DeepSpeed config the Autotune page shows (and tunes with ``?demo=1``).
EXAMPLE_DEEPSPEED_CONFIG: dict[str, Any] = {
    "train_micro_batch_size_per_gpu": "auto", "zero_optimization": {"stage": "all"},
    "autotuning": {"enabled": True}}


def model_choices() -> list[str]:
    """Preset names, then catalogue ids."""
    from ..model.presets import PRESETS, catalogue

    return list(PRESETS) + [k for k in catalogue() if k not in PRESETS]


def tune_defaults() -> Any:
    """The Autotune page's defaults: ``simcore tune``'s
    (:data:`simcore.autotune.training.TUNE_DEFAULTS`)."""
    from ..autotune.training import TUNE_DEFAULTS

    return TUNE_DEFAULTS


def family_choices() -> list[str]:
    from ..model.presets import HARDWARE_FAMILIES

    return list(HARDWARE_FAMILIES)


def load_model_input(name: str | None = None, upload: bytes | str | None = None) -> Any:
    """A :class:`~simcore.model.specs.Model` from an uploaded ``config.json`` (bytes) or a name."""
    from ..model.presets import get_model
    from ..model.specs import Model

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


def count_joint(*, depth: Any, mode: str, family: str | None, space: Any = "reduced",
                gpus: int | None = None, experts: int = 1) -> tuple[int, int]:
    """(hardware candidates, layouts) a sweep would evaluate, without running it
    (``gpus``: the device budget, which widens the layout space; ``experts``: the
    model's routed experts, whose expert-parallel degrees it searches)."""
    from ..engine.space import get_space
    from ..studies.codesign import enumerate_hardware

    n_hw = len(enumerate_hardware(_depth(depth), family=family))
    n_layouts = get_space(space, mode, gpus, experts).size
    return n_hw, n_layouts


#: help of the pages' expert-parallelism selector
EP_HELP = ("mixture-of-experts models: experts split over EP of a stage's TP x DP devices, "
           "with all-to-all dispatch and combine (without DP and EP <= 8: one all-reduce over "
           "TP, as TensorRT-LLM runs it); auto searches the powers of two dividing "
           "the experts up to the budget, all every divisor a layout can hold, a number pins it")


def ep_options(model: Any, *, family: str | None = None, gpus: int | None = None
               ) -> list[str]:
    """The expert-parallelism choices a page offers ``model``: none for a dense model;
    else ``auto`` (the named space's own), ``all`` and each value of
    :func:`~simcore.engine.space.expert_sizes` within the budget."""
    from ..engine.space import expert_sizes

    if model is None or getattr(model, "n_experts", 1) <= 1:
        return []
    budget = _budget(family, gpus)
    return ["auto", "all", *map(str, expert_sizes(model.n_experts, budget.gpus))]


#: help of the Compare and Serving pages' "MoE routing" selector
ROUTING_HELP = ("mixture-of-experts models with EP > 1: the busiest expert-parallel rank's "
                "routed tokens over the mean, which its expert matmuls and all-to-all scale by. "
                "eplb (1.109) and no-eplb (2.564) are measured by TensorRT-LLM on DeepSeek-R1 "
                "decode at EP 32 (8 experts a rank) with and without its EPLB load balancer; "
                "a rank holding more experts is less skewed. balanced (1) is what the "
                "validation's sources run")


def routing_options(model: Any) -> list[str]:
    """The MoE routing choices a page offers ``model``: none for a dense model (or none
    given); else the :data:`~simcore.model.workload.MOE_ROUTING` names, ``balanced`` first."""
    from ..model.workload import MOE_ROUTING

    if model is None or getattr(model, "n_experts", 1) <= 1:
        return []
    return sorted(MOE_ROUTING, key=lambda k: MOE_ROUTING[k])


def routing_label(name: str) -> str:
    """A routing choice with its value: ``"no-eplb (2.564x)"``."""
    from ..model.workload import MOE_ROUTING

    return f"{name} ({MOE_ROUTING[name]:g}x)" if name in MOE_ROUTING else str(name)


def _imbalance(model: Any, value: float | str | None) -> float:
    """``Workload.moe_load_imbalance`` of a page's run: ``value`` (a number >= 1 or a
    :data:`~simcore.model.workload.MOE_ROUTING` name) for a mixture-of-experts model, 1 for
    a dense one whatever ``value`` is (a stale selector's, the selector hidden)."""
    from ..model.workload import moe_imbalance_value

    if getattr(model, "n_experts", 1) <= 1 or value is None:
        return 1.0
    try:
        return moe_imbalance_value(value)
    except ValueError as exc:
        raise SimcoreInputError(" ".join(str(exc).split())) from None


def _load(model: Any) -> Any:
    """A model given by name, catalogue id, config.json path or as a Model."""
    from ..model.presets import load_model

    try:
        return load_model(model)
    except (SimcoreInputError, ValueError, FileNotFoundError) as exc:
        raise SimcoreInputError(" ".join(str(exc).split())) from None


def design_family(design: str) -> str | None:
    """The family name of a Compare design (``H100-SXM:bw_hbm_gbs=6700`` -> ``H100-SXM``),
    None for one that does not parse."""
    from ..studies.compare import parse_design

    try:
        return parse_design(design)[1].name
    except (SimcoreInputError, ValueError):
        return None


def _space(model: Any, ep: str | int | None) -> Any:
    """The page's layout space: the reduced space, with ``ep`` (``auto`` / None: its own
    choices, ``all``, or one value) pinned; an ``ep`` on a dense model is refused."""
    from ..engine.space import NamedSpace
    from ..model.presets import load_model

    if ep is None or str(ep) == "auto":
        return "reduced"
    ep = str(ep).strip()
    model = load_model(model)  # a name, a catalogue id or a config.json path
    if model.n_experts <= 1 and ep != "1":
        raise SimcoreInputError(f"EP {ep}: model {model.name} is dense (no experts); expert "
                                "parallelism applies to mixture-of-experts models")
    if ep == "all":
        return NamedSpace("reduced", ep="all")
    try:
        return NamedSpace("reduced", ep=(int(ep),))
    except ValueError:
        raise SimcoreInputError(f"EP must be auto, all or a positive integer, got {ep!r}"
                                ) from None


#: help of the "decode replays CUDA graphs" boxes (the launch time is
#: ``kernels.inference.LAUNCH_NS``; tests/test_app.py keeps the two equal)
GRAPHS_HELP = ("as vLLM, SGLang and TensorRT-LLM serve: no kernel of a decode step pays the "
               "host's 5 us launch time (off: every kernel launched from the host)")


def _check_graphs(cuda_graphs: bool | None, mode: str) -> bool:
    """Whether the steps replay CUDA graphs: ``cuda_graphs``, or (None) the CLI's default,
    decode yes, prefill no."""
    from ..studies.assumptions import decode_graphs

    if cuda_graphs and mode != "decode":
        raise SimcoreInputError(f"only decode steps replay CUDA graphs; untick it for {mode}")
    return decode_graphs(mode) if cuda_graphs is None else bool(cuda_graphs)


def _budget(family: Any, gpus: int | None) -> Any:
    """The device budget: ``gpus``, or (None) the CLI's default, one node of a GPU family
    (the whole system for SiP)."""
    from ..studies.assumptions import Budget

    try:
        return Budget.resolve(family, None if gpus is None else int(gpus))
    except (SimcoreInputError, ValueError) as exc:
        raise SimcoreInputError(" ".join(str(exc).split())) from None


def assumptions(workload: Any, budget: str, model: Any = None) -> str:
    """The ``assumed:`` line of the CLI's headers for a page: ``budget`` in words, the
    workload's precision and runtime."""
    from ..studies.assumptions import assumed_line, precision_text, routing_text, runtime_text

    return assumed_line(budget, precision_text(workload, model), runtime_text(workload),
                        routing_text(workload, model))


def explore_assumptions(result: Any, *, family: str | None, gpus: int | None = None,
                        model: Any = None) -> str:
    """:func:`assumptions` of an Explore result run on ``family`` with ``gpus`` (None: the
    default budget, as :func:`run_explore`)."""
    return assumptions(result.workload, _budget(family, gpus).describe(None), model)


def compare_assumptions(result: Any, model: Any = None, *, gpus: int | None = None) -> str:
    """:func:`assumptions` of a Compare result run with ``gpus`` (None: the default budget
    of each design, as :func:`run_compare`)."""
    from ..studies.assumptions import budgets_text
    from ..studies.compare import parse_design

    budgets = [_budget(parse_design(d)[1], gpus) for d in result.designs]
    return assumptions(result.workload, budgets_text(result.designs, budgets, None), model)


def compile_note(command: str) -> str:
    """``"compiling kernels (once, ~15 s), then "`` when the kernels ``command`` runs first
    are not in the on-disk cache yet (a fresh install's first sweep), else ``""``: the
    pages prefix their progress and spinner texts with it."""
    from ..engine.core import FIRST_CALL_KERNELS, kernels_cached

    if kernels_cached(FIRST_CALL_KERNELS[command]):
        return ""
    return "compiling kernels (once, ~15 s), then "


def run_explore(model: Any, *, s_kv: int, mode: str = "decode", batch: int = 1,
                depth: Any = "two_stage", family: str | None = None,
                metric: str = "latency", cuda_graphs: bool | None = None,
                gpus: int | None = None, ep: str | int | None = None,
                progress: Callable[[float, str], Any] | None = None,
                moe_imbalance: float | str = 1.0) -> Any:
    """:func:`~simcore.studies.codesign.joint_explore` after checking the grid size, with
    the CLI's defaults: ``cuda_graphs`` None replays CUDA graphs in decode, ``gpus`` None
    is one node of a GPU family (the whole system for SiP), ``ep`` None (``auto``) the
    reduced space's expert-parallel degrees (:func:`ep_options`), ``moe_imbalance`` 1
    (balanced routing; ignored for a dense model)."""
    from ..model.presets import load_model
    from ..studies.codesign import joint_explore

    model = load_model(model)  # a name, a catalogue id or a config.json path
    graphs = _check_graphs(cuda_graphs, mode)
    budget = _budget(family, gpus)
    space = _space(model, ep)
    skew = _imbalance(model, moe_imbalance)
    try:
        n_hw, n_layouts = count_joint(depth=depth, mode=mode, family=family, space=space,
                                      gpus=budget.gpus, experts=model.n_experts)
    except (SimcoreInputError, ValueError, KeyError) as exc:
        raise SimcoreInputError(" ".join(str(exc).split())) from None
    total = n_hw * n_layouts
    if total > MAX_JOINT:
        raise SimcoreInputError(
            f"{n_hw} hardware x {n_layouts} layouts = {total:,} evaluations is too large for "
            f"the app (limit {MAX_JOINT:,}); run `simcore explore ... --store run.zarr "
            "--resume` from the CLI instead")
    if progress:
        progress(0.1, compile_note("explore")
                 + f"sweeping {n_hw} hardware x {n_layouts} layouts = {total:,}")
    try:
        r = joint_explore(model, s_kv=int(s_kv), mode=mode, batch=int(batch),
                          depth=_depth(depth), family=family, metric=metric,
                          cuda_graphs=graphs, space=space, moe_imbalance=skew,
                          **budget.kwargs())
    except (SimcoreInputError, ValueError) as exc:
        raise SimcoreInputError(" ".join(str(exc).split())) from None
    if progress:
        progress(1.0, f"done: {len(r.all_scores)} hardware candidates fit")
    return r


def point_labels(result: Any) -> list[str]:
    """One label per fitting point (index: cost, latency, layout)."""
    from ..studies.plot import layout_label

    return [f"#{i}: cost {s.cost_score:.2f}, {s.latency_ns / 1e6:.3g} ms, "
            f"{layout_label(s.layout)}" for i, s in enumerate(result.all_scores)]


def _knob_ratios(hw: Any, ref: Mapping[str, float]) -> dict[str, float]:
    """knob -> hw / ref for the knobs where they differ."""
    from ..model.specs import HW_KNOBS

    here = hw.as_dict()
    return {k: here[k] / ref[k] for k in HW_KNOBS
            if not math.isclose(here[k], ref[k], rel_tol=1e-9)}


def _frontier_steps(result: Any) -> dict[Any, str]:
    """Frontier hardware -> the knob(s) that changed from the previous frontier point
    (cheapest first; the first point says how it differs from the family's hardware)."""
    from ..model.presets import get_family

    front = sorted(result.pareto_scores, key=lambda s: (s.cost_score, s.latency_ns))
    steps: dict[Any, str] = {}
    prev = None
    width = len(str(len(front)))
    for i, s in enumerate(front, start=1):
        if prev is None:
            ratios = _knob_ratios(s.hardware, get_family(s.hardware.family).hardware.as_dict())
            steps[s.hardware] = ("start: family hardware" if not ratios else
                                 "start: " + ", ".join(f"{k} ×{v:.3g}"
                                                       for k, v in ratios.items()))
        else:
            ratios = _knob_ratios(s.hardware, prev.hardware.as_dict())
            steps[s.hardware] = ("same knobs" if not ratios else " + ".join(
                f"{k} {'up' if v > 1 else 'down'}" for k, v in ratios.items()))
        # numbered: the legend (sorted by vega) lists the steps in frontier order
        steps[s.hardware] = f"{i:0{width}d}. {steps[s.hardware]}"
        prev = s
    return steps


def explore_table(result: Any) -> list[dict[str, Any]]:
    """Rows of every fitting hardware point: hardware knobs, layout, times, ``changed``
    (knobs vs the family's hardware), ``pareto`` and ``frontier_step`` (the knob that
    changed from the previous frontier point, "off the frontier" elsewhere)."""
    from ..model.presets import get_family
    from ..studies.plot import layout_label

    steps = _frontier_steps(result)
    rows = []
    for s in result.all_scores:
        row = s.as_row()
        row["latency_ms"] = s.latency_ns / 1e6
        row["layout_label"] = layout_label(s.layout)
        ratios = _knob_ratios(s.hardware, get_family(s.hardware.family).hardware.as_dict())
        row["changed"] = (", ".join(f"{k} ×{v:.3g}" for k, v in ratios.items())
                          or "family hardware")
        row["pareto"] = s.hardware in steps
        row["frontier_step"] = steps.get(s.hardware, "off the frontier")
        rows.append(row)
    return rows


def explore_chart(rows: Sequence[Mapping[str, Any]]) -> Any:
    """The Explore page's interactive chart (altair): latency vs cost_score of every
    fitting hardware point, frontier points coloured by the knob that changed
    (:data:`FRONTIER_PALETTE`), the rest grey; hover shows hardware and layout."""
    import altair as alt
    import pandas as pd

    from ..model.specs import HW_KNOBS

    df = pd.DataFrame(list(rows))
    # sorted as vega sorts the union of the layers' domains, so colours match the legend
    steps = sorted({r["frontier_step"] for r in rows if r["pareto"]})
    domain = [*steps, "off the frontier"]
    colours = [FRONTIER_PALETTE[i % len(FRONTIER_PALETTE)] for i in range(len(steps))]
    base = alt.Chart(df).encode(
        x=alt.X("cost_score:Q", title="cost_score (Σ knob / family default; 6 = family "
                "hardware)", scale=alt.Scale(zero=False, padding=14)),
        y=alt.Y("latency_ms:Q", title="latency (ms)", scale=alt.Scale(zero=False, padding=14)),
        tooltip=[alt.Tooltip("layout_label:N", title="layout"),
                 alt.Tooltip("changed:N", title="vs family hardware"),
                 alt.Tooltip("frontier_step:N", title="frontier step"),
                 alt.Tooltip("latency_ms:Q", title="latency (ms)", format=".4g"),
                 alt.Tooltip("cost_score:Q", format=".3g"),
                 alt.Tooltip("n_devices:Q", title="devices"),
                 *[alt.Tooltip(f"{k}:Q") for k in HW_KNOBS if k in df]])
    colour = alt.Color("frontier_step:N", title="frontier: knob changed",
                       scale=alt.Scale(domain=domain, range=[*colours, OFF_FRONTIER_COLOUR]),
                       sort=domain, legend=alt.Legend(orient="right", labelLimit=320))
    off = base.transform_filter(alt.datum.pareto == False).mark_circle(  # noqa: E712
        size=50, opacity=1).encode(color=colour)
    front_df = df[df["pareto"]].sort_values("cost_score")
    line = alt.Chart(front_df).mark_line(interpolate="step-after", color="black",
                                         strokeWidth=1.5).encode(x="cost_score:Q",
                                                                 y="latency_ms:Q")
    on = base.transform_filter(alt.datum.pareto == True).mark_circle(  # noqa: E712
        size=140, opacity=1, stroke="black", strokeWidth=1).encode(color=colour)
    return (off + line + on).properties(height=320).interactive()


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
                max_ttft_ms: float | None = None, max_tpot_ms: float | None = None,
                attn_dp: str | int = "all", ep: str | int = "all",
                moe_imbalance: float | str = 1.0) -> Any:
    """The serving plan; ``attn_dp`` / ``ep``: ``"all"`` or one degree (a selector's
    value, :func:`serving_moe_options`); ``moe_imbalance``: a mixture-of-experts model's
    routing skew (:func:`routing_options`; a dense model ignores it)."""
    from ..studies import serving

    model = _load(model)
    lam = _imbalance(model, moe_imbalance)

    def one(v: str | int) -> str | int:
        return int(v) if str(v).strip().isdigit() else str(v)

    try:
        return serving.plan(model, family=family, gpus=int(gpus), isl=int(isl), osl=int(osl),
                            max_ttft_ms=max_ttft_ms or None, max_tpot_ms=max_tpot_ms or None,
                            attn_dp=one(attn_dp), ep=one(ep), moe_imbalance=lam)
    except (SimcoreInputError, ValueError) as exc:
        raise SimcoreInputError(" ".join(str(exc).split())) from None


#: help of the Serving page's attention-DP and EP selectors
SERVING_MOE_HELP = ("mixture-of-experts models: an instance's requests split over attention-DP "
                    "replicas and its experts over EP of its GPUs (EP = TP x attention DP: every "
                    "expert whole on one GPU); all searches every degree the budget allows, a "
                    "number pins it")


def serving_moe_options(model: Any, gpus: int) -> tuple[list[str], list[str]]:
    """The Serving page's attention-DP and EP choices for ``model`` on ``gpus``: none for
    a dense model; else ``all`` and each degree the planner would search."""
    from ..studies.serving.model import moe_choices

    if model is None or getattr(model, "n_experts", 1) <= 1:
        return [], []
    try:
        dps, eps = moe_choices(int(model.n_experts), int(gpus))
    except (SimcoreInputError, ValueError):
        return [], []
    return ["all", *map(str, dps)], ["all", *map(str, eps)]


def serving_table(result: Any) -> list[dict[str, Any]]:
    return [c.as_row() for c in result.best]


def design_choices() -> list[str]:
    """Families, then :data:`DESIGN_EXAMPLES` (a family with knob overrides)."""
    return family_choices() + list(DESIGN_EXAMPLES)


def parse_ints(text: str | int | Sequence[int], *, name: str) -> list[int]:
    """``"8192, 32768"`` -> ``[8192, 32768]``; anything else is one line naming ``name``."""
    parts: list[Any]
    if isinstance(text, str):
        parts = [t.strip() for t in text.replace(";", ",").split(",") if t.strip()]
    elif isinstance(text, int):
        parts = [text]  # True / False fail below: str(True) is not a number
    else:
        parts = list(text)
    try:
        vals = [int(str(t).replace("_", "")) for t in parts]
    except ValueError:
        vals = []
    if not vals or any(v < 1 for v in vals):
        raise SimcoreInputError(f"{name}: expected positive integers separated by commas "
                                f"(e.g. 8192,32768), got {text!r}")
    return sorted(set(vals))


def run_compare(model: Any, *, designs: Sequence[str], mode: str = "decode",
                over: str = "s_kv", values: str | Sequence[int] = "8192,32768,131072",
                fixed: int = 1, metric: str = "latency", cuda_graphs: bool | None = None,
                gpus: int | None = None, ep: str | int | None = None,
                moe_imbalance: float | str = 1.0) -> Any:
    """:func:`~simcore.studies.compare.compare` over one axis: ``over`` is ``"s_kv"`` (context,
    ``fixed`` = batch) or ``"batch"`` (``fixed`` = context), with the CLI's defaults:
    ``cuda_graphs`` None replays CUDA graphs in decode, ``gpus`` None gives every design
    one node (the whole system for SiP), ``ep`` None (``auto``) the reduced space's
    expert-parallel degrees, ``moe_imbalance`` 1 (balanced routing; a
    :data:`~simcore.model.workload.MOE_ROUTING` name or a number from 1 to 1024 for a
    mixture-of-experts model, which a dense model ignores)."""
    from ..model.specs import Workload
    from ..studies.compare import compare, parse_design

    graphs = _check_graphs(cuda_graphs, mode)
    designs = [d.strip() for d in designs if d and d.strip()]
    if len(designs) < 2:
        raise SimcoreInputError(f"select two or more designs to compare (the first is the "
                                f"baseline); got {len(designs)}"
                                + (f": {designs[0]}" if designs else ""))
    if over not in ("s_kv", "batch"):
        raise SimcoreInputError(f"compare over 's_kv' (context) or 'batch', got {over!r}")
    xs = parse_ints(values, name="context lengths" if over == "s_kv" else "batch sizes")
    n = len(designs) * len(xs)
    if n > MAX_COMPARE_POINTS:
        raise SimcoreInputError(f"{len(designs)} designs x {len(xs)} points = {n} is too many "
                                f"for the page (limit {MAX_COMPARE_POINTS}); run `simcore "
                                "compare` from the CLI")
    batch, s_kv = ([int(fixed)], xs) if over == "s_kv" else (xs, [int(fixed)])
    model = _load(model)
    lam = _imbalance(model, moe_imbalance)
    try:
        budgets = [_budget(parse_design(d)[1], gpus).gpus for d in designs]
        if lam != 1.0:  # as `simcore compare --moe-imbalance` builds it
            kw: dict[str, Any] = {"cuda_graphs": True} if graphs else {}
            workload: Any = Workload(mode, batch=1, s_kv=8192, moe_load_imbalance=lam, **kw)
        else:
            workload = Workload("decode", cuda_graphs=True) if graphs else mode
        return compare(designs, model, workload, batch=batch, s_kv=s_kv, metric=metric,
                       gpus=budgets, space=_space(model, ep))
    except (SimcoreInputError, ValueError) as exc:
        raise SimcoreInputError(" ".join(str(exc).split())) from None


def compare_table(result: Any) -> list[dict[str, Any]]:
    """One row per design and point: latency (ms), throughput, devices, the speed-up over
    the first design and the best layout ("does not fit" where none does)."""
    from ..studies.plot import layout_label

    rows = []
    for r in result.rows():
        fits = r["fits"]
        rows.append({
            "design": r["design"], "batch": r["batch"], "s_kv": r["s_kv"],
            "latency_ms": r["latency_ns"] / 1e6, "throughput_tok_s": r["throughput_tok_s"],
            "speedup_vs_first": r["speedup"], "n_devices": r["n_devices"],
            "best_layout": layout_label(r) if fits else "does not fit"})
    return rows


def speedup_summary(result: Any) -> list[str]:
    """One line per design after the first: its speed-up range over the first."""
    import numpy as np

    ds = result.dataset
    base = result.designs[0]
    out = []
    for d in result.designs[1:]:
        sp = ds.speedup.sel(design=d).values
        sp = sp[np.isfinite(sp)]
        if not sp.size:
            out.append(f"{d}: no point where it and {base} both fit")
            continue
        lo, hi = float(sp.min()), float(sp.max())
        rng = f"{lo:.2f}x" if math.isclose(lo, hi, rel_tol=5e-3) else f"{lo:.2f}x to {hi:.2f}x"
        word = " (faster)" if lo > 1 else (" (slower)" if hi < 1 else "")
        out.append(f"{d}: speed-up {rng} over {base}{word}")
    return out


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


def holdout_table(rows: Sequence[Any]) -> tuple[str, list[dict[str, Any]]]:
    """The held-out check as a one-line summary and one row per (framework, GPU, model,
    GEMM precision) group."""
    from ..validation import holdout_summary

    s = holdout_summary(rows)
    line = (f"{s['n']} served runs of aiconfigurator's silicon CSV, never fitted: mean "
            f"|error| {100 * s['mean_abs_error']:.1f}%, median {100 * s['median_abs_error']:.1f}%, "
            f"{100 * s['within_10']:.0f}% within 10%, {100 * s['within_25']:.0f}% within 25%")
    table = [{"backend": b, "hardware": hw, "model": m, "GEMMs": prec, "rows": n,
              "mean_abs_error_pct": 100 * err, "mean_signed_error_pct": 100 * signed}
             for (b, hw, m, prec), (err, signed, n) in s["groups"].items()]
    return line, table


def load_deepspeed_config(upload: bytes | str) -> dict[str, Any]:
    try:
        cfg = json.loads(upload)
    except (ValueError, UnicodeDecodeError) as exc:
        raise SimcoreInputError(f"the uploaded file is not JSON ({exc}); upload a DeepSpeed "
                                "config (ds_config.json)") from None
    if not isinstance(cfg, dict):
        raise SimcoreInputError("the uploaded JSON is not an object; upload a DeepSpeed config")
    return cfg


def autotune_job(cfg: Mapping[str, Any], *, model: Any = None, family: str | None = None,
                 n_gpus: int | None = None, seq_len: int | None = None,
                 precision: str | None = None) -> tuple[Any, str]:
    """The simulated autotuner of a DeepSpeed config and its header line, built as
    ``simcore tune --model M --family F --gpus N --config ds.json`` builds them.

    The same defaults (:data:`simcore.autotune.training.TUNE_DEFAULTS`: Llama 2 7B,
    A100-80G, 8 GPUs, sequence 2048) and the same precision rule
    (:func:`~simcore.autotune.training.settle_precision`: the config's ``fp16`` /
    ``bf16``, else fp16), so the page and the command give the same numbers for one
    job; the header (:meth:`~simcore.autotune.Autotuner.describe`) says the precision
    and why.
    """
    from ..autotune import Autotuner, SimulatorRunner
    from ..autotune.training import TUNE_DEFAULTS, settle_precision

    try:
        settled, note = settle_precision(cfg, precision)
        runner = SimulatorRunner(
            TUNE_DEFAULTS.model if model is None else model,
            family=TUNE_DEFAULTS.family if family is None else family,
            n_gpus=TUNE_DEFAULTS.n_gpus if n_gpus is None else int(n_gpus),
            seq_len=TUNE_DEFAULTS.seq_len if seq_len is None else int(seq_len))
        tuner = Autotuner(settled, runner)
    except (SimcoreInputError, ValueError, TypeError, KeyError) as exc:
        raise SimcoreInputError(" ".join(str(exc).split()) or type(exc).__name__) from None
    return tuner, tuner.describe(note)


def run_autotune(cfg: Mapping[str, Any], *, model: Any = None, family: str | None = None,
                 n_gpus: int | None = None, seq_len: int | None = None,
                 precision: str | None = None) -> Any:
    """Tune ``cfg`` on the simulator (:func:`autotune_job`: ``simcore tune``'s defaults
    and precision rule); the :class:`~simcore.autotune.TuneResult`."""
    tuner, _ = autotune_job(cfg, model=model, family=family, n_gpus=n_gpus,
                            seq_len=seq_len, precision=precision)
    return tune(tuner)


def tune(tuner: Any) -> Any:
    """``tuner.tune()``, its input errors as one-line :class:`SimcoreInputError`."""
    try:
        return tuner.tune()
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
    from ..engine.metrics import get_metric

    sign = get_metric(result.metric).sign  # +1: smaller is better
    rows.sort(key=lambda r: (r[result.metric] is None,
                             sign * r[result.metric] if r[result.metric] is not None
                             else math.inf))
    return rows
