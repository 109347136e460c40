"""Time of one op on one GPU: a roofline with efficiency factors, and the DeviceProfile.

    time(op) = max( flops / (peak[dtype] * flop_efficiency[class]),
                    bytes_moved / (hbm_bytes_per_s * bw_efficiency) )

Op classes and their efficiencies (fractions of the datasheet's dense peak), which depend on
the GPU and on the shape of the op (``op_efficiency``):

    class      | op kinds                       | efficiency
    -----------|--------------------------------|-------------------------------------------------
    matmul     | linear (and eager attention's  | base[GPU] x d / (d + matmul_half_dim), d the
               |   batched matmuls, d = h)      |   smallest local dimension of the GEMM (rows,
               |                                |   in, out after TP): small matmuls under TP are
               |                                |   slower. base and matmul_half_dim are fitted
               |                                |   to the fit set of published runs
               |                                |   (txcalc/data/training_runs.json, GPU_EFFICIENCY)
    attention  | attn_scores, attn_context      | base[GPU] x seq_factor(S) x head_dim_factor(h):
               |   under a fused kernel         |   FlashAttention-2's measured speed by sequence
               |                                |   length and head dimension (FLASH_SEQ_FACTOR,
               |                                |   FLASH_HEAD_DIM_FACTOR; Shah et al. 2024)
    memory     | everything else (norms,        | no matmul FLOPs: bandwidth-bound
               |   activations, loss, lookups)  |
    bandwidth  | all ops (bw_efficiency)        | 0.80: STREAM-like kernels reach ~80-90% of HBM

Every time answer also has a band (``TIME_RATIO_BAND``): the 10th-90th percentile of measured /
predicted step time over the test set of published runs, never fitted.

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
``flop_efficiency`` ({class: fraction}), ``bw_efficiency`` (fraction), ``source`` (free text),
``matmul_half_dim`` (GEMM dimension; absent: 0, no shape dependence) and ``attention_shape``
(true/false; absent: false): a profile saved before shapes mattered loads as it was fitted.
"""

from __future__ import annotations

import dataclasses
import json
import math
from dataclasses import dataclass, field
from pathlib import Path

from ..errors import TxcalcError
from .hardware import Gpu
from .ops import Op, rerun_ops
from .workload import SKIPPED, Workload

#: GPUs with no published runs in the fit set: large bf16 GEMMs reach 70-80% of peak in
#: isolation (cuBLAS); 0.55 leaves room for launch gaps and stragglers at scale. Attention:
#: FlashAttention-2 forward+backward reaches 50-73% on A100 (Dao 2023, arXiv:2307.08691)
DEFAULT_FLOP_EFFICIENCY = {"matmul": 0.55, "attention": 0.45}
#: STREAM-like kernels reach ~80-90% of HBM bandwidth
DEFAULT_BW_EFFICIENCY = 0.80

#: Per GPU (catalog name): the matmul efficiency of a large GEMM (``base`` of the module doc),
#: fitted with MATMUL_HALF_DIM on the fit set of txcalc/data/training_runs.json
#: (``python3 -m txcalc.report.training_validation --fit`` prints them; the test
#: tests/published/test_training_validation.py checks that they are the fit's answer), and the fused
#: attention efficiency at head dimension 128 and long sequences: A100: FlashAttention-2's
#: 50-73% of peak on A100 (Dao 2023, arXiv:2307.08691, abstract), midpoint; H100:
#: FlashAttention-2's 370 TFLOP/s forward at head dim 128, 8k tokens, of the 989 dense bf16
#: peak (Shah et al. 2024, FlashAttention-3, arXiv:2407.08608, Figure 5).
#: The H100's matmul entry is fitted on the five Megatron-Core r0.8.0 H100 fit rows (1.7B,
#: 16B, 70B, 177B, 462B), with the megatron stack's kernels and TP/data-parallel/P2P overlap.
#: H200 and H800 have the H100's GH100 tensor cores (same dense peaks in the catalog): the
#: H100's values; A100 40GB: the A100's.
GPU_EFFICIENCY = {
    "a100-80gb": {"matmul": 0.653, "attention": 0.615},
    "h100-sxm": {"matmul": 0.546, "attention": 0.374},
}
#: goodput: the fraction of a production run's wall-clock time spent on useful training
#: (restarts after failures, checkpoint loads and maintenance take the rest). Grattafiori et
#: al. 2024 (arXiv:2407.21783), section 3.3.4: "for Llama 3, we achieved higher than 90%
#: effective training time ... The effective training time measures the time spent on useful
#: training over the elapsed time." The planner's days, GPU-hours and cost are throughput time
#: / GOODPUT; step time, MFU and tokens/s are throughput (published benchmark runs, as in
#: txcalc.train.published_runs, are compared without it).
GOODPUT = 0.90
GPU_EFFICIENCY_ALIAS = {"a100-40gb": "a100-80gb", "h200": "h100-sxm", "h800": "h100-sxm"}
#: smallest GEMM dimension (after TP) at which a matmul runs at half its large-GEMM efficiency:
#: tensor-core tiles (128 x 256 on A100/H100 cuBLAS kernels) are partly empty and waves
#: quantise below a few thousand; fitted with GPU_EFFICIENCY on the fit set
MATMUL_HALF_DIM = 0.0
#: FlashAttention-2's forward speed relative to its speed at 8k tokens, by sequence length
#: (head dim 128, H100 SXM5; Shah et al. 2024, arXiv:2407.08608, Figure 5: 309, 350, 362, 368,
#: 370, 370 TFLOP/s at 512 ... 16k); interpolated in log2(S), held flat outside
FLASH_SEQ_FACTOR = {512: 309 / 370, 1024: 350 / 370, 2048: 362 / 370, 4096: 368 / 370,
                    8192: 1.0, 16384: 1.0}
