"""Continuous batching on one replica, step by step, under an engine's scheduler profile.

``simulate(sm, n, input_len, output_len, rate=... | concurrency=..., engine=...)`` serves n
requests with the step costs of ``sm`` (a ``serve.sim.StepModel``) and the step-filling rules
of ``engine`` (``serve.sched``: vllm, vllm-v0, sglang, trtllm; None: txcalc's scheduler
before the profiles, ``sched.DEFAULT``):

    what            | model
    ----------------|----------------------------------------------------------------------------
    arrivals        | Poisson at ``rate`` requests/s, the trace spanning exactly (n - 1) / rate
                    |   (``poisson_arrivals``; ``rate=inf``: all at t = 0, the offline
                    |   mode of trtllm-bench / vLLM's benchmark_throughput), or a closed loop of
                    |   ``concurrency`` clients each sending its next request when one finishes
    admission       | FCFS while max_num_seqs and the KV cache allow (the profile's KV rule:
                    |   prompt + outputs reserved, or the prompt alone with a watermark or
                    |   SGLang's new_token_ratio reserve), within the step's token budget
                    |   where the engine admits that way
    one step        | mixed profiles: every running decode 1 token, the rest of the budget to
                    |   prompt tokens, oldest first (chunked: the last one split; whole: the
                    |   first prompt that does not fit ends the step); prefill-first profiles
                    |   (vllm-v0, sglang): a step with prompt tokens carries no decode, so every
                    |   running sequence waits for it (the prefill stall)
    out of KV       | incremental profiles: before a step whose decodes find no free slot, the
                    |   newest running request is preempted (its tokens freed, its prompt and
                    |   outputs so far prefilled again when it is readmitted, first in line)
    first token     | at the end of the step that runs a request's last prompt token (TTFT,
                    |   from the client's send: it reaches the queue ``request_overhead_s``
                    |   later, the API server's share)
    front end       | profiles with one (``sched.Scheduler.front_end``): a single worker, in
                    |   parallel with the steps, takes each request when it is sent
                    |   (``sm.front_request_s``: tokenising, setup; it reaches the queue when
                    |   done) and each step's output tokens when the step ends
                    |   (``sm.front_token_s`` a token: detokenising, streaming), first come
                    |   first served; a token reaches the client when its step is processed,
                    |   and TTFT, ITL, end-to-end latency, a closed loop's next send and the
                    |   run's duration count from there (throughput: the slower stage's);
                    |   decode_only instances have none
    later tokens    | one per decode step; each gap (ITL) runs from the request's previous
                    |   token to this one, prefill stalls and preemptions included
    step time       | ``sm.step_s`` of the step's tokens, logit rows, attended pairs, cached
                    |   tokens read and sequences; a decode-only step within the profile's
                    |   CUDA-graph sizes is padded to the next captured size, others run eager
    prefix cache    | ``prefix_hit_rate`` h: a shared prefix of h x input tokens (whole blocks,
                    |   at most input - 1) stored once and never prefilled

Speed: per step the state is a handful of sums (decoding requests, their summed context), the
prompt list and a heap of the decode steps at which requests finish, so an hour at 50
requests/s runs in seconds (benchmarks/serving_sim.py).
"""

from __future__ import annotations

import heapq
import math
from collections import deque
from dataclasses import dataclass, field

import numpy as np

from ..errors import TxcalcError
from .kv import DEFAULT_MAX_NUM_SEQS, cached_prefix_tokens  # noqa: F401  (re-exported)

DEFAULT_MAX_NUM_BATCHED_TOKENS = 8192  #: vLLM V1's default for online serving on H100-class
#: most requests one simulation accepts (keeps memory and time bounded)
MAX_REQUESTS = 10**7
#: a run is saturated when it completes less than this share of the requests/s it was offered
#: (the queue grows without bound; serve.plan's KEEP_UP)
SATURATED_BELOW = 0.95


