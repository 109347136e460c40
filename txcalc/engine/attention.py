"""The attention of a block as Ops: projections, rotary tables, q/k norms and the core,
with the variants a config selects (MLA's compressed keys and values, Longformer's global
attention, DeBERTa's disentangled scores, gpt-oss's sinks, cross-attention), and what each
core's ``.keys`` row caches when serving (``Op.kv_elements``). ``components.block`` places them
in a block; paths follow the reference model's module names (see components)."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator

from ..model.config import ModelConfig
from .ops import Op, Where, attention_core, checkpoint, dropout, elementwise, linear, norm


def _stream(stack: str) -> str:
    """Encoder blocks of an encoder-decoder model see the source tokens."""
    return "src" if stack == "encoder" else "seq"


def _pos_stream(stack: str) -> str:
    """Per-position tensors (position ids, rotary tables) of a stack: one row per position."""
    return "src_pos" if stack == "encoder" else "pos"


def _core(cfg: ModelConfig, c: str, where: Where, comp: str, qk_dim: int, v_dim: int,
          cross: bool = False) -> list[Op]:
    stack, layer = where
    q_stream = _stream(stack)
    causal = cfg.family != "encoder" and stack != "encoder" and not cross
    heads = cfg.stack_heads(stack)
    # an encoder's local layers (ModernBERT): a bidirectional window, model FLOPs only
    local = cfg.window(layer) if cfg.family == "encoder" else 0
    kv_heads = heads if cfg.is_mla else cfg.stack_kv_heads(stack)
    ops = attention_core(f"{c}core", where, f"{comp}core", heads=heads,
                          kv_heads=kv_heads, qk_dim=qk_dim,
                          v_dim=v_dim, stream=q_stream, kv_stream="src" if cross else q_stream,
                          causal=causal, window=cfg.window(layer) if causal else local,
                          dropout=cfg.attn_dropout, chunk=cfg.chunk(layer) if causal else 0,
                          sinks=cfg.attn_sinks and not cross,
                          kv_elements=_kv_elements(cfg, where, kv_heads, qk_dim, v_dim, cross))
    if cfg.sliding_chunks:  # Longformer: HF's overlapping chunks decide the executed pairs
        ops = [dataclasses.replace(op, overlap=local) for op in ops]
        if cfg.global_qkv and not cross:
            ops += global_attention(cfg, c, where, comp)
        if layer == 0:  # the padding mask every block's masked_fill reads, kept once
            ops.append(dataclasses.replace(
                elementwise(f"{c}core.pad_mask", where, f"{comp}core.pad_mask", "pad_mask",
                            ((1, "bool"),), q_stream), recompute="selective",
                act_split="whole"))
    return ops


def _kv_elements(cfg: ModelConfig, where: Where, kv_heads: int, qk_dim: int, v_dim: int,
                 cross: bool) -> int:
    """Elements one cached token adds to a layer's KV cache (``Op.kv_elements``): k and v of
    the K key/value heads; MLA's compressed latent and shared rotary key instead
    (kv_lora_rank + rope, DeepSeek-V2 arXiv:2405.04434 section 2.1.2); none in an encoder
    (nothing decodes) nor in a Gemma 3n shared-KV layer (it reads an earlier layer's cache).
    Cross-attention caches its keys and values once per source token."""
    stack, layer = where
    if cfg.family == "encoder" or stack == "encoder":
        return 0
    if cross:
        return kv_heads * (qk_dim + v_dim)
    if layer in cfg.kv_shared_layers:
        return 0
    if cfg.is_mla:
        return cfg.kv_lora_rank + cfg.qk_rope_head_dim
    return kv_heads * (qk_dim + v_dim)


def attention(cfg: ModelConfig, p: str, where: Where, name: str = "attn") -> Iterator[Op]:
    """Self- or cross-attention. Shapes: q D->H*h, k/v D->K*h, core over S_q x S_k, o H*h->D.

    Cross-attention (decoder of an encoder-decoder model) projects k and v from the encoder's
    output, so their rows are the source tokens.
    """
    stack = where[0]
    D, H, K = cfg.d_model, cfg.stack_heads(stack), cfg.stack_kv_heads(stack)
    h = cfg.stack_head_dim(stack)
    c = f"{name}."
    if cfg.is_mla and name == "attn":
        yield from mla(cfg, p + c, where, c)
        return
    cross = name == "cross_attn"
    q_stream = _stream(where[0])
    kv_stream = "src" if cross else q_stream
    gate = cfg.attn_out_gate and not cross
    yield linear(f"{p}{c}q_proj", where, c + "q_proj", D, (2 if gate else 1) * H * h,
                 cfg.qkv_bias, stream=q_stream, tp="colwise")
    # cross-attention: every decoder block reads the same encoder output, saved once (block 0)
    k = linear(f"{p}{c}k_proj", where, c + "k_proj", D, K * h,
               cfg.qkv_bias and cfg.k_proj_bias, stream=kv_stream,
               shares_input=not cross or where[1] > 0, tp="colwise")
    v = linear(f"{p}{c}v_proj", where, c + "v_proj", D, K * h, cfg.qkv_bias, stream=kv_stream,
               shares_input=True, tp="colwise")
    if cross and cfg.encoder_states_given:  # encoder states given as input: no dX for them
        k, v = (dataclasses.replace(op, input_grad=False) for op in (k, v))
    yield k
    yield v
    if cfg.global_qkv and not cross:
        yield from global_qkv(cfg, p + c, where, c)
    if not cross and where[1] == _first_rotary(cfg, where[0]):
        yield rotary(p + c, where, c, h, _pos_stream(where[0]))
    if not cross:
        yield from qk_norms(cfg, p + c, where, c)
    yield from _core(cfg, p + c, where, c, h, h, cross)
    if cfg.attn_sinks and not cross:  # gpt-oss: one learned logit per head, no matmul
        yield Op(f"{p}{c}sinks", "sinks", where[0], where[1], c + "sinks", cfg.n_heads,
                 d_in=cfg.n_heads, d_out=cfg.n_heads, tp="colwise", act_split="tp",
                 recompute="full")
    if cfg.rel_span and not cross:
        yield from disentangled(cfg, p + c, where, c)
    if gate:  # Qwen3-Next: core * sigmoid(gate); the product keeps both operands
        yield dataclasses.replace(
            elementwise(f"{p}{c}out_gate", where, c + "out_gate", "activation",
                        ((2 * H * h, "a"),), q_stream), tp="colwise", act_split="tp")
    yield linear(f"{p}{c}o_proj", where, c + "o_proj", H * h, D, cfg.out_bias, stream=q_stream,
                 tp="rowwise")
    if cfg.resid_dropout and cfg.resid_dropout_at != "mlp":
        yield dropout(f"{p}{c}dropout", where, c + "dropout", D, q_stream)


def _global_stream(cfg: ModelConfig, name: str) -> str:
    """Longformer's global streams (``Workload.global_count``): the sequence classifier's
    carry ``_cls`` (at least one global token, the first)."""
    return name + ("_cls" if cfg.head == "seq_cls" else "")


def global_qkv(cfg: ModelConfig, c: str, where: Where, comp: str) -> Iterator[Op]:
    """Longformer's global attention projections (query_global, key_global, value_global:
    D -> D with bias), which HF runs only when some token has global attention
    (``global_attention_mask``; ``Workload.global_tokens`` = g per sequence, the sequence
    classifier's first token when none is given): query_global over the g global rows,
    key_global and value_global over every token (``_compute_global_attn_output_from_hidden``).
    With g = 0 (LongformerModel, ForMaskedLM and ForTokenClassification by default) they hold
    parameters but cost no FLOPs, save nothing and get no gradient, so no optimizer state
    (``memory.unreached_untrained``)."""
    D = cfg.d_model
    for name, stream in (("q_global", "global"), ("k_global", "global_seq"),
                         ("v_global", "global_seq")):
        op = linear(f"{c}{name}", where, comp + name, D, D, True,
                    stream=_global_stream(cfg, stream), shares_input=name != "q_global",
                    tp="colwise")
        if name == "q_global":  # per global token: the block's int64 indices of the global
            # tokens (HF ``_get_global_attn_indices``: two nonzero() results, (batch, position)
            # and (batch, slot) pairs), read by the gathers into q_global's input and after
            op = dataclasses.replace(op, saved=op.saved + ((4, "i64"),))
        yield op


def global_attention(cfg: ModelConfig, c: str, where: Where, comp: str) -> list[Op]:
    """Longformer's global attention (Beltagy et al. 2020, arXiv:2004.05150, section 3.1; HF
    ``LongformerSelfAttention`` with g tokens of global attention per sequence, S the padded
    length, per head of width h):

        op                          | what                                   | pairs per head
        ----------------------------|----------------------------------------|---------------
        attn.core.to_global.scores  | every query against the g global keys, | S x g
                                    |   concatenated to its 2w + 1 band      |
                                    |   scores (one softmax over both)       |
        attn.core.to_global.context | those probabilities x the g values     | S x g
        attn.global_core.scores     | q_global (g rows) against k_global     | g x S
                                    |   (every token), its own fp32 softmax  |
        attn.global_core.context    | x v_global; written over the g rows of | g x S
                                    |   the local output                     |

    All executed and counted as model FLOPs (every pair is attended). The local band still
    runs for the global rows (HF overwrites them), and a global key inside a band is masked
    there, not skipped: the band's executed FLOPs do not change."""
    H, h = cfg.n_heads, cfg.head_dim
    g, keys = _global_stream(cfg, "global"), _global_stream(cfg, "global_seq")
    core = dict(heads=H, kv_heads=H, qk_dim=h, v_dim=h, causal=False, window=0,
                dropout=cfg.attn_dropout)
    # the keys op is the band's (the same k and v): only the two matmuls
    scores, _, context = attention_core(f"{c}core.to_global", where, f"{comp}core.to_global",
                                        stream="seq", kv_stream=g, **core)
    return [scores, context] + attention_core(f"{c}global_core", where, f"{comp}global_core",
                                              stream=g, kv_stream=keys, **core)


