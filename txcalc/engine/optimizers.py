"""Optimizers' memory: the states each keeps (``OPTIMIZER_SPECS``, ``optimizer_state_bytes``),
what its step kernel allocates (``OPTIMIZER_STEPS``; the bytes: ``memory.optimizer_step_extra``),
the states bitsandbytes pages outside PyTorch's allocator (``paged_state_bytes``) and what an
optimizer run inside the backward pass keeps of the gradients (``in_backward_grad_tensor``).
``memory`` re-exports every name here.

Optimizers (states per parameter): adamw/adam 2 (first and second moments); adam8bit 2 at
1 byte each plus one fp32 absmax per 2048-element block and state (bitsandbytes blockwise
quantisation, Dettmers et al. 2021, arXiv:2110.02861); paged-adam8bit the same bytes, paged
(``paged_state_bytes``); sgd (momentum) 1; adafactor: factored second moment, rows + columns
per matrix and the full size for vectors (Shazeer and Stern 2018, arXiv:1804.04235; no
momentum); none 0. As in the chapter's 80B example, the fp32 master copy of mixed precision
is reported with the optimizer (2 + 2 + 12 = 16 bytes/param for Adam).

Paged 8-bit Adam (bitsandbytes.optim.PagedAdamW8bit, ``is_paged=True``; bitsandbytes 0.43.3
bitsandbytes/optim/optimizer.py ``Optimizer8bit.get_state_buffer``: a parameter of fewer
than 1e5 elements gets ``torch.zeros_like``, a larger one ``F.get_paged``, which
bitsandbytes/functional.py builds over ``lib.cget_managed_ptr``, csrc/pythonInterface.cpp
``cudaMallocManaged(&ptr, bytes, cudaMemAttachHost)``; ``prefetch_state`` moves both states
to the GPU before each parameter's update, ``optimizer_update_8bit_blockwise`` updates in
place): the two uint8 states of every tensor of 1e5 elements or more live in CUDA unified
memory, allocated outside PyTorch's caching allocator, so torch.cuda.max_memory_allocated
and max_memory_reserved do not count them, while nvidia-smi does when they are resident
(``engine.device``: device bytes = reserved + context + paged). The absmax blocks (fp32, one
per 2048 elements and state: ``Optimizer2State.init_state`` ``torch.zeros``) and the smaller
tensors' states stay in the allocator. When the GPU is full the driver evicts managed pages
to the host and the next prefetch brings them back, so only the tensor being updated needs
its states on the GPU (``paged_working_bytes``): a run needs that much beside the allocator's
reserved bytes, and nvidia-smi shows up to all of them (``paged_state_bytes``) when they fit
(torchtune's README runs Llama 3.1 8B's full fine-tune, 15 GiB of paged states, on a 24 GB
RTX 4090 at 18.9 GiB peak). ``plan train`` books them as resident states (its per-GPU totals
are the device's).

Optimizer in backward (torchtune ``optimizer_in_bwd: True``; pytorch/torchtune@30b8519e
recipes/full_finetune_single_device.py ``_setup_optimizer``: one optimizer per parameter,
``training.register_optim_in_bwd_hooks``, torchtune/training/memory.py: each parameter's
``register_post_accumulate_grad_hook`` runs ``optim_dict[param].step()`` then
``zero_grad()``, which sets ``.grad`` to None): each gradient is applied and freed as soon as
autograd has accumulated it, so backward holds one parameter's gradient (and its step's
temporaries) where the usual loop holds every gradient until the step
(``in_backward_grad_tensor``); the separate optimizer step disappears.
"""

from __future__ import annotations

from enum import StrEnum
from typing import NamedTuple

from ..units import cdiv
from .ops import Op


class OptimizerSpec(NamedTuple):
    """One optimizer's memory: full-size states per parameter (None: shaped by the tensors,
    see ``optimizer_state_bytes``) and bytes of its step counter per parameter tensor (torch's
    Adam, AdamW and Adafactor keep a 4-byte fp32 ``step`` tensor per parameter; bitsandbytes'
    8-bit Adam keeps a Python int; SGD none)."""
    states: int | None
    step_bytes: int


class Optimizer(StrEnum):
    ADAMW = "adamw"
    ADAM = "adam"
    ADAM8BIT = "adam8bit"
    PAGED_ADAM8BIT = "paged-adam8bit"  #: bitsandbytes PagedAdamW8bit
    SGD = "sgd"
    ADAFACTOR = "adafactor"
    NONE = "none"


#: the one table of optimizer memory (states per parameter, step counter per tensor)
OPTIMIZER_SPECS = {
    "adamw": OptimizerSpec(2, 4),
    "adam": OptimizerSpec(2, 4),
    "adam8bit": OptimizerSpec(None, 0),
    "paged-adam8bit": OptimizerSpec(None, 0),
    "sgd": OptimizerSpec(1, 0),
    "adafactor": OptimizerSpec(None, 4),
    "none": OptimizerSpec(0, 0),
}
OPTIMIZERS = tuple(o.value for o in Optimizer)
ADAM8BIT_BLOCK = 2048
#: bitsandbytes' blockwise 8-bit Adam, in the allocator or paged
ADAM8BIT_OPTIMIZERS = ("adam8bit", "paged-adam8bit")
#: bitsandbytes pages a state buffer of this many elements or more (get_state_buffer:
#: ``p.numel() < 1e5`` stays in torch)
PAGED_MIN_NUMEL = 10**5


