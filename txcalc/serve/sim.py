"""The step costs of one serving replica (``StepModel``), and estimates built on them.

The batching loop that spends these steps lives in ``serve.batching`` (``simulate``, under an
engine's scheduler profile, ``serve.sched``); it is re-exported here.

    what            | model
    ----------------|----------------------------------------------------------------------------
    step time       | overheads + a roofline per kernel class + TP all-reduces, from the engine
                    |   (the GEMMs and the attention kernel run one after the other, so each
                    |   is bound by its own compute or its own bytes; one roofline over the
                    |   whole step would let the KV read hide under the GEMMs' compute):
                    |   Linears = max((tokens x Linear FLOPs per token + logit rows x head
                    |     FLOPs) / (tp x matmul rate), (weights one rank reads (MoE: the
                    |     expected distinct experts the step's tokens touch, E (1 - (1 -
                    |     k/E)^T)) + fp32 logits written) / (HBM bandwidth x efficiency)),
                    |     the matmul rate times ``timing.weight_only_factor`` at the step's
                    |     rows for weight-only formats (dequantising kernels); a decode step
                    |     run as a CUDA graph computes its padded rows
                    |   attention = max(attended (query, key) pairs x FLOPs per pair /
                    |     (tp x attention rate), KV bytes of every cached token the step
                    |     attends to / (HBM bandwidth x efficiency)); pairs of a chunk of c
                    |     tokens after p cached ones = c p + c (c + 1) / 2, of a decode = its
                    |     context: a decode step's time grows with its batch's summed context
                    |   TP: 2 all-reduces per block of tokens x d_model activations
                    |   pipeline stages run one after another (no micro-batching across steps)
    overheads       | per step ``overhead_s`` (scheduling, input preparation, launch), per
                    |   sequence in the step ``seq_overhead_s`` (sampling, detokenising,
                    |   per-request bookkeeping), and ``eager_overhead_s`` more for a step
                    |   launched kernel by kernel rather than as a captured CUDA graph, and
                    |   per request ``request_overhead_s`` before it reaches the scheduler
    front end       | the API server's serial host-CPU work, per request ``front_request_s``
                    |   and per output token ``front_token_s``, on one worker pipelined with
                    |   the steps (serve.batching; the profile's ``front_end`` names it)
    not modelled    | sliding windows (every layer attends to the whole context), network;
                    |   speculative decoding is a separate estimate (``speculative``)

Rates come from ``timing.DeviceProfile`` (dense peak x efficiency), FLOPs from the op list
(``Op.fwd_flops``/``decode_flops``), bytes from ``sharding.local_params`` and
``kvcache.kv_cache_bytes_per_token``: nothing is re-derived here.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass

from .batching import (  # noqa: F401  (re-exported: the batching loop's names)
    DEFAULT_MAX_NUM_BATCHED_TOKENS,
    DEFAULT_MAX_NUM_SEQS,
    MAX_REQUESTS,
    SimError,
    SimResult,
    lengths,
    saturation_requests_per_s,
    simulate,
)
from .kv import cached_prefix_tokens

#: CPU time per engine step outside the GPU kernels (scheduling, sampling, input preparation,
#: launch gaps): an assumed figure, not a measurement; one of the two efficiency parameters a
#: calibration may fit per GPU (the other is the matmul efficiency of the DeviceProfile)
STEP_OVERHEAD_S = 0.004


@dataclass(frozen=True)
class StepModel:
    """Costs of one engine step on one replica, as coefficients read from the engine once."""

    lin_flops_per_token: int  #: Linear FLOPs of one token through every block, whole model
    head_flops_per_row: int  #: output-head FLOPs of one logit row
    attn_flops_per_pair: int  #: attention FLOPs per (query, key) pair summed over layers
    dense_weight_bytes: int  #: weights one TP rank reads every step outside routed experts
    expert_bytes: int  #: one TP rank's bytes of one routed expert, summed over MoE layers
    n_experts: int  #: routed experts per MoE layer (0: dense model)
    top_k: int
    kv_bytes_per_token: int  #: one cached token on one TP rank, all layers
    tp: int
    pp: int
    matmul_flops_per_s: float  #: one GPU's achievable rate
    attn_flops_per_s: float
    bytes_per_s: float  #: achievable HBM bandwidth
    peak_flops_per_s: float  #: the dense tensor-core peak (the physical limit)
    peak_bytes_per_s: float  #: HBM bandwidth (the physical limit)
    ar_latency_s: float  #: one all-reduce's fixed time (0 when tp == 1)
    ar_s_per_token: float  #: per token of d_model activations
    n_allreduce: int  #: all-reduces per step (2 per block)
    overhead_s: float = STEP_OVERHEAD_S
    kv_capacity_tokens: int = 0  #: tokens the paged cache holds on this replica
    #: expert parallelism over the tp GPUs: each holds n_experts / ep whole experts (1: experts
    #: split by TP like the dense layers)
    ep: int = 1
    n_moe_layers: int = 0
    a2a_latency_s: float = 0.0  #: one all-to-all's fixed time
    a2a_s_per_token: float = 0.0  #: per token routed to top_k experts (d_model each)
    logit_bytes_per_row: int = 0  #: fp32 logits one TP rank writes per logit row
    #: weight-only formats: ``timing.weight_only_factor``'s floor (None: the Linears run at
    #: their format's full tensor-core rate)
    weight_only_floor: float | None = None
    seq_overhead_s: float = 0.0  #: per sequence in a step (sampling, bookkeeping)
    eager_overhead_s: float = 0.0  #: per step launched without a CUDA graph
    #: per request, from the client's send to the scheduler's queue (the API server:
    #: tokenising, the hop to the engine core); adds to TTFT and end-to-end latency
    request_overhead_s: float = 0.0
    #: the engine's front end (its API-server process, ``sched.Scheduler.front_end``): one
    #: worker, in parallel with the steps, spending host CPU seconds serially per request
    #: (tokenising, request setup) and per output token (detokenising, streaming); a token
    #: reaches the client when the front end has processed it (serve.batching)
    front_request_s: float = 0.0
    front_token_s: float = 0.0

    def step_s(self, tokens: int, logit_rows: int, pairs: int, kv_read_tokens: int,
               kv_read_bytes: int | None = None, *, seqs: int = 0,
               padded_tokens: int | None = None, eager: bool = False) -> float:
        """Seconds of one step: ``tokens`` rows through the blocks, ``logit_rows`` through the
        head, ``pairs`` attended (query, key) pairs, ``kv_read_tokens`` cached tokens read
        (``kv_read_bytes``: those tokens' bytes on one rank when the caller knows them better
        than tokens x kv_bytes_per_token: sliding windows, recurrent states); ``seqs``
        sequences in the step (each pays seq_overhead_s), ``padded_tokens``: the rows a CUDA
        graph computes (its captured batch), ``eager``: launched kernel by kernel."""
        from ..engine.timing import weight_only_share
        tp = self.tp
        mm = self.matmul_flops_per_s
        rows = tokens if padded_tokens is None else max(tokens, padded_tokens)
        if self.weight_only_floor is not None:  # dequantising kernels lose speed past the knee
            mm *= weight_only_share(self.weight_only_floor, rows)
        lin_compute = (rows * self.lin_flops_per_token + logit_rows * self.head_flops_per_row) \
            / (tp * mm)
        attn_compute = pairs * self.attn_flops_per_pair / (tp * self.attn_flops_per_s)
        w = self.dense_weight_bytes
        n_ar = self.n_allreduce
        comm = 0.0
        if self.n_experts and self.ep > 1:
            # whole experts: the busiest rank's distinct experts set the step
            w += self.expert_bytes * tp * busiest_rank_experts(self.n_experts, self.top_k,
                                                               tokens, self.ep)
            n_ar -= self.n_moe_layers  # the MoE output returns by all-to-all, not all-reduce
            comm += 2 * self.n_moe_layers * (self.a2a_latency_s + tokens * self.a2a_s_per_token)
        elif self.n_experts:
            w += self.expert_bytes * experts_touched(self.n_experts, self.top_k, tokens)
        if tp > 1:
            comm += n_ar * (self.ar_latency_s + tokens * self.ar_s_per_token)
        w += logit_rows * self.logit_bytes_per_row
        over = self.overhead_s
        if seqs and self.seq_overhead_s:
            over += seqs * self.seq_overhead_s
        if eager and self.eager_overhead_s:
            over += self.eager_overhead_s
        return over + max(lin_compute, w / self.bytes_per_s) + max(
            attn_compute, (kv_read_tokens * self.kv_bytes_per_token if kv_read_bytes is None
                           else kv_read_bytes) / self.bytes_per_s) + comm


def experts_touched(n_experts: int, top_k: int, tokens: int) -> float:
    """Expected distinct routed experts a step of ``tokens`` tokens reads, per MoE layer:
    E (1 - (1 - k/E)^T). Each token picks k distinct experts of E; under uniform routing an
    expert is missed by one token with probability 1 - k/E, by all T (independent tokens)
    with (1 - k/E)^T. Real routers are skewed (fewer distinct experts): this is the upper
    end of the weight traffic."""
    if tokens <= 0:
        return 0.0
    return n_experts * (1.0 - (1.0 - top_k / n_experts) ** tokens)


@functools.lru_cache(maxsize=65536)
def busiest_rank_experts(n_experts: int, top_k: int, tokens: int, ep: int) -> float:
    """Expected distinct experts on the busiest of ``ep`` ranks holding n_experts / ep each:
    E[max_r X_r] = sum_{m >= 1} (1 - P(X <= m - 1)^ep), each expert touched with p = 1 - (1 -
    k/E)^T, X ~ Binomial(E / ep, p), experts and ranks taken as independent (uniform routing;
    tests/published/test_serving.py checks it against a Monte Carlo of top-k routing)."""
    if tokens <= 0:
        return 0.0
    n = n_experts // ep
    p = 1.0 - (1.0 - top_k / n_experts) ** tokens
    pmf = [math.comb(n, i) * p ** i * (1 - p) ** (n - i) for i in range(n + 1)]
    cdf, out = 0.0, 0.0
    for m in range(1, n + 1):
        cdf += pmf[m - 1]
        out += 1.0 - min(cdf, 1.0) ** ep
    return out


def step_model(model, gpu, *, tp: int = 1, pp: int = 1, kv_dtype: str = "bf16",
               precision: str = "bf16", weights: str | None = None, profile=None,
               gpu_file=None, overhead_s: float = STEP_OVERHEAD_S,
               kv_capacity_tokens: int | None = None, ep: int = 1,
               attention_dtype: str | None = None, seq_overhead_s: float = 0.0,
               eager_overhead_s: float = 0.0,
               request_overhead_s: float = 0.0, front_request_s: float = 0.0,
               front_token_s: float = 0.0, **kv_kw) -> StepModel:
    """The step coefficients of a tp x pp replica of ``model`` on ``gpu`` (see the module
    table). ``kv_capacity_tokens``: default ``serving.kv_capacity``'s kv_tokens (``kv_kw``
    go to it). ``ep``: expert parallelism over the same tp GPUs (ep == tp; vLLM's
    --enable-expert-parallel): attention stays tensor-parallel, each GPU holds n_experts / ep
    whole experts, tokens reach them by an all-to-all dispatch and return by an all-to-all
    combine (k x d_model activations each), the busiest rank's experts set the weight read.
    The KV capacity is taken from the TP layout (the same bytes per GPU when E / ep is
    whole). ``attention_dtype``: the tensor-core dtype of the attention core (default
    ``precision``'s compute dtype; "fp8": an fp8 FMHA kernel)."""
    from .setting import serve_setting
    return replica_steps(serve_setting(model, gpu, kv_dtype=kv_dtype, precision=precision,
                                       weights=weights, profile=profile, gpu_file=gpu_file),
                         tp=tp, pp=pp, overhead_s=overhead_s,
                         kv_capacity_tokens=kv_capacity_tokens, ep=ep,
                         attention_dtype=attention_dtype, seq_overhead_s=seq_overhead_s,
                         eager_overhead_s=eager_overhead_s,
                         request_overhead_s=request_overhead_s,
                         front_request_s=front_request_s, front_token_s=front_token_s,
                         **kv_kw)


def replica_steps(s, *, tp: int = 1, pp: int = 1, overhead_s: float = STEP_OVERHEAD_S,
                  kv_capacity_tokens: int | None = None, ep: int = 1,
                  attention_dtype: str | None = None, seq_overhead_s: float = 0.0,
                  eager_overhead_s: float = 0.0,
                  request_overhead_s: float = 0.0, front_request_s: float = 0.0,
                  front_token_s: float = 0.0, **kv_kw) -> StepModel:
    """``step_model`` of a resolved ``serve.setting.ServeSetting`` (the search of a plan
    builds one setting and calls this for each layout)."""
    from .. import inputs as I
    from ..engine.kvcache import kv_cache_bytes_per_token
    from ..parallel import comm
    from .kv import _weights_per_gpu, kv_capacity
    from ..engine.timing import COMPUTE_DTYPE, DEFAULT_WEIGHT_ONLY_FLOOR
    from ..units import cdiv
    from ..engine.workload import Workload
    tp = I.integer("tp", tp, 1, I.MAX_GPUS)
    pp = I.integer("pp", pp, 1, I.MAX_GPUS)
    ep = I.integer("ep", ep, 1, I.MAX_GPUS)
    overhead_s = I.number("overhead_s", overhead_s, 0, 10, lo_open=False)
    seq_overhead_s = I.number("seq_overhead_s", seq_overhead_s, 0, 1, lo_open=False)
    eager_overhead_s = I.number("eager_overhead_s", eager_overhead_s, 0, 10, lo_open=False)
    request_overhead_s = I.number("request_overhead_s", request_overhead_s, 0, 10,
                                  lo_open=False)
    front_request_s = I.number("front_request_s", front_request_s, 0, 10, lo_open=False)
    front_token_s = I.number("front_token_s", front_token_s, 0, 1, lo_open=False)
    cfg, g, prof, prec, ops = s.cfg, s.gpu, s.prof, s.prec, s.ops
    kv_dtype, precision, weights = s.kv_dtype, s.precision, s.weights
    dtype = COMPUTE_DTYPE.get(precision, "bf16")
    one = Workload(batch=1, seq=1, attn_impl="flash")
    lin = head = pair = 0
    moe_ops = [op for op in ops if op.kind == "linear" and op.instances > 1]
    for op in ops:
        if op.kind == "linear":
            if op.placement == "post" and op.stream == "seq":
                head += op.fwd_flops(one)
            else:
                lin += op.fwd_flops(one)
        elif op.kind in ("attn_scores", "attn_context"):
            pair += op.decode_flops(1, 1, model=False)
    # weights one rank reads: all stages (they run one after another), routed experts apart
    from ..parallel.sharding import local_params
    all_w = _weights_per_gpu(cfg, cfg, ops, tp, 1, weights, prec.weight)
    total_local = sum(local_params(op, tp) for op in ops) or 1
    moe_local = sum(local_params(op, tp) for op in moe_ops)
    expert_bytes = 0
    n_exp = top_k = 0
    if moe_ops:
        n_exp, top_k = moe_ops[0].instances, max(1, moe_ops[0].active)
        moe_w = all_w * moe_local // total_local  # the stored bytes' share of the experts
        expert_bytes = moe_w // n_exp
        dense = all_w - moe_w
    else:
        dense = all_w
    kv_split = 1 if cfg.is_mla else min(tp, cfg.n_kv_heads)
    kv_tok = cdiv(kv_cache_bytes_per_token(cfg, kv_dtype), kv_split)
    n_blocks = sum(d for _, d in cfg.stacks)
    n_moe = len({op.layer for op in moe_ops})
    a2a_lat = a2a_slope = 0.0
    if ep > 1:
        if not moe_ops:
            raise SimError(f"ep ({ep}) needs a mixture-of-experts model; {cfg.name} is dense")
        if ep != tp or n_exp % ep:
            raise SimError(f"ep ({ep}) must equal tp ({tp}) and divide {cfg.name}'s "
                           f"{n_exp} routed experts")
        row = top_k * cfg.d_model * prec.act  # one token's activations to its k experts
        a1 = float(comm.collective_s("all_to_all", row, ep, 1, g))
        a2 = float(comm.collective_s("all_to_all", 1025 * row, ep, 1, g))
        a2a_slope = (a2 - a1) / 1024
        a2a_lat = a1 - a2a_slope
    if tp > 1:
        a1 = float(comm.collective_s("all_reduce", cfg.d_model * prec.act, tp, 1, g))
        a2 = float(comm.collective_s("all_reduce", 1025 * cfg.d_model * prec.act, tp, 1, g))
        slope = (a2 - a1) / 1024
        lat = a1 - slope
    else:
        lat = slope = 0.0
    if kv_capacity_tokens is None:
        kv_capacity_tokens = kv_capacity(cfg, g, tp=tp, pp=pp, kv_dtype=kv_dtype,
                                         precision=precision, weights=weights,
                                         **kv_kw).kv_tokens
    mm_dtype, weight_only = _matmul_dtype(s.scheme, cfg, ops, prof, dtype)
    peak = prof.peak_flops.get(mm_dtype, 0.0)
    floor = prof.flop_efficiency.get("weight_only", DEFAULT_WEIGHT_ONLY_FLOOR) \
        if weight_only else None
    # pipeline stages in sequence: one replica-step is the whole model on one TP group, so the
    # per-GPU rates of one rank stand for it; pp only adds stage-boundary sends (ignored)
    return StepModel(lin, head, pair, dense, expert_bytes, n_exp, top_k, kv_tok, tp, pp,
                     prof.flops_per_s("matmul", mm_dtype),
                     prof.flops_per_s("attention", attention_dtype or dtype),
                     prof.bytes_per_s, peak, prof.hbm_bytes_per_s, lat, slope, 2 * n_blocks,
                     overhead_s, int(kv_capacity_tokens) * pp, ep, n_moe, a2a_lat, a2a_slope,
                     cfg.vocab_size * 4 // tp, floor, seq_overhead_s, eager_overhead_s,
                     request_overhead_s, front_request_s, front_token_s)


def _matmul_dtype(sch, cfg, ops, prof, dtype: str) -> tuple[str, bool]:
    """(the tensor-core dtype of the Linears, whether a weight-only format dequantises): a
    quantised format's (``sch``) own dtype when every quantised op computes in it (fp8 W8A8:
    the fp8 peak), else ``dtype``."""
    from ..engine import formats as Q
    if sch is None:
        return dtype, False
    qops = Q.assign(ops, sch, cfg)
    if any(Q.is_weight_only(q, prof.peak_flops) for q in qops):
        return dtype, True
    run = {Q.compute_dtype(q, prof.peak_flops, dtype) for q in qops if q.weight_format}
    return (run.pop() if len(run) == 1 else dtype), False


def prefix_savings(sm: StepModel, input_len: int, prefix_hit_rate: float,
                   block_size: int = 16) -> dict:
    """What a prefix-cache hit saves one prompt of ``input_len`` tokens: the cached tokens
    and blocks (shared by every request), and the prefill work left, on the step model's
    compute terms (Linear FLOPs of the tokens computed, attention pairs c p + c (c + 1) / 2 of
    c new tokens after p cached ones, the head on the last position)."""
    c = int(cached_prefix_tokens([input_len], prefix_hit_rate, block_size)[0])
    n = int(input_len) - c

    def flops(new: int, past: int) -> int:
        return new * sm.lin_flops_per_token + sm.head_flops_per_row + \
            (new * past + new * (new + 1) // 2) * sm.attn_flops_per_pair
    full, left = flops(int(input_len), 0), flops(n, c)
    return {"prefix_hit_rate": prefix_hit_rate, "cached_tokens": c,
            "shared_blocks": -(-c // block_size), "prefill_tokens": n,
            "prefill_flops": left, "prefill_flops_saved_fraction": 1 - left / full}


def closed_loop_means(sm: StepModel, concurrency: int, input_len: int, output_len: int, *,
                      rounds: int = 8, **kw) -> dict:
    """A benchmark client's closed loop (AIPerf / genai-perf, vLLM's --max-concurrency):
    ``concurrency`` clients, each sending its next request when the last one finishes, for
    ``rounds`` x concurrency requests (at least 200). The first 2 x concurrency requests are
    the warm-up (all clients start at once, a burst no steady state has) and are left out of
    the means, as the clients' warm-up requests are: mean TTFT, mean ITL (per request: decode
    time / (output - 1), averaged) and output tokens/s over the whole run."""
    c = int(concurrency)
    n = max(200, rounds * c)
    r = simulate(sm, n, input_len, output_len, concurrency=c, **kw)
    skip = min(2 * c, n - 1)
    return {"ttft_s": float(r.ttft_s[skip:].mean()), "itl_s": float(r.tpot_s[skip:].mean()),
            "output_tokens_per_s": r.output_tokens_per_s}


# --- speculative decoding ------------------------------------------------------------------------
def expected_tokens_per_step(alpha: float, gamma: int) -> float:
    """Tokens a verification step yields when each of ``gamma`` drafted tokens is accepted
    with probability ``alpha`` independently, stopping at the first rejection (the target's
    own token always counts): (1 - alpha^(gamma+1)) / (1 - alpha); gamma + 1 at alpha = 1
    (Leviathan et al. 2023, arXiv:2211.17192, eq. 1)."""
    from .. import inputs as I
    alpha = I.number("alpha", alpha, 0, 1, lo_open=False)
    gamma = I.integer("gamma", gamma, 0, 64)
    if alpha == 1.0:
        return float(gamma + 1)
    return (1.0 - alpha ** (gamma + 1)) / (1.0 - alpha)


@dataclass(frozen=True)
class Speculation:
    """Decode with and without speculation at one batch and context (seconds per step)."""

    batch: int
    context: int
    tokens_per_step: float  #: expected tokens per sequence per verification step
    plain_step_s: float  #: one ordinary decode step of the target
    draft_s: float  #: gamma draft steps (0 for heads that ride on the target's pass)
    verify_s: float  #: the target over gamma + 1 positions per sequence
    speedup: float  #: tokens/s with speculation / tokens/s without


def speculative(target: StepModel, alpha: float, gamma: int, batch: int, context: int,
                draft: StepModel | None = None) -> Speculation:
    """Expected speed-up of speculative decoding at a decode batch: the target verifies
    gamma + 1 positions of every sequence in one step (gamma + 1 times the tokens and logit
    rows, the pairs of each position, the weights and the cache read once); ``draft`` (a
    smaller model) runs gamma ordinary decode steps first; without one the drafter is taken as
    free (EAGLE / Medusa heads on the target's own hidden states).

        speedup = tokens_per_step x plain_step_s / (draft_s + verify_s)"""
    from .. import inputs as I
    batch = I.integer("batch", batch, 1, I.MAX_BATCH)
    context = I.integer("context", context, 1, I.MAX_SEQ)
    e = expected_tokens_per_step(alpha, gamma)
    k = gamma + 1
    plain = target.step_s(batch, batch, batch * context, batch * context)
    verify = target.step_s(batch * k, batch * k, batch * (k * context + k * (k - 1) // 2),
                           batch * context)
    d = 0.0 if draft is None else gamma * draft.step_s(batch, batch, batch * context,
                                                       batch * context)
    return Speculation(batch, context, e, plain, d, verify, e * plain / (d + verify))


def speculation_breakeven_batch(target: StepModel, alpha: float, gamma: int, context: int,
                                draft: StepModel | None = None, max_batch: int = 4096
                                ) -> int | None:
    """The smallest decode batch at which speculation slows decoding down (speedup < 1), or
    None when it helps at every batch up to ``max_batch``: past it the verification's extra
    positions turn the step compute-bound."""
    from ..units import fewest
    return fewest(lambda b: speculative(target, alpha, gamma, b, context, draft).speedup < 1.0,
                  max_batch)
