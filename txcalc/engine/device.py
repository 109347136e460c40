"""Memory that is not tensors, for one training process on one GPU: what PyTorch's allocator
statistics and nvidia-smi show (``device_memory``: memory --json's allocated, reserved and
device bytes, what fit compares with the GPU). Plans keep parallel.overheads.Overheads.

    figure          | what it holds                                  | torch / tool
    ----------------|------------------------------------------------|-------------------------
    allocated_bytes | the engine's peak tensor bytes + the cuBLAS    | max_memory_allocated()
                    |  workspaces (cublas_workspace_bytes, one per   |
                    |  handle and stream: the forward thread's and   |
                    |  the autograd engine's backward thread's)      |
    reserved_bytes  | allocated + the allocator's slack              | max_memory_reserved()
                    |  (``fragmentation`` x the tensors: freed       |
                    |  blocks of other sizes, e.g. recompute's       |
                    |  transients), the workspaces' own segments     |
                    |  (a request of 1-10 MiB gets a kLargeBuffer    |
                    |  20 MiB segment), rounded to kRoundLarge 2 MiB |
    context_bytes   | the CUDA context: driver, kernels loaded       | mem_get_info() used
                    |  lazily (CUDA >= 11.7), outside the allocator  |  before the first tensor
    paged_bytes     | optimizer states in CUDA managed memory        | nvidia-smi only (when
                    |  (bitsandbytes' paged optimizers, outside the  |  resident)
                    |  allocator: optimizers.paged_state_bytes)      |
    device_bytes    | reserved + context + paged                     | nvidia-smi (the process)
    need_bytes      | reserved + context + the paged states that     | what must fit the GPU
                    |  must be resident at once (the largest         |  (fit's figure); the
                    |  tensor's: optimizers.paged_working_bytes)     |  other paged states
                    |                                                |  wait on the host

The per-tensor 512-byte rounding of small requests (kMinBlockSize) adds under 1e-4 of a
training step's bytes and is left out of allocated_bytes.
"""

from __future__ import annotations

from dataclasses import dataclass

MiB = 2**20

#: PyTorch's CUDA caching allocator (c10/cuda/CUDACachingAllocator.cpp): requests round up to
#: kMinBlockSize (512 B); requests up to kSmallSize (1 MiB) share kSmallBuffer (2 MiB)
#: segments; from kMinLargeAlloc (10 MiB) a request gets its own segment rounded up to
#: kRoundLarge (2 MiB); between, a kLargeBuffer (20 MiB) segment (the cuBLAS workspace of
#: 8,519,680 B in a 20,971,520-byte segment in a memory_snapshot(), discuss.pytorch.org
#: "unexpected 8519680b memory allocation during matrix multiplication")
ALLOC_MIN_BLOCK = 512
ALLOC_SMALL = 2**20
ALLOC_MIN_LARGE = 10 * 2**20
ALLOC_ROUND_LARGE = 2 * 2**20
ALLOC_LARGE_BUFFER = 20 * 2**20

#: the CUDA context with lazy module loading (CUDA >= 11.7, PyTorch's default): "around
#: 400MB" (ptrblck, pytorch/pytorch#109888), "~300MB" on another card (#107667); before 11.7
#: every kernel loaded at once, over 1000 MB. No per-generation measurement is held here: one
#: figure for every NVIDIA generation (``--safety`` keeps a margin on top)
CUDA_CONTEXT_BYTES = 400 * MiB

#: catalog GPUs of compute capability 9.0 or more (NVIDIA's CUDA GPUs list: Hopper 9.0,
#: Blackwell 10.0), whose cuBLAS workspace PyTorch sizes 32 MiB
SM90_PLUS = ("h100-sxm", "h100-pcie", "h200", "h800", "h20", "b200", "gb200")


def cublas_workspace_bytes(gpu_name: str | None) -> int:
    """One cuBLAS workspace as PyTorch allocates it from the caching allocator
    (aten/src/ATen/cuda/CublasHandlePool.cpp ``parseChosenWorkspaceSize``, one per handle and
    stream; cuBLASLt shares it by default, TORCH_CUBLASLT_UNIFIED_WORKSPACE): on compute
    capability 9.0 ":4096:8" = 32 MiB, else ":4096:2:16:8" = 4096 KiB x 2 + 16 KiB x 8 =
    8,519,680 B. A GPU outside ``SM90_PLUS`` (or none named) takes the latter."""
    return 4096 * 8 * 1024 if gpu_name in SM90_PLUS else 4096 * 1024 * 2 + 16 * 1024 * 8


