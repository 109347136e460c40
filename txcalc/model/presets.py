"""Named models, one line each, with the source of every number.

HF ``config.json`` files are cited by repository; papers by arXiv id. ``tests/data/hf/`` holds
the config.json of every preset that has a Hugging Face class, and the test suite checks that
each preset equals its import and that parameter counts equal HF's model on the meta device.
"""

from __future__ import annotations

import difflib
from collections.abc import MutableMapping
from functools import partial

from .config import ModelConfig
from ..errors import ConfigError


class _Deferred:
    """One preset's ModelConfig arguments; PRESETS builds (and validates) the config when it
    is first read: a command reads one preset, and building every one cost ~6 ms of each
    command's start-up (issue 18)."""

    __slots__ = ("kwargs",)

    def __init__(self, **kwargs):
        self.kwargs = kwargs


class _Presets(MutableMapping):
    """PRESETS: name -> ModelConfig, in the order of the table; each config made on first
    read (``txcalc presets`` and the tests read them all: a preset that does not validate
    fails there)."""

    def __init__(self, table: dict):
        self._table = dict(table)

    def __getitem__(self, name: str) -> ModelConfig:
        v = self._table[name]
        if isinstance(v, _Deferred):
            v = self._table[name] = ModelConfig(**v.kwargs)
        return v

    def __setitem__(self, name: str, value) -> None:
        self._table[name] = value

    def __delitem__(self, name: str) -> None:
        del self._table[name]

    def __iter__(self):
        return iter(self._table)

    def __len__(self) -> int:
        return len(self._table)

    def __contains__(self, name) -> bool:
        return name in self._table

    def __repr__(self) -> str:
        return f"PRESETS({list(self._table)})"


M = _Deferred  # ModelConfig(**...) on first read of PRESETS[name]
# Families of shared settings; each preset line below states only what differs.
_gpt2 = partial(M, family="decoder", vocab_size=50257, max_position=1024, pos_type="learned",
                activation="gelu_new", qkv_bias=True, out_bias=True, mlp_bias=True,
                tie_embeddings=True, embed_dropout=0.1, attn_dropout=0.1, resid_dropout=0.1)
_bert = partial(M, family="encoder", vocab_size=30522, max_position=512, pos_type="learned",
                activation="gelu", qkv_bias=True, out_bias=True, mlp_bias=True, type_vocab_size=2,
                norm_position="post", final_norm=False, embed_norm=True, pooler=True, head="none",
                embed_dropout=0.1, attn_dropout=0.1, resid_dropout=0.1)
_t5 = partial(M, family="encoder-decoder", vocab_size=32128, max_position=512, head_dim=64,
              pos_type="relative_bias", activation="relu", norm_type="rmsnorm", norm_bias=False,
              embed_dropout=0.1, attn_dropout=0.1, resid_dropout=0.1, mlp_dropout=0.1,
              final_dropout=0.1)
_xlmr = partial(_bert, n_layers=24, d_model=1024, n_heads=16, vocab_size=250002,
                type_vocab_size=1)
_llama = partial(M, activation="swiglu", norm_type="rmsnorm", pos_type="rotary",
                 tie_embeddings=False)

_gpt_oss = partial(M, d_model=2880, n_heads=64, n_kv_heads=8, head_dim=64, d_ff=2880,
                   vocab_size=201088, max_position=131072, activation="swiglu",
                   norm_type="rmsnorm", pos_type="rotary", qkv_bias=True, out_bias=True,
                   sliding_window=128, global_every=2, attn_sinks=True, top_k=4,
                   router_bias=True, expert_bias=True, tie_embeddings=False)
_LLAMA4_NOPE = tuple(range(3, 48, 4))  # Llama 4: every 4th of 48 layers has no rotary
_LLAMA4_CHUNKED = tuple(i for i in range(48) if i not in _LLAMA4_NOPE)

