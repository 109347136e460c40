"""Gemma 3n's text part (issue 12): AltUp, LAuReL, per-layer embeddings, per-layer MLP widths,
KV shared across layers, activation sparsity.

Against Hugging Face, configs drawn by hypothesis from Gemma3nTextConfig (fields left out half
the time, so that the class defaults are read): ``txcalc params`` equals the numel of
Gemma3nForCausalLM on meta (tied weights once); one training step's forward + backward FLOPs
equal FlopCounterMode on it (eager attention; tiny CPU tensors where activation sparsity is on,
since its Gaussian top-k needs real values); the bytes HF's cache holds after ``generate()``
(tiny fp32 CPU models) equal ``kv_cache_bytes``: the shared-KV layers keep no cache.

Conventions: FLOPs are the matmuls (AltUp's per-token (D x A) @ (A x A) mix is a bmm and
counts); activation sparsity zeroes most of the first layers' gate activations, but the
matmuls stay dense, as HF runs them: it changes no count (checked below with sparsity on and
off). The reference model builds these blocks under the engine's op paths: parameters and
FLOPs equal the engine's; their bytes saved for backward are not checked yet.
"""

from __future__ import annotations

import warnings

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import txcalc
from txcalc.accounting import count_flops
from txcalc.hf import from_hf_dict
from txcalc.memory import kv_cache_bytes
from txcalc.workload import Workload

from .test_hf_import import SETTINGS, maybe

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")


@st.composite
def gemma3n(draw, sparsity: bool = True) -> dict:
    heads = draw(st.sampled_from([1, 2, 4]))
    n = draw(st.integers(1, 7))
    raw = {"hidden_size": heads * draw(st.sampled_from([2, 4, 8])),
           "num_attention_heads": heads, "num_hidden_layers": n,
           "num_key_value_heads": draw(st.sampled_from([k for k in (1, 2, 4) if heads % k == 0])),
           "head_dim": draw(st.sampled_from([2, 4, 8])), "vocab_size": draw(st.integers(8, 80)),
           "vocab_size_per_layer_input": draw(st.integers(1, 60)),
           "hidden_size_per_layer_input": draw(st.integers(1, 6)),
           "laurel_rank": draw(st.integers(1, 5)), "altup_num_inputs": draw(st.integers(1, 4))}
    if draw(st.booleans()):
        raw["intermediate_size"] = draw(st.integers(1, 24))
    else:
        raw["intermediate_size"] = draw(st.lists(st.integers(1, 24), min_size=n, max_size=n))
    if draw(st.booleans()):
        raw["layer_types"] = draw(st.lists(st.sampled_from(["sliding_attention",
                                                            "full_attention"]),
                                           min_size=n, max_size=n))
    types = raw.get("layer_types") or ["full_attention" if (i + 1) % 5 == 0
                                       else "sliding_attention" for i in range(n)]
    # HF needs every kind of layer among the layers that keep their own keys and values
    ok = [k for k in range(n) if set(types[:n - k]) == set(types)]
    raw["num_kv_shared_layers"] = draw(st.sampled_from(ok))
    maybe(draw, raw, "sliding_window", st.integers(1, 8))
    maybe(draw, raw, "tie_word_embeddings", st.booleans())
    maybe(draw, raw, "attention_bias", st.booleans())
    maybe(draw, raw, "hidden_activation", st.sampled_from(["gelu_pytorch_tanh", "silu"]))
    if sparsity and draw(st.booleans()):
        raw["activation_sparsity_pattern"] = draw(st.lists(st.sampled_from([0.0, 0.95]),
                                                           min_size=n, max_size=n))
    else:
        raw["activation_sparsity_pattern"] = [0.0] * n  # the default has none under 11 layers
    return raw


#: config.json strategies per model type (tests/test_hf_defaults.py writes them both ways)
STRATEGIES = {"gemma3n_text": gemma3n().map(lambda r: r | {"model_type": "gemma3n_text"})}


def hf(raw: dict, device: str = "meta"):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        config = transformers.Gemma3nTextConfig(**raw)
        config._attn_implementation = "eager"
        with torch.device(device):
            return transformers.Gemma3nForCausalLM(config)


def txcalc_config(raw: dict):
    return from_hf_dict(raw | {"model_type": "gemma3n_text"})


@SETTINGS
@given(raw=gemma3n())
def test_params_equal_gemma3n_for_causal_lm(raw):
    model = hf(raw)
    cfg = txcalc_config(raw)
    assert txcalc.params(cfg).total == sum(p.numel() for p in model.parameters())
    shared = [i for i, layer in enumerate(model.model.layers)
              if layer.self_attn.is_kv_shared_layer]
    assert shared == list(cfg.kv_shared_layers)


