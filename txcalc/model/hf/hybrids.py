"""State-space and hybrid models: Mamba, Mamba-2, Jamba, Falcon-H1, Nemotron-H, Granite 4.0
hybrids, LFM2, Zamba, Zamba2 and RecurrentGemma (Griffin). Field names and defaults are those of
the transformers 5.x configuration classes; the costs live in txcalc/engine/mixers.py."""

from __future__ import annotations

import math
from typing import Any

from ..checks import _show
from ...errors import ConfigError
from .fields import GATED, Fields, fill_defaults, llama_like


def _number(f: Fields, key: str, default: float) -> float:
    v = f.get(key, default)
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or v <= 0:
        raise ConfigError(f"{f.where}: field {key!r} ({_show(v)}) must be a positive number")
    return v


def _dt_rank(f: Fields, key: str, d_model: int) -> int:
    """``time_step_rank`` / ``mamba_dt_rank``: "auto" is ceil(D / 16), as in HF."""
    v = f.get(key, "auto")
    return math.ceil(d_model / 16) if v == "auto" else f.int(key)


def _ssm_only(n_layers: int, kind: str) -> dict[str, Any]:
    """A stack of pre-norm mixer-only blocks (Mamba, Mamba-2): no attention, no FFN; the
    attention fields are placeholders (one head, no positions) that no op reads."""
    return dict(mixers=(kind,) * n_layers, ffns=("none",) * n_layers, n_heads=1,
                pos_type="none", norm_type="rmsnorm")


def mamba(f: Fields) -> dict[str, Any]:
    d, n_layers = f.int("hidden_size", 768), f.int("num_hidden_layers", 32)
    return dict(n_layers=n_layers, d_model=d, vocab_size=f.int("vocab_size", 50280),
                ssm_d_inner=int(_number(f, "expand", 2) * d), ssm_state=f.int("state_size", 16),
                ssm_conv=f.int("conv_kernel", 4), ssm_dt_rank=_dt_rank(f, "time_step_rank", d),
                ssm_bias=f.bool("use_bias", False), ssm_out_bias=f.bool("use_bias", False),
                ssm_conv_bias=f.bool("use_conv_bias", True),
                tie_embeddings=f.bool("tie_word_embeddings", True),
                **_ssm_only(n_layers, "mamba"))


def mamba2(f: Fields) -> dict[str, Any]:
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


def _period(f: Fields, period: str, offset: str, p_default: int, o_default: int,
            n_layers: int) -> list[bool]:
    """Layers i with i % period == offset (Jamba's attention and expert layers)."""
    p, o = f.int(period, p_default), f.int(offset, o_default)
    if p <= 0 or not 0 <= o < p:
        raise ConfigError(f"{f.where}: fields {offset!r} ({o}) and {period!r} ({p}): the "
                          "offset must be at least 0 and smaller than the period")
    return [i % p == o for i in range(n_layers)]


def jamba(f: Fields) -> dict[str, Any]:
    """Jamba (arXiv:2403.19887): Mamba layers with RMSNorms on dt, B and C, an attention layer
    every ``attn_layer_period`` (no positions), MoE every ``expert_layer_period`` (a plain
    MLP where ``num_experts`` is 1)."""
    fill_defaults(f, hidden_size=4096, intermediate_size=14336, num_hidden_layers=32,
                  num_attention_heads=32, vocab_size=65536)
    out = llama_like(f, max_pos=262144, bias_key=None, kv_heads=8)
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


def falcon_h1(f: Fields) -> dict[str, Any]:
    """Falcon-H1 (arXiv:2507.22448): every layer runs attention (rotary) and a Mamba-2 mixer
    side by side on one RMSNorm, then a SwiGLU MLP. The muP multipliers scale activations
    only (no parameters, no matmul FLOPs)."""
    fill_defaults(f, hidden_size=4096, intermediate_size=14336, num_hidden_layers=32,
                  num_attention_heads=32, vocab_size=128000)
    out = llama_like(f, max_pos=8192, kv_heads=8, mlp_bias=True)
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


def nemotron_h(f: Fields) -> dict[str, Any]:
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


def granitemoehybrid(f: Fields) -> dict[str, Any]:
    """Granite 4.0 hybrids: each layer is Mamba-2 or attention (``layer_types``; rotary only
    with ``position_embedding_type`` "rope"), then a MoE of SwiGLU experts plus an always-on
    shared SwiGLU MLP (``shared_intermediate_size``), or that MLP alone with 0 experts. The
    muP multipliers scale activations only."""
    fill_defaults(f, hidden_size=4096, intermediate_size=11008, num_hidden_layers=32,
                  num_attention_heads=32, vocab_size=32000)
    out = llama_like(f, bias_key="attention_bias")
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


