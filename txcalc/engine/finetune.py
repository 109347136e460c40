"""Fine-tuning: which ops train, which are frozen, adapters as ops, quantised frozen bases.

A fine-tuning method is a rewrite of the model's ops (``apply_finetune``); every quantity then
follows from the Op roles ``trainable`` and ``weight_format`` through the same engine functions
as full training (memory.py, accounting.py):

    mode    | trainable ops                          | frozen base                   | adds ops
    --------|----------------------------------------|-------------------------------|------------------
    full    | all                                    | -                             | -
    lora    | adapters (lora_A, lora_B per target)   | every op, policy dtype        | P.lora_A, P.lora_B
    qlora   | adapters                               | target-able linears in NF4/   | as lora
            |                                        |  FP4/int8; embeddings, norms, |
            |                                        |  lm_head stay 16-bit (bnb)    |
    dora    | adapters + magnitude vector (d_out)    | every op                      | + P.dora, P.dora_norm
    freeze  | --trainable: last:N blocks, head,      | the rest                      | -
            |  norms, embeddings                     |                               |

LoRA (Hu et al. 2021, arXiv:2106.09685) on a Linear d_in -> d_out of rank r, as PEFT runs it
(``peft.tuners.lora.layer.Linear.forward``): y = W x + B(A(dropout(x))) * alpha / r.

    op           | shapes            | params      | forward FLOPs   | backward FLOPs | saved per token
    -------------|-------------------|-------------|-----------------|----------------|-------------------
    P (frozen)   | W: d_out x d_in   | frozen      | 2 T d_in d_out  | 1 x forward    | nothing (no dW)
    P.lora_drop. | mask on x         | -           | -               | -              | d_in mask (p > 0)
    P.lora_A     | A: r x d_in       | r d_in      | 2 T d_in r      | 2 x forward    | x (d_in; shared by
                 |                   |             |                 |                |  adapters on the
                 |                   |             |                 |                |  same input, p = 0)
    P.lora_B     | B: d_out x r      | d_out r     | 2 T r d_out     | 2 x forward    | A x (r)

Frozen ops keep only what the input gradient needs: a frozen Linear saves nothing (its weight is
a parameter), a frozen RMSNorm drops the normalised input its scale's gradient needed, a frozen
embedding drops its int64 indices (T5's bucket ids too); LayerNorm, attention, activations and the
loss keep theirs. Convention: the embedding output requires grad, as PEFT sets it
(``enable_input_require_grads``) for gradient checkpointing and ``prepare_model_for_kbit_training``
(reentrant checkpoints pass no gradient otherwise), so every block passes gradients through.

DoRA (Liu et al. 2024, arXiv:2402.09353), PEFT's ``DoraLinearLayer``: m = magnitude / ||W + s B A||
(row norms of the merged weight, detached), y = W x + (m - 1) W x + m s B A x. Adds the d_out
magnitude vector (trainable), the merged-weight product B A as PEFT forms it,
lora_B(lora_A(eye(d_in))) (2 r d_in (d_in + d_out) FLOPs per step, no backward: it only
feeds the detached norm; FlopCounterMode on PEFT's DoRA in tests/conformance/test_finetune.py) and saves per token W x and B A x (2 d_out), per
op the norm, m and m - 1 (3 d_out).

QLoRA (Dettmers et al. 2023, arXiv:2305.14314): the frozen base in 4 bits; storage in
``quantized_weight_bytes``, the sum over ``formats.bnb_4bit_tensors``, the one layout of a
bitsandbytes 4-bit weight (NF4/FP4 with or without double quantisation) that quantised
checkpoints (``formats.Format.tensors``) read too. Who quantises (``Finetune.quantizer``):

    quantizer    | quantised Linears             | quantised from     | a dequantised weight
    -------------|-------------------------------|--------------------|------------------------
    transformers | every nn.Linear but the head  | the weight's dtype | one copy in the compute
     (default)   |  (llm_int8_skip_modules)      |                    |  dtype
    fabric       | every nn.Linear, the head too | fp16               | fp16 (the quant state's
                 |  (``FABRIC``: ignore_modules  |  (``FABRIC``:      |  dtype), then its cast to
                 |  empty, litgpt passes none)   |  .to(torch.half))  |  bf16: both during the cast

bitsandbytes before 0.43.2 (``Finetune.bnb_saves_input``) holds each quantised Linear's input
on the autograd context as a Python attribute (``ctx.tensors = (A, B)``; ``BNB_042``), which
backward does not free (it frees save_for_backward's tensors): those inputs live as long as the
graph, and a training loop that keeps its loss bound keeps them (``Finetune.keeps_previous``:
litgpt's ``fit`` rebinds ``logits`` and ``loss`` only when the next micro-batch's are computed,
``LITGPT_LOOP``), so the previous micro-batch's inputs (``bnb_ctx_input_bytes``) are alive
through the next forward and its loss, and its logits until that forward returns
(``previous_step_bytes``, ``head_forward_peak``; ``memory.TrainingMemory.phases``).
"""

