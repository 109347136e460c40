"""Build Hugging Face models on the meta device: the independent reference for counts.

Nothing here knows txcalc's formulas: a config dict goes to ``transformers``, which builds the
real model class; we only sum ``numel`` (tied weights once).
"""

from __future__ import annotations

import warnings

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

ENCODERS = {"bert", "roberta"}
SEQ2SEQ = {"t5", "bart"}
MOE = {"mixtral", "qwen2_moe", "qwen3_moe", "deepseek_v2", "deepseek_v3"}


def hf_config(raw: dict):
    raw = dict(raw)
    model_type = raw.pop("model_type")
    raw.pop("architectures", None)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return transformers.AutoConfig.for_model(model_type, **raw)


def hf_model(raw: dict, attn: str = "eager"):
    """The HF model for a config.json dict, on the meta device (no memory)."""
    cfg = hf_config(raw)
    cfg._attn_implementation = attn
    if raw["model_type"] in MOE:
        cfg._experts_implementation = "batched_mm"
    if raw["model_type"] in ENCODERS:
        cls = transformers.AutoModel
    elif raw["model_type"] in SEQ2SEQ:
        cls = transformers.AutoModelForSeq2SeqLM
    else:
        cls = transformers.AutoModelForCausalLM
    with torch.device("meta"), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return cls.from_config(cfg)


def numel(model) -> int:
    return sum(p.numel() for p in model.parameters())
