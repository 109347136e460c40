"""The reference Transformer: an ``nn.Module`` built only from a txcalc ModelConfig.

Module names equal the engine's op paths (``layers.3.attn.q_proj``; see
``txcalc.engine.components``), so predicted and measured rows join by name. The code follows the
conventions the engine models (HF Llama's): RMSNorm upcasts its input to fp32; the eager
softmax runs in fp32 unless ``softmax_fp32=False``; grouped-query attention repeats k and v to
all query heads before the matmuls; the loss is cross-entropy on fp32 logits.

Layout of one forward (``D`` d_model, ``H``/``K`` query/kv heads, ``h`` head width), and the
module of each part:

    embed.tokens (+ embed.proj_in, embed.token_types, [stack.]embed.positions, embed.norm)
    for each stack (encoder, then decoder; or the only one):                  (blocks.py)
        [stack.]layers.i: attn_norm -> attn.{q,k,v}_proj -> rotary / q_norm,k_norm
                          -> attn.core (eager bmm + fp32 softmax, or SDPA; Longformer:
                             SlidingChunkCore, HF's overlapping chunks) -> attn.o_proj
                                                                              (attention.py)
                          [cross_attn_norm -> cross_attn.*]  (decoder of encoder-decoder)
                          mlp_norm -> mlp.{gate,up}_proj -> mlp.act -> mlp.down_proj
                                   or moe.router -> moe.experts.* (+ moe.shared.*, shared_gate)
                                                                              (mlp.py)
                          or a state-space mixer (ssm.py); Gemma 3n's block (gemma3n.py)
        [stack.]final_norm
    proj_out -> lm_head -> loss (cross-entropy on fp32 logits), pooler        (heads.py)

Norms, activations, dropout and fused kernels are in layers.py; the per-forward context
(positions, rotary tables, masks), the KV cache and the position tables in context.py.

Recompute (``recompute``): ``selective`` checkpoints the attention core (scores, softmax,
context); ``full`` checkpoints each block, which then keeps only its input. Both use
``torch.utils.checkpoint`` with ``use_reentrant=True``, whose saved inputs pass through
``saved_tensors_hooks`` (so reference/saved.py sees what a checkpoint keeps). Tensors shared by
all blocks (rotary tables, masks) live in a per-forward context, not in checkpoint inputs.
"""

from __future__ import annotations

from functools import partial

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.checkpoint import checkpoint

from txcalc.model.config import ModelConfig

from .blocks import Block, GatedCrossBlock, HybridBlock, _share_groups, _share_zamba_blocks
from .context import (Ctx, alibi_slopes, deberta_relative_positions, mask_key, relative_bucket,
                      rotary_tables, sinusoidal_table)
from .gemma3n import Gemma3nBlock
from .heads import Classifier, Head, HeadTransform, Loss, Pooler
from .layers import Act, LayerNorm, RMSNorm, _symbolic, drop, make_norm, maybe_drop

NEG_INF = -1e4  # additive mask value that is finite in fp16 and bf16
#: the model's weight dtype under each of the engine's precision policies (mixed precision:
#: the low-precision copy; the fp32 masters are the trainer's)
DTYPES = {"fp32": torch.float32, "bf16-mixed": torch.bfloat16, "fp16-mixed": torch.float16,
          "bf16": torch.bfloat16}


class StackInputs(nn.Module):
    """Per-stack position table and embedding norm (``[stack.]embed.*``)."""


class Stack(nn.Module):
    """One stack's members; for single-stack models they are attached to the model itself."""


