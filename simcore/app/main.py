"""The simcore Streamlit app: ``simcore app`` (or ``streamlit run simcore/app/main.py``).

Pages (tabs): Explore, Serving, Validation, Autotune. The query parameters
``?page=explore&demo=1`` open a page and run a small default sweep on load (the browser
test uses them). Every user mistake is shown as one ``st.error`` line.
"""

from __future__ import annotations

import json

import streamlit as st

from simcore.app import logic as L
from simcore.errors import SimcoreInputError

PAGES = ("Explore", "Serving", "Validation", "Autotune")


def _fail(exc: Exception) -> None:
    st.error(" ".join(str(exc).split()) if isinstance(exc, SimcoreInputError)
             else f"internal error (a bug, please report): {type(exc).__name__}: {exc}")


def _model_inputs(key: str, default: str = "Llama 3.1 8B") -> tuple[str | None, bytes | None]:
    choices = L.model_choices()
    name = st.selectbox("model (preset or catalogue id)", choices,
                        index=choices.index(default) if default in choices else 0,
                        key=f"{key}_model")
    up = st.file_uploader("or upload a HuggingFace config.json", type=["json"],
                          key=f"{key}_upload")
    # session_state "<key>_upload_bytes" stands in for an upload (AppTest has no uploader)
    return name, (up.getvalue() if up is not None
                  else st.session_state.get(f"{key}_upload_bytes"))


def page_explore(demo: bool) -> None:
    st.header("Explore: hardware x parallel layout co-design")
    name, upload = _model_inputs("explore")
    fams = L.family_choices()
    c1, c2, c3, c4 = st.columns(4)
    family = c1.selectbox("hardware family", fams, index=fams.index("SiP") if "SiP" in fams
                          else 0, key="explore_family")
    depth = c2.selectbox("depth", ["two_stage", "balanced", "coarse", "2", "3", "4"],
                         index=1 if demo else 0, key="explore_depth",
                         help="two_stage = 1 candidate, balanced = 64, coarse = 729, n = n^6")
    mode = c3.selectbox("mode", ["decode", "prefill"], key="explore_mode")
    metric = c4.selectbox("metric", ["latency", "throughput"], key="explore_metric")
    c5, c6 = st.columns(2)
    batch = c5.number_input("batch", min_value=1, value=1, step=1, key="explore_batch")
    s_kv = c6.number_input("context s_kv (tokens)", min_value=1, value=8192, step=1024,
                           key="explore_skv")
    if st.button("Run sweep", key="explore_run", type="primary") or (
            demo and "explore_result" not in st.session_state):
        bar = st.progress(0.0, text="preparing")
        try:
            model = L.load_model_input(name, upload)
            st.session_state["explore_result"] = L.run_explore(
                model, s_kv=int(s_kv), mode=mode, batch=int(batch), depth=depth,
                family=family, metric=metric,
                progress=lambda f, t: bar.progress(f, text=t))
        except Exception as exc:  # noqa: BLE001 - shown as one line
            bar.empty()
            st.session_state.pop("explore_result", None)
            _fail(exc)
            return
    r = st.session_state.get("explore_result")
    if r is None:
        st.info("Pick inputs and press Run sweep.")
        return
    from simcore.plot import plot_breakdown, plot_pareto, plot_sensitivity

    st.subheader(f"Pareto frontier: {r.model} {r.workload.mode} s_kv={r.workload.s_kv}")
    st.caption(f"{r.n_hardware} hardware x {r.n_layouts} layouts = {r.total_joint:,} joint "
               f"evaluations; {len(r.all_scores)} fit, {len(r.pareto_scores)} on the frontier")
    if r.empty:
        st.warning(r.message or "nothing fits")
        return
    rows = L.explore_table(r)
    import altair as alt
    import pandas as pd

    df = pd.DataFrame(rows)
    hw_cols = [c for c in ("pe_flops", "pe_hbm_gb", "bw_hbm_gbs") if c in df]
    chart = alt.Chart(df).mark_circle(size=60).encode(
        x=alt.X("cost_score", title="cost_score (Σ knob / default)",
                scale=alt.Scale(zero=False)),
        y=alt.Y("latency_ms", title="latency (ms)", scale=alt.Scale(zero=False)),
        color=alt.Color("pareto:N", title="on Pareto frontier"),
        tooltip=["layout_label", "cost_score", "latency_ms", *hw_cols,
                 *[c for c in df.columns if c.startswith(("bw_", "pe_", "n_"))
                   and c not in hw_cols]],
    ).interactive()
    st.altair_chart(chart)
    c1, c2 = st.columns(2)
    c1.pyplot(plot_pareto(r))
    c2.pyplot(plot_sensitivity(r))
    labels = L.point_labels(r)
    pick = st.selectbox("latency breakdown of point", range(len(labels)),
                        format_func=lambda i: labels[i], key="explore_point")
    st.pyplot(plot_breakdown(r.all_scores[int(pick)]))
    st.dataframe(df)
    d1, d2 = st.columns(2)
    d1.download_button("download CSV", L.table_csv(rows), "explore.csv", "text/csv")
    try:
        d2.download_button("download netCDF", L.dataset_netcdf(r.dataset), "explore.nc",
                           "application/x-netcdf")
    except Exception as exc:  # noqa: BLE001
        d2.warning(f"netCDF not available: {exc}")


