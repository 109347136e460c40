"""Hugging Face ``config.json`` -> ModelConfig. The only module that knows HF field names.

Each supported ``model_type`` maps to one function below. A field missing from the file takes
the default of the matching ``transformers`` configuration class (as of transformers 5.x), so a
trimmed config.json means what it means to HF. The test suite draws random configs per
model_type and checks parameter counts against the HF model built on the meta device.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from .config import ModelConfig, _show
from .errors import ConfigError, TxcalcError
from .safeio import check_path, parse_json, read_text, shown

# HF activation names -> ours (gated variants are chosen by the model type, not the name).
_ACT = {"gelu": "gelu", "gelu_new": "gelu_new", "gelu_pytorch_tanh": "gelu_tanh",
        "gelu_fast": "gelu_tanh", "quick_gelu": "gelu", "relu": "relu", "silu": "silu",
        "swish": "silu", "relu2": "relu2", "gelu_python": "gelu", "tanh": "gelu"}
_GATED = {"silu": "swiglu", "gelu": "geglu", "gelu_tanh": "geglu_tanh", "gelu_new": "geglu_tanh",
          "relu": "reglu"}
#: HF fields that are sizes or counts: an explicit 0 or a negative value is an error (0 must not
#: fall through to ModelConfig's "0 = derive it" defaults).
_POSITIVE = frozenset({"num_mel_bins", "max_source_positions", "max_target_positions",
    "hidden_size", "num_hidden_layers", "num_attention_heads", "num_key_value_heads", "head_dim",
    "intermediate_size", "vocab_size", "max_position_embeddings", "num_local_experts",
    "num_experts", "n_routed_experts", "num_experts_per_tok", "moe_intermediate_size",
    "decoder_sparse_step", "moe_layer_freq", "n_embd", "n_embed", "n_head", "n_layer", "n_inner",
    "n_positions", "num_kv_heads", "ffn_hidden_size", "ffn_dim", "word_embed_proj_dim", "d_model",
    "num_heads", "num_layers", "num_decoder_layers", "d_kv", "d_ff", "encoder_layers",
    "decoder_layers", "encoder_attention_heads", "decoder_attention_heads", "encoder_ffn_dim",
    "decoder_ffn_dim"})


class _Fields:
    """Typed reads from a config.json dict, each error naming the field and its value."""

    def __init__(self, raw: dict[str, Any], where: str):
        self.raw, self.where = raw, where
        self.problems: list[str] = []  # non-positive sizes, all reported together
        self.head: str | None = None  # the encoder head asked for (from_hf_dict's ``head``)

    def get(self, key: str, default: Any = None) -> Any:
        v = self.raw.get(key)
        return default if v is None else v

    def int(self, key: str, default: int | None = None) -> int:
        v = self.get(key, default)
        if v is None:
            raise ConfigError(f"{self.where}: missing required field {key!r}")
        if isinstance(v, bool) or not isinstance(v, int):
            if isinstance(v, float) and v.is_integer():
                return int(v)
            raise ConfigError(f"{self.where}: field {key!r} ({_show(v)}) must be an integer")
        if v <= 0 and key in _POSITIVE and self.raw.get(key) is not None:
            self.problems.append(f"field {key!r} ({v}) must be a positive integer")
        return v

    def bool(self, key: str, default: bool) -> bool:
        v = self.get(key, default)
        if not isinstance(v, bool):
            raise ConfigError(f"{self.where}: field {key!r} ({_show(v)}) must be true or false")
        return v

    def act(self, key: str, default: str) -> str:
        v = self.get(key, default)
        if v not in _ACT:
            raise ConfigError(f"{self.where}: field {key!r} ({_show(v)}) is not a known activation "
                              f"({', '.join(sorted(_ACT))})")
        return _ACT[v]

    def heads(self, d_model: int, n_heads: int) -> int:
        """head_dim when given, else d_model // n_heads (HF's rule); 0 heads is left to validate."""
        return self.int("head_dim", d_model // n_heads if n_heads > 0 else 0)


def _llama_like(f: _Fields, *, act_default: str = "silu", tie: bool = False,
                max_pos: int = 2048, bias_key: str | None = "attention_bias",
                bias_default: bool = False, kv_heads: int | None = None,
                head_dim: int | None = None, mlp_bias: bool = False) -> dict[str, Any]:
    """Llama and its kin: RMSNorm, rotary, gated MLP, GQA. Shared by most decoder types.

    ``kv_heads`` and ``head_dim`` are the HF class defaults when the field is absent (None:
    num_attention_heads and hidden_size // num_attention_heads); an explicit null KV count means
    num_attention_heads, as in the classes' ``__post_init__``. ``mlp_bias``: the type reads the
    ``mlp_bias`` field (Llama, DeepSeek-V2); the others build bias-free MLPs whatever it says.
    """
    d, h = f.int("hidden_size"), f.int("num_attention_heads")
    bias = f.bool(bias_key, bias_default) if bias_key else False
    kv_null = "num_key_value_heads" in f.raw and f.raw["num_key_value_heads"] is None
    out = dict(
        n_layers=f.int("num_hidden_layers"), d_model=d, n_heads=h,
        n_kv_heads=h if kv_null else f.int("num_key_value_heads", kv_heads or h),
        head_dim=f.int("head_dim", head_dim) if head_dim else f.heads(d, h),
        d_ff=f.int("intermediate_size"), vocab_size=f.int("vocab_size"),
        max_position=f.int("max_position_embeddings", max_pos), qkv_bias=bias, out_bias=bias,
        activation=_GATED[f.act("hidden_act", act_default)],
        mlp_bias=f.bool("mlp_bias", False) if mlp_bias else False,
        norm_type="rmsnorm", pos_type="rotary", tie_embeddings=f.bool("tie_word_embeddings", tie),
    )
    return out


#: How each type places its sliding window (HF 5.x config classes and modeling code):
#:   all      every layer slides when ``sliding_window`` is set (Mistral: default 4096;
#:            Mixtral, Phi-3, Starcoder2: default null); ``layer_types`` is not read
#:   qwen2    only with ``use_sliding_window``; layer_types, else layers i >= max_window_layers
#:   qwen2moe only with ``use_sliding_window``; layer_types, else even i < max_window_layers
#:   qwen3moe every layer, only with ``use_sliding_window``
#:   gemma2   layer_types, else layers 0, 2, 4, ... slide (every second one is global)
_WINDOW_RULES = {"mistral": ("all", 4096), "mixtral": ("all", None), "phi3": ("all", None),
                 "starcoder2": ("all", None), "qwen2": ("qwen2", 4096), "qwen3": ("qwen2", 4096),
                 "qwen2_moe": ("qwen2moe", 4096), "qwen3_moe": ("qwen3moe", 4096),
                 "gemma2": ("gemma2", 4096)}


def _windows(f: _Fields, n_layers: int, model_type: str) -> dict[str, Any]:
    """Sliding-window layout as HF builds it for ``model_type`` (see _WINDOW_RULES); types
    without a rule (Llama, Gemma, ...) ignore a ``sliding_window`` field, as HF does."""
    rule, default = _WINDOW_RULES.get(model_type, ("none", None))
    if rule == "none":
        return {}
    if "sliding_window" in f.raw and f.raw["sliding_window"] is None:
        return {}  # an explicit null turns the type's default window off
    window = f.int("sliding_window", default) if f.get("sliding_window", default) else 0
    if rule in ("qwen2", "qwen2moe", "qwen3moe") and not f.bool("use_sliding_window", False):
        return {}
    if not window:
        return {}
    if rule in ("all", "qwen3moe"):
        return {"sliding_window": window}
    types = f.get("layer_types")
    if types is None:
        mwl = f.int("max_window_layers", 28) if rule != "gemma2" else 0
        sliding = [i >= mwl if rule == "qwen2" else
                   (i % 2 == 0 and (rule == "gemma2" or i < mwl)) for i in range(n_layers)]
    elif not isinstance(types, list) or len(types) != n_layers or not all(
            t in ("sliding_attention", "full_attention") for t in types):
        raise ConfigError(f"{f.where}: field 'layer_types' ({types!r}) must list "
                          f"'sliding_attention' or 'full_attention' once for each of the "
                          f"{n_layers} layers")
    else:
        sliding = [t == "sliding_attention" for t in types]
    layers = tuple(i for i, s in enumerate(sliding) if s)
    if not layers:
        return {}
    if len(layers) == n_layers:
        return {"sliding_window": window}
    for k in range(2, n_layers + 1):  # a global layer every k-th: the presets' short form
        if all(s == ((i + 1) % k != 0) for i, s in enumerate(sliding)):
            return {"sliding_window": window, "global_every": k}
    return {"sliding_window": window, "sliding_layers": layers}


#: Dropout probabilities as each type's modeling code applies them: model_type -> {our field:
#: (HF field, HF default)}. Llama-shaped types only drop attention probabilities. Not read
#: (treated as 0, so a dropout-on training step under-counts their masks): OPT, BART, Falcon,
#: BLOOM, and Phi-3's and Starcoder2's residual/embedding dropout.
_DROPOUT: dict[str, dict[str, tuple[str, float]]] = {
    "gpt2": {"embed_dropout": ("embd_pdrop", 0.1), "attn_dropout": ("attn_pdrop", 0.1),
             "resid_dropout": ("resid_pdrop", 0.1)},
    "gptj": {"embed_dropout": ("embd_pdrop", 0.0), "attn_dropout": ("attn_pdrop", 0.0),
             "resid_dropout": ("resid_pdrop", 0.0)},
    "gpt_neox": {"embed_dropout": ("hidden_dropout", 0.0),
                 "attn_dropout": ("attention_dropout", 0.0),
                 "resid_dropout": ("hidden_dropout", 0.0)},
    **{t: {"embed_dropout": ("hidden_dropout_prob", 0.1),
           "attn_dropout": ("attention_probs_dropout_prob", 0.1),
           "resid_dropout": ("hidden_dropout_prob", 0.1)} for t in ("bert", "roberta")},
    "t5": {k: ("dropout_rate", 0.1) for k in ("embed_dropout", "attn_dropout", "resid_dropout",
                                               "mlp_dropout", "final_dropout")},
    **{t: {"attn_dropout": ("attention_dropout", 0.0)} for t in (
        "llama", "mistral", "mixtral", "qwen2", "qwen3", "qwen2_moe", "qwen3_moe", "gemma",
        "gemma2", "phi3", "olmo", "starcoder2", "deepseek_v2", "deepseek_v3")},
}


def _dropouts(f: _Fields, model_type: str) -> dict[str, float]:
    out = {}
    for ours, (key, default) in _DROPOUT.get(model_type, {}).items():
        v = f.get(key, default)
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not 0 <= v < 1:
            raise ConfigError(f"{f.where}: field {key!r} ({_show(v)}) must be a dropout "
                              "probability in [0, 1)")
        if v:
            out[ours] = float(v)
    return out


def _moe_qwen(f: _Fields, n_layers: int, shared: bool) -> dict[str, Any]:
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


def _llama(f): return _llama_like(f, mlp_bias=True)


def _mistral(f):  # Mistral's attention has no biases whatever the config says
    return _llama_like(f, max_pos=131072, bias_key=None, kv_heads=8)


def _qwen2(f):  # Qwen2: q/k/v always biased, o never
    return _llama_like(f, max_pos=32768, bias_key=None, kv_heads=32) | {"qkv_bias": True}


def _qwen3(f):
    return _llama_like(f, max_pos=32768, kv_heads=32, head_dim=128) | {"qk_norm": "head"}


def _mixtral(f):
    out = _llama_like(f, max_pos=131072, bias_key=None, kv_heads=8)
    return out | {"n_experts": f.int("num_local_experts", 8), "top_k": f.int("num_experts_per_tok", 2),
                  "moe_d_ff": out["d_ff"]}


def _qwen2_moe(f):  # q/k/v biased by ``qkv_bias`` (default true), o never
    out = _llama_like(f, max_pos=32768, bias_key=None, kv_heads=16)
    out["qkv_bias"] = f.bool("qkv_bias", True)
    return out | _moe_qwen(f, out["n_layers"], shared=True)


def _qwen3_moe(f):
    out = _llama_like(f, max_pos=32768, kv_heads=4) | {"qk_norm": "head"}
    return out | _moe_qwen(f, out["n_layers"], shared=False)


def _deepseek(f: _Fields, v3: bool) -> dict[str, Any]:
    # MLA ignores num_key_value_heads and head_dim; ``moe_layer_freq`` (in DeepSeek's own
    # config.json files) is not read by HF: every layer from first_k_dense_replace on is MoE.
    out = _llama_like(f, max_pos=4096 if v3 else 2048, mlp_bias=not v3)
    if "q_lora_rank" in f.raw and f.raw["q_lora_rank"] is None:
        q_lora = 0  # null: the full-rank q_proj
    else:
        q_lora = f.int("q_lora_rank", 1536)
        if q_lora == 0:
            raise ConfigError(f"{f.where}: field 'q_lora_rank' (0) builds zero-width query "
                              "projections in HF; use null for a full-rank q_proj")
    if not v3 and f.get("num_experts_per_tok") is None:
        raise ConfigError(f"{f.where}: field 'num_experts_per_tok' is missing (DeepSeek-V2's "
                          "default is None, a model that cannot route)")
    n_layers, n_shared = out["n_layers"], f.int("n_shared_experts", 1 if v3 else 2)
    if n_shared == 0 and out["mlp_bias"]:
        raise ConfigError(f"{f.where}: field 'n_shared_experts' (0) with mlp_bias: HF keeps a "
                          "zero-width shared MLP whose down_proj bias txcalc does not model")
    out.update(
        n_kv_heads=out["n_heads"], head_dim=0, q_lora_rank=q_lora,
        kv_lora_rank=f.int("kv_lora_rank", 512), qk_nope_head_dim=f.int("qk_nope_head_dim", 128),
        qk_rope_head_dim=f.int("qk_rope_head_dim", 64), v_head_dim=f.int("v_head_dim", 128),
        n_experts=f.int("n_routed_experts", 256 if v3 else 64),
        top_k=f.int("num_experts_per_tok", 8),
        moe_d_ff=f.int("moe_intermediate_size", 2048 if v3 else 1407),
        n_shared_experts=n_shared,
        # more dense layers than layers: all dense, HF builds no MoE block
        first_k_dense=min(f.int("first_k_dense_replace", 3 if v3 else 0), n_layers),
        out_bias=out["qkv_bias"],
    )
    if out["head_dim"] == 0:
        out.pop("head_dim")
    return out


def _gemma(f, v2: bool = False):  # Gemma reads ``hidden_act``, Gemma 2 ``hidden_activation``
    out = _llama_like(f, act_default="gelu_pytorch_tanh", tie=True, max_pos=8192,
                      kv_heads=4 if v2 else 16, head_dim=256)
    act_key = "hidden_activation" if v2 else "hidden_act"
    return out | {"activation": _GATED[f.act(act_key, "gelu_pytorch_tanh")]}


def _gemma2(f):
    return _gemma(f, v2=True) | {"norm_position": "sandwich"}


def _phi3(f):
    return _llama_like(f, max_pos=4096, bias_key=None)


def _olmo(f):
    return _llama_like(f) | {"norm_type": "layernorm", "norm_affine": False}


def _starcoder2(f):  # ``use_bias`` (default true) on every projection, attention and MLP
    out = _llama_like(f, act_default="gelu_pytorch_tanh", tie=True, max_pos=4096,
                      bias_key="use_bias", bias_default=True, kv_heads=2)
    return out | {"activation": f.act("hidden_act", "gelu_pytorch_tanh"), "mlp_bias": out["qkv_bias"],
                  "norm_type": "layernorm", "norm_bias": True}


def _no_cross_attention(f: _Fields) -> None:
    if f.bool("add_cross_attention", False):
        raise ConfigError(f"{f.where}: field 'add_cross_attention' (true): cross-attention "
                          "blocks in a single-stack model are not modelled; txcalc has them "
                          "only in encoder-decoder models")


def _gpt2(f):
    _no_cross_attention(f)
    d, h = f.int("n_embd", 768), f.int("n_head", 12)
    return dict(n_layers=f.int("n_layer", 12), d_model=d, n_heads=h, vocab_size=f.int("vocab_size", 50257),
                d_ff=f.int("n_inner", 4 * d), max_position=f.int("n_positions", 1024), pos_type="learned",
                activation=f.act("activation_function", "gelu_new"), qkv_bias=True, out_bias=True,
                mlp_bias=True, tie_embeddings=f.bool("tie_word_embeddings", True))


def _gptj(f):
    d, h = f.int("n_embd", 4096), f.int("n_head", 16)
    return dict(n_layers=f.int("n_layer", 28), d_model=d, n_heads=h, vocab_size=f.int("vocab_size", 50400),
                d_ff=f.int("n_inner", 4 * d), max_position=f.int("n_positions", 2048), pos_type="rotary",
                activation=f.act("activation_function", "gelu_new"), mlp_bias=True, parallel_block=True,
                parallel_norms=1, tie_embeddings=f.bool("tie_word_embeddings", False), lm_head_bias=True)


def _gpt_neox(f):
    d, h = f.int("hidden_size", 6144), f.int("num_attention_heads", 64)
    bias = f.bool("attention_bias", True)
    return dict(n_layers=f.int("num_hidden_layers", 44), d_model=d, n_heads=h,
                vocab_size=f.int("vocab_size", 50432), d_ff=f.int("intermediate_size", 24576),
                max_position=f.int("max_position_embeddings", 2048), pos_type="rotary",
                activation=f.act("hidden_act", "gelu"), qkv_bias=bias, out_bias=bias, mlp_bias=True,
                parallel_block=f.bool("use_parallel_residual", True), parallel_norms=2,
                tie_embeddings=f.bool("tie_word_embeddings", False))


def _falcon(f):
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


def _opt(f):
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


def _bloom(f):  # ``n_embed`` (an alias that wins over hidden_size) is resolved by _ALIASES
    d = f.int("hidden_size", 64)
    return dict(n_layers=f.int("n_layer", 2), d_model=d, n_heads=f.int("n_head", 8),
                vocab_size=f.int("vocab_size", 250880), d_ff=4 * d, pos_type="alibi", activation="gelu_tanh",
                qkv_bias=True, out_bias=True, mlp_bias=True, embed_norm=True,
                tie_embeddings=f.bool("tie_word_embeddings", True))


def _bert(f, roberta: bool = False):
    _no_cross_attention(f)
    d = f.int("hidden_size", 768)
    return dict(family="encoder", n_layers=f.int("num_hidden_layers", 12), d_model=d,
                n_heads=f.int("num_attention_heads", 12),
                vocab_size=f.int("vocab_size", 50265 if roberta else 30522),
                d_ff=f.int("intermediate_size", 3072), max_position=f.int("max_position_embeddings", 512),
                type_vocab_size=f.int("type_vocab_size", 2), pos_type="learned",
                activation=f.act("hidden_act", "gelu"), qkv_bias=True, out_bias=True, mlp_bias=True,
                norm_position="post", final_norm=False, embed_norm=True, pooler=True, head="none")


def _t5(f):
    proj = str(f.get("feed_forward_proj", "relu"))
    gated = proj.startswith("gated-")
    act = f.act("feed_forward_proj", "relu") if not gated else _ACT.get(proj[6:])
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
                max_position=f.int("n_positions", 512), activation=_GATED[act] if gated else act,
                norm_type="rmsnorm", norm_bias=False, tie_embeddings=f.bool("tie_word_embeddings", True))


