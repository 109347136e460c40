"""Executed FLOPs against torch's FlopCounterMode; model FLOPs against explicit masks."""

import json
from pathlib import Path

import pytest

import txcalc
from txcalc.accounting import count_flops
from txcalc.ops import causal_pairs
from txcalc.workload import Workload

from .hf_models import torch, train_step_flops

DATA = Path(__file__).parent / "data" / "hf"

CASES = [(name, b, s) for name in ("gpt2", "bert-base-uncased", "t5-base", "llama-3-8b",
                                    "mixtral-8x7b")
         for b in (1, 2) for s in (128, 512)]


@pytest.mark.parametrize("name,batch,seq", CASES)
def test_training_step_flops_equal_flopcountermode(name, batch, seq):
    raw = json.loads((DATA / f"{name}.json").read_text())
    f = count_flops(txcalc.load(name), Workload(batch=batch, seq=seq))
    assert f.forward + f.backward == train_step_flops(raw, batch, seq)


def test_encoder_decoder_with_different_source_and_target_lengths():
    raw = json.loads((DATA / "t5-small.json").read_text())
    f = count_flops(txcalc.load("t5-small"), Workload(batch=2, seq=48, src_seq=80))
    assert f.forward + f.backward == train_step_flops(raw, 2, 48, src_seq=80)


def test_backward_is_twice_forward_for_eager_and_2_5x_for_fused_attention_core():
    cfg = txcalc.load("llama-3-8b")
    eager = count_flops(cfg, Workload(batch=1, seq=1024))
    flash = count_flops(cfg, Workload(batch=1, seq=1024, attn_impl="flash"))
    assert eager.backward == 2 * eager.forward
    core_fwd = sum(r["forward_flops"] for r in flash.rows() if ".core." in r["path"])
    assert flash.backward - eager.backward == core_fwd // 2


@pytest.mark.parametrize("s,window", [(1, 0), (7, 0), (64, 0), (64, 16), (64, 64), (65, 100),
                                      (100, 1)])
def test_causal_pairs_equal_an_explicit_mask(s, window):
    i = torch.arange(s).unsqueeze(1)
    j = torch.arange(s).unsqueeze(0)
    mask = i >= j
    if window:
        mask &= (i - j) < window
    assert causal_pairs(s, window) == int(mask.sum())


def test_model_flops_skip_the_masked_half_of_causal_attention_only():
    cfg = txcalc.load("gpt2")
    w = Workload(batch=2, seq=1024)
    f = count_flops(cfg, w)
    rows = f.rows()
    matmul = sum(r["forward_flops"] + r["backward_flops"] for r in rows if ".core." not in r["path"])
    core_exec = sum(r["forward_flops"] + r["backward_flops"] for r in rows if ".core." in r["path"])
    assert f.model - matmul == core_exec * (1024 * 1025 // 2) // (1024 * 1024)
    # An encoder has no mask: model FLOPs equal executed FLOPs.
    bert = count_flops(txcalc.load("bert-base-uncased"), w.__class__(batch=2, seq=512))
    assert bert.model == bert.forward + bert.backward


def test_kaplan_6nd_rule_is_close_for_a_large_model_at_short_context():
    # Kaplan et al. 2020 (arXiv:2001.08361), section 2.1: C ~ 6 N D for non-embedding N
    p = txcalc.params("llama-3.1-405b")
    f = count_flops(txcalc.load("llama-3.1-405b"), Workload(batch=1, seq=2048))
    n_matmul = p.total - p.embedding + 128256 * 16384  # lm_head is a matmul
    rule = 6 * n_matmul * 2048
    assert 0 < f.model - rule < 0.02 * rule


def test_exact_python_ints_for_a_15T_token_405B_budget():
    f = count_flops(txcalc.load("llama-3.1-405b"), Workload(batch=1, seq=8192))
    steps = 15 * 10**12 // 8192
    total = f.model * steps
    assert isinstance(total, int) and total > 2**63  # would overflow int64
    assert total % steps == 0 and total // steps == f.model


def test_sliding_window_reduces_model_flops_not_executed():
    cfg = txcalc.load("mistral-7b")
    long = count_flops(cfg, Workload(batch=1, seq=8192))
    full = count_flops(cfg.replace(sliding_window=0), Workload(batch=1, seq=8192))
    assert long.forward == full.forward
    assert long.model < full.model
