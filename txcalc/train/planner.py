"""Planning: how many GPUs, in which layout, for how long and at what cost.

    >>> from txcalc.train.planner import plan_train, plan_infer
    >>> p = plan_train(load("llama-3.1-405b"), "h100", 15 * 10**12, days=90)
    >>> p.min_gpus_to_fit, p.gpus_for_deadline, p.best.layout.short(), p.table(5)
    >>> p.frontier_table()  # GPUs, days, GPU-hours, cost, layout: one row per GPU count
    >>> plan_infer(load("llama-3.1-70b"), "h200", 131072, 64, kv_dtype="fp8").to_json()

Training search: every valid layout of TP x PP x DP x CP x EP x ZeRO stage (0-3, and ZeRO-3
hybrid shard) x sequence parallelism x schedule (1F1B, interleaved with 2 or 4 virtual
stages) x micro-batch x recompute, evaluated as numpy arrays by ``train.evaluate`` (the
per-op sums are computed once per TP/CP/EP/micro-batch value), and, unless pinned, the global
batch (each layout screened at the largest candidate it takes; a smaller one's days follow
from the step's slope per micro-batch, ``Screen.days_matrix``). The screen's numbers decide
the ranking; the rows reported (``best``, ``table``) are evaluated again over every pipeline
stage. Choices:

    question             | answer
    ---------------------|-------------------------------------------------------------------
    min_gpus_to_fit      | the fewest GPUs of any layout whose fullest stage fits in memory
    gpus_for_deadline    | with ``days``: the fewest GPUs of a fitting layout that trains the
                         |   token budget within the deadline (at its best batch)
    best                 | with ``days``: on gpus_for_deadline GPUs, the smallest global batch
                         |   that meets the deadline, then the fastest layout; without: among
                         |   layouts within 2% of the lowest GPU-hours, the smallest batch that
                         |   stays within, then the fastest
    frontier             | GPUs against days: on each GPU count (fewest that fit, powers of two
                         |   above, best's count) the layout ``fastest_on`` answers (the
                         |   no-deadline rule on that count), keeping only counts faster than
                         |   every smaller one (all of them when layout fields are pinned); any
                         |   count: ``fastest_on([n, ...])``
    warnings             | train.guards: MFU < 25%, bubble > 20% of the step, micro-batches
                         |   < 2 x pp, under one sequence per data-parallel rank

All of these come from one evaluation of the grid (``Screen``), kept on the plan. GPU counts
are whole nodes (``gpus_per_node``, the GPU's unless given) or fewer than one node, unless
``gpus`` pins the count. With a deadline and the batch searched, the screen skips the counts
that could not meet it even at 100% MFU (``_deadline_gpus``), the fewest GPUs that fit come
from the memory-least layouts below them, and the frontier screens those counts on demand.

Defaults: sequence 4096 (the learned position table's length if shorter); global batch
searched from about 4M tokens (2^22 / seq sequences: GPT-3 used 3.2M, Llama 2 4M) up to the
critical batch at the run's compute (``train.batch``: its rule, candidates and sources); a
``global_batch`` given alone is pinned (the search then runs as before the batch search);
attention a fused (flash) kernel.

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
from .setting import TrainSetting, shard_groups, with_batch
from .evaluate import build_tables, evaluate, evaluate_layouts
from ..parallel.layout import RECOMPUTE, Layout
from ..engine.timing import DeviceProfile
from ..units import pow2_upto

DAY_S = 86400.0


def train_days(tokens, batch, seq: int, step_s, goodput: float):
    """Wall-clock days to train ``tokens``: steps of ``batch`` sequences of ``seq`` tokens,
    each ``step_s`` seconds, over the goodput (the share of wall-clock time spent training).
    Numbers or numpy arrays (broadcast)."""
    return tokens / (batch * seq) * step_s / DAY_S / goodput
#: the frontier's GPU counts stop at this power of two unless max_gpus is given
FRONTIER_CAP = 16384
CATEGORIES = ("weights", "gradients", "optimizer", "activations", "inputs", "logits",
              "recompute", "zero3_buffers", "step", "framework")


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
    #: the row's global batch in sequences (the batch search gives each row its own)
    global_batch: int = 0
    #: seconds of the step the pipeline's fill and drain leave idle: (pp - 1) / v micro-batches
    bubble_s: float = 0.0

    @property
    def micro_batches(self) -> int:
        """Micro-batches per pipeline per step: batch / (dp x micro-batch)."""
        return self.global_batch // (self.layout.dp * self.layout.micro_batch)

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
                                           "bubble_fraction", "host_bytes", "global_batch",
                                           "bubble_s")}
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
    #: where the best row's global batch came from: pinned (given), default (about 4M
    #: tokens), searched (a larger candidate: ``train.batch``)
    global_batch_source: str = "pinned"
    #: the batch search's ceiling in sequences (None: the batch was pinned)
    max_global_batch: int | None = None
    #: the search was pinned to layout fields (``only``): the frontier keeps every count
    pinned_layout: bool = False
    #: plausibility warnings on the best row, each naming its fix (``train.guards``)
    warnings: list[str] = field(default_factory=list)

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
        ``best`` (no second search); see ``fastest_on``. Monotonic: a count not faster than
        a smaller one is left out (a run could leave the extra GPUs idle), unless the search
        was pinned to layout fields."""
        found = self.fastest_on(self.frontier_counts())
        out = []
        for n in sorted(found):
            if self.pinned_layout or not out or found[n].days < out[-1].days:
                out.append(found[n])
        return out

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
                "global_batch": s.global_batch, "global_batch_tokens": s.global_batch * s.seq,
                "global_batch_source": self.global_batch_source,
                "max_global_batch": self.max_global_batch, "precision": s.precision,
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
                "warnings": self.warnings,
                "finetune": s.finetune.describe() if s.finetune else "full", "loss": s.loss}


