"""``units.fewest`` / ``units.first_true``: the one "smallest n whose predicate holds" search
(replicas of a serving plan and of each disaggregated pool, the speculation break-even
batch, fit's longest sequence and largest batch), against a brute-force scan."""

from __future__ import annotations

import pytest

from txcalc.units import fewest, first_true


def brute(pred, hi: int):
    return next((n for n in range(1, hi + 1) if pred(n)), None)


def mismatches(search, his=(1, 2, 3, 7, 8, 64, 100, 4096)) -> list:
    """(hi, answer) where ``search(pred, hi)`` differs from the scan, over every threshold
    predicate n >= a (a from 1 to hi + 1: none holds when a > hi)."""
    out = []
    for hi in his:
        for a in list(range(1, min(hi, 70) + 2)) + [hi, hi + 1]:
            got = search(lambda n, a=a: n >= a, hi)
            if got != brute(lambda n, a=a: n >= a, hi):
                out.append((hi, a, got))
    return out


def test_fewest_equals_the_scan():
    assert mismatches(fewest) == []


def test_the_scan_check_can_fail():
    """A search that stops at the first power of two that holds (no bisection) is caught."""
    def doubling_only(pred, hi):
        n = 1
        while n <= hi:
            if pred(n):
                return n
            n *= 2
        return None
    assert mismatches(doubling_only) != []


def test_fewest_evaluates_few_and_never_above_hi():
    seen = []

    def pred(n):
        seen.append(n)
        return n >= 37
    assert fewest(pred, 4096) == 37
    assert max(seen) <= 64 and len(seen) <= 13  # 1, 2, ..., 64, then a bisection of (32, 64]
    seen.clear()
    assert fewest(pred, 36) is None and max(seen) == 36


def test_cut_gives_up_once_an_n_past_it_fails():
    seen = []

    def pred(n):
        seen.append(n)
        return n >= 300
    assert fewest(pred, 4096, cut=100) is None and max(seen) == 128  # 128 >= cut failed
    assert fewest(lambda n: n >= 90, 4096, cut=100) == 90
    assert fewest(lambda n: n >= 101, 4096, cut=100) is None  # 100 failed: above the cut


@pytest.mark.parametrize("lo,hi,a", [(0, 1, 1), (3, 10, 4), (3, 10, 10), (0, 1024, 513)])
def test_first_true_bisects_between_a_false_and_a_true(lo, hi, a):
    seen = []

    def pred(n):
        seen.append(n)
        return n >= a
    assert first_true(pred, lo, hi) == a
    assert all(lo < n < hi for n in seen)  # neither end is evaluated