# --- encoders of issue 13 and their heads; unequal encoder-decoder stacks ---------------------
#: HF class-name suffix -> txcalc head, for ``head="auto"`` (the class config.json names)
_HEAD_SUFFIXES = (("ForMaskedLM", "mlm"), ("ForSequenceClassification", "seq_cls"),
                  ("ForTokenClassification", "token_cls"), ("Model", "none"))
#: ``head`` arguments of from_hf_dict / load_hf_config
ENCODER_HEADS = ("none", "mlm", "seq_cls", "token_cls", "auto")

#: How each encoder type builds its heads (HF 5.x ``*For*`` classes):
#:   base_pooler  the base model (AutoModel) has a pooler
#:   cls          seq_cls: "pooler" (pooler + classifier: BERT, ALBERT) or "dense" (a
#:                Linear(D, D) + activation on the first token, then the classifier: RoBERTa,
#:                ELECTRA, MPNet, ESM, DistilBERT; ModernBERT adds a norm)
_HEAD_STYLES = {
    "bert": dict(base_pooler=True, cls="pooler"), "albert": dict(base_pooler=True, cls="pooler"),
    **{t: dict(base_pooler=True, cls="dense") for t in (
        "roberta", "xlm-roberta", "camembert", "mpnet", "esm")},
    "electra": dict(base_pooler=False, cls="dense"),
    "distilbert": dict(base_pooler=False, cls="dense"),
    "deberta-v2": dict(base_pooler=False, cls="dense"),
    "modernbert": dict(base_pooler=False, cls="dense", norm=True),
}