from .grid import PINNABLE, SEARCH_CP_TOKENS, SEARCH_MB_TOKENS, _layout_at, layout_grid  # noqa: F401


def _ranked(cand, day_arr, hours, n, deadline: bool, simpler=None):
    """Screen indices ``cand`` in the order a plan reports them: with a deadline, fewest GPUs
    then fastest; without, the layouts within 2% of the lowest GPU-hours fastest first, then
    the rest by GPU-hours. Ties go to the simpler layout: ``simpler`` ranks each index (the
    ZeRO stage, hybrid shard after it), so a dp1 run that ZeRO cannot shard gets z0, not z3."""
    import numpy as np
    tie = np.zeros(len(day_arr), dtype=np.int64) if simpler is None else simpler
    if deadline:
        return cand[np.lexsort((tie[cand], day_arr[cand], n[cand]))]
    keep = hours[cand] <= hours[cand].min() * HOURS_TOLERANCE
    good, rest = cand[keep], cand[~keep]  # cand ascending: setdiff1d's order, without a sort
    return np.concatenate([good[np.lexsort((tie[good], day_arr[good]))],
                           rest[np.lexsort((tie[rest], hours[rest]))]])


def _simpler(g: dict):
    """Tie-break rank of each layout of a grid: ZeRO stage, hybrid shard counted after it."""
    return g["zero"].astype("int64") * 2 + g["hybrid"].astype("int64")


def _distinct_layouts(g: dict, order, limit: int, batches=None) -> list[tuple[Layout, int]]:
    """The first ``limit`` distinct (layout, global batch) pairs of the screen indices
    ``order`` (``batches``: the batch of each, aligned with ``order``; None: 0 for all)."""
    chosen, seen = [], set()
    for j, i in enumerate(order):
        pair = (_layout_at(g, int(i)), 0 if batches is None else int(batches[j]))
        if pair not in seen:
            seen.add(pair)
            chosen.append(pair)
        if len(chosen) >= limit:
            break
    return chosen


