"""The simcore Streamlit app: ``simcore app`` (or ``streamlit run simcore/app/main.py``).

Pages (tabs): Explore, Serving, Compare, Autotune, Validation. The query parameter
``?page=compare`` opens a page; ``&demo=1`` also runs that page's default inputs on load
(the browser test and the screenshots use them). Every user mistake is shown as one
``st.error`` line.
"""

from __future__ import annotations

import json
from typing import Any

import streamlit as st

from simcore.app import logic as L
from simcore.errors import SimcoreInputError

PAGES = L.PAGES

# less empty space above the title, so a 1000 px tall window shows the first chart
_CSS = "<style>[data-testid='stMainBlockContainer'] {padding-top: 2rem;}</style>"


def _fail(exc: Exception) -> None:
    st.error(" ".join(str(exc).split()) if isinstance(exc, SimcoreInputError)
             else f"internal error (a bug, please report): {type(exc).__name__}: {exc}")


def _show(fig: Any, where: Any = st, width: int | str = "stretch") -> None:
    """st.pyplot, then close the figure (pyplot keeps every open figure alive)."""
    import matplotlib.pyplot as plt

    where.pyplot(fig, width=width)
    plt.close(fig)


@st.cache_data(show_spinner="predicting the published measurements")
def _validation(kinds: tuple[str, ...]) -> list[Any]:
    return L.run_validation(kinds)


@st.cache_data(show_spinner="predicting the held-out serving runs")
def _holdout() -> list[Any]:
    from simcore.validation import holdout_rows

    return holdout_rows()


def _model_inputs(key: str, default: str = "Llama 3.1 8B", *,
                  where: Any = None) -> tuple[str | None, bytes | None]:
    """The model selectbox and the config.json uploader: side by side, or (``where``, a
    column) the selectbox there and the uploader in an expander below the row."""
    choices = L.model_choices()
    if where is None:
        where, box = st.columns([2, 3])
    else:
        box = None
    name = where.selectbox("model (preset or catalogue id)", choices,
                           index=choices.index(default) if default in choices else 0,
                           key=f"{key}_model")
    label = "or upload a HuggingFace config.json"
    up = (box.file_uploader(label, type=["json"], key=f"{key}_upload") if box is not None
          else None)
    if box is None:
        with st.expander(label):
            up = st.file_uploader(label, type=["json"], key=f"{key}_upload",
                                  label_visibility="collapsed")
    # session_state "<key>_upload_bytes" stands in for an upload (AppTest has no uploader)
    return name, (up.getvalue() if up is not None
                  else st.session_state.get(f"{key}_upload_bytes"))


def _ep_input(key: str, name: str | None, upload: bytes | None, *, where: Any = st,
              family: str | None = None) -> str | None:
    """The expert-parallelism selector, for a mixture-of-experts model only (None for a
    dense one, or a model that does not load yet: Run reports that)."""
    try:
        model = L.load_model_input(name, upload)
        opts = L.ep_options(model, family=family)
    except Exception:  # noqa: BLE001 - the run button shows the error
        return None
    if not opts:
        return None
    return where.selectbox("expert parallelism (EP)", opts, key=f"{key}_ep", help=L.EP_HELP)


def _routing_input(key: str, name: str | None, upload: bytes | None, *,
                   where: Any = st) -> float:
    """The MoE routing selector (``balanced``, ``eplb``, ``no-eplb`` with their values),
    for a mixture-of-experts model only: its ``Workload.moe_load_imbalance``, 1 for a
    dense model or one that does not load yet (Run reports that)."""
    try:
        opts = L.routing_options(L.load_model_input(name, upload))
    except Exception:  # noqa: BLE001 - the run button shows the error
        return 1.0
    if not opts:
        return 1.0
    from simcore.model.workload import MOE_ROUTING

    pick = where.selectbox("MoE routing", opts, key=f"{key}_routing",
                           format_func=L.routing_label, help=L.ROUTING_HELP)
    return MOE_ROUTING.get(str(pick), 1.0)