def lfm2(f: Fields) -> dict[str, Any]:
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


def _zamba_layers(f: Fields, default: list[str]) -> list[str]:
    """``layers_block_type`` (alias ``layer_types``; legacy "mamba" is "linear_attention"): one
    "linear_attention" (a Mamba layer) or "hybrid" (the shared block, then a Mamba layer) per
    layer; its length is the depth, which ``num_hidden_layers`` must equal (HF checks it)."""
    types = f.get("layers_block_type", f.get("layer_types", default))
    if not isinstance(types, list) or not types or not all(
            {"mamba": "linear_attention"}.get(t, t) in ("linear_attention", "hybrid")
            for t in types):
        raise ConfigError(f"{f.where}: field 'layers_block_type' ({types!r:.120}) must be a "
                          "non-empty list of 'linear_attention' and 'hybrid'")
    n = f.get("num_hidden_layers", len(types))
    if n != len(types):
        raise ConfigError(f"{f.where}: field 'num_hidden_layers' ({_show(n)}) must equal the "
                          f"{len(types)} layers that 'layers_block_type' lists")
    return ["linear_attention" if t == "mamba" else t for t in types]


def _zamba_common(f: Fields, d: int, types: list[str], mixer: str,
                  heads: int) -> dict[str, Any]:
    """What Zamba and Zamba2 share: the layout, the shared block's input width, the head."""
    h = f.int("num_attention_heads", heads)
    if f.get("attention_hidden_size", 2 * d) != 2 * d:
        raise ConfigError(f"{f.where}: field 'attention_hidden_size' "
                          f"({_show(f.get('attention_hidden_size'))}) must be 2 x hidden_size "
                          f"({2 * d}): the shared block reads the hidden state and the "
                          "embeddings side by side")
    n = len(types)
    return dict(n_layers=n, d_model=d, n_heads=h, norm_type="rmsnorm",
                activation=GATED[f.act("hidden_act", "gelu")],
                vocab_size=f.int("vocab_size", 32000),
                max_position=f.int("max_position_embeddings", 4096),
                tie_embeddings=f.bool("tie_word_embeddings", True),
                # HF ties the shared blocks' uses with the embeddings' tie flag
                shared_attn_tied=f.bool("tie_word_embeddings", True),
                mixers=(mixer,) * n, ffns=("none",) * n,
                shared_attn_layers=tuple(i for i, t in enumerate(types) if t == "hybrid"))


