"""The serving cache is a sum over Op rows, so each pipeline stage's cache is the sum over its
own layers (``kvcache.cache_bytes`` of the ops ``sharding.assign_stages`` gives the stage), and
``kv_capacity`` sizes every stage from its own layers (``kv.stage_cache_bytes``), taking the
fewest blocks of any stage.

Checked against HF's cache after ``generate()`` on tiny random fp32 models on the CPU, layer by
layer (the bytes of the tensors each cache layer holds), on models whose stages differ:

    model                | what differs between stages
    ---------------------|---------------------------------------------------------------
    gemma3n_text         | the shared-KV layers (the last ones) keep no cache of their own
    gemma2               | sliding-window and global layers alternate (window < context)
    jamba                | Mamba layers keep a constant state, one attention layer grows

Before the stages sized themselves, kv_capacity averaged the KV bytes per token over the stages
(Gemma 3n's text model at pp 2: about 1.65x the tokens its first stage can hold).
"""

from __future__ import annotations

import warnings

import pytest

from txcalc.engine.components import model_ops_tuple
from txcalc.engine.kvcache import KV_DTYPES, cache_bytes
from txcalc.model.hf import from_hf_dict
from txcalc.parallel.sharding import assign_stages, stage_blocks
from txcalc.serve.kv import kv_capacity, stage_cache_bytes

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from tests.conformance.test_gemma3n import hf as gemma3n_lm  # noqa: E402
from tests.conformance.test_hybrids import hf_causal_lm  # noqa: E402

GEMMA3N = {"model_type": "gemma3n_text", "hidden_size": 8, "num_attention_heads": 2,
           "num_hidden_layers": 6, "num_key_value_heads": 1, "head_dim": 4, "vocab_size": 32,
           "vocab_size_per_layer_input": 16, "hidden_size_per_layer_input": 2,
           "laurel_rank": 2, "altup_num_inputs": 2, "intermediate_size": 8,
           "layer_types": ["sliding_attention", "full_attention"] * 3,
           "num_kv_shared_layers": 3, "activation_sparsity_pattern": [0.0] * 6}
GEMMA2 = {"model_type": "gemma2", "hidden_size": 8, "num_attention_heads": 2,
          "num_key_value_heads": 1, "head_dim": 4, "num_hidden_layers": 5, "vocab_size": 32,
          "intermediate_size": 8}
JAMBA = {"model_type": "jamba", "hidden_size": 8, "num_attention_heads": 2,
         "num_key_value_heads": 1, "num_hidden_layers": 6, "intermediate_size": 8,
         "vocab_size": 32, "attn_layer_period": 4, "attn_layer_offset": 3,
         "expert_layer_period": 1, "expert_layer_offset": 0, "num_experts": 1,
         "num_experts_per_tok": 1, "mamba_d_state": 3, "mamba_d_conv": 3}
MODELS = {"gemma3n": GEMMA3N, "gemma2": GEMMA2, "jamba": JAMBA}


def hf_model(raw: dict):
    if raw["model_type"] == "gemma3n_text":
        return gemma3n_lm({k: v for k, v in raw.items() if k != "model_type"}, "cpu").eval()
    return hf_causal_lm(raw, "cpu").eval()


def hf_layer_bytes(raw: dict, batch: int, prompt: int, new: int) -> list[int]:
    """Bytes of the unique tensor storages each layer of HF's cache holds after generate()
    (a storage two layers share counted at the first). A sliding layer
    (DynamicSlidingWindowLayer) also keeps an int64 count of the tokens it has seen: not
    cache, left out with any other integer bookkeeping."""
    torch.manual_seed(0)
    model = hf_model(raw)
    ids = torch.randint(0, raw["vocab_size"], (batch, prompt))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        cache = model.generate(ids, max_new_tokens=new, min_new_tokens=new, do_sample=False,
                               return_dict_in_generate=True, pad_token_id=0).past_key_values
    seen: set[int] = set()
    out = []

    def walk(v) -> int:
        if torch.is_tensor(v) and v.is_floating_point():
            key = v.untyped_storage()._cdata
            if key in seen:
                return 0
            seen.add(key)
            return v.untyped_storage().nbytes()
        if torch.is_tensor(v):
            return 0
        if isinstance(v, dict):
            return sum(walk(x) for x in v.values())
        if isinstance(v, (list, tuple)):
            return sum(walk(x) for x in v)
        return 0
    for layer in cache.layers:
        out.append(walk(vars(layer)))
    assert len(out) == raw["num_hidden_layers"]
    return out


