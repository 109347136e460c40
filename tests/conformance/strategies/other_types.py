"""The model types added after the first 24 (tests/conformance/test_hf_drawn_configs_other_types.py):
aliases and small converters over the earlier structures, and Qwen-VL text models."""

from __future__ import annotations

from hypothesis import assume
from hypothesis import strategies as st

from .common import divisors, maybe
from .decoders import ACTS, LAYERS, VOCAB, WIDTH, geometry

MOE = {"dbrx", "granitemoe", "glm4_moe", "olmoe", "phimoe", "minimax_m2", "qwen3_vl_moe"}
VL = {"qwen2_vl", "qwen2_5_vl", "qwen3_vl", "qwen3_vl_moe"}
#: the types this file draws: aliases and small converters over the earlier structures
MORE_TYPES = ("granite", "granitemoe", "smollm3", "ministral", "ministral3", "ernie4_5",
              "seed_oss", "hunyuan_v1_dense", "glm4", "glm4_moe", "olmoe", "phimoe",
              "minimax_m2", "dbrx", "codegen", "gpt_bigcode", "gpt_neo", "phi", "stablelm",
              "qwen2_vl", "qwen2_5_vl", "qwen3_vl", "qwen3_vl_moe")


#: HF class defaults of num_key_value_heads (None: num_attention_heads).
KV_DEFAULT = {"granite": None, "granitemoe": None, "smollm3": 4, "ministral": 8, "ministral3": 8,
              "ernie4_5": 2, "seed_oss": 8, "hunyuan_v1_dense": None, "glm4": 2, "glm4_moe": 8,
              "olmoe": None, "phimoe": 8, "minimax_m2": 8, "stablelm": 32, "phi": None,
              "qwen2_vl": 8, "qwen2_5_vl": 8, "qwen3_vl": 32, "qwen3_vl_moe": 16}
#: HF class default head_dim of the VL text configs (None: hidden_size // heads)
KV_HEAD_DIM = {"qwen3_vl": 128, "qwen3_vl_moe": None}
#: the types whose num_key_value_heads may be null (``int | None`` and a __post_init__ fallback)
KV_NULL = {"granite", "granitemoe", "smollm3", "ernie4_5", "seed_oss",
           "hunyuan_v1_dense", "olmoe", "phi"}
#: the types whose modeling code reads ``head_dim`` (an explicit one, or the class default)
HEAD_DIM = {"granite", "granitemoe", "smollm3", "ministral", "ministral3", "ernie4_5", "seed_oss",
            "hunyuan_v1_dense", "glm4", "glm4_moe", "phimoe", "minimax_m2",
            "qwen3_vl", "qwen3_vl_moe", "qwen2_vl", "qwen2_5_vl"}  # Qwen2-VL's attention ignores it
#: the types whose config class has a sliding_window field (the others' files do not carry one)
WINDOWED = {"smollm3", "ministral", "ministral3", "phimoe", "qwen2_vl", "qwen2_5_vl"}
#: boolean fields each type reads (drawn for every type: the others must ignore them)
BOOLS = ("attention_bias", "mlp_bias", "use_bias", "attention_out_bias", "use_qkv_bias",
         "use_parallel_residual", "use_qk_norm", "qk_layernorm", "lm_head_bias",
         "tie_word_embeddings")


