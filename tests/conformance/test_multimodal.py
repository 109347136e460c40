"""Multimodal configs (issue 12 item 3) against Hugging Face, drawn configs, meta device.

For each vision-language family a hypothesis strategy draws a tiny config.json (a
``text_config``, a ``vision_config`` and the projector's top-level fields). txcalc's total
must equal the numel of the ``*ForConditionalGeneration`` class (vision tower and projector
included, tied weights once) built on the meta device, and its language-model count the numel
of that model's language model and lm_head.
"""

from __future__ import annotations

import json
import os
import warnings

import pytest
from hypothesis import HealthCheck, given, reject, settings
from hypothesis import strategies as st

import txcalc
from txcalc.engine.accounting import count_flops
from txcalc.errors import ConfigError
from txcalc.model.hf import from_hf_dict
from txcalc.engine.workload import Workload

from .strategies.multimodal import STRATEGIES

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

EXAMPLES = int(os.environ.get("TXCALC_HF_EXAMPLES", "15"))
SETTINGS = settings(max_examples=EXAMPLES, deadline=None,
                    derandomize="TXCALC_HF_EXAMPLES" not in os.environ,
                    suppress_health_check=list(HealthCheck))


def hf_model(raw: dict, device: str = "meta"):
    from transformers.models.auto import modeling_auto
    raw = json.loads(json.dumps(raw))
    model_type = raw.pop("model_type")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        cfg = transformers.AutoConfig.for_model(model_type, **raw)
        cls = getattr(transformers,
                      modeling_auto.MODEL_FOR_IMAGE_TEXT_TO_TEXT_MAPPING_NAMES[model_type])
        with torch.device(device):
            return cls._from_config(cfg)


def language_model_numel(model) -> int:
    """The language model and lm_head of a HF VLM (tied weights once)."""
    seen, n = set(), 0
    for name, p in model.named_parameters(remove_duplicate=False):
        if not ("language_model" in name or "text_model" in name or name.startswith("lm_head")):
            continue
        if id(p) not in seen:
            seen.add(id(p))
            n += p.numel()
    return n


@pytest.mark.parametrize("model_type", sorted(STRATEGIES))
@SETTINGS
@given(data=st.data())
def test_params_equal_the_whole_hf_model(model_type, data):
    raw = data.draw(STRATEGIES[model_type], label="config.json")
    model = hf_model(raw)
    cfg = from_hf_dict(raw)
    counts = txcalc.params(cfg)
    assert counts.total == sum(p.numel() for p in model.parameters())
    assert counts.total - cfg.vision_params == language_model_numel(model)
    assert cfg.vision_params > 0


