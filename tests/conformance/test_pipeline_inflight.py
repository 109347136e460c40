"""Micro-batches (model chunks) in flight per pipeline rank, against torch's own schedules.

The reference is torch.distributed.pipelining's ``ScheduleInterleaved1F1B``: its
``pipeline_order`` (every rank's list of forward and backward actions, computed in the
constructor; fake stage objects stand in for real stages, nothing runs) is replayed and the
forwards whose backward has not yet run are counted, per rank and per model chunk.

torch's interleaved schedule and Megatron-Core's (``forward_backward_pipelining_with_
interleaving``, which ``train.evaluate.inflight_chunks`` follows and which the measured
Megatron rows ran) warm up the same (v - 1) x R + 2 x (pp - rank - 1) forwards, and run the
forwards chunk by chunk over rounds of R micro-batches, with backwards in reversed chunk order.
They agree exactly when R = pp: Megatron's round (``microbatch_group_size_per_vp_stage``) is
pp with the last round taking the remainder, torch's is m // max(1, m // pp) micro-batches
(e.g. pp 4, m 6: Megatron 4 + 2, torch one round of 6). So the comparison runs over m a
multiple of pp, and ``test_torch_and_megatron_rounds_differ_off_multiples`` shows the case
where they part.
"""

from __future__ import annotations

import pytest
import torch

from txcalc.train.evaluate import inflight_chunks

schedules = pytest.importorskip("torch.distributed.pipelining.schedules")


class _FakeStage:
    """What ScheduleInterleaved1F1B's constructor reads from a stage; nothing runs."""

    def __init__(self, index: int, n_stages: int, rank: int, pp: int):
        self.stage_index, self.num_stages = index, n_stages
        self.group_rank, self.group_size = rank, pp
        self.is_first, self.is_last = index == 0, index == n_stages - 1
        self.submod, self.device, self.group = torch.nn.Identity(), torch.device("cpu"), None


