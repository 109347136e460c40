"""Every time, MFU, day and GPU-hour answer of `plan train` carries the error band of
timing.TIME_RATIO_BAND (10th-90th percentile of measured / predicted step time over the
published test runs, tests/published/test_training_validation.py): in the library, the JSON, the CLI
text and the report (text and the frontier plot's data)."""

from __future__ import annotations

import json

import pytest

from txcalc import load
from txcalc.engine import timing
from txcalc.cli import main
from txcalc.train.planner import plan_train


@pytest.fixture(scope="module")
def plan():
    return plan_train(load("llama-3-8b"), "a100", 10**12, days=60, price_per_gpu_hour=2.0,
                      n_rows=2)


def test_rows_carry_the_band(plan):
    lo, hi = timing.TIME_RATIO_BAND
    assert lo < 1 < hi  # measured runs fell on both sides of the prediction
    for r in plan.rows:
        assert r.days_band == pytest.approx((r.days * lo, r.days * hi))
        assert r.gpu_hours_band == pytest.approx((r.gpu_hours * lo, r.gpu_hours * hi))
        assert r.cost_band == pytest.approx((r.cost * lo, r.cost * hi))
        assert r.mfu_band == pytest.approx((r.mfu / hi, r.mfu / lo))
        assert r.step_time_s_band[0] < r.step_time_s < r.step_time_s_band[1]


def test_json_has_low_and_high_of_every_answer(plan):
    d = json.loads(json.dumps(plan.to_json()))
    for k in ("days", "gpu_hours", "cost", "mfu"):
        assert d[f"{k}_low"] < d[k] < d[f"{k}_high"], k
    for k in ("step_time_s", "days", "gpu_hours", "mfu", "tokens_per_s"):
        assert d["best"][f"{k}_low"] < d["best"][k] < d["best"][f"{k}_high"], k
    assert d["band"]["runs"] == timing.TIME_BAND_RUNS
    assert (d["band"]["ratio_low"], d["band"]["ratio_high"]) == timing.TIME_RATIO_BAND


def test_a_given_throughput_has_no_band():
    p = plan_train(load("gpt3-175b"), "a100-80gb", 300 * 10**9, gpus=1024, seq=2048,
                   global_batch=1536, achieved_tflops=140, only={"recompute": "full"},
                   attn_impl="eager", n_rows=1)
    d = p.to_json()
    assert d["days_low"] == d["days"] == d["days_high"] and d["band"]["runs"] == 0


def test_cli_prints_the_band(capsys):
    assert main(["plan", "train", "llama-3-8b", "--tokens", "1T", "--gpu", "a100", "--days",
                 "60", "--rows", "1"]) == 0
    out = capsys.readouterr().out
    assert "band (80% of" in out and " days, " in out and "MFU" in out
    assert main(["plan", "train", "llama-3-8b", "--tokens", "1T", "--gpu", "a100", "--days",
                 "60", "--rows", "1", "--json"]) == 0
    d = json.loads(capsys.readouterr().out)
    assert d["days_low"] < d["days"] < d["days_high"]


def test_report_text_and_frontier_data_carry_the_band():
    from pathlib import Path
    rep = Path(__file__).parents[2] / "reports" / "llama-3.1-405b-train-h100"
    data = json.loads((rep / "report.json").read_text())["data"]
    for p in data["plan"]["frontier"]:  # what plots._frontier shades
        assert p["days_low"] < p["days"] < p["days_high"]
    b = data["plan"]["best"]
    assert f"Error band: {b['days_low']:,.1f} to {b['days_high']:,.1f} days" in \
        (rep / "report.md").read_text()