from __future__ import annotations

import dataclasses
import functools
from dataclasses import dataclass
from typing import TYPE_CHECKING

from ..model.config import ModelConfig
from ..errors import WorkloadError
from .ops import Op, elementwise, linear

if TYPE_CHECKING:
    from .formats import Format

FINETUNE_MODES = ("full", "lora", "qlora", "dora", "freeze")
BASE_FORMATS = ("nf4", "fp4", "int8")
#: module names an adapter may target (the last part of a linear op's component); routed
#: experts (stacked tensors), the MoE router, the pooler and the shared-expert gate are not
#: nn.Linear modules of the reference model and take no adapter
ADAPTABLE = ("q_proj", "k_proj", "v_proj", "o_proj", "q_a_proj", "q_b_proj", "kv_a_proj",
             "kv_b_proj", "gate_proj", "up_proj", "down_proj", "proj_in", "proj_out", "lm_head")
TARGET_GROUPS = ("all-linear", "attn", "mlp")
TRAINABLE_PARTS = ("head", "norms", "embeddings")  #: plus last:N (the last N blocks)
#: who quantises a QLoRA base (the module doc's table)
QUANTIZERS = ("transformers", "fabric")
#: the sources of the quantizer table and of the loop (litgpt's pins at the commit that
#: produced its config hub's figures: pyproject.toml lightning==2.3.0.dev20240328,
#: bitsandbytes==0.42.0)
FABRIC = ("Lightning-AI/pytorch-lightning@527d071 (2024-03-04: the file as it stood for "
          "litgpt's pins b19c3a96 and 2.3.0.dev20240328) src/lightning/fabric/plugins/"
          "precision/bitsandbytes.py: module_init_context replaces torch.nn.Linear with the "
          "bnb class (_ClassReplacementContextManager), ignore_modules empty by default; "
          "_Linear4bit.quantize: w = weight.contiguous().to(device=device, dtype=torch.half)")
BNB_042 = ("bitsandbytes 0.41.0 and 0.42.0 autograd/_functions.py MatMul4Bit.forward: "
           "F.dequantize_4bit(B, quant_state).to(A.dtype) (dequantize_4bit allocates "
           "quant_state.dtype, functional.py); ctx.tensors = (A, B)")
LITGPT_LOOP = ("Lightning-AI/litgpt@43c4432 (2024-04-24, the config hub table's figures) "
               "litgpt/finetune/lora.py fit(): logits = model(input_ids, lm_head_chunk_size=128)"
               "; loss = chunked_cross_entropy(...); fabric.backward(loss / ...), the names "
               "kept to the next iteration; GPT(config) under fabric.init_module with the "
               "BitsandbytesPrecision plugin (litgpt/lora.py: lm_head = LoRALinear, an "
               "nn.Linear inside)")