def _first_rotary(cfg: ModelConfig, stack: str) -> int:
    """The block whose op holds the rotary tables (computed once per forward, shared by all
    rotary layers): the first block that applies them; -1 when none does."""
    depth = dict(cfg.stacks)[stack]
    return next((i for i in range(depth) if cfg.rotary(i)), -1)


def qk_norms(cfg: ModelConfig, c: str, where: Where, comp: str) -> Iterator[Op]:
    """Norms on q and k after their projections.

        qk_norm  | over        | scale                 | rows per token | models
        ---------|-------------|-----------------------|----------------|------------------
        head     | h, per head | h (shared by heads)   | H (q), K (k)   | Qwen3, Gemma 3
        per_head | h, per head | H*h (q), K*h (k)      | H, K           | Cohere
        full     | H*h, K*h    | H*h, K*h              | 1              | OLMo 2
        l2       | h, per head | none (rotary layers)  | H, K           | Llama 4

    A per-head LayerNorm with its own scale per head normalises without a scale, then
    multiplies by the (heads, h) scale, which saves the normalised input too.
    """
    mode = cfg.qk_norm_at(where[1])
    if mode == "none":
        return
    stack = where[0]
    H, K, h = cfg.stack_heads(stack), cfg.stack_kv_heads(stack), cfg.stack_head_dim(stack)
    for name, n in (("q_norm", H), ("k_norm", K)):
        width, rows = (n * h, 1) if mode == "full" else (h, n)
        op = norm(f"{c}{name}", where, comp + name, width,
                  "rmsnorm" if mode == "l2" else cfg.norm_type, cfg.norm_bias,
                  cfg.norm_affine and mode != "l2", _stream(where[0]))
        saved, extra = op.saved, {}
        if mode == "per_head":
            # a (heads, h) scale (and shift), split with the heads under TP
            extra = dict(params=op.params * n, heads=n, tp="colwise")
            if cfg.norm_type == "layernorm" and cfg.norm_affine:
                saved = saved + ((h, "a"),)
        # inside the TP region: the heads split over t
        fused = None if op.saved_fused is None or mode == "per_head" else \
            tuple((w * rows, tag) for w, tag in op.saved_fused)
        yield dataclasses.replace(op, saved=tuple((w * rows, tag) for w, tag in saved),
                                  act_split="tp", saved_fused=fused, **extra)


