"""The model as a list of named Ops, in forward order: embeddings, blocks, final norm, head.

Each function below yields the Ops of one component; ``model_ops`` composes them. Paths follow
the reference model's module names:

    embed.tokens  embed.positions  embed.token_types  embed.norm  embed.proj_in
    [encoder.|decoder.]rel_bias                      T5 relative-position bias (block 0)
    [stack.]layers.{i}.attn_norm / attn.{q,k,v,o}_proj / attn.{q,k}_norm
                      attn.{q_a_proj,q_a_norm,q_b_proj,kv_a_proj,kv_a_norm,kv_b_proj}  (MLA)
                      attn.sinks                                       (gpt-oss)
                      cross_attn_norm / cross_attn.{q,k,v,o}_proj      (decoder of enc-dec)
                      mlp_norm / mlp.{gate,up,down}_proj
                      moe.router / moe.experts.{gate,up,down}_proj / moe.shared.* / moe.shared_gate
                      attn_post_norm / mlp_post_norm        (sandwich and post_sub norms)
    [stack.]final_norm   proj_out   lm_head   pooler
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Iterator

from . import mixers
from ..model.config import ModelConfig
from .attention import _pos_stream, _stream, attention
from .ops import (Op, Where, attention_core, checkpoint, dropout, elementwise, embedding,
                  linear, norm)


def _prefix(stack: str) -> str:
    return f"{stack}." if stack else ""


def _norm(cfg: ModelConfig, path: str, where: Where, component: str, width: int) -> Op:
    return norm(path, where, component, width, cfg.norm_type, cfg.norm_bias, cfg.norm_affine,
                _stream(where[0]))


def embeddings(cfg: ModelConfig) -> Iterator[Op]:
    """Token table (shared by both stacks of an encoder-decoder model), then per-stack extras."""
    top: Where = ("", -1)
    yield embedding("embed.tokens", top, "embed.tokens", cfg.vocab_size + cfg.embed_extra_rows,
                    cfg.embed_dim, tp="vocab")
    if cfg.embed_dim != cfg.d_model and not cfg.embed_factorised:
        # OPT-350m: embeddings of width 512 projected to 1024
        yield linear("embed.proj_in", top, "embed.proj_in", cfg.embed_dim, cfg.d_model, False)
    if cfg.type_vocab_size:
        yield embedding("embed.token_types", top, "embed.token_types", cfg.type_vocab_size,
                        _embed_width(cfg))
    if cfg.altup_inputs:
        yield from gemma3n_inputs(cfg)
    if cfg.vision_params:  # a VLM's vision tower and projector: parameters only
        yield Op("vision", "params", "", -1, "vision", params=cfg.vision_params,
                 d_in=cfg.vision_params, stream="first", placement="pre")


def stack_inputs(cfg: ModelConfig, stack: str) -> Iterator[Op]:
    """Per-stack position table, embedding norm and relative-position bias."""
    p, where = _prefix(stack), (stack, -1)
    if stack == "encoder" and cfg.audio_mels:
        yield from audio_stem(cfg)
    elif stack == "encoder":  # the shared token table (and projection) also serve the source
        yield elementwise("embed.tokens", ("", -1), "embed.tokens", "token_ids",
                          ((1, "i64"),), stream="src")
        if cfg.embed_dim != cfg.d_model:
            yield linear("embed.proj_in", ("", -1), "embed.proj_in", cfg.embed_dim, cfg.d_model,
                         False, tied=True, stream="src")
        if cfg.type_vocab_size:
            yield elementwise("embed.token_types", ("", -1), "embed.token_types", "token_ids",
                              ((1, "i64"),), stream="src")
    width = _embed_width(cfg)
    if cfg.pos_type == "learned" and stack == "encoder" and cfg.audio_mels:
        # Whisper: a frozen (sinusoidal) table (requires_grad False in HF): nothing saved, no
        # gradient, no optimizer states (trainable=False: memory and the planner follow it)
        yield dataclasses.replace(
            embedding(f"{p}embed.positions", where, "embed.positions",
                      cfg.encoder_max_position, width, stream=_pos_stream(stack)), saved=(),
            trainable=False)
    elif cfg.pos_type == "learned":
        yield embedding(f"{p}embed.positions", where, "embed.positions",
                        cfg.max_position + cfg.position_offset, width,
                        stream=_pos_stream(stack))
    if cfg.sinusoidal_table == "param":  # Marian, Pegasus: a frozen nn.Embedding per stack
        # frozen in HF (requires_grad False): nothing saved, no gradient, no optimizer states
        yield dataclasses.replace(
            embedding(f"{p}embed.positions", where, "embed.positions",
                      cfg.max_position + cfg.position_offset, width,
                      stream=_pos_stream(stack)), saved=(), trainable=False)
    if cfg.embed_norm:
        yield _norm(cfg, f"{p}embed.norm", where, "embed.norm", width)
    if cfg.embed_dropout:
        yield dropout(f"{p}embed.dropout", where, "embed.dropout", width, _stream(stack))
    if cfg.embed_factorised:
        # ALBERT, ELECTRA: the normalised embedding is projected to the residual width
        yield linear("embed.proj_in", where, "embed.proj_in", cfg.embed_dim, cfg.d_model, True)
    if cfg.rel_span:  # DeBERTa: the relative-position embeddings, normalised once per forward
        yield dataclasses.replace(embedding("rel_embed", where, "rel_embed", 2 * cfg.rel_span,
                                            cfg.d_model), saved=())
    if cfg.rel_norm:  # HF builds it with norm_rel_ebd even without relative attention
        # normalises the table (a parameter, not saved): its fp32 mean and 1/std per row
        op = norm("rel_norm", where, "rel_norm", cfg.d_model, "layernorm", True, True)
        read = cfg.rel_span and (cfg.rel_c2p or cfg.rel_p2c)  # else no gradient flows to it
        yield dataclasses.replace(op, saved=((1, "f32"), (1, "f32")) if read else (),
                                  fixed_rows=2 * cfg.rel_span)
    if (cfg.pos_type == "relative_bias" and not cfg.rel_bias_every_layer) or cfg.extra_rel_bias:
        # T5, MPNet: one bias table per stack, used by every block
        # saves the int64 bucket id of every (query, key) pair (Op.saved_bytes), not per token
        s = _stream(stack)
        yield dataclasses.replace(
            embedding(f"{p}rel_bias", where, "rel_bias", cfg.relative_buckets,
                      cfg.stack_heads(stack), stream=s), saved=(), kv_stream=s)


def audio_stem(cfg: ModelConfig) -> Iterator[Op]:
    """Whisper's encoder input: two 1-D convolutions over the log-mel frames, each followed by
    a GELU (Radford et al. 2022, arXiv:2212.04356, section 2.2). A convolution of kernel k is a
    matmul of k * C_in -> C_out per output frame (what FlopCounterMode counts).

        op                | rows                 | shapes          | backward
        ------------------|----------------------|-----------------|-------------------------
        encoder.conv1     | 2 x S_src mel frames | 3 * mels -> D   | weight gradient only (the
                          |                      |                 |   mels need no gradient)
        encoder.conv1_act |                      |                 | saves its input (D)
        encoder.conv2     | S_src (stride 2)     | 3 * D -> D      | 2 x forward
        encoder.conv2_act |                      |                 | saves its input (D)
    """
    where, D, m = ("encoder", -1), cfg.d_model, cfg.audio_mels
    conv1 = linear("encoder.conv1", where, "conv1", 3 * m, D, True, stream="mel")
    yield dataclasses.replace(conv1, saved=((m, "a"),), input_grad=False)
    yield elementwise("encoder.conv1_act", where, "conv1_act", "activation", ((D, "a"),),
                      stream="mel")
    conv2 = linear("encoder.conv2", where, "conv2", 3 * D, D, True, stream="src")
    yield dataclasses.replace(conv2, saved=((2 * D, "a"),))  # its input: two frames per row
    yield elementwise("encoder.conv2_act", where, "conv2_act", "activation", ((D, "a"),),
                      stream="src")


def _embed_width(cfg: ModelConfig) -> int:
    """Width of the position / token-type tables and the embedding norm: embed_dim when the
    embedding is factorised before the projection (ALBERT, ELECTRA), else d_model."""
    return cfg.embed_dim if cfg.embed_factorised else cfg.d_model


def mlp(cfg: ModelConfig, c: str, comp: str, where: Where, d_ff: int, bias: bool,
        instances: int = 1, active: int = 1, shares_input: bool = False) -> Iterator[Op]:
    """Dense MLP: gated (gate and up D->F, act(gate) * up, down F->D) or plain (up, act, down).

    Saved by the activation: its input (gelu_new, written out elementwise, keeps four F-wide
    tensors); ReLU: its output, which is also down's input (nothing of its own); gated: act
    input, act output and up output (the product's two operands), ReGLU one fewer (the ReLU's
    output is the product's operand). Dropout inside the MLP (T5, OPT, BART) adds its mask,
    and a ReLU's output then is no longer down's input.
    """
    D = cfg.d_model
    kw = {"instances": instances, "active": active, "stream": _stream(where[0])}
    if cfg.gated:
        yield linear(f"{c}gate_proj", where, comp + "gate_proj", D, d_ff, bias,
                     shares_input=shares_input, tp="colwise", **kw)
    yield linear(f"{c}up_proj", where, comp + "up_proj", D, d_ff, bias,
                 shares_input=shares_input or cfg.gated, tp="colwise", **kw)
    relu = cfg.activation == "relu"
    if cfg.gated:
        n_saved = 2 if cfg.activation == "reglu" else 3
    else:
        n_saved = {"gelu_new": 4, "relu": 0}.get(cfg.activation, 1)
    # fused (torch.compile, Megatron's bias_swiglu / TE): a gated product keeps gate and up
    # only, an elementwise gelu_new its input only
    n_fused = 2 if cfg.gated and cfg.activation != "reglu" else \
        1 if cfg.activation == "gelu_new" else None
    yield dataclasses.replace(
        elementwise(f"{c}act", where, comp + "act", "activation",
                    ((n_saved * d_ff * active, "a"),), stream=kw["stream"]),
        saved_fused=None if n_fused is None else ((n_fused * d_ff * active, "a"),))
    if cfg.mlp_dropout and instances == 1:
        # inside the MLP's TP region: split over t
        yield dataclasses.replace(
            dropout(f"{c}act_dropout", where, comp + "act_dropout", d_ff, kw["stream"],
                    extra=((d_ff, "a"),) if relu else ()), act_split="tp")
    yield linear(f"{c}down_proj", where, comp + "down_proj", d_ff, D, bias, tp="rowwise", **kw)


def moe(cfg: ModelConfig, c: str, where: Where, shares_input: bool = False) -> Iterator[Op]:
    """Router D->E, E routed experts (k active per token), optional shared MLP and its gate.

    Saved besides the matmul inputs (per token, k = top_k): the router's top-k expert ids
    (k int64) and the softmax over the k chosen fp32 logits (k fp32); dispatch/combine
    (``moe.experts``): the token index of each routed row and the index that puts rows back in
    (token, slot) order (2k int64), the experts' outputs and the routing weights that multiply
    them (k*D, and k: the router's fp32 weights cast to the activation dtype); the shared
    gate: its sigmoid (1) and the shared MLP's output (D). Every consumer of the block input
    (router, shared MLP, shared gate) shares one saved copy.
    """
    D, k = cfg.d_model, cfg.top_k
    router = linear(f"{c}router", where, "moe.router", D, cfg.n_experts, cfg.router_bias,
                    shares_input=shares_input)
    yield dataclasses.replace(router, saved=router.saved + ((k, "i64"), (k, "f32")))
    yield elementwise(f"{c}experts", where, "moe.experts", "moe_combine",
                      ((2 * k, "i64"), (k * D, "a"), (k, "cast")))
    yield from mlp(cfg, f"{c}experts.", "moe.experts.", where, cfg.moe_d_ff, cfg.expert_bias,
                   cfg.n_experts, cfg.top_k)
    if cfg.shared_d_ff:  # the shared MLP is biased like the dense MLP (DeepSeek-V2 mlp_bias)
        yield from mlp(cfg, f"{c}shared.", "moe.shared.", where, cfg.shared_d_ff, cfg.mlp_bias,
                       shares_input=True)
    if cfg.shared_expert_gate:
        gate = linear(f"{c}shared_gate", where, "moe.shared_gate", D, 1, False, shares_input=True)
        yield dataclasses.replace(gate, saved=((1, "a"), (D, "a")))


def block(cfg: ModelConfig, stack: str, i: int) -> Iterator[Op]:
    """One Transformer block: norms, self-attention, cross-attention (decoder of enc-dec), MLP."""
    if cfg.mixers or cfg.ffns:
        yield from hybrid_block(cfg, stack, i)
        return
    if i in cfg.cross_layers:
        yield from gated_cross_block(cfg, stack, i)
        return
    if cfg.altup_inputs:
        yield from gemma3n_block(cfg, stack, i)
        return
    if cfg.owns_params(i):
        yield from _block(cfg, stack, i)
    else:  # ALBERT: this block runs the weights of its group's first block
        yield from (_reused(op) for op in _block(cfg, stack, i))


def _reused(op: Op) -> Op:
    """An op that runs weights held by another op: same FLOPs and saved tensors, no
    parameters (a Linear marked tied: its weight and bias belong to the owning block)."""
    return dataclasses.replace(op, params=0, tied=op.tied or op.kind == "linear", bias=False)


def _block(cfg: ModelConfig, stack: str, i: int) -> Iterator[Op]:
    p, where = f"{_prefix(stack)}layers.{i}.", (stack, i)
    D = cfg.d_model
    yield from checkpoints(cfg, stack, i)
    if cfg.rel_bias_every_layer:  # UMT5: every block looks up its own bias table
        s = _stream(stack)
        yield dataclasses.replace(
            embedding(f"{p}rel_bias", where, "rel_bias", cfg.relative_buckets,
                      cfg.stack_heads(stack), stream=s), saved=(), kv_stream=s)
    post_sub = cfg.norm_position == "post_sub"  # OLMo 2: norms on the outputs only
    if not post_sub and (cfg.first_attn_norm or i > 0):
        yield _norm(cfg, p + "attn_norm", where, "attn_norm", D)
    yield from attention(cfg, p, where)
    if cfg.norm_position in ("sandwich", "post_sub"):
        yield _norm(cfg, p + "attn_post_norm", where, "attn_post_norm", D)
    if stack == "decoder":
        yield _norm(cfg, p + "cross_attn_norm", where, "cross_attn_norm", D)
        yield from attention(cfg, p, where, name="cross_attn")
    if not (cfg.parallel_block and cfg.parallel_norms == 1 or post_sub):
        op = _norm(cfg, p + "mlp_norm", where, "mlp_norm", D)
        if cfg.parallel_block:
            # NeoX: both norms read the block input; attn_norm already saved it (LayerNorm), or
            # its fp32 copy, which in an fp32 model is the input itself (RMSNorm)
            first = () if cfg.norm_type == "layernorm" else ((D, "up32"),)
            op = dataclasses.replace(op, saved=first + op.saved[1:])
        yield op
    # a parallel block with one norm feeds the MLP the input q_proj already saved
    shared_in = cfg.parallel_block and cfg.parallel_norms == 1
    ffn = "moe." if stack != "encoder" and cfg.is_moe_layer(i) else "mlp."
    if ffn == "moe.":
        yield from moe(cfg, p + "moe.", where, shares_input=shared_in)
    else:
        yield from mlp(cfg, p + "mlp.", "mlp.", where, cfg.stack_d_ff(stack), cfg.mlp_bias,
                       shares_input=shared_in)
    if cfg.resid_dropout and cfg.resid_dropout_at != "attn":
        yield dropout(f"{p}{ffn}dropout", where, ffn + "dropout", D, _stream(stack))
    if cfg.norm_position in ("sandwich", "post_sub"):
        yield _norm(cfg, p + "mlp_post_norm", where, "mlp_post_norm", D)


def hybrid_block(cfg: ModelConfig, stack: str, i: int) -> Iterator[Op]:
    """A block of a hybrid or state-space model (``cfg.mixers``/``cfg.ffns``): a pre-norm
    token mixer (attention, Mamba, Mamba-2, or attention and Mamba-2 side by side on one
    norm: Falcon-H1) and a pre-norm FFN (MLP, MoE), either of which may be absent."""
    p, where = f"{_prefix(stack)}layers.{i}.", (stack, i)
    D, kind, ffn = cfg.d_model, cfg.mixer(i), cfg.ffn(i)
    yield from checkpoints(cfg, stack, i)
    if i in cfg.shared_attn_layers:  # Zamba: the shared attention block feeds the mixer
        yield from mixers.shared_block(cfg, p, where)
    if kind != "none":
        yield _norm(cfg, p + "attn_norm", where, "attn_norm", D)
    if kind in ("attention", "hybrid"):
        yield from attention(cfg, p, where)
    if kind == "mamba":
        yield from mixers.mamba(cfg, p, where)
    elif kind in ("mamba2", "hybrid"):
        yield from mixers.mamba2(cfg, p, where, shares_input=kind == "hybrid")
    elif kind == "conv":
        yield from mixers.short_conv(cfg, p, where)
    elif kind == "gdn":
        yield from mixers.gated_deltanet(cfg, p, where)
    elif kind == "rglru":
        yield from mixers.rglru_block(cfg, p, where)
    if ffn == "none":
        return
    yield _norm(cfg, p + "mlp_norm", where, "mlp_norm", D)
    if ffn == "moe":
        yield from moe(cfg, p + "moe.", where)
    else:
        yield from mlp(cfg, p + "mlp.", "mlp.", where, cfg.d_ff, cfg.mlp_bias)


def gated_cross_block(cfg: ModelConfig, stack: str, i: int) -> Iterator[Op]:
    """Mllama's gated cross-attention block (Llama 3.2 Vision; HF
    ``MllamaCrossAttentionDecoderLayer``), in place of self-attention in the layers
    ``cfg.cross_layers``. Keys and values come from the vision states: src rows (one image:
    ``cfg.image_states``) of width D, given as an input that needs no gradient here (the
    vision tower's and projector's work is not modelled, as for the ``vision`` op).

        op                  | rows | shapes / operation             | params  | saved per row
        --------------------|------|--------------------------------|---------|----------------
        attn_norm           | S    | RMSNorm over D                 | D       | as any norm
        cross_attn.q_proj   | S    | D -> H h                       | D H h   | its input
        cross_attn.k_proj   | src  | D -> K h                       | D K h   | the vision
        cross_attn.v_proj   | src  | D -> K h (same input)          | D K h   |   states, once
        cross_attn.q_norm   | S    | RMSNorm over h, per query head | h       | per head
        cross_attn.k_norm   | src  | RMSNorm over h, per key head   | h       | per head
        cross_attn.core     | S x src, no mask, no rotary       | -       | as attention
        cross_attn.o_proj   | S    | H h -> D                       | H h D   | its input
        attn_gate           | S    | x + tanh(g) * attn             | 1       | attn (D); tanh(g)
        mlp_norm, mlp.*     | S    | the dense MLP                  |         | as the MLP
        mlp_gate            | S    | x + tanh(g) * mlp              | 1       | mlp (D); tanh(g)

    Under full recompute the checkpoint keeps the vision states alive (at the first cross
    layer, as an encoder-decoder's first decoder block keeps the encoder output)."""
    p, where, D = f"{_prefix(stack)}layers.{i}.", (stack, i), cfg.d_model
    H, K, h = cfg.n_heads, cfg.n_kv_heads, cfg.head_dim
    first = i == min(cfg.cross_layers)
    yield from checkpoints(cfg, stack, i)
    if first:
        yield checkpoint(p[:-1], where, "checkpoint.encoder_output", ("full",), ((D, "a"),),
                         stream="src")
    yield _norm(cfg, p + "attn_norm", where, "attn_norm", D)
    c = "cross_attn."
    yield linear(f"{p}{c}q_proj", where, c + "q_proj", D, H * h, False, tp="colwise")
    for name, shares in (("k_proj", not first), ("v_proj", True)):
        yield dataclasses.replace(
            linear(f"{p}{c}{name}", where, c + name, D, K * h, False, stream="src",
                   shares_input=shares, tp="colwise"), input_grad=False)
    for name, n, s in (("q_norm", H, "seq"), ("k_norm", K, "src")):
        op = norm(f"{p}{c}{name}", where, c + name, h, "rmsnorm", False, True, s)
        yield dataclasses.replace(
            op, saved=tuple((w * n, tag) for w, tag in op.saved), act_split="tp",
            saved_fused=None if op.saved_fused is None else
            tuple((w * n, tag) for w, tag in op.saved_fused))
    yield from attention_core(f"{p}{c}core", where, f"{c}core", heads=H, kv_heads=K, qk_dim=h,
                              v_dim=h, stream="seq", kv_stream="src", causal=False, window=0,
                              dropout=cfg.attn_dropout, kv_elements=2 * K * h)
    yield linear(f"{p}{c}o_proj", where, c + "o_proj", H * h, D, False, tp="rowwise")
    yield _tanh_gate(p + "attn_gate", where, "attn_gate", D)
    yield _norm(cfg, p + "mlp_norm", where, "mlp_norm", D)
    yield from mlp(cfg, p + "mlp.", "mlp.", where, cfg.d_ff, cfg.mlp_bias)
    yield _tanh_gate(p + "mlp_gate", where, "mlp_gate", D)


def text_only(cfg: ModelConfig, ops) -> tuple[Op, ...]:
    """``ops`` of a step without images: HF's MllamaTextModel skips each gated cross-attention
    block entirely when it is given no vision states ("For text-only path we should skip cross
    attention layers": ``if is_cross_attention_layer and cross_attention_states is None and
    is_cross_attention_cache_empty: continue``), so the ops of ``cfg.cross_layers`` keep their
    parameters and run nothing (stream SKIPPED: no rows, no FLOPs, no time; nothing saved,
    not even what an op saves once per forward, the gates' tanh(g)); nor does the ``vision``
    op (MllamaModel runs its vision tower and projector only ``if pixel_values is not
    None``). None of their parameters gets a gradient (memory.unreached_untrained)."""
    from .workload import SKIPPED
    return tuple(dataclasses.replace(op, stream=SKIPPED, kv_stream=SKIPPED if op.kv_stream
                                     else "", saved_once=()) if op.layer in cfg.cross_layers
                 or op.path == "vision" else op for op in ops)


def step_ops(cfg: ModelConfig, ops, work) -> tuple[Op, ...]:
    """The ops that run in a step of ``work``: all of them, but ``text_only`` ones when the
    batch holds no vision states (``Workload.text_only``) on a model with cross-attention
    blocks. Every count of a step reads its ops through here (count_flops, TrainingMemory,
    the planner's TrainSetting): FLOPs, bytes saved for backward and time skip the blocks; the
    blocks' parameters stay, with no gradient or optimizer state in the step (torch leaves a
    parameter that takes no part in it .grad None: memory.unreached_untrained)."""
    return text_only(cfg, ops) if work.text_only and cfg.cross_layers else tuple(ops)


def gemma3n_inputs(cfg: ModelConfig) -> Iterator[Op]:
    """Gemma 3n's inputs besides the token table (HF ``Gemma3nTextModel``): the per-layer
    embeddings (a table of per_layer_vocab rows of L x P, plus a projection of the token
    embedding D -> L x P normalised over each layer's P) and the AltUp streams 1..A-1, each a
    Linear(D, D) of the embedding. Saved per token: the int64 ids of both tables, the
    embedding once (D, by per_layer_proj; the AltUp projections read the same tensor), the
    norm's statistics for each of the L layers; the per-layer inputs themselves are kept by
    block 0's product (``gemma3n_block``). HF's elementwise scalings (the embedding scales,
    the streams' magnitude matching) are not modelled: reference/model.py leaves them out
    (checked against it with saved_tensors_hooks in tests/conformance/test_gemma3n.py)."""
    top: Where = ("", -1)
    D, L, P = cfg.d_model, cfg.n_layers, cfg.per_layer_dim
    if P:
        yield embedding("embed.per_layer", top, "embed.per_layer", cfg.per_layer_vocab, L * P)
        yield linear("embed.per_layer_proj", top, "embed.per_layer_proj", D, L * P, False)
        op = norm("embed.per_layer_norm", top, "embed.per_layer_norm", P, "rmsnorm", False, True)
        yield dataclasses.replace(op, saved=tuple((w * L, tag) for w, tag in op.saved))
    for j in range(1, cfg.altup_inputs):  # they read the embedding per_layer_proj keeps
        yield linear(f"altup_proj.{j}", top, "altup_proj", D, D, False,
                     shares_input=bool(P) or j > 1)


def gemma3n_block(cfg: ModelConfig, stack: str, i: int) -> Iterator[Op]:
    """A Gemma 3n decoder block (HF ``Gemma3nTextDecoderLayer``; AltUp: Baykal et al. 2023,
    arXiv:2301.13310; LAuReL: Menghani et al. 2024, arXiv:2411.07501). Legend: A altup_inputs,
    r laurel_rank, P per_layer_dim, F this layer's MLP width.

        op                      | operation                              | params  | fwd FLOPs
        ------------------------|----------------------------------------|---------|-----------
        altup.router_norm       | RMSNorm of the active stream           | D       | -
        altup.modality_router   | D -> A, tanh                           | D A     | 2T D A
        altup.prediction_coefs  | A -> A^2 coefficients per token        | A^3     | 2T A^3
        altup.predict           | (D x A) @ (A x A) per token            | -       | 2T D A^2
        attn_norm, attn.*       | sandwich-normed attention, q/k RMSNorm | as attn | as attn
                                |   per head; a shared-KV layer reads    |         |
                                |   an earlier layer's k, v: no k/v_proj |         |
        laurel.linear_left/right| D -> r -> D, RMSNorm, added (LAuReL)   | 2 D r+D | 4T D r
        mlp_norm, mlp.*         | gated MLP of width F                   | 3 D F   | 6T D F
        altup.correct_norm,     | the router again on the block output   | (shared)| 2T D A
          correct_router        |                                        |         |
        altup.correction_coefs  | A -> A                                 | A^2     | 2T A^2
        altup.output_scale      | the active stream times a D-vector     | D       | -
        per_layer.gate / proj   | D -> P, * the layer's input, P -> D    | 2 D P   | 4T D P
        per_layer.norm          | RMSNorm, added to streams 1..A-1       | D       | -

    Activation sparsity (``act_sparsity``, HF's ``activation_sparsity_pattern``: the gate's
    activations below mean + std * Phi^-1(sparsity) of each row zeroed) changes no count of
    FLOPs: the matmuls stay dense, as HF runs them and FlopCounterMode counts them.

    Saved for backward, per token (HF's order of operations, which reference/model.py
    ``Gemma3nBlock`` follows op for op; checked with saved_tensors_hooks in
    tests/conformance/test_gemma3n.py, none / selective / full recompute, bf16 and fp32):

        op                      | saved per token
        ------------------------|-------------------------------------------------------------
        altup.router_norm       | as any RMSNorm; in an fp32 model its fp32 "copy" of stream 0
                                |   is a view of the block input, which predict keeps anyway
        altup.modality_router   | its input (D); the fp32 tanh output (A)
        altup.prediction_coefs  | its input: the tanh output cast back (A; none in fp32)
        altup.predict           | the block input, all A streams (the bmm reads a view of it:
                                |   D A), and the coefficients transposed (A^2)
        attn_norm               | as any RMSNorm, but in fp32 its input is a view of the
                                |   predictions: it keeps all A streams (D A, not D)
        attn.*                  | as attention, plus v_norm (scale-free RMSNorm per kv head);
                                |   a shared-KV layer: q only, and the core's copies of the
                                |   keys and values it reads (``Op.saved_bytes``: reread)
        laurel.linear_left/right| attn_norm's output (shared), r
        mlp.act (sparse layers) | + the gate output and its std (F + 1), and once the
                                |   cutoff's multiplier Phi^-1(sparsity) (one element)
        altup.correct_norm,     | as router_norm and modality_router (a new input: D, D)
          correct_router        |
        altup.correction_coefs  | its input (cast tanh, A); once, its weight clamped to +-120
        altup.correct           | the innovation repeated to the A streams (D A) and the
                                |   coefficients + 1 (A)
        altup.output_scale      | its input (D)
        per_layer.act           | the gate output and the activation (2P); block 0 also the
                                |   per-layer inputs of all layers, one tensor (L P)

    Full recompute keeps the block's input (the A streams, D A), block 0 the per-layer inputs
    (L P), and the first shared-KV layer of each kind the keys and values it reads (2 K h)."""
    p, where = f"{_prefix(stack)}layers.{i}.", (stack, i)
    D, A, r, P = cfg.d_model, cfg.altup_inputs, cfg.laurel_rank, cfg.per_layer_dim
    for op in checkpoints(cfg, stack, i):
        yield dataclasses.replace(op, saved=((A * D, "a"),)) \
            if op.component == "checkpoint.input" else op
    if P and i == 0:
        yield checkpoint(p[:-1], where, "checkpoint.per_layer_inputs", ("full",),
                         ((cfg.n_layers * P, "a"),))
    shared = i in cfg.kv_shared_layers
    K, h = cfg.n_kv_heads, cfg.head_dim
    if shared and not any(j in cfg.kv_shared_layers and cfg.window(j) == cfg.window(i)
                          for j in range(i)):
        yield checkpoint(p[:-1], where, "checkpoint.shared_kv", ("full",), ((2 * K * h, "a"),))
    tanh = ((A, "f32"),)
    router = _norm(cfg, p + "altup.router_norm", where, "altup.router_norm", D)
    yield dataclasses.replace(router, saved=((D, "up32"),) + router.saved[1:])
    op = linear(p + "altup.modality_router", where, "altup.modality_router", D, A, False)
    yield dataclasses.replace(op, saved=op.saved + tanh)
    op = linear(p + "altup.prediction_coefs", where, "altup.prediction_coefs", A, A * A, False)
    yield dataclasses.replace(op, saved=((A, "cast"),))
    yield Op(p + "altup.predict", "altup_mix", where[0], where[1], "altup.predict", d_in=D,
             d_out=A, saved=((D * A + A * A, "a"),), recompute="full")
    op = _norm(cfg, p + "attn_norm", where, "attn_norm", D)
    yield dataclasses.replace(op, saved=op.saved + (((A - 1) * D, "view32"),))
    for op in attention(cfg, p, where):
        if shared and op.component in ("attn.k_proj", "attn.v_proj", "attn.k_norm",
                                       "attn.rotary"):
            continue
        if shared and op.component == "attn.core.keys":
            op = dataclasses.replace(op, saved=tuple((w, "reread") for w, _ in op.saved))
        yield op
        if op.component == "attn.k_norm":  # v: RMSNorm per kv head, no scale
            v = norm(p + "attn.v_norm", where, "attn.v_norm", h, "rmsnorm", False, False)
            yield dataclasses.replace(v, saved=tuple((w * K, tag) for w, tag in v.saved),
                                      act_split="tp",
                                      saved_fused=tuple((w * K, tag) for w, tag in v.saved_fused))
    yield _norm(cfg, p + "attn_post_norm", where, "attn_post_norm", D)
    if r:
        yield linear(p + "laurel.linear_left", where, "laurel.linear_left", D, r, False,
                     shares_input=True)
        yield linear(p + "laurel.linear_right", where, "laurel.linear_right", r, D, False)
        yield _norm(cfg, p + "laurel.norm", where, "laurel.norm", D)
    yield _norm(cfg, p + "mlp_norm", where, "mlp_norm", D)
    F = cfg.layer_ffn_width(i)
    for op in mlp(cfg, p + "mlp.", "mlp.", where, F, cfg.mlp_bias):
        if op.component == "mlp.act" and cfg.act_sparsity and cfg.act_sparsity[i]:
            extra = ((F + 1, "a"),)  # the top-k runs before (outside) any fused kernel
            op = dataclasses.replace(op, saved=op.saved + extra, saved_once=((1, "a"),),
                                     saved_fused=None if op.saved_fused is None else
                                     op.saved_fused + extra)
        yield op
    yield _norm(cfg, p + "mlp_post_norm", where, "mlp_post_norm", D)
    yield dataclasses.replace(_norm(cfg, p + "altup.correct_norm", where, "altup.correct_norm",
                                    D), params=0)
    op = linear(p + "altup.correct_router", where, "altup.correct_router", D, A, False,
                tied=True)
    yield dataclasses.replace(op, saved=op.saved + tanh)
    op = linear(p + "altup.correction_coefs", where, "altup.correction_coefs", A, A, False)
    yield dataclasses.replace(op, saved=((A, "cast"),), saved_once=((A * A, "a"),))
    yield elementwise(p + "altup.correct", where, "altup.correct", "altup_correct",
                      ((A * D + A, "a"),))
    yield Op(p + "altup.output_scale", "scale", where[0], where[1], "altup.output_scale",
             params=D, d_in=D, saved=((D, "a"),), recompute="full")
    if P:
        yield linear(p + "per_layer.gate", where, "per_layer.gate", D, P, False)
        yield elementwise(p + "per_layer.act", where, "per_layer.act", "activation",
                          ((2 * P + (cfg.n_layers * P if i == 0 else 0), "a"),))
        yield linear(p + "per_layer.proj", where, "per_layer.proj", P, D, False)
        yield _norm(cfg, p + "per_layer.norm", where, "per_layer.norm", D)


def _tanh_gate(path: str, where: Where, component: str, width: int) -> Op:
    """x + tanh(g) * y with one learned scalar g (Mllama): no matmul; the product keeps y
    (``width`` per row) and tanh(g) (once per forward)."""
    return Op(path, "gate", where[0], where[1], component, params=1, d_in=1,
              saved=((width, "a"),), saved_once=((1, "a"),), recompute="full")


def checkpoints(cfg: ModelConfig, stack: str, i: int) -> Iterator[Op]:
    """What a recompute checkpoint of block i keeps alive until backward (kind "checkpoint"):

        tensor                      | kept under        | bytes
        ----------------------------|-------------------|-----------------------------------
        the block's input           | full              | rows x D x a (the residual stream)
        the encoder output          | full, decoder     | src rows x D x a (every decoder
                                    |   block 0         |   block's cross k/v reads it)
        T5's position bias          | selective, full,  | H x S_q x S_k x a: it needs a
                                    |   and none under  |   gradient, so the checkpoint keeps
                                    |   a fused kernel  |   it; so does a fused kernel that
                                    |                   |   takes it as attn_mask (its backward
                                    |                   |   re-forms the scores from it); once
                                    |                   |   per stack and window mask, at the
                                    |                   |   first block using it

    (checked with saved_tensors_hooks against reference/model.py in tests/conformance/test_reference.py).
    """
    p, where, D = f"{_prefix(stack)}layers.{i}", (stack, i), cfg.d_model
    s = _stream(stack)
    yield checkpoint(p, where, "checkpoint.input", ("full",), ((D, "a"),), stream=s)
    if stack == "decoder" and i == 0:
        yield checkpoint(p, where, "checkpoint.encoder_output", ("full",), ((D, "a"),),
                         stream="src")
    if cfg.pos_type == "relative_bias" or cfg.extra_rel_bias:
        causal = stack != "encoder" and cfg.family != "encoder"
        window = (lambda j: cfg.window(j) if causal else 0)
        # UMT5: each block's own bias; else one per stack and window mask
        if cfg.rel_bias_every_layer or all(window(j) != window(i) for j in range(i)):
            # UMT5's bias is built inside the block: full recompute rebuilds it
            kept = ("selective", "fused") if cfg.rel_bias_every_layer else \
                ("selective", "full", "fused")
            yield checkpoint(f"{p}.attn.core", where, "checkpoint.position_bias",
                             kept, heads=cfg.stack_heads(stack),
                             stream=s,
                             kv_stream=s,
                             act_split="tp")


def head(cfg: ModelConfig) -> Iterator[Op]:
    """Output side: projection back to the embedding width, LM head, BERT pooler."""
    top: Where = ("", -1)
    if cfg.altup_inputs:  # Gemma 3n: the AltUp streams projected back, averaged (before the
        # final norm in HF; placed with the head here: the last pipeline stage either way)
        # each reads one stream of the last block's output: the first keeps the whole stack
        A, D = cfg.altup_inputs, cfg.d_model
        for j in range(1, A):
            op = linear(f"altup_unembed.{j}", top, "altup_unembed", D, D, False)
            yield dataclasses.replace(op, saved=((A * D, "a"),) if j == 1 else ())
    if cfg.head == "lm":
        if cfg.embed_dim != cfg.d_model:
            yield linear("proj_out", top, "proj_out", cfg.d_model, cfg.embed_dim, False)
        # colwise over the vocabulary: vocab-parallel logits
        yield linear("lm_head", top, "lm_head", cfg.embed_dim, cfg.vocab_size, cfg.lm_head_bias,
                     tied=cfg.tie_embeddings, tp="colwise")
        # cross-entropy on fp32 logits: keeps them (4 bytes each) and the int64 labels; fused
        # (torch.compile's kernel): the logits as they come (activation dtype) and two fp32
        # statistics per row (the max and the log-sum-exp), and the labels
        yield dataclasses.replace(
            elementwise("loss", top, "loss", "loss", ((cfg.vocab_size, "f32"), (1, "i64"))),
            saved_fused=((cfg.vocab_size, "a"), (2, "f32"), (1, "i64")))
    if cfg.head == "mlm":
        yield from mlm_head(cfg)
    if cfg.pooler:  # saves its input and the tanh output
        pool = linear("pooler", top, "pooler", cfg.d_model, cfg.d_model, True, stream="first")
        yield dataclasses.replace(pool, saved=((cfg.d_model, "a"), (cfg.d_model, "a")))
    if cfg.head in ("seq_cls", "token_cls"):
        yield from classifier_head(cfg)
    if cfg.contact_head:  # ESM: parameters only; HF runs it only when asked for contacts
        n = cfg.n_layers * cfg.n_heads + 1
        yield Op("contact_head", "params", "", -1, "contact_head", params=n, d_in=n,
                 stream="first", placement="post")


def mlm_head(cfg: ModelConfig) -> Iterator[Op]:
    """Masked-LM head (BERT's ``cls.predictions``, RoBERTa's ``lm_head``, ALBERT, ELECTRA's
    generator, ModernBERT, MPNet, DistilBERT's vocab_*): dense D->E, activation, norm over E,
    then the vocabulary projection E->V (tied to the token table) with its own bias of V.

        op            | shapes  | params              | saved per token
        --------------|---------|---------------------|-------------------------------
        mlm.dense     | D -> E  | D*E (+ E)           | its input (D)
        mlm.act       |         |                     | its input (E)
        mlm.norm      | E       | 2E (1E bias-free)   | input, mean, 1/std
        lm_head       | E -> V  | V (bias; W tied)    | its input (E)
        loss          |         |                     | fp32 log-probs (V), label
    """
    top: Where = ("", -1)
    D, E, V = cfg.d_model, cfg.embed_dim, cfg.vocab_size
    yield linear("mlm.dense", top, "mlm.dense", D, E, cfg.head_dense_bias)
    yield elementwise("mlm.act", top, "mlm.act", "activation", ((E, "a"),))
    yield _norm(cfg, "mlm.norm", top, "mlm.norm", E)
    yield linear("lm_head", top, "lm_head", E, V, cfg.lm_head_bias, tied=cfg.tie_embeddings,
                 tp="colwise")
    yield elementwise("loss", top, "loss", "loss", ((V, "f32"), (1, "i64")))


def classifier_head(cfg: ModelConfig) -> Iterator[Op]:
    """Classification head. seq_cls reads the first token (after the pooler when there is
    one: BERT, ALBERT); token_cls every token. ``cls_dense``: a Linear(D, D) + activation
    (+ ``head_norm``) before the output Linear(D, n_labels), as RoBERTa's, ELECTRA's and
    MPNet's classification heads, DistilBERT's pre_classifier and ModernBERT's head."""
    top: Where = ("", -1)
    D, n = cfg.d_model, cfg.n_labels
    s = "first" if cfg.head == "seq_cls" else "seq"
    if cfg.cls_dense:
        yield linear("cls.dense", top, "cls.dense", D, D, cfg.head_dense_bias, stream=s)
        yield elementwise("cls.act", top, "cls.act", "activation", ((D, "a"),), stream=s)
        if cfg.head_norm:
            yield dataclasses.replace(_norm(cfg, "cls.norm", top, "cls.norm", D), stream=s)
    # the pooler's tanh output is already saved (Pooler): the classifier shares it
    yield linear("cls.out", top, "cls.out", D, n, True, stream=s,
                 shares_input=cfg.pooler and not cfg.cls_dense)
    yield elementwise("loss", top, "loss", "loss", ((n, "f32"), (1, "i64")), stream=s)


def model_ops(cfg: ModelConfig, block_ops=block) -> list[Op]:
    """Every Op of the model, in forward order; ops outside the blocks are placed "pre"
    (embeddings, per-stack inputs: the first pipeline stage) or "post" (final norms, head,
    loss: the last stage). ``block_ops(cfg, stack, i)`` gives block i's ops (``block``;
    accounting.param_totals passes one that builds each kind of block once)."""
    ops = list(embeddings(cfg))
    for stack, depth in cfg.stacks:
        ops.extend(stack_inputs(cfg, stack))
        for i in range(depth):
            ops.extend(block_ops(cfg, stack, i))
        after = []  # placed after the blocks (the last pipeline stage)
        if cfg.final_norm:
            after.append(_norm(cfg, f"{_prefix(stack)}final_norm", (stack, -1), "final_norm",
                               cfg.d_model))
        if cfg.final_dropout:
            after.append(dropout(f"{_prefix(stack)}final_dropout", (stack, -1), "final_dropout",
                                 cfg.d_model, _stream(stack)))
        ops.extend(dataclasses.replace(op, placement="post") for op in after)
    if cfg.sliding_chunks:  # Longformer: HF pads the input to a multiple of attention_window
        # (LongformerModel._pad_to_window_size) for the embeddings and every block; the
        # heads read the unpadded rows
        ops = [dataclasses.replace(op, pad_to=2 * cfg.sliding_window) for op in ops]
    ops.extend(dataclasses.replace(op, placement="post") for op in head(cfg))
    return ops


@functools.lru_cache(maxsize=32)
def model_ops_tuple(cfg: ModelConfig) -> tuple[Op, ...]:
    """``model_ops(cfg)`` as a tuple, built once per config (Ops and configs are frozen)."""
    return tuple(model_ops(cfg))