def _head_of(f: _Fields) -> str:
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


def _labels(f: _Fields) -> int:
    """num_labels as HF derives it: the length of ``id2label`` when given, else num_labels."""
    id2label = f.get("id2label")
    if isinstance(id2label, dict) and id2label:
        return len(id2label)
    return f.int("num_labels", 2)


def _with_head(f: _Fields, out: dict[str, Any], model_type: str) -> dict[str, Any]:
    """Set head, pooler and classifier fields of an encoder as HF builds the chosen class."""
    style, head = _HEAD_STYLES[model_type], _head_of(f)
    out = dict(out, head=head, pooler=False)
    if head == "none":
        out["pooler"] = style["base_pooler"]
    elif head == "mlm":
        out["lm_head_bias"] = True  # every MLM decoder has a vocabulary bias of its own
    else:
        out["n_labels"] = _labels(f)
        if head == "seq_cls" and style["cls"] == "pooler":
            out["pooler"] = True
        elif head == "seq_cls" or style.get("norm"):
            out["cls_dense"] = True
        out["head_norm"] = bool(style.get("norm"))
    return out


def _bert_head(f, roberta: bool = False):
    return _with_head(f, _bert(f, roberta), "roberta" if roberta else "bert")


def _bert_alias(model_type: str):
    """xlm-roberta and camembert: RoBERTa's structure with a 30522-token default vocabulary."""
    def convert(f):
        out = _bert(f, roberta=True)
        out["vocab_size"] = f.int("vocab_size", 30522)
        return _with_head(f, out, model_type)
    return convert