class ReferenceModel(nn.Module):
    """The Transformer ``cfg`` describes, built at ``dtype`` on the current device.

    ``attn_impl``: eager | sdpa | flash (sdpa and flash both call scaled_dot_product_attention;
    the kernel it picks depends on the device). ``recompute``: none | selective | full.
    """

    #: the LM loss without whole logits (reference/loss.py use_loss); None: Loss on them
    lm_loss = None
    #: Longformer: tokens per sequence with global attention, the first ones (txcalc
    #: ``Workload.global_tokens``; ``global_count``)
    global_tokens = 0

    def global_count(self) -> int:
        """Global tokens per sequence: ``global_tokens``, and with the sequence classifier at
        least the first token (HF LongformerForSequenceClassification's default)."""
        return max(self.global_tokens, 1) if self.cfg.head == "seq_cls" else self.global_tokens

    def __init__(self, cfg: ModelConfig, dtype=torch.float32, attn_impl: str = "eager",
                 recompute: str = "none", softmax_fp32: bool = True, dropout: bool = False):
        super().__init__()
        self.cfg, self.dtype, self.recompute = cfg, dtype, recompute
        self.attn_impl = attn_impl
        D, V, Ed = cfg.d_model, cfg.vocab_size, cfg.embed_dim
        self.embed = nn.Module()
        self.embed.tokens = nn.Embedding(V + cfg.embed_extra_rows, Ed, dtype=dtype)
        # ALBERT, ELECTRA: tables and the embedding norm at Ed, projected after the norm
        We = Ed if cfg.embed_factorised else D
        if Ed != D or cfg.embed_factorised:
            self.embed.proj_in = nn.Linear(Ed, D, bias=cfg.embed_factorised, dtype=dtype)
        if cfg.type_vocab_size:
            self.embed.token_types = nn.Embedding(cfg.type_vocab_size, We, dtype=dtype)
        if cfg.altup_inputs:  # Gemma 3n: per-layer embeddings, AltUp streams in and out
            L, P, lin = cfg.n_layers, cfg.per_layer_dim, partial(nn.Linear, bias=False,
                                                                dtype=dtype)
            if P:
                self.embed.per_layer = nn.Embedding(cfg.per_layer_vocab, L * P, dtype=dtype)
                self.embed.per_layer_proj = lin(D, L * P)
                self.embed.per_layer_norm = make_norm(cfg, P, dtype)
            self.altup_proj = nn.ModuleDict({str(j): lin(D, D)
                                             for j in range(1, cfg.altup_inputs)})
            self.altup_unembed = nn.ModuleDict({str(j): lin(D, D)
                                                for j in range(1, cfg.altup_inputs)})
        if cfg.vision_params:  # a VLM's vision tower and projector: parameters only
            self.vision = nn.Module()
            self.vision.weight = nn.Parameter(torch.empty(cfg.vision_params, dtype=dtype))
        self.stack_names = [s for s, _ in cfg.stacks]
        for stack, depth in cfg.stacks:
            owner = self
            if stack:
                owner = Stack()
                self.add_module(stack, owner)
                owner.embed = StackInputs()
            audio = stack == "encoder" and cfg.audio_mels
            if audio:  # Whisper's stem: two convolutions over the log-mel frames
                owner.conv1 = nn.Conv1d(cfg.audio_mels, D, 3, padding=1, dtype=dtype)
                owner.conv1_act = Act("gelu")
                owner.conv2 = nn.Conv1d(D, D, 3, stride=2, padding=1, dtype=dtype)
                owner.conv2_act = Act("gelu")
            if cfg.pos_type == "learned" or cfg.sinusoidal_table == "param":
                rows = cfg.encoder_max_position if audio else \
                    cfg.max_position + cfg.position_offset
                owner.embed.positions = nn.Embedding(rows, We, dtype=dtype)
                if cfg.sinusoidal_table == "param" or audio:  # Marian, Pegasus, Whisper: frozen
                    owner.embed.positions.weight.requires_grad_(False)
            if cfg.embed_norm:
                owner.embed.norm = make_norm(cfg, We, dtype)
            maybe_drop(owner.embed, cfg.embed_dropout, dropout)
            if (cfg.pos_type == "relative_bias" and not cfg.rel_bias_every_layer) \
                    or cfg.extra_rel_bias:
                owner.rel_bias = nn.Embedding(cfg.relative_buckets, cfg.stack_heads(stack),
                                              dtype=dtype)
            if cfg.rel_span:  # DeBERTa: relative embeddings shared by all blocks
                owner.rel_embed = nn.Embedding(2 * cfg.rel_span, D, dtype=dtype)
            if cfg.rel_norm:  # built even when unused (HF's norm_rel_ebd)
                owner.rel_norm = LayerNorm(D, True, True, dtype)
            owner.layers = nn.ModuleList(
                HybridBlock(cfg, i, attn_impl, softmax_fp32, recompute, dtype, dropout)
                if cfg.mixers or cfg.ffns else
                GatedCrossBlock(cfg, i, attn_impl, softmax_fp32, recompute, dtype, dropout)
                if i in cfg.cross_layers else
                Gemma3nBlock(cfg, i, attn_impl, softmax_fp32, recompute, dtype)
                if cfg.altup_inputs else
                Block(cfg, stack, i, attn_impl, softmax_fp32, recompute, dtype, dropout)
                for i in range(depth))
            _share_groups(cfg, owner.layers)
            _share_zamba_blocks(cfg, owner.layers)
            if cfg.final_norm:
                owner.final_norm = make_norm(cfg, D, dtype)
            maybe_drop(owner, cfg.final_dropout, dropout, "final_dropout")
        if cfg.head == "lm":
            if Ed != D:
                self.proj_out = nn.Linear(D, Ed, bias=False, dtype=dtype)
            if cfg.tie_embeddings:
                self.lm_head = Head(self.embed.tokens, cfg.lm_head_bias, dtype)
            else:
                self.lm_head = nn.Linear(Ed, V, bias=cfg.lm_head_bias, dtype=dtype)
            self.loss = Loss()
        if cfg.pooler:
            self.pooler = Pooler(D, dtype)
        if cfg.head == "mlm":
            self.mlm = HeadTransform(cfg, D, Ed, cfg.head_dense_bias, True, dtype)
            self.lm_head = (Head(self.embed.tokens, cfg.lm_head_bias, dtype) if cfg.tie_embeddings
                            else nn.Linear(Ed, V, bias=cfg.lm_head_bias, dtype=dtype))
            self.loss = Loss()
        if cfg.head in ("seq_cls", "token_cls"):
            self.cls = Classifier(cfg, dtype)
            self.loss = Loss()
        if cfg.contact_head:  # ESM: built, run only when contacts are asked for
            self.contact_head = nn.Linear(cfg.n_layers * cfg.n_heads, 1, dtype=dtype)

    # --- helpers ---------------------------------------------------------------------------
    def _owner(self, stack: str) -> nn.Module:
        return getattr(self, stack) if stack else self

    def _rope_width(self) -> int:
        return self.cfg.qk_rope_head_dim if self.cfg.is_mla else self.cfg.head_dim

    def causal(self, stack: str) -> bool:
        return stack != "encoder" and self.cfg.family != "encoder"

    def position_bias(self, stack: str, q_pos, k_pos, table=None):
        """T5's learned bias per head and (query, key) bucket: (H, s_q, s_k); ``table``: a
        block's own (UMT5), else the stack's."""
        rel = k_pos[None, :] - q_pos[:, None]
        buckets = relative_bucket(rel, not self.causal(stack), self.cfg.relative_buckets)
        table = table if table is not None else self._owner(stack).rel_bias
        return table(buckets).permute(2, 0, 1)

    def attn_bias(self, stack: str, q_pos, k_pos, window: int, pos_bias=None):
        """Additive bias (1|H, s_q, s_k) in the model dtype: causal/window mask, ALiBi or the
        T5 relative-position bias; None when every pair attends with no bias."""
        cfg = self.cfg
        causal = self.causal(stack)
        rel = k_pos[None, :] - q_pos[:, None]  # key position minus query position
        bias = None
        if causal:
            allowed = rel <= 0
            if window > 0:
                allowed &= rel > -window
            elif window < 0:  # chunked attention (Llama 4): only keys of the query's chunk
                allowed &= (k_pos[None, :] // -window) == (q_pos[:, None] // -window)
            # decoding one token inside its window masks nothing (values known off meta)
            if _symbolic(allowed) or not bool(allowed.all()):
                bias = torch.zeros(rel.shape, device=rel.device).masked_fill(~allowed, NEG_INF)
                bias = bias[None]
        if cfg.pos_type == "alibi":
            slopes = alibi_slopes(cfg.n_heads, rel.device)[:, None, None]
            dist = rel.float().clamp(max=0) if causal else -rel.abs().float()
            bias = slopes * dist[None] + (0 if bias is None else bias)
        if (cfg.pos_type == "relative_bias" or cfg.extra_rel_bias) and (
                pos_bias is not None or not cfg.rel_bias_every_layer):
            pb = self.position_bias(stack, q_pos, k_pos) if pos_bias is None else pos_bias
            bias = pb if bias is None else pb + bias.to(pb.dtype)
        return None if bias is None else bias.to(self.dtype)

    def _context(self, stack: str, q_pos) -> Ctx:
        cfg = self.cfg
        ctx = Ctx(self, stack, q_pos)
        if cfg.pos_type == "rotary":
            ctx.cos, ctx.sin = rotary_tables(self._rope_width(), q_pos, self.dtype)
        windows = {0}
        if self.causal(stack):
            windows |= {mask_key(cfg, i) for i in range(cfg.n_layers)}
        if (cfg.pos_type == "relative_bias" and not cfg.rel_bias_every_layer) \
                or cfg.extra_rel_bias:  # one bias table lookup for the whole stack (T5, MPNet)
            pb = self.position_bias(stack, q_pos, q_pos)
            ctx.bias = {w: self.attn_bias(stack, q_pos, q_pos, w, pb) for w in windows}
        else:
            ctx.bias = {w: self.attn_bias(stack, q_pos, q_pos, w) for w in windows}
        if cfg.rel_span:  # DeBERTa: normalised once per forward, read by every block
            owner = self._owner(stack)
            ctx.rel = owner.rel_embed.weight
            # read by the projections; with neither c2p nor p2c no gradient flows back
            with torch.set_grad_enabled(torch.is_grad_enabled() and (cfg.rel_c2p or cfg.rel_p2c)):
                if cfg.rel_norm:
                    ctx.rel = owner.rel_norm(ctx.rel)
            ctx.rel_pos = deberta_relative_positions(q_pos, q_pos, cfg.rel_span if
                                                     cfg.rel_max_position else 0,
                                                     cfg.rel_max_position)
        return ctx

    def _embed(self, ids, stack: str, offset: int = 0):
        cfg = self.cfg
        x = self.embed.tokens(ids)
        if cfg.embed_dim != cfg.d_model and not cfg.embed_factorised:
            x = self.embed.proj_in(x)
        if cfg.type_vocab_size:
            x = x + self.embed.token_types(torch.zeros_like(ids))
        owner = self._owner(stack)
        S = ids.shape[1]
        pos = torch.arange(offset, offset + S, device=ids.device)
        if cfg.pos_type == "learned" or cfg.sinusoidal_table == "param":
            x = x + owner.embed.positions(pos[None] + cfg.position_offset)
        elif cfg.pos_type == "sinusoidal":
            x = x + sinusoidal_table(pos, cfg.d_model, x.dtype)
        if cfg.embed_norm:
            x = owner.embed.norm(x)
        x = drop(owner.embed, x)
        return self.embed.proj_in(x) if cfg.embed_factorised else x

    uniform_layers = 0  #: Megatron's uniform method: N blocks one checkpoint (apply_recompute)

    def run_stack(self, stack: str, x, ctx: Ctx, enc=None, caches=None):
        owner = self._owner(stack)
        n = self.uniform_layers
        if n and torch.is_grad_enabled() and not caches:
            def group(h, blocks):
                for blk in blocks:
                    h = blk.run(h, ctx, enc)
                return h
            for i in range(0, len(owner.layers), n):
                blocks = list(owner.layers)[i:i + n]
                x = checkpoint(lambda h, b=blocks: group(h, b), x, use_reentrant=True)
        else:
            for i, blk in enumerate(owner.layers):
                x = blk(x, ctx, enc, caches[i] if caches else None)
        if self.cfg.altup_inputs:  # Gemma 3n: the streams projected back and averaged
            x = torch.stack([x[0]] + [self.altup_unembed[str(j)](x[j])
                                      for j in range(1, len(x))]).mean(0)
        if self.cfg.final_norm:
            x = owner.final_norm(x)
        return drop(owner, x, "final_dropout")

    def positions(self, n: int, offset: int, device) -> torch.Tensor:
        return torch.arange(offset, offset + n, device=device)

    def encode(self, src_ids):
        if self.cfg.encoder_states_given or self.cfg.cross_layers:  # states given as input
            B, S = src_ids.shape
            return torch.zeros(B, S, self.cfg.d_model, dtype=self.dtype, device=src_ids.device)
        pos = self.positions(src_ids.shape[1], 0, src_ids.device)
        x = self._audio(src_ids) if self.cfg.audio_mels else self._embed(src_ids, "encoder")
        return self.run_stack("encoder", x, self._context("encoder", pos))

    def _audio(self, src_ids):
        """Whisper: log-mel features (B, mels, 2 S; zeros standing in for audio, no gradient)
        through conv1 + GELU and conv2 (stride 2) + GELU, plus the frozen position table."""
        enc, (B, S) = self.encoder, src_ids.shape
        mel = torch.zeros(B, self.cfg.audio_mels, 2 * S, dtype=self.dtype, device=src_ids.device)
        x = enc.conv2_act(enc.conv2(enc.conv1_act(enc.conv1(mel)))).permute(0, 2, 1)
        pos = torch.arange(S, device=src_ids.device)
        return drop(enc.embed, x + enc.embed.positions(pos[None]))

    def hidden(self, ids, src_ids=None, enc=None, caches=None, offset: int = 0):
        """Final hidden states of the last stack (B, S, D); with ``caches``, the tokens
        ``ids`` continue a cached sequence at position ``offset``."""
        stack = self.stack_names[-1]
        if (self.cfg.family == "encoder-decoder" or self.cfg.cross_layers) and enc is None:
            enc = self.encode(ids if src_ids is None else src_ids)
        pos = self.positions(ids.shape[1], offset, ids.device)
        ctx = self._context(stack, pos) if caches is None else Ctx(self, stack, pos)
        if caches is not None and self.cfg.pos_type == "rotary":
            ctx.cos, ctx.sin = rotary_tables(self._rope_width(), pos, self.dtype)
        S = ids.shape[1]
        if self.cfg.sliding_chunks and caches is None:  # Longformer: HF pads to a multiple
            # of attention_window (LongformerModel._pad_to_window_size); the padding is
            # masked in every block and cut from the output
            pad = -S % (2 * self.cfg.sliding_window)
            if pad:  # a padded copy (the caller's ids stay alive beside it)
                ids = F.pad(ids, (0, pad), value=0)
            ctx = self._context(stack, self.positions(S + pad, offset, ids.device))
            ctx.pad_masked = torch.zeros(ids.shape, dtype=torch.bool, device=ids.device)
            ctx.pad_masked[:, S:] = True
            out = self.run_stack(stack, self._embed(ids, stack, offset), ctx)
            # a copy of the S rows (HF's slice is a view, which with one sequence keeps the
            # padded output alive in what the head saves); none when nothing was padded
            return out[:, :S].clone() if pad else out
        x = self._embed(ids, stack, offset)
        if self.cfg.shared_attn_layers:  # Zamba's shared blocks read the embeddings
            enc = x
        if self.cfg.altup_inputs:
            x = self._altup_inputs(ids, x, ctx)
        return self.run_stack(stack, x, ctx, enc, caches)

    def _altup_inputs(self, ids, x, ctx: Ctx):
        """Gemma 3n: each block's per-layer input (its table row plus the normalised
        projection of the embedding) into ``ctx.per_layer``; the A AltUp streams. HF's
        elementwise scalings here (the embedding scales, the streams' magnitude matching,
        and at the end the logit soft-capping) are left out: they change no parameter or
        matmul, and the engine does not model what they save (the blocks themselves are
        HF's op for op)."""
        cfg, (B, S) = self.cfg, ids.shape
        ctx.shared_kv = {}
        if cfg.per_layer_dim:
            L, P = cfg.n_layers, cfg.per_layer_dim
            rows = torch.where(ids < cfg.per_layer_vocab, ids, torch.zeros_like(ids))
            table = self.embed.per_layer(rows).view(B, S, L, P)
            ctx.per_layer = table + self.embed.per_layer_norm(
                self.embed.per_layer_proj(x).view(B, S, L, P))
        return torch.stack([x] + [self.altup_proj[str(j)](x)
                                  for j in range(1, cfg.altup_inputs)])

    def logits(self, h):
        if self.cfg.embed_dim != self.cfg.d_model:
            h = self.proj_out(h)
        return self.lm_head(h)

    def forward(self, ids, labels=None, src_ids=None):
        """A scalar to differentiate: the LM loss, or (no head) the sum of the outputs (and
        the pooler's); masked LM: the loss of every position's own token; seq_cls/token_cls:
        the loss of class 0 for each sequence / token."""
        if self.lm_loss is not None and self.cfg.head == "lm":  # reference/loss.py
            return self.lm_loss(self, [self.hidden(ids, src_ids)],
                                default_labels(ids) if labels is None else labels)
        h = self.hidden(ids, src_ids)
        head = self.cfg.head
        if head in ("lm", "none"):
            if head == "lm":
                loss = self.loss(self.logits(h), default_labels(ids) if labels is None
                                 else labels)
            else:
                loss = h.float().sum()
            if self.cfg.pooler:
                loss = loss + self.pooler(h).float().sum()
            return loss
        if head == "mlm":  # every position predicts its own token (a fresh labels tensor)
            return self.loss(self.lm_head(self.mlm(h)), ids.clone() if labels is None else labels)
        pooled = self.pooler(h) if self.cfg.pooler else None
        if head == "seq_cls":
            feats = pooled if pooled is not None else h[:, 0].clone()
            labels = torch.zeros(ids.shape[0], dtype=torch.long, device=ids.device) \
                if labels is None else labels
            return self.loss(self.cls(feats), labels)
        labels = torch.zeros_like(ids) if labels is None else labels  # token_cls
        return self.loss(self.cls(h), labels)


def use_kernels(model: nn.Module, fused) -> nn.Module:
    """Run the kernels a framework profile fuses (txcalc.engine.workload.FUSED_KERNELS): "norm" the
    RMSNorms, "act" the gated MLP product (and gelu_new), "loss" the cross-entropy, each as
    the single kernel torch.compile builds from the same code; "layers" compiles each block
    whole (torchtune's compile_model: ``TransformerSelfAttentionLayer.compile()`` per layer)."""
    if "layers" in fused:
        import torch._dynamo.config as dynamo
        # every block is compiled on its own (dynamo guards on the module), so many models'
        # blocks in one process pass dynamo's default limit of 8 compiles per code object,
        # past which it runs them eager without a word: measure compiled blocks, always
        dynamo.recompile_limit = max(dynamo.recompile_limit, 1 << 16)
        dynamo.accumulated_recompile_limit = max(dynamo.accumulated_recompile_limit, 1 << 16)
        for stack, _ in model.cfg.stacks:
            for blk in model._owner(stack).layers:
                blk.compile()
    for mod in model.modules():
        if isinstance(mod, RMSNorm):
            mod.fused = "norm" in fused
        elif isinstance(mod, Act):
            mod.fused = "act" in fused
        elif isinstance(mod, Loss):
            mod.fused = "loss" in fused
    return model


def apply_recompute(model: "ReferenceModel", work) -> "ReferenceModel":
    """Set each block's recompute as a txcalc Workload says (``Workload.block_mode``: the
    method and the number of layers): full checkpoints the block, selective its attention
    core, op the block with torchtitan's op-level policy; uniform checkpoints groups of N
    blocks (``run_stack``)."""
    model.uniform_layers = work.recompute_layers if work.recompute_method == "uniform" else 0
    for stack, _ in model.cfg.stacks:
        for i, blk in enumerate(model._owner(stack).layers):
            mode = work.block_mode(i)
            blk.full_recompute = mode == "full" and not model.uniform_layers
            blk.op_level = mode == "op"
            for name in ("attn", "cross_attn"):
                core = getattr(getattr(blk, name, None), "core", None)
                if core is not None:
                    core.recompute = mode
    return model


def default_labels(ids: torch.Tensor) -> torch.Tensor:
    """Next-token labels: ids shifted left, the last position ignored (-100); a fresh tensor."""
    labels = torch.full_like(ids, -100)
    labels[:, :-1] = ids[:, 1:]
    return labels


def build(cfg: ModelConfig, dtype=torch.float32, device="cpu", attn_impl: str = "eager",
          recompute: str = "none", softmax_fp32: bool = True, seed: int = 0,
          init: bool = True, dropout: bool = False) -> ReferenceModel:
    """Build on ``device`` (``meta`` for shapes only: no memory, 405B in well under a second)."""
    if device != "meta" and init:
        torch.manual_seed(seed)
    with torch.device(device):
        model = ReferenceModel(cfg, dtype, attn_impl, recompute, softmax_fp32, dropout)
    if device != "meta" and init:
        _init(model)
    return model.train()


def _init(model: nn.Module) -> None:
    with torch.no_grad():
        for name, p in model.named_parameters():
            if p.dim() >= 2:
                p.normal_(0.0, 0.02)
            elif name.endswith("bias"):
                p.zero_()


# --- generation with a KV cache (section 8.7: logits, softmax, decoding) --------------------
def sample_next(logits: torch.Tensor, temperature: float = 0.0, top_k: int = 0,
                top_p: float = 1.0, generator: torch.Generator | None = None) -> torch.Tensor:
    """Next token per row of ``logits`` (B, V): greedy when temperature is 0, else sample from
    softmax(logits / temperature) restricted to the top-k tokens and to the smallest set whose
    probability reaches top_p (nucleus sampling, Holtzman et al. 2019, arXiv:1904.09751)."""
    logits = logits.float()
    if temperature <= 0:
        return logits.argmax(-1)
    logits = logits / temperature
    if top_k and top_k < logits.shape[-1]:
        kth = logits.topk(top_k, dim=-1).values[:, -1:]
        logits = logits.masked_fill(logits < kth, float("-inf"))
    if top_p < 1.0:
        sorted_logits, idx = logits.sort(dim=-1, descending=True)
        probs = sorted_logits.softmax(-1)
        # drop a token when the tokens ranked before it already reach top_p
        drop = probs.cumsum(-1) - probs >= top_p
        sorted_logits = sorted_logits.masked_fill(drop, float("-inf"))
        logits = torch.full_like(logits, float("-inf")).scatter(-1, idx, sorted_logits)
    return torch.multinomial(logits.softmax(-1), 1, generator=generator).squeeze(-1)


@torch.no_grad()
def generate(model: ReferenceModel, ids: torch.Tensor, max_new_tokens: int,
             src_ids: torch.Tensor | None = None, temperature: float = 0.0, top_k: int = 0,
             top_p: float = 1.0, generator: torch.Generator | None = None):
    """Autoregressive decoding with a KV cache: prefill the prompt, then one token per step.

    Returns (tokens (B, prompt + new), caches). After it, each self-attention cache holds the
    prompt and all generated tokens but the last (that one was never fed back), capped at the
    layer's window; cross-attention caches hold the encoder's keys and values.
    """
    cfg = model.cfg
    if cfg.family == "encoder" or cfg.head != "lm":
        from txcalc.errors import WorkloadError
        raise WorkloadError(f"{cfg.name} has no language-model head over a decoder: "
                            "it does not generate")
    stack = model.stack_names[-1]
    caches = [blk.new_caches() for blk in model._owner(stack).layers]
    enc = model.encode(src_ids if src_ids is not None else ids) \
        if cfg.family == "encoder-decoder" or cfg.cross_layers else None
    out, step_in, offset = ids, ids, 0
    for _ in range(max_new_tokens):
        h = model.hidden(step_in, enc=enc, caches=caches, offset=offset)
        nxt = sample_next(model.logits(h[:, -1:])[:, -1], temperature, top_k, top_p, generator)
        offset += step_in.shape[1]
        step_in = nxt[:, None]
        out = torch.cat((out, step_in), dim=1)
    return out, caches


def cache_bytes(caches) -> int:
    """Bytes of the unique storages held by the caches."""
    seen, total = set(), 0
    for pair in caches:
        for c in pair:
            for t in (c.tensors() if c is not None else []):
                key = t.untyped_storage()._cdata
                if key not in seen:
                    seen.add(key)
                    total += t.untyped_storage().nbytes()
    return total
