"""Blocks: the Transformer block (``Block``: pre/post/sandwich/post_sub norms, parallel
attention and MLP, cross-attention in a decoder), Mllama's gated cross-attention block, the
block of hybrid and state-space models (``HybridBlock``) with Zamba's shared block; full and
op-level recompute of one block; the parameter sharing of ALBERT and Zamba.
"""

from __future__ import annotations

import dataclasses

import torch
from torch import nn
from torch.utils.checkpoint import checkpoint

from txcalc.model.config import ModelConfig

from .attention import MLA, Attention, AttentionCore, Rotary, attend
from .context import Ctx, KVCache, mask_key
from .layers import Act, RMSNorm, make_norm
from .mlp import MLP, MoE
from .ssm import GatedDeltaNet, Mamba, Mamba2, RecurrentBlock, ShortConv


class Block(nn.Module):
    def __init__(self, cfg: ModelConfig, stack: str, i: int, impl: str, softmax_fp32: bool,
                 recompute: str, dtype, dropout: bool = False):
        super().__init__()
        self.cfg, self.stack, self.i = cfg, stack, i
        D = cfg.d_model
        post_sub = cfg.norm_position == "post_sub"  # OLMo 2: norms on the outputs only
        if not post_sub:
            # ModernBERT: block 0 reads the normalised embedding with no attention norm
            self.attn_norm = (make_norm(cfg, D, dtype) if cfg.first_attn_norm or i
                              else nn.Identity())
        if cfg.rel_bias_every_layer:  # UMT5: every block owns its relative-bias table
            self.rel_bias = nn.Embedding(cfg.relative_buckets, cfg.stack_heads(stack),
                                         dtype=dtype)
        rot = cfg.rotary(i)
        if cfg.is_mla:
            self.attn = MLA(cfg, impl, softmax_fp32, recompute, rot, dtype, dropout)
        else:
            self.attn = Attention(cfg, impl, softmax_fp32, recompute, False, rot, dtype, dropout,
                                  stack, layer=i)
        if cfg.norm_position in ("sandwich", "post_sub"):
            self.attn_post_norm = make_norm(cfg, D, dtype)
        self.has_cross = stack == "decoder"
        if self.has_cross:
            self.cross_attn_norm = make_norm(cfg, D, dtype)
            self.cross_attn = Attention(cfg, impl, softmax_fp32, recompute, True, False, dtype,
                                        dropout, stack)
        self.shared_norm = cfg.parallel_block and cfg.parallel_norms == 1
        if not (self.shared_norm or post_sub):
            self.mlp_norm = make_norm(cfg, D, dtype)
        if stack != "encoder" and cfg.is_moe_layer(i):
            self.moe = MoE(cfg, dtype, dropout)
        else:
            self.mlp = MLP(cfg, cfg.stack_d_ff(stack), cfg.mlp_bias, dtype, dropout, resid=True)
        if cfg.norm_position in ("sandwich", "post_sub"):
            self.mlp_post_norm = make_norm(cfg, D, dtype)
        self.full_recompute = recompute == "full"
        causal = stack != "encoder" and cfg.family != "encoder"
        self.window = mask_key(cfg, i) if causal else 0

    def ffn(self, x):
        return self.moe(x) if hasattr(self, "moe") else self.mlp(x)

    op_level = False  #: op-level selective checkpointing of this block (apply_recompute)

    def forward(self, x, ctx: Ctx, enc=None, caches=None):
        if self.op_level and torch.is_grad_enabled() and not caches:
            return op_level_checkpoint(lambda h: self.run(h, ctx, enc), x)
        if self.full_recompute and torch.is_grad_enabled() and not caches:
            return _checkpoint_block(self, ctx, x, enc)
        return self.run(x, ctx, enc, caches)

    def run(self, x, ctx: Ctx, enc=None, caches=None):
        cfg = self.cfg
        bias = ctx.bias[self.window] if ctx.bias is not None else None
        if cfg.rel_bias_every_layer and not caches:  # UMT5: this block's own bias
            bias = ctx.model.attn_bias(self.stack, ctx.q_pos, ctx.q_pos, self.window,
                                       ctx.model.position_bias(self.stack, ctx.q_pos, ctx.q_pos,
                                                               self.rel_bias))
        self_cache, cross_cache = caches if caches else (None, None)
        kw = dict(bias=bias, cache=self_cache, causal=ctx.plain_causal(self.window))
        if cfg.parallel_block:
            h = self.attn_norm(x)
            m_in = h if self.shared_norm else self.mlp_norm(x)
            return x + self.attn(h, ctx, **kw) + self.ffn(m_in)
        post = cfg.norm_position == "post"
        sandwich = cfg.norm_position == "sandwich"
        if cfg.norm_position == "post_sub":  # x + norm(f(x)) for attention, then the MLP
            x = x + self.attn_post_norm(self.attn(x, ctx, **kw))
            return x + self.mlp_post_norm(self.ffn(x))
        if post:
            x = self.attn_norm(x + self.attn(x, ctx, **kw))
        else:
            a = self.attn(self.attn_norm(x), ctx, **kw)
            x = x + (self.attn_post_norm(a) if sandwich else a)
        if self.has_cross:
            if post:
                x = self.cross_attn_norm(x + self.cross_attn(x, ctx, enc, cache=cross_cache))
            else:
                x = x + self.cross_attn(self.cross_attn_norm(x), ctx, enc, cache=cross_cache)
        if post:
            return self.mlp_norm(x + self.ffn(x))
        m = self.ffn(self.mlp_norm(x))
        return x + (self.mlp_post_norm(m) if sandwich else m)

    def new_caches(self) -> tuple[KVCache, KVCache | None]:
        dims = (1, 2) if self.cfg.is_mla else (2, 2)
        return KVCache(self.window, dims), (KVCache() if self.has_cross else None)


