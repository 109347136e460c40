"""Fit the roofline's efficiency factors (txcalc.timing) to measured training-step times.

    predicted step time = sum over ops of roofline(forward) + roofline(backward)
                          + roofline(forward) again for recomputed ops
                          + optimizer step: 2 x (weights + grads + states + master) / bandwidth

with three free factors: ``flop_efficiency["matmul"]``, ``flop_efficiency["attention"]`` and
``bw_efficiency``. The fit minimises the mean squared log ratio predicted / measured over
the report's cases by coordinate search on a geometric grid in [0.02, 1] (refined three
times); a factor that no case's time depends on stays at its default.

Input: a GPU validation report (reference/gpu_validate.py): ``cases``, each with ``config``
(ModelConfig fields), ``batch``, ``seq``, ``attn_impl``, ``recompute``, ``precision``,
``optimizer`` and the measured ``step_time_s``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

from .config import ModelConfig
from .errors import TxcalcError
from .memory import PRECISIONS, TrainingMemory
from .safeio import parse_json, read_text, shown
from .timing import COMPUTE_DTYPE, DEFAULT_FLOP_EFFICIENCY, DeviceProfile, ops_times
from .workload import Workload

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


def read_report(path: str | Path) -> tuple[str, list[Case]]:
    """(device name, cases with a measured step time) of a GPU validation report.

    Read by ``safeio`` (regular file, size cap, strict JSON: NaN and Infinity are refused);
    batch and seq must be positive integers (512.9 and true are refused, not truncated or
    read as 1), step_time_s a positive finite number of seconds, device a string."""
    where = f"validation report {shown(path)}"
    report = parse_json(read_text(path, CalibrationInputError), f"cannot read {where}", CalibrationInputError)
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
    for ratio in (1.5, 1.15, 1.03):  # geometric grid, refined
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
