"""Vision-language configs: vision towers and projectors sized from ``vision_config``, the
language model read from ``text_config``, and the image tokens per image; Mllama's gated
cross-attention layers and tower."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ..checks import _show
from ...errors import ConfigError
from .fields import Fields, layer_list, read_decoder, read_dropouts, resolve_aliases, text_part

# Each vision-language type reads its language model from ``text_config`` (its type's
# converter) and sizes its vision tower and projector from ``vision_config`` exactly as the HF
# ``*ForConditionalGeneration`` class builds them (transformers 5.x). The tower's parameters
# are one params-only op (``vision``: weights, gradients and optimizer states; its own FLOPs
# and activations are not modelled); the language model sees ``image_tokens`` per image.
# A sub-config given as a dict takes its class's defaults (``_VISION_DEFAULTS``); an absent
# one the composite class's ``init_kwargs`` (``Vision.absent``), as HF's SubConfigSpec does.
#
# Image tokens per image (``--images N``; what the processor inserts into the prompt):
#   llava, llava_next  (image_size / patch_size)^2 (+ 1: CLIP's class token; - 1 with
#                      vision_feature_select_strategy "default": 576 for CLIP-L/336);
#                      llava_next: the base image plus its anyres tiles (image_grid_pinpoints:
#                      ModelConfig.image_hw_tokens, as LlavaNextProcessor counts them; needs
#                      --image-size)
#   paligemma          (image_size / patch_size)^2 (256 at 224 px)
#   gemma3             mm_tokens_per_image (256)
#   idefics3, smolvlm  (image_size / patch_size)^2 / scale_factor^2 per tile (N counts tiles)
#   mistral3 (pixtral) (image_size / patch / merge)^2 + one [IMG_BREAK]/[IMG_END] per row,
#                      at the config's image_size
#   internvl           (image_size / patch_size)^2 x downsample_ratio^2 per tile (256 at
#                      448 px, patch 14, ratio 0.5)
#   qwen2_vl, qwen2_5_vl, qwen3_vl(_moe)  round(P / (patch_size x spatial_merge_size))^2 for
#                      a P x P image (``--image-size P``), the area clamped into
#                      Qwen2VLImageProcessor's default [min_pixels 3136, max_pixels 1,003,520]
#                      as its smart_resize does (a checkpoint's preprocessor_config.json may
#                      set others: Qwen2-VL-7B-Instruct's max_pixels is 12,845,056)
_VISION_DEFAULTS: dict[str, dict[str, Any]] = {
    "clip_vision_model": dict(hidden_size=768, intermediate_size=3072, num_hidden_layers=12,
                              num_channels=3, image_size=224, patch_size=32),
    "siglip_vision_model": dict(hidden_size=768, intermediate_size=3072, num_hidden_layers=12,
                                num_channels=3, image_size=224, patch_size=16,
                                vision_use_head=True),
    "idefics3_vision": dict(hidden_size=1152, intermediate_size=3072, num_hidden_layers=12,
                            num_channels=3, image_size=224, patch_size=32),
    "smolvlm_vision": dict(hidden_size=1152, intermediate_size=3072, num_hidden_layers=12,
                           num_channels=3, image_size=224, patch_size=32),
    "pixtral": dict(hidden_size=1024, intermediate_size=4096, num_hidden_layers=24,
                    num_channels=3, image_size=1024, patch_size=16),
    "internvl_vision": dict(hidden_size=1024, intermediate_size=4096, num_hidden_layers=24,
                            num_channels=3, image_size=448, patch_size=14, attention_bias=False,
                            use_qk_norm=False, layer_scale_init_value=0.1,
                            use_absolute_position_embeddings=True, use_mean_pooling=True),
    "qwen2_vl_vision": dict(depth=32, embed_dim=1280, hidden_size=3584, mlp_ratio=4, in_channels=3,
                     patch_size=14, spatial_merge_size=2, temporal_patch_size=2),
    "qwen2_5_vl_vision": dict(depth=32, hidden_size=3584, intermediate_size=3420, in_channels=3,
                       patch_size=14, spatial_merge_size=2, temporal_patch_size=2,
                       out_hidden_size=3584),
    "qwen3_vl_vision": dict(depth=27, hidden_size=1152, intermediate_size=4304, in_channels=3,
                     patch_size=16, spatial_merge_size=2, temporal_patch_size=2,
                     out_hidden_size=3584, num_position_embeddings=2304,
                     deepstack_visual_indexes=[8, 16, 24]),
}


_VISION_DEFAULTS["qwen3_vl_moe_vision"] = _VISION_DEFAULTS["qwen3_vl_vision"]


#: LLaVA's tower when vision_config is absent (CLIP-L/336)
CLIP_LLAVA = dict(model_type="clip_vision_model", hidden_size=1024, intermediate_size=4096,
                  patch_size=14, image_size=336, num_hidden_layers=24)


@dataclass(frozen=True)
class Vision:
    """A vision-language type's sub-configs; a registry record field. ``tower``: the vision
    model_type when vision_config has none; ``absent``: the composite class's init_kwargs when
    vision_config is absent; ``text``: the text model_type when text_config has none; ``tie``:
    the default of the top-level tie_word_embeddings."""

    tower: str
    absent: dict[str, Any] = field(default_factory=dict)
    text: str = ""
    tie: bool = True


def _sub(f: Fields, key: str, kind: str, absent: dict[str, Any]) -> Fields:
    """A sub-config with its class defaults filled in (``absent`` when the key is missing)."""
    sub = f.raw.get(key)
    if sub is None:
        sub = absent
    if not isinstance(sub, dict):
        raise ConfigError(f"{f.where}: field {key!r} ({_show(sub)}) must be an object")
    kind = sub.get("model_type") or kind
    if kind not in _VISION_DEFAULTS:
        raise ConfigError(f"{f.where}: {key}.model_type ({_show(kind)}) is not a vision tower "
                          f"txcalc sizes ({', '.join(sorted(_VISION_DEFAULTS))})")
    return Fields(_VISION_DEFAULTS[kind] | {k: v for k, v in sub.items() if v is not None},
                  f"{f.where} ({key})")


def _side(v: Fields, key: str) -> int:
    """image_size / patch_size: an int or a square [h, w] (InternVL, Pixtral)."""
    x = v.get(key)
    if isinstance(x, (list, tuple)) and len(x) == 2 and x[0] == x[1]:
        return _positive(v, key, x[0])
    return v.int(key)


def _positive(v: Fields, key: str, x: Any) -> int:
    if isinstance(x, bool) or not isinstance(x, int) or x <= 0:
        raise ConfigError(f"{v.where}: field {key!r} ({_show(x)}) must be a positive integer")
    return x


def _vit_layers(L: int, D: int, F: int, *, bias: bool = True, gated: bool = False,
                norm: int = 2) -> int:
    """L pre-norm ViT blocks: q, k, v, o (D x D), an MLP (D x F and back; gated: 3 matrices),
    two norms of ``norm`` x D parameters each."""
    attn = 4 * D * D + (4 * D if bias else 0)
    mlp = (3 if gated else 2) * D * F + ((2 * F + D) if gated else F + D) * bias
    return L * (attn + mlp + 2 * norm * D)


def _vision_feature_layers(f: Fields, default: int) -> int:
    layers = f.get("vision_feature_layer", default)
    return len(layers) if isinstance(layers, list) else 1


def vision_parts(f: Fields, model_type: str, spec: Vision, text_d: int) -> tuple[int, int]:
    """(vision tower + projector parameters, LM tokens per image) of a VLM config."""
    kind = spec.tower
    v = _sub(f, "vision_config", kind, spec.absent)
    vt = v.raw.get("model_type") or kind
    if vt.startswith("qwen"):  # dynamic resolution: (patch x merge) pixels per token side
        return _qwen_vision(v, vt), 0
    D, F, L = v.int("hidden_size"), v.int("intermediate_size"), v.int("num_hidden_layers")
    C, P, S = v.int("num_channels"), _side(v, "patch_size"), _side(v, "image_size")
    n = (S // P) ** 2  # patches per image
    if vt == "clip_vision_model":  # class token, bias-free patch conv, pre and post LayerNorm
        tower = D + C * P * P * D + (n + 1) * D + 2 * D + _vit_layers(L, D, F) + 2 * D
    elif vt in ("siglip_vision_model", "idefics3_vision", "smolvlm_vision"):
        tower = C * P * P * D + D + n * D + _vit_layers(L, D, F) + 2 * D
        if vt == "siglip_vision_model" and v.bool("vision_use_head", True):
            # multi-head attention pooling: probe, in_proj (3D x D), out_proj, norm, MLP
            tower += D + 3 * D * D + 3 * D + D * D + D + 2 * D + 2 * D * F + F + D
    elif vt == "pixtral":  # RMSNorms, bias-free attention and gated MLP
        tower = C * P * P * D + D + _vit_layers(L, D, F, bias=False, gated=True, norm=1)
    else:  # internvl_vision: class token, absolute positions, layer scales
        bias = v.bool("attention_bias", False)
        tower = D + C * P * P * D + D
        if v.bool("use_absolute_position_embeddings", True):
            tower += (n + 1) * D
        # two LayerNorms and two layer-scale vectors (built whatever layer_scale_init_value)
        per = 3 * D * D + (3 * D if bias else 0) + D * D + D + 2 * D * F + F + D + 6 * D
        per += 2 * D if v.get("use_qk_norm", False) else 0
        tower += L * per
        if not v.bool("use_mean_pooling", True):
            tower += 2 * D
    T = text_d
    if model_type in ("llava", "llava_next"):
        b = f.bool("multimodal_projector_bias", True)
        din = D * _vision_feature_layers(f, -2)
        proj = din * T + T * T + (2 * T if b else 0)
        proj += T if model_type == "llava_next" else 0  # image_newline
        # the tower's rows (a class token with CLIP), less the first with "default" (HF drops
        # it whatever it is: a SigLIP tower loses a patch)
        strategy = f.get("vision_feature_select_strategy", "default")
        return tower + proj, n + (vt == "clip_vision_model") - (strategy == "default")
    if model_type == "paligemma":
        pd = f.int("projection_dim", 2048)
        return tower + D * pd + pd, n
    if model_type == "gemma3":  # mm_input_projection_weight and a Gemma RMSNorm on the tower
        return tower + D * T + D, f.int("mm_tokens_per_image", 256)
    if model_type in ("idefics3", "smolvlm"):  # pixel shuffle by scale_factor, one Linear
        s = f.int("scale_factor", 2)
        return tower + D * s * s * T, n // (s * s)
    if model_type == "mistral3":
        m = f.int("spatial_merge_size", 2)
        b = f.bool("multimodal_projector_bias", False)
        din = D * _vision_feature_layers(f, -1)
        proj = din + din * m * m * din + din * T + T * T + (2 * T if b else 0)
        return tower + proj, (S // P // m) ** 2 + S // P // m  # + one [IMG_BREAK] per row
    # internvl: pixel shuffle by downsample_ratio, LayerNorm, two Linears
    r = f.get("downsample_ratio", 0.5)
    k = round(1 / float(r)) ** 2
    din = D * k  # HF's InternVL projector reads one feature layer's width
    proj = 2 * din + din * T + T + T * T + T
    return tower + proj, n // k  # the class token dropped, then the pixel shuffle


def _qwen_vision(v: Fields, vt: str) -> int:
    """Qwen-VL towers: a Conv3d patch embedding over temporal_patch_size frames, ``depth``
    blocks, and a patch merger (spatial_merge_size^2 patches -> one LM token)."""
    C, P, t, m = (v.int("in_channels"), v.int("patch_size"), v.int("temporal_patch_size"),
                  v.int("spatial_merge_size"))
    L = v.int("depth")
    if vt == "qwen2_vl_vision":  # LayerNorm, fused qkv with bias, GELU MLP of mlp_ratio x E
        E = v.int("embed_dim")
        F = int(E * float(v.get("mlp_ratio", 4)))
        out, H = v.int("hidden_size"), E * m * m
        return (C * t * P * P * E + _vit_layers(L, E, F) + 2 * E + H * H + H + H * out + out)
    E, F, out = v.int("hidden_size"), v.int("intermediate_size"), v.int("out_hidden_size")
    H = E * m * m
    if vt == "qwen2_5_vl_vision":  # RMSNorm, gated MLP with biases
        return (C * t * P * P * E + _vit_layers(L, E, F, gated=True, norm=1) + E
                + H * H + H + H * out + out)
    # qwen3_vl: biased patch conv, learned positions, deepstack mergers (post-shuffle norms)
    deep = v.get("deepstack_visual_indexes", [8, 16, 24])
    merger = H * H + H + H * out + out
    return (C * t * P * P * E + E + v.int("num_position_embeddings") * E
            + _vit_layers(L, E, F) + 2 * E + merger
            + (len(deep) if isinstance(deep, list) else 0) * (2 * H + merger))


def vlm(f: Fields) -> dict[str, Any]:
    """Converter of a vision-language type: its language model (``text_config``) plus the
    vision tower's parameters and the image tokens per image."""
    spec, models = f.model.vision, f.models
    text = f.get("text_config", {})
    if not isinstance(text, dict):
        raise ConfigError(f"{f.where}: field 'text_config' ({_show(text)}) must be an "
                          "object")
    text_type = text.get("model_type") or spec.text
    if text_type not in models or models[text_type].vision:
        raise ConfigError(f"{f.where}: text_config.model_type ({_show(text_type)}) is not "
                          "a language model txcalc converts")
    text_model = models[text_type]
    sub = Fields(resolve_aliases(text_model.aliases, text), f"{f.where} (text_config)")
    sub.model, sub.models = text_model, models
    try:
        out = text_model.convert(sub) | read_dropouts(sub, text_model.dropout)
    finally:
        f.problems += sub.problems
    tie = f.bool("tie_word_embeddings", spec.tie)
    if f.model.name in ("llava", "llava_next"):  # LlavaConfig: a tied text_config ties too
        tie = tie or sub.bool("tie_word_embeddings", False)
    return out | {"tie_embeddings": tie}


