"""Engine scheduler profiles: how each serving engine fills one step (``--engine``).

The simulator (``serve.sim.simulate``) runs one loop; a profile switches four rules of it, each
read from the engine's scheduler source at the commit named below (learned, not copied):

    profile  | prompts  | decodes in a   | KV held at admission        | out of KV blocks   | CUDA graphs
             |          | prefill step   |                             |                    | (decode batch)
    ---------|----------|----------------|-----------------------------|--------------------|-------------
    vllm     | chunked  | yes (mixed)    | the prompt's tokens; one    | preempt the newest | 1, 2, 4, 8 ..
    (V1)     |          |                | more per decode             | running (recompute)| 256 by 8, ..
             |          |                |                             |                    | 512 by 16
    vllm-v0  | whole    | no: the step   | the prompt's tokens, 1 % of | preempt the newest | 1, 2, 4, 8 ..
             |          | is prefill-only| blocks kept free (watermark)| running (recompute)| 256 by 8
    sglang   | chunked  | no: the step   | the prompt + new_token_ratio| retract the newest | 1, 2, 4, 8 ..
             |          | is prefill-only| x the outputs still to come,| running (recompute)| 160 by 8
             |          |                | every running request's too |                    |
    trtllm   | whole    | yes (mixed)    | prompt + every output token | never (reserved)   | 1 .. 128,
             |          |                | (GUARANTEED_NO_EVICT)       |                    | powers of 2

Sources:

- vllm: vllm-project/vllm ``vllm/v1/core/sched/scheduler.py`` @ b4622cf9. ``schedule()`` runs the
  running list first, in admission order, each request taking min(its tokens left, the token
  budget) (a decode 1, an unfinished prompt its next chunk), then the waiting queue FCFS while
  the budget and max_num_seqs allow; ``kv_cache_manager.allocate_slots`` takes blocks for the
  tokens scheduled, and when it fails the last request of the running list is preempted (its
  blocks freed, its prompt and outputs recomputed as a new prompt when it is resumed).
- vllm-v0: vllm-project/vllm ``vllm/core/scheduler.py`` @ 0dce2b29. ``_schedule_default`` (chunked
  prefill off, V0's default): prompts first, each whole within max_num_batched_tokens (default
  max(max_model_len, 2048)); a step that carries a prompt carries no decode. A prompt is
  admitted when its blocks leave the watermark free (``block_manager.can_allocate``, watermark
  0.01 of the blocks); a decode appends a slot, preempting the last running group (recompute)
  when none is free.
- sglang: sgl-project/sglang ``python/sglang/srt/managers/scheduler.py`` @ d51c1c21
  (``get_next_batch_to_run``: a new prefill batch when there is one, else the decode batch;
  ``enable_mixed_chunk`` off by default), ``schedule_policy.py`` @ ad0119fd (``PrefillAdder``:
  a prompt joins while the tokens left, less new_token_ratio x every running request's
  outputs still to come, hold its prompt + new_token_ratio x its own outputs; chunked_prefill_size
  tokens per prefill batch, the last prompt chunked) and ``global_config.py`` @ 0f5e5dd5
  (new_token_ratio starts at 0.7 and falls linearly to 0.7 x 0.14 over 600 decode steps).
- trtllm: NVIDIA/TensorRT-LLM ``cpp/tensorrt_llm/batch_manager/microBatchScheduler.cpp`` @
  0a949d31 (generation and context requests in one batch, in the active list's order; without
  context chunking a prompt runs whole, and the first that overflows max_num_tokens ends the
  batch) and ``capacityScheduler.cpp`` @ cf6abc45 (GUARANTEED_NO_EVICT: a request starts only
  when the blocks of its whole sequence, prompt + max new tokens, are free after the running
  requests' remaining blocks: nothing is ever evicted).

The front end (``front_end``): the process between the client and the scheduler, one worker
that runs in parallel with the steps (a pipeline: the engine does not wait for it). It spends
host CPU per request (tokenising, request setup) and per output token (detokenising,
streaming); a token reaches the client once the front end has processed its step
(serve.batching). Its two costs are ``StepModel.front_request_s`` and ``front_token_s``,
calibrated per host on fit rows; a profile without a front end ignores them.

- vllm: vllm-project/vllm ``vllm/v1/engine/async_llm.py`` @ 8ef0b5f5. The API server process
  (AsyncLLM) tokenises each prompt in ``add_request`` (``InputProcessor.process_inputs``) and
  sends it to EngineCore, a separate process; its ``output_handler`` task pulls each step's
  outputs and runs ``OutputProcessor.process_outputs`` (incremental detokenising, one
  RequestOutput per request and step) in chunks on the same asyncio loop that runs every
  request's streaming generator: one Python thread, serial, pipelined with EngineCore.
- sglang: sgl-project/sglang ``python/sglang/srt/managers/detokenizer_manager.py`` @ 1e890341
  (a separate process detokenises each batch's outputs) and ``tokenizer_manager.py`` (the
  server's process: tokenises prompts, streams the detokenised outputs): two serial workers,
  modelled as one.
- trtllm: NVIDIA/TensorRT-LLM ``tensorrt_llm/serve/openai_server.py`` @ e7f7345e: trtllm-serve
  detokenises and streams in its own process unless ``num_postprocess_workers`` > 0 (default
  0): one worker.
- vllm-v0: none (V0 detokenised inside its engine loop, in the step; not sourced here), and
  txcalc's default scheduler none: their front-end costs are zero.

Defaults (max_num_seqs, max_num_batched_tokens), used when the caller pins none: vLLM V1's
``get_batch_defaults`` for the API server on a >= 70 GiB GPU other than A100 (1,024 sequences,
8,192 tokens; vllm/engine/arg_utils.py); V0's 256 sequences and, with chunked prefill off,
max(max_model_len, 2,048) tokens; SGLang's chunked_prefill_size on an 80 GB-class GPU (8,192)
and the top of its derived max_running_requests (4,096); trtllm-serve's max_batch_size 2,048
and max_num_tokens 8,192. The CUDA-graph sizes of vLLM are its capture lists; SGLang's
(up to cuda_graph_max_bs 160) and TensorRT-LLM's (powers of 2 to 128) are assumed, not read. The KV cache is sized by the engine's own rule
in ``serve.kv`` (``kv.kv_rule``: sglang is sized by vLLM V1's rule, an assumption).

Not modelled (every profile): blocks (KV is counted in tokens, at most block - 1 tokens per
sequence apart), the prefix cache keeping a preempted request's blocks, SGLang's retraction
look-ahead (retract_decode_steps) and its clip of max new tokens at 4,096 in the reservation,
TensorRT-LLM's MAX_UTILIZATION policy, priorities and swapping.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..errors import TxcalcError
from .kv import DEFAULT_MAX_NUM_SEQS


class SchedulerError(TxcalcError):
    """An engine profile name that is not one of ENGINE_PROFILES."""


@dataclass(frozen=True)
class Scheduler:
    """One engine's step-filling rules (module table)."""

    name: str
    chunked: bool  #: prompts split into chunks across steps (else each runs whole in one step)
    mixed: bool  #: decodes share a step with prompt tokens (else a prefill step stalls them)
    #: "reserve": prompt + outputs held at admission (never preempts); "incremental": the
    #: prompt at admission, one token per decode, the newest running request preempted
    #: (recompute) when a step's decodes find no free slot
    kv: str
    #: admission only while the step's token budget has room (vLLM, SGLang); else admission
    #: is limited by seats and KV alone and the step takes what fits (TensorRT-LLM's capacity
    #: scheduler before its micro-batch scheduler)
    admit_in_budget: bool
    watermark: float = 0.0  #: share of the cache a new prompt must leave free (vLLM V0)
    #: SGLang's new_token_ratio: start, floor, fall per decode step (0: no output reserve)
    ratio_init: float = 0.0
    ratio_min: float = 0.0
    ratio_decay: float = 0.0
    max_num_seqs: int = 256
    max_num_batched_tokens: int = 8192
    cuda_graph_sizes: tuple[int, ...] = ()  #: decode batch sizes captured (padded up to one)
    source: str = ""
    #: the front end's source (module text), "" for none: the serial per-request and
    #: per-token host costs of the StepModel apply only to a profile that has one
    front_end: str = ""

    def graph_batch(self, batch: int) -> int | None:
        """The captured size a decode-only step of ``batch`` sequences is padded to, or None
        when it runs without a CUDA graph (larger than every captured size)."""
        for s in self.cuda_graph_sizes:
            if s >= batch:
                return s
        return None