PRESETS: dict[str, ModelConfig] = _Presets({
    # openai-community/gpt2{,-medium,-large,-xl} config.json (Radford et al. 2019)
    "gpt2": _gpt2(name="gpt2", hf_architecture="GPT2LMHeadModel", n_layers=12, d_model=768,
                  n_heads=12),
    "gpt2-medium": _gpt2(name="gpt2-medium", hf_architecture="GPT2LMHeadModel", n_layers=24,
                         d_model=1024, n_heads=16),
    "gpt2-large": _gpt2(name="gpt2-large", hf_architecture="GPT2LMHeadModel", n_layers=36,
                        d_model=1280, n_heads=20),
    "gpt2-xl": _gpt2(name="gpt2-xl", hf_architecture="GPT2LMHeadModel", n_layers=48, d_model=1600,
                     n_heads=25),
    # google-bert/bert-{base,large}-uncased config.json (Devlin et al. 2018, arXiv:1810.04805)
    "bert-base-uncased": _bert(name="bert-base-uncased", hf_architecture="BertForMaskedLM",
                               n_layers=12, d_model=768, n_heads=12),
    "bert-large-uncased": _bert(name="bert-large-uncased", hf_architecture="BertForMaskedLM",
                                n_layers=24, d_model=1024, n_heads=16),
    # google-t5/t5-{small,base,large} config.json (Raffel et al. 2019, arXiv:1910.10683)
    "t5-small": _t5(name="t5-small", hf_architecture="T5ForConditionalGeneration", n_layers=6,
                    n_encoder_layers=6, d_model=512, n_heads=8, d_ff=2048),
    "t5-base": _t5(name="t5-base", hf_architecture="T5ForConditionalGeneration", n_layers=12,
                   n_encoder_layers=12, d_model=768, n_heads=12, d_ff=3072),
    "t5-large": _t5(name="t5-large", hf_architecture="T5ForConditionalGeneration", n_layers=24,
                    n_encoder_layers=24, d_model=1024, n_heads=16, d_ff=4096),
    # meta-llama/Llama-2-{7b,13b,70b}-hf config.json (Touvron et al. 2023, arXiv:2307.09288)
    "llama-2-7b": _llama(name="llama-2-7b", hf_architecture="LlamaForCausalLM", n_layers=32,
                         d_model=4096, n_heads=32, d_ff=11008, vocab_size=32000, max_position=4096),
    "llama-2-13b": _llama(name="llama-2-13b", hf_architecture="LlamaForCausalLM", n_layers=40,
                          d_model=5120, n_heads=40, d_ff=13824, vocab_size=32000,
                          max_position=4096),
    "llama-2-70b": _llama(name="llama-2-70b", hf_architecture="LlamaForCausalLM", n_layers=80,
                          d_model=8192, n_heads=64, n_kv_heads=8, d_ff=28672, vocab_size=32000,
                          max_position=4096),
    # meta-llama/Meta-Llama-3-8B, Llama-3.1-{70B,405B} config.json (arXiv:2407.21783, Table 3)
    "llama-3-8b": _llama(name="llama-3-8b", hf_architecture="LlamaForCausalLM", n_layers=32,
                         d_model=4096, n_heads=32, n_kv_heads=8, d_ff=14336, vocab_size=128256,
                         max_position=8192),
    # meta-llama/Llama-3.1-8B config.json: llama-3-8b's shapes at 128k context (rope scaling)
    "llama-3.1-8b": _llama(name="llama-3.1-8b", hf_architecture="LlamaForCausalLM", n_layers=32,
                           d_model=4096, n_heads=32, n_kv_heads=8, d_ff=14336, vocab_size=128256,
                           max_position=131072),
    "llama-3.1-70b": _llama(name="llama-3.1-70b", hf_architecture="LlamaForCausalLM", n_layers=80,
                            d_model=8192, n_heads=64, n_kv_heads=8, d_ff=28672, vocab_size=128256,
                            max_position=131072),
    "llama-3.1-405b": _llama(name="llama-3.1-405b", hf_architecture="LlamaForCausalLM",
                             n_layers=126, d_model=16384, n_heads=128, n_kv_heads=8, d_ff=53248,
                             vocab_size=128256, max_position=131072),
    # meta-llama/Meta-Llama-3-70B config.json: the original Llama 3 70B (April 2024), 8k context
    "llama-3-70b": _llama(name="llama-3-70b", hf_architecture="LlamaForCausalLM", n_layers=80,
                          d_model=8192, n_heads=64, n_kv_heads=8, d_ff=28672, vocab_size=128256,
                          max_position=8192),
    # meta-llama/Llama-3.3-70B-Instruct config.json: Llama 3.1 70B's shapes (post-training only)
    "llama-3.3-70b": _llama(name="llama-3.3-70b", hf_architecture="LlamaForCausalLM", n_layers=80,
                            d_model=8192, n_heads=64, n_kv_heads=8, d_ff=28672, vocab_size=128256,
                            max_position=131072),
    # meta-llama/Llama-3.2-{1B,3B} config.json (tied embeddings; model card: 1.23B, 3.21B)
    "llama-3.2-1b": _llama(name="llama-3.2-1b", hf_architecture="LlamaForCausalLM", n_layers=16,
                           d_model=2048, n_heads=32, n_kv_heads=8, head_dim=64, d_ff=8192,
                           vocab_size=128256, max_position=131072, tie_embeddings=True),
    "llama-3.2-3b": _llama(name="llama-3.2-3b", hf_architecture="LlamaForCausalLM", n_layers=28,
                           d_model=3072, n_heads=24, n_kv_heads=8, head_dim=128, d_ff=8192,
                           vocab_size=128256, max_position=131072, tie_embeddings=True),
    # mistralai/Mistral-7B-v0.1 config.json (Jiang et al. 2023, arXiv:2310.06825)
    "mistral-7b": _llama(name="mistral-7b", hf_architecture="MistralForCausalLM", n_layers=32,
                         d_model=4096, n_heads=32, n_kv_heads=8, d_ff=14336, vocab_size=32000,
                         max_position=32768, sliding_window=4096),
    # mistralai/Mixtral-8x7B-v0.1 config.json (Jiang et al. 2024, arXiv:2401.04088)
    "mixtral-8x7b": _llama(name="mixtral-8x7b", hf_architecture="MixtralForCausalLM", n_layers=32,
                           d_model=4096, n_heads=32, n_kv_heads=8, d_ff=14336, vocab_size=32000,
                           max_position=32768, n_experts=8, top_k=2),
    # Qwen/Qwen2-7B config.json (Yang et al. 2024, arXiv:2407.10671)
    "qwen2-7b": _llama(name="qwen2-7b", hf_architecture="Qwen2ForCausalLM", n_layers=28,
                       d_model=3584, n_heads=28, n_kv_heads=4, d_ff=18944, vocab_size=152064,
                       max_position=131072, qkv_bias=True),
    # deepseek-ai/DeepSeek-V3 config.json (arXiv:2412.19437: 671B total, 37B active; HF builds
    # no multi-token-prediction module, whose 14B make the 685B of the checkpoint); released
    # in fp8 with 128 x 128 block scales (quantization_config quant_method fp8)
    "deepseek-v3": _llama(name="deepseek-v3", hf_architecture="DeepseekV3ForCausalLM", n_layers=61,
                          d_model=7168, n_heads=128, d_ff=18432, vocab_size=129280,
                          max_position=163840, q_lora_rank=1536, kv_lora_rank=512,
                          qk_nope_head_dim=128, qk_rope_head_dim=64, v_head_dim=128, n_experts=256,
                          top_k=8, moe_d_ff=2048, n_shared_experts=1, first_k_dense=3,
                          released_weights="fp8-block", released_mtp_layers=1),
    # ibm-granite/granite-3.3-8b-instruct config.json (Granite's four multipliers are
    # elementwise: no parameters, no matmul FLOPs)
    "granite-3.3-8b": _llama(name="granite-3.3-8b", hf_architecture="GraniteForCausalLM",
                             n_layers=40, d_model=4096, n_heads=32, n_kv_heads=8, d_ff=12800,
                             vocab_size=49159, max_position=131072, tie_embeddings=True),
    # microsoft/phi-4 config.json (model_type phi3; arXiv:2412.08905)
    "phi-4": _llama(name="phi-4", hf_architecture="Phi3ForCausalLM", n_layers=40, d_model=5120,
                    n_heads=40, n_kv_heads=10, d_ff=17920, vocab_size=100352, max_position=16384),
    # Qwen/Qwen3-235B-A22B config.json (arXiv:2505.09388)
    "qwen3-235b-a22b": _llama(name="qwen3-235b-a22b", hf_architecture="Qwen3MoeForCausalLM",
                              n_layers=94, d_model=4096, n_heads=64, n_kv_heads=4, head_dim=128,
                              d_ff=12288, vocab_size=151936, max_position=40960, qk_norm="head",
                              n_experts=128, top_k=8, moe_d_ff=1536),
    # zai-org/GLM-4.5 config.json (arXiv:2508.06471); HF builds no multi-token-prediction
    # layer (num_nextn_predict_layers 1), as for DeepSeek-V3
    "glm-4.5": _llama(name="glm-4.5", hf_architecture="Glm4MoeForCausalLM", n_layers=92,
                      d_model=5120, n_heads=96, n_kv_heads=8, head_dim=128, d_ff=12288,
                      vocab_size=151552, max_position=131072, qkv_bias=True, qk_norm="head",
                      n_experts=160, top_k=8, moe_d_ff=1536, n_shared_experts=1, first_k_dense=3),
    # --- issue 12 part 1 (HF config.json of each, as cited; tests/data/hf holds them) ----------
    # google/gemma-3-27b-pt config.json, its text_config (the language model; vocab_size is
    # Gemma3TextConfig's default 262208): five window-1024 layers to one global
    "gemma-3-27b": M(name="gemma-3-27b", hf_architecture="Gemma3ForCausalLM", n_layers=62,
                     d_model=5376, n_heads=32, n_kv_heads=16, head_dim=128, d_ff=21504,
                     vocab_size=262208, max_position=131072, activation="geglu_tanh",
                     norm_type="rmsnorm", pos_type="rotary", qk_norm="head",
                     norm_position="sandwich", sliding_window=1024, global_every=6),
    # meta-llama/Llama-4-Scout-17B-16E config.json, text_config: 16 experts + 1 shared in
    # every layer, top-1; every 4th layer NoPE and global, the others chunked (8192) + L2 qk-norm
    "llama-4-scout": _llama(name="llama-4-scout", hf_architecture="Llama4ForCausalLM", n_layers=48,
                            d_model=5120, n_heads=40, n_kv_heads=8, head_dim=128, d_ff=16384,
                            vocab_size=202048, max_position=10485760, n_experts=16, top_k=1,
                            moe_d_ff=8192, n_shared_experts=1, qk_norm="l2",
                            nope_layers=_LLAMA4_NOPE, attn_chunk=8192,
                            chunked_layers=_LLAMA4_CHUNKED),
    # meta-llama/Llama-4-Maverick-17B-128E config.json, text_config: 128 experts + 1 shared in
    # every second layer (dense layers 16384 wide), no qk-norm
    "llama-4-maverick": _llama(name="llama-4-maverick", hf_architecture="Llama4ForCausalLM",
                               n_layers=48, d_model=5120, n_heads=40, n_kv_heads=8, head_dim=128,
                               d_ff=16384, vocab_size=202048, max_position=1048576, n_experts=128,
                               top_k=1, moe_d_ff=8192, n_shared_experts=1, moe_every=2,
                               nope_layers=_LLAMA4_NOPE, attn_chunk=8192,
                               chunked_layers=_LLAMA4_CHUNKED),
    # openai/gpt-oss-{20b,120b} config.json (model card arXiv:2508.10925): biased attention with
    # sinks, window-128 and global layers alternating, biased experts and router, top-4;
    # released with MXFP4 routed experts (quantization_config quant_method mxfp4)
    "gpt-oss-20b": _gpt_oss(name="gpt-oss-20b", hf_architecture="GptOssForCausalLM", n_layers=24,
                            n_experts=32, released_weights="mxfp4"),
    "gpt-oss-120b": _gpt_oss(name="gpt-oss-120b", hf_architecture="GptOssForCausalLM", n_layers=36,
                             n_experts=128, released_weights="mxfp4"),
    # CohereForAI/c4ai-command-r-plus config.json: parallel block, bias-free LayerNorm, a
    # LayerNorm per head on q and k, tied embeddings
    "command-r-plus": M(name="command-r-plus", hf_architecture="CohereForCausalLM", n_layers=64,
                        d_model=12288, n_heads=96, n_kv_heads=8, d_ff=33792, vocab_size=256000,
                        max_position=8192, activation="swiglu", norm_type="layernorm",
                        norm_bias=False, pos_type="rotary", parallel_block=True,
                        qk_norm="per_head"),
    # allenai/OLMo-2-0325-32B config.json (arXiv:2501.00656): output norms, q/k RMSNorm
    "olmo-2-32b": _llama(name="olmo-2-32b", hf_architecture="Olmo2ForCausalLM", n_layers=64,
                         d_model=5120, n_heads=40, n_kv_heads=8, d_ff=27648, vocab_size=100352,
                         max_position=4096, qk_norm="full", norm_position="post_sub"),
    # Brown et al. 2020, "Language Models are Few-Shot Learners", arXiv:2005.14165, Table 2.1:
    # n_layers 96, d_model 12288, n_heads 96, d_head 128, n_ctx 2048, GPT-2 tokenizer (50257)
    "gpt3-175b": _gpt2(name="gpt3-175b", n_layers=96, d_model=12288, n_heads=96, max_position=2048,
                       activation="gelu"),
    # --- encoders and encoder-decoders of issue 13 (base models, as AutoModel builds them;
    # seq2seq: the *ForConditionalGeneration class) ------------------------------------------
    # FacebookAI/xlm-roberta-large config.json (Conneau et al. 2019, arXiv:1911.02116)
    "xlm-roberta-large": _xlmr(name="xlm-roberta-large", hf_architecture="XLMRobertaForMaskedLM",
                               max_position=514),
    # BAAI/bge-m3 config.json (XLM-R large at 8,194 positions; Chen et al. 2024, arXiv:2402.03216)
    "bge-m3": _xlmr(name="bge-m3", hf_architecture="XLMRobertaModel", max_position=8194),
    # sentence-transformers/all-mpnet-base-v2 config.json (MPNet, Song et al. 2020, arXiv:2004.09297)
    "all-mpnet-base-v2": _bert(name="all-mpnet-base-v2", hf_architecture="MPNetForMaskedLM",
                               n_layers=12, d_model=768, n_heads=12, vocab_size=30527,
                               max_position=514, type_vocab_size=0, extra_rel_bias=True),
    # microsoft/deberta-v3-large config.json (He et al. 2021, arXiv:2111.09543)
    "deberta-v3-large": _bert(name="deberta-v3-large", n_layers=24, d_model=1024, n_heads=16,
                              vocab_size=128100, type_vocab_size=0, pos_type="none",
                              pooler=False, rel_span=256, rel_c2p=True, rel_p2c=True,
                              rel_norm=True, rel_max_position=512),
    # answerdotai/ModernBERT-large config.json (Warner et al. 2024, arXiv:2412.13663)
    "modernbert-large": M(name="modernbert-large", hf_architecture="ModernBertForMaskedLM",
                          family="encoder", n_layers=28, d_model=1024, n_heads=16, d_ff=2624,
                          vocab_size=50368, max_position=8192, activation="geglu", norm_bias=False,
                          embed_norm=True, first_attn_norm=False, head="none",
                          head_dense_bias=False,
                          # local_attention 128 (64 either side) but on every third layer
                          sliding_window=64,
                          sliding_layers=tuple(i for i in range(28) if i % 3)),
    # facebook/nllb-200-3.3B config.json (NLLB team 2022, arXiv:2207.04672)
    "nllb-200-3.3b": M(name="nllb-200-3.3b", hf_architecture="M2M100ForConditionalGeneration",
                       family="encoder-decoder", n_layers=24, n_encoder_layers=24, d_model=2048,
                       n_heads=16, d_ff=8192, vocab_size=256206, max_position=1024,
                       position_offset=2, pos_type="sinusoidal", sinusoidal_table="buffer",
                       activation="relu", qkv_bias=True, out_bias=True, mlp_bias=True,
                       # dropout 0.1, attention_dropout 0.1 (activation_dropout 0.0)
                       embed_dropout=0.1, attn_dropout=0.1, resid_dropout=0.1),
    # openai/whisper-large-v3 config.json (Radford et al. 2022, arXiv:2212.04356): the whole
    # WhisperForConditionalGeneration, conv audio stem and frozen encoder positions included
    "whisper-large-v3": M(name="whisper-large-v3",
                          hf_architecture="WhisperForConditionalGeneration",
                          family="encoder-decoder", n_layers=32, n_encoder_layers=32, d_model=1280,
                          n_heads=20, d_ff=5120, vocab_size=51866, max_position=448,
                          encoder_max_position=1500, pos_type="learned", audio_mels=128,
                          k_proj_bias=False, qkv_bias=True, out_bias=True, mlp_bias=True),
    # google/flan-t5-xxl config.json (Chung et al. 2022, arXiv:2210.11416); untied lm_head
    "flan-t5-xxl": _t5(name="flan-t5-xxl", hf_architecture="T5ForConditionalGeneration",
                       n_layers=24, n_encoder_layers=24, d_model=4096, n_heads=64, d_ff=10240,
                       activation="geglu", tie_embeddings=False),
    # google/mt5-xxl config.json (Xue et al. 2020, arXiv:2010.11934); untied lm_head
    "mt5-xxl": _t5(name="mt5-xxl", hf_architecture="MT5ForConditionalGeneration", n_layers=24,
                   n_encoder_layers=24, d_model=4096, n_heads=64, d_ff=10240, vocab_size=250112,
                   activation="geglu", tie_embeddings=False),
})


