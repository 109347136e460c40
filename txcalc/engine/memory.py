"""Bytes of training: model states (weights, gradients, optimizer), activations, the peak.

Beside this module: ``saved`` (the tensors each op keeps for backward), ``held`` (the batch
and a frozen table's leaf), ``fp8`` (fp8 training's terms) and, for serving, ``kvcache`` (the
KV cache and recurrent state, summed over the op rows).

Precision policies (bytes per parameter):

    policy       | weights | grads | master (fp32) | optimizer state dtype | activations
    -------------|---------|-------|---------------|-----------------------|------------
    fp32         | 4       | 4     | -             | fp32                  | 4
    bf16-mixed   | 2       | 2     | 4             | fp32                  | 2
    fp16-mixed   | 2       | 2     | 4             | fp32                  | 2
    bf16 (pure)  | 2       | 2     | -             | bf16                  | 2
    fp16 (pure)  | 2       | 2     | -             | fp16                  | 2

Pure bf16 and fp16 are serving's precisions (weights and activations in 16 bits); fp16 is
what a GPU without bf16 (T4, V100: ``Gpu.half_dtype``) runs, as fp16-mixed is its training's.

Optimizers (their states, step kernels, paged states and the optimizer run inside
backward): ``optimizers``, whose names this module re-exports.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from functools import cached_property
from typing import NamedTuple

from .accounting import by_layer_type
from ..model.checks import VOCAB_HEADS
from ..model.config import ModelConfig
from ..errors import WorkloadError
from .finetune import (Finetune, check_precision, finetuned_ops, head_forward_peak,
                       op_weight_bytes, previous_step_bytes)
from .fp8 import FP8_RECIPE, fp8_saved_delta, fp8_weight_bytes
from .saved import recompute_parts, saved_bytes, saved_rows, tail_saved
from .held import (HeldInputs, frozen_table_inputs, held_inputs, leaf_saved,
                   step_held_inputs)
from .ops import Op
from .optimizers import (  # noqa: F401  (re-exported: memory's optimizer names)
    ADAM8BIT_BLOCK, ADAM8BIT_OPTIMIZERS, OPTIMIZER_KERNELS, OPTIMIZER_SPECS, OPTIMIZER_STEPS,
    OPTIMIZERS, PAGED_MIN_NUMEL, STATES_PER_PARAM, Optimizer, OptimizerSpec, OptimizerStep,
    in_backward_grad_tensor, optimizer_state_bytes, paged_state_bytes, paged_working_bytes)
from .workload import SKIPPED, Workload

class Precision(NamedTuple):
    """Bytes per element of one precision policy (the table above)."""
    weight: int
    grad: int
    master: int  #: fp32 master copy (0: none), reported with the optimizer
    state: int  #: optimizer-state dtype
    act: int


PRECISIONS = {
    "fp32": Precision(4, 4, 0, 4, 4),
    "bf16-mixed": Precision(2, 2, 4, 4, 2),
    "fp16-mixed": Precision(2, 2, 4, 4, 2),
    "bf16": Precision(2, 2, 0, 2, 2),
    "fp16": Precision(2, 2, 0, 2, 2),
    # fp8 training: bf16 mixed precision's states plus the fp8 terms of FP8_RECIPE
    "fp8-mixed": Precision(2, 2, 4, 4, 2),
}
class ZeroBytes(NamedTuple):
    """Bytes per parameter that a sharded optimizer keeps where ZeRO-0 keeps ``grad`` per
    parameter (the shard group having more than one rank; one rank keeps ZeRO-0's bytes).

    ZeRO-1 (Megatron-LM's distributed optimizer, a modelling choice: no framework to measure
    here; docs/source/api-guide/distrib_optimizer.md: fp16 params and grads 4 + 16/d bytes per
    parameter, bf16 params with fp32 grads 6 + 12/d, fp32 8 + 8/d; states and the fp32 master
    sharded, the parameters and the gradient buffer not):
        zero1_grad: the full gradient buffer (Megatron accumulates bf16 training in fp32:
            accumulate_allreduce_grads_in_fp32 is forced under --bf16)
        zero1_grad_copy: the fp32 copy of this rank's gradient shard that the fp32 master
            steps on, sharded like the states (fp16: main_param.grad = shard.float(); bf16's
            fp32 buffer and fp32 models use views of the buffer: none)
    ZeRO-2 (FSDP2 ``fully_shard(reshard_after_forward=False)``, byte for byte against its
    fake-process-group memory tracker in tests/unit/test_engine.py):
        zero2_grad_shard: the gradient shard, in the dtype of FSDP2's sharded parameter (the
            fp32 master under mixed precision, reduce_dtype fp32; else the weight dtype)
        zero2_param_shard: FSDP2's sharded parameter beside the gathered one, where it is not
            already the fp32 master reported with the optimizer (fp32, pure bf16: w per
            parameter). The gathered parameters are views of the padded all-gather output:
            d x rank 0's padded shard, not P.
    ZeRO-3 (FSDP2, reshard_after_forward=True) needs no entry: its weight and gradient shards
    in w and g plus the master (2 + 2 + 4 under mixed precision) are FSDP2's fp32 parameter and
    gradient shards (4 + 4); without a master they are the same tensors.
    """
    zero1_grad: int
    zero1_grad_copy: int
    zero2_grad_shard: int
    zero2_param_shard: int


#: the one table of sharded-optimizer bytes (ZeroBytes); mixed rows with their fp32 master
ZERO_BYTES = {
    "fp32": ZeroBytes(4, 0, 4, 4),
    "bf16-mixed": ZeroBytes(4, 0, 4, 0),
    "fp16-mixed": ZeroBytes(2, 4, 4, 0),
    "bf16": ZeroBytes(2, 0, 2, 2),
    "fp16": ZeroBytes(2, 0, 2, 2),
    "fp8-mixed": ZeroBytes(4, 0, 4, 0),  # bf16 mixed precision's (fp8 terms: Fp8Recipe)
}


def zero_bytes(precision: str, optimizer: str) -> ZeroBytes:
    """``ZERO_BYTES`` of the policy; with no optimizer there is no fp32 master (as in
    ``master_bytes``), and every policy keeps what the fp32 and bf16 rows keep for its own
    weight and gradient dtypes: FSDP2 on a model held in the weight dtype."""
    p = PRECISIONS[precision]
    if p.master and optimizer == "none":
        return ZeroBytes(p.grad, 0, p.grad, p.weight)
    return ZERO_BYTES[precision]


OFFLOADS = ("none", "optimizer", "activations", "all")


def _check(name: str, value: str, choices) -> str:
    if not isinstance(value, str) or value not in choices:
        from ..inputs import show
        raise WorkloadError(f"unknown {name} {show(value)}; choose one of {', '.join(choices)}")
    return value


def optimizer_step_extra(kernel: str, optimizer: str, precision: str,
                         trainable: int) -> tuple[int, int]:
    """(fp32 gradient copy, optimizer temporaries): the bytes one optimizer step allocates and
    frees above the resident states for ``trainable`` parameters (the rank's local shard in
    the planner), under the kernel ``kernel`` (OPTIMIZER_STEPS). The copy exists under mixed
    precision (an fp32 master) where the kernel casts; the temporaries for Adam and AdamW
    under foreach (one copy of a state; SGD, 8-bit Adam, Adafactor: none modelled)."""
    _check("optimizer kernel", kernel, OPTIMIZER_STEPS)
    step = OPTIMIZER_STEPS[kernel]
    if optimizer == "none" or trainable <= 0:
        return 0, 0
    p = PRECISIONS[precision]
    copy = trainable * 4 if step.grad_copy and p.master else 0
    temps = trainable * p.state if step.temporaries and optimizer in ("adamw", "adam") else 0
    return copy, temps


# --- the engine: one function per quantity, over any iterable of ops ---------------------------
# (the whole model, one pipeline stage, one TP/EP shard: the planner passes sharded ops)
def param_count(ops) -> int:
    """Parameters of the ops (all instances; tied weights once)."""
    return sum(op.params_total for op in ops)


def param_tensor_count(ops) -> int:
    """Parameter tensors: a weight and a bias are two; stacked experts one per matrix."""
    return sum(len(op.tensors()) for op in ops if op.params)


def weight_bytes(ops, precision: str) -> int:
    """Weights in the policy dtype; a quantised op (``Op.weight_format``, a QLoRA base) in its
    storage format (finetune.op_weight_bytes); plus fp8 training's weight copies (FP8_RECIPE)."""
    w = PRECISIONS[precision].weight
    return sum(op_weight_bytes(op, w) for op in ops) + fp8_weight_bytes(ops, precision)


