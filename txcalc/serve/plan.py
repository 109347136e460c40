"""SLO-driven serving plans: which TP x PP, how many replicas, at what cost per million tokens.

    >>> p = plan_serving(load("llama-3.1-70b"), "h100", 5000, 500, rate=20, ttft_p99_s=2,
    ...                  itl_p99_s=0.05, price_per_gpu_hour=2.5)
    >>> p.best.total_gpus, p.best.tp, p.best.replicas, p.best.ttft_p99_s

For every layout tp x pp whose paged KV cache (``serving.kv_capacity``) holds one request of
input + output tokens, the fewest replicas whose simulated replica (``serving_sim.simulate``)
meets the SLOs: a request rate splits evenly over replicas (a random split of a Poisson stream
is Poisson at rate / replicas), a concurrency splits into ceil(C / replicas) clients each. A
rate is met only when a replica keeps up (its completed requests/s >= 95 % of what it is
offered by the simulated trace); ``rate=inf`` is the offline mode (every request queued
at once): one replica, or the pinned count, each layout ranked by output tokens/s per GPU.
Pipeline depths above 1 are tried only when no single-stage layout fits (or ``pp`` pins
one). Mixture-of-experts models are tried with their experts split by TP and with expert
parallelism over the same GPUs (``ep`` = tp, ``serving_sim.step_model``). With a rate and
an SLO (replicas not pinned), each single-stage layout is also tried disaggregated
(``serving_disagg``: a prefill pool and a decode pool, mode "disaggregated"), and wins when it
needs fewer GPUs; ``mode`` "colocated" or "disaggregated" keeps to one kind (MODES), and a
disaggregated best carries the best colocated plan as its ``alternative`` (a colocated best:
the best disaggregated row tried, if any). A row meets the SLOs when a replica keeps up, its
p99 TTFT and ITL are within them, and at least SLO_ATTAINMENT of its requests met both (TTFT,
and time per output token); its goodput is the rate it serves times that share. Each layout is tried with the chunk budgets CHUNKS
(``max_num_batched_tokens``; the one given, when given) and keeps its best. Layouts rank by
total GPUs, then cost, then TTFT p99. ``tp``, ``pp``, ``ep``, ``replicas`` pin the search.
Prompts of CP_FROM tokens or more add a context-parallel prefill table (``serving_cp``).

cost per million tokens = GPUs x price per GPU-hour / 3600 / tokens per second x 10^6, for the
output tokens alone and for input + output tokens.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field

from ..errors import TxcalcError
from ..units import fewest
from .sim import DEFAULT_MAX_NUM_BATCHED_TOKENS, DEFAULT_MAX_NUM_SEQS

#: most replicas a plan tries per layout
MAX_REPLICAS = 4096
#: a replica keeps up with its offered rate when it completes at least this share of it
KEEP_UP = 0.95
#: simulated requests per replica: about this many seconds of arrivals, within the bounds
SIM_SECONDS = 120
SIM_MIN, SIM_MAX = 300, 3000
#: chunk budgets (max_num_batched_tokens) a plan tries when not pinned: small ones bound the
#: inter-token latency (a decode step shares its step with at most that many prompt tokens),
#: large ones the time to first token and the GPU time per prompt token
CHUNKS = (512, 2048, 8192)
#: prompts this long get a context-parallel prefill table (ring attention over cp groups)
CP_FROM = 131072
CP_DEGREES = (1, 2, 4, 8, 16)
#: how a plan may serve: prefill and decode on the same replicas, on separate pools, or the
#: cheaper of the two (serving_disagg)
MODES = ("auto", "colocated", "disaggregated")
#: share of requests that must meet both SLOs: a p99 SLO lets 1 % miss, and a plan meeting the
#: SLOs never reports a goodput under this share of the rate it serves (goodput = served rate
#: x the share of requests within both SLOs, ``SimResult.attainment``)
SLO_ATTAINMENT = 0.99
#: a disaggregated plan's pools each keep this share of their requests within their own SLO,
#: so that at least SLO_ATTAINMENT meet both (a request misses if it misses in either pool)
POOL_ATTAINMENT = 1 - (1 - SLO_ATTAINMENT) / 2


class ServePlanError(TxcalcError):
    """No layout meets the SLOs, or the options contradict each other."""


@dataclass
class ServeRow:
    tp: int
    pp: int
    replicas: int
    total_gpus: int
    max_num_batched_tokens: int
    kv_tokens_per_replica: int
    ttft_p50_s: float
    ttft_p90_s: float
    ttft_p99_s: float
    itl_p50_s: float
    itl_p90_s: float
    itl_p99_s: float
    tpot_mean_s: float
    requests_per_s: float
    output_tokens_per_s: float
    goodput_requests_per_s: float
    meets_slo: bool
    cost_per_million_tokens: float | None = None
    cost_per_million_output_tokens: float | None = None
    ep: int = 1  #: expert parallelism over the tp GPUs (1: experts split by TP)
    #: "colocated", or "disaggregated" (serving_disagg: prefill and decode pools of tp GPUs)
    mode: str = "colocated"
    prefill_replicas: int | None = None
    decode_replicas: int | None = None
    kv_transfer_s: float | None = None
    #: the simulated replica under load (``SimResult.load_json``: the engine profile, mean
    #: TTFT / ITL / end-to-end latency, end-to-end percentiles, offered and achieved
    #: requests/s per replica, whether its queue grew without bound, preemptions)
    load: dict | None = None

    def to_json(self) -> dict:
        return asdict(self)


@dataclass
class ServePlan:
    model: str
    gpu: str
    input_len: int
    output_len: int
    rate: float | None
    concurrency: int | None
    ttft_p99_s: float | None
    itl_p99_s: float | None
    price_per_gpu_hour: float | None
    rows: list[ServeRow]
    notes: list[str] = field(default_factory=list)
    #: with a prefix-cache hit rate: ``serving_sim.prefix_savings`` of one prompt
    prefix_cache: dict | None = None
    #: prompts of CP_FROM tokens or more: one prompt's prefill on cp groups of the best
    #: layout's tp GPUs (``serving_cp.cp_prefill``), cp in CP_DEGREES
    context_parallel: list | None = None
    #: the mode asked for (MODES); the best row's ``mode`` is the one chosen
    mode_asked: str = "auto"
    #: the best row of the other mode meeting the SLOs (a disaggregated best: the best
    #: colocated plan, searched on its own), or None when none was found or tried
    alternative: ServeRow | None = None
    #: whether the search tried disaggregated pools (a finite rate, an SLO, replicas free)
    disaggregation_tried: bool = False
    #: the offered requests/s past which the best layout's queue grows without bound: its
    #: replicas' completed requests/s with every request queued at once (None: disaggregated)
    saturation_requests_per_s: float | None = None
    engine: str | None = None  #: the scheduler profile simulated (serve.sched; None: default)

    @property
    def best(self) -> ServeRow:
        return self.rows[0]

    def to_json(self) -> dict:
        b = self.best
        out = {"model": self.model, "gpu": self.gpu, "input_len": self.input_len,
               "output_len": self.output_len,
               "rate": None if self.rate is None else (
                   "inf" if math.isinf(self.rate) else self.rate),
               "concurrency": self.concurrency, "slo": {"ttft_p99_s": self.ttft_p99_s,
                                                        "itl_p99_s": self.itl_p99_s},
               "price_per_gpu_hour": self.price_per_gpu_hour}
        out.update(b.to_json())
        out["layouts"] = [r.to_json() for r in self.rows]
        out["notes"] = self.notes
        out["prefix_cache"] = self.prefix_cache
        out["context_parallel"] = self.context_parallel
        out["mode_asked"] = self.mode_asked
        out["alternative"] = None if self.alternative is None else self.alternative.to_json()
        out["saturation_requests_per_s"] = self.saturation_requests_per_s
        out["saturated"] = None if b.load is None else b.load["saturated"]
        out["engine"] = self.engine or "txcalc"
        return out


def _candidate_layouts(cfg, tp, pp, gpus_per_node: int) -> list[tuple[int, int]]:
    n_blocks = sum(d for _, d in cfg.stacks)

    def ok(t: int) -> bool:  # plan_infer's rule: heads split evenly, KV heads split or copied
        return cfg.n_heads % t == 0 and (cfg.is_mla or cfg.n_kv_heads % t == 0
                                         or t % cfg.n_kv_heads == 0)
    if tp and not ok(tp):
        raise ServePlanError(f"tp ({tp}) must divide {cfg.name}'s n_heads ({cfg.n_heads}) and "
                             f"divide or be a multiple of its n_kv_heads ({cfg.n_kv_heads})")
    if pp and pp > n_blocks:
        raise ServePlanError(f"pp ({pp}) exceeds {cfg.name}'s {n_blocks} blocks")
    tps = [tp] if tp else [t for t in range(1, gpus_per_node + 1) if ok(t)]
    pps = [pp] if pp else [p for p in (1, 2, 4, 8) if p <= n_blocks]
    return [(t, p) for p in pps for t in tps]


def _fits(sm, seq: int) -> bool:
    return sm.kv_capacity_tokens >= seq


def plan_serving(model, gpu, input_len, output_len, *, rate: float | None = None,
                 concurrency: int | None = None, ttft_p99_s: float | None = None,
                 itl_p99_s: float | None = None, price_per_gpu_hour: float | None = None,
                 tp: int | None = None, pp: int | None = None, replicas: int | None = None,
                 kv_dtype: str = "bf16", precision: str = "bf16", weights: str | None = None,
                 max_num_batched_tokens: int | None = None,
                 max_num_seqs: int | None = None, gpu_file=None, profile=None,
                 overhead_s: float | None = None, seed: int = 0, prefix_hit_rate: float = 0.0,
                 ep: int | None = None, screen: bool = True,
                 attention_kernel: str = "profile", mode: str = "auto", **kv_kw) -> ServePlan:
    """The cheapest layout x replicas meeting the SLOs (see the module docstring).
    ``screen``: skip simulations whose failure analytic floors prove (``serving_screen``;
    the same best answer, layouts that cannot beat it left out of ``rows``).
    ``attention_kernel``: of the context-parallel table (``serving_cp``: "profile", "fa3").
    ``engine`` (in ``kv_kw``: an --engine name): the KV sizing rule and the scheduler profile
    simulated (``serve.sched``: its admission, chunking, preemption; its max_num_seqs and, for
    whole-prompt engines, its token budget unless pinned; the screen is the default
    scheduler's, so it is off); without one, txcalc's default scheduler.
    ``mode``: one of MODES (see the module docstring)."""
    from .. import inputs as I
    from .kv import ServingError
    from .disagg import plan_disaggregated
    from . import screen as S
    from .setting import serve_setting
    from .sched import default_budget, scheduler
    from .sim import (STEP_OVERHEAD_S, prefix_savings, replica_steps,
                      saturation_requests_per_s, simulate)
    engine = kv_kw.get("engine")
    sch = scheduler(engine) if engine is not None else None
    if max_num_seqs is None:
        max_num_seqs = sch.max_num_seqs if sch else DEFAULT_MAX_NUM_SEQS
    input_len = I.integer("input_len", input_len, 1, I.MAX_SEQ)
    output_len = I.integer("output_len", output_len, 1, I.MAX_SEQ)
    if (rate is None) == (concurrency is None):
        raise ServePlanError("give exactly one of a request rate (--rate) and a concurrency "
                             "(--concurrency)")
    if rate is not None and not (isinstance(rate, float) and math.isinf(rate) and rate > 0):
        rate = I.number("rate", rate, 0, 1e6)
    concurrency = I.integer("concurrency", concurrency, 1, I.MAX_BATCH, none=True)
    ttft_p99_s = I.number("ttft_p99_s", ttft_p99_s, 0, 1e6, none=True)
    itl_p99_s = I.number("itl_p99_s", itl_p99_s, 0, 1e6, none=True)
    price_per_gpu_hour = I.number("price_per_gpu_hour", price_per_gpu_hour, 0, I.MAX_PRICE,
                                  lo_open=False, none=True)
    tp = I.integer("tp", tp, 1, 64, none=True)
    pp = I.integer("pp", pp, 1, 64, none=True)
    replicas = I.integer("replicas", replicas, 1, MAX_REPLICAS, none=True)
    mode = I.choice("mode", mode, MODES)
    st = serve_setting(model, gpu, kv_dtype=kv_dtype, precision=precision, weights=weights,
                       profile=profile, gpu_file=gpu_file)
    cfg, g = st.cfg, st.gpu
    from .cp import ATTENTION_KERNELS, HOPPER
    if attention_kernel not in ATTENTION_KERNELS or (attention_kernel == "fa3"
                                                     and g.name not in HOPPER):
        raise ServePlanError(f"attention_kernel ({I.show(attention_kernel)}) must be one of "
                             f"{', '.join(ATTENTION_KERNELS)} (fa3 on a Hopper GPU: "
                             f"{', '.join(HOPPER)}; {g.name} given)")
    offline = rate is not None and math.isinf(rate)
    seq = input_len + output_len
    chunk_pinned = max_num_batched_tokens is not None
    I.integer("max_num_batched_tokens", max_num_batched_tokens, 1, I.MAX_SEQ, none=True)
    max_num_batched_tokens = max_num_batched_tokens or DEFAULT_MAX_NUM_BATCHED_TOKENS
    rows, notes, tried = [], [], []
    prefix = {"prefix_hit_rate": prefix_hit_rate,
              "block_size": kv_kw.get("block_size", 16)} if prefix_hit_rate else {}
    saved = None
    # disaggregation is tried where SLOs bind an open-loop rate with replicas left free
    disagg = (rate is not None and not offline and replicas is None
              and (ttft_p99_s is not None or itl_p99_s is not None)) and mode != "colocated"
    if mode == "disaggregated" and (not disagg or (pp or 1) > 1):
        raise ServePlanError("mode disaggregated needs a finite --rate, an SLO (--ttft-p99 or "
                             f"--itl-p99), replicas left free and pp 1 (rate {rate}, "
                             f"ttft_p99_s {ttft_p99_s}, itl_p99_s {itl_p99_s}, replicas "
                             f"{replicas}, pp {pp})")
    colocated = mode != "disaggregated"
    chunks = [max_num_batched_tokens] if chunk_pinned else [c for c in CHUNKS if c < seq] + [
        c for c in CHUNKS if c >= seq][:1]
    if sch is not None and not sch.chunked and not chunk_pinned:
        # whole prompts: the engine's own budget, raised to the prompt (else none would run)
        chunks = [max(default_budget(sch, seq), input_len)]
    ep = I.integer("ep", ep, 1, 64, none=True)
    if ep is not None and ep > 1 and (not cfg.n_experts or cfg.n_experts % ep
                                      or (tp is not None and tp != ep)):
        raise ServePlanError(f"ep ({ep}) needs a mixture-of-experts model whose routed experts "
                             f"({cfg.n_experts}) it divides, on as many GPUs as tp ({tp})")

    def eps(t: int) -> list[int]:  # expert parallelism over the tp GPUs, for MoE models
        if ep is not None:
            return [ep] if ep in (1, t) else []
        return [1, t] if cfg.n_experts and t > 1 and cfg.n_experts % t == 0 else [1]
    # the screen (serving_screen) where the plan searches replicas for a Poisson rate; the
    # layouts with the fewest GPUs by the screen's floor first, so that a best found early
    # screens out the rest (the rows are sorted at the end: the order changes no answer)
    screening = (screen and disagg and not prefix_hit_rate and sch is None)
    layouts = _candidate_layouts(cfg, ep if tp is None and ep and ep > 1 else tp, pp,
                                 g.gpus_per_node)
    if screening:
        def floor_gpus(lay) -> float:
            try:
                smf = replica_steps(st, tp=lay[0], pp=lay[1], max_model_len=seq,
                                    max_num_batched_tokens=chunks[-1],
                                    max_num_seqs=max_num_seqs,
                                    overhead_s=STEP_OVERHEAD_S if overhead_s is None
                                    else overhead_s, **kv_kw)
            except ServingError:
                return math.inf
            if smf.kv_capacity_tokens < seq:
                return math.inf
            for r in range(1, MAX_REPLICAS + 1):
                n = int(min(SIM_MAX, max(SIM_MIN, rate / r * SIM_SECONDS)))
                if not S.cannot_keep_up(smf, n, input_len, output_len, rate / r, chunks[-1],
                                        max_num_seqs, KEEP_UP):
                    return r * lay[0] * lay[1]
            return math.inf
        layouts.sort(key=lambda lay: (lay[1], floor_gpus(lay), -lay[0]))
    screened: list[str] = []
    screened_keys: set = set()  # (tp, pp, ep) with a colocated chunk budget screened out
    for (t, p), chunk, e in ((lay, c, e) for lay in layouts
                             for c in chunks for e in eps(lay[0])):
        if pp is None and p > 1 and any(q == 1 for _, q in tried):
            continue  # pipeline stages only where no single-stage layout fits
        try:
            sm = replica_steps(st, tp=t, pp=p,
                               overhead_s=STEP_OVERHEAD_S if overhead_s is None else overhead_s,
                               max_model_len=seq, max_num_batched_tokens=chunk,
                               max_num_seqs=max_num_seqs, prefix_hit_rate=prefix_hit_rate,
                               ep=e, **kv_kw)
        except ServingError:
            continue
        if sm.kv_capacity_tokens < seq:
            continue
        if (t, p) not in tried:
            tried.append((t, p))
        if prefix and saved is None:
            saved = prefix_savings(sm, input_len, prefix_hit_rate, prefix["block_size"])

        def per_rate_n(r: int) -> tuple[float, int]:
            per = rate / r
            return per, int(min(SIM_MAX, max(SIM_MIN, per * SIM_SECONDS)))

        def hopeless(r: int) -> bool:  # the screen: r replicas provably fail to keep up
            per, n = per_rate_n(r)
            return S.cannot_keep_up(sm, n, input_len, output_len, per, chunk, max_num_seqs,
                                    KEEP_UP)

        def run(r: int):
            if screening and hopeless(r):
                return False, None
            if offline:
                n = SIM_MIN * 2
                res = simulate(sm, n, input_len, output_len, rate=math.inf,
                               max_num_batched_tokens=chunk,
                               max_num_seqs=max_num_seqs, seed=seed, engine=sch,
                               **prefix)
                ok = True
            elif rate is not None:
                per, n = per_rate_n(r)
                res = simulate(sm, n, input_len, output_len, rate=per,
                               max_num_batched_tokens=chunk,
                               max_num_seqs=max_num_seqs, seed=seed, engine=sch,
                               **prefix)
                ok = res.requests_per_s >= KEEP_UP * min(per, res.offered_rate)
            else:
                per = math.ceil(concurrency / r)
                n = int(min(SIM_MAX, max(SIM_MIN, 8 * per)))
                res = simulate(sm, n, input_len, output_len, concurrency=per,
                               max_num_batched_tokens=chunk,
                               max_num_seqs=max_num_seqs, seed=seed, engine=sch,
                               **prefix)
                ok = True
            ok = ok and (ttft_p99_s is None or res.ttft(99) <= ttft_p99_s) \
                and (itl_p99_s is None or res.itl(99) <= itl_p99_s) \
                and res.attainment(ttft_p99_s, itl_p99_s) >= SLO_ATTAINMENT
            return ok, res

        try_disagg = disagg and p == 1 and e == 1 and chunk == chunks[-1]
        n_disagg = int(min(SIM_MAX, max(SIM_MIN, rate * SIM_SECONDS))) if disagg else 0
        pool_fails = _pool_screen(S, sm, input_len, output_len, rate, chunk, max_num_seqs,
                                  n_disagg, ttft_p99_s, itl_p99_s, g) \
            if screening and try_disagg else None
        if colocated:
            if screening and S.slo_unreachable(sm, input_len, chunk, ttft_p99_s, itl_p99_s,
                                               decode=output_len > 1):
                # the note the search would end with: no replica count can meet the SLOs
                notes.append(f"tp {t} x pp {p}: no replica count up to {MAX_REPLICAS} meets "
                             "the SLOs")
                continue
            best = min((x.total_gpus for x in rows if x.meets_slo), default=None)
            # cut: past this many replicas the layout cannot beat the best found so far; the
            # search may stop there unless the disaggregated try (which the search gates: a
            # layout whose colocated search fails is not tried disaggregated) could still win
            cut = None
            if screening and best is not None and (
                    pool_fails is None or _pools_beaten(S, pool_fails, best // t)):
                cut = best // (t * p)
            label = f"tp {t} x pp {p}" + (f" ep {e}" if e > 1 else "") + f" chunk {chunk}"
            if cut is not None and S.all_fail(hopeless, cut):
                # no replica count with at most the best's GPUs keeps up
                screened.append(label)
                screened_keys.add((t, p, e))
                continue
            if replicas is not None or offline:
                r = replicas or 1
                ok, res = run(r)
            else:
                cache = {}

                def meets(r: int) -> bool:
                    cache[r] = run(r)
                    return cache[r][0]
                # past cut replicas the answer needs more GPUs than the best: the search stops
                r = fewest(meets, MAX_REPLICAS, cut=cut)
                if r is None:
                    if cut is not None and max(k for k, v in cache.items() if not v[0]) >= cut:
                        screened.append(label)
                        screened_keys.add((t, p, e))
                    else:
                        notes.append(f"tp {t} x pp {p}: no replica count up to {MAX_REPLICAS} "
                                     "meets the SLOs")
                    continue
                ok, res = cache[r]
            total = r * t * p
            if rate is not None and not offline and ok:  # keeping up: it serves what is offered
                req_s = rate
            else:
                req_s = r * res.requests_per_s
            out_tps = req_s * output_len
            all_tps = req_s * (input_len + output_len)
            cost = None if price_per_gpu_hour is None else total * price_per_gpu_hour / 3600
            rows.append(ServeRow(t, p, r, total, chunk, sm.kv_capacity_tokens, res.ttft(50),
                                 res.ttft(90), res.ttft(99), res.itl(50), res.itl(90), res.itl(99),
                                 float(res.tpot_s.mean()), req_s, out_tps,
                                 req_s * res.attainment(ttft_p99_s, itl_p99_s), ok,
                                 None if cost is None else cost / all_tps * 1e6,
                                 None if cost is None else cost / out_tps * 1e6, e,
                                 load=res.load_json()))
        if try_disagg:
            d = plan_disaggregated(sm, g, input_len, output_len, rate, ttft_p99_s=ttft_p99_s,
                                   itl_p99_s=itl_p99_s, max_num_batched_tokens=chunk,
                                   n_requests=n_disagg,
                                   max_num_seqs=max_num_seqs, seed=seed,
                                   max_replicas=MAX_REPLICAS, known_to_fail=pool_fails,
                                   min_attainment=POOL_ATTAINMENT)
            if d is None and not colocated:
                notes.append(f"tp {t}: no prefill and decode pools of up to {MAX_REPLICAS} "
                             "replicas each meet the SLOs")
            if d is not None:
                pr, dr = d.prefill, d.decode
                tot = d.replicas * t
                cost = None if price_per_gpu_hour is None else tot * price_per_gpu_hour / 3600
                out_tps, all_tps = rate * output_len, rate * (input_len + output_len)
                x = d.kv_transfer_exposed_s
                # a request meets both SLOs unless it misses in either pool (a lower bound)
                both = max(0.0, pr.attainment(None if ttft_p99_s is None else ttft_p99_s - x)
                           + dr.attainment(None, itl_p99_s) - 1)
                rows.append(ServeRow(
                    t, 1, d.replicas, tot, chunk, sm.kv_capacity_tokens, pr.ttft(50) + x,
                    pr.ttft(90) + x, pr.ttft(99) + x, dr.itl(50), dr.itl(90), dr.itl(99),
                    float(dr.tpot_s.mean()), rate, out_tps, rate * both,
                    both >= SLO_ATTAINMENT,
                    None if cost is None else cost / all_tps * 1e6,
                    None if cost is None else cost / out_tps * 1e6, 1, "disaggregated",
                    d.prefill_replicas, d.decode_replicas, d.kv_transfer_s))
    if screened:
        notes.append("screened out (serving_screen): layouts whose fewest replicas that "
                     "could meet the SLOs need more GPUs than the best: "
                     + ", ".join(screened))
    if not tried:
        raise ServePlanError(f"{cfg.name} with {seq:,} tokens per request does not fit on "
                             f"{g.name} in any layout tried (tp up to {g.gpus_per_node}, pp up "
                             "to 8)")
    if not rows:
        raise ServePlanError(f"no layout of {cfg.name} on {g.name} meets the SLOs "
                             f"({'; '.join(notes)})")
    if offline:
        rows.sort(key=lambda r: (-r.output_tokens_per_s / r.total_gpus, r.total_gpus))
        notes.append("rate inf (offline): layouts ranked by output tokens/s per GPU")
    else:
        rows.sort(key=lambda r: (not r.meets_slo, r.total_gpus,
                                 r.cost_per_million_tokens or 0, r.ttft_p99_s))
    seen, kept = set(), []
    for r in rows:  # the best chunk budget of each layout
        if (r.tp, r.pp, r.ep, r.mode) not in seen:
            seen.add((r.tp, r.pp, r.ep, r.mode))
            kept.append(r)
    rows = kept
    if screened_keys:  # a layout's kept row may not be its best when a chunk was screened
        rows = [r for r in rows if r is rows[0] or r.mode != "colocated"
                or (r.tp, r.pp, r.ep) not in screened_keys
                or r.total_gpus <= rows[0].total_gpus]
    if not rows[0].meets_slo:
        notes.append("no layout meets the SLOs with the pinned replicas; best shown")
    alternative = None
    if rows[0].mode == "disaggregated":  # the best colocated plan, searched on its own
        try:
            alternative = plan_serving(
                model, gpu, input_len, output_len, rate=rate, ttft_p99_s=ttft_p99_s,
                itl_p99_s=itl_p99_s, price_per_gpu_hour=price_per_gpu_hour, tp=tp, pp=pp,
                kv_dtype=kv_dtype, precision=precision, weights=weights,
                max_num_batched_tokens=max_num_batched_tokens if chunk_pinned else None,
                max_num_seqs=max_num_seqs, gpu_file=gpu_file, profile=profile,
                overhead_s=overhead_s, seed=seed, prefix_hit_rate=prefix_hit_rate, ep=ep,
                screen=screen,
                attention_kernel=attention_kernel, mode="colocated", **kv_kw).best
        except ServePlanError:
            notes.append("no colocated layout meets the SLOs")
    elif disagg:  # a colocated best: the best disaggregated row among the layouts tried
        alternative = next((r for r in rows if r.mode == "disaggregated" and r.meets_slo),
                           None)
    cp_rows = None
    if input_len >= CP_FROM:
        from .cp import prefill_on_cp
        cp_rows = [prefill_on_cp(st, input_len, cp=c, tp=rows[0].tp,
                                 attention_kernel=attention_kernel).to_json()
                   for c in CP_DEGREES]
        notes.append("context parallelism: one prompt's prefill on cp x tp GPUs in "
                     "context_parallel (ring attention; the simulation itself runs tp only)")
    b = rows[0]
    sat = None
    if b.mode == "colocated":  # the best layout's replicas with every request queued at once
        smb = replica_steps(st, tp=b.tp, pp=b.pp, overhead_s=STEP_OVERHEAD_S if overhead_s is
                            None else overhead_s, max_model_len=seq,
                            max_num_batched_tokens=b.max_num_batched_tokens,
                            max_num_seqs=max_num_seqs, prefix_hit_rate=prefix_hit_rate,
                            ep=b.ep, **kv_kw)
        sat = b.replicas * saturation_requests_per_s(
            smb, SIM_MIN * 2, input_len, output_len,
            max_num_batched_tokens=b.max_num_batched_tokens, max_num_seqs=max_num_seqs,
            seed=seed, engine=sch, **prefix)
    return ServePlan(cfg.name, g.name, input_len, output_len, rate, concurrency, ttft_p99_s,
                     itl_p99_s, price_per_gpu_hour, rows, notes, saved, cp_rows, mode,
                     alternative, disagg, sat,
                     None if sch is None else sch.name)


def _pool_screen(S, sm, input_len, output_len, rate, chunk, max_num_seqs, n,
                 ttft_p99_s, itl_p99_s, gpu) -> dict:
    """The screen of a disaggregated plan's two pools (``plan_disaggregated``'s simulations:
    n requests at rate / r each): pool -> r -> True when r replicas provably fail."""
    from .disagg import kv_transfer_s
    exposed = kv_transfer_s(sm, input_len, gpu) / max(1, sm.n_allreduce // 2)

    def prefill(r: int) -> bool:
        return S.slo_unreachable(sm, input_len, chunk, ttft_p99_s, None, exposed) or \
            S.cannot_keep_up(sm, n, input_len, 1, rate / r, chunk, max_num_seqs, KEEP_UP)

    def decode(r: int) -> bool:
        return S.slo_unreachable(sm, input_len, chunk, None, itl_p99_s,
                                 decode=output_len > 1) or \
            S.cannot_keep_up(sm, n, input_len, output_len, rate / r, chunk, max_num_seqs,
                             KEEP_UP, decode_only=True)
    return {"prefill": prefill, "decode": decode}


def _pools_beaten(S, fails: dict, most: int) -> bool:
    """True when no split of at most ``most`` replicas into the two pools escapes the screen."""
    p = next((r for r in range(1, most) if not fails["prefill"](r)), None)
    return p is None or S.all_fail(fails["decode"], most - p)


def parse_duration(text, name: str) -> float:
    """'2s', '50ms', '1.5', '300us' -> seconds (a positive finite number)."""
    from .. import inputs as I
    if not isinstance(text, str):
        return I.number(name, text, 0, 1e6)
    t = text.strip().lower()
    for suffix, scale in (("ms", 1e-3), ("us", 1e-6), ("s", 1.0)):
        if t.endswith(suffix):
            t, mult = t[: -len(suffix)], scale
            break
    else:
        mult = 1.0
    try:
        v = float(t)
    except ValueError:
        raise I.InputError(f"{name}: cannot read {I.show(text)} as a duration (try 2s, 50ms)"
                           ) from None
    return I.number(name, v * mult, 0, 1e6, note=" seconds")


def parse_rate(text, name: str = "--rate") -> float:
    """A request rate in requests/s, or 'inf' (every request at once)."""
    from .. import inputs as I
    if isinstance(text, str) and text.strip().lower() in ("inf", "infinity"):
        return math.inf
    try:
        v = float(text)
    except (TypeError, ValueError):
        raise I.InputError(f"{name}: cannot read {I.show(text)} as requests per second "
                           "(a number or inf)") from None
    return I.number(name, v, 0, 1e6, note=" requests/s")