def disentangled(cfg: ModelConfig, c: str, where: Where, comp: str) -> Iterator[Op]:
    """DeBERTa's relative terms (He et al. 2020, arXiv:2006.03654, eq. 4; HF DebertaV2):
    the 2 x span relative embeddings are projected to keys (c2p) and queries (p2c) in every
    block, by q_proj/k_proj (share_att_key: their weights, no new parameters) or by their own
    biased pos_key_proj / pos_query_proj; then each query (c2p) and each key (p2c) row is
    scored against all 2 x span positions.

        op                 | rows             | FLOPs
        -------------------|------------------|----------------------------------
        attn.pos_q_proj    | 2 x span         | 2 * 2span * D * H*h (no batch)
        attn.pos_k_proj    | 2 x span         | 2 * 2span * D * H*h
        attn.c2p / p2c     | B x S            | 2 * B*S * H * 2span * h

    With share_att_key HF projects both even when one term is off: the unused projection
    runs forward only (no gradient reaches it; ``trainable=False`` on a tied op: no backward).

    Saved for backward (reference/model.py ``disentangled_scores``, HF's order of operations):
    the normalised relative embeddings (2span x D), once per forward, by block 0's first
    projection in use (without ``rel_norm`` they are the table itself: a parameter), or under
    full recompute as an input of every block's checkpoint (counted once, in block 0); per
    term (``Op.saved_bytes`` of rel_scores) the projected positions repeated per sequence, the
    gather's int64 S x S index and its input (B x H x S x 2span, not under selective)."""
    D, H, h, rows = cfg.d_model, cfg.n_heads, cfg.head_dim, 2 * cfg.rel_span
    projections = (("pos_q_proj", cfg.rel_share_key or cfg.rel_p2c, cfg.rel_p2c),
                   ("pos_k_proj", cfg.rel_share_key or cfg.rel_c2p, cfg.rel_c2p))
    used = cfg.rel_c2p or cfg.rel_p2c
    first = where[1] == 0 and cfg.rel_norm and used
    if first:
        yield dataclasses.replace(checkpoint(f"{c}rel_input", where, comp + "rel_input",
                                             ("full",), ((D, "a"),)), fixed_rows=rows)
    # HF's pos_dropout (hidden_dropout_prob) on the embeddings in every block: its mask, and
    # the dropped copy the projections keep (the normalised table is then kept by nobody)
    drop = cfg.resid_dropout > 0 and used
    if drop:
        yield dataclasses.replace(dropout(f"{c}pos_dropout", where, comp + "pos_dropout", D,
                                          extra=((D, "a"),)), fixed_rows=rows)
    for name, built, in_use in projections:
        if not built:
            continue
        op = linear(f"{c}{name}", where, comp + name, D, H * h, cfg.qkv_bias,
                    tied=cfg.rel_share_key, shares_input=True, tp="colwise")
        if cfg.rel_share_key:  # q_proj's / k_proj's weights and biases
            op = dataclasses.replace(op, params=0, bias=False)
        if not in_use:  # forward only (share_att_key): its output feeds nothing
            op = dataclasses.replace(op, trainable=False, input_grad=False)
        yield dataclasses.replace(op, fixed_rows=rows, saved=((D, "undropped" if drop else "a"),)
                                  if first and in_use else ())
        first = first and not in_use
    for name, on in (("c2p", cfg.rel_c2p), ("p2c", cfg.rel_p2c)):
        if on:
            yield Op(f"{c}{name}", "rel_scores", where[0], where[1], comp + name, d_in=h,
                     heads=H, fixed_rows=rows, recompute="selective", tp="colwise",
                     act_split="tp")