def page_serving() -> None:
    st.header("Serving: aggregated vs disaggregated deployments")
    name, upload = _model_inputs("serving")
    fams = L.family_choices()
    c1, c2, c3 = st.columns(3)
    family = c1.selectbox("hardware family", fams,
                          index=fams.index("H200") if "H200" in fams else 0, key="serving_family")
    gpus = c2.number_input("GPU budget", min_value=1, value=8, key="serving_gpus")
    isl = c3.number_input("ISL (input tokens)", min_value=1, value=1024, key="serving_isl")
    c4, c5, c6 = st.columns(3)
    osl = c4.number_input("OSL (output tokens)", min_value=1, value=256, key="serving_osl")
    ttft = c5.number_input("max TTFT (ms, 0 = none)", min_value=0.0, value=0.0,
                           key="serving_ttft")
    tpot = c6.number_input("max TPOT (ms, 0 = none)", min_value=0.0, value=0.0,
                           key="serving_tpot")
    if st.button("Plan", key="serving_run", type="primary"):
        try:
            model = L.load_model_input(name, upload)
            with st.spinner("planning"):
                st.session_state["serving_result"] = L.run_serving(
                    model, family=family, gpus=int(gpus), isl=int(isl), osl=int(osl),
                    max_ttft_ms=float(ttft) or None, max_tpot_ms=float(tpot) or None)
        except Exception as exc:  # noqa: BLE001
            st.session_state.pop("serving_result", None)
            _fail(exc)
            return
    res = st.session_state.get("serving_result")
    if res is None:
        return
    from simcore.serving import plot_frontier

    st.pyplot(plot_frontier(res))
    rows = L.serving_table(res)
    if rows:
        st.dataframe(rows)
    else:
        st.warning("no configuration meets the budget and limits")


def page_validation() -> None:
    st.header("Validation: predicted vs published measurements")
    kinds = st.multiselect("kinds", ["train", "prefill", "decode"],
                           default=["train", "prefill", "decode"], key="val_kinds")
    try:
        rows = L.run_validation(kinds)
    except Exception as exc:  # noqa: BLE001
        _fail(exc)
        return
    from simcore.plot import plot_parity

    st.pyplot(plot_parity(rows))
    st.subheader("per-source breakdown (mean |error|)")
    st.dataframe(L.breakdown_table(rows))
    st.subheader("predicted vs measured")
    st.dataframe(L.validation_table(rows))


def page_autotune() -> None:
    st.header("Autotune: simulated DeepSpeed autotuning (no GPUs)")
    up = st.file_uploader("DeepSpeed config JSON", type=["json"], key="tune_upload")
    c1, c2, c3 = st.columns(3)
    choices = L.model_choices()
    model = c1.selectbox("model", choices, index=choices.index("Llama 2 7B")
                         if "Llama 2 7B" in choices else 0, key="tune_model")
    fams = L.family_choices()
    family = c2.selectbox("GPU family", fams, index=fams.index("A100-80G")
                          if "A100-80G" in fams else 0, key="tune_family")
    n_gpus = c3.number_input("GPUs", min_value=1, value=8, key="tune_gpus")
    if up is None:
        st.info('Upload a ds_config.json, e.g. {"train_micro_batch_size_per_gpu": "auto", '
                '"zero_optimization": {"stage": "all"}, "autotuning": {"enabled": true}}')
        return
    try:
        cfg = L.load_deepspeed_config(up.getvalue())
        with st.spinner("tuning on the simulator"):
            res = L.run_autotune(cfg, model=model, family=family, n_gpus=int(n_gpus))
    except Exception as exc:  # noqa: BLE001
        _fail(exc)
        return
    st.subheader("ranked trials")
    st.dataframe(L.trials_table(res))
    st.subheader("chosen config")
    if res.best_config is None:
        st.warning("no trial succeeded")
    else:
        st.code(json.dumps(res.best_config, indent=2), language="json")


def main() -> None:
    st.set_page_config(page_title="simcore", layout="wide")
    st.title("simcore")
    qp = st.query_params
    page = str(qp.get("page", "explore")).lower()
    demo = str(qp.get("demo", "0")) == "1"
    order = [p for p in PAGES if p.lower() == page] + [p for p in PAGES if p.lower() != page]
    tabs = dict(zip(order, st.tabs(order), strict=True))
    with tabs["Explore"]:
        page_explore(demo)
    with tabs["Serving"]:
        page_serving()
    with tabs["Validation"]:
        page_validation()
    with tabs["Autotune"]:
        page_autotune()


if __name__ == "__main__":  # streamlit runs the script as __main__; importing it is inert
    main()