def op_level_checkpoint(run, x):
    """torchtitan's op-level selective activation checkpointing of one block
    (pytorch/torchtitan, torchtitan/models/llama3/infra/parallelize.py, ``_save_list`` and
    ``_custom_policy``): non-reentrant checkpoint whose policy saves the outputs of mm, of the
    fused attention kernels and of reduce-scatter, except every second mm (counted afresh in
    each block). On CPU SDPA's fused kernel is ``_scaled_dot_product_flash_attention_for_cpu``,
    the counterpart of the CUDA kernels in torchtitan's list."""
    from collections import defaultdict

    from torch.utils.checkpoint import CheckpointPolicy, create_selective_checkpoint_contexts
    aten = torch.ops.aten
    save = {aten.mm.default, aten._scaled_dot_product_efficient_attention.default,
            aten._scaled_dot_product_flash_attention.default,
            aten._scaled_dot_product_flash_attention_for_cpu.default,
            torch.ops._c10d_functional.reduce_scatter_tensor.default}

    def context():
        meta = defaultdict(int)

        def policy(ctx, func, *args, **kwargs):
            key = f"{'recompute' if ctx.is_recompute else 'forward'}_mm_count"
            if func == aten.mm.default:
                meta[key] += 1
            keep = func in save and not (func == aten.mm.default and meta[key] % 2 == 0)
            return CheckpointPolicy.MUST_SAVE if keep else CheckpointPolicy.PREFER_RECOMPUTE
        return create_selective_checkpoint_contexts(policy)
    return checkpoint(run, x, use_reentrant=False, context_fn=context, preserve_rng_state=False)


def _checkpoint_block(blk: Block, ctx: Ctx, x, enc):
    """Full recompute of one block: it keeps its inputs only. The block's bias, when it needs a
    gradient (T5's relative-position bias), must be a checkpoint input; the rest stays in the
    shared context."""
    bias = ctx.bias.get(blk.window) if ctx.bias else None
    # DeBERTa's normalised relative embeddings need a gradient too: an input of every block
    rel = ctx.rel if ctx.rel is not None and ctx.rel.requires_grad else None
    if blk.cfg.cross_layers and not blk.has_cross:  # Mllama: only its cross blocks read the states
        enc = None
    if (bias is None or not bias.requires_grad) and rel is None:
        return checkpoint(lambda h, e: blk.run(h, ctx, e), x, enc, use_reentrant=True)

    def run(h, e, b, r):
        c = dataclasses.replace(ctx, bias={**ctx.bias, blk.window: b}, rel=r)
        return blk.run(h, c, e)
    return checkpoint(run, x, enc, bias, rel, use_reentrant=True)


