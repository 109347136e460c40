"""The planner's grid of layouts: every valid layout of a training search as index arrays
(``layout_grid``), read back one at a time (``_layout_at``); ``train.planner`` screens and
ranks it."""

from __future__ import annotations

from ..model.config import ModelConfig
from ..errors import PlanError
from ..engine.hardware import Gpu
from ..parallel.layout import (RECOMPUTE, RECOMPUTE_POLICIES, Layout, LayoutError, check_layout,
                               joint_rules)
from ..units import divisors, pow2_upto


# --- the grid ------------------------------------------------------------------------------------
#: Layout fields a search can be pinned to (``plan_train(only={"tp": 8, "recompute": "full"})``)
PINNABLE = ("tp", "pp", "dp", "cp", "ep", "zero", "micro_batch", "recompute", "recompute_layers",
            "offload_checkpoints")


#: the batch search's grid (``layout_grid``): CP ranks keep at least this many tokens, and
#: micro-batches hold at most this many (or one sequence)
SEARCH_CP_TOKENS = 8192
SEARCH_MB_TOKENS = 8192


def layout_grid(cfg: ModelConfig, gpu: Gpu, seq: int, global_batch, max_gpus: int,
                gpus: int | None = None, only: dict | None = None,
                gpus_per_node: int | None = None, *, min_gpus: int = 1, counts=None,
                memory_min: bool = False) -> tuple[dict, tuple]:
    """Every valid layout as index arrays (see ``train.evaluate.evaluate``).

    Candidate degrees: TP the divisors of n_heads up to 64, PP powers of two and divisors of
    the block count up to 128, CP powers of two keeping >= 2048 tokens a rank, EP powers of two
    up to 64, DP and micro-batch dividing the global batch; each degree is checked alone by
    ``check_layout`` (the model's rules), and the rules that join degrees here.

    ``global_batch``: one batch (sequences), or a list of candidate batches (the batch search,
    ``train.batch``): a layout is kept when one of them splits into its micro-batches, and
    ``g["gb"]`` holds the largest that does (the fastest, ``train.batch``'s module doc); with a
    list, TP > 1 always runs sequence parallelism (it never loses: the same collective time,
    less memory and compute), which halves the grid, one data-parallel rank only ZeRO-0, and
    a pipeline at least pp micro-batches a step. ``gpus_per_node`` (given unless ``gpus``
    pins the count): GPU counts of whole nodes, or below one node. ``min_gpus``: only
    layouts on at least that many GPUs; ``counts``: only on those counts. ``memory_min``:
    only the inner choices that need the least memory of each TP x PP x DP x CP x EP
    (micro-batch 1, no interleaving, full recompute with the checkpoints offloaded, every
    ZeRO stage): a layout of them fits where any does, so they answer the fewest GPUs that
    fit (``plan_train`` with a deadline)."""
    import numpy as np
    from .batch import largest_valid_batch
    n_blocks = sum(depth for _, depth in cfg.stacks)
    batches = [global_batch] if isinstance(global_batch, int) else sorted(global_batch)
    searched = len(batches) > 1

    def valid(**degrees) -> bool:
        try:
            check_layout(cfg, Layout(**degrees), seq)
            return True
        except LayoutError:
            return False
    tps = [t for t in divisors(cfg.n_heads) if t <= 64 and valid(tp=t)]
    pps = [p for p in sorted(set(pow2_upto(128)) | set(divisors(n_blocks)))
           if p <= 128 and valid(pp=p)]
    # the batch searched: CP only keeps >= SEARCH_CP_TOKENS a rank (data parallelism over a
    # larger batch splits short sequences' work without the ring), micro-batches at most
    # SEARCH_MB_TOKENS tokens (the GEMMs are compute-bound well before; a larger one only
    # lengthens the bubble)
    cp_tokens = SEARCH_CP_TOKENS if searched else 2048
    cps = [c for c in pow2_upto(32) if (c == 1 or seq // c >= cp_tokens) and valid(cp=c)]
    eps = [e for e in pow2_upto(64) if valid(ep=e, dp=e)]
    mbs = [b for b in pow2_upto(16) if any(B % b == 0 for B in batches)
           and (not searched or b == 1 or b * seq <= SEARCH_MB_TOKENS)]
    dps = sorted({d for B in batches for d in divisors(B) if d <= max_gpus})
    zeros = [(0, 0), (1, 0), (2, 0), (3, 0), (3, 1)]
    vs = [1, 2, 4]
    # the masks are taken on the degrees broadcast along their own axis of the grid (not on
    # the full grid: far less memory), and only the kept points are gathered at the end
    policies = RECOMPUTE_POLICIES
    lists = (tps, pps, cps, eps, mbs, dps, [z for z, _ in zeros], vs, [0, 1],
             list(range(len(policies))))
    shape = tuple(len(x) for x in lists)  # ... sp, recompute

    def A(xs, k):  # the values of axis k, shaped to broadcast against the grid
        return np.array(xs, dtype=np.int64).reshape([-1 if i == k else 1 for i in range(10)])
    tp, pp, cp, ep, mb, dp, zero, v, sp, pol = (A(xs, k) for k, xs in enumerate(lists))
    rc = A([r for r, _, _ in policies], 9)
    rl = A([n for _, n, _ in policies], 9)
    off = A([o for _, _, o in policies], 9).astype(bool)
    hybrid = A([h for _, h in zeros], 6).astype(bool)
    n = tp * pp * cp * dp
    # the largest batch each (pp, mb, dp, v) splits into whole micro-batches, interleaving
    # needing them in multiples of pp (0: none)
    b_hi = largest_valid_batch(batches, dp, mb, pp, v)
    ok = np.broadcast_to((n <= max_gpus) & (b_hi > 0), shape).copy()
    if gpus is not None:
        ok &= n == gpus
    elif gpus_per_node:  # whole nodes, or part of one
        ok &= (n < gpus_per_node) | (n % gpus_per_node == 0)
    if min_gpus > 1:
        ok &= n >= min_gpus
    if counts is not None:
        ok &= np.isin(n, np.asarray(sorted(counts), dtype=np.int64))
    if memory_min:  # micro-batch 1, one chunk a stage, full recompute offloaded
        least = policies.index((RECOMPUTE.index("full"), 0, True))
        ok &= (mb == 1) & (v == 1) & (pol == least)
    for rule in joint_rules(tp, pp, dp, cp, ep, sp, v, n_blocks).values():  # check_layout's
        ok &= rule
    if searched:
        ok &= (sp == 1) | (tp == 1)
        # a ZeRO stage shards nothing over one data-parallel rank (the evaluation runs it as
        # ZeRO-0, which the ranking prefers on a tie), and a pipeline fed fewer micro-batches
        # than stages even at the largest batch idles more than half of each step
        if "zero" not in (only or {}):
            ok &= (dp * cp > 1) | ((zero == 0) & ~hybrid)
        ok &= (pp == 1) | (b_hi >= pp * dp * mb)
    ok &= ~hybrid | (dp * cp * tp > gpu.gpus_per_node)  # hybrid only differs across nodes
    ok &= (rl == 0) | (rl < -(-n_blocks // pp))  # partial: fewer blocks than a stage holds
    pinned = {"tp": tp, "pp": pp, "dp": dp, "cp": cp, "ep": ep, "zero": zero,
              "micro_batch": mb, "recompute": rc, "recompute_layers": rl,
              "offload_checkpoints": off}
    for key, value in (only or {}).items():
        if key not in PINNABLE:
            raise PlanError(f"cannot pin {key!r}; choose from {', '.join(PINNABLE)}")
        if key in ("tp", "pp", "cp", "ep", "micro_batch", "zero", "recompute"):
            # the model's own rules name the offending values (TP dividing the heads...)
            check_layout(cfg, Layout(**{key: value, **({"dp": value} if key == "ep" else {})}),
                         seq)
        if key == "recompute":
            value = RECOMPUTE.index(value)
        ok &= pinned[key] == value
    if "recompute" in (only or {}) and "recompute_layers" not in only:
        ok &= rl == 0  # a pinned mode means every block, unless N is pinned too
    if "offload_checkpoints" not in (only or {}) and "recompute" in (only or {}):
        ok &= ~off  # ... and checkpoints on the GPU, unless offload is pinned too
    ti, pi, ci, ei, mi, di, zi, vi, si, ri = np.nonzero(ok)  # in the grid's C order
    g = dict(tp=tp.ravel()[ti], pp=pp.ravel()[pi], dp=dp.ravel()[di], cp=cp.ravel()[ci],
             ep=ep.ravel()[ei], zero=zero.ravel()[zi], hybrid=hybrid.ravel()[zi],
             sp=si.astype(bool), v=v.ravel()[vi], mb=mb.ravel()[mi], rc=rc.ravel()[ri],
             rl=rl.ravel()[ri], off=off.ravel()[ri], pol=ri, ti=ti, pi=pi, ci=ci, ei=ei,
             mi=mi)
    if searched:
        g["gb"] = b_hi[0, pi, 0, 0, mi, di, 0, vi, 0, 0]
    return g, (tps, eps, cps, mbs, pps)


def _layout_at(g: dict, i: int) -> Layout:
    v = int(g["v"][i])
    return Layout(tp=int(g["tp"][i]), pp=int(g["pp"][i]), dp=int(g["dp"][i]),
                  cp=int(g["cp"][i]), ep=int(g["ep"][i]), zero=int(g["zero"][i]),
                  hybrid_shard=bool(g["hybrid"][i]), sp=bool(g["sp"][i]),
                  schedule="interleaved" if v > 1 else "1f1b", virtual=v,
                  micro_batch=int(g["mb"][i]), recompute=RECOMPUTE[int(g["rc"][i])],
                  recompute_layers=int(g["rl"][i]), offload_checkpoints=bool(g["off"][i]))


# --- a refusal with a way forward ----------------------------------------------------------------
#: how far a refusal looks for a workable global batch or GPU count, tries a side
NEAREST_TRIES = 24


def no_layout_error(cfg: ModelConfig, gpu: Gpu, seq: int, start: int, shown: str,
                    max_gpus: int, gpus: int | None, only: dict | None) -> PlanError:
    """The refusal when no layout on these GPUs splits the global batch (``layout_grid`` is
    empty; ``shown``: the batches searched, from ``start``), naming the nearest global batches
    below and above ``start`` that
    some layout splits (a data-parallel degree x micro-batch dividing it) and, GPUs pinned,
    the nearest GPU counts (whole nodes, or below one node) that split it: each the first
    found within NEAREST_TRIES candidates a side."""
    words = (f"no valid layout of {cfg.name} on "
             + (f"exactly {gpus}" if gpus else f"at most {max_gpus}")
             + f" GPUs with global batch {shown}" + (f" and {only}" if only else ""))

    def splits(batch: int, count: int | None) -> bool:
        g, _ = layout_grid(cfg, gpu, seq, batch, max_gpus if count is None else count, count,
                           only, None if count else gpu.gpus_per_node)
        return len(g["tp"]) > 0

    # a batch some data-parallel degree divides: the multiples of each degree next to it
    dps = divisors(gpus) if gpus else range(1, min(max_gpus, 4096) + 1)
    near = {m for d in dps for m in ((start // d) * d, -(-start // d) * d) if m > 0} - {start}
    below = sorted((b for b in near if b < start), reverse=True)[:NEAREST_TRIES]
    above = sorted(b for b in near if b > start)[:NEAREST_TRIES]
    found = [b for side in (below, above) for b in [next((x for x in side
                                                          if splits(x, gpus)), None)] if b]
    ways = []
    if found:
        ways.append(f"--global-batch {' or '.join(map(str, found))}")
    if gpus:
        n = gpu.gpus_per_node

        def whole(c: int) -> bool:
            return c < n or c % n == 0
        counts = [next((c for c in side if whole(c) and splits(start, c)), None) for side in (
            range(gpus - 1, 0, -1)[:NEAREST_TRIES * n],
            range(gpus + 1, gpus + NEAREST_TRIES * n + 1))]
        counts = [c for c in counts if c]
        if counts:
            ways.append(f"--gpus {' or '.join(map(str, counts))} for global batch {start}")
    return PlanError(words + ("; nearest that split: " + ", or ".join(ways) if ways else ""))