def _distilbert(f):
    d = f.int("dim", 768)
    out = dict(family="encoder", n_layers=f.int("n_layers", 6), d_model=d,
               n_heads=f.int("n_heads", 12), vocab_size=f.int("vocab_size", 30522),
               d_ff=f.int("hidden_dim", 3072), max_position=f.int("max_position_embeddings", 512),
               pos_type="learned", activation=f.act("activation", "gelu"), qkv_bias=True,
               out_bias=True, mlp_bias=True, norm_position="post", final_norm=False,
               embed_norm=True)
    return _with_head(f, out, "distilbert")


def _electra(f):
    _no_cross_attention(f)
    d, e = f.int("hidden_size", 256), f.int("embedding_size", 128)
    out = dict(family="encoder", n_layers=f.int("num_hidden_layers", 12), d_model=d,
               n_heads=f.int("num_attention_heads", 4), vocab_size=f.int("vocab_size", 30522),
               d_ff=f.int("intermediate_size", 1024),
               max_position=f.int("max_position_embeddings", 512),
               type_vocab_size=f.int("type_vocab_size", 2), pos_type="learned",
               activation=f.act("hidden_act", "gelu"), qkv_bias=True, out_bias=True,
               mlp_bias=True, norm_position="post", final_norm=False, embed_norm=True,
               embed_dim=e, embed_factorised=e != d)  # embeddings_project only when e != d
    return _with_head(f, out, "electra")


