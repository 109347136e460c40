"""Every preset against its HF config.json and the HF model on the meta device."""

import json
from pathlib import Path

import pytest

import txcalc
from txcalc.model.presets import PRESETS

from ..hf_models import hf_model, numel
from tests.conformance.test_hf_drawn_configs import expected_total

DATA = Path(__file__).parents[1] / "data" / "hf"
WITH_HF = sorted(p.stem for p in DATA.glob("*.json"))


def test_every_preset_with_a_hf_class_has_its_config_json():
    assert set(WITH_HF) == set(PRESETS) - {"gpt3-175b"}


@pytest.mark.parametrize("name", WITH_HF)
def test_preset_equals_its_hf_import(name):
    imported = txcalc.load(DATA / f"{name}.json")
    preset = PRESETS[name]
    assert txcalc.params(imported).total == txcalc.params(preset).total
    for field in ("n_layers", "d_model", "n_heads", "n_kv_heads", "head_dim", "d_ff",
                  "vocab_size", "n_experts", "top_k", "tie_embeddings", "family", "activation",
                  "sliding_window", "global_every", "sliding_layers", "embed_dropout",
                  "attn_dropout", "resid_dropout", "mlp_dropout", "final_dropout"):
        assert getattr(imported, field) == getattr(preset, field), field


@pytest.mark.parametrize("name", WITH_HF)
def test_preset_params_equal_hf_model_on_meta(name):
    raw = json.loads((DATA / f"{name}.json").read_text())
    # expected_total: HF's numel, plus the lm_head that transformers 5 drops from untied T5
    # and mT5 checkpoints (flan-t5-xxl, mt5-xxl store one; see test_hf_drawn_configs.expected_total)
    assert txcalc.params(name).total == expected_total(raw, hf_model(raw))


# Published totals, each with its source. Where the paper rounds, the tolerance says how much.
PUBLISHED = [
    # Brown et al. 2020, arXiv:2005.14165, Table 2.1: "175.0B" (our exact count: 174.6B, the
    # paper's figure rounds up; 0.3% covers it)
    ("gpt3-175b", 175.0e9, 0.003),
    # DeepSeek-V3 technical report, arXiv:2412.19437, abstract: 671B total parameters
    ("deepseek-v3", 671e9, 0.001),
    # Llama 3 herd paper, arXiv:2407.21783, Table 3: 405B
    ("llama-3.1-405b", 405e9, 0.005),
    # Devlin et al. 2018, arXiv:1810.04805, section 3: BERT-base 110M, BERT-large 340M
    ("bert-base-uncased", 110e6, 0.01),
    # (BERT-large counts 335.1M: the paper rounds 335M to 340M, 1.4%)
    ("bert-large-uncased", 340e6, 0.015),
    # Mixtral paper, arXiv:2401.04088, section 2: 47B total, 13B active
    ("mixtral-8x7b", 47e9, 0.01),
    # Jamba-1.5 paper, arXiv:2408.12570, abstract and Table 1: 398B total (exact: 398.56B)
    ("jamba-1.5-large", 398e9, 0.002),
    # Falcon-H1 report, arXiv:2507.22448, and model card: 34B (exact 33.64B: rounded, 1.1%)
    ("falcon-h1-34b", 34e9, 0.011),
    # Nemotron-H report, arXiv:2504.03624, and model card: 56B (exact 56.32B: rounded, 0.6%)
    ("nemotron-h-56b", 56e9, 0.006),
    # Qwen3-Next blog (qwenlm.github.io/blog/qwen3_next): 80B total (exact 79.67B, 0.4%)
    ("qwen3-next-80b-a3b", 80e9, 0.005),
]


@pytest.mark.parametrize("name,figure,tol", PUBLISHED)
def test_published_totals(name, figure, tol):
    assert abs(txcalc.params(name).total - figure) / figure <= tol


def test_published_active_params():
    # DeepSeek-V3: 37B activated per token (arXiv:2412.19437); Mixtral: 13B (arXiv:2401.04088)
    assert abs(txcalc.params("deepseek-v3").active - 37e9) / 37e9 < 0.02
    assert abs(txcalc.params("mixtral-8x7b").active - 13e9) / 13e9 < 0.01


def test_jamba_1_5_large_active_params_and_kv_cache_at_256k():
    """arXiv:2408.12570: 94B active parameters; Table 1: a 9 GB KV cache (16-bit) for one
    256K-token sequence: 9 attention layers x 2 x 8 KV heads x 128 x 262,144 tokens x 2 bytes
    = 9.0 GiB (the paper's GB are GiB), plus 41 MB of Mamba conv and SSM state."""
    from txcalc.engine.kvcache import kv_cache_bytes
    assert abs(txcalc.params("jamba-1.5-large").active - 94e9) / 94e9 < 0.002
    kv = kv_cache_bytes(txcalc.load("jamba-1.5-large"), 262144, 1, "bf16")
    assert abs(kv / 2**30 - 9) / 9 < 0.01


def test_gpt3_175b_by_hand_against_the_12Ld2_rule():
    # Kaplan et al. 2020 (arXiv:2001.08361) rule of thumb: non-embedding ~ 12 * L * d^2
    p = txcalc.params("gpt3-175b")
    rule = 12 * 96 * 12288 ** 2
    assert 0 < (p.total - p.embedding) - rule < 0.001 * rule


def test_replace_derives_derived_fields_again():
    """A field still at its derived value follows the fields it derives from; one set on
    purpose (Llama's 8 KV heads, its 14336-wide MLP) stays."""
    cfg = txcalc.load("llama-3-8b").replace(d_model=256, n_heads=8)
    assert (cfg.embed_dim, cfg.head_dim) == (256, 32)
    assert (cfg.n_kv_heads, cfg.d_ff) == (8, 14336)
    assert txcalc.load("gpt2").replace(d_model=128).d_ff == 512
    assert txcalc.load("gpt2").replace(d_model=128, d_ff=300).d_ff == 300
