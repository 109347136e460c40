"""Units at the display edge only: the core keeps exact integers (bytes, FLOPs, params).

GB means 10**9 bytes everywhere txcalc displays memory; GiB (2**30) is never used.
"""

from __future__ import annotations

import math

GB = 10**9
_PREFIXES = ((1e18, "E"), (1e15, "P"), (1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k"))


def cdiv(a: int, b: int) -> int:
    """Ceiling division of integers (shard sizes, blocks, KV bytes): exact, no float."""
    return -(-a // b)


def pow2_upto(n: int) -> list[int]:
    out, v = [], 1
    while v <= n:
        out.append(v)
        v *= 2
    return out


def divisors(n: int) -> list[int]:
    return [d for d in range(1, n + 1) if n % d == 0]


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


def plural(n: int, word: str) -> str:
    """plural(1, 'GPU') -> '1 GPU'; plural(16384, 'GPU') -> '16,384 GPUs'."""
    return f"{n:,} {word}{'' if n == 1 else 's'}"