def vision_fields(f: Fields, model_type: str, spec: Vision | None,
                  fields: dict[str, Any]) -> dict[str, Any]:
    """vision_params and image_tokens of a VLM config (from_hf_dict's last step)."""
    if spec is None:
        return {}
    params, tokens = vision_parts(f, model_type, spec, fields["d_model"])
    out = {"vision_params": params, "image_tokens": tokens}
    if not tokens:  # Qwen-VL: Qwen2VLImageProcessor's defaults clamp the resized area
        v = _sub(f, "vision_config", spec.tower, {})
        out["image_token_px"] = v.int("patch_size") * v.int("spatial_merge_size")
        out |= {"image_min_px": 56 * 56, "image_max_px": 28 * 28 * 1280}
    if model_type == "llava_next":  # anyres: the tiles of image_grid_pinpoints
        v = _sub(f, "vision_config", spec.tower, spec.absent)
        grid = f.get("image_grid_pinpoints", [[336, 672], [672, 336], [672, 672], [1008, 336],
                                              [336, 1008]])
        if not isinstance(grid, list) or not grid or not all(
                isinstance(x, list) and len(x) == 2 for x in grid):
            raise ConfigError(f"{f.where}: field 'image_grid_pinpoints' ({_show(grid)}) must "
                              "be a list of [height, width] pairs")
        out |= {"image_grid": tuple(tuple(x) for x in grid),
                "image_tile_px": _side(v, "image_size"), "image_token_px": _side(v, "patch_size")}
    return out


