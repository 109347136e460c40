"""The simulator's saturation figure (``serve.sim.saturation_requests_per_s``, the one
``plan_serving`` reports) and its ``saturated`` flag, on a replica whose every step takes one
second, where the sustainable rate has a closed form: with every request waiting, each of
max_num_seqs seats holds a request for output_len steps (TensorRT-LLM's mixed steps: the
prompt runs in the step that makes the first output token), so the engine completes
max_num_seqs / output_len requests a second (Little's law)."""

from __future__ import annotations

import pytest

from txcalc.serve.sim import saturation_requests_per_s, simulate


class OneSecond:
    """A stand-in StepModel: one second a step, a KV cache that never binds."""

    kv_capacity_tokens = 10**6

    def step_s(self, *args, **kw):
        return 1.0


@pytest.mark.parametrize("seats,output_len", [(4, 5), (3, 8)])
def test_offline_rate_is_seats_over_output_len(seats, output_len):
    n = 5 * seats  # whole batches: no partial last batch in the drain
    got = saturation_requests_per_s(OneSecond(), n, 10, output_len, engine="trtllm",
                                    max_num_seqs=seats)
    assert got == pytest.approx(seats / output_len)


def test_saturated_flag_either_side_of_the_rate():
    """Offered 0.6x the sustainable rate the queue stays bounded; offered 1.5x it grows for
    the whole trace (the flag: completed < 95 % of offered)."""
    rate = 4 / 5
    flags = [simulate(OneSecond(), 2000, 10, 5, rate=k * rate, engine="trtllm",
                      max_num_seqs=4, seed=1).saturated for k in (0.6, 1.5)]
    assert flags == [False, True]