def mla(cfg: ModelConfig, c: str, where: Where, comp: str = "attn.") -> Iterator[Op]:
    """Multi-head latent attention (DeepSeek-V2, arXiv:2405.04434, section 2.1).

    q: D -> q_lora (RMSNorm) -> H*(nope+rope), or D -> H*(nope+rope) without q compression;
    kv: D -> kv_lora + rope (the cached latent plus the shared rotary key), RMSNorm on the
    latent, kv_lora -> H*(nope + v); o: H*v -> D.
    """
    D, H = cfg.d_model, cfg.n_heads
    qk = cfg.qk_nope_head_dim + cfg.qk_rope_head_dim
    if cfg.q_lora_rank:
        yield linear(f"{c}q_a_proj", where, comp + "q_a_proj", D, cfg.q_lora_rank, cfg.qkv_bias)
        yield norm(f"{c}q_a_norm", where, comp + "q_a_norm", cfg.q_lora_rank, "rmsnorm",
                   False, True)
        yield linear(f"{c}q_b_proj", where, comp + "q_b_proj", cfg.q_lora_rank, H * qk, False,
                     tp="colwise")
    else:
        yield linear(f"{c}q_proj", where, comp + "q_proj", D, H * qk, False, tp="colwise")
    # kv_a_proj reads the same input as the query path, already saved there
    yield linear(f"{c}kv_a_proj", where, comp + "kv_a_proj", D,
                 cfg.kv_lora_rank + cfg.qk_rope_head_dim, cfg.qkv_bias, shares_input=True)
    if where[1] == _first_rotary(cfg, where[0]):
        yield rotary(c, where, comp, cfg.qk_rope_head_dim, _pos_stream(where[0]))
    yield norm(f"{c}kv_a_norm", where, comp + "kv_a_norm", cfg.kv_lora_rank, "rmsnorm",
               False, True)
    yield linear(f"{c}kv_b_proj", where, comp + "kv_b_proj", cfg.kv_lora_rank,
                 H * (cfg.qk_nope_head_dim + cfg.v_head_dim), False, tp="colwise")
    yield from _core(cfg, c, where, comp, qk, cfg.v_head_dim)
    yield linear(f"{c}o_proj", where, comp + "o_proj", H * cfg.v_head_dim, D, cfg.out_bias,
                 tp="rowwise")
    if cfg.resid_dropout and cfg.resid_dropout_at != "mlp":
        yield dropout(f"{c}dropout", where, comp + "dropout", D)


def rotary(c: str, where: Where, comp: str, width: int, stream: str = "pos") -> Op:
    """Rotary tables: cos and sin, one row per position, computed once and shared by all
    layers (so counted in block 0)."""
    return elementwise(f"{c}rotary", where, comp + "rotary", "rotary",
                       ((width, "a"), (width, "a")), stream=stream)
