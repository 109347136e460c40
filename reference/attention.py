"""Attention: the core (eager bmm + fp32 softmax, or SDPA), Longformer's sliding chunks
(``SlidingChunkCore``), self/cross attention with MHA/GQA/MQA, q/k norms, rotary, sinks,
output gates and DeBERTa's disentangled terms (``Attention``), and multi-head latent
attention (``MLA``). Paths: ``attn.{q,k,v}_proj -> rotary / q_norm,k_norm -> attn.core ->
attn.o_proj``.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.checkpoint import checkpoint

from txcalc.model.config import ModelConfig

from .context import Ctx, KVCache, apply_rotary
from .layers import RMSNorm, _copy, drop, make_norm, maybe_drop


class AttentionCore(nn.Module):
    """softmax(Q K^T * scale + bias) V over (B*H) batched matmuls.

    Eager saves q, k and v repeated to all H heads (contiguous), and the softmax output: fp32
    and its cast to the activation dtype when it upcasts. SDPA's fused kernels store q, k and
    v (K heads), the output and the fp32 logsumexp, no S x S (a plain causal mask is passed as
    ``is_causal`` so that the flash kernel can run). Under selective recompute the core is
    checkpointed and keeps only q, k and v.
    """

    def __init__(self, impl: str, softmax_fp32: bool, recompute: str = "none",
                 dropout: float = 0.0):
        super().__init__()
        self.impl = impl
        self.softmax_fp32 = softmax_fp32
        self.recompute = recompute
        self.dropout = dropout  # on the probabilities; 0 unless the model trains with dropout

    def forward(self, q, k, v, bias, causal: bool = False, sinks=None, rel=None):
        if self.recompute == "selective" and torch.is_grad_enabled():
            if rel is not None:  # DeBERTa: positions and gather indices are inputs too
                *tensors, factor = rel
                return checkpoint(lambda q_, k_, v_, *r: self.core(q_, k_, v_, bias, causal,
                                                                   None, (*r, factor)),
                                  q, k, v, *tensors, use_reentrant=True)
            if bias is not None and bias.requires_grad:  # T5's bias: a checkpoint input
                return checkpoint(self.core, q, k, v, bias, causal, use_reentrant=True)
            if sinks is not None:  # a parameter: an input of the checkpoint, saved by nobody
                return checkpoint(lambda q_, k_, v_, s_: self.core(q_, k_, v_, bias, causal, s_),
                                  q, k, v, sinks, use_reentrant=True)
            return checkpoint(lambda *qkv: self.core(*qkv, bias, causal), q, k, v,
                              use_reentrant=True)
        return self.core(q, k, v, bias, causal, sinks, rel)

    scale = None  #: the scores' factor; None: 1/sqrt(h) (Gemma 3n: 1.0)

    def core(self, q, k, v, bias, causal, sinks=None, rel=None):
        # q: (B, H, S_q, w), k: (B, H, S_k, w), v: (B, H, S_k, w_v)
        scale = self.scale if self.scale is not None else \
            1.0 / math.sqrt(q.shape[-1] * (rel[-1] if rel is not None else 1))
        if self.impl == "eager":
            B, H, S_q, w = q.shape
            S_k, w_v = k.shape[2], v.shape[-1]
            q3 = q.reshape(B * H, S_q, w)
            k3 = k.reshape(B * H, S_k, w)
            v3 = v.reshape(B * H, S_k, w_v)
            scores = torch.bmm(q3, k3.transpose(1, 2)) * scale
            if rel is not None:
                scores = scores + disentangled_scores(q3, k3, *rel[:-1]) * scale
            if bias is not None:
                scores = (scores.view(B, H, S_q, S_k) + bias).view(B * H, S_q, S_k)
            if sinks is not None:
                # gpt-oss: a learned logit per head joins each softmax, then is dropped: P V
                # reads a view of the first S_k columns (or their cast copy)
                sink = sinks.view(1, H, 1, 1).expand(B, H, S_q, 1).to(scores.dtype)
                logits = torch.cat((scores.view(B, H, S_q, S_k), sink), dim=-1)
                if self.softmax_fp32:
                    logits = logits.float()
                probs = torch.softmax(logits, dim=-1)[..., :S_k].to(q.dtype)
                probs = probs.reshape(B * H, S_q, S_k)
                if self.dropout and self.training:
                    probs = F.dropout(probs, self.dropout)
                return torch.bmm(probs, v3).view(B, H, S_q, w_v)
            if self.softmax_fp32:
                probs = torch.softmax(scores.float(), dim=-1).to(q.dtype)
            else:
                probs = torch.softmax(scores, dim=-1)
            if self.dropout and self.training:
                probs = F.dropout(probs, self.dropout)
            return torch.bmm(probs, v3).view(B, H, S_q, w_v)
        gqa = q.shape[1] != k.shape[1]
        p = self.dropout if self.training else 0.0
        if causal:
            return F.scaled_dot_product_attention(q, k, v, is_causal=True, scale=scale,
                                                  enable_gqa=gqa, dropout_p=p)
        return F.scaled_dot_product_attention(q, k, v, attn_mask=bias, scale=scale,
                                              enable_gqa=gqa, dropout_p=p)


class SlidingChunkCore(AttentionCore):
    """Longformer's local attention (Beltagy et al. 2020, arXiv:2004.05150), computed as HF's
    ``LongformerSelfAttention`` computes it when no token has global attention: w keys either
    side of each query (attention_window = 2w), S a multiple of 2w. Per sequence and head:

        step                              | tensors                     | saved for backward
        ----------------------------------|-----------------------------|---------------------
        q / sqrt(h)                       | q (S x h)                   | nothing (a scalar)
        Q K^T over S/w - 1 chunks of 2w,  | chunk copies (c 2w x h)     | both copies (bmm)
          overlapping by w                |                             |
        diagonals to columns, into a      | S x (2w + 1) band           | nothing (slice copies)
          zeroed (S/w) x w x (2w+1) buffer|                             |
        -inf past the sequence's ends     | where() on the first and    | both bool conditions,
          (first and last w rows)         |   last w rows               |   expanded (B w H w+1)
        softmax over the 2w + 1 keys,     | fp32                        | its output (fp32)
          dtype fp32                      |                             |
        masked_fill of padding rows       | bool (B, S), once a forward | the mask (first block)
        cast back, dropout                |                             | (the dropout's mask)
        P V over S/w chunks of w queries  | probs padded and shifted to | the padded probs
          x 3w keys (values padded by w   |   diagonals (w x (3w + 2)), | (w x (3w+2) per chunk),
          either side)                    |   value chunks (3w x h)     | the value chunk copies

    ``bias`` carries the padding mask (``Ctx.padding``): under selective recompute it is no
    checkpoint input, so nothing keeps it. Padding and global tokens leave the band (HF's
    ``diagonal_mask``: a finite minimum added to their keys' scores; no gradient, nothing
    saved).

    With g global tokens per sequence (``glob``: q_global's output over the g global rows,
    key_global's and value_global's over every token, and the block's index tensors,
    ``global_indices``), as HF's ``_concat_with_global_key_attn_probs``,
    ``_compute_attn_output_with_global_indices`` and ``_compute_global_attn_output_from_hidden``
    (txcalc ``components.global_attention``, ``ops.global_key_saved_bytes``):

        step                               | saved for backward
        -----------------------------------|----------------------------------------------
        every query x the g global keys    | q (a copy, or a view the chunks already keep),
          (gathered into a zeroed (B, g,   |   the gathered keys (B g H h)
          H, h)), concatenated before the  |
          band: one fp32 softmax           | the softmax output, g columns wider
        the g columns x the gathered       | both operands, cloned (HF's ``.clone()``)
          values, plus the band's P V      |
        q_global / sqrt(h) x key_global    | both (B g D, B S D)
        masked_fill (padding), fp32 softmax| its output (fp32); the cast copy
          over all S keys, cast, dropout   |   (or the dropout's mask and output)
        x value_global                     | value_global (B S D)
        written over the global rows       | (the int64 indices, kept by the gathers)

    Under selective recompute the checkpoint keeps q, k, v and the three global projections.
    """

    def __init__(self, w: int, recompute: str = "none", dropout: float = 0.0):
        super().__init__("eager", True, recompute, dropout)
        self.w = w

    def forward(self, q, k, v, bias, causal: bool = False, sinks=None, rel=None, glob=None):
        if glob is None:
            return super().forward(q, k, v, bias, causal, sinks, rel)
        qg, kg, vg, idx = glob
        if self.recompute == "selective" and torch.is_grad_enabled():
            return checkpoint(lambda q_, k_, v_, a, b, c: self.core(q_, k_, v_, bias, causal,
                                                                    glob=(a, b, c, idx)),
                              q, k, v, qg, kg, vg, use_reentrant=True)
        return self.core(q, k, v, bias, causal, glob=glob)

    def core(self, q, k, v, bias, causal=False, sinks=None, rel=None, glob=None):
        B, H, S, h = q.shape
        w = self.w
        if S % (2 * w):
            raise ValueError(f"Longformer's chunks need a sequence that is a multiple of "
                             f"attention_window ({2 * w}); got {S}")
        qs = q * (1.0 / math.sqrt(h))
        q3 = qs.reshape(B * H, S, h)
        k3, v3 = k.reshape(B * H, S, h), v.reshape(B * H, S, h)
        c = S // w - 1  # chunks of 2w, overlapping by w
        qc, kc = (_overlapping(t, w, 2 * w, c).reshape(-1, 2 * w, h) for t in (q3, k3))
        chunks = torch.bmm(qc, kc.transpose(1, 2)).view(B * H, c, 2 * w, 2 * w)
        # HF's _pad_and_transpose_last_two_dims: the diagonals become columns
        chunks = F.pad(chunks, (0, 0, 0, 1)).view(B * H, c, 2 * w, 2 * w + 1)
        band = chunks.new_zeros(B * H, c + 1, w, 2 * w + 1)
        band[:, :-1, :, w:] = chunks[:, :, :w, :w + 1]  # the diagonal and above
        band[:, -1, :, w:] = chunks[:, -1, w:, :w + 1]
        band[:, 1:, :, :w] = chunks[:, :, -(w + 1):-1, w + 1:]  # below the diagonal
        band[:, 0, 1:w, 1:w] = chunks[:, 0, :w - 1, 1 - w:]
        scores = band.view(B, H, S, 2 * w + 1).transpose(2, 1)  # (B, S, H, 2w + 1)
        _mask_band_ends(scores, w)
        g = 0 if glob is None else glob[0].shape[0]
        removed = bias if glob is None else bias.clone()
        if glob is not None:
            removed[glob[3][0]] = True  # global keys leave the band: their own columns
        scores += _band_of(removed, w, scores.dtype)[:, :, None, :]
        if glob is not None:  # every query against the g global keys, before the band
            scores = torch.cat((_to_global_scores(qs, k, glob[3], g), scores), dim=-1)
        probs = torch.softmax(scores, dim=-1, dtype=torch.float32)
        probs = torch.masked_fill(probs, bias[:, :, None, None], 0.0).type_as(scores)
        if self.dropout and self.training:
            probs = F.dropout(probs, self.dropout)
        if glob is not None:
            to_global = _to_global_context(probs, v, glob[3], g)
            probs = probs.narrow(-1, g, 2 * w + 1).contiguous()
        # P V: w queries of each chunk against 3w values (w padding either side)
        probs = probs.transpose(1, 2).reshape(B * H, S // w, w, 2 * w + 1)
        probs = F.pad(probs, (0, w + 1)).view(B * H, S // w, -1)[:, :, :-w]
        probs = probs.view(B * H, S // w, w, 3 * w + 1)[:, :, :, :-1]
        vc = _overlapping(F.pad(v3, (0, 0, w, w), value=-1), w, 3 * w, S // w)
        out = torch.bmm(probs.reshape(-1, w, 3 * w), vc.reshape(-1, 3 * w, h))
        out = out.view(B, H, S, h)
        if glob is None:
            return out
        out = (out + to_global).transpose(1, 2).reshape(B, S, H * h)
        # the global rows: their own attention over every key, written over the band's
        gout = self._global_rows(*glob, bias, B, H, h)
        glob_idx, local_idx = glob[3][0], glob[3][1]
        out[glob_idx] = gout[local_idx[0], :, local_idx[1]].reshape(-1, H * h)
        return out.view(B, S, H, h).transpose(1, 2)

    def _global_rows(self, qg, kg, vg, idx, pad, B, H, h):
        """HF ``_compute_global_attn_output_from_hidden`` from the projections: (B, H, g, h)."""
        g, S = qg.shape[0], kg.shape[1]
        gq = (qg * (1.0 / math.sqrt(h))).view(g, B * H, h).transpose(0, 1)
        gk = kg.view(B, S, H, h).transpose(1, 2).reshape(B * H, S, h)
        gv = vg.view(B, S, H, h).transpose(1, 2).reshape(B * H, S, h)
        scores = torch.bmm(gq, gk.transpose(1, 2)).view(B, H, g, S)
        scores = scores.masked_fill(pad[:, None, None, :], torch.finfo(scores.dtype).min)
        probs = torch.softmax(scores.view(B * H, g, S), dim=-1, dtype=torch.float32)
        probs = probs.type_as(scores)
        if self.dropout and self.training:
            probs = F.dropout(probs, self.dropout)
        return torch.bmm(probs, gv).view(B, H, g, h)


def global_indices(batch: int, g: int, device):
    """The index tensors HF's ``_get_global_attn_indices`` builds in every block, for the first
    g tokens of each sequence global: (batch, position) and (batch, slot) of each global token,
    each pair two views of one (B g, 2) int64 tensor (what ``nonzero(as_tuple=True)`` returns;
    built without nonzero(), which the meta device cannot run)."""
    b = torch.arange(batch, device=device).repeat_interleave(g)
    t = torch.arange(g, device=device).repeat(batch)
    return torch.stack((b, t), 1).unbind(1), torch.stack((b, t), 1).unbind(1)


def _band_of(removed, w: int, dtype):
    """HF's ``diagonal_mask``: per query, the dtype's minimum on the band's keys that are
    padding or global, 0 elsewhere (and past the ends, which are -inf already)."""
    fm = torch.zeros(removed.shape, dtype=dtype, device=removed.device).masked_fill(
        removed, torch.finfo(dtype).min)
    return F.pad(fm, (w, w)).unfold(1, 2 * w + 1, 1)


def _to_global_scores(qs, k, idx, g: int):
    """Every (scaled) query against the g global keys, gathered into a zeroed (B, g, H, h)
    (HF ``_concat_with_global_key_attn_probs``): (B, S, H, g)."""
    glob_idx, local_idx = idx
    kt = k.transpose(1, 2)
    keys = kt.new_zeros(kt.shape[0], g, *kt.shape[2:])
    keys[local_idx] = kt[glob_idx]
    return torch.einsum("blhd,bshd->blhs", qs.transpose(1, 2), keys)


def _to_global_context(probs, v, idx, g: int):
    """The g global columns of the probabilities x the g global values (HF
    ``_compute_attn_output_with_global_indices``, its clones): (B, H, S, h)."""
    glob_idx, local_idx = idx
    vt = v.transpose(1, 2)
    values = vt.new_zeros(vt.shape[0], g, *vt.shape[2:])
    values[local_idx] = vt[glob_idx]
    return torch.matmul(probs.narrow(-1, 0, g).transpose(1, 2).clone(),
                        values.transpose(1, 2).clone())


def _overlapping(x, step: int, size: int, n: int):
    """(BH, L, h) -> n chunks of ``size`` rows starting every ``step`` rows: a strided view."""
    BH, _, h = x.shape
    s0, s1, s2 = x.stride()
    return x.as_strided((BH, n, size, h), (s0, step * s1, s1, s2))


def _mask_band_ends(scores, w: int) -> None:
    """-inf in place on the band columns past either end of the sequence (HF
    ``_mask_invalid_locations``): the first w rows lose keys before position 0, the last w
    keys after S - 1; each where() keeps its expanded bool condition."""
    start = scores.new_ones(w, w + 1).tril().flip(dims=[0])[None, :, None, :]
    end = start.flip(dims=(1, 3))
    head = scores[:, :w, :, :w + 1]
    scores[:, :w, :, :w + 1] = torch.full_like(head, -float("inf")).where(
        start.expand(head.size()).bool(), head)
    tail = scores[:, -w:, :, -(w + 1):]
    scores[:, -w:, :, -(w + 1):] = torch.full_like(tail, -float("inf")).where(
        end.expand(tail.size()).bool(), tail)


class Rotary(nn.Module):
    """Applies the shared rotary tables to q and k; saves only the tables (once per model)."""

    def forward(self, q, k, cos, sin):
        return apply_rotary(q, cos, sin), apply_rotary(k, cos, sin)


class Attention(nn.Module):
    """Self- or cross-attention with MHA/GQA/MQA, optional qk-norm and rotary."""

    def __init__(self, cfg: ModelConfig, impl: str, softmax_fp32: bool, recompute: str,
                 cross: bool, rotary: bool, dtype, dropout: bool = False, stack: str = "",
                 layer: int = 0):
        super().__init__()
        D, H, K = cfg.d_model, cfg.stack_heads(stack), cfg.stack_kv_heads(stack)
        h = cfg.stack_head_dim(stack)
        self.H, self.K, self.h, self.cross = H, K, h, cross
        lin = lambda i, o, b: nn.Linear(i, o, bias=b, dtype=dtype)  # noqa: E731
        self.gate = cfg.attn_out_gate and not cross
        self.q_proj = lin(D, (2 if self.gate else 1) * H * h, cfg.qkv_bias)
        self.k_proj = lin(D, K * h, cfg.qkv_bias and cfg.k_proj_bias)
        self.v_proj = lin(D, K * h, cfg.qkv_bias)
        self.rotary = Rotary() if rotary else None
        self.qk_norm = cfg.qk_norm_at(layer) if not cross else \
            "head" if layer in cfg.cross_layers else "none"  # Mllama's gated cross blocks
        if self.qk_norm in ("head", "l2"):
            kind = dict(norm_type="rmsnorm", affine=False) if self.qk_norm == "l2" else {}
            self.q_norm = make_norm(cfg, h, dtype, **kind)
            self.k_norm = make_norm(cfg, h, dtype, **kind)
        elif self.qk_norm == "per_head":
            self.q_norm = HeadNorm(cfg, H, h, dtype)
            self.k_norm = HeadNorm(cfg, K, h, dtype)
        elif self.qk_norm == "full":
            self.q_norm = make_norm(cfg, H * h, dtype)
            self.k_norm = make_norm(cfg, K * h, dtype)
        self.sinks = nn.Parameter(torch.zeros(H, dtype=dtype)) \
            if cfg.attn_sinks and not cross else None
        self.sliding = cfg.sliding_chunks and not cross
        if cfg.global_qkv and not cross:  # Longformer: run only for global tokens
            self.q_global, self.k_global, self.v_global = (lin(D, D, True) for _ in range(3))
        self.core = SlidingChunkCore(cfg.sliding_window, recompute, cfg.attn_dropout
                                     if dropout else 0.0) if self.sliding else \
            AttentionCore(impl, softmax_fp32, recompute, cfg.attn_dropout if dropout else 0.0)
        self.o_proj = lin(H * h, D, cfg.out_bias)
        maybe_drop(self, cfg.resid_dropout * (cfg.resid_dropout_at != "mlp"), dropout)
        self.recompute = recompute
        self.rel = bool(cfg.rel_span) and not cross
        if self.rel:  # DeBERTa: the relative embeddings projected by this block
            self.span, self.c2p, self.p2c = cfg.rel_span, cfg.rel_c2p, cfg.rel_p2c
            for name, src, built in (("pos_q_proj", self.q_proj, cfg.rel_share_key or self.p2c),
                                     ("pos_k_proj", self.k_proj, cfg.rel_share_key or self.c2p)):
                if built:
                    setattr(self, name, SharedLinear(src) if cfg.rel_share_key
                            else lin(D, H * h, cfg.qkv_bias))
            # HF's pos_dropout (hidden_dropout_prob) on the relative embeddings, per block
            maybe_drop(self, cfg.resid_dropout * (self.c2p or self.p2c), dropout, "pos_dropout")

    def project_kv(self, kv_in):
        B, S = kv_in.shape[:2]
        k = self.k_proj(kv_in)
        v = self.v_proj(kv_in)
        if self.qk_norm == "full":
            k = self.k_norm(k)
        k = k.view(B, S, self.K, self.h)
        if self.qk_norm not in ("none", "full"):
            k = self.k_norm(k)
        return k.transpose(1, 2), v.view(B, S, self.K, self.h).transpose(1, 2)

    def forward(self, x, ctx: Ctx, kv_in=None, bias=None, cache: KVCache | None = None,
                causal: bool = False):
        B, S = x.shape[:2]
        q = self.q_proj(x)
        gate = None
        if self.gate:  # Qwen3-Next: per head, the query's h then its gate's h
            q, gate = (_copy(t) for t in q.view(B, S, self.H, 2 * self.h).chunk(2, dim=-1))
            q, gate = q.view(B, S, -1), torch.sigmoid(gate.view(B, S, -1))
        if self.qk_norm == "full":
            q = self.q_norm(q)
        q = q.view(B, S, self.H, self.h)
        if self.qk_norm not in ("none", "full"):
            q = self.q_norm(q)
        q = q.transpose(1, 2)
        if self.cross and cache is not None and cache.parts is not None:
            k, v = cache.parts  # the encoder's keys and values, projected once at prefill
        else:
            k, v = self.project_kv(x if kv_in is None else kv_in)
            if self.rotary is not None:
                q, k = self.rotary(q, k, ctx.cos, ctx.sin)
            if cache is not None:
                if self.cross:
                    cache.update((k, v), torch.arange(k.shape[2], device=k.device))
                else:
                    (k, v), k_pos = cache.update((k, v), ctx.q_pos)
                    bias, causal = ctx.bias_for(cache.window, k_pos), False
        rel = self.disentangled(ctx, B) if self.rel else None
        glob = None
        if self.sliding:
            bias = ctx.padding(B, S, x.device)
            g = ctx.model.global_count()
            if g:
                glob = self.global_projections(x, g)
        if glob is not None:
            out = self.core(q.contiguous(), k.contiguous(), v.contiguous(), bias, glob=glob)
        else:
            out = attend(self.core, q, k, v, bias, causal, self.sinks, rel)
        out = out.transpose(1, 2).reshape(B, S, -1)
        if gate is not None:  # the product keeps the core's output and the sigmoid's
            out = _copy(out) * gate
        return drop(self, self.o_proj(out))


    def global_projections(self, x, g: int):
        """Longformer: q_global over the g global rows of each sequence (gathered into a
        zeroed (g, B, D), HF's layout), key_global and value_global over every token; the
        block's index tensors (``global_indices``)."""
        B, S, D = x.shape
        idx = global_indices(B, g, x.device)
        glob_idx, local_idx = idx
        rows = x.new_zeros(g, B, D)
        rows[local_idx[::-1]] = x[glob_idx]
        return self.q_global(rows), self.k_global(x), self.v_global(x), idx

    def disentangled(self, ctx: Ctx, B: int):
        """DeBERTa's inputs to the core (HF DisentangledSelfAttention): the relative
        embeddings projected to H heads and repeated per sequence (B H, 2 span, h), keys
        (c2p) and queries (p2c); the gather indices, S x S int64 clamped into the table; the
        scale factor 1 + c2p + p2c (scores are divided by sqrt(h x factor))."""
        H, h, span = self.H, self.h, self.span
        rel = drop(self, ctx.rel, "pos_dropout")

        def positions(name, used):
            proj = getattr(self, name, None)
            if proj is None:
                return None
            with torch.set_grad_enabled(torch.is_grad_enabled() and used):  # unused: forward
                return proj(rel).view(2 * span, H, h).transpose(0, 1).repeat(B, 1, 1)
        pq, pk = positions("pos_q_proj", self.p2c), positions("pos_k_proj", self.c2p)
        c2p = torch.clamp(ctx.rel_pos + span, 0, 2 * span - 1) if self.c2p else None
        p2c = torch.clamp(-ctx.rel_pos + span, 0, 2 * span - 1) if self.p2c else None
        return (pk if self.c2p else None, pq if self.p2c else None, c2p, p2c,
                1 + self.c2p + self.p2c)


class SharedLinear(nn.Module):
    """A Linear that runs another module's weight and bias, registered under its own name
    (DeBERTa's share_att_key: q_proj and k_proj also project the relative embeddings)."""

    def __init__(self, src: nn.Linear):
        super().__init__()
        self.__dict__["src"] = src  # not a submodule: its parameters belong to ``src``

    def forward(self, x):
        return F.linear(x, self.src.weight, self.src.bias)


def disentangled_scores(q3, k3, pk, pq, c2p_idx, p2c_idx):
    """DeBERTa's relative terms (He et al. 2020, arXiv:2006.03654, eq. 4) as HF computes them:
    content->position q (pk)^T gathered at each pair's relative position, position->content
    k (pq)^T gathered and transposed. Each bmm keeps its operands, each gather its index and
    its input (B H x S x 2 span)."""
    BH, S_q, S_k = q3.shape[0], q3.shape[1], k3.shape[1]
    out = 0
    if pk is not None:
        out = out + torch.gather(torch.bmm(q3, pk.transpose(1, 2)), -1,
                                 c2p_idx.expand(BH, S_q, S_k))
    if pq is not None:
        out = out + torch.gather(torch.bmm(k3, pq.transpose(1, 2)), -1,
                                 p2c_idx.expand(BH, S_k, S_q)).transpose(-1, -2)
    return out


class HeadNorm(nn.Module):
    """Cohere's q/k norm: over each head's h features, with a (heads, h) scale (and shift).
    RMSNorm multiplies the per-head scale in; LayerNorm normalises without a scale, then
    scales (saving the normalised input)."""

    def __init__(self, cfg: ModelConfig, heads: int, h: int, dtype):
        super().__init__()
        self.rms = cfg.norm_type == "rmsnorm"
        self.h = h
        self.weight = nn.Parameter(torch.ones(heads, h, dtype=dtype)) if cfg.norm_affine \
            else None
        self.bias = nn.Parameter(torch.zeros(heads, h, dtype=dtype)) \
            if cfg.norm_affine and cfg.norm_bias and not self.rms else None

    def forward(self, x):  # x: (B, S, heads, h)
        if self.rms:
            xf = x.float()
            xn = (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + 1e-6)).to(x.dtype)
            return self.weight * xn if self.weight is not None else xn
        y = F.layer_norm(x, (self.h,), None, None, 1e-5)
        if self.weight is not None:
            y = y * self.weight
        return y + self.bias if self.bias is not None else y


def attend(core: AttentionCore, q, k, v, bias, causal: bool = False, sinks=None, rel=None):
    """Eager: repeat k and v to all query heads (HF repeat_kv) and make q, k, v contiguous,
    the tensors the matmuls save. SDPA: q, k, v as they come (HF's layout: heads are a
    transposed view, so the kernel's output transposed back is contiguous and is o_proj's
    input), k and v with their K heads (``enable_gqa``)."""
    if core.impl != "eager":
        if sinks is not None or rel is not None:
            raise NotImplementedError("attention sinks and DeBERTa's disentangled attention "
                                      "run with attn_impl='eager' only")
        return core(q, k, v, bias, causal)
    n_rep = q.shape[1] // k.shape[1]
    if n_rep > 1:
        k = k.repeat_interleave(n_rep, dim=1)
        v = v.repeat_interleave(n_rep, dim=1)
    return core(q.contiguous(), k.contiguous(), v.contiguous(), bias, causal, sinks, rel)


class MLA(nn.Module):
    """Multi-head latent attention (DeepSeek-V2, arXiv:2405.04434, section 2.1)."""

    def __init__(self, cfg: ModelConfig, impl: str, softmax_fp32: bool, recompute: str,
                 rotary: bool, dtype, dropout: bool = False):
        super().__init__()
        D, H = cfg.d_model, cfg.n_heads
        self.H, self.nope, self.rope, self.vd = H, cfg.qk_nope_head_dim, cfg.qk_rope_head_dim, \
            cfg.v_head_dim
        self.r = cfg.kv_lora_rank
        qk = self.nope + self.rope
        lin = lambda i, o, b=False: nn.Linear(i, o, bias=b, dtype=dtype)  # noqa: E731
        self.q_lora = cfg.q_lora_rank
        if cfg.q_lora_rank:
            self.q_a_proj = lin(D, cfg.q_lora_rank, cfg.qkv_bias)
            self.q_a_norm = RMSNorm(cfg.q_lora_rank, True, dtype)
            self.q_b_proj = lin(cfg.q_lora_rank, H * qk)
        else:
            self.q_proj = lin(D, H * qk)
        self.kv_a_proj = lin(D, self.r + self.rope, cfg.qkv_bias)
        self.kv_a_norm = RMSNorm(self.r, True, dtype)
        self.kv_b_proj = lin(self.r, H * (self.nope + self.vd))
        self.rotary = Rotary() if rotary else None
        self.core = AttentionCore(impl, softmax_fp32, recompute,
                                  cfg.attn_dropout if dropout else 0.0)
        self.o_proj = lin(H * self.vd, D, cfg.out_bias)
        maybe_drop(self, cfg.resid_dropout * (cfg.resid_dropout_at != "mlp"), dropout)
        self.recompute = recompute

    def forward(self, x, ctx: Ctx, kv_in=None, bias=None, cache=None, causal: bool = False):
        B, S = x.shape[:2]
        H = self.H
        q = self.q_b_proj(self.q_a_norm(self.q_a_proj(x))) if self.q_lora else self.q_proj(x)
        q = q.view(B, S, H, -1).transpose(1, 2)
        q_nope, q_pe = q.split([self.nope, self.rope], dim=-1)
        kv = self.kv_a_proj(x)
        latent = kv[..., :self.r].contiguous()
        k_pe = kv[..., self.r:].view(B, 1, S, self.rope)
        if self.rotary is not None:
            q_pe, k_pe = self.rotary(q_pe, k_pe, ctx.cos, ctx.sin)
        if cache is not None:  # the compressed cache: latent and the shared rotary key
            (latent, k_pe), k_pos = cache.update((latent, k_pe), ctx.q_pos)
            bias, causal = ctx.bias_for(cache.window, k_pos), False
        S_k = latent.shape[1]
        kvb = self.kv_b_proj(self.kv_a_norm(latent)).view(B, S_k, H, self.nope + self.vd)
        k_nope, v = kvb.transpose(1, 2).split([self.nope, self.vd], dim=-1)
        q = torch.cat((q_nope, q_pe), dim=-1)
        k = torch.cat((k_nope, k_pe.expand(B, H, S_k, self.rope)), dim=-1)
        out = attend(self.core, q, k, v, bias, causal)
        return drop(self, self.o_proj(out.transpose(1, 2).reshape(B, S, -1)))
