"""HF ``config.json`` -> ModelConfig for state-space and hybrid models (issue 12): mamba,
mamba2, jamba, falcon_h1, nemotron_h. Registered in ``hf.CONVERTERS``; field names and
defaults are those of the transformers 5.x configuration classes (a missing field takes the
class default, as in ``hf.py``).
"""

from __future__ import annotations

import math
from typing import Any

from .errors import ConfigError
from .hf import _Fields, _llama_like


def _number(f: _Fields, key: str, default: float) -> float:
    v = f.get(key, default)
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or v <= 0:
        raise ConfigError(f"{f.where}: field {key!r} ({v!r:.60}) must be a positive number")
    return v


def _defaults(f: _Fields, **defaults: Any) -> None:
    """Fill the fields ``_llama_like`` reads as required with the HF class defaults (the Hub
    stores only non-default fields)."""
    f.raw = {**defaults, **f.raw}


def _dt_rank(f: _Fields, key: str, d_model: int) -> int:
    """``time_step_rank`` / ``mamba_dt_rank``: "auto" is ceil(D / 16), as in HF."""
    v = f.get(key, "auto")
    return math.ceil(d_model / 16) if v == "auto" else f.int(key)


def _ssm_only(n_layers: int, kind: str) -> dict[str, Any]:
    """A stack of pre-norm mixer-only blocks (Mamba, Mamba-2): no attention, no FFN; the
    attention fields are placeholders (one head, no positions) that no op reads."""
    return dict(mixers=(kind,) * n_layers, ffns=("none",) * n_layers, n_heads=1,
                pos_type="none", norm_type="rmsnorm")


def _mamba(f: _Fields) -> dict[str, Any]:
    d, n_layers = f.int("hidden_size", 768), f.int("num_hidden_layers", 32)
    return dict(n_layers=n_layers, d_model=d, vocab_size=f.int("vocab_size", 50280),
                ssm_d_inner=int(_number(f, "expand", 2) * d), ssm_state=f.int("state_size", 16),
                ssm_conv=f.int("conv_kernel", 4), ssm_dt_rank=_dt_rank(f, "time_step_rank", d),
                ssm_bias=f.bool("use_bias", False), ssm_out_bias=f.bool("use_bias", False),
                ssm_conv_bias=f.bool("use_conv_bias", True),
                tie_embeddings=f.bool("tie_word_embeddings", True),
                **_ssm_only(n_layers, "mamba"))


def _mamba2(f: _Fields) -> dict[str, Any]:
    d, n_layers = f.int("hidden_size", 4096), f.int("num_hidden_layers", 64)
    return dict(n_layers=n_layers, d_model=d, vocab_size=f.int("vocab_size", 32768),
                ssm_d_inner=int(_number(f, "expand", 2) * d), ssm_state=f.int("state_size", 128),
                ssm_conv=f.int("conv_kernel", 4), ssm_heads=f.int("num_heads", 128),
                ssm_head_dim=f.int("head_dim", 64), ssm_groups=f.int("n_groups", 8),
                ssm_chunk=f.int("chunk_size", 256), ssm_bias=f.bool("use_bias", False),
                ssm_out_bias=f.bool("use_bias", False),
                ssm_conv_bias=f.bool("use_conv_bias", True),
                tie_embeddings=f.bool("tie_word_embeddings", False),
                **_ssm_only(n_layers, "mamba2"))


def _period(f: _Fields, period: str, offset: str, p_default: int, o_default: int,
            n_layers: int) -> list[bool]:
    """Layers i with i % period == offset (Jamba's attention and expert layers)."""
    p, o = f.int(period, p_default), f.int(offset, o_default)
    if p <= 0 or not 0 <= o < p:
        raise ConfigError(f"{f.where}: fields {offset!r} ({o}) and {period!r} ({p}): the "
                          "offset must be at least 0 and smaller than the period")
    return [i % p == o for i in range(n_layers)]


