"""The global batch searched when not pinned (train.batch), GPU counts in whole nodes and
between powers of two, a monotonic frontier, and the plausibility warnings (train.guards)."""

from __future__ import annotations

import json

import pytest

from txcalc import load
from txcalc.cli import main
from txcalc.inputs import InputError
from txcalc.train.batch import (candidate_batches, critical_batch_tokens,
                                default_max_global_batch, parse_max_global_batch)
from txcalc.train.planner import plan_train


def test_critical_batch_rule_at_llama_405b():
    """DeepSeek LLM's B_opt = 0.2920 C^0.3271 at C = 6 x 405B x 15T (3.6e25 FLOPs): ~67M
    tokens, the size the published runs grew to (Llama 3 405B 16M, DeepSeek-V3 63M)."""
    c = 6 * 405 * 10**9 * 15 * 10**12
    assert critical_batch_tokens(c) == pytest.approx(0.2920 * c ** 0.3271, rel=1e-9)
    assert 60 * 2**20 < critical_batch_tokens(c) < 70 * 2**20
    assert default_max_global_batch(405 * 10**9, 15 * 10**12, 4096) == 16377
    # never below the default ~4M tokens, however small the run
    assert default_max_global_batch(10**6, 10**6, 4096) == 1024


def test_candidates_include_factors_of_three():
    assert candidate_batches(1024, 16389) == [1024, 1536, 2048, 3072, 4096, 6144, 8192,
                                              12288, 16384]
    assert candidate_batches(1000, 1000) == [1000]
    assert candidate_batches(1398, 4096)[:3] == [1398, 1536, 2048]


@pytest.mark.parametrize("text, value", [("2048", (2048, False)), ("16M", (16 * 2**20, True)),
                                         ("4k", (4096, True)), ("1.5M", (3 * 2**19, True))])
def test_max_global_batch_sequences_or_tokens(text, value):
    assert parse_max_global_batch(text) == value


@pytest.mark.parametrize("text", ["0", "-3", "16T", "1.5", "x"])
def test_max_global_batch_refused(text):
    with pytest.raises(InputError, match="--max-global-batch"):
        parse_max_global_batch(text)


def test_pinned_batch_is_kept_and_searched_batch_is_reported():
    cfg = load("llama-3-8b")
    pinned = plan_train(cfg, "h100", 10**12, global_batch=512, days=30)
    assert pinned.global_batch_source == "pinned" and pinned.max_global_batch is None
    assert all(r.global_batch == 512 for r in pinned.rows)
    j = pinned.to_json()
    assert (j["global_batch"], j["global_batch_tokens"]) == (512, 512 * 4096)
    searched = plan_train(cfg, "h100", 10**12, days=30)
    assert searched.global_batch_source in ("default", "searched")
    assert searched.max_global_batch == default_max_global_batch(
        sum(op.params_active for op in searched.setting.ops), 10**12, 4096)
    assert searched.setting.global_batch == searched.best.global_batch
    # a ceiling in tokens is whole sequences of the run's length
    capped = plan_train(cfg, "h100", 10**12, days=30, max_global_batch_tokens=6 * 2**20)
    assert capped.max_global_batch == 1536
    assert all(r.global_batch in (1024, 1536) for r in capped.rows)


def test_a_24_gpu_plan():
    """24 GPUs = 3 nodes: a data-parallel degree of 3 (or 24) needs a batch with a factor 3,
    which the search's 1,536 sequences gives (a pinned 1,024 never could)."""
    p = plan_train(load("llama-3-8b"), "h100", 10**12, gpus=24)
    assert p.best.gpus == 24 and p.best.global_batch % 3 == 0


def test_a_deadline_that_16_gpus_miss_gets_24():
    cfg = load("llama-3-8b")
    sixteen = plan_train(cfg, "h100", 10**12, gpus=16, days=10**5)
    fastest_16 = min(r.days for r in sixteen.rows)
    twenty_four = plan_train(cfg, "h100", 10**12, gpus=24, days=10**5)
    fastest_24 = min(r.days for r in twenty_four.rows)
    assert fastest_24 < fastest_16
    p = plan_train(cfg, "h100", 10**12, days=(fastest_16 + fastest_24) / 2 * 0.999 + 0.0005
                   * fastest_24)
    assert p.gpus_for_deadline == 24


@pytest.mark.parametrize("model, tokens", [("llama-3.1-405b", 15 * 10**12),
                                           ("llama-3.1-70b", 15 * 10**12),
                                           ("llama-3-8b", 15 * 10**12)])
