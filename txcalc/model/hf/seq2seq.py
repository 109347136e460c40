"""Encoder-decoders: T5 (mT5, UMT5) and BART and its kin (mBART, Marian, Pegasus, M2M-100/NLLB,
Whisper), whose encoder and decoder may differ in depth, heads and MLP width."""

from __future__ import annotations

from typing import Any

from ...errors import ConfigError
from .fields import ACT, GATED, Fields


def t5(f):
    proj = str(f.get("feed_forward_proj", "relu"))
    gated = proj.startswith("gated-")
    act = f.act("feed_forward_proj", "relu") if not gated else ACT.get(proj[6:])
    if act is None:
        raise ConfigError(f"{f.where}: field 'feed_forward_proj' ({proj!r}) is not a known activation")
    # HF resolves the num_hidden_layers alias after T5Config.__post_init__, so with it (and no
    # num_decoder_layers) the decoder gets the class default of 6 layers, not the encoder's depth
    aliased = f.get("num_hidden_layers") is not None
    n_layers = f.int("num_hidden_layers") if aliased else f.int("num_layers", 6)
    # tie_word_embeddings false: transformers 5.x ties T5's lm_head anyway (T5Config forces
    # it), but such checkpoints (T5 v1.1, MADLAD) store their own lm_head; it is counted here
    return dict(family="encoder-decoder", n_encoder_layers=n_layers,
                n_layers=f.int("num_decoder_layers", 6 if aliased else n_layers),
                d_model=f.int("d_model", 512),
                n_heads=f.int("num_heads", 8), head_dim=f.int("d_kv", 64), d_ff=f.int("d_ff", 2048),
                vocab_size=f.int("vocab_size", 32128), pos_type="relative_bias",
                relative_buckets=f.int("relative_attention_num_buckets", 32),
                max_position=f.int("n_positions", 512), activation=GATED[act] if gated else act,
                norm_type="rmsnorm", norm_bias=False, tie_embeddings=f.bool("tie_word_embeddings", True))


def mt5(f, umt5: bool = False):
    """mT5 / UMT5: T5 v1.1 (gated GELU by default, 250112 tokens); UMT5 gives every block
    its own relative-bias table."""
    raw = dict(f.raw)
    raw.setdefault("feed_forward_proj", "gated-gelu")
    raw.setdefault("vocab_size", 250112)
    g = Fields(raw, f.where)
    out = t5(g)
    f.problems += g.problems
    if umt5:
        out["rel_bias_every_layer"] = True
    return out


def umt5(f):
    return mt5(f, umt5=True)


def _seq2seq(f: Fields, *, d_model: int, pre_norm: bool, embed_norm: bool,
             positions: str, offset: int, max_pos: int, vocab: int,
             act: str = "gelu") -> dict[str, Any]:
    """BART and its kin: encoder and decoder may differ in depth, heads and MLP width (they
    share d_model and the token table). ``positions``: learned (BART, mBART: offset 2),
    param (Marian, Pegasus: frozen sinusoidal nn.Embedding), buffer (M2M-100/NLLB)."""
    if not f.bool("tie_word_embeddings", True):
        raise ConfigError(f"{f.where}: field 'tie_word_embeddings' (false): untied models have "
                          "separate shared, encoder and decoder token tables and an lm_head; "
                          "txcalc models one token table shared by both stacks")
    d = f.int("d_model", d_model)
    out = dict(family="encoder-decoder", n_encoder_layers=f.int("encoder_layers", 12),
               n_layers=f.int("decoder_layers", 12), d_model=d,
               n_heads=f.int("decoder_attention_heads", 16),
               encoder_n_heads=f.int("encoder_attention_heads", 16),
               d_ff=f.int("decoder_ffn_dim", 4096), encoder_d_ff=f.int("encoder_ffn_dim", 4096),
               vocab_size=f.int("vocab_size", vocab),
               max_position=f.int("max_position_embeddings", max_pos), position_offset=offset,
               pos_type="learned" if positions == "learned" else "sinusoidal",
               activation=f.act("activation_function", act), qkv_bias=True, out_bias=True,
               mlp_bias=True, norm_position="pre" if pre_norm else "post", final_norm=pre_norm,
               embed_norm=embed_norm, tie_embeddings=True)
    if positions != "learned":
        out["sinusoidal_table"] = positions
    for side in ("encoder", "decoder"):
        heads = out["encoder_n_heads" if side == "encoder" else "n_heads"]
        if heads > 0 and d % heads:
            raise ConfigError(f"{f.where}: d_model ({d}) is not divisible by "
                              f"{side}_attention_heads ({heads})")
    return out


