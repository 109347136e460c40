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

from ..config import ModelConfig, _show
from ...errors import ConfigError, TxcalcError
from ...safeio import check_path, parse_json, read_text, shown

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
        self.read: set[str] = set()  # fields a converter looked at (closest_types)
        self.head: str | None = None  # the encoder head asked for (from_hf_dict's ``head``)

    def get(self, key: str, default: Any = None) -> Any:
        self.read.add(key)
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
    return _window_layout(window, sliding)


def _window_layout(window: int, sliding: list[bool]) -> dict[str, Any]:
    """ModelConfig fields for ``window`` on the layers flagged in ``sliding`` (one per layer)."""
    n_layers = len(sliding)
    layers = tuple(i for i, s in enumerate(sliding) if s)
    if not layers or not window:
        return {}
    if len(layers) == n_layers:
        return {"sliding_window": window}
    for k in range(2, n_layers + 1):  # a global layer every k-th: the presets' short form
        if all(s == ((i + 1) % k != 0) for i, s in enumerate(sliding)):
            return {"sliding_window": window, "global_every": k}
    return {"sliding_window": window, "sliding_layers": layers}


#: Dropout probabilities as each type's modeling code applies them: model_type -> {our field:
#: (HF field, HF default)}. Llama-shaped types only drop attention probabilities. Not read
#: (treated as 0, so a dropout-on training step under-counts their masks): OPT, Falcon,
#: BLOOM, and Phi-3's and Starcoder2's residual/embedding dropout (BART's: below).
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
    act = f.act(act_key, "gelu_pytorch_tanh")
    if not v2 and f.get("hidden_act") == "gelu":  # GemmaConfig reads legacy "gelu" as tanh GELU
        act = "gelu_tanh"
    return out | {"activation": _GATED[act]}


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
                  ("ForTokenClassification", "token_cls"), ("ForPreTraining", "discriminator"),
                  ("Model", "none"))
