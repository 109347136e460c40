"""State-space and hybrid decoders (tests/conformance/test_hybrids.py): Mamba, Mamba-2, Jamba,
Falcon-H1, Nemotron-H, Granite-MoE-hybrid, LFM2."""

from __future__ import annotations

from hypothesis import strategies as st

from .common import maybe

LAYERS = st.integers(1, 4)
VOCAB = st.integers(16, 120)


@st.composite
def mamba(draw):
    raw = {"model_type": "mamba", "hidden_size": draw(st.integers(4, 32)),
           "num_hidden_layers": draw(LAYERS), "vocab_size": draw(VOCAB),
           "state_size": draw(st.integers(1, 8))}
    maybe(draw, raw, "expand", st.integers(1, 3))
    maybe(draw, raw, "conv_kernel", st.integers(1, 5))
    maybe(draw, raw, "time_step_rank", st.integers(1, 6) | st.just("auto"))
    maybe(draw, raw, "use_bias", st.booleans())
    maybe(draw, raw, "use_conv_bias", st.booleans())
    maybe(draw, raw, "tie_word_embeddings", st.booleans())
    return raw


@st.composite
def mamba2(draw):
    heads = draw(st.integers(1, 6))
    groups = draw(st.sampled_from([g for g in range(1, heads + 1) if heads % g == 0]))
    head_dim = draw(st.integers(1, 8))
    expand = draw(st.sampled_from([1, 2]))
    if (heads * head_dim) % expand:
        expand = 1
    raw = {"model_type": "mamba2", "hidden_size": heads * head_dim // expand, "expand": expand,
           "num_heads": heads, "head_dim": head_dim, "n_groups": groups,
           "num_hidden_layers": draw(LAYERS), "vocab_size": draw(VOCAB),
           "state_size": draw(st.integers(1, 8)), "chunk_size": draw(st.integers(1, 8))}
    maybe(draw, raw, "conv_kernel", st.integers(1, 5))
    maybe(draw, raw, "use_bias", st.booleans())
    maybe(draw, raw, "use_conv_bias", st.booleans())
    maybe(draw, raw, "tie_word_embeddings", st.booleans())
    return raw


@st.composite
def jamba(draw):
    heads = draw(st.integers(1, 4))
    kv = draw(st.sampled_from([k for k in range(1, heads + 1) if heads % k == 0]))
    layers = draw(st.integers(1, 5))
    raw = {"model_type": "jamba", "hidden_size": heads * draw(st.integers(2, 8)),
           "num_attention_heads": heads, "num_key_value_heads": kv, "num_hidden_layers": layers,
           "intermediate_size": draw(st.integers(4, 32)), "vocab_size": draw(VOCAB)}
    # at least one attention layer: HF's Jamba cannot run a cache of Mamba layers only
    period = draw(st.integers(1, 4))
    raw |= {"attn_layer_period": period,
            "attn_layer_offset": draw(st.integers(0, min(period, layers) - 1))}
    e_period = draw(st.integers(1, 3))
    raw |= {"expert_layer_period": e_period,
            "expert_layer_offset": draw(st.integers(0, e_period - 1))}
    experts = draw(st.integers(1, 4))
    raw |= {"num_experts": experts, "num_experts_per_tok": draw(st.integers(1, experts))}
    maybe(draw, raw, "mamba_d_state", st.integers(1, 8))
    maybe(draw, raw, "mamba_d_conv", st.integers(1, 5))
    maybe(draw, raw, "mamba_expand", st.integers(1, 3))
    maybe(draw, raw, "mamba_dt_rank", st.integers(1, 6))
    maybe(draw, raw, "mamba_conv_bias", st.booleans())
    maybe(draw, raw, "mamba_proj_bias", st.booleans())
    maybe(draw, raw, "tie_word_embeddings", st.booleans())
    return raw


@st.composite
def falcon_h1(draw):
    heads = draw(st.integers(1, 4))
    kv = draw(st.sampled_from([k for k in range(1, heads + 1) if heads % k == 0]))
    m_heads = draw(st.integers(1, 4))
    groups = draw(st.sampled_from([g for g in range(1, m_heads + 1) if m_heads % g == 0]))
    raw = {"model_type": "falcon_h1", "hidden_size": heads * 2 * draw(st.integers(1, 4)),
           "num_attention_heads": heads, "num_key_value_heads": kv,
           "num_hidden_layers": draw(LAYERS), "intermediate_size": draw(st.integers(4, 32)),
           "vocab_size": draw(VOCAB), "mamba_n_heads": m_heads, "mamba_n_groups": groups,
           "mamba_d_state": draw(st.integers(1, 8)), "mamba_chunk_size": draw(st.integers(1, 8))}
    if draw(st.booleans()):
        raw["mamba_d_ssm"] = m_heads * draw(st.integers(1, 6))
    else:  # expand * hidden, split over the heads
        raw["mamba_d_ssm"] = None
        raw["mamba_expand"] = m_heads
    maybe(draw, raw, "mamba_d_conv", st.integers(1, 5))
    for key in ("mamba_conv_bias", "mamba_proj_bias", "projectors_bias", "mamba_rms_norm",
                "attention_bias", "mlp_bias", "tie_word_embeddings"):
        maybe(draw, raw, key, st.booleans())
    return raw


