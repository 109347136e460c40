"""Every supported ``model_type``, one record each: its converter (in the family module), its
sliding-window rule, its dropouts, its field aliases, its encoder heads and its vision sub-configs.
The one table ``from_hf_dict``, ``supported_types`` and ``closest_types`` read.

A field missing from a config.json takes the default of the matching ``transformers``
configuration class (as of transformers 5.x): the converters' arguments and the tables below
say which.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from . import deepseek, encoders, gemma, gpt, hybrids, llama, moe, qwen, seq2seq, vision
from .encoders import Heads
from .fields import Fields
from .vision import CLIP_LLAVA, Vision


@dataclass(frozen=True)
class Model:
    """How one ``model_type``'s config.json becomes ModelConfig fields.

    ``convert``: the fields its HF class reads. ``window``: the rule by which HF places its
    sliding window and the default ``sliding_window`` (fields.apply_window_rule), for the
    types whose converter does not place it. ``dropout``: our field -> (HF field, HF default),
    as its modeling code applies them; a type without one is read as dropout-free (OPT,
    Falcon, BLOOM, Phi-3's and Starcoder2's residual/embedding dropout are not read, so a
    dropout-on training step under-counts their masks). ``aliases``: the HF class's
    ``attribute_map`` (alias -> the field read; plus Falcon's and BLOOM's ``n_embed``
    keyword); as in HF, an alias that is present (not null) wins. ``heads``: an encoder's
    heads. ``vision``: a vision-language type's sub-configs."""

    name: str
    convert: Callable[[Fields], dict[str, Any]]
    window: tuple[str, int | None] | None = None
    dropout: dict[str, tuple[str, float]] = field(default_factory=dict)
    aliases: dict[str, str] = field(default_factory=dict)
    heads: Heads | None = None
    vision: Vision | None = None


#: Llama-shaped attention: only the attention probabilities are dropped
ATTN = {"attn_dropout": ("attention_dropout", 0.0)}
#: BERT's three places (embeddings, attention probabilities, after each sub-block)
BERT = {"embed_dropout": ("hidden_dropout_prob", 0.1),
        "attn_dropout": ("attention_probs_dropout_prob", 0.1),
        "resid_dropout": ("hidden_dropout_prob", 0.1)}
#: BERT's places, off by default (Nomic BERT; ALBERT, whose MLP output ``dropout`` is built,
#: never run)
BERT_OFF = {k: (key, 0.0) for k, (key, _) in BERT.items()}
T5 = {k: ("dropout_rate", 0.1) for k in ("embed_dropout", "attn_dropout", "resid_dropout",
                                         "mlp_dropout", "final_dropout")}


def bart_dropout(d: float, a: float) -> dict[str, tuple[str, float]]:
    """BART and its kin: ``dropout`` on the (normalised) embeddings and after every attention
    and fc2, ``attention_dropout`` on the probabilities (self and cross), and
    ``activation_dropout`` after the MLP's activation; ``d`` and ``a``: the class defaults."""
    return {"embed_dropout": ("dropout", d), "attn_dropout": ("attention_dropout", a),
            "resid_dropout": ("dropout", d), "mlp_dropout": ("activation_dropout", 0.0)}


GPT2_ALIASES = {"hidden_size": "n_embd", "max_position_embeddings": "n_positions",
                "num_attention_heads": "n_head", "num_hidden_layers": "n_layer"}
T5_ALIASES = {"hidden_size": "d_model", "num_attention_heads": "num_heads", "head_dim": "d_kv"}
BART_ALIASES = {"num_attention_heads": "encoder_attention_heads", "hidden_size": "d_model",
                "num_hidden_layers": "encoder_layers"}
POOLER, DENSE = Heads(base_pooler=True, cls="pooler"), Heads(base_pooler=True, cls="dense")