@st.composite
def llama_type(draw, model_type: str) -> dict:
    kv_default = KV_DEFAULT[model_type]
    omit_kv = draw(st.booleans())
    mult = kv_default if (omit_kv and kv_default) else 1
    hidden, heads, hd = draw(geometry(heads_multiple_of=mult, max_heads=max(8, mult)))
    # partial rotary (Phi 0.5, StableLM 0.25 of head_dim): HF's forward needs an even width
    if model_type in ("phi", "stablelm"):
        assume(hd % (4 if model_type == "phi" else 8) == 0)
    raw = {"model_type": model_type, "hidden_size": hidden, "num_attention_heads": heads,
           "num_hidden_layers": draw(LAYERS), "vocab_size": draw(VOCAB),
           "intermediate_size": draw(WIDTH), "pad_token_id": 0}
    if not omit_kv:
        raw["num_key_value_heads"] = draw(st.sampled_from(
            divisors(heads) + [None] * (model_type in KV_NULL)))
    if model_type in ("hunyuan_v1_dense", "ministral"):  # required: HF builds nothing without it
        raw["head_dim"] = draw(st.sampled_from([2, 4, 6, 8, 12, 16]))
    elif model_type in HEAD_DIM:
        maybe(draw, raw, "head_dim", st.sampled_from([2, 4, 6, 8, 12, 16]))
    for key in BOOLS:
        if key == "qk_layernorm" and model_type == "stablelm":
            continue  # true: see test_unrepresentable
        maybe(draw, raw, key, st.booleans())
    maybe(draw, raw, "hidden_act", st.sampled_from(ACTS))
    maybe(draw, raw, "max_position_embeddings", st.integers(16, 4096))
    if model_type in WINDOWED:
        maybe(draw, raw, "sliding_window", st.one_of(st.none(), st.integers(4, 64)))
        maybe(draw, raw, "use_sliding_window", st.booleans())
    n = raw["num_hidden_layers"]
    if model_type in ("ministral", "smollm3", "qwen2_vl", "qwen2_5_vl"):
        maybe(draw, raw, "layer_types", st.lists(
            st.sampled_from(["sliding_attention", "full_attention"]), min_size=n, max_size=n))
    if model_type in ("qwen2_vl", "qwen2_5_vl"):
        maybe(draw, raw, "max_window_layers", st.integers(0, 5))
    if model_type == "smollm3":
        maybe(draw, raw, "no_rope_layer_interval", st.integers(1, 4))
        maybe(draw, raw, "no_rope_layers", st.lists(st.integers(0, 1), min_size=n, max_size=n))
    if model_type in ("granite", "granitemoe"):
        for key in ("embedding_multiplier", "residual_multiplier", "attention_multiplier",
                    "logits_scaling"):
            maybe(draw, raw, key, st.floats(0.1, 4))
    if model_type in MOE:
        experts = draw(st.integers(2 if model_type == "phimoe" else 1, 6))
        key = {"granitemoe": "num_local_experts", "glm4_moe": "n_routed_experts",
               "olmoe": "num_experts", "phimoe": "num_local_experts",
               "minimax_m2": "num_local_experts", "qwen3_vl_moe": "num_experts"}[model_type]
        alias = {"glm4_moe": "num_local_experts", "olmoe": "num_local_experts",
                 "minimax_m2": "num_experts"}.get(model_type, key)
        raw[draw(st.sampled_from([key, alias]))] = experts
        raw["num_experts_per_tok"] = draw(st.integers(1, experts))
        if model_type in ("glm4_moe", "qwen3_vl_moe"):
            maybe(draw, raw, "moe_intermediate_size", WIDTH)
        if model_type == "glm4_moe":
            maybe(draw, raw, "n_shared_experts", st.integers(0, 2))
            maybe(draw, raw, "first_k_dense_replace", st.integers(0, n + 1))
            groups = draw(st.sampled_from(divisors(experts)))
            raw["n_group"], raw["topk_group"] = groups, draw(st.integers(1, groups))
        if model_type == "qwen3_vl_moe":
            maybe(draw, raw, "decoder_sparse_step", st.integers(1, 3))
            maybe(draw, raw, "mlp_only_layers",
                  st.lists(st.integers(0, n), max_size=3, unique=True))
        if model_type == "phimoe":
            raw["router_jitter_noise"] = 0.0  # the jitter draws random numbers (not on meta)
    if model_type == "olmoe":
        maybe(draw, raw, "clip_qkv", st.one_of(st.none(), st.floats(1, 10)))
    if model_type in ("phi", "stablelm"):
        maybe(draw, raw, "partial_rotary_factor", st.sampled_from([0.5, 1.0]))
    return raw


