"""Speed of the serving simulator (txcalc/serve/batching.py): a one-hour Poisson trace at 50
requests/s (180,000 requests) on one replica of Llama-3-8B on an H100 (a load it sustains),
prompts of exponentially distributed length (mean 500 tokens, at most 4,000) and outputs of
mean 100 tokens (at most 2,000), under txcalc's default scheduler and each engine profile
(serve/sched.py), and once more under vllm with a front-end stage (FRONT: the API server's
serial per-request and per-token costs, serve/batching.py).

Run: python3 benchmarks/serving_sim.py. Prints the CPU seconds of each run (target < 5 s on one
core; CPU time, not wall time, so a loaded machine does not inflate it) and the requests
simulated per CPU second.
"""

import time

import numpy as np

import txcalc
from txcalc.serve.sched import ENGINE_PROFILES
from txcalc.serve.sim import simulate, step_model

HOUR_S = 3600
RATE = 50.0
TARGET_CPU_S = 5.0
#: front-end costs for the last run (seconds per request, per output token): illustrative
FRONT = (0.001, 5e-5)


def trace(n: int, seed: int = 0):
    rng = np.random.default_rng(seed)
    ins = np.maximum(1, rng.exponential(500, n)).astype(np.int64)
    outs = np.maximum(1, rng.exponential(100, n)).astype(np.int64)
    return np.minimum(ins, 4000), np.minimum(outs, 2000)


def run(engine=None, front=(0.0, 0.0)):
    """(the SimResult, CPU seconds) of the hour under ``engine``, with the front-end costs
    ``front`` (per request, per output token)."""
    sm = step_model(txcalc.load("llama-3-8b"), "h100", max_model_len=8192,
                    front_request_s=front[0], front_token_s=front[1])
    n = int(HOUR_S * RATE)
    ins, outs = trace(n)
    t = time.process_time()
    r = simulate(sm, n, ins, outs, rate=RATE, seed=1, engine=engine)
    return r, time.process_time() - t


if __name__ == "__main__":
    for engine, front in ((None, (0.0, 0.0)), *((e, (0.0, 0.0)) for e in ENGINE_PROFILES),
                          ("vllm", FRONT)):
        r, cpu = run(engine, front)
        tag = f" + front end {front[0] * 1e3:g} ms / {front[1] * 1e6:g} us" if any(front) else ""
        print(f"{engine or 'default'}{tag}: {r.n_requests:,} requests ({r.duration_s / 3600:.2f} h "
              f"simulated, {r.steps:,} steps) in {cpu:.2f} CPU s: "
              f"{r.n_requests / cpu:,.0f} requests per CPU second; target < {TARGET_CPU_S:g} s: "
              f"{'ok' if cpu < TARGET_CPU_S else 'MISSED'}")
        print(f"  TTFT mean/p99 {r.ttft_s.mean():.3f}/{r.ttft(99):.3f} s, ITL mean/p99 "
              f"{r.itl_mean_s * 1e3:.1f}/{r.itl(99) * 1e3:.1f} ms, "
              f"{r.output_tokens_per_s:,.0f} output tokens/s, {r.requests_per_s:.2f} requests/s, "
              f"saturated {r.saturated}, preemptions {r.preemptions}")
