"""The model types added after the first 24: drawn config.json dicts -> txcalc equals HF.

For each type a hypothesis strategy (strategies/other_types.py) draws a tiny config.json from the
fields of its HF config class (sizes, heads, KV heads, head_dim, biases, tying, experts, windows,
layer patterns), the optional ones left out about half the time so that the class defaults are
exercised. The reference is the HF model itself, built on the meta device (tests/hf_models.py):

- parameters: ``sum(numel)`` over the HF model (tied weights once); for a vision-language
  config the language model only (every parameter outside ``model.visual``), which is what
  txcalc imports from it;
- FLOPs: torch's FlopCounterMode over one training step (forward, loss, backward) of the HF
  model with eager attention; MoE experts run HF's ``batched_mm`` path, which multiplies each
  token by its top-k experts only (the grouped-mm default is not counted by FlopCounterMode);
- the sliding window of every layer, read from the built HF modules.
"""

from __future__ import annotations

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

from ..hf_models import hf_config, numel, step_flops, torch, transformers
from ..hf_record import hf_answers  # noqa: F401 (a fixture)
from .strategies.other_types import MOE, MORE_TYPES, STRATEGIES, VL
from tests.conformance.test_hf_drawn_configs import hf_windows

EXAMPLES = int(os.environ.get("TXCALC_HF_EXAMPLES", "50")) // 5  # 10 per type in CI
SETTINGS = settings(max_examples=max(4, EXAMPLES), deadline=None,
                    derandomize="TXCALC_HF_EXAMPLES" not in os.environ,
                    suppress_health_check=list(HealthCheck))


def hf_model(raw: dict, device: str = "meta"):
    """The HF model of a config.json dict on meta: eager attention, batched_mm experts."""
    cfg = hf_config(raw)
    for c in (cfg, getattr(cfg, "text_config", None)):
        if c is not None:
            c._attn_implementation = "eager"
            if raw["model_type"] in MOE:
                c._experts_implementation = "batched_mm"
    cls = (transformers.AutoModelForImageTextToText if raw["model_type"] in VL
           else transformers.AutoModelForCausalLM)
    with torch.device(device), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return cls.from_config(cfg)


def language_params(raw: dict, model) -> int:
    """HF's parameter count of the language model: all but the vision tower for VL types."""
    if raw["model_type"] not in VL:
        return numel(model)
    return sum(p.numel() for n, p in model.named_parameters() if ".visual." not in f".{n}")


def expected_active(raw: dict, model) -> int:
    """Everything outside the stacked expert tensors once, plus top_k / E of the expert tensors."""
    cfg = hf_config(raw)
    # PhiMoE's sparsemixer picks two experts whatever num_experts_per_tok says
    if raw["model_type"] == "dbrx":
        top_k = cfg.ffn_config.moe_top_k
    else:
        top_k = 2 if raw["model_type"] == "phimoe" else getattr(
            getattr(cfg, "text_config", cfg), "num_experts_per_tok")
    active = language_params(raw, model)
    for name, module in model.named_modules():
        if type(module).__name__.endswith("Experts") and ".visual." not in f".{name}":
            n = sum(p.numel() for p in module.parameters())  # DBRX: in a child ``mlp``
            active += n // module.num_experts * top_k - n
    return active


def train_step_flops(raw: dict, batch: int, seq: int) -> int:
    # DBRX's experts loop over the experts hit (``nonzero``, not on meta): tiny real tensors
    device = "cpu" if raw["model_type"] == "dbrx" else "meta"
    model = hf_model(raw, device)
    ids = torch.zeros(batch, seq, dtype=torch.long, device=device)
    return step_flops(lambda: model(input_ids=ids, labels=ids).loss)


def test_every_new_converter_has_a_strategy():
    assert set(STRATEGIES) == set(MORE_TYPES)


def layer_windows(model) -> list[int]:
    """Per-layer window of the built HF model; GPT-Neo keeps it in its attention modules."""
    if model.config.model_type == "gpt_neo":
        return [model.config.window_size if blk.attn.attention_type == "local" else 0
                for blk in model.transformer.h]
    if model.config.model_type in VL:  # Qwen2-VL's attention keeps its own; Qwen3-VL has none
        return [vars(layer.self_attn).get("sliding_window") or 0
                for layer in model.model.language_model.layers]
    if not hasattr(model.config, "sliding_window"):
        return [0] * model.config.num_hidden_layers
    return hf_windows(model)


