"""Goodput: the planner's wall-clock days, GPU-hours and cost are throughput time / goodput
(timing.GOODPUT = 0.90, Grattafiori et al. 2024, arXiv:2407.21783, section 3.3.4: "higher than
90% effective training time"); step time, MFU and tokens/s are throughput, and the published
benchmark runs (txcalc.train.published_runs) are compared without it."""

from __future__ import annotations

import json

import pytest

from txcalc import load
from txcalc.engine import timing
from txcalc.cli import main
from txcalc.inputs import InputError
from txcalc.train.planner import plan_train

KW = dict(seq=4096, global_batch=512, gpus=64, only={"tp": 1, "pp": 1, "cp": 1, "zero": 3,
                                                      "micro_batch": 1, "recompute": "full"})


def test_days_and_gpu_hours_are_throughput_time_over_goodput():
    cfg = load("llama-3-8b")
    full = plan_train(cfg, "h100", 10**12, goodput=1.0, price_per_gpu_hour=2.0, **KW).best
    half = plan_train(cfg, "h100", 10**12, goodput=0.5, price_per_gpu_hour=2.0, **KW).best
    assert full.layout == half.layout
    assert half.days == pytest.approx(2 * full.days, rel=1e-12)
    assert half.gpu_hours == pytest.approx(2 * full.gpu_hours, rel=1e-12)
    assert half.cost == pytest.approx(2 * full.cost, rel=1e-12)
    assert (half.step_time_s, half.mfu, half.tokens_per_s) == \
        (full.step_time_s, full.mfu, full.tokens_per_s)
    # and the days are the step time's: tokens / tokens per step x step / goodput
    steps = 10**12 / (512 * 4096)
    assert full.days == pytest.approx(steps * full.step_time_s / 86400, rel=1e-12)


def test_default_is_timing_goodput(monkeypatch):
    assert timing.GOODPUT == 0.90
    cfg = load("llama-3-8b")
    a = plan_train(cfg, "h100", 10**12, **KW)
    assert a.setting.goodput == timing.GOODPUT
    monkeypatch.setattr(timing, "GOODPUT", 0.45)
    b = plan_train(cfg, "h100", 10**12, **KW)
    assert b.best.days == pytest.approx(2 * a.best.days, rel=1e-12)


@pytest.mark.parametrize("bad", [0, -0.1, 1.01, float("nan"), "0.9", True])
def test_bad_goodput_is_refused(bad):
    with pytest.raises(InputError, match=r"goodput \("):
        plan_train(load("llama-3-8b"), "h100", 10**12, goodput=bad, **KW)


@pytest.mark.parametrize("bad", ["0", "1.5", "nan", "-1"])
def test_cli_bad_goodput_is_one_line_exit_2(bad, capsys):
    rc = main(["plan", "train", "llama-3-8b", "--tokens", "1T", "--gpu", "h100",
               "--goodput", bad])
    err = capsys.readouterr().err
    assert rc == 2 and "--goodput" in err and len(err.strip().splitlines()) == 1


def test_cli_json_and_text_state_the_goodput(capsys):
    args = ["plan", "train", "llama-3-8b", "--tokens", "1T", "--gpu", "h100", "--gpus", "64"]
    assert main(args + ["--goodput", "0.8", "--json"]) == 0
    r = json.loads(capsys.readouterr().out)
    assert r["goodput"] == 0.8
    assert main(args) in (0, None)
    assert "goodput 90%" in capsys.readouterr().out


def test_published_runs_are_compared_as_throughput():
    from txcalc.train.published_runs import load_runs, setting_and_layout
    for run in load_runs():
        assert setting_and_layout(run)[0].goodput == 1.0, run.id
