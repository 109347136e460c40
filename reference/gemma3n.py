"""Gemma 3n's block (``components.gemma3n_block``): AltUp's streams (predict, correct), LAuReL,
shared-KV attention, sparse activations and the per-layer inputs, HF's
``Gemma3nTextDecoderLayer`` op for op.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.checkpoint import checkpoint

from txcalc.model.config import ModelConfig

from .attention import AttentionCore, Rotary, attend
from .context import Ctx, apply_rotary, mask_key
from .layers import Act, make_norm
from .mlp import MLP


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
    ``Gemma3nTextDecoderLayer`` op for op (tests/conformance/test_gemma3n.py checks equal outputs):

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
