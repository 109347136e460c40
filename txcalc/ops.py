"""The Op record: one named computation of the model and every cost it declares, once.

An Op is a module-sized piece of the model (a Linear, a norm, an embedding table, the attention
core). Its ``path`` is the dotted name of the matching module in the reference model
(``layers.3.attn.q_proj``; ``encoder.layers.0.mlp.up_proj`` for encoder-decoder models), so
predicted and measured rows join by name. Every total, per-layer view and DataFrame in txcalc is
a sum over Op rows; nothing re-derives a formula.

Parameters of an op:

    operation                | shape of weights           | params
    -------------------------|----------------------------|-------------------------
    linear(d_in -> d_out)    | W: d_out x d_in, b: d_out  | d_in*d_out (+ d_out)
    embedding(rows, width)   | E: rows x width            | rows*width
    layernorm(width)         | gamma, beta: width         | 2*width (1*width no bias)
    rmsnorm(width)           | gamma: width               | width
    routed experts           | E copies of an MLP         | E * (one expert); k active
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Op:
    """One computation and its declared costs.

    ``instances`` counts identical copies that share one row (the routed experts of a MoE
    layer); ``active`` is how many of them one token uses (top-k). ``params`` is per copy.
    A tied output head has ``params == 0``: the weights are counted once, in the embedding.
    """

    path: str  #: dotted module path in the reference model
    kind: str  #: linear | embedding | norm | ...
    stack: str  #: "" (single stack), "encoder" or "decoder"
    layer: int  #: block index within the stack, -1 outside the blocks
    component: str  #: path inside the block ("attn.q_proj") or outside it ("embed.tokens")
    params: int = 0  #: parameters of one instance
    instances: int = 1  #: identical copies (routed experts)
    active: int = 1  #: copies one token uses (top-k of the routed experts)
    d_in: int = 0  #: input width (linear) or table rows (embedding)
    d_out: int = 0  #: output width

    @property
    def params_total(self) -> int:
        return self.params * self.instances

    @property
    def params_active(self) -> int:
        return self.params * self.active


def linear(path: str, where: tuple[str, int], component: str, d_in: int, d_out: int,
           bias: bool, *, tied: bool = False, instances: int = 1, active: int = 1) -> Op:
    """y = x W^T + b. ``tied``: W belongs to another op (the tied output head); a bias is own."""
    params = (0 if tied else d_in * d_out) + (d_out if bias else 0)
    return Op(path, "linear", where[0], where[1], component, params, instances, active,
              d_in, d_out)


def embedding(path: str, where: tuple[str, int], component: str, rows: int, width: int) -> Op:
    """A lookup table: rows x width parameters, no matmul."""
    return Op(path, "embedding", where[0], where[1], component, rows * width, 1, 1, rows, width)


def norm(path: str, where: tuple[str, int], component: str, width: int, norm_type: str,
         bias: bool, affine: bool) -> Op:
    """LayerNorm (scale and optional shift) or RMSNorm (scale only); none without affine."""
    per_feature = 0
    if affine:
        per_feature = 2 if (norm_type == "layernorm" and bias) else 1
    return Op(path, "norm", where[0], where[1], component, per_feature * width, 1, 1, width, width)
