"""A step-level simulator of one serving replica: continuous batching with chunked prefill.

The model (vLLM V1's scheduler, simplified; every assumption is listed):

    what            | model
    ----------------|----------------------------------------------------------------------------
    arrivals        | Poisson at ``rate`` requests/s (``rate=inf``: all at t = 0, the offline
                    |   mode of trtllm-bench / vLLM's benchmark_throughput), or a closed loop of
                    |   ``concurrency`` clients each sending its next request when one finishes
    admission       | FCFS; a request is admitted when max_num_seqs allows and the KV cache has
                    |   room for all input + output tokens (reserved up front: no preemption)
    one step        | every running decode contributes 1 token; the rest of the
                    |   max_num_batched_tokens budget goes to prefill chunks, oldest first
    first token     | at the end of the step that runs a request's last prefill chunk (TTFT)
    later tokens    | one per step while decoding: each inter-token latency is one step
    step time       | overhead + a roofline per kernel class + TP all-reduces, from the engine
                    |   (the GEMMs and the attention kernel run one after the other, so each
                    |   is bound by its own compute or its own bytes; one roofline over the
                    |   whole step would let the KV read hide under the GEMMs' compute):
                    |   Linears = max((tokens x Linear FLOPs per token + logit rows x head
                    |     FLOPs) / (tp x matmul rate), (weights one rank reads (MoE: the
                    |     expected distinct experts the step's tokens touch, E (1 - (1 -
                    |     k/E)^T)) + fp32 logits written) / (HBM bandwidth x efficiency)),
                    |     the matmul rate times ``timing.weight_only_factor`` at the step's
                    |     rows for weight-only formats (dequantising kernels)
                    |   attention = max(attended (query, key) pairs x FLOPs per pair /
                    |     (tp x attention rate), KV bytes of every cached token the step
                    |     attends to / (HBM bandwidth x efficiency)); pairs of a chunk of c
                    |     tokens after p cached ones = c p + c (c + 1) / 2, of a decode = its
                    |     context
                    |   TP: 2 all-reduces per block of tokens x d_model activations
                    |   pipeline stages run one after another (no micro-batching across steps)
    prefix cache    | ``prefix_hit_rate`` h: every prompt starts with a prefix shared by all
                    |   requests (system prompt, few-shot examples) of h x input tokens, cut
                    |   to whole blocks and at most input - 1 (vLLM recomputes the last
                    |   token): its blocks are stored once (the cache loses them once, each
                    |   request reserves only its own tokens), its tokens are never
                    |   prefilled (a prompt's first chunk starts after them, attending to
                    |   them as cached context), and decodes still read them per sequence
    not modelled    | sliding windows (every layer attends to the whole context), preemption,
                    |   detokenisation, network; speculative decoding is a separate
                    |   estimate (``speculative``)

Rates come from ``timing.DeviceProfile`` (dense peak x efficiency), FLOPs from the op list
(``Op.fwd_flops``/``decode_flops``), bytes from ``sharding.local_params`` and
``kvcache.kv_cache_bytes_per_token``: nothing is re-derived here.

Speed: per step the state is a handful of sums (decoding requests, their summed context), the
prefill queue and the requests due to finish at that step, so an hour at 50 requests/s runs in
seconds (benchmarks/serving_sim.py).
"""

from __future__ import annotations

import functools
import heapq
import math
from collections import deque
from dataclasses import dataclass, field

import numpy as np

from ..errors import TxcalcError
from .kv import cached_prefix_tokens

#: CPU time per engine step outside the GPU kernels (scheduling, sampling, input preparation,
#: launch gaps): an assumed figure, not a measurement; one of the two efficiency parameters a
#: calibration may fit per GPU (the other is the matmul efficiency of the DeviceProfile)
STEP_OVERHEAD_S = 0.004
DEFAULT_MAX_NUM_BATCHED_TOKENS = 8192  #: vLLM V1's default for online serving on H100-class
DEFAULT_MAX_NUM_SEQS = 256
#: most requests one simulation accepts (keeps memory and time bounded)
MAX_REQUESTS = 10**7