class TanhGate(nn.Module):
    """Mllama: x + tanh(g) * y with one learned scalar g (``components._tanh_gate``)."""

    def __init__(self, dtype):
        super().__init__()
        self.weight = nn.Parameter(torch.zeros(1, dtype=dtype))

    def forward(self, x, y):
        return x + self.weight.tanh() * y


class GatedCrossBlock(nn.Module):
    """Mllama's gated cross-attention block (``components.gated_cross_block``; HF
    ``MllamaCrossAttentionDecoderLayer``): attn_norm -> cross_attn over the vision states
    (q/k RMSNorm per head, no rotary, no mask) -> attn_gate -> mlp_norm -> mlp -> mlp_gate."""

    def __init__(self, cfg: ModelConfig, i: int, impl: str, softmax_fp32: bool, recompute: str,
                 dtype, dropout: bool = False):
        super().__init__()
        self.cfg, self.stack, self.i, self.window = cfg, "", i, 0
        D = cfg.d_model
        self.has_cross = True
        self.attn_norm = make_norm(cfg, D, dtype)
        self.cross_attn = Attention(cfg, impl, softmax_fp32, recompute, True, False, dtype,
                                    dropout, layer=i)
        self.attn_gate = TanhGate(dtype)
        self.mlp_norm = make_norm(cfg, D, dtype)
        self.mlp = MLP(cfg, cfg.d_ff, cfg.mlp_bias, dtype, dropout, resid=True)
        self.mlp_gate = TanhGate(dtype)
        self.full_recompute = recompute == "full"

    def forward(self, x, ctx: Ctx, enc=None, caches=None):
        if self.full_recompute and torch.is_grad_enabled() and not caches:
            return _checkpoint_block(self, ctx, x, enc)
        return self.run(x, ctx, enc, caches)

    def run(self, x, ctx: Ctx, enc=None, caches=None):
        cache = caches[1] if caches else None
        x = self.attn_gate(x, self.cross_attn(self.attn_norm(x), ctx, enc, cache=cache))
        return self.mlp_gate(x, self.mlp(self.mlp_norm(x)))

    def new_caches(self) -> tuple[None, KVCache]:
        return None, KVCache()  # the vision states' keys and values, projected at prefill


def _share_groups(cfg: ModelConfig, layers: nn.ModuleList) -> None:
    """ALBERT: a block that does not own parameters (``cfg.owns_params``) uses those of the
    last block before it that does (its group's first block)."""
    owner = None
    for i, blk in enumerate(layers):
        if cfg.owns_params(i):
            owner = blk
            continue
        for name, _ in list(blk.named_parameters()):
            *path, attr = name.split(".")
            dst, src = blk, owner
            for part in path:
                dst, src = getattr(dst, part), getattr(src, part)
            setattr(dst, attr, getattr(src, attr))


