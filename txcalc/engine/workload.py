"""Workload: what the model is asked to do (batch, sequence lengths, kernels, recompute).

Kept apart from ModelConfig: the same model is costed under many workloads.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from ..errors import WorkloadError

class AttnKernel(StrEnum):
    """Attention implementation: eager (S x S materialised), sdpa (the math path), flash
    (fused: no S x S stored). Flash is every command's default (what training and serving
    run)."""
    EAGER = "eager"
    SDPA = "sdpa"
    FLASH = "flash"


class Recompute(StrEnum):
    """Activation recomputation of a block: none; selective (Megatron's: the attention core
    is checkpointed, Korthikanti et al. arXiv:2205.05198; under a fused kernel it keeps the
    same as none but the logsumexp); full (each block keeps only its input); op (torchtitan's
    op-level selective checkpointing: the block is checkpointed and keeps its input, the
    output of every other matmul and the fused attention kernel's outputs,
    ``ops.op_level_saved``)."""
    NONE = "none"
    SELECTIVE = "selective"
    FULL = "full"
    OP = "op"


class RecomputeMethod(StrEnum):
    """Which blocks ``Workload.recompute`` applies to, with ``recompute_layers`` = N (0: all):

        method  | blocks recomputed                       | source
        --------|-----------------------------------------|-----------------------------------
        block   | the first N blocks of each pipeline      | Megatron-LM --recompute-method
                |   stage (one device: of each stack); the |   block --recompute-num-layers N
                |   rest keep everything (none)            |
        uniform | every block, N consecutive blocks one    | --recompute-method uniform
                |   checkpoint: only each group's input is |   --recompute-num-layers N
                |   kept (full recompute only)             |
        every   | every N-th block (blocks N-1, 2N-1, ...),| torchtitan activation_checkpoint
                |   the rest none                          |   selective_ac_option = "N"
    """
    BLOCK = "block"
    UNIFORM = "uniform"
    EVERY = "every"


#: kernels a framework may fuse (txcalc.engine.stacks): what each changes is declared per op
#: (``Op.saved_fused``): norm (RMSNorm keeping its input and 1/rms), act (the gated MLP's
#: act(gate) * up keeping gate and up only), loss (cross-entropy keeping the logits in the
#: activation dtype and two fp32 statistics per row, not fp32 log-probabilities); layers (each
#: block compiled whole, torchtune's compile_model: the norms and gated products inside the
#: blocks as norm and act, the final norm eager; ops.LAYER_FUSED)
FUSED_KERNELS = ("norm", "act", "loss", "layers")

#: tensors a framework's own code keeps for backward beyond the ops' (``Stack.keeps`` ->
#: ``Workload.keeps``; counted by the engine's ``saved.saved_rows``, so ``memory``, ``plan
#: train`` and the training validation agree; sp_gathered_input is a TP split, applied in
#: ``train.setting.group_activations``), each traced to its source:
#:
#:     item              | kept, a token                          | nanotron 9b0de5be
#:     ------------------|----------------------------------------|---------------------------------
#:     sp_gathered_input | a column-parallel linear's input whole | tensor_parallel/functional.py
#:                       |   under SP (all-gathered, then saved by |   column_linear, lines 354-359:
#:                       |   F.linear), not its T x D / t shard   |   REDUCE_SCATTER all-gathers
#:     qkv_copy          | multi-head attention (K = H): the k and | models/llama.py 384-387: q, k, v
#:                       |   v thirds of the permuted qkv copy,   |   of one permute().contiguous();
#:                       |   alive through q, which flash saves   |   k, v copied again (561-563)
#:     o_proj_copy       | o_proj's input reshaped from the        | models/llama.py 593-596:
#:                       |   transposed flash output: a copy      |   .view().transpose(0, 1)
#:
#: measured on CPU with saved_tensors_hooks (tests/published/test_training_validation.py:
#: test_nanotron_attention_keeps_the_qkv_buffer_and_an_o_proj_copy,
#: test_gathered_column_linear_saves_the_whole_input)
KEEPS = ("sp_gathered_input", "qkv_copy", "o_proj_copy")

#: how the LM loss meets the vocabulary (``Workload.loss``; reference/loss.py runs each):
#: full (the T x V logits at once: HF, or the fused "loss" kernel), chunked:N (torchtune's
#: CEWithChunkedOutputLoss: the output projection and the fp32 upcast one of N sequence chunks
#: at a time; N = 8, its default, when omitted), fused-linear (Liger's fused linear
#: cross-entropy: logits and their gradient one row chunk at a time, inside the forward)
LOSS_IMPLS = ("full", "chunked", "fused-linear")
#: the kernels that may run the full loss, named after the function each stack calls (a
#: stack's ``Stack.loss_kernel`` -> ``Workload.loss_kernel``): hf (F.cross_entropy on
#: logits.float()), vocab_parallel (Megatron-Core's), sharded (nanotron's); the fused "loss"
#: kernel is torch.compile of hf's. Their transients: lm_loss.full_loss_extra
LOSS_KERNELS = ("hf", "vocab_parallel", "sharded")


def loss_chunks(loss: str) -> int:
    """Chunks of a ``Workload.loss`` ("chunked:N" -> N, "chunked" -> 8); 1 for the others.
    Refuses anything else, naming it."""
    from ..inputs import show
    if isinstance(loss, str) and loss in ("full", "fused-linear"):
        return 1
    if isinstance(loss, str) and loss.partition(":")[0] == "chunked":
        n = loss.partition(":")[2] or "8"
        if n.isdigit() and 1 <= int(n) <= 1 << 20:
            return int(n)
    raise WorkloadError(f"loss ({show(loss)}) must be full, chunked[:N] (N a whole number of "
                        f"chunks, 1 to {1 << 20:,}) or fused-linear")
RECOMPUTE_METHODS = tuple(m.value for m in RecomputeMethod)


DEFAULT_ATTN = AttnKernel.FLASH.value
ATTN_IMPLS = tuple(k.value for k in AttnKernel)
RECOMPUTE = tuple(r.value for r in Recompute)
DROPOUT_MASKS = ("bool", "act")


def global_rows(stream: str) -> bool:
    """Whether ``stream`` is Longformer's tokens with global attention ("global",
    "global_cls"), not every token behind them ("global_seq", "global_seq_cls")."""
    return stream.startswith("global") and not stream.startswith("global_seq")


#: the stream of an op that does not run in this step (components.text_only: Mllama's
#: cross-attention blocks without images): no rows, so no FLOPs, saved bytes or time
SKIPPED = "skipped"


@dataclass(frozen=True)
class Workload:
    """One training micro-batch (or one inference pass).

    ``seq`` is the decoder (or only) stack's length; ``src_seq`` the encoder's for
    encoder-decoder models (0 = same as ``seq``).

    ``attn_impl``: eager (scores materialised; what HF eager runs), sdpa (on the meta device
    SDPA runs its math path: same FLOPs as eager), flash (fused kernel: no s x s stored; torch's
    FlopCounterMode counts its backward as 2.5x forward because the scores are recomputed).
    """

    batch: int = 1
    seq: int = 2048
    src_seq: int = 0
    attn_impl: str = "eager"
    recompute: str = "none"
    softmax_fp32: bool = True  #: eager softmax upcasts scores to fp32 (HF Llama; not GPT-2)
    #: train with the model's dropout on (its probabilities are in ModelConfig): masks are saved
    dropout: bool = False
    #: a dropout mask's element: "bool" (1 byte, CUDA kernels) or "act" (the activation dtype,
    #: as torch's CPU and meta kernels store it)
    dropout_mask: str = "bool"
    #: q, k and v come out of one fused projection (HF GPT-2's c_attn): under a fused
    #: attention kernel the saved q is a view that keeps the whole (H + 2K) * h output alive
    fused_qkv: bool = False
    #: kernels run fused (FUSED_KERNELS; a framework profile's, txcalc.engine.stacks)
    fused: tuple[str, ...] = ()
    #: tensors a framework's own code keeps for backward beyond the ops' (KEEPS; a
    #: profile's): counted in saved.saved_rows, split over TP in train.evaluate
    keeps: tuple[str, ...] = ()
    #: which blocks ``recompute`` applies to (RecomputeMethod) and N (0: every block)
    recompute_method: str = "block"
    recompute_layers: int = 0
    #: the LM loss: full | chunked[:N] | fused-linear (LOSS_IMPLS)
    loss: str = "full"
    #: the kernel running the full loss (lm_loss.LOSS_KERNELS: hf, vocab_parallel, sharded; a
    #: stack's); the fused "loss" kernel is torch.compile of hf's (lm_loss.loss_kernel)
    loss_kernel: str = "hf"
    #: Longformer: tokens per sequence with global attention (HF ``global_attention_mask``;
    #: the sequence classifier gives the first token global attention when none is given, so
    #: its ops read at least 1: ``global_count``)
    global_tokens: int = 0
    #: the batch holds no vision states (no images): Mllama's gated cross-attention blocks do
    #: not run (components.step_ops), as HF's MllamaTextModel skips them given no
    #: cross_attention_states; no effect on models without them. Set where a command's batch
    #: is text: flops and memory given neither --images nor --src-seq (answers.common.workload),
    #: plan train and fit (they take no images)
    text_only: bool = False

    def __post_init__(self) -> None:
        from ..inputs import MAX_BATCH, MAX_SEQ, show
        problems = []
        for name, lo, hi in (("batch", 1, MAX_BATCH), ("seq", 1, MAX_SEQ),
                             ("src_seq", 0, MAX_SEQ), ("global_tokens", 0, MAX_SEQ)):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int) or not lo <= v <= hi:
                problems.append(f"{name} ({show(v)}) must be an integer between {lo} and {hi:,}")
        for name in ("softmax_fp32", "dropout", "fused_qkv", "text_only"):
            if not isinstance(getattr(self, name), bool):
                problems.append(f"{name} ({show(getattr(self, name))}) must be True or False")
        if self.attn_impl not in ATTN_IMPLS:
            problems.append(f"attn_impl ({show(self.attn_impl)}) must be one of "
                            f"{', '.join(ATTN_IMPLS)}")
        if self.dropout_mask not in DROPOUT_MASKS:
            problems.append(f"dropout_mask ({show(self.dropout_mask)}) must be one of "
                            f"{', '.join(DROPOUT_MASKS)}")
        if self.recompute not in RECOMPUTE:
            problems.append(f"recompute ({show(self.recompute)}) must be one of "
                            f"{', '.join(RECOMPUTE)}")
        if not isinstance(self.fused, tuple) or any(k not in FUSED_KERNELS for k in self.fused):
            problems.append(f"fused ({show(self.fused)}) must be a tuple of "
                            f"{', '.join(FUSED_KERNELS)}")
        if not isinstance(self.keeps, tuple) or any(k not in KEEPS for k in self.keeps):
            problems.append(f"keeps ({show(self.keeps)}) must be a tuple of {', '.join(KEEPS)}")
        if self.recompute_method not in RECOMPUTE_METHODS:
            problems.append(f"recompute_method ({show(self.recompute_method)}) must be one of "
                            f"{', '.join(RECOMPUTE_METHODS)}")
        n = self.recompute_layers
        if isinstance(n, bool) or not isinstance(n, int) or not 0 <= n <= MAX_BATCH:
            problems.append(f"recompute_layers ({show(n)}) must be an integer between 0 and "
                            f"{MAX_BATCH:,}")
        elif self.recompute_method == "uniform" and n and self.recompute != "full":
            problems.append(f"recompute_method 'uniform' checkpoints groups of whole blocks: "
                            f"it needs recompute 'full', not {self.recompute!r}")
        if not problems and self.global_tokens > self.seq:
            problems.append(f"global_tokens ({self.global_tokens}) cannot exceed seq "
                            f"({self.seq}): they are tokens of the sequence")
        try:
            loss_chunks(self.loss)
        except WorkloadError as e:
            problems.append(str(e))
        if self.loss_kernel not in LOSS_KERNELS:
            problems.append(f"loss_kernel ({show(self.loss_kernel)}) must be one of "
                            f"{', '.join(LOSS_KERNELS)}")
        elif self.loss_kernel != "hf" and isinstance(self.fused, tuple) and "loss" in self.fused:
            problems.append(f"fused 'loss' compiles hf's cross-entropy; loss_kernel "
                            f"{self.loss_kernel!r} is another kernel")
        if problems:
            raise WorkloadError("; ".join(problems))
        if self.src_seq == 0:
            object.__setattr__(self, "src_seq", self.seq)

    def block_mode(self, layer: int) -> str:
        """The recompute mode of block ``layer`` (RecomputeMethod); outside the blocks
        (layer -1) the mode asked."""
        n, method = self.recompute_layers, self.recompute_method
        if layer < 0 or not n or method == "uniform":
            return self.recompute
        if method == "block":
            return self.recompute if layer < n else "none"
        return self.recompute if (layer + 1) % n == 0 else "none"

    def keeps_block_input(self, layer: int) -> bool:
        """Uniform method: only the first block of each group of N keeps its input."""
        n = self.recompute_layers
        return not (n and self.recompute_method == "uniform") or layer % n == 0

    def global_count(self, stream: str) -> int:
        """Longformer's tokens with global attention per sequence for an op of ``stream``
        ("global..." streams; ``_cls``: the sequence classifier's, at least the first token,
        which HF ``LongformerForSequenceClassification`` makes global when no
        global_attention_mask is given)."""
        return max(self.global_tokens, 1) if stream.endswith("_cls") else self.global_tokens

    def rows(self, stream: str, pad_to: int = 0) -> int:
        """Rows (tokens) an op processes: ``seq`` tokens, ``src`` tokens, or one per sequence.
        ``pad_to``: the sequence is padded to a multiple of it first (Longformer pads its
        input to a multiple of attention_window, ``length``)."""
        if stream == SKIPPED:
            return 0
        if stream == "first":
            return self.batch
        if stream == "one":  # once per step, whatever the batch (DoRA's per-op norms)
            return 1
        if stream == "mel":  # Whisper's mel frames: two per encoder position (conv2 stride 2)
            return 2 * self.batch * self.src_seq
        if global_rows(stream):
            return self.batch * self.global_count(stream)  # Longformer's global tokens
        if stream in ("pos", "src_pos"):  # position ids and rotary tables: one row per
            return self.length(stream, pad_to)  # position, not per token
        return self.batch * self.length(stream, pad_to)

    def length(self, stream: str, pad_to: int = 0) -> int:
        """Tokens per sequence of a stream (``rows`` without the batch). ``global_seq``
        (Longformer's key_global / value_global and the keys of its global queries): every
        token, but only when some token has global attention; ``global``: those tokens."""
        if global_rows(stream):
            return self.global_count(stream)
        if stream == SKIPPED:
            return 0
        s = self.src_seq if stream in ("src", "src_pos") else self.seq
        if stream.startswith("global_seq") and not self.global_count(stream):
            return 0
        return -(-s // pad_to) * pad_to if pad_to else s


def check_fits(cfg, work: Workload) -> None:
    """Raise WorkloadError when the model cannot take these lengths (learned positions), or
    when global tokens are asked of a model without global attention."""
    if work.global_tokens and not cfg.global_qkv:
        raise WorkloadError(f"global_tokens ({work.global_tokens}) applies to models with "
                            f"global attention (Longformer); {cfg.name} has none")
    if cfg.pos_type == "learned":
        for name, length, limit in (("seq", work.seq, cfg.max_position),
                                    ("src_seq", work.src_seq, cfg.stack_max_position("encoder"))):
            if length > limit:
                raise WorkloadError(f"{name} ({length}) exceeds {cfg.name}'s learned position "
                                    f"table (max_position {limit})")


# The parsers live in the input layer; these names stay importable from here.
from ..inputs import parse_context, parse_count  # noqa: E402,F401
