"""Serving: KV-cache capacity as a paged-attention engine sizes it, and a step-level simulator
of continuous batching with chunked prefill.

KV capacity (vLLM's ``determine_num_available_blocks``: profile one forward of the largest
batch, then give what is left of the utilisation budget to KV blocks):

    quantity                 | value
    -------------------------|-------------------------------------------------------------------
    total_bytes              | what CUDA reports: the catalog's capacity x CUDA_VISIBLE_FRACTION
    budget_bytes             | total_bytes x gpu_memory_utilization
    weights_bytes            | the fullest pipeline stage's share of the stored weights on one
                             |   TP rank (``sharding.local_params``, ``formats`` for quantised)
    activation_peak_bytes    | the profiled forward of max_num_batched_tokens tokens: the largest
                             |   of (a) a fused GEMM group live (``activation_peak_bytes``) and
                             |   (b) the sampler over max_num_seqs rows of logits
    non_torch_bytes          | CUDA context, cuBLAS workspace (``Overheads.cuda_context_bytes``),
                             |   plus NCCL buffers when TP x PP > 1 (``comm_buffer_bytes``)
    cuda_graph_bytes         | 0 inside the budget: vLLM captures its graphs after sizing the
                             |   cache, above the utilisation limit (CUDA_GRAPH_NOTE)
    kv_cache_bytes           | budget - weights - activation peak - non-torch - graphs
    block_bytes              | block_size x the KV bytes of one token on one GPU
                             |   (``memory.kv_cache_bytes_per_token``, heads split over
                             |   min(tp, K), layers over the stages)
    kv_blocks                | kv_cache_bytes // block_bytes
    kv_tokens                | kv_blocks x block_size
    max_concurrency          | kv_tokens / max_model_len (vLLM's "Maximum concurrency" line)

Only the engine's own functions give the per-token KV bytes, the weights and the op widths;
nothing here is fitted to the logs the tests compare against (tests/test_serving.py).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from .config import ModelConfig
from .errors import TxcalcError
from .hardware import CUDA_VISIBLE_FRACTION  # noqa: F401  (re-exported; Gpu.usable_bytes)
from .units import GB, cdiv

#: vLLM's defaults (vllm/engine/arg_utils.py): --gpu-memory-utilization 0.9, --block-size 16,
#: --max-num-seqs 256
DEFAULT_UTILIZATION = 0.9
DEFAULT_BLOCK_SIZE = 16
DEFAULT_MAX_NUM_SEQS = 256
BLOCK_SIZES = (1, 8, 16, 32, 64, 128, 256)
#: vLLM V0 turned chunked prefill on by default past 32K tokens of max_model_len
#: (vllm/engine/arg_utils.py); the profile then runs one chunk, not the whole length
CHUNKED_PREFILL_ABOVE = 32768
#: the sampler's live copies of the logits, bytes per element: the model's bf16 logits, their
#: fp32 copy, the fp32 probabilities and the fp32 log-probabilities (vLLM's Sampler:
#: ``logits.to(torch.float)``, ``softmax``, ``log_softmax``)
SAMPLER_BYTES_PER_LOGIT = 2 + 4 + 4 + 4
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

    def to_json(self) -> dict:
        return dataclasses.asdict(self)


def activation_peak_bytes(cfg: ModelConfig, ops, tokens: int, act_bytes: int, tp: int = 1,
                          max_num_seqs: int = DEFAULT_MAX_NUM_SEQS) -> int:
    """Peak activation bytes of an inference forward over ``tokens`` rows on one TP rank, read
    off the op list.

    Engines fuse the Linears that read the same input (q/k/v: QKVParallelLinear; gate/up:
    MergedColumnParallelLinear); while such a group runs, live are: the residual stream
    (d_model), the group's input (its d_in), the group's outputs (sum of d_out x active,
    column-split over TP) and the output of the op that consumes them (the next Linear's input,
    split likewise when the group was). After the blocks the sampler holds
    ``max_num_seqs`` rows of logits (SAMPLER_BYTES_PER_LOGIT per element, vocab split over
    TP). The peak is the larger of the two.
    """
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
        consumer = nxt.d_in * max(1, nxt.active) if nxt is not None and nxt.layer == op.layer \
            else 0
        width = cfg.d_model + op.d_in + cdiv(outs, split) + cdiv(consumer, split)
        best = max(best, tokens * width * act_bytes)
        i = j
    sampler = min(max_num_seqs, tokens) * cdiv(cfg.vocab_size, tp) * SAMPLER_BYTES_PER_LOGIT
    return max(best, sampler)


def _weights_per_gpu(cfg: ModelConfig, model, ops, tp: int, pp: int, weights: str | None,
                     wbytes: int) -> int:
    """The fullest stage's stored weight bytes on one TP rank (plan_infer's accounting)."""
    from . import formats as Q
    from .parallel.sharding import assign_stages, local_params
    sch, _ = Q.resolve(model, weights)
    stages = assign_stages(cfg, ops, pp)
    if sch is None:
        return max(sum(local_params(op, tp) for op in st) for st in stages) * wbytes
    qops = Q.assign(ops, sch, cfg)
    qb = {id(op): Q.weight_bytes_of(q, sch.dense, sch.scope == "gguf") for op, q in zip(ops, qops)}
    return max(sum(cdiv(qb[id(op)] * local_params(op, tp), op.params_total)
                   for op in st if op.params_total) for st in stages)


def kv_capacity(model, gpu, *, tp: int = 1, pp: int = 1, kv_dtype: str = "bf16",
                precision: str = "bf16", weights: str | None = None,
                gpu_memory_utilization: float = DEFAULT_UTILIZATION,
                block_size: int = DEFAULT_BLOCK_SIZE, max_model_len: int | None = None,
                max_num_batched_tokens: int | None = None,
                max_num_seqs: int = DEFAULT_MAX_NUM_SEQS, gpu_file=None,
                overheads=None) -> KvCapacity:
    """KV blocks, tokens and concurrency of one GPU of a tp x pp replica (see the module table).

    ``max_model_len``: default the model's max_position. ``max_num_batched_tokens``: the
    largest step the engine profiles; default max(max_model_len, 2048), vLLM's default
    without chunked prefill, up to CHUNKED_PREFILL_ABOVE tokens; 8192 past it (chunked
    prefill, vLLM V1's default budget for online serving on H100-class GPUs)."""
    from . import inputs as I
    from . import load
    from .components import model_ops_tuple
    from .hardware import get_gpu
    from .memory import KV_DTYPES, PRECISIONS, _check, kv_cache_bytes_per_token
    from .parallel.evaluate import Overheads
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
    prec = PRECISIONS[_check("precision", precision, PRECISIONS)]
    cfg = load(model)
    g = get_gpu(gpu, gpu_file)
    ov = overheads or Overheads()
    if cfg.family == "encoder":
        raise ServingError(f"{cfg.name} is an encoder-only model: it has no KV cache")
    n_blocks = sum(d for _, d in cfg.stacks)
    if pp > n_blocks:
        raise ServingError(f"pp ({pp}) exceeds {cfg.name}'s {n_blocks} blocks")
    max_model_len = max_model_len or cfg.max_position
    batched = max_num_batched_tokens or (max(max_model_len, 2048)
                                         if max_model_len <= CHUNKED_PREFILL_ABOVE else 8192)
    ops = model_ops_tuple(cfg)
    w = _weights_per_gpu(cfg, model, ops, tp, pp, weights, prec.weight)
    act = activation_peak_bytes(cfg, ops, batched, prec.act, tp, max_num_seqs)
    non_torch = ov.cuda_context_bytes + (ov.comm_buffer_bytes if tp * pp > 1 else 0)
    graphs = 0
    total = g.usable_bytes
    budget = int(total * gpu_memory_utilization)
    kv_split = 1 if cfg.is_mla else min(tp, cfg.n_kv_heads)
    layers_per_stage = cdiv(n_blocks, pp)
    per_token = cdiv(kv_cache_bytes_per_token(cfg, kv_dtype) * layers_per_stage,
                     n_blocks * kv_split)
    block = block_size * per_token
    kv = budget - w - act - non_torch - graphs
    if kv < block:
        raise ServingError(
            f"{cfg.name} on {g.name} (tp {tp} x pp {pp}, utilisation {gpu_memory_utilization:g})"
            f": no room for one KV block: budget {budget / GB:.2f} GB - weights "
            f"{w / GB:.2f} - activations {act / GB:.2f} - non-torch {non_torch / GB:.2f} "
            f"= {kv / GB:.2f} GB")
    blocks = kv // block
    tokens = blocks * block_size
    return KvCapacity(cfg.name, g.name, tp, pp, gpu_memory_utilization, block_size,
                      max_model_len, batched, max_num_seqs, total, budget, w, act, non_torch,
                      graphs, kv, per_token, block, blocks, tokens, tokens / max_model_len)


def kv_options(gpu_memory_utilization=None, block_size=None, max_model_len=None,
               max_num_batched_tokens=None) -> dict:
    """The CLI's paged-KV flags, checked (one-line errors naming the flag); only those given."""
    from . import inputs as I
    out = {}
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
