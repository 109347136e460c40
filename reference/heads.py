"""The heads after the last stack: the tied LM head, the loss (cross-entropy on fp32 logits),
BERT's pooler, the masked-LM transform and the classifiers.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from txcalc.model.config import ModelConfig

from .layers import Act, _cross_entropy, compiled, make_norm


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