def zamba(f: Fields) -> dict[str, Any]:
    """Zamba (arXiv:2405.16712): Mamba layers (multi-head x_proj/dt_proj: the parameters and
    FLOPs of one Mamba mixer) and, at the "hybrid" layers, one shared attention block (no
    positions) on [hidden, embeddings], whose output goes through a per-layer Linear into the
    Mamba layer's input. Default layout: layers 2 and 3 + i with i % attn_layer_period ==
    attn_layer_offset."""
    d, n = f.int("hidden_size", 3712), f.int("num_hidden_layers", 76)
    period, offset = f.int("attn_layer_period", 6), f.int("attn_layer_offset", 4)
    default = ["linear_attention", "linear_attention", "hybrid"] + [
        "hybrid" if period > 0 and i % period == offset else "linear_attention"
        for i in range(n - 3)]
    types = _zamba_layers(f, default)
    out = _zamba_common(f, d, types, "mamba", 16)
    h = out["n_heads"]
    inner, heads = int(_number(f, "mamba_expand", 2) * d), f.int("n_mamba_heads", 2)
    if heads > 0 and inner % heads:
        raise ConfigError(f"{f.where}: mamba_expand x hidden_size ({inner}) must be divisible by "
                          f"'n_mamba_heads' ({heads})")
    return out | dict(
        n_kv_heads=f.int("num_key_value_heads", 16),
        head_dim=f.int("attention_head_dim", 2 * d // h if h > 0 else 0),
        d_ff=f.int("intermediate_size", 14848), pos_type="none",
        ssm_d_inner=inner, ssm_state=f.int("mamba_d_state", 16), ssm_conv=f.int("mamba_d_conv", 4),
        ssm_dt_rank=_dt_rank(f, "mamba_dt_rank", d),
        ssm_conv_bias=f.bool("mamba_conv_bias", True), ssm_bias=f.bool("mamba_proj_bias", False),
        ssm_out_bias=f.bool("mamba_proj_bias", False))


#: Zamba2Config's default layout (54 layers)
_ZAMBA2_TYPES = (["linear_attention"] + (["linear_attention"] * 5 + ["hybrid"]) * 7
                 + ["linear_attention"] * 4 + ["hybrid"] + ["linear_attention"] * 3 + ["hybrid"]
                 + ["linear_attention"] * 2)


def zamba2(f: Fields) -> dict[str, Any]:
    """Zamba2 (arXiv:2411.15242): Zamba's layout with Mamba-2 layers, ``num_mem_blocks``
    shared blocks used in turn, and per-use LoRA adapters (rank ``adapter_rank``) on the
    shared MLP's gate_up projection (always) and on q, k and v
    (``use_shared_attention_adapter``); rotary on the shared attention with
    ``use_mem_rope``. head_dim is 2 x hidden_size // heads whatever the config says (HF)."""
    d = f.int("hidden_size", 2560)
    types = _zamba_layers(f, _ZAMBA2_TYPES)
    out = _zamba_common(f, d, types, "mamba2", 32)
    h = out["n_heads"]
    kv_null = "num_key_value_heads" in f.raw and f.raw["num_key_value_heads"] is None
    inner, heads = int(_number(f, "mamba_expand", 2) * d), f.int("n_mamba_heads", 8)
    bias = f.bool("add_bias_linear", False)
    return out | dict(
        n_kv_heads=h if kv_null else f.int("num_key_value_heads", h),
        head_dim=2 * d // h if h > 0 else 0, d_ff=f.int("intermediate_size", 4 * d),
        mlp_bias=bias, pos_type="rotary" if f.bool("use_mem_rope", False) else "none",
        max_position=16384 if f.bool("use_long_context", False) else out["max_position"],
        ssm_d_inner=inner, ssm_state=f.int("mamba_d_state", 64), ssm_conv=f.int("mamba_d_conv", 4),
        ssm_heads=heads, ssm_head_dim=inner // heads if heads > 0 else 0,
        ssm_groups=f.int("mamba_ngroups", 1), ssm_chunk=f.int("chunk_size", 256),
        ssm_conv_bias=True,  # Zamba2MambaMixer builds its conv biased whatever use_conv_bias says
        ssm_bias=bias, ssm_out_bias=bias,
        shared_attn_blocks=f.int("num_mem_blocks", 1),
        shared_adapter_rank=f.int("adapter_rank", 128),
        shared_qkv_adapters=f.bool("use_shared_attention_adapter", False))


def recurrent_gemma(f: Fields) -> dict[str, Any]:
    """RecurrentGemma (Griffin, arXiv:2402.19427): ``block_types`` repeated over the layers,
    each a recurrent block (RG-LRU, ``lru_width`` wide, gates in num_attention_heads blocks)
    or local attention (window ``attention_window_size``, rotary on half of each head, biased
    o_proj), then a GeGLU MLP of intermediate_size // 2 with biases. Gemma's scaled embedding,
    (1 + w) RMSNorms and logit soft-capping add no parameters and no matmul FLOPs."""
    d, h = f.int("hidden_size", 2560), f.int("num_attention_heads", 10)
    n = f.int("num_hidden_layers", 26)
    blocks = f.get("block_types", ["recurrent", "recurrent", "attention"])
    if not isinstance(blocks, list) or not blocks or not all(
            b in ("recurrent", "attention") for b in blocks):
        raise ConfigError(f"{f.where}: field 'block_types' ({blocks!r:.120}) must be a "
                          "non-empty list of 'recurrent' and 'attention'")
    kinds = [("rglru" if b == "recurrent" else "attention") for b in (blocks * n)[:n]]
    kv_null = "num_key_value_heads" in f.raw and f.raw["num_key_value_heads"] is None
    window = f.int("attention_window_size", 2048)
    attn = [i for i, k in enumerate(kinds) if k == "attention"]
    bias = f.bool("attention_bias", False)
    return dict(
        n_layers=n, d_model=d, n_heads=h, n_kv_heads=h if kv_null else
        f.int("num_key_value_heads", h), head_dim=d // h if h > 0 else 0,
        d_ff=f.int("intermediate_size", 3 * 2560) // 2, vocab_size=f.int("vocab_size", 256000),
        activation=GATED[f.act("hidden_activation", "gelu_pytorch_tanh")], mlp_bias=True,
        qkv_bias=bias, out_bias=True, norm_type="rmsnorm", pos_type="rotary",
        tie_embeddings=f.bool("tie_word_embeddings", True), mixers=tuple(kinds),
        ffns=("mlp",) * n, sliding_window=window if attn else 0,
        sliding_layers=tuple(attn) if attn else (),
        ssm_d_inner=f.int("lru_width", d), ssm_heads=h, ssm_conv=f.int("conv1d_width", 4))
