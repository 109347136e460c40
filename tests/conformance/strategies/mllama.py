"""Llama 3.2 Vision (tests/conformance/test_mllama.py): text and vision sub-configs, the
composite config and the text model alone."""

from __future__ import annotations

from hypothesis import strategies as st

from .common import maybe


@st.composite
def text_config(draw) -> dict:
    heads = draw(st.sampled_from([1, 2, 4]))
    n = draw(st.integers(1, 4))
    raw = {"hidden_size": heads * draw(st.sampled_from([2, 4, 8])), "num_attention_heads": heads,
           "num_key_value_heads": draw(st.sampled_from([k for k in (1, 2, 4) if heads % k == 0])),
           "num_hidden_layers": n, "intermediate_size": draw(st.integers(1, 40)),
           "vocab_size": draw(st.integers(8, 100)), "cross_attention_layers": sorted(draw(
               st.sets(st.integers(0, n + 1), min_size=1))),
           # the class defaults (128000...) index past a tiny vocabulary
           "pad_token_id": 0, "bos_token_id": 0, "eos_token_id": 0}
    maybe(draw, raw, "hidden_act", st.sampled_from(["silu", "gelu"]))
    maybe(draw, raw, "tie_word_embeddings", st.booleans())
    return raw


@st.composite
def vision_config(draw) -> dict:
    patch = draw(st.sampled_from([2, 4]))
    layers = draw(st.integers(1, 3))
    tiles = draw(st.integers(1, 3))
    ratios = draw(st.lists(st.tuples(st.integers(1, tiles), st.integers(1, tiles)).filter(
        lambda r: r[0] * r[1] <= tiles).map(list), min_size=1, max_size=4))
    raw = {"hidden_size": draw(st.sampled_from([4, 8])), "attention_heads": 2,
           "num_hidden_layers": layers, "num_global_layers": draw(st.integers(0, 2)),
           "intermediate_size": draw(st.integers(1, 16)), "patch_size": patch,
           "image_size": patch * draw(st.integers(1, 3)), "max_num_tiles": tiles,
           "supported_aspect_ratios": ratios,
           "intermediate_layers_indices": sorted(draw(st.sets(st.integers(0, layers - 1),
                                                              min_size=1)))}
    maybe(draw, raw, "num_channels", st.sampled_from([1, 3]))
    raw["vision_output_dim"] = raw["hidden_size"] * (1 + len(raw["intermediate_layers_indices"]))
    return raw


@st.composite
def mllama_config(draw) -> dict:
    return {"model_type": "mllama", "text_config": draw(text_config()),
            "vision_config": draw(vision_config())}


#: config.json strategies per model type (tests/conformance/test_hf_defaults.py writes them both ways)
STRATEGIES = {"mllama": mllama_config(),
              "mllama_text_model": text_config().map(
                  lambda t: t | {"model_type": "mllama_text_model"})}
