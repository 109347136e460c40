"""The reference Transformer: an ``nn.Module`` built only from a txcalc ModelConfig.

Module names equal the engine's op paths (``layers.3.attn.q_proj``; see
``txcalc.engine.components``), so predicted and measured rows join by name. The code follows the
conventions the engine models (HF Llama's): RMSNorm upcasts its input to fp32; the eager
softmax runs in fp32 unless ``softmax_fp32=False``; grouped-query attention repeats k and v to
all query heads before the matmuls; the loss is cross-entropy on fp32 logits.

Layout of one forward (``D`` d_model, ``H``/``K`` query/kv heads, ``h`` head width):

    embed.tokens (+ embed.proj_in, embed.token_types, [stack.]embed.positions, embed.norm)
    for each stack (encoder, then decoder; or the only one):
        [stack.]layers.i: attn_norm -> attn.{q,k,v}_proj -> rotary / q_norm,k_norm
                          -> attn.core (eager bmm + fp32 softmax, or SDPA; Longformer:
                             SlidingChunkCore, HF's overlapping chunks) -> attn.o_proj
                          [cross_attn_norm -> cross_attn.*]  (decoder of encoder-decoder)
                          mlp_norm -> mlp.{gate,up}_proj -> mlp.act -> mlp.down_proj
                                   or moe.router -> moe.experts.* (+ moe.shared.*, shared_gate)
        [stack.]final_norm
    proj_out -> lm_head -> loss (cross-entropy on fp32 logits), pooler

Recompute (``recompute``): ``selective`` checkpoints the attention core (scores, softmax,
context); ``full`` checkpoints each block, which then keeps only its input. Both use
``torch.utils.checkpoint`` with ``use_reentrant=True``, whose saved inputs pass through
``saved_tensors_hooks`` (so reference/saved.py sees what a checkpoint keeps). Tensors shared by
all blocks (rotary tables, masks) live in a per-forward context, not in checkpoint inputs.

MoE routing needs data-dependent shapes (tokens per expert). On real tensors the experts run a
loop over the routed tokens of each expert; on the ``meta`` device or under FakeTensorMode,
where there are no values to route, one matmul over all T*k routed rows stands in for the loop:
same shapes, same FLOPs, same saved bytes.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from functools import partial

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.checkpoint import checkpoint

from txcalc.model.config import ModelConfig

NEG_INF = -1e4  # additive mask value that is finite in fp16 and bf16
#: the model's weight dtype under each of the engine's precision policies (mixed precision:
#: the low-precision copy; the fp32 masters are the trainer's)
DTYPES = {"fp32": torch.float32, "bf16-mixed": torch.bfloat16, "fp16-mixed": torch.float16,
          "bf16": torch.bfloat16}


def _symbolic(t: torch.Tensor) -> bool:
    """True when ``t`` carries no values: the meta device or a FakeTensor."""
    if t.is_meta:
        return True
    from torch._subclasses.fake_tensor import FakeTensor
    return isinstance(t, FakeTensor)


# --- norms --------------------------------------------------------------------------------
class LayerNorm(nn.Module):
    """Native layer_norm: saves its input, the mean and 1/std (fp32)."""

    def __init__(self, width: int, bias: bool, affine: bool, dtype=None):
        super().__init__()
        self.width = width
        self.weight = nn.Parameter(torch.ones(width, dtype=dtype)) if affine else None
        self.bias = nn.Parameter(torch.zeros(width, dtype=dtype)) if affine and bias else None

    def forward(self, x):
        return F.layer_norm(x, (self.width,), self.weight, self.bias, 1e-5)


class RMSNorm(nn.Module):
    """HF Llama's RMSNorm: fp32 input copy, 1/rms (fp32), and the normalised input cast back
    to the activation dtype, which the scale multiplies."""

    def __init__(self, width: int, affine: bool, dtype=None):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(width, dtype=dtype)) if affine else None

    fused = False  #: run the torch.compile'd kernel (use_kernels): keeps x and 1/rms only

    def forward(self, x):
        if self.fused:
            return compiled("rms_norm")(x, self.weight) if self.weight is not None \
                else compiled("rms_norm_plain")(x)
        return _rms_norm(x, self.weight)


def _rms_norm(x, weight=None):
    dtype = x.dtype
    xf = x.float()
    xn = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + 1e-6)
    xn = xn.to(dtype)
    return weight * xn if weight is not None else xn


def _swiglu(gate, up):
    return F.silu(gate) * up


def _gelu_new(a):
    return 0.5 * a * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (a + 0.044715 * torch.pow(a, 3.0))))


def _cross_entropy(logits, labels):
    return F.cross_entropy(logits.float().reshape(-1, logits.shape[-1]), labels.reshape(-1),
                           ignore_index=-100)


#: the kernels a framework profile fuses (txcalc.engine.workload.FUSED_KERNELS), as the code torch.compile
#: (inductor) turns into one kernel each, what torchtitan runs
_KERNELS = {"rms_norm": _rms_norm, "rms_norm_plain": _rms_norm, "swiglu": _swiglu,
            "gelu_new": _gelu_new, "cross_entropy": _cross_entropy}
_COMPILED: dict = {}


def compiled(name: str):
    """``torch.compile`` of one of _KERNELS, built once (inductor on CPU: a C++ compiler)."""
    if name not in _COMPILED:
        import sys
        try:  # a module named z3 that is not the solver breaks dynamo's optional import
            import z3
            if not hasattr(z3, "ExprRef"):
                sys.modules["z3"] = None
        except ImportError:
            pass
        _COMPILED[name] = torch.compile(_KERNELS[name], dynamic=False, fullgraph=True)
    return _COMPILED[name]


def make_norm(cfg: ModelConfig, width: int, dtype, norm_type: str | None = None,
              bias: bool | None = None, affine: bool | None = None) -> nn.Module:
    norm_type = norm_type or cfg.norm_type
    affine = cfg.norm_affine if affine is None else affine
    if norm_type == "rmsnorm":
        return RMSNorm(width, affine, dtype)
    return LayerNorm(width, cfg.norm_bias if bias is None else bias, affine, dtype)


# --- per-forward context: tensors every block reads --------------------------------------------
@dataclass
class Ctx:
    """What all blocks of one stack share in one forward: positions, rotary tables, biases.

    ``bias`` maps a mask key to the additive (1|H, s_q, s_k) bias of the layers with that key,
    built once per forward; ``bias_for`` builds one for cached keys (decoding). The key is the
    layer's window (0 = full attention) or, for a chunked layer, minus its chunk length.
    """

    model: object
    stack: str
    q_pos: torch.Tensor
    cos: torch.Tensor | None = None
    sin: torch.Tensor | None = None
    bias: dict | None = None
    #: DeBERTa: the (normalised) relative embeddings (2 span x D) and the S x S int64 relative
    #: positions (log-bucketed for v3), built once per forward
    rel: torch.Tensor | None = None
    rel_pos: torch.Tensor | None = None
    #: Longformer: which tokens are padding, bool (B, S), built once per forward (HF
    #: ``is_index_masked``, read by every block's masked_fill; none is padding here)
    pad_masked: torch.Tensor | None = None

    def padding(self, batch: int, seq: int, device) -> torch.Tensor:
        if self.pad_masked is None:
            self.pad_masked = torch.zeros(batch, seq, dtype=torch.bool, device=device)
        return self.pad_masked

    def plain_causal(self, window: int) -> bool:
        """Whether the layer's bias is nothing but the causal mask over s x s (so a fused
        kernel can take ``is_causal`` instead of a mask tensor)."""
        cfg = self.model.cfg
        s = self.q_pos.shape[0]
        return (self.bias is not None and self.model.causal(self.stack)
                and cfg.pos_type not in ("alibi", "relative_bias")
                and (not window or abs(window) >= s))

    def bias_for(self, window: int, k_pos: torch.Tensor | None = None):
        if k_pos is None:
            return self.bias[window]
        return self.model.attn_bias(self.stack, self.q_pos, k_pos, window)


class KVCache:
    """The keys and values of one attention layer, grown by concatenation along ``dims``.

    A sliding-window layer keeps only its last ``window`` tokens. ``pos`` holds the absolute
    position of every cached token (what masks and position biases need).
    """

    def __init__(self, window: int = 0, dims: tuple[int, int] = (2, 2)):
        self.window, self.dims = window, dims
        self.parts: list[torch.Tensor] | None = None
        self.pos: torch.Tensor | None = None

    def update(self, new: tuple[torch.Tensor, ...], pos: torch.Tensor):
        """Append ``new`` (at positions ``pos``); return everything to attend over, and its
        positions."""
        if self.parts is None:
            parts, positions = list(new), pos
        else:
            parts = [torch.cat((p, n), d) for p, n, d in zip(self.parts, new, self.dims)]
            positions = torch.cat((self.pos, pos))
        # a chunked layer (negative key) keeps its last chunk of tokens, as HF's cache does
        n, keep = positions.numel(), abs(self.window) or positions.numel()
        self.parts = [p.narrow(d, n - min(n, keep), min(n, keep)).clone(
            memory_format=torch.contiguous_format) for p, d in zip(parts, self.dims)]
        self.pos = positions[n - min(n, keep):]
        return parts, positions

    def tensors(self) -> list[torch.Tensor]:
        return list(self.parts or [])


def _rotate_half(x):
    x1, x2 = x.chunk(2, dim=-1)
    return torch.cat((-x2, x1), dim=-1)


def apply_rotary(x, cos, sin):
    """x: (B, heads, S, w); cos/sin (S, w) carry no gradient, so the products save only them."""
    return x * cos + _rotate_half(x) * sin


def rotary_tables(width: int, positions: torch.Tensor, dtype):
    inv = 1.0 / (10000 ** (torch.arange(0, width, 2, device=positions.device,
                                        dtype=torch.float32) / width))
    freqs = positions.float()[:, None] * inv[None, :]
    emb = torch.cat((freqs, freqs), dim=-1)
    return emb.cos().to(dtype), emb.sin().to(dtype)


def sinusoidal_table(positions: torch.Tensor, width: int, dtype):
    half = width // 2
    inv = torch.exp(-math.log(10000.0) * torch.arange(half, device=positions.device,
                                                        dtype=torch.float32) / max(half, 1))
    ang = positions.float()[:, None] * inv[None, :]
    table = torch.cat((ang.sin(), ang.cos()), dim=-1)
    if width % 2:
        table = F.pad(table, (0, 1))
    return table.to(dtype)


def alibi_slopes(n_heads: int, device) -> torch.Tensor:
    # Press et al. 2021 (arXiv:2108.12409): geometric slopes 2^(-8i/H)
    return torch.tensor([2 ** (-8 * (i + 1) / n_heads) for i in range(n_heads)], device=device)


def relative_bucket(rel: torch.Tensor, bidirectional: bool, buckets: int, max_distance=128):
    """T5's bucketing of relative positions (Raffel et al. 2019, section 2.1)."""
    ret = torch.zeros_like(rel)
    if bidirectional:
        buckets //= 2
        ret = ret + (rel > 0).long() * buckets
        n = rel.abs()
    else:
        n = (-rel).clamp(min=0)
    max_exact = max(buckets // 2, 1)
    is_small = n < max_exact
    large = max_exact + (torch.log(n.float().clamp(min=1) / max_exact)
                         / math.log(max(max_distance / max_exact, 1.0 + 1e-6))
                         * (buckets - max_exact)).long()
    large = large.clamp(max=buckets - 1)
    return (ret + torch.where(is_small, n, large)).clamp(max=2 * buckets - 1 if bidirectional
                                                         else buckets - 1)


class Drop(nn.Module):
    """Dropout with probability ``p`` when the model trains with dropout (``enabled``): keeps
    its mask for backward (in the activation dtype on CPU and meta, 1-byte bool on CUDA)."""

    def __init__(self, p: float, enabled: bool):
        super().__init__()
        self.p, self.enabled = p, enabled

    def forward(self, x):
        return F.dropout(x, self.p, self.training) if self.enabled and self.p > 0 else x


def maybe_drop(owner: nn.Module, p: float, enabled: bool, name: str = "dropout") -> None:
    """Register a Drop at ``name`` when the config has that dropout (the engine's op exists)."""
    if p > 0:
        owner.add_module(name, Drop(p, enabled))


def drop(owner: nn.Module, x, name: str = "dropout"):
    mod = getattr(owner, name, None)
    return mod(x) if mod is not None else x


# --- attention ----------------------------------------------------------------------------
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


def deberta_relative_positions(q_pos, k_pos, buckets: int, max_position: int):
    """HF ``build_relative_position``: query minus key position, log-bucketed when DeBERTa v3
    sets position_buckets (``make_log_bucket_position``); int64 (S_q, S_k)."""
    rel = q_pos[:, None] - k_pos[None, :]
    if buckets > 0 and max_position > 0:
        mid = buckets // 2
        sign = torch.sign(rel)
        abs_pos = torch.where((rel < mid) & (rel > -mid),
                              torch.tensor(mid - 1, device=rel.device).type_as(rel), rel.abs())
        log_pos = torch.ceil(torch.log(abs_pos / mid) / math.log((max_position - 1) / mid)
                             * (mid - 1)) + mid
        rel = torch.where(abs_pos <= mid, rel.type_as(log_pos), log_pos * sign)
    return rel.to(torch.long)


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


# --- MLP and MoE --------------------------------------------------------------------------
class Act(nn.Module):
    """The MLP nonlinearity; gated ones take (gate, up) and return act(gate) * up."""

    def __init__(self, name: str):
        super().__init__()
        self.name = name

    fused = False  #: gated silu and gelu_new run torch.compile'd (use_kernels)

    def forward(self, a, up=None):
        n = self.name
        if self.fused and n in ("silu", "swiglu") and up is not None:
            return compiled("swiglu")(a, up)
        if self.fused and n == "gelu_new" and up is None:
            return compiled("gelu_new")(a)
        if n in ("relu", "reglu"):
            y = F.relu(a)
        elif n in ("gelu", "geglu"):
            y = F.gelu(a)
        elif n in ("gelu_tanh", "geglu_tanh"):
            y = F.gelu(a, approximate="tanh")
        elif n in ("silu", "swiglu"):
            y = F.silu(a)
        elif n == "relu2":
            y = torch.square(F.relu(a))
        elif n == "gelu_new":  # HF's NewGELUActivation, written out elementwise
            y = 0.5 * a * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi)
                                            * (a + 0.044715 * torch.pow(a, 3.0))))
        else:  # pragma: no cover - ModelConfig validates the name
            raise ValueError(n)
        return y * up if up is not None else y


