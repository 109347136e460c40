"""Published, measured fine-tuning memory peaks and maximum sequence lengths, and txcalc's
prediction for each (issue 28, item 5).

The rows live in ``txcalc/data/finetune_measurements.json``: each has its source (a URL at a
commit), the exact table row (``quote``: the header, then the row), what the source states
around it (``context_quote``), the setup (model, method, LoRA rank / alpha / targets /
dropout, quantised base, micro-batch, sequence, gradient checkpointing, optimizer,
precision, loss, GPU), what had to be assumed where the source is silent, the measured
figure and its ``split``.

    measured kind | value                                | statistic (what measured it)
    --------------|--------------------------------------|----------------------------------
    peak_gib      | a peak in GiB (2^30 bytes)           | max_memory_allocated: live tensors
    peak_gb       | a peak in GB (1e9 bytes)             | max_memory_reserved: allocated plus
                  |                                      |   the caching allocator's segments
                  |                                      | nvidia-smi: reserved plus the CUDA
                  |                                      |   context and other processes
    max_seq       | the longest sequence that ran        | oom_boundary: the next length tried
                  |   (tokens, at the stated batch)      |   ran out of memory

Predictions use the engine as ``txcalc memory`` and ``txcalc fit`` do (``train.fit.Setup``:
the same TrainingMemory, the same search), with the row's recipe where ``engine.recipes``
declares it (``recipe_effects``: QLoRA's fp32 upcast, the optimizer kernel, the allocator's
reserved slack), what the row states beyond the recipe's defaults (bitsandbytes nf4 without
double quantisation, bitsandbytes < 0.43.2 keeping quantised Linears' inputs, compiled blocks
and loss, the optimizer stepped inside backward) and the settings its figure forces where the
source is silent (``deduced``, ``deduction_problems``). A peak is the engine's tensors' peak
with ``engine.device``'s allocated, reserved and device bytes (``predict``);
``predicted_figure`` compares the one the measured statistic names
(``COMPARED``: allocated for max_memory_allocated, reserved for max_memory_reserved, reserved
plus the CUDA context for nvidia-smi). A maximum length is ``train.fit.fit``'s answer on the
row's GPU (``Gpu.usable_bytes``), which compares reserved plus the CUDA context.

Split rule (``SPLIT_RULE``, fixed before any error was looked at): within each source
document (the row's ``table``), in the order its rows appear there (``order``), every third
row from the first (order % 3 == 0) is a fit row and the others are test rows, so about a
third fit. Constants are fitted on fit rows only (``fit_reserved_slack``).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path

from ..errors import TxcalcError

SPLITS = ("fit", "test")
MEASURED_KINDS = ("peak_gib", "peak_gb", "max_seq")
MEMORY_STATISTICS = ("max_memory_allocated", "max_memory_reserved", "nvidia-smi")
LENGTH_STATISTICS = ("oom_boundary",)
METHODS = ("full", "lora", "qlora")
SPLIT_RULE = ("within each source document (the row's table), in the order its rows appear "
              "there, every third row from the first (order % 3 == 0) is a fit row, the others "
              "test rows")
#: bytes per unit of a measured peak
UNIT_BYTES = {"peak_gib": 2**30, "peak_gb": 10**9}
#: what each statistic counts, in words (the report's legend)
STATISTIC_WORDS = {
    "max_memory_allocated": "torch.cuda.max_memory_allocated: live tensors",
    "max_memory_reserved": "torch.cuda.max_memory_reserved: allocated plus the caching "
                           "allocator's cached and rounded-up segments",
    "nvidia-smi": "nvidia-smi: reserved plus the CUDA context and anything outside PyTorch's "
                  "allocator",
    "oom_boundary": "the longest length that ran before running out of memory",
}
REQUIRED = ("id", "split", "table", "order", "recipe", "model", "method", "batch",
            "gradient_checkpointing", "optimizer", "precision", "loss", "attn", "gpu",
            "measured", "source", "quote", "context_quote", "assumptions")


class MeasurementsError(TxcalcError):
    """A fine-tuning measurements file that cannot be read or holds an impossible row."""


def split_by_rule(order: int) -> str:
    """The split ``SPLIT_RULE`` gives the row at ``order`` within its source document."""
    return "fit" if order % 3 == 0 else "test"


@dataclass(frozen=True)
class Measurement:
    """One published measured fine-tuning figure (the module doc)."""

    id: str
    split: str
    table: str
    order: int
    recipe: str
    model: str
    method: str
    batch: int
    seq: int | None
    gradient_checkpointing: bool
    optimizer: str
    precision: str
    loss: str
    attn: str
    gpu: str
    measured: dict = field(hash=False)
    source: str = ""
    quote: str = ""
    context_quote: str = ""
    assumptions: str = ""
    lora: dict | None = field(default=None, hash=False)
    quant: dict | None = field(default=None, hash=False)
    #: the run compiled its loss (torch.compile of the cross-entropy: Workload.fused "loss")
    compiled_loss: bool | None = None
    #: the run's loop keeps the previous micro-batch's logits and loss bound through the next
    #: forward (engine.finetune's Finetune.keeps_previous: litgpt's fit())
    keeps_previous: bool | None = None
    #: the run steps each parameter inside backward (torchtune's optimizer_in_bwd:
    #: TrainingMemory.optimizer_in_backward)
    optimizer_in_backward: bool | None = None
    #: the run compiled each decoder layer (torchtune's compile_model: torch.compile of every
    #: TransformerSelfAttentionLayer), so the norms and gated activations inside the blocks
    #: run as the kernels Inductor fuses (Workload.fused "layers"; the reference model's
    #: blocks compiled on CPU keep the same bytes, tests/conformance/test_stacks_recompute.py)
    compiled_layers: bool | None = None
    #: settings the source does not state but its figure forces (``DEDUCIBLE``): the row's
    #: measured peak lies below ``stated_floor_bytes``, what its stated setup must hold when
    #: the forward ends, and the row's recipe has a flag that takes those bytes away; the
    #: row's ``assumptions`` say why. ``deduction_problems`` checks both conditions.
    deduced: dict | None = field(default=None, hash=False)

    @property
    def kind(self) -> str:
        return self.measured["kind"]

    @property
    def statistic(self) -> str:
        return self.measured["statistic"]

    @property
    def is_length(self) -> bool:
        return self.kind == "max_seq"

    @property
    def measured_bytes(self) -> int | None:
        """A measured peak in bytes (None for a maximum length)."""
        if self.is_length:
            return None
        return round(self.measured["value"] * UNIT_BYTES[self.kind])

    @property
    def recompute(self) -> str:
        """Gradient checkpointing in the engine's words: every block (full) or none."""
        return "full" if self.gradient_checkpointing else "none"

    def finetune(self):
        """The engine's Finetune (None: full fine-tuning)."""
        from ..engine.finetune import Finetune
        if self.method == "full":
            return None
        lora = self.lora or {}
        q = self.quant or {}
        return Finetune(self.method, rank=int(lora["rank"]), alpha=float(lora["alpha"]),
                        targets=lora["targets"], lora_dropout=float(lora.get("dropout", 0.0)),
                        base_format=q.get("format", "nf4"), block=int(q.get("block", 64)),
                        double_quant=bool(q.get("double_quant", True)),
                        bnb_saves_input=bool(q.get("bnb_saves_input", False)),
                        quantizer=q.get("quantizer", "transformers"),
                        keeps_previous=bool(self.keeps_previous))

    def setup(self, stated: bool = False):
        """The one-GPU setup ``txcalc memory`` / ``fit`` would build for this row, with the
        row's recipe where ``engine.recipes`` declares it (``recipe_effects``) and the row's GPU
        (its cuBLAS workspace, engine.device); with its ``deduced`` settings unless ``stated``
        (the setup as the source states it)."""
        import dataclasses

        from ..model.presets import get_preset
        from .fit import Setup
        ft = self.finetune()
        upcast, kernel, slack = recipe_effects(self.recipe)
        if ft is not None and ft.mode == "qlora":
            ft = dataclasses.replace(ft, upcast=upcast)
        fused = (("layers",) if self.compiled_layers else ()) + \
            (("loss",) if self.compiled_loss else ())
        deduced = {} if stated else (self.deduced or {})
        return Setup(get_preset(self.model), self.precision, self.optimizer, self.attn,
                     self.recompute, ft, offload=deduced.get("offload", "none"),
                     loss=self.loss, optimizer_kernel=kernel,
                     gpu_name=self.gpu, fragmentation=slack, fused=fused,
                     optimizer_in_backward=bool(self.optimizer_in_backward))

    def describe_method(self) -> str:
        if self.method == "full":
            return "full"
        lora = self.lora or {}
        base = ""
        if self.quant:
            base = f", {self.quant['format']}{' dq' if self.quant.get('double_quant') else ''}"
            if self.quant.get("bnb_saves_input"):
                base += " (bnb < 0.43.2: inputs kept)"
            if self.quant.get("quantizer", "transformers") != "transformers":
                base += f", {self.quant['quantizer']} quantizer"
        if self.keeps_previous:
            base += "; previous step kept"
        return f"{self.method} r={lora['rank']} {lora['targets']}{base}"


