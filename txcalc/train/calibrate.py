"""Fit the roofline's efficiency factors (txcalc.engine.timing) to measured training-step times.

    predicted step time = sum over ops of roofline(forward) + roofline(backward)
                          + roofline(forward) again for recomputed ops
                          + optimizer step: 2 x (weights + grads + states + master) / bandwidth

with three free factors: ``flop_efficiency["matmul"]``, ``flop_efficiency["attention"]`` and
``bw_efficiency``. The fit minimises the mean squared log ratio predicted / measured over
the report's cases by coordinate search on a geometric grid in [0.02, 1] (refined three
times); a factor that no case's time depends on stays at its default.

Inputs (``input_kind`` tells them apart by their top-level keys):

    file                           | key          | what is fitted
    -------------------------------|--------------|------------------------------------------
    GPU validation report          | cases        | the three factors, to step times (above);
      (reference/gpu_validate.py)  |              |   ``memory_errors``: peak per phase
                                   |              |   against max_memory_allocated
    torch.profiler Chrome trace    | traceEvents  | each class's factor, to its CUDA kernel
      (``prof.export_chrome_trace``)|             |   time (``read_trace``, ``fit_trace``):
                                   |              |   GEMM kernels -> matmul, flash/fmha
                                   |              |   kernels -> attention, the rest ->
                                   |              |   bandwidth; the workload is given
    published runs                 | runs         | timing.GPU_EFFICIENCY's matmul and
      (txcalc/data/training_runs.json)|           |   MATMUL_HALF_DIM on the fit runs
                                   |              |   (published_runs.fit_efficiencies)

A validation report's ``cases`` each have ``config`` (ModelConfig fields), ``batch``, ``seq``,
``attn_impl``, ``recompute``, ``precision``, ``optimizer`` and the measured ``step_time_s``;
on a GPU also ``predicted`` and ``measured`` peak bytes per phase.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

from ..model.config import ModelConfig
from ..errors import TxcalcError
from ..engine.memory import PRECISIONS, TrainingMemory
from ..safeio import parse_json, read_text, shown
from ..engine.timing import COMPUTE_DTYPE, DEFAULT_FLOP_EFFICIENCY, DeviceProfile, ops_times
from ..engine.workload import Workload

FACTORS = ("matmul", "attention", "bandwidth")


class CalibrationInputError(TxcalcError):
    """A validation report that cannot be read or has no usable cases."""


@dataclass(frozen=True)
class Case:
    name: str
    cfg: ModelConfig
    work: Workload
    precision: str
    optimizer: str
    measured_s: float


#: longest measured step time accepted, seconds (a day: far above any training step)
MAX_STEP_TIME_S = 86400.0


def _int_field(c: dict, key: str, where: str) -> int:
    v = c[key]
    if isinstance(v, bool) or not isinstance(v, int) or v <= 0:
        raise CalibrationInputError(f"{where}: {key} ({v!r:.80}) must be a positive integer")
    return v


def _step_time(c: dict, where: str) -> float:
    v = c["step_time_s"]
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not (
            0 < v <= MAX_STEP_TIME_S):  # NaN fails the comparison too
        raise CalibrationInputError(f"{where}: step_time_s ({v!r:.80}) must be a number of seconds in "
                          f"(0, {MAX_STEP_TIME_S:g}]")
    return float(v)


#: largest torch.profiler trace read, bytes (a profiled training step of a large model writes
#: tens of MiB of JSON)
MAX_TRACE_BYTES = 512 * 2**20
INPUT_KINDS = {"cases": "validation", "traceEvents": "trace", "runs": "runs"}


def read_input(path: str | Path) -> tuple[str, dict]:
    """(kind, parsed JSON) of a calibration input: ``validation``, ``trace`` or ``runs``
    (INPUT_KINDS: by its top-level key). Read by ``safeio`` (regular file, size cap, strict
    JSON)."""
    where = f"validation report, trace or runs file {shown(path)}"
    doc = parse_json(read_text(path, CalibrationInputError, MAX_TRACE_BYTES),
                     f"cannot read {where}", CalibrationInputError)
    if isinstance(doc, dict):
        for key, kind in INPUT_KINDS.items():
            if key in doc:
                return kind, doc
    raise CalibrationInputError(
        f"cannot read {where}: expected a GPU validation report (cases), a torch.profiler "
        "Chrome trace (traceEvents) or published runs (runs)")


def read_report(path: str | Path, report: dict | None = None) -> tuple[str, list[Case]]:
    """(device name, cases with a measured step time) of a GPU validation report (``report``:
    the parsed file, when already read).

    Read by ``safeio`` (regular file, size cap, strict JSON: NaN and Infinity are refused);
    batch and seq must be positive integers (512.9 and true are refused, not truncated or
    read as 1), step_time_s a positive finite number of seconds, device a string."""
    where = f"validation report {shown(path)}"
    if report is None:
        report = parse_json(read_text(path, CalibrationInputError), f"cannot read {where}",
                            CalibrationInputError)
    try:
        device = report.get("device", "")
        if not isinstance(device, str):
            raise CalibrationInputError(f"{where}: device ({device!r:.80}) must be a string")
        cases = []
        for i, c in enumerate(report["cases"]):
            if "step_time_s" not in c:
                continue  # skipped or failed (out of memory): nothing to fit
            at = f"{where} case {i}"
            measured = _step_time(c, at)
            fields = {k: tuple(v) if isinstance(v, list) else v for k, v in c["config"].items()}
            cfg = ModelConfig(**fields)
            work = Workload(batch=_int_field(c, "batch", at), seq=_int_field(c, "seq", at),
                            attn_impl=str(c["attn_impl"]), recompute=str(c["recompute"]))
            cases.append(Case(f"{cfg.name} b{work.batch} s{work.seq} {work.attn_impl} "
                              f"{work.recompute}", cfg, work, str(c["precision"]),
                              str(c["optimizer"]), measured))
    except TxcalcError:
        raise
    except (ValueError, KeyError, TypeError, AttributeError) as e:
        raise CalibrationInputError(f"cannot read {where}: {e.__class__.__name__} {e}") from None
    if not cases:
        raise CalibrationInputError(f"{where} has no cases with a positive measured step_time_s")
    return device, cases


def step_time_s(case: Case, prof: DeviceProfile) -> float:
    """Predicted seconds of one training step of ``case`` on one GPU."""
    w, mem = case.work, TrainingMemory(case.cfg, case.work, case.precision, case.optimizer)
    prec = PRECISIONS[case.precision]
    total = ops_times(mem.ops, w, prof, COMPUTE_DTYPE[case.precision], prec.act,
                      prec.weight)[0]
    states = mem.weights + mem.gradients + mem.optimizer_total
    return total + 2 * states / prof.bytes_per_s


def _apply(prof: DeviceProfile, factors: dict[str, float]) -> DeviceProfile:
    return prof.replace(flop_efficiency={"matmul": factors["matmul"],
                                         "attention": factors["attention"]},
                        bw_efficiency=factors["bandwidth"])


def _loss(cases, prof) -> float:
    return sum(math.log(step_time_s(c, prof) / c.measured_s) ** 2 for c in cases) / len(cases)


def fit(cases: list[Case], prof: DeviceProfile) -> tuple[DeviceProfile, dict]:
    """The profile with fitted factors, and {case: (measured, before, after)} seconds."""
    factors = {k: prof.flop_efficiency.get(k, DEFAULT_FLOP_EFFICIENCY[k])
               for k in ("matmul", "attention")} | {"bandwidth": prof.bw_efficiency}
    best = _loss(cases, prof)
    for ratio in (1.5, 1.15, 1.03, 1.005):  # geometric grid, refined
        for _ in range(6):
            moved = False
            for name in FACTORS:
                for k in range(-8, 9):
                    trial = dict(factors, **{name: min(1.0, max(0.02, factors[name] * ratio ** k))})
                    loss = _loss(cases, _apply(prof, trial))
                    if loss < best - 1e-12:
                        best, factors, moved = loss, trial, True
            if not moved:
                break
    fitted = _apply(prof, factors).replace(
        source=f"{prof.name}: efficiencies fitted to {len(cases)} measured training steps "
               f"(txcalc calibrate); peaks from the datasheet")
    rows = {c.name: (c.measured_s, step_time_s(c, prof), step_time_s(c, fitted)) for c in cases}
    return fitted, rows


# --- peak memory per phase of a validation report -----------------------------------------------
#: measured phase -> the predicted peak it is compared with (reference/gpu_validate.py)
PHASES = {"forward": "peak_forward", "backward": "peak_backward", "step": "peak_step"}


def memory_errors(report: dict) -> list[dict]:
    """Per case and phase: predicted peak bytes, measured ``max_allocated`` and the error in %
    (cases without measured phases, such as a CPU dry run, are skipped). Recomputed from the
    bytes, not read from the report's own ``peak_error_pct``."""
    from ..units import error_pct
    out = []
    for i, c in enumerate(report.get("cases", [])):
        measured, predicted = c.get("measured") or {}, c.get("predicted") or {}
        for phase, key in PHASES.items():
            m = (measured.get(phase) or {}).get("max_allocated")
            p = predicted.get(key)
            if not _positive_int(m) or not _positive_int(p):
                continue
            out.append({"case": f"{c.get('model', i)} b{c.get('batch')} s{c.get('seq')} "
                                f"{c.get('attn_impl')} {c.get('recompute')}",
                        "phase": phase, "predicted_bytes": p, "measured_bytes": m,
                        "error_pct": error_pct(p, m)})
    return out


