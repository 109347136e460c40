"""Time of one op on one GPU: a roofline with efficiency factors, and the DeviceProfile.

    time(op) = max( flops / (peak[dtype] * flop_efficiency[class]),
                    bytes_moved / (hbm_bytes_per_s * bw_efficiency) )

Op classes and the default efficiencies (fractions of the datasheet's dense peak):

    class      | op kinds                       | default | why
    -----------|--------------------------------|---------|------------------------------------
    matmul     | linear                         | 0.55    | large bf16 GEMMs reach 70-80% of
               |                                |         |   peak in isolation (cuBLAS); 0.55
               |                                |         |   leaves room for launch gaps and
               |                                |         |   stragglers at scale: set so that
               |                                |         |   two published runs (Llama 2 70B
               |                                |         |   on A100, Llama 3 405B on H100,
               |                                |         |   tests/test_planner.py) come out
               |                                |         |   within ~15% of their GPU-hours
    attention  | attn_scores, attn_context      | 0.45    | FlashAttention-2 forward+backward
               |                                |         |   reaches 50-70% on A100/H100
               |                                |         |   (Dao 2023, arXiv:2307.08691)
    memory     | everything else (norms,        | -       | no matmul FLOPs: bandwidth-bound
               |   activations, loss, lookups)  |         |
    bandwidth  | all ops (bw_efficiency)        | 0.80    | STREAM-like kernels reach ~80-90%
               |                                |         |   of HBM bandwidth

Bytes moved per op, forward (backward moves 2x: it reads the saved tensors and the output
gradient and writes two gradients), unsharded, ``a`` = activation bytes:

    op                 | bytes moved
    -------------------|------------------------------------------------------------
    linear             | weights of the active experts (all E for MoE) + rows * (in + out) * a
    attention (flash)  | rows * H * (2 h_qk + 2 h_v) * a   (q, k, v read, o written)
    attention (eager)  | + the S x S probabilities written and read (4 + a bytes per pair)
    other ops          | 2 x the bytes they save per row (read the input, write the output)

FLOPs are the engine's per op; under a fused attention kernel (``attn_impl="flash"``) the
attention core counts only the attended pairs (causal mask, sliding window), since the kernel
skips fully masked blocks (FlashAttention-2, arXiv:2307.08691, section 3.1); eager attention
computes the full S x S.

A DeviceProfile is a GPU's peaks plus the efficiencies; it saves to and loads from JSON so
that a calibration (fitting the efficiencies to measured step times) can be stored and reused:

    >>> prof = DeviceProfile.from_gpu(get_gpu("h100"))
    >>> prof = prof.replace(flop_efficiency={"matmul": 0.62, "attention": 0.45})
    >>> prof.save("h100-calibrated.json"); DeviceProfile.load("h100-calibrated.json")

JSON keys: ``name``, ``peak_flops`` ({dtype: FLOP/s}), ``hbm_bytes_per_s``,
``flop_efficiency`` ({class: fraction}), ``bw_efficiency`` (fraction), ``source`` (free text).
"""

from __future__ import annotations

import dataclasses
import json
import math
from dataclasses import dataclass, field
from pathlib import Path

from .errors import TxcalcError
from .hardware import Gpu
from .ops import Op, rerun_ops
from .workload import Workload

DEFAULT_FLOP_EFFICIENCY = {"matmul": 0.55, "attention": 0.45}
DEFAULT_BW_EFFICIENCY = 0.80
#: compute dtype of the matmuls under each precision policy (fp32 runs on TF32 tensor cores,
#: torch.backends.cuda.matmul.allow_tf32 = True, as Megatron and most trainers set it)
COMPUTE_DTYPE = {"fp32": "tf32", "bf16-mixed": "bf16", "fp16-mixed": "fp16", "bf16": "bf16",
                 "fp8-mixed": "fp8"}


class ProfileError(TxcalcError):
    """A device profile file that cannot be read or holds impossible values."""


def op_class(op: Op) -> str:
    if op.kind in ("linear", "conv1d", "ssm_scan", "ssd_scan"):
        return "matmul"
    if op.kind in ("attn_scores", "attn_context"):
        return "attention"
    return "memory"


#: the largest peak (FLOP/s) or bandwidth (bytes/s) a profile may state: 1e19, about 5,000
#: times an H200's dense fp8 peak
MAX_RATE = 1e19


