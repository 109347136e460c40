"""Serving: KV-cache capacity as a paged-attention engine sizes it, and a step-level simulator
of continuous batching with chunked prefill.

KV capacity (vLLM's ``determine_num_available_blocks``: profile one forward of the largest
batch, then give what is left of the utilisation budget to KV blocks):

    quantity                 | value
    -------------------------|-------------------------------------------------------------------
    total_bytes              | what CUDA reports: the catalog's capacity x CUDA_VISIBLE_FRACTION
    budget_bytes             | total_bytes x gpu_memory_utilization
    weights_bytes            | the pipeline stage's share of the stored weights on one
                             |   TP rank (``sharding.local_params``, ``formats`` for quantised);
                             |   for vLLM as its loader allocates them: one tensor per fused
                             |   group, each a caching-allocator block (``allocated_bytes``),
                             |   plus the rotary cos/sin cache (``vllm_weights_bytes``)
    activation_peak_bytes    | the profiled forward of max_num_batched_tokens tokens: the largest
                             |   of (a) a fused GEMM group and its consumer live, with the layer
                             |   input the model's loop holds and, at TP > 1, the out-of-place
                             |   all-reduce's copy (``activation_peak_bytes``) and (b) the
                             |   sampler over max_num_seqs rows of logits (V0's top-k/top-p sort
                             |   for vllm-0.6.5: V0_SORT_BYTES_PER_LOGIT)
    non_torch_bytes          | what the engine's vLLM version counts as non-torch memory (the
                             |   version table below: the memory added since start-up for
                             |   today's vLLM, the whole CUDA context for older ones)
    cuda_graph_bytes         | 0 inside the budget: vLLM captures its graphs after sizing the
                             |   cache, above the utilisation limit (CUDA_GRAPH_NOTE)
    kv_cache_bytes           | budget - weights - activation peak - non-torch - graphs
                             |   - max_num_seqs x the state-space layers' state per
                             |   sequence (conv + SSM state; vLLM's Mamba cache holds one
                             |   per schedulable sequence)
    block_bytes              | block_size x the KV bytes of one token on one GPU
                             |   (``stage_cache_bytes``: the stage's own attention layers,
                             |   ``kvcache.cache_bytes``; heads split over min(tp, K))
    kv_blocks                | kv_cache_bytes // block_bytes

    kv_tokens                | kv_blocks x block_size
    max_concurrency          | kv_tokens / max_model_len (vLLM's "Maximum concurrency" line)
    prefix_shared_blocks     | with a prefix-cache hit rate h: the blocks of a prefix of h x
                             |   max_model_len tokens (whole blocks, at most max_model_len - 1)
                             |   that every sequence shares, stored once
    max_concurrency_prefix   | (kv_tokens - shared tokens) / (max_model_len - shared tokens)

Every pipeline stage sizes its cache from its own layers and its own weights (the weights,
kv_cache and block rows above are that stage's); the replica gets the fewest blocks of any
stage, as vLLM takes the minimum of its workers' block counts. A stage without attention
layers (state-space blocks only) caches no tokens and does not limit the count.

TensorRT-LLM (``engine="trtllm"``) sizes its cache from what is free once the engine is
loaded, not from a budget: kv_cache_bytes = kv_cache_free_gpu_mem_fraction (default 0.9) x
(total - weights - activations - non-torch) ("Allocate N bytes for k/v cache", "Using T tokens
in paged KV cache"), in blocks of ``tokens_per_block`` (default TRTLLM_BLOCK_SIZE).

vLLM versions differ in what the profile counts (each test names the version of its log):

    version         | non-KV memory subtracted from total x utilisation
    ----------------|----------------------------------------------------------------------------
    v0.2 - v0.6.3   | total - free after the profile run: weights, activation peak, CUDA context,
                    |   NCCL buffers and whatever the caching allocator still reserves (PR #2031;
                    |   from v0.3.2 less what was in use at start-up, PR #2863, so the context
                    |   made before that drops out and kernels loaded later stay)
    v0.6.4          | torch peak (weights + activations) + non-torch memory in use after the
                    |   profile, CUDA context included (PR #9352: 0.35 GiB on an RTX 3090)
    v0.6.5 - v0.6.6 | weights + activation peak + non-torch memory since start-up measured
                    |   against torch's *allocated* bytes (PR #10511), so the caching allocator's
                    |   unreleased slack counts as non-torch (PR #11809: "does not include the
                    |   memory allocated from cudaMalloc but cannot be released"): 1.79 GiB on
                    |   an H100 at TP 1, 3.58 GiB at TP 2 (PR #10511's sanity checks)
    v0.7 on (V0),   | weights + activation peak + non-torch memory *added since start-up*,
    V1 from v0.9.2  |   measured against torch's reserved bytes (PRs #11809, #12126; V1 reuses
                    |   V0's ``memory_profiling``, PR #19312): the CUDA context is in the
                    |   start-up snapshot and drops out; what stays is the kernel modules CUDA's
                    |   lazy loading adds during load and profile, and at TP x PP > 1 the NCCL
                    |   communicators and custom all-reduce buffers, which the worker creates
                    |   after the snapshot (vllm/worker/worker.py ``init_device`` of v0.7.3:
                    |   ``self.baseline_snapshot = MemorySnapshot()``, then
                    |   ``init_worker_distributed_environment``; V1's gpu_worker takes its
                    |   ``init_snapshot`` there too and profiles against it). cuBLAS
                    |   workspaces are torch allocations (in the activation peak)

Chunked prefill profiles one chunk past 32K tokens: 512 tokens up to v0.6.4 (vLLM docs,
"Performance and Tuning": "512 is the default max_num_batched_tokens for chunked prefill"),
2,048 from v0.6.5 (PR #10544); V1 its 8192-token budget.

The non-torch term of each rule, and where its constant comes from (calibration logs, never a
row a test checks; tests/published/test_vllm_logs.py names both):

    engine      | profiled step (max_num_batched_tokens default)  | non-torch term
    ------------|--------------------------------------------------|-------------------------------
    vllm-v1     | max(max_model_len, 2048), V1_CHUNK past 32K      | V1_NON_TORCH_BYTES (0.16 GiB,
                |                                                  |   PR #12126, H100 TP 1) + at
                |                                                  |   tp x pp > 1 V1_COMM_BYTES
                |                                                  |   (0.09 GiB: issue #13061's
                |                                                  |   0.25 GiB at TP 2 less it)
    vllm-0.6.5  | max(max_model_len, 2048), 2,048 past 32K         | the planner's Overheads context
                |                                                  |   (1 GiB; no log calibrates the
                |                                                  |   allocator slack) + at TP > 1
                |                                                  |   vllm_nccl_bytes on NVSwitch
                |                                                  |   GPUs (else Overheads' 0.5)
    vllm-0.6    | max(max_model_len, 2048), V0_CHUNK past 32K      | V064_CUDA_CONTEXT_BYTES (+ the
                |                                                  |   planner's NCCL): v0.6.4
    vllm-0.2    | max(max_model_len, 2048) (no chunked prefill)    | Overheads' context +
                |                                                  |   vllm_nccl_bytes (as above) +
                |                                                  |   the profile's all-reduce
                |                                                  |   inputs, still reserved

Communicators (``serve.nccl.vllm_nccl_bytes``, engines vllm-0.2 and vllm-0.6.5, TP > 1 in one NVSwitch
node): NCCL's own GPU buffers, read from the code of the NCCL those releases ran (2.18.1 for
PyTorch 2.1, 2.21.5 for PyTorch 2.5.1): per communicator, every coll channel's P2P connections
(ring and intra-node chain) and the NET shared P2P buffer made at init
(``nccl_communicator_bytes``); for v0.6.5 also the P2P channels its profile's logits gather
connects and its custom all-reduce buffers. The count of communicators is vLLM's own code
(two in both releases at PP 1). No log calibrates it: NVIDIA/nccl issue #964's 544 and 688 MB
per A100 communicator are reproduced as a check (tests/published/test_vllm_logs.py).

``engine`` picks the rule (``vllm`` = ``vllm-v1``, today's vLLM). An ``Overheads`` the caller
gives (plan's --cuda-context-gib) replaces the engine's term with its context (+ its
communication buffers past one GPU), whatever its values, the defaults included; without one
(``overheads=None``) each engine's own rule holds. Measured terms are quoted beside each test
and xfail in tests/published/test_serving.py and tests/published/test_vllm_logs.py.

vllm-0.2: ``peak_memory = total_gpu_memory - free_gpu_memory`` after ``profile_run`` (PR #2031,
"Fix peak memory profiling") counts what the caching allocator still reserves. Before
vLLM set TORCH_NCCL_AVOID_RECORD_STREAMS=1 (vllm/worker/worker.py, init_device: "torch.
distributed.all_reduce does not free the input tensor until the synchronization point. This
causes the memory usage to grow as the number of all_reduce calls increases"; discuss.pytorch
.org/t/191573), every TP all-reduce input of the profiled forward (one per row-parallel Linear
and one for the vocab-parallel embedding: tokens x d_model activations each) stays reserved
until the profile's synchronize: ``held_allreduce_bytes``.

Only the engine's own functions give the per-token KV bytes, the weights and the op widths;
nothing here is fitted to the logs the tests compare against (tests/published/test_serving.py,
tests/published/test_vllm_logs.py): the two V1 constants come from calibration logs named there.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from ..model.config import ModelConfig
from ..errors import TxcalcError
from ..engine.hardware import CUDA_VISIBLE_FRACTION  # noqa: F401  (re-exported; Gpu.usable_bytes)
from ..units import GB, cdiv
from .nccl import vllm_nccl_bytes

#: vLLM's defaults (vllm/engine/arg_utils.py): --gpu-memory-utilization 0.9, --block-size 16,
#: --max-num-seqs 256
DEFAULT_UTILIZATION = 0.9
DEFAULT_BLOCK_SIZE = 16
DEFAULT_MAX_NUM_SEQS = 256
#: TensorRT-LLM: KvCacheConfig.free_gpu_memory_fraction (``kv_cache_free_gpu_mem_fraction``)
#: defaults to 0.9 of the memory free after the engine loads; trtllm-build's tokens_per_block 64
DEFAULT_FREE_FRACTION = 0.9
TRTLLM_BLOCK_SIZE = 64
#: "vllm" is "vllm-v1"; the versioned names pick the profile rule of those vLLM releases
#: (VLLM_RULES, module docstring)
ENGINES = ("vllm", "vllm-v1", "vllm-0.6.5", "vllm-0.6", "vllm-0.2", "trtllm")
#: the sizing rule of a scheduler profile name (serve.sched) that has none of its own: vLLM V0's
#: last release profile for vllm-v0; vLLM V1's for sglang (an assumption: SGLang sizes its pool
#: by mem_fraction_static, not modelled)
KV_RULES = {"vllm-v0": "vllm-0.6.5", "sglang": "vllm"}


def kv_rule(engine: str) -> str:
    """The ENGINES sizing rule of an --engine name."""
    return KV_RULES.get(engine, engine)
#: V0's default chunk when chunked prefill is on (vLLM docs, "Performance and Tuning": "512 is
#: the default max_num_batched_tokens for chunked prefill"), up to v0.6.4 (PR #10544 made it
#: 2,048 in v0.6.5): the step vllm-0.6 profiles past CHUNKED_PREFILL_ABOVE tokens (issue
#: #10517's 35k log, tests/published/test_vllm_logs.py); V1 profiles its 8,192-token budget
V0_CHUNK = 512
V065_CHUNK = 2048
V1_CHUNK = 8192
BLOCK_SIZES = (1, 8, 16, 32, 64, 128, 256)
#: vLLM V0 turned chunked prefill on by default past 32K tokens of max_model_len
#: (vllm/engine/arg_utils.py); the profile then runs one chunk, not the whole length
CHUNKED_PREFILL_ABOVE = 32768
#: the sampler's live copies of the logits, bytes per element: the model's bf16 logits, their
#: fp32 copy, the fp32 probabilities and the fp32 log-probabilities (vLLM's Sampler:
#: ``logits.to(torch.float)``, ``softmax``, ``log_softmax``)
SAMPLER_BYTES_PER_LOGIT = 2 + 4 + 4 + 4
#: vLLM V0's profile samples every dummy sequence with ``SamplingParams(top_p=0.99,
#: top_k=vocab_size - 1)`` ("Enable top-k sampling to reflect the accurate memory usage",
#: vllm/worker/model_runner.py ``profile_run``/``_dummy_run`` of v0.6.5 and v0.7.1), so the
#: Sampler (vllm/model_executor/layers/sampler.py) runs ``_apply_top_k_top_p``, whose
#: ``logits.sort(dim=-1)`` is the sampler's peak. Bytes per logit live during that sort, on the
#: driver rank, which holds the whole vocabulary (``tensor_model_parallel_gather``):
#:   2  the model's logits (bf16, still referenced by ``execute_model``)
#:   4  their fp32 copy (``logits = logits.to(torch.float)``)
#:   4  the sorted values and 8 the int64 indices (``sort``'s outputs)
#:   8  int64 "reverse indices" PyTorch fills as cub's values input (aten/src/ATen/native/cuda/
#:      SortStable.cu ``segmented_sort_pairs``, taken for 128 rows or more)
#:   4 + 8  cub's third key and value buffers in its temporary storage
#:      (``cub::DeviceSegmentedRadixSort::SortPairs`` without a DoubleBuffer, as
#:      ATen/cuda/cub.cuh calls it)
V0_SORT_BYTES_PER_LOGIT = 2 + 4 + 4 + 8 + 8 + 4 + 8
#: vLLM releases whose V0 profile sorts the logits, as above (engine names); the logs of the
#: other V0 rules show no such share (tests/published/test_vllm_logs.py), so their sampler term stays
#: SAMPLER_BYTES_PER_LOGIT over the rank's vocabulary shard
V0_SORT_ENGINES = ("vllm-0.6.5",)
#: engines whose tensor-parallel all-reduce is out of place: ``GroupCoordinator.all_reduce``
#: calls ``torch.ops.vllm.all_reduce`` -> ``_all_reduce_out_place``, and pynccl's
#: ``all_reduce`` returns ``torch.empty_like(in_tensor)`` ("PyTorch custom ops do not support
#: mutation ... So we always make the all-reduce operation out-of-place",
#: vllm/distributed/parallel_state.py of v0.6.5 and v0.7.1): while a row-parallel Linear's
#: result is reduced, its partial sum and the reduced copy are both live
OUT_OF_PLACE_ALLREDUCE_ENGINES = ("vllm", "vllm-v1", "vllm-0.6.5")
#: HF architectures vLLM serves with vllm/model_executor/models/llama.py (its registry, v0.7.1:
#: the entries mapped to ("llama", "LlamaForCausalLM")). LlamaMLP.forward rebinds the fused
#: gate_up output (``x, _ = self.gate_up_proj(x); x = self.act_fn(x)``), so it is freed before
#: down_proj runs; every other vLLM model file with a fused gate_up (qwen2.py, gemma2.py,
#: qwen2_moe.py, deepseek_v2.py, commandr.py, ... in v0.6.5 and v0.7.1) keeps it
#: (``gate_up, _ = self.gate_up_proj(x); x = self.act_fn(gate_up)``) until forward returns.
#: ``architecture=None`` takes the config.json's or the preset's class, and llama.py's rule
#: when neither names one.
VLLM_LLAMA_ARCHITECTURES = ("LlamaForCausalLM", "LLaMAForCausalLM", "MistralForCausalLM",
                            "AquilaForCausalLM", "AquilaModel", "InternLMForCausalLM",
                            "InternLM3ForCausalLM", "XverseForCausalLM", "LlamaModel",
                            "MistralModel")
#: PyTorch's CUDA caching allocator (c10/cuda/CUDACachingAllocator.cpp), whose counts vLLM's
#: "model weights take" reads (``torch.cuda.max_memory_allocated()`` right after
#: ``reset_peak_memory_stats()``, i.e. the allocated bytes: vllm/platforms/cuda.py
#: ``get_current_memory_usage``): requests round up to kMinBlockSize (512 B); from
#: kMinLargeAlloc (10 MiB) a request gets its own segment rounded up to kRoundLarge (2 MiB), and
#: the block is split from it only when more than kSmallSize (1 MiB) would remain
#: (``should_split``); the constants live in engine/device.py, beside the training side's
#: reserved-bytes rule
from ..engine.device import (ALLOC_MIN_BLOCK, ALLOC_MIN_LARGE,  # noqa: E402,F401
                             ALLOC_ROUND_LARGE, ALLOC_SMALL)
#: What vLLM v0.6.4 (engine "vllm-0.6") logs as non_torch_memory at TP 1: CUDA's memory in use
#: less torch's allocations after the profile (PR #9352), i.e. the CUDA context alone, as
#: cuBLAS's workspaces are torch allocations. With lazy module loading (CUDA >= 11.7, on by
#: default in PyTorch) "the first CUDA operation will create the CUDA context which uses around
#: 400MB" (ptrblck, https://github.com/pytorch/pytorch/issues/109888, 2023-09-23; nvidia-smi's
#: MiB). At TP x PP > 1 the planner's NCCL term is added. Other engines, and a context size the
#: caller gives (Overheads other than the default), keep Overheads.
V064_CUDA_CONTEXT_BYTES = 400 * 2**20
#: vllm-v1 (vLLM v0.7 on, V0 and V1): the non-torch memory added since the start-up snapshot at
#: TP 1, i.e. kernel modules CUDA loads lazily while the model loads and the profile runs (the
#: context itself is in the snapshot). Calibration log, vllm-project/vllm PR #12126 (youkaichao,
#: 2025-01-16, H100-80G, Llama-3.2-11B-Vision, TP 1): "non_torch_memory takes 0.16GiB"
V1_NON_TORCH_BYTES = int(0.16 * 2**30)
#: vllm-v1 at TP x PP > 1: the NCCL communicators and custom all-reduce buffers the worker creates
#: after the snapshot, added to V1_NON_TORCH_BYTES. Calibration log, vllm-project/vllm issue
#: #13061 (stg609, 2025-02-11, 2 x RTX 4090, DeepSeek-R1-Distill-Qwen-14B, TP 2, v0.7 V0
#: worker): "non_torch_memory takes 0.25GiB", less the TP 1 term. The issue quotes one worker's
#: line; its cache holds 81,536 tokens, 1.2 GiB less than that line's 8.69 GiB of KV, so the
#: other rank (the driver, which also samples) held more non-KV memory of some kind
V1_COMM_BYTES = int(0.25 * 2**30) - V1_NON_TORCH_BYTES
CUDA_GRAPH_NOTE = ("vLLM captures CUDA graphs after the KV cache is sized; their 1-3 GiB sit "
                   "above the utilisation budget (vllm-project/vllm issue #7553: 2,464 MiB "
                   "more per GPU with graphs than with --enforce-eager)")


class ServingError(TxcalcError):
    """A serving question no configuration can answer (no room for one block, bad option)."""


@dataclass(frozen=True)
class KvCapacity:
    """One GPU of a tp x pp replica under a paged-KV engine (bytes are per GPU)."""

    model: str
    gpu: str
    tp: int
    pp: int
    gpu_memory_utilization: float
    block_size: int
    max_model_len: int
    max_num_batched_tokens: int
    max_num_seqs: int
    total_bytes: int
    budget_bytes: int
    weights_bytes: int
    activation_peak_bytes: int
    non_torch_bytes: int
    cuda_graph_bytes: int
    kv_cache_bytes: int
    kv_bytes_per_token: int  #: one token on one GPU
    block_bytes: int
    kv_blocks: int
    kv_tokens: int
    max_concurrency: float
    engine: str = "vllm"
    #: vllm-0.2: the profile's all-reduce inputs still reserved at its end (module docstring)
    held_allreduce_bytes: int = 0
    prefix_hit_rate: float = 0.0
    prefix_shared_blocks: int = 0
    max_concurrency_prefix: float = 0.0  #: sequences of max_model_len sharing the prefix
    #: TensorRT-LLM's share of the free memory (None for vLLM, whose budget is utilisation)
    kv_cache_free_gpu_mem_fraction: float | None = None

    def to_json(self) -> dict:
        return dataclasses.asdict(self)


def activation_peak_bytes(cfg: ModelConfig, ops, tokens: int, act_bytes: int, tp: int = 1,
                          max_num_seqs: int = DEFAULT_MAX_NUM_SEQS, engine: str = "vllm",
                          architecture: str | None = None) -> int:
    """Peak activation bytes of vLLM's profile forward over ``tokens`` rows on one TP rank, read
    off the op list: the larger of the fused GEMM groups' live sets and the sampler's.

    Engines fuse the Linears that read the same input (q/k/v: QKVParallelLinear; gate/up:
    MergedColumnParallelLinear). Live while a group and the Linear consuming its output run
    (vLLM's eager forward, vllm/model_executor/models/llama.py and qwen2.py):

        tensor                                   | width (bytes: x tokens x act_bytes)
        -----------------------------------------|-----------------------------------------------
        the layer's input                        | d_model: ``LlamaModel.forward``'s loop holds
                                                 |   ``hidden_states`` while ``layer(...)`` runs
                                                 |   (normed in place, fused_add_rms_norm)
        the residual                             | d_model
        the group's input                        | d_in (the decoder layer holds it through the
                                                 |   sub-module call)
        (a) the group's outputs                  | sum of d_out x active, column-split over TP
            + the consumer's input               | the next Linear's d_in, split likewise
        (b) the consumer's input, its output     | + d_out (row-parallel: whole on every rank)
            and, out of place at TP > 1, the     | + d_out (OUT_OF_PLACE_ALLREDUCE_ENGINES)
            reduced copy; the group's outputs    | + (a)'s outputs unless vLLM's model file drops
            while its model file keeps them      |   them first (VLLM_LLAMA_ARCHITECTURES)

    Issue #10517's log (v0.6.4, Llama-3.1-8B, TP 1) measures (a): peak torch memory 17.06 GiB at
    20,000 tokens and 17.98 GiB at 29,000 over 14.9888 GiB of weights, 110,592 bytes per token =
    (3 x 4,096 + 2 x 14,336 + 14,336) x 2. Engine "vllm-0.2" keeps the earlier rule
    (residual + input + outputs + consumer's input and output, no held layer input): its
    releases were not re-read.

    These are the live sets of vLLM's eager forward (V0, and any run with --enforce-eager); a
    torch.compile'd V1 forward frees tensors at their last use and is not re-derived here.

    After the blocks the sampler: engines in V0_SORT_ENGINES hold V0_SORT_BYTES_PER_LOGIT per
    logit of ``max_num_seqs`` rows over the whole vocabulary, plus the final hidden states
    (tokens x d_model) ``execute_model`` still holds; the others SAMPLER_BYTES_PER_LOGIT over
    the rank's vocabulary shard.
    """
    legacy = engine == "vllm-0.2"
    keeps = architecture not in VLLM_LLAMA_ARCHITECTURES and architecture is not None
    held = 0 if legacy else cfg.d_model
    best = 0
    i, n = 0, len(ops)
    while i < n:
        op = ops[i]
        if op.kind != "linear" or op.placement != "block":
            i += 1
            continue
        j, outs = i, 0
        while (j < n and ops[j].kind == "linear" and ops[j].layer == op.layer
               and ops[j].d_in == op.d_in and ops[j].tp == op.tp and ops[j].placement == "block"
               and (j == i or ops[j].tp == "colwise")):
            outs += ops[j].d_out * max(1, ops[j].active)
            j += 1
        split = tp if op.tp == "colwise" else 1
        nxt = next((o for o in ops[j:] if o.kind == "linear"), None)
        same = nxt is not None and nxt.layer == op.layer
        consumer = cdiv(nxt.d_in * max(1, nxt.active), split) if same else 0
        # the consuming Linear's output while it runs; a row-parallel output is whole on every
        # rank, and an out-of-place all-reduce adds its reduced copy
        consumer_out = cdiv(nxt.d_out * max(1, nxt.active), tp if nxt.tp == "colwise" else 1) \
            if same else 0
        reduced = consumer_out if (same and tp > 1 and nxt.tp == "rowwise"
                                   and engine in OUT_OF_PLACE_ALLREDUCE_ENGINES) else 0
        # a row-parallel Linear's input is its rank's shard (legacy: the whole width)
        base = held + cfg.d_model + (op.d_in if legacy or op.tp != "rowwise"
                                     else cdiv(op.d_in, tp))
        group = cdiv(outs, split)
        if legacy:
            width = base + group + consumer + consumer_out
        else:
            width = max(base + group + consumer,
                        base + (group if keeps else 0) + consumer + consumer_out + reduced)
        best = max(best, tokens * width * act_bytes)
        i = j
    rows = min(max_num_seqs, tokens)
    if engine in V0_SORT_ENGINES:
        sampler = rows * cfg.vocab_size * V0_SORT_BYTES_PER_LOGIT \
            + tokens * cfg.d_model * act_bytes
    else:
        sampler = rows * cdiv(cfg.vocab_size, tp) * SAMPLER_BYTES_PER_LOGIT
    return max(best, sampler)


def held_allreduce_bytes(cfg: ModelConfig, ops, tokens: int, act_bytes: int, pp: int = 1) -> int:
    """vllm-0.2's reserved all-reduce inputs after its profile (module docstring): one
    tokens x d_model activation per row-parallel block Linear of the fullest stage, plus the
    vocab-parallel embedding's on the first stage."""
    rowwise = sum(1 for op in ops if op.kind == "linear" and op.tp == "rowwise"
                  and op.placement == "block")
    embed = any(op.kind == "embedding" and op.tp == "vocab" for op in ops)
    return (cdiv(rowwise, pp) + embed) * tokens * cfg.d_model * act_bytes


def _weights_per_gpu(cfg: ModelConfig, model, ops, tp: int, pp: int, weights: str | None,
                     wbytes: int) -> int:
    """The fullest stage's stored weight bytes on one TP rank (plan_infer's accounting)."""
    return max(_stage_weights(cfg, model, ops, tp, pp, weights, wbytes))


def _stage_weights(cfg: ModelConfig, model, ops, tp: int, pp: int, weights: str | None,
                   wbytes: int) -> list[int]:
    """Each pipeline stage's stored weight bytes on one TP rank."""
    from ..engine import formats as Q
    from ..parallel.sharding import assign_stages, local_params
    sch, _ = Q.resolve(model, weights)
    stages = assign_stages(cfg, ops, pp)
    if sch is None:
        return [sum(local_params(op, tp) for op in st) * wbytes for st in stages]
    qops = Q.assign(ops, sch, cfg)
    qb = {id(op): Q.weight_bytes_of(q, sch.dense, sch.scope == "gguf") for op, q in zip(ops, qops)}
    return [sum(cdiv(qb[id(op)] * local_params(op, tp), op.params_total)
                for op in st if op.params_total) for st in stages]


def allocated_bytes(nbytes: int) -> int:
    """Bytes PyTorch's caching allocator counts for one freshly allocated tensor of ``nbytes``
    (the ALLOC_* rules): a request of 10 MiB or more holds its whole 2 MiB-rounded segment when
    at most 1 MiB of it would be left over; smaller requests are carved from shared segments,
    rounded to 512 bytes."""
    size = cdiv(nbytes, ALLOC_MIN_BLOCK) * ALLOC_MIN_BLOCK
    if size < ALLOC_MIN_LARGE:
        return size
    segment = cdiv(size, ALLOC_ROUND_LARGE) * ALLOC_ROUND_LARGE
    return segment if segment - size <= ALLOC_SMALL else size


def rotary_cache_bytes(cfg: ModelConfig, act_bytes: int) -> int:
    """vLLM's rotary cos/sin cache: one ``cos_sin_cache`` buffer of [max_position, rotary dim]
    in the model's dtype (vllm/model_executor/layers/rotary_embedding.py: ``cache =
    self._compute_cos_sin_cache(); cache = cache.to(dtype)``; ``get_rope`` shares one instance
    across layers), allocated while the model loads, so "model weights take" includes it
    (issue #10517: 14.9888 GiB for Llama-3.1-8B = 14.9575 GiB of parameters + 131,072 x 128 x
    2 B)."""
    if cfg.pos_type != "rotary":
        return 0
    dim = cfg.qk_rope_head_dim if cfg.is_mla else cfg.head_dim
    return allocated_bytes(cfg.max_position * dim * act_bytes)


def vllm_weights_bytes(cfg: ModelConfig, ops, tp: int, pp: int, wbytes: int,
                       act_bytes: int) -> int:
    """The fullest stage's dense weights as vLLM allocates them on one TP rank: one tensor per
    fused group (the column-parallel Linears of a block reading the same input: QKVParallelLinear,
    MergedColumnParallelLinear; their biases fused likewise), one per other parameter tensor,
    each counted as the caching allocator hands it out (``allocated_bytes``), plus the rotary
    cache. Issue #15815 (Qwen2.5-32B, TP 2): "Loading model weights took 30.7098 GB" against
    30.5144 GiB of parameters: qkv (35 MiB), o_proj (25 MiB) and down_proj (135 MiB) each hold
    a 1 MiB-longer segment (64 layers x 3 MiB) and the 8 MiB rotary cache."""
    return max(_vllm_stage_weights(cfg, ops, tp, pp, wbytes)) + rotary_cache_bytes(cfg, act_bytes)


def _vllm_stage_weights(cfg: ModelConfig, ops, tp: int, pp: int, wbytes: int) -> list[int]:
    """Each stage's dense weights as vLLM allocates them (``vllm_weights_bytes``), without the
    rotary cache."""
    from ..parallel.sharding import assign_stages, local_tensors
    out = []
    for stage in assign_stages(cfg, ops, pp):
        total, i = 0, 0
        while i < len(stage):
            op = stage[i]
            j = i + 1
            if op.kind == "linear" and op.placement == "block" and op.tp == "colwise":
                while (j < len(stage) and stage[j].kind == "linear" and stage[j].tp == "colwise"
                       and stage[j].layer == op.layer and stage[j].d_in == op.d_in
                       and stage[j].placement == "block"):
                    j += 1
            mats = vecs = 0
            for o in stage[i:j]:
                for d0, rest, count in local_tensors(o, tp):
                    if rest > 1 and o.kind == "linear" and j > i + 1:
                        mats += d0 * rest * count
                    elif rest == 1 and o.kind == "linear" and j > i + 1:
                        vecs += d0 * count
                    else:
                        total += allocated_bytes(d0 * rest * count * wbytes)
            total += (allocated_bytes(mats * wbytes) if mats else 0) \
                + (allocated_bytes(vecs * wbytes) if vecs else 0)
            i = j
        out.append(total)
    return out


def hf_architecture(model) -> str | None:
    """``architectures[0]`` of the HF config.json a model was given as (a path to the file or its
    folder, or that a ModelConfig was loaded from: its ``loaded_from``), the key vLLM's model
    registry picks the model file by; None for a preset, a Hub id or a built ModelConfig (pass
    ``architecture`` to kv_capacity instead)."""
    import os
    from pathlib import Path

    from ..safeio import parse_json, read_text
    model = getattr(model, "loaded_from", model) or None
    if not isinstance(model, (str, os.PathLike)):
        return None
    try:
        p = Path(model)
        p = p / "config.json" if p.is_dir() else p
        if p.suffix != ".json" or not p.is_file():
            return None
    except (OSError, ValueError):
        return None
    raw = parse_json(read_text(p, ServingError), str(p), ServingError, infinity=True)
    archs = raw.get("architectures") if isinstance(raw, dict) else None
    return archs[0] if isinstance(archs, list) and archs and isinstance(archs[0], str) else None


def cached_prefix_tokens(input_len, prefix_hit_rate: float, block_size: int = 16):
    """Tokens of each prompt served from the prefix cache (a numpy int64 array): hit rate x
    prompt, cut to whole blocks (the cache hashes full blocks) and to prompt - 1 (vLLM always
    computes the last prompt token, whose logits it needs)."""
    import numpy as np
    from .. import inputs as I
    h = I.number("prefix_hit_rate", prefix_hit_rate, 0, 1, lo_open=False, hi_open=True)
    b = I.integer("block_size", block_size, 1, 256)
    ins = np.asarray(input_len, dtype=np.int64)
    whole = (np.floor(ins * h).astype(np.int64) // b) * b
    return np.minimum(whole, ins - 1)


def kv_capacity(model, gpu, *, tp: int = 1, pp: int = 1, kv_dtype: str = "bf16",
                precision: str = "bf16", weights: str | None = None,
                gpu_memory_utilization: float = DEFAULT_UTILIZATION,
                block_size: int = DEFAULT_BLOCK_SIZE, max_model_len: int | None = None,
                max_num_batched_tokens: int | None = None,
                max_num_seqs: int = DEFAULT_MAX_NUM_SEQS, gpu_file=None,
                overheads=None, engine: str = "vllm",
                kv_cache_free_gpu_mem_fraction: float = DEFAULT_FREE_FRACTION,
                prefix_hit_rate: float = 0.0, architecture: str | None = None,
                comm_buffer_bytes: int | None = None) -> KvCapacity:
    """KV blocks, tokens and concurrency of one GPU of a tp x pp replica (see the module table).

    ``max_model_len``: default the model's max_position. ``max_num_batched_tokens``: the
    largest step the engine profiles; default max(max_model_len, 2048), vLLM's default
    without chunked prefill, up to CHUNKED_PREFILL_ABOVE tokens; 8192 past it (chunked
    prefill, vLLM V1's default budget for online serving on H100-class GPUs).
    ``engine="trtllm"``: the cache takes ``kv_cache_free_gpu_mem_fraction`` of the memory left
    after weights, activations and non-torch memory (``gpu_memory_utilization`` is unused);
    pass block_size=TRTLLM_BLOCK_SIZE for trtllm-build's default. ``overheads``: None (the
    default): each engine's own non-torch term (module table; where that term is the
    planner's, ``Overheads()``'s); an ``Overheads``: the caller sized the framework memory, its
    cuda_context_bytes (+ comm_buffer_bytes when tp x pp > 1) replace the engine's term.
    ``comm_buffer_bytes``: the communication buffers alone (plan's --comm-buffer-gib without
    --cuda-context-gib): at tp x pp > 1 they replace the engine's communicator term
    (V1_COMM_BYTES, or Overheads'), its context term stays.
    ``architecture``: the HF
    ``architectures[0]`` that picks vLLM's model file, whose MLP keeps or drops its gate_up
    output before down_proj (VLLM_LLAMA_ARCHITECTURES); None: the config.json's own when
    ``model`` is one (``hf_architecture``), else the preset's (``ModelConfig.hf_architecture``,
    from its stored config.json), else llama.py's."""
    from .. import inputs as I
    from ..engine.components import model_ops_tuple
    from ..engine.hardware import get_gpu
    from ..engine import formats as Q
    from ..engine.kvcache import KV_DTYPES
    from ..engine.memory import PRECISIONS, _check
    from ..parallel.overheads import Overheads
    tp = I.integer("tp", tp, 1, I.MAX_GPUS)
    pp = I.integer("pp", pp, 1, I.MAX_GPUS)
    gpu_memory_utilization = I.number("gpu_memory_utilization", gpu_memory_utilization, 0, 1)
    block_size = I.integer("block_size", block_size, 1, 256)
    if block_size not in BLOCK_SIZES:
        raise I.InputError(f"block_size ({block_size}) must be one of "
                           f"{', '.join(map(str, BLOCK_SIZES))}")
    max_model_len = I.integer("max_model_len", max_model_len, 1, I.MAX_SEQ, none=True)
    max_num_batched_tokens = I.integer("max_num_batched_tokens", max_num_batched_tokens, 1,
                                       I.MAX_SEQ, none=True)
    max_num_seqs = I.integer("max_num_seqs", max_num_seqs, 1, I.MAX_BATCH)
    _check("kv dtype", kv_dtype, KV_DTYPES)
    engine = kv_rule(engine)  # a scheduler profile's name (serve.sched): its sizing rule
    if engine not in ENGINES:
        raise I.InputError(f"engine ({I.show(engine)}) must be one of {', '.join(ENGINES)}")
    if architecture is not None and not isinstance(architecture, str):
        raise I.InputError(f"architecture ({I.show(architecture)}) must be a HF architecture "
                           "name such as 'Qwen2ForCausalLM'")
    fraction = I.number("kv_cache_free_gpu_mem_fraction", kv_cache_free_gpu_mem_fraction, 0, 1)
    prec = PRECISIONS[_check("precision", precision, PRECISIONS)]
    cfg = I.instance("model", model, ModelConfig, I.CONFIG_HINT)
    architecture = architecture if architecture is not None else (
        hf_architecture(model) or cfg.hf_architecture or None)
    g = get_gpu(gpu, gpu_file)
    if overheads is not None and not isinstance(overheads, Overheads):
        raise I.InputError(f"overheads ({I.show(overheads)}) must be an Overheads or None")
    ov = overheads or Overheads()
    comm_buffer_bytes = I.integer("comm_buffer_bytes", comm_buffer_bytes, 0, None, none=True)
    if cfg.family == "encoder":
        raise ServingError(f"{cfg.name} is an encoder-only model: it has no KV cache")
    n_blocks = sum(d for _, d in cfg.stacks)
    if pp > n_blocks:
        raise ServingError(f"pp ({pp}) exceeds {cfg.name}'s {n_blocks} blocks")
    max_model_len = max_model_len or cfg.max_position
    chunk = {"vllm-0.6": V0_CHUNK, "vllm-0.6.5": V065_CHUNK}.get(engine, V1_CHUNK)
    batched = max_num_batched_tokens or (
        max(max_model_len, 2048) if max_model_len <= CHUNKED_PREFILL_ABOVE
        or engine == "vllm-0.2" else chunk)
    ops = model_ops_tuple(cfg)
    trt = engine == "trtllm"
    quantised = Q.resolve(model, weights)[0] is not None
    if trt or quantised:
        ws = _stage_weights(cfg, model, ops, tp, pp, weights, prec.weight)
    else:  # what vLLM's loader allocates (the caching allocator's blocks)
        ws = _vllm_stage_weights(cfg, ops, tp, pp, prec.weight)
    if not trt:  # vLLM's rotary cache, allocated while the model loads
        ws = [w + rotary_cache_bytes(cfg, prec.act) for w in ws]
    act = activation_peak_bytes(cfg, ops, batched, prec.act, tp, max_num_seqs, engine,
                                architecture)
    # each version's non-torch term (module table), unless the caller gave Overheads (plan's
    # --cuda-context-gib): then those, at any value
    sized = overheads is not None
    multi = tp * pp > 1
    v1 = engine in ("vllm", "vllm-v1") and not sized
    # vllm-0.2 / vllm-0.6.5 on an NVSwitch node: NCCL's own buffers (vllm_nccl_bytes)
    nccl = None if sized or not multi else vllm_nccl_bytes(engine, g.name, tp, pp)
    comm = comm_buffer_bytes if comm_buffer_bytes is not None else \
        V1_COMM_BYTES if v1 else nccl if nccl is not None else ov.comm_buffer_bytes
    if v1:
        non_torch = V1_NON_TORCH_BYTES + (comm if multi else 0)
    else:
        context = V064_CUDA_CONTEXT_BYTES if engine == "vllm-0.6" and not sized \
            else ov.cuda_context_bytes
        non_torch = context + (comm if multi else 0)
    held = held_allreduce_bytes(cfg, ops, batched, prec.act, pp) \
        if engine == "vllm-0.2" and tp > 1 else 0
    graphs = 0
    total = g.usable_bytes
    budget = total if trt else int(total * gpu_memory_utilization)
    # every stage sizes its own cache from its own layers and weights; the engine takes the
    # fewest blocks of all its workers (vLLM: the min over workers' num_gpu_blocks)
    sizes = []
    for w, (per_token, state) in zip(ws, stage_cache_bytes(cfg, ops, tp, pp, kv_dtype)):
        if not per_token:  # no attention layer here (state-space or encoder blocks only)
            continue
        kv = budget - w - act - non_torch - graphs - held - state * max_num_seqs
        if trt:  # the free memory's fraction, not a budget's remainder
            kv = int(max(kv, 0) * fraction)
        block = block_size * per_token
        sizes.append((kv // block if kv >= block else -1, kv, w, per_token, block,
                      state * max_num_seqs))
    if not sizes:
        raise ServingError(f"{cfg.name} has no attention layer: no paged KV cache to size")
    # ties: the stage with the least room, then the more bytes per token (the fullest stage)
    blocks, kv, w, per_token, block, states = min(sizes, key=lambda x: (x[0], x[1], -x[3]))
    if blocks < 0:
        share = f"free fraction {fraction:g}" if trt else \
            f"utilisation {gpu_memory_utilization:g}"
        raise ServingError(
            f"{cfg.name} on {g.name} (tp {tp} x pp {pp}, {engine} {share})"
            f": no room for one KV block: budget {budget / GB:.2f} GB - weights "
            f"{w / GB:.2f} - activations {act / GB:.2f} - non-torch {non_torch / GB:.2f} "
            + (f"- all-reduce inputs {held / GB:.2f} " if held else "")
            + (f"- state of {max_num_seqs} sequences {states / GB:.2f} " if states else "")
            + f"= {kv / GB:.2f} GB")
    tokens = blocks * block_size
    shared = int(cached_prefix_tokens([max_model_len], prefix_hit_rate, block_size)[0])
    return KvCapacity(cfg.name, g.name, tp, pp, gpu_memory_utilization, block_size,
                      max_model_len, batched, max_num_seqs, total, budget, w, act, non_torch,
                      graphs, kv, per_token, block, blocks, tokens, tokens / max_model_len,
                      engine, held, float(prefix_hit_rate), shared // block_size,
                      max(0, tokens - shared) / (max_model_len - shared),
                      fraction if trt else None)


def stage_cache_bytes(cfg: ModelConfig, ops, tp: int, pp: int,
                      kv_dtype: str = "bf16") -> list[tuple[int, int]]:
    """(KV bytes per token, state bytes per sequence) on one GPU of each pipeline stage, from
    the stage's own op rows (``sharding.assign_stages``; ``kvcache.cache_bytes``): keys and
    values with no window cap (the paged cache gives every layer a block per token), their
    heads split over min(tp, K) (MLA's latent is not split; an encoder-decoder's
    cross-attention counted per token, as ``kvcache.kv_cache_bytes_per_token`` does), and the
    state-space ops' conv and recurrent state split over tp (heads and channels are)."""
    from ..engine.kvcache import KV_DTYPES, cache_bytes, source_tokens, state_bytes
    from ..parallel.sharding import assign_stages
    bits = KV_DTYPES[kv_dtype]
    kv_split = 1 if cfg.is_mla else min(tp, cfg.n_kv_heads)
    src = source_tokens(cfg, 1, 0)
    return [(cdiv(cache_bytes(st, 1, 1, bits, window=False, src_seq=src, state=False), kv_split),
             cdiv(state_bytes(st, bits), tp)) for st in assign_stages(cfg, ops, pp)]


def kv_options(gpu_memory_utilization=None, block_size=None, max_model_len=None,
               max_num_batched_tokens=None, prefix_hit_rate=None, engine=None) -> dict:
    """The CLI's paged-KV flags, checked (one-line errors naming the flag); only those given."""
    from .. import inputs as I
    out = {}
    if engine is not None:
        if kv_rule(engine) not in ENGINES:
            raise I.InputError(f"--engine ({I.show(engine)}) must be one of "
                               f"{', '.join((*ENGINES, *KV_RULES))}")
        out["engine"] = engine
    if gpu_memory_utilization is not None:
        out["gpu_memory_utilization"] = I.number("--gpu-memory-utilization",
                                                 gpu_memory_utilization, 0, 1)
    if block_size is not None:
        b = I.integer("--block-size", block_size, 1, 256)
        if b not in BLOCK_SIZES:
            raise I.InputError(f"--block-size ({b}) must be one of "
                               f"{', '.join(map(str, BLOCK_SIZES))}")
        out["block_size"] = b
    if max_model_len is not None:
        out["max_model_len"] = I.parse_context(max_model_len, "--max-model-len", zero=False)
    if max_num_batched_tokens is not None:
        out["max_num_batched_tokens"] = I.parse_context(max_num_batched_tokens,
                                                        "--max-num-batched-tokens", zero=False)
    if prefix_hit_rate is not None:
        out["prefix_hit_rate"] = I.number("--prefix-hit-rate", prefix_hit_rate, 0, 1,
                                          lo_open=False, hi_open=True,
                                          note=" (share of each prompt in the prefix cache)")
    return out


def kv_capacity_or_none(*args, **kw) -> KvCapacity | None:
    """``kv_capacity``, or None when not one block fits (the plan itself still stands)."""
    try:
        return kv_capacity(*args, **kw)
    except ServingError:
        return None


def kv_json(kv: KvCapacity | None) -> dict:
    """The plan infer --json keys: kv_cache_bytes, kv_blocks, kv_tokens (per GPU of the best
    layout) and the whole ``kv_capacity`` record (its max_concurrency is vLLM's: tokens /
    max_model_len; the plan's own max_concurrency counts whole sequences over replicas)."""
    if kv is None:
        return {"kv_cache_bytes": None, "kv_blocks": None, "kv_tokens": None,
                "kv_capacity": None}
    return {"kv_cache_bytes": kv.kv_cache_bytes, "kv_blocks": kv.kv_blocks,
            "kv_tokens": kv.kv_tokens, "kv_capacity": kv.to_json()}
