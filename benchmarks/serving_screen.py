"""Speed of the serving plan's screen (txcalc/serve/screen.py): the SLO searches of
``plan infer`` with and without it, the README's worked question first.

    python benchmarks/serving_screen.py [--quick]

For each question: CPU seconds screened and unscreened (process CPU time, so that other jobs
on a shared machine do not distort the ratio; wall times shown too), their ratio, the
simulations each ran, and whether the two best layouts are identical (they must be).
``--quick`` skips the README question's unscreened run (about a minute of CPU).
"""

from __future__ import annotations

import sys
import time

import txcalc

#: (model, gpu, input, output, load and SLOs): the README's question, then smaller ones
QUESTIONS = [
    ("llama-3.1-70b", "h100", 5000, 500, dict(rate=20, ttft_p99_s=2, itl_p99_s=0.05)),
    ("llama-3-8b", "h100", 2000, 200, dict(rate=30, ttft_p99_s=1, itl_p99_s=0.03)),
    ("mixtral-8x7b", "h100", 2000, 200, dict(rate=5, ttft_p99_s=2, itl_p99_s=0.05)),
    ("llama-3.2-3b", "l40s", 1000, 100, dict(rate=3, ttft_p99_s=1, itl_p99_s=0.02)),
]


def timed(screen: bool, model, gpu, n_in, n_out, kw):
    from txcalc.serve import disagg as serving_disagg, plan as serving_plan, sim as serving_sim
    count = [0]
    sim = serving_sim.simulate

    def counting(*a, **k):
        count[0] += 1
        return sim(*a, **k)
    serving_sim.simulate = serving_disagg.simulate = counting
    try:
        w, c = time.perf_counter(), time.process_time()
        p = serving_plan.plan_serving(txcalc.load(model), gpu, n_in, n_out, price_per_gpu_hour=2.5,
                                      screen=screen, **kw)
        return p, time.process_time() - c, time.perf_counter() - w, count[0]
    finally:
        serving_sim.simulate = serving_disagg.simulate = sim


def main(quick: bool = False) -> None:
    for i, (model, gpu, n_in, n_out, kw) in enumerate(QUESTIONS):
        a, cpu_a, wall_a, sims_a = timed(True, model, gpu, n_in, n_out, kw)
        b = a if quick and i == 0 else None
        line = (f"{model} on {gpu}, {n_in:,}/{n_out:,} tokens, "
                + ", ".join(f"{k} {v:g}" for k, v in kw.items()) + ":")
        print(line)
        print(f"  screened   {cpu_a:7.2f} s CPU ({wall_a:6.2f} s wall), {sims_a:4d} simulations:"
              f" {a.best.total_gpus} GPUs, tp {a.best.tp}, {a.best.mode}")
        if b is None:
            b, cpu_b, wall_b, sims_b = timed(False, model, gpu, n_in, n_out, kw)
            same = a.best.to_json() == b.best.to_json()
            print(f"  unscreened {cpu_b:7.2f} s CPU ({wall_b:6.2f} s wall), {sims_b:4d} "
                  f"simulations: {b.best.total_gpus} GPUs, tp {b.best.tp}, {b.best.mode}")
            print(f"  ratio {cpu_b / cpu_a:5.1f}x faster, {sims_b / sims_a:4.1f}x fewer "
                  f"simulations; same answer: {'yes' if same else 'NO'}")


if __name__ == "__main__":
    main("--quick" in sys.argv[1:])