# --- state-space hybrids (issue 12) ---------------------------------------------------------------
# ai21labs/AI21-Jamba-1.5-Large config.json (arXiv:2408.12570, section 2: 9 blocks of 8 layers,
# one attention layer (64 query, 8 KV heads, no positions) per block, a MoE of 16 experts (top 2)
# every other layer, hidden 8192; Mamba d_state 16, conv 4, expand 2; 398B total, 94B active)
PRESETS["jamba-1.5-large"] = _llama(
    name="jamba-1.5-large", hf_architecture="JambaForCausalLM", n_layers=72, d_model=8192,
    n_heads=64, n_kv_heads=8, d_ff=24576, vocab_size=65536, max_position=262144, pos_type="none",
    mixers=tuple("attention" if i % 8 == 4 else "mamba" for i in range(72)),
    ffns=tuple("moe" if i % 2 == 1 else "mlp" for i in range(72)), n_experts=16, top_k=2,
    moe_d_ff=24576, ssm_d_inner=16384, ssm_state=16, ssm_conv=4, ssm_dt_rank=512, ssm_dt_norms=True)

# --- hybrids of issue 12, branch arch -----------------------------------------------------------
# tiiuae/Falcon-H1-34B-Instruct config.json, as Megatron-Bridge's FalconH1ModelProvider34B
# (src/megatron/bridge/models/falcon_h1/falconh1_provider.py) copies it, head_dim 128 and
# mamba_d_ssm 4096 (arXiv:2507.22448): attention (20 query, 4 KV heads) beside a Mamba-2 mixer
# (32 heads of 128, 2 groups, d_state 256) in each of 72 layers; 34B published (33.64B exact)
PRESETS["falcon-h1-34b"] = _llama(
    name="falcon-h1-34b", hf_architecture="FalconH1ForCausalLM", n_layers=72, d_model=5120,
    n_heads=20, n_kv_heads=4, head_dim=128, d_ff=21504, vocab_size=261120, max_position=262144,
    mixers=("hybrid",) * 72, ffns=("mlp",) * 72, ssm_d_inner=4096, ssm_state=256, ssm_heads=32,
    ssm_head_dim=128, ssm_groups=2, ssm_chunk=128)
