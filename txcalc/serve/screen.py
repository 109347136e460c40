"""A fast screen for serving plans: analytic floors on what ``serving_sim.simulate`` can
return, so that ``serving_plan.plan_serving`` skips simulations whose outcome is already
known. Every floor is a lower bound on the simulator's own arithmetic (``StepModel.step_s``
and the scheduler of ``simulate``), never an estimate, so a screened search gives the answer
of the unscreened one (tests/unit/test_serving_screen.py runs both).

    floor                 | bound                                        | screens out
    ----------------------|----------------------------------------------|--------------------
    step_floor_s          | overhead + fixed collective latencies +      | layouts whose every
                          |   dense weights read at HBM rate             |   decode gap > ITL SLO
    ttft_floor_s          | one prompt alone: ceil(I / chunk) steps, and | layouts whose lone
                          |   its FLOPs at the tensor-core rate          |   prompt > TTFT SLO
    duration_floor_s      | sum over steps >= S (overhead + latencies) + | replica counts that
                          |   max(sum compute, S x weights + KV reads)   |   cannot keep up
    all_fail              | every replica count up to best GPUs / (tp x  | layouts needing more
                          |   pp) screened out by the floors above       |   GPUs than the best
                          |                                              |   found so far

Step count S of ``n`` requests of I prompt and O output tokens: every step carries at most
max(chunk, B) tokens and at most B decoding sequences, where B = min(max_num_seqs,
KV capacity // (I + O)) is the most requests the paged cache admits at once; n I prompt tokens
and n (O - 1) decode tokens must pass, so S >= max(n (I + O - 1) / max(chunk, B),
n (O - 1) / B). FLOPs: the Linear rows of every token, one logit row per output token, and the
attention pairs, which do not depend on the chunking (a prompt's chunks of c tokens after p
cached attend c p + c (c + 1) / 2 pairs: I (I + 1) / 2 in all; decode step j of a request
reads I + j cached tokens). A step costs at least its compute or its reads (``step_s`` takes the
max), so the sum is at least the larger of the two sums. The simulated duration starts at the
first arrival and covers every step, so completed requests/s <= n / duration_floor_s, and a
replica whose bound is below serving_plan.KEEP_UP of what the trace offers fails the keep-up
test without being simulated. The trace's offered rate is ``simulate``'s
(serve.batching.offered_rate: the rate asked, which its Poisson trace spans exactly).

Not screened: prefix caching (shared blocks change the admission), closed loops and the
offline mode (no keep-up test).
"""

from __future__ import annotations

#: a floor must beat its threshold by this relative margin before it screens anything out
#: (the floors sum in another order than the simulator: rounding must never flip an answer)
MARGIN = 1e-9


def _fixed_s(sm) -> float:
    """Seconds every step spends outside compute and reads: the CPU overhead and the fixed
    latency of its collectives (``step_s`` adds per-token terms on top)."""
    comm = 0.0
    n_ar = sm.n_allreduce
    if sm.n_experts and sm.ep > 1:
        n_ar -= sm.n_moe_layers
        comm += 2 * sm.n_moe_layers * sm.a2a_latency_s
    if sm.tp > 1:
        comm += n_ar * sm.ar_latency_s
    return sm.overhead_s + comm


def step_floor_s(sm) -> float:
    """The shortest step ``step_s`` can return: the fixed part and the dense weights read."""
    return _fixed_s(sm) + sm.dense_weight_bytes / sm.bytes_per_s


def _compute_s(sm, tokens: float, logits: float, pairs: float) -> float:
    return (tokens * sm.lin_flops_per_token + logits * sm.head_flops_per_row) \
        / (sm.tp * sm.matmul_flops_per_s) + pairs * sm.attn_flops_per_pair \
        / (sm.tp * sm.attn_flops_per_s)


def ttft_floor_s(sm, input_len: int, chunk: int) -> float:
    """The shortest time to first token: a prompt alone in the replica, ceil(I / chunk)
    steps each at least ``step_floor_s``, their FLOPs at least the prompt's."""
    steps = -(-input_len // chunk)
    compute = _compute_s(sm, input_len, 1, input_len * (input_len + 1) // 2)
    return steps * _fixed_s(sm) + max(compute, steps * sm.dense_weight_bytes / sm.bytes_per_s)


def max_running(sm, input_len: int, output_len: int, max_num_seqs: int) -> int:
    """B: the most requests the replica holds at once (seats, and paged KV blocks)."""
    cap = sm.kv_capacity_tokens
    if not cap:
        return max_num_seqs
    return max(1, min(max_num_seqs, cap // (input_len + output_len)))


def duration_floor_s(sm, n: int, input_len: int, output_len: int, chunk: int,
                     max_num_seqs: int, decode_only: bool = False) -> float:
    """The shortest simulated duration of ``n`` requests (see the module docstring)."""
    b = max_running(sm, input_len, output_len, max_num_seqs)
    dec = n * (output_len - 1)
    if decode_only and not dec:  # one-token outputs: a decode instance runs no step
        return 0.0
    decode_ctx = n * ((output_len - 1) * input_len + (output_len - 1) * output_len // 2)
    if decode_only:
        tokens, logits, pairs = dec, dec, decode_ctx
    else:
        tokens, logits = n * input_len + dec, n * output_len
        pairs = n * (input_len * (input_len + 1) // 2) + decode_ctx
    steps = max(-(-tokens // max(chunk, b)), -(-dec // b), 1)
    compute = _compute_s(sm, tokens, logits, pairs)
    reads = (steps * sm.dense_weight_bytes + decode_ctx * sm.kv_bytes_per_token) / sm.bytes_per_s
    return steps * _fixed_s(sm) + max(compute, reads)


def cannot_keep_up(sm, n: int, input_len: int, output_len: int, rate: float, chunk: int,
                   max_num_seqs: int, keep_up: float, decode_only: bool = False) -> bool:
    """True when ``simulate`` at ``rate`` must fail the keep-up test (its completed
    requests/s below keep_up x min(rate, the trace's offered rate))."""
    from .batching import offered_rate
    most = n / duration_floor_s(sm, n, input_len, output_len, chunk, max_num_seqs,
                                decode_only)
    return most * (1 + MARGIN) < keep_up * min(rate, offered_rate(n, rate))


def slo_unreachable(sm, input_len: int, chunk: int, ttft_p99_s: float | None,
                    itl_p99_s: float | None, extra_ttft_s: float = 0.0,
                    decode: bool = True, prefill: bool = True) -> bool:
    """True when no replica count meets the SLOs: every decode gap is longer than the ITL
    SLO, or a lone prompt's first token comes later than the TTFT SLO."""
    if decode and itl_p99_s is not None and step_floor_s(sm) > itl_p99_s * (1 + MARGIN):
        return True
    return bool(prefill and ttft_p99_s is not None
                and ttft_floor_s(sm, input_len, chunk) + extra_ttft_s
                > ttft_p99_s * (1 + MARGIN))


def all_fail(fails, upto: int) -> bool:
    """True when ``fails(r)`` screens out every replica count r in [1, upto] (each one is
    checked: the floors need not be monotone in r, the simulated request count is not)."""
    return all(fails(r) for r in range(1, upto + 1))