def _albert(f):
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
               shared_groups=groups)
    return _with_head(f, out, "albert")


def _mpnet(f):
    d = f.int("hidden_size", 768)
    out = dict(family="encoder", n_layers=f.int("num_hidden_layers", 12), d_model=d,
               n_heads=f.int("num_attention_heads", 12), vocab_size=f.int("vocab_size", 30527),
               d_ff=f.int("intermediate_size", 3072),
               max_position=f.int("max_position_embeddings", 512), pos_type="learned",
               activation=f.act("hidden_act", "gelu"), qkv_bias=True, out_bias=True,
               mlp_bias=True, norm_position="post", final_norm=False, embed_norm=True,
               extra_rel_bias=True,
               relative_buckets=f.int("relative_attention_num_buckets", 32))
    return _with_head(f, out, "mpnet")


def _modernbert(f):
    d = f.int("hidden_size", 768)
    norm_bias = f.bool("norm_bias", False)
    attn_bias = f.bool("attention_bias", False)
    out = dict(family="encoder", n_layers=f.int("num_hidden_layers", 22), d_model=d,
               n_heads=f.int("num_attention_heads", 12), vocab_size=f.int("vocab_size", 50368),
               d_ff=f.int("intermediate_size", 1152),
               max_position=f.int("max_position_embeddings", 8192), pos_type="rotary",
               activation=_GATED[f.act("hidden_activation", "gelu")], qkv_bias=attn_bias,
               out_bias=attn_bias, mlp_bias=f.bool("mlp_bias", False), norm_bias=norm_bias,
               norm_position="pre", final_norm=True, embed_norm=True, first_attn_norm=False,
               head_dense_bias=f.bool("classifier_bias", False),
               tie_embeddings=f.bool("tie_word_embeddings", True))
    out = _with_head(f, out, "modernbert")
    if out["head"] == "mlm":
        out["lm_head_bias"] = f.bool("decoder_bias", True)
    return out


