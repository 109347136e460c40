"""What a training step keeps for backward: each op's saved tensors under the recompute mode
of its block (none, selective, full, op-level), the checkpoints that recompute keeps, and the
second copies a framework's code makes. ``memory.TrainingMemory`` sums the rows on one GPU;
the planner (``train.evaluate``) splits each row over TP as its op declares."""

from __future__ import annotations

import dataclasses

from .fp8 import fp8_saved_delta
from .ops import op_level_kept
from .workload import Workload


def saved_rows(ops, work: Workload, act_bytes: int):
    """(row path, op, bytes) each op keeps for backward under the recompute mode of its block
    (``Workload.block_mode``: partial recompute leaves some blocks at none).

    none: every op's ``saved_bytes``; selective: the attention core keeps only its inputs (no
    S x S); full: block ops keep nothing, reported under their block's path; op (op-level
    selective checkpointing): block ops keep only the outputs ``ops.op_level_kept`` names
    (``Op.output_bytes``), as in full the block keeps its input. Checkpoint ops keep their
    input under the modes they declare (``Op.kept``; "fused": also with no recompute under a
    fused kernel; op-level checkpoints a whole block, so it keeps what full keeps; uniform
    method: only the first block of each group keeps its input).
    """
    ops = tuple(ops)
    kept = op_level_kept(ops, work) if work.recompute == "op" else set()
    for op in ops:
        mode = work.block_mode(op.layer)
        if op.kind == "checkpoint":
            whole = "full" if mode == "op" else mode  # op-level checkpoints the whole block
            # "fused": with no recompute a fused kernel keeps this input itself (T5's bias
            # is the attn_mask of SDPA's memory-efficient kernel, which saves it for backward)
            if (whole in op.kept and (op.layer < 0 or work.keeps_block_input(op.layer))) or (
                    mode == "none" and "fused" in op.kept and work.attn_impl == "flash"):
                path = op.block_path if whole == "full" else op.path
                yield path, op, op.saved_bytes(work, act_bytes)
            continue
        if op.kind == "rotary" and mode in ("full", "op") and any(
                work.block_mode(o.layer) in ("none", "selective") for o in ops
                if o.stack == op.stack and o.layer >= 0):
            # the shared tables, counted in the first block, stay saved by any block that is
            # not recomputed (partial recompute)
            yield op.path, op, op.saved_bytes(work, act_bytes)
            continue
        if op.kind == "pad_mask":  # Longformer: kept by the first block whose core runs
            # unrecomputed (block 0's op; partial recompute may leave only later ones)
            first = next((o for o in ops if o.stack == op.stack and o.layer >= 0
                          and work.block_mode(o.layer) == "none"), None)
            if first is not None:
                op = dataclasses.replace(op, layer=first.layer, path=op.path.replace(
                    op.block_path, first.block_path, 1))
                yield op.path, op, op.saved_bytes(work, act_bytes)
            continue
        if mode in ("full", "op") and op.reruns("full"):
            if op.path in kept:
                # the output, not the input: a colwise Linear's is split over TP, a rowwise
                # one's is the residual stream (split only with SP)
                split = "tp" if op.tp in ("colwise", "vocab") or op.kind != "linear" else \
                    "residual"
                yield op.path, dataclasses.replace(op, act_split=split), \
                    op.output_bytes(work, act_bytes)
            continue
        yield op.path, op, op.saved_bytes(work, act_bytes, pairs=mode != "selective") \
            * _kept_again(op, work)


def _kept_again(op, work: Workload) -> int:
    """2 where the framework's code keeps a second copy of what the op saves (``work.keeps``,
    stacks.KEEPS, traced to nanotron's code there): under a flash kernel, multi-head
    attention's k and v thirds of the permuted qkv copy (again the keys op's bytes) and
    o_proj's reshaped copy of the attention output (again its input); else 1."""
    if not work.keeps or work.attn_impl != "flash":
        return 1
    if op.kind == "attn_keys" and "qkv_copy" in work.keeps and op.kv_heads == op.heads:
        return 2
    if op.kind == "linear" and "o_proj_copy" in work.keeps \
            and op.component.rsplit(".", 1)[-1] == "o_proj" and op.tp == "rowwise":
        return 2
    return 1