class MLP(nn.Module):
    """Dense MLP; ``act_dropout`` after the activation (T5, OPT), ``dropout`` on the output
    when it is the block's FFN (``resid``)."""

    def __init__(self, cfg: ModelConfig, d_ff: int, bias: bool, dtype, dropout: bool = False,
                 resid: bool = False):
        super().__init__()
        D = cfg.d_model
        self.gated = cfg.gated
        if self.gated:
            self.gate_proj = nn.Linear(D, d_ff, bias=bias, dtype=dtype)
        self.up_proj = nn.Linear(D, d_ff, bias=bias, dtype=dtype)
        self.act = Act(cfg.activation)
        maybe_drop(self, cfg.mlp_dropout, dropout, "act_dropout")
        self.down_proj = nn.Linear(d_ff, D, bias=bias, dtype=dtype)
        if resid:  # after the block's MLP (not ALBERT's, ModernBERT's: resid_dropout_at)
            maybe_drop(self, cfg.resid_dropout * (cfg.resid_dropout_at != "attn"), dropout)

    def forward(self, x):
        if self.gated:
            h = self.act(self.gate_proj(x), self.up_proj(x))
        else:
            h = self.act(self.up_proj(x))
        return drop(self, self.down_proj(drop(self, h, "act_dropout")))