# --- bitsandbytes storage --------------------------------------------------------------------
def quantized_weight_bytes(d_out: int, d_in: int, fmt: str, block: int = 64,
                           double_quant: bool = True) -> int:
    """Bytes of one d_out x d_in weight as bitsandbytes keeps it on the device (0.50); checked
    against real ``Params4bit`` / ``Int8Params`` tensors in tests/conformance/test_finetune.py:

        fmt        | tensors                                | bytes
        -----------|----------------------------------------|---------------------------------
        nf4 / fp4  | formats.bnb_4bit_tensors (codes,       | their sum (the one layout that
                   |  absmax, nested constants, code book)  |  checkpoints read too)
        int8       | int8 weights + fp32 row scales         | n + 4 d_out (LLM.int8,
                   |                                        |  arXiv:2208.07339)
    """
    from .formats import bnb_4bit_tensors, tensor_bytes
    if fmt == "int8":
        return d_out * d_in + 4 * d_out
    return sum(tensor_bytes(dtype, shape)
               for _, dtype, shape in bnb_4bit_tensors(d_out * d_in, block, double_quant))


def bnb_format(quant: str, block: int = 64, double_quant: bool = True) -> Format:
    """The ``Op.weight_format`` of a bitsandbytes base weight (QLoRA): kind ``bnb-<quant>``
    (nf4, fp4, int8: the device layout of ``quantized_weight_bytes``), ``group`` elements per
    absmax block; named ``nf4/64/dq`` as ``Finetune.describe`` shows it."""
    from .formats import Format
    return Format(f"{quant}/{block}/{'dq' if double_quant else 'nodq'}", f"bnb-{quant}",
                  8 if quant == "int8" else 4, group=block, double_quant=double_quant)


def _matrix_bytes(op: Op) -> int:
    """One instance's quantised weight matrix as bitsandbytes keeps it (``bnb_format``)."""
    fmt = op.weight_format
    return quantized_weight_bytes(op.d_out, op.d_in, fmt.kind.removeprefix("bnb-"), fmt.group,
                                  fmt.double_quant)


def op_weight_bytes(op: Op, weight_bytes: int) -> int:
    """Weight bytes of one op (all instances): quantised matrices by ``quantized_weight_bytes``
    (a bias stays in the policy dtype), a recipe's fp32 upcast (``Op.upcast``) 4 bytes per
    parameter, everything else ``weight_bytes`` per parameter."""
    if op.upcast:  # a recipe's fp32 copies (engine.recipes): the parameters, a quantised op's bias
        weight_bytes = 4
    if op.weight_format is None or op.tied:
        return op.params_total * weight_bytes
    return (_matrix_bytes(op) + (op.d_out * weight_bytes if op.bias else 0)) * op.instances