def saved_bytes(ops, work: Workload, act_bytes: int, precision: str = "") -> int:
    """Bytes the ops keep for backward under the workload's recompute policy and kernel
    (``precision``: fp8 training keeps block Linears' inputs in fp8, ``fp8_saved_delta``)."""
    return sum(b + fp8_saved_delta(op, b, act_bytes, precision)
               for _, op, b in saved_rows(ops, work, act_bytes))


def recompute_transient(ops, work: Workload, act_bytes: int, precision: str = "",
                        mlp_inplace: bool = False) -> int:
    """Full recompute's transient in backward, above what the step keeps (``saved_bytes``):
    the sum of ``recompute_parts``."""
    return sum(recompute_parts(ops, work, act_bytes, precision, mlp_inplace))


def recompute_parts(ops, work: Workload, act_bytes: int, precision: str = "",
                    mlp_inplace: bool = False) -> tuple[int, int]:
    """Full recompute's transient in backward, above what the step keeps (``saved_bytes``),
    as (the rerun's saved tensors and the gradient at its output, its backward transient).

    A checkpointed block keeps only its input in forward; in backward it runs its forward
    again and its backward at once (torch.utils.checkpoint: the reentrant ``CheckpointFunction
    .backward`` reruns the block under enable_grad then calls torch.autograd.backward on its
    outputs; the non-reentrant one reruns it at the first unpack of a saved tensor, refilling
    every saved tensor of the block). So while the last block's backward runs, every
    checkpoint is still alive and that block holds everything it would save with no
    recompute, and, inside its backward, the gradients in flight: the larger of its MLP's
    (``mlp_backward_transient``; none with ``mlp_inplace``: a recipe's kernel that writes
    them into its saved buffers where it patches the MLP) and its eager attention core's
    (``attention_backward_transient``: S x S gradients). Over the recomputed blocks, the
    largest of

        N x (saved(block, none) - saved(block, full))  +  its backward transient

    (N: uniform method, N consecutive blocks rerun as one, their saved tensors alive at once
    but one block's backward at a time; else 1), plus the gradient arriving at the block's output
    (the block input's bytes). Blocks differ in hybrid, MoE and vision models: the block that
    sets the sum is the one both parts are taken from. Selective recompute reruns only the
    attention core (no S x S kept: nothing above it is modelled); op-level keeps the named
    outputs. The loss's saved tensors and the head's are freed by then: ``tail_saved`` is
    what the caller takes away. Measured against MemTracker on the reference model with
    checkpointing in tests/conformance/test_recompute_transient.py."""
    if work.recompute != "full":
        return 0, 0
    ops = tuple(ops)
    none = dataclasses.replace(work, recompute="none", recompute_method="block",
                               recompute_layers=0)
    per_none: dict = {}
    per_full: dict = {}
    for rows, into in ((saved_rows(ops, none, act_bytes), per_none),
                       (saved_rows(ops, work, act_bytes), per_full)):
        for _, op, b in rows:
            if op.layer >= 0 and work.block_mode(op.layer) == "full":
                key = (op.stack, op.layer)
                into[key] = into.get(key, 0) + b + fp8_saved_delta(op, b, act_bytes, precision)
    if not per_none:
        return 0, 0
    group = work.recompute_layers if work.recompute_method == "uniform" and \
        work.recompute_layers else 1
    trans = backward_transient([op for op in ops if op.layer >= 0 and
                                work.block_mode(op.layer) == "full"], none, act_bytes,
                               precision, inplace_kernel=mlp_inplace)
    key = max(per_none, key=lambda k: max(0, per_none[k] - per_full.get(k, 0)) * group
              + trans.get(k, 0))
    # the gradient arriving at the block's output: the residual stream, the checkpointed
    # input's shape and dtype (fp32 under a recipe's upcast)
    grad_out = max(per_full.values(), default=0)
    return max(0, per_none[key] - per_full.get(key, 0)) * group + grad_out, trans.get(key, 0)


