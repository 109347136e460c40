"""Mixture-of-experts decoders on Llama-shaped attention: Mixtral and its kin (Granite-MoE,
OLMoE, Phi-3.5-MoE, MiniMax-M2, GLM-4.5, DBRX), Llama 4 and gpt-oss."""

from __future__ import annotations

from ..checks import _show
from ...errors import ConfigError
from .fields import (ACT, GATED, Fields, layer_list, layer_types, llama_like, nullable,
                     read_decoder, read_window, text_part, typed_windows)


def mixtral(f):
    out = llama_like(f, max_pos=131072, bias_key=None, kv_heads=8)
    return out | {"n_experts": f.int("num_local_experts", 8), "top_k": f.int("num_experts_per_tok", 2),
                  "moe_d_ff": out["d_ff"]}


def granitemoe(f):  # Llama attention (o_proj biased with attention_bias too), Mixtral-style MoE
    out = llama_like(f)
    return out | {"n_experts": f.int("num_local_experts", 8),
                  "top_k": f.int("num_experts_per_tok", 2), "moe_d_ff": out["d_ff"]}


def glm4_moe(f):
    """GLM-4.5: DeepSeek-V3's MoE (a sigmoid router whose correction bias is a buffer, shared
    experts fused into one MLP of n_shared x moe width, dense first layers) on GQA attention;
    q/k/v biased by attention_bias, o never; optional per-head q/k RMSNorm (use_qk_norm)."""
    out = llama_like(f, max_pos=131072, kv_heads=8)
    n = out["n_layers"]
    out.update(out_bias=False, n_experts=f.int("n_routed_experts", 128),
               top_k=f.int("num_experts_per_tok", 8), moe_d_ff=f.int("moe_intermediate_size", 1408),
               first_k_dense=min(f.int("first_k_dense_replace", 1), n))
    shared = f.int("n_shared_experts", 1)
    if shared:
        out["n_shared_experts"] = shared
    if f.bool("use_qk_norm", False):
        out["qk_norm"] = "head"
    return out


def olmoe(f):
    """OLMo-2-style q/k RMSNorm over all heads, Mixtral-style MoE without shared experts. HF
    sizes the q/k norms by hidden_size // num_attention_heads: a different head_dim builds a
    model whose forward fails."""
    out = llama_like(f, max_pos=4096) | {"qk_norm": "full"}
    if out["n_heads"] > 0 and out["head_dim"] != out["d_model"] // out["n_heads"]:
        raise ConfigError(f"{f.where}: field 'head_dim' ({out['head_dim']}) differs from "
                          f"hidden_size // num_attention_heads ({out['d_model'] // out['n_heads']}"
                          "): HF's OLMoE q/k norms then do not fit its projections")
    return out | {"n_experts": f.int("num_experts", 64), "top_k": f.int("num_experts_per_tok", 8),
                  "moe_d_ff": out["d_ff"]}


def phimoe(f):
    """Phi-3.5-MoE: LayerNorms with bias, biased attention (attention_bias), Mixtral-style MoE,
    an optional lm_head bias and a window on every layer when ``sliding_window`` is set. Its
    router (sparsemixer) always picks two experts: ``num_experts_per_tok`` is not read."""
    out = llama_like(f, max_pos=131072, kv_heads=8)
    window = read_window(f, None)
    n_experts = f.int("num_local_experts", 16)
    if n_experts < 2:
        raise ConfigError(f"{f.where}: field 'num_local_experts' ({n_experts}): PhiMoE's router "
                          "always picks two experts, so HF sends every token twice through "
                          "one; txcalc needs at least 2 experts")
    return out | {"norm_type": "layernorm", "norm_bias": True, "n_experts": n_experts,
                  "top_k": 2, "moe_d_ff": out["d_ff"],
                  "lm_head_bias": f.bool("lm_head_bias", False)} | (
        {"sliding_window": window} if window else {})


def minimax_m2(f):  # q/k RMSNorm over all heads, MoE whose correction bias is a buffer
    out = llama_like(f, max_pos=196608, bias_key=None, kv_heads=8, head_dim=128)
    return out | {"qk_norm": "full", "n_experts": f.int("num_local_experts", 256),
                  "top_k": f.int("num_experts_per_tok", 8), "moe_d_ff": out["d_ff"]}