def layer_ops(ops, i: int):
    return [op for op in ops if op.placement == "block" and op.layer == i]


@pytest.mark.parametrize("name", sorted(MODELS))
def test_each_layer_and_stage_cache_equals_hf_after_generate(name):
    """Window 2 under a context of 6: every kind of layer (sliding, global, shared, Mamba)."""
    raw = MODELS[name] | {"sliding_window": 2}
    cfg = from_hf_dict(raw)
    ops = model_ops_tuple(cfg)
    batch, prompt, new = 2, 5, 2
    context = prompt + new - 1  # the last token generated is never fed back
    hf = hf_layer_bytes(raw, batch, prompt, new)
    ours = [cache_bytes(layer_ops(ops, i), context, batch, KV_DTYPES["fp32"])
            for i in range(cfg.n_layers)]
    assert ours == hf
    for pp in (2, 3):
        stages = assign_stages(cfg, ops, pp)
        per_stage = [cache_bytes(st, context, batch, KV_DTYPES["fp32"]) for st in stages]
        assert per_stage == [sum(hf[i] for i in r) for r in stage_blocks(cfg.n_layers, pp)]
        assert len(set(per_stage)) > 1  # the stages differ: an average would be wrong


@pytest.mark.parametrize("name", sorted(MODELS))
def test_kv_capacity_sizes_each_stage_from_its_own_layers(name):
    """``stage_cache_bytes``: KV bytes per token (no window cap: the paged cache gives every
    layer a block per token) and state per sequence of each stage, against HF's cache of each
    layer at a context inside the window: an attention layer's bytes / (context x batch), a
    Mamba layer's (constant) bytes / batch."""
    raw = MODELS[name] | {"sliding_window": 64}
    cfg = from_hf_dict(raw)
    batch, prompt, new = 2, 4, 2
    context = prompt + new - 1
    hf = hf_layer_bytes(raw, batch, prompt, new)
    ops = model_ops_tuple(cfg)
    per_token = [b // (context * batch) if cfg.has_attention(i) else 0 for i, b in enumerate(hf)]
    state = [0 if cfg.has_attention(i) else b // batch for i, b in enumerate(hf)]
    for pp in (1, 2, 3):
        want = [(sum(per_token[i] for i in r), sum(state[i] for i in r))
                for r in stage_blocks(cfg.n_layers, pp)]
        assert stage_cache_bytes(cfg, ops, 1, pp, "fp32") == want


def test_gemma3n_capacity_at_pp2_is_the_first_stage_s():
    """Gemma 3n's text model (the config's defaults: 35 layers, the last 15 sharing KV): at
    pp 2 the first stage holds layers 0-16, all with their own cache, the second layers
    17-34, three of them with one. The first stage sets the capacity: its 17 layers' KV per
    token (not the 20 layers' average over the stages, which overstated it by about 1.65x)."""
    cfg = from_hf_dict({"model_type": "gemma3n_text", "num_hidden_layers": 35})
    per_layer = 2 * cfg.n_kv_heads * cfg.head_dim * 2  # k and v in bf16
    one = kv_capacity(cfg, "h100", pp=2)
    assert one.kv_bytes_per_token == 17 * per_layer
    per_stage = stage_cache_bytes(cfg, model_ops_tuple(cfg), 1, 2)
    assert per_stage == [(17 * per_layer, 0), (3 * per_layer, 0)]
    # the average the stages used to share
    assert one.kv_bytes_per_token > 20 * per_layer * 18 // 35


def test_a_stage_without_attention_does_not_limit_the_tokens():
    """Jamba-like: the only attention layer is in the last stage; the first stage's Mamba
    layers keep state, no tokens."""
    cfg = from_hf_dict(JAMBA)
    per_stage = stage_cache_bytes(cfg, model_ops_tuple(cfg), 1, 2)
    assert per_stage[0][0] == 0 and per_stage[0][1] > 0 and per_stage[1][0] > 0
    cap = kv_capacity(cfg, "h100", pp=2)
    assert cap.kv_bytes_per_token == per_stage[1][0]
