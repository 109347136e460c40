"""Vision-language configs (tests/conformance/test_multimodal.py): LLaVA, PaliGemma, Gemma 3,
Idefics3, SmolVLM, Mistral 3, InternVL, Qwen-VL; tiny vision towers."""

from __future__ import annotations

from hypothesis import strategies as st

from .common import maybe


@st.composite
def text(draw, head_dim: bool = True) -> dict:
    heads = draw(st.sampled_from([2, 4]))
    kv = draw(st.sampled_from([h for h in (1, 2, 4) if heads % h == 0]))
    out = {"hidden_size": heads * 8, "num_attention_heads": heads, "num_key_value_heads": kv,
           "num_hidden_layers": draw(st.integers(1, 2)), "intermediate_size": draw(
               st.integers(8, 40)), "vocab_size": draw(st.integers(64, 200)), "pad_token_id": 0}
    if head_dim:
        out["head_dim"] = 8
    return out


@st.composite
def vit(draw, patch_sizes=(2, 4)) -> dict:
    patch = draw(st.sampled_from(list(patch_sizes)))
    return {"hidden_size": draw(st.sampled_from([8, 16])), "num_attention_heads": 2,
            "intermediate_size": draw(st.integers(8, 32)),
            "num_hidden_layers": draw(st.integers(1, 2)), "patch_size": patch,
            "image_size": patch * draw(st.sampled_from([2, 4])),
            "num_channels": draw(st.sampled_from([1, 3]))}


@st.composite
def llava(draw, model_type: str) -> dict:
    raw = {"model_type": model_type, "text_config": draw(text(False)),
           "vision_config": draw(vit()) | {"model_type": draw(st.sampled_from(
               ["clip_vision_model", "siglip_vision_model"]))}}
    maybe(draw, raw, "multimodal_projector_bias", st.booleans())
    maybe(draw, raw, "vision_feature_layer", st.sampled_from([-1, -2, [-2, -1]]))
    maybe(draw, raw, "tie_word_embeddings", st.booleans())
    maybe(draw, raw, "vision_feature_select_strategy", st.sampled_from(["default", "full"]))
    if raw["vision_config"]["model_type"] == "siglip_vision_model":
        maybe(draw, raw["vision_config"], "vision_use_head", st.booleans())
    return raw


@st.composite
def paligemma(draw) -> dict:
    raw = {"model_type": "paligemma", "text_config": draw(text()),
           "vision_config": draw(vit())}
    maybe(draw, raw["vision_config"], "vision_use_head", st.booleans())
    maybe(draw, raw, "projection_dim", st.integers(4, 24))
    maybe(draw, raw, "tie_word_embeddings", st.booleans())
    return raw


@st.composite
def gemma3(draw) -> dict:
    raw = {"model_type": "gemma3", "text_config": draw(text()), "vision_config": draw(vit())}
    maybe(draw, raw["vision_config"], "vision_use_head", st.booleans())
    maybe(draw, raw, "mm_tokens_per_image", st.sampled_from([4, 16]))
    maybe(draw, raw, "tie_word_embeddings", st.booleans())
    return raw


@st.composite
def idefics3(draw, model_type: str) -> dict:
    raw = {"model_type": model_type, "text_config": draw(text(False)),
           "vision_config": draw(vit())}
    maybe(draw, raw, "scale_factor", st.sampled_from([1, 2]))
    maybe(draw, raw, "tie_word_embeddings", st.booleans())
    return raw


@st.composite
def mistral3(draw) -> dict:
    v = draw(vit()) | {"head_dim": 4}
    v["hidden_size"] = 8
    raw = {"model_type": "mistral3", "text_config": draw(text()), "vision_config": v}
    maybe(draw, raw, "multimodal_projector_bias", st.booleans())
    maybe(draw, raw, "spatial_merge_size", st.sampled_from([1, 2]))
    maybe(draw, raw, "tie_word_embeddings", st.booleans())
    return raw


@st.composite
def internvl(draw) -> dict:
    v = draw(vit())
    for key in ("attention_bias", "use_qk_norm", "use_absolute_position_embeddings",
                "use_mean_pooling"):
        maybe(draw, v, key, st.booleans())
    maybe(draw, v, "layer_scale_init_value", st.sampled_from([0.0, 0.1]))
    raw = {"model_type": "internvl", "text_config": draw(text(False)), "vision_config": v}
    maybe(draw, raw, "vision_feature_layer", st.sampled_from([-1, [-2, -1]]))
    maybe(draw, raw, "tie_word_embeddings", st.booleans())
    return raw


@st.composite
def qwen_vl(draw, model_type: str) -> dict:
    t = draw(text(model_type.startswith("qwen3")))
    if model_type == "qwen3_vl_moe":
        t.update(num_experts=4, num_experts_per_tok=2, moe_intermediate_size=8)
    v = {"depth": draw(st.integers(1, 2)), "num_heads": 2, "patch_size": 2,
         "temporal_patch_size": draw(st.sampled_from([1, 2])),
         "spatial_merge_size": draw(st.sampled_from([1, 2])),
         "in_channels": draw(st.sampled_from([1, 3]))}
    if model_type == "qwen2_vl":
        v.update(embed_dim=draw(st.sampled_from([8, 16])), hidden_size=t["hidden_size"])
        maybe(draw, v, "mlp_ratio", st.sampled_from([2, 4]))
    else:
        v.update(hidden_size=draw(st.sampled_from([8, 16])), intermediate_size=draw(
            st.integers(8, 24)), out_hidden_size=t["hidden_size"])
    if model_type.startswith("qwen3"):
        v.update(num_position_embeddings=16, deepstack_visual_indexes=draw(
            st.sampled_from([[], [0]])))
    raw = {"model_type": model_type, "text_config": t, "vision_config": v}
    maybe(draw, raw, "tie_word_embeddings", st.booleans())
    return raw


STRATEGIES = {
    "llava": llava("llava"), "llava_next": llava("llava_next"), "paligemma": paligemma(),
    "gemma3": gemma3(), "idefics3": idefics3("idefics3"), "smolvlm": idefics3("smolvlm"),
    "mistral3": mistral3(), "internvl": internvl(), "qwen2_vl": qwen_vl("qwen2_vl"),
    "qwen2_5_vl": qwen_vl("qwen2_5_vl"), "qwen3_vl": qwen_vl("qwen3_vl"),
    "qwen3_vl_moe": qwen_vl("qwen3_vl_moe"),
}
