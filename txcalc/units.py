"""Units at the display edge only: the core keeps exact integers (bytes, FLOPs, params).

GB means 10**9 bytes everywhere txcalc displays memory; GiB (2**30) is never used.
"""

from __future__ import annotations

GB = 10**9


def human(n: int | float, unit: str = "") -> str:
    """1234567 -> '1.23 M'. Decimal prefixes (GB = 1e9)."""
    for div, prefix in ((1e15, "P"), (1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k")):
        if abs(n) >= div:
            return f"{n / div:,.2f} {prefix}{unit}"
    return f"{n:,} {unit}".rstrip()


def gb(n_bytes: int | float) -> str:
    """Bytes as decimal gigabytes: 160000000000 -> '160.00 GB'."""
    return f"{n_bytes / GB:,.2f} GB"