def _positive_int(v) -> bool:
    return isinstance(v, int) and not isinstance(v, bool) and v > 0


# --- torch.profiler traces ----------------------------------------------------------------------
#: substrings of CUDA kernel names (lower case) and the op class whose time they are
#: (cuBLAS/CUTLASS GEMMs: "gemm", "xmma", "cutlass", "wgmma", "nvjet"; fused attention:
#: FlashAttention's "flash", cuDNN/PyTorch "fmha" and "sdpa"); checked in this order
KERNEL_CLASSES = (("attention", ("flash", "fmha", "sdpa", "attention")),
                  ("matmul", ("gemm", "xmma", "cutlass", "cublas", "wgmma", "nvjet",
                              "s16816", "s1688")))


def kernel_class(name: str) -> str:
    low = name.lower()
    for cls, needles in KERNEL_CLASSES:
        if any(n in low for n in needles):
            return cls
    return "memory"


def read_trace(doc: dict, where: str = "trace", steps: int | None = None) -> dict:
    """Seconds of CUDA kernel time per training step by class (matmul, attention, memory) of
    a Chrome trace (``traceEvents``: complete events, ``ph`` "X", ``cat`` "kernel", ``dur`` in
    microseconds). Steps: ``steps``, else the ``ProfilerStep#`` annotations, else 1."""
    events = doc.get("traceEvents")
    if not isinstance(events, list):
        raise CalibrationInputError(f"{where}: traceEvents must be a list")
    totals = {"matmul": 0.0, "attention": 0.0, "memory": 0.0}
    marks = set()
    for e in events:
        if not isinstance(e, dict):
            continue
        name = e.get("name", "")
        if isinstance(name, str) and name.startswith("ProfilerStep#"):
            marks.add(name)
        if e.get("ph") != "X" or e.get("cat") != "kernel" or not isinstance(name, str):
            continue
        dur = e.get("dur")
        if isinstance(dur, bool) or not isinstance(dur, (int, float)) or not (
                0 <= dur <= MAX_STEP_TIME_S * 1e6):
            raise CalibrationInputError(f"{where}: kernel {name[:80]!r} has dur ({dur!r:.40}),"
                                        " not a number of microseconds")
        totals[kernel_class(name)] += dur / 1e6
    if sum(totals.values()) <= 0:
        raise CalibrationInputError(f"{where}: no CUDA kernel events (cat 'kernel'): profile "
                                    "with ProfilerActivity.CUDA")
    n = steps or len(marks) or 1
    return {k: v / n for k, v in totals.items()} | {"steps": n}


