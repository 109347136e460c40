"""Planning: how many GPUs, in which layout, for how long and at what cost.

    >>> from txcalc.train.planner import plan_train, plan_infer
    >>> p = plan_train(load("llama-3.1-405b"), "h100", 15 * 10**12, days=90)
    >>> p.min_gpus_to_fit, p.gpus_for_deadline, p.best.layout.short(), p.table(5)
    >>> p.frontier_table()  # GPUs, days, GPU-hours, cost, layout: one row per GPU count
    >>> plan_infer(load("llama-3.1-70b"), "h200", 131072, 64, kv_dtype="fp8").to_json()

Training search: every valid layout of TP x PP x DP x CP x EP x ZeRO stage (0-3, and ZeRO-3
hybrid shard) x sequence parallelism x schedule (1F1B, interleaved with 2 or 4 virtual
stages) x micro-batch x recompute, evaluated as numpy arrays by ``train.evaluate`` (the
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

import time
from dataclasses import dataclass, field
from functools import cached_property

from ..model.config import ModelConfig
from ..errors import PlanError, WorkloadError
from ..engine.hardware import Gpu, get_gpu, memory_words
from ..engine.memory import OPTIMIZERS, PRECISIONS, _check
from ..parallel.overheads import Overheads, check_plan_args
from .setting import TrainSetting, shard_groups
from .evaluate import build_tables, evaluate, evaluate_layouts
from ..parallel.layout import (RECOMPUTE, RECOMPUTE_POLICIES, Layout, LayoutError, check_layout,
                               joint_rules)
from ..engine.timing import DeviceProfile
from ..units import divisors, pow2_upto

DAY_S = 86400.0
#: the frontier's GPU counts stop at this power of two unless max_gpus is given
FRONTIER_CAP = 16384
CATEGORIES = ("weights", "gradients", "optimizer", "activations", "inputs", "logits",
              "zero3_buffers", "step", "framework")


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
        counts |= {n for n in pow2_upto(cap) if n > self.min_gpus_to_fit}
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
        from ..inputs import MAX_ROWS, integer
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
        from ..engine.timing import TIME_BAND_COVERAGE, TIME_BAND_RUNS
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
    """Every valid layout as index arrays (see ``train.evaluate.evaluate``).

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
    tps = [t for t in divisors(cfg.n_heads) if t <= 64 and valid(tp=t)]
    pps = [p for p in sorted(set(pow2_upto(128)) | set(divisors(n_blocks)))
           if p <= 128 and valid(pp=p)]
    cps = [c for c in pow2_upto(32) if (c == 1 or seq // c >= 2048) and valid(cp=c)]
    eps = [e for e in pow2_upto(64) if valid(ep=e, dp=e)]
    mbs = [b for b in pow2_upto(16) if global_batch % b == 0]
    dps = divisors(global_batch)
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
    """One evaluation of the layout grid (``train.evaluate.evaluate``, the screened
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
    from ..engine.timing import TIME_RATIO_BAND
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
               global_tokens: int = 0, optimizer_kernel: str | None = None) -> TrainPlan:
    """Search every valid layout for training ``model`` on ``tokens`` tokens.

    ``finetune``: a ``finetune.Finetune`` (LoRA, QLoRA, DoRA, freeze): gradients, optimizer
    states and their ZeRO sharding follow the trainable parameters, the frozen base is kept
    in its format (sharded by ZeRO-3), FLOPs skip the frozen weights' gradients.
    ``optimizer_kernel``: memory.OPTIMIZER_STEPS (None: the stack's, else foreach; a
    fine-tuning recipe's, engine.recipes). ``gpus``: only layouts on exactly this many GPUs.
    ``achieved_tflops``: the hardware
    TFLOP/s each GPU sustains (overrides the roofline step time, as in published estimates).
    ``only``: pin layout fields (``PINNABLE``), e.g. ``{"tp": 8, "recompute": "full"}``.
    ``stack``: a framework profile (txcalc.engine.stacks: its attention kernel, fused kernels and
    overlapped collectives); without one, flash attention, HF's other kernels and
    ``stacks.DEFAULT_OVERLAP``. ``attn_impl`` and ``overlap`` (items of stacks.OVERLAPS, or
    "none") replace the profile's (``attn_impl`` when it is not the default "flash": only
    hf-eager's kernel differs). ``goodput``: the fraction of wall-clock time spent training
    (0 < G <= 1, default timing.GOODPUT): days, GPU-hours and cost are divided by it.
    ``loss``: the LM loss (Workload.loss: full, chunked[:N], fused-linear): what the head and
    loss save and the loss's T x V transient on the last stage (txcalc.engine.lm_loss).
    ``global_tokens``: Longformer's tokens per sequence with global attention
    (``Workload.global_tokens``).
    """
    t0 = time.perf_counter()
    import numpy as np
    from .. import inputs as I
    from ..engine.workload import ATTN_IMPLS
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
    from ..engine.timing import GOODPUT
    goodput = GOODPUT if goodput is None else I.number("goodput", goodput, 0, 1)
    from ..engine.stacks import DEFAULT_OVERLAP, check_overlap, get_stack
    prof_stack = get_stack(stack) if stack is not None else None
    I.choice("attn_impl", attn_impl, ATTN_IMPLS)
    if prof_stack and attn_impl == "flash":
        attn_impl = prof_stack.attn_impl
    overlap = check_overlap(overlap) if overlap is not None else \
        (prof_stack.overlap if prof_stack else DEFAULT_OVERLAP)
    check_plan_args(gpu, gpu_file, profile, overheads)
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
    cfg = I.instance("model", model, ModelConfig, I.CONFIG_HINT)
    from ..engine.lm_loss import check_head
    from ..engine.workload import loss_chunks
    loss_chunks(loss)  # a malformed loss fails here, naming it
    check_head(cfg, loss)
    gpu = get_gpu(gpu, gpu_file)
    _check("precision", precision, PRECISIONS)
    _check("optimizer", optimizer, OPTIMIZERS)
    if finetune is not None:
        from ..engine.finetune import Finetune, check_precision
        I.instance("finetune", finetune, Finetune)
        check_precision(finetune, precision)
        finetune = None if finetune.mode == "full" else finetune
    from ..engine.timing import COMPUTE_DTYPE
    if COMPUTE_DTYPE[precision] == "fp8" and gpu.peak_flops.get("fp8", 0) <= 0:
        raise PlanError(f"precision {precision!r} needs fp8 tensor cores; {gpu.name} has no fp8 "
                        "peak in the catalog (Hopper, Ada and Blackwell GPUs do)")
    seq = seq or default_seq(cfg)
    if cfg.pos_type == "learned" and seq > cfg.max_position:
        raise WorkloadError(f"seq ({seq}) exceeds {cfg.name}'s learned position table "
                            f"(max_position {cfg.max_position})")
    from ..engine.workload import Workload, check_fits
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
                           optimizer_kernel=optimizer_kernel or (
                               prof_stack.optimizer_kernel if prof_stack else "foreach"))
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


#: the single-GPU training memory (exact Python ints) above which the planner's int64 arrays
#: could overflow: a layout's bytes are at most ~2x the whole model's at its micro-batch (the
#: first stage of interleaved 1F1B), so 2^59 keeps an 8x margin below 2^62
INT64_SAFE_BYTES = 2**59


def _check_int64(cfg: ModelConfig, seq: int, micro_batch: int, precision: str,
                 optimizer: str, attn_impl: str) -> None:
    """Refuse a model and sequence so large that a layout's bytes could wrap in int64."""
    from ..engine.memory import TrainingMemory
    from ..engine.workload import Workload
    total = TrainingMemory(cfg, Workload(batch=micro_batch, seq=seq, attn_impl=attn_impl),
                           precision, optimizer).total
    if total > INT64_SAFE_BYTES:
        raise PlanError(f"{cfg.name} at seq {seq:,} and micro-batch {micro_batch} needs "
                        f"{total / 1e18:.3g} EB on one GPU, over the planner's bound of "
                        f"{INT64_SAFE_BYTES / 1e18:.3g} EB (its tables are 64-bit integers)")