@SETTINGS.__class__(parent=SETTINGS, max_examples=max(3, SETTINGS.max_examples // 3))
@given(raw=gemma3n(), data=st.data())
def test_training_step_flops_equal_flopcountermode(raw, data):
    """Tiny CPU tensors: the Gaussian top-k of activation sparsity reads real values."""
    from torch.utils.flop_counter import FlopCounterMode
    cfg = txcalc_config(raw)
    batch = data.draw(st.integers(1, 2), label="batch")
    seq = data.draw(st.integers(1, 10), label="seq")
    torch.manual_seed(0)
    model = hf(raw, "cpu")
    ids = torch.randint(0, cfg.vocab_size, (batch, seq))
    with FlopCounterMode(display=False) as counter:
        model(input_ids=ids, labels=ids).loss.backward()
    f = count_flops(cfg, Workload(batch=batch, seq=seq))
    assert f.forward + f.backward == counter.get_total_flops()


def cache_bytes(cache) -> int:
    """Bytes of the keys and values HF's cache layers hold (unique storages). A sliding layer
    (DynamicSlidingWindowLayer) also keeps an int64 count of the tokens it has seen: 8 bytes
    of bookkeeping per layer, not KV, left out."""
    seen, total = set(), 0
    for layer in cache.layers:
        for v in (layer.keys, layer.values):
            if torch.is_tensor(v) and v.untyped_storage()._cdata not in seen:
                seen.add(v.untyped_storage()._cdata)
                total += v.untyped_storage().nbytes()
    return total


@settings(max_examples=6, deadline=None, derandomize=True,
          suppress_health_check=list(HealthCheck))
@given(raw=gemma3n(sparsity=False), data=st.data())
def test_kv_cache_after_generate_equals_hf_cache(raw, data):
    """The shared-KV layers keep no cache; sliding layers keep their window."""
    cfg = txcalc_config(raw)
    batch = data.draw(st.integers(1, 2), label="batch")
    prompt = data.draw(st.integers(1, 6), label="prompt")
    new = data.draw(st.integers(1, 3), label="new tokens")
    torch.manual_seed(0)
    model = hf(raw, "cpu").eval()
    ids = torch.randint(0, cfg.vocab_size, (batch, prompt))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        out = model.generate(ids, max_new_tokens=new, min_new_tokens=new, do_sample=False,
                             return_dict_in_generate=True, pad_token_id=0)
    context = prompt + new - 1  # the last token generated is never fed back
    assert cache_bytes(out.past_key_values) == kv_cache_bytes(cfg, context, batch, "fp32")


def test_kv_sharing_cuts_the_cache_by_the_shared_layers():
    """The Gemma3nTextConfig defaults (E4B-like: 35 layers, the last 15 sharing): 20 layers
    keep keys and values, 4 of them global (every 5th) at full context."""
    cfg = txcalc_config({"num_hidden_layers": 35})
    assert cfg.kv_shared_layers == tuple(range(20, 35))
    per_layer = 2 * cfg.n_kv_heads * cfg.head_dim * 2  # bf16 k and v
    globals_ = sum(1 for i in range(20) if (i + 1) % 5 == 0)
    at = 100_000
    assert kv_cache_bytes(cfg, at) == per_layer * (globals_ * at + (20 - globals_) * 512)


@settings(max_examples=10, deadline=None, derandomize=True,
          suppress_health_check=list(HealthCheck))
@given(raw=gemma3n(sparsity=False), data=st.data())
def test_reference_builds_the_gemma3n_blocks_with_exact_params_and_flops(raw, data):
    """reference/model.py builds AltUp, LAuReL, the per-layer inputs and the shared-KV
    attention under the engine's op paths; parameters and forward/backward FLOPs equal the
    engine's (on meta). Saved bytes are not yet checked for these blocks."""
    from reference.measure import flops_by_module, make_inputs
    from reference.model import build

    from txcalc.accounting import count_params
    cfg = txcalc_config(raw)
    batch = data.draw(st.integers(1, 2), label="batch")
    seq = data.draw(st.integers(1, 10), label="seq")
    model = build(cfg, torch.bfloat16, "meta")
    names = {n for n, _ in model.named_modules()}
    assert {"layers.0.altup.predict", "layers.0.laurel.linear_left",
            "layers.0.per_layer.gate", "embed.per_layer_proj"} <= names
    for i in cfg.kv_shared_layers:
        assert f"layers.{i}.attn.k_proj" not in names
    assert sum(p.numel() for p in model.parameters()) == count_params(cfg).total
    _, fwd, bwd = flops_by_module(model, make_inputs(model, batch, seq))
    f = count_flops(cfg, Workload(batch=batch, seq=seq))
    assert (fwd, bwd) == (f.forward, f.backward)
