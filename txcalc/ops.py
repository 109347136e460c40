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

FLOPs (a multiply-add is 2 FLOPs; "rows" are the tokens an op sees, T = B*S):

    operation                  | forward FLOPs                 | backward FLOPs
    ---------------------------|-------------------------------|--------------------------------
    linear(d_in -> d_out)      | 2 * T * d_in * d_out * active | 2 x forward (input and weight
                               |   (bias adds are elementwise: |   gradients); FlopCounterMode
                               |   not counted)                |   counts exactly these
    attn scores  Q K^T         | 2 * B * H * S_q * S_k * h_qk  | 2 x forward (dQ, dK)
    attn context P V           | 2 * B * H * S_q * S_k * h_v   | 2 x forward (dP, dV)
    fused attention (flash)    | same as eager                 | 2.5 x forward (the kernel
                               |                               |   recomputes the scores)
    embedding, norm, softmax   | 0 matmul FLOPs                | 0

Executed attention FLOPs use the full S_q x S_k (what dense kernels run and what torch's
FlopCounterMode counts); model FLOPs count only the attended pairs: causal i >= j, and
i - j < window with sliding windows.
"""

from __future__ import annotations

from dataclasses import dataclass

from .workload import Workload


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
    d_in: int = 0  #: input width (linear), table rows (embedding), h_qk (attention)
    d_out: int = 0  #: output width; h_v for the attention context
    stream: str = "seq"  #: whose tokens are the rows: seq, src (encoder) or first (pooler)
    kv_stream: str = ""  #: attention only: whose tokens are the keys
    heads: int = 0  #: attention only: query heads
    causal: bool = False  #: attention only: causal mask
    window: int = 0  #: attention only: sliding window (0 = none)

    @property
    def params_total(self) -> int:
        return self.params * self.instances

    @property
    def params_active(self) -> int:
        return self.params * self.active

    # --- FLOPs ---------------------------------------------------------------------------
    def pairs(self, w: Workload, model: bool = False) -> int:
        """(query, key) pairs per sequence and head: all of them, or only the attended ones."""
        s_q, s_k = w.length(self.stream), w.length(self.kv_stream)
        if not model or not self.causal:
            return s_q * s_k
        return causal_pairs(s_q, self.window)

    def fwd_flops(self, w: Workload, model: bool = False) -> int:
        """Forward matmul FLOPs; ``model`` skips masked attention pairs."""
        if self.kind == "linear":
            return 2 * w.rows(self.stream) * self.d_in * self.d_out * self.active
        if self.kind in ("attn_scores", "attn_context"):
            width = self.d_in if self.kind == "attn_scores" else self.d_out
            return 2 * w.batch * self.heads * self.pairs(w, model) * width
        return 0

    def bwd_flops(self, w: Workload, model: bool = False) -> int:
        """Backward matmul FLOPs: 2x forward; a fused attention kernel counts 2.5x."""
        fwd = self.fwd_flops(w, model)
        if self.kind in ("attn_scores", "attn_context") and w.attn_impl == "flash":
            return fwd * 5 // 2
        return 2 * fwd


def causal_pairs(s: int, window: int = 0) -> int:
    """Attended pairs of a causal mask over s tokens: s(s+1)/2, or with a window w < s:
    w(w+1)/2 for the first w rows plus (s - w) * w for the rest."""
    if not window or window >= s:
        return s * (s + 1) // 2
    return window * (window + 1) // 2 + (s - window) * window


def linear(path: str, where: tuple[str, int], component: str, d_in: int, d_out: int,
           bias: bool, *, tied: bool = False, instances: int = 1, active: int = 1,
           stream: str = "seq") -> Op:
    """y = x W^T + b. ``tied``: W belongs to another op (the tied output head); a bias is own."""
    params = (0 if tied else d_in * d_out) + (d_out if bias else 0)
    return Op(path, "linear", where[0], where[1], component, params, instances, active,
              d_in, d_out, stream)


def attention_core(path: str, where: tuple[str, int], component: str, *, heads: int,
                   qk_dim: int, v_dim: int, stream: str, kv_stream: str, causal: bool,
                   window: int) -> list[Op]:
    """softmax(Q K^T / sqrt(h)) V as two matmul ops: ``.scores`` and ``.context``."""
    common = dict(d_in=qk_dim, d_out=v_dim, stream=stream, kv_stream=kv_stream, heads=heads,
                  causal=causal, window=window)
    return [Op(f"{path}.scores", "attn_scores", where[0], where[1], f"{component}.scores",
               **common),
            Op(f"{path}.context", "attn_context", where[0], where[1], f"{component}.context",
               **common)]


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
