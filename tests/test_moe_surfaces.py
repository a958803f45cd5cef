"""Expert parallelism in every surface (issue 33 item 1): the named spaces search ``ep``
for mixture-of-experts models, ``--ep`` pins or lists it, rows carry it."""

import csv
import io
import json

import pytest

from simcore.app import logic as L
from simcore.cli import main
from simcore.cli.output import EP_COLUMN, LAYOUT_COLUMNS, render_rows
from simcore.engine.core import prepare
from simcore.engine.space import (
    MAX_EP,
    NamedSpace,
    ep_choices,
    expert_sizes,
    get_space,
)
from simcore.errors import SimcoreInputError
from simcore.model.presets import get_model
from simcore.model.specs import Workload

V3 = "deepseek-ai/DeepSeek-V3"
MIXTRAL = "mistralai/Mixtral-8x7B-v0.1"
DENSE = "Llama 3.1 8B"
#: DeepSeek-V3 decode at batch 256 on 16 H200 (the issue's target)
V3_16 = ["--model", V3, "--family", "H200", "--gpus", "16", "--batch", "256",
         "--s-kv", "4096"]


def _one_error_line(err: str, command: str) -> str:
    lines = [ln for ln in err.strip().splitlines() if not ln.startswith("simcore: compiling")]
    assert len(lines) == 1, err
    assert lines[0].startswith(f"simcore {command}: error: "), err
    return lines[0]


# -- the space ---------------------------------------------------------------------------

def test_expert_sizes__powers_of_two_dividing_the_experts_up_to_the_budget():
    assert expert_sizes(256, 16) == (1, 2, 4, 8, 16)
    assert expert_sizes(256, 8) == (1, 2, 4, 8)
    assert expert_sizes(8, 64) == (1, 2, 4, 8)  # never more ranks than experts
    assert expert_sizes(128) == tuple(2 ** i for i in range(7)) and MAX_EP == 64
    assert expert_sizes(60, 24) == (1, 2, 3, 4, 6, 12)  # divisors of the budget too
    assert expert_sizes(1, 16) == (1,)


@pytest.mark.parametrize("name", ["reduced", "full"])
def test_get_space__named_spaces_search_ep_for_moe_only(name):
    dense = get_space(name, "decode", 16)
    moe = get_space(name, "decode", 16, experts=256)
    assert dense.dict["ep"] == (1,)
    assert moe.dict["ep"] == (1, 2, 4, 8, 16)
    assert moe.size == 5 * dense.size
    assert {k: v for k, v in moe.dict.items() if k != "ep"} == \
        {k: v for k, v in dense.dict.items() if k != "ep"}


def test_get_space__sizes_of_the_reduced_space():
    assert get_space("reduced", "decode").size == 1920  # dense, no budget (as before)
    assert get_space("reduced", "decode", 16).size == 3000
    assert get_space("reduced", "decode", 16, experts=256).size == 15000
    assert get_space("reduced", "decode", 8, experts=8).size == 4 * 1920


def test_prepare__searches_ep_for_moe_and_keeps_dense_at_one():
    wl = Workload("decode", batch=64, s_kv=4096)
    assert prepare(DENSE, wl, family="H200", gpus=8).space.dict["ep"] == (1,)
    p = prepare(MIXTRAL, wl, family="H200", gpus=8)
    assert p.space.dict["ep"] == (1, 2, 4, 8)
    rows, _ = p.top_rows("latency", 200)
    assert {r["ep"] for r in rows} > {1}


