"""Planning: how many GPUs, in which layout, for how long and at what cost.

    >>> from txcalc.planner import plan_train, plan_infer
    >>> p = plan_train(load("llama-3.1-405b"), "h100", 15 * 10**12, days=90)
    >>> p.min_gpus_to_fit, p.gpus_for_deadline, p.best.layout.short(), p.table(5)
    >>> p.frontier_table()  # GPUs, days, GPU-hours, cost, layout: one row per GPU count
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
    frontier             | GPUs against days: the fastest fitting layout on each GPU count
                         |   (fewest that fit, powers of two above, best's count); any count:
                         |   ``fastest_on([n, ...])``

All of these come from one evaluation of the grid (``Screen``), kept on the plan.

Defaults: sequence 4096 (the learned position table's length if shorter); global batch
about 4M tokens (2^22 / seq sequences: GPT-3 used 3.2M, Llama 2 4M); attention a fused
(flash) kernel.

Figures of merit: MFU = model FLOPs (the engine's: causally masked attention pairs skipped)
/ (step time x GPUs x the dense peak of the compute dtype); HFU uses the FLOPs executed
(full S x S attention, recompute included). days = tokens / (global batch x seq) x step time
/ goodput (timing.GOODPUT, 0.90: production runs lose time to restarts; MFU and tokens/s are
throughput, without it); GPU-hours = days x 24 x GPUs; cost = GPU-hours x price per GPU-hour.
"""

from __future__ import annotations

import dataclasses
import math
import time
from dataclasses import dataclass, field
from functools import cached_property

from .config import ModelConfig
from .errors import TxcalcError, WorkloadError
from .hardware import Gpu, get_gpu, memory_words
from .memory import KV_DTYPES, OPTIMIZERS, PRECISIONS, _check, kv_cache_bytes
from .parallel.evaluate import (Overheads, TrainSetting, build_tables, evaluate,
                                evaluate_layouts, shard_groups)
from .parallel.layout import (RECOMPUTE, RECOMPUTE_POLICIES, Layout, LayoutError, check_layout,
                              joint_rules)
from .timing import DeviceProfile
from .units import cdiv

