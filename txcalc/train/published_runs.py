"""Published measured training runs, the planner's predictions for them, and the fit of the
time model's efficiencies (txcalc.engine.timing) to them.

The runs live in ``txcalc/data/training_runs.json``: each has its source, the exact table row
(``quote``), the setup (model, GPU, TP/PP/DP/CP, sequence, global batch, recompute,
precision; ``schedule`` and ``virtual`` stages where not 1F1B), what had to be assumed where the source is silent, the measured figure and
``split``: ``fit`` (the efficiencies are fitted on these) or ``test`` (never fitted: its
ratios are the error band ``timing.TIME_RATIO_BAND``).

    measured kind          | step time of the run (N GPUs, B sequences of S tokens)
    -----------------------|----------------------------------------------------------------
    megatron_2021_tflops   | 96 B S l h^2 (1 + S/(6h) + V/(16 l h)) / (N X): Narayanan et
                           |   al. 2021, eq. (3), the FLOPs their achieved X counts
    megatron_core_tflops   | Megatron-LM's num_floating_point_operations (training.py at the
                           |   quoted commit): 12 B S l h^2 ((1 + g/a + S/h) q/h + f/h x 3/2
                           |   if SwiGLU + V/(2 l h)) / (N X)
    palm_tflops_per_gpu    | B S (6 P + 12 l h S) / (N X): PaLM's model FLOPs per token
                           |   (Chowdhery et al. 2022, Appendix B: 6N + 12LHQT, H Q = the
                           |   attention width, no causal halving; P all parameters)
    tokens_per_s_per_gpu   | B S / (N x tokens/s per GPU)
    mfu                    | txcalc's model FLOPs per step / (N x dense peak x MFU)
    memory_only            | none (only the peak memory is compared)

A measured peak (``peak_gib``, GiB) names the allocator statistic it is (``peak_stat``,
PEAK_STATS): ``allocated`` (``torch.cuda.max_memory_allocated``: the bytes of live tensors,
what txcalc predicts) or ``reserved`` (``max_memory_reserved``: allocated plus the caching
allocator's cached, fragmented and rounded-up segments). No published rule gives the
reserved-allocated gap (it depends on the allocation sequence, ``expandable_segments`` and
fragmentation), so reserved peaks are shown with their error but stay out of the memory goal
(``Row.memory_error_counts``). The prediction a peak is compared with is the tensors' bytes
(``predict``'s ``allocated_bytes``: no framework allowance) of the pipeline stage whose rank
logged it (``setup.measured_stage``, MEASURED_STAGES: the largest over stages by default).
Memory is never fitted: every memory row is a test row. ``setup.dropout`` (default false)
trains with the model's dropout probabilities on (``TrainSetting.dropout``: the masks and the
dropped tensors are saved), as a framework whose defaults enable dropout does.

A run's ``flags`` (``setup.flags``) name setup features beyond the Layout in the planner's
own words (``FLAGS``: a kernel stack, communication overlap, partial recompute);
``apply_flags`` turns them into TrainSetting and Layout fields as ``plan_train`` does. A flag
outside FLAGS makes the run pending (kept in the table, left out of the statistics), and so
does a run's own ``pending`` note; ``optional_flags`` outside FLAGS are listed as not applied.
Predictions are benchmark throughput: TrainSetting.goodput stays 1 (timing.GOODPUT is for the
planner's wall-clock days).
"""

from __future__ import annotations

import dataclasses
import json
import math
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path

from ..errors import TxcalcError

SPLITS = ("fit", "test")
#: the allocator statistic a measured peak is (module doc); only "allocated" is compared in
#: the memory goal
PEAK_STATS = ("allocated", "reserved")
MEASURED_KINDS = ("megatron_2021_tflops", "megatron_core_tflops", "palm_tflops_per_gpu",
                  "tokens_per_s_per_gpu", "mfu", "memory_only")
GiB = 2**30


class RunsError(TxcalcError):
    """A training-runs file that cannot be read or holds an impossible run."""


