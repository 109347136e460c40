"""The first 24 model types (tests/conformance/test_hf_drawn_configs.py): Llama-shaped decoders
(dense, MoE, MLA), GPT-style decoders, and the first BERT, T5 and BART strategies.

A config is small (hidden 8..64, 1..4 layers, vocab 16..300) and randomises every field that
changes the parameter structure of the HF model; optional fields are left out about half the
time (the HF class defaults), aliases from a class's ``attribute_map`` are drawn both ways.
"""

from __future__ import annotations

from hypothesis import strategies as st

from .common import divisors, maybe

LAYERS = st.integers(1, 4)
VOCAB = st.integers(16, 300)
WIDTH = st.integers(4, 64)  # MLP / expert hidden widths
SMALL = st.integers(2, 16)
# Activations HF and txcalc both know; gated types pair any of them with a gate.
ACTS = ["silu", "swish", "gelu", "gelu_new", "gelu_pytorch_tanh", "relu"]



@st.composite
def geometry(draw, *, even: bool = True, heads_multiple_of: int = 1, max_heads: int = 8):
    """(hidden, heads, head_dim) with hidden = heads * head_dim in 8..64.

    ``even``: rotary models need an even head_dim (HF's rope validation and txcalc both reject
    odd ones). ``heads_multiple_of`` lets a strategy omit num_key_value_heads when the
    HF class default (e.g. 32 for Qwen2) is a number of KV heads that must divide the heads.
    """
    step = 2 if even else 1
    m = heads_multiple_of
    heads = draw(st.sampled_from([h for h in range(m, max(max_heads, m) + 1, m) if h * step <= 64]))
    hd = draw(st.sampled_from([d for d in range(step, 65, step) if 8 <= heads * d <= 64]))
    return heads * hd, heads, hd


# --- Llama-shaped decoders ------------------------------------------------------------------------

#: HF class defaults of num_key_value_heads (None: the class falls back to num_attention_heads).
KV_DEFAULT = {"llama": None, "mistral": 8, "qwen2": 32, "qwen3": 32, "mixtral": 8, "qwen2_moe": 16,
              "qwen3_moe": 4, "gemma": 16, "gemma2": 4, "phi3": None, "olmo": None,
              "starcoder2": 2, "deepseek_v2": None, "deepseek_v3": 128}


@st.composite
def llama_like(draw, model_type: str) -> dict:
    """Fields shared by the Llama-shaped types, including ones a given type ignores."""
    kv_default = KV_DEFAULT[model_type]
    omit_kv = draw(st.booleans())
    mult = kv_default if (omit_kv and kv_default) else 1
    if mult > 32:  # DeepSeek-V3's 128 KV heads cannot fit; KV heads do not matter for MLA anyway
        mult = 1
    hidden, heads, _ = draw(geometry(heads_multiple_of=mult, max_heads=max(8, mult)))
    raw = {"model_type": model_type, "hidden_size": hidden, "num_attention_heads": heads,
           "num_hidden_layers": draw(LAYERS)}
    if not omit_kv:
        # null means num_attention_heads for the classes whose __post_init__ says so
        # (and whose field is typed ``int | None``: Mistral's and Mixtral's reject null)
        null_ok = model_type in ("llama", "qwen2", "qwen3", "phi3", "olmo")
        raw["num_key_value_heads"] = draw(st.sampled_from(divisors(heads) + [None] * null_ok))
    # hidden_size, heads, layers, vocab_size and intermediate_size are required by txcalc for
    # these types (it will not guess a model's size; tests/cli/test_bad_input.py)
    raw["vocab_size"], raw["intermediate_size"] = draw(VOCAB), draw(WIDTH)
    # head_dim different from hidden // heads: all these types read it (DeepSeek then replaces
    # it by qk_rope_head_dim)
    maybe(draw, raw, "head_dim", st.sampled_from([2, 4, 6, 8, 12, 16]))
    for key in ("attention_bias", "mlp_bias", "qkv_bias", "use_bias", "tie_word_embeddings"):
        maybe(draw, raw, key, st.booleans())
    maybe(draw, raw, "hidden_act", st.sampled_from(ACTS))
    maybe(draw, raw, "max_position_embeddings", st.integers(16, 4096))
    maybe(draw, raw, "sliding_window", st.one_of(st.none(), st.integers(4, 64)))
    maybe(draw, raw, "use_sliding_window", st.booleans())
    if model_type in ("qwen2", "qwen3", "qwen2_moe", "gemma2"):  # the types that read these
        maybe(draw, raw, "max_window_layers", st.integers(0, 5))
        maybe(draw, raw, "layer_types", st.lists(
            st.sampled_from(["sliding_attention", "full_attention"]),
            min_size=raw["num_hidden_layers"], max_size=raw["num_hidden_layers"]))
    return raw