def recipe_effects(recipe: str) -> tuple[bool, str, float]:
    """(QLoRA's fp32 upcast, the optimizer step's kernel, the allocator's reserved slack) of a
    row's recipe: what ``engine.recipes.RECIPES`` declares for it, as ``answers.common.
    apply_recipe`` applies it (the row states its own optimizer, loss and checkpointing). A
    recipe outside that table (litgpt: Fabric's bitsandbytes plugin, no upcast;
    torch.optim.AdamW, foreach by default) takes no upcast, the foreach kernel and
    device.FRAGMENTATION."""
    from ..engine.device import FRAGMENTATION
    from ..engine.recipes import RECIPES
    r = RECIPES.get(recipe)
    if r is None:
        return False, "foreach", FRAGMENTATION
    return r.upcast, r.optimizer_kernel, r.reserved_slack


#: (recipe, method) -> the settings a row of that recipe may have ``deduced`` and the values
#: its code offers: torchtune's lora_finetune_single_device.py takes
#: ``enable_activation_offloading`` (OffloadActivations, since #1443, 7045e965d, 2024-09-16:
#: every tensor the model's forward saves goes to host memory, the checkpoints under
#: activation checkpointing; txcalc's offload "activations"); its full_finetune_single_device.py
#: has no such flag at 30b8519e8 (the README table's commit)
DEDUCIBLE = {("torchtune", "lora"): {"offload": ("activations",)},
             ("torchtune", "qlora"): {"offload": ("activations",)}}