@dataclass(frozen=True)
class Run:
    """One published run (see the module doc)."""

    id: str
    split: str
    source: str
    quote: str
    model: dict = field(hash=False)
    setup: dict = field(hash=False)
    measured: dict = field(hash=False)
    assumed: str = ""
    pending: str = ""
    context_quote: str = ""  #: what the source says around the quoted row (its setup)
    optional_flags: tuple[str, ...] = ()

    @property
    def gpu(self) -> str:
        return self.setup["gpu"]

    def config(self):
        from ..model.config import ModelConfig
        from ..model.presets import get_preset
        if "preset" in self.model:  # the runs file names presets only (no paths, no Hub ids)
            return get_preset(self.model["preset"])
        return ModelConfig(**self.model)


def runs_path() -> Path:
    return Path(str(resources.files("txcalc") / "data" / "training_runs.json"))


def load_runs(path: str | Path | None = None) -> list[Run]:
    """The runs of ``path`` (default: the package's training_runs.json), checked."""
    from ..safeio import parse_json, read_text
    where = str(path or runs_path())
    doc = parse_json(read_text(path or runs_path(), RunsError), f"cannot read {where}", RunsError)
    try:
        runs = [Run(id=str(r["id"]), split=r["split"], source=str(r["source"]),
                    quote=str(r["quote"]), model=dict(r["model"]), setup=dict(r["setup"]),
                    measured=dict(r["measured"]), assumed=str(r.get("assumed", "")),
                    pending=str(r.get("pending", "")),
                    context_quote=str(r.get("context_quote", "")),
                    optional_flags=tuple(r.get("optional_flags", ())))
                for r in doc["runs"]]
    except (KeyError, TypeError, ValueError, AttributeError) as e:
        raise RunsError(f"cannot read {where}: {e.__class__.__name__} {e}") from None
    bad = [f"{r.id}: split {r.split!r}" for r in runs if r.split not in SPLITS]
    bad += [f"{r.id}: measured kind {r.measured.get('kind')!r}" for r in runs
            if r.measured.get("kind") not in MEASURED_KINDS]
    bad += [f"{r.id}: peak_gib without a peak_stat of {PEAK_STATS} "
            f"(got {r.measured.get('peak_stat')!r})" for r in runs
            if "peak_gib" in r.measured and r.measured.get("peak_stat") not in PEAK_STATS]
    bad += [f"{r.id}: measured_stage {r.setup.get('measured_stage')!r} (one of "
            f"{', '.join(MEASURED_STAGES)})" for r in runs
            if r.setup.get("measured_stage", "max") not in MEASURED_STAGES]
    bad += [f"{r.id}: dropout {r.setup['dropout']!r} (true or false)" for r in runs
            if not isinstance(r.setup.get("dropout", False), bool)]
    ids = [r.id for r in runs]
    bad += [f"{i}: given twice" for i in sorted({i for i in ids if ids.count(i) > 1})]
    if bad:
        raise RunsError(f"{where}: " + "; ".join(bad))
    return runs


# --- flags --------------------------------------------------------------------------------------
#: the setup features a run's ``flags`` may name, in the planner's own words (plan_train's
#: ``stack`` and ``overlap``, the Layout's ``recompute_layers`` and ``offload_checkpoints``):
#:
#:     flag                | value                  | becomes
#:     --------------------|------------------------|------------------------------------------
#:     stack               | a txcalc.engine.stacks name   | TrainSetting.fused / softmax_fp32 / overlap
#:                         |                        |   and the attention kernel, as plan_train
#:     overlap             | items of OVERLAPS or   | TrainSetting.overlap (replaces the stack's)
#:                         |   "none"               |
#:     recompute_layers    | N > 0, or "fewest that | Layout.recompute_layers (Megatron's block
#:                         |   fit" (the smallest N |   method: the first N blocks of each stage)
#:                         |   whose peak fits)     |
#:     recompute_every     | N: every N-th block    | torchtitan's layer checkpointing, exactly:
#:                         |   fully recomputed     |   each rank wraps every N-th of its own
#:                         |                        |   blocks (a per-process counter,
#:                         |                        |   parallelize_llama.py at 3faaa1a0d: "_count
#:                         |                        |   % ac_freq == 0"), so each of the pp stages
#:                         |                        |   of blocks / pp recomputes (blocks / pp) // N
#:                         |                        |   of them: Layout.recompute_layers, which
#:                         |                        |   counts per stage (which blocks does not
#:                         |                        |   change the sums); pending when the stages
#:                         |                        |   are uneven (blocks % pp != 0)
#:     offload_checkpoints | bool                   | Layout.offload_checkpoints
FLAGS = ("stack", "overlap", "recompute_layers", "recompute_every", "offload_checkpoints")
FEWEST_THAT_FIT = "fewest that fit"