def page_explore(demo: bool) -> None:
    st.header("Explore: hardware x parallel layout co-design")
    name, upload = _model_inputs("explore")
    fams = L.family_choices()
    c1, c2, c3, c4, c5, c6 = st.columns(6)
    family = c1.selectbox("hardware family", fams, index=fams.index("SiP") if "SiP" in fams
                          else 0, key="explore_family")
    depth = c2.selectbox("depth", ["two_stage", "balanced", "coarse", "2", "3", "4"],
                         index=1 if demo else 0, key="explore_depth",
                         help="two_stage = 1 candidate, balanced = 64, coarse = 729, n = n^6")
    mode = c3.selectbox("mode", ["decode", "prefill"], key="explore_mode")
    metric = c4.selectbox("metric", ["latency", "throughput"], key="explore_metric")
    batch = c5.number_input("batch", min_value=1, value=1, step=1, key="explore_batch")
    s_kv = c6.number_input("context s_kv (tokens)", min_value=1, value=8192, step=1024,
                           key="explore_skv")
    graphs = st.checkbox("decode replays CUDA graphs", value=True, key="explore_graphs",
                         help=L.GRAPHS_HELP, disabled=mode != "decode")
    ep = _ep_input("explore", name, upload, family=family)
    moe_imbalance = _routing_input("explore", name, upload)
    if st.button("Run sweep", key="explore_run", type="primary") or (
            demo and "explore_result" not in st.session_state):
        bar = st.progress(0.0, text="preparing")
        try:
            model = L.load_model_input(name, upload)
            st.session_state["explore_result"] = r = L.run_explore(
                model, s_kv=int(s_kv), mode=mode, batch=int(batch), depth=depth,
                family=family, metric=metric, cuda_graphs=graphs if mode == "decode" else None,
                ep=ep, progress=lambda f, t: bar.progress(f, text=t),
                moe_imbalance=moe_imbalance)
            st.session_state["explore_assumed"] = L.explore_assumptions(r, family=family,
                                                                        model=model)
        except Exception as exc:  # noqa: BLE001 - shown as one line
            st.session_state.pop("explore_result", None)
            _fail(exc)
            return
        finally:
            bar.empty()
    r = st.session_state.get("explore_result")
    if r is None:
        st.info("Pick inputs and press Run sweep.")
        return
    from simcore.studies.plot import plot_breakdown, plot_pareto, plot_sensitivity

    st.subheader(f"Pareto frontier: {r.model} {r.workload.mode} s_kv={r.workload.s_kv}")
    st.caption(f"{r.n_hardware} hardware x {r.n_layouts} layouts = {r.total_joint:,} joint "
               f"evaluations; {len(r.all_scores)} fit (each at its best layout), "
               f"{len(r.pareto_scores)} on the frontier; hover a point for its hardware "
               "and layout")
    st.caption(st.session_state.get("explore_assumed", ""))
    if r.empty:
        st.warning(r.message or "nothing fits")
        return
    rows = L.explore_table(r)
    import pandas as pd

    df = pd.DataFrame(rows)
    st.altair_chart(L.explore_chart(rows), width="stretch")
    c1, c2 = st.columns(2)
    _show(plot_pareto(r), c1)
    _show(plot_sensitivity(r), c2)
    labels = L.point_labels(r)
    pick = st.selectbox("latency breakdown of point", range(len(labels)),
                        format_func=lambda i: labels[i], key="explore_point")
    b1, _ = st.columns([3, 2])
    _show(plot_breakdown(r.all_scores[int(pick)]), b1)
    front = sorted(r.pareto_scores, key=lambda s: s.cost_score)[:L.MAX_BREAKDOWN_BARS]
    if len(front) > 1:
        st.subheader("where the time goes along the Pareto frontier")
        _show(plot_breakdown({f"cost {s.cost_score:.2f}": s for s in front},
                             title=f"the {len(front)} cheapest frontier points"))
    st.dataframe(df, hide_index=True)
    d1, d2 = st.columns(2)
    d1.download_button("download CSV", L.table_csv(rows), "explore.csv", "text/csv",
                       key="explore_csv")
    try:
        d2.download_button("download netCDF", L.dataset_netcdf(r.dataset), "explore.nc",
                           "application/x-netcdf", key="explore_nc")
    except Exception as exc:  # noqa: BLE001
        d2.warning(f"netCDF not available: {exc}")