def segment_bytes(nbytes: int) -> int:
    """The reserved segment one request of ``nbytes`` opens on its own (the allocator's
    rules above): 2 MiB for a small one, kLargeBuffer for 1-10 MiB, else rounded to 2 MiB."""
    if nbytes <= ALLOC_SMALL:
        return ALLOC_ROUND_LARGE
    if nbytes < ALLOC_MIN_LARGE:
        return ALLOC_LARGE_BUFFER
    return -(-nbytes // ALLOC_ROUND_LARGE) * ALLOC_ROUND_LARGE


#: cuBLAS handles a training step uses: the main thread's (forward) and the autograd engine's
#: device thread's (backward), each with its workspace (handle, stream)
TRAIN_CUBLAS_HANDLES = 2


@dataclass(frozen=True)
class DeviceMemory:
    """One training process on one GPU: the module docstring's table, in bytes."""
    tensor_bytes: int  #: the engine's peak (TrainingMemory.total)
    allocated_bytes: int
    reserved_bytes: int
    context_bytes: int
    workspace_bytes: int  #: the cuBLAS workspaces (in allocated_bytes)
    #: optimizer states in managed memory, outside the allocator (TrainingMemory.
    #: paged_optimizer_bytes), counted resident: what nvidia-smi shows when they fit
    paged_bytes: int = 0
    #: of those, what must be on the GPU at once (TrainingMemory.paged_working_bytes)
    paged_working_bytes: int = 0

    @property
    def device_bytes(self) -> int:
        """What nvidia-smi shows for the process: reserved + the CUDA context + the paged
        optimizer states (all resident: the GPU has room for them)."""
        return self.reserved_bytes + self.context_bytes + self.paged_bytes

    @property
    def need_bytes(self) -> int:
        """What must fit the GPU: ``device_bytes`` with only the paged states that must be
        resident at once (the others are paged to the host when the GPU is full)."""
        return self.reserved_bytes + self.context_bytes + self.paged_working_bytes

    def to_json(self) -> dict:
        return {"allocated_bytes": self.allocated_bytes, "reserved_bytes": self.reserved_bytes,
                "cuda_context_bytes": self.context_bytes,
                "cublas_workspace_bytes": self.workspace_bytes,
                "paged_optimizer_bytes": self.paged_bytes,
                "paged_working_bytes": self.paged_working_bytes,
                "device_bytes": self.device_bytes, "need_bytes": self.need_bytes}


#: the allocator's slack over the tensors' peak where nothing better is known
#: (parallel.overheads.Overheads' default); a recipe may state its own
#: (engine.recipes.Recipe.reserved_slack)
FRAGMENTATION = 0.05


def device_memory(tensor_bytes: int, gpu_name: str | None = None,
                  fragmentation: float = FRAGMENTATION, paged_bytes: int = 0,
                  paged_working_bytes: int = 0) -> DeviceMemory:
    """``DeviceMemory`` of a training step whose tensors peak at ``tensor_bytes``:
    ``fragmentation`` the allocator's slack as a fraction of the tensors (``Overheads``'
    default, 5 %), the cuBLAS workspaces of ``gpu_name`` (``cublas_workspace_bytes``), the
    CUDA context (``CUDA_CONTEXT_BYTES``); ``paged_bytes``: managed memory outside the allocator
    (paged optimizer states), on the device only, ``paged_working_bytes`` of it resident at
    once."""
    ws = cublas_workspace_bytes(gpu_name)
    workspaces = TRAIN_CUBLAS_HANDLES * ws
    slack = int(tensor_bytes * fragmentation)
    reserved = -(-(tensor_bytes + slack) // ALLOC_ROUND_LARGE) * ALLOC_ROUND_LARGE \
        + TRAIN_CUBLAS_HANDLES * segment_bytes(ws)
    return DeviceMemory(tensor_bytes, tensor_bytes + workspaces, reserved, CUDA_CONTEXT_BYTES,
                        workspaces, paged_bytes, paged_working_bytes)
