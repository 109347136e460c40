"""The front-end stage of the serving simulator (serve/batching.py, ``sched.Scheduler.front_end``):
one worker, in parallel with the steps, that spends ``front_request_s`` on each request as it
is sent and ``front_token_s`` on each output token when its step ends, first come first
served; a token reaches the client when the front end has processed it. On a replica whose
every step takes one second the deliveries have closed forms, worked out by hand below."""

from __future__ import annotations

import math

import pytest

from txcalc.serve.sim import simulate


class OneSecond:
    """A stand-in StepModel: one second a step, a KV cache that never binds, and the front
    end's two costs."""

    kv_capacity_tokens = 10**6

    def __init__(self, front_request_s=0.0, front_token_s=0.0):
        self.front_request_s, self.front_token_s = front_request_s, front_token_s

    def step_s(self, *args, **kw):
        return 1.0


def test_one_request_ttft_and_itl():
    """One client, 3 output tokens, 0.3 s a request, 0.2 s a token: tokenised by 0.3 s, its
    step runs 0.3-1.3 s and its first token is out at 1.5 s (TTFT); the next two steps end at
    2.3 and 3.3 s and their tokens reach the client 0.2 s later: ITL 1 s, end to end 3.5 s."""
    r = simulate(OneSecond(0.3, 0.2), 1, 10, 3, concurrency=1, engine="trtllm")
    assert r.ttft_s[0] == pytest.approx(1.5)
    assert r.itl_values_s.tolist() == pytest.approx([1.0]) and r.itl_weights.tolist() == [2]
    assert r.e2e_s[0] == pytest.approx(3.5) and r.duration_s == pytest.approx(3.5)


def test_slower_front_end_sets_the_itl():
    """1.5 s a token against 1 s steps: the front end is the slower stage, so each token
    waits for the previous one's processing: first token at 0.3 + 1 + 1.5 = 2.8 s, then
    one every 1.5 s (ITL 1.5 s, not the step's 1 s)."""
    r = simulate(OneSecond(0.3, 1.5), 1, 10, 3, concurrency=1, engine="trtllm")
    assert r.ttft_s[0] == pytest.approx(2.8)
    assert r.itl_values_s.tolist() == pytest.approx([1.5]) and r.itl_weights.tolist() == [2]


@pytest.mark.parametrize("fe_tok,duration", [(0.5, 1 + 0.5 * 100), (0.1, 25 + 0.1 * 4)])
def test_offline_throughput_is_the_slower_stage(fe_tok, duration):
    """20 requests of 5 output tokens queued at once on 4 seats: the steps make 4 tokens a
    second for 25 s. At 0.5 s a token the front end (2 tokens a second) is busy from the first
    step's end on and delivers the 100 tokens by 1 + 50 s; at 0.1 s it keeps up and the last
    token arrives 0.4 s after the last step."""
    r = simulate(OneSecond(0.0, fe_tok), 20, 10, 5, rate=math.inf, engine="trtllm",
                 max_num_seqs=4)
    assert r.duration_s == pytest.approx(duration)
    assert r.requests_per_s == pytest.approx(20 / duration)


def test_tokenising_queues_the_requests():
    """8 requests sent at once, 0.25 s each to tokenise (ready at 0.25, 0.5, .. 2 s), one
    output token each. The first step (0.25-1.25 s) holds request 0 alone, but its token
    waits for the worker, busy tokenising until 2 s (first come, first served): TTFT 2 s.
    Requests 1-4 (ready by 1.25 s) share the next step (1.25-2.25 s), 5-7 the one after
    (2.25-3.25 s)."""
    r = simulate(OneSecond(0.25, 0.0), 8, 10, 1, rate=math.inf, engine="trtllm")
    assert r.ttft_s.tolist() == pytest.approx([2.0] + [2.25] * 4 + [3.25] * 3)


def test_a_profile_without_a_front_end_ignores_its_costs():
    """vllm-v0 declares no front end (sched.py): the costs change nothing."""
    base = simulate(OneSecond(), 30, 10, 4, concurrency=3, engine="vllm-v0")
    got = simulate(OneSecond(0.3, 0.2), 30, 10, 4, concurrency=3, engine="vllm-v0")
    assert got.ttft_s.tolist() == base.ttft_s.tolist() and got.duration_s == base.duration_s
    with_fe = simulate(OneSecond(0.3, 0.2), 30, 10, 4, concurrency=3, engine="vllm")
    assert with_fe.duration_s > base.duration_s
