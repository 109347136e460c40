"""The engine against the reference model for the structures of issue 12 (part 1): post_sub
norms (OLMo 2), per-head-scaled and L2 q/k norms (Cohere, Llama 4), NoPE layers and chunked
attention (Llama 4), attention sinks (gpt-oss), biased experts (gpt-oss).

Same checks as tests/conformance/test_reference.py, over decoder configs drawn with the new fields:
parameters (numel), executed FLOPs (FlopCounterMode), bytes saved for backward
(saved_tensors_hooks, unique storages) per layer under each recompute mode, in bf16 and fp32,
with and without dropout; the KV cache after generate(); cached decoding equal to a full
forward. Few examples, tiny sizes: CI time stays small.
"""

import dataclasses

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from txcalc.engine.accounting import count_flops, count_params
from txcalc.errors import ConfigError
from txcalc.engine.kvcache import kv_cache_bytes
from txcalc.engine.memory import TrainingMemory
from txcalc.engine.ops import causal_pairs
from txcalc.engine.workload import Workload

from ..ref_configs import configs

torch = pytest.importorskip("torch")
from reference.measure import (by_layer, flops_by_module, kv_cache_after_generate,  # noqa: E402
                               make_inputs, saved_by_module, saved_under_fake)
from reference.model import build, generate  # noqa: E402

SETTINGS = dict(derandomize=True, deadline=None, suppress_health_check=list(HealthCheck))


@st.composite
def new_configs(draw):
    """A decoder config from tests/ref_configs.py with the new structures drawn on top."""
    cfg = draw(configs(family="decoder", moe=draw(st.booleans())))
    n = cfg.n_layers
    layers = st.sets(st.integers(0, n - 1)).map(lambda s: tuple(sorted(s)))
    kw = {}
    if draw(st.booleans()):
        kw["norm_position"] = "post_sub"
        kw["parallel_block"] = False
    if not cfg.is_mla and draw(st.booleans()):
        kw["qk_norm"] = draw(st.sampled_from(["per_head", "l2", "head", "full"]))
    if draw(st.booleans()):
        kw["pos_type"] = "rotary"
        kw["nope_layers"] = draw(layers)
    if draw(st.booleans()):
        kw["attn_sinks"] = True
    if cfg.is_moe and draw(st.booleans()):
        kw["expert_bias"] = True
    if draw(st.booleans()):  # chunked layers: none of them sliding
        kw.update(attn_chunk=draw(st.integers(1, 5)), sliding_window=0, global_every=0,
                  sliding_layers=())
        kw["chunked_layers"] = draw(layers)
        if draw(st.booleans()) and len(kw["chunked_layers"]) < n:
            free = [i for i in range(n) if i not in kw["chunked_layers"]]
            kw.update(sliding_window=draw(st.integers(1, 6)),
                      sliding_layers=tuple(draw(st.sets(st.sampled_from(free)))))
    try:
        return cfg.replace(**kw)
    except ConfigError:
        assume(False)


def lengths(data):
    return data.draw(st.integers(1, 2), label="batch"), data.draw(st.integers(2, 12), label="seq")


def saved_per_layer(cfg, work, dtype, dropout=False):
    model = build(cfg, dtype, "meta", attn_impl=work.attn_impl, recompute=work.recompute,
                  softmax_fp32=work.softmax_fp32, dropout=dropout)
    measured, _ = saved_by_module(model, make_inputs(model, work.batch, work.seq))
    precision = "fp32" if dtype == torch.float32 else "bf16-mixed"
    return TrainingMemory(cfg, work, precision).activations_by_layer(), by_layer(measured)


