"""The LM loss computed without the whole T x V logits at once: our own implementations of the
two ways frameworks do it, for the engine's ``Workload.loss`` (txcalc/engine/workload.py).

    loss          | what runs                                   | after the design of
    --------------|---------------------------------------------|-------------------------------
    chunked:N     | the final hidden states split along the     | torchtune CEWithChunkedOutputLoss
                  |  sequence into N chunks (tensor_split), the |  (torchtune/modules/loss/
                  |  output projection per chunk, then per chunk|  ce_chunked_output_loss.py) with
                  |  logits.float() + cross_entropy(sum); the   |  TransformerDecoder's chunked
                  |  sum over chunks / the non-ignored tokens   |  output (model.output per chunk)
    fused-linear  | one autograd Function: rows in chunks of    | Liger-Kernel
                  |  next_pow2(ceil(T / ceil(V / D))); per chunk|  fused_linear_cross_entropy
                  |  logits = h W^T, the softmax gradient in    |  (src/liger_kernel/ops/
                  |  their place, grad_input[rows] = g W and    |  fused_linear_cross_entropy.py)
                  |  grad_weight += g^T h, all in forward;      |
                  |  saves grad_input (and grad_weight)         |

Both give the mean cross-entropy over the non-ignored labels, as the model's own loss. The
fused-linear Function is written in PyTorch (Liger's kernel is Triton, GPU only): its matmuls and
what it keeps are Liger's; the row softmax runs in fp32 (Liger's kernel computes in fp32 and
writes the gradient back in the logits' dtype).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

IGNORE = -100


def _count(labels: torch.Tensor) -> int:
    # a Python number, as torchtune's divisor (labels != ignore).sum() but not kept as a tensor
    return int((labels != IGNORE).sum())


def chunked_loss(model, h: list, labels: torch.Tensor, n: int) -> torch.Tensor:
    """torchtune-style: ``h`` is a one-element list (so the caller keeps no reference to the
    hidden states, as torchtune's model returns only the logit chunks)."""
    count = _count(labels)
    chunks = h.pop().tensor_split(n, dim=1)
    logits = [model.logits(c) for c in chunks]
    del chunks
    targets = [t.reshape(-1) for t in labels.tensor_split(n, dim=1)]
    total = None
    for lg, t in zip(logits, targets):
        part = F.cross_entropy(lg.float().reshape(-1, lg.shape[-1]), t, ignore_index=IGNORE,
                               reduction="sum")
        total = part if total is None else total + part
    del logits, targets
    return total / count


class _FusedLinearCE(torch.autograd.Function):
    """Liger's forward-with-gradient: no T x V tensor outlives a chunk."""

    @staticmethod
    def forward(ctx, x, weight, labels, count):
        rows, d = x.shape
        vocab = weight.shape[0]
        inc = -(-vocab // d)
        chunk = min(1 << (max(1, -(-rows // inc)) - 1).bit_length(), rows)
        grad_x = torch.zeros_like(x)
        grad_w = torch.zeros_like(weight) if weight.requires_grad else None
        loss = torch.zeros(rows, dtype=torch.float32, device=x.device)
        for start in range(0, rows, chunk):
            xs, ys = x[start:start + chunk], labels[start:start + chunk]
            logits = xs @ weight.t()
            # the softmax gradient (p - onehot) / count, in the logits' place and dtype
            lse = torch.logsumexp(logits.float(), dim=-1)
            valid = ys != IGNORE
            safe = torch.where(valid, ys, 0)
            picked = logits.gather(1, safe[:, None])[:, 0].float()
            loss[start:start + chunk] = torch.where(valid, lse - picked, 0.0)
            g = torch.exp(logits.float() - lse[:, None])
            g[torch.arange(len(ys)), safe] -= 1.0
            g *= (valid.float() / count)[:, None]
            logits.copy_(g)
            del g
            grad_x[start:start + chunk] = logits @ weight
            if grad_w is not None:
                grad_w += logits.t() @ xs
            del logits
        ctx.save_for_backward(grad_x, *(() if grad_w is None else (grad_w,)))
        ctx.has_w = grad_w is not None
        return loss.sum() / count

    @staticmethod
    def backward(ctx, grad_out):
        saved = ctx.saved_tensors
        grad_x = saved[0] * grad_out if grad_out.item() != 1.0 else saved[0]
        grad_w = (saved[1] * grad_out if grad_out.item() != 1.0 else saved[1]) \
            if ctx.has_w else None
        return grad_x, grad_w, None, None


def fused_linear_loss(model, h: list, labels: torch.Tensor) -> torch.Tensor:
    """Liger-style fused linear cross-entropy on the model's bias-free lm_head (tied: the token
    table's weight, as Liger's ``LigerFusedLinearCrossEntropyLoss(lm_head.weight, ...)``)."""
    x = h.pop()
    if model.cfg.embed_dim != model.cfg.d_model:
        x = model.proj_out(x)
    head = model.lm_head
    weight = head.table[0].weight if hasattr(head, "table") else head.weight  # tied: the table's
    count = _count(labels)
    return _FusedLinearCE.apply(x.reshape(-1, x.shape[-1]), weight, labels.reshape(-1), count)


def use_loss(model, loss: str):
    """Make ``model`` (a ReferenceModel with an LM head) compute its loss as ``loss`` says
    (Workload.loss: "full", "chunked:N", "fused-linear"); returns the model."""
    from txcalc.engine.workload import loss_chunks
    if loss == "full":
        model.lm_loss = None
    elif loss == "fused-linear":
        model.lm_loss = fused_linear_loss
    else:
        n = loss_chunks(loss)
        model.lm_loss = lambda m, h, labels: chunked_loss(m, h, labels, n)
    return model
