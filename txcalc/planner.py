"""Planning: how many GPUs, in which layout, for how long and at what cost.

    >>> from txcalc.planner import plan_train, plan_infer
    >>> p = plan_train(load("llama-3.1-405b"), "h100", 15 * 10**12, days=90)
    >>> p.min_gpus_to_fit, p.gpus_for_deadline, p.best.layout.short(), p.table(5)
    >>> plan_infer(load("llama-3.1-70b"), "h200", 131072, 64, kv_dtype="fp8").to_json()

Training search: every valid layout of TP x PP x DP x CP x EP x ZeRO stage (0-3, and ZeRO-3
hybrid shard) x sequence parallelism x schedule (1F1B, interleaved with 2 or 4 virtual
stages) x micro-batch x recompute, evaluated as numpy arrays by ``parallel.evaluate`` (the
per-op sums are computed once per TP/CP/EP/micro-batch value). The screen's numbers decide
the ranking; the rows reported (``best``, ``table``) are evaluated again over every pipeline
stage. Choices:

    question             | answer
    ---------------------|-------------------------------------------------------------------
    min_gpus_to_fit      | the fewest GPUs of any layout whose fullest stage fits in memory
    gpus_for_deadline    | with ``days``: the fewest GPUs of a fitting layout that trains the
                         |   token budget within the deadline
    best                 | with ``days``: the fastest layout on gpus_for_deadline GPUs; without:
                         |   among layouts within 2% of the lowest GPU-hours, the fastest

Defaults: sequence 4096 (the learned position table's length if shorter); global batch
about 4M tokens (2^22 / seq sequences: GPT-3 used 3.2M, Llama 2 4M); attention a fused
(flash) kernel.

Figures of merit: MFU = model FLOPs (the engine's: causally masked attention pairs skipped)
/ (step time x GPUs x the dense peak of the compute dtype); HFU uses the FLOPs executed
(full S x S attention, recompute included). days = tokens / (global batch x seq) x step time;
GPU-hours = days x 24 x GPUs; cost = GPU-hours x price per GPU-hour.
"""

from __future__ import annotations

import dataclasses
import math
import time
from dataclasses import dataclass, field

from .config import ModelConfig
from .errors import TxcalcError, WorkloadError
from .hardware import Gpu, get_gpu
from .memory import KV_DTYPES, OPTIMIZERS, PRECISIONS, _check, kv_cache_bytes
from .parallel.evaluate import (Overheads, TrainSetting, build_tables, evaluate,
                                evaluate_layouts, shard_groups)
from .parallel.layout import RECOMPUTE, Layout, LayoutError, check_layout, joint_rules
from .timing import DeviceProfile
from .units import cdiv

DAY_S = 86400.0
CATEGORIES = ("weights", "gradients", "optimizer", "activations", "logits", "zero3_buffers",
              "framework")


class PlanError(TxcalcError):
    """A plan no layout can satisfy (does not fit, deadline impossible, bad option)."""


def _pow2_upto(n: int) -> list[int]:
    out, v = [], 1
    while v <= n:
        out.append(v)
        v *= 2
    return out


def _divisors(n: int) -> list[int]:
    return [d for d in range(1, n + 1) if n % d == 0]


def default_seq(cfg: ModelConfig) -> int:
    return min(4096, cfg.max_position) if cfg.pos_type == "learned" else 4096


@dataclass
class TrainRow:
    """One evaluated layout: memory per GPU by category (bytes, the fullest stage), time."""

    layout: Layout
    gpus: int
    memory: dict
    total_bytes: int
    step_time_s: float
    mfu: float
    hfu: float
    tokens_per_s: float
    days: float
    gpu_hours: float
    cost: float | None
    bubble_fraction: float
    model_flops_step: int = 0
    hardware_flops_step: int = 0
    #: per parallel dimension: collective, link, bytes sent per GPU per step, seconds, exposed
    communication: dict = field(default_factory=dict)

    def to_json(self) -> dict:
        d = {k: getattr(self, k) for k in ("gpus", "total_bytes", "step_time_s", "mfu", "hfu",
                                           "tokens_per_s", "days", "gpu_hours", "cost",
                                           "bubble_fraction")}
        d["layout"] = self.layout.to_json()
        d["layout_name"] = self.layout.short()
        d["memory_bytes"] = {k: int(v) for k, v in self.memory.items()}
        d["communication"] = self.communication
        return d