@st.composite
def dense_llama(draw, model_type: str) -> dict:
    raw = draw(llama_like(model_type))
    if model_type == "phi3":  # Phi3Config's pad_token_id (32000) must index the tiny vocabulary
        raw["pad_token_id"] = 0
    if model_type == "gemma2":
        maybe(draw, raw, "hidden_activation", st.sampled_from(ACTS))
    if model_type == "olmo":
        maybe(draw, raw, "clip_qkv", st.one_of(st.none(), st.floats(1, 10)))
    return raw


@st.composite
def mixtral(draw) -> dict:
    raw = draw(llama_like("mixtral"))
    n_experts = draw(st.integers(1, 8))
    key = draw(st.sampled_from(["num_local_experts", "num_experts", None]))  # alias or default 8
    if key is None:
        n_experts = 8
    else:
        raw[key] = n_experts
    if n_experts < 2 or draw(st.booleans()):  # the default top-k is 2
        raw["num_experts_per_tok"] = draw(st.integers(1, n_experts))
    return raw


@st.composite
def qwen_moe(draw, model_type: str) -> dict:
    raw = draw(llama_like(model_type))
    keys = ["num_experts", None] + (["num_local_experts"] if model_type == "qwen3_moe" else [])
    key = draw(st.sampled_from(keys))
    n_experts = {"qwen2_moe": 60, "qwen3_moe": 128}[model_type]
    if key is not None:
        n_experts = draw(st.integers(0, 8))  # 0 experts: every layer is the dense MLP
        raw[key] = n_experts
    top_default = {"qwen2_moe": 4, "qwen3_moe": 8}[model_type]
    if n_experts < top_default or draw(st.booleans()):
        raw["num_experts_per_tok"] = draw(st.integers(1, max(1, n_experts)))
    maybe(draw, raw, "moe_intermediate_size", WIDTH)
    maybe(draw, raw, "decoder_sparse_step", st.integers(1, 3))
    # indices past the last layer are legal (and ignored) in HF
    maybe(draw, raw, "mlp_only_layers",
          st.lists(st.integers(0, raw["num_hidden_layers"]), max_size=3, unique=True))
    maybe(draw, raw, "norm_topk_prob", st.booleans())
    if model_type == "qwen2_moe":
        maybe(draw, raw, "shared_expert_intermediate_size", WIDTH)
    return raw


@st.composite
def deepseek(draw, model_type: str) -> dict:
    raw = draw(llama_like(model_type))
    v3 = model_type == "deepseek_v3"
    maybe(draw, raw, "kv_lora_rank", SMALL)
    # q_lora_rank: an int (low-rank q path), null (full-rank q_proj) or left out (1536, low-rank)
    maybe(draw, raw, "q_lora_rank", st.one_of(st.none(), SMALL))
    maybe(draw, raw, "qk_nope_head_dim", st.integers(1, 8))
    maybe(draw, raw, "qk_rope_head_dim", st.sampled_from([2, 4, 6, 8]))
    maybe(draw, raw, "v_head_dim", st.integers(1, 8))
    key = draw(st.sampled_from(["n_routed_experts", "num_local_experts" if v3 else "num_experts",
                                None]))
    n_experts = 256 if v3 else 64
    if key is not None:
        n_experts = draw(st.integers(1, 8))
        raw[key] = n_experts
    # DeepSeek-V2's default top-k is None (a model that cannot route): always given for V2
    if not v3 or n_experts < 8 or draw(st.booleans()):
        raw["num_experts_per_tok"] = draw(st.integers(1, n_experts))
    if v3:  # the router groups must divide the experts (HF default: 8 groups, top 4)
        groups = draw(st.sampled_from(divisors(n_experts)))
        raw["n_group"], raw["topk_group"] = groups, draw(st.integers(1, groups))
    maybe(draw, raw, "moe_intermediate_size", WIDTH)
    # 0 shared experts with DeepSeek-V2's mlp_bias leaves a stray bias in HF: a ConfigError
    no_shared_ok = v3 or not raw.get("mlp_bias")
    maybe(draw, raw, "n_shared_experts", st.integers(0 if no_shared_ok else 1, 2))
    maybe(draw, raw, "first_k_dense_replace", st.integers(0, raw["num_hidden_layers"] + 1))
    maybe(draw, raw, "moe_layer_freq", st.integers(1, 2))  # in real configs; HF ignores it
    return raw


# --- other decoders --------------------------------------------------------------------------------

