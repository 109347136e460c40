"""Wall time of `txcalc params llama-3.1-405b` (target < 0.5 s) against the bare interpreter.

Run: python3 benchmarks/cli_speed.py. Prints the median of 5 runs and the ratio to
`python3 -c pass` (the floor any Python CLI pays).
"""

import statistics
import subprocess
import sys
import time


def median_wall(argv, n=5):
    times = []
    for _ in range(n):
        t = time.perf_counter()
        subprocess.run(argv, check=True, capture_output=True)
        times.append(time.perf_counter() - t)
    return statistics.median(times)


if __name__ == "__main__":
    base = median_wall([sys.executable, "-c", "pass"])
    for args in (["params", "llama-3.1-405b"], ["params", "deepseek-v3"],
                 ["flops", "llama-3.1-405b", "--seq", "8192"],
                 ["memory", "llama-3.1-405b", "--seq", "8192"]):
        t = median_wall([sys.executable, "-m", "txcalc.cli", *args])
        print(f"txcalc {' '.join(args):40s} {t:6.3f} s  ({t / base:5.1f}x python -c pass "
              f"{base:.3f} s)  target < 0.5 s: {'ok' if t < 0.5 else 'MISSED'}")