def stated_floor_bytes(m: Measurement) -> int:
    """What the row's setup as its source states it (no ``deduced`` settings) must hold when
    its forward ends: the engine's ``after_forward`` tensors (weights, optimizer states,
    every tensor saved for backward, each count exact against PyTorch on CPU; a QLoRA base
    in the engine's nf4 layout: torchao's NF4Tensor keeps the same 4-bit codes and int8
    per-64 scales, its second-level factors differing by under a megabyte at 8B), no
    transient, workspace or allocator slack. Any measured peak (allocated, reserved or
    nvidia-smi) of that setup is at least this."""
    return m.setup(stated=True).memory(m.batch, m.seq).phases()["after_forward"]["total"]


def deduction_problems(m: Measurement) -> list[str]:
    """Why a row's ``deduced`` settings are not allowed, or why a row needs one, in words: a
    setting is deduced only where the source is silent, the recipe offers it (``DEDUCIBLE``)
    and the measured peak is below ``stated_floor_bytes``; a memory row below that floor
    without a deduction states an impossible setup."""
    if m.is_length:
        return [f"{m.id}: a maximum length cannot deduce settings"] if m.deduced else []
    below = m.measured_bytes < stated_floor_bytes(m)
    if not m.deduced:
        return [(f"{m.id}: measured below what its stated setup holds when the forward "
                 f"ends, with nothing deduced")] if below else []
    bad = []
    allowed = DEDUCIBLE.get((m.recipe, m.method), {})
    for k, v in m.deduced.items():
        if v not in allowed.get(k, ()):
            bad.append(f"{m.id}: deduced {k} {v!r}, which recipe {m.recipe} ({m.method}) does "
                       f"not offer")
    if not below:
        bad.append(f"{m.id}: deduces {', '.join(m.deduced)} but its measured peak is not "
                   f"below its stated setup's floor")
    return bad


def measurements_path() -> Path:
    return Path(str(resources.files("txcalc") / "data" / "finetune_measurements.json"))


