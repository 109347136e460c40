"""The sharding plan: how each Op's parameters and saved tensors split over TP, EP and PP.

Read from the roles components.py declares on each Op (``Op.tp``, ``Op.act_split``,
``Op.placement``), in Megatron-LM's layout (Shoeybi et al. arXiv:1909.08053):

    module                                  | TP style  | weight [out, in] per GPU | bias
    ----------------------------------------|-----------|--------------------------|---------
    q/k/v_proj, gate/up_proj, q_b/kv_b_proj | colwise   | [ceil(out/t), in]        | split
    o_proj, down_proj                       | rowwise   | [out, ceil(in/t)]        | replicated
    embed.tokens                            | vocab     | [ceil(V/t), D]           | -
    lm_head                                 | colwise   | [ceil(V/t), D] (vocab-parallel logits)
    norms, router, q_a/kv_a_proj (MLA),     | replicate | whole                    | whole
    position tables, pooler, proj_in/out    |           |                          |
    moe.experts.*                           | EP, then TP as above: E/ep experts per GPU

Saved activations (what backward keeps) divide the same way: tensors inside a TP region
(attention heads and their probability-dropout masks, the MLP hidden and its dropout, the
input of a rowwise Linear, vocab-parallel logits) split over t; tensors on the residual stream
(norm inputs, inputs of colwise Linears, residual dropout masks) split over t only with
sequence parallelism (Korthikanti et al.,
arXiv:2205.05198, section 4.2.2); position tables and token ids stay whole.

Pipeline stages: blocks split as evenly as possible, extra blocks going to the middle
stages first (stage 0 carries the embeddings, the last stage the final norm, head and loss:
Megatron's uneven first/last stages). A tied head on a pipeline of more than one stage keeps
its own copy of the embedding shard on the last stage (Megatron's word-embedding copy).
"""

from __future__ import annotations

from functools import lru_cache

from ..model.config import ModelConfig
from ..engine.ops import Op
from ..units import cdiv
from ..engine.workload import Workload

from ..engine.ops import TP_REGION_KINDS  # noqa: F401  (re-exported: the roles' vocabulary)


_cdiv = cdiv


def tp_style(op: Op) -> str:
    """colwise | rowwise | vocab | replicate: the role components.py declared on the op."""
    return op.tp


def act_share(op: Op) -> str:
    """How the op's saved tensors split over TP: tp | residual (tp only with SP) | whole."""
    return op.act_split


def _local_instances(op: Op, ep: int) -> int:
    return op.instances // ep if op.instances > 1 else op.instances


def local_tensors(op: Op, tp: int, ep: int = 1, tied_copy: bool = False
                  ) -> list[tuple[int, int, int]]:
    """Parameter tensors of the op on one GPU as (dim 0, elements per dim-0 row, count).

    Linear weights are [out, in] (torch's layout, ``Op.tensors``); routed experts are ``E/ep``
    separate modules per GPU. ``tied_copy``: a tied head holding its own copy of the
    embedding shard.
    """
    n = _local_instances(op, ep)
    tensors = list(op.tensors())
    if op.tied and tied_copy:
        tensors.insert(0, (op.d_out, op.d_in, 2))
    out = []
    for d0, rest, ndim in tensors:
        if op.tp in ("colwise", "vocab"):
            d0 = cdiv(d0, tp)  # weight rows and the colwise bias
        elif op.tp == "rowwise" and ndim == 2:
            rest = cdiv(rest, tp)  # the rowwise bias is replicated
        out.append((d0, rest, n))
    return out


def zero_shard_rows(d0: int, shards: int, rank: int) -> int:
    """Rows of a dim-0 size ``d0`` tensor that ZeRO rank ``rank`` of ``shards`` holds, unpadded
    (FSDP2 splits dim 0 by ceiling division: the last ranks may hold fewer rows, or none)."""
    size = cdiv(d0, shards)
    return max(0, min(size, d0 - rank * size))


def fsdp_padding(tensors, shards: int) -> int:
    """Elements FSDP2 pads over all ranks: every rank's storage is ceil(d0 / shards) rows, so
    ``shards x`` rank 0's padded shard = the parameters + this padding."""
    return sum((shards * cdiv(d0, shards) - d0) * rest * n for d0, rest, n in tensors)


def local_params(op: Op, tp: int, ep: int = 1, tied_copy: bool = False) -> int:
    """Parameters of the op held by one GPU (the largest shard: ceil-divided)."""
    return sum(d0 * rest * n for d0, rest, n in local_tensors(op, tp, ep, tied_copy))


def local_saved_bytes(op: Op, work: Workload, act_bytes: int, tp: int, sp: bool,
                      pairs: bool = True) -> int:
    """Bytes the op saves for backward on one GPU of a TP group (full micro-batch);
    ``pairs=False`` leaves out the S x S part (selective recompute)."""
    b = op.saved_bytes(work, act_bytes, pairs=pairs)
    share = act_share(op)
    if share == "tp" or (share == "residual" and sp):
        return _cdiv(b, tp)
    return b


@lru_cache(maxsize=1024)
def stage_blocks(n_blocks: int, pp: int) -> tuple[range, ...]:
    """Block indices of each stage: n // pp each, the remainder to stages 1, 2, ... (the first
    stage also runs the embeddings, the last the head and the loss). Cached: the planner's
    tables ask for every (blocks, pp) many times."""
    base, extra = divmod(n_blocks, pp)
    sizes = [base] * pp
    order = list(range(1, pp)) + [0]
    for i in range(extra):
        sizes[order[i]] += 1
    out, start = [], 0
    for s in sizes:
        out.append(range(start, start + s))
        start += s
    return tuple(out)


def block_index(cfg: ModelConfig, op: Op) -> int:
    """Global block number of an op (encoder blocks first), -1 outside blocks."""
    if op.layer < 0:
        return -1
    if op.stack == "decoder":
        return cfg.n_encoder_layers + op.layer
    return op.layer


def assign_stages(cfg: ModelConfig, ops, pp: int) -> list[list[Op]]:
    """The ops of each pipeline stage, in forward order."""
    n_blocks = sum(depth for _, depth in cfg.stacks)
    stage_of_block = {}
    for s, r in enumerate(stage_blocks(n_blocks, pp)):
        for b in r:
            stage_of_block[b] = s
    stages: list[list[Op]] = [[] for _ in range(pp)]
    for op in ops:
        if op.placement == "block":
            stages[stage_of_block[block_index(cfg, op)]].append(op)
        else:
            stages[0 if op.placement == "pre" else -1].append(op)
    return stages
