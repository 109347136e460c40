"""Every preset names its HF class (``ModelConfig.hf_architecture``: ``architectures[0]`` of
the config.json it came from), and ``serving.kv_capacity`` reads it when ``architecture=`` is
not given: vLLM's model registry picks the model file by that name, and the files differ in
their MLP's live set (llama.py drops the fused gate_up output before down_proj, qwen2.py and
the others keep it: serving.VLLM_LLAMA_ARCHITECTURES). Before, a preset carried no name and
took llama.py's rule whatever the model.

The names are checked against the config.json files stored in tests/data/hf (one per preset
with a HF class; their sources are cited beside each preset in txcalc/model/presets.py), not against
a list typed again here.
"""

import json
from pathlib import Path

import pytest

from txcalc import load
from txcalc.model.presets import PRESETS
from txcalc.serve.kv import VLLM_LLAMA_ARCHITECTURES, kv_capacity

DATA = Path(__file__).parents[1] / "data" / "hf"


@pytest.mark.parametrize("name", list(PRESETS))
def test_preset_names_the_class_of_its_config_json(name):
    """A preset's hf_architecture is its stored config.json's architectures[0]; "" where it has
    none (deberta-v3-large's config.json names no class; gpt3-175b has no HF config)."""
    path = DATA / f"{name}.json"
    archs = json.loads(path.read_text()).get("architectures") if path.exists() else None
    assert PRESETS[name].hf_architecture == (archs[0] if archs else "")


def test_every_preset_with_a_class_names_one():
    unnamed = sorted(n for n in PRESETS if not PRESETS[n].hf_architecture)
    assert unnamed == ["deberta-v3-large", "gpt3-175b"]


@pytest.mark.parametrize("model,own,other", [
    ("qwen2-7b", "Qwen2ForCausalLM", "LlamaForCausalLM"),
    ("llama-3-8b", "LlamaForCausalLM", "Qwen2ForCausalLM"),
    ("mistral-7b", "MistralForCausalLM", "Qwen2ForCausalLM"),
])
def test_kv_capacity_of_a_preset_follows_its_architecture(model, own, other):
    """A preset's KV capacity with no architecture given equals the one with its own class
    given explicitly, and differs from the other model file's rule (so the default is read,
    not the same number either way)."""
    assert PRESETS[model].hf_architecture == own
    base = kv_capacity(load(model), "h100")
    assert base == kv_capacity(load(model), "h100", architecture=own)
    assert base.kv_tokens != kv_capacity(load(model), "h100", architecture=other).kv_tokens
    # qwen2.py keeps gate_up beside down_proj's input: fewer KV tokens than llama.py's rule
    keeps = own not in VLLM_LLAMA_ARCHITECTURES
    other_tokens = kv_capacity(load(model), "h100", architecture=other).kv_tokens
    assert (base.kv_tokens < other_tokens) == keeps


def test_an_explicit_architecture_still_wins_and_a_config_json_reads_its_own():
    """``architecture=`` overrides the preset's name; a config.json path gives its own
    architectures[0] (as before), which is the preset's for the stored file."""
    qwen = kv_capacity(load("qwen2-7b"), "h100", architecture="LlamaForCausalLM")
    assert qwen.kv_tokens == kv_capacity(load("qwen2-7b"), "h100",
                                         architecture="MistralForCausalLM").kv_tokens
    path = str(DATA / "qwen2-7b.json")
    assert kv_capacity(load(path), "h100").kv_tokens == \
        kv_capacity(load("qwen2-7b"), "h100").kv_tokens
