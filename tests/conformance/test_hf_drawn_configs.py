"""Random tiny HF config.json dicts, one strategy per model_type: txcalc must count what HF builds.

For every model_type that ``txcalc.model.hf`` converts, a hypothesis strategy (this file's in
strategies/decoders.py, the others' in strategies/) draws a small config.json (hidden 8..64, 1..4
layers, vocab 16..300) and randomises every field that changes the parameter structure of the HF
model (biases, tying, GQA, head_dim, MoE layout, MLA ranks, norm layout...). Optional fields are
left out about half the time so that the defaults of the HF configuration class are exercised too,
and fields that a type ignores (``mlp_bias`` on Mistral, ...) are drawn as well: txcalc must ignore
them where HF does. Aliases from a class's ``attribute_map`` (``n_embd``/``hidden_size`` for GPT-2,
``num_experts`` for Mixtral) are drawn both ways.

The reference is the HF model built on the meta device (tests/hf_models.py): the sum of numel
over its parameters, tied weights once. For MoE types the active count is derived from the HF
model as well: every parameter outside the stacked expert tensors once, plus top_k/E of them.
HF's answers for the drawn configs are recorded once per transformers version
(tests/hf_record.py); ``pytest -m live`` asks HF itself again.
"""

from __future__ import annotations

import inspect
import re
import sys

import os

import pytest
from hypothesis import HealthCheck, given, reject, settings
from hypothesis import strategies as st

import txcalc
from txcalc.errors import ConfigError
from txcalc.model.hf import CONVERTERS, from_hf_dict

from txcalc.engine.accounting import count_flops
from txcalc.engine.workload import Workload

from ..hf_models import ENCODERS, MOE, SEQ2SEQ, hf_config, hf_model, numel, recorded_train_step_flops
from ..hf_record import hf_answers  # noqa: F401 (a fixture)
from .strategies.decoders import STRATEGIES