def bart(f):
    # add_final_layer_norm / normalize_before (mBART's pre-norm) are not read by HF's BART
    # classes: a model_type "bart" file with them builds the post-norm BART counted here
    return _seq2seq(f, d_model=1024, pre_norm=False, embed_norm=True, positions="learned",
                    offset=2, max_pos=1024, vocab=50265)


def mbart(f):
    return _seq2seq(f, d_model=1024, pre_norm=True, embed_norm=True, positions="learned",
                    offset=2, max_pos=1024, vocab=50265)


def marian(f):
    if not f.bool("share_encoder_decoder_embeddings", True):
        raise ConfigError(f"{f.where}: field 'share_encoder_decoder_embeddings' (false): "
                          "separate encoder and decoder token tables are not modelled")
    vocab = f.int("vocab_size", 58101)
    if f.int("decoder_vocab_size", vocab) != vocab:
        raise ConfigError(f"{f.where}: decoder_vocab_size ({f.get('decoder_vocab_size')}) != "
                          f"vocab_size ({vocab}): one shared token table is modelled")
    return _seq2seq(f, d_model=1024, pre_norm=False, embed_norm=False, positions="param",
                    offset=0, max_pos=1024, vocab=58101)


def pegasus(f):
    return _seq2seq(f, d_model=1024, pre_norm=True, embed_norm=False, positions="param",
                    offset=0, max_pos=1024, vocab=50265)


def m2m_100(f):  # M2M100Config's activation_function defaults to relu (BART's: gelu)
    return _seq2seq(f, d_model=1024, pre_norm=True, embed_norm=False, positions="buffer",
                    offset=2, max_pos=1024, vocab=128112, act="relu")


def whisper(f):
    """Whisper (WhisperForConditionalGeneration): the conv audio stem, a pre-norm encoder over
    ``max_source_positions`` frames with a frozen position table, a pre-norm decoder with
    learned positions, final norms, k_proj without bias, the lm_head tied to the tokens.
    With ``architectures`` ["WhisperForCausalLM"]: the text decoder alone, cross-attending to
    encoder states given as input."""
    if f.int("encoder_layers", 4) <= 0:
        raise ConfigError(f"{f.where}: field 'encoder_layers' must be positive")
    out = _seq2seq(f, d_model=384, pre_norm=True, embed_norm=False, positions="learned",
                   offset=0, max_pos=448, vocab=51865)
    out.update(n_encoder_layers=f.int("encoder_layers", 4), n_layers=f.int("decoder_layers", 4),
               n_heads=f.int("decoder_attention_heads", 6),
               encoder_n_heads=f.int("encoder_attention_heads", 6),
               d_ff=f.int("decoder_ffn_dim", 1536), encoder_d_ff=f.int("encoder_ffn_dim", 1536),
               max_position=f.int("max_target_positions", 448),
               encoder_max_position=f.int("max_source_positions", 1500),
               audio_mels=f.int("num_mel_bins", 80), k_proj_bias=False)
    archs = f.get("architectures") or []
    if isinstance(archs, list) and archs and archs[0] == "WhisperForCausalLM":
        # the text decoder alone (distil-whisper's assistant models): no encoder, no audio
        # stem; its cross-attention reads --src-seq encoder frames given as input
        out.update(n_encoder_layers=0, audio_mels=0, encoder_states_given=True)
    return out