def _real(v) -> bool:
    """A finite int or float, not a bool (JSON ``true`` is no number of FLOP/s)."""
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


@dataclass(frozen=True)
class DeviceProfile:
    """Peaks and efficiencies of one GPU type for the roofline."""

    name: str
    peak_flops: dict[str, float] = field(hash=False)
    hbm_bytes_per_s: float = 0.0
    flop_efficiency: dict[str, float] = field(
        default_factory=lambda: dict(DEFAULT_FLOP_EFFICIENCY), hash=False)
    bw_efficiency: float = DEFAULT_BW_EFFICIENCY
    source: str = ""

    def __post_init__(self) -> None:
        bad = [f"{k} ({v!r:.40})" for k, v in self.flop_efficiency.items()
               if not _real(v) or not 0 < v <= 1]
        if not _real(self.bw_efficiency) or not 0 < self.bw_efficiency <= 1:
            bad.append(f"bw_efficiency ({self.bw_efficiency!r:.40})")
        if not _real(self.hbm_bytes_per_s) or not 0 < self.hbm_bytes_per_s <= MAX_RATE:
            bad.append(f"hbm_bytes_per_s ({self.hbm_bytes_per_s!r:.40})")
        bad += [f"peak_flops[{k!r:.40}] ({v!r:.40})" for k, v in self.peak_flops.items()
                if not _real(v) or not 0 <= v <= MAX_RATE]
        if bad:
            raise ProfileError(f"device profile {self.name!r:.80}: efficiencies must be numbers "
                               f"in (0, 1], bandwidth and peaks numbers up to {MAX_RATE:.0e}, "
                               f"bandwidth positive: {', '.join(bad)}")

    @classmethod
    def from_gpu(cls, gpu: Gpu) -> DeviceProfile:
        return cls(gpu.name, dict(gpu.peak_flops), gpu.hbm_bytes_per_s,
                   source=f"datasheet {gpu.source}; default efficiencies")

    def replace(self, **changes) -> DeviceProfile:
        if "flop_efficiency" in changes:
            changes["flop_efficiency"] = {**self.flop_efficiency, **changes["flop_efficiency"]}
        return dataclasses.replace(self, **changes)

    def flops_per_s(self, op_cls: str, dtype: str) -> float:
        """Achievable FLOP/s of a class of op in ``dtype``."""
        peak = self.peak_flops.get(dtype, 0.0)
        if peak <= 0:
            raise ProfileError(f"device {self.name} has no {dtype} peak")
        return peak * self.flop_efficiency.get(op_cls, DEFAULT_FLOP_EFFICIENCY.get(op_cls, 1.0))

    @property
    def bytes_per_s(self) -> float:
        return self.hbm_bytes_per_s * self.bw_efficiency

    def to_json(self) -> dict:
        return dataclasses.asdict(self)

    def save(self, path: str | Path) -> None:
        try:
            text = json.dumps(self.to_json(), indent=2, allow_nan=False)
        except ValueError as e:
            raise ProfileError(f"device profile {self.name!r} holds a non-finite number ({e})"
                               ) from None
        Path(path).write_text(text, encoding="utf-8")

    @classmethod
    def load(cls, path: str | Path) -> DeviceProfile:
        from .safeio import read_json
        d = read_json(path, ProfileError)  # regular file, size cap, strict JSON
        try:
            # numbers as written (a bool or a string is refused by __post_init__, not cast)
            return cls(name=str(d["name"]), peak_flops={str(k): v for k, v in
                                                        d["peak_flops"].items()},
                       hbm_bytes_per_s=d["hbm_bytes_per_s"],
                       flop_efficiency={str(k): v for k, v in
                                        d.get("flop_efficiency", {}).items()}
                       or dict(DEFAULT_FLOP_EFFICIENCY),
                       bw_efficiency=d.get("bw_efficiency", DEFAULT_BW_EFFICIENCY),
                       source=str(d.get("source", "")))
        except (ValueError, KeyError, TypeError, AttributeError) as e:
            raise ProfileError(f"cannot read device profile {str(path)!r}: "
                               f"{e.__class__.__name__} {e}") from None


