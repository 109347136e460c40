"""The global batch of a training plan: its default, the ceiling a plan may grow it to, the
candidates searched between them, and the choice among them.

    quantity             | rule
    ---------------------|-----------------------------------------------------------------
    default              | about 4M tokens: round(2^22 / seq) sequences (GPT-3 used 3.2M
                         |   tokens, Llama 2 4M, Llama 3 started at 4M)
    ceiling (default)    | the critical batch at the run's compute, DeepSeek LLM (Bi et al.
                         |   2024, arXiv 2401.02954, eq. 1): B_opt = 0.2920 * C^0.3271
                         |   tokens, C = 6 * N * D FLOPs (N: the parameters one token uses,
                         |   D: the training tokens); at most 2^28 tokens, never below the
                         |   default
    candidates           | the start (the default, or the batch given), then every 2^k and
                         |   3 * 2^k sequences above it up to the ceiling: the x1.5 steps let
                         |   data parallelism take factors of 3 (24 GPUs = 8 x 3)
    choice               | see ``train.planner``: with a deadline the fewest GPUs whose best
                         |   layout meets it, then the smallest batch that does; without one,
                         |   the smallest batch within 2% of the lowest GPU-hours

DeepSeek fitted B_opt with C = M * D, M the non-embedding FLOPs per token (attention
included); 6 * N is the usual stand-in. At Llama 3.1 405B on 15T tokens (C = 3.6e25) the rule
gives 67M tokens (16,384 sequences of 4,096): the published runs grew their batches that far
and no further (Llama 3 405B: 4M -> 8M -> 16M tokens, Dubey et al. 2024, section 3.4.1;
DeepSeek-V3: 3,072 -> 15,360 sequences of 4K = 63M tokens, DeepSeek-AI 2024, section 4.2).

A larger batch is never slower for one layout: step time is affine in the micro-batches per
step, step(m) = a * m + b (the bubble, the data-parallel reduction and the optimizer step in
b), so days = tokens / (B * seq) * step fall with B; what a larger batch costs is sample
efficiency, which the ceiling bounds.
"""

from __future__ import annotations

#: the default global batch in tokens (Llama 2's 4M; GPT-3's 3.2M)
DEFAULT_BATCH_TOKENS = 2**22
#: DeepSeek LLM's fit of the optimal batch in tokens against compute C in FLOPs (arXiv
#: 2401.02954, eq. 1): B_opt = coefficient * C^exponent
CRITICAL_BATCH_COEFFICIENT = 0.2920
CRITICAL_BATCH_EXPONENT = 0.3271
#: the default ceiling's cap, 256M tokens: 4x the largest published batch (DeepSeek-V3's 63M);
#: DeepSeek fitted the rule on budgets up to ~3e20 FLOPs, and at 1e30 it would ask for billions
CRITICAL_BATCH_CAP_TOKENS = 2**28


def default_global_batch(seq: int) -> int:
    """The default global batch in sequences: about 4M tokens."""
    return max(1, round(DEFAULT_BATCH_TOKENS / seq))


def critical_batch_tokens(compute_flops: float) -> int:
    """DeepSeek LLM's optimal batch in tokens at compute ``compute_flops`` (module table)."""
    return int(CRITICAL_BATCH_COEFFICIENT * float(compute_flops) ** CRITICAL_BATCH_EXPONENT)


def default_max_global_batch(active_params: int, tokens: int, seq: int) -> int:
    """The ceiling of the batch search in sequences when none is given: the critical batch at
    C = 6 * N * D, at most CRITICAL_BATCH_CAP_TOKENS, in whole sequences, and never below the
    default batch."""
    crit = min(critical_batch_tokens(6 * active_params * tokens), CRITICAL_BATCH_CAP_TOKENS)
    return max(default_global_batch(seq), crit // seq)


def candidate_batches(lo: int, hi: int) -> list[int]:
    """``lo``, then every 2^k and 3 * 2^k above it up to ``hi`` (sequences), ascending."""
    out = {lo}
    k = 1
    while k <= hi:
        out.update(b for b in (k, 3 * k) if lo < b <= hi)
        k *= 2
    return sorted(out)


def valid_batches(batches, dp, mb, pp, v):
    """[layout, batch] True where a batch of ``batches`` splits into whole micro-batches of
    each layout (dp x micro-batch divides it), at least pp of them (the searched grid's rule:
    ``grid.layout_grid``) and, interleaved, a multiple of pp."""
    import numpy as np
    b = np.asarray(batches, dtype=np.int64)[None, :]
    per = (dp * mb)[:, None]
    m = b // per
    return (b % per == 0) & (m >= pp[:, None]) & ((v[:, None] == 1) | (m % pp[:, None] == 0))


def largest_valid_batch(batches, dp, mb, pp, v):
    """The largest batch of ``batches`` each layout can take (0: none), over numpy arrays that
    broadcast together."""
    import numpy as np
    out = np.zeros(np.broadcast(dp, mb, pp, v).shape, dtype=np.int64)
    for b in sorted(batches):
        m = b // (dp * mb)
        ok = (b % (dp * mb) == 0) & ((v == 1) | (m % pp == 0))
        out = np.where(ok, b, out)
    return out


def parse_max_global_batch(text, name: str = "--max-global-batch") -> tuple[int, bool]:
    """'2048' -> (2048, False): sequences; '16M' -> (16777216, True): tokens. A value with a
    K, M or G suffix is tokens, binary as batch sizes are quoted (Llama 3's "4M tokens" =
    1,024 sequences of 4,096 = 4 x 2^20): K = 2^10, M = 2^20, G = 2^30."""
    from .. import inputs as I
    value, suffix = I._decimal(name, text, "sequences or tokens", "2048 (sequences) or 16M "
                               "(tokens)", I.MAX_TOKENS)
    if suffix and suffix not in BATCH_TOKEN_SUFFIXES:
        raise I.InputError(f"{name}: cannot read {I.show(text)} (sequences: 2048; tokens: "
                           "16M, suffixes K = 2^10, M = 2^20, G = 2^30)")
    value *= BATCH_TOKEN_SUFFIXES.get(suffix, 1)
    if value != value.to_integral_value() or value <= 0:
        raise I.InputError(f"{name} ({I.show(text)}) must be a positive whole number")
    n, hi = int(value), I.MAX_TOKENS if suffix else I.MAX_BATCH
    if n > hi:
        raise I.InputError(f"{name} ({I.show(text)}) exceeds the largest accepted, {hi:,}")
    return n, bool(suffix)


#: --max-global-batch's token suffixes (binary, as batch sizes are quoted)
BATCH_TOKEN_SUFFIXES = {"K": 2**10, "M": 2**20, "G": 2**30}