#: layouts of the screen's ranking evaluated over every stage per reported row: a layout
#: whose fullest stage (screened on first, second, last, heaviest) turns out not to fit is
#: replaced by the next
CANDIDATES_PER_ROW = 3
#: the no-deadline rule's tolerance: layouts within 2% of the lowest GPU-hours
HOURS_TOLERANCE = 1.02


@dataclass
class Screen:
    """One evaluation of the layout grid (``train.evaluate.evaluate``, the screened
    stages), kept so that every question of a plan (fewest GPUs, the deadline, the frontier)
    is answered from it without searching again. With the batch searched, each layout was
    evaluated at the largest candidate batch it takes (``g["gb"]``); its days at a smaller one
    follow from the step's slope per micro-batch (``train.batch``'s module doc)."""

    setting: TrainSetting
    g: dict  #: the layouts, as index arrays (``layout_grid``)
    n: object  #: GPUs of each layout
    fits: object  #: the screened fullest stage fits in the GPU's memory
    day_arr: object  #: days to train the token budget (at the largest batch, searched)
    hours: object  #: GPU-hours
    tokens: int = 0
    #: the candidate global batches (one: the batch is pinned)
    batches: tuple = ()
    step: object = None  #: step seconds at g["gb"] (the batch searched)
    slope: object = None  #: step seconds one more micro-batch adds
    total_bytes: object = None  #: the screened fullest stage's bytes per GPU
    #: the fewest GPUs screened (a deadline's floor); ``more(counts)`` screens fewer
    floor: int = 1
    more: object = None

    @property
    def searched(self) -> bool:
        return "gb" in self.g

    def days_matrix(self, idx):
        """[layout, candidate batch] days of the layouts ``idx`` at each candidate batch (inf
        where a batch does not split into the layout's micro-batches); at the largest it
        takes, exactly ``day_arr``."""
        import numpy as np
        from .batch import valid_batches
        g, s = self.g, self.setting
        dp, mb, pp, v = (g[k][idx] for k in ("dp", "mb", "pp", "v"))
        b = np.asarray(self.batches, dtype=np.int64)[None, :]
        per = (dp * mb)[:, None]
        gb = g["gb"][idx][:, None]
        step = self.step[idx][:, None] + (b // per - gb // per) * self.slope[idx][:, None]
        days = train_days(self.tokens, b, s.seq, step, s.goodput)
        days = np.where(b == gb, self.day_arr[idx][:, None], days)
        return np.where(valid_batches(self.batches, dp, mb, pp, v), days, np.inf)

    def choose(self, cand, days_limit: float | None):
        """The screen indices ``cand`` in the order a plan reports them, with the global
        batch of each: with a deadline, fewest GPUs, then the smallest batch that meets it,
        then fastest; without, the layouts within 2% of the lowest GPU-hours (each at the
        smallest batch that stays within), smallest batch then fastest first, then the rest
        by GPU-hours (at their largest batch). A pinned batch: ``_ranked``."""
        import numpy as np
        tie = _simpler(self.g)
        if not self.searched:
            order = _ranked(cand, self.day_arr, self.hours, self.n, days_limit is not None,
                            tie)
            return order, None
        batches = np.asarray(self.batches, dtype=np.int64)

        def smallest(idx, bound, per_day):  # the first batch whose value is within bound
            value = self.days_matrix(idx) * per_day[:, None]
            # the largest batch a layout takes is within bound: it is how idx was chosen
            k = ((value <= bound) | (batches[None, :] == self.g["gb"][idx][:, None])).argmax(1)
            return batches[k], value[np.arange(len(idx)), k] / per_day
        if days_limit is not None:
            b, d = smallest(cand, days_limit, np.ones(len(cand)))
            o = np.lexsort((tie[cand], d, b, self.n[cand]))
            return cand[o], b[o]
        lim = self.hours[cand].min() * HOURS_TOLERANCE
        good = cand[self.hours[cand] <= lim]
        b, d = smallest(good, lim, 24.0 * self.n[good])
        o = np.lexsort((tie[good], d, b))
        rest = cand[self.hours[cand] > lim]  # cand is ascending: setdiff1d's order
        rest = rest[np.lexsort((tie[rest], self.hours[rest]))]
        return (np.concatenate([good[o], rest]),
                np.concatenate([b[o], self.g["gb"][rest]]))

    def fastest_on(self, counts, tokens: int, price: float | None) -> dict[int, TrainRow]:
        """For each n of ``counts``: the first layout on exactly n GPUs, in the no-deadline
        ranking of ``choose``, that fits once every stage is evaluated (all candidates of all
        counts are evaluated in one ``rows_for``)."""
        import numpy as np
        counts = sorted(set(int(c) for c in counts))
        out: dict[int, TrainRow] = {}
        below = [c for c in counts if c < self.floor]
        if below and self.more is not None:  # counts the deadline's screen left out
            sub = self.more(below)
            if sub is not None:
                out.update(sub.fastest_on(below, tokens, price))
        picks: dict[int, list] = {}
        for c in (c for c in counts if c >= self.floor):
            cand = np.nonzero(self.fits & (self.n == c))[0]
            if len(cand):
                order, batch = self.choose(cand, None)
                picks[c] = _distinct_layouts(self.g, order, CANDIDATES_PER_ROW, batch)
        flat = [pair for pairs in picks.values() for pair in pairs]
        rows = iter(_rows(self.setting, flat, tokens, price) if flat else [])
        for c, pairs in picks.items():
            fitting = [r for r in (next(rows) for _ in pairs)
                       if r.total_bytes <= self.setting.gpu.usable_bytes]
            if fitting:
                out[c] = fitting[0]
        return dict(sorted(out.items()))


def _rows(setting: TrainSetting, pairs, tokens: int, price: float | None) -> list[TrainRow]:
    """``rows_for`` of (layout, batch) pairs (batch 0: the setting's)."""
    layouts = [lay for lay, _ in pairs]
    batches = [b or setting.global_batch for _, b in pairs]
    pinned = all(b == 0 for _, b in pairs)
    return rows_for(setting, layouts, tokens, price, None if pinned else batches)


def rows_for(setting: TrainSetting, layouts: list[Layout], tokens: int,
             price: float | None, batches: list[int] | None = None) -> list[TrainRow]:
    """Exact evaluation (every stage) of chosen layouts, each at its global batch of
    ``batches`` (default: the setting's)."""
    from ..engine.timing import TIME_RATIO_BAND
    r = evaluate_layouts(setting, layouts, batches=batches)
    # a step time from the user's achieved throughput carries no calibration band
    band = (1.0, 1.0) if setting.achieved_flops_per_gpu else TIME_RATIO_BAND
    out = []
    for i, lay in enumerate(layouts):
        batch = setting.global_batch if batches is None else int(batches[i])
        step = float(r["step_time_s"][i])
        days = train_days(tokens, batch, setting.seq, step, setting.goodput)
        hours = days * 24 * lay.gpus
        out.append(TrainRow(layout=lay, gpus=lay.gpus,
                            memory={c: int(r[f"{c}_bytes"][i]) for c in CATEGORIES},
                            total_bytes=int(r["total_bytes"][i]), step_time_s=step,
                            mfu=float(r["mfu"][i]), hfu=float(r["hfu"][i]),
                            tokens_per_s=float(r["tokens_per_s"][i]), days=days,
                            gpu_hours=hours, cost=None if price is None else hours * price,
                            bubble_fraction=float(r["bubble_fraction"][i]),
                            host_bytes=int(r["host_bytes"][i]),
                            model_flops_step=int(r["model_flops_seq"]) * batch,
                            hardware_flops_step=int(r["hardware_flops_seq"][i]) * batch,
                            band=band, global_batch=batch,
                            bubble_s=float(r["bubble_s"][i]),
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
               global_tokens: int = 0, max_global_batch: int | None = None,
               max_global_batch_tokens: int | None = None,
               gpus_per_node: int | None = None,
               optimizer_kernel: str | None = None, offload_optimizer: bool = False) -> TrainPlan:
    """Search every valid layout for training ``model`` on ``tokens`` tokens.

    The global batch (sequences): ``global_batch`` alone pins it; otherwise it is searched
    from ``global_batch`` (default about 4M tokens) up to ``max_global_batch`` sequences (or
    ``max_global_batch_tokens``, in whole sequences; default the critical batch at the run's
    compute, ``train.batch``), over 2^k and 3 x 2^k sequences; the rows carry their batch and
    the plan's setting the best row's. GPU counts are whole nodes of ``gpus_per_node``
    (default the GPU's; it also sets the NVLink domain), or below one node, unless ``gpus``
    pins the count.

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
    (``Workload.global_tokens``). ``offload_optimizer``: TrainSetting.offload_optimizer.
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
    max_global_batch = I.integer("max_global_batch", max_global_batch, 1, I.MAX_BATCH,
                                 none=True)
    max_global_batch_tokens = I.integer("max_global_batch_tokens", max_global_batch_tokens, 1,
                                        I.MAX_TOKENS, none=True)
    if max_global_batch is not None and max_global_batch_tokens is not None:
        raise I.InputError(f"max_global_batch ({max_global_batch}) and "
                           f"max_global_batch_tokens ({max_global_batch_tokens}) exclude each "
                           "other: give the ceiling once")
    gpus_per_node = I.integer("gpus_per_node", gpus_per_node, 1, I.MAX_GPUS, none=True)
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
            I.boolean("only['offload_checkpoints']", value)
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
    if gpus_per_node is not None and gpus_per_node != gpu.gpus_per_node:
        import dataclasses
        gpu = dataclasses.replace(gpu, gpus_per_node=gpus_per_node)
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
    from .batch import candidate_batches, default_global_batch
    given_batch = global_batch is not None
    searched = not given_batch or max_global_batch is not None \
        or max_global_batch_tokens is not None
    start = global_batch or default_global_batch(seq)
    global_batch = start
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
                               prof_stack.optimizer_kernel if prof_stack else "foreach"),
                           offload_optimizer=I.boolean("offload_optimizer", offload_optimizer))
    setting.ops  # refuses unknown adapter targets and ranks above a target's width now
    ceiling = start
    if searched:
        from .batch import default_max_global_batch
        if max_global_batch_tokens is not None:
            max_global_batch = max(1, max_global_batch_tokens // seq)
        ceiling = max_global_batch or default_max_global_batch(
            sum(op.params_active for op in setting.ops), tokens, seq)
        if ceiling < start and given_batch:
            raise PlanError(f"max_global_batch ({ceiling:,} sequences of {seq:,} tokens) is "
                            f"below the global batch the search starts from ({start:,})")
        if ceiling < start:  # a ceiling under the default: the ceiling alone
            start = global_batch = ceiling
            setting = with_batch(setting, start)
    batches = candidate_batches(start, ceiling)
    # with a deadline, layouts on fewer GPUs than even 100% MFU would need cannot meet it: the
    # screen starts there, and the fewest GPUs that fit come from the memory-least grid below
    need = (_deadline_gpus(setting, tokens, days) if DEADLINE_FLOOR and searched
            and days is not None and gpus is None and not only else 0.0)
    floor = max(1, int(0.9 * need))  # less 10% for rounding
    if floor > max_gpus:
        raise PlanError(f"no layout of {cfg.name} on at most {max_gpus:,} {gpu.name} GPUs "
                        f"trains {tokens:,} tokens within {days:g} days: even at 100% MFU "
                        f"that takes {need:,.0f} GPUs")
    screen = low = None
    if 1 < floor <= max_gpus:
        screen = _screen(setting, tokens, batches, max_gpus, None, only, min_gpus=floor)
        low = _screen(setting, tokens, batches, floor - 1, None, only, memory_min=True)
        if screen is None or not (screen.fits & (screen.day_arr <= days)).any():
            screen = low = None  # the whole grid answers, and words the refusal
    if screen is None:
        floor = 1
        screen = _screen(setting, tokens, batches, max_gpus, gpus, only)
    if screen is None:  # naming the nearest batches and GPU counts that would split
        from .grid import no_layout_error
        raise no_layout_error(cfg, gpu, seq, start, f"{start}" if len(batches) == 1
                              else f"{start}-{ceiling}", max_gpus, gpus, only)
    if floor > 1:
        screen.floor, screen.more = floor, lambda counts: _screen(
            setting, tokens, batches, max_gpus, None, only, counts=counts)
    g, n, fits, day_arr = screen.g, screen.n, screen.fits, screen.day_arr
    if not fits.any():
        from .fit import ways_to_fit  # fit's reckoning of what would (ZeRO-3 over them)
        ways = ways_to_fit(setting, gpus or max_gpus) if (gpus or max_gpus) > 1 else []
        raise PlanError(
            f"{cfg.name} does not fit on {gpu.name} ({memory_words(gpu)}) in any "
            f"layout with " + (f"exactly {gpus}" if gpus else f"at most {max_gpus}")
            + f" GPUs: the smallest per-GPU need is {screen.total_bytes.min() / 2**30:.1f} GiB"
            + ("; would fit (ZeRO-3, full recompute, micro-batch 1): " + ", or ".join(ways)
               if ways else ""))
    min_fit = int(n[fits].min())
    if low is not None and low.fits.any():
        min_fit = min(min_fit, int(low.n[low.fits].min()))
    deadline_n = None
    notes = []
    if days is not None:
        meet = fits & (day_arr <= days)
        if not meet.any():
            raise PlanError(f"no layout of {cfg.name} on " + (f"{gpus}" if gpus else
                            f"at most {max_gpus}") + f" {gpu.name} GPUs trains {tokens:,} "
                            f"tokens within {days:g} days (fastest: "
                            f"{day_arr[fits].min():,.1f} days"
                            + (f", at global batch up to {ceiling:,}" if searched else "")
                            + ")")
        deadline_n = int(n[meet].min())
        order, batch_of = screen.choose(np.nonzero(meet)[0], days)
    else:
        order, batch_of = screen.choose(np.nonzero(fits)[0], None)
    chosen = _distinct_layouts(g, order, CANDIDATES_PER_ROW * n_rows, batch_of)
    # the screen saw three stages; every stage is evaluated now, and a layout whose fullest
    # (or slowest) stage turns out not to fit (or to miss the deadline) is dropped
    rows = [r for r in _rows(setting, chosen, tokens, price_per_gpu_hour)
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
                     "lowest GPU-hours" + (" at the smallest global batch that stays within"
                                           if len(batches) > 1 else "")
                     + "; --days D gives the GPUs to finish in D days")
    if len(batches) > 1:
        notes.append(f"global batch searched over {len(batches)} sizes from {start:,} to "
                     f"{ceiling:,} sequences (2^k and 3 x 2^k): "
                     + ("the smallest that meets the deadline on the fewest GPUs"
                        if days is not None else "the smallest within the GPU-hours rule"))
    from .guards import plan_warnings
    best_batch = rows[0].global_batch
    source = ("pinned" if given_batch and best_batch == start else "default"
              if not given_batch and best_batch == default_global_batch(seq) else "searched")
    evaluated = len(g["tp"]) + (len(low.g["tp"]) if low is not None else 0)
    return TrainPlan(with_batch(setting, best_batch), tokens, days, price_per_gpu_hour,
                     min_fit, deadline_n, rows, evaluated, time.perf_counter() - t0,
                     notes, max_gpus_asked, screen, global_batch_source=source,
                     max_global_batch=ceiling if searched else None, pinned_layout=bool(only),
                     warnings=plan_warnings(rows[0], seq, "--max-global-batch" if searched
                                            else "--global-batch"))


#: screen only the GPU counts a deadline allows at 100% MFU (``_deadline_gpus``); off: the
#: whole grid (the tests compare both)
DEADLINE_FLOOR = True


def _deadline_gpus(s: TrainSetting, tokens: int, days: float) -> float:
    """Fewer GPUs than this cannot train ``tokens`` within ``days``: model FLOPs / (peak x
    days x goodput), MFU at most 1 (a step is never shorter than its FLOPs at the peak: the
    roofline's efficiencies are at most 1, a pipeline's slowest stage at least the mean)."""
    from ..engine.accounting import FlopCounts
    per_seq = FlopCounts(s.cfg, s.work(1), s.ops).model
    peak = max(s.gpu.peak(s.dtype), s.prof.peak_flops.get(s.dtype, 0.0),
               s.achieved_flops_per_gpu or 0.0)
    return per_seq * (tokens / s.seq) / (peak * days * DAY_S * s.goodput)


def _screen(s: TrainSetting, tokens: int, batches: list[int], max_gpus: int,
            gpus: int | None, only: dict | None, **grid) -> Screen | None:
    """Evaluate the grid of ``layout_grid`` (its ``grid`` keywords: min_gpus, counts,
    memory_min) on its screened stages; None when the grid is empty."""
    import numpy as np
    cfg, gpu = s.cfg, s.gpu
    g, axes = layout_grid(cfg, gpu, s.seq, batches if len(batches) > 1 else batches[0],
                          max_gpus, gpus, only, None if gpus else gpu.gpus_per_node, **grid)
    _check_int64(cfg, s.seq, max(axes[3], default=1), s.precision, s.optimizer, s.attn_impl)
    if len(g["tp"]) == 0:
        return None
    shard, shard_e = shard_groups(g, gpu)
    tables = build_tables(s, *axes, np.unique(np.concatenate([shard, shard_e])))
    r = evaluate(s, tables, g, detail=False)
    # The capacity is CUDA's total (Gpu.usable_bytes, as for memory, fit, serving and
    # report: hardware.gpu_memory), not the datasheet's: the CUDA context, charged here as
    # Overheads.cuda_context_bytes, comes out of CUDA's total.
    fits = r["total_bytes"] <= gpu.usable_bytes
    day_arr = train_days(tokens, g["gb"] if "gb" in g else s.global_batch, s.seq,
                         r["step_time_s"], s.goodput)
    hours = day_arr * 24 * r["gpus"]
    return Screen(s, g, r["gpus"], fits, day_arr, hours, tokens, tuple(batches),
                  r["step_time_s"], r["step_slope_s"], r["total_bytes"])


#: the single-GPU training memory (exact Python ints) above which the planner's int64 arrays
#: could overflow: a layout's bytes are at most ~2x the whole model's at its micro-batch (the
#: first stage of interleaved 1F1B), so 2^59 keeps an 8x margin below 2^62
INT64_SAFE_BYTES = 2**59


def _check_int64(cfg: ModelConfig, seq: int, micro_batch: int, precision: str,
                 optimizer: str, attn_impl: str) -> None:
    """Refuse a model and sequence so large that a layout's bytes could wrap in int64."""
    from ..engine.memory import TrainingMemory
    from ..engine.workload import Workload
    total = TrainingMemory(cfg, Workload(batch=micro_batch, seq=seq, attn_impl=attn_impl,
                                         text_only=True), precision, optimizer).total
    if total > INT64_SAFE_BYTES:
        raise PlanError(f"{cfg.name} at seq {seq:,} and micro-batch {micro_batch} needs "
                        f"{total / 1e18:.3g} EB on one GPU, over the planner's bound of "
                        f"{INT64_SAFE_BYTES / 1e18:.3g} EB (its tables are 64-bit integers)")