class SimError(TxcalcError):
    """A simulation that cannot run (a request longer than the KV cache, bad lengths)."""


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

    def step_s(self, tokens: int, logit_rows: int, pairs: int, kv_read_tokens: int,
               kv_read_bytes: int | None = None) -> float:
        """Seconds of one step: ``tokens`` rows through the blocks, ``logit_rows`` through the
        head, ``pairs`` attended (query, key) pairs, ``kv_read_tokens`` cached tokens read
        (``kv_read_bytes``: those tokens' bytes on one rank when the caller knows them better
        than tokens x kv_bytes_per_token: sliding windows, recurrent states)."""
        from ..engine.timing import weight_only_share
        tp = self.tp
        mm = self.matmul_flops_per_s
        if self.weight_only_floor is not None:  # dequantising kernels lose speed past the knee
            mm *= weight_only_share(self.weight_only_floor, tokens)
        lin_compute = (tokens * self.lin_flops_per_token + logit_rows * self.head_flops_per_row) \
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
        return self.overhead_s + max(lin_compute, w / self.bytes_per_s) + max(
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
               attention_dtype: str | None = None, **kv_kw) -> StepModel:
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
                         attention_dtype=attention_dtype, **kv_kw)


def replica_steps(s, *, tp: int = 1, pp: int = 1, overhead_s: float = STEP_OVERHEAD_S,
                  kv_capacity_tokens: int | None = None, ep: int = 1,
                  attention_dtype: str | None = None, **kv_kw) -> StepModel:
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
                     cfg.vocab_size * 4 // tp, floor)


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


@dataclass
class SimResult:
    """Latencies (seconds) and throughput of one simulated run."""

    n_requests: int
    duration_s: float
    ttft_s: np.ndarray = field(repr=False)
    tpot_s: np.ndarray = field(repr=False)  #: per request: decode time / (output - 1)
    itl_values_s: np.ndarray = field(repr=False)  #: distinct step gaps ...
    itl_weights: np.ndarray = field(repr=False)  #: ... and how many tokens had each gap
    output_tokens: int = 0
    input_tokens: int = 0
    steps: int = 0
    max_running: int = 0
    #: open loop: (n - 1) / (last arrival - first arrival), the rate the trace really offered
    offered_rate: float = 0.0
    cached_tokens: int = 0  #: prompt tokens served from the prefix cache, all requests
    shared_blocks: int = 0  #: KV blocks of the shared prefix (stored once)

    @property
    def requests_per_s(self) -> float:
        return self.n_requests / self.duration_s

    @property
    def output_tokens_per_s(self) -> float:
        return self.output_tokens / self.duration_s

    def ttft(self, q: float) -> float:
        return float(np.percentile(self.ttft_s, q))

    def itl(self, q: float) -> float:
        """Percentile q of every inter-token gap of every request (vLLM's benchmark ITL)."""
        if not len(self.itl_values_s):
            return 0.0
        order = np.argsort(self.itl_values_s)
        cum = np.cumsum(self.itl_weights[order])
        i = int(np.searchsorted(cum, q / 100 * cum[-1]))
        return float(self.itl_values_s[order][min(i, len(order) - 1)])

    def goodput(self, ttft_slo_s: float | None = None, tpot_slo_s: float | None = None) -> float:
        """Requests/s that met both SLOs (TTFT, and time per output token), over the run's
        whole duration (the drain after the last arrival included)."""
        return self.attainment(ttft_slo_s, tpot_slo_s) * self.n_requests / self.duration_s

    def attainment(self, ttft_slo_s: float | None = None,
                   tpot_slo_s: float | None = None) -> float:
        """Share of the requests that met both SLOs (TTFT, and time per output token): a
        serving plan's goodput is the rate it serves times this share (DistServe's SLO
        attainment), free of the trace's sampled rate and its drain."""
        ok = np.ones(self.n_requests, dtype=bool)
        if ttft_slo_s is not None:
            ok &= self.ttft_s <= ttft_slo_s
        if tpot_slo_s is not None:
            ok &= self.tpot_s <= tpot_slo_s
        return float(ok.sum()) / self.n_requests

    def to_json(self) -> dict:
        return {"n_requests": self.n_requests, "duration_s": self.duration_s,
                "requests_per_s": self.requests_per_s,
                "output_tokens_per_s": self.output_tokens_per_s,
                **{f"ttft_p{q}_s": self.ttft(q) for q in (50, 90, 99)},
                **{f"itl_p{q}_s": self.itl(q) for q in (50, 90, 99)},
                "tpot_mean_s": float(self.tpot_s.mean()) if len(self.tpot_s) else 0.0,
                "steps": self.steps, "max_running": self.max_running}