DAY_S = 86400.0
#: the frontier's GPU counts stop at this power of two unless max_gpus is given
FRONTIER_CAP = 16384
CATEGORIES = ("weights", "gradients", "optimizer", "activations", "inputs", "logits",
              "zero3_buffers", "step", "framework")


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
    #: host memory per GPU for offloaded recompute checkpoints (Layout.offload_checkpoints)
    host_bytes: int = 0
    #: measured / predicted step time the answer may be off by (timing.TIME_RATIO_BAND: the
    #: 10th-90th percentile over the published test runs); (1, 1) for a given throughput
    band: tuple[float, float] = (1.0, 1.0)

    def _low_high(self, value: float | None, inverse: bool = False):
        if value is None:
            return None, None
        lo, hi = self.band
        return (value / hi, value / lo) if inverse else (value * lo, value * hi)

    @property
    def step_time_s_band(self) -> tuple[float, float]:
        return self._low_high(self.step_time_s)

    @property
    def days_band(self) -> tuple[float, float]:
        return self._low_high(self.days)

    @property
    def gpu_hours_band(self) -> tuple[float, float]:
        return self._low_high(self.gpu_hours)

    @property
    def cost_band(self) -> tuple[float | None, float | None]:
        return self._low_high(self.cost)

    @property
    def mfu_band(self) -> tuple[float, float]:
        return self._low_high(self.mfu, inverse=True)

    @property
    def tokens_per_s_band(self) -> tuple[float, float]:
        return self._low_high(self.tokens_per_s, inverse=True)

    def bands_json(self) -> dict:
        """``{quantity}_low`` / ``{quantity}_high`` of every time, MFU, day, GPU-hour and cost
        answer of the row."""
        out = {}
        for k in ("step_time_s", "days", "gpu_hours", "cost", "mfu", "tokens_per_s"):
            out[f"{k}_low"], out[f"{k}_high"] = getattr(self, f"{k}_band")
        return out

    def to_json(self) -> dict:
        d = {k: getattr(self, k) for k in ("gpus", "total_bytes", "step_time_s", "mfu", "hfu",
                                           "tokens_per_s", "days", "gpu_hours", "cost",
                                           "bubble_fraction", "host_bytes")}
        d.update(self.bands_json())
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
    #: the ``max_gpus`` asked for (None: the search's own cap); bounds the frontier
    max_gpus: int | None = None
    #: the search's screen of every layout (``Screen``): the frontier is read from it
    screen: Screen | None = field(default=None, repr=False, compare=False)

    @property
    def best(self) -> TrainRow:
        return self.rows[0]

    def frontier_counts(self) -> list[int]:
        """GPU counts of ``frontier``: the fewest that fit, every power of two above it up to
        ``max_gpus`` (when given; else up to FRONTIER_CAP, or the best layout's count if more),
        and the best layout's count."""
        cap = self.max_gpus or max(FRONTIER_CAP, self.best.gpus)
        counts = {self.min_gpus_to_fit, self.best.gpus}
        counts |= {n for n in _pow2_upto(cap) if n > self.min_gpus_to_fit}
        return sorted(counts)

    @cached_property
    def frontier(self) -> list[TrainRow]:
        """GPUs against days: the fastest fitting layout on each of ``frontier_counts()``
        (counts with no valid fitting layout are left out), read from the same screen as
        ``best`` (no second search); see ``fastest_on``."""
        found = self.fastest_on(self.frontier_counts())
        return [found[n] for n in sorted(found)]

    def fastest_on(self, counts) -> dict[int, TrainRow]:
        """The fastest layout on exactly n GPUs, for each n of ``counts`` that has one that
        fits (every stage evaluated), ignoring the deadline: what ``plan_train(..., gpus=n,
        n_rows=1).best`` answers, from this plan's screen."""
        if self.screen is None:
            raise PlanError("this plan holds no screen of the layout grid")
        return self.screen.fastest_on(counts, self.tokens, self.price_per_gpu_hour)

    def frontier_table(self):
        """``frontier`` as a pandas DataFrame: gpus, days, gpu_hours, cost, layout, ..."""
        import pandas as pd
        return pd.DataFrame([{"gpus": r.gpus, "days": r.days, "gpu_hours": r.gpu_hours,
                              "cost": r.cost, "layout": r.layout.short(),
                              "step_time_s": r.step_time_s, "mfu": r.mfu,
                              "total_bytes": r.total_bytes} for r in self.frontier])

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
        from .inputs import MAX_ROWS, integer
        recs = []
        for r in self.rows[:integer("n", n, 1, MAX_ROWS)]:
            rec = {"layout": r.layout.short(), "gpus": r.gpus}
            rec.update({f"{k}_bytes": int(v) for k, v in r.memory.items()})
            rec.update(total_bytes=r.total_bytes, step_time_s=r.step_time_s, mfu=r.mfu,
                       hfu=r.hfu, tokens_per_s=r.tokens_per_s, days=r.days,
                       gpu_hours=r.gpu_hours, cost=r.cost)
            recs.append(rec)
        return pd.DataFrame(recs)

    def band_json(self) -> dict:
        """Where the ``*_low`` / ``*_high`` figures come from."""
        from .timing import TIME_BAND_COVERAGE, TIME_BAND_RUNS
        lo, hi = self.best.band
        if self.setting.achieved_flops_per_gpu:
            return {"ratio_low": lo, "ratio_high": hi, "coverage": None, "runs": 0,
                    "source": "the given achieved throughput: no band"}
        return {"ratio_low": lo, "ratio_high": hi, "coverage": TIME_BAND_COVERAGE,
                "runs": TIME_BAND_RUNS,
                "source": "10th-90th percentile of measured / predicted step time over the "
                          "published test runs (reports/training-validation.md)"}

    def to_json(self) -> dict:
        s, b = self.setting, self.best
        return {"model": s.cfg.name, "gpu": s.gpu.name, "tokens": self.tokens, "seq": s.seq,
                "global_batch": s.global_batch, "precision": s.precision,
                "optimizer": s.optimizer, "gpu_memory_bytes": s.gpu.memory_bytes,
                "gpu_usable_bytes": s.gpu.usable_bytes,
                "min_gpus_to_fit": self.min_gpus_to_fit,
                "gpus_for_deadline": self.gpus_for_deadline, "days_limit": self.days_limit,
                "total_gpus": int(b.gpus), "gpu_hours": float(b.gpu_hours),
                "days": float(b.days), "cost": b.cost, "mfu": float(b.mfu),
                **{f"{k}_{end}": v for k in ("days", "gpu_hours", "cost", "mfu")
                   for end, v in zip(("low", "high"), getattr(b, f"{k}_band"))},
                "band": self.band_json(),
                "model_flops": self.model_flops, "hardware_flops": self.hardware_flops,
                "price_per_gpu_hour": self.price_per_gpu_hour, "goodput": s.goodput,
                "best": b.to_json(),
                "layouts": [r.to_json() for r in self.rows],
                "layouts_evaluated": self.layouts_evaluated, "notes": self.notes,
                "finetune": s.finetune.describe() if s.finetune else "full", "loss": s.loss}


