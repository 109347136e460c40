"""Plausibility guards on a training plan's best row: warnings a plan carries
(``TrainPlan.warnings``, JSON ``warnings``), each naming its fix.

    guard                      | fires when                            | fix named
    ---------------------------|---------------------------------------|------------------------
    low MFU                    | MFU < 25%                             | larger batch, fewer GPUs
    pipeline bubble            | (pp - 1) / v idle micro-batches take  | larger batch, fewer
                               |   > 20% of the step                   |   stages, interleaving
    few micro-batches          | micro-batches per pipeline < 2 x pp   | larger batch, fewer
                               |                                       |   stages
    under a sequence per rank  | sequences per data-parallel rank      | fewer GPUs, larger
                               |   (dp x cp) < 1                        |   batch

Published runs sit well inside: Llama 3 405B at 38-43% MFU on 16,384 H100s with 16M-token
batches (pp 16, interleaved); a planner's answer outside them has bought GPUs it cannot keep
busy.
"""

from __future__ import annotations

MFU_FLOOR = 0.25
BUBBLE_CEILING = 0.20
MICRO_BATCHES_PER_STAGE = 2


def plan_warnings(row, seq: int, batch_option: str = "--max-global-batch") -> list[str]:
    """The warnings of one ``TrainRow`` (its global batch, layout, MFU, bubble);
    ``batch_option``: the option that gives a larger batch (--global-batch when pinned)."""
    lay, b = row.layout, row.global_batch
    out = []
    if row.mfu < MFU_FLOOR:
        out.append(f"MFU {row.mfu:.1%} is under {MFU_FLOOR:.0%}: the GPUs mostly wait; a larger "
                   f"global batch ({batch_option}) or fewer GPUs (a later --days, --max-gpus) "
                   "keeps them busy")
    if lay.pp > 1 and row.bubble_s > BUBBLE_CEILING * row.step_time_s:
        out.append(f"the pipeline bubble takes {row.bubble_s / row.step_time_s:.0%} of the step "
                   f"(pp {lay.pp}, {row.micro_batches} micro-batches per step): a larger global "
                   f"batch ({batch_option}), fewer stages (--pp) or interleaving shrinks it")
    if lay.pp > 1 and row.micro_batches < MICRO_BATCHES_PER_STAGE * lay.pp:
        out.append(f"{row.micro_batches} micro-batches per pipeline for {lay.pp} stages (under "
                   f"{MICRO_BATCHES_PER_STAGE} x pp): a larger global batch ({batch_option}) or "
                   "fewer stages (--pp)")
    if b < lay.dp * lay.cp:
        out.append(f"the global batch ({b:,} sequences of {seq:,}) is under one sequence per "
                   f"data-parallel rank (dp {lay.dp} x cp {lay.cp}): fewer GPUs or a larger "
                   "global batch")
    return out
