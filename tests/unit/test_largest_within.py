"""``units.largest_within``: fit's longest sequence and largest batch (the largest n whose
bytes stay within the GPU), against a scan over every n, on monotone functions the
interpolation guesses well (affine, rounded up to segments) and badly (steps, convex,
saturating, flat runs), and counting the evaluations it saves over bisection."""

from __future__ import annotations

import math

from hypothesis import given, settings
from hypothesis import strategies as st

from txcalc.units import largest_within


def scan(f, limit: int, lo: int, hi: int) -> int:
    """The answer by brute force: the last n in [lo, hi] with f(n) <= limit, lo - 1 if none."""
    return max((n for n in range(lo, hi + 1) if f(n) <= limit), default=lo - 1)


SHAPES = {
    "affine": lambda a, b: (lambda n: a * n + b),
    "segments": lambda a, b: (lambda n: -(-(a * n + b) // 2_097_152) * 2_097_152),
    "convex": lambda a, b: (lambda n: a * n * n + b),
    "steps": lambda a, b: (lambda n: (n // (a + 1)) * 1000 + b),
    "saturating": lambda a, b: (lambda n: int(1e6 * (1 - math.exp(-n / (a + 1)))) + b),
    "jump": lambda a, b: (lambda n: b if n < a else b + 10**12),
}


@settings(max_examples=300, deadline=None)
@given(shape=st.sampled_from(sorted(SHAPES)), a=st.integers(1, 5_000),
       b=st.integers(0, 10**7), hi=st.integers(1, 3_000), limit=st.integers(0, 10**9))
def test_equals_the_scan(shape, a, b, hi, limit):
    f = SHAPES[shape](a, b)
    assert largest_within(f, limit, 1, hi) == scan(f, limit, 1, hi)


def test_the_scan_check_can_fail():
    """A search that trusts its first interpolated guess is caught by the same check."""
    def one_guess(f, limit, lo, hi):
        f_lo, f_hi = f(lo), f(hi)
        if f_lo > limit:
            return lo - 1
        if f_hi <= limit:
            return hi
        return lo + (limit - f_lo) * (hi - lo) // (f_hi - f_lo)
    f = SHAPES["convex"](3, 0)
    assert one_guess(f, 10_000, 1, 1_000) != scan(f, 10_000, 1, 1_000)


def test_few_evaluations_on_affine_bytes():
    """Affine bytes over a 2^24 range: a handful of evaluations, where bisection takes 24;
    never more than about twice bisection's on a shape it guesses badly."""
    calls = []

    def counted(f):
        def g(n):
            calls.append(n)
            return f(n)
        return g
    assert largest_within(counted(lambda n: 123_457 * n + 9_000_000_000), 24 * 2**30,
                          1, 2**24) == (24 * 2**30 - 9_000_000_000) // 123_457
    assert len(calls) <= 6
    calls.clear()
    largest_within(counted(SHAPES["jump"](777_777, 0)), 10, 1, 2**24)
    assert len(calls) <= 2 * 24 + 2
