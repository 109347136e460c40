"""Encoders (tests/conformance/test_encoders.py): BERT and its kin, DistilBERT, ELECTRA, ALBERT,
ModernBERT, ESM, DeBERTa-v2, NomicBERT, Longformer."""

from __future__ import annotations

from hypothesis import strategies as st

from .common import maybe


@st.composite
def geometry(draw, even: bool = False):
    step = 2 if even else 1
    heads = draw(st.integers(1, 4))
    hd = draw(st.sampled_from([d for d in range(step, 17, step) if 8 <= heads * d <= 64]))
    return heads * hd, heads


@st.composite
def bert_like(draw, model_type: str) -> dict:
    d, h = draw(geometry())
    raw = {"model_type": model_type, "hidden_size": d, "num_attention_heads": h,
           "num_hidden_layers": draw(st.integers(1, 3)), "vocab_size": draw(st.integers(16, 200)),
           "intermediate_size": draw(st.integers(4, 48))}
    maybe(draw, raw, "max_position_embeddings", st.integers(40, 200))
    if model_type not in ("mpnet", "esm"):
        maybe(draw, raw, "type_vocab_size", st.integers(1, 3))
    maybe(draw, raw, "hidden_act", st.sampled_from(["gelu", "relu", "gelu_new"]))
    return raw


@st.composite
def electra(draw) -> dict:
    raw = draw(bert_like("electra"))
    raw["embedding_size"] = draw(st.sampled_from([raw["hidden_size"], 4, 8, 12]))
    return raw


@st.composite
def albert(draw) -> dict:
    raw = draw(bert_like("albert"))
    raw["embedding_size"] = draw(st.sampled_from([raw["hidden_size"], 4, 8, 12]))
    raw["num_hidden_groups"] = draw(st.integers(1, raw["num_hidden_layers"]))
    return raw


@st.composite
def distilbert(draw) -> dict:
    d, h = draw(geometry())
    raw = {"model_type": "distilbert", "dim": d, "n_heads": h, "n_layers": draw(st.integers(1, 3)),
           "vocab_size": draw(st.integers(16, 200)), "hidden_dim": draw(st.integers(4, 48))}
    maybe(draw, raw, "max_position_embeddings", st.integers(40, 200))
    maybe(draw, raw, "activation", st.sampled_from(["gelu", "relu"]))
    maybe(draw, raw, "sinusoidal_pos_embds", st.booleans())
    return raw


@st.composite
def modernbert(draw) -> dict:
    d, h = draw(geometry(even=True))
    raw = {"model_type": "modernbert", "hidden_size": d, "num_attention_heads": h,
           "num_hidden_layers": draw(st.integers(1, 4)), "vocab_size": 64,
           "intermediate_size": draw(st.integers(4, 48)), "pad_token_id": 0, "eos_token_id": 1,
           "bos_token_id": 2, "cls_token_id": 3, "sep_token_id": 4}
    for key in ("norm_bias", "attention_bias", "mlp_bias", "classifier_bias", "decoder_bias",
                "tie_word_embeddings"):
        maybe(draw, raw, key, st.booleans())
    maybe(draw, raw, "global_attn_every_n_layers", st.integers(1, 3))
    maybe(draw, raw, "hidden_activation", st.sampled_from(["gelu", "silu"]))
    return raw


@st.composite
def esm(draw) -> dict:
    raw = draw(bert_like("esm"))
    raw["pad_token_id"] = 0
    maybe(draw, raw, "emb_layer_norm_before", st.booleans())
    raw["position_embedding_type"] = draw(st.sampled_from(["absolute", "rotary"]))
    if raw["position_embedding_type"] == "rotary" and (raw["hidden_size"]
                                                       // raw["num_attention_heads"]) % 2:
        raw["position_embedding_type"] = "absolute"
    raw.pop("hidden_act", None)
    return raw


@st.composite
def deberta_v2(draw) -> dict:
    raw = draw(bert_like("deberta-v2"))
    maybe(draw, raw, "relative_attention", st.booleans())
    maybe(draw, raw, "position_buckets", st.integers(-1, 8))
    maybe(draw, raw, "max_relative_positions", st.integers(-1, 8))
    maybe(draw, raw, "share_att_key", st.booleans())
    maybe(draw, raw, "norm_rel_ebd", st.sampled_from(["none", "layer_norm"]))
    maybe(draw, raw, "position_biased_input", st.booleans())
    maybe(draw, raw, "pos_att_type", st.sampled_from([[], ["c2p"], ["p2c"], ["p2c", "c2p"],
                                                      "p2c|c2p"]))
    return raw


@st.composite
def nomic_bert(draw) -> dict:
    d, h = draw(geometry(even=True))
    raw = draw(bert_like("nomic_bert"))
    raw.update(hidden_size=d, num_attention_heads=h)
    raw["hidden_act"] = draw(st.sampled_from(["silu", "gelu"]))
    return raw


STRATEGIES = {
    "xlm-roberta": bert_like("xlm-roberta"), "camembert": bert_like("camembert"),
    "bert": bert_like("bert"), "roberta": bert_like("roberta"), "distilbert": distilbert(),
    "electra": electra(), "albert": albert(), "mpnet": bert_like("mpnet"),
    "modernbert": modernbert(), "esm": esm(), "deberta-v2": deberta_v2(),
    "nomic_bert": nomic_bert(),
}


@st.composite
def longformer(draw) -> dict:
    raw = draw(bert_like("longformer"))
    raw["attention_window"] = draw(st.sampled_from([4, 6, 8]))  # HF fails on 2 (w = 1)
    raw["max_position_embeddings"] = 64  # RoBERTa's positions start at pad_token_id + 1
    return raw