def mlp_backward_transient(ops, work: Workload, act_bytes: int, precision: str = "",
                           split=None, inplace_kernel: bool = False) -> dict:
    """Per block ((stack, layer) of ``ops``): the bytes its MLP's backward holds above the
    block's saved tensors, at the activation's backward. By then the ops after the
    activation (the down projection, its adapters, a dropout inside the MLP) have run their
    backward and freed what they saved; alive beside the saved tensors of the ops before it
    are the gradient arriving at the activation's output (F wide: the down projection's
    input gradient) and those it makes for its inputs (2F gated: gate and up; F plain):

        rows x (F + (2 | 1) F) x activation bytes  -  saved(ops after the activation)

    e.g. 2F a bytes a token for SwiGLU (down keeps its F-wide input), F a for a plain GELU.
    Fused kernels as txcalc's stacks run them make new gradient buffers too (torch.compile's
    backward graph, Megatron's bias_swiglu returning one 2F tensor): the same. A kernel that
    writes its input gradients into the inputs it saved holds nothing above them (F - F):
    ``inplace_kernel`` (the unsloth recipe, Finetune.mlp_inplace: Unsloth's LoRA_MLP,
    unsloth/kernels/swiglu.py@0050c73e) where the recipe patches the MLP, a gated one whose
    gate, up and down projections all carry LoRA adapters, without bias, LoRA dropout or
    DoRA (unsloth's patch_peft_model conditions); Liger's LigerSiLUMulFunction works in place
    too (linkedin/Liger-Kernel src/liger_kernel/ops/swiglu.py@06e2af7d), which no recipe here
    runs. Routed experts (each expert's MLP sees a share of the rows) are not modelled (0); a
    MoE block's shared MLP is. ``work``: the block's own recompute mode (the rerun block
    saves as with none); ``split(op, bytes)``: the share one GPU holds (the planner's TP
    split, ``train.setting``), default all. Measured against MemTracker on the reference
    model (tests/conformance/test_recompute_transient.py)."""
    split = split or (lambda op, b: b)
    blocks, saved = _blocks_and_saved(ops, work, act_bytes, precision, split)
    return {key: _mlp_point(block, saved, work, act_bytes, split, inplace_kernel)
            for key, block in blocks.items()}


def _mlp_point(block, saved: dict, work: Workload, act_bytes: int, split,
               inplace_kernel: bool) -> int:
    """One block's ``mlp_backward_transient`` (``saved``: its ops' split saved bytes)."""
    best = 0
    names = {o.component for o in block}
    for i, act in enumerate(block):
        if act.kind != "activation" or act.instances > 1:
            continue
        prefix = act.component[:-len("act")] if act.component.endswith("act") else None
        down = next((o for o in block[i + 1:] if o.kind == "linear"
                     and o.component == f"{prefix}down_proj"), None)
        if prefix is None or down is None:
            continue
        gated = f"{prefix}gate_proj" in names
        if inplace_kernel and gated and _patched_mlp(block, prefix, names):
            continue
        grads = split(act, work.rows(act.stream) * (2 + gated) * down.d_in * act_bytes)
        after = sum(saved.get(id(o), 0) for o in block[i + 1:])
        best = max(best, grads - after)
    return best


def attention_backward_transient(ops, work: Workload, act_bytes: int, precision: str = "",
                                 split=None) -> dict:
    """Per block ((stack, layer) of ``ops``): the bytes an eager attention core's backward
    holds above the block's saved tensors, at the softmax's backward. By then P V's backward
    has run (its cast copy of the probabilities freed, or under dropout the mask and the
    dropped probabilities) and so have the ops after the core (o_proj, the MLP: their saved
    tensors freed); alive beside the softmax's saved output are the gradient arriving at it
    and the one it makes for the scores, two per (query, key) pair and head, fp32 when the
    softmax runs in fp32 (upcast, or an fp32 model), else the activation dtype:

        2 x B x H x pairs x (4 | a)  -  freed (the copy or the dropout's, ops after the core)

    (the reference's eager core, traced: the peak of a rerun block's backward at 256 tokens
    and more is this point, where the engine's phase was 26-55 % below MemTracker without
    it). A fused kernel (flash) keeps no S x S and makes none: 0, as for blocks without an
    eager core. ``split``: as ``mlp_backward_transient``'s (the heads are split over TP)."""
    split = split or (lambda op, b: b)
    blocks, saved = _blocks_and_saved(ops, work, act_bytes, precision, split)
    return {key: _attention_point(block, saved, work, act_bytes, split)
            for key, block in blocks.items()}