def _serving_moe_inputs(name: str | None, upload: bytes | None,
                        gpus: int) -> tuple[str, str, float]:
    """The Serving page's attention-DP, EP and MoE routing selectors, for a
    mixture-of-experts model only (``all``, ``all``, 1 otherwise)."""
    try:
        dps, eps = L.serving_moe_options(L.load_model_input(name, upload), gpus)
    except Exception:  # noqa: BLE001 - the Plan button shows the error
        return "all", "all", 1.0
    if not dps:
        return "all", "all", 1.0
    c1, c2, c3 = st.columns(3)
    return (c1.selectbox("attention DP", dps, key="serving_attn_dp", help=L.SERVING_MOE_HELP),
            c2.selectbox("expert parallelism (EP)", eps, key="serving_ep",
                         help=L.SERVING_MOE_HELP),
            _routing_input("serving", name, upload, where=c3))


def page_serving(demo: bool = False) -> None:
    st.header("Serving: aggregated vs disaggregated deployments")
    name, upload = _model_inputs("serving")
    fams = L.family_choices()
    c1, c2, c3, c4, c5, c6 = st.columns(6)
    family = c1.selectbox("hardware family", fams,
                          index=fams.index("H200") if "H200" in fams else 0, key="serving_family")
    gpus = c2.number_input("GPU budget", min_value=1, value=8, key="serving_gpus")
    isl = c3.number_input("ISL (input tokens)", min_value=1, value=1024, key="serving_isl")
    osl = c4.number_input("OSL (output tokens)", min_value=1, value=256, key="serving_osl")
    ttft = c5.number_input("max TTFT (ms, 0 = none)", min_value=0.0, value=0.0,
                           key="serving_ttft")
    tpot = c6.number_input("max TPOT (ms, 0 = none)", min_value=0.0, value=0.0,
                           key="serving_tpot")
    attn_dp, ep, moe_imbalance = _serving_moe_inputs(name, upload, int(gpus))
    if st.button("Plan", key="serving_run", type="primary") or (
            demo and "serving_result" not in st.session_state):
        try:
            model = L.load_model_input(name, upload)
            with st.spinner(L.compile_note("serving") + "planning"):
                st.session_state["serving_result"] = L.run_serving(
                    model, family=family, gpus=int(gpus), isl=int(isl), osl=int(osl),
                    max_ttft_ms=float(ttft) or None, max_tpot_ms=float(tpot) or None,
                    attn_dp=attn_dp, ep=ep, moe_imbalance=moe_imbalance)
        except Exception as exc:  # noqa: BLE001
            st.session_state.pop("serving_result", None)
            _fail(exc)
            return
    res = st.session_state.get("serving_result")
    if res is None:
        return
    from simcore.studies.serving import assumptions_line, plot_frontier

    st.subheader("tokens/s per GPU vs tokens/s per user")
    st.caption(assumptions_line(res))
    _show(plot_frontier(res), width=760)
    rows = L.serving_table(res)
    if rows:
        st.dataframe(rows, hide_index=True)
    else:
        st.warning("no configuration meets the budget and limits")


