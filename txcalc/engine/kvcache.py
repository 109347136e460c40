"""The serving cache: keys and values per cached token, recurrent state per sequence, summed
over the Op rows (nothing here re-derives a layer's shapes from the ModelConfig).

Each attention op that keeps a cache declares it on its ``.keys`` row (``Op.kv_elements``,
set where components.py builds the op); each state-space op its state per sequence
(``Op.state``, ``Op.state_fp32``, set in mixers.py):

    op row                | declares                          | cached for one sequence
    ----------------------|-----------------------------------|-------------------------------
    self-attention keys   | k and v: 2 K h elements per token | min(context, kv_window) tokens
                          |   (MLA: kv_lora_rank + rope)      |   (window or attention chunk;
                          |                                   |   ``window=False``: context)
    cross-attention keys  | 2 K h elements per source token   | src_seq tokens
    shared-KV layer, any  | 0 (reads another layer's cache;   | -
      encoder             |   nothing decodes)                |
    conv1d                | the last k inputs (``state``)     | in the KV dtype, any context
    scan                  | the SSM state (``state_fp32``)    | in fp32 (HF's cache, the Mamba
                          |                                   |   kernels and FLA keep it so)

A sum over any subset of the rows (the whole model, one pipeline stage) is that subset's
cache: ``serve.kv.kv_capacity`` sizes each stage from the ops ``parallel.sharding.assign_stages``
gives it.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator

from ..errors import WorkloadError
from ..model.config import ModelConfig
from ..units import cdiv
from .memory import _check
from .ops import Op

#: bits per cached element
KV_DTYPES = {"fp32": 32, "bf16": 16, "fp16": 16, "fp8": 8, "int8": 8, "int4": 4}


def kv_rows(ops: Iterable[Op], context: int, src_seq: int = 0,
            window: bool = True) -> Iterator[tuple[Op, int]]:
    """(op, tokens cached) of each op that declares a KV cache (``Op.kv_elements``): source
    tokens for cross-attention, else ``context``, capped at the op's ``kv_window`` when
    ``window`` (a sliding-window or chunked layer keeps only its last window of tokens)."""
    for op in ops:
        if not op.kv_elements:
            continue
        if op.kv_stream == "src":
            yield op, src_seq
        elif window and op.kv_window:
            yield op, min(context, op.kv_window)
        else:
            yield op, context


def kv_elements(ops: Iterable[Op], context: int, src_seq: int = 0, window: bool = True) -> int:
    """Cached key/value elements of one sequence over the ops (``kv_rows``)."""
    return sum(op.kv_elements * tokens for op, tokens in kv_rows(ops, context, src_seq, window))


def state_elements(ops: Iterable[Op]) -> int:
    """Serving state per sequence, in elements, that the ops declare (``Op.state``: conv
    states of state-space mixers, constant in context, in the KV dtype)."""
    return sum(op.state for op in ops)


def state_fp32_elements(ops: Iterable[Op]) -> int:
    """Recurrent (SSM) state per sequence, in elements, kept in fp32 whatever the KV dtype
    (``Op.state_fp32``: HF's cache holds it so, as the Mamba kernels and FLA do)."""
    return sum(op.state_fp32 for op in ops)


def state_bytes(ops, bits: int, batch: int = 1) -> int:
    """Bytes of the ops' serving state for ``batch`` sequences: conv states at ``bits`` per
    element, recurrent states in fp32; constant in context."""
    ops = tuple(ops)
    return cdiv(state_elements(ops) * batch * bits, 8) + state_fp32_elements(ops) * batch * 4


def cache_bytes(ops, context: int, batch: int, bits: int, window: bool = True,
                src_seq: int = 0, state: bool = True) -> int:
    """The cache the ops keep for ``batch`` sequences at ``context`` tokens (``src_seq``
    source tokens): keys and values (``kv_rows``) and, with ``state``, the state-space ops'
    state (conv states at ``bits``, recurrent states in fp32)."""
    ops = tuple(ops)
    elements = kv_elements(ops, context, src_seq, window)
    fp32 = 0
    if state:
        elements += state_elements(ops)
        fp32 = state_fp32_elements(ops) * batch * 4
    return cdiv(elements * batch * bits, 8) + fp32


def source_tokens(cfg: ModelConfig, context: int, src_seq: int) -> int:
    """Source tokens the cross-attention caches: ``src_seq``; not given, an encoder-decoder's
    source as long as the context, and no image for a vision model's cross layers (Mllama)."""
    return src_seq or (context if cfg.family == "encoder-decoder" else 0)


def kv_cache_bytes(cfg: ModelConfig, context: int, batch: int = 1, kv_dtype: str = "bf16",
                   window: bool = True, src_seq: int = 0, state: bool = True) -> int:
    """KV cache of ``batch`` sequences at ``context`` tokens (self-attention) and the
    cross-attention cache over ``src_seq`` source tokens (``source_tokens``), summed over the
    model's op rows (``cache_bytes``). Sliding-window layers keep only the last ``window``
    tokens, chunked layers the last ``attn_chunk``. Only layers that attend keep keys and
    values; state-space mixers keep their declared state instead (``state``: conv + SSM state
    per sequence, constant in context: the conv states in ``kv_dtype``, the SSM / recurrent
    states in fp32, as HF's cache keeps them)."""
    from ..inputs import CONFIG_HINT, MAX_BATCH, MAX_SEQ, instance, integer
    from .components import model_ops_tuple
    instance("cfg", cfg, ModelConfig, CONFIG_HINT)
    context = integer("context", context, 1, MAX_SEQ)
    batch = integer("batch", batch, 1, MAX_BATCH)
    src_seq = integer("src_seq", src_seq, 0, MAX_SEQ)
    if not isinstance(window, bool):
        raise WorkloadError(f"window ({window!r:.60}) must be True or False")
    bits = KV_DTYPES[_check("kv dtype", kv_dtype, KV_DTYPES)]
    if cfg.family == "encoder":
        raise WorkloadError(f"{cfg.name} is an encoder-only model: it has no KV cache")
    return cache_bytes(model_ops_tuple(cfg), context, batch, bits, window,
                       source_tokens(cfg, context, src_seq), state)


def kv_cache_bytes_per_token(cfg: ModelConfig, kv_dtype: str = "bf16") -> int:
    """Bytes one token adds to the cache over all layers (no window cap, no state).

    Per decoder layer: k and v, K heads of h each (2 * K * h elements); MLA caches the
    compressed latent and the shared rotary key instead (kv_lora_rank + rope elements,
    DeepSeek-V2 arXiv:2405.04434 section 2.1.2).
    """
    return kv_cache_bytes(cfg, 1, 1, kv_dtype, window=False, state=False)