# --- Mllama (Llama 3.2 Vision): gated cross-attention layers and its vision tower -------------
# MllamaTextConfig / MllamaVisionConfig defaults (transformers 5.x). The text model is Llama's
# with the blocks at ``cross_attention_layers`` replaced by gated cross-attention blocks
# (components.gated_cross_block), head width always hidden_size // heads (HF ignores
# ``head_dim``), a token table of vocab_size + 8 rows and an untied lm_head of vocab_size
# (HF cannot tie them: their shapes differ). Images: each puts one <|image|> token in the prompt
# and max_num_tiles x ((image_size / patch_size)^2 + 1) vision-state rows before the
# cross-attention layers (every tile slot runs, padded ones masked).
_MLLAMA_TEXT = dict(vocab_size=128256, hidden_size=4096, num_hidden_layers=40,
                    num_attention_heads=32, num_key_value_heads=8, intermediate_size=14336,
                    max_position_embeddings=131072)


_MLLAMA_CROSS = [3, 8, 13, 18, 23, 28, 33, 38]


_MLLAMA_VISION = dict(hidden_size=1280, num_hidden_layers=32, num_global_layers=8,
                      num_channels=3, intermediate_size=5120, vision_output_dim=7680,
                      image_size=448, patch_size=14, max_num_tiles=4,
                      supported_aspect_ratios=[[1, 1], [1, 2], [1, 3], [1, 4], [2, 1], [2, 2],
                                               [3, 1], [4, 1]])


