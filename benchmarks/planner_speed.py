"""Speed of the planner's layout search: vectorised (numpy over the grid) vs a plain-Python
loop over the same layouts, and the wall time of the 405B command.

    python benchmarks/planner_speed.py [MODEL] [GPU]

The loop evaluates each layout on its own (the same ``evaluate`` on one-layout arrays: the
same formulas without vectorisation) for a sample and reports its rate; the vectorised rate
is over the whole grid, tables excluded (they are built once per query and timed apart).
Rates are per second of process CPU time (one core: numpy's elementwise kernels are single-
threaded), so that other jobs on a shared machine do not distort them; wall times are shown.
"""

from __future__ import annotations

import subprocess
import sys
import time


def main(model: str = "llama-3.1-405b", gpu_name: str = "h100") -> None:
    import numpy as np

    from txcalc import load
    from txcalc.engine.hardware import get_gpu
    from txcalc.parallel.overheads import Overheads
    from txcalc.train.setting import TrainSetting, shard_groups
    from txcalc.train.evaluate import build_tables, evaluate
    from txcalc.train.planner import default_seq, layout_grid

    cfg, gpu = load(model), get_gpu(gpu_name)
    seq = default_seq(cfg)
    s = TrainSetting(cfg, gpu, seq, round(2**22 / seq), overheads=Overheads())
    g, axes = layout_grid(cfg, gpu, seq, s.global_batch, 2**17)
    n = len(g["tp"])
    t0 = time.perf_counter()
    shard, shard_e = shard_groups(g, gpu)
    tables = build_tables(s, *axes, np.unique(np.concatenate([shard, shard_e])))
    t_tables = time.perf_counter() - t0
    best = cpu = float("inf")
    for _ in range(7):
        t0, c0 = time.perf_counter(), time.process_time()
        evaluate(s, tables, g, detail=False)
        best = min(best, time.perf_counter() - t0)
        cpu = min(cpu, time.process_time() - c0)
    vec_rate = n / cpu
    sample = np.random.default_rng(0).choice(n, size=min(n, 2000), replace=False)
    c0 = time.process_time()
    for i in sample:
        evaluate(s, tables, {k: v[i:i + 1] for k, v in g.items()}, detail=False)
    loop_rate = len(sample) / (time.process_time() - c0)
    print(f"{model} on {gpu.name}: {n:,} valid layouts; tables built once in {t_tables:.3f} s")
    print(f"  vectorised : {vec_rate:>14,.0f} layouts/s of CPU time on one core "
          f"({cpu:.3f} s CPU, {best:.3f} s wall for the grid)")
    print(f"  python loop: {loop_rate:>14,.0f} layouts/s  ({len(sample):,} layouts sampled)")
    print(f"  ratio      : {vec_rate / loop_rate:>14,.0f} x")
    cmd = [sys.executable, "-m", "txcalc", "plan", "train", model, "--tokens", "15T", "--gpu",
           gpu_name]
    walls = []
    for _ in range(3):
        t0 = time.perf_counter()
        r = subprocess.run(cmd, capture_output=True, text=True)
        walls.append(time.perf_counter() - t0)
        if r.returncode:
            raise SystemExit(r.stderr)
    print(f"  `txcalc plan train {model} --tokens 15T --gpu {gpu_name}`: "
          f"{min(walls):.2f} s wall (best of 3; target < 2 s)")


if __name__ == "__main__":
    main(*sys.argv[1:])
