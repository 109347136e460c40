"""The config.json reader every family shares: ``Fields`` (typed reads whose errors name the
field and its value) and the helpers several families use (Llama-shaped fields, per-layer window
patterns, dropouts, the model type's window rule)."""

from __future__ import annotations

from typing import Any

from ..checks import _show
from ...errors import ConfigError


#: HF activation names -> ours (gated variants are chosen by the model type, not the name).
ACT = {"gelu": "gelu", "gelu_new": "gelu_new", "gelu_pytorch_tanh": "gelu_tanh",
       "gelu_fast": "gelu_tanh", "quick_gelu": "gelu", "relu": "relu", "silu": "silu",
       "swish": "silu", "relu2": "relu2", "gelu_python": "gelu", "tanh": "gelu"}
GATED = {"silu": "swiglu", "gelu": "geglu", "gelu_tanh": "geglu_tanh", "gelu_new": "geglu_tanh",
         "relu": "reglu"}


#: HF fields that are sizes or counts: an explicit 0 or a negative value is an error (0 must not
#: fall through to ModelConfig's "0 = derive it" defaults).
POSITIVE = frozenset({"num_mel_bins", "max_source_positions", "max_target_positions",
    "hidden_size", "num_hidden_layers", "num_attention_heads", "num_key_value_heads", "head_dim",
    "intermediate_size", "vocab_size", "max_position_embeddings", "num_local_experts",
    "num_experts", "n_routed_experts", "num_experts_per_tok", "moe_intermediate_size",
    "decoder_sparse_step", "moe_layer_freq", "n_embd", "n_embed", "n_head", "n_layer", "n_inner",
    "n_positions", "num_kv_heads", "ffn_hidden_size", "ffn_dim", "word_embed_proj_dim", "d_model",
    "num_heads", "num_layers", "num_decoder_layers", "d_kv", "d_ff", "encoder_layers",
    "decoder_layers", "encoder_attention_heads", "decoder_attention_heads", "encoder_ffn_dim",
    "decoder_ffn_dim",
    # Gemma 3n
    "altup_num_inputs", "laurel_rank", "hidden_size_per_layer_input", "vocab_size_per_layer_input",
    # Qwen3-Next, Qwen3.5
    "linear_num_key_heads", "linear_num_value_heads", "linear_key_head_dim",
    "linear_value_head_dim", "linear_conv_kernel_dim", "full_attention_interval",
    # Zamba, Zamba2, RecurrentGemma
    "n_mamba_heads", "num_mem_blocks", "adapter_rank", "lru_width", "conv1d_width",
    "attention_window_size", "attn_layer_period"})


class Fields:
    """Typed reads from a config.json dict, each error naming the field and its value."""

    def __init__(self, raw: dict[str, Any], where: str):
        self.raw, self.where = raw, where
        self.problems: list[str] = []  # non-positive sizes, all reported together
        self.read: set[str] = set()  # fields a converter looked at (closest_types)
        self.head: str | None = None  # the encoder head asked for (from_hf_dict's ``head``)
        # the registry's record of the type read and the registry itself (from_hf_dict sets
        # them; a converter that reads a sub-config as another type looks that type up here)
        self.model: Any = None
        self.models: dict[str, Any] = {}

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
        if v <= 0 and key in POSITIVE and self.raw.get(key) is not None:
            self.problems.append(f"field {key!r} ({v}) must be a positive integer")
        return v

    def bool(self, key: str, default: bool) -> bool:
        v = self.get(key, default)
        if not isinstance(v, bool):
            raise ConfigError(f"{self.where}: field {key!r} ({_show(v)}) must be true or false")
        return v

    def act(self, key: str, default: str) -> str:
        v = self.get(key, default)
        if v not in ACT:
            raise ConfigError(f"{self.where}: field {key!r} ({_show(v)}) is not a known activation "
                              f"({', '.join(sorted(ACT))})")
        return ACT[v]

    def heads(self, d_model: int, n_heads: int) -> int:
        """head_dim when given, else d_model // n_heads (HF's rule); 0 heads is left to validate."""
        return self.int("head_dim", d_model // n_heads if n_heads > 0 else 0)


def llama_like(f: Fields, *, act_default: str = "silu", tie: bool = False,
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
        activation=GATED[f.act("hidden_act", act_default)],
        mlp_bias=f.bool("mlp_bias", False) if mlp_bias else False,
        norm_type="rmsnorm", pos_type="rotary", tie_embeddings=f.bool("tie_word_embeddings", tie),
    )
    return out


def read_decoder(f: Fields, d: dict[str, Any], *, kv_null_ok: bool = True) -> dict[str, Any]:
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
        activation=GATED[f.act(d.get("act_key", "hidden_act"), d.get("act", "silu"))],
        norm_type="rmsnorm", pos_type="rotary",
        tie_embeddings=f.bool("tie_word_embeddings", d.get("tie", False)))


