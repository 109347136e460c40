"""Hybrids with shared blocks (tests/conformance/test_hybrids_shared.py): Zamba, Zamba2
(Mamba layers with shared attention blocks) and RecurrentGemma."""

from __future__ import annotations

from hypothesis import strategies as st

from .common import maybe

VOCAB = st.integers(16, 120)


def _layout(draw, raw: dict, hybrids: int = 1, keys=("layers_block_type", "layer_types")):
    """An explicit Zamba layout with at least ``hybrids`` shared-block layers (HF's hybrid
    cache needs an attention layer; HF's Zamba fails to tie a block used once), named by either
    of HF's field names (Zamba2Config reads its adapters' layout from ``layers_block_type``
    before the ``layer_types`` alias is applied: only the first works there)."""
    types = draw(st.lists(st.sampled_from(["linear_attention", "hybrid", "mamba"]),
                          min_size=hybrids, max_size=5))
    while types.count("hybrid") < hybrids:
        types[draw(st.integers(0, len(types) - 1))] = "hybrid"
    raw[draw(st.sampled_from(keys))] = types
    raw["num_hidden_layers"] = len(types)


@st.composite
def zamba(draw):
    heads = draw(st.integers(1, 4))
    kv = draw(st.sampled_from([k for k in range(1, heads + 1) if heads % k == 0]))
    d = draw(st.integers(2, 12))
    raw = {"model_type": "zamba", "hidden_size": d, "num_attention_heads": heads,
           "num_key_value_heads": kv, "intermediate_size": draw(st.integers(2, 24)),
           "vocab_size": draw(VOCAB), "mamba_d_state": draw(st.integers(1, 6))}
    expand = draw(st.integers(1, 2))
    raw["mamba_expand"] = expand
    raw["n_mamba_heads"] = draw(st.sampled_from(
        [n for n in range(1, 5) if (expand * d) % n == 0]))
    if draw(st.booleans()):
        _layout(draw, raw, hybrids=2)
    else:  # HF's default layout: layers 2 and 3 + i with i % period == offset (one at least)
        period = draw(st.integers(1, 4))
        offset = draw(st.integers(0, period - 1))
        raw |= {"attn_layer_period": period, "attn_layer_offset": offset,
                "num_hidden_layers": draw(st.integers(offset + 4, offset + 7))}
    maybe(draw, raw, "attention_head_dim", st.integers(1, 6))
    maybe(draw, raw, "mamba_d_conv", st.integers(1, 4))
    maybe(draw, raw, "mamba_dt_rank", st.integers(1, 4))
    maybe(draw, raw, "hidden_act", st.sampled_from(["gelu", "silu"]))
    for key in ("mamba_conv_bias", "mamba_proj_bias", "tie_word_embeddings"):
        maybe(draw, raw, key, st.booleans())
    return raw


@st.composite
def zamba2(draw):
    heads = draw(st.integers(1, 4))
    adapters = draw(st.booleans())
    # q/k/v adapters add a 2D-wide output to q, k and v: full heads, 2D = H x head_dim
    kv = heads if adapters else draw(
        st.sampled_from([k for k in range(1, heads + 1) if heads % k == 0]))
    d = heads * draw(st.integers(1, 4))  # head_dim 2D / H even (rotary)
    m_heads = draw(st.sampled_from([n for n in range(1, 5) if (2 * d) % n == 0]))
    raw = {"model_type": "zamba2", "hidden_size": d, "num_attention_heads": heads,
           "num_key_value_heads": kv, "vocab_size": draw(VOCAB), "mamba_expand": 2,
           "n_mamba_heads": m_heads,
           "mamba_ngroups": draw(st.sampled_from([g for g in range(1, m_heads + 1)
                                                  if m_heads % g == 0])),
           "mamba_d_state": draw(st.integers(1, 6)), "chunk_size": draw(st.integers(1, 6)),
           "adapter_rank": draw(st.integers(1, 4)), "use_shared_attention_adapter": adapters,
           "num_mem_blocks": draw(st.integers(1, 3))}
    _layout(draw, raw, keys=("layers_block_type",))
    maybe(draw, raw, "intermediate_size", st.integers(2, 24))
    maybe(draw, raw, "mamba_d_conv", st.integers(1, 4))
    maybe(draw, raw, "hidden_act", st.sampled_from(["gelu", "silu"]))
    for key in ("use_mem_rope", "add_bias_linear", "use_conv_bias", "tie_word_embeddings"):
        maybe(draw, raw, key, st.booleans())
    return raw


@st.composite
def recurrent_gemma(draw):
    heads = draw(st.integers(1, 4))
    kv = draw(st.sampled_from([k for k in range(1, heads + 1) if heads % k == 0]))
    n = draw(st.integers(1, 5))
    blocks = draw(st.lists(st.sampled_from(["recurrent", "attention"]), min_size=1, max_size=3))
    if "attention" not in (blocks * n)[:n]:  # HF's cache needs an attention layer
        blocks[0] = "attention"
    raw = {"model_type": "recurrent_gemma", "num_hidden_layers": n,
           "hidden_size": heads * draw(st.sampled_from([2, 4, 6])),
           "num_attention_heads": heads, "num_key_value_heads": kv, "block_types": blocks,
           "intermediate_size": draw(st.integers(2, 24)), "vocab_size": draw(VOCAB),
           "lru_width": heads * draw(st.integers(1, 4)),
           "attention_window_size": draw(st.integers(1, 12))}
    maybe(draw, raw, "conv1d_width", st.integers(1, 4))
    for key in ("attention_bias", "tie_word_embeddings"):
        maybe(draw, raw, key, st.booleans())
    return raw


STRATEGIES = {"zamba": zamba(), "zamba2": zamba2(), "recurrent_gemma": recurrent_gemma()}
