"""The state-space and recurrent mixers (txcalc/engine/mixers.py), under the engine's paths:
Mamba (selective scan), Mamba-2 (chunked SSD), LFM2's short convolution, Qwen3-Next's gated
DeltaNet (chunked gated delta rule) and Griffin's RG-LRU recurrent block. Scans run in fp32.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from txcalc.model.config import ModelConfig

from .layers import Act, RMSNorm, _copy


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
