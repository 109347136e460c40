"""Zamba, Zamba2 (Mamba layers with shared attention blocks) and RecurrentGemma (Griffin's RG-LRU
with local attention) against HF, and the attention dropout of every hybrid (issue 12).

For each model_type a hypothesis strategy (strategies/hybrids_shared.py) draws a tiny config.json
(fields left out half the time, so the HF class defaults are exercised). References, all
independent of txcalc:

- parameters: the HF model on the meta device, sum of numel (a shared block's weights, tied
  across its uses, once);
- FLOPs of one training step: FlopCounterMode on that model, with the depthwise-conv backward
  corrected as in tests/conformance/test_hybrids.py;
- serving state: the tensors HF keeps after ``generate()`` on tiny fp32 CPU models: its cache
  object (Zamba, Zamba2: keys and values of the shared-block layers, conv and SSM states) and,
  for RecurrentGemma, whose recurrent blocks keep their states on the modules (HF's
  ``_is_stateful``), those module states too;
- dropout: the bytes HF saves for backward in train mode beyond eval mode (bf16 on meta).
"""

from __future__ import annotations

import os

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from txcalc.engine.accounting import count_flops, count_params
from txcalc.model.hf import from_hf_dict
from txcalc.engine.kvcache import kv_cache_bytes
from txcalc.engine.workload import Workload

from ..hf_models import numel
from ..ref_configs import assert_reference_equals_engine

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from ..hf_record import hf_answers  # noqa: E402,F401 (a fixture)
from .strategies.hybrids import HYBRID_STRATEGIES  # noqa: E402
from .strategies.hybrids_shared import STRATEGIES  # noqa: E402
from tests.conformance.test_hybrids import cache_bytes, hf_causal_lm, hf_flops, hf_numel  # noqa: E402