def test_frontier_is_monotonic(model, tokens):
    """More GPUs are never shown slower (the issue's 32,768 GPUs slower than 16,384), and
    the counts are whole nodes of 8 (or fewer than one node)."""
    p = plan_train(load(model), "h100", tokens, days=90)
    rows = p.frontier
    assert len(rows) >= 3
    assert all(a.gpus < b.gpus and a.days > b.days for a, b in zip(rows, rows[1:]))
    assert all(r.gpus < 8 or r.gpus % 8 == 0 for r in rows)


def test_gpu_counts_are_whole_nodes():
    p = plan_train(load("llama-3.1-70b"), "h100", 2 * 10**12)
    assert p.min_gpus_to_fit % 8 == 0 and p.best.gpus % 8 == 0
    four = plan_train(load("llama-3.1-70b"), "h100", 2 * 10**12, gpus_per_node=4)
    assert four.min_gpus_to_fit % 4 == 0 and four.setting.gpu.gpus_per_node == 4


def test_warnings_on_a_bubble_bound_plan(capsys):
    """8 stages fed 4 micro-batches a step (too few to interleave): the bubble, 7 idle
    micro-batch slots of 11, takes ~64% of the step."""
    p = plan_train(load("llama-3-8b"), "h100", 10**10, global_batch=4,
                   only={"pp": 8, "micro_batch": 1})
    text = " ".join(p.warnings)
    assert "bubble" in text and "micro-batches per pipeline" in text
    assert "larger global batch" in text and "fewer stages" in text
    assert p.to_json()["warnings"] == p.warnings
    rc = main(["plan", "train", "llama-3-8b", "--tokens", "10B", "--global-batch", "4",
               "--pp", "8", "--micro-batch", "1"])
    out = capsys.readouterr().out
    assert rc in (0, None) and out.count("warning:") == len(p.warnings)


def test_no_warnings_on_a_healthy_plan():
    p = plan_train(load("llama-3-8b"), "h100", 10**12, days=30)
    assert p.warnings == []


def test_readme_command_answers_like_the_published_run(capsys):
    """Meta trained Llama 3.1 405B on 16,384 H100s at 38-43% MFU with 4M -> 16M-token
    batches: the README's first command answers in that range and names its batch."""
    rc = main(["plan", "train", "llama-3.1-405b", "--tokens", "15T", "--gpu", "h100",
               "--days", "90", "--price", "2.5", "--json"])
    out = json.loads(capsys.readouterr().out)
    assert rc in (0, None)
    assert 8192 <= out["total_gpus"] <= 32768 and out["mfu"] >= 0.30
    assert out["global_batch_source"] in ("searched", "default")
    assert out["global_batch_tokens"] == out["global_batch"] * 4096
    main(["plan", "train", "llama-3.1-405b", "--tokens", "15T", "--gpu", "h100", "--days",
          "90", "--price", "2.5"])
    assert f"global batch {out['global_batch']:,}" in capsys.readouterr().out


@pytest.mark.parametrize("model, gpu, tokens, kw", [
    ("llama-3-8b", "a100-40gb", 10**12, {"days": 60}),
    ("llama-3.1-70b", "h100", 15 * 10**12, {"days": 30}),
    ("mixtral-8x7b", "h100", 10**12, {"days": 20}),
])
def test_deadline_floor_answers_as_the_whole_grid(monkeypatch, model, gpu, tokens, kw):
    """With a deadline the screen skips GPU counts that even 100% MFU could not make meet it,
    and reads the fewest GPUs that fit from the memory-least layouts below them
    (planner._deadline_gpus, grid.layout_grid(memory_min=True)): the same plan as the whole
    grid, and the same frontier."""
    import txcalc.train.planner as planner
    bounded = planner.plan_train(load(model), gpu, tokens, **kw)
    monkeypatch.setattr(planner, "DEADLINE_FLOOR", False)
    whole = planner.plan_train(load(model), gpu, tokens, **kw)
    assert bounded.screen.floor > 1 and whole.screen.floor == 1
    assert bounded.layouts_evaluated < whole.layouts_evaluated
    assert (bounded.min_gpus_to_fit, bounded.gpus_for_deadline) == (
        whole.min_gpus_to_fit, whole.gpus_for_deadline)
    assert bounded.rows == whole.rows
    assert bounded.frontier == whole.frontier


def test_default_ceiling_is_capped():
    """At 10^18 tokens the rule would ask for billions of tokens a step: 2^28 at most."""
    assert default_max_global_batch(405 * 10**9, 10**18, 4096) == 2**28 // 4096


def test_a_deadline_beyond_100_percent_mfu_is_refused_at_once(capsys):
    rc = main(["plan", "train", "llama-3.1-405b", "--tokens", "1000000000000000000", "--gpu",
               "h100", "--days", "90"])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and len(err) == 1 and "even at 100% MFU" in err[0] and "90 days" in err[0]
