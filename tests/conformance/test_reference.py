"""The engine against the reference PyTorch model (reference/model.py), over hypothesis-drawn
configs that span every option: parameters (numel), executed FLOPs (FlopCounterMode), bytes
saved for backward (saved_tensors_hooks, unique storages) per layer for eager attention and
each recompute mode on the meta device, and for fused SDPA under FakeTensorMode; KV-cache
bytes after generate() on the CPU.

Two cases found here and now modelled by the engine have named tests at the end.
"""

import dataclasses

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from txcalc.engine.accounting import count_flops, count_params
from txcalc.engine.kvcache import kv_cache_bytes
from txcalc.engine.memory import TrainingMemory
from txcalc.engine.workload import Workload

from ..ref_configs import configs

torch = pytest.importorskip("torch")
from reference.measure import (by_layer, flops_and_saved_by_module,  # noqa: E402
                               flops_and_saved_under_fake, kv_cache_after_generate, make_inputs,
                               saved_by_module)
from reference.model import build, generate, sample_next  # noqa: E402

SETTINGS = dict(derandomize=True, deadline=None, suppress_health_check=list(HealthCheck))


def lengths(data, cfg):
    batch = data.draw(st.integers(1, 2), label="batch")
    seq = data.draw(st.integers(2, 12), label="seq")
    src = data.draw(st.integers(2, 12), label="src_seq") if cfg.family == "encoder-decoder" else 0
    return batch, seq, src


def saved_per_layer(cfg, work, dtype=None):
    dtype = dtype or torch.bfloat16
    model = build(cfg, dtype, "meta", attn_impl=work.attn_impl, recompute=work.recompute,
                  softmax_fp32=work.softmax_fp32)
    measured, _ = saved_by_module(model, make_inputs(model, work.batch, work.seq, work.src_seq))
    precision = "fp32" if dtype == torch.float32 else "bf16-mixed"
    return TrainingMemory(cfg, work, precision).activations_by_layer(), by_layer(measured)


@settings(max_examples=100, **SETTINGS)
@given(cfg=configs(), data=st.data())
def test_params_flops_and_saved_bytes_exact_for_drawn_configs(cfg, data):
    batch, seq, src = lengths(data, cfg)
    work = Workload(batch=batch, seq=seq, src_seq=src)
    model = build(cfg, torch.bfloat16, "meta")  # saved_per_layer's model without recompute
    assert sum(p.numel() for p in model.parameters()) == count_params(cfg).total
    # one forward for the FLOPs and the bytes saved without recompute
    _, fwd, bwd, saved = flops_and_saved_by_module(model, make_inputs(model, batch, seq, src))
    f = count_flops(cfg, work)
    assert (fwd, bwd) == (f.forward, f.backward)
    assert TrainingMemory(cfg, work, "bf16-mixed").activations_by_layer() == by_layer(saved)
    for recompute in ("selective", "full"):
        predicted, measured = saved_per_layer(cfg, dataclasses.replace(work, recompute=recompute))
        assert predicted == measured, recompute


@settings(max_examples=25, **SETTINGS)
@given(cfg=configs(), data=st.data(), fp32=st.booleans())
def test_saved_bytes_exact_in_fp32_and_with_a_model_dtype_softmax(cfg, data, fp32):
    batch, seq, src = lengths(data, cfg)
    work = Workload(batch=batch, seq=seq, src_seq=src, softmax_fp32=fp32)
    predicted, measured = saved_per_layer(cfg, work, torch.float32 if fp32 else torch.bfloat16)
    assert predicted == measured


DROPOUTS = ("embed_dropout", "attn_dropout", "resid_dropout", "mlp_dropout", "final_dropout")


@settings(max_examples=40, **SETTINGS)
@given(cfg=configs(), data=st.data(), fp32=st.booleans(),
       probs=st.tuples(*[st.sampled_from([0.0, 0.1])] * len(DROPOUTS)),
       recompute=st.sampled_from(["none", "selective", "full"]))
def test_saved_bytes_exact_when_training_with_dropout(cfg, data, fp32, probs, recompute):
    """Every dropout the config has keeps its mask (the activation dtype on meta/CPU:
    dropout_mask="act"); attention dropout on the eager probabilities keeps the mask and the
    dropped probabilities instead of the softmax's cast copy."""
    cfg = cfg.replace(**dict(zip(DROPOUTS, probs)))
    batch, seq, src = lengths(data, cfg)
    work = Workload(batch=batch, seq=seq, src_seq=src, recompute=recompute, dropout=True,
                    dropout_mask="act")
    dtype = torch.float32 if fp32 else torch.bfloat16
    model = build(cfg, dtype, "meta", recompute=recompute, dropout=True)
    measured, _ = saved_by_module(model, make_inputs(model, batch, seq, src))
    predicted = TrainingMemory(cfg, work, "fp32" if fp32 else "bf16-mixed")
    assert predicted.activations_by_layer() == by_layer(measured)


def fused_ok(cfg, seq) -> bool:
    """SDPA takes the fused CPU kernel only without a mask tensor: plain causal or no mask."""
    if cfg.pos_type in ("alibi", "relative_bias"):
        return False
    return not (cfg.family != "encoder" and cfg.sliding_window and cfg.sliding_window < seq)