class SimError(TxcalcError):
    """A simulation that cannot run (a request longer than the KV cache, bad lengths)."""


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
    e2e_s: np.ndarray = field(default=None, repr=False)  #: arrival to last token, per request
    preemptions: int = 0
    engine: str = "txcalc"

    @property
    def requests_per_s(self) -> float:
        return self.n_requests / self.duration_s

    @property
    def output_tokens_per_s(self) -> float:
        return self.output_tokens / self.duration_s

    @property
    def saturated(self) -> bool:
        """An open-loop run that completed less than SATURATED_BELOW of its offered rate (its
        queue grew for the whole trace); an offline run (every request waiting at t = 0) is
        saturated by construction, a closed loop never (its clients wait for answers)."""
        if math.isinf(self.offered_rate):
            return True
        return bool(self.offered_rate) and \
            self.requests_per_s < SATURATED_BELOW * self.offered_rate

    def ttft(self, q: float) -> float:
        return float(np.percentile(self.ttft_s, q))

    def e2e(self, q: float) -> float:
        return float(np.percentile(self.e2e_s, q))

    def itl(self, q: float) -> float:
        """Percentile q of every inter-token gap of every request (vLLM's benchmark ITL)."""
        if not len(self.itl_values_s):
            return 0.0
        order = np.argsort(self.itl_values_s)
        cum = np.cumsum(self.itl_weights[order])
        i = int(np.searchsorted(cum, q / 100 * cum[-1]))
        return float(self.itl_values_s[order][min(i, len(order) - 1)])

    @property
    def itl_mean_s(self) -> float:
        """The mean of every inter-token gap (token-weighted, vLLM's benchmark mean ITL)."""
        w = self.itl_weights.sum()
        return float((self.itl_values_s * self.itl_weights).sum() / w) if w else 0.0

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
                "steps": self.steps, "max_running": self.max_running,
                **self.load_json()}

    def load_json(self) -> dict:
        """Means and percentiles under load (engines and benchmark tools publish means), the
        rate offered and achieved, and whether the queue grew without bound."""
        off = self.offered_rate
        return {"engine": self.engine, "ttft_mean_s": float(self.ttft_s.mean()),
                "itl_mean_s": self.itl_mean_s, "e2e_mean_s": float(self.e2e_s.mean()),
                **{f"e2e_p{q}_s": self.e2e(q) for q in (50, 90, 99)},
                "offered_requests_per_s": None if not off or math.isinf(off) else off,
                "achieved_requests_per_s": self.requests_per_s,
                "saturated": self.saturated, "preemptions": self.preemptions}


def poisson_arrivals(n: int, rate: float, rng) -> np.ndarray:
    """``n`` arrival times of a Poisson process at ``rate`` requests/s, conditioned on its
    trace spanning (n - 1) / rate from the first arrival to the last: the process's gaps
    (``n`` exponential draws, the first one the start) scaled by one factor. Given their sum,
    a Poisson process's gaps are uniform spacings (Dirichlet(1, ..., 1) times the sum), so
    the scaled trace is Poisson in shape and offers exactly the rate asked. Unscaled, a short
    trace offers what its draws happen to: (n - 1) / span has a relative spread of about
    1 / sqrt(n - 1), 5.8 % at the 300 requests a serving plan simulates per replica, and
    seed 0's 300 draws offered 1.44 requests/s when 1.67 was asked (14 % light: latencies
    answered for a lighter load than the user's)."""
    arrive = np.cumsum(rng.exponential(1.0 / rate, n))
    if n > 1:
        arrive *= (n - 1) / rate / float(arrive[-1] - arrive[0])
    return arrive


def offered_rate(n: int, rate: float | None) -> float:
    """The requests/s a trace of ``n`` requests offers: ``rate`` itself for a Poisson trace
    (``poisson_arrivals`` spans (n - 1) / rate by construction), inf for an offline run or
    a lone request, 0 for a closed loop (``rate`` None: it offers what it is served)."""
    if rate is None:
        return 0.0
    return math.inf if math.isinf(rate) or n < 2 else float(rate)


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


