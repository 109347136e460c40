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

import json
import math
from dataclasses import dataclass
from pathlib import Path

from .config import ModelConfig
from .errors import TxcalcError
from .memory import PRECISIONS, TrainingMemory
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


def read_report(path: str | Path) -> tuple[str, list[Case]]:
    """(device name, cases with a measured step time) of a GPU validation report."""
    try:
        report = json.loads(Path(path).read_text(encoding="utf-8"))
        device = str(report.get("device", ""))
        cases = []
        for c in report["cases"]:
            if "step_time_s" not in c:
                continue  # skipped or failed (out of memory): nothing to fit
            fields = {k: tuple(v) if isinstance(v, list) else v for k, v in c["config"].items()}
            cfg = ModelConfig(**fields)
            work = Workload(batch=int(c["batch"]), seq=int(c["seq"]),
                            attn_impl=str(c["attn_impl"]), recompute=str(c["recompute"]))
            cases.append(Case(f"{cfg.name} b{work.batch} s{work.seq} {work.attn_impl} "
                              f"{work.recompute}", cfg, work, str(c["precision"]),
                              str(c["optimizer"]), float(c["step_time_s"])))
    except (OSError, UnicodeDecodeError, ValueError, KeyError, TypeError, AttributeError) as e:
        raise CalibrationInputError(f"cannot read validation report {str(path)!r}: "
                          f"{e.__class__.__name__} {e}") from None
    if not cases or any(c.measured_s <= 0 for c in cases):
        raise CalibrationInputError(f"validation report {str(path)!r} has no cases with a positive "
                          "measured step_time_s")
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
