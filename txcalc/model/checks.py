"""What a ModelConfig field may hold, and ``validate``: the allowed values of the choice fields,
the bounds on sizes and products of sizes, and the cross-field rules, each problem named with
its values. ``ModelConfig`` (config.py) runs ``validate`` once it has resolved its derived
fields; this module reads a config's fields and never builds one (``ModelConfig`` is
imported for the annotations only, so config.py is the one that imports at run time)."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

from ..errors import ConfigError

if TYPE_CHECKING:
    from .config import ModelConfig

FAMILIES = ("decoder", "encoder", "encoder-decoder")
#: Activations of the MLP. Gated ones (GLU variants, Shazeer 2020) have two input projections.
GATED_ACTIVATIONS = ("swiglu", "geglu", "reglu", "geglu_tanh")
#: gelu_new is the tanh GELU written out elementwise (HF GPT-2): same math, more saved tensors.
PLAIN_ACTIVATIONS = ("relu", "gelu", "gelu_tanh", "gelu_new", "silu", "relu2")
ACTIVATIONS = PLAIN_ACTIVATIONS + GATED_ACTIVATIONS
NORM_TYPES = ("layernorm", "rmsnorm")
NORM_POSITIONS = ("pre", "post", "sandwich", "post_sub")
POSITION_TYPES = ("learned", "sinusoidal", "rotary", "relative_bias", "alibi", "none")
QK_NORMS = ("none", "head", "full", "per_head", "l2")
#: lm: causal LM head; none: base model (pooler where set); mlm: masked-LM head (dense, norm,
#: vocabulary projection); seq_cls / token_cls: classifier on the first token / every token
HEADS = ("lm", "none", "mlm", "seq_cls", "token_cls")
#: heads whose output is a vocabulary-wide logit per token
VOCAB_HEADS = ("lm", "mlm")
SINUSOIDAL_TABLES = ("none", "param", "buffer")


def _is_int(v) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _show(v) -> str:
    """A value for an error message: huge integers as a power of ten, long reprs truncated."""
    if _is_int(v) and abs(v) >= 10**15:
        bits = abs(v).bit_length()  # str() of more than 4,300 digits raises: estimate those
        digits = len(str(abs(v))) if bits < 14000 else int(bits * 0.30103) + 1
        return f"{'-' if v < 0 else ''}about 10^{digits - 1}"
    if isinstance(v, float) and not math.isfinite(v):  # as the JSON file spells it
        return "NaN" if v != v else ("-Infinity" if v < 0 else "Infinity")
    text = repr(v)
    return text if len(text) <= 80 else text[:80] + "..."


_INT_FIELDS_POSITIVE = ("n_layers", "d_model", "n_heads", "vocab_size", "d_ff", "n_kv_heads",
                        "head_dim", "embed_dim", "max_position", "moe_every")
_INT_FIELDS_NONNEG = ("n_encoder_layers", "sliding_window", "global_every", "q_lora_rank",
                      "kv_lora_rank", "qk_nope_head_dim", "qk_rope_head_dim", "v_head_dim",
                      "n_experts", "top_k", "moe_d_ff", "n_shared_experts", "shared_d_ff",
                      "first_k_dense", "position_offset", "relative_buckets", "type_vocab_size",
                      "attn_chunk", "shared_groups", "audio_mels", "rel_span", "vision_params",
                      "image_tokens", "image_token_px", "image_states", "embed_extra_rows",
                      "altup_inputs", "laurel_rank", "per_layer_dim", "per_layer_vocab",
                      "image_tile_px", "image_min_px", "image_max_px")
_INT_FIELDS_POSITIVE += ("n_labels", "encoder_n_heads", "encoder_d_ff", "encoder_max_position")
_BOOL_FIELDS = ("qkv_bias", "out_bias", "parallel_block", "mlp_bias", "shared_expert_gate",
                "router_bias", "norm_bias", "norm_affine", "final_norm", "embed_norm", "pooler",
                "tie_embeddings", "lm_head_bias", "attn_sinks", "expert_bias", "cls_dense", "head_norm",
                "head_dense_bias", "embed_factorised", "extra_rel_bias", "contact_head",
                "k_proj_bias", "rel_c2p", "rel_p2c", "rel_share_key", "rel_norm",
                "encoder_states_given",
                "rel_bias_every_layer", "first_attn_norm")
_INT_FIELDS_NONNEG += ("rel_max_position",)  # DeBERTa v3 (issue 13, part 2)
_BOOL_FIELDS += ("sliding_chunks", "global_qkv")  # Longformer
_DROPOUT_FIELDS = ("embed_dropout", "attn_dropout", "resid_dropout", "mlp_dropout",
                   "final_dropout")
_CHOICES = {"family": FAMILIES, "activation": ACTIVATIONS, "norm_type": NORM_TYPES,
            "norm_position": NORM_POSITIONS, "pos_type": POSITION_TYPES, "qk_norm": QK_NORMS,
            "head": HEADS, "sinusoidal_table": SINUSOIDAL_TABLES}


#: Upper bounds on config fields. Generous for real models (10-100x the largest published
#: ones: Llama 3.1 405B has 126 layers, d_model 16384, d_ff 53248; DeepSeek-V3 256 experts;
#: Gemma 3 a 262,144-token vocabulary; Llama 4 Scout a 10M context), and tight enough that
#: every answer comes in seconds and every product the planner forms in int64 stays exact.
MAX_LAYERS = 2**11  #: per stack (DeepNet trained 1,000 layers); 2,048 layers answer in seconds
MAX_WIDTH = 2**20  #: d_model, d_ff, head_dim, embed_dim, expert widths, MLA ranks
MAX_HEADS = 2**16  #: query and key/value heads
MAX_VOCAB = 2**24  #: vocab_size (16.8M tokens)
MAX_POSITION = 2**26  #: max_position, sliding_window, position tables (67M tokens)
MAX_EXPERTS = 2**16  #: routed and shared experts, top_k
MAX_SMALL = 2**16  #: relative_buckets, type_vocab_size, position_offset, moe/global steps
#: layers x d_model x the widest layer (MLP: max(d_ff, experts x expert width + shared width);
#: attention: q/kv widths) bounds the parameter count from above; 2^50 (1.1e15) is ~2,000x
#: DeepSeek-V3's 2.4e11, and keeps bytes x parallel degrees far inside int64 (9.2e18)
MAX_SIZE = 2**50
NAME_MAX = 256  #: characters of a config's display name
_BOUNDS = {
    **{k: MAX_LAYERS for k in ("n_layers", "n_encoder_layers", "first_k_dense")},
    "shared_groups": MAX_LAYERS, "n_labels": MAX_VOCAB, "encoder_n_heads": MAX_HEADS,
    "encoder_d_ff": MAX_WIDTH, "audio_mels": MAX_WIDTH, "rel_span": MAX_POSITION, "encoder_max_position": MAX_POSITION,
    "vision_params": MAX_SIZE, "image_tokens": MAX_POSITION, "image_token_px": MAX_WIDTH,
    "image_states": MAX_POSITION, "embed_extra_rows": MAX_SMALL, "altup_inputs": MAX_SMALL,
    "laurel_rank": MAX_WIDTH, "per_layer_dim": MAX_WIDTH, "per_layer_vocab": MAX_VOCAB,
    "image_tile_px": MAX_WIDTH, "image_min_px": MAX_SIZE, "image_max_px": MAX_SIZE,
    **{k: MAX_WIDTH for k in ("d_model", "d_ff", "head_dim", "embed_dim", "moe_d_ff",
                              "shared_d_ff", "q_lora_rank", "kv_lora_rank", "qk_nope_head_dim",
                              "qk_rope_head_dim", "v_head_dim")},
    **{k: MAX_HEADS for k in ("n_heads", "n_kv_heads")},
    "vocab_size": MAX_VOCAB, "max_position": MAX_POSITION, "sliding_window": MAX_POSITION,
    "attn_chunk": MAX_POSITION,
    **{k: MAX_EXPERTS for k in ("n_experts", "top_k", "n_shared_experts")},
    **{k: MAX_SMALL for k in ("relative_buckets", "type_vocab_size", "position_offset",
                              "moe_every", "global_every")},
}
_BOUNDS["rel_max_position"] = MAX_POSITION  # DeBERTa v3


def _size_problems(cfg: ModelConfig) -> list[str]:
    """Fields each in range can still multiply into an absurd model: bound the products."""
    layers = cfg.n_layers + cfg.n_encoder_layers
    mlp = max(cfg.d_ff, cfg.n_experts * cfg.moe_d_ff + cfg.shared_d_ff)
    attn = max(cfg.n_heads * max(cfg.head_dim, cfg.qk_nope_head_dim + cfg.qk_rope_head_dim,
                                 cfg.v_head_dim), cfg.kv_lora_rank, cfg.q_lora_rank)
    out = []
    size = layers * max(cfg.d_model, cfg.embed_dim) * max(mlp, attn)
    if size > MAX_SIZE:
        out.append(f"layers ({layers}) x d_model ({cfg.d_model}) x widest layer "
                   f"({max(mlp, attn)}) = {size:.3g} exceeds txcalc's bound of {MAX_SIZE:.3g} "
                   "(~2,000x the largest published model)")
    table = cfg.vocab_size * max(cfg.d_model, cfg.embed_dim)
    if table > MAX_SIZE:
        out.append(f"vocab_size ({cfg.vocab_size}) x d_model ({cfg.d_model}) = {table:.3g} "
                   f"exceeds txcalc's bound of {MAX_SIZE:.3g}")
    return out


MIXERS = ("attention", "mamba", "mamba2", "hybrid", "conv", "gdn", "rglru", "none")
FFNS = ("mlp", "moe", "none")


#: SSM fields: (smallest, largest) value
_SSM_INTS = {"ssm_d_inner": (0, MAX_WIDTH), "ssm_state": (0, MAX_WIDTH),
             "ssm_dt_rank": (0, MAX_WIDTH), "ssm_head_dim": (0, MAX_WIDTH),
             "ssm_heads": (0, MAX_HEADS), "ssm_groups": (1, MAX_HEADS),
             "ssm_chunk": (1, MAX_WIDTH), "ssm_conv": (1, MAX_SMALL)}
_SSM_BOOLS = ("ssm_conv_bias", "ssm_bias", "ssm_out_bias", "ssm_dt_norms", "ssm_gated_norm",
              "attn_out_gate", "gdn_split_proj", "shared_qkv_adapters", "shared_attn_tied")


def _hybrid_problems(cfg: ModelConfig) -> list[str]:
    """Per-layer mixers and FFNs, the SSM fields, and the sizes the mixers they name need."""
    out = []
    for name, (lo, hi) in _SSM_INTS.items():
        v = getattr(cfg, name)
        if not _is_int(v) or not lo <= v <= hi:
            out.append(f"{name} ({_show(v)}) must be an integer from {lo} to {hi:,}")
    out += [f"{name} ({getattr(cfg, name)!r}) must be true or false" for name in _SSM_BOOLS
            if not isinstance(getattr(cfg, name), bool)]
    if out:
        return out
    widest = 2 * cfg.ssm_d_inner + 2 * cfg.ssm_groups * cfg.ssm_state + cfg.ssm_heads
    if cfg.mixers and cfg.n_layers * cfg.d_model * widest > MAX_SIZE:
        out.append(f"layers ({cfg.n_layers}) x d_model ({cfg.d_model}) x Mamba width "
                   f"({widest}) exceeds txcalc's bound of {MAX_SIZE:.3g}")
    for name, choices in (("mixers", MIXERS), ("ffns", FFNS)):
        v = getattr(cfg, name)
        if not isinstance(v, tuple) or not all(isinstance(x, str) and x in choices for x in v):
            out.append(f"{name} ({_show(v)}) must be a tuple of {' | '.join(choices)}")
        elif v and len(v) != cfg.n_layers:
            out.append(f"{name} lists {len(v)} layers, not n_layers ({cfg.n_layers})")
        elif v and cfg.family != "decoder":
            out.append(f"{name} are for decoder models, not family {cfg.family!r}")
    if out:
        return out
    kinds = set(cfg.mixers)
    if "moe" in cfg.ffns and not cfg.is_moe:
        out.append("ffns name a moe layer but n_experts is 0")
    if kinds & {"mamba", "mamba2", "hybrid"}:
        for name in ("ssm_d_inner", "ssm_state"):
            if getattr(cfg, name) <= 0:
                out.append(f"{name} ({getattr(cfg, name)}) must be positive for Mamba layers")
    if "mamba" in kinds and cfg.ssm_dt_rank <= 0:
        out.append(f"ssm_dt_rank ({cfg.ssm_dt_rank}) must be positive for Mamba layers")
    if "gdn" in kinds:
        for name in ("ssm_heads", "ssm_head_dim", "ssm_state", "ssm_groups"):
            if getattr(cfg, name) <= 0:
                out.append(f"{name} ({getattr(cfg, name)}) must be positive for Gated "
                           "DeltaNet layers")
        if cfg.ssm_heads % cfg.ssm_groups:
            out.append(f"ssm_heads ({cfg.ssm_heads}: value heads) must be divisible by "
                       f"ssm_groups ({cfg.ssm_groups}: key heads) for Gated DeltaNet layers")
        elif cfg.ssm_heads * cfg.ssm_head_dim != cfg.ssm_d_inner:
            out.append(f"ssm_heads ({cfg.ssm_heads}) x ssm_head_dim ({cfg.ssm_head_dim}) must "
                       f"equal ssm_d_inner ({cfg.ssm_d_inner}) for Gated DeltaNet layers")
    if kinds & {"mamba2", "hybrid"}:
        if cfg.ssm_heads * cfg.ssm_head_dim != cfg.ssm_d_inner:
            out.append(f"ssm_heads ({cfg.ssm_heads}) x ssm_head_dim ({cfg.ssm_head_dim}) must "
                       f"equal ssm_d_inner ({cfg.ssm_d_inner}) for Mamba-2 layers")
        elif cfg.ssm_heads % cfg.ssm_groups or cfg.ssm_d_inner % cfg.ssm_groups:
            out.append(f"ssm_heads ({cfg.ssm_heads}) must be divisible by ssm_groups "
                       f"({cfg.ssm_groups})")
    return out + _shared_block_problems(cfg)


def _shared_block_problems(cfg: ModelConfig) -> list[str]:
    """Zamba's shared attention blocks and Griffin's RG-LRU layers."""
    out = []
    v = cfg.shared_attn_layers
    if not isinstance(v, tuple) or not all(_is_int(i) and 0 <= i < cfg.n_layers for i in v) \
            or list(v) != sorted(set(v)):
        return [f"shared_attn_layers ({_show(v)}) must be increasing layer indices below "
                f"n_layers ({cfg.n_layers})"]
    for name, lo in (("shared_attn_blocks", 1), ("shared_adapter_rank", 0)):
        x = getattr(cfg, name)
        if not _is_int(x) or not lo <= x <= MAX_WIDTH:
            out.append(f"{name} ({_show(x)}) must be an integer from {lo} to {MAX_WIDTH:,}")
    if v and not cfg.mixers:
        out.append("shared_attn_layers need per-layer mixers")
    if cfg.shared_qkv_adapters and not cfg.shared_adapter_rank:
        out.append("shared_qkv_adapters needs a shared_adapter_rank")
    if cfg.shared_qkv_adapters and cfg.n_heads * cfg.head_dim != 2 * cfg.d_model:
        out.append(f"shared_qkv_adapters add a 2 x d_model ({2 * cfg.d_model}) output to q: "
                   f"n_heads ({cfg.n_heads}) x head_dim ({cfg.head_dim}) must equal it")
    if cfg.shared_qkv_adapters and cfg.n_kv_heads != cfg.n_heads:
        out.append(f"shared_qkv_adapters add a 2 x d_model output to k and v: n_kv_heads "
                   f"({cfg.n_kv_heads}) must equal n_heads ({cfg.n_heads})")
    if "rglru" in cfg.mixers and (cfg.ssm_heads <= 0 or cfg.ssm_d_inner <= 0
                                  or cfg.ssm_d_inner % cfg.ssm_heads):
        out.append(f"ssm_d_inner ({cfg.ssm_d_inner}: the RG-LRU width) must be a positive "
                   f"multiple of ssm_heads ({cfg.ssm_heads}: its gate blocks)")
    return out


def _encoder_problems(cfg: ModelConfig) -> list[str]:
    """Checks of the issue-13 fields (encoder heads, shared blocks, unequal stacks)."""
    out = []
    if cfg.head in ("mlm", "seq_cls", "token_cls") and cfg.family != "encoder":
        out.append(f"head {cfg.head!r} is for encoder models, not family {cfg.family!r}")
    if cfg.pooler and cfg.head in ("mlm", "token_cls"):
        out.append(f"pooler with head {cfg.head!r}: HF builds no pooler under a masked-LM or "
                   "token-classification head")
    if cfg.shared_groups > cfg.n_layers:
        out.append(f"shared_groups ({cfg.shared_groups}) exceeds n_layers ({cfg.n_layers})")
    if cfg.shared_groups and cfg.family != "encoder":
        out.append("shared_groups (ALBERT's shared blocks) is for encoder models")
    if cfg.family != "encoder-decoder":
        for name, base in (("encoder_n_heads", "n_heads"), ("encoder_d_ff", "d_ff")):
            if getattr(cfg, name) != getattr(cfg, base):
                out.append(f"{name} ({getattr(cfg, name)}) differs from {base} "
                           f"({getattr(cfg, base)}) in a model with no encoder stack")
    elif cfg.encoder_n_heads != cfg.n_heads:
        if cfg.d_model % cfg.encoder_n_heads:
            out.append(f"d_model ({cfg.d_model}) must be divisible by encoder_n_heads "
                       f"({cfg.encoder_n_heads})")
        if cfg.head_dim * cfg.n_heads != cfg.d_model or cfg.n_kv_heads != cfg.n_heads:
            out.append("an encoder with its own head count needs decoder heads of width "
                       "d_model // n_heads and no grouped KV heads")
    if cfg.sinusoidal_table != "none" and cfg.pos_type != "sinusoidal":
        out.append(f"sinusoidal_table ({cfg.sinusoidal_table!r}) needs pos_type 'sinusoidal'")
    if cfg.rel_bias_every_layer and cfg.pos_type != "relative_bias":
        out.append("rel_bias_every_layer needs pos_type 'relative_bias'")
    if cfg.rel_span and cfg.family != "encoder":
        out.append("rel_span (DeBERTa's disentangled attention) is for encoder models")
    if (cfg.rel_c2p or cfg.rel_p2c) and not cfg.rel_span:
        out.append("rel_c2p / rel_p2c need rel_span > 0")
    if cfg.audio_mels and cfg.family != "encoder-decoder":
        out.append("audio_mels (Whisper's audio stem) needs family 'encoder-decoder'")
    if cfg.audio_mels and cfg.pos_type != "learned":
        out.append("audio_mels (Whisper) needs pos_type 'learned'")
    if cfg.embed_factorised and cfg.family != "encoder":
        out.append("embed_factorised (ALBERT, ELECTRA) is for encoder models")
    if (cfg.sliding_chunks or cfg.global_qkv) and cfg.family != "encoder":
        out.append("sliding_chunks / global_qkv (Longformer) are for encoder models")
    if cfg.sliding_chunks and not cfg.sliding_window:
        out.append("sliding_chunks (Longformer) needs a sliding_window")
    if cfg.resid_dropout_at not in ("both", "attn", "mlp"):
        out.append(f"resid_dropout_at ({_show(cfg.resid_dropout_at)}) must be one of both, "
                   "attn, mlp")
    return out


def _cross_layer_problems(cfg: ModelConfig) -> list[str]:
    """Mllama's gated cross-attention blocks: plain pre-norm decoder blocks around them."""
    if not cfg.cross_layers:
        return []
    out = [f"cross_layers {bad} exceed n_layers ({cfg.n_layers})"
           for bad in [[i for i in cfg.cross_layers if i >= cfg.n_layers]] if bad]
    if (cfg.family != "decoder" or cfg.mixers or cfg.ffns or cfg.is_mla or cfg.is_moe
            or cfg.parallel_block or cfg.norm_position != "pre"):
        out.append("cross_layers (Mllama's gated cross-attention blocks) need a dense pre-norm "
                   "decoder with attention in every block (no MLA, MoE, mixers or parallel "
                   "blocks)")
    return out