_VLLM_V1_GRAPHS = (1, 2, 4) + tuple(range(8, 256, 8)) + tuple(range(256, 513, 16))
_VLLM_V0_GRAPHS = (1, 2, 4) + tuple(range(8, 257, 8))
_SGLANG_GRAPHS = (1, 2, 4) + tuple(range(8, 161, 8))
_TRTLLM_GRAPHS = (1, 2, 4, 8, 16, 32, 64, 128)
_SGLANG_RATIO = 0.7

#: the profiles by --engine name (aliases: vllm-v1 = vllm; the V0 releases' KV names = vllm-v0)
ENGINE_PROFILES = {
    "vllm": Scheduler("vllm", chunked=True, mixed=True, kv="incremental", admit_in_budget=True,
                      max_num_seqs=1024, max_num_batched_tokens=8192,
                      cuda_graph_sizes=_VLLM_V1_GRAPHS,
                      source="vllm-project/vllm vllm/v1/core/sched/scheduler.py@b4622cf9",
                      front_end="vllm-project/vllm vllm/v1/engine/async_llm.py@8ef0b5f5"),
    "vllm-v0": Scheduler("vllm-v0", chunked=False, mixed=False, kv="incremental",
                         admit_in_budget=True, watermark=0.01, max_num_seqs=256,
                         max_num_batched_tokens=0,  # 0: max(max_model_len, 2048)
                         cuda_graph_sizes=_VLLM_V0_GRAPHS,
                         source="vllm-project/vllm vllm/core/scheduler.py@0dce2b29"),
    "sglang": Scheduler("sglang", chunked=True, mixed=False, kv="incremental",
                        admit_in_budget=True, ratio_init=_SGLANG_RATIO,
                        ratio_min=_SGLANG_RATIO * 0.14,
                        ratio_decay=(_SGLANG_RATIO - _SGLANG_RATIO * 0.14) / 600,
                        max_num_seqs=4096, max_num_batched_tokens=8192,
                        cuda_graph_sizes=_SGLANG_GRAPHS,
                        source="sgl-project/sglang python/sglang/srt/managers/scheduler.py"
                               "@d51c1c21, schedule_policy.py@ad0119fd",
                        front_end="sgl-project/sglang python/sglang/srt/managers/"
                                  "detokenizer_manager.py@1e890341, tokenizer_manager.py"),
    "trtllm": Scheduler("trtllm", chunked=False, mixed=True, kv="reserve",
                        admit_in_budget=False, max_num_seqs=2048,
                        max_num_batched_tokens=8192, cuda_graph_sizes=_TRTLLM_GRAPHS,
                        source="NVIDIA/TensorRT-LLM cpp/tensorrt_llm/batch_manager/"
                               "microBatchScheduler.cpp@0a949d31, capacityScheduler.cpp"
                               "@cf6abc45",
                        front_end="NVIDIA/TensorRT-LLM tensorrt_llm/serve/openai_server.py"
                                  "@e7f7345e"),
}
ALIASES = {"vllm-v1": "vllm", "vllm-0.6.5": "vllm-v0", "vllm-0.6": "vllm-v0",
           "vllm-0.2": "vllm-v0"}

