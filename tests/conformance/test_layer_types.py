"""ParamCounts.by_layer_type against Hugging Face's per-block parameter counts.

A row of the per-layer-type table says "``layers`` blocks of ``params_per_layer`` parameters
each". Blocks that share a ``layer_type`` label but not their parameters (ModernBERT's block 0
has no attention norm, its later global-attention blocks do) must not be counted as copies of
the first: the reference is the HF model on the meta device, its parameters summed per
``layers.<i>.`` module (tied weights once), nothing of txcalc's formulas.
"""

from __future__ import annotations

import re
from collections import Counter

import pytest
from hypothesis import given

from txcalc.engine.accounting import count_params
from txcalc.model.hf import from_hf_dict
from txcalc.model.presets import PRESETS

from ..hf_models import hf_model, numel
from .strategies.encoders import modernbert
from tests.conformance.test_encoders import SETTINGS


def hf_blocks(raw: dict) -> tuple[Counter, int, int]:
    """(Counter of the HF blocks' parameter counts, parameters outside the blocks, total)."""
    model = hf_model(raw)
    per_block: dict[int, int] = {}
    outside = 0
    for name, p in model.named_parameters():  # tied parameters once
        m = re.match(r"layers\.(\d+)\.", name)
        if m:
            per_block[int(m.group(1))] = per_block.get(int(m.group(1)), 0) + p.numel()
        else:
            outside += p.numel()
    return Counter(per_block.values()), outside, numel(model)


def check_rows(raw: dict) -> list[dict]:
    counts = count_params(from_hf_dict(raw))
    rows = counts.by_layer_type()
    blocks, outside, total = hf_blocks(raw)
    got = Counter()
    for r in rows[:-1]:
        assert r["params"] == r["layers"] * r["params_per_layer"], r
        got[r["params_per_layer"]] += r["layers"]
    assert got == blocks  # every block's count, as HF counts it
    assert rows[-1]["layer_type"] == "outside blocks" and rows[-1]["params"] == outside
    assert sum(r["params"] for r in rows) == counts.total == total
    return rows


def test_modernbert_first_block_is_a_row_of_its_own():
    """7 blocks, global attention on 0, 3, 6: block 0 (no attn_norm) and blocks 3, 6 share
    the label "dense" but not their parameter count."""
    raw = {"model_type": "modernbert", "hidden_size": 32, "num_attention_heads": 4,
           "num_hidden_layers": 7, "vocab_size": 64, "intermediate_size": 24,
           "global_attn_every_n_layers": 3, "pad_token_id": 0, "eos_token_id": 1,
           "bos_token_id": 2, "cls_token_id": 3, "sep_token_id": 4}
    rows = check_rows(raw)
    assert [(r["layer_type"], r["layers"], r["first_layer"]) for r in rows] == [
        ("dense (layer 0)", 1, 0), ("dense", 2, 3), ("dense window 64", 4, 1),
        ("outside blocks", 0, -1)]
    # the attention norm of one block, without a bias (norm_bias defaults to False)
    assert rows[1]["params_per_layer"] - rows[0]["params_per_layer"] == 32


@SETTINGS
@given(raw=modernbert())
def test_modernbert_layer_types_equal_hf(raw):
    check_rows(raw)


@pytest.mark.parametrize("name", sorted(PRESETS))
def test_every_preset_layer_type_rows_sum_to_the_total(name):
    """For every preset: the rows (layers x params per layer, and outside the blocks) add up
    to count_params' total, which tests/test_presets*.py check against HF and published
    counts."""
    counts = count_params(PRESETS[name])
    rows = counts.by_layer_type()
    assert all(r["params"] == r["layers"] * r["params_per_layer"] for r in rows[:-1])
    assert sum(r["params"] for r in rows) == counts.total