def _image_grid_problems(cfg: ModelConfig) -> list[str]:
    """LLaVA-NeXT's anyres grid: (height, width) pairs in whole tiles of whole patches."""
    g = cfg.image_grid
    if not g:
        return []
    if not (isinstance(g, tuple) and all(isinstance(x, tuple) and len(x) == 2 and all(
            _is_int(v) and 0 < v <= MAX_POSITION for v in x) for x in g)):
        return [f"image_grid ({_show(g)}) must be a tuple of (height, width) pairs"]
    t, p = cfg.image_tile_px, cfg.image_token_px
    if t <= 0 or p <= 0 or t % p or any(v % t for x in g for v in x):
        return [f"image_grid {_show(g)} needs image_tile_px ({t}) dividing each side and "
                f"image_token_px ({p}) dividing image_tile_px"]
    return []


def _gemma3n_problems(cfg: ModelConfig) -> list[str]:
    """Gemma 3n's fields: per-layer widths, shared-KV layers, a decoder with sandwich norms."""
    out = []
    v = cfg.layer_d_ff
    if not isinstance(v, tuple) or not all(_is_int(x) and 0 < x <= MAX_WIDTH for x in v):
        return [f"layer_d_ff ({_show(v)}) must be a tuple of positive widths"]
    if v and len(v) != cfg.n_layers:
        out.append(f"layer_d_ff lists {len(v)} layers, not n_layers ({cfg.n_layers})")
    bad = [i for i in cfg.kv_shared_layers if i >= cfg.n_layers]
    if bad:
        out.append(f"kv_shared_layers {bad} exceed n_layers ({cfg.n_layers})")
    if (cfg.altup_inputs or cfg.kv_shared_layers or v) and (
            cfg.family != "decoder" or cfg.mixers or cfg.ffns or cfg.is_mla or cfg.is_moe
            or cfg.cross_layers or cfg.parallel_block):
        out.append("altup_inputs, kv_shared_layers and layer_d_ff (Gemma 3n) need a dense "
                   "decoder with attention in every block")
    if (cfg.laurel_rank or cfg.per_layer_dim) and not cfg.altup_inputs:
        out.append("laurel_rank and per_layer_dim are modelled with Gemma 3n's AltUp blocks "
                   "(altup_inputs > 0)")
    if cfg.per_layer_dim and not cfg.per_layer_vocab:
        out.append("per_layer_dim needs per_layer_vocab > 0 (the per-layer table's rows)")
    a = cfg.act_sparsity
    if not isinstance(a, tuple) or not all(
            isinstance(x, (int, float)) and not isinstance(x, bool) and 0 <= x < 1 for x in a):
        out.append(f"act_sparsity ({_show(a)}) must be a tuple of fractions in [0, 1)")
    elif a and len(a) != cfg.n_layers:
        out.append(f"act_sparsity lists {len(a)} layers, not n_layers ({cfg.n_layers})")
    elif any(a) and not cfg.altup_inputs:
        out.append("act_sparsity is modelled in Gemma 3n's blocks (altup_inputs > 0)")
    return out