def unreached_untrained(ops, work: Workload) -> tuple[Op, ...]:
    """The ops of a step (after components.step_ops), those whose parameters take no part in
    it marked untrained: a Linear that no row reaches under ``work`` (Longformer's global
    projections when no token has global attention) and every op that does not run (stream
    SKIPPED: Mllama's cross-attention blocks in a text-only step, norms and gates included).
    Backward leaves such a parameter's .grad None, and torch's optimizers make no state for
    it: torch/optim/adamw.py's AdamW is Adam's subclass, whose Adam._init_group
    (torch/optim/adam.py) takes a parameter only ``if p.grad is not None`` and creates its
    state (step, exp_avg, exp_avg_sq) lazily there; SGD and Adafactor skip it alike. So no
    gradient, optimizer state, step counter or step temporary, and (counted per trainable
    parameter) no fp32 master; the parameters and their weights stay. Measured: a text-only
    step of MllamaForCausalLM under MemTracker (tests/conformance/test_mllama.py). States made
    by an earlier step with images would stay: not modelled (a step is text-only throughout)."""
    return tuple(dataclasses.replace(op, trainable=False) if op.params and op.trainable and (
        op.stream == SKIPPED or op.kind == "linear" and not work.rows(op.stream)) else op
        for op in ops)


def training_step_ops(cfg: ModelConfig, finetune, work: Workload) -> tuple[Op, ...]:
    """The ops of one training step of ``work``, the one composition TrainingMemory and the
    planner's TrainSetting read: the fine-tuned model's ops (finetune.finetuned_ops), those
    the step does not run skipped (components.step_ops), then the parameters the step does
    not reach marked untrained (``unreached_untrained``, which needs the skipped ops)."""
    from .components import step_ops
    return unreached_untrained(step_ops(cfg, finetuned_ops(cfg, finetune), work), work)


def trainable_count(ops) -> int:
    """Parameters that train (all instances): gradients, master weights and states follow."""
    return sum(op.params_total for op in ops if op.trainable)


def grad_bytes(ops, precision: str) -> int:
    return trainable_count(ops) * PRECISIONS[precision].grad


