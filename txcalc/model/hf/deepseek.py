"""DeepSeek-V2 and -V3: multi-head latent attention (low-rank q and kv projections) and
fine-grained MoE with shared experts after ``first_k_dense_replace`` dense layers."""

from __future__ import annotations

from typing import Any

from ...errors import ConfigError
from .fields import Fields, llama_like


def _deepseek(f: Fields, v3: bool) -> dict[str, Any]:
    # MLA ignores num_key_value_heads and head_dim; ``moe_layer_freq`` (in DeepSeek's own
    # config.json files) is not read by HF: every layer from first_k_dense_replace on is MoE.
    out = llama_like(f, max_pos=4096 if v3 else 2048, mlp_bias=not v3)
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


def deepseek_v2(f):
    return _deepseek(f, v3=False)


def deepseek_v3(f):
    return _deepseek(f, v3=True)
