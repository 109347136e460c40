"""The list of supported model types (one registry: txcalc.hf.CONVERTERS) in `txcalc presets`
and the README, and the one-line answer for a model_type txcalc does not read.

After adding a converter, regenerate the README block with
``python3 -c "from tests.test_presets_more import write_readme; write_readme()"``.
"""

from __future__ import annotations

import json
import re
import textwrap
from pathlib import Path

import pytest

from txcalc.cli import main
from txcalc.errors import ConfigError
from txcalc.hf import CONVERTERS, closest_types, from_hf_dict, supported_types

README = Path(__file__).parent.parent / "README.md"
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
    ({"model_type": "olmo2", **LLAMA}, ["olmo", "olmoe"], None),
    ({"model_type": "llamma", **LLAMA}, ["llama"], None),
    # Qwen3-Next's MoE fields are Qwen2-MoE's (shared expert with a gate, sparse step)
    ({"model_type": "qwen3_next", **LLAMA, "num_experts": 8, "num_experts_per_tok": 2,
      "moe_intermediate_size": 32, "shared_expert_intermediate_size": 32,
      "decoder_sparse_step": 1, "mlp_only_layers": [], "linear_num_value_heads": 4},
     ["qwen3"], "qwen2_moe"),
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
    assert main(["params", str(path)]) == 2
    out, err = capsys.readouterr()
    assert out == "" and err.count("\n") == 1 and "Traceback" not in err
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