def master_bytes(ops, precision: str, optimizer: str) -> int:
    """fp32 master weights of mixed precision (none without an optimizer)."""
    if optimizer == "none":
        return 0
    return trainable_count(ops) * PRECISIONS[precision].master


def step_counter_bytes(ops, optimizer: str) -> int:
    return OPTIMIZER_SPECS[optimizer].step_bytes * param_tensor_count(
        op for op in ops if op.trainable)


def optimizer_states_bytes(ops, precision: str, optimizer: str) -> int:
    """Optimizer states of the ops (no master weights, no step counters)."""
    state = PRECISIONS[precision].state
    return sum(optimizer_state_bytes(op, optimizer, state) for op in ops)


def optimizer_bytes(ops, precision: str, optimizer: str) -> int:
    """Everything the optimizer holds: states, fp32 master weights and step counters."""
    return (optimizer_states_bytes(ops, precision, optimizer)
            + master_bytes(ops, precision, optimizer) + step_counter_bytes(ops, optimizer))


def dequant_buffer_bytes(ops, act_bytes: int, cast_from: int = 0) -> int:
    """The largest transient weight a step builds over the ops: a quantised base weight
    dequantised to 16 bits for its matmul (bitsandbytes, forward and again in backward; with
    the copy it is cast from beside it, ``cast_from`` bytes an element: Finetune.
    cast_from_bytes), DoRA's merged weight W + s B A and B A (two d_out x d_in copies) beside
    PEFT's d_in x d_in identity. Alive one op at a time (the planner passes one stage's
    sharded ops)."""
    out = 0
    for op in ops:
        if op.weight_format is not None and op.kind == "linear":
            out = max(out, op.d_in * op.d_out * op.instances * (act_bytes + cast_from))
        elif op.kind == "weight_product":  # + PEFT's d_in x d_in identity
            out = max(out, (2 * op.d_out + op.d_in) * op.d_in * act_bytes)
    return out


def loss_temp(cfg: ModelConfig, ops, work: Workload, precision: str, when: str) -> int:
    """The loss's transient above the saved activations at the forward peak (``when`` =
    "forward") or as backward starts ("backward"), txcalc.engine.lm_loss's rules; ``ops``: the
    model's (the head's and final norm's trainability and saved inputs decide)."""
    from . import lm_loss
    if cfg.head not in VOCAB_HEADS:
        return 0
    a = PRECISIONS[precision].act
    if when == "forward":
        extra = lm_loss.forward_peak_extra(work, cfg.vocab_size, cfg.embed_dim, a)
        head = next((op for op in ops if op.path == "lm_head"), None)
        if work.loss == "full" and head is not None and not head.saved:
            # a frozen head saves no input: the caller's hidden states, alive at the loss
            extra += work.rows("seq") * cfg.embed_dim * a
        return extra
    if work.loss == "fused-linear":
        return fused_norm_temp(cfg, ops, work, precision)
    head = any(op.trainable for op in ops if op.path == "lm_head" and op.params)
    return lm_loss.backward_early(work, cfg.vocab_size, cfg.embed_dim, a,
                                  PRECISIONS[precision].grad if head else 0)


def fused_norm_temp(cfg: ModelConfig, ops, work: Workload, precision: str) -> int:
    """Under the fused linear cross-entropy: the final norm's backward transient
    (lm_loss.fused_norm_backward) when the norm feeds the head directly; 0 (not modelled)
    without a final norm, with a projection between (embed_dim != d_model) or with the
    compiled RMSNorm kernel of a stack."""
    from .lm_loss import fused_norm_backward
    norm = next((op for op in ops if op.path == "final_norm"), None)
    if norm is None or cfg.embed_dim != cfg.d_model or \
            (cfg.norm_type == "rmsnorm" and "norm" in work.fused):
        return 0
    p = PRECISIONS[precision]
    scale = norm.trainable and cfg.norm_affine
    return fused_norm_backward(work.rows("seq"), cfg.d_model, p.act, cfg.norm_type, scale,
                               scale and cfg.norm_type == "layernorm" and cfg.norm_bias, p.grad)


def loss_transient(cfg: ModelConfig, ops, work: Workload, precision: str) -> int:
    """The loss's largest transient above the saved activations: the larger of its forward
    peak's and its early backward's (``loss_temp``; the full loss: its kernel's,
    lm_loss.full_loss_extra: HF's two fp32 T x V gradients, 8 T V; Megatron's in-place
    vocab-parallel kernel a T V). What ``phases`` holds at the loss and the planner books on
    the last stage (its "logits" category)."""
    return max(loss_temp(cfg, ops, work, precision, "forward"),
               loss_temp(cfg, ops, work, precision, "backward"))