class HybridBlock(nn.Module):
    """A block of a hybrid or state-space model (``cfg.mixers``/``cfg.ffns``; the engine's
    ``components.hybrid_block``): attn_norm -> attention and/or a Mamba mixer (their outputs
    summed: Falcon-H1), mlp_norm -> MLP or MoE; either half may be absent."""

    def __init__(self, cfg: ModelConfig, i: int, impl: str, softmax_fp32: bool, recompute: str,
                 dtype, dropout: bool = False):
        super().__init__()
        self.cfg, self.stack, self.i = cfg, "", i
        D, kind, ffn = cfg.d_model, cfg.mixer(i), cfg.ffn(i)
        self.has_cross = False
        if i in cfg.shared_attn_layers:  # Zamba: the shared block feeds the mixer's input
            self.shared = SharedBlock(cfg, i, impl, softmax_fp32, recompute, dtype, dropout)
        if kind != "none":
            self.attn_norm = make_norm(cfg, D, dtype)
        if kind in ("attention", "hybrid"):
            self.attn = Attention(cfg, impl, softmax_fp32, recompute, False,
                                  cfg.rotary(i), dtype, dropout, layer=i)
        if kind == "mamba":
            self.mamba = Mamba(cfg, dtype)
        elif kind in ("mamba2", "hybrid"):
            self.mamba = Mamba2(cfg, dtype)
        elif kind == "conv":
            self.conv = ShortConv(cfg, dtype)
        elif kind == "gdn":
            self.linear_attn = GatedDeltaNet(cfg, dtype)
        elif kind == "rglru":
            self.recurrent = RecurrentBlock(cfg, dtype)
        if ffn != "none":
            self.mlp_norm = make_norm(cfg, D, dtype)
            if ffn == "moe":
                self.moe = MoE(cfg, dtype, dropout)
            else:
                self.mlp = MLP(cfg, cfg.d_ff, cfg.mlp_bias, dtype, dropout, resid=True)
        self.full_recompute = recompute == "full"
        self.window = cfg.window(i)

    def forward(self, x, ctx: Ctx, enc=None, caches=None):
        if self.full_recompute and torch.is_grad_enabled() and not caches:
            return _checkpoint_block(self, ctx, x, enc)
        return self.run(x, ctx, enc, caches)

    def run(self, x, ctx: Ctx, enc=None, caches=None):
        if hasattr(self, "attn_norm"):
            # Zamba: the shared block's output joins the mixer's input, not the residual
            h = self.attn_norm(x + self.shared(x, enc, ctx) if hasattr(self, "shared") else x)
            out = None
            if hasattr(self, "attn"):
                bias = ctx.bias[self.window] if ctx.bias is not None else None
                out = self.attn(h, ctx, bias=bias, cache=caches[0] if caches else None,
                                causal=ctx.plain_causal(self.window))
            if hasattr(self, "mamba"):
                m = self.mamba(h)
                out = m if out is None else out + m
            if hasattr(self, "conv"):
                out = self.conv(h)
            if hasattr(self, "linear_attn"):
                out = self.linear_attn(h)
            if hasattr(self, "recurrent"):
                out = self.recurrent(h)
            x = x + out
        if hasattr(self, "mlp_norm"):
            m_in = self.mlp_norm(x)
            x = x + (self.moe(m_in) if hasattr(self, "moe") else self.mlp(m_in))
        return x

    def new_caches(self):
        if any(hasattr(self, m) for m in ("mamba", "conv", "linear_attn", "recurrent")):
            from txcalc.errors import WorkloadError
            raise WorkloadError("the reference model does not decode state-space layers; "
                                "tests/conformance/test_hybrids.py measures their state on HF's cache")
        return KVCache(self.window), None


class _Adapter(nn.Module):
    """Zamba2's per-use LoRA-style adapter: ``down`` then ``up``, added to a projection."""

    def __init__(self, d_in: int, rank: int, d_out: int, dtype):
        super().__init__()
        self.down = nn.Linear(d_in, rank, bias=False, dtype=dtype)
        self.up = nn.Linear(rank, d_out, bias=False, dtype=dtype)

    def forward(self, x):
        return self.up(self.down(x))


