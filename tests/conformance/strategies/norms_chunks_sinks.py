"""Norm placements, chunked attention and attention sinks (tests/conformance/test_hf_norms_chunks_sinks.py):
Gemma 3, Llama 4, gpt-oss, OLMo 2/3, EXAONE 4, Cohere; Gemma 2 with soft-capping."""

from __future__ import annotations

from hypothesis import strategies as st

from .common import divisors, maybe
from .decoders import ACTS, LAYERS, VOCAB, WIDTH, dense_llama, geometry

#: a tiny SigLIP for Gemma 3 (the default vision tower is 400M: fine on meta, slow to draw)
GEMMA3_VISION = dict(hidden_size=16, num_hidden_layers=1, num_attention_heads=2,
                     intermediate_size=8, image_size=28, patch_size=14)


@st.composite
def decoder(draw, model_type: str, kv_default: int | None, head_dim: bool = True,
            act_key: str = "hidden_act") -> dict:
    omit_kv = kv_default is not None and draw(st.booleans())
    hidden, heads, _ = draw(geometry(heads_multiple_of=kv_default if omit_kv else 1,
                                     max_heads=8))
    raw = {"model_type": model_type, "hidden_size": hidden, "num_attention_heads": heads,
           "num_hidden_layers": draw(LAYERS), "vocab_size": draw(VOCAB)}
    if not omit_kv:
        raw["num_key_value_heads"] = draw(st.sampled_from(divisors(heads)))
    maybe(draw, raw, "intermediate_size", WIDTH)
    if head_dim:
        maybe(draw, raw, "head_dim", st.sampled_from([2, 4, 6, 8, 12, 16]))
    maybe(draw, raw, "attention_bias", st.booleans())
    maybe(draw, raw, "tie_word_embeddings", st.booleans())
    maybe(draw, raw, act_key, st.sampled_from(ACTS))
    maybe(draw, raw, "max_position_embeddings", st.integers(16, 4096))
    return raw


def layer_types(draw, raw: dict, kinds=("sliding_attention", "full_attention")) -> None:
    n = raw["num_hidden_layers"]
    maybe(draw, raw, "layer_types", st.lists(st.sampled_from(kinds), min_size=n, max_size=n))


def window(draw, raw: dict, null: bool = True) -> None:
    values = st.integers(2, 8)
    maybe(draw, raw, "sliding_window", st.one_of(st.none(), values) if null else values)


@st.composite
def gemma3_text(draw) -> dict:
    # HF validates hidden_size % heads == 0: geometry draws hidden = heads x head width
    raw = draw(decoder("gemma3_text", 4, act_key="hidden_activation"))
    raw.setdefault("head_dim", draw(st.sampled_from([4, 8, 256])))  # default 256
    window(draw, raw, null=False)
    maybe(draw, raw, "sliding_window_pattern", st.integers(1, 4))
    layer_types(draw, raw)
    for key in ("final_logit_softcapping", "attn_logit_softcapping"):
        maybe(draw, raw, key, st.one_of(st.none(), st.floats(1, 50)))
    maybe(draw, raw, "query_pre_attn_scalar", st.integers(1, 256))
    return raw


@st.composite
def gemma3(draw) -> dict:
    text = draw(gemma3_text())
    text.pop("model_type")
    raw = {"model_type": "gemma3", "text_config": text, "vision_config": GEMMA3_VISION,
           "mm_tokens_per_image": 4}
    maybe(draw, raw, "tie_word_embeddings", st.booleans())
    return raw


@st.composite
def llama4_text(draw) -> dict:
    raw = draw(decoder("llama4_text", 8))
    n = raw["num_hidden_layers"]
    maybe(draw, raw, "intermediate_size_mlp", WIDTH)
    e = draw(st.integers(1, 4))
    raw["num_local_experts"] = e  # the default (16) is drawn in test_llama4_defaults
    maybe(draw, raw, "num_experts_per_tok", st.integers(1, e))
    maybe(draw, raw, "interleave_moe_layer_step", st.integers(1, 3))
    maybe(draw, raw, "moe_layers", st.lists(st.integers(0, n), max_size=3, unique=True))
    maybe(draw, raw, "no_rope_layers", st.lists(st.integers(0, 1), min_size=n, max_size=n))
    maybe(draw, raw, "no_rope_layer_interval", st.integers(1, 4))
    maybe(draw, raw, "attention_chunk_size", st.one_of(st.none(), st.integers(2, 8)))
    maybe(draw, raw, "use_qk_norm", st.booleans())
    maybe(draw, raw, "attn_temperature_tuning", st.booleans())
    layer_types(draw, raw, ("chunked_attention", "full_attention"))
    if raw.get("attention_chunk_size", 8192) is None:
        raw.pop("layer_types", None)  # a chunked layer needs a chunk size in HF
    return raw


@st.composite
def llama4(draw) -> dict:
    text = draw(llama4_text())
    text.pop("model_type")
    raw = {"model_type": "llama4", "text_config": text}
    maybe(draw, raw, "tie_word_embeddings", st.booleans())  # ignored: text_config's decides
    return raw


@st.composite
def gpt_oss(draw) -> dict:
    raw = draw(decoder("gpt_oss", 8))
    raw.setdefault("head_dim", draw(st.sampled_from([4, 8, 64])))  # default 64
    e = draw(st.integers(1, 4))
    raw["num_local_experts"] = e
    raw["num_experts_per_tok"] = draw(st.integers(1, e))  # the default 4 needs 4 experts
    window(draw, raw)
    layer_types(draw, raw)
    return raw


@st.composite
def olmo(draw, model_type: str) -> dict:
    raw = draw(decoder(model_type, None))
    if model_type == "olmo3":
        window(draw, raw)
        layer_types(draw, raw)
    return raw


@st.composite
def exaone4(draw) -> dict:
    raw = draw(decoder("exaone4", 32 if False else None))
    window(draw, raw, null=False)  # null with the default pattern: HF divides by zero
    maybe(draw, raw, "sliding_window_pattern", st.integers(1, 4))
    layer_types(draw, raw)
    return raw


@st.composite
def cohere(draw, model_type: str) -> dict:
    raw = draw(decoder(model_type, None))
    if model_type == "cohere":
        maybe(draw, raw, "use_qk_norm", st.booleans())
    else:
        window(draw, raw)
        maybe(draw, raw, "sliding_window_pattern", st.integers(1, 4))
        layer_types(draw, raw)
    maybe(draw, raw, "logit_scale", st.floats(0.01, 1))
    return raw


STRATEGIES = {
    "gemma3_text": gemma3_text(), "gemma3": gemma3(), "llama4_text": llama4_text(),
    "llama4": llama4(), "gpt_oss": gpt_oss(), "olmo2": olmo("olmo2"), "olmo3": olmo("olmo3"),
    "exaone4": exaone4(), "cohere": cohere("cohere"), "cohere2": cohere("cohere2"),
}


@st.composite
def gemma2_softcapped(draw) -> dict:
    raw = draw(dense_llama("gemma2"))
    for key in ("final_logit_softcapping", "attn_logit_softcapping"):
        raw[key] = draw(st.one_of(st.none(), st.floats(1, 50)))
    maybe(draw, raw, "query_pre_attn_scalar", st.integers(1, 256))
    return raw