@dataclass(frozen=True)
class TrainingMemory:
    """Memory of one training step on one device (no parallelism), in bytes.

    ``total`` is the peak over the step: the largest of the phases' totals (``phases()``: the
    end of forward with the logits transients, either end of backward, the optimizer step with
    its temporaries). The category sizes (weights, gradients, optimizer, activations) are not
    all alive at once, so they need not add up to it.
    """

    cfg: ModelConfig
    work: Workload
    precision: str = "bf16-mixed"
    optimizer: str = "adamw"
    finetune: Finetune | None = None  #: None: every parameter trains (txcalc.engine.finetune)
    #: what lives in host memory: none; optimizer (states, step counters, fp32 master weights
    #: and the fp32 gradient copy the CPU step reads: ZeRO-Offload, FSDP CPU offload);
    #: activations (recompute checkpoints: the inputs full recompute keeps); all (both)
    offload: str = "none"
    #: the optimizer step's kernel (OPTIMIZER_STEPS: foreach, fused, main_grad; a stack's
    #: ``Stack.optimizer_kernel``): what the step allocates above the states
    optimizer_kernel: str = "foreach"
    #: each parameter's optimizer step runs inside backward as soon as its gradient is
    #: accumulated, which then frees it (optimizers.in_backward_grad_tensor; torchtune's
    #: optimizer_in_bwd): backward holds one gradient, not all, and no step follows
    optimizer_in_backward: bool = False

    def __post_init__(self) -> None:
        from ..inputs import CONFIG_HINT, instance
        instance("cfg", self.cfg, ModelConfig, CONFIG_HINT), instance("work", self.work, Workload)
        _check("precision", self.precision, PRECISIONS)
        _check("optimizer", self.optimizer, OPTIMIZERS)
        _check("offload", self.offload, OFFLOADS)
        _check("optimizer kernel", self.optimizer_kernel, OPTIMIZER_STEPS)
        if self.optimizer_in_backward not in (True, False):
            raise WorkloadError(f"optimizer_in_backward ({self.optimizer_in_backward!r:.40}) "
                                "must be true or false")
        if self.optimizer_in_backward and (self.optimizer == "none" or self._offload_opt):
            raise WorkloadError(f"--optimizer-in-backward steps each parameter on the GPU inside "
                                f"backward: not with --optimizer {self.optimizer} and --offload "
                                f"{self.offload}")
        if self.finetune is not None:
            instance("finetune", self.finetune, Finetune)
            check_precision(self.finetune, self.precision)
            self.ops  # refuses unknown targets and ranks above a target's width now
        from .lm_loss import check_head
        check_head(self.cfg, self.work.loss)

    @cached_property
    def ops(self) -> tuple[Op, ...]:
        return training_step_ops(self.cfg, self.finetune, self.work)

    @cached_property
    def trainable_params(self) -> int:
        return trainable_count(self.ops)

    @cached_property
    def adapter_params(self) -> int:
        """Parameters of the adapters (LoRA's A and B, DoRA's magnitudes)."""
        return sum(op.params_total for op in self.ops if _is_adapter(op))

    @cached_property
    def adapter_bytes(self) -> int:
        """The adapters' weights: what a saved adapter checkpoint holds (policy dtype)."""
        return self.adapter_params * self._bytes.weight

    @cached_property
    def dequant_bytes(self) -> int:
        """The largest transient weight a step builds (``dequant_buffer_bytes``)."""
        return dequant_buffer_bytes(self.ops, self._bytes.act, self.finetune.cast_from_bytes(
            self.precision) if self.finetune else 0)

    @property
    def _bytes(self):
        return PRECISIONS[self.precision]

    @cached_property
    def n_params(self) -> int:
        return param_count(self.ops)

    @cached_property
    def weights(self) -> int:
        return weight_bytes(self.ops, self.precision)

    @cached_property
    def gradients(self) -> int:
        return grad_bytes(self.ops, self.precision)

    @cached_property
    def master(self) -> int:
        return master_bytes(self.ops, self.precision, self.optimizer)

    @cached_property
    def optimizer_states(self) -> int:
        return optimizer_states_bytes(self.ops, self.precision, self.optimizer)

    @property
    def optimizer_total(self) -> int:
        """Everything the optimizer holds: states, the fp32 master weights (the chapter's 12
        bytes per parameter for Adam) and the step counters (``optimizer_bytes``)."""
        return self.optimizer_states + self.master + self.step_counters

    @cached_property
    def paged_optimizer_bytes(self) -> int:
        """Optimizer states outside PyTorch's allocator (paged-adam8bit's, optimizers.
        paged_state_bytes; none when offloaded): in ``optimizer_total``, not in the phases'
        "opt" (allocated and reserved do not count them; engine.device adds them to the
        device's bytes)."""
        return 0 if self._offload_opt else paged_state_bytes(self.ops, self.optimizer)

    @cached_property
    def paged_working_bytes(self) -> int:
        """Of ``paged_optimizer_bytes``, what must be on the GPU at once (optimizers.
        paged_working_bytes: the largest tensor's, prefetched for its update)."""
        return 0 if self._offload_opt else paged_working_bytes(self.ops, self.optimizer)

    def device(self, gpu_name: str | None, fragmentation: float):
        """What the allocator and nvidia-smi show for this step (engine.device.device_memory):
        the tensors' peak with the allocator's ``fragmentation`` slack, ``gpu_name``'s cuBLAS
        workspaces, the CUDA context and the paged optimizer states outside the allocator."""
        from .device import device_memory
        return device_memory(self.total, gpu_name, fragmentation, self.paged_optimizer_bytes,
                             self.paged_working_bytes)

    @cached_property
    def in_backward_bytes(self) -> tuple[int, int, int]:
        """Optimizer in backward (``optimizer_in_backward``): (the most gradient bytes alive at
        once, and that step's fp32 gradient copy and temporaries), the larger of
        ``_in_backward_at``'s through the blocks and after them; zeros otherwise."""
        if not self.optimizer_in_backward:
            return 0, 0, 0
        return max(self._in_backward_at(True), self._in_backward_at(False))

    def _in_backward_at(self, blocks: bool) -> tuple[int, int, int]:
        """(gradient bytes alive, the step's fp32 copy, its temporaries) under the optimizer in
        backward while backward runs through the blocks (``blocks``: their largest tensor's
        and a trained tied table's waiting head gradient) or through any op (the largest
        trainable tensor's): optimizers.in_backward_grad_tensor, optimizer_step_extra for
        that many parameters."""
        tied = self.cfg.tie_embeddings and self._table_trains and self.cfg.head in VOCAB_HEADS
        wait = self.cfg.vocab_size * self.cfg.embed_dim if blocks and tied else 0
        n = in_backward_grad_tensor([op for op in self.ops if op.layer >= 0 or not blocks],
                                    wait)
        return (n * self._bytes.grad, *optimizer_step_extra(
            self.optimizer_kernel, self.optimizer, self.precision, n - wait))

    def op_activations(self, op: Op) -> int:
        return op.saved_bytes(self.work, self._bytes.act)

    @cached_property
    def activations(self) -> int:
        """Bytes saved for backward over the whole forward, under the recompute policy."""
        return saved_bytes(self.ops, self.work, self._bytes.act, self.precision)

    def _saved_rows(self):
        """(row path, (stack, layer), bytes): the engine's ``saved_rows``."""
        for path, op, b in saved_rows(self.ops, self.work, self._bytes.act):
            yield path, (op.stack, op.layer), b + fp8_saved_delta(op, b, self._bytes.act,
                                                                    self.precision)

    def activations_by_layer(self) -> dict[tuple[str, int], int]:
        """{(stack, layer): saved bytes}; layer -1 holds embeddings, final norm, head, loss."""
        out: dict[tuple[str, int], int] = {}
        for _, key, b in self._saved_rows():
            out[key] = out.get(key, 0) + b
        return out

    def activations_by_op(self) -> dict[str, int]:
        """{op path (a block's path under full recompute): saved bytes}."""
        out: dict[str, int] = {}
        for path, _, b in self._saved_rows():
            out[path] = out.get(path, 0) + b
        return out

    def activations_by_layer_type(self) -> list[dict]:
        """Saved bytes summed over blocks of the same kind, and outside the blocks."""
        return by_layer_type(self.cfg, {k: {"activations_bytes": v}
                                        for k, v in self.activations_by_layer().items()})

    @cached_property
    def logits_transient(self) -> int:
        """The loss's largest transient above the saved activations, at the forward peak or as
        backward starts (``loss_transient``: with HF's kernel the full loss's two fp32 T x V
        buffers, 8 T V; the stack's kernel's, lm_loss.full_loss_extra): what the planner books
        as "logits" on the last stage."""
        return loss_transient(self.cfg, self.ops, self.work, self.precision)

    @cached_property
    def recompute_bytes(self) -> int:
        """Full recompute: the block rerun in backward above the saved tensors
        (saved.recompute_transient), with a quantised weight dequantised for its matmuls
        (``dequant_bytes``); 0 otherwise. The loss's and head's saved tensors are freed by
        then (``phases`` takes saved.tail_saved away)."""
        rc = sum(self._recompute_parts)
        return rc + self.dequant_bytes if rc else 0

    @cached_property
    def _recompute_parts(self) -> tuple[int, int]:
        """``recompute_bytes`` before the dequantised weight, as (the rerun's saved tensors
        and output gradient, its backward transient: the MLP's or an eager attention
        core's gradients in flight): saved.recompute_parts."""
        return recompute_parts(self.ops, self.work, self._bytes.act, self.precision,
                               bool(self.finetune and self.finetune.mlp_inplace))

    @cached_property
    def _rerun_ends(self) -> tuple[int, int, int]:
        """(gradients of the ops after the last block, gradients of the first block and the
        ops before it, the first block's checkpoint): ``phases``' two ends of the reruns."""
        ops, g = self.ops, self._bytes.grad
        blocks = [i for i, op in enumerate(ops) if op.layer >= 0]
        first = min((op.layer for op in ops if op.layer >= 0), default=0)
        head = sum(op.params_total * g for op in ops[blocks[-1] + 1:] if op.trainable) \
            if blocks else 0
        lead = sum(op.params_total * g for i, op in enumerate(ops) if op.trainable and (
            op.layer == first if op.layer >= 0 else blocks and i < blocks[0]))
        ckpt = sum(b for _, op, b in saved_rows(ops, self.work, self._bytes.act)
                   if op.layer == first and op.kind == "checkpoint")
        return head, lead, ckpt

    @cached_property
    def held(self) -> HeldInputs:
        """The batch and the loss beside the saved activations (``held_inputs``)."""
        return held_inputs(self.cfg, self.ops, self.work, self._bytes.act,
                           self.finetune is not None)

    @property
    def held_inputs_bytes(self) -> int:
        """``held`` in bytes: what the planner's "inputs" category holds on one GPU."""
        return self.held.first + self.held.last

    @cached_property
    def steady_phases(self) -> dict[str, dict[str, int]]:
        """``phases()`` of a step after the first (optimizer state already allocated)."""
        return self.phases()

    @property
    def total(self) -> int:
        return self.steady_phases["peak"]["total"]

    @property
    def peak_phase(self) -> str:
        """Which point of the step holds the peak: peak_forward, peak_backward or peak_step."""
        ph = self.steady_phases
        return next(k for k in ("peak_forward", "peak_backward", "peak_step")
                    if ph[k] is ph["peak"])

    # --- one training step by phase (additions for issue 4, checked by MemTracker) ---------------
    @cached_property
    def param_tensors(self) -> int:
        """Parameter tensors: a weight and a bias are two; stacked experts are one per matrix."""
        return param_tensor_count(self.ops)

    @cached_property
    def step_counters(self) -> int:
        """torch's Adam, AdamW and Adafactor keep a 4-byte fp32 step per parameter tensor."""
        return step_counter_bytes(self.ops, self.optimizer)

    @cached_property
    def resident(self) -> int:
        """Between steps: weights, optimizer states (and step counters), fp32 master weights."""
        return self.weights + self.optimizer_total

    @cached_property
    def inputs(self) -> int:
        """The batch the step holds: int64 token ids, labels (with an LM head) and source ids
        (encoder-decoder), and the fp32 loss scalar it returns."""
        w, head = self.work, self.cfg.head in VOCAB_HEADS
        ids = w.rows("seq") * (2 if head else 1)
        if self.cfg.family == "encoder-decoder":
            ids += w.rows("src")
        return 8 * ids + 4

    def _loss_temp(self, when: str) -> int:
        """The loss's transient at the forward peak or as backward starts (``loss_temp``)."""
        return loss_temp(self.cfg, self.ops, self.work, self.precision, when)

    @cached_property
    def _step_extra(self) -> tuple[int, int]:
        return optimizer_step_extra(self.optimizer_kernel, self.optimizer, self.precision,
                                    self.trainable_params)

    @property
    def master_grad_copies(self) -> int:
        """Mixed precision: the fp32 copy of the gradients handed to the master weights during
        the step (4 bytes per parameter; none where the kernel steps on fp32 gradient buffers:
        ``optimizer_step_extra``)."""
        return self._step_extra[0]

    @property
    def optimizer_temporaries(self) -> int:
        """Bytes the optimizer allocates and frees inside its step (``optimizer_step_extra``).
        foreach Adam/AdamW: the sqrt of the second moment for all parameters at once (one copy
        of the state, torch _multi_tensor_adam); fused kernels: none. SGD with momentum (no
        weight decay) and no optimizer: none. Adafactor and 8-bit Adam: not modelled (0)."""
        return self._step_extra[1]

    @cached_property
    def step_held(self) -> HeldInputs:
        """The batch alive at the optimizer step (``step_held_inputs``)."""
        return step_held_inputs(self.cfg, self.ops, self.work, self._bytes.act,
                                self.finetune is not None)

    def phases(self, first_step: bool = False) -> dict[str, dict[str, int]]:
        """Bytes in use by category at each point of one training step (reference/train.py:
        forward, backward, optimizer step, then zero_grad), no parallelism.

            phase          | what is alive besides the resident model states
            ---------------|---------------------------------------------------------------
            after_forward  | activations saved for backward, the loss
            peak_forward   | + the logits transients at the loss: lm_head output (a bytes)
                           |   and its fp32 copy (4, absent in fp32) beside the saved fp32
                           |   log-probabilities
            after_backward | gradients, the batch and the loss (activations are freed)
            peak_backward  | the largest point of backward (gradients grow while activations
                           |   shrink, both about linearly): under full recompute the last
                           |   block rerun beside every checkpoint (recompute_bytes); at
                           |   the start all activations
                           |   and the loss kernel's gradients (HF's: two fp32 T x V, the
                           |   loss's and log-softmax's; lm_loss.full_loss_extra); at
                           |   the end all gradients and the embedding's input gradient
                           |   (tied head: + the table's lookup gradient and its sum with
                           |   the head's, two V x E gradients)
            after_step     | as after_backward (gradients live until zero_grad)
            peak_step      | + master_grad_copies (temp) + optimizer_temporaries (opt)
            peak           | the largest of the three peaks

        ``first_step``: optimizer state is created lazily inside the first step, so forward and
        backward run without it (the step's peak is the same).
        Optimizer in backward (``optimizer_in_backward``): each backward point that holds
        gradients holds at most ``in_backward_bytes``' (one tensor's, with that tensor's step
        transients: its fp32 copy under temp, its temporaries under opt), and a trained head
        is stepped as backward leaves the loss, beside every activation; none after
        backward, and the step adds nothing. Paged optimizer states (``paged_optimizer_bytes``) are
        outside the allocator: not in "opt".
        Categories: param, grad, opt (states, step counters; temporaries at the step's peak),
        master (fp32 master weights), act (saved activations, the batch, the loss), temp.
        """
        w = self.work
        resident_opt = 0 if self._offload_opt else \
            self.optimizer_states + self.step_counters - self.paged_optimizer_bytes
        opt = 0 if first_step else resident_opt
        base = {"param": self.weights, "grad": 0, "opt": opt,
                "master": 0 if self._offload_opt else self.master, "act": 0, "temp": 0}

        def phase(**cats):
            out = base | cats
            out["total"] = sum(out.values())
            return out
        def backward(grad: int, act: int, temp: int, blocks: bool = False,
                     transient: int = 0):
            """A backward point holding ``grad`` bytes of gradients without the optimizer in
            backward; with it, at most one tensor's and its step's transients (``blocks``:
            inside the blocks' backward, ``_in_backward_at``). ``transient``: a rerun block's
            backward transient (its MLP's or attention core's gradients in flight), beside
            every accumulated gradient; under the optimizer in backward not beside a
            weight's step (that runs when the weight's gradient is accumulated, not inside
            an activation's or softmax's backward): the larger of the two."""
            if not self.optimizer_in_backward or not grad:
                return phase(grad=grad, act=act, temp=temp + transient)
            ib_grad, ib_copy, ib_temps = self._in_backward_at(blocks)
            g = min(grad, ib_grad)
            return phase(grad=g, act=act, temp=temp + ib_copy + max(0, transient - (
                g + ib_copy + ib_temps)), opt=base["opt"] + ib_temps)
        grads = 0 if self.optimizer_in_backward else self.gradients  # after backward
        a = self._bytes.act
        # + the batch and the loss beside them: labels the loss does not save, a frozen
        # table's ids and leaf, the returned loss (held_inputs)
        act = self.activations - self.offloaded_activations + self.held_inputs_bytes
        leaf = self.frozen_table_inputs[1]
        emb_grad = w.rows("seq") * self.cfg.embed_dim * a
        if self.cfg.family == "encoder-decoder":
            emb_grad += w.rows("src") * self.cfg.embed_dim * a
        if self.cfg.tie_embeddings and self.cfg.head in VOCAB_HEADS and self._table_trains:
            # the table's gradient from the lookup, then its sum with the head's gradient
            emb_grad += 2 * self.cfg.vocab_size * self.cfg.embed_dim * self._bytes.grad
        # the frozen table's leaf and, from backward on, its gradient: the graph holds both
        # until the loss goes (after the step)
        done = self.step_held.first + self.step_held.last
        # a loop that keeps the previous micro-batch's names (Finetune.keeps_previous): its
        # graph's context-held inputs through this forward and loss, its logits through this
        # forward (to the head's last piece, head_forward_peak); this step's graph after it
        ft = self.finetune
        graph, logits = previous_step_bytes(self.cfg, self.ops, w, a, ft)
        prev = 0 if first_step else graph
        head = head_forward_peak(self.cfg, self.ops, w, a, ft.cast_from_bytes(
            self.precision)) + (0 if first_step else logits) \
            if ft is not None and (ft.quantize_head or ft.keeps_previous) else 0
        out = {
            "after_forward": phase(act=act + prev),
            "peak_forward": phase(act=act + prev, temp=max(self._loss_temp("forward"), head)),
            "after_backward": phase(grad=grads, act=done + graph),
        }
        # the first backward ops: the loss kernel's gradients (HF: two fp32 T x V), or a
        # quantised weight dequantised for the last block's input gradient, whichever is larger
        early = phase(act=act, temp=max(self._loss_temp("backward"), self.dequant_bytes))
        late = backward(self.gradients, self.inputs + leaf, emb_grad)
        # full recompute: a block rerun (recompute_bytes) at either end of the blocks' backward
        # (blocks alike: what is alive grows or shrinks linearly between): the last block,
        # beside every checkpoint and the head's gradients, or the first, beside its own
        # checkpoint and every gradient but its own and the embeddings'
        peaks = [early, late]
        own_head = sum(op.params_total for op in self.ops
                       if op.path == "lm_head" and op.trainable) * self._bytes.grad
        if self.optimizer_in_backward and own_head:
            # the head's own step, as backward leaves the head: beside every activation but
            # the loss's and the head's saved tensors (tail_saved), and the hidden states'
            # gradient
            peaks.append(backward(own_head, act - tail_saved(self.ops, w, a),
                                  w.rows("seq") * self.cfg.embed_dim * a))
        if self.recompute_bytes:
            head_grad, first_grad, first_ckpt = self._rerun_ends
            transient = self._recompute_parts[1]
            rerun = self.recompute_bytes - transient
            peaks.append(backward(head_grad, act - tail_saved(self.ops, w, a), rerun,
                                  blocks=True, transient=transient))
            peaks.append(backward(self.gradients - first_grad, self.inputs + leaf + first_ckpt,
                                  rerun, blocks=True, transient=transient))
        out["peak_backward"] = max(peaks, key=lambda c: c["total"])
        out["after_step"] = dict(base, opt=resident_opt, grad=grads, act=done + graph)
        out["after_step"]["total"] = sum(v for k, v in out["after_step"].items() if k != "total")
        # offloaded: the step and its temporaries run on the host; in backward: done there
        temps = (0, 0) if self._offload_opt or self.optimizer_in_backward else (
            self.master_grad_copies, self.optimizer_temporaries)
        out["peak_step"] = dict(out["after_step"], temp=temps[0],
                                opt=out["after_step"]["opt"] + temps[1])
        out["peak_step"]["total"] += sum(temps)
        out["peak"] = max((out[k] for k in ("peak_forward", "peak_backward", "peak_step")),
                          key=lambda c: c["total"])
        return out

    @cached_property
    def frozen_table_inputs(self) -> tuple[int, int]:
        """(token-id bytes, leaf bytes) of a frozen token table (``frozen_table_inputs``)."""
        return frozen_table_inputs(self.cfg, self.ops, self.work, self._bytes.act,
                                   self.finetune is not None)

    @property
    def _leaf_saved(self) -> bool:
        """Whether block 0 saves the frozen table's output itself (``leaf_saved``)."""
        return leaf_saved(self.cfg, self.ops, self.work, self._bytes.act)

    # --- offload: host memory and PCIe traffic ------------------------------------------------
    @property
    def _offload_opt(self) -> bool:
        return self.offload in ("optimizer", "all")

    @cached_property
    def offloaded_activations(self) -> int:
        """Recompute checkpoints kept in host memory (offload activations/all): what the
        checkpoint ops keep under the recompute mode (block inputs under full recompute)."""
        if self.offload not in ("activations", "all"):
            return 0
        return sum(b for _, op, b in saved_rows(self.ops, self.work, self._bytes.act)
                   if op.kind == "checkpoint")

    @cached_property
    def host_bytes(self) -> int:
        """Host (CPU) memory the step needs: offloaded optimizer states, step counters, fp32
        master weights and the fp32 gradients the CPU optimizer reads (4 per trainable
        parameter, ZeRO-Offload, arXiv:2101.06840, section 4.1), offloaded checkpoints."""
        out = self.offloaded_activations
        if self._offload_opt and self.optimizer != "none":
            out += self.optimizer_total + self.trainable_params * 4
        return out

    @cached_property
    def pcie_bytes(self) -> int:
        """Bytes over PCIe per step: gradients to the host and updated weights back
        (optimizer offload), each checkpoint out in forward and back in backward."""
        out = 2 * self.offloaded_activations
        if self._offload_opt and self.optimizer != "none":
            out += self.trainable_params * (self._bytes.grad + self._bytes.weight)
        return out

    @property
    def _table_trains(self) -> bool:
        return any(op.trainable for op in self.ops if op.path == "embed.tokens")

    def finetune_json(self) -> dict:
        """Fine-tuning figures (memory --json): trainable and adapter parameters, bytes."""
        ft = self.finetune
        return {"finetune": ft.mode if ft else "full",
                "finetune_setup": ft.describe() if ft else "full fine-tuning",
                "trainable_params": self.trainable_params, "adapter_params": self.adapter_params,
                "adapter_bytes": self.adapter_bytes, "frozen_params": self.n_params
                - self.trainable_params, "dequant_bytes": self.dequant_bytes,
                "offload": self.offload, "host_bytes": self.host_bytes,
                "pcie_bytes_per_step": self.pcie_bytes}

    def to_json(self) -> dict:
        return {"model": self.cfg.name, "precision": self.precision, "optimizer": self.optimizer,
                "optimizer_kernel": self.optimizer_kernel, "batch": self.work.batch, "seq": self.work.seq, "recompute": self.work.recompute,
                "recompute_method": self.work.recompute_method,
                "recompute_layers": self.work.recompute_layers, "fused": list(self.work.fused),
                "attn_impl": self.work.attn_impl, "loss": self.work.loss, "params": self.n_params,
                "weights_bytes": self.weights, "gradients_bytes": self.gradients,
                "fp8_weight_copies_bytes": fp8_weight_bytes(self.ops, self.precision),
                "optimizer_bytes": self.optimizer_total, "master_weights_bytes": self.master,
                "paged_optimizer_bytes": self.paged_optimizer_bytes,
                "paged_working_bytes": self.paged_working_bytes,
                "optimizer_in_backward": self.optimizer_in_backward,
                "activations_bytes": self.activations, "inputs_bytes": self.held_inputs_bytes,
                "logits_bytes": self.logits_transient, "recompute_bytes": self.recompute_bytes,
                "kv_cache_bytes": 0, "total_bytes": self.total, "peak_phase": self.peak_phase,
                "peak_by_category": self.steady_phases["peak"], "dropout": self.work.dropout,
                "activations_by_layer_type": self.activations_by_layer_type(),
                **({"global_tokens": self.work.global_tokens} if self.cfg.global_qkv else {})}


