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
off). The reference model builds these blocks under the engine's op paths and computes what
HF's ``Gemma3nTextDecoderLayer`` computes (equal outputs, weights copied across): parameters,
FLOPs and the bytes saved for backward per layer (saved_tensors_hooks; none, selective and
full recompute; bf16 and fp32; activation sparsity on and off) equal the engine's.

Not compared: the engine's saved bytes against HF's Gemma3nForCausalLM itself. Its norms are
Gemma3nRMSNorm (pow's input kept beside its output, the normalised input kept in fp32, the
scale cast to fp32 at each call), not the Llama RMSNorm the engine and the reference model;
it keeps rotary tables per layer kind (two bases), and its input and output scalings keep
more. Measured (tiny CPU model, 10 tokens), inside a block those are the only differences.
"""

from __future__ import annotations

import warnings

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import txcalc
from txcalc.engine.accounting import count_flops
from txcalc.model.hf import from_hf_dict
from txcalc.engine.kvcache import kv_cache_bytes
from txcalc.engine.workload import Workload

from .strategies.gemma3n import gemma3n
from tests.conformance.test_hf_drawn_configs import SETTINGS

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")


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
    engine's (on meta)."""
    from reference.measure import flops_by_module, make_inputs
    from reference.model import build

    from txcalc.engine.accounting import count_params
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


REF = dict(deadline=None, derandomize=True, suppress_health_check=list(HealthCheck))


@settings(max_examples=6, **REF)
@given(raw=gemma3n(), data=st.data(), fp32=st.booleans())
def test_reference_gemma3n_saved_bytes_per_layer_equal_the_engine(raw, data, fp32):
    """Bytes saved for backward per layer (saved_tensors_hooks on the reference, meta):
    AltUp's predict and correct, the router's tanh, LAuReL, the per-layer inputs, v_norm, the
    shared-KV layers' re-read keys and values, activation sparsity's statistics; under none,
    selective and full recompute (which keeps the A streams, the per-layer inputs and the
    shared keys and values)."""
    from reference.measure import by_layer, make_inputs, saved_by_module
    from reference.model import build

    from txcalc.engine.memory import TrainingMemory
    cfg = txcalc_config(raw)
    batch = data.draw(st.integers(1, 2), label="batch")
    seq = data.draw(st.integers(1, 9), label="seq")
    dtype = torch.float32 if fp32 else torch.bfloat16
    for recompute in ("none", "selective", "full"):
        work = Workload(batch=batch, seq=seq, recompute=recompute)
        model = build(cfg, dtype, "meta", recompute=recompute)
        measured, _ = saved_by_module(model, make_inputs(model, batch, seq))
        predicted = TrainingMemory(cfg, work, "fp32" if fp32 else "bf16-mixed")
        assert predicted.activations_by_layer() == by_layer(measured), recompute


def test_saved_bytes_see_each_gemma3n_structure():
    """Each structure's saved tensors move the engine's count the way they move the
    reference's (a check that the test above is not blind to them)."""
    from reference.measure import by_layer, make_inputs, saved_by_module
    from reference.model import build

    from txcalc.engine.memory import TrainingMemory
    base = {"hidden_size": 8, "num_attention_heads": 2, "num_key_value_heads": 1,
            "head_dim": 4, "num_hidden_layers": 3, "vocab_size": 30,
            "vocab_size_per_layer_input": 20, "hidden_size_per_layer_input": 3,
            "laurel_rank": 2, "altup_num_inputs": 3, "intermediate_size": 6,
            "layer_types": ["sliding_attention", "full_attention", "full_attention"],
            "num_kv_shared_layers": 1, "activation_sparsity_pattern": [0.0] * 3}

    def both(raw):
        cfg = txcalc_config(raw)
        model = build(cfg, torch.bfloat16, "meta")
        measured, _ = saved_by_module(model, make_inputs(model, 2, 5))
        work = Workload(batch=2, seq=5)
        return TrainingMemory(cfg, work, "bf16-mixed").activations_by_layer(), \
            by_layer(measured)
    predicted, measured = both(base)
    assert predicted == measured
    for change in ({"activation_sparsity_pattern": [0.95, 0.0, 0.0]},
                   {"num_kv_shared_layers": 0}, {"laurel_rank": 5},
                   {"hidden_size_per_layer_input": 6}, {"altup_num_inputs": 2}):
        p2, m2 = both(base | change)
        assert p2 == m2 and m2 != measured, change


def hf_layer_names(name: str) -> str:
    """HF Gemma3nTextDecoderLayer parameter name -> reference Gemma3nBlock name."""
    renames = {"altup.correct_output_scale": "altup.output_scale.weight"}
    if name in renames:
        return renames[name]
    for a, b in (("input_layernorm", "attn_norm"), ("post_attention_layernorm", "attn_post_norm"),
                 ("pre_feedforward_layernorm", "mlp_norm"),
                 ("post_feedforward_layernorm", "mlp_post_norm"),
                 ("laurel.post_laurel_norm", "laurel.norm"), ("per_layer_input_gate",
                                                              "per_layer.gate"),
                 ("per_layer_projection", "per_layer.proj"),
                 ("post_per_layer_input_norm", "per_layer.norm"), ("self_attn", "attn")):
        if name.startswith(a + "."):
            return b + name[len(a):]
    return name


