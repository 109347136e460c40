"""The feed-forward half of a block: the dense MLP (``mlp.{gate,up}_proj -> mlp.act ->
mlp.down_proj``) and the MoE (``moe.router -> moe.experts.* (+ moe.shared.*, shared_gate)``).

MoE routing needs data-dependent shapes (tokens per expert). On real tensors the experts run a
loop over the routed tokens of each expert; on the ``meta`` device or under FakeTensorMode,
where there are no values to route, one matmul over all T*k routed rows stands in for the loop:
same shapes, same FLOPs, same saved bytes.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from txcalc.model.config import ModelConfig

from .layers import Act, _symbolic, drop, maybe_drop


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
