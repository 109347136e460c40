"""Framework and kernel profiles: which kernels a training stack runs, what they keep for
backward, and which collectives it overlaps with compute.

    >>> from txcalc.engine.stacks import get_stack
    >>> s = get_stack("torchtitan"); s.attn_impl, s.fused, s.overlap
    ('flash', ('norm', 'act', 'loss'), ('grad_reduce', 'param_gather'))

The one table (``STACKS``), one row a profile. ``fused`` are the kernels of
``workload.FUSED_KERNELS`` the stack runs fused; what each keeps for backward is declared once,
per op (``Op.saved_fused``), and measured on the reference model with the kernels torch.compile
builds (tests/conformance/test_stacks_recompute.py). Kernels that cannot run on CPU keep what their source
says they keep, the same bytes:

    kernel      | unfused (HF eager)                   | fused                       | who, source
    ------------|--------------------------------------|-----------------------------|-------------------
    RMSNorm     | fp32 input copy + 1/rms + normalised | input (act dtype) + fp32    | TE RMSNorm, Apex
                |   input: 4 + a bytes a unit (6 bf16) |   1/rms: a a unit (2 bf16)  |   FusedRMSNorm save
                |                                      |                             |   (input, rsigma);
                |                                      |                             |   torch.compile
    SwiGLU      | gate, silu(gate), up: 3 F a          | gate and up: 2 F a          | Megatron
                |                                      |                             |   bias_swiglu_impl
                |                                      |                             |   saves the [gate,
                |                                      |                             |   up] input; compile
    cross-      | fp32 log-probabilities: 4 V          | logits in the act dtype +   | torch.compile'd
    entropy     |                                      |   2 fp32 per row: a V + 8   |   loss (torchtitan
                |                                      |                             |   compiles "loss")
    attention   | eager: S x S probabilities           | flash: q, k, v, output,     | FlashAttention-2/3,
                |                                      |   fp32 logsumexp            |   cuDNN, SDPA flash
    rotary      | cos and sin tables, one row a        | the same tables (TE's fused | per position, not per
                |   position (not per token)           |   RoPE: its freqs)          |   token: no change

LayerNorm is one kernel everywhere (native layer_norm): nothing to fuse. Megatron's
vocab-parallel cross-entropy casts the logits to fp32 and keeps them (its softmax in place):
4 V, as unfused; nanotron's the same. Their transients differ from HF's: ``Stack.loss_kernel``
names the kernel, whose forward and early-backward T x V bytes are lm_loss.full_loss_extra's
(HF 8 T V as backward starts; Megatron's vocab_parallel and nanotron's sharded write the
gradient in place of the saved softmax and cast it: a T V; compiled: a T V).

The optimizer step (``Stack.optimizer_kernel``, the table memory.OPTIMIZER_STEPS, one rule
memory.optimizer_step_extra read by ``memory`` and the planner): torch's foreach AdamW (HF code
with torch.optim's default, reference/train.py) allocates the second moment's sqrt for every
parameter inside the step and the fp32 master's gradients are cast from the bf16 ones;
DeepSpeed's FusedAdam allocates nothing beyond its states, its ZeRO casts the gradients it
steps on; Megatron-LM, nanotron (accumulate_grad_in_fp32) and torchtitan (FSDP2's fp32
sharded parameters) step fused kernels on fp32 gradient buffers: nothing at the step. The
fused kernels' nothing and foreach's one state are measured on the CPU
(tests/conformance/test_optimizer_step.py).

Overlap (``OVERLAPS``; what ``train.evaluate`` hides, shown as exposed and hidden seconds in
the communication table):

    item         | hidden behind                              | framework switch
    -------------|--------------------------------------------|-----------------------------------
    tp           | the stage's compute outside the attention  | Megatron --tp-comm-overlap (TE
                 |   core: exposed = max(0, TP time - it)      |   userbuffers), torchtitan async TP
    param_gather | ZeRO-1/2's all-gather of the updated        | Megatron --overlap-param-gather,
                 |   parameters, behind the next forward        |   FSDP2 / DeepSpeed prefetch
    grad_reduce  | the gradient all-reduce / reduce-scatter,   | DDP buckets, FSDP, Megatron
                 |   behind the last micro-batch's backward     |   --overlap-grad-reduce
    pp           | pipeline sends, behind the stage's compute  | Megatron
                 |                                            |   --overlap-p2p-communication
ZeRO-3's per-micro-batch gathers are prefetched in every profile (FSDP's and DeepSpeed's
default). ``DEFAULT_OVERLAP`` (grad_reduce only) is what txcalc assumed before profiles.
"""

from __future__ import annotations

from typing import NamedTuple

from ..errors import WorkloadError
from .workload import FUSED_KERNELS, KEEPS  # KEEPS: what each item keeps, traced

OVERLAPS = ("tp", "param_gather", "grad_reduce", "pp")
#: what every answer assumed before the profiles: gradient reduction behind backward only
DEFAULT_OVERLAP = ("grad_reduce",)


