"""Encoder-decoders of issue 13 against Hugging Face: unequal stacks, drawn configs.

BART-shaped types (bart, mbart, marian, pegasus, m2m_100 / NLLB) with encoder and decoder of
different depth, heads and MLP width, pre- or post-norm, final norms, position tables as HF
stores them (learned, frozen sinusoidal parameters, sinusoidal buffers); mT5 and UMT5 (a
relative-bias table in every block). The reference is the seq2seq LM a user would load
(``AutoModelForSeq2SeqLM``) on the meta device: parameters, and FlopCounterMode over one
training step (forward with labels, backward).
"""

from __future__ import annotations

import os
import warnings

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import txcalc
from txcalc.engine.accounting import count_flops
from txcalc.errors import ConfigError
from txcalc.model.hf import from_hf_dict
from txcalc.engine.workload import Workload

from ..hf_models import dropout_saved_bytes, numel, step_flops
from ..hf_record import hf_answers  # noqa: F401 (a fixture)
from .strategies.encoder_decoders import STRATEGIES, bart_like, whisper

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

EXAMPLES = int(os.environ.get("TXCALC_HF_EXAMPLES", "15"))
SETTINGS = settings(max_examples=EXAMPLES, deadline=None,
                    derandomize="TXCALC_HF_EXAMPLES" not in os.environ,
                    suppress_health_check=list(HealthCheck))


#: no reference-model build yet (params and FLOPs are checked against HF here)
NO_REFERENCE: set[str] = set()


def hf_model(raw: dict):
    raw = dict(raw)
    model_type = raw.pop("model_type")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        cfg = transformers.AutoConfig.for_model(model_type, **raw)
        cfg._attn_implementation = "eager"
        cls = transformers.AutoModelForSpeechSeq2Seq if model_type == "whisper" else \
            transformers.AutoModelForSeq2SeqLM
        with torch.device("meta"):
            return cls.from_config(cfg)


def train_step_flops(raw: dict, batch: int, seq: int, src: int) -> int:
    model = hf_model(raw)
    ids = torch.zeros(batch, seq, dtype=torch.long, device="meta")
    src_ids = torch.zeros(batch, src, dtype=torch.long, device="meta")
    inputs = {"input_ids": src_ids}
    if raw["model_type"] == "whisper":  # log-mel frames, two per encoder position
        inputs = {"input_features": torch.zeros(batch, raw["num_mel_bins"], 2 * src,
                                                device="meta")}
    return step_flops(lambda: model(**inputs, labels=ids).loss)


@pytest.mark.live
@pytest.mark.parametrize("model_type", sorted(STRATEGIES))
@SETTINGS
@given(data=st.data())
def test_params_equal_hf_seq2seq_lm(model_type, data, hf_answers):
    raw = data.draw(STRATEGIES[model_type], label="config.json")
    assert txcalc.params(from_hf_dict(raw)).total == hf_answers(
        raw, "encoder_decoders.numel", lambda: numel(hf_model(raw)))