class SharedBlock(nn.Module):
    """Zamba's shared attention block under the engine's paths (``txcalc.engine.mixers.shared_block``:
    ``shared.{attn_norm, attn.*, mlp_norm, mlp.*, proj}``): RMSNorm over [hidden, embeddings]
    (2D), attention, RMSNorm, gated MLP, the per-use Linear ``proj``; no residual inside.
    Zamba2's per-use adapters add to q, k, v and to gate and up. A use after its block's first
    holds that block's parameters (``_share_zamba_blocks``)."""

    def __init__(self, cfg: ModelConfig, i: int, impl: str, softmax_fp32: bool, recompute: str,
                 dtype, dropout: bool = False):
        super().__init__()
        D, H, K, h, F, r = (cfg.d_model, cfg.n_heads, cfg.n_kv_heads, cfg.head_dim, cfg.d_ff,
                            cfg.shared_adapter_rank)
        self.H, self.K, self.h = H, K, h
        lin = lambda i_, o, b=False: nn.Linear(i_, o, bias=b, dtype=dtype)  # noqa: E731
        self.attn_norm = RMSNorm(2 * D, True, dtype)
        self.attn = nn.Module()
        for n, width in (("q", H * h), ("k", K * h), ("v", K * h)):
            setattr(self.attn, f"{n}_proj", lin(2 * D, width))
            if cfg.shared_qkv_adapters:
                setattr(self.attn, f"{n}_adapter", _Adapter(2 * D, r, 2 * D, dtype))
        self.attn.rotary = Rotary() if cfg.pos_type == "rotary" else None
        self.attn.core = AttentionCore(impl, softmax_fp32, recompute,
                                       cfg.attn_dropout if dropout else 0.0)
        self.attn.o_proj = lin(H * h, D)
        self.mlp_norm = RMSNorm(D, True, dtype)
        self.mlp = nn.Module()
        self.mlp.gate_proj, self.mlp.up_proj = lin(D, F, cfg.mlp_bias), lin(D, F, cfg.mlp_bias)
        if r:
            self.mlp.adapter = _Adapter(D, r, 2 * F, dtype)
        self.mlp.act = Act(cfg.activation)
        self.mlp.down_proj = lin(F, D, cfg.mlp_bias)
        self.proj = lin(D, D)
        uses = cfg.shared_attn_layers
        j, blocks = uses.index(i), cfg.shared_attn_blocks
        idle = 0 if cfg.shared_attn_tied or not r else \
            sum(1 for u in range(len(uses)) if u % blocks == j % blocks) - 1
        if idle:  # an untied copy holds the adapters of its block's other uses, never run
            per_use = D * r + r * 2 * F + (12 * D * r if cfg.shared_qkv_adapters else 0)
            self.idle_adapters = nn.Parameter(torch.empty(idle * per_use, dtype=dtype))

    def forward(self, x, embeds, ctx: Ctx):
        B, S = x.shape[:2]
        a = self.attn
        h = self.attn_norm(torch.cat((x, embeds), dim=-1))
        qkv = []
        for n, heads in (("q", self.H), ("k", self.K), ("v", self.K)):
            t = getattr(a, f"{n}_proj")(h)
            if hasattr(a, f"{n}_adapter"):
                t = t + getattr(a, f"{n}_adapter")(h)
            qkv.append(t.view(B, S, heads, self.h).transpose(1, 2))
        q, k, v = qkv
        if a.rotary is not None:
            q, k = a.rotary(q, k, ctx.cos, ctx.sin)
        bias = ctx.bias[0] if ctx.bias is not None else None
        out = attend(a.core, q, k, v, bias, ctx.plain_causal(0))
        m = self.mlp_norm(a.o_proj(out.transpose(1, 2).reshape(B, S, -1)))
        gate, up = self.mlp.gate_proj(m), self.mlp.up_proj(m)
        if hasattr(self.mlp, "adapter"):
            ga, ua = self.mlp.adapter(m).chunk(2, dim=-1)
            gate, up = gate + ga, up + ua
        return self.proj(self.mlp.down_proj(self.mlp.act(gate, up)))


#: a shared block's own weights (a use's adapters and ``proj`` are its own)
_SHARED_WEIGHTS = ("attn_norm.", "attn.q_proj.", "attn.k_proj.", "attn.v_proj.",
                   "attn.o_proj.", "mlp_norm.", "mlp.gate_proj.", "mlp.up_proj.",
                   "mlp.down_proj.")


def _share_zamba_blocks(cfg: ModelConfig, layers: nn.ModuleList) -> None:
    """Zamba: use j of the shared blocks runs the parameters of block j % shared_attn_blocks,
    held by that block's first use (unless HF unties them: ``shared_attn_tied``)."""
    if not cfg.shared_attn_tied:
        return
    uses = cfg.shared_attn_layers
    for j, i in enumerate(uses):
        if j < cfg.shared_attn_blocks:
            continue
        dst_blk, src_blk = layers[i].shared, layers[uses[j % cfg.shared_attn_blocks]].shared
        for name, _ in list(dst_blk.named_parameters()):
            if not name.startswith(_SHARED_WEIGHTS):
                continue
            *path, attr = name.split(".")
            dst, src = dst_blk, src_blk
            for part in path:
                dst, src = getattr(dst, part), getattr(src, part)
            setattr(dst, attr, getattr(src, attr))