def apply_flags(run: Run) -> tuple[dict, dict, list[str], list[str]]:
    """(TrainSetting extras, Layout extras, flags applied, required flags not supported).

    The Layout extras may hold ``recompute_layers`` = FEWEST_THAT_FIT, resolved by
    ``setting_and_layout``."""
    from ..engine.stacks import check_overlap, get_stack
    s = run.setup
    setting, layout, applied, missing = {}, {}, [], []
    flags = s.get("flags", {})
    for name, value in flags.items():
        if name not in FLAGS:
            if name not in run.optional_flags:
                missing.append(name)
            continue
        if name == "stack":
            st = get_stack(value)
            setting.update(fused=st.fused, softmax_fp32=st.softmax_fp32, overlap=st.overlap,
                           keeps=st.keeps, loss_kernel=st.loss_kernel,
                           optimizer_kernel=st.optimizer_kernel)
            if s["attn_impl"] == "flash":
                setting["attn_impl"] = st.attn_impl
        elif name == "overlap":
            pass  # below: it replaces the stack's
        elif name == "recompute_every":
            n_blocks = sum(depth for _, depth in run.config().stacks)
            if n_blocks % s["pp"]:
                missing.append(f"{name} with uneven stages ({n_blocks} blocks, pp {s['pp']})")
                continue
            count = n_blocks // s["pp"] // int(value)
            # no block of a stage is an N-th one: nothing recomputes (recompute_layers 0
            # would mean every block)
            if count:
                layout["recompute_layers"] = count
            else:
                layout["recompute"] = "none"
        else:
            layout[name] = value
        applied.append(name)
    if "overlap" in flags:
        setting["overlap"] = check_overlap(flags["overlap"])
    return setting, layout, applied, missing


def pending_reason(run: Run) -> str:
    """Why the run is left out of the statistics ("" when it is not): a required flag the
    library lacks, or the run's own note while any of its flags is missing."""
    missing = apply_flags(run)[3]
    if missing:
        return run.pending or f"pending: needs {', '.join(missing)}"
    return run.pending