# --- the method -------------------------------------------------------------------------------
@dataclass(frozen=True)
class Finetune:
    """How a model is fine-tuned (the table above). ``targets``: all-linear (every adaptable
    Linear but lm_head, as PEFT's "all-linear"), attn, mlp, or module names
    ("q_proj,v_proj"); ``trainable`` (freeze): comma-separated last:N, head, norms,
    embeddings; ``base_format`` (qlora): nf4, fp4 or int8 with ``block`` and
    ``double_quant`` (4-bit formats)."""

    mode: str = "full"
    rank: int = 16
    alpha: float = 16.0
    targets: str = "all-linear"
    trainable: str = "head"
    base_format: str = "nf4"
    block: int = 64
    double_quant: bool = True
    lora_dropout: float = 0.0
    #: qlora: the recipe keeps the frozen parameters that are not quantised in fp32
    #: (engine.recipes; PEFT's prepare_model_for_kbit_training), and so the residual stream
    upcast: bool = False
    #: qlora: bitsandbytes before 0.43.2 keeps each quantised Linear's input for backward,
    #: which its backward never reads (``MatMul4Bit.forward``: ``ctx.tensors = (A, B)`` when
    #: an input needs a gradient; bitsandbytes-foundation/bitsandbytes PR #1270, merged
    #: 2024-07-16, released in 0.43.2: ``ctx.tensors = (None, B)``): the frozen base saves what
    #: a trained Linear saves (its input, once per input shared by q/k/v and gate/up)
    bnb_saves_input: bool = False
    #: qlora: who quantises the base (``QUANTIZERS``, the module doc's table)
    quantizer: str = "transformers"
    #: the training loop keeps the previous micro-batch's logits and loss bound through the
    #: next forward (litgpt, ``LITGPT_LOOP``; the module doc)
    keeps_previous: bool = False
    #: the recipe runs an MLP kernel that writes the activation's input gradients into the
    #: buffers it saved (Unsloth's LoRA_MLP, engine.recipes) wherever it patches the MLP (a
    #: gated one with LoRA on gate, up and down, no bias, LoRA dropout or DoRA): no MLP
    #: backward transient there (saved.mlp_backward_transient)
    mlp_inplace: bool = False

    def __post_init__(self) -> None:
        from ..inputs import choice, integer, number
        choice("--finetune", self.mode, FINETUNE_MODES)
        integer("--lora-rank", self.rank, 1, 2**20)
        number("--lora-alpha", self.alpha, 0, 1e6)
        number("--lora-dropout", self.lora_dropout, 0, 1, lo_open=False, hi_open=True)
        choice("--base-format", self.base_format, BASE_FORMATS)
        choice("quantizer", self.quantizer, QUANTIZERS)
        integer("--quant-block", self.block, 16, 4096)
        if not isinstance(self.targets, str) or not self.targets.strip():
            raise WorkloadError(f"--lora-targets ({self.targets!r:.60}) must name modules")

    @property
    def adapters(self) -> bool:
        return self.mode in ("lora", "qlora", "dora")

    @property
    def base(self) -> Format | None:
        """The frozen base linears' ``Op.weight_format`` (``bnb_format``; None: the precision
        policy's dtype)."""
        if self.mode != "qlora":
            return None
        return bnb_format(self.base_format, self.block, self.double_quant)

    @property
    def quantize_head(self) -> bool:
        """The output layer is quantised too (Fabric's plugin: every nn.Linear)."""
        return self.mode == "qlora" and self.quantizer == "fabric"

    def cast_from_bytes(self, precision: str) -> int:
        """Bytes an element of the copy a dequantised weight is made in before its cast to
        the compute dtype, alive beside it during the cast (0: dequantised in the compute dtype
        itself): Fabric quantises from fp16, so under bf16 the fp16 copy (2)."""
        fabric = self.mode == "qlora" and self.quantizer == "fabric"
        return 2 if fabric and not precision.startswith("fp16") else 0

    def describe(self) -> str:
        if self.mode == "full":
            return "full fine-tuning"
        if self.mode == "freeze":
            return f"frozen except {self.trainable}"
        base = f", base {self.base.name}" if self.mode == "qlora" else ""
        if self.mode == "qlora" and self.upcast:
            base += ", unquantised parameters in fp32"
        if self.quantize_head:
            base += ", quantised by Fabric (head too, from fp16)"
        drop = f", dropout {self.lora_dropout:g}" if self.lora_dropout else ""
        return f"{self.mode} r={self.rank} alpha={self.alpha:g} on {self.targets}{base}{drop}"


def finetune_from_options(mode: str, rank: int = 16, alpha: float | None = None,
                          targets: str = "all-linear", dropout: float = 0.0,
                          trainable: str = "head", base: str = "nf4") -> Finetune | None:
    """The Finetune that the command-line options describe (None for full training); alpha
    defaults to the rank (scaling 1)."""
    from ..inputs import choice
    if choice("--finetune", mode, FINETUNE_MODES) == "full":
        return None
    return Finetune(mode, rank=rank, alpha=float(rank if alpha is None else alpha),
                    targets=targets, trainable=trainable, base_format=base,
                    lora_dropout=dropout)


def check_precision(ft: Finetune | None, precision: str) -> None:
    """QLoRA computes in 16 bits: its unquantised modules and adapters are bf16/fp16."""
    if ft is not None and ft.mode == "qlora" and precision == "fp32":
        raise WorkloadError("--finetune qlora needs a 16-bit precision (bf16-mixed, fp16-mixed, "
                            "bf16): QLoRA keeps its unquantised modules and computes in 16 bits, "
                            "not fp32")


def _name(op: Op) -> str:
    return op.component.rpartition(".")[2]


def _adaptable(op: Op) -> bool:
    return op.kind == "linear" and op.instances == 1 and not op.tied and op.params > 0 \
        and _name(op) in ADAPTABLE


def _in_group(op: Op, group: str) -> bool:
    first = op.component.partition(".")[0]
    if group == "all-linear":
        return _name(op) != "lm_head"
    if group == "attn":
        return first in ("attn", "cross_attn")
    return first == "mlp" or op.component.startswith("moe.shared.")