def lengths(name: str, value, n: int, rng) -> np.ndarray:
    """``n`` token counts: an int (every request the same), or an array of n counts."""
    from .. import inputs as I
    if isinstance(value, (int, np.integer)) and not isinstance(value, bool):
        return np.full(n, I.integer(name, int(value), 1, I.MAX_SEQ), dtype=np.int64)
    arr = np.asarray(value)
    if arr.shape != (n,) or not np.issubdtype(arr.dtype, np.integer):
        raise SimError(f"{name} must be an int or {n} integers, got {I.show(value)}")
    if arr.min() < 1 or arr.max() > I.MAX_SEQ:
        raise SimError(f"{name} must lie in [1, {I.MAX_SEQ:,}] (got {arr.min()}..{arr.max()})")
    return arr.astype(np.int64)


def simulate(sm: StepModel, n_requests: int, input_len, output_len, *,
             rate: float | None = None, concurrency: int | None = None,
             max_num_batched_tokens: int = DEFAULT_MAX_NUM_BATCHED_TOKENS,
             max_num_seqs: int = DEFAULT_MAX_NUM_SEQS, seed: int = 0,
             prefix_hit_rate: float = 0.0, block_size: int = 16,
             decode_only: bool = False) -> SimResult:
    """Serve ``n_requests`` on one replica (see the module table). Exactly one of ``rate``
    (requests/s, ``math.inf`` = all at once) and ``concurrency`` (closed loop);
    ``prefix_hit_rate``: the share of every prompt found in the prefix cache.
    ``decode_only``: a disaggregated decode instance; requests arrive with their prompt's KV
    cache and first token (made by a prefill instance) and decode from the next step on
    (their ``ttft_s`` is 0; output_tokens still counts the first token)."""
    from .. import inputs as I
    n = I.integer("n_requests", n_requests, 1, MAX_REQUESTS)
    budget = I.integer("max_num_batched_tokens", max_num_batched_tokens, 1, I.MAX_SEQ)
    max_seqs = I.integer("max_num_seqs", max_num_seqs, 1, I.MAX_BATCH)
    if (rate is None) == (concurrency is None):
        raise SimError("give exactly one of rate and concurrency")
    rng = np.random.default_rng(seed)
    ins = lengths("input_len", input_len, n, rng)
    outs = lengths("output_len", output_len, n, rng)
    cached = cached_prefix_tokens(ins, prefix_hit_rate, block_size)
    shared = int(cached.max())  # the one shared prefix, stored once
    cap = sm.kv_capacity_tokens
    big = int((ins + outs - cached).max()) + shared
    if cap and big > cap:
        raise SimError(f"a request of {big:,} tokens does not fit the KV cache of "
                       f"{cap:,} tokens")
    if rate is not None:
        if not (isinstance(rate, (int, float)) and not isinstance(rate, bool)) or not rate > 0:
            raise SimError(f"rate ({I.show(rate)}) must be a positive number or inf")
        arrive = np.zeros(n) if math.isinf(rate) else \
            np.cumsum(rng.exponential(1.0 / rate, n))
        closed = 0
    else:
        closed = I.integer("concurrency", concurrency, 1, I.MAX_BATCH)
        arrive = np.full(n, np.inf)
        arrive[:min(closed, n)] = 0.0
    arrive_l = arrive.tolist()
    ins_l, outs_l, cached_l = ins.tolist(), outs.tolist(), cached.tolist()

    ttft = [0.0] * n
    first_t = [0.0] * n
    tpot = [0.0] * n
    gaps: dict[float, int] = {}
    waiting: deque[int] = deque()  # arrived, not yet admitted to the cache (FCFS)
    next_arrival = 0  # index of the next request to arrive (open loop)
    sent = min(closed, n) if closed else 0  # closed loop: requests released so far
    prefill: list[list[int]] = []  # [request, tokens done]
    finish_at: list[tuple[int, int]] = []  # heap of (step it finishes, request)
    decoding = 0
    ctx_sum = 0  # summed context of the decoding requests (tokens cached + the new one)
    free = cap - shared if cap else 1 << 62
    t = 0.0
    step = 0
    done = 0
    out_tokens = 0
    max_running = 0
    while done < n:
        # arrivals up to now join the queue
        while next_arrival < n and arrive_l[next_arrival] <= t:
            waiting.append(next_arrival)
            next_arrival += 1
        # admission: FCFS while seats and blocks allow
        running = decoding + len(prefill)
        while waiting and running < max_seqs:
            r = waiting[0]
            need = ins_l[r] + outs_l[r] - cached_l[r]
            if need > free:
                break
            free -= need
            waiting.popleft()
            running += 1
            if decode_only:  # its prompt was prefilled elsewhere: it decodes from now on
                first_t[r] = t
                out_tokens += 1
                if outs_l[r] == 1:
                    free += need
                    done += 1
                    running -= 1
                    continue
                decoding += 1
                ctx_sum += ins_l[r] + 1
                heapq.heappush(finish_at, (step + outs_l[r] - 1, r))
                continue
            prefill.append([r, cached_l[r]])
        max_running = max(max_running, running)
        if not prefill and not decoding:  # idle until the next arrival
            if next_arrival < n and arrive_l[next_arrival] < math.inf:
                t = max(t, arrive_l[next_arrival])
                continue
            raise SimError("the simulation stalled (no request can be admitted)")
        # one step: every decode 1 token, then prefill chunks in the remaining budget
        room = budget - decoding
        tokens = decoding
        pairs = ctx_sum
        kv_read = ctx_sum
        logits = decoding
        finished_prefill = []
        for item in prefill:
            if room <= 0:
                break
            r, done_tok = item
            c = min(room, ins_l[r] - done_tok)
            pairs += c * done_tok + c * (c + 1) // 2
            kv_read += done_tok
            tokens += c
            room -= c
            item[1] += c
            if item[1] == ins_l[r]:
                finished_prefill.append(r)
                logits += 1
        dt = sm.step_s(tokens, logits, pairs, kv_read)
        t += dt
        step += 1
        if decoding:
            gaps[dt] = gaps.get(dt, 0) + decoding
            out_tokens += decoding
            ctx_sum += decoding
        # requests whose last output token came out in this step leave
        while finish_at and finish_at[0][0] == step:
            _, r = heapq.heappop(finish_at)
            decoding -= 1
            ctx_sum -= ins_l[r] + outs_l[r]
            free += ins_l[r] + outs_l[r] - cached_l[r]
            tpot[r] = (t - first_t[r]) / max(1, outs_l[r] - 1)
            done += 1
            if closed and sent < n:
                arrive_l[sent] = t
                sent += 1
        # requests whose prompt completed produce their first token now
        if finished_prefill:
            prefill = [it for it in prefill if it[1] < ins_l[it[0]]]
            for r in finished_prefill:
                ttft[r] = t - arrive_l[r]
                first_t[r] = t
                out_tokens += 1
                if outs_l[r] == 1:
                    free += ins_l[r] + 1 - cached_l[r]
                    done += 1
                    if closed and sent < n:
                        arrive_l[sent] = t
                        sent += 1
                    continue
                decoding += 1
                ctx_sum += ins_l[r] + 1
                heapq.heappush(finish_at, (step + outs_l[r] - 1, r))
    start = float(np.min(arrive)) if rate is not None else 0.0
    vals = np.fromiter(gaps.keys(), dtype=float, count=len(gaps))
    wts = np.fromiter(gaps.values(), dtype=np.int64, count=len(gaps))
    span = float(arrive[-1] - arrive[0]) if rate is not None and n > 1 else 0.0
    offered = (n - 1) / span if span > 0 else math.inf
    return SimResult(n, t - start, np.asarray(ttft), np.asarray(tpot), vals, wts,
                     out_tokens, int(ins.sum()), step, max_running, offered,
                     int(cached.sum()), -(-shared // block_size))


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
