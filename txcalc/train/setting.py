"""What is fixed while the layouts of a training plan vary (``TrainSetting``), and the costs
of its ops grouped by identical blocks, computed once per group and per TP / EP / CP /
micro-batch value (``group_ops`` and the ``group_*`` functions): the pieces
``train.evaluate`` contracts with the blocks of each pipeline stage and evaluates over a grid
of layouts (its module docstring has the tables of the categories and the step time).
"""

from __future__ import annotations

import dataclasses
import functools
from dataclasses import dataclass, field
from functools import cached_property

from ..model.config import ModelConfig
from ..engine.hardware import Gpu
from ..engine.finetune import op_weight_bytes
from ..engine.fp8 import fp8_saved_delta, fp8_weight_bytes
from ..engine.memory import (PRECISIONS, dequant_buffer_bytes, optimizer_state_bytes,
                             param_tensor_count)
from ..engine.saved import backward_transient, saved_rows
from ..engine.ops import Op
from ..engine.timing import COMPUTE_DTYPE, DeviceProfile, ops_times
from ..units import cdiv
from ..engine.workload import Workload
from ..parallel.overheads import Overheads
from ..engine.stacks import DEFAULT_OVERLAP
from ..parallel.layout import RECOMPUTE
from ..parallel.sharding import assign_stages, block_index, local_tensors


def shard_op(op: Op, tp: int, ep: int, tied_copy: bool = False) -> Op:
    """The part of ``op`` one GPU holds: an Op with its local params/widths (engine formulas
    such as ``optimizer_state_bytes`` then apply unchanged)."""
    tensors = local_tensors(op, tp, ep, tied_copy)
    n = op.instances // ep if op.instances > 1 else 1
    per_instance = sum(d0 * rest for d0, rest, _ in tensors)
    d_in, d_out = op.d_in, op.d_out
    if op.tp in ("colwise", "vocab") and op.kind == "linear":
        d_out = cdiv(d_out, tp)
    elif op.tp == "vocab":  # the embedding's rows
        d_in = cdiv(d_in, tp)
    elif op.tp == "rowwise":
        d_in = cdiv(d_in, tp)
    return dataclasses.replace(op, params=per_instance, instances=n, d_in=d_in, d_out=d_out,
                               tied=op.tied and not tied_copy)


def _tp_split(op: Op, tp: int, sp: bool) -> int:
    """How many ways TP splits the op's work."""
    share = op.act_split
    if op.tp != "replicate" or share == "tp" or (sp and share == "residual"):
        return tp
    return 1