# nvidia/Nemotron-H-56B-Base-8K (arXiv:2504.03624, Table 1; Megatron-Bridge's
# NemotronHModelProvider56B): 118 single-purpose blocks, 54 Mamba-2 (256 heads of 64, 8 groups,
# d_state 256), 54 squared-ReLU MLPs (32768 wide), 10 attention (64 query, 8 KV heads, no
# positions); 56B published (56.32B exact)
_NEMOTRON_H_56B = ("M-M-M-M*-M-M-M-M-M*-M-M-M-M-M*-M-M-M-M-M*-M-M-M-M-M*-M-M-M-M-M*-M-M-M-M-"
                   "M*-M-M-M-M-M*-M-M-M-M-M*-M-M-M-M-M*-M-M-M-M-M-")
PRESETS["nemotron-h-56b"] = M(
    name="nemotron-h-56b", hf_architecture="NemotronHForCausalLM", n_layers=118, d_model=8192,
    n_heads=64, n_kv_heads=8, head_dim=128, d_ff=32768, vocab_size=131072, max_position=8192,
    activation="relu2", norm_type="rmsnorm", pos_type="none", tie_embeddings=False,
    mixers=tuple({"M": "mamba2", "*": "attention", "-": "none"}[c] for c in _NEMOTRON_H_56B),
    ffns=tuple("mlp" if c == "-" else "none" for c in _NEMOTRON_H_56B), ssm_d_inner=16384,
    ssm_state=256, ssm_heads=256, ssm_head_dim=64, ssm_groups=8, ssm_chunk=128)
