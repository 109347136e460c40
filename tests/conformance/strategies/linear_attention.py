"""Gated DeltaNet hybrids (tests/conformance/test_linear_attention.py): Qwen3-Next, Qwen3.5 (dense
and MoE text configs, and the multimodal configs whose language model txcalc reads)."""

from __future__ import annotations

from hypothesis import strategies as st

from .common import maybe
from .hybrids import LAYERS, VOCAB


def _heads(draw):
    heads = draw(st.integers(1, 4))
    return heads, draw(st.sampled_from([k for k in range(1, heads + 1) if heads % k == 0]))


@st.composite
def qwen3_next(draw):
    heads, kv = _heads(draw)
    layers = draw(LAYERS)
    k_heads = draw(st.integers(1, 3))
    raw = {"model_type": "qwen3_next", "hidden_size": draw(st.integers(2, 24)),
           "num_attention_heads": heads, "num_key_value_heads": kv,
           "head_dim": 4 * draw(st.integers(1, 3)),  # partial rotary 0.25 of an even width
           "num_hidden_layers": layers, "intermediate_size": draw(st.integers(2, 24)),
           "vocab_size": draw(VOCAB), "linear_num_key_heads": k_heads,
           "linear_num_value_heads": k_heads * draw(st.integers(1, 3)),
           "linear_key_head_dim": draw(st.integers(1, 6)),
           "linear_value_head_dim": draw(st.integers(1, 6))}
    # at least one attention layer: HF's cache (built even in training) needs one
    if draw(st.booleans()):
        types = draw(st.lists(st.sampled_from(["linear_attention", "full_attention"]),
                              min_size=layers, max_size=layers))
        types[draw(st.integers(0, layers - 1))] = "full_attention"
        raw["layer_types"] = types
    else:
        raw["full_attention_interval"] = draw(st.integers(1, layers))
    experts = draw(st.integers(0, 4))
    raw["num_experts"] = experts
    if experts:
        raw |= {"num_experts_per_tok": draw(st.integers(1, experts)),
                "moe_intermediate_size": draw(st.integers(1, 12)),
                "shared_expert_intermediate_size": draw(st.integers(1, 12))}
        maybe(draw, raw, "decoder_sparse_step", st.integers(1, 3))
        maybe(draw, raw, "mlp_only_layers", st.lists(st.integers(0, layers), max_size=2))
    maybe(draw, raw, "linear_conv_kernel_dim", st.integers(1, 5))
    maybe(draw, raw, "attention_bias", st.booleans())
    maybe(draw, raw, "tie_word_embeddings", st.booleans())
    return raw


@st.composite
def qwen3_5_text(draw, moe: bool = False):
    """Qwen3.5 (dense) or Qwen3.5-MoE text configs: Qwen3-Next's layer fields, their own FFN."""
    raw = draw(qwen3_next())
    for key in ("num_experts", "num_experts_per_tok", "moe_intermediate_size",
                "shared_expert_intermediate_size", "decoder_sparse_step", "mlp_only_layers"):
        raw.pop(key, None)
    raw["model_type"] = "qwen3_5_moe_text" if moe else "qwen3_5_text"
    if moe:
        del raw["intermediate_size"]
        experts = draw(st.integers(1, 4))
        raw |= {"num_experts": experts, "num_experts_per_tok": draw(st.integers(1, experts)),
                "moe_intermediate_size": draw(st.integers(1, 12)),
                "shared_expert_intermediate_size": draw(st.integers(1, 12))}
    return raw


@st.composite
def multimodal(draw, moe: bool = False):
    """The multimodal config (qwen3_5, qwen3_5_moe): the text fields in text_config."""
    text = draw(qwen3_5_text(moe))
    tie = text.pop("tie_word_embeddings", None)
    raw = {"model_type": "qwen3_5_moe" if moe else "qwen3_5", "text_config": text}
    if tie is not None:
        raw["tie_word_embeddings"] = tie
    return raw


STRATEGIES = {"qwen3_next": qwen3_next(), "qwen3_5_text": qwen3_5_text(),
              "qwen3_5_moe_text": qwen3_5_text(moe=True)}
#: multimodal configs whose language model txcalc reads (vision towers are not counted)
MULTIMODAL = {"qwen3_5": multimodal(), "qwen3_5_moe": multimodal(moe=True)}