def bytes_moved(op: Op, w: Workload, act_bytes: int, weight_bytes: int) -> int:
    """Forward bytes the op reads and writes in device memory (table in the module doc)."""
    rows = w.rows(op.stream)
    if op.kind == "linear":
        return (op.params_total * weight_bytes
                + rows * (op.d_in + op.d_out) * op.active * act_bytes)
    if op.kind == "attn_scores":
        moved = rows * op.heads * (2 * op.d_in + 2 * op.d_out) * act_bytes
        if w.attn_impl != "flash":
            moved += w.batch * op.heads * op.pairs(w) * (4 + act_bytes) * 2
        return moved
    if op.kind in ("attn_context", "attn_keys", "checkpoint"):
        return 0  # counted once, on the scores op; a checkpoint moves nothing
    return 2 * op.saved_bytes(w, act_bytes)


#: weight-only quantised matmuls (int4 / nf4 / fp8 on GPUs without fp8 tensor cores) dequantise
#: their weights to 16 bits inside the kernel: up to WEIGHT_ONLY_KNEE rows (decode batch) the
#: dequantisation hides under the weight reads (Marlin keeps its ~4x int4 speed-up to batch
#: 16-32, Frantar et al. 2024, arXiv:2408.11743); past it the kernel is compute-bound and the
#: dequantisation costs, down to the floor ``flop_efficiency["weight_only"]`` (default 0.5)
#: times the matmul efficiency. Calibratable: a DeviceProfile may carry "weight_only".
WEIGHT_ONLY_KNEE = 32
DEFAULT_WEIGHT_ONLY_FLOOR = 0.5


def weight_only_factor(prof: "DeviceProfile", rows: int) -> float:
    """Fraction of the 16-bit matmul efficiency a weight-only kernel keeps at ``rows`` rows."""
    floor = prof.flop_efficiency.get("weight_only", DEFAULT_WEIGHT_ONLY_FLOOR)
    return max(floor, min(1.0, WEIGHT_ONLY_KNEE / max(rows, 1)))


def roofline_s(flops: float, moved: float, prof: DeviceProfile, op_cls: str, dtype: str) -> float:
    """max(compute time, memory time) of one op on one GPU."""
    t_mem = moved / prof.bytes_per_s
    if flops <= 0:
        return t_mem
    return max(flops / prof.flops_per_s(op_cls, dtype), t_mem)


def _runs_fp8(op: Op) -> bool:
    """Ops an fp8 compute dtype applies to: Linears inside the blocks, not the MoE router (fp8
    training recipes, memory.Fp8Recipe; quantised serving formats)."""
    return op.kind == "linear" and op.layer >= 0 and op.component not in (
        "moe.router", "moe.shared_gate")


def op_times(op: Op, w: Workload, prof: DeviceProfile, dtype: str, act_bytes: int,
             weight_bytes: int, split: int = 1) -> tuple[float, float]:
    """(forward, backward) seconds of one op whose work is split ``split`` ways."""
    cls = op_class(op)
    if dtype == "fp8" and not _runs_fp8(op):  # fp8 recipes: only the blocks' Linears
        dtype = "bf16"
    moved = bytes_moved(op, w, act_bytes, weight_bytes) / split
    skip = w.attn_impl == "flash"  # a fused kernel skips the fully masked (causal) blocks
    fwd = roofline_s(op.fwd_flops(w, skip) / split, moved, prof, cls, dtype)
    bwd = roofline_s(op.bwd_flops(w, skip) / split, 2 * moved, prof, cls, dtype)
    return fwd, bwd


def ops_times(ops, w: Workload, prof: DeviceProfile, dtype: str, act_bytes: int,
              weight_bytes: int, split=lambda op: 1) -> tuple[float, float, float]:
    """The roofline over any ops, one training step of workload ``w``: (forward + backward +
    the forward run again under ``w.recompute`` (``Op.reruns``), backward alone, the attention
    core's forward + backward) seconds. ``split(op)``: how many ways the op's work is divided
    (TP x CP in the planner; 1 on one GPU)."""
    total = bwd_total = attn = 0.0
    ops = tuple(ops)
    again = {id(op) for op in rerun_ops(ops, w)}
    for op in ops:
        if op.kind == "checkpoint":
            continue
        f, b = op_times(op, w, prof, dtype, act_bytes, weight_bytes, split(op))
        total += f + b + (f if id(op) in again else 0.0)
        bwd_total += b
        if op.kind in ("attn_scores", "attn_context"):
            attn += f + b
    return total, bwd_total, attn
