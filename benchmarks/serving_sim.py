"""Speed of the serving simulator (txcalc/serve/sim.py): a one-hour Poisson trace at 50
requests/s (180,000 requests) on one replica of Llama-3-8B on an H100 (a load it sustains),
prompts of exponentially distributed length (mean 500 tokens, at most 4,000) and outputs of
mean 100 tokens (at most 2,000).

Run: python3 benchmarks/serving_sim.py. Prints the wall time (target < 5 s on one core) and the
requests simulated per second of wall time.
"""

import time

import numpy as np

import txcalc
from txcalc.serve.sim import simulate, step_model

HOUR_S = 3600
RATE = 50.0


def trace(n: int, seed: int = 0):
    rng = np.random.default_rng(seed)
    ins = np.maximum(1, rng.exponential(500, n)).astype(np.int64)
    outs = np.maximum(1, rng.exponential(100, n)).astype(np.int64)
    return np.minimum(ins, 4000), np.minimum(outs, 2000)


if __name__ == "__main__":
    sm = step_model(txcalc.load("llama-3-8b"), "h100", max_model_len=8192)
    n = int(HOUR_S * RATE)
    ins, outs = trace(n)
    t = time.perf_counter()
    r = simulate(sm, n, ins, outs, rate=RATE, seed=1)
    wall = time.perf_counter() - t
    print(f"{n:,} requests ({r.duration_s / 3600:.2f} h simulated, {r.steps:,} steps) in "
          f"{wall:.2f} s: {n / wall:,.0f} requests simulated per second; target < 5 s: "
          f"{'ok' if wall < 5 else 'MISSED'}")
    print(f"  TTFT p50/p99 {r.ttft(50):.3f}/{r.ttft(99):.3f} s, ITL p50/p99 "
          f"{r.itl(50) * 1e3:.1f}/{r.itl(99) * 1e3:.1f} ms, {r.output_tokens_per_s:,.0f} "
          f"output tokens/s, {r.requests_per_s:.2f} requests/s")