@dataclass
class TrainPlan:
    setting: TrainSetting
    tokens: int
    days_limit: float | None
    price_per_gpu_hour: float | None
    min_gpus_to_fit: int
    gpus_for_deadline: int | None
    rows: list[TrainRow]
    layouts_evaluated: int
    search_s: float
    notes: list[str] = field(default_factory=list)

    @property
    def best(self) -> TrainRow:
        return self.rows[0]

    @property
    def steps(self) -> float:
        return self.tokens / (self.setting.global_batch * self.setting.seq)

    @property
    def model_flops(self) -> float:
        """Model FLOPs of the whole run (masked attention pairs skipped): the MFU numerator."""
        return self.best.model_flops_step * self.steps

    @property
    def hardware_flops(self) -> float:
        """FLOPs the best layout executes over the run (full S x S attention, recompute)."""
        return self.best.hardware_flops_step * self.steps

    def table(self, n: int = 10):
        """The best layouts as a pandas DataFrame (memory in bytes, one column a category)."""
        import pandas as pd
        recs = []
        for r in self.rows[:n]:
            rec = {"layout": r.layout.short(), "gpus": r.gpus}
            rec.update({f"{k}_bytes": int(v) for k, v in r.memory.items()})
            rec.update(total_bytes=r.total_bytes, step_time_s=r.step_time_s, mfu=r.mfu,
                       hfu=r.hfu, tokens_per_s=r.tokens_per_s, days=r.days,
                       gpu_hours=r.gpu_hours, cost=r.cost)
            recs.append(rec)
        return pd.DataFrame(recs)

    def to_json(self) -> dict:
        s, b = self.setting, self.best
        return {"model": s.cfg.name, "gpu": s.gpu.name, "tokens": self.tokens, "seq": s.seq,
                "global_batch": s.global_batch, "precision": s.precision,
                "optimizer": s.optimizer, "gpu_memory_bytes": s.gpu.memory_bytes,
                "min_gpus_to_fit": self.min_gpus_to_fit,
                "gpus_for_deadline": self.gpus_for_deadline, "days_limit": self.days_limit,
                "total_gpus": int(b.gpus), "gpu_hours": float(b.gpu_hours),
                "days": float(b.days), "cost": b.cost,
                "model_flops": self.model_flops, "hardware_flops": self.hardware_flops,
                "price_per_gpu_hour": self.price_per_gpu_hour, "best": b.to_json(),
                "layouts": [r.to_json() for r in self.rows],
                "layouts_evaluated": self.layouts_evaluated, "notes": self.notes}


# --- the grid ------------------------------------------------------------------------------------
#: Layout fields a search can be pinned to (``plan_train(only={"tp": 8, "recompute": "full"})``)
PINNABLE = ("tp", "pp", "dp", "cp", "ep", "zero", "micro_batch", "recompute")