@pytest.mark.parametrize("heads,kv_heads", [(2, 1), (2, 2)])
def test_reference_block_computes_what_hf_decoder_layer_computes(heads, kv_heads):
    """The reference's Gemma3nBlock is HF's Gemma3nTextDecoderLayer: equal outputs layer by
    layer (random fp32 CPU values, weights copied across, training mode), through sliding
    and global layers, a sparse MLP, and shared-KV layers of both kinds. Both sides get the
    same rotary tables (the reference's; HF's per-kind rope bases change no count)."""
    from transformers.masking_utils import create_causal_mask, create_sliding_window_causal_mask
    from transformers.models.gemma3n.modeling_gemma3n import KVSharingDict

    from reference.model import build
    raw = {"hidden_size": 8, "num_attention_heads": heads, "num_hidden_layers": 5,
           "num_key_value_heads": kv_heads, "head_dim": 4, "vocab_size": 30,
           "vocab_size_per_layer_input": 20, "hidden_size_per_layer_input": 3,
           "laurel_rank": 2, "altup_num_inputs": 3, "intermediate_size": [5, 6, 7, 8, 9],
           "num_kv_shared_layers": 3, "sliding_window": 3,
           "layer_types": ["sliding_attention", "full_attention", "sliding_attention",
                           "full_attention", "sliding_attention"],
           "activation_sparsity_pattern": [0.95, 0.0, 0.5, 0.0, 0.0]}
    torch.manual_seed(0)
    model = hf(raw, "cpu").train()
    config = model.config
    ours = build(txcalc_config(raw), torch.float32, "cpu")
    mine = dict(ours.named_parameters())
    with torch.no_grad():
        for p in model.parameters():
            p.normal_()
        for i, layer in enumerate(model.model.layers):
            for name, p in layer.named_parameters():
                mine[f"layers.{i}.{hf_layer_names(name)}"].copy_(p)
    A, B, S, D = 3, 2, 5, 8
    x = torch.randn(A, B, S, D)
    per_layer = torch.randn(B, S, 5, 3)
    pos = torch.arange(S)
    ctx = ours._context("", pos)
    ctx.shared_kv, ctx.per_layer = {}, per_layer
    rotary = (ctx.cos[None].expand(B, S, -1), ctx.sin[None].expand(B, S, -1))
    kw = dict(config=config, inputs_embeds=x[0], attention_mask=None, cache=None,
              position_ids=pos[None])
    masks = {"full_attention": create_causal_mask(**kw),
             "sliding_attention": create_sliding_window_causal_mask(**kw)}
    shared = KVSharingDict()
    theirs = mine_ = x
    for i, layer in enumerate(model.model.layers):
        theirs = layer(theirs, rotary, per_layer[:, :, i], shared_kv_states=shared,
                       attention_mask=masks[config.layer_types[i]], position_ids=pos[None])
        mine_ = ours.layers[i](mine_, ctx)
        torch.testing.assert_close(mine_, theirs)


def test_reference_full_recompute_gives_the_same_gradients():
    """Full recompute checkpoints each block with its per-layer inputs and the shared keys
    and values as inputs: the gradients equal those without recompute (tiny fp32 CPU)."""
    from reference.measure import make_inputs
    from reference.model import build
    raw = {"hidden_size": 8, "num_attention_heads": 2, "num_key_value_heads": 1,
           "head_dim": 4, "num_hidden_layers": 4, "vocab_size": 30,
           "vocab_size_per_layer_input": 20, "hidden_size_per_layer_input": 3,
           "laurel_rank": 2, "altup_num_inputs": 3, "intermediate_size": 6,
           "num_kv_shared_layers": 2, "activation_sparsity_pattern": [0.9, 0.0, 0.0, 0.0],
           "layer_types": ["sliding_attention", "full_attention"] * 2}
    cfg = txcalc_config(raw)
    grads = []
    for recompute in ("none", "full"):
        model = build(cfg, torch.float32, "cpu", recompute=recompute)
        with torch.no_grad():
            for p in model.parameters():  # zeros would hide AltUp's paths
                p.add_(0.1 * torch.randn(p.shape, generator=torch.Generator().manual_seed(1)))
        x, labels, _ = make_inputs(model, 2, 5, device="cpu",
                                   generator=torch.Generator().manual_seed(0))
        model(x, labels).backward()
        grads.append({n: p.grad for n, p in model.named_parameters()})
    assert grads[0].keys() == grads[1].keys()
    for name in grads[0]:
        torch.testing.assert_close(grads[1][name], grads[0][name], msg=name)
