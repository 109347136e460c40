"""Build Hugging Face models on the meta device: the independent reference for counts.

Nothing here knows txcalc's formulas: a config dict goes to ``transformers``, which builds the
real model class; we only sum ``numel`` (tied weights once).
"""

from __future__ import annotations

import warnings

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

ENCODERS = {"bert", "roberta", "xlm-roberta", "camembert", "distilbert", "electra", "albert",
            "mpnet", "modernbert", "esm", "deberta-v2"}
SEQ2SEQ = {"t5", "bart", "mbart", "marian", "pegasus", "m2m_100", "mt5", "umt5"}
SPEECH = {"whisper"}  # AutoModelForSpeechSeq2Seq: WhisperForConditionalGeneration
MOE = {"mixtral", "qwen2_moe", "qwen3_moe", "deepseek_v2", "deepseek_v3", "glm4_moe", "gpt_oss",
       "jamba", "granitemoehybrid", "nemotron_h", "qwen3_next", "qwen3_5_moe", "qwen3_5_moe_text"}


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
    elif raw["model_type"] in SPEECH:
        cls = transformers.AutoModelForSpeechSeq2Seq
    elif raw["model_type"] == "mllama":  # the whole checkpoint, vision tower included
        cls = transformers.AutoModelForImageTextToText
    else:
        cls = transformers.AutoModelForCausalLM
    with torch.device("meta"), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return cls.from_config(cfg)


def numel(model) -> int:
    return sum(p.numel() for p in model.parameters())


def step_flops(loss, custom_mapping: dict | None = None) -> int:
    """torch's FlopCounterMode total of one training step: ``loss()`` (the forward and its
    loss) and the backward from that loss, HF's warnings muted. ``custom_mapping``: FLOP
    formulas that replace torch's for some ops (FlopCounterMode's own argument)."""
    from torch.utils.flop_counter import FlopCounterMode

    with FlopCounterMode(display=False, custom_mapping=custom_mapping) as counter, \
            warnings.catch_warnings():
        warnings.simplefilter("ignore")
        loss().backward()
    return counter.get_total_flops()


def train_step_flops(raw: dict, batch: int, seq: int, src_seq: int | None = None) -> int:
    """torch's FlopCounterMode total for forward + loss + backward of the HF model on meta."""
    model = hf_model(raw)
    ids = torch.zeros(batch, seq, dtype=torch.long, device="meta")

    def loss():
        if raw["model_type"] in SEQ2SEQ:
            src = torch.zeros(batch, src_seq or seq, dtype=torch.long, device="meta")
            return model(input_ids=src, labels=ids).loss
        if raw["model_type"] in ENCODERS:
            out = model(input_ids=ids)
            return out.last_hidden_state.float().sum() + out.pooler_output.float().sum()
        return model(input_ids=ids, labels=ids).loss
    return step_flops(loss)


def dropout_saved_bytes(model, forward) -> int:
    """The bytes a training step of ``model`` saves for backward beyond the same step in eval
    mode (its dropout masks and dropped copies): ``forward()`` runs once in each mode under
    saved_tensors_hooks (``reference.saved``), HF's eager-path warnings muted. The model is
    left in eval mode."""
    from reference.saved import saved_bytes_by_module

    def saved() -> int:
        per_module, _ = saved_bytes_by_module(model, forward)
        return sum(per_module.values())
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model.train()
        on = saved()
        model.eval()
        off = saved()
    return on - off


def saved_by_block(model, **inputs) -> dict[int, int]:
    """Bytes an HF encoder (LongformerModel and its kin) saves for backward per block
    ``encoder.layer.N`` (saved_tensors_hooks, unique storages) in a forward on ``inputs``, the
    loss the sum of last_hidden_state and pooler_output."""
    import re

    from reference.saved import saved_bytes_by_module

    def run():
        out = model(**inputs)
        return out.last_hidden_state.float().sum() + out.pooler_output.float().sum()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        per_module, _ = saved_bytes_by_module(model, run)
    out: dict[int, int] = {}
    for path, v in per_module.items():
        m = re.match(r"encoder\.layer\.(\d+)\.", path)
        if m:
            out[int(m[1])] = out.get(int(m[1]), 0) + v
    return out


def recorded_numel(hf_answers, raw: dict) -> int:
    """numel of hf_model(raw), through the recording of HF's answers (tests/hf_record.py)."""
    return hf_answers(raw, "hf_models.numel", lambda: numel(hf_model(raw)))


def recorded_train_step_flops(hf_answers, raw: dict, batch: int, seq: int,
                              src_seq: int | None = None, cannot_run: tuple = ()) -> int | None:
    """train_step_flops through the recording of HF's answers (tests/hf_record.py); None where
    it raises one of ``cannot_run`` (HF's own forward cannot run the config on meta)."""
    return hf_answers(raw, "hf_models.train_step_flops",
                      lambda: train_step_flops(raw, batch, seq, src_seq=src_seq),
                      cannot_run=cannot_run, batch=batch, seq=seq, src_seq=src_seq)