def no_cross_attention(f: Fields) -> None:
    if f.bool("add_cross_attention", False):
        raise ConfigError(f"{f.where}: field 'add_cross_attention' (true): cross-attention "
                          "blocks in a single-stack model are not modelled; txcalc has them "
                          "only in encoder-decoder models")


def apply_window_rule(f: Fields, n_layers: int,
                      rule: tuple[str, int | None] | None) -> dict[str, Any]:
    """Sliding-window layout as HF builds it for a type's window ``rule`` (its registry record:
    the rule and the default ``sliding_window``); types without one (Llama, Gemma, ...) ignore a
    ``sliding_window`` field, as HF does. The rules (HF 5.x config classes and modeling code):

      all      every layer slides when ``sliding_window`` is set (Mistral: default 4096;
               Mixtral, Phi-3, Starcoder2: default null); ``layer_types`` is not read
      qwen2    only with ``use_sliding_window``; layer_types, else layers i >= max_window_layers
      qwen2moe only with ``use_sliding_window``; layer_types, else even i < max_window_layers
      qwen3moe every layer, only with ``use_sliding_window``
      gemma2   layer_types, else layers 0, 2, 4, ... slide (every second one is global)
    """
    if rule is None:
        return {}
    rule_name, default = rule
    if "sliding_window" in f.raw and f.raw["sliding_window"] is None:
        return {}  # an explicit null turns the type's default window off
    window = f.int("sliding_window", default) if f.get("sliding_window", default) else 0
    if rule_name in ("qwen2", "qwen2moe", "qwen3moe") and not f.bool("use_sliding_window", False):
        return {}
    if not window:
        return {}
    if rule_name in ("all", "qwen3moe"):
        return {"sliding_window": window}
    types = f.get("layer_types")
    if types is None:
        mwl = f.int("max_window_layers", 28) if rule_name != "gemma2" else 0
        sliding = [i >= mwl if rule_name == "qwen2" else
                   (i % 2 == 0 and (rule_name == "gemma2" or i < mwl)) for i in range(n_layers)]
    elif not isinstance(types, list) or len(types) != n_layers or not all(
            t in ("sliding_attention", "full_attention") for t in types):
        raise ConfigError(f"{f.where}: field 'layer_types' ({types!r}) must list "
                          f"'sliding_attention' or 'full_attention' once for each of the "
                          f"{n_layers} layers")
    else:
        sliding = [t == "sliding_attention" for t in types]
    return window_layout(window, sliding)


def window_layout(window: int, sliding: list[bool]) -> dict[str, Any]:
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


def layer_pattern(n_layers: int, window: int, sliding: list[bool]) -> dict[str, Any]:
    """Window fields for a per-layer sliding pattern: every layer, or the listed ones."""
    layers = tuple(i for i, s in enumerate(sliding) if s)
    if not window or not layers:
        return {}
    if len(layers) == n_layers:
        return {"sliding_window": window}
    return {"sliding_window": window, "sliding_layers": layers}


def sliding_flags(f: Fields, n_layers: int) -> list[bool] | None:
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


def read_window(f: Fields, default: int | None) -> int:
    """``sliding_window`` (an explicit null: none), 0 when off."""
    if "sliding_window" in f.raw and f.raw["sliding_window"] is None:
        return 0
    return f.int("sliding_window", default) if f.get("sliding_window", default) else 0