def test_named_space__pins_ep_and_refuses_what_the_model_cannot_take():
    sp = get_space(NamedSpace("reduced", ep=(4, 2)), "decode", 16, experts=256)
    assert sp.dict["ep"] == (2, 4)
    assert get_space(NamedSpace("full", ep="all"), "decode", 16, 256).dict["ep"] == \
        ep_choices(get_space("full", "decode", 16), 256, gpus=16) == (1, 2, 4, 8, 16)
    with pytest.raises(SimcoreInputError, match="pass one of 1, 2, 4, 8, 16$"):
        get_space(NamedSpace("reduced", ep=(3,)), "decode", 16, experts=256)
    with pytest.raises(SimcoreInputError, match="dense"):
        get_space(NamedSpace("reduced", ep=(2,)), "decode", 16, experts=1)
    with pytest.raises(ValueError, match="positive integers"):
        NamedSpace("reduced", ep=(0,))
    with pytest.raises(ValueError, match="must be one of"):
        NamedSpace("tiny")


# -- the target: DeepSeek-V3 decode at batch 256 on 16 H200 -------------------------------

def test_evaluate__deepseek_v3_on_16_h200_picks_expert_parallelism(capsys):
    assert main(["evaluate", *V3_16, "--top", "3", "--format", "json"]) == 0
    cap = capsys.readouterr()
    rows = json.loads(cap.out)
    assert rows[0]["ep"] > 1, rows[0]
    assert rows[0]["n_devices"] == 16
    # pinned at 1 (the named spaces before issue 33), the best is slower
    assert main(["evaluate", *V3_16, "--top", "1", "--format", "json", "--ep", "1"]) == 0
    (plain,) = json.loads(capsys.readouterr().out)
    assert plain["ep"] == 1
    assert rows[0]["latency_ms"] < plain["latency_ms"]


def test_evaluate__header_names_the_ep_searched_and_table_shows_ep(capsys):
    assert main(["evaluate", *V3_16, "--top", "2"]) == 0
    out = capsys.readouterr().out
    assert "reduced space (EP 1, 2, 4, 8, 16)" in out
    assert " EP " in out.splitlines()[2]


# -- --ep bad input: one line, exit 2 -----------------------------------------------------

def test_evaluate__ep_on_a_dense_model_is_one_line(capsys):
    assert main(["evaluate", "--model", DENSE, "--ep", "2"]) == 2
    line = _one_error_line(capsys.readouterr().err, "evaluate")
    assert line.endswith(f"--ep 2: model {DENSE} is dense (no experts); --ep applies to "
                         "mixture-of-experts models")
    assert main(["evaluate", "--model", DENSE, "--ep", "all"]) == 2
    assert "is dense" in _one_error_line(capsys.readouterr().err, "evaluate")


@pytest.mark.parametrize("ep", ["3", "32", "2,12"])
def test_evaluate__ep_dividing_neither_experts_nor_devices_names_the_valid_ones(ep, capsys):
    assert main(["evaluate", *V3_16, "--ep", ep]) == 2
    line = _one_error_line(capsys.readouterr().err, "evaluate")
    assert f"--ep {ep}: {V3}: " in line
    assert line.endswith("pass one of 1, 2, 4, 8, 16")


@pytest.mark.parametrize("ep", ["0", "x", "2,2"])
def test_evaluate__ep_not_a_list_of_positive_integers(ep, capsys):
    assert main(["evaluate", *V3_16, "--ep", ep]) == 2
    assert "argument --ep" in _one_error_line(capsys.readouterr().err, "evaluate")


def test_compare__ep_checked_against_every_design_budget(capsys):
    assert main(["compare", "H100-SXM", "H200", "--model", V3, "--gpus", "8",
                 "--ep", "16"]) == 2
    assert _one_error_line(capsys.readouterr().err, "compare").endswith(
        "pass one of 1, 2, 4, 8")


def test_explore__ep_on_a_dense_model_is_one_line(capsys):
    assert main(["explore", "--model", DENSE, "--ep", "4", "--depth", "two_stage"]) == 2
    assert "is dense" in _one_error_line(capsys.readouterr().err, "explore")


# -- rows carry ep -------------------------------------------------------------------------