@st.composite
def nemotron_h(draw):
    heads = draw(st.integers(1, 4))
    kv = draw(st.sampled_from([k for k in range(1, heads + 1) if heads % k == 0]))
    m_heads = draw(st.integers(1, 4))
    groups = draw(st.sampled_from([g for g in range(1, m_heads + 1) if m_heads % g == 0]))
    letters = draw(st.lists(st.sampled_from("ME*-"), min_size=1, max_size=5))
    if "*" not in letters:  # HF cannot run a cache without an attention layer
        letters[0] = "*"
    raw = {"model_type": "nemotron_h", "hidden_size": draw(st.integers(2, 16)),
           "num_attention_heads": heads, "num_key_value_heads": kv,
           "head_dim": draw(st.integers(1, 6)), "intermediate_size": draw(st.integers(2, 24)),
           "vocab_size": draw(VOCAB), "mamba_num_heads": m_heads, "n_groups": groups,
           "mamba_head_dim": draw(st.integers(1, 6)), "ssm_state_size": draw(st.integers(1, 8)),
           "chunk_size": draw(st.integers(1, 8)), "conv_kernel": draw(st.integers(1, 5))}
    if draw(st.booleans()):
        raw["hybrid_override_pattern"] = "".join(letters)
    else:
        raw["layers_block_type"] = [{"M": "linear_attention", "E": "moe", "*": "full_attention",
                                     "-": "mlp"}[c] for c in letters]
    experts = draw(st.integers(2, 4))  # HF's router sums each group's top-2 scores
    raw |= {"n_routed_experts": experts, "num_experts_per_tok": draw(st.integers(1, experts)),
            "n_group": 1, "topk_group": 1,
            "moe_intermediate_size": draw(st.integers(2, 16)),
            "moe_shared_expert_intermediate_size": draw(st.integers(2, 16))}
    for key in ("use_conv_bias", "use_bias", "mlp_bias", "tie_word_embeddings"):
        maybe(draw, raw, key, st.booleans())
    return raw


@st.composite
def granitemoehybrid(draw):
    heads = draw(st.integers(1, 4))
    kv = draw(st.sampled_from([k for k in range(1, heads + 1) if heads % k == 0]))
    layers = draw(st.integers(1, 4))
    types = draw(st.lists(st.sampled_from(["linear_attention", "full_attention"]),
                          min_size=layers, max_size=layers))
    types[draw(st.integers(0, layers - 1))] = "full_attention"  # HF needs one to run a cache
    m_heads = draw(st.integers(1, 4))
    groups = draw(st.sampled_from([g for g in range(1, m_heads + 1) if m_heads % g == 0]))
    raw = {"model_type": "granitemoehybrid", "hidden_size": heads * 2 * m_heads,
           "num_attention_heads": heads, "num_key_value_heads": kv, "num_hidden_layers": layers,
           "layer_types": types, "intermediate_size": draw(st.integers(2, 16)),
           "shared_intermediate_size": draw(st.integers(2, 16)), "vocab_size": draw(VOCAB),
           "mamba_n_heads": m_heads, "mamba_n_groups": groups, "mamba_expand": 1,
           "mamba_d_state": draw(st.integers(1, 8)), "mamba_chunk_size": draw(st.integers(1, 8)),
           "num_local_experts": draw(st.integers(0, 4))}
    if raw["num_local_experts"]:
        raw["num_experts_per_tok"] = draw(st.integers(1, raw["num_local_experts"]))
    maybe(draw, raw, "mamba_d_conv", st.integers(1, 5))
    maybe(draw, raw, "position_embedding_type", st.sampled_from(["rope", None]))
    for key in ("mamba_conv_bias", "mamba_proj_bias", "attention_bias", "tie_word_embeddings"):
        maybe(draw, raw, key, st.booleans())
    return raw


@st.composite
def lfm2(draw):
    heads = draw(st.integers(1, 4))
    kv = draw(st.sampled_from([k for k in range(1, heads + 1) if heads % k == 0]))
    layers = draw(st.integers(1, 4))
    raw = {"model_type": "lfm2", "hidden_size": heads * 2 * draw(st.integers(1, 4)),
           "num_attention_heads": heads, "num_key_value_heads": kv, "num_hidden_layers": layers,
           "intermediate_size": draw(st.integers(3, 40)), "vocab_size": draw(VOCAB)}
    full = sorted(set(draw(st.lists(st.integers(0, layers - 1), min_size=1, max_size=layers))))
    if draw(st.booleans()):
        raw["layer_types"] = ["full_attention" if i in full else "conv" for i in range(layers)]
    else:
        raw["full_attn_idxs"] = full
    maybe(draw, raw, "conv_L_cache", st.integers(1, 5))
    maybe(draw, raw, "conv_bias", st.booleans())
    maybe(draw, raw, "block_auto_adjust_ff_dim", st.booleans())
    maybe(draw, raw, "block_multiple_of", st.integers(1, 16))
    maybe(draw, raw, "block_ffn_dim_multiplier", st.sampled_from([1.0, 1.5]))
    maybe(draw, raw, "tie_word_embeddings", st.booleans())
    return raw


HYBRID_STRATEGIES = {"mamba": mamba(), "mamba2": mamba2(), "jamba": jamba(),
                     "falcon_h1": falcon_h1(), "nemotron_h": nemotron_h(),
                     "granitemoehybrid": granitemoehybrid(), "lfm2": lfm2()}