def _esm(f):
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
    return _with_head(f, out, "esm")


def _seq2seq(f: _Fields, *, d_model: int, pre_norm: bool, embed_norm: bool,
             positions: str, offset: int, max_pos: int, vocab: int) -> dict[str, Any]:
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
               activation=f.act("activation_function", "gelu"), qkv_bias=True, out_bias=True,
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


def _bart_asym(f):
    # add_final_layer_norm / normalize_before (mBART's pre-norm) are not read by HF's BART
    # classes: a model_type "bart" file with them builds the post-norm BART counted here
    return _seq2seq(f, d_model=1024, pre_norm=False, embed_norm=True, positions="learned",
                    offset=2, max_pos=1024, vocab=50265)


def _mbart(f):
    return _seq2seq(f, d_model=1024, pre_norm=True, embed_norm=True, positions="learned",
                    offset=2, max_pos=1024, vocab=50265)


def _marian(f):
    if not f.bool("share_encoder_decoder_embeddings", True):
        raise ConfigError(f"{f.where}: field 'share_encoder_decoder_embeddings' (false): "
                          "separate encoder and decoder token tables are not modelled")
    vocab = f.int("vocab_size", 58101)
    if f.int("decoder_vocab_size", vocab) != vocab:
        raise ConfigError(f"{f.where}: decoder_vocab_size ({f.get('decoder_vocab_size')}) != "
                          f"vocab_size ({vocab}): one shared token table is modelled")
    return _seq2seq(f, d_model=1024, pre_norm=False, embed_norm=False, positions="param",
                    offset=0, max_pos=1024, vocab=58101)