@st.composite
def vl_type(draw, model_type: str) -> dict:
    """A VL config: the text fields inside text_config (current files) or at the top level
    (Qwen2-VL's older files); a tiny vision tower, which txcalc does not count."""
    text = draw(llama_type(model_type))
    text.pop("model_type")
    raw = {"model_type": model_type,
           "vision_config": {"depth": 1, "hidden_size": 16, "embed_dim": 16, "num_heads": 2,
                             "intermediate_size": 16, "out_hidden_size": text["hidden_size"],
                             "hidden_act": "silu"}}
    if model_type == "qwen3_vl" or model_type == "qwen3_vl_moe":
        raw["vision_config"]["deepstack_visual_indexes"] = []
    # the multimodal rotary sections must add up to half the rotary width
    hd = (text.get("head_dim") or KV_HEAD_DIM.get(model_type)
          or text["hidden_size"] // text["num_attention_heads"])
    text["rope_parameters"] = {"rope_type": "default", "mrope_section": [hd // 2, 0, 0],
                               "rope_theta": 10000.0}
    if model_type in ("qwen2_vl", "qwen2_5_vl") and draw(st.booleans()):
        tie = text.pop("tie_word_embeddings", None)
        raw.update(text)
        if tie is not None:
            raw["tie_word_embeddings"] = tie
    else:
        if draw(st.booleans()) and "tie_word_embeddings" in text:
            raw["tie_word_embeddings"] = text.pop("tie_word_embeddings")
        raw["text_config"] = text
    return raw


@st.composite
def gpt_bigcode(draw) -> dict:
    hidden, heads, _ = draw(geometry(even=False))
    raw = {"model_type": "gpt_bigcode", "vocab_size": draw(VOCAB)}
    raw[draw(st.sampled_from(["n_embd", "hidden_size"]))] = hidden
    raw[draw(st.sampled_from(["n_head", "num_attention_heads"]))] = heads
    raw[draw(st.sampled_from(["n_layer", "num_hidden_layers"]))] = draw(LAYERS)
    maybe(draw, raw, "n_positions", st.integers(8, 300))
    maybe(draw, raw, "n_inner", st.one_of(st.none(), WIDTH))
    maybe(draw, raw, "multi_query", st.booleans())
    maybe(draw, raw, "activation_function", st.sampled_from(["gelu_pytorch_tanh", "gelu", "relu"]))
    maybe(draw, raw, "tie_word_embeddings", st.booleans())
    return raw


@st.composite
def codegen(draw) -> dict:
    # HF's CodeGen splits the fused qkv into 4 groups (mp_num): its forward needs heads % 4 == 0
    hidden, heads, hd = draw(geometry(heads_multiple_of=4))
    raw = {"model_type": "codegen", "vocab_size": draw(VOCAB)}
    raw[draw(st.sampled_from(["n_embd", "hidden_size"]))] = hidden
    raw[draw(st.sampled_from(["n_head", "num_attention_heads"]))] = heads
    raw[draw(st.sampled_from(["n_layer", "num_hidden_layers"]))] = draw(LAYERS)
    raw["rotary_dim"] = draw(st.sampled_from(list(range(2, hd + 1, 2))))
    maybe(draw, raw, "n_inner", st.one_of(st.none(), WIDTH))
    maybe(draw, raw, "tie_word_embeddings", st.booleans())
    maybe(draw, raw, "activation_function", st.sampled_from(["gelu_new", "gelu", "relu"]))
    return raw


@st.composite
def gpt_neo(draw) -> dict:
    hidden, heads, _ = draw(geometry(even=False))
    n = draw(LAYERS)
    kinds = draw(st.lists(st.sampled_from(["global", "local"]), min_size=n, max_size=n))
    raw = {"model_type": "gpt_neo", "vocab_size": draw(VOCAB), "hidden_size": hidden,
           "attention_types": [[[k], 1] for k in kinds]}
    raw[draw(st.sampled_from(["num_heads", "num_attention_heads"]))] = heads
    raw[draw(st.sampled_from(["num_layers", "num_hidden_layers"]))] = n
    maybe(draw, raw, "intermediate_size", st.one_of(st.none(), WIDTH))
    maybe(draw, raw, "window_size", st.integers(1, 40))
    maybe(draw, raw, "max_position_embeddings", st.integers(8, 300))
    maybe(draw, raw, "tie_word_embeddings", st.booleans())
    return raw


@st.composite
def dbrx(draw) -> dict:
    hidden, heads, _ = draw(geometry())
    n_experts = draw(st.integers(1, 6))
    raw = {"model_type": "dbrx", "vocab_size": draw(VOCAB),
           # HF's DBRX attention needs both (it clamps q/k/v whatever clip_qkv says)
           "attn_config": {"rope_theta": 10000.0, "clip_qkv": 8.0},
           "ffn_config": {"moe_num_experts": n_experts,
                          "moe_top_k": draw(st.integers(1, n_experts))}}
    # not the alias hidden_size: HF resolves it after sizing the experts by the default d_model
    raw["d_model"] = hidden
    raw[draw(st.sampled_from(["n_heads", "num_attention_heads"]))] = heads
    raw[draw(st.sampled_from(["n_layers", "num_hidden_layers"]))] = draw(LAYERS)
    maybe(draw, raw["attn_config"], "kv_n_heads", st.sampled_from(divisors(heads)))
    maybe(draw, raw["ffn_config"], "ffn_hidden_size", WIDTH)
    maybe(draw, raw["ffn_config"], "ffn_act_fn", st.sampled_from(
        [{"name": a} for a in ("silu", "gelu", "gelu_pytorch_tanh")]))
    maybe(draw, raw, "max_seq_len", st.integers(16, 4096))
    return raw


STRATEGIES = {t: (vl_type(t) if t in VL else llama_type(t)) for t in MORE_TYPES}
STRATEGIES.update({"gpt_bigcode": gpt_bigcode(), "codegen": codegen(), "gpt_neo": gpt_neo(),
                   "dbrx": dbrx()})