MODELS: dict[str, Model] = {m.name: m for m in (
    # Llama-shaped decoders (llama.py)
    Model("llama", llama.llama, dropout=ATTN),
    Model("mistral", llama.mistral, window=("all", 4096), dropout=ATTN),
    Model("ministral", llama.ministral),
    Model("ministral3", llama.ministral3),
    Model("phi3", llama.phi3, window=("all", None), dropout=ATTN),
    Model("starcoder2", llama.starcoder2, window=("all", None), dropout=ATTN),
    Model("granite", llama.granite),
    Model("smollm3", llama.smollm3),
    Model("ernie4_5", llama.ernie4_5),
    Model("seed_oss", llama.seed_oss),
    Model("hunyuan_v1_dense", llama.hunyuan_v1_dense),
    Model("glm4", llama.glm4),
    Model("stablelm", llama.stablelm),
    Model("olmo", llama.olmo, dropout=ATTN),
    Model("olmo2", llama.olmo2, dropout=ATTN),
    Model("olmo3", llama.olmo3, dropout=ATTN),
    Model("exaone4", llama.exaone4, dropout=ATTN),
    Model("cohere", llama.cohere, dropout=ATTN),
    Model("cohere2", llama.cohere2, dropout=ATTN),
    # Qwen (qwen.py)
    Model("qwen2", qwen.qwen2, window=("qwen2", 4096), dropout=ATTN),
    Model("qwen3", qwen.qwen3, window=("qwen2", 4096), dropout=ATTN),
    Model("qwen2_moe", qwen.qwen2_moe, window=("qwen2moe", 4096), dropout=ATTN),
    Model("qwen3_moe", qwen.qwen3_moe, window=("qwen3moe", 4096), dropout=ATTN,
          aliases={"num_local_experts": "num_experts"}),
    Model("qwen2_vl", qwen.qwen2_vl, vision=Vision("qwen2_vl_vision")),
    Model("qwen2_5_vl", qwen.qwen2_vl, vision=Vision("qwen2_5_vl_vision")),
    Model("qwen3_vl", qwen.qwen3_vl, vision=Vision("qwen3_vl_vision")),
    Model("qwen3_vl_moe", qwen.qwen3_vl_moe, vision=Vision("qwen3_vl_moe_vision")),
    Model("qwen3_next", qwen.qwen3_next, dropout=ATTN),
    Model("qwen3_5_text", qwen.qwen3_5_text, dropout=ATTN),
    Model("qwen3_5_moe_text", qwen.qwen3_5_moe_text, dropout=ATTN),
    Model("qwen3_5", qwen.qwen3_5),
    Model("qwen3_5_moe", qwen.qwen3_5_moe),
    # Gemma (gemma.py)
    Model("gemma", gemma.gemma, dropout=ATTN),
    Model("gemma2", gemma.gemma2, window=("gemma2", 4096), dropout=ATTN),
    Model("gemma3_text", gemma.gemma3_text, dropout=ATTN),
    Model("gemma3", gemma.gemma3, vision=Vision("siglip_vision_model", text="gemma3_text")),
    Model("gemma3n_text", gemma.gemma3n_text, dropout=ATTN),
    # mixtures of experts (moe.py, deepseek.py)
    Model("mixtral", moe.mixtral, window=("all", None), dropout=ATTN,
          aliases={"num_experts": "num_local_experts"}),
    Model("granitemoe", moe.granitemoe),
    Model("glm4_moe", moe.glm4_moe, aliases={"num_local_experts": "n_routed_experts"}),
    Model("olmoe", moe.olmoe, aliases={"num_local_experts": "num_experts"}),
    Model("phimoe", moe.phimoe),
    Model("minimax_m2", moe.minimax_m2, aliases={"num_experts": "num_local_experts"}),
    Model("dbrx", moe.dbrx, aliases={"num_attention_heads": "n_heads", "hidden_size": "d_model",
                                     "num_hidden_layers": "n_layers",
                                     "max_position_embeddings": "max_seq_len"}),
    Model("llama4_text", moe.llama4_text, dropout=ATTN),
    Model("llama4", moe.llama4),
    Model("gpt_oss", moe.gpt_oss, dropout=ATTN),
    Model("deepseek_v2", deepseek.deepseek_v2, dropout=ATTN,
          aliases={"num_experts": "n_routed_experts"}),
    Model("deepseek_v3", deepseek.deepseek_v3, dropout=ATTN,
          aliases={"num_local_experts": "n_routed_experts"}),
    # GPT-2 and its descendants (gpt.py)
    Model("gpt2", gpt.gpt2, aliases=GPT2_ALIASES, dropout={
        "embed_dropout": ("embd_pdrop", 0.1), "attn_dropout": ("attn_pdrop", 0.1),
        "resid_dropout": ("resid_pdrop", 0.1)}),
    Model("gptj", gpt.gptj, aliases=GPT2_ALIASES, dropout={
        "embed_dropout": ("embd_pdrop", 0.0), "attn_dropout": ("attn_pdrop", 0.0),
        "resid_dropout": ("resid_pdrop", 0.0)}),
    Model("codegen", gpt.codegen, aliases=GPT2_ALIASES),
    Model("gpt_bigcode", gpt.gpt_bigcode, aliases=GPT2_ALIASES),
    Model("gpt_neo", gpt.gpt_neo,
          aliases={"num_attention_heads": "num_heads", "num_hidden_layers": "num_layers"}),
    Model("gpt_neox", gpt.gpt_neox, dropout={
        "embed_dropout": ("hidden_dropout", 0.0), "attn_dropout": ("attention_dropout", 0.0),
        "resid_dropout": ("hidden_dropout", 0.0)}),
    Model("falcon", gpt.falcon, aliases={"n_embed": "hidden_size"}),
    Model("opt", gpt.opt),
    Model("bloom", gpt.bloom, aliases={"num_hidden_layers": "n_layer",
                                       "num_attention_heads": "n_head", "n_embed": "hidden_size"}),
    Model("phi", gpt.phi),
    # encoders (encoders.py)
    Model("bert", encoders.bert, dropout=BERT, heads=POOLER),
    Model("roberta", encoders.roberta, dropout=BERT, heads=DENSE),
    Model("xlm-roberta", encoders.xlm_roberta, dropout=BERT, heads=DENSE),
    Model("camembert", encoders.xlm_roberta, dropout=BERT, heads=DENSE),
    Model("distilbert", encoders.distilbert,
          # ``dropout`` on the embeddings and after the MLP only (resid_dropout_at),
          # ``attention_dropout`` on the probabilities
          dropout={"embed_dropout": ("dropout", 0.1), "attn_dropout": ("attention_dropout", 0.1),
                   "resid_dropout": ("dropout", 0.1)},
          aliases={"hidden_size": "dim", "num_attention_heads": "n_heads",
                   "num_hidden_layers": "n_layers"},
          heads=Heads(base_pooler=False, cls="dense")),
    Model("electra", encoders.electra, dropout=BERT,
          heads=Heads(base_pooler=False, cls="dense", discriminator=True)),
    Model("albert", encoders.albert, dropout=BERT_OFF, heads=POOLER),
    Model("mpnet", encoders.mpnet, dropout=BERT, heads=DENSE),
    Model("modernbert", encoders.modernbert,
          # ``embedding_dropout`` after the embedding norm, ``attention_dropout`` on the
          # probabilities and after Wo (resid_dropout_at "attn"), ``mlp_dropout`` on the gated
          # product
          dropout={"embed_dropout": ("embedding_dropout", 0.0),
                   "attn_dropout": ("attention_dropout", 0.0),
                   "resid_dropout": ("attention_dropout", 0.0),
                   "mlp_dropout": ("mlp_dropout", 0.0)},
          heads=Heads(base_pooler=False, cls="dense", norm=True)),
    Model("esm", encoders.esm,
          # BERT's places less the embeddings' (HF leaves that line commented out); its
          # token_dropout is a rescaling of masked tokens, not random dropout
          dropout={"attn_dropout": ("attention_probs_dropout_prob", 0.1),
                   "resid_dropout": ("hidden_dropout_prob", 0.1)}, heads=DENSE),
    Model("nomic_bert", encoders.nomic_bert, dropout=BERT_OFF,
          heads=Heads(base_pooler=False, cls="pooler")),
    Model("deberta-v2", encoders.deberta_v2, dropout=BERT,
          heads=Heads(base_pooler=False, cls="dense")),
    Model("longformer", encoders.longformer, dropout=BERT, heads=DENSE),
    # encoder-decoders (seq2seq.py)
    Model("t5", seq2seq.t5, dropout=T5, aliases=T5_ALIASES),
    Model("mt5", seq2seq.mt5, dropout=T5, aliases=T5_ALIASES),
    Model("umt5", seq2seq.umt5, dropout=T5, aliases=T5_ALIASES),
    Model("bart", seq2seq.bart, dropout=bart_dropout(0.1, 0.0), aliases=BART_ALIASES),
    Model("mbart", seq2seq.mbart, dropout=bart_dropout(0.1, 0.0), aliases=BART_ALIASES),
    Model("marian", seq2seq.marian, dropout=bart_dropout(0.1, 0.0), aliases=BART_ALIASES),
    Model("pegasus", seq2seq.pegasus, dropout=bart_dropout(0.1, 0.0), aliases=BART_ALIASES),
    Model("m2m_100", seq2seq.m2m_100, dropout=bart_dropout(0.1, 0.1), aliases=BART_ALIASES),
    Model("whisper", seq2seq.whisper, dropout=bart_dropout(0.0, 0.0), aliases=BART_ALIASES),
    # vision-language (vision.py)
    Model("llava", vision.vlm, vision=Vision("clip_vision_model", CLIP_LLAVA, "llama", tie=False)),
    Model("llava_next", vision.vlm,
          vision=Vision("clip_vision_model", CLIP_LLAVA, "llama", tie=False)),
    Model("paligemma", vision.vlm, vision=Vision("siglip_vision_model", dict(
        hidden_size=1152, intermediate_size=4096, patch_size=14, image_size=224,
        num_hidden_layers=27, vision_use_head=False), "gemma")),
    Model("idefics3", vision.vlm, vision=Vision("idefics3_vision", text="llama", tie=False)),
    Model("smolvlm", vision.vlm, vision=Vision("smolvlm_vision", text="llama", tie=False)),
    Model("mistral3", vision.vlm, vision=Vision("pixtral", dict(
        hidden_size=1024, intermediate_size=4096, patch_size=14, image_size=1540,
        num_hidden_layers=24), "mistral")),
    Model("internvl", vision.vlm, vision=Vision("internvl_vision", text="qwen2")),
    Model("mllama_text_model", vision.mllama_text, dropout={"attn_dropout": ("dropout", 0.0)}),
    Model("mllama", vision.mllama),
    # state-space and hybrid models (hybrids.py); LFM2 passes 0.0 as attention dropout
    # whatever its config says, Mamba has no attention
    Model("mamba", hybrids.mamba),
    Model("mamba2", hybrids.mamba2),
    Model("jamba", hybrids.jamba, dropout=ATTN, aliases={"num_local_experts": "num_experts"}),
    Model("falcon_h1", hybrids.falcon_h1, dropout=ATTN),
    Model("nemotron_h", hybrids.nemotron_h, dropout=ATTN, aliases={
        "num_local_experts": "n_routed_experts", "mamba_n_groups": "n_groups",
        "mamba_d_conv": "conv_kernel", "mamba_expand": "expand",
        "mamba_conv_bias": "use_conv_bias", "mamba_chunk_size": "chunk_size"}),
    Model("granitemoehybrid", hybrids.granitemoehybrid, dropout=ATTN),
    Model("lfm2", hybrids.lfm2),
    Model("zamba", hybrids.zamba, dropout=ATTN, aliases={"head_dim": "attention_head_dim"}),
    Model("zamba2", hybrids.zamba2, dropout=ATTN),
    Model("recurrent_gemma", hybrids.recurrent_gemma, dropout=ATTN,
          aliases={"sliding_window": "attention_window_size"}),
)}
