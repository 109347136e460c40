"""GPT-2 and its descendants: learned or rotary positions, LayerNorms with biases, plain MLPs,
parallel blocks (GPT-J, GPT-NeoX, Falcon, Phi, CodeGen), multi-query attention (StarCoder,
Falcon), OPT and BLOOM."""

from __future__ import annotations

from ...errors import ConfigError
from .fields import layer_pattern, no_cross_attention


def gpt2(f):
    no_cross_attention(f)
    d, h = f.int("n_embd", 768), f.int("n_head", 12)
    return dict(n_layers=f.int("n_layer", 12), d_model=d, n_heads=h, vocab_size=f.int("vocab_size", 50257),
                d_ff=f.int("n_inner", 4 * d), max_position=f.int("n_positions", 1024), pos_type="learned",
                activation=f.act("activation_function", "gelu_new"), qkv_bias=True, out_bias=True,
                mlp_bias=True, tie_embeddings=f.bool("tie_word_embeddings", True))


def gptj(f):
    d, h = f.int("n_embd", 4096), f.int("n_head", 16)
    return dict(n_layers=f.int("n_layer", 28), d_model=d, n_heads=h, vocab_size=f.int("vocab_size", 50400),
                d_ff=f.int("n_inner", 4 * d), max_position=f.int("n_positions", 2048), pos_type="rotary",
                activation=f.act("activation_function", "gelu_new"), mlp_bias=True, parallel_block=True,
                parallel_norms=1, tie_embeddings=f.bool("tie_word_embeddings", False), lm_head_bias=True)


def codegen(f):  # GPT-J's block (one LayerNorm, parallel), fused bias-free qkv_proj
    return gptj(f)


def gpt_bigcode(f):
    """StarCoder: GPT-2 with multi-query attention (one K/V head, ``multi_query``)."""
    no_cross_attention(f)
    d, h = f.int("n_embd", 768), f.int("n_head", 12)
    return dict(n_layers=f.int("n_layer", 12), d_model=d, n_heads=h,
                n_kv_heads=1 if f.bool("multi_query", True) else h,
                vocab_size=f.int("vocab_size", 50257), d_ff=f.int("n_inner", 4 * d),
                max_position=f.int("n_positions", 1024), pos_type="learned",
                activation=f.act("activation_function", "gelu_pytorch_tanh"), qkv_bias=True,
                out_bias=True, mlp_bias=True, tie_embeddings=f.bool("tie_word_embeddings", True))


def gpt_neo(f):
    """GPT-Neo: GPT-2's block with bias-free q/k/v (o biased) and local attention (a window of
    ``window_size``) on the layers ``attention_types`` marks "local"."""
    d = f.int("hidden_size", 2048)
    n = f.int("num_layers", 24)
    types = f.get("attention_types", [[["global", "local"], 12]])
    try:
        kinds = [k for pattern, times in types for _ in range(times) for k in pattern]
    except (TypeError, ValueError):
        kinds = None
    if kinds is None or len(kinds) != n or not set(kinds) <= {"global", "local"}:
        raise ConfigError(f"{f.where}: field 'attention_types' ({types!r:.200}) must expand to "
                          f"'global' or 'local' for each of the {n} layers")
    out = dict(n_layers=n, d_model=d, n_heads=f.int("num_heads", 16),
               vocab_size=f.int("vocab_size", 50257), d_ff=f.int("intermediate_size", 4 * d),
               max_position=f.int("max_position_embeddings", 2048), pos_type="learned",
               activation=f.act("activation_function", "gelu_new"), out_bias=True, mlp_bias=True,
               tie_embeddings=f.bool("tie_word_embeddings", True))
    return out | layer_pattern(n, f.int("window_size", 256), [k == "local" for k in kinds])


def gpt_neox(f):
    d, h = f.int("hidden_size", 6144), f.int("num_attention_heads", 64)
    bias = f.bool("attention_bias", True)
    return dict(n_layers=f.int("num_hidden_layers", 44), d_model=d, n_heads=h,
                vocab_size=f.int("vocab_size", 50432), d_ff=f.int("intermediate_size", 24576),
                max_position=f.int("max_position_embeddings", 2048), pos_type="rotary",
                activation=f.act("hidden_act", "gelu"), qkv_bias=bias, out_bias=bias, mlp_bias=True,
                parallel_block=f.bool("use_parallel_residual", True), parallel_norms=2,
                tie_embeddings=f.bool("tie_word_embeddings", False))