def page_compare(demo: bool = False) -> None:
    st.header("Compare: hardware designs side by side")
    from simcore.model.specs import HW_KNOBS

    c0, c1, c2, c3, c4 = st.columns([2, 1, 1, 2, 1])
    mode = c1.selectbox("mode", ["decode", "prefill"], key="compare_mode")
    over = c2.selectbox("over", ["s_kv", "batch"], key="compare_over",
                        format_func=lambda o: "context s_kv" if o == "s_kv" else "batch")
    if over == "s_kv":
        values = c3.text_input("context lengths s_kv (tokens, comma separated)",
                               "8192,32768,131072", key="compare_values_s_kv")
        fixed = c4.number_input("batch", min_value=1, value=1, key="compare_fixed_batch")
    else:
        values = c3.text_input("batch sizes (comma separated)", "1,8,32,128",
                               key="compare_values_batch")
        fixed = c4.number_input("context s_kv (tokens)", min_value=1, value=8192, step=1024,
                                key="compare_fixed_s_kv")
    designs = st.multiselect(
        "designs (the first is the baseline; type FAMILY:knob=value,... for your own)",
        L.design_choices(), default=["H100-SXM", "H200", L.DESIGN_EXAMPLES[0]],
        accept_new_options=True, key="compare_designs",
        help="a hardware family, or a family with knob overrides, e.g. "
             f"H100-SXM:bw_hbm_gbs=6700,pe_hbm_gb=141; knobs: {', '.join(HW_KNOBS)}")
    name, upload = _model_inputs("compare", default="Llama 3.1 70B", where=c0)
    graphs = st.checkbox("decode replays CUDA graphs", value=True, key="compare_graphs",
                         help=L.GRAPHS_HELP, disabled=mode != "decode")
    ep = _ep_input("compare", name, upload,
                   family=L.design_family(designs[0]) if designs else None)
    moe_imbalance = _routing_input("compare", name, upload)
    if st.button("Compare", key="compare_run", type="primary") or (
            demo and "compare_result" not in st.session_state):
        try:
            model = L.load_model_input(name, upload)
            with st.spinner(L.compile_note("compare") + "finding the best layout of each design at each point"):
                st.session_state["compare_result"] = r = L.run_compare(
                    model, designs=designs, mode=mode, over=over, values=values,
                    fixed=int(fixed), cuda_graphs=graphs if mode == "decode" else None,
                    ep=ep, moe_imbalance=moe_imbalance)
                st.session_state["compare_assumed"] = L.compare_assumptions(r, model)
        except Exception as exc:  # noqa: BLE001 - shown as one line
            st.session_state.pop("compare_result", None)
            _fail(exc)
            return
    r = st.session_state.get("compare_result")
    if r is None:
        st.info("Pick two or more designs and press Compare.")
        return
    from simcore.studies.plot import plot_compare

    st.subheader(f"{r.model} {r.mode}: {len(r.designs)} designs, best layout at each point")
    st.caption("; ".join(L.speedup_summary(r)))
    st.caption(st.session_state.get("compare_assumed", ""))
    _show(plot_compare(r, speedup=True))
    rows = L.compare_table(r)
    num = st.column_config.NumberColumn
    st.dataframe(rows, hide_index=True, column_config={
        "s_kv": num("s_kv (tokens)", format="%d"),
        "latency_ms": num("latency (ms)", format="%.3f"),
        "throughput_tok_s": num("throughput (tokens/s)", format="%.1f"),
        "speedup_vs_first": num(f"speed-up over {r.designs[0]}", format="%.2fx"),
        "n_devices": num("devices", format="%d"), "best_layout": "best layout"})
    st.download_button("download CSV", L.table_csv(rows), "compare.csv", "text/csv",
                       key="compare_csv")


def page_validation() -> None:
    st.header("Validation: predicted vs published measurements")
    kinds = st.multiselect("kinds", ["train", "prefill", "decode"],
                           default=["train", "prefill", "decode"], key="val_kinds")
    try:
        rows = _validation(tuple(kinds))
    except Exception as exc:  # noqa: BLE001
        _fail(exc)
        return
    from simcore.studies.plot import plot_parity

    n_fit = sum(1 for r in rows if r.fits)
    st.caption(f"{len(rows)} published measurements; {n_fit} on a layout that fits the "
               "modelled memory are plotted, the rest are in the table (fits = false)")
    c1, c2 = st.columns([3, 2])
    _show(plot_parity(rows), c1)
    c2.subheader("per-source breakdown (mean |error|)")
    c2.dataframe(L.breakdown_table(rows), hide_index=True, height=520,
                 column_order=["group", "mean_abs_error_pct", "n", "name"], column_config={
                     "mean_abs_error_pct": st.column_config.NumberColumn(
                         "mean |error| (%)", format="%.1f")})
    st.subheader("predicted vs measured")
    st.dataframe(L.validation_table(rows), hide_index=True, column_config={
        "error_pct": st.column_config.NumberColumn("error (%)", format="%+.1f"),
        "measured": st.column_config.NumberColumn(format="%.4g"),
        "predicted": st.column_config.NumberColumn(format="%.4g")})
    from simcore.studies.plot import plot_holdout

    st.subheader("held out, never fitted: served runs measured on H100 / H200")
    hold = _holdout()
    line, groups = L.holdout_table(hold)
    st.caption(line + " (simcore.validation.holdout)")
    _show(plot_holdout(hold))
    st.dataframe(groups, hide_index=True, column_config={
        "mean_abs_error_pct": st.column_config.NumberColumn("mean |error| (%)", format="%.1f"),
        "mean_signed_error_pct": st.column_config.NumberColumn("mean signed error (%)",
                                                               format="%+.1f")})


