"""Issue 29 item 11a: a config.json without ``architectures`` is counted as the model a user
loads for it: a decoder's causal LM with its LM head (``AutoModelForCausalLM``: ApertusForCausalLM,
not ApertusModel), a VLM's text part with the LM head of the model that holds it
(Qwen2VLForConditionalGeneration's language model and lm_head for qwen2_vl_text), an encoder's
base model (BERT: AutoModel); the answer names the class it counted. The reference is each model
built here by transformers on the meta device."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from tests.conformance.test_modulewalk import run_json, write_config  # noqa: E402

SMALL = dict(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
             num_key_value_heads=2, vocab_size=1000, tie_word_embeddings=False)


def _params(model) -> int:
    return sum(p.numel() for p in model.parameters())


@pytest.mark.parametrize("tied", [False, True])
def test_a_decoder_without_architectures_counts_its_causal_lm(capsys, tmp_path, tied):
    over = dict(SMALL, tie_word_embeddings=tied)
    path = write_config(tmp_path, "apertus", None, **over)
    got = run_json(capsys, ["params", path, "--json"])
    cfg = transformers.ApertusConfig(**over)
    with torch.device("meta"):
        lm = transformers.AutoModelForCausalLM.from_config(cfg)
        base = transformers.AutoModel.from_config(cfg)
    assert type(lm).__name__ == got["model_class"] == "ApertusForCausalLM"
    assert got["total_params"] == _params(lm)
    assert _params(lm) - _params(base) == (0 if tied else 64 * 1000)  # the LM head
    assert "causal LM" in got["model_class_source"]
    assert any(r["path"] == "lm_head" for r in got["modules"])
    main_text = _human(capsys, path)
    assert "ApertusForCausalLM" in main_text  # the answer says which class it counted


def _human(capsys, path) -> str:
    from txcalc.cli import main
    assert main(["params", path]) == 0
    return " ".join(capsys.readouterr().out.split())


def test_a_vlm_text_config_counts_the_language_model_and_its_head(capsys, tmp_path):
    """qwen2_vl_text has no causal LM class of its own: the text model and lm_head inside
    Qwen2VLForConditionalGeneration, without the vision tower."""
    path = write_config(tmp_path, "qwen2_vl_text", None, **SMALL)
    got = run_json(capsys, ["params", path, "--json"])
    text_cfg = transformers.Qwen2VLTextConfig(**SMALL)
    with torch.device("meta"):
        vlm = transformers.Qwen2VLForConditionalGeneration(
            transformers.Qwen2VLConfig(text_config=text_cfg.to_dict()))
        text = transformers.AutoModel.from_config(text_cfg)
    expected = _params(vlm.model.language_model) + _params(vlm.lm_head)
    assert got["total_params"] == expected == _params(text) + 64 * 1000
    assert got["model_class"].startswith("Qwen2VLForConditionalGeneration")
    assert "vision tower is not counted" in got["model_class_source"]
    assert not any("visual" in r["path"] for r in got["modules"])


def test_an_encoder_without_architectures_stays_the_base_model(capsys, tmp_path):
    """BERT maps to BertLMHeadModel too (as a decoder): without is_decoder it is AutoModel's."""
    path = write_config(tmp_path, "big_bird", None, hidden_size=64, num_hidden_layers=2,
                        num_attention_heads=4, intermediate_size=128, vocab_size=1000)
    got = run_json(capsys, ["params", path, "--json"])
    assert got["model_class"] == "BigBirdModel"
    raw = json.loads(Path(path).read_text())
    raw["is_decoder"] = True
    Path(path).write_text(json.dumps(raw))
    assert run_json(capsys, ["params", path, "--json"])["model_class"] == "BigBirdForCausalLM"