EXAMPLES = int(os.environ.get("TXCALC_HF_EXAMPLES", "12"))
# half the examples of tests/conformance/test_hybrids.py: each HF model here is larger (shared blocks)
SETTINGS = settings(max_examples=max(4, EXAMPLES // 2), deadline=None,
                    derandomize="TXCALC_HF_EXAMPLES" not in os.environ,
                    suppress_health_check=list(HealthCheck))


@pytest.mark.live
@pytest.mark.parametrize("model_type", sorted(STRATEGIES))
@SETTINGS
@given(data=st.data())
def test_params_and_training_flops_equal_hf(model_type, data, hf_answers):
    raw = data.draw(STRATEGIES[model_type], label="config.json")
    cfg = from_hf_dict(raw)
    counts = count_params(cfg)
    assert counts.total == hf_numel(hf_answers, raw)
    # the per-layer-type table groups only blocks of equal parameters (a shared block's first
    # use holds its weights, a later use none)
    assert sum(r["params"] for r in counts.by_layer_type()) == counts.total
    batch = data.draw(st.integers(1, 2), label="batch")
    # a training forward builds HF's cache (Zamba pads a prompt shorter than the conv kernel:
    # a decoding artefact); RecurrentGemma runs a 1-token forward as a decoding step
    shortest = max(cfg.ssm_conv, 2)
    seq = data.draw(st.integers(shortest, 10), label="seq")
    f = count_flops(cfg, Workload(batch=batch, seq=seq))
    assert f.forward + f.backward == hf_flops(hf_answers, raw, batch, seq)


def test_shared_weights_are_counted_once():
    """Zamba2 with 2 shared blocks over 5 uses: HF's parameters with duplicates (each use's
    module) exceed the unique ones by 3 uses' blocks; txcalc counts the unique ones."""
    raw = {"model_type": "zamba2", "hidden_size": 8, "num_attention_heads": 2,
           "vocab_size": 32, "layers_block_type": ["hybrid"] * 5, "num_hidden_layers": 5,
           "num_mem_blocks": 2, "adapter_rank": 2, "use_shared_attention_adapter": True,
           "n_mamba_heads": 2, "mamba_d_state": 4}
    model = hf_causal_lm(raw)
    every = sum(p.numel() for _, p in model.named_parameters(remove_duplicate=False))
    assert count_params(from_hf_dict(raw)).total == numel(model) < every


def module_state_bytes(model) -> int:
    """RecurrentGemma keeps each recurrent block's state on the module: the conv's last k - 1
    inputs (``conv1d_state``; after a decoding step a view of that step's k-wide
    concatenation, of which it is the last k - 1 columns) and the RG-LRU's fp32 state."""
    total = 0
    for layer in model.model.layers:
        block = layer.temporal_block
        if hasattr(block, "rg_lru"):
            for t in (block.conv1d_state, block.rg_lru.recurrent_states):
                total += t.numel() * t.element_size()
    return total


def view_bytes(cache) -> int:
    """Bytes of the keys and values RecurrentGemma's cache shows (its local-attention layers'
    tensors as views; the recurrent layers' entries are empty). The storage under a view can
    be larger: after a prefill longer than the window, the whole prompt's keys, of which the
    view is the last window - 1 tokens; after a decoding step, the step's window."""
    return sum(t.numel() * t.element_size() for layer in cache.layers
               for t in vars(layer).values() if torch.is_tensor(t) and t.dim() > 0)


def generate(raw: dict, batch: int, prompt: int, new: int, dtype: str = "fp32"):
    import warnings
    torch.manual_seed(0)
    model = hf_causal_lm(raw, "cpu").to({"fp32": torch.float32, "bf16": torch.bfloat16}[dtype])
    model.eval()
    ids = torch.randint(0, raw["vocab_size"], (batch, prompt))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        out = model.generate(ids, max_new_tokens=new, min_new_tokens=new, do_sample=False,
                             return_dict_in_generate=True, pad_token_id=0)
    return model, out.past_key_values


@pytest.mark.parametrize("model_type", sorted(STRATEGIES))
@settings(max_examples=max(3, EXAMPLES // 4), deadline=None, derandomize=True,
          suppress_health_check=list(HealthCheck))
@given(data=st.data())
def test_serving_state_after_generate_equals_hf(model_type, data):
    """KV of the attention layers + conv and recurrent states: what HF keeps after generate()
    (tiny fp32 and bf16 models on the CPU: keys, values and conv states in the model dtype,
    the recurrent states in fp32). RecurrentGemma's window is drawn above the context here
    (HF keeps window - 1 tokens once it is full: see the next test)."""
    raw = data.draw(STRATEGIES[model_type], label="config.json")
    batch = data.draw(st.integers(1, 2), label="batch")
    # a 1-token prompt makes RecurrentGemma prefill as a decoding step, which fails in HF when
    # lru_width differs from hidden_size
    prompt = data.draw(st.integers(2, 6), label="prompt")
    new = data.draw(st.integers(1, 3), label="new tokens")
    context = prompt + new - 1  # the last token generated is never fed back
    if model_type == "recurrent_gemma":
        raw["attention_window_size"] = context + data.draw(st.integers(1, 3), label="window")
    cfg = from_hf_dict(raw)
    dtype = data.draw(st.sampled_from(["fp32", "bf16"]), label="dtype")
    model, cache = generate(raw, batch, prompt, new, dtype)
    held = view_bytes(cache) + module_state_bytes(model) if model_type == "recurrent_gemma" \
        else cache_bytes(cache)
    assert held == kv_cache_bytes(cfg, context, batch, dtype)
    recurrent = any(cfg.mixer(i) != "attention" for i in range(cfg.n_layers))
    assert (held > kv_cache_bytes(cfg, context, batch, dtype, state=False)) == recurrent


@pytest.mark.parametrize("window,context", [(2, 5), (3, 3), (4, 9)])
def test_recurrent_gemma_full_window_hf_keeps_one_token_less(window, context):
    """Once the context reaches the window, HF's sliding-window cache shows window - 1 tokens
    between steps (the next token brings the window's last; the storage under that view holds
    the step's window, or a whole longer prompt); txcalc counts the window (what a decoding
    step holds when it attends, and what paged engines allocate): one token per local-attention
    layer more, stated here as the measured difference."""
    raw = {"model_type": "recurrent_gemma", "num_hidden_layers": 3, "hidden_size": 8,
           "num_attention_heads": 2, "num_key_value_heads": 1, "intermediate_size": 8,
           "vocab_size": 32, "lru_width": 4, "attention_window_size": window}
    cfg = from_hf_dict(raw)
    batch, prompt = 2, 2
    model, cache = generate(raw, batch, prompt, context - prompt + 1)
    held = view_bytes(cache) + module_state_bytes(model)
    one_token = kv_cache_bytes(cfg, 1, batch, "fp32", state=False)  # 1 local layer's k and v
    assert sum(cfg.window(i) > 0 for i in range(cfg.n_layers)) == 1
    assert held + one_token == kv_cache_bytes(cfg, context, batch, "fp32")


@pytest.mark.parametrize("model_type", sorted(STRATEGIES))
def test_a_config_of_defaults_counts_what_hf_builds(model_type):
    raw = {"model_type": model_type}
    assert count_params(from_hf_dict(raw)).total == numel(hf_causal_lm(raw))


BAD_CONFIGS = [
    ({"model_type": "zamba", "hidden_size": 8, "num_hidden_layers": 2,
      "layers_block_type": ["hybrid", "attention"]}, "layers_block_type"),
    ({"model_type": "zamba2", "hidden_size": 8, "num_hidden_layers": 3,
      "layers_block_type": ["hybrid", "mamba"]}, "num_hidden_layers"),
    ({"model_type": "zamba", "hidden_size": 8, "num_hidden_layers": 3,
      "attention_hidden_size": 12}, "attention_hidden_size"),
    ({"model_type": "zamba", "hidden_size": 6, "num_hidden_layers": 3, "n_mamba_heads": 5},
     "n_mamba_heads"),
    ({"model_type": "zamba2", "hidden_size": 8, "num_hidden_layers": 1,
      "layers_block_type": ["hybrid"], "num_attention_heads": 2, "num_key_value_heads": 1,
      "use_shared_attention_adapter": True}, "n_kv_heads"),
    ({"model_type": "recurrent_gemma", "hidden_size": 8, "num_attention_heads": 2,
      "block_types": ["recurrent", "mlp"]}, "block_types"),
    ({"model_type": "recurrent_gemma", "hidden_size": 8, "num_attention_heads": 3,
      "lru_width": 8}, "ssm_d_inner"),
]


@pytest.mark.parametrize("raw,field", BAD_CONFIGS, ids=[f for _, f in BAD_CONFIGS])
def test_bad_configs_are_config_errors_naming_the_field(raw, field):
    from txcalc.errors import ConfigError
    with pytest.raises(ConfigError, match=field):
        from_hf_dict(raw)


# --- attention dropout of the hybrids --------------------------------------------------------


def _dropout_strategies() -> dict:
    from .strategies.linear_attention import STRATEGIES as LINEAR
    hybrids = {t: s for t, s in HYBRID_STRATEGIES.items() if t not in ("mamba", "mamba2")}
    return {**hybrids, **{t: LINEAR[t] for t in ("qwen3_next", "qwen3_5_text")}, **STRATEGIES}


DROPOUT_TYPES = sorted(_dropout_strategies())


def _dense(raw: dict) -> dict:
    """The config with dense FFNs in place of MoE layers: HF's routed experts on meta free
    temporaries whose storages a later tensor may reuse, which makes the storage-keyed saved
    bytes of two runs differ by a few bytes; the attention, and its dropout, stay."""
    raw = dict(raw)
    if raw["model_type"] == "nemotron_h":
        if "hybrid_override_pattern" in raw:
            raw["hybrid_override_pattern"] = raw["hybrid_override_pattern"].replace("E", "-")
        if "layers_block_type" in raw:
            raw["layers_block_type"] = ["mlp" if t == "moe" else t
                                        for t in raw["layers_block_type"]]
    return raw | {"jamba": {"num_experts": 1}, "granitemoehybrid": {"num_local_experts": 0},
                  "qwen3_next": {"num_experts": 0}}.get(raw["model_type"], {})


@pytest.mark.parametrize("model_type", DROPOUT_TYPES)
@settings(max_examples=max(2, EXAMPLES // 6), deadline=None, derandomize=True,
          suppress_health_check=list(HealthCheck))
@given(data=st.data())
def test_attention_dropout_masks_equal_hf(model_type, data):
    """``attention_dropout`` of a hybrid: the bytes a training step saves beyond the same step
    with ``attention_dropout`` 0 (HF's eager attention keeps the mask and the dropped
    probabilities besides the fp32 softmax) equal the engine's (bf16 on meta, masks in the
    activation dtype). Both runs in train mode: a MoE router may keep other tensors in eval.
    LFM2's attention passes 0.0 whatever the config says: no masks there, in HF and txcalc."""
    import warnings

    from reference.saved import saved_bytes_by_module
    from txcalc.engine.memory import TrainingMemory
    raw = _dense(data.draw(_dropout_strategies()[model_type], label="config.json"))
    cfg = from_hf_dict(dict(raw, attention_dropout=0.1))
    drops = model_type != "lfm2"
    assert cfg.attn_dropout == (0.1 if drops else 0.0)
    batch = data.draw(st.integers(1, 2), label="batch")
    seq = data.draw(st.integers(max(cfg.ssm_conv, 2), 8), label="seq")
    ids = torch.zeros(batch, seq, dtype=torch.long, device="meta")

    def measured(p: float) -> int:
        model = hf_causal_lm(dict(raw, attention_dropout=p)).to(torch.bfloat16).train()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            per_module, _ = saved_bytes_by_module(
                model, lambda: model(input_ids=ids, labels=ids).loss)
        return sum(per_module.values())
    on, off = measured(0.1), measured(0.0)

    def act(dropout: bool) -> int:
        w = Workload(batch=batch, seq=seq, attn_impl="eager", dropout=dropout,
                     dropout_mask="act")
        return TrainingMemory(cfg, w, "bf16-mixed").to_json()["activations_bytes"]
    assert act(True) - act(False) == on - off
    assert (on > off) == drops


# --- the reference model (reference/model.py) builds the same structures under the engine's paths


REFERENCE_TYPES = ["zamba", "zamba2", "recurrent_gemma"]


@pytest.mark.parametrize("model_type", REFERENCE_TYPES)
@settings(max_examples=max(3, EXAMPLES // 4), deadline=None, derandomize=True,
          suppress_health_check=list(HealthCheck))
@given(data=st.data())
def test_reference_model_params_flops_and_saved_bytes_equal_the_engine(model_type, data):
    cfg = from_hf_dict(data.draw(STRATEGIES[model_type], label="config.json"))
    batch = data.draw(st.integers(1, 2), label="batch")
    seq = data.draw(st.integers(1, 7), label="seq")
    assert_reference_equals_engine(cfg, batch, seq)


def test_reference_recurrent_block_computes_what_hf_computes():
    """The reference's RG-LRU block (gates, conv, scan with its reset at position 0) is HF's:
    equal outputs on random CPU values (fp32), weights copied across."""
    from transformers.models.recurrent_gemma.modeling_recurrent_gemma import \
        RecurrentGemmaRecurrentBlock

    from reference.ssm import RecurrentBlock
    raw = {"model_type": "recurrent_gemma", "hidden_size": 4, "num_attention_heads": 2,
           "lru_width": 8, "conv1d_width": 3, "num_hidden_layers": 1}
    torch.manual_seed(0)
    hf = RecurrentGemmaRecurrentBlock(hf_causal_lm(raw, "cpu").config, 0)
    ours = RecurrentBlock(from_hf_dict(raw), torch.float32)
    with torch.no_grad():
        for p in hf.parameters():
            p.normal_()
        for name in ("linear_y", "linear_x", "linear_out"):
            getattr(ours, name).load_state_dict(getattr(hf, name).state_dict())
        ours.conv1d.weight.copy_(hf.conv_1d.weight)
        ours.conv1d.bias.copy_(hf.conv_1d.bias)
        for n in ("input_gate", "recurrent_gate"):
            getattr(ours, n).weight.copy_(getattr(hf.rg_lru, f"{n}_weight"))
            getattr(ours, n).bias.copy_(getattr(hf.rg_lru, f"{n}_bias"))
        ours.scan.recurrent_param.copy_(hf.rg_lru.recurrent_param)
    x = torch.randn(2, 5, 4)
    expected, _ = hf(x, torch.arange(5)[None].expand(2, 5), None, use_cache=False)
    torch.testing.assert_close(ours(x), expected)