def select_targets(cfg: ModelConfig, ops, targets: str) -> set[str]:
    """Paths of the ops that take an adapter; unknown names are refused, naming what exists."""
    wanted = [t.strip() for t in targets.split(",") if t.strip()]
    candidates = [op for op in ops if _adaptable(op)]
    present = sorted({_name(op) for op in candidates}, key=ADAPTABLE.index)
    chosen: set[str] = set()
    for t in wanted:
        if t in TARGET_GROUPS:
            hits = {op.path for op in candidates if _in_group(op, t)}
        elif t in present:
            hits = {op.path for op in candidates if _name(op) == t}
        else:
            raise WorkloadError(f"--lora-targets: unknown target module {t!r:.60} for "
                                f"{cfg.name}; choose {', '.join(TARGET_GROUPS)} or module names "
                                f"among {', '.join(present)}")
        if not hits:
            raise WorkloadError(f"--lora-targets {t!r}: {cfg.name} has no such module")
        chosen |= hits
    return chosen


def _trainable_paths(cfg: ModelConfig, ops, spec: str) -> set[str]:
    """Paths of the ops that train under freeze: last:N blocks (of the last stack), the head
    (proj_out, lm_head, pooler; a tied head trains the embedding table it shares), norms,
    embeddings (tables and embed.proj_in)."""
    out: set[str] = set()
    stack, depth = cfg.stacks[-1]
    for part in (p.strip() for p in spec.split(",") if p.strip()):
        if part.startswith("last:"):
            from ..inputs import integer
            try:
                n = int(part[5:])
            except ValueError:
                raise WorkloadError(f"--trainable {part!r:.60}: write last:N with N a whole "
                                    "number of blocks") from None
            n = integer("--trainable last:N", n, 1, depth)
            out |= {op.path for op in ops if op.stack == stack and op.layer >= depth - n}
        elif part == "head":
            out |= {op.path for op in ops if op.placement == "post" and op.kind == "linear"}
            if cfg.tie_embeddings and cfg.head == "lm":
                out.add("embed.tokens")
        elif part == "norms":
            out |= {op.path for op in ops if op.kind == "norm"}
        elif part == "embeddings":
            out |= {op.path for op in ops if op.kind == "embedding" or
                    op.path == "embed.proj_in"}
        else:
            raise WorkloadError(f"--trainable: unknown part {part!r:.60}; choose last:N, "
                                f"{', '.join(TRAINABLE_PARTS)} (comma-separated)")
    if cfg.tie_embeddings and "embed.tokens" in out and cfg.head == "lm":
        out.add("lm_head")
    return out


def _frozen(cfg: ModelConfig, op: Op, fmt: Format | None, keeps_input: bool = False,
            head: bool = False) -> Op:
    """The op with frozen parameters: what only its weight gradient needed is not saved (but
    a quantised Linear of bitsandbytes < 0.43.2 keeps its input: ``keeps_input``,
    ``Finetune.bnb_saves_input``)."""
    saved = op.saved
    # transformers replaces every nn.Linear but the output layer (llm_int8_skip_modules),
    # Fabric every one (``head``: Finetune.quantize_head)
    quantize = fmt is not None and op.kind == "linear" and not op.tied and op.params and \
        (head or _name(op) != "lm_head")
    if quantize and keeps_input:
        pass  # MatMul4Bit's ctx.tensors holds the input a trained Linear saves
    elif op.kind == "linear" and saved[:1] == ((op.d_in * op.active, "a"),):
        # a ReLU saves its output, which is down_proj's input: it stays (unless a dropout
        # sits between them, whose ``extra`` keeps the ReLU output)
        relu_input = cfg.activation == "relu" and _name(op) == "down_proj" and not \
            (cfg.mlp_dropout and op.instances == 1)
        if not relu_input:
            # o_proj's input is the attention output, which flash attention saves anyway
            attn_out = _name(op) == "o_proj" and op.component.partition(".")[0] in (
                "attn", "cross_attn")
            saved = (((op.d_in * op.active, "attn_out"),) if attn_out else ()) + saved[1:]
    elif op.kind == "norm" and op.params and saved and saved[-1][1] == "a":
        saved = saved[:-1]  # RMSNorm: the normalised input, for the scale's gradient
    elif op.kind in ("embedding", "token_ids"):
        saved = tuple(s for s in saved if s[1] != "i64")
    return dataclasses.replace(op, trainable=False, saved=saved,
                               weight_format=fmt if quantize else None)