def _attention_point(block, saved: dict, work: Workload, act_bytes: int, split) -> int:
    """One block's ``attention_backward_transient`` (``saved``: its ops' split saved bytes)."""
    mask = 1 if work.dropout_mask == "bool" else act_bytes
    best = 0
    for i, op in enumerate(block):
        if op.kind != "attn_scores" or op.fused_attn(work) or op.overlap:
            continue
        ctx = next((j for j in range(i + 1, len(block)) if block[j].kind == "attn_context"),
                   None)
        if ctx is None:
            continue
        upcast = (work.softmax_fp32 or bool(op.pad_to)) and act_bytes != 4
        cells = work.batch * op.heads * op.pairs(work)
        freed = (mask + act_bytes) if op.dropout and work.dropout else \
            (act_bytes if upcast else 0)
        grads = split(op, 2 * cells * (4 if upcast else act_bytes))
        after = split(op, cells * freed) + sum(saved.get(id(o), 0) for o in block[ctx + 1:])
        best = max(best, grads - after)
    return best


def backward_transient(ops, work: Workload, act_bytes: int, precision: str = "", split=None,
                       inplace_kernel: bool = False) -> dict:
    """Per block ((stack, layer) of ``ops``): what its backward holds above its saved
    tensors, the larger of its MLP's (``mlp_backward_transient``) and its eager attention
    core's (``attention_backward_transient``), their saved bytes read once. What the rerun
    of full recompute adds (``recompute_parts``; the planner's group_backward_transient)."""
    split = split or (lambda op, b: b)
    blocks, saved = _blocks_and_saved(ops, work, act_bytes, precision, split)
    return {key: max(_mlp_point(block, saved, work, act_bytes, split, inplace_kernel),
                     _attention_point(block, saved, work, act_bytes, split))
            for key, block in blocks.items()}


def _blocks_and_saved(ops, work: Workload, act_bytes: int, precision: str, split):
    """({(stack, layer): the block's ops in order}, {id(op): its saved bytes, ``split``}) for
    the backward-transient functions."""
    blocks: dict = {}
    for op in ops:
        if op.layer >= 0:
            blocks.setdefault((op.stack, op.layer), []).append(op)
    saved: dict = {}
    for _, op, b in saved_rows(tuple(ops), work, act_bytes):
        saved[id(op)] = saved.get(id(op), 0) + split(op, b + fp8_saved_delta(
            op, b, act_bytes, precision))
    return blocks, saved


def _patched_mlp(block, prefix: str, names: set) -> bool:
    """Whether an in-place MLP kernel runs this gated MLP (``mlp_backward_transient``): LoRA
    adapters on its gate, up and down projections, none of them with a bias, no LoRA dropout
    and no DoRA inside the MLP."""
    projections = [f"{prefix}{n}" for n in ("gate_proj", "up_proj", "down_proj")]
    mlp = [o for o in block if o.component.startswith(prefix)]
    return all(f"{p}.lora_A" in names for p in projections) and \
        not any(o.kind in ("lora_dropout", "dora") for o in mlp) and \
        not any(o.bias for o in mlp if o.component in projections)


def tail_saved(ops, work: Workload, act_bytes: int) -> int:
    """What the ops after the last block keep for backward (final norm, head, loss): freed
    before the last block's backward starts (``recompute_transient``)."""
    ops = tuple(ops)
    last = max((i for i, op in enumerate(ops) if op.layer >= 0), default=len(ops))
    after = {id(op) for op in ops[last + 1:]}
    return sum(b for _, op, b in saved_rows(ops, work, act_bytes) if id(op) in after)