@dataclass(frozen=True)
class TrainSetting:
    """What is fixed while layouts vary: the model, data shape, precision, GPU."""

    cfg: ModelConfig
    gpu: Gpu
    seq: int
    global_batch: int
    precision: str = "bf16-mixed"
    optimizer: str = "adamw"
    attn_impl: str = "flash"
    profile: DeviceProfile | None = None
    overheads: Overheads = field(default_factory=Overheads)
    achieved_flops_per_gpu: float | None = None
    dropout: bool = False  #: train with the model's dropout (masks saved), Workload.dropout
    softmax_fp32: bool = True  #: eager softmax upcast to fp32 (Megatron's kernels: False)
    finetune: object = None  #: a finetune.Finetune (None: every parameter trains)
    #: kernels run fused (workload.FUSED_KERNELS: a framework profile's, txcalc.engine.stacks)
    fused: tuple[str, ...] = ()
    #: collectives hidden behind compute (stacks.OVERLAPS), a stated assumption
    overlap: tuple[str, ...] = DEFAULT_OVERLAP
    #: tensors the framework's code keeps beyond the ops' (stacks.KEEPS; a profile's)
    keeps: tuple[str, ...] = ()
    #: useful training time / wall-clock time: the planner's days and GPU-hours are throughput
    #: time / goodput (timing.GOODPUT; 1: benchmark throughput, no interruptions)
    goodput: float = 1.0
    #: the LM loss (Workload.loss: full | chunked[:N] | fused-linear)
    loss: str = "full"
    #: the full loss's kernel (Workload.loss_kernel; a stack's)
    loss_kernel: str = "hf"
    #: Longformer: tokens per sequence with global attention (Workload.global_tokens)
    global_tokens: int = 0
    #: the optimizer in host memory, its step on the CPU (ZeRO-Offload, FSDP CPU offload;
    #: TrainingMemory's offload "optimizer"): the optimizer category (states, step counters,
    #: fp32 master) moves to host_bytes with the fp32 gradients the CPU step reads (4 bytes
    #: per trainable parameter of the rank); gradients out and updated weights back over PCIe
    #: each step (the CPU's step itself is not timed)
    offload_optimizer: bool = False
    #: the optimizer step's kernel (memory.OPTIMIZER_STEPS; a stack's Stack.optimizer_kernel):
    #: the fp32 gradient copy and temporaries the step adds (memory.optimizer_step_extra)
    optimizer_kernel: str = "foreach"

    @property
    def prof(self) -> DeviceProfile:
        return self.profile or DeviceProfile.from_gpu(self.gpu)

    @property
    def dtype(self) -> str:
        return COMPUTE_DTYPE[self.precision]

    @property
    def bytes(self) -> tuple[int, int, int, int, int]:
        return PRECISIONS[self.precision]

    def work(self, micro_batch: int, recompute: str = "none") -> Workload:
        return Workload(batch=micro_batch, seq=self.seq, attn_impl=self.attn_impl,
                        recompute=recompute, dropout=self.dropout,
                        softmax_fp32=self.softmax_fp32, fused=self.fused, keeps=self.keeps,
                        loss=self.loss, loss_kernel=self.loss_kernel,
                        global_tokens=self.global_tokens, text_only=True)  # no images

    @cached_property
    def ops(self) -> tuple[Op, ...]:
        from ..engine.memory import training_step_ops
        return training_step_ops(self.cfg, self.finetune, self.work(1))

    @cached_property
    def n_blocks(self) -> int:
        return sum(depth for _, depth in self.cfg.stacks)

    @cached_property
    def grouped(self) -> tuple[list[list[Op]], list[int], list[Op], list[Op]]:
        """``group_ops``, computed once per setting (the search and both exact evaluations
        of a plan share it)."""
        return group_ops(self)

    @cached_property
    def group_memo(self) -> dict:
        """Per-group costs already computed by ``build_tables``, keyed by (cost function, index
        into groups + [first, last] of ``grouped``, its arguments): a cost depends only on the
        frozen setting, the group and those arguments, so a hit is the same number. Read-only
        for callers (the stored dicts and tuples are shared)."""
        return {}


def with_batch(s: TrainSetting, global_batch: int) -> TrainSetting:
    """``s`` at another global batch, keeping its computed ops and per-group costs (none of
    them depends on the global batch)."""
    if global_batch == s.global_batch:
        return s
    out = dataclasses.replace(s, global_batch=global_batch)
    out.__dict__.update({k: v for k, v in s.__dict__.items()
                         if k in ("ops", "n_blocks", "grouped", "group_memo")})
    return out


def with_profile(s: TrainSetting, profile) -> TrainSetting:
    """``s`` timed on another DeviceProfile, keeping its ops, their grouping and the per-group
    costs that do not depend on the profile (every one but ``group_times``): a calibration
    fit evaluates each published run under some 200 candidate profiles."""
    out = dataclasses.replace(s, profile=profile)
    out.__dict__.update(ops=s.ops, n_blocks=s.n_blocks, grouped=s.grouped)
    out.__dict__["group_memo"] = {k: v for k, v in s.group_memo.items()
                                  if k[0] != group_times.__name__}
    return out


