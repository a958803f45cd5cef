"""The Hugging Face config.json reader refuses what simcore does not model (issue 37)."""

import json

import pytest

from simcore import Model, SpecError
from simcore.cli import main

#: the keys of t5-small's config.json that matter here (google-t5/t5-small)
T5_SMALL = {"model_type": "t5", "d_model": 512, "d_ff": 2048, "num_layers": 6,
            "num_decoder_layers": 6, "num_heads": 8, "d_kv": 64, "vocab_size": 32128,
            "is_encoder_decoder": True}
DECODER_ONLY = {"model_type": "llama", "num_hidden_layers": 2, "hidden_size": 64,
                "num_attention_heads": 4, "intermediate_size": 256, "vocab_size": 1000}


def test_from_hf_dict__t5_is_refused_as_encoder_decoder():
    with pytest.raises(SpecError) as info:
        Model.from_hf_dict(T5_SMALL, source="t5-small")
    message = str(info.value)
    assert "\n" not in message
    assert message.startswith("t5-small describes an encoder-decoder model")
    assert "simcore models decoder-only transformers" in message
    assert "pass a decoder-only config.json" in message


@pytest.mark.parametrize(("change", "why"), [
    ({"is_encoder_decoder": True}, "is_encoder_decoder: true"),
    ({"model_type": "bart"}, "model_type 'bart'"),
    ({"model_type": "whisper"}, "model_type 'whisper'"),
    ({"num_decoder_layers": 6}, "it has num_decoder_layers"),
])
def test_from_hf_dict__each_encoder_decoder_sign_is_refused(change, why):
    with pytest.raises(SpecError, match=f"encoder-decoder model \\({why}\\)"):
        Model.from_hf_dict({**DECODER_ONLY, **change})


def test_from_hf_dict__decoder_only_saying_not_encoder_decoder_still_reads():
    m = Model.from_hf_dict({**DECODER_ONLY, "is_encoder_decoder": False}, name="toy")
    assert (m.n_layers, m.d_model) == (2, 64)


def test_from_hf_config__t5_file_is_refused(tmp_path):
    path = tmp_path / "config.json"
    path.write_text(json.dumps(T5_SMALL))
    with pytest.raises(SpecError, match="encoder-decoder model"):
        Model.from_hf_config(path)


def test_main__evaluate_t5_config_exits_2_with_one_line(tmp_path, monkeypatch, capsys):
    from simcore.engine import core as engine

    monkeypatch.setattr(engine, "kernels_cached", lambda *kernels: True)  # no compile notice
    path = tmp_path / "config.json"
    path.write_text(json.dumps(T5_SMALL))
    assert main(["evaluate", "--model", str(path)]) == 2
    captured = capsys.readouterr()
    err = captured.err.strip()
    assert len(err.splitlines()) == 1, err
    assert err.startswith("simcore evaluate: error: --model: "), err
    assert "encoder-decoder model (is_encoder_decoder: true)" in err
    assert "decoder-only" in err and "Traceback" not in err
    assert captured.out == ""
