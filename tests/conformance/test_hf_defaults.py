"""Importer defaults follow HF exactly: a config written in full (``to_dict()``: every field)
and the same config written as the Hub stores it (``to_diff_dict()``: only the fields that
differ from the class defaults) import to the same ModelConfig, for every supported model type.

The configs come from the per-type strategies of the HF parity tests (REGISTRY in
tests/conformance/strategies/); each is first built by the HF configuration class, which fills
in its defaults, and then written both ways.
"""

from __future__ import annotations

import os
import warnings

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from txcalc.errors import ConfigError
from txcalc.model.hf import CONVERTERS, from_hf_dict

from ..hf_models import hf_config
from .strategies import REGISTRY as STRATEGIES

EXAMPLES = max(3, int(os.environ.get("TXCALC_HF_EXAMPLES", "50")) // 5)


def test_every_supported_type_is_written_both_ways():
    assert set(STRATEGIES) == set(CONVERTERS)


def written(raw: dict) -> tuple[dict, dict]:
    """The config.json HF writes for ``raw``: in full and with only non-default fields."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        cfg = hf_config(raw)
        full, diff = cfg.to_dict(), cfg.to_diff_dict()
    for d in (full, diff):
        d["model_type"] = raw["model_type"]  # to_diff_dict keeps it; to be sure for both
    return full, diff


def imported(raw: dict):
    try:
        return from_hf_dict(raw)
    except ConfigError as e:
        return f"ConfigError: {e}"


@pytest.mark.parametrize("model_type", sorted(STRATEGIES))
@settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=list(HealthCheck),
          derandomize="TXCALC_HF_EXAMPLES" not in os.environ)
@given(data=st.data())
def test_full_and_diff_config_json_import_the_same(model_type, data):
    raw = data.draw(STRATEGIES[model_type], label="config.json")
    full, diff = written(raw)
    assert imported(full) == imported(diff)
    if not (model_type == "t5" and raw.get("tie_word_embeddings") is False):
        # T5Config forces a tied head; txcalc counts the untied head such checkpoints store
        # (tests/conformance/test_hf_drawn_configs.py expected_total), which the rewritten config no longer says
        assert imported(full) == imported(raw)
