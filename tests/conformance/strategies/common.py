"""What the family strategies share: a field left to the HF class default half the time."""

from __future__ import annotations

from hypothesis import strategies as st


def maybe(draw, raw: dict, key: str, strategy) -> None:
    """Set ``raw[key]`` from ``strategy`` or, half the time, leave it to the HF class default."""
    if draw(st.booleans()):
        raw[key] = draw(strategy)


def divisors(n: int) -> list[int]:
    return [d for d in range(1, n + 1) if n % d == 0]