def layout_grid(cfg: ModelConfig, gpu: Gpu, seq: int, global_batch: int, max_gpus: int,
                gpus: int | None = None, only: dict | None = None) -> tuple[dict, tuple]:
    """Every valid layout as index arrays (see ``parallel.evaluate.evaluate``).

    Candidate degrees: TP the divisors of n_heads up to 64, PP powers of two and divisors of
    the block count up to 128, CP powers of two keeping >= 2048 tokens a rank, EP powers of two
    up to 64, DP and micro-batch dividing the global batch; each degree is checked alone by
    ``check_layout`` (the model's rules), and the rules that join degrees here."""
    import numpy as np
    n_blocks = sum(depth for _, depth in cfg.stacks)

    def valid(**degrees) -> bool:
        try:
            check_layout(cfg, Layout(**degrees), seq)
            return True
        except LayoutError:
            return False
    tps = [t for t in _divisors(cfg.n_heads) if t <= 64 and valid(tp=t)]
    pps = [p for p in sorted(set(_pow2_upto(128)) | set(_divisors(n_blocks)))
           if p <= 128 and valid(pp=p)]
    cps = [c for c in _pow2_upto(32) if (c == 1 or seq // c >= 2048) and valid(cp=c)]
    eps = [e for e in _pow2_upto(64) if valid(ep=e, dp=e)]
    mbs = [b for b in _pow2_upto(16) if global_batch % b == 0]
    dps = _divisors(global_batch)
    zeros = [(0, 0), (1, 0), (2, 0), (3, 0), (3, 1)]
    vs = [1, 2, 4]
    axes = [np.arange(len(x)) for x in (tps, pps, cps, eps, mbs, dps, zeros, vs)]
    axes += [np.array([0, 1]), np.arange(3)]  # sp, recompute
    mesh = np.meshgrid(*axes, indexing="ij")
    ti, pi, ci, ei, mi, di, zi, vi, sp, rc = (m.ravel() for m in mesh)
    A = lambda xs: np.array(xs, dtype=np.int64)
    tp, pp, cp, ep, mb, dp = (A(tps)[ti], A(pps)[pi], A(cps)[ci], A(eps)[ei], A(mbs)[mi],
                              A(dps)[di])
    zero, hybrid = A([z for z, _ in zeros])[zi], A([h for _, h in zeros])[zi].astype(bool)
    v = A(vs)[vi]
    n = tp * pp * cp * dp
    ok = (n <= max_gpus) & (global_batch % (dp * mb) == 0)
    if gpus is not None:
        ok &= n == gpus
    m = global_batch // (dp * mb)
    for rule in joint_rules(tp, pp, dp, cp, ep, sp, v, n_blocks).values():  # check_layout's
        ok &= rule
    ok &= (v == 1) | (m % pp == 0)  # interleaving needs micro-batches in multiples of pp
    ok &= ~hybrid | (dp * cp * tp > gpu.gpus_per_node)  # hybrid only differs across nodes
    pinned = {"tp": tp, "pp": pp, "dp": dp, "cp": cp, "ep": ep, "zero": zero,
              "micro_batch": mb, "recompute": rc}
    for key, value in (only or {}).items():
        if key not in PINNABLE:
            raise PlanError(f"cannot pin {key!r}; choose from {', '.join(PINNABLE)}")
        if key in ("tp", "pp", "cp", "ep", "micro_batch", "zero", "recompute"):
            # the model's own rules name the offending values (TP dividing the heads...)
            check_layout(cfg, Layout(**{key: value, **({"dp": value} if key == "ep" else {})}),
                         seq)
        if key == "recompute":
            value = RECOMPUTE.index(value)
        ok &= pinned[key] == value
    idx = np.nonzero(ok)[0]
    g = dict(tp=tp[idx], pp=pp[idx], dp=dp[idx], cp=cp[idx], ep=ep[idx], zero=zero[idx],
             hybrid=hybrid[idx], sp=sp[idx].astype(bool), v=v[idx], mb=mb[idx], rc=rc[idx],
             ti=ti[idx], pi=pi[idx], ci=ci[idx], ei=ei[idx], mi=mi[idx])
    return g, (tps, eps, cps, mbs, pps)


def _layout_at(g: dict, i: int) -> Layout:
    v = int(g["v"][i])
    return Layout(tp=int(g["tp"][i]), pp=int(g["pp"][i]), dp=int(g["dp"][i]),
                  cp=int(g["cp"][i]), ep=int(g["ep"][i]), zero=int(g["zero"][i]),
                  hybrid_shard=bool(g["hybrid"][i]), sp=bool(g["sp"][i]),
                  schedule="interleaved" if v > 1 else "1f1b", virtual=v,
                  micro_batch=int(g["mb"][i]), recompute=RECOMPUTE[int(g["rc"][i])])


def rows_for(setting: TrainSetting, layouts: list[Layout], tokens: int,
             price: float | None) -> list[TrainRow]:
    """Exact evaluation (every stage) of chosen layouts."""
    r = evaluate_layouts(setting, layouts)
    out = []
    for i, lay in enumerate(layouts):
        step = float(r["step_time_s"][i])
        days = tokens / (setting.global_batch * setting.seq) * step / DAY_S
        hours = days * 24 * lay.gpus
        out.append(TrainRow(layout=lay, gpus=lay.gpus,
                            memory={c: int(r[f"{c}_bytes"][i]) for c in CATEGORIES},
                            total_bytes=int(r["total_bytes"][i]), step_time_s=step,
                            mfu=float(r["mfu"][i]), hfu=float(r["hfu"][i]),
                            tokens_per_s=float(r["tokens_per_s"][i]), days=days,
                            gpu_hours=hours, cost=None if price is None else hours * price,
                            bubble_fraction=float(r["bubble_fraction"][i]),
                            model_flops_step=int(r["model_flops_step"]),
                            hardware_flops_step=r["hardware_flops_seq"][
                                RECOMPUTE.index(lay.recompute)] * setting.global_batch,
                            communication={
                                dim: {"collective": str(c if isinstance(c, str) else c[i]),
                                      "link": str(r["links"][dim][i]),
                                      "bytes_per_step": float(b[i]), "time_s": float(t[i]),
                                      "exposed_s": float(x[i])}
                                for dim, (c, b, t, x) in r["comm"].items() if float(b[i]) > 0}))
    return out


def _positive(name: str, v, integer: bool = False):
    if v is None:
        return None
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not v > 0 or (
            integer and int(v) != v) or not math.isfinite(v):
        raise PlanError(f"{name} ({v!r}) must be a positive {'integer' if integer else 'number'}")
    return v


def plan_train(model: ModelConfig, gpu: str | Gpu, tokens: int, *, seq: int | None = None,
               global_batch: int | None = None, days: float | None = None,
               max_gpus: int | None = None, gpus: int | None = None,
               precision: str = "bf16-mixed", optimizer: str = "adamw",
               price_per_gpu_hour: float | None = None, gpu_file=None,
               profile: DeviceProfile | None = None, overheads: Overheads | None = None,
               achieved_tflops: float | None = None, attn_impl: str = "flash",
               only: dict | None = None, n_rows: int = 10) -> TrainPlan:
    """Search every valid layout for training ``model`` on ``tokens`` tokens.

    ``gpus``: only layouts on exactly this many GPUs. ``achieved_tflops``: the hardware
    TFLOP/s each GPU sustains (overrides the roofline step time, as in published estimates).
    ``only``: pin layout fields (``PINNABLE``), e.g. ``{"tp": 8, "recompute": "full"}``.
    """
    t0 = time.perf_counter()
    import numpy as np
    from . import load
    cfg = load(model)
    gpu = get_gpu(gpu, gpu_file)
    _check("precision", precision, PRECISIONS)
    _check("optimizer", optimizer, OPTIMIZERS)
    for name, v, integer in (("tokens", tokens, True), ("seq", seq, True),
                             ("global_batch", global_batch, True), ("days", days, False),
                             ("max_gpus", max_gpus, True), ("gpus", gpus, True),
                             ("price_per_gpu_hour", price_per_gpu_hour, False),
                             ("achieved_tflops", achieved_tflops, False)):
        _positive(name, v, integer)
    seq = seq or default_seq(cfg)
    if cfg.pos_type == "learned" and seq > cfg.max_position:
        raise WorkloadError(f"seq ({seq}) exceeds {cfg.name}'s learned position table "
                            f"(max_position {cfg.max_position})")
    global_batch = global_batch or max(1, round(2**22 / seq))
    max_gpus = max_gpus or 2**17
    if gpus is not None and gpus > max_gpus:
        raise PlanError(f"gpus ({gpus}) exceeds max_gpus ({max_gpus})")
    setting = TrainSetting(cfg, gpu, seq, global_batch, precision, optimizer, attn_impl,
                           profile, overheads or Overheads(),
                           achieved_tflops * 1e12 if achieved_tflops else None)
    g, axes = layout_grid(cfg, gpu, seq, global_batch, max_gpus, gpus, only)
    if len(g["tp"]) == 0:
        raise PlanError(f"no valid layout of {cfg.name} on "
                                + (f"exactly {gpus}" if gpus else f"at most {max_gpus}")
                        + f" GPUs with global batch {global_batch}"
                        + (f" and {only}" if only else ""))
    shard, shard_e = shard_groups(g, gpu)
    tables = build_tables(setting, *axes, np.unique(np.concatenate([shard, shard_e])))
    r = evaluate(setting, tables, g, detail=False)
    fits = r["total_bytes"] <= gpu.memory_bytes
    if not fits.any():
        smallest = int(r["total_bytes"].min())
        raise PlanError(
            f"{cfg.name} does not fit on {gpu.name} ({gpu.memory_bytes / 2**30:.0f} GiB) in any "
            f"layout with " + (f"exactly {gpus}" if gpus else f"at most {max_gpus}")
            + f" GPUs: the smallest per-GPU need is {smallest / 2**30:.1f} GiB")
    steps = tokens / (global_batch * seq)
    day_arr = steps * r["step_time_s"] / DAY_S
    hours = day_arr * 24 * r["gpus"]
    n = r["gpus"]
    min_fit = int(n[fits].min())
    deadline_n = None
    notes = []
    if days is not None:
        meet = fits & (day_arr <= days)
        if not meet.any():
            raise PlanError(f"no layout of {cfg.name} on " + (f"{gpus}" if gpus else
                            f"at most {max_gpus}") + f" {gpu.name} GPUs trains {tokens:,} "
                            f"tokens within {days:g} days (fastest: "
                            f"{day_arr[fits].min():,.1f} days)")
        deadline_n = int(n[meet].min())
        cand = np.nonzero(meet)[0]
        order = cand[np.lexsort((day_arr[cand], n[cand]))]
    else:
        cand = np.nonzero(fits)[0]
        good = cand[hours[cand] <= hours[cand].min() * 1.02]
        order = np.concatenate([good[np.argsort(day_arr[good])],
                                np.setdiff1d(cand, good)[np.argsort(
                                    hours[np.setdiff1d(cand, good)])]])
    chosen, seen = [], set()
    for i in order:
        lay = _layout_at(g, int(i))
        if lay not in seen:
            seen.add(lay)
            chosen.append(lay)
        if len(chosen) >= 3 * n_rows:
            break
    # the screen saw three stages; every stage is evaluated now, and a layout whose fullest
    # (or slowest) stage turns out not to fit (or to miss the deadline) is dropped
    rows = [r for r in rows_for(setting, chosen, tokens, price_per_gpu_hour)
            if r.total_bytes <= gpu.memory_bytes and (days is None or r.days <= days)][:n_rows]
    if not rows:
        raise PlanError(f"no layout of {cfg.name} fits on {gpu.name}"
                        + (f" within {days:g} days" if days is not None else "")
                        + " once every pipeline stage is evaluated; allow more GPUs "
                        "(--max-gpus) or a smaller --global-batch")
    if setting.achieved_flops_per_gpu:
        notes.append(f"step time from the achieved {achieved_tflops:g} TFLOP/s per GPU")
    if days is None:
        notes.append("no deadline given: best = the fastest of the layouts within 2% of the "
                     "lowest GPU-hours; --days D gives the GPUs to finish in D days")
    return TrainPlan(setting, tokens, days, price_per_gpu_hour, min_fit, deadline_n, rows,
                     int(len(g["tp"])), time.perf_counter() - t0, notes)


# --- serving -------------------------------------------------------------------------------------
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

    def to_json(self) -> dict:
        return dataclasses.asdict(self)


@dataclass
class InferPlan:
    cfg: ModelConfig
    gpu: Gpu
    context: int
    concurrency: int
    kv_dtype: str
    rows: list[InferRow]

    @property
    def best(self) -> InferRow:
        return self.rows[0]

    def table(self):
        import pandas as pd
        return pd.DataFrame([r.to_json() for r in self.rows])

    def to_json(self) -> dict:
        b = self.best
        out = {"model": self.cfg.name, "gpu": self.gpu.name, "context": self.context,
               "concurrency": self.concurrency, "kv_dtype": self.kv_dtype}
        out.update(b.to_json())
        out["gpus_per_replica"] = b.tp * b.pp
        out["options"] = [r.to_json() for r in self.rows]
        return out


#: tokens of one chunked-prefill step (vLLM's max_num_batched_tokens order of magnitude)
PREFILL_CHUNK = 8192


def plan_infer(model: ModelConfig, gpu: str | Gpu, context: int, concurrency: int, *,
               kv_dtype: str = "bf16", tokens_per_s: float | None = None,
               precision: str = "bf16", gpu_file=None, profile: DeviceProfile | None = None,
               overheads: Overheads | None = None) -> InferPlan:
    """GPUs to serve ``concurrency`` sequences of ``context`` tokens (and ``tokens_per_s``
    decode tokens/s in all), per replica layout TP x PP.

    Per GPU: weights/(tp, pp stage) + KV cache (heads split over min(tp, K); MLA's latent is
    replicated) + a prefill workspace of PREFILL_CHUNK tokens + framework terms. Decode step
    at batch B: roofline of all decode FLOPs against reading the local weights and B caches,
    stages in sequence, plus two TP all-reduces per block. Prefill latency: one sequence of
    ``context`` tokens, roofline per op, stages in sequence.
    """
    from . import load
    from .accounting import FlopCounts
    from .parallel import comm
    from .parallel.sharding import assign_stages, local_params, tp_style
    from .timing import COMPUTE_DTYPE, op_times, roofline_s
    from .workload import Workload

    cfg = load(model)
    gpu = get_gpu(gpu, gpu_file)
    _check("kv dtype", kv_dtype, KV_DTYPES)
    prec = PRECISIONS[_check("precision", precision, PRECISIONS)]
    wbytes = prec.weight
    for name, v in (("context", context), ("concurrency", concurrency)):
        _positive(name, v, True)
    _positive("tokens_per_s", tokens_per_s)
    if cfg.family == "encoder":
        raise WorkloadError(f"{cfg.name} is an encoder-only model: it does not decode")
    ov = overheads or Overheads()
    prof = profile or DeviceProfile.from_gpu(gpu)
    dtype = COMPUTE_DTYPE.get(precision, "bf16")
    ops = model_ops_cached(cfg)
    kv_all = kv_cache_bytes(cfg, context, 1, kv_dtype)
    n_blocks = sum(d for _, d in cfg.stacks)
    w = Workload(batch=1, seq=context, attn_impl="flash")
    decode_flops_1 = FlopCounts(cfg, w, ops).decode(context)  # one token of one sequence
    prefill_s: dict[int, float] = {}
    rows = []
    tps = [t for t in _divisors(cfg.n_heads) if t <= 64 and (
        cfg.is_mla or cfg.n_kv_heads % t == 0 or t % cfg.n_kv_heads == 0)]
    for tp in tps:
        for pp in [p for p in _pow2_upto(min(n_blocks, 64))]:
            stages = assign_stages(cfg, ops, pp)
            weights = max(sum(local_params(op, tp) for op in st) for st in stages) * wbytes
            kv_split = 1 if cfg.is_mla else min(tp, cfg.n_kv_heads)
            most_blocks = max(len({(o.stack, o.layer) for o in st if o.layer >= 0})
                              for st in stages)
            kv_seq = cdiv(kv_all * most_blocks, n_blocks * kv_split)
            workspace = PREFILL_CHUNK * (3 * max(cfg.d_ff, cfg.moe_d_ff) // tp
                                         + 6 * cfg.d_model) * prec.act
            fixed = ov.cuda_context_bytes + (ov.comm_buffer_bytes if tp * pp > 1 else 0)
            budget = int((gpu.memory_bytes - fixed) / (1 + ov.fragmentation)) - weights \
                - workspace
            if budget < kv_seq:
                continue
            maxc = budget // kv_seq

            def decode_s(batch: int) -> float:
                flops = batch * decode_flops_1 / (tp * pp)  # decode FLOPs are linear in batch
                moved = weights + batch * kv_seq + batch * cfg.vocab_size * 4 // tp
                t = roofline_s(flops, moved, prof, "matmul", dtype)
                ar = comm.collective_s("all_reduce", batch * cfg.d_model * wbytes, tp, 1, gpu,
                                       2 * most_blocks)
                return pp * (t + float(ar))

            if tp not in prefill_s:  # forward of one prompt, TP-split matmuls, stages in turn
                split = {op: tp if tp_style(op) != "replicate" or op.kind.startswith("attn")
                         else 1 for op in ops}
                prefill_s[tp] = sum(op_times(op, w, prof, dtype, wbytes, wbytes, split[op])[0]
                                    for op in ops) + float(comm.collective_s(
                                        "all_reduce", context * cfg.d_model * wbytes, tp, 1,
                                        gpu, 2 * n_blocks))
            prefill = prefill_s[tp]
            replicas = cdiv(concurrency, maxc)
            while True:
                per = cdiv(concurrency, replicas)
                tps_total = replicas * per / decode_s(per)
                if tokens_per_s is None or tps_total >= tokens_per_s or replicas > 10**5:
                    break
                replicas += 1
            per = cdiv(concurrency, replicas)
            step = decode_s(per)
            rows.append(InferRow(tp, pp, replicas, replicas * tp * pp, weights, kv_seq, maxc,
                                 maxc * replicas, prefill, replicas * per / step, 1 / step))
    if not rows:
        raise PlanError(f"{cfg.name} with {context:,} tokens of {kv_dtype} KV cache does not fit "
                        f"on {gpu.name} in any TP x PP layout up to "
                        f"{max(tps)} x {max(_pow2_upto(min(n_blocks, 64)))}")
    if tokens_per_s is not None:
        rows = [r for r in rows if r.decode_tokens_per_s >= tokens_per_s]
        if not rows:
            raise PlanError(f"no layout of {cfg.name} on {gpu.name} reaches {tokens_per_s:g} "
                            f"decode tokens/s at context {context:,}")
    rows.sort(key=lambda r: (r.total_gpus, r.tp * r.pp, r.prefill_latency_s))
    return InferPlan(cfg, gpu, context, concurrency, kv_dtype, rows)


_OPS_CACHE: dict = {}


def model_ops_cached(cfg: ModelConfig):
    from .components import model_ops
    if cfg not in _OPS_CACHE:
        _OPS_CACHE[cfg] = tuple(model_ops(cfg))
    return _OPS_CACHE[cfg]