# --- per group of ops: the costs, computed once ------------------------------------------------
def group_states(s: TrainSetting, ops, tp: int, ep: int, tied_copy: bool = False) -> dict:
    """Local params (dense, expert), optimizer-state bytes, trainable parameter tensors, the
    bytes of the frozen parameters in their format (wf_: a fine-tuned model's base, a QLoRA
    base quantised: finetune.op_weight_bytes) and of all weights (w_all)."""
    out = dict(p_dense=0, p_exp=0, o_dense=0, o_exp=0, tensors=0, fp8=0, wf_dense=0, wf_exp=0,
               w_all=0)
    for op in ops:
        local = shard_op(op, tp, ep, tied_copy and op.tied)
        out["fp8"] += fp8_weight_bytes((local,), s.precision)
        kind = "exp" if op.instances > 1 else "dense"
        out[f"p_{kind}"] += local.params_total
        out[f"o_{kind}"] += optimizer_state_bytes(local, s.optimizer, s.bytes.state)
        w = op_weight_bytes(local, s.bytes.weight)
        out["w_all"] += w
        if op.trainable:  # step counters: one per trainable tensor (OPTIMIZER_SPECS)
            out["tensors"] += param_tensor_count((local,))
        else:
            out[f"wf_{kind}"] += w
    return out


def group_dequant(s: TrainSetting, ops, tp: int, ep: int) -> int:
    """The largest weight one GPU dequantises (or DoRA merges) in the group: the engine's
    ``dequant_buffer_bytes`` over the sharded ops."""
    return dequant_buffer_bytes([shard_op(op, tp, ep) for op in ops], s.bytes.act,
                                s.finetune.cast_from_bytes(s.precision) if s.finetune else 0)


def group_shapes(ops, tp: int, ep: int, tied_copy: bool = False,
                 trainable: bool = False) -> tuple[dict, dict]:
    """Parameter tensors on one GPU as {(dim 0, elements per row): count}: dense, expert
    (``trainable``: only those that train)."""
    dense: dict = {}
    exp: dict = {}
    for op in ops:
        if trainable and not op.trainable:
            continue
        bucket = exp if op.instances > 1 else dense
        for d0, rest, n in local_tensors(op, tp, ep, tied_copy and op.tied):
            bucket[(d0, rest)] = bucket.get((d0, rest), 0) + n
    return dense, exp


