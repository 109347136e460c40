"""The list of supported model types (one registry: txcalc.model.hf.CONVERTERS) in `txcalc presets`
and the README, and the one-line answer for a model_type txcalc does not read.

After adding a converter, regenerate the README block with
``python3 -c "from tests.cli.test_model_type_list import write_readme; write_readme()"``.
"""

from __future__ import annotations

import json
import re
import textwrap
from pathlib import Path

import pytest

from txcalc.cli import main
from txcalc.errors import ConfigError
from txcalc.model.hf import CONVERTERS, closest_types, from_hf_dict, supported_types

README = Path(__file__).parents[2] / "README.md"
BLOCK = re.compile(r"(<!-- model-types:[^\n]*-->\n)(.*?)(\n<!-- /model-types -->)", re.S)


def readme_block() -> str:
    types = supported_types()
    return "\n".join(textwrap.wrap(
        f"{len(types)} types: " + ", ".join(f"`{t}`" for t in types), 96))


def write_readme() -> None:
    text = README.read_text()
    README.write_text(BLOCK.sub(lambda m: m.group(1) + readme_block() + m.group(3), text))


def test_supported_types_are_the_converter_registry():
    assert supported_types() == sorted(CONVERTERS)


def test_readme_lists_every_supported_type():
    found = BLOCK.search(README.read_text())
    assert found, "README has no model-types block"
    assert found.group(2) == readme_block(), "run write_readme() (see the module docstring)"