def qwen_grid(v: dict) -> int:
    """Merged patches per side of the Qwen-VL test image: 3, or as many as put the image
    (g x patch x merge pixels square) at or above the image processor's min_pixels (56 x 56),
    where its clamp leaves the size alone."""
    return max(3, -(-56 // (v["patch_size"] * v["spatial_merge_size"])))


def hf_image_rows(model_type: str, raw: dict, model) -> int:
    """Rows the HF model's get_image_features gives for one image (tiny, on the CPU): the LM
    tokens an image becomes, besides text tokens the processor adds (Pixtral's row breaks)."""
    v = raw["vision_config"]
    if model_type.startswith("qwen"):  # a g x g-token image, as the processor flattens it
        p, t, m = v["patch_size"], v["temporal_patch_size"], v["spatial_merge_size"]
        side = qwen_grid(v) * m
        pix = torch.ones(side * side, v["in_channels"] * t * p * p)
        out = model.model.get_image_features(pix, torch.tensor([[1, side, side]]))
    else:
        S = v["image_size"]
        pix = torch.ones(1, v["num_channels"], S, S)
        kw = {"image_sizes": torch.tensor([[S, S]])} if model_type == "mistral3" else {}
        if model_type in ("idefics3", "smolvlm"):
            pix = pix[:, None]  # (batch, tiles, C, S, S)
        out = model.model.get_image_features(pix, **kw)
    feats = out.pooler_output if getattr(out, "pooler_output", None) is not None else out
    if isinstance(feats, (list, tuple)):
        feats = feats[0]
    rows = feats.shape[-2]
    if model_type == "mistral3":  # [IMG_BREAK] after each row of merged patches, [IMG_END]
        rows += v["image_size"] // v["patch_size"] // raw.get("spatial_merge_size", 2)
    return rows


@pytest.mark.parametrize("model_type", sorted(set(STRATEGIES) - {"llava_next"}))
@settings(max_examples=max(2, EXAMPLES // 5), deadline=None,
          suppress_health_check=list(HealthCheck),
          derandomize="TXCALC_HF_EXAMPLES" not in os.environ)
@given(data=st.data())
def test_image_tokens_equal_hf_image_features(model_type, data):
    """``--images``: the LM tokens per image (hf._vision_parts states the rule per family)
    equal the rows HF's vision tower and projector produce for one image (Qwen-VL: an image of
    g x g merged patches, ``--image-size`` = g x patch x merge pixels, inside the image
    processor's min/max-pixel clamp: ``qwen_grid``)."""
    raw = data.draw(STRATEGIES[model_type], label="config.json")
    if model_type == "gemma3":  # its pooling needs a square token grid dividing the patches
        side = raw["vision_config"]["image_size"] // raw["vision_config"]["patch_size"]
        raw["mm_tokens_per_image"] = data.draw(st.sampled_from(
            [k * k for k in range(1, side + 1) if side % k == 0]), label="mm_tokens_per_image")
    if model_type == "mistral3":  # HF's Pixtral splits the image into whole merged patches
        raw["vision_config"]["image_size"] = 4 * raw["vision_config"]["patch_size"]
    cfg = from_hf_dict(raw)
    v = raw["vision_config"]
    side = qwen_grid(v) * v["patch_size"] * v["spatial_merge_size"] \
        if model_type.startswith("qwen") else 0
    model = hf_model(raw, "cpu")
    try:
        rows = hf_image_rows(model_type, raw, model)
    except TypeError:
        # HF's own InternVL forward (transformers 5.x) indexes the hidden states with a list
        # vision_feature_layer and fails: a config HF cannot run, not one txcalc miscounts
        if isinstance(raw.get("vision_feature_layer"), list):
            reject()
        raise
    assert cfg.image_seq_tokens(1, side) == rows > 0
    assert cfg.image_seq_tokens(3, side) == 3 * cfg.image_seq_tokens(1, side)


def test_images_join_the_sequence_on_the_cli(tmp_path, capsys):
    """``txcalc flops/memory --images N``: the FLOPs and bytes of seq + N x image tokens;
    ``params --json`` adds language_model_params; bad uses exit 2 with one line."""
    from typer.testing import CliRunner

    from txcalc.cli import app
    from txcalc.engine.memory import TrainingMemory
    raw = {"model_type": "llava", "text_config": {
        "hidden_size": 16, "num_attention_heads": 2, "num_hidden_layers": 1,
        "intermediate_size": 8, "vocab_size": 64}, "vision_config": {
        "hidden_size": 8, "num_attention_heads": 2, "num_hidden_layers": 1,
        "intermediate_size": 8, "image_size": 8, "patch_size": 2}}
    path = tmp_path / "config.json"
    path.write_text(json.dumps(raw))
    cfg = from_hf_dict(raw)
    assert cfg.image_tokens == 16

    def run(*argv):
        return CliRunner().invoke(app, [str(a) for a in argv])
    r = run("flops", path, "--seq", 10, "--images", 2, "--json")
    out = json.loads(r.stdout)
    f = count_flops(cfg, Workload(batch=1, seq=10 + 2 * 16))
    assert (out["forward_flops"], out["image_tokens"], out["seq"]) == (f.forward, 32, 42)
    r = run("memory", path, "--seq", 10, "--images", 2, "--json")
    want = TrainingMemory(cfg, Workload(batch=1, seq=42, attn_impl="flash"), "bf16-mixed")
    assert json.loads(r.stdout)["activations_bytes"] == want.to_json()["activations_bytes"]
    r = run("memory", path, "--inference", "--context", 100, "--images", 1, "--json")
    assert json.loads(r.stdout)["context"] == 116
    p = json.loads(run("params", path, "--json").stdout)
    assert p["language_model_params"] + p["vision_params"] == p["total_params"]
    for argv in (["flops", "llama-3-8b", "--images", "1"],
                 ["flops", str(path), "--images", "-1"],
                 ["flops", str(tmp_path / "q.json"), "--images", "1"]):
        if "q.json" in argv[1]:
            (tmp_path / "q.json").write_text(json.dumps({
                "model_type": "qwen2_vl", "hidden_size": 16, "num_attention_heads": 2,
                "num_key_value_heads": 2,
                "num_hidden_layers": 1, "intermediate_size": 8, "vocab_size": 64,
                "vision_config": {"depth": 1, "embed_dim": 8, "num_heads": 2,
                                  "hidden_size": 16}}))
        from txcalc.cli import main
        assert main(argv) == 2, argv
        out, err = capsys.readouterr()
        assert out == "" and len(err.splitlines()) == 1 and "--image" in err, argv
