"""The serving plan's fast screen (txcalc/serve/screen.py): every floor is below what the
simulator returns (the independent reference is ``serving_sim.simulate`` itself, run on the
cases), and a screened search gives the unscreened search's answer."""

from __future__ import annotations

import math

import pytest

from txcalc import load
from txcalc.serve import screen as S
from txcalc.serve.batching import offered_rate
from txcalc.serve.plan import KEEP_UP, plan_serving
from txcalc.serve.sim import simulate, step_model

#: (model, gpu, tp, ep, prompt, output, chunk, rate): dense and MoE, TP and EP, short and
#: long prompts, chunks smaller and larger than the prompt
CASES = [("llama-3-8b", "h100", 1, 1, 2000, 200, 512, 6.0),
         ("llama-3-8b", "h100", 2, 1, 700, 50, 8192, 40.0),
         ("mixtral-8x7b", "h100", 2, 2, 1000, 100, 2048, 3.0),
         ("llama-3.2-3b", "l40s", 1, 1, 4000, 30, 2048, 1.5)]


@pytest.mark.parametrize("model, gpu, tp, ep, n_in, n_out, chunk, rate", CASES)
def test_floors_lie_below_the_simulation(model, gpu, tp, ep, n_in, n_out, chunk, rate):
    sm = step_model(load(model), gpu, tp=tp, ep=ep, max_model_len=n_in + n_out,
                    max_num_batched_tokens=chunk)
    n = 200
    for out, decode_only in ((n_out, False), (1, False), (n_out, True)):
        r = simulate(sm, n, n_in, out, rate=rate, max_num_batched_tokens=chunk, seed=3,
                     decode_only=decode_only)
        assert offered_rate(n, rate) == r.offered_rate
        floor = S.duration_floor_s(sm, n, n_in, out, chunk, 256, decode_only)
        # the screen compares with a margin of MARGIN (rounding: a lone prompt's TTFT equals
        # its floor up to the order of the sums)
        assert 0 < floor <= r.duration_s * (1 + S.MARGIN)
        if not decode_only:
            assert S.ttft_floor_s(sm, n_in, chunk) <= r.ttft_s.min() * (1 + S.MARGIN)
        if out > 1:
            assert S.step_floor_s(sm) <= r.itl_values_s.min() * (1 + S.MARGIN)
    # overloaded (every request at once, 10x the rate): the floor still holds, and is tight
    # enough to screen out a replica that far from keeping up
    r = simulate(sm, n, n_in, n_out, rate=math.inf, max_num_batched_tokens=chunk)
    assert S.duration_floor_s(sm, n, n_in, n_out, chunk, 256) <= r.duration_s * (1 + S.MARGIN)
    cap = r.requests_per_s
    assert S.cannot_keep_up(sm, n, n_in, n_out, 20 * cap, chunk, 256, KEEP_UP)
    res = simulate(sm, n, n_in, n_out, rate=20 * cap, max_num_batched_tokens=chunk)
    assert res.requests_per_s < KEEP_UP * min(20 * cap, res.offered_rate)


@pytest.mark.parametrize("model, gpu, n_in, n_out, kw", [
    ("mixtral-8x7b", "h100", 1000, 100, dict(rate=4, ttft_p99_s=1)),
    ("llama-3.2-3b", "l40s", 1000, 100, dict(rate=3, ttft_p99_s=1, itl_p99_s=0.02)),
    ("llama-3.2-3b", "h100", 6000, 100, dict(rate=2, ttft_p99_s=1.5, itl_p99_s=0.012)),
])
def test_screened_search_gives_the_unscreened_answer(model, gpu, n_in, n_out, kw):
    a = plan_serving(load(model), gpu, n_in, n_out, price_per_gpu_hour=2.0, **kw)
    b = plan_serving(load(model), gpu, n_in, n_out, price_per_gpu_hour=2.0, screen=False, **kw)
    assert a.best.to_json() == b.best.to_json()
    # every row the screen kept is a row of the full search, with the same numbers
    full = {(r.tp, r.pp, r.ep, r.mode): r.to_json() for r in b.rows}
    assert all(full[(r.tp, r.pp, r.ep, r.mode)] == r.to_json() for r in a.rows)
    assert len(a.rows) < len(b.rows) and any("screened out" in n for n in a.notes)


def test_the_screen_stays_out_of_other_searches():
    """Pinned replicas, closed loops and prefix caching are searched as before."""
    a = plan_serving(load("llama-3.2-3b"), "l40s", 1000, 100, concurrency=8, itl_p99_s=0.03)
    b = plan_serving(load("llama-3.2-3b"), "l40s", 1000, 100, concurrency=8, itl_p99_s=0.03,
                     screen=False)
    assert [r.to_json() for r in a.rows] == [r.to_json() for r in b.rows]