def _pegasus(f):
    return _seq2seq(f, d_model=1024, pre_norm=True, embed_norm=False, positions="param",
                    offset=0, max_pos=1024, vocab=50265)


def _m2m_100(f):
    return _seq2seq(f, d_model=1024, pre_norm=True, embed_norm=False, positions="buffer",
                    offset=2, max_pos=1024, vocab=128112)


def _mt5(f, umt5: bool = False):
    """mT5 / UMT5: T5 v1.1 (gated GELU by default, 250112 tokens); UMT5 gives every block
    its own relative-bias table."""
    raw = dict(f.raw)
    raw.setdefault("feed_forward_proj", "gated-gelu")
    raw.setdefault("vocab_size", 250112)
    g = _Fields(raw, f.where)
    out = _t5(g)
    f.problems += g.problems
    if umt5:
        out["rel_bias_every_layer"] = True
    return out


def _deberta_v2(f):
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
        span = f.int("max_relative_positions", -1)
        span = buckets if buckets > 0 else span if span >= 1 else out["max_position"]
        out.update(rel_span=span, rel_c2p="c2p" in types, rel_p2c="p2c" in types,
                   rel_share_key=f.bool("share_att_key", False))
    norms = [x.strip() for x in str(f.get("norm_rel_ebd", "none")).lower().split("|")]
    out["rel_norm"] = "layer_norm" in norms  # built (unused) even without relative attention
    return _with_head(f, out, "deberta-v2")


def _whisper(f):
    """Whisper (WhisperForConditionalGeneration): the conv audio stem, a pre-norm encoder over
    ``max_source_positions`` frames with a frozen position table, a pre-norm decoder with
    learned positions, final norms, k_proj without bias, the lm_head tied to the tokens."""
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
    return out


_DROPOUT.update({
    **{t: _DROPOUT["bert"] for t in ("xlm-roberta", "camembert", "electra", "mpnet",
                                      "deberta-v2")},
    **{t: _DROPOUT["t5"] for t in ("mt5", "umt5")},
})

ENCODER_CONVERTERS: dict[str, Callable[[_Fields], dict[str, Any]]] = {
    "xlm-roberta": _bert_alias("xlm-roberta"), "camembert": _bert_alias("camembert"),
    "distilbert": _distilbert, "electra": _electra, "albert": _albert, "mpnet": _mpnet,
    "modernbert": _modernbert, "esm": _esm,
    "mbart": _mbart, "marian": _marian, "pegasus": _pegasus, "m2m_100": _m2m_100,
    "mt5": _mt5, "umt5": lambda f: _mt5(f, umt5=True), "whisper": _whisper,
    "deberta-v2": _deberta_v2,
}
ENCODER_ALIASES: dict[str, dict[str, str]] = {
    "distilbert": {"hidden_size": "dim", "num_attention_heads": "n_heads",
                   "num_hidden_layers": "n_layers"},
    **{t: {"num_attention_heads": "encoder_attention_heads", "hidden_size": "d_model",
           "num_hidden_layers": "encoder_layers"} for t in ("mbart", "marian", "pegasus",
                                                            "m2m_100")},
    **{t: {"hidden_size": "d_model", "num_attention_heads": "num_heads", "head_dim": "d_kv"}
       for t in ("mt5", "umt5")},
    "whisper": {"num_attention_heads": "encoder_attention_heads", "hidden_size": "d_model",
                "num_hidden_layers": "encoder_layers"},
}
# --- end of issue 13's converters --------------------------------------------------------------


#: model_type -> converter. Llama-shaped types share ``_llama``.
CONVERTERS: dict[str, Callable[[_Fields], dict[str, Any]]] = {
    "llama": _llama, "mistral": _mistral, "qwen2": _qwen2, "qwen3": _qwen3, "mixtral": _mixtral,
    "qwen2_moe": _qwen2_moe, "qwen3_moe": _qwen3_moe,
    "deepseek_v2": lambda f: _deepseek(f, v3=False), "deepseek_v3": lambda f: _deepseek(f, v3=True),
    "gemma": _gemma, "gemma2": _gemma2, "phi3": _phi3, "olmo": _olmo, "starcoder2": _starcoder2,
    "gpt2": _gpt2, "gptj": _gptj, "gpt_neox": _gpt_neox, "falcon": _falcon, "opt": _opt,
    "bloom": _bloom, "bert": _bert_head, "roberta": lambda f: _bert_head(f, roberta=True),
    "t5": _t5, "bart": _bart_asym, **ENCODER_CONVERTERS,
}