def torch_inflight(pp: int, v: int, m: int) -> list[tuple[int, int]]:
    """Per rank: (most forwards without their backward yet, most of them of the rank's edge
    chunk: local chunk 0 on rank 0, v - 1 on the last rank), from torch's pipeline_order."""
    stages = [_FakeStage(k * pp, pp * v, 0, pp) for k in range(v)]
    sched = schedules.ScheduleInterleaved1F1B(stages, m)
    fwd, bwd = schedules._ComputationType.FORWARD, schedules._ComputationType.FULL_BACKWARD
    out = []
    for rank in range(pp):
        edge = 0 if rank == 0 else v - 1
        live: set = set()
        most = most_edge = 0
        for a in sched.pipeline_order[rank]:
            if a is None:
                continue
            if a.computation_type == fwd:
                live.add((a.stage_index, a.microbatch_index))
            elif a.computation_type == bwd:
                live.remove((a.stage_index, a.microbatch_index))
            most = max(most, len(live))
            most_edge = max(most_edge, sum(1 for s, _ in live if s // pp == edge))
        assert not live  # every forward got its backward
        out.append((most, most_edge))
    return out


CASES = [(2, 2, 2), (2, 2, 4), (2, 3, 6), (2, 4, 8), (3, 2, 3), (3, 2, 9), (4, 2, 4),
         (4, 2, 8), (4, 3, 12), (4, 4, 16), (4, 8, 4), (8, 2, 8), (8, 2, 16), (8, 4, 24)]


@pytest.mark.parametrize("pp,v,m", CASES)
def test_interleaved_inflight_matches_torch_schedule(pp, v, m):
    assert [inflight_chunks(pp, v, m, r) for r in range(pp)] == torch_inflight(pp, v, m)


def test_megatron_7b_pp4_row_last_rank_holds_29_of_32_chunks():
    """The measured row (gpt3_7b_tp1_pp4_memory_speed: pp 4, 32 layers / (4 x 1) = 8 chunks,
    4 micro-batches): the last rank warms up (v - 1) x pp = 28 chunks and holds 29, so
    29/8 = 3.625 micro-batches of its blocks' activations, not the one of plain 1F1B; its head
    chunk (v - 1) holds one micro-batch at a time."""
    assert torch_inflight(4, 8, 4)[3] == (29, 1) == inflight_chunks(4, 8, 4, 3)


def test_torch_and_megatron_rounds_differ_off_multiples():
    """pp 4, v 2, m 6: torch runs one round of 6 micro-batches, warming up (2 - 1) x 6 + 6 = 12
    chunks on rank 0 (all of them); Megatron's rounds are 4 + 2 and it warms up
    (2 - 1) x 4 + 6 = 10, holding 11 at the first steady forward."""
    assert torch_inflight(4, 2, 6)[0] == (12, 6)
    assert inflight_chunks(4, 2, 6, 0) == (11, 6)


def test_one_chunk_is_plain_1f1b():
    assert [inflight_chunks(4, 1, 8, r) for r in range(4)] == [(4, 4), (3, 3), (2, 2), (1, 1)]
    assert [inflight_chunks(4, 1, 2, r) for r in range(4)] == [(2, 2), (2, 2), (2, 2), (1, 1)]


# learned positions (GPT-2): no rotary tables, which the engine counts with block 0
TINY = dict(vocab_size=256, n_embd=64, n_layer=8, n_head=4, n_positions=64)


def _stage_activations(lay, stage: int, global_batch: int) -> int:
    from transformers import GPT2Config
    from txcalc.engine.hardware import get_gpu
    from txcalc.model.hf import from_hf_dict
    from txcalc.train.setting import TrainSetting
    from txcalc.train.evaluate import evaluate_layouts
    cfg = from_hf_dict(GPT2Config(**TINY).to_dict(), "tiny-gpt2")
    s = TrainSetting(cfg, get_gpu("h100"), seq=32, global_batch=global_batch, dropout=True)
    return int(evaluate_layouts(s, [lay], stages=lambda pp: [stage])["activations_bytes"][0])


@pytest.mark.parametrize("pp,v,m", [(4, 2, 8), (2, 4, 4), (2, 2, 6)])
def test_engine_interleaved_activations_follow_torch_counts(pp, v, m):
    """The engine's activations on each rank of an interleaved layout, from its plain-1F1B
    answers (per micro-batch: the stage's bytes / its min(pp - r, m) micro-batches) and torch's
    chunk counts: the blocks' bytes x chunks / v, plus the bytes outside the blocks (the
    embeddings on rank 0, the head on the last) x the in-flight micro-batches of their chunk.
    Assumed, as Megatron requires (--num-layers-per-virtual-pipeline-stage divides the layers
    of a stage, megatron/training/arguments.py): every chunk holds the same blocks (8 layers
    over pp x v chunks here)."""
    from txcalc.parallel.layout import Layout
    flat = [_stage_activations(Layout(pp=pp, micro_batch=1), r, m) for r in range(pp)]
    per_mb = [a // min(pp - r, m) for r, a in enumerate(flat)]
    blocks = per_mb[1] if pp > 2 else None  # a middle stage has no embeddings or head
    counts = torch_inflight(pp, v, m)
    lay = Layout(pp=pp, virtual=v, schedule="interleaved", micro_batch=1)
    got = [_stage_activations(lay, r, m) for r in range(pp)]
    if blocks is None:  # pp 2: blocks from a 4-stage run of the same 8 layers, 2 a stage
        blocks = _stage_activations(Layout(pp=4, micro_batch=1), 1, m) // min(3, m) * 2
    edge = [per_mb[0] - blocks, 0, per_mb[-1] - blocks]
    assert edge[0] > 0 and edge[2] > 0  # the embeddings' dropout mask; the head's inputs
    for r in range(pp):
        e = edge[0] if r == 0 else edge[2] if r == pp - 1 else 0
        chunks, edge_chunks = counts[r]
        assert got[r] == -(-blocks * chunks // v) + e * edge_chunks, (r, got, counts)