def mllama_text(f):  # MllamaForCausalLM
    out = read_decoder(f, _MLLAMA_TEXT)
    n, d, h = out["n_layers"], out["d_model"], out["n_heads"]
    cross = tuple(sorted({i for i in layer_list(f, "cross_attention_layers", _MLLAMA_CROSS)
                          if 0 <= i < n}))  # HF builds a cross block where index == layer
    return out | {"head_dim": d // h if h > 0 else 0, "cross_layers": cross,
                  "embed_extra_rows": 8, "tie_embeddings": False}


def mllama(f):  # MllamaForConditionalGeneration: vision tower, projector, language model
    out = text_part(f, "mllama_text_model")
    sub = f.get("vision_config", {})
    if not isinstance(sub, dict):
        raise ConfigError(f"{f.where}: field 'vision_config' ({_show(sub)}) must be an object")
    v = Fields(_MLLAMA_VISION | {k: x for k, x in sub.items() if x is not None},
               f"{f.where} (vision_config)")
    D, F, C = v.int("hidden_size"), v.int("intermediate_size"), v.int("num_channels")
    P, S, T = _side(v, "patch_size"), _side(v, "image_size"), v.int("max_num_tiles")
    ratios = v.get("supported_aspect_ratios")
    if not isinstance(ratios, list) or not ratios:
        raise ConfigError(f"{v.where}: field 'supported_aspect_ratios' ({_show(ratios)}) must "
                          "be a list of [w, h] tile layouts")
    n = (S // P) ** 2 + 1  # patches and the class token, per tile
    R = len(ratios) + 1  # aspect-ratio ids (0: padding)
    layer = 4 * D * D + 2 * D * F + F + D + 4 * D  # bias-free attention, biased MLP, 2 LNs
    tower = (C * P * P * D + D  # patch conv (no bias), class embedding
             + 1 + n * D + R * T * n * D  # gated position and tile-position embeddings
             + 2 * (R * T * D + 1)  # pre- and post-tile aspect-ratio embeddings and gates
             + 4 * D  # layernorm_pre, layernorm_post
             + v.int("num_hidden_layers") * layer
             + v.int("num_global_layers") * (layer + 2))  # the global layers' two gates
    proj = v.int("vision_output_dim") * out["d_model"] + out["d_model"]
    return out | {"vision_params": tower + proj, "image_tokens": 1, "image_states": T * n}