def test_presets_command_lists_the_supported_types(capsys):
    assert main(["presets", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["model_types"] == sorted(CONVERTERS)
    assert main(["presets"]) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert f"config.json model types ({len(CONVERTERS)})" in out
    for t in CONVERTERS:
        assert re.search(rf"(?<![\w]){re.escape(t)}(?![\w])", out), t


LLAMA = {"hidden_size": 64, "num_attention_heads": 4, "num_hidden_layers": 2,
         "vocab_size": 100, "intermediate_size": 128}

#: (config.json, closest by name, closest by its fields): the families a user should try
CLOSEST = [
    ({"model_type": "olmo4", **LLAMA}, ["olmo", "olmo2"], None),  # olmo2 is supported now
    ({"model_type": "llamma", **LLAMA}, ["llama"], None),
    # Qwen3-Next's MoE fields are Qwen2-MoE's (shared expert with a gate, sparse step); a
    # made-up successor (qwen3_next itself is supported now)
    ({"model_type": "qwen4_next", **LLAMA, "num_experts": 8, "num_experts_per_tok": 2,
      "moe_intermediate_size": 32, "shared_expert_intermediate_size": 32,
      "decoder_sparse_step": 1, "mlp_only_layers": [], "linear_num_value_heads": 4},
     ["qwen3_next"], "qwen2_moe"),
    # a GPT-2 file under another name: GPT-2's own field names
    ({"model_type": "my_gpt", "n_embd": 64, "n_head": 4, "n_layer": 2, "n_positions": 128,
      "vocab_size": 100, "activation_function": "gelu_new"}, [], "gpt2"),
    # DeepSeek's MLA fields
    ({"model_type": "kimi_k2", **LLAMA, "kv_lora_rank": 16, "q_lora_rank": 16,
      "qk_nope_head_dim": 8, "qk_rope_head_dim": 8, "v_head_dim": 8, "n_routed_experts": 4,
      "first_k_dense_replace": 1}, [], "deepseek_v"),
]


@pytest.mark.parametrize("raw,by_name,by_fields", CLOSEST, ids=[r["model_type"] for r, *_ in CLOSEST])
def test_unsupported_type_names_the_closest_families(raw, by_name, by_fields, capsys, tmp_path):
    names, fields = closest_types(raw)
    for t in by_name:
        assert t in names, (t, names)
    if by_fields:
        assert any(f.startswith(by_fields) for f in fields), fields
    with pytest.raises(ConfigError, match="closest supported"):
        from_hf_dict(raw)
    path = tmp_path / "config.json"
    path.write_text(json.dumps(raw))
    # `params` counts a type transformers knows by a module walk (tests/conformance/test_modulewalk.py);
    # `memory` needs a converter and refuses with the hint
    assert main(["memory", str(path)]) == 2
    out, err = capsys.readouterr()
    assert out == "" and err.count("\n") == 1 and "Traceback" not in err
    assert "closest supported" in err
    assert f"unsupported model_type '{raw['model_type']}'" in err
    for t in by_name + ([fields[0]] if fields else []):
        assert t in err


def test_closest_types_never_raise_on_odd_fields():
    odd = {"model_type": "zz", "hidden_size": "wide", "num_attention_heads": -3,
           "num_hidden_layers": None, "hidden_act": ["silu"], "layer_types": 7,
           "text_config": 5, "attn_config": "x", "attention_types": [[1]]}
    closest_types(odd)
    with pytest.raises(ConfigError, match="unsupported model_type 'zz'"):
        from_hf_dict(odd)


# --- presets of the new types: published parameter counts ---------------------------------------
import txcalc  # noqa: E402

from ..hf_models import numel  # noqa: E402
from tests.conformance.test_hf_drawn_configs_other_types import (  # noqa: E402
    hf_model as hf_language_model, language_params)

#: (preset, published total, tolerance, source). Where the publisher rounds, the tolerance says
#: how much; our count is HF's (tests/conformance/test_presets.py checks each preset against its
#: config.json and the HF model on meta).
PUBLISHED = [
    # IBM model card (huggingface.co/ibm-granite/granite-3.3-8b-instruct): "8B"; exact count
    # 8,170,864,640: the card rounds 8.17B down (2.1%)
    ("granite-3.3-8b", 8e9, 0.025),
    # Abdin et al. 2024, arXiv:2412.08905, abstract: "a 14-billion parameter language model";
    # exact 14,659,507,200: rounded down (4.7%)
    ("phi-4", 14e9, 0.05),
    # Qwen3 technical report, arXiv:2505.09388, Table 2: 235B total; exact 235,093,634,560
    ("qwen3-235b-a22b", 235e9, 0.001),
    # GLM-4.5 report, arXiv:2508.06471, abstract: 355B total. HF builds no MTP layer: our (and
    # HF's) 352,797,814,784 is 0.62% below; the checkpoint's MTP layer makes up the rest
    ("glm-4.5", 355e9, 0.007),
]


@pytest.mark.parametrize("name,figure,tol", PUBLISHED, ids=[p[0] for p in PUBLISHED])
def test_published_totals_of_new_presets(name, figure, tol):
    assert abs(txcalc.params(name).total - figure) / figure <= tol


def test_published_active_params_of_new_presets():
    # Qwen3 report, Table 2: 22B activated; ours 22,190,763,520 (0.9% above the rounded figure)
    assert abs(txcalc.params("qwen3-235b-a22b").active - 22e9) / 22e9 < 0.01
    # GLM-4.5 report: 32B activated, counted without the embedding table and the untied LM
    # head (2 x 151552 x 5120); with them txcalc's active count is 33,632,251,904
    glm = txcalc.load("glm-4.5")
    tables = 2 * glm.vocab_size * glm.d_model
    assert abs(txcalc.params(glm).active - tables - 32e9) / 32e9 < 0.005


LANGUAGE = Path(__file__).parents[1] / "data" / "hf_language"


def test_qwen2_5_vl_72b_language_model():
    """Qwen/Qwen2.5-VL-72B-Instruct config.json: its language model is Qwen2.5-72B: "Number
    of Parameters: 72.7B" on its model card (huggingface.co/Qwen/Qwen2.5-72B; rounded, ours is
    72,706,203,648). Since issue 12 item 3 the total is the whole checkpoint with its 0.7B
    vision tower and merger: 73,410,777,344, the "73.4B" of the Hub's safetensors metadata
    (the model card's name says "72B")."""
    raw = json.loads((LANGUAGE / "qwen2.5-vl-72b.json").read_text())
    cfg = txcalc.load(LANGUAGE / "qwen2.5-vl-72b.json")
    counts = txcalc.params(cfg)
    model = hf_language_model(raw)
    language = counts.total - cfg.vision_params
    assert language == language_params(raw, model) == 72_706_203_648
    assert cfg.vision_params == numel(model) - language == 704_573_696  # tower and merger
    assert counts.total == numel(model) == 73_410_777_344
    assert abs(language - 72.7e9) / 72.7e9 < 0.0005
    assert abs(counts.total - 73.4e9) / 73.4e9 < 0.0005
