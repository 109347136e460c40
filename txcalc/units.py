"""Units at the display edge only: the core keeps exact integers (bytes, FLOPs, params).

Memory is displayed in GiB (2**30 bytes), as nvidia-smi and torch count it (an H100's 80
GiB, not "85.9 GB"), always labelled GiB; GB (10**9) is what the user gives (``--gpu-gb``),
link bandwidths (GB/s) and checkpoint files on disk, labelled GB. JSON keeps exact bytes.
"""

from __future__ import annotations

import math

GB = 10**9
GIB = 2**30
_PREFIXES = ((1e18, "E"), (1e15, "P"), (1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k"))


def cdiv(a: int, b: int) -> int:
    """Ceiling division of integers (shard sizes, blocks, KV bytes): exact, no float."""
    return -(-a // b)


def pow2_upto(n: int) -> list[int]:
    """The powers of two from 1 up to n: 1, 2, 4, ... (the planners' degrees)."""
    out, v = [], 1
    while v <= n:
        out.append(v)
        v *= 2
    return out


def divisors(n: int) -> list[int]:
    """Every divisor of n, ascending (the tensor-parallel degrees a head count allows): pairs
    (d, n / d) for d up to the square root, so a batch of 2^22 sequences costs 2^11 trials."""
    low = [d for d in range(1, math.isqrt(n) + 1) if n % d == 0]
    return low + [n // d for d in reversed(low) if d * d != n]


def first_true(pred, lo: int, hi: int, *, cut: int | None = None) -> int | None:
    """The smallest n in (lo, hi] with ``pred(n)``, for a monotone ``pred`` (False, then True)
    known False at lo (or lo below the range) and taken True at hi (not evaluated there): a
    bisection, pred evaluated at most ceil(log2(hi - lo)) times. ``cut``: give up, returning
    None, once some n >= cut is found False (the answer lies above cut)."""
    while hi - lo > 1 and (cut is None or lo < cut):
        mid = (lo + hi) // 2
        if pred(mid):
            hi = mid
        else:
            lo = mid
    return None if cut is not None and lo >= cut else hi


def largest_within(f, limit: int, lo: int, hi: int) -> int:
    """The largest n in [lo, hi] with ``f(n) <= limit``, for a non-decreasing ``f`` (bytes
    against a sequence length or a batch); lo - 1 when f(lo) exceeds it. Regula falsi on the
    integers, safeguarded: each guess interpolates f linearly between the bracket's ends (a
    step's bytes are close to affine in its tokens, so two or three guesses land next to the
    answer), and a guess that did not halve the bracket is followed by a bisection step, so
    f is evaluated at most about 2 log2(hi - lo) + 2 times, and about 6 times on affine bytes
    where ``first_true``'s bisection takes log2(hi - lo) (24 for a 2^24-token range). The
    answer is the same as the bisection's whenever f is monotone."""
    f_lo = f(lo)
    if f_lo > limit:
        return lo - 1
    f_hi = f(hi)
    if f_hi <= limit:
        return hi
    bisect = False
    while hi - lo > 1:
        if bisect or f_hi <= f_lo:
            x = (lo + hi) // 2
        else:  # where the chord from (lo, f_lo) to (hi, f_hi) crosses the limit
            x = lo + (limit - f_lo) * (hi - lo) // (f_hi - f_lo)
            x = min(max(x, lo + 1), hi - 1)
        width = hi - lo
        fx = f(x)
        if fx <= limit:
            lo, f_lo = x, fx
        else:
            hi, f_hi = x, fx
        bisect = not bisect and 2 * (hi - lo) > width
    return lo


def fewest(pred, hi: int, *, cut: int | None = None) -> int | None:
    """The smallest n in [1, hi] with ``pred(n)``, for a monotone ``pred`` (False, then True):
    pred(1), pred(2), pred(4), ... (hi last) until one holds, then ``first_true`` between it and
    the last that failed, so a small answer costs few evaluations (a replica count, a batch).
    None when pred(hi) fails too, or, with ``cut``, once some n >= cut fails."""
    lo, n = 0, 1
    while not pred(n):
        lo = n
        if n >= hi or (cut is not None and lo >= cut):
            return None
        n = min(2 * n, hi)
    return first_true(pred, lo, n, cut=cut)


def error_pct(predicted: float, measured: float) -> float:
    """Prediction error in percent, one sign everywhere: (predicted - measured) / measured
    x 100. Positive: txcalc predicts more than was measured. When nothing was measured: 0 if
    nothing was predicted either, else +-100 (finite, so that JSON stays strict)."""
    if measured == 0:
        return 0.0 if predicted == 0 else math.copysign(100.0, predicted)
    return (predicted - measured) / measured * 100.0


def scale(largest: float) -> tuple[float, str]:
    """(divisor, prefix) that puts ``largest`` between 1 and 1000: 3e12 -> (1e12, 'T')."""
    for div, prefix in _PREFIXES:
        if abs(largest) >= div:
            return div, prefix
    return 1.0, ""


def human(n: int | float, unit: str = "") -> str:
    """1234567 -> '1.23 M'. Decimal prefixes (GB = 1e9); from 1e18 on, '3.81e+25 FLOP'."""
    if abs(n) >= 1e18:
        return f"{n:.2e} {unit}".rstrip()
    div, prefix = scale(n)
    if div == 1.0:
        return f"{n:,} {unit}".rstrip()
    return f"{n / div:,.2f} {prefix}{unit}"


def gb(n_bytes: int | float) -> str:
    """Bytes as decimal gigabytes: 160000000000 -> '160.00 GB'."""
    return f"{n_bytes / GB:,.2f} GB"


def gib(n_bytes: int | float) -> str:
    """Bytes as binary gibibytes, how memory is displayed: 85899345920 -> '80.00 GiB'."""
    return f"{n_bytes / GIB:,.2f} GiB"


def plural(n: int, word: str) -> str:
    """plural(1, 'GPU') -> '1 GPU'; plural(16384, 'GPU') -> '16,384 GPUs'."""
    return f"{n:,} {word}{'' if n == 1 else 's'}"
