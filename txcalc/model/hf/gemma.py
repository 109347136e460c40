"""Gemma: Gemma, Gemma 2 (sandwich norms), Gemma 3 (per-head q/k norms, five local layers to
one global) and Gemma 3n's text part (AltUp, LAuReL, per-layer embeddings, shared KV)."""

from __future__ import annotations

from ..checks import _show
from ...errors import ConfigError
from .fields import (GATED, Fields, layer_types, llama_like, pattern_types, read_decoder, text_part,
                     typed_windows)


def gemma(f, v2: bool = False):  # Gemma reads ``hidden_act``, Gemma 2 ``hidden_activation``
    out = llama_like(f, act_default="gelu_pytorch_tanh", tie=True, max_pos=8192,
                     kv_heads=4 if v2 else 16, head_dim=256)
    act_key = "hidden_activation" if v2 else "hidden_act"
    act = f.act(act_key, "gelu_pytorch_tanh")
    if not v2 and f.get("hidden_act") == "gelu":  # GemmaConfig reads legacy "gelu" as tanh GELU
        act = "gelu_tanh"
    return out | {"activation": GATED[act]}


def gemma2(f):
    return gemma(f, v2=True) | {"norm_position": "sandwich"}


_GEMMA3 = dict(vocab_size=262208, hidden_size=2304, intermediate_size=9216, num_hidden_layers=26,
               num_attention_heads=8, num_key_value_heads=4, head_dim=256,
               max_position_embeddings=131072, attention_bias=False, tie=True,
               act_key="hidden_activation", act="gelu_pytorch_tanh")


def gemma3_text(f):
    """Gemma 3 text (arXiv:2503.19786): Gemma 2's sandwich norms, per-head q/k RMSNorm, five
    local layers (window 4096) to one global; logit soft-capping changes no count."""
    if f.bool("use_bidirectional_attention", False):
        raise ConfigError(f"{f.where}: field 'use_bidirectional_attention' (true): a "
                          "bidirectional Gemma 3 (EmbeddingGemma) is not a causal decoder; "
                          "txcalc models the causal one")
    out = read_decoder(f, _GEMMA3, kv_null_ok=False)
    n = out["n_layers"]
    types = layer_types(f, n, pattern_types(f, n, "sliding_window_pattern", 6))
    return out | {"qk_norm": "head", "norm_position": "sandwich"} | typed_windows(f, types, 4096)


def gemma3(f):  # Gemma3ForConditionalGeneration: tied unless the top level says otherwise
    tie = f.bool("tie_word_embeddings", True)
    return text_part(f, "gemma3_text") | {"tie_embeddings": tie}


# --- Gemma 3n's text part (Gemma3nTextConfig defaults, transformers 5.x) ------------------------
_GEMMA3N = dict(vocab_size=262400, hidden_size=2048, intermediate_size=16384, num_hidden_layers=35,
                num_attention_heads=8, num_key_value_heads=2, head_dim=256,
                max_position_embeddings=32768, attention_bias=False, tie=True,
                act_key="hidden_activation", act="gelu_pytorch_tanh")


def gemma3n_text(f):  # Gemma3nForCausalLM
    """Gemma 3n text: Gemma 3's sandwich norms and per-head q/k RMSNorm (v too, no scale),
    four local layers (window 512) to one global, AltUp over ``altup_num_inputs`` streams,
    LAuReL of ``laurel_rank``, per-layer embeddings of ``hidden_size_per_layer_input``, an MLP
    width per layer, and the last ``num_kv_shared_layers`` layers reusing the keys and values
    of the last earlier layer of their kind."""
    text = {k: v for k, v in f.raw.items() if k != "intermediate_size"}
    widths = f.get("intermediate_size", _GEMMA3N["intermediate_size"])
    sub = Fields(text, f.where)
    try:
        out = read_decoder(sub, _GEMMA3N | {"intermediate_size": 1}, kv_null_ok=False)
    finally:
        f.problems += sub.problems
        f.read |= sub.read
    n = out["n_layers"]
    if isinstance(widths, int) and not isinstance(widths, bool):
        widths = [widths] * n
    if not isinstance(widths, list) or len(widths) != n or not all(
            isinstance(w, int) and not isinstance(w, bool) for w in widths):
        raise ConfigError(f"{f.where}: field 'intermediate_size' ({_show(widths)}) must be a "
                          f"width, or one for each of the {n} layers")
    types = layer_types(f, n, ["full_attention" if (i + 1) % 5 == 0 else "sliding_attention"
                               for i in range(n)])
    shared = f.int("num_kv_shared_layers", 15)
    if not 0 <= shared <= n or (shared and set(types[:n - shared]) != set(types)):
        raise ConfigError(f"{f.where}: field 'num_kv_shared_layers' ({shared}) must leave an "
                          f"earlier layer of each kind of the {n} layers to share from")
    # HF's default: the first 10 layers sparse (0.95) when there are more than 10
    sparse = f.get("activation_sparsity_pattern", None)
    if sparse is None:
        sparse = [0.95] * 10 + [0.0] * (n - 10) if n > 10 else [0.0] * n
    if not isinstance(sparse, list) or len(sparse) != n or not all(
            isinstance(x, (int, float)) and not isinstance(x, bool) and 0 <= x < 1
            for x in sparse):
        raise ConfigError(f"{f.where}: field 'activation_sparsity_pattern' ({_show(sparse)}) "
                          f"must list a fraction in [0, 1) for each of the {n} layers")
    out |= {"act_sparsity": tuple(float(x) for x in sparse) if any(sparse) else ()}
    out |= {"d_ff": max(widths), "layer_d_ff": tuple(widths), "qk_norm": "head",
            "norm_position": "sandwich", "altup_inputs": f.int("altup_num_inputs", 4),
            "laurel_rank": f.int("laurel_rank", 64),
            "per_layer_dim": f.int("hidden_size_per_layer_input", 256),
            "per_layer_vocab": f.int("vocab_size_per_layer_input", 262144),
            "kv_shared_layers": tuple(range(n - shared, n))}
    return out | typed_windows(f, types, 512)
