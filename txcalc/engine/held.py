"""What a training step holds beside the tensors saved for backward: the batch (token ids,
labels, the loss), a frozen token table's ids and its output leaf (PEFT), and when each is
alive. ``memory.TrainingMemory.phases`` adds them to one GPU's phases; the planner
(``train.evaluate``) books them on the first and last pipeline stages."""

from __future__ import annotations

from typing import NamedTuple

from ..model.checks import VOCAB_HEADS
from ..model.config import ModelConfig
from .workload import Workload


def frozen_table_inputs(cfg: ModelConfig, ops, work: Workload, act_bytes: int,
                        finetuned: bool) -> tuple[int, int]:
    """(token-id bytes, leaf bytes) a frozen token table leaves alive beside the saved
    tensors through forward and backward. The frozen lookup saves no ids (the caller still
    holds them); PEFT's ``enable_input_require_grads`` (reference/lora.py) makes its output
    a leaf that requires grad, which the graph holds (and, in backward, its ``.grad``,
    the size of the embedding input gradient counted in ``phases``) until the loss is
    freed: E a bytes per token of each stream through the table (after forward not
    beside the saved tensors when block 0 saves that very tensor, ``leaf_saved``).
    ``finetuned``: a Finetune is given (without one every table trains)."""
    table = next((op for op in ops if op.path == "embed.tokens" and op.kind == "embedding"),
                 None)
    if not finetuned or table is None or table.trainable:
        return 0, 0
    rows = sum(work.rows(op.stream) for op in ops if op.path == "embed.tokens")
    return 8 * rows, rows * cfg.embed_dim * act_bytes


def leaf_saved(cfg: ModelConfig, ops, work: Workload, act_bytes: int) -> bool:
    """Whether block 0 saves the frozen table's output itself: it is block 0's input (no
    positions added, no norm, dropout or projection between) and block 0 is fully
    recomputed (its checkpoint) or opens with a norm that saves its input: LayerNorm, a
    fused RMSNorm, or HF's RMSNorm in fp32 (its fp32 copy is the tensor itself)."""
    if cfg.pos_type == "learned" or cfg.type_vocab_size or cfg.embed_norm or \
            cfg.embed_dim != cfg.d_model or (work.dropout and cfg.embed_dropout):
        return False
    if work.block_mode(0) == "full" and work.keeps_block_input(0):
        return True
    stack = cfg.stacks[0][0]
    first = next((op for op in ops if op.stack == stack and op.layer == 0 and
                  op.kind != "checkpoint"), None)
    if first is None or first.kind != "norm" or not first.saved:
        return False
    saved = first.saved_fused if first.saved_fused is not None and first.runs_fused(work) \
        else first.saved
    return saved[0][1] == "a" or (saved[0][1] == "f32" and act_bytes == 4)


def step_held_inputs(cfg: ModelConfig, ops, work: Workload, act_bytes: int,
                     finetuned: bool) -> "HeldInputs":
    """Bytes of the batch alive from the end of backward through the optimizer step (until
    the next batch replaces it), as ``HeldInputs`` (its ``first`` on the first pipeline
    stage, ``last`` on the last): the int64 token ids (and an encoder-decoder's source ids);
    a frozen table's leaf with its gradient (``leaf``: both, the graph holds them until the
    loss goes); the int64 labels (an LM-type head) and the fp32 loss.
    ``TrainingMemory.phases``' after_step and peak_step hold their sum; the planner books
    them at the step."""
    ids = work.rows("seq") + (work.rows("src") if cfg.family == "encoder-decoder" else 0)
    leaf = frozen_table_inputs(cfg, ops, work, act_bytes, finetuned)[1]
    labels = work.rows("seq") if cfg.head in VOCAB_HEADS else 0
    return HeldInputs(8 * ids, 2 * leaf, 8 * labels, 4)


class HeldInputs(NamedTuple):
    """Bytes a step holds beside the saved activations from forward through the start of
    backward (``held_inputs``): the first pipeline stage's ``ids`` and ``leaf``, the last
    stage's ``labels`` and ``loss``."""
    ids: int  #: token ids the caller holds that no op saves (a frozen table; Longformer's pad)
    leaf: int  #: a frozen table's output leaf (PEFT), unless block 0 saves that very tensor
    labels: int  #: labels the loss does not save (lm_loss.held_labels)
    loss: int  #: the fp32 loss scalar the step returns

    @property
    def first(self) -> int:
        return self.ids + self.leaf

    @property
    def last(self) -> int:
        return self.labels + self.loss


def held_inputs(cfg: ModelConfig, ops, work: Workload, act_bytes: int,
                finetuned: bool) -> HeldInputs:
    """What the batch and the loss hold beside the saved tensors (``HeldInputs``); ``ops``:
    the model's. ``phases`` adds their sum to the saved activations; the planner books
    ``first`` on stage 0 and ``last`` on the last stage (its "inputs" category)."""
    labels = 0
    if cfg.head == "lm":  # labels the loss does not save (txcalc.engine.lm_loss)
        from .lm_loss import held_labels
        labels = held_labels(work)
    ids, leaf = frozen_table_inputs(cfg, ops, work, act_bytes, finetuned)
    if leaf and leaf_saved(cfg, ops, work, act_bytes):
        leaf = 0
    if cfg.sliding_chunks and work.seq % (2 * cfg.sliding_window):
        # Longformer pads the ids (a copy, what the embeddings save): the caller's own
        # ids stay alive beside it
        ids += 8 * work.rows("seq")
    return HeldInputs(ids, leaf, labels, 4)