def _input_key(cfg: ModelConfig, op: Op) -> tuple:
    """Which tensor a Linear reads, so adapters on the same input save it once: the attention
    input (q, k, v; MLA's q_a/q/kv_a), the MLP input (gate, up; router and shared MLP; with a
    one-norm parallel block the attention input), the encoder output (cross k, v: one tensor
    for every decoder block), or the op's own input."""
    name, first = _name(op), op.component.partition(".")[0]
    if first == "cross_attn" and name in ("k_proj", "v_proj"):
        return ("enc_out",)
    where = (op.stack, op.layer)
    if first in ("attn", "cross_attn") and name in ("q_proj", "k_proj", "v_proj", "q_a_proj",
                                                    "kv_a_proj"):
        return where + (first,)
    if (first == "mlp" and name in ("gate_proj", "up_proj")) or \
            op.component.startswith("moe.shared.") and name in ("gate_proj", "up_proj"):
        one_norm = cfg.parallel_block and cfg.parallel_norms == 1
        return where + ("attn" if one_norm else "mlp",)
    return (op.path,)


def _adapters(op: Op, ft: Finetune, shared: bool) -> list[Op]:
    """lora_dropout (p > 0), lora_A, lora_B (and DoRA's ops) under the target's path."""
    where, r, p, c = (op.stack, op.layer), ft.rank, op.path, op.component
    tp_a, tp_b = ("rowwise", "replicate") if op.tp == "rowwise" else ("replicate", op.tp)
    out = []
    if ft.lora_dropout:
        out.append(elementwise(f"{p}.lora_dropout", where, f"{c}.lora_dropout", "lora_dropout",
                               ((op.d_in, "mask"),), stream=op.stream))
    a = linear(f"{p}.lora_A", where, f"{c}.lora_A", op.d_in, r, False, stream=op.stream,
               shares_input=shared and not ft.lora_dropout, tp=tp_a)
    b = linear(f"{p}.lora_B", where, f"{c}.lora_B", r, op.d_out, False, stream=op.stream,
               tp=tp_b)
    out += [a, b]
    if ft.mode == "dora":
        # magnitude vector (trainable, d_out); per token W x and B A x for its gradient; per op
        # the detached row norm, m and m - 1; the merged product B A, forward only
        out.append(dataclasses.replace(
            elementwise(f"{p}.dora", where, f"{c}.dora", "dora",
                        ((op.d_out, "a"), (op.d_out, "a")), stream=op.stream),
            params=op.d_out, d_in=op.d_out, d_out=op.d_out))
        out.append(Op(f"{p}.dora_norm", "weight_product", op.stack, op.layer,
                      f"{c}.dora_norm", d_in=op.d_in, d_out=op.d_out, rank=r, stream="one",
                      saved=((3 * op.d_out, "a"),), recompute=op.recompute, trainable=False,
                      placement=op.placement))
    # on the target's side of the blocks (an lm_head adapter on the last pipeline stage)
    return [dataclasses.replace(o, placement=op.placement) for o in out]


def _has_weights(op: Op) -> bool:
    """Whether the op uses parameters (its own, or tied ones: the tied head, the encoder's
    lookups in the shared token table)."""
    return bool(op.params) or op.kind in ("token_ids", "linear")