def simulate(sm, n_requests: int, input_len, output_len, *,
             rate: float | None = None, concurrency: int | None = None,
             max_num_batched_tokens: int | None = None, max_num_seqs: int | None = None,
             seed: int = 0, prefix_hit_rate: float = 0.0, block_size: int = 16,
             decode_only: bool = False, engine=None) -> SimResult:
    """Serve ``n_requests`` on one replica (see the module table). Exactly one of ``rate``
    (requests/s, ``math.inf`` = all at once) and ``concurrency`` (closed loop);
    ``prefix_hit_rate``: the share of every prompt found in the prefix cache.
    ``decode_only``: a disaggregated decode instance; requests arrive with their prompt's KV
    cache and first token (made by a prefill instance) and decode from the next step on
    (their ``ttft_s`` is 0; output_tokens still counts the first token). ``engine``: an
    --engine name or a ``sched.Scheduler`` (None: ``sched.DEFAULT``); ``max_num_seqs`` and
    ``max_num_batched_tokens`` default to its own."""
    from .. import inputs as I
    from .sched import default_budget, scheduler
    sch = scheduler(engine)
    n = I.integer("n_requests", n_requests, 1, MAX_REQUESTS)
    if (rate is None) == (concurrency is None):
        raise SimError("give exactly one of rate and concurrency")
    rng = np.random.default_rng(seed)
    ins = lengths("input_len", input_len, n, rng)
    outs = lengths("output_len", output_len, n, rng)
    budget = I.integer("max_num_batched_tokens", default_budget(
        sch, int((ins + outs).max())) if max_num_batched_tokens is None
        else max_num_batched_tokens, 1, I.MAX_SEQ)
    max_seqs = I.integer("max_num_seqs", sch.max_num_seqs if max_num_seqs is None
                         else max_num_seqs, 1, I.MAX_BATCH)
    cached = cached_prefix_tokens(ins, prefix_hit_rate, block_size)
    shared = int(cached.max())  # the one shared prefix, stored once
    cap = sm.kv_capacity_tokens
    big = int((ins + outs - cached).max()) + shared
    if cap and big > cap:
        raise SimError(f"a request of {big:,} tokens does not fit the KV cache of "
                       f"{cap:,} tokens")
    if not sch.chunked and not decode_only and int((ins - cached).max()) > budget:
        raise SimError(f"{sch.name} prefills whole prompts: a prompt of "
                       f"{int((ins - cached).max()):,} tokens exceeds max_num_batched_tokens "
                       f"({budget:,})")
    if rate is not None:
        if not (isinstance(rate, (int, float)) and not isinstance(rate, bool)) or not rate > 0:
            raise SimError(f"rate ({I.show(rate)}) must be a positive number or inf")
        arrive = np.zeros(n) if math.isinf(rate) else poisson_arrivals(n, rate, rng)
        closed = 0
    else:
        closed = I.integer("concurrency", concurrency, 1, I.MAX_BATCH)
        arrive = np.full(n, np.inf)
        arrive[:min(closed, n)] = 0.0
    arrive_l = arrive.tolist()
    ins_l, outs_l, cached_l = ins.tolist(), outs.tolist(), cached.tolist()
    out = _Loop(sm, sch, budget, max_seqs, cap, shared, decode_only).run(
        n, arrive_l, ins_l, outs_l, cached_l, closed)
    ttft, tpot, e2e, gaps, out_tokens, t, step, max_running, pre = out
    start = float(np.min(arrive)) if rate is not None else 0.0
    vals = np.fromiter(gaps.keys(), dtype=float, count=len(gaps))
    wts = np.fromiter(gaps.values(), dtype=np.int64, count=len(gaps))
    return SimResult(n, t - start, np.asarray(ttft), np.asarray(tpot), vals, wts,
                     out_tokens, int(ins.sum()), step, max_running, offered_rate(n, rate),
                     int(cached.sum()), -(-shared // block_size), np.asarray(e2e), pre,
                     sch.name)


def saturation_requests_per_s(sm, n_requests: int, input_len, output_len, **kw) -> float:
    """The offered requests/s past which one replica's queue grows without bound: the
    completed requests/s of an offline run (every request queued at t = 0, the engine's
    batch as full as its seats, KV cache and token budget allow), the drain of the last
    batch included (so a little below the steady rate: n_requests sets how little).
    ``kw``: ``simulate``'s (engine, max_num_seqs, max_num_batched_tokens, ...)."""
    return simulate(sm, n_requests, input_len, output_len, rate=math.inf, **kw).requests_per_s


class _Loop:
    """The step loop of ``simulate`` (module table): one object so the profile's rules read
    as methods; the state is plain numbers and lists for speed."""

    def __init__(self, sm, sch, budget, max_seqs, cap, shared, decode_only):
        self.sm, self.sch, self.budget, self.max_seqs = sm, sch, budget, max_seqs
        self.cap = cap
        self.free = cap - shared if cap else 1 << 62
        self.watermark = int(sch.watermark * cap) if cap else 0
        self.decode_only = decode_only
        self.incremental = sch.kv == "incremental"
        self.graphs = bool(sch.cuda_graph_sizes)
        #: the API server's time from a client's send to the scheduler's queue (tokenising,
        #: the hop to the engine core): StepModel.request_overhead_s
        self.front = getattr(sm, "request_overhead_s", 0.0)
        #: the front end's serial host-CPU seconds per request and per output token (one
        #: worker pipelined with the steps; both 0: no front-end stage, the loop as before)
        has_front = bool(sch.front_end)
        self.fe_req = getattr(sm, "front_request_s", 0.0) if has_front else 0.0
        self.fe_tok = getattr(sm, "front_token_s", 0.0) if has_front else 0.0

    def run(self, n, arrive_l, ins_l, outs_l, cached_l, closed):
        sch, budget, max_seqs = self.sch, self.budget, self.max_seqs
        incremental, mixed, chunked = self.incremental, sch.mixed, sch.chunked
        in_budget, decode_only = sch.admit_in_budget, self.decode_only
        ratio = sch.ratio_init
        ttft = [0.0] * n
        first_t = [0.0] * n
        tpot = [0.0] * n
        e2e = [0.0] * n
        plen = list(ins_l)  # tokens to prefill: the prompt, + outputs so far after preemption
        gen_pre = [0] * n  # outputs made before the last preemption
        last_tok = [0.0] * n  # time of the last token of a preempted request
        gaps: dict[float, int] = {}
        waiting: deque[int] = deque()  # arrived, not yet admitted (FCFS; preempted first)
        next_arrival = 0
        sent = min(closed, n) if closed else 0
        prefill: list[list[int]] = []  # [request, tokens done], admission order
        finish_at: list[tuple[int, int]] = []  # heap of (decode step it finishes, request)
        dec: dict[int, tuple] = {}  # incremental: decoding request -> (join dstep, g, key)
        order: dict[int, None] = {}  # incremental: running requests in admission order
        fresh: dict[int, float] = {}  # began decoding since the last decode step: its time
        decoding = 0
        ctx_sum = 0  # summed context of the decoding requests (tokens cached + the new one)
        rem_out = 0  # outputs still to come of the running requests (SGLang's reserve)
        free = self.free
        t = 0.0
        last_dec_end = 0.0  # when the last step that carried decodes ended
        step = dsteps = done = out_tokens = max_running = preemptions = 0
        # the front end (module table): fe, when its worker is next free; ready[r], when it
        # has set request r up (tokenised); tokens of a step reach the client at `deliver`
        fe_req, fe_tok = self.fe_req, self.fe_tok
        serial = bool(fe_req or fe_tok) and not decode_only
        fe = 0.0
        ready = [0.0] * n if serial else arrive_l  # when each request can reach the queue
        fe_next = 0  # requests the front end has taken, in arrival order
        deliver = 0.0

        def tokenise_until(when):  # the front end takes every request sent by `when`
            nonlocal fe, fe_next
            while fe_next < n and arrive_l[fe_next] <= when:
                fe = max(fe, arrive_l[fe_next]) + fe_req
                ready[fe_next] = fe
                fe_next += 1

        def release(r):  # closed loop: the client of a finished request sends its next one
            nonlocal sent
            if closed and sent < n:
                arrive_l[sent] = deliver  # once the last token has reached the client
                sent += 1

        front = self.front
        while done < n:
            if serial:
                tokenise_until(t)
            sent_by = fe_next if serial else n  # the requests the queue can hold by now
            while next_arrival < sent_by and ready[next_arrival] + front <= t:
                waiting.append(next_arrival)
                next_arrival += 1
            # vLLM V1 schedules the running requests first: their decodes need a free slot
            if incremental and mixed and decoding > free:
                free, decoding, ctx_sum, rem_out = self._preempt(
                    decoding, free, ctx_sum, rem_out, order, dec, prefill, waiting, plen,
                    gen_pre, last_tok, fresh, last_dec_end, dsteps, ins_l, outs_l, cached_l)
                preemptions += self.n_preempted
            # admission
            running = decoding + len(prefill)
            room_new = budget - (decoding if mixed else 0) - sum(
                plen[r] - d for r, d in prefill) if in_budget else 1 << 62
            while waiting and running < max_seqs and room_new > 0:
                r = waiting[0]
                if incremental:
                    need = plen[r] - cached_l[r]
                    # a mixed step's decodes take their slots before any prompt is admitted
                    avail = free - decoding if mixed else free
                    if ratio:  # SGLang: the outputs to come, its own and the running ones'
                        if need + ratio * (outs_l[r] - gen_pre[r] + rem_out) > avail:
                            break
                    elif need > avail - self.watermark:
                        break
                else:
                    need = ins_l[r] + outs_l[r] - cached_l[r]
                    if need > free:
                        break
                if not chunked and in_budget and plen[r] - cached_l[r] > room_new:
                    break  # a whole prompt that does not fit this step waits (FCFS)
                free -= need
                waiting.popleft()
                running += 1
                if incremental:
                    order[r] = None
                    rem_out += outs_l[r] - gen_pre[r]
                if decode_only:  # its prompt was prefilled elsewhere: it decodes from now on
                    first_t[r] = t
                    out_tokens += 1
                    if outs_l[r] == 1:
                        free += need
                        done += 1
                        running -= 1
                        e2e[r] = t - arrive_l[r]
                        continue
                    decoding += 1
                    ctx_sum += ins_l[r] + 1
                    fresh[r] = t
                    heapq.heappush(finish_at, (dsteps + outs_l[r] - 1, r))
                    continue
                prefill.append([r, cached_l[r]])
                room_new -= plen[r] - cached_l[r]
            max_running = max(max_running, running)
            if not prefill and not decoding:  # idle until the next arrival
                if next_arrival < n and arrive_l[next_arrival] < math.inf:
                    if serial:
                        tokenise_until(max(t, arrive_l[next_arrival]))
                    t = max(t, ready[next_arrival] + front)
                    continue
                raise SimError("the simulation stalled (no request can be admitted)")
            with_dec = decoding and (mixed or not prefill)
            if with_dec and incremental and not mixed and decoding > free:
                free, decoding, ctx_sum, rem_out = self._preempt(
                    decoding, free, ctx_sum, rem_out, order, dec, prefill, waiting, plen,
                    gen_pre, last_tok, fresh, last_dec_end, dsteps, ins_l, outs_l, cached_l)
                preemptions += self.n_preempted
                with_dec = decoding > 0
                if not decoding and not prefill:
                    continue
            # one step: decodes (mixed, or no prompt waiting), then prompt tokens in the budget
            room = budget
            tokens = pairs = kv_read = logits = 0
            if with_dec:
                room -= decoding
                tokens = pairs = kv_read = logits = decoding
                pairs = kv_read = ctx_sum
            finished_prefill = []
            n_pf = 0  # prompts with tokens in this step
            for item in prefill:
                if room <= 0:
                    break
                r, done_tok = item
                c = plen[r] - done_tok
                if c > room:
                    if not chunked:
                        break
                    c = room
                pairs += c * done_tok + c * (c + 1) // 2
                kv_read += done_tok
                tokens += c
                room -= c
                item[1] += c
                n_pf += 1
                if item[1] == plen[r]:
                    finished_prefill.append(r)
                    logits += 1
            dt = self._step_s(tokens, logits, pairs, kv_read, with_dec, decoding, n_pf)
            t_before = t
            t += dt
            step += 1
            if serial:  # the step's tokens queue at the front end behind what it holds
                tokenise_until(t)
                fe = max(fe, t) + fe_tok * ((decoding if with_dec else 0)
                                            + len(finished_prefill))
                deliver = fe
            else:
                deliver = t
            if with_dec:
                # each gap runs from the request's previous token: the last decode step's end,
                # or the step where it began decoding (a prefill stall lies in between); times
                # are deliveries to the client (the step's end without a front end)
                old = decoding - len(fresh)
                if old:
                    g = dt if last_dec_end == t_before and deliver == t \
                        else deliver - last_dec_end
                    gaps[g] = gaps.get(g, 0) + old
                for tj in fresh.values():
                    g = dt if tj == t_before and deliver == t else deliver - tj
                    gaps[g] = gaps.get(g, 0) + 1
                fresh.clear()
                last_dec_end = deliver
                dsteps += 1
                out_tokens += decoding
                ctx_sum += decoding
                if incremental:
                    free -= decoding
                    rem_out -= decoding
                    if ratio:
                        ratio = max(sch.ratio_min, ratio - sch.ratio_decay)
                # requests whose last output token came out in this step leave
                while finish_at and finish_at[0][0] == dsteps:
                    key, r = heapq.heappop(finish_at)
                    if incremental:
                        if dec.get(r, (0, 0, -1))[2] != key:
                            continue  # preempted since: a stale entry
                        del dec[r]
                        del order[r]
                        free += ins_l[r] + outs_l[r] - 1 - cached_l[r]
                    else:
                        free += ins_l[r] + outs_l[r] - cached_l[r]
                    decoding -= 1
                    ctx_sum -= ins_l[r] + outs_l[r]
                    tpot[r] = (deliver - first_t[r]) / max(1, outs_l[r] - 1)
                    e2e[r] = deliver - arrive_l[r]
                    done += 1
                    release(r)
            # requests whose prompt completed produce a token now (the first, or the next one
            # of a preempted request)
            if finished_prefill:
                prefill = [it for it in prefill if it[1] < plen[it[0]]]
                for r in finished_prefill:
                    g = gen_pre[r] + 1
                    out_tokens += 1
                    if gen_pre[r]:
                        gap = deliver - last_tok[r]
                        gaps[gap] = gaps.get(gap, 0) + 1
                    else:
                        ttft[r] = deliver - arrive_l[r]
                        first_t[r] = deliver
                    if incremental:
                        rem_out -= 1
                    if g == outs_l[r]:
                        free += (ins_l[r] + g - 1 if incremental else ins_l[r] + outs_l[r]) \
                            - cached_l[r]
                        if incremental:
                            del order[r]
                        tpot[r] = (deliver - first_t[r]) / max(1, outs_l[r] - 1)
                        e2e[r] = deliver - arrive_l[r]
                        done += 1
                        release(r)
                        continue
                    decoding += 1
                    ctx_sum += ins_l[r] + g
                    fresh[r] = deliver
                    key = dsteps + outs_l[r] - g
                    if incremental:
                        dec[r] = (dsteps, g, key)
                    heapq.heappush(finish_at, (key, r))
        return ttft, tpot, e2e, gaps, out_tokens, max(t, deliver), step, max_running, \
            preemptions

    def _step_s(self, tokens, logits, pairs, kv_read, with_dec, decoding, n_pf) -> float:
        """The step's seconds: a decode-only step within the captured CUDA-graph sizes is
        padded to the next one and runs as a graph; any other step runs eager (profiles
        without graph sizes: neither)."""
        seqs = (decoding if with_dec else 0) + n_pf
        if not self.graphs:
            return self.sm.step_s(tokens, logits, pairs, kv_read, seqs=seqs)
        pad = self.sch.graph_batch(tokens) if tokens == decoding and with_dec else None
        return self.sm.step_s(tokens, logits, pairs, kv_read, seqs=seqs,
                              padded_tokens=pad, eager=pad is None)

    def _preempt(self, decoding, free, ctx_sum, rem_out, order, dec, prefill, waiting, plen,
                 gen_pre, last_tok, fresh, last_dec_end, dsteps, ins_l, outs_l, cached_l):
        """Preempt the newest running requests (recompute) until the decodes of the next step
        find a free slot each; returns the new (decoding, free, ctx_sum, rem_out)."""
        self.n_preempted = 0
        while decoding > free and order:
            r, _ = order.popitem()
            self.n_preempted += 1
            if r in dec:
                d_join, g_join, _ = dec.pop(r)
                g = g_join + dsteps - d_join  # outputs made so far
                decoding -= 1
                ctx_sum -= ins_l[r] + g
                free += ins_l[r] + g - 1 - cached_l[r]
                rem_out -= outs_l[r] - g
                last_tok[r] = fresh.pop(r, last_dec_end)
                plen[r] = ins_l[r] + g
                gen_pre[r] = g
            else:  # still prefilling: its prompt's slots return
                for i, it in enumerate(prefill):
                    if it[0] == r:
                        del prefill[i]
                        break
                free += plen[r] - cached_l[r]
                rem_out -= outs_l[r] - gen_pre[r]
            waiting.appendleft(r)
        return free, decoding, ctx_sum, rem_out
