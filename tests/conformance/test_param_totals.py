"""``param_totals`` (each kind of block built once: what ``txcalc presets`` prints) gives the
same (total, active) as ``count_params`` (every block built) for every preset and for configs
drawn for every supported model_type: ``block_kind`` never groups two blocks whose
parameters differ. ``count_params`` itself is checked against HF's models elsewhere
(test_presets*.py, the per-type parity tests)."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from txcalc.engine.accounting import count_params, param_totals
from txcalc.errors import ConfigError
from txcalc.model.hf import from_hf_dict
from txcalc.model.presets import PRESETS

from ..ref_configs import configs
from .strategies import REGISTRY as STRATEGIES


def both(cfg) -> tuple[tuple[int, int], tuple[int, int]]:
    full = count_params(cfg)
    return param_totals(cfg), (full.total, full.active)


@pytest.mark.parametrize("name", sorted(PRESETS))
def test_every_preset(name):
    fast, full = both(PRESETS[name])
    assert fast == full


def test_a_first_block_without_attn_norm():
    """Block 0 is a kind of its own: without ``first_attn_norm`` it has no attn_norm (GPT-2
    has learned positions, so block 0 is not the rotary one either)."""
    cfg = PRESETS["gpt2"].replace(first_attn_norm=False)
    fast, full = both(cfg)
    assert fast == full and full[0] < count_params(PRESETS["gpt2"]).total


@settings(max_examples=40, deadline=None)
@given(cfg=configs())
def test_random_configs(cfg):
    fast, full = both(cfg)
    assert fast == full


@pytest.mark.parametrize("model_type", sorted(STRATEGIES))
@settings(max_examples=3, deadline=None, suppress_health_check=list(HealthCheck))
@given(data=st.data())
def test_every_model_type(model_type, data):
    raw = data.draw(STRATEGIES[model_type], label="config.json")
    try:
        cfg = from_hf_dict(raw)
    except ConfigError:
        assume(False)
    fast, full = both(cfg)
    assert fast == full


def test_presets_command_prints_the_full_counts(capsys):
    import json

    from txcalc.cli import main
    assert main(["presets", "--json"]) == 0
    rows = {row["name"]: (row["total_params"], row["active_params"])
            for row in json.loads(capsys.readouterr().out)["presets"]}
    assert rows == {n: (count_params(c).total, count_params(c).active)
                    for n, c in PRESETS.items()}