def apply_finetune(cfg: ModelConfig, ops, ft: Finetune | None) -> tuple[Op, ...]:
    """The ops of ``cfg`` fine-tuned by ``ft`` (None or full: unchanged). Refuses a rank above
    a target's narrower side and unknown targets, naming them."""
    ops = tuple(ops)
    if ft is None or ft.mode == "full":
        return ops
    if ft.mode == "freeze":
        keep = _trainable_paths(cfg, ops, ft.trainable)
        return _bias_checkpoints(tuple(op if op.path in keep or not _has_weights(op)
                                       else _frozen(cfg, op, None) for op in ops))
    targets = select_targets(cfg, ops, ft.targets)
    for op in ops:
        if op.path in targets and ft.rank > min(op.d_in, op.d_out):
            raise WorkloadError(f"--lora-rank ({ft.rank}) exceeds the width of {op.path} "
                                f"({op.d_in} -> {op.d_out}): a rank-{ft.rank} update of it is "
                                f"no longer low-rank")
    out: list[Op] = []
    seen: set[tuple] = set()
    fmt = ft.base
    for op in ops:
        out.append(_frozen(cfg, op, fmt, ft.mode == "qlora" and ft.bnb_saves_input,
                           ft.quantize_head) if _has_weights(op) else op)
        if op.path in targets:
            key = _input_key(cfg, op)
            # the input is saved already: by an adapter on the same input, or still by the
            # frozen op itself (a ReLU's output, down_proj's input)
            kept = out[-1].saved[:1] == ((op.d_in * op.active, "a"),)
            if out[-1].saved[:1] == ((op.d_in * op.active, "attn_out"),) and \
                    not ft.lora_dropout:  # the adapter saves the attention output itself
                out[-1] = dataclasses.replace(out[-1], saved=out[-1].saved[1:])
            out.extend(_adapters(op, ft, key in seen or kept))
            seen.add(key)
    if ft.mode == "qlora" and ft.upcast:
        out = _upcast(out)
    return _bias_checkpoints(tuple(out))


def _upcast(ops: list[Op]) -> list[Op]:
    """QLoRA under a recipe that upcasts (engine.recipes): every frozen parameter that is not
    quantised in fp32 (PEFT's prepare_model_for_kbit_training casts each float16/bfloat16
    parameter but Params4bit), and the embedding's fp32 output makes the residual stream, so
    each block input a checkpoint keeps, fp32. Under autocast (the Trainer's bf16 / fp16) an
    upcast Linear that is not quantised (the lm_head, which bitsandbytes skips) computes in 16
    bits: autocast casts its fp32 weight for each call (its cast cache holds only leaves that
    require grad: a frozen weight is cast anew) and the matmul saves that 16-bit copy for the
    input gradient, d_in x d_out in the activation dtype once per forward (``saved_once``)."""
    table = any(op.kind == "embedding" and op.params and not op.trainable for op in ops)
    out = []
    for op in ops:
        if op.params and not op.trainable and not op.tied and (op.weight_format is None
                                                               or op.bias):
            op = dataclasses.replace(op, upcast=True)
            if op.kind == "linear" and op.weight_format is None and op.input_grad:
                op = dataclasses.replace(op, saved_once=op.saved_once + (
                    (op.d_in * op.d_out * op.instances, "a"),))
        elif table and op.tied and op.kind == "linear" and op.input_grad:
            # a tied head reads the upcast fp32 table: the same 16-bit copy
            op = dataclasses.replace(op, saved_once=op.saved_once + (
                (op.d_in * op.d_out * op.instances, "a"),))
        elif table and op.kind == "checkpoint" and op.component == "checkpoint.input":
            op = dataclasses.replace(op, saved=tuple((n, "f32") if t == "a" else (n, t)
                                                     for n, t in op.saved))
        out.append(op)
    return out


@functools.lru_cache(maxsize=64)
def finetuned_ops(cfg: ModelConfig, ft: Finetune | None) -> tuple[Op, ...]:
    """``apply_finetune`` of the config's own ops, built once per (config, method): configs,
    methods and ops are frozen, and a search (fit's bisection over lengths, the planner's
    layouts) asks for the same ops at every probe. Refusals are raised, not cached."""
    from .components import model_ops_tuple
    return apply_finetune(cfg, model_ops_tuple(cfg), ft)


def _bias_checkpoints(ops: tuple[Op, ...]) -> tuple[Op, ...]:
    """T5's position bias is a checkpoint input only while it needs a gradient: with frozen
    bias tables recompute re-forms it from the context instead (reference/model.py), and only
    a fused kernel that takes it as its mask keeps it."""
    if any(op.component == "rel_bias" and op.trainable for op in ops):
        return ops
    return tuple(dataclasses.replace(op, kept=tuple(k for k in op.kept if k == "fused"))
                 if op.component == "checkpoint.position_bias" else op for op in ops)


