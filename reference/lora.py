"""Fine-tuning the reference model: LoRA / DoRA adapters and frozen parameters, under the
engine's op paths (txcalc/engine/finetune.py).

``finetune(model, ft)`` rewrites a built ReferenceModel in place:

    mode          | what changes
    --------------|--------------------------------------------------------------------------
    lora, qlora   | each target nn.Linear at path P becomes a LoRALinear that keeps P.weight
    dora          |  and P.bias (frozen) and adds P.lora_A, P.lora_B (nn.Linear, no bias) and,
                  |  for dora, P.dora.weight (the magnitude vector); every other parameter is
                  |  frozen. qlora's base stays in the model dtype here (the bytes of NF4
                  |  storage are checked against bitsandbytes apart; its FLOPs and saved bytes
                  |  are LoRA's)
    freeze        | parameters outside the trainable ops stop requiring grad
    all           | the token embedding's output requires grad (PEFT's
                  |  enable_input_require_grads), so gradients pass through frozen blocks

The adapter follows PEFT's ``lora.Linear.forward`` (y = W x + b + B(A(drop(x))) * alpha / r)
and ``DoraLinearLayer.forward`` (m = magnitude / ||W + s B A|| row-wise, detached; y = W x +
b + (m - 1) W x + m (s B A x)), with the merged product B A computed under no_grad.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from txcalc.engine.finetune import Finetune, apply_finetune
from txcalc.engine.components import model_ops


class DoraScale(nn.Module):
    """DoRA's magnitude ``weight`` (d_out) and the rescaling of the base and LoRA outputs."""

    def __init__(self, magnitude: torch.Tensor):
        super().__init__()
        self.weight = nn.Parameter(magnitude)

    def forward(self, base_out, lora_out, weight, a, b, scaling: float):
        with torch.no_grad():  # PEFT detaches the norm: no gradient through it
            # PEFT's DoraLinearLayer forms B A as lora_B(lora_A(eye(d_in))).T
            eye = torch.eye(a.shape[1], dtype=weight.dtype, device=weight.device)
            merged = weight + scaling * F.linear(F.linear(eye, a), b).T
            norm = torch.linalg.vector_norm(merged, dim=1).to(weight.dtype)
        m = self.weight / norm
        return (m - 1) * base_out + m * lora_out * scaling


class LoRALinear(nn.Module):
    """A frozen Linear (its ``weight`` and ``bias`` kept under the same names) plus a rank-r
    update ``lora_B(lora_A(x))`` scaled by alpha / r (and DoRA's ``dora`` rescaling)."""

    def __init__(self, base: nn.Linear, rank: int, alpha: float, dropout: float, dora: bool):
        super().__init__()
        self.weight, self.bias = base.weight, base.bias
        dtype, device = base.weight.dtype, base.weight.device
        d_out, d_in = base.weight.shape
        self.lora_A = nn.Linear(d_in, rank, bias=False, dtype=dtype, device=device)
        self.lora_B = nn.Linear(rank, d_out, bias=False, dtype=dtype, device=device)
        self.scaling = alpha / rank
        self.lora_dropout = nn.Dropout(dropout) if dropout else None
        if not base.weight.is_meta:
            with torch.no_grad():  # PEFT's init: A random, B zero (the update starts at 0)
                self.lora_A.weight.normal_(0.0, 1.0 / rank)
                self.lora_B.weight.zero_()
        self.dora = DoraScale(torch.linalg.vector_norm(base.weight.detach(), dim=1)) \
            if dora else None

    def forward(self, x):
        base = F.linear(x, self.weight)
        h = self.lora_dropout(x) if self.lora_dropout is not None else x
        lora = self.lora_B(self.lora_A(h))
        if self.dora is not None:
            out = base + self.dora(base, lora, self.weight, self.lora_A.weight,
                                   self.lora_B.weight, self.scaling)
        else:
            out = base + lora * self.scaling
        return out + self.bias if self.bias is not None else out


def _input_requires_grad(module, args, out):
    if not out.requires_grad:
        out.requires_grad_(True)


def finetune(model: nn.Module, ft: Finetune) -> nn.Module:
    """Apply ``ft`` to a built reference model in place (the table above); returns it.
    Trainable parameters are exactly those of the engine's trainable ops."""
    ops = apply_finetune(model.cfg, model_ops(model.cfg), ft)
    if ft.adapters:
        for op in ops:
            if op.path.endswith(".lora_A"):
                path = op.path.removesuffix(".lora_A")
                parent_path, _, name = path.rpartition(".")
                parent = model.get_submodule(parent_path)
                setattr(parent, name, LoRALinear(getattr(parent, name), ft.rank, ft.alpha,
                                                 ft.lora_dropout, ft.mode == "dora"))
    trainable = {op.path for op in ops if op.trainable and op.params}
    for name, p in model.named_parameters():
        p.requires_grad_(name.rpartition(".")[0] in trainable)
    model.embed.tokens.register_forward_hook(_input_requires_grad)
    return model