class GroupedLinear(nn.Module):
    """E expert weights (E, d_out, d_in); rows arrive sorted by expert, ``counts`` per expert."""

    def __init__(self, n: int, d_in: int, d_out: int, dtype, bias: bool = False):
        super().__init__()
        self.weight = nn.Parameter(torch.empty(n, d_out, d_in, dtype=dtype))
        self.bias = nn.Parameter(torch.zeros(n, d_out, dtype=dtype)) if bias else None
        nn.init.normal_(self.weight, std=d_in ** -0.5)

    def _b(self, e: int):
        return self.bias[e] if self.bias is not None else None

    def forward(self, x, counts):
        if counts is None:  # no values to route (meta/fake): same shapes and FLOPs in one matmul
            return F.linear(x, self.weight[0], self._b(0))
        outs, start = [], 0
        for e, n in enumerate(counts):
            if n:
                outs.append(F.linear(x[start:start + n], self.weight[e], self._b(e)))
            start += n
        return torch.cat(outs) if outs else x.new_zeros(0, self.weight.shape[1])


class Router(nn.Module):
    """Linear(D, E), then top-k of the fp32 logits and a softmax over the k chosen
    (Mixtral's routing, Jiang et al. 2024, arXiv:2401.04088, eq. 1)."""

    def __init__(self, d: int, n_experts: int, k: int, bias: bool, dtype):
        super().__init__()
        self.k = k
        self.weight = nn.Parameter(torch.empty(n_experts, d, dtype=dtype))
        self.bias = nn.Parameter(torch.zeros(n_experts, dtype=dtype)) if bias else None
        nn.init.normal_(self.weight, std=d ** -0.5)

    def forward(self, x):
        top, experts = F.linear(x, self.weight, self.bias).float().topk(self.k, dim=-1)
        return top.softmax(-1).to(x.dtype), experts