def _problems(m: Measurement) -> list[str]:
    """Every impossible field of one row, in words."""
    from ..engine.hardware import load_catalog
    from ..model.presets import PRESETS
    bad = []
    if m.split not in SPLITS:
        bad.append(f"split {m.split!r} (choose {', '.join(SPLITS)})")
    elif m.split != split_by_rule(m.order):
        bad.append(f"split {m.split!r} but the split rule gives {split_by_rule(m.order)!r} "
                   f"at order {m.order}")
    if m.kind not in MEASURED_KINDS:
        bad.append(f"measured kind {m.kind!r} (choose {', '.join(MEASURED_KINDS)})")
    stats = LENGTH_STATISTICS if m.is_length else MEMORY_STATISTICS
    if m.statistic not in stats:
        bad.append(f"statistic {m.statistic!r} for kind {m.kind!r} (choose {', '.join(stats)})")
    if not isinstance(m.measured.get("value"), (int, float)) or m.measured["value"] <= 0:
        bad.append(f"measured value {m.measured.get('value')!r} (a positive number)")
    if m.is_length == (m.seq is not None):
        bad.append(f"seq {m.seq!r}: a peak states its sequence, a maximum length leaves it null")
    if m.method not in METHODS:
        bad.append(f"method {m.method!r} (choose {', '.join(METHODS)})")
    if (m.method == "full") != (m.lora is None):
        bad.append(f"lora {m.lora!r} with method {m.method!r} (adapters iff LoRA or QLoRA)")
    if (m.method == "qlora") != (m.quant is not None):
        bad.append(f"quant {m.quant!r} with method {m.method!r} (a quantised base iff QLoRA)")
    if not isinstance(m.batch, int) or m.batch < 1:
        bad.append(f"batch {m.batch!r} (a positive whole number)")
    if m.model not in PRESETS:
        bad.append(f"model {m.model!r} is not a txcalc preset")
    if m.gpu not in load_catalog():
        bad.append(f"gpu {m.gpu!r} is not in txcalc/data/gpus.csv")
    if not m.source.startswith("https://"):
        bad.append(f"source {m.source[:60]!r} (a URL)")
    for name in ("quote", "context_quote", "assumptions", "recipe", "table"):
        if not str(getattr(m, name)).strip():
            bad.append(f"{name} is empty")
    return bad


def load_measurements(path: str | Path | None = None) -> list[Measurement]:
    """The rows of ``path`` (default: the package's finetune_measurements.json), checked."""
    from ..safeio import parse_json, read_text
    where = str(path or measurements_path())
    doc = parse_json(read_text(path or measurements_path(), MeasurementsError),
                     f"cannot read {where}", MeasurementsError)
    try:
        rows = doc["runs"]
        missing = [f"{r.get('id', '?')}: {k}" for r in rows for k in REQUIRED if k not in r]
        if missing:
            raise MeasurementsError(f"{where}: missing fields: {'; '.join(missing)}")
        out = [Measurement(**{k: r.get(k) for k in Measurement.__dataclass_fields__})
               for r in rows]
    except (KeyError, TypeError, AttributeError) as e:
        raise MeasurementsError(f"cannot read {where}: {e.__class__.__name__} {e}") from None
    bad = [f"{m.id}: {p}" for m in out for p in _problems(m)]
    ids = [m.id for m in out]
    bad += [f"{i}: id repeated" for i in sorted({i for i in ids if ids.count(i) > 1})]
    if bad:
        raise MeasurementsError(f"{where}: " + "; ".join(bad))
    return out


def predict(m: Measurement, setup=None) -> dict:
    """txcalc's figures for one row: a peak's tensor, allocated, reserved and device bytes
    (the engine's peak over the step's phases, engine.device), or ``fit``'s longest sequence
    on the row's GPU with the bytes it needed. ``setup``: another than the row's own."""
    from ..engine.hardware import get_gpu
    from .fit import fit
    s = m.setup() if setup is None else setup
    if m.is_length:
        g = get_gpu(m.gpu)
        res = fit(s, g.usable_bytes, batch=m.batch)
        return {"max_seq": res.max_seq, "need_bytes": res.total_bytes,
                "gpu_bytes": g.usable_bytes}
    mem = s.memory(m.batch, m.seq)
    d = s.device(m.batch, m.seq)
    return {"tensor_bytes": mem.total, "allocated_bytes": d.allocated_bytes,
            "reserved_bytes": d.reserved_bytes, "device_bytes": d.device_bytes,
            "peak_phase": mem.peak_phase}


