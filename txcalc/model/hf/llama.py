"""Llama-shaped decoders: RMSNorm (or LayerNorm), rotary, gated MLP, GQA, with the variations
of each type (biases, q/k norms, sandwich or output norms, windows, parallel blocks). Multipliers
and scalings (Granite's embedding/residual/attention/logit multipliers) are elementwise work that
neither count sees. Rotary is elementwise too: partial rotary (StableLM) and layers without
rotary (SmolLM3's NoPE layers) change no parameter or matmul."""

from __future__ import annotations

from ...errors import ConfigError
from .fields import (layer_pattern, layer_types, llama_like, nullable, pattern_types, read_decoder,
                     read_window, sliding_flags, typed_windows)


def llama(f): return llama_like(f, mlp_bias=True)


def mistral(f):  # Mistral's attention has no biases whatever the config says
    return llama_like(f, max_pos=131072, bias_key=None, kv_heads=8)


def ministral(f):
    """Mistral with ``layer_types`` (default: every layer slides when windowed). HF's class
    default head_dim (None) builds no model: the field is required."""
    f.int("head_dim")
    out = llama_like(f, max_pos=131072, bias_key=None, kv_heads=8)
    n, window = out["n_layers"], read_window(f, 4096)
    sliding = sliding_flags(f, n)
    if sliding is None:
        sliding = [bool(window)] * n
    return out | layer_pattern(n, window, sliding)


def ministral3(f):  # Mistral 3: head_dim 128 by default; a window, when set, on every layer
    out = llama_like(f, max_pos=262144, bias_key=None, kv_heads=8, head_dim=128)
    window = read_window(f, None)
    return out | ({"sliding_window": window} if window else {})


def phi3(f):
    return llama_like(f, max_pos=4096, bias_key=None)


def starcoder2(f):  # ``use_bias`` (default true) on every projection, attention and MLP
    out = llama_like(f, act_default="gelu_pytorch_tanh", tie=True, max_pos=4096,
                     bias_key="use_bias", bias_default=True, kv_heads=2)
    return out | {"activation": f.act("hidden_act", "gelu_pytorch_tanh"), "mlp_bias": out["qkv_bias"],
                  "norm_type": "layernorm", "norm_bias": True}


def granite(f):  # Llama plus four scalar multipliers (elementwise)
    return llama_like(f, mlp_bias=True)


def smollm3(f):
    """Llama with NoPE layers (``no_rope_layers``: elementwise only) and an optional window on
    the layers ``layer_types`` marks, when ``use_sliding_window`` is set."""
    out = llama_like(f, tie=True, max_pos=32768, kv_heads=4, mlp_bias=True)
    n = out["n_layers"]
    window = read_window(f, None)
    if not (f.bool("use_sliding_window", False) and window):
        return out
    sliding = sliding_flags(f, n)
    if sliding is None:  # HF: NoPE layers slide (no_rope_layers[i] == 0)
        nope = f.get("no_rope_layers")
        if nope is None:
            step = f.int("no_rope_layer_interval", 4)
            nope = [int((i + 1) % step != 0) for i in range(n)]
        if not isinstance(nope, list) or len(nope) < n:
            raise ConfigError(f"{f.where}: field 'no_rope_layers' ({nope!r:.200}) must give a "
                              f"flag for each of the {n} layers")
        sliding = [not nope[i] for i in range(n)]
    return out | layer_pattern(n, window, sliding)


def ernie4_5(f):  # ``use_bias`` on every projection, attention and MLP
    out = llama_like(f, tie=True, max_pos=131072, bias_key="use_bias", kv_heads=2, head_dim=128)
    return out | {"mlp_bias": out["qkv_bias"]}


def seed_oss(f):  # q/k/v biased by attention_bias (default true), o by attention_out_bias
    out = llama_like(f, max_pos=524288, bias_default=True, kv_heads=8, head_dim=128,
                     mlp_bias=True)
    return out | {"out_bias": f.bool("attention_out_bias", False)}


def hunyuan_v1_dense(f):
    """Llama with per-head RMSNorm on q and k. HF's class default head_dim (None) builds no
    model (the attention scale is None ** -0.5): the field is required."""
    f.int("head_dim")
    return llama_like(f) | {"qk_norm": "head"}


