"""Each engine profile's batching (txcalc.serve.batching.simulate) against a small discrete-event
reference written here, request by request, from the engine's own scheduler loop (the files at
the commits serve/sched.py names):

- vllm (V1, ``Scheduler.schedule``): the running list in admission order, a decode taking 1
  token and an unfinished prompt min(its tokens left, the budget); a decode that finds no free
  slot preempts the last request of the running list (itself included) and is recomputed later
  as a prompt of its prompt + outputs; then the waiting queue FCFS while budget, seats and KV
  allow.
- vllm-v0 (``_schedule_default``): waiting prompts first, each whole within the budget, leaving
  the watermark free; a step with any prompt carries no decode; else every running request
  decodes, the last of the running list preempted while a decode finds no slot.
- sglang (``get_next_batch_to_run`` + ``PrefillAdder``): a prefill batch whenever one can be
  formed (the unfinished chunked prompt first, then waiting prompts while the chunk budget
  lasts and the tokens left cover the prompt + new_token_ratio x the outputs to come), else a
  decode batch of every running request; new_token_ratio falls after each decode batch.
- trtllm (``MicroBatchScheduler`` after ``GuaranteedNoEvictScheduler``): a request becomes
  active when seats and its whole sequence's KV (prompt + outputs) fit; each step walks the
  active list in order, a generating request taking 1 token, a context request its whole
  prompt, and the first prompt that overflows max_num_tokens ends the step.

The reference keeps per-request objects and the engine's lists; the simulator keeps sums and a
heap. Both use the same stand-in step cost (``Cost``), so the steps (their tokens, decodes,
sequences, graph padding) must agree exactly, and every request's TTFT, end-to-end latency and
inter-token gaps with them. The scenarios load each profile past its KV cache and its token
budget, so prefill stalls, chunking, whole-prompt breaks and preemption all occur (asserted).
"""

from __future__ import annotations

import math
from collections import deque

import numpy as np
import pytest

from txcalc.serve.batching import poisson_arrivals, simulate
from txcalc.serve.sched import ENGINE_PROFILES, scheduler


class Cost:
    """A stand-in StepModel: a step's seconds as a fixed mix of its arguments (the schedule,
    not the cost, is under test); it records every step."""

    def __init__(self, kv_capacity_tokens: int):
        self.kv_capacity_tokens = kv_capacity_tokens
        self.steps = []

    def step_s(self, tokens, logit_rows, pairs, kv_read, kv_read_bytes=None, *, seqs=0,
               padded_tokens=None, eager=False):
        self.steps.append((tokens, logit_rows, pairs, kv_read, seqs, padded_tokens, eager))
        return (1e-3 + 2e-5 * max(tokens, padded_tokens or 0) + 1e-9 * pairs + 3e-7 * kv_read
                + 1e-4 * seqs + (2e-3 if eager else 0.0))


class Req:
    def __init__(self, i, arrive, ins, outs):
        self.i, self.arrive, self.ins, self.outs = i, arrive, ins, outs
        self.plen = ins  # tokens to prefill (prompt, + outputs after a preemption)
        self.done = 0  # of plen, computed
        self.gen = 0  # outputs made
        self.held = 0  # KV tokens held
        self.times = []  # each output token's time

    @property
    def decoding(self):
        return self.done == self.plen