def aliased(draw, raw: dict, names: tuple[str, ...], value) -> None:
    """Set ``value`` under one of several names that HF reads as the same field."""
    raw[draw(st.sampled_from(names))] = value


@st.composite
def gpt2(draw) -> dict:
    hidden, heads, _ = draw(geometry(even=False))
    raw = {"model_type": "gpt2", "vocab_size": draw(VOCAB)}
    aliased(draw, raw, ("n_embd", "hidden_size"), hidden)
    aliased(draw, raw, ("n_head", "num_attention_heads"), heads)
    aliased(draw, raw, ("n_layer", "num_hidden_layers"), draw(LAYERS))
    if draw(st.booleans()):
        aliased(draw, raw, ("n_positions", "max_position_embeddings"), draw(st.integers(8, 300)))
    maybe(draw, raw, "n_inner", st.one_of(st.none(), WIDTH))
    maybe(draw, raw, "activation_function", st.sampled_from(["gelu_new", "gelu", "relu", "silu"]))
    maybe(draw, raw, "tie_word_embeddings", st.booleans())
    maybe(draw, raw, "scale_attn_by_inverse_layer_idx", st.booleans())
    maybe(draw, raw, "add_cross_attention", st.just(False))  # True: see test_unrepresentable
    return raw


@st.composite
def gptj(draw) -> dict:
    hidden, heads, hd = draw(geometry())
    raw = {"model_type": "gptj", "vocab_size": draw(VOCAB)}
    aliased(draw, raw, ("n_embd", "hidden_size"), hidden)
    aliased(draw, raw, ("n_head", "num_attention_heads"), heads)
    aliased(draw, raw, ("n_layer", "num_hidden_layers"), draw(LAYERS))
    maybe(draw, raw, "rotary_dim", st.sampled_from(list(range(2, hd + 1, 2))))  # default 64
    maybe(draw, raw, "n_inner", st.one_of(st.none(), WIDTH))
    maybe(draw, raw, "tie_word_embeddings", st.booleans())
    return raw


@st.composite
def gpt_neox(draw) -> dict:
    hidden, heads, _ = draw(geometry())
    raw = {"model_type": "gpt_neox", "hidden_size": hidden, "num_attention_heads": heads,
           "num_hidden_layers": draw(LAYERS), "vocab_size": draw(VOCAB)}
    maybe(draw, raw, "intermediate_size", WIDTH)
    maybe(draw, raw, "attention_bias", st.booleans())
    maybe(draw, raw, "use_parallel_residual", st.booleans())
    maybe(draw, raw, "tie_word_embeddings", st.booleans())
    maybe(draw, raw, "rotary_pct", st.sampled_from([0.25, 0.5, 1.0]))
    return raw


@st.composite
def falcon(draw) -> dict:
    alibi = draw(st.booleans())
    hidden, heads, _ = draw(geometry())  # HF validates an even rotary head_dim even with ALiBi
    raw = {"model_type": "falcon", "num_attention_heads": heads, "num_hidden_layers": draw(LAYERS),
           "vocab_size": draw(VOCAB), "alibi": alibi}
    aliased(draw, raw, ("hidden_size", "n_embed"), hidden)
    for key in ("new_decoder_architecture", "multi_query", "parallel_attn", "bias",
                "tie_word_embeddings"):
        maybe(draw, raw, key, st.booleans())
    maybe(draw, raw, "num_kv_heads", st.sampled_from(divisors(heads)))
    maybe(draw, raw, "num_ln_in_parallel_attn", st.sampled_from([None, 1, 2]))
    maybe(draw, raw, "ffn_hidden_size", WIDTH)
    return raw


@st.composite
def opt(draw) -> dict:
    hidden, heads, _ = draw(geometry(even=False))
    raw = {"model_type": "opt", "hidden_size": hidden, "num_attention_heads": heads,
           "num_hidden_layers": draw(LAYERS), "vocab_size": draw(VOCAB)}
    maybe(draw, raw, "ffn_dim", WIDTH)
    maybe(draw, raw, "max_position_embeddings", st.integers(8, 300))
    for key in ("do_layer_norm_before", "_remove_final_layer_norm", "layer_norm_elementwise_affine",
                "enable_bias", "tie_word_embeddings"):
        maybe(draw, raw, key, st.booleans())
    maybe(draw, raw, "word_embed_proj_dim", st.one_of(st.none(), st.integers(8, 64)))
    maybe(draw, raw, "activation_function", st.sampled_from(["relu", "gelu"]))
    return raw