class Stack(NamedTuple):
    """One training stack: attention kernel, fused kernels, overlapped collectives."""
    name: str
    attn_impl: str  #: workload.ATTN_IMPLS
    fused: tuple[str, ...]  #: workload.FUSED_KERNELS
    overlap: tuple[str, ...]  #: OVERLAPS
    softmax_fp32: bool  #: eager softmax upcast (HF)
    source: str
    keeps: tuple[str, ...] = ()  #: KEEPS
    #: the full loss's cross-entropy kernel (lm_loss.LOSS_KERNELS; "loss" in fused compiles
    #: hf's): its transients are lm_loss.full_loss_extra's
    loss_kernel: str = "hf"
    #: the optimizer step's kernel (memory.OPTIMIZER_STEPS: foreach, fused, main_grad): what
    #: the step allocates above the states, memory.optimizer_step_extra
    optimizer_kernel: str = "foreach"


#: the one table of framework profiles
STACKS = {s.name: s for s in (
    Stack("hf-eager", "eager", (), ("grad_reduce",), True,
          "transformers attn_implementation='eager': fp32 RMSNorm, act(gate) * up and "
          "cross-entropy on fp32 logits written out in PyTorch (modeling_llama.py); DDP / FSDP "
          "reduce gradients in buckets during backward; torch.optim.AdamW's default foreach step "
          "(torch/optim/optimizer.py _default_to_fused_or_foreach: fused only if asked)"),
    Stack("hf-sdpa", "flash", (), ("grad_reduce",), True,
          "transformers attn_implementation='sdpa': on CUDA in bf16 with a causal mask SDPA "
          "runs its flash kernel (no S x S kept); the other kernels as hf-eager"),
    Stack("torchtitan", "flash", ("norm", "act", "loss"), ("grad_reduce", "param_gather"), True,
          "pytorch/torchtitan llama3 configs: SDPA flash, torch.compile per block and of the "
          "loss (compile.components model, loss), FSDP2 prefetching all-gathers and "
          "reduce-scattering during backward; async TP is opt-in "
          "(parallelism.enable_async_tensor_parallel); AdamW implementation 'fused' "
          "(torchtitan/config/job_config.py Optimizer.implementation, 6404b932) on FSDP2's "
          "fp32 sharded parameters, gradients reduced in fp32 (mixed_precision_reduce)",
          optimizer_kernel="main_grad"),
    Stack("megatron", "flash", ("norm", "act"), ("tp", "param_gather", "grad_reduce", "pp"),
          False,
          "Megatron-LM / NeMo with TransformerEngine: TE flash attention and fused RMSNorm, "
          "--bias-swiglu-fusion, vocab-parallel cross-entropy on fp32 logits; the overlap flags "
          "of NeMo's pre-training recipes: --tp-comm-overlap, --overlap-param-gather, "
          "--overlap-grad-reduce, --overlap-p2p-communication; TE/Apex FusedAdam stepping on the "
          "fp32 main_grad buffers gradients accumulate in", loss_kernel="vocab_parallel",
          optimizer_kernel="main_grad"),
    Stack("nanotron", "flash", ("norm", "act"), ("grad_reduce",), False,
          "huggingface/nanotron (9b0de5be) Llama: flash_attn_varlen_func, TritonRMSNorm "
          "(input + fp32 rstd), torch.compile'd GLUActivation, _ShardedCrossEntropy on fp32 "
          "logits; tp_mode REDUCE_SCATTER as sequence parallelism, whose column linears save "
          "the all-gathered input; the attention's qkv and o_proj copies (KEEPS); DDP-style "
          "gradient reduction during backward, tp_linear_async_communication off"
          "; torch AdamW fused=True (torch_adam_is_fused) on the fp32 gradients of "
          "accumulate_grad_in_fp32 (FP32GradientAccumulator), as its example configs set",
          keeps=KEEPS, loss_kernel="sharded", optimizer_kernel="main_grad"),
    Stack("deepspeed", "flash", (), ("grad_reduce", "param_gather"), True,
          "DeepSpeed ZeRO on HF model code with flash_attention_2: HF's norms, MLP and loss; "
          "overlap_comm: gradient reduction and ZeRO-3 prefetching overlap compute; FusedAdam "
          "(deepspeed/ops/adam/fused_adam.py, multi_tensor_apply in place), ZeRO casting "
          "the gradient partition it steps on to fp32", optimizer_kernel="fused"),
)}


def get_stack(name: str) -> Stack:
    """The profile called ``name`` (STACKS)."""
    if not isinstance(name, str) or name not in STACKS:
        from ..inputs import show
        raise WorkloadError(f"unknown stack {show(name)}; choose one of {', '.join(STACKS)}")
    return STACKS[name]


def check_overlap(overlap) -> tuple[str, ...]:
    """``overlap`` as a tuple of OVERLAPS items (a comma-separated string, a sequence, or
    "none"); refuses unknown items, naming them."""
    from ..inputs import show
    given = overlap
    if isinstance(overlap, str):
        overlap = () if overlap.strip() in ("", "none") else \
            tuple(x.strip() for x in overlap.split(","))
    if not isinstance(overlap, (tuple, list)) or any(x not in OVERLAPS for x in overlap):
        bad = [x for x in overlap if x not in OVERLAPS] if isinstance(overlap, (tuple, list)) \
            else []
        raise WorkloadError(f"overlap ({show(given)}) must list items of {', '.join(OVERLAPS)} "
                            f"(or be 'none')" + (f"; unknown: {', '.join(map(show, bad))}"
                                                 if bad else ""))
    return tuple(x for x in OVERLAPS if x in overlap)
