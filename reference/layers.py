"""Primitives every part of the reference model uses: norms (fp32 inside, as HF Llama's
RMSNorm), the MLP nonlinearity, dropout that registers only when the config has it, and the
kernels a framework profile fuses (``compiled``: what torch.compile builds from the same code).
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from txcalc.model.config import ModelConfig


def _symbolic(t: torch.Tensor) -> bool:
    """True when ``t`` carries no values: the meta device or a FakeTensor."""
    if t.is_meta:
        return True
    from torch._subclasses.fake_tensor import FakeTensor
    return isinstance(t, FakeTensor)


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


def _copy(t):
    """A contiguous copy (``clone``: ``contiguous()`` returns an already-contiguous view as it
    is, which would make what is saved depend on sizes of 1)."""
    return t.clone(memory_format=torch.contiguous_format)