# --- the grid ------------------------------------------------------------------------------------
#: Layout fields a search can be pinned to (``plan_train(only={"tp": 8, "recompute": "full"})``)
PINNABLE = ("tp", "pp", "dp", "cp", "ep", "zero", "micro_batch", "recompute", "recompute_layers",
            "offload_checkpoints")


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
    # the masks are taken on the degrees broadcast along their own axis of the grid (not on
    # the full grid: far less memory), and only the kept points are gathered at the end
    policies = RECOMPUTE_POLICIES
    lists = (tps, pps, cps, eps, mbs, dps, [z for z, _ in zeros], vs, [0, 1],
             list(range(len(policies))))
    shape = tuple(len(x) for x in lists)  # ... sp, recompute

    def A(xs, k):  # the values of axis k, shaped to broadcast against the grid
        return np.array(xs, dtype=np.int64).reshape([-1 if i == k else 1 for i in range(10)])
    tp, pp, cp, ep, mb, dp, zero, v, sp, pol = (A(xs, k) for k, xs in enumerate(lists))
    rc = A([r for r, _, _ in policies], 9)
    rl = A([n for _, n, _ in policies], 9)
    off = A([o for _, _, o in policies], 9).astype(bool)
    hybrid = A([h for _, h in zeros], 6).astype(bool)
    n = tp * pp * cp * dp
    ok = np.broadcast_to((n <= max_gpus) & (global_batch % (dp * mb) == 0), shape).copy()
    if gpus is not None:
        ok &= n == gpus
    m = global_batch // (dp * mb)
    for rule in joint_rules(tp, pp, dp, cp, ep, sp, v, n_blocks).values():  # check_layout's
        ok &= rule
    ok &= (v == 1) | (m % pp == 0)  # interleaving needs micro-batches in multiples of pp
    ok &= ~hybrid | (dp * cp * tp > gpu.gpus_per_node)  # hybrid only differs across nodes
    ok &= (rl == 0) | (rl < -(-n_blocks // pp))  # partial: fewer blocks than a stage holds
    pinned = {"tp": tp, "pp": pp, "dp": dp, "cp": cp, "ep": ep, "zero": zero,
              "micro_batch": mb, "recompute": rc, "recompute_layers": rl,
              "offload_checkpoints": off}
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
    if "recompute" in (only or {}) and "recompute_layers" not in only:
        ok &= rl == 0  # a pinned mode means every block, unless N is pinned too
    if "offload_checkpoints" not in (only or {}) and "recompute" in (only or {}):
        ok &= ~off  # ... and checkpoints on the GPU, unless offload is pinned too
    ti, pi, ci, ei, mi, di, zi, vi, si, ri = np.nonzero(ok)  # in the grid's C order
    g = dict(tp=tp.ravel()[ti], pp=pp.ravel()[pi], dp=dp.ravel()[di], cp=cp.ravel()[ci],
             ep=ep.ravel()[ei], zero=zero.ravel()[zi], hybrid=hybrid.ravel()[zi],
             sp=si.astype(bool), v=v.ravel()[vi], mb=mb.ravel()[mi], rc=rc.ravel()[ri],
             rl=rl.ravel()[ri], off=off.ravel()[ri], pol=ri, ti=ti, pi=pi, ci=ci, ei=ei,
             mi=mi)
    return g, (tps, eps, cps, mbs, pps)


def _layout_at(g: dict, i: int) -> Layout:
    v = int(g["v"][i])
    return Layout(tp=int(g["tp"][i]), pp=int(g["pp"][i]), dp=int(g["dp"][i]),
                  cp=int(g["cp"][i]), ep=int(g["ep"][i]), zero=int(g["zero"][i]),
                  hybrid_shard=bool(g["hybrid"][i]), sp=bool(g["sp"][i]),
                  schedule="interleaved" if v > 1 else "1f1b", virtual=v,
                  micro_batch=int(g["mb"][i]), recompute=RECOMPUTE[int(g["rc"][i])],
                  recompute_layers=int(g["rl"][i]), offload_checkpoints=bool(g["off"][i]))


def _ranked(cand, day_arr, hours, n, deadline: bool, simpler=None):
    """Screen indices ``cand`` in the order a plan reports them: with a deadline, fewest GPUs
    then fastest; without, the layouts within 2% of the lowest GPU-hours fastest first, then
    the rest by GPU-hours. Ties go to the simpler layout: ``simpler`` ranks each index (the
    ZeRO stage, hybrid shard after it), so a dp1 run that ZeRO cannot shard gets z0, not z3."""
    import numpy as np
    tie = np.zeros(len(day_arr), dtype=np.int64) if simpler is None else simpler
    if deadline:
        return cand[np.lexsort((tie[cand], day_arr[cand], n[cand]))]
    good = cand[hours[cand] <= hours[cand].min() * 1.02]
    rest = np.setdiff1d(cand, good)
    return np.concatenate([good[np.lexsort((tie[good], day_arr[good]))],
                           rest[np.lexsort((tie[rest], hours[rest]))]])


def _simpler(g: dict):
    """Tie-break rank of each layout of a grid: ZeRO stage, hybrid shard counted after it."""
    return g["zero"].astype("int64") * 2 + g["hybrid"].astype("int64")


def _distinct_layouts(g: dict, order, limit: int) -> list[Layout]:
    """The first ``limit`` distinct layouts of the screen indices ``order``."""
    chosen, seen = [], set()
    for i in order:
        lay = _layout_at(g, int(i))
        if lay not in seen:
            seen.add(lay)
            chosen.append(lay)
        if len(chosen) >= limit:
            break
    return chosen


#: layouts of the screen's ranking evaluated over every stage per reported row: a layout
#: whose fullest stage (screened on first, second, last, heaviest) turns out not to fit is
#: replaced by the next
CANDIDATES_PER_ROW = 3


@dataclass
class Screen:
    """One evaluation of the layout grid (``parallel.evaluate.evaluate``, the screened
    stages), kept so that every question of a plan (fewest GPUs, the deadline, the frontier)
    is answered from it without searching again."""

    setting: TrainSetting
    g: dict  #: the layouts, as index arrays (``layout_grid``)
    n: object  #: GPUs of each layout
    fits: object  #: the screened fullest stage fits in the GPU's memory
    day_arr: object  #: days to train the token budget
    hours: object  #: GPU-hours

    def fastest_on(self, counts, tokens: int, price: float | None) -> dict[int, TrainRow]:
        """For each n of ``counts``: the first layout on exactly n GPUs, in the no-deadline
        ranking of ``_ranked``, that fits once every stage is evaluated (all candidates of all
        counts are evaluated in one ``rows_for``)."""
        import numpy as np
        picks: dict[int, list[Layout]] = {}
        for c in sorted(set(int(c) for c in counts)):
            cand = np.nonzero(self.fits & (self.n == c))[0]
            if len(cand):
                picks[c] = _distinct_layouts(self.g, _ranked(cand, self.day_arr, self.hours,
                                                             self.n, False, _simpler(self.g)),
                                             CANDIDATES_PER_ROW)
        flat = [lay for lays in picks.values() for lay in lays]
        rows = iter(rows_for(self.setting, flat, tokens, price) if flat else [])
        out = {}
        for c, lays in picks.items():
            fitting = [r for r in (next(rows) for _ in lays)
                       if r.total_bytes <= self.setting.gpu.usable_bytes]
            if fitting:
                out[c] = fitting[0]
        return out


def rows_for(setting: TrainSetting, layouts: list[Layout], tokens: int,
             price: float | None) -> list[TrainRow]:
    """Exact evaluation (every stage) of chosen layouts."""
    from .timing import TIME_RATIO_BAND
    r = evaluate_layouts(setting, layouts)
    # a step time from the user's achieved throughput carries no calibration band
    band = (1.0, 1.0) if setting.achieved_flops_per_gpu else TIME_RATIO_BAND
    out = []
    for i, lay in enumerate(layouts):
        step = float(r["step_time_s"][i])
        days = tokens / (setting.global_batch * setting.seq) * step / DAY_S / setting.goodput
        hours = days * 24 * lay.gpus
        out.append(TrainRow(layout=lay, gpus=lay.gpus,
                            memory={c: int(r[f"{c}_bytes"][i]) for c in CATEGORIES},
                            total_bytes=int(r["total_bytes"][i]), step_time_s=step,
                            mfu=float(r["mfu"][i]), hfu=float(r["hfu"][i]),
                            tokens_per_s=float(r["tokens_per_s"][i]), days=days,
                            gpu_hours=hours, cost=None if price is None else hours * price,
                            bubble_fraction=float(r["bubble_fraction"][i]),
                            host_bytes=int(r["host_bytes"][i]),
                            model_flops_step=int(r["model_flops_step"]),
                            hardware_flops_step=int(r["hardware_flops_seq"][i])
                            * setting.global_batch,
                            band=band,
                            communication={
                                dim: {"collective": str(c if isinstance(c, str) else c[i]),
                                      "link": str(r["links"][dim][i]),
                                      "bytes_per_step": float(b[i]), "time_s": float(t[i]),
                                      "exposed_s": float(x[i]),
                                      "hidden_s": float(t[i]) - float(x[i])}
                                for dim, (c, b, t, x) in r["comm"].items() if float(b[i]) > 0}))
    return out


def _check_common(gpu, gpu_file, profile, overheads) -> None:
    """Arguments plan_train and plan_infer share, checked at their entry (txcalc.inputs)."""
    from . import inputs as I
    if not isinstance(gpu, Gpu):
        I.text("gpu", gpu, max_len=200)
    I.path_text("gpu_file", gpu_file, none=True)
    if profile is not None and not isinstance(profile, DeviceProfile):
        raise I.InputError(f"profile ({I.show(profile)}) must be a DeviceProfile or None")
    if overheads is not None and not isinstance(overheads, Overheads):
        raise I.InputError(f"overheads ({I.show(overheads)}) must be an Overheads or None")


def plan_train(model: ModelConfig, gpu: str | Gpu, tokens: int, *, seq: int | None = None,
               global_batch: int | None = None, days: float | None = None,
               max_gpus: int | None = None, gpus: int | None = None,
               precision: str = "bf16-mixed", optimizer: str = "adamw",
               price_per_gpu_hour: float | None = None, gpu_file=None,
               profile: DeviceProfile | None = None, overheads: Overheads | None = None,
               achieved_tflops: float | None = None, attn_impl: str = "flash",
               only: dict | None = None, n_rows: int = 10, finetune=None,
               stack: str | None = None, overlap=None,
               goodput: float | None = None, loss: str = "full",
               global_tokens: int = 0) -> TrainPlan:
    """Search every valid layout for training ``model`` on ``tokens`` tokens.

    ``finetune``: a ``finetune.Finetune`` (LoRA, QLoRA, DoRA, freeze): gradients, optimizer
    states and their ZeRO sharding follow the trainable parameters, the frozen base is kept
    in its format (sharded by ZeRO-3), FLOPs skip the frozen weights' gradients.
    ``gpus``: only layouts on exactly this many GPUs. ``achieved_tflops``: the hardware
    TFLOP/s each GPU sustains (overrides the roofline step time, as in published estimates).
    ``only``: pin layout fields (``PINNABLE``), e.g. ``{"tp": 8, "recompute": "full"}``.
    ``stack``: a framework profile (txcalc.stacks: its attention kernel, fused kernels and
    overlapped collectives); without one, flash attention, HF's other kernels and
    ``stacks.DEFAULT_OVERLAP``. ``attn_impl`` and ``overlap`` (items of stacks.OVERLAPS, or
    "none") replace the profile's (``attn_impl`` when it is not the default "flash": only
    hf-eager's kernel differs). ``goodput``: the fraction of wall-clock time spent training
    (0 < G <= 1, default timing.GOODPUT): days, GPU-hours and cost are divided by it.
    ``loss``: the LM loss (Workload.loss: full, chunked[:N], fused-linear): what the head and
    loss save and the loss's T x V transient on the last stage (txcalc.lm_loss).
    ``global_tokens``: Longformer's tokens per sequence with global attention
    (``Workload.global_tokens``).
    """
    t0 = time.perf_counter()
    import numpy as np
    from . import inputs as I, load
    from .workload import ATTN_IMPLS
    tokens = I.integer("tokens", tokens, 1, I.MAX_TOKENS)
    seq = I.integer("seq", seq, 1, I.MAX_SEQ, none=True)
    global_batch = I.integer("global_batch", global_batch, 1, I.MAX_BATCH, none=True)
    days = I.number("days", days, 0, I.MAX_DAYS, none=True)
    max_gpus = I.integer("max_gpus", max_gpus, 1, I.MAX_GPUS, none=True)
    gpus = I.integer("gpus", gpus, 1, I.MAX_GPUS, none=True)
    price_per_gpu_hour = I.number("price_per_gpu_hour", price_per_gpu_hour, 0, I.MAX_PRICE,
                                  lo_open=False, none=True)
    achieved_tflops = I.number("achieved_tflops", achieved_tflops, *I.TFLOPS_RANGE,
                               lo_open=False, none=True)
    n_rows = I.integer("n_rows", n_rows, 1, I.MAX_ROWS)
    from .timing import GOODPUT
    goodput = GOODPUT if goodput is None else I.number("goodput", goodput, 0, 1)
    from .stacks import DEFAULT_OVERLAP, check_overlap, get_stack
    prof_stack = get_stack(stack) if stack is not None else None
    I.choice("attn_impl", attn_impl, ATTN_IMPLS)
    if prof_stack and attn_impl == "flash":
        attn_impl = prof_stack.attn_impl
    overlap = check_overlap(overlap) if overlap is not None else \
        (prof_stack.overlap if prof_stack else DEFAULT_OVERLAP)
    _check_common(gpu, gpu_file, profile, overheads)
    if only is not None and not isinstance(only, dict):
        raise I.InputError(f"only ({I.show(only)}) must be a dict of pinned layout fields")
    for key, value in (only or {}).items():
        I.choice("only key", key, PINNABLE)
        if key == "recompute":
            I.choice("only['recompute']", value, RECOMPUTE)
        elif key == "offload_checkpoints":
            if not isinstance(value, bool):
                raise I.InputError(f"only['offload_checkpoints'] ({I.show(value)}) must be "
                                   "True or False")
        else:
            I.integer(f"only[{key!r}]", value, 0 if key in ("zero", "recompute_layers") else 1,
                      3 if key == "zero" else I.MAX_GPUS if key != "micro_batch"
                      else I.MAX_BATCH)
    cfg = load(model)
    from .lm_loss import check_head
    from .workload import loss_chunks
    loss_chunks(loss)  # a malformed loss fails here, naming it
    check_head(cfg, loss)
    gpu = get_gpu(gpu, gpu_file)
    _check("precision", precision, PRECISIONS)
    _check("optimizer", optimizer, OPTIMIZERS)
    if finetune is not None:
        from .finetune import Finetune, check_precision
        I.instance("finetune", finetune, Finetune)
        check_precision(finetune, precision)
        finetune = None if finetune.mode == "full" else finetune
    from .timing import COMPUTE_DTYPE
    if COMPUTE_DTYPE[precision] == "fp8" and gpu.peak_flops.get("fp8", 0) <= 0:
        raise PlanError(f"precision {precision!r} needs fp8 tensor cores; {gpu.name} has no fp8 "
                        "peak in the catalog (Hopper, Ada and Blackwell GPUs do)")
    seq = seq or default_seq(cfg)
    if cfg.pos_type == "learned" and seq > cfg.max_position:
        raise WorkloadError(f"seq ({seq}) exceeds {cfg.name}'s learned position table "
                            f"(max_position {cfg.max_position})")
    from .workload import Workload, check_fits
    check_fits(cfg, Workload(batch=1, seq=seq, global_tokens=global_tokens))
    global_batch = global_batch or max(1, round(2**22 / seq))
    max_gpus_asked, max_gpus = max_gpus, max_gpus or 2**17
    if gpus is not None and gpus > max_gpus:
        raise PlanError(f"gpus ({gpus}) exceeds max_gpus ({max_gpus})")
    setting = TrainSetting(cfg, gpu, seq, global_batch, precision, optimizer, attn_impl,
                           profile, overheads or Overheads(),
                           achieved_tflops * 1e12 if achieved_tflops else None,
                           finetune=finetune,
                           softmax_fp32=prof_stack.softmax_fp32 if prof_stack else True,
                           fused=prof_stack.fused if prof_stack else (), overlap=overlap,
                           keeps=prof_stack.keeps if prof_stack else (), goodput=goodput,
                           loss=loss, global_tokens=global_tokens,
                           loss_kernel=prof_stack.loss_kernel if prof_stack else "hf",
                           optimizer_kernel=prof_stack.optimizer_kernel if prof_stack
                           else "foreach")
    setting.ops  # refuses unknown adapter targets and ranks above a target's width now
    g, axes = layout_grid(cfg, gpu, seq, global_batch, max_gpus, gpus, only)
    _check_int64(cfg, seq, max(axes[3], default=1), precision, optimizer, attn_impl)
    if len(g["tp"]) == 0:
        raise PlanError(f"no valid layout of {cfg.name} on "
                                + (f"exactly {gpus}" if gpus else f"at most {max_gpus}")
                        + f" GPUs with global batch {global_batch}"
                        + (f" and {only}" if only else ""))
    shard, shard_e = shard_groups(g, gpu)
    tables = build_tables(setting, *axes, np.unique(np.concatenate([shard, shard_e])))
    r = evaluate(setting, tables, g, detail=False)
    # The capacity is CUDA's total (Gpu.usable_bytes, as for memory, fit, serving and
    # report: hardware.gpu_memory), not the datasheet's: the CUDA context, charged here as
    # Overheads.cuda_context_bytes, comes out of CUDA's total.
    fits = r["total_bytes"] <= gpu.usable_bytes
    if not fits.any():
        smallest = int(r["total_bytes"].min())
        raise PlanError(
            f"{cfg.name} does not fit on {gpu.name} ({memory_words(gpu)}) in any "
            f"layout with " + (f"exactly {gpus}" if gpus else f"at most {max_gpus}")
            + f" GPUs: the smallest per-GPU need is {smallest / 2**30:.1f} GiB")
    steps = tokens / (global_batch * seq)
    day_arr = steps * r["step_time_s"] / DAY_S / setting.goodput
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
        order = _ranked(np.nonzero(meet)[0], day_arr, hours, n, True, _simpler(g))
    else:
        order = _ranked(np.nonzero(fits)[0], day_arr, hours, n, False, _simpler(g))
    chosen = _distinct_layouts(g, order, CANDIDATES_PER_ROW * n_rows)
    # the screen saw three stages; every stage is evaluated now, and a layout whose fullest
    # (or slowest) stage turns out not to fit (or to miss the deadline) is dropped
    rows = [r for r in rows_for(setting, chosen, tokens, price_per_gpu_hour)
            if r.total_bytes <= gpu.usable_bytes and (days is None or r.days <= days)][:n_rows]
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
                     int(len(g["tp"])), time.perf_counter() - t0, notes, max_gpus_asked,
                     Screen(setting, g, n, fits, day_arr, hours))


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
    from . import load
    from .parallel.sharding import assign_stages, local_params
    from .serving_sim import STEP_OVERHEAD_S, step_model
    from . import inputs as I

    context = I.integer("context", context, 1, I.MAX_SEQ)
    concurrency = I.integer("concurrency", concurrency, 1, I.MAX_BATCH)
    tokens_per_s = I.number("tokens_per_s", tokens_per_s, 0, I.TOKENS_PER_S_MAX, none=True)
    overhead_s = STEP_OVERHEAD_S if overhead_s is None else \
        I.number("overhead_s", overhead_s, 0, 10, lo_open=False)
    _check_common(gpu, gpu_file, profile, overheads)
    _check("kv dtype", kv_dtype, KV_DTYPES)
    cfg = load(model)
    gpu = get_gpu(gpu, gpu_file)
    prec = PRECISIONS[_check("precision", precision, PRECISIONS)]
    wbytes = prec.weight
    if cfg.family == "encoder":
        raise WorkloadError(f"{cfg.name} is an encoder-only model: it does not decode")
    ov = overheads or Overheads()
    prof = profile or DeviceProfile.from_gpu(gpu)
    from .components import model_ops_tuple
    from . import formats as Q
    sch, _ = Q.resolve(model, weights)
    weights_arg = weights  # ``weights`` is reused below for a layout's bytes
    ops = model_ops_tuple(cfg)
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
    tps = [t for t in _divisors(cfg.n_heads) if t <= 64 and (
        cfg.is_mla or cfg.n_kv_heads % t == 0 or t % cfg.n_kv_heads == 0)]
    for tp in tps:
        for pp in [p for p in _pow2_upto(min(n_blocks, 64))]:
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
                steps[tp] = step_model(model, gpu, tp=tp, kv_dtype=kv_dtype,
                                       precision=precision, weights=weights_arg, profile=prof,
                                       gpu_file=gpu_file, overhead_s=overhead_s,
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
                        f"{max(tps)} x {max(_pow2_upto(min(n_blocks, 64)))}")
    if tokens_per_s is not None:
        rows = [r for r in rows if r.decode_tokens_per_s >= tokens_per_s]
        if not rows:
            raise PlanError(f"no layout of {cfg.name} on {gpu.name} reaches {tokens_per_s:g} "
                            f"decode tokens/s at context {context:,}")
    rows.sort(key=lambda r: (r.total_gpus, r.tp * r.pp, r.prefill_latency_s))
    return InferPlan(cfg, gpu, context, concurrency, kv_dtype, rows,
                     sch.name if sch is not None else precision)


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
    from . import formats as Q
    from . import inputs as I
    from . import load
    from .components import model_ops_tuple
    isl = I.integer("isl", isl, 1, I.MAX_SEQ)
    osl = I.integer("osl", osl, 1, I.MAX_SEQ)
    cfg = load(model)
    g = get_gpu(gpu, gpu_file)
    sch, _ = Q.resolve(model, weights)
    algo = sch.name if sch is not None else None
    if algo not in _TRTLLM_BYTES:  # not a tuned quantisation: TensorRT-LLM's defaults
        return {"max_batch_size": SERVE_MAX_BATCH,
                "max_num_tokens": max(SERVE_MAX_NUM_TOKENS, isl + SERVE_MAX_BATCH),
                "kv_cache_max_requests": None}
    byte_per_elem = _TRTLLM_BYTES[algo]
    byte_per_kv = 1.0 if kv_dtype == "fp8" else 2.0
    params = sum(op.params_total for op in model_ops_tuple(cfg))
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
    from . import formats as Q
    from . import inputs as I
    from .serving_sim import STEP_OVERHEAD_S, step_model
    from . import load
    isl = I.integer("isl", isl, 1, I.MAX_SEQ)
    osl = I.integer("osl", osl, 1, I.MAX_SEQ)
    max_batch = I.integer("max_batch", max_batch, 1, I.MAX_BATCH, none=True)
    overhead_s = STEP_OVERHEAD_S if overhead_s is None else \
        I.number("overhead_s", overhead_s, 0, 10, lo_open=False)
    cfg = load(model)
    tp = I.integer("tp", tp, 1, I.MAX_GPUS)
    pp = I.integer("pp", pp, 1, I.MAX_GPUS)
    if cfg.n_heads % tp:
        raise PlanError(f"tp ({tp}) must divide {cfg.name}'s {cfg.n_heads} attention heads")
    sch, _ = Q.resolve(model, weights)
    name = sch.name if sch is not None else None
    kw = dict(kv_dtype=kv_dtype, precision=precision, gpu_file=gpu_file, profile=profile,
              overheads=overheads, weights=name, layouts={(tp, pp)})
    full = plan_infer(cfg, gpu, isl + osl, 1, **kw).best
    engine = trtllm_bench_settings(cfg, gpu, isl, osl, tp=tp, pp=pp, weights=name,
                                   kv_dtype=kv_dtype, gpu_file=gpu_file)
    if max_batch is None:
        max_batch = engine["max_batch_size"]
    by_tokens = max(1, engine["max_num_tokens"] * osl // (isl + osl))
    batch = min(max_batch, full.max_concurrency_per_replica, by_tokens)
    prof = profile or DeviceProfile.from_gpu(get_gpu(gpu, gpu_file))
    if attention_dtype is not None and prof.peak_flops.get(attention_dtype, 0.0) <= 0:
        raise PlanError(f"attention_dtype ({attention_dtype!r}): {prof.name} has no "
                        f"{attention_dtype} peak (it has {', '.join(sorted(prof.peak_flops))})")
    sm = step_model(cfg, gpu, tp=tp, pp=pp, kv_dtype=kv_dtype, precision=precision,
                    weights=name, profile=profile, gpu_file=gpu_file, overhead_s=overhead_s,
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
    return {"model": cfg.name, "gpu": get_gpu(gpu, gpu_file).name,
            "isl": isl, "osl": osl, "tp": tp, "pp": pp, "weights": name or precision,
            "kv_dtype": kv_dtype, "batch": batch, "max_batch_size": max_batch,
            "max_num_tokens": engine["max_num_tokens"],
            "kv_capacity_seqs": full.max_concurrency_per_replica,
            "decode_step_s": step, "step_overhead_s": overhead_s, "cycle_steps": cycle,
            "prefill_s_per_request": (cycle_s - osl * step) / batch,
            "output_tokens_per_s": batch * osl / cycle_s, "requests_per_s": batch / cycle_s}


#: the single-GPU training memory (exact Python ints) above which the planner's int64 arrays
#: could overflow: a layout's bytes are at most ~2x the whole model's at its micro-batch (the
#: first stage of interleaved 1F1B), so 2^59 keeps an 8x margin below 2^62
INT64_SAFE_BYTES = 2**59


def _check_int64(cfg: ModelConfig, seq: int, micro_batch: int, precision: str,
                 optimizer: str, attn_impl: str) -> None:
    """Refuse a model and sequence so large that a layout's bytes could wrap in int64."""
    from .memory import TrainingMemory
    from .workload import Workload
    total = TrainingMemory(cfg, Workload(batch=micro_batch, seq=seq, attn_impl=attn_impl),
                           precision, optimizer).total
    if total > INT64_SAFE_BYTES:
        raise PlanError(f"{cfg.name} at seq {seq:,} and micro-batch {micro_batch} needs "
                        f"{total / 1e18:.3g} EB on one GPU, over the planner's bound of "
                        f"{INT64_SAFE_BYTES / 1e18:.3g} EB (its tables are 64-bit integers)")


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
