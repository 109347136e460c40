"""``--images`` token counts of the resolution-dependent families against HF's processors.

LLaVA-NeXT: an image becomes its base image plus its anyres tiles (``image_grid_pinpoints``),
less the padding its aspect ratio leaves, plus a newline token per row. Checked against
LlavaNextImageProcessor on a dummy image (its tiles) fed through the tiny HF model's
``get_image_features`` (the rows HF puts in place of the image tokens), and against
``LlavaNextProcessor._get_number_of_features`` (what the processor inserts).

Qwen-VL: Qwen2VLImageProcessor resizes an image to whole merged patches and clamps its area
into [min_pixels, max_pixels] (its defaults: 3136 and 1,003,520); tokens = the grid's patches
/ merge^2. Checked on dummy images from 1 px to past the clamp.
"""

from __future__ import annotations

import types
import warnings

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from txcalc.errors import WorkloadError
from txcalc.model.hf import from_hf_dict

from .strategies.multimodal import llava, qwen_vl
from tests.conformance.test_multimodal import hf_model

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
Image = pytest.importorskip("PIL.Image")

SETTINGS = dict(deadline=None, derandomize=True, suppress_health_check=list(HealthCheck))


def quiet(fn, *args, **kwargs):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return fn(*args, **kwargs)


@st.composite
def llava_next_with_image(draw):
    raw = draw(llava("llava_next"))
    raw["vision_config"]["num_channels"] = 3  # the processor makes RGB tiles
    # HF packs a tile's rows as its patch grid: a CLIP tower's class token must go ("default"),
    # a SigLIP tower has none to drop ("full"); other pairings fail in HF's model
    clip = raw["vision_config"]["model_type"] == "clip_vision_model"
    raw["vision_feature_select_strategy"] = "default" if clip else "full"
    S = raw["vision_config"]["image_size"]
    raw["image_grid_pinpoints"] = draw(st.lists(
        st.tuples(st.integers(1, 3), st.integers(1, 3)).map(lambda t: [t[0] * S, t[1] * S]),
        min_size=1, max_size=4))
    hw = (draw(st.integers(1, 4 * S)), draw(st.integers(1, 4 * S)))
    return raw, hw


@settings(max_examples=12, **SETTINGS)
@given(case=llava_next_with_image())
def test_llava_next_tokens_equal_hf_image_features_and_processor(case):
    from transformers import LlavaNextImageProcessorPil, LlavaNextProcessor
    raw, (h, w) = case
    cfg = from_hf_dict(raw)
    v = raw["vision_config"]
    S, P = v["image_size"], v["patch_size"]
    ours = cfg.image_hw_tokens(h, w)
    processor = quiet(LlavaNextImageProcessorPil, image_grid_pinpoints=raw["image_grid_pinpoints"],
                      size={"shortest_edge": S}, crop_size={"height": S, "width": S},
                      image_mean=[0.5] * 3, image_std=[0.5] * 3)
    image = Image.new("RGB", (w, h))
    inputs = quiet(processor, images=image, return_tensors="pt")
    model = hf_model(raw, "cpu").eval()
    with torch.no_grad():
        out = model.model.get_image_features(inputs["pixel_values"], inputs["image_sizes"])
    feats = out.pooler_output
    assert ours == (feats[0] if isinstance(feats, (list, tuple)) else feats).shape[-2]
    # the processor's count: its base keeps the class token (num_additional_image_tokens 1
    # for a CLIP tower) and drops one row with "default", as the model does
    clip = v["model_type"] == "clip_vision_model"
    proc = types.SimpleNamespace(image_processor=types.SimpleNamespace(
        image_grid_pinpoints=raw["image_grid_pinpoints"]), patch_size=P,
        num_additional_image_tokens=int(clip))
    proc._get_unpadded_features = types.MethodType(LlavaNextProcessor._get_unpadded_features,
                                                   proc)
    inserted = LlavaNextProcessor._get_number_of_features(proc, h, w, S, S)
    inserted -= raw.get("vision_feature_select_strategy", "default") == "default"
    assert ours == inserted
    if h == w:
        assert cfg.image_seq_tokens(2, h) == 2 * ours


@st.composite
def qwen_with_image(draw):
    raw = draw(qwen_vl(draw(st.sampled_from(["qwen2_vl", "qwen2_5_vl", "qwen3_vl"]))))
    raw["vision_config"]["patch_size"] = draw(st.sampled_from([14, 16]))
    side = st.one_of(st.integers(1, 80), st.integers(80, 1400))
    return raw, (draw(side), draw(side))


@settings(max_examples=15, **SETTINGS)
@given(case=qwen_with_image())
def test_qwen_vl_tokens_equal_the_image_processor_with_its_clamp(case):
    from transformers import Qwen2VLImageProcessorPil
    raw, (h, w) = case
    if max(h, w) / min(h, w) > 200:  # smart_resize refuses such images
        return
    cfg = from_hf_dict(raw)
    v = raw["vision_config"]
    m = v["spatial_merge_size"]
    processor = quiet(Qwen2VLImageProcessorPil, patch_size=v["patch_size"], merge_size=m,
                      temporal_patch_size=v["temporal_patch_size"])
    grid = quiet(processor, images=Image.new("RGB", (w, h)), return_tensors="pt")
    assert cfg.image_hw_tokens(h, w) == int(grid["image_grid_thw"].prod()) // (m * m)


def test_qwen_vl_clamp_at_the_edges():
    """A 10-px image is scaled up to min_pixels (56 x 56: 4 tokens at patch 14, merge 2); a
    4000-px square down to max_pixels (1,003,520 px: 35 x 35 merged patches), where the
    unclamped rule gave 143^2 = 20,449 tokens."""
    raw = {"model_type": "qwen2_vl", "text_config": {
        "hidden_size": 16, "num_attention_heads": 2, "num_key_value_heads": 2,
        "num_hidden_layers": 1, "intermediate_size": 8, "vocab_size": 64},
        "vision_config": {"depth": 1, "embed_dim": 8, "num_heads": 2, "hidden_size": 16}}
    cfg = from_hf_dict(raw)
    assert [cfg.image_seq_tokens(1, s) for s in (10, 448, 4000)] == [4, 256, 35 * 35]


def test_llava_next_needs_the_image_size():
    raw = {"model_type": "llava_next", "text_config": {
        "hidden_size": 16, "num_attention_heads": 2, "num_hidden_layers": 1,
        "intermediate_size": 8, "vocab_size": 64}}
    cfg = from_hf_dict(raw)
    # LLaVA-NeXT at 336 px (CLIP-L/14, "default"): 576 base + 24 x 24 unpadded + 24 newlines
    assert cfg.image_seq_tokens(1, 336) == 576 + 576 + 24
    with pytest.raises(WorkloadError, match="--image-size"):
        cfg.image_seq_tokens(1)