def class_times_s(case: Case, prof: DeviceProfile) -> dict:
    """Predicted seconds of one step of ``case`` per op class (the roofline of
    ``ops_times``, split by ``timing.op_class``; the optimizer step is bandwidth time)."""
    from ..engine.timing import op_class, op_times
    w, mem = case.work, TrainingMemory(case.cfg, case.work, case.precision, case.optimizer)
    prec = PRECISIONS[case.precision]
    out = {"matmul": 0.0, "attention": 0.0, "memory": 0.0}
    for op in mem.ops:
        if op.kind == "checkpoint":
            continue
        f, b = op_times(op, w, prof, COMPUTE_DTYPE[case.precision], prec.act, prec.weight)
        cls = op_class(op)
        if cls == "attention" and not op.fused_attn(w):
            cls = "matmul"  # eager attention runs as batched GEMMs
        out[cls] += f + b + (f if op.reruns(w.recompute) else 0.0)
    out["memory"] += 2 * (mem.weights + mem.gradients + mem.optimizer_total) / prof.bytes_per_s
    return out


def fit_trace(case: Case, measured: dict, prof: DeviceProfile) -> tuple[DeviceProfile, dict]:
    """The profile whose per-class times match the trace's kernel times (each factor scaled
    by predicted / measured, three rounds: an op bound by memory does not scale), and
    {class: (measured, before, after)} seconds per step."""
    factors = {k: prof.flop_efficiency.get(k, DEFAULT_FLOP_EFFICIENCY[k])
               for k in ("matmul", "attention")} | {"bandwidth": prof.bw_efficiency}
    cur = prof
    for _ in range(3):
        pred = class_times_s(case, cur)
        for cls, key in (("matmul", "matmul"), ("attention", "attention"),
                         ("memory", "bandwidth")):
            if pred[cls] > 0 and measured[cls] > 0:
                factors[key] = min(1.0, max(0.01, factors[key] * pred[cls] / measured[cls]))
        cur = _apply(prof, factors)
    fitted = cur.replace(source=f"{prof.name}: efficiencies fitted to the CUDA kernel times of "
                                "a torch.profiler trace (txcalc calibrate); peaks from the "
                                "datasheet")
    before, after = class_times_s(case, prof), class_times_s(case, fitted)
    return fitted, {k: (measured[k], before[k], after[k]) for k in before}