#: and by head dimension at 16k tokens, relative to head dim 128 (same figure: 324, 370, 298
#: TFLOP/s at head dim 64, 128, 256)
FLASH_HEAD_DIM_FACTOR = {64: 324 / 370, 128: 1.0, 256: 298 / 370}
#: measured / predicted step time over the test set of published runs: the 10th and 90th
#: percentiles (rounded outward to a measured ratio: published_runs.band), the number of runs
#: they come from (txcalc/data/training_runs.json;
#: ``python3 -m txcalc.report.training_validation`` recomputes them and the test checks them).
#: A time, day or GPU-hour answer T has the band [T x low, T x high]; an MFU M: [M / high, M / low]
TIME_RATIO_BAND = (0.89835, 1.10767)
TIME_BAND_RUNS = 22
TIME_BAND_COVERAGE = 0.8  #: the fraction of measured runs the band claims to hold


def gpu_efficiency(gpu_name: str) -> dict[str, float]:
    """The large-GEMM matmul and fused-attention efficiencies of a catalog GPU (GPU_EFFICIENCY),
    DEFAULT_FLOP_EFFICIENCY for GPUs without published runs."""
    key = GPU_EFFICIENCY_ALIAS.get(gpu_name, gpu_name)
    return dict(GPU_EFFICIENCY.get(key, DEFAULT_FLOP_EFFICIENCY))


def _log_interp(table: dict[int, float], x: float) -> float:
    """Piecewise-linear in log2(x) through the table, flat outside its range."""
    keys = sorted(table)
    if x <= keys[0]:
        return table[keys[0]]
    if x >= keys[-1]:
        return table[keys[-1]]
    for lo, hi in zip(keys, keys[1:]):
        if x <= hi:
            t = (math.log2(x) - math.log2(lo)) / (math.log2(hi) - math.log2(lo))
            return table[lo] + t * (table[hi] - table[lo])
    return table[keys[-1]]  # pragma: no cover (the loop returns)


def matmul_shape_factor(dim: float, half_dim: float) -> float:
    """Fraction of its large-GEMM efficiency a GEMM whose smallest dimension is ``dim`` keeps."""
    if half_dim <= 0:
        return 1.0
    return dim / (dim + half_dim) if dim > 0 else 1.0


def flash_shape_factor(seq: int, head_dim: int) -> float:
    """FlashAttention-2's speed at (seq, head_dim) relative to 8k tokens, head dim 128."""
    return _log_interp(FLASH_SEQ_FACTOR, seq) * _log_interp(FLASH_HEAD_DIM_FACTOR, head_dim)


def time_band(value: float, kind: str = "time") -> tuple[float, float]:
    """(low, high) of an answer from the test-set band: times, days and GPU-hours scale with
    the measured/predicted ratio; throughputs and MFU inversely."""
    lo, hi = TIME_RATIO_BAND
    if kind == "time":
        return value * lo, value * hi
    return value / hi, value / lo