@settings(max_examples=40, **SETTINGS)
@given(cfg=configs(family="decoder") | configs(), data=st.data(),
       recompute=st.sampled_from(["none", "selective", "full"]))
def test_fused_sdpa_saved_bytes_exact_under_fake_tensors(cfg, data, recompute):
    """Under FakeTensorMode SDPA runs the CPU flash kernel: no S x S, but its output and
    logsumexp are saved. LayerNorm models run in fp32: the CPU LayerNorm keeps bf16 statistics
    for bf16 input (2 bytes; fp32 on CUDA and meta), a device difference the engine does not
    model. One head: the kernel's output transposed back is already contiguous, so o_proj's
    input is the saved output itself (aliasing the engine does not model). MLA's q/k and v
    head widths differ, which the CPU flash kernel does not take (math path)."""
    batch, seq, src = lengths(data, cfg)
    assume(fused_ok(cfg, seq) and cfg.n_heads > 1 and not cfg.is_mla)
    work = Workload(batch=batch, seq=seq, src_seq=src, attn_impl="flash", recompute=recompute)
    dtype = torch.float32 if cfg.norm_type == "layernorm" else torch.bfloat16
    _, fwd, bwd, measured = flops_and_saved_under_fake(cfg, work, dtype)  # one build, forward
    precision = "fp32" if dtype == torch.float32 else "bf16-mixed"
    assert TrainingMemory(cfg, work, precision).activations_by_layer() == by_layer(measured)
    # executed FLOPs of the fused kernel: backward 2.5x forward, recompute inside backward
    f = count_flops(cfg, work)
    assert (fwd, bwd) == (f.forward, f.backward + f.recompute)


@settings(max_examples=30, **SETTINGS)
@given(cfg=configs(family="decoder") | configs(family="encoder-decoder"), data=st.data(),
       new=st.integers(1, 4))
def test_kv_cache_bytes_after_generate_exact(cfg, data, new):
    batch, prompt, src = lengths(data, cfg)
    assume(cfg.pos_type != "learned" or prompt + new <= cfg.max_position)
    model = build(cfg, torch.float32, "cpu")
    nbytes, context = kv_cache_after_generate(model, batch, prompt, new, src)
    assert nbytes == kv_cache_bytes(cfg, context, batch, "fp32", src_seq=src or prompt)


@settings(max_examples=15, **SETTINGS)
@given(cfg=configs(family="decoder") | configs(family="encoder-decoder"))
def test_generate_with_cache_equals_full_forward(cfg):
    """Greedy decoding with the KV cache picks the tokens a full forward would pick, and the
    cached logits equal the full forward's logits at every step (fp32)."""
    model = build(cfg, torch.float32, "cpu").eval()
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(0, cfg.vocab_size, (2, 5), generator=g)
    src = torch.randint(0, cfg.vocab_size, (2, 6), generator=g) \
        if cfg.family == "encoder-decoder" else None
    out, _ = generate(model, ids, 3, src_ids=src)
    with torch.no_grad():
        full = model.logits(model.hidden(out[:, :-1], src_ids=src))
    assert torch.equal(out[:, 5:], full[:, 4:].argmax(-1))


def test_sampling_respects_temperature_top_k_and_top_p():
    logits = torch.tensor([[4.0, 3.0, 2.0, 1.0, 0.0]]).repeat(400, 1)
    g = torch.Generator().manual_seed(0)
    assert torch.equal(sample_next(logits), torch.zeros(400, dtype=torch.long))
    top2 = sample_next(logits, temperature=1.0, top_k=2, generator=g)
    assert set(top2.tolist()) == {0, 1}
    # softmax([4, 3, 2, 1, 0]) = .64, .23, .09, ...: top_p 0.8 keeps the first two
    nucleus = sample_next(logits, temperature=1.0, top_p=0.8, generator=g)
    assert set(nucleus.tolist()) == {0, 1}
    hot = sample_next(logits, temperature=100.0, generator=g)
    assert len(set(hot.tolist())) == 5


# --- two cases this suite found, named ------------------------------------------------------
CASES = {
    "relative_bias_kept_by_checkpoint": (
        dict(family="decoder", pos_type="relative_bias", n_layers=3, d_model=16, n_heads=2,
             vocab_size=32, norm_type="rmsnorm", activation="swiglu", sliding_window=4,
             global_every=3), ("selective", "full")),
    "encoder_output_kept_by_full_recompute": (
        dict(family="encoder-decoder", n_layers=2, n_encoder_layers=1, d_model=16, n_heads=2,
             vocab_size=32, pos_type="relative_bias"), ("full",)),
}


@pytest.mark.parametrize("name", CASES)
def test_checkpoint_inputs_that_stay_alive(name):
    """relative_bias_kept_by_checkpoint: under selective or full recompute the T5 position
    bias (H x S x S, activation dtype, needs a gradient) is a checkpoint input and stays alive
    until backward, once per stack and window mask. encoder_output_kept_by_full_recompute:
    with full recompute the decoder blocks keep the encoder output (B x S_src x D, once)."""
    from txcalc.model.config import ModelConfig
    kw, modes = CASES[name]
    cfg = ModelConfig(name=name, **kw)
    for recompute in modes:
        work = Workload(batch=2, seq=8, src_seq=6, recompute=recompute)
        predicted, measured = saved_per_layer(cfg, work)
        assert predicted == measured, recompute