LAYER_TYPES = ("sliding_attention", "full_attention", "chunked_attention")


def layer_types(f: Fields, n_layers: int, default: list[str]) -> list[str]:
    """HF ``layer_types`` (one entry per layer), or the class's default pattern."""
    types = f.get("layer_types")
    if types is None:
        return default
    if not isinstance(types, list) or len(types) != n_layers or not all(
            t in LAYER_TYPES for t in types):
        raise ConfigError(f"{f.where}: field 'layer_types' ({_show(types)}) must list one of "
                          f"{', '.join(LAYER_TYPES)} for each of the {n_layers} layers")
    return types


def pattern_types(f: Fields, n_layers: int, key: str, default: int) -> list[str]:
    """layer_types from an every-k-th-layer-is-global pattern (``sliding_window_pattern``)."""
    k = f.get(key, default)
    if isinstance(k, str) and k and set(k) <= {"L", "G"}:  # EXAONE 4's "LLLG" form
        return ["sliding_attention" if k[i % len(k)] == "L" else "full_attention"
                for i in range(n_layers)]
    if isinstance(k, bool) or not isinstance(k, int) or k <= 0:
        raise ConfigError(f"{f.where}: field {key!r} ({_show(k)}) must be a positive integer")
    return ["sliding_attention" if (i + 1) % k else "full_attention" for i in range(n_layers)]


def nullable(f: Fields, key: str, default: Any) -> Any:
    """The field's value, None when it is an explicit null, the class default when absent."""
    return f.raw[key] if key in f.raw else default


def typed_windows(f: Fields, types: list[str], default: int | None) -> dict[str, Any]:
    """Window fields for the layers typed sliding_attention (no window when it is null)."""
    if nullable(f, "sliding_window", default) is None:
        return {}
    window = f.int("sliding_window", default)
    return window_layout(window, [t == "sliding_attention" for t in types])


def layer_list(f: Fields, key: str, default: list[int]) -> list[int]:
    v = f.get(key, default)
    if not isinstance(v, list) or not all(isinstance(i, int) and not isinstance(i, bool)
                                          for i in v):
        raise ConfigError(f"{f.where}: field {key!r} ({_show(v)}) must be a list of integers")
    return v


def is_index(v) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def fill_defaults(f: Fields, **defaults: Any) -> None:
    """Fill the fields ``llama_like`` reads as required with the HF class defaults (the Hub
    stores only non-default fields)."""
    f.raw = {**defaults, **f.raw}


def read_dropouts(f: Fields, table: dict[str, tuple[str, float]]) -> dict[str, float]:
    """Dropout probabilities by a type's table (its registry record: our field -> (HF field,
    HF default)); the zero ones are left out."""
    out = {}
    for ours, (key, default) in table.items():
        v = f.get(key, default)
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not 0 <= v < 1:
            raise ConfigError(f"{f.where}: field {key!r} ({_show(v)}) must be a dropout "
                              "probability in [0, 1)")
        if v:
            out[ours] = float(v)
    return out


def text_part(f: Fields, text_type: str) -> dict[str, Any]:
    """The language model of a multimodal config: its ``text_config`` (class defaults when
    absent) read as ``text_type``."""
    text = f.get("text_config", {})
    if not isinstance(text, dict):
        raise ConfigError(f"{f.where}: field 'text_config' ({_show(text)}) must be an object")
    sub = Fields(text, f"{f.where} (text_config)")
    sub.models = f.models
    model = sub.model = f.models[text_type]
    try:
        out = model.convert(sub) | read_dropouts(sub, model.dropout)
    finally:
        f.problems += sub.problems
    return out


def resolve_aliases(aliases: dict[str, str], raw: dict[str, Any]) -> dict[str, Any]:
    """``raw`` with a type's aliases (its registry record: alias -> the field read) renamed; as
    in HF, an alias that is present (not null) wins."""
    aliases = {a: c for a, c in aliases.items() if raw.get(a) is not None}
    if not aliases:
        return raw
    out = {k: v for k, v in raw.items() if k not in aliases}
    out.update({c: raw[a] for a, c in aliases.items()})
    return out