#: compute dtype of the matmuls under each precision policy (fp32 runs on TF32 tensor cores,
#: torch.backends.cuda.matmul.allow_tf32 = True, as Megatron and most trainers set it)
COMPUTE_DTYPE = {"fp32": "tf32", "bf16-mixed": "bf16", "fp16-mixed": "fp16", "bf16": "bf16",
                 "fp16": "fp16",
                 "fp8-mixed": "fp8"}


class ProfileError(TxcalcError):
    """A device profile file that cannot be read or holds impossible values."""


def no_peak(name: str, dtype: str, peaks: dict) -> str:
    """The refusal of a dtype the device has no tensor path for, with the way forward: fp16
    where a GPU without bf16 (T4, V100) has it, as txcalc's default there."""
    hint = ("; run it in fp16 (--precision fp16 when serving, fp16-mixed when training: the "
            "default on this GPU)" if dtype == "bf16" and peaks.get("fp16", 0) > 0 else "")
    return f"device {name} has no {dtype} peak{hint}"


def op_class(op: Op) -> str:
    if op.kind in ("linear", "conv1d", "ssm_scan", "ssd_scan", "gdn_scan"):
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
    #: GEMM dimension of half efficiency (``matmul_shape_factor``); 0 = no shape dependence
    matmul_half_dim: float = MATMUL_HALF_DIM
    #: scale fused attention by FlashAttention-2's measured speed per sequence and head dim
    attention_shape: bool = True

    def __post_init__(self) -> None:
        bad = [f"{k} ({v!r:.40})" for k, v in self.flop_efficiency.items()
               if not _real(v) or not 0 < v <= 1]
        if not _real(self.bw_efficiency) or not 0 < self.bw_efficiency <= 1:
            bad.append(f"bw_efficiency ({self.bw_efficiency!r:.40})")
        if not _real(self.matmul_half_dim) or not 0 <= self.matmul_half_dim <= 1e6:
            bad.append(f"matmul_half_dim ({self.matmul_half_dim!r:.40}, 0 to 1e6)")
        if not isinstance(self.attention_shape, bool):
            bad.append(f"attention_shape ({self.attention_shape!r:.40}, true or false)")
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
        measured = GPU_EFFICIENCY_ALIAS.get(gpu.name, gpu.name) in GPU_EFFICIENCY
        return cls(gpu.name, dict(gpu.peak_flops), gpu.hbm_bytes_per_s,
                   flop_efficiency=gpu_efficiency(gpu.name),
                   source=f"datasheet {gpu.source}; " + (
                       "efficiencies fitted to published runs (timing.GPU_EFFICIENCY)"
                       if measured else "default efficiencies"))

    def replace(self, **changes) -> DeviceProfile:
        if "flop_efficiency" in changes:
            changes["flop_efficiency"] = {**self.flop_efficiency, **changes["flop_efficiency"]}
        return dataclasses.replace(self, **changes)

    def flops_per_s(self, op_cls: str, dtype: str) -> float:
        """Achievable FLOP/s of a class of op in ``dtype``."""
        peak = self.peak_flops.get(dtype, 0.0)
        if peak <= 0:
            raise ProfileError(no_peak(self.name, dtype, self.peak_flops))
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
        from ..safeio import read_json
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
                       source=str(d.get("source", "")),
                       # a profile saved before shapes mattered was fitted without them
                       matmul_half_dim=d.get("matmul_half_dim", 0.0),
                       attention_shape=d.get("attention_shape", False))
        except (ValueError, KeyError, TypeError, AttributeError) as e:
            raise ProfileError(f"cannot read device profile {str(path)!r}: "
                               f"{e.__class__.__name__} {e}") from None


def bytes_moved(op: Op, w: Workload, act_bytes: int, weight_bytes: int) -> int:
    """Forward bytes the op reads and writes in device memory (table in the module doc)."""
    rows = w.rows(op.stream, op.pad_to)
    if op.kind == "linear":
        return (op.params_total * weight_bytes
                + rows * (op.d_in + op.d_out) * op.active * act_bytes)
    if op.kind == "attn_scores":
        moved = rows * op.heads * (2 * op.d_in + 2 * op.d_out) * act_bytes
        if not op.fused_attn(w):
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
    return weight_only_share(prof.flop_efficiency.get("weight_only", DEFAULT_WEIGHT_ONLY_FLOOR),
                             rows)


