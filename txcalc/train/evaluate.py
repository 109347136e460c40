"""Per-GPU memory and step time of parallel layouts, vectorised over a grid of layouts.

Everything is a sum over the engine's Op rows, sharded by ``parallel.sharding``: the ops of
identical blocks are grouped once, each group's sharded parameters, optimizer states, saved
activations and roofline time (``txcalc.engine.timing``) are computed once per TP/EP/CP/micro-batch
value, contracted with the number of blocks of each group on a pipeline stage, and the
layouts are then evaluated as numpy arrays (one entry per layout).

Per-GPU memory of a pipeline stage, by category (w, g, m, s: weight, gradient, fp32 master and
optimizer-state bytes of the precision policy; P: parameters on the GPU after TP/EP):

    category      | bytes                                                  | sharded over
    --------------|--------------------------------------------------------|-----------------
    weights       | w * P; ZeRO-2: + FSDP2's padding and sharded parameter | ZeRO-3
    gradients     | g * P; ZeRO-1, 2: memory.ZERO_BYTES (Megatron, FSDP2)  | ZeRO-2, 3
    optimizer     | m * P + states (engine's optimizer_state_bytes per op) | ZeRO-1, 2, 3
                  |   + step counters per tensor (memory.OPTIMIZER_SPECS)  |   (steps: never)
    activations   | saved for backward per micro-batch (TP/SP/CP-split)    |
                  |   x micro-batches in flight (1F1B: min(pp - stage, m); |
                  |   interleaved, v chunks: blocks x C / v, C = min(      |
                  |   (pp - stage - 1) x 2 + (v - 1) x pp + 1, m x v), and |
                  |   the embeddings/head x the in-flight micro-batches of |
                  |   their one chunk (inflight_chunks: Megatron-Core's    |
                  |   schedule; stage 0: pp + (pp - 1) / v micro-batches)  |
    inputs        | the batch and the loss beside the saved tensors, per   |
                  |   in-flight micro-batch of the edge chunk (engine's    |
                  |   held_inputs): stage 0 a frozen table's ids and leaf, | ids: CP; leaf:
                  |   the last stage the labels the loss does not save and |   SP, CP
                  |   the fp32 loss                                        |
    logits        | the loss's largest transient, last stage (engine's     | TP, CP (the
                  |   loss_transient, the stack's loss kernel's: HF's full |   loss)
                  |   loss two fp32 T x V buffers, Megatron's in-place     |
                  |   vocab-parallel one a T V; lm_loss.full_loss_extra),  |
                  |   or the stage's largest dequantised weight (the       |
                  |   engine's dequant_buffer_bytes), the larger of the two|
    recompute     | full recompute: the block rerun in backward beside     | TP/SP, CP (as
                  |   every checkpoint (saved.recompute_transient: one     |   the block's
                  |   block's saved bytes with no recompute and the        |   saved bytes)
                  |   gradients in flight in its backward: MLP's or eager  |
                  |   attention's) and its dequantised weight, less        |
                  |   the head's and loss's saved tensors (freed by then,  |
                  |   last stage), above "logits"                          |
    zero3 buffers | unsharded weights (weight dtype) of the stage's params | (ZeRO-3 only)
                  |   outside blocks (FSDP2's root unit stays unsharded     |
                  |   from forward to backward) + `prefetch` largest blocks |
                  |   (at most the stage's parameters)                      |
    step          | the optimizer step's peak above the rest: max(0, model | ZeRO-1, 2, 3 (the
                  |   states + the batch (held.step_held_inputs) + the     |   local shard's
                  |   step's fp32 gradient copy and temporaries (memory.   |   transients)
                  |   optimizer_step_extra, the stack's kernel) - the sum  |
                  |   above): activations and logits are freed by then     |
    framework     | CUDA context + comm buffers + fragmentation x the rest | (Overheads)

ZeRO shards dense parameters over dp * cp (hybrid shard: over the GPUs of one node) and
expert parameters over dp * cp / ep, splitting dim 0 of every tensor by ceiling division
(FSDP2's rule, padding included: the numbers are rank 0's, which holds the largest shard;
checked byte for byte against FSDP2 on gloo in tests/conformance/test_distributed.py). The search
screens the first, second, last and most-parameter pipeline stages; ``evaluate_layouts``
(used for the layouts a plan reports) evaluates every stage.

Recompute policies (``build_tables``): a mode (none, selective, full, op) for the first N
blocks of each stage and none for the rest (N = 0: every block; Megatron's block method), and
full recompute with its checkpoints in host memory (``Layout.offload_checkpoints``: the
recomputed blocks' saved bytes move to ``host_bytes``, crossing PCIe twice a micro-batch).
Optimizer offload (``TrainSetting.offload_optimizer``): the optimizer category moves to
``host_bytes`` too.

Step time: (m + (pp - 1) / v) x the slowest stage's micro-batch time (compute + exposed TP,
EP, CP and PP communication and offload traffic), plus exposed DP communication and the
optimizer step; bubble fraction (pp - 1) / (v m) (Narayanan et al., arXiv:2104.04473, section
2.2). What is exposed follows ``TrainSetting.overlap`` (txcalc.engine.stacks.OVERLAPS), each a stated
assumption:

    collective           | exposed without overlap | with overlap
    ---------------------|-------------------------|------------------------------------------
    TP (per micro-batch) | all                     | "tp": max(0, TP s - stage compute outside
                         |                         |   the attention core)
    PP sends             | all                     | "pp": max(0, PP s - stage compute)
    DP grad reduction    | all                     | "grad_reduce": max(0, s - last backward)
    ZeRO-1/2 all-gather  | all                     | "param_gather": max(0, s - stage 0's
                         |                         |   forward of one micro-batch)
    ZeRO-3 gathers       | prefetched always: m x max(0, 2 AG + RS - micro-batch time)
    offloaded checkpoints| max(0, 2 x bytes / PCIe - stage compute) With an achieved
throughput given (``achieved_flops_per_gpu``, FLOP/s of hardware work per GPU) the step time
is hardware FLOPs / (GPUs x achieved) instead, as in that paper's end-to-end estimate.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

from ..engine.held import held_inputs, step_held_inputs
from ..engine.memory import (OPTIMIZER_SPECS, STATES_PER_PARAM, loss_transient,
                             optimizer_step_extra, zero_bytes)
from ..units import cdiv
from ..parallel import comm
from ..parallel.layout import RECOMPUTE, RECOMPUTE_POLICIES, Layout, check_layout
from ..parallel.sharding import stage_blocks
from .setting import (TrainSetting, group_activations, group_counts, group_dequant, group_flops,
                      group_backward_transient, group_shapes, group_states, group_times,
                      padded_params, shard_groups)

GiB = 2**30


def inflight_chunks(pp: int, v: int, m: int, stage: int) -> tuple[int, int]:
    """``_inflight_chunks`` (below), with m above 6 pp reduced by whole groups of pp: the
    schedule repeats group by group after its warm-up (< (v + 1) pp forwards), so more groups
    add no new peak (checked against the full schedule for pp 2-16, v 2-4, m < 14 pp); the
    batch search's large m then costs no longer tables."""
    if v > 1 and m > 6 * pp:
        m -= pp * ((m - 6 * pp) // pp)
    return _inflight_chunks(pp, v, m, stage)


@lru_cache(maxsize=4096)
def _inflight_chunks(pp: int, v: int, m: int, stage: int) -> tuple[int, int]:
    """Most model chunks in flight (forwards whose backward has not run) on pipeline rank
    ``stage``, and most of them of its edge chunk (model chunk 0 on the first rank, which holds
    the embeddings; chunk v - 1 on the last, which holds the head and the loss), over one step
    of Megatron-Core's schedule with ``m`` micro-batches and ``v`` model chunks a rank.

    v = 1 (``forward_backward_pipelining_without_interleaving``): pp - stage - 1 warm-up
    forwards, then one forward before each backward: min(pp - stage, m) micro-batches.
    v > 1 (``forward_backward_pipelining_with_interleaving``; megatron/core/pipeline_parallel/
    schedules.py, ``get_pp_rank_microbatches`` and ``get_schedule_table`` at NVIDIA/Megatron-LM
    6e091e1b68): W = min((pp - stage - 1) * 2 + (v - 1) * pp, m * v) warm-up forwards (the
    micro-batch group ``microbatch_group_size_per_vp_stage`` defaults to pp), then forward
    W + k before backward k: W + 1 chunks in flight at each steady-state forward (all m * v
    when W reaches them). Forwards run chunk by chunk over groups of pp micro-batches (the last
    group takes the remainder), backwards in the same order with chunk c replaced by v - 1 - c;
    the edge count is the most in flight of that one chunk over the step."""
    import numpy as np
    if v == 1:
        n = max(1, min(pp - stage, m))
        return n, n
    total = m * v
    warm = min((pp - stage - 1) * 2 + (v - 1) * pp, total)
    chunk = []  # the forward schedule table's model chunk ids (get_schedule_table)
    for lo in range(0, m, pp):
        size = m - lo if lo + pp >= m else pp
        chunk.extend(c for c in range(v) for _ in range(size))
        if lo + pp >= m:
            break
    fwd = np.asarray(chunk)
    edge = 0 if stage == 0 else v - 1
    if warm == total:
        return total, m
    f = np.concatenate(([0], np.cumsum(fwd == edge)))  # edge forwards among the first i
    b = np.concatenate(([0], np.cumsum(v - 1 - fwd == edge)))  # edge backwards among the first i
    k = np.arange(total - warm)  # steady state: forward warm + k, then backward k
    return warm + 1, int((f[warm + 1 + k] - b[k]).max())


# --- the grid evaluator -----------------------------------------------------------------------
@dataclass
class Tables:
    """Stage-level tables: index [pp_i, slot, ...] (the slots: see ``build_tables``)."""

    tps: list
    eps: list
    cps: list
    mbs: list
    pps: list
    shards: list
    arrays: dict


def stage_counts(s: TrainSetting, n_groups: int, block_group: list[int], pp: int,
                 stage: int):
    """(blocks of each group on the stage, has embeddings, has head)."""
    import numpy as np
    c = np.zeros(n_groups + 2, dtype=np.int64)
    for b in stage_blocks(s.n_blocks, pp)[stage]:
        c[block_group[b]] += 1
    c[n_groups] = 1 if stage == 0 else 0
    c[n_groups + 1] = 1 if stage == pp - 1 else 0
    return c


def build_tables(s: TrainSetting, tps, eps, cps, mbs, pps, shards, slots_of=None,
                 policies=None) -> Tables:
    """Per-group costs for every TP/EP/CP/micro-batch value, contracted to stage tables.

    ``policies``: the recompute policies of the grid, (mode index into RECOMPUTE, N,
    offloaded): the first N blocks of each stage run the mode and the rest none (Megatron's
    block method, ``Workload.recompute_layers``; N = 0: every block); offloaded: what the
    recomputed blocks keep (their checkpoints) lives in host memory (``act_host``); default
    the planner's grid's (layout.RECOMPUTE_POLICIES). The rotary tables shared by all blocks
    are counted with block 0 and go with its policy (2 x S x h elements; on one device
    ``saved.saved_rows`` keeps them while any block is not recomputed).

    ``slots_of(pp)`` lists the stages evaluated for a pipeline depth (default: first, second
    (the most micro-batches in flight after the first), last, and the stage with the most
    block parameters (dense-first MoE models); ``evaluate_layouts`` passes every stage)."""
    import numpy as np
    groups, block_group, first, last = s.grouped
    all_groups = groups + [first, last]
    memo = s.group_memo

    def once(cost, gi, *args, **kw):
        """cost(s, ops of group gi, *args, **kw), computed once per setting."""
        key = (cost.__name__, gi, *args, *kw.items())
        if key not in memo:
            memo[key] = cost(s, all_groups[gi], *args, **kw)
        return memo[key]

    G = len(all_groups)
    tied = any(op.tied for op in last)  # the head's own copy of the table when pp > 1
    n_tp, n_ep, n_cp, n_mb = len(tps), len(eps), len(cps), len(mbs)
    st = {k: np.zeros((G, n_tp, n_ep), dtype=np.int64)
          for k in ("p_dense", "p_exp", "o_dense", "o_exp", "tensors", "fp8", "wf_dense",
                    "wf_exp", "w_all")}
    st_copy = {k: np.zeros((n_tp, n_ep), dtype=np.int64) for k in st}
    for gi in range(G):
        for ti, tp in enumerate(tps):
            for ei, ep in enumerate(eps):
                for k, v in once(group_states, gi, tp, ep).items():
                    st[k][gi, ti, ei] = v
                if gi == G - 1 and tied:  # a tied head's own copy of the embedding shard
                    with_copy = once(group_states, gi, tp, ep, tied_copy=True)
                    for k, v in with_copy.items():
                        st_copy[k][ti, ei] = v - st[k][gi, ti, ei]
    NM = len(RECOMPUTE)
    policies = list(policies or RECOMPUTE_POLICIES)
    act = np.zeros((G, n_tp, 2, NM, 2), dtype=np.int64)  # [.., sp, rc, mb=1|2]
    bwdt = np.zeros((G, n_tp, 2, 2), dtype=np.int64)  # the block backward transient [.., mb]
    times = np.zeros((3, G, n_tp, 2, n_cp, n_mb, NM))  # compute, backward, attention
    for gi in range(G):
        for ti, tp in enumerate(tps):
            for si, sp in enumerate((False, True)):
                if sp and tp == 1:
                    act[gi, ti, 1] = act[gi, ti, 0]
                    bwdt[gi, ti, 1] = bwdt[gi, ti, 0]
                    times[:, gi, ti, 1] = times[:, gi, ti, 0]
                    continue
                for bi in (0, 1):
                    bwdt[gi, ti, si, bi] = once(group_backward_transient, gi, tp, sp, bi + 1)
                for ri, rc in enumerate(RECOMPUTE):
                    for bi in (0, 1):
                        act[gi, ti, si, ri, bi] = once(group_activations, gi, tp, sp, rc, bi + 1)
                    for ci, cp in enumerate(cps):
                        for mi, mb in enumerate(mbs):
                            times[:, gi, ti, si, ci, mi, ri] = once(group_times, gi, tp, sp,
                                                                    cp, rc, mb)
    counts = np.array([[group_counts(ops)[k] for k in ("tp_coll", "moe", "attn")]
                       for ops in all_groups], dtype=np.int64)
    flops = [once(group_flops, gi) for gi in range(G)]
    if slots_of is None:  # first, second, last, and the stage holding the most parameters
        block_params = (st["p_dense"][:, 0, 0] + st["p_exp"][:, 0, 0])[:len(groups)]

        def slots_of(pp):
            heavy = max(range(pp), key=lambda k: (int(stage_counts(
                s, len(groups), block_group, pp, k)[:len(groups)] @ block_params), -k))
            return [0, min(1, pp - 1), pp - 1, heavy]
    n_slots = max(len(slots_of(pp)) for pp in pps)
    C = np.zeros((len(pps), n_slots, G), dtype=np.int64)
    inflight_stage = np.zeros((len(pps), n_slots), dtype=np.int64)
    has_head = np.zeros((len(pps), n_slots), dtype=bool)
    valid = np.zeros((len(pps), n_slots), dtype=bool)
    for pi, pp in enumerate(pps):
        for k, stage in enumerate(slots_of(pp)):
            C[pi, k] = stage_counts(s, len(groups), block_group, pp, stage)
            inflight_stage[pi, k] = stage
            has_head[pi, k] = stage == pp - 1
            valid[pi, k] = True
    arrays = {k: np.einsum("psg,gte->pste", C, v) for k, v in st.items()}
    # the largest dequantised weight among the groups on each stage [p, slot, tp, ep]
    dq = np.array([[[once(group_dequant, gi, tp, ep) for ep in eps] for tp in tps]
                   for gi in range(G)], dtype=np.int64)
    arrays["dequant"] = np.max(np.where(C[..., None, None] > 0, dq[None, None], 0), axis=2)
    # the engine's loss transient [mb] (its loss kernel's) and held inputs [ids | leaf |
    # labels | loss, mb, mode] on one GPU of the micro-batch (whole model ops: the head, its
    # norm, the table, block 0's first op)
    arrays["loss_transient"] = np.array([loss_transient(s.cfg, s.ops, s.work(mb), s.precision)
                                         for mb in mbs], dtype=np.int64)
    arrays["held"] = np.array([[held_inputs(s.cfg, s.ops, s.work(mb, rc), s.bytes.act,
                                            s.finetune is not None) for rc in RECOMPUTE]
                               for mb in mbs], dtype=np.int64).transpose(2, 0, 1)
    # the batch alive at the optimizer step [ids | leaf and its gradient | labels | loss, mb]
    arrays["step_held"] = np.array([step_held_inputs(s.cfg, s.ops, s.work(mb), s.bytes.act,
                                                     s.finetune is not None) for mb in mbs],
                                   dtype=np.int64).T
    for k, v in st_copy.items():  # tied copy only where pp > 1 and the head is on the stage
        need = has_head & (np.array(pps)[:, None] > 1)
        arrays[k] = arrays[k] + need[:, :, None, None] * v[None, None]
    shards = sorted(set(int(x) for x in shards) | {1})
    pads = {k: np.zeros((len(pps), n_slots, n_tp, n_ep, len(shards)), dtype=np.int64)
            for k in ("dense", "exp", "tdense", "texp")}
    # all parameters, and (pad_t*) those that train: gradients and optimizer states follow them
    frozen = any(not op.trainable for ops in all_groups for op in ops if op.params)
    for pre, only in (("", False), ("t", True)) if frozen else (("", False),):
        shapes = [[[group_shapes(ops, tp, ep, trainable=only) for ep in eps] for tp in tps]
                  for ops in all_groups]
        copies = [[group_shapes(last, tp, ep, True, only) for ep in eps] for tp in tps]
        for pi, pp in enumerate(pps):
            for k in range(len(slots_of(pp))):
                for ti in range(n_tp):
                    for ei in range(n_ep):
                        for j, kind in enumerate(("dense", "exp")):
                            agg: dict = {}
                            for gi in range(G):
                                src = shapes[gi][ti][ei][j]
                                if gi == G - 1 and has_head[pi, k] and pp > 1 and tied:
                                    src = copies[ti][ei][j]
                                for key, n in src.items():
                                    agg[key] = agg.get(key, 0) + n * int(C[pi, k, gi])
                            pads[pre + kind][pi, k, ti, ei] = padded_params(agg, shards)
    if not frozen:
        pads["tdense"], pads["texp"] = pads["dense"], pads["exp"]
    arrays["pad_dense"], arrays["pad_exp"] = pads["dense"], pads["exp"]
    arrays["pad_tdense"], arrays["pad_texp"] = pads["tdense"], pads["texp"]
    # each policy: the stage's first N blocks under its mode, the rest under none
    none = RECOMPUTE.index("none")

    def recomputed(rl):  # [p, slot, g]: blocks of each group among the first rl of the stage
        if rl == 0:
            return C
        out = np.zeros_like(C)
        for pi, pp in enumerate(pps):
            for k, stage in enumerate(slots_of(pp)):
                for b in stage_blocks(s.n_blocks, pp)[stage][:rl]:
                    out[pi, k, block_group[b]] += 1
                out[pi, k, G - 2:] = C[pi, k, G - 2:]
        return out
    C_rec = {rl: recomputed(rl) for rl in sorted({p[1] for p in policies})}

    edge = np.zeros(G, dtype=np.int64)
    edge[G - 2:] = 1  # the ops outside the blocks (embeddings, head): "edge" below

    def by_policy(table, sub, part="all"):  # table[..., mode] per policy: [.., policy, ..]
        """part: all (times), gpu (saved bytes on the GPU), host (offloaded checkpoints),
        edge (saved bytes of the ops outside the blocks)."""
        out = []
        for mi, rl, off in policies:
            if part == "edge":
                out.append(np.einsum(sub, C_rec[rl] * edge, table[..., mi]))
                continue
            blocks = C_rec[rl].copy()
            blocks[:, :, G - 2:] = 0  # what the recomputed blocks keep: their checkpoints
            host = np.einsum(sub, blocks, table[..., mi]) * (off and part != "all")
            out.append(host if part == "host" else np.einsum(sub, C_rec[rl], table[..., mi])
                       + np.einsum(sub, C - C_rec[rl], table[..., none]) - host)
        return np.stack(out, axis=-1)
    # saved bytes are linear in the micro-batch (position tables aside: the intercept); CP
    # splits them: [p, slot, tp, sp, rc, mb, cp]; "act_host": offloaded checkpoints;
    # "act_edge": the part of "act" outside the blocks (interleaving keeps fewer of them)
    mb_arr = np.array(mbs, dtype=np.int64)[:, None]
    cp_arr = np.array(cps, dtype=np.int64)[None, :]

    def per_mb_cp(x):  # [..., mb=1|2] -> [..., mb, cp]: linear in the micro-batch, CP-split
        x1, x2 = x[..., 0], x[..., 1]
        return -(-(x1[..., None, None] + (x2 - x1)[..., None, None] * (mb_arr - 1)) // cp_arr)
    for name, part in (("act", "gpu"), ("act_host", "host"), ("act_edge", "edge")):
        arrays[name] = per_mb_cp(np.moveaxis(
            by_policy(np.moveaxis(act, 3, -1), "psg,gtxb->pstxb", part), -1, 4))
    # full recompute's rerun in backward (saved.recompute_transient): a block runs its forward
    # again beside every checkpoint, holding what it saves with no recompute (its saved bytes
    # above the checkpoint plus the gradient arriving at its output, the checkpoint's shape)
    # and, in its backward, the gradients above them (its MLP's or eager attention core's,
    # setting.group_backward_transient); the head's and the loss's saved tensors are freed
    # by the last block's rerun (tail_saved)
    # [p, slot, tp, sp, policy, mb, cp]
    present = np.stack([C_rec[rl][:, :, :G - 2] > 0 for _, rl, _ in policies], axis=-1)
    full = np.array([RECOMPUTE[mi] == "full" for mi, _, _ in policies])
    rerun_blk = act[:G - 2, :, :, none] + bwdt[:G - 2]  # [g, t, x, b]
    blk = np.max(np.where(present[:, :, :, None, None, :, None],  # [p, s, g, t, x, pol, b]
                          rerun_blk[None, None, :, :, :, None, :], 0), axis=2)
    tail = np.where(has_head[:, :, None, None, None, None],
                    np.moveaxis(act[G - 1], 2, 3)[None, None], 0)  # [p, s, t, x, b, mode]
    tail = np.stack([tail[..., mi] for mi, _, _ in policies], axis=-2)  # [p, s, t, x, pol, b]
    arrays["rerun"] = per_mb_cp(np.where(
        (present.any(axis=2) & full)[:, :, None, None, :, None], blk - tail, 0))
    for i, k in enumerate(("t_compute", "t_bwd", "t_attn")):
        arrays[k] = by_policy(times[i], "psg,gtxcm->pstxcm")
    arrays["counts"] = np.einsum("psg,gk->psk", C, counts)
    # TP collectives of the recomputed blocks, run again in backward [p, slot, policy]
    arrays["tp_rerun"] = np.stack([np.einsum("psg,g->ps", C_rec[rl], counts[:, 0])
                                   * (RECOMPUTE[mi] in ("full", "op"))
                                   for mi, rl, _ in policies], axis=-1)
    # k and v per token as the attention core reads them (its keys op: K heads, or H for MLA's
    # decompressed keys, of the q/k and the v width): what context parallelism rings around
    arrays["kv_width"] = max((op.kv_heads * (op.d_in + op.d_out) for ops in groups for op in ops
                              if op.kind == "attn_keys"), default=0)
    arrays["stage"] = inflight_stage
    arrays["has_head"] = has_head
    arrays["valid"] = valid
    # parameters outside the blocks on each stage (embeddings on the first, head on the last)
    root = st["p_dense"][G - 2:] + st["p_exp"][G - 2:]  # [first|last, tp, ep]
    arrays["root_params"] = (np.einsum("psg,gte->pste", C[:, :, G - 2:], root)
                             + (has_head & (np.array(pps)[:, None] > 1))[:, :, None, None]
                             * st_copy["p_dense"][None, None])
    arrays["root_wbytes"] = (np.einsum("psg,gte->pste", C[:, :, G - 2:], st["w_all"][G - 2:])
                             + (has_head & (np.array(pps)[:, None] > 1))[:, :, None, None]
                             * st_copy["w_all"][None, None])
    arrays["layer_params"] = max(  # the largest block, for ZeRO-3 gather buffers
        (st["p_dense"][g] + st["p_exp"][g] for g in range(len(groups))),
        key=lambda a: int(a.max()), default=np.zeros((n_tp, n_ep), dtype=np.int64))
    arrays["layer_wbytes"] = max(  # its weights in their format (a QLoRA base: 4-bit)
        (st["w_all"][g] for g in range(len(groups))),
        key=lambda a: int(a.max()), default=np.zeros((n_tp, n_ep), dtype=np.int64))
    blocks = [block_group.count(gi) for gi in range(len(groups))] + [1, 1]
    arrays["model_flops_seq"] = sum(n * f[0] for n, f in zip(blocks, flops))
    # executed FLOPs per sequence for each pipeline depth and policy, over every stage
    hw = np.zeros((len(pps), len(policies)))
    for pi, pp in enumerate(pps):
        for j, (mi, rl, _) in enumerate(policies):
            total = sum(f[1][mi] for f in flops[G - 2:])
            for blocks_of in stage_blocks(s.n_blocks, pp):
                for i, b in enumerate(blocks_of):
                    total += flops[block_group[b]][1][mi if not rl or i < rl else none]
            hw[pi, j] = total
    arrays["hw_flops_seq"] = hw
    return Tables(list(tps), list(eps), list(cps), list(mbs), list(pps), shards, arrays)


_cdiv = cdiv


def evaluate(s: TrainSetting, t: Tables, g: dict, detail: bool = True) -> dict:
    """Evaluate layouts given as equal-length numpy arrays in ``g``: tp, pp, dp, cp, ep, zero,
    hybrid, sp, v (virtual stages), mb, rc (index into RECOMPUTE), and their table indices
    ti, pi, ci, ei, mi. Returns arrays: memory by category of the fullest stage, total, step
    time, MFU, HFU, tokens/s (see ``planner``). ``detail=False`` (the search's screen) keeps
    only the total per GPU, not its categories."""
    import numpy as np
    A = t.arrays
    cfg, gpu, ov = s.cfg, s.gpu, s.overheads
    wb, gb_, mb_, sb, ab = s.bytes
    tp, pp, dp, cp, v, mbatch, zero = (g[k] for k in ("tp", "pp", "dp", "cp", "v", "mb", "zero"))
    n = tp * pp * dp * cp
    ti, pi, ci, ei, mi, rc = g["ti"], g["pi"], g["ci"], g["ei"], g["mi"], g["rc"]
    pol = g.get("pol", rc)  # the recompute policy (build_tables' policies)
    n_pol = A["t_compute"].shape[-1]
    hide = set(s.overlap)
    sp = g["sp"].astype(np.int64)
    shard, shard_e = shard_groups(g, gpu)
    si_d, si_e = np.searchsorted(t.shards, shard), np.searchsorted(t.shards, shard_e)
    one = t.shards.index(1)
    n_sh = len(t.shards)
    # the global batch: the setting's, or one per layout (g["gb"]: the planner's batch search)
    gbatch = g["gb"].astype(np.float64) if "gb" in g else s.global_batch
    m = (gbatch / (dp * mbatch)).astype(np.int64)  # exact: dp * mb divides the batch
    n_slots = A["valid"].shape[1]
    n_tp, n_ep, n_cp, n_mb = len(t.tps), len(t.eps), len(t.cps), len(t.mbs)
    moe = bool(A["pad_exp"].any())
    all_valid = bool(A["valid"].all())
    # flat views: one np.take per table instead of many-index fancy indexing
    flat = {k: A[k].reshape(-1) for k in ("pad_dense", "pad_exp", "act", "t_compute", "t_bwd",
                                          "t_attn", "o_dense", "o_exp", "tensors",
                                          "root_params", "fp8", "pad_tdense", "pad_texp",
                                          "wf_dense", "wf_exp", "w_all", "root_wbytes",
                                          "act_host", "act_edge", "dequant", "rerun")}
    tuned = bool(A["wf_dense"].any() or A["wf_exp"].any())  # a frozen base (fine-tuning)
    shard_idx = {lvl: (np.where(zero >= lvl, si_d, one), np.where(zero >= lvl, si_e, one))
                 for lvl in (1, 2, 3)}
    # per-collective times (the counts differ per stage; latency is per collective)
    tok = mbatch * s.seq
    act_size = tok * cfg.d_model * ab / cp
    unit_tp = comm.collective_s("all_reduce", act_size, tp, 1, gpu)
    unit_ep = comm.collective_s("all_to_all", act_size * max(cfg.top_k, 1), g["ep"], tp * cp,
                                gpu) if moe else 0.0
    kv_width = A["kv_width"]  # k and v elements per token the CP ring passes
    unit_cp = comm.collective_s("p2p", tok / cp * kv_width * ab * (cp - 1), cp, tp, gpu)
    t_pp = comm.collective_s("p2p", act_size / np.where(sp == 1, tp, 1), pp, tp * cp * dp, gpu,
                             2 * v)
    # the loss's transient (last stage; vocab-parallel over TP, sequence over CP) and the
    # batch held beside the saved tensors (held.held_inputs: ids and the frozen table's leaf
    # on stage 0, on the residual stream split by SP; labels and the loss on the last stage)
    logits = _cdiv(A["loss_transient"].take(mi), tp * cp)
    ids_b, leaf_b, labels_b, loss_b = (A["held"][j][mi, rc] for j in range(4))
    held_first = _cdiv(ids_b, cp) + _cdiv(leaf_b, np.where(sp == 1, tp, 1) * cp)
    held_last = _cdiv(labels_b, cp) + loss_b
    # at the optimizer step (activations, logits and ZeRO-3's gathered copies freed): the
    # batch (held.step_held_inputs, split as above), the step's fp32 gradient copy where
    # the rank's gradients are unsharded in the weight dtype (ZeRO-1/2/3 shards already hold
    # fp32 gradients: memory.ZeroBytes) and its kernel's temporaries over the rank's local
    # trainable parameters (memory.optimizer_step_extra, per parameter)
    sids_b, sleaf_b, slabels_b, sloss_b = (A["step_held"][j].take(mi) for j in range(4))
    step_first = _cdiv(sids_b, cp) + _cdiv(sleaf_b, np.where(sp == 1, tp, 1) * cp)
    step_last = _cdiv(slabels_b, cp) + sloss_b
    copy_pp, temp_pp = (0, 0) if s.offload_optimizer else optimizer_step_extra(
        s.optimizer_kernel, s.optimizer, s.precision, 1)
    # a shard group of one rank gathers nothing: ZeRO-3 there is ZeRO-0 (FSDP2 at world 1 keeps
    # no unsharded copies beside its parameters)
    z3 = (zero == 3) & (shard > 1)
    zero3_blocks = np.where(z3, ov.zero3_prefetch_blocks * A["layer_wbytes"][ti, ei], 0)
    master = mb_ if s.optimizer != "none" else 0
    # what a sharded optimizer keeps (memory.ZERO_BYTES: ZeRO-1 Megatron's distributed
    # optimizer, ZeRO-2 FSDP2); a shard group of one rank has nothing to partition: ZeRO-0
    zb = zero_bytes(s.precision, s.optimizer)
    z1, z2 = (zero == 1) & (shard > 1), (zero == 2) & (shard > 1)
    g_held = np.where(z1, zb.zero1_grad, np.where(z2, zb.zero2_grad_shard, gb_))
    g_copy = np.where(z1, zb.zero1_grad_copy, 0)
    p_shard = np.where(z2, zb.zero2_param_shard, 0)
    # ZeRO-2 gathers every parameter into FSDP2's padded all-gather output (d x rank 0's shard)
    gather_d, gather_e = np.where(z2, shard, 1), np.where(z2, shard_e, 1)
    # model chunks in flight on each slot's rank (all of them, and of its edge chunk): one
    # schedule per distinct (pp, v, m, stage) (inflight_chunks)
    chunks, edge_chunks = [], []
    inter = np.flatnonzero(v > 1)
    if len(inter):  # one integer key per (m, pp, v), m reduced as inflight_chunks does
        pp_i, v_i, m_i = pp[inter], v[inter], m[inter]
        m_i = np.where(m_i > 6 * pp_i, m_i - pp_i * ((m_i - 6 * pp_i) // pp_i), m_i)
        span = int(pp_i.max()) + 1
        key_i = (m_i * span + pp_i) * (int(v_i.max()) + 1) + v_i
    for k in range(n_slots):
        stage = A["stage"][:, k].take(pi)
        c = np.maximum(1, np.minimum(pp - stage, m))  # one chunk a rank: plain 1F1B
        e = c.copy()
        if len(inter):
            uniq, inv = np.unique(key_i * span + stage[inter], return_inverse=True)
            rest, st_u = np.divmod(uniq, span)
            rest, v_u = np.divmod(rest, int(v_i.max()) + 1)
            m_u, pp_u = np.divmod(rest, span)
            got = np.array([inflight_chunks(int(a), int(b), int(c_), int(d)) for a, b, c_, d
                            in zip(pp_u, v_u, m_u, st_u)], dtype=np.int64).reshape(-1, 2)
            c[inter], e[inter] = got[inv.reshape(-1), 0], got[inv.reshape(-1), 1]
        chunks.append(c)
        edge_chunks.append(e)
    # TP collectives: forward + backward of every block, and the forward again of the blocks
    # recomputed under full or op-level recompute (A["tp_rerun"])
    best = None
    fwd_first = np.zeros(len(n))  # forward (+ recompute) seconds of a micro-batch, stage 0
    host = np.zeros(len(n), dtype=np.int64)  # offloaded checkpoints in host memory, per GPU
    pcie_opt = np.zeros(len(n), dtype=np.int64)  # offloaded optimizer: bytes over PCIe a step
    t_mb = np.zeros(len(n))
    t_bwd = np.zeros(len(n))
    p_max = np.zeros(len(n), dtype=np.int64)
    w_max = np.zeros(len(n), dtype=np.int64)  # all weights in their format (ZeRO-3 gathers)
    # flat indices of slot 0; slot k adds k times the slot stride of each table
    base0 = (pi * n_slots * n_tp + ti) * n_ep + ei  # [p, slot, tp, ep]
    held0 = {lvl: (base0 * n_sh + d, base0 * n_sh + e) for lvl, (d, e) in shard_idx.items()}
    one0 = base0 * n_sh + one
    pst0 = (pi * n_slots * n_tp + ti) * 2 + sp  # [p, slot, tp, sp]
    act0 = ((pst0 * n_pol + pol) * n_mb + mi) * n_cp + ci  # [p, slot, tp, sp, pol, mb, cp]
    time0 = ((pst0 * n_cp + ci) * n_mb + mi) * n_pol + pol  # [p, slot, tp, sp, cp, mb, pol]
    s_base, s_pad = n_tp * n_ep, n_tp * n_ep * n_sh
    s_act, s_time = n_tp * 2 * n_pol * n_mb * n_cp, n_tp * 2 * n_cp * n_mb * n_pol

    def frozen(k, base):
        """Frozen weights in their format (finetune.op_weight_bytes) on the GPU: FSDP shards
        them like any parameter under ZeRO-2 and 3 (padding per tensor as for the trainable
        ones; a quantised base's bytes beyond wb per parameter split evenly) and ZeRO-2 keeps
        the gathered copy too; Megatron's ZeRO-1 shards only what the optimizer holds."""
        out = 0
        for j, (kind, sh) in enumerate((("dense", shard), ("exp", shard_e))):
            pf = lambda i: flat[f"pad_{kind}"].take(i) - flat[f"pad_t{kind}"].take(i)
            wf = flat[f"wf_{kind}"].take(base)
            extra = wf - wb * pf(one0 + k * s_pad)  # 0 unless quantised
            held_f = wb * pf(held0[2][j] + k * s_pad) + np.where(zero >= 2, _cdiv(extra, sh),
                                                                 extra)
            out = out + held_f * np.where(z2, 1 + (gather_d if j == 0 else gather_e), 1)
        return out

    rerun_flat = A["tp_rerun"].reshape(-1)
    n_slots_p = A["tp_rerun"].shape[1]
    for k in range(n_slots):
        base = base0 + k * s_base

        def held(level, dense=1, exp=1):  # trainable parameters on the GPU when ZeRO >= level
            d, e = held0[level]             # shards them (x dense, exp: the gathered copies)
            out = flat["pad_tdense"].take(d + k * s_pad) * dense
            return out + flat["pad_texp"].take(e + k * s_pad) * exp if moe else out
        pd = flat["pad_tdense"].take(one0 + k * s_pad)
        pe = flat["pad_texp"].take(one0 + k * s_pad) if moe else 0
        w_all = flat["w_all"].take(base)
        if s.optimizer in STATES_PER_PARAM:  # states shaped like the parameter shard
            opt = (master + STATES_PER_PARAM[s.optimizer] * sb) * held(1)
        else:  # blockwise / factored states: the engine's bytes, split evenly
            z1d, z1e = np.where(zero >= 1, shard, 1), np.where(zero >= 1, shard_e, 1)
            opt = (_cdiv(flat["o_dense"].take(base) + master * pd, z1d)
                   + _cdiv(flat["o_exp"].take(base) + master * pe, z1e))
        # step counters: one per parameter tensor, never sharded (OPTIMIZER_SPECS)
        opt = opt + OPTIMIZER_SPECS[s.optimizer].step_bytes * flat["tensors"].take(base)
        host_opt = 0
        if s.offload_optimizer and s.optimizer != "none":  # TrainingMemory.host_bytes' rule
            host_opt, opt = opt + 4 * held(1), 0 * opt
            pcie_opt = np.maximum(pcie_opt, held(1) * (gb_ + wb))
        # weights: the whole parameters (ZeRO-0, 1), FSDP2's gathered copies and its sharded
        # parameter (ZeRO-2), the shard (ZeRO-3); gradients: the full buffer (ZeRO-0, 1) and
        # the fp32 copy of the shard (ZeRO-1 of fp16), the shard (ZeRO-2, 3). ZeRO-3's weight
        # and gradient shards with the master are FSDP2's (memory.ZeroBytes).
        # fp8 training's cached fp8 weights and transposes (memory.Fp8Recipe) stay whole on
        # each rank under ZeRO 0-2; ZeRO-3 casts each gathered layer (within its buffers)
        fp8 = np.where(z3, 0, flat["fp8"].take(base))
        if tuned:
            fp8 = fp8 + frozen(k, base)
        cat = {"weights": wb * held(2, gather_d, gather_e) + p_shard * held(2) + fp8,
               "gradients": g_held * held(2) + g_copy * held(1), "optimizer": opt}
        # the blocks' saved bytes a micro-batch split evenly over the v model chunks (each
        # holds 1/v of the stage's blocks), times the chunks in flight; the embeddings' (head's)
        # saved bytes times the in-flight micro-batches of the first (last) chunk alone
        per_mb = flat["act"].take(act0 + k * s_act)
        per_edge = flat["act_edge"].take(act0 + k * s_act)
        cat["activations"] = (_cdiv((per_mb - per_edge) * chunks[k], v)
                              + per_edge * edge_chunks[k])
        # offloaded checkpoints (blocks only): in host memory for every chunk in flight; out
        # over PCIe in forward, back in backward, behind the stage's compute
        host_mb = flat["act_host"].take(act0 + k * s_act)
        host = np.maximum(host, _cdiv(host_mb * chunks[k], v) + host_opt)
        # the batch of each in-flight micro-batch of the edge chunk: stage 0's ids, the last
        # stage's labels and loss (one GPU: both)
        head_k = A["has_head"][:, k].take(pi)
        cat["inputs"] = (np.where(A["stage"][:, k].take(pi) == 0, held_first, 0)
                         + np.where(head_k, held_last, 0)) * edge_chunks[k]
        dequant = flat["dequant"].take(base)
        cat["logits"] = np.maximum(np.where(head_k, logits, 0), dequant)
        # full recompute: the block rerun in backward, with its dequantised weight
        # (TrainingMemory.recompute_bytes), above the loss's transient it comes after (no
        # rerun: 0, as logits >= dequant)
        cat["recompute"] = np.maximum(
            0, flat["rerun"].take(act0 + k * s_act) + dequant - cat["logits"])
        # all-gathered under ZeRO-3: the root unit (FSDP2 keeps it unsharded from forward to
        # backward) and the prefetched blocks, never more than the stage holds
        cat["zero3_buffers"] = np.where(z3, np.minimum(
            zero3_blocks + flat["root_wbytes"].take(base), w_all), 0)
        tensors = sum(cat.values())
        # the optimizer step (TrainingMemory.phases' peak_step): the model states, the batch
        # and the step's transients; what it holds above forward and backward is "step"
        at_step = (cat["weights"] + cat["gradients"] + cat["optimizer"]
                   + np.where(A["stage"][:, k].take(pi) == 0, step_first, 0)
                   + np.where(head_k, step_last, 0)
                   + copy_pp * np.where(z1 | z2 | z3, 0, held(1)) + temp_pp * held(1))
        cat["step"] = np.maximum(0, at_step - tensors)
        tensors = tensors + cat["step"]
        cat["framework"] = ov.framework_bytes(tensors, n)
        total = tensors + cat["framework"]
        valid = True if all_valid else A["valid"][pi, k]
        if not all_valid:
            cat = {key: np.where(valid, x, 0) for key, x in cat.items()}
            total = np.where(valid, total, -1)
        states = cat["weights"] + cat["gradients"] + cat["optimizer"]
        if best is None:
            best, best_total, best_states = cat, total, states
        else:
            if detail:
                take = total > best_total
                best = {key: np.where(take, x, best[key]) for key, x in cat.items()}
            best_total = np.maximum(total, best_total)
            best_states = np.maximum(states, best_states)
        # one micro-batch on this stage: compute + exposed TP, EP, CP (beyond the attention
        # it overlaps) and PP communication; with "tp" / "pp" overlap (stacks.OVERLAPS) TP
        # traffic hides behind the compute outside the attention core, PP sends behind all
        t_base = time0 + k * s_time
        cnt = A["counts"][:, k]
        n_tp_k = 2 * cnt[:, 0].take(pi) + rerun_flat.take((pi * n_slots_p + k) * n_pol + pol)
        comp, attn_k = flat["t_compute"].take(t_base), flat["t_attn"].take(t_base)
        tp_s = n_tp_k * unit_tp
        tp_x = np.maximum(0.0, tp_s - (comp - attn_k)) if "tp" in hide else tp_s
        pp_x = np.maximum(0.0, t_pp - comp) if "pp" in hide else t_pp
        pcie_x = np.maximum(0.0, 2 * host_mb / comm.PCIE_BYTES_PER_S - comp)
        t_stage = (comp + tp_x + np.maximum(0.0, 3 * cnt[:, 2].take(pi) * unit_cp - attn_k)
                   + pp_x + pcie_x)
        if moe:
            t_stage = t_stage + 4 * cnt[:, 1].take(pi) * unit_ep
        bwd = flat["t_bwd"].take(t_base)
        if not all_valid:
            t_stage, bwd, pd = (np.where(valid, x, 0) for x in (t_stage, bwd, pd + pe))
            pe = 0
        if detail:  # the collectives of the slowest stage, for the breakdown
            slower = t_stage >= t_mb
            now = (n_tp_k, cnt[:, 1].take(pi), cnt[:, 2].take(pi), attn_k, tp_x, pp_x)
            slow = now if k == 0 else tuple(np.where(slower, a, b) for a, b in zip(now, slow))
        fwd_first = np.maximum(fwd_first, comp - bwd) if k == 0 else fwd_first
        t_mb = np.maximum(t_mb, t_stage)
        t_bwd = np.maximum(t_bwd, bwd)
        p_max = np.maximum(p_max, pd + pe)
        w_max = np.maximum(w_max, np.where(valid, w_all, 0))
    pipeline = (m + (pp - 1) / v) * t_mb
    grad_bytes = gb_ * p_max
    w_bytes = wb * p_max
    t_ar = comm.collective_s("all_reduce", grad_bytes, shard, tp, gpu)
    t_rs = comm.collective_s("reduce_scatter", grad_bytes, shard, tp, gpu)
    t_ag = comm.collective_s("all_gather", w_bytes, shard, tp, gpu)
    # ZeRO-3 gathers every weight in its format each micro-batch (ZeRO-1, 2: the updated ones)
    w3_bytes = w_max if tuned else w_bytes
    t_ag3 = comm.collective_s("all_gather", w3_bytes, shard, tp, gpu) if tuned else t_ag
    # hybrid shard: the shard group's result is then all-reduced across nodes
    replicas = dp * cp // shard
    t_rep = comm.collective_s("all_reduce", _cdiv(grad_bytes, shard), replicas, tp * shard, gpu)
    # DP: the gradient reduction behind the last micro-batch's backward ("grad_reduce"), ZeRO-1/2's
    # all-gather of the updated parameters behind the next step's first forward on stage 0
    # ("param_gather"); ZeRO-3's per-micro-batch gathers always prefetched (stacks module doc)
    hide_g = "grad_reduce" in hide
    ag_x = np.maximum(0.0, t_ag - fwd_first) if "param_gather" in hide else t_ag
    exposed = np.where(
        zero == 0, np.maximum(0.0, t_ar - t_bwd) if hide_g else t_ar,
        np.where(zero < 3, (np.maximum(0.0, t_rs - t_bwd) if hide_g else t_rs) + ag_x,
                 m * np.maximum(0.0, 2 * t_ag3 + t_rs - t_mb) + t_rep))
    # the optimizer step reads and writes every state once (the stage with the most states)
    step = (pipeline + exposed + 2 * best_states / s.prof.bytes_per_s
            + pcie_opt / comm.PCIE_BYTES_PER_S)
    # seconds one more micro-batch per step adds: the step is affine in m (train.batch)
    slope = t_mb + np.where(zero == 3, np.maximum(0.0, 2 * t_ag3 + t_rs - t_mb), 0.0)
    hw_seq = A["hw_flops_seq"][pi, pol]
    if s.achieved_flops_per_gpu:
        step = hw_seq * gbatch / (n * s.achieved_flops_per_gpu)
        slope = hw_seq * dp * mbatch / (n * s.achieved_flops_per_gpu)
    peak = s.gpu.peak(s.dtype)
    # per-layout batches are floats: a Python int times them could overflow int64
    model_seq = A["model_flops_seq"] if "gb" not in g else float(A["model_flops_seq"])
    out = {f"{k}_bytes": x for k, x in best.items()} if detail else {}
    if detail:
        n_tp_c, n_moe, n_attn, t_attn, tp_x, pp_x = slow
        per_mb = lambda kind, size, n, count: comm.bytes_sent(kind, size, n) * count
        out["comm"] = {  # per GPU per step: (collective, bytes sent, seconds, exposed seconds)
            "tp": (np.where(sp == 1, "reduce-scatter + all-gather (SP)", "all-reduce"),
                   m * per_mb("all_reduce", act_size, tp, n_tp_c),
                   m * n_tp_c * unit_tp, m * tp_x),
            "ep": ("all-to-all", m * per_mb("all_to_all", act_size * max(cfg.top_k, 1),
                                            g["ep"], 4 * n_moe),
                   m * 4 * n_moe * unit_ep, m * 4 * n_moe * unit_ep),
            "cp": ("point-to-point (ring of keys and values)",
                   m * 3 * n_attn * tok / cp * kv_width * ab * (cp - 1) * (cp > 1),
                   m * 3 * n_attn * unit_cp,
                   m * np.maximum(0.0, 3 * n_attn * unit_cp - t_attn)),
            "pp": ("point-to-point (activations and their gradients)",
                   m * 2 * v * act_size / np.where(sp == 1, tp, 1) * (pp > 1), m * t_pp,
                   m * pp_x),
            "dp": (np.where(zero == 0, "all-reduce", np.where(
                       zero < 3, "reduce-scatter + all-gather",
                       "per micro-batch 2 all-gathers + reduce-scatter")),
                   np.where(zero == 0, comm.bytes_sent("all_reduce", grad_bytes, shard),
                            np.where(zero < 3, comm.bytes_sent("reduce_scatter", grad_bytes,
                                                               shard)
                                     + comm.bytes_sent("all_gather", w_bytes, shard),
                                     m * (comm.bytes_sent("reduce_scatter", grad_bytes, shard)
                                          + 2 * comm.bytes_sent("all_gather", w3_bytes,
                                                                shard)))),
                   np.where(zero == 0, t_ar, np.where(zero < 3, t_rs + t_ag,
                                                      m * (2 * t_ag3 + t_rs) + t_rep)),
                   exposed),
        }
        out["host_bytes"] = host
        out["links"] = {name: np.where(size * stride <= gpu.gpus_per_node, "intra-node",
                                       "inter-node")
                        for name, size, stride in (("tp", tp, 1), ("cp", cp, tp),
                                                   ("ep", g["ep"], tp * cp),
                                                   ("dp", shard, tp), ("pp", pp, tp * cp * dp))}
    out.update(total_bytes=best_total, step_time_s=step, micro_batches=m,
               bubble_fraction=(pp - 1) / (v * m),
               mfu=model_seq * gbatch / (step * n * peak),
               hfu=hw_seq * gbatch / (step * n * peak), gpus=n,
               exposed_dp_comm_s=exposed, micro_batch_time_s=t_mb,
               tokens_per_s=gbatch * s.seq / step, step_slope_s=slope,
               bubble_s=(pp - 1) / v * t_mb, model_flops_seq=A["model_flops_seq"],
               model_flops_step=model_seq * gbatch,
               hardware_flops_seq=hw_seq)
    return out


def grid_for(layouts: list[Layout]) -> tuple[list, list, list, list, list, dict, list]:
    """Table axes, index arrays and recompute policies for explicit layouts."""
    import numpy as np
    tps = sorted({l.tp for l in layouts}); eps = sorted({l.ep for l in layouts})
    cps = sorted({l.cp for l in layouts}); mbs = sorted({l.micro_batch for l in layouts})
    pps = sorted({l.pp for l in layouts})
    policies = sorted({(RECOMPUTE.index(l.recompute), l.recompute_layers,
                        l.offload_checkpoints) for l in layouts})
    arr = lambda f: np.array([f(l) for l in layouts])
    g = dict(tp=arr(lambda l: l.tp), pp=arr(lambda l: l.pp), dp=arr(lambda l: l.dp),
             cp=arr(lambda l: l.cp), ep=arr(lambda l: l.ep), zero=arr(lambda l: l.zero),
             hybrid=arr(lambda l: l.hybrid_shard), sp=arr(lambda l: l.sp),
             v=arr(lambda l: l.virtual), mb=arr(lambda l: l.micro_batch),
             rc=arr(lambda l: RECOMPUTE.index(l.recompute)),
             pol=arr(lambda l: policies.index((RECOMPUTE.index(l.recompute),
                                               l.recompute_layers, l.offload_checkpoints))),
             ti=arr(lambda l: tps.index(l.tp)), pi=arr(lambda l: pps.index(l.pp)),
             ci=arr(lambda l: cps.index(l.cp)), ei=arr(lambda l: eps.index(l.ep)),
             mi=arr(lambda l: mbs.index(l.micro_batch)))
    return tps, eps, cps, mbs, pps, g, policies


def evaluate_layouts(s: TrainSetting, layouts: list[Layout], stages=None,
                     batches: list[int] | None = None) -> dict:
    """``evaluate`` for explicit layouts (each checked), over every pipeline stage, or over
    ``stages(pp)`` (a function listing the stage indices to evaluate). ``batches``: the global
    batch of each layout (default: the setting's for all)."""
    from ..errors import WorkloadError
    for i, lay in enumerate(layouts):
        check_layout(s.cfg, lay, s.seq)
        b = s.global_batch if batches is None else batches[i]
        if b % (lay.dp * lay.micro_batch):
            raise WorkloadError(f"global batch ({b}) must be a multiple of dp x "
                                f"micro_batch ({lay.dp} x {lay.micro_batch})")
    tps, eps, cps, mbs, pps, g, policies = grid_for(layouts)
    if batches is not None:
        import numpy as np
        g["gb"] = np.asarray(batches, dtype=np.int64)
    slots = stages or (lambda pp: list(range(pp)))
    shard, shard_e = shard_groups(g, s.gpu)
    t = build_tables(s, tps, eps, cps, mbs, pps, list(shard) + list(shard_e), slots, policies)
    return evaluate(s, t, g)