def page_autotune(demo: bool = False) -> None:
    st.header("Autotune: simulated DeepSpeed autotuning (no GPUs)")
    up = st.file_uploader("DeepSpeed config JSON", type=["json"], key="tune_upload")
    c1, c2, c3 = st.columns(3)
    default = L.tune_defaults()  # simcore tune's, so the two agree on one job
    choices = L.model_choices()
    model = c1.selectbox("model", choices, index=choices.index(default.model)
                         if default.model in choices else 0, key="tune_model")
    fams = L.family_choices()
    family = c2.selectbox("GPU family", fams, index=fams.index(default.family)
                          if default.family in fams else 0, key="tune_family")
    n_gpus = c3.number_input("GPUs", min_value=1, value=default.n_gpus, key="tune_gpus")
    example = json.dumps(L.EXAMPLE_DEEPSPEED_CONFIG)
    upload = (up.getvalue() if up is not None
              else st.session_state.get("tune_upload_bytes", example.encode() if demo else None))
    if upload is None:
        st.info(f"Upload a ds_config.json, e.g. {example}")
        return
    try:
        cfg = L.load_deepspeed_config(upload)
        tuner, header = L.autotune_job(cfg, model=model, family=family, n_gpus=int(n_gpus))
        st.caption(header)
        with st.spinner(L.compile_note("tune") + "tuning on the simulator"):
            res = L.tune(tuner)
    except Exception as exc:  # noqa: BLE001
        _fail(exc)
        return
    st.subheader("ranked trials")
    unit = L.DEEPSPEED_METRIC_UNITS.get(res.metric)
    st.dataframe(L.trials_table(res), hide_index=True, column_config={
        res.metric: st.column_config.NumberColumn(f"{res.metric} ({unit})" if unit
                                                  else res.metric, format="%.4g")})
    if any(t.ok for t in res.trials):
        from simcore.studies.plot import plot_tuning

        st.subheader("metric vs micro-batch per ZeRO stage")
        _show(plot_tuning(res))
    st.subheader("chosen config")
    if res.best_config is None:
        st.warning("no trial succeeded")
    else:
        st.code(json.dumps(res.best_config, indent=2), language="json")


def main() -> None:
    st.set_page_config(page_title="simcore", layout="wide")
    st.markdown("**simcore** · co-design of LLM hardware and parallel layouts")
    st.markdown(_CSS, unsafe_allow_html=True)
    qp = st.query_params
    page = str(qp.get("page", "explore")).lower()
    demo = str(qp.get("demo", "0")) == "1"
    shown = next((p for p in PAGES if p.lower() == page), PAGES[0])
    tabs = dict(zip(PAGES, st.tabs(PAGES, default=shown), strict=True))
    with tabs["Explore"]:
        page_explore(demo and shown == "Explore")
    with tabs["Serving"]:
        page_serving(demo and shown == "Serving")
    with tabs["Compare"]:
        page_compare(demo and shown == "Compare")
    with tabs["Autotune"]:
        page_autotune(demo and shown == "Autotune")
    with tabs["Validation"]:
        page_validation()
    st.divider()
    st.caption(L.footer())  # last: the browser test waits for it


if __name__ == "__main__":  # streamlit runs the script as __main__; importing it is inert
    main()