def test_evaluate__json_and_csv_rows_always_carry_ep(capsys):
    assert main(["evaluate", "--model", DENSE, "--s-kv", "4096", "--top", "2",
                 "--format", "json"]) == 0
    assert [r["ep"] for r in json.loads(capsys.readouterr().out)] == [1, 1]
    assert main(["evaluate", *V3_16, "--top", "2", "--format", "csv", "--ep", "8"]) == 0
    rows = list(csv.DictReader(io.StringIO(capsys.readouterr().out)))
    assert [r["ep"] for r in rows] == ["8", "8"]


def test_compare__rows_carry_ep(capsys):
    assert main(["compare", "H100-SXM", "H200", "--model", MIXTRAL, "--batch", "64",
                 "--s-kv", "4096", "--ep", "4", "--format", "json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert rows and all(r["ep"] == 4 for r in rows)


def test_ep_column__in_the_table_only_when_some_row_splits_experts():
    assert EP_COLUMN in LAYOUT_COLUMNS
    dense = render_rows([{"tp": 8, "ep": 1}], [LAYOUT_COLUMNS[0], EP_COLUMN], "table")
    moe = render_rows([{"tp": 8, "ep": 1}, {"tp": 2, "ep": 4}],
                      [LAYOUT_COLUMNS[0], EP_COLUMN], "table")
    assert "EP" not in dense and "EP" in moe.splitlines()[0]
    assert '"ep": 1' in render_rows([{"tp": 8, "ep": 1}], [EP_COLUMN], "json")


# -- the app's logic ------------------------------------------------------------------------

def test_app__ep_options_for_moe_models_only():
    assert L.ep_options(get_model(DENSE), family="H200") == []
    assert L.ep_options(get_model(V3), family="H200") == ["auto", "all", "1", "2", "4", "8"]


def test_app__compare_with_a_pinned_ep_and_its_refusals():
    m = get_model(MIXTRAL)
    r = L.run_compare(m, designs=["H100-SXM", "H200"], values="4096", fixed=64, ep="4")
    rows = L.compare_table(r)
    assert all("EP4" in row["best_layout"] for row in rows)
    with pytest.raises(SimcoreInputError, match="is dense"):
        L.run_compare(get_model(DENSE), designs=["H100-SXM", "H200"], values="4096", ep="2")
    with pytest.raises(SimcoreInputError, match="pass one of 1, 2, 4, 8"):
        L.run_compare(m, designs=["H100-SXM", "H200"], values="4096", ep="16")


# -- the catalogue's MoE models (issue 33 item 4) ------------------------------------------

#: id -> (card total, card active) in billions, as index.json cites them
MOE_CARDS = {
    "deepseek-ai/DeepSeek-V3": (671.0, 37.0), "deepseek-ai/DeepSeek-R1": (671.0, 37.0),
    "Qwen/Qwen3-235B-A22B": (235.0, 22.0), "Qwen/Qwen3-30B-A3B": (30.5, 3.3),
    "openai/gpt-oss-120b": (116.83, None), "openai/gpt-oss-20b": (20.91, None),
    "mistralai/Mixtral-8x7B-v0.1": (46.7, 12.9), "mistralai/Mixtral-8x22B-v0.1": (141.0, 39.0),
    "meta-llama/Llama-4-Scout-17B-16E-Instruct": (109.0, 17.0),
    "meta-llama/Llama-4-Maverick-17B-128E-Instruct": (400.0, 17.0),
}


@pytest.mark.parametrize("model_id", sorted(MOE_CARDS))
def test_catalogue__moe_models_load_within_2pct_of_their_cards(model_id):
    m = get_model(model_id)
    total, active = MOE_CARDS[model_id]
    assert m.name == model_id and m.n_experts > 1
    assert m.n_params / 1e9 == pytest.approx(total, rel=0.02)
    if active is not None:
        assert m.n_active_params / 1e9 == pytest.approx(active, rel=0.02)


def test_catalogue__deepseek_r1_is_deepseek_v3s_architecture():
    import dataclasses

    r1, v3 = get_model("deepseek-ai/DeepSeek-R1"), get_model("deepseek-ai/DeepSeek-V3")
    assert dataclasses.replace(r1, name=v3.name) == v3
    assert r1.kv_bytes_per_token == 61 * (512 + 64) * 2  # MLA: the latent


def test_catalogue__llama4_interleaved_moe_shared_expert_and_chunked_attention():
    scout = get_model("meta-llama/Llama-4-Scout-17B-16E-Instruct")
    mav = get_model("meta-llama/Llama-4-Maverick-17B-128E-Instruct")
    for m, experts, dense in ((scout, 16, 0), (mav, 128, 24)):
        assert (m.n_experts, m.top_k, m.n_shared_experts) == (experts, 1, 1)
        assert (m.n_dense_layers, m.n_moe_layers) == (dense, 48 - dense)
        assert (m.moe_d_ff, m.d_ff) == (8192, 16384)
        assert (m.sliding_window, m.n_local_layers) == (8192, 36)  # 3 of 4 layers chunked
        assert not m.tied_embeddings


def test_catalogue__qwen3_235b_moe_shape():
    m = get_model("Qwen/Qwen3-235B-A22B")
    assert (m.n_layers, m.n_experts, m.top_k, m.moe_d_ff, m.n_kv_heads) == (94, 128, 8, 1536, 4)
    assert m.n_dense_layers == 0 and m.n_shared_experts == 0


# -- the reader's Llama 4 rules -------------------------------------------------------------

def _llama4(**text):
    base = {"model_type": "llama4_text", "num_hidden_layers": 8, "hidden_size": 64,
            "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 16,
            "intermediate_size": 32, "intermediate_size_mlp": 128, "vocab_size": 100,
            "num_local_experts": 4, "num_experts_per_tok": 1, "attention_chunk_size": 16}
    return {"model_type": "llama4", "text_config": {**base, **text}}


def test_hf__llama4_interleave_step_and_moe_layers():
    from simcore.model.transformer import Model

    assert Model.from_hf_dict(_llama4(interleave_moe_layer_step=2)).n_moe_layers == 4
    assert Model.from_hf_dict(_llama4(interleave_moe_layer_step=4)).n_moe_layers == 2
    assert Model.from_hf_dict(_llama4()).n_moe_layers == 8  # step 1 by default
    m = Model.from_hf_dict(_llama4(interleave_moe_layer_step=2, moe_layers=[0, 7, 9]))
    assert m.n_moe_layers == 2  # the explicit list wins; indices past the depth ignored
    assert Model.from_hf_dict(_llama4(moe_layers=[])).n_experts == 1  # no MoE layer: dense
    dense = Model.from_hf_dict(_llama4(interleave_moe_layer_step=2))
    assert (dense.d_ff, dense.moe_d_ff, dense.n_shared_experts) == (128, 32, 1)


def test_hf__llama4_chunked_layers_from_no_rope_layers_or_layer_types():
    from simcore.model.specs import SpecError
    from simcore.model.transformer import Model

    m = Model.from_hf_dict(_llama4())
    assert (m.sliding_window, m.n_local_layers) == (16, 6)  # interval 4: layers 3, 7 global
    m = Model.from_hf_dict(_llama4(no_rope_layers=[1, 0] * 4))
    assert m.n_local_layers == 4
    m = Model.from_hf_dict(_llama4(no_rope_layer_interval=2))
    assert m.n_local_layers == 4
    types = ["chunked_attention"] * 5 + ["full_attention"] * 3
    assert Model.from_hf_dict(_llama4(layer_types=types)).n_local_layers == 5
    assert Model.from_hf_dict(_llama4(attention_chunk_size=None)).n_local_layers == 0
    with pytest.raises(SpecError, match="no_rope_layers"):
        Model.from_hf_dict(_llama4(no_rope_layers=[1, 0]))
    with pytest.raises(SpecError, match="layer_types"):
        Model.from_hf_dict(_llama4(layer_types=["sliding_attention"] * 8))