def hf_counts(raw: dict) -> dict:
    """What test_params_equal_hf reads from the HF model of ``raw``."""
    model = hf_model(raw)
    out = {"language": language_params(raw, model), "total": numel(model),
           "windows": layer_windows(model)}
    if raw["model_type"] in MOE:
        out["active"] = expected_active(raw, model)
    return out


@pytest.mark.live
@pytest.mark.parametrize("model_type", sorted(STRATEGIES))
@SETTINGS
@given(data=st.data())
def test_params_equal_hf(model_type, data, hf_answers):
    raw = data.draw(STRATEGIES[model_type], label="config.json")
    hf = hf_answers(raw, "hf_more_types.counts", lambda: hf_counts(raw))
    cfg = from_hf_dict(raw)
    counts = txcalc.params(cfg)
    # issue 12 item 3: VL types count the whole HF model; less the vision tower and merger
    # (vision_params) it is the language model
    assert counts.total - cfg.vision_params == hf["language"]
    assert counts.total == hf["total"]
    if model_type in MOE:
        assert counts.active - cfg.vision_params == hf["active"]
    assert [cfg.window(i) for i in range(cfg.n_layers)] == hf["windows"]


@pytest.mark.live
@pytest.mark.parametrize("model_type", sorted(STRATEGIES))
@settings(max_examples=max(3, EXAMPLES // 2), deadline=None,
          suppress_health_check=list(HealthCheck),
          derandomize="TXCALC_HF_EXAMPLES" not in os.environ)
@given(data=st.data())
def test_training_step_flops_equal_flopcountermode(model_type, data, hf_answers):
    raw = data.draw(STRATEGIES[model_type], label="config.json")
    if model_type in ("qwen2_vl", "qwen2_5_vl"):
        # its rotary reads head_dim, its attention does not: HF runs only when they agree
        for part in (raw, raw.get("text_config", {})):
            part.pop("head_dim", None)
            if "rope_parameters" in part:
                hd = part["hidden_size"] // part["num_attention_heads"]
                part["rope_parameters"]["mrope_section"] = [hd // 2, 0, 0]
    cfg = from_hf_dict(raw)
    limit = cfg.max_position if cfg.pos_type == "learned" else 64
    batch = data.draw(st.integers(1, 2), label="batch")
    seq = data.draw(st.integers(1, min(16, limit)), label="seq")
    f = count_flops(cfg, Workload(batch=batch, seq=seq))
    measured = hf_answers(raw, "hf_more_types.train_step_flops",
                          lambda: train_step_flops(raw, batch, seq),
                          cannot_run=(RuntimeError, ValueError, TypeError, AttributeError),
                          batch=batch, seq=seq)
    if measured is None:
        # HF's own forward cannot run this corner of its config space (Ministral without a
        # window still builds a sliding mask; code that needs real data on meta): no
        # reference. A type whose every draw fails makes hypothesis report it unsatisfiable.
        reject()
    assert f.forward + f.backward == measured


# HF combinations txcalc cannot represent: a ConfigError naming the field, never a wrong count.
UNREPRESENTABLE = [
    # OLMoE sizes its q/k norms by hidden_size // num_attention_heads, not head_dim
    ({"model_type": "olmoe", "hidden_size": 16, "num_attention_heads": 2, "head_dim": 4,
      "num_hidden_layers": 1, "vocab_size": 50, "intermediate_size": 32, "num_experts": 2,
      "num_experts_per_tok": 1}, "head_dim"),
    # StableLM's qk_layernorm: a separate bias-free LayerNorm per head (H*h + K*h weights) in
    # a model whose other LayerNorms have biases
    ({"model_type": "stablelm", "hidden_size": 16, "num_attention_heads": 2,
      "num_hidden_layers": 1, "vocab_size": 50, "intermediate_size": 32, "qk_layernorm": True},
     "qk_layernorm"),
]


@pytest.mark.parametrize("raw,field", UNREPRESENTABLE, ids=[f for _, f in UNREPRESENTABLE])
def test_unrepresentable(raw, field):
    hf_model(raw)
    with pytest.raises(ConfigError, match=field):
        from_hf_dict(raw)