#: the predicted figure each measured statistic is compared with, best first: the first key
#: present in ``predict``'s answer is used (``predict`` gives all three, so each statistic
#: meets its own figure; the fallbacks name what they stand in for).
COMPARED = {"max_memory_allocated": ("allocated_bytes",),
            "max_memory_reserved": ("reserved_bytes", "allocated_bytes"),
            "nvidia-smi": ("device_bytes", "reserved_bytes", "allocated_bytes"),
            "oom_boundary": ("max_seq",)}
#: each predicted figure in words (the report's "compared" column)
COMPARED_WORDS = {"allocated_bytes": "allocated", "reserved_bytes": "reserved",
                  "device_bytes": "reserved + context", "max_seq": "fit's longest sequence"}


def predicted_figure(m: Measurement, pred: dict) -> tuple[float, str]:
    """The predicted figure matching the measured statistic (``COMPARED``), and what it is in
    words; a fallback names the statistic it stands in for."""
    wanted = COMPARED[m.statistic]
    key = next(k for k in wanted if k in pred)
    words = COMPARED_WORDS[key]
    if key != wanted[0]:
        words += f" (no {COMPARED_WORDS[wanted[0]]} model yet)"
    return float(pred[key] or 0), words  # a length with nothing fitting (None) is 0


@dataclass(frozen=True)
class Row:
    """One row with its prediction and error (predicted / measured - 1)."""

    run: Measurement
    predicted: dict = field(hash=False)
    figure: float
    compared: str

    @property
    def measured_value(self) -> float:
        return float(self.run.measured["value"]) if self.run.is_length \
            else float(self.run.measured_bytes)

    @property
    def error(self) -> float:
        return self.figure / self.measured_value - 1

    def within_goal(self, memory_rel: float = 0.10, memory_abs_bytes: int = 10**9,
                    length_rel: float = 0.20) -> bool:
        """Issue 28's acceptance: a memory figure within 10 % (1 GB under 10 GB), a maximum
        length within 20 %."""
        if self.run.is_length:
            return abs(self.error) <= length_rel
        if self.measured_value < 10 * 10**9:
            return abs(self.figure - self.measured_value) <= memory_abs_bytes
        return abs(self.error) <= memory_rel


def evaluate(runs: list[Measurement] | None = None) -> list[Row]:
    """Every row with txcalc's prediction, in the file's order."""
    runs = load_measurements() if runs is None else runs
    out = []
    for m in runs:
        pred = predict(m)
        fig, words = predicted_figure(m, pred)
        out.append(Row(m, pred, fig, words))
    return out


def dumps(rows: list[Row]) -> str:
    """The rows' figures as JSON text (ids, splits, measured, predicted, errors)."""
    return json.dumps([{"id": r.run.id, "split": r.run.split, "kind": r.run.kind,
                        "statistic": r.run.statistic, "measured": r.measured_value,
                        "predicted": r.figure, "compared": r.compared,
                        "error": round(r.error, 6)} for r in rows], indent=1)


#: the slacks ``fit_reserved_slack`` tries: 0 to 40 % in steps of 1 %
SLACK_GRID = tuple(i / 100 for i in range(41))


def fit_reserved_slack(recipe: str, runs: list[Measurement] | None = None) -> float | None:
    """The allocator's reserved-over-allocated slack (engine.device.device_memory's
    ``fragmentation``) that fits ``recipe``'s fit rows best: least squares of their errors over
    ``SLACK_GRID`` (the smallest slack on a tie), from the rows whose figure the slack moves (a
    reserved or nvidia-smi peak, a longest length); None when the recipe has none. Test rows
    never enter it. ``engine.recipes.FITTED_SLACK`` holds its answers."""
    import dataclasses
    runs = load_measurements() if runs is None else runs
    rows = [m for m in runs if m.split == "fit" and m.recipe == recipe
            and m.statistic != "max_memory_allocated"]
    if not rows:
        return None
    setups = [(m, m.setup()) for m in rows]

    def sse(f: float) -> float:
        total = 0.0
        for m, s in setups:
            fig, _ = predicted_figure(m, predict(m, dataclasses.replace(s, fragmentation=f)))
            total += (fig / (m.measured["value"] if m.is_length else m.measured_bytes) - 1) ** 2
        return total
    # the error is unimodal in the slack: every 5 %, then every 1 % around the best
    coarse = min(SLACK_GRID[::5], key=lambda f: (sse(f), f))
    return min((f for f in SLACK_GRID if abs(f - coarse) < 0.05 + 1e-9),
               key=lambda f: (sse(f), f))