def dequant_bytes_moved(ops, act_bytes: int, recompute: str = "none") -> int:
    """Memory traffic of dequantising the quantised weights in one step (elementwise work, no
    matmul FLOPs): each read in its storage format and written in 16 bits, in forward, again
    in backward (the input gradient) and once more when recompute re-runs the op."""
    out = 0
    for op in ops:
        if op.weight_format is not None and op.kind == "linear":
            per = _matrix_bytes(op) + op.d_out * op.d_in * act_bytes
            out += per * op.instances * (3 if op.reruns(recompute) else 2)
    return out



# --- what a training loop keeps of the previous micro-batch (the module doc) ------------------
def bnb_ctx_input_bytes(cfg: ModelConfig, ops, work, act_bytes: int) -> int:
    """The inputs bitsandbytes < 0.43.2's MatMul4Bit holds on its autograd context
    (``BNB_042``: ``ctx.tensors = (A, B)``, which backward does not free): one per distinct
    input of the quantised Linears (q, k and v share theirs, gate and up theirs:
    ``_input_key``), rows x d_in in the activation dtype. Alive as long as the graph is."""
    seen: set[tuple] = set()
    out = 0
    for op in ops:
        if op.kind == "linear" and op.weight_format is not None:
            key = _input_key(cfg, op)
            if key not in seen:
                seen.add(key)
                out += work.rows(op.stream) * op.d_in * op.active * act_bytes
    return out


def _vocab_head(cfg: ModelConfig, ops, work) -> Op | None:
    """The lm_head op when it computes T x V logits (not under the fused linear loss)."""
    from ..model.checks import VOCAB_HEADS
    if cfg.head not in VOCAB_HEADS or work.loss == "fused-linear":
        return None
    return next((op for op in ops if op.path == "lm_head"), None)


def previous_step_bytes(cfg: ModelConfig, ops, work, act_bytes: int,
                        ft: Finetune | None) -> tuple[int, int]:
    """(graph, logits): what a loop that keeps the previous micro-batch's names
    (``Finetune.keeps_previous``) holds of it in the next step: its graph's context-held
    inputs (bitsandbytes < 0.43.2, ``bnb_ctx_input_bytes``) until the next loss is computed,
    and its logits (T x V, the activation dtype) until the next forward returns."""
    if ft is None or not ft.keeps_previous:
        return 0, 0
    graph = bnb_ctx_input_bytes(cfg, ops, work, act_bytes) if ft.bnb_saves_input else 0
    head = _vocab_head(cfg, ops, work)
    return graph, (work.rows("seq") * cfg.vocab_size * act_bytes if head is not None else 0)


def head_forward_peak(cfg: ModelConfig, ops, work, act_bytes: int, cast_from: int) -> int:
    """Bytes above the saved activations as the head computes its last piece of logits
    (litgpt's head runs in pieces, ``Workload.loss`` chunked:N's): the earlier pieces' logits,
    then the last piece's output beside the head's weight when it is quantised and
    dequantised for the matmul (``cast_from``: the copy it is cast from, alive during the
    cast, ``Finetune.cast_from_bytes``). The loss's own peak (``memory.loss_temp``) holds
    every piece and comes after: this one is larger only with a quantised head or a
    previous step's logits beside it, where ``memory.TrainingMemory.phases`` asks for it.
    The pieces' logits are taken as not saved (an eager chunked or full loss saves its fp32
    copy, not them; a compiled one saves them: counted as activations)."""
    from .lm_loss import chunk_runs
    head = _vocab_head(cfg, ops, work)
    if head is None:
        return 0
    t, v = work.rows("seq"), cfg.vocab_size
    last = chunk_runs(work)[-1][1] if work.loss.startswith("chunked") else t
    # a compiled loss saves its pieces' logits: activations already, not counted here
    a = 0 if "loss" in work.fused else act_bytes
    if head.weight_format is None:
        return t * v * a
    w = head.d_in * head.d_out
    return (t - last) * v * a + w * act_bytes + max(w * cast_from, last * v * a)
