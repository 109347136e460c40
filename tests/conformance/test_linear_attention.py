"""Linear-attention hybrids (issue 12): Qwen3-Next's Gated DeltaNet layers and gated
attention, against HF.

References, all independent of txcalc (as in tests/conformance/test_hybrids.py, whose helpers this file
reuses): parameters, HF's model on the meta device; one training step's FLOPs,
FlopCounterMode on that model (HF's torch path: ``torch_chunk_gated_delta_rule``, with the
depthwise-conv backward correction); serving state, the bytes HF's cache holds after
``generate()`` on tiny fp32 CPU models.
"""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from txcalc.engine.accounting import count_flops, count_params
from txcalc.model.hf import from_hf_dict
from txcalc.engine.kvcache import kv_cache_bytes
from txcalc.engine.workload import Workload

from ..hf_models import numel
from ..ref_configs import assert_reference_equals_engine
from ..hf_record import hf_answers  # noqa: F401 (a fixture)
from .strategies.hybrids import HYBRID_STRATEGIES
from .strategies.linear_attention import MULTIMODAL, STRATEGIES
from tests.conformance.test_hybrids import (EXAMPLES, SETTINGS, cache_bytes, hf_causal_lm, hf_flops,
                                            hf_numel)

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")


def language_model_numel(raw: dict) -> int:
    """Parameters of the checkpoint's class (``*ForConditionalGeneration``, which ties the
    head as the top-level ``tie_word_embeddings`` says) without its vision tower."""
    import warnings

    from ..hf_models import hf_config
    cls = {"qwen3_5": "Qwen3_5ForConditionalGeneration",
           "qwen3_5_moe": "Qwen3_5MoeForConditionalGeneration"}[raw["model_type"]]
    with torch.device("meta"), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model = getattr(transformers, cls)(hf_config(raw))
    return numel(model) - sum(p.numel() for n, p in model.named_parameters()
                              if n.startswith("model.visual."))


@pytest.mark.parametrize("model_type", sorted(MULTIMODAL))
@SETTINGS
@given(data=st.data())
def test_multimodal_language_model_params_equal_hf(model_type, data):
    raw = data.draw(MULTIMODAL[model_type], label="config.json")
    assert count_params(from_hf_dict(raw)).total == language_model_numel(raw)
    assert count_params(from_hf_dict({"model_type": model_type})).total == \
        language_model_numel({"model_type": model_type})


@pytest.mark.live
@pytest.mark.parametrize("model_type", sorted(STRATEGIES))
@SETTINGS
@given(data=st.data())
def test_params_and_training_flops_equal_hf(model_type, data, hf_answers):
    raw = data.draw(STRATEGIES[model_type], label="config.json")
    cfg = from_hf_dict(raw)
    assert count_params(cfg).total == hf_numel(hf_answers, raw)
    batch = data.draw(st.integers(1, 2), label="batch")
    # one to three 64-token chunks; HF's cache pads a prompt shorter than the conv kernel to
    # k tokens (a decoding artefact, see tests/conformance/test_hybrids.py): at least k tokens
    seq = data.draw(st.integers(cfg.ssm_conv, 140), label="seq")
    f = count_flops(cfg, Workload(batch=batch, seq=seq))
    assert f.forward + f.backward == hf_flops(hf_answers, raw, batch, seq)


@pytest.mark.parametrize("model_type", sorted(STRATEGIES))
def test_a_config_of_defaults_counts_what_hf_builds(model_type):
    raw = {"model_type": model_type}
    assert count_params(from_hf_dict(raw)).total == numel(hf_causal_lm(raw))


