"""Executed FLOPs against torch's FlopCounterMode; model FLOPs against explicit masks."""

import json
from pathlib import Path

import pytest

import txcalc
from txcalc.engine.accounting import count_flops
from txcalc.engine.ops import causal_pairs
from txcalc.engine.workload import Workload

from ..hf_models import torch, train_step_flops

DATA = Path(__file__).parents[1] / "data" / "hf"

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


def _hf_inference_flops(raw: dict, batch: int, prompt: int):
    """FlopCounterMode of HF's prefill (head on the last position, as generate() runs it) and
    of the next decode step over the cache the prefill filled, on meta."""
    from torch.utils.flop_counter import FlopCounterMode

    from ..hf_models import hf_model

    model = hf_model(raw).eval()
    ids = torch.zeros(batch, prompt, dtype=torch.long, device="meta")
    with torch.no_grad():
        with FlopCounterMode(display=False) as prefill:
            out = model(input_ids=ids, use_cache=True, logits_to_keep=1)
        nxt = torch.zeros(batch, 1, dtype=torch.long, device="meta")
        with FlopCounterMode(display=False) as decode:
            model(input_ids=nxt, past_key_values=out.past_key_values, use_cache=True)
    return prefill.get_total_flops(), decode.get_total_flops()


@pytest.mark.parametrize("name", ["gpt2", "llama-3-8b", "mixtral-8x7b"])
@pytest.mark.parametrize("batch,prompt", [(1, 100), (3, 257)])
def test_prefill_and_decode_flops_equal_flopcountermode(name, batch, prompt):
    raw = json.loads((DATA / f"{name}.json").read_text())
    f = count_flops(txcalc.load(name), Workload(batch=batch, seq=prompt))
    prefill, decode = _hf_inference_flops(raw, batch, prompt)
    assert f.prefill() == prefill
    assert f.decode(prompt + 1, model=False) == decode


def test_decode_flops_grow_with_context_by_the_attention_over_the_cache():
    cfg = txcalc.load("llama-3.1-70b")
    f = count_flops(cfg, Workload(batch=1, seq=1))
    short, long = f.decode(1024), f.decode(128_000)
    # per cached token: q.k and p.v, 2 FLOPs per multiply-add, H heads of h, every layer
    assert long - short == (128_000 - 1024) * 2 * 2 * cfg.n_heads * cfg.head_dim * cfg.n_layers


@pytest.mark.parametrize("name", ["gpt2", "llama-3-8b"])
def test_full_recompute_flops_equal_flopcountermode_with_hf_gradient_checkpointing(
        name, monkeypatch):
    """HF's gradient checkpointing re-runs each block's forward during backward: executed
    FLOPs = forward + backward + the blocks' forward again (FlopCounts.recompute, the whole
    block as Megatron's full recompute runs it).

    Named difference: torch's non-reentrant checkpoint stops recomputing once every tensor
    backward needs is back ("early stop"). Llama's block ends with down_proj feeding the
    residual add, which saves nothing, so its down_proj is not re-run: the engine's
    recompute is higher by exactly down_proj's forward in every block. GPT-2's block ends
    with a dropout whose mask must be regenerated, so everything is re-run: exact."""
    from transformers import masking_utils

    # without a cache HF looks for packed sequences with .item(), which meta cannot answer
    monkeypatch.setattr(masking_utils, "find_packed_sequence_indices", lambda *a, **k: None)

    from ..hf_models import hf_model, step_flops

    raw = json.loads((DATA / f"{name}.json").read_text())
    model = hf_model(raw).train()
    model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    batch, seq = 2, 128
    ids = torch.zeros(batch, seq, dtype=torch.long, device="meta")
    measured = step_flops(lambda: model(input_ids=ids, labels=ids).loss)
    f = count_flops(txcalc.load(name), Workload(batch=batch, seq=seq, recompute="full"))
    assert f.recompute > 0
    early_stop = 0
    if name == "llama-3-8b":
        early_stop = sum(r["forward_flops"] for r in f.rows()
                         if r["component"] == "mlp.down_proj")
    assert f.hardware - early_stop == measured