class Experts(nn.Module):
    """E expert MLPs. Tokens are gathered in expert order, run through their experts, put
    back in (token, slot) order and summed with the routing weights."""

    def __init__(self, cfg: ModelConfig, dtype):
        super().__init__()
        E, D, Fe = cfg.n_experts, cfg.d_model, cfg.moe_d_ff
        self.E, self.k = E, cfg.top_k
        self.gated = cfg.gated
        b = cfg.expert_bias  # gpt-oss
        if self.gated:
            self.gate_proj = GroupedLinear(E, D, Fe, dtype, b)
        self.up_proj = GroupedLinear(E, D, Fe, dtype, b)
        self.act = Act(cfg.activation)
        self.down_proj = GroupedLinear(E, Fe, D, dtype, b)

    def forward(self, x, weights, experts):
        T, D = x.shape
        order = experts.reshape(-1).argsort(stable=True)
        xs = x[order // self.k]  # saves the int64 token index of each routed row
        counts = None
        if not _symbolic(x):
            counts = torch.bincount(experts.reshape(-1), minlength=self.E).tolist()
        if self.gated:
            h = self.act(self.gate_proj(xs, counts), self.up_proj(xs, counts))
        else:
            h = self.act(self.up_proj(xs, counts))
        y = self.down_proj(h, counts)[order.argsort()]  # back to slot order: saves the index
        # the weights' gradient needs the expert outputs: saves y (T*k x D) and the weights
        return (y.view(T, self.k, D) * weights[..., None]).sum(1)


class SharedGate(nn.Module):
    """Qwen2-MoE's gate on the shared MLP: sigmoid(Linear(D, 1)(x)) * shared(x)."""

    def __init__(self, d: int, dtype):
        super().__init__()
        self.weight = nn.Parameter(torch.empty(1, d, dtype=dtype))
        nn.init.normal_(self.weight, std=d ** -0.5)

    def forward(self, x, shared_out):
        return torch.sigmoid(F.linear(x, self.weight)) * shared_out


class MoE(nn.Module):
    """Router, routed experts, and the optional shared MLP (DeepSeek, Qwen2-MoE)."""

    def __init__(self, cfg: ModelConfig, dtype, dropout: bool = False):
        super().__init__()
        self.router = Router(cfg.d_model, cfg.n_experts, cfg.top_k, cfg.router_bias, dtype)
        self.experts = Experts(cfg, dtype)
        self.shared = (MLP(cfg, cfg.shared_d_ff, cfg.mlp_bias, dtype, dropout)
                       if cfg.shared_d_ff else None)
        self.shared_gate = SharedGate(cfg.d_model, dtype) if cfg.shared_expert_gate else None
        maybe_drop(self, cfg.resid_dropout * (cfg.resid_dropout_at != "attn"), dropout)

    def forward(self, x):
        B, S, D = x.shape
        flat = x.reshape(-1, D)
        out = self.experts(flat, *self.router(flat))
        if self.shared is not None:
            s = self.shared(flat)
            out = out + (self.shared_gate(flat, s) if self.shared_gate is not None else s)
        return drop(self, out.view(B, S, D))


# --- blocks and stacks --------------------------------------------------------------------
def mask_key(cfg: ModelConfig, i: int) -> int:
    """Causal layer i's mask: its window (0 = full attention), or minus its chunk length."""
    return cfg.window(i) or -cfg.chunk(i)


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


# --- Gemma 3n (components.gemma3n_block) ------------------------------------------------------
class Borrowed(nn.Module):
    """A second call of another module's weights (AltUp's router on the block output): no
    parameters of its own (the owner is kept in a list so it is not registered twice)."""

    def __init__(self, owner: nn.Module):
        super().__init__()
        self.owner = [owner]

    def forward(self, x):  # the owner's forward, not its call: what it saves lands here
        return self.owner[0].forward(x)


class AltUpMix(nn.Module):
    """AltUp's prediction (HF ``Gemma3nTextAltUp.predict``): per token, the A streams
    (D x A) times an A x A matrix (a batched matmul over B x S tokens), plus the streams."""

    def forward(self, streams, coefs):  # streams (A, B, S, D), coefs (B, S, A, A)
        mixed = torch.matmul(streams.permute(1, 2, 3, 0), coefs).permute(3, 0, 1, 2)
        mixed += streams
        return mixed.contiguous()


class AltUpRouter(nn.Linear):
    """AltUp's modality router: D -> A, then tanh in fp32 (HF ``compute_router_modalities``;
    the cast back to the activation dtype is the caller's)."""

    def forward(self, x):
        return torch.tanh(super().forward(x).float())


class AltUpCorrect(nn.Module):
    """AltUp's correction (HF ``Gemma3nTextAltUp.correct``): the innovation (block output
    minus the active prediction) repeated to the A streams, times each stream's coefficient
    + 1, plus the predictions."""

    def forward(self, pred, active, out, coefs):  # coefs (B, S, A)
        innovation = (out - active).repeat(pred.shape[0], 1, 1, 1)
        corrected = torch.mul(innovation, (coefs + 1.0).permute(2, 0, 1).unsqueeze(-1))
        corrected += pred
        return corrected.contiguous()


class Scale(nn.Module):
    """x times a learned D-vector (AltUp's correct_output_scale)."""

    def __init__(self, width: int, dtype):
        super().__init__()
        self.weight = nn.Parameter(torch.zeros(width, dtype=dtype))

    def forward(self, x):
        return x * self.weight


#: HF's altup_coef_clip (Gemma3nTextConfig default): in training the coefficient weights are
#: clamped to +-120 (the prediction weights in place, the correction weights as a copy)
ALTUP_COEF_CLIP = 120.0


class ClampedLinear(nn.Linear):
    """AltUp's correction_coefs: in training, a Linear over its weight clamped to
    +-ALTUP_COEF_CLIP (a copy of the weight that the matmul saves)."""

    def forward(self, x):
        if not self.training:
            return super().forward(x)
        return F.linear(x, self.weight.clamp(-ALTUP_COEF_CLIP, ALTUP_COEF_CLIP))


def gaussian_topk(x, sparsity: float):
    """Gemma 3n's activation sparsity (HF ``Gemma3nTextMLP._gaussian_topk``): zero what lies
    below mean + std * Phi^-1(sparsity) of each row, the rest shifted down by that cutoff."""
    target = torch.tensor(sparsity, dtype=torch.float32, device=x.device)
    multiplier = torch.distributions.normal.Normal(0, 1).icdf(target).type(x.dtype)
    mean = torch.mean(x, dim=-1, keepdim=True)
    std = torch.std(x, dim=-1, keepdim=True, unbiased=False)
    return F.relu(x - (mean + std * multiplier))


class SparseAct(Act):
    """A Gemma 3n MLP's activation: the gate made sparse first (``gaussian_topk``) in the
    layers ``cfg.act_sparsity`` names (HF ``Gemma3nTextMLP``)."""

    def __init__(self, name: str, sparsity: float):
        super().__init__(name)
        self.sparsity = sparsity

    def forward(self, a, up=None):
        return super().forward(gaussian_topk(a, self.sparsity) if self.sparsity else a, up)


class Gemma3nAttention(nn.Module):
    """Sandwich-normed attention with per-head q/k RMSNorm and a scale-free v RMSNorm, no
    score scaling (HF ``Gemma3nTextAttention``: scaling 1.0); a shared-KV layer
    (``cfg.kv_shared_layers``) has no k/v projections and attends over the keys and values
    the last earlier layer of its kind left in ``ctx.shared_kv``."""

    def __init__(self, cfg: ModelConfig, i: int, impl: str, softmax_fp32: bool, recompute: str,
                 dtype):
        super().__init__()
        D, H, K, h = cfg.d_model, cfg.n_heads, cfg.n_kv_heads, cfg.head_dim
        self.H, self.K, self.h, self.key = H, K, h, mask_key(cfg, i)
        self.shared = i in cfg.kv_shared_layers
        self.q_proj = nn.Linear(D, H * h, bias=cfg.qkv_bias, dtype=dtype)
        if not self.shared:
            self.k_proj = nn.Linear(D, K * h, bias=cfg.qkv_bias, dtype=dtype)
            self.v_proj = nn.Linear(D, K * h, bias=cfg.qkv_bias, dtype=dtype)
            self.k_norm = make_norm(cfg, h, dtype)
            self.v_norm = make_norm(cfg, h, dtype, affine=False)
        self.q_norm = make_norm(cfg, h, dtype)
        self.rotary = Rotary()
        self.core = AttentionCore(impl, softmax_fp32, recompute)
        self.core.scale = 1.0  # HF: no score scaling (the q norm sets the scores' size)
        self.o_proj = nn.Linear(H * h, D, bias=cfg.out_bias, dtype=dtype)

    def forward(self, x, ctx: Ctx, bias=None, causal: bool = False):
        B, S = x.shape[:2]
        q = self.q_norm(self.q_proj(x).view(B, S, self.H, self.h)).transpose(1, 2)
        if self.shared:
            q = apply_rotary(q, ctx.cos, ctx.sin)
            k, v = ctx.shared_kv[self.key]
        else:
            k = self.k_norm(self.k_proj(x).view(B, S, self.K, self.h)).transpose(1, 2)
            v = self.v_norm(self.v_proj(x).view(B, S, self.K, self.h)).transpose(1, 2)
            q, k = self.rotary(q, k, ctx.cos, ctx.sin)
            ctx.shared_kv[self.key] = (k, v)
        out = attend(self.core, q, k, v, bias, causal)
        return self.o_proj(out.transpose(1, 2).reshape(B, S, -1))


class Gemma3nBlock(nn.Module):
    """A Gemma 3n block over the A AltUp streams (A, B, S, D), HF's
    ``Gemma3nTextDecoderLayer`` op for op (tests/test_gemma3n.py checks equal outputs):

        predict: router_norm -> / D -> modality_router -> tanh (fp32) -> prediction_coefs ->
                 the streams mixed per token (altup.predict), plus the streams
        the active stream (0): attn_norm -> attn -> attn_post_norm, plus the stream;
                 LAuReL on the normed stream (h + laurel.norm(right(left(h)))), the sum / sqrt 2
                 mlp_norm -> mlp -> mlp_post_norm, added
        correct: the router again on the result, correction_coefs + 1 times the innovation
                 (result - active prediction, repeated to the A streams), plus the predictions
        per-layer input: output_scale * stream 0 -> per_layer.gate -> act -> * this layer's
                 per-layer input -> per_layer.proj -> per_layer.norm, added to streams 1..A-1
    """

    def __init__(self, cfg: ModelConfig, i: int, impl: str, softmax_fp32: bool, recompute: str,
                 dtype):
        super().__init__()
        self.cfg, self.stack, self.i, self.has_cross = cfg, "", i, False
        D, A, r, P = cfg.d_model, cfg.altup_inputs, cfg.laurel_rank, cfg.per_layer_dim
        self.window = mask_key(cfg, i)
        lin = lambda a, b: nn.Linear(a, b, bias=False, dtype=dtype)  # noqa: E731
        self.altup = nn.Module()
        self.altup.router_norm = make_norm(cfg, D, dtype)
        self.altup.modality_router = AltUpRouter(D, A, bias=False, dtype=dtype)
        self.altup.prediction_coefs = lin(A, A * A)
        self.altup.predict = AltUpMix()
        self.altup.correct_norm = Borrowed(self.altup.router_norm)
        self.altup.correct_router = Borrowed(self.altup.modality_router)
        self.altup.correction_coefs = ClampedLinear(A, A, bias=False, dtype=dtype)
        self.altup.correct = AltUpCorrect()
        self.altup.output_scale = Scale(D, dtype)
        self.attn_norm = make_norm(cfg, D, dtype)
        self.attn = Gemma3nAttention(cfg, i, impl, softmax_fp32, recompute, dtype)
        self.attn_post_norm = make_norm(cfg, D, dtype)
        if r:
            self.laurel = nn.Module()
            self.laurel.linear_left, self.laurel.linear_right = lin(D, r), lin(r, D)
            self.laurel.norm = make_norm(cfg, D, dtype)
        self.mlp_norm = make_norm(cfg, D, dtype)
        self.mlp = MLP(cfg, cfg.layer_ffn_width(i), cfg.mlp_bias, dtype)
        self.mlp.act = SparseAct(cfg.activation, cfg.act_sparsity[i] if cfg.act_sparsity else 0)
        self.mlp_post_norm = make_norm(cfg, D, dtype)
        if P:
            base = {"geglu_tanh": "gelu_tanh", "geglu": "gelu", "swiglu": "silu",
                    "reglu": "relu"}.get(cfg.activation, cfg.activation)
            self.per_layer = nn.Module()
            self.per_layer.gate, self.per_layer.act = lin(D, P), Act(base)
            self.per_layer.proj, self.per_layer.norm = lin(P, D), make_norm(cfg, D, dtype)
        self.full_recompute = recompute == "full"

    def _modalities(self, norm, router, x):
        return router(norm(x) * (1.0 / self.cfg.d_model)).type_as(x)

    def forward(self, x, ctx: Ctx, enc=None, caches=None):
        if self.full_recompute and torch.is_grad_enabled():
            return self._checkpointed(x, ctx)
        return self.run(x, ctx)

    def _checkpointed(self, x, ctx: Ctx):
        """Full recompute: the block keeps its inputs, the A streams, the per-layer inputs
        (all layers' in one tensor) and, in a shared-KV layer, the keys and values it reads;
        a layer that makes keys and values returns them from its checkpoint (so that the
        layers reading them pass their gradient back)."""
        import copy
        shared = self.attn.shared
        kv = ctx.shared_kv[self.attn.key] if shared else ()

        def run(x_, per_layer, *kv_):
            c = copy.copy(ctx)
            c.per_layer, c.shared_kv = per_layer, {self.attn.key: tuple(kv_)} if shared else {}
            out = self.run(x_, c)
            return out if shared else (out, *c.shared_kv[self.attn.key])
        out = checkpoint(run, x, getattr(ctx, "per_layer", None), *kv, use_reentrant=True)
        if shared:
            return out
        out, k, v = out
        ctx.shared_kv[self.attn.key] = (k, v)
        return out

    def run(self, x, ctx: Ctx):
        al, A = self.altup, self.cfg.altup_inputs
        B, S = x.shape[1:3]
        modalities = self._modalities(al.router_norm, al.modality_router, x[0])
        if self.training:  # HF clamps the prediction weights in place (no gradient)
            al.prediction_coefs.weight.data.clamp_(-ALTUP_COEF_CLIP, ALTUP_COEF_CLIP)
        coefs = al.prediction_coefs(modalities).reshape(B, S, A, A).permute(0, 1, 3, 2)
        pred = al.predict(x, coefs)
        active = pred[0]
        h = self.attn_norm(active)
        bias = ctx.bias[self.window] if ctx.bias is not None else None
        out = active + self.attn_post_norm(self.attn(h, ctx, bias,
                                                     ctx.plain_causal(self.window)))
        if hasattr(self, "laurel"):
            lr = self.laurel
            out = (out + (h + lr.norm(lr.linear_right(lr.linear_left(h))))) / math.sqrt(2)
        out = out + self.mlp_post_norm(self.mlp(self.mlp_norm(out)))
        modalities = self._modalities(al.correct_norm, al.correct_router, out)
        corrected = al.correct(pred, active, out, al.correction_coefs(modalities))
        if not hasattr(self, "per_layer"):
            return corrected
        pl = self.per_layer
        first = al.output_scale(corrected[0].clone())
        first = pl.act(pl.gate(first), ctx.per_layer[:, :, self.i])  # act(gate) * input
        corrected[1:] += pl.norm(pl.proj(first))
        return corrected


# --- state-space mixers (txcalc/engine/mixers.py) ------------------------------------------------------
class CausalConv1d(nn.Module):
    """Depthwise causal conv1d over (B, S, C) followed by SiLU, as HF and Mamba's reference
    code run it: padded by k - 1 on both sides, the first S outputs kept (S + k - 1 computed).
    Saves its input (a view of in_proj's output: that whole storage) and the SiLU's input
    (the S kept outputs, made contiguous)."""

    def __init__(self, channels: int, kernel: int, bias: bool, dtype, act: bool = True):
        super().__init__()
        self.k, self.act = kernel, act
        self.weight = nn.Parameter(torch.empty(channels, 1, kernel, dtype=dtype))
        self.bias = nn.Parameter(torch.zeros(channels, dtype=dtype)) if bias else None
        nn.init.normal_(self.weight, std=kernel ** -0.5)

    def forward(self, x):
        S, C = x.shape[1], x.shape[2]
        y = F.conv1d(x.transpose(1, 2), self.weight, self.bias, padding=self.k - 1, groups=C)
        # a copy (clone: contiguous() returns a size-1 view as it is)
        y = y[..., :S].transpose(1, 2).clone(memory_format=torch.contiguous_format)
        return F.silu(y) if self.act else y


class MambaScan(nn.Module):
    """Mamba's selective scan (Gu and Dao 2023, arXiv:2312.00752, Algorithm 2) as HF's
    sequential torch path runs it, in fp32: dt = softplus(dt), per token
    h_t = exp(dt_t A) h_{t-1} + (dt_t x_t) B_t, y_t = h_t C_t (a bmm), then y + D x and the
    gate silu(z). Owns A_log (E, N) and D (E)."""

    def __init__(self, E: int, N: int, dtype):
        super().__init__()
        self.A_log = nn.Parameter(torch.log(torch.arange(1, N + 1, dtype=torch.float32)
                                            ).repeat(E, 1).to(dtype))
        self.D = nn.Parameter(torch.ones(E, dtype=dtype))

    def forward(self, x, dt, B, C, z):
        A = -torch.exp(self.A_log.float())
        delta = F.softplus(dt.float())
        xf, Bf, Cf = x.float(), B.float(), C.float()
        dA = torch.exp(delta[..., None] * A)  # (B, S, E, N)
        dx = delta * xf
        h, ys = None, []
        for t in range(x.shape[1]):
            dBx = dx[:, t, :, None] * Bf[:, t, None, :]
            h = dBx if h is None else dA[:, t] * h + dBx
            ys.append(torch.bmm(h, Cf[:, t, :, None])[..., 0])
        y = torch.stack(ys, 1) + x * self.D
        return (y * F.silu(z)).to(x.dtype)


class Mamba(nn.Module):
    """The Mamba mixer under the engine's paths: ``mamba.{in_proj, conv1d, x_proj,
    dt_norm, b_norm, c_norm, dt_proj, scan, out_proj}``."""

    def __init__(self, cfg: ModelConfig, dtype):
        super().__init__()
        D, E, N, R = cfg.d_model, cfg.ssm_d_inner, cfg.ssm_state, cfg.ssm_dt_rank
        self.E, self.N, self.R = E, N, R
        self.in_proj = nn.Linear(D, 2 * E, bias=cfg.ssm_bias, dtype=dtype)
        self.conv1d = CausalConv1d(E, cfg.ssm_conv, cfg.ssm_conv_bias, dtype)
        self.x_proj = nn.Linear(E, R + 2 * N, bias=False, dtype=dtype)
        self.norms = cfg.ssm_dt_norms
        if self.norms:
            self.dt_norm, self.b_norm, self.c_norm = (RMSNorm(w, True, dtype) for w in (R, N, N))
        self.dt_proj = nn.Linear(R, E, bias=True, dtype=dtype)
        self.scan = MambaScan(E, N, dtype)
        self.out_proj = nn.Linear(E, D, bias=cfg.ssm_out_bias, dtype=dtype)

    def forward(self, x):
        xs, z = self.in_proj(x).chunk(2, dim=-1)
        xs = self.conv1d(xs)
        dt, B, C = (t.clone(memory_format=torch.contiguous_format)
                    for t in self.x_proj(xs).split([self.R, self.N, self.N], -1))
        if self.norms:
            dt, B, C = self.dt_norm(dt), self.b_norm(B), self.c_norm(C)
        return self.out_proj(self.scan(xs, self.dt_proj(dt), B, C, z))


def _copy(t):
    """A contiguous copy (``clone``: ``contiguous()`` returns an already-contiguous view as it
    is, which would make what is saved depend on sizes of 1)."""
    return t.clone(memory_format=torch.contiguous_format)


def _contract(a, b):
    """a @ b over the last two dims; a contraction over one element is a broadcast multiply
    (what torch's einsum runs, and FlopCounterMode counts as 0). Either saves a and b."""
    return a * b if a.shape[-1] == 1 else torch.matmul(a, b)


def _decays(cum, width: int):
    """exp(cum_l - cum_s) for l >= s, else 0, over the last dim: (..., W) -> (..., W, W). Saves
    the mask (W x W bool, once) and the exp's output."""
    keep = torch.tril(torch.ones(width, width, dtype=torch.bool, device=cum.device))
    diff = cum[..., :, None] - cum[..., None, :]
    return torch.exp(diff.masked_fill(~keep, -torch.inf))


class SSDScan(nn.Module):
    """Mamba-2's chunked SSD (Dao and Gu 2024, arXiv:2405.21060, section 6 and Listing 1; the
    algorithm of HF's ``mamba2_chunk_scan``), in fp32, at chunk length Q, with the five
    contractions of ``ops.ssd_flops`` as explicit matmuls on contiguous copies (so what each
    saves is fixed: ``ops.ssd_saved_bytes``). Owns dt_bias, A_log and D (one per head)."""

    def __init__(self, H: int, P: int, N: int, G: int, Q: int, dtype):
        super().__init__()
        self.H, self.P, self.N, self.G, self.Q = H, P, N, G, Q
        self.dt_bias = nn.Parameter(torch.zeros(H, dtype=dtype))
        self.A_log = nn.Parameter(torch.log(torch.arange(1, H + 1, dtype=torch.float32)).to(dtype))
        self.D = nn.Parameter(torch.ones(H, dtype=dtype))

    def forward(self, x, dt, B, C):
        b, S = x.shape[:2]
        H, P, N, G, Q = self.H, self.P, self.N, self.G, self.Q
        c = -(-S // Q)
        pad = c * Q - S
        dt = F.softplus(dt + self.dt_bias).float()
        A = -torch.exp(self.A_log.float())
        xf = x.float().view(b, S, H, P)
        heads = lambda t: t.float().view(b, S, G, 1, N).expand(b, S, G, H // G, N).reshape(  # noqa
            b, S, H, N)
        chunked = lambda t: F.pad(t, (0, 0) * (t.dim() - 2) + (0, pad)).view(  # noqa: E731
            b, c, Q, *t.shape[2:])
        xdt = chunked(xf * dt[..., None])  # (b, c, Q, H, P)
        cum = torch.cumsum(chunked(A * dt), dim=2).permute(0, 1, 3, 2)  # (b, c, H, Q)
        Bt = _copy(chunked(heads(B)).permute(0, 1, 3, 4, 2))  # (b, c, H, N, Q)
        Ct = _copy(chunked(heads(C)).permute(0, 1, 3, 2, 4))  # (b, c, H, Q, N)
        Xt = _copy(xdt.permute(0, 1, 3, 2, 4))  # (b, c, H, Q, P)
        # 1. inside each chunk: (C B^T masked by the decays) x
        y = _contract(_contract(Ct, Bt) * _decays(cum, Q), Xt)
        # 2. each chunk's final state: B^T (decayed to the chunk's end) x
        states = _contract(Bt * torch.exp(cum[..., -1:] - cum)[..., None, :], Xt)  # b,c,H,N,P
        # 3. every chunk's start state, across chunks (c + 1 >= 2: always a matmul)
        states = torch.cat([torch.zeros_like(states[:, :1]), states], dim=1)
        ends = F.pad(cum[..., -1], (0, 0, 1, 0)).permute(0, 2, 1)  # (b, H, c + 1)
        starts = torch.matmul(_decays(torch.cumsum(ends, -1), c + 1),
                              _copy(states.permute(0, 2, 1, 3, 4)).view(b, H, c + 1, N * P))
        starts = _copy(starts[:, :, :-1].view(b, H, c, N, P).permute(0, 2, 1, 3, 4))
        # 4. the start state read out by C, decayed to each position
        y = y + _contract(Ct, starts) * torch.exp(cum)[..., None]
        y = y.permute(0, 1, 3, 2, 4).reshape(b, c * Q, H, P)[:, :S]
        return (y + xf * self.D[:, None]).reshape(b, S, H * P)


class GatedRMSNorm(nn.Module):
    """Mamba-2's norm before out_proj: RMSNorm(y * silu(z)) over groups, in fp32."""

    def __init__(self, width: int, groups: int, dtype):
        super().__init__()
        self.groups = groups
        self.weight = nn.Parameter(torch.ones(width, dtype=dtype))

    def forward(self, y, z):
        dtype = z.dtype
        y = y.float() * F.silu(z.float())
        g = y.view(*y.shape[:-1], self.groups, -1)
        g = g * torch.rsqrt(g.pow(2).mean(-1, keepdim=True) + 1e-6)
        return self.weight * g.view(y.shape).to(dtype)


class Mamba2(nn.Module):
    """The Mamba-2 mixer under the engine's paths: ``mamba.{in_proj, conv1d, scan, norm,
    out_proj}``."""

    def __init__(self, cfg: ModelConfig, dtype):
        super().__init__()
        D, E, N, G, H = cfg.d_model, cfg.ssm_d_inner, cfg.ssm_state, cfg.ssm_groups, cfg.ssm_heads
        self.E, self.C, self.H = E, E + 2 * G * N, H
        self.split = [E, G * N, G * N]
        self.in_proj = nn.Linear(D, E + self.C + H, bias=cfg.ssm_bias, dtype=dtype)
        self.conv1d = CausalConv1d(self.C, cfg.ssm_conv, cfg.ssm_conv_bias, dtype)
        self.scan = SSDScan(H, cfg.ssm_head_dim, N, G, cfg.ssm_chunk, dtype)
        if cfg.ssm_gated_norm:
            self.norm = GatedRMSNorm(E, G, dtype)
        self.out_proj = nn.Linear(E, D, bias=cfg.ssm_out_bias, dtype=dtype)

    def forward(self, x):
        z, xBC, dt = self.in_proj(x).split([self.E, self.C, self.H], dim=-1)
        xs, B, C = (_copy(t) for t in self.conv1d(xBC).split(self.split, dim=-1))
        y = self.scan(xs, dt, B, C)
        y = self.norm(y, z) if hasattr(self, "norm") else y * F.silu(z.float())
        return self.out_proj(y.to(x.dtype))


class ShortConv(nn.Module):
    """LFM2's gated short convolution under ``conv.{in_proj, conv1d, out_proj}``:
    out_proj(C * conv(B * x))."""

    def __init__(self, cfg: ModelConfig, dtype):
        super().__init__()
        D, bias = cfg.d_model, cfg.ssm_bias
        self.in_proj = nn.Linear(D, 3 * D, bias=bias, dtype=dtype)
        self.conv1d = CausalConv1d(D, cfg.ssm_conv, bias, dtype, act=False)
        self.out_proj = nn.Linear(D, D, bias=bias, dtype=dtype)

    def forward(self, x):
        B, C, xs = self.in_proj(x).chunk(3, dim=-1)
        return self.out_proj(C * self.conv1d(B * xs))


def _l2norm(x):
    """q or k over its head width, as FLA and HF (eps 1e-6): saves x and 1/|x| (fp32)."""
    return x * torch.rsqrt((x * x).sum(-1, keepdim=True) + 1e-6)


class GDNScan(nn.Module):
    """The chunked gated delta rule (Yang, Kautz and Hatamizadeh 2024, arXiv:2412.06464; the
    algorithm of HF's ``torch_chunk_gated_delta_rule``, Qwen3-Next), in fp32, at chunk length
    Q, with the products of ``ops.gdn_flops``: per chunk the UT system (beta k) k^T and the
    scores q k^T (both masked by the decays), two unit-triangular solves, then a sequential
    pass over the chunks (w S, q S, scores (u - w S), k^T (u - w S)). Owns dt_bias and A_log
    (one per value head): the decay g = -exp(A_log) softplus(a + dt_bias), beta =
    sigmoid(b)."""

    def __init__(self, Hv: int, Hk: int, dk: int, dv: int, Q: int, dtype):
        super().__init__()
        self.Hv, self.Hk, self.dk, self.dv, self.Q = Hv, Hk, dk, dv, Q
        self.dt_bias = nn.Parameter(torch.ones(Hv, dtype=dtype))
        self.A_log = nn.Parameter(torch.log(torch.arange(1, Hv + 1, dtype=torch.float32)).to(dtype))

    def forward(self, q, k, v, a, b):
        # q, k: (B, S, Hk, dk); v: (B, S, Hv, dv); a, b: (B, S, Hv)
        B, S = q.shape[:2]
        H, Q, dk, dv = self.Hv, self.Q, self.dk, self.dv
        c = -(-S // Q)
        pad = c * Q - S
        beta = torch.sigmoid(b.float())
        g = -torch.exp(self.A_log.float()) * F.softplus(a.float() + self.dt_bias.float())
        r = H // self.Hk
        heads = lambda t: _copy(t.float().repeat_interleave(r, dim=2).transpose(1, 2))  # noqa
        q = _l2norm(heads(q)) * dk ** -0.5  # (B, H, S, dk)
        k = _l2norm(heads(k))
        v = _copy(v.float().transpose(1, 2))  # (B, H, S, dv)
        beta, g = beta.transpose(1, 2), g.transpose(1, 2)  # (B, H, S)
        chunked = lambda t: F.pad(t, (0, 0, 0, pad)).view(B, H, c, Q, t.shape[-1])  # noqa
        q, k, v = chunked(q), chunked(k), chunked(v)
        beta = F.pad(beta, (0, pad)).view(B, H, c, Q, 1)
        cum = torch.cumsum(F.pad(g, (0, pad)).view(B, H, c, Q), dim=-1)
        k_beta, v_beta = k * beta, v * beta
        keep = torch.tril(torch.ones(Q, Q, dtype=torch.bool, device=q.device))
        decays = torch.exp((cum[..., :, None] - cum[..., None, :]).masked_fill(~keep, -torch.inf))
        kt = k.transpose(-1, -2)
        ut = torch.matmul(k_beta, kt) * decays
        scores = torch.matmul(q, kt) * decays
        u = torch.linalg.solve_triangular(ut, v_beta, upper=False, unitriangular=True)
        w = torch.linalg.solve_triangular(ut, k_beta * torch.exp(cum)[..., None], upper=False,
                                          unitriangular=True)
        q = q * torch.exp(cum)[..., None]
        # the state updates: with one chunk, only the last one, which feeds nothing in
        # training; HF computes it all the same (its FLOPs count) and drops its graph at
        # once: computed without one here
        updates = torch.is_grad_enabled() and c > 1
        with torch.set_grad_enabled(updates):
            k = k * torch.exp(cum[..., -1:] - cum)[..., None]
            ends = torch.exp(cum[..., -1])[..., None, None]  # (B, H, c, 1, 1)
        state = torch.zeros(B, H, dk, dv, device=q.device)
        outs = []
        for i in range(c):
            v_new = u[:, :, i] - torch.matmul(w[:, :, i], state)
            outs.append(torch.matmul(q[:, :, i], state) + torch.matmul(scores[:, :, i], v_new))
            with torch.set_grad_enabled(updates and i < c - 1):
                state = state * ends[:, :, i] + torch.matmul(k[:, :, i].transpose(-1, -2),
                                                             v_new)
        y = torch.stack(outs, 2).view(B, H, c * Q, dv)[:, :, :S]
        return _copy(y.transpose(1, 2))  # (B, S, H, dv), fp32


class GDNNorm(nn.Module):
    """Qwen3-Next's gated RMSNorm over each value head (dv): RMSNorm in fp32, the scale in the
    activation dtype, then * silu(z) in fp32, cast back."""

    def __init__(self, width: int, dtype):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(width, dtype=dtype))

    def forward(self, y, z):
        dtype = z.dtype
        y = y.float()
        y = y * torch.rsqrt(y.pow(2).mean(-1, keepdim=True) + 1e-6)
        y = self.weight * y.to(dtype)
        return (y * F.silu(z.float())).to(dtype)


class GatedDeltaNet(nn.Module):
    """Qwen3-Next's linear attention under the engine's paths: ``linear_attn.{in_proj_qkvz,
    in_proj_ba, conv1d, scan, norm, out_proj}`` (``txcalc.engine.mixers.gated_deltanet``)."""

    def __init__(self, cfg: ModelConfig, dtype):
        super().__init__()
        D, k = cfg.d_model, cfg.ssm_conv
        Hv, dv, Hk, dk = cfg.ssm_heads, cfg.ssm_head_dim, cfg.ssm_groups, cfg.ssm_state
        self.split = [Hk * dk, Hk * dk, Hv * dv, Hv * dv]
        self.shape = (Hv, dv, Hk, dk)
        lin = lambda o: nn.Linear(D, o, bias=False, dtype=dtype)  # noqa: E731
        self.fused = not cfg.gdn_split_proj
        if self.fused:  # Qwen3-Next
            self.in_proj_qkvz, self.in_proj_ba = lin(2 * Hk * dk + 2 * Hv * dv), lin(2 * Hv)
        else:  # Qwen3.5
            self.in_proj_qkv, self.in_proj_z = lin(2 * Hk * dk + Hv * dv), lin(Hv * dv)
            self.in_proj_b, self.in_proj_a = lin(Hv), lin(Hv)
        self.conv1d = CausalConv1d(2 * Hk * dk + Hv * dv, k, False, dtype)
        self.scan = GDNScan(Hv, Hk, dk, dv, cfg.ssm_chunk, dtype)
        self.norm = GDNNorm(dv, dtype)
        self.out_proj = nn.Linear(Hv * dv, D, bias=False, dtype=dtype)

    def forward(self, x):
        B, S = x.shape[:2]
        Hv, dv, Hk, dk = self.shape
        if self.fused:
            q, k, v, z = self.in_proj_qkvz(x).split(self.split, dim=-1)
            b, a = self.in_proj_ba(x).chunk(2, dim=-1)
            qkv = torch.cat((q, k, v), dim=-1)
        else:
            qkv, z, b, a = (self.in_proj_qkv(x), self.in_proj_z(x), self.in_proj_b(x),
                            self.in_proj_a(x))
        q, k, v = self.conv1d(qkv).split(self.split[:3], dim=-1)
        y = self.scan(q.view(B, S, Hk, dk), k.view(B, S, Hk, dk), v.view(B, S, Hv, dv), a, b)
        y = self.norm(y.to(x.dtype), _copy(z.view(B, S, Hv, dv)))
        return self.out_proj(y.reshape(B, S, Hv * dv))


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
                                "tests/test_hybrids.py measures their state on HF's cache")
        return KVCache(self.window), None


class BlockDiagonalGate(nn.Module):
    """An RG-LRU gate: sigmoid(x W + b) with W block-diagonal, Hb blocks of b x b (HF's
    baddbmm over the blocks). Saves its input (a view) and the sigmoid's output."""

    def __init__(self, blocks: int, width: int, dtype):
        super().__init__()
        self.weight = nn.Parameter(torch.randn(blocks, width, width, dtype=dtype) * width ** -0.5)
        self.bias = nn.Parameter(torch.zeros(blocks, width, dtype=dtype))

    def forward(self, x):
        B, S, L = x.shape
        blocks, b = self.bias.shape
        xr = x.reshape(B * S, blocks, b).permute(1, 0, 2)
        res = torch.baddbmm(self.bias[:, None, :], xr, self.weight)
        return torch.sigmoid(res.transpose(0, 1).reshape(B, S, L))


class _SqrtBoundDerivative(torch.autograd.Function):
    """sqrt with its gradient clipped at 1000 (HF RecurrentGemma's SqrtBoundDerivative)."""

    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return torch.sqrt(x)

    @staticmethod
    def backward(ctx, grad):
        (x,) = ctx.saved_tensors
        return grad / torch.sqrt(torch.clip(4.0 * x, min=1 / 1000.0 ** 2))


class RGLRUScan(nn.Module):
    """The RG-LRU recurrence (De et al. 2024, arXiv:2402.19427, eq. 1-4) as HF runs it:
    a = exp(-8 r softplus(Lambda)), x scaled by i and sqrt(1 - a^2) (1 at the first position,
    where the state resets), h_t = a_t h_{t-1} + x_t in fp32, one token at a time; the output
    times the gate branch y. The reset is written as position 0's values (no bool masks), and
    the state starts as a zero tensor in the graph, so every position keeps the same tensors.
    Owns Lambda (``recurrent_param``, L)."""

    def __init__(self, width: int, dtype):
        super().__init__()
        self.recurrent_param = nn.Parameter(torch.full((width,), 0.5, dtype=dtype))

    def forward(self, x, i_gate, r_gate, y):
        log_a = -8.0 * r_gate * F.softplus(self.recurrent_param)
        a, a_sq = torch.exp(log_a), torch.exp(2 * log_a)
        gated = x * i_gate
        mult = _SqrtBoundDerivative.apply(1 - a_sq)
        mult = torch.cat((torch.ones_like(mult[:, :1]), mult[:, 1:]), dim=1)
        normed = gated * mult
        a = torch.cat((torch.zeros_like(a[:, :1]), a[:, 1:]), dim=1)
        h, hs = normed[:, 0].float() * 0.0, []
        for t in range(x.shape[1]):
            h = a[:, t].float() * h + normed[:, t].float()
            hs.append(h.to(x.dtype))
        return torch.stack(hs, dim=1) * y


class RecurrentBlock(nn.Module):
    """Griffin's recurrent block under the engine's paths (``txcalc.engine.mixers.rglru_block``):
    ``recurrent.{linear_y, act, linear_x, conv1d, input_gate, recurrent_gate, scan,
    linear_out}``."""

    def __init__(self, cfg: ModelConfig, dtype):
        super().__init__()
        D, L, k = cfg.d_model, cfg.ssm_d_inner, cfg.ssm_conv
        self.linear_y = nn.Linear(D, L, dtype=dtype)
        self.act = Act("gelu_tanh")
        self.linear_x = nn.Linear(D, L, dtype=dtype)
        self.conv1d = CausalConv1d(L, k, True, dtype, act=False)
        self.input_gate = BlockDiagonalGate(cfg.ssm_heads, L // cfg.ssm_heads, dtype)
        self.recurrent_gate = BlockDiagonalGate(cfg.ssm_heads, L // cfg.ssm_heads, dtype)
        self.scan = RGLRUScan(L, dtype)
        self.linear_out = nn.Linear(L, D, dtype=dtype)

    def forward(self, x):
        y = self.act(self.linear_y(x))
        xs = self.conv1d(self.linear_x(x))
        h = self.scan(xs, self.input_gate(xs), self.recurrent_gate(xs), y)
        return self.linear_out(h)


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


class StackInputs(nn.Module):
    """Per-stack position table and embedding norm (``[stack.]embed.*``)."""


class Stack(nn.Module):
    """One stack's members; for single-stack models they are attached to the model itself."""


class Head(nn.Module):
    """Tied output head: uses the token table's weight; owns only its bias."""

    def __init__(self, table: nn.Embedding, bias: bool, dtype):
        super().__init__()
        self.table = [table]  # a list, so the tied weight is not registered twice
        self.bias = nn.Parameter(torch.zeros(table.num_embeddings, dtype=dtype)) if bias else None

    def forward(self, x):
        return F.linear(x, self.table[0].weight, self.bias)


class Loss(nn.Module):
    """Cross-entropy on fp32 logits: saves the fp32 log-probabilities and the int64 labels
    (fused, torch.compile'd: the logits as given, two fp32 row statistics, the labels)."""

    fused = False

    def forward(self, logits, labels):
        return (compiled("cross_entropy") if self.fused else _cross_entropy)(logits, labels)


class Pooler(nn.Module):
    """BERT pooler: Linear(D, D) + tanh on the first token."""

    def __init__(self, d: int, dtype):
        super().__init__()
        self.weight = nn.Parameter(torch.empty(d, d, dtype=dtype))
        self.bias = nn.Parameter(torch.zeros(d, dtype=dtype))
        nn.init.normal_(self.weight, std=d ** -0.5)

    def forward(self, x):
        # a copy of the first token (a view would keep the whole (B, S, D) output alive)
        return torch.tanh(F.linear(x[:, 0].clone(), self.weight, self.bias))


class HeadTransform(nn.Module):
    """A head's dense -> GELU -> norm (the masked-LM transform; ModernBERT's head)."""

    def __init__(self, cfg: ModelConfig, d_in: int, d_out: int, bias: bool, norm: bool, dtype):
        super().__init__()
        self.dense = nn.Linear(d_in, d_out, bias=bias, dtype=dtype)
        self.act = Act("gelu")
        self.norm = make_norm(cfg, d_out, dtype) if norm else None

    def forward(self, x):
        x = self.act(self.dense(x))
        return self.norm(x) if self.norm is not None else x


class Classifier(nn.Module):
    """Classification head: optional dense/GELU(/norm) (``cls_dense``), then Linear(D, n)."""

    def __init__(self, cfg: ModelConfig, dtype):
        super().__init__()
        D = cfg.d_model
        if cfg.cls_dense:
            self.dense = nn.Linear(D, D, bias=cfg.head_dense_bias, dtype=dtype)
            self.act = Act("gelu")
            if cfg.head_norm:
                self.norm = make_norm(cfg, D, dtype)
        self.out = nn.Linear(D, cfg.n_labels, dtype=dtype)

    def forward(self, x):
        if hasattr(self, "dense"):
            x = self.act(self.dense(x))
            if hasattr(self, "norm"):
                x = self.norm(x)
        return self.out(x)


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
    the single kernel torch.compile builds from the same code."""
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
