"""The weight-only and multi-node inference held-out set (issue 32 item 6): gpt-fast and
torchao weight-only INT8 / INT4 decode with their bf16 baselines, never fitted; the
multi-node points it cannot reproduce are listed with the reason."""

import json
import re

import pytest

from simcore.cli import main
from simcore.kernels.inference_ref import weight_only
from simcore.model.runtime import RUNTIMES
from simcore.validation import MEASUREMENTS
from simcore.validation.weight_only import (
    _JSON,
    NEW_TOKENS,
    _quant_format,
    load_weight_only,
    weight_only_rows,
    weight_only_skipped,
    weight_only_summary,
)


def _points():
    return json.loads(_JSON.read_text(encoding="utf-8"))["points"]


def test_points__load_as_whole_runs_under_a_known_runtime_and_are_never_fitted():
    pts = load_weight_only()
    assert len(pts) == 14 and len({m.id for m in pts}) == 14
    fitted = {m.id for m in MEASUREMENTS}
    for m in pts:
        assert m.workload.runtime in RUNTIMES and m.workload.runtime == "gpt-fast", m.id
        assert m.workload.cuda_graphs and m.workload.act_dtype == "bf16", m.id
        assert m.steps[0][0].mode == "prefill" and not m.steps[0][0].cuda_graphs, m.id
        assert m.generated == NEW_TOKENS and m.metric == "output_tokens_per_s", m.id
        assert m.family.name == "A100-80G" and m.id not in fitted, m.id


def test_int4_points__carry_their_group_scale_and_zero_bytes():
    by_dtype = {}
    for m in load_weight_only():
        scale, _, _ = weight_only(m.workload, m.family.topology)
        by_dtype.setdefault(m.workload.weight_dtype, []).append((m, scale))
    assert {d: len(v) for d, v in by_dtype.items()} == {"bf16": 4, "int8": 5, "int4": 5}
    for m, scale in by_dtype["int4"]:
        group = 32 if "g32" in m.id else 64  # the row's stated group size
        assert m.workload.quant_zeros == "fp16" and m.workload.quant_group == group, m.id
        assert scale == pytest.approx(4.0 / group), m.id  # a bf16 scale and zero per group
    for m, scale in by_dtype["int8"]:
        assert m.workload.quant_group == 0 and scale == 0.0, m.id  # one scale per channel


def test_skipped__every_other_point_has_a_reason_and_none_is_lost():
    skipped = dict(weight_only_skipped())
    loaded = {m.id.removesuffix(":thr") for m in load_weight_only()}
    points = _points()
    assert len(skipped) == 9 and loaded | set(skipped) == {p["id"] for p in points}
    kinds = {p["id"]: p["kind"] for p in points}
    for pid, why in skipped.items():
        assert kinds[pid] == "multi_node" and len(why) > 20, (pid, why)
    assert any("24-hour production" in why for why in skipped.values())
    assert any("lengths" in why for why in skipped.values())


def test_summary__per_dtype_errors_and_no_multi_node_point():
    rows = weight_only_rows()
    s = weight_only_summary(rows)
    assert s["n"] == 14 and s["multi_node"] == 0
    assert 0.0 < s["dtypes"]["bf16"][0] < 0.10  # the 16-bit baselines
    assert s["dtypes"]["int4"][1] > 0.0  # tinygemm's rate is not modelled: reads fast
    with pytest.raises(ValueError, match="needs rows"):
        weight_only_summary([])


def test_quant_format__bad_input_is_one_clear_line():
    with pytest.raises(ValueError, match=r"^x: int4 weight_dtype .* states no 'group size N'"):
        _quant_format("x", "int4 (weight-only)")
    with pytest.raises(ValueError, match="not one this set reproduces"):
        _quant_format("x", "fp8 (block-scaled)")


def test_validate__prints_the_weight_only_section(capsys):
    assert main(["validate", "--kind", "decode", "--no-loso"]) == 0
    out, err = capsys.readouterr()
    text = out + err
    head = re.search(r"weight-only and multi-node inference, never fitted: 14 points, mean "
                     r"\|error\| \d+\.\d% \(int4 \d+\.\d% \(5\), int8 \d+\.\d% \(5\), bf16 "
                     r"\d+\.\d% \(4\)", text)
    assert head, text[-3000:]
    section = text[head.start():]
    for m in load_weight_only():
        assert m.id in section, m.id
    assert "tinygemm" in section and "not tuned" in section
    assert "skipped (no setting simcore can reproduce; never guessed):" in section
    for pid, _ in weight_only_skipped():
        assert pid in section, pid
