"""Serving plans: GPUs for a context and concurrency (``plan_infer``), trtllm-bench's
settings and its offline throughput (``serve_throughput``).

    >>> from txcalc.serve.infer import plan_infer
    >>> plan_infer(load("llama-3.1-70b"), "h200", 131072, 64, kv_dtype="fp8").to_json()
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field

from ..model.config import ModelConfig
from ..errors import PlanError, WorkloadError
from ..engine.hardware import Gpu
from ..engine.kvcache import kv_cache_bytes
from ..parallel.overheads import Overheads, check_plan_args
from ..engine.timing import DeviceProfile
from ..units import cdiv, divisors, pow2_upto


@dataclass
class InferRow:
    tp: int
    pp: int
    replicas: int
    total_gpus: int
    weights_bytes: int
    kv_bytes_per_seq: int
    max_concurrency_per_replica: int
    max_concurrency: int
    prefill_latency_s: float
    decode_tokens_per_s: float
    decode_tokens_per_s_per_seq: float
    #: what the budget reserves besides weights and KV: the chunked-prefill workspace, and
    #: the framework's bytes under the overheads the plan was built with (over a replica's
    #: tp x pp GPUs: ``gpus_per_replica``)
    workspace_bytes: int = 0
    overheads: Overheads = field(default_factory=Overheads)

    @property
    def gpus_per_replica(self) -> int:
        return self.tp * self.pp

    def to_json(self) -> dict:
        """The fields, the overheads as the fixed framework bytes on each GPU and the
        fragmentation fraction."""
        out = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)
               if f.name != "overheads"}
        return out | {"framework_fixed_bytes": self.overheads.fixed_bytes(self.gpus_per_replica),
                      "fragmentation": self.overheads.fragmentation}

    def memory_at(self, seqs: int) -> dict[str, int]:
        """Bytes per GPU by category with ``seqs`` sequences cached on its replica: the terms
        ``plan_infer``'s budget counts (``Overheads.framework_bytes`` on the tensors' bytes)."""
        kv = self.kv_bytes_per_seq * seqs
        tensors = self.weights_bytes + kv + self.workspace_bytes
        return {"weights": self.weights_bytes, "kv cache": kv,
                "prefill workspace": self.workspace_bytes,
                "framework": self.overheads.framework_bytes(tensors, self.gpus_per_replica)}


@dataclass
class InferPlan:
    cfg: ModelConfig
    gpu: Gpu
    context: int
    concurrency: int
    kv_dtype: str
    rows: list[InferRow]
    weights: str = "bf16"  #: the weight format (a formats.scheme name) or the precision

    @property
    def best(self) -> InferRow:
        return self.rows[0]

    def table(self):
        import pandas as pd
        return pd.DataFrame([r.to_json() for r in self.rows])

    def to_json(self) -> dict:
        b = self.best
        out = {"model": self.cfg.name, "gpu": self.gpu.name, "context": self.context,
               "concurrency": self.concurrency, "kv_dtype": self.kv_dtype,
               "weights": self.weights}
        out.update(b.to_json())
        out["gpus_per_replica"] = b.tp * b.pp
        out["options"] = [r.to_json() for r in self.rows]
        return out


#: tokens of one chunked-prefill step (vLLM's max_num_batched_tokens order of magnitude)
PREFILL_CHUNK = 8192


def prompt_prefill_s(sm, prompt: int, chunk: int = PREFILL_CHUNK) -> float:
    """Seconds to prefill one prompt of ``prompt`` tokens alone on a replica whose steps
    ``sm`` (a ``serving_sim.StepModel``) times: steps of ``chunk`` tokens, each as the step
    simulator composes a prefill chunk (c tokens after p cached: c p + c (c + 1) / 2 pairs, p
    cached tokens read, one logit row on the last chunk)."""
    total, done = 0.0, 0
    while done < prompt:
        c = min(chunk, prompt - done)
        total += sm.step_s(c, 1 if done + c == prompt else 0, c * done + c * (c + 1) // 2,
                           done)
        done += c
    return total


def plan_infer(model: ModelConfig, gpu: str | Gpu, context: int, concurrency: int, *,
               kv_dtype: str = "bf16", tokens_per_s: float | None = None,
               precision: str = "bf16", gpu_file=None, profile: DeviceProfile | None = None,
               overheads: Overheads | None = None, weights: str | None = None,
               layouts=None, overhead_s: float | None = None) -> InferPlan:
    """GPUs to serve ``concurrency`` sequences of ``context`` tokens (and ``tokens_per_s``
    decode tokens/s in all), per replica layout TP x PP.

    Per GPU: weights/(tp, pp stage) + KV cache (heads split over min(tp, K); MLA's latent is
    replicated) + a prefill workspace of PREFILL_CHUNK tokens + framework terms. Decode step
    at batch B: the serving step model, ``serving_sim.StepModel.step_s`` with B tokens, B
    logit rows and B caches of ``context`` tokens (a roofline per kernel class: the Linears
    against reading the rank's weights, the attention against reading the B caches; stages in
    sequence; two TP all-reduces per block; plus ``overhead_s`` per step, default
    ``serving_sim.STEP_OVERHEAD_S``). Prefill latency: one sequence of ``context`` tokens
    alone, in steps of PREFILL_CHUNK tokens timed by the same ``StepModel.step_s``
    (``prompt_prefill_s``: one rule for a step, prompts included).

    ``weights`` (a ``formats.scheme`` name; default: the config.json's quantization_config,
    else the precision's dtype): each GPU holds and each step reads its share of the stored
    tensors (quantised weights and their scales); the steps' matmuls run on the format's
    tensor-core peak (fp8 / int8 where it computes in it), weight-only formats at the 16-bit
    peak times ``timing.weight_only_factor`` at the step's rows (``serving_sim.step_model``).
    ``layouts``: only these (tp, pp).
    """
    from .setting import serve_setting
    from .sim import STEP_OVERHEAD_S
    from .. import inputs as I

    context = I.integer("context", context, 1, I.MAX_SEQ)
    concurrency = I.integer("concurrency", concurrency, 1, I.MAX_BATCH)
    tokens_per_s = I.number("tokens_per_s", tokens_per_s, 0, I.TOKENS_PER_S_MAX, none=True)
    overhead_s = STEP_OVERHEAD_S if overhead_s is None else \
        I.number("overhead_s", overhead_s, 0, 10, lo_open=False)
    check_plan_args(gpu, gpu_file, profile, overheads)
    s = serve_setting(model, gpu, kv_dtype=kv_dtype, precision=precision, weights=weights,
                      profile=profile, gpu_file=gpu_file)
    return layouts_plan(s, context, concurrency, tokens_per_s, overheads, layouts, overhead_s)


def layouts_plan(s, context: int, concurrency: int, tokens_per_s: float | None,
                 overheads: Overheads | None, layouts, overhead_s: float) -> InferPlan:
    """``plan_infer`` of a resolved ``serve.setting.ServeSetting`` and checked arguments."""
    from ..parallel.sharding import assign_stages, local_params
    from .sim import replica_steps
    cfg, gpu, prec, kv_dtype, sch = s.cfg, s.gpu, s.prec, s.kv_dtype, s.scheme
    wbytes = prec.weight
    if cfg.family == "encoder":
        raise WorkloadError(f"{cfg.name} is an encoder-only model: it does not decode")
    ov = overheads or Overheads()
    from ..engine import formats as Q
    ops = s.ops
    if sch is not None:  # stored bytes of each op (quantised weights + scales), all ranks
        qops = Q.assign(ops, sch, cfg)
        qbytes = {id(op): Q.weight_bytes_of(q, sch.dense, sch.scope == "gguf")
                  for op, q in zip(ops, qops)}
    kv_all = kv_cache_bytes(cfg, context, 1, kv_dtype)
    n_blocks = sum(d for _, d in cfg.stacks)
    steps: dict = {}  # tp -> serving_sim.StepModel
    prefill_s: dict[int, float] = {}
    local: dict[int, dict[int, int]] = {}  # tp -> {id(op): parameters one rank holds}
    rows = []
    tps = [t for t in divisors(cfg.n_heads) if t <= 64 and (
        cfg.is_mla or cfg.n_kv_heads % t == 0 or t % cfg.n_kv_heads == 0)]
    for tp in tps:
        for pp in [p for p in pow2_upto(min(n_blocks, 64))]:
            if layouts is not None and (tp, pp) not in layouts:
                continue
            stages = assign_stages(cfg, ops, pp)
            if tp not in local:  # once per TP degree, not per pipeline depth
                local[tp] = {id(op): local_params(op, tp) for op in ops}
            if sch is None:
                weights = max(sum(local[tp][id(op)] for op in st) for st in stages) * wbytes
            else:  # a rank's share of each op's stored bytes, as of its parameters
                weights = max(sum(cdiv(qbytes[id(op)] * local[tp][id(op)], op.params_total)
                                  for op in st if op.params_total) for st in stages)
            kv_split = 1 if cfg.is_mla else min(tp, cfg.n_kv_heads)
            most_blocks = max(len({(o.stack, o.layer) for o in st if o.layer >= 0})
                              for st in stages)
            kv_seq = cdiv(kv_all * most_blocks, n_blocks * kv_split)
            workspace = PREFILL_CHUNK * (3 * max(cfg.d_ff, cfg.moe_d_ff) // tp
                                         + 6 * cfg.d_model) * prec.act
            budget = ov.tensor_budget(gpu.usable_bytes, tp * pp) - weights - workspace
            if budget < kv_seq:
                continue
            maxc = budget // kv_seq

            if tp not in steps:  # the serving step model (pipeline stages in sequence)
                steps[tp] = replica_steps(s, tp=tp, overhead_s=overhead_s,
                                          kv_capacity_tokens=0)
            sm = steps[tp]
            kv_read = cdiv(kv_all, kv_split)  # one sequence's cache on one rank, all stages

            def decode_s(batch: int, sm=sm, kv_read=kv_read) -> float:
                return sm.step_s(batch, batch, batch * context, batch * context,
                                 kv_read_bytes=batch * kv_read)

            if tp not in prefill_s:  # one prompt alone, in chunks, by the one step rule
                prefill_s[tp] = prompt_prefill_s(sm, context)
            prefill = prefill_s[tp]
            replicas = _replicas_for(concurrency, cdiv(concurrency, maxc), tokens_per_s,
                                     decode_s)
            per = cdiv(concurrency, replicas)
            step = decode_s(per)
            rows.append(InferRow(tp, pp, replicas, replicas * tp * pp, weights, kv_seq, maxc,
                                 maxc * replicas, prefill, replicas * per / step, 1 / step,
                                 workspace, ov))
    if not rows:
        raise PlanError(f"{cfg.name} with {context:,} tokens of {kv_dtype} KV cache does not fit "
                        f"on {gpu.name} in any TP x PP layout up to "
                        f"{max(tps)} x {max(pow2_upto(min(n_blocks, 64)))}")
    if tokens_per_s is not None:
        rows = [r for r in rows if r.decode_tokens_per_s >= tokens_per_s]
        if not rows:
            raise PlanError(f"no layout of {cfg.name} on {gpu.name} reaches {tokens_per_s:g} "
                            f"decode tokens/s at context {context:,}")
    rows.sort(key=lambda r: (r.total_gpus, r.tp * r.pp, r.prefill_latency_s))
    return InferPlan(cfg, gpu, context, concurrency, kv_dtype, rows,
                     sch.name if sch is not None else s.precision)


#: TensorRT-LLM's BuildConfig defaults (max_batch_size 2048, max_num_tokens 8192): what
#: trtllm-bench uses for a quantisation it has no heuristic for (tensorrt_llm/bench/build/
#: build.py, ``DEFAULT_MAX_BATCH_SIZE = BuildConfig.max_batch_size``, used when ``quant_algo``
#: is not in ``TUNED_QUANTS = {NVFP4, FP8, FP8_BLOCK_SCALES, NO_QUANT, None}``)
SERVE_MAX_BATCH = 2048
SERVE_MAX_NUM_TOKENS = 8192
#: trtllm-bench throughput's ``--kv_cache_free_gpu_mem_fraction`` default (perf-overview.md:
#: "the default setting of 0.90"), which it passes to its engine-settings heuristic
TRTLLM_KV_FRACTION = 0.90
#: bytes per parameter and per KV element in that heuristic (tuning.py ``BYTES_PER_ELEM``:
#: NO_QUANT 2.0, FP8 1.0, FP8_BLOCK_SCALES 1.0, NVFP4 0.5; anything else 2)
_TRTLLM_BYTES = {None: 2.0, "fp8": 1.0, "fp8-block": 1.0, "nvfp4": 0.5}


def trtllm_bench_settings(model, gpu, isl: int, osl: int, *, tp: int = 1, pp: int = 1,
                          weights: str | None = None, kv_dtype: str = "bf16", gpu_file=None,
                          kv_fraction: float = TRTLLM_KV_FRACTION) -> dict:
    """The (max_batch_size, max_num_tokens) ``trtllm-bench throughput`` picks for a dataset of
    ``isl`` / ``osl`` tokens when none is given (its PyTorch backend, the perf-overview runs):
    ``tensorrt_llm/bench/benchmark/utils/general.py`` ``get_settings`` calls
    ``get_benchmark_engine_settings`` (bench/build/build.py), which for a tuned quantisation
    calls ``calc_engine_setting`` and ``finetune_setting`` (bench/build/tuning.py, NVIDIA/
    TensorRT-LLM, the v1.0 tree of the perf-overview tables):

        byte_per_token = 2 x attention layers x max(tp, kv heads) x head size x KV bytes / GiB
        engine_size = parameters x bytes per parameter / GiB      (the whole model)
        available = device GiB x tp x pp - engine_size
        kv_cache_max_requests = available x kv_fraction / (byte_per_token x (isl + osl))
        raw_bs = min(kv_cache_max_requests, 4096) / pp
        raw_token = min(raw_bs x (1 + isl / osl), 32768)
        max_bs = max(64, 32 ceil(raw_bs / 32)) below 256, 128 ceil(raw_bs / 128) below 1024,
                 else 256 ceil(raw_bs / 256)              ("slightly optimistic": rounded up)
        max_num_tokens = max(2048, 256 ceil(raw_token / 256)) below 4096, 512 ceil(/512)
                 below 8192, else 1024 ceil(/1024)
        chunked prefill off (trtllm-bench's default): max_num_tokens >= isl + max_bs

    The device's memory is NVML's total in TensorRT-LLM; here ``Gpu.usable_bytes`` (CUDA's
    total, ~0.4 GiB below NVML's). The settings bound the batch only where they are below what
    the KV cache holds: max_bs is rounded *up* from the cache's estimate, so it binds only at
    the 4096 cap; max_num_tokens bounds the tokens of one step."""
    from .. import inputs as I
    from .setting import serve_setting
    isl = I.integer("isl", isl, 1, I.MAX_SEQ)
    osl = I.integer("osl", osl, 1, I.MAX_SEQ)
    s = serve_setting(model, gpu, kv_dtype=kv_dtype, weights=weights, gpu_file=gpu_file)
    return bench_settings(s, isl, osl, tp=tp, pp=pp, kv_fraction=kv_fraction)


def bench_settings(s, isl: int, osl: int, *, tp: int = 1, pp: int = 1,
                   kv_fraction: float = TRTLLM_KV_FRACTION) -> dict:
    """``trtllm_bench_settings`` of a resolved ``serve.setting.ServeSetting``."""
    cfg, g, kv_dtype, sch = s.cfg, s.gpu, s.kv_dtype, s.scheme
    algo = sch.name if sch is not None else None
    if algo not in _TRTLLM_BYTES:  # not a tuned quantisation: TensorRT-LLM's defaults
        return {"max_batch_size": SERVE_MAX_BATCH,
                "max_num_tokens": max(SERVE_MAX_NUM_TOKENS, isl + SERVE_MAX_BATCH),
                "kv_cache_max_requests": None}
    byte_per_elem = _TRTLLM_BYTES[algo]
    byte_per_kv = 1.0 if kv_dtype == "fp8" else 2.0
    params = sum(op.params_total for op in s.ops)
    n_attn = sum(d for _, d in cfg.stacks)
    gib = 1024 ** 3
    byte_per_token = 2 * n_attn * max(tp, cfg.n_kv_heads) * cfg.head_dim * byte_per_kv / gib
    available = g.usable_bytes / gib * tp * pp - params * byte_per_elem / gib
    requests = available * kv_fraction / (byte_per_token * (isl + osl))
    if requests < 1:
        raise PlanError(f"{cfg.name} leaves trtllm-bench's KV cache no room for one request "
                        f"of {isl + osl:,} tokens on {tp * pp} {g.name} GPU(s)")
    raw_bs = min(requests, 4096) / pp
    raw_token = min(raw_bs * (1 + isl / osl), 32768)
    if raw_bs < 256:
        max_bs = max(64, 32 * math.ceil(raw_bs / 32))
    elif raw_bs < 1024:
        max_bs = 128 * math.ceil(raw_bs / 128)
    else:
        max_bs = 256 * math.ceil(raw_bs / 256)
    if raw_token < 4096:
        max_tokens = max(2048, 256 * math.ceil(raw_token / 256))
    elif raw_token < 8192:
        max_tokens = 512 * math.ceil(raw_token / 512)
    else:
        max_tokens = 1024 * math.ceil(raw_token / 1024)
    # general.py: with chunked prefill off, max_num_tokens = max(it, max_isl + max_batch_size)
    return {"max_batch_size": max_bs, "max_num_tokens": max(max_tokens, isl + max_bs),
            "kv_cache_max_requests": requests}


def serve_throughput(model, gpu, isl: int, osl: int, *, tp: int = 1, pp: int = 1,
                     weights: str | None = None, kv_dtype: str = "bf16",
                     precision: str = "bf16", profile: DeviceProfile | None = None,
                     max_batch: int | None = None, gpu_file=None,
                     overheads: Overheads | None = None, overhead_s: float | None = None,
                     attention_dtype: str | None = None) -> dict:
    """Output tokens/s of one tp x pp replica at maximum load (an offline benchmark such as
    ``trtllm-bench throughput``: every request queued at once, in-flight batching).

    B = min(max_batch, the sequences whose KV cache of isl + osl tokens fits (``plan_infer``),
    max_num_tokens x osl / (isl + osl)); ``max_batch`` and max_num_tokens default to the
    engine settings trtllm-bench picks (``trtllm_bench_settings``). In the steady state the B
    slots each run one request after another: a request takes one step for its whole prompt
    (chunked prefill is off in trtllm-bench, and max_num_tokens >= isl + max_batch_size),
    which yields its first token as in the step simulator, then osl - 1 decode steps. Over a
    cycle of osl steps every slot completes one request, so the B prompts ride in those steps,
    q = B // osl of them in each and one more in B mod osl of them (B's bound by max_num_tokens
    holds for the mean step; the steps with one prompt more may pass it by under one prompt;
    the wave of prompts at the start of the run is not modelled). Every step, prompts
    included, is timed by the one serving step model, ``serving_sim.StepModel.step_s`` (the
    rule ``plan_infer`` and the step simulator use; its per-step ``overhead_s``, default
    ``serving_sim.STEP_OVERHEAD_S``), with the composition the simulator gives it: a prompt
    of isl tokens is isl tokens, one logit row, isl (isl + 1) / 2 causal pairs and no cached
    tokens read; a decode at the mean context ctx = isl + osl // 2 is one token, one logit
    row, ctx pairs and ctx cached tokens. ``attention_dtype`` (default ``precision``'s): the
    tensor-core dtype of the attention core (``serving_sim.step_model``).

        step_s(k) = StepModel.step_s((B - k) + k isl, B, (B - k) ctx + k isl (isl + 1) / 2,
                                     (B - k) ctx)            (k prompts, B - k decodes)
        cycle_s = (osl - B mod osl) step_s(q) + (B mod osl) step_s(q + 1)
        output tokens/s = B osl / cycle_s,   requests/s = B / cycle_s

    ``decode_step_s`` is a step of B decodes alone, step_s with B tokens, B logit rows and
    B x ctx pairs and cached tokens; ``prefill_s_per_request`` = (cycle_s - osl x
    decode_step_s) / B, the time the prompts add to the steps they ride in, per request.
    """
    from .. import inputs as I
    from .setting import serve_setting
    from .sim import STEP_OVERHEAD_S, replica_steps
    isl = I.integer("isl", isl, 1, I.MAX_SEQ)
    osl = I.integer("osl", osl, 1, I.MAX_SEQ)
    max_batch = I.integer("max_batch", max_batch, 1, I.MAX_BATCH, none=True)
    overhead_s = STEP_OVERHEAD_S if overhead_s is None else \
        I.number("overhead_s", overhead_s, 0, 10, lo_open=False)
    cfg = I.instance("model", model, ModelConfig, I.CONFIG_HINT)
    tp = I.integer("tp", tp, 1, I.MAX_GPUS)
    pp = I.integer("pp", pp, 1, I.MAX_GPUS)
    if cfg.n_heads % tp:
        raise PlanError(f"tp ({tp}) must divide {cfg.name}'s {cfg.n_heads} attention heads")
    check_plan_args(gpu, gpu_file, profile, overheads)
    s = serve_setting(cfg, gpu, kv_dtype=kv_dtype, precision=precision, weights=weights,
                      profile=profile, gpu_file=gpu_file)
    name = s.scheme.name if s.scheme is not None else None
    if name != weights:  # trtllm-bench names its quantisation: the format by that name
        s = serve_setting(cfg, s.gpu, kv_dtype=kv_dtype, precision=precision, weights=name,
                          profile=profile)
    full = layouts_plan(s, I.integer("context", isl + osl, 1, I.MAX_SEQ), 1, None, overheads,
                        {(tp, pp)}, STEP_OVERHEAD_S).best
    engine = bench_settings(s, isl, osl, tp=tp, pp=pp)
    if max_batch is None:
        max_batch = engine["max_batch_size"]
    by_tokens = max(1, engine["max_num_tokens"] * osl // (isl + osl))
    batch = min(max_batch, full.max_concurrency_per_replica, by_tokens)
    prof = s.prof
    if attention_dtype is not None and prof.peak_flops.get(attention_dtype, 0.0) <= 0:
        raise PlanError(f"attention_dtype ({attention_dtype!r}): {prof.name} has no "
                        f"{attention_dtype} peak (it has {', '.join(sorted(prof.peak_flops))})")
    sm = replica_steps(s, tp=tp, pp=pp, overhead_s=overhead_s,
                       kv_capacity_tokens=0,  # the batch is sized above, nothing is simulated
                       attention_dtype=attention_dtype)
    ctx = isl + osl // 2
    prompt_pairs = isl * (isl + 1) // 2

    def mixed(k: int) -> dict:  # one step of k prompts and batch - k decodes
        d = batch - k
        comp = {"prompts": k, "tokens": d + k * isl, "logit_rows": batch,
                "pairs": d * ctx + k * prompt_pairs, "kv_read_tokens": d * ctx}
        return {**comp, "step_s": sm.step_s(comp["tokens"], comp["logit_rows"], comp["pairs"],
                                            comp["kv_read_tokens"])}
    q, extra = divmod(batch, osl)
    cycle = [{"count": osl - extra, **mixed(q)}]
    if extra:
        cycle.append({"count": extra, **mixed(q + 1)})
    cycle_s = sum(c["count"] * c["step_s"] for c in cycle)
    step = sm.step_s(batch, batch, batch * ctx, batch * ctx)
    return {"model": cfg.name, "gpu": s.gpu.name,
            "isl": isl, "osl": osl, "tp": tp, "pp": pp, "weights": name or precision,
            "kv_dtype": kv_dtype, "batch": batch, "max_batch_size": max_batch,
            "max_num_tokens": engine["max_num_tokens"],
            "kv_capacity_seqs": full.max_concurrency_per_replica,
            "decode_step_s": step, "step_overhead_s": overhead_s, "cycle_steps": cycle,
            "prefill_s_per_request": (cycle_s - osl * step) / batch,
            "output_tokens_per_s": batch * osl / cycle_s, "requests_per_s": batch / cycle_s}


#: most replicas plan_infer adds to reach ``tokens_per_s`` (a layout needing more is dropped)
MAX_REPLICAS = 10**5


def _replicas_for(concurrency: int, start: int, tokens_per_s: float | None, decode_s) -> int:
    """The fewest replicas >= ``start`` whose decode throughput ``r * per / decode_s(per)``
    (``per`` = ceil(concurrency / r) sequences each) reaches ``tokens_per_s``; MAX_REPLICAS + 1
    when none up to MAX_REPLICAS does. The same answer as trying r = start, start + 1, ... but
    one ``decode_s`` per distinct ``per``: within a run of r sharing ``per`` the throughput
    grows linearly in r, so the first r of the run that reaches the target is a ceiling."""
    r, cap = start, MAX_REPLICAS + 1
    if tokens_per_s is None or r >= cap:
        return r
    while True:
        per = cdiv(concurrency, r)
        last = min(cap, cdiv(concurrency, per - 1) - 1) if per > 1 else cap  # same per up to
        step = decode_s(per)
        ideal = tokens_per_s * step / per  # r * per / step >= tokens_per_s <=> r >= ideal
        need = max(r, math.ceil(ideal)) if ideal < cap else cap
        while need > r and (need - 1) * per / step >= tokens_per_s:  # float rounding of ceil
            need -= 1
        while need <= last and need * per / step < tokens_per_s:
            need += 1
        if need <= last or last >= cap:
            return min(need, cap)
        r = last + 1