@pytest.mark.parametrize("model_type", sorted(STRATEGIES))
@settings(max_examples=max(3, EXAMPLES // 2), deadline=None, derandomize=True,
          suppress_health_check=list(HealthCheck))
@given(data=st.data())
def test_serving_state_after_generate_equals_hf_cache(model_type, data):
    """KV of the attention layers + each Gated DeltaNet layer's conv state (C x k) and
    recurrent state (Hv x dk x dv): the bytes HF's cache holds after generate() (tiny fp32
    models on the CPU)."""
    import warnings
    raw = data.draw(STRATEGIES[model_type], label="config.json")
    cfg = from_hf_dict(raw)
    batch = data.draw(st.integers(1, 2), label="batch")
    prompt = data.draw(st.integers(1, 6), label="prompt")
    new = data.draw(st.integers(1, 3), label="new tokens")
    torch.manual_seed(0)
    model = hf_causal_lm(raw, "cpu").eval()
    ids = torch.randint(0, cfg.vocab_size, (batch, prompt))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        out = model.generate(ids, max_new_tokens=new, min_new_tokens=new, do_sample=False,
                             return_dict_in_generate=True, pad_token_id=0)
    context = prompt + new - 1  # the last token generated is never fed back
    assert cache_bytes(out.past_key_values) == kv_cache_bytes(cfg, context, batch, "fp32")


@pytest.mark.parametrize("model_type", sorted(STRATEGIES) + sorted(HYBRID_STRATEGIES))
@settings(max_examples=max(3, EXAMPLES // 4), deadline=None, derandomize=True,
          suppress_health_check=list(HealthCheck))
@given(data=st.data())
def test_bf16_serving_state_keeps_the_recurrent_state_in_fp32(model_type, data):
    """A bf16 model's cache: keys, values and conv states in bf16, the SSM / recurrent state
    in fp32 (HF's cache; the Mamba kernels and FLA do the same), for every hybrid type."""
    import warnings
    strategy = STRATEGIES.get(model_type) or HYBRID_STRATEGIES[model_type]
    raw = data.draw(strategy, label="config.json")
    cfg = from_hf_dict(raw)
    batch = data.draw(st.integers(1, 2), label="batch")
    prompt = data.draw(st.integers(1, 6), label="prompt")
    new = data.draw(st.integers(1, 3), label="new tokens")
    torch.manual_seed(0)
    model = hf_causal_lm(raw, "cpu").to(torch.bfloat16).eval()
    ids = torch.randint(0, cfg.vocab_size, (batch, prompt))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        out = model.generate(ids, max_new_tokens=new, min_new_tokens=new, do_sample=False,
                             return_dict_in_generate=True, pad_token_id=0)
    assert cache_bytes(out.past_key_values) == \
        kv_cache_bytes(cfg, prompt + new - 1, batch, "bf16")


# --- the reference model (reference/model.py) builds the same mixers under the engine's paths --


@pytest.mark.parametrize("model_type", sorted(STRATEGIES))
@settings(max_examples=max(3, EXAMPLES // 2), deadline=None, derandomize=True,
          suppress_health_check=list(HealthCheck))
@given(data=st.data())
def test_reference_model_params_flops_and_saved_bytes_equal_the_engine(model_type, data):
    cfg = from_hf_dict(data.draw(STRATEGIES[model_type], label="config.json"))
    batch = data.draw(st.integers(1, 2), label="batch")
    seq = data.draw(st.integers(1, 140), label="seq")  # one chunk of 64 or several
    assert_reference_equals_engine(cfg, batch, seq)


@pytest.mark.parametrize("S", [5, 64, 150])
def test_reference_gated_delta_rule_computes_what_hf_computes(S):
    """The reference's chunked gated delta rule is the real algorithm: its output equals HF's
    torch path (``torch_chunk_gated_delta_rule``, L2-normed q and k) on random CPU values,
    with grouped key heads (Hk = 2 serving Hv = 4 value heads), over one or several chunks."""
    import torch.nn.functional as F
    from transformers.models.qwen3_next.modeling_qwen3_next import torch_chunk_gated_delta_rule

    from reference.ssm import GDNScan
    torch.manual_seed(0)
    b, Hv, Hk, dk, dv = 2, 4, 2, 3, 5
    scan = GDNScan(Hv, Hk, dk, dv, 64, torch.float32)
    with torch.no_grad():
        scan.dt_bias.normal_(), scan.A_log.uniform_(0, 1)
    q, k = torch.randn(b, S, Hk, dk), torch.randn(b, S, Hk, dk)
    v, a, beta_in = torch.randn(b, S, Hv, dv), torch.randn(b, S, Hv), torch.randn(b, S, Hv)
    g = -scan.A_log.float().exp() * F.softplus(a + scan.dt_bias)
    hf, _ = torch_chunk_gated_delta_rule(q, k, v, g=g, beta=beta_in.sigmoid(),
                                         use_qk_l2norm_in_kernel=True)
    torch.testing.assert_close(scan(q, k, v, a, beta_in), hf)


BAD_CONFIGS = [
    ({"model_type": "qwen3_next", "num_hidden_layers": 2,
      "layer_types": ["linear_attention", "sliding_attention"]}, "layer_types"),
    ({"model_type": "qwen3_next", "linear_num_key_heads": 3, "linear_num_value_heads": 4},
     r"ssm_heads \(4: value heads\) must be divisible by ssm_groups \(3: key heads\)"),
    ({"model_type": "qwen3_next", "linear_key_head_dim": 0}, "linear_key_head_dim"),
]


@pytest.mark.parametrize("raw,match", BAD_CONFIGS, ids=[m[:20] for _, m in BAD_CONFIGS])
def test_bad_configs_are_config_errors_naming_the_field(raw, match):
    from txcalc.errors import ConfigError
    with pytest.raises(ConfigError, match=match):
        from_hf_dict(raw)


# --- config files holding Infinity (transformers writes time_step_limit [0.0, Infinity]) ------


DATA = __import__("pathlib").Path(__file__).parents[1] / "data" / "hf"


@pytest.mark.parametrize("name", ["falcon-h1-34b", "nemotron-h-56b"])
def test_a_real_config_with_infinity_loads_and_equals_its_preset(name, capsys):
    """Mamba-2 hybrids' configs hold ``"time_step_limit": [0.0, Infinity]`` (Python's
    json.dumps of HF's default): the CLI reads them; the count equals the preset's and HF's."""
    import json

    import txcalc
    from txcalc.cli import main

    from ..hf_models import hf_model
    text = (DATA / f"{name}.json").read_text()
    assert "Infinity" in text
    assert main(["params", str(DATA / f"{name}.json"), "--json"]) == 0
    total = json.loads(capsys.readouterr().out)
    assert txcalc.params(txcalc.load(DATA / f"{name}.json")).total == txcalc.params(name).total
    assert txcalc.params(name).total == numel(hf_model(json.loads(text)))
    assert total  # a JSON answer, strict (no Infinity reaches stdout)


@pytest.mark.parametrize("field,token", [("hidden_size", "Infinity"),
                                         ("mamba_d_state", "-Infinity"),
                                         ("num_key_value_heads", "Infinity"),
                                         ("time_step_limit", "NaN")])
def test_infinity_in_a_field_txcalc_reads_is_refused_naming_it(tmp_path, capsys, field, token):
    """An infinity is accepted only where txcalc reads nothing (time_step_limit): in a size or
    a probability it is a one-line error naming the field and the value as the file spells
    it; NaN is refused everywhere (no HF default is NaN)."""
    import json

    from txcalc.cli import main
    raw = json.loads((DATA / "falcon-h1-34b.json").read_text())
    raw[field] = "@TOKEN@"
    p = tmp_path / "config.json"
    p.write_text(json.dumps(raw).replace('"@TOKEN@"', token))
    assert main(["params", str(p)]) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err and len(err.splitlines()) == 1, err
    assert token in err and (field in err or token == "NaN"), err