def padded_params(shapes: dict, shards) -> "list[int]":
    """Parameters rank 0 holds when every tensor's dim 0 is split ``shard`` ways by ceiling
    division (FSDP2's rule; rank 0 holds the largest shard, padded or not)."""
    import numpy as np
    if not shapes:
        return np.zeros(len(shards), dtype=np.int64)
    d0 = np.array([k[0] for k in shapes], dtype=np.int64)[:, None]
    rest = np.array([k[1] * n for k, n in shapes.items()], dtype=np.int64)[:, None]
    sh = np.asarray(shards, dtype=np.int64)[None, :]
    return (-(-d0 // sh) * rest).sum(axis=0)


def shard_groups(g: dict, gpu: Gpu):
    """ZeRO shard group of dense and of expert parameters for each layout of a grid."""
    import numpy as np
    dpcp = g["dp"] * g["cp"]
    shard = np.where(g["hybrid"], np.minimum(dpcp, np.maximum(1, gpu.gpus_per_node // g["tp"])),
                     dpcp)
    return shard, np.maximum(1, shard // g["ep"])


def group_activations(s: TrainSetting, ops, tp: int, sp: bool, recompute: str,
                      micro_batch: int) -> int:
    """Bytes the group saves for backward on one GPU, one micro-batch (before CP): the
    engine's ``saved_rows`` under the recompute policy, each row split as its op declares
    (``Op.act_split``: over t inside a TP region, over t on the residual stream only with SP)."""
    w = s.work(micro_batch, recompute)
    total = 0
    for _, op, b in saved_rows(ops, w, s.bytes.act):
        total += _act_share(s, op, b + fp8_saved_delta(op, b, s.bytes.act, s.precision), tp, sp)
    return total


def _act_share(s: TrainSetting, op, b: int, tp: int, sp: bool) -> int:
    """One GPU's share of ``b`` activation bytes of ``op`` (``Op.act_split``: over t inside
    a TP region, over t on the residual stream only with SP)."""
    split = op.act_split == "tp" or (op.act_split == "residual" and sp)
    if "sp_gathered_input" in s.keeps and op.tp == "colwise" and op.kind == "linear":
        split = op.act_split == "tp"  # its all-gathered input, whole
    return cdiv(b, tp) if split else b


def group_backward_transient(s: TrainSetting, ops, tp: int, sp: bool, micro_batch: int) -> int:
    """The group's backward transient on one GPU, one micro-batch (before CP): the engine's
    ``saved.backward_transient`` of a block saving as with no recompute (the rerun of full
    recompute; none for the MLP where a recipe's in-place kernel runs, Finetune.mlp_inplace),
    gradients and saved tensors split as ``group_activations`` splits."""
    per = backward_transient(ops, s.work(micro_batch, "none"), s.bytes.act, s.precision,
                             lambda op, b: _act_share(s, op, b, tp, sp),
                             bool(s.finetune is not None and s.finetune.mlp_inplace))
    return max(per.values(), default=0)


def group_times(s: TrainSetting, ops, tp: int, sp: bool, cp: int, recompute: str,
                micro_batch: int) -> tuple[float, float, float]:
    """(compute incl. recompute, backward, attention-core) seconds per micro-batch: the
    roofline of ``timing.ops_times`` with each op's work split over TP (and CP)."""
    w = s.work(micro_batch, recompute)
    return ops_times(ops, w, s.prof, s.dtype, s.bytes.act, s.bytes.weight,
                     lambda op: _tp_split(op, tp, sp) * cp, lambda op: _tp_split(op, tp, sp))


def group_flops(s: TrainSetting, ops) -> tuple[int, list[int]]:
    """Per sequence: model FLOPs (masked pairs skipped) and hardware FLOPs (executed +
    recompute) for each recompute policy: the engine's FlopCounts over the group's ops."""
    from ..engine.accounting import FlopCounts
    counts = [FlopCounts(s.cfg, s.work(1, rc), tuple(ops)) for rc in RECOMPUTE]
    return counts[0].model, [c.hardware for c in counts]


def group_counts(ops) -> dict:
    """Collectives per micro-batch forward: TP reductions (rowwise Linears and the
    vocab-parallel embedding), MoE layers (all-to-all), attention layers (CP ring)."""
    from ..engine.workload import SKIPPED
    ops = [op for op in ops if op.stream != SKIPPED]  # blocks that do not run reduce nothing
    tp_coll = sum(1 for op in ops if op.tp in ("rowwise", "vocab"))
    moe = sum(1 for op in ops if op.kind == "linear" and op.instances > 1
              and op.component.endswith("down_proj"))
    attn = sum(1 for op in ops if op.kind == "attn_scores")
    return dict(tp_coll=tp_coll, moe=moe, attn=attn)


def group_ops(s: TrainSetting) -> tuple[list[list[Op]], list[int], list[Op], list[Op]]:
    """Blocks grouped by identical ops: (groups' ops of one block, group of each block,
    ops before the blocks (stage 0), ops after them (last stage)). They depend on the
    config and its ops only, so a search over lengths (fit's bisection over ZeRO-3 ranks:
    a new setting at every probe) groups once (``_group_ops``, read-only lists)."""
    return _group_ops(s.cfg, s.ops)


@functools.lru_cache(maxsize=32)
def _group_ops(cfg, ops) -> tuple[list[list[Op]], list[int], list[Op], list[Op]]:
    per_block: dict[int, list[Op]] = {}
    first, last = [], []
    n_blocks = sum(depth for _, depth in cfg.stacks)
    stage_of = assign_stages(cfg, ops, 1)[0]
    for op in stage_of:
        if op.placement == "block":
            per_block.setdefault(block_index(cfg, op), []).append(op)
        elif op.placement == "pre":
            first.append(op)
        else:
            last.append(op)
    keys: dict[tuple, int] = {}
    groups: list[list[Op]] = []
    block_group = []
    for g in range(n_blocks):
        block = per_block.get(g, [])
        key = tuple(dataclasses.replace(op, path="", layer=0) for op in block)
        if key not in keys:
            keys[key] = len(groups)
            groups.append(block)
        block_group.append(keys[key])
    return groups, block_group, first, last