def falcon(f):
    d, h = f.int("hidden_size", 4544), f.int("num_attention_heads", 71)
    new_arch = f.bool("new_decoder_architecture", False)
    if new_arch:
        kv = f.int("num_kv_heads", h)
    else:
        kv = 1 if f.bool("multi_query", True) else h
    parallel = f.bool("parallel_attn", True)
    # HF: null means 2 with the new architecture; a parallel block has two norms only for 2
    n_ln = f.get("num_ln_in_parallel_attn", 2 if new_arch else 1)
    if isinstance(n_ln, bool) or n_ln not in (1, 2):  # HF compares with 2: "two" is not 2
        raise ConfigError(f"{f.where}: field 'num_ln_in_parallel_attn' ({n_ln!r:.80}) must be "
                          "1 or 2 (or null)")
    bias = f.bool("bias", False)
    return dict(n_layers=f.int("num_hidden_layers", 32), d_model=d, n_heads=h, n_kv_heads=kv,
                vocab_size=f.int("vocab_size", 65024), d_ff=f.int("ffn_hidden_size", 4 * d),
                max_position=f.int("max_position_embeddings", 2048),
                pos_type="alibi" if f.bool("alibi", False) else "rotary", activation="gelu",
                qkv_bias=bias, out_bias=bias, mlp_bias=bias, parallel_block=parallel,
                parallel_norms=2 if parallel and n_ln == 2 else 1,
                tie_embeddings=f.bool("tie_word_embeddings", True))


def opt(f):
    d = f.int("hidden_size", 768)
    pre = f.bool("do_layer_norm_before", True)
    bias = f.bool("enable_bias", True)
    return dict(n_layers=f.int("num_hidden_layers", 12), d_model=d, n_heads=f.int("num_attention_heads", 12),
                vocab_size=f.int("vocab_size", 50272), d_ff=f.int("ffn_dim", 3072),
                max_position=f.int("max_position_embeddings", 2048), position_offset=2, pos_type="learned",
                activation=f.act("activation_function", "relu"), qkv_bias=bias, out_bias=bias, mlp_bias=bias,
                norm_position="pre" if pre else "post", final_norm=pre and not f.bool("_remove_final_layer_norm", False),
                norm_affine=f.bool("layer_norm_elementwise_affine", True), embed_dim=f.int("word_embed_proj_dim", d),
                tie_embeddings=f.bool("tie_word_embeddings", True))


def bloom(f):  # ``n_embed`` (an alias that wins over hidden_size): the registry's aliases
    d = f.int("hidden_size", 64)
    return dict(n_layers=f.int("n_layer", 2), d_model=d, n_heads=f.int("n_head", 8),
                vocab_size=f.int("vocab_size", 250880), d_ff=4 * d, pos_type="alibi", activation="gelu_tanh",
                qkv_bias=True, out_bias=True, mlp_bias=True, embed_norm=True,
                tie_embeddings=f.bool("tie_word_embeddings", True))


def phi(f):
    """Phi-1/1.5/2: one LayerNorm feeding parallel attention and MLP (GPT-J), biases
    everywhere, a plain MLP, lm_head bias; ``qk_layernorm``: a LayerNorm over each head."""
    d, h = f.int("hidden_size", 2048), f.int("num_attention_heads", 32)
    kv_null = "num_key_value_heads" in f.raw and f.raw["num_key_value_heads"] is None
    return dict(n_layers=f.int("num_hidden_layers", 24), d_model=d, n_heads=h,
                n_kv_heads=h if kv_null else f.int("num_key_value_heads", h),
                vocab_size=f.int("vocab_size", 51200), d_ff=f.int("intermediate_size", 8192),
                max_position=f.int("max_position_embeddings", 2048), pos_type="rotary",
                activation=f.act("hidden_act", "gelu_new"), qkv_bias=True, out_bias=True,
                mlp_bias=True, parallel_block=True, parallel_norms=1,
                qk_norm="head" if f.bool("qk_layernorm", False) else "none",
                tie_embeddings=f.bool("tie_word_embeddings", False), lm_head_bias=True)
