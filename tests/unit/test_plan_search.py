"""One search answers all: the frontier, fewest GPUs and the deadline read from one screen of
the layout grid equal what a separate search pinned to each GPU count answers."""

from __future__ import annotations

import pytest

from txcalc import load
from txcalc.errors import PlanError
from txcalc.train.planner import plan_train


@pytest.mark.parametrize("model, gpu, tokens, kw", [
    ("llama-3-8b", "a100-40gb", 10**12, {"days": 60}),
    ("mixtral-8x7b", "h100", 10**12, {"seq": 4096, "price_per_gpu_hour": 2.5}),
])
def test_frontier_equals_a_search_pinned_to_each_count(model, gpu, tokens, kw):
    """Each frontier row is the row a fresh ``plan_train(gpus=n, n_rows=1)`` reports as best
    (its own grid, its own screen, its own exact evaluation); a count with no fitting layout
    raises there and is absent here."""
    p = plan_train(load(model), gpu, tokens, **kw)
    counts = p.frontier_counts()
    assert counts[0] == p.min_gpus_to_fit and p.best.gpus in counts
    assert len(counts) > 3
    by_count = p.fastest_on(counts)
    assert p.min_gpus_to_fit in by_count
    # the frontier keeps the counts faster than every smaller one (monotonic)
    assert all(by_count[r.gpus] == r for r in p.frontier)
    pinned_kw = {k: v for k, v in kw.items() if k != "days"}  # the frontier has no deadline
    for n in counts:
        try:
            alone = plan_train(load(model), gpu, tokens, gpus=n, n_rows=1, **pinned_kw).best
        except PlanError:
            assert n not in by_count
            continue
        assert by_count[n] == alone, n
    table = p.frontier_table()
    assert list(table["gpus"]) == [r.gpus for r in p.frontier]
    assert list(table.columns[:5]) == ["gpus", "days", "gpu_hours", "cost", "layout"]


def test_fastest_on_a_count_without_layouts_is_absent():
    p = plan_train(load("llama-3-8b"), "h100", 10**12)
    assert p.fastest_on([3 * 5 * 7 * 11 * 13 * 17]) == {}  # no layout has this many GPUs
    one = p.fastest_on([p.min_gpus_to_fit])[p.min_gpus_to_fit]
    assert one.total_bytes <= p.setting.gpu.usable_bytes


def test_frontier_respects_max_gpus():
    p = plan_train(load("llama-3-8b"), "h100", 10**12, max_gpus=64)
    assert max(p.frontier_counts()) <= 64
    assert all(r.gpus <= 64 for r in p.frontier)
