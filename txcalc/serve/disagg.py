"""Prefill/decode disaggregation: prompts on one pool of replicas, decoding on another.

    pool     | what it runs                                  | sized by
    ---------|-----------------------------------------------|-----------------------------------
    prefill  | prompts only (``simulate`` with one output    | the fewest replicas whose TTFT p99
             |   token: chunks of up to max_num_batched      |   (plus the exposed KV transfer)
             |   tokens, no decode steps between them)       |   meets the SLO and keep up
    decode   | decode steps only (``simulate(decode_only=    | the fewest replicas whose ITL p99
             |   True)``: requests arrive with their KV)     |   meets the SLO and keep up
    transfer | each prefill GPU sends its rank's KV of the   | inter-node bandwidth (the pools
             |   prompt (input x kv_bytes_per_token) to a    |   sit on different nodes); sent
             |   decode GPU                                  |   layer by layer while the prompt
             |                                               |   runs, 1 / n_layers of it exposed

Both pools use the same tp (and the replica's KV cache of ``serving.kv_capacity``). It wins
when prompt chunks sharing decode steps push a colocated replica's inter-token latency past
its SLO (long prompts, tight ITL): decode-only steps stay short, so fewer GPUs meet both SLOs.
Assumptions: requests spread evenly over each pool's replicas (a random split of a Poisson
stream is Poisson); the transfer never queues (one prompt's KV per link at a time).
"""

from __future__ import annotations

from dataclasses import dataclass

from ..units import fewest
from .sim import StepModel, simulate

#: a pool keeps up when it completes this share of what it is offered (serving_plan.KEEP_UP)
KEEP_UP = 0.95


@dataclass(frozen=True)
class DisaggResult:
    prefill_replicas: int
    decode_replicas: int
    kv_transfer_s: float  #: one prompt's KV over the link, whole
    kv_transfer_exposed_s: float  #: the part added to TTFT (the last layer's)
    prefill: object  #: SimResult of one prefill replica
    decode: object  #: SimResult of one decode replica

    @property
    def replicas(self) -> int:
        return self.prefill_replicas + self.decode_replicas


def kv_transfer_s(sm: StepModel, input_len: int, gpu) -> float:
    """Seconds to send one prompt's KV from a prefill GPU to a decode GPU: the bytes of one TP
    rank (input_len x kv_bytes_per_token, every layer) over the inter-node link."""
    from ..parallel.comm import LATENCY_INTER_S
    return LATENCY_INTER_S + input_len * sm.kv_bytes_per_token / gpu.inter_node_bytes_per_s


def _fewest(run, limit: int):
    """The smallest replica count r in [1, limit] with run(r)[0], and its result (or None)."""
    cache = {}

    def meets(r: int) -> bool:
        cache[r] = run(r)
        return cache[r][0]
    r = fewest(meets, limit)
    return None if r is None else (r, cache[r][1])


def plan_disaggregated(sm: StepModel, gpu, input_len: int, output_len: int, rate: float, *,
                       ttft_p99_s: float | None, itl_p99_s: float | None, n_requests: int,
                       max_num_batched_tokens: int, max_num_seqs: int, seed: int = 0,
                       max_replicas: int = 4096, known_to_fail: dict | None = None,
                       min_attainment: float = 0.0) -> DisaggResult | None:
    """The fewest prefill and decode replicas of ``sm`` meeting the SLOs at ``rate``
    requests/s (see the module table), or None when no count up to max_replicas does.
    ``known_to_fail``: pool -> r -> True where r replicas provably fail
    (``serving_plan._pool_screen``): counted as failed without simulating.
    ``min_attainment``: the share of each pool's requests that must meet its own SLO (TTFT
    with the exposed transfer, time per output token): a request misses the pair when it
    misses either, so at least 1 - 2 x (1 - min_attainment) of the requests meet both."""
    skip = known_to_fail or {}
    n_layers = max(1, sm.n_allreduce // 2)
    whole = kv_transfer_s(sm, input_len, gpu)
    exposed = whole / n_layers

    def prefill(r: int):
        if "prefill" in skip and skip["prefill"](r):
            return False, None
        per = rate / r
        res = simulate(sm, n_requests, input_len, 1, rate=per,
                       max_num_batched_tokens=max_num_batched_tokens,
                       max_num_seqs=max_num_seqs, seed=seed)
        ok = res.requests_per_s >= KEEP_UP * min(per, res.offered_rate) and (
            ttft_p99_s is None or res.ttft(99) + exposed <= ttft_p99_s) and res.attainment(
            None if ttft_p99_s is None else ttft_p99_s - exposed) >= min_attainment
        return ok, res

    def decode(r: int):
        if "decode" in skip and skip["decode"](r):
            return False, None
        per = rate / r
        res = simulate(sm, n_requests, input_len, output_len, rate=per,
                       max_num_batched_tokens=max_num_batched_tokens,
                       max_num_seqs=max_num_seqs, seed=seed, decode_only=True)
        ok = res.requests_per_s >= KEEP_UP * min(per, res.offered_rate) and (
            itl_p99_s is None or res.itl(99) <= itl_p99_s) and res.attainment(
            None, itl_p99_s) >= min_attainment
        return ok, res

    p = _fewest(prefill, max_replicas)
    d = _fewest(decode, max_replicas) if p is not None else None
    if p is None or d is None:
        return None
    return DisaggResult(p[0], d[0], whole, exposed, p[1], d[1])