def dbrx(f):
    """DBRX: bias-free LayerNorms and projections (a fused Wqkv: the same weights as q, k and
    v), GQA with ``attn_config.kv_n_heads`` KV heads, every layer a gated MoE
    (``ffn_config``: experts of width ffn_hidden_size, top moe_top_k); never tied."""
    sub = {}
    for key in ("attn_config", "ffn_config"):
        v = f.raw.get(key) or {}
        if not isinstance(v, dict):
            raise ConfigError(f"{f.where}: field {key!r} ({_show(v)}) must be an object")
        sub[key] = Fields(v, f"{f.where} {key}")
    attn, ffn = sub["attn_config"], sub["ffn_config"]
    act = ffn.get("ffn_act_fn", {"name": "silu"})
    name = act.get("name", "silu") if isinstance(act, dict) else act
    if name not in ACT or ACT[name] not in GATED:
        raise ConfigError(f"{f.where}: field 'ffn_config.ffn_act_fn' ({_show(act)}) is not a "
                          f"known gated activation ({', '.join(sorted(GATED))})")
    d_ff = ffn.int("ffn_hidden_size", 3584)
    out = dict(n_layers=f.int("n_layers", 24), d_model=f.int("d_model", 2048),
               n_heads=f.int("n_heads", 16), n_kv_heads=attn.int("kv_n_heads", 1),
               vocab_size=f.int("vocab_size", 32000), d_ff=d_ff, moe_d_ff=d_ff,
               max_position=f.int("max_seq_len", 2048), activation=GATED[ACT[name]],
               norm_type="layernorm", norm_bias=False, pos_type="rotary",
               n_experts=ffn.int("moe_num_experts", 4), top_k=ffn.int("moe_top_k", 1),
               tie_embeddings=f.bool("tie_word_embeddings", False))
    f.problems += attn.problems + ffn.problems
    return out


_LLAMA4 = dict(vocab_size=202048, hidden_size=5120, intermediate_size=8192, num_hidden_layers=48,
               num_attention_heads=40, num_key_value_heads=8, head_dim=128,
               max_position_embeddings=131072, attention_bias=False)


def llama4_text(f):
    """Llama 4 text: MoE layers (``moe_layers``, else every ``interleave_moe_layer_step``-th)
    with E experts of ``intermediate_size``, top-k routing and one shared expert of the same
    width; dense layers of ``intermediate_size_mlp``. NoPE layers (``no_rope_layers`` 0, else
    every 4th) attend globally; the others use rotary, chunked attention
    (``attention_chunk_size``) and, with ``use_qk_norm``, a parameter-free L2 q/k norm.
    FLOPs count the k routed experts per token; HF's eager Llama4TextMoe runs all E on every
    token (tests/conformance/test_hf_norms_chunks_sinks.py checks HF = txcalc + the unrouted experts)."""
    out = read_decoder(f, _LLAMA4)
    n = out["n_layers"]
    step = f.int("interleave_moe_layer_step", 1)
    if step <= 0:
        raise ConfigError(f"{f.where}: field 'interleave_moe_layer_step' ({step}) must be "
                          "positive")
    moe = set(layer_list(f, "moe_layers", list(range(step - 1, n, step))))
    flags = f.get("no_rope_layers") or [int((i + 1) % f.int("no_rope_layer_interval", 4) != 0)
                                        for i in range(n)]
    if not isinstance(flags, list) or len(flags) < n:
        raise ConfigError(f"{f.where}: field 'no_rope_layers' ({_show(flags)}) must give a "
                          f"0/1 flag for each of the {n} layers")
    nope = tuple(i for i in range(n) if not flags[i])
    chunk = nullable(f, "attention_chunk_size", 8192)
    types = layer_types(f, n, ["chunked_attention" if flags[i] and chunk is not None
                               else "full_attention" for i in range(n)])
    chunked = tuple(i for i, t in enumerate(types) if t == "chunked_attention")
    out["d_ff"] = f.int("intermediate_size_mlp", 16384)
    n_experts = f.int("num_local_experts", 16)
    out.update(nope_layers=nope, qk_norm="l2" if f.bool("use_qk_norm", True) else "none")
    if chunked and chunk is not None:
        out.update(attn_chunk=f.int("attention_chunk_size", 8192), chunked_layers=chunked)
    moe &= set(range(n))  # HF ignores indices past the last layer
    if moe:
        out.update(n_experts=n_experts, top_k=f.int("num_experts_per_tok", 1),
                   moe_d_ff=f.int("intermediate_size", 8192), n_shared_experts=1)
        if moe == set(range(step - 1, n, step)):  # every step-th layer (Maverick: 2)
            out["moe_every"] = step
        else:
            out["dense_layers"] = tuple(i for i in range(n) if i not in moe)
    return out


def llama4(f):  # Llama4ForConditionalGeneration: text_config's tie_word_embeddings decides
    return text_part(f, "llama4_text")


_GPT_OSS = dict(vocab_size=201088, hidden_size=2880, intermediate_size=2880,
                num_hidden_layers=36, num_attention_heads=64, num_key_value_heads=8, head_dim=64,
                max_position_embeddings=131072, attention_bias=True)


def gpt_oss(f):
    """gpt-oss: biased attention with a learned sink per head, alternating window-128 and
    global layers, MoE in every layer (biased experts, biased router, top-4 of 128)."""
    out = read_decoder(f, _GPT_OSS)
    n = out["n_layers"]
    types = layer_types(f, n, ["sliding_attention" if (i + 1) % 2 else "full_attention"
                               for i in range(n)])
    d_ff = out["d_ff"]
    return out | typed_windows(f, types, 128) | dict(
        attn_sinks=True, n_experts=f.int("num_local_experts", 128),
        top_k=f.int("num_experts_per_tok", 4), moe_d_ff=d_ff, router_bias=True,
        expert_bias=True)