class OptimizerStep(NamedTuple):
    """What one optimizer-step kernel allocates beyond the resident states, for the step only
    (``optimizer_step_extra``)."""
    temporaries: bool  #: a state-sized temporary (Adam/AdamW: the second moment's sqrt)
    grad_copy: bool  #: an fp32 copy of low-precision gradients handed to the fp32 master


#: the one table of optimizer-step kernels (``Stack.optimizer_kernel``), each by its source:
#:
#:     kernel    | temporaries | fp32 grad copy | who, source
#:     ----------|-------------|----------------|--------------------------------------------
#:     foreach   | Adam/AdamW: | mixed: 4 B per | torch.optim's default on CUDA
#:               |   1 state   |   parameter    |   (_default_to_fused_or_foreach: foreach);
#:               |             |                |   _multi_tensor_adam's torch._foreach_sqrt(
#:               |             |                |   exp_avg_sqs) for all tensors at once;
#:               |             |                |   reference/train.py (master.grad =
#:               |             |                |   grad.float()); MemTracker, test_memory_phases
#:     fused     | none        | mixed: 4 B per | torch fused=True (_fused_adamw_: one kernel
#:               |             |   parameter    |   per tensor list, measured on CPU in
#:               |             |                |   tests/conformance/test_optimizer_step.py), Apex/
#:               |             |                |   DeepSpeed FusedAdam (multi_tensor_apply,
#:               |             |                |   in place); DeepSpeed's ZeRO casts the
#:               |             |                |   gradients it steps on to fp32
#:     main_grad | none        | none           | Megatron-LM: TE/Apex FusedAdam on fp32
#:               |             |                |   main_grad buffers (the gradients accumulate
#:               |             |                |   in fp32, the step reads them in place);
#:               |             |                |   torchtitan: fused AdamW on FSDP2's fp32
#:               |             |                |   sharded parameters and gradients
OPTIMIZER_STEPS = {
    "foreach": OptimizerStep(True, True),
    "fused": OptimizerStep(False, True),
    "main_grad": OptimizerStep(False, False),
}
OPTIMIZER_KERNELS = tuple(OPTIMIZER_STEPS)


#: full-size states per parameter of the optimizers whose state does not depend on shapes
STATES_PER_PARAM = {k: v.states for k, v in OPTIMIZER_SPECS.items() if v.states is not None}


def optimizer_state_bytes(op: Op, optimizer: str, state_bytes: int) -> int:
    """Optimizer state of one op's parameters (all instances), step counters excluded."""
    n = op.params
    if n == 0 or not op.trainable or optimizer == "none":
        return 0
    if optimizer in STATES_PER_PARAM:
        per = STATES_PER_PARAM[optimizer] * n * state_bytes
    elif optimizer in ADAM8BIT_OPTIMIZERS:
        per = 2 * n + 2 * 4 * cdiv(n, ADAM8BIT_BLOCK)
    else:  # adafactor: factored second moment (rows + columns, fp32) for every matrix
        # (embedding tables too, as in torch.optim.Adafactor and the paper), the full size
        # for vectors (biases, norm scales); a tied head owns only its bias
        per = sum(((d0 + rest) if ndim == 2 else d0 * rest) * 4
                  for d0, rest, ndim in op.tensors())
    return per * op.instances



def paged_state_bytes(ops, optimizer: str) -> int:
    """Optimizer states outside PyTorch's allocator (the module doc): paged-adam8bit's two
    uint8 states (2 bytes an element) of each trainable tensor of ``PAGED_MIN_NUMEL``
    elements or more (stacked experts: one tensor per matrix); 0 for every other optimizer."""
    if optimizer != "paged-adam8bit":
        return 0
    return sum(2 * n for n in _trained_tensor_numels(ops) if n >= PAGED_MIN_NUMEL)


def paged_working_bytes(ops, optimizer: str) -> int:
    """The paged states that must be on the GPU at once: the largest paged tensor's two
    (``prefetch_state`` before its update); the others may wait on the host."""
    if optimizer != "paged-adam8bit":
        return 0
    return max((2 * n for n in _trained_tensor_numels(ops) if n >= PAGED_MIN_NUMEL), default=0)


def _trained_tensor_numels(ops):
    """Elements of each trainable parameter tensor (stacked experts: one tensor per matrix)."""
    for op in ops:
        if op.trainable and op.params:
            for d0, rest, _ in op.tensors():
                yield d0 * rest * op.instances


def in_backward_grad_tensor(ops, waiting: int = 0) -> int:
    """Elements of gradient alive at once when each parameter's optimizer step runs inside
    backward (the module doc) while backward runs through ``ops``: the largest trainable
    tensor's among them (the one whose gradient may be the one being accumulated), plus
    ``waiting`` elements accumulated but not yet stepped: a trained tied table is stepped only
    once its head's and its lookup's gradients are both accumulated (its post-accumulate hook
    fires after the last use's), so through the blocks its head gradient waits."""
    return max(_trained_tensor_numels(ops), default=0) + waiting