EXAMPLES = int(os.environ.get("TXCALC_HF_EXAMPLES", "50"))  # raise it for a deeper search
# CI draws the same examples every run; setting TXCALC_HF_EXAMPLES also draws new ones
SETTINGS = settings(max_examples=EXAMPLES, deadline=None,
                    derandomize="TXCALC_HF_EXAMPLES" not in os.environ,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


def test_every_converter_has_a_strategy():
    # the families of tests/conformance/strategies/ together draw every type txcalc converts,
    # and none that it does not (tests/conformance/test_hf_defaults.py draws each of them)
    from .strategies import FAMILIES, REGISTRY
    assert set(REGISTRY) == set(CONVERTERS)
    assert not [t for family in FAMILIES.values() for t in family if t not in CONVERTERS]


def expected_total(raw: dict, model) -> int:
    total = numel(model)
    if raw["model_type"] in ("t5", "mt5", "umt5") and raw.get("tie_word_embeddings") is False:
        # transformers 5.x forces T5's lm_head to be tied (T5Config.__post_init__:
        # "we tie weights always and force it to be `True`") and drops the separate head that
        # T5 v1.1 checkpoints store; txcalc counts the head the checkpoint has: V x d_model more.
        cfg = hf_config(raw)
        total += cfg.vocab_size * cfg.d_model
    return total


def expected_active(raw: dict, model) -> int:
    """Everything outside the stacked expert tensors once, plus top_k / E of the expert tensors."""
    top_k = hf_config(raw).num_experts_per_tok
    active = numel(model)
    for module in model.modules():
        if type(module).__name__.endswith("Experts"):
            n = sum(p.numel() for p in module.parameters(recurse=False))
            assert n % module.num_experts == 0
            active += n // module.num_experts * top_k - n
    return active


def hf_windows(model) -> list[int]:
    """The sliding window each decoder layer of the built HF model uses (0 = full attention).

    Read from HF itself: a modeling file that never mentions ``sliding_window`` has none; else
    the attention module's own ``sliding_window`` when it sets one, else the layer's entry of
    ``config.layer_types`` when the modeling code reads them, else ``config.sliding_window``.
    """
    cfg = model.config
    src = inspect.getsource(sys.modules[type(model).__module__])
    blocks = [m for name, m in model.named_modules() if re.search(r"\.(layers|h)\.\d+$", name)]
    if "sliding_window" not in src:
        return [0] * len(blocks)
    out = []
    for i, block in enumerate(blocks):
        attn = getattr(block, "self_attn", None) or getattr(block, "attn")
        if "sliding_window" in vars(attn):
            w = vars(attn)["sliding_window"]
        elif "layer_types" in src and getattr(cfg, "layer_types", None):
            w = cfg.sliding_window if cfg.layer_types[i] == "sliding_attention" else None
        else:
            w = cfg.sliding_window
        out.append(w or 0)
    return out


def hf_counts(raw: dict) -> dict:
    """What test_hf_import_counts_what_hf_builds reads from the HF model of ``raw``."""
    model = hf_model(raw)
    out = {"total": expected_total(raw, model)}
    if raw["model_type"] not in ENCODERS | SEQ2SEQ:
        out["windows"] = hf_windows(model)
    if raw["model_type"] in MOE:
        out["active"] = expected_active(raw, model)
    return out


@pytest.mark.live
@pytest.mark.parametrize("model_type", sorted(STRATEGIES))
@SETTINGS
@given(data=st.data())
def test_hf_import_counts_what_hf_builds(model_type, data, hf_answers):
    raw = data.draw(STRATEGIES[model_type], label="config.json")
    hf = hf_answers(raw, "hf_import.counts", lambda: hf_counts(raw))
    cfg = from_hf_dict(raw)
    counts = txcalc.params(cfg)
    assert counts.total == hf["total"]
    if model_type in MOE:
        assert counts.active == hf["active"]
    if cfg.family == "decoder":
        assert [cfg.window(i) for i in range(cfg.n_layers)] == hf["windows"]


DEEPSEEK = {"model_type": "deepseek_v2", "hidden_size": 16, "num_attention_heads": 2,
            "num_hidden_layers": 1, "vocab_size": 50, "intermediate_size": 32,
            "n_routed_experts": 4, "num_experts_per_tok": 2}

# HF combinations txcalc cannot represent: each must be a ConfigError naming the field, never a
# silently wrong count.
UNREPRESENTABLE = [
    # a decoder-only stack with cross-attention blocks (GPT-2 / BERT as the decoder of an
    # EncoderDecoderModel): txcalc puts cross-attention only in encoder-decoder models
    ({"model_type": "gpt2", "n_embd": 16, "n_head": 2, "n_layer": 1, "vocab_size": 50,
      "add_cross_attention": True}, "add_cross_attention"),
    ({"model_type": "bert", "hidden_size": 16, "num_attention_heads": 2, "num_hidden_layers": 1,
      "vocab_size": 50, "is_decoder": True, "add_cross_attention": True}, "add_cross_attention"),
    # q_lora_rank 0 builds zero-width q_a/q_b projections in HF (no query at all); null is the
    # full-rank q_proj
    ({**DEEPSEEK, "model_type": "deepseek_v3", "q_lora_rank": 0}, "q_lora_rank"),
    # DeepSeek-V2's default num_experts_per_tok is None: HF builds a model that cannot route
    ({k: v for k, v in DEEPSEEK.items() if k != "num_experts_per_tok"}, "num_experts_per_tok"),
    # DeepSeek-V2 with mlp_bias and no shared experts: HF keeps a zero-width shared MLP whose
    # down_proj still has a bias of d_model
    ({**DEEPSEEK, "mlp_bias": True, "n_shared_experts": 0}, "n_shared_experts"),
    # untied BART: HF builds separate shared, encoder and decoder token tables plus an lm_head
    ({"model_type": "bart", "d_model": 16, "encoder_attention_heads": 2,
      "decoder_attention_heads": 2, "encoder_layers": 1, "decoder_layers": 1, "vocab_size": 50,
      "tie_word_embeddings": False}, "tie_word_embeddings"),
]


@pytest.mark.parametrize("raw,field", UNREPRESENTABLE, ids=[f for _, f in UNREPRESENTABLE])
def test_unrepresentable_hf_combinations_are_config_errors(raw, field):
    hf_model(raw)  # a configuration HF accepts and builds
    with pytest.raises(ConfigError, match=field):
        from_hf_dict(raw)


#: what HF's own forward raises in the corners of its config space it cannot run on meta (e.g.
#: Falcon layouts its modeling code does not build, complex rotary views of odd widths; Falcon's
#: new_decoder_architecture without parallel_attn reads a norm output it never set)
CANNOT_RUN = (RuntimeError, AttributeError, ValueError, TypeError, ZeroDivisionError,
              UnboundLocalError)


@pytest.mark.live
@pytest.mark.parametrize("model_type", sorted(STRATEGIES))
@settings(max_examples=max(3, EXAMPLES // 5), deadline=None,
          suppress_health_check=list(HealthCheck),
          derandomize="TXCALC_HF_EXAMPLES" not in os.environ)
@given(data=st.data())
def test_training_step_flops_of_random_configs_equal_flopcountermode(model_type, data,
                                                                      hf_answers):
    """forward + backward FLOPs of one training step (forward, loss, backward) equal torch's
    FlopCounterMode on the HF model built on meta, for drawn configs of every model_type."""
    raw = data.draw(STRATEGIES[model_type], label="config.json")
    cfg = from_hf_dict(raw)
    limit = cfg.max_position if cfg.pos_type == "learned" else 64
    batch = data.draw(st.integers(1, 2), label="batch")
    seq = data.draw(st.integers(1, min(24, limit)), label="seq")
    src = data.draw(st.integers(1, min(24, limit)), label="src_seq") if model_type in (
        "t5", "bart") else 0
    f = count_flops(cfg, Workload(batch=batch, seq=seq, src_seq=src))
    if model_type == "t5":  # HF needs it to shift labels into decoder inputs
        raw = {"decoder_start_token_id": 0, **raw}
    measured = recorded_train_step_flops(hf_answers, raw, batch, seq, src or None, CANNOT_RUN)
    if measured is None:
        # no reference to compare with: a type whose every draw fails makes hypothesis report
        # it as unsatisfiable
        reject()
    assert f.forward + f.backward == measured
