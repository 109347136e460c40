"""fp8 training's memory terms (TransformerEngine's default recipe): the weight copies and
scaling metadata it adds, and the 1-byte saved inputs of the Linears it runs in fp8. Read by
``memory`` (a step on one GPU) and the planner (``train.evaluate``) alike."""

from __future__ import annotations

from typing import NamedTuple

from .ops import Op


class Fp8Recipe(NamedTuple):
    """fp8 training as TransformerEngine runs it by default on Hopper and Ada (te.Linear /
    LayerNormLinear / LayerNormMLP in every block, DelayedScaling, bf16 parameters, fp32 master
    weights in the optimizer); embeddings, the output head, norms and the MoE router stay bf16.

        term                  | bytes                                      | source
        ----------------------|--------------------------------------------|------------------
        fp8 weight copies     | weight_copies (2) per block-Linear weight:  | TE #1261: Hopper's
                              |   the fp8 weight and its fp8 transpose,     |   fp8 GEMMs are TN
                              |   cached between steps (TE's workspaces)    |   only; #1880: 1 B
                              |                                             |   on Blackwell
        amax history, scales  | per Linear (per expert): 3 fp8 tensors      | DelayedScaling
                              |   (input, weight, output gradient) x (1024  |   amax_history_len
                              |   fp32 amax + fp32 scale + scale_inv)       |   = 1024
        saved Linear inputs   | 1 byte per element (TE keeps the fp8        | TE docs, "Memory
                              |   columnwise copy) instead of the bf16 one; |   usage": 2 MB bf16
                              |   o_proj's input stays alive in bf16 for    |   weight + 1 MB fp8
                              |   the attention core's backward, so there   |   weight + 1 MB fp8
                              |   it adds the fp8 byte                      |   input + ...
        matmul peak           | block Linears on the fp8 tensor-core peak;  | timing.op_times
                              |   attention, head in bf16                   |
    """
    weight_copies: int = 2  #: fp8 weight + its transpose, at the step's peak (backward)
    forward_copies: int = 1  #: made by forward (the rowwise fp8 weight; the transpose is for
    #: the backward GEMMs): TE's docs measure 8.02 MiB after forward of a 1024 x 1024 te.Linear
    amax_history: int = 1024
    tensors_per_linear: int = 3


#: per precision policy: its fp8 recipe (None: no fp8)
FP8_RECIPE = {"fp8-mixed": Fp8Recipe()}


def fp8_op(op: Op) -> bool:
    """Ops fp8 training runs in fp8: the Linears inside the blocks but the MoE router (and the
    shared-expert gate)."""
    return op.kind == "linear" and op.layer >= 0 and op.component not in (
        "moe.router", "moe.shared_gate")


def fp8_weight_bytes(ops, precision: str) -> int:
    """fp8 weight copies (and transposes) plus the amax histories and scales of the ops."""
    r = FP8_RECIPE.get(precision)
    if r is None:
        return 0
    total = 0
    for op in ops:
        if fp8_op(op) and op.params:
            weight = op.d_in * op.d_out * (not op.tied)
            meta = r.tensors_per_linear * (r.amax_history + 2) * 4
            total += (r.weight_copies * weight + meta) * op.instances
    return total


def fp8_saved_delta(op: Op, saved: int, act_bytes: int, precision: str) -> int:
    """Change of one op's saved bytes under fp8 training (Fp8Recipe): a block Linear keeps its
    input as 1-byte fp8 instead of act_bytes; o_proj's bf16 input is kept anyway (the attention
    core's output), so the fp8 copy adds to it."""
    if precision not in FP8_RECIPE or not fp8_op(op) or not saved or not op.saved:
        return 0
    fp8 = saved // act_bytes
    return fp8 if op.component.endswith("o_proj") else fp8 - saved