# --- predictions --------------------------------------------------------------------------------
def setting_and_layout(run: Run, profile=None, cache: dict | None = None):
    """The planner's TrainSetting and Layout of the run (flags applied; a FEWEST_THAT_FIT
    recompute_layers resolved to the smallest N whose every stage fits the GPU, else every
    block). ``cache`` (run id -> setting on the catalog profile, layout): a fit's many
    profiles reuse the run's ops and per-group costs (``setting.with_profile``); neither the
    layout nor those costs depend on the profile."""
    if cache is not None:
        from .setting import with_profile
        if run.id not in cache:
            cache[run.id] = setting_and_layout(run)
            from .evaluate import evaluate_layouts
            evaluate_layouts(*cache[run.id][:1], cache[run.id][1:])  # fills its group_memo
        setting, layout = cache[run.id]
        return with_profile(setting, profile), layout
    from ..engine.hardware import get_gpu
    from .setting import TrainSetting
    from .evaluate import evaluate_layouts
    from ..parallel.layout import Layout
    s = run.setup
    extra_s, extra_l, _, _ = apply_flags(run)
    kw = dict(attn_impl=s["attn_impl"], **extra_s) if "attn_impl" not in extra_s else extra_s
    setting = TrainSetting(run.config(), get_gpu(s["gpu"]), s["seq"], s["global_batch"],
                           s["precision"], "adamw", profile=profile,
                           dropout=s.get("dropout", False), **kw)
    base = dict(tp=s["tp"], pp=s["pp"], dp=s["dp"], cp=s.get("cp", 1), zero=s["zero"],
                sp=s["sp"], micro_batch=s["micro_batch"], recompute=s["recompute"],
                hybrid_shard=s.get("hybrid_shard", False),
                schedule=s.get("schedule", "1f1b"), virtual=s.get("virtual", 1))
    if extra_l.get("recompute_layers") == FEWEST_THAT_FIT:
        per_stage = -(-setting.n_blocks // s["pp"])
        tries = [Layout(**{**base, **extra_l, "recompute_layers": n})
                 for n in range(1, per_stage)]
        r = evaluate_layouts(setting, tries) if tries else None
        fits = [lay for i, lay in enumerate(tries)
                if int(r["total_bytes"][i]) <= setting.gpu.usable_bytes]
        extra_l = dict(extra_l, recompute_layers=fits[0].recompute_layers if fits else 0)
    layout = Layout(**{**base, **extra_l})
    return setting, layout


#: the pipeline stage whose memory a run's measured peak is (``setup.measured_stage``): the
#: planner's peak is the largest over stages ("max", the default); a peak logged by one rank
#: is that rank's stage (Megatron-LM logs memory from the last rank, nanotron from rank 0)
MEASURED_STAGES = {"max": None, "first": lambda pp: [0], "last": lambda pp: [pp - 1]}


def predict(run: Run, profile=None, cache: dict | None = None) -> dict:
    """The planner's step time, tokens/s per GPU, MFU and peak bytes per GPU for the run.

    ``peak_bytes`` is the planner's per-GPU total (what it checks against the GPU's usable
    memory): the tensors plus its framework allowance (``parallel.overheads.Overheads``: NCCL
    and bucket buffers, the caching allocator's fragmentation slack). ``allocated_bytes`` is
    the tensors alone, what ``torch.cuda.max_memory_allocated`` counts: NCCL allocates its
    buffers outside PyTorch's allocator and fragmentation is reserved, not allocated bytes, so
    a measured peak is compared with this one (``Row.memory_error``)."""
    from .evaluate import evaluate_layouts
    setting, layout = setting_and_layout(run, profile, cache)
    r = evaluate_layouts(setting, [layout])
    step = float(r["step_time_s"][0])
    total = int(r["total_bytes"][0])
    stage = MEASURED_STAGES[run.setup.get("measured_stage", "max")]
    if stage is not None:  # the memory of the pipeline stage whose rank logged the peak
        m = evaluate_layouts(setting, [layout], stages=stage)
        total = int(m["total_bytes"][0])
        r = dict(r, framework_bytes=m["framework_bytes"])
    return {"step_time_s": step, "tokens_per_s_per_gpu": float(r["tokens_per_s"][0]) / layout.gpus,
            "mfu": float(r["mfu"][0]), "peak_bytes": total,
            "allocated_bytes": total - int(r["framework_bytes"][0]),
            "model_flops_step": float(r["model_flops_step"])}


def measured_step_time_s(run: Run, cfg=None, model_flops_step: float | None = None) -> float | None:
    """The run's measured step time (module doc), None for a memory-only run."""
    m, s = run.measured, run.setup
    n, b, seq = s["gpus"], s["global_batch"], s["seq"]
    kind = m["kind"]
    if kind == "memory_only":
        return None
    if kind == "tokens_per_s_per_gpu":
        return b * seq / (n * m["tokens_per_s_per_gpu"])
    cfg = cfg or run.config()
    if kind == "mfu":
        from ..engine.hardware import get_gpu
        from ..engine.timing import COMPUTE_DTYPE
        peak = get_gpu(s["gpu"]).peak(COMPUTE_DTYPE[s["precision"]])
        return model_flops_step / (n * peak * m["mfu"])
    l, h, V = cfg.n_layers, cfg.d_model, cfg.vocab_size
    if kind == "palm_tflops_per_gpu":
        from ..engine.accounting import count_params
        flops = b * seq * (6 * count_params(cfg).total + 12 * l * cfg.n_heads * cfg.head_dim * seq)
    elif kind == "megatron_2021_tflops":
        flops = 96 * b * seq * l * h * h * (1 + seq / (6 * h) + V / (16 * l * h))
    else:  # megatron_core_tflops
        a, g = cfg.n_heads, cfg.n_kv_heads
        q = cfg.head_dim * a / h
        gated = 1.5 if cfg.activation in ("swiglu", "geglu") else 1.0
        flops = 12 * b * seq * l * h * h * ((1 + g / a + seq / h) * q + cfg.d_ff / h * gated
                                            + V / (2 * l * h))
    return flops / (n * m["tflops_per_gpu"] * 1e12)


def measured_peak_bytes(run: Run) -> int | None:
    gib = run.measured.get("peak_gib")
    return None if gib is None else int(gib * GiB)


@dataclass
class Row:
    """A run's prediction against its measurement."""

    run: Run
    pending: str
    predicted: dict | None
    measured_step_s: float | None
    measured_peak: int | None
    applied_flags: list[str]

    @property
    def time_ratio(self) -> float | None:
        """measured / predicted step time (> 1: the planner is optimistic)."""
        if self.pending or self.measured_step_s is None or self.predicted is None:
            return None
        return self.measured_step_s / self.predicted["step_time_s"]

    @property
    def throughput_error(self) -> float | None:
        """predicted / measured throughput - 1."""
        r = self.time_ratio
        return None if r is None else r - 1.0

    @property
    def memory_error(self) -> float | None:
        """predicted tensor bytes (``predict``'s allocated_bytes: no framework allowance) /
        the measured peak - 1."""
        if self.pending or self.measured_peak is None or self.predicted is None:
            return None
        return self.predicted["allocated_bytes"] / self.measured_peak - 1.0

    @property
    def peak_stat(self) -> str | None:
        return self.run.measured.get("peak_stat")

    @property
    def memory_error_counts(self) -> float | None:
        """memory_error where the measured peak is allocated bytes (like for like), else
        None: a reserved peak is not compared (module doc)."""
        return self.memory_error if self.peak_stat == "allocated" else None


def evaluate_runs(runs: list[Run], profile_for=None) -> list[Row]:
    """Predict every run (pending ones too, where the engine can; ``profile_for(gpu_name)``:
    the DeviceProfile to use, default the GPU's defaults)."""
    rows = []
    for run in runs:
        reason = pending_reason(run)
        pred = None
        try:
            pred = predict(run, profile_for(run.gpu) if profile_for else None)
        except (TxcalcError, TypeError, ValueError) as e:  # a flag value it does not take
            reason = reason or f"pending: the engine cannot express it ({e})"
        step = measured_step_time_s(run, None, pred["model_flops_step"] if pred else None) \
            if pred is not None or run.measured["kind"] not in ("mfu",) else None
        rows.append(Row(run, reason, pred, step, measured_peak_bytes(run),
                        apply_flags(run)[2]))
    return rows


# --- fitting ------------------------------------------------------------------------------------
def profile_with(gpu_name: str, matmul: float, half_dim: float):
    from ..engine.hardware import get_gpu
    from ..engine.timing import DeviceProfile
    base = DeviceProfile.from_gpu(get_gpu(gpu_name))
    return base.replace(flop_efficiency={"matmul": matmul}, matmul_half_dim=half_dim)


def _golden(f, lo: float, hi: float, iters: int = 14) -> float:
    """argmin of a unimodal f on [lo, hi] (golden-section search)."""
    g = (math.sqrt(5) - 1) / 2
    a, b = lo, hi
    c, d = b - g * (b - a), a + g * (b - a)
    fc, fd = f(c), f(d)
    for _ in range(iters):
        if fc < fd:
            b, d, fd = d, c, fc
            c = b - g * (b - a)
            fc = f(c)
        else:
            a, c, fc = c, d, fd
            d = a + g * (b - a)
            fd = f(d)
    return (a + b) / 2


def _loss(runs: list[Run], measured: dict, prof, cache: dict | None = None) -> float:
    """Mean squared log ratio of predicted to measured step time."""
    return sum(math.log(predict(r, prof, cache)["step_time_s"] / measured[r.id]) ** 2
               for r in runs) / len(runs)


#: the search ranges of the fitted constants
MATMUL_RANGE = (0.2, 1.0)
HALF_DIM_GRID = (0.0, 16.0, 32.0, 48.0, 64.0, 128.0, 256.0)


def fit_efficiencies(runs: list[Run]) -> dict:
    """Fit timing.GPU_EFFICIENCY's matmul entry per GPU and MATMUL_HALF_DIM (shared) on the
    fit runs that are not pending and have a measured time: for each half dimension of
    HALF_DIM_GRID, each GPU's matmul efficiency by golden-section search of the mean squared
    log ratio; the half dimension with the lowest total loss wins.

    Returns {"matmul": {gpu: efficiency}, "matmul_half_dim": float, "loss": float, "runs": n}."""
    fit = [r for r in runs if r.split == "fit" and not pending_reason(r)
           and r.measured["kind"] != "memory_only"]
    if not fit:
        raise RunsError("no fit runs with a measured time")
    measured, cache = {}, {}
    for r in fit:
        measured[r.id] = measured_step_time_s(r, None, predict(r, None, cache)["model_flops_step"])
    by_gpu: dict[str, list[Run]] = {}
    for r in fit:
        by_gpu.setdefault(r.gpu, []).append(r)
    best = None
    for half in HALF_DIM_GRID:
        effs, total = {}, 0.0
        for gpu, rs in sorted(by_gpu.items()):
            e = _golden(lambda x: _loss(rs, measured, profile_with(gpu, x, half), cache),
                        *MATMUL_RANGE)
            effs[gpu] = e
            total += _loss(rs, measured, profile_with(gpu, e, half), cache) * len(rs)
        if best is None or total < best["loss"] - 1e-12:
            best = {"matmul": effs, "matmul_half_dim": half, "loss": total / len(fit),
                    "runs": len(fit)}
    return best


_FIT_CACHE: dict = {}


def fit_efficiencies_cached(path: str | Path | None = None) -> dict:
    """``fit_efficiencies`` of a runs file, computed once per file and process (a fit takes
    tens of seconds)."""
    key = str(path or runs_path())
    if key not in _FIT_CACHE:
        _FIT_CACHE[key] = fit_efficiencies(load_runs(path))
    return _FIT_CACHE[key]


def band(rows: list[Row], split: str = "test", coverage: float = 0.8) -> tuple[float, float, int]:
    """(low, high, n): the (1 - coverage)/2 and (1 + coverage)/2 quantiles of measured /
    predicted step time over the split's non-pending rows, each rounded outward to a
    measured ratio (numpy.percentile's "lower" and "higher" methods), so the band holds at
    least ``coverage`` of the rows it comes from (linear interpolation between two ratios
    would leave both of them outside: 16 of 22 test rows for an 80% band)."""
    ratios = sorted(r.time_ratio for r in rows if r.run.split == split
                    and r.time_ratio is not None)
    if not ratios:
        raise RunsError(f"no {split} runs with a measured time")
    last = len(ratios) - 1
    lo = ratios[math.floor((1 - coverage) / 2 * last + 1e-9)]
    hi = ratios[math.ceil((1 + coverage) / 2 * last - 1e-9)]
    return lo, hi, len(ratios)


def _quantile(xs: list[float], q: float) -> float:
    """numpy.percentile's default (linear) on a sorted list."""
    pos = q * (len(xs) - 1)
    lo = math.floor(pos)
    hi = min(lo + 1, len(xs) - 1)
    return xs[lo] + (pos - lo) * (xs[hi] - xs[lo])


def median_abs(xs) -> float | None:
    xs = sorted(abs(x) for x in xs if x is not None)
    if not xs:
        return None
    return _quantile(xs, 0.5)