# Qwen/Qwen3-Next-80B-A3B-Instruct config.json (the HF class defaults; blog qwenlm.github.io/
# blog/qwen3_next): 48 layers, three Gated DeltaNet (16 key heads of 128, 32 value heads of 128)
# to one gated attention layer (16 query, 2 KV heads of 256); 512 experts (top 10) of 512 plus a
# gated shared expert in every layer; 80B total published (79.67B exact, the MTP layer, which HF
# does not build, left out)
PRESETS["qwen3-next-80b-a3b"] = _llama(
    name="qwen3-next-80b-a3b", hf_architecture="Qwen3NextForCausalLM", n_layers=48, d_model=2048,
    n_heads=16, n_kv_heads=2, head_dim=256, d_ff=5120, vocab_size=151936, max_position=262144,
    qk_norm="head", attn_out_gate=True, mixers=("gdn", "gdn", "gdn", "attention") * 12,
    ffns=("moe",) * 48, n_experts=512, top_k=10, moe_d_ff=512, shared_d_ff=512,
    shared_expert_gate=True, ssm_d_inner=4096, ssm_state=128, ssm_heads=32, ssm_head_dim=128,
    ssm_groups=16, ssm_chunk=64)

# meta-llama/Llama-3.2-11B-Vision config.json (Mllama): Llama 3.1 8B's text model with 8 gated
# cross-attention blocks inserted (every 5th from layer 3: 40 layers), a token table of
# 128256 + 8 rows; its ViT-H/14 vision tower (32 + 8 gated global layers, four 560-px tiles of
# 1601 rows) and projector: 895,028,755 parameters. 10,670,220,835 in all (tests/conformance/test_mllama.py
# cites the published count)
PRESETS["llama-3.2-11b-vision"] = _llama(
    name="llama-3.2-11b-vision", hf_architecture="MllamaForConditionalGeneration", n_layers=40,
    d_model=4096, n_heads=32, n_kv_heads=8, d_ff=14336, vocab_size=128256, max_position=131072,
    cross_layers=tuple(range(3, 40, 5)), embed_extra_rows=8, vision_params=895_028_755,
    image_tokens=1, image_states=4 * 1601)


def get_preset(name: str) -> ModelConfig:
    """The preset called ``name`` (case-insensitive), or a ConfigError with close matches."""
    key = name.strip().lower()
    if key in PRESETS:
        return PRESETS[key]
    close = difflib.get_close_matches(key, PRESETS, n=3, cutoff=0.5)
    hint = f"; did you mean {', '.join(close)}?" if close else f"; known: {', '.join(PRESETS)}"
    raise ConfigError(f"unknown model {name!r} (not a preset, not a config.json path){hint}")