#: ``attribute_map`` of the HF configuration classes (alias -> the field read above), plus the
#: ``n_embed`` keyword of Falcon and BLOOM. As in HF, an alias that is present (not null) wins.
_ALIASES: dict[str, dict[str, str]] = {
    "mixtral": {"num_experts": "num_local_experts"},
    "qwen3_moe": {"num_local_experts": "num_experts"},
    "deepseek_v2": {"num_experts": "n_routed_experts"},
    "deepseek_v3": {"num_local_experts": "n_routed_experts"},
    **{t: {"hidden_size": "n_embd", "max_position_embeddings": "n_positions",
           "num_attention_heads": "n_head", "num_hidden_layers": "n_layer"} for t in ("gpt2", "gptj")},
    "bloom": {"num_hidden_layers": "n_layer", "num_attention_heads": "n_head",
              "n_embed": "hidden_size"},
    "falcon": {"n_embed": "hidden_size"},
    "t5": {"hidden_size": "d_model", "num_attention_heads": "num_heads", "head_dim": "d_kv"},
    "bart": {"num_attention_heads": "encoder_attention_heads", "hidden_size": "d_model",
             "num_hidden_layers": "encoder_layers"},
    **ENCODER_ALIASES,
}


def _resolve_aliases(model_type: str, raw: dict[str, Any]) -> dict[str, Any]:
    aliases = {a: c for a, c in _ALIASES.get(model_type, {}).items() if raw.get(a) is not None}
    if not aliases:
        return raw
    out = {k: v for k, v in raw.items() if k not in aliases}
    out.update({c: raw[a] for a, c in aliases.items()})
    return out


def from_hf_dict(raw: Any, name: str = "config.json", head: str | None = None) -> ModelConfig:
    """A ModelConfig from the parsed contents of a HF config.json.

    ``head`` (encoders): None or "none" builds the base model as ``AutoModel`` does (with its
    pooler where HF builds one); "mlm", "seq_cls", "token_cls" the ``*ForMaskedLM``,
    ``*ForSequenceClassification``, ``*ForTokenClassification`` class; "auto" the class named
    by ``architectures[0]``."""
    if head is not None and head not in ENCODER_HEADS:
        raise ConfigError(f"head ({_show(head)}) must be one of {', '.join(ENCODER_HEADS)}")
    if not isinstance(raw, dict):
        raise ConfigError(f"{name}: expected a JSON object, got {type(raw).__name__}")
    model_type = raw.get("model_type")
    if model_type is None:
        raise ConfigError(f"{name}: no 'model_type' field; supported: {', '.join(sorted(CONVERTERS))}")
    if not isinstance(model_type, str) or model_type not in CONVERTERS:
        raise ConfigError(f"{name}: unsupported model_type {model_type!r}; supported: "
                          f"{', '.join(sorted(CONVERTERS))}")
    f = _Fields(_resolve_aliases(model_type, raw), name)
    f.head = head
    if head not in (None, "none", "auto") and model_type not in _HEAD_STYLES:
        raise ConfigError(f"{name}: head {head!r} is for encoder models; {model_type} has none")
    try:
        fields = CONVERTERS[model_type](f)
        fields.update(_windows(f, fields["n_layers"], model_type))
        fields.update(_dropouts(f, model_type))
    except TxcalcError as e:
        if f.problems:
            raise ConfigError("; ".join([str(e)] + f.problems)) from None
        raise
    except (TypeError, ValueError, KeyError, ZeroDivisionError) as e:  # odd types in odd fields
        if f.problems:
            raise ConfigError(f"{name}: " + "; ".join(f.problems)) from None
        raise ConfigError(f"{name}: cannot read {model_type} config: {e}") from None
    if f.problems:
        raise ConfigError(f"{name}: " + "; ".join(f.problems))
    return ModelConfig(name=name, source=f"HF config.json ({model_type})", **fields)


def load_hf_config(path: str | Path, head: str | None = None) -> ModelConfig:
    """Read a HF config.json (or a directory holding one) into a ModelConfig.

    The file is read by ``safeio`` (a regular file under its size cap, strict JSON with depth
    and integer-size limits): a FIFO, a device or a huge file is refused, never read."""
    p = Path(check_path(path, ConfigError))
    if p.is_dir():
        p = p / "config.json"
    text = read_text(p, ConfigError)
    if not text.strip():
        raise ConfigError(f"{shown(p)}: empty file, expected a JSON object")
    raw = parse_json(text, shown(p), ConfigError)
    if not isinstance(raw, dict):
        raise ConfigError(f"{shown(p)}: expected a JSON object, got {type(raw).__name__}")
    default = p.parent.name if p.name == "config.json" and p.parent.name else p.stem
    name = raw.get("_name_or_path")
    return from_hf_dict(raw, name if isinstance(name, str) and name else default, head)