def _jamba(f: _Fields) -> dict[str, Any]:
    """Jamba (arXiv:2403.19887): Mamba layers with RMSNorms on dt, B and C, an attention layer
    every ``attn_layer_period`` (no positions), MoE every ``expert_layer_period`` (a plain
    MLP where ``num_experts`` is 1)."""
    _defaults(f, hidden_size=4096, intermediate_size=14336, num_hidden_layers=32,
              num_attention_heads=32, vocab_size=65536)
    out = _llama_like(f, max_pos=262144, bias_key=None, kv_heads=8)
    n, d = out["n_layers"], out["d_model"]
    attn = _period(f, "attn_layer_period", "attn_layer_offset", 8, 4, n)
    experts = f.int("num_experts", 16)
    moe = _period(f, "expert_layer_period", "expert_layer_offset", 2, 1, n)
    out.update(
        pos_type="none", mixers=tuple("attention" if a else "mamba" for a in attn),
        ffns=tuple("moe" if m and experts > 1 else "mlp" for m in moe),
        ssm_d_inner=int(_number(f, "mamba_expand", 2) * d), ssm_state=f.int("mamba_d_state", 16),
        ssm_conv=f.int("mamba_d_conv", 4), ssm_dt_rank=_dt_rank(f, "mamba_dt_rank", d),
        ssm_conv_bias=f.bool("mamba_conv_bias", True), ssm_bias=f.bool("mamba_proj_bias", False),
        ssm_out_bias=f.bool("mamba_proj_bias", False), ssm_dt_norms=True)
    if experts > 1 and any(moe):
        out.update(n_experts=experts, top_k=f.int("num_experts_per_tok", 2),
                   moe_d_ff=out["d_ff"])
    return out