def glm4(f):
    """GLM-4: q/k/v biased (attention_bias, default true), o never; a fused gate_up_proj (the
    same weights as gate and up); a norm after attention and after the MLP as well as before
    each (Gemma 2's sandwich)."""
    out = llama_like(f, max_pos=131072, bias_default=True, kv_heads=2, head_dim=128)
    return out | {"out_bias": False, "norm_position": "sandwich"}


def stablelm(f):
    """StableLM: Llama with LayerNorms (bias), q/k/v bias by use_qkv_bias, optional parallel
    block with one norm (use_parallel_residual)."""
    if f.bool("qk_layernorm", False):
        raise ConfigError(f"{f.where}: field 'qk_layernorm' (true): StableLM's separate "
                          "bias-free LayerNorm per head is not modelled")
    out = llama_like(f, max_pos=4096, bias_key=None, kv_heads=32)
    parallel = f.bool("use_parallel_residual", False)
    return out | {"qkv_bias": f.bool("use_qkv_bias", False), "norm_type": "layernorm",
                  "norm_bias": True, "parallel_block": parallel, "parallel_norms": 1}


def olmo(f):
    return llama_like(f) | {"norm_type": "layernorm", "norm_affine": False}


_OLMO2 = dict(vocab_size=50304, hidden_size=4096, intermediate_size=11008, num_hidden_layers=32,
              num_attention_heads=32, num_key_value_heads=None, max_position_embeddings=2048,
              attention_bias=False)


def olmo2(f):
    """OLMo 2 (arXiv:2501.00656): RMSNorm on each sub-block's output, none on its input, and
    RMSNorm over all query (key) heads together."""
    return read_decoder(f, _OLMO2) | {"qk_norm": "full", "norm_position": "post_sub"}


def olmo3(f):  # OLMo 2 with three window-4096 layers to one global
    out = olmo2(f)
    n = out["n_layers"]
    types = layer_types(f, n, ["sliding_attention" if (i + 1) % 4 else "full_attention"
                               for i in range(n)])
    return out | typed_windows(f, types, 4096)


_EXAONE4 = dict(vocab_size=102400, hidden_size=4096, intermediate_size=16384,
                num_hidden_layers=32, num_attention_heads=32, num_key_value_heads=32,
                max_position_embeddings=2048)


def exaone4(f):
    """EXAONE 4: OLMo 2's output norms, per-head q/k RMSNorm, window layers (pattern 4); with a
    window the global layers use no rotary (NoPE)."""
    out = read_decoder(f, _EXAONE4, kv_null_ok=False)
    n = out["n_layers"]
    windowed = nullable(f, "sliding_window", 4096)
    if windowed is None:  # HF sets the pattern to 0: every layer full, rotary everywhere
        types = layer_types(f, n, ["full_attention"] * n)
    else:
        types = layer_types(f, n, pattern_types(f, n, "sliding_window_pattern", 4))
    out |= {"qk_norm": "head", "norm_position": "post_sub"} | typed_windows(f, types, 4096)
    if windowed is not None:
        out["nope_layers"] = tuple(i for i, t in enumerate(types) if t != "sliding_attention")
    return out


_COHERE = dict(vocab_size=256000, hidden_size=8192, intermediate_size=22528, num_hidden_layers=40,
               num_attention_heads=64, num_key_value_heads=None, max_position_embeddings=8192,
               attention_bias=False, tie=True)


def cohere(f):
    """Command R: one bias-free LayerNorm feeding attention and MLP in parallel; with
    ``use_qk_norm`` a LayerNorm per head with its own scale per head (Command R+). The
    ``logit_scale`` multiplier changes no count."""
    out = read_decoder(f, _COHERE)
    return out | dict(norm_type="layernorm", norm_bias=False, parallel_block=True,
                      parallel_norms=1,
                      qk_norm="per_head" if f.bool("use_qk_norm", False) else "none")


def cohere2(f):
    """Command R7B / A: Cohere's parallel block, three window-4096 layers to one global;
    rotary only on window layers (no window: no rotary at all)."""
    out = read_decoder(f, _COHERE)
    n = out["n_layers"]
    types = layer_types(f, n, pattern_types(f, n, "sliding_window_pattern", 4))
    windows = typed_windows(f, types, 4096)
    has_window = not ("sliding_window" in f.raw and f.raw["sliding_window"] is None)
    nope = tuple(i for i, t in enumerate(types) if t != "sliding_attention" or not has_window)
    return out | windows | dict(norm_type="layernorm", norm_bias=False, parallel_block=True,
                                parallel_norms=1, nope_layers=nope)