@settings(max_examples=30, **SETTINGS)
@given(cfg=new_configs(), data=st.data())
def test_new_structures_params_flops_saved_bytes_exact(cfg, data):
    batch, seq = lengths(data)
    work = Workload(batch=batch, seq=seq)
    model = build(cfg, torch.bfloat16, "meta")
    assert sum(p.numel() for p in model.parameters()) == count_params(cfg).total
    _, fwd, bwd = flops_by_module(model, make_inputs(model, batch, seq))
    f = count_flops(cfg, work)
    assert (fwd, bwd) == (f.forward, f.backward)
    for recompute in ("none", "selective", "full"):
        predicted, measured = saved_per_layer(
            cfg, dataclasses.replace(work, recompute=recompute), torch.bfloat16)
        assert predicted == measured, recompute


@settings(max_examples=20, **SETTINGS)
@given(cfg=new_configs(), data=st.data(), fp32=st.booleans(), softmax_fp32=st.booleans(),
       dropout=st.booleans())
def test_new_structures_saved_bytes_in_fp32_model_dtype_softmax_and_dropout(
        cfg, data, fp32, softmax_fp32, dropout):
    batch, seq = lengths(data)
    if dropout:
        cfg = cfg.replace(attn_dropout=0.1, resid_dropout=0.1)
    work = Workload(batch=batch, seq=seq, softmax_fp32=softmax_fp32, dropout=dropout,
                    dropout_mask="act")
    predicted, measured = saved_per_layer(cfg, work, torch.float32 if fp32 else torch.bfloat16,
                                          dropout)
    assert predicted == measured


@settings(max_examples=10, **SETTINGS)
@given(cfg=new_configs(), data=st.data())
def test_new_structures_fused_sdpa_saved_bytes_under_fake_tensors(cfg, data):
    """Chunked and sliding masks are mask tensors (the kernel then runs the math path): only
    the plain causal configs take the flash kernel; sinks run eager only."""
    batch, seq = lengths(data)
    masked = any(cfg.window(i) or cfg.chunk(i) for i in range(cfg.n_layers))
    assume(not masked and not cfg.attn_sinks and cfg.n_heads > 1 and not cfg.is_mla
           and cfg.pos_type not in ("alibi", "relative_bias"))
    work = Workload(batch=batch, seq=seq, attn_impl="flash")
    dtype = torch.float32 if cfg.norm_type == "layernorm" else torch.bfloat16
    measured, _ = saved_under_fake(cfg, work, dtype)
    precision = "fp32" if dtype == torch.float32 else "bf16-mixed"
    assert TrainingMemory(cfg, work, precision).activations_by_layer() == by_layer(measured)


@settings(max_examples=15, **SETTINGS)
@given(cfg=new_configs(), data=st.data(), new=st.integers(1, 4))
def test_new_structures_kv_cache_and_cached_decoding(cfg, data, new):
    """A chunked layer caches its last chunk, as HF does; decoding with the cache picks the
    tokens a full forward picks."""
    batch, prompt = lengths(data)
    assume(cfg.pos_type != "learned" or prompt + new <= cfg.max_position)
    model = build(cfg, torch.float32, "cpu")
    nbytes, context = kv_cache_after_generate(model, batch, prompt, new, 0)
    assert nbytes == kv_cache_bytes(cfg, context, batch, "fp32")
    model.eval()
    ids = torch.randint(0, cfg.vocab_size, (2, 5), generator=torch.Generator().manual_seed(0))
    out, _ = generate(model, ids, 3)
    with torch.no_grad():
        full = model.logits(model.hidden(out[:, :-1]))
    assert torch.equal(out[:, 5:], full[:, 4:].argmax(-1))


@pytest.mark.parametrize("s,chunk", [(1, 1), (5, 2), (8, 4), (9, 4), (3, 8), (16, 5)])
def test_chunked_pairs_equal_the_mask_the_reference_builds(s, chunk):
    from txcalc.model.config import ModelConfig
    cfg = ModelConfig(name="c", n_layers=1, d_model=8, n_heads=2, vocab_size=16,
                      attn_chunk=chunk, chunked_layers=(0,))
    model = build(cfg, torch.float32, "cpu")
    bias = model._context("", torch.arange(s)).bias[-chunk]
    attended = int((bias == 0).sum()) if bias is not None else s * s
    assert causal_pairs(s, 0, chunk) == attended
