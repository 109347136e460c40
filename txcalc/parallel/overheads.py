"""Framework memory outside the engine's tensors (``Overheads``): the CUDA context,
communication buffers and the caching allocator's slack, one rule for plan train and plan
infer (and fit over N > 1 GPUs, through the planner). What one training process on one GPU
shows (allocator statistics, nvidia-smi) is txcalc.engine.device's ``device_memory``.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..engine.hardware import Gpu
from ..engine.timing import DeviceProfile

GiB = 2**30


def _whole(x):
    """``x`` truncated to whole bytes: a Python int, or int64 elementwise for a numpy array."""
    return x.astype("int64") if getattr(x, "ndim", 0) else int(x)


@dataclass(frozen=True)
class Overheads:
    """Framework memory outside the engine's tensors; defaults are typical, override them.

    cuda_context_bytes: CUDA context, cuBLAS/cuDNN workspaces and kernels loaded (what
    ``torch.cuda.mem_get_info`` shows used before the first tensor: 0.5-1 GiB on H100).
    comm_buffer_bytes: NCCL channel buffers and DDP/FSDP buckets when more than one GPU.
    fragmentation: caching-allocator slack as a fraction of the tensors' bytes.
    zero3_prefetch_blocks: all-gathered blocks alive under ZeRO-3 (the current one and the
    prefetched next one).
    """

    cuda_context_bytes: int = 1 * GiB
    comm_buffer_bytes: int = GiB // 2
    fragmentation: float = 0.05
    zero3_prefetch_blocks: int = 2

    def __post_init__(self) -> None:
        from .layout import LayoutError
        bad = [f"{k} ({getattr(self, k)!r})" for k in ("cuda_context_bytes",
                                                        "comm_buffer_bytes",
                                                        "zero3_prefetch_blocks")
               if not isinstance(getattr(self, k), int) or getattr(self, k) < 0]
        if not isinstance(self.fragmentation, (int, float)) or not 0 <= self.fragmentation < 1:
            bad.append(f"fragmentation ({self.fragmentation!r}, a fraction in [0, 1))")
        if bad:
            raise LayoutError("framework overheads must be non-negative integers (fragmentation "
                              "a fraction): " + ", ".join(bad))

    def fixed_bytes(self, gpus=1):
        """The fixed framework bytes on each GPU: the CUDA context, plus the communication
        buffers when the job spans more than one GPU (elementwise over a numpy array of
        GPU counts)."""
        return self.cuda_context_bytes + _whole(self.comm_buffer_bytes * (gpus > 1))

    def framework_bytes(self, tensor_bytes, gpus=1):
        """The framework's bytes on one GPU beside ``tensor_bytes`` of tensors: the fixed bytes
        and the caching allocator's slack, fragmentation x the tensors' bytes (truncated). The
        one rule for fit, plan train (elementwise over numpy arrays of layouts: ``gpus`` the
        layouts' GPU counts) and plan infer."""
        return self.fixed_bytes(gpus) + _whole(tensor_bytes * self.fragmentation)

    def device_bytes(self, tensor_bytes, gpus=1):
        """What the GPU shows used for ``tensor_bytes`` of tensors: the tensors and the
        framework's bytes (``framework_bytes``)."""
        return tensor_bytes + self.framework_bytes(tensor_bytes, gpus)

    def tensor_budget(self, capacity_bytes: int, gpus: int = 1) -> int:
        """The most tensor bytes a GPU of ``capacity_bytes`` holds under ``device_bytes``'
        rule (its inverse, rounded down)."""
        return int((capacity_bytes - self.fixed_bytes(gpus)) / (1 + self.fragmentation))

    @classmethod
    def from_gib(cls, cuda_context_gib: float | None = None, comm_buffer_gib: float | None = None,
                 fragmentation: float | None = None) -> Overheads:
        """Defaults, with the given ones replaced (GiB = 2^30 bytes)."""
        from ..inputs import OVERHEAD_GIB_MAX, number
        cuda_context_gib = number("cuda_context_gib", cuda_context_gib, 0, OVERHEAD_GIB_MAX,
                                  lo_open=False, none=True)
        comm_buffer_gib = number("comm_buffer_gib", comm_buffer_gib, 0, OVERHEAD_GIB_MAX,
                                 lo_open=False, none=True)
        fragmentation = number("fragmentation", fragmentation, 0, 1, lo_open=False,
                               hi_open=True, none=True)
        d = cls()
        return cls(d.cuda_context_bytes if cuda_context_gib is None
                   else int(cuda_context_gib * GiB),
                   d.comm_buffer_bytes if comm_buffer_gib is None else int(comm_buffer_gib * GiB),
                   d.fragmentation if fragmentation is None else fragmentation)


def check_plan_args(gpu, gpu_file, profile, overheads) -> None:
    """Arguments plan_train and plan_infer share, checked at their entry (txcalc.inputs)."""
    from .. import inputs as I
    if not isinstance(gpu, Gpu):
        I.text("gpu", gpu, max_len=200)
    I.path_text("gpu_file", gpu_file, none=True)
    if profile is not None and not isinstance(profile, DeviceProfile):
        raise I.InputError(f"profile ({I.show(profile)}) must be a DeviceProfile or None")
    if overheads is not None and not isinstance(overheads, Overheads):
        raise I.InputError(f"overheads ({I.show(overheads)}) must be an Overheads or None")