def reference(name, cap, arrive, ins, outs, budget, max_seqs):
    """The engine's loop, request by request (module docstring). Returns (steps, requests,
    preemptions), steps as Cost records them."""
    s = scheduler(name)
    reqs = [Req(i, a, int(x), int(y)) for i, (a, x, y) in enumerate(zip(arrive, ins, outs))]
    cost = Cost(cap)
    waiting, running = deque(), []
    free, t, nxt, pre = cap, 0.0, 0, 0
    ratio = s.ratio_init
    watermark = int(s.watermark * cap)
    reserve = s.kv == "reserve"

    def preempt(victim):
        nonlocal free, pre
        running.remove(victim)
        free += victim.held
        victim.held, victim.done = 0, 0
        victim.plen = victim.ins + victim.gen
        waiting.appendleft(victim)
        pre += 1

    def take_slot(r) -> bool:
        """A decode's KV slot: the last running request (``r`` itself included) preempted
        until one is free; False when ``r`` was."""
        nonlocal free
        while free < 1:
            preempt(running[-1])
            if r not in running:
                return False
        free -= 1
        r.held += 1
        return True

    while any(r.gen < r.outs for r in reqs):
        while nxt < len(reqs) and reqs[nxt].arrive <= t:
            waiting.append(reqs[nxt])
            nxt += 1
        sched = []  # (request, tokens this step)
        if name == "vllm":
            left = budget
            for r in list(running):  # noqa: PERF101  (preemption removes from running)
                if r not in running:
                    continue  # preempted by an earlier request of this pass
                if r.decoding:
                    if take_slot(r):
                        sched.append((r, 1))
                        left -= 1
                elif left > 0:
                    c = min(r.plen - r.done, left)
                    sched.append((r, c))
                    left -= c
            while waiting and left > 0 and len(running) < max_seqs:
                r = waiting[0]
                if r.plen > free:
                    break
                waiting.popleft()
                free -= r.plen
                r.held = r.plen
                running.append(r)
                c = min(r.plen, left)
                sched.append((r, c))
                left -= c
        elif name == "vllm-v0":
            left = budget
            while waiting and len(running) < max_seqs:
                r = waiting[0]
                if r.plen > left or free - r.plen < watermark:
                    break
                waiting.popleft()
                free -= r.plen
                r.held = r.plen
                running.append(r)
                sched.append((r, r.plen))
                left -= r.plen
            if not sched:
                for r in list(running):  # noqa: PERF101  (preemption removes from running)
                    if r in running and take_slot(r):
                        sched.append((r, 1))
        elif name == "sglang":
            left = budget
            for r in running:  # the chunked prompt still being prefilled
                if not r.decoding:
                    c = min(r.plen - r.done, left)
                    sched.append((r, c))
                    left -= c
            to_come = sum(r.outs - r.gen for r in running)
            while waiting and left > 0 and len(running) < max_seqs:
                r = waiting[0]
                if r.plen + ratio * (r.outs - r.gen + to_come) > free:
                    break
                waiting.popleft()
                free -= r.plen
                r.held = r.plen
                to_come += r.outs - r.gen
                running.append(r)
                c = min(r.plen, left)
                sched.append((r, c))
                left -= c
            if not sched:
                while running and free < len(running):
                    preempt(running[-1])
                for r in running:
                    free -= 1
                    r.held += 1
                    sched.append((r, 1))
                if sched:
                    ratio = max(s.ratio_min, ratio - s.ratio_decay)
        else:  # trtllm
            while waiting and len(running) < max_seqs and \
                    waiting[0].ins + waiting[0].outs <= free:
                r = waiting.popleft()
                free -= r.ins + r.outs
                r.held = r.ins + r.outs
                running.append(r)
            left = budget
            for r in running:
                n = 1 if r.decoding else r.plen - r.done
                if n > left:
                    break
                sched.append((r, n))
                left -= n
        if not sched:
            t = reqs[nxt].arrive
            continue
        # the step: the simulator's argument order (decodes, then prompts)
        dec = [r for r, c in sched if r.decoding]
        pf = [(r, c) for r, c in sched if not r.decoding]
        tokens = len(dec) + sum(c for _, c in pf)
        ctx = sum(r.ins + r.gen for r in dec)
        pairs = ctx + sum(c * r.done + c * (c + 1) // 2 for r, c in pf)
        kv_read = ctx + sum(r.done for r, _ in pf)
        logits = len(dec) + sum(1 for r, c in pf if r.done + c == r.plen)
        pad = s.graph_batch(tokens) if dec and not pf else None
        t += cost.step_s(tokens, logits, pairs, kv_read, seqs=len(sched), padded_tokens=pad,
                         eager=pad is None)
        for r in dec:
            r.gen += 1
            r.times.append(t)
        for r, c in pf:
            r.done += c
            if r.done == r.plen:
                r.gen += 1
                r.times.append(t)
        for r in [r for r, _ in sched if r.gen == r.outs]:
            running.remove(r)
            free += r.held if not reserve else r.ins + r.outs
    return cost.steps, reqs, pre


#: (profile, KV tokens, rate, token budget, max seqs, longest output): the first four load
#: the profile past its KV cache (long outputs: SGLang's new_token_ratio falls until its
#: decodes outgrow the cache), the last four past its seats and token budget
SCENARIOS = [("vllm", 6000, 40.0, 512, 64, 120), ("vllm-v0", 6000, 40.0, 2048, 64, 120),
             ("sglang", 6000, 40.0, 512, 64, 2000), ("trtllm", 6000, 40.0, 2048, 64, 120),
             ("vllm", 60000, 15.0, 256, 8, 120), ("vllm-v0", 60000, 15.0, 2048, 8, 120),
             ("sglang", 60000, 15.0, 256, 8, 120), ("trtllm", 60000, 15.0, 1200, 8, 120)]


def _trace(rate, outs_hi, n=60):
    rng = np.random.default_rng(7)
    ins, outs = rng.integers(50, 1000, n), rng.integers(1, outs_hi, n)
    return ins, outs, poisson_arrivals(n, rate, np.random.default_rng(3))


@pytest.mark.parametrize("name,cap,rate,budget,max_seqs,outs_hi", SCENARIOS)
def test_profile_matches_its_engines_scheduler_loop(name, cap, rate, budget, max_seqs, outs_hi):
    n = 60
    ins, outs, arrive = _trace(rate, outs_hi, n)
    sm = Cost(cap)
    res = simulate(sm, n, ins, outs, rate=rate, seed=3, engine=name,
                   max_num_batched_tokens=budget, max_num_seqs=max_seqs)
    steps, reqs, pre = reference(name, cap, arrive.tolist(), ins, outs, budget, max_seqs)
    assert sm.steps == steps
    assert res.preemptions == pre
    ttft = np.array([r.times[0] - r.arrive for r in reqs])
    e2e = np.array([r.times[-1] - r.arrive for r in reqs])
    assert np.array_equal(res.ttft_s, ttft) and np.array_equal(res.e2e_s, e2e)
    gaps = np.sort(np.concatenate([np.diff(r.times) for r in reqs]))
    sim_gaps = np.sort(np.repeat(res.itl_values_s, res.itl_weights))
    np.testing.assert_allclose(sim_gaps, gaps, rtol=1e-9)


def test_scenarios_exercise_each_rule():
    """The scenarios above are not vacuous: preemption where the profile preempts, prefill
    stalls (steps with no decode while requests decode) where it stalls, chunks where it
    chunks."""
    seen = {}
    for name, cap, rate, budget, max_seqs, outs_hi in SCENARIOS:
        ins, outs, arrive = _trace(rate, outs_hi)
        pre = reference(name, cap, arrive.tolist(), ins, outs, budget, max_seqs)[2]
        seen.setdefault(name, []).append(pre)
    assert seen["vllm"][0] > 0 and seen["vllm-v0"][0] > 0 and seen["sglang"][0] > 0
    assert seen["trtllm"] == [0, 0]  # GUARANTEED_NO_EVICT never evicts


#: the first seven steps' tokens when request 2's 3,000-token prompt arrives while request 0
#: decodes (test below): chunked and mixed (vllm: 1 decode + 1,023 prompt tokens), chunked and
#: prefill-first (sglang: 1,024-token prompt-only steps, request 0 stalled), whole and
#: prefill-first (vllm-v0: one 3,000-token prompt-only step), whole and mixed (trtllm: 1 decode
#: + the whole prompt)
STALL_STEPS = {"vllm": [200, 2, 2, 1024, 1024, 955, 2],
               "sglang": [200, 2, 2, 1024, 1024, 952, 2],
               "vllm-v0": [200, 2, 2, 3000, 2, 2, 2],
               "trtllm": [200, 2, 2, 3001, 2, 2, 2]}


@pytest.mark.parametrize("name", list(ENGINE_PROFILES))
def test_prefill_stall_and_chunking_per_profile(name):
    """Two clients: requests 0 (100 in, 50 out) and 1 (100 in, 3 out) start together; when
    request 1 finishes its client sends request 2 (3,000 in), which meets request 0 decoding.
    Token budget 1,024 for the chunked profiles, 4,096 for the whole-prompt ones."""
    sm = Cost(10**6)
    s = scheduler(name)
    res = simulate(sm, 3, np.array([100, 100, 3000]), np.array([50, 3, 5]), concurrency=2,
                   engine=name, max_num_seqs=8,
                   max_num_batched_tokens=1024 if s.chunked else 4096)
    assert [st[0] for st in sm.steps[:7]] == STALL_STEPS[name]
    # the steps carrying request 2's prompt: sequences = that prompt + the decodes in the step
    decodes_in = [st[4] - 1 for st in sm.steps[3:6] if st[0] > 2]
    assert decodes_in == [1 if s.mixed else 0] * len(decodes_in)
    assert res.output_tokens == 58


# --- outputs under load ------------------------------------------------------------------------
def _sm():
    import txcalc
    from txcalc.serve.sim import step_model
    return step_model(txcalc.load("llama-3-8b"), "h100", max_model_len=4096)


@pytest.mark.parametrize("engine", [None, *ENGINE_PROFILES])
def test_latency_figures_add_up(engine):
    """Each request's end-to-end latency is its TTFT plus its decode time (TPOT x (outputs -
    1)); the token-weighted mean ITL is every request's decode time over every gap."""
    rng = np.random.default_rng(1)
    ins, outs = rng.integers(100, 2000, 400), rng.integers(2, 300, 400)
    r = simulate(_sm(), 400, ins, outs, rate=25.0, engine=engine)
    np.testing.assert_allclose(r.e2e_s, r.ttft_s + r.tpot_s * (outs - 1), rtol=1e-9)
    decode = (r.tpot_s * (outs - 1)).sum()
    assert r.itl_mean_s == pytest.approx(decode / (outs - 1).sum(), rel=1e-9)
    j = r.to_json()
    assert j["engine"] == (engine or "txcalc")
    assert j["e2e_p50_s"] <= j["e2e_p90_s"] <= j["e2e_p99_s"]
    assert j["achieved_requests_per_s"] == r.requests_per_s


@pytest.mark.parametrize("engine", [None, "vllm", "trtllm"])
def test_saturated_flag_and_the_saturation_rate(engine):
    """Offline, the replica completes C requests/s; offered half of C its queue stays bounded
    (served = offered within the trace's noise); offered twice C it serves about C and is
    flagged saturated."""
    sm = _sm()
    cap = simulate(sm, 600, 1000, 200, rate=math.inf, engine=engine).requests_per_s
    low = simulate(sm, 1500, 1000, 200, rate=cap / 2, engine=engine)
    high = simulate(sm, 1500, 1000, 200, rate=cap * 2, engine=engine)
    assert not low.saturated and low.requests_per_s == pytest.approx(low.offered_rate, rel=0.05)
    assert high.saturated and high.requests_per_s == pytest.approx(cap, rel=0.15)


def test_plan_json_reports_load_and_saturation(capsys):
    """plan infer --engine: the JSON names the profile, the best row's load figures, the
    saturation rate; past it the run is flagged and serves about that rate; a bad engine name
    is one line and exit 2."""
    import json

    from txcalc.cli import main
    rc = main(["plan", "infer", "llama-3-8b", "--gpu", "h100", "--input-len", "1000",
               "--output-len", "200", "--rate", "60", "--engine", "vllm-v0", "--tp", "1",
               "--replicas", "1", "--json"])
    d = json.loads(capsys.readouterr().out)
    assert rc == 0
    assert d["engine"] == "vllm-v0" and d["saturated"] is True
    assert d["saturation_requests_per_s"] < 60
    assert d["load"]["achieved_requests_per_s"] == pytest.approx(
        d["saturation_requests_per_s"], rel=0.15)
    rc = main(["plan", "infer", "llama-3-8b", "--input-len", "1000", "--output-len", "200",
               "--rate", "6", "--engine", "tgi"])
    err = capsys.readouterr().err
    assert rc == 2 and "--engine ('tgi')" in err and len(err.strip().splitlines()) == 1


@pytest.mark.parametrize("n", [2, 50, 300, 3000])
@pytest.mark.parametrize("seed", [0, 1, 7])
def test_a_poisson_trace_offers_the_rate_asked(n, seed):
    """simulate's open-loop trace offers exactly the rate asked ((n - 1) / span, the figure a
    run's offered_requests_per_s reports), while its gaps keep a Poisson trace's spread: they
    are the draws of numpy's exponential scaled by one factor (checked against the raw draws
    of the same generator), whose coefficient of variation is near 1 for a long trace."""
    rate = 5 / 3
    a = poisson_arrivals(n, rate, np.random.default_rng(seed))
    assert (n - 1) / (a[-1] - a[0]) == pytest.approx(rate, rel=1e-12)
    raw = np.cumsum(np.random.default_rng(seed).exponential(1.0 / rate, n))
    np.testing.assert_allclose(a / a[-1], raw / raw[-1], rtol=1e-12)  # one factor
    res = simulate(Cost(10**6), n, 100, 10, rate=rate, seed=seed)
    assert res.offered_rate == pytest.approx(rate, rel=1e-12)
    if n >= 3000:
        gaps = np.diff(a)
        assert 0.9 < gaps.std() / gaps.mean() < 1.1