def weight_only_share(floor: float, rows: int) -> float:
    """``weight_only_factor`` from the profile's floor: min(1, knee / rows), at least floor."""
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


def op_efficiency(op: Op, w: Workload, prof: DeviceProfile, tp: int = 1) -> float:
    """Fraction of the dense peak the op's FLOPs run at on one GPU (module doc): the GPU's
    base efficiency of its class times the shape factor of its local GEMM (``tp``: the TP
    degree splitting its weight) or of its fused attention kernel."""
    cls = op_class(op)
    base = prof.flop_efficiency.get(cls, DEFAULT_FLOP_EFFICIENCY.get(cls, 1.0))
    if op.kind == "linear":
        rows = w.rows(op.stream, op.pad_to) * op.active / max(op.instances, 1)  # per expert
        d_in, d_out = op.d_in, op.d_out
        if op.tp == "rowwise":
            d_in = d_in / tp
        elif op.tp in ("colwise", "vocab"):
            d_out = d_out / tp
        return base * matmul_shape_factor(min(rows, d_in, d_out), prof.matmul_half_dim)
    if op.kind in ("attn_scores", "attn_context"):
        head_dim = op.d_in if op.kind == "attn_scores" else op.d_out
        if not op.fused_attn(w):  # batched GEMMs over the head dimension
            return prof.flop_efficiency.get("matmul", DEFAULT_FLOP_EFFICIENCY["matmul"]) * \
                matmul_shape_factor(head_dim, prof.matmul_half_dim)
        if prof.attention_shape:
            return base * flash_shape_factor(w.length(op.kv_stream or op.stream, op.pad_to),
                                             head_dim)
    return base


def op_times(op: Op, w: Workload, prof: DeviceProfile, dtype: str, act_bytes: int,
             weight_bytes: int, split: int = 1, tp: int = 1) -> tuple[float, float]:
    """(forward, backward) seconds of one op whose work is split ``split`` ways, ``tp`` of them
    by tensor parallelism (which shrinks its GEMM: ``op_efficiency``)."""
    if op.stream == SKIPPED:  # a block that does not run (components.text_only) moves nothing
        return 0.0, 0.0
    cls = op_class(op)
    if dtype == "fp8" and not _runs_fp8(op):  # fp8 recipes: only the blocks' Linears
        dtype = "bf16"
    moved = bytes_moved(op, w, act_bytes, weight_bytes) / split
    skip = op.fused_attn(w)  # a fused kernel skips the fully masked (causal) blocks
    fwd_flops, bwd_flops = op.fwd_flops(w, skip) / split, op.bwd_flops(w, skip) / split
    if fwd_flops <= 0 and bwd_flops <= 0:
        return (roofline_s(0, moved, prof, cls, dtype),
                roofline_s(0, 2 * moved, prof, cls, dtype))
    peak = prof.peak_flops.get(dtype, 0.0)
    if peak <= 0:
        raise ProfileError(no_peak(prof.name, dtype, prof.peak_flops))
    rate = peak * op_efficiency(op, w, prof, tp)
    t_mem = moved / prof.bytes_per_s
    return max(fwd_flops / rate, t_mem), max(bwd_flops / rate, 2 * t_mem)


def ops_times(ops, w: Workload, prof: DeviceProfile, dtype: str, act_bytes: int,
              weight_bytes: int, split=lambda op: 1,
              tp=lambda op: 1) -> tuple[float, float, float]:
    """The roofline over any ops, one training step of workload ``w``: (forward + backward +
    the forward run again under ``w.recompute`` (``Op.reruns``), backward alone, the attention
    core's forward + backward) seconds. ``split(op)``: how many ways the op's work is divided
    (TP x CP in the planner; 1 on one GPU); ``tp(op)``: the TP part of it."""
    total = bwd_total = attn = 0.0
    ops = tuple(ops)
    again = {id(op) for op in rerun_ops(ops, w)}
    for op in ops:
        if op.kind == "checkpoint":
            continue
        f, b = op_times(op, w, prof, dtype, act_bytes, weight_bytes, split(op), tp(op))
        total += f + b + (f if id(op) in again else 0.0)
        bwd_total += b
        if op.kind in ("attn_scores", "attn_context"):
            attn += f + b
    return total, bwd_total, attn
