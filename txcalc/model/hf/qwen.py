"""Qwen: Qwen2/3 dense and MoE, the Qwen-VL language models, and the linear-attention hybrids
Qwen3-Next and Qwen3.5 (Gated DeltaNet layers; their costs live in txcalc/engine/mixers.py,
``gated_deltanet``, and ops.py, ``gdn_flops``)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ..checks import _show
from ...errors import ConfigError
from .fields import (Fields, fill_defaults, is_index, layer_pattern, llama_like, read_window,
                     sliding_flags)


def qwen2(f):  # Qwen2: q/k/v always biased, o never
    return llama_like(f, max_pos=32768, bias_key=None, kv_heads=32) | {"qkv_bias": True}


def qwen3(f):
    return llama_like(f, max_pos=32768, kv_heads=32, head_dim=128) | {"qk_norm": "head"}


def _moe_qwen(f: Fields, n_layers: int, shared: bool) -> dict[str, Any]:
    """Qwen2-MoE / Qwen3-MoE: layer i is MoE unless listed in ``mlp_only_layers`` or off the
    ``decoder_sparse_step``; 0 experts makes every layer the dense MLP (as in HF)."""
    if f.raw.get("num_experts") == 0:  # read before f.int, which rejects a 0 size
        return {}
    n_experts = f.int("num_experts", 60 if shared else 128)
    only = f.get("mlp_only_layers", [])
    if not isinstance(only, list) or not all(isinstance(i, int) and not isinstance(i, bool)
                                             for i in only):
        raise ConfigError(f"{f.where}: field 'mlp_only_layers' ({only!r}) must be a list of "
                          "layer indices")
    out = dict(n_experts=n_experts, top_k=f.int("num_experts_per_tok", 4 if shared else 8),
               moe_d_ff=f.int("moe_intermediate_size", 1408 if shared else 768),
               moe_every=f.int("decoder_sparse_step", 1),
               # HF ignores indices past the last layer; negative ones never match a layer either
               dense_layers=tuple(sorted({i for i in only if 0 <= i < n_layers})))
    if shared:
        out.update(shared_d_ff=f.int("shared_expert_intermediate_size", 5632),
                   shared_expert_gate=True)
    return out


def qwen2_moe(f):  # q/k/v biased by ``qkv_bias`` (default true), o never
    out = llama_like(f, max_pos=32768, bias_key=None, kv_heads=16)
    out["qkv_bias"] = f.bool("qkv_bias", True)
    return out | _moe_qwen(f, out["n_layers"], shared=True)


def qwen3_moe(f):
    out = llama_like(f, max_pos=32768, kv_heads=4) | {"qk_norm": "head"}
    return out | _moe_qwen(f, out["n_layers"], shared=False)


def _vl_text(convert: Callable[[Fields], dict[str, Any]], inner_tie: bool = False):
    """The language model of a Qwen-VL config: ``text_config`` (or, in Qwen2-VL's older files,
    the text fields at the top level). ``tie_word_embeddings`` is read at the top level, as HF
    ties; ``inner_tie``: a true one inside text_config ties too (Qwen2-VL's compatibility rule).
    The vision tower is not counted: txcalc reports the language model."""
    def read(f: Fields) -> dict[str, Any]:
        text = f.raw.get("text_config")
        if text is None:
            return convert(f)
        if not isinstance(text, dict):
            raise ConfigError(f"{f.where}: field 'text_config' ({_show(text)}) must be an object")
        inner = Fields(text, f"{f.where} text_config")
        out = convert(inner)
        f.problems += inner.problems
        tie = f.bool("tie_word_embeddings", False) or (
            inner_tie and inner.bool("tie_word_embeddings", False))
        return out | {"tie_embeddings": tie}

    def language_model(f: Fields) -> dict[str, Any]:
        model_type = f.raw.get("model_type")
        return read(f) | {"source": f"HF config.json ({model_type}: the language model and "
                                    "the vision tower's parameters)"}
    return language_model


def _qwen2_vl_text(f):
    """Qwen2-VL's text model: Qwen2 (q/k/v biased, o not) with its own defaults; a window
    only with use_sliding_window, on layer_types' layers, else on layers >= max_window_layers.
    Its attention ignores ``head_dim`` (always hidden_size // num_attention_heads)."""
    out = llama_like(f, max_pos=32768, bias_key=None, kv_heads=8) | {"qkv_bias": True}
    out["head_dim"] = out["d_model"] // out["n_heads"] if out["n_heads"] > 0 else 0
    n = out["n_layers"]
    window = read_window(f, 4096)
    if not (f.bool("use_sliding_window", False) and window):
        return out
    sliding = sliding_flags(f, n)
    if sliding is None:
        mwl = f.int("max_window_layers", 80)
        sliding = [i >= mwl for i in range(n)]
    return out | layer_pattern(n, window, sliding)


def _qwen3_vl_text(f):  # Qwen3 dense: per-head q/k RMSNorm
    return llama_like(f, max_pos=128000, kv_heads=32, head_dim=128) | {"qk_norm": "head"}


def _qwen3_vl_moe_text(f):  # Qwen3-MoE's layout (decoder_sparse_step, mlp_only_layers)
    out = llama_like(f, max_pos=128000, kv_heads=16) | {"qk_norm": "head"}
    n = out["n_layers"]
    only = f.get("mlp_only_layers", [])
    if not isinstance(only, list) or not all(is_index(i) for i in only):
        raise ConfigError(f"{f.where}: field 'mlp_only_layers' ({only!r:.200}) must be a list "
                          "of layer indices")
    # num_experts is the alias of the stored num_local_experts (HF's attribute_map)
    key = "num_experts" if f.get("num_experts") is not None else "num_local_experts"
    return out | dict(n_experts=f.int(key, 60), top_k=f.int("num_experts_per_tok", 4),
                      moe_d_ff=f.int("moe_intermediate_size", 1408),
                      moe_every=f.int("decoder_sparse_step", 1),
                      dense_layers=tuple(sorted({i for i in only if 0 <= i < n})))


qwen2_vl = _vl_text(_qwen2_vl_text, inner_tie=True)  # Qwen2.5-VL's too
qwen3_vl = _vl_text(_qwen3_vl_text)
qwen3_vl_moe = _vl_text(_qwen3_vl_moe_text)


def qwen3_next(f: Fields) -> dict[str, Any]:
    """Qwen3-Next: ``layer_types`` (else every ``full_attention_interval``-th layer, default
    4, attends; the others are Gated DeltaNet), gated attention (q_proj doubled, sigmoid gate
    on the output) with per-head q/k RMSNorms, and a Qwen2-MoE-style FFN: routed SwiGLU
    experts plus a gated shared expert, dense where ``mlp_only_layers`` or
    ``decoder_sparse_step`` say (or with 0 experts)."""
    fill_defaults(f, hidden_size=2048, intermediate_size=5632, num_hidden_layers=48,
                  num_attention_heads=16, vocab_size=151936)
    out = _qwen3_next_layers(f, llama_like(f, max_pos=32768, kv_heads=2, head_dim=256))
    n = out["n_layers"]
    fill_defaults(f, num_experts=512, num_experts_per_tok=10, moe_intermediate_size=512,
                  shared_expert_intermediate_size=512)
    moe = _moe_qwen(f, n, shared=True)  # {} with 0 experts: every layer dense
    dense = set(moe.get("dense_layers", ()))
    step = moe.get("moe_every", 1)
    ffns = tuple("moe" if moe and i not in dense and (i + 1) % step == 0 else "mlp"
                 for i in range(n))
    if "moe" not in ffns:
        moe = {}
    return out | moe | {"ffns": ffns}


def _qwen3_next_layers(f: Fields, out: dict[str, Any]) -> dict[str, Any]:
    """The mixers of Qwen3-Next and Qwen3.5: ``layer_types``, else every
    ``full_attention_interval``-th layer (default 4) attends (gated attention, per-head q/k
    RMSNorms) and the others are Gated DeltaNet layers."""
    n = out["n_layers"]
    interval = f.int("full_attention_interval", 4)
    types = f.get("layer_types", ["linear_attention" if (i + 1) % interval else "full_attention"
                                  for i in range(n)] if interval > 0 else None)
    if not isinstance(types, list) or len(types) != n or not all(
            t in ("linear_attention", "full_attention") for t in types):
        raise ConfigError(f"{f.where}: field 'layer_types' ({types!r:.120}) must list "
                          f"'linear_attention' or 'full_attention' once for each of the {n} "
                          "layers")
    hk, hv = f.int("linear_num_key_heads", 16), f.int("linear_num_value_heads", 32)
    dk, dv = f.int("linear_key_head_dim", 128), f.int("linear_value_head_dim", 128)
    out.update(qk_norm="head", attn_out_gate=True,
               mixers=tuple("gdn" if t == "linear_attention" else "attention" for t in types),
               ssm_heads=hv, ssm_head_dim=dv, ssm_groups=hk, ssm_state=dk,
               ssm_d_inner=hv * dv, ssm_conv=f.int("linear_conv_kernel_dim", 4),
               ssm_chunk=64)  # torch_chunk_gated_delta_rule's chunk_size, not a config field
    return out


def qwen3_5_text(f):
    """Qwen3.5's language model: Qwen3-Next's layers (Gated DeltaNet every layer but each
    ``full_attention_interval``-th, gated attention) with the DeltaNet's input projected by
    four Linears, and a dense SwiGLU MLP in every layer."""
    fill_defaults(f, hidden_size=4096, intermediate_size=12288, num_hidden_layers=32,
                  num_attention_heads=16, vocab_size=248320)
    out = _qwen3_next_layers(f, llama_like(f, max_pos=32768, kv_heads=4, head_dim=256))
    return out | {"gdn_split_proj": True, "ffns": ("mlp",) * out["n_layers"]}


def qwen3_5_moe_text(f):
    """Qwen3.5-MoE's language model: as Qwen3.5, with a MoE of SwiGLU experts and a gated
    shared expert in every layer (no dense layers, ``intermediate_size`` unused)."""
    fill_defaults(f, hidden_size=2048, num_hidden_layers=40, num_attention_heads=16,
                  vocab_size=248320, num_experts=256, num_experts_per_tok=8,
                  moe_intermediate_size=512, shared_expert_intermediate_size=512)
    f.raw.setdefault("intermediate_size", f.raw["moe_intermediate_size"])  # read, unused
    out = _qwen3_next_layers(f, llama_like(f, max_pos=32768, kv_heads=2, head_dim=256))
    n = out["n_layers"]
    return out | {"gdn_split_proj": True, "ffns": ("moe",) * n, "n_experts": f.int("num_experts"),
                  "top_k": f.int("num_experts_per_tok"),
                  "moe_d_ff": f.int("moe_intermediate_size"),
                  "shared_d_ff": f.int("shared_expert_intermediate_size"),
                  "shared_expert_gate": True}


# the multimodal configs: their text_config's language model (as qwen3_vl's)
qwen3_5 = _vl_text(qwen3_5_text)
qwen3_5_moe = _vl_text(qwen3_5_moe_text)