def _is_adapter(op: Op) -> bool:
    return op.path.rpartition(".")[2] in ("lora_A", "lora_B", "dora")


def model_states(n_params: int, precision: str = "bf16-mixed", optimizer: str = "adamw") -> dict:
    """Weights, gradients and optimizer bytes (master included) of ``n_params`` parameters
    when only the count is known (no shapes): the chapter's 80B example, 2 + 2 + 12 bytes per
    parameter for Adam in fp16 mixed precision. Optimizers whose state depends on the shapes
    (adam8bit blocks, adafactor's factored moments) need a ModelConfig."""
    from ..inputs import MAX_PARAMS, integer
    n_params = integer("n_params", n_params, 1, MAX_PARAMS)
    w, g, master, state, _ = PRECISIONS[_check("precision", precision, PRECISIONS)]
    _check("optimizer", optimizer, OPTIMIZERS)
    if optimizer not in STATES_PER_PARAM:
        raise WorkloadError(f"optimizer {optimizer!r} needs the model's shapes: give MODEL, "
                            "not --params")
    if precision in FP8_RECIPE:
        raise WorkloadError(f"precision {precision!r} needs the model's shapes (its fp8 weight "
                            "copies cover the blocks' Linears only): give MODEL, not --params")
    opt = n_params * (STATES_PER_PARAM[optimizer] * state
                      + (master if optimizer != "none" else 0))
    out = {"model": f"{n_params:,} parameters", "params": n_params, "precision": precision,
           "optimizer": optimizer, "weights_bytes": n_params * w,
           "gradients_bytes": n_params * g, "optimizer_bytes": opt, "activations_bytes": 0,
           "kv_cache_bytes": 0}
    out["total_bytes"] = out["weights_bytes"] + out["gradients_bytes"] + opt
    return out