@st.composite
def bloom(draw) -> dict:
    hidden, heads, _ = draw(geometry(even=False))
    raw = {"model_type": "bloom", "vocab_size": draw(VOCAB)}
    if draw(st.booleans()):  # else BloomConfig's hidden_size 64 and 8 heads
        aliased(draw, raw, ("hidden_size", "n_embed"), hidden)
        aliased(draw, raw, ("n_head", "num_attention_heads"), heads)
    if draw(st.booleans()):  # else 2 layers
        aliased(draw, raw, ("n_layer", "num_hidden_layers"), draw(LAYERS))
    maybe(draw, raw, "tie_word_embeddings", st.booleans())
    maybe(draw, raw, "apply_residual_connection_post_layernorm", st.booleans())
    return raw


# --- encoders and encoder-decoders -------------------------------------------------------------------

@st.composite
def bert(draw, model_type: str) -> dict:
    hidden, heads, _ = draw(geometry(even=False))
    raw = {"model_type": model_type, "hidden_size": hidden, "num_attention_heads": heads,
           "num_hidden_layers": draw(LAYERS)}
    if draw(st.integers(0, 4)):  # rarely left to the default (30522 or 50265)
        raw["vocab_size"] = draw(VOCAB)
    maybe(draw, raw, "intermediate_size", WIDTH)
    maybe(draw, raw, "max_position_embeddings", st.integers(8, 600))
    maybe(draw, raw, "type_vocab_size", st.integers(0, 3))
    maybe(draw, raw, "hidden_act", st.sampled_from(["gelu", "relu", "gelu_new"]))
    maybe(draw, raw, "add_cross_attention", st.just(False))  # True: see test_unrepresentable
    return raw


@st.composite
def t5(draw) -> dict:
    d_model, heads, _ = draw(geometry(even=False))
    raw = {"model_type": "t5", "vocab_size": draw(VOCAB)}
    aliased(draw, raw, ("d_model", "hidden_size"), d_model)
    aliased(draw, raw, ("num_heads", "num_attention_heads"), heads)
    aliased(draw, raw, ("num_layers", "num_hidden_layers"), draw(LAYERS))
    if draw(st.booleans()):  # d_kv need not be d_model // num_heads in T5
        aliased(draw, raw, ("d_kv", "head_dim"), draw(st.integers(1, 16)))
    maybe(draw, raw, "num_decoder_layers", st.one_of(st.none(), LAYERS))
    maybe(draw, raw, "d_ff", WIDTH)
    maybe(draw, raw, "feed_forward_proj",
          st.sampled_from(["relu", "gelu", "gated-gelu", "gated-silu", "gated-relu", "gelu_new"]))
    maybe(draw, raw, "relative_attention_num_buckets", st.integers(1, 40))
    maybe(draw, raw, "tie_word_embeddings", st.booleans())
    return raw


@st.composite
def bart(draw) -> dict:
    d_model, heads, _ = draw(geometry(even=False))
    ffn = draw(WIDTH)
    raw = {"model_type": "bart", "vocab_size": draw(VOCAB), "encoder_attention_heads": heads,
           "decoder_attention_heads": heads, "encoder_ffn_dim": ffn, "decoder_ffn_dim": ffn}
    aliased(draw, raw, ("d_model", "hidden_size"), d_model)
    aliased(draw, raw, ("encoder_layers", "num_hidden_layers"), draw(LAYERS))
    raw["decoder_layers"] = draw(LAYERS)
    maybe(draw, raw, "max_position_embeddings", st.integers(8, 300))
    maybe(draw, raw, "activation_function", st.sampled_from(["gelu", "relu", "gelu_new"]))
    # untied BART (separate shared/encoder/decoder token tables): see test_unrepresentable
    maybe(draw, raw, "tie_word_embeddings", st.just(True))
    maybe(draw, raw, "scale_embedding", st.booleans())
    # mBART fields, in some BART-typed config.json files; the BART model class ignores them
    maybe(draw, raw, "normalize_before", st.booleans())
    maybe(draw, raw, "add_final_layer_norm", st.booleans())
    return raw


STRATEGIES = {
    **{t: dense_llama(t) for t in ("llama", "mistral", "qwen2", "qwen3", "gemma", "gemma2",
                                   "phi3", "olmo", "starcoder2")},
    "mixtral": mixtral(), "qwen2_moe": qwen_moe("qwen2_moe"), "qwen3_moe": qwen_moe("qwen3_moe"),
    "deepseek_v2": deepseek("deepseek_v2"), "deepseek_v3": deepseek("deepseek_v3"),
    "gpt2": gpt2(), "gptj": gptj(), "gpt_neox": gpt_neox(), "falcon": falcon(), "opt": opt(),
    "bloom": bloom(), "bert": bert("bert"), "roberta": bert("roberta"), "t5": t5(), "bart": bart(),
}