#: ``head`` arguments of from_hf_dict / load_hf_config. ELECTRA's generator is its masked-LM
#: head ("mlm", ElectraForMaskedLM); "discriminator" is ElectraForPreTraining's replaced-token
#: detector: Linear(D, D) + activation, then Linear(D, 1), on every token.
ENCODER_HEADS = ("none", "mlm", "seq_cls", "token_cls", "discriminator", "auto")
#: types with a discriminator head
_DISCRIMINATOR_TYPES = frozenset({"electra"})

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
    "nomic_bert": dict(base_pooler=False, cls="pooler"),
    "longformer": dict(base_pooler=True, cls="dense"),
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
    elif head == "discriminator":
        if model_type not in _DISCRIMINATOR_TYPES:
            raise ConfigError(f"{f.where}: head 'discriminator' is ELECTRA's (ForPreTraining); "
                              f"{model_type} has none")
        # one logit per token, behind a dense layer: a token classifier of one label
        out.update(head="token_cls", n_labels=1, cls_dense=True, head_norm=False)
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
               embed_norm=True, resid_dropout_at="mlp")
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
               shared_groups=groups, resid_dropout_at="attn")
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
               tie_embeddings=f.bool("tie_word_embeddings", True), resid_dropout_at="attn")
    # local layers: layer_types, else every layer but each global_attn_every_n_layers-th
    # (0, k, 2k, ...) attends within local_attention // 2 tokens either side (model FLOPs
    # skip the rest; the dense kernel HF runs computes every pair)
    n = out["n_layers"]
    sliding = _sliding_flags(f, n)
    if sliding is None:
        every = f.int("global_attn_every_n_layers", 3)
        sliding = [bool(i % every) for i in range(n)] if every > 0 else [False] * n
    out.update(_window_layout(f.int("local_attention", 128) // 2, sliding))
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


def _nomic_bert(f):
    """Nomic BERT (nomic-embed-text): BERT's post-norm blocks and token-type embeddings with
    rotary positions (no position table), bias-free q/k/v/o and a bias-free gated MLP
    (SwiGLU by default); the base model has no pooler, the classifier adds BERT's."""
    _no_cross_attention(f)
    d, h = f.int("hidden_size", 768), f.int("num_attention_heads", 12)
    out = dict(family="encoder", n_layers=f.int("num_hidden_layers", 12), d_model=d,
               n_heads=h, head_dim=f.heads(d, h), vocab_size=f.int("vocab_size", 30528),
               d_ff=f.int("intermediate_size", 3072),
               max_position=f.int("max_position_embeddings", 2048),
               type_vocab_size=f.int("type_vocab_size", 2), pos_type="rotary",
               activation=_GATED[f.act("hidden_act", "silu")], qkv_bias=False, out_bias=False,
               mlp_bias=False, norm_position="post", final_norm=False, embed_norm=True)
    return _with_head(f, out, "nomic_bert")


def _seq2seq(f: _Fields, *, d_model: int, pre_norm: bool, embed_norm: bool,
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


def _m2m_100(f):  # M2M100Config's activation_function defaults to relu (BART's: gelu)
    return _seq2seq(f, d_model=1024, pre_norm=True, embed_norm=False, positions="buffer",
                    offset=2, max_pos=1024, vocab=128112, act="relu")


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
        max_rel = span = f.int("max_relative_positions", -1)
        span = buckets if buckets > 0 else span if span >= 1 else out["max_position"]
        out.update(rel_span=span, rel_c2p="c2p" in types, rel_p2c="p2c" in types,
                   rel_share_key=f.bool("share_att_key", False))
        if buckets > 0:  # v3: log buckets up to max_relative_positions (else the positions)
            out["rel_max_position"] = max_rel if max_rel >= 1 else out["max_position"]
    norms = [x.strip() for x in str(f.get("norm_rel_ebd", "none")).lower().split("|")]
    out["rel_norm"] = "layer_norm" in norms  # built (unused) even without relative attention
    return _with_head(f, out, "deberta-v2")


def _whisper(f):
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


_DROPOUT.update({
    **{t: _DROPOUT["bert"] for t in ("xlm-roberta", "camembert", "electra", "mpnet",
                                      "deberta-v2", "longformer")},
    **{t: _DROPOUT["t5"] for t in ("mt5", "umt5")},
    # Nomic BERT: BERT's three places, off by default
    "nomic_bert": {"embed_dropout": ("hidden_dropout_prob", 0.0),
                   "attn_dropout": ("attention_probs_dropout_prob", 0.0),
                   "resid_dropout": ("hidden_dropout_prob", 0.0)},
    # BART and its kin: ``dropout`` on the (normalised) embeddings and after every attention
    # and fc2, ``attention_dropout`` on the probabilities (self and cross), and
    # ``activation_dropout`` after the MLP's activation; the HF class defaults per type
    **{t: {"embed_dropout": ("dropout", d), "attn_dropout": ("attention_dropout", a),
           "resid_dropout": ("dropout", d), "mlp_dropout": ("activation_dropout", 0.0)}
       for t, d, a in (("bart", 0.1, 0.0), ("mbart", 0.1, 0.0), ("marian", 0.1, 0.0),
                       ("pegasus", 0.1, 0.0), ("m2m_100", 0.1, 0.1), ("whisper", 0.0, 0.0))},
})
_DROPOUT.update({
    # DistilBERT: ``dropout`` on the embeddings and after the MLP only (resid_dropout_at),
    # ``attention_dropout`` on the probabilities
    "distilbert": {"embed_dropout": ("dropout", 0.1), "attn_dropout": ("attention_dropout", 0.1),
                   "resid_dropout": ("dropout", 0.1)},
    # ALBERT: BERT's places less the MLP output's (its ``dropout`` is built, never run)
    "albert": {"embed_dropout": ("hidden_dropout_prob", 0.0),
               "attn_dropout": ("attention_probs_dropout_prob", 0.0),
               "resid_dropout": ("hidden_dropout_prob", 0.0)},
    # ESM: BERT's places less the embeddings' (HF leaves that line commented out); its
    # token_dropout is a rescaling of masked tokens, not random dropout
    "esm": {"attn_dropout": ("attention_probs_dropout_prob", 0.1),
            "resid_dropout": ("hidden_dropout_prob", 0.1)},
    # ModernBERT: ``embedding_dropout`` after the embedding norm, ``attention_dropout`` on the
    # probabilities and after Wo (resid_dropout_at "attn"), ``mlp_dropout`` on the gated product
    "modernbert": {"embed_dropout": ("embedding_dropout", 0.0),
                   "attn_dropout": ("attention_dropout", 0.0),
                   "resid_dropout": ("attention_dropout", 0.0),
                   "mlp_dropout": ("mlp_dropout", 0.0)},
})

def _longformer(f):
    """Longformer (Beltagy et al. 2020, arXiv:2004.05150; HF LongformerModel): RoBERTa's
    blocks with sliding-window attention, w = attention_window / 2 keys either side, run as
    HF's overlapping chunks (executed FLOPs: ``ops.sliding_chunk_pairs``; model FLOPs: the
    attended pairs), and per block separate global q/k/v projections (``global_qkv``) that
    run for the tokens with global attention (``Workload.global_tokens``, default none: the
    base model, masked LM and token classifier; the sequence classifier gives the first
    token global attention, ``components.global_attention``). Refused: per-layer windows
    that differ.

    HF pads any sequence to a multiple of attention_window: the embeddings and every block
    run the padded length (``Op.pad_to``), the heads the unpadded one."""
    out = _bert(f, roberta=True)
    out["vocab_size"] = f.int("vocab_size", 30522)
    n, window = out["n_layers"], f.get("attention_window", 512)
    windows = window if isinstance(window, list) else [window] * n
    if len(windows) != n or any(isinstance(x, bool) or not isinstance(x, int) or x <= 0
                                or x % 2 for x in windows):
        raise ConfigError(f"{f.where}: field 'attention_window' ({_show(window)}) must be a "
                          f"positive even integer or a list of {n} of them")
    if len(set(windows)) > 1:
        raise ConfigError(f"{f.where}: field 'attention_window' ({_show(window)}): windows "
                          "that differ between layers are not modelled")
    out.update(sliding_window=windows[0] // 2, sliding_chunks=True, global_qkv=True)
    return _with_head(f, out, "longformer")


ENCODER_CONVERTERS: dict[str, Callable[[_Fields], dict[str, Any]]] = {
    "xlm-roberta": _bert_alias("xlm-roberta"), "camembert": _bert_alias("camembert"),
    "distilbert": _distilbert, "electra": _electra, "albert": _albert, "mpnet": _mpnet,
    "modernbert": _modernbert, "esm": _esm,
    "mbart": _mbart, "marian": _marian, "pegasus": _pegasus, "m2m_100": _m2m_100,
    "mt5": _mt5, "umt5": lambda f: _mt5(f, umt5=True), "whisper": _whisper,
    "deberta-v2": _deberta_v2, "nomic_bert": _nomic_bert, "longformer": _longformer,
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


# --- multimodal configs (issue 12 item 3): vision towers and projectors, image tokens --------
# Each vision-language type reads its language model from ``text_config`` (the converters
# above) and sizes its vision tower and projector from ``vision_config`` exactly as the HF
# ``*ForConditionalGeneration`` class builds them (transformers 5.x). The tower's parameters
# are one params-only op (``vision``: weights, gradients and optimizer states; its own FLOPs
# and activations are not modelled); the language model sees ``image_tokens`` per image.
# A sub-config given as a dict takes its class's defaults (``_VISION_DEFAULTS``); an absent
# one the composite class's ``init_kwargs`` (``_VLM``), as HF's SubConfigSpec does.
#
# Image tokens per image (``--images N``; what the processor inserts into the prompt):
#   llava, llava_next  (image_size / patch_size)^2 (+ 1: CLIP's class token; - 1 with
#                      vision_feature_select_strategy "default": 576 for CLIP-L/336);
#                      llava_next: the base image plus its anyres tiles (image_grid_pinpoints:
#                      ModelConfig.image_hw_tokens, as LlavaNextProcessor counts them; needs
#                      --image-size)
#   paligemma          (image_size / patch_size)^2 (256 at 224 px)
#   gemma3             mm_tokens_per_image (256)
#   idefics3, smolvlm  (image_size / patch_size)^2 / scale_factor^2 per tile (N counts tiles)
#   mistral3 (pixtral) (image_size / patch / merge)^2 + one [IMG_BREAK]/[IMG_END] per row,
#                      at the config's image_size
#   internvl           (image_size / patch_size)^2 x downsample_ratio^2 per tile (256 at
#                      448 px, patch 14, ratio 0.5)
#   qwen2_vl, qwen2_5_vl, qwen3_vl(_moe)  round(P / (patch_size x spatial_merge_size))^2 for
#                      a P x P image (``--image-size P``), the area clamped into
#                      Qwen2VLImageProcessor's default [min_pixels 3136, max_pixels 1,003,520]
#                      as its smart_resize does (a checkpoint's preprocessor_config.json may
#                      set others: Qwen2-VL-7B-Instruct's max_pixels is 12,845,056)
_VISION_DEFAULTS: dict[str, dict[str, Any]] = {
    "clip_vision_model": dict(hidden_size=768, intermediate_size=3072, num_hidden_layers=12,
                              num_channels=3, image_size=224, patch_size=32),
    "siglip_vision_model": dict(hidden_size=768, intermediate_size=3072, num_hidden_layers=12,
                                num_channels=3, image_size=224, patch_size=16,
                                vision_use_head=True),
    "idefics3_vision": dict(hidden_size=1152, intermediate_size=3072, num_hidden_layers=12,
                            num_channels=3, image_size=224, patch_size=32),
    "smolvlm_vision": dict(hidden_size=1152, intermediate_size=3072, num_hidden_layers=12,
                           num_channels=3, image_size=224, patch_size=32),
    "pixtral": dict(hidden_size=1024, intermediate_size=4096, num_hidden_layers=24,
                    num_channels=3, image_size=1024, patch_size=16),
    "internvl_vision": dict(hidden_size=1024, intermediate_size=4096, num_hidden_layers=24,
                            num_channels=3, image_size=448, patch_size=14, attention_bias=False,
                            use_qk_norm=False, layer_scale_init_value=0.1,
                            use_absolute_position_embeddings=True, use_mean_pooling=True),
    "qwen2_vl_vision": dict(depth=32, embed_dim=1280, hidden_size=3584, mlp_ratio=4, in_channels=3,
                     patch_size=14, spatial_merge_size=2, temporal_patch_size=2),
    "qwen2_5_vl_vision": dict(depth=32, hidden_size=3584, intermediate_size=3420, in_channels=3,
                       patch_size=14, spatial_merge_size=2, temporal_patch_size=2,
                       out_hidden_size=3584),
    "qwen3_vl_vision": dict(depth=27, hidden_size=1152, intermediate_size=4304, in_channels=3,
                     patch_size=16, spatial_merge_size=2, temporal_patch_size=2,
                     out_hidden_size=3584, num_position_embeddings=2304,
                     deepstack_visual_indexes=[8, 16, 24]),
}
_VISION_DEFAULTS["qwen3_vl_moe_vision"] = _VISION_DEFAULTS["qwen3_vl_vision"]
_CLIP_LLAVA = dict(model_type="clip_vision_model", hidden_size=1024, intermediate_size=4096,
                   patch_size=14, image_size=336, num_hidden_layers=24)
#: model_type -> (vision model_type when vision_config has none, init_kwargs when absent,
#:               text model_type when text_config has none)
_VLM = {
    "llava": ("clip_vision_model", _CLIP_LLAVA, "llama"),
    "llava_next": ("clip_vision_model", _CLIP_LLAVA, "llama"),
    "paligemma": ("siglip_vision_model", dict(
        hidden_size=1152, intermediate_size=4096, patch_size=14, image_size=224,
        num_hidden_layers=27, vision_use_head=False), "gemma"),
    "gemma3": ("siglip_vision_model", {}, "gemma3_text"),
    "idefics3": ("idefics3_vision", {}, "llama"),
    "smolvlm": ("smolvlm_vision", {}, "llama"),
    "mistral3": ("pixtral", dict(hidden_size=1024, intermediate_size=4096, patch_size=14,
                                 image_size=1540, num_hidden_layers=24), "mistral"),
    "internvl": ("internvl_vision", {}, "qwen2"),
    "qwen2_vl": ("qwen2_vl_vision", {}, ""), "qwen2_5_vl": ("qwen2_5_vl_vision", {}, ""),
    "qwen3_vl": ("qwen3_vl_vision", {}, ""), "qwen3_vl_moe": ("qwen3_vl_moe_vision", {}, ""),
}


def _sub(f: _Fields, key: str, kind: str, absent: dict[str, Any]) -> _Fields:
    """A sub-config with its class defaults filled in (``absent`` when the key is missing)."""
    sub = f.raw.get(key)
    if sub is None:
        sub = absent
    if not isinstance(sub, dict):
        raise ConfigError(f"{f.where}: field {key!r} ({_show(sub)}) must be an object")
    kind = sub.get("model_type") or kind
    if kind not in _VISION_DEFAULTS:
        raise ConfigError(f"{f.where}: {key}.model_type ({_show(kind)}) is not a vision tower "
                          f"txcalc sizes ({', '.join(sorted(_VISION_DEFAULTS))})")
    return _Fields(_VISION_DEFAULTS[kind] | {k: v for k, v in sub.items() if v is not None},
                   f"{f.where} ({key})")


def _side(v: _Fields, key: str) -> int:
    """image_size / patch_size: an int or a square [h, w] (InternVL, Pixtral)."""
    x = v.get(key)
    if isinstance(x, (list, tuple)) and len(x) == 2 and x[0] == x[1]:
        return _positive(v, key, x[0])
    return v.int(key)


def _positive(v: _Fields, key: str, x: Any) -> int:
    if isinstance(x, bool) or not isinstance(x, int) or x <= 0:
        raise ConfigError(f"{v.where}: field {key!r} ({_show(x)}) must be a positive integer")
    return x


def _vit_layers(L: int, D: int, F: int, *, bias: bool = True, gated: bool = False,
                norm: int = 2) -> int:
    """L pre-norm ViT blocks: q, k, v, o (D x D), an MLP (D x F and back; gated: 3 matrices),
    two norms of ``norm`` x D parameters each."""
    attn = 4 * D * D + (4 * D if bias else 0)
    mlp = (3 if gated else 2) * D * F + ((2 * F + D) if gated else F + D) * bias
    return L * (attn + mlp + 2 * norm * D)


def _vision_feature_layers(f: _Fields, default: int) -> int:
    layers = f.get("vision_feature_layer", default)
    return len(layers) if isinstance(layers, list) else 1


def _vision_parts(f: _Fields, model_type: str, text_d: int) -> tuple[int, int]:
    """(vision tower + projector parameters, LM tokens per image) of a VLM config."""
    kind, absent, _ = _VLM[model_type]
    v = _sub(f, "vision_config", kind, absent)
    vt = v.raw.get("model_type") or kind
    if vt.startswith("qwen"):  # dynamic resolution: (patch x merge) pixels per token side
        return _qwen_vision(v, vt), 0
    D, F, L = v.int("hidden_size"), v.int("intermediate_size"), v.int("num_hidden_layers")
    C, P, S = v.int("num_channels"), _side(v, "patch_size"), _side(v, "image_size")
    n = (S // P) ** 2  # patches per image
    if vt == "clip_vision_model":  # class token, bias-free patch conv, pre and post LayerNorm
        tower = D + C * P * P * D + (n + 1) * D + 2 * D + _vit_layers(L, D, F) + 2 * D
    elif vt in ("siglip_vision_model", "idefics3_vision", "smolvlm_vision"):
        tower = C * P * P * D + D + n * D + _vit_layers(L, D, F) + 2 * D
        if vt == "siglip_vision_model" and v.bool("vision_use_head", True):
            # multi-head attention pooling: probe, in_proj (3D x D), out_proj, norm, MLP
            tower += D + 3 * D * D + 3 * D + D * D + D + 2 * D + 2 * D * F + F + D
    elif vt == "pixtral":  # RMSNorms, bias-free attention and gated MLP
        tower = C * P * P * D + D + _vit_layers(L, D, F, bias=False, gated=True, norm=1)
    else:  # internvl_vision: class token, absolute positions, layer scales
        bias = v.bool("attention_bias", False)
        tower = D + C * P * P * D + D
        if v.bool("use_absolute_position_embeddings", True):
            tower += (n + 1) * D
        # two LayerNorms and two layer-scale vectors (built whatever layer_scale_init_value)
        per = 3 * D * D + (3 * D if bias else 0) + D * D + D + 2 * D * F + F + D + 6 * D
        per += 2 * D if v.get("use_qk_norm", False) else 0
        tower += L * per
        if not v.bool("use_mean_pooling", True):
            tower += 2 * D
    T = text_d
    if model_type in ("llava", "llava_next"):
        b = f.bool("multimodal_projector_bias", True)
        din = D * _vision_feature_layers(f, -2)
        proj = din * T + T * T + (2 * T if b else 0)
        proj += T if model_type == "llava_next" else 0  # image_newline
        # the tower's rows (a class token with CLIP), less the first with "default" (HF drops
        # it whatever it is: a SigLIP tower loses a patch)
        strategy = f.get("vision_feature_select_strategy", "default")
        return tower + proj, n + (vt == "clip_vision_model") - (strategy == "default")
    if model_type == "paligemma":
        pd = f.int("projection_dim", 2048)
        return tower + D * pd + pd, n
    if model_type == "gemma3":  # mm_input_projection_weight and a Gemma RMSNorm on the tower
        return tower + D * T + D, f.int("mm_tokens_per_image", 256)
    if model_type in ("idefics3", "smolvlm"):  # pixel shuffle by scale_factor, one Linear
        s = f.int("scale_factor", 2)
        return tower + D * s * s * T, n // (s * s)
    if model_type == "mistral3":
        m = f.int("spatial_merge_size", 2)
        b = f.bool("multimodal_projector_bias", False)
        din = D * _vision_feature_layers(f, -1)
        proj = din + din * m * m * din + din * T + T * T + (2 * T if b else 0)
        return tower + proj, (S // P // m) ** 2 + S // P // m  # + one [IMG_BREAK] per row
    # internvl: pixel shuffle by downsample_ratio, LayerNorm, two Linears
    r = f.get("downsample_ratio", 0.5)
    k = round(1 / float(r)) ** 2
    din = D * k  # HF's InternVL projector reads one feature layer's width
    proj = 2 * din + din * T + T + T * T + T
    return tower + proj, n // k  # the class token dropped, then the pixel shuffle


def _qwen_vision(v: _Fields, vt: str) -> int:
    """Qwen-VL towers: a Conv3d patch embedding over temporal_patch_size frames, ``depth``
    blocks, and a patch merger (spatial_merge_size^2 patches -> one LM token)."""
    C, P, t, m = (v.int("in_channels"), v.int("patch_size"), v.int("temporal_patch_size"),
                  v.int("spatial_merge_size"))
    L = v.int("depth")
    if vt == "qwen2_vl_vision":  # LayerNorm, fused qkv with bias, GELU MLP of mlp_ratio x E
        E = v.int("embed_dim")
        F = int(E * float(v.get("mlp_ratio", 4)))
        out, H = v.int("hidden_size"), E * m * m
        return (C * t * P * P * E + _vit_layers(L, E, F) + 2 * E + H * H + H + H * out + out)
    E, F, out = v.int("hidden_size"), v.int("intermediate_size"), v.int("out_hidden_size")
    H = E * m * m
    if vt == "qwen2_5_vl_vision":  # RMSNorm, gated MLP with biases
        return (C * t * P * P * E + _vit_layers(L, E, F, gated=True, norm=1) + E
                + H * H + H + H * out + out)
    # qwen3_vl: biased patch conv, learned positions, deepstack mergers (post-shuffle norms)
    deep = v.get("deepstack_visual_indexes", [8, 16, 24])
    merger = H * H + H + H * out + out
    return (C * t * P * P * E + E + v.int("num_position_embeddings") * E
            + _vit_layers(L, E, F) + 2 * E + merger
            + (len(deep) if isinstance(deep, list) else 0) * (2 * H + merger))


def _vlm(model_type: str):
    """Converter of a vision-language type: its language model (``text_config``) plus the
    vision tower's parameters and the image tokens per image."""
    def convert(f: _Fields) -> dict[str, Any]:
        text = f.get("text_config", {})
        if not isinstance(text, dict):
            raise ConfigError(f"{f.where}: field 'text_config' ({_show(text)}) must be an "
                              "object")
        text_type = text.get("model_type") or _VLM[model_type][2]
        if text_type not in CONVERTERS or text_type in _VLM:
            raise ConfigError(f"{f.where}: text_config.model_type ({_show(text_type)}) is not "
                              "a language model txcalc converts")
        sub = _Fields(_resolve_aliases(text_type, text), f"{f.where} (text_config)")
        try:
            out = CONVERTERS[text_type](sub) | _dropouts(sub, text_type)
        finally:
            f.problems += sub.problems
        default_tie = {"llava": False, "llava_next": False, "idefics3": False,
                       "smolvlm": False}.get(model_type, True)
        tie = f.bool("tie_word_embeddings", default_tie)
        if model_type in ("llava", "llava_next"):  # LlavaConfig: a tied text_config ties too
            tie = tie or sub.bool("tie_word_embeddings", False)
        return out | {"tie_embeddings": tie}
    return convert


def _vision_fields(f: _Fields, model_type: str, fields: dict[str, Any]) -> dict[str, Any]:
    """vision_params and image_tokens of a VLM config (from_hf_dict's last step)."""
    if model_type not in _VLM:
        return {}
    params, tokens = _vision_parts(f, model_type, fields["d_model"])
    out = {"vision_params": params, "image_tokens": tokens}
    if not tokens:  # Qwen-VL: Qwen2VLImageProcessor's defaults clamp the resized area
        v = _sub(f, "vision_config", _VLM[model_type][0], {})
        out["image_token_px"] = v.int("patch_size") * v.int("spatial_merge_size")
        out |= {"image_min_px": 56 * 56, "image_max_px": 28 * 28 * 1280}
    if model_type == "llava_next":  # anyres: the tiles of image_grid_pinpoints
        v = _sub(f, "vision_config", _VLM[model_type][0], _VLM[model_type][1])
        grid = f.get("image_grid_pinpoints", [[336, 672], [672, 336], [672, 672], [1008, 336],
                                              [336, 1008]])
        if not isinstance(grid, list) or not grid or not all(
                isinstance(x, list) and len(x) == 2 for x in grid):
            raise ConfigError(f"{f.where}: field 'image_grid_pinpoints' ({_show(grid)}) must "
                              "be a list of [height, width] pairs")
        out |= {"image_grid": tuple(tuple(x) for x in grid),
                "image_tile_px": _side(v, "image_size"), "image_token_px": _side(v, "patch_size")}
    return out


VLM_CONVERTERS: dict[str, Callable[[_Fields], dict[str, Any]]] = {
    t: _vlm(t) for t in ("llava", "llava_next", "paligemma", "idefics3", "smolvlm", "mistral3",
                         "internvl")}
# --- end of the multimodal block -----------------------------------------------------------
CONVERTERS.update(VLM_CONVERTERS)


# --- Mllama (Llama 3.2 Vision): gated cross-attention layers and its vision tower -------------
# MllamaTextConfig / MllamaVisionConfig defaults (transformers 5.x). The text model is Llama's
# with the blocks at ``cross_attention_layers`` replaced by gated cross-attention blocks
# (components.gated_cross_block), head width always hidden_size // heads (HF ignores
# ``head_dim``), a token table of vocab_size + 8 rows and an untied lm_head of vocab_size
# (HF cannot tie them: their shapes differ). Images: each puts one <|image|> token in the prompt
# and max_num_tiles x ((image_size / patch_size)^2 + 1) vision-state rows before the
# cross-attention layers (every tile slot runs, padded ones masked).
_MLLAMA_TEXT = dict(vocab_size=128256, hidden_size=4096, num_hidden_layers=40,
                    num_attention_heads=32, num_key_value_heads=8, intermediate_size=14336,
                    max_position_embeddings=131072)
_MLLAMA_CROSS = [3, 8, 13, 18, 23, 28, 33, 38]
_MLLAMA_VISION = dict(hidden_size=1280, num_hidden_layers=32, num_global_layers=8,
                      num_channels=3, intermediate_size=5120, vision_output_dim=7680,
                      image_size=448, patch_size=14, max_num_tiles=4,
                      supported_aspect_ratios=[[1, 1], [1, 2], [1, 3], [1, 4], [2, 1], [2, 2],
                                               [3, 1], [4, 1]])


def _mllama_text(f):  # MllamaForCausalLM
    out = _read_decoder(f, _MLLAMA_TEXT)
    n, d, h = out["n_layers"], out["d_model"], out["n_heads"]
    cross = tuple(sorted({i for i in _layer_list(f, "cross_attention_layers", _MLLAMA_CROSS)
                          if 0 <= i < n}))  # HF builds a cross block where index == layer
    return out | {"head_dim": d // h if h > 0 else 0, "cross_layers": cross,
                  "embed_extra_rows": 8, "tie_embeddings": False}


def _mllama(f):  # MllamaForConditionalGeneration: vision tower, projector, language model
    out = _text_part(f, "mllama_text_model")
    sub = f.get("vision_config", {})
    if not isinstance(sub, dict):
        raise ConfigError(f"{f.where}: field 'vision_config' ({_show(sub)}) must be an object")
    v = _Fields(_MLLAMA_VISION | {k: x for k, x in sub.items() if x is not None},
                f"{f.where} (vision_config)")
    D, F, C = v.int("hidden_size"), v.int("intermediate_size"), v.int("num_channels")
    P, S, T = _side(v, "patch_size"), _side(v, "image_size"), v.int("max_num_tiles")
    ratios = v.get("supported_aspect_ratios")
    if not isinstance(ratios, list) or not ratios:
        raise ConfigError(f"{v.where}: field 'supported_aspect_ratios' ({_show(ratios)}) must "
                          "be a list of [w, h] tile layouts")
    n = (S // P) ** 2 + 1  # patches and the class token, per tile
    R = len(ratios) + 1  # aspect-ratio ids (0: padding)
    layer = 4 * D * D + 2 * D * F + F + D + 4 * D  # bias-free attention, biased MLP, 2 LNs
    tower = (C * P * P * D + D  # patch conv (no bias), class embedding
             + 1 + n * D + R * T * n * D  # gated position and tile-position embeddings
             + 2 * (R * T * D + 1)  # pre- and post-tile aspect-ratio embeddings and gates
             + 4 * D  # layernorm_pre, layernorm_post
             + v.int("num_hidden_layers") * layer
             + v.int("num_global_layers") * (layer + 2))  # the global layers' two gates
    proj = v.int("vision_output_dim") * out["d_model"] + out["d_model"]
    return out | {"vision_params": tower + proj, "image_tokens": 1, "image_states": T * n}


CONVERTERS.update({"mllama_text_model": _mllama_text, "mllama": _mllama})
_DROPOUT["mllama_text_model"] = {"attn_dropout": ("dropout", 0.0)}
# --- end of the Mllama block ------------------------------------------------------------------


# --- Gemma 3n's text part (Gemma3nTextConfig defaults, transformers 5.x) ------------------------
_GEMMA3N = dict(vocab_size=262400, hidden_size=2048, intermediate_size=16384, num_hidden_layers=35,
                num_attention_heads=8, num_key_value_heads=2, head_dim=256,
                max_position_embeddings=32768, attention_bias=False, tie=True,
                act_key="hidden_activation", act="gelu_pytorch_tanh")


def _gemma3n_text(f):  # Gemma3nForCausalLM
    """Gemma 3n text: Gemma 3's sandwich norms and per-head q/k RMSNorm (v too, no scale),
    four local layers (window 512) to one global, AltUp over ``altup_num_inputs`` streams,
    LAuReL of ``laurel_rank``, per-layer embeddings of ``hidden_size_per_layer_input``, an MLP
    width per layer, and the last ``num_kv_shared_layers`` layers reusing the keys and values
    of the last earlier layer of their kind."""
    text = {k: v for k, v in f.raw.items() if k != "intermediate_size"}
    widths = f.get("intermediate_size", _GEMMA3N["intermediate_size"])
    sub = _Fields(text, f.where)
    try:
        out = _read_decoder(sub, _GEMMA3N | {"intermediate_size": 1}, kv_null_ok=False)
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
    types = _layer_types(f, n, ["full_attention" if (i + 1) % 5 == 0 else "sliding_attention"
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
    return out | _sliding(f, types, 512)


CONVERTERS["gemma3n_text"] = _gemma3n_text
_DROPOUT["gemma3n_text"] = {"attn_dropout": ("attention_dropout", 0.0)}
_POSITIVE = _POSITIVE | {"altup_num_inputs", "laurel_rank", "hidden_size_per_layer_input",
                         "vocab_size_per_layer_input"}
# --- end of the Gemma 3n block ----------------------------------------------------------------

# --- more decoder types: aliases and small converters over the structures above ---------------
# Each states what of its HF class changes the parameter and FLOP structure; multipliers and
# scalings (Granite's embedding/residual/attention/logit multipliers) are elementwise work that
# neither count sees. Rotary is elementwise too: partial rotary (Phi, StableLM, CodeGen's
# rotary_dim) and layers without rotary (SmolLM3's NoPE layers) change no parameter or matmul.


def _layer_pattern(n_layers: int, window: int, sliding: list[bool]) -> dict[str, Any]:
    """Window fields for a per-layer sliding pattern: every layer, or the listed ones."""
    layers = tuple(i for i, s in enumerate(sliding) if s)
    if not window or not layers:
        return {}
    if len(layers) == n_layers:
        return {"sliding_window": window}
    return {"sliding_window": window, "sliding_layers": layers}


def _sliding_flags(f: _Fields, n_layers: int) -> list[bool] | None:
    """HF ``layer_types`` as a list of "slides" flags, None when the field is absent."""
    types = f.get("layer_types")
    if types is None:
        return None
    if not isinstance(types, list) or len(types) != n_layers or not all(
            t in ("sliding_attention", "full_attention") for t in types):
        raise ConfigError(f"{f.where}: field 'layer_types' ({types!r:.200}) must list "
                          f"'sliding_attention' or 'full_attention' once for each of the "
                          f"{n_layers} layers")
    return [t == "sliding_attention" for t in types]


def _window(f: _Fields, default: int | None) -> int:
    """``sliding_window`` (an explicit null: none), 0 when off."""
    if "sliding_window" in f.raw and f.raw["sliding_window"] is None:
        return 0
    return f.int("sliding_window", default) if f.get("sliding_window", default) else 0


def _granite(f):  # Llama plus four scalar multipliers (elementwise)
    return _llama_like(f, mlp_bias=True)


def _granitemoe(f):  # Llama attention (o_proj biased with attention_bias too), Mixtral-style MoE
    out = _llama_like(f)
    return out | {"n_experts": f.int("num_local_experts", 8),
                  "top_k": f.int("num_experts_per_tok", 2), "moe_d_ff": out["d_ff"]}


def _smollm3(f):
    """Llama with NoPE layers (``no_rope_layers``: elementwise only) and an optional window on
    the layers ``layer_types`` marks, when ``use_sliding_window`` is set."""
    out = _llama_like(f, tie=True, max_pos=32768, kv_heads=4, mlp_bias=True)
    n = out["n_layers"]
    window = _window(f, None)
    if not (f.bool("use_sliding_window", False) and window):
        return out
    sliding = _sliding_flags(f, n)
    if sliding is None:  # HF: NoPE layers slide (no_rope_layers[i] == 0)
        nope = f.get("no_rope_layers")
        if nope is None:
            step = f.int("no_rope_layer_interval", 4)
            nope = [int((i + 1) % step != 0) for i in range(n)]
        if not isinstance(nope, list) or len(nope) < n:
            raise ConfigError(f"{f.where}: field 'no_rope_layers' ({nope!r:.200}) must give a "
                              f"flag for each of the {n} layers")
        sliding = [not nope[i] for i in range(n)]
    return out | _layer_pattern(n, window, sliding)


def _ministral(f):
    """Mistral with ``layer_types`` (default: every layer slides when windowed). HF's class
    default head_dim (None) builds no model: the field is required."""
    f.int("head_dim")
    out = _llama_like(f, max_pos=131072, bias_key=None, kv_heads=8)
    n, window = out["n_layers"], _window(f, 4096)
    sliding = _sliding_flags(f, n)
    if sliding is None:
        sliding = [bool(window)] * n
    return out | _layer_pattern(n, window, sliding)


def _ministral3(f):  # Mistral 3: head_dim 128 by default; a window, when set, on every layer
    out = _llama_like(f, max_pos=262144, bias_key=None, kv_heads=8, head_dim=128)
    window = _window(f, None)
    return out | ({"sliding_window": window} if window else {})


def _ernie4_5(f):  # ``use_bias`` on every projection, attention and MLP
    out = _llama_like(f, tie=True, max_pos=131072, bias_key="use_bias", kv_heads=2, head_dim=128)
    return out | {"mlp_bias": out["qkv_bias"]}


def _seed_oss(f):  # q/k/v biased by attention_bias (default true), o by attention_out_bias
    out = _llama_like(f, max_pos=524288, bias_default=True, kv_heads=8, head_dim=128,
                      mlp_bias=True)
    return out | {"out_bias": f.bool("attention_out_bias", False)}


def _hunyuan_v1_dense(f):
    """Llama with per-head RMSNorm on q and k. HF's class default head_dim (None) builds no
    model (the attention scale is None ** -0.5): the field is required."""
    f.int("head_dim")
    return _llama_like(f) | {"qk_norm": "head"}


def _glm4(f):
    """GLM-4: q/k/v biased (attention_bias, default true), o never; a fused gate_up_proj (the
    same weights as gate and up); a norm after attention and after the MLP as well as before
    each (Gemma 2's sandwich)."""
    out = _llama_like(f, max_pos=131072, bias_default=True, kv_heads=2, head_dim=128)
    return out | {"out_bias": False, "norm_position": "sandwich"}


def _glm4_moe(f):
    """GLM-4.5: DeepSeek-V3's MoE (a sigmoid router whose correction bias is a buffer, shared
    experts fused into one MLP of n_shared x moe width, dense first layers) on GQA attention;
    q/k/v biased by attention_bias, o never; optional per-head q/k RMSNorm (use_qk_norm)."""
    out = _llama_like(f, max_pos=131072, kv_heads=8)
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


def _olmoe(f):
    """OLMo-2-style q/k RMSNorm over all heads, Mixtral-style MoE without shared experts. HF
    sizes the q/k norms by hidden_size // num_attention_heads: a different head_dim builds a
    model whose forward fails."""
    out = _llama_like(f, max_pos=4096) | {"qk_norm": "full"}
    if out["n_heads"] > 0 and out["head_dim"] != out["d_model"] // out["n_heads"]:
        raise ConfigError(f"{f.where}: field 'head_dim' ({out['head_dim']}) differs from "
                          f"hidden_size // num_attention_heads ({out['d_model'] // out['n_heads']}"
                          "): HF's OLMoE q/k norms then do not fit its projections")
    return out | {"n_experts": f.int("num_experts", 64), "top_k": f.int("num_experts_per_tok", 8),
                  "moe_d_ff": out["d_ff"]}


def _phimoe(f):
    """Phi-3.5-MoE: LayerNorms with bias, biased attention (attention_bias), Mixtral-style MoE,
    an optional lm_head bias and a window on every layer when ``sliding_window`` is set. Its
    router (sparsemixer) always picks two experts: ``num_experts_per_tok`` is not read."""
    out = _llama_like(f, max_pos=131072, kv_heads=8)
    window = _window(f, None)
    n_experts = f.int("num_local_experts", 16)
    if n_experts < 2:
        raise ConfigError(f"{f.where}: field 'num_local_experts' ({n_experts}): PhiMoE's router "
                          "always picks two experts, so HF sends every token twice through "
                          "one; txcalc needs at least 2 experts")
    return out | {"norm_type": "layernorm", "norm_bias": True, "n_experts": n_experts,
                  "top_k": 2, "moe_d_ff": out["d_ff"],
                  "lm_head_bias": f.bool("lm_head_bias", False)} | (
        {"sliding_window": window} if window else {})


def _minimax_m2(f):  # q/k RMSNorm over all heads, MoE whose correction bias is a buffer
    out = _llama_like(f, max_pos=196608, bias_key=None, kv_heads=8, head_dim=128)
    return out | {"qk_norm": "full", "n_experts": f.int("num_local_experts", 256),
                  "top_k": f.int("num_experts_per_tok", 8), "moe_d_ff": out["d_ff"]}


def _dbrx(f):
    """DBRX: bias-free LayerNorms and projections (a fused Wqkv: the same weights as q, k and
    v), GQA with ``attn_config.kv_n_heads`` KV heads, every layer a gated MoE
    (``ffn_config``: experts of width ffn_hidden_size, top moe_top_k); never tied."""
    sub = {}
    for key in ("attn_config", "ffn_config"):
        v = f.raw.get(key) or {}
        if not isinstance(v, dict):
            raise ConfigError(f"{f.where}: field {key!r} ({_show(v)}) must be an object")
        sub[key] = _Fields(v, f"{f.where} {key}")
    attn, ffn = sub["attn_config"], sub["ffn_config"]
    act = ffn.get("ffn_act_fn", {"name": "silu"})
    name = act.get("name", "silu") if isinstance(act, dict) else act
    if name not in _ACT or _ACT[name] not in _GATED:
        raise ConfigError(f"{f.where}: field 'ffn_config.ffn_act_fn' ({_show(act)}) is not a "
                          f"known gated activation ({', '.join(sorted(_GATED))})")
    d_ff = ffn.int("ffn_hidden_size", 3584)
    out = dict(n_layers=f.int("n_layers", 24), d_model=f.int("d_model", 2048),
               n_heads=f.int("n_heads", 16), n_kv_heads=attn.int("kv_n_heads", 1),
               vocab_size=f.int("vocab_size", 32000), d_ff=d_ff, moe_d_ff=d_ff,
               max_position=f.int("max_seq_len", 2048), activation=_GATED[_ACT[name]],
               norm_type="layernorm", norm_bias=False, pos_type="rotary",
               n_experts=ffn.int("moe_num_experts", 4), top_k=ffn.int("moe_top_k", 1),
               tie_embeddings=f.bool("tie_word_embeddings", False))
    f.problems += attn.problems + ffn.problems
    return out


def _codegen(f):  # GPT-J's block (one LayerNorm, parallel), fused bias-free qkv_proj
    return _gptj(f)


def _gpt_bigcode(f):
    """StarCoder: GPT-2 with multi-query attention (one K/V head, ``multi_query``)."""
    _no_cross_attention(f)
    d, h = f.int("n_embd", 768), f.int("n_head", 12)
    return dict(n_layers=f.int("n_layer", 12), d_model=d, n_heads=h,
                n_kv_heads=1 if f.bool("multi_query", True) else h,
                vocab_size=f.int("vocab_size", 50257), d_ff=f.int("n_inner", 4 * d),
                max_position=f.int("n_positions", 1024), pos_type="learned",
                activation=f.act("activation_function", "gelu_pytorch_tanh"), qkv_bias=True,
                out_bias=True, mlp_bias=True, tie_embeddings=f.bool("tie_word_embeddings", True))


def _gpt_neo(f):
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
    return out | _layer_pattern(n, f.int("window_size", 256), [k == "local" for k in kinds])


def _phi(f):
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


def _stablelm(f):
    """StableLM: Llama with LayerNorms (bias), q/k/v bias by use_qkv_bias, optional parallel
    block with one norm (use_parallel_residual)."""
    if f.bool("qk_layernorm", False):
        raise ConfigError(f"{f.where}: field 'qk_layernorm' (true): StableLM's separate "
                          "bias-free LayerNorm per head is not modelled")
    out = _llama_like(f, max_pos=4096, bias_key=None, kv_heads=32)
    parallel = f.bool("use_parallel_residual", False)
    return out | {"qkv_bias": f.bool("use_qkv_bias", False), "norm_type": "layernorm",
                  "norm_bias": True, "parallel_block": parallel, "parallel_norms": 1}


def _vl_text(convert: Callable[[_Fields], dict[str, Any]], inner_tie: bool = False):
    """The language model of a Qwen-VL config: ``text_config`` (or, in Qwen2-VL's older files,
    the text fields at the top level). ``tie_word_embeddings`` is read at the top level, as HF
    ties; ``inner_tie``: a true one inside text_config ties too (Qwen2-VL's compatibility rule).
    The vision tower is not counted: txcalc reports the language model."""
    def read(f: _Fields) -> dict[str, Any]:
        text = f.raw.get("text_config")
        if text is None:
            return convert(f)
        if not isinstance(text, dict):
            raise ConfigError(f"{f.where}: field 'text_config' ({_show(text)}) must be an object")
        inner = _Fields(text, f"{f.where} text_config")
        out = convert(inner)
        f.problems += inner.problems
        tie = f.bool("tie_word_embeddings", False) or (
            inner_tie and inner.bool("tie_word_embeddings", False))
        return out | {"tie_embeddings": tie}

    def language_model(f: _Fields) -> dict[str, Any]:
        model_type = f.raw.get("model_type")
        return read(f) | {"source": f"HF config.json ({model_type}: the language model and "
                                    "the vision tower's parameters)"}
    return language_model


def _qwen2_vl_text(f):
    """Qwen2-VL's text model: Qwen2 (q/k/v biased, o not) with its own defaults; a window
    only with use_sliding_window, on layer_types' layers, else on layers >= max_window_layers.
    Its attention ignores ``head_dim`` (always hidden_size // num_attention_heads)."""
    out = _llama_like(f, max_pos=32768, bias_key=None, kv_heads=8) | {"qkv_bias": True}
    out["head_dim"] = out["d_model"] // out["n_heads"] if out["n_heads"] > 0 else 0
    n = out["n_layers"]
    window = _window(f, 4096)
    if not (f.bool("use_sliding_window", False) and window):
        return out
    sliding = _sliding_flags(f, n)
    if sliding is None:
        mwl = f.int("max_window_layers", 80)
        sliding = [i >= mwl for i in range(n)]
    return out | _layer_pattern(n, window, sliding)


def _qwen3_vl_text(f):  # Qwen3 dense: per-head q/k RMSNorm
    return _llama_like(f, max_pos=128000, kv_heads=32, head_dim=128) | {"qk_norm": "head"}


def _qwen3_vl_moe_text(f):  # Qwen3-MoE's layout (decoder_sparse_step, mlp_only_layers)
    out = _llama_like(f, max_pos=128000, kv_heads=16) | {"qk_norm": "head"}
    n = out["n_layers"]
    only = f.get("mlp_only_layers", [])
    if not isinstance(only, list) or not all(_is_index(i) for i in only):
        raise ConfigError(f"{f.where}: field 'mlp_only_layers' ({only!r:.200}) must be a list "
                          "of layer indices")
    # num_experts is the alias of the stored num_local_experts (HF's attribute_map)
    key = "num_experts" if f.get("num_experts") is not None else "num_local_experts"
    return out | dict(n_experts=f.int(key, 60), top_k=f.int("num_experts_per_tok", 4),
                      moe_d_ff=f.int("moe_intermediate_size", 1408),
                      moe_every=f.int("decoder_sparse_step", 1),
                      dense_layers=tuple(sorted({i for i in only if 0 <= i < n})))


def _is_index(v) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


_MORE_CONVERTERS: dict[str, Callable[[_Fields], dict[str, Any]]] = {
    "granite": _granite, "granitemoe": _granitemoe, "smollm3": _smollm3,
    "ministral": _ministral, "ministral3": _ministral3, "ernie4_5": _ernie4_5,
    "seed_oss": _seed_oss, "hunyuan_v1_dense": _hunyuan_v1_dense, "glm4": _glm4,
    "glm4_moe": _glm4_moe, "olmoe": _olmoe, "phimoe": _phimoe, "minimax_m2": _minimax_m2,
    "dbrx": _dbrx, "codegen": _codegen, "gpt_bigcode": _gpt_bigcode, "gpt_neo": _gpt_neo, "phi": _phi,
    "stablelm": _stablelm,
    "qwen2_vl": _vl_text(_qwen2_vl_text, inner_tie=True),
    "qwen2_5_vl": _vl_text(_qwen2_vl_text, inner_tie=True),
    "qwen3_vl": _vl_text(_qwen3_vl_text), "qwen3_vl_moe": _vl_text(_qwen3_vl_moe_text),
}
CONVERTERS.update(_MORE_CONVERTERS)
_ALIASES.update({
    **{t: {"hidden_size": "n_embd", "max_position_embeddings": "n_positions",
           "num_attention_heads": "n_head", "num_hidden_layers": "n_layer"}
       for t in ("codegen", "gpt_bigcode")},
    "gpt_neo": {"num_attention_heads": "num_heads", "num_hidden_layers": "num_layers"},
    "dbrx": {"num_attention_heads": "n_heads", "hidden_size": "d_model",
             "num_hidden_layers": "n_layers", "max_position_embeddings": "max_seq_len"},
    "olmoe": {"num_local_experts": "num_experts"},
    "glm4_moe": {"num_local_experts": "n_routed_experts"},
    "minimax_m2": {"num_experts": "num_local_experts"},
})


# --- issue 12 part 1: Gemma 3, Llama 4, gpt-oss, OLMo 2/3, EXAONE 4, Cohere, Cohere 2 ------------
# Each reads every field with the default of its transformers 5.x configuration class, so a
# config.json that leaves a field out means what it means to HF.

def _read_decoder(f: _Fields, d: dict[str, Any], *, kv_null_ok: bool = True) -> dict[str, Any]:
    """Llama-shaped fields with the HF class defaults ``d`` (num_key_value_heads None: as many
    as query heads; head_dim None: hidden_size // heads; the modeling code reads an explicit
    ``head_dim`` where the class has none). ``kv_null_ok``: an explicit null KV count means
    num_attention_heads (the classes whose ``__post_init__`` says so)."""
    hidden = f.int("hidden_size", d["hidden_size"])
    heads = f.int("num_attention_heads", d["num_attention_heads"])
    kv_null = "num_key_value_heads" in f.raw and f.raw["num_key_value_heads"] is None
    if kv_null and not kv_null_ok:
        raise ConfigError(f"{f.where}: field 'num_key_value_heads' (null) must be an integer")
    kv = heads if kv_null else f.int("num_key_value_heads", d["num_key_value_heads"] or heads)
    bias = f.bool("attention_bias", d.get("attention_bias", False)) \
        if "attention_bias" in d else False
    return dict(
        n_layers=f.int("num_hidden_layers", d["num_hidden_layers"]), d_model=hidden,
        n_heads=heads, n_kv_heads=kv,
        head_dim=f.int("head_dim", d.get("head_dim") or (hidden // heads if heads > 0 else 0)),
        d_ff=f.int("intermediate_size", d["intermediate_size"]),
        vocab_size=f.int("vocab_size", d["vocab_size"]),
        max_position=f.int("max_position_embeddings", d["max_position_embeddings"]),
        qkv_bias=bias, out_bias=bias,
        activation=_GATED[f.act(d.get("act_key", "hidden_act"), d.get("act", "silu"))],
        norm_type="rmsnorm", pos_type="rotary",
        tie_embeddings=f.bool("tie_word_embeddings", d.get("tie", False)))


_LAYER_TYPES = ("sliding_attention", "full_attention", "chunked_attention")


def _layer_types(f: _Fields, n_layers: int, default: list[str]) -> list[str]:
    """HF ``layer_types`` (one entry per layer), or the class's default pattern."""
    types = f.get("layer_types")
    if types is None:
        return default
    if not isinstance(types, list) or len(types) != n_layers or not all(
            t in _LAYER_TYPES for t in types):
        raise ConfigError(f"{f.where}: field 'layer_types' ({_show(types)}) must list one of "
                          f"{', '.join(_LAYER_TYPES)} for each of the {n_layers} layers")
    return types


def _pattern_types(f: _Fields, n_layers: int, key: str, default: int) -> list[str]:
    """layer_types from an every-k-th-layer-is-global pattern (``sliding_window_pattern``)."""
    k = f.get(key, default)
    if isinstance(k, str) and k and set(k) <= {"L", "G"}:  # EXAONE 4's "LLLG" form
        return ["sliding_attention" if k[i % len(k)] == "L" else "full_attention"
                for i in range(n_layers)]
    if isinstance(k, bool) or not isinstance(k, int) or k <= 0:
        raise ConfigError(f"{f.where}: field {key!r} ({_show(k)}) must be a positive integer")
    return ["sliding_attention" if (i + 1) % k else "full_attention" for i in range(n_layers)]


def _nullable(f: _Fields, key: str, default: Any) -> Any:
    """The field's value, None when it is an explicit null, the class default when absent."""
    return f.raw[key] if key in f.raw else default


def _sliding(f: _Fields, types: list[str], default: int | None) -> dict[str, Any]:
    """Window fields for the layers typed sliding_attention (no window when it is null)."""
    if _nullable(f, "sliding_window", default) is None:
        return {}
    window = f.int("sliding_window", default)
    return _window_layout(window, [t == "sliding_attention" for t in types])


_GEMMA3 = dict(vocab_size=262208, hidden_size=2304, intermediate_size=9216, num_hidden_layers=26,
               num_attention_heads=8, num_key_value_heads=4, head_dim=256,
               max_position_embeddings=131072, attention_bias=False, tie=True,
               act_key="hidden_activation", act="gelu_pytorch_tanh")


def _gemma3_text(f):
    """Gemma 3 text (arXiv:2503.19786): Gemma 2's sandwich norms, per-head q/k RMSNorm, five
    local layers (window 4096) to one global; logit soft-capping changes no count."""
    if f.bool("use_bidirectional_attention", False):
        raise ConfigError(f"{f.where}: field 'use_bidirectional_attention' (true): a "
                          "bidirectional Gemma 3 (EmbeddingGemma) is not a causal decoder; "
                          "txcalc models the causal one")
    out = _read_decoder(f, _GEMMA3, kv_null_ok=False)
    n = out["n_layers"]
    types = _layer_types(f, n, _pattern_types(f, n, "sliding_window_pattern", 6))
    return out | {"qk_norm": "head", "norm_position": "sandwich"} | _sliding(f, types, 4096)


def _text_part(f: _Fields, text_type: str) -> dict[str, Any]:
    """The language model of a multimodal config: its ``text_config`` (class defaults when
    absent) read as ``text_type``."""
    text = f.get("text_config", {})
    if not isinstance(text, dict):
        raise ConfigError(f"{f.where}: field 'text_config' ({_show(text)}) must be an object")
    sub = _Fields(text, f"{f.where} (text_config)")
    try:
        out = CONVERTERS[text_type](sub) | _dropouts(sub, text_type)
    finally:
        f.problems += sub.problems
    return out


def _gemma3(f):  # Gemma3ForConditionalGeneration: tied unless the top level says otherwise
    tie = f.bool("tie_word_embeddings", True)
    return _text_part(f, "gemma3_text") | {"tie_embeddings": tie}


_LLAMA4 = dict(vocab_size=202048, hidden_size=5120, intermediate_size=8192, num_hidden_layers=48,
               num_attention_heads=40, num_key_value_heads=8, head_dim=128,
               max_position_embeddings=131072, attention_bias=False)


def _layer_list(f: _Fields, key: str, default: list[int]) -> list[int]:
    v = f.get(key, default)
    if not isinstance(v, list) or not all(isinstance(i, int) and not isinstance(i, bool)
                                          for i in v):
        raise ConfigError(f"{f.where}: field {key!r} ({_show(v)}) must be a list of integers")
    return v


def _llama4_text(f):
    """Llama 4 text: MoE layers (``moe_layers``, else every ``interleave_moe_layer_step``-th)
    with E experts of ``intermediate_size``, top-k routing and one shared expert of the same
    width; dense layers of ``intermediate_size_mlp``. NoPE layers (``no_rope_layers`` 0, else
    every 4th) attend globally; the others use rotary, chunked attention
    (``attention_chunk_size``) and, with ``use_qk_norm``, a parameter-free L2 q/k norm.
    FLOPs count the k routed experts per token; HF's eager Llama4TextMoe runs all E on every
    token (tests/test_hf_new_structures.py checks HF = txcalc + the unrouted experts)."""
    out = _read_decoder(f, _LLAMA4)
    n = out["n_layers"]
    step = f.int("interleave_moe_layer_step", 1)
    if step <= 0:
        raise ConfigError(f"{f.where}: field 'interleave_moe_layer_step' ({step}) must be "
                          "positive")
    moe = set(_layer_list(f, "moe_layers", list(range(step - 1, n, step))))
    flags = f.get("no_rope_layers") or [int((i + 1) % f.int("no_rope_layer_interval", 4) != 0)
                                        for i in range(n)]
    if not isinstance(flags, list) or len(flags) < n:
        raise ConfigError(f"{f.where}: field 'no_rope_layers' ({_show(flags)}) must give a "
                          f"0/1 flag for each of the {n} layers")
    nope = tuple(i for i in range(n) if not flags[i])
    chunk = _nullable(f, "attention_chunk_size", 8192)
    types = _layer_types(f, n, ["chunked_attention" if flags[i] and chunk is not None
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


def _llama4(f):  # Llama4ForConditionalGeneration: text_config's tie_word_embeddings decides
    return _text_part(f, "llama4_text")


_GPT_OSS = dict(vocab_size=201088, hidden_size=2880, intermediate_size=2880,
                num_hidden_layers=36, num_attention_heads=64, num_key_value_heads=8, head_dim=64,
                max_position_embeddings=131072, attention_bias=True)


def _gpt_oss(f):
    """gpt-oss: biased attention with a learned sink per head, alternating window-128 and
    global layers, MoE in every layer (biased experts, biased router, top-4 of 128)."""
    out = _read_decoder(f, _GPT_OSS)
    n = out["n_layers"]
    types = _layer_types(f, n, ["sliding_attention" if (i + 1) % 2 else "full_attention"
                                for i in range(n)])
    d_ff = out["d_ff"]
    return out | _sliding(f, types, 128) | dict(
        attn_sinks=True, n_experts=f.int("num_local_experts", 128),
        top_k=f.int("num_experts_per_tok", 4), moe_d_ff=d_ff, router_bias=True,
        expert_bias=True)


_OLMO2 = dict(vocab_size=50304, hidden_size=4096, intermediate_size=11008, num_hidden_layers=32,
              num_attention_heads=32, num_key_value_heads=None, max_position_embeddings=2048,
              attention_bias=False)


def _olmo2(f):
    """OLMo 2 (arXiv:2501.00656): RMSNorm on each sub-block's output, none on its input, and
    RMSNorm over all query (key) heads together."""
    return _read_decoder(f, _OLMO2) | {"qk_norm": "full", "norm_position": "post_sub"}


def _olmo3(f):  # OLMo 2 with three window-4096 layers to one global
    out = _olmo2(f)
    n = out["n_layers"]
    types = _layer_types(f, n, ["sliding_attention" if (i + 1) % 4 else "full_attention"
                                for i in range(n)])
    return out | _sliding(f, types, 4096)


_EXAONE4 = dict(vocab_size=102400, hidden_size=4096, intermediate_size=16384,
                num_hidden_layers=32, num_attention_heads=32, num_key_value_heads=32,
                max_position_embeddings=2048)


def _exaone4(f):
    """EXAONE 4: OLMo 2's output norms, per-head q/k RMSNorm, window layers (pattern 4); with a
    window the global layers use no rotary (NoPE)."""
    out = _read_decoder(f, _EXAONE4, kv_null_ok=False)
    n = out["n_layers"]
    windowed = _nullable(f, "sliding_window", 4096)
    if windowed is None:  # HF sets the pattern to 0: every layer full, rotary everywhere
        types = _layer_types(f, n, ["full_attention"] * n)
    else:
        types = _layer_types(f, n, _pattern_types(f, n, "sliding_window_pattern", 4))
    out |= {"qk_norm": "head", "norm_position": "post_sub"} | _sliding(f, types, 4096)
    if windowed is not None:
        out["nope_layers"] = tuple(i for i, t in enumerate(types) if t != "sliding_attention")
    return out


_COHERE = dict(vocab_size=256000, hidden_size=8192, intermediate_size=22528, num_hidden_layers=40,
               num_attention_heads=64, num_key_value_heads=None, max_position_embeddings=8192,
               attention_bias=False, tie=True)


def _cohere(f):
    """Command R: one bias-free LayerNorm feeding attention and MLP in parallel; with
    ``use_qk_norm`` a LayerNorm per head with its own scale per head (Command R+). The
    ``logit_scale`` multiplier changes no count."""
    out = _read_decoder(f, _COHERE)
    return out | dict(norm_type="layernorm", norm_bias=False, parallel_block=True,
                      parallel_norms=1,
                      qk_norm="per_head" if f.bool("use_qk_norm", False) else "none")


def _cohere2(f):
    """Command R7B / A: Cohere's parallel block, three window-4096 layers to one global;
    rotary only on window layers (no window: no rotary at all)."""
    out = _read_decoder(f, _COHERE)
    n = out["n_layers"]
    types = _layer_types(f, n, _pattern_types(f, n, "sliding_window_pattern", 4))
    windows = _sliding(f, types, 4096)
    has_window = not ("sliding_window" in f.raw and f.raw["sliding_window"] is None)
    nope = tuple(i for i, t in enumerate(types) if t != "sliding_attention" or not has_window)
    return out | windows | dict(norm_type="layernorm", norm_bias=False, parallel_block=True,
                                parallel_norms=1, nope_layers=nope)


CONVERTERS.update({
    "gemma3_text": _gemma3_text, "gemma3": _gemma3, "llama4_text": _llama4_text,
    "llama4": _llama4, "gpt_oss": _gpt_oss, "olmo2": _olmo2, "olmo3": _olmo3,
    "exaone4": _exaone4, "cohere": _cohere, "cohere2": _cohere2,
})
_DROPOUT.update({t: {"attn_dropout": ("attention_dropout", 0.0)} for t in (
    "gemma3_text", "llama4_text", "gpt_oss", "olmo2", "olmo3", "exaone4", "cohere", "cohere2")})
# --- end of issue 12 part 1 -----------------------------------------------------------------------


def _resolve_aliases(model_type: str, raw: dict[str, Any]) -> dict[str, Any]:
    aliases = {a: c for a, c in _ALIASES.get(model_type, {}).items() if raw.get(a) is not None}
    if not aliases:
        return raw
    out = {k: v for k, v in raw.items() if k not in aliases}
    out.update({c: raw[a] for a, c in aliases.items()})
    return out


def supported_types() -> list[str]:
    """Every ``model_type`` txcalc reads, sorted: the one list ``txcalc presets`` and the
    README show."""
    return sorted(CONVERTERS)


def closest_types(raw: dict[str, Any], n: int = 3) -> tuple[list[str], list[str]]:
    """Supported types closest to a config of an unsupported ``model_type``: by the name
    (difflib ratio; a supported name inside it or it inside one counts as close), and by the
    config's fields (the converters that read the most of the fields it sets)."""
    import difflib

    model_type = raw.get("model_type")
    by_name: list[str] = []
    if isinstance(model_type, str) and model_type:
        key = model_type.lower()
        base = key.replace("-", "_")
        scored = sorted(CONVERTERS, key=lambda t: (
            -(t in base or base in t or t.split("_")[0] == base.split("_")[0]),
            -difflib.SequenceMatcher(None, base, t).ratio(), t))
        by_name = [t for t in scored if t in base or base in t
                   or t.split("_")[0] == base.split("_")[0]
                   or difflib.SequenceMatcher(None, base, t).ratio() >= 0.6][:n]
    keys = {k for k, v in raw.items() if v is not None and k not in _GENERIC_KEYS}
    scores = []
    for t, convert in CONVERTERS.items():
        f = _Probe(_resolve_aliases(t, raw), "")
        try:
            convert(f)
        except Exception:  # a partial read still says which fields the type knows
            pass
        hits = len(keys & f.read)
        if hits:  # most fields in common first, then the type that reads fewest others
            scores.append((-hits, -hits / len(f.read), t))
    by_keys = [t for *_, t in sorted(scores)][:n]
    return by_name, by_keys


class _Probe(_Fields):
    """A lenient reader for closest_types: missing or odd fields read as harmless values, so
    that a converter runs to its end and shows every field it knows."""

    def int(self, key: str, default: int | None = None) -> int:
        self.read.add(key)
        v = self.raw.get(key, default)
        return v if isinstance(v, int) and not isinstance(v, bool) and v > 0 else 2

    def bool(self, key: str, default: bool) -> bool:
        self.read.add(key)
        v = self.raw.get(key, default)
        return v if isinstance(v, bool) else default

    def act(self, key: str, default: str) -> str:
        self.read.add(key)
        return _ACT.get(self.raw.get(key, default), "silu")


#: fields every config.json may carry: they say nothing about the architecture
_GENERIC_KEYS = frozenset({"model_type", "architectures", "torch_dtype", "dtype",
                           "transformers_version", "_name_or_path", "bos_token_id",
                           "eos_token_id", "pad_token_id", "use_cache", "initializer_range"})


def _closest_hint(raw: dict[str, Any]) -> str:
    by_name, by_keys = closest_types(raw)
    parts = ([f"by name {', '.join(by_name)}"] if by_name else []) + (
        [f"by its fields {', '.join(by_keys)}"] if by_keys else [])
    return f"closest supported: {'; '.join(parts)}; " if parts else ""


class UnsupportedModelType(ConfigError):
    """A config.json whose model_type has no converter. ``txcalc params`` counts it by a module
    walk (txcalc.model.modulewalk); ``raw`` and ``name`` are kept for it."""

    def __init__(self, raw: dict[str, Any], name: str):
        self.raw, self.name = raw, name
        super().__init__(
            f"{name}: unsupported model_type {raw['model_type']!r:.80} for this command: txcalc "
            f"has no converter for it, so only `txcalc params` answers (parameters exact, and "
            f"the FLOPs per call of its Linear and convolution modules, by a module walk of the "
            f"transformers model; txcalc.model.modulewalk.walk_config from Python); "
            f"{_closest_hint(raw)}supported: {', '.join(sorted(CONVERTERS))}")


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
        raise ConfigError(f"{name}: no 'model_type' field; {_closest_hint(raw)}supported: "
                          f"{', '.join(sorted(CONVERTERS))}")
    if not isinstance(model_type, str):
        raise ConfigError(f"{name}: unsupported model_type {_show(model_type)}; "
                          f"{_closest_hint(raw)}supported: {', '.join(sorted(CONVERTERS))}")
    if model_type not in CONVERTERS:
        raise UnsupportedModelType(raw, name)
    f = _Fields(_resolve_aliases(model_type, raw), name)
    f.head = head
    if head not in (None, "none", "auto") and model_type not in _HEAD_STYLES:
        raise ConfigError(f"{name}: head {head!r} is for encoder models; {model_type} has none")
    try:
        fields = CONVERTERS[model_type](f)
        fields.update(_windows(f, fields["n_layers"], model_type))
        fields.update(_dropouts(f, model_type))
        fields.update(_vision_fields(f, model_type, fields))
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
    source = fields.pop("source", f"HF config.json ({model_type})")
    return ModelConfig(name=name, source=source, **fields)


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
    raw = parse_json(text, shown(p), ConfigError, infinity=True)
    if not isinstance(raw, dict):
        raise ConfigError(f"{shown(p)}: expected a JSON object, got {type(raw).__name__}")
    default = p.parent.name if p.name == "config.json" and p.parent.name else p.stem
    name = raw.get("_name_or_path")
    return from_hf_dict(raw, name if isinstance(name, str) and name else default, head)


# === state-space and hybrid models (issue 12): mamba, mamba2, jamba, falcon_h1, nemotron_h,
# granitemoehybrid, lfm2. Field names and defaults are those of the transformers 5.x
# configuration classes; the costs live in txcalc/engine/mixers.py. =================================

import math  # noqa: E402


def _number(f: _Fields, key: str, default: float) -> float:
    v = f.get(key, default)
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or v <= 0:
        raise ConfigError(f"{f.where}: field {key!r} ({_show(v)}) must be a positive number")
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


CONVERTERS.update(HYBRID_CONVERTERS)
_ALIASES.update(HYBRID_ALIASES)


# === linear-attention hybrids (issue 12, branch arch): qwen3_next. Field names and defaults
# are those of the transformers 5.x configuration classes; the costs live in txcalc/engine/mixers.py
# (``gated_deltanet``) and ops.py (``gdn_flops``). ============================================

def _qwen3_next(f: _Fields) -> dict[str, Any]:
    """Qwen3-Next: ``layer_types`` (else every ``full_attention_interval``-th layer, default
    4, attends; the others are Gated DeltaNet), gated attention (q_proj doubled, sigmoid gate
    on the output) with per-head q/k RMSNorms, and a Qwen2-MoE-style FFN: routed SwiGLU
    experts plus a gated shared expert, dense where ``mlp_only_layers`` or
    ``decoder_sparse_step`` say (or with 0 experts)."""
    _defaults(f, hidden_size=2048, intermediate_size=5632, num_hidden_layers=48,
              num_attention_heads=16, vocab_size=151936)
    out = _qwen3_next_layers(f, _llama_like(f, max_pos=32768, kv_heads=2, head_dim=256))
    n = out["n_layers"]
    _defaults(f, num_experts=512, num_experts_per_tok=10, moe_intermediate_size=512,
              shared_expert_intermediate_size=512)
    moe = _moe_qwen(f, n, shared=True)  # {} with 0 experts: every layer dense
    dense = set(moe.get("dense_layers", ()))
    step = moe.get("moe_every", 1)
    ffns = tuple("moe" if moe and i not in dense and (i + 1) % step == 0 else "mlp"
                 for i in range(n))
    if "moe" not in ffns:
        moe = {}
    return out | moe | {"ffns": ffns}


def _qwen3_next_layers(f: _Fields, out: dict[str, Any]) -> dict[str, Any]:
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


def _qwen3_5_text(f):
    """Qwen3.5's language model: Qwen3-Next's layers (Gated DeltaNet every layer but each
    ``full_attention_interval``-th, gated attention) with the DeltaNet's input projected by
    four Linears, and a dense SwiGLU MLP in every layer."""
    _defaults(f, hidden_size=4096, intermediate_size=12288, num_hidden_layers=32,
              num_attention_heads=16, vocab_size=248320)
    out = _qwen3_next_layers(f, _llama_like(f, max_pos=32768, kv_heads=4, head_dim=256))
    return out | {"gdn_split_proj": True, "ffns": ("mlp",) * out["n_layers"]}


def _qwen3_5_moe_text(f):
    """Qwen3.5-MoE's language model: as Qwen3.5, with a MoE of SwiGLU experts and a gated
    shared expert in every layer (no dense layers, ``intermediate_size`` unused)."""
    _defaults(f, hidden_size=2048, num_hidden_layers=40, num_attention_heads=16,
              vocab_size=248320, num_experts=256, num_experts_per_tok=8,
              moe_intermediate_size=512, shared_expert_intermediate_size=512)
    f.raw.setdefault("intermediate_size", f.raw["moe_intermediate_size"])  # read, unused
    out = _qwen3_next_layers(f, _llama_like(f, max_pos=32768, kv_heads=2, head_dim=256))
    n = out["n_layers"]
    return out | {"gdn_split_proj": True, "ffns": ("moe",) * n, "n_experts": f.int("num_experts"),
                  "top_k": f.int("num_experts_per_tok"),
                  "moe_d_ff": f.int("moe_intermediate_size"),
                  "shared_d_ff": f.int("shared_expert_intermediate_size"),
                  "shared_expert_gate": True}


#: sizes of this block's types that must be positive when given (read by ``_Fields.int``)
_POSITIVE = _POSITIVE | {"linear_num_key_heads", "linear_num_value_heads", "linear_key_head_dim",
                         "linear_value_head_dim", "linear_conv_kernel_dim",
                         "full_attention_interval"}
#: model_type -> converter of this block, merged into ``hf.CONVERTERS``
LINEAR_ATTENTION_CONVERTERS = {
    "qwen3_next": _qwen3_next, "qwen3_5_text": _qwen3_5_text,
    "qwen3_5_moe_text": _qwen3_5_moe_text,
    # the multimodal configs: their text_config's language model (as qwen3_vl's)
    "qwen3_5": _vl_text(_qwen3_5_text), "qwen3_5_moe": _vl_text(_qwen3_5_moe_text)}
CONVERTERS.update(LINEAR_ATTENTION_CONVERTERS)


# === hybrids with shared attention blocks and Griffin's recurrence (issue 12): zamba, zamba2,
# recurrent_gemma. Field names and defaults are those of the transformers 5.x configuration
# classes; the costs live in txcalc/engine/mixers.py (``shared_block``, ``rglru_block``). ============

def _zamba_layers(f: _Fields, default: list[str]) -> list[str]:
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


def _zamba_common(f: _Fields, d: int, types: list[str], mixer: str,
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
                activation=_GATED[f.act("hidden_act", "gelu")],
                vocab_size=f.int("vocab_size", 32000),
                max_position=f.int("max_position_embeddings", 4096),
                tie_embeddings=f.bool("tie_word_embeddings", True),
                # HF ties the shared blocks' uses with the embeddings' tie flag
                shared_attn_tied=f.bool("tie_word_embeddings", True),
                mixers=(mixer,) * n, ffns=("none",) * n,
                shared_attn_layers=tuple(i for i, t in enumerate(types) if t == "hybrid"))


def _zamba(f: _Fields) -> dict[str, Any]:
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


def _zamba2(f: _Fields) -> dict[str, Any]:
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


def _recurrent_gemma(f: _Fields) -> dict[str, Any]:
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
        activation=_GATED[f.act("hidden_activation", "gelu_pytorch_tanh")], mlp_bias=True,
        qkv_bias=bias, out_bias=True, norm_type="rmsnorm", pos_type="rotary",
        tie_embeddings=f.bool("tie_word_embeddings", True), mixers=tuple(kinds),
        ffns=("mlp",) * n, sliding_window=window if attn else 0,
        sliding_layers=tuple(attn) if attn else (),
        ssm_d_inner=f.int("lru_width", d), ssm_heads=h, ssm_conv=f.int("conv1d_width", 4))


#: model_type -> converter of this block, merged into ``hf.CONVERTERS``
SHARED_BLOCK_CONVERTERS = {"zamba": _zamba, "zamba2": _zamba2,
                           "recurrent_gemma": _recurrent_gemma}
CONVERTERS.update(SHARED_BLOCK_CONVERTERS)
_ALIASES.update({"zamba": {"head_dim": "attention_head_dim"},
                 "recurrent_gemma": {"sliding_window": "attention_window_size"}})
_POSITIVE = _POSITIVE | {"n_mamba_heads", "num_mem_blocks", "adapter_rank", "lru_width",
                         "conv1d_width", "attention_window_size", "attn_layer_period"}
#: the hybrids' attention layers drop their probabilities as Llama's do (HF's eager attention
#: with ``attention_dropout``); LFM2 passes 0.0 whatever its config says, Mamba has no attention
_DROPOUT.update({t: {"attn_dropout": ("attention_dropout", 0.0)} for t in (
    "jamba", "falcon_h1", "nemotron_h", "granitemoehybrid", "qwen3_next", "qwen3_5_text",
    "qwen3_5_moe_text", "zamba", "zamba2", "recurrent_gemma")})