def validate(cfg: ModelConfig) -> None:
    """Raise one ConfigError that names every offending value of ``cfg``."""
    if not isinstance(cfg.name, str) or len(cfg.name) > NAME_MAX:
        raise ConfigError(f"name ({_show(cfg.name)}) must be a string of at most {NAME_MAX} "
                          "characters")
    problems: list[str] = []
    for name in _INT_FIELDS_POSITIVE:
        v = getattr(cfg, name)
        if not _is_int(v) or v <= 0:
            problems.append(f"{name} ({_show(v)}) must be a positive integer")
    for name in _INT_FIELDS_NONNEG:
        v = getattr(cfg, name)
        if not _is_int(v) or v < 0:
            problems.append(f"{name} ({_show(v)}) must be a non-negative integer")
    for name, bound in _BOUNDS.items():
        v = getattr(cfg, name)
        if _is_int(v) and v > bound:
            problems.append(f"{name} ({_show(v)}) exceeds txcalc's bound of {bound:,}")
    for name in _BOOL_FIELDS:
        if not isinstance(getattr(cfg, name), bool):
            problems.append(f"{name} ({getattr(cfg, name)!r}) must be true or false")
    for name, choices in _CHOICES.items():
        if getattr(cfg, name) not in choices:
            problems.append(f"{name} ({getattr(cfg, name)!r}) must be one of {', '.join(choices)}")
    if not isinstance(cfg.dense_layers, tuple) or not all(_is_int(i) and i >= 0
                                                           for i in cfg.dense_layers):
        problems.append(f"dense_layers ({cfg.dense_layers!r}) must be a tuple of layer indices")
    for name in ("sliding_layers", "nope_layers", "chunked_layers", "cross_layers",
                 "kv_shared_layers"):
        v = getattr(cfg, name)
        if not isinstance(v, tuple) or not all(_is_int(i) and i >= 0 for i in v):
            problems.append(f"{name} ({v!r}) must be a tuple of layer indices")
    for name in _DROPOUT_FIELDS:
        v = getattr(cfg, name)
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not 0 <= v < 1:
            problems.append(f"{name} ({v!r}) must be a probability in [0, 1)")
    for name in ("dense_layers", "sliding_layers", "nope_layers", "chunked_layers",
                 "cross_layers", "kv_shared_layers", "layer_d_ff", "act_sparsity"):
        v = getattr(cfg, name)
        if isinstance(v, tuple) and len(v) > MAX_LAYERS:
            problems.append(f"{name} lists {len(v)} layers, over the bound of {MAX_LAYERS}")
    if problems:  # the structural checks below assume well-typed numbers
        raise ConfigError(f"{cfg.name}: " + "; ".join(problems))

    if cfg.n_kv_heads > cfg.n_heads:
        problems.append(f"n_kv_heads ({cfg.n_kv_heads}) must not exceed n_heads ({cfg.n_heads})")
    elif cfg.n_heads % cfg.n_kv_heads:
        problems.append(f"n_heads ({cfg.n_heads}) must be divisible by n_kv_heads "
                        f"({cfg.n_kv_heads})")
    if cfg.family == "encoder-decoder" and cfg.n_encoder_layers <= 0 \
            and not cfg.encoder_states_given:
        problems.append(f"n_encoder_layers ({cfg.n_encoder_layers}) must be positive for an "
                        "encoder-decoder model")
    if cfg.encoder_states_given and (cfg.family != "encoder-decoder" or cfg.n_encoder_layers
                                     or cfg.audio_mels):
        problems.append(f"encoder_states_given (a decoder alone) needs family 'encoder-decoder' "
                        f"(not {cfg.family!r}), n_encoder_layers 0 ({cfg.n_encoder_layers}) and "
                        f"no audio stem (audio_mels {cfg.audio_mels})")
    if cfg.family != "encoder-decoder" and cfg.n_encoder_layers:
        problems.append(f"n_encoder_layers ({cfg.n_encoder_layers}) is only for encoder-decoder "
                        f"models, not family {cfg.family!r}")
    if not _is_int(cfg.parallel_norms) or cfg.parallel_norms not in (1, 2):
        problems.append(f"parallel_norms ({_show(cfg.parallel_norms)}) must be 1 or 2")
    problems += _size_problems(cfg)
    problems += _hybrid_problems(cfg)
    if cfg.parallel_block and cfg.family != "decoder":
        problems.append(f"parallel_block needs family 'decoder', not {cfg.family!r}")
    if cfg.norm_position == "post_sub" and cfg.family != "decoder":
        problems.append(f"norm_position 'post_sub' needs family 'decoder', not {cfg.family!r}")
    if cfg.parallel_block and cfg.norm_position != "pre":
        problems.append(f"parallel_block needs norm_position 'pre', not {cfg.norm_position!r}")
    if cfg.is_mla:
        for name in ("qk_nope_head_dim", "qk_rope_head_dim", "v_head_dim"):
            if getattr(cfg, name) <= 0:
                problems.append(f"{name} ({getattr(cfg, name)}) must be positive with MLA "
                                f"(kv_lora_rank {cfg.kv_lora_rank})")
        if cfg.family == "encoder-decoder":
            problems.append("multi-head latent attention (kv_lora_rank) is for decoder stacks")
    elif cfg.q_lora_rank:
        problems.append(f"q_lora_rank ({cfg.q_lora_rank}) needs MLA: set kv_lora_rank too")
    if cfg.is_moe:
        if not 1 <= cfg.top_k <= cfg.n_experts:
            problems.append(f"top_k ({cfg.top_k}) must be between 1 and n_experts "
                            f"({cfg.n_experts})")
        if cfg.first_k_dense > cfg.n_layers:
            problems.append(f"first_k_dense ({cfg.first_k_dense}) exceeds n_layers "
                            f"({cfg.n_layers})")
        if cfg.family == "encoder-decoder":
            problems.append("mixture-of-experts layers are modelled for decoder/encoder stacks "
                            "only")
    else:
        for name in ("top_k", "n_shared_experts", "shared_d_ff", "first_k_dense"):
            if getattr(cfg, name):
                problems.append(f"{name} ({getattr(cfg, name)}) needs n_experts > 0")
        if cfg.shared_expert_gate or cfg.router_bias:
            problems.append("shared_expert_gate/router_bias need n_experts > 0")
    if cfg.global_every and not cfg.sliding_window:
        problems.append(f"global_every ({cfg.global_every}) needs a sliding_window")
    if cfg.sliding_layers and not cfg.sliding_window:
        problems.append(f"sliding_layers {list(cfg.sliding_layers)} need a sliding_window")
    if cfg.sliding_layers and cfg.global_every:
        problems.append("give sliding_layers or global_every, not both")
    for name in ("sliding_layers", "nope_layers", "chunked_layers"):
        bad = [i for i in getattr(cfg, name) if i >= cfg.n_layers]
        if bad:
            problems.append(f"{name} {bad} exceed n_layers ({cfg.n_layers})")
    if cfg.nope_layers and cfg.pos_type != "rotary":
        problems.append(f"nope_layers {list(cfg.nope_layers)} need pos_type 'rotary', not "
                        f"{cfg.pos_type!r}")
    if cfg.chunked_layers and not cfg.attn_chunk:
        problems.append(f"chunked_layers {list(cfg.chunked_layers)} need an attn_chunk")
    if cfg.attn_chunk and cfg.family != "decoder":
        problems.append(f"attn_chunk ({cfg.attn_chunk}) needs family 'decoder', not "
                        f"{cfg.family!r}")
    both = sorted(set(cfg.chunked_layers) & {i for i in range(cfg.n_layers) if cfg.window(i)})
    if both:
        problems.append(f"layers {both} are both chunked and sliding: give one of them")
    if cfg.attn_sinks and (cfg.family != "decoder" or cfg.is_mla):
        problems.append(f"attn_sinks needs family 'decoder' without MLA, not {cfg.family!r}"
                        + (f" with kv_lora_rank {cfg.kv_lora_rank}" if cfg.is_mla else ""))
    if cfg.expert_bias and not cfg.is_moe:
        problems.append("expert_bias needs n_experts > 0")
    if cfg.qk_norm == "l2" and cfg.pos_type != "rotary":
        problems.append(f"qk_norm 'l2' (Llama 4: on rotary layers) needs pos_type 'rotary', "
                        f"not {cfg.pos_type!r}")
    if cfg.pos_type == "relative_bias" and cfg.relative_buckets <= 0:
        problems.append(f"relative_buckets ({cfg.relative_buckets}) must be positive")
    if cfg.pos_type == "rotary" and not cfg.is_mla and cfg.head_dim % 2:
        problems.append(f"head_dim ({cfg.head_dim}) must be even for rotary positions")
    if cfg.head == "none" and cfg.lm_head_bias:
        problems.append("lm_head_bias needs head 'lm'")
    if cfg.pooler and cfg.family == "decoder":
        problems.append("pooler is for encoder models (BERT)")
    problems += _encoder_problems(cfg)
    problems += _cross_layer_problems(cfg)
    problems += _gemma3n_problems(cfg)
    problems += _image_grid_problems(cfg)
    bad_dense = [i for i in cfg.dense_layers if i >= cfg.n_layers]
    if bad_dense:
        problems.append(f"dense_layers {bad_dense} exceed n_layers ({cfg.n_layers})")
    if problems:
        raise ConfigError(f"{cfg.name}: " + "; ".join(problems))
