"""Encoder-decoders (tests/conformance/test_encoder_decoders.py): BART and its kin, mT5, UMT5,
Whisper."""

from __future__ import annotations

from hypothesis import strategies as st

from .common import maybe


@st.composite
def bart_like(draw, model_type: str) -> dict:
    d = draw(st.sampled_from([8, 12, 16, 24, 32]))
    heads = [h for h in range(1, 9) if d % h == 0]
    raw = {"model_type": model_type, "d_model": d, "vocab_size": draw(st.integers(16, 200)),
           "encoder_layers": draw(st.integers(1, 3)), "decoder_layers": draw(st.integers(1, 3)),
           "encoder_attention_heads": draw(st.sampled_from(heads)),
           "decoder_attention_heads": draw(st.sampled_from(heads)),
           "encoder_ffn_dim": draw(st.integers(4, 48)), "decoder_ffn_dim": draw(st.integers(4, 48)),
           "max_position_embeddings": draw(st.integers(32, 100)), "pad_token_id": 1,
           "decoder_start_token_id": 0,
           # M2M-100 skips each layer with probability 0.05 by default while training (a
           # random FLOP count): txcalc counts every layer, the reference runs every layer
           "encoder_layerdrop": 0.0, "decoder_layerdrop": 0.0}
    maybe(draw, raw, "activation_function", st.sampled_from(["gelu", "relu"]))
    maybe(draw, raw, "scale_embedding", st.booleans())
    if model_type == "bart":  # mBART fields that BART's classes ignore
        maybe(draw, raw, "normalize_before", st.booleans())
        maybe(draw, raw, "add_final_layer_norm", st.booleans())
    return raw


@st.composite
def mt5(draw, model_type: str) -> dict:
    d = draw(st.sampled_from([8, 12, 16, 32]))
    raw = {"model_type": model_type, "d_model": d, "num_heads": draw(st.integers(1, 4)),
           "d_kv": draw(st.integers(2, 8)), "num_layers": draw(st.integers(1, 3)),
           "vocab_size": draw(st.integers(16, 200)), "d_ff": draw(st.integers(4, 48)),
           "decoder_start_token_id": 0}
    maybe(draw, raw, "num_decoder_layers", st.integers(1, 3))
    maybe(draw, raw, "feed_forward_proj", st.sampled_from(["relu", "gated-gelu", "gated-silu"]))
    # under 4 buckets UMT5's bucketing divides by zero in HF's forward (math.log(x / 0))
    maybe(draw, raw, "relative_attention_num_buckets", st.integers(4, 40))
    return raw


@st.composite
def whisper(draw) -> dict:
    raw = draw(bart_like("whisper"))
    raw.pop("max_position_embeddings")
    raw.update(num_mel_bins=draw(st.integers(1, 12)), bos_token_id=0, eos_token_id=2,
               max_source_positions=draw(st.integers(2, 12)),
               max_target_positions=draw(st.integers(24, 64)))
    return raw


STRATEGIES = {t: bart_like(t) for t in ("bart", "mbart", "marian", "pegasus", "m2m_100")} | {
    "mt5": mt5("mt5"), "umt5": mt5("umt5"), "whisper": whisper()}
