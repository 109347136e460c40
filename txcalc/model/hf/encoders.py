"""Encoders (BERT and its kin) and their heads: the base model, masked LM, sequence and token
classifiers, ELECTRA's discriminator; each type's head style is in its registry record."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..checks import _show
from ...errors import ConfigError
from .fields import GATED, Fields, no_cross_attention, sliding_flags, window_layout


#: HF class-name suffix -> txcalc head, for ``head="auto"`` (the class config.json names)
_HEAD_SUFFIXES = (("ForMaskedLM", "mlm"), ("ForSequenceClassification", "seq_cls"),
                  ("ForTokenClassification", "token_cls"), ("ForPreTraining", "discriminator"),
                  ("Model", "none"))
#: ``head`` arguments of from_hf_dict / load_hf_config. ELECTRA's generator is its masked-LM
#: head ("mlm", ElectraForMaskedLM); "discriminator" is ElectraForPreTraining's replaced-token
#: detector: Linear(D, D) + activation, then Linear(D, 1), on every token.
ENCODER_HEADS = ("none", "mlm", "seq_cls", "token_cls", "discriminator", "auto")


@dataclass(frozen=True)
class Heads:
    """How an encoder type builds its heads (HF 5.x ``*For*`` classes); a registry record field.

    ``base_pooler``: the base model (AutoModel) has a pooler. ``cls``: seq_cls is "pooler"
    (pooler + classifier: BERT, ALBERT) or "dense" (a Linear(D, D) + activation on the first
    token, then the classifier: RoBERTa, ELECTRA, MPNet, ESM, DistilBERT); ``norm``: a norm
    after that dense layer (ModernBERT). ``discriminator``: ForPreTraining's replaced-token
    detector (ELECTRA)."""

    base_pooler: bool
    cls: str
    norm: bool = False
    discriminator: bool = False


def _head_of(f: Fields) -> str:
    """The head asked for: ``f.head``, or with "auto" the suffix of ``architectures[0]``."""
    head = f.head or "none"
    if head != "auto":
        return head
    archs = f.get("architectures") or []
    name = archs[0] if isinstance(archs, list) and archs and isinstance(archs[0], str) else ""
    for suffix, ours in _HEAD_SUFFIXES:
        if name.endswith(suffix):
            return ours
    if name:
        raise ConfigError(f"{f.where}: architectures[0] ({_show(name)}) is not a head txcalc "
                          "models (masked LM, sequence or token classification, base model)")
    return "none"


def _labels(f: Fields) -> int:
    """num_labels as HF derives it: the length of ``id2label`` when given, else num_labels."""
    id2label = f.get("id2label")
    if isinstance(id2label, dict) and id2label:
        return len(id2label)
    return f.int("num_labels", 2)


def _with_head(f: Fields, out: dict[str, Any]) -> dict[str, Any]:
    """Set head, pooler and classifier fields of an encoder as HF builds the chosen class (by
    the ``Heads`` of the type's registry record)."""
    style, head = f.model.heads, _head_of(f)
    out = dict(out, head=head, pooler=False)
    if head == "none":
        out["pooler"] = style.base_pooler
    elif head == "mlm":
        out["lm_head_bias"] = True  # every MLM decoder has a vocabulary bias of its own
    elif head == "discriminator":
        if not style.discriminator:
            raise ConfigError(f"{f.where}: head 'discriminator' is ELECTRA's (ForPreTraining); "
                              f"{f.model.name} has none")
        # one logit per token, behind a dense layer: a token classifier of one label
        out.update(head="token_cls", n_labels=1, cls_dense=True, head_norm=False)
    else:
        out["n_labels"] = _labels(f)
        if head == "seq_cls" and style.cls == "pooler":
            out["pooler"] = True
        elif head == "seq_cls" or style.norm:
            out["cls_dense"] = True
        out["head_norm"] = style.norm
    return out


def _bert(f, roberta: bool = False):
    no_cross_attention(f)
    d = f.int("hidden_size", 768)
    return dict(family="encoder", n_layers=f.int("num_hidden_layers", 12), d_model=d,
                n_heads=f.int("num_attention_heads", 12),
                vocab_size=f.int("vocab_size", 50265 if roberta else 30522),
                d_ff=f.int("intermediate_size", 3072), max_position=f.int("max_position_embeddings", 512),
                type_vocab_size=f.int("type_vocab_size", 2), pos_type="learned",
                activation=f.act("hidden_act", "gelu"), qkv_bias=True, out_bias=True, mlp_bias=True,
                norm_position="post", final_norm=False, embed_norm=True, pooler=True, head="none")


def bert(f):
    return _with_head(f, _bert(f))


def roberta(f):
    return _with_head(f, _bert(f, roberta=True))


def xlm_roberta(f):
    """xlm-roberta and camembert: RoBERTa's structure with a 30522-token default vocabulary."""
    out = _bert(f, roberta=True)
    out["vocab_size"] = f.int("vocab_size", 30522)
    return _with_head(f, out)


def distilbert(f):
    d = f.int("dim", 768)
    out = dict(family="encoder", n_layers=f.int("n_layers", 6), d_model=d,
               n_heads=f.int("n_heads", 12), vocab_size=f.int("vocab_size", 30522),
               d_ff=f.int("hidden_dim", 3072), max_position=f.int("max_position_embeddings", 512),
               pos_type="learned", activation=f.act("activation", "gelu"), qkv_bias=True,
               out_bias=True, mlp_bias=True, norm_position="post", final_norm=False,
               embed_norm=True, resid_dropout_at="mlp")
    return _with_head(f, out)


def electra(f):
    no_cross_attention(f)
    d, e = f.int("hidden_size", 256), f.int("embedding_size", 128)
    out = dict(family="encoder", n_layers=f.int("num_hidden_layers", 12), d_model=d,
               n_heads=f.int("num_attention_heads", 4), vocab_size=f.int("vocab_size", 30522),
               d_ff=f.int("intermediate_size", 1024),
               max_position=f.int("max_position_embeddings", 512),
               type_vocab_size=f.int("type_vocab_size", 2), pos_type="learned",
               activation=f.act("hidden_act", "gelu"), qkv_bias=True, out_bias=True,
               mlp_bias=True, norm_position="post", final_norm=False, embed_norm=True,
               embed_dim=e, embed_factorised=e != d)  # embeddings_project only when e != d
    return _with_head(f, out)


def albert(f):
    if f.int("inner_group_num", 1) != 1:
        raise ConfigError(f"{f.where}: field 'inner_group_num' ({f.get('inner_group_num')}): "
                          "txcalc models ALBERT groups of one layer")
    d, n_layers = f.int("hidden_size", 4096), f.int("num_hidden_layers", 12)
    groups = f.int("num_hidden_groups", 1)
    if groups > n_layers:
        raise ConfigError(f"{f.where}: field 'num_hidden_groups' ({groups}) exceeds "
                          f"num_hidden_layers ({n_layers}): HF builds groups no layer runs")
    out = dict(family="encoder", n_layers=n_layers, d_model=d,
               n_heads=f.int("num_attention_heads", 64), vocab_size=f.int("vocab_size", 30000),
               d_ff=f.int("intermediate_size", 16384),
               max_position=f.int("max_position_embeddings", 512),
               type_vocab_size=f.int("type_vocab_size", 2), pos_type="learned",
               activation=f.act("hidden_act", "gelu_new"), qkv_bias=True, out_bias=True,
               mlp_bias=True, norm_position="post", final_norm=False, embed_norm=True,
               embed_dim=f.int("embedding_size", 128), embed_factorised=True,
               shared_groups=groups, resid_dropout_at="attn")
    return _with_head(f, out)


def mpnet(f):
    d = f.int("hidden_size", 768)
    out = dict(family="encoder", n_layers=f.int("num_hidden_layers", 12), d_model=d,
               n_heads=f.int("num_attention_heads", 12), vocab_size=f.int("vocab_size", 30527),
               d_ff=f.int("intermediate_size", 3072),
               max_position=f.int("max_position_embeddings", 512), pos_type="learned",
               activation=f.act("hidden_act", "gelu"), qkv_bias=True, out_bias=True,
               mlp_bias=True, norm_position="post", final_norm=False, embed_norm=True,
               extra_rel_bias=True,
               relative_buckets=f.int("relative_attention_num_buckets", 32))
    return _with_head(f, out)


def modernbert(f):
    d = f.int("hidden_size", 768)
    norm_bias = f.bool("norm_bias", False)
    attn_bias = f.bool("attention_bias", False)
    out = dict(family="encoder", n_layers=f.int("num_hidden_layers", 22), d_model=d,
               n_heads=f.int("num_attention_heads", 12), vocab_size=f.int("vocab_size", 50368),
               d_ff=f.int("intermediate_size", 1152),
               max_position=f.int("max_position_embeddings", 8192), pos_type="rotary",
               activation=GATED[f.act("hidden_activation", "gelu")], qkv_bias=attn_bias,
               out_bias=attn_bias, mlp_bias=f.bool("mlp_bias", False), norm_bias=norm_bias,
               norm_position="pre", final_norm=True, embed_norm=True, first_attn_norm=False,
               head_dense_bias=f.bool("classifier_bias", False),
               tie_embeddings=f.bool("tie_word_embeddings", True), resid_dropout_at="attn")
    # local layers: layer_types, else every layer but each global_attn_every_n_layers-th
    # (0, k, 2k, ...) attends within local_attention // 2 tokens either side (model FLOPs
    # skip the rest; the dense kernel HF runs computes every pair)
    n = out["n_layers"]
    sliding = sliding_flags(f, n)
    if sliding is None:
        every = f.int("global_attn_every_n_layers", 3)
        sliding = [bool(i % every) for i in range(n)] if every > 0 else [False] * n
    out.update(window_layout(f.int("local_attention", 128) // 2, sliding))
    out = _with_head(f, out)
    if out["head"] == "mlm":
        out["lm_head_bias"] = f.bool("decoder_bias", True)
    return out


def esm(f):
    pos = f.get("position_embedding_type", "absolute")
    if pos not in ("absolute", "rotary"):
        raise ConfigError(f"{f.where}: field 'position_embedding_type' ({_show(pos)}): txcalc "
                          "models ESM with 'absolute' or 'rotary' positions")
    if f.get("vocab_size") is None:
        raise ConfigError(f"{f.where}: missing required field 'vocab_size' (EsmConfig has "
                          "no default)")
    d = f.int("hidden_size", 768)
    out = dict(family="encoder", n_layers=f.int("num_hidden_layers", 12), d_model=d,
               n_heads=f.int("num_attention_heads", 12), vocab_size=f.int("vocab_size"),
               d_ff=f.int("intermediate_size", 3072),
               max_position=f.int("max_position_embeddings", 1026),
               pos_type="learned" if pos == "absolute" else "rotary", activation="gelu",
               qkv_bias=True, out_bias=True, mlp_bias=True, norm_position="pre",
               final_norm=True, embed_norm=bool(f.get("emb_layer_norm_before", False)),
               contact_head=True, tie_embeddings=f.bool("tie_word_embeddings", True))
    return _with_head(f, out)


def nomic_bert(f):
    """Nomic BERT (nomic-embed-text): BERT's post-norm blocks and token-type embeddings with
    rotary positions (no position table), bias-free q/k/v/o and a bias-free gated MLP
    (SwiGLU by default); the base model has no pooler, the classifier adds BERT's."""
    no_cross_attention(f)
    d, h = f.int("hidden_size", 768), f.int("num_attention_heads", 12)
    out = dict(family="encoder", n_layers=f.int("num_hidden_layers", 12), d_model=d,
               n_heads=h, head_dim=f.heads(d, h), vocab_size=f.int("vocab_size", 30528),
               d_ff=f.int("intermediate_size", 3072),
               max_position=f.int("max_position_embeddings", 2048),
               type_vocab_size=f.int("type_vocab_size", 2), pos_type="rotary",
               activation=GATED[f.act("hidden_act", "silu")], qkv_bias=False, out_bias=False,
               mlp_bias=False, norm_position="post", final_norm=False, embed_norm=True)
    return _with_head(f, out)


def deberta_v2(f):
    """DeBERTa-v2 / v3: BERT's post-norm blocks with disentangled attention over shared
    relative-position embeddings (``relative_attention``), absolute positions only with
    ``position_biased_input``; no pooler in the base model."""
    d = f.int("hidden_size", 1536)
    if f.int("embedding_size", d) != d:
        raise ConfigError(f"{f.where}: field 'embedding_size' ({f.get('embedding_size')}) != "
                          f"hidden_size ({d}): DeBERTa's embed_proj is not modelled")
    if f.int("conv_kernel_size", 0) > 0:
        raise ConfigError(f"{f.where}: field 'conv_kernel_size' ({f.get('conv_kernel_size')}): "
                          "DeBERTa-v2's convolution layer is not modelled")
    if f.int("pooler_hidden_size", d) != d:
        raise ConfigError(f"{f.where}: field 'pooler_hidden_size' "
                          f"({f.get('pooler_hidden_size')}) != hidden_size ({d}) is not modelled")
    types = f.get("pos_att_type") or []
    if isinstance(types, str):
        types = [t.strip() for t in types.lower().split("|")]
    out = dict(family="encoder", n_layers=f.int("num_hidden_layers", 24), d_model=d,
               n_heads=f.int("num_attention_heads", 24), vocab_size=f.int("vocab_size", 128100),
               d_ff=f.int("intermediate_size", 6144),
               max_position=f.int("max_position_embeddings", 512),
               type_vocab_size=f.int("type_vocab_size", 0),
               pos_type="learned" if f.bool("position_biased_input", True) else "none",
               activation=f.act("hidden_act", "gelu"), qkv_bias=True, out_bias=True,
               mlp_bias=True, norm_position="post", final_norm=False, embed_norm=True)
    if f.bool("relative_attention", False):
        buckets = f.int("position_buckets", -1)
        max_rel = span = f.int("max_relative_positions", -1)
        span = buckets if buckets > 0 else span if span >= 1 else out["max_position"]
        out.update(rel_span=span, rel_c2p="c2p" in types, rel_p2c="p2c" in types,
                   rel_share_key=f.bool("share_att_key", False))
        if buckets > 0:  # v3: log buckets up to max_relative_positions (else the positions)
            out["rel_max_position"] = max_rel if max_rel >= 1 else out["max_position"]
    norms = [x.strip() for x in str(f.get("norm_rel_ebd", "none")).lower().split("|")]
    out["rel_norm"] = "layer_norm" in norms  # built (unused) even without relative attention
    return _with_head(f, out)


def longformer(f):
    """Longformer (Beltagy et al. 2020, arXiv:2004.05150; HF LongformerModel): RoBERTa's
    blocks with sliding-window attention, w = attention_window / 2 keys either side, run as
    HF's overlapping chunks (executed FLOPs: ``ops.sliding_chunk_pairs``; model FLOPs: the
    attended pairs), and per block separate global q/k/v projections (``global_qkv``) that
    run for the tokens with global attention (``Workload.global_tokens``, default none: the
    base model, masked LM and token classifier; the sequence classifier gives the first
    token global attention, ``components.global_attention``). Refused: per-layer windows
    that differ.

    HF pads any sequence to a multiple of attention_window: the embeddings and every block
    run the padded length (``Op.pad_to``), the heads the unpadded one."""
    out = _bert(f, roberta=True)
    out["vocab_size"] = f.int("vocab_size", 30522)
    n, window = out["n_layers"], f.get("attention_window", 512)
    windows = window if isinstance(window, list) else [window] * n
    if len(windows) != n or any(isinstance(x, bool) or not isinstance(x, int) or x <= 0
                                or x % 2 for x in windows):
        raise ConfigError(f"{f.where}: field 'attention_window' ({_show(window)}) must be a "
                          f"positive even integer or a list of {n} of them")
    if len(set(windows)) > 1:
        raise ConfigError(f"{f.where}: field 'attention_window' ({_show(window)}): windows "
                          "that differ between layers are not modelled")
    out.update(sliding_window=windows[0] // 2, sliding_chunks=True, global_qkv=True)
    return _with_head(f, out)