# --- published runs -----------------------------------------------------------------------------
def fit_published(gpu_name: str, runs_file=None) -> tuple[DeviceProfile, dict, dict]:
    """The profile of ``gpu_name`` fitted on the fit runs of the published runs file, the fit
    ({"matmul": {gpu: eff}, "matmul_half_dim": ...}) and {run: (measured, before, after)}
    step seconds of that GPU's fit runs."""
    from ..engine.hardware import get_gpu
    from .published_runs import (fit_efficiencies_cached, load_runs, measured_step_time_s,
                                 pending_reason, predict, profile_with)
    from ..engine.timing import GPU_EFFICIENCY_ALIAS
    runs = load_runs(runs_file)
    f = fit_efficiencies_cached(runs_file)
    gpu = get_gpu(gpu_name).name
    key = gpu if gpu in f["matmul"] else GPU_EFFICIENCY_ALIAS.get(gpu, gpu)
    if key not in f["matmul"]:
        raise CalibrationInputError(
            f"no fit runs on {gpu} in the published runs; runs were fitted on "
            f"{', '.join(sorted(f['matmul']))}")
    fitted = profile_with(gpu, f["matmul"][key], f["matmul_half_dim"]).replace(
        source=f"{gpu}: matmul efficiency fitted to {f['runs']} published runs "
               "(txcalc calibrate); peaks from the datasheet")
    rows = {}
    for r in runs:
        if r.split != "fit" or r.gpu != key or pending_reason(r) or \
                r.measured["kind"] == "memory_only":
            continue
        before = predict(r)
        rows[r.id] = (measured_step_time_s(r, None, before["model_flops_step"]),
                      before["step_time_s"], predict(r, fitted)["step_time_s"])
    return fitted, f, rows