#: txcalc's scheduler before the profiles, the default when no engine is named: vLLM V1's
#: chunked, mixed steps, but every request's prompt + outputs reserved at admission (no
#: preemption) and admission not limited by the step's token budget
DEFAULT = Scheduler("txcalc", chunked=True, mixed=True, kv="reserve", admit_in_budget=False,
                    max_num_seqs=DEFAULT_MAX_NUM_SEQS, max_num_batched_tokens=8192)


def scheduler(engine: str | Scheduler | None) -> Scheduler:
    """The profile of an --engine name (None: DEFAULT); a Scheduler passes through."""
    from .. import inputs as I
    if engine is None:
        return DEFAULT
    if isinstance(engine, Scheduler):
        return engine
    name = ALIASES.get(engine, engine) if isinstance(engine, str) else engine
    if name not in ENGINE_PROFILES:
        raise SchedulerError(f"engine ({I.show(engine)}) must be one of "
                             f"{', '.join(list(ENGINE_PROFILES) + list(ALIASES))}")
    return ENGINE_PROFILES[name]


def default_budget(s: Scheduler, max_model_len: int) -> int:
    """The profile's max_num_batched_tokens (vLLM V0: max(max_model_len, 2048), its default
    with chunked prefill off)."""
    return s.max_num_batched_tokens or max(max_model_len, 2048)