@pytest.mark.live
@pytest.mark.parametrize("model_type", sorted(STRATEGIES))
@settings(max_examples=max(3, EXAMPLES // 3), deadline=None,
          suppress_health_check=list(HealthCheck),
          derandomize="TXCALC_HF_EXAMPLES" not in os.environ)
@given(data=st.data())
def test_training_step_flops_equal_flopcountermode(model_type, data, hf_answers):
    raw = data.draw(STRATEGIES[model_type], label="config.json")
    cfg = from_hf_dict(raw)
    batch = data.draw(st.integers(1, 2), label="batch")
    seq = data.draw(st.integers(1, 24), label="seq")
    src = data.draw(st.integers(1, 24), label="src_seq")
    if model_type == "whisper":  # HF takes exactly 2 x max_source_positions mel frames
        src = raw["max_source_positions"]
    f = count_flops(cfg, Workload(batch=batch, seq=seq, src_seq=src))
    assert f.forward + f.backward == hf_answers(
        raw, "encoder_decoders.train_step_flops", lambda: train_step_flops(raw, batch, seq, src),
        batch=batch, seq=seq, src=src)


def test_unequal_stacks_are_modelled_per_stack():
    """encoder_ffn_dim != decoder_ffn_dim (refused before issue 13) sizes each stack's MLP."""
    raw = {"model_type": "bart", "d_model": 16, "encoder_layers": 2, "decoder_layers": 1,
           "encoder_attention_heads": 2, "decoder_attention_heads": 4, "encoder_ffn_dim": 40,
           "decoder_ffn_dim": 8, "vocab_size": 50}
    ops = txcalc.params(from_hf_dict(raw)).ops
    width = {op.path: op.d_out for op in ops}
    assert width["encoder.layers.0.mlp.up_proj"] == 40
    assert width["decoder.layers.0.mlp.up_proj"] == 8
    heads = {op.path: op.heads for op in ops if op.kind == "attn_scores"}
    assert heads["encoder.layers.1.attn.core.scores"] == 2
    assert heads["decoder.layers.0.cross_attn.core.scores"] == 4


def test_sinusoidal_tables_are_parameters_or_buffers_as_in_hf():
    """Marian's and Pegasus's sinusoidal tables are (frozen) parameters, one per stack, that
    save nothing for backward; M2M-100's are buffers (no parameters)."""
    raw = {"d_model": 16, "encoder_layers": 1, "decoder_layers": 1, "vocab_size": 50,
           "encoder_attention_heads": 2, "decoder_attention_heads": 2,
           "max_position_embeddings": 64}
    for model_type in ("marian", "pegasus"):
        tables = [op for op in txcalc.params(from_hf_dict(dict(raw, model_type=model_type))).ops
                  if op.component == "embed.positions"]
        assert [op.stack for op in tables] == ["encoder", "decoder"]
        assert all(op.params == 64 * 16 and op.saved == () for op in tables)
    m2m = from_hf_dict(dict(raw, model_type="m2m_100"))
    assert not any(op.component == "embed.positions" for op in txcalc.params(m2m).ops)


@pytest.mark.parametrize("raw,field", [
    ({"model_type": "marian", "share_encoder_decoder_embeddings": False},
     "share_encoder_decoder_embeddings"),
    ({"model_type": "marian", "vocab_size": 50, "decoder_vocab_size": 60}, "decoder_vocab_size"),
    ({"model_type": "mbart", "tie_word_embeddings": False}, "tie_word_embeddings"),
    ({"model_type": "bart", "d_model": 16, "encoder_attention_heads": 3}, "encoder_attention_heads"),
])
def test_unrepresentable_seq2seq_fields_are_config_errors(raw, field):
    with pytest.raises(ConfigError, match=field):
        from_hf_dict(raw)


PUBLISHED = [
    # NLLB team 2022, arXiv:2207.04672: the dense NLLB-200 3.3B model
    ("nllb-200-3.3b", 3.3e9, 0.015),
    # Chung et al. 2022, arXiv:2210.11416, Table 1 / Raffel et al. 2019: Flan-T5-XXL 11B
    # (T5 v1.1 XXL with its untied lm_head: 11.14B)
    ("flan-t5-xxl", 11e9, 0.015),
    # Radford et al. 2022, arXiv:2212.04356, Table 1: Whisper large, 1550M parameters (the
    # exact count of the HF model is 1,543,490,560: the paper rounds up, 0.42%)
    ("whisper-large-v3", 1550e6, 0.005),
    # Xue et al. 2020, arXiv:2010.11934, Table 2: mT5-XXL 13B (12.92B with its untied head)
    ("mt5-xxl", 13e9, 0.01),
]


@pytest.mark.parametrize("name,figure,tol", PUBLISHED)
def test_published_seq2seq_sizes(name, figure, tol):
    assert abs(txcalc.params(name).total - figure) / figure <= tol


@pytest.mark.parametrize("model_type", sorted(STRATEGIES))
@settings(max_examples=max(2, EXAMPLES // 5), deadline=None,
          suppress_health_check=list(HealthCheck),
          derandomize="TXCALC_HF_EXAMPLES" not in os.environ)
@given(data=st.data())
def test_reference_model_saved_bytes_per_layer_exact(model_type, data):
    """reference/model.py builds each structure: params, FLOPs and saved bytes per layer under
    every recompute mode equal the engine's (tests/test_encoders.reference_matches)."""
    from tests.conformance.test_encoders import reference_matches
    if model_type in NO_REFERENCE:
        pytest.skip(f"reference/model.py does not build {model_type} yet")
    raw = data.draw(STRATEGIES[model_type], label="config.json")
    reference_matches(from_hf_dict(raw), data.draw(st.integers(1, 2), label="batch"),
                      data.draw(st.integers(2, 12), label="seq"),
                      data.draw(st.integers(2, 12), label="src_seq"))


def causal_whisper(raw: dict):
    """WhisperForCausalLM (the text decoder alone) on meta."""
    raw = dict(raw)
    raw.pop("model_type")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        cfg = transformers.AutoConfig.for_model("whisper", **raw)
        cfg._attn_implementation = "eager"
        with torch.device("meta"):
            return transformers.WhisperForCausalLM(cfg)


@SETTINGS
@given(raw=whisper(), batch=st.integers(1, 2), seq=st.integers(1, 16), src=st.integers(1, 24))
def test_whisper_text_decoder_alone(raw, batch, seq, src):
    """architectures ["WhisperForCausalLM"]: the decoder alone, its cross-attention over
    ``src`` encoder frames given as input (no gradient for them): params == HF on meta, a
    training step's FLOPs == FlopCounterMode with encoder_outputs, no audio stem or
    encoder ops; the whole model (WhisperForConditionalGeneration) has the conv stem."""
    from torch.utils.flop_counter import FlopCounterMode
    raw = dict(raw, architectures=["WhisperForCausalLM"])
    cfg = from_hf_dict(raw)
    model = causal_whisper(raw)
    assert txcalc.params(cfg).total == numel(model)
    ids = torch.zeros(batch, seq, dtype=torch.long, device="meta")
    enc = torch.zeros(batch, src, raw["d_model"], device="meta")
    with FlopCounterMode(display=False) as counter:
        model(input_ids=ids, encoder_outputs=(enc,), labels=ids).loss.backward()
    f = count_flops(cfg, Workload(batch=batch, seq=seq, src_seq=src))
    assert f.forward + f.backward == counter.get_total_flops()
    ops = txcalc.params(cfg).ops
    assert not any(op.stack == "encoder" or "conv" in op.path for op in ops)
    whole = txcalc.params(from_hf_dict(dict(raw, architectures=[
        "WhisperForConditionalGeneration"]))).ops
    assert {op.path for op in whole} >= {"encoder.conv1", "encoder.conv2"}


@settings(max_examples=max(2, EXAMPLES // 5), deadline=None,
          suppress_health_check=list(HealthCheck),
          derandomize="TXCALC_HF_EXAMPLES" not in os.environ)
@given(raw=whisper(), batch=st.integers(1, 2), seq=st.integers(2, 12), src=st.integers(2, 12))
def test_whisper_text_decoder_reference_saved_bytes(raw, batch, seq, src):
    from tests.conformance.test_encoders import reference_matches
    cfg = from_hf_dict(dict(raw, architectures=["WhisperForCausalLM"]))
    reference_matches(cfg, batch, seq, src)


@pytest.mark.parametrize("model_type", ["marian", "pegasus", "whisper", "bart", "m2m_100"])
def test_frozen_position_tables_are_not_trainable(model_type):
    """HF freezes Marian's and Pegasus's sinusoidal tables and Whisper's encoder positions
    (requires_grad False): txcalc's trainable parameters (gradients, optimizer states) equal
    the HF model's parameters that require grad; the total still counts them."""
    from txcalc.engine.memory import TrainingMemory
    raw = {"whisper": whisper(), "marian": bart_like("marian"), "pegasus": bart_like("pegasus"),
           "bart": bart_like("bart"), "m2m_100": bart_like("m2m_100")}[model_type].example()
    model = hf_model(raw)
    cfg = from_hf_dict(raw)
    trainable = sum(p.numel() for p in model.parameters() if p.requires_grad)
    mem = TrainingMemory(cfg, Workload(batch=1, seq=8, src_seq=4), "bf16-mixed", "adamw")
    assert mem.trainable_params == trainable
    assert txcalc.params(cfg).total == numel(model)
    if model_type in ("marian", "pegasus", "whisper"):
        assert trainable < numel(model)
    # the planner's one-GPU layout follows the same trainable ops (gradients, optimizer states)
    from tests.unit.test_engine import _one_gpu
    planner, engine = _one_gpu(cfg, 1, 8, "bf16-mixed", "adamw", "none", "eager")
    assert planner == engine


@pytest.mark.live
@pytest.mark.parametrize("model_type", ["bart", "mbart", "marian", "pegasus", "m2m_100",
                                        "whisper"])
@settings(max_examples=max(2, EXAMPLES // 5), deadline=None,
          suppress_health_check=list(HealthCheck),
          derandomize="TXCALC_HF_EXAMPLES" not in os.environ)
@given(data=st.data())
def test_dropout_masks_equal_hf(model_type, data, hf_answers):
    """BART-family dropout (``dropout``, ``attention_dropout``, ``activation_dropout``): the
    bytes a training step with dropout saves beyond the same step without it (masks, and the
    probabilities eager attention keeps both before and after dropout) equal what the HF model
    saves beyond its eval-mode run (bf16 on meta: masks in bf16, ``dropout_mask="act"``)."""
    from txcalc.engine.memory import TrainingMemory
    raw = data.draw(STRATEGIES[model_type], label="config.json")
    for key in ("dropout", "attention_dropout", "activation_dropout"):
        raw[key] = data.draw(st.sampled_from([0.0, 0.1]), label=key)
    batch, seq, src = 1, data.draw(st.integers(2, 8), label="seq"), 4
    if model_type == "whisper":
        src = raw["max_source_positions"]
    cfg = from_hf_dict(raw)

    def measure() -> int:
        model = hf_model(raw).to(torch.bfloat16)
        ids = torch.zeros(batch, seq, dtype=torch.long, device="meta")
        inputs = {"input_ids": torch.zeros(batch, src, dtype=torch.long, device="meta"),
                  "labels": ids}
        if model_type == "whisper":
            inputs = {"input_features": torch.zeros(batch, raw["num_mel_bins"], 2 * src,
                                                    dtype=torch.bfloat16, device="meta"),
                      "labels": ids}
        return dropout_saved_bytes(model, lambda: model(**inputs).loss)
    dropped = hf_answers(raw, "encoder_decoders.dropout_saved_bytes", measure, batch=batch,
                         seq=seq, src=src)

    def act(dropout: bool) -> int:
        # HF BART-family eager attention: softmax in the activation dtype (bf16)
        w = Workload(batch=batch, seq=seq, src_seq=src, attn_impl="eager", dropout=dropout,
                     softmax_fp32=False,
                     dropout_mask="act")
        return TrainingMemory(cfg, w, "bf16-mixed").to_json()["activations_bytes"]
    assert act(True) - act(False) == dropped
