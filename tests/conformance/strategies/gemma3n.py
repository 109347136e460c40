"""Gemma 3n's text model (tests/conformance/test_gemma3n.py): per-layer inputs, LAuReL, AltUp,
shared KV layers, activation sparsity."""

from __future__ import annotations

from hypothesis import strategies as st

from .common import maybe


@st.composite
def gemma3n(draw, sparsity: bool = True) -> dict:
    heads = draw(st.sampled_from([1, 2, 4]))
    n = draw(st.integers(1, 7))
    raw = {"hidden_size": heads * draw(st.sampled_from([2, 4, 8])),
           "num_attention_heads": heads, "num_hidden_layers": n,
           "num_key_value_heads": draw(st.sampled_from([k for k in (1, 2, 4) if heads % k == 0])),
           "head_dim": draw(st.sampled_from([2, 4, 8])), "vocab_size": draw(st.integers(8, 80)),
           "vocab_size_per_layer_input": draw(st.integers(1, 60)),
           "hidden_size_per_layer_input": draw(st.integers(1, 6)),
           "laurel_rank": draw(st.integers(1, 5)), "altup_num_inputs": draw(st.integers(1, 4))}
    if draw(st.booleans()):
        raw["intermediate_size"] = draw(st.integers(1, 24))
    else:
        raw["intermediate_size"] = draw(st.lists(st.integers(1, 24), min_size=n, max_size=n))
    if draw(st.booleans()):
        raw["layer_types"] = draw(st.lists(st.sampled_from(["sliding_attention",
                                                            "full_attention"]),
                                           min_size=n, max_size=n))
    types = raw.get("layer_types") or ["full_attention" if (i + 1) % 5 == 0
                                       else "sliding_attention" for i in range(n)]
    # HF needs every kind of layer among the layers that keep their own keys and values
    ok = [k for k in range(n) if set(types[:n - k]) == set(types)]
    raw["num_kv_shared_layers"] = draw(st.sampled_from(ok))
    maybe(draw, raw, "sliding_window", st.integers(1, 8))
    maybe(draw, raw, "tie_word_embeddings", st.booleans())
    maybe(draw, raw, "attention_bias", st.booleans())
    maybe(draw, raw, "hidden_activation", st.sampled_from(["gelu_pytorch_tanh", "silu"]))
    if sparsity and draw(st.booleans()):
        raw["activation_sparsity_pattern"] = draw(st.lists(st.sampled_from([0.0, 0.95]),
                                                           min_size=n, max_size=n))
    else:
        raw["activation_sparsity_pattern"] = [0.0] * n  # the default has none under 11 layers
    return raw


#: config.json strategies per model type (tests/conformance/test_hf_defaults.py writes them both ways)
STRATEGIES = {"gemma3n_text": gemma3n().map(lambda r: r | {"model_type": "gemma3n_text"})}