def _falcon_h1(f: _Fields) -> dict[str, Any]:
    """Falcon-H1 (arXiv:2507.22448): every layer runs attention (rotary) and a Mamba-2 mixer
    side by side on one RMSNorm, then a SwiGLU MLP. The muP multipliers scale activations
    only (no parameters, no matmul FLOPs)."""
    _defaults(f, hidden_size=4096, intermediate_size=14336, num_hidden_layers=32,
              num_attention_heads=32, vocab_size=128000)
    out = _llama_like(f, max_pos=8192, kv_heads=8, mlp_bias=True)
    n, d = out["n_layers"], out["d_model"]
    if "mamba_d_ssm" in f.raw and f.raw["mamba_d_ssm"] is None:  # null: expand * D
        inner = int(_number(f, "mamba_expand", 2) * d)
    else:
        inner = f.int("mamba_d_ssm", 1024)
    heads = f.int("mamba_n_heads", 128)
    head_dim = (inner // heads if heads > 0 else 0) if f.get("mamba_d_head", "auto") == "auto" \
        else f.int("mamba_d_head")
    out.update(
        mixers=("hybrid",) * n, ffns=("mlp",) * n, ssm_d_inner=inner,
        ssm_state=f.int("mamba_d_state", 256), ssm_conv=f.int("mamba_d_conv", 4),
        ssm_heads=heads, ssm_head_dim=head_dim, ssm_groups=f.int("mamba_n_groups", 1),
        ssm_chunk=f.int("mamba_chunk_size", 256), ssm_conv_bias=f.bool("mamba_conv_bias", True),
        ssm_bias=f.bool("mamba_proj_bias", False), ssm_out_bias=f.bool("projectors_bias", False),
        ssm_gated_norm=f.bool("mamba_rms_norm", False))
    return out


#: Nemotron-H block letters (``hybrid_override_pattern``) and legacy names -> HF 5.x types
_NEMOTRON_TYPES = {"M": "linear_attention", "E": "moe", "*": "full_attention", "-": "mlp",
                   "mamba": "linear_attention", "attention": "full_attention"}
#: Nemotron-H layer type -> (mixer, ffn): each block is one norm and one of these
_NEMOTRON_BLOCKS = {"linear_attention": ("mamba2", "none"), "full_attention": ("attention", "none"),
                    "mlp": ("none", "mlp"), "moe": ("none", "moe")}


def _nemotron_h(f: _Fields) -> dict[str, Any]:
    """Nemotron-H (arXiv:2504.03624): a stack of single-purpose pre-norm blocks, Mamba-2,
    attention (no positions), a squared-ReLU MLP or a MoE of squared-ReLU experts with a shared
    MLP, as ``layers_block_type`` (or the Hub's ``hybrid_override_pattern``) lists them;
    ``num_hidden_layers`` is ignored, as in HF."""
    types = f.get("layers_block_type", f.get("layer_types"))
    if types is None:
        pattern = f.get("hybrid_override_pattern")
        if pattern is not None and not isinstance(pattern, str):
            raise ConfigError(f"{f.where}: field 'hybrid_override_pattern' ({pattern!r:.80}) "
                              "must be a string of M, E, * and -")
        types = list(pattern) if pattern is not None else [
            "linear_attention", "moe", "full_attention", "mlp"]
    if not isinstance(types, list) or not types or not all(
            _NEMOTRON_TYPES.get(t, t) in _NEMOTRON_BLOCKS for t in types):
        raise ConfigError(f"{f.where}: layer types ({types!r:.120}) must be a non-empty list of "
                          f"{', '.join(_NEMOTRON_BLOCKS)} (or a hybrid_override_pattern of "
                          "M, E, * and -)")
    blocks = [_NEMOTRON_BLOCKS[_NEMOTRON_TYPES.get(t, t)] for t in types]
    if f.get("moe_latent_size") is not None:
        raise ConfigError(f"{f.where}: field 'moe_latent_size' ({f.get('moe_latent_size')!r:.40}):"
                          " latent MoE projections are not modelled")
    d, h = f.int("hidden_size", 4096), f.int("num_attention_heads", 32)
    heads, head_dim = f.int("mamba_num_heads", 128), f.int("mamba_head_dim", 64)
    mlp_bias = f.bool("mlp_bias", False)
    out = dict(
        n_layers=len(blocks), d_model=d, n_heads=h, n_kv_heads=f.int("num_key_value_heads", 8),
        head_dim=f.int("head_dim", 128), vocab_size=f.int("vocab_size", 131072),
        d_ff=f.int("intermediate_size", 21504), max_position=f.int("max_position_embeddings", 4096),
        qkv_bias=False, out_bias=False, activation=f.act("mlp_hidden_act", "relu2"),
        mlp_bias=mlp_bias, norm_type="rmsnorm", pos_type="none",
        # NemotronHForCausalLM declares no tied weights: its lm_head is its own whatever
        # tie_word_embeddings says
        tie_embeddings=False, mixers=tuple(m for m, _ in blocks), ffns=tuple(x for _, x in blocks),
        ssm_d_inner=heads * head_dim, ssm_state=f.int("ssm_state_size", 128),
        ssm_conv=f.int("conv_kernel", 4), ssm_heads=heads, ssm_head_dim=head_dim,
        ssm_groups=f.int("n_groups", 8), ssm_chunk=f.int("chunk_size", 128),
        ssm_conv_bias=f.bool("use_conv_bias", True), ssm_bias=f.bool("use_bias", False),
        ssm_out_bias=f.bool("use_bias", False))
    if any(x == "moe" for _, x in blocks):
        out.update(n_experts=f.int("n_routed_experts", 8), top_k=f.int("num_experts_per_tok", 2),
                   moe_d_ff=f.int("moe_intermediate_size", 7688),
                   shared_d_ff=f.int("moe_shared_expert_intermediate_size", 7688),
                   n_shared_experts=1)
    return out


def _granitemoehybrid(f: _Fields) -> dict[str, Any]:
    """Granite 4.0 hybrids: each layer is Mamba-2 or attention (``layer_types``; rotary only
    with ``position_embedding_type`` "rope"), then a MoE of SwiGLU experts plus an always-on
    shared SwiGLU MLP (``shared_intermediate_size``), or that MLP alone with 0 experts. The
    muP multipliers scale activations only."""
    _defaults(f, hidden_size=4096, intermediate_size=11008, num_hidden_layers=32,
              num_attention_heads=32, vocab_size=32000)
    out = _llama_like(f, bias_key="attention_bias")
    n, d = out["n_layers"], out["d_model"]
    types = f.get("layer_types", f.get("layers_block_type", ["linear_attention"] * n))
    kinds = {"linear_attention": "mamba2", "mamba": "mamba2", "full_attention": "attention",
             "attention": "attention"}
    if not isinstance(types, list) or len(types) != n or not all(t in kinds for t in types):
        raise ConfigError(f"{f.where}: field 'layer_types' ({types!r:.120}) must list "
                          f"'linear_attention' or 'full_attention' once for each of the {n} "
                          "layers")
    inner = int(_number(f, "mamba_expand", 2) * d)
    heads = f.int("mamba_n_heads", 128)
    head_dim = (inner // heads if heads > 0 else 0) if f.get("mamba_d_head", "auto") == "auto" \
        else f.int("mamba_d_head")
    experts = f.get("num_local_experts", 8)
    shared = f.int("shared_intermediate_size", 1024)
    out.update(
        pos_type="rotary" if f.get("position_embedding_type") == "rope" else "none",
        mixers=tuple(kinds[t] for t in types), ssm_d_inner=inner,
        ssm_state=f.int("mamba_d_state", 256), ssm_conv=f.int("mamba_d_conv", 4),
        ssm_heads=heads, ssm_head_dim=head_dim, ssm_groups=f.int("mamba_n_groups", 1),
        ssm_chunk=f.int("mamba_chunk_size", 256), ssm_conv_bias=f.bool("mamba_conv_bias", True),
        ssm_bias=f.bool("mamba_proj_bias", False), ssm_out_bias=f.bool("mamba_proj_bias", False))
    if experts == 0:  # read before f.int, which refuses a 0 size: the shared MLP alone
        return out | {"ffns": ("mlp",) * n, "d_ff": shared}
    return out | {"ffns": ("moe",) * n, "n_experts": f.int("num_local_experts", 8),
                  "top_k": f.int("num_experts_per_tok", 2), "moe_d_ff": out["d_ff"],
                  "shared_d_ff": shared}


def _lfm2(f: _Fields) -> dict[str, Any]:
    """LFM2 (Liquid AI): gated short-convolution layers and attention layers (per-head q/k
    RMSNorms, rotary) from ``layer_types`` (or ``full_attn_idxs``), each followed by a SwiGLU
    MLP whose width HF adjusts: int(2F/3), times ``block_ffn_dim_multiplier``, rounded up to
    ``block_multiple_of`` (when ``block_auto_adjust_ff_dim``). The final norm is HF's
    ``embedding_norm``."""
    d, h = f.int("hidden_size", 2560), f.int("num_attention_heads", 32)
    n = f.int("num_hidden_layers", 32)
    types = f.get("layer_types")
    if types is None:
        full = f.get("full_attn_idxs", list(range(n)))
        if not isinstance(full, list):
            raise ConfigError(f"{f.where}: field 'full_attn_idxs' ({full!r:.80}) must be a list "
                              "of layer indices")
        types = ["full_attention" if i in full else "conv" for i in range(n)]
    if not isinstance(types, list) or len(types) != n or not all(
            t in ("full_attention", "conv") for t in types):
        raise ConfigError(f"{f.where}: field 'layer_types' ({types!r:.120}) must list "
                          f"'full_attention' or 'conv' once for each of the {n} layers")
    d_ff = f.int("block_ff_dim", f.int("intermediate_size", 12288))
    if f.bool("block_auto_adjust_ff_dim", True):
        multiple = f.int("block_multiple_of", 256)
        d_ff = int(_number(f, "block_ffn_dim_multiplier", 1.0) * int(2 * d_ff / 3))
        d_ff = multiple * ((d_ff + multiple - 1) // multiple)
    bias = f.bool("conv_bias", False)
    tie = f.bool("tie_embedding", f.bool("tie_word_embeddings", True))
    return dict(n_layers=n, d_model=d, n_heads=h, n_kv_heads=f.int("num_key_value_heads", 8),
                head_dim=d // h if h > 0 else 0, d_ff=d_ff, vocab_size=f.int("vocab_size", 65536),
                max_position=f.int("max_position_embeddings", 128000), activation="swiglu",
                norm_type="rmsnorm", pos_type="rotary", qk_norm="head", tie_embeddings=tie,
                mixers=tuple("attention" if t == "full_attention" else "conv" for t in types),
                ffns=("mlp",) * n, ssm_conv=f.int("conv_L_cache", 3), ssm_bias=bias)


#: model_type -> converter, merged into ``hf.CONVERTERS``
HYBRID_CONVERTERS = {"mamba": _mamba, "mamba2": _mamba2, "jamba": _jamba,
                     "falcon_h1": _falcon_h1, "nemotron_h": _nemotron_h,
                     "granitemoehybrid": _granitemoehybrid, "lfm2": _lfm2}
#: ``attribute_map`` aliases of these classes (merged into ``hf._ALIASES``)
HYBRID_ALIASES: dict[str, dict[str, str]] = {
    "jamba": {"num_local_experts": "num_experts"},
    "nemotron_h": {"num_local_experts": "n_routed_experts", "mamba_n_groups": "n_groups",
                   "mamba_d_conv": "conv_kernel", "mamba_expand": "expand",
                   "mamba_conv_bias": "use_conv_bias", "mamba_chunk_size": "chunk_size"},
}
